// traces/fa2_trace.hpp: the host side of fb-fa2's trace I/O, kept out of the .cu file so
// that nvcc compiles C++17 only while the safetensors library (fb_traces) stays C++20.
//
// Contract: read_fa2_inputs() loads q, k, v, do (BF16, all of one shape [B,H,N,D]) and
// the metadata from an input trace, throwing std::runtime_error naming the file and
// tensor on a bad one; write_fa2_trace() writes the named tensors and metadata as one
// safetensors file (docs/DESIGN.md §9).
// The *_lite versions (fa2_trace_lite.cpp) do the same without the project's fb_traces
// library; the standalone gpu/ build binds the plain names to them (fa2_trace_use_lite.cpp),
// the project build to fb_traces (fa2_trace.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace fb::gpu {

struct Fa2Inputs {
  std::vector<std::uint64_t> shape;          // [B, H, N, D]
  std::vector<std::uint16_t> q, k, v, dout;  // bf16 bit patterns
  std::map<std::string, std::string> metadata;
};
Fa2Inputs read_fa2_inputs(const std::string& path);

struct Fa2Tensor {
  std::string name;
  std::string dtype;  // "BF16", "F32", "I32"
  std::vector<std::uint64_t> shape;
  std::vector<std::uint8_t> bytes;
};
void write_fa2_trace(const std::string& path, const std::vector<Fa2Tensor>& tensors,
                     const std::map<std::string, std::string>& metadata);

Fa2Inputs read_fa2_inputs_lite(const std::string& path);
void write_fa2_trace_lite(const std::string& path, const std::vector<Fa2Tensor>& tensors,
                          const std::map<std::string, std::string>& metadata);

}  // namespace fb::gpu
