// traces/numpy_files.hpp: reading numpy's .npy and .npz files as safetensors-style tensors,
// so that captures people already saved with numpy can be imported as traces.
//
// Contract:
// - An .npy file (format versions 1.0, 2.0 and 3.0) holds one array; an .npz file is a ZIP
//   archive of .npy members, written by np.savez (stored) or np.savez_compressed (deflate),
//   including the ZIP64 records numpy writes. A member "q.npy" becomes the tensor "q".
// - Accepted element types: float16 ('f2'), float32 ('f4'), float64 ('f8'), and the
//   integers (u1 i1 u2 i2 u4 i4 u8 i8, bool), in either byte order. numpy has no bfloat16:
//   a bf16 capture is saved as uint16 bit patterns, and the importer reinterprets it
//   (capture_import.hpp, --dtype bf16). C order only; a Fortran-order array is refused.
// - Every defect throws TraceError with one line naming the file (and member), the field
//   and what was expected. Nothing is allocated beyond the input's size (plus the declared
//   uncompressed size of a deflated member, which must match what inflates), and parsing
//   is linear in the input.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>

#include "traces/safetensors.hpp"

namespace fb {

// One array from the bytes of an .npy file; the tensor is named `name`.
SafeTensor parse_npy(std::span<const std::uint8_t> bytes, std::string_view name, std::string_view source_name);
SafeTensor read_npy(const std::filesystem::path& path);  // named after the file's stem

// Every member of an .npz archive, in archive order (no metadata).
Safetensors parse_npz(std::span<const std::uint8_t> bytes, std::string_view source_name);
Safetensors read_npz(const std::filesystem::path& path);

}  // namespace fb
