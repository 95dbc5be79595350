// api/event_json.cpp: rendering of rounding events.
#include "api/event_json.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <optional>
#include <sstream>

#include "formats/decimal_text.hpp"
#include "api/names.hpp"

namespace fb::api {
namespace {
const char* direction_name(RoundDirection d) {
  switch (d) {
    case RoundDirection::exact:
      return "exact";
    case RoundDirection::up:
      return "away-from-zero";
    case RoundDirection::down:
      return "toward-zero";
  }
  return "?";
}
// A result that no rounding made (emu/ops.hpp's special cases hand over no event): its case
// and a sentence for --explain; nullopt where the event describes the result (a rounding, or
// an exact zero).
struct SpecialCase {
  const char* name;
  std::string text;
};
std::optional<SpecialCase> special_case(const Format& f, const RoundingEvent& ev, const Rounded& r) {
  if (ev.significand != 0) return std::nullopt;
  const Decoded d = decode(f, r.bits);
  const std::string name = f.name, packed = " (" + hex_bits(f, r.bits) + ")";
  if (r.flags & flag::invalid) {
    // e8m0 has neither zero nor negatives: an exact zero or negative result is invalid there.
    const bool holds_all = f.has_zero() && f.is_signed;
    return SpecialCase{"invalid", std::string("an invalid operation (0 x inf, inf - inf, 0 / 0, the square root of a "
                                              "negative") +
                                      (holds_all ? "" : ", or a zero or negative result, which " + name + " lacks") +
                                      "): " + (d.cls == ValueClass::nan ? "NaN" : "+0, as " + name + " has no NaN") +
                                      packed + ", flag v; nothing rounded"};
  }
  if (d.cls == ValueClass::nan && !(r.flags & flag::overflow))
    return SpecialCase{"nan_operand", "a NaN operand: the result is NaN" + packed + "; nothing rounded"};
  // How an exact infinity was packed: as inf, or as an overflow in a format without inf, or
  // clamped by satfinite.
  const std::string infinity_packed =
      (r.flags & flag::overflow) ? ", which " + name + " cannot hold: an overflow (flags o and x), packed as " +
                                       (d.cls == ValueClass::nan ? "NaN" : "the largest finite value") + packed
      : d.cls != ValueClass::infinite ? ", packed as the largest finite value (satfinite)" + packed
                                      : packed;
  if (r.flags & flag::divbyzero)
    return SpecialCase{"division_by_zero", "division of a nonzero finite value by zero: an exact infinity, flag z" +
                                               infinity_packed + "; nothing rounded"};
  if (d.cls == ValueClass::zero && r.flags == 0) return std::nullopt;  // an exact zero: the event says so
  // What is left is an infinite operand's exact infinity (of an add, a mul by a nonzero, ...).
  return SpecialCase{"infinite_operand",
                     "an infinite operand: an exact infinity" + infinity_packed + "; nothing rounded"};
}

std::string binary_digits(std::uint64_t v, int count) {
  std::string s;
  for (int i = 63; i > 63 - count && i >= 0; --i) s.push_back(((v >> i) & 1u) ? '1' : '0');
  return s;
}
}  // namespace

std::string exact_value_string(const RoundingEvent& ev) {
  // 64-bit significand: print via long double (64-bit mantissa on x86) to 20 digits.
  const long double v = std::ldexp(static_cast<long double>(ev.significand), ev.exponent - 63);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s%.20Lg%s", ev.negative ? "-" : "", v, ev.input_sticky ? "+" : "");
  return buf;
}

nlohmann::json event_to_json(const Format& f, const RoundingEvent& ev) {
  nlohmann::json j;
  j["exact"] = {{"value", exact_value_string(ev)},
                {"negative", ev.negative},
                {"exponent", ev.exponent},
                {"significand_hex",
                 [&] {
                   char b[24];
                   std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(ev.significand));
                   return std::string(b);
                 }()},
                {"sticky_below", ev.input_sticky}};
  j["kept_bits"] = ev.kept_bits;
  j["round_bit"] = ev.round_bit ? 1 : 0;
  j["sticky_bit"] = ev.sticky_bit ? 1 : 0;
  j["tie"] = ev.tie;
  j["direction"] = direction_name(ev.direction);
  j["rounding_carry"] = ev.rounding_carry;
  if (std::isfinite(ev.error_ulps))
    j["error_ulps"] = ev.error_ulps;
  else
    j["error_ulps"] = ev.error_ulps > 0 ? "inf" : (ev.error_ulps < 0 ? "-inf" : "nan");
  j["flags"] = flags_string(ev.flags);
  if (ev.is_addition) {
    j["addition"] = {{"alignment_shift", ev.alignment_shift},
                     {"significand_overflow", ev.significand_overflow},
                     {"cancellation_depth", ev.cancellation_depth},
                     {"exact_zero", ev.exact_zero}};
  }
  j["format"] = f.name;
  return j;
}

