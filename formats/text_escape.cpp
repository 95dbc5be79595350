// formats/text_escape.cpp: escape_unprintable (contract in text_escape.hpp).
#include "formats/text_escape.hpp"

#include <cstdint>

namespace fb {

namespace {
// The length of the valid UTF-8 sequence starting at text[i] (1..4), or 0 when the bytes there
// are not one (RFC 3629 table 3-7: the second byte's range depends on the first).
std::size_t utf8_sequence_length(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<std::uint8_t>(text[k]); };
  const std::uint8_t b0 = byte(i);
  if (b0 < 0x80) return 1;
  std::size_t length = 0;
  std::uint8_t lo = 0x80, hi = 0xbf;
  if (b0 >= 0xc2 && b0 <= 0xdf) {
    length = 2;
  } else if (b0 >= 0xe0 && b0 <= 0xef) {
    length = 3;
    if (b0 == 0xe0) lo = 0xa0;  // no overlong forms
    if (b0 == 0xed) hi = 0x9f;  // no surrogates
  } else if (b0 >= 0xf0 && b0 <= 0xf4) {
    length = 4;
    if (b0 == 0xf0) lo = 0x90;  // no overlong forms
    if (b0 == 0xf4) hi = 0x8f;  // nothing above U+10FFFF
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < length; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xbf) return 0;
  return length;
}
}  // namespace

bool is_valid_utf8(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t length = utf8_sequence_length(text, i);
    if (length == 0) return false;
    i += length;
  }
  return true;
}

std::string escaped_byte(unsigned char byte) {
  static constexpr char kHex[] = "0123456789abcdef";
  return {'\\', 'x', kHex[byte >> 4], kHex[byte & 0xf]};
}

std::string escape_unprintable(std::string_view text, bool controls) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    const auto b = static_cast<std::uint8_t>(text[i]);
    const std::size_t length = utf8_sequence_length(text, i);
    const bool control = controls && length == 1 && (b < 0x20 || b == 0x7f) && b != '\t';
    if (length == 0 || control) {
      out += escaped_byte(b);
      ++i;
      continue;
    }
    out.append(text.substr(i, length));
    i += length;
  }
  return out;
}

std::string without_nul_bytes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\0')
      out += "\\x00";
    else
      out += c;
  }
  return out;
}

}  // namespace fb
