// gpu/sfu_table_model.hpp: the emu's ex2 fixed-point table model (emu/special_functions.cpp
// Ex2FixedPointModel::evaluate) restated as one function that compiles for the device
// (fb-sfu-probe evaluates captured tables with it on all 2^32 inputs) and for the host
// (tests/test_probe_file.cpp checks it against the emu's model bit for bit, so the two
// cannot drift apart unnoticed).
//
// Contract: ex2_table_model(x, N, rounding, T, nan_output) returns the fp32 bits the emu's
// table model gives for x: input ftz (subnormal -> zero of the same sign); NaN -> nan_output;
// x >= 128 -> +inf; x < -160 -> +0; otherwise xf = x * 2^N rounded to an integer by
// `rounding` (FixedPointRounding numbering: 0 floor, 1 nearest-even, 2 toward zero),
// k = floor(xf / 2^N), i = xf mod 2^N, result T[i] * 2^k, NaN T[i] returned as is,
// |result| >= 2^128 -> inf and |result| < 2^-126 -> zero, both with T[i]'s sign.
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

}  // namespace fb::gpu
