// gpu/fa2.cu: fb-fa2, a reference FlashAttention-2-style kernel (bf16, head dim 64/128,
// forward and backward, optionally causal) that follows the numerics of docs/DESIGN.md §6 step
// by step, so that its trace replays bit for bit under the CPU models fa2-sm80/fa2-sm90
// (attention/kernel_models.cpp, attention/engine.cpp). Run on an NVIDIA H200 (2026-11-26):
// its 18 captures in traces/hw/h200/fa2/ replay bit for bit under fa2-sm90 with the hw-sm90
// SFU set, every tensor and every per-row intermediate (ctest replay_hardware_traces).
//
// Contract:
// - Tiles: FA2's launch configuration per head dim (traces/fa2_host.hpp fa2_tile_sizes):
//   forward block_m x block_n = 128x128 (d 64), 128x64 (d 128); backward bwd_block_m x
//   bwd_block_n = 128x128 (d 64), 64x128 (d 128). What differs from FA2 is the warp
//   layout, not the tiles (see "Deviations").
// - Causal (--causal, or causal=true in the input trace's metadata): key j is visible to
//   query row i iff j <= i (seqlen_q == seqlen_k, the CPU engine's visible_keys). Masked
//   scores are -inf before the max, so P = ex2(-inf) = 0. A forward m-block visits KV
//   blocks n < ceil((m+1)*block_m / block_n) only, as FA2 does; a KV block entirely above
//   a row's diagonal gives that row max -inf, P = 0 and a rescale of 0 by 0: a numeric
//   no-op, which is why the CPU model may skip it.
// - Forward, per row: S = Q K^T by mma.sync m16n8k16 (fp32 accumulators, k-slices in
//   order); KV blocks visited last to first; row max folded previous-max first, then per
//   thread sequentially, then shfl xor 2 and xor 1; P = ex2.approx.ftz(FFMA(s,
//   scale_log2, -m*scale_log2)) with m = -inf read as 0 (Check_inf); per-thread sequential
//   fp32 row sum of the unrounded P over the thread's columns {2t, 2t+1} + 8i, quad sum
//   only at the end (xor 2, then 1); scores_scale = ex2((m_old - m_new)*scale_log2)
//   applied to acc_o, and to row_sum fused with the tile's first add (FFMA(row_sum,
//   scores_scale, p), as nvcc contracts FA2's softmax.h); P cast to bf16 RNE after the sum; acc_o += P_bf16 V by
//   the MMA; inv = (l == 0 || l != l) ? 1 : rcp.approx.ftz(l); O = bf16_rn(acc_o * inv);
//   LSE = FFMA(m, softmax_scale, lg2.approx.ftz(l) * ln2) (FA2's m*scale + __logf(l)
//   under fast math, fused as the CPU model's fma32), +inf for an empty row.
// - `--variant dynmax` (Qiu & Yao): per KV block r_m = row max, r_s = visible entries with
//   (r_m - s) * softmax_scale <= 1e-3 (in double, as the CPU model); m_block = 2*r_m if
//   r_s > 1 and r_m > 0, 0 if r_s > 1 and r_m < 0, else r_m; running max =
//   max(previous, m_block). The backward is unchanged (it uses LSE).
// - Backward (FA2 compute_dq_dk_dv as the CPU model's mma_backward_head):
//   delta = sum dO*O from bf16 dO and bf16 O, per thread 8 contiguous columns per
//   64-column chunk (first a product, then FFMA), then shfl xor 4, 2, 1.
//   P recomputed as ex2(FFMA(s, scale_log2, -LSE*log2e)); dP = dO V^T by the MMA;
//   dS = P*(dP - delta) in fp32 (0 where masked); P and dS cast to bf16 RNE.
//   dV += P^T dO and dK += dS^T Q by the MMA with the accumulators as C, per KV block
//   over m-blocks last to first (causal: down to the first m-block with visible rows),
//   16-row k-slices in order inside an m-block; dK = bf16(fp32(acc_dk*softmax_scale)),
//   dV = bf16(acc_dv).
//   dQ: per (KV block, m-block) a partial dS K by the MMA from C = 0 over the block's
//   16-key k-slices in order, added to an fp32 accumulator KV blocks first to last (FA2
//   adds the partials with atomics in hardware order; this kernel uses the CPU model's one
//   deterministic order); dQ = bf16(fp32(acc_dq*softmax_scale)), dq_accum = that fp32 value.
// - Every multiply that feeds an add outside an MMA is written __fmul_rn/__fadd_rn or
//   __fmaf_rn, so nvcc's contraction cannot change the recipe (FA2 leaves it to nvcc;
//   where nvcc contracts FA2's source differently, capture_torch.py's traces will show it).
// - Deviations from FA2, all numerically neutral by the arguments given:
//   * warps: the forward uses block_m/16 warps of 16 query rows (FA2: 4 warps, each 2 MMA
//     row tiles); the backward's dK/dV kernel bwd_block_n/16 warps of 16 keys and its dQ
//     kernel bwd_block_m/16 warps of 16 query rows (FA2: 8 warps sharing one CTA through
//     shared memory). A row's forward numerics depend on block_n only (max, l and acc_o
//     are per-row registers); which warp owns a row changes no value.
//   * S^T = K Q^T and dP^T = V dO^T are computed with K/V as the MMA's A operand (FA2: S
//     with Q as A, then P^T through shared memory): the same products in the same k order,
//     assuming the MMA's result depends only on its products and C (the emu model does).
//   * no shared memory or cp.async: operands are read from global memory (L1/L2 cached);
//     dQ is a separate deterministic kernel rather than atomics; no dropout, no ALiBi.
// - Instrumentation: for the rows given by --trace-rows (batch 0, head 0), after every KV
//   tile: the row max, the four per-thread partial row sums, P (fp32, unrounded) and
//   acc_o; NaN for tiles a causal m-block never visits.
// - Output: a safetensors trace (docs/DESIGN.md §9): q k v do o dq dk dv (BF16 [B,H,N,D]),
//   lse delta (F32 [B,H,N]), dq_accum (F32), the trace_* tensors, and full metadata
//   (traces/fa2_host.cpp fa2_trace_metadata: source cuda:<device>, causal, tiles, ...).
// - Bad arguments or shapes: one line on stderr, exit 2; CUDA errors: exit 3.
// Usage: see traces/fa2_host.cpp fa2_usage().
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu/device_common.cuh"
#include "traces/fa2_host.hpp"
#include "traces/fa2_trace.hpp"

