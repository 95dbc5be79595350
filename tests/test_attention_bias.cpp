// tests/test_attention_bias.cpp: the bias mechanism of Qiu & Yao (docs/DESIGN.md §7), measured.
//
// Errors are measured against exact_attention() (long double, independent of the
// recipes) in ulps of bf16 at the exact value; one sample per trial (a fresh scenario
// seed) is the mean error over the sink features (c % 4 in {0, 1}: V and dO mostly
// negative there) of every row, and for delta the mean over rows. The verdict uses
// the one-sample t-test of studies/statistics.hpp.
// - fa-bf16acc on sink: O biased negative and delta positive, p < 1e-6.
// - Its size, predicted without the engine: with P-bar == 1 the sink pair's sum
//   W = V_0 + V_1 (9 significant bits) is an exact bf16 tie in ~43% of the sink entries,
//   and the other keys' sticky bits break every such tie away from zero, so O's mean
//   error is -1/2 ulp times the tie rate (checked to 10%). Under +dynmax, bf16(P-bar < 1)·W
//   is an exact tie in only ~1% of them (an 8-bit times a 9-bit significand rarely ends
//   in 1000...0).
// - fa-bf16acc+dynmax on sink: the bias shrinks at least 3-fold and the 99.9% CI of each
//   mean lies within +-0.08 ulp. It is NOT zero: at 1000 trials O is -0.043 ulp (99.9% CI
//   [-0.047, -0.040]) and delta +0.034. The residual is the recipe's bf16 storage, not the
//   P-bar == 1 mechanism: P-bar takes ~49 values (bf16 sink scores in [7, 9]), their bf16
//   rounding errors are not averaged away, and with the sink's sticky mass the bf16 row sum
//   no longer rounds exactly like 2·P-bar, so they do not cancel in O = P-bar·W / l (the
//   sign flips with the score range: U[6, 8] gives +0.033). The same recipe with P-bar, l
//   and the O buffer in fp32 and the fix applied is checked to lie within +-0.02 ulp
//   (delta +-0.03; 300 trials: O -0.0007 [-0.0027, +0.0013]). A "not significant" check on the authors'
//   recipe would pass only by the luck of the seeds (about 1 seed set in 6 at 16 trials).
// - Grouped by the row's sink score: without the fix every score value is biased
//   negative; with it, per-score errors of either sign whose mean over score values is
//   not significant (p > 1e-3), spread wider than the plain bias.
// - fa-bf16acc on ties (every tie exact, no residual bits): no bias in O (p > 1e-3).
// - run_bias (bias-test's library call) keeps the excess's sign: excess = kernel error minus
//   the correctly rounded reference's error. Traces whose O is the exact O rounded up (down)
//   to bf16 here, not by the library, err at least as much upward (downward) as RNE does in
//   every element: excess > 0 (< 0) in every row. fa-bf16acc on sink (the negative bias
//   measured above): excess < 0. The mean excess is the mean error minus the mean reference
//   error in each run.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

#include "attention/attention.hpp"
#include "studies/bias_run.hpp"
#include "attention/kernel_models.hpp"
#include "emu/ops.hpp"
#include "studies/statistics.hpp"
#include "tests/bf16_reference.hpp"
#include "traces/trace.hpp"
#include "studies/scenarios.hpp"
#include "tests/test_scale.hpp"

using namespace fb;
using namespace fb::attn;

