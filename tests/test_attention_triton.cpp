// tests/test_attention_triton.cpp: the triton-tutorial kernel model against a plain
// transcription of the Triton fused-attention tutorial.
//
// The reference below is written from triton-lang/triton python/tutorials/06-fused-attention.py
// (read at commit 003da478), loop for loop as the tutorial runs it, not from the engine:
// - forward (_attn_fwd, _attn_fwd_inner): qk_scale = fp32(sm_scale) * 1.44269504f; m = -inf,
//   l = 1; every KV block from the first, including the causal blocks above the diagonal
//   (masked with -1e6, which must be numerically a no-op); off-band m_ij = max(m_i,
//   max(qk)*qk_scale) and exp2(fma(qk, qk_scale, -m_ij)); on-band (start_n >=
//   start_m*BLOCK_M, causal) qk = fma(qk, qk_scale, mask), m_ij = max(m_i, max(qk)),
//   exp2(qk - m_ij); l = fma(l, alpha, sum(p)); acc = acc*alpha then tl.dot(p.to(F), v, acc);
//   epilogue M = m + log2(l), O = F(acc / l).
// - backward (_attention.backward, _attn_bwd_preprocess, _attn_bwd, _attn_bwd_dkdv,
//   _attn_bwd_dq): K' = F(fp32(k * fp32(sm_scale * RCP_LN2))); delta = sum(o * do) in fp32;
//   per pid: dK/dV over the masked steps of BLOCK_M1/2 rows from start_n, then BLOCK_M1-row
//   steps to the end, dk *= sm_scale; dQ over the masked steps of BLOCK_N2/2 keys of the
//   diagonal block, then BLOCK_N2-key steps from key 0, dq *= LN2.
// The scalar models are the project's (fb::fused_dot with the sm80 preset for tl.dot, the
// correct-rounding SFU set for exp2/log2, std::fmaf where Triton fuses, fb::round_double for
// casts); tl.sum's order is the model's stated assumption (pairwise). Compared element for
// element with run_attention(), with the default tile and a +tile the autotuner may pick; then
// the model in exact arithmetic against exact_attention().
// Last, what the Triton kernels refuse (unmodelled_shape), each set written here from its
// source: the tutorial's head-dim assert, BLOCK_N <= HEAD_DIM, one N_CTX and its length asserts
// (triton-tutorial-sm90, the kernel as it runs), and flex decoding's warp layout
// (AccelerateMatmul.cpp warpsPerTileV2 on the q block and the head dim).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "attention/attention.hpp"
#include "attention/kernel_models.hpp"
#include "emu/ops.hpp"
#include "emu/sfu/special_functions.hpp"
#include "emu/dot/tensor_core.hpp"
#include "studies/scenarios.hpp"

using namespace fb;
using namespace fb::attn;

