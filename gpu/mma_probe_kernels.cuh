// gpu/mma_probe_kernels.cuh: fb-mma-probe's instruction forms (their PTX, shapes and formats)
// and the device kernels that run each form's tiles, single steps or chained.
// Contract: it includes what it uses, so that it parses alone (clangd, an IDE). gpu/mma_probe.cu
// includes it once (through gpu/mma_probe_inputs.cuh as well): its kernels stay in the one
// translation unit with their launches (no relocatable device code), hence the anonymous
// namespace.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "formats/format.hpp"
#include "gpu/device_common.cuh"

namespace fb::gpu {
namespace {

enum Form : int {
  kMmaBf16F32,
  kMmaF16F32,
  kMmaF16F16,
  kMmaTf32F32,
  kWgmmaBf16,
  kWgmmaF16,
  kWgmmaE4m3,
  kWgmmaE5m2,
  kFormCount
};

struct FormInfo {
  const char* ptx;
  int m, k;
  Format input, cd;
  bool wgmma;
};
const FormInfo kForms[kFormCount] = {
    {"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", 16, 16, formats::bf16, formats::fp32, false},
    {"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", 16, 16, formats::fp16, formats::fp32, false},
    {"mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16", 16, 16, formats::fp16, formats::fp16, false},
    {"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", 16, 8, formats::tf32, formats::fp32, false},
    {"wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16", 64, 16, formats::bf16, formats::fp32, true},
    {"wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16", 64, 16, formats::fp16, formats::fp32, true},
    {"wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3", 64, 32, formats::e4m3, formats::fp32, true},
    {"wgmma.mma_async.sync.aligned.m64n8k32.f32.e5m2.e5m2", 64, 32, formats::e5m2, formats::fp32, true},
};
constexpr int kN = 8;  // every form probes an n8 tile

// ---- device side ----------------------------------------------------------------------
// Tiles are stored as element arrays of container bits: A[m][k], Bt[n][k], C[m][n], D[m][n].
// kChain (the `chained` batch): D2[m][n] = mma(A, B, D) as a kernel's K loop does it.
__device__ __forceinline__ std::uint32_t pack2(std::uint32_t lo, std::uint32_t hi) {
  return (lo & 0xffffu) | (hi << 16);
}

template <int F, bool kChain>
__global__ void mma_kernel(const std::uint32_t* A, const std::uint32_t* Bt, const std::uint32_t* C, std::uint32_t* D,
                           std::uint32_t* D2) {
  constexpr int M = 16, K = F == kMmaTf32F32 ? 8 : 16;
  const int tile = blockIdx.x, lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  A += tile * M * K;
  Bt += tile * kN * K;
  C += tile * M * kN;
  D += tile * M * kN;
  if constexpr (kChain) D2 += tile * M * kN;
  auto a_at = [&](int r, int k) { return A[r * K + k]; };
  auto b_at = [&](int k, int n) { return Bt[n * K + k]; };
  std::uint32_t a[4], b[2];
  if constexpr (F == kMmaTf32F32) {
    a[0] = a_at(g, t);
    a[1] = a_at(g + 8, t);
    a[2] = a_at(g, t + 4);
    a[3] = a_at(g + 8, t + 4);
    b[0] = b_at(t, g);
    b[1] = b_at(t + 4, g);
  } else {
    a[0] = pack2(a_at(g, 2 * t), a_at(g, 2 * t + 1));
    a[1] = pack2(a_at(g + 8, 2 * t), a_at(g + 8, 2 * t + 1));
    a[2] = pack2(a_at(g, 2 * t + 8), a_at(g, 2 * t + 9));
    a[3] = pack2(a_at(g + 8, 2 * t + 8), a_at(g + 8, 2 * t + 9));
    b[0] = pack2(b_at(2 * t, g), b_at(2 * t + 1, g));
    b[1] = pack2(b_at(2 * t + 8, g), b_at(2 * t + 9, g));
  }
  const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
  if constexpr (F == kMmaF16F16) {
    std::uint32_t c[2] = {pack2(C[g * kN + 2 * t], C[g * kN + 2 * t + 1]),
                          pack2(C[(g + 8) * kN + 2 * t], C[(g + 8) * kN + 2 * t + 1])};
    std::uint32_t d[2];
    mma_m16n8k16_f16_f16(d, a, b, c);
    for (int i = 0; i < 4; ++i) D[rows[i] * kN + cols[i]] = (d[i / 2] >> (16 * (i & 1))) & 0xffffu;
    if constexpr (kChain) {  // the f16x2 accumulator registers fed straight back as C
      std::uint32_t d2[2];
      mma_m16n8k16_f16_f16(d2, a, b, d);
      for (int i = 0; i < 4; ++i) D2[rows[i] * kN + cols[i]] = (d2[i / 2] >> (16 * (i & 1))) & 0xffffu;
    }
  } else {
    float c[4], d[4];
    for (int i = 0; i < 4; ++i) c[i] = __uint_as_float(C[rows[i] * kN + cols[i]]);
    if constexpr (F == kMmaBf16F32) mma_m16n8k16_bf16_f32(d, a, b, c);
    if constexpr (F == kMmaF16F32) mma_m16n8k16_f16_f32(d, a, b, c);
    if constexpr (F == kMmaTf32F32) mma_m16n8k8_tf32_f32(d, a, b, c);
    for (int i = 0; i < 4; ++i) D[rows[i] * kN + cols[i]] = __float_as_uint(d[i]);
    if constexpr (kChain) {  // the fp32 accumulator registers fed straight back as C
      float d2[4];
      if constexpr (F == kMmaBf16F32) mma_m16n8k16_bf16_f32(d2, a, b, d);
      if constexpr (F == kMmaF16F32) mma_m16n8k16_f16_f32(d2, a, b, d);
      if constexpr (F == kMmaTf32F32) mma_m16n8k8_tf32_f32(d2, a, b, d);
      for (int i = 0; i < 4; ++i) D2[rows[i] * kN + cols[i]] = __float_as_uint(d2[i]);
    }
  }
}

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
// kRepeat wgmma instructions of form F on the accumulator registers acc, issued in one asm
// statement (so they provably use the same registers), scale-d = 1 (D = A*B + D),
// imm-scale-a = imm-scale-b = 1, no transpose (K-major A and B). The caller fences before
// and commits/waits after; consecutive wgmmas of one shape on the same accumulator need no
// fence between them (PTX ISA, wgmma.fence).
template <int F, int kRepeat>
__device__ __forceinline__ void wgmma_issue(float (&acc)[4], std::uint64_t da, std::uint64_t db) {
  static_assert(kRepeat == 1 || kRepeat == 2);
#define FB_WGMMA_ONE(SHAPE, TYPE, TAIL) \
  "wgmma.mma_async.sync.aligned." SHAPE ".f32." TYPE "." TYPE " {%0,%1,%2,%3}, %4, %5, p, 1, 1" TAIL ";\n"
#define FB_WGMMA_RUN(INSTRUCTIONS)                                            \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n" INSTRUCTIONS "}\n" \
               : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])       \
               : "l"(da), "l"(db), "r"(1))
