// emu/sfu/special_functions.cpp: the SFU models of special_functions.hpp that need no table:
// correct rounding without MPFR, the oracle, ex2 without .ftz, SFU sets and the fast-math
// compositions. The FBSFU1 table file is traces/sfu_table_file.cpp, its models
// emu/sfu/sfu_table_models.cpp.
//
// ---- How `correct` stays correctly rounded without MPFR ----------------------------
// rcp is one exact division through fb::div (emu/ops.hpp), then ftz.
// ex2 and lg2 run stages until one decides the rounding. Each stage computes an
// approximation A of the exact value v with a stated bound |A - v| <= eps * |v| and
// returns a result only if every value within that bound rounds (RNE) to the same fp32,
// i.e. A is farther than eps * |A| (plus slack) from the nearest midpoint between two
// fp32 neighbours:
//   1. double, eps = 2^-46 (the evaluation error is below about 2^-50): decides all but
//      364 of the 2^32 ex2 inputs (measured by a scan of every input); for ex2 the test
//      converts both ends of a slightly wider interval and compares them;
//   2. double-double, eps = 2^-88 (evaluation error below about 2^-97);
//   3. Boost cpp_bin_float with 192 bits (library exp/log, error a few ulps of 2^-192),
//      decided at 2^-150; an input still undecided there would have to be an exact
//      midpoint, which no fp32 input produces (2^x is rational only for integer x and
//      log2(x) only for powers of two, handled exactly before any stage), so it throws.
// The bounds carry a wide margin over the error analysis in the comments below; the
// exhaustive test (all 2^32 inputs against MPFR) is the proof that the margins hold.
#include "emu/sfu/special_functions.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include <boost/multiprecision/cpp_bin_float.hpp>

#include "emu/array_lanes.hpp"
#include "emu/ops.hpp"
#include "formats/power_of_two.hpp"
#include "formats/format.hpp"

