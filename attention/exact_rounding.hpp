// attention/exact_rounding.hpp: the correctly rounded O, delta, LSE, dQ, dK and dV, decided
// exactly where the long-double exact_attention() value cannot decide them.
//
// Why: exact_attention() carries its outputs in long double and hands them on as doubles,
// accurate to about 1e-16 relative. Rounding that double into the output format is the
// correct rounding except where the exact value lies within that error of a rounding
// boundary (a representable value; a midpoint for the nearest modes; a point of sr's grid).
// Random inputs land there about once in 2^40 elements; constructed ones land there by
// design: the `ties` scenario's keys 150-200 below the row max move O and delta by e^-150 off
// a representable value or a midpoint, which a double cannot hold.
//
// Each value is a softmax-weighted mean or a log-sum-exp over one row's visible keys j, with
// exact scores s_j = scale * (q . k_j):
//   O_c   = sum_j e^(s_j) V_jc / sum_j e^(s_j)
//   delta = sum_c dO_c O_c = sum_j e^(s_j) w_j / sum_j e^(s_j),  w_j = dO . V_j (exact)
//   LSE   = log sum_j e^(s_j)
// and the gradients, with P_j = e^(s_j) / l, l = sum_j e^(s_j), over the rows that see key j:
//   dQ_c  = scale * sum_j P_j (w_j - delta) K_jc = scale * (l sum_j e^(s_j) w_j K_jc
//           - (sum_j e^(s_j) w_j)(sum_j e^(s_j) K_jc)) / l^2
//   dK_jc = scale * sum_rows q_c P_j (w_j - delta),   dV_jc = sum_rows dO_c P_j
// How a value is decided:
// 1. The double, where both ends of its error bound round alike (the bound is four times the
//    long-double error exact_attention's arithmetic can make, from the row's score
//    magnitude: exact_attention's row_score_magnitude). Rounding is monotone in every mode,
//    sr with a fixed draw included, so the exact value rounds alike too.
// 2. Else an enclosure in MPFR interval arithmetic at 128 then 512 bits, where both ends
//    round alike (keys more than 50 below the max score go into a long-double tail with a
//    rigorous bound).
// 3. Else the value is compared exactly with the rounding boundaries inside the enclosure:
//    sign(sum_j e^(s_j) (x_j - b)) for a mean, sign(sum_j e^(s_j) - e^b) for LSE. Keys with
//    equal scores are grouped and their coefficients summed exactly; the groups left have
//    distinct algebraic exponents and nonzero rational coefficients, so their sum is not zero
//    (Lindemann-Weierstrass) and its sign is found at rising precision (to 2^16 bits), or at
//    once when every coefficient has one sign. No group left means the value IS the boundary.
//    The value handed back lies in the same cell of the boundary grid as the exact value
//    (or is it, when exact): the enclosure's end inside the cell, else the cell's midpoint.
//    A gradient is compared the same way over a common denominator: each is a ratio X / Y
//    of sums of e^(scale * E) with exact rational exponents E (sums of q . k dots, one per
//    row whose weight enters) and coefficients, so sign(value - b) = sign(scale X - b Y)
//    (dV: X - b Y), multiplied out exactly. Rows with the same denominator (the same scores,
//    e.g. equal query rows) share it, and a gradient constant across a row's keys (equal
//    keys for dQ, equal w = dO . V_j for dQ and dK) is exactly zero without multiplying out.
//    Where multiplying out would take more than 2^18 products of terms, enclosures at 2048
//    and 16384 bits are tried instead; a value still undecided, or no decision at 2^16 bits,
//    throws. Rows whose scores span thousands of nats get near that: dQ and a dominant
//    key's dK cancel to about e^-gap, so each is also enclosed relative to its value (dQ's
//    covariance about the top key, dK's w_j - delta as the mean of the exact w_j - w_i)
//    before the exact comparison; and sums of bf16 dO land on bf16 midpoints missed by
//    e^-gap (dV), which the wider enclosures place.
//
// Contract:
// - ExactRounding(in, exact) reads the inputs and exact_attention()'s outputs of the same
//   problem (o, lse, delta, row_max and row_score_magnitude); both must outlive it.
//   softmax_scale > 0 or the default 1/sqrt(d), as exact_attention() takes it.
// - o_row(b, h, r, f, spec, first_position): for each column c of row (b, h, r) (rounding
//   position first_position + c), nothing when the double exact.o(b, h, r, c) rounds into f
//   under spec as the exact O does, else a value whose rounding under spec (result, flags)
//   equals the exact O's. Its rounding event is exact to within the enclosure's width
//   (2^-120 relative or better, except where cancellation makes O tiny against max |V|).
// - delta(b, h, r, f, spec, position): the same for exact.delta (needs in.d_o), the delta of
//   the exact O; lse(...) the same for exact.lse.
// - dq_row(b, h, r, ...), dk_row(b, hk, j, ...), dv_row(b, hk, j, ...): the same for a row
//   of exact.dq (q's row r) and of exact.dk, exact.dv (key j of kv head hk), from the bounds
//   exact_attention() leaves in gradient_error_bound. dk_row and dv_row keep what they
//   computed of the rows that see the keys until a call for another (b, hk).
// - Rows where exact_attention's guards define the value (no visible key, an infinite score,
//   an infinite or NaN entry in q, a visible key's k or v, or dO for delta and gradients)
//   keep the double; so does a gradient any such row enters.
// - Throws std::runtime_error if 2^16 bits cannot separate a value from a boundary (only a
//   sum of exponentials below 2^-65536 relative could do that).
// - Thread-compatible: each call uses its own MPFR variables and no global MPFR state, and
//   frees MPFR's per-thread caches before returning (the engine's worker threads end after
//   the run).
#pragma once

