// formats/format.hpp: the one table of floating-point format facts.
//
// Contract: a Format is described by a handful of parameters (exponent bits,
// mantissa bits, bias, how specials are encoded, signedness, container width);
// every limit (max finite, min normal, min subnormal, NaN and inf codes) is
// derived from them here and nowhere else. Decoding a bit pattern into its exact
// value lives here too, because it needs nothing but these facts. Rounding into a
// format lives in emu/rounding.hpp (round_pack, the one round-and-pack routine).
//
// This header is shared by the CPU and CUDA sides: it is constexpr, allocation-free
// and compiles under g++ and nvcc.
#pragma once

#include <cstdint>
#include <string_view>

namespace fb {

// How the all-ones exponent field and negative zero are used.
enum class SpecialEncoding : std::uint8_t {
  ieee,    // exp all ones: man == 0 is inf, man != 0 is NaN (fp32, bf16, fp16, e5m2, eXmY)
  fn,      // no inf; only S.1..1.1..1 is NaN, the rest of the top binade is finite (OCP E4M3FN)
  fnuz,    // no inf, no -0: the pattern 1000...0 is the only NaN; bias is one more than IEEE
  finite,  // no inf, no NaN: every pattern is a number, overflow always saturates (OCP FP6/FP4)
  scale,   // e8m0: unsigned, no zero, no subnormals, all-ones is NaN (OCP MX scale)
};

struct Format {
  char name[12];  // "bf16", "e4m3", or "eXmY" for custom formats
  int exp_bits;
  int man_bits;  // stored fraction bits (precision is man_bits + 1)
  int bias;
  SpecialEncoding special;
  bool is_signed;
  int container_bits;  // bits of the stored word (8, 16 or 32)
  bool left_aligned;   // stored in the container's top bits (tf32: fp32 layout, low 13 bits zero)

  // ---- derived facts -------------------------------------------------------
  constexpr int width() const { return (is_signed ? 1 : 0) + exp_bits + man_bits; }
  constexpr int precision() const { return man_bits + 1; }
  // tf32 keeps fp32's layout in a 32-bit word; its encoding is shifted left by this.
  // Narrow formats (fp6, fp4) sit in the low bits of their byte.
  constexpr int storage_shift() const { return left_aligned ? container_bits - width() : 0; }
  constexpr int hex_digits() const { return (container_bits + 3) / 4; }
  constexpr std::uint32_t exp_field_max() const { return (1u << exp_bits) - 1u; }
  constexpr std::uint32_t man_mask() const { return (1u << man_bits) - 1u; }
  constexpr std::uint32_t sign_mask() const { return is_signed ? (1u << (exp_bits + man_bits)) : 0u; }
  constexpr std::uint32_t width_mask() const { return width() >= 32 ? 0xffffffffu : ((1u << width()) - 1u); }
  constexpr bool has_inf() const { return special == SpecialEncoding::ieee; }
  constexpr bool has_nan() const { return special != SpecialEncoding::finite; }
  constexpr bool has_zero() const { return special != SpecialEncoding::scale; }
  constexpr bool has_negative_zero() const { return is_signed && special != SpecialEncoding::fnuz && has_zero(); }
  constexpr bool has_subnormals() const { return special != SpecialEncoding::scale; }
  // Formats with no inf and no NaN can only saturate on overflow, whatever the policy.
  constexpr bool always_saturates() const { return special == SpecialEncoding::finite; }

  // Largest biased exponent field that holds finite numbers.
  constexpr std::uint32_t max_finite_exp_field() const {
    switch (special) {
      case SpecialEncoding::ieee:
        return exp_field_max() - 1u;
      case SpecialEncoding::scale:
        return exp_field_max() - 1u;
      default:
        return exp_field_max();
    }
  }
  // Mantissa field of the largest finite number (E4M3FN loses its top code to NaN).
  constexpr std::uint32_t max_finite_man_field() const {
    return special == SpecialEncoding::fn ? man_mask() - 1u : man_mask();
  }
  // Unbiased exponent of the smallest normal number (e8m0 has biased 0 as a normal).
  constexpr int emin() const { return (special == SpecialEncoding::scale ? 0 : 1) - bias; }
  constexpr int emax() const { return static_cast<int>(max_finite_exp_field()) - bias; }