namespace fb {

std::string_view to_string(SpecialFunction f) {
  switch (f) {
    case SpecialFunction::ex2:
      return "ex2";
    case SpecialFunction::rcp:
      return "rcp";
    case SpecialFunction::lg2:
      return "lg2";
  }
  return "?";
}

std::string_view to_string(FinalRounding r) {
  switch (r) {
    case FinalRounding::nearest_even:
      return "nearest_even";
    case FinalRounding::toward_zero:
      return "toward_zero";
    case FinalRounding::down:
      return "down";
    case FinalRounding::up:
      return "up";
  }
  return "?";
}

std::string_view to_string(SfuKind k) {
  switch (k) {
    case SfuKind::correct:
      return "correct";
    case SfuKind::table:
      return "table";
    case SfuKind::oracle:
      return "oracle";
  }
  return "?";
}

namespace {

// fp32's layout, from the format table.
constexpr std::uint32_t kSignBit = formats::fp32.sign_mask();
constexpr std::uint32_t kExpMask = formats::fp32.inf_pattern();
constexpr std::uint32_t kManMask = formats::fp32.man_mask();
constexpr int kManBits = formats::fp32.man_bits;
constexpr int kBias = formats::fp32.bias;

std::uint32_t bits_of(float x) { return std::bit_cast<std::uint32_t>(x); }
float float_of(std::uint32_t b) { return std::bit_cast<float>(b); }

// `&`, not `&&`: no branch, so that the array ex2 loop that flushes its inputs vectorises.
bool is_subnormal_bits(std::uint32_t b) { return ((b & kExpMask) == 0) & ((b & kManMask) != 0); }

// PTX .ftz: a subnormal becomes zero of the same sign (inputs and results alike).
float flush_subnormal(float x) {
  const std::uint32_t b = bits_of(x);
  return is_subnormal_bits(b) ? float_of(b & kSignBit) : x;
}

float quiet_nan() { return float_of(pack_nan(formats::fp32)); }
float plus_inf() { return std::numeric_limits<float>::infinity(); }
// 2^x overflows fp32 from x = emax + 1 = 128 and is subnormal below x = emin = -126.
constexpr float kEx2OverflowFrom = static_cast<float>(formats::fp32.emax() + 1);
constexpr float kEx2NormalFrom = static_cast<float>(formats::fp32.emin());

// ---- double-double arithmetic (value = hi + lo, |lo| <= ulp(hi) / 2) ----------------
struct DoubleDouble {
  double hi, lo;
};

DoubleDouble dd_two_sum(double a, double b) {
  const TwoSum t = two_sum(a, b);  // emu/ops.hpp
  return {t.sum, t.error};
}
DoubleDouble fast_two_sum(double a, double b) {  // requires |a| >= |b| or a == 0
  const double s = a + b;
  return {s, b - (s - a)};
}
DoubleDouble two_prod(double a, double b) {
  const double p = a * b;
  return {p, std::fma(a, b, -p)};
}
DoubleDouble dd_add(DoubleDouble x, DoubleDouble y) {
  const DoubleDouble s = dd_two_sum(x.hi, y.hi);
  const DoubleDouble t = dd_two_sum(x.lo, y.lo);
  const DoubleDouble u = fast_two_sum(s.hi, s.lo + t.hi);
  return fast_two_sum(u.hi, u.lo + t.lo);
}
DoubleDouble dd_mul(DoubleDouble x, DoubleDouble y) {
  const DoubleDouble p = two_prod(x.hi, y.hi);
  return fast_two_sum(p.hi, p.lo + (x.hi * y.lo + x.lo * y.hi));
}
DoubleDouble dd_div_d(DoubleDouble x, double d) {
  const double q1 = x.hi / d;
  const DoubleDouble p = two_prod(q1, d);
  const double r = ((x.hi - p.hi) - p.lo) + x.lo;  // x.hi - p.hi is exact (Sterbenz)
  return fast_two_sum(q1, r / d);
}
DoubleDouble dd_reciprocal(double d) {
  const double hi = 1.0 / d;
  return {hi, std::fma(-hi, d, 1.0) / d};  // the residual 1 - hi*d is exact
}

// ln 2 and log2 e to about 107 bits (checked against MPFR when written).
constexpr DoubleDouble kLn2{0x1.62e42fefa39efp-1, 0x1.abc9e3b39803fp-56};
constexpr DoubleDouble kLog2e{0x1.71547652b82fep+0, 0x1.777d0ffda0d24p-56};

// The fp32 RNE rounding, as bits, of a value known to lie strictly between kept * 2^exponent
// and the midpoint (kept + 1/2) * 2^exponent (above_midpoint 0), or strictly between that
// midpoint and (kept + 1) * 2^exponent (1), kept in [2^23, 2^24), the result normal or
// overflowing. The stages below only know which side of the midpoint the exact value lies on;
// that is all round-to-nearest-even needs, so any value on that side rounds alike: the one a
// quarter of the kept LSB from the midpoint, (4 kept + 1 or 3) * 2^(exponent - 2), has at most
// 26 bits and is a normal double (exponent >= -149), so it is formed exactly and the host's
// IEEE double -> float conversion (RNE, as HardwareArith::f32 and round_into use it) rounds
// it. Why not round_pack: this runs once per element in the array ex2 loop, where a conversion
// vectorises and a call to round_pack does not. (Only the bits: no flags.)
[[gnu::always_inline]] inline std::uint32_t round_decided(std::uint32_t negative, std::uint32_t kept,
                                                          std::int32_t exponent, std::uint32_t above_midpoint) {
  const double inside =
      static_cast<double>(static_cast<std::int32_t>(4 * kept + 1 + 2 * above_midpoint)) * power_of_two(exponent - 2);
  return bits_of(static_cast<float>(inside)) | (negative << 31);
}

// The stage results' "not decided" marker: +0's bits, which no decided result has (normal or inf).
constexpr std::uint32_t kUndecided = 0;

// The midpoint test of round_if_decided for a positive A = hi + lo, without branches (the
// array ex2 loop runs it for every element): whether every value within rel_err * A of A
// rounds alike, and if so how, as round_decided's arguments: kept (in [2^23, 2^24); 0 when
// undecided, which no decided value has), the exponent of its last bit, and the side of the
// midpoint.
struct Decision {
  std::uint32_t kept;
  std::int32_t exponent;
  std::uint32_t above_midpoint;
};
[[gnu::always_inline]] inline Decision decide_positive(double hi, double lo, double rel_err) {
  // Outside the domain this helper serves (NaN too): below fp32's normal range, or from 2^128
  // on (no stage reaches it: 2^x < 2^128 for x < 128, |lg2 x| <= 150). Read on the encoding,
  // one unsigned compare: negative values and NaNs lie above the range.
  constexpr std::uint64_t kFrom = std::bit_cast<std::uint64_t>(power_of_two(formats::fp32.emin()));
  constexpr std::uint64_t kTo = std::bit_cast<std::uint64_t>(power_of_two(formats::fp32.emax() + 1));
  const std::uint64_t hi_bits = std::bit_cast<std::uint64_t>(hi);
  const bool in_domain = hi_bits - kFrom < kTo - kFrom;
  // Everything below is read from the encoding of hi, a positive normal double in the domain:
  // integer operations and exact floating-point ones, so that nothing is undefined outside it
  // (there the result is discarded) and no select is needed, which the array ex2 loop's
  // vectoriser needs (GCC turns a select between doubles into a branch around the
  // floating-point operations after it, and gives up on the loop).
  const int e = static_cast<int>(hi_bits >> 52) - 1023;
  // In units of the fp32 ulp of hi's binade: m_hi = hi * 2^(kManBits - e) in [2^23, 2^24), i.e.
  // hi's significand under the exponent of 2^23; base = floor(m_hi), its top 24 bits; and
  // m_hi - base - 1/2, the signed distance of hi to the midpoint base + 1/2, from the 29 bits
  // below them (exact: a 29-bit integer times 2^-29). 2^(kManBits - e) is a normal double
  // (e in [-126, 127]), so m_lo is the product times_power_of_two would form.
  constexpr std::uint64_t kFraction = (std::uint64_t{1} << 52) - 1;
  constexpr int kBelow = 52 - kManBits;  // the double's fraction bits under the fp32 ulp
  const double m_hi = std::bit_cast<double>((hi_bits & kFraction) | (std::uint64_t{1023 + kManBits} << 52));
  const double m_lo = lo * power_of_two(kManBits - e);
  const auto base = static_cast<std::uint32_t>((hi_bits & kFraction) >> kBelow) | (1u << kManBits);
  const std::int32_t below_midpoint =
      static_cast<std::int32_t>(hi_bits & ((std::uint64_t{1} << kBelow) - 1)) - (std::int32_t{1} << (kBelow - 1));
  // Signed distance from A to the midpoint base + 1/2; the only midpoint within
  // reach, since |m_lo| < 2^-28 and the error bound is far below 1/2.
  const double to_midpoint =
      static_cast<double>(below_midpoint) * power_of_two(-kBelow) + m_lo;  // rounded once, in the + m_lo
  const double margin = 2.0 * rel_err * m_hi + 0x1p-50 * std::fabs(to_midpoint);
  const bool decided = in_domain & !(std::fabs(to_midpoint) <= margin);  // `&`: no branch
  return {base & (0u - static_cast<std::uint32_t>(decided)), e - kManBits, to_midpoint > 0 ? 1u : 0u};
}

// The fp32 (RNE) rounding of a non-zero v known only as A = hi + lo with
// |A - v| <= rel_err * |v|, if every value in that interval rounds the same way.
// The result must lie in fp32's normal range or overflow (true for ex2 and lg2 here).
// Why this is not just round_pack of A: A is an approximation, so the question is whether the
// whole interval around it rounds one way (the midpoint test, decide_positive); only the final
// rounding, once decided, is done (round_decided). RNE is symmetric: the sign is set last.
std::optional<float> round_if_decided(DoubleDouble a, double rel_err) {
  const bool negative = a.hi < 0;
  const Decision d = decide_positive(std::fabs(a.hi), negative ? -a.lo : a.lo, rel_err);
  if (d.kept == 0) return std::nullopt;
  return float_of(round_decided(negative ? 1u : 0u, d.kept, d.exponent, d.above_midpoint));
}

// ---- multiprecision last resort -----------------------------------------------------
using BigFloat =
    boost::multiprecision::number<boost::multiprecision::cpp_bin_float<192, boost::multiprecision::digit_base_2>,
                                  boost::multiprecision::et_off>;

// The fp32 (RNE) rounding of v, decided at 2^-150 relative: as round_if_decided, the value is
// only an approximation, so the midpoint test decides and round_decided rounds.
float round_big(const BigFloat& v, const char* what) {
  const bool negative = v < 0;
  int e = 0;
  const BigFloat m = frexp(negative ? BigFloat(-v) : v, &e);    // m in [1/2, 1)
  const BigFloat scaled = ldexp(m, formats::fp32.precision());  // [2^23, 2^24)
  const BigFloat base = floor(scaled);
  const BigFloat to_midpoint = (scaled - base) - BigFloat(0.5);
  if (abs(to_midpoint) < ldexp(BigFloat(1), -150) || e - 1 < formats::fp32.emin()) {
    throw std::logic_error(std::string(what) + ": multiprecision stage could not decide the rounding");
  }
  const auto kept = static_cast<std::uint32_t>(static_cast<double>(base));  // exact: an integer < 2^24
  return float_of(round_decided(negative ? 1u : 0u, kept, e - formats::fp32.precision(), to_midpoint > 0 ? 1u : 0u));
}

// ---- ex2 ------------------------------------------------------------------------------
// Results that need no evaluation: specials, overflow, flushed underflow and the exact
// powers of two (integer x).
std::optional<float> ex2_without_evaluation(float x) {
  if (std::isnan(x)) return quiet_nan();
  if (x >= kEx2OverflowFrom) return plus_inf();  // 2^x >= 2^128 overflows (+inf included)
  if (x < kEx2NormalFrom) return 0.0f;           // 2^x < 2^-126 is subnormal: flushed (-inf included)
  // |x| < 128 here, so the truncated integer is exact and x is an integer when they agree.
  const auto whole = static_cast<int>(x);
  if (x == static_cast<float>(whole)) return static_cast<float>(power_of_two(whole));
  return std::nullopt;
}

// x = k + r with k an integer and |r| <= 1/2, both exact: x has at most 24 significant
// bits and |x| < 128, so x + 0.5 and x - k are exact in double.
struct Ex2Split {
  int k;
  double r;
};
[[gnu::always_inline]] inline Ex2Split split_ex2_argument(double x) {
  // floor(x + 0.5) without the library call: x + 0.5 is exact and |x| < 128, so
  // truncation toward zero, corrected by one below zero, is floor.
  const double shifted = x + 0.5;
  double k = static_cast<double>(static_cast<std::int32_t>(shifted));
  k -= k > shifted ? 1.0 : 0.0;  // a select, not a branch, so that the array loop vectorises
  return {static_cast<int>(k), x - k};
}

// 1/n! for n < 14, rounded to double.
constexpr std::array<double, 14> kInverseFactorial = [] {
  std::array<double, 14> c{};
  double f = 1.0;
  for (int n = 0; n < 14; ++n) {
    if (n > 0) f *= n;  // exact: 13! < 2^53
    c[n] = 1.0 / f;
  }
  return c;
}();

// 2^(j/64) for j in [0, 64), each correctly rounded to double (from 192-bit values, which no
// midpoint between doubles can confuse: 2^(j/64) is irrational for j > 0).
const std::array<double, 64>& ex2_fraction_table() {
  static const std::array<double, 64> table = [] {
    std::array<double, 64> t{};
    const BigFloat ln2 = log(BigFloat(2));
    for (int j = 0; j < 64; ++j) {
      int e = 0;
      const BigFloat m = frexp(exp(BigFloat(j) / 64 * ln2), &e);  // [1/2, 1)
      const BigFloat scaled = ldexp(m, 53);
      BigFloat kept = floor(scaled);
      if (scaled - kept > BigFloat(0.5)) kept += 1;
      t[static_cast<std::size_t>(j)] = std::ldexp(static_cast<double>(kept), e - 53);  // kept <= 2^53: exact
    }
    return t;
  }();
  return table;
}

// The double stage for n <= kEx2StageChunk inputs: bits[i] = its fp32 result for x[i], or
// kUndecided. The scalar stage (ex2_stage_double, n = 1) and the array one
// (ex2_correct_ftz_array) both run it, so they are the same function.
// x = k + j/64 + r with n = round(64 x) = 64 k + j, j in [0, 64), |r| <= 1/128, all exact (64 x
// is exact in double, and so is 64 x + 1/2 once |64 x| >= 1/2; below that the sum lies in
// (0, 1) however it rounds, so its floor is 0; r = x - n/64 is exact: for |x| < 1/128 it is x,
// otherwise its bits lie between 2^-8 and x's last bit, at or above 2^-30). 2^x = 2^k * T[j] * exp(t),
// t = r ln2, |t| <= 0.00542. Taylor to t^5: truncation below 0.00542^6/720 < 2^-54; t's two
// roundings (ln2's and the product's) move exp(t) by below 2^-59; Horner in double, 1/n!
// rounded, adds about 1.1 * 2^-53 (the last addition's rounding; the earlier ones are scaled by
// |t|); T[j] and the product p * T[j] one 2^-53 each. Total below 2^-51; claimed 2^-46.
// It runs in passes over the elements, each Horner step over all of them: every element sees
// the same operations in the same order as alone, but the steps of different elements do not
// wait for each other (one element's Horner chain is latency-bound) and each step's loop
// vectorises.
// Requires x[i] in [-126, 128) (what ex2_without_evaluation leaves): then k is in [-126, 128]
// and 2^k a normal double, so the product times 2^k is what times_power_of_two would form.
constexpr std::size_t kEx2StageChunk = 256;
[[gnu::always_inline]] inline void ex2_stage_double_bits(const float* x, std::uint32_t* bits, std::size_t n) {
  const double* const fraction = ex2_fraction_table().data();
  double t[kEx2StageChunk], p[kEx2StageChunk], scale[kEx2StageChunk];
  for (std::size_t i = 0; i < n; ++i) {
    // floor(64 x + 1/2) without the library call, as split_ex2_argument does.
    const double shifted = static_cast<double>(x[i]) * 64.0 + 0.5;
    std::int32_t whole = static_cast<std::int32_t>(shifted);
    whole -= static_cast<double>(whole) > shifted ? 1 : 0;  // a select, so that the loop vectorises
    t[i] = (static_cast<double>(x[i]) - static_cast<double>(whole) * (1.0 / 64)) * kLn2.hi;
    scale[i] = fraction[whole & 63] * power_of_two(whole >> 6);  // exact: a power of two
    p[i] = kInverseFactorial[5];
  }
  for (int c = 4; c >= 0; --c)
    for (std::size_t i = 0; i < n; ++i) p[i] = p[i] * t[i] + kInverseFactorial[static_cast<std::size_t>(c)];
  // The decision: with A = p * 2^k and |A - v| <= 2^-46 v, v lies in [A (1 - 2^-46), A (1 + 2^-45)],
  // and the double products A (1 -+ 2^-45), each rounded once by at most 2^-53 relative, bracket
  // that interval. RNE into fp32 is monotonic, so where both ends convert to the same fp32, v
  // does too, and that is the result; otherwise kUndecided (a mask, not a select: see
  // decide_positive for why). Both ends are normal or both overflow for x in [-126, 128): 2^x
  // is at least 2^-126 (2^(2^-17) 2^-126 for the smallest non-integer) and at most 2^(128 - 2^-17),
  // far from fp32's overflow threshold. (The fa2-sm80 forward ran 6% faster than with
  // decide_positive's midpoint test here.)
  for (std::size_t i = 0; i < n; ++i) {
    const double a = p[i] * scale[i];
    const std::uint32_t above = bits_of(static_cast<float>(a * (1.0 + 0x1p-45)));
    const std::uint32_t below = bits_of(static_cast<float>(a * (1.0 - 0x1p-45)));
    bits[i] = above & (0u - static_cast<std::uint32_t>(above == below));
  }
}

std::optional<float> ex2_stage_double(float x) {
  std::uint32_t bits = kUndecided;
  ex2_stage_double_bits(&x, &bits, 1);
  if (bits == kUndecided) return std::nullopt;
  return float_of(bits);
}

// Same series in double-double to t^27 (truncation below 2^-140), Horner as
// p = 1 + t p / n; 27 steps of three double-double operations, each within a few
// 2^-104, keep the error below about 2^-97. Claimed 2^-88.
std::optional<float> ex2_stage_double_double(float x) {
  const Ex2Split s = split_ex2_argument(x);
  const DoubleDouble tp = two_prod(s.r, kLn2.hi);
  const DoubleDouble t = fast_two_sum(tp.hi, tp.lo + s.r * kLn2.lo);
  DoubleDouble p{1.0, 0.0};
  for (int n = 27; n >= 1; --n) p = dd_add({1.0, 0.0}, dd_div_d(dd_mul(t, p), n));
  return round_if_decided({times_power_of_two(p.hi, s.k), times_power_of_two(p.lo, s.k)}, 0x1p-88);
}

float ex2_stage_multiprecision(float x) {
  const BigFloat v = exp(BigFloat(x) * log(BigFloat(2)));
  return round_big(v, "ex2_correct_ftz");
}

// ---- lg2 ------------------------------------------------------------------------------
std::optional<float> lg2_without_evaluation(float x) {
  if (std::isnan(x)) return quiet_nan();
  if (x == 0.0f) return -plus_inf();  // +-0 and flushed subnormals
  if (x < 0.0f) return quiet_nan();   // -inf included
  if (std::isinf(x)) return plus_inf();
  const std::uint32_t b = bits_of(x);
  if ((b & kManMask) == 0) return static_cast<float>(static_cast<int>(b >> kManBits) - kBias);  // exact
  return std::nullopt;
}

// x = 2^e m with m in [sqrt(1/2), sqrt(2)), m != 1; m - 1 and m + 1 are exact in double
// (m has 24 bits, m + 1 < 2.5 needs at most 26).
struct Lg2Split {
  int e;
  double m;
};
Lg2Split split_lg2_argument(float x) {
  const std::uint32_t b = bits_of(x);
  int e = static_cast<int>(b >> kManBits) - kBias;
  double m = 1.0 + times_power_of_two(static_cast<double>(b & kManMask), -kManBits);
  if ((b & kManMask) > 0x3504f3u) m *= 0.5, e += 1;  // m > 1.41421354 (just above sqrt 2)
  return {e, m};
}

// ln m = 2 atanh(s) = 2 s sum z^j / (2j + 1), s = (m - 1)/(m + 1), z = s^2 <= 0.0295.
// Terms to z^10: truncation below 2^-60 relative. Rounding of s, z, the Horner steps
// and the log2 e multiply: a few 2^-53 relative to log2 m. Adding e (when e != 0,
// |result| >= 1/2 >= |log2 m|) adds 2^-53. Total below 2^-50; claimed 2^-46.
std::optional<float> lg2_stage_double(float x) {
  const Lg2Split sp = split_lg2_argument(x);
  const double s = (sp.m - 1.0) / (sp.m + 1.0);
  const double z = s * s;
  double p = 1.0 / 21.0;
  for (int j = 9; j >= 0; --j) p = p * z + 1.0 / (2 * j + 1);
  const double log2_m = 2.0 * s * p * kLog2e.hi;
  return round_if_decided({sp.e + log2_m, 0.0}, 0x1p-46);
}

// The same series in double-double to z^22 (truncation below 2^-120); s from an exact
// division residual. Error below about 2^-98; claimed 2^-88.
std::optional<float> lg2_stage_double_double(float x) {
  const Lg2Split sp = split_lg2_argument(x);
  const double a = sp.m - 1.0, b = sp.m + 1.0;
  const double q = a / b;
  const DoubleDouble s = fast_two_sum(q, std::fma(-q, b, a) / b);
  const DoubleDouble z = dd_mul(s, s);
  DoubleDouble p = dd_reciprocal(45.0);
  for (int j = 21; j >= 0; --j) p = dd_add(dd_mul(p, z), dd_reciprocal(2.0 * j + 1.0));
  DoubleDouble ln_m = dd_mul(s, p);
  ln_m.hi *= 2.0, ln_m.lo *= 2.0;
  const DoubleDouble log2_m = dd_mul(ln_m, kLog2e);
  return round_if_decided(dd_add({static_cast<double>(sp.e), 0.0}, log2_m), 0x1p-88);
}

float lg2_stage_multiprecision(float x) {
  const BigFloat v = log(BigFloat(x)) / log(BigFloat(2));
  return round_big(v, "lg2_correct_ftz");
}

}  // namespace

std::optional<float> ex2_correct_ftz_at(float x, CorrectStage stage) {
  x = flush_subnormal(x);
  if (auto r = ex2_without_evaluation(x)) return r;
  switch (stage) {
    case CorrectStage::double_only:
      return ex2_stage_double(x);
    case CorrectStage::double_double:
      return ex2_stage_double_double(x);
    case CorrectStage::multiprecision:
      return ex2_stage_multiprecision(x);
  }
  return std::nullopt;
}

std::optional<float> lg2_correct_ftz_at(float x, CorrectStage stage) {
  x = flush_subnormal(x);
  if (auto r = lg2_without_evaluation(x)) return r;
  switch (stage) {
    case CorrectStage::double_only:
      return lg2_stage_double(x);
    case CorrectStage::double_double:
      return lg2_stage_double_double(x);
    case CorrectStage::multiprecision:
      return lg2_stage_multiprecision(x);
  }
  return std::nullopt;
}

float ex2_correct_ftz(float x) {
  x = flush_subnormal(x);
  if (auto r = ex2_without_evaluation(x)) return *r;
  if (auto r = ex2_stage_double(x)) return *r;
  if (auto r = ex2_stage_double_double(x)) return *r;
  return ex2_stage_multiprecision(x);
}

namespace {
// ex2_correct_ftz_array's loop, compiled for the baseline and (where the CPU has them, chosen at
// run time as the array rounding loops choose, emu/array_lanes.hpp) for AVX2 and AVX-512: the
// same operations on the same doubles in every build (no contraction: -ffp-contract=off), so
// the same bits; only the vector width differs.
[[gnu::always_inline]] inline void ex2_correct_ftz_array_body(const float* x, float* y, std::size_t n) {
  float args[kEx2StageChunk];
  std::uint32_t bits[kEx2StageChunk];
  std::uint32_t redo[kEx2StageChunk];
  for (std::size_t first = 0; first < n; first += kEx2StageChunk) {
    const std::size_t count = std::min(kEx2StageChunk, n - first);
    const float* xc = x + first;
    float* yc = y + first;
    // ex2_correct_ftz's first two steps for every element: the inputs that reach the double
    // stage (finite non-integers in [-126, 128) after the flush, those ex2_without_evaluation
    // leaves) get its result where it decides; the others run the stage on a stand-in
    // argument, so that the chunk runs it as a whole, and are redone. (The integers are found
    // after the stage, in a loop of its own: here GCC would skip the test where the input is
    // out of range, a branch that stops the vectoriser.)
    for (std::size_t i = 0; i < count; ++i) {
      // flush_subnormal, and the stand-in: -126 for an input out of range (any argument in
      // range would do, the element is redone). Both select between encodings, not floats (see
      // decide_positive for why).
      std::uint32_t xb;
      std::memcpy(&xb, xc + i, sizeof xb);  // (bits_of(xc[i]) leaves the loop unvectorised)
      const std::uint32_t flushed = is_subnormal_bits(xb) ? xb & kSignBit : xb;
      // xi >= -126 && xi < 128 (false for NaN), on the sign and magnitude of the encoding.
      const std::uint32_t negative = flushed >> 31, magnitude = flushed & ~kSignBit;
      const bool in_range = magnitude < (negative != 0 ? bits_of(-kEx2NormalFrom) + 1 : bits_of(kEx2OverflowFrom));
      args[i] = float_of(in_range ? flushed : bits_of(kEx2NormalFrom));
      redo[i] = in_range ? 0u : 1u;
    }
    ex2_stage_double_bits(args, bits, count);
    // The decided results as they are, then (rarely: specials, integers, undecided) a pass that
    // redoes the others, so that the first loop has no call in it.
    std::uint32_t any_redo = 0;
    for (std::size_t i = 0; i < count; ++i) {
      const bool integer = args[i] == static_cast<float>(static_cast<std::int32_t>(args[i]));  // |args| < 128
      redo[i] |= (integer | (bits[i] == kUndecided)) ? 1u : 0u;                                // `|`: no branch
      any_redo |= redo[i];
      yc[i] = float_of(bits[i]);
    }
    if (any_redo == 0) continue;
    for (std::size_t i = 0; i < count; ++i)
      if (redo[i] != 0) yc[i] = ex2_correct_ftz(xc[i]);
  }
}

#ifdef FLASHBITS_LANES_MULTIVERSION
[[FLASHBITS_TARGET_AVX2]] void ex2_correct_ftz_array_avx2(const float* x, float* y, std::size_t n) {
  ex2_correct_ftz_array_body(x, y, n);
}
[[FLASHBITS_TARGET_AVX512]] void ex2_correct_ftz_array_avx512(const float* x, float* y, std::size_t n) {
  ex2_correct_ftz_array_body(x, y, n);
}
#endif
}  // namespace

void ex2_correct_ftz_array(const float* x, float* y, std::size_t n) {
#ifdef FLASHBITS_LANES_MULTIVERSION
  switch (array_lanes::lane_isa()) {
    case array_lanes::LaneIsa::avx512:
      return ex2_correct_ftz_array_avx512(x, y, n);
    case array_lanes::LaneIsa::avx2:
      return ex2_correct_ftz_array_avx2(x, y, n);
    case array_lanes::LaneIsa::baseline:
      break;
  }
#endif
  ex2_correct_ftz_array_body(x, y, n);
}

float lg2_correct_ftz(float x) {
  x = flush_subnormal(x);
  if (auto r = lg2_without_evaluation(x)) return *r;
  if (auto r = lg2_stage_double(x)) return *r;
  if (auto r = lg2_stage_double_double(x)) return *r;
  return lg2_stage_multiprecision(x);
}

float rcp_correct_ftz(float x) {
  const Rounded q = div(formats::fp32, bits_of(1.0f), bits_of(flush_subnormal(x)), RoundingSpec{});
  return flush_subnormal(float_of(q.bits));
}

float correct_ftz(SpecialFunction f, float x) {
  switch (f) {
    case SpecialFunction::ex2:
      return ex2_correct_ftz(x);
    case SpecialFunction::rcp:
      return rcp_correct_ftz(x);
    case SpecialFunction::lg2:
      return lg2_correct_ftz(x);
  }
  return quiet_nan();
}

// ---- models ---------------------------------------------------------------------------
namespace {

class CorrectModel final : public SpecialFunctionModel {
 public:
  explicit CorrectModel(SpecialFunction f, std::string note = {}) : f_(f), note_(std::move(note)) {}
  SpecialFunction function() const override { return f_; }
  SfuKind kind() const override { return SfuKind::correct; }
  bool hardware_measured() const override { return false; }
  std::string describe() const override {
    return std::string(to_string(f_)) + ": correct (correctly rounded fp32 with ftz; UNMEASURED on hardware)" +
           (note_.empty() ? std::string() : " " + note_);
  }
  float evaluate(float x) const override { return correct_ftz(f_, x); }
  void evaluate_array(const float* x, float* y, std::size_t n) const override {
    if (f_ == SpecialFunction::ex2) return ex2_correct_ftz_array(x, y, n);
    SpecialFunctionModel::evaluate_array(x, y, n);
  }

