// python/src/traces.cpp: load_trace() and save_trace(), the safetensors traces of
// traces/trace.hpp, metadata included.
//
// Contract:
// - load_trace(path) reads and validates a trace exactly as `flashbits replay` does
//   (fb::read_trace: ValueError with the CLI's one-line message on any defect) and returns its
//   metadata (every key, as strings), each tensor's exact values (float64) and its dtype.
// - save_trace(path, tensors, metadata) encodes each tensor in its format (values must be
//   exactly representable, bit patterns valid), serialises, validates the bytes with the
//   reader (parse_trace) and writes the file whole or not at all (cli::write_output_file).
#include <cstring>

#include "common.hpp"
#include "traces/safetensors.hpp"
#include "traces/trace.hpp"

namespace fb::py {
namespace {

pyb::dict load_trace(const std::string& path) {
  const Trace trace = read_trace(path);
  pyb::dict metadata;
  for (const auto& [k, v] : trace.raw_metadata()) metadata[pyb::str(k)] = v;
  pyb::dict tensors, dtypes;
  for (const SafeTensor& t : trace.file().tensors) {
    std::vector<pyb::ssize_t> shape(t.shape.begin(), t.shape.end());
    const std::vector<double> values = trace.values(t.name);
    pyb::array_t<double> a(shape);
    std::copy(values.begin(), values.end(), a.mutable_data());
    tensors[pyb::str(t.name)] = a;
    const auto f = dtype_format(t.dtype);
    dtypes[pyb::str(t.name)] = f ? std::string(f->name) : (t.dtype == Dtype::F64 ? std::string("fp64")
                                                                                 : std::string(dtype_name(t.dtype)));
  }
  pyb::dict d;
  d["path"] = path;
  d["metadata"] = metadata;
  d["tensors"] = tensors;
  d["formats"] = dtypes;
  d["hardware"] = is_hardware_capture(trace);
  return d;
}

// tensors: (name, array, format, is_bits) in the order they are written.
void save_trace(const std::string& path, const std::vector<std::tuple<std::string, pyb::array, std::string, bool>>& tensors,
                const std::map<std::string, std::string>& metadata) {
  Safetensors file;
  file.metadata = metadata;
  for (const auto& [name, array, fmt, is_bits] : tensors) {
    SafeTensor t;
    t.name = name;
    for (pyb::ssize_t i = 0; i < array.ndim(); ++i) t.shape.push_back(static_cast<std::uint64_t>(array.shape(i)));
    if (fmt == "fp64") {
      if (is_bits) throw cli::InputError(name + ": fp64 tensors are given as values, not bit patterns");
      const carray<double> a(array);
      t.dtype = Dtype::F64;
      t.bytes.resize(static_cast<std::size_t>(a.size()) * 8);
      std::memcpy(t.bytes.data(), a.data(), t.bytes.size());
    } else {
      const Format f = parse_fmt(fmt, (name + ": format").c_str());
      const auto dtype = dtype_of_format(f);
      if (!dtype)
        throw cli::InputError(name + ": format " + fmt +
                              " cannot be stored in a trace (bf16, fp16, fp32, e4m3, e5m2 or fp64)");
      t.dtype = *dtype;
      std::vector<std::uint32_t> bits;
      if (is_bits) {
        bits = checked_bits(f, carray<std::uint64_t>(array), name);
      } else {
        const carray<double> a(array);
        bits = encode_values(f, a.data(), static_cast<std::size_t>(a.size()), name);
      }
      const std::size_t size = dtype_size(*dtype);
      t.bytes.resize(bits.size() * size);
      for (std::size_t i = 0; i < bits.size(); ++i)
        for (std::size_t byte = 0; byte < size; ++byte)
          t.bytes[i * size + byte] = static_cast<std::uint8_t>(bits[i] >> (8 * byte));
    }
    file.tensors.push_back(std::move(t));
  }
  const std::vector<std::uint8_t> bytes = serialize_safetensors(file, path);
  parse_trace(bytes, path);  // the reader's checks: schema, metadata, shapes
  cli::write_output_file(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
                         "the trace");
}

}  // namespace

void register_traces(pyb::module_& m) {
  using namespace pyb::literals;
  m.def("load_trace", &load_trace, "path"_a);
  m.def("save_trace", &save_trace, "path"_a, "tensors"_a, "metadata"_a);
}

}  // namespace fb::py
