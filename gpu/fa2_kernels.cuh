// gpu/fa2_kernels.cuh: fb-fa2's device side: tile sizes, the fragment and MMA helpers,
// and the forward, delta, dK/dV and dQ kernels.
// Contract: it includes what it uses, so that it parses alone (clangd, an IDE). gpu/fa2.cu
// includes it once: its kernels stay in the one translation unit with their launches (no
// relocatable device code), hence the anonymous namespace.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "gpu/device_common.cuh"
#include "traces/fa2_host.hpp"

namespace fb::gpu {
namespace {

constexpr int kRowsPerWarp = 16;               // one m16n8k16 row tile per warp
constexpr float kLn2 = 0.693147182f;           // the constant __logf multiplies lg2 by
constexpr float kLog2e = 1.44269504f;          // float(M_LOG2E)
constexpr float kDynmaxBeta = kFa2DynmaxBeta;  // traces/fa2_host.hpp: the CPU model's +dynmax defaults
constexpr double kDynmaxTol = kFa2DynmaxTol;

template <int D>
constexpr int kBlockM = fa2_tile_sizes(D).block_m;
template <int D>
constexpr int kBlockN = fa2_tile_sizes(D).block_n;
template <int D>
constexpr int kBwdBlockM = fa2_tile_sizes(D).bwd_block_m;
template <int D>
constexpr int kBwdBlockN = fa2_tile_sizes(D).bwd_block_n;
template <int D>
constexpr int kFwdThreads = kBlockM<D> / kRowsPerWarp * 32;
template <int D>
constexpr int kDkDvThreads = kBwdBlockN<D> / kRowsPerWarp * 32;
template <int D>
constexpr int kDqThreads = kBwdBlockM<D> / kRowsPerWarp * 32;

struct Problem {
  int batch, heads, seq, hdim;
  bool causal, dynmax;
  float softmax_scale, scale_log2;
  double softmax_scale_exact;  // dynmax's tolerance test runs in double, as in the CPU model
  const __nv_bfloat16 *q, *k, *v, *dout;
  __nv_bfloat16 *o, *dq, *dk, *dv;
  float *lse, *delta, *dq_accum;
  // instrumentation
  int trace_rows[kFa2MaxTraceRows];
  int n_trace_rows;
  float *trace_m, *trace_l, *trace_p, *trace_acc_o;  // [row slot][kv block][...]
};

__device__ __forceinline__ std::uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // cvt.rn: RNE
  std::uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}
__device__ __forceinline__ std::uint32_t pack_raw(const __nv_bfloat16* p0, const __nv_bfloat16* p1) {
  std::uint16_t a, b;
  std::memcpy(&a, p0, 2);
  std::memcpy(&b, p1, 2);
  return static_cast<std::uint32_t>(a) | (static_cast<std::uint32_t>(b) << 16);
}
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
}
__device__ __forceinline__ float quad_sum(float x) {
  x = __fadd_rn(x, __shfl_xor_sync(0xffffffffu, x, 2));
  return __fadd_rn(x, __shfl_xor_sync(0xffffffffu, x, 1));
}
__device__ __forceinline__ int quad_sum_int(int x) {
  x += __shfl_xor_sync(0xffffffffu, x, 2);
  return x + __shfl_xor_sync(0xffffffffu, x, 1);
}

// The 16 rows at `base` (row stride D) as bf16 A fragments, one per 16-wide k-slice.
template <int D>
__device__ void load_a_rows(const __nv_bfloat16* base, int g, int t, std::uint32_t (&a)[D / 16][4]) {
  for (int ks = 0; ks < D / 16; ++ks) {
    const __nv_bfloat16* r0 = base + static_cast<std::size_t>(g) * D + ks * 16;
    const __nv_bfloat16* r8 = r0 + 8 * D;
    a[ks][0] = pack_raw(r0 + 2 * t, r0 + 2 * t + 1);
    a[ks][1] = pack_raw(r8 + 2 * t, r8 + 2 * t + 1);
    a[ks][2] = pack_raw(r0 + 2 * t + 8, r0 + 2 * t + 9);
    a[ks][3] = pack_raw(r8 + 2 * t + 8, r8 + 2 * t + 9);
  }
}

