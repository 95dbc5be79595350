// api/input_error.hpp: the one exception for bad input, shared by every face (the CLI, the
// Python module, the benchmarks and the fuzz targets).
//
// Contract: the message is one line naming what was wrong (an option or argument, a file, a
// line, a field) and what was expected. The CLI prints it after "error: " and exits 2; the
// Python module raises it as ValueError. Nothing else about presentation lives here.
#pragma once

#include <stdexcept>

namespace fb::api {

struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace fb::api