namespace {

// The tutorial's block sizes (forward: one autotune choice, the one the model uses).
constexpr int kBlockM = 128, kBlockN = 64;
constexpr int kBlockM1 = 32, kBlockN1 = 128, kBlockM2 = 128, kBlockN2 = 32, kSliceFactor = 2;

bool small_run() {
  const char* s = std::getenv("FLASHBITS_TEST_SCALE");
  return s && std::string(s) == "sanitizer";
}

struct Tutorial {
  const TensorCoreModel& tc;
  SfuSet sfu;
  Format f;  // the tensors' dtype (the tutorial's fp16; bf16 as the model's adaptation)
  float cast(float x) const { return static_cast<float>(to_double(f, round_double(f, x, RoundingSpec{}).bits)); }
  float exp2(float x) const { return sfu.ex2->evaluate(x); }
  float log2(float x) const { return sfu.lg2->evaluate(x); }
  float dot(float c, const float* a, const float* b, int k) const { return fused_dot(tc, c, a, b, k); }
};

// tl.sum as the model assumes it: recursive halving in fp32.
float tl_sum(const float* x, int n) {
  if (n <= 0) return 0.0f;
  if (n == 1) return x[0];
  const int h = n / 2;
  return tl_sum(x, h) + tl_sum(x + h, n - h);
}

using Matrix = std::vector<std::vector<float>>;
Matrix rows_of(const Tensor4& t) {
  Matrix m(static_cast<std::size_t>(t.rows), std::vector<float>(static_cast<std::size_t>(t.cols)));
  for (int r = 0; r < t.rows; ++r)
    for (int c = 0; c < t.cols; ++c) m[r][c] = static_cast<float>(t.at(0, 0, r, c));
  return m;
}

struct Forward {
  Matrix o;
  std::vector<float> m;  // M = m_i + log2(l_i), log2 units
};

// The forward with the tile its autotuner picked (BLOCK_M x BLOCK_N).
Forward tutorial_forward(const AttentionInputs& in, const Tutorial& t, int block_m = kBlockM, int block_n = kBlockN) {
  const int n = in.q.rows, d = in.q.cols;
  const Matrix q = rows_of(in.q), k = rows_of(in.k), v = rows_of(in.v);
  float qk_scale = static_cast<float>(in.softmax_scale);
  qk_scale *= 1.44269504f;
  Forward out{Matrix(static_cast<std::size_t>(n), std::vector<float>(static_cast<std::size_t>(d))),
              std::vector<float>(static_cast<std::size_t>(n))};
  std::vector<float> qk(block_n), p(block_n), pc(block_n), vcol(block_n), acc(d);
  for (int start_m = 0; start_m * block_m < n; ++start_m) {
    const int causal_start = in.causal ? start_m * block_m : n;
    for (int r = start_m * block_m; r < std::min(n, (start_m + 1) * block_m); ++r) {
      float m_i = -INFINITY, l_i = 1.0f;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int start_n = 0; start_n < n; start_n += block_n) {
        for (int j = 0; j < block_n; ++j) qk[j] = t.dot(0.0f, q[r].data(), k[start_n + j].data(), d);
        float m_ij;
        if (start_n >= causal_start) {
          for (int j = 0; j < block_n; ++j) qk[j] = std::fmaf(qk[j], qk_scale, r >= start_n + j ? 0.0f : -1.0e6f);
          m_ij = m_i;
          for (int j = 0; j < block_n; ++j) m_ij = std::max(m_ij, qk[j]);
          for (int j = 0; j < block_n; ++j) qk[j] -= m_ij;
        } else {
          float row_max = -INFINITY;
          for (int j = 0; j < block_n; ++j) row_max = std::max(row_max, qk[j]);
          m_ij = std::max(m_i, row_max * qk_scale);
          for (int j = 0; j < block_n; ++j) qk[j] = std::fmaf(qk[j], qk_scale, -m_ij);
        }
        for (int j = 0; j < block_n; ++j) p[j] = t.exp2(qk[j]);
        const float l_ij = tl_sum(p.data(), block_n);
        const float alpha = t.exp2(m_i - m_ij);
        l_i = std::fmaf(l_i, alpha, l_ij);
        for (float& a : acc) a *= alpha;
        for (int j = 0; j < block_n; ++j) pc[j] = t.cast(p[j]);
        for (int c = 0; c < d; ++c) {
          for (int j = 0; j < block_n; ++j) vcol[j] = v[start_n + j][c];
          acc[c] = t.dot(acc[c], pc.data(), vcol.data(), block_n);
        }
        m_i = m_ij;
      }
      m_i += t.log2(l_i);
      for (int c = 0; c < d; ++c) out.o[r][c] = t.cast(acc[c] / l_i);
      out.m[r] = m_i;
    }
  }
  return out;
}

struct Backward {
  std::vector<float> delta;
  Matrix dq, dk, dv;
};

