// traces/metadata_bool.hpp: the one spelling of a boolean in a capture's __metadata__.
//
// safetensors metadata values are strings, and captures come from Python (str(True) is
// "True"), from shell scripts ("1") and from flashbits itself ("true"), so a boolean key such
// as `causal` accepts true|false, True|False and 1|0, and nothing else. Header-only because
// fb-fa2's dependency-free host side (traces/device_formats.cmake) reads the same key
// without the trace library.
#pragma once

#include <optional>
#include <string_view>

namespace fb {

// true or false for an accepted spelling; nullopt for anything else (the caller names the
// file and key in its error).
inline std::optional<bool> parse_metadata_bool(std::string_view text) {
  if (text == "true" || text == "True" || text == "1") return true;
  if (text == "false" || text == "False" || text == "0") return false;
  return std::nullopt;
}

}  // namespace fb
