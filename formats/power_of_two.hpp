// formats/power_of_two.hpp: exact scaling by powers of two without a libm call.
//
// Contract: power_of_two(k) is 2^k for k in fp64's normal exponent range [-1022, 1023].
// times_power_of_two(x, e) equals std::ldexp(x, e) for every x and e: one multiplication
// by 2^e where 2^e is a normal double (exact unless the product leaves the normal range, where
// it rounds to nearest even as ldexp does), std::ldexp itself otherwise. Why: ldexp is a
// library call through the PLT, and the emulator's hot paths (tensor-core steps, the
// correctly rounded ex2/lg2, operand decoding) scale by 2^e once per element.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace fb {

constexpr bool is_normal_power_of_two_exponent(std::int64_t k) { return k >= -1022 && k <= 1023; }
constexpr double power_of_two(int k) { return std::bit_cast<double>(static_cast<std::uint64_t>(k + 1023) << 52); }
inline double times_power_of_two(double x, std::int64_t e) {
  if (is_normal_power_of_two_exponent(e)) return x * power_of_two(static_cast<int>(e));
  return std::ldexp(x, static_cast<int>(std::clamp<std::int64_t>(e, -100000, 100000)));
}

}  // namespace fb
