// emu/sfu/libdevice_log2f.hpp: libdevice's __nv_log2f as Triton 3.6 links it (tl.math.log2 on
// fp32), bit for bit.
//
// Contract: libdevice_log2f(x) returns what the PTX sequence of the Triton tutorial's forward
// kernel returns for tl.math.log2(l_i) (traces/hw/h200/paths/tutorial/sass/_attn_fwd_tma_*.ptx,
// Triton 3.6.0, PyTorch 2.11, H200, 2026-12-04). No SFU instruction: IEEE fp32 operations and
// integer operations on the bits; the polynomial's FMAs carry .ftz (Triton links libdevice
// with __CUDA_FTZ on), the other fp32 operations do not. The sequence:
//   1. small = x < 2^-126; x1 = small ? x * 2^23 : x; e0 = small ? -23 : 0
//   2. t = (bits(x1) - 0x3F3504F3) & 0xFF800000; m = float(bits(x1) - t)   (m in [1/√2, √2))
//   3. e = fma.ftz(float(int32 t), 2^-23, e0)                              (exact)
//   4. f = m - 1 (add.f32)
//   5. p = fma.ftz(0x3DC6B27F, f, 0xBE2C7F30), then Horner p = fma.ftz(p, f, c) over
//      c = 0x3E2FCF2A, 0xBE374E43, 0x3E520BF4, 0xBE763C8B, 0x3E93BF99, 0xBEB8AA49, 0x3EF6384A,
//      0xBF38AA3B
//   6. q = f * p; q = f * q (mul.f32); r = fma.ftz(f, log2(e) (0x3FB8AA3B), q); y = e + r (add.f32)
//   7. bits(x1) >= 0x7F800000 as unsigned (+inf, NaN, any negative): y = fma.ftz(x1, +inf, +inf)
//   8. x1 == 0 (either zero): -inf; else y.
#pragma once

namespace fb {

float libdevice_log2f(float x);

}  // namespace fb
