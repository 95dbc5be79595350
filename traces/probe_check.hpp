// traces/probe_check.hpp: compare a probe file's hardware outputs with the emu models.
//
// Contract: run_probe_check() replays every case of every section with
// fb::fused_dot_bits under the section's model (the --model override, else the first
// name in the header's `models`), compares bit for bit (any NaN matches any NaN), and
// writes per-form and per-batch counts plus up to `max_report` decoded mismatches per form
// to `out` (text, or one JSON document). Returns 0 when everything matches, 1 on any
// mismatch, 2 on a bad file (one of no section included: nothing would match vacuously;
// sections of 0 cases, as an empty --mismatches-out, are checked), an unusable model or an
// output file that cannot be written
// (one error line on `err` naming file and field).
// Subsets, each a valid probe file with every section of the input, in order, its header
// kept (plus subset=... keys):
// - mismatches_out: per section its mismatching cases in file order, at most
//   max_mismatches (a section without mismatches is written with 0 cases);
// - sample_out: per section the first sample_per_batch cases of every batch, in file order.
// The cases are replayed on `jobs` threads (0: the hardware's); what is written does not
// depend on the thread count.
#pragma once

#include <cstddef>
#include <iosfwd>
#include <string>

namespace fb::gpu {

struct ProbeCheckOptions {
  std::string model;  // empty: per section, the header's first model
  bool json = false;
  std::size_t max_report = 10;          // mismatches explained per form
  std::string mismatches_out;           // empty: not written
  std::size_t max_mismatches = 100000;  // per section, in mismatches_out
  std::string sample_out;               // empty: not written
  // Every case with D replaced by the model's output, source "model-prediction:<model>"
  // (a rehearsal's stand-in for the hardware; empty: not written).
  std::string predictions_out;
  std::size_t sample_per_batch = 0;
  unsigned jobs = 0;  // replay threads; 0: std::thread::hardware_concurrency()
};

int run_probe_check(const std::string& path, const ProbeCheckOptions& options, std::ostream& out, std::ostream& err);

// "unknown tensor-core model 'NAME' (known: sm100, sm120, ...)": the one wording of a name no
// preset has, for a probe file's section and for --model alike.
std::string unknown_tensor_core_model_text(const std::string& name);

}  // namespace fb::gpu
