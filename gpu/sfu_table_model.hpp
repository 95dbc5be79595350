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
// ex2_sign_magnitude_table_model(x, N, T, nan_output), T with 2^(N+1) entries (T+[i] = the
// hardware's bits for i * 2^-N, then T-[i] for -i * 2^-N): the FBSFU1 form 4 rule (emu
// Ex2SignMagnitudeModel::evaluate): input ftz; NaN -> nan_output; x >= 128 -> +inf; x < -160 ->
// +0; X = floor(|x| * 2^N) (ex2_sign_magnitude_split), k = X >> N, i = X mod 2^N; x >= 0 (+0
// included): T+[i] * 2^k, x < 0 (-0 included): T-[i] * 2^-k; NaN entry as is, |result| >=
// 2^128 -> inf, < 2^-126 -> zero (T's sign).
// lg2_extended_model(e, t_bits, r, g, rounding): emu lg2_extended_rule (FBSFU1 form 5) for a
// positive normal x = 2^e * 1.m: NaN or infinite T as is; else e + L, L = T + R * ulp(T) * 2^-g
// exactly, rounded once (FinalRoundingCode: 0 nearest-even, 1 toward zero, 2 down, 3 up), an
// exact zero +0, below 2^-126 flushed. Integer arithmetic only, so host and device agree.
// lg2_extended_table_model(x, T, R, g, rounding, nan_output): the form 5 model: specials as
// lg2_table_model, x == 1 -> +0 (measured: the H200 returns +0 for 1 but e + L[0] with L[0] in
// (2^-24, 2^-23] for every other power of two 2^e, so T[0] is L[0]'s representative, not the
// hardware's lg2(1)), a positive normal x -> lg2_extended_model(e, T[m], R[m], g, rounding).
// sfu_round_reference(r, uncertain): fp32 RNE of a double approximation r of an exact value,
// `uncertain` set when r lies within 2^-49 (relative) of an fp32 rounding boundary (the double
// evaluation's error bound does not prove the rounding); fb-sfu-probe's reference for all its
// comparisons.
// sfu_table_delta(fn, N, sign_magnitude, j, value): the FBSFUT1 entry (gpu/README.md) of table
// key j holding `value` (fn: kSfuTableEx2, kSfuTableRcp, kSfuTableLg2): value minus the bits
// of the correctly rounded value at the key (ex2: 2^(j / 2^N); sign magnitude: 2^(j / 2^N) for
// j < 2^N, 2^(-(j - 2^N) / 2^N) above; rcp: 1 / (1 + j 2^-23); lg2: lg2(1 + j 2^-23)), in
// ulps, escaped when outside -7..7 or when the double reference is uncertain. fb-sfu-probe's
// table_delta_kernel and the host writer (gpu/sfu_table_writer.hpp sfu_table_deltas) both
// compute the deltas with it.
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

// ---- ex2 sign-magnitude (FBSFU1 form 4) ----------------------------------------------------
// The split of x: X = floor(|x| * 2^N), k = X >> N, i = X mod 2^N, and x's sign; the table
// index is i for x >= 0 (+0 included) and 2^N + i for x < 0 (-0 included). fb-sfu-probe's
// sign-magnitude hypothesis keys the outputs with it.
struct Ex2SignMagnitudeSplit {
  int k;
  std::uint32_t index;  // into the 2^(N+1)-entry table
  bool negative;
};
FB_SFU_HD inline Ex2SignMagnitudeSplit ex2_sign_magnitude_split(float x, int nbits) {
  const double scaled = ldexp(fabs(static_cast<double>(x)), nbits);  // exact: |x| < 2^8 where used
  const auto fixed = static_cast<unsigned long long>(floor(scaled));
  const bool negative = (sfu_bits(x) >> 31) != 0;
  const std::uint32_t i = static_cast<std::uint32_t>(fixed & ((1ull << nbits) - 1));
  return {static_cast<int>(fixed >> nbits), negative ? (1u << nbits) + i : i, negative};
}