// acc (16 x 8*NT) = A B^T where A is 16 rows (fragments `a`) and B the 8*NT rows at
// `bbase` (stride D): acc[nt][e] is row g + 8*(e/2), column nt*8 + 2t + (e&1). Each n8
// tile is one MMA chain over the D/16 k-slices in order, starting from C = 0.
template <int D, int NT>
__device__ void rows_times_rows(const std::uint32_t (&a)[D / 16][4], const __nv_bfloat16* bbase, int g, int t,
                                float (&acc)[NT][4]) {
  for (int nt = 0; nt < NT; ++nt)
    for (int i = 0; i < 4; ++i) acc[nt][i] = 0.f;
  for (int ks = 0; ks < D / 16; ++ks) {
    for (int nt = 0; nt < NT; ++nt) {
      const __nv_bfloat16* brow = bbase + static_cast<std::size_t>(nt * 8 + g) * D + ks * 16;
      const std::uint32_t b[2] = {pack_raw(brow + 2 * t, brow + 2 * t + 1),
                                  pack_raw(brow + 2 * t + 8, brow + 2 * t + 9)};
      mma_m16n8k16_bf16_f32(acc[nt], a[ks], b, acc[nt]);
    }
  }
}

// acc (16 x D) += A M where A is 16 x 16*KK (fragments `a`) and M the 16*KK rows at
// `base` (stride D): one MMA chain per n8 tile of D, k-slices in order, acc as C.
template <int D, int KK>
__device__ void acc_plus_a_times_rows(float (&acc)[D / 8][4], const std::uint32_t (&a)[KK][4],
                                      const __nv_bfloat16* base, int g, int t) {
  for (int kk = 0; kk < KK; ++kk) {
    for (int dt = 0; dt < D / 8; ++dt) {
      const __nv_bfloat16* m0 = base + static_cast<std::size_t>(kk * 16 + 2 * t) * D + dt * 8 + g;
      const std::uint32_t b[2] = {pack_raw(m0, m0 + D), pack_raw(m0 + 8 * D, m0 + 9 * D)};
      mma_m16n8k16_bf16_f32(acc[dt], a[kk], b, acc[dt]);
    }
  }
}

// An fp32 accumulator tile (16 x 8*NT) as bf16 A fragments for the next MMA (RNE).
template <int NT>
__device__ __forceinline__ void acc_to_a(const float (&acc)[NT][4], std::uint32_t (&a)[NT / 2][4]) {
  for (int kk = 0; kk < NT / 2; ++kk) {
    a[kk][0] = pack_bf16(acc[2 * kk][0], acc[2 * kk][1]);
    a[kk][1] = pack_bf16(acc[2 * kk][2], acc[2 * kk][3]);
    a[kk][2] = pack_bf16(acc[2 * kk + 1][0], acc[2 * kk + 1][1]);
    a[kk][3] = pack_bf16(acc[2 * kk + 1][2], acc[2 * kk + 1][3]);
  }
}

__device__ int trace_slot(const Problem& p, int row) {
  for (int i = 0; i < p.n_trace_rows; ++i)
    if (p.trace_rows[i] == row) return i;
  return -1;
}

// LSE*log2e as the backward's exponent offset (scale_apply_exp2<Scale_max=false>).
__device__ __forceinline__ float lse_scaled(float lse) { return lse == -INFINITY ? 0.f : __fmul_rn(lse, kLog2e); }