  // ---- canonical encodings (in the width() bit layout, not the container) ---
  constexpr std::uint32_t max_finite_pattern() const {
    return (max_finite_exp_field() << man_bits) | max_finite_man_field();
  }
  constexpr std::uint32_t inf_pattern() const { return exp_field_max() << man_bits; }
  // The NaN a result gets. Any NaN encoding is acceptable, so one is chosen per format.
  constexpr std::uint32_t quiet_nan_pattern() const {
    switch (special) {
      case SpecialEncoding::ieee:
        return (exp_field_max() << man_bits) | (man_bits > 0 ? (1u << (man_bits - 1)) : 0u);
      case SpecialEncoding::fn:
        return (exp_field_max() << man_bits) | man_mask();
      case SpecialEncoding::fnuz:
        return sign_mask();
      case SpecialEncoding::scale:
        return exp_field_max();
      case SpecialEncoding::finite:
        return 0u;  // unreachable: callers check has_nan()
    }
    return 0u;
  }

  constexpr bool operator==(const Format& o) const {
    return exp_bits == o.exp_bits && man_bits == o.man_bits && bias == o.bias && special == o.special &&
           is_signed == o.is_signed && container_bits == o.container_bits && left_aligned == o.left_aligned;
  }
};

// ---- the named formats: docs/DESIGN.md §2, one row each ---------------------------
namespace formats {
inline constexpr Format fp32{"fp32", 8, 23, 127, SpecialEncoding::ieee, true, 32, false};
inline constexpr Format tf32{"tf32", 8, 10, 127, SpecialEncoding::ieee, true, 32, true};
inline constexpr Format bf16{"bf16", 8, 7, 127, SpecialEncoding::ieee, true, 16, false};
inline constexpr Format fp16{"fp16", 5, 10, 15, SpecialEncoding::ieee, true, 16, false};
inline constexpr Format e4m3{"e4m3", 4, 3, 7, SpecialEncoding::fn, true, 8, false};
inline constexpr Format e5m2{"e5m2", 5, 2, 15, SpecialEncoding::ieee, true, 8, false};
inline constexpr Format e4m3fnuz{"e4m3fnuz", 4, 3, 8, SpecialEncoding::fnuz, true, 8, false};
inline constexpr Format e5m2fnuz{"e5m2fnuz", 5, 2, 16, SpecialEncoding::fnuz, true, 8, false};
inline constexpr Format e3m2{"e3m2", 3, 2, 3, SpecialEncoding::finite, true, 8, false};
inline constexpr Format e2m3{"e2m3", 2, 3, 1, SpecialEncoding::finite, true, 8, false};
inline constexpr Format e2m1{"e2m1", 2, 1, 1, SpecialEncoding::finite, true, 8, false};
inline constexpr Format e8m0{"e8m0", 8, 0, 127, SpecialEncoding::scale, false, 8, false};

inline constexpr Format all_named[] = {fp32, tf32, bf16, fp16, e4m3, e5m2, e4m3fnuz, e5m2fnuz, e3m2, e2m3, e2m1, e8m0};
}  // namespace formats

// Custom IEEE-style eXmY formats are limited so that every operation stays exact in
// the emulator's fp64 round-to-odd path (precision p + 2 <= 53, products and
// quotients inside fp64's normal range): 2 <= X <= 8, 1 <= Y <= 23, 1+X+Y <= 32.
inline constexpr int kCustomMinExpBits = 2;
inline constexpr int kCustomMaxExpBits = 8;
inline constexpr int kCustomMaxManBits = 23;

// Parse a format name: a named format, or "eXmY" (custom IEEE-style, bias 2^(X-1)-1).
// A custom spelling that equals a named IEEE format (e5m10, e8m23, e8m7, e5m2)
// returns that named format. Returns false and leaves `out` untouched on a bad name.
constexpr bool parse_format(std::string_view text, Format& out) {
  for (const Format& f : formats::all_named) {
    if (text == std::string_view(f.name)) {
      out = f;
      return true;
    }
  }
  if (text.size() < 4 || text[0] != 'e') return false;
  int x = 0, y = 0;
  std::size_t i = 1;
  // Digits without a leading zero: "e08m07" is no spelling of e8m7 (bf16) anyone writes, and a
  // name read leniently is a name a typo can reach.
  auto read_int = [&](int& v) {
    std::size_t start = i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9' && i - start < 3) {
      v = v * 10 + (text[i] - '0');
      ++i;
    }
    return i > start && !(text[start] == '0' && i - start > 1);
  };
  if (!read_int(x) || i >= text.size() || text[i] != 'm') return false;
  ++i;
  if (!read_int(y) || i != text.size()) return false;
  if (x < kCustomMinExpBits || x > kCustomMaxExpBits || y < 1 || y > kCustomMaxManBits) return false;
  Format custom{"", x, y, (1 << (x - 1)) - 1, SpecialEncoding::ieee, true, 0, false};
  int w = 1 + x + y;
  custom.container_bits = w <= 8 ? 8 : (w <= 16 ? 16 : 32);
  for (const Format& f : formats::all_named) {
    if (f.special == SpecialEncoding::ieee && f.exp_bits == x && f.man_bits == y &&
        f.container_bits == custom.container_bits) {
      out = f;
      return true;
    }
  }
  // Write the canonical name "eXmY".
  int n = 0;
  custom.name[n++] = 'e';
  if (x >= 10) custom.name[n++] = static_cast<char>('0' + x / 10);
  custom.name[n++] = static_cast<char>('0' + x % 10);
  custom.name[n++] = 'm';
  if (y >= 10) custom.name[n++] = static_cast<char>('0' + y / 10);
  custom.name[n++] = static_cast<char>('0' + y % 10);
  custom.name[n] = '\0';
  out = custom;
  return true;
}

