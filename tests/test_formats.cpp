// tests/test_formats.cpp: the format table (formats/format.hpp) against docs/DESIGN.md §2.
//
// Contract checked here, against facts written independently in this file:
// - for every named format, the largest finite value, the smallest normal and the
//   smallest subnormal found by decoding the format's bit patterns with fb::to_double
//   equal exact rationals computed from the §2 parameters (e.g. e4m3 max
//   = (2 - 2^-2) * 2^8 = 448) and the §2 table's printed values;
// - every bit pattern of every format of 16 bits or fewer decodes to the value (or
//   NaN / inf class) that the §2 rules, re-implemented here with cpp_rational, give;
// - fnuz formats have no -0; e8m0 is unsigned with no zero;
// - parse_format accepts every name and eXmY (e5m10 == fp16, ...) and rejects bad names;
// - read_decimal (formats/decimal_text.hpp) gives MPFR's nearest double of a decimal word and
//   refuses every other word (hex floats, inf, padding).
#include <doctest/doctest.h>

#include <mpfr.h>

#include <boost/multiprecision/cpp_int.hpp>
#include <bit>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "formats/decimal_text.hpp"
#include "formats/format.hpp"

namespace {

using boost::multiprecision::cpp_int;
using boost::multiprecision::cpp_rational;
namespace fmt = fb::formats;

cpp_rational pow2(int e) { return e >= 0 ? cpp_rational(cpp_int(1) << e) : cpp_rational(cpp_int(1), cpp_int(1) << -e); }
cpp_rational rational_of_double(double v) {
  int e = 0;
  const double m = std::frexp(v, &e);
  const auto mantissa = static_cast<std::int64_t>(std::ldexp(m, 53));  // exact
  return cpp_rational(cpp_int(mantissa)) * pow2(e - 53);
}

// How docs/DESIGN.md §2 says each named format uses its codes, written out separately from
// formats/format.hpp.
enum class Rule { ieee, fn, fnuz, finite, scale };
struct Spec {
  std::string_view name;
  int exp_bits, man_bits, bias;
  Rule rule;
  int width;                                           // bits in the pattern (tf32: 19, stored shifted left by 13)
  int shift;                                           // storage shift into the container
  cpp_rational max_finite, min_normal, min_subnormal;  // from the §2 table; min_subnormal 0 = none
};

std::vector<Spec> specs() {
  return {
      // fp32 max: (2 - 2^-23) * 2^127 = 3.4028235e38 (the table's rounded value).
      {"fp32", 8, 23, 127, Rule::ieee, 32, 0, (2 - pow2(-23)) * pow2(127), pow2(-126), pow2(-149)},
      {"tf32", 8, 10, 127, Rule::ieee, 19, 13, (2 - pow2(-10)) * pow2(127), pow2(-126), pow2(-136)},
      {"bf16", 8, 7, 127, Rule::ieee, 16, 0, (2 - pow2(-7)) * pow2(127), pow2(-126), pow2(-133)},
      {"fp16", 5, 10, 15, Rule::ieee, 16, 0, cpp_rational(65504), pow2(-14), pow2(-24)},
      {"e4m3", 4, 3, 7, Rule::fn, 8, 0, cpp_rational(448), pow2(-6), pow2(-9)},
      {"e5m2", 5, 2, 15, Rule::ieee, 8, 0, cpp_rational(57344), pow2(-14), pow2(-16)},
      {"e4m3fnuz", 4, 3, 8, Rule::fnuz, 8, 0, cpp_rational(240), pow2(-7), pow2(-10)},
      {"e5m2fnuz", 5, 2, 16, Rule::fnuz, 8, 0, cpp_rational(57344), pow2(-15), pow2(-17)},
      {"e3m2", 3, 2, 3, Rule::finite, 6, 0, cpp_rational(28), pow2(-2), pow2(-4)},
      {"e2m3", 2, 3, 1, Rule::finite, 6, 0, cpp_rational(15, 2), cpp_rational(1), pow2(-3)},
      {"e2m1", 2, 1, 1, Rule::finite, 4, 0, cpp_rational(6), cpp_rational(1), cpp_rational(1, 2)},
      {"e8m0", 8, 0, 127, Rule::scale, 8, 0, pow2(127), pow2(-127), cpp_rational(0)},
  };
}

// What a pattern means by the §2 rules: NaN, +-inf, or a signed exact value.
struct Meaning {
  bool nan = false, inf = false, negative = false;
  cpp_rational value;  // magnitude, for finite patterns
};
Meaning meaning(const Spec& s, std::uint32_t pattern) {
  const bool is_signed = s.rule != Rule::scale;
  const std::uint32_t sign = is_signed ? (pattern >> (s.exp_bits + s.man_bits)) & 1u : 0u;
  const std::uint32_t e = (pattern >> s.man_bits) & ((1u << s.exp_bits) - 1u);
  const std::uint32_t m = pattern & ((1u << s.man_bits) - 1u);
  const std::uint32_t e_all_ones = (1u << s.exp_bits) - 1u, m_all_ones = (1u << s.man_bits) - 1u;
  Meaning r;
  r.negative = sign != 0;
  switch (s.rule) {
    case Rule::ieee:  // exp all ones: inf when man == 0, NaN otherwise
      if (e == e_all_ones) {
        (m == 0 ? r.inf : r.nan) = true;
        return r;
      }
      break;
    case Rule::fn:  // S.1111.111 only
      if (e == e_all_ones && m == m_all_ones) r.nan = true;
      if (r.nan) return r;
      break;
    case Rule::fnuz:  // 0x80 only; the "negative zero" code is the NaN
      if (sign && e == 0 && m == 0) r.nan = true;
      if (r.nan) return r;
      break;
    case Rule::finite:
      break;
    case Rule::scale:  // unsigned 2^(e - 127), 0xff NaN
      if (e == e_all_ones)
        r.nan = true;
      else
        r.value = pow2(static_cast<int>(e) - s.bias);
      return r;
  }
  const cpp_rational fraction = cpp_rational(cpp_int(m)) / pow2(s.man_bits);
  r.value = e == 0 ? fraction * pow2(1 - s.bias) : (1 + fraction) * pow2(static_cast<int>(e) - s.bias);
  return r;
}

fb::Format named(std::string_view name) {
  fb::Format f{};
  REQUIRE(fb::parse_format(name, f));
  return f;
}

}  // namespace

