// tests/test_cli_files.cpp: issue 34's input-file rules, run as the built `flashbits` binary:
// no output over any input file (a directory capture's files included), a size cap on every
// whole-file read, non-UTF-8 paths and metadata in --json and in error lines, the short SFU
// line of replay, and the help's hardware status.
//
// Independent facts checked: the exit codes and message forms of docs/CLI.md; the bytes of an
// input before and after a refused run; /dev/zero never ends, so a read without a cap runs out
// of memory (the runs here are under `ulimit -v`, so such a bug shows as exit 3 or a kill,
// not as a machine out of memory); JSON parsed by nlohmann from the command's stdout; which
// tensor-core forms were validated on the H200 (docs/DESIGN.md §11).
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli_run.hpp"
#include "tests/test_scale.hpp"

namespace {
using fb_test::run;
using fb_test::Run;
using fb_test::scratch;
using fb_test::slurp;

bool one_error(const Run& r, const std::string& needle) {
  return std::count(r.err.begin(), r.err.end(), '\n') == 1 && r.err.rfind("error: ", 0) == 0 &&
         r.err.find(needle) != std::string::npos;
}

// A numpy .npy file (NEP 1, version 1.0) of uint16 bf16 bit patterns in shape [1, seq, 1, dim]
// (flash_attn's bshd layout), header padded to 64 bytes as numpy writes it.
void write_bf16_npy(const std::filesystem::path& path, int seq, int dim, std::uint16_t salt) {
  std::string header = "{'descr': '<u2', 'fortran_order': False, 'shape': (1, " + std::to_string(seq) + ", 1, " +
                       std::to_string(dim) + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8);
  bytes += static_cast<char>(header.size() & 0xff);
  bytes += static_cast<char>(header.size() >> 8);
  bytes += header;
  // Small bf16 values: +-1, +-0.5, +-0.25, +-2 (exact in every format involved).
  const std::uint16_t values[] = {0x3f80, 0x3f00, 0x3e80, 0x4000, 0xbf80, 0xbf00, 0xbe80, 0xc000};
  for (int i = 0; i < seq * dim; ++i) {
    const std::uint16_t v = values[(i * 5 + salt) % 8];
    bytes += static_cast<char>(v & 0xff);
    bytes += static_cast<char>(v >> 8);
  }
  std::ofstream(path, std::ios::binary) << bytes;
}

// A directory capture as the issue's: query.npy, key.npy, value.npy, out.npy.
std::filesystem::path capture_dir(const std::string& name) {
  const auto dir = scratch() / name;
  std::filesystem::create_directories(dir);
  write_bf16_npy(dir / "query.npy", 16, 8, 1);
  write_bf16_npy(dir / "key.npy", 16, 8, 2);
  write_bf16_npy(dir / "value.npy", 16, 8, 3);
  write_bf16_npy(dir / "out.npy", 16, 8, 4);
  return dir;
}

const std::string kBare = " --source unknown --dtype bf16 --layout bshd";

std::string small_trace(const std::string& name) {
  const std::string path = (scratch() / name).string();
  REQUIRE(run("make-trace --model fa2-sm80 --scenario sink --seqlen 32 --headdim 16 --out '" + path + "'").code == 0);
  return path;
}

// The line of `text` that starts with `prefix`, or "".
std::string line_starting(const std::string& text, const std::string& prefix) {
  const auto at = text.rfind("\n" + prefix);
  const std::size_t from = text.rfind(prefix, 0) == 0 ? 0 : at == std::string::npos ? std::string::npos : at + 1;
  if (from == std::string::npos) return "";
  return text.substr(from, text.find('\n', from) - from);
}

}  // namespace

