// traces/trace.hpp: the attention trace schema (docs/DESIGN.md §9) on top of safetensors.
//
// A trace is a .safetensors file that `safetensors.torch.save_file` can write. Tensors are
// indexed [batch][head][row][column]:
//   required  q [B,H,N,D], k [B,Hk,Nk,D], v [B,Hk,Nk,D], o [B,H,N,D], where Hk divides H
//             (grouped-query attention: q head h reads k/v head h / (H/Hk), as FA2 and
//             SDPA's enable_gqa do; Hk = H is ordinary multi-head attention). The query
//             length N (seqlen_q) and the key length Nk (seqlen_k) are the shapes' and may
//             differ (decoding with a KV cache, cross-attention; causal then means FA2's
//             bottom-right alignment); traces written before they could differ have N = Nk.
//   optional  do, dq like q; dk, dv like k; lse, delta, m, l as [B,H,N] or [B,H,N,1];
//             s, p as [B,H,N,Nk]; any other name is kept unchecked (instrumented kernels
//             may capture more per-row intermediates).
// Every named tensor above must have a floating dtype; q, k and v share one.
// __metadata__ (all values are strings, as safetensors demands):
//   source             REQUIRED: "cuda:<gpu>" for a hardware capture, "emulated" for one
//                      flashbits produced, "unknown" for a capture whose provenance its
//                      importer did not state; anything else is an error, so an emulated
//                      (or unknown) trace can never pass as a hardware capture.
//   kernel, model, device, versions   free text
//   compute_capability MAJOR.MINOR ("9.0": replay picks the measured SFU tables by it) or
//                      "none" (a CPU stand-in's)
//   softmax_scale      a finite positive decimal (written shortest-round-trip, so exact)
//   causal             true|false (Python's True|False and 1|0 accepted)
//   dtype              a flashbits format name or torch dtype name; must match q's dtype
//   block_m, block_n   positive tile sizes
//   seqlen_q, seqlen_k optional, each a positive integer equal to q's rows (N) and k's rows
//                      (Nk): a capture may state them; the shapes are what is read
//   causal_alignment   optional: none (not causal), bottom-right (key j <= row i + Nk - N, FA2
//                      >= 2.1, the default) or top-left (j <= i, PyTorch's is_causal); must
//                      agree with causal where both are given, and states it where causal
//                      is absent (TraceMetadata::causal is then true unless none). With
//                      N = Nk the two alignments are one mask.
//   any other key      kept in raw_metadata()
// Contract: read_trace/parse_trace/Trace::from_safetensors either return a trace that
// satisfies all of the above or throw TraceError with one line naming the file, the tensor
// or key, and what was expected. Values are exposed exactly (no rounding anywhere).
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "formats/format.hpp"
#include "traces/safetensors.hpp"

namespace fb {

namespace trace_keys {
inline constexpr std::string_view source = "source";
inline constexpr std::string_view kernel = "kernel";
inline constexpr std::string_view model = "model";
inline constexpr std::string_view device = "device";
inline constexpr std::string_view compute_capability = "compute_capability";
inline constexpr std::string_view versions = "versions";
inline constexpr std::string_view softmax_scale = "softmax_scale";
inline constexpr std::string_view causal = "causal";
inline constexpr std::string_view dtype = "dtype";
inline constexpr std::string_view block_m = "block_m";
inline constexpr std::string_view block_n = "block_n";
inline constexpr std::string_view seqlen_q = "seqlen_q";
inline constexpr std::string_view seqlen_k = "seqlen_k";
inline constexpr std::string_view causal_alignment = "causal_alignment";
// Every key above (a reader or writer that must know the whole schema lists it from here).
inline constexpr std::array<std::string_view, 14> all{
    source, kernel, model,   device,  compute_capability, versions, softmax_scale,
    causal, dtype,  block_m, block_n, seqlen_q,           seqlen_k, causal_alignment};
}  // namespace trace_keys

inline constexpr std::string_view kEmulatedSource = "emulated";
inline constexpr std::string_view kCudaSourcePrefix = "cuda:";
inline constexpr std::string_view kUnknownSource = "unknown";

struct TraceMetadata {
  std::string source;                                               // "cuda:<gpu>", "emulated" or "unknown"
  std::string kernel, model, device, compute_capability, versions;  // empty when absent
  std::optional<double> softmax_scale;
  std::optional<bool> causal;
  std::optional<Format> dtype;
  std::optional<int> block_m, block_n;
  std::optional<int> seqlen_q, seqlen_k;        // when stated: q's and k's rows (validated against them)
  std::optional<std::string> causal_alignment;  // "none", "bottom-right" or "top-left" when stated
};

// A tensor's stored bit patterns (in the container of `format`), row-major.
struct RawTensor {
  Format format;
  std::vector<std::uint64_t> shape;
  std::vector<std::uint32_t> bits;
};

class Trace {
 public:
  // Validates the schema; throws TraceError naming `source_name` and the offending part.
  static Trace from_safetensors(Safetensors file, std::string_view source_name);

