// gpu/sfu_table_model.hpp: the emu's table models of the ex2 fixed-point, rcp mantissa and
// lg2 exponent-split hypotheses (emu/special_functions.cpp Ex2FixedPointModel::evaluate,
// RcpMantissaModel::evaluate and Lg2ExponentSplitModel::evaluate) restated as functions that compile for the device
// (fb-sfu-probe evaluates captured tables with them on all 2^32 inputs) and for the host
// (tests/test_probe_file.cpp checks them against the emu's models bit for bit, so the two
// cannot drift apart unnoticed).
//
// Contract: ex2_table_model(x, N, rounding, T, nan_output) returns the fp32 bits the emu's
// table model gives for x: input ftz (subnormal -> zero of the same sign); NaN -> nan_output;
// x >= 128 -> +inf; x < -160 -> +0; otherwise xf = x * 2^N rounded to an integer by
// `rounding` (FixedPointRounding numbering: 0 floor, 1 nearest-even, 2 toward zero),
// k = floor(xf / 2^N), i = xf mod 2^N, result T[i] * 2^k, NaN T[i] returned as is,
// |result| >= 2^128 -> inf and |result| < 2^-126 -> zero, both with T[i]'s sign.
// rcp_table_model(x, T, nan_output), T with 2^23 entries (T[m] = the hardware's bits for
// the input 1.m): input ftz; NaN -> nan_output; +-0 -> +-inf; +-inf -> +-0; a normal
// x = s * 2^e * 1.m -> v = s * T[m] * 2^-e exactly, NaN T[m] returned as is, |v| >= 2^128
// -> inf and |v| < 2^-126 -> zero, both with v's sign (the FBSFU1 form 2 comment).
// lg2_exponent_split_model(x_bits, t_bits): fb-sfu-probe's lg2 hypothesis for a positive
// normal x = 2^e * 1.m: lg2(x) = RN_fp32(e + T), T = t_bits the hardware's lg2(1.m); one IEEE
// round-to-nearest-even addition (e is exact in fp32: __fadd_rn, i.e. add.rn.f32 without
// .ftz, on the device, never contracted; the host's float + under the default rounding
// mode), a subnormal sum flushed to zero of its sign, a NaN T returned as is.
// lg2_table_model(x, T, nan_output), T with 2^23 entries (T[m] = the hardware's bits for the
// input 1.m): the FBSFU1 form 3 lg2_exponent_split rule: input ftz; NaN and x < 0 (-inf
// included) -> nan_output; +-0 -> -inf; +inf -> +inf; a positive normal x ->
// lg2_exponent_split_model(x, T[m]).
// Plain C++ when not compiled by nvcc.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define FB_SFU_HD __host__ __device__
#else
#define FB_SFU_HD
#endif

