// tests/test_cli_options.cpp: issue 34 item 6, "wrong or unusable results", run as the built
// `flashbits` binary: option values CLI11 used to clamp or could not convert, output paths
// checked before any work, model names with a repeated or conflicting variant, duplicate sweep
// entries, merge rows outside their run's grid, import refusing what replay cannot read, and
// bias-test saying that a capture's delta went untested.
//
// Independent facts checked: the ranges docs/CLI.md states (2^64 - 1 = 18446744073709551615,
// 2^24 = 16777216, 2^31 - 1 = 2147483647, head dim 256); a refusal is exit 2 with one
// `error:` line naming the option (or file and line) and nothing written. Each case failed
// before issue 34: the value was clamped or accepted, or the run did its work first.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "attention/attention.hpp"
#include "tests/cli_run.hpp"
#include "tests/mpfr_attention.hpp"
#include "traces/safetensors.hpp"
#include "traces/trace.hpp"
#include "studies/scenarios.hpp"

namespace {
using fb_test::run;
using fb_test::Run;
using fb_test::scratch;
using fb_test::slurp;
namespace fs = std::filesystem;

bool has(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

// Exit 2 with exactly one line on stderr, an `error:` line holding every needle.
void check_refused(const Run& r, const std::vector<std::string>& needles) {
  CHECK_MESSAGE(r.code == 2, r.out << r.err);
  CHECK_MESSAGE(std::count(r.err.begin(), r.err.end(), '\n') == 1, r.err);
  CHECK_MESSAGE(r.err.rfind("error: ", 0) == 0, r.err);
  for (const std::string& needle : needles)
    CHECK_MESSAGE(has(r.err, needle), "missing '" << needle << "' in " << r.err);
}

std::string write_file(const std::string& name, const std::string& content) {
  const std::string path = (scratch() / name).string();
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream ss(text);
  std::string line;
  while (std::getline(ss, line)) lines.push_back(line);
  return lines;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) out += l + "\n";
  return out;
}

// A float tensor of `shape` holding multiples of 1/8 in [-2, 2) (exact in every format).
fb::SafeTensor float_tensor(const std::string& name, fb::Dtype dtype, std::vector<std::uint64_t> shape) {
  fb::SafeTensor t{name, dtype, shape, {}};
  const std::uint64_t n = t.element_count();
  for (std::uint64_t i = 0; i < n; ++i) {
    const double v = static_cast<double>(static_cast<int>((i * 37 + 11) % 32) - 16) / 8.0;
    if (dtype == fb::Dtype::F64) {
      const auto bits = std::bit_cast<std::uint64_t>(v);
      for (int b = 0; b < 8; ++b) t.bytes.push_back(static_cast<std::uint8_t>(bits >> (8 * b)));
    } else {
      const auto bits = std::bit_cast<std::uint32_t>(static_cast<float>(v));
      for (int b = 0; b < 4; ++b) t.bytes.push_back(static_cast<std::uint8_t>(bits >> (8 * b)));
    }
  }
  return t;
}

const std::string kSmallSweep = "sweep --scenario random --seqlen 16 --headdim 16 --trials 1 --jobs 2";
}  // namespace

TEST_CASE("issue 34: --seed outside 0..2^64-1 is refused, naming --seed and its range") {
  const std::string out = (scratch() / "seed.safetensors").string();
  const std::vector<std::string> commands = {
      "op add bf16 sr 0x3f80 0x3b80",
      kSmallSweep + " --model fa2-sm80",
      "bias-test --model fa2-sm80 --trials 2 --seqlen 16 --headdim 16",
      "deviation --models fa2-sm80 --seqlen 16 --headdim 16",
      "make-trace --model fa2-sm80 --seqlen 16 --headdim 16 --out " + out,
  };
  // CLI11 used to turn each of these into 2^64 - 1 and run.
  for (const std::string& cmd : commands)
    for (const std::string seed : {"-1", "18446744073709551616", "1e20", "0x10", "1.5"}) {
      CAPTURE(cmd);
      CAPTURE(seed);
      check_refused(run(cmd + " --seed " + seed), {"--seed", "0..18446744073709551615", "'" + seed + "'"});
    }
  CHECK_FALSE(fs::exists(out));
  // The ends of the range are seeds.
  CHECK(run("op add bf16 sr 0x3f80 0x3b80 --seed 18446744073709551615").code == 0);
  CHECK(run("op add bf16 sr 0x3f80 0x3b80 --seed 0").code == 0);
  check_refused(run("op add bf16 sr 0x3f80 0x3b80 --position -1"), {"--position", "18446744073709551615"});
}

TEST_CASE("issue 34: --trials, --heads and --headdim words beyond their limits name the option and the limit") {
  const std::string out = (scratch() / "limits.safetensors").string();
  check_refused(run(kSmallSweep + " --model fa2-sm80 --trials 1e12"), {"--trials", "16777216", "1e12"});
  check_refused(run("bias-test --model fa2-sm80 --trials 1e12"), {"--trials", "1..16777216"});
  check_refused(run("bias-test --model fa2-sm80 --trials 0"), {"--trials", "1..16777216"});
  // One trial is a run, inconclusive (the contract: "too few trials ... exits 4").
  CHECK(run("bias-test --model fa2-sm80 --trials 1 --seqlen 16 --headdim 16").code == 4);
  check_refused(run("deviation --models fa2-sm80 --heads 1e8 --seqlen 16"), {"--heads", "2147483647", "1e8"});
  // deviation's --seqlen list: std::stoi read 1e8 as 1 and 16x as 16, and ran.
  check_refused(run("deviation --models fa2-sm80 --headdim 16 --seqlen 16,1e8"), {"--seqlen 1e8", "2147483647"});
  check_refused(run("deviation --models fa2-sm80 --headdim 16 --seqlen 16x"), {"--seqlen 16x"});
  check_refused(run("make-trace --model fa2-sm80 --heads 1e8 --out " + out), {"--heads", "2147483647"});
  // The head dim the engine models (256, attention/engine.cpp) is checked as the options are
  // read, in every command with --headdim: before it, make-trace ran and failed in the engine
  // without naming the option.
  for (const std::string& cmd :
       {kSmallSweep + " --model fa2-sm80", std::string("bias-test --model fa2-sm80 --trials 2"),
        std::string("deviation --models fa2-sm80 --seqlen 16"),
        "make-trace --model fa2-sm80 --seqlen 16 --out " + out}) {
    CAPTURE(cmd);
    check_refused(run(cmd + " --headdim 512"), {"--headdim", "1..256", "'512'"});
    check_refused(run(cmd + " --headdim 257"), {"--headdim", "1..256"});
  }
  CHECK_FALSE(fs::exists(out));
  CHECK(run("make-trace --model standard-bf16 --scenario random --seqlen 4 --headdim 256 --out " + out).code == 0);
}

TEST_CASE("issue 34: --kv-heads 0 is refused, not read as every head") {
  const std::string out = (scratch() / "kv0.safetensors").string();
  check_refused(run("make-trace --model fa2-sm80 --seqlen 16 --headdim 16 --heads 4 --kv-heads 0 --out " + out),
                {"--kv-heads", "'0'"});
  CHECK_FALSE(fs::exists(out));
  check_refused(run("make-trace --model fa2-sm80 --seqlen 16 --headdim 16 --heads 4 --kv-heads 3 --out " + out),
                {"--kv-heads 3", "divisor"});
  REQUIRE(run("make-trace --model fa2-sm80 --seqlen 16 --headdim 16 --heads 4 --kv-heads 2 --out " + out).code == 0);
  CHECK(fb::read_trace(out).kv_heads() == 2);
}

TEST_CASE("issue 34: a model name with a repeated or conflicting variant is refused, naming both parts") {
  const std::string bias = "bias-test --trials 2 --seqlen 16 --headdim 16 --model ";
  check_refused(run(bias + "fa2-sm80+o-rtz+o-rup"), {"+o-rtz and +o-rup", "final rounding"});
  check_refused(run(bias + "fa2-sm80+o-sr+dynmax+o-rdn"), {"+o-sr and +o-rdn"});
  check_refused(run(bias + "fa2-sm80+dynmax+dynmax"), {"+dynmax is given twice"});
  check_refused(run(bias + "fa2-sm80+dynmax:beta=3+dynmax"), {"+dynmax:beta=3 and +dynmax"});
  check_refused(run(bias + "fa4-sm100+lazy-rescale:off+lazy-rescale:4"), {"+lazy-rescale:off and +lazy-rescale:4"});
  // sweep's --round adds a second final cast to a model that has one.
  check_refused(run(kSmallSweep + " --model fa2-sm80+o-rup --round rtz"), {"--round rtz", "+o-rup and +o-rtz"});
  // Distinct variants still compose; +o-fp32 (the buffer) is not a rounding mode.
  CHECK(run(bias + "fa2-sm80+dynmax+o-rtz+o-fp32").code != 2);
  CHECK(run(kSmallSweep + " --model fa2-sm80+o-rup").code != 2);
}

