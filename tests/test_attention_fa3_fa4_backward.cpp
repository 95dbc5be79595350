// tests/test_attention_fa3_fa4_backward.cpp: the backward of fa3-sm90 and fa4-sm100, their
// tiles and FA4's software-exp2 tuning table.
//
// The backward is checked against a plain transcription written here from the sources
// (Dao-AILab/flash-attention 0251105a), not with the engine:
// - delta: FA3 hopper/flash_bwd_preprocess_kernel.h (d padded to round_up_headdim's 64, 96,
//   128, 192 or 256; kBlockKGmem the largest of 128, 64, 32 dividing it; kBlockKGmem / 8
//   threads per row, 8 contiguous elements per load; dP_sum = do*o, then += do*o per thread;
//   Allreduce over the row's threads); FA4 flash_attn/cute/flash_bwd_preprocess.py (d padded
//   to a multiple of 32; gmem_k_block_size the largest of 128, 64, 32 dividing it);
// - P = exp2f(S*scale_log2 - lse*log2e) as one FFMA on the MUFU (correctly rounded fp32 with
//   ftz here, from MPFR: the recipe's SFU model); dS = P*(dP - delta), a subtraction then a
//   multiply; P and dS cast to bf16 (tests/bf16_reference.hpp);
// - per KV block, its row blocks first to last (FA3 mainloop_bwd_sm90_tma_gmma_ws.hpp,
//   FA4 flash_bwd_sm100.py: m_block from m_block_min up): dV += Pᵀ dO and dK += dSᵀ Q with the
//   accumulators as C; dQ = dS K per (KV block, row block) from C = 0, added to an fp32
//   accumulator in ascending KV-block order; FA4 at head dim >= 128 pairs two CTAs, so its
//   dQ partial spans 256 keys (mma_tiler_dsk);
// - dK and dQ times softmax_scale in fp32, then every gradient cast to bf16.
// FA3's scale_log2 is float(float(softmax_scale) * M_LOG2E) (its C++ API takes the scale as a
// float), FA4's float(softmax_scale * LOG2_E) (a Python float); head dim 80 tells them apart.
// Only the tensor-core dots come from the library (fb::fused_dot with the recipe's preset,
// tested against exact rationals in test_tensor_core.cpp). Every gradient and delta must
// agree bit for bit.
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
#include "emu/dot/tensor_core.hpp"
#include "tests/bf16_reference.hpp"
#include "tests/mpfr_sfu_reference.hpp"
#include "tests/test_scale.hpp"
#include "studies/scenarios.hpp"

using namespace fb;
using namespace fb::attn;

