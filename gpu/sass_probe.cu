// gpu/sass_probe.cu: tiny kernels whose SASS (cuobjdump -sass, on the device machine) shows
// what the CUDA toolchain emits for the operations the attention models depend on:
// ex2.approx.f32 without .ftz, exp2f and 1.f/x without fast math (libdevice / IEEE division),
// the same with --use_fast_math, and an unfused s*scale - max as PyTorch's FA2 writes it
// (__fmul_rn keeps the multiply from contracting into an FFMA). Never launched: only compiled
// and disassembled, so the listing can be compared with the FlashAttention kernels' SASS.
__global__ void sass_ex2_approx_f32(float* y, const float* x) {
  float r;
  asm("ex2.approx.f32 %0, %1;" : "=f"(r) : "f"(x[threadIdx.x]));
  y[threadIdx.x] = r;
}
__global__ void sass_exp2f(float* y, const float* x) { y[threadIdx.x] = exp2f(x[threadIdx.x]); }
__global__ void sass_reciprocal(float* y, const float* x) { y[threadIdx.x] = 1.f / x[threadIdx.x]; }
__global__ void sass_exp2f_unfused_argument(float* y, const float* s, float scale_log2, float max_scaled) {
  y[threadIdx.x] = exp2f(__fmul_rn(s[threadIdx.x], scale_log2) - max_scaled);
}
__global__ void sass_exp2f_fused_argument(float* y, const float* s, float scale_log2, float max_scaled) {
  y[threadIdx.x] = exp2f(s[threadIdx.x] * scale_log2 - max_scaled);
}
__global__ void sass_logf(float* y, const float* x) { y[threadIdx.x] = logf(x[threadIdx.x]); }
