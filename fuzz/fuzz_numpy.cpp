// fuzz/fuzz_numpy.cpp: libFuzzer target for the .npy and .npz readers (traces/numpy_files.hpp).
// The first byte picks the reader (even: .npy, odd: .npz archive); the rest is the file.
// Properties checked on every input: a bad file is refused only by fb::TraceError with one
// line starting with the source name; an accepted array's bytes fill its shape exactly.
// Any other exception, a crash, a sanitizer report, a leak or a timeout is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>

#include "traces/numpy_files.hpp"

namespace {

void check_message(const fb::TraceError& e) {
  const std::string message = e.what();
  if (message.rfind("fuzz", 0) != 0 || message.find('\n') != std::string::npos) std::abort();
}

void check_tensor(const fb::SafeTensor& t) {
  const std::uint64_t count = t.element_count();
  if (count == UINT64_MAX || count * fb::dtype_size(t.dtype) != t.bytes.size()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::span<const std::uint8_t> file(data + 1, size - 1);
  try {
    if ((data[0] & 1u) == 0) {
      check_tensor(fb::parse_npy(file, "x", "fuzz.npy"));
    } else {
      for (const fb::SafeTensor& t : fb::parse_npz(file, "fuzz.npz").tensors) check_tensor(t);
    }
  } catch (const fb::TraceError& e) {
    check_message(e);
  }
  return 0;
}
