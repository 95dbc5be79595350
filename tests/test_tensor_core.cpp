// tests/test_tensor_core.cpp: the tensor-core fused dot-add models (emu/dot/tensor_core.hpp).
//
// The reference is written here independently of the implementation: its own bit
// decoding, products and alignment on a fixed 1024-bit integer grid (Boost
// cpp_int), truncation by explicit integer shifts, an exact sum and its own output
// rounding. exact-rne is also checked against MPFR. The parameters themselves (F,
// products per step) and the output rules (overflow to inf, +0 for a result rounded to
// zero) are not validated here: the sm_90 presets are checked against H200 measurements
// by the ctest tensor_core_hw_probes_h200 (traces/hw/probes_h200.fbp).
#include <doctest/doctest.h>
#include <mpfr.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <limits>
#include <boost/multiprecision/cpp_int.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "emu/dot/tensor_core.hpp"

namespace {

namespace mp = boost::multiprecision;
using Big = mp::number<mp::cpp_int_backend<1024, 1024, mp::signed_magnitude, mp::unchecked, void>>;

int test_scale_divisor() {
  const char* s = std::getenv("FLASHBITS_TEST_SCALE");
  return (s && std::string(s) == "sanitizer") ? 50 : 1;
}

// ---- independent format description and decoding --------------------------------
struct RefFormat {
  const char* name;
  int ebits, mbits, bias;
  bool fn;                   // OCP E4M3: no inf, only S.1111.111 is NaN
  int shift;                 // stored left-shifted (tf32 in fp32's layout)
  bool finite_only = false;  // OCP fp6/fp4: no inf, no NaN; every pattern is a number
};
constexpr RefFormat kRefFp32{"fp32", 8, 23, 127, false, 0};
constexpr RefFormat kRefFp16{"fp16", 5, 10, 15, false, 0};
const RefFormat kRefInputs[] = {{"bf16", 8, 7, 127, false, 0},     {"fp16", 5, 10, 15, false, 0},
                                {"tf32", 8, 10, 127, false, 13},   {"e4m3", 4, 3, 7, true, 0},
                                {"e5m2", 5, 2, 15, false, 0},      {"e3m2", 3, 2, 3, false, 0, true},
                                {"e2m3", 2, 3, 1, false, 0, true}, {"e2m1", 2, 1, 1, false, 0, true}};

enum class Cls { zero, finite, inf, nan };
struct RefValue {
  Cls cls;
  bool neg;
  std::uint64_t mant;  // value = mant * 2^lsb
  int lsb;
  int align;  // exponent of the encoding: field (or 1 for subnormals) minus bias
};
RefValue ref_decode(const RefFormat& f, std::uint32_t stored) {
  const std::uint32_t bits = stored >> f.shift;
  const bool neg = (bits >> (f.ebits + f.mbits)) & 1u;
  const std::uint32_t e = (bits >> f.mbits) & ((1u << f.ebits) - 1u);
  const std::uint32_t m = bits & ((1u << f.mbits) - 1u);
  const std::uint32_t emax_field = (1u << f.ebits) - 1u;
  if (f.finite_only) {
    // no special encodings
  } else if (f.fn) {
    if (e == emax_field && m == (1u << f.mbits) - 1u) return {Cls::nan, neg, 0, 0, 0};
  } else if (e == emax_field) {
    return {m ? Cls::nan : Cls::inf, neg, 0, 0, 0};
  }
  const int align = (e == 0 ? 1 : static_cast<int>(e)) - f.bias;
  const std::uint64_t mant = e == 0 ? m : (m | (1u << f.mbits));
  if (mant == 0) return {Cls::zero, neg, 0, 0, align};
  return {Cls::finite, neg, mant, align - f.mbits, align};
}

// ---- independent output rounding ---------------------------------------------------
// rz and rne are the tensor cores' output roundings: a magnitude at or beyond
// 2^(emax+1) after rounding gives inf (RZ too: Xie et al. 2025, measured on sm_90), and
// a magnitude rounded to zero gives +0 (measured on sm_90's fp16 output). ieee_rne is
// IEEE 754's roundTiesToEven (exact-rne): inf on overflow, a zero keeps the sign.
enum class RefMode { rz, rne, ieee_rne };
// Rounds S * 2^lsb (S != 0) into a binary format with p bits, exponent range
// [emin, emax] (IEEE-style with inf); returns the sign/exponent/mantissa encoding.
std::uint32_t ref_round(const Big& s, int lsb, int p, int emin, int emax, int ebits, int bias, RefMode mode) {
  const bool neg = s < 0;
  const Big m = neg ? Big(-s) : s;
  const int lead = static_cast<int>(mp::msb(m));
  const int e = lead + lsb;
  const std::uint32_t sign = neg ? (1u << (ebits + p - 1)) : 0u;
  const std::uint32_t inf = ((1u << ebits) - 1u) << (p - 1);
  const int q = std::max(e, emin) - (p - 1);
  const int shift = q - lsb;
  Big kept;
  if (shift > 0) {
    kept = m >> shift;
    const Big rem = m - (kept << shift);
    const Big half = Big(1) << (shift - 1);
    if (mode != RefMode::rz && (rem > half || (rem == half && (kept & 1) != 0))) kept += 1;
  } else {
    kept = m << -shift;
  }
  int qq = q;
  if (kept == (Big(1) << p)) {
    kept >>= 1;
    qq += 1;
  }
  const auto k = static_cast<std::uint32_t>(kept);
  if (k >= (1u << (p - 1))) {
    const int exponent = qq + p - 1;
    if (exponent > emax) return sign | inf;  // every mode here overflows to inf
    return sign | (static_cast<std::uint32_t>(exponent + bias) << (p - 1)) | (k - (1u << (p - 1)));
  }
  if (k == 0 && mode != RefMode::ieee_rne) return 0u;  // rounded to zero: +0 on the tensor cores
  return sign | k;                                     // subnormal, or a signed zero (IEEE)
}

struct RefModel {
  int per_step, F;
  fb::DotOutput out;
};

float fp32_of(std::uint32_t b) { return std::bit_cast<float>(b); }

// One step of the reference (ref_dot's `steps`): the exact sum of C and the step's products
// on the grid 2^-400 (ref_dot's kOffset), whether the aligned (truncated) sum is >= 0, and the
// step's output bits. special: a NaN/inf step (no sum formed).
struct RefStep {
  bool special = false;
  Big exact_sum = 0;
  bool aligned_nonnegative = true;
  Big aligned = 0;  // the aligned (truncated) sum, on the same grid
  std::uint32_t d = 0;
  int unit = 0;                    // the grid's exponent: largest - F
  int lowest_removed = INT32_MAX;  // the lowest lsb of a term that lost bits to truncation
};

// The reference fused dot: returns bits of the accumulator format (fp32 or fp16).
std::uint32_t ref_dot(const RefModel& m, const RefFormat& in, std::uint32_t c_bits, const std::vector<std::uint32_t>& a,
                      const std::vector<std::uint32_t>& b, std::vector<RefStep>* steps = nullptr) {
  const bool f16 = m.out == fb::DotOutput::fp16_rne;
  const RefFormat& acc = f16 ? kRefFp16 : kRefFp32;
  const std::uint32_t nan = f16 ? 0x7e00u : 0x7fc00000u;
  const int k = static_cast<int>(a.size());
  const int per_step = m.per_step > 0 ? m.per_step : std::max(k, 1);
  constexpr int kOffset = 400;  // grid 2^-400 is below every product's LSB (>= 2^-298)
  std::uint32_t c = c_bits;
  int i = 0;
  do {
    const int n = std::min(per_step, k - i);
    std::vector<RefValue> terms;
    terms.push_back(ref_decode(acc, c));
    bool nan_seen = terms[0].cls == Cls::nan, pinf = terms[0].cls == Cls::inf && !terms[0].neg,
         ninf = terms[0].cls == Cls::inf && terms[0].neg;
    for (int j = i; j < i + n; ++j) {
      const RefValue x = ref_decode(in, a[static_cast<std::size_t>(j)]);
      const RefValue y = ref_decode(in, b[static_cast<std::size_t>(j)]);
      const bool neg = x.neg != y.neg;
      if (x.cls == Cls::nan || y.cls == Cls::nan) {
        nan_seen = true;
        continue;
      }
      if (x.cls == Cls::inf || y.cls == Cls::inf) {
        if (x.cls == Cls::zero || y.cls == Cls::zero)
          nan_seen = true;
        else
          (neg ? ninf : pinf) = true;
        continue;
      }
      if (x.cls == Cls::zero || y.cls == Cls::zero) {
        terms.push_back({Cls::zero, neg, 0, 0, 0});
        continue;
      }
      terms.push_back({Cls::finite, neg, x.mant * y.mant, x.lsb + y.lsb, x.align + y.align});
    }
    std::uint32_t d = 0;
    RefStep step;
    if (nan_seen || (pinf && ninf)) {
      d = nan;
      step.special = true;
    } else if (pinf || ninf) {
      d = f16 ? (ninf ? 0xfc00u : 0x7c00u) : (ninf ? 0xff800000u : 0x7f800000u);
      step.special = true;
    } else {
      for (const RefValue& t : terms) {
        if (t.cls == Cls::zero) continue;
        const Big v = Big(t.mant) << (t.lsb + kOffset);
        step.exact_sum += t.neg ? Big(-v) : v;
      }
      bool all_neg_zero = true;
      int largest = INT32_MIN;
      for (const RefValue& t : terms) {
        if (t.cls != Cls::zero) largest = std::max(largest, t.align);
        all_neg_zero = all_neg_zero && t.cls == Cls::zero && t.neg;
      }
      Big sum = 0;
      int lsb = -kOffset;
      if (largest != INT32_MIN) {
        if (m.out == fb::DotOutput::exact_rne) {
          for (const RefValue& t : terms) {
            if (t.cls == Cls::zero) continue;
            const Big v = Big(t.mant) << (t.lsb + kOffset);
            sum += t.neg ? Big(-v) : v;
          }
        } else {
          lsb = largest - m.F;
          for (const RefValue& t : terms) {
            if (t.cls == Cls::zero) continue;
            const Big v = Big(t.mant) << (t.lsb + kOffset);
            const Big q = v >> (lsb + kOffset);  // truncation toward zero of the magnitude
            sum += t.neg ? Big(-q) : q;
            if ((q << (lsb + kOffset)) != v) step.lowest_removed = std::min(step.lowest_removed, t.lsb);
          }
        }
      }
      step.aligned_nonnegative = sum >= 0;
      step.unit = lsb;
      step.aligned = sum << (lsb + kOffset);
      if (sum == 0) {
        // IEEE keeps -0 for a sum of -0s (exact-rne); the tensor cores give +0 for every exact
        // zero (measured on sm_90: the signed_zeros batch).
        d = all_neg_zero && m.out == fb::DotOutput::exact_rne ? 0x80000000u : 0u;
      } else {
        switch (m.out) {
          case fb::DotOutput::fp32_rz:
            d = ref_round(sum, lsb, 24, -126, 127, 8, 127, RefMode::rz);
            break;
          case fb::DotOutput::exact_rne:
            d = ref_round(sum, lsb, 24, -126, 127, 8, 127, RefMode::ieee_rne);
            break;
          case fb::DotOutput::fp16_rne:
            d = ref_round(sum, lsb, 11, -14, 15, 5, 15, RefMode::rne);
            break;
          case fb::DotOutput::fp32_e8m13:
            d = ref_round(sum, lsb, 14, -126, 127, 8, 127, RefMode::rz) << 10;
            break;
        }
      }
    }
    c = d;
    step.d = d;
    if (steps) steps->push_back(step);
    i += n;
  } while (i < k);
  return c;
}

// ---- random inputs ----------------------------------------------------------------
struct Gen {
  std::mt19937_64 rng;
  explicit Gen(std::uint64_t seed) : rng(seed) {}
  std::uint32_t bits(int n) { return static_cast<std::uint32_t>(rng()) & ((n >= 32) ? 0xffffffffu : ((1u << n) - 1u)); }
  int range(int lo, int hi) { return lo + static_cast<int>(rng() % static_cast<std::uint64_t>(hi - lo + 1)); }
  // A value of format f with its exponent field drawn from [lo, hi] (clamped).
  std::uint32_t value(const RefFormat& f, int field_lo, int field_hi) {
    const int emax_field = (1 << f.ebits) - 1;
    const int e = std::clamp(range(field_lo, field_hi), 0, emax_field);
    std::uint32_t m = bits(f.mbits);
    if (f.fn && e == emax_field && m == (1u << f.mbits) - 1u) m -= 1;  // keep it finite
    const std::uint32_t s = bits(1);
    return ((s << (f.ebits + f.mbits)) | (static_cast<std::uint32_t>(e) << f.mbits) | m) << f.shift;
  }
  std::uint32_t any(const RefFormat& f) { return bits(1 + f.ebits + f.mbits) << f.shift; }
};

// One random case; kind picks the distribution.
void random_case(Gen& g, const RefFormat& in, bool f16_acc, int per_step, std::uint32_t& c,
                 std::vector<std::uint32_t>& a, std::vector<std::uint32_t>& b) {
  const int k = g.range(1, std::max(2, 2 * per_step + per_step / 2));
  a.resize(static_cast<std::size_t>(k));
  b.resize(static_cast<std::size_t>(k));
  const RefFormat& acc = f16_acc ? kRefFp16 : kRefFp32;
  const int kind = g.range(0, 5);
  const int mid = in.bias;  // exponent field of 1.0
  for (int i = 0; i < k; ++i) {
    auto& x = a[static_cast<std::size_t>(i)];
    auto& y = b[static_cast<std::size_t>(i)];
    switch (kind) {
      case 0:  // uniform bit patterns: specials, subnormals, every exponent
        x = g.any(in), y = g.any(in);
        break;
      case 1:  // narrow exponent range: heavy overlap and cancellation
      case 2:
        x = g.value(in, mid - 3, mid + 3), y = g.value(in, mid - 3, mid + 3);
        if (g.range(0, 15) == 0) x = (g.bits(1) << (in.ebits + in.mbits)) << in.shift;  // signed zero
        break;
      case 3:  // subnormal-heavy
        x = g.value(in, 0, 2), y = g.value(in, 0, 3 + mid);
        break;
      case 4:  // wide exponent range, finite
        x = g.value(in, 0, (1 << in.ebits) - 2), y = g.value(in, 0, (1 << in.ebits) - 2);
        break;
      default:  // mostly pairs that cancel exactly, plus a little noise
        if (i % 2 == 1) {
          x = a[static_cast<std::size_t>(i - 1)];
          y = b[static_cast<std::size_t>(i - 1)] ^ ((1u << (in.ebits + in.mbits)) << in.shift);
          if (g.range(0, 3) == 0) y ^= (1u << in.shift);  // last mantissa bit
        } else {
          x = g.value(in, mid - 6, mid + 6), y = g.value(in, mid - 6, mid + 6);
        }
    }
  }
  // C: cancellation-friendly, wide, subnormal or special.
  switch (g.range(0, 5)) {
    case 0:
      c = g.any(acc);
      break;
    case 1:
      c = g.value(acc, acc.bias - 4, acc.bias + 4);
      break;
    case 2:
      c = g.value(acc, 0, 1);
      break;
    case 3:
      c = (g.bits(1) << (acc.ebits + acc.mbits));
      break;  // signed zero
    default: {
      // Minus the (double-rounded, deliberately approximate) sum of the products:
      // deep cancellation against C.
      double s = 0;
      const bool in_f16 = f16_acc;
      for (int i = 0; i < std::min(k, per_step); ++i) {
        const RefValue x = ref_decode(in, a[static_cast<std::size_t>(i)]);
        const RefValue y = ref_decode(in, b[static_cast<std::size_t>(i)]);
        if (x.cls != Cls::finite || y.cls != Cls::finite) continue;
        const double v = std::ldexp(static_cast<double>(x.mant * y.mant), x.lsb + y.lsb);
        s += (x.neg != y.neg) ? -v : v;
      }
      const float f = static_cast<float>(-s);
      if (in_f16) {
        // nearest fp16 by truncating the float's fraction (fine for test inputs)
        const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
        const int e = static_cast<int>((u >> 23) & 0xff) - 127;
        if (e < -14 || e > 15)
          c = (u >> 16) & 0x8000u;
        else
          c = ((u >> 16) & 0x8000u) | (static_cast<std::uint32_t>(e + 15) << 10) | ((u >> 13) & 0x3ffu);
      } else {
        c = std::bit_cast<std::uint32_t>(f);
      }
    }
  }
}

std::string hex(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

std::string describe_case(std::uint32_t c, const std::vector<std::uint32_t>& a, const std::vector<std::uint32_t>& b) {
  char buf[32];
  std::string s;
  std::snprintf(buf, sizeof buf, "C=%08x A=", c);
  s += buf;
  for (auto x : a) std::snprintf(buf, sizeof buf, "%x,", x), s += buf;
  s += " B=";
  for (auto x : b) std::snprintf(buf, sizeof buf, "%x,", x), s += buf;
  return s;
}

// The value of an input as the float fused_dot takes (decoded by the reference).
float ref_float(const RefFormat& in, std::uint32_t bits) {
  const RefValue v = ref_decode(in, bits);
  if (v.cls == Cls::nan) return std::numeric_limits<float>::quiet_NaN();
  if (v.cls == Cls::inf) return v.neg ? -INFINITY : INFINITY;
  const float m = static_cast<float>(std::ldexp(static_cast<double>(v.mant), v.lsb));
  return v.neg ? -m : m;
}

const RefFormat& ref_input(std::string_view name) {
  for (const RefFormat& f : kRefInputs) {
    if (name == f.name) return f;
  }
  FAIL("no reference format for " << std::string(name));
  return kRefInputs[0];
}

const fb::Format& fb_input(std::string_view name) {
  for (const fb::Format& f : fb::formats::all_named) {
    if (name == std::string_view(f.name)) return f;
  }
  return fb::formats::fp32;
}

// Every tensor-core preset on every instruction set of this CPU, with what the exact-integer
// reference needs for it: check(isa, model, preset_index, in, ref, f16, acc_format), where
// preset_index is 1 for the first preset (each test's random seeds derive from it), in is the
// input's reference format, f16 whether the output is fp16 (fp16_rne, else fp32), and
// acc_format C's and D's format. (Parameters, not a struct unpacked by a structured binding:
// clang before 16 cannot capture those in the tests' inner lambdas.)
template <class Check>
void each_preset_on_each_isa(Check&& check) {
  for (const fb::DotIsa isa : {fb::DotIsa::portable, fb::DotIsa::avx2, fb::DotIsa::avx512}) {
    if (!fb::dot_isa_available(isa)) {
      MESSAGE("instruction set " << static_cast<int>(isa) << " not on this CPU: not checked");
      continue;
    }
    int preset_index = 0;
    for (const fb::TensorCoreModel& model : fb::tensor_core_models()) {
      const bool f16 = model.output == fb::DotOutput::fp16_rne;
      check(isa, model, ++preset_index, ref_input(model.input.name),
            RefModel{model.products_per_step, model.fraction_bits, model.output}, f16, f16 ? kRefFp16 : kRefFp32);
    }
  }
}

}  // namespace

TEST_CASE("every tensor-core preset matches the independent exact-integer reference") {
  const int cases = 100000 / test_scale_divisor();
  int preset_index = 0;
  for (const fb::TensorCoreModel& model : fb::tensor_core_models()) {
    ++preset_index;
    const RefFormat& in = ref_input(model.input.name);
    const fb::Format& input = fb_input(model.input.name);
    CHECK(fb::find_tensor_core_model(model.name, input) == &model);
    // Exactly the forms measured on the H200 are marked validated.
    const std::string id = std::string(model.name) + " " + std::string(model.input.name);
    const bool measured = id == "sm90-mma bf16" || id == "sm90-mma fp16" || id == "sm90-mma tf32" ||
                          id == "sm90-mma-f16acc fp16" || id == "sm90-wgmma bf16" || id == "sm90-wgmma fp16" ||
                          id == "sm90-wgmma e4m3" || id == "sm90-wgmma e5m2";
    CHECK_MESSAGE(model.hardware_validated == measured, id);
    const RefModel ref{model.products_per_step, model.fraction_bits, model.output};
    const bool f16 = model.output == fb::DotOutput::fp16_rne;
    Gen g(0x5eed0000u + static_cast<std::uint64_t>(preset_index));
    std::vector<std::uint32_t> a, b;
    std::vector<float> af, bf;
    int failures = 0;
    for (int n = 0; n < cases && failures < 5; ++n) {
      std::uint32_t c = 0;
      random_case(g, in, f16, std::max(model.products_per_step, 8), c, a, b);
      const std::uint32_t want = ref_dot(ref, in, c, a, b);
      const std::uint32_t got = fb::fused_dot_bits(model, c, a, b);
      // The float entry point must agree with the bit entry point.
      bool float_ok = true;
      if (!f16) {
        af.clear(), bf.clear();
        for (std::size_t i = 0; i < a.size(); ++i) {
          af.push_back(ref_float(in, a[i])), bf.push_back(ref_float(in, b[i]));
        }
        const float d = fb::fused_dot(model, fp32_of(c), af.data(), bf.data(), static_cast<int>(a.size()));
        float_ok = std::bit_cast<std::uint32_t>(d) == want;
      }
      if (got != want || !float_ok) {
        ++failures;
        FAIL_CHECK(std::string(model.name)
                   << " " << std::string(model.input.name) << " " << describe_case(c, a, b) << " got " << hex(got)
                   << " want " << hex(want) << (float_ok ? "" : " (float entry point differs)"));
      }
    }
  }
}

TEST_CASE("exact-rne equals the MPFR sum of products rounded once to fp32") {
  const int cases = 100000 / test_scale_divisor();
  mpfr_t acc, prod, t;
  mpfr_inits2(1400, acc, prod, t, static_cast<mpfr_ptr>(nullptr));
  int idx = 0;
  for (const RefFormat& in : kRefInputs) {
    const fb::TensorCoreModel* model = fb::find_tensor_core_model("exact-rne", fb_input(in.name));
    REQUIRE(model != nullptr);
    Gen g(0xabc0u + static_cast<std::uint64_t>(idx++));
    std::vector<std::uint32_t> a, b;
    int failures = 0;
    for (int n = 0; n < cases && failures < 5; ++n) {
      std::uint32_t c = 0;
      random_case(g, in, false, 16, c, a, b);
      auto to_float = [&](const RefFormat& f, std::uint32_t bits) {
        const RefValue v = ref_decode(f, bits);
        if (v.cls == Cls::nan) return std::numeric_limits<float>::quiet_NaN();
        if (v.cls == Cls::inf) return v.neg ? -INFINITY : INFINITY;
        if (v.cls == Cls::zero) return v.neg ? -0.0f : 0.0f;
        const float m = static_cast<float>(std::ldexp(static_cast<double>(v.mant), v.lsb));
        return v.neg ? -m : m;
      };
      mpfr_set_flt(acc, fp32_of(c), MPFR_RNDN);
      for (std::size_t i = 0; i < a.size(); ++i) {
        mpfr_set_flt(prod, to_float(in, a[i]), MPFR_RNDN);
        mpfr_set_flt(t, to_float(in, b[i]), MPFR_RNDN);
        mpfr_mul(prod, prod, t, MPFR_RNDN);   // exact at 1400 bits
        mpfr_add(acc, acc, prod, MPFR_RNDN);  // exact: the range spans < 1400 bits
      }
      const float want = mpfr_get_flt(acc, MPFR_RNDN);
      const std::uint32_t got = fb::fused_dot_bits(*model, c, a, b);
      const bool ok = std::isnan(want) ? (got == 0x7fc00000u) : got == std::bit_cast<std::uint32_t>(want);
      if (!ok) {
        ++failures;
        FAIL_CHECK(in.name << " " << describe_case(c, a, b) << " got " << hex(got) << " want "
                           << hex(std::bit_cast<std::uint32_t>(want)));
      }
    }
  }
  mpfr_clears(acc, prod, t, static_cast<mpfr_ptr>(nullptr));
}

// Found by the GEMM audit: random cases almost never underflow, so the sign of a sum that
// rounds to zero went untested (the header claimed +0, the hardware presets' rule; exact-rne
// gives IEEE's -0). MPFR's mpfr_get_flt rounds onto float's subnormal grid and keeps the sign.
TEST_CASE("exact-rne: a sum that underflows to zero keeps its sign, as MPFR's rounding to float") {
  const fb::TensorCoreModel* model = fb::find_tensor_core_model("exact-rne", fb::formats::bf16);
  REQUIRE(model != nullptr);
  mpfr_t acc, prod, t;
  mpfr_inits2(1400, acc, prod, t, static_cast<mpfr_ptr>(nullptr));
  // (C, a, b): bf16 products around 2^-200 to 2^-148 (the bottom of fp32's subnormals is
  // 2^-149), of either sign, beside a C of +0, -0 or an fp32 subnormal.
  const std::vector<std::tuple<std::uint32_t, std::uint16_t, std::uint16_t>> cases = {
      {0x00000000u, 0x8d80, 0x0d80}, {0x80000000u, 0x0d80, 0x0d80}, {0x00000000u, 0x959a, 0x15c3},
      {0x00000001u, 0x966b, 0x1612}, {0x80000001u, 0x1601, 0x15ff}, {0x00000000u, 0xb5c1, 0x1f7f}};
  for (const auto& kase : cases) {
    // Not a structured binding: clang 14 cannot capture one in the CHECK_MESSAGE lambda.
    const std::uint32_t c = std::get<0>(kase);
    const std::uint16_t a = std::get<1>(kase), b = std::get<2>(kase);
    const auto bf16 = [](std::uint16_t bits) { return std::bit_cast<float>(std::uint32_t{bits} << 16); };
    mpfr_set_flt(acc, std::bit_cast<float>(c), MPFR_RNDN);
    mpfr_set_flt(prod, bf16(a), MPFR_RNDN);
    mpfr_set_flt(t, bf16(b), MPFR_RNDN);
    mpfr_mul(prod, prod, t, MPFR_RNDN);
    mpfr_add(acc, acc, prod, MPFR_RNDN);
    const std::uint32_t want = std::bit_cast<std::uint32_t>(mpfr_get_flt(acc, MPFR_RNDN));
    const std::uint32_t got =
        fb::fused_dot_bits(*model, c, std::vector<std::uint32_t>{a}, std::vector<std::uint32_t>{b});
    CHECK_MESSAGE(got == want, describe_case(c, {a}, {b}) << " got " << hex(got) << " want " << hex(want));
  }
  mpfr_clears(acc, prod, t, static_cast<mpfr_ptr>(nullptr));
}

TEST_CASE("Fasi et al.: sm80's extra alignment bit keeps 2^-24 in 1*1 - (1 - 2^-24); sm70 loses it") {
  // D = C + a*b with C = -(1 - 2^-24) (fp32 0xbf7fffff), a = b = 1. Aligned to the
  // product's exponent 0, C needs 24 fraction bits: sm70 (F=23) truncates it to
  // -(1 - 2^-23) and returns 2^-23; sm80 (F=24) keeps it and returns 2^-24.
  const std::vector<std::uint32_t> one{0x3c00u};  // fp16 1.0
  const fb::TensorCoreModel* sm70 = fb::find_tensor_core_model("sm70", fb::formats::fp16);
  const fb::TensorCoreModel* sm80 = fb::find_tensor_core_model("sm80", fb::formats::fp16);
  REQUIRE(sm70);
  REQUIRE(sm80);
  CHECK(fb::fused_dot_bits(*sm70, 0xbf7fffffu, one, one) == std::bit_cast<std::uint32_t>(std::ldexp(1.0f, -23)));
  CHECK(fb::fused_dot_bits(*sm80, 0xbf7fffffu, one, one) == std::bit_cast<std::uint32_t>(std::ldexp(1.0f, -24)));
  // The same with bf16 inputs on sm80 (bf16 1.0 = 0x3f80).
  const fb::TensorCoreModel* sm80b = fb::find_tensor_core_model("sm80", fb::formats::bf16);
  const std::vector<std::uint32_t> one_bf16{0x3f80u};
  CHECK(fb::fused_dot_bits(*sm80b, 0xbf7fffffu, one_bf16, one_bf16) ==
        std::bit_cast<std::uint32_t>(std::ldexp(1.0f, -24)));
  // The final normalisation truncates: 1 + 2^-24 (exactly representable on sm80's grid
  // before normalisation) becomes 1.0 under RZ, not 1 + 2^-23.
  CHECK(fb::fused_dot_bits(*sm80, 0x33800000u, one, one) == 0x3f800000u);
}

TEST_CASE("sm80 m16n8k16 is two chained k=8 steps; sm90-mma fuses 16 products") {
  const fb::TensorCoreModel* sm80 = fb::find_tensor_core_model("sm80", fb::formats::fp16);
  const fb::TensorCoreModel* sm90 = fb::find_tensor_core_model("sm90-mma", fb::formats::fp16);
  REQUIRE(sm80);
  REQUIRE(sm90);
  // a0*b0 = 1 and a8*b8 = -2^-25 (fp16 2^-13 * -2^-12), the rest zero, C = 0.
  std::vector<std::uint32_t> a(16, 0u), b(16, 0u);
  a[0] = 0x3c00u, b[0] = 0x3c00u;
  a[8] = 0x0800u, b[8] = 0x8c00u;  // 2^-13, -2^-12
  // sm80: step 1 gives 1; step 2 aligns -2^-25 to exponent 0 with F=24: truncated to 0.
  CHECK(fb::fused_dot_bits(*sm80, 0u, a, b) == 0x3f800000u);
  // sm90-mma: one step, F=25 keeps -2^-25; RZ of 1 - 2^-25 is 1 - 2^-24.
  CHECK(fb::fused_dot_bits(*sm90, 0u, a, b) == 0x3f7fffffu);
  // Chaining, checked on random data against the reference's two explicit steps.
  Gen g(77);
  const RefFormat& in = ref_input("fp16");
  for (int n = 0; n < 2000; ++n) {
    for (int i = 0; i < 16; ++i)
      a[static_cast<std::size_t>(i)] = g.value(in, 10, 20), b[static_cast<std::size_t>(i)] = g.value(in, 10, 20);
    const std::uint32_t c = g.value(kRefFp32, 120, 134);
    const std::vector<std::uint32_t> a1(a.begin(), a.begin() + 8), b1(b.begin(), b.begin() + 8);
    const std::vector<std::uint32_t> a2(a.begin() + 8, a.end()), b2(b.begin() + 8, b.end());
    const std::uint32_t two_steps =
        ref_dot({8, 24, fb::DotOutput::fp32_rz}, in, ref_dot({8, 24, fb::DotOutput::fp32_rz}, in, c, a1, b1), a2, b2);
    REQUIRE(fb::fused_dot_bits(*sm80, c, a, b) == two_steps);
  }
}

TEST_CASE("sm90-mma tf32 m16n8k8 fuses all 8 products (measured on H200); sm80 tf32 runs two steps of 4") {
  const fb::TensorCoreModel* sm80 = fb::find_tensor_core_model("sm80", fb::formats::tf32);
  const fb::TensorCoreModel* sm90 = fb::find_tensor_core_model("sm90-mma", fb::formats::tf32);
  REQUIRE(sm80);
  REQUIRE(sm90);
  CHECK(sm90->products_per_step == 8);
  CHECK(sm90->fraction_bits == 25);
  // a0*b0 = 1, a1*b1 = 2^-24, a4*b4 = 2^-24 (tf32 in fp32's layout), C = 0. Fused: the
  // exact sum 1 + 2^-23 is an fp32. In two steps each step truncates 1 + 2^-24 to 1.
  std::vector<std::uint32_t> a(8, 0u), b(8, 0u);
  a[0] = b[0] = 0x3f800000u;
  a[1] = 0x33800000u, b[1] = 0x3f800000u;
  a[4] = 0x33800000u, b[4] = 0x3f800000u;
  CHECK(fb::fused_dot_bits(*sm90, 0u, a, b) == 0x3f800001u);
  CHECK(fb::fused_dot_bits(*sm80, 0u, a, b) == 0x3f800000u);
  // The register's low 13 bits are ignored (truncated, not rounded): 1 + 2^-11 + 2^-12
  // (0x3f801800) reads as 1.0, so the product is 1, not the 1 + 2^-10 rounding would give.
  const std::vector<std::uint32_t> x{0x3f801800u}, y{0x3f800000u};
  CHECK(fb::fused_dot_bits(*sm90, 0u, x, y) == 0x3f800000u);
}

TEST_CASE("fp16 accumulate: a result rounded to zero is +0 (measured on H200)") {
  const fb::TensorCoreModel* m = fb::find_tensor_core_model("sm90-mma-f16acc", fb::formats::fp16);
  REQUIRE(m);
  // The product 2^-13 * -2^-12 = -2^-25 is half fp16's smallest subnormal 2^-24: RNE
  // ties to the even 0, and the zero is +0 (the measured case had C = 2^-23 and
  // products summing to -(2^-23 + 2^-25)).
  CHECK(fb::fused_dot_bits(*m, 0x0000u, std::vector<std::uint32_t>{0x0800u}, std::vector<std::uint32_t>{0x8c00u}) ==
        0x0000u);
  // Just over the tie it rounds to -2^-24; an exact zero of -0 terms is +0 too (measured:
  // the signed_zeros batch, C = -0 and every product -0, on every sm_90 form).
  CHECK(fb::fused_dot_bits(*m, 0x0000u, std::vector<std::uint32_t>{0x0801u}, std::vector<std::uint32_t>{0x8c00u}) ==
        0x8001u);
  CHECK(fb::fused_dot_bits(*m, 0x8000u, std::vector<std::uint32_t>{0x8000u}, std::vector<std::uint32_t>{0x3c00u}) ==
        0x0000u);
  // Overflow is inf: 65504 + 16 * 2 = 2^16, beyond the midpoint 65520 above max finite.
  CHECK(fb::fused_dot_bits(*m, 0x7bffu, std::vector<std::uint32_t>{0x4c00u}, std::vector<std::uint32_t>{0x4000u}) ==
        0x7c00u);
}

TEST_CASE("fp8 wgmma: 13 fraction bits relative to the largest exponent, e8m13 output") {
  const fb::TensorCoreModel* m = fb::find_tensor_core_model("sm90-wgmma", fb::formats::e4m3);
  REQUIRE(m);
  CHECK(m->products_per_step == 32);
  CHECK(m->fraction_bits == 13);
  // C = 1 + 2^-20 with zero products: truncated to 1.0 (13 fraction bits).
  const std::vector<std::uint32_t> zero{0x00u};
  CHECK(fb::fused_dot_bits(*m, 0x3f800008u, zero, zero) == 0x3f800000u);
  // C = 1 + 2^-13 survives; the product 1 * 2^-5 adds on the grid.
  const std::vector<std::uint32_t> a{0x38u}, b{0x10u};  // e4m3 1.0 and 2^-5
  CHECK(fb::fused_dot_bits(*m, 0x3f800400u, a, b) ==
        std::bit_cast<std::uint32_t>(1.0f + std::ldexp(1.0f, -13) + std::ldexp(1.0f, -5)));
  // No fp8 form on sm70/sm80; no tf32 on sm70.
  CHECK(fb::find_tensor_core_model("sm80", fb::formats::e4m3) == nullptr);
  CHECK(fb::find_tensor_core_model("sm70", fb::formats::bf16) == nullptr);
  CHECK(fb::is_tensor_core_model_name("sm70"));
  CHECK_FALSE(fb::is_tensor_core_model_name("sm71"));
}

TEST_CASE("specials and signed zeros") {
  const fb::TensorCoreModel* m = fb::find_tensor_core_model("sm80", fb::formats::bf16);
  REQUIRE(m);
  auto dot = [&](std::uint32_t c, std::vector<std::uint32_t> a, std::vector<std::uint32_t> b) {
    return fb::fused_dot_bits(*m, c, a, b);
  };
  CHECK(dot(0u, {0x7f80u}, {0x0000u}) == 0x7fc00000u);                    // inf * 0
  CHECK(dot(0u, {0x7f80u, 0x7f80u}, {0x3f80u, 0xbf80u}) == 0x7fc00000u);  // inf - inf
  CHECK(dot(0xff800000u, {0x7f80u}, {0x3f80u}) == 0x7fc00000u);           // C=-inf, +inf product
  CHECK(dot(0u, {0x7f80u}, {0xbf80u}) == 0xff800000u);                    // -inf
  CHECK(dot(0x7fc00001u, {0x3f80u}, {0x3f80u}) == 0x7fc00000u);           // NaN C, canonical NaN out
  CHECK(dot(0x80000000u, {0x8000u}, {0x3f80u}) == 0x00000000u);           // -0 + (-0)*1: +0, not IEEE's -0
  CHECK(dot(0x80000000u, {0x0000u}, {0x3f80u}) == 0x00000000u);           // -0 + 0 = +0
  CHECK(dot(0x3f800000u, {0x3f80u}, {0xbf80u}) == 0x00000000u);           // 1 - 1 = +0
  // A bf16 subnormal product keeps its value exactly: 2^-126 * 2^-7 ... C = 0.
  CHECK(dot(0u, {0x0001u}, {0x3f80u}) == 0x00010000u);
  // Overflow gives inf, also under RZ (Xie et al. 2025; measured on sm_90): the exact sum
  // M + 0x7f7f * 2 (M = 0x7f7fffff = (2 - 2^-23) * 2^127) is about 3 * 2^128.
  CHECK(dot(0x7f7fffffu, {0x7f7fu}, {0x4000u}) == 0x7f800000u);
  CHECK(dot(0xff7fffffu, {0xff7fu}, {0x4000u}) == 0xff800000u);
  // Below 2^128 RZ still gives M: M + 2^103 (half an ulp of M) and M + 2^102 + 2^103.
  CHECK(dot(0x7f7fffffu, {0x7300u}, {0x3f80u}) == 0x7f7fffffu);
  CHECK(dot(0x7f7fffffu, {0x7300u, 0x7280u}, {0x3f80u, 0x3f80u}) == 0x7f7fffffu);
  // Exactly 2^128 = M + 2^104 (one ulp over): inf.
  CHECK(dot(0x7f7fffffu, {0x7380u}, {0x3f80u}) == 0x7f800000u);
  // Chained steps: an overflowed step's inf is the next step's C (sm80 bf16: 8 per step).
  const std::vector<std::uint32_t> big(9, 0x7f7fu), one(9, 0x3f80u);
  CHECK(dot(0u, big, one) == 0x7f800000u);
  // A non-zero sum that rounds to a zero magnitude gives +0: C = -2^-149, product
  // 2^-126 * 2^-24 = 2^-150; on sm80's grid (2^(-126-24)) the sum is exactly -2^-150,
  // below fp32's smallest subnormal: RZ gives magnitude 0, and the result is +0.
  CHECK(dot(0x80000001u, {0x0080u}, {0x3380u}) == 0x00000000u);
  CHECK(dot(0x00000001u, {0x8080u}, {0x3380u}) == 0x00000000u);
  // Trace: largest exponent, truncation, carry-out and normalisation of one step.
  fb::DotTrace trace;
  trace.record_terms = true;
  const std::vector<float> a{1.0f, 1.0f, 0.75f}, b{1.0f, 1.0f, 1.0f};
  const float d = fb::fused_dot(*m, std::ldexp(1.0f, -30), a.data(), b.data(), 3, &trace);
  CHECK(d == 2.75f);
  REQUIRE(trace.steps.size() == 1);
  CHECK(trace.steps[0].largest_exponent == 0);
  CHECK(trace.steps[0].truncated_terms == 1);
  CHECK(trace.steps[0].truncated_value == std::ldexp(1.0, -30));
  CHECK(trace.steps[0].carry_out);
  CHECK(trace.steps[0].normalisation_shift == -1);
  CHECK(trace.terms.size() == 4);
}

TEST_CASE("a step that overflows to an infinity is tallied away from zero, with an infinite error") {
  // IEEE 754: an overflow rounds away from zero, to the infinity of the sum's sign, so the
  // step's error D - exact has that sign and is infinite, in the recorded event and the tally.
  const fb::TensorCoreModel* m = fb::find_tensor_core_model("sm90-mma", fb::formats::bf16);
  REQUIRE(m != nullptr);
  const float big = std::bit_cast<float>(0x7f7f0000u);  // bf16's largest finite value
  for (const float sign : {1.0f, -1.0f}) {
    CAPTURE(sign);
    const float a[1] = {big * sign}, b[1] = {big};
    fb::DotStepTally tally, from_events;
    fb::DotTrace tallied, recorded;
    tallied.tally_only = &tally;
    CHECK(fb::fused_dot(*m, 0.0f, a, b, 1, &tallied) == sign * INFINITY);
    CHECK(fb::fused_dot(*m, 0.0f, a, b, 1, &recorded) == sign * INFINITY);
    for (const fb::DotStepEvent& s : recorded.steps) from_events.add(s);
    for (const fb::DotStepTally& t : {tally, from_events}) {
      CHECK(t.rounded_up == 1);
      CHECK(t.rounded_down == 0);
      CHECK(t.signed_error == sign * INFINITY);
    }
  }
}

TEST_CASE("traced steps: a tally gives the recorded events' counts, and the step errors add up to D - exact") {
  // DotTrace::tally_only counts steps inside the step code (the attention tracer's fast
  // path); recording the events and tallying them afterwards is the other path. Both must
  // agree on every preset. Independently, each step's signed error is what it removed
  // (truncation plus output rounding), so over a chained dot the errors add up to the
  // result minus the exact sum of products (MPFR, exact at 4096 bits).
  std::mt19937_64 rng(77);
  int presets = 0, finite_checks = 0;
  const int trials = std::max(4, 40 / test_scale_divisor());
  for (const fb::TensorCoreModel& m : fb::tensor_core_models()) {
    const fb::Format in = m.input;
    CAPTURE(m.name);
    CAPTURE(m.input.name);
    ++presets;
    for (int trial = 0; trial < trials; ++trial) {
      // Values of the input format with exponents spread over ~2^-12..2^12, or ~2^-5..2^5
      // for fp16 accumulators so that sums stay finite (finite inputs only).
      const double spread = fb::accumulator_format(m) == fb::formats::fp16 ? 5 : 12;
      auto draw = [&] {
        for (;;) {
          const auto bits = static_cast<std::uint32_t>(rng()) &
                            ((in.container_bits == 32 ? 0xffffffffu : (1u << in.container_bits) - 1u));
          const double x = fb::to_double(in, bits);
          if (std::isfinite(x) && (x == 0.0 || std::fabs(std::log2(std::fabs(x))) < spread))
            return static_cast<float>(x);
        }
      };
      const int k = 1 + static_cast<int>(rng() % 70);
      std::vector<float> a(static_cast<std::size_t>(k)), b(static_cast<std::size_t>(k));
      for (int i = 0; i < k; ++i) a[static_cast<std::size_t>(i)] = draw(), b[static_cast<std::size_t>(i)] = draw();
      const float c =
          static_cast<float>(std::ldexp(static_cast<double>(rng() % 2001) - 1000.0, -static_cast<int>(rng() % 20)));
      fb::DotTrace recorded;
      const float d = fb::fused_dot(m, c, a.data(), b.data(), k, &recorded);
      fb::DotStepTally from_events, tallied;
      double sum_abs_error = 0.0;
      for (const fb::DotStepEvent& s : recorded.steps) {
        from_events.add(s);
        sum_abs_error += std::fabs(s.truncated_value + s.output_residue);
      }
      fb::DotTrace tally_trace;
      tally_trace.tally_only = &tallied;
      const float d2 = fb::fused_dot(m, c, a.data(), b.data(), k, &tally_trace);
      CHECK(std::bit_cast<std::uint32_t>(d2) == std::bit_cast<std::uint32_t>(d));
      CHECK(tally_trace.steps.empty());
      CHECK(tallied.significand_overflows == from_events.significand_overflows);
      CHECK(tallied.ties == from_events.ties);
      CHECK(tallied.rounded_up == from_events.rounded_up);
      CHECK(tallied.rounded_down == from_events.rounded_down);
      CHECK(std::bit_cast<std::uint64_t>(tallied.signed_error) ==
            std::bit_cast<std::uint64_t>(from_events.signed_error));
      // D - exact, with the exact sum in MPFR.
      mpfr_t exact, term;
      mpfr_init2(exact, 4096);
      mpfr_init2(term, 4096);
      mpfr_set_flt(exact, c, MPFR_RNDN);
      for (int i = 0; i < k; ++i) {
        mpfr_set_flt(term, a[static_cast<std::size_t>(i)], MPFR_RNDN);
        mpfr_mul_d(term, term, static_cast<double>(b[static_cast<std::size_t>(i)]), MPFR_RNDN);
        mpfr_add(exact, exact, term, MPFR_RNDN);
      }
      mpfr_set_d(term, static_cast<double>(d), MPFR_RNDN);
      mpfr_sub(term, term, exact, MPFR_RNDN);
      const double d_minus_exact = mpfr_get_d(term, MPFR_RNDN);
      mpfr_clear(exact);
      mpfr_clear(term);
      // (An overflowing step's residue is infinite: the identity needs finite D.
      // Relative 1e-9: exact-rne's residue comes from RoundingEvent::error_ulps, a rounded
      // ulp count; a missing term or a flipped sign is off by far more.)
      if (std::isfinite(d)) {
        CHECK(std::fabs(tallied.signed_error - d_minus_exact) <= 1e-9 * sum_abs_error + 1e-300);
        ++finite_checks;
      }
      CHECK(tallied.rounded_up + tallied.rounded_down <= static_cast<int>(recorded.steps.size()));
    }
  }
  CHECK(presets >= 10);
  CHECK(finite_checks > presets * trials * 3 / 4);
}

// ---- Blackwell (sm100 tcgen05.mma, sm120 mma.sync): MMA-Sim's parameters ------------
// The random cases above check every new preset against the reference; these pin the
// parameters MMA-Sim publishes (github microsoft/MMA-Sim @c78513835c8b mmasim/simulator/nv_ptx.py,
// mmasim/isa/nv_ptx/nv_tcgen05mma.py, nv_mma.py) and what each one changes, on hand-worked cases.

TEST_CASE("Blackwell presets: MMA-Sim's k per step, F = 25 and outputs, all marked unmeasured") {
  struct Expected {
    const char* name;
    const fb::Format& input;
    int per_step;
    fb::DotOutput output;
    bool beyond_mma_sim;  // fp6/fp4: MMA-Sim's f8f6f4 kind takes only e4m3/e5m2
  };
  using enum fb::DotOutput;
  namespace f = fb::formats;
  const Expected expected[] = {
      {"sm100", f::bf16, 16, fp32_rz, false},         {"sm100", f::fp16, 16, fp32_rz, false},
      {"sm100", f::tf32, 8, fp32_rz, false},          {"sm100", f::e4m3, 32, fp32_rz, false},
      {"sm100", f::e5m2, 32, fp32_rz, false},         {"sm100", f::e3m2, 32, fp32_rz, true},
      {"sm100", f::e2m3, 32, fp32_rz, true},          {"sm100", f::e2m1, 32, fp32_rz, true},
      {"sm100-f16acc", f::fp16, 16, fp16_rne, false}, {"sm100-f16acc", f::e4m3, 32, fp16_rne, false},
      {"sm100-f16acc", f::e5m2, 32, fp16_rne, false}, {"sm120", f::bf16, 16, fp32_rz, false},
      {"sm120", f::fp16, 16, fp32_rz, false},         {"sm120", f::tf32, 8, fp32_rz, false},
      {"sm120", f::e4m3, 32, fp32_rz, false},         {"sm120", f::e5m2, 32, fp32_rz, false},
      {"sm120", f::e3m2, 32, fp32_rz, true},          {"sm120", f::e2m3, 32, fp32_rz, true},
      {"sm120", f::e2m1, 32, fp32_rz, true},          {"sm120-f16acc", f::fp16, 16, fp16_rne, false},
      {"sm120-f16acc", f::e4m3, 32, fp16_rne, false}, {"sm120-f16acc", f::e5m2, 32, fp16_rne, false},
  };
  int blackwell_rows = 0;
  for (const fb::TensorCoreModel& m : fb::tensor_core_models()) {
    blackwell_rows += std::string_view(m.name).starts_with("sm100") || std::string_view(m.name).starts_with("sm120");
  }
  CHECK(blackwell_rows == static_cast<int>(std::size(expected)));
  for (const Expected& e : expected) {
    CAPTURE(e.name);
    CAPTURE(e.input.name);
    const fb::TensorCoreModel* m = fb::find_tensor_core_model(e.name, e.input);
    REQUIRE(m != nullptr);
    CHECK(m->products_per_step == e.per_step);
    CHECK(m->fraction_bits == 25);
    CHECK(m->truncate_terms);
    CHECK(m->output == e.output);
    CHECK(m->zero_terms == fb::ZeroTermPolicy::ignored);
    CHECK_FALSE(m->hardware_validated);
    CHECK(m->source.find("MMA-Sim") != std::string_view::npos);
    CHECK(m->source.find("2511.10909") != std::string_view::npos);
    CHECK(m->note.find("UNMEASURED") != std::string_view::npos);
    CHECK((m->note.find("ASSUMED beyond MMA-Sim") != std::string_view::npos) == e.beyond_mma_sim);
  }
  // Forms the instructions lack: kind::f16 with f16 D takes f16 inputs only; tf32 has no f16 D.
  CHECK(fb::find_tensor_core_model("sm100-f16acc", fb::formats::bf16) == nullptr);
  CHECK(fb::find_tensor_core_model("sm100-f16acc", fb::formats::tf32) == nullptr);
  CHECK(fb::find_tensor_core_model("sm120-f16acc", fb::formats::e2m1) == nullptr);
}

TEST_CASE("Blackwell fp8: F = 25 keeps C bits Hopper's 13-bit fp8 path drops") {
  const fb::TensorCoreModel* hopper = fb::find_tensor_core_model("sm90-wgmma", fb::formats::e4m3);
  REQUIRE(hopper);
  const std::vector<std::uint32_t> zero{0x00u};
  // C = 1 + 2^-20 with a zero product: Hopper truncates it to 13 fraction bits (1.0);
  // Blackwell's F = 25 and fp32 output keep it.
  CHECK(fb::fused_dot_bits(*hopper, 0x3f800008u, zero, zero) == 0x3f800000u);
  for (const char* name : {"sm100", "sm120"}) {
    for (const fb::Format* in : {&fb::formats::e4m3, &fb::formats::e5m2}) {
      const fb::TensorCoreModel* m = fb::find_tensor_core_model(name, *in);
      REQUIRE(m);
      CHECK(fb::fused_dot_bits(*m, 0x3f800008u, zero, zero) == 0x3f800008u);
    }
  }
  // With 16-bit-style truncation at F = 25: C = -(1 - 2^-24) plus 1*1 gives 2^-24 exactly
  // (F = 25 keeps C's last bit); with F = 24 it would be 2^-23 (cf. Fasi et al.'s sm70 case).
  const fb::TensorCoreModel* sm100 = fb::find_tensor_core_model("sm100", fb::formats::e4m3);
  REQUIRE(sm100);
  const std::vector<std::uint32_t> one{0x38u};  // e4m3 1.0
  CHECK(fb::fused_dot_bits(*sm100, 0xbf7fffffu, one, one) == std::bit_cast<std::uint32_t>(std::ldexp(1.0f, -24)));
}

TEST_CASE("Blackwell fp8: 32 products fuse in one step (tcgen05 kind::f8f6f4 k=32, mma.sync m16n8k32)") {
  // a0*b0 = 2^16, a1*b1 = -2^16 and a16*b16 = 2^-10 (e4m3 2^-9 subnormal times 2^-1), k = 17.
  // One step aligns 2^-10 to exponent 16 with F = 25: truncated to 0, and the sum is +0.
  // Two steps of 16 would give 2^-10 exactly (the reference below confirms the case tells
  // them apart).
  std::vector<std::uint32_t> a(17, 0u), b(17, 0u);
  a[0] = 0x78u, b[0] = 0x78u;  // 2^8 * 2^8
  a[1] = 0x78u, b[1] = 0xf8u;  // 2^8 * -2^8
  a[16] = 0x01u, b[16] = 0x30u;
  const RefFormat& in = ref_input("e4m3");
  CHECK(ref_dot({16, 25, fb::DotOutput::fp32_rz}, in, 0u, a, b) == std::bit_cast<std::uint32_t>(std::ldexp(1.0f, -10)));
  CHECK(ref_dot({32, 25, fb::DotOutput::fp32_rz}, in, 0u, a, b) == 0u);
  for (const char* name : {"sm100", "sm120"}) {
    const fb::TensorCoreModel* m = fb::find_tensor_core_model(name, fb::formats::e4m3);
    REQUIRE(m);
    CHECK(fb::fused_dot_bits(*m, 0u, a, b) == 0u);
    // The 33rd product starts a second step: with a[32]*b[32] = 2^-10 added, that step sees
    // C = +0 and keeps 2^-10.
    std::vector<std::uint32_t> a2 = a, b2 = b;
    a2.resize(33, 0u), b2.resize(33, 0u);
    a2[32] = 0x01u, b2[32] = 0x30u;
    CHECK(fb::fused_dot_bits(*m, 0u, a2, b2) == std::bit_cast<std::uint32_t>(std::ldexp(1.0f, -10)));
  }
}

TEST_CASE("Blackwell fp8 with fp16 accumulator: F = 25 alignment, output RNE to fp16") {
  for (const char* name : {"sm100-f16acc", "sm120-f16acc"}) {
    const fb::TensorCoreModel* m = fb::find_tensor_core_model(name, fb::formats::e4m3);
    REQUIRE(m);
    CHECK(fb::accumulator_format(*m) == fb::formats::fp16);
    // C = fp16 1.0; 1 + 2^-11 is a tie between 1 and 1 + 2^-10: even gives 1.0.
    CHECK(fb::fused_dot_bits(*m, 0x3c00u, std::vector<std::uint32_t>{0x01u}, std::vector<std::uint32_t>{0x28u}) ==
          0x3c00u);
    // 1 + 1.5 * 2^-11 is past the tie: 1 + 2^-10 (RNE, where RZ would give 1.0).
    CHECK(fb::fused_dot_bits(*m, 0x3c00u, std::vector<std::uint32_t>{0x01u}, std::vector<std::uint32_t>{0x2cu}) ==
          0x3c01u);
    // 65504 + 448 * 448 overflows fp16: inf.
    CHECK(fb::fused_dot_bits(*m, 0x7bffu, std::vector<std::uint32_t>{0x7eu}, std::vector<std::uint32_t>{0x7eu}) ==
          0x7c00u);
  }
}

TEST_CASE("Blackwell fp4/fp6 (assumed fp8 path): exact products, subnormals aligned at the format's emin") {
  for (const char* name : {"sm100", "sm120"}) {
    const fb::TensorCoreModel* m = fb::find_tensor_core_model(name, fb::formats::e2m1);
    REQUIRE(m);
    // 6*6 + 0.5*(-0.5) = 35.75 (e2m1: 6 = 0x7, 0.5 = 0x1 (subnormal), -0.5 = 0x9).
    CHECK(fb::fused_dot_bits(*m, 0u, std::vector<std::uint32_t>{0x7u, 0x1u}, std::vector<std::uint32_t>{0x7u, 0x9u}) ==
          0x420f0000u);
    // 0.5 * 0.5 aligns at e2m1's emin 0 + 0 (not at its value's exponent -2): the grid is
    // 2^-25, so C = -(0.25 - 2^-26) truncates to -(0.25 - 2^-25) and D = 2^-25 (aligning
    // at -2 would keep C exactly and give 2^-26).
    CHECK(fb::fused_dot_bits(*m, 0xbe7fffffu, std::vector<std::uint32_t>{0x1u}, std::vector<std::uint32_t>{0x1u}) ==
          0x33000000u);
    // The fp6 forms: e3m2 28 * -28 (its max finite, 0x1f and 0x3f); e2m3 7.5 (0x1f) times
    // its smallest subnormal 0.125 (0x01).
    const fb::TensorCoreModel* m6 = fb::find_tensor_core_model(name, fb::formats::e3m2);
    REQUIRE(m6);
    CHECK(fb::fused_dot_bits(*m6, 0u, std::vector<std::uint32_t>{0x1fu}, std::vector<std::uint32_t>{0x3fu}) ==
          std::bit_cast<std::uint32_t>(-784.0f));
    const fb::TensorCoreModel* m63 = fb::find_tensor_core_model(name, fb::formats::e2m3);
    REQUIRE(m63);
    CHECK(fb::fused_dot_bits(*m63, 0u, std::vector<std::uint32_t>{0x1fu}, std::vector<std::uint32_t>{0x01u}) ==
          std::bit_cast<std::uint32_t>(7.5f * 0.125f));
  }
}

TEST_CASE("Blackwell fp4/fp6 exhaustive: every e2m1 pair of products, every fp6 product, against the reference") {
  // e2m1: every (a0, b0, a1, b1) (16^4) with each C below; e3m2 and e2m3: every single
  // product (64^2) with each C. C covers zeros, cancellation against the products, values
  // far above and below them, subnormals, max finite and the specials.
  const std::uint32_t cs[] = {0x00000000u, 0x80000000u, 0x3f800000u, 0xbf800000u, 0x32800000u, 0xbe7fffffu,
                              0x42100000u, 0xc20f0000u, 0x00000001u, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u,
                              0x7fc00000u, 0x3f800001u, 0x4b800001u, 0xb3400000u};
  for (const char* name : {"sm100", "sm120"}) {
    CAPTURE(name);
    const fb::TensorCoreModel* m = fb::find_tensor_core_model(name, fb::formats::e2m1);
    REQUIRE(m);
    const RefModel ref{m->products_per_step, m->fraction_bits, m->output};
    const RefFormat& in = ref_input("e2m1");
    std::vector<std::uint32_t> a(2), b(2);
    long cases = 0;
    int failures = 0;
    for (std::uint32_t bits = 0; bits < (1u << 16) && failures < 5; ++bits) {
      a[0] = bits & 0xfu, b[0] = (bits >> 4) & 0xfu, a[1] = (bits >> 8) & 0xfu, b[1] = bits >> 12;
      for (const std::uint32_t c : cs) {
        ++cases;
        const std::uint32_t want = ref_dot(ref, in, c, a, b), got = fb::fused_dot_bits(*m, c, a, b);
        if (got != want) {
          ++failures;
          FAIL_CHECK(describe_case(c, a, b) << " got " << hex(got) << " want " << hex(want));
        }
      }
    }
    CHECK(cases == (1L << 16) * static_cast<long>(std::size(cs)));
    for (const char* fp6 : {"e3m2", "e2m3"}) {
      CAPTURE(fp6);
      const fb::TensorCoreModel* m6 = fb::find_tensor_core_model(name, fb_input(fp6));
      REQUIRE(m6);
      const RefModel ref6{m6->products_per_step, m6->fraction_bits, m6->output};
      const RefFormat& in6 = ref_input(fp6);
      std::vector<std::uint32_t> x(1), y(1);
      for (std::uint32_t bits = 0; bits < (1u << 12) && failures < 5; ++bits) {
        x[0] = bits & 0x3fu, y[0] = bits >> 6;
        for (const std::uint32_t c : cs) {
          const std::uint32_t want = ref_dot(ref6, in6, c, x, y), got = fb::fused_dot_bits(*m6, c, x, y);
          if (got != want) {
            ++failures;
            FAIL_CHECK(describe_case(c, x, y) << " got " << hex(got) << " want " << hex(want));
          }
        }
      }
    }
  }
}

// fused_dot_columns runs many dots side by side in the blocked kernel's lanes, on each
// instruction set this CPU has; with a tally, the kernel's tallied form (each term's
// truncation remainder kept and summed in fp64, the step's error, carry-out, tie and direction
// formed in the lanes, the signed error summed lane after lane). Each lane's D is checked
// against the exact-integer reference, and the tally against fused_dot's own traced steps with
// DotTrace::tally_only, one lane after another (an independent path: fused_step_body), bit for
// bit. Lanes share a and differ in b and C; some lanes reuse lane 0's column with sign flips
// and last-bit tweaks (cancellation across lanes' different C), some take a whole fresh case
// (so every distribution of random_case lands in some lane: specials, overflow, zero terms,
// subnormal outputs, ties of the fp16 outputs, chained C over several steps). 29 lanes (whole
// groups of 16 or 8, then a last group overlapping the one before), or 5 (fewer than a group:
// the zero-padded copy); b is stored with a row stride wider than the lanes, and C and D share
// one array.
TEST_CASE("fused_dot_columns matches the exact-integer reference and fused_dot's tally in every lane") {
  const int trials = 800 / test_scale_divisor();
  constexpr int kLanes = 29;
  constexpr std::size_t kStride = 32;
  each_preset_on_each_isa([&](fb::DotIsa isa, const fb::TensorCoreModel& model, int preset_index, const RefFormat& in,
                              const RefModel& ref, bool f16, const RefFormat& acc_format) {
    Gen g(0xc01u * 1000u + static_cast<std::uint64_t>(preset_index) * 7u + static_cast<std::uint64_t>(isa));
    int failures = 0;
    for (int t = 0; t < trials && failures < 5; ++t) {
      const int lanes = t % 4 == 3 ? 5 : kLanes;
      std::uint32_t c0 = 0;
      std::vector<std::uint32_t> a, b0;
      random_case(g, in, f16, std::max(model.products_per_step, 8), c0, a, b0);
      const int k = static_cast<int>(a.size());
      std::vector<std::vector<std::uint32_t>> columns(kLanes);
      std::vector<std::uint32_t> c_bits(kLanes);
      for (int l = 0; l < kLanes; ++l) {
        std::vector<std::uint32_t>& col = columns[static_cast<std::size_t>(l)];
        switch (l == 0 ? 0 : g.range(0, 2)) {
          case 0:
            col = b0, c_bits[static_cast<std::size_t>(l)] = c0;
            break;
          case 1: {  // lane 0's column, signs and last bits flipped at random, C anew
            col = b0;
            for (std::uint32_t& y : col) {
              if (g.range(0, 3) == 0) y ^= (1u << (in.ebits + in.mbits)) << in.shift;
              if (g.range(0, 3) == 0) y ^= 1u << in.shift;
            }
            c_bits[static_cast<std::size_t>(l)] =
                g.range(0, 1) == 0 ? c0 ^ (1u << (acc_format.ebits + acc_format.mbits)) : g.value(acc_format, 0, 200);
            break;
          }
          default: {  // a fresh case's column and C, padded or cut to k
            std::vector<std::uint32_t> a2;
            std::uint32_t c2 = 0;
            random_case(g, in, f16, std::max(model.products_per_step, 8), c2, a2, col);
            col.resize(static_cast<std::size_t>(k), 0u);
            c_bits[static_cast<std::size_t>(l)] = c2;
          }
        }
      }
      std::vector<float> af(static_cast<std::size_t>(k)), panel(static_cast<std::size_t>(k) * kStride, 7.0f);
      for (int j = 0; j < k; ++j) {
        af[static_cast<std::size_t>(j)] = ref_float(in, a[static_cast<std::size_t>(j)]);
        for (int l = 0; l < kLanes; ++l)
          panel[static_cast<std::size_t>(j) * kStride + static_cast<std::size_t>(l)] =
              ref_float(in, columns[static_cast<std::size_t>(l)][static_cast<std::size_t>(j)]);
      }
      std::vector<float> cd(kLanes), column(static_cast<std::size_t>(k));
      for (int l = 0; l < kLanes; ++l)
        cd[static_cast<std::size_t>(l)] = ref_float(acc_format, c_bits[static_cast<std::size_t>(l)]);
      const std::vector<float> c_copy = cd;
      fb::DotStepTally lanes_tally;
      fb::fused_dot_columns(model, cd.data(), af.data(), panel.data(), kStride, k, lanes, cd.data(), &lanes_tally,
                            nullptr, isa);
      // The tally against fused_dot's own traced steps, one lane after another (the scalar
      // step's trace is checked against the reference by the trace tests of this file).
      fb::DotStepTally one_by_one;
      fb::DotTrace tally_trace;
      tally_trace.tally_only = &one_by_one;
      for (int l = 0; l < lanes; ++l) {
        for (int j = 0; j < k; ++j)
          column[static_cast<std::size_t>(j)] =
              panel[static_cast<std::size_t>(j) * kStride + static_cast<std::size_t>(l)];
        (void)fb::fused_dot(model, c_copy[static_cast<std::size_t>(l)], af.data(), column.data(), k, &tally_trace);
      }
      const bool same_tally = lanes_tally.significand_overflows == one_by_one.significand_overflows &&
                              lanes_tally.ties == one_by_one.ties && lanes_tally.rounded_up == one_by_one.rounded_up &&
                              lanes_tally.rounded_down == one_by_one.rounded_down &&
                              std::bit_cast<std::uint64_t>(lanes_tally.signed_error) ==
                                  std::bit_cast<std::uint64_t>(one_by_one.signed_error);
      if (!same_tally && failures < 5) {
        ++failures;
        FAIL_CHECK(std::string(model.name)
                   << " " << std::string(model.input.name) << " isa " << static_cast<int>(isa) << " lanes " << lanes
                   << " tally: overflows " << lanes_tally.significand_overflows << "/"
                   << one_by_one.significand_overflows << " ties " << lanes_tally.ties << "/" << one_by_one.ties
                   << " up " << lanes_tally.rounded_up << "/" << one_by_one.rounded_up << " down "
                   << lanes_tally.rounded_down << "/" << one_by_one.rounded_down << " error "
                   << lanes_tally.signed_error << "/" << one_by_one.signed_error);
      }
      for (int l = 0; l < lanes && failures < 5; ++l) {
        const std::uint32_t want =
            ref_dot(ref, in, c_bits[static_cast<std::size_t>(l)], a, columns[static_cast<std::size_t>(l)]);
        const float want_value = f16 ? ref_float(kRefFp16, want) : fp32_of(want);
        const float got = cd[static_cast<std::size_t>(l)];
        const bool same = std::bit_cast<std::uint32_t>(got) == std::bit_cast<std::uint32_t>(want_value);
        if (!same) {
          ++failures;
          FAIL_CHECK(std::string(model.name)
                     << " " << std::string(model.input.name) << " lane " << l << " "
                     << describe_case(c_bits[static_cast<std::size_t>(l)], a, columns[static_cast<std::size_t>(l)])
                     << " got " << hex(std::bit_cast<std::uint32_t>(got)) << " want "
                     << hex(std::bit_cast<std::uint32_t>(want_value)));
        }
      }
    }
  });
}

// fused_dot_rows, the blocked GEMM kernel (a third implementation of the step, in fp32 and
// int32 lanes), on each instruction set this CPU has: every lane of every row checked
// against the exact-integer reference and against fused_dot, bit for bit. A trial is a
// GEMM: 1 to 9 rows, 1 to 80 lanes (the 64-lane blocks of several registers, single registers
// of 16 or 8 lanes, and a ragged tail), b stored with a wider row stride. Rows share the panel: row 0 is a random
// case's a, the others that row with sign and last-bit flips, or a fresh case's. Columns likewise. Most trials keep
// every value finite so that the lanes, not the fallback, compute; one in four lets a fresh case bring its NaNs and
// infinities (the fallback's routes). Half the trials pass the panel's prepared alignment exponents, half let the
// kernel compute them; half share C and D.
TEST_CASE("fused_dot_rows matches the exact-integer reference and fused_dot on every instruction set") {
  const int trials = std::max(8, 240 / test_scale_divisor());
  each_preset_on_each_isa([&](fb::DotIsa isa, const fb::TensorCoreModel& model, int preset_index, const RefFormat& in,
                              const RefModel& ref, bool f16, const RefFormat& acc_format) {
    const int per_step = std::max(model.products_per_step, 8);
    Gen g(0x9e33u * 1000u + static_cast<std::uint64_t>(preset_index) * 7u + static_cast<std::uint64_t>(isa));
    auto finite = [&](const std::vector<std::uint32_t>& v) {
      return std::all_of(v.begin(), v.end(), [&](std::uint32_t x) {
        return ref_decode(in, x).cls != Cls::nan && ref_decode(in, x).cls != Cls::inf;
      });
    };
    // A fresh case's vector cut or padded to k; with allow_specials false, redrawn until finite.
    auto fresh = [&](int k, bool allow_specials, std::uint32_t& c, std::vector<std::uint32_t>& x) {
      std::vector<std::uint32_t> other;
      for (int tries = 0;; ++tries) {
        random_case(g, in, f16, per_step, c, x, other);
        x.resize(static_cast<std::size_t>(k), 0u);
        if (allow_specials || finite(x) || tries > 50) break;
      }
      if (!allow_specials && !finite(x)) std::fill(x.begin(), x.end(), 0u);
    };
    int failures = 0;
    for (int t = 0; t < trials && failures < 5; ++t) {
      const bool allow_specials = g.range(0, 3) == 0;
      std::uint32_t c0 = 0;
      std::vector<std::uint32_t> a0, b0;
      for (int tries = 0;; ++tries) {
        random_case(g, in, f16, per_step, c0, a0, b0);
        if (allow_specials || (finite(a0) && finite(b0)) || tries > 50) break;
      }
      const int k = static_cast<int>(a0.size());
      const int rows = g.range(1, 9), lanes = g.range(1, 80);
      const std::size_t ldb = static_cast<std::size_t>(lanes) + 3;
      auto variant = [&](std::vector<std::uint32_t> v) {
        for (std::uint32_t& y : v) {
          if (g.range(0, 3) == 0) y ^= (1u << (in.ebits + in.mbits)) << in.shift;
          if (g.range(0, 3) == 0 && ref_decode(in, y ^ (1u << in.shift)).cls == ref_decode(in, y).cls)
            y ^= 1u << in.shift;
        }
        return v;
      };
      std::vector<std::vector<std::uint32_t>> a_rows(static_cast<std::size_t>(rows)),
          columns(static_cast<std::size_t>(lanes));
      std::vector<std::uint32_t> c_bits(static_cast<std::size_t>(rows) * lanes);
      for (int r = 0; r < rows; ++r) {
        std::uint32_t unused = 0;
        auto& row = a_rows[static_cast<std::size_t>(r)];
        if (r == 0)
          row = a0;
        else if (g.range(0, 1) == 0)
          row = variant(a0);
        else
          fresh(k, allow_specials, unused, row);
        if (!allow_specials && !finite(row)) row = a0;
      }
      for (int l = 0; l < lanes; ++l) {
        auto& col = columns[static_cast<std::size_t>(l)];
        if (l == 0)
          col = b0;
        else if (g.range(0, 1) == 0)
          col = variant(b0);
        else {
          std::uint32_t unused = 0;
          fresh(k, allow_specials, unused, col);
        }
        if (!allow_specials && !finite(col)) col = b0;
      }
      for (int r = 0; r < rows; ++r)
        for (int l = 0; l < lanes; ++l) {
          std::uint32_t c = c0;
          if (r + l > 0) {
            std::vector<std::uint32_t> unused_a, unused_b;
            random_case(g, in, f16, per_step, c, unused_a, unused_b);
          }
          c_bits[static_cast<std::size_t>(r) * lanes + l] = c;
        }
      std::vector<float> a_values(static_cast<std::size_t>(rows) * k), panel(static_cast<std::size_t>(k) * ldb, 7.0f);
      for (int r = 0; r < rows; ++r)
        for (int j = 0; j < k; ++j)
          a_values[static_cast<std::size_t>(r) * k + j] =
              ref_float(in, a_rows[static_cast<std::size_t>(r)][static_cast<std::size_t>(j)]);
      for (int j = 0; j < k; ++j)
        for (int l = 0; l < lanes; ++l)
          panel[static_cast<std::size_t>(j) * ldb + l] =
              ref_float(in, columns[static_cast<std::size_t>(l)][static_cast<std::size_t>(j)]);
      std::vector<float> c_values(c_bits.size());
      for (std::size_t i = 0; i < c_bits.size(); ++i) c_values[i] = ref_float(acc_format, c_bits[i]);
      std::vector<std::int32_t> alignment;
      const bool prepared = g.range(0, 1) == 0;
      if (prepared) {
        alignment.resize(panel.size());
        fb::dot_alignment_exponents(model, panel.data(), panel.size(), alignment.data());
      }
      const bool shared = g.range(0, 1) == 0;
      std::vector<float> d_values = shared ? c_values : std::vector<float>(c_values.size(), -1.0f);
      fb::fused_dot_rows(model, shared ? d_values.data() : c_values.data(), static_cast<std::size_t>(lanes),
                         a_values.data(), static_cast<std::size_t>(k), rows, panel.data(),
                         prepared ? alignment.data() : nullptr, ldb, k, lanes, d_values.data(),
                         static_cast<std::size_t>(lanes), isa);
      std::vector<float> column(static_cast<std::size_t>(k));
      for (int r = 0; r < rows && failures < 5; ++r)
        for (int l = 0; l < lanes && failures < 5; ++l) {
          const std::size_t at = static_cast<std::size_t>(r) * lanes + l;
          const std::uint32_t want =
              ref_dot(ref, in, c_bits[at], a_rows[static_cast<std::size_t>(r)], columns[static_cast<std::size_t>(l)]);
          const float want_value = f16 ? ref_float(kRefFp16, want) : fp32_of(want);
          for (int j = 0; j < k; ++j)
            column[static_cast<std::size_t>(j)] = panel[static_cast<std::size_t>(j) * ldb + l];
          const float by_fused_dot =
              fb::fused_dot(model, c_values[at], a_values.data() + static_cast<std::size_t>(r) * k, column.data(), k);
          const std::uint32_t got = std::bit_cast<std::uint32_t>(d_values[at]);
          if (got != std::bit_cast<std::uint32_t>(want_value) || got != std::bit_cast<std::uint32_t>(by_fused_dot)) {
            ++failures;
            FAIL_CHECK("isa " << static_cast<int>(isa) << " " << std::string(model.name) << " "
                              << std::string(model.input.name) << " row " << r << " of " << rows << " lane " << l
                              << " of " << lanes << " "
                              << describe_case(c_bits[at], a_rows[static_cast<std::size_t>(r)],
                                               columns[static_cast<std::size_t>(l)])
                              << " got " << hex(got) << " want " << hex(std::bit_cast<std::uint32_t>(want_value))
                              << " fused_dot " << hex(std::bit_cast<std::uint32_t>(by_fused_dot)));
          }
        }
    }
    CHECK_MESSAGE(failures == 0, std::string(model.name) << " " << std::string(model.input.name));
  });
}

// The int32 partial sums at their bound: every product and C at the largest significand of
// one binade, all of one sign, so that a step's truncated terms sum to just under
// 2^(F+1) + n * 2^(F+2) (for 16 bf16 products at F = 25, past 2^31): the kernel must split
// the step's sum where int32 would wrap. Both signs, one and two steps, every instruction set.
TEST_CASE("fused_dot_rows sums a step's largest terms without wrapping") {
  each_preset_on_each_isa([&](fb::DotIsa isa, const fb::TensorCoreModel& model, int /*preset_index*/,
                              const RefFormat& in, const RefModel& ref, bool f16, const RefFormat& acc_format) {
    if (!fb::fused_dot_rows_blocked(model)) return;
    // The largest significand at exponent 0 (fn formats: 1.75 for e4m3 stays finite).
    const std::uint32_t top = ((static_cast<std::uint32_t>(in.bias) << in.mbits) | ((1u << in.mbits) - 1u)) << in.shift;
    const std::uint32_t c_top =
        (static_cast<std::uint32_t>(acc_format.bias) << acc_format.mbits) | ((1u << acc_format.mbits) - 1u);
    for (const bool negative : {false, true})
      for (const int steps : {1, 2}) {
        const int k = steps * model.products_per_step;
        const std::uint32_t sign = negative ? (1u << (in.ebits + in.mbits)) << in.shift : 0u;
        const std::vector<std::uint32_t> a(static_cast<std::size_t>(k), top | sign),
            b(static_cast<std::size_t>(k), top);
        const std::uint32_t c = c_top | (negative ? 1u << (acc_format.ebits + acc_format.mbits) : 0u);
        const int lanes = 75;  // a 64-lane block, a single register and a tail
        std::vector<float> av(static_cast<std::size_t>(k), ref_float(in, a[0])),
            panel(static_cast<std::size_t>(k) * lanes, ref_float(in, b[0]));
        std::vector<float> cd(static_cast<std::size_t>(lanes), ref_float(acc_format, c));
        fb::fused_dot_rows(model, cd.data(), lanes, av.data(), k, 1, panel.data(), nullptr, lanes, k, lanes, cd.data(),
                           lanes, isa);
        const std::uint32_t want = ref_dot(ref, in, c, a, b);
        const float want_value = f16 ? ref_float(kRefFp16, want) : fp32_of(want);
        for (int l = 0; l < lanes; ++l)
          CHECK_MESSAGE(
              std::bit_cast<std::uint32_t>(cd[static_cast<std::size_t>(l)]) == std::bit_cast<std::uint32_t>(want_value),
              "isa " << static_cast<int>(isa) << " " << std::string(model.name) << " " << std::string(model.input.name)
                     << " lane " << l << " negative " << negative << " steps " << steps << " got "
                     << hex(std::bit_cast<std::uint32_t>(cd[static_cast<std::size_t>(l)])) << " want "
                     << hex(std::bit_cast<std::uint32_t>(want_value)));
      }
  });
}

// Steps at the top of fp32's range: products whose exponents sum to 116..127, mostly of one
// sign, with C 0, of the same size or near the largest finite fp32, so that some step results
// overflow to inf and others stay just below it (the AVX2 kernel does not compare its results
// with the largest finite value: it lets the scaling overflow). Every lane is checked against
// the exact-integer reference and fused_dot. Only the inputs whose products reach that high
// (bf16, tf32). Four rows, so that AVX2's first 64 lanes take its 16-bit exponent path and
// the last 11 its 32-bit one.
TEST_CASE("fused_dot_rows near fp32's largest values: the results that overflow and those that do not") {
  each_preset_on_each_isa([&](fb::DotIsa isa, const fb::TensorCoreModel& model, int preset_index, const RefFormat& in,
                              const RefModel& ref, bool f16, const RefFormat& acc_format) {
    if (!fb::fused_dot_rows_blocked(model) || in.bias < 127) return;
    Gen g(0x70b5u * 1000u + static_cast<std::uint64_t>(preset_index) * 11u + static_cast<std::uint64_t>(isa));
    auto encode = [&](const RefFormat& f, bool negative, int exponent, std::uint32_t fraction) {
      return ((static_cast<std::uint32_t>(negative) << (f.ebits + f.mbits)) |
              (static_cast<std::uint32_t>(exponent + f.bias) << f.mbits) | fraction)
             << f.shift;
    };
    const int k = 2 * model.products_per_step, lanes = 75, rows = 4;
    std::vector<std::vector<std::uint32_t>> a(rows), b(lanes);
    std::vector<std::uint32_t> c(static_cast<std::size_t>(rows) * lanes);
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < k; ++j) a[r].push_back(encode(in, g.range(0, 9) == 0, 63, g.bits(in.mbits)));
    for (int l = 0; l < lanes; ++l) {
      const int top = g.range(116 - 63, 127 - 63);  // b's exponent: products at 2^116..2^127
      for (int j = 0; j < k; ++j)
        b[l].push_back(
            encode(in, g.range(0, 9) == 0, top - (g.range(0, 3) == 0 ? g.range(0, 3) : 0), g.bits(in.mbits)));
      for (int r = 0; r < rows; ++r) {
        const int kind = g.range(0, 3);
        const int c_exponent = kind == 3 ? 127 : std::min(127, top + 63 - g.range(0, 3));
        c[static_cast<std::size_t>(r) * lanes + l] =
            kind == 0 ? 0u
                      : encode(acc_format, g.range(0, 5) == 0, c_exponent,
                               kind == 3 ? (1u << acc_format.mbits) - 1u : g.bits(acc_format.mbits));
      }
    }
    std::vector<float> a_values(static_cast<std::size_t>(rows) * k), panel(static_cast<std::size_t>(k) * lanes);
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < k; ++j) a_values[static_cast<std::size_t>(r) * k + j] = ref_float(in, a[r][j]);
    for (int j = 0; j < k; ++j)
      for (int l = 0; l < lanes; ++l) panel[static_cast<std::size_t>(j) * lanes + l] = ref_float(in, b[l][j]);
    std::vector<float> cd(c.size());
    for (std::size_t i = 0; i < c.size(); ++i) cd[i] = ref_float(acc_format, c[i]);
    const std::vector<float> c_values = cd;
    fb::fused_dot_rows(model, cd.data(), lanes, a_values.data(), k, rows, panel.data(), nullptr, lanes, k, lanes,
                       cd.data(), lanes, isa);
    int failures = 0, overflowed = 0, finite_near_top = 0;
    std::vector<float> column(static_cast<std::size_t>(k));
    for (int r = 0; r < rows; ++r)
      for (int l = 0; l < lanes; ++l) {
        const std::size_t at = static_cast<std::size_t>(r) * lanes + l;
        const std::uint32_t want = ref_dot(ref, in, c[at], a[r], b[l]);
        const float want_value = f16 ? ref_float(kRefFp16, want) : fp32_of(want);
        for (int j = 0; j < k; ++j)
          column[static_cast<std::size_t>(j)] = panel[static_cast<std::size_t>(j) * lanes + l];
        const float by_fused_dot =
            fb::fused_dot(model, c_values[at], a_values.data() + static_cast<std::size_t>(r) * k, column.data(), k);
        overflowed += std::isinf(want_value) ? 1 : 0;
        finite_near_top += std::isfinite(want_value) && std::fabs(want_value) >= 0x1p122f ? 1 : 0;
        const std::uint32_t got = std::bit_cast<std::uint32_t>(cd[at]);
        if ((got != std::bit_cast<std::uint32_t>(want_value) || got != std::bit_cast<std::uint32_t>(by_fused_dot)) &&
            ++failures <= 5)
          FAIL_CHECK("isa " << static_cast<int>(isa) << " " << std::string(model.name) << " "
                            << std::string(model.input.name) << " row " << r << " lane " << l << " got " << hex(got)
                            << " want " << hex(std::bit_cast<std::uint32_t>(want_value)) << " fused_dot "
                            << hex(std::bit_cast<std::uint32_t>(by_fused_dot)));
      }
    CHECK_MESSAGE(failures == 0, std::string(model.name) << " " << std::string(model.input.name));
    // The case is only a test where both kinds of result occur.
    CHECK_MESSAGE(overflowed > 0, std::string(model.name) << ": no result overflowed");
    CHECK_MESSAGE(finite_near_top > 0, std::string(model.name) << ": no finite result at or above 2^122");
  });
}

