// tests/test_bias_verdicts.cpp: the verdicts bias-test gives on the cases that misled before
// issue 34, through attn::run_bias:
// - direction: a kernel that keeps O (and so delta's input) in fp32 has an fp32 floor, and is
//   never said to add bias because it lies closer to zero than a bf16 floor would;
// - power: two trials are inconclusive, whatever their t statistic;
// - pairing: a trial's inputs depend on the scenario, seed and trial, not on the model;
// - fp8: the kernel's arithmetic is measured against the exact attention of its quantised
//   inputs, the quantisation apart, and those inputs are e4m3 values times their descales;
// - FA4's fp8 forward before flash-attention#2717 (Max_offset 8 with a lazy-rescale threshold
//   of 4) against the fix, on a row built so that P̄ must saturate at 448, each against its
//   expected O computed here from the kernel's documented rule.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "attention/attention.hpp"
#include "studies/bias_run.hpp"
#include "attention/kernel_models.hpp"
#include "studies/measure.hpp"
#include "emu/ops.hpp"
#include "tests/test_scale.hpp"
#include "studies/scenarios.hpp"

using namespace fb;
using namespace fb::attn;
using fb_test::sanitizer_scale;

namespace {

BiasRun model_run(const ModelHandle& model, const std::string& scenario, int trials, int seqlen, int headdim,
                  std::uint64_t seed) {
  BiasRun run;
  run.model = model;
  run.scenario = scenario;
  run.trials = trials;
  run.seqlen = seqlen;
  run.headdim = headdim;
  run.seed = seed;
  return run;
}

// fa-bf16acc+dynmax with Qiu & Yao's storage moved to fp32 (docs/recipes/fp32-storage.json).
ModelHandle fp32_storage() {
  const ModelHandle base = parse_kernel_model("fa-bf16acc+dynmax", formats::bf16);
  auto km = std::make_shared<KernelModel>(*base.recipe);
  km->p_cast = formats::fp32;
  km->row_sum_format = formats::fp32;
  km->o_buffer_format = formats::fp32;
  return ModelHandle{base.name + " (fp32 storage)", km};
}

// x is a value of e4m3 (finite): rounding it again changes nothing.
bool is_e4m3(double x) { return to_double(formats::e4m3, round_double(formats::e4m3, x, RoundingSpec{}).bits) == x; }

}  // namespace

TEST_CASE("direction: an O kept in fp32 has an fp32 floor and is not said to add bias") {
  const int trials = sanitizer_scale() ? 8 : 64;
  const ModelHandle model = fp32_storage();
  CHECK(stored_o_format(*model.recipe) == std::optional<Format>(formats::fp32));
  const BiasReport r = run_bias(model_run(model, "sink", trials, 96, 64, 7));
  // The floor of O and of delta: exact rounded once to fp32 (2^-16 bf16 ulps a rounding),
  // far below the bf16 floor's -0.03 ulp for delta on sink.
  CHECK(std::fabs(r.o_cr.mean) < 1e-5);
  CHECK(std::fabs(r.delta_cr.mean) < 1e-5);
  CHECK(r.verdict != Verdict::adds_bias);
  // The plain recipe's floor is bf16's: its delta, from the bf16 O, errs negative on sink.
  const BiasReport plain =
      run_bias(model_run(parse_kernel_model("fa-bf16acc+dynmax", formats::bf16), "sink", trials, 96, 64, 7));
  CHECK(plain.delta_cr.mean < -0.01);
}

TEST_CASE("direction: a delta from O before the cast (+o-fp32, +delta-dpp) has the exact delta rounded once") {
  for (const char* name : {"fa2-sm80+o-fp32", "fa2-sm80+delta-dpp"}) {
    CAPTURE(name);
    const ModelHandle model = parse_kernel_model(name, formats::bf16);
    CHECK(delta_reads_unrounded_o(*model.recipe));
    const ModelHandle ref = correctly_rounded_reference(*model.recipe);
    auto in = make_scenario("sink", 3, 1, 1, 64, 32, formats::bf16, true);
    const AttentionOutputs exact = exact_attention(in);
    RunOptions opt;
    const AttentionOutputs cr = run_attention(ref, in, opt);
    for (std::size_t r = 0; r < exact.delta->data.size(); ++r) {
      const float once = static_cast<float>(exact.delta->data[r]);  // RNE of the long-double-accurate value
      CHECK(cr.delta->data[r] == static_cast<double>(once));
    }
  }
  // fa2-sm80 reads its stored bf16 O: the floor's delta is from O rounded to bf16.
  CHECK_FALSE(delta_reads_unrounded_o(*parse_kernel_model("fa2-sm80", formats::bf16).recipe));
}

