// tests/test_stochastic.cpp: stochastic rounding (RoundingMode::sr), docs/DESIGN.md §3 and
// §10 rung 3.
//
// Contract checked here, with every expected value from exact rational arithmetic
// (Boost.Multiprecision cpp_rational / cpp_int), never from the emulator:
// - each sr result is one of the two neighbours of the exact value;
// - with r random bits, P(round up in magnitude) = the discarded fraction truncated
//   to r bits (so with r = 1 a fraction below 1/2 never rounds up), checked by a
//   chi-square test with one degree of freedom;
// - with many random bits, the mean of many draws (different positions) converges to
//   the exact value, within a 5-sigma bound of the binomial standard error;
// - the same (seed, position) gives the same result; 1 thread and 2 threads splitting
//   the positions give identical results; different seeds give different streams.
// - the stream fb::stochastic_bits itself: chi-square tests against the uniform
//   distribution on its low and high byte, on neighbouring positions and on two
//   seeds at one position, across a 2^32 boundary (bad streams are shown to fail
//   them), and its documented definition, written out independently.
// The inputs are fp64 values rounded to bf16 and fp32 values rounded to e4m3, whose
// discarded fractions (e.g. binary 0.0101... ~ 1/3) are not representable in few bits.
#include <doctest/doctest.h>

#include <boost/multiprecision/cpp_int.hpp>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "emu/ops.hpp"
#include "formats/format.hpp"
#include "tests/test_scale.hpp"

namespace {

using boost::multiprecision::cpp_int;
using boost::multiprecision::cpp_rational;
namespace fmt = fb::formats;

using fb_test::sanitizer_scale;

// A test value given exactly: (-1)^negative * significand * 2^exponent, with the
// significand at most 53 bits so that the fp64 built from it is the same number.
struct ExactInput {
  bool negative;
  std::uint64_t significand;
  int exponent;

