// gpu/fa2.cu: fb-fa2, a reference FlashAttention-2-style kernel (bf16, head dim 64/128)
// that follows the numerics of DESIGN.md §6 step by step, plus its trace writer.
//
// Contract:
// - Forward, per row block: S = Q K^T by mma.sync m16n8k16 (fp32 accumulators, k-slices
//   in order); KV blocks visited last to first; row max folded previous-max first, then
//   per thread sequentially, then shfl xor 2 and xor 1; P = ex2.approx.ftz(FFMA(s,
//   scale_log2, -m*scale_log2)); per-thread sequential fp32 row sum of the unrounded P,
//   quad sum only at the end; scores_scale = ex2((m_old - m_new)*scale_log2) applied to
//   row_sum and acc_o; P cast to bf16 RNE after the sum; acc_o += P_bf16 V by the MMA;
//   inv = (l == 0 || l != l) ? 1 : rcp.approx.ftz(l); O = bf16_rn(acc_o * inv);
//   LSE = m*softmax_scale + lg2.approx.ftz(l)*ln2 (what __logf is under fast math).
// - `--variant dynmax` (Qiu & Yao): per KV block r_m = row max, r_s = entries within 1e-3
//   of r_m; m_block = beta*r_m if r_s > 1 and r_m > 0, 0 if r_s > 1 and r_m < 0, else r_m
//   (beta = 2); the running max is max(previous, m_block).
// - Backward: delta = sum dO*O from bf16 dO and bf16 O, per thread 8 contiguous columns
//   per 64-column chunk (first a product, then FFMA), then shfl xor 4, 2, 1; P recomputed
//   as ex2(FFMA(s, scale_log2, -LSE*log2e)); dP = dO V^T by the MMA; dS = bf16_rn(P*(dP -
//   delta)); dQ accumulated in fp32 by the MMA over KV blocks (here first to last, one
//   deterministic order; FA2 adds per-KV-block dQ with atomics), times softmax_scale.
//   dK and dV are not computed.
// - Tiling (a DEVIATION from FA2's launch configs, which use larger tiles per warp):
//   one warp owns 16 query rows, 4 warps per CTA (block_m = 64), block_n = 64. The
//   per-thread fold orders above therefore cover 16 columns per thread per KV block.
// - Instrumentation: for the rows given by --trace-rows, after every KV tile: the row
//   max, the four per-thread partial row sums, P (fp32, unrounded) and acc_o.
// - Output: a safetensors trace (DESIGN.md §9) with __metadata__ source cuda:<device>.
// Usage: fb-fa2 --out FILE [--input FILE.safetensors | --batch B --heads H --seq N
//        --hdim D --seed S] [--variant standard|dynmax] [--trace-rows r0,r1,...]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gpu/device_common.cuh"
#include "gpu/fa2_trace.hpp"

