// api/event_json.cpp: rendering of rounding events.
#include "api/event_json.hpp"

#include <cmath>
#include <cstdio>
#include <sstream>

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

std::string explain_event(const Format& f, const RoundingSpec& spec, const RoundingEvent& ev,
                          std::uint32_t result_bits) {
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
    << (ev.direction == RoundDirection::exact
            ? "exact"
            : (ev.tie ? "a TIE" : (ev.round_bit ? "above the halfway point" : "below the halfway point")))
    << "\n";
  o << "mode " << to_string(spec.mode) << ": rounded " << direction_name(ev.direction);
  if (ev.rounding_carry) o << " (the carry ran into the exponent)";
  if (pinned) o << " (pinned to the smallest value)";
  o << "\n";
  char err[64];
  std::snprintf(err, sizeof err, "%+.6g", ev.error_ulps);
  o << "error " << err << " ulp; flags " << flags_string(ev.flags) << "\n";
  o << "result " << hex_bits(f, result_bits) << " = " << to_double(f, result_bits) << "\n";
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