// fused_dot_pairs: n unrelated dots (each a random case of every distribution, specials
// included, cut or zero-padded to one k) through the kernel side by side, each checked
// against the exact-integer reference and fused_dot, on every instruction set.
TEST_CASE("fused_dot_pairs matches the exact-integer reference and fused_dot on every instruction set") {
  const int trials = std::max(4, 60 / test_scale_divisor());
  each_preset_on_each_isa([&](fb::DotIsa isa, const fb::TensorCoreModel& model, int preset_index, const RefFormat& in,
                              const RefModel& ref, bool f16, const RefFormat& acc_format) {
    const int per_step = std::max(model.products_per_step, 8);
    Gen g(0x9a175u * 1000u + static_cast<std::uint64_t>(preset_index) * 7u + static_cast<std::uint64_t>(isa));
    int failures = 0;
    for (int t = 0; t < trials && failures < 5; ++t) {
      const int n = g.range(1, 40), k = g.range(1, 2 * per_step + per_step / 2);
      std::vector<std::vector<std::uint32_t>> as(static_cast<std::size_t>(n)), bs(static_cast<std::size_t>(n));
      std::vector<std::uint32_t> cs(static_cast<std::size_t>(n));
      std::vector<float> af(static_cast<std::size_t>(n) * k), bf(af.size()), cd(static_cast<std::size_t>(n));
      for (int i = 0; i < n; ++i) {
        auto& x = as[static_cast<std::size_t>(i)];
        auto& y = bs[static_cast<std::size_t>(i)];
        random_case(g, in, f16, per_step, cs[static_cast<std::size_t>(i)], x, y);
        x.resize(static_cast<std::size_t>(k), 0u);
        y.resize(static_cast<std::size_t>(k), 0u);
        for (int j = 0; j < k; ++j) {
          af[static_cast<std::size_t>(i) * k + j] = ref_float(in, x[static_cast<std::size_t>(j)]);
          bf[static_cast<std::size_t>(i) * k + j] = ref_float(in, y[static_cast<std::size_t>(j)]);
        }
        cd[static_cast<std::size_t>(i)] = ref_float(acc_format, cs[static_cast<std::size_t>(i)]);
      }
      const std::vector<float> c_copy = cd;
      fb::fused_dot_pairs(model, cd.data(), af.data(), bf.data(), k, n, cd.data(), isa);
      for (int i = 0; i < n && failures < 5; ++i) {
        const std::size_t at = static_cast<std::size_t>(i);
        const std::uint32_t want = ref_dot(ref, in, cs[at], as[at], bs[at]);
        const float want_value = f16 ? ref_float(kRefFp16, want) : fp32_of(want);
        const float by_fused_dot = fb::fused_dot(model, c_copy[at], af.data() + at * k, bf.data() + at * k, k);
        const std::uint32_t got = std::bit_cast<std::uint32_t>(cd[at]);
        if (got != std::bit_cast<std::uint32_t>(want_value) || got != std::bit_cast<std::uint32_t>(by_fused_dot)) {
          ++failures;
          FAIL_CHECK("isa " << static_cast<int>(isa) << " " << std::string(model.name) << " "
                            << std::string(model.input.name) << " dot " << i << " of " << n << " "
                            << describe_case(cs[at], as[at], bs[at]) << " got " << hex(got) << " want "
                            << hex(std::bit_cast<std::uint32_t>(want_value)) << " fused_dot "
                            << hex(std::bit_cast<std::uint32_t>(by_fused_dot)));
        }
      }
    }
    CHECK_MESSAGE(failures == 0, std::string(model.name) << " " << std::string(model.input.name));
  });
}

