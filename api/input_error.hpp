// api/input_error.hpp: the one exception for bad input, shared by every face (the CLI, the
// Python module, the benchmarks and the fuzz targets).
//
// Contract: the message is one line naming what was wrong (an option or argument, a file, a
// line, a field) and what was expected. The CLI prints it after "error: " and exits 2; the
// Python module raises it as ValueError. Nothing else about presentation lives here.
#pragma once

#include <stdexcept>
#include <string>

#include "formats/text_escape.hpp"

namespace fb::api {

// A NUL byte of echoed input is kept as \x00 (what() is a C string: it ended the message).
struct InputError : std::runtime_error {
  explicit InputError(const std::string& message) : std::runtime_error(without_nul_bytes(message)) {}
  explicit InputError(const char* message) : std::runtime_error(message) {}
};

}  // namespace fb::api
