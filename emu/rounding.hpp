// emu/rounding.hpp: rounding modes, overflow policies, flags, the rounding event,
// and the one round-and-pack routine that every operation ends in.
//
// Contract (docs/DESIGN.md §2-3):
// - round_pack(format, negative, exponent, significand, sticky, spec, position, event)
//   rounds the exact value (-1)^negative * (significand + s) * 2^exponent, where s is
//   some number strictly between 0 and 1 when `sticky` is set and 0 otherwise, into
//   `format`, once, in `spec.mode`. significand must be non-zero.
// - Tininess is detected after rounding (with unbounded exponent range); underflow is
//   raised only together with inexact. Under sr that rounding draws the same random
//   integer (seed, position) as the delivered one, against its own discarded fraction.
// - Overflow and inexact are raised whenever the value rounded with unbounded
//   exponent range exceeds max finite, also when the policy or the format saturates.
// - `ieee` overflow gives inf (NaN for formats without inf) in the modes that round
//   away from the value's magnitude bound; rtz and rto give max finite, rup/rdn give
//   max finite on the side they round towards zero. `satfinite`, and formats with no
//   inf and no NaN, always give max finite.
// - e8m0 has no zero and no sign: negative values give NaN with invalid; magnitudes
//   below 2^-127 give 2^-127, always inexact, with underflow when they are tiny after
//   rounding (a value that rounds up to 2^-127 with unbounded exponent is not tiny).
// - Stochastic rounding (`sr`) with r random bits rounds up in magnitude iff the top r
//   discarded bits plus an r-bit random integer carry out, so P(up) equals the
//   discarded fraction truncated to r bits. The random integer is a pure function of
//   (seed, position), so results do not depend on thread count or order.
// - When `event` is null the compiler removes every event store; no cost when off.
// - round_pack<F> (F a compile-time Format) is the same routine with the format's
//   facts folded to constants, and round_pack_inline the same routine forced inline
//   into its caller; all three are thin wrappers of detail::round_pack_body, which is
//   forced inline for that reason.
// - round_pack_lane<F, Mode> (bottom of this file) is the same algorithm again,
//   specialised to exact significands of at most 24 bits and written over 32-bit
//   integers without branches so that array loops (fb::round_array, the batched
//   ops) vectorise; it shares round_up_decision and stochastic_carry with
//   round_pack and gives identical bits and flags (tests/test_array_rounding.cpp).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string_view>

#include "formats/format.hpp"