namespace fb::gpu {

enum ArgRounding : int { kFloor = 0, kNearestEven = 1, kTowardZero = 2, kArgRoundingCount };

FB_SFU_HD inline std::uint32_t sfu_bits(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
FB_SFU_HD inline float sfu_float(std::uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
// .ftz flushing (PTX .ftz on inputs and outputs, and the model's input): a subnormal becomes
// zero of the same sign.
FB_SFU_HD inline float sfu_ftz(float x) {
  return (x != 0.f && fabsf(x) < 0x1p-126f) ? copysignf(0.f, x) : x;
}

// x * 2^N as an integer under the argument rounding (exact: |x * 2^N| < 2^36 in double
// for the x that reach it).
FB_SFU_HD inline long long sfu_fixed_point(float x, int nbits, int rounding) {
  const double scaled = ldexp(static_cast<double>(x), nbits);
  const double fixed = rounding == kTowardZero ? trunc(scaled) : rounding == kNearestEven ? rint(scaled) : floor(scaled);
  return static_cast<long long>(fixed);
}

// The model's split of x: x * 2^N as a fixed-point number k.i, k = floor(xf / 2^N) the power
// of two, i = xf mod 2^N the table index. fb-sfu-probe's hypothesis kernel keys the measured
// outputs with this same split, so the table it captures is indexed as the model reads it.
struct Ex2FixedPointSplit {
  long long k;
  std::uint32_t index;
};
FB_SFU_HD inline Ex2FixedPointSplit ex2_fixed_point_split(float x, int nbits, int rounding) {
  const long long xf = sfu_fixed_point(x, nbits, rounding);
  return {xf >> nbits, static_cast<std::uint32_t>(xf & ((1ll << nbits) - 1))};  // arithmetic shift: floor
}

// The model's special regions: from kEx2InfFrom up the result is +inf, below kEx2ZeroBelow +0.
constexpr float kEx2InfFrom = 128.f;
constexpr float kEx2ZeroBelow = -160.f;

FB_SFU_HD inline std::uint32_t ex2_table_model(float x, int nbits, int rounding, const std::uint32_t* table,
                                               std::uint32_t nan_output) {
  x = sfu_ftz(x);
  if (x != x) return nan_output;
  if (x >= kEx2InfFrom) return 0x7f800000u;
  if (x < kEx2ZeroBelow) return 0u;
  const Ex2FixedPointSplit split = ex2_fixed_point_split(x, nbits, rounding);
  const std::uint32_t t_bits = table[split.index];
  const float t = sfu_float(t_bits);
  if (t != t) return t_bits;
  const double v = ldexp(static_cast<double>(t), static_cast<int>(split.k));
  if (fabs(v) >= 0x1p128) return sfu_bits(copysignf(INFINITY, t));
  if (fabs(v) < 0x1p-126) return sfu_bits(copysignf(0.f, t));
  return sfu_bits(static_cast<float>(v));  // exact: a 24-bit significand in the normal range
}

// rcp_mantissa key and scale of a normal x = +-2^e * 1.m: the mantissa field m and e.
struct RcpMantissaSplit {
  int e;
  std::uint32_t mantissa;
};
FB_SFU_HD inline RcpMantissaSplit rcp_mantissa_split(std::uint32_t x_bits) {
  return {static_cast<int>((x_bits >> 23) & 0xffu) - 127, x_bits & 0x7fffffu};
}
constexpr std::uint32_t kRcpMantissaTableEntries = 1u << 23;

FB_SFU_HD inline std::uint32_t rcp_table_model(float x, const std::uint32_t* table, std::uint32_t nan_output) {
  x = sfu_ftz(x);
  if (x != x) return nan_output;
  const std::uint32_t sign = sfu_bits(x) & 0x80000000u;
  if (x == 0.f) return sign | 0x7f800000u;
  if (fabsf(x) == INFINITY) return sign;
  const RcpMantissaSplit split = rcp_mantissa_split(sfu_bits(x));
  const std::uint32_t t_bits = table[split.mantissa];
  const float t = sfu_float(t_bits);
  if (t != t) return t_bits;
  const std::uint32_t v_sign = (t_bits ^ sign) & 0x80000000u;  // ldexp keeps the sign, zeros included
  const double v = ldexp(static_cast<double>(sfu_float(t_bits ^ sign)), -split.e);  // exact
  if (fabs(v) >= 0x1p128) return v_sign | 0x7f800000u;
  if (fabs(v) < 0x1p-126) return v_sign;
  return sfu_bits(static_cast<float>(v));  // exact: at most 24 significant bits in the normal range
}

FB_SFU_HD inline std::uint32_t lg2_exponent_split_model(std::uint32_t x_bits, std::uint32_t t_bits) {
  const float t = sfu_float(t_bits);
  if (t != t) return t_bits;
  const float e = static_cast<float>(static_cast<int>((x_bits >> 23) & 0xffu) - 127);  // exact
#ifdef __CUDA_ARCH__
  const float sum = __fadd_rn(e, t);
#else
  const float sum = e + t;
#endif
  return sfu_bits(sfu_ftz(sum));
}
constexpr std::uint32_t kLg2MantissaTableEntries = 1u << 23;

FB_SFU_HD inline std::uint32_t lg2_table_model(float x, const std::uint32_t* table, std::uint32_t nan_output) {
  x = sfu_ftz(x);
  if (x != x) return nan_output;
  if (x == 0.f) return 0xff800000u;
  if (x < 0.f) return nan_output;
  if (x == INFINITY) return 0x7f800000u;
  const std::uint32_t x_bits = sfu_bits(x);
  return lg2_exponent_split_model(x_bits, table[x_bits & 0x7fffffu]);
}

}  // namespace fb::gpu