Backward tutorial_backward(const AttentionInputs& in, const Forward& fwd, const Tutorial& t) {
  const int n = in.q.rows, d = in.q.cols;
  REQUIRE(n % kBlockN1 == 0);  // the tutorial asserts N_CTX % PRE_BLOCK (128) == 0
  const Matrix q = rows_of(in.q), k = rows_of(in.k), v = rows_of(in.v), d_o = rows_of(*in.d_o);
  const float sm_scale = static_cast<float>(in.softmax_scale);
  const float ln2 = 0.6931471824645996f;
  // arg_k = k * (ctx.sm_scale * RCP_LN2): Python double, then PyTorch's fp32 opmath scalar.
  const float k_factor = static_cast<float>(in.softmax_scale * 1.4426950408889634);
  Matrix kp = k;
  for (auto& row : kp)
    for (float& x : row) x = t.cast(x * k_factor);
  Backward out;
  out.delta.resize(static_cast<std::size_t>(n));
  std::vector<float> prod(d);
  for (int r = 0; r < n; ++r) {  // _attn_bwd_preprocess
    for (int c = 0; c < d; ++c) prod[c] = fwd.o[r][c] * d_o[r][c];
    out.delta[r] = tl_sum(prod.data(), d);
  }
  const Matrix zero(static_cast<std::size_t>(n), std::vector<float>(static_cast<std::size_t>(d), 0.0f));
  out.dq = out.dk = out.dv = zero;
  auto p_of = [&](float qk, int r, int j, bool mask) {
    const float p = t.exp2(qk - fwd.m[r]);
    return mask && !(r >= j) ? 0.0f : p;
  };
  // _attn_bwd_dkdv
  auto dkdv = [&](Matrix& dk, Matrix& dv, int start_n, int start_m, int num_steps, int step, bool mask) {
    std::vector<float> pp(step), ds(step), col(step);
    int curr_m = start_m;
    for (int s = 0; s < num_steps; ++s) {
      for (int jj = 0; jj < kBlockN1; ++jj) {
        const int j = start_n + jj;
        for (int mm = 0; mm < step; ++mm) {
          const int r = curr_m + mm;
          const float qkT = t.dot(0.0f, kp[j].data(), q[r].data(), d);
          const float pT = p_of(qkT, r, j, mask);
          pp[mm] = t.cast(pT);
          const float dpT = t.dot(0.0f, v[j].data(), d_o[r].data(), d);
          ds[mm] = t.cast(pT * (dpT - out.delta[r]));
        }
        for (int c = 0; c < d; ++c) {
          for (int mm = 0; mm < step; ++mm) col[mm] = d_o[curr_m + mm][c];
          dv[jj][c] = t.dot(dv[jj][c], pp.data(), col.data(), step);
          for (int mm = 0; mm < step; ++mm) col[mm] = q[curr_m + mm][c];
          dk[jj][c] = t.dot(dk[jj][c], ds.data(), col.data(), step);
        }
      }
      curr_m += step;
    }
  };
  // _attn_bwd_dq
  auto dq_steps = [&](Matrix& dq, int start_m, int start_n, int num_steps, int step, bool mask) {
    std::vector<float> ds(step), col(step);
    int curr_n = start_n;
    for (int s = 0; s < num_steps; ++s) {
      for (int mm = 0; mm < kBlockM2; ++mm) {
        const int r = start_m + mm;
        for (int jj = 0; jj < step; ++jj) {
          const int j = curr_n + jj;
          const float qk = t.dot(0.0f, q[r].data(), kp[j].data(), d);
          const float p = p_of(qk, r, j, mask);
          const float dp = t.dot(0.0f, d_o[r].data(), v[j].data(), d);
          ds[jj] = t.cast(p * (dp - out.delta[r]));
        }
        for (int c = 0; c < d; ++c) {
          for (int jj = 0; jj < step; ++jj) col[jj] = kp[curr_n + jj][c];
          dq[mm][c] = t.dot(dq[mm][c], ds.data(), col.data(), step);
        }
      }
      curr_n += step;
    }
  };
  for (int pid = 0; pid < n / kBlockN1; ++pid) {
    const int start_n = pid * kBlockN1;
    int start_m = start_n;
    Matrix dk(kBlockN1, std::vector<float>(d, 0.0f)), dv = dk;
    const int mask_block_m1 = kBlockM1 / kSliceFactor;
    int num_steps = kBlockN1 / mask_block_m1;
    dkdv(dk, dv, start_n, start_m, num_steps, mask_block_m1, true);
    start_m += num_steps * mask_block_m1;
    num_steps = (n - start_m) / kBlockM1;
    dkdv(dk, dv, start_n, start_m, num_steps, kBlockM1, false);
    for (int jj = 0; jj < kBlockN1; ++jj)
      for (int c = 0; c < d; ++c) {
        out.dv[start_n + jj][c] = t.cast(dv[jj][c]);
        out.dk[start_n + jj][c] = t.cast(dk[jj][c] * sm_scale);
      }
    // dQ of this pid's row block
    start_m = pid * kBlockM2;
    int end_n = start_m + kBlockM2;
    const int mask_block_n2 = kBlockN2 / kSliceFactor;
    Matrix dq(kBlockM2, std::vector<float>(d, 0.0f));
    num_steps = kBlockM2 / mask_block_n2;
    dq_steps(dq, start_m, end_n - num_steps * mask_block_n2, num_steps, mask_block_n2, true);
    end_n -= num_steps * mask_block_n2;
    num_steps = end_n / kBlockN2;
    dq_steps(dq, start_m, end_n - num_steps * kBlockN2, num_steps, kBlockN2, false);
    for (int mm = 0; mm < kBlockM2; ++mm)
      for (int c = 0; c < d; ++c) out.dq[start_m + mm][c] = t.cast(dq[mm][c] * ln2);
  }
  return out;
}

int mismatches(const Tensor4& got, const Matrix& want) {
  int bad = 0;
  for (int r = 0; r < got.rows; ++r)
    for (int c = 0; c < got.cols; ++c) bad += got.at(0, 0, r, c) == static_cast<double>(want[r][c]) ? 0 : 1;
  return bad;
}

// `tile`: a +tile:BMxBN suffix and the BLOCK_M, BLOCK_N it names (empty: the default 128 x 64).
struct NamedTile {
  std::string suffix;
  int block_m = kBlockM, block_n = kBlockN;
};