namespace fb::gpu {
namespace {

constexpr int kWarps = 4, kRowsPerWarp = 16, kBlockM = kWarps * kRowsPerWarp, kBlockN = 64;
constexpr int kMaxTraceRows = 8;
constexpr float kLn2 = 0.693147182f;        // the constant __logf multiplies lg2 by
constexpr float kLog2e = 1.44269504f;        // float(M_LOG2E)
constexpr float kDynmaxBeta = 2.f, kDynmaxTol = 1e-3f;

struct Problem {
  int batch, heads, seq, hdim;
  float softmax_scale, scale_log2;
  bool dynmax;
  const __nv_bfloat16 *q, *k, *v, *dout;
  __nv_bfloat16* o;
  float *lse, *delta, *dq_accum;
  __nv_bfloat16* dq;
  // instrumentation
  int trace_rows[kMaxTraceRows];
  int n_trace_rows;
  float *trace_m, *trace_l, *trace_p, *trace_acc_o;  // [row][kv block][...]
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
  x = x + __shfl_xor_sync(0xffffffffu, x, 2);
  return x + __shfl_xor_sync(0xffffffffu, x, 1);
}

// S (16 x 64) = Q K^T for one warp: acc[nt][0..3] is n8 tile nt of the accumulator layout.
template <int D>
__device__ void score_tile(const std::uint32_t (&qa)[D / 16][4], const __nv_bfloat16* kbase, int g, int t,
                           float (&acc)[kBlockN / 8][4]) {
  for (int nt = 0; nt < kBlockN / 8; ++nt)
    for (int i = 0; i < 4; ++i) acc[nt][i] = 0.f;
  for (int ks = 0; ks < D / 16; ++ks) {
    for (int nt = 0; nt < kBlockN / 8; ++nt) {
      const __nv_bfloat16* krow = kbase + static_cast<std::size_t>(nt * 8 + g) * D + ks * 16;
      const std::uint32_t b[2] = {pack_raw(krow + 2 * t, krow + 2 * t + 1), pack_raw(krow + 2 * t + 8, krow + 2 * t + 9)};
      mma_m16n8k16_bf16_f32(acc[nt], qa[ks], b, acc[nt]);
    }
  }
}

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

// The fp32 accumulator tile (16 x 64) as bf16 A fragments for the next MMA (RNE).
__device__ __forceinline__ void acc_to_a(const float (&acc)[kBlockN / 8][4], std::uint32_t (&a)[kBlockN / 16][4]) {
  for (int kk = 0; kk < kBlockN / 16; ++kk) {
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

template <int D>
__global__ void __launch_bounds__(kWarps * 32) fa2_forward(Problem p) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int bh = blockIdx.y;
  const std::size_t head = static_cast<std::size_t>(bh) * p.seq * D;
  const int row0 = blockIdx.x * kBlockM + warp * kRowsPerWarp;
  const int n_blocks = p.seq / kBlockN;
  std::uint32_t qa[D / 16][4];
  load_a_rows<D>(p.q + head + static_cast<std::size_t>(row0) * D, g, t, qa);
  float acc_o[D / 8][4] = {};
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
  const int slot[2] = {bh == 0 ? trace_slot(p, row0 + g) : -1, bh == 0 ? trace_slot(p, row0 + g + 8) : -1};
  for (int nb = n_blocks - 1; nb >= 0; --nb) {  // last KV block first
    const bool first = nb == n_blocks - 1;
    float s[kBlockN / 8][4];
    score_tile<D>(qa, p.k + head + static_cast<std::size_t>(nb) * kBlockN * D, g, t, s);
    for (int i = 0; i < 2; ++i) {  // the thread's two rows: g (i = 0) and g + 8 (i = 1)
      float m = first ? s[0][2 * i] : row_max[i];
      for (int nt = 0; nt < kBlockN / 8; ++nt)
        for (int j = 0; j < 2; ++j)
          if (!first || nt || j) m = fmaxf(m, s[nt][2 * i + j]);
      m = quad_max(m);
      if (p.dynmax) {
        float rm = s[0][2 * i];
        for (int nt = 0; nt < kBlockN / 8; ++nt)
          for (int j = 0; j < 2; ++j) rm = fmaxf(rm, s[nt][2 * i + j]);
        rm = quad_max(rm);
        float count = 0.f;
        for (int nt = 0; nt < kBlockN / 8; ++nt)
          for (int j = 0; j < 2; ++j) count += fabsf(s[nt][2 * i + j] - rm) <= kDynmaxTol ? 1.f : 0.f;
        count = quad_sum(count);
        const float m_block = (count > 1.f && rm > 0.f) ? kDynmaxBeta * rm : (count > 1.f && rm < 0.f) ? 0.f : rm;
        m = first ? m_block : fmaxf(row_max[i], m_block);
      }
      if (!first) {
        // -inf - -inf must not happen: a fully masked max reads as 0 (FA2's Check_inf).
        const float m_cur = m == -INFINITY ? 0.f : m;
        const float scores_scale = ex2_approx_ftz((row_max[i] - m_cur) * p.scale_log2);
        row_sum[i] *= scores_scale;
        for (int dt = 0; dt < D / 8; ++dt) {
          acc_o[dt][2 * i] *= scores_scale;
          acc_o[dt][2 * i + 1] *= scores_scale;
        }
      }
      row_max[i] = m;
      const float max_scaled = m == -INFINITY ? 0.f : m * p.scale_log2;
      for (int nt = 0; nt < kBlockN / 8; ++nt)
        for (int j = 0; j < 2; ++j) s[nt][2 * i + j] = ex2_approx_ftz(__fmaf_rn(s[nt][2 * i + j], p.scale_log2, -max_scaled));
      float sum = first ? s[0][2 * i] : row_sum[i] + s[0][2 * i];
      for (int nt = 0; nt < kBlockN / 8; ++nt)
        for (int j = 0; j < 2; ++j)
          if (nt || j) sum += s[nt][2 * i + j];
      row_sum[i] = sum;
    }
    std::uint32_t pa[kBlockN / 16][4];
    acc_to_a(s, pa);  // P rounded to bf16 only now, after the row sum took the fp32 values
    const __nv_bfloat16* vbase = p.v + head + static_cast<std::size_t>(nb) * kBlockN * D;
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      for (int dt = 0; dt < D / 8; ++dt) {
        const __nv_bfloat16* v0 = vbase + static_cast<std::size_t>(kk * 16 + 2 * t) * D + dt * 8 + g;
        const std::uint32_t b[2] = {pack_raw(v0, v0 + D), pack_raw(v0 + 8 * D, v0 + 9 * D)};
        mma_m16n8k16_bf16_f32(acc_o[dt], pa[kk], b, acc_o[dt]);
      }
    }
    for (int i = 0; i < 2; ++i) {  // instrumentation (reads only)
      if (slot[i] < 0) continue;
      const std::size_t at = static_cast<std::size_t>(slot[i]) * n_blocks + nb;
      if (t == 0) p.trace_m[at] = row_max[i];
      p.trace_l[at * 4 + t] = row_sum[i];
      for (int nt = 0; nt < kBlockN / 8; ++nt)
        for (int j = 0; j < 2; ++j) p.trace_p[at * kBlockN + nt * 8 + 2 * t + j] = s[nt][2 * i + j];
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
      const std::uint32_t packed = pack_bf16(acc_o[dt][2 * i] * inv, acc_o[dt][2 * i + 1] * inv);
      std::memcpy(p.o + head + static_cast<std::size_t>(row) * D + dt * 8 + 2 * t, &packed, 4);
    }
    if (t == 0) {
      p.lse[static_cast<std::size_t>(bh) * p.seq + row] =
          empty ? INFINITY : row_max[i] * p.softmax_scale + lg2_approx_ftz(l) * kLn2;
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
        sum = started ? __fmaf_rn(a, b, sum) : a * b;  // FA2: first product, then FFMA (fmad)
        started = true;
      }
    }
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 4);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  if (valid && tr == 0) p.delta[row] = sum;
}

template <int D>
__global__ void __launch_bounds__(kWarps * 32) fa2_backward_dq(Problem p) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int bh = blockIdx.y;
  const std::size_t head = static_cast<std::size_t>(bh) * p.seq * D;
  const int row0 = blockIdx.x * kBlockM + warp * kRowsPerWarp;
  std::uint32_t qa[D / 16][4], da[D / 16][4];
  load_a_rows<D>(p.q + head + static_cast<std::size_t>(row0) * D, g, t, qa);
  load_a_rows<D>(p.dout + head + static_cast<std::size_t>(row0) * D, g, t, da);
  float lse_scaled[2], delta[2];
  for (int i = 0; i < 2; ++i) {
    const std::size_t r = static_cast<std::size_t>(bh) * p.seq + row0 + g + 8 * i;
    lse_scaled[i] = p.lse[r] == -INFINITY ? 0.f : p.lse[r] * kLog2e;
    delta[i] = p.delta[r];
  }
  float acc_dq[D / 8][4] = {};
  for (int nb = 0; nb < p.seq / kBlockN; ++nb) {
    const __nv_bfloat16* kbase = p.k + head + static_cast<std::size_t>(nb) * kBlockN * D;
    const __nv_bfloat16* vbase = p.v + head + static_cast<std::size_t>(nb) * kBlockN * D;
    float s[kBlockN / 8][4], dp[kBlockN / 8][4];
    score_tile<D>(qa, kbase, g, t, s);
    score_tile<D>(da, vbase, g, t, dp);  // dP = dO V^T has the same shape as Q K^T
    for (int nt = 0; nt < kBlockN / 8; ++nt) {
      for (int e = 0; e < 4; ++e) {
        const int i = e / 2;
        const float prob = ex2_approx_ftz(__fmaf_rn(s[nt][e], p.scale_log2, -lse_scaled[i]));
        s[nt][e] = prob * (dp[nt][e] - delta[i]);  // dS before the bf16 cast
      }
    }
    std::uint32_t dsa[kBlockN / 16][4];
    acc_to_a(s, dsa);
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      for (int dt = 0; dt < D / 8; ++dt) {
        const __nv_bfloat16* k0 = kbase + static_cast<std::size_t>(kk * 16 + 2 * t) * D + dt * 8 + g;
        const std::uint32_t b[2] = {pack_raw(k0, k0 + D), pack_raw(k0 + 8 * D, k0 + 9 * D)};
        mma_m16n8k16_bf16_f32(acc_dq[dt], dsa[kk], b, acc_dq[dt]);
      }
    }
  }
  for (int dt = 0; dt < D / 8; ++dt) {
    for (int e = 0; e < 4; ++e) {
      const int row = row0 + g + 8 * (e / 2), col = dt * 8 + 2 * t + (e & 1);
      const float value = acc_dq[dt][e] * p.softmax_scale;
      p.dq_accum[head + static_cast<std::size_t>(row) * D + col] = value;
      p.dq[head + static_cast<std::size_t>(row) * D + col] = __float2bfloat16_rn(value);
    }
  }
}