TEST_CASE("max finite, min normal, min subnormal match docs/DESIGN.md section 2") {
  for (const Spec& s : specs()) {
    INFO(s.name);
    const fb::Format f = named(s.name);
    // The §2 formulas agree with the table's values...
    if (s.rule == Rule::ieee) {
      CHECK(s.min_normal == pow2(1 - s.bias));
      CHECK(s.min_subnormal == pow2(1 - s.bias - s.man_bits));
      CHECK(s.max_finite == (2 - pow2(-s.man_bits)) * pow2(static_cast<int>((1u << s.exp_bits) - 2) - s.bias));
    }
    if (s.name == "e4m3") CHECK(s.max_finite == (2 - pow2(-2)) * pow2(8));
    // ...and decoding the format's patterns finds exactly them. Formats up to 16 bits
    // are scanned completely; fp32 in strides plus its extreme codes.
    std::vector<std::uint32_t> patterns;
    if (s.width <= 19) {
      for (std::uint32_t p = 0; p < (1u << s.width); ++p) patterns.push_back(p);
    } else {
      const char* scale = std::getenv("FLASHBITS_TEST_SCALE");
      const std::uint32_t step = scale != nullptr && std::string(scale) == "sanitizer" ? 64u : 1u;
      for (std::uint32_t p = 0; p < (1u << 24); p += step) patterns.push_back(p * 256u + (p & 0xffu));
      for (std::uint32_t p : {0x7f7fffffu, 0x00800000u, 0x00000001u, 0x007fffffu, 0xff7fffffu}) patterns.push_back(p);
    }
    // fp64 comparisons are exact here (every value is an fp64); rationals at the end.
    double max_seen = 0, min_normal_seen = HUGE_VAL, min_sub_seen = HUGE_VAL;
    for (std::uint32_t p : patterns) {
      const double v = fb::to_double(f, p << s.shift);
      if (!std::isfinite(v) || v <= 0.0) continue;
      if (v > max_seen) max_seen = v;
      const fb::Decoded d = fb::decode(f, p << s.shift);
      double& slot = d.cls == fb::ValueClass::normal ? min_normal_seen : min_sub_seen;
      if (v < slot) slot = v;
    }
    CHECK(rational_of_double(max_seen) == s.max_finite);
    CHECK(rational_of_double(min_normal_seen) == s.min_normal);
    if (s.min_subnormal == 0) {
      CHECK(min_sub_seen == HUGE_VAL);  // e8m0 has no subnormals
    } else {
      CHECK(rational_of_double(min_sub_seen) == s.min_subnormal);
    }
    // The derived facts in the table agree with what the patterns say.
    CHECK(rational_of_double(fb::to_double(f, f.max_finite_pattern() << s.shift)) == s.max_finite);
  }
}

