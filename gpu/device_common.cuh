// gpu/device_common.cuh: inline-PTX wrappers shared by the probes and the FA2 kernel.
//
// Contract: each wrapper issues exactly the named PTX instruction (no compiler
// substitution), so the PTX listing test can find it and the probes measure it.
// Fragment layouts follow the PTX ISA's "Matrix fragments for mma.m16n8k16" and
// "for mma.m16n8k8" sections: groupID = lane / 4, tig = lane % 4.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define FB_CUDA_CHECK(call)                                                                               \
  do {                                                                                                    \
    cudaError_t fb_err_ = (call);                                                                         \
    if (fb_err_ != cudaSuccess) {                                                                         \
      std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorName(fb_err_), __FILE__, __LINE__, \
                   cudaGetErrorString(fb_err_));                                                          \
      std::exit(3);                                                                                       \
    }                                                                                                     \
  } while (0)

namespace fb::gpu {

// ---- special-function unit (MUFU) ---------------------------------------------------
__device__ __forceinline__ float ex2_approx_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// Without .ftz (CUDA's exp2f without fast math): subnormal inputs and results are kept;
// ptxas may expand it into more than one SASS instruction (the probe measures the result).
__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float rcp_approx_ftz(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float lg2_approx_ftz(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// ---- warp-level MMA -----------------------------------------------------------------
// D = A*B + C, A 16x16 row-major fragments (4 regs of 2 elements), B 16x8 column
// fragments (2 regs), C/D 16x8 fp32 (4 regs).
__device__ __forceinline__ void mma_m16n8k16_bf16_f32(float d[4], const std::uint32_t a[4], const std::uint32_t b[2],
                                                      const float c[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}
__device__ __forceinline__ void mma_m16n8k16_f16_f32(float d[4], const std::uint32_t a[4], const std::uint32_t b[2],
                                                     const float c[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}
// fp16 inputs accumulated in fp16: C/D are two f16x2 registers (rows g and g+8).
__device__ __forceinline__ void mma_m16n8k16_f16_f16(std::uint32_t d[2], const std::uint32_t a[4],
                                                     const std::uint32_t b[2], const std::uint32_t c[2]) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, {%8,%9};"
               : "=r"(d[0]), "=r"(d[1])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(c[0]), "r"(c[1]));
}
// tf32: A 16x8 (4 regs of one element), B 8x8 (2 regs), fp32 C/D.
__device__ __forceinline__ void mma_m16n8k8_tf32_f32(float d[4], const std::uint32_t a[4], const std::uint32_t b[2],
                                                     const float c[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

}  // namespace fb::gpu