  double as_double() const {
    const double m = std::ldexp(static_cast<double>(significand), exponent);  // exact: <= 53 bits
    return negative ? -m : m;
  }
  cpp_rational as_rational() const {
    cpp_rational r = cpp_rational(cpp_int(significand));
    if (exponent >= 0)
      r *= cpp_rational(cpp_int(1) << exponent);
    else
      r /= cpp_rational(cpp_int(1) << -exponent);
    return negative ? -r : r;
  }
};

cpp_rational pow2(int e) { return e >= 0 ? cpp_rational(cpp_int(1) << e) : cpp_rational(cpp_int(1), cpp_int(1) << -e); }

// The neighbours of a value on a grid of spacing 2^ulp_exp, and the discarded
// fraction, computed exactly.
struct Neighbours {
  cpp_rational down, up;  // in magnitude: |down| <= |x| < |up|
  cpp_rational fraction;  // (|x| - |down|) / ulp, in [0, 1)
};
Neighbours neighbours(const cpp_rational& x, int ulp_exp) {
  const cpp_rational ulp = pow2(ulp_exp);
  const cpp_rational mag = x < 0 ? cpp_rational(-x) : x;
  const cpp_rational scaled = mag / ulp;
  const cpp_int whole = boost::multiprecision::numerator(scaled) / boost::multiprecision::denominator(scaled);
  const cpp_rational down = cpp_rational(whole) * ulp;
  Neighbours n{down, down + ulp, scaled - cpp_rational(whole)};
  if (x < 0) n.down = -n.down, n.up = -n.up;
  return n;
}

// floor(fraction * 2^r) / 2^r, exactly.
cpp_rational truncate_to_bits(const cpp_rational& fraction, int r) {
  const cpp_rational scaled = fraction * pow2(r);
  const cpp_int whole = boost::multiprecision::numerator(scaled) / boost::multiprecision::denominator(scaled);
  return cpp_rational(whole) / pow2(r);
}

cpp_rational rational_of_double(double v) {
  int e = 0;
  const double m = std::frexp(v, &e);
  const auto mantissa = static_cast<std::int64_t>(std::ldexp(m, 53));  // exact
  return cpp_rational(cpp_int(mantissa)) * pow2(e - 53);
}

fb::RoundingSpec sr_spec(int bits, std::uint64_t seed) {
  fb::RoundingSpec s;
  s.mode = fb::RoundingMode::sr;
  s.sr_bits = bits;
  s.seed = seed;
  return s;
}

// Counts how often sr rounds `x` up (in magnitude) over positions [0, draws), checking
// that every result is one of the two exact neighbours.
struct Draws {
  std::uint64_t up = 0, down = 0, other = 0;
};
Draws draw(const fb::Format& f, const ExactInput& x, const Neighbours& n, const fb::RoundingSpec& spec,
           std::uint64_t draws) {
  Draws d;
  const double xd = x.as_double();
  // Results are classified exactly once per distinct bit pattern (rationals are slow).
  std::uint32_t up_bits = 0, down_bits = 0;
  bool know_up = false, know_down = false;
  for (std::uint64_t pos = 0; pos < draws; ++pos) {
    const std::uint32_t bits = fb::round_double(f, xd, spec, pos).bits;
    if (know_up && bits == up_bits) {
      ++d.up;
    } else if (know_down && bits == down_bits) {
      ++d.down;
    } else {
      const cpp_rational v = rational_of_double(fb::to_double(f, bits));
      if (v == n.up)
        ++d.up, up_bits = bits, know_up = true;
      else if (v == n.down)
        ++d.down, down_bits = bits, know_down = true;
      else
        ++d.other;
    }
  }
  return d;
}

// 1/3 and 2/3-like patterns in bf16 and e4m3, both signs. bf16 keeps 8 bits, so in
// [1, 2) its ulp is 2^-7; e4m3 keeps 4 bits, ulp 2^-3 in [1, 2).
struct Case {
  const char* what;
  fb::Format format;
  ExactInput x;
  int ulp_exp;
};
const Case kCases[] = {
    // 1 + 2^-7 * (binary 0.0101...01, ~1/3): 45 discarded bits below bf16's 7 fraction bits.
    {"bf16, fraction ~1/3", fmt::bf16, {false, 0x100aaaaaaaaaaaull, -52}, -7},
    {"bf16, fraction ~2/3, negative", fmt::bf16, {true, 0x10155555555555ull, -52}, -7},
    {"bf16, fraction ~0.05, large exponent", fmt::bf16, {false, 0x1f819999999999ull, -52 + 40}, -7 + 40},
    // e4m3 in [1, 2) from a 24-bit (fp32-sized) significand: 20 discarded bits.
    {"e4m3, fraction ~0.4", fmt::e4m3, {false, 0xb66666ull, -23}, -3},
    {"e4m3, fraction ~0.3, negative", fmt::e4m3, {true, 0xa4cccdull, -23}, -3},
};

}  // namespace

TEST_CASE("sr: P(up) equals the discarded fraction truncated to r bits (chi-square)") {
  const std::uint64_t draws = sanitizer_scale() ? 4000 : 200000;
  for (const Case& c : kCases) {
    const Neighbours n = neighbours(c.x.as_rational(), c.ulp_exp);
    for (int r : {1, 2, 3, 4, 5, 8, 13}) {
      const cpp_rational p_exact = truncate_to_bits(n.fraction, r);
      const double p = static_cast<double>(p_exact);
      const Draws d = draw(c.format, c.x, n, sr_spec(r, 12345), draws);
      INFO(c.what << ", r = " << r << ", expected P(up) = " << p << ", ups " << d.up << " of " << draws);
      CHECK(d.other == 0);
      if (p == 0.0) {
        CHECK(d.up == 0);  // e.g. ~1/3 with r = 1: the top discarded bit is 0
        continue;
      }
      // Chi-square with 1 degree of freedom; 23.93 is the 1 - 1e-6 quantile, so a
      // correct implementation fails this check once in a million runs.
      const double expected_up = p * static_cast<double>(draws);
      const double expected_down = (1.0 - p) * static_cast<double>(draws);
      const double du = static_cast<double>(d.up) - expected_up;
      const double dd = static_cast<double>(d.down) - expected_down;
      const double chi2 = du * du / expected_up + dd * dd / expected_down;
      CHECK(chi2 < 23.93);
    }
  }
}

