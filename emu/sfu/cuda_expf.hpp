// emu/sfu/cuda_expf.hpp: CUDA's expf without fast math (what torch.exp runs on an fp32 CUDA
// tensor), built from a model of ex2.approx.ftz.f32.
//
// Contract: cuda_expf(x, ex2) returns, bit for bit, what the PTX sequence nvcc emits for
// expf(x) returns when its ex2.approx.ftz.f32 is `ex2` (read from `nvcc -arch=sm_90 -ptx` of
// a kernel calling expf, CUDA 13.0, default flags: no --use_fast_math, -ftz=false,
// -prec-div/-prec-sqrt default; docs/DESIGN.md §7). The sequence, every step an IEEE fp32
// operation with the stated rounding, no flush to zero except inside the ex2:
//   1. t = fma.rn(x, 0x3BBB989D (log2 e / 256), 0.5)
//   2. u = cvt.sat(t)                          (clamped to [0, 1]; NaN gives +0)
//   3. j = fma.rm(u, 252, 0x4B400001 (1.5·2^23 + 1))    (an integer 1.5·2^23 + n, n in 1..253)
//   4. r = -(j + 0xCB40007F (-(1.5·2^23 + 127)))        (= 127 - n, exact)
//   5. a = fma.rn(x, 0x3FB8AA3B (log2 e, high part), r)
//   6. a = fma.rn(x, 0x32A57060 (log2 e - high part), a)  (a = x·log2 e - k, k = n - 127)
//   7. s = bits(j) << 23                        (the fp32 2^k: j's low bits hold n = k + 127)
//   8. result = mul.rn(ex2.approx.ftz(a), s)   (subnormal results kept)
// So expf(x) = ex2(x·log2 e - k)·2^k with k = floor(252·sat(x·log2e/256 + 1/2)) - 126, k in
// [-126, 126]. Which PTX a PyTorch binary's exp kernel holds was NOT read: that torch.exp
// calls this expf (PyTorch builds without fast math) is an assumption; the sequence on the
// GPU rests on the ex2 model (measured on an H200 in the hw-sm90 set; correct = UNMEASURED).
#pragma once

#include "emu/sfu/special_functions.hpp"

namespace fb {

float cuda_expf(float x, const SpecialFunctionModel& ex2_ftz);

}  // namespace fb