TEST_CASE("issue 34: sweep refuses a list entry given twice and two entries that are one configuration") {
  check_refused(run(kSmallSweep + " --model fa2-sm80,fa-bf16acc,fa2-sm80"), {"--model", "fa2-sm80 is given twice"});
  check_refused(run("sweep --seqlen 16 --headdim 16 --trials 1 --model fa2-sm80 --scenario random,sink,random"),
                {"--scenario", "random is given twice"});
  check_refused(run(kSmallSweep + " --model fa2-sm80 --formats bf16,bf16"), {"--formats", "bf16 is given twice"});
  check_refused(run(kSmallSweep + " --model fa2-sm80 --round rne,rtz,rne"), {"--round", "rne is given twice"});
  check_refused(run(kSmallSweep + " --model standard,standard-bf16"),
                {"standard and standard-bf16", "bf16/rne/standard-bf16/random/n16/d16"});
  // In fp16 they are two configurations (standard is standard-fp16 there; standard-bf16 is skipped).
  CHECK(run(kSmallSweep + " --model standard,standard-bf16 --formats fp16").code == 0);
}

TEST_CASE("sweep: an empty list or list entry is refused, naming the option it is in") {
  const std::string sweep = "sweep --seqlen 16 --headdim 16 --trials 1 --jobs 2 --model fa2-sm80 ";
  for (const std::string option : {"--formats", "--round", "--scenario"})
    check_refused(run(sweep + option + " ''"), {option + ": an empty value"});
  check_refused(run(kSmallSweep + " --model ''"), {"--model: an empty value"});
  check_refused(run(kSmallSweep + " --model fa2-sm80,"), {"--model fa2-sm80,", "an empty entry"});
  check_refused(run(kSmallSweep + " --model fa2-sm80 --formats ,bf16"), {"--formats ,bf16", "an empty entry"});
  check_refused(run(kSmallSweep + " --model fa2-sm80 --round rne,,rtz"), {"--round rne,,rtz", "an empty entry"});
  // An unknown scenario's error lists the ones there are, in sweep and in bias-test.
  check_refused(run(sweep + "--scenario nope"), {"--scenario nope", "wide-ties"});
  check_refused(run("bias-test --model fa2-sm80 --scenario nope"), {"--scenario nope", "wide-ties"});
}

TEST_CASE("an option given an empty value is refused, not read as left out") {
  // sweep --csv '' wrote no CSV, bias-test --against '' ran unpaired, import --scale '' and
  // replay --model '' used the file's own: each silently, exit 0.
  const std::string trace = (scratch() / "empty_values.safetensors").string();
  REQUIRE(run("make-trace --model fa2-sm80 --seqlen 16 --headdim 16 --out " + trace).code == 0);
  for (const auto& entry : std::vector<std::pair<std::string, std::string>>{
           {kSmallSweep + " --model fa2-sm80 --csv ''", "--csv"},
           {"bias-test --model fa2-sm80 --against '' --trials 2 --seqlen 16 --headdim 16", "--against"},
           {"bias-test --model fa2-sm80 --alpha ''", "--alpha"},
           {"import " + trace + " --scale '' --out " + (scratch() / "empty_out.safetensors").string(), "--scale"},
           {"replay " + trace + " --model ''", "--model"}}) {
    // Named variables, not structured bindings: clang before 16 cannot capture bindings.
    const std::string& args = entry.first;
    const std::string& option = entry.second;
    CAPTURE(args);
    check_refused(run(args), {option + ": an empty value"});
  }
  CHECK(!std::filesystem::exists(scratch() / "empty_out.safetensors"));
}

TEST_CASE("--dtype that contradicts the model's own input format is refused, not ignored") {
  // standard-fp16 reads fp16: an explicit --dtype bf16 cannot hold, left out it is no conflict.
  check_refused(run("bias-test --model standard-fp16 --dtype bf16 --trials 2 --seqlen 8 --headdim 8"),
                {"--model standard-fp16 reads fp16 inputs", "--dtype bf16 contradicts it"});
  check_refused(run("make-trace --model fa-bf16acc --dtype fp16 --seqlen 8 --headdim 8 --out " +
                    (scratch() / "contradicted.safetensors").string()),
                {"--model fa-bf16acc reads bf16 inputs", "--dtype fp16"});
  CHECK_FALSE(std::filesystem::exists(scratch() / "contradicted.safetensors"));
  // A model of fp32 inputs runs on fp32 inputs: --dtype bf16 or fp16 was accepted and ignored
  // (the same figures as without it), in every command that draws its own inputs.
  check_refused(run("bias-test --model standard-fp32 --dtype bf16 --trials 2 --seqlen 8 --headdim 8"),
                {"--model standard-fp32 reads fp32 inputs", "--dtype bf16 contradicts it"});
  check_refused(run("bias-test --model golden-fp32-flash --dtype fp16 --trials 2 --seqlen 8 --headdim 8"),
                {"--model golden-fp32-flash reads fp32 inputs", "--dtype fp16 contradicts it"});
  check_refused(run("deviation --models golden-bf16-flash,golden-fp32-flash --dtype bf16 --seqlen 16 --headdim 8"),
                {"--models golden-fp32-flash reads fp32 inputs", "--dtype bf16 contradicts it"});
  // triton-tutorial-sm90 runs fp16 only: with no --dtype it runs in fp16 (the default bf16 was
  // refused as a shape), and --dtype bf16 is a contradiction.
  check_refused(run("bias-test --model triton-tutorial-sm90 --dtype bf16 --trials 2 --seqlen 128 --headdim 64"),
                {"--model triton-tutorial-sm90 runs fp16 inputs only", "--dtype bf16 contradicts it"});
  const Run tutorial = run("bias-test --model triton-tutorial-sm90 --trials 2 --seqlen 128 --headdim 64 --json");
  CHECK_MESSAGE(tutorial.code != 2, tutorial.err);
  CHECK_MESSAGE(has(tutorial.out, "\"units_format\": \"fp16\""), tutorial.out);
  // --against reads the tested model's inputs: fp16 here, as the model took it.
  const Run against =
      run("bias-test --model triton-tutorial-sm90 --against triton-tutorial-sm90+tile:64x64 --trials 2 --seqlen 128 "
          "--headdim 64 --json");
  CHECK_MESSAGE(against.code != 2, against.err);
  CHECK(run("make-trace --model standard-fp32 --dtype fp32 --seqlen 8 --headdim 8 --out " +
            (scratch() / "fp32_given.safetensors").string())
            .code == 0);
  CHECK(run("make-trace --model standard-fp16 --seqlen 8 --headdim 8 --out " +
            (scratch() / "fp16_default.safetensors").string())
            .code == 0);
  CHECK(run("make-trace --model standard-fp16 --dtype fp16 --seqlen 8 --headdim 8 --out " +
            (scratch() / "fp16_given.safetensors").string())
            .code == 0);
}

TEST_CASE("issue 34: --csv - writes the CSV to stdout, not to a file named -") {
  const fs::path dir = scratch() / "csv_dash";
  fs::create_directories(dir);
  const std::string in_dir = "cd '" + dir.string() + "' && ";
  const std::string csv = (dir / "sweep.csv").string();
  REQUIRE(run(kSmallSweep + " --model fa2-sm80,fa-bf16acc --csv " + csv).code == 0);
  const Run dash = run(kSmallSweep + " --model fa2-sm80,fa-bf16acc --csv -", in_dir);
  CHECK(dash.code == 0);
  CHECK(dash.out == slurp(csv));  // the CSV alone, in place of the table
  CHECK(dash.out.rfind("index,format,round,model,", 0) == 0);
  CHECK_FALSE(fs::exists(dir / "-"));
  const Run merged = run("merge " + csv + " --csv -", in_dir);
  CHECK(merged.code == 0);
  CHECK(merged.out == slurp(csv));
  CHECK_FALSE(fs::exists(dir / "-"));
  check_refused(run(kSmallSweep + " --model fa2-sm80 --csv - --json", in_dir), {"--csv -", "--json"});
  check_refused(run("merge " + csv + " --csv - --json", in_dir), {"--csv -", "--json"});
  // Where stdout is not an option, - is refused rather than written as a file named -.
  check_refused(run("make-trace --model fa2-sm80 --seqlen 16 --headdim 16 --out -", in_dir), {"--out -", "./-"});
  CHECK_FALSE(fs::exists(dir / "-"));
}