// The device side: helpers and kernels, one translation unit with the launches below (no -rdc).
#include "gpu/fa2_kernels.cuh"

namespace fb::gpu {
namespace {

// ---- host --------------------------------------------------------------------------------
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
T* device_alloc(std::size_t n, int fill_byte) {
  T* d;
  FB_CUDA_CHECK(cudaMalloc(&d, n * sizeof(T) + 16));
  FB_CUDA_CHECK(cudaMemset(d, fill_byte, n * sizeof(T) + 16));
  return d;
}
template <typename T>
std::vector<T> host_copy(const T* d, std::size_t n) {
  std::vector<T> h(n);
  FB_CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

template <int D>
void launch(Problem& p) {
  const unsigned bh = static_cast<unsigned>(p.batch * p.heads);
  constexpr int fwd_threads = kFwdThreads<D>, dkdv_threads = kDkDvThreads<D>, dq_threads = kDqThreads<D>;
  const dim3 fwd_grid(p.seq / kBlockM<D>, bh), dkdv_grid(p.seq / kBwdBlockN<D>, bh), dq_grid(p.seq / kBwdBlockM<D>, bh);
  fa2_forward<D><<<fwd_grid, fwd_threads>>>(p);
  FB_CUDA_CHECK(cudaGetLastError());
  const std::size_t rows = static_cast<std::size_t>(p.batch) * p.heads * p.seq;
  fa2_delta<D><<<static_cast<unsigned>((rows * 8 + 127) / 128), 128>>>(p);
  FB_CUDA_CHECK(cudaGetLastError());
  fa2_backward_dkdv<D><<<dkdv_grid, dkdv_threads>>>(p);
  FB_CUDA_CHECK(cudaGetLastError());
  fa2_backward_dq<D><<<dq_grid, dq_threads>>>(p);
  FB_CUDA_CHECK(cudaGetLastError());
  FB_CUDA_CHECK(cudaDeviceSynchronize());
}

int run(Fa2Options o) {
  std::vector<std::uint16_t> q, k, v, dout;  // bf16 bits
  std::string scenario, scale_text;
  if (!o.input.empty()) {
    Fa2Inputs in = read_fa2_inputs(o.input);
    for (std::uint64_t dim : in.shape) {
      if (dim == 0 || dim > static_cast<std::uint64_t>(INT_MAX)) {
        throw Fa2UsageError(o.input + ": shape dimension " + std::to_string(dim) + " is out of range");
      }
    }
    o.batch = static_cast<int>(in.shape[0]);
    o.heads = static_cast<int>(in.shape[1]);
    o.seq = static_cast<int>(in.shape[2]);
    o.hdim = static_cast<int>(in.shape[3]);
    q = std::move(in.q);
    k = std::move(in.k);
    v = std::move(in.v);
    dout = std::move(in.dout);
    if (in.metadata.count("softmax_scale")) scale_text = in.metadata.at("softmax_scale");
    if (in.metadata.count("causal") && parse_fa2_bool(in.metadata.at("causal"), o.input + ": metadata causal")) {
      o.causal = true;
    }
    if (in.metadata.count("scenario")) scenario = in.metadata.at("scenario");
  }
  validate_fa2_problem(o);
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
  double softmax_scale = 1.0 / std::sqrt(static_cast<double>(o.hdim));
  if (!scale_text.empty()) {
    std::size_t used = 0;
    try {
      softmax_scale = std::stod(scale_text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != scale_text.size() || !(softmax_scale > 0.0) || !std::isfinite(softmax_scale)) {
      throw Fa2UsageError(o.input + ": metadata softmax_scale: expected a finite positive number, got '" + scale_text +
                          "'");
    }
  }
  Problem p{};
  p.batch = o.batch;
  p.heads = o.heads;
  p.seq = o.seq;
  p.hdim = o.hdim;
  p.causal = o.causal;
  p.dynmax = o.variant == "dynmax";
  p.softmax_scale = static_cast<float>(softmax_scale);  // FA2: params.scale_softmax is a float
  p.softmax_scale_exact = softmax_scale;
  p.scale_log2 = static_cast<float>(softmax_scale * M_LOG2E);  // in double, stored as float
  const Fa2TileSizes tiles = fa2_tile_sizes(o.hdim);
  const int n_blocks = o.seq / tiles.block_n;
  p.n_trace_rows = 0;
  for (int r : o.trace_rows) p.trace_rows[p.n_trace_rows++] = r;  // validated: in range, at most kFa2MaxTraceRows
  const std::size_t rows = static_cast<std::size_t>(o.batch) * o.heads * o.seq;
  const std::size_t tr = static_cast<std::size_t>(std::max(p.n_trace_rows, 1)) * n_blocks;
  p.q = reinterpret_cast<const __nv_bfloat16*>(device_copy(q));
  p.k = reinterpret_cast<const __nv_bfloat16*>(device_copy(k));
  p.v = reinterpret_cast<const __nv_bfloat16*>(device_copy(v));
  p.dout = reinterpret_cast<const __nv_bfloat16*>(device_copy(dout));
  p.o = device_alloc<__nv_bfloat16>(n, 0);
  p.dq = device_alloc<__nv_bfloat16>(n, 0);
  p.dk = device_alloc<__nv_bfloat16>(n, 0);
  p.dv = device_alloc<__nv_bfloat16>(n, 0);
  p.dq_accum = device_alloc<float>(n, 0);
  p.lse = device_alloc<float>(rows, 0);
  p.delta = device_alloc<float>(rows, 0);
  // 0xff bytes are a NaN in fp32: trace slots for KV blocks a causal m-block skips stay NaN
  p.trace_m = device_alloc<float>(tr, 0xff);
  p.trace_l = device_alloc<float>(tr * 4, 0xff);
  p.trace_p = device_alloc<float>(tr * tiles.block_n, 0xff);
  p.trace_acc_o = device_alloc<float>(tr * o.hdim, 0xff);
  if (o.hdim == 64)
    launch<64>(p);
  else
    launch<128>(p);

  Fa2DeviceInfo info;
  int device = 0;
  cudaDeviceProp prop;
  FB_CUDA_CHECK(cudaGetDevice(&device));
  FB_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  FB_CUDA_CHECK(cudaDriverGetVersion(&info.driver));
  FB_CUDA_CHECK(cudaRuntimeGetVersion(&info.runtime));
  info.name = prop.name;
  info.major = prop.major;
  info.minor = prop.minor;
  const std::vector<std::uint64_t> shape = {static_cast<std::uint64_t>(o.batch), static_cast<std::uint64_t>(o.heads),
                                            static_cast<std::uint64_t>(o.seq), static_cast<std::uint64_t>(o.hdim)};
  const std::vector<std::uint64_t> row_shape(shape.begin(), shape.end() - 1);
  std::vector<Fa2Tensor> tensors;
  tensors.push_back(make_tensor("q", "BF16", shape, q.data(), n * 2));
  tensors.push_back(make_tensor("k", "BF16", shape, k.data(), n * 2));
  tensors.push_back(make_tensor("v", "BF16", shape, v.data(), n * 2));
  tensors.push_back(make_tensor("do", "BF16", shape, dout.data(), n * 2));
  const auto o_h = host_copy(reinterpret_cast<std::uint16_t*>(p.o), n);
  const auto dq_h = host_copy(reinterpret_cast<std::uint16_t*>(p.dq), n);
  const auto dk_h = host_copy(reinterpret_cast<std::uint16_t*>(p.dk), n);
  const auto dv_h = host_copy(reinterpret_cast<std::uint16_t*>(p.dv), n);
  const auto dqa_h = host_copy(p.dq_accum, n);
  const auto lse_h = host_copy(p.lse, rows);
  const auto delta_h = host_copy(p.delta, rows);
  tensors.push_back(make_tensor("o", "BF16", shape, o_h.data(), n * 2));
  tensors.push_back(make_tensor("lse", "F32", row_shape, lse_h.data(), rows * 4));
  tensors.push_back(make_tensor("delta", "F32", row_shape, delta_h.data(), rows * 4));
  tensors.push_back(make_tensor("dq", "BF16", shape, dq_h.data(), n * 2));
  tensors.push_back(make_tensor("dk", "BF16", shape, dk_h.data(), n * 2));
  tensors.push_back(make_tensor("dv", "BF16", shape, dv_h.data(), n * 2));
  tensors.push_back(make_tensor("dq_accum", "F32", shape, dqa_h.data(), n * 4));
  if (p.n_trace_rows > 0) {
    const std::uint64_t r = static_cast<std::uint64_t>(p.n_trace_rows), b = static_cast<std::uint64_t>(n_blocks),
                        bn = static_cast<std::uint64_t>(tiles.block_n);
    const std::vector<std::int32_t> rows_traced(p.trace_rows, p.trace_rows + p.n_trace_rows);
    tensors.push_back(make_tensor("trace_rows", "I32", {r}, rows_traced.data(), r * 4));
    const auto m_h = host_copy(p.trace_m, r * b), l_h = host_copy(p.trace_l, r * b * 4),
               p_h = host_copy(p.trace_p, r * b * bn), a_h = host_copy(p.trace_acc_o, r * b * o.hdim);
    tensors.push_back(make_tensor("trace_m", "F32", {r, b}, m_h.data(), m_h.size() * 4));
    tensors.push_back(make_tensor("trace_l_partial", "F32", {r, b, 4}, l_h.data(), l_h.size() * 4));
    tensors.push_back(make_tensor("trace_p", "F32", {r, b, bn}, p_h.data(), p_h.size() * 4));
    tensors.push_back(
        make_tensor("trace_acc_o", "F32", {r, b, static_cast<std::uint64_t>(o.hdim)}, a_h.data(), a_h.size() * 4));
  }
  Fa2RunFacts facts;
  facts.options = o;
  facts.softmax_scale = softmax_scale;
  facts.scale_log2 = p.scale_log2;
  facts.trace_rows = o.trace_rows;
  facts.scenario = scenario;
  write_fa2_trace(o.out, tensors, fa2_trace_metadata(facts, info));
  for (void* ptr : {(void*)p.q, (void*)p.k, (void*)p.v, (void*)p.dout, (void*)p.o, (void*)p.dq, (void*)p.dk,
                    (void*)p.dv, (void*)p.dq_accum, (void*)p.lse, (void*)p.delta, (void*)p.trace_m, (void*)p.trace_l,
                    (void*)p.trace_p, (void*)p.trace_acc_o})
    FB_CUDA_CHECK(cudaFree(ptr));
  std::printf("wrote %s (%s, B=%d H=%d N=%d D=%d, %s%s; NOT a validated kernel until replayed)\n", o.out.c_str(),
              prop.name, o.batch, o.heads, o.seq, o.hdim, o.variant.c_str(), o.causal ? ", causal" : "");
  return 0;
}

}  // namespace
}  // namespace fb::gpu

int main(int argc, char** argv) {
  fb::gpu::Fa2Options o;
  try {
    o = fb::gpu::parse_fa2_args(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n%s\n", e.what(), fb::gpu::fa2_usage());
    return 2;
  }
  try {
    return fb::gpu::run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
