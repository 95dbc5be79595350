// traces/trace.cpp: validation of the trace schema, exact accessors and the builder
// (contract in trace.hpp).
#include "traces/trace.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <limits>
#include <tuple>

#include "formats/decimal_text.hpp"
#include "traces/metadata_bool.hpp"

namespace fb {

namespace {

[[noreturn]] void fail(std::string_view source, const std::string& message) {
  throw TraceError(std::string(source) + ": " + message);
}

std::string key_prefix(std::string_view key) { return "__metadata__: key '" + std::string(key) + "': "; }

std::string floating_dtype_names() {
  std::string out;
  for (Dtype d : kAllDtypes)
    if (dtype_is_floating(d)) out += (out.empty() ? "" : ", ") + std::string(dtype_name(d));
  return out;
}

std::optional<std::string_view> find_key(const std::map<std::string, std::string>& m, std::string_view key) {
  const auto it = m.find(std::string(key));
  if (it == m.end()) return std::nullopt;
  return std::string_view(it->second);
}

}  // namespace

std::optional<Format> parse_trace_dtype(std::string_view text) {
  if (text.starts_with("torch.")) text.remove_prefix(6);
  static constexpr std::array<std::pair<std::string_view, Format>, 8> kTorchNames{{
      {"bfloat16", formats::bf16},
      {"float16", formats::fp16},
      {"half", formats::fp16},
      {"float32", formats::fp32},
      {"float", formats::fp32},
      {"float8_e4m3fn", formats::e4m3},
      {"float8_e5m2", formats::e5m2},
      {"float8_e4m3fnuz", formats::e4m3fnuz},
  }};
  for (const auto& [name, format] : kTorchNames)
    if (text == name) return format;
  Format parsed{};
  if (parse_format(text, parsed)) return parsed;
  return std::nullopt;
}

namespace {

TraceMetadata parse_metadata(const std::map<std::string, std::string>& raw, std::string_view source) {
  TraceMetadata out;
  const auto src = find_key(raw, trace_keys::source);
  if (!src)
    fail(source,
         "__metadata__: missing key 'source' (expected \"cuda:<gpu>\" for a hardware capture, \"emulated\" "
         "or \"unknown\"; for a bare capture, state it with --source)");
  if (!is_valid_source(*src))
    fail(source, key_prefix(trace_keys::source) +
                     "expected \"cuda:<gpu>\" for a hardware capture, \"emulated\" or "
                     "\"unknown\", got " +
                     quoted_name(*src));
  out.source = std::string(*src);

  for (auto [key, field] :
       {std::pair{trace_keys::kernel, &out.kernel}, std::pair{trace_keys::model, &out.model},
        std::pair{trace_keys::device, &out.device}, std::pair{trace_keys::compute_capability, &out.compute_capability},
        std::pair{trace_keys::versions, &out.versions}})
    if (const auto v = find_key(raw, key)) *field = std::string(*v);
  // Replay picks the measured SFU tables by it ("9.0"): a value it cannot read ("9.0 ", "9.00")
  // would silently replay a hardware capture under other special functions. CUDA writes it as
  // major.minor, a major of one or two digits (no leading zero) and a one-digit minor.
  if (const auto v = find_key(raw, trace_keys::compute_capability)) {
    const std::size_t dot = v->find('.');
    const auto digits = [](std::string_view s, std::size_t most) {
      return !s.empty() && s.size() <= most && (s.size() == 1 || s[0] != '0') &&
             std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    if (*v != "none" &&
        (dot == std::string_view::npos || !digits(v->substr(0, dot), 2) || !digits(v->substr(dot + 1), 1)))
      fail(source, key_prefix(trace_keys::compute_capability) +
                       "expected MAJOR.MINOR (\"9.0\", as torch.cuda.get_device_capability gives) or \"none\", got " +
                       quoted_name(*v));
  }

  if (const auto v = find_key(raw, trace_keys::softmax_scale)) {
    double scale = 0.0;
    const auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), scale);
    if (ec != std::errc() || end != v->data() + v->size() || !std::isfinite(scale) || !(scale > 0.0))
      fail(source,
           key_prefix(trace_keys::softmax_scale) + "expected a finite positive decimal number, got " + quoted_name(*v));
    out.softmax_scale = scale;
  }
  if (const auto v = find_key(raw, trace_keys::causal)) {
    out.causal = parse_metadata_bool(*v);
    if (!out.causal) fail(source, key_prefix(trace_keys::causal) + "expected true or false, got " + quoted_name(*v));
  }
  if (const auto v = find_key(raw, trace_keys::dtype)) {
    out.dtype = parse_trace_dtype(*v);
    if (!out.dtype)
      fail(source, key_prefix(trace_keys::dtype) +
                       "expected a format name (bf16, fp16, fp32, e4m3, e5m2) or a torch "
                       "dtype name, got " +
                       quoted_name(*v));
  }
  for (auto [key, field] :
       {std::pair{trace_keys::block_m, &out.block_m}, std::pair{trace_keys::block_n, &out.block_n}}) {
    const auto v = find_key(raw, key);
    if (!v) continue;
    int size = 0;
    const auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), size);
    if (ec != std::errc() || end != v->data() + v->size() || size <= 0 || size > 65536)
      fail(source, key_prefix(key) + "expected a positive tile size (at most 65536), got " + quoted_name(*v));
    *field = size;
  }
  for (auto [key, field] :
       {std::pair{trace_keys::seqlen_q, &out.seqlen_q}, std::pair{trace_keys::seqlen_k, &out.seqlen_k}}) {
    const auto v = find_key(raw, key);
    if (!v) continue;
    int length = 0;
    const auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), length);
    if (ec != std::errc() || end != v->data() + v->size() || length <= 0)
      fail(source, key_prefix(key) + "expected a positive sequence length (at most 2^31-1), got " + quoted_name(*v));
    *field = length;
  }
  if (const auto v = find_key(raw, trace_keys::causal_alignment)) {
    if (*v != "none" && *v != "bottom-right" && *v != "top-left")
      fail(source, key_prefix(trace_keys::causal_alignment) + "expected none, bottom-right or top-left, got " +
                       quoted_name(*v));
    if (out.causal && *out.causal != (*v != "none"))
      fail(source, key_prefix(trace_keys::causal_alignment) + "says " + quoted_name(*v) + " but key 'causal' says " +
                       (*out.causal ? "true" : "false"));
    out.causal_alignment = std::string(*v);
    // The alignment alone states causality: a trace saying top-left is never replayed unmasked.
    if (!out.causal) out.causal = *v != "none";
  }
  return out;
}