TEST_CASE("issue 34: an unwritable output path is refused before any work") {
  const std::string missing = (scratch() / "no_such_dir").string();
  const std::string trace =
      (fs::path(FLASHBITS_SOURCE_DIR) / "traces" / "examples" / "random-fa2-sm80.safetensors").string();
  // Each command also has a defect it would only meet while working (a missing input file),
  // or work it would print: the output path is named first, and nothing else is done.
  const Run make = run("make-trace --model fa2-sm80 --seqlen 16 --headdim 16 --out " + missing + "/t.safetensors");
  check_refused(make, {"--out " + missing + "/t.safetensors", missing});
  const Run sweep = run(kSmallSweep + " --model fa2-sm80 --csv " + missing + "/s.csv");
  check_refused(sweep, {"--csv " + missing + "/s.csv"});
  CHECK(sweep.out.empty());
  check_refused(run("merge " + missing + "/shard.csv --csv " + missing + "/m.csv"), {"--csv " + missing + "/m.csv"});
  check_refused(run("import " + missing + "/capture.npz --source unknown --out " + missing + "/t.safetensors"),
                {"--out " + missing});
  const Run plot = run("replay " + trace + " --plot " + missing + "/p.svg");
  check_refused(plot, {"--plot " + missing + "/p.svg"});
  CHECK(plot.out.empty());  // before: the whole replay was printed, then the plot failed
  check_refused(run("replay " + trace + " --sfu-record " + missing + "/r.bin"), {"--sfu-record " + missing});
  check_refused(run("probe-check " + missing + "/p.fbp --mismatches-out " + missing + "/m.fbp"),
                {"--mismatches-out " + missing});
  check_refused(run("probe-check " + missing + "/p.fbp --sample-out " + missing + "/s.fbp --sample-per-batch 1"),
                {"--sample-out " + missing});
  check_refused(run("probe-check " + missing + "/p.fbp --predictions-out " + missing + "/s.fbp"),
                {"--predictions-out " + missing});
  // A directory is not an output file; a path whose directory is a file has no directory.
  check_refused(run("make-trace --model fa2-sm80 --seqlen 16 --headdim 16 --out " + scratch().string()),
                {"--out", "is a directory"});
  const std::string file = write_file("plain_file", "x");
  check_refused(run(kSmallSweep + " --model fa2-sm80 --csv " + file + "/s.csv"), {"--csv", "not a directory"});
  CHECK_FALSE(fs::exists(missing));
}

TEST_CASE("issue 34: merge refuses a row whose configuration is not its index's in the run's grid") {
  const std::string csv = (scratch() / "grid.csv").string();
  REQUIRE(run(kSmallSweep + " --model fa2-sm80,fa-bf16acc --csv " + csv).code == 0);
  REQUIRE(run("merge " + csv).code == 0);
  const std::vector<std::string> lines = lines_of(slurp(csv));
  REQUIRE(lines.size() == 4);  // header, index 0 (fa2-sm80), index 1 (fa-bf16acc), # run
  auto with_model = [](std::string line, const std::string& from, const std::string& to) {
    const std::size_t at = line.find("," + from + ",");
    REQUIRE(at != std::string::npos);
    return line.replace(at + 1, from.size(), to);
  };
  // A model name edited to another model (fa2-sm90 runs in bf16 too: every column is valid).
  std::vector<std::string> edited = lines;
  edited[1] = with_model(lines[1], "fa2-sm80", "fa2-sm90");
  const std::string one = write_file("grid_edited.csv", joined(edited));
  check_refused(run("merge " + one),
                {one + ": line 2 (index 0)", "configuration bf16/rne/fa2-sm90/random/n16/d16 is not in the run's grid",
                 "index 0 is bf16/rne/fa2-sm80/random/n16/d16"});
  // Two rows' models swapped: each is in the grid, but not at its index.
  edited = lines;
  edited[1] = with_model(lines[1], "fa2-sm80", "fa-bf16acc");
  edited[2] = with_model(lines[2], "fa-bf16acc", "fa2-sm80");
  const std::string swapped = write_file("grid_swapped.csv", joined(edited));
  check_refused(run("merge " + swapped), {swapped + ": line 2", "bf16/rne/fa-bf16acc/random/n16/d16"});
  // A run record whose options make fewer configurations than it claims.
  edited = lines;
  const std::size_t models = edited[3].find("fa2-sm80,fa-bf16acc");
  REQUIRE(models != std::string::npos);
  edited[3].replace(models, std::string("fa2-sm80,fa-bf16acc").size(), "fa2-sm80");
  edited.erase(edited.begin() + 2);
  const std::string record = write_file("grid_record.csv", joined(edited));
  check_refused(run("merge " + record), {record + ": run record: configurations 2", "grid of 1"});
  // The grid is bounded before any model is parsed: merge reads its lists from the files.
  edited = lines;
  std::string many;
  for (int beta = 2; beta < 70002; ++beta) {
    if (!many.empty()) many += ',';
    many += "fa2-sm80+dynmax:beta=";  // appended piece by piece: GCC 12 misreports + here (-Wrestrict)
    many += std::to_string(beta);
  }
  edited[3].replace(edited[3].find("fa2-sm80,fa-bf16acc"), std::string("fa2-sm80,fa-bf16acc").size(), many);
  const std::string huge = write_file("grid_huge.csv", joined(edited));
  check_refused(run("merge " + huge), {huge + ": run record", "70000 configurations, over the limit of 65536"});
  // JSON shards name the row by its position.
  const Run json = run(kSmallSweep + " --model fa2-sm80,fa-bf16acc --json");
  REQUIRE(json.code == 0);
  nlohmann::json j = nlohmann::json::parse(json.out);
  j["rows"][1]["scenario"] = "sink";
  const std::string json_path = write_file("grid_edited.json", j.dump());
  check_refused(run("merge " + json_path), {json_path + ": rows[1] (index 1)", "bf16/rne/fa-bf16acc/sink/n16/d16"});
}

TEST_CASE("issue 34: import refuses what replay cannot read, with the check replay uses") {
  const fs::path dir = scratch() / "import";
  fs::create_directories(dir);
  auto bare = [&](const std::string& name, fb::Dtype dtype, std::uint64_t kv_rows) {
    fb::Safetensors file;
    for (const char* t : {"q", "o"}) file.tensors.push_back(float_tensor(t, dtype, {1, 1, 16, 16}));
    for (const char* t : {"k", "v"}) file.tensors.push_back(float_tensor(t, dtype, {1, 1, kv_rows, 16}));
    const std::string path = (dir / name).string();
    fb::write_safetensors(path, file);
    return path;
  };
  const std::string statement = " --source unknown --layout bhsd --out ";
  const std::string out = (dir / "out.safetensors").string();
  // float64 arrays: the models compare bf16/fp16/fp32/fp8 bit patterns; --dtype does not
  // make them bf16 (before: written, then every replay failed).
  const std::string f64 = bare("f64.safetensors", fb::Dtype::F64, 16);
  check_refused(run("import " + f64 + statement + out + " --dtype bf16"), {f64, "F64"});
  check_refused(run("import " + f64 + statement + out), {f64, "F64"});
  check_refused(run("replay " + f64 + " --model fa2-sm80 --source unknown --layout bhsd --dtype bf16"), {f64, "F64"});
  // A KV length other than q's (cross-attention, decoding) is imported, and replays.
  const std::string nk = bare("nk.safetensors", fb::Dtype::F32, 32);
  const std::string nk_out = (dir / "nk_out.safetensors").string();
  const Run nk_import = run("import " + nk + statement + nk_out + " --model standard-fp32");
  REQUIRE_MESSAGE(nk_import.code == 0, nk_import.err);
  CHECK(nk_import.out.find("kv length 32") != std::string::npos);
  const Run nk_replay = run("replay " + nk_out);
  CHECK_MESSAGE((nk_replay.code == 0 || nk_replay.code == 1), nk_replay.err);
  // A model that does not exist, or does not read the capture's dtype (fp32 here).
  const std::string good = bare("good.safetensors", fb::Dtype::F32, 16);
  check_refused(run("import " + good + statement + out + " --model nosuch"),
                {"--model nosuch", "unknown kernel model"});
  check_refused(run("import " + good + statement + out + " --model fa2-sm80"), {"--model fa2-sm80", "fp32"});
  CHECK_FALSE(fs::exists(out));
  // What import writes, replay reads (it may mismatch: the capture's o is not a kernel's).
  const Run ok = run("import " + good + statement + out + " --model standard-fp32");
  REQUIRE_MESSAGE(ok.code == 0, ok.err);
  const Run replay = run("replay " + out);
  CHECK_MESSAGE((replay.code == 0 || replay.code == 1), replay.err);
}

