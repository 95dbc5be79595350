// tests/test_attention_fa4.cpp: the fa4-sm100 and fa3-sm90 recipes.
//
// fa4-sm100 is checked against a second implementation of FlashAttention-4's forward row,
// written here from the source facts (flash_attn/cute/softmax.py, utils.py,
// flash_fwd_sm100.py; docs/DESIGN.md) with native fp32 arithmetic and MPFR, not with the
// engine: KV tiles of 128 last to first, the lazy-rescale rule (threshold 8), the exponent
// FFMA, the MUFU ex2 as correctly rounded fp32 with ftz (the recipe's SFU model, from MPFR),
// FA4's polynomial on its columns (every 16 from fragment 1; MPFR, tests/
// software_exp2_reference.hpp), the 8-lane row sum, the fp32 rescale of O, the bf16 cast of
// P̄ (tests/bf16_reference.hpp), 1/ℓ correctly rounded (IEEE division), the LSE FFMA and lg2.
// Only the tensor-core dots come from the library (fb::fused_dot with the recipe's preset,
// itself tested against exact rationals in test_tensor_core.cpp). O and LSE must agree bit
// for bit on every row of several inputs, including sink rows where the max rises lazily.
// fa3-sm90 and fa4-sm100: exact arithmetic reproduces exact attention, forward and backward.
#include <doctest/doctest.h>
#include <gmp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "attention/attention.hpp"
#include "attention/kernel_models.hpp"
#include "emu/dot/tensor_core.hpp"
#include "tests/bf16_reference.hpp"
#include "tests/mpfr_sfu_reference.hpp"
#include "tests/software_exp2_reference.hpp"
#include "tests/test_scale.hpp"
#include "studies/scenarios.hpp"

using namespace fb;
using namespace fb::attn;

namespace {

using CorrectSfu = fbref::CorrectSfuFtz;

float f32(double x) { return static_cast<float>(x); }

struct RowResult {
  std::vector<double> o;
  double lse;
};

// FlashAttention-4's forward of one (non-causal) query row, from the source.
// `lazy`, `software`: FA4's lazy rescaling and its polynomial exp2 (the variants' :off).
RowResult fa4_row(const TensorCoreModel& tc, const AttentionInputs& in, int b, int h, int row, CorrectSfu& sfu,
                  fb_test::SoftwareExp2Reference& poly, bool lazy, bool software) {
  const int n = in.q.rows, d = in.q.cols, block_n = 128;
  const float scale_log2 = f32(in.softmax_scale * std::numbers::log2e);
  std::vector<float> q(d), kcol(d), vcol, pc(block_n), s(block_n), p(block_n);
  for (int c = 0; c < d; ++c) q[c] = f32(in.q.at(b, h, row, c));
  float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
  std::vector<float> acc(d, 0.0f);
  const int tiles = (n + block_n - 1) / block_n;
  for (int it = 0; it < tiles; ++it) {
    const bool first = it == 0;
    const int t = tiles - 1 - it, kb = t * block_n, len = std::min(n, kb + block_n) - kb;
    float tile_max = -std::numeric_limits<float>::infinity();
    for (int j = 0; j < len; ++j) {
      for (int c = 0; c < d; ++c) kcol[c] = f32(in.k.at(b, h, kb + j, c));
      s[j] = fused_dot(tc, 0.0f, q.data(), kcol.data(), d);
      tile_max = std::max(tile_max, s[j]);
    }
    float m_new = first ? tile_max : std::max(m, tile_max);
    float alpha = 1.0f;
    if (!first) {
      const float safe = m_new == -std::numeric_limits<float>::infinity() ? 0.0f : m_new;
      const float gap = f32(f32(m - safe) * scale_log2);
      if (lazy && gap >= -8.0f) {
        m_new = m;  // lazy: keep the max, acc_scale = 1
      } else {
        alpha = sfu.ex2(gap);
      }
    }
    m = m_new;
    const float max_scaled = f32((m == -std::numeric_limits<float>::infinity() ? 0.0f : m) * scale_log2);
    for (int j = 0; j < len; ++j) {
      const float arg = std::fma(s[j], scale_log2, -max_scaled);
      const int fragment = j / 32, pair = (j % 32) & ~1;
      const bool on_polynomial = software && fragment >= 1 && fragment < block_n / 32 - 1 && pair % 16 >= 12;
      p[j] = on_polynomial ? poly(arg) : sfu.ex2(arg);
    }
    // update_row_sum: fadd_reduce with init row_sum * acc_scale (not on the first tile).
    float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const float init = f32(l * alpha);
    for (int j = 0; j < len; ++j) {
      if (j == 0) {
        lane[0] = first ? p[0] : init + p[0];
      } else if (j < 8) {
        lane[j] = p[j];
      } else {
        lane[j % 8] += p[j];
      }
    }
    if (len == 0 && !first) lane[0] = init;
    lane[0] += lane[2];
    lane[1] += lane[3];
    lane[4] += lane[6];
    lane[5] += lane[7];
    lane[0] += lane[4];
    lane[1] += lane[5];
    l = lane[0] + lane[1];
    // The correction warps rescale O, then the MMA adds P̄·V with O as C.
    if (!first)
      for (float& a : acc) a *= alpha;
    for (int j = 0; j < len; ++j) pc[j] = f32(bf16_rne(p[j]));
    vcol.resize(len);
    for (int c = 0; c < d; ++c) {
      for (int j = 0; j < len; ++j) vcol[j] = f32(in.v.at(b, h, kb + j, c));
      acc[c] = fused_dot(tc, acc[c], pc.data(), vcol.data(), len);
    }
  }
  RowResult r;
  const float inv = l == 0.0f || l != l ? 1.0f : 1.0f / l;
  for (int c = 0; c < d; ++c) r.o.push_back(bf16_rne(acc[c] * inv));
  const float ln2 = f32(std::numbers::ln2);
  r.lse =
      l == 0.0f || l != l ? std::numeric_limits<double>::infinity() : f32(std::fma(m, scale_log2, sfu.lg2(l)) * ln2);
  return r;
}

}  // namespace