TEST_CASE("every pattern of every format up to 19 bits decodes as the section 2 rules say") {
  for (const Spec& s : specs()) {
    if (s.width > 19) continue;
    INFO(s.name);
    const fb::Format f = named(s.name);
    CHECK(f.exp_bits == s.exp_bits);
    CHECK(f.man_bits == s.man_bits);
    CHECK(f.bias == s.bias);
    std::uint64_t wrong = 0, nans = 0, infs = 0;
    for (std::uint32_t p = 0; p < (1u << s.width); ++p) {
      const Meaning want = meaning(s, p);
      const double got = fb::to_double(f, p << s.shift);
      bool ok;
      if (want.nan) {
        ok = std::isnan(got);
        ++nans;
      } else if (want.inf) {
        ok = std::isinf(got) && std::signbit(got) == want.negative;
        ++infs;
      } else {
        ok = std::isfinite(got) && std::signbit(got) == want.negative &&
             rational_of_double(std::fabs(got)) == want.value;
      }
      if (!ok && wrong++ < 5) MESSAGE(s.name << " pattern " << std::hex << p << " decodes to " << got);
    }
    CHECK(wrong == 0);
    // Spot the conventions themselves, not just agreement with meaning().
    if (s.name == "e4m3") CHECK((nans == 2 && infs == 0));
    if (s.name == "e5m2") CHECK((nans == 6 && infs == 2));
    if (s.name == "e4m3fnuz" || s.name == "e5m2fnuz") CHECK((nans == 1 && infs == 0));
    if (s.rule == Rule::finite) CHECK((nans == 0 && infs == 0));
    if (s.name == "e8m0") CHECK((nans == 1 && infs == 0));
    if (s.name == "fp16") CHECK((nans == 2 * 1023 && infs == 2));
    if (s.name == "bf16") CHECK((nans == 2 * 127 && infs == 2));
  }
  CHECK(std::isnan(fb::to_double(fmt::e4m3, 0x7f)));
  CHECK(std::isnan(fb::to_double(fmt::e4m3, 0xff)));
  CHECK(fb::to_double(fmt::e4m3, 0x7e) == 448.0);
  CHECK(fb::to_double(fmt::e5m2, 0x7c) == HUGE_VAL);
  CHECK(fb::to_double(fmt::e5m2, 0x7b) == 57344.0);
  CHECK(std::isnan(fb::to_double(fmt::e4m3fnuz, 0x80)));
  CHECK(fb::to_double(fmt::e4m3fnuz, 0x7f) == 240.0);
  CHECK(fb::to_double(fmt::e2m1, 0x7) == 6.0);
  CHECK(fb::to_double(fmt::e2m1, 0xf) == -6.0);
}