TEST_CASE("issue 34: bias-test --traces says so when a capture's dO gives no delta test") {
  const std::string full = (scratch() / "bwd_full.safetensors").string();
  REQUIRE(run("make-trace --model fa2-sm80 --scenario sink --seqlen 32 --headdim 16 --backward --out " + full).code ==
          0);
  const fb::Trace trace = fb::read_trace(full);
  // The capture PyTorch's SDPA gives with no kernel named: q, k, v, o, do; no delta, no model.
  fb::Safetensors file;
  file.metadata = trace.file().metadata;
  file.metadata.erase("model");
  for (const char* name : {"q", "k", "v", "o", "do"}) file.tensors.push_back(trace.tensor(name));
  const std::string bare = (scratch() / "bwd_no_model.safetensors").string();
  fb::write_safetensors(bare, file);
  const Run json = run("bias-test --traces " + bare + " --json");
  REQUIRE_MESSAGE((json.code == 0 || json.code == 1 || json.code == 4), json.err);
  const nlohmann::json j = nlohmann::json::parse(json.out);
  REQUIRE(j.contains("delta_note"));
  const std::string note = j["delta_note"].get<std::string>();
  CHECK(has(note, "NOT tested"));
  CHECK(has(note, bare));
  CHECK(has(note, "dO but no delta"));
  CHECK_FALSE(j.contains("delta"));
  const Run text = run("bias-test --traces " + bare);
  CHECK(has(text.out, "delta: NOT tested for " + bare));
  // With the model named, delta is computed from O and dO, and tested.
  file.metadata["model"] = "fa2-sm80";
  const std::string named = (scratch() / "bwd_named.safetensors").string();
  fb::write_safetensors(named, file);
  const Run computed = run("bias-test --traces " + named + " --json");
  REQUIRE_MESSAGE((computed.code == 0 || computed.code == 1 || computed.code == 4), computed.err);
  const nlohmann::json c = nlohmann::json::parse(computed.out);
  CHECK(c.contains("delta"));
  CHECK_FALSE(has(c.value("delta_note", ""), "NOT tested"));
}

TEST_CASE("issue 38: make-trace --seqlen-k, replay and bias-test --traces with a key length other than N") {
  const fs::path dir = scratch() / "nq_nk";
  fs::create_directories(dir);
  std::vector<std::string> paths;
  for (int seed = 0; seed < 3; ++seed) {
    const std::string path = (dir / ("decode" + std::to_string(seed) + ".safetensors")).string();
    const Run made =
        run("make-trace --model fa2-sm80 --scenario sink --seqlen 8 --seqlen-k 40 --headdim 16 --backward "
            "--seed " +
            std::to_string(seed) + " --out " + path);
    REQUIRE_MESSAGE(made.code == 0, made.err);
    CHECK_MESSAGE(has(made.out, "seqlen 8, kv length 40"), made.out);
    paths.push_back(path);
  }
  const fb::Trace trace = fb::read_trace(paths[0]);
  CHECK(trace.rows() == 8);
  CHECK(trace.kv_rows() == 40);
  CHECK(trace.tensor("dk").shape[2] == 40);
  CHECK(trace.tensor("dq").shape[2] == 8);
  // The emulator's own trace replays bit for bit, every tensor, and explains a row.
  const Run replay = run("replay " + paths[0]);
  CHECK_MESSAGE(replay.code == 0, replay.out << replay.err);
  const Run explain = run("replay " + paths[0] + " --explain --row 7");
  CHECK_MESSAGE(explain.code == 0, explain.out << explain.err);
  const Run bias = run("bias-test --traces " + dir.string());
  // Three samples: inconclusive (exit 4), but measured, against the exact reference of N != Nk.
  CHECK_MESSAGE(bias.code == 4, bias.out << bias.err);
  CHECK_MESSAGE(has(bias.out, "3 traces"), bias.out);
  CHECK_MESSAGE(has(bias.out, "O      n=3"), bias.out);
  // A stated seqlen_k that is not k's length: exit 2, naming the file and the key.
  fb::Safetensors file = fb::read_safetensors(paths[0]);
  file.metadata["seqlen_k"] = "39";
  const std::string bad = (scratch() / "nq_nk_bad.safetensors").string();
  fb::write_safetensors(bad, file);
  check_refused(run("replay " + bad), {bad, "seqlen_k", "says 39", "'k'", "40 rows"});
  file.metadata["seqlen_k"] = "forty";
  fb::write_safetensors(bad, file);
  check_refused(run("replay " + bad), {bad, "seqlen_k", "positive sequence length", "forty"});
  // Stated and right: accepted.
  file.metadata["seqlen_k"] = "40";
  file.metadata["seqlen_q"] = "8";
  fb::write_safetensors(bad, file);
  CHECK(run("replay " + bad).code == 0);
}

TEST_CASE("issue 38: replay runs a causal mask aligned as the trace's causal_alignment says") {
  // The model's own outputs for a top-left causal mask (PyTorch's is_causal) with N < Nk: a
  // trace saying top-left replays bit for bit; the same trace saying bottom-right does not.
  auto in = fb::attn::make_scenario("random", 5, 1, 1, 12, 16, fb::formats::bf16, false, 0, 40);
  in.causal = true;
  in.causal_alignment = fb::attn::AttentionInputs::CausalAlignment::top_left;
  const fb::attn::ModelHandle model = fb::attn::parse_kernel_model("fa2-sm80", fb::formats::bf16);
  const fb::attn::AttentionOutputs out = fb::attn::run_attention(model, in, fb::attn::RunOptions{});
  const auto shape = [](const fb::attn::Tensor4& t) {
    return std::vector<std::uint64_t>{static_cast<std::uint64_t>(t.batch), static_cast<std::uint64_t>(t.heads),
                                      static_cast<std::uint64_t>(t.rows), static_cast<std::uint64_t>(t.cols)};
  };
  for (const char* alignment : {"top-left", "bottom-right"}) {
    CAPTURE(alignment);
    fb::TraceMetadata md;
    md.source = "emulated";
    md.model = "fa2-sm80";
    md.softmax_scale = in.softmax_scale;
    md.causal = true;
    md.causal_alignment = alignment;
    md.dtype = fb::formats::bf16;
    const std::string path = (scratch() / (std::string("aligned_") + alignment + ".safetensors")).string();
    fb::TraceBuilder(md)
        .add_values("q", fb::formats::bf16, shape(in.q), in.q.data)
        .add_values("k", fb::formats::bf16, shape(in.k), in.k.data)
        .add_values("v", fb::formats::bf16, shape(in.v), in.v.data)
        .add_values("o", fb::formats::bf16, shape(out.o), out.o.data)
        .write(path);
    const Run r = run("replay " + path);
    CHECK_MESSAGE(r.code == (std::string(alignment) == "top-left" ? 0 : 1), r.out << r.err);
  }
}