// ---- host --------------------------------------------------------------------------------
struct Options {
  std::string out, input, variant = "standard";
  int batch = 1, heads = 1, seq = 256, hdim = 64;
  std::uint64_t seed = 1;
  std::vector<int> trace_rows = {0, 1};
};

Fa2Tensor make_tensor(const std::string& name, const char* dtype, std::vector<std::uint64_t> shape, const void* data,
                      std::size_t bytes) {
  Fa2Tensor t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.bytes.assign(static_cast<const std::uint8_t*>(data), static_cast<const std::uint8_t*>(data) + bytes);
  return t;
}

template <typename T>
T* device_copy(const std::vector<T>& host) {
  T* d;
  FB_CUDA_CHECK(cudaMalloc(&d, host.size() * sizeof(T) + 16));
  FB_CUDA_CHECK(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}
template <typename T>
std::vector<T> host_copy(const T* d, std::size_t n) {
  std::vector<T> h(n);
  FB_CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

std::string float_text(float f) {
  char buf[48];
  std::uint32_t b;
  std::memcpy(&b, &f, 4);
  std::snprintf(buf, sizeof buf, "%.9g", f);
  return buf;
}

template <int D>
void launch(Problem& p) {
  const dim3 grid(p.seq / kBlockM, p.batch * p.heads);
  fa2_forward<D><<<grid, kWarps * 32>>>(p);
  FB_CUDA_CHECK(cudaGetLastError());
  const std::size_t rows = static_cast<std::size_t>(p.batch) * p.heads * p.seq;
  fa2_delta<D><<<static_cast<unsigned>((rows * 8 + 127) / 128), 128>>>(p);
  FB_CUDA_CHECK(cudaGetLastError());
  fa2_backward_dq<D><<<grid, kWarps * 32>>>(p);
  FB_CUDA_CHECK(cudaGetLastError());
  FB_CUDA_CHECK(cudaDeviceSynchronize());
}

int run(Options o) {
  std::vector<std::uint16_t> q, k, v, dout;  // bf16 bits
  std::map<std::string, std::string> input_meta;
  float softmax_scale = 0.f;
  if (!o.input.empty()) {
    Fa2Inputs in = read_fa2_inputs(o.input);
    o.batch = static_cast<int>(in.shape[0]);
    o.heads = static_cast<int>(in.shape[1]);
    o.seq = static_cast<int>(in.shape[2]);
    o.hdim = static_cast<int>(in.shape[3]);
    q = std::move(in.q);
    k = std::move(in.k);
    v = std::move(in.v);
    dout = std::move(in.dout);
    input_meta = in.metadata;
    if (input_meta.count("softmax_scale")) softmax_scale = std::stof(input_meta.at("softmax_scale"));
  }
  if (o.hdim != 64 && o.hdim != 128) throw std::runtime_error("head dim must be 64 or 128, not " + std::to_string(o.hdim));
  if (o.seq <= 0 || o.seq % kBlockM != 0) throw std::runtime_error("sequence length must be a positive multiple of 64");
  const std::size_t n = static_cast<std::size_t>(o.batch) * o.heads * o.seq * o.hdim;
  if (o.input.empty()) {
    std::mt19937_64 rng(o.seed);
    std::normal_distribution<float> normal(0.f, 1.f);
    for (auto* t : {&q, &k, &v, &dout}) {
      t->resize(n);
      for (auto& x : *t) {
        const __nv_bfloat16 b = __float2bfloat16_rn(normal(rng));
        std::memcpy(&x, &b, 2);
      }
    }
  }
  if (softmax_scale == 0.f) softmax_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(o.hdim)));
  Problem p{};
  p.batch = o.batch;
  p.heads = o.heads;
  p.seq = o.seq;
  p.hdim = o.hdim;
  p.softmax_scale = softmax_scale;
  p.scale_log2 = static_cast<float>(static_cast<double>(softmax_scale) * M_LOG2E);  // in double, stored as float
  p.dynmax = o.variant == "dynmax";
  const int n_blocks = o.seq / kBlockN;
  p.n_trace_rows = 0;
  for (int r : o.trace_rows) {
    if (r >= 0 && r < o.seq && p.n_trace_rows < kMaxTraceRows) p.trace_rows[p.n_trace_rows++] = r;
  }
  const std::size_t rows = static_cast<std::size_t>(o.batch) * o.heads * o.seq;
  const std::size_t tr = static_cast<std::size_t>(std::max(p.n_trace_rows, 1)) * n_blocks;
  p.q = reinterpret_cast<const __nv_bfloat16*>(device_copy(q));
  p.k = reinterpret_cast<const __nv_bfloat16*>(device_copy(k));
  p.v = reinterpret_cast<const __nv_bfloat16*>(device_copy(v));
  p.dout = reinterpret_cast<const __nv_bfloat16*>(device_copy(dout));
  FB_CUDA_CHECK(cudaMalloc(&p.o, n * 2));
  FB_CUDA_CHECK(cudaMalloc(&p.dq, n * 2));
  FB_CUDA_CHECK(cudaMalloc(&p.dq_accum, n * 4));
  FB_CUDA_CHECK(cudaMalloc(&p.lse, rows * 4));
  FB_CUDA_CHECK(cudaMalloc(&p.delta, rows * 4));
  FB_CUDA_CHECK(cudaMalloc(&p.trace_m, tr * 4));
  FB_CUDA_CHECK(cudaMalloc(&p.trace_l, tr * 4 * 4));
  FB_CUDA_CHECK(cudaMalloc(&p.trace_p, tr * kBlockN * 4));
  FB_CUDA_CHECK(cudaMalloc(&p.trace_acc_o, tr * o.hdim * 4));
  if (o.hdim == 64) launch<64>(p);
  else launch<128>(p);

  int device = 0, driver = 0, runtime = 0;
  cudaDeviceProp prop;
  FB_CUDA_CHECK(cudaGetDevice(&device));
  FB_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  FB_CUDA_CHECK(cudaDriverGetVersion(&driver));
  FB_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  const std::vector<std::uint64_t> shape = {static_cast<std::uint64_t>(o.batch), static_cast<std::uint64_t>(o.heads),
                                            static_cast<std::uint64_t>(o.seq), static_cast<std::uint64_t>(o.hdim)};
  const std::vector<std::uint64_t> row_shape(shape.begin(), shape.end() - 1);
  std::vector<Fa2Tensor> tensors;
  std::map<std::string, std::string> metadata;
  tensors.push_back(make_tensor("q", "BF16", shape, q.data(), n * 2));
  tensors.push_back(make_tensor("k", "BF16", shape, k.data(), n * 2));
  tensors.push_back(make_tensor("v", "BF16", shape, v.data(), n * 2));
  tensors.push_back(make_tensor("do", "BF16", shape, dout.data(), n * 2));
  const auto o_h = host_copy(reinterpret_cast<std::uint16_t*>(p.o), n);
  const auto dq_h = host_copy(reinterpret_cast<std::uint16_t*>(p.dq), n);
  const auto dqa_h = host_copy(p.dq_accum, n);
  const auto lse_h = host_copy(p.lse, rows);
  const auto delta_h = host_copy(p.delta, rows);
  tensors.push_back(make_tensor("o", "BF16", shape, o_h.data(), n * 2));
  tensors.push_back(make_tensor("lse", "F32", row_shape, lse_h.data(), rows * 4));
  tensors.push_back(make_tensor("delta", "F32", row_shape, delta_h.data(), rows * 4));
  tensors.push_back(make_tensor("dq", "BF16", shape, dq_h.data(), n * 2));
  tensors.push_back(make_tensor("dq_accum", "F32", shape, dqa_h.data(), n * 4));
  if (p.n_trace_rows > 0) {
    const std::uint64_t r = static_cast<std::uint64_t>(p.n_trace_rows), b = static_cast<std::uint64_t>(n_blocks);
    const std::vector<std::int32_t> rows_traced(p.trace_rows, p.trace_rows + p.n_trace_rows);
    tensors.push_back(make_tensor("trace_rows", "I32", {r}, rows_traced.data(), r * 4));
    const auto m_h = host_copy(p.trace_m, r * b), l_h = host_copy(p.trace_l, r * b * 4),
               p_h = host_copy(p.trace_p, r * b * kBlockN), a_h = host_copy(p.trace_acc_o, r * b * o.hdim);
    tensors.push_back(make_tensor("trace_m", "F32", {r, b}, m_h.data(), m_h.size() * 4));
    tensors.push_back(make_tensor("trace_l_partial", "F32", {r, b, 4}, l_h.data(), l_h.size() * 4));
    tensors.push_back(make_tensor("trace_p", "F32", {r, b, kBlockN}, p_h.data(), p_h.size() * 4));
    tensors.push_back(make_tensor("trace_acc_o", "F32", {r, b, static_cast<std::uint64_t>(o.hdim)}, a_h.data(),
                                      a_h.size() * 4));
  }
  std::ostringstream rows_text;
  for (int i = 0; i < p.n_trace_rows; ++i) rows_text << (i ? "," : "") << p.trace_rows[i];
  metadata = {
      {"source", std::string("cuda:") + prop.name},
      {"device", prop.name},
      {"compute_capability", std::to_string(prop.major) + "." + std::to_string(prop.minor)},
      {"driver", std::to_string(driver)},
      {"cuda_runtime", std::to_string(runtime)},
      {"kernel", std::string("fb-fa2 reference forward+backward(dq)") + (p.dynmax ? " +dynmax" : "")},
      {"model", std::string(prop.major >= 9 ? "fa2-sm90" : "fa2-sm80") + (p.dynmax ? "+dynmax" : "")},
      {"variant", o.variant},
      {"softmax_scale", float_text(softmax_scale)},
      {"scale_log2", float_text(p.scale_log2)},
      {"causal", "false"},
      {"dtype", "bf16"},
      {"block_m", std::to_string(kBlockM)},
      {"block_n", std::to_string(kBlockN)},
      {"rows_per_warp", std::to_string(kRowsPerWarp)},
      {"head_dim", std::to_string(o.hdim)},
      {"kv_order_forward", "last_to_first"},
      {"kv_order_dq", "first_to_last"},
      {"trace_rows", rows_text.str()},
      {"trace_layout", "trace_*[slot][kv_block index][...] for batch 0 head 0; trace_l_partial holds the 4 per-thread partial row sums (quad lanes t=0..3)"},
      {"dynmax_beta", "2"},
      {"dynmax_tolerance", "1e-3"},
  };
  if (input_meta.count("scenario")) metadata["scenario"] = input_meta.at("scenario");
  if (!o.input.empty()) metadata["input_trace"] = o.input;
  write_fa2_trace(o.out, tensors, metadata);
  for (void* ptr : {(void*)p.q, (void*)p.k, (void*)p.v, (void*)p.dout, (void*)p.o, (void*)p.dq, (void*)p.dq_accum,
                    (void*)p.lse, (void*)p.delta, (void*)p.trace_m, (void*)p.trace_l, (void*)p.trace_p, (void*)p.trace_acc_o})
    FB_CUDA_CHECK(cudaFree(ptr));
  std::printf("wrote %s (%s, B=%d H=%d N=%d D=%d, %s)\n", o.out.c_str(), prop.name, o.batch, o.heads, o.seq, o.hdim,
              o.variant.c_str());
  return 0;
}

}  // namespace
}  // namespace fb::gpu

