// tests/test_capture_import.cpp: importing the captures people already have
// (traces/capture_import.hpp, traces/numpy_files.hpp).
//
// The reference is independent of the importer: a trace built here is re-saved by
// tests/export_capture.py, which uses only Python's json/struct and numpy's own writers
// (np.save, np.savez, np.savez_compressed) and numpy's transpose for flash_attn's layout.
// Every imported tensor must then equal the original bit for bit, in the schema's names and
// layout. Grouped-query attention (2:1 and 4:1) and a KV length
// different from the query length make the layout transposes non-trivial. The tests skip
// with a message where python3 with numpy is missing.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "traces/capture_import.hpp"
#include "traces/numpy_files.hpp"
#include "traces/trace.hpp"

using namespace fb;
namespace fs = std::filesystem;

namespace {

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("fb_test_import_" + std::to_string(::getpid())) / name;
  // Fresh: a folder left by an earlier run whose pid this one reuses held files that made
  // copy_file throw (seen on a machine that ran CI twice).
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string python() {
  for (const char* candidate : {"/usr/bin/python3", "python3"})
    if (std::system((std::string(candidate) + " -c 'import numpy' >/dev/null 2>&1").c_str()) == 0) return candidate;
  return "";
}

// Random bf16 bit patterns of varied magnitude (not only exactly representable small values).
std::vector<std::uint32_t> random_bf16(std::size_t n, std::mt19937& rng) {
  std::vector<std::uint32_t> out(n);
  std::uniform_int_distribution<std::uint32_t> mantissa(0, 127), exponent(120, 130), sign(0, 1);
  for (auto& bits : out) bits = (sign(rng) << 15) | (exponent(rng) << 7) | mantissa(rng);
  return out;
}

std::vector<double> random_f32(std::size_t n, std::mt19937& rng) {
  std::vector<double> out(n);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (auto& v : out) v = normal(rng);  // a float: exactly representable in fp32
  return out;
}

struct Shape {
  std::uint64_t b, h, hk, n, nk, d;
};

Trace make_original(const Shape& s, const fs::path& path) {
  std::mt19937 rng(1234);
  TraceMetadata md;
  md.source = "cuda:NVIDIA H100";
  md.softmax_scale = 0.125;
  md.causal = false;
  TraceBuilder builder(md);
  const std::vector<std::uint64_t> qs{s.b, s.h, s.n, s.d}, ks{s.b, s.hk, s.nk, s.d}, rows{s.b, s.h, s.n};
  auto bf16 = [&](const char* name, const std::vector<std::uint64_t>& shape) {
    const auto bits = random_bf16(shape[0] * shape[1] * shape[2] * shape[3], rng);
    builder.add_bits(name, formats::bf16, shape, bits);
  };
  for (const char* name : {"q", "o", "do", "dq"}) bf16(name, qs);
  for (const char* name : {"k", "v", "dk", "dv"}) bf16(name, ks);
  for (const char* name : {"lse", "delta"}) {
    const auto values = random_f32(s.b * s.h * s.n, rng);
    builder.add_values(name, formats::fp32, rows, values);
  }
  builder.write(path);
  return read_trace(path);
}

void require_same_tensors(const Trace& original, const Trace& imported) {
  for (const SafeTensor& t : original.file().tensors) {
    CAPTURE(t.name);
    REQUIRE(imported.has(t.name));
    const SafeTensor& got = imported.tensor(t.name);
    CHECK(got.dtype == t.dtype);
    std::vector<std::uint64_t> want_shape = t.shape;
    CHECK(got.shape == want_shape);
    CHECK(got.bytes == t.bytes);
  }
  CHECK(imported.file().tensors.size() == original.file().tensors.size());
}

}  // namespace