TEST_CASE("audit F4: --causal top-left|bottom-right states a bare capture's mask alignment") {
  // A bare capture (no metadata) of PyTorch's is_causal with N = 12 queries and Nk = 40 keys:
  // row i sees keys j <= i (top-left). Its O is the 1024-bit MPFR attention over those keys
  // (tests/mpfr_attention.hpp, from the definitions) rounded once to bf16's 8 significand
  // bits by MPFR, so correctly-rounded replays it bit for bit only under the top-left mask;
  // bottom-right (j <= i + 28, what a plain --causal true means) is another mask.
  const int n = 12, nk = 40, d = 16;
  const auto in = fb::attn::make_scenario("random", 11, 1, 1, n, d, fb::formats::bf16, true, 0, nk);
  REQUIRE((in.q.rows == n && in.k.rows == nk));
  const fb::test::MpAttention exact = fb::test::mpfr_attention(in, [](int row) { return row + 1; });
  std::vector<double> o_bf16;
  for (const fb::test::Mp& value : exact.o) {
    mpfr_t rounded;
    mpfr_init2(rounded, 8);
    mpfr_set(rounded, value.v, MPFR_RNDN);
    o_bf16.push_back(mpfr_get_d(rounded, MPFR_RNDN));
    mpfr_clear(rounded);
  }
  fb::TraceMetadata md;
  md.source = "unknown";
  const auto rows_of = [](std::uint64_t rows) { return std::vector<std::uint64_t>{1, 1, rows, 16}; };
  fb::Safetensors bare_file = fb::TraceBuilder(md)
                                  .add_values("query", fb::formats::bf16, rows_of(n), in.q.data)
                                  .add_values("key", fb::formats::bf16, rows_of(nk), in.k.data)
                                  .add_values("value", fb::formats::bf16, rows_of(nk), in.v.data)
                                  .add_values("out", fb::formats::bf16, rows_of(n), o_bf16)
                                  .to_safetensors();
  bare_file.metadata.clear();
  const std::string bare = (scratch() / "f4_bare.safetensors").string();
  fb::write_safetensors(bare, bare_file);
  REQUIRE(in.softmax_scale == 0.25);  // 1/sqrt(16), exactly what --scale 0.25 states
  const std::string statement = " --source unknown --scale 0.25 --layout bhsd --model correctly-rounded";
  const auto import_as = [&](const std::string& causal, const std::string& out) {
    return run("import " + bare + statement + " --causal " + causal + " --out " + (scratch() / out).string());
  };
  const auto alignment_of = [](const std::string& path) {
    const fb::Trace trace = fb::read_trace(path);
    const auto& m = trace.raw_metadata();
    const auto it = m.find("causal_alignment");
    return it == m.end() ? std::string("(absent)") : it->second;
  };

  const Run top_left = import_as("top-left", "f4_tl.safetensors");
  REQUIRE_MESSAGE(top_left.code == 0, top_left.err);
  CHECK_MESSAGE(has(top_left.out, "causal, aligned top-left (key j <= row i)"), top_left.out);
  CHECK_MESSAGE(top_left.err.empty(), top_left.err);
  const std::string tl = (scratch() / "f4_tl.safetensors").string();
  CHECK(alignment_of(tl) == "top-left");
  CHECK(fb::read_trace(tl).raw_metadata().at("causal") == "true");
  const Run tl_replay = run("replay " + tl + " --json");
  CHECK_MESSAGE(tl_replay.code == 0, tl_replay.out << tl_replay.err);
  // The bare capture replays the same with the statement given to replay itself.
  const Run bare_replay = run("replay " + bare +
                              " --source unknown --scale 0.25 --layout bhsd --causal top-left "
                              "--model correctly-rounded --json");
  CHECK_MESSAGE(bare_replay.code == 0, bare_replay.out << bare_replay.err);

  // A plain true: bottom-right, said on stderr in one note line, written to the metadata.
  const Run plain = import_as("true", "f4_true.safetensors");
  REQUIRE_MESSAGE(plain.code == 0, plain.err);
  CHECK_MESSAGE(has(plain.out, "causal, aligned bottom-right"), plain.out);
  CHECK_MESSAGE(std::count(plain.err.begin(), plain.err.end(), '\n') == 1, plain.err);
  CHECK_MESSAGE(plain.err.rfind("note: ", 0) == 0, plain.err);
  for (const char* needle : {"bottom-right", "--causal top-left", "12", "40"})
    CHECK_MESSAGE(has(plain.err, needle), "missing '" << needle << "' in " << plain.err);
  CHECK(alignment_of((scratch() / "f4_true.safetensors").string()) == "bottom-right");
  const Run plain_replay = run("replay " + (scratch() / "f4_true.safetensors").string() + " --json");
  CHECK_MESSAGE(plain_replay.code == 1, plain_replay.out << plain_replay.err);
  const Run bottom_right = import_as("bottom-right", "f4_br.safetensors");
  REQUIRE_MESSAGE(bottom_right.code == 0, bottom_right.err);
  CHECK_MESSAGE(bottom_right.err.empty(), bottom_right.err);
  CHECK(run("replay " + (scratch() / "f4_br.safetensors").string()).code == 1);
  const Run not_causal = import_as("false", "f4_none.safetensors");
  REQUIRE_MESSAGE(not_causal.code == 0, not_causal.err);
  CHECK_MESSAGE(has(not_causal.out, "not causal"), not_causal.out);
  CHECK(alignment_of((scratch() / "f4_none.safetensors").string()) == "none");

  // A file that states its alignment: a contradicting --causal is one error, exit 2, naming
  // the option and the key; a plain true agrees with either alignment and notes nothing.
  const std::string out = " --out " + (scratch() / "f4_again.safetensors").string();
  check_refused(run("import " + tl + " --causal bottom-right" + out),
                {"--causal bottom-right conflicts", "causal_alignment='top-left'", "drop --causal"});
  check_refused(run("import " + tl + " --causal false" + out), {"--causal false conflicts", "causal"});
  check_refused(run("replay " + tl + " --causal bottom-right"), {"--causal bottom-right conflicts", "top-left"});
  check_refused(run("import " + (scratch() / "f4_none.safetensors").string() + " --causal top-left" + out),
                {"--causal top-left conflicts"});
  const Run agrees = run("import " + tl + " --causal true --out " + (scratch() / "f4_agrees.safetensors").string());
  CHECK_MESSAGE(agrees.code == 0, agrees.err);
  CHECK_MESSAGE(agrees.err.empty(), agrees.err);
  CHECK(alignment_of((scratch() / "f4_agrees.safetensors").string()) == "top-left");
  check_refused(run("import " + bare + statement + " --causal top_left" + out),
                {"--causal top_left", "true, false, top-left or bottom-right"});

  // causal_alignment alone states causality (no causal key): replayed top-left, not unmasked.
  fb::Safetensors alignment_only = bare_file;
  alignment_only.metadata = {{"source", "unknown"},
                             {"softmax_scale", "0.25"},
                             {"model", "correctly-rounded"},
                             {"causal_alignment", "top-left"}};
  const std::string alignment_only_path = (scratch() / "f4_alignment_only.safetensors").string();
  fb::write_safetensors(alignment_only_path, alignment_only);
  const Run alignment_only_replay = run("replay " + alignment_only_path);
  CHECK_MESSAGE(alignment_only_replay.code == 0, alignment_only_replay.out << alignment_only_replay.err);

  // N = Nk: both alignments are one mask, so a plain true notes nothing.
  const auto square = fb::attn::make_scenario("random", 12, 1, 1, 8, 16, fb::formats::bf16, false);
  fb::Safetensors square_file = fb::TraceBuilder(md)
                                    .add_values("q", fb::formats::bf16, rows_of(8), square.q.data)
                                    .add_values("k", fb::formats::bf16, rows_of(8), square.k.data)
                                    .add_values("v", fb::formats::bf16, rows_of(8), square.v.data)
                                    .add_values("o", fb::formats::bf16, rows_of(8), square.v.data)
                                    .to_safetensors();
  square_file.metadata.clear();
  const std::string square_path = (scratch() / "f4_square.safetensors").string();
  fb::write_safetensors(square_path, square_file);
  const Run square_import =
      run("import " + square_path + " --source unknown --layout bhsd --scale 0.25 --causal true --out " +
          (scratch() / "f4_square_trace.safetensors").string());
  CHECK_MESSAGE(square_import.code == 0, square_import.err);
  CHECK_MESSAGE(square_import.err.empty(), square_import.err);
  CHECK_MESSAGE(has(square_import.out, "with N = Nk both alignments are one mask"), square_import.out);
}

TEST_CASE("op and dot take -inf and -nan operands on the command line, and `--` ends the options") {
  // IEEE 754: 1 + (-inf) = -inf, sqrt(-inf) is invalid (NaN), NaN * 1 is NaN without a flag for
  // a quiet NaN; bf16 -inf is 0xff80, its quiet NaN 0x7fc0.
  const Run add = run("op add bf16 rne +1 -inf");
  CHECK_MESSAGE(add.code == 0, add.err);
  CHECK(add.out.rfind("ff80", 0) == 0);
  const Run root = run("op sqrt bf16 rne -inf");
  CHECK_MESSAGE(root.code == 0, root.err);
  CHECK(root.out.rfind("7fc0 v", 0) == 0);
  CHECK(run("op mul bf16 rne -nan +1").out.rfind("7fc0", 0) == 0);
  CHECK(run("op add bf16 rne -- +1 -inf").out == add.out);
  CHECK(run("op add bf16 rne +1 -INF").out == add.out);
  // C + 1*(-inf) + 1*1 in the sm80 model: -inf.
  const Run dot = run("dot sm80 bf16 00000000 -inf,+1 +1,+1");
  CHECK_MESSAGE(dot.code == 0, dot.err);
  CHECK(dot.out.rfind("ff800000", 0) == 0);
  // A word that is no operand is still one error naming it, and options still work.
  check_refused(run("op add bf16 rne +1 -x"), {"-x"});
  CHECK(run("op add bf16 rne +1 -inf --json").out.find("\"result\": \"ff80\"") != std::string::npos);
}