FB_SFU_HD inline std::uint32_t ex2_sign_magnitude_table_model(float x, int nbits, const std::uint32_t* table,
                                                              std::uint32_t nan_output) {
  x = sfu_ftz(x);
  if (x != x) return nan_output;
  if (x >= kEx2InfFrom) return 0x7f800000u;
  if (x < kEx2ZeroBelow) return 0u;
  const Ex2SignMagnitudeSplit split = ex2_sign_magnitude_split(x, nbits);
  const std::uint32_t t_bits = table[split.index];
  const float t = sfu_float(t_bits);
  if (t != t) return t_bits;
  const double v = ldexp(static_cast<double>(t), split.negative ? -split.k : split.k);
  if (fabs(v) >= 0x1p128) return sfu_bits(copysignf(INFINITY, t));
  if (fabs(v) < 0x1p-126) return sfu_bits(copysignf(0.f, t));
  return sfu_bits(static_cast<float>(v));  // exact
}

// ---- lg2 extended (FBSFU1 form 5) ---------------------------------------------------------
enum FinalRoundingCode : int { kFinalNearestEven = 0, kFinalTowardZero = 1, kFinalDown = 2, kFinalUp = 3, kFinalRoundingCount };

FB_SFU_HD inline int sfu_clz64(unsigned long long v) {
#ifdef __CUDA_ARCH__
  return __clzll(static_cast<long long>(v));
#else
  return __builtin_clzll(v);
#endif
}

// s * 2^x (plus a fraction of one unit in (0, 1) when `sticky`) rounded to fp32 (emu
// round_fixed_to_fp32).
FB_SFU_HD inline std::uint32_t sfu_round_fixed(long long s, int x, bool sticky, int rounding) {
  if (s == 0 && !sticky) return 0u;
  const bool negative = s < 0;
  unsigned long long mag = negative ? static_cast<unsigned long long>(-(s + 1)) + 1ull : static_cast<unsigned long long>(s);
  if (negative && sticky) mag -= 1;
  if (mag == 0) return negative ? 0x80000000u : 0u;
  const int msb = 63 - sfu_clz64(mag);
  unsigned long long q;
  bool up = false;
  if (msb <= 23) {
    q = mag << (23 - msb);
    up = sticky && ((rounding == kFinalDown && negative) || (rounding == kFinalUp && !negative));
  } else {
    const int shift = msb - 23;
    q = mag >> shift;
    const unsigned long long rest = mag & ((1ull << shift) - 1), half = 1ull << (shift - 1);
    const bool inexact = rest != 0 || sticky;
    up = rounding == kFinalNearestEven ? (rest > half || (rest == half && (sticky || (q & 1ull))))
         : rounding == kFinalDown      ? (negative && inexact)
         : rounding == kFinalUp        ? (!negative && inexact)
                                       : false;
  }
  int exponent = msb + x;
  if (up && ++q == (1ull << 24)) q >>= 1, ++exponent;
  const std::uint32_t sign = negative ? 0x80000000u : 0u;
  if (exponent + 127 >= 255) return sign | 0x7f800000u;
  if (exponent + 127 <= 0) return sign;
  return sign | (static_cast<std::uint32_t>(exponent + 127) << 23) | (static_cast<std::uint32_t>(q) & 0x7fffffu);
}

FB_SFU_HD inline std::uint32_t lg2_extended_model(int e, std::uint32_t t_bits, int r, int guard_bits, int rounding) {
  if ((t_bits & 0x7f800000u) == 0x7f800000u) return t_bits;
  const std::uint32_t biased = (t_bits >> 23) & 0xffu;
  const long long q = (biased == 0 ? 0ll : (1ll << 23)) | static_cast<long long>(t_bits & 0x7fffffu);
  const long long l = ((t_bits & 0x80000000u) ? -q : q) * (1ll << guard_bits) + r;
  const int lx = static_cast<int>(biased > 1 ? biased : 1u) - 150 - guard_bits;
  if (e == 0) return sfu_round_fixed(l, lx, false, rounding);
  const int units = -55;
  long long l55;
  bool sticky = false;
  if (lx >= units) {
    l55 = l * (1ll << (lx - units));
  } else {
    const int shift = units - lx;
    l55 = shift >= 63 ? (l < 0 ? -1ll : 0ll) : (l >> shift);
    sticky = shift >= 63 ? l != 0 : (l - l55 * (1ll << shift)) != 0;
  }
  return sfu_round_fixed(static_cast<long long>(e) * (1ll << 55) + l55, units, sticky, rounding);
}

