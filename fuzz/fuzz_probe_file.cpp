// fuzz/fuzz_probe_file.cpp: libFuzzer target for the tensor-core probe file reader
// (traces/probe_file.hpp read_probe_file) and the checker behind `flashbits probe-check`
// (traces/probe_check.hpp run_probe_check). Properties checked on every input:
// - the reader refuses a bad file only by fb::gpu::ProbeFileError whose one-line message
//   starts with the file name; any other exception, a crash, a sanitizer report or a leak
//   is a finding;
// - whatever the reader accepts survives write_probe_file -> read_probe_file unchanged;
// - run_probe_check never throws and returns 0, 1 or 2; on 2 it wrote one error line.
#include <cstdint>
#include <sstream>
#include <string>

#include "fuzz/fuzz_util.hpp"
#include "traces/probe_check.hpp"
#include "traces/probe_file.hpp"

namespace {

bool same_header(const fb::gpu::ProbeHeader& a, const fb::gpu::ProbeHeader& b) {
  return a.form == b.form && a.k == b.k && a.input == b.input && a.c_format == b.c_format && a.d_format == b.d_format &&
         a.batches == b.batches && a.models == b.models && a.extra == b.extra;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fb::fuzz::TempFile file("probe_file"), copy("probe_file_copy");
  file.write(data, size);
  fb::gpu::ProbeFile parsed;
  bool accepted = true;
  try {
    parsed = fb::gpu::read_probe_file(file.path());
  } catch (const fb::gpu::ProbeFileError& e) {
    fb::fuzz::check_message(e.what(), file.path());
    accepted = false;
  }
  if (accepted) {
    fb::gpu::write_probe_file(copy.path(), parsed);
    const fb::gpu::ProbeFile again = fb::gpu::read_probe_file(copy.path());
    fb::fuzz::require(again.sections.size() == parsed.sections.size(), "round trip changed the section count");
    for (std::size_t s = 0; s < parsed.sections.size(); ++s) {
      fb::fuzz::require(same_header(again.sections[s].header, parsed.sections[s].header),
                        "round trip changed section " + std::to_string(s) + "'s header");
      fb::fuzz::require(again.sections[s].words() == parsed.sections[s].words(),
                        "round trip changed section " + std::to_string(s) + "'s cases");
    }
  }
  for (const bool json : {false, true}) {
    std::ostringstream out, err;
    fb::gpu::ProbeCheckOptions options;
    options.json = json;
    const int rc = fb::gpu::run_probe_check(file.path(), options, out, err);
    fb::fuzz::require(rc == 0 || rc == 1 || rc == 2, "probe-check returned " + std::to_string(rc));
    if (rc == 2) {
      const std::string e = err.str();
      fb::fuzz::require(!e.empty() && e.find('\n') == e.size() - 1, "probe-check exit 2 without one error line: " + e);
    }
    if (!accepted) fb::fuzz::require(rc == 2, "probe-check accepted a file the reader refuses");
  }
  return 0;
}