TEST_CASE("every finite value of every format up to 19 bits encodes back to its one pattern") {
  // from_double_exact reads a value operand (`op ... +0.5`, Python values): the value the §2
  // rules give a pattern (meaning(), in cpp_rational) must encode to that pattern, and a
  // value just off it (half its distance to the next larger magnitude) to none. e8m0's field
  // 0 is the normal 2^-127, not a subnormal: it once encoded as pattern 1 (2^-126).
  for (const Spec& s : specs()) {
    if (s.width > 19) continue;
    INFO(s.name);
    const fb::Format f = named(s.name);
    std::uint64_t wrong = 0, checked = 0;
    for (std::uint32_t p = 0; p < (1u << s.width); ++p) {
      const Meaning want = meaning(s, p);
      if (want.nan || want.inf) continue;
      const double magnitude = want.value.convert_to<double>();
      REQUIRE(rational_of_double(magnitude) == want.value);  // every such value is a double
      const double value = want.negative ? -magnitude : magnitude;
      std::uint32_t got = 0;
      const bool ok = fb::from_double_exact(f, value, got);
      ++checked;
      if ((!ok || got != (p << s.shift)) && wrong++ < 5)
        MESSAGE(s.name << " value " << value << " (pattern " << std::hex << p << ") encodes to " << got << " ok "
                       << ok);
      if (magnitude != 0.0) {
        std::uint32_t off = 0;
        const double between = value * (1.0 + std::ldexp(1.0, -(s.man_bits + 1)));
        if (std::isfinite(between) && fb::from_double_exact(f, between, off) && wrong++ < 5)
          MESSAGE(s.name << " value " << between << " (not representable) encodes to " << std::hex << off);
      }
    }
    CHECK(wrong == 0);
    CHECK(checked > 0);
  }
}

TEST_CASE("negative zero exists except in fnuz formats; e8m0 is unsigned with no zero") {
  for (const Spec& s : specs()) {
    if (s.width > 19) continue;
    INFO(s.name);
    const fb::Format f = named(s.name);
    int negative_zeros = 0, zeros = 0, negatives = 0;
    for (std::uint32_t p = 0; p < (1u << s.width); ++p) {
      const double v = fb::to_double(f, p << s.shift);
      if (v == 0.0) ++zeros;
      if (v == 0.0 && std::signbit(v)) ++negative_zeros;
      if (!std::isnan(v) && std::signbit(v)) ++negatives;
    }
    const bool fnuz = s.rule == Rule::fnuz;
    const bool scale = s.rule == Rule::scale;
    CHECK(negative_zeros == (fnuz || scale ? 0 : 1));
    CHECK(zeros == (scale ? 0 : (fnuz ? 1 : 2)));
    if (scale) CHECK(negatives == 0);
    CHECK(f.has_negative_zero() == !(fnuz || scale));
  }
  CHECK_FALSE(fmt::e8m0.is_signed);
  CHECK(fb::to_double(fmt::e8m0, 0x00) == std::ldexp(1.0, -127));
  CHECK(fb::to_double(fmt::e8m0, 0x7f) == 1.0);
  CHECK(fb::to_double(fmt::e8m0, 0xfe) == std::ldexp(1.0, 127));
}