namespace {

using fbref::CorrectSfuFtz;

// fp32 results under --use_fast_math: subnormals flush to zero.
float ftz(float x) { return std::fabs(x) < FLT_MIN ? std::copysign(0.0f, x) : x; }
float to_bf16(float x) { return static_cast<float>(bf16_rne(x)); }

enum class Kernel { fa3, fa4 };

struct DeltaLayout {
  int padded, chunk;
};

DeltaLayout delta_layout(Kernel kernel, int d) {
  if (kernel == Kernel::fa3) {
    const int head_dim = d <= 64 ? 64 : d <= 96 ? 96 : d <= 128 ? 128 : d <= 192 ? 192 : 256;
    return {head_dim, head_dim % 128 == 0 ? 128 : head_dim % 64 == 0 ? 64 : 32};
  }
  const int padded = (d + 31) / 32 * 32;
  return {padded, padded % 128 == 0 ? 128 : padded % 64 == 0 ? 64 : 32};
}

float delta_row(Kernel kernel, const std::vector<float>& o, const std::vector<float>& d_o) {
  const int d = static_cast<int>(o.size());
  const DeltaLayout layout = delta_layout(kernel, d);
  const int threads = layout.chunk / 8;
  std::vector<float> sum(static_cast<std::size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    bool first = true;
    for (int chunk = 0; chunk < layout.padded / layout.chunk; ++chunk)
      for (int e = 0; e < 8; ++e) {
        const int col = chunk * layout.chunk + 8 * t + e;
        const float x = col < d ? d_o[static_cast<std::size_t>(col)] : 0.0f;
        const float y = col < d ? o[static_cast<std::size_t>(col)] : 0.0f;
        sum[static_cast<std::size_t>(t)] = first ? ftz(x * y) : ftz(std::fma(x, y, sum[static_cast<std::size_t>(t)]));
        first = false;
      }
  }
  for (int offset = threads / 2; offset >= 1; offset /= 2)
    for (int t = 0; t < offset; ++t)
      sum[static_cast<std::size_t>(t)] =
          ftz(sum[static_cast<std::size_t>(t)] + sum[static_cast<std::size_t>(t + offset)]);
  return sum[0];
}

struct Gradients {
  std::vector<float> dq, dk, dv, delta;  // [n][d], [n][d], [n][d], [n]
};

// One head's backward. `row_block`: kBlockM; `dq_keys`: keys per dQ partial.
Gradients plain_backward(Kernel kernel, const TensorCoreModel& tc, const AttentionInputs& in,
                         const AttentionOutputs& fwd, int h, int row_block, int dq_keys, CorrectSfuFtz& sfu) {
  const int n = in.q.rows, d = in.q.cols;
  const double scale = in.softmax_scale > 0 ? in.softmax_scale : 1.0 / std::sqrt(static_cast<double>(d));
  const float scale_f = static_cast<float>(scale);
  const float scale_log2 = kernel == Kernel::fa3
                               ? static_cast<float>(static_cast<double>(scale_f) * std::numbers::log2e)
                               : static_cast<float>(scale * std::numbers::log2e);
  const float log2e = static_cast<float>(std::numbers::log2e);
  auto at = [](const Tensor4& t, int h_, int r, int c) { return static_cast<float>(t.at(0, h_, r, c)); };
  const auto visible = [&](int r, int j) { return !in.causal || j <= r; };
  Gradients g;
  g.delta.resize(static_cast<std::size_t>(n));
  std::vector<float> lse_log2(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    std::vector<float> o(static_cast<std::size_t>(d)), d_o(static_cast<std::size_t>(d));
    for (int c = 0; c < d; ++c) {
      o[static_cast<std::size_t>(c)] = at(fwd.o, h, r, c);
      d_o[static_cast<std::size_t>(c)] = at(*in.d_o, h, r, c);
    }
    g.delta[static_cast<std::size_t>(r)] = delta_row(kernel, o, d_o);
    const float lse = at(fwd.lse, h, r, 0);
    lse_log2[static_cast<std::size_t>(r)] = lse == -std::numeric_limits<float>::infinity() ? 0.0f : ftz(lse * log2e);
  }
  // P and dS in bf16 for every (row, key), masked entries zero.
  std::vector<float> p(static_cast<std::size_t>(n) * n, 0.0f), ds(static_cast<std::size_t>(n) * n, 0.0f);
  std::vector<float> a(static_cast<std::size_t>(d)), b(static_cast<std::size_t>(d));
  for (int r = 0; r < n; ++r)
    for (int j = 0; j < n; ++j) {
      if (!visible(r, j)) continue;
      for (int c = 0; c < d; ++c) {
        a[static_cast<std::size_t>(c)] = at(in.q, h, r, c);
        b[static_cast<std::size_t>(c)] = at(in.k, h, j, c);
      }
      const float s = fused_dot(tc, 0.0f, a.data(), b.data(), d);
      for (int c = 0; c < d; ++c) {
        a[static_cast<std::size_t>(c)] = at(*in.d_o, h, r, c);
        b[static_cast<std::size_t>(c)] = at(in.v, h, j, c);
      }
      const float dp = fused_dot(tc, 0.0f, a.data(), b.data(), d);
      const float pr = sfu.ex2(std::fma(s, scale_log2, -lse_log2[static_cast<std::size_t>(r)]));
      const float dsr = ftz(pr * ftz(dp - g.delta[static_cast<std::size_t>(r)]));
      p[static_cast<std::size_t>(r) * n + j] = to_bf16(pr);
      ds[static_cast<std::size_t>(r) * n + j] = to_bf16(dsr);
    }
  // dK, dV: each key's accumulators chained over the row blocks, first to last.
  g.dk.assign(static_cast<std::size_t>(n) * d, 0.0f);
  g.dv.assign(static_cast<std::size_t>(n) * d, 0.0f);
  std::vector<float> x(static_cast<std::size_t>(row_block)), y(static_cast<std::size_t>(row_block));
  // The kernel visits a KV block's row blocks from m_block_min = (its first key) / kBlockM
  // when causal; the KV block is dq_keys wide (FA4's 2-CTA cluster: 256 keys).
  const auto first_row_block = [&](int kv_block_start) { return in.causal ? kv_block_start / row_block : 0; };
  for (int j = 0; j < n; ++j)
    for (int c = 0; c < d; ++c) {
      float dk = 0.0f, dv = 0.0f;
      for (int rb = first_row_block(j / dq_keys * dq_keys) * row_block; rb < n; rb += row_block) {
        const int len = std::min(n, rb + row_block) - rb;
        for (int i = 0; i < len; ++i) {
          x[static_cast<std::size_t>(i)] = p[static_cast<std::size_t>(rb + i) * n + j];
          y[static_cast<std::size_t>(i)] = at(*in.d_o, h, rb + i, c);
        }
        dv = fused_dot(tc, dv, x.data(), y.data(), len);
        for (int i = 0; i < len; ++i) {
          x[static_cast<std::size_t>(i)] = ds[static_cast<std::size_t>(rb + i) * n + j];
          y[static_cast<std::size_t>(i)] = at(in.q, h, rb + i, c);
        }
        dk = fused_dot(tc, dk, x.data(), y.data(), len);
      }
      g.dk[static_cast<std::size_t>(j) * d + c] = to_bf16(ftz(dk * scale_f));
      g.dv[static_cast<std::size_t>(j) * d + c] = to_bf16(dv);
    }
  // dQ: a partial per KV block (from C = 0), added in fp32 in ascending order.
  g.dq.assign(static_cast<std::size_t>(n) * d, 0.0f);
  std::vector<float> u(static_cast<std::size_t>(dq_keys)), w(static_cast<std::size_t>(dq_keys));
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < d; ++c) {
      float acc = 0.0f;
      for (int kb = 0; kb < n; kb += dq_keys) {
        const int len = std::min(n, kb + dq_keys) - kb;
        if (r / row_block < first_row_block(kb)) break;  // the kernel does not visit this row block
        for (int i = 0; i < len; ++i) {
          u[static_cast<std::size_t>(i)] = ds[static_cast<std::size_t>(r) * n + kb + i];
          w[static_cast<std::size_t>(i)] = at(in.k, h, kb + i, c);
        }
        acc = ftz(acc + fused_dot(tc, 0.0f, u.data(), w.data(), len));
      }
      g.dq[static_cast<std::size_t>(r) * d + c] = to_bf16(ftz(acc * scale_f));
    }
  return g;
}

}  // namespace

