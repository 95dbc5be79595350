// tools/demo_report.hpp: the report `flashbits demo` prints (docs/CLI.md "flashbits demo").
//
// Contract: run_demo_report() replays the trace at `default_trace_path` under the model
// its metadata names, shows the bias mechanism on the sink row with the most negative O
// error (the P·V rounding with a significand overflow, its round/sticky bits and RNE
// decision, the cumulative error of O-bar), runs the same inputs under MODEL+dynmax
// (Qiu & Yao's fix) and ends with a short verdict. It says whether the trace is emulated
// and whether the model's parts are validated on hardware. Returns an exit code
// (0 ok, 1 replay mismatch, 2 unreadable trace). Runs in a few seconds.
#pragma once

#include <iosfwd>
#include <string>

namespace fb::cli {

int run_demo_report(std::ostream& os, const std::string& default_trace_path);

}  // namespace fb::cli