TEST_CASE("parse_format: names, eXmY spellings and bad names") {
  for (const Spec& s : specs()) CHECK(std::string_view(named(s.name).name) == s.name);
  CHECK(named("e5m10") == fmt::fp16);
  CHECK(named("e8m23") == fmt::fp32);
  CHECK(named("e8m7") == fmt::bf16);
  CHECK(named("e5m2") == fmt::e5m2);
  // A custom format: IEEE-style with bias 2^(X-1) - 1.
  const fb::Format e3m4 = named("e3m4");
  CHECK(e3m4.exp_bits == 3);
  CHECK(e3m4.man_bits == 4);
  CHECK(e3m4.bias == 3);
  CHECK(e3m4.special == fb::SpecialEncoding::ieee);
  CHECK(e3m4.container_bits == 8);
  CHECK(std::string_view(e3m4.name) == "e3m4");
  // Custom max finite by the IEEE rule: (2 - 2^-4) * 2^(6 - 3) = 15.5.
  CHECK(fb::to_double(e3m4, e3m4.max_finite_pattern()) == 15.5);
  CHECK(named("e6m9").container_bits == 16);
  CHECK(named("e8m12").container_bits == 32);
  for (std::string_view bad : {"", "bf", "fp8", "e", "e5", "e5m", "em2", "e5m2x", "E5M2", "BF16", "e1m2", "e9m2",
                               "e5m0", "e5m24", "e4m3fn", " bf16", "bf16 ", "e-5m2", "e5m-2", "fp32\n", "e10m5",
                               // leading zeros (the bad-input audit: e08m07 was read as bf16)
                               "e08m07", "e05m2", "e5m02", "e00m5"}) {
    fb::Format out = fmt::e2m1;
    INFO("name '" << bad << "'");
    CHECK_FALSE(fb::parse_format(bad, out));
    CHECK(out == fmt::e2m1);  // untouched on failure
  }
}

namespace {
// The double nearest `word` (ties to even), from MPFR with double's exponent range and its
// subnormals (mpfr_check_range and mpfr_subnormalize after the correctly rounded read);
// nullopt where that is an infinity (the word overflows). The independent reference of
// read_decimal.
std::optional<double> mpfr_nearest_double(const std::string& word) {
  const mpfr_exp_t old_min = mpfr_get_emin(), old_max = mpfr_get_emax();
  mpfr_set_emin(-1073);
  mpfr_set_emax(1024);
  mpfr_t x;
  mpfr_init2(x, 53);
  int inexact = mpfr_strtofr(x, word.c_str(), nullptr, 10, MPFR_RNDN);
  inexact = mpfr_check_range(x, inexact, MPFR_RNDN);
  mpfr_subnormalize(x, inexact, MPFR_RNDN);
  const std::optional<double> d = mpfr_inf_p(x) ? std::nullopt : std::optional<double>(mpfr_get_d(x, MPFR_RNDN));
  mpfr_clear(x);
  mpfr_set_emin(old_min);
  mpfr_set_emax(old_max);
  return d;
}
}  // namespace

// formats/decimal_text.hpp: every number typed or written as text (options, model parameters,
// sweep sums) is read by read_decimal; CLI11 and stod also took hex floats, padding and inf.
TEST_CASE("read_decimal: the nearest double of a decimal word, as MPFR rounds it; nothing else") {
  std::mt19937_64 rng(20261206);
  int checked = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string word;
    if (rng() % 2) word += rng() % 2 ? "-" : "+";
    const int digits = 1 + static_cast<int>(rng() % 20);
    const int point = static_cast<int>(rng() % (digits + 2)) - 1;  // -1: no point
    for (int d = 0; d < digits; ++d) {
      if (d == point) word += '.';
      word += static_cast<char>('0' + rng() % 10);
    }
    if (point == digits) word += '.';
    if (rng() % 3) word += (rng() % 2 ? "e" : "E") + std::to_string(static_cast<int>(rng() % 700) - 350);
    CAPTURE(word);
    const std::optional<double> want = mpfr_nearest_double(word);
    const std::optional<double> got = fb::read_decimal(word);
    REQUIRE(want.has_value() == got.has_value());
    if (want) {
      CHECK(std::signbit(*got) == std::signbit(*want));
      CHECK(*got == *want);
      ++checked;
    }
  }
  CHECK(checked > 15000);
  // The edges: the smallest subnormal, an underflow to a signed zero, the largest double and
  // a word beyond it.
  CHECK(fb::read_decimal("4.9406564584124654e-324") == std::numeric_limits<double>::denorm_min());
  const std::optional<double> tiny = fb::read_decimal("-1e-400");
  REQUIRE(tiny.has_value());
  CHECK(*tiny == 0.0);
  CHECK(std::signbit(*tiny));
  CHECK(fb::read_decimal("1.7976931348623157e308") == std::numeric_limits<double>::max());
  CHECK_FALSE(fb::read_decimal("1e309").has_value());
  CHECK_FALSE(fb::read_decimal("0.000001e99999999999999999999").has_value());
  CHECK(fb::read_decimal("123456789e-99999999999999999999") == 0.0);
  for (const char* word :
       {"",   " 1",  "1 ", "\t1",   "0x1p3", "0x10", "inf", "-inf", "nan", "+",        "-",   ".",
        "1e", "1e+", "e5", "1.2.3", "1,5",   "1e5x", "--1", "+-1",  "1..", "\xd9\xa1", "1e-", "0X1"}) {
    CAPTURE(word);
    CHECK_FALSE(fb::read_decimal(word).has_value());
  }
}

