// emu/special_functions.cpp: the SFU models of special_functions.hpp: correct rounding
// without MPFR, the FBSFU1 table file (writer, validating loader, model) and the oracle.
//
// ---- How `correct` stays correctly rounded without MPFR ----------------------------
// rcp is one exact division through fb::div (emu/ops.hpp), then ftz.
// ex2 and lg2 run stages until one decides the rounding. Each stage computes an
// approximation A of the exact value v with a stated bound |A - v| <= eps * |v| and
// returns a result only if every value within that bound rounds (RNE) to the same fp32,
// i.e. A is farther than eps * |A| (plus slack) from the nearest midpoint between two
// fp32 neighbours:
//   1. double, eps = 2^-46 (the evaluation error is below about 2^-50): decides all but
//      364 of the 2^32 ex2 inputs (measured by a scan of every input);
//   2. double-double, eps = 2^-88 (evaluation error below about 2^-97);
//   3. Boost cpp_bin_float with 192 bits (library exp/log, error a few ulps of 2^-192),
//      decided at 2^-150; an input still undecided there would have to be an exact
//      midpoint, which no fp32 input produces (2^x is rational only for integer x and
//      log2(x) only for powers of two, handled exactly before any stage), so it throws.
// The bounds carry a wide margin over the error analysis in the comments below; the
// exhaustive test (all 2^32 inputs against MPFR) is the proof that the margins hold.
//
// ---- FBSFU1 table file (version 1), all integers little-endian ---------------------
//   magic         6 bytes  "FBSFU1"
//   function      u8       0 = ex2, 1 = rcp, 2 = lg2
//   form          u8       0 = delta_segments, 1 = ex2_fixed_point (function must be ex2),
//                          2 = rcp_mantissa (function must be rcp),
//                          3 = lg2_exponent_split (function must be lg2)
//   measured      u8       1 = captured on a GPU, 0 = synthetic (tests, hypotheses)
//   source_len    u16      then source_len bytes of UTF-8 provenance (GPU, driver, date)
//   form 0: segment_count u32 (>= 1), then per segment, sorted by first_input and not
//           overlapping:  first_input u32, count u32 (>= 1, first_input + count <= 2^32),
//           delta_stream(count) for inputs first_input .. first_input + count - 1
//   form 1: fraction_bits u8 (N, 1..24), argument_rounding u8 (0 floor, 1 nearest-even,
//           2 toward zero), nan_output u32 (bits returned for a NaN input),
//           delta_stream(2^N) for T[0 .. 2^N - 1]
//   form 2: nan_output u32, delta_stream(2^23) for T[0 .. 2^23 - 1]
//   form 3: nan_output u32, delta_stream(2^23) for T[0 .. 2^23 - 1]
//   form 4: fraction_bits u8 (N, 1..24), nan_output u32, delta_stream(2^N) for T+[0 .. 2^N - 1],
//           delta_stream(2^N) for T-[0 .. 2^N - 1]
//   form 5: nan_output u32, guard_bits u8 (g, 0..24), final_rounding u8 (0 nearest-even,
//           1 toward zero, 2 down, 3 up), delta_stream(2^23) for T[0 .. 2^23 - 1],
//           delta_stream(2^23) for R[0 .. 2^23 - 1]
//   crc32         u32      CRC-32 (IEEE 802.3, as zlib) of every preceding byte
// delta_stream(n): runs until n deltas are read; each run is length u32 (>= 1, at most
//   the deltas still due), width u8 (0..32), then ceil(length * width / 8) bytes holding
//   `length` deltas of `width` bits each, LSB first, two's complement (width 0: all
//   deltas are 0, no bytes). A delta is (output bits - base bits) mod 2^32 read as a
//   signed integer: the signed distance in ulps for same-sign finite values, and width
//   32 encodes any output (NaN payloads, sign changes). The base is correct_ftz of the
//   input (form 0), ex2_correct_ftz(i * 2^-N) (form 1; form 4's T+), ex2_correct_ftz(-i * 2^-N)
//   (form 4's T-), rcp_correct_ftz(1 + m * 2^-23) (form 2) or lg2_correct_ftz(1 + m * 2^-23)
//   (forms 3 and 5's T); form 5's R has base 0 (the stream holds R). An all-correct table costs
//   9 bytes per run; the writer splits deltas into 256-entry chunks and merges
//   neighbouring chunks of equal width.
// ex2_fixed_point hypothesis: xf = round(x * 2^N) per argument_rounding (after input
//   ftz), k = floor(xf / 2^N), i = xf mod 2^N, result = T[i] * 2^k, with results of
//   2^128 or more giving +inf and results below 2^-126 flushed to +0. x >= 128 gives
//   +inf and x < -160 gives +0 without consulting T (an assumption, not measured),
//   +-inf and NaN follow the special values in the header (NaN gives nan_output).
// rcp_mantissa hypothesis: T[m] holds the hardware's output bits for the input 1.m (the
//   fp32 with exponent field 127 and mantissa field m, x in [1, 2)). After input ftz:
//   NaN gives nan_output, +-0 (subnormals included) give +-inf, +-inf give +-0; a normal
//   x = s * 2^e * 1.m (s = +-1, e in -126..127) gives the exact value v = s * T[m] * 2^-e
//   (for a normal T[m] and a normal v: T[m] with its exponent field decreased by e and its
//   sign bit XORed with x's), then |v| >= 2^128 gives inf and
//   |v| < 2^-126 gives zero, both with v's sign (ftz: no subnormal results); a NaN T[m]
//   is returned as is. For a table near 1 / 1.m (entries in (0.5, 1]) nothing overflows
//   and only e >= 126 can flush: e = 127 always, e = 126 unless T[m] >= 1.
// lg2_exponent_split hypothesis: T[m] holds the hardware's output bits for the input 1.m
//   (as for rcp_mantissa). After input ftz: NaN and x < 0 (-inf included) give nan_output
//   (the hardware's NaN; fb-sfu-probe measures it on a NaN input), +-0 (subnormals included)
//   give -inf, +inf gives +inf; a positive normal x = 2^e * 1.m (e in -126..127, powers of
//   two included: T[0] is the hardware's lg2(1)) gives e + T[m] as ONE fp32 addition with
//   round-to-nearest-even (fb::add: exact sum, then round_pack; e is exact in fp32), a
//   subnormal sum flushed to zero of its sign (only e = 0 with a subnormal T[m] gives one),
//   and a NaN T[m] returned as is. The sum is not the correctly rounded lg2(x) in general:
//   T[m] is already rounded, so e + T[m] can round differently from e + lg2(1.m).
// ex2_sign_magnitude hypothesis (what an H200's ex2.approx.ftz.f32 was found to do, N = 23):
//   after input ftz, NaN gives nan_output, x >= 128 gives +inf and x < -160 gives +0 (as form
//   1); otherwise X = floor(|x| * 2^N) (|x| truncated to N fraction bits, exact in double),
//   k = floor(X / 2^N), i = X mod 2^N, and x >= 0 (+0 included) gives T+[i] * 2^k, x < 0 (-0
//   included) gives T-[i] * 2^-k, with results of 2^128 or more giving +inf and results below
//   2^-126 flushed to +0. T+[i] holds the hardware's output for i * 2^-N, T-[i] for -i * 2^-N:
//   the negative side is NOT 2^(1 - frac) / 2 of the two's complement fraction.
// lg2_extended hypothesis: as lg2_exponent_split, but the hardware is taken to hold lg2(1.m)
//   more precisely than fp32 and to round e + L[m] once: L[m] = T[m] + R[m] * ulp(T[m]) *
//   2^-g exactly (T[m] the hardware's output for 1.m when the final rounding is its own, g
//   the guard bits, ulp(T) = 2^(max(biased exponent, 1) - 150)), and a positive normal x =
//   2^e * 1.m gives e + L[m] rounded once by final_rounding (lg2_extended_rule below: exact
//   integer arithmetic; an exact zero gives +0, a result below 2^-126 flushes to zero of its
//   sign; a NaN or infinite T[m] is returned as is). Specials as lg2_exponent_split. With
//   g = 0, R = 0 and nearest-even it is the lg2_exponent_split rule. The loader refuses
//   g > 24, |R| >= 2^30 and entries with |L| >= 2.
#include "emu/special_functions.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>
#include <stdexcept>