FB_SFU_HD inline std::uint32_t lg2_extended_table_model(float x, const std::uint32_t* table, const int* residuals,
                                                        int guard_bits, int rounding, std::uint32_t nan_output) {
  x = sfu_ftz(x);
  if (x != x) return nan_output;
  if (x == 0.f) return 0xff800000u;
  if (x < 0.f) return nan_output;
  if (x == INFINITY) return 0x7f800000u;
  if (x == 1.f) return 0u;  // lg2(1) = +0 exactly; T[0] holds L[0] for the other powers of two
  const std::uint32_t b = sfu_bits(x);
  const std::uint32_t m = b & 0x7fffffu;
  return lg2_extended_model(static_cast<int>(b >> 23) - 127, table[m], residuals[m], guard_bits, rounding);
}

// ---- lg2 extended: fb-sfu-probe's interval analysis (host and device) -----------------------
// For a positive normal x = 2^e * 1.m whose hardware result has bits r_bits, lg2_interval gives
// the closed interval [lo, hi] of L (in units of 2^-60, int64) such that `rounding` (a
// FinalRoundingCode) of the exact e + L gives r_bits (lg2_extended_model's rounding; an empty
// interval, lo > hi, for a NaN or infinite result). Bounds are rounded inward to the units
// (exact for |L| >= 2^-37) and clamped to +-3 (L is near [0, 1)). A zero result gives L = -e.
constexpr long long kLg2UnitCap = 3ll << 60;

FB_SFU_HD inline void sfu_two_sum(double a, double b, double& s, double& t) {
  s = a + b;  // additions only: no contraction
  const double bb = s - a;
  t = (a - (s - bb)) + (b - bb);
}
// floor / ceil of (a + b) * 2^60 for the exact pair (a, b) of a two_sum, clamped to +-3.
FB_SFU_HD inline long long lg2_units_floor(double a, double b) {
  if (a >= 3.0) return kLg2UnitCap;
  if (a <= -3.0) return -kLg2UnitCap;
  const double A = ldexp(a, 60), B = ldexp(b, 60);
  const double fa = floor(A);  // A non-integer: |B| <= ulp(A) / 2 cannot move A + B past an integer
  return fa != A ? static_cast<long long>(fa) : static_cast<long long>(A) + static_cast<long long>(floor(B));
}
FB_SFU_HD inline long long lg2_units_ceil(double a, double b) {
  if (a >= 3.0) return kLg2UnitCap;
  if (a <= -3.0) return -kLg2UnitCap;
  const double A = ldexp(a, 60), B = ldexp(b, 60);
  const double ca = ceil(A);
  return ca != A ? static_cast<long long>(ca) : static_cast<long long>(A) + static_cast<long long>(ceil(B));
}

FB_SFU_HD inline void lg2_interval(int e, std::uint32_t r_bits, int rounding, long long& lo, long long& hi) {
  const float r = sfu_float(r_bits);
  if ((r_bits & 0x7f800000u) == 0x7f800000u) {
    lo = kLg2UnitCap, hi = -kLg2UnitCap;
    return;
  }
  if (r == 0.f) {  // e + L rounds to zero: L = -e (e + L is never in (0, 2^-126) with ftz flushing it)
    lo = hi = (e >= -2 && e <= 2) ? -static_cast<long long>(e) * (1ll << 60) : kLg2UnitCap;
    if (lo == kLg2UnitCap) hi = -kLg2UnitCap;
    return;
  }
  const double rd = r, below = nextafterf(r, -INFINITY), above = nextafterf(r, INFINITY);
  double lb, ub;  // e + L in [lb, ub], ends closed or open
  bool lb_closed, ub_closed;
  if (rounding == kFinalNearestEven) {
    lb = 0.5 * (below + rd), ub = 0.5 * (rd + above);  // exact
    lb_closed = ub_closed = (r_bits & 1u) == 0;
  } else if (rounding == kFinalDown || (rounding == kFinalTowardZero && r > 0.f)) {
    lb = rd, ub = above, lb_closed = true, ub_closed = false;
  } else {  // up, or toward zero for a negative result
    lb = below, ub = rd, lb_closed = false, ub_closed = true;
  }
  double s, t;
  sfu_two_sum(lb, -static_cast<double>(e), s, t);
  lo = lb_closed ? lg2_units_ceil(s, t) : lg2_units_floor(s, t) + 1;
  sfu_two_sum(ub, -static_cast<double>(e), s, t);
  hi = ub_closed ? lg2_units_floor(s, t) : lg2_units_ceil(s, t) - 1;
}

