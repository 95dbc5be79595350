// traces/safetensors.hpp: reading and writing the .safetensors container, exactly the
// format `safetensors.torch.save_file` writes (docs/DESIGN.md §9).
//
// Layout: an 8-byte little-endian header length N, N bytes of UTF-8 JSON (padded with
// trailing spaces), then the data section of raw little-endian tensor bytes. The header
// maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// relative to the data section) plus an optional "__metadata__" string->string map.
//
// Contract:
// - parse_safetensors / read_safetensors accept any tensor order in the header and
//   return the tensors in data-offset order. They are STRICT, as the reference Rust
//   reader is: the tensors must tile the data section exactly (no overlaps, no gaps,
//   no trailing bytes), each byte span must equal product(shape) * dtype size, header
//   keys must be unique at every level, and metadata values must be strings.
// - Every defect is reported by throwing TraceError with ONE line naming the file, the
//   tensor and field, and what was expected. Nothing else escapes (bad_alloc aside),
//   nothing crashes, parsing is linear in the input, and no single allocation is larger
//   than the input (headers over kMaxHeaderBytes are refused before being read).
// - serialize_safetensors writes the tensors contiguously in the given order, with
//   "__metadata__" first (when non-empty) and the header padded with spaces so that
//   the data section starts at a multiple of 8, as the Python writer does. Python's
//   writer additionally sorts tensors by dtype size for alignment; readers do not
//   require that, so the given order is kept.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "formats/format.hpp"
#include "formats/text_escape.hpp"

namespace fb {

// A malformed or inconsistent safetensors file or trace. The CLI maps it to exit 2.
// A NUL byte of echoed input (a metadata string) is kept as \x00: what() is a C string.
struct TraceError : std::runtime_error {
  explicit TraceError(const std::string& message) : std::runtime_error(without_nul_bytes(message)) {}
  explicit TraceError(const char* message) : std::runtime_error(message) {}
};

enum class Dtype : std::uint8_t {
  BF16,
  F16,
  F32,
  F64,
  F8_E4M3,
  F8_E5M2,
  BOOL,
  U8,
  I8,
  I16,
  U16,
  I32,
  U32,
  I64,
  U64,
};
inline constexpr Dtype kAllDtypes[] = {Dtype::BF16,    Dtype::F16,  Dtype::F32, Dtype::F64, Dtype::F8_E4M3,
                                       Dtype::F8_E5M2, Dtype::BOOL, Dtype::U8,  Dtype::I8,  Dtype::I16,
                                       Dtype::U16,     Dtype::I32,  Dtype::U32, Dtype::I64, Dtype::U64};

std::string_view dtype_name(Dtype dtype);            // the safetensors spelling, "BF16"
std::optional<Dtype> parse_dtype(std::string_view);  // exact, case-sensitive spelling
std::size_t dtype_size(Dtype dtype);                 // bytes per element
bool dtype_is_floating(Dtype dtype);                 // BF16 F16 F32 F64 F8_*
// The fb::Format of a floating dtype; F64 (read as double) and integers have none.
std::optional<Format> dtype_format(Dtype dtype);
// The dtype storing a format's bit patterns; none for formats safetensors cannot name.
std::optional<Dtype> dtype_of_format(const Format& format);

// Headers larger than this are refused as absurd (the Rust reader's limit is 100 MB).
inline constexpr std::uint64_t kMaxHeaderBytes = 100ull << 20;

struct SafeTensor {
  std::string name;
  Dtype dtype = Dtype::F32;
  std::vector<std::uint64_t> shape;  // empty for a scalar
  std::vector<std::uint8_t> bytes;   // raw little-endian data, element_count()*dtype_size()

  std::uint64_t element_count() const;  // product of shape (1 for a scalar); UINT64_MAX on overflow
  // Element i's bits (dtype_size(dtype) bytes, little-endian); i < bytes.size() / dtype_size.
  std::uint64_t element_bits(std::size_t i) const;
  // Appends one element holding the low dtype_size(dtype) bytes of `bits`.
  void append_element_bits(std::uint64_t bits);
};

struct Safetensors {
  std::vector<SafeTensor> tensors;              // data-offset order when read
  std::map<std::string, std::string> metadata;  // the "__metadata__" map

  const SafeTensor* find(std::string_view name) const;
};

// Parse an in-memory file. `source_name` names it in error messages.
Safetensors parse_safetensors(std::span<const std::uint8_t> bytes, std::string_view source_name);
Safetensors read_safetensors(const std::filesystem::path& path);

// Throws TraceError when the tensors are inconsistent (duplicate or reserved names, byte
// count not matching the shape). `target_name` names the destination in messages.
std::vector<std::uint8_t> serialize_safetensors(const Safetensors& file, std::string_view target_name = "safetensors");
void write_safetensors(const std::filesystem::path& path, const Safetensors& file);

// A name quoted for a one-line message: printable ASCII kept, other bytes as \xNN,
// cut to a readable length.
std::string quoted_name(std::string_view name);
// "[1,2,64,64]"
std::string shape_string(const std::vector<std::uint64_t>& shape);

}  // namespace fb
