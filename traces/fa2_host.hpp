// traces/fa2_host.hpp: the host side of fb-fa2 that needs no GPU (plain C++17, shared by
// fa2.cu and tests/test_fa2_host.cpp): FA2's tile sizes per head dim, the command line,
// the argument and shape checks, and the trace metadata.
//
// Contract:
// - fa2_tile_sizes(d) is FA2's launch configuration for d = 64 and 128 (forward
//   flash_fwd_launch_template.h run_mha_fwd_hdim64/128, backward
//   flash_bwd_launch_template.h run_mha_bwd_hdim64/128, sm80/sm90 with >= 144 KB smem),
//   the same numbers as attention/kernel_models.cpp's fa2 table, which replays the traces.
// - parse_fa2_args() and validate_fa2_problem() throw Fa2UsageError with one line saying
//   what is wrong; fb-fa2 prints it and exits 2. They accept only head dims 64 and 128,
//   sequence lengths that are multiples of kFa2SeqMultiple in [kFa2SeqMultiple, kFa2MaxSeq],
//   batch*heads <= 65535 (the grid's y dimension), at most kFa2MaxTraceRows trace rows,
//   each inside [0, seq).
// - fa2_trace_metadata() is the trace's __metadata__ (docs/DESIGN.md §9, traces/trace.hpp keys).
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace fb::gpu {

struct Fa2TileSizes {
  int block_m, block_n;          // forward: query rows per CTA x keys per KV tile
  int bwd_block_m, bwd_block_n;  // backward: query rows per m-block x keys per CTA
};

// FA2 (Dao-AILab csrc v2.x): hdim64 forward Flash_fwd_kernel_traits<64, 128, 128, 4>,
// backward <64, 128, 128, 8, ...>; hdim128 forward <128, 128, 64, 4>, backward
// <128, 64, 128, 8, ...>.
constexpr Fa2TileSizes fa2_tile_sizes(int head_dim) {
  return head_dim <= 64 ? Fa2TileSizes{128, 128, 128, 128} : Fa2TileSizes{128, 64, 64, 128};
}

inline constexpr int kFa2SeqMultiple = 128;  // every tile size above divides it
inline constexpr int kFa2MaxSeq = 32768;     // the reference kernels are O(N^2) per head without smem
inline constexpr int kFa2MaxGridY = 65535;
inline constexpr int kFa2MaxTraceRows = 8;
// --variant dynmax (Qiu & Yao): beta and tolerance, the defaults of the CPU models' +dynmax
// (docs/CLI.md), which the trace's model name "...+dynmax" implies.
inline constexpr float kFa2DynmaxBeta = 2.f;
inline constexpr double kFa2DynmaxTol = 1e-3;

class Fa2UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Fa2Options {
  std::string out, input, variant = "standard";
  int batch = 1, heads = 1, seq = 256, hdim = 64;
  std::uint64_t seed = 1;
  bool causal = false;
  std::vector<int> trace_rows = {0, 1};
};

const char* fa2_usage();

// Parses argv[1..argc). Throws Fa2UsageError on an unknown flag, a missing or non-numeric
// value, or an invalid variant; the problem shape is checked by validate_fa2_problem (the
// shape may come from --input).
Fa2Options parse_fa2_args(int argc, const char* const* argv);

// Checks the shape (after --input has set it) and the trace rows.
void validate_fa2_problem(const Fa2Options& o);

// "true"/"True"/"1" -> true, "false"/"False"/"0" -> false (traces/trace.hpp); else throws.
bool parse_fa2_bool(const std::string& text, const std::string& what);

struct Fa2DeviceInfo {
  std::string name;          // cudaDeviceProp::name
  int major = 0, minor = 0;  // compute capability
  int driver = 0, runtime = 0;
};

struct Fa2RunFacts {
  Fa2Options options;          // after --input set the shape
  double softmax_scale = 0.0;  // as the run used it (the input's decimal, or 1/sqrt(d))
  float scale_log2 = 0.f;
  std::vector<int> trace_rows;
  std::string scenario;  // from the input trace, may be empty
};

std::map<std::string, std::string> fa2_trace_metadata(const Fa2RunFacts& run, const Fa2DeviceInfo& device);

// Text that reads back as the same float ("%.9g") / double ("%.17g").
std::string fa2_float_text(float f);
std::string fa2_double_text(double d);

}  // namespace fb::gpu
