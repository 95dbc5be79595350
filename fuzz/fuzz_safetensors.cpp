// fuzz/fuzz_safetensors.cpp: libFuzzer target for the safetensors reader and the trace
// validator (traces/). Properties checked on every input:
// - the reader and the validator refuse bad input only by throwing fb::TraceError, with a
//   one-line message that starts with the source name; any other exception, a crash, a
//   sanitizer report or a leak is a finding;
// - whatever the reader accepts survives serialize -> parse unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>

#include "traces/safetensors.hpp"
#include "traces/trace.hpp"

namespace {

void check_message(const fb::TraceError& e) {
  const std::string message = e.what();
  if (message.rfind("fuzz: ", 0) != 0 || message.find('\n') != std::string::npos) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fb::Safetensors parsed;
  try {
    parsed = fb::parse_safetensors(std::span<const std::uint8_t>(data, size), "fuzz");
  } catch (const fb::TraceError& e) {
    check_message(e);
    return 0;
  }
  const fb::Safetensors again = fb::parse_safetensors(fb::serialize_safetensors(parsed, "fuzz"), "fuzz");
  if (again.metadata != parsed.metadata || again.tensors.size() != parsed.tensors.size()) std::abort();
  for (std::size_t i = 0; i < parsed.tensors.size(); ++i) {
    const fb::SafeTensor& a = parsed.tensors[i];
    const fb::SafeTensor& b = again.tensors[i];
    if (a.name != b.name || a.dtype != b.dtype || a.shape != b.shape || a.bytes != b.bytes) std::abort();
  }
  try {
    const fb::Trace trace = fb::Trace::from_safetensors(std::move(parsed), "fuzz");
    for (const fb::SafeTensor& t : trace.file().tensors) {
      try {
        (void)trace.values(t.name);
        (void)trace.bits(t.name);
      } catch (const fb::TraceError& e) {
        check_message(e);
      }
    }
    (void)fb::is_hardware_capture(trace);
  } catch (const fb::TraceError& e) {
    check_message(e);
  }
  return 0;
}