TEST_CASE("fa3-sm90 and fa4-sm100 backward equal FlashAttention-3/-4's backward written from the sources") {
  struct Case {
    const char* model;
    Kernel kernel;
    int d;
    bool causal;
    int row_block, dq_keys;  // FA3: flash_bwd_launch_template.h; FA4: 128 rows, 128 or 256 keys
  };
  const Case cases[] = {
      {"fa3-sm90", Kernel::fa3, 64, false, 128, 128},  {"fa3-sm90", Kernel::fa3, 64, true, 128, 128},
      {"fa3-sm90", Kernel::fa3, 80, false, 64, 128},   {"fa3-sm90", Kernel::fa3, 128, false, 80, 128},
      {"fa3-sm90", Kernel::fa3, 128, true, 64, 128},   {"fa4-sm100", Kernel::fa4, 64, false, 128, 128},
      {"fa4-sm100", Kernel::fa4, 80, true, 128, 128},  {"fa4-sm100", Kernel::fa4, 128, false, 128, 256},
      {"fa4-sm100", Kernel::fa4, 128, true, 128, 256},
  };
  const bool sanitizer = fb_test::sanitizer_scale();
  CorrectSfuFtz sfu;
  for (const Case& k : cases) {
    if (sanitizer && k.d != 64) continue;
    CAPTURE(k.model);
    CAPTURE(k.d);
    CAPTURE(k.causal);
    const int n = sanitizer ? 150 : 300;  // not a multiple of any tile
    for (const char* scenario : {"sink", "random"}) {
      CAPTURE(scenario);
      const ModelHandle model = parse_kernel_model(k.model, formats::bf16);
      const TensorCoreModel& tc = *model.recipe->score_dot.model;
      AttentionInputs in = make_scenario(scenario, 23, 1, 1, n, k.d, formats::bf16, true);
      in.causal = k.causal;
      const AttentionOutputs got = run_attention(model, in, RunOptions{});
      REQUIRE(got.dq.has_value());
      const Gradients want = plain_backward(k.kernel, tc, in, got, 0, k.row_block, k.dq_keys, sfu);
      std::size_t differ_delta = 0, differ_dq = 0, differ_dk = 0, differ_dv = 0;
      for (int r = 0; r < n; ++r) {
        differ_delta += got.delta->at(0, 0, r, 0) != want.delta[static_cast<std::size_t>(r)];
        for (int c = 0; c < k.d; ++c) {
          const std::size_t i = static_cast<std::size_t>(r) * k.d + c;
          differ_dq += got.dq->at(0, 0, r, c) != want.dq[i];
          differ_dk += got.dk->at(0, 0, r, c) != want.dk[i];
          differ_dv += got.dv->at(0, 0, r, c) != want.dv[i];
        }
      }
      CHECK(differ_delta == 0);
      CHECK(differ_dq == 0);
      CHECK(differ_dk == 0);
      CHECK(differ_dv == 0);
    }
  }
}

