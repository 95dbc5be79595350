// gpu/sfu_probe.cu: fb-sfu-probe, exhaustive measurement of the MUFU approximations.
//
// Contract: evaluates ex2.approx.ftz.f32, rcp.approx.ftz.f32 and lg2.approx.ftz.f32
// (inline PTX) on all 2^32 fp32 inputs, in chunks, on the device, and compares each
// result with the correctly rounded (RNE) value of the exact function after .ftz input
// flushing, with .ftz output flushing applied to the reference too.
// - The reference is computed on the device in double (CUDA's exp2/log2 are within
//   1-2 double ulps; 1/x is correctly rounded). Where the double result lies within
//   2^-49 (relative) of an fp32 rounding boundary the rounding direction is not proven;
//   those inputs are counted as "uncertain", listed in the summary (up to a cap), and
//   re-resolved on the host with long double (x87, 64-bit significand); any still too
//   close are reported as unresolved (resolve them with MPFR on the CPU side).
// - Hypotheses of DESIGN.md §5 tested exhaustively:
//   ex2: result(x) = 2^k * T(f) where k.f is x as a fixed-point number with N fraction
//        bits, for each N in --ex2-bits (default 18..24) and each way of forming the
//        fixed-point number in --ex2-roundings (floor, nearest_even, toward_zero: the
//        argument roundings the emu's ex2_fixed_point table model implements);
//   rcp: result(2^e * m) = 2^-e * T(m) for normal inputs with normal results (key: the
//        mantissa field, gpu/sfu_table_model.hpp rcp_mantissa_split; domain: biased input
//        exponent 2..252, positive and negative).
//   A hypothesis holds when no two inputs with the same key (inside the domain where
//   2^k * T(f) stays normal, x in [-125, 127) for ex2) disagree. The ex2 key is the table model's
//   own split of x (gpu/sfu_table_model.hpp ex2_fixed_point_split), so the captured table
//   is indexed exactly as the model, and the emu after conversion, reads it.
// - When an ex2 hypothesis holds (N <= 24), the table is then evaluated on the device
//   exactly as the emu's table model evaluates it (emu/special_functions.cpp
//   Ex2FixedPointModel::evaluate, restated in gpu/sfu_table_model.hpp: input ftz, NaN ->
//   the measured NaN output, x >= 128 -> +inf, x < -160 -> +0, 2^k * T[i] with overflow to
//   inf and flush below 2^-126) on ALL 2^32 inputs and compared bit for bit with the
//   hardware; the mismatch count, per input region, goes into the summary and the table
//   header (table_model_mismatches), and fb-sfu-table-convert converts only a table with 0.
// - Likewise, when the rcp hypothesis holds, its table T[m] (the outputs for 1.m) is evaluated
//   on the device as the emu's FBSFU1 rcp_mantissa model does (RcpMantissaModel::evaluate,
//   restated in gpu/sfu_table_model.hpp rcp_table_model: input ftz, NaN -> the measured NaN
//   output, +-0 -> +-inf, +-inf -> +-0, +-T[m] * 2^-e with flush below 2^-126) on all 2^32
//   inputs; the mismatches per region go into the summary and the header, as for ex2.
// - Writes a summary (sfu_summary.txt) and, for the smallest N (then the first rounding
//   in floor, nearest_even, toward_zero order) at which a hypothesis holds and verifies,
//   a table file in the format documented in gpu/README.md ("FBSFUT1"); if no holding
//   ex2 table verifies, the first holding one is written anyway (its header says how
//   many inputs it gets wrong); the same for the one rcp table (rcp_table_n23.fbsfut).
// - lg2: one hypothesis is counted on all positive normal inputs: lg2(2^e * 1.m) =
//   RN_fp32(e + lg2hw(1.m)), the e = 0 outputs determining every binade
//   (gpu/sfu_table_model.hpp lg2_exponent_split_model); the summary gives the mismatch count,
//   the ulp histogram of hardware minus prediction, the counts per exponent and the first
//   examples. When it holds, T[m] = lg2hw(1.m) is captured and evaluated on the device as the
//   emu's FBSFU1 lg2_exponent_split model does (Lg2ExponentSplitModel::evaluate, restated in
//   gpu/sfu_table_model.hpp lg2_table_model: input ftz, NaN and x < 0 -> the measured NaN
//   output, +-0 -> -inf, +inf -> +inf, RN_fp32(e + T[m])) on all 2^32 inputs, with the
//   mismatches per region in the summary and header, and written as lg2_table_n23.fbsfut.
// Compiled here, NOT yet run on a GPU.
// Usage: fb-sfu-probe --out-dir DIR [--ex2-bits 18,20,22,23,24]
//        [--ex2-roundings floor,nearest_even,toward_zero] [--chunk-log2 28]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gpu/device_common.cuh"
#include "gpu/sfu_table_model.hpp"