TEST_CASE("issue 34: an output over a file inside a directory input is refused, and the file is untouched") {
  const auto dir = capture_dir("npy_capture");
  const std::string query_before = slurp((dir / "query.npy").string());
  const Run over = run("import " + dir.string() + kBare + " --out " + (dir / "query.npy").string());
  CHECK(over.code == 2);
  CHECK(one_error(over, "is the same file as the capture " + (dir / "query.npy").string()));
  CHECK(slurp((dir / "query.npy").string()) == query_before);
  // The same file by another spelling of the path.
  const Run dotted = run("import " + dir.string() + kBare + " --out " + (dir / "." / "key.npy").string());
  CHECK(dotted.code == 2);
  // Beside the inputs is fine: the capture imports.
  const Run beside = run("import " + dir.string() + kBare + " --out " + (dir / "trace.safetensors").string());
  CHECK(beside.code == 0);
  // A model that names another dtype than the capture's (standard-fp16 for bf16 values) is
  // refused before anything is written: replay would refuse the trace import wrote.
  const auto fp16_model_out = scratch() / "fp16_model.safetensors";
  const Run other_dtype =
      run("import " + dir.string() + kBare + " --model standard-fp16 --out " + fp16_model_out.string());
  CHECK(other_dtype.code == 2);
  CHECK(one_error(other_dtype, "standard-fp16 reads fp16 inputs, not the trace's bf16"));
  CHECK_FALSE(std::filesystem::exists(fp16_model_out));
  CHECK(run("import " + dir.string() + kBare + " --model standard-bf16 --out " + fp16_model_out.string()).code == 0);

  // replay of a directory capture: --plot over its out.npy.
  const auto with_out = capture_dir("npy_capture_out");
  const std::string out_before = slurp((with_out / "out.npy").string());
  const std::string replay = "replay " + with_out.string() + kBare + " --model fa2-sm80 --row 1 ";
  const Run plot_over = run(replay + "--plot " + (with_out / "out.npy").string());
  CHECK(plot_over.code == 2);
  CHECK(one_error(plot_over, "is the same file as the trace " + (with_out / "out.npy").string()));
  CHECK(slurp((with_out / "out.npy").string()) == out_before);
  CHECK(one_error(run(replay + "--sfu-record " + (with_out / "query.npy").string()), "same file"));
  // --plot over an FBSFU1 table that --recipe loads (a copy of the shipped ex2 table).
  const auto table = scratch() / "ex2_copy.fbsfu";
  std::filesystem::copy_file(std::string(FLASHBITS_SOURCE_DIR) + "/emu/tables/ex2_h200.fbsfu", table,
                             std::filesystem::copy_options::overwrite_existing);
  const std::string table_before = slurp(table.string());
  std::ofstream(scratch() / "table_recipe.json") << R"({"sfu": {"ex2": "ex2_copy.fbsfu"}})";
  const Run over_table = run("replay " + small_trace("table_trace.safetensors") + " --recipe " +
                             (scratch() / "table_recipe.json").string() + " --plot " + table.string());
  CHECK(over_table.code == 2);
  CHECK(one_error(over_table, "is the same file as the recipe's table " + table.string()));
  CHECK(slurp(table.string()) == table_before);
  // The tables a named SFU set loads are inputs no option names: --plot over one is refused
  // whether --sfu names the set or auto picks it for an H200 capture. A copy of the table
  // directory (FLASHBITS_SFU_TABLES) stands in for the shipped one, which a bug would destroy.
  const auto tables = scratch() / "sfu_tables";
  std::filesystem::create_directories(tables);
  std::filesystem::copy_file(std::string(FLASHBITS_SOURCE_DIR) + "/emu/tables/ex2_h200.fbsfu",
                             tables / "ex2_h200.fbsfu", std::filesystem::copy_options::overwrite_existing);
  const std::string env = "FLASHBITS_SFU_TABLES='" + tables.string() + "' ";
  const std::string set_table = (tables / "ex2_h200.fbsfu").string();
  const std::string set_table_before = slurp(set_table);
  const std::string h200 = std::string(FLASHBITS_SOURCE_DIR) + "/traces/hw/h200/fa2/fa2_sink_d64.safetensors";
  for (const std::string& sfu : {std::string(" --sfu hw-sm90"), std::string("")}) {
    const Run over_set_table = run("replay " + h200 + sfu + " --row 0 --plot " + set_table, env);
    CHECK(over_set_table.code == 2);
    CHECK(one_error(over_set_table, "is the same file as flashbits' SFU table " + set_table));
    CHECK(slurp(set_table) == set_table_before);
  }
  // make-trace's --out too (every output option goes through the same check).
  CHECK(one_error(run("make-trace --model fa2-sm80 --seqlen 8 --headdim 8 --out " + set_table, env),
                  "flashbits' SFU table"));
  CHECK(slurp(set_table) == set_table_before);
  // A plot beside it is written (the replay itself may mismatch: exit 0 or 1).
  const Run plot_beside = run(replay + "--plot " + (scratch() / "capture_plot.svg").string());
  CHECK((plot_beside.code == 0 || plot_beside.code == 1));
  CHECK(slurp((scratch() / "capture_plot.svg").string()).rfind("<svg", 0) == 0);
  // A table of the set that is of another function, or corrupt, is the user's table directory
  // at fault: exit 2 naming the set and the file (it was an internal error, exit 3).
  const std::string rcp_table = (tables / "rcp_h200.fbsfu").string();
  std::filesystem::copy_file(set_table, rcp_table, std::filesystem::copy_options::overwrite_existing);
  for (const std::string& sfu : {std::string(" --sfu hw-sm90"), std::string("")}) {
    CAPTURE(sfu);
    // "--sfu hw-sm90: FILE: ..." when named, "SFU set hw-sm90: FILE: ..." when auto picked it.
    CHECK(one_error(run("replay " + h200 + sfu + " --row 0", env),
                    "hw-sm90: " + rcp_table + ": is a table of ex2, not rcp"));
  }
  std::ofstream(rcp_table, std::ios::binary | std::ios::trunc) << "FBSFU";
  const Run corrupt = run("replay " + h200 + " --sfu hw-sm90 --row 0", env);
  CHECK(corrupt.code == 2);
  CHECK(one_error(corrupt, "--sfu hw-sm90: " + rcp_table + ": "));
  std::filesystem::remove(rcp_table);
}

TEST_CASE("issue 34: whole-file reads have a size cap: /dev/zero and oversized files are exit 2 naming the cap") {
  // 8 GB of address space: far more than any capped read needs, far less than an unbounded one.
  // Not under AddressSanitizer, whose shadow memory alone reserves terabytes of address space:
  // there the runs are unlimited (an unbounded read would still be caught, by time or memory).
  const std::string limited = fb_test::sanitizer_scale() ? "" : "ulimit -v 8000000; ";
  const Run recipe = run("bias-test --model fa2-sm80 --trials 2 --seqlen 16 --headdim 16 --recipe /dev/zero", limited);
  CHECK(recipe.code == 2);
  CHECK(one_error(recipe, "/dev/zero: larger than the 16 MiB cap for a recipe file"));
  const Run merge = run("merge /dev/zero", limited);
  CHECK(merge.code == 2);
  CHECK(one_error(merge, "/dev/zero: larger than the 256 MiB cap for a sweep result file"));
  const std::string trace = small_trace("cap_trace.safetensors");
  const Run values = run("replay " + trace + " --sfu-values /dev/zero", limited);
  CHECK(values.code == 2);
  CHECK(one_error(values, "/dev/zero: larger than the 256 MiB cap for an FBSFUVAL1 file"));
  const Run batch = run("op --batch /dev/zero", limited);
  CHECK(batch.code == 2);
  CHECK(one_error(batch, "line 1: longer than 16 MiB"));
  // A regular file past the cap is refused by its size, before any read (sparse: no disk used).
  const auto big = scratch() / "big_recipe.json";
  std::ofstream(big) << "{}";
  std::filesystem::resize_file(big, (std::uintmax_t{16} << 20) + 1);
  const Run big_recipe = run("bias-test --model fa2-sm80 --trials 2 --seqlen 16 --headdim 16 --recipe " + big.string());
  CHECK(big_recipe.code == 2);
  CHECK(one_error(big_recipe, "16777217 bytes, larger than the 16 MiB cap for a recipe file"));
}

