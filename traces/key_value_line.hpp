// traces/key_value_line.hpp: one "key=value" line of a text header, the way every flashbits
// binary format writes its metadata (FBPROBE1 sections, FBSFUT1, FBSFURAW1, FBSFUDUMP1,
// FBSFUVAL1). The key runs up to the first '=' and may not be empty; the value is the rest of
// the line, '=' included. Header-only and dependency-free: gpu/'s standalone build reads
// probe files with it too.
#pragma once

#include <string>

namespace fb {

// Splits `line` at its first '='. Returns false, leaving key and value untouched, when there
// is no '=' or the key would be empty; each reader decides whether that is an error.
inline bool split_key_value(const std::string& line, std::string& key, std::string& value) {
  const std::size_t eq = line.find('=');
  if (eq == std::string::npos || eq == 0) return false;
  key = line.substr(0, eq);
  value = line.substr(eq + 1);
  return true;
}

}  // namespace fb