#include <cstdint>
#include <memory>
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

// Bounds on exact_attention()'s long-double arithmetic (u = 2^-64) in one row of nk visible
// keys, head dim d and score magnitude S (row_score_magnitude), four times the argued bound
// (exact_rounding.cpp), or infinite where too large for the linear argument:
// - mean_error_bound: the absolute error of a softmax-weighted mean of values |x_j| <= 1;
// - weight_error_bound: the relative error of one weight p_j = e^(s_j - LSE), |LSE| = lse.
double mean_error_bound(int d, int nk, double score_magnitude);
double weight_error_bound(int d, int nk, double score_magnitude, double lse);

// Rounds x once into f through round_pack (a zero through round_double).
Rounded round_pack_input(const Format& f, const RoundPackInput& x, const RoundingSpec& spec, std::uint64_t position,
                         RoundingEvent* event = nullptr);

class ExactRounding {
 public:
  ExactRounding(const AttentionInputs& in, const AttentionOutputs& exact);
  std::vector<std::optional<RoundPackInput>> o_row(int b, int h, int r, const Format& f, const RoundingSpec& spec,
                                                   std::uint64_t first_position) const;
  std::optional<RoundPackInput> delta(int b, int h, int r, const Format& f, const RoundingSpec& spec,
                                      std::uint64_t position) const;
  std::optional<RoundPackInput> lse(int b, int h, int r, const Format& f, const RoundingSpec& spec,
                                    std::uint64_t position) const;
  std::vector<std::optional<RoundPackInput>> dq_row(int b, int h, int r, const Format& f, const RoundingSpec& spec,
                                                    std::uint64_t first_position) const;
  std::vector<std::optional<RoundPackInput>> dk_row(int b, int hk, int j, const Format& f, const RoundingSpec& spec,
                                                    std::uint64_t first_position) const;
  std::vector<std::optional<RoundPackInput>> dv_row(int b, int hk, int j, const Format& f, const RoundingSpec& spec,
                                                    std::uint64_t first_position) const;
  ~ExactRounding();

 private:
  struct KeyRows;  // what dk_row and dv_row computed of the rows of one (b, hk)
  enum class KeyGradient { dk, dv };
  std::vector<std::optional<RoundPackInput>> key_row(KeyGradient which, int b, int hk, int j, const Format& f,
                                                     const RoundingSpec& spec, std::uint64_t first_position) const;
  KeyRows& key_rows(int b, int hk) const;
  // exact_attention's absolute error bound for a weighted mean of values of magnitude at most
  // 1, in row (b, h, r) (four times the argued bound; see exact_rounding.cpp).
  double row_mean_error_bound(int b, int h, int r) const;
  int visible_keys(int r) const;
  int kv_head(int h) const;
  const double* column_abs_max(int b, int h) const;  // max |V| per column of h's kv head
  // Whether q of row (b, h, r) and k (with_values: and v) of its nk visible keys are finite.
  bool inputs_finite(int b, int h, int r, int nk, bool with_values) const;

  const AttentionInputs& in_;
  const AttentionOutputs& exact_;
  std::vector<double> v_abs_max_;  // per (batch, kv head, column): max |V| over the keys
  mutable std::unique_ptr<KeyRows> key_rows_;
};

}  // namespace fb::attn