template <int D>
__global__ void __launch_bounds__(kFwdThreads<D>) fa2_forward(Problem p) {
  constexpr int BM = kBlockM<D>, BN = kBlockN<D>, NT = BN / 8;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int bh = blockIdx.y;
  const std::size_t head = static_cast<std::size_t>(bh) * p.seq * D;
  const int row0 = blockIdx.x * BM + warp * kRowsPerWarp;
  const int n_blocks = p.seq / BN;
  // flash_fwd_kernel.h: n_block_max = ceil(min(seqlen_k, (m_block + 1) * kBlockM) / kBlockN) when causal
  const int n_block_max = p.causal ? min(n_blocks, ((blockIdx.x + 1) * BM + BN - 1) / BN) : n_blocks;
  std::uint32_t qa[D / 16][4];
  load_a_rows<D>(p.q + head + static_cast<std::size_t>(row0) * D, g, t, qa);
  float acc_o[D / 8][4] = {};
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f}, row_scale[2] = {1.f, 1.f};
  const int slot[2] = {bh == 0 ? trace_slot(p, row0 + g) : -1, bh == 0 ? trace_slot(p, row0 + g + 8) : -1};
  for (int nb = n_block_max - 1; nb >= 0; --nb) {  // last KV block first
    const bool first = nb == n_block_max - 1;
    float s[NT][4];
    rows_times_rows<D, NT>(qa, p.k + head + static_cast<std::size_t>(nb) * BN * D, g, t, s);
    if (p.causal && (nb + 1) * BN - 1 > row0) {  // the tile reaches above some row's diagonal
      for (int nt = 0; nt < NT; ++nt)
        for (int e = 0; e < 4; ++e)
          if (nb * BN + nt * 8 + 2 * t + (e & 1) > row0 + g + 8 * (e >> 1)) s[nt][e] = -INFINITY;
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {  // the thread's two rows: g (i = 0) and g + 8 (i = 1)
      float m = first ? s[0][2 * i] : row_max[i];
      for (int nt = 0; nt < NT; ++nt)
        for (int j = 0; j < 2; ++j)
          if (!first || nt || j) m = fmaxf(m, s[nt][2 * i + j]);
      m = quad_max(m);
      if (p.dynmax) {
        float rm = s[0][2 * i];
        for (int nt = 0; nt < NT; ++nt)
          for (int j = 0; j < 2; ++j) rm = fmaxf(rm, s[nt][2 * i + j]);
        rm = quad_max(rm);
        int count = 0;  // masked -inf entries give (rm - -inf) = inf or NaN: never counted
        for (int nt = 0; nt < NT; ++nt)
          for (int j = 0; j < 2; ++j)
            count +=
                (static_cast<double>(rm) - static_cast<double>(s[nt][2 * i + j])) * p.softmax_scale_exact <= kDynmaxTol;
        count = quad_sum_int(count);
        const float m_block = (count > 1 && rm > 0.f) ? kDynmaxBeta * rm : (count > 1 && rm < 0.f) ? 0.f : rm;
        m = first ? m_block : fmaxf(row_max[i], m_block);
      }
      if (!first) {
        // softmax_rescale_o: a fully masked max reads as 0 (Check_inf), so -inf - -inf cannot happen.
        const float m_cur = m == -INFINITY ? 0.f : m;
        const float scores_scale = ex2_approx_ftz(__fmul_rn(row_max[i] - m_cur, p.scale_log2));
        row_scale[i] = scores_scale;  // row_sum's rescale is fused into the first add below
        for (int dt = 0; dt < D / 8; ++dt) {
          acc_o[dt][2 * i] = __fmul_rn(acc_o[dt][2 * i], scores_scale);
          acc_o[dt][2 * i + 1] = __fmul_rn(acc_o[dt][2 * i + 1], scores_scale);
        }
      }
      row_max[i] = m;
      const float max_scaled = m == -INFINITY ? 0.f : __fmul_rn(m, p.scale_log2);
      for (int nt = 0; nt < NT; ++nt)
        for (int j = 0; j < 2; ++j)
          s[nt][2 * i + j] = ex2_approx_ftz(__fmaf_rn(s[nt][2 * i + j], p.scale_log2, -max_scaled));
      // FA2's `row_sum *= scores_scale` then `row_sum += p` is one FFMA under nvcc's
      // contraction (seen in PyTorch's build of FA2's softmax.h on H200).
      float sum = first ? s[0][2 * i] : __fmaf_rn(row_sum[i], row_scale[i], s[0][2 * i]);
      for (int nt = 0; nt < NT; ++nt)
        for (int j = 0; j < 2; ++j)
          if (nt || j) sum = __fadd_rn(sum, s[nt][2 * i + j]);
      row_sum[i] = sum;
    }
    std::uint32_t pa[NT / 2][4];
    acc_to_a<NT>(s, pa);  // P rounded to bf16 only now, after the row sum took the fp32 values
    acc_plus_a_times_rows<D, NT / 2>(acc_o, pa, p.v + head + static_cast<std::size_t>(nb) * BN * D, g, t);
#pragma unroll
    for (int i = 0; i < 2; ++i) {  // instrumentation (reads only)
      if (slot[i] < 0) continue;
      const std::size_t at = static_cast<std::size_t>(slot[i]) * n_blocks + nb;
      if (t == 0) p.trace_m[at] = row_max[i];
      p.trace_l[at * 4 + t] = row_sum[i];
      for (int nt = 0; nt < NT; ++nt)
        for (int j = 0; j < 2; ++j) p.trace_p[at * BN + nt * 8 + 2 * t + j] = s[nt][2 * i + j];
      for (int dt = 0; dt < D / 8; ++dt)
        for (int j = 0; j < 2; ++j) p.trace_acc_o[at * D + dt * 8 + 2 * t + j] = acc_o[dt][2 * i + j];
    }
  }
  for (int i = 0; i < 2; ++i) {
    const int row = row0 + g + 8 * i;
    const float l = quad_sum(row_sum[i]);
    const bool empty = l == 0.f || l != l;
    const float inv = empty ? 1.f : rcp_approx_ftz(l);
    for (int dt = 0; dt < D / 8; ++dt) {
      const std::uint32_t packed = pack_bf16(__fmul_rn(acc_o[dt][2 * i], inv), __fmul_rn(acc_o[dt][2 * i + 1], inv));
      std::memcpy(p.o + head + static_cast<std::size_t>(row) * D + dt * 8 + 2 * t, &packed, 4);
    }
    if (t == 0) {
      p.lse[static_cast<std::size_t>(bh) * p.seq + row] =
          empty ? INFINITY : __fmaf_rn(row_max[i], p.softmax_scale, __fmul_rn(lg2_approx_ftz(l), kLn2));
    }
  }
}

