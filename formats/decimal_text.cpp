// formats/decimal_text.cpp: read_decimal, read_plain_integer and shortest_decimal (contracts in
// decimal_text.hpp).
#include "formats/decimal_text.hpp"

#include <algorithm>
#include <charconv>
#include <system_error>

namespace fb {

std::optional<double> read_decimal(std::string_view text) {
  std::string_view body = text;
  bool negative = false;
  if (!body.empty() && (body.front() == '+' || body.front() == '-')) {
    negative = body.front() == '-';
    body.remove_prefix(1);
  }
  // The grammar first: from_chars alone would take "inf" and "nan", and strtod hex floats.
  // Meanwhile the decimal order of the first nonzero digit (1 for "12.5", -3 for "0.00125"),
  // which tells an overflow from an underflow below.
  std::size_t i = 0, digits = 0, integer_digits = 0;
  bool point = false, nonzero = false;
  long long order = 0;
  for (; i < body.size(); ++i) {
    const char c = body[i];
    if (c == '.' && !point) {
      point = true;
      continue;
    }
    if (c < '0' || c > '9') break;
    ++digits;
    if (!point) ++integer_digits;
    if (c != '0' && !nonzero) {
      nonzero = true;
      order = point ? -static_cast<long long>(digits - integer_digits) : 0;
    }
  }
  if (digits == 0) return std::nullopt;
  // A first nonzero digit in the integer part has the order of the digits that follow it there.
  if (nonzero && order == 0) {
    std::size_t leading_zeros = 0;
    while (leading_zeros < integer_digits && body[leading_zeros] == '0') ++leading_zeros;
    order = static_cast<long long>(integer_digits - leading_zeros) - 1;
  }
  long long exponent = 0;
  if (i < body.size()) {
    if (body[i] != 'e' && body[i] != 'E') return std::nullopt;
    std::size_t j = i + 1;
    const bool exponent_negative = j < body.size() && body[j] == '-';
    if (j < body.size() && (body[j] == '+' || body[j] == '-')) ++j;
    if (j == body.size()) return std::nullopt;
    for (; j < body.size(); ++j) {
      if (body[j] < '0' || body[j] > '9') return std::nullopt;
      exponent = std::min(exponent * 10 + (body[j] - '0'), 1000000000LL);  // saturated: its sign is what counts
    }
    if (exponent_negative) exponent = -exponent;
  }
  double value = 0;
  const auto [end, error] = std::from_chars(body.data(), body.data() + body.size(), value);
  if (end != body.data() + body.size()) return std::nullopt;
  if (error == std::errc::result_out_of_range) {
    // from_chars leaves value as it was both for an overflow (no double) and for an underflow
    // (the nearest double is a zero): the word's decimal order tells them apart.
    if (order + exponent > 0) return std::nullopt;
    value = 0.0;
  } else if (error != std::errc{}) {
    return std::nullopt;
  }
  return negative ? -value : value;
}

PlainIntegerError read_plain_integer(std::string_view text, long long& value, bool allow_minus) {
  const std::size_t first_digit = allow_minus && !text.empty() && text.front() == '-' ? 1 : 0;
  if (text.size() == first_digit || !std::all_of(text.begin() + static_cast<std::ptrdiff_t>(first_digit), text.end(),
                                                 [](char c) { return c >= '0' && c <= '9'; }))
    return PlainIntegerError::not_plain_digits;
  long long v = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (error == std::errc::result_out_of_range) return PlainIntegerError::out_of_range;
  if (error != std::errc{} || end != text.data() + text.size() || (v == 0 && first_digit == 1))
    return PlainIntegerError::not_plain_digits;
  value = v;
  return PlainIntegerError::none;
}

namespace {
template <class Real>
std::string shortest_of(Real x) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x);
  // 64 characters hold any double's shortest text (at most 24); the check is for the contract.
  std::string text = ec == std::errc() ? std::string(buf, end) : std::string("?");
  // The exponent as digits with no '+' and no leading zero: 1e40, 1e6, 1e-7 (to_chars writes
  // 1e+40, 1e+06, 1e-07).
  if (const std::size_t e = text.find('e'); e != std::string::npos) {
    std::size_t digits = e + 1;
    if (text[digits] == '+')
      text.erase(digits, 1);
    else if (text[digits] == '-')
      ++digits;
    while (digits + 1 < text.size() && text[digits] == '0') text.erase(digits, 1);
  }
  return text;
}
}  // namespace

std::string shortest_decimal(double x) { return shortest_of(x); }
std::string shortest_decimal(float x) { return shortest_of(x); }

}  // namespace fb
