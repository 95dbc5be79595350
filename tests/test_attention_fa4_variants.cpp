// tests/test_attention_fa4_variants.cpp: FlashAttention-4's softmax changes as variants of the
// online models: +sw-exp2 (its FMA-polynomial exp2) and +lazy-rescale (its rescale threshold).
//
// References:
// - +sw-exp2: scores are made exact (q, k entries in {0, ±1/2, ±1}, head dim 16: every
//   product and partial sum is a multiple of 1/4 below 2^5, exact in any tensor-core model),
//   so the test knows each S_j and forms the exponent argument itself, as FA2 does
//   (fmaf(S, scale_log2, -fp32(m·scale_log2)), scale_log2 = (float)(scale·log2 e)). Columns
//   FA4 sends to the polynomial (the split written out by hand in test_software_exp2.cpp)
//   must hold the MPFR evaluation of the polynomial (tests/software_exp2_reference.hpp);
//   every other column must hold what the model without the variant computes.
// - +lazy-rescale: a row built so that the visited tiles' maxima rise first by less than T
//   and then by more; the traced running max must stay, then move, exactly as FA4's rule
//   says, with P̄ above 1 in between. In exact arithmetic the lazy run must still equal
//   exact attention (the kept max cancels between O and ℓ).
// - +lazy-rescale at the threshold itself (issue 34 item 9: random inputs never land on the
//   tie, so `>` for `>=` went unnoticed): the scale is searched here so that the kernel's
//   fp32 rise, fp32(fp32(m_new - m_old)·scale_log2), is exactly T while the real product is
//   not; FA4 keeps the max there (acc_scale_ >= -T) and just below, and moves it at the
//   next fp32 rise above T. Checked on fa4-sm100 (T = 8) and on FA2/FA3 with the variant.
// - The variants' limits (fp8's P̄ range, materialised models, the 32-column split) are refused.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "attention/attention.hpp"
#include "attention/kernel_models.hpp"
#include "tests/software_exp2_reference.hpp"
#include "studies/scenarios.hpp"

using namespace fb;
using namespace fb::attn;

namespace {

// Inputs whose scores are exact: q and k from {0, ±1/2, ±1}, v arbitrary bf16 values.
AttentionInputs exact_score_inputs(int n, int d, unsigned seed) {
  AttentionInputs in = make_scenario("random", seed, 1, 1, n, d, formats::bf16, false);
  const double steps[] = {-1.0, -0.5, 0.0, 0.5, 1.0};
  unsigned state = seed * 2654435761u + 1;
  auto next = [&] {
    state = state * 1664525u + 1013904223u;
    return steps[(state >> 16) % 5];
  };
  for (double& x : in.q.data) x = next();
  for (double& x : in.k.data) x = next();
  return in;
}

double exact_score(const AttentionInputs& in, int row, int key) {
  double s = 0;
  for (int c = 0; c < in.q.cols; ++c) s += in.q.at(0, 0, row, c) * in.k.at(0, 0, key, c);
  return s;
}

RowTrace traced_run(const std::string& model, const AttentionInputs& in, int row, int block_n, bool exact = false) {
  Tracer tracer;
  tracer.rows = {{0, 0, row}};
  RunOptions opt;
  opt.block_n = block_n;
  opt.tracer = &tracer;
  opt.exact_arithmetic = exact;
  run_attention(parse_kernel_model(model, formats::bf16), in, opt);
  return tracer.traces.at(0);
}

}  // namespace