TEST_CASE("op --json with --explain keeps both; deviation's repeated model is refused rather than dropped") {
  // The contract gives them side by side (the contract audit): the explanation is the JSON's
  // "explain" member, the text --explain prints after the result line.
  const Run both = run("op add bf16 rne 1.5 +1 --json --explain");
  REQUIRE(both.code == 0);
  const auto j = nlohmann::json::parse(both.out);
  const Run text = run("op add bf16 rne 1.5 +1 --explain");
  REQUIRE(text.code == 0);
  CHECK(j["result"] == "4020");  // 1.5 + 1 = 2.5 = 1.01b * 2^1: 0 10000000 0100000
  CHECK(text.out == "4020 -\n" + j["explain"].get<std::string>());
  check_refused(run("deviation --models standard-bf16,standard-bf16 --seqlen 16 --headdim 16"),
                {"--models standard-bf16,standard-bf16", "standard-bf16 is given twice"});
  // deviation --inputs takes every scenario (normal is random's other name); its error lists them.
  check_refused(run("deviation --models standard-bf16 --inputs nope --seqlen 16 --headdim 16"),
                {"--inputs nope", "wide-ties"});
}

TEST_CASE("replay names the tensors it does not compare") {
  // A trace may hold m, l, scores or probabilities (COMMANDS.md "The trace format") that replay
  // has no comparison for: garbage there once gave "all compared values match" and nothing
  // else. They are named in a note and in the JSON's not_compared.
  const std::string made = (scratch() / "unread_base.safetensors").string();
  REQUIRE(run("make-trace --model fa2-sm80 --scenario random --seqlen 16 --headdim 16 --out " + made).code == 0);
  fb::Safetensors file = fb::read_safetensors(made);
  const auto lse =
      std::find_if(file.tensors.begin(), file.tensors.end(), [](const fb::SafeTensor& t) { return t.name == "lse"; });
  REQUIRE(lse != file.tensors.end());
  fb::SafeTensor extra = *lse;  // LSE's values: wrong as m and as l
  for (const char* name : {"m", "l"}) {
    extra.name = name;
    file.tensors.push_back(extra);
  }
  const std::string path = (scratch() / "unread.safetensors").string();
  fb::write_safetensors(path, file);
  const Run text = run("replay " + path);
  CHECK_MESSAGE(text.code == 0, text.out << text.err);
  CHECK_MESSAGE(has(text.out, "note: not compared: m, l"), text.out);
  const Run js = run("replay " + path + " --json");
  const auto j = nlohmann::json::parse(js.out);
  REQUIRE(j.contains("not_compared"));
  CHECK(j["not_compared"] == nlohmann::json::array({"m", "l"}));
  // The trace as made has none.
  CHECK(!has(run("replay " + made).out, "not compared"));
}

TEST_CASE("an SFU set for a model that evaluates no special function is refused, not ignored") {
  // correctly-rounded and standard-fp32 evaluate exp exactly or correctly rounded, on no SFU: a set
  // would replace nothing, and was once accepted with bit-identical output.
  const std::string trace = std::string(FLASHBITS_SOURCE_DIR) + "/traces/examples/random-fa2-sm80.safetensors";
  for (const char* model : {"correctly-rounded", "standard-fp32"}) {
    CAPTURE(model);
    const Run r = run("replay " + trace + " --model " + model + " --sfu hw-sm90");
    CHECK(r.code == 2);
    CHECK_MESSAGE(has(r.err, "--sfu hw-sm90: model " + std::string(model) + " evaluates no special function"), r.err);
  }
  // A model that evaluates one takes the set; auto keeps a model that evaluates none.
  CHECK(run("replay " + trace + " --sfu hw-sm90").code != 2);
  CHECK(run("replay " + trace + " --model correctly-rounded --sfu auto").code != 2);
}

TEST_CASE("wide-ties needs three features: a smaller head dim is refused, not another scenario") {
  for (const char* command : {"bias-test --model fa2-sm80 --trials 8", "sweep --model fa2-sm80 --trials 2",
                              "make-trace --model fa2-sm80 --out /dev/null"}) {
    CAPTURE(command);
    const Run r = run(std::string(command) + " --scenario wide-ties --seqlen 16 --headdim 2");
    CHECK(r.code == 2);
    CHECK_MESSAGE(has(r.err, "wide-ties: head dim 2"), r.err);
  }
  CHECK(run("bias-test --model fa2-sm80 --trials 2 --scenario wide-ties --seqlen 16 --headdim 3").code != 2);
}

TEST_CASE("replay and bias-test --traces say what a trace's metadata left them to assume") {
  // A trace without its scale or causal flag is replayed with 1/sqrt(d) and no mask: said in a
  // note, so that a capture that lost its causal flag is not silently measured as another
  // attention.
  const std::string made = (scratch() / "assumed_base.safetensors").string();
  REQUIRE(run("make-trace --model fa2-sm80 --scenario random --seqlen 16 --headdim 16 --out " + made).code == 0);
  CHECK(!has(run("replay " + made).out, "records no"));
  fb::Safetensors file = fb::read_safetensors(made);
  file.metadata.erase("softmax_scale");
  file.metadata.erase("causal");
  file.metadata.erase("causal_alignment");  // "none" states non-causal as well
  const std::string path = (scratch() / "assumed.safetensors").string();
  fb::write_safetensors(path, file);
  const Run replay = run("replay " + path);
  CHECK_MESSAGE(has(replay.out, "records no softmax_scale: 1/sqrt(16) assumed"), replay.out);
  CHECK_MESSAGE(has(replay.out, "records no causal flag: non-causal assumed"), replay.out);
  const Run bias = run("bias-test --traces " + path);
  CHECK_MESSAGE(has(bias.out, "note: " + path + " records no causal flag"), bias.out);
  // A causal trace of 8 queries over 24 keys without its alignment: bottom-right is assumed, and
  // said (the other alignment is another mask); with N = Nk nothing is assumed.
  const std::string cross = (scratch() / "assumed_cross.safetensors").string();
  REQUIRE(run("make-trace --model fa2-sm80 --scenario random --seqlen 8 --seqlen-k 24 --headdim 16 --causal "
              "top-left --out " +
              cross)
              .code == 0);
  fb::Safetensors cross_file = fb::read_safetensors(cross);
  cross_file.metadata.erase("causal_alignment");
  const std::string unaligned = (scratch() / "assumed_unaligned.safetensors").string();
  fb::write_safetensors(unaligned, cross_file);
  const Run cross_replay = run("replay " + unaligned);
  CHECK_MESSAGE(has(cross_replay.out, "records no causal_alignment for 8 queries and 24 keys: bottom-right assumed"),
                cross_replay.out);
  CHECK(cross_replay.code == 1);  // a top-left capture replayed bottom-right differs
  const Run square = run("replay " + made);
  CHECK(!has(square.out, "causal_alignment"));
}

TEST_CASE("bias-test --traces: one kernel whatever its suffixes' order; an unknown model is the trace's error") {
  const std::filesystem::path dir = scratch() / "one-kernel";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string common = " --scenario sink --seqlen 32 --headdim 16 --backward --out ";
  REQUIRE(run("make-trace --model fa2-sm80+delta-dpp+o-rtz" + common + (dir / "a.safetensors").string()).code == 0);
  REQUIRE(
      run("make-trace --model fa2-sm80+o-rtz+delta-dpp --seed 2" + common + (dir / "b.safetensors").string()).code ==
      0);
  const Run same = run("bias-test --traces " + dir.string());
  CHECK_MESSAGE(same.code != 2, same.err);
  // A model name that does not resolve: exit 2 naming the file and the name, as replay does
  // (measured as no model, an fp8 capture's quantisation read as bias).
  fb::Safetensors file = fb::read_safetensors(dir / "a.safetensors");
  file.metadata["model"] = "fa9-bogus";
  const std::string bogus = (scratch() / "bogus_model.safetensors").string();
  fb::write_safetensors(bogus, file);
  const Run unknown = run("bias-test --traces " + bogus);
  CHECK(unknown.code == 2);
  CHECK_MESSAGE(has(unknown.err, bogus + ": metadata model 'fa9-bogus'"), unknown.err);
  // demo measures against exact attention of the trace's inputs: an fp8 trace is refused.
  const std::string fp8 = (scratch() / "demo_fp8.safetensors").string();
  REQUIRE(run("make-trace --model fa3-fp8-sm90 --scenario sink --seqlen 64 --headdim 32 --out " + fp8).code == 0);
  const Run demo = run("demo --trace " + fp8);
  CHECK(demo.code == 2);
  CHECK_MESSAGE(has(demo.err, "quantises its inputs to fp8"), demo.err);
}