TEST_CASE("bare captures: safetensors, bshd, npz and npy files import bit for bit, GQA included") {
  const std::string py = python();
  if (py.empty()) {
    MESSAGE("python3 with numpy not found (apt-get install python3-numpy): capture import tests skipped");
    return;
  }
  for (const Shape& s : {Shape{2, 4, 2, 24, 40, 16}, Shape{1, 8, 2, 33, 33, 8}, Shape{1, 3, 3, 5, 7, 4}}) {
    CAPTURE(s.h);
    CAPTURE(s.hk);
    const fs::path dir = scratch("h" + std::to_string(s.h) + "k" + std::to_string(s.hk));
    const Trace original = make_original(s, dir / "original.safetensors");
    const std::string cmd = py + " " + FLASHBITS_SOURCE_DIR + "/tests/export_capture.py " +
                            (dir / "original.safetensors").string() + " " + dir.string();
    REQUIRE(std::system(cmd.c_str()) == 0);

    CaptureOptions stated;
    stated.source = "cuda:NVIDIA H100";
    stated.softmax_scale = 0.125;
    stated.causal = false;
    stated.dtype = formats::bf16;  // the npz/npy files hold bf16 as uint16
    for (const char* file : {"bare.safetensors", "capture.npz"}) {
      CAPTURE(file);
      CaptureOptions o = stated;
      o.layout = CaptureLayout::bhsd;
      const Trace imported = import_capture({dir / file}, o);
      require_same_tensors(original, imported);
      CHECK(imported.metadata().source == "cuda:NVIDIA H100");
      CHECK(imported.metadata().softmax_scale == 0.125);
      CHECK(imported.kv_heads() == s.hk);
    }
    for (const char* file : {"bshd.safetensors", "compressed.npz"}) {
      CAPTURE(file);
      CaptureOptions o = stated;
      o.layout = CaptureLayout::bshd;
      require_same_tensors(original, import_capture({dir / file}, o));
    }
    CaptureOptions o = stated;
    o.layout = CaptureLayout::bhsd;
    require_same_tensors(original, import_capture({dir / "npy"}, o));
    std::vector<fs::path> arrays;
    for (const char* name : {"q", "k", "v", "o", "do", "dq", "dk", "dv", "lse", "delta"})
      arrays.push_back(dir / "npy" / (std::string(name) + ".npy"));
    require_same_tensors(original, import_capture(arrays, o));
    // The file's own metadata (the original trace) needs no options, and wins over equal ones.
    require_same_tensors(original, import_capture({dir / "original.safetensors"}, {}));
    require_same_tensors(original, import_capture({dir / "original.safetensors"}, stated));
  }
}