namespace {

using fb_test::sanitizer_scale;

double bf16_ulp(double x) {
  if (x == 0.0) return std::ldexp(1.0, -133);
  return std::ldexp(1.0, std::max(std::ilogb(x) - 7, -133));
}

struct BiasSamples {
  std::vector<double> o, delta;
  // Per sink score (q_0, which fixes the row's tied max): the sum and count over every
  // row with that score of the row's mean O error over the sink features.
  std::map<double, std::pair<double, int>> o_by_sink_score;
};

BiasSamples measure(const ModelHandle& m, const std::string& scenario, int trials, int seqlen) {
  BiasSamples out;
  const int d = 64;
  for (int t = 0; t < trials; ++t) {
    const AttentionInputs in =
        make_scenario(scenario, 5000 + static_cast<std::uint64_t>(t), 1, 1, seqlen, d, formats::bf16, true);
    RunOptions opt;
    opt.threads = 2;
    const AttentionOutputs got = run_attention(m, in, opt);
    const AttentionOutputs ref = exact_attention(in);
    double so = 0, sd = 0;
    int no = 0;
    for (int r = 0; r < seqlen; ++r) {
      double row_sum = 0;
      int row_count = 0;
      for (int c = 0; c < d; ++c) {
        if (c % 4 > 1) continue;
        const double x = ref.o.at(0, 0, r, c);
        row_sum += (got.o.at(0, 0, r, c) - x) / bf16_ulp(x);
        ++row_count;
      }
      so += row_sum;
      no += row_count;
      auto& group = out.o_by_sink_score[in.q.at(0, 0, r, 0)];
      group.first += row_sum / row_count;
      group.second += 1;
      const double dx = ref.delta->at(0, 0, r, 0);
      sd += (got.delta->at(0, 0, r, 0) - dx) / bf16_ulp(dx);
    }
    out.o.push_back(so / no);
    out.delta.push_back(sd / seqlen);
  }
  return out;
}
BiasSamples measure(const std::string& model, const std::string& scenario, int trials, int seqlen) {
  return measure(parse_kernel_model(model, formats::bf16), scenario, trials, seqlen);
}

// fa-bf16acc+dynmax with P-bar's cast, the row sum and the O buffer kept in fp32: the
// dynamic-max fix without the authors' bf16 storage.
ModelHandle dynmax_with_fp32_storage() {
  ModelHandle m = parse_kernel_model("fa-bf16acc+dynmax", formats::bf16);
  auto recipe = std::make_shared<KernelModel>(*m.recipe);
  recipe->p_cast = formats::fp32;
  recipe->row_sum_format = formats::fp32;
  recipe->o_buffer_format = formats::fp32;
  m.recipe = recipe;
  m.name += " (P-bar, l, O buffer in fp32)";
  return m;
}

// The mean O error of each distinct sink score (one sample per score value).
std::vector<double> sink_score_means(const BiasSamples& b) {
  std::vector<double> out;
  for (const auto& [score, group] : b.o_by_sink_score) out.push_back(group.first / group.second);
  return out;
}

// Is x (exact in double) the midpoint of two adjacent normal bf16 values? bf16 keeps 8
// significant bits, so x is a tie when its significand times 2^9 is an odd integer.
bool is_bf16_tie(double x) {
  int e = 0;
  const double m = std::fabs(std::frexp(x, &e)) * 512.0;  // in [256, 512)
  return m == std::floor(m) && static_cast<long long>(m) % 2 == 1;
}

struct TieRates {
  double plain = 0, dynmax = 0;
};
// Over the sink features of `trials` sink problems: how often P-bar·(V_0 + V_1) is an exact
// bf16 tie with P-bar = 1 (plain) and with P-bar = bf16(exp(-s)), s the row's scaled sink
// score (+dynmax with beta = 2 subtracts 2s).
TieRates sink_tie_rates(int trials, int seqlen) {
  const int d = 64;
  long long plain = 0, dynmax = 0, count = 0;
  for (int t = 0; t < trials; ++t) {
    const AttentionInputs in =
        make_scenario("sink", 5000 + static_cast<std::uint64_t>(t), 1, 1, seqlen, d, formats::bf16, true);
    for (int r = 0; r < seqlen; ++r) {
      long double s = 0;
      for (int c = 0; c < d; ++c) s += static_cast<long double>(in.q.at(0, 0, r, c)) * in.k.at(0, 0, 0, c);
      const double p_bar = bf16_rne(static_cast<double>(std::exp(-s * static_cast<long double>(in.softmax_scale))));
      for (int c = 0; c < d; ++c) {
        if (c % 4 > 1) continue;
        const double w = in.v.at(0, 0, 0, c) + in.v.at(0, 0, 1, c);  // exact: two bf16 values
        plain += is_bf16_tie(w) ? 1 : 0;
        dynmax += is_bf16_tie(p_bar * w) ? 1 : 0;  // exact: 8 x 9 significant bits
        ++count;
      }
    }
  }
  return TieRates{static_cast<double>(plain) / count, static_cast<double>(dynmax) / count};
}

}  // namespace