TEST_CASE("fa3-sm90 tiles are FA3's, causal runs included") {
  // hopper/tile_size.h tile_size_fwd_sm90 (element_size 2, headdim_v == headdim) and
  // hopper/flash_bwd_launch_template.h run_mha_bwd_hdim* (Arch >= 90, no softcap).
  struct Row {
    int d;
    bool causal;
    int fwd_m, fwd_n, bwd_m, bwd_n;
  };
  const Row rows[] = {
      {64, false, 192, 192, 128, 128}, {64, true, 192, 128, 128, 128},  {96, false, 192, 144, 64, 128},
      {96, true, 192, 144, 64, 128},   {128, false, 128, 176, 80, 128}, {128, true, 128, 128, 64, 128},
      {192, false, 128, 112, 64, 96},  {192, true, 128, 112, 64, 96},   {256, false, 128, 80, 64, 80},
      {256, true, 128, 80, 64, 80},    {80, false, 192, 144, 64, 128},  {48, true, 192, 128, 128, 128},
  };
  const ModelHandle fa3 = parse_kernel_model("fa3-sm90", formats::bf16);
  for (const Row& r : rows) {
    CAPTURE(r.d);
    CAPTURE(r.causal);
    const TileSizes t = fa3.recipe->tiles_for(r.d, 4096, r.causal);
    CHECK(t.block_m == r.fwd_m);
    CHECK(t.block_n == r.fwd_n);
    CHECK(t.bwd_block_m == r.bwd_m);
    CHECK(t.bwd_block_n == r.bwd_n);
  }
  // FA3 fp8 (element_size 1): the causal flag changes nothing (only local attention does).
  const ModelHandle fp8 = parse_kernel_model("fa3-fp8-sm90", formats::bf16);
  for (int d : {64, 96, 128, 192, 256}) {
    CHECK(fp8.recipe->tiles_for(d, 4096, true).block_n == fp8.recipe->tiles_for(d, 4096, false).block_n);
  }
  CHECK(fp8.recipe->tiles_for(128, 4096, true).block_n == 224);
}