TEST_CASE("sr: the mean of many draws converges to the exact value") {
  const std::uint64_t draws = sanitizer_scale() ? 20000 : 1000000;
  for (const Case& c : kCases) {
    const cpp_rational x = c.x.as_rational();
    const Neighbours n = neighbours(x, c.ulp_exp);
    // 32 random bits: P(up) differs from the exact fraction by < 2^-32, far below the
    // statistical resolution of 10^6 draws (~5e-4 ulp).
    const Draws d = draw(c.format, c.x, n, sr_spec(32, 777), draws);
    REQUIRE(d.other == 0);
    const cpp_rational mean =
        (cpp_rational(cpp_int(d.up)) * n.up + cpp_rational(cpp_int(d.down)) * n.down) / cpp_rational(cpp_int(draws));
    const double ulp = static_cast<double>(pow2(c.ulp_exp));
    const double error_ulps = static_cast<double>(cpp_rational(mean - x)) / ulp;
    const double p = static_cast<double>(n.fraction);
    // Standard error of the mean in ulps: sqrt(p(1-p)/N); 5 sigma fails once in ~1.7e6.
    const double bound = 5.0 * std::sqrt(p * (1.0 - p) / static_cast<double>(draws));
    INFO(c.what << ": mean - exact = " << error_ulps << " ulp, bound " << bound);
    CHECK(std::fabs(error_ulps) < bound);
  }
  // Round-to-nearest has a fixed error on the same values; sr must beat it clearly,
  // which shows the check above can fail.
  const Case& c = kCases[0];
  const double rne_error = static_cast<double>(
      cpp_rational(rational_of_double(fb::to_double(c.format, fb::round_double(c.format, c.x.as_double(), {}).bits)) -
                   c.x.as_rational()) /
      pow2(c.ulp_exp));
  CHECK(std::fabs(rne_error) > 0.3);
}

TEST_CASE("sr: the same seed and position give the same result") {
  const Case& c = kCases[0];
  for (std::uint64_t pos : {0ull, 1ull, 2ull, 1000ull, 0xffffffffffffull}) {
    const fb::Rounded a = fb::round_double(c.format, c.x.as_double(), sr_spec(24, 99), pos);
    const fb::Rounded b = fb::round_double(c.format, c.x.as_double(), sr_spec(24, 99), pos);
    CHECK(a.bits == b.bits);
    CHECK(a.flags == b.flags);
  }
  // The same through convert (fp32 source): the stream does not depend on the op.
  const std::uint32_t x_fp32 = 0x3f8ccccdu;  // 1.1000000238...: bf16 discards 0x4ccd of 2^16
  for (std::uint64_t pos = 0; pos < 64; ++pos) {
    CHECK(fb::convert(fmt::bf16, fmt::fp32, x_fp32, sr_spec(16, 5), pos).bits ==
          fb::convert(fmt::bf16, fmt::fp32, x_fp32, sr_spec(16, 5), pos).bits);
  }
}

TEST_CASE("sr: 1 thread and 2 threads splitting the positions give identical results") {
  const std::uint64_t n = sanitizer_scale() ? 5000 : 200000;
  const Case& c = kCases[1];
  const double x = c.x.as_double();
  const fb::RoundingSpec spec = sr_spec(24, 2024);
  std::vector<std::uint32_t> one(n), two(n);
  for (std::uint64_t pos = 0; pos < n; ++pos) one[pos] = fb::round_double(c.format, x, spec, pos).bits;
  // The second run splits the positions into interleaved halves, each thread walking
  // its half backwards, so neither order nor thread assignment matches the first run.
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < 2; ++t) {
    workers.emplace_back([&, t] {
      for (std::uint64_t k = n / 2 + 1; k-- > 0;) {
        const std::uint64_t pos = 2 * k + t;
        if (pos < n) two[pos] = fb::round_double(c.format, x, spec, pos).bits;
      }
    });
  }
  for (auto& w : workers) w.join();
  CHECK(one == two);
  // Both outcomes occur, so the comparison is not trivially true.
  std::uint64_t distinct = 0;
  for (std::uint64_t pos = 1; pos < n; ++pos) distinct += one[pos] != one[0];
  CHECK(distinct > 0);
  CHECK(distinct < n - 1);
}