TEST_CASE(
    "fa-bf16acc on sink: O biased negative, delta positive, half an ulp per exact tie; +dynmax cuts ties and bias with "
    "them; ties bounded below 0.04 ulp") {
  if (sanitizer_scale()) {
    // Under ASan/UBSan only the machinery runs (one tiny trial each); no statistics.
    measure("fa-bf16acc", "sink", 1, 16);
    measure("fa-bf16acc+dynmax", "sink", 1, 16);
    measure(dynmax_with_fp32_storage(), "sink", 1, 16);
    sink_tie_rates(1, 16);
    return;
  }
  const int trials = 48, seqlen = 96;
  const BiasSamples plain = measure("fa-bf16acc", "sink", trials, seqlen);
  const BiasStatistics o = summarize(plain.o, 1e-6), delta = summarize(plain.delta, 1e-6);
  CAPTURE(o.mean);
  CAPTURE(o.p_t);
  CAPTURE(delta.mean);
  CAPTURE(delta.p_t);
  CHECK(o.mean < 0.0);
  CHECK(o.p_t < 1e-6);
  CHECK(delta.mean > 0.0);
  CHECK(delta.p_t < 1e-6);

  // The mechanism's size: about half an ulp per exact tie.
  const TieRates tie_rate = sink_tie_rates(trials, seqlen);
  CAPTURE(tie_rate.plain);
  CAPTURE(tie_rate.dynmax);
  CHECK(tie_rate.plain > 0.3);
  CHECK(tie_rate.dynmax < tie_rate.plain / 10.0);
  CHECK(std::fabs(o.mean) > 0.45 * tie_rate.plain);
  CHECK(std::fabs(o.mean) < 0.55 * tie_rate.plain);

  const BiasSamples fixed = measure("fa-bf16acc+dynmax", "sink", trials, seqlen);
  const BiasStatistics fo = summarize(fixed.o, 1e-3), fd = summarize(fixed.delta, 1e-3);
  CAPTURE(fo.mean);
  CAPTURE(fo.p_t);
  CAPTURE(fd.mean);
  CAPTURE(fd.p_t);
  CHECK(fo.ci_low > -0.08);
  CHECK(fo.ci_high < 0.08);
  CHECK(fd.ci_low > -0.08);
  CHECK(fd.ci_high < 0.08);
  CHECK(std::fabs(fo.mean) < std::fabs(o.mean) / 3.0);
  CHECK(std::fabs(fd.mean) < std::fabs(delta.mean) / 3.0);

  // Grouped by the row's sink score (49 bf16 values in [7, 9]), one sample per score:
  // without the fix every score value is biased negative, about -0.22 ulp each, so the
  // error has one sign and one size for every token (what lets it accumulate, docs/DESIGN.md
  // §7). With the fix each score value r keeps its own systematic error, set by how
  // bf16(exp(-r)) and the bf16 row sum (which also holds the other keys' mass, about
  // 0.1-0.3 ulp of it) round: small and negative at most scores, large and positive
  // where that mass tips the row sum over a rounding boundary (8 of 49 at 200 trials,
  // up to +0.9 ulp). Over score values these balance: their mean is not significant.
  // (The t-test takes the 49 values as independent; they share each trial's inputs, so
  // its CI is if anything too narrow, and "not significant" holds a fortiori.)
  // The pooled mean above stays significant because every trial reuses the same 49
  // values (its sign flips with the score range).
  const std::vector<double> plain_by_score = sink_score_means(plain), fixed_by_score = sink_score_means(fixed);
  REQUIRE(plain_by_score.size() >= 40);
  REQUIRE(fixed_by_score.size() == plain_by_score.size());
  const auto positives = [](const std::vector<double>& v) {
    return static_cast<int>(std::count_if(v.begin(), v.end(), [](double x) { return x > 0.0; }));
  };
  const BiasStatistics plain_scores = summarize(plain_by_score, 1e-3), fixed_scores = summarize(fixed_by_score, 1e-3);
  const double fixed_spread = *std::max_element(fixed_by_score.begin(), fixed_by_score.end()) -
                              *std::min_element(fixed_by_score.begin(), fixed_by_score.end());
  CAPTURE(plain_scores.mean);
  CAPTURE(plain_scores.p_t);
  CAPTURE(fixed_scores.mean);
  CAPTURE(fixed_scores.p_t);
  CAPTURE(positives(fixed_by_score));
  CAPTURE(fixed_spread);
  CHECK(positives(plain_by_score) == 0);
  CHECK(plain_scores.p_t < 1e-6);
  CHECK(positives(fixed_by_score) >= static_cast<int>(fixed_by_score.size()) / 10);
  CHECK(positives(fixed_by_score) <= static_cast<int>(fixed_by_score.size()) * 9 / 10);
  // Not "no bias" (49 correlated values cannot show that): the per-score mean's CI excludes
  // 90% of the plain recipe's per-score bias (measured: -0.037 [-0.177, +0.103] vs -0.223).
  CHECK(fixed_scores.ci_low > 0.9 * plain_scores.mean);
  CHECK(fixed_scores.ci_high < -0.9 * plain_scores.mean);
  CHECK(fixed_spread > 2.0 * std::fabs(o.mean));  // per-score errors larger than the plain bias

  const BiasSamples clean = measure(dynmax_with_fp32_storage(), "sink", trials, seqlen);
  const BiasStatistics co = summarize(clean.o, 1e-3), cd = summarize(clean.delta, 1e-3);
  CAPTURE(co.mean);
  CAPTURE(cd.mean);
  CAPTURE(co.ci_low);
  CAPTURE(co.ci_high);
  CAPTURE(cd.ci_low);
  CAPTURE(cd.ci_high);
  CHECK(co.ci_low > -0.02);
  CHECK(co.ci_high < 0.02);
  CHECK(cd.ci_low > -0.03);
  CHECK(cd.ci_high < 0.03);

  const BiasSamples ties = measure("fa-bf16acc", "ties", trials, seqlen);
  const BiasStatistics to = summarize(ties.o, 1e-3);
  CAPTURE(to.mean);
  CAPTURE(to.p_t);
  // A bound with its power, not "no bias": any bias on ties is under 0.04 ulp (99.9% CI;
  // measured -0.0036 [-0.030, +0.023], smallest detectable 0.032), a tenth of sink's.
  CHECK(to.ci_low > -0.04);
  CHECK(to.ci_high < 0.04);
  CHECK(to.min_detectable < 0.04);
}

