// tests/test_bias_trace_storage.cpp: what `bias-test` judges, and says it judges, when the
// storage or the inputs' quantisation could read as the kernel's bias (docs/CLI.md bias-test).
//
// Checked, each against facts written here rather than the library's own output:
// - a captured delta stored narrower than the fp32 a kernel writes it in (bf16, fp16: rounded
//   here by tests/bf16_reference.hpp's RNE, by truncation of fp32 bits, and by a local fp16
//   RNE) is refused under a metadata model (TraceError; the CLI's exit 2, one line naming the
//   file, tensor delta and both formats), and named in a `note:` without one; an fp32 delta is
//   neither;
// - an fp8 kernel's verdict says the input quantisation is measured apart, and names a
//   quantisation share whose mean differs from 0 at the report's level (its p below
//   alpha_per_comparison) exactly when it does; non-fp8 kernels carry no such note;
// - `--traces` takes several paths (files and directories, in one option or repeated), pooled
//   as one directory's files are (the same JSON figures), a file given twice counted once; the
//   mixed-formats refusal says how to give one format's files.
// The CLI cases run the built `flashbits` binary (FLASHBITS_BINARY, tests/CMakeLists.txt).
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attention/attention.hpp"
#include "attention/kernel_models.hpp"
#include "studies/bias_run.hpp"
#include "studies/scenarios.hpp"
#include "tests/bf16_reference.hpp"
#include "tests/test_scale.hpp"
#include "traces/safetensors.hpp"
#include "traces/trace.hpp"

#include "tests/cli_run.hpp"

using namespace fb;
using namespace fb::attn;
using fb_test::run;
using fb_test::Run;
using fb_test::sanitizer_scale;
using fb_test::scratch;

