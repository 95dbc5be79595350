// formats/decimal_text.hpp: the one reader of a decimal number typed by a person or written by
// flashbits itself (an option value, a kernel model's parameter, a sweep CSV's sums), and the
// one writer of a value in full.
//
// Contract of read_decimal: `text` is the whole number, nothing around it: an optional sign,
// decimal digits with at most one '.', at least one digit, and an optional exponent
// e|E[+|-]digits. Returns the nearest double (std::from_chars, correctly rounded), or nullopt
// for anything else: an empty word, spaces, a hex float (0x1p-3, which strtod reads), inf,
// nan, a trailing character, or a finite word whose value overflows a double (1e999).
// Integers are a caller's check on the result (v == floor(v), a range).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace fb {

std::optional<double> read_decimal(std::string_view text);

// Contract of read_plain_integer: `text` is a whole integer as flashbits writes counts and
// sizes: an optional '-' (where `allow_minus`) and decimal digits, nothing else: no '+', no
// space, no point or exponent ("1e0"), no "-0". Stores the value in `value` and returns
// none; else not_plain_digits, or out_of_range when the digits exceed a long long.
enum class PlainIntegerError { none, not_plain_digits, out_of_range };
PlainIntegerError read_plain_integer(std::string_view text, long long& value, bool allow_minus = true);

// Contract of shortest_decimal: the shortest decimal text that reads back as exactly `x`
// (std::to_chars: the fewest digits, in fixed or scientific form, whichever has fewer
// characters; round trip guaranteed; read_decimal reads every finite one): 0.1, 1.0000001,
// 826108737684340480, 1e-7, 1e40. Every echo of a value goes through it: "%g" kept 6 digits
// and echoed 1.0000001 as "1", beside a refusal of it. The exponent has no '+' and no leading
// zero (1e40, not to_chars' 1e+40): a '+' starts a kernel model's next variant, so a name
// written with it would not read back. Non-finite values give "inf", "-inf", "nan" ("-nan"
// with the sign bit set). The float overload is the shortest text that reads back as the
// float (0.1f gives "0.1", not its double's 17 digits).
std::string shortest_decimal(double x);
std::string shortest_decimal(float x);

}  // namespace fb