namespace {

// The bf16 value next above bf16 value r (bf16 is the top half of an fp32: one step of the
// low bit of that half, away from zero for r > 0, toward it for r < 0).
double bf16_next_up(double r) {
  float f = static_cast<float>(r);
  std::uint32_t bits = 0;
  std::memcpy(&bits, &f, sizeof bits);
  bits = f == 0.0f ? 0x00010000u : f > 0.0f ? bits + 0x10000u : bits - 0x10000u;
  std::memcpy(&f, &bits, sizeof bits);
  return f;
}
double bf16_round_up(double x) {
  const double r = bf16_rne(x);
  return r < x ? bf16_next_up(r) : r;
}
double bf16_round_down(double x) { return -bf16_round_up(-x); }

// How a test capture is written: its metadata's model (empty: none) and source, the
// containers of its inputs and of O, whether the metadata states the inputs' dtype, and which
// of dO and delta it holds (delta: the exact one cast to fp32, a float cast rounding once to
// nearest even).
struct CaptureLook {
  std::string model = "fa2-sm80", source = "emulated";
  fb::Format inputs = formats::bf16, o = formats::bf16;
  bool dtype_in_metadata = true, with_do = true, with_delta = false;
};

// `in`'s q, k, v (and dO) and the O values `o`, with in's scale and mask in the metadata,
// written to `path` as `look` says.
void write_capture(const std::filesystem::path& path, const AttentionInputs& in, const std::vector<double>& o,
                   const CaptureLook& look = {}) {
  TraceMetadata md;
  md.source = look.source;
  md.model = look.model;
  md.softmax_scale = in.softmax_scale;
  md.causal = in.causal;
  if (in.causal)
    md.causal_alignment =
        in.causal_alignment == AttentionInputs::CausalAlignment::top_left ? "top-left" : "bottom-right";
  if (look.dtype_in_metadata) md.dtype = look.inputs;
  const auto shape = [](const Tensor4& t) {
    return std::vector<std::uint64_t>{static_cast<std::uint64_t>(t.batch), static_cast<std::uint64_t>(t.heads),
                                      static_cast<std::uint64_t>(t.rows), static_cast<std::uint64_t>(t.cols)};
  };
  TraceBuilder b(md);
  b.add_values("q", look.inputs, shape(in.q), in.q.data)
      .add_values("k", look.inputs, shape(in.k), in.k.data)
      .add_values("v", look.inputs, shape(in.v), in.v.data)
      .add_values("o", look.o, shape(in.q), o);
  if (look.with_do) b.add_values("do", look.inputs, shape(in.q), in.d_o->data);
  if (look.with_delta) {
    const AttentionOutputs exact = exact_attention(in);
    std::vector<double> delta(exact.delta->data.size());
    for (std::size_t i = 0; i < delta.size(); ++i) delta[i] = static_cast<float>(exact.delta->data[i]);
    std::vector<std::uint64_t> rows = shape(in.q);
    rows.pop_back();
    b.add_values("delta", formats::fp32, rows, delta);
  }
  b.write(path);
}

// A 1x1x64x64 sink trace whose O is `round`(exact O), written to `path` (O stored as
// `o_container`, the metadata naming `model`; seed: the scenario's).
void write_rounded_trace(const std::filesystem::path& path, double (*round)(double),
                         const fb::Format& o_container = formats::bf16, const std::string& model = "fa2-sm80",
                         std::uint64_t seed = 11) {
  const AttentionInputs in = make_scenario("sink", seed, 1, 1, 64, 64, formats::bf16, true);
  const AttentionOutputs exact = exact_attention(in);
  std::vector<double> o(exact.o.data.size());
  for (std::size_t i = 0; i < o.size(); ++i) o[i] = round(exact.o.data[i]);
  write_capture(path, in, o, {.model = model, .o = o_container});
}

}  // namespace