namespace {

// fp16 RNE of x with |x| below fp16's largest finite value, written out as bf16_rne is: x's
// significand rounded to 11 bits at x's own exponent, or to fp16's subnormal spacing 2^-24
// below its normal range (2^-14).
double fp16_rne(double x) {
  int e = 0;
  std::frexp(x, &e);
  e = std::max(e, -13);                    // x = m 2^e with |m| < 1; spacing 2^(e-11)
  const double m = std::ldexp(x, 11 - e);  // |m| < 2048
  double r = std::floor(m);
  const double frac = m - r;
  if (frac > 0.5 || (frac == 0.5 && std::fmod(r, 2.0) != 0.0)) r += 1.0;
  return std::ldexp(r, e - 11);
}

// bf16 by dropping the low 16 bits of the fp32 pattern (rounding toward zero), as a
// `.view(torch.int32) >> 16` would store it.
double bf16_truncated(double x) {
  float f = static_cast<float>(x);
  std::uint32_t bits = 0;
  std::memcpy(&bits, &f, sizeof bits);
  bits &= 0xffff0000u;
  std::memcpy(&f, &bits, sizeof bits);
  return f;
}

std::vector<std::uint64_t> shape_of(const Tensor4& t) {
  return {static_cast<std::uint64_t>(t.batch), static_cast<std::uint64_t>(t.heads), static_cast<std::uint64_t>(t.rows),
          static_cast<std::uint64_t>(t.cols)};
}

// A 1x2x64x32 sink capture: bf16 q, k, v, dO; O the exact O rounded to bf16 (RNE); delta the
// exact delta rounded by `round` and stored as `delta_format`; the metadata names `model`
// (empty: none).
void write_capture(const std::filesystem::path& path, const std::string& model, const Format& delta_format,
                   double (*round)(double)) {
  const AttentionInputs in = make_scenario("sink", 5, 1, 2, 64, 32, formats::bf16, true);
  const AttentionOutputs exact = exact_attention(in);
  TraceMetadata md;
  md.source = "emulated";
  md.model = model;
  md.softmax_scale = in.softmax_scale;
  md.causal = false;
  md.dtype = formats::bf16;
  std::vector<double> o(exact.o.data.size()), delta(exact.delta->data.size());
  for (std::size_t i = 0; i < o.size(); ++i) o[i] = bf16_rne(exact.o.data[i]);
  for (std::size_t i = 0; i < delta.size(); ++i) delta[i] = round(exact.delta->data[i]);
  std::vector<std::uint64_t> rows = shape_of(in.q);
  rows.pop_back();
  TraceBuilder(md)
      .add_values("q", formats::bf16, shape_of(in.q), in.q.data)
      .add_values("k", formats::bf16, shape_of(in.k), in.k.data)
      .add_values("v", formats::bf16, shape_of(in.v), in.v.data)
      .add_values("o", formats::bf16, shape_of(in.q), o)
      .add_values("do", formats::bf16, shape_of(in.q), in.d_o->data)
      .add_values("delta", delta_format, rows, delta)
      .write(path);
}

double fp32_rne(double x) { return static_cast<float>(x); }

BiasReport run_traces(const std::vector<std::filesystem::path>& files) {
  BiasRun r;
  r.traces = files;
  return run_bias(r);
}

bool has_note_containing(const BiasReport& r, const std::string& text) {
  for (const std::string& n : r.notes)
    if (n.find(text) != std::string::npos) return true;
  return false;
}

// The safetensors file at `from` with its fp32 delta stored as bf16 (`round`ed from each fp32
// value) at `to`; drop_model also removes the metadata's model. Every other byte is kept.
void rewrite_delta_as_bf16(const std::filesystem::path& from, const std::filesystem::path& to, double (*round)(double),
                           bool drop_model = false) {
  Safetensors file = read_safetensors(from);
  if (drop_model) file.metadata.erase("model");
  bool found = false;
  for (SafeTensor& t : file.tensors) {
    if (t.name != "delta") continue;
    REQUIRE(t.dtype == Dtype::F32);
    found = true;
    std::vector<std::uint8_t> bytes;
    for (std::size_t i = 0; i < t.bytes.size() / 4; ++i) {
      const auto bits = static_cast<std::uint32_t>(t.element_bits(i));
      float f = 0;
      std::memcpy(&f, &bits, sizeof f);
      const float rounded = static_cast<float>(round(f));
      std::uint32_t out = 0;
      std::memcpy(&out, &rounded, sizeof out);
      REQUIRE((out & 0xffffu) == 0u);  // a bf16 value
      bytes.push_back(static_cast<std::uint8_t>((out >> 16) & 0xffu));
      bytes.push_back(static_cast<std::uint8_t>(out >> 24));
    }
    t.dtype = Dtype::BF16;
    t.bytes = std::move(bytes);
  }
  REQUIRE(found);
  write_safetensors(to, file);
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

std::size_t lines(const std::string& text) {
  std::size_t n = 0;
  for (char c : text) n += c == '\n';
  return n;
}

// The report's JSON without what names the paths given (the subject), for comparing runs of
// the same traces given in different ways.
nlohmann::json figures(const std::string& out) {
  nlohmann::json j = nlohmann::json::parse(out);
  j.erase("subject");
  return j;
}

}  // namespace

TEST_CASE("bias-test --traces: a delta stored narrower than the kernel writes it is refused under a model") {
  const std::filesystem::path dir = scratch() / "narrow-delta";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  // fp32 delta: what the kernel writes, judged as it is.
  write_capture(dir / "fp32.safetensors", "fa2-sm80", formats::fp32, fp32_rne);
  const BiasReport wide = run_traces({dir / "fp32.safetensors"});
  CHECK(wide.has_delta);
  CHECK_FALSE(has_note_containing(wide, "tensor delta"));
  // bf16 (RNE and truncated) and fp16 containers: rounded a second time after the kernel's fp32.
  const struct {
    const char* name;
    Format format;
    double (*round)(double);
  } narrow[] = {{"bf16-rne", formats::bf16, bf16_rne},
                {"bf16-trunc", formats::bf16, bf16_truncated},
                {"fp16", formats::fp16, fp16_rne}};
  for (const auto& c : narrow) {
    CAPTURE(c.name);
    const auto path = dir / (std::string(c.name) + ".safetensors");
    write_capture(path, "fa2-sm80", c.format, c.round);
    CHECK_THROWS_WITH_AS(run_traces({path}),
                         (path.string() + ": tensor delta: stored as " + std::string(c.format.name) +
                          ", narrower than the fp32 delta model fa2-sm80 writes: the capture rounded it again")
                             .c_str(),
                         TraceError);
    // With no model: judged, and the note says the storage's rounding counts as the kernel's.
    const auto bare = dir / (std::string(c.name) + "-no-model.safetensors");
    write_capture(bare, "", c.format, c.round);
    const BiasReport r = run_traces({bare});
    CHECK(r.has_delta);
    CHECK(has_note_containing(
        r, bare.string() + ": tensor delta is stored as " + std::string(c.format.name) + ", narrower than the fp32"));
    CHECK(has_note_containing(r, "counted as the kernel's error"));
  }
  // A model whose delta is rounded_products into fp32 (fa-bf16acc) refuses it as well.
  const auto acc = dir / "bf16acc.safetensors";
  write_capture(acc, "fa-bf16acc", formats::bf16, bf16_rne);
  CHECK_THROWS_WITH_AS(run_traces({acc}), doctest::Contains("narrower than the fp32 delta model fa-bf16acc writes"),
                       TraceError);
  std::filesystem::remove_all(dir);
}

TEST_CASE("bias-test --traces CLI: make-trace's fp32 delta rewritten as bf16 is exit 2 with a model, a note without") {
  const std::filesystem::path dir = scratch() / "cli-narrow-delta";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string made = (dir / "made.safetensors").string();
  REQUIRE(run("make-trace --model fa2-sm80 --heads 16 --seqlen 64 --headdim 16 --backward --out " + made).code == 0);
  const Run fp32 = run("bias-test --traces " + made + " --json");
  CHECK(fp32.code != 2);
  CHECK(fp32.out.find("tensor delta") == std::string::npos);
  using Rounding = double (*)(double);
  // (No structured binding: clang 14, the sanitizer build's, cannot capture one in CAPTURE.)
  for (const auto& rounding : {std::pair<const char*, Rounding>{"rne", bf16_rne}, {"trunc", bf16_truncated}}) {
    const char* const name = rounding.first;
    const Rounding round = rounding.second;
    CAPTURE(name);
    const std::string bf16 = (dir / (std::string(name) + ".safetensors")).string();
    rewrite_delta_as_bf16(made, bf16, round);
    for (const char* json : {"", " --json"}) {
      const Run refused = run("bias-test --traces " + bf16 + json);
      CHECK(refused.code == 2);
      CHECK(refused.out.empty());
      CHECK(lines(refused.err) == 1);
      CHECK(first_line(refused.err) == "error: " + bf16 +
                                           ": tensor delta: stored as bf16, narrower than the fp32 delta model "
                                           "fa2-sm80 writes: the capture rounded it again");
    }
    const std::string bare = (dir / (std::string(name) + "-bare.safetensors")).string();
    rewrite_delta_as_bf16(made, bare, round, true);
    const Run noted = run("bias-test --traces " + bare);
    CHECK(noted.code != 2);
    CHECK(noted.out.find("note: " + bare + ": tensor delta is stored as bf16, narrower than the fp32") !=
          std::string::npos);
    const Run noted_json = run("bias-test --traces " + bare + " --json");
    const auto j = nlohmann::json::parse(noted_json.out);
    bool in_notes = false;
    for (const auto& n : j["notes"])
      in_notes = in_notes || n.get<std::string>().find("tensor delta is stored as bf16") != std::string::npos;
    CHECK(in_notes);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("bias-test: an fp8 kernel's verdict says the input quantisation is not part of it") {
  // wide-ties at 32 x 16: the quantisation's share of delta is about -0.17 ulp with p near
  // 1e-12 at 400 trials (measured), far below the level; the sanitizer run checks the rule.
  BiasRun fp8;
  fp8.model = parse_kernel_model("fa3-fp8-sm90", formats::bf16);
  fp8.scenario = "wide-ties";
  fp8.trials = sanitizer_scale() ? 16 : 400;
  fp8.seqlen = 32;
  fp8.headdim = 16;
  fp8.seed = 0;
  fp8.threads = 2;
  const BiasReport r = run_bias(fp8);
  REQUIRE(r.has_quantisation);
  const auto j = bias_report_json(r, false);
  REQUIRE(j.contains("verdict_note"));
  const std::string note = j["verdict_note"].get<std::string>();
  CHECK(note.find("the input quantisation's own error is measured apart and not part of it") != std::string::npos);
  // "adds its own bias" names exactly the outputs whose quantisation p is below the report's
  // level (the level of the quantisation's own lines).
  const double level = j["alpha_per_comparison"].get<double>();
  CHECK(level == doctest::Approx(1e-3 / 4));
  for (const char* output : {"o", "delta"}) {
    CAPTURE(output);
    const double p = j["quantisation"][output]["p_t"].get<double>();
    const std::string named = std::string(output) == "o" ? "O " : "delta ";
    const bool significant = p < level;
    const std::size_t at = note.find("adds its own bias");
    CHECK((at != std::string::npos && note.find(named, at) != std::string::npos) == significant);
    bool listed = false;
    for (const auto& x : j["quantisation_biased"]) listed = listed || x == output;
    CHECK(listed == significant);
  }
  if (!sanitizer_scale()) {
    CHECK(j["quantisation"]["delta"]["p_t"].get<double>() < 1e-6);
    CHECK(note.find("; the input quantisation adds its own bias (") != std::string::npos);
    CHECK(note.find("delta -0.") != std::string::npos);  // its share of delta is negative (measured -0.17)
    CHECK(note.find("), not counted here") != std::string::npos);
  }
  // A kernel that quantises nothing has nothing to leave out.
  BiasRun bf16 = fp8;
  bf16.model = parse_kernel_model("fa2-sm80", formats::bf16);
  bf16.trials = 8;
  const auto plain = bias_report_json(run_bias(bf16), false);
  CHECK_FALSE(plain.contains("verdict_note"));
  CHECK_FALSE(plain.contains("quantisation_biased"));
}

TEST_CASE("bias-test CLI: the fp8 verdict line names the quantisation, for --model and --traces") {
  const int trials = sanitizer_scale() ? 16 : 400;
  const Run m = run("bias-test --model fa3-fp8-sm90 --scenario wide-ties --seqlen 32 --headdim 16 --trials " +
                    std::to_string(trials));
  REQUIRE(m.code != 2);
  const std::size_t at = m.out.find("\nverdict (from the excess over the correctly rounded reference): ");
  REQUIRE(at != std::string::npos);
  const std::string line = first_line(m.out.substr(at + 1));
  CHECK(line.find("; the verdict is the kernel's arithmetic against the exact attention of its quantised inputs: the "
                  "input quantisation's own error is measured apart and not part of it") != std::string::npos);
  if (!sanitizer_scale()) CHECK(line.find("; the input quantisation adds its own bias (") != std::string::npos);
  // The traces of an fp8 model: measured against their quantised inputs, said the same way.
  const std::filesystem::path dir = scratch() / "fp8-traces";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  for (int seed = 1; seed <= 2; ++seed)
    REQUIRE(run("make-trace --model fa3-fp8-sm90 --scenario random --seqlen 32 --headdim 16 --heads 4 --seed " +
                std::to_string(seed) + " --out " + (dir / ("t" + std::to_string(seed) + ".safetensors")).string())
                .code == 0);
  const Run t = run("bias-test --traces " + dir.string() + " --json");
  REQUIRE(t.code != 2);
  const auto j = nlohmann::json::parse(t.out);
  REQUIRE(j.contains("quantisation"));
  CHECK(j["verdict_note"].get<std::string>().find("not part of it") != std::string::npos);
  // Without quantisation, the line ends at the verdict's words.
  const Run b = run("bias-test --model fa2-sm80 --scenario sink --seqlen 32 --headdim 16 --trials 8");
  CHECK(b.out.find("quantisation") == std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("bias-test --traces takes several paths, pooled as one directory's files") {
  const std::filesystem::path dir = scratch() / "multi";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "both");
  std::filesystem::create_directories(dir / "mixed");
  const std::string a = (dir / "both" / "a.safetensors").string(), c = (dir / "both" / "c.safetensors").string();
  REQUIRE(run("make-trace --model fa2-sm80 --heads 4 --seqlen 32 --headdim 16 --backward --seed 1 --out " + a).code ==
          0);
  REQUIRE(run("make-trace --model fa2-sm80 --heads 4 --seqlen 32 --headdim 16 --backward --seed 2 --out " + c).code ==
          0);
  const Run whole = run("bias-test --traces " + (dir / "both").string() + " --json");
  REQUIRE(whole.code != 2);
  const nlohmann::json pooled = figures(whole.out);
  CHECK(pooled["excess"]["o"]["n"] == 8);  // 2 traces x 4 heads
  // One option with two files, and the option twice: the directory's figures.
  const Run listed = run("bias-test --traces " + a + " " + c + " --json");
  REQUIRE(listed.code == whole.code);
  CHECK(figures(listed.out) == pooled);
  CHECK(nlohmann::json::parse(listed.out)["subject"] ==
        "2 traces in " + a + ", " + c + " (one sample per set of keys and values)");
  const Run repeated = run("bias-test --traces " + a + " --traces " + c + " --json");
  REQUIRE(repeated.code == whole.code);
  CHECK(figures(repeated.out) == pooled);
  // A directory and a file: pooled in the order given; the file given twice counts once.
  const Run twice = run("bias-test --traces " + (dir / "both").string() + " " + a + " --json");
  REQUIRE(twice.code != 2);
  const auto jt = nlohmann::json::parse(twice.out);
  CHECK(jt["repeated_samples"] == 4);
  CHECK(jt["excess"]["o"]["n"] == 8);
  CHECK(jt["excess"]["o"]["mean_ulps"] == pooled["excess"]["o"]["mean_ulps"]);
  // A path that does not exist among others is named.
  const Run missing = run("bias-test --traces " + a + " " + (dir / "nope.safetensors").string());
  CHECK(missing.code == 2);
  CHECK(missing.err.find((dir / "nope.safetensors").string()) != std::string::npos);
  // Two formats in one directory: refused, saying how to give one format's files.
  std::filesystem::copy_file(a, dir / "mixed" / "a.safetensors");
  REQUIRE(run("make-trace --model fa2-sm80 --dtype fp16 --heads 4 --seqlen 32 --headdim 16 --out " +
              (dir / "mixed" / "b.safetensors").string())
              .code == 0);
  const Run mixed = run("bias-test --traces " + (dir / "mixed").string());
  CHECK(mixed.code == 2);
  CHECK(lines(mixed.err) == 1);
  CHECK(mixed.err.find("the traces mix formats") != std::string::npos);
  CHECK(mixed.err.find("test each format's traces apart: give one format's files to --traces at a time "
                       "(--traces FILE...; Python: bias_test(traces=[FILE, ...]))") != std::string::npos);
  // ... and doing so works.
  const Run one_format = run("bias-test --traces " + (dir / "mixed" / "b.safetensors").string() + " --json");
  CHECK(one_format.code != 2);
  std::filesystem::remove_all(dir);
}

// Found by the fifth verdict audit: with no spread (every excess equal) the text said "no
// interval ... min detectable: none without spread" while the JSON gave a [x, x] interval and
// a detectable size of 0, which read as certainty.
TEST_CASE("JSON: an excess without spread has no detectable size, as the text says") {
  std::vector<double> kernel, floor;
  for (int i = 0; i < 10; ++i) {
    floor.push_back(0.01 * std::sin(1.3 * i));
    kernel.push_back(floor.back() + 0.375);  // the same excess, exactly, in every sample
  }
  const FloorComparison c = compare_with_floor(kernel, floor, 2.5e-4, 0.05);
  REQUIRE(c.excess.stddev == 0.0);
  const nlohmann::ordered_json j = floor_comparison_json(c, true);
  CHECK(j["min_detectable_ulps"].is_null());
  CHECK(j["excess_mean_ulps"].get<double>() == doctest::Approx(0.375).epsilon(1e-12));
}

// Found by the fifth verdict audit: at head dim 128 standard-fp32 "adds bias" on `random`
// from the fp32 rounding of 1/sqrt(128) alone (an irrational scale, so no fp32 value; at head
// dims that are powers of 4 the scale is a power of 2, exact), and nothing said so. The note
// names it where an fp32 output's ulps can see it, and nowhere else.
namespace {

// The `notes` of a bias-test --json report, one per line.
std::string json_notes(const std::string& report) {
  const auto j = nlohmann::json::parse(report);
  std::string all;
  if (j.contains("notes"))
    for (const auto& n : j["notes"]) all += n.get<std::string>() + "\n";
  return all;
}

}  // namespace

TEST_CASE("bias-test names the fp32 rounding of an inexact softmax scale at fp32 outputs") {
  const auto notes = [](const std::string& model, int headdim) {
    const Run r = run("bias-test --json --model " + model + " --scenario random --trials 2 --seqlen 16 --headdim " +
                      std::to_string(headdim));
    REQUIRE(r.code != 2);
    return json_notes(r.out);
  };
  CHECK(notes("standard-fp32", 128).find("the softmax scale 1/sqrt(128) is no fp32 value") != std::string::npos);
  CHECK(notes("standard-fp32", 32).find("the softmax scale 1/sqrt(32) is no fp32 value") != std::string::npos);
  CHECK(notes("standard-fp32", 64).find("softmax scale") == std::string::npos);   // 1/8
  CHECK(notes("standard-fp32", 16).find("softmax scale") == std::string::npos);   // 1/4
  CHECK(notes("standard-bf16", 128).find("softmax scale") == std::string::npos);  // bf16 ulps: negligible
}

// Found in review: the note above came only with --model; a captured fp32 trace whose recorded
// scale is 1/sqrt(32) as a double (what PyTorch passes) is measured against exact attention
// with that double while its kernel used the fp32 value, and said nothing.
TEST_CASE("bias-test --traces names a recorded softmax scale that is no fp32 value at fp32 outputs") {
  const std::filesystem::path dir = scratch() / "trace-scale-note";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto notes_of = [&](const std::string& model, int headdim) {
    const std::string path = (dir / (model + "-" + std::to_string(headdim) + ".safetensors")).string();
    REQUIRE(run("make-trace --model " + model + " --heads 2 --seqlen 16 --headdim " + std::to_string(headdim) +
                " --backward --out " + path)
                .code == 0);
    const Run r = run("bias-test --json --traces " + path);
    REQUIRE(r.code != 2);
    return json_notes(r.out);
  };
  // The scale's own relative error, from long double arithmetic independent of the code.
  const long double exact = 1.0L / std::sqrt(32.0L);
  const long double rounded = static_cast<long double>(static_cast<float>(exact));
  CHECK(rounded != exact);
  const std::string note = notes_of("standard-fp32", 32);
  CHECK(note.find("the softmax scale 0.17677669529663687 is no fp32 value") != std::string::npos);
  CHECK(note.find("relative error -1.7e-08") != std::string::npos);
  CHECK(static_cast<double>((rounded - exact) / exact) == doctest::Approx(-1.7e-8).epsilon(0.03));
  CHECK(notes_of("standard-fp32", 16).find("softmax scale") == std::string::npos);  // 1/4 is exact
  CHECK(notes_of("standard-bf16", 32).find("softmax scale") == std::string::npos);  // bf16 ulps
  std::filesystem::remove_all(dir);
}