namespace {

// What a step's error must be (DotStepEvent::error, DotStepTally): D - exact sum, computed here
// on the reference's exact grid (integers, 2^-400) and rounded once to the nearest double by
// MPFR, with its exact sign (-1, 0, +1); ±inf where D overflowed to ±inf. truncated: the
// exact sum of what truncation removed (exact - aligned), rounded once; residue: aligned - D.
bool same_double(double x, double y) {
  return std::bit_cast<std::uint64_t>(x) == std::bit_cast<std::uint64_t>(y) || (x == 0.0 && y == 0.0) ||
         (std::isnan(x) && std::isnan(y));
}
struct ExpectedStep {
  double error, truncated, residue;
  int sign;
  Big exact_error = 0;  // on the grid (finite D only)
};
double big_grid_to_double(const Big& v) {
  mpfr_t x;
  mpfr_init2(x, 1100);
  mpfr_set_str(x, v.str().c_str(), 10, MPFR_RNDN);  // exact: |v| < 2^1024
  mpfr_mul_2si(x, x, -400, MPFR_RNDN);              // exact
  const double d = mpfr_get_d(x, MPFR_RNDN);        // the one rounding
  mpfr_clear(x);
  return d;
}
ExpectedStep expected_step(const RefStep& st, bool f16) {
  const RefValue dv = ref_decode(f16 ? kRefFp16 : kRefFp32, st.d);
  const double truncated = big_grid_to_double(st.exact_sum - st.aligned);
  if (dv.cls == Cls::inf) {
    const double inf = dv.neg ? -INFINITY : INFINITY;
    return {inf, truncated, -inf, dv.neg ? -1 : 1};
  }
  Big d = 0;
  if (dv.cls == Cls::finite) d = Big(dv.mant) << (dv.lsb + 400);
  if (dv.neg) d = -d;
  const Big error = d - st.exact_sum;
  return {big_grid_to_double(error), truncated, big_grid_to_double(st.aligned - d),
          error > 0 ? 1 : (error < 0 ? -1 : 0), error};
}
// A finite non-zero double on the grid 2^-400 (exact: every value here is at least 2^-347).
Big double_to_grid(double x) {
  int e = 0;
  const double f = std::frexp(std::fabs(x), &e);
  const Big m(static_cast<std::uint64_t>(std::ldexp(f, 53)));
  const Big v = m << (e - 53 + 400);
  return x < 0 ? Big(-v) : v;
}
// Whether `got` is what DotStepEvent::error promises for the reference step (its contract,
// emu/dot/tensor_core.hpp): the exact sign and zero-ness; the exact error rounded once where
// the removed parts' fp64 sum is exact (every removed part's lowest bit at least 2^(unit-46)),
// and wherever |got| <= 2^(2b-53) * 2^unit (2^b > the products per step); otherwise within
// 2^(2b-54) * 2^unit plus half an ulp of got of the exact error.
bool error_as_promised(const RefStep& st, const ExpectedStep& want, double got, int per_step) {
  if ((got > 0 ? 1 : (got < 0 ? -1 : 0)) != want.sign) return false;
  if (!std::isfinite(got) || !std::isfinite(want.error) || want.sign == 0) return same_double(got, want.error);
  const int b = std::bit_width(static_cast<unsigned>(per_step));
  const bool certified = st.lowest_removed == INT32_MAX || st.lowest_removed >= st.unit - 46;
  if (certified || std::fabs(got) <= std::ldexp(1.0, 2 * b - 53 + st.unit)) return same_double(got, want.error);
  int e = 0;
  (void)std::frexp(got, &e);
  const Big bound = (Big(1) << (2 * b - 54 + st.unit + 400)) + (Big(1) << (e - 54 + 400));
  const Big diff = double_to_grid(got) - want.exact_error;
  return (diff < 0 ? Big(-diff) : diff) <= bound;
}
struct ExpectedTally {
  int up = 0, down = 0;
  double signed_error = 0.0;
  void add(const RefStep& st, bool f16) {
    if (st.special) return;
    const ExpectedStep e = expected_step(st, f16);
    if (e.sign != 0) ++((e.sign > 0) == st.aligned_nonnegative ? up : down);
    signed_error += e.error;
  }
};

// The encoding of `value` in f, found by trying every pattern (decoded by the reference).
std::uint32_t ref_encode(const RefFormat& f, double value) {
  for (std::uint32_t bits = 0; bits < (1u << (1 + f.ebits + f.mbits)); ++bits)
    if (static_cast<double>(ref_float(f, bits << f.shift)) == value &&
        std::signbit(value) == ((bits >> (f.ebits + f.mbits)) != 0))
      return bits << f.shift;
  FAIL("no encoding of " << value << " in " << f.name);
  return 0;
}

// The smallest positive power of two of an input format (its least subnormal).
double least_power(const RefFormat& f) { return std::ldexp(1.0, 1 - f.bias - f.mbits); }

// One (model, input format) preset of the tally tests: the model under test and the
// reference's view of its input format. Named fields, not structured bindings: clang before
// 16 cannot capture bindings (CAPTURE).
struct TallyPreset {
  const char* name;
  const char* input_name;
  const fb::TensorCoreModel* model;
  const RefFormat* input;
  bool fp16_output;
};
TallyPreset tally_preset(const std::pair<const char*, const char*>& preset) {
  const char* name = preset.first;
  const char* input = preset.second;
  const fb::TensorCoreModel* m = fb::find_tensor_core_model(name, fb_input(input));
  INFO("preset " << name << " " << input);
  REQUIRE(m != nullptr);
  return {name, input, m, &ref_input(input), m->output == fb::DotOutput::fp16_rne};
}

}  // namespace

