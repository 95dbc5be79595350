// formats/decimal_text.hpp: the one reader of a decimal number typed by a person or written by
// flashbits itself (an option value, a kernel model's parameter, a sweep CSV's sums).
//
// Contract of read_decimal: `text` is the whole number, nothing around it: an optional sign,
// decimal digits with at most one '.', at least one digit, and an optional exponent
// e|E[+|-]digits. Returns the nearest double (std::from_chars, correctly rounded), or nullopt
// for anything else: an empty word, spaces, a hex float (0x1p-3, which strtod reads), inf,
// nan, a trailing character, or a finite word whose value overflows a double (1e999).
// Integers are a caller's check on the result (v == floor(v), a range).
#pragma once

#include <optional>
#include <string_view>

namespace fb {

std::optional<double> read_decimal(std::string_view text);

// Contract of read_plain_integer: `text` is a whole integer as flashbits writes counts and
// sizes: an optional '-' (where `allow_minus`) and decimal digits, nothing else: no '+', no
// space, no point or exponent ("1e0"), no "-0". Stores the value in `value` and returns
// none; else not_plain_digits, or out_of_range when the digits exceed a long long.
enum class PlainIntegerError { none, not_plain_digits, out_of_range };
PlainIntegerError read_plain_integer(std::string_view text, long long& value, bool allow_minus = true);

}  // namespace fb