// delta = rowsum(dO * O): 8 threads per row, each 8 contiguous columns per 64-column chunk.
template <int D>
__global__ void fa2_delta(Problem p) {
  const int lane = threadIdx.x % 32, tr = lane % 8;
  const std::size_t row = (static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 8;  // over B*H*seq
  const bool valid = row < static_cast<std::size_t>(p.batch) * p.heads * p.seq;
  float sum = 0.f;
  if (valid) {
    const __nv_bfloat16* dorow = p.dout + row * D;
    const __nv_bfloat16* orow = p.o + row * D;
    bool started = false;
    for (int chunk = 0; chunk < D / 64; ++chunk) {
      for (int e = 0; e < 8; ++e) {
        const int col = chunk * 64 + tr * 8 + e;
        const float a = __bfloat162float(dorow[col]), b = __bfloat162float(orow[col]);
        sum = started ? __fmaf_rn(a, b, sum) : __fmul_rn(a, b);  // FA2: first product, then FFMA (fmad)
        started = true;
      }
    }
  }
  sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, 4));
  sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, 2));
  sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, 1));
  if (valid && tr == 0) p.delta[row] = sum;
}

// dK and dV for one KV block of bwd_block_n keys: each warp owns 16 keys.
template <int D>
__global__ void __launch_bounds__(kDkDvThreads<D>) fa2_backward_dkdv(Problem p) {
  constexpr int BM = kBwdBlockM<D>, BN = kBwdBlockN<D>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int bh = blockIdx.y;
  const std::size_t head = static_cast<std::size_t>(bh) * p.seq * D, rows_base = static_cast<std::size_t>(bh) * p.seq;
  const int key0 = blockIdx.x * BN + warp * kRowsPerWarp;
  std::uint32_t ka[D / 16][4], va[D / 16][4];
  load_a_rows<D>(p.k + head + static_cast<std::size_t>(key0) * D, g, t, ka);
  load_a_rows<D>(p.v + head + static_cast<std::size_t>(key0) * D, g, t, va);
  float acc_dk[D / 8][4] = {}, acc_dv[D / 8][4] = {};
  const int m_blocks = p.seq / BM;
  // flash_bwd_kernel.h: m_block_min = causal ? n_block * kBlockN / kBlockM : 0
  const int mb_min = p.causal ? (blockIdx.x * BN) / BM : 0;
  for (int mb = m_blocks - 1; mb >= mb_min; --mb) {
    for (int rc = 0; rc < BM / 16; ++rc) {  // the m-block's 16-row k-slices, in order
      const int r0 = mb * BM + rc * 16;
      const __nv_bfloat16* qrows = p.q + head + static_cast<std::size_t>(r0) * D;
      const __nv_bfloat16* dorows = p.dout + head + static_cast<std::size_t>(r0) * D;
      float pt[2][4], dst[2][4];                     // P^T and dS^T: [key g / g+8][row nt*8 + 2t + (e&1)]
      rows_times_rows<D, 2>(ka, qrows, g, t, pt);    // S^T = K Q^T
      rows_times_rows<D, 2>(va, dorows, g, t, dst);  // dP^T = V dO^T
      for (int nt = 0; nt < 2; ++nt) {
        for (int e = 0; e < 4; ++e) {
          const int key = key0 + g + 8 * (e >> 1), row = r0 + nt * 8 + 2 * t + (e & 1);
          const bool masked = p.causal && key > row;
          const float s = masked ? -INFINITY : pt[nt][e];
          const float prob = ex2_approx_ftz(__fmaf_rn(s, p.scale_log2, -lse_scaled(p.lse[rows_base + row])));
          pt[nt][e] = prob;
          dst[nt][e] = masked ? 0.f : __fmul_rn(prob, dst[nt][e] - p.delta[rows_base + row]);
        }
      }
      std::uint32_t pa[1][4], dsa[1][4];
      acc_to_a<2>(pt, pa);
      acc_to_a<2>(dst, dsa);
      acc_plus_a_times_rows<D, 1>(acc_dv, pa, dorows, g, t);  // dV += P^T dO
      acc_plus_a_times_rows<D, 1>(acc_dk, dsa, qrows, g, t);  // dK += dS^T Q
    }
  }
  for (int dt = 0; dt < D / 8; ++dt) {
    for (int e = 0; e < 4; ++e) {
      const std::size_t at = head + static_cast<std::size_t>(key0 + g + 8 * (e >> 1)) * D + dt * 8 + 2 * t + (e & 1);
      p.dk[at] = __float2bfloat16_rn(__fmul_rn(acc_dk[dt][e], p.softmax_scale));
      p.dv[at] = __float2bfloat16_rn(acc_dv[dt][e]);
    }
  }
}