 private:
  SpecialFunction f_;
  std::string note_;
};

class OracleModel final : public SpecialFunctionModel {
 public:
  OracleModel(SpecialFunction f, std::unordered_map<std::uint32_t, std::uint32_t> seen)
      : f_(f), seen_(std::move(seen)) {}
  SpecialFunction function() const override { return f_; }
  SfuKind kind() const override { return SfuKind::oracle; }
  bool hardware_measured() const override { return false; }  // unseen inputs are not
  std::string describe() const override {
    return std::string(to_string(f_)) + ": oracle (" + std::to_string(seen_.size()) +
           " traced values; unseen inputs use correct rounding, UNMEASURED; " + std::to_string(fallback_count()) +
           " fallbacks so far)";
  }
  std::string summary() const override {
    return std::string(to_string(f_)) + " oracle (" + std::to_string(seen_.size()) + " values, others UNMEASURED)";
  }
  float evaluate(float x) const override {
    const auto it = seen_.find(bits_of(x));
    if (it != seen_.end()) return float_of(it->second);
    fallbacks_.fetch_add(1, std::memory_order_relaxed);
    return correct_ftz(f_, x);
  }
  std::uint64_t fallback_count() const override { return fallbacks_.load(std::memory_order_relaxed); }

 private:
  SpecialFunction f_;
  std::unordered_map<std::uint32_t, std::uint32_t> seen_;
  mutable std::atomic<std::uint64_t> fallbacks_{0};
};

}  // namespace

std::unique_ptr<SpecialFunctionModel> make_correct_model(SpecialFunction f) {
  return std::make_unique<CorrectModel>(f);
}

std::unique_ptr<SpecialFunctionModel> make_correct_model(SpecialFunction f, std::string note) {
  return std::make_unique<CorrectModel>(f, std::move(note));
}

std::unique_ptr<SpecialFunctionModel> make_oracle_model(SpecialFunction f,
                                                        std::unordered_map<std::uint32_t, std::uint32_t> seen) {
  return std::make_unique<OracleModel>(f, std::move(seen));
}

namespace {

// ex2.approx.f32 without .ftz from a .ftz ex2 model (make_ex2_no_ftz_model).
class Ex2NoFtzModel final : public SpecialFunctionModel {
 public:
  explicit Ex2NoFtzModel(std::shared_ptr<const SpecialFunctionModel> ftz) : ftz_(std::move(ftz)) {}
  SpecialFunction function() const override { return SpecialFunction::ex2; }
  SfuKind kind() const override { return ftz_->kind(); }
  bool hardware_measured() const override { return ftz_->hardware_measured(); }
  std::string describe() const override {
    return "ex2 without .ftz (ex2.approx.f32): x < -126 gives RN(ex2ftz(x * 0.5)^2) with subnormal results "
           "kept (the rule measured on an H200 on all 2^32 inputs), ex2ftz = [" +
           ftz_->describe() + "]";
  }
  std::string summary() const override { return ftz_->summary() + " + no-ftz rule"; }
  float evaluate(float x) const override {
    if (!(x < kEx2NormalFrom)) return ftz_->evaluate(x);
    const float y = ftz_->evaluate(x * 0.5f);                                       // exact: x is normal or -inf
    const Rounded sq = mul(formats::fp32, bits_of(y), bits_of(y), RoundingSpec{});  // one RNE rounding, subnormals kept
    return float_of(sq.bits);
  }
  std::uint64_t fallback_count() const override { return ftz_->fallback_count(); }

