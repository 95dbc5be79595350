// traces/fa2_host.cpp: fb-fa2's command line, problem checks and trace metadata (see
// traces/fa2_host.hpp for the contract). No CUDA here, so tests/test_fa2_host.cpp runs it.
#include "traces/fa2_host.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "traces/metadata_bool.hpp"

namespace fb::gpu {
namespace {

long long parse_integer(const std::string& flag, const char* text) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0') {
    throw Fa2UsageError(flag + ": expected an integer, got '" + std::string(text) + "'");
  }
  return v;
}

int parse_int(const std::string& flag, const char* text) {
  const long long v = parse_integer(flag, text);
  if (v < -2147483647LL || v > 2147483647LL) throw Fa2UsageError(flag + ": " + text + " is out of range");
  return static_cast<int>(v);
}

}  // namespace

const char* fa2_usage() {
  return "usage: fb-fa2 --out FILE [--input FILE.safetensors | --batch B --heads H --seq N --hdim 64|128 "
         "--seed S] [--causal] [--variant standard|dynmax] [--trace-rows r0,r1,...]";
}

Fa2Options parse_fa2_args(int argc, const char* const* argv) {
  Fa2Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--causal") {
      o.causal = true;
      continue;
    }
    const bool known = arg == "--out" || arg == "--input" || arg == "--variant" || arg == "--batch" ||
                       arg == "--heads" || arg == "--seq" || arg == "--hdim" || arg == "--seed" ||
                       arg == "--trace-rows";
    if (!known) throw Fa2UsageError("unknown argument '" + arg + "'");
    if (i + 1 >= argc) throw Fa2UsageError(arg + ": missing value");
    const char* value = argv[++i];
    if (arg == "--out")
      o.out = value;
    else if (arg == "--input")
      o.input = value;
    else if (arg == "--variant")
      o.variant = value;
    else if (arg == "--batch")
      o.batch = parse_int(arg, value);
    else if (arg == "--heads")
      o.heads = parse_int(arg, value);
    else if (arg == "--seq")
      o.seq = parse_int(arg, value);
    else if (arg == "--hdim")
      o.hdim = parse_int(arg, value);
    else if (arg == "--seed") {
      const long long s = parse_integer(arg, value);
      if (s < 0) throw Fa2UsageError("--seed: must be >= 0");
      o.seed = static_cast<std::uint64_t>(s);
    } else {  // --trace-rows
      o.trace_rows.clear();
      std::stringstream list(value);
      std::string item;
      while (std::getline(list, item, ',')) {
        if (!item.empty()) o.trace_rows.push_back(parse_int(arg, item.c_str()));
      }
    }
  }
  if (o.out.empty()) throw Fa2UsageError("--out is required");
  if (o.variant != "standard" && o.variant != "dynmax") {
    throw Fa2UsageError("--variant: expected standard or dynmax, got '" + o.variant + "'");
  }
  return o;
}

void validate_fa2_problem(const Fa2Options& o) {
  if (o.hdim != 64 && o.hdim != 128) {
    throw Fa2UsageError("head dim must be 64 or 128, not " + std::to_string(o.hdim));
  }
  if (o.seq < kFa2SeqMultiple || o.seq > kFa2MaxSeq || o.seq % kFa2SeqMultiple != 0) {
    throw Fa2UsageError("sequence length must be a multiple of " + std::to_string(kFa2SeqMultiple) + " in [" +
                        std::to_string(kFa2SeqMultiple) + ", " + std::to_string(kFa2MaxSeq) + "], not " +
                        std::to_string(o.seq));
  }
  if (o.batch < 1 || o.heads < 1) throw Fa2UsageError("batch and heads must be >= 1");
  if (static_cast<long long>(o.batch) * o.heads > kFa2MaxGridY) {
    throw Fa2UsageError("batch * heads must be <= " + std::to_string(kFa2MaxGridY));
  }
  if (o.trace_rows.size() > static_cast<std::size_t>(kFa2MaxTraceRows)) {
    throw Fa2UsageError("at most " + std::to_string(kFa2MaxTraceRows) + " --trace-rows");
  }
  for (std::size_t i = 0; i < o.trace_rows.size(); ++i) {
    const int r = o.trace_rows[i];
    if (r < 0 || r >= o.seq) {
      throw Fa2UsageError("--trace-rows: row " + std::to_string(r) + " is outside [0, " + std::to_string(o.seq) + ")");
    }
    for (std::size_t j = 0; j < i; ++j)
      if (o.trace_rows[j] == r) throw Fa2UsageError("--trace-rows: row " + std::to_string(r) + " given twice");
  }
}