TEST_CASE("power: two trials give no verdict, whatever the t statistic") {
  const BiasReport r = run_bias(model_run(parse_kernel_model("fa2-sm80", formats::bf16), "random", 2, 32, 16, 34));
  CHECK(r.verdict == Verdict::inconclusive);
  CHECK_FALSE(r.biased);
  CHECK(r.o_vs_floor.reason.find("2 independent samples") != std::string::npos);
}

TEST_CASE("pairing: the same inputs for every model; fa2-sm80 and fa2-sm80+o-rne agree to the bit") {
  const int trials = sanitizer_scale() ? 2 : 8;
  const BiasReport a = run_bias(model_run(parse_kernel_model("fa2-sm80", formats::bf16), "sink", trials, 64, 32, 5));
  const BiasReport b =
      run_bias(model_run(parse_kernel_model("fa2-sm80+o-rne", formats::bf16), "sink", trials, 64, 32, 5));
  CHECK(a.o.mean == b.o.mean);
  CHECK(a.delta.mean == b.delta.mean);
  CHECK(a.o_cr.mean == b.o_cr.mean);
  // Another kernel with the same output format and final cast: the same floor figures.
  const BiasReport c =
      run_bias(model_run(parse_kernel_model("pytorch-fa2-sm80", formats::bf16), "sink", trials, 64, 32, 5));
  CHECK(c.o_cr.mean == a.o_cr.mean);
  CHECK(c.delta_cr.mean == a.delta_cr.mean);
  CHECK(c.o.mean != a.o.mean);
  // The inputs of trial t are the scenario's draw with trial_seed(seed, scenario, t).
  CHECK(trial_seed(5, "sink", 0) != trial_seed(5, "random", 0));
  CHECK(trial_seed(5, "sink", 0) != trial_seed(5, "sink", 1));
}

TEST_CASE("fp8: quantised inputs are e4m3 values times their descales; the excess is the kernel's arithmetic") {
  const ModelHandle model = parse_kernel_model("fa3-fp8-sm90", formats::bf16);
  auto in = make_scenario("random", 11, 1, 2, 128, 64, formats::bf16, true);
  RunOptions opt;
  opt.seed = 11;
  const auto seen = inputs_as_quantised(*model.recipe, in, opt);
  REQUIRE(seen.has_value());
  // Per-tensor scaling (per batch and head): descale = fp32(amax / 448); every value over it
  // is an e4m3 value within half an e4m3 ulp of x / descale.
  for (const auto& [x, q] : {std::pair{&in.q, &seen->q}, {&in.k, &seen->k}, {&in.v, &seen->v}}) {
    for (int h = 0; h < x->heads; ++h) {
      double amax = 0;
      for (int r = 0; r < x->rows; ++r)
        for (int c = 0; c < x->cols; ++c) amax = std::max(amax, std::fabs(x->at(0, h, r, c)));
      // amax / 448 = amax / (7 * 64) repeats 001 in binary, so its double never sits on an fp32
      // midpoint: rounding the double to fp32 is the one correct rounding.
      const double descale = static_cast<float>(amax / 448.0);
      for (int r = 0; r < x->rows; ++r)
        for (int c = 0; c < x->cols; ++c) {
          const double v8 = q->at(0, h, r, c) / descale;
          CHECK(is_e4m3(v8));
          // half an ulp: 2^-4 relative, or 2^-10 below e4m3's normal range (subnormal spacing 2^-9)
          CHECK(std::fabs(v8 - x->at(0, h, r, c) / descale) <= std::max(std::ldexp(std::fabs(v8), -4), 0x1p-10));
        }
    }
  }
  const BiasReport r = run_bias(model_run(model, "random", sanitizer_scale() ? 2 : 8, 128, 64, 3));
  REQUIRE(r.has_quantisation);
  // error = quantisation + kernel's own: excess is error - quantisation - floor.
  CHECK(r.o_vs_floor.excess.mean == doctest::Approx(r.o.mean - r.o_quant.mean - r.o_cr.mean).epsilon(1e-6).scale(1e-6));
  // The kernel's own error is far tighter than the error against exact, which carries the
  // quantisation of every input.
  CHECK(r.o_vs_floor.excess.stddev < r.o.stddev);
  CHECK(r.o_quant.stddev > r.o_vs_floor.excess.stddev);
}