TEST_CASE("+sw-exp2 sends exactly FA4's columns through the polynomial, with its bits") {
  const int n = 256, d = 16, block_n = 128;
  const AttentionInputs in = exact_score_inputs(n, d, 3);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const float scale_log2 = static_cast<float>(scale * std::numbers::log2e);
  fb_test::SoftwareExp2Reference polynomial;
  struct Split {
    const char* suffix;
    std::set<int> pair_starts;  // polynomial pairs per fragment; empty: every column
    int start_fragment;
  };
  const Split splits[] = {
      {"+sw-exp2", {}, 0}, {"+sw-exp2:10,1", {6, 8, 16, 18, 26, 28}, 1}, {"+sw-exp2:16,0", {12, 14, 28, 30}, 0}};
  for (const char* base : {"fa2-sm90", "fa2-sm80"}) {
    for (const Split& split : splits) {
      const std::string model = std::string(base) + split.suffix;
      CAPTURE(model);
      for (const int row : {5, 200}) {
        CAPTURE(row);
        const RowTrace plain = traced_run(base, in, row, block_n);
        const RowTrace varied = traced_run(model, in, row, block_n);
        REQUIRE(plain.tiles.size() == varied.tiles.size());
        int on_polynomial = 0, differ = 0;
        for (std::size_t t = 0; t < varied.tiles.size(); ++t) {
          const TileRecord& tile = varied.tiles[t];
          REQUIRE(tile.running_max == plain.tiles[t].running_max);  // the max does not depend on P̄
          const float max_scaled = static_cast<float>(tile.running_max) * scale_log2;
          for (int j = 0; j < tile.kv_end - tile.kv_begin; ++j) {
            const int column = j;  // column within the KV tile
            const int fragment = column / 32, pair = column % 32 & ~1;
            const bool polynomial_column =
                split.pair_starts.empty() ||
                (fragment >= split.start_fragment && fragment < block_n / 32 - 1 && split.pair_starts.count(pair));
            double want;
            if (polynomial_column) {
              const float s = static_cast<float>(exact_score(in, row, tile.kv_begin + j));
              want = polynomial(std::fma(s, scale_log2, -max_scaled));
              ++on_polynomial;
            } else {
              want = plain.tiles[t].p[static_cast<std::size_t>(j)];
            }
            differ += tile.p[static_cast<std::size_t>(j)] != want;
          }
        }
        CHECK(differ == 0);
        CHECK(on_polynomial > 0);
      }
    }
  }
}

TEST_CASE("+lazy-rescale keeps the max while it rises by at most T log2 units") {
  // One query row q = e_0: S_j = k_j[0]. fa2 visits tiles last to first: tile 2 (max 1),
  // tile 1 (max 5: (1 - 5)·scale_log2 = -1.44 >= -8, kept), tile 0 (max 40: -14.1 < -8, moves).
  const int n = 192, d = 16, block_n = 64;
  AttentionInputs in = make_scenario("random", 9, 1, 1, n, d, formats::bf16, false);
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < d; ++c) in.q.at(0, 0, r, c) = c == 0 ? 1.0 : 0.0;
  for (int key = 0; key < n; ++key) in.k.at(0, 0, key, 0) = -2.0;
  in.k.at(0, 0, 150, 0) = 1.0;
  in.k.at(0, 0, 100, 0) = 5.0;
  in.k.at(0, 0, 10, 0) = 40.0;
  const double scale_log2 = static_cast<float>(0.25 * std::numbers::log2e);
  const RowTrace plain = traced_run("fa2-sm90", in, 0, block_n);
  const RowTrace lazy = traced_run("fa2-sm90+lazy-rescale", in, 0, block_n);
  const RowTrace lazy_small = traced_run("fa2-sm90+lazy-rescale:1", in, 0, block_n);
  REQUIRE(lazy.tiles.size() == 3);
  CHECK(plain.tiles[0].running_max == 1.0);
  CHECK(plain.tiles[1].running_max == 5.0);
  CHECK(plain.tiles[2].running_max == 40.0);
  CHECK(lazy.tiles[0].running_max == 1.0);
  CHECK(lazy.tiles[1].running_max == 1.0);  // kept: the rise is 1.44 log2 units
  CHECK(lazy.tiles[2].running_max == 40.0);
  CHECK(lazy_small.tiles[1].running_max == 5.0);  // T = 1 < 1.44: moves
  // P̄ of key 100 under the kept max: 2^((5 - 1)·scale_log2) = 2^1.44, not 1.
  const double top = *std::max_element(lazy.tiles[1].p.begin(), lazy.tiles[1].p.end());
  CHECK(top == doctest::Approx(std::exp2(4.0 * scale_log2)).epsilon(1e-6));
  CHECK(*std::max_element(plain.tiles[1].p.begin(), plain.tiles[1].p.end()) == 1.0);
  // The rescale skipped on tile 1 shows in ℓ: lazily, tile 2's sum is not scaled by 2^-1.44.
  CHECK(lazy.tiles[1].running_sum > plain.tiles[1].running_sum);
}