TEST_CASE("issue 34: a path or metadata string that is not UTF-8 is escaped in --json and in error lines") {
  // replay --json of a trace whose path holds byte 0xff.
  const std::string trace = small_trace("t\xff.safetensors");
  const Run r = run("replay '" + trace + "' --json");
  CHECK(r.code == 0);
  CHECK(r.err.empty());
  nlohmann::json j;
  REQUIRE_NOTHROW(j = nlohmann::json::parse(r.out));
  CHECK(j["trace"].get<std::string>().ends_with("t\\xff.safetensors"));

  // --source of a bare capture, carried into the replay's JSON.
  const auto dir = capture_dir("npy_capture_source");
  const Run source = run("replay " + dir.string() + " --source 'cuda:GPU\xff' --dtype bf16 --layout bshd " +
                         "--model fa2-sm80 --row 0 --json");
  CHECK((source.code == 0 || source.code == 1));
  REQUIRE_NOTHROW(j = nlohmann::json::parse(source.out));
  CHECK(j["source"] == "cuda:GPU\\xff");

  // probe-check --json of a probe file whose path holds byte 0xff (a cut of the shipped file).
  const std::string shipped = std::string(FLASHBITS_SOURCE_DIR) + "/traces/hw/probes_h200.fbp";
  const std::string probes = (scratch() / "p\xff.fbp").string();
  REQUIRE(run("probe-check " + shipped + " --sample-out '" + probes + "' --sample-per-batch 1").code == 0);
  const Run probe = run("probe-check '" + probes + "' --json");
  CHECK(probe.code == 0);
  REQUIRE_NOTHROW(j = nlohmann::json::parse(probe.out));
  CHECK(j["file"].get<std::string>().ends_with("p\\xff.fbp"));

  // Error lines show such bytes escaped, never raw: a missing path, an unknown subcommand, a
  // probe-check error (printed by its own reader), a control character in an echoed word.
  for (const auto& args_needle : std::vector<std::pair<std::string, std::string>>{
           {"replay '" + (scratch() / "missing\xff.safetensors").string() + "'", "missing\\xff.safetensors"},
           {"'swe\xff'", "unknown subcommand 'swe\\xff'"},
           {"probe-check '" + (scratch() / "missing\xfe.fbp").string() + "'", "missing\\xfe.fbp"},
           {"op add fp32 rne '0x3f80\x1b[31m' 0x3f800000", "0x3f80\\x1b[31m"}}) {
    // Plain names: doctest's CAPTURE cannot take a structured binding under clang 14.
    const std::string& args = args_needle.first;
    const std::string& needle = args_needle.second;
    CAPTURE(args);
    const Run e = run(args);
    CHECK(e.code == 2);
    CHECK(one_error(e, needle));
    CHECK(e.err.find_first_of("\xff\xfe\x1b") == std::string::npos);
  }
}

