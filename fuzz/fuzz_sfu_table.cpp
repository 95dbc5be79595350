// fuzz/fuzz_sfu_table.cpp: libFuzzer target for the FBSFU1 SFU table loader
// (traces/sfu_table_file.hpp load_table_model). Properties checked on every input:
// - a bad file is refused only by std::runtime_error whose one-line message starts with
//   the file name; any other exception, a crash, a sanitizer report or a leak is a finding;
// - a table it accepts evaluates any input without a crash and describes itself.
// The file ends in a CRC-32, so mutated inputs would almost never get past it: when the
// first input byte is odd, the rest gets its correct CRC appended (reaching the field
// checks); when even, the rest is the file as is (reaching the CRC check itself).
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "emu/sfu/special_functions.hpp"
#include "fuzz/fuzz_util.hpp"
#include "traces/sfu_table_file.hpp"

namespace {

float float_from_bits(std::uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fb::fuzz::TempFile file("sfu_table");
  if (size == 0) return 0;
  std::vector<std::uint8_t> bytes(data + 1, data + size);
  if (data[0] & 1u) {
    const std::uint32_t crc = fb::crc32(bytes.data(), bytes.size());
    for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<std::uint8_t>(crc >> (8 * i)));
  }
  file.write(bytes.data(), bytes.size());
  std::unique_ptr<fb::SpecialFunctionModel> model;
  try {
    model = fb::load_table_model(file.path());
  } catch (const std::runtime_error& e) {
    fb::fuzz::check_message(e.what(), file.path());
    return 0;
  }
  fb::fuzz::require(model != nullptr, "load_table_model returned no model");
  fb::fuzz::require(model->kind() == fb::SfuKind::table, "a loaded table is not of kind table");
  (void)model->describe();
  (void)model->hardware_measured();
  // Special values, both signs of the edges of the ranges, and patterns from the input
  // itself (so the fuzzer can steer evaluation into the segments it wrote).
  std::vector<std::uint32_t> inputs = {0u,          0x80000000u, 0x00000001u, 0x007fffffu, 0x00800000u, 0x3f800000u,
                                       0xbf800000u, 0x43000000u, 0xc3200000u, 0xc3210000u, 0x7f7fffffu, 0xff7fffffu,
                                       0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffffffffu};
  for (std::size_t i = 0; i + 4 <= bytes.size() && inputs.size() < 64; i += 4) {
    std::uint32_t w = 0;
    std::memcpy(&w, bytes.data() + i, 4);
    inputs.push_back(w);
  }
  for (std::uint32_t in : inputs) {
    const float x = float_from_bits(in);
    (void)model->evaluate(x);
    (void)model->evaluate(std::nextafter(x, 0.0f));
  }
  return 0;
}