namespace fb::gpu {
namespace {

enum Fn : int { kEx2, kRcp, kLg2, kFnCount };
// ArgRounding (gpu/sfu_table_model.hpp) has emu's FixedPointRounding numbering.
const char* const kArgRoundingNames[kArgRoundingCount] = {"floor", "nearest_even", "toward_zero"};
const char* const kFnNames[kFnCount] = {"ex2", "rcp", "lg2"};
const char* const kFnPtx[kFnCount] = {"ex2.approx.ftz.f32", "rcp.approx.ftz.f32", "lg2.approx.ftz.f32"};

constexpr int kHistHalf = 8;  // bins for -8..8 ulps, plus below/above, plus NaN classes
constexpr int kHistBins = 2 * kHistHalf + 1;
constexpr int kBinBelow = kHistBins, kBinAbove = kHistBins + 1, kBinNanBoth = kHistBins + 2,
              kBinNanMismatch = kHistBins + 3, kBinCount = kHistBins + 4;
constexpr std::uint32_t kUncertainCap = 1u << 16;
constexpr std::uint32_t kEmpty = 0xffffffffu;

struct Stats {
  unsigned long long hist[kBinCount];
  long long max_abs_ulps;
  unsigned int uncertain;
  std::uint32_t uncertain_inputs[kUncertainCap];
};


// Ordered integer of an fp32 pattern, so that differences count ulps across zero.
__host__ __device__ inline long long ordered(std::uint32_t bits) {
  const long long mag = bits & 0x7fffffffu;
  return (bits >> 31) ? -mag : mag;
}

__device__ inline float hw(int fn, float x) {
  return fn == kEx2 ? ex2_approx_ftz(x) : fn == kRcp ? rcp_approx_ftz(x) : lg2_approx_ftz(x);
}

// Correctly rounded reference from a double approximation; sets `uncertain` when the
// double is too close to an fp32 rounding boundary for its error bound.
__host__ __device__ inline float round_reference(double r, bool& uncertain) {
  uncertain = false;
  const float f = static_cast<float>(r);  // RNE
  if (!isfinite(r) || r == 0.0 || !isfinite(f) || f == 0.f) return f;
  const float toward = static_cast<double>(f) < r ? nextafterf(f, INFINITY) : nextafterf(f, -INFINITY);
  if (!isfinite(toward)) return f;
  const double boundary = 0.5 * (static_cast<double>(f) + static_cast<double>(toward));
  uncertain = fabs(r - boundary) <= fabs(r) * 0x1p-49;
  return f;
}

__device__ inline double exact_fn(int fn, double x) {
  return fn == kEx2 ? exp2(x) : fn == kRcp ? 1.0 / x : log2(x);
}

__global__ void measure_kernel(int fn, std::uint64_t base, std::uint64_t count, Stats* stats) {
  __shared__ unsigned long long hist[kBinCount];
  for (int i = threadIdx.x; i < kBinCount; i += blockDim.x) hist[i] = 0;
  __syncthreads();
  long long local_max = 0;
  for (std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
    const std::uint32_t in = static_cast<std::uint32_t>(base + i);
    const float x = __uint_as_float(in);
    const float y = hw(fn, x);
    bool uncertain = false;
    const float ref = sfu_ftz(round_reference(exact_fn(fn, static_cast<double>(sfu_ftz(x))), uncertain));
    int bin;
    if (isnan(y) || isnan(ref)) {
      bin = (isnan(y) && isnan(ref)) ? kBinNanBoth : kBinNanMismatch;
    } else {
      const long long d = ordered(__float_as_uint(y)) - ordered(__float_as_uint(ref));
      bin = d < -kHistHalf ? kBinBelow : d > kHistHalf ? kBinAbove : static_cast<int>(d) + kHistHalf;
      local_max = max(local_max, d < 0 ? -d : d);
    }
    atomicAdd(&hist[bin], 1ull);
    if (uncertain) {
      const unsigned int slot = atomicAdd(&stats->uncertain, 1u);
      if (slot < kUncertainCap) stats->uncertain_inputs[slot] = in;
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kBinCount; i += blockDim.x) atomicAdd(&stats->hist[i], hist[i]);
  atomicMax(&stats->max_abs_ulps, local_max);
}

// Records `value` at `key` unless the key already holds one; returns 1 when it holds a
// different one (a conflict). An entry is written once, so a non-empty L2 read is final and
// only the first few inputs per key pay for the atomic.
__device__ inline unsigned long long record_key(std::uint32_t* table, std::uint32_t key, std::uint32_t value) {
  std::uint32_t old = __ldcg(&table[key]);
  if (old == kEmpty) old = atomicCAS(&table[key], kEmpty, value);
  return (old != kEmpty && old != value) ? 1ull : 0ull;
}

// ex2 fixed-point hypothesis with N fraction bits: key = frac of the fixed-point x * 2^N,
// value = result bits minus k in the exponent field. Domain: x in [-125, 127) with a
// normal result, where 2^k * T(f) cannot leave the normal range.
__global__ void ex2_hypothesis_kernel(int nbits, int rounding, std::uint64_t base, std::uint64_t count,
                                      std::uint32_t* table, unsigned long long* conflicts) {
  unsigned long long local_conflicts = 0;
  for (std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
    const float x = __uint_as_float(static_cast<std::uint32_t>(base + i));
    if (!(x >= -125.f && x < 127.f)) continue;
    const float y = ex2_approx_ftz(x);
    const Ex2FixedPointSplit split = ex2_fixed_point_split(sfu_ftz(x), nbits, rounding);  // the model's key
    const std::uint32_t v = static_cast<std::uint32_t>(static_cast<long long>(__float_as_uint(y)) - (split.k << 23));
    local_conflicts += record_key(table, split.index, v);
  }
  if (local_conflicts) atomicAdd(conflicts, local_conflicts);  // one atomic per thread, not per input
}

// Regions of the input range, for reporting where a table model differs from the hardware
// (the models themselves: gpu/sfu_table_model.hpp ex2_table_model, rcp_table_model).
constexpr int kRegionCount = 6;
const char* const kEx2RegionNames[kRegionCount] = {"NaN",          "x >= 128",    "x < -160",
                                                   "[-160, -125)", "[-125, 127)", "[127, 128)"};
const char* const kRcpRegionNames[kRegionCount] = {"NaN",          "+-0 and subnormal", "+-inf",
                                                   "|x| in [2^-126, 2^-125)", "|x| in [2^-125, 2^126)",
                                                   "|x| >= 2^126 finite"};
__device__ inline int ex2_region(float x) {
  if (isnan(x)) return 0;
  if (x >= kEx2InfFrom) return 1;
  if (x < kEx2ZeroBelow) return 2;
  if (x < -125.f) return 3;
  return x < 127.f ? 4 : 5;
}
const char* const kLg2RegionNames[kRegionCount] = {"NaN", "+-0 and subnormal", "x < 0 (-inf included)", "+inf",
                                                   "[1, 2)", "other positive normal"};
__device__ inline int lg2_region(float x) {
  if (isnan(x)) return 0;
  if (fabsf(x) < 0x1p-126f) return 1;
  if (x < 0.f) return 2;
  if (x == INFINITY) return 3;
  return (x >= 1.f && x < 2.f) ? 4 : 5;
}
__device__ inline int rcp_region(float x) {
  const float a = fabsf(x);
  if (isnan(x)) return 0;
  if (a < 0x1p-126f) return 1;
  if (a == INFINITY) return 2;
  if (a < 0x1p-125f) return 3;
  return a < 0x1p126f ? 4 : 5;
}
constexpr unsigned kVerifyExamples = 16;
struct VerifyResult {
  unsigned long long mismatches[kRegionCount];
  unsigned int examples;
  std::uint32_t example[kVerifyExamples][3];  // input, hardware, model
};

// Evaluates the table model of `fn` (ex2: fixed point with nbits and rounding; rcp and lg2:
// the mantissa table, nbits = 23) on every input of the chunk and records where it differs
// from the hardware.
__global__ void table_verify_kernel(int fn, int nbits, int rounding, const std::uint32_t* table,
                                    std::uint32_t nan_output, std::uint64_t base, std::uint64_t count,
                                    VerifyResult* result) {
  for (std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
    const std::uint32_t in = static_cast<std::uint32_t>(base + i);
    const float x = __uint_as_float(in);
    const std::uint32_t hw_bits = __float_as_uint(hw(fn, x));
    const std::uint32_t model_bits = fn == kEx2   ? ex2_table_model(x, nbits, rounding, table, nan_output)
                                     : fn == kRcp ? rcp_table_model(x, table, nan_output)
                                                  : lg2_table_model(x, table, nan_output);
    if (hw_bits == model_bits) continue;
    atomicAdd(&result->mismatches[fn == kEx2 ? ex2_region(x) : fn == kRcp ? rcp_region(x) : lg2_region(x)], 1ull);
    const unsigned int slot = atomicAdd(&result->examples, 1u);
    if (slot < kVerifyExamples) {
      result->example[slot][0] = in;
      result->example[slot][1] = hw_bits;
      result->example[slot][2] = model_bits;
    }
  }
}

// rcp scaling hypothesis: key = mantissa field, value = result bits plus the input's
// unbiased exponent in the exponent field (the sign dropped: the table holds the outputs for
// positive 1.m; table_verify_kernel checks negative inputs).
__global__ void rcp_hypothesis_kernel(std::uint64_t base, std::uint64_t count, std::uint32_t* table,
                                      unsigned long long* conflicts) {
  unsigned long long local_conflicts = 0;
  for (std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
    const std::uint32_t in = static_cast<std::uint32_t>(base + i);
    const int biased = static_cast<int>((in >> 23) & 0xff);
    if (biased < 2 || biased > 252) continue;  // normal inputs whose reciprocal is normal
    const float y = rcp_approx_ftz(__uint_as_float(in));
    const RcpMantissaSplit split = rcp_mantissa_split(in);  // the model's key
    const std::uint32_t m = split.mantissa;
    const long long e = split.e;
    const std::uint32_t v = static_cast<std::uint32_t>(static_cast<long long>(__float_as_uint(y) & 0x7fffffffu) + (e << 23));
    local_conflicts += record_key(table, m, v);
  }
  if (local_conflicts) atomicAdd(conflicts, local_conflicts);  // one atomic per thread, not per input
}

// lg2 exponent-split hypothesis: for every positive normal x = 2^e * 1.m, the hardware's
// lg2(x) equals RN_fp32(e + lg2hw(1.m)) (gpu/sfu_table_model.hpp lg2_exponent_split_model),
// i.e. the e = 0 outputs determine every binade. Counts the inputs where it does not, per
// exponent, with the difference in ulps and the first few examples.
constexpr int kLg2Exponents = 254;  // e = -126 .. 127
struct Lg2SplitResult {
  unsigned long long tested;
  unsigned long long mismatches_by_exponent[kLg2Exponents];
  unsigned long long hist[kBinCount];  // hardware minus prediction, ulps (NaN classes unused)
  long long max_abs_ulps;
  unsigned int examples;
  std::uint32_t example[kVerifyExamples][3];  // input, hardware, prediction
};

__global__ void lg2_split_hypothesis_kernel(std::uint64_t base, std::uint64_t count, Lg2SplitResult* result) {
  unsigned long long local_tested = 0;
  long long local_max = 0;
  for (std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
    const std::uint32_t in = static_cast<std::uint32_t>(base + i);
    const std::uint32_t biased = (in >> 23) & 0xffu;
    if ((in >> 31) != 0 || biased == 0 || biased == 255) continue;  // positive normal inputs only
    ++local_tested;
    const std::uint32_t hw_bits = __float_as_uint(lg2_approx_ftz(__uint_as_float(in)));
    const std::uint32_t t_bits = __float_as_uint(lg2_approx_ftz(__uint_as_float(0x3f800000u | (in & 0x7fffffu))));
    const std::uint32_t predicted = lg2_exponent_split_model(in, t_bits);
    if (hw_bits == predicted) continue;
    atomicAdd(&result->mismatches_by_exponent[biased - 1], 1ull);
    const long long d = ordered(hw_bits) - ordered(predicted);
    const int bin = d < -kHistHalf ? kBinBelow : d > kHistHalf ? kBinAbove : static_cast<int>(d) + kHistHalf;
    atomicAdd(&result->hist[bin], 1ull);
    local_max = max(local_max, d < 0 ? -d : d);
    const unsigned int slot = atomicAdd(&result->examples, 1u);
    if (slot < kVerifyExamples) {
      result->example[slot][0] = in;
      result->example[slot][1] = hw_bits;
      result->example[slot][2] = predicted;
    }
  }
  if (local_tested) atomicAdd(&result->tested, local_tested);  // one atomic per thread, not per input
  if (local_max) atomicMax(&result->max_abs_ulps, local_max);
}

// The lg2_exponent_split table: T[m] = the hardware's lg2(1.m).
__global__ void lg2_mantissa_table_kernel(std::uint32_t* table) {
  for (std::uint32_t m = blockIdx.x * blockDim.x + threadIdx.x; m < kLg2MantissaTableEntries; m += gridDim.x * blockDim.x) {
    table[m] = __float_as_uint(lg2_approx_ftz(__uint_as_float(0x3f800000u | m)));
  }
}

// Runs the lg2 exponent-split hypothesis over all 2^32 inputs and writes its verdict; true
// when it holds.
bool lg2_split_hypothesis(std::uint64_t chunk, std::ostringstream& summary) {
  Lg2SplitResult* r;
  FB_CUDA_CHECK(cudaMallocManaged(&r, sizeof(Lg2SplitResult)));
  std::memset(r, 0, sizeof(Lg2SplitResult));
  for (std::uint64_t base = 0; base < (1ull << 32); base += chunk) {
    lg2_split_hypothesis_kernel<<<4096, 256>>>(base, chunk, r);
    FB_CUDA_CHECK(cudaGetLastError());
  }
  FB_CUDA_CHECK(cudaDeviceSynchronize());
  unsigned long long mismatches = 0;
  for (int e = 0; e < kLg2Exponents; ++e) mismatches += r->mismatches_by_exponent[e];
  summary << "  hypothesis lg2(2^e * 1.m) = RN_fp32(e + lg2(1.m)) over " << r->tested
          << " positive normal inputs: " << (mismatches == 0 ? "HOLDS" : "fails") << " (" << mismatches
          << " inputs differ, max |ulp difference| " << r->max_abs_ulps << ")\n";
  if (mismatches != 0) {
    summary << "    hardware minus prediction (ulps: count):";
    for (int b = 0; b < kHistBins; ++b) {
      if (r->hist[b]) summary << " " << (b - kHistHalf) << ":" << r->hist[b];
    }
    summary << " <-" << kHistHalf << ":" << r->hist[kBinBelow] << " >" << kHistHalf << ":" << r->hist[kBinAbove]
            << "\n    per exponent e (e: count of 2^23 inputs):";
    int listed = 0;
    for (int e = 0; e < kLg2Exponents; ++e) {
      if (r->mismatches_by_exponent[e] == 0) continue;
      summary << (listed++ % 8 == 0 ? "\n     " : "") << " " << (e - 126) << ":" << r->mismatches_by_exponent[e];
    }
    summary << "\n";
    for (unsigned int e = 0; e < std::min(r->examples, kVerifyExamples); ++e) {
      char line[96];
      std::snprintf(line, sizeof line, "    x=0x%08x hardware=0x%08x prediction=0x%08x\n", r->example[e][0],
                    r->example[e][1], r->example[e][2]);
      summary << line;
    }
  }
  FB_CUDA_CHECK(cudaFree(r));
  return mismatches == 0;
}

// Table entries as 4-bit deltas (in ulps) from the correctly rounded exact value at the
// key; -8 escapes to an explicit (key, bits) pair: used for deltas outside -7..7 and for
// keys whose double reference was too close to a rounding boundary to be trusted.
constexpr int kEscape = -8;
__global__ void table_delta_kernel(int fn, int nbits, const std::uint32_t* table, std::uint32_t entries,
                                   signed char* delta, unsigned int* counts, std::uint32_t* escapes,
                                   std::uint32_t escape_cap) {
  // counts: [0] unfilled keys, [1] escapes, [2] of which reference-uncertain
  for (std::uint32_t j = blockIdx.x * blockDim.x + threadIdx.x; j < entries; j += gridDim.x * blockDim.x) {
    bool uncertain = false;
    const double frac = ldexp(static_cast<double>(j), -nbits);  // in [0,1)
    const float ref = round_reference(fn == kEx2 ? exp2(frac) : fn == kRcp ? 1.0 / (1.0 + frac) : log2(1.0 + frac), uncertain);
    if (table[j] == kEmpty) {
      atomicAdd(&counts[0], 1u);
      delta[j] = 0;
      continue;
    }
    const long long d = static_cast<long long>(table[j]) - static_cast<long long>(__float_as_uint(ref));
    if (uncertain || d < -7 || d > 7) {
      delta[j] = kEscape;
      const unsigned int slot = atomicAdd(&counts[1], 1u);
      if (uncertain) atomicAdd(&counts[2], 1u);
      if (slot < escape_cap) {
        escapes[2 * slot] = j;
        escapes[2 * slot + 1] = table[j];
      }
    } else {
      delta[j] = static_cast<signed char>(d);
    }
  }
}

struct Options {
  std::string out_dir = ".";
  std::vector<int> ex2_bits = {18, 20, 22, 23, 24};
  std::vector<int> ex2_roundings = {kFloor, kNearestEven, kTowardZero};
  int chunk_log2 = 28;
};

std::string device_line(const cudaDeviceProp& prop) {
  int driver = 0, runtime = 0;
  FB_CUDA_CHECK(cudaDriverGetVersion(&driver));
  FB_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  std::ostringstream s;
  s << "source=cuda:" << prop.name << "\ndevice=" << prop.name << "\ncompute_capability=" << prop.major << "."
    << prop.minor << "\ndriver=" << driver << "\ncuda_runtime=" << runtime << "\n";
  return s.str();
}

// FBSFUT1 (gpu/README.md): text header up to "end\n", then 2^N 4-bit deltas packed two
// per byte (entry 2i in the low nibble), then u32 escape count and (u32 key, u32 bits) pairs.
// `extra` holds header lines ("key=value\n") that depend on the function (argument
// rounding and the table-model verification for ex2).
void emit_table(int fn, int nbits, const std::string& key, std::uint32_t* d_table, const Options& o,
                const std::string& device, std::uint32_t nan_output, const std::string& extra,
                std::ostringstream& summary) {
  const std::uint32_t entries = 1u << nbits, escape_cap = 1u << 20;
  signed char* d_delta;
  unsigned int* d_counts;
  std::uint32_t* d_escapes;
  FB_CUDA_CHECK(cudaMalloc(&d_delta, entries));
  FB_CUDA_CHECK(cudaMalloc(&d_counts, 3 * sizeof(unsigned int)));
  FB_CUDA_CHECK(cudaMalloc(&d_escapes, 2ull * escape_cap * 4));
  FB_CUDA_CHECK(cudaMemset(d_counts, 0, 3 * sizeof(unsigned int)));
  table_delta_kernel<<<1024, 256>>>(fn, nbits, d_table, entries, d_delta, d_counts, d_escapes, escape_cap);
  FB_CUDA_CHECK(cudaGetLastError());
  std::vector<signed char> delta(entries);
  unsigned int counts[3];
  FB_CUDA_CHECK(cudaMemcpy(delta.data(), d_delta, entries, cudaMemcpyDeviceToHost));
  FB_CUDA_CHECK(cudaMemcpy(counts, d_counts, sizeof counts, cudaMemcpyDeviceToHost));
  std::vector<std::uint32_t> escapes(2ull * std::min(counts[1], escape_cap));
  FB_CUDA_CHECK(cudaMemcpy(escapes.data(), d_escapes, escapes.size() * 4, cudaMemcpyDeviceToHost));
  FB_CUDA_CHECK(cudaFree(d_delta));
  FB_CUDA_CHECK(cudaFree(d_counts));
  FB_CUDA_CHECK(cudaFree(d_escapes));
  const std::string name = std::string(kFnNames[fn]) + "_table_n" + std::to_string(nbits) +
                           (fn == kEx2 ? "_" + key.substr(key.rfind("point_") + 6) : std::string()) + ".fbsfut";
  if (counts[1] > escape_cap || counts[0] != 0) {
    summary << "  NOT writing " << name << ": " << counts[0] << " keys never seen, " << counts[1] << " escapes\n";
    return;
  }
  std::ofstream f(o.out_dir + "/" + name, std::ios::binary);
  f << "FBSFUT1\nfunction=" << kFnNames[fn] << "\nkey=" << key << "\nkey_bits=" << nbits << "\nentries=" << entries
    << "\nnan_output=" << nan_output << "\n" << extra << device << "end\n";
  std::vector<unsigned char> packed(entries / 2);
  for (std::uint32_t i = 0; i < entries; i += 2) {
    packed[i / 2] = static_cast<unsigned char>((delta[i] & 0xf) | ((delta[i + 1] & 0xf) << 4));
  }
  f.write(reinterpret_cast<const char*>(packed.data()), static_cast<std::streamsize>(packed.size()));
  const std::uint32_t n_escapes = counts[1];
  f.write(reinterpret_cast<const char*>(&n_escapes), 4);  // the device and file are little-endian
  f.write(reinterpret_cast<const char*>(escapes.data()), static_cast<std::streamsize>(escapes.size() * 4));
  summary << "  wrote " << name << ": " << entries << " entries, " << counts[1] << " escaped (" << counts[2]
          << " of them because the double reference was too close to a rounding boundary)\n";
}

__global__ void nan_output_kernel(int fn, std::uint32_t* out) {
  *out = __float_as_uint(hw(fn, __uint_as_float(0x7fc00000u)));
}

// The bits the hardware returns for a NaN input (the tables' nan_output).
std::uint32_t measure_nan_output(int fn) {
  std::uint32_t* d_nan;
  std::uint32_t nan_output = 0;
  FB_CUDA_CHECK(cudaMalloc(&d_nan, 4));
  nan_output_kernel<<<1, 1>>>(fn, d_nan);
  FB_CUDA_CHECK(cudaMemcpy(&nan_output, d_nan, 4, cudaMemcpyDeviceToHost));
  FB_CUDA_CHECK(cudaFree(d_nan));
  return nan_output;
}

// Evaluates the table model of `fn` on all 2^32 inputs against the hardware, writes the
// mismatches per region and the first examples to the summary and returns their count.
unsigned long long verify_table_model(int fn, int nbits, int rounding, const std::uint32_t* d_table,
                                      std::uint32_t nan_output, std::uint64_t chunk, std::ostringstream& summary) {
  VerifyResult* verify;
  FB_CUDA_CHECK(cudaMallocManaged(&verify, sizeof(VerifyResult)));
  std::memset(verify, 0, sizeof(VerifyResult));
  for (std::uint64_t base = 0; base < (1ull << 32); base += chunk) {
    table_verify_kernel<<<4096, 256>>>(fn, nbits, rounding, d_table, nan_output, base, chunk, verify);
    FB_CUDA_CHECK(cudaGetLastError());
  }
  FB_CUDA_CHECK(cudaDeviceSynchronize());
  if (fn == kEx2) {
    summary << "  table model (emu Ex2FixedPointModel, N=" << nbits << ", " << kArgRoundingNames[rounding]
            << ") vs hardware on all 2^32 inputs:";
  } else if (fn == kRcp) {
    summary << "  table model (emu RcpMantissaModel, 2^23 mantissas) vs hardware on all 2^32 inputs:";
  } else {
    summary << "  table model (emu Lg2ExponentSplitModel, 2^23 mantissas) vs hardware on all 2^32 inputs:";
  }
  const char* const* region_names = fn == kEx2 ? kEx2RegionNames : fn == kRcp ? kRcpRegionNames : kLg2RegionNames;
  unsigned long long mismatches = 0;
  for (int r = 0; r < kRegionCount; ++r) {
    mismatches += verify->mismatches[r];
    summary << " " << region_names[r] << ": " << verify->mismatches[r];
  }
  summary << " mismatches" << (mismatches == 0 ? " (REPRODUCES the hardware)" : "") << "\n";
  for (unsigned int e = 0; e < std::min(verify->examples, kVerifyExamples); ++e) {
    char line[96];
    std::snprintf(line, sizeof line, "    x=0x%08x hardware=0x%08x model=0x%08x\n", verify->example[e][0],
                  verify->example[e][1], verify->example[e][2]);
    summary << line;
  }
  FB_CUDA_CHECK(cudaFree(verify));
  return mismatches;
}

// When the lg2 exponent-split hypothesis held: captures T[m] = lg2hw(1.m), verifies the
// emu's model of it on all inputs and writes it (lg2_table_n23.fbsfut), as for rcp.
void emit_lg2_table(std::uint64_t chunk, const Options& o, const std::string& dev, std::ostringstream& summary) {
  std::uint32_t* d_table;
  FB_CUDA_CHECK(cudaMalloc(&d_table, kLg2MantissaTableEntries * 4ull));
  lg2_mantissa_table_kernel<<<1024, 256>>>(d_table);
  FB_CUDA_CHECK(cudaGetLastError());
  const std::uint32_t nan_output = measure_nan_output(kLg2);
  const unsigned long long mismatches = verify_table_model(kLg2, 23, kFloor, d_table, nan_output, chunk, summary);
  const std::string extra =
      "table_model=lg2_exponent_split\ntable_model_mismatches=" + std::to_string(mismatches) + "\n";
  emit_table(kLg2, 23, "lg2_exponent_split", d_table, o, dev, nan_output, extra, summary);
  FB_CUDA_CHECK(cudaFree(d_table));
}

int run(const Options& o) {
  int device = 0;
  cudaDeviceProp prop;
  FB_CUDA_CHECK(cudaGetDevice(&device));
  FB_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  const std::string dev = device_line(prop);
  const std::uint64_t chunk = 1ull << o.chunk_log2, total = 1ull << 32;
  std::ostringstream summary;
  summary << "fb-sfu-probe summary (all 2^32 fp32 inputs)\n" << dev;
  Stats* stats;
  FB_CUDA_CHECK(cudaMallocManaged(&stats, sizeof(Stats)));
  for (int fn = 0; fn < kFnCount; ++fn) {
    std::memset(stats, 0, sizeof(Stats));
    for (std::uint64_t base = 0; base < total; base += chunk) {
      measure_kernel<<<4096, 256>>>(fn, base, chunk, stats);
      FB_CUDA_CHECK(cudaGetLastError());
    }
    FB_CUDA_CHECK(cudaDeviceSynchronize());
    summary << "\n[" << kFnPtx[fn] << "] vs correctly rounded (RNE, ftz in and out)\n";
    summary << "  max |ulp difference| (non-NaN) = " << stats->max_abs_ulps << "\n  histogram (ulps: count):";
    for (int b = 0; b < kHistBins; ++b) {
      if (stats->hist[b]) summary << " " << (b - kHistHalf) << ":" << stats->hist[b];
    }
    summary << " <-" << kHistHalf << ":" << stats->hist[kBinBelow] << " >" << kHistHalf << ":" << stats->hist[kBinAbove]
            << " nan_both:" << stats->hist[kBinNanBoth] << " nan_mismatch:" << stats->hist[kBinNanMismatch] << "\n";
    // Re-resolve the uncertain references with long double on the host.
    const unsigned int n_unc = std::min(stats->uncertain, kUncertainCap);
    unsigned int still = 0;
    std::ostringstream listing;
    for (unsigned int i = 0; i < n_unc; ++i) {
      const std::uint32_t in = stats->uncertain_inputs[i];
      float x;
      std::memcpy(&x, &in, 4);
      const long double xl = sfu_ftz(x);
      const long double r = fn == kEx2 ? exp2l(xl) : fn == kRcp ? 1.0L / xl : log2l(xl);
      const float f = static_cast<float>(r);
      const float toward = static_cast<long double>(f) < r ? nextafterf(f, INFINITY) : nextafterf(f, -INFINITY);
      const long double boundary = 0.5L * (static_cast<long double>(f) + static_cast<long double>(toward));
      const bool unresolved = fabsl(r - boundary) <= fabsl(r) * 0x1p-60L;
      still += unresolved;
      char line[96];
      std::snprintf(line, sizeof line, "    0x%08x ref(long double)=0x%08x%s\n", in,
                    [&] { std::uint32_t b; float g = sfu_ftz(f); std::memcpy(&b, &g, 4); return b; }(),
                    unresolved ? " UNRESOLVED" : "");
      listing << line;
    }
    summary << "  reference uncertain in double: " << stats->uncertain << " inputs (listed up to " << kUncertainCap
            << "), still unresolved with long double: " << still
            << " (their histogram bins above use the double reference)\n"
            << listing.str();

    if (fn == kEx2 || fn == kRcp) {
      std::vector<int> bits = fn == kEx2 ? o.ex2_bits : std::vector<int>{23};
      std::sort(bits.begin(), bits.end());
      const std::vector<int> roundings = fn == kEx2 ? o.ex2_roundings : std::vector<int>{kFloor};
      bool emitted = false, emitted_clean = false;  // keep the smallest N that holds (and verifies)
      // floor and toward-zero keys nest: the key at N determines the key at any N0 < N, so a
      // hypothesis that held at N0 holds at every larger N and is not re-run (nearest does not nest).
      int held_at[kArgRoundingCount] = {-1, -1, -1};
      for (int nbits : bits) {
        for (int rounding : roundings) {
          if (fn == kEx2 && rounding != kNearestEven && held_at[rounding] >= 0) {
            summary << "  hypothesis ex2(x) = 2^k * T(frac), x fixed point (" << kArgRoundingNames[rounding]
                    << ") with N=" << nbits << " fraction bits: HOLDS (implied by N=" << held_at[rounding] << ")\n";
            continue;
          }
          const std::uint64_t entries = 1ull << nbits;
          std::uint32_t* d_table;
          unsigned long long* d_conflicts;
          FB_CUDA_CHECK(cudaMalloc(&d_table, entries * 4));
          FB_CUDA_CHECK(cudaMalloc(&d_conflicts, sizeof(unsigned long long)));
          FB_CUDA_CHECK(cudaMemset(d_table, 0xff, entries * 4));
          FB_CUDA_CHECK(cudaMemset(d_conflicts, 0, sizeof(unsigned long long)));
          for (std::uint64_t base = 0; base < total; base += chunk) {
            if (fn == kEx2) ex2_hypothesis_kernel<<<4096, 256>>>(nbits, rounding, base, chunk, d_table, d_conflicts);
            else rcp_hypothesis_kernel<<<4096, 256>>>(base, chunk, d_table, d_conflicts);
            FB_CUDA_CHECK(cudaGetLastError());
          }
          unsigned long long conflicts = 0;
          FB_CUDA_CHECK(cudaMemcpy(&conflicts, d_conflicts, sizeof conflicts, cudaMemcpyDeviceToHost));
          summary << "  hypothesis "
                  << (fn == kEx2 ? std::string("ex2(x) = 2^k * T(frac), x fixed point (") + kArgRoundingNames[rounding] +
                                       ") with N="
                                 : std::string("rcp(2^e m) = 2^-e * T(m), N="))
                  << nbits << " fraction bits: " << (conflicts == 0 ? "HOLDS" : "fails") << " (" << conflicts
                  << " inputs disagree with the first seen at their key)\n";
          if (conflicts == 0 && held_at[rounding] < 0) held_at[rounding] = nbits;
          if (conflicts == 0 && nbits <= 24 && !emitted_clean) {
            const std::uint32_t nan_output = measure_nan_output(fn);
            const std::string key =
                fn == kEx2 ? std::string("ex2_fixed_point_") + kArgRoundingNames[rounding] : std::string("rcp_mantissa");
            const unsigned long long mismatches =
                verify_table_model(fn, nbits, rounding, d_table, nan_output, chunk, summary);
            const std::string extra =
                (fn == kEx2 ? "argument_rounding=" + std::string(kArgRoundingNames[rounding]) + "\n"
                            : std::string("table_model=rcp_mantissa\n")) +
                "table_model_mismatches=" + std::to_string(mismatches) + "\n";
            if (mismatches == 0 || !emitted) {
              emit_table(fn, nbits, key, d_table, o, dev, nan_output, extra, summary);
              emitted = true;
              emitted_clean = mismatches == 0;
            }
          }
          FB_CUDA_CHECK(cudaFree(d_table));
          FB_CUDA_CHECK(cudaFree(d_conflicts));
        }
      }
    }
    if (fn == kLg2 && lg2_split_hypothesis(chunk, summary)) emit_lg2_table(chunk, o, dev, summary);
    std::printf("%s done\n", kFnPtx[fn]);
  }
  FB_CUDA_CHECK(cudaFree(stats));
  std::ofstream(o.out_dir + "/sfu_summary.txt") << summary.str();
  std::fputs(summary.str().c_str(), stdout);
  return 0;
}

}  // namespace
}  // namespace fb::gpu

int main(int argc, char** argv) {
  fb::gpu::Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--out-dir" && i + 1 < argc) {
      o.out_dir = argv[++i];
    } else if (arg == "--chunk-log2" && i + 1 < argc) {
      o.chunk_log2 = std::atoi(argv[++i]);
    } else if (arg == "--ex2-roundings" && i + 1 < argc) {
      o.ex2_roundings.clear();
      std::stringstream s(argv[++i]);
      std::string item;
      while (std::getline(s, item, ',')) {
        int r = 0;
        while (r < fb::gpu::kArgRoundingCount && item != fb::gpu::kArgRoundingNames[r]) ++r;
        if (r == fb::gpu::kArgRoundingCount) {
          std::fprintf(stderr, "error: --ex2-roundings: '%s' is not floor, nearest_even or toward_zero\n", item.c_str());
          return 2;
        }
        o.ex2_roundings.push_back(r);
      }
    } else if (arg == "--ex2-bits" && i + 1 < argc) {
      o.ex2_bits.clear();
      std::stringstream s(argv[++i]);
      std::string item;
      while (std::getline(s, item, ',')) o.ex2_bits.push_back(std::atoi(item.c_str()));
    } else {
      std::fprintf(stderr,
                   "usage: fb-sfu-probe --out-dir DIR [--ex2-bits 18,20,22,23,24] "
                   "[--ex2-roundings floor,nearest_even,toward_zero] [--chunk-log2 28]\n");
      return 2;
    }
  }
  for (int b : o.ex2_bits) {
    if (b < 8 || b > 26) {
      std::fprintf(stderr, "error: --ex2-bits: %d is outside 8..26\n", b);
      return 2;
    }
  }
  if (o.chunk_log2 < 16 || o.chunk_log2 > 32) {
    std::fprintf(stderr, "error: --chunk-log2 must be in 16..32\n");
    return 2;
  }
  return fb::gpu::run(o);
}
