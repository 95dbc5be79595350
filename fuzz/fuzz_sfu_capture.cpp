// fuzz/fuzz_sfu_capture.cpp: libFuzzer target for the FBSFUT1 capture reader
// (traces/sfu_capture.hpp sfu_capture_to_table, behind fb-sfu-table-convert). Properties
// checked on every input:
// - a bad capture is refused only by std::runtime_error whose one-line message starts with
//   the file name; any other exception, a crash, a sanitizer report or a leak is a finding;
// - a capture it accepts converts the way fb-sfu-table-convert does: write_table_file
//   does not refuse it and load_table_model reads it back, measured exactly when the
//   capture's source is a GPU (cuda:...); for ex2 the loaded model gives
//   T[i] at the exact key x = i * 2^-N (k = 0 in the ex2_fixed_point hypothesis) for every
//   normal, non-NaN T[i] the capture produced.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "fuzz/fuzz_util.hpp"
#include "traces/sfu_capture.hpp"
#include "traces/sfu_table_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fb::fuzz::TempFile file("sfu_capture"), converted("sfu_capture_fbsfu1");
  file.write(data, size);
  fb::SfuTable table;
  try {
    table = fb::gpu::sfu_capture_to_table(file.path());
  } catch (const std::runtime_error& e) {
    fb::fuzz::check_message(e.what(), file.path());
    return 0;
  }
  fb::write_table_file(converted.path(), table);
  const auto model = fb::load_table_model(converted.path());
  // Measured exactly when the capture came from a GPU (source=cuda:...); a rehearsal's
  // stand-in table (source=rehearsal:...) must never load as a hardware measurement.
  fb::fuzz::require(model->hardware_measured() == table.measured_on_hardware,
                    "a converted capture loads with the wrong measured flag");
  if (table.form == fb::SfuTableForm::ex2_fixed_point) {
    const std::size_t n = table.fraction_outputs.size();
    for (std::size_t i = 0; i < n; i += 1 + n / 64) {
      float t;
      std::memcpy(&t, &table.fraction_outputs[i], 4);
      if (!std::isnormal(t)) continue;
      const float got = model->evaluate(std::ldexp(static_cast<float>(i), -table.fraction_bits));
      std::uint32_t got_bits;
      std::memcpy(&got_bits, &got, 4);
      fb::fuzz::require(got_bits == table.fraction_outputs[i],
                        "converted ex2 table changed T[" + std::to_string(i) + "]");
    }
  }
  return 0;
}
