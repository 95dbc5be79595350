// tools/cmd_demo.cpp: `flashbits demo`, the main job on the shipped default trace.
//
// Replays traces/examples/sink-fa-bf16acc.safetensors (emulated, Qiu & Yao's
// fa-bf16acc on a sink scenario), shows the bias mechanism on a sink row, runs
// +dynmax beside it and ends with a verdict (tools/demo_report.hpp). --trace runs the
// same report on another trace.
#include <iostream>
#include <memory>

#include "tools/cli_common.hpp"
#include "tools/demo_report.hpp"

#ifndef FLASHBITS_SOURCE_DIR
#error "FLASHBITS_SOURCE_DIR must name the source tree (set by tools/CMakeLists.txt)"
#endif

namespace fb::cli {
namespace {

constexpr const char* kDefaultTrace = FLASHBITS_SOURCE_DIR "/traces/examples/sink-fa-bf16acc.safetensors";

Runner setup_demo(CLI::App& app) {
  auto trace = std::make_shared<std::string>(kDefaultTrace);
  app.add_option("--trace", *trace, "trace to run the report on (default: the shipped sink trace)");
  return [trace] { return run_demo_report(std::cout, *trace); };
}

}  // namespace
FLASHBITS_SUBCOMMAND(demo, "demo", "Replay the shipped sink trace, show the bias mechanism and the fix",
                     setup_demo);
}  // namespace fb::cli
