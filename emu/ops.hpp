// emu/ops.hpp: exact scalar operations in any format of at most 32 bits.
//
// Contract: each operation computes its exact result, reduces it to (sign, exponent,
// significand, sticky) and rounds it once through round_pack (emu/rounding.hpp).
// Special cases follow docs/DESIGN.md §2:
// - a NaN operand gives NaN and no flag -- a signalling NaN included: operands are
//   decoded to values, so sNaN operands are treated as quiet and raise no invalid flag
//   (IEEE 754 would raise invalid; flashbits does not model signalling NaNs);
// - 0*inf, inf-inf, 0/0, sqrt(<0) give NaN with invalid;
// - x/0 (x finite, nonzero) is an exact infinity and raises divbyzero alone where the
//   format holds inf: inf under ieee, max finite under satfinite (satfinite only changes
//   the packing of the exact infinity, as for inf operands: no overflow, no inexact);
// - an exact zero sum is +0, or -0 under rdn; same-sign zeros keep their sign;
// - in formats without inf (e4m3, e2m1, ...), an infinite result (x/0) does not fit the
//   format: it is an overflow, divbyzero | overflow | inexact, packed by the overflow
//   policy (NaN under ieee where the format has one, else max finite; max finite under
//   satfinite);
// - formats without NaN (fp6, fp4) give +0 with invalid where a NaN is due;
// - e8m0 has no zero: an exact zero result gives NaN with invalid.
//
// How it stays exact and fast (docs/DESIGN.md §3): every operand has at most 24
// significant bits and an exponent in [-149, 128], so a product is exact in fp64 and
// TwoSum / an FMA residual give the exact error of an fp64 sum, quotient or square
// root. The fp64 result is truncated to a grid 2^11 finer with a sticky bit (64 bits:
// round-to-odd at >= p + 2 bits, which Boldo & Melquiond show rounds to the same value as
// the exact result in every deterministic mode; and stochastic rounding's up to 32 discarded
// bits below a 24-bit significand, 56 in all, are the exact value's). A quotient or root
// under stochastic rounding that reads beyond fp64's 53 bits (p + sr_bits > 53), or whose
// rounding event is recorded (the event shows the exact value, not a stand-in), is computed
// exactly in integers instead: 63-64 bits and the remainder as the sticky bit.
//
// `position` keys the stochastic-rounding stream; `event` (optional) receives the
// rounding event, with the add_* fields for add, sub and fma. Every call writes the whole
// event: a result no rounding made (NaN, an infinity, an exact zero, an invalid operation, a
// negative e8m0 result) leaves it empty (significand 0, error 0, direction exact; the flags
// are the returned ones) but for an exact zero's sign.
#pragma once

#include <cstdint>
#include <string_view>

#include "emu/rounding.hpp"
#include "formats/format.hpp"