// A hardware capture whose compute capability is not recorded (a bare dump) replays with the
// model's own SFUs, whose ex2 differs from the H200's in an LSE element here and there: the
// mismatch then says nothing of the kernel, so replay says which SFUs it used and how to pick
// the measured ones; with them the capture replays bit for bit.
TEST_CASE("replay says when --sfu auto finds no measured SFU set for a hardware capture") {
  const std::string capture =
      std::string(FLASHBITS_SOURCE_DIR) + "/traces/hw/h200/torch/torch_bf16_sink_d64.safetensors";
  fb::Safetensors file = fb::read_safetensors(capture);
  REQUIRE(file.metadata.count("compute_capability") == 1);
  file.metadata.erase("compute_capability");
  const std::string path = (scratch() / "no_cc.safetensors").string();
  fb::write_safetensors(path, file);
  const Run bare = run("replay " + path);
  CHECK_MESSAGE(has(bare.out,
                    "note: the trace records no compute capability, so the model's own SFUs are used: a "
                    "capture from an sm_90 GPU (H100, H200) replays with --sfu hw-sm90"),
                bare.out);
  const Run measured = run("replay " + path + " --sfu hw-sm90");
  CHECK(measured.code == 0);
  CHECK(!has(measured.out, "records no compute capability"));
  CHECK(!has(run("replay " + capture).out, "records no compute capability"));
}

// Found by the bad-input audit: real-valued options and model parameters took words that are
// no decimal number (CLI11 and stod read hex floats and padding), "+splitkv:" with nothing
// after the colon read as the default, `--version extra` dropped the extra word, a bare
// word of zeros wider than the format's patterns was read as +0, and a probe file of no
// section "matched" (exit 0).
// Found when a snapshot's --version named the commit its build directory had been configured
// at, dozens of commits back: the git text is now written at each build. The reference is git
// itself; the commit alone is compared (files edited since the build would add "-dirty").
TEST_CASE("--version names the commit the binary was built from") {
  const std::string git = std::string("git -C '") + FLASHBITS_SOURCE_DIR + "' rev-parse --short=7 HEAD 2>/dev/null";
  std::string head;
  if (FILE* pipe = ::popen(git.c_str(), "r")) {
    char buf[128];
    while (std::fgets(buf, sizeof buf, pipe)) head += buf;
    ::pclose(pipe);
  }
  while (!head.empty() && (head.back() == '\n' || head.back() == ' ')) head.pop_back();
  const Run version = run("--version");
  CHECK(version.code == 0);
  CHECK(version.out.rfind("flashbits ", 0) == 0);
  if (head.empty()) {
    MESSAGE("no git checkout at " << FLASHBITS_SOURCE_DIR << ": the commit is not checked");
    return;
  }
  CAPTURE(version.out);
  CHECK(version.out.find("(git ") != std::string::npos);
  CHECK(version.out.find(head) != std::string::npos);  // after a tag's name where describe finds one
}

TEST_CASE("words that are no decimal number, an empty parameter list and vacuous inputs are refused") {
  for (const char* alpha : {"0x0.1", "' 0.1'", "0.1x", "inf", "0x1p-3"}) {
    CAPTURE(alpha);
    check_refused(run(std::string("bias-test --model fa2-sm80 --trials 2 --seqlen 16 --headdim 16 --alpha ") + alpha),
                  {"--alpha: expected a decimal number"});
  }
  check_refused(run("sweep --model fa2-sm80 --trials 2 --seqlen 16 --headdim 16 --at-stake 0x1"),
                {"--at-stake: expected a decimal number, got '0x1'"});
  check_refused(run("merge x.csv --alpha 1e999"), {"--alpha: expected a decimal number, got '1e999'"});
  // An underflow read as 0 was echoed as "--alpha 0", a value nobody typed.
  check_refused(run("bias-test --model fa2-sm80 --trials 2 --alpha 1e-400"),
                {"--alpha: '1e-400' is below the smallest double"});
  // Found by the bad-input audit: 1e-323 passed the check, then the level divided among the
  // run's 4 comparisons was 0 and the run failed after its work, naming no option.
  check_refused(run("bias-test --model fa2-sm80 --trials 4 --seqlen 16 --headdim 8 --alpha 1e-323"),
                {"--alpha 1e-323: below 1e-100, the smallest significance level flashbits takes"});
  check_refused(run("sweep --model fa2-sm80 --trials 2 --seqlen 16 --headdim 8 --alpha 9.9e-101"),
                {"--alpha 9.9e-101: below 1e-100"});
  CHECK(run("bias-test --model fa2-sm80 --trials 4 --seqlen 16 --headdim 8 --alpha 1e-100").code != 2);
  check_refused(run("sweep --model fa2-sm80 --trials 2 --at-stake 0.5e-999"),
                {"--at-stake: '0.5e-999' is below the smallest double"});
  // Out of range, a value is echoed as the double it reads as, every digit kept: "%g" echoed
  // 1.0000001 as "1". A level that rounds onto 1 is told so.
  check_refused(run("bias-test --model fa2-sm80 --trials 2 --alpha 1.0000001"),
                {"--alpha 1.0000001: expected a significance level strictly between 0 and 1"});
  check_refused(run("bias-test --model fa2-sm80 --trials 2 --alpha 0.99999999999999999"),
                {"--alpha 1: expected", "within 2^-54 of 1 reads as 1"});
  check_refused(run("sweep --model fa2-sm80 --trials 2 --at-stake -0.0000001234567"),
                {"--at-stake -1.234567e-7: expected a positive"});
  // A decimal word is still read, to the double nearest it: 1e-3 in any spelling.
  CHECK(run("bias-test --model fa2-sm80 --trials 2 --seqlen 16 --headdim 16 --alpha 0.0010 --json").code == 4);
  check_refused(run("bias-test --model fa2-sm80+lazy-rescale:0x10 --trials 2"),
                {"bad number '0x10' for +lazy-rescale:T (a decimal number)"});
  check_refused(run("bias-test --model fa2-sm80+dynmax:beta=0x2 --trials 2"), {"bad number '0x2'"});
  check_refused(run("bias-test --model fa2-sm80+splitkv: --trials 2"), {"+splitkv:: nothing after ':'"});
  check_refused(run("bias-test --model fa2-sm80+lazy-rescale: --trials 2"), {"+lazy-rescale:: nothing after ':'"});
  // A signed parameter: the '+' is the variant separator, and the message says so.
  check_refused(run("bias-test --model fa2-sm80+lazy-rescale:+8 --trials 2"),
                {"+lazy-rescale:: nothing after ':'", "a '+' starts the next variant", "'+lazy-rescale:+8'"});
  check_refused(run("--version extra"), {"--version takes no other word, got 'extra'"});
  // Two spellings of one kernel (the canonical name orders variants and drops +o-rne) would run
  // it twice under two labels.
  check_refused(run("sweep --model fa2-sm80+o-fp32+dynmax,fa2-sm80+dynmax+o-fp32 --scenario random --seqlen 16 "
                    "--headdim 8 --trials 2"),
                {"fa2-sm80+o-fp32+dynmax and fa2-sm80+dynmax+o-fp32 are one kernel"});
  check_refused(run("deviation --models fa2-sm80,fa2-sm80+o-rne --seqlen 16 --headdim 8"),
                {"fa2-sm80 and fa2-sm80+o-rne are one kernel (fa2-sm80)"});
  // `--help WORD` is WORD's help when WORD is a subcommand; any other word is refused, not dropped.
  check_refused(run("--help extra"), {"--help takes at most one subcommand name, got 'extra'"});
  check_refused(run("--help bias-tset"), {"got 'bias-tset'", "bias-test"});
  check_refused(run("--help bias-test extra"), {"got 'extra'"});
  const Run sub_help = run("--help bias-test");
  CHECK(sub_help.code == 0);
  CHECK(has(sub_help.out, "--at-stake"));
  CHECK(sub_help.out == run("bias-test --help").out);
  // Zeros: as wide as the format's pattern (4 hex digits for bf16) is +0; wider is refused.
  const Run zero = run("op add bf16 rne 0000 0x3f80");
  CHECK(zero.code == 0);
  CHECK(zero.out == "3f80 -\n");  // +0 + 1 = 1 exactly
  check_refused(run("op add bf16 rne 00000 0x3f80"), {"'00000' is wider than a bf16 bit pattern (4 hex digits)"});
  // replay's row coordinates are integers as every other integer option is (CLI11 alone took 0x1
  // and answered 1e3 with "Could not convert").
  for (const char* coordinate : {"--row 0x1", "--row 1e3", "--head abc", "--batch 99999999999", "--feature -1"}) {
    CAPTURE(coordinate);
    check_refused(run(std::string("replay x.safetensors ") + coordinate), {"expected an integer 0..2147483647"});
  }
  // CLI11's wording of an option given twice, and of a word before the subcommand, in ours.
  check_refused(run("sweep --model a --model b"), {"sweep: --model: given 2 times (give it once)"});
  // The words were listed reversed ('2 --jobs'), and `--jobs 2 sweep` said "--model is required".
  for (const char* before : {"--jobs 2 op add bf16 rne 0x3f80 0x3f80", "--jobs 2 sweep", "-- sweep", "-sweep"}) {
    CAPTURE(before);
    const std::string word = std::string(before).substr(0, std::string(before).find(' '));
    check_refused(run(before), {"unexpected word '" + word + "' before the subcommand (the subcommand comes first"});
  }
  // Surplus words after the subcommand's own were listed last first, with a hint about words
  // before the subcommand; --help-all WORD dropped WORD.
  check_refused(run("sweep --model fa2-sm80 extra word"),
                {"sweep: unexpected word(s) 'extra word' (no option or argument of this subcommand takes them)"});
  check_refused(run("--help-all bogus"), {"--help-all takes at most one subcommand name, got 'bogus'"});
  CHECK(run("--help-all sweep").code == 0);
  // A number beyond the option's type was CLI11's "Could not convert: --jobs = ...".
  check_refused(run("sweep --model fa2-sm80 --jobs 18446744073709551617"),
                {"--jobs: '18446744073709551617' is outside the range the option takes (INT:1..1024)"});
  // A probe file of no section: FBPROBE1 and a section count of 0.
  const std::string empty_probes = write_file("no_sections.fbp", std::string("FBPROBE1\0\0\0\0", 12));
  check_refused(run("probe-check " + empty_probes), {"no_sections.fbp: holds no section: nothing to check"});
}

