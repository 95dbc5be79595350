// tests/rcp_reference.hpp: an independent reference shared by the rcp_mantissa table tests
// (tests/test_special_functions.cpp, tests/test_probe_file.cpp). Exact integer arithmetic
// only; nothing here calls emu/ or formats/. Both tests also check it against MPFR.
#pragma once

#include <cstdint>

// fp32 bits of the correctly rounded (RNE) 1 / 1.m, by exact integer division: for m > 0,
// 1 / (1 + m 2^-23) = 2^47 / (2^23 + m) * 2^-24 lies in (2^23, 2^24) * 2^-24, so the
// significand q (24 bits, exponent field 126) is 2^47 / (2^23 + m) rounded to an integer,
// never a tie (2^23 + m divides no power of two).
inline std::uint32_t exact_rcp_of_one_point_m(std::uint32_t m) {
  if (m == 0) return 0x3f800000u;
  const std::uint64_t d = (std::uint64_t{1} << 23) + m, n = std::uint64_t{1} << 47;
  std::uint64_t q = n / d;
  const std::uint64_t r = n % d;
  if (2 * r > d || (2 * r == d && (q & 1))) ++q;
  return (126u << 23) | static_cast<std::uint32_t>(q - (std::uint64_t{1} << 23));
}