namespace fb {

enum class OpKind : std::uint8_t { add, sub, mul, div, fma, sqrt, cvt };
constexpr int operand_count(OpKind k) {
  switch (k) {
    case OpKind::sqrt:
      return 1;
    case OpKind::cvt:
      return 1;
    case OpKind::fma:
      return 3;
    default:
      return 2;
  }
}
constexpr std::string_view to_string(OpKind k) {
  switch (k) {
    case OpKind::add:
      return "add";
    case OpKind::sub:
      return "sub";
    case OpKind::mul:
      return "mul";
    case OpKind::div:
      return "div";
    case OpKind::fma:
      return "fma";
    case OpKind::sqrt:
      return "sqrt";
    case OpKind::cvt:
      return "cvt";
  }
  return "?";
}
constexpr bool parse_op(std::string_view s, OpKind& out) {
  for (OpKind k : {OpKind::add, OpKind::sub, OpKind::mul, OpKind::div, OpKind::fma, OpKind::sqrt, OpKind::cvt}) {
    if (s == to_string(k)) {
      out = k;
      return true;
    }
  }
  return false;
}

// An exact real value as round_pack takes it (or an exact zero with a sign).
struct ExactValue {
  bool negative;
  int exponent;               // value = significand * 2^exponent (+ sticky)
  std::uint64_t significand;  // 0 means exact zero
  bool sticky;
};

// hi + lo exactly, where hi != 0, |lo| <= ulp(hi)/2 (TwoSum output) or lo is a
// stand-in whose only meaning is its sign and "strictly inside half an ulp". Where lo != 0 the
// significand fills 64 bits (its top bit set), so the sticky part lies within its last bit.
ExactValue exact_from_sum(double hi, double lo);

// Speed of one call, and why there is no further compile-time fast path: bf16, fp16, e4m3 and
// e5m2 already run a body compiled with their facts as constants (ops.cpp with_format: the
// run-time Format is compared once per call, then nothing is looked up). Profiled on
// 2026-11-26 (a loop of 2^20 fb::add calls on bf16, AVX2 VM), that comparison is 9% of a
// call and the body 84%: decoding both operands, the special-value tests, the error-free
// sum and round_pack with the run-time RoundingSpec (mode, overflow policy, stochastic
// position, event). The batched API (add_array etc., emu/array_rounding.hpp) is 8-10x
// faster per element because it runs that same body in 8-16 SIMD lanes without branches,
// not because it knows the format sooner; a header-inline scalar copy would save the call
// and the 9%, not the factor. Callers with many elements should use the batched API.
Rounded add(const Format& f, std::uint32_t a, std::uint32_t b, const RoundingSpec& spec, std::uint64_t position = 0,
            RoundingEvent* event = nullptr);
Rounded sub(const Format& f, std::uint32_t a, std::uint32_t b, const RoundingSpec& spec, std::uint64_t position = 0,
            RoundingEvent* event = nullptr);
Rounded mul(const Format& f, std::uint32_t a, std::uint32_t b, const RoundingSpec& spec, std::uint64_t position = 0,
            RoundingEvent* event = nullptr);
Rounded div(const Format& f, std::uint32_t a, std::uint32_t b, const RoundingSpec& spec, std::uint64_t position = 0,
            RoundingEvent* event = nullptr);
// a*b + c with one rounding.
Rounded fma(const Format& f, std::uint32_t a, std::uint32_t b, std::uint32_t c, const RoundingSpec& spec,
            std::uint64_t position = 0, RoundingEvent* event = nullptr);
Rounded sqrt(const Format& f, std::uint32_t a, const RoundingSpec& spec, std::uint64_t position = 0,
             RoundingEvent* event = nullptr);
// Convert `a`, a value of format `from`, into format `to`. NaN stays NaN (no flag);
// infinity is packed by pack_infinite (max finite under satfinite, even where `to` has inf); it
// raises no flag where `to` has inf, and overflow and
// inexact where `to` has no inf.
Rounded convert(const Format& to, const Format& from, std::uint32_t a, const RoundingSpec& spec,
                std::uint64_t position = 0, RoundingEvent* event = nullptr);

// Round an exact fp64 value (finite or not) into `f`: the entry point for values
// computed exactly elsewhere (accumulators, tests).
Rounded round_double(const Format& f, double exact, const RoundingSpec& spec, std::uint64_t position = 0,
                     RoundingEvent* event = nullptr);

// Knuth's TwoSum, the one home of this error-free transformation: sum = fl(a + b) (round to
// nearest, as the host's double add) and sum + error == a + b exactly, for finite a, b whose
// sum does not overflow. Needs no |a| >= |b| ordering (6 flops; the build disables FP
// contraction, which would break it).
struct TwoSum {
  double sum, error;
};
inline TwoSum two_sum(double a, double b) {
  const double sum = a + b;
  const double b_virtual = sum - a;
  const double a_virtual = sum - b_virtual;
  return {sum, (a - a_virtual) + (b - b_virtual)};
}

// Generic dispatch used by the CLI and batch mode. For cvt, `b` is unused and the
// source format is `from`.
Rounded apply_op(OpKind op, const Format& f, const Format& from, std::uint32_t a, std::uint32_t b, std::uint32_t c,
                 const RoundingSpec& spec, std::uint64_t position = 0, RoundingEvent* event = nullptr);

}  // namespace fb