void compare_with_tutorial(const AttentionInputs& in, bool backward, const NamedTile& tile = {}) {
  CAPTURE(in.causal);
  CAPTURE(in.dtype.name);
  CAPTURE(tile.suffix);
  const Tutorial t{*find_tensor_core_model("sm80", in.dtype), correct_sfu_set(), in.dtype};
  const AttentionOutputs got =
      run_attention(parse_kernel_model("triton-tutorial" + tile.suffix, in.dtype), in, RunOptions{});
  const Forward fwd = tutorial_forward(in, t, tile.block_m, tile.block_n);
  CHECK(mismatches(got.o, fwd.o) == 0);
  for (int r = 0; r < in.q.rows; ++r) {
    CAPTURE(r);
    // The tutorial stores M in log2 units; the model reports fp32(M * ln 2).
    REQUIRE(got.lse.at(0, 0, r, 0) == static_cast<double>(static_cast<float>(fwd.m[r] * std::log(2.0))));
  }
  if (!backward) return;
  const Backward bwd = tutorial_backward(in, fwd, t);
  for (int r = 0; r < in.q.rows; ++r) REQUIRE(got.delta->at(0, 0, r, 0) == static_cast<double>(bwd.delta[r]));
  CHECK(mismatches(*got.dv, bwd.dv) == 0);
  CHECK(mismatches(*got.dk, bwd.dk) == 0);
  CHECK(mismatches(*got.dq, bwd.dq) == 0);
}

}  // namespace

TEST_CASE("triton-tutorial forward and backward equal a plain transcription of the tutorial, element for element") {
  const int n = small_run() ? 128 : 256;
  // The tutorial's own setting: fp16, causal, a softmax scale that is not a power of two
  // (so K' = F(k * scale * RCP_LN2) rounds).
  AttentionInputs fp16_in = make_scenario("random", 31, 1, 1, n, 64, formats::fp16, true);
  fp16_in.softmax_scale = 0.3;
  fp16_in.causal = true;
  compare_with_tutorial(fp16_in, true);
  // Ties at the max and bf16 (the model's adaptation of the fp16 casts), head dim 32.
  AttentionInputs sink = make_scenario("sink", 8, 1, 1, n, 32, formats::bf16, true);
  sink.causal = true;
  compare_with_tutorial(sink, true);
  // Non-causal forward (the tutorial's backward is causal only).
  AttentionInputs full = make_scenario("fa3-outliers", 4, 1, 1, n, 64, formats::fp16, false);
  full.softmax_scale = 0.3;
  compare_with_tutorial(full, false);
}

TEST_CASE("triton-tutorial backward: the host K pre-scale rounds, gradients stay within fp16 accuracy") {
  // The pre-scale is a real rounding step: K' = F(fp32(k * fp32(scale * RCP_LN2))) differs
  // from the exact k * scale * log2(e) for most elements (so the transcription above pins a
  // rounding that matters); the gradients are still those of the right function.
  AttentionInputs in = make_scenario("random", 2, 1, 1, 128, 64, formats::fp16, true);
  in.softmax_scale = 0.3;
  in.causal = true;
  const float factor = static_cast<float>(0.3 * 1.4426950408889634);
  int rounded = 0;
  for (int j = 0; j < 128; ++j)
    for (int c = 0; c < 64; ++c) {
      const double k = in.k.at(0, 0, j, c);
      const double kp =
          to_double(formats::fp16, round_double(formats::fp16, static_cast<float>(k * factor), RoundingSpec{}).bits);
      rounded += kp != k * 0.3 * 1.4426950408889634 ? 1 : 0;
    }
  CHECK(rounded > 128 * 64 / 2);
  const AttentionOutputs tri = run_attention(parse_kernel_model("triton-tutorial", formats::fp16), in, RunOptions{});
  const AttentionOutputs ref = exact_attention(in);
  auto worst = [](const Tensor4& a, const Tensor4& b) {
    double w = 0.0;
    for (std::size_t i = 0; i < a.data.size(); ++i)
      w = std::max(w, std::fabs(a.data[i] - b.data[i]) / std::max(1.0, std::fabs(b.data[i])));
    return w;
  };
  CHECK(worst(*tri.dq, *ref.dq) < 0.02);
  CHECK(worst(*tri.dk, *ref.dk) < 0.02);
  CHECK(worst(*tri.dv, *ref.dv) < 0.02);
  CHECK(worst(*tri.delta, *ref.delta) < 0.02);
}

