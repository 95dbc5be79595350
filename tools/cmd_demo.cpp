// tools/cmd_demo.cpp: `flashbits demo`, the main job on the shipped default trace.
//
// Replays traces/hw/h200/bias/torch_bf16_sink_d64_x64_h00-15.safetensors (a hardware capture:
// PyTorch's SDPA flash backend, bf16, on an NVIDIA H200, sink scenario, 16 heads: 16
// independent samples, enough for a verdict), shows the bias
// mechanism on a sink row, measures the kernel against the correctly rounded reference,
// runs +dynmax beside it and ends with a verdict (tools/demo_report.hpp). --trace runs
// the same report on another trace, e.g. traces/examples/sink-fa-bf16acc.safetensors
// (emulated: Qiu & Yao's bf16-accumulator recipe, which is biased).
#include <iostream>
#include <memory>

#include "tools/cli_common.hpp"
#include "tools/demo_report.hpp"

#ifndef FLASHBITS_SOURCE_DIR
#error "FLASHBITS_SOURCE_DIR must name the source tree (set by tools/CMakeLists.txt)"
#endif

namespace fb::cli {
namespace {

constexpr const char* kDefaultTrace =
    FLASHBITS_SOURCE_DIR "/traces/hw/h200/bias/torch_bf16_sink_d64_x64_h00-15.safetensors";

Runner setup_demo(CLI::App& app) {
  auto trace = std::make_shared<std::string>(kDefaultTrace);
  app.add_option("--trace", *trace,
                 "trace to run the report on (default: a hardware capture, PyTorch's FA2 on an H200, sink rows)");
  return [trace] { return run_demo_report(std::cout, *trace); };
}

}  // namespace
FLASHBITS_SUBCOMMAND(demo, "demo", "Replay a hardware capture of sink rows, show the bias mechanism and the fix",
                     setup_demo);
}  // namespace fb::cli
