// tests/test_summation.cpp: summation orders and the exact accumulator (emu/summation.hpp).
//
// References, independent of the code under test: every step of sequential,
// pairwise, Kahan and FMA-chain summation is computed exactly in MPFR (512 bits)
// and rounded into the format here by explicit MPFR rounding (mpfr_set to p bits
// for normal results, mpfr_rint on the subnormal grid below 2^emin, explicit
// overflow); the exact accumulator is checked against a Boost cpp_rational sum.
#include <doctest/doctest.h>
#include <mpfr.h>

#include <algorithm>
#include <bit>
#include <boost/multiprecision/cpp_int.hpp>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "emu/summation.hpp"

namespace {

int test_scale_divisor() {
  const char* s = std::getenv("FLASHBITS_TEST_SCALE");
  return (s && std::string(s) == "sanitizer") ? 50 : 1;
}

// ---- an IEEE binary format, described independently --------------------------------
struct RefFormat {
  const fb::Format* fb;
  int ebits, mbits, bias;
  int p() const { return mbits + 1; }
  int emin() const { return 1 - bias; }
  int emax() const { return (1 << ebits) - 2 - bias; }
};
const RefFormat kBf16{&fb::formats::bf16, 8, 7, 127};
const RefFormat kFp16{&fb::formats::fp16, 5, 10, 15};
const RefFormat kFp32{&fb::formats::fp32, 8, 23, 127};

double ref_value(const RefFormat& f, std::uint32_t bits) {
  const bool neg = (bits >> (f.ebits + f.mbits)) & 1u;
  const std::uint32_t e = (bits >> f.mbits) & ((1u << f.ebits) - 1u);
  const std::uint32_t m = bits & ((1u << f.mbits) - 1u);
  double v;
  if (e == (1u << f.ebits) - 1u)
    v = m ? std::numeric_limits<double>::quiet_NaN() : INFINITY;
  else if (e == 0)
    v = std::ldexp(static_cast<double>(m), f.emin() - f.mbits);
  else
    v = std::ldexp(static_cast<double>(m | (1u << f.mbits)), static_cast<int>(e) - f.bias - f.mbits);
  return neg ? -v : v;
}

// Encodes a double that is a value of f (or inf/NaN); canonical NaN is not needed
// since NaNs are compared by class.
std::uint32_t ref_encode(const RefFormat& f, double v) {
  const std::uint32_t sign = std::signbit(v) ? (1u << (f.ebits + f.mbits)) : 0u;
  const std::uint32_t inf = ((1u << f.ebits) - 1u) << f.mbits;
  if (std::isnan(v)) return inf | (1u << (f.mbits - 1));
  if (std::isinf(v)) return sign | inf;
  if (v == 0) return sign;
  const double a = std::fabs(v);
  const int e = std::ilogb(a);
  if (e < f.emin()) return sign | static_cast<std::uint32_t>(std::ldexp(a, f.mbits - f.emin()));
  const auto m = static_cast<std::uint32_t>(std::ldexp(a, f.mbits - e));
  return sign | (static_cast<std::uint32_t>(e + f.bias) << f.mbits) | (m - (1u << f.mbits));
}

// Rounds the exact MPFR value x into f in mode rnd; returns the value as a double.
double mpfr_round_into(const RefFormat& f, mpfr_srcptr x, mpfr_rnd_t rnd) {
  if (mpfr_nan_p(x)) return std::numeric_limits<double>::quiet_NaN();
  if (mpfr_inf_p(x)) return mpfr_sgn(x) > 0 ? INFINITY : -INFINITY;
  if (mpfr_zero_p(x)) return mpfr_signbit(x) ? -0.0 : 0.0;
  mpfr_t y;
  mpfr_init2(y, 600);
  const long e = mpfr_get_exp(x) - 1;  // x = 1.xxx * 2^e
  if (e >= f.emin()) {
    mpfr_set_prec(y, f.p());
    mpfr_set(y, x, rnd);
  } else {
    // Subnormal grid: integer multiples of 2^(emin - p + 1).
    mpfr_set(y, x, MPFR_RNDN);  // exact at 600 bits
    mpfr_mul_2si(y, y, -(f.emin() - f.p() + 1), MPFR_RNDN);
    mpfr_rint(y, y, rnd);
    mpfr_mul_2si(y, y, f.emin() - f.p() + 1, MPFR_RNDN);
  }
  double r = mpfr_get_d(y, MPFR_RNDN);  // exact: y has <= 24 significant bits
  mpfr_clear(y);
  const double max_finite = std::ldexp(2.0 - std::ldexp(1.0, -f.mbits), f.emax());
  if (std::fabs(r) > max_finite) {
    const bool neg = r < 0;
    const bool to_inf = rnd == MPFR_RNDN || (rnd == MPFR_RNDU && !neg) || (rnd == MPFR_RNDD && neg);
    r = to_inf ? (neg ? -INFINITY : INFINITY) : (neg ? -max_finite : max_finite);
  }
  return r;
}

struct Mode {
  fb::RoundingMode fb;
  mpfr_rnd_t mpfr;
};
const Mode kModes[] = {{fb::RoundingMode::rne, MPFR_RNDN},
                       {fb::RoundingMode::rtz, MPFR_RNDZ},
                       {fb::RoundingMode::rup, MPFR_RNDU},
                       {fb::RoundingMode::rdn, MPFR_RNDD}};

// One exactly computed, independently rounded operation.
struct MpfrStep {
  mpfr_t a, b, c, r;
  MpfrStep() { mpfr_inits2(700, a, b, c, r, static_cast<mpfr_ptr>(nullptr)); }
  ~MpfrStep() { mpfr_clears(a, b, c, r, static_cast<mpfr_ptr>(nullptr)); }
  double add(const RefFormat& f, double x, double y, mpfr_rnd_t rnd) {
    mpfr_set_d(a, x, MPFR_RNDN), mpfr_set_d(b, y, MPFR_RNDN);
    mpfr_add(r, a, b, rnd);  // exact at 700 bits; rnd only decides the sign of an exact zero
    return mpfr_round_into(f, r, rnd);
  }
  double sub(const RefFormat& f, double x, double y, mpfr_rnd_t rnd) {
    mpfr_set_d(a, x, MPFR_RNDN), mpfr_set_d(b, y, MPFR_RNDN);
    mpfr_sub(r, a, b, rnd);
    return mpfr_round_into(f, r, rnd);
  }
  double fma(const RefFormat& f, double x, double y, double z, mpfr_rnd_t rnd) {
    mpfr_set_d(a, x, MPFR_RNDN), mpfr_set_d(b, y, MPFR_RNDN), mpfr_set_d(c, z, MPFR_RNDN);
    mpfr_fma(r, a, b, c, rnd);
    return mpfr_round_into(f, r, rnd);
  }
};

struct Gen {
  std::mt19937_64 rng;
  explicit Gen(std::uint64_t s) : rng(s) {}
  int range(int lo, int hi) { return lo + static_cast<int>(rng() % static_cast<std::uint64_t>(hi - lo + 1)); }
  std::uint32_t value(const RefFormat& f, int kind) {
    const std::uint32_t sign = static_cast<std::uint32_t>(rng() & 1u) << (f.ebits + f.mbits);
    const std::uint32_t m = static_cast<std::uint32_t>(rng()) & ((1u << f.mbits) - 1u);
    int e;
    switch (kind) {
      case 0:
        return static_cast<std::uint32_t>(rng() & ((std::uint64_t{1} << (1 + f.ebits + f.mbits)) - 1u));  // anything
      case 1:
        e = range(f.bias - 4, f.bias + 4);
        break;  // overlapping
      case 2:
        e = range(0, 3);
        break;  // subnormal region
      case 3:
        e = range((1 << f.ebits) - 5, (1 << f.ebits) - 2);
        break;  // near overflow
      default:
        e = range(0, (1 << f.ebits) - 2);
        break;  // wide, finite
    }
    return sign | (static_cast<std::uint32_t>(e) << f.mbits) | m;
  }
};

bool same(const RefFormat& f, std::uint32_t got, double want) {
  if (std::isnan(want)) return std::isnan(ref_value(f, got));
  return got == ref_encode(f, want);
}

enum class Algo { sequential, pairwise, kahan, fma_chain };
const char* algo_name(Algo a) {
  switch (a) {
    case Algo::sequential:
      return "sequential";
    case Algo::pairwise:
      return "pairwise";
    case Algo::kahan:
      return "kahan";
    case Algo::fma_chain:
      return "fma-chain";
  }
  return "?";
}

double ref_pairwise(MpfrStep& s, const RefFormat& f, const std::vector<double>& x, std::size_t lo, std::size_t hi,
                    mpfr_rnd_t rnd) {
  if (hi - lo == 1) return x[lo];
  const std::size_t m = lo + (hi - lo) / 2;
  const double left = ref_pairwise(s, f, x, lo, m, rnd);
  const double right = ref_pairwise(s, f, x, m, hi, rnd);
  return s.add(f, left, right, rnd);
}

}  // namespace

