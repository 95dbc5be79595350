// python/src/bind_traces.cpp: load_trace() and save_trace(), the safetensors traces of
// traces/trace.hpp, metadata included.
//
// Contract:
// - load_trace(path, ...) reads and validates a trace exactly as `flashbits replay` does
//   (ValueError with the CLI's one-line message on any defect) and returns its metadata
//   (every key, as strings), each tensor's exact values (float64) and its dtype. A bare
//   capture (a .safetensors dump without metadata, an .npz, a directory of .npy files;
//   bshd layout; grouped-query) is read as `flashbits import` reads it, with what it lacks
//   given as source/model/scale/causal/dtype/layout (traces/capture_import.hpp). causal is
//   the CLI's --causal text (true, false, top-left, bottom-right); "notes" lists the lines
//   the CLI prints as notes on stderr (an alignment assumed for a plain true with N != Nk).
// - save_trace(path, tensors, metadata) encodes each tensor in its format (values must be
//   exactly representable, bit patterns of the format's container width and valid:
//   operand_bits), serialises, validates the bytes with the reader (parse_trace) and writes
//   the file whole or not at all (api::write_output_file). The caller states the source
//   (the Python layer refuses a save without one, as `flashbits import` does). A metadata key
//   that spells one of the schema's keys another way ("scale", "is_causal", "causalAlignment")
//   is a ValueError naming the schema's key: the reader keeps any other key as free text, so
//   such a key was written and never read.
#include <array>
#include <cctype>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "attention/trace_inputs.hpp"
#include "capture_args.hpp"
#include "common.hpp"
#include "traces/capture_import.hpp"
#include "traces/safetensors.hpp"
#include "traces/trace.hpp"

