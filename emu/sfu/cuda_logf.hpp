// emu/sfu/cuda_logf.hpp: CUDA's logf without fast math (libdevice __nv_logf), bit for bit.
//
// Contract: cuda_logf(x) returns what the PTX sequence nvcc emits for logf(x) returns: read
// from `nvcc -arch=sm_90 -ptx` of a kernel calling logf (CUDA 13.0, V13.0.88, default flags:
// no --use_fast_math, -ftz=false). Unlike expf it calls no SFU instruction: every step is
// an IEEE fp32 operation (rn, subnormals kept) or an integer operation on the bits, so the
// model needs no measurement of the hardware beyond fp32 FMA. The sequence:
//   1. small = x < 2^-126 (setp.lt: false for NaN); x1 = small ? x * 2^23 : x; e0 = small ? -23 : 0
//   2. t = (bits(x1) - 0x3F2AAAAB) & 0xFF800000   (the exponent, so that m below is in
//      [2/3, 4/3): 0x3F2AAAAB is the bits of 2/3 rounded up)
//   3. m = float(bits(x1) - t); e = fma(float(int32 t), 2^-23, e0)   (exact)
//   4. f = m - 1 (add.f32)
//   5. p = fma(-0x1.0aa04ep-3 (0xBE055027), f, 0x1.2073ecp-3 (0x3E1039F6)), then Horner
//      p = fma(p, f, c) over c = 0xBDF8CDCC, 0x3E0F2955, 0xBE2AD8B9, 0x3E4CED0B, 0xBE7FFF22,
//      0x3EAAAA78, 0xBF000000
//   6. q = f * p (mul.f32); r = fma(q, f, f); y = fma(e, ln2 (0x3F317218), r)
//   7. bits(x1) >= 0x7F800000 as unsigned (+inf, NaN, any negative): y = fma(x1, +inf, +inf)
//      (+inf for +inf, NaN otherwise)
//   8. x1 == 0 (either zero): -inf; else y.
// Whether a given binary (e.g. PyTorch's FA2 combine kernel) holds this sequence is an
// assumption of its user: ptxas keeps IEEE rn operations as they are, but the SASS of the
// binary was not read (docs/DESIGN.md §6).
#pragma once

namespace fb {

float cuda_logf(float x);

}  // namespace fb
