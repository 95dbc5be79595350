// emu/summation.hpp: summation and dot-product orders in a chosen format and mode,
// and an exact (Kulisch-style) reference accumulator (docs/DESIGN.md §4).
//
// Contract:
// - Values are bit patterns of one format `f`; every intermediate result is rounded
//   into `f` with `spec` by the scalar operations of emu/ops.hpp (add, sub, fma), so
//   each step is rounded exactly once (no double rounding through float/double).
// - The flags of the result are the OR of every step's flags.
// - Stochastic rounding: step number i (as documented per function) uses stream
//   position `position + i`, so results do not depend on evaluation order.
// - An empty sum is +0 (for e8m0, which has no zero, NaN with invalid as ops.hpp does).
// - ExactAccumulator holds the exact sum of values and products of values of any
//   formats of at most 32 bits (fp32 products included) and rounds it once through
//   round_pack. It is the reference for every accumulation model, and with RNE into
//   fp32 it is the `exact-rne` dot model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "emu/rounding.hpp"
#include "formats/format.hpp"

namespace fb {

// The pairwise order, in one place for every caller (sum_pairwise below, the attention
// engine's row sums and delta): elements [first, first + n), n >= 1, reduced by recursive
// halving at m = n / 2 (rounded down), down to single elements. leaf(i) gives element i;
// join(left, right, split) joins the two halves, `split` being the absolute index where the
// right half starts (unique per join, so it can key a stochastic rounding).
template <class Leaf, class Join>
auto pairwise_reduce(std::size_t first, std::size_t n, const Leaf& leaf, const Join& join) -> decltype(leaf(first)) {
  if (n == 1) return leaf(first);
  const std::size_t m = n / 2;
  const auto left = pairwise_reduce(first, m, leaf, join);
  const auto right = pairwise_reduce(first + m, n - m, leaf, join);
  return join(left, right, first + m);
}

// ((x0 + x1) + x2) + ... ; step i (adding x_i, i >= 1) uses position + i.
Rounded sum_sequential(const Format& f, std::span<const std::uint32_t> x, const RoundingSpec& spec,
                       std::uint64_t position = 0);

// Recursive pairwise summation: sum(x[0,n)) = sum(x[0,m)) + sum(x[m,n)) with m = n/2
// (rounded down), down to single elements. The addition that joins the halves split
// at index m uses position + m (unique per addition).
Rounded sum_pairwise(const Format& f, std::span<const std::uint32_t> x, const RoundingSpec& spec,
                     std::uint64_t position = 0);

// Kahan's compensated summation with every operation rounded into `f`:
//   s = x0, c = 0; for i >= 1: y = x_i - c; t = s + y; c = (t - s) - y; s = t.
// Step i's four operations use positions 4i .. 4i+3 (plus `position`).
Rounded sum_kahan(const Format& f, std::span<const std::uint32_t> x, const RoundingSpec& spec,
                  std::uint64_t position = 0);

// Dot product as a chain of fused multiply-adds: s = c; s = fma(a_i, b_i, s) for
// i = 0..n-1 (step i uses position + i). a and b must have the same length.
Rounded dot_fma_chain(const Format& f, std::uint32_t c, std::span<const std::uint32_t> a,
                      std::span<const std::uint32_t> b, const RoundingSpec& spec, std::uint64_t position = 0);

// Exact sum of values and products of values (fixed point, two's complement, LSB
// 2^-320, 704 bits: every product of two values of formats of at most 32 bits is
// representable, with 2^100 terms of headroom before carries could overflow).
// Special values: any NaN, inf - inf or 0 * inf makes the result NaN (the latter two
// raise invalid); otherwise an infinity wins with its sign.
// Sign of an exact zero result, as IEEE 754 gives for a sum: -0 if every term was a
// negative zero, +0 if every term was a positive zero (or there were none); otherwise
// (cancellation, or zeros of both signs) -0 under rdn and +0 in every other mode.
class ExactAccumulator {
 public:
  static constexpr int kLimbs = 11;
  static constexpr int kLsbExponent = -320;

  void clear() { *this = ExactAccumulator{}; }
  // Adds the value of the bit pattern `bits` of format `f`.
  void add(const Format& f, std::uint32_t bits);
  // Adds the exact product of two values.
  void add_product(const Format& fa, std::uint32_t a, const Format& fb, std::uint32_t b);
  // Same for values given as floats (every value of every format here is a float).
  void add(float x);
  void add_product(float a, float b);
  // Adds (-1)^negative * magnitude * 2^lsb_exponent; lsb_exponent >= kLsbExponent and
  // the value must stay far inside the accumulator (as products of formats <= 32 bits do).
  void add_scaled(bool negative, std::uint64_t magnitude, int lsb_exponent);

  // One rounding of the exact sum into `out`.
  Rounded round(const Format& out, const RoundingSpec& spec, std::uint64_t position = 0,
                RoundingEvent* event = nullptr) const;
  // Whether the finite part is exactly zero.
  bool is_zero() const;
  bool is_special() const { return has_nan_ || has_pos_inf_ || has_neg_inf_; }
  // Exponent of the leading bit of the finite part's magnitude (undefined when zero).
  int leading_exponent() const;

 private:
  std::uint64_t limb_[kLimbs] = {};
  bool has_nan_ = false, invalid_ = false, has_pos_inf_ = false, has_neg_inf_ = false;
  bool any_term_ = false, all_negative_zero_ = true, all_positive_zero_ = true;
  void note_zero_term(bool negative);
  void add_infinity(bool negative);
};

}  // namespace fb
