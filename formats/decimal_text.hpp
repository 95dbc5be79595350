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

}  // namespace fb
