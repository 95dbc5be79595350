// tools/cmd_probe_check.cpp: `flashbits probe-check FILE`, hardware probe outputs vs the
// tensor-core models. Exit 0 all match, 1 any mismatch, 2 bad file (traces/probe_check.hpp).
// --mismatches-out / --sample-out write subsets of FILE as probe files (every section, in
// order; gpu/README.md), --jobs replays on that many threads (the output does not depend on it).
#include <iostream>
#include <memory>
#include <sstream>

#include "emu/dot/tensor_core.hpp"
#include "tools/cli_common.hpp"
#include "traces/probe_check.hpp"

namespace fb::cli {
namespace {

struct ProbeCheckArgs {
  std::string file;
  gpu::ProbeCheckOptions options;
};

// The counting options' limit: integer_in refuses a sign (CLI11 alone read -1 as 2^64 - 1).
constexpr std::uint64_t kMaxCount = 0xffffffffu;

Runner setup_probe_check(CLI::App& app) {
  auto args = std::make_shared<ProbeCheckArgs>();
  app.add_option("file", args->file, "probe file written by fb-mma-probe (gpu/README.md)")->required();
  app.add_option("--model", args->options.model,
                 "tensor-core model to replay every form with (default: each form's own, from the file)");
  app.add_flag("--json", args->options.json, "machine-readable output");
  app.add_option("--max-report", args->options.max_report, "mismatches explained per form")
      ->capture_default_str()
      ->check(integer_in(0, kMaxCount));
  auto* mismatches_out = app.add_option("--mismatches-out", args->options.mismatches_out,
                                        "write the mismatching cases to FILE as a probe file (every section, "
                                        "0 cases where none)");
  app.add_option("--max-mismatches", args->options.max_mismatches,
                 "at most this many mismatching cases per section in --mismatches-out")
      ->capture_default_str()
      ->check(integer_in(0, kMaxCount))
      ->needs(mismatches_out);
  auto* sample_out = app.add_option("--sample-out", args->options.sample_out,
                                    "write the first --sample-per-batch cases of every batch of every section to "
                                    "FILE as a probe file");
  app.add_option("--predictions-out", args->options.predictions_out,
                 "write every case with D replaced by the model's output to FILE (source model-prediction:MODEL): "
                 "a rehearsal's stand-in for a GPU");
  auto* per_batch =
      app.add_option("--sample-per-batch", args->options.sample_per_batch, "cases per batch in --sample-out")
          ->check(integer_in(1, kMaxCount));
  sample_out->needs(per_batch);
  per_batch->needs(sample_out);
  app.add_option("--jobs", args->options.jobs,
                 "replay threads, 1..1024 (default: the machine's cores, " + std::to_string(default_jobs()) +
                     " here; results do not depend on it)")
      ->check(integer_in(1, kMaxJobs));
  return [args] {
    // No output may overwrite the probe file it is cut from, nor another output.
    const gpu::ProbeCheckOptions& o = args->options;
    // --model's fault, named so before the file is read (it was blamed on the file's first section).
    if (!o.model.empty() && !is_tensor_core_model_name(o.model))
      throw InputError("--model: " + gpu::unknown_tensor_core_model_text(o.model));
    check_output_path("--mismatches-out", o.mismatches_out);
    check_output_path("--sample-out", o.sample_out);
    check_output_path("--predictions-out", o.predictions_out);
    refuse_output_over_inputs("--mismatches-out", o.mismatches_out, {{"the probe file", args->file}});
    refuse_output_over_inputs("--sample-out", o.sample_out,
                              {{"the probe file", args->file}, {"--mismatches-out", o.mismatches_out}});
    refuse_output_over_inputs(
        "--predictions-out", o.predictions_out,
        {{"the probe file", args->file}, {"--mismatches-out", o.mismatches_out}, {"--sample-out", o.sample_out}});
    // Its error lines are printed by print_error_line, the one printer that escapes what they
    // echo (a path with byte 0xff, say).
    std::ostringstream errors;
    const int code = gpu::run_probe_check(args->file, o, std::cout, errors);
    std::istringstream lines(errors.str());
    for (std::string line; std::getline(lines, line);) {
      const bool internal = line.rfind("internal error: ", 0) == 0;
      const std::string_view prefix = internal ? "internal error: " : line.rfind("error: ", 0) == 0 ? "error: " : "";
      print_error_line(std::string_view(line).substr(prefix.size()), prefix);
    }
    return code;
  };
}

}  // namespace
FLASHBITS_SUBCOMMAND(probe_check, "probe-check",
                     "Compare tensor-core probe outputs captured on a GPU with the emu models", setup_probe_check);
}  // namespace fb::cli