int main(int argc, char** argv) {
  fb::gpu::Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--out" && has_value) o.out = argv[++i];
    else if (arg == "--input" && has_value) o.input = argv[++i];
    else if (arg == "--variant" && has_value) o.variant = argv[++i];
    else if (arg == "--batch" && has_value) o.batch = std::atoi(argv[++i]);
    else if (arg == "--heads" && has_value) o.heads = std::atoi(argv[++i]);
    else if (arg == "--seq" && has_value) o.seq = std::atoi(argv[++i]);
    else if (arg == "--hdim" && has_value) o.hdim = std::atoi(argv[++i]);
    else if (arg == "--seed" && has_value) o.seed = std::strtoull(argv[++i], nullptr, 10);
    else if (arg == "--trace-rows" && has_value) {
      o.trace_rows.clear();
      std::stringstream s(argv[++i]);
      std::string item;
      while (std::getline(s, item, ',')) o.trace_rows.push_back(std::atoi(item.c_str()));
    } else {
      std::fprintf(stderr,
                   "usage: fb-fa2 --out FILE [--input FILE.safetensors | --batch B --heads H --seq N --hdim 64|128 "
                   "--seed S] [--variant standard|dynmax] [--trace-rows r0,r1,...]\n");
      return 2;
    }
  }
  if (o.out.empty() || (o.variant != "standard" && o.variant != "dynmax") || o.batch < 1 || o.heads < 1) {
    std::fprintf(stderr, "error: --out is required; --variant is standard or dynmax; batch and heads >= 1\n");
    return 2;
  }
  try {
    return fb::gpu::run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