TEST_CASE("sr: different seeds give different streams") {
  const Case& c = kCases[0];  // P(up) ~ 1/3
  const std::uint64_t n = 20000;
  const double x = c.x.as_double();
  std::uint64_t differ = 0;
  for (std::uint64_t pos = 0; pos < n; ++pos) {
    differ += fb::round_double(c.format, x, sr_spec(24, 1), pos).bits !=
              fb::round_double(c.format, x, sr_spec(24, 2), pos).bits;
  }
  // Independent streams disagree with probability 2p(1-p) = 4/9 per position; a
  // stream that ignored the seed would give 0.
  const double expected = 2.0 * (1.0 / 3) * (2.0 / 3) * static_cast<double>(n);
  INFO("positions that differ: " << differ << ", expected about " << expected);
  CHECK(std::fabs(static_cast<double>(differ) - expected) < 5.0 * std::sqrt(expected));
}

// ---- the stream itself (fb::stochastic_bits, emu/rounding.hpp) ------------------------
// Reference: the uniform distribution. Four chi-square statistics over 256 bins
// each, on consecutive positions that straddle a 2^32 boundary (where the stream's
// key changes): the low byte, the high byte, the top 4 bits of neighbouring
// positions as a pair, and the top 4 bits of two seeds at the same position as a
// pair. Bad streams (a Weyl sequence, the position itself) must fail them, which
// shows the statistics can fail.
namespace {

using Stream = std::uint32_t (*)(std::uint64_t seed, std::uint64_t position);

struct StreamStatistics {
  double low_byte, high_byte, neighbours, seeds;
};

double chi_square_256(const std::vector<std::uint64_t>& counts, std::uint64_t total) {
  const double expected = static_cast<double>(total) / 256.0;
  double chi2 = 0.0;
  for (std::uint64_t c : counts)
    chi2 += (static_cast<double>(c) - expected) * (static_cast<double>(c) - expected) / expected;
  return chi2;
}

StreamStatistics stream_statistics(Stream stream, std::uint64_t seed, std::uint64_t first, std::uint64_t count) {
  std::vector<std::uint64_t> low(256), high(256), pairs(256), seeds(256);
  std::uint32_t previous = stream(seed, first - 1);
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::uint32_t x = stream(seed, first + i);
    const std::uint32_t other_seed = stream(seed + 1, first + i);
    ++low[x & 0xffu];
    ++high[x >> 24];
    ++pairs[((previous >> 28) << 4) | (x >> 28)];
    ++seeds[((other_seed >> 28) << 4) | (x >> 28)];
    previous = x;
  }
  return {chi_square_256(low, count), chi_square_256(high, count), chi_square_256(pairs, count),
          chi_square_256(seeds, count)};
}

// The 1 - 1e-6 quantile of chi-square with 255 degrees of freedom (Wilson-Hilferty):
// a good stream fails one statistic about once in 250,000 runs.
double chi_square_255_limit() {
  const double k = 255.0, z = 4.753;
  const double t = 1.0 - 2.0 / (9.0 * k) + z * std::sqrt(2.0 / (9.0 * k));
  return k * t * t * t;
}

std::uint32_t shipped_stream(std::uint64_t seed, std::uint64_t position) { return fb::stochastic_bits(seed, position); }
std::uint32_t weyl_stream(std::uint64_t seed, std::uint64_t position) {
  return static_cast<std::uint32_t>((position + seed) * 0x9e3779b9u);
}
std::uint32_t position_stream(std::uint64_t, std::uint64_t position) { return static_cast<std::uint32_t>(position); }

}  // namespace

TEST_CASE("sr stream: uniform low and high bytes, independent neighbours and seeds (chi-square)") {
  const std::uint64_t count = sanitizer_scale() ? (1u << 16) : (1u << 20);
  const double limit = chi_square_255_limit();
  for (std::uint64_t seed : {0ull, 12345ull, 0xfedcba9876543210ull}) {
    for (std::uint64_t first : {std::uint64_t{1}, (std::uint64_t{1} << 32) - count / 2, std::uint64_t{7} << 40}) {
      const StreamStatistics s = stream_statistics(shipped_stream, seed, first, count);
      INFO("seed " << seed << ", first position " << first << ": chi2 low " << s.low_byte << ", high " << s.high_byte
                   << ", neighbours " << s.neighbours << ", seeds " << s.seeds << " (limit " << limit << ")");
      CHECK(s.low_byte < limit);
      CHECK(s.high_byte < limit);
      CHECK(s.neighbours < limit);
      CHECK(s.seeds < limit);
    }
  }
  // The statistics catch bad streams: a Weyl sequence has uniform bytes but
  // neighbours and seeds in lockstep; the bare position has a constant high byte.
  const StreamStatistics weyl = stream_statistics(weyl_stream, 1, 1, count);
  CHECK(weyl.neighbours > limit);
  CHECK(weyl.seeds > limit);
  const StreamStatistics bare = stream_statistics(position_stream, 1, 1, count);
  CHECK(bare.high_byte > limit);
  CHECK(bare.seeds > limit);
}