constexpr std::array<std::string_view, 4> kDimNames{"batch", "heads", "rows", "last"};

// Checks `name` against the expected [B,H,N,X] dims; a zero entry in `expected` means "any".
void check_shape(std::string_view source, const SafeTensor& t, const std::string& reference_name,
                 const std::vector<std::uint64_t>& reference_shape, const std::vector<std::uint64_t>& expected,
                 bool allow_rank3) {
  const auto& shape = t.shape;
  const bool rank_ok = shape.size() == 4 || (allow_rank3 && shape.size() == 3);
  if (!rank_ok)
    fail(source,
         "tensor " + quoted_name(t.name) + ": shape " + shape_string(shape) + " has rank " +
             std::to_string(shape.size()) + "; expected " +
             (allow_rank3 ? "[batch, heads, rows] or [batch, heads, rows, 1]" : "rank 4 [batch, heads, rows, cols]"));
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (expected[d] != 0 && shape[d] != expected[d])
      fail(source, "tensor " + quoted_name(t.name) + ": shape " + shape_string(shape) + " does not match " +
                       reference_name + "'s " + shape_string(reference_shape) + " in the " + std::string(kDimNames[d]) +
                       " dim (expected " + std::to_string(expected[d]) + ")");
  }
}

void check_floating(std::string_view source, const SafeTensor& t) {
  if (!dtype_is_floating(t.dtype))
    fail(source, "tensor " + quoted_name(t.name) + ": dtype " + std::string(dtype_name(t.dtype)) +
                     " is not a floating-point dtype; expected one of " + floating_dtype_names());
}