// ---- decoding ----------------------------------------------------------------
enum class ValueClass : std::uint8_t { zero, subnormal, normal, infinite, nan };

// A decoded value: (-1)^negative * significand * 2^(exponent - man_bits) for finite
// numbers, where significand holds the implicit bit for normals.
struct Decoded {
  ValueClass cls;
  bool negative;
  int exponent;               // unbiased exponent of the leading significand bit position
  std::uint32_t significand;  // integer significand, man_bits + 1 bits wide for normals
};

// Strip the container: tf32 is stored in fp32's layout with low bits zero.
constexpr std::uint32_t to_layout(const Format& f, std::uint32_t stored) {
  return (stored >> f.storage_shift()) & f.width_mask();
}
constexpr std::uint32_t to_container(const Format& f, std::uint32_t layout) { return layout << f.storage_shift(); }

// Decode a stored bit pattern. Bits above the container width are ignored.
constexpr Decoded decode(const Format& f, std::uint32_t stored) {
  const std::uint32_t bits = to_layout(f, stored);
  const bool neg = (bits & f.sign_mask()) != 0;
  const std::uint32_t e = (bits >> f.man_bits) & f.exp_field_max();
  const std::uint32_t m = bits & f.man_mask();
  switch (f.special) {
    case SpecialEncoding::ieee:
      if (e == f.exp_field_max()) return {m == 0 ? ValueClass::infinite : ValueClass::nan, neg, 0, m};
      break;
    case SpecialEncoding::fn:
      if (e == f.exp_field_max() && m == f.man_mask()) return {ValueClass::nan, neg, 0, m};
      break;
    case SpecialEncoding::fnuz:
      if (bits == f.sign_mask()) return {ValueClass::nan, true, 0, 0};
      break;
    case SpecialEncoding::scale:
      if (e == f.exp_field_max()) return {ValueClass::nan, false, 0, 0};
      return {ValueClass::normal, false, static_cast<int>(e) - f.bias, 1u};
    case SpecialEncoding::finite:
      break;
  }
  if (e == 0) {
    if (m == 0) return {ValueClass::zero, neg, 0, 0};
    return {ValueClass::subnormal, neg, f.emin(), m};
  }
  return {ValueClass::normal, neg, static_cast<int>(e) - f.bias, m | (1u << f.man_bits)};
}

constexpr bool is_nan(const Format& f, std::uint32_t stored) { return decode(f, stored).cls == ValueClass::nan; }

// Exact value as a double. Every value of every format here (at most 24 significant
// bits, exponents within [-149, 128]) is exactly representable in fp64.
double to_double(const Format& f, std::uint32_t stored);

// Encode an exactly representable double (used by tests and the CLI for decimal
// operands). Returns false if the value is not exactly representable in `f`.
bool from_double_exact(const Format& f, double value, std::uint32_t& stored);

}  // namespace fb