  const std::string& source_name() const { return source_name_; }
  const TraceMetadata& metadata() const { return metadata_; }
  const std::map<std::string, std::string>& raw_metadata() const { return file_.metadata; }
  const Safetensors& file() const { return file_; }

  bool has(std::string_view name) const { return file_.find(name) != nullptr; }
  const SafeTensor& tensor(std::string_view name) const;  // TraceError when absent
  // Exact values: every floating dtype, and integers up to 2^53 in magnitude (BOOL is 0/1).
  std::vector<double> values(std::string_view name) const;
  // Bit patterns with their format; TraceError for dtypes with no fb::Format (F64, ints).
  RawTensor bits(std::string_view name) const;

  std::uint64_t batch() const { return q_shape()[0]; }
  std::uint64_t heads() const { return q_shape()[1]; }
  std::uint64_t kv_heads() const { return tensor("k").shape[1]; }  // divides heads()
  std::uint64_t rows() const { return q_shape()[2]; }
  std::uint64_t head_dim() const { return q_shape()[3]; }
  std::uint64_t kv_rows() const { return tensor("k").shape[2]; }  // the key length; may differ from rows()

 private:
  const std::vector<std::uint64_t>& q_shape() const { return tensor("q").shape; }
  std::string source_name_;
  Safetensors file_;
  TraceMetadata metadata_;
};

Trace parse_trace(std::span<const std::uint8_t> bytes, std::string_view source_name);
Trace read_trace(const std::filesystem::path& path);

// The metadata "dtype" value: a flashbits format name or a torch dtype name
// ("torch.bfloat16", "float16", "float8_e4m3fn"); nullopt for anything else.
std::optional<Format> parse_trace_dtype(std::string_view text);
// "cuda:<gpu>" (a gpu name neither empty nor padded with spaces, without control characters),
// "emulated" or "unknown".
bool is_valid_source(std::string_view source);
// True only for source "cuda:<gpu>": a replay must never present an emulated trace as one.
bool is_hardware_capture(const Trace& trace);
// One line saying where a trace came from, for every report that prints it: a hardware
// capture names its GPU; "emulated" and "unknown" say in capitals that they are not one.
std::string provenance_text(const TraceMetadata& metadata);

// Builds a trace (the emulator ships example traces with source = "emulated"). Tensors are
// written in the order added; build()/write() validate exactly as the reader does.
class TraceBuilder {
 public:
  explicit TraceBuilder(TraceMetadata metadata);
  TraceBuilder& extra_metadata(std::string key, std::string value);
  // Bit patterns of a format safetensors can name (bf16, fp16, fp32, e4m3, e5m2).
  TraceBuilder& add_bits(std::string name, const Format& format, std::vector<std::uint64_t> shape,
                         std::span<const std::uint32_t> bits);
  // Values that must each be exactly representable in `format` (TraceError otherwise;
  // NaN is stored as the format's canonical NaN: use add_bits to keep a payload).
  TraceBuilder& add_values(std::string name, const Format& format, std::vector<std::uint64_t> shape,
                           std::span<const double> values);
  TraceBuilder& add_f64(std::string name, std::vector<std::uint64_t> shape, std::span<const double> values);

  Safetensors to_safetensors() const;  // not validated
  Trace build(std::string_view source_name = "trace") const;
  std::vector<std::uint8_t> serialize(std::string_view source_name = "trace") const;
  void write(const std::filesystem::path& path) const;

 private:
  TraceMetadata metadata_;
  std::map<std::string, std::string> extra_;
  std::vector<SafeTensor> tensors_;
};

// The metadata map a TraceMetadata is written as (shortest round-trip decimals).
std::map<std::string, std::string> metadata_strings(const TraceMetadata& metadata);

}  // namespace fb