TEST_CASE("triton-tutorial in exact arithmetic equals the exact reference, causal or not, odd sizes and variants") {
  for (bool causal : {false, true}) {
    AttentionInputs in = make_scenario("fa3-outliers", 17, 1, 2, 53, 24, formats::fp16, true);
    in.causal = causal;
    const AttentionOutputs ref = exact_attention(in);
    for (const char* name :
         {"triton-tutorial", "triton-tutorial+delta-dpp", "triton-tutorial+o-fp32", "triton-tutorial+dynmax"}) {
      for (int bm : {0, 12}) {
        CAPTURE(name);
        CAPTURE(causal);
        CAPTURE(bm);
        RunOptions opt;
        opt.exact_arithmetic = true;
        opt.block_m = bm;           // forward BLOCK_M and backward step (BLOCK_M1 = BLOCK_N2)
        opt.block_n = bm ? 20 : 0;  // forward BLOCK_N and backward block (BLOCK_N1 = BLOCK_M2)
        const AttentionOutputs got = run_attention(parse_kernel_model(name, formats::fp16), in, opt);
        auto worst = [](const Tensor4& a, const Tensor4& b) {
          double w = 0.0;
          for (std::size_t i = 0; i < a.data.size(); ++i)
            w = std::max(w, std::fabs(a.data[i] - b.data[i]) / std::max(1.0, std::fabs(b.data[i])));
          return w;
        };
        CHECK(worst(got.o, ref.o) < 1e-12);
        CHECK(worst(got.lse, ref.lse) < 1e-12);
        CHECK(worst(*got.delta, *ref.delta) < 1e-12);
        CHECK(worst(*got.dq, *ref.dq) < 1e-12);
        CHECK(worst(*got.dk, *ref.dk) < 1e-12);
        CHECK(worst(*got.dv, *ref.dv) < 1e-12);
      }
    }
  }
}