void validate_tensors(const Safetensors& file, const TraceMetadata& metadata, std::string_view source) {
  for (const char* required : {"q", "k", "v", "o"})
    if (!file.find(required))
      fail(source, "missing required tensor '" + std::string(required) + "' (a trace always has q, k, v and o)");
  const SafeTensor& q = *file.find("q");
  const SafeTensor& k = *file.find("k");
  check_floating(source, q);
  if (q.shape.size() != 4)
    fail(source, "tensor 'q': shape " + shape_string(q.shape) + " has rank " + std::to_string(q.shape.size()) +
                     "; expected rank 4 [batch, heads, rows, head_dim]");
  check_floating(source, k);
  check_shape(source, k, "q", q.shape, {q.shape[0], 0, 0, q.shape[3]}, false);
  // Sizes first: a zero head count is an empty tensor, not a grouping that fails to divide.
  for (const SafeTensor* t : {&q, &k})
    for (std::uint64_t dim : t->shape)
      if (dim == 0 || dim > static_cast<std::uint64_t>(std::numeric_limits<int>::max()))
        fail(source,
             "tensor " + quoted_name(t->name) + ": shape " + shape_string(t->shape) + " has a dim outside [1, 2^31-1]");
  // Grouped-query attention: k and v may carry fewer heads than q, in groups that divide q's.
  if (k.shape.size() == 4 && (k.shape[1] == 0 || q.shape[1] % k.shape[1] != 0))
    fail(source, "tensor 'k': shape " + shape_string(k.shape) + " has " + std::to_string(k.shape[1]) +
                     " heads, which do not divide q's " + std::to_string(q.shape[1]) +
                     " (grouped-query attention needs q heads = a whole multiple of k heads)");

  const std::vector<std::uint64_t>& qs = q.shape;
  const std::vector<std::uint64_t>& ks = k.shape;
  struct Rule {
    const char* name;
    const char* reference;  // "q" or "k"
    std::array<std::uint64_t, 4> expected;
    bool allow_rank3;
  };
  const Rule rules[] = {
      {"v", "k", {ks[0], ks[1], ks[2], ks[3]}, false},
      {"o", "q", {qs[0], qs[1], qs[2], qs[3]}, false},
      {"do", "q", {qs[0], qs[1], qs[2], qs[3]}, false},
      {"dq", "q", {qs[0], qs[1], qs[2], qs[3]}, false},
      {"dk", "k", {ks[0], ks[1], ks[2], ks[3]}, false},
      {"dv", "k", {ks[0], ks[1], ks[2], ks[3]}, false},
      {"lse", "q", {qs[0], qs[1], qs[2], 1}, true},
      {"delta", "q", {qs[0], qs[1], qs[2], 1}, true},
      {"m", "q", {qs[0], qs[1], qs[2], 1}, true},
      {"l", "q", {qs[0], qs[1], qs[2], 1}, true},
      {"s", "q", {qs[0], qs[1], qs[2], ks[2]}, false},
      {"p", "q", {qs[0], qs[1], qs[2], ks[2]}, false},
      // the path captures' own statistics (gpu/capture_paths.py): the Triton tutorial's M and
      // flex_attention's returned LSE
      {"m_log2_tutorial", "q", {qs[0], qs[1], qs[2], 1}, true},
      {"lse_flex", "q", {qs[0], qs[1], qs[2], 1}, true},
  };
  for (const Rule& rule : rules) {
    const SafeTensor* t = file.find(rule.name);
    if (!t) continue;
    check_floating(source, *t);
    const auto& reference = std::string(rule.reference) == "q" ? qs : ks;
    check_shape(source, *t, rule.reference, reference, {rule.expected.begin(), rule.expected.end()}, rule.allow_rank3);
  }
  for (const char* shares : {"k", "v"}) {
    const SafeTensor& t = *file.find(shares);
    if (t.dtype != q.dtype)
      fail(source, "tensor '" + std::string(shares) + "': dtype " + std::string(dtype_name(t.dtype)) +
                       " differs from q's " + std::string(dtype_name(q.dtype)) + " (q, k and v share one dtype)");
  }
  // Stated lengths must be the shapes' (the query length q's rows, the key length k's rows).
  for (auto [key, stated, tensor] : {std::tuple{trace_keys::seqlen_q, metadata.seqlen_q, &q},
                                     std::tuple{trace_keys::seqlen_k, metadata.seqlen_k, &k}})
    if (stated && static_cast<std::uint64_t>(*stated) != tensor->shape[2])
      fail(source, key_prefix(key) + "says " + std::to_string(*stated) + " but tensor " + quoted_name(tensor->name) +
                       " has " + std::to_string(tensor->shape[2]) + " rows " + shape_string(tensor->shape));
  if (metadata.dtype) {
    const auto q_format = dtype_format(q.dtype);
    if (q_format && !(*q_format == *metadata.dtype))
      fail(source, key_prefix(trace_keys::dtype) + "says " + metadata.dtype->name + " but tensor 'q' is " +
                       std::string(dtype_name(q.dtype)));
  }
}

}  // namespace

