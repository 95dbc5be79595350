// tools/cmd_demo.cpp: `flashbits demo`, the main job on the shipped default trace.
//
// Replays traces/hw/h200/bias/torch_bf16_sink_d64_x64_h00-15.safetensors (a hardware capture:
// PyTorch's SDPA flash backend, bf16, on an NVIDIA H200, sink scenario, 16 heads: 16
// independent samples, enough for a verdict), shows the bias
// mechanism on a sink row, measures the kernel against the correctly rounded reference,
// runs +dynmax beside it and ends with a verdict (tools/demo_report.hpp). --trace runs
// the same report on another trace, e.g. traces/examples/sink-fa-bf16acc.safetensors
// (emulated: Qiu & Yao's bf16-accumulator recipe, which is biased).
//
// The default trace is looked up, in order, beside the running executable (../../traces/...
// from build/tools/flashbits, through /proc/self/exe: a checkout's own binary reads its own
// tree's trace, wherever the build it was compiled in lies) and then in the source tree it was
// compiled from (FLASHBITS_SOURCE_DIR). When neither exists, demo exits 2 naming both paths
// and asking for --trace.
#include <filesystem>
#include <iostream>
#include <memory>
#include <system_error>
#include <vector>

#include "tools/cli_common.hpp"
#include "tools/demo_report.hpp"

#ifndef FLASHBITS_SOURCE_DIR
#error "FLASHBITS_SOURCE_DIR must name the source tree (set by tools/CMakeLists.txt)"
#endif

namespace fb::cli {
namespace {

constexpr const char* kDefaultTrace = "traces/hw/h200/bias/torch_bf16_sink_d64_x64_h00-15.safetensors";

// Where the default trace may be, in the order they are tried: beside the executable (its
// directory's ../../, the repository root of build/tools/flashbits), then the source tree
// compiled in. The first is left out when /proc/self/exe cannot be read.
std::vector<std::filesystem::path> default_trace_candidates() {
  std::vector<std::filesystem::path> candidates;
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec && exe.has_parent_path())
    candidates.push_back((exe.parent_path() / ".." / ".." / kDefaultTrace).lexically_normal());
  candidates.push_back((std::filesystem::path(FLASHBITS_SOURCE_DIR) / kDefaultTrace).lexically_normal());
  return candidates;
}

std::string default_trace() {
  const std::vector<std::filesystem::path> candidates = default_trace_candidates();
  std::string tried;
  for (const std::filesystem::path& p : candidates) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(p, ec)) return p.string();
    tried += (tried.empty() ? "" : " nor ") + p.string();
  }
  throw InputError("the default trace is not found: " + std::string(candidates.size() > 1 ? "neither " : "") + tried +
                   " exists; pass a trace explicitly with --trace FILE");
}

Runner setup_demo(CLI::App& app) {
  auto trace = std::make_shared<std::string>();
  auto* trace_option =
      app.add_option("--trace", *trace,
                     "trace to run the report on (default: a hardware capture, PyTorch's FA2 on an H200, sink rows: " +
                         std::string(kDefaultTrace) +
                         ", looked up beside this executable (../../) and then in the source tree "
                         "it was built from)");
  return [trace, trace_option] {
    return run_demo_report(std::cout, trace_option->count() > 0 ? *trace : default_trace());
  };
}

}  // namespace
FLASHBITS_SUBCOMMAND(demo, "demo", "Replay a hardware capture of sink rows, show the bias mechanism and the fix",
                     setup_demo);
}  // namespace fb::cli