TEST_CASE("sequential, pairwise, Kahan and FMA-chain summation match MPFR step by step") {
  const int cases = 1500 / test_scale_divisor();
  MpfrStep step;
  std::uint64_t seed = 1;
  for (const RefFormat* f : {&kBf16, &kFp16, &kFp32}) {
    for (const Mode& mode : kModes) {
      fb::RoundingSpec spec;
      spec.mode = mode.fb;
      for (Algo algo : {Algo::sequential, Algo::pairwise, Algo::kahan, Algo::fma_chain}) {
        Gen g(seed++);
        int failures = 0;
        for (int n = 0; n < cases && failures < 3; ++n) {
          const int len = g.range(0, 40);
          const int kind = g.range(0, 6);
          std::vector<std::uint32_t> x(static_cast<std::size_t>(len)), y(static_cast<std::size_t>(len));
          std::vector<double> xv, yv;
          for (int i = 0; i < len; ++i) {
            const int k = kind <= 4 ? kind : g.range(0, 4);  // 5, 6: mixed per element
            x[static_cast<std::size_t>(i)] = g.value(*f, k);
            y[static_cast<std::size_t>(i)] = g.value(*f, k == 3 ? 1 : k);
            xv.push_back(ref_value(*f, x[static_cast<std::size_t>(i)]));
            yv.push_back(ref_value(*f, y[static_cast<std::size_t>(i)]));
          }
          double want = 0.0;
          fb::Rounded got{};
          switch (algo) {
            case Algo::sequential: {
              got = fb::sum_sequential(*f->fb, x, spec);
              if (len > 0) {
                want = xv[0];
                for (int i = 1; i < len; ++i) want = step.add(*f, want, xv[static_cast<std::size_t>(i)], mode.mpfr);
              }
              break;
            }
            case Algo::pairwise:
              got = fb::sum_pairwise(*f->fb, x, spec);
              if (len > 0) want = ref_pairwise(step, *f, xv, 0, xv.size(), mode.mpfr);
              break;
            case Algo::kahan: {
              got = fb::sum_kahan(*f->fb, x, spec);
              if (len > 0) {
                double s = xv[0], c = 0.0;
                for (int i = 1; i < len; ++i) {
                  const double yy = step.sub(*f, xv[static_cast<std::size_t>(i)], c, mode.mpfr);
                  const double t = step.add(*f, s, yy, mode.mpfr);
                  c = step.sub(*f, step.sub(*f, t, s, mode.mpfr), yy, mode.mpfr);
                  s = t;
                }
                want = s;
              }
              break;
            }
            case Algo::fma_chain: {
              const std::uint32_t c0 = g.value(*f, 1);
              got = fb::dot_fma_chain(*f->fb, c0, x, y, spec);
              want = ref_value(*f, c0);
              for (int i = 0; i < len; ++i)
                want = step.fma(*f, xv[static_cast<std::size_t>(i)], yv[static_cast<std::size_t>(i)], want, mode.mpfr);
              break;
            }
          }
          if (!same(*f, got.bits, want)) {
            ++failures;
            std::string xs;
            for (auto b : x) xs += std::to_string(b) + ",";
            FAIL_CHECK(algo_name(algo) << " " << f->fb->name << " " << fb::to_string(mode.fb) << " x=" << xs << " got "
                                       << got.bits << " want " << want << " (" << ref_encode(*f, want) << ")");
          }
        }
      }
    }
  }
}