TEST_CASE("issue 34: replay's SFU line is one short line without paths; --verbose and the JSON have the details") {
  const std::string trace = small_trace("sfu_line.safetensors");
  // The shipped H200 ex2 table alone (loading the whole hw-sm90 set takes seconds).
  const std::string recipe = (scratch() / "h200_ex2.json").string();
  std::ofstream(recipe) << R"({"sfu": {"ex2": ")" << FLASHBITS_SOURCE_DIR << R"(/emu/tables/ex2_h200.fbsfu"}})";
  const std::string replay = "replay " + trace + " --recipe " + recipe;
  const Run plain = run(replay);
  REQUIRE((plain.code == 0 || plain.code == 1));
  const std::string line = line_starting(plain.out, "SFU model: ");
  CAPTURE(line);
  CHECK(line.size() <= 160);
  CHECK(line.find('/') == std::string::npos);
  CHECK(line.rfind("SFU model: ex2 table ex2_h200.fbsfu (measured), rcp correct (UNMEASURED)", 0) == 0);
  const std::string verbose = line_starting(run(replay + " --verbose").out, "SFU model: ");
  CHECK(verbose.find("emu/tables/ex2_h200.fbsfu") != std::string::npos);
  CHECK(verbose.find("measured on hardware") != std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(run(replay + " --json").out);
  CHECK(j["sfu"].get<std::string>().find("emu/tables/ex2_h200.fbsfu") != std::string::npos);
  CHECK("SFU model: " + j["sfu_summary"].get<std::string>() == line.substr(0, line.find("  [warning")));
  // The default (correct) SFU models: one short line too, saying they are unmeasured.
  const std::string correct = line_starting(run("replay " + trace).out, "SFU model: ");
  CHECK(correct.rfind("SFU model: ex2 correct (UNMEASURED), rcp correct (UNMEASURED)", 0) == 0);
  CHECK(correct.size() <= 160);
}

TEST_CASE("issue 34: the help states which tensor-core models were validated on hardware") {
  for (const std::string args : {"--help", "dot --help"}) {
    CAPTURE(args);
    const Run r = run(args);
    CHECK(r.code == 0);
    CHECK(r.out.find("not yet validated") == std::string::npos);
    CHECK(r.out.find("sm90 forms validated on an H200") != std::string::npos);
  }
}

// Found by the bad-input audit: a FIFO that no process writes to made merge, --recipe and
// replay --sfu-values block in open() forever. It is exit 2 at once; a pipe with a writer
// (`cat shard | flashbits merge /dev/stdin`) is still read.
TEST_CASE("a FIFO with no writer is exit 2 at once; a pipe with one is read") {
  const auto fifo = scratch() / "no_writer.fifo";
  std::filesystem::remove(fifo);
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const std::string path = fifo.string();
  const Run merge = run("merge " + path, "timeout 20 ");
  CHECK(merge.code == 2);
  CHECK(one_error(merge, path + ": a FIFO with nothing to read (no process writes to it)"));
  const Run recipe =
      run("bias-test --model fa2-sm80 --trials 2 --seqlen 16 --headdim 16 --recipe " + path, "timeout 20 ");
  CHECK(recipe.code == 2);
  CHECK(one_error(recipe, "no process writes to it"));
  const std::string trace = small_trace("fifo_trace.safetensors");
  const Run values = run("replay " + trace + " --sfu-values " + path, "timeout 20 ");
  CHECK(values.code == 2);
  CHECK(one_error(values, "no process writes to it"));
  // The readers that stream (batch files) and the one that maps (SFU dumps), found by the
  // fourth audit still waiting.
  for (const std::string& cmd : {"op --batch " + path, "dot --batch " + path}) {
    CAPTURE(cmd);
    const Run batch = run(cmd, "timeout 20 ");
    CHECK(batch.code == 2);
    CHECK(one_error(batch, path + ": a FIFO with nothing to read (no process writes to it)"));
  }
  const Run dump = run("replay " + trace + " --sfu-dump ex2=" + path, "timeout 20 ");
  CHECK(dump.code == 2);
  CHECK(one_error(dump, "not a regular file (an FBSFUDUMP1 dump is one)"));
  // A FIFO by a table's name in FLASHBITS_SFU_TABLES was read as no table: the function ran
  // correctly rounded (UNMEASURED), exit 0 or 1, with no word of the file.
  const auto tables = scratch() / "fifo_tables";
  std::filesystem::create_directories(tables);
  std::filesystem::remove(tables / "ex2_h200.fbsfu");
  REQUIRE(::mkfifo((tables / "ex2_h200.fbsfu").c_str(), 0600) == 0);
  const Run table =
      run("replay " + trace + " --sfu hw-sm90", "FLASHBITS_SFU_TABLES=" + tables.string() + " timeout 20 ");
  CHECK(table.code == 2);
  CHECK(one_error(table, "ex2_h200.fbsfu: not a regular file (an FBSFU1 table is one)"));
  // A batch through a pipe with a writer is still read, line by line.
  const Run piped_batch = run("op --batch /dev/stdin", "printf 'add bf16 rne 0x3f80 0x3f80\\n' | ");
  CHECK(piped_batch.code == 0);
  CHECK(piped_batch.out == "4000 -\n");  // 1 + 1 = 2 exactly
  // A pipe with a writer: the shard read through /dev/stdin merges as the file itself does.
  const std::string shard = (scratch() / "fifo_shard.csv").string();
  REQUIRE(run("sweep --model fa2-sm80 --scenario sink --seqlen 16 --headdim 16 --trials 2 --csv " + shard).code == 0);
  const Run direct = run("merge " + shard);
  const Run piped = run("merge /dev/stdin", "cat " + shard + " | ");
  CHECK(piped.code == direct.code);
  CHECK(piped.out == direct.out);
  CHECK_FALSE(piped.out.empty());
}

// Found by the bad-input audit: an FBSFUVAL1 header key given twice kept its last value, a
// function line's surplus words (and stray spaces) were dropped, and count=+5 was read as 5.
TEST_CASE("FBSFUVAL1 headers: a key given twice, surplus words and a signed count are refused") {
  const std::string trace = small_trace("sfuval_trace.safetensors");
  const auto values_file = [](const std::string& name, const std::string& header) {
    const std::string path = (scratch() / name).string();
    std::ofstream(path, std::ios::binary) << "FBSFUVAL1\n" << header << "end\n";
    return path;
  };
  const Run twice =
      run("replay " + trace + " --sfu-values " +
          values_file("twice.fbv", "source=cuda:NVIDIA H200\nsource=cuda:NVIDIA H100\nfunction=ex2 count=0\n"));
  CHECK(twice.code == 2);
  CHECK(one_error(twice, "twice.fbv: source: given twice in the header"));
  // A header without source said "source: '' is not a hardware capture".
  CHECK(one_error(run("replay " + trace + " --sfu-values " + values_file("nosource.fbv", "function=ex2 count=0\n")),
                  "nosource.fbv: source: missing (the header states the GPU"));
  const Run surplus = run("replay " + trace + " --sfu-values " +
                          values_file("surplus.fbv", "source=cuda:NVIDIA H200\nfunction=ex2 count=0 extra\n"));
  CHECK(surplus.code == 2);
  CHECK(one_error(surplus, "function ex2: line 'function=ex2 count=0 extra' is not 'function=NAME count=N'"));
  // Whitespace the writer never puts there was skipped: a trailing space, two spaces, a tab.
  for (const char* line : {"function=ex2 count=0 ", "function=ex2  count=0", "function=ex2\tcount=0"}) {
    CAPTURE(line);
    const Run spaced = run("replay " + trace + " --sfu-values " +
                           values_file("spaced.fbv", std::string("source=cuda:NVIDIA H200\n") + line + "\n"));
    CHECK(spaced.code == 2);
    CHECK(one_error(spaced, "is not 'function=NAME count=N' (one space, nothing after N)"));
  }
  const Run signed_count = run("replay " + trace + " --sfu-values " +
                               values_file("signed.fbv", "source=cuda:NVIDIA H200\nfunction=ex2 count=+0\n"));
  CHECK(signed_count.code == 2);
  CHECK(one_error(signed_count, "count '+0' is not an integer"));
}

// Found by the bad-input audit: what() is a C string, so a NUL byte in an echoed CSV cell
// ended merge's message there; it is shown as \x00 and the rest of the line follows. A JSON
// array was read as CSV and its defects named as a CSV file's.
TEST_CASE("merge: a NUL byte in an echoed cell is shown, and a JSON array is named as JSON") {
  const std::string shard = (scratch() / "nul_shard.csv").string();
  REQUIRE(run("sweep --model fa2-sm80 --scenario sink --seqlen 16 --headdim 16 --trials 2 --csv " + shard).code == 0);
  std::string csv = slurp(shard);
  // The trials column of the first row (after the header line): "2" becomes "2<NUL>9".
  const std::size_t row = csv.find('\n') + 1;
  std::size_t column = row;
  for (int comma = 0; comma < 7; ++comma) column = csv.find(',', column) + 1;
  REQUIRE(csv.compare(column, 2, "2,") == 0);
  csv.replace(column, 1,
              std::string("2\0"
                          "9",
                          3));
  const std::string nul = (scratch() / "nul.csv").string();
  std::ofstream(nul, std::ios::binary) << csv;
  const Run r = run("merge " + nul);
  CHECK(r.code == 2);
  CHECK(one_error(r, "column trials: expected an integer in plain digits, got '2\\x009'"));
  const std::string array = (scratch() / "array.json").string();
  std::ofstream(array) << "[{\"rows\": []}]\n";
  const Run a = run("merge " + array);
  CHECK(a.code == 2);
  CHECK(one_error(a, "array.json: not a sweep JSON file (expected an object, got an array)"));
}

// Found by the sixth bad-input audit: a JSON shard saved with a UTF-8 byte order mark was read
// as a CSV ("expected the sweep CSV header"); an alpha of 1e-400 was refused as "alpha 0" with
// no word of why.
TEST_CASE("merge: a byte order mark is skipped, and an alpha that reads as 0 says why") {
  const std::string sweep = "sweep --model fa2-sm80 --scenario sink --seqlen 16 --headdim 16 --trials 2";
  const std::string csv = (scratch() / "bom_plain.csv").string(), json = (scratch() / "bom_plain.json").string();
  REQUIRE(run(sweep + " --csv " + csv).code == 0);
  const Run made = run(sweep + " --json");
  REQUIRE(made.code == 0);
  std::ofstream(json, std::ios::binary) << made.out;
  const std::string plain = run("merge " + csv).out;
  REQUIRE_FALSE(plain.empty());
  for (const std::string& path : {csv, json}) {
    CAPTURE(path);
    const std::string marked = path + ".bom";
    std::ofstream(marked, std::ios::binary) << "\xEF\xBB\xBF" << slurp(path);
    const Run r = run("merge " + marked);
    CHECK(r.code == 0);
    CHECK(r.out == plain);
  }
  std::string tiny = made.out;
  const std::size_t at = tiny.find("\"alpha\": 0.001", tiny.find("\"run\""));  // the run record's
  REQUIRE(at != std::string::npos);
  tiny.replace(at, std::string("\"alpha\": 0.001").size(), "\"alpha\": 1e-400");
  const std::string tiny_path = (scratch() / "tiny_alpha.json").string();
  std::ofstream(tiny_path, std::ios::binary) << tiny;
  const Run t = run("merge " + tiny_path);
  CHECK(t.code == 2);
  CHECK(one_error(t,
                  "field alpha 0: expected a significance level strictly between 0 and 1 (a level below 2^-1074 "
                  "reads as 0 in double precision)"));
}

// A sweep CSV written before the magnitude sums (its header went from d_neg straight to
// elements) cannot give the verdict, which compares magnitudes too: merge names why and what
// to do, rather than "expected the sweep CSV header". The old file is made from a new one by
// dropping the magnitude columns, its sums otherwise kept.
TEST_CASE("merge: a sweep CSV without the magnitude sums is refused with its reason") {
  const std::string csv = (scratch() / "magnitude_new.csv").string();
  REQUIRE(run("sweep --model fa2-sm80 --scenario sink --seqlen 16 --headdim 16 --trials 2 --csv " + csv).code == 0);
  std::istringstream lines(slurp(csv));
  std::string line, old;
  std::vector<std::size_t> keep;
  while (std::getline(lines, line)) {
    if (line.rfind("# run ", 0) == 0) {
      old += line + "\n";
      continue;
    }
    std::vector<std::string> cells;
    std::stringstream cell_stream(line);
    for (std::string cell; std::getline(cell_stream, cell, ',');) cells.push_back(cell);
    if (keep.empty())
      for (std::size_t i = 0; i < cells.size(); ++i)
        if (cells[i].find("mag_") == std::string::npos) keep.push_back(i);
    std::string joined;
    for (std::size_t i : keep) joined += (joined.empty() ? "" : ",") + (i < cells.size() ? cells[i] : "");
    old += joined + "\n";
  }
  REQUIRE(old.find("d_neg,elements,") != std::string::npos);
  const std::string old_path = (scratch() / "magnitude_old.csv").string();
  std::ofstream(old_path, std::ios::binary) << old;
  const Run r = run("merge " + old_path);
  CHECK(r.code == 2);
  CHECK(one_error(r,
                  "magnitude_old.csv: line 1: a sweep CSV written by an older flashbits, without the magnitude "
                  "sums (mag_o_sum, ...) the verdict needs: rerun that sweep"));
  // The JSON form, its rows' sufficient sums without the magnitude ones.
  const Run made = run("sweep --model fa2-sm80 --scenario sink --seqlen 16 --headdim 16 --trials 2 --json");
  REQUIRE(made.code == 0);
  nlohmann::json j = nlohmann::json::parse(made.out);
  for (auto& row : j["rows"]) {
    nlohmann::json kept;
    for (const auto& [key, value] : row["sufficient"].items())
      if (key.find("mag_") == std::string::npos) kept[key] = value;
    row["sufficient"] = kept;
  }
  const std::string old_json = (scratch() / "magnitude_old.json").string();
  std::ofstream(old_json, std::ios::binary) << j.dump();
  const Run rj = run("merge " + old_json);
  CHECK(rj.code == 2);
  CHECK(one_error(rj,
                  "magnitude_old.json: rows[0]: a sweep JSON written by an older flashbits, without the "
                  "magnitude sums (mag_o_sum, ...) the verdict needs: rerun that sweep"));
}

// Found by the bad-input audit: a --source or --model that is not UTF-8 was refused only when
// the output was written, and the error blamed the output file.
TEST_CASE("import: a --source or --model that is not UTF-8 is refused by option") {
  const auto dir = capture_dir("npy_capture_utf8");
  const auto out = scratch() / "utf8.safetensors";
  const std::string options = " --dtype bf16 --layout bshd --out " + out.string();
  const Run source = run("import " + dir.string() + options + " --source 'cuda:\xff'");
  CHECK(source.code == 2);
  CHECK(one_error(source, "--source 'cuda:\\xff': not valid UTF-8"));
  const Run model = run("import " + dir.string() + options + " --source unknown --model 'fa2\xfe'");
  CHECK(model.code == 2);
  CHECK(one_error(model, "--model 'fa2\\xfe': not valid UTF-8"));
  CHECK_FALSE(std::filesystem::exists(out));
  // UTF-8 beyond ASCII is fine in the source's GPU name.
  CHECK(run("import " + dir.string() + options + " --source 'cuda:NVIDIA H200 \xc3\xa9'").code == 0);
}

// Found by the bad-input audit: a directory capture listed only regular *.npy files, so an
// entry it could not read (a dangling link, a directory, a pipe) was skipped: exit 0 with the
// tensor dropped (do, lse), or "missing required tensor 'q'" for an unreadable q.npy.
TEST_CASE("import: every *.npy entry of a capture directory is read or named in the error") {
  const std::string options = kBare + " --out " + (scratch() / "entries.safetensors").string();
  {
    const auto dir = capture_dir("npy_dangling");
    std::filesystem::create_symlink(dir / "nonexistent", dir / "do.npy");
    const Run r = run("import " + dir.string() + options);
    CHECK(r.code == 2);
    CHECK(one_error(r, (dir / "do.npy").string() + ": cannot open"));
  }
  {
    const auto dir = capture_dir("npy_subdirectory");
    std::filesystem::create_directories(dir / "lse.npy");
    const Run r = run("import " + dir.string() + options);
    CHECK(r.code == 2);
    CHECK(one_error(r, (dir / "lse.npy").string()));
  }
  {
    const auto dir = capture_dir("npy_fifo");
    REQUIRE(::mkfifo((dir / "dq.npy").c_str(), 0600) == 0);
    const Run r = run("import " + dir.string() + options, "timeout 20 ");
    CHECK(r.code == 2);
    CHECK(one_error(r, (dir / "dq.npy").string()));
  }
  {
    // A file name that is not UTF-8 names a tensor the trace cannot hold: the file is named,
    // not the output.
    const auto dir = capture_dir("npy_name_utf8");
    std::filesystem::copy_file(dir / "out.npy", dir / "d\xff.npy");
    const Run r = run("import " + dir.string() + options);
    CHECK(r.code == 2);
    CHECK(one_error(r, "d\\xff.npy: the file name is not valid UTF-8"));
  }
}

// Found by the newcomer audit: bias_test(traces=[DIR]) and replay DIR read a folder of traces as
// one capture of .npy arrays, and said only "directory holds no .npy files".
TEST_CASE("a folder of traces given as one capture says what it holds and where it is read") {
  const Run r = run("replay " + std::string(FLASHBITS_SOURCE_DIR) + "/traces/hw/h200/bias");
  CHECK(r.code == 2);
  CHECK(one_error(r,
                  "bias: directory holds no .npy files but 4 .safetensors file(s): a directory here is one capture "
                  "of .npy arrays"));
  const auto empty = scratch() / "no_arrays";
  std::filesystem::create_directories(empty);
  const Run e = run("replay " + empty.string());
  CHECK(e.code == 2);
  CHECK(one_error(e, "no_arrays: directory holds no .npy files"));
}

// Found by the CLI audit: make-trace --out x.npz and import --out x.npz wrote safetensors
// that replay and bias-test then read as a broken zip archive; demo read a real .npz as
// safetensors ("header length ... is absurd"), and a folder as a file.
TEST_CASE("a trace is not written under a numpy name, and demo says what it reads") {
  const auto dir = scratch() / "numpy_names";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  for (const char* name : {"x.npz", "x.NPY"}) {
    CAPTURE(name);
    const std::string out = (dir / name).string();
    const Run made = run("make-trace --model fa2-sm80 --seqlen 16 --headdim 8 --out " + out);
    CHECK(made.code == 2);
    CHECK(one_error(made, "--out " + out + ": a trace is written as safetensors"));
    CHECK_FALSE(std::filesystem::exists(out));
  }
  const std::string trace = (dir / "t.safetensors").string();
  REQUIRE(run("make-trace --model fa2-sm80 --seqlen 16 --headdim 8 --out " + trace).code == 0);
  const Run imported = run("import " + trace + " --out " + (dir / "t.npz").string());
  CHECK(imported.code == 2);
  CHECK(one_error(imported, "a trace is written as safetensors"));
  std::ofstream(dir / "capture.npy") << "not read";
  const Run npy = run("demo --trace " + (dir / "capture.npy").string());
  CHECK(npy.code == 2);
  CHECK(
      one_error(npy, "capture.npy: demo reads a flashbits trace (.safetensors whose metadata names its kernel model)"));
  const Run folder = run("demo --trace " + dir.string());
  CHECK(folder.code == 2);
  CHECK(one_error(folder, "numpy_names: a directory; demo reads one trace file"));
  std::filesystem::remove_all(dir);
}

// Found by the CLI audit: with the hw-sm90 tables missing (an empty FLASHBITS_SFU_TABLES) the
// replay of an H200 capture said "SFU set hw-sm90 (measured on an H200)" right under the
// correctly rounded SFUs it actually ran, and the MISMATCH read as the kernel model's.
TEST_CASE("a capture's SFU set whose tables are missing is a warning naming them and the folder") {
  const auto empty = scratch() / "no_tables";
  std::filesystem::remove_all(empty);
  std::filesystem::create_directories(empty);
  const std::string trace = std::string(FLASHBITS_SOURCE_DIR) + "/traces/hw/h200/fa2/fa2_random_d64.safetensors";
  const Run r = run("replay " + trace, "FLASHBITS_SFU_TABLES=" + empty.string() + " ");
  CHECK(r.code == 1);  // the correctly rounded SFUs do not give the H200's bits
  CHECK(r.out.find("warning: SFU set hw-sm90 chosen for a capture from cuda:NVIDIA H200 (compute capability 9.0), "
                   "but its table(s) for ex2, rcp, lg2 were not found in " +
                   empty.string() + ": those functions are correctly rounded (UNMEASURED)") != std::string::npos);
  CHECK(r.out.find("(measured on an H200)") == std::string::npos);
  // With the shipped tables the set is the measured one, and the replay bit for bit.
  const Run shipped = run("replay " + trace);
  CHECK(shipped.code == 0);
  CHECK(shipped.out.find("SFU set hw-sm90 (measured on an H200)") != std::string::npos);
  CHECK(shipped.out.find("warning: SFU set") == std::string::npos);
}

// The FBSFUDUMP1 header rules (traces/sfu_dump.hpp) on a real 16 GiB dump, made sparse: the
// magic, function= and source= are each checked and named, other lines are ignored, and a
// dump that passes is taken as the function's hardware table (it is all zeros here, so the
// replay disagrees with the trace: exit 1, never 2).
TEST_CASE("FBSFUDUMP1: a sparse 16 GiB dump's header is checked field by field") {
  const std::string trace = small_trace("dump_trace.safetensors");
  const auto dump_file = [](const std::string& header) {
    const auto path = scratch() / "sparse.fbsfudump";
    std::filesystem::remove(path);
    std::ofstream(path, std::ios::binary) << header;
    std::filesystem::resize_file(path, 4096 + (std::uintmax_t{1} << 34));
    return path.string();
  };
  const std::string good = "FBSFUDUMP1\nfunction=ex2\ninstruction=ex2.approx.ftz.f32\nsource=cuda:NVIDIA H200\n";
  struct Case {
    std::string header, error;
  };
  const Case refused[] = {
      {"FBSFUDUMP2\nfunction=ex2\nsource=cuda:NVIDIA H200\n", "sparse.fbsfudump: not an FBSFUDUMP1 file"},
      {"FBSFUDUMP1\nfunction=rcp\nsource=cuda:NVIDIA H200\n", "sparse.fbsfudump: function: 'rcp', expected 'ex2'"},
      {"FBSFUDUMP1\nfunction=ex2\nsource=rehearsal:stand-in\n",
       "sparse.fbsfudump: source: 'rehearsal:stand-in' is not a hardware capture (cuda:<gpu>)"},
      // A header is read up to its first NUL: a source after one is not there.
      {std::string("FBSFUDUMP1\nfunction=ex2\n\0source=cuda:NVIDIA H200\n", 48),
       "sparse.fbsfudump: source: missing (a dump states the GPU it was taken on, source=cuda:<gpu>)"},
  };
  for (const Case& c : refused) {
    CAPTURE(c.error);
    const Run r = run("replay " + trace + " --sfu-dump ex2=" + dump_file(c.header));
    CHECK(r.code == 2);
    CHECK(one_error(r, c.error));
  }
  const Run accepted = run("replay --verbose " + trace + " --sfu-dump ex2=" + dump_file(good + "note line\n"));
  CHECK(accepted.code == 1);
  CHECK(accepted.out.find("full hardware dump") != std::string::npos);
  CHECK(accepted.out.find("cuda:NVIDIA H200, ex2.approx.ftz.f32") != std::string::npos);
  std::filesystem::remove(scratch() / "sparse.fbsfudump");
}

// Found by the newcomer audit: `replay traces/hw --row 3` (a folder whose traces lie in
// subfolders) said only "directory holds no .npy files". Every way a folder without .npy
// arrays is given where one capture is read now says how a directory is read, what this one
// holds (counted from the file names made here) and which command reads a folder of traces.
TEST_CASE("a folder without .npy arrays given to replay says what it holds, in subfolders too") {
  const auto root = scratch() / "traces_in_subfolders";
  std::filesystem::create_directories(root / "b_run" / "deeper");
  std::filesystem::create_directories(root / "a_run");
  std::filesystem::create_directories(root / "empty_run");
  for (const auto& file : {root / "b_run" / "x.safetensors", root / "b_run" / "deeper" / "y.npz",
                           root / "a_run" / "z.safetensors", root / "a_run" / "notes.txt", root / "readme.md"})
    std::ofstream(file) << "not read";
  const Run nested = run("replay " + root.string() + " --row 3");
  CHECK(nested.code == 2);
  CHECK(one_error(nested,
                  "traces_in_subfolders: directory holds no .npy files and no trace file, but its subfolders "
                  "hold 2 .safetensors and 1 .npz file(s) (the first in " +
                      (root / "a_run").string() +
                      "): a directory here is one capture of .npy arrays (one file per tensor, named by it); "
                      "give one trace file, or one folder of them to `flashbits bias-test --traces DIR`, "
                      "which tests the files of that folder, not of its subfolders"));

  const Run direct = run("replay " + (root / "b_run").string() + " --row 3");
  CHECK(direct.code == 2);
  CHECK(one_error(direct,
                  "b_run: directory holds no .npy files but 1 .safetensors file(s): a directory here is one "
                  "capture of .npy arrays (one file per tensor, named by it); give one trace file, or the "
                  "folder to `flashbits bias-test --traces " +
                      (root / "b_run").string() + "` (Python: bias_test(traces=DIR))"));

  const Run none = run("replay " + (root / "empty_run").string());
  CHECK(none.code == 2);
  CHECK(one_error(none,
                  "empty_run: directory holds no .npy files: a directory here is one capture of .npy arrays "
                  "(one file per tensor, named by it); give one trace file (.safetensors or .npz) or such a "
                  "directory"));

  // The repository's own hardware traces, as the audit ran them: the folder of folders and
  // the folder of traces (counts left out: traces are added there).
  const std::string hw = std::string(FLASHBITS_SOURCE_DIR) + "/traces/hw";
  const Run tree = run("replay " + hw + " --row 3");
  CHECK(tree.code == 2);
  CHECK(one_error(tree, "/traces/hw: directory holds no .npy files and no trace file, but its subfolders hold "));
  CHECK(one_error(tree, "`flashbits bias-test --traces DIR`"));
  const Run bias = run("replay " + hw + "/h200/bias --row 3 --json");
  CHECK(bias.code == 2);
  CHECK(bias.out.empty());
  CHECK(one_error(bias, "`flashbits bias-test --traces " + hw + "/h200/bias`"));
}

// Found by the newcomer audit: `replay FILE --row 0 --json` on a trace whose dq is corrupted
// said "match": true, dq being one of the tensors --row leaves out. `match` stays the verdict
// on what was compared (exit 0 or 1); `complete` says whether that was every tensor.
TEST_CASE("replay --json: complete is false when a tensor the trace holds was not compared") {
  const auto path = scratch() / "corrupt_dq.safetensors";
  REQUIRE(run("make-trace --model fa2-sm80 --scenario random --seqlen 32 --headdim 16 --seed 5 --backward --out " +
              path.string())
              .code == 0);
  const auto intact = scratch() / "intact_dq.safetensors";
  std::filesystem::copy_file(path, intact, std::filesystem::copy_options::overwrite_existing);
  // Flip the lowest bit of dq's first element, found from the safetensors header itself
  // (8-byte little-endian header length, JSON header, data from data_offsets).
  {
    std::string bytes = slurp(path.string());
    REQUIRE(bytes.size() > 8);
    std::uint64_t header_length = 0;
    for (int i = 7; i >= 0; --i) header_length = header_length << 8 | static_cast<unsigned char>(bytes[i]);
    const auto header = nlohmann::json::parse(bytes.substr(8, header_length));
    REQUIRE(header.contains("dq"));
    const std::size_t at = 8 + header_length + header["dq"]["data_offsets"][0].get<std::size_t>();
    REQUIRE(at < bytes.size());
    bytes[at] = static_cast<char>(bytes[at] ^ 1);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  }
  const auto replay_json = [](const std::filesystem::path& trace, const std::string& options) {
    const Run r = run("replay " + trace.string() + " --json" + options);
    return std::pair{r.code, r.code <= 1 ? nlohmann::json::parse(r.out) : nlohmann::json()};
  };
  const auto names = [](const nlohmann::json& list) {
    std::vector<std::string> out;
    for (const auto& n : list) out.push_back(n.get<std::string>());
    std::sort(out.begin(), out.end());
    return out;
  };
  // One row: dq, dk, dv need every row's backward; what was compared matches, but not all was.
  const auto [row_code, row] = replay_json(path, " --row 0");
  CHECK(row_code == 0);
  CHECK(row["match"] == true);
  CHECK(row["complete"] == false);
  REQUIRE(row.contains("not_compared"));
  CHECK(names(row["not_compared"]) == std::vector<std::string>{"dk", "dq", "dv"});
  // Every row: dq is compared and its flipped bit is found.
  const auto [all_code, all] = replay_json(path, "");
  CHECK(all_code == 1);
  CHECK(all["match"] == false);
  CHECK(all["complete"] == true);
  CHECK_FALSE(all.contains("not_compared"));
  bool dq_differs = false;
  for (const auto& t : all["tensors"])
    if (t["name"] == "dq")
      dq_differs = t["mismatches"].size() == 1 && t["mismatches"][0]["index"] == nlohmann::json({0, 0, 0, 0});
  CHECK(dq_differs);
  // The intact trace: all compared and matching.
  const auto [intact_code, whole] = replay_json(intact, "");
  CHECK(intact_code == 0);
  CHECK(whole["match"] == true);
  CHECK(whole["complete"] == true);
}