TEST_CASE("run_bias: the excess is the error minus the correctly rounded reference's, with its sign") {
  // Traces: O rounded up, then down, from the exact O. The 64 rows share one head's keys and
  // values: one cluster, one sample (the mean of its rows).
  const auto dir = std::filesystem::temp_directory_path() / ("fb_bias_sign_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);  // a stale folder of a reused pid would add its files
  std::filesystem::create_directories(dir);
  const auto up_path = dir / "up.safetensors", down_path = dir / "down.safetensors";
  write_rounded_trace(up_path, bf16_round_up);
  write_rounded_trace(down_path, bf16_round_down);
  BiasRun up_run;
  up_run.traces = {up_path};
  const BiasReport up = run_bias(up_run);
  BiasRun down_run;
  down_run.traces = {down_path};
  const BiasReport down = run_bias(down_run);
  std::filesystem::remove_all(dir);
  CAPTURE(up.o.mean);
  CAPTURE(up.o_cr.mean);
  CAPTURE(up.o_vs_floor.excess.mean);
  CAPTURE(down.o.mean);
  CAPTURE(down.o_vs_floor.excess.mean);
  CHECK(up.o.mean > 0.0);
  CHECK(up.o_vs_floor.excess.mean > 0.0);
  CHECK(up.o_vs_floor.excess.n == 1);
  CHECK(up.o_vs_floor.excess.positives == 1);
  CHECK(up.o_vs_floor.excess.negatives == 0);
  CHECK(up.verdict == Verdict::inconclusive);  // one independent sample
  CHECK(down.o.mean < 0.0);
  CHECK(down.o_vs_floor.excess.mean < 0.0);
  CHECK(down.o_vs_floor.excess.negatives == 1);
  CHECK(down.o_vs_floor.excess.positives == 0);
  // Same inputs, same reference; RNE errs less than either directed rounding.
  CHECK(up.o_cr.mean == down.o_cr.mean);
  CHECK(std::fabs(up.o_cr.mean) < up.o.mean);
  CHECK(std::fabs(up.o_cr.mean) < -down.o.mean);
  for (const BiasReport* r : {&up, &down})
    CHECK(r->o_vs_floor.excess.mean == doctest::Approx(r->o.mean - r->o_cr.mean).epsilon(1e-9));

  // Model mode: fa-bf16acc on sink errs negative (the first test case), and so does its excess.
  BiasRun model_run;
  model_run.model = parse_kernel_model("fa-bf16acc", formats::bf16);
  model_run.scenario = "sink";
  model_run.trials = sanitizer_scale() ? 3 : 12;
  model_run.seqlen = sanitizer_scale() ? 48 : 96;
  model_run.headdim = 64;
  model_run.seed = 1;
  const BiasReport model = run_bias(model_run);
  CAPTURE(model.o.mean);
  CAPTURE(model.o_cr.mean);
  CAPTURE(model.o_vs_floor.excess.mean);
  CHECK(model.o.mean < 0.0);
  CHECK(model.o_vs_floor.excess.mean < 0.0);
  CHECK(model.o_vs_floor.excess.mean == doctest::Approx(model.o.mean - model.o_cr.mean).epsilon(1e-9));
  CHECK(std::fabs(model.o_cr.mean) < -model.o_vs_floor.excess.mean);  // the kernel's share dominates
}

// An O the kernel wrote in bf16 but the capture keeps as float32 (a `.float()` before saving):
// judged on fp32's floor, bf16's own rounding read as the kernel's error. Traces whose O is
// exactly the bf16 floor (exact O rounded to nearest-even here, bf16_reference.hpp) must show
// an excess of exactly 0 in either container, with or without a model named; an O that is no
// bf16 value contradicts a model that writes bf16 and is refused; a genuine fp32 O (exact O
// rounded to fp32 here) is measured on fp32's floor, its excess again 0.
TEST_CASE("bias-test --traces: an O kept in a wider container is judged in the format it holds") {
  const auto dir = std::filesystem::temp_directory_path() / ("fb_bias_container_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);  // a stale folder of a reused pid would add its files
  std::filesystem::create_directories(dir);
  const auto fp32_rne = [](double x) { return static_cast<double>(static_cast<float>(x)); };
  const int traces = sanitizer_scale() ? 8 : 10;
  for (const std::string& model : {std::string("fa2-sm80"), std::string()}) {
    for (const bool wide : {false, true}) {
      BiasRun run;
      for (int t = 0; t < traces; ++t) {
        const auto path = dir / ((model.empty() ? "none_" : "fa2_") + std::string(wide ? "f32_" : "bf16_") +
                                 std::to_string(t) + ".safetensors");
        write_rounded_trace(path, bf16_rne, wide ? formats::fp32 : formats::bf16, model,
                            static_cast<std::uint64_t>(100 + t));
        run.traces.push_back(path);
      }
      const BiasReport r = run_bias(run);
      CAPTURE(model);
      CAPTURE(wide);
      CHECK(r.o_vs_floor.excess.n == static_cast<std::size_t>(traces));
      CHECK(r.o_vs_floor.excess.mean == 0.0);
      CHECK(r.o_vs_floor.excess.stddev == 0.0);
      CHECK(r.verdict == Verdict::no_detectable_bias);  // equal to its floor in every sample
      const bool noted = std::any_of(r.notes.begin(), r.notes.end(), [](const std::string& n) {
        return n.find("stored as fp32 but every value is a bf16 value") != std::string::npos;
      });
      CHECK(noted == wide);
    }
  }
  // O values off bf16's grid under a model that writes bf16: the trace contradicts its model.
  const auto off_grid = dir / "off_grid.safetensors";
  write_rounded_trace(off_grid, fp32_rne, formats::fp32, "fa2-sm80");
  BiasRun contradicted;
  contradicted.traces = {off_grid};
  CHECK_THROWS_WITH_AS(run_bias(contradicted),
                       doctest::Contains("tensor o: stored as fp32 with values that are not bf16"), fb::TraceError);
  // No model: a genuine fp32 O is the fp32 floor itself.
  BiasRun fp32_run;
  for (int t = 0; t < traces; ++t) {
    const auto path = dir / ("fp32_" + std::to_string(t) + ".safetensors");
    write_rounded_trace(path, fp32_rne, formats::fp32, "", static_cast<std::uint64_t>(200 + t));
    fp32_run.traces.push_back(path);
  }
  const BiasReport fp32_report = run_bias(fp32_run);
  CHECK(fp32_report.o_vs_floor.excess.mean == 0.0);
  CHECK(fp32_report.verdict == Verdict::no_detectable_bias);
  for (const std::string& n : fp32_report.notes) CHECK(n.find("stored as") == std::string::npos);
  std::filesystem::remove_all(dir);
}

namespace {

// A bf16 trace of `in` whose O is exact O rounded to nearest even (bf16_reference.hpp), with
// `model`, its dO and (`with_delta`) its delta as write_capture writes them.
void write_trace_of(const std::filesystem::path& path, const AttentionInputs& in, const std::string& model,
                    bool with_delta = false, bool with_do = true) {
  const AttentionOutputs exact = exact_attention(in);
  std::vector<double> o(exact.o.data.size());
  for (std::size_t i = 0; i < o.size(); ++i) o[i] = bf16_rne(exact.o.data[i]);
  write_capture(path, in, o, {.model = model, .with_do = with_do, .with_delta = with_delta});
}

// The rows of `in` from `first` to `first + count` (every head), keys and values whole.
AttentionInputs row_slice(const AttentionInputs& in, int first, int count) {
  AttentionInputs out = in;
  const auto slice = [&](const Tensor4& t) {
    Tensor4 s = t;
    s.rows = count;
    s.data.assign(static_cast<std::size_t>(t.batch) * t.heads * count * t.cols, 0.0);
    for (int b = 0; b < t.batch; ++b)
      for (int h = 0; h < t.heads; ++h)
        for (int r = 0; r < count; ++r)
          for (int c = 0; c < t.cols; ++c) s.at(b, h, r, c) = t.at(b, h, first + r, c);
    return s;
  };
  out.q = slice(in.q);
  out.d_o = slice(*in.d_o);
  return out;
}

}  // namespace

// Rows that read the same keys and values are one sample wherever they sit. Four heads with one
// set of keys and values, stored per head (as repeat_kv stores them before SDPA), are the one
// sample the grouped form (one kv head) gives; one capture split into files of query rows gives
// the samples of the whole file. Either way they used to count as independent samples, and a
// split capture turned "no detectable added bias" into "adds bias".
TEST_CASE("bias-test --traces: one sample per set of keys and values, across heads and files") {
  const auto dir = std::filesystem::temp_directory_path() / ("fb_bias_shared_kv_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);  // a stale folder of a reused pid would add its files
  std::filesystem::create_directories(dir);
  AttentionInputs repeated = make_scenario("sink", 31, 1, 4, 32, 16, formats::bf16, true);
  for (int h = 1; h < 4; ++h)
    for (int r = 0; r < repeated.k.rows; ++r)
      for (int c = 0; c < repeated.k.cols; ++c) {
        repeated.k.at(0, h, r, c) = repeated.k.at(0, 0, r, c);
        repeated.v.at(0, h, r, c) = repeated.v.at(0, 0, r, c);
      }
  write_trace_of(dir / "repeated.safetensors", repeated, "fa2-sm80");
  BiasRun run;
  run.traces = {dir / "repeated.safetensors"};
  const BiasReport r = run_bias(run);
  CHECK(r.o.n == 1);
  CHECK(r.shared_kv_clusters == 3);
  CHECK(r.repeated_samples == 0);

  // Eight independent heads, whole and split in two files of 16 query rows each.
  const AttentionInputs whole = make_scenario("sink", 32, 1, 8, 32, 16, formats::bf16, true);
  write_trace_of(dir / "whole.safetensors", whole, "fa2-sm80");
  write_trace_of(dir / "part1.safetensors", row_slice(whole, 0, 16), "fa2-sm80");
  write_trace_of(dir / "part2.safetensors", row_slice(whole, 16, 16), "fa2-sm80");
  BiasRun one, split;
  one.traces = {dir / "whole.safetensors"};
  split.traces = {dir / "part1.safetensors", dir / "part2.safetensors"};
  const BiasReport a = run_bias(one), b = run_bias(split);
  CHECK(a.o.n == 8);
  CHECK(b.o.n == 8);
  CHECK(b.shared_kv_clusters == 8);
  // Each sample is the mean over the same 32 rows of a head: the same values up to the order of
  // the sums (16 + 16 rows against 32), so equal to the last few bits.
  CHECK(b.o_vs_floor.excess.mean == doctest::Approx(a.o_vs_floor.excess.mean).epsilon(1e-9));
  CHECK(b.delta_vs_floor.excess.mean == doctest::Approx(a.delta_vs_floor.excess.mean).epsilon(1e-9));
  std::filesystem::remove_all(dir);
}

// What a capture cannot give is said, not made up: the delta of a kernel whose delta reads O
// before its final cast or dP and P cannot be computed from the captured O (computed so, its
// "excess" was O's own rounding: the sign flipped and the size 8,500 times too large), and a
// captured delta without dO has no exact value to be measured against.
TEST_CASE("bias-test --traces: a delta the capture cannot give is NOT tested, and says why") {
  const auto dir = std::filesystem::temp_directory_path() / ("fb_bias_delta_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);  // a stale folder of a reused pid would add its files
  std::filesystem::create_directories(dir);
  const AttentionInputs in = make_scenario("sink", 33, 1, 2, 32, 16, formats::bf16, true);
  for (const char* model : {"fa2-sm80+delta-dpp", "fa2-sm80+o-fp32"}) {
    CAPTURE(model);
    const auto path = dir / "t.safetensors";
    write_trace_of(path, in, model);
    BiasRun run;
    run.traces = {path};
    const BiasReport r = run_bias(run);
    CHECK_FALSE(r.has_delta);
    CHECK(r.delta_note.find("delta: NOT tested for") != std::string::npos);
    CHECK(r.delta_note.find("cannot be computed from the captured O") != std::string::npos);
  }
  // The same kernel's captured delta is measured.
  write_trace_of(dir / "d.safetensors", in, "fa2-sm80+delta-dpp", true);
  BiasRun captured;
  captured.traces = {dir / "d.safetensors"};
  CHECK(run_bias(captured).has_delta);
  // A delta with no dO.
  write_trace_of(dir / "nodo.safetensors", in, "fa2-sm80", true, false);
  BiasRun nodo;
  nodo.traces = {dir / "nodo.safetensors"};
  const BiasReport n = run_bias(nodo);
  CHECK_FALSE(n.has_delta);
  CHECK(n.delta_note.find("holds delta but no dO") != std::string::npos);
  std::filesystem::remove_all(dir);
}

// One verdict is about one kernel in one format: bf16 and fp16 ulps do not pool; and an O kept
// in a container narrower than the model writes has been rounded a second time.
TEST_CASE("bias-test --traces: traces of two formats, and an O narrower than its model's, are refused") {
  const auto dir = std::filesystem::temp_directory_path() / ("fb_bias_formats_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);  // a stale folder of a reused pid would add its files
  std::filesystem::create_directories(dir);
  write_rounded_trace(dir / "a.safetensors", bf16_rne);
  // An fp16 trace of the same model: fp16 inputs, its O the exact one rounded to fp16 (test data
  // for a refusal, not a reference: nothing is compared with it).
  {
    const AttentionInputs in = make_scenario("sink", 12, 1, 1, 64, 64, formats::fp16, true);
    const AttentionOutputs exact = exact_attention(in);
    std::vector<double> o(exact.o.data.size());
    for (std::size_t i = 0; i < o.size(); ++i)
      o[i] = fb::to_double(formats::fp16, fb::round_double(formats::fp16, exact.o.data[i], fb::RoundingSpec{}).bits);
    write_capture(dir / "b.safetensors", in, o, {.inputs = formats::fp16, .o = formats::fp16});
    // The same O kept in bf16: narrower than the fp16 O the model writes.
    std::vector<double> narrowed(o.size());
    for (std::size_t i = 0; i < o.size(); ++i) narrowed[i] = bf16_rne(o[i]);
    write_capture(dir / "narrow.safetensors", in, narrowed, {.inputs = formats::fp16, .o = formats::bf16});
  }
  BiasRun mixed;
  mixed.traces = {dir / "a.safetensors", dir / "b.safetensors"};
  CHECK_THROWS_WITH_AS(run_bias(mixed),
                       doctest::Contains("(fp16 inputs, fp16 O), both of model fa2-sm80: the traces mix formats"),
                       std::invalid_argument);
  BiasRun narrow;
  narrow.traces = {dir / "narrow.safetensors"};
  CHECK_THROWS_WITH_AS(run_bias(narrow), doctest::Contains("tensor o: stored as bf16, narrower than the fp16 O"),
                       fb::TraceError);
  std::filesystem::remove_all(dir);
}

// +o-rne restates every recipe's own final cast: traces naming fa2-sm80 and fa2-sm80+o-rne are
// one kernel's and pool (they were refused as two kernels); +o-rtz is another kernel.
TEST_CASE("bias-test --traces: a model and the same model with +o-rne are one kernel") {
  const auto dir = std::filesystem::temp_directory_path() / ("fb_bias_orne_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);  // a stale folder of a reused pid would add its files
  std::filesystem::create_directories(dir);
  write_rounded_trace(dir / "a.safetensors", bf16_rne, formats::bf16, "fa2-sm80", 11);
  write_rounded_trace(dir / "b.safetensors", bf16_rne, formats::bf16, "fa2-sm80+o-rne", 12);
  write_rounded_trace(dir / "c.safetensors", bf16_rne, formats::bf16, "fa2-sm80+o-rtz", 13);
  BiasRun same;
  same.traces = {dir / "a.safetensors", dir / "b.safetensors"};
  CHECK(run_bias(same).o_vs_floor.excess.n == 2);
  BiasRun other;
  other.traces = {dir / "a.safetensors", dir / "c.safetensors"};
  CHECK_THROWS_WITH_AS(run_bias(other), doctest::Contains("a verdict is about one kernel"), std::invalid_argument);
  std::filesystem::remove_all(dir);
}

// A whole capture upcast to float32 (numpy has no bf16: `.float().numpy()`), no model named:
// O lies on bf16's grid and is judged on bf16's floor, its excess exactly 0 when it is that
// floor; judged on fp32's it read as a kernel thousands of ulps off.
TEST_CASE("bias-test --traces: a capture upcast whole to float32 is judged in the format its O holds") {
  const auto dir = std::filesystem::temp_directory_path() / ("fb_bias_upcast_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);  // a stale folder of a reused pid would add its files
  std::filesystem::create_directories(dir);
  BiasRun run;
  for (int t = 0; t < 8; ++t) {
    const AttentionInputs in =
        make_scenario("sink", 300 + static_cast<std::uint64_t>(t), 1, 1, 32, 16, formats::bf16, true);
    const AttentionOutputs exact = exact_attention(in);
    std::vector<double> o(exact.o.data.size());
    for (std::size_t i = 0; i < o.size(); ++i) o[i] = bf16_rne(exact.o.data[i]);
    const auto path = dir / ("up" + std::to_string(t) + ".safetensors");
    write_capture(
        path, in, o,
        {.model = "", .source = "unknown", .inputs = formats::fp32, .o = formats::fp32, .dtype_in_metadata = false});
    run.traces.push_back(path);
  }
  const BiasReport r = run_bias(run);
  CHECK(r.o_vs_floor.excess.n == 8);
  CHECK(r.o_vs_floor.excess.mean == 0.0);
  CHECK(std::any_of(r.notes.begin(), r.notes.end(), [](const std::string& n) {
    return n.find("stored as fp32 but every value is a bf16 value") != std::string::npos;
  }));
  std::filesystem::remove_all(dir);
}

// Rows that see no key (causal, more queries than keys) hold what a kernel's guard writes: 0
// in the flash kernels, NaN from an eager softmax of all -inf (SDPA's math path writes 0). A NaN there
// dropped the whole verdict as a non-finite output; it is no fault, and those rows are left
// out like every keyless row. A value that no guard writes is named.
TEST_CASE("bias-test --traces: rows that see no key may hold the math path's NaN") {
  const auto dir = std::filesystem::temp_directory_path() / ("fb_bias_keyless_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);  // a stale folder of a reused pid would add its files
  std::filesystem::create_directories(dir);
  for (const double guard : {std::nan(""), 0.0, 1.0}) {
    CAPTURE(guard);
    BiasRun run;
    for (int t = 0; t < 8; ++t) {
      AttentionInputs in =
          make_scenario("sink", 400 + static_cast<std::uint64_t>(t), 1, 1, 48, 16, formats::bf16, true, 1, 32);
      in.causal = true;  // bottom-right: the first 16 query rows see no key
      const AttentionOutputs exact = exact_attention(in);
      std::vector<double> o(exact.o.data.size());
      for (std::size_t i = 0; i < o.size(); ++i) o[i] = i < 16 * 16 ? guard : bf16_rne(exact.o.data[i]);
      const auto path = dir / ("k" + std::to_string(t) + ".safetensors");
      write_capture(path, in, o, {.with_do = false});
      run.traces.push_back(path);
    }
    const BiasReport r = run_bias(run);
    CHECK(r.rows_without_keys == 8 * 16);
    CHECK(r.non_finite_rows == 0);
    CHECK(r.o_vs_floor.excess.n == 8);
    CHECK(r.o_vs_floor.excess.mean == 0.0);  // the other rows are the floor itself
    const bool named = std::any_of(r.notes.begin(), r.notes.end(), [](const std::string& n) {
      return n.find("row(s) that see no key hold an O other than 0 or NaN") != std::string::npos;
    });
    CHECK(named == (guard == 1.0));
  }
  std::filesystem::remove_all(dir);
}

// A file given twice (a capture and its copy) is the same rows again: its samples were dropped
// as repeats, but its keyless rows, its non-finite rows, its elements in the spread and its
// rows in the by-row-max groups were counted twice.
TEST_CASE("bias-test --traces: a copy of a trace adds no row to any count") {
  const auto dir = std::filesystem::temp_directory_path() / ("fb_bias_copy_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);  // a stale folder of a reused pid would add its files
  std::filesystem::create_directories(dir);
  AttentionInputs in = make_scenario("sink", 410, 1, 2, 48, 16, formats::bf16, true, 1, 32);
  in.causal = true;  // bottom-right: the first 16 query rows of each head see no key
  const AttentionOutputs exact = exact_attention(in);
  std::vector<double> o(exact.o.data.size());
  for (std::size_t i = 0; i < o.size(); ++i) o[i] = bf16_rne(exact.o.data[i]);
  o[20 * 16 + 3] = std::numeric_limits<double>::infinity();  // row 20 of head 0 (it sees keys)
  write_capture(dir / "a.safetensors", in, o, {.with_do = false});
  std::filesystem::copy_file(dir / "a.safetensors", dir / "copy.safetensors");
  BiasRun once, twice;
  once.traces = {dir / "a.safetensors"};
  twice.traces = {dir / "a.safetensors", dir / "copy.safetensors"};
  const BiasReport a = run_bias(once), b = run_bias(twice);
  CHECK(a.rows_without_keys == 2 * 16);  // what the mask says: 16 keyless rows per head
  CHECK(b.rows_without_keys == a.rows_without_keys);
  CHECK(a.non_finite_rows == 1);
  CHECK(b.non_finite_rows == 1);
  CHECK(b.non_finite_where.size() == 1);
  // Every element of every row that sees a key and is finite: 2 heads x 32 rows - 1, 16 each.
  CHECK(a.o_spread.elements == (2 * 32 - 1) * 16);
  CHECK(b.o_spread.elements == a.o_spread.elements);
  CHECK(b.o_spread.kernel_sumsq == a.o_spread.kernel_sumsq);
  CHECK(b.by_max.o_means() == a.by_max.o_means());
  CHECK(b.repeated_samples == 1);  // one kv head: one cluster, one sample
  std::filesystem::remove_all(dir);
}

// Found by a calibration audit: on `random` (outputs of either sign) a final cast toward zero
// read "no detectable added bias" at 300 of 300 seeds, its downward errors on positive outputs
// cancelling its upward ones on negative outputs in the signed mean. The magnitude comparison
// (sign of the target x error) sees it. Truncation never makes a value larger in magnitude
// than rounding to nearest does, so every sample's magnitude excess over the RNE floor is
// negative: a property of the two roundings, checked sample by sample.
TEST_CASE("run_bias: a rounding toward zero on outputs of either sign shows in their magnitude") {
  BiasRun run;
  run.model = parse_kernel_model("correctly-rounded+o-rtz", formats::bf16);
  run.scenario = "random";
  run.trials = sanitizer_scale() ? 8 : 16;
  run.seqlen = sanitizer_scale() ? 32 : 64;
  run.headdim = 64;
  run.seed = 3;
  const BiasReport r = run_bias(run);
  REQUIRE(r.has_delta);
  CHECK(r.comparisons == 4);
  CHECK(r.alpha_per_comparison == run.alpha / 4);
  for (const FloorComparison* c : {&r.o_magnitude_vs_floor, &r.delta_magnitude_vs_floor}) {
    CAPTURE(c->reason);
    CHECK(c->verdict == Verdict::adds_bias);
    CHECK(c->kernel.mean < 0.0);
    CHECK(c->excess.negatives == c->excess.n);  // every sample: smaller in magnitude than RNE's
    CHECK(c->reason.find("magnitudes shrink toward zero") != std::string::npos);
  }
  // The signed mean cancels on these outputs: its interval holds 0 where the magnitude's is
  // far below it.
  CHECK(r.o_vs_floor.verdict != Verdict::adds_bias);
  CHECK(std::fabs(r.o_vs_floor.excess.mean) < 0.2 * -r.o_magnitude_vs_floor.excess.mean);
  CHECK(r.verdict == Verdict::adds_bias);
  CHECK(r.biased);
  // The same outputs rounded to nearest even are the floor itself, magnitude and all.
  run.model = parse_kernel_model("correctly-rounded", formats::bf16);
  const BiasReport rne = run_bias(run);
  CHECK(rne.o_magnitude_vs_floor.verdict == Verdict::no_detectable_bias);
  CHECK(rne.o_magnitude_vs_floor.excess.mean == 0.0);
  CHECK(rne.verdict == Verdict::no_detectable_bias);
}