TEST_CASE("step errors and rounding directions are exact where fp64 would absorb a remainder") {
  // A step's error is output - exact sum; fp64 sums of what truncation removed lose a tiny
  // remainder beside a big one (C = 1e-30 beside 2^-40) and can read 0 or the wrong sign.
  // Each case's expected error comes from the reference's exact integers (rounded once by MPFR)
  // and its direction from its exact sign against the aligned sum's: fused_dot's recorded
  // events, its tally, and fused_dot_columns' tally on every instruction set must all give them.
  const std::pair<const char*, const char*> presets[] = {{"sm80", "bf16"},
                                                         {"sm80", "fp16"},
                                                         {"sm90-mma", "bf16"},
                                                         {"sm90-wgmma", "bf16"},
                                                         {"sm90-wgmma", "fp16"},
                                                         {"sm90-wgmma", "e4m3"},
                                                         {"sm90-wgmma-f16acc", "fp16"},
                                                         {"sm100", "bf16"},
                                                         {"sm100", "e4m3"},
                                                         {"sm100-f16acc", "e4m3"},
                                                         {"sm70", "fp16"}};
  int absorbing_cases = 0;
  for (const auto& preset : presets) {
    const TallyPreset p = tally_preset(preset);
    CAPTURE(p.name);
    CAPTURE(p.input_name);
    const fb::TensorCoreModel* m = p.model;
    const RefFormat& in = *p.input;
    const bool f16 = p.fp16_output;
    const RefModel ref{m->products_per_step, m->fraction_bits, m->output};
    // The step's largest product B*B, a pair s*s and -s*s below its grid 2^(2 log2 B - F),
    // and C tiny beside s*s: fp64 in term order gives C + s^2 - s^2 = 0.
    const double big = std::ldexp(1.0, std::min(8, (1 << in.ebits) - 2 - in.bias));
    const double s = std::max(least_power(in), std::ldexp(1.0, -20));
    const double t = std::max(least_power(in), std::ldexp(1.0, -50));
    if (!(s * s < std::ldexp(big * big, -m->fraction_bits))) continue;  // s*s not truncated away
    struct Case {
      float c;
      std::vector<double> a, b;
    };
    const std::vector<Case> cases = {
        // a tiny C absorbed, the pair cancelling: exact error -C, rounded down (fp64: 0)
        {1e-30f, {big, s, -s}, {big, s, s}},
        {-1e-30f, {big, s, -s}, {big, s, s}},
        {1e-30f, {-big, s, -s}, {big, s, s}},
        // a tiny product absorbed by the pair: exact error +t^2 (fp64: 0)
        {0.0f, {big, -t, s, -s}, {big, t, s, s}},
        // the pair with a partly truncated product (a bit below the grid) beside it
        {3e-38f, {big, s, -s, 1.5 * big}, {big, s, s, s}},
    };
    for (const Case& cs : cases) {
      const int k = static_cast<int>(cs.a.size());
      std::vector<float> a(cs.a.begin(), cs.a.end()), b(cs.b.begin(), cs.b.end());
      std::vector<std::uint32_t> a_bits, b_bits;
      for (int i = 0; i < k; ++i) {
        a_bits.push_back(ref_encode(in, cs.a[static_cast<std::size_t>(i)]));
        b_bits.push_back(ref_encode(in, cs.b[static_cast<std::size_t>(i)]));
      }
      // (An fp16 C: 1e-30 and 3e-38 are below fp16's range; its least subnormal, 2^-24, instead.)
      const float c = f16 && cs.c != 0.0f ? std::copysign(std::ldexp(1.0f, -24), cs.c) : cs.c;
      const std::uint32_t c_bits = f16 ? ref_encode(kRefFp16, c) : std::bit_cast<std::uint32_t>(c);
      std::vector<RefStep> steps;
      (void)ref_dot(ref, in, c_bits, a_bits, b_bits, &steps);
      REQUIRE(steps.size() == 1);
      const ExpectedStep want = expected_step(steps[0], f16);
      CAPTURE(cs.c);
      CAPTURE(k);
      if (c != 0.0f || k == 4) {
        CHECK(want.sign != 0);  // the case is one where fp64 in term order reads 0
        ++absorbing_cases;
      }
      fb::DotTrace recorded;
      (void)fb::fused_dot(*m, c, a.data(), b.data(), k, &recorded);
      REQUIRE(recorded.steps.size() == 1);
      const fb::DotStepEvent& ev = recorded.steps[0];
      CHECK(same_double(ev.error, want.error));
      CHECK(same_double(ev.truncated_value, want.truncated));
      CHECK(same_double(ev.output_residue, want.residue));
      ExpectedTally expected;
      expected.add(steps[0], f16);
      fb::DotStepTally tally;
      fb::DotTrace tally_trace;
      tally_trace.tally_only = &tally;
      (void)fb::fused_dot(*m, c, a.data(), b.data(), k, &tally_trace);
      CHECK(tally.rounded_up == expected.up);
      CHECK(tally.rounded_down == expected.down);
      CHECK(same_double(tally.signed_error, expected.signed_error));
      for (const fb::DotIsa isa : {fb::DotIsa::portable, fb::DotIsa::avx2, fb::DotIsa::avx512}) {
        if (!fb::dot_isa_available(isa)) continue;
        CAPTURE(static_cast<int>(isa));
        float d = c;
        fb::DotStepTally lanes;
        fb::fused_dot_columns(*m, &d, a.data(), b.data(), 1, k, 1, &d, &lanes, nullptr, isa);
        CHECK(lanes.rounded_up == expected.up);
        CHECK(lanes.rounded_down == expected.down);
        CHECK(same_double(lanes.signed_error, expected.signed_error));
      }
    }
  }
  CHECK(absorbing_cases >= 20);
}

