// emu/summation.cpp: summation orders through emu/ops.hpp, and the exact accumulator.
#include "emu/summation.hpp"

#include <bit>
#include <cstring>

#include "emu/ops.hpp"

namespace fb {
namespace {

Rounded empty_sum(const Format& f) {
  if (!f.has_zero()) return {pack_nan(f), flag::invalid};
  return {pack_zero(f, false), 0};
}

struct FloatParts {
  bool negative;
  bool special;               // inf or NaN
  std::uint32_t significand;  // integer, implicit bit included for normals
  int lsb_exponent;           // value = significand * 2^lsb_exponent
};
FloatParts float_parts(float x) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  constexpr const Format& fp32 = formats::fp32;
  constexpr int kSubnormalLsb = fp32.emin() - fp32.man_bits;  // -149
  const std::uint32_t e = (u >> fp32.man_bits) & fp32.exp_field_max();
  FloatParts p{(u & fp32.sign_mask()) != 0, e == fp32.exp_field_max(), u & fp32.man_mask(), kSubnormalLsb};
  if (e != 0) {
    p.significand |= std::uint32_t{1} << fp32.man_bits;
    p.lsb_exponent = static_cast<int>(e) - fp32.bias - fp32.man_bits;
  }
  return p;
}

}  // namespace

Rounded sum_sequential(const Format& f, std::span<const std::uint32_t> x, const RoundingSpec& spec,
                       std::uint64_t position) {
  if (x.empty()) return empty_sum(f);
  Rounded s{x[0], 0};
  for (std::size_t i = 1; i < x.size(); ++i) {
    const Rounded r = add(f, s.bits, x[i], spec, position + i);
    s = {r.bits, static_cast<Flags>(s.flags | r.flags)};
  }
  return s;
}

Rounded sum_pairwise(const Format& f, std::span<const std::uint32_t> x, const RoundingSpec& spec,
                     std::uint64_t position) {
  if (x.empty()) return empty_sum(f);
  return pairwise_reduce(
      0, x.size(),
      [&](std::size_t i) {
        return Rounded{x[i], 0};
      },
      [&](const Rounded& left, const Rounded& right, std::size_t split) {
        const Rounded joined = add(f, left.bits, right.bits, spec, position + split);
        return Rounded{joined.bits, static_cast<Flags>(left.flags | right.flags | joined.flags)};
      });
}

Rounded sum_kahan(const Format& f, std::span<const std::uint32_t> x, const RoundingSpec& spec, std::uint64_t position) {
  if (x.empty()) return empty_sum(f);
  std::uint32_t s = x[0];
  std::uint32_t c = pack_zero(f, false);
  Flags flags = 0;
  for (std::size_t i = 1; i < x.size(); ++i) {
    const std::uint64_t p = position + 4 * i;
    const Rounded y = sub(f, x[i], c, spec, p);
    const Rounded t = add(f, s, y.bits, spec, p + 1);
    const Rounded d = sub(f, t.bits, s, spec, p + 2);
    const Rounded cn = sub(f, d.bits, y.bits, spec, p + 3);
    flags |= y.flags | t.flags | d.flags | cn.flags;
    s = t.bits;
    c = cn.bits;
  }
  return {s, flags};
}

Rounded dot_fma_chain(const Format& f, std::uint32_t c, std::span<const std::uint32_t> a,
                      std::span<const std::uint32_t> b, const RoundingSpec& spec, std::uint64_t position) {
  Rounded s{c, 0};
  const std::size_t n = a.size() < b.size() ? a.size() : b.size();
  for (std::size_t i = 0; i < n; ++i) {
    const Rounded r = fma(f, a[i], b[i], s.bits, spec, position + i);
    s = {r.bits, static_cast<Flags>(s.flags | r.flags)};
  }
  return s;
}

// ---- ExactAccumulator -------------------------------------------------------------

void ExactAccumulator::note_zero_term(bool negative) {
  any_term_ = true;
  (negative ? all_positive_zero_ : all_negative_zero_) = false;
}

void ExactAccumulator::add_infinity(bool negative) {
  any_term_ = true;
  all_negative_zero_ = all_positive_zero_ = false;
  (negative ? has_neg_inf_ : has_pos_inf_) = true;
}

void ExactAccumulator::add_scaled(bool negative, std::uint64_t magnitude, int lsb_exponent) {
  if (magnitude == 0) {
    note_zero_term(negative);
    return;
  }
  any_term_ = true;
  all_negative_zero_ = all_positive_zero_ = false;
  const int index = lsb_exponent - kLsbExponent;
  const int limb = index / 64, offset = index % 64;
  const std::uint64_t lo = magnitude << offset;
  const std::uint64_t hi = offset ? magnitude >> (64 - offset) : 0;
  if (!negative) {
    std::uint64_t before = limb_[limb];
    limb_[limb] += lo;
    std::uint64_t carry = limb_[limb] < before ? 1 : 0;
    before = limb_[limb + 1];
    limb_[limb + 1] += hi + carry;  // hi < 2^63, no wrap from the addend itself
    carry = limb_[limb + 1] < before || (carry && limb_[limb + 1] == before) ? 1 : 0;
    for (int i = limb + 2; carry && i < kLimbs; ++i) carry = ++limb_[i] == 0 ? 1 : 0;
  } else {
    std::uint64_t before = limb_[limb];
    limb_[limb] -= lo;
    std::uint64_t borrow = limb_[limb] > before ? 1 : 0;
    before = limb_[limb + 1];
    limb_[limb + 1] -= hi + borrow;
    borrow = limb_[limb + 1] > before || (borrow && limb_[limb + 1] == before) ? 1 : 0;
    for (int i = limb + 2; borrow && i < kLimbs; ++i) borrow = limb_[i]-- == 0 ? 1 : 0;
  }
}