 private:
  std::shared_ptr<const SpecialFunctionModel> ftz_;
};

}  // namespace

// ---- sets and compositions ----------------------------------------------------------------
bool SfuSet::all_hardware_measured() const {
  return ex2 && rcp && lg2 && ex2->hardware_measured() && rcp->hardware_measured() && lg2->hardware_measured();
}

std::string SfuSet::describe() const {
  std::string d;
  for (const auto* m : {&ex2, &rcp, &lg2}) {
    if (!d.empty()) d += "; ";
    d += *m ? (*m)->describe() : std::string("(no model)");
  }
  return d;
}

std::string SfuSet::summary() const {
  std::string d;
  for (const auto* m : {&ex2, &rcp, &lg2}) {
    if (!d.empty()) d += ", ";
    d += *m ? (*m)->summary() : std::string("(no model)");
  }
  return d;
}

std::unique_ptr<SpecialFunctionModel> make_ex2_no_ftz_model(std::shared_ptr<const SpecialFunctionModel> ex2_ftz) {
  if (!ex2_ftz || ex2_ftz->function() != SpecialFunction::ex2) {
    throw std::invalid_argument("make_ex2_no_ftz_model: needs a model of ex2");
  }
  return std::make_unique<Ex2NoFtzModel>(std::move(ex2_ftz));
}

SfuSet correct_sfu_set() {
  return {make_correct_model(SpecialFunction::ex2), make_correct_model(SpecialFunction::rcp),
          make_correct_model(SpecialFunction::lg2)};
}

namespace {
// mul.ftz.f32 with round-to-nearest-even: flush inputs, one exact rounding, flush result.
float mul_ftz(float a, float b) {
  const Rounded p = mul(formats::fp32, bits_of(flush_subnormal(a)), bits_of(flush_subnormal(b)), RoundingSpec{});
  return flush_subnormal(float_of(p.bits));
}
}  // namespace

float fast_exp(const SfuSet& s, float x) { return s.ex2->evaluate(mul_ftz(x, float_of(kLog2eFp32Bits))); }
float fast_log(const SfuSet& s, float x) { return mul_ftz(s.lg2->evaluate(x), float_of(kLn2Fp32Bits)); }

}  // namespace fb