TEST_CASE("fa4-sm100 equals FlashAttention-4's forward written from its source") {
  struct Variant {
    const char* suffix;
    bool lazy, software;
  };
  const Variant variants[] = {{"", true, true},
                              {"+sw-exp2:off", true, false},
                              {"+lazy-rescale:off", false, true},
                              {"+lazy-rescale:off+sw-exp2:off", false, false}};
  CorrectSfu sfu;
  fb_test::SoftwareExp2Reference poly;
  // The sanitizer build runs one input and every 7th row of it: the paths, not the coverage.
  const bool sanitizer = fb_test::sanitizer_scale();
  for (const Variant& variant : variants) {
    const ModelHandle model = parse_kernel_model(std::string("fa4-sm100") + variant.suffix, formats::bf16);
    const TensorCoreModel& tc = *model.recipe->score_dot.model;
    for (const char* scenario : {"sink", "random", "wide-ties"}) {
      if (sanitizer && std::string(scenario) != "sink") continue;
      for (const int n : {300, 512}) {
        if (sanitizer && n != 300) continue;
        CAPTURE(variant.suffix);
        CAPTURE(scenario);
        CAPTURE(n);
        const AttentionInputs in = make_scenario(scenario, 17, 1, 2, n, 64, formats::bf16, false);
        const AttentionOutputs got = run_attention(model, in, RunOptions{});
        std::size_t differ = 0, rows = 0;
        const int stride = sanitizer ? 7 : n == 512 ? 5 : 2;
        for (int h = 0; h < 2; ++h)
          for (int r = 0; r < n; r += stride) {
            const RowResult want = fa4_row(tc, in, 0, h, r, sfu, poly, variant.lazy, variant.software);
            bool same = got.lse.at(0, h, r, 0) == want.lse;
            for (int c = 0; c < 64; ++c) same = same && got.o.at(0, h, r, c) == want.o[static_cast<std::size_t>(c)];
            differ += !same;
            ++rows;
          }
        CHECK(differ == 0);
        CHECK(rows > (sanitizer ? 40 : 100));
      }
    }
  }
}

TEST_CASE("fa4-sm100 and fa3-sm90: exact arithmetic is exact attention, forward and backward") {
  for (const char* name : {"fa4-sm100", "fa3-sm90", "fa3-sm90+lazy-rescale"}) {
    CAPTURE(name);
    const ModelHandle model = parse_kernel_model(name, formats::bf16);
    const AttentionInputs in = make_scenario("sink", 2, 1, 2, 400, 64, formats::bf16, true);
    RunOptions opt;
    opt.exact_arithmetic = true;
    const AttentionOutputs got = run_attention(model, in, opt);
    const AttentionOutputs want = exact_attention(in);
    auto worst = [](const Tensor4& a, const Tensor4& b) {
      double w = 0, scale = 0;
      for (double x : b.data) scale = std::max(scale, std::fabs(x));
      for (std::size_t i = 0; i < a.data.size(); ++i) w = std::max(w, std::fabs(a.data[i] - b.data[i]));
      return w / (1e-300 + scale);
    };
    CHECK(worst(got.o, want.o) < 1e-12);
    REQUIRE(got.dq.has_value());
    REQUIRE(want.dq.has_value());
    CHECK(worst(*got.dq, *want.dq) < 1e-12);
    CHECK(worst(*got.dk, *want.dk) < 1e-12);
    CHECK(worst(*got.dv, *want.dv) < 1e-12);
    CHECK(got.delta.has_value());
    (void)parse_kernel_model(std::string(name) + "+delta-dpp", formats::bf16);  // a backward with dP exists
  }
}
