// tests/test_attention_ck.cpp: the ck-fmha-cdna3 recipe (Composable Kernel's FMHA forward on
// AMD CDNA3, as ROCm FlashAttention builds it).
//
// Checked against a second implementation of one query row written here from the CK source
// facts (notes/cdna3_fmha.md), with native fp32/fp64 arithmetic and MPFR, not with the
// engine: KV tiles first to last (128x64 at head dim 64, 128x128 at 128); each S and each
// P̄·V column as a chain of 8-product MFMA steps, C = 0 for S and O for P̄·V, where step 0 of
// every 16-wide k chunk takes k {0-3, 8-11} and step 1 k {4-7, 12-15} (CK's IterateK, read as
// index sets, not as a permutation), a partial chunk zero-filled; the max in raw units;
// P̄ = ex2(fma(S, scale_log2, -fp32(m·scale_log2))); α = ex2(fma(m_old, scale_log2,
// -fp32(m_new·scale_log2))) on every tile after the first (not 1 when the max stays); O *= α in
// fp32; the row sum: lane group g adds, from 0, the tile columns with (c / 8) % 2 == g, then
// the two are added and ℓ = fma(α, ℓ, tile sum); P̄ cast to bf16 RNE (tests/bf16_reference.hpp);
// O = fp32(acc · RN(1/ℓ)) cast to bf16; LSE = float(double(fp32(m·scale_log2)) / log2 e +
// double(logf ℓ)). ex2 is correctly rounded fp32 with ftz (MPFR), the recipe's SFU model.
// Only the MFMA steps come from the library (fb::fused_dot_amd with the cdna3 preset, itself
// tested against exact integers in test_tensor_core_amd.cpp). O and LSE must agree bit for bit.
#include <doctest/doctest.h>
#include <gmp.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "attention/attention.hpp"
#include "attention/kernel_models.hpp"
#include "emu/dot/tensor_core_amd.hpp"
#include "tests/bf16_reference.hpp"
#include "tests/mpfr_sfu_reference.hpp"
#include "tests/test_scale.hpp"
#include "studies/scenarios.hpp"

using namespace fb;
using namespace fb::attn;

namespace {

using fbref::CorrectSfuFtz;

float ftz(float x) { return std::fabs(x) < FLT_MIN ? std::copysign(0.0f, x) : x; }
float f32(double x) { return static_cast<float>(x); }

// C + sum a[i] b[i] as CK's warp GEMM issues it: per 16-wide chunk, two MFMA steps over
// the index sets {0-3, 8-11} and {4-7, 12-15} (missing indices past k contribute zero).
float ck_chain(const AmdDotModel& mfma, float c, const std::vector<float>& a, const std::vector<float>& b) {
  const int k = static_cast<int>(a.size());
  for (int chunk = 0; chunk < k; chunk += 16) {
    for (int step = 0; step < 2; ++step) {
      float x[8], y[8];
      int n = 0;
      for (int half = 0; half < 2; ++half)
        for (int j = 0; j < 4; ++j) {
          const int i = chunk + 8 * half + 4 * step + j;
          x[n] = i < k ? a[static_cast<std::size_t>(i)] : 0.0f;
          y[n] = i < k ? b[static_cast<std::size_t>(i)] : 0.0f;
          ++n;
        }
      c = fused_dot_amd(mfma, c, x, y, 8);
    }
  }
  return c;
}

struct RowResult {
  std::vector<double> o;
  double lse;
};

RowResult ck_row(const AmdDotModel& mfma, const AttentionInputs& in, int h, int row, CorrectSfuFtz& sfu) {
  const int n = in.q.rows, d = in.q.cols, block_n = d <= 64 ? 64 : 128;
  const float scale = f32(in.softmax_scale > 0 ? in.softmax_scale : 1.0 / std::sqrt(static_cast<double>(d)));
  const float scale_log2 = f32(static_cast<double>(scale) * std::numbers::log2e);  // float(scale * log2e)
  const int visible = in.causal ? row + 1 : n;
  std::vector<float> q(static_cast<std::size_t>(d)), kr(static_cast<std::size_t>(d));
  for (int c = 0; c < d; ++c) q[static_cast<std::size_t>(c)] = f32(in.q.at(0, h, row, c));
  const float inf = std::numeric_limits<float>::infinity();
  float m = -inf, l = 0.0f;
  std::vector<float> acc(static_cast<std::size_t>(d), 0.0f);
  for (int kb = 0; kb < visible; kb += block_n) {
    const bool first = kb == 0;
    const int len = std::min(visible, kb + block_n) - kb;
    std::vector<float> s(static_cast<std::size_t>(len)), p(static_cast<std::size_t>(len));
    float tile_max = -inf;
    for (int j = 0; j < len; ++j) {
      for (int c = 0; c < d; ++c) kr[static_cast<std::size_t>(c)] = f32(in.k.at(0, h, kb + j, c));
      s[static_cast<std::size_t>(j)] = ck_chain(mfma, 0.0f, q, kr);
      tile_max = std::max(tile_max, s[static_cast<std::size_t>(j)]);
    }
    const float m_old = m;
    m = std::max(m, tile_max);
    const float row_max = ftz(m * scale_log2);
    for (int j = 0; j < len; ++j)
      p[static_cast<std::size_t>(j)] = sfu.ex2(std::fma(s[static_cast<std::size_t>(j)], scale_log2, -row_max));
    const float alpha = first ? 0.0f : sfu.ex2(std::fma(m_old, scale_log2, -row_max));
    float lane[2] = {0.0f, 0.0f};
    for (int j = 0; j < len; ++j) lane[(j / 8) % 2] = ftz(lane[(j / 8) % 2] + p[static_cast<std::size_t>(j)]);
    const float tile_sum = ftz(lane[0] + lane[1]);
    l = first ? tile_sum : ftz(std::fma(alpha, l, tile_sum));
    if (!first)
      for (float& a : acc) a = ftz(a * alpha);
    std::vector<float> pc(static_cast<std::size_t>(len)), vc(static_cast<std::size_t>(len));
    for (int j = 0; j < len; ++j)
      pc[static_cast<std::size_t>(j)] = static_cast<float>(bf16_rne(p[static_cast<std::size_t>(j)]));
    for (int c = 0; c < d; ++c) {
      for (int j = 0; j < len; ++j) vc[static_cast<std::size_t>(j)] = f32(in.v.at(0, h, kb + j, c));
      acc[static_cast<std::size_t>(c)] = ck_chain(mfma, acc[static_cast<std::size_t>(c)], pc, vc);
    }
  }
  RowResult r;
  const float inv = l == 0.0f || l != l ? 1.0f : 1.0f / l;  // IEEE division: correctly rounded
  for (int c = 0; c < d; ++c) r.o.push_back(bf16_rne(ftz(acc[static_cast<std::size_t>(c)] * inv)));
  const double scaled_max = ftz(m * scale_log2);
  r.lse = l == 0.0f || l != l ? std::numeric_limits<double>::infinity()
                              : static_cast<double>(f32(scaled_max / std::numbers::log2e +
                                                        static_cast<double>(f32(std::log(static_cast<double>(l))))));
  return r;
}

}  // namespace