TEST_CASE("layout detection: lse decides where the shapes allow, ambiguity is an error") {
  const std::string py = python();
  if (py.empty()) {
    MESSAGE("python3 with numpy not found: skipped");
    return;
  }
  const fs::path dir = scratch("detect");
  const Trace original = make_original(Shape{1, 4, 4, 24, 24, 8}, dir / "original.safetensors");
  REQUIRE(std::system((py + " " + FLASHBITS_SOURCE_DIR + "/tests/export_capture.py " +
                       (dir / "original.safetensors").string() + " " + dir.string())
                          .c_str()) == 0);
  CaptureOptions o;
  o.source = "unknown";
  o.softmax_scale = 0.125;
  o.dtype = formats::bf16;
  // lse [1,4,24] reads only as bhsd against q [1,4,24,8], only as bshd against q [1,24,4,8].
  require_same_tensors(original, import_capture({dir / "bare.safetensors"}, o));
  require_same_tensors(original, import_capture({dir / "bshd.safetensors"}, o));
  CHECK(import_capture({dir / "bare.safetensors"}, o).metadata().source == "unknown");
  CHECK_FALSE(is_hardware_capture(import_capture({dir / "bare.safetensors"}, o)));
  // The wrong explicit layout is refused when the other one fits.
  o.layout = CaptureLayout::bshd;
  CHECK_THROWS_WITH_AS(import_capture({dir / "bare.safetensors"}, o), doctest::Contains("--layout bshd does not fit"),
                       TraceError);
  // Without lse both readings fit q [1,4,24,8] and k [1,4,24,8]: ambiguous.
  o.layout = CaptureLayout::automatic;
  std::vector<fs::path> no_lse;
  for (const char* name : {"q", "k", "v", "o"}) no_lse.push_back(dir / "npy" / (std::string(name) + ".npy"));
  CHECK_THROWS_WITH_AS(import_capture(no_lse, o), doctest::Contains("layout is ambiguous"), TraceError);
  o.layout = CaptureLayout::bhsd;
  CHECK_NOTHROW(import_capture(no_lse, o));
  // A bad shape in a [batch, seq, heads, dim] file: the schema reads the transposed tensors,
  // and the message says so (a user holding dv [1,12,8,8] must not be left to wonder where
  // [1,8,12,8] came from).
  Safetensors bad = read_safetensors(dir / "bshd.safetensors");
  for (SafeTensor& t : bad.tensors)
    if (t.name == "dv") t.shape = {1, 12, 8, 8};  // same bytes as [1,24,4,8]
  write_safetensors(dir / "bad_bshd.safetensors", bad);
  o.layout = CaptureLayout::bshd;
  std::string message;
  try {
    import_capture({dir / "bad_bshd.safetensors"}, o);
  } catch (const TraceError& e) {
    message = e.what();
  }
  CHECK_MESSAGE(message.find("tensor 'dv': shape [1,8,12,8]") != std::string::npos, message);
  CHECK_MESSAGE(
      message.find("the capture's [batch, seq, heads, dim] tensors were transposed on import") != std::string::npos,
      message);
  // A [batch, seq, heads, dim] file whose lse is padded (26 rows for 24) fits neither reading:
  // the error is lse's length under the reading it misses by least, not "heads" under bhsd.
  Safetensors padded = read_safetensors(dir / "bshd.safetensors");
  for (SafeTensor& t : padded.tensors)
    if (t.name == "lse") {
      t.shape = {1, 4, 26};
      t.bytes.resize(1 * 4 * 26 * dtype_size(t.dtype), 0);
    }
  write_safetensors(dir / "padded_lse.safetensors", padded);
  o.layout = CaptureLayout::automatic;
  message.clear();
  try {
    import_capture({dir / "padded_lse.safetensors"}, o);
  } catch (const TraceError& e) {
    message = e.what();
  }
  CHECK_MESSAGE(message.find("tensor 'lse': shape [1,4,26]") != std::string::npos, message);
  CHECK_MESSAGE(message.find("rows dim (expected 24)") != std::string::npos, message);
  CHECK_MESSAGE(message.find("transposed on import") != std::string::npos, message);
  // A tensor the file calls 'query' is named as the file names it too.
  Safetensors aliased = read_safetensors(dir / "bare.safetensors");
  for (SafeTensor& t : aliased.tensors)
    if (t.name == "q" || t.name == "query") t.name = "query", t.dtype = Dtype::U16;
  write_safetensors(dir / "aliased.safetensors", aliased);
  o.layout = CaptureLayout::bhsd;
  o.dtype.reset();
  message.clear();
  try {
    import_capture({dir / "aliased.safetensors"}, o);
  } catch (const TraceError& e) {
    message = e.what();
  }
  CHECK_MESSAGE(message.find("tensor 'q' is U16") != std::string::npos, message);
  CHECK_MESSAGE(message.find("(read the capture's 'query' as q)") != std::string::npos, message);
}

