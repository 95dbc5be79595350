// emu/rounding.hpp: rounding modes, overflow policies, flags, the rounding event,
// and the one round-and-pack routine that every operation ends in.
//
// Contract (DESIGN.md §2-3):
// - round_pack(format, negative, exponent, significand, sticky, spec, position, event)
//   rounds the exact value (-1)^negative * (significand + s) * 2^exponent, where s is
//   some number strictly between 0 and 1 when `sticky` is set and 0 otherwise, into
//   `format`, once, in `spec.mode`. significand must be non-zero.
// - Tininess is detected after rounding (with unbounded exponent range); underflow is
//   raised only together with inexact.
// - Overflow and inexact are raised whenever the value rounded with unbounded
//   exponent range exceeds max finite, also when the policy or the format saturates.
// - `ieee` overflow gives inf (NaN for formats without inf) in the modes that round
//   away from the value's magnitude bound; rtz and rto give max finite, rup/rdn give
//   max finite on the side they round towards zero. `satfinite`, and formats with no
//   inf and no NaN, always give max finite.
// - e8m0 has no zero and no sign: negative values give NaN with invalid; magnitudes
//   below 2^-127 give 2^-127 with underflow and inexact.
// - Stochastic rounding (`sr`) with r random bits rounds up in magnitude iff the top r
//   discarded bits plus an r-bit random integer carry out, so P(up) equals the
//   discarded fraction truncated to r bits. The random integer is a pure function of
//   (seed, position), so results do not depend on thread count or order.
// - When `event` is null the compiler removes every event store; no cost when off.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string_view>

#include "formats/format.hpp"

namespace fb {

enum class RoundingMode : std::uint8_t { rne, rna, rtz, rup, rdn, rto, sr };
enum class OverflowPolicy : std::uint8_t { ieee, satfinite };

inline constexpr RoundingMode kAllDeterministicModes[] = {
    RoundingMode::rne, RoundingMode::rna, RoundingMode::rtz,
    RoundingMode::rup, RoundingMode::rdn, RoundingMode::rto};

constexpr std::string_view to_string(RoundingMode m) {
  switch (m) {
    case RoundingMode::rne: return "rne";
    case RoundingMode::rna: return "rna";
    case RoundingMode::rtz: return "rtz";
    case RoundingMode::rup: return "rup";
    case RoundingMode::rdn: return "rdn";
    case RoundingMode::rto: return "rto";
    case RoundingMode::sr: return "sr";
  }
  return "?";
}
constexpr bool parse_rounding_mode(std::string_view s, RoundingMode& out) {
  for (RoundingMode m : {RoundingMode::rne, RoundingMode::rna, RoundingMode::rtz, RoundingMode::rup,
                         RoundingMode::rdn, RoundingMode::rto, RoundingMode::sr}) {
    if (s == to_string(m)) {
      out = m;
      return true;
    }
  }
  return false;
}
constexpr std::string_view to_string(OverflowPolicy p) {
  return p == OverflowPolicy::ieee ? "ieee" : "satfinite";
}

// IEEE exception flags, as a bit set.
using Flags = std::uint8_t;
namespace flag {
inline constexpr Flags inexact = 1, underflow = 2, overflow = 4, divbyzero = 8, invalid = 16;
}
// "xuozv" letters in that order, or "-" for none (CLI.md).
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
  int sr_bits = 24;           // 1..kMaxSrBits
  std::uint64_t seed = 0;
};

// Counter-based random bits for stochastic rounding: a bijective 64-bit mix
// (SplitMix64's finaliser) of seed and logical position.
constexpr std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
constexpr std::uint64_t stochastic_bits(std::uint64_t seed, std::uint64_t position) {
  return mix64(mix64(seed ^ 0x6a09e667f3bcc909ull) + position * 0x9e3779b97f4a7c15ull);
}

enum class RoundDirection : std::uint8_t { exact, down, up };  // in magnitude

