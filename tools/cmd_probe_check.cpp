// tools/cmd_probe_check.cpp: `flashbits probe-check FILE`, hardware probe outputs vs the
// tensor-core models. Exit 0 all match, 1 any mismatch, 2 bad file (gpu/probe_check.hpp).
#include <iostream>
#include <memory>

#include "gpu/probe_check.hpp"
#include "tools/cli_common.hpp"

namespace fb::cli {
namespace {

struct ProbeCheckArgs {
  std::string file;
  gpu::ProbeCheckOptions options;
};

Runner setup_probe_check(CLI::App& app) {
  auto args = std::make_shared<ProbeCheckArgs>();
  app.add_option("file", args->file, "probe file written by fb-mma-probe (gpu/README.md)")->required();
  app.add_option("--model", args->options.model,
                 "tensor-core model to replay every form with (default: each form's own, from the file)");
  app.add_flag("--json", args->options.json, "machine-readable output");
  app.add_option("--max-report", args->options.max_report, "mismatches explained per form")->capture_default_str();
  return [args] { return gpu::run_probe_check(args->file, args->options, std::cout, std::cerr); };
}

}  // namespace
FLASHBITS_SUBCOMMAND(probe_check, "probe-check",
                     "Compare tensor-core probe outputs captured on a GPU with the emu models", setup_probe_check);
}  // namespace fb::cli