TEST_CASE("FA4 fp8 before flash-attention#2717: P̄ saturates at 448 under lazy-rescale:4; the fix does not") {
  // One head, 256 keys in two KV tiles of 128 visited last to first. The last tile holds the
  // max-setting key (score 0, V = 0); the first holds one key of score 16 (V = 1), a rise of
  // 16/8 log2(e) = 2.885 log2 units; every other key scores -448 (P̄ = 0). Pre-fix, the max
  // stays at 0 (a rise <= 4 is not rescaled): P̄ = 2^(8 + 2.885) = 1892 for the big key,
  // saturated to 448 by the e4m3 cast while ℓ sums the fp32 P̄. Fixed: the max moves.
  const int n = 256, d = 64;
  AttentionInputs in;
  in.dtype = formats::bf16;
  in.q = Tensor4(1, 1, n, d);
  in.k = Tensor4(1, 1, n, d);
  in.v = Tensor4(1, 1, n, d);
  for (int r = 0; r < n; ++r) in.q.at(0, 0, r, 0) = 1.0;
  const int setter = 200, big = 10;
  for (int j = 0; j < n; ++j) in.k.at(0, 0, j, 0) = -448.0;
  in.k.at(0, 0, setter, 0) = 0.0;
  in.k.at(0, 0, big, 0) = 16.0;
  for (int c = 0; c < d; ++c) in.v.at(0, 0, big, c) = 1.0;

  const ModelHandle fixed = parse_kernel_model("fa4-fp8-sm100", formats::bf16);
  const ModelHandle prefix = parse_kernel_model("fa4-fp8-sm100+lazy-rescale:4", formats::bf16);
  CHECK(fixed.recipe->warning.empty());
  CHECK(prefix.recipe->warning.find("saturates") != std::string::npos);
  RunOptions opt;
  const auto seen = inputs_as_quantised(*prefix.recipe, in, opt);
  REQUIRE(seen.has_value());
  // The kernel's rule, from the quantised inputs: P̄_j = 2^(8 + (S_j - m)·scale·log2 e).
  const long double scale = 1.0L / 8.0L, log2e = 1.4426950408889634073599246810018921L;
  std::vector<long double> s(n);
  for (int j = 0; j < n; ++j) s[j] = static_cast<long double>(seen->q.at(0, 0, 0, 0)) * seen->k.at(0, 0, j, 0);
  const long double rise = (s[big] - s[setter]) * scale * log2e;
  REQUIRE(rise > std::log2(448.0L / 256.0L));  // P̄ of the big key exceeds 448 when the max stays
  REQUIRE(rise < 4.0L);                        // and the max does stay (threshold 4)
  long double l_kept = 0, acc_kept = 0, l_moved = 0, acc_moved = 0;
  for (int j = 0; j < n; ++j) {
    const long double p_kept = std::exp2(8.0L + (s[j] - s[setter]) * scale * log2e);
    const long double p_moved = std::exp2(8.0L + (s[j] - s[big]) * scale * log2e);
    l_kept += p_kept;
    l_moved += p_moved;
    acc_kept += std::min(p_kept, 448.0L) * seen->v.at(0, 0, j, 0);
    acc_moved += p_moved * seen->v.at(0, 0, j, 0);
  }
  const double expected_prefix = static_cast<double>(acc_kept / l_kept);   // about 0.21
  const double expected_fixed = static_cast<double>(acc_moved / l_moved);  // about 0.88, the true O
  REQUIRE(expected_fixed > 3 * expected_prefix);
  const AttentionOutputs a = run_attention(prefix, in, opt);
  const AttentionOutputs b = run_attention(fixed, in, opt);
  for (int r : {0, 100, n - 1})
    for (int c : {0, d / 2, d - 1}) {
      CAPTURE(r);
      CAPTURE(c);
      // bf16 output, e4m3 P̄ of the other keys and FA4's polynomial ex2: within 3%.
      CHECK(a.o.at(0, 0, r, c) == doctest::Approx(expected_prefix).epsilon(0.03));
      CHECK(b.o.at(0, 0, r, c) == doctest::Approx(expected_fixed).epsilon(0.03));
    }
}