nlohmann::json op_event_to_json(const Format& f, const RoundingEvent& ev, const Rounded& result) {
  nlohmann::json j = event_to_json(f, ev);
  if (const auto special = special_case(f, ev, result)) {
    // Nothing was rounded: the empty event's zeros would read as "exact value 0, rounded
    // exactly, 0 ulp" beside a result of -6 or NaN. Its rounding fields are null instead.
    // Every field of the rounding that did not happen, whatever event_to_json writes.
    j.erase("addition");
    for (auto& [key, value] : j.items())
      if (key != "format") value = nullptr;
    j["special"] = special->name;
    j["flags"] = flags_string(result.flags);
    j["exact"] = nlohmann::json::object();
  }
  return j;
}

std::string explain_event(const Format& f, const RoundingSpec& spec, const RoundingEvent& ev, const Rounded& result) {
  const std::uint32_t result_bits = result.bits;
  if (const auto special = special_case(f, ev, result)) return special->text + "\n";
  std::ostringstream o;
  if (ev.is_addition) {
    o << "addition: alignment shift " << ev.alignment_shift << " bits";
    if (ev.exact_zero)
      o << "; exact cancellation to zero";
    else if (ev.significand_overflow)
      o << "; SIGNIFICAND OVERFLOW: the aligned same-sign sum carried out, the exponent is one above "
           "the larger operand's and one more bit is shifted out";
    else if (ev.cancellation_depth > 0)
      o << "; cancellation of " << ev.cancellation_depth << " leading bit(s)";
    o << "\n";
  }
  if (ev.significand == 0) {
    o << "result " << hex_bits(f, result_bits) << " is an exact zero; no rounding\n";
    return o.str();
  }
  const int shown = ev.kept_bits + 1 + 24 < 64 ? ev.kept_bits + 1 + 24 : 64;
  const std::string bits = binary_digits(ev.significand, shown);
  o << "exact value   " << exact_value_string(ev) << " = " << (ev.negative ? "-" : "+") << "1."
    << "... x 2^" << ev.exponent << "\n";
  // A format without subnormals (e8m0) has nothing below 2^emin, not even zero: every
  // smaller value is pinned to 2^emin, whatever the mode (emu/rounding.hpp contract).
  const bool pinned = !f.has_subnormals() && ev.exponent < f.emin() && ev.direction != RoundDirection::exact;
  if (pinned) {
    o << "significand   (below 2^" << f.emin() << ", the smallest " << f.name
      << " value; it has no subnormals and no zero, so the result is pinned there)\n";
  } else if (ev.kept_bits > 0) {
    o << "significand   " << bits.substr(0, static_cast<std::size_t>(ev.kept_bits)) << " | "
      << bits.substr(static_cast<std::size_t>(ev.kept_bits), 1) << " | "
      << bits.substr(static_cast<std::size_t>(ev.kept_bits) + 1) << (ev.input_sticky ? "...1" : "") << "\n";
    o << "              " << std::string(static_cast<std::size_t>(ev.kept_bits), '^') << "   R   sticky\n";
  } else {
    o << "significand   (no bits kept: below the smallest subnormal) " << bits << "\n";
  }
  if (!pinned) {
    o << "kept bits " << ev.kept_bits << " of precision " << f.precision()
      << (ev.kept_bits < f.precision() ? " (subnormal result)" : "") << "\n";
  }
  o << "round bit " << ev.round_bit << ", sticky bit " << ev.sticky_bit << " -> "
    << (!ev.round_bit && !ev.sticky_bit
            ? "exact"
            : (ev.tie ? "a TIE" : (ev.round_bit ? "above the halfway point" : "below the halfway point")))
    << "\n";
  if (ev.flags & flag::overflow) {
    // The significand's rounding above, then the overflow that replaced its result.
    const Decoded d = decode(f, result_bits);
    o << "OVERFLOW: the rounded value lies beyond " << f.name << "'s largest finite value; mode "
      << to_string(spec.mode) << " with overflow " << to_string(spec.overflow) << " gives "
      << (d.cls == ValueClass::infinite ? "inf"
          : d.cls == ValueClass::nan    ? "NaN (" + std::string(f.name) + " has no inf)"
                                        : std::string("the largest finite value"))
      << " (" << direction_name(ev.direction) << ")\n";
  } else {
    o << "mode " << to_string(spec.mode) << ": rounded " << direction_name(ev.direction);
    if (ev.rounding_carry) o << " (the carry ran into the exponent)";
    if (pinned) o << " (pinned to the smallest value)";
    o << "\n";
  }
  o << "error " << (ev.error_ulps >= 0 ? "+" : "") << shortest_decimal(ev.error_ulps) << " ulp; flags "
    << flags_string(ev.flags) << "\n";
  o << "result " << hex_bits(f, result_bits) << " = " << shortest_decimal(to_double(f, result_bits)) << "\n";
  return o.str();
}

nlohmann::ordered_json tile_record_json(const attn::TileRecord& t) {
  nlohmann::ordered_json j;
  j["kv_tile"] = t.kv_tile;
  j["kv_begin"] = t.kv_begin;
  j["kv_end"] = t.kv_end;
  j["running_max"] = t.running_max;
  j["running_sum"] = t.running_sum;
  j["p_equal_one"] = t.p_equal_one;
  j["significand_overflows"] = t.significand_overflows;
  j["ties"] = t.ties;
  j["rounded_up"] = t.rounded_up;
  j["rounded_down"] = t.rounded_down;
  j["pv_signed_error"] = t.pv_signed_error;
  return j;
}

}  // namespace fb::api
