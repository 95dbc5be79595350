// gpu/probe_check.hpp: compare a probe file's hardware outputs with the emu models.
//
// Contract: run_probe_check() replays every case of every section with
// fb::fused_dot_bits under the section's model (the --model override, else the first
// name in the header's `models`), compares bit for bit (any NaN matches any NaN), and
// writes per-form counts plus up to `max_report` decoded mismatches per form to `out`
// (text, or one JSON document). Returns 0 when everything matches, 1 on any mismatch,
// 2 on a bad file or an unusable model (one error line on `err` naming file and field).
#pragma once

#include <cstddef>
#include <iosfwd>
#include <string>

namespace fb::gpu {

struct ProbeCheckOptions {
  std::string model;            // empty: per section, the header's first model
  bool json = false;
  std::size_t max_report = 10;  // mismatches explained per form
};

int run_probe_check(const std::string& path, const ProbeCheckOptions& options, std::ostream& out,
                    std::ostream& err);

}  // namespace fb::gpu