// dQ for one m-block of bwd_block_m rows: each warp owns 16 query rows.
template <int D>
__global__ void __launch_bounds__(kDqThreads<D>) fa2_backward_dq(Problem p) {
  constexpr int BM = kBwdBlockM<D>, BN = kBwdBlockN<D>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int bh = blockIdx.y;
  const std::size_t head = static_cast<std::size_t>(bh) * p.seq * D, rows_base = static_cast<std::size_t>(bh) * p.seq;
  const int row0 = blockIdx.x * BM + warp * kRowsPerWarp;
  std::uint32_t qa[D / 16][4], da[D / 16][4];
  load_a_rows<D>(p.q + head + static_cast<std::size_t>(row0) * D, g, t, qa);
  load_a_rows<D>(p.dout + head + static_cast<std::size_t>(row0) * D, g, t, da);
  float lse_s[2], delta[2];
  for (int i = 0; i < 2; ++i) {
    lse_s[i] = lse_scaled(p.lse[rows_base + row0 + g + 8 * i]);
    delta[i] = p.delta[rows_base + row0 + g + 8 * i];
  }
  const int n_blocks = p.seq / BN;
  // the KV blocks whose dK/dV pass visits this m-block: kb < (m_block + 1) * bwd_block_m
  const int nb_end = p.causal ? min(n_blocks, ((blockIdx.x + 1) * BM + BN - 1) / BN) : n_blocks;
  float acc_dq[D / 8][4] = {};
  for (int nb = 0; nb < nb_end; ++nb) {
    float part[D / 8][4] = {};
    for (int kc = 0; kc < BN / 16; ++kc) {  // the KV block's 16-key k-slices, in order
      const int k0 = nb * BN + kc * 16;
      const __nv_bfloat16* krows = p.k + head + static_cast<std::size_t>(k0) * D;
      float s[2][4], ds[2][4];
      rows_times_rows<D, 2>(qa, krows, g, t, s);                                           // S = Q K^T
      rows_times_rows<D, 2>(da, p.v + head + static_cast<std::size_t>(k0) * D, g, t, ds);  // dP = dO V^T
      for (int nt = 0; nt < 2; ++nt) {
        for (int e = 0; e < 4; ++e) {
          const int i = e >> 1, row = row0 + g + 8 * i, key = k0 + nt * 8 + 2 * t + (e & 1);
          const bool masked = p.causal && key > row;
          const float prob = ex2_approx_ftz(__fmaf_rn(masked ? -INFINITY : s[nt][e], p.scale_log2, -lse_s[i]));
          ds[nt][e] = masked ? 0.f : __fmul_rn(prob, ds[nt][e] - delta[i]);
        }
      }
      std::uint32_t dsa[1][4];
      acc_to_a<2>(ds, dsa);
      acc_plus_a_times_rows<D, 1>(part, dsa, krows, g, t);  // partial dQ = dS K, from C = 0
    }
    for (int dt = 0; dt < D / 8; ++dt)
      for (int e = 0; e < 4; ++e) acc_dq[dt][e] = __fadd_rn(acc_dq[dt][e], part[dt][e]);
  }
  for (int dt = 0; dt < D / 8; ++dt) {
    for (int e = 0; e < 4; ++e) {
      const int row = row0 + g + 8 * (e >> 1), col = dt * 8 + 2 * t + (e & 1);
      const float value = __fmul_rn(acc_dq[dt][e], p.softmax_scale);
      p.dq_accum[head + static_cast<std::size_t>(row) * D + col] = value;
      p.dq[head + static_cast<std::size_t>(row) * D + col] = __float2bfloat16_rn(value);
    }
  }
}

}  // namespace
}  // namespace fb::gpu