// ---- what the tutorial and flex decoding refuse (attention/kernel_models.cpp unmodelled_shape) ----
namespace {

// The tutorial's limits, written here from python/tutorials/06-fused-attention.py @003da478, not
// read from the model's table: _attention.forward's `assert HEAD_DIM_K in {16, 32, 64, 128, 256}`,
// and the sm_90 forward's autotune over configs_tma (BLOCK_N in {32, 64, 128}) whose
// `tl.static_assert(BLOCK_N <= HEAD_DIM)` rejects every wider BLOCK_N: head dim 16 compiles none.
bool tutorial_sm90_runs_head_dim(int d) {
  const std::vector<int> asserted = {16, 32, 64, 128, 256};
  const std::vector<int> block_n = {32, 64, 128};
  const bool admitted = std::find(asserted.begin(), asserted.end(), d) != asserted.end();
  return admitted && std::any_of(block_n.begin(), block_n.end(), [d](int bn) { return bn <= d; });
}

RunShape square_run(int n, int d, bool causal = false, bool backward = false) {
  RunShape s;
  s.query_rows = s.keys = n;
  s.head_dim = d;
  s.causal = causal;
  s.backward = backward;
  return s;
}

// The message of the invalid_argument `run` throws (empty: none thrown).
template <class Run>
std::string refusal_of(Run run) {
  try {
    run();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

bool any_note_contains(const std::vector<std::string>& notes, const std::string& part) {
  return std::any_of(notes.begin(), notes.end(), [&](const std::string& n) { return contains(n, part); });
}

}  // namespace

TEST_CASE("triton-tutorial-sm90 refuses the head dims the tutorial refuses, naming them; its neighbours run") {
  const ModelHandle model = parse_kernel_model("triton-tutorial-sm90", formats::fp16);
  int accepted = 0;
  for (int d = 1; d <= 256; ++d) {
    CAPTURE(d);
    const bool runs = unmodelled_shape(*model.recipe, square_run(128, d, true, true)).empty();
    CHECK(runs == tutorial_sm90_runs_head_dim(d));
    accepted += runs ? 1 : 0;
  }
  CHECK(accepted == 4);  // 32, 64, 128, 256
  // One error line naming the model, the head dim and the set that runs.
  for (int d : {16, 48, 100}) {
    CAPTURE(d);
    AttentionInputs in = make_scenario("random", 5, 1, 1, 128, d, formats::fp16, true);
    in.causal = true;
    const std::string why = refusal_of([&] { run_attention(model, in, RunOptions{}); });
    CHECK(contains(why, "triton-tutorial-sm90"));
    CHECK(contains(why, "head dim " + std::to_string(d) + " is refused"));
    CHECK(contains(why, "{32, 64, 128, 256}"));
    CHECK(contains(why, "{16, 32, 64, 128, 256}"));
    CHECK(why.find('\n') == std::string::npos);
  }
  // The neighbours run, forward and backward; at head dim 32 only BLOCK_N 32 compiles, so that
  // is the tile modelled there.
  for (int d : {32, 64}) {
    CAPTURE(d);
    AttentionInputs in = make_scenario("random", 6, 1, 1, 128, d, formats::fp16, true);
    in.causal = true;
    CHECK_NOTHROW(run_attention(model, in, RunOptions{}));
  }
  CHECK(model.recipe->tiles_for(32, 128, true, 128).block_n == 32);
  CHECK(model.recipe->tiles_for(64, 128, true, 128).block_n == 64);  // the captures' tile is kept
  // The recipe triton-tutorial runs head dim 48 as its extension, and says the tutorial refuses it.
  const ModelHandle recipe = parse_kernel_model("triton-tutorial", formats::fp16);
  CHECK(unmodelled_shape(*recipe.recipe, square_run(128, 48)).empty());
  CHECK(any_note_contains(unmeasured_shape_notes(*recipe.recipe, square_run(128, 48)), "head dim 48 is refused"));
  // Head dim 32 runs in the tutorial (BLOCK_N 32 compiles there): the recipe says nothing of it.
  CHECK_FALSE(any_note_contains(unmeasured_shape_notes(*recipe.recipe, square_run(128, 32)), "refuses it"));
}

TEST_CASE("triton-tutorial-sm90 refuses lengths the tutorial does not run: one N_CTX, whole tiles, 128 backward") {
  const ModelHandle model = parse_kernel_model("triton-tutorial-sm90", formats::fp16);
  const KernelModel& km = *model.recipe;
  // One N_CTX = q.shape[2] for q, k and v.
  RunShape cross = square_run(128, 64);
  cross.keys = 256;
  CHECK(contains(unmodelled_shape(km, cross), "one N_CTX"));
  // No bounds masks: a length that is not a multiple of the 128 x 64 tile; the backward's
  // `assert N_CTX % PRE_BLOCK == 0` with PRE_BLOCK = 128.
  CHECK(contains(unmodelled_shape(km, square_run(192, 64)), "a multiple of its 128 x 64 tile"));
  CHECK(unmodelled_shape(km, square_run(256, 64, false, true)).empty());
  const ModelHandle small_tile = parse_kernel_model("triton-tutorial-sm90+tile:64x64", formats::fp16);
  CHECK(unmodelled_shape(*small_tile.recipe, square_run(192, 64)).empty());
  // 192 rows are whole 64 x 64 tiles: only the backward's assert refuses them, and the message
  // claims no partial tile.
  const std::string backward_192 = unmodelled_shape(*small_tile.recipe, square_run(192, 64, false, true));
  CHECK(contains(backward_192, "N_CTX % PRE_BLOCK == 0 (PRE_BLOCK = 128)"));
  CHECK_FALSE(contains(backward_192, "partial"));
  // The recipe's notes follow the same rules: a forward of 64 rows in 64 x 32 tiles runs in the
  // tutorial, so no length note.
  const ModelHandle recipe_small = parse_kernel_model("triton-tutorial+tile:64x32", formats::fp16);
  CHECK_FALSE(any_note_contains(unmeasured_shape_notes(*recipe_small.recipe, square_run(64, 64)), "N_CTX"));
  CHECK(any_note_contains(unmeasured_shape_notes(*recipe_small.recipe, square_run(64, 64, false, true)), "PRE_BLOCK"));
  // A causal run with BLOCK_N > BLOCK_M: the off-band loop reads keys past the diagonal.
  const ModelHandle wide = parse_kernel_model("triton-tutorial-sm90+tile:64x128", formats::fp16);
  CHECK(contains(unmodelled_shape(*wide.recipe, square_run(256, 128, true)), "BLOCK_N <= BLOCK_M"));
  CHECK(unmodelled_shape(*wide.recipe, square_run(256, 128, false)).empty());
  // A named BLOCK_N wider than the head dim does not compile (tl.static_assert).
  const ModelHandle wide_n = parse_kernel_model("triton-tutorial-sm90+tile:128x128", formats::fp16);
  CHECK(contains(unmodelled_shape(*wide_n.recipe, square_run(256, 64)), "BLOCK_N 128 (+tile)"));
  CHECK(unmodelled_shape(*wide_n.recipe, square_run(256, 128)).empty());
  // What is accepted runs: the 64 x 64 forward of 192 rows.
  AttentionInputs in = make_scenario("random", 7, 1, 1, 192, 64, formats::fp16, false);
  in.d_o.reset();
  CHECK_NOTHROW(run_attention(small_tile, in, RunOptions{}));
}

TEST_CASE("+tile names the tutorial's autotuned forward tile: the transcription with that tile, bit for bit") {
  // The tutorial's candidates (configs: BLOCK_M {64, 128} x BLOCK_N {32, 64}; configs_tma adds
  // BLOCK_N 128 on sm_90); anything else, or another model, is refused.
  CHECK(parse_kernel_model("triton-tutorial-sm90+tile:64x32", formats::fp16).name == "triton-tutorial-sm90+tile:64x32");
  for (const char* bad :
       {"triton-tutorial+tile:128x128", "triton-tutorial-sm90+tile:96x64", "triton-tutorial-sm90+tile:128",
        "triton-tutorial-sm90+tile", "fa2-sm80+tile:128x64", "triton-tutorial+tile:64x32+tile:128x64"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(parse_kernel_model(bad, formats::fp16), std::invalid_argument);
  }
  const int n = small_run() ? 128 : 256;
  for (bool causal : {false, true}) {
    AttentionInputs in = make_scenario("random", 41, 1, 1, n, 64, formats::fp16, true);
    in.softmax_scale = 0.3;
    in.causal = causal;
    compare_with_tutorial(in, causal, NamedTile{"+tile:64x32", 64, 32});
  }
}

TEST_CASE("the tutorial's runs say which tile they model: the captured one, or an unmeasured one") {
  const ModelHandle model = parse_kernel_model("triton-tutorial-sm90", formats::fp16);
  const std::vector<std::string> captured = unmeasured_shape_notes(*model.recipe, square_run(256, 64));
  CHECK(any_note_contains(captured, "autotunes"));
  CHECK(any_note_contains(captured, "128 x 64, the tile the H200 captures forced"));
  CHECK(!any_note_contains(captured, "UNMEASURED"));
  CHECK(any_note_contains(unmeasured_shape_notes(*model.recipe, square_run(256, 32)), "128 x 32, a tile no capture"));
  const ModelHandle named = parse_kernel_model("triton-tutorial-sm90+tile:64x64", formats::fp16);
  const std::vector<std::string> other = unmeasured_shape_notes(*named.recipe, square_run(256, 64));
  CHECK(any_note_contains(other, "+tile:64x64"));
  CHECK(any_note_contains(other, "UNMEASURED"));
  RunShape batched = square_run(256, 64);
  batched.batch = 2;
  CHECK(any_note_contains(unmeasured_shape_notes(*model.recipe, batched), "offset_y = off_z + off_h * N_CTX"));
}

namespace {
// Flex decoding (PyTorch 2.11 flex_decoding.py: num_warps 2, BLOCK_N 64 for every head dim on
// sm_90, BLOCK_M = max(next_power_of_2(rows x heads per kv head), 16), V_HEAD_DIM_ROUNDED =
// next_power_of_2(head dim)): Triton lays the 2 warps along the rows when a chained dot has
// shape[0] >= shape[1] (lib/Dialect/TritonGPU/Transforms/AccelerateMatmul.cpp warpsPerTileV2),
// the P·V dot BLOCK_M x V_HEAD_DIM_ROUNDED or the q·k dot BLOCK_M x 64; the model sums a row of
// the [1, 2] layout only.
bool flex_decode_warps_along_keys(int rows, int group, int d) {
  int block_m = 16, d_rounded = 1;
  while (block_m < rows * group) block_m *= 2;
  while (d_rounded < d) d_rounded *= 2;
  return block_m < d_rounded && block_m < 64;
}
}  // namespace

TEST_CASE("flex-decoding-sm90 runs only q blocks whose warps Triton lays along the keys, head dim included") {
  const ModelHandle model = parse_kernel_model("flex-decoding-sm90", formats::bf16);
  int accepted = 0, refused = 0;
  for (int rows : {1, 5, 16, 17, 32, 33, 64})
    for (int group : {1, 2, 4})
      for (int d : {8, 16, 24, 32, 48, 64, 128, 256}) {
        CAPTURE(rows);
        CAPTURE(group);
        CAPTURE(d);
        RunShape s = square_run(rows, d);
        s.keys = 256;
        s.heads = group;
        const bool runs = unmodelled_shape(*model.recipe, s).empty();
        CHECK(runs == flex_decode_warps_along_keys(rows, group, d));
        (runs ? accepted : refused) += 1;
      }
  CHECK(accepted > 0);
  CHECK(refused > 0);
  // Head dims up to 16 lay the warps along the rows whatever the rows (BLOCK_M >= 16): refused,
  // naming the P·V dot; 32 only for blocks of 16 rows; the neighbours run.
  for (const std::pair<int, int>& rows_d : {std::pair{16, 16}, std::pair{32, 32}, std::pair{17, 24}}) {
    AttentionInputs in = make_scenario("random", 9, 1, 1, rows_d.first, rows_d.second, formats::bf16, true, 1, 256);
    const std::string why = refusal_of([&] { run_attention(model, in, RunOptions{}); });
    CHECK(contains(why, "flex-decoding-sm90"));
    CHECK(contains(why, "P·V dot"));
  }
  for (const std::pair<int, int>& rows_d : {std::pair{16, 32}, std::pair{32, 64}, std::pair{16, 24}}) {
    AttentionInputs in = make_scenario("random", 9, 1, 1, rows_d.first, rows_d.second, formats::bf16, true, 1, 256);
    CHECK_NOTHROW(run_attention(model, in, RunOptions{}));
  }
  // The decoding kernel's runs do not carry the attention template's "Inductor decodes these
  // rows instead" note: they are that kernel.
  RunShape decode = square_run(16, 64);
  decode.keys = 1024;
  CHECK(!any_note_contains(unmeasured_shape_notes(*model.recipe, decode), "not this template"));
  CHECK(any_note_contains(
      unmeasured_shape_notes(*parse_kernel_model("flex-attention-sm90", formats::bf16).recipe, decode),
      "not this template"));
}

// Facts of Inductor's choices that the H200's FlexAttention captures (bf16, head dim 64, power-of-two
// groups) do not cover are said with every run: its tuning table picks tiles per head dim
// (template_heuristics/triton.py), and newer _use_flex_decoding versions decode only
// power-of-two groups of query heads per kv head (flex_attention.py, pw_of_two).
TEST_CASE("FlexAttention runs outside the captured head dim and group sizes say so") {
  const ModelHandle flex = parse_kernel_model("flex-attention-sm90", formats::bf16);
  const ModelHandle decoding = parse_kernel_model("flex-decoding-sm90", formats::bf16);
  CHECK(!any_note_contains(unmeasured_shape_notes(*flex.recipe, square_run(256, 64)), "tuning table"));
  for (const int d : {32, 96, 128, 256})
    CHECK(any_note_contains(unmeasured_shape_notes(*flex.recipe, square_run(256, d)), "tuning table"));
  RunShape decode = square_run(4, 64);
  decode.keys = 512;
  struct Group {
    int heads, kv_heads;
    bool power_of_two;
  };
  for (const Group& g : {Group{8, 2, true}, Group{6, 2, false}, Group{3, 1, false}, Group{4, 4, true}}) {
    CAPTURE(g.heads);
    CAPTURE(g.kv_heads);
    decode.heads = g.heads;
    decode.kv_heads = g.kv_heads;
    CHECK(any_note_contains(unmeasured_shape_notes(*decoding.recipe, decode), "asks for a power of two") ==
          !g.power_of_two);
    CHECK(any_note_contains(unmeasured_shape_notes(*flex.recipe, decode), "power-of-two group") == !g.power_of_two);
    CHECK(any_note_contains(unmeasured_shape_notes(*flex.recipe, decode), "not this template"));
  }
}

// The tutorial's host code (06-fused-attention.py @003da478, _attention.forward) builds the k
// and v descriptors with q's head count and its backward asserts q.stride() == k.stride() ==
// v.stride(); it casts P and O to tl.float16 (dtype = tl.float8e5 if FP8_OUTPUT else
// tl.float16), which tl.dot cannot meet with bf16 operands. So it runs neither grouped-query
// attention nor bf16 inputs: the model refuses both, and the recipe notes them.
TEST_CASE("triton-tutorial-sm90 refuses grouped-query attention and bf16 inputs, as the tutorial does") {
  const ModelHandle model = parse_kernel_model("triton-tutorial-sm90", formats::fp16);
  RunShape gqa = square_run(128, 64);
  gqa.heads = 4;
  gqa.kv_heads = 2;
  CHECK(contains(unmodelled_shape(*model.recipe, gqa), "4 query heads over 2 kv heads are refused"));
  AttentionInputs in = make_scenario("random", 8, 1, 4, 128, 64, formats::fp16, false, 2);
  in.d_o.reset();
  const std::string why = refusal_of([&] { run_attention(model, in, RunOptions{}); });
  CHECK(contains(why, "triton-tutorial-sm90"));
  CHECK(why.find('\n') == std::string::npos);
  const ModelHandle bf16 = parse_kernel_model("triton-tutorial-sm90", formats::bf16);
  CHECK(contains(unmodelled_shape(*bf16.recipe, square_run(128, 64)), "bf16 is refused"));
  CHECK(unmodelled_shape(*model.recipe, square_run(128, 64)).empty());  // fp16, one head group: runs
  const ModelHandle recipe = parse_kernel_model("triton-tutorial", formats::bf16);
  CHECK(unmodelled_shape(*recipe.recipe, square_run(128, 64)).empty());
  CHECK(any_note_contains(unmeasured_shape_notes(*recipe.recipe, square_run(128, 64)), "bf16 is refused"));
}