namespace fb::py {

CaptureOptions capture_options_from(const std::optional<std::string>& source, const std::optional<std::string>& model,
                                    std::optional<double> scale, const std::optional<std::string>& causal,
                                    const std::optional<std::string>& dtype, const std::string& layout,
                                    CollectedNotes& notes) {
  CaptureOptions options;
  if (source) {
    if (!is_valid_source(*source))
      throw api::InputError("source " + *source + ": expected cuda:<gpu>, emulated or unknown");
    options.source = *source;
  }
  options.model = model;
  if (scale) {
    if (!std::isfinite(*scale) || !(*scale > 0)) throw api::InputError("scale: expected a finite positive number");
    options.softmax_scale = scale;
  }
  if (causal) {
    const auto statement = parse_causal_statement(*causal);
    if (!statement) throw api::InputError("causal " + *causal + ": expected " + std::string(kCausalStatementValues));
    options.set_causal(*statement);
  }
  options.note = [&notes](CaptureOptions::NoteKind, const std::string& line) {
    std::lock_guard<std::mutex> hold(notes.lock);
    notes.lines.push_back(line);
  };
  if (dtype) options.dtype = parse_fmt(*dtype, "dtype");
  const auto parsed_layout = parse_capture_layout(layout);
  if (!parsed_layout) throw api::InputError("layout " + layout + ": expected auto, bhsd or bshd");
  options.layout = *parsed_layout;
  return options;
}

namespace {

pyb::dict load_trace(const std::string& path, const std::optional<std::string>& source,
                     const std::optional<std::string>& model, std::optional<double> scale,
                     const std::optional<std::string>& causal, const std::optional<std::string>& dtype,
                     const std::string& layout) {
  CollectedNotes notes;  // the Python layer warns with them
  const CaptureOptions options = capture_options_from(source, model, scale, causal, dtype, layout, notes);
  const Trace trace = import_capture({path}, options);
  // A trace that names its kernel is one to replay: checked as replay (and import) check it, so
  // that an unknown model is refused here, not returned to fail later.
  if (!trace.metadata().model.empty()) attn::check_replayable(trace, "");
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
    dtypes[pyb::str(t.name)] =
        f ? std::string(f->name) : (t.dtype == Dtype::F64 ? std::string("fp64") : std::string(dtype_name(t.dtype)));
  }
  pyb::dict d;
  d["path"] = path;
  d["metadata"] = metadata;
  d["tensors"] = tensors;
  d["formats"] = dtypes;
  d["hardware"] = is_hardware_capture(trace);
  // The mask as replay reads it (traces/trace.cpp: a causal_alignment alone states causality;
  // no alignment on a causal trace is bottom-right), so that Python never re-derives it.
  const TraceMetadata& md = trace.metadata();
  const bool masked = md.causal.value_or(false);
  d["causal"] = masked;
  d["causal_alignment"] = !masked ? "none" : md.causal_alignment == "top-left" ? "top-left" : "bottom-right";
  // The reader's notes, then what the scale and the mask above assumed (replay prints the same
  // lines): Trace.scale is None where no softmax_scale is recorded, and attention(scale=None)
  // then takes 1/sqrt(D) as replay does.
  pyb::list note_list;
  for (const std::string& line : notes.lines) note_list.append(line);
  for (const std::string& line : attn::assumed_metadata_notes(trace))
    note_list.append(line.substr(std::string("note: ").size()));
  d["notes"] = note_list;
  return d;
}

// The other names a capture script is likely to give one of the schema's keys (traces/trace.hpp
// trace_keys::all): PyTorch's and flash_attn's argument names, common dump keys.
constexpr std::array<std::pair<std::string_view, std::string_view>, 21> kSchemaKeyAliases{{
    {"scale", trace_keys::softmax_scale},
    {"sm_scale", trace_keys::softmax_scale},
    {"attn_scale", trace_keys::softmax_scale},
    {"qk_scale", trace_keys::softmax_scale},
    {"softmax_scaling", trace_keys::softmax_scale},
    {"is_causal", trace_keys::causal},
    {"causal_mask", trace_keys::causal},
    {"alignment", trace_keys::causal_alignment},
    {"causal_align", trace_keys::causal_alignment},
    {"mask_alignment", trace_keys::causal_alignment},
    {"causal_alignement", trace_keys::causal_alignment},
    {"seqlen_kv", trace_keys::seqlen_k},
    {"kv_seqlen", trace_keys::seqlen_k},
    {"max_seqlen_k", trace_keys::seqlen_k},
    {"max_seqlen_q", trace_keys::seqlen_q},
    {"torch_dtype", trace_keys::dtype},
    {"data_type", trace_keys::dtype},
    {"compute_cap", trace_keys::compute_capability},
    {"model_name", trace_keys::model},
    {"block_size_m", trace_keys::block_m},
    {"block_size_n", trace_keys::block_n},
}};

// A key without case and separators: "Causal-Alignment", "causalAlignment" and
// "causal_alignment" are one key to a reader.
std::string folded_key(std::string_view key) {
  std::string out;
  for (const char c : key)
    if (c != '_' && c != '-' && c != ' ' && c != '.')
      out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  return out;
}

// The schema key that `key` spells another way, or empty when it is a schema key itself or
// none of them.
std::string_view schema_key_meant(const std::string& key) {
  for (const std::string_view schema : trace_keys::all)
    if (key == schema) return {};
  const std::string folded = folded_key(key);
  for (const std::string_view schema : trace_keys::all)
    if (folded == folded_key(schema)) return schema;
  for (const auto& [alias, schema] : kSchemaKeyAliases)
    if (folded == folded_key(alias)) return schema;
  return {};
}

void check_metadata_keys(const std::map<std::string, std::string>& metadata) {
  for (const auto& [key, value] : metadata)
    if (const std::string_view meant = schema_key_meant(key); !meant.empty())
      throw api::InputError("metadata[" + quoted_name(key) + "]: the trace schema's key for this is '" +
                            std::string(meant) + "' (write metadata={'" + std::string(meant) +
                            "': ...}); under any other name it is kept as free text and never read");
}

// tensors: (name, array, format) in the order they are written; an array holds float64
// values or bit patterns (unsigned integers: operand_bits).
void save_trace(const std::string& path, const std::vector<std::tuple<std::string, pyb::array, std::string>>& tensors,
                const std::map<std::string, std::string>& metadata) {
  check_metadata_keys(metadata);
  Safetensors file;
  file.metadata = metadata;
  for (const auto& [name, array, fmt] : tensors) {
    SafeTensor t;
    t.name = name;
    for (pyb::ssize_t i = 0; i < array.ndim(); ++i) t.shape.push_back(static_cast<std::uint64_t>(array.shape(i)));
    if (fmt == "fp64") {
      if (array.dtype().kind() == 'u')
        throw api::InputError(name + ": fp64 tensors are given as values, not bit patterns");
      const carray<double> a(array);
      t.dtype = Dtype::F64;
      t.bytes.resize(static_cast<std::size_t>(a.size()) * 8);
      std::memcpy(t.bytes.data(), a.data(), t.bytes.size());
    } else {
      const Format f = parse_fmt(fmt, (name + ": format").c_str());
      const auto dtype = dtype_of_format(f);
      if (!dtype)
        throw api::InputError(name + ": format " + fmt +
                              " cannot be stored in a trace (bf16, fp16, fp32, e4m3, e5m2 or fp64)");
      t.dtype = *dtype;
      const std::vector<std::uint32_t> bits = operand_bits(f, array, name);
      t.bytes.reserve(bits.size() * dtype_size(*dtype));
      for (std::uint32_t word : bits) t.append_element_bits(word);
    }
    file.tensors.push_back(std::move(t));
  }
  const std::vector<std::uint8_t> bytes = serialize_safetensors(file, path);
  const Trace written = parse_trace(bytes, path);  // the reader's checks: schema, metadata, shapes
  // A trace that names its kernel must replay (as `flashbits import` ensures): a model name the
  // CLI refuses was written, and refused only when read back.
  if (!written.metadata().model.empty()) attn::check_replayable(written, "");
  api::check_output_path("save_trace: path", path);
  api::write_output_file(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
                         "the trace");
}

}  // namespace

void register_traces(pyb::module_& m) {
  using namespace pyb::literals;
  m.def("load_trace", &load_trace, "path"_a, "source"_a = pyb::none(), "model"_a = pyb::none(), "scale"_a = pyb::none(),
        "causal"_a = pyb::none(), "dtype"_a = pyb::none(), "layout"_a = "auto", InDefaultFloatingPoint());
  m.def("save_trace", &save_trace, "path"_a, "tensors"_a, "metadata"_a, InDefaultFloatingPoint());
}

}  // namespace fb::py
