// traces/fa2_trace_use_lite.cpp: binds fb-fa2's trace I/O to the dependency-free writer and
// reader (fa2_trace_lite.cpp) in the standalone gpu/ build, where fb_traces is not built.
#include "traces/fa2_trace.hpp"

namespace fb::gpu {

Fa2Inputs read_fa2_inputs(const std::string& path) { return read_fa2_inputs_lite(path); }

void write_fa2_trace(const std::string& path, const std::vector<Fa2Tensor>& tensors,
                     const std::map<std::string, std::string>& metadata) {
  write_fa2_trace_lite(path, tensors, metadata);
}

}  // namespace fb::gpu