// Everything about one rounding (DESIGN.md §3). Additions fill the add_* fields.
struct RoundingEvent {
  // The exact value handed to round_pack: (-1)^negative * (significand + sticky) *
  // 2^(exponent - 63), significand normalised with its top bit at bit 63.
  bool negative = false;
  int exponent = 0;               // unbiased exponent of the leading bit
  std::uint64_t significand = 0;
  bool input_sticky = false;
  int kept_bits = 0;              // significand bits the result keeps (< p when subnormal)
  bool round_bit = false;         // first discarded bit
  bool sticky_bit = false;        // OR of everything below the round bit
  bool tie = false;
  RoundDirection direction = RoundDirection::exact;
  bool rounding_carry = false;    // rounding up carried into the next binade
  double error_ulps = 0.0;        // (result - exact) in ulps of the kept LSB, signed
  Flags flags = 0;
  // Additions (add, sub, fma, accumulation steps).
  bool is_addition = false;
  int alignment_shift = 0;        // exponent of larger operand minus smaller one
  bool significand_overflow = false;  // same-sign sum carried out: exponent one above larger
  int cancellation_depth = 0;     // leading bits lost to cancellation (opposite signs)
  bool exact_zero = false;        // the exact sum was zero
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
// Infinity where the format has one; otherwise what an infinite result becomes
// under `policy`: NaN for ieee, max finite for satfinite and saturating formats.
constexpr std::uint32_t pack_infinite(const Format& f, bool negative, OverflowPolicy policy) {
  if (f.always_saturates() || policy == OverflowPolicy::satfinite) return pack_max_finite(f, negative);
  if (f.has_inf()) return to_container(f, (negative ? f.sign_mask() : 0u) | f.inf_pattern());
  return pack_nan(f);
}

namespace detail {
// Whether a discarded fraction rounds the kept magnitude up by one.
// frac64: the discarded part as a 0.64 fixed-point fraction of the kept LSB;
// below: whether anything non-zero lies below those 64 bits.
inline bool rounds_up(RoundingMode mode, bool negative, std::uint64_t kept, std::uint64_t frac64,
                      bool below, const RoundingSpec& spec, std::uint64_t position) {
  const bool round_bit = (frac64 >> 63) != 0;
  const bool sticky = (frac64 << 1) != 0 || below;
  const bool inexact = round_bit || sticky;
  switch (mode) {
    case RoundingMode::rne: return round_bit && (sticky || (kept & 1u));
    case RoundingMode::rna: return round_bit;
    case RoundingMode::rtz: return false;
    case RoundingMode::rup: return inexact && !negative;
    case RoundingMode::rdn: return inexact && negative;
    case RoundingMode::rto: return false;  // handled by forcing the LSB
    case RoundingMode::sr: {
      if (!inexact) return false;
      const int r = spec.sr_bits;
      const std::uint64_t top = frac64 >> (64 - r);
      const std::uint64_t rnd = stochastic_bits(spec.seed, position) >> (64 - r);
      return ((top + rnd) >> r) != 0;
    }
  }
  return false;
}
}  // namespace detail

// The one round-and-pack routine. See the contract at the top of this file.
inline Rounded round_pack(const Format& f, bool negative, int exponent, std::uint64_t significand,
                          bool sticky, const RoundingSpec& spec, std::uint64_t position = 0,
                          RoundingEvent* event = nullptr) {
  const int lead = 63 - std::countl_zero(significand);
  const std::uint64_t n = significand << (63 - lead);  // leading bit at bit 63
  const int e = exponent + lead;                        // value in [2^e, 2^(e+1))
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
    if (event) event->flags = flag::invalid, event->error_ulps = std::numeric_limits<double>::quiet_NaN();
    return {pack_nan(f), flag::invalid};
  }

  // Bits kept: p for normal results; fewer below emin (subnormals). A format
  // without subnormals (e8m0) pins tiny values to its smallest value.
  if (e < emin && !f.has_subnormals()) {
    if (event) {
      event->kept_bits = p;
      event->round_bit = false;
      event->sticky_bit = true;
      event->direction = RoundDirection::up;
      event->error_ulps = std::ldexp(1.0, emin - e);
      event->flags = flag::underflow | flag::inexact;
    }
    return {to_container(f, 0u), static_cast<Flags>(flag::underflow | flag::inexact)};
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
  } else if (detail::rounds_up(spec.mode, negative, kept, frac64, below, spec, position)) {
    kept += 1;
  }

  Flags flags = inexact ? flag::inexact : 0;
  // Tininess after rounding: only e == emin - 1 can round up to 2^emin when the
  // precision is unbounded below; decide it by rounding at full precision.
  if (e < emin && inexact) {
    bool tiny = true;
    if (e == emin - 1) {
      const std::uint64_t full_kept = n >> (64 - p);
      const std::uint64_t full_frac = n << p;
      bool full_up = spec.mode != RoundingMode::rto &&
                     detail::rounds_up(spec.mode, negative, full_kept, full_frac, sticky, spec, position);
      tiny = !(full_up && full_kept + 1 == (std::uint64_t{1} << p));
    }
    if (tiny) flags |= flag::underflow;
  }

  // Pack by adding the significand, implicit bit included, to the exponent field
  // minus one: a rounding carry then increments the exponent by itself.
  std::int64_t layout_magnitude;
  if (e >= emin) {
    layout_magnitude = ((static_cast<std::int64_t>(e) + f.bias - 1) << f.man_bits) +
                       static_cast<std::int64_t>(kept);
  } else {
    layout_magnitude = static_cast<std::int64_t>(kept);
  }
  const bool carried = kept == (std::uint64_t{1} << kept_bits) && kept != kept_exact;

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
    event->direction = !inexact ? RoundDirection::exact
                       : (kept > kept_exact ? RoundDirection::up : RoundDirection::down);
    event->rounding_carry = carried;
    const double fraction = std::ldexp(static_cast<double>(frac64 >> 11), -53);
    double err = static_cast<double>(kept - kept_exact) - fraction;
    if (flags & flag::overflow) {
      const Decoded d = decode(f, result);
      if (d.cls != ValueClass::normal) {
        err = std::numeric_limits<double>::infinity();
      } else {
        // max finite minus the exact value, in units of the kept LSB
        const double exact_units = std::ldexp(static_cast<double>(n >> 11), -(64 - kept_bits) + 11) ;
        err = std::ldexp(static_cast<double>(d.significand), d.exponent - e + kept_bits - 1 - f.man_bits) -
              exact_units;
      }
    }
    event->error_ulps = negative ? -err : err;
    event->flags = flags;
  }
  return {result, flags};
}

}  // namespace fb
