// emu/ops.cpp: exact scalar operations, each ending in one round_pack call.
#include "emu/ops.hpp"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "formats/power_of_two.hpp"

namespace fb {
namespace {

Rounded invalid_result(const Format& f) {
  // Formats with no NaN (fp6, fp4) have nothing better than +0 to return.
  return {f.has_nan() ? pack_nan(f) : pack_zero(f, false), flag::invalid};
}
Rounded nan_result(const Format& f) { return f.has_nan() ? Rounded{pack_nan(f), 0} : invalid_result(f); }
Rounded infinite_result(const Format& f, bool negative, const RoundingSpec& spec, Flags extra) {
  // An unsigned format (e8m0) cannot hold -inf any more than other negative values.
  if (negative && !f.is_signed) return invalid_result(f);
  if (f.has_inf()) return {pack_infinite(f, negative, spec.overflow), extra};
  // No inf in the format: an infinite result is an overflow.
  return {pack_infinite(f, negative, spec.overflow), static_cast<Flags>(extra | flag::overflow | flag::inexact)};
}
// An exact zero; `event` (already emptied) records its sign, the exact value it is.
Rounded zero_result(const Format& f, bool negative, RoundingEvent* event = nullptr) {
  if (!f.has_zero()) return invalid_result(f);
  if (event) event->negative = negative;
  return {pack_zero(f, negative), 0};
}

// round_pack, inlined into each operation: the scalar ops' hot path.
[[gnu::always_inline]] inline Rounded round_exact(const Format& f, const ExactValue& v, const RoundingSpec& spec,
                                                  std::uint64_t position, RoundingEvent* event) {
  return round_pack_inline(f, v.negative, v.exponent, v.significand, v.sticky, spec, position, event);
}

// The exact value of an operand: the same number as fb::to_double, assembled from
// the decoded fields instead of through ldexp (at most 24 significant bits and an
// exponent far inside fp64's normal range, so the fp64 encoding is exact).
[[gnu::always_inline]] inline double operand_value(const Format& f, std::uint32_t stored) {
  const Decoded d = decode(f, stored);
  switch (d.cls) {
    case ValueClass::nan:
      return std::numeric_limits<double>::quiet_NaN();
    case ValueClass::infinite:
      return d.negative ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
    case ValueClass::zero:
      return d.negative ? -0.0 : 0.0;
    case ValueClass::subnormal:
    case ValueClass::normal:
      break;
  }
  // value = significand * 2^(exponent - man_bits); the leading bit goes to fp64's bit 52.
  const int lead = 31 - std::countl_zero(d.significand);
  const int value_exponent = d.exponent - f.man_bits + lead;
  const std::uint64_t fraction =
      (static_cast<std::uint64_t>(d.significand) << (52 - lead)) & ((std::uint64_t{1} << 52) - 1);
  return std::bit_cast<double>((static_cast<std::uint64_t>(d.negative ? 1u : 0u) << 63) |
                               (static_cast<std::uint64_t>(value_exponent + 1023) << 52) | fraction);
}

// A finite nonzero double's magnitude as significand * 2^exponent (53-bit significand).
// Callers never produce fp64 subnormals: every operand, product, sum, quotient and root is
// far inside fp64's normal range.
struct DoubleParts {
  std::uint64_t significand;
  int exponent;
};
[[gnu::always_inline]] inline DoubleParts parts_of(double x) {
  const std::uint64_t bits = std::bit_cast<std::uint64_t>(x);
  return {(bits & ((std::uint64_t{1} << 52) - 1)) | (std::uint64_t{1} << 52),
          static_cast<int>((bits >> 52) & 0x7ff) - 1075};
}

// exact_from_sum (ops.hpp), inlined into the operations.
[[gnu::always_inline]] inline ExactValue exact_from_sum_inline(double hi, double lo) {
  const bool negative = std::signbit(hi);
  auto [sig, exponent] = parts_of(hi);
  if (lo == 0.0) return {negative, exponent, sig, false};
  // Express the value on a grid 2^11 times finer than hi's ulp (the 53-bit significand then
  // fills 64 bits): lo is within half an ulp, so its grid part is -2^10..2^10 and the rest
  // becomes the sticky bit. Stochastic rounding reads up to 32 discarded bits below a 24-bit
  // significand, 56 bits in all: a grid of 2 extra bits (55) dropped the lowest of them, so
  // fp32 add and fma with --sr-bits 31 or 32 missed carries. Multiplying by a power of two
  // is exact, as ldexp is; 0 <= t <= 2^10, so truncation is floor.
  constexpr int kGridBits = 11;
  const int scale = kGridBits - exponent;
  const double t =
      is_normal_power_of_two_exponent(scale) ? std::fabs(lo) * power_of_two(scale) : std::fabs(std::ldexp(lo, scale));
  const std::uint64_t whole = static_cast<std::uint64_t>(t);
  const bool fractional = t != static_cast<double>(whole);
  if (std::signbit(lo) == negative) return {negative, exponent - kGridBits, (sig << kGridBits) + whole, fractional};
  const std::uint64_t below = whole + (fractional ? 1u : 0u);  // >= 1: lo is nonzero
  if ((sig << kGridBits) - below >= std::uint64_t{1} << 63)
    return {negative, exponent - kGridBits, (sig << kGridBits) - below, fractional};
  // hi was a power of two and lo took its top bit: one grid bit more fills the 64 bits again, so
  // the sticky part stays within the carried significand's last bit (a recorded event says so).
  // 2t is exact; the shift wraps 2^64 to 0 and the difference, below 2^64, is right modulo 2^64.
  const double twice = 2.0 * t;
  const std::uint64_t whole_finer = static_cast<std::uint64_t>(twice);
  const bool fractional_finer = twice != static_cast<double>(whole_finer);
  return {negative, exponent - kGridBits - 1, (sig << (kGridBits + 1)) - (whole_finer + (fractional_finer ? 1u : 0u)),
          fractional_finer};
}

int leading_exponent(const ExactValue& v) { return v.exponent + 63 - std::countl_zero(v.significand); }

// Whether a rounding reads more of the exact value than fp64's 53 bits hold: stochastic
// rounding's decision reads sr_bits discarded bits below the format's precision. A quotient
// or root computed in fp64 (53 bits and the sign of its remainder) then loses some of them.
bool reads_beyond_fp64(const Format& f, const RoundingSpec& spec) {
  return spec.mode == RoundingMode::sr && f.precision() + spec.sr_bits > 53;
}

// |x / y| truncated to 64 bits, the remainder's presence as the sticky bit: exact in integers
// (x, y finite nonzero normal doubles).
ExactValue exact_quotient(double x, double y) {
  const DoubleParts a = parts_of(x), b = parts_of(y);
  // a / b lies in (1/2, 2): shifted by 64 below 1 and by 63 from 1 on, the quotient lies in
  // [2^63, 2^64), and the dividend below 2^117.
  const int shift = a.significand < b.significand ? 64 : 63;
  const unsigned __int128 dividend = static_cast<unsigned __int128>(a.significand) << shift;
  const auto quotient = static_cast<std::uint64_t>(dividend / b.significand);
  const bool remainder = dividend % b.significand != 0;
  return {std::signbit(x) != std::signbit(y), a.exponent - b.exponent - shift, quotient, remainder};
}

// sqrt(x) truncated to 64 bits, the remainder's presence as the sticky bit: exact in integers
// (x finite positive normal double).
ExactValue exact_square_root(double x) {
  const DoubleParts a = parts_of(x);
  // x = a * 2^e = (a * 2^s) * 2^(e - s) with e - s even and a * 2^s in [2^124, 2^126), so its
  // integer square root g lies in [2^62, 2^63) and (g + 1)^2 fits in 128 bits.
  const int s = (a.exponent - 72) % 2 == 0 ? 72 : 73;
  const unsigned __int128 n = static_cast<unsigned __int128>(a.significand) << s;
  // A long double guess (64-bit on x86, within a few units of the root), corrected exactly.
  auto g = static_cast<std::uint64_t>(std::sqrt(static_cast<long double>(n)));
  while (static_cast<unsigned __int128>(g) * g > n) --g;
  while (static_cast<unsigned __int128>(g + 1) * (g + 1) <= n) ++g;
  // One bit more, so the root fills 64 bits: sqrt(4n) >= 2g + 1 exactly when (2g + 1)^2 <= 4n
  // (4n < 2^128 and 2g + 1 < 2^64, so both fit).
  const unsigned __int128 four_n = n << 2;
  const std::uint64_t odd = 2 * g + 1;
  const std::uint64_t root = static_cast<unsigned __int128>(odd) * odd <= four_n ? odd : odd - 1;
  return {false, (a.exponent - s) / 2 - 1, root, static_cast<unsigned __int128>(root) * root != four_n};
}

// Fills the addition fields of an event for the exact sum x + y = v.
void describe_addition(double x, double y, const ExactValue& v, RoundingEvent* event) {
  event->is_addition = true;
  if (x == 0.0 || y == 0.0) return;
  const int ex = std::ilogb(x), ey = std::ilogb(y);
  const int larger = ex > ey ? ex : ey;
  event->alignment_shift = ex > ey ? ex - ey : ey - ex;
  if (v.significand == 0) {
    event->exact_zero = true;
    event->cancellation_depth = 64;
    return;
  }
  const int es = leading_exponent(v);
  if (std::signbit(x) == std::signbit(y)) {
    event->significand_overflow = es > larger;
  } else {
    event->cancellation_depth = larger - es > 0 ? larger - es : 0;
  }
}

// x + y exactly, from fb::two_sum's (sum, error) pair.
ExactValue exact_sum(double x, double y) {
  const TwoSum t = two_sum(x, y);
  if (t.sum == 0.0) return {false, 0, 0, false};
  return exact_from_sum_inline(t.sum, t.error);
}

bool zero_sum_is_negative(bool x_negative, bool y_negative, const RoundingSpec& spec) {
  if (x_negative == y_negative) return x_negative;
  return spec.mode == RoundingMode::rdn;
}

// The formats that carry real workloads get each hot operation compiled with their
// facts as constants (the same body, instantiated on FixedFormat); any
// other format runs the same body reading the format at run time.
template <class Body>
[[gnu::always_inline]] inline Rounded with_format(const Format& f, Body&& body) {
  if (f == formats::bf16) return body(FixedFormat<formats::bf16>{});
  if (f == formats::fp16) return body(FixedFormat<formats::fp16>{});
  if (f == formats::e4m3) return body(FixedFormat<formats::e4m3>{});
  if (f == formats::e5m2) return body(FixedFormat<formats::e5m2>{});
  return body(RuntimeFormat{f});
}

}  // namespace

ExactValue exact_from_sum(double hi, double lo) { return exact_from_sum_inline(hi, lo); }

Rounded round_double(const Format& f, double exact, const RoundingSpec& spec, std::uint64_t position,
                     RoundingEvent* event) {
  if (event) *event = RoundingEvent{};
  if (std::isnan(exact)) return nan_result(f);
  if (std::isinf(exact)) return infinite_result(f, std::signbit(exact), spec, 0);
  if (exact == 0.0) return zero_result(f, std::signbit(exact), event);
  return round_exact(f, exact_from_sum_inline(exact, 0.0), spec, position, event);
}

namespace {
// a + b, or a - b when `subtract`: b is negated as an fp64 value, which is exact even
// where the format cannot hold -b (unsigned formats, fnuz zero).
template <class FormatChoice>
[[gnu::flatten]] Rounded add_in(FormatChoice choice, std::uint32_t a, std::uint32_t b, bool subtract,
                                const RoundingSpec& spec, std::uint64_t position, RoundingEvent* event) {
  const Format& f = choice.format();
  const double x = operand_value(f, a), y_operand = operand_value(f, b);
  const double y = subtract ? -y_operand : y_operand;
  if (std::isnan(x) || std::isnan(y)) return nan_result(f);
  if (std::isinf(x) || std::isinf(y)) {
    if (std::isinf(x) && std::isinf(y) && std::signbit(x) != std::signbit(y)) return invalid_result(f);
    return infinite_result(f, std::signbit(std::isinf(x) ? x : y), spec, 0);
  }
  const ExactValue v = exact_sum(x, y);
  if (event) *event = RoundingEvent{}, describe_addition(x, y, v, event);
  if (v.significand == 0) {
    const bool neg = zero_sum_is_negative(std::signbit(x), std::signbit(y), spec);
    if (event) event->negative = neg;
    return zero_result(f, neg);
  }
  return round_exact(f, v, spec, position, event);
}
}  // namespace

Rounded add(const Format& f, std::uint32_t a, std::uint32_t b, const RoundingSpec& spec, std::uint64_t position,
            RoundingEvent* event) {
  if (event) *event = RoundingEvent{};
  return with_format(f, [&](auto choice) { return add_in(choice, a, b, false, spec, position, event); });
}

Rounded sub(const Format& f, std::uint32_t a, std::uint32_t b, const RoundingSpec& spec, std::uint64_t position,
            RoundingEvent* event) {
  if (event) *event = RoundingEvent{};
  return with_format(f, [&](auto choice) { return add_in(choice, a, b, true, spec, position, event); });
}

namespace {
template <class FormatChoice>
[[gnu::flatten]] Rounded mul_in(FormatChoice choice, std::uint32_t a, std::uint32_t b, const RoundingSpec& spec,
                                std::uint64_t position, RoundingEvent* event) {
  const Format& f = choice.format();
  const double x = operand_value(f, a), y = operand_value(f, b);
  if (std::isnan(x) || std::isnan(y)) return nan_result(f);
  const bool neg = std::signbit(x) != std::signbit(y);
  if (std::isinf(x) || std::isinf(y)) {
    if (x == 0.0 || y == 0.0) return invalid_result(f);
    return infinite_result(f, neg, spec, 0);
  }
  if (x == 0.0 || y == 0.0) return zero_result(f, neg, event);
  return round_exact(f, exact_from_sum_inline(x * y, 0.0), spec, position, event);  // product is exact
}
}  // namespace

Rounded mul(const Format& f, std::uint32_t a, std::uint32_t b, const RoundingSpec& spec, std::uint64_t position,
            RoundingEvent* event) {
  if (event) *event = RoundingEvent{};
  return with_format(f, [&](auto choice) { return mul_in(choice, a, b, spec, position, event); });
}

Rounded div(const Format& f, std::uint32_t a, std::uint32_t b, const RoundingSpec& spec, std::uint64_t position,
            RoundingEvent* event) {
  if (event) *event = RoundingEvent{};
  const double x = operand_value(f, a), y = operand_value(f, b);
  if (std::isnan(x) || std::isnan(y)) return nan_result(f);
  const bool neg = std::signbit(x) != std::signbit(y);
  if (std::isinf(x)) {
    if (std::isinf(y)) return invalid_result(f);
    return infinite_result(f, neg, spec, 0);
  }
  if (std::isinf(y)) return zero_result(f, neg, event);
  if (y == 0.0) {
    if (x == 0.0) return invalid_result(f);
    return infinite_result(f, neg, spec, flag::divbyzero);
  }
  if (x == 0.0) return zero_result(f, neg, event);
  // A recorded event shows the exact value (docs/CLI.md: `sticky_below` false means exact), which
  // fp64's 53 bits and the remainder's sign only stand in for: the integer quotient gives it.
  if (event || reads_beyond_fp64(f, spec)) return round_exact(f, exact_quotient(x, y), spec, position, event);
  const double q = x / y;
  const double r = std::fma(-q, y, x);  // exact remainder
  if (r == 0.0) return round_exact(f, exact_from_sum_inline(q, 0.0), spec, position, event);
  // The exact quotient q + r/y is not a dyadic tie (it does not terminate), so a
  // stand-in far below q's ulp with the sign of r/y carries all that is needed.
  const bool above = std::signbit(r) == std::signbit(y);
  const double stand_in = std::ldexp(above ? 1.0 : -1.0, std::ilogb(q) - 60);
  return round_exact(f, exact_from_sum_inline(q, stand_in), spec, position, event);
}

Rounded sqrt(const Format& f, std::uint32_t a, const RoundingSpec& spec, std::uint64_t position, RoundingEvent* event) {
  if (event) *event = RoundingEvent{};
  const double x = operand_value(f, a);
  if (std::isnan(x)) return nan_result(f);
  if (x == 0.0) return zero_result(f, std::signbit(x), event);  // sqrt(-0) = -0
  if (x < 0.0) return invalid_result(f);
  if (std::isinf(x)) return infinite_result(f, false, spec, 0);
  if (event || reads_beyond_fp64(f, spec))  // as in div: an event shows the exact root
    return round_exact(f, exact_square_root(x), spec, position, event);
  const double s = std::sqrt(x);
  const double r = std::fma(-s, s, x);  // exact residual x - s^2
  if (r == 0.0) return round_exact(f, exact_from_sum_inline(s, 0.0), spec, position, event);
  const double stand_in = std::ldexp(r > 0.0 ? 1.0 : -1.0, std::ilogb(s) - 60);
  return round_exact(f, exact_from_sum_inline(s, stand_in), spec, position, event);
}

namespace {
template <class FormatChoice>
[[gnu::flatten]] Rounded fma_in(FormatChoice choice, std::uint32_t a, std::uint32_t b, std::uint32_t c,
                                const RoundingSpec& spec, std::uint64_t position, RoundingEvent* event) {
  const Format& f = choice.format();
  const double x = operand_value(f, a), y = operand_value(f, b), z = operand_value(f, c);
  if (std::isnan(x) || std::isnan(y) || std::isnan(z)) return nan_result(f);
  const bool product_negative = std::signbit(x) != std::signbit(y);
  if (std::isinf(x) || std::isinf(y)) {
    if (x == 0.0 || y == 0.0) return invalid_result(f);
    if (std::isinf(z) && std::signbit(z) != product_negative) return invalid_result(f);
    return infinite_result(f, product_negative, spec, 0);
  }
  if (std::isinf(z)) return infinite_result(f, std::signbit(z), spec, 0);
  const double p = x * y;  // exact: at most 48 significant bits, far from fp64's limits
  if (p == 0.0 && z == 0.0) return zero_result(f, zero_sum_is_negative(product_negative, std::signbit(z), spec), event);
  const ExactValue v = exact_sum(p, z);
  if (event) *event = RoundingEvent{}, describe_addition(p, z, v, event);
  if (v.significand == 0) {
    const bool neg = zero_sum_is_negative(product_negative, std::signbit(z), spec);
    if (event) event->negative = neg;
    return zero_result(f, neg);
  }
  return round_exact(f, v, spec, position, event);
}
}  // namespace

Rounded fma(const Format& f, std::uint32_t a, std::uint32_t b, std::uint32_t c, const RoundingSpec& spec,
            std::uint64_t position, RoundingEvent* event) {
  if (event) *event = RoundingEvent{};
  return with_format(f, [&](auto choice) { return fma_in(choice, a, b, c, spec, position, event); });
}

Rounded convert(const Format& to, const Format& from, std::uint32_t a, const RoundingSpec& spec, std::uint64_t position,
                RoundingEvent* event) {
  const double x = operand_value(from, a);
  return round_double(to, x, spec, position, event);
}

Rounded apply_op(OpKind op, const Format& f, const Format& from, std::uint32_t a, std::uint32_t b, std::uint32_t c,
                 const RoundingSpec& spec, std::uint64_t position, RoundingEvent* event) {
  switch (op) {
    case OpKind::add:
      return add(f, a, b, spec, position, event);
    case OpKind::sub:
      return sub(f, a, b, spec, position, event);
    case OpKind::mul:
      return mul(f, a, b, spec, position, event);
    case OpKind::div:
      return div(f, a, b, spec, position, event);
    case OpKind::fma:
      return fma(f, a, b, c, spec, position, event);
    case OpKind::sqrt:
      return sqrt(f, a, spec, position, event);
    case OpKind::cvt:
      return convert(f, from, a, spec, position, event);
  }
  return invalid_result(f);
}

}  // namespace fb
