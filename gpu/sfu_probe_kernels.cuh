// gpu/sfu_probe_kernels.cuh: fb-sfu-probe's functions, histogram and region constants, the host
// reference rounding, and the measurement, hypothesis, table-verification and ex2nf-comparison kernels.
// Contract: it includes what it uses, so that it parses alone (clangd, an IDE). gpu/sfu_probe.cu
// includes it once: its kernels stay in the one translation unit with their launches (no
// relocatable device code), hence the anonymous namespace.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gpu/device_common.cuh"
#include "gpu/sfu_table_model.hpp"
#include "traces/sfu_capture_writer.hpp"

namespace fb::gpu {
namespace {

// kEx2Nf (ex2.approx.f32, no .ftz) is last so the other three keep their numbering.
enum Fn : int { kEx2, kRcp, kLg2, kEx2Nf, kFnCount };
// ArgRounding (gpu/sfu_table_model.hpp) has emu's FixedPointRounding numbering.
const char* const kArgRoundingNames[kArgRoundingCount] = {"floor", "nearest_even", "toward_zero"};
// FinalRoundingCode (gpu/sfu_table_model.hpp) has emu's FinalRounding numbering and names.
const char* const kFinalRoundingNames[kFinalRoundingCount] = {"nearest_even", "toward_zero", "down", "up"};
const char* const kFnNames[kFnCount] = {"ex2", "rcp", "lg2", "ex2nf"};
const char* const kFnPtx[kFnCount] = {"ex2.approx.ftz.f32", "rcp.approx.ftz.f32", "lg2.approx.ftz.f32",
                                      "ex2.approx.f32"};

constexpr int kHistHalf = 8;  // bins for -8..8 ulps, plus below/above, plus NaN classes
constexpr int kHistBins = 2 * kHistHalf + 1;
constexpr int kBinBelow = kHistBins, kBinAbove = kHistBins + 1, kBinNanBoth = kHistBins + 2,
              kBinNanMismatch = kHistBins + 3, kBinCount = kHistBins + 4;
constexpr std::uint32_t kUncertainCap = 1u << 16;
constexpr std::uint32_t kEmpty = 0xffffffffu;
// Number of 2^32-input passes run so far (the summary's [timing] section).
unsigned long long g_passes = 0;

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
  return fn == kEx2   ? ex2_approx_ftz(x)
         : fn == kRcp ? rcp_approx_ftz(x)
         : fn == kLg2 ? lg2_approx_ftz(x)
                      : ex2_approx(x);
}

// Correctly rounded reference from a double approximation; sets `uncertain` when the
// double is too close to an fp32 rounding boundary for its error bound (the table writers'
// sfu_round_reference, traces/sfu_capture_rules.hpp).
__host__ __device__ inline float round_reference(double r, bool& uncertain) {
  return sfu_round_reference(r, uncertain);
}

__device__ inline double exact_fn(int fn, double x) { return fn == kEx2 ? exp2(x) : fn == kRcp ? 1.0 / x : log2(x); }

// round_reference for results that are not flushed (ex2nf): the same, but a double that
// rounds to zero is checked against the boundary 2^-150 between 0 and the smallest
// subnormal too, and `exact` (exp2 of an integer: no rounding, e.g. 2^-150 ties to 0) is
// never uncertain. round_reference_unflushed_host: the same in long double, for the host's
// re-resolution (tolerance 2^-60).
__device__ inline float round_reference_unflushed(double r, bool exact, bool& uncertain) {
  uncertain = false;
  const float f = static_cast<float>(r);  // RNE, subnormals included
  if (exact || !isfinite(r) || r == 0.0 || !isfinite(f)) return f;
  const float toward = static_cast<double>(f) < r ? nextafterf(f, INFINITY) : nextafterf(f, -INFINITY);
  if (!isfinite(toward)) return f;
  const double boundary = 0.5 * (static_cast<double>(f) + static_cast<double>(toward));
  uncertain = fabs(r - boundary) <= fabs(r) * 0x1p-49;
  return f;
}
inline float round_reference_unflushed_host(long double r, bool exact, bool& unresolved) {
  unresolved = false;
  const float f = static_cast<float>(r);
  if (exact || !std::isfinite(r) || r == 0.0L || !std::isfinite(f)) return f;
  const float toward = static_cast<long double>(f) < r ? std::nextafter(f, INFINITY) : std::nextafter(f, -INFINITY);
  if (!std::isfinite(toward)) return f;
  const long double boundary = 0.5L * (static_cast<long double>(f) + static_cast<long double>(toward));
  unresolved = std::fabs(r - boundary) <= std::fabs(r) * 0x1p-60L;
  return f;
}

// Adds one to hist[bin] (shared memory) per lane, one atomic per group of lanes with the same
// bin: a warp's lanes nearly always share a bin, and same-address shared atomics serialize.
// Full mask: the chunked loops run whole warps (count is a multiple of 32, warps are aligned).
__device__ inline void warp_aggregated_increment(unsigned long long* hist, int bin) {
  const unsigned int same = __match_any_sync(0xffffffffu, bin);
  if (static_cast<int>(threadIdx.x & 31u) == __ffs(same) - 1)
    atomicAdd(&hist[bin], static_cast<unsigned long long>(__popc(same)));
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
    const float ref = fn == kEx2Nf ? round_reference_unflushed(exp2(static_cast<double>(x)), x == rintf(x), uncertain)
                                   : sfu_ftz(round_reference(exact_fn(fn, static_cast<double>(sfu_ftz(x))), uncertain));
    int bin;
    if (isnan(y) || isnan(ref)) {
      bin = (isnan(y) && isnan(ref)) ? kBinNanBoth : kBinNanMismatch;
    } else {
      const long long d = ordered(__float_as_uint(y)) - ordered(__float_as_uint(ref));
      bin = d < -kHistHalf ? kBinBelow : d > kHistHalf ? kBinAbove : static_cast<int>(d) + kHistHalf;
      local_max = max(local_max, d < 0 ? -d : d);
    }
    warp_aggregated_increment(hist, bin);
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
// normal result, where 2^k * T(f) cannot leave the normal range. Each entry holds the value
// (low 32 bits) and the input that set it (high 32 bits, one 64-bit CAS so both are written
// together), so a conflict can name the first input at its key: `ev` gets the conflicts per
// input binade (sign and exponent field) and up to kConflictExampleCap examples, at most
// kConflictExamplesPerBinade per input binade so that they spread over the domain.
constexpr unsigned long long kEmpty64 = ~0ull;  // narrows to kEmpty
constexpr int kInputBinades = 512;
constexpr unsigned int kConflictExampleCap = 4096, kConflictExamplesPerBinade = 16;
struct Ex2Conflicts {
  unsigned long long per_binade[kInputBinades];
  unsigned int binade_examples[kInputBinades];
  unsigned int examples;
  std::uint32_t example[kConflictExampleCap][5];  // key, first input, its output, conflicting input, its output
};
__global__ void ex2_hypothesis_kernel(int nbits, int rounding, std::uint64_t base, std::uint64_t count,
                                      unsigned long long* table, unsigned long long* conflicts, Ex2Conflicts* ev) {
  __shared__ unsigned int binade_conflicts[kInputBinades];  // at most 2^32 / 4096 blocks inputs each
  for (int i = threadIdx.x; i < kInputBinades; i += blockDim.x) binade_conflicts[i] = 0;
  __syncthreads();
  unsigned long long local_conflicts = 0;
  for (std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
    const std::uint32_t in = static_cast<std::uint32_t>(base + i);
    if (!ex2_hypothesis_domain(in)) continue;
    const std::uint32_t y = __float_as_uint(ex2_approx_ftz(__uint_as_float(in)));
    const SfuHypothesisEntry entry = ex2_fixed_point_entry(in, y, nbits, rounding);
    const std::uint32_t v = entry.value;
    // Written once, so a non-empty L2 read is final and only the first inputs per key pay for the CAS.
    unsigned long long old = __ldcg(&table[entry.key]);
    if (old == kEmpty64) old = atomicCAS(&table[entry.key], kEmpty64, (static_cast<unsigned long long>(in) << 32) | v);
    if (old == kEmpty64 || static_cast<std::uint32_t>(old) == v) continue;
    ++local_conflicts;
    const std::uint32_t binade = in >> 23;
    atomicAdd(&binade_conflicts[binade], 1u);
    volatile unsigned int* taken = &ev->binade_examples[binade];  // read first: no atomics once full
    if (*taken < kConflictExamplesPerBinade &&
        atomicAdd(&ev->binade_examples[binade], 1u) < kConflictExamplesPerBinade) {
      const unsigned int slot = atomicAdd(&ev->examples, 1u);
      if (slot < kConflictExampleCap) {
        const std::uint32_t first = static_cast<std::uint32_t>(old >> 32);
        ev->example[slot][0] = entry.key;
        ev->example[slot][1] = first;
        ev->example[slot][2] = __float_as_uint(ex2_approx_ftz(__uint_as_float(first)));
        ev->example[slot][3] = in;
        ev->example[slot][4] = y;
      }
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kInputBinades; i += blockDim.x) {
    if (binade_conflicts[i]) atomicAdd(&ev->per_binade[i], static_cast<unsigned long long>(binade_conflicts[i]));
  }
  if (local_conflicts) atomicAdd(conflicts, local_conflicts);  // one atomic per thread, not per input
}

// The 32-bit table (values only) the table model, the verification and the writer read.
__global__ void narrow_table_kernel(const unsigned long long* wide, std::uint32_t* table, std::uint32_t entries) {
  for (std::uint32_t j = blockIdx.x * blockDim.x + threadIdx.x; j < entries; j += gridDim.x * blockDim.x) {
    table[j] = static_cast<std::uint32_t>(wide[j]);
  }
}

// Regions of the input range, for reporting where a table model differs from the hardware
// (the models themselves: gpu/sfu_table_model.hpp ex2_table_model, rcp_table_model).
constexpr int kRegionCount = 6;
const char* const kEx2RegionNames[kRegionCount] = {"NaN",          "x >= 128",    "x < -160",
                                                   "[-160, -125)", "[-125, 127)", "[127, 128)"};
const char* const kRcpRegionNames[kRegionCount] = {
    "NaN", "+-0 and subnormal", "+-inf", "|x| in [2^-126, 2^-125)", "|x| in [2^-125, 2^126)", "|x| >= 2^126 finite"};
__device__ inline int ex2_region(float x) {
  if (isnan(x)) return 0;
  if (x >= kEx2InfFrom) return 1;
  if (x < kEx2ZeroBelow) return 2;
  if (x < -125.f) return 3;
  return x < 127.f ? 4 : 5;
}
const char* const kLg2RegionNames[kRegionCount] = {"NaN",    "+-0 and subnormal",    "x < 0 (-inf included)", "+inf",
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

// The table models a captured table can be verified as (gpu/sfu_table_model.hpp), and what
// each reads: nbits (ex2 forms), rounding (fixed point: the argument's; lg2 extended: the
// final rounding), the table, and for lg2 extended the residuals and guard bits.
enum TableModelKind : int { kTmEx2FixedPoint, kTmRcpMantissa, kTmLg2Split, kTmEx2SignMagnitude, kTmLg2Extended };
struct TableSpec {
  int kind;
  int nbits;
  int rounding;
  const std::uint32_t* table;
  const int* residuals;
  int guard_bits;
};
__host__ __device__ inline int table_fn(int kind) {
  return kind == kTmRcpMantissa ? kRcp : (kind == kTmLg2Split || kind == kTmLg2Extended) ? kLg2 : kEx2;
}

// Evaluates the table model `spec` on every input of the chunk and records where it differs
// from the hardware.
__global__ void table_verify_kernel(TableSpec spec, std::uint32_t nan_output, std::uint64_t base, std::uint64_t count,
                                    VerifyResult* result) {
  const int fn = table_fn(spec.kind);
  for (std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
    const std::uint32_t in = static_cast<std::uint32_t>(base + i);
    const float x = __uint_as_float(in);
    const std::uint32_t hw_bits = __float_as_uint(hw(fn, x));
    std::uint32_t model_bits;
    switch (spec.kind) {
      case kTmEx2FixedPoint:
        model_bits = ex2_table_model(x, spec.nbits, spec.rounding, spec.table, nan_output);
        break;
      case kTmEx2SignMagnitude:
        model_bits = ex2_sign_magnitude_table_model(x, spec.nbits, spec.table, nan_output);
        break;
      case kTmRcpMantissa:
        model_bits = rcp_table_model(x, spec.table, nan_output);
        break;
      case kTmLg2Split:
        model_bits = lg2_table_model(x, spec.table, nan_output);
        break;
      default:
        model_bits =
            lg2_extended_table_model(x, spec.table, spec.residuals, spec.guard_bits, spec.rounding, nan_output);
    }
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

// ex2 sign-magnitude hypothesis with N fraction bits (gpu/sfu_table_model.hpp
// ex2_sign_magnitude_split): key = x's sign and the N fraction bits of |x| truncated, value =
// result bits minus (x >= 0) or plus (x < 0) k in the exponent field. Domain as the
// fixed-point hypotheses: x in [-125, 127).
__global__ void ex2_sm_hypothesis_kernel(int nbits, std::uint64_t base, std::uint64_t count, std::uint32_t* table,
                                         unsigned long long* conflicts) {
  unsigned long long local_conflicts = 0;
  for (std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
    const std::uint32_t in = static_cast<std::uint32_t>(base + i);
    if (!ex2_hypothesis_domain(in)) continue;
    const SfuHypothesisEntry entry =
        ex2_sign_magnitude_entry(in, __float_as_uint(ex2_approx_ftz(__uint_as_float(in))), nbits);
    local_conflicts += record_key(table, entry.key, entry.value);
  }
  if (local_conflicts) atomicAdd(conflicts, local_conflicts);  // one atomic per thread, not per input
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
    if (!rcp_hypothesis_domain(in)) continue;
    const SfuHypothesisEntry entry = rcp_mantissa_entry(in, __float_as_uint(rcp_approx_ftz(__uint_as_float(in))));
    local_conflicts += record_key(table, entry.key, entry.value);
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
    if (!lg2_split_domain(in)) continue;  // positive normal inputs only
    const std::uint32_t biased = (in >> 23) & 0xffu;
    ++local_tested;
    const std::uint32_t hw_bits = __float_as_uint(lg2_approx_ftz(__uint_as_float(in)));
    const std::uint32_t t_bits = __float_as_uint(lg2_approx_ftz(__uint_as_float(lg2_mantissa_input(in))));
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
  for (std::uint32_t m = blockIdx.x * blockDim.x + threadIdx.x; m < kLg2MantissaTableEntries;
       m += gridDim.x * blockDim.x) {
    table[m] = __float_as_uint(lg2_approx_ftz(__uint_as_float(0x3f800000u | m)));
  }
}

// Runs the lg2 exponent-split hypothesis over all 2^32 inputs and writes its verdict; true
// when it holds.
bool lg2_split_hypothesis(std::uint64_t chunk, std::ostringstream& summary) {
  Lg2SplitResult* r;
  FB_CUDA_CHECK(cudaMallocManaged(&r, sizeof(Lg2SplitResult)));
  std::memset(r, 0, sizeof(Lg2SplitResult));
  ++g_passes;
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
// keys whose double reference was too close to a rounding boundary to be trusted. Each entry
// is traces/sfu_capture_rules.hpp sfu_table_delta, the host writer's too (traces/sfu_capture_writer.hpp
// sfu_table_deltas, which fb-sfu-rehearse uses); the escapes are listed in the order the
// threads record them.
// sign_magnitude (ex2 only): entries 2^(nbits+1), key j < 2^nbits -> 2^(j / 2^nbits), key
// 2^nbits + i -> 2^(-i / 2^nbits).
static_assert(int{kEx2} == int{kSfuTableEx2} && int{kRcp} == int{kSfuTableRcp} && int{kLg2} == int{kSfuTableLg2},
              "FBSFUT1 function numbering");
static_assert(kEmpty == kSfuTableUnfilled, "an unfilled key");
__global__ void table_delta_kernel(int fn, int nbits, bool sign_magnitude, const std::uint32_t* table,
                                   std::uint32_t entries, signed char* delta, unsigned int* counts,
                                   std::uint32_t* escapes, std::uint32_t escape_cap) {
  // counts: [0] unfilled keys, [1] escapes, [2] of which reference-uncertain
  for (std::uint32_t j = blockIdx.x * blockDim.x + threadIdx.x; j < entries; j += gridDim.x * blockDim.x) {
    if (table[j] == kEmpty) {
      atomicAdd(&counts[0], 1u);
      delta[j] = 0;
      continue;
    }
    const SfuTableDelta e = sfu_table_delta(fn, nbits, sign_magnitude, j, table[j]);
    if (e.delta == kSfuTableEscape) {
      delta[j] = kSfuTableEscape;
      const unsigned int slot = atomicAdd(&counts[1], 1u);
      if (e.uncertain) atomicAdd(&counts[2], 1u);
      if (slot < escape_cap) {
        escapes[2 * slot] = j;
        escapes[2 * slot + 1] = table[j];
      }
    } else {
      delta[j] = static_cast<signed char>(e.delta);
    }
  }
}

// ex2.approx.f32 (no .ftz) against ex2.approx.ftz.f32 on every input: the inputs and the
// differences per region, and two hypotheses for x < -126 (-inf included), where the .ftz
// form flushes: the non-ftz result equals
//   0: RN(2^-24 * ftz(RN(x + 24)))  (scale the argument into the normal range, the result back)
//   1: RN(ftz(x * 0.5)^2)           (halve the argument, square the result: FSETP, FMUL,
//                                    MUFU.EX2, FMUL; x * 0.5 is exact there)
// with ftz = ex2.approx.ftz.f32 and RN one IEEE round-to-nearest-even to fp32, subnormals
// kept (the products are exact in double, then rounded once).
constexpr int kNfRegionCount = 5, kNfHypCount = 2;
constexpr unsigned int kNfRegionExamples = 4;
const char* const kNfRegionNames[kNfRegionCount] = {"NaN", "subnormal input", "overflow (+inf result)", "normal result",
                                                    "subnormal-or-zero result"};
const char* const kNfHypNames[kNfHypCount] = {"RN(2^-24 * ex2.approx.ftz.f32(RN(x + 24)))",
                                              "RN(ex2.approx.ftz.f32(x * 0.5)^2)"};
struct NfCompare {
  unsigned long long inputs[kNfRegionCount], differ[kNfRegionCount];
  unsigned int region_examples[kNfRegionCount];
  std::uint32_t region_example[kNfRegionCount][kNfRegionExamples][3];  // input, ex2.approx.f32, .ftz
  unsigned long long hyp_tested, hyp_mismatches[kNfHypCount];
  unsigned int hyp_max_ulps[kNfHypCount], hyp_examples[kNfHypCount];
  std::uint32_t hyp_example[kNfHypCount][kVerifyExamples][4];  // input, ex2.approx.f32, .ftz, prediction
};
// Region by input, then by the non-ftz result.
__device__ inline int nf_region(float x, float y) {
  if (isnan(x)) return 0;
  if (x != 0.f && fabsf(x) < 0x1p-126f) return 1;
  if (y == INFINITY) return 2;
  return fabsf(y) < 0x1p-126f ? 4 : 3;
}
__device__ inline std::uint32_t ex2_nf_prediction(int h, float x) {
  if (h == 0) {
    const float y = ex2_approx_ftz(__fadd_rn(x, 24.f));
    return __float_as_uint(static_cast<float>(static_cast<double>(y) * 0x1p-24));
  }
  const float y = ex2_approx_ftz(__fmul_rn(x, 0.5f));
  return __float_as_uint(static_cast<float>(static_cast<double>(y) * static_cast<double>(y)));
}
__device__ inline void add_warp_sum(unsigned long long* target, unsigned int v) {
  v = __reduce_add_sync(0xffffffffu, v);
  if ((threadIdx.x & 31u) == 0 && v) atomicAdd(target, static_cast<unsigned long long>(v));
}
__global__ void ex2_nf_compare_kernel(std::uint64_t base, std::uint64_t count, NfCompare* r) {
  unsigned int inputs[kNfRegionCount] = {}, differ[kNfRegionCount] = {};  // per thread: at most 2^32 / 2^20
  unsigned int tested = 0, mismatches[kNfHypCount] = {}, max_ulps[kNfHypCount] = {};
  for (std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
    const std::uint32_t in = static_cast<std::uint32_t>(base + i);
    const float x = __uint_as_float(in);
    const float y = ex2_approx(x), y_ftz = ex2_approx_ftz(x);
    const std::uint32_t y_bits = __float_as_uint(y), ftz_bits = __float_as_uint(y_ftz);
    const int region = nf_region(x, y);
    const bool differs = y_bits != ftz_bits;
#pragma unroll
    for (int g = 0; g < kNfRegionCount; ++g) {
      inputs[g] += region == g;
      differ[g] += region == g && differs;
    }
    if (differs) {
      volatile unsigned int* taken = &r->region_examples[region];
      if (*taken < kNfRegionExamples) {
        const unsigned int slot = atomicAdd(&r->region_examples[region], 1u);
        if (slot < kNfRegionExamples) {
          r->region_example[region][slot][0] = in;
          r->region_example[region][slot][1] = y_bits;
          r->region_example[region][slot][2] = ftz_bits;
        }
      }
    }
    if (!(x < -126.f)) continue;
    ++tested;
#pragma unroll
    for (int h = 0; h < kNfHypCount; ++h) {
      const std::uint32_t p = ex2_nf_prediction(h, x);
      if (p == y_bits) continue;
      ++mismatches[h];
      const long long d = ordered(y_bits) - ordered(p);
      max_ulps[h] = max(max_ulps[h], static_cast<unsigned int>(d < 0 ? -d : d));
      volatile unsigned int* taken = &r->hyp_examples[h];
      if (*taken < kVerifyExamples) {
        const unsigned int slot = atomicAdd(&r->hyp_examples[h], 1u);
        if (slot < kVerifyExamples) {
          r->hyp_example[h][slot][0] = in;
          r->hyp_example[h][slot][1] = y_bits;
          r->hyp_example[h][slot][2] = ftz_bits;
          r->hyp_example[h][slot][3] = p;
        }
      }
    }
  }
  // Every lane of the warp gets here (no early return), so the full-mask reductions are safe.
#pragma unroll
  for (int g = 0; g < kNfRegionCount; ++g) {
    add_warp_sum(&r->inputs[g], inputs[g]);
    add_warp_sum(&r->differ[g], differ[g]);
  }
  add_warp_sum(&r->hyp_tested, tested);
#pragma unroll
  for (int h = 0; h < kNfHypCount; ++h) {
    add_warp_sum(&r->hyp_mismatches[h], mismatches[h]);
    const unsigned int m = __reduce_max_sync(0xffffffffu, max_ulps[h]);
    if ((threadIdx.x & 31u) == 0 && m) atomicMax(&r->hyp_max_ulps[h], m);
  }
}

}  // namespace
}  // namespace fb::gpu