namespace {
// The value nearest `word` in a binary format of `precision` bits with subnormals (MPFR's
// exponent range [emin, emax] for significands in [1/2, 1)): binary64 is (53, -1073, 1024),
// binary32 (24, -148, 128). Infinity for an overflow.
double mpfr_nearest(const std::string& word, int precision, mpfr_exp_t emin, mpfr_exp_t emax) {
  const mpfr_exp_t old_min = mpfr_get_emin(), old_max = mpfr_get_emax();
  mpfr_set_emin(emin);
  mpfr_set_emax(emax);
  mpfr_t x;
  mpfr_init2(x, precision);
  int inexact = mpfr_strtofr(x, word.c_str(), nullptr, 10, MPFR_RNDN);
  inexact = mpfr_check_range(x, inexact, MPFR_RNDN);
  mpfr_subnormalize(x, inexact, MPFR_RNDN);
  const double d = mpfr_get_d(x, MPFR_RNDN);
  mpfr_clear(x);
  mpfr_set_emin(old_min);
  mpfr_set_emax(old_max);
  return d;
}

// x's decimal neighbours of `digits` significant digits, below and above it (MPFR's directed
// conversions), as words.
std::pair<std::string, std::string> decimal_neighbours(double x, int digits) {
  mpfr_t v;
  mpfr_init2(v, 53);
  mpfr_set_d(v, x, MPFR_RNDN);  // exact
  std::pair<std::string, std::string> out;
  for (const mpfr_rnd_t mode : {MPFR_RNDD, MPFR_RNDU}) {
    mpfr_exp_t exponent = 0;
    char* text = mpfr_get_str(nullptr, &exponent, 10, static_cast<std::size_t>(digits), v, mode);
    std::string word(text);
    mpfr_free_str(text);
    const bool negative = word[0] == '-';
    word = std::string(negative ? "-" : "") + "0." + word.substr(negative ? 1 : 0) + "e" + std::to_string(exponent);
    (mode == MPFR_RNDD ? out.first : out.second) = word;
  }
  mpfr_clear(v);
  return out;
}

int significant_digits(const std::string& text) {
  const std::string mantissa = text.substr(0, text.find('e'));
  const std::size_t first = mantissa.find_first_of("123456789");
  const std::size_t last = mantissa.find_last_of("123456789");
  if (first == std::string::npos) return 1;
  int digits = 0;
  for (std::size_t i = first; i <= last; ++i) digits += mantissa[i] >= '0' && mantissa[i] <= '9' ? 1 : 0;
  return digits;
}

// Shortest: the text reads back (MPFR's nearest value in the format) as x, and neither decimal
// neighbour of one digit fewer does; no '+'. A whole number written out in full
// (826108737684340480, shorter than its scientific form) may carry more digits than it needs:
// there the fewest characters, not the fewest digits, is std::to_chars' choice.
void check_shortest(const std::string& text, double x, int precision, mpfr_exp_t emin, mpfr_exp_t emax) {
  CAPTURE(text);
  CHECK(text.find('+') == std::string::npos);
  CHECK(text.find("e0") == std::string::npos);
  CHECK(text.find("e-0") == std::string::npos);
  CHECK(fb::read_decimal(text).has_value());
  const double back = mpfr_nearest(text, precision, emin, emax);
  CHECK(back == x);
  CHECK(std::signbit(back) == std::signbit(x));
  const int digits = significant_digits(text);
  const bool whole_number_in_full = text.find_first_of(".e") == std::string::npos;
  if (digits > 1 && !whole_number_in_full) {
    // Named members, not a structured binding: clang before 16 cannot capture bindings.
    const std::pair<std::string, std::string> neighbours = decimal_neighbours(x, digits - 1);
    const std::string& below = neighbours.first;
    const std::string& above = neighbours.second;
    CAPTURE(below);
    CAPTURE(above);
    CHECK(mpfr_nearest(below, precision, emin, emax) != x);
    CHECK(mpfr_nearest(above, precision, emin, emax) != x);
  }
}
}  // namespace