namespace fb {

enum class RoundingMode : std::uint8_t { rne, rna, rtz, rup, rdn, rto, sr };
enum class OverflowPolicy : std::uint8_t { ieee, satfinite };

inline constexpr RoundingMode kAllDeterministicModes[] = {RoundingMode::rne, RoundingMode::rna, RoundingMode::rtz,
                                                          RoundingMode::rup, RoundingMode::rdn, RoundingMode::rto};

constexpr std::string_view to_string(RoundingMode m) {
  switch (m) {
    case RoundingMode::rne:
      return "rne";
    case RoundingMode::rna:
      return "rna";
    case RoundingMode::rtz:
      return "rtz";
    case RoundingMode::rup:
      return "rup";
    case RoundingMode::rdn:
      return "rdn";
    case RoundingMode::rto:
      return "rto";
    case RoundingMode::sr:
      return "sr";
  }
  return "?";
}
// Every mode, in the order the CLI lists them.
inline constexpr RoundingMode kRoundingModes[] = {RoundingMode::rne, RoundingMode::rna, RoundingMode::rtz,
                                                  RoundingMode::rup, RoundingMode::rdn, RoundingMode::rto,
                                                  RoundingMode::sr};
constexpr bool parse_rounding_mode(std::string_view s, RoundingMode& out) {
  for (RoundingMode m : kRoundingModes) {
    if (s == to_string(m)) {
      out = m;
      return true;
    }
  }
  return false;
}
constexpr std::string_view to_string(OverflowPolicy p) { return p == OverflowPolicy::ieee ? "ieee" : "satfinite"; }

// IEEE exception flags, as a bit set.
using Flags = std::uint8_t;
namespace flag {
inline constexpr Flags inexact = 1, underflow = 2, overflow = 4, divbyzero = 8, invalid = 16;
}
// "xuozv" letters in that order, or "-" for none (docs/CLI.md).
inline void flags_to_chars(Flags f, char out[6]) {
  int n = 0;
  if (f & flag::inexact) out[n++] = 'x';
  if (f & flag::underflow) out[n++] = 'u';
  if (f & flag::overflow) out[n++] = 'o';
  if (f & flag::divbyzero) out[n++] = 'z';
  if (f & flag::invalid) out[n++] = 'v';
  if (n == 0) out[n++] = '-';
  out[n] = '\0';
}

inline constexpr int kMaxSrBits = 32;

// Everything that decides how a value is rounded, passed explicitly to every call
// (no global mode). sr_bits and seed matter only for RoundingMode::sr.
struct RoundingSpec {
  RoundingMode mode = RoundingMode::rne;
  OverflowPolicy overflow = OverflowPolicy::ieee;
  int sr_bits = 24;  // 1..kMaxSrBits
  std::uint64_t seed = 0;
};

// SplitMix64's finaliser: a bijective 64-bit mix (also used for test data and
// seeds elsewhere; stochastic rounding uses it only to derive its key, below).
constexpr std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// ---- the stochastic-rounding stream -------------------------------------------
// stochastic_bits(seed, position) is the ONE definition of sr's random integer
// (round_pack and the array loops both use it): a 32-bit word that is a pure
// function of (seed, position), so results do not depend on threads or order.
// How: a 64-bit key is derived from the seed and the position's high 32 bits
// (SplitMix64's finaliser, once per 2^32 positions: array loops hoist it), and the
// low 32 bits go through two rounds of a 32-bit integer hash with the key mixed in:
//   bits = mix32(mix32(low ^ key_a) + key_b),
// mix32 being C. Wellons' "lowbias32" (hash-prospector: xorshift-multiply, two
// 32-bit multiplies, bijective, avalanche bias ~0.17 for one round, far lower for
// two). Everything is 32-bit, so 8 AVX2 lanes compute it at once (the previous
// stream, SplitMix64 of seed and position, needed 64-bit multiplies, which AVX2
// lacks).
// Quality, and why it is enough for rounding:
// - for a fixed seed and high word the map low -> bits is a bijection, so over any
//   2^32 aligned positions every 32-bit value occurs exactly once: the top r bits
//   are exactly uniform there, which is what makes E[sr(x)] = x (P(up) = the
//   discarded fraction truncated to r bits);
// - over shorter runs, the two keyed rounds leave no visible correlation between
//   neighbouring positions or between seeds (tests/test_stochastic.cpp: chi-square
//   on the low and high byte, on pairs of neighbours, across seeds; a Weyl sequence
//   fails those tests);
// - it is not a cryptographic or a "crush-clean" generator; sr needs only unbiased,
//   data-independent draws, and each rounding consumes at most 32 bits of one word.
constexpr std::uint32_t mix32(std::uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}
struct StochasticKey {
  std::uint32_t a, b;
};
constexpr StochasticKey stochastic_key(std::uint64_t seed, std::uint32_t position_high) {
  const std::uint64_t k = mix64(mix64(seed ^ 0x6a09e667f3bcc909ull) + position_high * 0x9e3779b97f4a7c15ull);
  return {static_cast<std::uint32_t>(k), static_cast<std::uint32_t>(k >> 32)};
}
// The stream with its key already derived (array loops): positions that share
// position >> 32 share the key.
[[gnu::always_inline]] constexpr std::uint32_t stochastic_bits_keyed(StochasticKey key, std::uint32_t position_low) {
  return mix32(mix32(position_low ^ key.a) + key.b);
}
constexpr std::uint32_t stochastic_bits(std::uint64_t seed, std::uint64_t position) {
  return stochastic_bits_keyed(stochastic_key(seed, static_cast<std::uint32_t>(position >> 32)),
                               static_cast<std::uint32_t>(position));
}

enum class RoundDirection : std::uint8_t { exact, down, up };  // in magnitude

// Everything about one rounding (docs/DESIGN.md §3). Additions fill the add_* fields.
struct RoundingEvent {
  // The exact value handed to round_pack: (-1)^negative * (significand + sticky) *
  // 2^(exponent - 63), significand normalised with its top bit at bit 63.
  bool negative = false;
  int exponent = 0;  // unbiased exponent of the leading bit
  std::uint64_t significand = 0;
  bool input_sticky = false;
  int kept_bits = 0;        // significand bits the result keeps (< p when subnormal)
  bool round_bit = false;   // first discarded bit
  bool sticky_bit = false;  // OR of everything below the round bit
  bool tie = false;
  RoundDirection direction = RoundDirection::exact;
  bool rounding_carry = false;  // rounding up carried into the next binade
  // (result - exact) in ulps of the kept LSB, signed, computed from the significand above.
  // With input_sticky set the exact value lies strictly inside that significand's last
  // unit, so the figure is off by less than one such unit: the scalar ops hand over 64
  // bits (emu/ops.hpp), so by less than 2^(kept_bits - 64) ulp, plus the double's own
  // 2^-53 ulp. After an overflow to inf (or NaN in its place) it is +-inf.
  double error_ulps = 0.0;
  Flags flags = 0;
  // Additions (add, sub, fma, accumulation steps).
  bool is_addition = false;
  int alignment_shift = 0;            // exponent of larger operand minus smaller one
  bool significand_overflow = false;  // same-sign sum carried out: exponent one above larger
  int cancellation_depth = 0;         // leading bits lost to cancellation (opposite signs)
  bool exact_zero = false;            // the exact sum was zero
};

struct Rounded {
  std::uint32_t bits;  // in the format's container
  Flags flags;
};

// ---- packing of special results (no rounding involved) -----------------------
constexpr std::uint32_t pack_nan(const Format& f) { return to_container(f, f.quiet_nan_pattern()); }
constexpr std::uint32_t pack_zero(const Format& f, bool negative) {
  return to_container(f, (negative && f.has_negative_zero()) ? f.sign_mask() : 0u);
}
constexpr std::uint32_t pack_max_finite(const Format& f, bool negative) {
  return to_container(f, (negative ? f.sign_mask() : 0u) | f.max_finite_pattern());
}
// How an infinite result is packed: max finite under satfinite (as cvt.satfinite and
// __NV_SATFINITE do, also in formats that have inf) and in saturating formats;
// otherwise inf where the format has one, else NaN. Flags are the caller's business
// and never depend on the policy (see ops.hpp).
constexpr std::uint32_t pack_infinite(const Format& f, bool negative, OverflowPolicy policy) {
  if (f.always_saturates() || policy == OverflowPolicy::satfinite) return pack_max_finite(f, negative);
  if (f.has_inf()) return to_container(f, (negative ? f.sign_mask() : 0u) | f.inf_pattern());
  return pack_nan(f);
}

namespace detail {
// The mode's decision, shared by round_pack and round_pack_lane: whether the kept
// magnitude goes up by one, given its LSB, the first discarded bit, whether anything
// below it is non-zero, and (sr only) whether the random integer carried out of the
// discarded bits. Bit is bool (round_pack) or a 0/1 std::uint32_t (round_pack_lane,
// where 32-bit integer lanes vectorise better than bools). Bitwise operators: no
// branch on the data-dependent direction.
template <class Bit>
[[gnu::always_inline]] constexpr Bit round_up_decision(RoundingMode mode, Bit negative, Bit kept_odd, Bit round_bit,
                                                       Bit sticky, Bit sr_carry) {
  const Bit inexact = round_bit | sticky;
  const Bit positive = static_cast<Bit>(negative ^ Bit{1});
  switch (mode) {
    case RoundingMode::rne:
      return round_bit & (sticky | kept_odd);
    case RoundingMode::rna:
      return round_bit;
    case RoundingMode::rtz:
      return Bit{0};
    case RoundingMode::rup:
      return inexact & positive;
    case RoundingMode::rdn:
      return inexact & negative;
    case RoundingMode::rto:
      return Bit{0};  // handled by forcing the LSB
    case RoundingMode::sr:
      return inexact & sr_carry;
  }
  return Bit{0};
}
// sr's carry: the top r discarded bits plus the top r bits of the random word
// (stochastic_bits) carry out of r bits (see the contract at the top of this file).
[[gnu::always_inline]] constexpr bool stochastic_carry(std::uint64_t top_r_bits, int r, std::uint32_t random32) {
  return ((top_r_bits + (random32 >> (32 - r))) >> r) != 0;
}
// The same carry in 32-bit words (r <= 32 = kMaxSrBits reads only the top 32 bits
// of the fraction): fraction_hi32 is that top half. Returns 0 or 1.
[[gnu::always_inline]] constexpr std::uint32_t stochastic_carry_hi32(std::uint32_t fraction_hi32, int r,
                                                                     std::uint32_t random32) {
  const std::uint32_t top = fraction_hi32 >> (32 - r), rnd = random32 >> (32 - r);
  const std::uint32_t all_ones = 0xffffffffu >> (32 - r);
  return top > all_ones - rnd ? 1u : 0u;  // top + rnd >= 2^r, without a 33-bit sum
}

// Whether a discarded fraction rounds the kept magnitude up by one.
// frac64: the discarded part as a 0.64 fixed-point fraction of the kept LSB;
// below: whether anything non-zero lies below those 64 bits.
[[gnu::always_inline]] inline bool rounds_up(RoundingMode mode, bool negative, std::uint64_t kept, std::uint64_t frac64,
                                             bool below, const RoundingSpec& spec, std::uint64_t position) {
  const bool round_bit = (frac64 >> 63) != 0;
  const bool sticky = ((frac64 << 1) != 0) | below;
  if (mode == RoundingMode::sr) {
    if (!(round_bit | sticky)) return false;  // no random draw for exact values
    const int r = spec.sr_bits;
    return stochastic_carry(frac64 >> (64 - r), r, stochastic_bits(spec.seed, position));
  }
  return round_up_decision<bool>(mode, negative, (kept & 1u) != 0, round_bit, sticky, false);
}
}  // namespace detail

namespace detail {
// The body of round_pack, forced inline so that a caller with a compile-time format
// (round_pack<F>) or a constant mode gets every format fact and mode test folded
// into a branch-light loop body. It is still the one rounding routine.
[[gnu::always_inline]] inline Rounded round_pack_body(const Format& f, bool negative, int exponent,
                                                      std::uint64_t significand, bool sticky, const RoundingSpec& spec,
                                                      std::uint64_t position, RoundingEvent* event) {
  const int lead = 63 - std::countl_zero(significand);
  const std::uint64_t n = significand << (63 - lead);  // leading bit at bit 63
  const int e = exponent + lead;                       // value in [2^e, 2^(e+1))
  const int p = f.precision();
  const int emin = f.emin();
  const std::uint32_t sign_bits = negative ? f.sign_mask() : 0u;

  if (event) {
    event->negative = negative;
    event->exponent = e;
    event->significand = n;
    event->input_sticky = sticky;
  }
  if (negative && !f.is_signed) {
    // Nothing rounded: an invalid result (e8m0 has no negatives), recorded as the special
    // results are (emu/ops.hpp: an empty exact value, error 0, flag v).
    if (event) {
      event->negative = false, event->exponent = 0, event->significand = 0, event->input_sticky = false;
      event->flags = flag::invalid, event->error_ulps = 0.0;
    }
    return {pack_nan(f), flag::invalid};
  }

  // Tininess after rounding: of the values below 2^emin only those in
  // [2^(emin-1), 2^emin) can round up to 2^emin when the exponent is unbounded
  // below; round them at full precision to decide. rto never carries a binade.
  const auto tiny_after_rounding = [&] {
    if (e != emin - 1) return true;
    const std::uint64_t full_kept = n >> (64 - p);
    const std::uint64_t full_frac = n << p;
    const bool full_up = spec.mode != RoundingMode::rto &&
                         detail::rounds_up(spec.mode, negative, full_kept, full_frac, sticky, spec, position);
    return !(full_up && full_kept + 1 == (std::uint64_t{1} << p));
  };

  // Bits kept: p for normal results; fewer below emin (subnormals). A format
  // without subnormals (e8m0) pins tiny values to its smallest value, which is
  // always inexact; underflow follows the same tininess rule as everywhere else.
  if (e < emin && !f.has_subnormals()) {
    const Flags pinned_flags = static_cast<Flags>(flag::inexact | (tiny_after_rounding() ? flag::underflow : 0));
    if (event) {
      // Seen on the result's grid (LSB 2^emin, kept part 0), the value is the
      // discarded fraction v / 2^emin, and the pinned result rounds it up to one LSB.
      // v = n * 2^(e-63), so v / 2^emin as a 0.64 fraction is n >> (emin - e - 1).
      const int shift = emin - e - 1;  // >= 0
      const std::uint64_t frac64 = shift < 64 ? n >> shift : 0;
      const bool lost = shift >= 64 || (shift > 0 && (n << (64 - shift)) != 0);
      event->kept_bits = p;
      event->round_bit = (frac64 >> 63) != 0;
      event->sticky_bit = (frac64 << 1) != 0 || lost || sticky;
      event->tie = event->round_bit && !event->sticky_bit;
      event->direction = RoundDirection::up;
      event->error_ulps = 1.0 - std::ldexp(static_cast<double>(frac64 >> 11), -53);
      event->flags = pinned_flags;
    }
    return {to_container(f, 0u), pinned_flags};
  }
  const int kept_bits = e >= emin ? p : p - (emin - e);
  const int drop = 64 - kept_bits;  // >= 40 since p <= 24
  std::uint64_t kept = 0, frac64 = 0;
  bool below = sticky;
  if (drop < 64) {
    kept = n >> drop;
    frac64 = n << (64 - drop);
  } else if (drop == 64) {
    frac64 = n;
  } else if (drop < 128) {
    frac64 = n >> (drop - 64);
    below = below || (n << (128 - drop)) != 0;
  } else {
    below = true;
  }
  const bool round_bit = (frac64 >> 63) != 0;
  const bool sticky_bit = (frac64 << 1) != 0 || below;
  const bool inexact = round_bit || sticky_bit;
  const std::uint64_t kept_exact = kept;
  if (spec.mode == RoundingMode::rto) {
    kept |= inexact ? 1u : 0u;
  } else {
    kept += detail::rounds_up(spec.mode, negative, kept, frac64, below, spec, position) ? 1u : 0u;
  }

  Flags flags = inexact ? flag::inexact : 0;
  if (e < emin && inexact && tiny_after_rounding()) flags |= flag::underflow;

  // Pack by adding the significand, implicit bit included, to the exponent field
  // minus one: a rounding carry then increments the exponent by itself.
  std::int64_t layout_magnitude;
  if (e >= emin) {
    layout_magnitude = ((static_cast<std::int64_t>(e) + f.bias - 1) << f.man_bits) + static_cast<std::int64_t>(kept);
  } else {
    layout_magnitude = static_cast<std::int64_t>(kept);
  }
  // Rounding up carried into a higher binade: the kept part became 2^kept_bits. kept_bits is
  // negative for values far below the smallest subnormal (nothing kept): rounding up there
  // lands on the smallest subnormal, binades above the value, a carry as well.
  const bool carried = kept != kept_exact && (kept_bits < 0 || kept == (std::uint64_t{1} << kept_bits));

  std::uint32_t result;
  if (layout_magnitude > static_cast<std::int64_t>(f.max_finite_pattern())) {
    flags |= flag::overflow | flag::inexact;
    const RoundingMode m = spec.mode;
    const bool to_infinity = m == RoundingMode::rne || m == RoundingMode::rna || m == RoundingMode::sr ||
                             (m == RoundingMode::rup && !negative) || (m == RoundingMode::rdn && negative);
    result = to_infinity ? pack_infinite(f, negative, spec.overflow) : pack_max_finite(f, negative);
  } else if (layout_magnitude == 0) {
    result = pack_zero(f, negative);
  } else {
    result = to_container(f, sign_bits | static_cast<std::uint32_t>(layout_magnitude));
  }

  if (event) {
    event->kept_bits = kept_bits;
    event->round_bit = round_bit;
    event->sticky_bit = sticky_bit;
    event->tie = round_bit && !sticky_bit;
    event->direction =
        !inexact ? RoundDirection::exact : (kept > kept_exact ? RoundDirection::up : RoundDirection::down);
    // An overflow moves the result past the significand's rounding: up to inf (or a format's
    // NaN in its place), down to the largest finite value below the exact one.
    if (flags & flag::overflow)
      event->direction = result == pack_max_finite(f, negative) ? RoundDirection::down : RoundDirection::up;
    event->rounding_carry = carried;
    const double fraction = std::ldexp(static_cast<double>(frac64 >> 11), -53);
    double err = static_cast<double>(kept - kept_exact) - fraction;
    if (flags & flag::overflow) {
      const Decoded d = decode(f, result);
      if (d.cls != ValueClass::normal) {
        err = std::numeric_limits<double>::infinity();
      } else {
        // max finite minus the exact value, in units of the kept LSB
        const double exact_units = std::ldexp(static_cast<double>(n >> 11), -(64 - kept_bits) + 11);
        err = std::ldexp(static_cast<double>(d.significand), d.exponent - e + kept_bits - 1 - f.man_bits) - exact_units;
      }
    }
    event->error_ulps = negative ? -err : err;
    event->flags = flags;
  }
  return {result, flags};
}
}  // namespace detail

// The one round-and-pack routine. See the contract at the top of this file.
inline Rounded round_pack(const Format& f, bool negative, int exponent, std::uint64_t significand, bool sticky,
                          const RoundingSpec& spec, std::uint64_t position = 0, RoundingEvent* event = nullptr) {
  return detail::round_pack_body(f, negative, exponent, significand, sticky, spec, position, event);
}

// round_pack forced inline into its caller: the same routine (identical bits, flags and
// event), for hot paths (the scalar ops, array loops) where inlining lets the compiler fold
// a constant mode and, given a compile-time format (FixedFormat below), the format's facts.
[[gnu::always_inline]] inline Rounded round_pack_inline(const Format& f, bool negative, int exponent,
                                                        std::uint64_t significand, bool sticky,
                                                        const RoundingSpec& spec, std::uint64_t position = 0,
                                                        RoundingEvent* event = nullptr) {
  return detail::round_pack_body(f, negative, exponent, significand, sticky, spec, position, event);
}

// A "format source": a format known at compile time or one read at run time, behind one
// interface (format() returns the Format), so that one templated routine serves both: with
// FixedFormat (and the routine fully inlined, e.g. [[gnu::flatten]]) every format fact folds
// to a constant; RuntimeFormat refers to a Format that must outlive it.
template <Format F>
struct FixedFormat {
  static constexpr const Format& format() { return F; }
};
struct RuntimeFormat {
  const Format& f;
  constexpr const Format& format() const { return f; }
};

// The same routine for a format known at compile time (array loops): identical
// results, with the format's facts constant-folded.
template <Format F>
[[gnu::always_inline]] inline Rounded round_pack(bool negative, int exponent, std::uint64_t significand, bool sticky,
                                                 const RoundingSpec& spec, std::uint64_t position = 0,
                                                 RoundingEvent* event = nullptr) {
  return detail::round_pack_body(F, negative, exponent, significand, sticky, spec, position, event);
}

// ---- round_pack over 32-bit lanes -------------------------------------------
// round_pack_lane<F, Mode, Lead> is round_pack specialised for exact values whose
// significand has at most 24 bits and no sticky part (fp32 inputs; operands, sums
// and products of the narrow formats that fit): the same algorithm (bits kept =
// p, or fewer below emin; the mode's decision from round_up_decision and
// stochastic_carry; tininess after rounding by re-rounding at full precision when
// the value lies in [2^(emin-1), 2^emin); packing by adding the significand to the
// biased exponent field minus one; overflow by comparing with max finite) written
// in 32-bit integers without branches, so that a loop over it vectorises (8 lanes
// with AVX2). The significand is not shifted to normalise it (the bits to drop are
// counted from where it stands).
// How the 32-bit form stays cheap (the same quantities as round_pack's, computed
// differently; every step is exact):
// - the discarded bits are read as a 0.32 fixed-point fraction of the kept LSB,
//   significand << (32 - drop), as round_pack reads its frac64: round bit = its top
//   bit, sticky = the rest non-zero;
// - "the value is below 2^emin" (e < emin) is read from the truncated kept part:
//   below 2^emin the quantum is 2^(emin-p+1), so the value is tiny iff its
//   truncation to that quantum, kept_exact, is < 2^(p-1); and kept_exact == 2^(p-1) - 1
//   (p >= 2) puts the value in [2^(emin-1), 2^emin), round_pack's e == emin - 1;
// - the packed magnitude is ((max(e, emin) - emin) << man_bits) + kept, which is
//   round_pack's ((e + bias - 1) << man_bits) + kept for normal results (emin = 1 -
//   bias) and kept for subnormal ones, without a select.
// Lead: the position of the significand's leading bit when the caller knows it
// (-1: unknown, then it is read from the significand converted to float, exact
// below 2^24). With Lead >= 0 the caller guarantees: the leading bit is at bit
// Lead, or the value is below 2^emin and exponent + Lead <= emin (fp32 subnormals
// and zeros with Lead = 23, exponent = -149, for formats with emin >= -126): in
// both cases max(exponent + Lead, emin) = max(e, emin), which is all the routine
// needs of e.
// Results and flags are identical to round_pack's (tests/test_array_rounding.cpp
// checks them against MPFR, and sr against fb::convert).
// Restrictions (static_assert): F is signed, has subnormals, precision in [2, 23],
// emin = 1 - bias; the format and mode are compile-time constants. At least one
// bit must be dropped: the significand's leading bit is at least bit p - 1 (as
// with fp32 normals, whose leading bit is bit 23), or exponent <= emin - p (fp32
// subnormals and zeros, for formats with emin >= -126 and p <= 23). `negative` is
// 0 or 1. `random32` is stochastic_bits(spec.seed, position), read only when Mode
// is sr. A zero significand gives the format's zero with that sign and no flag.
// Flags come back as a 32-bit word so that a loop's flag reduction stays in
// 32-bit lanes.
// Branch-free selects for the lane loops here and in emu/array_rounding.cpp and emu/array_ops.cpp: c ? a : b
// written with masks: a loop made of these has no branch and no many-way merge, which GCC's
// if-conversion (and so its vectoriser) gives up on.
[[gnu::always_inline]] constexpr std::uint32_t select_u32(bool c, std::uint32_t a, std::uint32_t b) {
  const std::uint32_t m = 0u - static_cast<std::uint32_t>(c);
  return (a & m) | (b & ~m);
}
// The same with the condition as a 0/1 integer (converting one to bool is an
// operation GCC's vectoriser does not support).
[[gnu::always_inline]] constexpr std::uint32_t select_u32_bit(std::uint32_t bit, std::uint32_t a, std::uint32_t b) {
  const std::uint32_t m = 0u - bit;
  return (a & m) | (b & ~m);
}

template <Format F, RoundingMode Mode, int Lead = -1>
[[gnu::always_inline]] inline std::uint32_t round_pack_lane(std::uint32_t negative, std::int32_t exponent,
                                                            std::uint32_t significand, const RoundingSpec& spec,
                                                            std::uint32_t random32, std::uint32_t& flags_out) {
  static_assert(F.is_signed && F.has_subnormals() && F.has_zero() && F.precision() >= 2 && F.precision() <= 23);
  static_assert(F.emin() == 1 - F.bias);  // the packing below relies on it
  static_assert(Lead >= -1 && Lead <= 23);
  constexpr int p = F.precision();
  constexpr int emin = F.emin();
  // value = significand * 2^exponent, in [2^e, 2^(e+1)) (see Lead above).
  std::int32_t lead = Lead;
  if constexpr (Lead < 0) {
    lead = static_cast<std::int32_t>(
               std::bit_cast<std::uint32_t>(static_cast<float>(static_cast<std::int32_t>(significand))) >> 23) -
           127;
  }
  const std::int32_t e = exponent + lead;
  const std::int32_t e_quantum = e > emin ? e : emin;  // the binade whose quantum the result keeps
  // Bits dropped: down to the quantum 2^(e_quantum - p + 1). From 25 on nothing
  // is kept and the round bit is 0, so 25 stands for every larger count; >= 1
  // by the precondition.
  const std::int32_t drop_exact = e_quantum - (p - 1) - exponent;
  const std::int32_t drop = drop_exact < 25 ? drop_exact : 25;
  const std::uint32_t kept_exact = significand >> drop;
  // The discarded bits as a 0.32 fraction of the kept LSB (scaled down by
  // 2^(drop_exact - 25) when capped, which keeps its round bit, 0, and its sticky).
  const std::uint32_t fraction32 = significand << (32 - drop);
  std::uint32_t kept = kept_exact;
  const std::uint32_t round_bit = fraction32 >> 31;
  const std::uint32_t sticky = std::min(fraction32 << 1, 1u);
  const std::uint32_t inexact = std::min(fraction32, 1u);
  // sr: the top 32 bits of the discarded fraction (those of round_pack's frac64).
  std::uint32_t fraction_hi32 = 0;
  // When the drop is capped, fraction32 (= significand << 7, whose low 7 bits are
  // 0) shifted right by drop_exact - 25 is that fraction exactly, or truncated to
  // 32 bits past drop_exact 32; from 56 on it is 0.
  if constexpr (Mode == RoundingMode::sr) {
    const std::int32_t capped_by = drop_exact - drop < 31 ? drop_exact - drop : 31;
    fraction_hi32 = fraction32 >> capped_by;
  }
  auto sr_carry = [&](std::uint32_t fraction) -> std::uint32_t {
    if constexpr (Mode == RoundingMode::sr) {
      return detail::stochastic_carry_hi32(fraction, spec.sr_bits, random32);
    } else {
      (void)fraction;
      return 0u;
    }
  };
  if constexpr (Mode == RoundingMode::rto) {
    kept |= inexact;
  } else {
    kept +=
        detail::round_up_decision<std::uint32_t>(Mode, negative, kept & 1u, round_bit, sticky, sr_carry(fraction_hi32));
  }
  std::uint32_t flags = inexact * flag::inexact;
  // Tininess after rounding: a value in [2^(emin-1), 2^emin) rounded at full
  // precision p (one bit fewer dropped) may reach 2^emin. Only the all-ones p-bit
  // significand can: the p - 1 kept bits all ones and the round bit set. It is
  // odd, so the decision is taken with kept_odd = 1 (the compiler then drops what
  // the mode does not read: rne and rna read only the round bit, rtz nothing).
  // There full precision's round bit and sticky are the bits below this round bit,
  // and its discarded fraction is this one less its top bit. (When drop is 1
  // nothing lies below the round bit, and the value is exact at full precision: no
  // decision rounds up.)
  {
    const std::uint32_t tiny = static_cast<std::uint32_t>(kept_exact < (1u << (p - 1)));  // value < 2^emin
    const std::uint32_t full_all_ones = static_cast<std::uint32_t>(kept_exact == (1u << (p - 1)) - 1u) & round_bit;
    std::uint32_t full_up = 0;
    if constexpr (Mode != RoundingMode::rto) {
      full_up = detail::round_up_decision<std::uint32_t>(Mode, negative, 1u, (fraction32 >> 30) & 1u,
                                                         std::min(fraction32 << 2, 1u), sr_carry(fraction_hi32 << 1));
    }
    const std::uint32_t reaches_normal = full_all_ones & full_up;
    flags |= (tiny & inexact & (reaches_normal ^ 1u)) * flag::underflow;
  }
  // Pack: significand (implicit bit included) plus the exponent field minus one,
  // which is e_quantum - emin (0 for subnormal results). Exponents above emax + 1
  // all overflow; clamping keeps the sum in 32 bits.
  const std::int32_t e_packed = e_quantum < F.emax() + 1 ? e_quantum : F.emax() + 1;
  const std::uint32_t magnitude = (static_cast<std::uint32_t>(e_packed - emin) << F.man_bits) + kept;
  // magnitude < 2^31 (e_packed is clamped), so a signed compare, which AVX2 has, is exact.
  const bool overflow = static_cast<std::int32_t>(magnitude) > static_cast<std::int32_t>(F.max_finite_pattern());
  constexpr bool to_infinity_pos =
      Mode == RoundingMode::rne || Mode == RoundingMode::rna || Mode == RoundingMode::sr || Mode == RoundingMode::rup;
  constexpr bool to_infinity_neg =
      Mode == RoundingMode::rne || Mode == RoundingMode::rna || Mode == RoundingMode::sr || Mode == RoundingMode::rdn;
  // pack_infinite(F, sign, spec.overflow) without its branch on the policy.
  constexpr std::uint32_t max_pos = pack_max_finite(F, false), max_neg = pack_max_finite(F, true);
  constexpr std::uint32_t inf_pos = pack_infinite(F, false, OverflowPolicy::ieee);
  constexpr std::uint32_t inf_neg = pack_infinite(F, true, OverflowPolicy::ieee);
  const bool saturate = spec.overflow == OverflowPolicy::satfinite;
  const std::uint32_t overflow_pos = to_infinity_pos ? select_u32(saturate, max_pos, inf_pos) : max_pos;
  const std::uint32_t overflow_neg = to_infinity_neg ? select_u32(saturate, max_neg, inf_neg) : max_neg;
  // F has signed zeros or not: pack_zero's choice, as a mask on the sign bit.
  constexpr std::uint32_t zero_sign = F.has_negative_zero() ? F.sign_mask() : 0u;
  const std::uint32_t sign_bits = negative * F.sign_mask();
  std::uint32_t result = to_container(F, select_u32(magnitude == 0, sign_bits & zero_sign, sign_bits) | magnitude);
  result = select_u32(overflow, select_u32_bit(negative, overflow_neg, overflow_pos), result);
  flags |= overflow ? (flag::overflow | flag::inexact) : 0u;
  flags_out = flags;
  return result;
}

}  // namespace fb