TEST_CASE("sr stream: stochastic_bits is the documented keyed hash, across 2^32 boundaries") {
  // The definition documented in emu/rounding.hpp, spelled out here independently: SplitMix64's finaliser for the key,
  // two keyed rounds of lowbias32 (constants from C. Wellons' hash-prospector) for the word.
  auto splitmix = [](std::uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  auto lowbias32 = [](std::uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
  };
  for (std::uint64_t seed : {0ull, 5ull, 0xffffffffffffffffull}) {
    for (std::uint64_t base : {std::uint64_t{0}, std::uint64_t{1} << 32, std::uint64_t{0xabcd} << 32}) {
      for (std::uint64_t position = base - 3; position != base + 3; ++position) {
        const std::uint64_t k =
            splitmix(splitmix(seed ^ 0x6a09e667f3bcc909ull) + (position >> 32) * 0x9e3779b97f4a7c15ull);
        const std::uint32_t want =
            lowbias32(lowbias32(static_cast<std::uint32_t>(position) ^ static_cast<std::uint32_t>(k)) +
                      static_cast<std::uint32_t>(k >> 32));
        CAPTURE(position);
        CHECK(fb::stochastic_bits(seed, position) == want);
      }
    }
  }
}

namespace {

// The value of an fp32 encoding, exactly (finite, nonzero).
cpp_rational fp32_value(std::uint32_t bits) {
  return rational_of_double(static_cast<double>(std::bit_cast<float>(bits)));
}

// The floor of |x| * 2^m for an exact value given by a callback (floor_scaled(m)), and the
// binade e of |x| (2^e <= |x| < 2^(e+1)), found by comparing floor_scaled with powers of two.
// sr's reference into fp32 (normal range): T = floor(|x| * 2^(23 - e + r)), kept = T >> r,
// the discarded fraction's top r bits F = T mod 2^r; up iff F + (R >> (32 - r)) >= 2^r.
template <class FloorScaled>
std::uint32_t sr_fp32_reference(bool negative, int e, int r, std::uint32_t random32, FloorScaled floor_scaled) {
  const cpp_int t = floor_scaled(23 - e + r);
  const cpp_int kept = t >> r;
  const cpp_int fraction = t - (kept << r);
  const cpp_int draw = cpp_int(random32 >> (32 - r));
  const cpp_int magnitude = kept + (fraction + draw >= (cpp_int(1) << r) ? 1 : 0);
  const double value = std::ldexp(static_cast<double>(magnitude), e - 23);  // <= 25 bits: exact
  return std::bit_cast<std::uint32_t>(static_cast<float>(negative ? -value : value));
}

int binade_of(const cpp_rational& magnitude) {
  int e = std::ilogb(static_cast<double>(magnitude));
  while (pow2(e) > magnitude) --e;
  while (pow2(e + 1) <= magnitude) ++e;
  return e;
}

std::uint32_t sr_fp32_reference(const cpp_rational& x, int r, std::uint32_t random32) {
  const cpp_rational magnitude = x < 0 ? cpp_rational(-x) : x;
  return sr_fp32_reference(x < 0, binade_of(magnitude), r, random32, [&](int m) {
    const cpp_rational scaled = magnitude * pow2(m);
    return cpp_int(boost::multiprecision::numerator(scaled) / boost::multiprecision::denominator(scaled));
  });
}

}  // namespace

// Found by the scalar audit: fp32's 24 bits and 31 or 32 random bits read 56 bits of the exact
// result, and add, sub and fma kept 55 (54 below a power of two), div and sqrt fp64's 53 and
// the remainder's sign, so a carry out of the lowest discarded bits was missed (1 + 358403 *
// 2^-55 under --sr-bits 32 at position 45 stayed 1). Each case sits at the carry threshold:
// its discarded bits are exactly 2^r - R (R the position's draw), or one unit below.
TEST_CASE("sr with 31 and 32 random bits in fp32: every discarded bit counts (exact rationals)") {
  const fb::Format& f = fmt::fp32;
  int checked = 0, ups = 0;
  for (const int r : {31, 32}) {
    const fb::RoundingSpec spec = sr_spec(r, 0);
    int found = 0;
    for (std::uint64_t position = 0; found < 24 && position < 1'000'000; ++position) {
      const std::uint32_t draw = fb::stochastic_bits(0, position) >> (32 - r);
      const std::uint64_t threshold = (std::uint64_t{1} << r) - draw;  // discarded bits that carry
      if (threshold >= (std::uint64_t{1} << 23)) continue;             // y below must fit fp32
      ++found;
      for (const std::uint64_t t : {threshold, threshold - 1}) {
        if (t == 0) continue;
        // y = t * 2^-(23 + r): 1 + y keeps 1 and discards exactly t in its top r bits.
        const float y = std::ldexp(static_cast<float>(t), -(23 + r));
        const std::uint32_t one = 0x3f800000u, y_bits = std::bit_cast<std::uint32_t>(y);
        const std::uint32_t minus_y_bits = y_bits ^ 0x80000000u;
        const cpp_rational x1 = fp32_value(one), xy = fp32_value(y_bits);
        CAPTURE(r);
        CAPTURE(position);
        CAPTURE(t);
        const std::uint32_t want_up = sr_fp32_reference(x1 + xy, r, fb::stochastic_bits(0, position));
        CHECK(fb::add(f, one, y_bits, spec, position).bits == want_up);
        CHECK(fb::sub(f, one, minus_y_bits, spec, position).bits == want_up);
        CHECK(fb::fma(f, one, one, y_bits, spec, position).bits == want_up);
        // Below a power of two (1 - y): one bit lower in the binade, the other side of a borrow.
        CHECK(fb::add(f, one, minus_y_bits, spec, position).bits ==
              sr_fp32_reference(x1 - xy, r, fb::stochastic_bits(0, position)));
        ups += want_up != one;
        checked += 4;
      }
    }
    CHECK(found == 24);
  }
  CHECK(ups > 0);  // the threshold cases carry, the ones below do not
  CHECK(checked > 300);
  // Division and square root at positions the audit found at the threshold (its search), the
  // expected results from exact rationals and integer square roots here.
  struct DivCase {
    std::uint32_t a, b;
    int r;
    std::uint64_t position;
  };
  for (const DivCase& c :
       {DivCase{0x45a15663u, 0x52148b27u, 32, 120105344}, DivCase{0x45718e3bu, 0x45a5ef21u, 31, 1559959}}) {
    CAPTURE(c.position);
    const cpp_rational q = fp32_value(c.a) / fp32_value(c.b);
    CHECK(fb::div(f, c.a, c.b, sr_spec(c.r, 0), c.position).bits ==
          sr_fp32_reference(q, c.r, fb::stochastic_bits(0, c.position)));
  }
  const std::uint32_t root_of = 0x42db5696u;
  const std::uint64_t root_position = 2264373;
  const cpp_rational x = fp32_value(root_of);
  // sqrt(x) in [2^e, 2^(e+1)): e = floor(log2(x) / 2); floor(sqrt(x) * 2^m) = isqrt(x * 4^m).
  const int e = binade_of(x) >= 0 ? binade_of(x) / 2 : -((1 - binade_of(x)) / 2);
  const std::uint32_t want_root = sr_fp32_reference(false, e, 31, fb::stochastic_bits(0, root_position), [&](int m) {
    const cpp_rational scaled = x * pow2(2 * m);
    REQUIRE(boost::multiprecision::denominator(scaled) == 1);
    return cpp_int(boost::multiprecision::sqrt(boost::multiprecision::numerator(scaled)));
  });
  CHECK(fb::sqrt(f, root_of, sr_spec(31, 0), root_position).bits == want_root);
}