bool parse_fa2_bool(const std::string& text, const std::string& what) {
  if (const auto value = parse_metadata_bool(text)) return *value;
  throw Fa2UsageError(what + ": expected true or false, got '" + text + "'");
}

std::string fa2_float_text(float f) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(f));
  return buf;
}

std::string fa2_double_text(double d) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.17g", d);
  return buf;
}

std::map<std::string, std::string> fa2_trace_metadata(const Fa2RunFacts& run, const Fa2DeviceInfo& device) {
  const Fa2Options& o = run.options;
  const Fa2TileSizes tiles = fa2_tile_sizes(o.hdim);
  const bool dynmax = o.variant == "dynmax";
  std::ostringstream rows;
  for (std::size_t i = 0; i < run.trace_rows.size(); ++i) rows << (i ? "," : "") << run.trace_rows[i];
  std::map<std::string, std::string> m = {
      {"source", "cuda:" + device.name},
      {"device", device.name},
      {"compute_capability", std::to_string(device.major) + "." + std::to_string(device.minor)},
      {"driver", std::to_string(device.driver)},
      {"cuda_runtime", std::to_string(device.runtime)},
      {"versions", "cuda_driver=" + std::to_string(device.driver) + " cuda_runtime=" + std::to_string(device.runtime)},
      {"kernel", std::string("fb-fa2 reference forward+backward (dq, dk, dv)") + (dynmax ? " +dynmax" : "")},
      {"model", std::string(device.major >= 9 ? "fa2-sm90" : "fa2-sm80") + (dynmax ? "+dynmax" : "")},
      {"variant", o.variant},
      // the double the kernel's constants came from: the CPU model derives the same float
      // scale and scale_log2 = float(scale * log2 e) from it
      {"softmax_scale", fa2_double_text(run.softmax_scale)},
      {"scale_log2", fa2_float_text(run.scale_log2)},
      {"causal", o.causal ? "true" : "false"},
      {"dtype", "bf16"},
      {"head_dim", std::to_string(o.hdim)},
      {"block_m", std::to_string(tiles.block_m)},
      {"block_n", std::to_string(tiles.block_n)},
      {"bwd_block_m", std::to_string(tiles.bwd_block_m)},
      {"bwd_block_n", std::to_string(tiles.bwd_block_n)},
      {"warp_layout",
       "forward: block_m/16 warps x 16 query rows; backward dk/dv: bwd_block_n/16 warps x 16 keys; "
       "backward dq: bwd_block_m/16 warps x 16 query rows (FA2: 4 warps fwd, 8 bwd)"},
      {"kv_order_forward", "last_to_first"},
      {"m_block_order_dkdv", "last_to_first"},
      {"kv_order_dq", "first_to_last (deterministic; FA2 adds per-block dQ with atomics)"},
      {"trace_rows", rows.str()},
      {"trace_layout",
       "trace_*[slot][kv_block index][...] for batch 0 head 0, NaN for KV blocks a causal m-block skips; "
       "trace_l_partial holds the 4 per-thread partial row sums (quad lanes t=0..3)"},
      {"dq_accum", "fp32 dQ*softmax_scale before the bf16 cast"},
  };
  if (dynmax) {
    m["dynmax_beta"] = fa2_float_text(kFa2DynmaxBeta);
    m["dynmax_tolerance"] = fa2_double_text(kFa2DynmaxTol);
  }
  if (!run.scenario.empty()) m["scenario"] = run.scenario;
  if (!o.input.empty()) m["input_trace"] = o.input;
  return m;
}

}  // namespace fb::gpu
