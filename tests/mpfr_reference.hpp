// tests/mpfr_reference.hpp: an independent, slow reference for every scalar operation
// and conversion of the emulator (emu/ops.hpp), used by tests/test_ops_mpfr.cpp.
//
// Contract: nothing here calls emu/ or formats/. The format facts are written again
// from the docs/DESIGN.md §2 table, operands are decoded here, the exact result of an
// operation comes from MPFR, and the final rounding into the target format (every
// mode except sr, both overflow policies) and the encoding of the result bits are
// done here in plain integer code, one decision per line of the spec:
// - MPFR computes each result at 64 bits, rounding toward zero; the ternary value
//   says whether anything was cut off. Truncation to 64 bits plus a sticky bit keeps
//   the round bit and the sticky bit of any rounding to fewer than 63 bits, so the
//   final rounding to p <= 24 bits sees the exact value's bits.
// - Edge rules (docs/DESIGN.md §2 and the contract comments of emu/rounding.hpp and
//   emu/ops.hpp): a NaN operand gives NaN and no flag; 0*inf, inf-inf, 0/0,
//   sqrt(<0) give NaN with invalid; x/0 gives inf with divbyzero; an exact zero sum
//   of opposite-signed terms is +0, -0 under rdn; fnuz formats have only +0;
//   formats without NaN give +0 with invalid where NaN is due; e8m0 has no zero and
//   no sign (zero or negative results give NaN with invalid, values below 2^-127
//   give 2^-127, inexact, with underflow when tiny after rounding); tininess is
//   detected after rounding; overflow and inexact are raised whenever the value rounded with unbounded
//   exponent range exceeds max finite, also when the result saturates; an infinite
//   result in a format without inf is an overflow, packed by the policy whatever
//   the mode (NaN under ieee, max finite under satfinite and in fp6/fp4); under
//   satfinite an infinite result is max finite in every format, as NVIDIA's
//   satfinite conversions do, with the same flags as under ieee.
// - Reading where the spec is silent (chosen here, see the test report): -inf
//   converted to unsigned e8m0 is a negative value, so NaN with invalid.
// - Any NaN encoding is an acceptable result: Result::is_nan marks it and the
//   comparison must accept any NaN of the format.
//
// One MpfrExact object per thread: it owns MPFR scratch variables and never
// touches MPFR's global state (no default precision, no exponent range).
#pragma once

#include <gmp.h>
#include <mpfr.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>

namespace fbref {

// ---- format facts, from the docs/DESIGN.md §2 table ------------------------------
enum class Specials : std::uint8_t {
  ieee,    // exp all ones: inf (man 0) or NaN
  fn,      // OCP E4M3: only S.1111.111 is NaN, no inf
  fnuz,    // 1000...0 is the only NaN, no -0, no inf
  finite,  // OCP FP6/FP4: no inf, no NaN
  scale,   // e8m0: unsigned, no zero, no subnormals, 0xFF is NaN
};

struct RefFormat {
  const char* name;
  int exp_bits;
  int man_bits;
  int bias;
  Specials specials;
  bool is_signed;
  int container_bits;  // the stored word: 8, 16 or 32 bits
  bool left_aligned;   // tf32 lives in the top 19 bits of its word; fp6/fp4 in the low bits

