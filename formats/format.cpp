// formats/format.cpp: exact conversions between format bit patterns and fp64.
#include "formats/format.hpp"

#include <cmath>
#include <limits>

#include "formats/power_of_two.hpp"

namespace fb {

double to_double(const Format& f, std::uint32_t stored) {
  const Decoded d = decode(f, stored);
  double magnitude = 0.0;
  switch (d.cls) {
    case ValueClass::nan:
      return std::numeric_limits<double>::quiet_NaN();
    case ValueClass::infinite:
      magnitude = std::numeric_limits<double>::infinity();
      break;
    case ValueClass::zero:
      magnitude = 0.0;
      break;
    case ValueClass::subnormal:
    case ValueClass::normal:
      magnitude = times_power_of_two(static_cast<double>(d.significand), d.exponent - f.man_bits);
      break;
  }
  return d.negative ? -magnitude : magnitude;
}

bool from_double_exact(const Format& f, double value, std::uint32_t& stored) {
  std::uint32_t layout = 0;
  const bool neg = std::signbit(value);
  if (neg && !f.is_signed) return false;
  if (std::isnan(value)) {
    if (!f.has_nan()) return false;
    stored = to_container(f, f.quiet_nan_pattern());
    return true;
  }
  const std::uint32_t sign = neg ? f.sign_mask() : 0u;
  if (std::isinf(value)) {
    if (!f.has_inf()) return false;
    stored = to_container(f, sign | f.inf_pattern());
    return true;
  }
  if (value == 0.0) {
    if (!f.has_zero() || (neg && !f.has_negative_zero())) return false;
    stored = to_container(f, sign);
    return true;
  }
  int exp2 = 0;
  const double frac = std::frexp(std::fabs(value), &exp2);  // value = frac * 2^exp2, frac in [0.5,1)
  int e = exp2 - 1;                                         // value = 1.xxx * 2^e
  int exp_field = 0;
  int frac_bits = f.man_bits;
  if (e < f.emin()) {
    if (!f.has_subnormals()) return false;
    exp_field = 0;
    frac_bits = f.man_bits - (f.emin() - e);  // bits available below the leading one
    if (frac_bits < 0) return false;
  } else {
    exp_field = e + f.bias;
    if (exp_field > static_cast<int>(f.max_finite_exp_field())) return false;
  }
  // Scale so that the significand, including the leading one, becomes an integer.
  const double scaled = std::ldexp(frac, frac_bits + 1);
  if (scaled != std::floor(scaled)) return false;
  auto sig = static_cast<std::uint64_t>(scaled);
  // A subnormal keeps its significand whole (no leading one to drop). Exponent field 0 alone
  // does not make one: e8m0's field 0 is the normal 2^-127.
  const bool subnormal = e < f.emin();
  std::uint32_t man = subnormal ? static_cast<std::uint32_t>(sig) : static_cast<std::uint32_t>(sig) & f.man_mask();
  if (exp_field == static_cast<int>(f.max_finite_exp_field()) && man > f.max_finite_man_field()) return false;
  layout = sign | (static_cast<std::uint32_t>(exp_field) << f.man_bits) | man;
  stored = to_container(f, layout);
  return true;
}

}  // namespace fb
