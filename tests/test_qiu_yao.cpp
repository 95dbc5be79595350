// tests/test_qiu_yao.cpp: Qiu & Yao's worked example of RNE bias (DESIGN.md §7).
//
// Contract: the exact fp32 partial sum -4.703990459442139, bits
// 1 10000001 0010110 1 000011100010111, converts to bf16 -4.71875 under rne. Its
// rounding event shows round bit 1, sticky bit 1, no tie, rounding away from zero
// (RoundDirection::up), and an error of -0.01476 (checked against exact rational
// arithmetic). With its residual (the 15 bits below the round bit) removed the same
// sum is a tie and rounds to even, -4.6875. The same example is also produced as an
// fp32 addition of two same-sign values, the situation the paper describes.
#include <doctest/doctest.h>

#include <boost/multiprecision/cpp_int.hpp>
#include <bit>
#include <cmath>
#include <cstdint>

#include "emu/ops.hpp"
#include "formats/format.hpp"

namespace {

using boost::multiprecision::cpp_int;
using boost::multiprecision::cpp_rational;
namespace fmt = fb::formats;

// The value of an fp32 normal pattern, decoded here by the IEEE rule, exactly.
cpp_rational fp32_value(std::uint32_t bits) {
  const bool negative = bits >> 31;
  const int e = static_cast<int>((bits >> 23) & 0xff) - 127;
  const cpp_int significand = cpp_int((bits & 0x7fffff) | 0x800000);
  cpp_rational v(significand);
  v = e - 23 >= 0 ? v * cpp_rational(cpp_int(1) << (e - 23)) : v / cpp_rational(cpp_int(1) << (23 - e));
  return negative ? -v : v;
}

// The paper's bit string, assembled field by field.
constexpr std::uint32_t kSign = 1, kExponent = 0b10000001, kKept = 0b0010110, kRound = 1,
                        kResidual = 0b000011100010111;
constexpr std::uint32_t kPartialSum = (kSign << 31) | (kExponent << 23) | (kKept << 16) | (kRound << 15) | kResidual;
constexpr std::uint32_t kTieSum = kPartialSum & ~std::uint32_t{0x7fff};  // residual removed

fb::RoundingSpec rne() { return fb::RoundingSpec{}; }

}  // namespace

TEST_CASE("Qiu & Yao: -4.703990459442139 rounds to bf16 -4.71875 under RNE, away from zero") {
  static_assert(kPartialSum == 0xc0968717u);
  CHECK(std::bit_cast<float>(kPartialSum) == -4.703990459442139f);
  const cpp_rational exact = fp32_value(kPartialSum);

  fb::RoundingEvent ev;
  const fb::Rounded r = fb::convert(fmt::bf16, fmt::fp32, kPartialSum, rne(), 0, &ev);
  // -4.71875 = -(1 + 23/128) * 4 = 1 10000001 0010111: the kept 0010110 plus one.
  CHECK(r.bits == 0xc097u);
  CHECK(fb::to_double(fmt::bf16, r.bits) == -4.71875);
  CHECK(r.flags == fb::flag::inexact);
  CHECK(ev.round_bit);
  CHECK(ev.sticky_bit);
  CHECK_FALSE(ev.tie);
  CHECK(ev.direction == fb::RoundDirection::up);

  // The error result - exact, exactly, and in ulps of bf16 at 4 (2^-5).
  const cpp_rational error = cpp_rational(-151, 32) - exact;
  const cpp_rational error_ulps = error * 32;
  CHECK(static_cast<double>(error) == doctest::Approx(-0.01476).epsilon(1e-3));
  CHECK(error < 0);  // biased toward -inf: larger in magnitude
  CHECK(ev.error_ulps == doctest::Approx(static_cast<double>(error_ulps)).epsilon(1e-12));
  // The exact error -(2^15 - residual) * 2^-21 = -(32768 - 1815) / 2097152.
  CHECK(error == cpp_rational(-(32768 - 1815), 2097152));
}

TEST_CASE("Qiu & Yao: the same sum without its residual is a tie and rounds to even, -4.6875") {
  static_assert(kTieSum == 0xc0968000u);
  fb::RoundingEvent ev;
  const fb::Rounded r = fb::convert(fmt::bf16, fmt::fp32, kTieSum, rne(), 0, &ev);
  // The kept field 0010110 is even, so the tie stays: -(1 + 22/128) * 4 = -4.6875.
  CHECK(r.bits == 0xc096u);
  CHECK(fb::to_double(fmt::bf16, r.bits) == -4.6875);
  CHECK(ev.round_bit);
  CHECK_FALSE(ev.sticky_bit);
  CHECK(ev.tie);
  CHECK(ev.direction == fb::RoundDirection::down);
  const cpp_rational error = cpp_rational(-75, 16) - fp32_value(kTieSum);
  CHECK(error == cpp_rational(1, 64));  // half a bf16 ulp toward zero
  CHECK(ev.error_ulps == doctest::Approx(0.5).epsilon(1e-12));
}

TEST_CASE("Qiu & Yao: as a bf16 addition of two same-sign values, the significand overflow") {
  // Two negative values in [2, 4) whose exact fp32 sum is the paper's partial sum:
  // a = -2.34375 (exact in bf16, 1 10000000 0010110) and b, the rest, which fits fp32.
  // The fp32 add carries out of the significand; the cast to bf16 then rounds away.
  const cpp_rational exact = fp32_value(kPartialSum);
  const cpp_rational a = cpp_rational(-75, 32);  // -2.34375
  const cpp_rational b = exact - a;
  // b = -2.360240459442139... lies in [2, 4), so it is an fp32 iff it is a multiple of 2^-22.
  const cpp_rational b_scaled = b * (cpp_int(1) << 22);  // b in [2, 4): ulp 2^-22
  REQUIRE(boost::multiprecision::denominator(b_scaled) == 1);
  const auto b_bits = std::bit_cast<std::uint32_t>(static_cast<float>(static_cast<double>(b)));
  REQUIRE(fp32_value(b_bits) == b);
  const auto a_bits = std::bit_cast<std::uint32_t>(-2.34375f);
  // In fp32 the sum is exact (no rounding); the event records the carry out.
  fb::RoundingEvent ev32;
  const fb::Rounded s32 = fb::add(fmt::fp32, a_bits, b_bits, rne(), 0, &ev32);
  CHECK(s32.bits == kPartialSum);
  CHECK(s32.flags == 0);
  CHECK(ev32.significand_overflow);  // |a + b| >= 4 > both operands' binade [2, 4)
  // Then the cast to bf16, as in the paper's accumulation.
  const fb::Rounded r = fb::convert(fmt::bf16, fmt::fp32, s32.bits, rne());
  CHECK(r.bits == 0xc097u);
}