  int width() const { return (is_signed ? 1 : 0) + exp_bits + man_bits; }
  int container_shift() const { return left_aligned ? container_bits - width() : 0; }
  std::uint64_t pattern_count() const { return std::uint64_t{1} << width(); }
  std::uint32_t exp_ones() const { return (1u << exp_bits) - 1u; }
  std::uint32_t man_ones() const { return (1u << man_bits) - 1u; }
  std::uint32_t sign_bit() const { return is_signed ? 1u << (exp_bits + man_bits) : 0u; }
  int precision() const { return man_bits + 1; }
  bool has_inf() const { return specials == Specials::ieee; }
  bool has_nan() const { return specials != Specials::finite; }
  bool has_zero() const { return specials != Specials::scale; }
  bool has_negative_zero() const { return is_signed && specials != Specials::fnuz && specials != Specials::scale; }
  // Unbiased exponent of the smallest normal; e8m0 uses the biased-zero code as 2^-127.
  int emin() const { return specials == Specials::scale ? -bias : 1 - bias; }
  std::uint32_t top_finite_exp_field() const {
    return (specials == Specials::ieee || specials == Specials::scale) ? exp_ones() - 1u : exp_ones();
  }
  int emax() const { return static_cast<int>(top_finite_exp_field()) - bias; }
  // Significand (implicit bit included) of max finite: E4M3 loses its top code to NaN.
  std::uint64_t max_significand() const {
    const std::uint64_t all = (std::uint64_t{1} << precision()) - 1u;
    return specials == Specials::fn ? all - 1u : all;
  }
  std::uint32_t to_container(std::uint32_t layout) const { return layout << container_shift(); }
  std::uint32_t to_layout(std::uint32_t stored) const {
    const std::uint32_t mask = width() >= 32 ? 0xffffffffu : (1u << width()) - 1u;
    return (stored >> container_shift()) & mask;
  }
};

namespace table {
inline constexpr RefFormat fp32{"fp32", 8, 23, 127, Specials::ieee, true, 32, false};
inline constexpr RefFormat tf32{"tf32", 8, 10, 127, Specials::ieee, true, 32, true};
inline constexpr RefFormat bf16{"bf16", 8, 7, 127, Specials::ieee, true, 16, false};
inline constexpr RefFormat fp16{"fp16", 5, 10, 15, Specials::ieee, true, 16, false};
inline constexpr RefFormat e4m3{"e4m3", 4, 3, 7, Specials::fn, true, 8, false};
inline constexpr RefFormat e5m2{"e5m2", 5, 2, 15, Specials::ieee, true, 8, false};
inline constexpr RefFormat e4m3fnuz{"e4m3fnuz", 4, 3, 8, Specials::fnuz, true, 8, false};
inline constexpr RefFormat e5m2fnuz{"e5m2fnuz", 5, 2, 16, Specials::fnuz, true, 8, false};
inline constexpr RefFormat e3m2{"e3m2", 3, 2, 3, Specials::finite, true, 8, false};
inline constexpr RefFormat e2m3{"e2m3", 2, 3, 1, Specials::finite, true, 8, false};
inline constexpr RefFormat e2m1{"e2m1", 2, 1, 1, Specials::finite, true, 8, false};
inline constexpr RefFormat e8m0{"e8m0", 8, 0, 127, Specials::scale, false, 8, false};
// Custom eXmY: IEEE-style, bias 2^(X-1)-1, smallest container of 8/16/32 bits.
inline constexpr RefFormat e3m4{"e3m4", 3, 4, 3, Specials::ieee, true, 8, false};
inline constexpr RefFormat e2m2{"e2m2", 2, 2, 1, Specials::ieee, true, 8, false};
inline constexpr RefFormat e6m9{"e6m9", 6, 9, 31, Specials::ieee, true, 16, false};
}  // namespace table

// ---- modes and flags ----------------------------------------------------------
enum class Mode : std::uint8_t { rne, rna, rtz, rup, rdn, rto };
enum class Policy : std::uint8_t { ieee, satfinite };
inline constexpr Mode kModes[] = {Mode::rne, Mode::rna, Mode::rtz, Mode::rup, Mode::rdn, Mode::rto};
inline constexpr Policy kPolicies[] = {Policy::ieee, Policy::satfinite};
inline const char* name_of(Mode m) {
  static const char* const names[] = {"rne", "rna", "rtz", "rup", "rdn", "rto"};
  return names[static_cast<int>(m)];
}
inline const char* name_of(Policy p) { return p == Policy::ieee ? "ieee" : "satfinite"; }

// The IEEE flags as the CLI letters x u o z v, one bit each in that order.
using RefFlags = std::uint8_t;
inline constexpr RefFlags kInexact = 1, kUnderflow = 2, kOverflow = 4, kDivByZero = 8, kInvalid = 16;

// ---- decoding -------------------------------------------------------------------
enum class Class : std::uint8_t { nan, inf, zero, finite };

// A decoded operand: finite values are (-1)^negative * significand * 2^exponent.
struct RefValue {
  Class cls;
  bool negative;
  std::uint64_t significand;
  int exponent;
};

inline RefValue decode(const RefFormat& f, std::uint32_t stored) {
  const std::uint32_t bits = f.to_layout(stored);
  const bool neg = (bits & f.sign_bit()) != 0;
  const std::uint32_t ef = (bits >> f.man_bits) & f.exp_ones();
  const std::uint32_t mf = bits & f.man_ones();
  switch (f.specials) {
    case Specials::ieee:
      if (ef == f.exp_ones()) return {mf == 0 ? Class::inf : Class::nan, neg, 0, 0};
      break;
    case Specials::fn:
      if (ef == f.exp_ones() && mf == f.man_ones()) return {Class::nan, neg, 0, 0};
      break;
    case Specials::fnuz:
      if (neg && ef == 0 && mf == 0) return {Class::nan, neg, 0, 0};
      break;
    case Specials::scale:
      if (ef == f.exp_ones()) return {Class::nan, false, 0, 0};
      return {Class::finite, false, 1, static_cast<int>(ef) - f.bias};
    case Specials::finite:
      break;
  }
  if (ef == 0) {
    if (mf == 0) return {Class::zero, neg, 0, 0};
    return {Class::finite, neg, mf, f.emin() - f.man_bits};
  }
  return {Class::finite, neg, mf | (std::uint64_t{1} << f.man_bits), static_cast<int>(ef) - f.bias - f.man_bits};
}

inline double to_double(const RefValue& v) {
  switch (v.cls) {
    case Class::nan:
      return std::nan("");
    case Class::inf:
      return v.negative ? -HUGE_VAL : HUGE_VAL;
    case Class::zero:
      return v.negative ? -0.0 : 0.0;
    case Class::finite:
      break;
  }
  const double m = std::ldexp(static_cast<double>(v.significand), v.exponent);
  return v.negative ? -m : m;
}

// ---- exact results -------------------------------------------------------------
// The exact result of an operation before rounding. For finite values the magnitude
// is (significand + s) * 2^exponent with 0 < s < 1 when sticky, s = 0 otherwise.
struct Exact {
  Class cls = Class::nan;
  bool negative = false;
  bool opposite_sign_zero = false;  // zero sum of opposite-signed terms: sign set by mode
  RefFlags flags = 0;               // invalid, divbyzero
  std::uint64_t significand = 0;
  int exponent = 0;
  bool sticky = false;
};

inline Exact exact_nan(RefFlags flags) {
  Exact e;
  e.cls = Class::nan;
  e.flags = flags;
  return e;
}
inline Exact exact_inf(bool negative, RefFlags flags = 0) {
  Exact e;
  e.cls = Class::inf;
  e.negative = negative;
  e.flags = flags;
  return e;
}
inline Exact exact_zero(bool negative) {
  Exact e;
  e.cls = Class::zero;
  e.negative = negative;
  return e;
}
// IEEE sign of an exact zero sum: shared sign of the terms, else decided by the mode.
inline Exact exact_zero_sum(bool first_negative, bool second_negative) {
  Exact e = exact_zero(first_negative);
  e.opposite_sign_zero = first_negative != second_negative;
  return e;
}
inline Exact exact_of(const RefValue& v) {
  switch (v.cls) {
    case Class::nan:
      return exact_nan(0);
    case Class::inf:
      return exact_inf(v.negative);
    case Class::zero:
      return exact_zero(v.negative);
    case Class::finite:
      break;
  }
  Exact e;
  e.cls = Class::finite;
  e.negative = v.negative;
  e.significand = v.significand;
  e.exponent = v.exponent;
  return e;
}
// An exact double (test generators use it to build neighbours of boundaries).
inline Exact exact_of_double(double x) {
  if (std::isnan(x)) return exact_nan(0);
  if (std::isinf(x)) return exact_inf(std::signbit(x));
  if (x == 0.0) return exact_zero(std::signbit(x));
  int e = 0;
  const double frac = std::frexp(std::fabs(x), &e);
  Exact r;
  r.cls = Class::finite;
  r.negative = std::signbit(x);
  r.significand = static_cast<std::uint64_t>(std::ldexp(frac, 53));
  r.exponent = e - 53;
  return r;
}

// ---- rounding into a format ----------------------------------------------------
struct Result {
  std::uint32_t bits;  // in the container
  RefFlags flags;
  bool is_nan;  // any NaN encoding of the format is then acceptable
};

namespace detail {

inline std::uint32_t encode(const RefFormat& f, bool negative, std::uint32_t exp_field, std::uint32_t man_field) {
  return f.to_container((negative ? f.sign_bit() : 0u) | (exp_field << f.man_bits) | man_field);
}
inline Result nan_result(const RefFormat& f, RefFlags flags) {
  if (!f.has_nan()) return {encode(f, false, 0, 0), static_cast<RefFlags>(flags | kInvalid), false};
  std::uint32_t layout = 0;
  switch (f.specials) {
    case Specials::ieee:
      layout = (f.exp_ones() << f.man_bits) | (1u << (f.man_bits - 1));
      break;
    case Specials::fn:
      layout = (f.exp_ones() << f.man_bits) | f.man_ones();
      break;
    case Specials::fnuz:
      layout = f.sign_bit();
      break;
    case Specials::scale:
      layout = f.exp_ones();
      break;
    case Specials::finite:
      break;
  }
  return {f.to_container(layout), flags, true};
}
inline Result zero_result(const RefFormat& f, bool negative, RefFlags flags) {
  if (!f.has_zero()) return nan_result(f, static_cast<RefFlags>(flags | kInvalid));
  return {encode(f, negative && f.has_negative_zero(), 0, 0), flags, false};
}
inline Result max_finite_result(const RefFormat& f, bool negative, RefFlags flags) {
  const std::uint32_t man = static_cast<std::uint32_t>(f.max_significand()) & f.man_ones();
  return {encode(f, negative, f.top_finite_exp_field(), man), flags, false};
}
// What an exact infinite value becomes. The flags do not depend on the policy: a
// format with inf holds it exactly, one without inf overflows. The policy only
// picks the packing: satfinite (like __NV_SATFINITE and cvt.satfinite, whose
// results are always finite) and fp6/fp4 give max finite, ieee gives inf or NaN.
inline Result infinite_result(const RefFormat& f, bool negative, Policy policy, RefFlags flags) {
  if (negative && !f.is_signed) return nan_result(f, static_cast<RefFlags>(flags | kInvalid));
  if (!f.has_inf()) flags = static_cast<RefFlags>(flags | kOverflow | kInexact);
  if (policy == Policy::satfinite || f.specials == Specials::finite) return max_finite_result(f, negative, flags);
  if (f.has_inf()) return {encode(f, negative, f.exp_ones(), 0), flags, false};
  return nan_result(f, flags);
}

// Where the exact value lies between two neighbours on a grid.
enum class Fraction : std::uint8_t { exact, below_half, half, above_half };

struct OnGrid {
  std::uint64_t integer;  // the exact value divided by the quantum, rounded
  bool inexact;
};

// Round (significand + s) * 2^exponent to an integer multiple of 2^quantum.
inline OnGrid round_to_quantum(std::uint64_t significand, int exponent, bool sticky, int quantum, Mode mode,
                               bool negative) {
  const int shift = quantum - exponent;
  if (shift <= 0) {
    // The quantum is finer than the value's last bit: exact (a sticky value always
    // has 64 significant bits, so this never happens with sticky set).
    if (sticky) std::abort();
    return {significand << -shift, false};
  }
  std::uint64_t integer = 0;
  Fraction fraction;
  if (shift >= 65) {
    fraction = Fraction::below_half;  // significand < 2^64 <= half the quantum
  } else {
    std::uint64_t rest, half;
    if (shift == 64) {
      rest = significand;
      half = std::uint64_t{1} << 63;
    } else {
      integer = significand >> shift;
      rest = significand & ((std::uint64_t{1} << shift) - 1u);
      half = std::uint64_t{1} << (shift - 1);
    }
    if (rest > half || (rest == half && sticky)) {
      fraction = Fraction::above_half;
    } else if (rest == half) {
      fraction = Fraction::half;
    } else if (rest != 0 || sticky) {
      fraction = Fraction::below_half;
    } else {
      fraction = Fraction::exact;
    }
  }
  if (fraction == Fraction::exact) return {integer, false};
  bool up = false;
  switch (mode) {
    case Mode::rne:
      up = fraction == Fraction::above_half || (fraction == Fraction::half && (integer & 1u) != 0);
      break;
    case Mode::rna:
      up = fraction != Fraction::below_half;
      break;
    case Mode::rtz:
      up = false;
      break;
    case Mode::rup:
      up = !negative;
      break;
    case Mode::rdn:
      up = negative;
      break;
    case Mode::rto:
      up = (integer & 1u) == 0;
      break;  // land on the odd neighbour
  }
  return {integer + (up ? 1u : 0u), true};
}

}  // namespace detail

// Round an exact result into `f` in `mode` under `policy`, with all flags.
inline Result round_to(const RefFormat& f, const Exact& v, Mode mode, Policy policy) {
  using namespace detail;
  switch (v.cls) {
    case Class::nan:
      return nan_result(f, v.flags);
    case Class::inf:
      return infinite_result(f, v.negative, policy, v.flags);
    case Class::zero:
      return zero_result(f, v.opposite_sign_zero ? mode == Mode::rdn : v.negative, v.flags);
    case Class::finite:
      break;
  }
  const bool neg = v.negative;
  if (neg && !f.is_signed) return nan_result(f, static_cast<RefFlags>(v.flags | kInvalid));
  const int length = 64 - std::countl_zero(v.significand);
  const int e = v.exponent + length - 1;  // the value lies in [2^e, 2^(e+1))
  const int emin = f.emin();
  // Tininess after rounding: round to p bits with no lower exponent bound and see
  // whether the result still lies below 2^emin.
  const auto tiny_after_rounding = [&] {
    const OnGrid unbounded = round_to_quantum(v.significand, v.exponent, v.sticky, e - f.man_bits, mode, neg);
    const int rounded_e = unbounded.integer >> f.precision() ? e + 1 : e;
    return rounded_e < emin;
  };
  if (e < emin && f.specials == Specials::scale) {
    // Pinned to 2^-127: never exact, underflow only when tiny after rounding.
    const RefFlags tiny = tiny_after_rounding() ? kUnderflow : 0;
    return {encode(f, false, 0, 0), static_cast<RefFlags>(v.flags | kInexact | tiny), false};
  }
  const int quantum = std::max(e, emin) - f.man_bits;
  OnGrid r = round_to_quantum(v.significand, v.exponent, v.sticky, quantum, mode, neg);
  RefFlags flags = static_cast<RefFlags>(v.flags | (r.inexact ? kInexact : 0));

  if (e < emin && r.inexact && tiny_after_rounding()) flags |= kUnderflow;

  std::uint64_t significand = r.integer;
  int result_e = std::max(e, emin);
  if (significand >> f.precision()) {  // rounding carried into the next binade
    significand >>= 1;
    result_e += 1;
  }
  const bool normal = (significand >> f.man_bits) != 0;
  if (normal && (result_e > f.emax() || (result_e == f.emax() && significand > f.max_significand()))) {
    flags |= kOverflow | kInexact;
    const bool towards_infinity =
        mode == Mode::rne || mode == Mode::rna || (mode == Mode::rup && !neg) || (mode == Mode::rdn && neg);
    if (towards_infinity && policy == Policy::ieee && f.specials != Specials::finite) {
      return f.has_inf() ? Result{encode(f, neg, f.exp_ones(), 0), flags, false} : nan_result(f, flags);
    }
    return max_finite_result(f, neg, flags);
  }
  if (significand == 0) return zero_result(f, neg, flags);
  if (!normal) return {encode(f, neg, 0, static_cast<std::uint32_t>(significand)), flags, false};
  const auto exp_field = static_cast<std::uint32_t>(result_e + f.bias);
  return {encode(f, neg, exp_field, static_cast<std::uint32_t>(significand) & f.man_ones()), flags, false};
}

// ---- exact operations with MPFR ------------------------------------------------
class MpfrExact {
 public:
  MpfrExact() {
    mpfr_inits2(kPrecision, x_, y_, z_, r_, static_cast<mpfr_ptr>(nullptr));
    mpz_init(m_);
  }
  ~MpfrExact() {
    mpfr_clears(x_, y_, z_, r_, static_cast<mpfr_ptr>(nullptr));
    mpz_clear(m_);
  }
  MpfrExact(const MpfrExact&) = delete;
  MpfrExact& operator=(const MpfrExact&) = delete;

