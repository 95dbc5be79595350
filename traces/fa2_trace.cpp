// traces/fa2_trace.cpp: fb-fa2's trace I/O through traces/safetensors (see fa2_trace.hpp).
#include "traces/fa2_trace.hpp"

#include <cstring>
#include <stdexcept>

#include "traces/safetensors.hpp"

namespace fb::gpu {

Fa2Inputs read_fa2_inputs(const std::string& path) {
  const Safetensors in = read_safetensors(path);
  Fa2Inputs r;
  const SafeTensor* q = in.find("q");
  if (!q || q->dtype != Dtype::BF16 || q->shape.size() != 4)
    throw std::runtime_error(path + ": q: missing or not BF16 [B,H,N,D]");
  r.shape = q->shape;
  auto take = [&](const char* name, std::vector<std::uint16_t>& dst) {
    const SafeTensor* t = in.find(name);
    if (!t || t->dtype != Dtype::BF16 || t->shape != q->shape) {
      throw std::runtime_error(path + ": " + name + ": missing, not BF16, or shape differs from q");
    }
    dst.resize(t->element_count());
    std::memcpy(dst.data(), t->bytes.data(), t->bytes.size());
  };
  take("q", r.q);
  take("k", r.k);
  take("v", r.v);
  take("do", r.dout);
  r.metadata = in.metadata;
  return r;
}

void write_fa2_trace(const std::string& path, const std::vector<Fa2Tensor>& tensors,
                     const std::map<std::string, std::string>& metadata) {
  Safetensors out;
  for (const Fa2Tensor& t : tensors) {
    const auto dtype = parse_dtype(t.dtype);
    if (!dtype) throw std::runtime_error(path + ": tensor " + t.name + ": unknown dtype " + t.dtype);
    out.tensors.push_back(SafeTensor{t.name, *dtype, t.shape, t.bytes});
  }
  out.metadata = metadata;
  write_safetensors(path, out);
}

}  // namespace fb::gpu