TEST_CASE("exact accumulator: one rounding of the cpp_rational sum of values and products") {
  namespace mp = boost::multiprecision;
  const int cases = 20000 / test_scale_divisor();
  const fb::Format* sources[] = {&fb::formats::fp32, &fb::formats::bf16, &fb::formats::fp16,
                                 &fb::formats::tf32, &fb::formats::e4m3, &fb::formats::e5m2};
  const RefFormat* outs[] = {&kFp32, &kBf16, &kFp16};
  Gen g(4242);
  mpfr_t x;
  mpfr_init2(x, 2000);
  int failures = 0;
  for (int n = 0; n < cases && failures < 5; ++n) {
    fb::ExactAccumulator acc;
    mp::cpp_rational sum = 0;
    const int terms = g.range(1, 30);
    const bool cancel = g.range(0, 2) == 0;
    bool all_neg_zero = true, all_pos_zero = true;
    auto note = [&](const mp::cpp_rational& v, bool negative) {
      if (v != 0)
        all_neg_zero = all_pos_zero = false;
      else
        (negative ? all_pos_zero : all_neg_zero) = false;
    };
    for (int t = 0; t < terms; ++t) {
      // Finite values only here (specials are checked below); random widths and exponents.
      auto finite_value = [&](const fb::Format*& fmt) {
        while (true) {
          fmt = sources[g.range(0, 5)];
          std::uint32_t bits = static_cast<std::uint32_t>(g.rng()) & fmt->width_mask();
          if (g.range(0, 1)) {  // pull the exponent towards 1.0 for overlap
            const std::uint32_t e = static_cast<std::uint32_t>(fmt->bias + g.range(-3, 3));
            bits = (bits & ~(fmt->exp_field_max() << fmt->man_bits)) | (e << fmt->man_bits);
          }
          bits = fb::to_container(*fmt, bits);
          const double v = fb::to_double(*fmt, bits);
          if (std::isfinite(v)) return bits;
        }
      };
      auto rational_of = [](const fb::Format& fmt, std::uint32_t bits) {
        // Exact value from the fields, not from the code under test.
        const std::uint32_t layout = bits >> fmt.storage_shift();
        const bool neg = (layout >> (fmt.exp_bits + fmt.man_bits)) & 1u;
        const std::uint32_t e = (layout >> fmt.man_bits) & fmt.exp_field_max();
        const std::uint32_t m = layout & fmt.man_mask();
        const mp::cpp_int sig = e == 0 ? mp::cpp_int(m) : mp::cpp_int(m | (1u << fmt.man_bits));
        const int scale = (e == 0 ? 1 : static_cast<int>(e)) - fmt.bias - fmt.man_bits;
        mp::cpp_rational r =
            scale >= 0 ? mp::cpp_rational(sig << scale) : mp::cpp_rational(sig, mp::cpp_int(1) << -scale);
        return neg ? mp::cpp_rational(-r) : r;
      };
      auto sign_of = [](const fb::Format& fmt, std::uint32_t bits) {
        return ((bits >> fmt.storage_shift()) >> (fmt.exp_bits + fmt.man_bits)) & 1u;
      };
      const fb::Format* fa = nullptr;
      const std::uint32_t a = finite_value(fa);
      if (g.range(0, 1)) {
        const fb::Format* fb2 = nullptr;
        const std::uint32_t b = finite_value(fb2);
        acc.add_product(*fa, a, *fb2, b);
        sum += rational_of(*fa, a) * rational_of(*fb2, b);
        note(rational_of(*fa, a) * rational_of(*fb2, b), sign_of(*fa, a) != sign_of(*fb2, b));
        if (cancel) {  // the same product negated, sometimes off by one ulp
          const std::uint32_t neg_b = b ^ fb::to_container(*fb2, fb2->sign_mask());
          acc.add_product(*fa, a, *fb2, neg_b);
          sum += rational_of(*fa, a) * rational_of(*fb2, neg_b);
          note(rational_of(*fa, a) * rational_of(*fb2, neg_b), sign_of(*fa, a) != sign_of(*fb2, neg_b));
        }
      } else {
        acc.add(*fa, a);
        sum += rational_of(*fa, a);
        note(rational_of(*fa, a), sign_of(*fa, a));
      }
    }
    // Reference: the rational, placed exactly into MPFR (its denominator is a power of two).
    const mp::cpp_int num = mp::numerator(sum), den = mp::denominator(sum);
    mpfr_set_str(x, num.str().c_str(), 10, MPFR_RNDN);  // exact: < 2000 bits
    const unsigned shift = static_cast<unsigned>(mp::msb(den));
    REQUIRE((mp::cpp_int(1) << shift) == den);
    mpfr_div_2ui(x, x, shift, MPFR_RNDN);
    for (const RefFormat* out : outs) {
      for (const Mode& mode : kModes) {
        fb::RoundingSpec spec;
        spec.mode = mode.fb;
        const fb::Rounded got = acc.round(*out->fb, spec);
        double want = mpfr_round_into(*out, x, mode.mpfr);
        if (sum == 0) {
          // IEEE: all -0 gives -0, all +0 gives +0, anything else -0 under rdn only.
          want = all_neg_zero ? -0.0 : (all_pos_zero ? 0.0 : (mode.fb == fb::RoundingMode::rdn ? -0.0 : 0.0));
        }
        if (!same(*out, got.bits, want)) {
          ++failures;
          FAIL_CHECK("case " << n << " into " << out->fb->name << " " << fb::to_string(mode.fb) << ": got " << got.bits
                             << " want " << want);
        }
      }
    }
  }
  mpfr_clear(x);
}