  Exact add(const RefFormat& f, std::uint32_t a, std::uint32_t b) { return sum(decode(f, a), decode(f, b)); }
  Exact sub(const RefFormat& f, std::uint32_t a, std::uint32_t b) {
    RefValue nb = decode(f, b);
    nb.negative = !nb.negative;
    return sum(decode(f, a), nb);
  }
  Exact mul(const RefFormat& f, std::uint32_t a, std::uint32_t b) {
    const RefValue va = decode(f, a), vb = decode(f, b);
    if (va.cls == Class::nan || vb.cls == Class::nan) return exact_nan(0);
    const bool neg = va.negative != vb.negative;
    if (va.cls == Class::inf || vb.cls == Class::inf) {
      if (va.cls == Class::zero || vb.cls == Class::zero) return exact_nan(kInvalid);
      return exact_inf(neg);
    }
    if (va.cls == Class::zero || vb.cls == Class::zero) return exact_zero(neg);
    load(x_, va);
    load(y_, vb);
    return result(mpfr_mul(r_, x_, y_, MPFR_RNDZ));
  }
  Exact div(const RefFormat& f, std::uint32_t a, std::uint32_t b) {
    const RefValue va = decode(f, a), vb = decode(f, b);
    if (va.cls == Class::nan || vb.cls == Class::nan) return exact_nan(0);
    const bool neg = va.negative != vb.negative;
    if (va.cls == Class::inf) return vb.cls == Class::inf ? exact_nan(kInvalid) : exact_inf(neg);
    if (vb.cls == Class::inf) return exact_zero(neg);
    if (vb.cls == Class::zero) return va.cls == Class::zero ? exact_nan(kInvalid) : exact_inf(neg, kDivByZero);
    if (va.cls == Class::zero) return exact_zero(neg);
    load(x_, va);
    load(y_, vb);
    return result(mpfr_div(r_, x_, y_, MPFR_RNDZ));
  }
  Exact fma(const RefFormat& f, std::uint32_t a, std::uint32_t b, std::uint32_t c) {
    const RefValue va = decode(f, a), vb = decode(f, b), vc = decode(f, c);
    if (va.cls == Class::nan || vb.cls == Class::nan || vc.cls == Class::nan) return exact_nan(0);
    const bool product_neg = va.negative != vb.negative;
    if (va.cls == Class::inf || vb.cls == Class::inf) {
      if (va.cls == Class::zero || vb.cls == Class::zero) return exact_nan(kInvalid);
      if (vc.cls == Class::inf && vc.negative != product_neg) return exact_nan(kInvalid);
      return exact_inf(product_neg);
    }
    if (vc.cls == Class::inf) return exact_inf(vc.negative);
    load(x_, va);
    load(y_, vb);
    load(z_, vc);
    const int ternary = mpfr_fma(r_, x_, y_, z_, MPFR_RNDZ);
    if (mpfr_zero_p(r_)) return exact_zero_sum(product_neg, vc.negative);
    return result(ternary);
  }
  Exact sqrt(const RefFormat& f, std::uint32_t a) {
    const RefValue va = decode(f, a);
    if (va.cls == Class::nan) return exact_nan(0);
    if (va.cls == Class::zero) return exact_zero(va.negative);
    if (va.negative) return exact_nan(kInvalid);
    if (va.cls == Class::inf) return exact_inf(false);
    load(x_, va);
    return result(mpfr_sqrt(r_, x_, MPFR_RNDZ));
  }
  // Conversion needs no arithmetic: the source value is exact.
  static Exact convert(const RefFormat& from, std::uint32_t a) { return exact_of(decode(from, a)); }