// Found by the bad-input audit: CLI11 hands an output option the next word, so `--csv --json`
// wrote a CSV file named "--json" and printed the table, and `--out --backward` wrote a
// trace named "--backward" without its backward: exit 0, an option silently dropped.
TEST_CASE("an output option given an option's spelling is refused, not written to") {
  const std::string run_args = "--model fa2-sm80 --trials 2 --seqlen 16 --headdim 8";
  check_refused(run("sweep " + run_args + " --csv --json"),
                {"--csv: expected a file path, got '--json', an option's spelling (for a file of that name write "
                 "./--json)"});
  check_refused(run("make-trace --model fa2-sm80 --seqlen 16 --headdim 8 --out --backward"),
                {"--out: expected a file path, got '--backward'"});
  check_refused(run("sweep " + run_args + " --csv --"), {"--csv: expected a file path, got '--'"});
  check_refused(run("merge x.csv --csv -o"), {"--csv: expected a file path, got '-o'"});
  CHECK_FALSE(std::filesystem::exists("--json"));
  CHECK_FALSE(std::filesystem::exists("--backward"));
  // "-" is still standard output where an option takes it, and ./--json a file of that name.
  CHECK(run("sweep " + run_args + " --csv -").code != 2);  // 0 or 1: the verdict
  const std::string named = (scratch() / "--json").string();
  CHECK(run("sweep " + run_args + " --csv " + named).code != 2);
  CHECK(std::filesystem::exists(named));
}

// Found by the bad-input audit: an option given no value said CLI11's "--jobs: 1 required
// INT:1..1024 missing", which reads like a count of requirements.
TEST_CASE("an option given no value says so, with the values it takes") {
  check_refused(run("sweep --model fa2-sm80 --jobs="), {"sweep: --jobs: needs a value (INT:1..1024), none given"});
  check_refused(run("make-trace --model fa2-sm80 --out"), {"make-trace: --out: needs a value (TEXT), none given"});
  const Run r = run("sweep --model fa2-sm80 --seqlen=");
  check_refused(r, {"--seqlen: needs a value"});
  CHECK(r.err.find("required") == std::string::npos);
}

// `replay DIR --plot DIR/out.npy` wrote an SVG into the folder capture DIR, whose next read took
// it for one more tensor: no output of flashbits may carry a numpy name.
TEST_CASE("an output option given a numpy file name is refused, not written to") {
  const std::string trace = std::string(FLASHBITS_SOURCE_DIR) + "/traces/examples/random-fa2-sm80.safetensors";
  const std::string plot = (scratch() / "out.npy").string();
  check_refused(run("replay " + trace + " --plot " + plot),
                {"--plot " + plot + ": flashbits writes no numpy file", "give it another name"});
  CHECK_FALSE(std::filesystem::exists(plot));
  const std::string csv = (scratch() / "grid.npz").string();
  check_refused(run("sweep --model fa2-sm80 --trials 2 --seqlen 16 --headdim 8 --csv " + csv),
                {"--csv " + csv + ": flashbits writes no numpy file"});
  CHECK_FALSE(std::filesystem::exists(csv));
  // A trace's own refusal stays the more specific one.
  check_refused(run("make-trace --model fa2-sm80 --seqlen 16 --headdim 8 --out " + plot),
                {"a trace is written as safetensors"});
}

// Found by the bad-input audit: an option given twice is exit 2, but a flag given twice was
// counted and accepted (`formats --json --json`, `replay --all --all`).
TEST_CASE("a flag given twice is refused as an option given twice is") {
  check_refused(run("formats --json --json"), {"formats: --json: given 2 times (give it once)"});
  check_refused(run("bias-test --model fa2-sm80 --by-max --trials 2 --by-max"), {"--by-max: given 2 times"});
  check_refused(run("make-trace --model fa2-sm80 --backward --backward --out x.safetensors"),
                {"--backward: given 2 times"});
  CHECK(run("formats --json").code == 0);
}

// Found by the bad-input audit: probe-check --model sm81 blamed the probe file's first section
// ("FILE: section 0 (...): unknown tensor-core model"), not the option.
TEST_CASE("probe-check: an unknown --model is the option's fault") {
  const std::string shipped = std::string(FLASHBITS_SOURCE_DIR) + "/traces/hw/probes_h200.fbp";
  for (const char* model : {"sm81", "cdna3", "fa2-sm80"}) {
    CAPTURE(model);
    const Run r = run("probe-check " + shipped + " --model " + model);
    check_refused(r, {std::string("--model: unknown tensor-core model '") + model + "' (known: "});
    CHECK(r.err.find("probes_h200.fbp") == std::string::npos);
  }
}

// Found by the shapes audit: make-trace --backward of a forward-only model (the fp8 kernels)
// writes dO and delta only, but its line said "with backward".
TEST_CASE("make-trace --backward says what a forward-only model wrote") {
  const std::string out = (scratch() / "fp8_backward.safetensors").string();
  const Run r = run("make-trace --model fa3-fp8-sm90 --seqlen 32 --headdim 64 --backward --out " + out);
  REQUIRE(r.code == 0);
  CHECK(r.out.find(", with dO and delta only: fa3-fp8-sm90 models no dQ, dK, dV)") != std::string::npos);
  CHECK(r.out.find("with backward") == std::string::npos);
  const Run full = run("make-trace --model fa2-sm80 --seqlen 32 --headdim 64 --backward --out " + out);
  CHECK(full.out.find(", with backward)") != std::string::npos);
}

// The contract's --dtype (the input format of models that name none) was unknown to sweep
// (found by the contract audit): it is --formats with one entry, refused beside another.
TEST_CASE("sweep --dtype F is --formats F") {
  const std::string grid = "sweep --model standard --scenario random --seqlen 16 --headdim 16 --trials 2 --json";
  const Run dtype = run(grid + " --dtype fp16");
  const Run formats = run(grid + " --formats fp16");
  REQUIRE(dtype.code == 0);
  const auto rows = nlohmann::json::parse(dtype.out)["rows"];
  REQUIRE(rows.size() == 1);
  CHECK(rows[0]["format"] == "fp16");
  CHECK(rows[0]["model"] == "standard-fp16");
  CHECK(dtype.out == formats.out);
  check_refused(run(grid + " --dtype fp16 --formats bf16"), {"--dtype fp16 conflicts with --formats bf16"});
  check_refused(run(grid + " --dtype fp16,bf16"), {"--dtype", "fp16,bf16"});
  CHECK(run(grid + " --dtype bf16 --formats bf16").code == 0);
}
