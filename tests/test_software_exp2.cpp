// tests/test_software_exp2.cpp: FlashAttention-4's software exp2 (emu/sfu/software_exp2.hpp).
//
// The reference (tests/software_exp2_reference.hpp) evaluates the same instruction sequence
// in MPFR with each instruction's rounding. Inputs: 10^5 fp32
// values over [-130, 127] (uniform values, random bit patterns, integers and their
// neighbours, the -127 edge), and the specials. The FA4 column split is checked against the
// lists written out by hand from apply_exp2_convert's condition.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "emu/sfu/software_exp2.hpp"
#include "tests/software_exp2_reference.hpp"
#include "tests/test_scale.hpp"

namespace {

using fb_test::sanitizer_scale;

std::vector<float> inputs() {
  const int n = sanitizer_scale() ? 2000 : 100000;
  std::vector<float> xs;
  std::mt19937_64 rng(20261126);
  std::uniform_real_distribution<float> uniform(-130.0f, 127.0f), near_zero(-1.0f, 1.0f);
  for (int i = 0; i < n / 4; ++i) xs.push_back(uniform(rng));
  for (int i = 0; i < n / 4; ++i) xs.push_back(near_zero(rng));
  for (int i = 0; i < n / 4; ++i) {  // random bit patterns of magnitude below 2^7
    const float v = std::bit_cast<float>(static_cast<std::uint32_t>(rng()) & 0xC2FFFFFFu);
    if (std::isfinite(v) && v < 127.0f) xs.push_back(v);
  }
  for (int k = -130; k <= 126; ++k) {  // integers and their neighbours
    const float v = static_cast<float>(k);
    xs.push_back(v);
    xs.push_back(std::nextafter(v, -1000.0f));
    xs.push_back(std::nextafter(v, 1000.0f));
  }
  for (int i = 0; static_cast<int>(xs.size()) < n; ++i)  // the -127 edge: subnormal results
    xs.push_back(-127.0f + static_cast<float>(i % 4096) / 4096.0f);
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {-inf, std::numeric_limits<float>::quiet_NaN(), -0.0f, 0.0f, 1e-40f, -1e-40f, -126.0f, -127.0f,
                  -127.5f, -1000.0f, 126.99999f, 0.5f, -0.5f})
    xs.push_back(v);
  return xs;
}

}  // namespace

TEST_CASE("FA4's software exp2 equals its instruction sequence evaluated in MPFR, bit for bit") {
  fb_test::SoftwareExp2Reference reference;
  std::size_t differ = 0, checked = 0;
  for (const float x : inputs()) {
    const float want = reference(x);
    REQUIRE(reference.last_exact());
    const float got = fb::fa4_software_ex2(x);
    ++checked;
    if (std::bit_cast<std::uint32_t>(got) != std::bit_cast<std::uint32_t>(want)) {
      if (differ++ < 5) {
        CAPTURE(x);
        CAPTURE(got);
        CAPTURE(want);
        CHECK(std::bit_cast<std::uint32_t>(got) == std::bit_cast<std::uint32_t>(want));
      }
    }
  }
  CHECK(differ == 0);
  CHECK(checked >= (sanitizer_scale() ? 2000u : 100000u));
}

TEST_CASE("FA4's software exp2 is within 1e-4 relative of 2^x on the softmax's range") {
  // Not a bit-exact claim: a sanity bound on the polynomial (degree 3 minimax, ~9e-5).
  for (float x = -126.0f; x <= 0.0f; x += 0.0137f) {
    const double want = std::exp2(static_cast<double>(x));
    CHECK(std::fabs(fb::fa4_software_ex2(x) - want) <= 1e-4 * want);
  }
}

TEST_CASE("FA4's split of a 128-column tile between MUFU and the polynomial") {
  // apply_exp2_convert: fragment j of 32 columns, pair index k (even); polynomial iff
  // k % every >= every - 4, j < fragments - 1 and j >= start. Written out by hand:
  // every 10: k in {6, 8, 16, 18, 26, 28}; every 16: k in {12, 14, 28, 30}.
  auto expected = [](std::set<int> pair_starts, int start_fragment) {
    std::set<int> columns;
    for (int j = start_fragment; j < 3; ++j)  // fragments 0..3; the last (3) stays on MUFU
      for (int k : pair_starts) {
        columns.insert(32 * j + k);
        columns.insert(32 * j + k + 1);
      }
    return columns;
  };
  const std::set<int> every10_start1 = expected({6, 8, 16, 18, 26, 28}, 1);
  const std::set<int> every16_start0 = expected({12, 14, 28, 30}, 0);
  for (int c = 0; c < 128; ++c) {
    CAPTURE(c);
    CHECK(fb::fa4_software_ex2_uses_polynomial(c, 128, 10, 1) == (every10_start1.count(c) == 1));
    CHECK(fb::fa4_software_ex2_uses_polynomial(c, 128, 16, 0) == (every16_start0.count(c) == 1));
    CHECK(!fb::fa4_software_ex2_uses_polynomial(c, 128, 0, 0));
  }
  CHECK(every10_start1.size() == 24);
}