Trace Trace::from_safetensors(Safetensors file, std::string_view source_name) {
  Trace trace;
  trace.source_name_ = std::string(source_name);
  trace.metadata_ = parse_metadata(file.metadata, source_name);
  validate_tensors(file, trace.metadata_, source_name);
  trace.file_ = std::move(file);
  return trace;
}

const SafeTensor& Trace::tensor(std::string_view name) const {
  const SafeTensor* t = file_.find(name);
  if (!t) fail(source_name_, "no tensor " + quoted_name(name) + " in this trace");
  return *t;
}

std::vector<double> Trace::values(std::string_view name) const {
  const SafeTensor& t = tensor(name);
  const std::size_t count = t.bytes.size() / dtype_size(t.dtype);
  std::vector<double> out(count);
  const auto format = dtype_format(t.dtype);
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t raw = t.element_bits(i);
    double value = 0.0;
    if (format) {
      value = to_double(*format, static_cast<std::uint32_t>(raw));
    } else if (t.dtype == Dtype::F64) {
      value = std::bit_cast<double>(raw);
    } else if (t.dtype == Dtype::BOOL) {
      value = raw != 0 ? 1.0 : 0.0;
    } else {
      const bool is_signed =
          t.dtype == Dtype::I8 || t.dtype == Dtype::I16 || t.dtype == Dtype::I32 || t.dtype == Dtype::I64;
      const unsigned bits = static_cast<unsigned>(8 * dtype_size(t.dtype));
      std::uint64_t magnitude = raw;
      bool negative = false;
      if (is_signed && bits < 64 && (raw >> (bits - 1)) != 0) {
        negative = true;
        magnitude = (std::uint64_t{1} << bits) - raw;
      } else if (is_signed && bits == 64 && (raw >> 63) != 0) {
        negative = true;
        magnitude = ~raw + 1;
      }
      if (magnitude > (std::uint64_t{1} << 53))
        fail(source_name_, "tensor " + quoted_name(name) + ": element " + std::to_string(i) +
                               " is an integer too large to be exact as a double; read its bytes instead");
      value = negative ? -static_cast<double>(magnitude) : static_cast<double>(magnitude);
    }
    out[i] = value;
  }
  return out;
}

RawTensor Trace::bits(std::string_view name) const {
  const SafeTensor& t = tensor(name);
  const auto format = dtype_format(t.dtype);
  if (!format)
    fail(source_name_, "tensor " + quoted_name(name) + " has dtype " + std::string(dtype_name(t.dtype)) +
                           ", which has no flashbits format; read it with values()");
  RawTensor out{*format, t.shape, {}};
  const std::size_t count = t.bytes.size() / dtype_size(t.dtype);
  out.bits.resize(count);
  for (std::size_t i = 0; i < count; ++i) out.bits[i] = static_cast<std::uint32_t>(t.element_bits(i));
  return out;
}

Trace parse_trace(std::span<const std::uint8_t> bytes, std::string_view source_name) {
  return Trace::from_safetensors(parse_safetensors(bytes, source_name), source_name);
}

Trace read_trace(const std::filesystem::path& path) {
  return Trace::from_safetensors(read_safetensors(path), path.string());
}

bool is_valid_source(std::string_view source) {
  if (source == kEmulatedSource || source == kUnknownSource) return true;
  if (!source.starts_with(kCudaSourcePrefix)) return false;
  // The GPU's name is printed in every report's provenance line: not blank, not padded, and no
  // control character (a newline would forge a line of the report).
  const std::string_view gpu = source.substr(kCudaSourcePrefix.size());
  const auto control = [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; };
  return !gpu.empty() && gpu.front() != ' ' && gpu.back() != ' ' && std::none_of(gpu.begin(), gpu.end(), control);
}

bool is_hardware_capture(const Trace& trace) { return trace.metadata().source.starts_with(kCudaSourcePrefix); }

std::string provenance_text(const TraceMetadata& m) {
  if (m.source.starts_with(kCudaSourcePrefix))
    return "hardware capture (source " + m.source + (m.device.empty() ? "" : ", device " + m.device) + ")";
  if (m.source == kEmulatedSource)
    return "EMULATED trace (source emulated): produced by flashbits, not a hardware capture";
  return "capture of UNKNOWN provenance (source unknown): not known to be a hardware capture";
}