 private:
  static constexpr mpfr_prec_t kPrecision = 64;
  static_assert(sizeof(unsigned long) == 8, "significands are moved through unsigned long");

  Exact sum(const RefValue& va, const RefValue& vb) {
    if (va.cls == Class::nan || vb.cls == Class::nan) return exact_nan(0);
    if (va.cls == Class::inf || vb.cls == Class::inf) {
      if (va.cls == Class::inf && vb.cls == Class::inf && va.negative != vb.negative) return exact_nan(kInvalid);
      return exact_inf(va.cls == Class::inf ? va.negative : vb.negative);
    }
    load(x_, va);
    load(y_, vb);
    const int ternary = mpfr_add(r_, x_, y_, MPFR_RNDZ);
    if (mpfr_zero_p(r_)) return exact_zero_sum(va.negative, vb.negative);
    return result(ternary);
  }
  // Operands have at most 24 significant bits: exact at 64.
  static void load(mpfr_t dst, const RefValue& v) {
    if (v.cls == Class::zero) {
      mpfr_set_zero(dst, v.negative ? -1 : 1);
      return;
    }
    mpfr_set_ui_2exp(dst, static_cast<unsigned long>(v.significand), v.exponent, MPFR_RNDN);
    if (v.negative) mpfr_neg(dst, dst, MPFR_RNDN);
  }
  Exact result(int ternary) {
    Exact e;
    e.cls = Class::finite;
    e.negative = mpfr_signbit(r_) != 0;
    e.exponent = static_cast<int>(mpfr_get_z_2exp(m_, r_));
    mpz_abs(m_, m_);
    e.significand = mpz_get_ui(m_);
    e.sticky = ternary != 0;
    return e;
  }

  mpfr_t x_, y_, z_, r_;
  mpz_t m_;
};

}  // namespace fbref
