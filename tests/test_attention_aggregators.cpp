// tests/test_attention_aggregators.cpp: the aggregators of studies/statistics.hpp (row
// summaries, per-stage histograms of signed errors in ulps), against counts and ulps worked
// out by hand here, and the RNE half-ulp bound on the final cast of O.
#include <doctest/doctest.h>

#include <cmath>
#include <stdexcept>

#include "attention/attention.hpp"
#include "studies/statistics.hpp"
#include "studies/scenarios.hpp"

using namespace fb;
using namespace fb::attn;

TEST_CASE("ulp_at: grid spacing of bf16, fp16, fp32 at normal, subnormal and zero values") {
  CHECK(ulp_at(formats::bf16, 1.0) == std::ldexp(1.0, -7));
  CHECK(ulp_at(formats::bf16, -3.0) == std::ldexp(1.0, -6));
  CHECK(ulp_at(formats::bf16, 0.0) == std::ldexp(1.0, -133));  // emin -126, 7 fraction bits
  CHECK(ulp_at(formats::fp16, 1e-6) == std::ldexp(1.0, -24));  // subnormal spacing
  CHECK(ulp_at(formats::fp16, 65504.0) == 32.0);
  CHECK(ulp_at(formats::fp32, 1.0) == std::ldexp(1.0, -23));
}

TEST_CASE("ErrorHistogram bins, tails, non-finite values, mean and merge") {
  ErrorHistogram h;  // width 1/8, range 4: 64 bins
  REQUIRE(h.counts.size() == 64);
  for (double x : {-5.0, -4.0, -3.9, -0.0625, 0.0, 0.124, 0.125, 3.99, 4.0, double(NAN), double(INFINITY)}) h.add(x);
  CHECK(h.total == 11);
  CHECK(h.below == 1);
  CHECK(h.above == 1);
  CHECK(h.not_finite == 2);
  CHECK(h.counts[0] == 2);   // -4 and -3.9
  CHECK(h.counts[31] == 1);  // -0.0625 in [-0.125, 0)
  CHECK(h.counts[32] == 2);  // 0 and 0.124 in [0, 0.125)
  CHECK(h.counts[33] == 1);  // 0.125
  CHECK(h.counts[63] == 1);  // 3.99
  std::uint64_t in_bins = 0;
  for (std::uint64_t c : h.counts) in_bins += c;
  CHECK(in_bins == 7);
  CHECK(h.mean() == doctest::Approx((-5.0 - 4.0 - 3.9 - 0.0625 + 0.124 + 0.125 + 3.99 + 4.0) / 9.0));
  CHECK(h.bin_low(33) == 0.125);
  ErrorHistogram g;
  g.add(0.01);
  h.merge(g);
  CHECK(h.total == 12);
  CHECK(h.counts[32] == 3);
  CHECK_THROWS_AS(h.merge(ErrorHistogram(0.25, 4.0)), std::invalid_argument);
  CHECK_THROWS_AS(ErrorHistogram(0.0, 4.0), std::invalid_argument);
}

TEST_CASE("add_stage_errors measures each stage in ulps of its storage format at the reference") {
  AttentionOutputs ref, run;
  ref.o = Tensor4(1, 1, 1, 3);
  ref.o.data = {1.0, 3.0, -0.5};
  run.o = ref.o;
  run.o.data = {1.0 + std::ldexp(1.0, -7), 3.0 - std::ldexp(1.0, -7), -0.5};  // +1 ulp, -0.5 ulp, 0
  ref.lse = Tensor4(1, 1, 1, 1);
  ref.lse.data = {2.0};
  run.lse = ref.lse;
  run.lse.data = {2.0 + 3 * std::ldexp(1.0, -22)};  // +3 fp32 ulps at 2
  StageHistograms h;
  add_stage_errors(h, run, ref, formats::bf16);
  CHECK(h.o.total == 3);
  CHECK(h.o.counts[40] == 1);    // +1 ulp: bin [1, 1.125)
  CHECK(h.o.counts[28] == 1);    // -0.5 ulp
  CHECK(h.o.counts[32] == 1);    // exact
  CHECK(h.lse.counts[56] == 1);  // +3 ulps
  CHECK(h.delta.total == 0);     // no backward
}

TEST_CASE("stage histograms and row summaries of a real run: totals, RNE half-ulp bound on the cast of O") {
  AttentionInputs in = make_scenario("sink", 3, 1, 1, 96, 32, formats::bf16, true);
  Tracer tracer;
  tracer.rows = {{0, 0, 5}, {0, 0, 90}};
  RunOptions opt;
  opt.tracer = &tracer;
  opt.block_n = 32;
  const AttentionOutputs run = run_attention(parse_kernel_model("fa2-sm80", formats::bf16), in, opt);
  const AttentionOutputs ref = exact_attention(in);
  StageHistograms h;
  add_stage_errors(h, run, ref, formats::bf16);
  CHECK(h.o.total == 96 * 32);
  CHECK(h.dq.total == 96 * 32);
  CHECK(h.delta.total == 96);
  CHECK(h.o.not_finite == 0);
  // O = RNE(fp32 value) and the fp32 value is within a small fraction of a bf16 ulp of the
  // exact O, so every O error lies inside (-1, 1) ulp.
  CHECK(h.o.below + h.o.above == 0);
  std::uint64_t outside_one = 0;
  for (std::size_t i = 0; i < h.o.counts.size(); ++i)
    if (h.o.bin_low(i) < -1.0 || h.o.bin_low(i) >= 1.0) outside_one += h.o.counts[i];
  CHECK(outside_one == 0);
  REQUIRE(tracer.traces.size() == 2);
  for (const RowTrace& t : tracer.traces) {
    CAPTURE(t.row);
    const RowSummary s = summarize_row(t);
    CHECK(s.row == t.row);
    CHECK(s.tiles == 3);  // 96 keys in tiles of 32
    CHECK(s.final_max == t.tiles.back().running_max);
    CHECK(s.p_equal_one == static_cast<int>(t.p_equal_one_keys.size()));
    CHECK(s.p_equal_one >= 2);  // the two sink keys
    CHECK(s.o_cast_up + s.o_cast_down <= 32);
    CHECK(s.o_cast_up + s.o_cast_down > 0);
    CHECK(std::fabs(s.o_cast_error_ulps) <= 0.5 * 32);  // RNE: at most half an ulp each
    CHECK(s.delta_error_from_reduction == t.delta_error_from_reduction);
  }
}
