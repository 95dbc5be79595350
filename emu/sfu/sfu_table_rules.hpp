// emu/sfu/sfu_table_rules.hpp: the ONE statement of how an FBSFU1 table model turns an fp32 input
// into fp32 output bits (forms 1..5 of traces/sfu_table_file.cpp), shared by the host emulator
// (emu/sfu/sfu_table_models.cpp's table models) and CUDA device code (fb-sfu-probe evaluates
// captured tables with these on all 2^32 inputs). Header-only, plain C++ when not compiled
// by nvcc, __host__ __device__ under nvcc; it needs nothing but formats/format.hpp so that
// gpu/ also builds standalone on a device machine.
//
// Contract (every function returns fp32 bits; "ftz" = a subnormal becomes zero of its sign):
// ex2_table_model(x, N, rounding, T, nan_output), T with 2^N entries: input ftz; NaN ->
//   nan_output; x >= 128 -> +inf; x < -160 -> +0; otherwise xf = x * 2^N rounded to an integer
//   by `rounding` (ArgRounding = emu FixedPointRounding numbering: 0 floor, 1 nearest-even,
//   2 toward zero), k = floor(xf / 2^N), i = xf mod 2^N (ex2_fixed_point_split), result
//   T[i] * 2^k, a NaN T[i] returned as is, |result| >= 2^128 -> inf and |result| < 2^-126 ->
//   zero, both with T[i]'s sign. (FBSFU1 form 1.)
// rcp_table_model(x, T, nan_output), T with 2^23 entries (T[m] = the hardware's bits for 1.m):
//   input ftz; NaN -> nan_output; +-0 -> +-inf; +-inf -> +-0; a normal x = s * 2^e * 1.m ->
//   v = s * T[m] * 2^-e exactly, a NaN T[m] as is, |v| >= 2^128 -> inf and |v| < 2^-126 ->
//   zero, both with v's sign. (Form 2.)
// lg2_exponent_split_model(x_bits, t_bits, add): for a positive normal x = 2^e * 1.m,
//   RN_fp32(e + T) with T = t_bits: ONE IEEE round-to-nearest-even fp32 addition done by
//   `add` (e is exact in fp32), a subnormal sum flushed, a NaN T returned as is. `add`
//   defaults to NativeFp32Add (the device's __fadd_rn, i.e. add.rn.f32 without .ftz, never
//   contracted; the host's float + under the default rounding mode); the emulator passes
//   fb::add (round_pack), so the rule is stated once while the emulator keeps the one
//   rounding routine, and tests/test_probe_file.cpp checks the two adders agree bit for bit.
// lg2_table_model(x, T, nan_output, add), T with 2^23 entries: input ftz; NaN and x < 0
//   (-inf included) -> nan_output; +-0 -> -inf; +inf -> +inf; a positive normal x ->
//   lg2_exponent_split_model(x, T[m], add). (Form 3.)
// ex2_sign_magnitude_table_model(x, N, T, nan_output), T with 2^(N+1) entries (T+[i] = the
//   hardware's bits for i * 2^-N, then T-[i] for -i * 2^-N): input ftz; NaN -> nan_output;
//   x >= 128 -> +inf; x < -160 -> +0; X = floor(|x| * 2^N) (ex2_sign_magnitude_split),
//   k = X >> N, i = X mod 2^N; x >= 0 (+0 included): T+[i] * 2^k, x < 0 (-0 included):
//   T-[i] * 2^-k; NaN entry as is, |result| >= 2^128 -> inf, < 2^-126 -> zero (T's sign).
//   (Form 4.)
// lg2_extended_model(e, t_bits, r, g, rounding): for a positive normal x = 2^e * 1.m: a NaN
//   or infinite T as is; else the exact e + L, L = T + R * ulp(T) * 2^-g (ulp of a zero or
//   subnormal T: 2^-149), rounded once (FinalRoundingCode = emu FinalRounding numbering:
//   0 nearest-even, 1 toward zero, 2 down, 3 up), an exact zero +0, a result below 2^-126
//   flushed to zero of its sign. Requires g in 0..24, |R| < 2^30, |L| < 2. Integer
//   arithmetic only, so host and device agree. (Form 5's rule; emu lg2_extended_rule.)
// lg2_extended_table_model(x, T, R, g, rounding, nan_output): specials as lg2_table_model,
//   x == 1 -> +0 (measured: an H200 returns +0 for 1 but e + L[0] with L[0] in (2^-24, 2^-23]
//   for every other power of two 2^e, so T[0] is L[0]'s representative, not the hardware's
//   lg2(1)), a positive normal x -> lg2_extended_model(e, T[m], R[m], g, rounding).
//
// Why sfu_round_fixed is not emu/rounding.hpp's round_pack: this code must compile for the
// device, and round_pack (host-only, with events, stochastic rounding and flags) does not;
// and form 5 decides "below 2^-126" on the value rounded to 24 bits with unbounded exponent
// range and then flushes, whereas round_pack would round a tiny value to a subnormal first
// (e.g. 2^-126 * (1 - 2^-24) stays below 2^-126 here but is a tie that round_pack's subnormal
// rounding takes up to 2^-126). tests/test_probe_file.cpp checks lg2_extended_model against
// MPFR's rounding of the exact e + L.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "formats/format.hpp"