TEST_CASE("fa4-sm100 sends the columns FA4's tuning table picks through the software exp2") {
  // flash_attn/cute/flash_fwd_sm100.py _TUNING_CONFIG and _default_enable_ex2_emu; interface.py
  // use_2cta_instrs (non-causal, head dim padded to 16 in {128, 192} with head_dim_v 128,
  // seqlen_q * group > 256, 128 % group == 0 under pack_gqa) and pack_gqa = group > 1.
  struct Row {
    int d;
    bool causal;
    int seqlen, group;
    bool enabled;
    int every, start;
  };
  const Row rows[] = {
      {64, false, 4096, 1, true, 16, 1},   // no table entry: the defaults
      {64, true, 4096, 1, true, 16, 1},    //
      {128, false, 4096, 1, true, 10, 1},  // 2-CTA: (True, False, 128)
      {128, false, 256, 1, true, 16, 1},   // seqlen_q <= 2*tile_m: 1-CTA, no entry
      {128, false, 128, 2, true, 16, 1},   // 256 packed rows: still 1-CTA; pack_gqa hdim > 64 non-causal: 10?
      {128, true, 4096, 1, true, 16, 1},   // (False, True, 128)
      {112, false, 4096, 1, true, 16, 1},  // padded 112: no 2-CTA, no entry
      {112, false, 4096, 4, true, 10, 1},  // pack_gqa, hdim > 64, non-causal, no entry: 10
      {192, false, 4096, 1, false, 0, 0},  // 192 needs 2-CTA (head_dim_v 128): MUFU only
      {192, true, 4096, 1, true, 32, 1},   // (False, True, 192)
      {128, false, 4096, 3, true, 16, 1},  // 128 % 3 != 0: no 2-CTA; pack_gqa: 10 unless tuned
  };
  const ModelHandle fa4 = parse_kernel_model("fa4-sm100", formats::bf16);
  for (const Row& r : rows) {
    CAPTURE(r.d);
    CAPTURE(r.causal);
    CAPTURE(r.seqlen);
    CAPTURE(r.group);
    const SoftwareExp2Split s = fa4.recipe->software_exp2_split(r.d, r.causal, r.seqlen, r.group);
    int want_every = r.every;
    // pack_gqa with head_dim_padded > 64 and non-causal: ex2_emu_freq = tune.get(freq, 10).
    if (r.group > 1 && r.d > 64 && !r.causal && r.enabled) want_every = 10;
    CHECK(s.enabled == r.enabled);
    if (r.enabled) {
      CHECK(s.every == want_every);
      CHECK(s.start_fragment == r.start);
    }
  }
  // Head dim 256 runs FA4's dedicated kernels: refused, unless a split is named.
  CHECK_THROWS_AS((void)fa4.recipe->software_exp2_split(256, false, 4096, 1), std::invalid_argument);
  const ModelHandle named = parse_kernel_model("fa4-sm100+sw-exp2:16,1", formats::bf16);
  const SoftwareExp2Split s = named.recipe->software_exp2_split(128, false, 4096, 1);
  CHECK(s.enabled);
  CHECK(s.every == 16);  // the named split, not the table's 10
  CHECK(!parse_kernel_model("fa4-sm100+sw-exp2:off", formats::bf16)
             .recipe->software_exp2_split(64, false, 4096, 1)
             .enabled);
}