void ExactAccumulator::add(const Format& f, std::uint32_t bits) {
  const Decoded d = decode(f, bits);
  switch (d.cls) {
    case ValueClass::nan:
      has_nan_ = true;
      any_term_ = true;
      return;
    case ValueClass::infinite:
      add_infinity(d.negative);
      return;
    case ValueClass::zero:
      note_zero_term(d.negative);
      return;
    default:
      add_scaled(d.negative, d.significand, d.exponent - f.man_bits);
      return;
  }
}

void ExactAccumulator::add_product(const Format& fa, std::uint32_t a, const Format& fb, std::uint32_t b) {
  const Decoded x = decode(fa, a), y = decode(fb, b);
  const bool negative = x.negative != y.negative;
  if (x.cls == ValueClass::nan || y.cls == ValueClass::nan) {
    has_nan_ = true, any_term_ = true;
    return;
  }
  const bool x_inf = x.cls == ValueClass::infinite, y_inf = y.cls == ValueClass::infinite;
  const bool x_zero = x.cls == ValueClass::zero, y_zero = y.cls == ValueClass::zero;
  if (x_inf || y_inf) {
    if (x_zero || y_zero) {
      has_nan_ = invalid_ = true, any_term_ = true;
      return;
    }
    add_infinity(negative);
    return;
  }
  if (x_zero || y_zero) {
    note_zero_term(negative);
    return;
  }
  add_scaled(negative, std::uint64_t{x.significand} * y.significand,
             (x.exponent - fa.man_bits) + (y.exponent - fb.man_bits));
}

void ExactAccumulator::add(float x) { add(formats::fp32, std::bit_cast<std::uint32_t>(x)); }

void ExactAccumulator::add_product(float a, float b) {
  const FloatParts x = float_parts(a), y = float_parts(b);
  if (!x.special && !y.special && x.significand != 0 && y.significand != 0) {
    add_scaled(x.negative != y.negative, std::uint64_t{x.significand} * y.significand, x.lsb_exponent + y.lsb_exponent);
    return;
  }
  add_product(formats::fp32, std::bit_cast<std::uint32_t>(a), formats::fp32, std::bit_cast<std::uint32_t>(b));
}

bool ExactAccumulator::is_zero() const {
  for (std::uint64_t l : limb_) {
    if (l != 0) return false;
  }
  return true;
}

namespace {
// Magnitude of a two's complement limb array, in place; returns the sign.
template <int N>
bool take_magnitude(std::uint64_t (&m)[N]) {
  const bool negative = (m[N - 1] >> 63) != 0;
  if (negative) {
    std::uint64_t carry = 1;
    for (int i = 0; i < N; ++i) {
      m[i] = ~m[i] + carry;
      carry = (carry && m[i] == 0) ? 1 : 0;
    }
  }
  return negative;
}
template <int N>
int leading_bit_index(const std::uint64_t (&m)[N]) {
  for (int i = N - 1; i >= 0; --i) {
    if (m[i] != 0) return 64 * i + 63 - std::countl_zero(m[i]);
  }
  return -1;
}
}  // namespace

int ExactAccumulator::leading_exponent() const {
  std::uint64_t m[kLimbs];
  std::memcpy(m, limb_, sizeof m);
  take_magnitude(m);
  return leading_bit_index(m) + kLsbExponent;
}

Rounded ExactAccumulator::round(const Format& out, const RoundingSpec& spec, std::uint64_t position,
                                RoundingEvent* event) const {
  if (has_nan_ || (has_pos_inf_ && has_neg_inf_)) {
    const Flags flags = (invalid_ || (has_pos_inf_ && has_neg_inf_)) ? flag::invalid : 0;
    if (!out.has_nan()) return {pack_zero(out, false), flag::invalid};
    return {pack_nan(out), flags};
  }
  if (has_pos_inf_ || has_neg_inf_) {
    const Flags extra = out.has_inf() ? 0 : static_cast<Flags>(flag::overflow | flag::inexact);
    return {pack_infinite(out, has_neg_inf_, spec.overflow), extra};
  }
  std::uint64_t m[kLimbs];
  std::memcpy(m, limb_, sizeof m);
  const bool negative = take_magnitude(m);
  const int lead = leading_bit_index(m);
  if (lead < 0) {
    if (!out.has_zero()) return {pack_nan(out), flag::invalid};
    const bool negative_zero = (any_term_ && all_negative_zero_) ||
                               (!all_positive_zero_ && !all_negative_zero_ && spec.mode == RoundingMode::rdn);
    return {pack_zero(out, negative_zero), 0};
  }
  // Take the 64 bits from the leading one down; everything below is the sticky bit.
  std::uint64_t significand;
  int exponent;
  bool sticky = false;
  if (lead < 64) {
    significand = m[0];
    exponent = kLsbExponent;
  } else {
    const int start = lead - 63;
    const int limb = start / 64, offset = start % 64;
    significand = m[limb] >> offset;
    if (offset) significand |= m[limb + 1] << (64 - offset);
    exponent = kLsbExponent + start;
    if (offset && (m[limb] << (64 - offset)) != 0) sticky = true;
    for (int i = 0; i < limb && !sticky; ++i) sticky = m[i] != 0;
  }
  return round_pack(out, negative, exponent, significand, sticky, spec, position, event);
}

}  // namespace fb