#include <boost/multiprecision/cpp_bin_float.hpp>

#include "emu/ops.hpp"
#include "formats/format.hpp"

namespace fb {

std::string_view to_string(SpecialFunction f) {
  switch (f) {
    case SpecialFunction::ex2: return "ex2";
    case SpecialFunction::rcp: return "rcp";
    case SpecialFunction::lg2: return "lg2";
  }
  return "?";
}

std::string_view to_string(FinalRounding r) {
  switch (r) {
    case FinalRounding::nearest_even: return "nearest_even";
    case FinalRounding::toward_zero: return "toward_zero";
    case FinalRounding::down: return "down";
    case FinalRounding::up: return "up";
  }
  return "?";
}

std::string_view to_string(SfuKind k) {
  switch (k) {
    case SfuKind::correct: return "correct";
    case SfuKind::table: return "table";
    case SfuKind::oracle: return "oracle";
  }
  return "?";
}

namespace {

constexpr std::uint32_t kSignBit = 0x80000000u;

std::uint32_t bits_of(float x) { return std::bit_cast<std::uint32_t>(x); }
float float_of(std::uint32_t b) { return std::bit_cast<float>(b); }

bool is_subnormal_bits(std::uint32_t b) { return (b & 0x7f800000u) == 0 && (b & 0x007fffffu) != 0; }

// PTX .ftz: a subnormal becomes zero of the same sign (inputs and results alike).
float flush_subnormal(float x) {
  const std::uint32_t b = bits_of(x);
  return is_subnormal_bits(b) ? float_of(b & kSignBit) : x;
}

float quiet_nan() { return float_of(pack_nan(formats::fp32)); }
float plus_inf() { return std::numeric_limits<float>::infinity(); }

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

// The fp32 (RNE) rounding of a non-zero v known only as A = hi + lo with
// |A - v| <= rel_err * |v|, if every value in that interval rounds the same way.
// The result must lie in fp32's normal range or overflow (true for ex2 and lg2 here).
std::optional<float> round_if_decided(DoubleDouble a, double rel_err) {
  const bool negative = a.hi < 0;
  const double hi = std::fabs(a.hi);
  const double lo = negative ? -a.lo : a.lo;
  const int e = std::ilogb(hi);
  if (e < -126) return std::nullopt;  // outside the domain this helper serves
  // In units of the fp32 ulp of hi's binade: m_hi in [2^23, 2^24).
  const double m_hi = std::ldexp(hi, 23 - e);
  const double m_lo = std::ldexp(lo, 23 - e);
  const double base = std::floor(m_hi);
  // Signed distance from A to the midpoint base + 1/2; the only midpoint within
  // reach, since |m_lo| < 2^-28 and the error bound is far below 1/2.
  const double to_midpoint = ((m_hi - base) - 0.5) + m_lo;  // one rounding, in the + m_lo
  const double margin = 2.0 * rel_err * m_hi + 0x1p-50 * std::fabs(to_midpoint);
  if (std::fabs(to_midpoint) <= margin) return std::nullopt;
  const double rounded = std::ldexp(base + (to_midpoint > 0 ? 1.0 : 0.0), e - 23);
  const float magnitude = rounded >= 0x1p128 ? plus_inf() : static_cast<float>(rounded);  // exact
  return negative ? -magnitude : magnitude;
}

// ---- multiprecision last resort -----------------------------------------------------
using BigFloat = boost::multiprecision::number<
    boost::multiprecision::cpp_bin_float<192, boost::multiprecision::digit_base_2>,
    boost::multiprecision::et_off>;

float round_big(const BigFloat& v, const char* what) {
  const bool negative = v < 0;
  int e = 0;
  const BigFloat m = frexp(negative ? BigFloat(-v) : v, &e);  // m in [1/2, 1)
  const BigFloat scaled = ldexp(m, 24);                        // [2^23, 2^24)
  const BigFloat base = floor(scaled);
  const BigFloat to_midpoint = (scaled - base) - BigFloat(0.5);
  if (abs(to_midpoint) < ldexp(BigFloat(1), -150) || e - 1 < -126) {
    throw std::logic_error(std::string(what) + ": multiprecision stage could not decide the rounding");
  }
  const double kept = static_cast<double>(base) + (to_midpoint > 0 ? 1.0 : 0.0);  // integer < 2^25
  const double rounded = std::ldexp(kept, e - 24);
  const float magnitude = rounded >= 0x1p128 ? plus_inf() : static_cast<float>(rounded);
  return negative ? -magnitude : magnitude;
}

// ---- ex2 ------------------------------------------------------------------------------
// Results that need no evaluation: specials, overflow, flushed underflow and the exact
// powers of two (integer x).
std::optional<float> ex2_without_evaluation(float x) {
  if (std::isnan(x)) return quiet_nan();
  if (x >= 128.0f) return plus_inf();   // 2^x >= 2^128 overflows (+inf included)
  if (x < -126.0f) return 0.0f;         // 2^x < 2^-126 is subnormal: flushed (-inf included)
  if (x == std::floor(x)) return std::ldexp(1.0f, static_cast<int>(x));
  return std::nullopt;
}

// x = k + r with k an integer and |r| <= 1/2, both exact: x has at most 24 significant
// bits and |x| < 128, so x + 0.5 and x - k are exact in double.
struct Ex2Split {
  int k;
  double r;
};
Ex2Split split_ex2_argument(double x) {
  const double k = std::floor(x + 0.5);
  return {static_cast<int>(k), x - k};
}

// 2^r = exp(t), t = r ln2, |t| <= 0.347. Taylor to t^13: truncation below 2^-57
// relative; Horner in double with 1/n! rounded adds a few 2^-53; t's rounding adds
// |t| 2^-52. Total below 2^-50; claimed 2^-46.
std::optional<float> ex2_stage_double(float x) {
  const Ex2Split s = split_ex2_argument(x);
  const double t = s.r * kLn2.hi;
  static constexpr std::array<double, 14> kInverseFactorial = [] {
    std::array<double, 14> c{};
    double f = 1.0;
    for (int n = 0; n < 14; ++n) {
      if (n > 0) f *= n;  // exact: 13! < 2^53
      c[n] = 1.0 / f;
    }
    return c;
  }();
  double p = kInverseFactorial[13];
  for (int n = 12; n >= 0; --n) p = p * t + kInverseFactorial[n];
  return round_if_decided({std::ldexp(p, s.k), 0.0}, 0x1p-46);
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
  return round_if_decided({std::ldexp(p.hi, s.k), std::ldexp(p.lo, s.k)}, 0x1p-88);
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
  if ((b & 0x007fffffu) == 0) return static_cast<float>(static_cast<int>(b >> 23) - 127);  // exact
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
  int e = static_cast<int>(b >> 23) - 127;
  double m = 1.0 + std::ldexp(static_cast<double>(b & 0x007fffffu), -23);
  if ((b & 0x007fffffu) > 0x3504f3u) m *= 0.5, e += 1;  // m > 1.41421354 (just above sqrt 2)
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
    case CorrectStage::double_only: return ex2_stage_double(x);
    case CorrectStage::double_double: return ex2_stage_double_double(x);
    case CorrectStage::multiprecision: return ex2_stage_multiprecision(x);
  }
  return std::nullopt;
}

std::optional<float> lg2_correct_ftz_at(float x, CorrectStage stage) {
  x = flush_subnormal(x);
  if (auto r = lg2_without_evaluation(x)) return r;
  switch (stage) {
    case CorrectStage::double_only: return lg2_stage_double(x);
    case CorrectStage::double_double: return lg2_stage_double_double(x);
    case CorrectStage::multiprecision: return lg2_stage_multiprecision(x);
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
    case SpecialFunction::ex2: return ex2_correct_ftz(x);
    case SpecialFunction::rcp: return rcp_correct_ftz(x);
    case SpecialFunction::lg2: return lg2_correct_ftz(x);
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
           " traced values; unseen inputs use correct rounding, UNMEASURED; " +
           std::to_string(fallback_count()) + " fallbacks so far)";
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

// ---- FBSFU1 tables --------------------------------------------------------------------
std::uint32_t crc32(const std::uint8_t* data, std::size_t n) {
  static constexpr std::array<std::uint32_t, 256> kTable = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xedb88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  std::uint32_t c = 0xffffffffu;
  for (std::size_t i = 0; i < n; ++i) c = kTable[(c ^ data[i]) & 0xffu] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

namespace {

constexpr std::string_view kTableMagic = "FBSFU1";
constexpr std::uint64_t kAllInputs = std::uint64_t{1} << 32;
constexpr std::size_t kDeltaChunk = 256;
constexpr int kMaxFractionBits = 24;


// The output bits the file's deltas are relative to.
std::uint32_t delta_base(SpecialFunction f, std::uint32_t input) { return bits_of(correct_ftz(f, float_of(input))); }
std::uint32_t fixed_point_base(int fraction_bits, std::uint32_t index) {
  return bits_of(ex2_correct_ftz(std::ldexp(static_cast<float>(index), -fraction_bits)));  // exact argument
}
std::uint32_t negative_fixed_point_base(int fraction_bits, std::uint32_t index) {
  return bits_of(ex2_correct_ftz(-std::ldexp(static_cast<float>(index), -fraction_bits)));  // exact argument
}
constexpr int kMaxGuardBits = 24;
// Why an lg2_extended entry (T bits, R) is outside what lg2_extended_rule supports, or "".
std::string extended_entry_problem(std::uint32_t t_bits, std::int32_t r, int guard_bits) {
  if (r <= -(std::int32_t{1} << 30) || r >= (std::int32_t{1} << 30)) return "|R| >= 2^30";
  if ((t_bits & 0x7f800000u) == 0x7f800000u) return r == 0 ? "" : "R != 0 with a NaN or infinite T";
  const std::uint32_t biased = (t_bits >> 23) & 0xffu;
  const double l = static_cast<double>(float_of(t_bits)) +
                   std::ldexp(static_cast<double>(r), static_cast<int>(std::max<std::uint32_t>(biased, 1)) - 150 - guard_bits);
  return std::fabs(l) < 2.0 ? "" : "|L| >= 2";
}
std::uint32_t rcp_mantissa_base(std::uint32_t mantissa) { return bits_of(rcp_correct_ftz(float_of(0x3f800000u | mantissa))); }
std::uint32_t lg2_mantissa_base(std::uint32_t mantissa) { return bits_of(lg2_correct_ftz(float_of(0x3f800000u | mantissa))); }

int width_for(std::int32_t d) {
  if (d == 0) return 0;
  for (int w = 1; w < 32; ++w) {
    const std::int64_t lo = -(std::int64_t{1} << (w - 1)), hi = (std::int64_t{1} << (w - 1)) - 1;
    if (d >= lo && d <= hi) return w;
  }
  return 32;
}

class ByteWriter {
 public:
  void u8(std::uint8_t v) { bytes_.push_back(v); }
  void u16(std::uint16_t v) { for (int i = 0; i < 2; ++i) u8(static_cast<std::uint8_t>(v >> (8 * i))); }
  void u32(std::uint32_t v) { for (int i = 0; i < 4; ++i) u8(static_cast<std::uint8_t>(v >> (8 * i))); }
  void text(std::string_view s) { bytes_.insert(bytes_.end(), s.begin(), s.end()); }
  // `deltas` as runs of equal bit width (see the format above).
  void delta_stream(const std::vector<std::uint32_t>& deltas) {
    std::size_t i = 0;
    while (i < deltas.size()) {
      const int width = chunk_width(deltas, i);
      std::size_t end = std::min(deltas.size(), i + kDeltaChunk);
      while (end < deltas.size() && chunk_width(deltas, end) == width) end = std::min(deltas.size(), end + kDeltaChunk);
      u32(static_cast<std::uint32_t>(end - i));
      u8(static_cast<std::uint8_t>(width));
      if (width > 0) {
        std::vector<std::uint8_t> packed(((end - i) * static_cast<std::size_t>(width) + 7) / 8, 0);
        for (std::size_t j = i; j < end; ++j) {
          const std::uint64_t bit = (j - i) * static_cast<std::uint64_t>(width);
          const std::uint64_t v = deltas[j] & (width == 32 ? 0xffffffffull : (1ull << width) - 1);
          for (int b = 0; b < width; ++b) {
            if ((v >> b) & 1u) packed[(bit + b) / 8] |= static_cast<std::uint8_t>(1u << ((bit + b) % 8));
          }
        }
        bytes_.insert(bytes_.end(), packed.begin(), packed.end());
      }
      i = end;
    }
  }
  std::vector<std::uint8_t>& bytes() { return bytes_; }

 private:
  static int chunk_width(const std::vector<std::uint32_t>& deltas, std::size_t start) {
    int w = 0;
    const std::size_t end = std::min(deltas.size(), start + kDeltaChunk);
    for (std::size_t j = start; j < end; ++j) w = std::max(w, width_for(static_cast<std::int32_t>(deltas[j])));
    return w;
  }
  std::vector<std::uint8_t> bytes_;
};

// One run of a delta stream as loaded: `length` deltas of `width` bits at data[offset].
struct DeltaRun {
  std::uint64_t start;  // index of its first delta in the stream
  std::uint32_t length;
  std::uint8_t width;
  std::size_t offset;
};

struct DeltaStream {
  std::vector<DeltaRun> runs;
  std::uint32_t delta(const std::vector<std::uint8_t>& data, std::uint64_t index) const {
    const auto it = std::upper_bound(runs.begin(), runs.end(), index,
                                     [](std::uint64_t i, const DeltaRun& r) { return i < r.start; });
    const DeltaRun& run = *std::prev(it);
    if (run.width == 0) return 0;
    const std::uint64_t bit = (index - run.start) * run.width;
    std::uint64_t v = 0;
    const std::size_t first_byte = run.offset + bit / 8;
    const int bytes_needed = static_cast<int>((bit % 8 + run.width + 7) / 8);
    for (int b = 0; b < bytes_needed; ++b) v |= static_cast<std::uint64_t>(data[first_byte + b]) << (8 * b);
    v >>= bit % 8;
    if (run.width == 32) return static_cast<std::uint32_t>(v);
    v &= (1ull << run.width) - 1;
    if (v >> (run.width - 1)) v |= ~((1ull << run.width) - 1);  // sign-extend
    return static_cast<std::uint32_t>(v);
  }
};

class ByteReader {
 public:
  ByteReader(const std::string& path, const std::vector<std::uint8_t>& bytes, std::size_t end)
      : path_(path), bytes_(bytes), end_(end) {}
  [[noreturn]] void fail(const std::string& field, const std::string& why) const {
    throw std::runtime_error(path_ + ": field '" + field + "': " + why);
  }
  void need(std::size_t n, const std::string& field) const {
    if (end_ - pos_ < n) fail(field, "file truncated (needs " + std::to_string(n) + " more bytes at offset " +
                                         std::to_string(pos_) + ")");
  }
  std::uint8_t u8(const std::string& field) {
    need(1, field);
    return bytes_[pos_++];
  }
  std::uint16_t u16(const std::string& field) {
    need(2, field);
    std::uint16_t v = 0;
    for (int i = 0; i < 2; ++i) v = static_cast<std::uint16_t>(v | (bytes_[pos_++] << (8 * i)));
    return v;
  }
  std::uint32_t u32(const std::string& field) {
    need(4, field);
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(bytes_[pos_++]) << (8 * i);
    return v;
  }
  std::string text(std::size_t n, const std::string& field) {
    need(n, field);
    std::string s(bytes_.begin() + static_cast<std::ptrdiff_t>(pos_), bytes_.begin() + static_cast<std::ptrdiff_t>(pos_ + n));
    pos_ += n;
    return s;
  }
  DeltaStream delta_stream(std::uint64_t count, const std::string& field) {
    DeltaStream s;
    std::uint64_t done = 0;
    while (done < count) {
      const std::string run_field = field + ".run[" + std::to_string(s.runs.size()) + "]";
      const std::uint32_t length = u32(run_field + ".length");
      if (length == 0 || length > count - done) {
        fail(run_field + ".length", std::to_string(length) + " is 0 or exceeds the " + std::to_string(count - done) +
                                        " deltas still due");
      }
      const std::uint8_t width = u8(run_field + ".width");
      if (width > 32) fail(run_field + ".width", std::to_string(width) + " > 32");
      const std::uint64_t data_bytes = (static_cast<std::uint64_t>(length) * width + 7) / 8;
      need(data_bytes, run_field + ".data");
      s.runs.push_back({done, length, width, pos_});
      pos_ += data_bytes;
      done += length;
    }
    return s;
  }
  std::size_t position() const { return pos_; }

 private:
  const std::string& path_;
  const std::vector<std::uint8_t>& bytes_;
  std::size_t end_;
  std::size_t pos_ = 0;
};

// What every table model shares: the function, its file and provenance, and how a report
// names them ("<f>: table <path> (source: ...), <rule>, measured on hardware | SYNTHETIC").
class TableModel : public SpecialFunctionModel {
 public:
  TableModel(SpecialFunction f, bool measured, std::string path, std::string source)
      : f_(f), measured_(measured), path_(std::move(path)), source_(std::move(source)) {}
  SpecialFunction function() const override { return f_; }
  SfuKind kind() const override { return SfuKind::table; }
  bool hardware_measured() const override { return measured_; }

 protected:
  std::string describe_rule(const std::string& rule) const {
    return std::string(to_string(f_)) + ": table " + path_ + " (source: " + (source_.empty() ? "?" : source_) +
           "), " + rule + ", " + (measured_ ? "measured on hardware" : "SYNTHETIC, not measured");
  }
  SpecialFunction f_;
  bool measured_;

 private:
  std::string path_, source_;
};

class DeltaTableModel final : public TableModel {
 public:
  struct Segment {
    std::uint32_t first_input;
    std::uint64_t count;
    DeltaStream deltas;
  };
  DeltaTableModel(SpecialFunction f, bool measured, std::string path, std::string source,
                  std::vector<Segment> segments, std::vector<std::uint8_t> data)
      : TableModel(f, measured, std::move(path), std::move(source)), segments_(std::move(segments)),
        data_(std::move(data)) {
    for (const Segment& s : segments_) covered_ += s.count;
  }
  bool hardware_measured() const override { return measured_ && covered_ == kAllInputs; }
  std::string describe() const override {
    std::string d = describe_rule(std::to_string(covered_) + " inputs");
    if (covered_ != kAllInputs) d += "; other inputs use correct rounding, UNMEASURED";
    return d;
  }
  float evaluate(float x) const override {
    const std::uint32_t b = bits_of(x);
    const auto it = std::upper_bound(segments_.begin(), segments_.end(), b,
                                     [](std::uint32_t v, const Segment& s) { return v < s.first_input; });
    if (it != segments_.begin()) {
      const Segment& s = *std::prev(it);
      const std::uint64_t index = b - s.first_input;
      if (index < s.count) return float_of(delta_base(f_, b) + s.deltas.delta(data_, index));
    }
    fallbacks_.fetch_add(1, std::memory_order_relaxed);
    return correct_ftz(f_, x);
  }
  std::uint64_t fallback_count() const override { return fallbacks_.load(std::memory_order_relaxed); }

 private:
  std::vector<Segment> segments_;
  std::vector<std::uint8_t> data_;
  std::uint64_t covered_ = 0;
  mutable std::atomic<std::uint64_t> fallbacks_{0};
};

// A table entry t (negated when `negate`) times 2^k as an ftz output register holds it:
// a NaN entry is returned as is, results from 2^128 up saturate to a signed inf and results
// below 2^-126 flush to a signed zero. Shared by the ex2 and rcp table forms.
float scale_table_entry(float t, int k, bool negate) {
  if (std::isnan(t)) return t;
  const double v = std::ldexp(static_cast<double>(negate ? -t : t), k);  // exact in double
  if (std::fabs(v) >= 0x1p128) return std::signbit(v) ? -plus_inf() : plus_inf();
  if (std::fabs(v) < 0x1p-126) return std::signbit(v) ? -0.0f : 0.0f;
  return static_cast<float>(v);  // exact: a 24-bit significand in the normal range
}

class Ex2FixedPointModel final : public TableModel {
 public:
  Ex2FixedPointModel(bool measured, std::string path, std::string source, int fraction_bits,
                     FixedPointRounding rounding, std::uint32_t nan_output, std::vector<std::uint32_t> table)
      : TableModel(SpecialFunction::ex2, measured, std::move(path), std::move(source)), fraction_bits_(fraction_bits),
        rounding_(rounding), nan_output_(nan_output), table_(std::move(table)) {}
  std::string describe() const override {
    return describe_rule("2^k * T[frac] with " + std::to_string(fraction_bits_) + " fraction bits");
  }
  float evaluate(float x) const override {
    x = flush_subnormal(x);
    if (std::isnan(x)) return float_of(nan_output_);
    if (x >= 128.0f) return plus_inf();
    if (x < -160.0f) return 0.0f;
    const double scaled = std::ldexp(static_cast<double>(x), fraction_bits_);  // exact, |scaled| < 2^31
    double fixed = std::floor(scaled);
    if (rounding_ == FixedPointRounding::toward_zero && scaled < 0) {
      fixed = std::ceil(scaled);
    } else if (rounding_ == FixedPointRounding::nearest_even) {
      const double rest = scaled - fixed;
      if (rest > 0.5 || (rest == 0.5 && std::fmod(fixed, 2.0) != 0)) fixed += 1.0;
    }
    const std::int64_t xf = static_cast<std::int64_t>(fixed);
    const std::int64_t k = xf >> fraction_bits_;  // arithmetic shift: floor
    const std::uint64_t i = static_cast<std::uint64_t>(xf) & ((std::uint64_t{1} << fraction_bits_) - 1);
    return scale_table_entry(float_of(table_[i]), static_cast<int>(k), false);
  }

 private:
  int fraction_bits_;
  FixedPointRounding rounding_;
  std::uint32_t nan_output_;
  std::vector<std::uint32_t> table_;
};

// The rcp_mantissa hypothesis (format comment above); mirrored for the device in
// gpu/sfu_table_model.hpp rcp_table_model, which tests/test_probe_file.cpp checks against
// this bit for bit.
class RcpMantissaModel final : public TableModel {
 public:
  RcpMantissaModel(bool measured, std::string path, std::string source, std::uint32_t nan_output,
                   std::vector<std::uint32_t> table)
      : TableModel(SpecialFunction::rcp, measured, std::move(path), std::move(source)), nan_output_(nan_output),
        table_(std::move(table)) {}
  std::string describe() const override { return describe_rule("+-T[m] * 2^-e over the 2^23 mantissas"); }
  float evaluate(float x) const override {
    x = flush_subnormal(x);
    if (std::isnan(x)) return float_of(nan_output_);
    if (x == 0.0f) return std::copysign(plus_inf(), x);
    if (std::isinf(x)) return std::copysign(0.0f, x);
    const std::uint32_t b = bits_of(x);
    const int e = static_cast<int>((b >> 23) & 0xffu) - 127;
    return scale_table_entry(float_of(table_[b & 0x7fffffu]), -e, std::signbit(x));
  }

 private:
  std::uint32_t nan_output_;
  std::vector<std::uint32_t> table_;
};

// The lg2_exponent_split hypothesis (format comment above); mirrored for the device in
// gpu/sfu_table_model.hpp lg2_table_model, which tests/test_probe_file.cpp checks against
// this bit for bit.
class Lg2ExponentSplitModel final : public TableModel {
 public:
  Lg2ExponentSplitModel(bool measured, std::string path, std::string source, std::uint32_t nan_output,
                        std::vector<std::uint32_t> table)
      : TableModel(SpecialFunction::lg2, measured, std::move(path), std::move(source)), nan_output_(nan_output),
        table_(std::move(table)) {}
  std::string describe() const override { return describe_rule("RN(e + T[m]) over the 2^23 mantissas"); }
  float evaluate(float x) const override {
    x = flush_subnormal(x);
    if (std::isnan(x)) return float_of(nan_output_);
    if (x == 0.0f) return -plus_inf();
    if (x < 0.0f) return float_of(nan_output_);
    if (std::isinf(x)) return plus_inf();
    const std::uint32_t b = bits_of(x);
    const int e = static_cast<int>(b >> 23) - 127;
    const std::uint32_t t_bits = table_[b & 0x7fffffu];
    if (std::isnan(float_of(t_bits))) return float_of(t_bits);
    const Rounded sum = add(formats::fp32, bits_of(static_cast<float>(e)), t_bits, RoundingSpec{});  // e exact
    return flush_subnormal(float_of(sum.bits));
  }

 private:
  std::uint32_t nan_output_;
  std::vector<std::uint32_t> table_;
};

// The ex2_sign_magnitude hypothesis (format comment above); mirrored for the device in
// gpu/sfu_table_model.hpp ex2_sign_magnitude_table_model, which tests/test_probe_file.cpp
// checks against this bit for bit.
class Ex2SignMagnitudeModel final : public TableModel {
 public:
  Ex2SignMagnitudeModel(bool measured, std::string path, std::string source, int fraction_bits,
                        std::uint32_t nan_output, std::vector<std::uint32_t> positive,
                        std::vector<std::uint32_t> negative)
      : TableModel(SpecialFunction::ex2, measured, std::move(path), std::move(source)), fraction_bits_(fraction_bits),
        nan_output_(nan_output), positive_(std::move(positive)), negative_(std::move(negative)) {}
  std::string describe() const override {
    return describe_rule("|x| truncated to " + std::to_string(fraction_bits_) +
                         " fraction bits, T+[frac] * 2^k or T-[frac] * 2^-k by sign");
  }
  float evaluate(float x) const override {
    x = flush_subnormal(x);
    if (std::isnan(x)) return float_of(nan_output_);
    if (x >= 128.0f) return plus_inf();
    if (x < -160.0f) return 0.0f;
    const double scaled = std::ldexp(std::fabs(static_cast<double>(x)), fraction_bits_);  // exact, < 2^32
    const auto fixed = static_cast<std::uint64_t>(std::floor(scaled));
    const int k = static_cast<int>(fixed >> fraction_bits_);
    const std::uint64_t i = fixed & ((std::uint64_t{1} << fraction_bits_) - 1);
    if (!std::signbit(x)) return scale_table_entry(float_of(positive_[i]), k, false);
    return scale_table_entry(float_of(negative_[i]), -k, false);
  }

 private:
  int fraction_bits_;
  std::uint32_t nan_output_;
  std::vector<std::uint32_t> positive_, negative_;
};

// The lg2_extended hypothesis (format comment above, lg2_extended_rule); mirrored for the
// device in gpu/sfu_table_model.hpp lg2_extended_table_model.
class Lg2ExtendedModel final : public TableModel {
 public:
  Lg2ExtendedModel(bool measured, std::string path, std::string source, std::uint32_t nan_output, int guard_bits,
                   FinalRounding rounding, std::vector<std::uint32_t> table, std::vector<std::int32_t> residuals)
      : TableModel(SpecialFunction::lg2, measured, std::move(path), std::move(source)), nan_output_(nan_output),
        guard_bits_(guard_bits), rounding_(rounding), table_(std::move(table)), residuals_(std::move(residuals)) {}
  std::string describe() const override {
    return describe_rule("e + L[m] rounded once (" + std::string(to_string(rounding_)) + "), L = T + R ulp(T) 2^-" +
                         std::to_string(guard_bits_) + " over the 2^23 mantissas");
  }
  float evaluate(float x) const override {
    x = flush_subnormal(x);
    if (std::isnan(x)) return float_of(nan_output_);
    if (x == 0.0f) return -plus_inf();
    if (x < 0.0f) return float_of(nan_output_);
    if (std::isinf(x)) return plus_inf();
    if (x == 1.0f) return 0.0f;  // lg2(1) = +0; T[0] is L[0]'s representative (gpu/sfu_table_model.hpp)
    const std::uint32_t b = bits_of(x);
    const std::uint32_t m = b & 0x7fffffu;
    return float_of(lg2_extended_rule(static_cast<int>(b >> 23) - 127, table_[m], residuals_[m], guard_bits_, rounding_));
  }

 private:
  std::uint32_t nan_output_;
  int guard_bits_;
  FinalRounding rounding_;
  std::vector<std::uint32_t> table_;
  std::vector<std::int32_t> residuals_;
};

// ex2.approx.f32 without .ftz from a .ftz ex2 model (make_ex2_no_ftz_model).
class Ex2NoFtzModel final : public SpecialFunctionModel {
 public:
  explicit Ex2NoFtzModel(std::shared_ptr<const SpecialFunctionModel> ftz) : ftz_(std::move(ftz)) {}
  SpecialFunction function() const override { return SpecialFunction::ex2; }
  SfuKind kind() const override { return ftz_->kind(); }
  bool hardware_measured() const override { return ftz_->hardware_measured(); }
  std::string describe() const override {
    return "ex2 without .ftz (ex2.approx.f32): x < -126 gives RN(ex2ftz(x * 0.5)^2) with subnormal results "
           "kept (the rule measured on an H200 on all 2^32 inputs), ex2ftz = [" + ftz_->describe() + "]";
  }
  float evaluate(float x) const override {
    if (!(x < -126.0f)) return ftz_->evaluate(x);
    const float y = ftz_->evaluate(x * 0.5f);  // exact: x is normal or -inf
    const Rounded sq = mul(formats::fp32, bits_of(y), bits_of(y), RoundingSpec{});  // one RNE rounding, subnormals kept
    return float_of(sq.bits);
  }
  std::uint64_t fallback_count() const override { return ftz_->fallback_count(); }

 private:
  std::shared_ptr<const SpecialFunctionModel> ftz_;
};

}  // namespace

void write_table_file(const std::string& path, const SfuTable& table) {
  auto bad = [&](const std::string& why) { throw std::runtime_error(path + ": cannot write table: " + why); };
  if (table.source.size() > 0xffff) bad("source longer than 65535 bytes");
  ByteWriter w;
  w.text(kTableMagic);
  w.u8(static_cast<std::uint8_t>(table.function));
  w.u8(static_cast<std::uint8_t>(table.form));
  w.u8(table.measured_on_hardware ? 1 : 0);
  w.u16(static_cast<std::uint16_t>(table.source.size()));
  w.text(table.source);
  if (table.form == SfuTableForm::delta_segments) {
    if (table.segments.empty()) bad("no segments");
    w.u32(static_cast<std::uint32_t>(table.segments.size()));
    std::uint64_t next_free = 0;
    for (const SfuTableSegment& s : table.segments) {
      if (s.outputs.empty() || s.outputs.size() > 0xffffffffull) bad("segment size must be in 1..2^32-1");
      if (s.first_input < next_free) bad("segments unsorted or overlapping");
      if (s.first_input + static_cast<std::uint64_t>(s.outputs.size()) > kAllInputs) bad("segment past 0xffffffff");
      next_free = s.first_input + static_cast<std::uint64_t>(s.outputs.size());
      w.u32(s.first_input);
      w.u32(static_cast<std::uint32_t>(s.outputs.size()));
      std::vector<std::uint32_t> deltas(s.outputs.size());
      for (std::size_t i = 0; i < deltas.size(); ++i) {
        deltas[i] = s.outputs[i] - delta_base(table.function, static_cast<std::uint32_t>(s.first_input + i));
      }
      w.delta_stream(deltas);
    }
  } else if (table.form == SfuTableForm::rcp_mantissa) {
    if (table.function != SpecialFunction::rcp) bad("rcp_mantissa form needs function rcp");
    if (table.mantissa_outputs.size() != kRcpMantissaEntries) bad("mantissa_outputs must have 2^23 entries");
    w.u32(table.nan_output);
    std::vector<std::uint32_t> deltas(kRcpMantissaEntries);
    for (std::uint32_t m = 0; m < kRcpMantissaEntries; ++m) deltas[m] = table.mantissa_outputs[m] - rcp_mantissa_base(m);
    w.delta_stream(deltas);
  } else if (table.form == SfuTableForm::lg2_exponent_split) {
    if (table.function != SpecialFunction::lg2) bad("lg2_exponent_split form needs function lg2");
    if (table.mantissa_outputs.size() != kLg2MantissaEntries) bad("mantissa_outputs must have 2^23 entries");
    w.u32(table.nan_output);
    std::vector<std::uint32_t> deltas(kLg2MantissaEntries);
    for (std::uint32_t m = 0; m < kLg2MantissaEntries; ++m) deltas[m] = table.mantissa_outputs[m] - lg2_mantissa_base(m);
    w.delta_stream(deltas);
  } else if (table.form == SfuTableForm::ex2_fixed_point) {
    if (table.function != SpecialFunction::ex2) bad("ex2_fixed_point form needs function ex2");
    if (table.fraction_bits < 1 || table.fraction_bits > kMaxFractionBits) bad("fraction_bits must be 1..24");
    const std::size_t n = std::size_t{1} << table.fraction_bits;
    if (table.fraction_outputs.size() != n) bad("fraction_outputs must have 2^fraction_bits entries");
    w.u8(static_cast<std::uint8_t>(table.fraction_bits));
    w.u8(static_cast<std::uint8_t>(table.argument_rounding));
    w.u32(table.nan_output);
    std::vector<std::uint32_t> deltas(n);
    for (std::size_t i = 0; i < n; ++i) {
      deltas[i] = table.fraction_outputs[i] - fixed_point_base(table.fraction_bits, static_cast<std::uint32_t>(i));
    }
    w.delta_stream(deltas);
  } else if (table.form == SfuTableForm::ex2_sign_magnitude) {
    if (table.function != SpecialFunction::ex2) bad("ex2_sign_magnitude form needs function ex2");
    if (table.fraction_bits < 1 || table.fraction_bits > kMaxFractionBits) bad("fraction_bits must be 1..24");
    const std::size_t n = std::size_t{1} << table.fraction_bits;
    if (table.fraction_outputs.size() != n || table.negative_fraction_outputs.size() != n) {
      bad("fraction_outputs and negative_fraction_outputs must have 2^fraction_bits entries each");
    }
    w.u8(static_cast<std::uint8_t>(table.fraction_bits));
    w.u32(table.nan_output);
    std::vector<std::uint32_t> deltas(n);
    for (std::size_t i = 0; i < n; ++i) {
      deltas[i] = table.fraction_outputs[i] - fixed_point_base(table.fraction_bits, static_cast<std::uint32_t>(i));
    }
    w.delta_stream(deltas);
    for (std::size_t i = 0; i < n; ++i) {
      deltas[i] = table.negative_fraction_outputs[i] -
                  negative_fixed_point_base(table.fraction_bits, static_cast<std::uint32_t>(i));
    }
    w.delta_stream(deltas);
  } else if (table.form == SfuTableForm::lg2_extended) {
    if (table.function != SpecialFunction::lg2) bad("lg2_extended form needs function lg2");
    if (table.mantissa_outputs.size() != kLg2MantissaEntries || table.extended_residuals.size() != kLg2MantissaEntries) {
      bad("mantissa_outputs and extended_residuals must have 2^23 entries each");
    }
    if (table.guard_bits < 0 || table.guard_bits > kMaxGuardBits) bad("guard_bits must be 0..24");
    if (static_cast<int>(table.final_rounding) > 3) bad("unknown final_rounding");
    for (std::uint32_t m = 0; m < kLg2MantissaEntries; ++m) {
      if (const std::string why = extended_entry_problem(table.mantissa_outputs[m], table.extended_residuals[m],
                                                        table.guard_bits);
          !why.empty()) {
        bad("entry " + std::to_string(m) + ": " + why);
      }
    }
    w.u32(table.nan_output);
    w.u8(static_cast<std::uint8_t>(table.guard_bits));
    w.u8(static_cast<std::uint8_t>(table.final_rounding));
    std::vector<std::uint32_t> deltas(kLg2MantissaEntries);
    for (std::uint32_t m = 0; m < kLg2MantissaEntries; ++m) deltas[m] = table.mantissa_outputs[m] - lg2_mantissa_base(m);
    w.delta_stream(deltas);
    for (std::uint32_t m = 0; m < kLg2MantissaEntries; ++m) deltas[m] = static_cast<std::uint32_t>(table.extended_residuals[m]);
    w.delta_stream(deltas);
  } else {
    bad("unknown form " + std::to_string(static_cast<int>(table.form)));
  }
  std::vector<std::uint8_t>& bytes = w.bytes();
  const std::uint32_t crc = crc32(bytes.data(), bytes.size());
  w.u32(crc);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) bad("cannot open for writing");
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) bad("write failed");
}

std::unique_ptr<SpecialFunctionModel> load_table_model(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open table file");
  std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  constexpr std::size_t kCrcBytes = 4;
  {
    ByteReader magic_reader(path, bytes, bytes.size());
    if (magic_reader.text(kTableMagic.size(), "magic") != kTableMagic) {
      magic_reader.fail("magic", "not an FBSFU1 table (expected the bytes \"FBSFU1\")");
    }
  }
  if (bytes.size() < kTableMagic.size() + kCrcBytes) {
    ByteReader(path, bytes, bytes.size()).fail("crc32", "file truncated before the checksum");
  }
  const std::size_t body = bytes.size() - kCrcBytes;
  std::uint32_t stored_crc = 0;
  for (int i = 0; i < 4; ++i) stored_crc |= static_cast<std::uint32_t>(bytes[body + i]) << (8 * i);
  if (crc32(bytes.data(), body) != stored_crc) {
    ByteReader(path, bytes, body).fail("crc32", "checksum mismatch: the file is corrupted or truncated");
  }

  ByteReader r(path, bytes, body);
  r.text(kTableMagic.size(), "magic");
  const std::uint8_t function = r.u8("function");
  if (function > 2) r.fail("function", "unknown function code " + std::to_string(function));
  const auto f = static_cast<SpecialFunction>(function);
  const std::uint8_t form = r.u8("form");
  if (form > 5) r.fail("form", "unknown form code " + std::to_string(form));
  if ((form == 1 || form == 4) && f != SpecialFunction::ex2) {
    r.fail("form", std::string(form == 1 ? "ex2_fixed_point" : "ex2_sign_magnitude") + " needs function ex2");
  }
  if (form == 5 && f != SpecialFunction::lg2) r.fail("form", "lg2_extended needs function lg2");
  if (form == 2 && f != SpecialFunction::rcp) r.fail("form", "rcp_mantissa needs function rcp");
  if (form == 3 && f != SpecialFunction::lg2) r.fail("form", "lg2_exponent_split needs function lg2");
  const std::uint8_t measured = r.u8("measured");
  if (measured > 1) r.fail("measured", "must be 0 or 1, is " + std::to_string(measured));
  const std::uint16_t source_len = r.u16("source_len");
  std::string source = r.text(source_len, "source");

  std::unique_ptr<SpecialFunctionModel> model;
  if (form == 0) {
    const std::uint32_t count = r.u32("segment_count");
    if (count == 0) r.fail("segment_count", "must be at least 1");
    std::vector<DeltaTableModel::Segment> segments;
    std::uint64_t next_free = 0;
    for (std::uint32_t i = 0; i < count; ++i) {
      const std::string field = "segment[" + std::to_string(i) + "]";
      const std::uint32_t first = r.u32(field + ".first_input");
      const std::uint32_t n = r.u32(field + ".count");
      if (first < next_free) r.fail(field + ".first_input", "segments unsorted or overlapping");
      if (n == 0 || first + static_cast<std::uint64_t>(n) > kAllInputs) {
        r.fail(field + ".count", std::to_string(n) + " is 0 or runs past input 0xffffffff");
      }
      next_free = first + static_cast<std::uint64_t>(n);
      segments.push_back({first, n, r.delta_stream(n, field)});
    }
    if (r.position() != body) r.fail("crc32", std::to_string(body - r.position()) + " unexpected bytes before the checksum");
    model = std::make_unique<DeltaTableModel>(f, measured == 1, path, std::move(source), std::move(segments),
                                              std::move(bytes));
  } else if (form == 2) {
    const std::uint32_t nan_output = r.u32("nan_output");
    const DeltaStream deltas = r.delta_stream(kRcpMantissaEntries, "mantissa_table");
    if (r.position() != body) r.fail("crc32", std::to_string(body - r.position()) + " unexpected bytes before the checksum");
    std::vector<std::uint32_t> table(kRcpMantissaEntries);
    for (std::uint32_t m = 0; m < kRcpMantissaEntries; ++m) table[m] = rcp_mantissa_base(m) + deltas.delta(bytes, m);
    model = std::make_unique<RcpMantissaModel>(measured == 1, path, std::move(source), nan_output, std::move(table));
  } else if (form == 3) {
    const std::uint32_t nan_output = r.u32("nan_output");
    const DeltaStream deltas = r.delta_stream(kLg2MantissaEntries, "mantissa_table");
    if (r.position() != body) r.fail("crc32", std::to_string(body - r.position()) + " unexpected bytes before the checksum");
    std::vector<std::uint32_t> table(kLg2MantissaEntries);
    for (std::uint32_t m = 0; m < kLg2MantissaEntries; ++m) table[m] = lg2_mantissa_base(m) + deltas.delta(bytes, m);
    model = std::make_unique<Lg2ExponentSplitModel>(measured == 1, path, std::move(source), nan_output,
                                                    std::move(table));
  } else if (form == 4) {
    const std::uint8_t fraction_bits = r.u8("fraction_bits");
    if (fraction_bits < 1 || fraction_bits > kMaxFractionBits) {
      r.fail("fraction_bits", std::to_string(fraction_bits) + " is outside 1..24");
    }
    const std::uint32_t nan_output = r.u32("nan_output");
    const std::uint64_t n = std::uint64_t{1} << fraction_bits;
    const DeltaStream pos = r.delta_stream(n, "positive_table");
    const DeltaStream neg = r.delta_stream(n, "negative_table");
    if (r.position() != body) r.fail("crc32", std::to_string(body - r.position()) + " unexpected bytes before the checksum");
    std::vector<std::uint32_t> positive(n), negative(n);
    for (std::uint64_t i = 0; i < n; ++i) {
      positive[i] = fixed_point_base(fraction_bits, static_cast<std::uint32_t>(i)) + pos.delta(bytes, i);
      negative[i] = negative_fixed_point_base(fraction_bits, static_cast<std::uint32_t>(i)) + neg.delta(bytes, i);
    }
    model = std::make_unique<Ex2SignMagnitudeModel>(measured == 1, path, std::move(source), fraction_bits, nan_output,
                                                    std::move(positive), std::move(negative));
  } else if (form == 5) {
    const std::uint32_t nan_output = r.u32("nan_output");
    const std::uint8_t guard_bits = r.u8("guard_bits");
    if (guard_bits > kMaxGuardBits) r.fail("guard_bits", std::to_string(guard_bits) + " is outside 0..24");
    const std::uint8_t rounding = r.u8("final_rounding");
    if (rounding > 3) r.fail("final_rounding", "unknown code " + std::to_string(rounding));
    const DeltaStream t_deltas = r.delta_stream(kLg2MantissaEntries, "mantissa_table");
    const DeltaStream r_values = r.delta_stream(kLg2MantissaEntries, "residual_table");
    if (r.position() != body) r.fail("crc32", std::to_string(body - r.position()) + " unexpected bytes before the checksum");
    std::vector<std::uint32_t> table(kLg2MantissaEntries);
    std::vector<std::int32_t> residuals(kLg2MantissaEntries);
    for (std::uint32_t m = 0; m < kLg2MantissaEntries; ++m) {
      table[m] = lg2_mantissa_base(m) + t_deltas.delta(bytes, m);
      residuals[m] = static_cast<std::int32_t>(r_values.delta(bytes, m));
      if (const std::string why = extended_entry_problem(table[m], residuals[m], guard_bits); !why.empty()) {
        r.fail("residual_table", "entry " + std::to_string(m) + ": " + why);
      }
    }
    model = std::make_unique<Lg2ExtendedModel>(measured == 1, path, std::move(source), nan_output, guard_bits,
                                               static_cast<FinalRounding>(rounding), std::move(table),
                                               std::move(residuals));
  } else {
    const std::uint8_t fraction_bits = r.u8("fraction_bits");
    if (fraction_bits < 1 || fraction_bits > kMaxFractionBits) {
      r.fail("fraction_bits", std::to_string(fraction_bits) + " is outside 1..24");
    }
    const std::uint8_t rounding = r.u8("argument_rounding");
    if (rounding > 2) r.fail("argument_rounding", "unknown code " + std::to_string(rounding));
    const std::uint32_t nan_output = r.u32("nan_output");
    const std::uint64_t n = std::uint64_t{1} << fraction_bits;
    const DeltaStream deltas = r.delta_stream(n, "fraction_table");
    if (r.position() != body) r.fail("crc32", std::to_string(body - r.position()) + " unexpected bytes before the checksum");
    std::vector<std::uint32_t> table(n);
    for (std::uint64_t i = 0; i < n; ++i) {
      table[i] = fixed_point_base(fraction_bits, static_cast<std::uint32_t>(i)) + deltas.delta(bytes, i);
    }
    model = std::make_unique<Ex2FixedPointModel>(measured == 1, path, std::move(source), fraction_bits,
                                                 static_cast<FixedPointRounding>(rounding), nan_output,
                                                 std::move(table));
  }
  return model;
}

// ---- the lg2_extended rule -------------------------------------------------------------------
namespace {
// S * 2^X (plus a fraction of one unit 2^X, in (0, 1), when `sticky`) rounded to fp32 by
// `rounding`; an exact zero gives +0 and a result below 2^-126 flushes to zero of its sign.
// |S| < 2^63. A sticky fraction is only supported where S has at least 24 significant bits
// (where it has fewer it is read as "below half an ulp", which the callers never need).
std::uint32_t round_fixed_to_fp32(std::int64_t s, int x, bool sticky, FinalRounding rounding) {
  if (s == 0 && !sticky) return 0u;
  const bool negative = s < 0;
  std::uint64_t mag = negative ? static_cast<std::uint64_t>(-(s + 1)) + 1u : static_cast<std::uint64_t>(s);
  if (negative && sticky) mag -= 1;  // s + f = -(|s| - f): magnitude |s| - 1 plus the fraction 1 - f
  if (mag == 0) return negative ? kSignBit : 0u;  // below one unit (not reached by the rule)
  const int msb = 63 - std::countl_zero(mag);
  std::uint64_t q;
  bool up = false;
  if (msb <= 23) {
    q = mag << (23 - msb);
    up = sticky && ((rounding == FinalRounding::down && negative) || (rounding == FinalRounding::up && !negative));
  } else {
    const int shift = msb - 23;
    q = mag >> shift;
    const std::uint64_t rest = mag & ((std::uint64_t{1} << shift) - 1), half = std::uint64_t{1} << (shift - 1);
    const bool inexact = rest != 0 || sticky;
    switch (rounding) {
      case FinalRounding::nearest_even: up = rest > half || (rest == half && (sticky || (q & 1u))); break;
      case FinalRounding::toward_zero: up = false; break;
      case FinalRounding::down: up = negative && inexact; break;
      case FinalRounding::up: up = !negative && inexact; break;
    }
  }
  int exponent = msb + x;  // the value is q * 2^(exponent - 23), q in [2^23, 2^24]
  if (up && ++q == (std::uint64_t{1} << 24)) q >>= 1, ++exponent;
  const std::uint32_t sign = negative ? kSignBit : 0u;
  if (exponent + 127 >= 255) return sign | 0x7f800000u;
  if (exponent + 127 <= 0) return sign;  // ftz
  return sign | (static_cast<std::uint32_t>(exponent + 127) << 23) | (static_cast<std::uint32_t>(q) & 0x7fffffu);
}
}  // namespace

std::uint32_t lg2_extended_rule(int e, std::uint32_t t_bits, std::int32_t r, int guard_bits, FinalRounding rounding) {
  if ((t_bits & 0x7f800000u) == 0x7f800000u) return t_bits;  // NaN or inf: as is (e + inf = inf)
  const std::uint32_t biased = (t_bits >> 23) & 0xffu;
  const std::int64_t q = (biased == 0 ? 0 : std::int64_t{1} << 23) | (t_bits & 0x7fffffu);
  // L = l * 2^lx exactly
  const std::int64_t l = ((t_bits & kSignBit) ? -q : q) * (std::int64_t{1} << guard_bits) + r;
  const int lx = static_cast<int>(std::max<std::uint32_t>(biased, 1)) - 150 - guard_bits;
  if (e == 0) return round_fixed_to_fp32(l, lx, false, rounding);
  // e != 0: units of 2^-55 (|e| * 2^55 + |L| * 2^55 < 2^63); bits of L below them (a tiny
  // T only) become a sticky fraction, which cannot reach the rounding position of |e + L| >= ~1/2.
  constexpr int kUnits = -55;
  std::int64_t l55;
  bool sticky = false;
  if (lx >= kUnits) {
    l55 = l * (std::int64_t{1} << (lx - kUnits));
  } else {
    const int shift = kUnits - lx;
    l55 = shift >= 63 ? (l < 0 ? -1 : 0) : (l >> shift);  // floor
    sticky = shift >= 63 ? l != 0 : (l - l55 * (std::int64_t{1} << shift)) != 0;
  }
  return round_fixed_to_fp32(static_cast<std::int64_t>(e) * (std::int64_t{1} << 55) + l55, kUnits, sticky, rounding);
}

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