#define FB_WGMMA(SHAPE, TYPE, TAIL)                \
  if constexpr (kRepeat == 1)                      \
    FB_WGMMA_RUN(FB_WGMMA_ONE(SHAPE, TYPE, TAIL)); \
  else                                             \
    FB_WGMMA_RUN(FB_WGMMA_ONE(SHAPE, TYPE, TAIL) FB_WGMMA_ONE(SHAPE, TYPE, TAIL))
  if constexpr (F == kWgmmaBf16) {
    FB_WGMMA("m64n8k16", "bf16", ", 0, 0");
  }
  if constexpr (F == kWgmmaF16) {
    FB_WGMMA("m64n8k16", "f16", ", 0, 0");
  }
  if constexpr (F == kWgmmaE4m3) {
    FB_WGMMA("m64n8k32", "e4m3", "");
  }
  if constexpr (F == kWgmmaE5m2) {
    FB_WGMMA("m64n8k32", "e5m2", "");
  }
#undef FB_WGMMA
#undef FB_WGMMA_RUN
#undef FB_WGMMA_ONE
}
#endif

// wgmma reads A (64 x K) and B (K x 8) from shared memory in the no-swizzle K-major
// canonical layout: 8-row x 16-byte core matrices, each stored as 128 contiguous bytes.
// Core matrix (row group rg, K group kg) sits at byte (rg * 2 + kg) * 128, so the
// leading-dimension byte offset (next core matrix along K) is 128 and the
// stride-dimension byte offset (next 8-row group) is 256. Both tiles are 32 bytes of K.
// kChain: besides D = wgmma(A, B, C) (waited), D2 = two wgmmas on one accumulator starting
// from C, the second issued before any wait, as a kernel's K loop does. D1 of the chain
// cannot be read without a wait, so the recorded D1 is D, the first, separate wgmma on the
// same inputs; D2 differs from wgmma(A, B, D) when the chain does not round to fp32 between
// the two instructions.
template <int F, bool kChain>
__global__ void wgmma_kernel(const std::uint32_t* A, const std::uint32_t* Bt, const std::uint32_t* C, std::uint32_t* D,
                             std::uint32_t* D2) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int M = 64, K = (F == kWgmmaE4m3 || F == kWgmmaE5m2) ? 32 : 16, elem_bytes = 32 / K;
  constexpr int kCoreBytes = 128, kLbo = 128, kSbo = 256;
  auto kmajor_offset = [](int row, int k_byte) {
    return ((row / 8) * 2 + k_byte / 16) * kCoreBytes + (row % 8) * 16 + k_byte % 16;
  };
  auto smem_descriptor = [](const void* smem) {
    const auto addr = static_cast<std::uint32_t>(__cvta_generic_to_shared(smem));
    return (static_cast<std::uint64_t>((addr & 0x3ffffu) >> 4)) | (static_cast<std::uint64_t>(kLbo >> 4) << 16) |
           (static_cast<std::uint64_t>(kSbo >> 4) << 32);  // bits 62-63 = 0: no swizzle
  };
  __shared__ __align__(128) unsigned char a_smem[M * 32];
  __shared__ __align__(128) unsigned char b_smem[kN * 32];
  const int tile = blockIdx.x, tid = threadIdx.x;
  A += tile * M * K;
  Bt += tile * kN * K;
  C += tile * M * kN;
  D += tile * M * kN;
  if constexpr (kChain) D2 += tile * M * kN;
  for (int e = tid; e < M * K; e += blockDim.x) {
    const int r = e / K, k = e % K, at = kmajor_offset(r, k * elem_bytes);
    if (elem_bytes == 2)
      *reinterpret_cast<std::uint16_t*>(a_smem + at) = static_cast<std::uint16_t>(A[e]);
    else
      a_smem[at] = static_cast<unsigned char>(A[e]);
  }
  for (int e = tid; e < kN * K; e += blockDim.x) {
    const int n = e / K, k = e % K, at = kmajor_offset(n, k * elem_bytes);
    if (elem_bytes == 2)
      *reinterpret_cast<std::uint16_t*>(b_smem + at) = static_cast<std::uint16_t>(Bt[e]);
    else
      b_smem[at] = static_cast<unsigned char>(Bt[e]);
  }
  // Generic-proxy stores must be made visible to the async proxy that wgmma reads through.
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  const int warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
  const int rows[4] = {16 * warp + g, 16 * warp + g, 16 * warp + g + 8, 16 * warp + g + 8};
  const int cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
  const std::uint64_t da = smem_descriptor(a_smem), db = smem_descriptor(b_smem);
  float d[4];
  for (int i = 0; i < 4; ++i) d[i] = __uint_as_float(C[rows[i] * kN + cols[i]]);
  for (int i = 0; i < 4; ++i) asm volatile("" : "+f"(d[i])::"memory");
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  wgmma_issue<F, 1>(d, da, db);
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  for (int i = 0; i < 4; ++i) asm volatile("" : "+f"(d[i])::"memory");
  for (int i = 0; i < 4; ++i) D[rows[i] * kN + cols[i]] = __float_as_uint(d[i]);
  if constexpr (kChain) {
    float d2[4];
    for (int i = 0; i < 4; ++i) d2[i] = __uint_as_float(C[rows[i] * kN + cols[i]]);
    for (int i = 0; i < 4; ++i) asm volatile("" : "+f"(d2[i])::"memory");
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    wgmma_issue<F, 2>(d2, da, db);  // D2 = A*B + (A*B + C), no wait in between
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    for (int i = 0; i < 4; ++i) asm volatile("" : "+f"(d2[i])::"memory");
    for (int i = 0; i < 4; ++i) D2[rows[i] * kN + cols[i]] = __float_as_uint(d2[i]);
  }
#else
  (void)A, (void)Bt, (void)C, (void)D, (void)D2;
  __trap();  // wgmma exists only on sm_90a; the host never launches this elsewhere
#endif
}

}  // namespace
}  // namespace fb::gpu