TEST_CASE("shortest_decimal: the fewest digits that read back exactly, as MPFR reads them") {
  std::mt19937_64 rng(0x5401'7e57);
  for (int i = 0; i < 4000; ++i) {
    // Every binade, subnormals included; the powers of two (an asymmetric rounding interval).
    std::uint64_t bits = rng();
    if (i % 8 == 0) bits &= 0xfff0'0000'0000'0000ull;
    const double x = std::bit_cast<double>(bits);
    if (!std::isfinite(x)) continue;
    check_shortest(fb::shortest_decimal(x), x, 53, -1073, 1024);
    std::uint32_t bits32 = static_cast<std::uint32_t>(rng());
    if (i % 8 == 0) bits32 &= 0xff80'0000u;
    const float f = std::bit_cast<float>(bits32);
    if (!std::isfinite(f)) continue;
    check_shortest(fb::shortest_decimal(f), f, 24, -148, 128);
  }
  // The echoes this writer exists for, and an exponent without its '+'.
  CHECK(fb::shortest_decimal(1.0000001) == "1.0000001");
  CHECK(fb::shortest_decimal(0.1f) == "0.1");
  CHECK(fb::shortest_decimal(1e40) == "1e40");
  CHECK(fb::shortest_decimal(1e-7) == "1e-7");
  CHECK(fb::shortest_decimal(-2.5e-300) == "-2.5e-300");
  CHECK(fb::shortest_decimal(-std::numeric_limits<double>::infinity()) == "-inf");
}

TEST_CASE("read_plain_integer: an optional minus and digits, nothing else") {
  // Written out by hand: the values are the words' own, the refusals the contract's.
  const std::pair<const char*, long long> good[] = {{"0", 0},
                                                    {"12", 12},
                                                    {"-5", -5},
                                                    {"007", 7},
                                                    {"9223372036854775807", LLONG_MAX},
                                                    {"-9223372036854775808", LLONG_MIN}};
  for (const auto& entry : good) {  // not a structured binding: clang before 16 cannot capture one
    const char* word = entry.first;
    CAPTURE(word);
    long long got = 1;
    CHECK(fb::read_plain_integer(word, got) == fb::PlainIntegerError::none);
    CHECK(got == entry.second);
  }
  for (const char* word : {"", "-", "+5", " 5", "5 ", "1e0", "1.0", "-0", "0x10", "5-", "--5", "1_000"}) {
    CAPTURE(word);
    long long got = 42;
    CHECK(fb::read_plain_integer(word, got) == fb::PlainIntegerError::not_plain_digits);
    CHECK(got == 42);  // untouched
  }
  for (const char* word : {"9223372036854775808", "-9223372036854775809", "99999999999999999999"}) {
    long long got = 42;
    CHECK(fb::read_plain_integer(word, got) == fb::PlainIntegerError::out_of_range);
  }
  long long got = 0;
  CHECK(fb::read_plain_integer("-5", got, false) == fb::PlainIntegerError::not_plain_digits);
}
