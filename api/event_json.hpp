// api/event_json.hpp: a rounding event as JSON (for --json) and as a bit-by-bit
// explanation for a person (for --explain).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "attention/attention.hpp"
#include "emu/rounding.hpp"

namespace fb::api {

nlohmann::json event_to_json(const Format& f, const RoundingEvent& ev);
// A scalar op's event with its result (`op --json`'s "event"): event_to_json, and where the
// result needed no rounding because an operand or the operation was special (a NaN operand,
// an invalid operation, x/0, an infinite operand), "special" names the case and "flags" are
// the result's: such results carry no rounding event of their own, so "exact" is {} and the
// rounding fields (kept_bits ... error_ulps) are null.
nlohmann::json op_event_to_json(const Format& f, const RoundingEvent& ev, const Rounded& result);
// Several lines: the exact significand with kept | round | sticky bits marked, the
// decision and why, an overflow and how the policy packed it, and the addition facts
// where present; for a special result (above), what made it and that nothing was rounded.
std::string explain_event(const Format& f, const RoundingSpec& spec, const RoundingEvent& ev, const Rounded& result);
// The carried significand times 2^(exponent - 63) in 20 significant digits, after a minus sign
// where negative, and ending in "+" where sticky_below (the exact value lies above it).
std::string exact_value_string(const RoundingEvent& ev);
// One traced KV tile's scalars as `replay --explain --json` prints them (docs/CLI.md): key
// range, running max and sum, the count of P̄ == 1, the P·V step tallies and signed error, in
// TileRecord's order. The Python module's row traces start from it and add the tile's
// tied-max count and arrays.
nlohmann::ordered_json tile_record_json(const attn::TileRecord& t);

}  // namespace fb::api