TEST_CASE("random steps: exact errors and directions in fused_dot's events and tally and fused_dot_columns' tally") {
  // Steps built to cancel and absorb: the step's largest product, then pairs x*y, -x*y,
  // products tiny beside it (far below its grid) and middling ones, and C zero, tiny or not.
  // Every lane's chain is checked step by step against the exact reference: the recorded
  // error (rounded once), truncated_value and output_residue, and the up/down counts and fp64
  // error sums of fused_dot's tally and of fused_dot_columns' tally on every instruction set.
  const std::pair<const char*, const char*> presets[] = {
      {"sm80", "bf16"},  {"sm90-wgmma", "bf16"},   {"sm90-wgmma", "fp16"}, {"sm90-wgmma", "e4m3"}, {"sm100", "bf16"},
      {"sm100", "e4m3"}, {"sm100-f16acc", "fp16"}, {"sm90-mma", "tf32"},   {"sm70", "fp16"}};
  const int trials = std::max(4, 60 / test_scale_divisor());
  constexpr int kLanes = 19;
  long long steps_checked = 0, nonzero_errors = 0, exactly_rounded = 0;
  int preset_index = 0;
  for (const auto& preset : presets) {
    const TallyPreset p = tally_preset(preset);
    CAPTURE(p.name);
    CAPTURE(p.input_name);
    const fb::TensorCoreModel* m = p.model;
    const RefFormat& in = *p.input;
    const bool f16 = p.fp16_output;
    const RefFormat& acc = f16 ? kRefFp16 : kRefFp32;
    const RefModel ref{m->products_per_step, m->fraction_bits, m->output};
    Gen g(0x7a11u + static_cast<std::uint64_t>(++preset_index) * 131u);
    const int mid = in.bias;
    const int field_max = (1 << in.ebits) - 2;
    int failures = 0;
    for (int trial = 0; trial < trials && failures < 5; ++trial) {
      const int per_step = m->products_per_step;
      const int k = per_step * g.range(1, 3) - g.range(0, per_step / 2);
      std::vector<std::uint32_t> a(static_cast<std::size_t>(k));
      std::vector<std::vector<std::uint32_t>> columns(kLanes, std::vector<std::uint32_t>(static_cast<std::size_t>(k)));
      auto sign_flipped = [&](std::uint32_t x) { return x ^ ((1u << (in.ebits + in.mbits)) << in.shift); };
      for (int i = 0; i < k; ++i) {
        const auto ui = static_cast<std::size_t>(i);
        const int kind = i % per_step == 0 ? 0 : g.range(0, 3);
        if (kind == 1 && i + 1 < k && (i + 1) % per_step != 0) {  // a pair x*y, -x*y
          a[ui] = g.value(in, 1, mid - 2);
          a[ui + 1] = sign_flipped(a[ui]);
          for (auto& col : columns) col[ui] = col[ui + 1] = g.value(in, 1, mid + 1);
          ++i;
          continue;
        }
        // 0: the step's largest; 2: tiny (the lowest exponents); 3: middling
        a[ui] = kind == 0 ? g.value(in, mid, std::min(mid + 3, field_max))
                          : (kind == 2 ? g.value(in, 0, 2) : g.value(in, mid - 12, mid));
        for (auto& col : columns)
          col[ui] = kind == 0 ? g.value(in, mid, std::min(mid + 3, field_max))
                              : (kind == 2 ? g.value(in, 0, 3) : g.value(in, 1, mid));
      }
      std::vector<std::uint32_t> c_bits(kLanes);
      for (auto& cb : c_bits) {
        switch (g.range(0, 3)) {
          case 0:
            cb = 0;
            break;
          case 1:  // tiny
            cb = g.value(acc, 0, 20);
            break;
          default:
            cb = g.value(acc, acc.bias - 20, acc.bias + 3);
        }
      }
      std::vector<float> af(static_cast<std::size_t>(k)), panel(static_cast<std::size_t>(k) * kLanes), cd(kLanes);
      for (int i = 0; i < k; ++i) {
        af[static_cast<std::size_t>(i)] = ref_float(in, a[static_cast<std::size_t>(i)]);
        for (int l = 0; l < kLanes; ++l)
          panel[static_cast<std::size_t>(i) * kLanes + static_cast<std::size_t>(l)] =
              ref_float(in, columns[static_cast<std::size_t>(l)][static_cast<std::size_t>(i)]);
      }
      for (int l = 0; l < kLanes; ++l)
        cd[static_cast<std::size_t>(l)] = ref_float(acc, c_bits[static_cast<std::size_t>(l)]);

      ExpectedTally expected;
      double events_error_sum = 0.0;  // the recorded errors (each checked above), summed as a tally sums them
      fb::DotStepTally tally;
      fb::DotTrace tally_trace;
      tally_trace.tally_only = &tally;
      std::vector<float> column(static_cast<std::size_t>(k));
      for (int l = 0; l < kLanes; ++l) {
        std::vector<RefStep> steps;
        (void)ref_dot(ref, in, c_bits[static_cast<std::size_t>(l)], a, columns[static_cast<std::size_t>(l)], &steps);
        for (int i = 0; i < k; ++i)
          column[static_cast<std::size_t>(i)] =
              panel[static_cast<std::size_t>(i) * kLanes + static_cast<std::size_t>(l)];
        fb::DotTrace recorded;
        (void)fb::fused_dot(*m, cd[static_cast<std::size_t>(l)], af.data(), column.data(), k, &recorded);
        (void)fb::fused_dot(*m, cd[static_cast<std::size_t>(l)], af.data(), column.data(), k, &tally_trace);
        REQUIRE(recorded.steps.size() == steps.size());
        for (std::size_t s = 0; s < steps.size(); ++s) {
          expected.add(steps[s], f16);
          if (steps[s].special) continue;
          const ExpectedStep want = expected_step(steps[s], f16);
          const fb::DotStepEvent& ev = recorded.steps[s];
          ++steps_checked;
          nonzero_errors += want.sign != 0 ? 1 : 0;
          events_error_sum += ev.error;
          const bool ok = error_as_promised(steps[s], want, ev.error, m->products_per_step) &&
                          same_double(ev.truncated_value, want.truncated) &&
                          same_double(ev.output_residue, want.residue);
          exactly_rounded += same_double(ev.error, want.error) ? 1 : 0;
          if (!ok && ++failures <= 5)
            FAIL_CHECK(
                "lane " << l << " step " << s << " "
                        << describe_case(c_bits[static_cast<std::size_t>(l)], a, columns[static_cast<std::size_t>(l)])
                        << ": error " << ev.error << " want " << want.error << ", truncated " << ev.truncated_value
                        << " want " << want.truncated << ", residue " << ev.output_residue << " want " << want.residue);
        }
      }
      CHECK(tally.rounded_up == expected.up);
      CHECK(tally.rounded_down == expected.down);
      CHECK(same_double(tally.signed_error, events_error_sum));
      for (const fb::DotIsa isa : {fb::DotIsa::portable, fb::DotIsa::avx2, fb::DotIsa::avx512}) {
        if (!fb::dot_isa_available(isa)) continue;
        CAPTURE(static_cast<int>(isa));
        std::vector<float> d = cd;
        fb::DotStepTally lanes;
        fb::fused_dot_columns(*m, d.data(), af.data(), panel.data(), kLanes, k, kLanes, d.data(), &lanes, nullptr, isa);
        CHECK(lanes.rounded_up == expected.up);
        CHECK(lanes.rounded_down == expected.down);
        CHECK(same_double(lanes.signed_error, events_error_sum));
      }
    }
  }
  MESSAGE(steps_checked << " steps checked, " << nonzero_errors << " with a non-zero error, " << exactly_rounded
                        << " with the error rounded once");
  CHECK(steps_checked > 1000 / test_scale_divisor());
}