TEST_CASE("exact accumulator: specials, signed zeros, empty sums") {
  const fb::Format& f32 = fb::formats::fp32;
  const fb::RoundingSpec rne{};
  {
    fb::ExactAccumulator acc;
    CHECK(acc.round(f32, rne).bits == 0u);  // empty: +0
    CHECK(fb::sum_sequential(f32, std::span<const std::uint32_t>{}, rne).bits == 0u);
  }
  {
    fb::ExactAccumulator acc;
    acc.add(f32, 0x80000000u);
    acc.add_product(f32, 0x80000000u, f32, 0x3f800000u);
    CHECK(acc.round(f32, rne).bits == 0x80000000u);  // -0 + (-0 * 1) = -0
    acc.add(f32, 0u);
    CHECK(acc.round(f32, rne).bits == 0u);  // + (+0) = +0
  }
  {
    fb::ExactAccumulator acc;
    acc.add(1.0f), acc.add(-1.0f);
    CHECK(acc.round(f32, rne).bits == 0u);
    fb::RoundingSpec rdn;
    rdn.mode = fb::RoundingMode::rdn;
    CHECK(acc.round(f32, rdn).bits == 0x80000000u);
  }
  {
    fb::ExactAccumulator acc;  // +0 + -0: +0, but -0 under rdn
    acc.add(0.0f), acc.add(-0.0f);
    fb::RoundingSpec rdn;
    rdn.mode = fb::RoundingMode::rdn;
    CHECK(acc.round(f32, rne).bits == 0u);
    CHECK(acc.round(f32, rdn).bits == 0x80000000u);
  }
  {
    fb::ExactAccumulator acc;
    acc.add_product(INFINITY, 0.0f);
    const fb::Rounded r = acc.round(f32, rne);
    CHECK(r.bits == 0x7fc00000u);
    CHECK((r.flags & fb::flag::invalid) != 0);
  }
  {
    fb::ExactAccumulator acc;
    acc.add(INFINITY), acc.add_product(-2.0f, INFINITY);
    CHECK(acc.round(f32, rne).bits == 0x7fc00000u);  // inf - inf
  }
  {
    fb::ExactAccumulator acc;
    acc.add(1e30f), acc.add_product(-INFINITY, -1.0f);
    CHECK(acc.round(f32, rne).bits == 0x7f800000u);
  }
  {
    // The extremes of the grid: the smallest fp32 product and the largest, cancelling.
    fb::ExactAccumulator acc;
    const float tiny = std::ldexp(1.0f, -149), huge = std::numeric_limits<float>::max();
    acc.add_product(huge, huge);
    acc.add_product(tiny, tiny);
    acc.add_product(-huge, huge);
    CHECK(!acc.is_zero());
    CHECK(acc.leading_exponent() == -298);
    CHECK(acc.round(f32, rne).bits == 0u);  // 2^-298 rounds to +0 (underflow)
    fb::RoundingSpec rup;
    rup.mode = fb::RoundingMode::rup;
    CHECK(acc.round(f32, rup).bits == 1u);  // ... or to the smallest subnormal upwards
  }
}
