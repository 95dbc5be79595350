// emu/sfu/software_exp2.hpp: FlashAttention-4's software exp2, the polynomial it evaluates with
// FMAs on part of a softmax row instead of the MUFU ex2 (flash_attn/cute/utils.py
// ex2_emulation_2 and its PTX twin e2e_asm2; POLY_EX2; softmax.py apply_exp2_convert).
//
// Contract: fa4_software_ex2(x) returns, bit for bit, what the kernel's instruction sequence
// returns for the fp32 input x. It is plain fp32 arithmetic, so it is modelled without
// hardware (each step is an IEEE operation with a stated rounding):
//   1. xc = max(x, -127)                     (max.ftz.f32: NaN -> -127, -inf -> -127)
//   2. r  = add.rm(xc, 0x1.8p23)             (round toward -inf: r = 1.5·2^23 + floor(xc))
//   3. f  = sub.rn(xc, sub.rn(r, 0x1.8p23))  (f = xc - floor(xc) in [0, 1), exact)
//   4. p  = fma.rn(fma.rn(fma.rn(c3, f, c2), f, c1), f, 1)   (Horner, degree 3)
//   5. result bits = (bits(r) << 23) + bits(p), 32-bit integer arithmetic: adds floor(xc) to
//      p's exponent field (bits(r) << 23 keeps only floor(xc)'s low 9 bits, two's complement).
// c1..c3 are POLY_EX2[3] (exact fp32 constants). Subnormal inputs are flushed to a zero of
// their sign first, as e2e_asm2's max.ftz/add.rm.ftz do (whether the CuTe packed ops of
// ex2_emulation_2 carry .ftz is UNVERIFIED; it matters only for a subnormal argument, which
// the softmax's exponent, an FFMA of normal operands, produces only as 0). Later steps cannot
// meet subnormals: f is 0 or >= 2^-17 and p lies in [1, 2). The kernel assumes
// x <= 127 (its arguments are <= 0, or <= the lazy-rescale threshold); larger x wrap in step 5
// exactly as the integer add does. For floor(xc) = -127 step 5 yields a subnormal whose
// leading bit is lost (p's implicit 1 cancels against the exponent), as on the GPU.
// fa4_software_ex2_uses_polynomial() says which elements of a row FA4 sends through it.
#pragma once

#include <cstdint>

namespace fb {

// POLY_EX2[3]: p(f) = 1 + c1 f + c2 f^2 + c3 f^3.
inline constexpr float kFa4Ex2C1 = 0.695146143436431884765625f;
inline constexpr float kFa4Ex2C2 = 0.227564394474029541015625f;
inline constexpr float kFa4Ex2C3 = 0.077119089663028717041015625f;

float fa4_software_ex2(float x);

// FA4's split of one row of a KV tile between MUFU and the polynomial (apply_exp2_convert):
// the row is cut into 32-column fragments j; column pairs (k, k+1), k even, go through the
// polynomial when k % every >= every - pairs_per_period (ex2_emu_res, 4 outside head dim
// 256), unless j is the tile's last fragment or j < start_fragment. every == 0 means no
// column (FA4 with emulation off). `tile_columns` is the KV tile width (a multiple of 32).
bool fa4_software_ex2_uses_polynomial(int column, int tile_columns, int every, int start_fragment,
                                      int pairs_per_period = 4);

}  // namespace fb