TEST_CASE("bare captures: every missing or conflicting statement is one clear error") {
  const std::string py = python();
  if (py.empty()) {
    MESSAGE("python3 with numpy not found: skipped");
    return;
  }
  const fs::path dir = scratch("errors");
  const Trace original = make_original(Shape{1, 2, 1, 16, 16, 8}, dir / "original.safetensors");
  REQUIRE(std::system((py + " " + FLASHBITS_SOURCE_DIR + "/tests/export_capture.py " +
                       (dir / "original.safetensors").string() + " " + dir.string())
                          .c_str()) == 0);
  const fs::path bare = dir / "bare.safetensors", npz = dir / "capture.npz", orig = dir / "original.safetensors";
  CaptureOptions o;
  o.layout = CaptureLayout::bhsd;
  CHECK_THROWS_WITH_AS(import_capture({bare}, o), doctest::Contains("pass --source"), TraceError);
  o.source = "H100";
  CHECK_THROWS_WITH_AS(import_capture({bare}, o), doctest::Contains("expected cuda:<gpu>, emulated or unknown"),
                       TraceError);
  // A GPU name that is blank, padded or carries a control character (a newline would forge a
  // line of every report's provenance) is no hardware source.
  for (const char* bad : {"cuda:", "cuda: ", "cuda:H100 ", "cuda: H100", "cuda:a\nb", "cuda:a\tb"}) {
    CAPTURE(bad);
    o.source = bad;
    CHECK_THROWS_WITH_AS(import_capture({bare}, o), doctest::Contains("expected cuda:<gpu>, emulated or unknown"),
                         TraceError);
  }
  CHECK(fb::is_valid_source("cuda:NVIDIA H200"));
  CHECK(fb::is_valid_source("cuda:NVIDIA H100 80GB HBM3, driver 550"));
  o.source = "emulated";
  // uint16 arrays without --dtype: the message says how to read them.
  CHECK_THROWS_WITH_AS(import_capture({npz}, o), doctest::Contains("--dtype"), TraceError);
  o.dtype = formats::fp16;  // q is bf16 in the safetensors file: the option is at fault
  const std::string contradiction = bare.string() + ": --dtype fp16 contradicts tensor 'q', which is BF16";
  CHECK_THROWS_WITH_AS(import_capture({bare}, o), doctest::Contains(contradiction.c_str()), TraceError);
  // Conflicts with the file's own metadata.
  CaptureOptions c;
  c.source = "emulated";
  CHECK_THROWS_WITH_AS(import_capture({orig}, c), doctest::Contains("conflicts with the file's __metadata__ source"),
                       TraceError);
  c = {};
  c.softmax_scale = 0.5;
  CHECK_THROWS_WITH_AS(import_capture({orig}, c), doctest::Contains("--scale 0.5 conflicts"), TraceError);
  c = {};
  c.causal = true;
  CHECK_THROWS_WITH_AS(import_capture({orig}, c), doctest::Contains("--causal true conflicts"), TraceError);
  // Two names for one schema tensor.
  const fs::path both = dir / "both";
  fs::create_directories(both);
  for (const char* name : {"q", "k", "v", "o"})
    fs::copy_file(dir / "npy" / (std::string(name) + ".npy"), both / (std::string(name) + ".npy"));
  fs::copy_file(dir / "npy" / "o.npy", both / "out.npy");
  o.dtype = formats::bf16;
  CHECK_THROWS_WITH_AS(import_capture({both}, o), doctest::Contains("both name the schema's 'o'"), TraceError);
  // A capture without q is missing q, named as the directory given (not 'the layout is
  // ambiguous', and not its first file's fault), whatever --layout says.
  const fs::path no_q = dir / "no_q";
  fs::create_directories(no_q);
  for (const char* name : {"k", "v", "o"})
    fs::copy_file(dir / "npy" / (std::string(name) + ".npy"), no_q / (std::string(name) + ".npy"));
  for (const CaptureLayout layout : {CaptureLayout::automatic, CaptureLayout::bhsd}) {
    o.layout = layout;
    const std::string missing = no_q.string() + ": missing required tensor 'q'";
    CHECK_THROWS_WITH_AS(import_capture({no_q}, o), doctest::Contains(missing.c_str()), TraceError);
  }
}

TEST_CASE("npy and npz parsers refuse malformed input with one line") {
  // Hand-made headers: numpy's NEP 1 layout, with each field broken in turn.
  auto npy = [](const std::string& dict, std::size_t data_bytes) {
    std::string header = dict;
    while ((10 + header.size() + 1) % 64 != 0) header += ' ';
    header += '\n';
    // Built byte by byte: GCC 12 at -O3 misreports vector::insert after a 10-byte
    // initializer list as out of bounds (-Warray-bounds).
    std::vector<std::uint8_t> b;
    b.reserve(10 + header.size() + data_bytes);
    for (std::uint8_t byte :
         {std::uint8_t{0x93}, std::uint8_t{'N'}, std::uint8_t{'U'}, std::uint8_t{'M'}, std::uint8_t{'P'},
          std::uint8_t{'Y'}, std::uint8_t{1}, std::uint8_t{0}, static_cast<std::uint8_t>(header.size() & 255),
          static_cast<std::uint8_t>(header.size() >> 8)})
      b.push_back(byte);
    for (char c : header) b.push_back(static_cast<std::uint8_t>(c));
    for (std::size_t i = 0; i < data_bytes; ++i) b.push_back(0x3c);
    return b;
  };
  const SafeTensor ok = parse_npy(npy("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }", 12), "x", "x.npy");
  CHECK(ok.dtype == Dtype::F16);
  CHECK(ok.shape == std::vector<std::uint64_t>{2, 3});
  CHECK(parse_npy(npy("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3,), }", 12), "x", "x.npy").shape ==
        std::vector<std::uint64_t>{2, 3});  // a trailing comma is Python's
  const SafeTensor big = parse_npy(npy("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", 4), "x", "x.npy");
  CHECK(big.bytes == std::vector<std::uint8_t>{0x3c, 0x3c, 0x3c, 0x3c});
  struct Bad {
    std::string dict;
    std::size_t bytes;
    const char* says;
  };
  for (const Bad& bad :
       {Bad{"{'descr': '<f2', 'fortran_order': True, 'shape': (2, 3), }", 12, "Fortran order"},
        Bad{"{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", 16, "not supported"},
        Bad{"{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }", 11, "holds 11 bytes"},
        Bad{"{'descr': '<f2', 'fortran_order': False, 'shape': (99999999999, 99999999999), }", 8,
            "more than the file holds"},
        Bad{"{'descr': '<f2', 'shape': (2,), }", 4, "missing key 'fortran_order'"},
        Bad{"{'descr': '<f2', 'fortran_order': False, 'shape': (2,), 'x': 1}", 4, "unexpected key"},
        Bad{"{'descr': '<f2', 'fortran_order': False, 'shape': (2,", 4, "shape"},
        // Found by the sixth bad-input audit: dims without commas were read.
        Bad{"{'descr': '<f2', 'fortran_order': False, 'shape': (2 3), }", 12, "separated by commas"}}) {
    CAPTURE(bad.dict);
    CHECK_THROWS_WITH_AS(parse_npy(npy(bad.dict, bad.bytes), "x", "x.npy"), doctest::Contains(bad.says), TraceError);
  }
  const std::vector<std::uint8_t> not_zip(40, 0);
  CHECK_THROWS_WITH_AS(parse_npz(not_zip, "c.npz"), doctest::Contains("no end-of-central-directory"), TraceError);
  CHECK_THROWS_WITH_AS(parse_npy(not_zip, "x", "x.npy"), doctest::Contains("magic"), TraceError);
}