#if defined(__CUDACC__)
#define FB_HD __host__ __device__
#else
#define FB_HD
#endif

namespace fb::sfu_rules {

// fp32's layout, from the format table (formats/format.hpp), as plain constants that device
// code can use.
constexpr std::uint32_t kFp32SignBit = formats::fp32.sign_mask();
constexpr std::uint32_t kFp32ExpMask = formats::fp32.inf_pattern();  // also +inf's bits
constexpr std::uint32_t kFp32ManMask = formats::fp32.man_mask();
constexpr int kFp32ManBits = formats::fp32.man_bits;
constexpr int kFp32Bias = formats::fp32.bias;
constexpr std::uint32_t kFp32ExpFieldMax = formats::fp32.exp_field_max();

// Argument rounding of the ex2 fixed-point form (emu FixedPointRounding numbering).
enum ArgRounding : int { kFloor = 0, kNearestEven = 1, kTowardZero = 2, kArgRoundingCount };
// Final rounding of the lg2 extended form (emu FinalRounding numbering).
enum FinalRoundingCode : int {
  kFinalNearestEven = 0,
  kFinalTowardZero = 1,
  kFinalDown = 2,
  kFinalUp = 3,
  kFinalRoundingCount
};

FB_HD inline std::uint32_t sfu_bits(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
FB_HD inline float sfu_float(std::uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
// PTX .ftz on inputs and outputs, and the models' input: a subnormal becomes zero of its sign.
FB_HD inline float sfu_ftz(float x) {
  const std::uint32_t b = sfu_bits(x);
  return ((b & kFp32ExpMask) == 0 && (b & kFp32ManMask) != 0) ? sfu_float(b & kFp32SignBit) : x;
}
FB_HD inline int sfu_unbiased_exponent(std::uint32_t normal_bits) {
  return static_cast<int>((normal_bits >> kFp32ManBits) & kFp32ExpFieldMax) - kFp32Bias;
}

// x * 2^N as an integer under the argument rounding (exact: |x * 2^N| < 2^36 in double for
// the x that reach it). Nearest-even is spelled out rather than rint so that the host result
// does not depend on the floating-point environment.
FB_HD inline long long sfu_fixed_point(float x, int nbits, int rounding) {
  const double scaled = ldexp(static_cast<double>(x), nbits);
  double fixed = floor(scaled);
  if (rounding == kTowardZero) {
    fixed = trunc(scaled);
  } else if (rounding == kNearestEven) {
    const double rest = scaled - fixed;  // exact
    if (rest > 0.5 || (rest == 0.5 && fmod(fixed, 2.0) != 0)) fixed += 1.0;
  }
  return static_cast<long long>(fixed);
}

// The form 1 split of x: x * 2^N as a fixed-point number k.i, k = floor(xf / 2^N) the power
// of two, i = xf mod 2^N the table index. fb-sfu-probe's hypothesis kernel keys the measured
// outputs with this same split, so the table it captures is indexed as the model reads it.
struct Ex2FixedPointSplit {
  long long k;
  std::uint32_t index;
};
FB_HD inline Ex2FixedPointSplit ex2_fixed_point_split(float x, int nbits, int rounding) {
  const long long xf = sfu_fixed_point(x, nbits, rounding);
  return {xf >> nbits, static_cast<std::uint32_t>(xf & ((1ll << nbits) - 1))};  // arithmetic shift: floor
}

// The ex2 forms' special regions: from kEx2InfFrom up the result is +inf, below kEx2ZeroBelow
// +0, without consulting the table (an assumption, not measured).
constexpr float kEx2InfFrom = 128.f;
constexpr float kEx2ZeroBelow = -160.f;

// A table entry t times 2^k as an ftz output register holds it: a NaN entry as is, results
// from 2^128 up saturate to inf and results below 2^-126 flush to zero, both with t's sign.
FB_HD inline std::uint32_t sfu_scale_entry(std::uint32_t t_bits, long long k) {
  const float t = sfu_float(t_bits);
  if (t != t) return t_bits;
  const double v = ldexp(static_cast<double>(t), static_cast<int>(k));  // exact in double
  const std::uint32_t sign = t_bits & kFp32SignBit;
  if (fabs(v) >= 0x1p128) return sign | kFp32ExpMask;
  if (fabs(v) < 0x1p-126) return sign;
  return sfu_bits(static_cast<float>(v));  // exact: a 24-bit significand in the normal range
}

FB_HD inline std::uint32_t ex2_table_model(float x, int nbits, int rounding, const std::uint32_t* table,
                                           std::uint32_t nan_output) {
  x = sfu_ftz(x);
  if (x != x) return nan_output;
  if (x >= kEx2InfFrom) return kFp32ExpMask;
  if (x < kEx2ZeroBelow) return 0u;
  const Ex2FixedPointSplit split = ex2_fixed_point_split(x, nbits, rounding);
  return sfu_scale_entry(table[split.index], split.k);
}

// rcp_mantissa key and scale of a normal x = +-2^e * 1.m: the mantissa field m and e.
struct RcpMantissaSplit {
  int e;
  std::uint32_t mantissa;
};
FB_HD inline RcpMantissaSplit rcp_mantissa_split(std::uint32_t x_bits) {
  return {sfu_unbiased_exponent(x_bits), x_bits & kFp32ManMask};
}
// Entries of an rcp_mantissa or lg2 mantissa table: one per mantissa field m of x in [1, 2).
constexpr std::uint32_t kRcpMantissaTableEntries = std::uint32_t{1} << kFp32ManBits;
constexpr std::uint32_t kLg2MantissaTableEntries = std::uint32_t{1} << kFp32ManBits;

FB_HD inline std::uint32_t rcp_table_model(float x, const std::uint32_t* table, std::uint32_t nan_output) {
  x = sfu_ftz(x);
  if (x != x) return nan_output;
  const std::uint32_t sign = sfu_bits(x) & kFp32SignBit;
  if (x == 0.f) return sign | kFp32ExpMask;
  if (fabsf(x) == INFINITY) return sign;
  const RcpMantissaSplit split = rcp_mantissa_split(sfu_bits(x));
  const std::uint32_t t_bits = table[split.mantissa];
  if (sfu_float(t_bits) != sfu_float(t_bits)) return t_bits;
  return sfu_scale_entry(t_bits ^ sign, -split.e);  // the sign flip is exact, zeros included
}

// One IEEE fp32 addition, round to nearest even, subnormal results kept (the default adder
// of the lg2 forms; see the contract above).
struct NativeFp32Add {
  FB_HD float operator()(float a, float b) const {
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
  }
};

template <class Fp32Add = NativeFp32Add>
FB_HD inline std::uint32_t lg2_exponent_split_model(std::uint32_t x_bits, std::uint32_t t_bits, Fp32Add add = {}) {
  const float t = sfu_float(t_bits);
  if (t != t) return t_bits;
  const float e = static_cast<float>(sfu_unbiased_exponent(x_bits));  // exact
  return sfu_bits(sfu_ftz(add(e, t)));
}

template <class Fp32Add = NativeFp32Add>
FB_HD inline std::uint32_t lg2_table_model(float x, const std::uint32_t* table, std::uint32_t nan_output,
                                           Fp32Add add = {}) {
  x = sfu_ftz(x);
  if (x != x) return nan_output;
  if (x == 0.f) return kFp32SignBit | kFp32ExpMask;  // -inf
  if (x < 0.f) return nan_output;
  if (x == INFINITY) return kFp32ExpMask;
  const std::uint32_t x_bits = sfu_bits(x);
  return lg2_exponent_split_model(x_bits, table[x_bits & kFp32ManMask], add);
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
FB_HD inline Ex2SignMagnitudeSplit ex2_sign_magnitude_split(float x, int nbits) {
  const double scaled = ldexp(fabs(static_cast<double>(x)), nbits);  // exact: |x| < 2^8 where used
  const auto fixed = static_cast<unsigned long long>(floor(scaled));
  const bool negative = (sfu_bits(x) & kFp32SignBit) != 0;
  const std::uint32_t i = static_cast<std::uint32_t>(fixed & ((1ull << nbits) - 1));
  return {static_cast<int>(fixed >> nbits), negative ? (1u << nbits) + i : i, negative};
}

FB_HD inline std::uint32_t ex2_sign_magnitude_table_model(float x, int nbits, const std::uint32_t* table,
                                                          std::uint32_t nan_output) {
  x = sfu_ftz(x);
  if (x != x) return nan_output;
  if (x >= kEx2InfFrom) return kFp32ExpMask;
  if (x < kEx2ZeroBelow) return 0u;
  const Ex2SignMagnitudeSplit split = ex2_sign_magnitude_split(x, nbits);
  return sfu_scale_entry(table[split.index], split.negative ? -split.k : split.k);
}

// ---- lg2 extended (FBSFU1 form 5) ---------------------------------------------------------
FB_HD inline int sfu_clz64(unsigned long long v) {
#ifdef __CUDA_ARCH__
  return __clzll(static_cast<long long>(v));
#else
  return __builtin_clzll(v);
#endif
}

// s * 2^x (plus a fraction of one unit 2^x, in (0, 1), when `sticky`) rounded to fp32 by
// `rounding` (FinalRoundingCode); an exact zero gives +0 and a result below 2^-126 (decided
// after rounding to 24 bits with unbounded exponent range) flushes to zero of its sign.
// |s| < 2^63. A sticky fraction is only supported where s has at least 24 significant bits
// (where it has fewer it is read as "below half an ulp", which lg2_extended_model never needs).
FB_HD inline std::uint32_t sfu_round_fixed(long long s, int x, bool sticky, int rounding) {
  if (s == 0 && !sticky) return 0u;
  const bool negative = s < 0;
  unsigned long long mag =
      negative ? static_cast<unsigned long long>(-(s + 1)) + 1ull : static_cast<unsigned long long>(s);
  if (negative && sticky) mag -= 1;                   // s + f = -(|s| - f): magnitude |s| - 1 plus the fraction 1 - f
  if (mag == 0) return negative ? kFp32SignBit : 0u;  // below one unit (not reached by the rule)
  const int msb = 63 - sfu_clz64(mag);
  unsigned long long q;
  bool up = false;
  if (msb <= kFp32ManBits) {
    q = mag << (kFp32ManBits - msb);
    up = sticky && ((rounding == kFinalDown && negative) || (rounding == kFinalUp && !negative));
  } else {
    const int shift = msb - kFp32ManBits;
    q = mag >> shift;
    const unsigned long long rest = mag & ((1ull << shift) - 1), half = 1ull << (shift - 1);
    const bool inexact = rest != 0 || sticky;
    up = rounding == kFinalNearestEven ? (rest > half || (rest == half && (sticky || (q & 1ull))))
         : rounding == kFinalDown      ? (negative && inexact)
         : rounding == kFinalUp        ? (!negative && inexact)
                                       : false;
  }
  int exponent = msb + x;  // the value is q * 2^(exponent - 23), q in [2^23, 2^24]
  if (up && ++q == (1ull << (kFp32ManBits + 1))) q >>= 1, ++exponent;
  const std::uint32_t sign = negative ? kFp32SignBit : 0u;
  if (exponent + kFp32Bias >= static_cast<int>(kFp32ExpFieldMax)) return sign | kFp32ExpMask;
  if (exponent + kFp32Bias <= 0) return sign;  // ftz
  return sign | (static_cast<std::uint32_t>(exponent + kFp32Bias) << kFp32ManBits) |
         (static_cast<std::uint32_t>(q) & kFp32ManMask);
}

FB_HD inline std::uint32_t lg2_extended_model(int e, std::uint32_t t_bits, int r, int guard_bits, int rounding) {
  if ((t_bits & kFp32ExpMask) == kFp32ExpMask) return t_bits;  // NaN or inf: as is (e + inf = inf)
  const std::uint32_t biased = (t_bits >> kFp32ManBits) & kFp32ExpFieldMax;
  const long long q = (biased == 0 ? 0ll : (1ll << kFp32ManBits)) | static_cast<long long>(t_bits & kFp32ManMask);
  // L = l * 2^lx exactly
  const long long l = ((t_bits & kFp32SignBit) ? -q : q) * (1ll << guard_bits) + r;
  const int lx = static_cast<int>(biased > 1 ? biased : 1u) - kFp32Bias - kFp32ManBits - guard_bits;
  if (e == 0) return sfu_round_fixed(l, lx, false, rounding);
  // e != 0: units of 2^-55 (|e| * 2^55 + |L| * 2^55 < 2^63); bits of L below them (a tiny T
  // only) become a sticky fraction, which cannot reach the rounding position of |e + L| >= ~1/2.
  const int units = -55;
  long long l55;
  bool sticky = false;
  if (lx >= units) {
    l55 = l * (1ll << (lx - units));
  } else {
    const int shift = units - lx;
    l55 = shift >= 63 ? (l < 0 ? -1ll : 0ll) : (l >> shift);  // floor
    sticky = shift >= 63 ? l != 0 : (l - l55 * (1ll << shift)) != 0;
  }
  return sfu_round_fixed(static_cast<long long>(e) * (1ll << 55) + l55, units, sticky, rounding);
}

FB_HD inline std::uint32_t lg2_extended_table_model(float x, const std::uint32_t* table, const std::int32_t* residuals,
                                                    int guard_bits, int rounding, std::uint32_t nan_output) {
  x = sfu_ftz(x);
  if (x != x) return nan_output;
  if (x == 0.f) return kFp32SignBit | kFp32ExpMask;  // -inf
  if (x < 0.f) return nan_output;
  if (x == INFINITY) return kFp32ExpMask;
  if (x == 1.f) return 0u;  // lg2(1) = +0 exactly; T[0] holds L[0] for the other powers of two
  const std::uint32_t b = sfu_bits(x);
  const std::uint32_t m = b & kFp32ManMask;
  return lg2_extended_model(sfu_unbiased_exponent(b), table[m], residuals[m], guard_bits, rounding);
}

// ---- The table hypotheses --------------------------------------------------------------------
// fb-sfu-probe tests them on the GPU over all 2^32 inputs and fb-sfu-rehearse restates them on
// the CPU; both take each input's entry from here, so the two cannot drift. A hypothesis holds
// when, over its domain, every input's value equals the value of the first input seen at the
// same key: the table it fills is then the table model's table.
struct SfuHypothesisEntry {
  std::uint32_t key;
  std::uint32_t value;
};
// ex2 (both splits): x in [-125, 127), where 2^k * T cannot leave the normal range.
FB_HD inline bool ex2_hypothesis_domain(std::uint32_t in) {
  const float x = sfu_float(in);
  return x >= -125.f && x < 127.f;
}
// ex2 fixed point with N fraction bits: key = the fraction of the fixed-point x * 2^N
// (ex2_fixed_point_split), value = the hardware's bits `hw` minus k in the exponent field.
FB_HD inline SfuHypothesisEntry ex2_fixed_point_entry(std::uint32_t in, std::uint32_t hw, int nbits, int rounding) {
  const Ex2FixedPointSplit split = ex2_fixed_point_split(sfu_ftz(sfu_float(in)), nbits, rounding);
  return {split.index, static_cast<std::uint32_t>(static_cast<long long>(hw) - split.k * (1ll << 23))};
}
// ex2 sign magnitude with N fraction bits: key = x's sign and the N fraction bits of |x|
// truncated (ex2_sign_magnitude_split), value = hw minus (x >= 0) or plus (x < 0) k in the
// exponent field.
FB_HD inline SfuHypothesisEntry ex2_sign_magnitude_entry(std::uint32_t in, std::uint32_t hw, int nbits) {
  const Ex2SignMagnitudeSplit split = ex2_sign_magnitude_split(sfu_ftz(sfu_float(in)), nbits);
  const long long k = split.negative ? -split.k : split.k;
  return {split.index, static_cast<std::uint32_t>(static_cast<long long>(hw) - k * (1ll << 23))};
}
// rcp: normal inputs whose reciprocal is normal (biased exponent 2..252).
FB_HD inline bool rcp_hypothesis_domain(std::uint32_t in) {
  const std::uint32_t biased = (in >> 23) & 0xffu;
  return biased >= 2 && biased <= 252;
}
// rcp mantissa: key = the mantissa field, value = hw without its sign plus the input's unbiased
// exponent in the exponent field (the table holds positive 1.m; negative inputs are checked by
// verifying the table model).
FB_HD inline SfuHypothesisEntry rcp_mantissa_entry(std::uint32_t in, std::uint32_t hw) {
  const RcpMantissaSplit split = rcp_mantissa_split(in);
  return {split.mantissa, static_cast<std::uint32_t>(static_cast<long long>(hw & 0x7fffffffu) + split.e * (1ll << 23))};
}
// lg2 exponent split: positive normal inputs; the prediction for `in` is
// lg2_exponent_split_model(in, the hardware's lg2 of lg2_mantissa_input(in) = 1.m).
FB_HD inline bool lg2_split_domain(std::uint32_t in) {
  const std::uint32_t biased = (in >> 23) & 0xffu;
  return (in >> 31) == 0 && biased != 0 && biased != 255;
}
FB_HD inline std::uint32_t lg2_mantissa_input(std::uint32_t in) { return 0x3f800000u | (in & kFp32ManMask); }

}  // namespace fb::sfu_rules
