// attention/exact_o_rounding.hpp: the correctly rounded O, decided exactly where the
// long-double exact_attention() value cannot decide it.
//
// Why: exact_attention() carries O in long double and hands it on as a double, accurate to
// about 1e-16 relative. Rounding that double into the output format is the correct rounding
// except where the exact O lies within that error of a rounding boundary (a representable
// value, or a midpoint for the nearest modes). Random inputs land there about once in 2^40
// elements; constructed ones land there by design: the `ties` scenario's keys 150-200 below
// the row max move O by e^-150 off a representable value or a midpoint, which a double
// cannot hold, so without this the directed modes rounded half of its O elements wrongly.
//
// Contract:
// - ExactORounding(in, exact) reads the inputs and exact_attention()'s outputs of the same
//   problem (their O and row_max); both must outlive it. softmax_scale > 0 or the default
//   1/sqrt(d), as exact_attention() takes it.
// - row_round_inputs(b, h, r, f, spec, first_position) gives, for each column c of row
//   (b, h, r) (rounding position first_position + c), nothing when the double
//   exact.o(b, h, r, c) rounds into f under spec exactly as the exact O does (both ends of
//   its error bound round alike, and rounding is monotone in every mode, sr with a fixed
//   draw included); otherwise a value whose rounding under spec equals the exact O's: the
//   exact O evaluated in MPFR with interval arithmetic at rising precision until both ends
//   round alike. That terminates unless O is exactly a boundary, which is decided first:
//   O = sum_g e^(a_g) A_g / sum_g e^(a_g) n_g over the groups g of keys with equal scores
//   (distinct algebraic a_g; A_g the group's sum of V, n_g its size) is rational iff every
//   group has the same mean A_g / n_g (Lindemann-Weierstrass), and then O is that mean.
//   Throws std::runtime_error if 2^16 bits do not decide. A row with an infinite or NaN
//   entry in q, or in a visible key's k or v, keeps the double (infinite scores are outside
//   this argument; exact_attention's guards define O there).
// - Thread-compatible: each call uses its own MPFR variables and no global MPFR state.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "attention/attention.hpp"
#include "emu/rounding.hpp"

namespace fb::attn {

// A value in round_pack's terms: (-1)^negative * (significand + s) * 2^exponent, with s in
// (0, 1) when sticky. significand == 0 means zero (of that sign).
struct RoundPackInput {
  bool negative = false;
  int exponent = 0;
  std::uint64_t significand = 0;
  bool sticky = false;
};

// Rounds x once into f through round_pack (a zero through round_double).
Rounded round_pack_input(const Format& f, const RoundPackInput& x, const RoundingSpec& spec, std::uint64_t position,
                         RoundingEvent* event = nullptr);

class ExactORounding {
 public:
  ExactORounding(const AttentionInputs& in, const AttentionOutputs& exact);
  std::vector<std::optional<RoundPackInput>> row_round_inputs(int b, int h, int r, const Format& f,
                                                              const RoundingSpec& spec,
                                                              std::uint64_t first_position) const;

 private:
  const AttentionInputs& in_;
  const AttentionOutputs& exact_;
  std::vector<double> v_abs_max_;  // per (batch, kv head, column): max |V| over the keys
};

}  // namespace fb::attn