namespace {

// A softmax scale whose scale_log2 (fp32(scale·log2 e), as the recipes form it, from the
// double scale or from its fp32 value) puts the kernel's fp32 rise fp32(rise·scale_log2)
// where `want` asks: -1 the largest value below T, 0 exactly T, +1 the smallest value above
// T that some fp32 scale_log2 reaches. Searched over the fp32 neighbours of T / rise; each
// candidate is evaluated in exact double arithmetic (the rise has 8 significant bits and
// scale_log2 24, so the product is exact in double and rounded once to fp32).
struct TieScale {
  double scale = 0;
  float scale_log2 = 0, rise_log2 = 0;
};
TieScale scale_for_rise(float rise, float threshold, int want) {
  float candidate = static_cast<float>(static_cast<double>(threshold) / rise);
  for (int i = 0; i < 64; ++i) candidate = std::nextafter(candidate, 0.0f);  // start well below
  TieScale below, tie, above;
  for (int i = 0; i < 128; ++i, candidate = std::nextafter(candidate, 1.0f)) {
    const double scale = candidate * std::numbers::ln2;
    const bool same_from_double = static_cast<float>(scale * std::numbers::log2e) == candidate;
    const bool same_from_fp32 =
        static_cast<float>(static_cast<double>(static_cast<float>(scale)) * std::numbers::log2e) == candidate;
    if (!same_from_double || !same_from_fp32) continue;
    const double exact_product = static_cast<double>(rise) * candidate;
    const TieScale here{scale, candidate, static_cast<float>(exact_product)};
    if (here.rise_log2 < threshold) below = here;
    if (here.rise_log2 == threshold && exact_product != threshold && tie.scale == 0) tie = here;
    if (here.rise_log2 > threshold && above.scale == 0) above = here;
  }
  return want < 0 ? below : want == 0 ? tie : above;
}

}  // namespace

TEST_CASE("+lazy-rescale at exactly T keeps the max; the next fp32 rise above T moves it") {
  // One query row q = e_0, so S_j = k_j[0] exactly. Tiles of 128 keys visited last to first:
  // tile 1 holds the first max m_old = 1 (key 200), tile 0 the rise to m_new (key 10); every
  // other key is -2. FA4's rule from its source (softmax.py update_row_max): acc_scale_ =
  // (m_old - m_new)·scale_log2 in fp32, and the max is kept iff acc_scale_ >= -T, i.e. while
  // the fp32 rise in log2 units is at most T. m_new is the first bf16 value in [16, 32) whose
  // rise reaches T exactly for some fp32 scale_log2 (not every rise does: consecutive
  // scale_log2 values can step over T).
  const int n = 256, d = 64;
  const float m_old = 1.0f;
  AttentionInputs base = make_scenario("random", 12, 1, 1, n, d, formats::bf16, false);
  for (int c = 0; c < d; ++c) base.q.at(0, 0, 0, c) = c == 0 ? 1.0 : 0.0;
  for (int key = 0; key < n; ++key) base.k.at(0, 0, key, 0) = -2.0;
  base.k.at(0, 0, 200, 0) = m_old;
  struct Case {
    const char* model;
    float threshold;
  };
  for (const Case& model_case : {Case{"fa4-sm100", 8.0f}, Case{"fa2-sm90+lazy-rescale", 8.0f},
                                 Case{"fa2-sm80+lazy-rescale:3", 3.0f}, Case{"fa3-sm90+lazy-rescale:5.5", 5.5f}}) {
    const std::string model_name = model_case.model;
    CAPTURE(model_name);
    float m_new = 0;
    for (int k = 1; k < 128 && m_new == 0; ++k) {
      const float candidate = 16.0f + static_cast<float>(k) / 8;  // bf16: 8 significant bits
      if (scale_for_rise(candidate - m_old, model_case.threshold, 0).scale > 0) m_new = candidate;
    }
    REQUIRE(m_new > 0);
    CAPTURE(m_new);
    const float rise = m_new - m_old;  // exact
    base.k.at(0, 0, 10, 0) = m_new;
    for (const int want : {-1, 0, 1}) {
      CAPTURE(want);
      const TieScale found = scale_for_rise(rise, model_case.threshold, want);
      REQUIRE(found.scale > 0);
      CAPTURE(found.scale);
      CAPTURE(found.rise_log2);
      AttentionInputs in = base;
      in.softmax_scale = found.scale;
      const RowTrace trace = traced_run(model_case.model, in, 0, 128);
      REQUIRE(trace.tiles.size() == 2);
      CHECK(trace.tiles[0].running_max == m_old);
      CHECK(std::fabs(found.rise_log2 - model_case.threshold) < 1e-5);  // next to T, not far off
      const bool kept = found.rise_log2 <= model_case.threshold;
      CHECK(kept == (want <= 0));
      CHECK(trace.tiles[1].running_max == (kept ? m_old : m_new));
      // Under the kept max key 10's P̄ is about 2^T (not 1): the exponent used the kept max.
      const double top = *std::max_element(trace.tiles[1].p.begin(), trace.tiles[1].p.end());
      if (kept)
        CHECK(top == doctest::Approx(std::exp2(static_cast<double>(model_case.threshold))).epsilon(1e-5));
      else
        CHECK(top == doctest::Approx(1.0).epsilon(1e-5));
    }
  }
}