TEST_CASE("ck-fmha-cdna3 equals CK's FMHA forward written from its source") {
  const bool sanitizer = fb_test::sanitizer_scale();
  CorrectSfuFtz sfu;
  const ModelHandle model = parse_kernel_model("ck-fmha-cdna3", formats::bf16);
  REQUIRE(model.recipe->score_dot.dot.amd() != nullptr);
  const AmdDotModel& mfma = *model.recipe->score_dot.dot.amd();
  CHECK(std::string(mfma.name) == "cdna3");
  CHECK(!model.recipe->hardware_validated());
  struct Case {
    const char* scenario;
    int n, d;
    bool causal;
  };
  const Case cases[] = {{"sink", 300, 64, false},
                        {"random", 300, 64, true},
                        {"wide-ties", 200, 64, false},
                        {"sink", 200, 128, false},
                        {"random", 150, 80, true}};
  for (const Case& k : cases) {
    if (sanitizer && k.d != 64) continue;
    CAPTURE(k.scenario);
    CAPTURE(k.n);
    CAPTURE(k.d);
    CAPTURE(k.causal);
    AttentionInputs in = make_scenario(k.scenario, 29, 1, 1, k.n, k.d, formats::bf16, false);
    in.causal = k.causal;
    const AttentionOutputs got = run_attention(model, in, RunOptions{});
    std::size_t differ = 0, rows = 0;
    const int stride = sanitizer ? 9 : 2;
    for (int r = 0; r < k.n; r += stride) {
      const RowResult want = ck_row(mfma, in, 0, r, sfu);
      bool same = got.lse.at(0, 0, r, 0) == want.lse;
      for (int c = 0; c < k.d; ++c) same = same && got.o.at(0, 0, r, c) == want.o[static_cast<std::size_t>(c)];
      differ += !same;
      ++rows;
    }
    CHECK(differ == 0);
    CHECK(rows >= 15);
  }
}

TEST_CASE("ck-fmha-cdna3: exact arithmetic is exact attention; forward only") {
  const ModelHandle model = parse_kernel_model("ck-fmha-cdna3", formats::bf16);
  AttentionInputs in = make_scenario("sink", 3, 1, 2, 300, 64, formats::bf16, true);
  RunOptions opt;
  opt.exact_arithmetic = true;
  const AttentionOutputs got = run_attention(model, in, opt);
  const AttentionOutputs want = exact_attention(in);
  double worst = 0;
  for (std::size_t i = 0; i < got.o.data.size(); ++i)
    worst = std::max(worst, std::fabs(got.o.data[i] - want.o.data[i]) / (1e-30 + std::fabs(want.o.data[i])));
  CHECK(worst < 1e-12);
  CHECK(got.delta.has_value());
  CHECK(!got.dq.has_value());
  CHECK_THROWS_AS(parse_kernel_model("ck-fmha-cdna3+delta-dpp", formats::bf16), std::invalid_argument);
}