// Found in review: the CLI's bias-test --traces and Python's bias_test listed folders by two
// rules (one case-sensitive; one reading a folder of trace files as one .npy capture). The one
// rule, on names alone: the expected lists are built here from the names the test creates.
TEST_CASE("list_captures: a folder of trace files is its files, a folder of .npy arrays one capture") {
  const fs::path dir = scratch("listing");
  const auto touch = [](const fs::path& p) { std::ofstream(p) << ""; };
  const fs::path traces = dir / "traces", arrays = dir / "arrays", both = dir / "both", neither = dir / "neither";
  for (const fs::path& d : {traces, arrays, both, neither, traces / "sub"}) fs::create_directories(d);
  for (const char* name : {"b.safetensors", "A.NPZ", "c.SafeTensors", "readme.txt", "x.npz.bak"}) touch(traces / name);
  touch(traces / "sub" / "nested.safetensors");  // a subfolder is not read
  for (const char* name : {"q.npy", "k.npy", "v.npy", "o.NPY"}) touch(arrays / name);
  touch(both / "q.npy");
  touch(both / "t.npz");
  touch(neither / "readme.txt");

  const CaptureListing one = list_captures({traces});
  CHECK(one.captures == std::vector<fs::path>{traces / "A.NPZ", traces / "b.safetensors", traces / "c.SafeTensors"});
  CHECK(one.label == traces.string());
  const CaptureListing npy = list_captures({arrays});
  CHECK(npy.captures == std::vector<fs::path>{arrays});
  CHECK(npy.label == arrays.string());
  // Several paths: each read by the rule, in the order given; a file as given, even a missing one
  // (its reader names it); the label joins them.
  const CaptureListing several = list_captures({arrays, dir / "missing.safetensors", traces});
  CHECK(several.captures == std::vector<fs::path>{arrays, dir / "missing.safetensors", traces / "A.NPZ",
                                                  traces / "b.safetensors", traces / "c.SafeTensors"});
  CHECK(several.label == arrays.string() + ", " + (dir / "missing.safetensors").string() + ", " + traces.string());
  const CaptureListing file = list_captures({traces / "b.safetensors"});
  CHECK(file.captures == std::vector<fs::path>{traces / "b.safetensors"});
  CHECK(file.label.empty());
  CHECK(is_trace_file_name("x.NpZ"));
  CHECK_FALSE(is_trace_file_name("x.npy"));
  CHECK_FALSE(is_trace_file_name("safetensors"));
  CHECK_THROWS_WITH_AS(list_captures({both}),
                       doctest::Contains((both.string() + ": directory holds both trace files").c_str()), TraceError);
  CHECK_THROWS_WITH_AS(list_captures({neither}),
                       doctest::Contains((neither.string() + ": directory holds no trace file").c_str()), TraceError);
  CHECK_THROWS_AS(list_captures({fs::path()}), TraceError);
  fs::remove_all(dir);
}