TEST_CASE("+lazy-rescale in exact arithmetic is exact attention") {
  for (const char* model : {"fa2-sm90+lazy-rescale", "fa2-sm80+lazy-rescale:2", "triton-tutorial+lazy-rescale:4"}) {
    CAPTURE(model);
    for (const char* scenario : {"random", "sink"}) {
      const AttentionInputs in = make_scenario(scenario, 4, 1, 2, 200, 16, formats::bf16, false);
      RunOptions opt;
      opt.exact_arithmetic = true;
      opt.block_n = 32;
      const AttentionOutputs got = run_attention(parse_kernel_model(model, formats::bf16), in, opt);
      const AttentionOutputs want = exact_attention(in);
      double worst = 0;
      for (std::size_t i = 0; i < got.o.data.size(); ++i)
        worst = std::max(worst, std::fabs(got.o.data[i] - want.o.data[i]) / (1e-30 + std::fabs(want.o.data[i])));
      CHECK(worst < 1e-12);
    }
  }
}

TEST_CASE("the FA4 variants refuse what they cannot model") {
  // An fp8 P̄ beyond 448 is expressible (the cast saturates, FA4's pre-#2717 bug) with a
  // warning; a 16-bit P̄ beyond its format would be infinite: refused.
  CHECK(parse_kernel_model("fa3-fp8-sm90+lazy-rescale", formats::bf16).recipe->warning.find("saturates") !=
        std::string::npos);
  CHECK_THROWS_AS(parse_kernel_model("fa2-sm80+lazy-rescale:16", formats::fp16), std::invalid_argument);
  CHECK_NOTHROW(parse_kernel_model("fa3-fp8-sm90+lazy-rescale:0.5", formats::bf16));
  CHECK_THROWS_AS(parse_kernel_model("standard-bf16+lazy-rescale", formats::bf16), std::invalid_argument);
  CHECK_THROWS_AS(parse_kernel_model("fa-bf16acc+sw-exp2", formats::bf16), std::invalid_argument);
  CHECK_THROWS_AS(parse_kernel_model("fa2-sm80+sw-exp2:3,1", formats::bf16), std::invalid_argument);
  CHECK_THROWS_AS(parse_kernel_model("fa2-sm80+lazy-rescale:0", formats::bf16), std::invalid_argument);
  CHECK(parse_kernel_model("fa2-sm80+lazy-rescale", formats::bf16).name == "fa2-sm80+lazy-rescale:8");
  const AttentionInputs in = make_scenario("random", 1, 1, 1, 64, 16, formats::bf16, false);
  RunOptions opt;
  opt.block_n = 48;
  CHECK_THROWS_AS(run_attention(parse_kernel_model("fa2-sm80+sw-exp2:10,1", formats::bf16), in, opt),
                  std::invalid_argument);
}