std::map<std::string, std::string> metadata_strings(const TraceMetadata& m) {
  std::map<std::string, std::string> out;
  auto put = [&](std::string_view key, const std::string& value) {
    if (!value.empty()) out[std::string(key)] = value;
  };
  put(trace_keys::source, m.source);
  put(trace_keys::kernel, m.kernel);
  put(trace_keys::model, m.model);
  put(trace_keys::device, m.device);
  put(trace_keys::compute_capability, m.compute_capability);
  put(trace_keys::versions, m.versions);
  if (m.softmax_scale) put(trace_keys::softmax_scale, shortest_decimal(*m.softmax_scale));
  if (m.causal) put(trace_keys::causal, *m.causal ? "true" : "false");
  if (m.dtype) put(trace_keys::dtype, m.dtype->name);
  if (m.block_m) put(trace_keys::block_m, std::to_string(*m.block_m));
  if (m.block_n) put(trace_keys::block_n, std::to_string(*m.block_n));
  if (m.seqlen_q) put(trace_keys::seqlen_q, std::to_string(*m.seqlen_q));
  if (m.seqlen_k) put(trace_keys::seqlen_k, std::to_string(*m.seqlen_k));
  if (m.causal_alignment) put(trace_keys::causal_alignment, *m.causal_alignment);
  return out;
}

TraceBuilder::TraceBuilder(TraceMetadata metadata) : metadata_(std::move(metadata)) {}

TraceBuilder& TraceBuilder::extra_metadata(std::string key, std::string value) {
  extra_[std::move(key)] = std::move(value);
  return *this;
}

TraceBuilder& TraceBuilder::add_bits(std::string name, const Format& format, std::vector<std::uint64_t> shape,
                                     std::span<const std::uint32_t> bits) {
  const auto dtype = dtype_of_format(format);
  if (!dtype)
    fail("trace builder", "tensor " + quoted_name(name) + ": format " + format.name + " has no safetensors dtype");
  SafeTensor t{std::move(name), *dtype, std::move(shape), {}};
  if (t.element_count() != bits.size())
    fail("trace builder", "tensor " + quoted_name(t.name) + ": " + std::to_string(bits.size()) +
                              " values do not fill shape " + shape_string(t.shape));
  t.bytes.reserve(bits.size() * dtype_size(t.dtype));
  for (std::uint32_t word : bits) t.append_element_bits(word);
  tensors_.push_back(std::move(t));
  return *this;
}

TraceBuilder& TraceBuilder::add_values(std::string name, const Format& format, std::vector<std::uint64_t> shape,
                                       std::span<const double> values) {
  std::vector<std::uint32_t> bits(values.size());
  for (std::size_t i = 0; i < values.size(); ++i)
    if (!from_double_exact(format, values[i], bits[i]))
      fail("trace builder", "tensor " + quoted_name(name) + ": element " + std::to_string(i) + " (" +
                                shortest_decimal(values[i]) + ") is not exactly representable in " + format.name);
  return add_bits(std::move(name), format, std::move(shape), bits);
}

TraceBuilder& TraceBuilder::add_f64(std::string name, std::vector<std::uint64_t> shape,
                                    std::span<const double> values) {
  SafeTensor t{std::move(name), Dtype::F64, std::move(shape), {}};
  if (t.element_count() != values.size())
    fail("trace builder", "tensor " + quoted_name(t.name) + ": " + std::to_string(values.size()) +
                              " values do not fill shape " + shape_string(t.shape));
  t.bytes.reserve(values.size() * 8);
  for (double v : values) t.append_element_bits(std::bit_cast<std::uint64_t>(v));
  tensors_.push_back(std::move(t));
  return *this;
}

Safetensors TraceBuilder::to_safetensors() const {
  Safetensors file;
  file.tensors = tensors_;
  file.metadata = extra_;
  for (auto& [key, value] : metadata_strings(metadata_)) file.metadata[key] = value;
  return file;
}

Trace TraceBuilder::build(std::string_view source_name) const {
  // Through the bytes, so a built trace is exactly what a reader of the file would get.
  return parse_trace(serialize(source_name), source_name);
}

std::vector<std::uint8_t> TraceBuilder::serialize(std::string_view source_name) const {
  std::vector<std::uint8_t> bytes = serialize_safetensors(to_safetensors(), source_name);
  parse_trace(bytes, source_name);  // refuse to produce a file the reader would reject
  return bytes;
}

void TraceBuilder::write(const std::filesystem::path& path) const {
  serialize(path.string());  // validates
  write_safetensors(path, to_safetensors());
}

}  // namespace fb