FB_SFU_HD inline long long sfu_floor_div(long long a, long long b) {  // b > 0
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

// The representative of [lo, hi] (units 2^-60) written into an lg2_extended table:
// L = T + R * ulp(T) * 2^-g with the fewest guard bits g (0..24), then R nearest 0. False when
// none exists (or T is NaN or infinite). For |T| < 2^-37 (finer than the units) only R = 0.
FB_SFU_HD inline bool lg2_representative(std::uint32_t t_bits, long long lo, long long hi, int& g_out, long long& r_out) {
  if ((t_bits & 0x7f800000u) == 0x7f800000u || lo > hi) return false;
  const std::uint32_t biased = (t_bits >> 23) & 0xffu;
  const int ue = static_cast<int>(biased > 1 ? biased : 1u) - 150;  // ulp(T) = 2^ue
  const long long q = (biased == 0 ? 0ll : 1ll << 23) | static_cast<long long>(t_bits & 0x7fffffu);
  const long long signed_q = (t_bits >> 31) ? -q : q;
  if (ue + 60 < 0) {
    const double a = ldexp(static_cast<double>(signed_q), ue + 60);
    if (!(static_cast<double>(lo) <= a && a <= static_cast<double>(hi))) return false;
    g_out = 0, r_out = 0;
    return true;
  }
  if (ue + 60 > 38) return false;  // |T| >= 2: outside the analysis
  const long long tu = signed_q * (1ll << (ue + 60));
  const int g_max = ue + 60 < 24 ? ue + 60 : 24;
  for (int g = 0; g <= g_max; ++g) {
    const long long step = 1ll << (ue + 60 - g);
    const long long jlo = -sfu_floor_div(-(lo - tu), step), jhi = sfu_floor_div(hi - tu, step);
    if (jlo > jhi) continue;
    g_out = g;
    r_out = jlo > 0 ? jlo : jhi < 0 ? jhi : 0;
    return true;
  }
  return false;
}

// ---- FBSFUT1 table entries (fb-sfu-probe's table_delta_kernel, the host writer) -------------
// Function numbering of the FBSFUT1 writers (fb-sfu-probe's Fn: ex2, rcp, lg2 first).
enum SfuTableFunction : int { kSfuTableEx2 = 0, kSfuTableRcp = 1, kSfuTableLg2 = 2 };
// The delta that marks an escaped entry, and a key no input set (fb-sfu-probe's kEmpty).
constexpr int kSfuTableEscape = -8;
constexpr std::uint32_t kSfuTableUnfilled = 0xffffffffu;

FB_SFU_HD inline bool sfu_isfinite(double v) {
#ifdef __CUDA_ARCH__
  return isfinite(v);
#else
  return std::isfinite(v);
#endif
}
FB_SFU_HD inline bool sfu_isfinite(float v) {
#ifdef __CUDA_ARCH__
  return isfinite(v);
#else
  return std::isfinite(v);
#endif
}

FB_SFU_HD inline float sfu_round_reference(double r, bool& uncertain) {
  uncertain = false;
  const float f = static_cast<float>(r);  // RNE
  if (!sfu_isfinite(r) || r == 0.0 || !sfu_isfinite(f) || f == 0.f) return f;
  const float toward = static_cast<double>(f) < r ? nextafterf(f, INFINITY) : nextafterf(f, -INFINITY);
  if (!sfu_isfinite(toward)) return f;
  const double boundary = 0.5 * (static_cast<double>(f) + static_cast<double>(toward));
  uncertain = fabs(r - boundary) <= fabs(r) * 0x1p-49;
  return f;
}

struct SfuTableDelta {
  int delta;       // -7..7, or kSfuTableEscape
  bool uncertain;  // escaped because the double reference was too close to a rounding boundary
};
FB_SFU_HD inline SfuTableDelta sfu_table_delta(int fn, int nbits, bool sign_magnitude, std::uint32_t j,
                                               std::uint32_t value) {
  bool uncertain = false;
  const std::uint32_t half = 1u << nbits;
  const double frac = ldexp(static_cast<double>(sign_magnitude ? j % half : j), -nbits);  // in [0,1)
  const double arg = sign_magnitude && j >= half ? -frac : frac;
  const float ref = sfu_round_reference(
      fn == kSfuTableEx2 ? exp2(arg) : fn == kSfuTableRcp ? 1.0 / (1.0 + frac) : log2(1.0 + frac), uncertain);
  const long long d = static_cast<long long>(value) - static_cast<long long>(sfu_bits(ref));
  if (uncertain || d < -7 || d > 7) return {kSfuTableEscape, uncertain};
  return {static_cast<int>(d), false};
}

}  // namespace fb::gpu
