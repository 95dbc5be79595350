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
// - Hypotheses of docs/DESIGN.md §5 tested exhaustively:
//   ex2: result(x) = 2^k * T(f) where k.f is x as a fixed-point number with N fraction
//        bits, for each N in --ex2-bits (default 20,22,23,24,25,26; tables only for
//        N <= 24) and each way of forming the
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
//   a table file in the format documented in gpu/README.md ("FBSFUT1"; written by
//   gpu/sfu_table_writer.hpp, the writer fb-sfu-rehearse shares); if no holding
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
// - ex2nf: ex2.approx.f32 WITHOUT .ftz (CUDA's exp2f without fast math) on all 2^32 inputs
//   against the correctly rounded exp2 with no flushing at all (subnormal inputs and results
//   kept; the double reference has the range), same histogram and uncertain-input report;
//   then, on all 2^32 inputs, where it differs from ex2.approx.ftz.f32 per region (NaN,
//   subnormal input, +inf result, normal result, subnormal-or-zero result), and two
//   hypotheses for x < -126: RN(2^-24 * ftz(RN(x + 24))) and RN(ftz(x * 0.5)^2), ftz =
//   ex2.approx.ftz.f32 (the second is the FSETP/FMUL/MUFU.EX2/FMUL squaring sequence ptxas
//   is believed to emit; gpu/sass_probe.cu's listing shows what it does emit).
// - Raw evidence for ex2 (--raw-evidence auto|always|never; auto: only when no ex2 hypothesis
//   held): ex2_conflicts.txt, up to 4096 conflicts (key, the input first recorded at the key
//   and its output, the conflicting input and its output; at most 16 per input binade) and
//   the conflicts per input binade, for N=24 floor and N=23 nearest_even; and
//   ex2_raw_binades.bin (FBSFURAW1, gpu/README.md): ex2.approx.ftz.f32 on every input of a
//   few binades (default [1,2), (-2,-1], [0.5,1), (-1,-0.5], [2^-8,2^-7)) as int8 ulp deltas
//   from round_reference() with an escape list.
// - ex2 sign-magnitude (--ex2-sm-bits, default 23; what an H200 was found to do): key = x's sign
//   and |x| truncated to N fraction bits, value = result bits -+ k in the exponent field; when it
//   holds, the emu's form 4 model (Ex2SignMagnitudeModel, gpu/sfu_table_model.hpp
//   ex2_sign_magnitude_table_model) is verified on all 2^32 inputs and ex2_sm_table_nN.fbsfut
//   written (T+ then T-).
// - lg2 extended (--lg2-extended): per mantissa and final rounding (nearest-even, toward zero,
//   down, up) the intersection over all 254 exponents of the intervals of L with
//   round(e + L) = lg2hw(2^e * 1.m) (gpu/sfu_table_model.hpp lg2_interval); empty counts per
//   rounding; when one rounding holds, L[m] = T[m] + R[m] ulp(T[m]) 2^-g (lg2_representative),
//   the emu's form 5 model (Lg2ExtendedModel, lg2_extended_table_model) verified on all 2^32
//   inputs and lg2_extended_n23.fbsfut written; lg2_extended_examples.txt lists mantissas
//   without a consistent L, and lg2_raw_binades.bin (--lg2-raw-evidence auto) is written when no
//   rounding held.
// The summary file is rewritten after each function, so a run cut short keeps what it did,
// and ends with the wall time and the number of 2^32-input passes per function.
// Run on an H200 on 2026-11-26 (before the sign-magnitude and --lg2-extended parts, which are
// compiled here and NOT yet run on a GPU).
// Usage: fb-sfu-probe --out-dir DIR [--functions ex2,ex2nf,rcp,lg2] [--ex2-bits 20,22,23,24,25,26]
//        [--ex2-roundings floor,nearest_even,toward_zero] [--ex2-sm-bits 23|none]
//        [--raw-evidence auto|always|never] [--raw-binades 1,-1,0.5,-0.5,0x1p-8] [--lg2-extended]
//        [--lg2-raw-evidence auto|always|never] [--lg2-raw-binades 1,0.5,2] [--chunk-log2 28]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gpu/device_common.cuh"
#include "gpu/sfu_table_model.hpp"
#include "gpu/sfu_table_writer.hpp"

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
  return fn == kEx2 ? ex2_approx_ftz(x) : fn == kRcp ? rcp_approx_ftz(x) : fn == kLg2 ? lg2_approx_ftz(x) : ex2_approx(x);
}

// Correctly rounded reference from a double approximation; sets `uncertain` when the
// double is too close to an fp32 rounding boundary for its error bound (the table writers'
// sfu_round_reference, gpu/sfu_table_model.hpp).
__host__ __device__ inline float round_reference(double r, bool& uncertain) { return sfu_round_reference(r, uncertain); }

__device__ inline double exact_fn(int fn, double x) {
  return fn == kEx2 ? exp2(x) : fn == kRcp ? 1.0 / x : log2(x);
}

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
  if (static_cast<int>(threadIdx.x & 31u) == __ffs(same) - 1) atomicAdd(&hist[bin], static_cast<unsigned long long>(__popc(same)));
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
    const float ref = fn == kEx2Nf
                          ? round_reference_unflushed(exp2(static_cast<double>(x)), x == rintf(x), uncertain)
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
    const float x = __uint_as_float(in);
    if (!(x >= -125.f && x < 127.f)) continue;
    const float y = ex2_approx_ftz(x);
    const Ex2FixedPointSplit split = ex2_fixed_point_split(sfu_ftz(x), nbits, rounding);  // the model's key
    const std::uint32_t v = static_cast<std::uint32_t>(static_cast<long long>(__float_as_uint(y)) - (split.k << 23));
    // Written once, so a non-empty L2 read is final and only the first inputs per key pay for the CAS.
    unsigned long long old = __ldcg(&table[split.index]);
    if (old == kEmpty64) old = atomicCAS(&table[split.index], kEmpty64, (static_cast<unsigned long long>(in) << 32) | v);
    if (old == kEmpty64 || static_cast<std::uint32_t>(old) == v) continue;
    ++local_conflicts;
    const std::uint32_t binade = in >> 23;
    atomicAdd(&binade_conflicts[binade], 1u);
    volatile unsigned int* taken = &ev->binade_examples[binade];  // read first: no atomics once full
    if (*taken < kConflictExamplesPerBinade && atomicAdd(&ev->binade_examples[binade], 1u) < kConflictExamplesPerBinade) {
      const unsigned int slot = atomicAdd(&ev->examples, 1u);
      if (slot < kConflictExampleCap) {
        const std::uint32_t first = static_cast<std::uint32_t>(old >> 32);
        ev->example[slot][0] = split.index;
        ev->example[slot][1] = first;
        ev->example[slot][2] = __float_as_uint(ex2_approx_ftz(__uint_as_float(first)));
        ev->example[slot][3] = in;
        ev->example[slot][4] = __float_as_uint(y);
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
      case kTmEx2FixedPoint: model_bits = ex2_table_model(x, spec.nbits, spec.rounding, spec.table, nan_output); break;
      case kTmEx2SignMagnitude: model_bits = ex2_sign_magnitude_table_model(x, spec.nbits, spec.table, nan_output); break;
      case kTmRcpMantissa: model_bits = rcp_table_model(x, spec.table, nan_output); break;
      case kTmLg2Split: model_bits = lg2_table_model(x, spec.table, nan_output); break;
      default:
        model_bits = lg2_extended_table_model(x, spec.table, spec.residuals, spec.guard_bits, spec.rounding, nan_output);
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
    const float x = __uint_as_float(in);
    if (!(x >= -125.f && x < 127.f)) continue;
    const float y = ex2_approx_ftz(x);
    const Ex2SignMagnitudeSplit split = ex2_sign_magnitude_split(sfu_ftz(x), nbits);  // the model's key
    const long long k = split.negative ? -split.k : split.k;
    const std::uint32_t v = static_cast<std::uint32_t>(static_cast<long long>(__float_as_uint(y)) - (k << 23));
    local_conflicts += record_key(table, split.index, v);
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
// is gpu/sfu_table_model.hpp sfu_table_delta, the host writer's too (gpu/sfu_table_writer.hpp
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
const char* const kNfRegionNames[kNfRegionCount] = {"NaN", "subnormal input", "overflow (+inf result)",
                                                    "normal result", "subnormal-or-zero result"};
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

// Raw capture (FBSFURAW1, gpu/README.md): ex2.approx.ftz.f32 on every input of each binade
// (2^23 inputs from start[b], the binade's first bit pattern), as int8 ulp deltas from the
// same reference measure_kernel uses; -128 escapes to an explicit (input, output) pair: for
// |delta| > 127, a NaN, or a reference too close to a rounding boundary.
constexpr int kMaxRawBinades = 16;
constexpr signed char kRawEscape = -128;
struct RawBinades {
  int count;
  std::uint32_t start[kMaxRawBinades];
};
// fn: kEx2 or kLg2 (lg2_raw_binades.bin, the same format with function=lg2).
__global__ void raw_binades_kernel(int fn, RawBinades b, signed char* delta, unsigned int* counts,
                                   std::uint32_t* escapes, std::uint32_t escape_cap) {
  // counts: [0] escapes, [1] of which reference-uncertain
  const std::uint32_t total = static_cast<std::uint32_t>(b.count) << 23;
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    const std::uint32_t in = b.start[i >> 23] + (i & 0x7fffffu);
    const float x = __uint_as_float(in);
    const float y = hw(fn, x);
    bool uncertain = false;
    const float ref = sfu_ftz(round_reference(exact_fn(fn, static_cast<double>(sfu_ftz(x))), uncertain));
    const long long d = ordered(__float_as_uint(y)) - ordered(__float_as_uint(ref));
    if (!uncertain && !isnan(y) && !isnan(ref) && d >= -127 && d <= 127) {
      delta[i] = static_cast<signed char>(d);
      continue;
    }
    delta[i] = kRawEscape;
    const unsigned int slot = atomicAdd(&counts[0], 1u);
    if (uncertain) atomicAdd(&counts[1], 1u);
    if (slot < escape_cap) {
      escapes[2 * slot] = in;
      escapes[2 * slot + 1] = __float_as_uint(y);
    }
  }
}

enum RawEvidence : int { kRawAuto, kRawAlways, kRawNever };
const char* const kRawEvidenceNames[3] = {"auto", "always", "never"};

struct Options {
  std::string out_dir = ".";
  std::vector<int> ex2_bits = {20, 22, 23, 24, 25, 26};  // tables only for N <= 24
  std::vector<int> ex2_roundings = {kFloor, kNearestEven, kTowardZero};
  bool functions[kFnCount] = {true, true, true, true};
  int raw_evidence = kRawAuto;
  // First bit pattern of each raw-capture binade: [1,2), (-2,-1], [0.5,1), (-1,-0.5], [2^-8,2^-7).
  std::vector<std::uint32_t> raw_binades = {0x3f800000u, 0xbf800000u, 0x3f000000u, 0xbf000000u, 0x3b800000u};
  // ex2 sign-magnitude hypothesis: fraction bits N tried (empty: not run).
  std::vector<int> ex2_sm_bits = {23};
  // lg2: the extended-precision analysis (--lg2-extended) and its raw evidence.
  bool lg2_extended = false;
  int lg2_raw_evidence = kRawAuto;
  std::vector<std::uint32_t> lg2_raw_binades = {0x3f800000u, 0x3f000000u, 0x40000000u};  // [1,2), [0.5,1), [2,4)
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
// ex2 sign-magnitude tables (key ex2_sign_magnitude) hold 2^(nbits+1) entries, T+ then T-;
// `tail` is appended after the escapes (lg2 extended: the residuals).
// The deltas are computed on the device (table_delta_kernel); the file, its name and the
// summary line are gpu/sfu_table_writer.hpp write_sfu_table's, the writer fb-sfu-rehearse uses.
void emit_table(int fn, int nbits, const std::string& key, std::uint32_t* d_table, const Options& o,
                const std::string& device, std::uint32_t nan_output, const std::string& extra,
                std::ostringstream& summary, const std::string& tail = std::string()) {
  const bool sign_magnitude = key == "ex2_sign_magnitude";
  const std::uint32_t entries = sfu_table_entries(nbits, key), escape_cap = sfu_table_escape_cap(nbits, key);
  signed char* d_delta;
  unsigned int* d_counts;
  std::uint32_t* d_escapes;
  FB_CUDA_CHECK(cudaMalloc(&d_delta, entries));
  FB_CUDA_CHECK(cudaMalloc(&d_counts, 3 * sizeof(unsigned int)));
  FB_CUDA_CHECK(cudaMalloc(&d_escapes, 2ull * escape_cap * 4));
  FB_CUDA_CHECK(cudaMemset(d_counts, 0, 3 * sizeof(unsigned int)));
  table_delta_kernel<<<1024, 256>>>(fn, nbits, sign_magnitude, d_table, entries, d_delta, d_counts, d_escapes,
                                    escape_cap);
  FB_CUDA_CHECK(cudaGetLastError());
  SfuTableDeltas deltas;
  deltas.delta.resize(entries);
  unsigned int counts[3];
  FB_CUDA_CHECK(cudaMemcpy(deltas.delta.data(), d_delta, entries, cudaMemcpyDeviceToHost));
  FB_CUDA_CHECK(cudaMemcpy(counts, d_counts, sizeof counts, cudaMemcpyDeviceToHost));
  deltas.unfilled = counts[0];
  deltas.escape_count = counts[1];
  deltas.uncertain = counts[2];
  deltas.escapes.resize(2ull * std::min(counts[1], escape_cap));
  FB_CUDA_CHECK(cudaMemcpy(deltas.escapes.data(), d_escapes, deltas.escapes.size() * 4, cudaMemcpyDeviceToHost));
  FB_CUDA_CHECK(cudaFree(d_delta));
  FB_CUDA_CHECK(cudaFree(d_counts));
  FB_CUDA_CHECK(cudaFree(d_escapes));
  write_sfu_table(o.out_dir, fn, nbits, key, nan_output, extra, device, deltas, summary, tail);
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

// Evaluates the table model `spec` on all 2^32 inputs against the hardware, writes the
// mismatches per region and the first examples to the summary and returns their count.
unsigned long long verify_table_model(const TableSpec& spec, std::uint32_t nan_output, std::uint64_t chunk,
                                      std::ostringstream& summary) {
  VerifyResult* verify;
  FB_CUDA_CHECK(cudaMallocManaged(&verify, sizeof(VerifyResult)));
  std::memset(verify, 0, sizeof(VerifyResult));
  ++g_passes;
  for (std::uint64_t base = 0; base < (1ull << 32); base += chunk) {
    table_verify_kernel<<<4096, 256>>>(spec, nan_output, base, chunk, verify);
    FB_CUDA_CHECK(cudaGetLastError());
  }
  FB_CUDA_CHECK(cudaDeviceSynchronize());
  const int fn = table_fn(spec.kind);
  switch (spec.kind) {
    case kTmEx2FixedPoint:
      summary << "  table model (emu Ex2FixedPointModel, N=" << spec.nbits << ", " << kArgRoundingNames[spec.rounding]
              << ") vs hardware on all 2^32 inputs:";
      break;
    case kTmEx2SignMagnitude:
      summary << "  table model (emu Ex2SignMagnitudeModel, N=" << spec.nbits << ") vs hardware on all 2^32 inputs:";
      break;
    case kTmRcpMantissa:
      summary << "  table model (emu RcpMantissaModel, 2^23 mantissas) vs hardware on all 2^32 inputs:";
      break;
    case kTmLg2Split:
      summary << "  table model (emu Lg2ExponentSplitModel, 2^23 mantissas) vs hardware on all 2^32 inputs:";
      break;
    default:
      summary << "  table model (emu Lg2ExtendedModel, " << kFinalRoundingNames[spec.rounding] << ", "
              << spec.guard_bits << " guard bits) vs hardware on all 2^32 inputs:";
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
  const unsigned long long mismatches =
      verify_table_model({kTmLg2Split, 23, kFloor, d_table, nullptr, 0}, nan_output, chunk, summary);
  const std::string extra =
      "table_model=lg2_exponent_split\ntable_model_mismatches=" + std::to_string(mismatches) + "\n";
  emit_table(kLg2, 23, "lg2_exponent_split", d_table, o, dev, nan_output, extra, summary);
  FB_CUDA_CHECK(cudaFree(d_table));
}

std::string hex32(std::uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", v);
  return b;
}
std::string dec32(std::uint32_t v) {  // the float, %.9g (round-trips)
  char b[32];
  float f;
  std::memcpy(&f, &v, 4);
  std::snprintf(b, sizeof b, "%.9g", static_cast<double>(f));
  return b;
}

// One ex2 fixed-point hypothesis pass over all 2^32 inputs: fills d_table (2^N values, the
// 32-bit table verify_table_model and emit_table read), `ev` (conflicts per input binade and
// examples) and returns the number of conflicts.
unsigned long long run_ex2_hypothesis(int nbits, int rounding, std::uint64_t chunk, std::uint32_t* d_table,
                                      Ex2Conflicts& ev) {
  const std::uint64_t entries = 1ull << nbits;
  unsigned long long* d_wide;
  unsigned long long* d_conflicts;
  Ex2Conflicts* d_ev;
  FB_CUDA_CHECK(cudaMalloc(&d_wide, entries * 8));
  FB_CUDA_CHECK(cudaMalloc(&d_conflicts, sizeof(unsigned long long)));
  FB_CUDA_CHECK(cudaMalloc(&d_ev, sizeof(Ex2Conflicts)));
  FB_CUDA_CHECK(cudaMemset(d_wide, 0xff, entries * 8));
  FB_CUDA_CHECK(cudaMemset(d_conflicts, 0, sizeof(unsigned long long)));
  FB_CUDA_CHECK(cudaMemset(d_ev, 0, sizeof(Ex2Conflicts)));
  ++g_passes;
  for (std::uint64_t base = 0; base < (1ull << 32); base += chunk) {
    ex2_hypothesis_kernel<<<4096, 256>>>(nbits, rounding, base, chunk, d_wide, d_conflicts, d_ev);
    FB_CUDA_CHECK(cudaGetLastError());
  }
  narrow_table_kernel<<<1024, 256>>>(d_wide, d_table, static_cast<std::uint32_t>(entries));
  FB_CUDA_CHECK(cudaGetLastError());
  unsigned long long conflicts = 0;
  FB_CUDA_CHECK(cudaMemcpy(&conflicts, d_conflicts, sizeof conflicts, cudaMemcpyDeviceToHost));
  FB_CUDA_CHECK(cudaMemcpy(&ev, d_ev, sizeof(Ex2Conflicts), cudaMemcpyDeviceToHost));
  FB_CUDA_CHECK(cudaFree(d_wide));
  FB_CUDA_CHECK(cudaFree(d_conflicts));
  FB_CUDA_CHECK(cudaFree(d_ev));
  return conflicts;
}

// The ex2 hypotheses whose conflicts the raw evidence keeps (ex2_conflicts.txt).
struct ConflictCapture {
  ConflictCapture(int n, int r) : nbits(n), rounding(r) {}
  int nbits, rounding;
  bool captured = false;
  unsigned long long conflicts = 0;
  std::unique_ptr<Ex2Conflicts> ev;
};

// ex2_conflicts.txt: per captured hypothesis its conflict count, the conflicts per input
// binade and the examples sorted by conflicting input (gpu/README.md "SFU raw evidence").
void write_ex2_conflicts(const std::vector<ConflictCapture>& caps, const Options& o, const std::string& dev,
                         std::ostringstream& summary) {
  std::ofstream f(o.out_dir + "/ex2_conflicts.txt");
  f << "# ex2_conflicts.txt: fb-sfu-probe, ex2.approx.ftz.f32 fixed-point hypothesis conflicts (gpu/README.md)\n";
  std::istringstream devs(dev);
  for (std::string line; std::getline(devs, line);) f << "# " << line << "\n";
  f << "# per hypothesis: a 'hypothesis' line, 'binade' lines (sign exponent_field conflicts; the input\n"
       "# binade of the conflicting input), then up to " << kConflictExampleCap << " examples (at most "
    << kConflictExamplesPerBinade << " per input binade), sorted by x:\n"
       "#   key first_x first_y x y  first_x first_y x y (hex bits, then %.9g)\n"
       "# first_x: the input whose output was recorded first at the key; x: an input that disagreed.\n"
       "# key and value: x * 2^N rounded to the integer xf (argument rounding), key = xf mod 2^N,\n"
       "# k = floor(xf / 2^N), value = y's bits - k * 2^23 (gpu/sfu_table_model.hpp).\n";
  summary << "  raw evidence: wrote ex2_conflicts.txt:";
  for (const ConflictCapture& c : caps) {
    const unsigned int n = std::min(c.ev->examples, kConflictExampleCap);
    f << "hypothesis N=" << c.nbits << " rounding=" << kArgRoundingNames[c.rounding] << " conflicts=" << c.conflicts
      << " examples=" << n << "\n";
    for (int b = 0; b < kInputBinades; ++b) {
      if (c.ev->per_binade[b]) f << "binade " << (b >> 8) << " " << (b & 0xff) << " " << c.ev->per_binade[b] << "\n";
    }
    std::vector<unsigned int> order(n);
    for (unsigned int i = 0; i < n; ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](unsigned int a, unsigned int b) {
      return c.ev->example[a][3] < c.ev->example[b][3];
    });
    for (unsigned int i : order) {
      const std::uint32_t* e = c.ev->example[i];
      char line[160];
      std::snprintf(line, sizeof line, "0x%06x 0x%08x 0x%08x 0x%08x 0x%08x", e[0], e[1], e[2], e[3], e[4]);
      f << line << " " << dec32(e[1]) << " " << dec32(e[2]) << " " << dec32(e[3]) << " " << dec32(e[4]) << "\n";
    }
    summary << " N=" << c.nbits << " " << kArgRoundingNames[c.rounding] << ": " << c.conflicts << " conflicts, " << n
            << " examples;";
  }
  summary << "\n";
}

// FBSFURAW1 (gpu/README.md): ex2_raw_binades.bin or lg2_raw_binades.bin.
void write_raw_binades(int fn, const std::vector<std::uint32_t>& binades, const Options& o, const std::string& dev,
                       std::ostringstream& summary) {
  const std::string file = std::string(kFnNames[fn]) + "_raw_binades.bin";
  RawBinades b{};
  b.count = static_cast<int>(binades.size());
  for (int i = 0; i < b.count; ++i) b.start[i] = binades[i];
  const std::uint64_t n = static_cast<std::uint64_t>(b.count) << 23;
  const std::uint32_t escape_cap = 1u << 20;
  signed char* d_delta;
  unsigned int* d_counts;
  std::uint32_t* d_escapes;
  FB_CUDA_CHECK(cudaMalloc(&d_delta, n));
  FB_CUDA_CHECK(cudaMalloc(&d_counts, 2 * sizeof(unsigned int)));
  FB_CUDA_CHECK(cudaMalloc(&d_escapes, 2ull * escape_cap * 4));
  FB_CUDA_CHECK(cudaMemset(d_counts, 0, 2 * sizeof(unsigned int)));
  raw_binades_kernel<<<4096, 256>>>(fn, b, d_delta, d_counts, d_escapes, escape_cap);
  FB_CUDA_CHECK(cudaGetLastError());
  std::vector<signed char> delta(n);
  unsigned int counts[2];
  FB_CUDA_CHECK(cudaMemcpy(delta.data(), d_delta, n, cudaMemcpyDeviceToHost));
  FB_CUDA_CHECK(cudaMemcpy(counts, d_counts, sizeof counts, cudaMemcpyDeviceToHost));
  std::vector<std::uint32_t> escapes(2ull * std::min(counts[0], escape_cap));
  FB_CUDA_CHECK(cudaMemcpy(escapes.data(), d_escapes, escapes.size() * 4, cudaMemcpyDeviceToHost));
  FB_CUDA_CHECK(cudaFree(d_delta));
  FB_CUDA_CHECK(cudaFree(d_counts));
  FB_CUDA_CHECK(cudaFree(d_escapes));
  if (counts[0] > escape_cap) {
    summary << "  raw evidence: NOT writing " << file << ": " << counts[0] << " escapes (more than " << escape_cap
            << ")\n";
    return;
  }
  std::vector<std::pair<std::uint32_t, std::uint32_t>> esc(counts[0]);
  for (unsigned int i = 0; i < counts[0]; ++i) esc[i] = {escapes[2 * i], escapes[2 * i + 1]};
  std::sort(esc.begin(), esc.end());
  long long hist[5] = {};  // |delta| 0, 1, 2, 3..127, escaped
  for (signed char d : delta) ++hist[d == kRawEscape ? 4 : std::min(std::abs(static_cast<int>(d)), 3)];
  std::ofstream f(o.out_dir + "/" + file, std::ios::binary);
  f << "FBSFURAW1\nfunction=" << kFnNames[fn] << "\nptx=" << kFnPtx[fn] << "\nbinades=";
  for (int i = 0; i < b.count; ++i) f << (i ? "," : "") << hex32(b.start[i]);
  f << "\ninputs_per_binade=8388608\nreference=round_reference(" << (fn == kEx2 ? "exp2" : "log2")
    << "(double(x))) RNE, no flushing needed in these binades\n"
       "delta=int8\nescape=-128\nescape_count=" << counts[0] << "\nescape_uncertain_reference=" << counts[1] << "\n"
    << dev << "end\n";
  f.write(reinterpret_cast<const char*>(delta.data()), static_cast<std::streamsize>(delta.size()));
  const std::uint32_t n_escapes = counts[0];
  f.write(reinterpret_cast<const char*>(&n_escapes), 4);  // the device and file are little-endian
  for (const auto& e : esc) {
    f.write(reinterpret_cast<const char*>(&e.first), 4);
    f.write(reinterpret_cast<const char*>(&e.second), 4);
  }
  summary << "  raw evidence: wrote " << file << ": " << b.count << " binades (";
  for (int i = 0; i < b.count; ++i) summary << (i ? "," : "") << dec32(b.start[i]);
  summary << ") of 2^23 inputs, |delta| 0:" << hist[0] << " 1:" << hist[1] << " 2:" << hist[2] << " 3..127:" << hist[3]
          << " escaped:" << hist[4] << " (" << counts[1] << " for an uncertain reference)\n";
}

// ex2.approx.f32 vs ex2.approx.ftz.f32 per region and the x < -126 hypotheses (summary only).
void ex2_nf_compare(std::uint64_t chunk, std::ostringstream& summary) {
  NfCompare* r;
  FB_CUDA_CHECK(cudaMallocManaged(&r, sizeof(NfCompare)));
  std::memset(r, 0, sizeof(NfCompare));
  ++g_passes;
  for (std::uint64_t base = 0; base < (1ull << 32); base += chunk) {
    ex2_nf_compare_kernel<<<4096, 256>>>(base, chunk, r);
    FB_CUDA_CHECK(cudaGetLastError());
  }
  FB_CUDA_CHECK(cudaDeviceSynchronize());
  summary << "  ex2.approx.f32 vs ex2.approx.ftz.f32 on all 2^32 inputs (differ of inputs, per region):";
  for (int g = 0; g < kNfRegionCount; ++g) {
    summary << (g ? ", " : " ") << kNfRegionNames[g] << ": " << r->differ[g] << " of " << r->inputs[g];
  }
  summary << "\n";
  for (int g = 0; g < kNfRegionCount; ++g) {
    for (unsigned int e = 0; e < std::min(r->region_examples[g], kNfRegionExamples); ++e) {
      const std::uint32_t* x = r->region_example[g][e];
      summary << "    [" << kNfRegionNames[g] << "] x=" << hex32(x[0]) << " (" << dec32(x[0])
              << ") ex2.approx.f32=" << hex32(x[1]) << " ex2.approx.ftz.f32=" << hex32(x[2]) << "\n";
    }
  }
  for (int h = 0; h < kNfHypCount; ++h) {
    summary << "  hypothesis for x < -126 (" << r->hyp_tested << " inputs, -inf included): ex2.approx.f32(x) = "
            << kNfHypNames[h] << ": " << (r->hyp_mismatches[h] == 0 ? "HOLDS" : "fails") << " (" << r->hyp_mismatches[h]
            << " inputs differ, max |ulp difference| " << r->hyp_max_ulps[h] << ")\n";
    for (unsigned int e = 0; e < std::min(r->hyp_examples[h], kVerifyExamples); ++e) {
      const std::uint32_t* x = r->hyp_example[h][e];
      summary << "    x=" << hex32(x[0]) << " (" << dec32(x[0]) << ") ex2.approx.f32=" << hex32(x[1])
              << " ex2.approx.ftz.f32=" << hex32(x[2]) << " prediction=" << hex32(x[3]) << "\n";
    }
  }
  FB_CUDA_CHECK(cudaFree(r));
}

// ---- ex2 sign-magnitude hypothesis (FBSFU1 form 4) --------------------------------------------
// For each N in --ex2-sm-bits: the hypothesis pass; when it holds, the table model verified on all
// 2^32 inputs and written (ex2_sm_table_nN.fbsfut: 2^(N+1) entries, T+ then T-), the first N
// whose model reproduces the hardware preferred, else the first that held. True when one held.
bool ex2_sign_magnitude(std::uint64_t chunk, const Options& o, const std::string& dev, std::ostringstream& summary) {
  bool any_held = false, emitted = false, emitted_clean = false;
  for (int nbits : o.ex2_sm_bits) {
    const std::uint64_t entries = 2ull << nbits;
    std::uint32_t* d_table;
    unsigned long long* d_conflicts;
    FB_CUDA_CHECK(cudaMalloc(&d_table, entries * 4));
    FB_CUDA_CHECK(cudaMalloc(&d_conflicts, sizeof(unsigned long long)));
    FB_CUDA_CHECK(cudaMemset(d_table, 0xff, entries * 4));
    FB_CUDA_CHECK(cudaMemset(d_conflicts, 0, sizeof(unsigned long long)));
    ++g_passes;
    for (std::uint64_t base = 0; base < (1ull << 32); base += chunk) {
      ex2_sm_hypothesis_kernel<<<4096, 256>>>(nbits, base, chunk, d_table, d_conflicts);
      FB_CUDA_CHECK(cudaGetLastError());
    }
    unsigned long long conflicts = 0;
    FB_CUDA_CHECK(cudaMemcpy(&conflicts, d_conflicts, sizeof conflicts, cudaMemcpyDeviceToHost));
    summary << "  hypothesis ex2(x) = 2^k * T+(i) for x >= 0, 2^-k * T-(i) for x < 0, |x| truncated to N=" << nbits
            << " fraction bits (k.i, sign-magnitude): " << (conflicts == 0 ? "HOLDS" : "fails") << " (" << conflicts
            << " inputs disagree with the first seen at their key)\n";
    if (conflicts == 0) {
      any_held = true;
      if (!emitted_clean) {
        const std::uint32_t nan_output = measure_nan_output(kEx2);
        const unsigned long long mismatches =
            verify_table_model({kTmEx2SignMagnitude, nbits, 0, d_table, nullptr, 0}, nan_output, chunk, summary);
        const std::string extra =
            "table_model=ex2_sign_magnitude\ntable_model_mismatches=" + std::to_string(mismatches) + "\n";
        if (mismatches == 0 || !emitted) {
          emit_table(kEx2, nbits, "ex2_sign_magnitude", d_table, o, dev, nan_output, extra, summary);
          emitted = true;
          emitted_clean = mismatches == 0;
        }
      }
    }
    FB_CUDA_CHECK(cudaFree(d_table));
    FB_CUDA_CHECK(cudaFree(d_conflicts));
  }
  return any_held;
}

// ---- lg2 extended-precision analysis (--lg2-extended, FBSFU1 form 5) ---------------------------
// Hypothesis: lg2(2^e * 1.m) = round(e + L[m]) for one real L[m] per mantissa and one final
// rounding (nearest-even, toward zero, down, up) for all positive normal inputs. Per mantissa
// and rounding, every exponent e (-126..127, e = 0 included) confines L to an interval; their
// intersection is empty exactly where no L[m] exists for that rounding. Intervals are held in
// units of 2^-60 (gpu/sfu_table_model.hpp lg2_interval, lg2_representative).
constexpr int kLg2Mantissas = 1 << 23;
// One thread per mantissa: all 254 exponents, the four roundings; lo/hi[rounding * 2^23 + m],
// t[m] = the hardware's lg2(1.m); counts[0]: outputs that are NaN or infinite; counts[1 + k]:
// mantissas whose intervals for rounding k are already empty without the e = 0 constraint.
__global__ void lg2_interval_kernel(long long* lo, long long* hi, std::uint32_t* t, unsigned int* counts) {
  for (std::uint32_t m = blockIdx.x * blockDim.x + threadIdx.x; m < kLg2Mantissas; m += gridDim.x * blockDim.x) {
    long long l[kFinalRoundingCount], h[kFinalRoundingCount], l0[kFinalRoundingCount], h0[kFinalRoundingCount];
    for (int k = 0; k < kFinalRoundingCount; ++k) l[k] = -kLg2UnitCap, h[k] = kLg2UnitCap;
    for (int e = -126; e <= 127; ++e) {
      const std::uint32_t in = (static_cast<std::uint32_t>(e + 127) << 23) | m;
      const float r = lg2_approx_ftz(__uint_as_float(in));
      const std::uint32_t rb = __float_as_uint(r);
      if (e == 0) t[m] = rb;
      if (!isfinite(r)) atomicAdd(&counts[0], 1u);
      for (int k = 0; k < kFinalRoundingCount; ++k) {
        long long lo_u, hi_u;
        lg2_interval(e, rb, k, lo_u, hi_u);
        if (e == 0) {
          // x = 1 is the special value lg2(1) = +0 (the model returns it before the rule), so
          // it does not constrain L[0].
          l0[k] = m == 0 ? -kLg2UnitCap : lo_u, h0[k] = m == 0 ? kLg2UnitCap : hi_u;  // applied after the loop
          continue;
        }
        l[k] = max(l[k], lo_u);
        h[k] = min(h[k], hi_u);
      }
    }
    for (int k = 0; k < kFinalRoundingCount; ++k) {
      if (l[k] > h[k]) atomicAdd(&counts[1 + k], 1u);
      lo[static_cast<std::size_t>(k) * kLg2Mantissas + m] = max(l[k], l0[k]);
      hi[static_cast<std::size_t>(k) * kLg2Mantissas + m] = min(h[k], h0[k]);
    }
  }
}

// The hardware's lg2(2^e * 1.m) for e = -126..127 of each listed mantissa (the examples file).
__global__ void lg2_outputs_kernel(const std::uint32_t* mantissas, int n, std::uint32_t* out) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n * 254; i += gridDim.x * blockDim.x) {
    const std::uint32_t in = (static_cast<std::uint32_t>(i % 254 + 1) << 23) | mantissas[i / 254];
    out[i] = __float_as_uint(lg2_approx_ftz(__uint_as_float(in)));
  }
}

void lg2_extended_analysis(std::uint64_t chunk, const Options& o, const std::string& dev, std::ostringstream& summary) {
  const std::size_t n = kLg2Mantissas, modes = kFinalRoundingCount;
  long long *d_lo, *d_hi;
  std::uint32_t* d_t;
  unsigned int* d_counts;
  FB_CUDA_CHECK(cudaMalloc(&d_lo, modes * n * 8));
  FB_CUDA_CHECK(cudaMalloc(&d_hi, modes * n * 8));
  FB_CUDA_CHECK(cudaMalloc(&d_t, n * 4));
  FB_CUDA_CHECK(cudaMalloc(&d_counts, 8 * sizeof(unsigned int)));
  FB_CUDA_CHECK(cudaMemset(d_counts, 0, 8 * sizeof(unsigned int)));
  ++g_passes;  // 2^31 - 2^24 inputs: every positive normal
  lg2_interval_kernel<<<2048, 256>>>(d_lo, d_hi, d_t, d_counts);
  FB_CUDA_CHECK(cudaGetLastError());
  std::vector<long long> lo(modes * n), hi(modes * n);
  std::vector<std::uint32_t> t(n);
  unsigned int counts[8];
  FB_CUDA_CHECK(cudaMemcpy(lo.data(), d_lo, modes * n * 8, cudaMemcpyDeviceToHost));
  FB_CUDA_CHECK(cudaMemcpy(hi.data(), d_hi, modes * n * 8, cudaMemcpyDeviceToHost));
  FB_CUDA_CHECK(cudaMemcpy(t.data(), d_t, n * 4, cudaMemcpyDeviceToHost));
  FB_CUDA_CHECK(cudaMemcpy(counts, d_counts, sizeof counts, cudaMemcpyDeviceToHost));
  FB_CUDA_CHECK(cudaFree(d_lo));
  FB_CUDA_CHECK(cudaFree(d_hi));
  summary << "  lg2 extended precision (--lg2-extended): lg2(2^e * 1.m) = round(e + L[m]), one L[m] per mantissa over "
             "e = -126..127 (2130706432 positive normal inputs; "
          << counts[0] << " NaN or infinite outputs)\n";
  std::size_t empty[kFinalRoundingCount] = {};
  for (std::size_t k = 0; k < modes; ++k) {
    for (std::size_t m = 0; m < n; ++m) empty[k] += lo[k * n + m] > hi[k * n + m];
    summary << "    final rounding " << kFinalRoundingNames[k] << ": " << (empty[k] == 0 ? "HOLDS" : "fails") << " ("
            << empty[k] << " of 8388608 mantissas have no consistent L; " << counts[1 + k]
            << " already without the e = 0 constraint)\n";
  }
  int best = 0;
  for (int k = 1; k < kFinalRoundingCount; ++k) best = empty[k] < empty[best] ? k : best;
  // Diagnostics: the first mantissas without a consistent L, for nearest-even and the best rounding.
  {
    std::vector<std::pair<int, std::uint32_t>> listed;
    for (int k : {0, best}) {
      int taken = 0;
      for (std::size_t m = 0; m < n && taken < 16; ++m) {
        if (lo[k * n + m] > hi[k * n + m]) listed.emplace_back(k, static_cast<std::uint32_t>(m)), ++taken;
      }
      if (best == 0) break;
    }
    if (!listed.empty()) {
      std::vector<std::uint32_t> ms;
      for (const auto& p : listed) ms.push_back(p.second);
      std::uint32_t *d_m, *d_out;
      FB_CUDA_CHECK(cudaMalloc(&d_m, ms.size() * 4));
      FB_CUDA_CHECK(cudaMalloc(&d_out, ms.size() * 254 * 4));
      FB_CUDA_CHECK(cudaMemcpy(d_m, ms.data(), ms.size() * 4, cudaMemcpyHostToDevice));
      lg2_outputs_kernel<<<64, 256>>>(d_m, static_cast<int>(ms.size()), d_out);
      FB_CUDA_CHECK(cudaGetLastError());
      std::vector<std::uint32_t> outs(ms.size() * 254);
      FB_CUDA_CHECK(cudaMemcpy(outs.data(), d_out, outs.size() * 4, cudaMemcpyDeviceToHost));
      FB_CUDA_CHECK(cudaFree(d_m));
      FB_CUDA_CHECK(cudaFree(d_out));
      std::ofstream f(o.out_dir + "/lg2_extended_examples.txt");
      f << "# lg2_extended_examples.txt: fb-sfu-probe --lg2-extended, mantissas m with no consistent L[m]\n"
           "# (gpu/README.md). Per example: 'rounding m T lo hi' (T = the hardware's lg2(1.m) bits, lo/hi the\n"
           "# intersected bounds of L in units of 2^-60 for each rounding in the order nearest_even\n"
           "# toward_zero down up), then the hardware's lg2(2^e * 1.m) bits for e = -126 .. 127.\n";
      std::istringstream devs(dev);
      for (std::string line; std::getline(devs, line);) f << "# " << line << "\n";
      for (std::size_t i = 0; i < listed.size(); ++i) {
        const std::uint32_t m = listed[i].second;
        char line[96];
        std::snprintf(line, sizeof line, "%s m=0x%06x T=0x%08x", kFinalRoundingNames[listed[i].first], m, t[m]);
        f << line;
        for (std::size_t k = 0; k < modes; ++k) f << " " << lo[k * n + m] << " " << hi[k * n + m];
        for (int e = 0; e < 254; ++e) {
          std::snprintf(line, sizeof line, "%s0x%08x", e % 8 == 0 ? "\n  " : " ", outs[i * 254 + e]);
          f << line;
        }
        f << "\n";
      }
      summary << "    wrote lg2_extended_examples.txt: " << listed.size() << " mantissas without a consistent L\n";
    }
  }
  const bool held = empty[best] == 0;
  const bool want_raw = o.lg2_raw_evidence == kRawAlways || (o.lg2_raw_evidence == kRawAuto && !held);
  if (held) {
    // T[0]: the hardware's lg2(1) is the special value +0; the table keeps a float inside
    // L[0]'s interval instead, so that L[0] = T[0] + R ulp(T[0]) 2^-g is representable.
    {
      const long double mid = std::ldexp(0.5L * (static_cast<long double>(lo[best * n]) + hi[best * n]), -60);
      t[0] = sfu_bits(static_cast<float>(mid));
      FB_CUDA_CHECK(cudaMemcpy(d_t, t.data(), 4, cudaMemcpyHostToDevice));
      summary << "    T[0] = " << static_cast<double>(mid) << " (L[0]'s interval midpoint; lg2(1) = +0 is a special value)\n";
    }
    // L[m] = T[m] + R[m] ulp(T[m]) 2^-g with the fewest guard bits per mantissa; G the largest.
    std::vector<int> g(n);
    std::vector<long long> r(n);
    std::size_t unrepresentable = 0, guard_hist[25] = {}, zero_r = 0;
    int guard = 0;
    for (std::size_t m = 0; m < n; ++m) {
      if (!lg2_representative(t[m], lo[best * n + m], hi[best * n + m], g[m], r[m])) {
        ++unrepresentable;
        g[m] = 0, r[m] = 0;
        continue;
      }
      ++guard_hist[g[m]];
      guard = std::max(guard, g[m]);
    }
    std::vector<int> residuals(n);
    std::string tail;
    for (std::size_t m = 0; m < n; ++m) {
      residuals[m] = static_cast<int>(r[m] * (1ll << (guard - g[m])));  // |R| <= 2^guard
      zero_r += residuals[m] == 0;
      std::uint32_t z = (static_cast<std::uint32_t>(residuals[m]) << 1) ^ static_cast<std::uint32_t>(residuals[m] >> 31);
      do {
        tail += static_cast<char>((z & 0x7fu) | (z > 0x7fu ? 0x80u : 0u));
        z >>= 7;
      } while (z);
    }
    summary << "    representative L[m] = T[m] + R[m] ulp(T[m]) 2^-g (" << kFinalRoundingNames[best]
            << "): guard bits needed per mantissa:";
    for (int b = 0; b <= 24; ++b) {
      if (guard_hist[b]) summary << " " << b << ":" << guard_hist[b];
    }
    summary << "; table guard bits " << guard << ", R = 0 for " << zero_r << " mantissas, " << unrepresentable
            << " mantissas need more than 24 guard bits\n";
    if (unrepresentable == 0) {
      int* d_r;
      FB_CUDA_CHECK(cudaMalloc(&d_r, n * 4));
      FB_CUDA_CHECK(cudaMemcpy(d_r, residuals.data(), n * 4, cudaMemcpyHostToDevice));
      const std::uint32_t nan_output = measure_nan_output(kLg2);
      const unsigned long long mismatches =
          verify_table_model({kTmLg2Extended, 23, best, d_t, d_r, guard}, nan_output, chunk, summary);
      const std::string extra = "table_model=lg2_extended\nguard_bits=" + std::to_string(guard) +
                                "\nfinal_rounding=" + kFinalRoundingNames[best] +
                                "\ntable_model_mismatches=" + std::to_string(mismatches) + "\n";
      emit_table(kLg2, 23, "lg2_extended", d_t, o, dev, nan_output, extra, summary, tail);
      FB_CUDA_CHECK(cudaFree(d_r));
    }
  }
  FB_CUDA_CHECK(cudaFree(d_t));
  FB_CUDA_CHECK(cudaFree(d_counts));
  summary << "  lg2 raw evidence (--lg2-raw-evidence " << kRawEvidenceNames[o.lg2_raw_evidence] << "): "
          << (want_raw ? "written" : "not written") << "\n";
  if (want_raw) write_raw_binades(kLg2, o.lg2_raw_binades, o, dev, summary);
}

int run(const Options& o) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point t_start = Clock::now();
  int device = 0, device_count = 0;
  const cudaError_t count_err = cudaGetDeviceCount(&device_count);
  if (count_err != cudaSuccess || device_count == 0) {
    const std::string why = std::string("fb-sfu-probe: no usable CUDA device (") +
                            (count_err != cudaSuccess ? cudaGetErrorString(count_err) : "no device found") +
                            "): this program needs a GPU\n";
    std::ofstream(o.out_dir + "/sfu_summary.txt") << why;
    std::fputs(why.c_str(), stderr);
    return 3;
  }
  cudaDeviceProp prop;
  FB_CUDA_CHECK(cudaGetDevice(&device));
  FB_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  const std::string dev = device_line(prop);
  const std::uint64_t chunk = 1ull << o.chunk_log2, total = 1ull << 32;
  std::ostringstream summary, timing;
  summary << "fb-sfu-probe summary (all 2^32 fp32 inputs)\n" << dev;
  {
    summary << "options: functions=";
    const char* sep = "";
    for (int fn : {kEx2, kRcp, kLg2, kEx2Nf}) {
      if (!o.functions[fn]) continue;
      summary << sep << kFnNames[fn];
      sep = ",";
    }
    summary << " ex2_bits=";
    for (std::size_t i = 0; i < o.ex2_bits.size(); ++i) summary << (i ? "," : "") << o.ex2_bits[i];
    summary << " ex2_roundings=";
    for (std::size_t i = 0; i < o.ex2_roundings.size(); ++i) summary << (i ? "," : "") << kArgRoundingNames[o.ex2_roundings[i]];
    summary << " ex2_sm_bits=";
    for (std::size_t i = 0; i < o.ex2_sm_bits.size(); ++i) summary << (i ? "," : "") << o.ex2_sm_bits[i];
    if (o.ex2_sm_bits.empty()) summary << "none";
    summary << " raw_evidence=" << kRawEvidenceNames[o.raw_evidence] << " lg2_extended=" << (o.lg2_extended ? 1 : 0)
            << " lg2_raw_evidence=" << kRawEvidenceNames[o.lg2_raw_evidence] << " chunk_log2=" << o.chunk_log2 << "\n";
  }
  // Rewritten after each function, so that a run cut short keeps the functions it finished.
  const auto write_summary = [&](bool final_write) {
    std::ofstream(o.out_dir + "/sfu_summary.txt")
        << summary.str() << (final_write ? "" : "\n(run in progress or cut short: functions above finished)\n");
  };
  Stats* stats;
  FB_CUDA_CHECK(cudaMallocManaged(&stats, sizeof(Stats)));
  timing << "\n[timing] wall seconds (2^32-input passes) per function:";
  // ex2nf last: the three .ftz functions keep their place in the summary.
  for (int fn : {kEx2, kRcp, kLg2, kEx2Nf}) {
    if (!o.functions[fn]) continue;
    const Clock::time_point t_fn = Clock::now();
    const unsigned long long passes_before = g_passes;
    std::memset(stats, 0, sizeof(Stats));
    ++g_passes;
    for (std::uint64_t base = 0; base < total; base += chunk) {
      measure_kernel<<<4096, 256>>>(fn, base, chunk, stats);
      FB_CUDA_CHECK(cudaGetLastError());
    }
    FB_CUDA_CHECK(cudaDeviceSynchronize());
    summary << "\n[" << kFnPtx[fn] << "] vs correctly rounded "
            << (fn == kEx2Nf ? "(RNE, no flushing: subnormal inputs and results kept)\n" : "(RNE, ftz in and out)\n");
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
      bool unresolved = false;
      float ref;
      if (fn == kEx2Nf) {  // no flushing, and the boundary between 0 and 2^-149 checked too
        ref = round_reference_unflushed_host(exp2l(static_cast<long double>(x)), x == std::rint(x), unresolved);
      } else {
        const long double xl = sfu_ftz(x);
        const long double r = fn == kEx2 ? exp2l(xl) : fn == kRcp ? 1.0L / xl : log2l(xl);
        const float f = static_cast<float>(r);
        const float toward = static_cast<long double>(f) < r ? nextafterf(f, INFINITY) : nextafterf(f, -INFINITY);
        const long double boundary = 0.5L * (static_cast<long double>(f) + static_cast<long double>(toward));
        unresolved = fabsl(r - boundary) <= fabsl(r) * 0x1p-60L;
        ref = sfu_ftz(f);
      }
      still += unresolved;
      char line[96];
      std::snprintf(line, sizeof line, "    0x%08x ref(long double)=0x%08x%s\n", in,
                    [&] { std::uint32_t b; std::memcpy(&b, &ref, 4); return b; }(), unresolved ? " UNRESOLVED" : "");
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
      // The hypotheses whose conflicts the raw evidence keeps (ex2_conflicts.txt).
      std::vector<ConflictCapture> captures;
      captures.emplace_back(24, kFloor);
      captures.emplace_back(23, kNearestEven);
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
          unsigned long long conflicts = 0;
          if (fn == kEx2) {
            auto ev = std::make_unique<Ex2Conflicts>();
            conflicts = run_ex2_hypothesis(nbits, rounding, chunk, d_table, *ev);
            for (ConflictCapture& c : captures) {
              if (c.nbits != nbits || c.rounding != rounding) continue;
              c.captured = true;
              c.conflicts = conflicts;
              c.ev = std::move(ev);
            }
          } else {
            ++g_passes;
            for (std::uint64_t base = 0; base < total; base += chunk) {
              rcp_hypothesis_kernel<<<4096, 256>>>(base, chunk, d_table, d_conflicts);
              FB_CUDA_CHECK(cudaGetLastError());
            }
            FB_CUDA_CHECK(cudaMemcpy(&conflicts, d_conflicts, sizeof conflicts, cudaMemcpyDeviceToHost));
          }
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
            const unsigned long long mismatches = verify_table_model(
                {fn == kEx2 ? kTmEx2FixedPoint : kTmRcpMantissa, nbits, rounding, d_table, nullptr, 0}, nan_output,
                chunk, summary);
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
      if (fn == kEx2) {
        const bool sm_held = ex2_sign_magnitude(chunk, o, dev, summary);
        // Raw evidence: with --raw-evidence auto only when no hypothesis held (any N, any rounding,
        // the sign-magnitude one included).
        const bool any_held =
            sm_held || std::any_of(std::begin(held_at), std::end(held_at), [](int n) { return n >= 0; });
        const bool want = o.raw_evidence == kRawAlways || (o.raw_evidence == kRawAuto && !any_held);
        summary << "  raw evidence (--raw-evidence " << kRawEvidenceNames[o.raw_evidence] << "): "
                << (want ? (any_held ? "written" : "written, no ex2 hypothesis held")
                         : (o.raw_evidence == kRawNever ? "not written" : "not written, a hypothesis held"))
                << "\n";
        if (want) {
          for (ConflictCapture& c : captures) {
            if (c.captured) continue;  // not among the hypotheses run above: one more pass
            std::uint32_t* d_table;
            FB_CUDA_CHECK(cudaMalloc(&d_table, (1ull << c.nbits) * 4));
            c.ev = std::make_unique<Ex2Conflicts>();
            c.conflicts = run_ex2_hypothesis(c.nbits, c.rounding, chunk, d_table, *c.ev);
            c.captured = true;
            FB_CUDA_CHECK(cudaFree(d_table));
          }
          write_ex2_conflicts(captures, o, dev, summary);
          write_raw_binades(kEx2, o.raw_binades, o, dev, summary);
        }
      }
    }
    if (fn == kLg2 && lg2_split_hypothesis(chunk, summary)) emit_lg2_table(chunk, o, dev, summary);
    if (fn == kLg2 && o.lg2_extended) lg2_extended_analysis(chunk, o, dev, summary);
    if (fn == kEx2Nf) ex2_nf_compare(chunk, summary);
    FB_CUDA_CHECK(cudaDeviceSynchronize());
    const double seconds = std::chrono::duration<double>(Clock::now() - t_fn).count();
    timing << " " << kFnNames[fn] << ": " << seconds << " s (" << (g_passes - passes_before) << ")";
    std::printf("%s done: %.2f s, %llu passes of 2^32 inputs\n", kFnPtx[fn], seconds, g_passes - passes_before);
    std::fflush(stdout);
    write_summary(false);
  }
  FB_CUDA_CHECK(cudaFree(stats));
  timing << "; total " << std::chrono::duration<double>(Clock::now() - t_start).count() << " s (" << g_passes
         << " passes)\n";
  summary << timing.str();
  write_summary(true);
  std::fputs(summary.str().c_str(), stdout);
  return 0;
}

}  // namespace
}  // namespace fb::gpu

namespace {
const char kUsage[] =
    "usage: fb-sfu-probe --out-dir DIR [--functions ex2,ex2nf,rcp,lg2] [--ex2-bits 20,22,23,24,25,26]\n"
    "                    [--ex2-roundings floor,nearest_even,toward_zero] [--ex2-sm-bits 23|none]\n"
    "                    [--raw-evidence auto|always|never] [--raw-binades 1,-1,0.5,-0.5,0x1p-8]\n"
    "                    [--lg2-extended] [--lg2-raw-evidence auto|always|never] [--lg2-raw-binades 1,0.5,2]\n"
    "                    [--chunk-log2 28]\n"
    "  --functions     which to measure (default all): ex2 = ex2.approx.ftz.f32 (+ table hypotheses),\n"
    "                  ex2nf = ex2.approx.f32 (no ftz), rcp = rcp.approx.ftz.f32, lg2 = lg2.approx.ftz.f32\n"
    "  --ex2-bits      fixed-point fraction bits N tried (8..26; tables written only for N <= 24)\n"
    "  --raw-evidence  ex2_conflicts.txt + ex2_raw_binades.bin: auto = only when no ex2 hypothesis held\n"
    "  --raw-binades   binades of the raw capture, each named by +-2^e: all 2^23 inputs with that sign and\n"
    "                  exponent (1 = [1,2), -1 = (-2,-1]); at most 16\n"
    "  --ex2-sm-bits   sign-magnitude ex2 hypothesis (|x| truncated to N fraction bits), N in 8..24, or none\n"
    "  --lg2-extended  lg2: one L[m] per mantissa with round(e + L[m]) for 4 final roundings; table when one holds\n"
    "  --lg2-raw-evidence  lg2_raw_binades.bin (--lg2-raw-binades): auto = when --lg2-extended found no L\n"
    "Writes DIR/sfu_summary.txt (and tables, raw evidence); exit 2 bad arguments, 3 CUDA error or no GPU.\n";

bool parse_list(const char* arg, const char* option, const std::function<bool(const std::string&)>& item_ok) {
  std::stringstream s(arg);
  std::string item;
  bool any = false;
  while (std::getline(s, item, ',')) {
    if (!item_ok(item)) {
      std::fprintf(stderr, "error: %s: '%s' is not valid\n%s", option, item.c_str(), kUsage);
      return false;
    }
    any = true;
  }
  if (!any) std::fprintf(stderr, "error: %s: empty list\n%s", option, kUsage);
  return any;
}
}  // namespace

int main(int argc, char** argv) {
  using namespace fb::gpu;
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (arg == "--out-dir" && has_value) {
      o.out_dir = argv[++i];
    } else if (arg == "--chunk-log2" && has_value) {
      o.chunk_log2 = std::atoi(argv[++i]);
    } else if (arg == "--ex2-roundings" && has_value) {
      o.ex2_roundings.clear();
      if (!parse_list(argv[++i], "--ex2-roundings", [&](const std::string& item) {
            int r = 0;
            while (r < kArgRoundingCount && item != kArgRoundingNames[r]) ++r;
            if (r == kArgRoundingCount) return false;
            o.ex2_roundings.push_back(r);
            return true;
          })) {
        return 2;
      }
    } else if (arg == "--ex2-bits" && has_value) {
      o.ex2_bits.clear();
      if (!parse_list(argv[++i], "--ex2-bits", [&](const std::string& item) {
            char* end = nullptr;
            const long b = std::strtol(item.c_str(), &end, 10);
            if (item.empty() || *end != '\0' || b < 8 || b > 26) return false;
            o.ex2_bits.push_back(static_cast<int>(b));
            return true;
          })) {
        return 2;
      }
    } else if (arg == "--functions" && has_value) {
      std::fill(std::begin(o.functions), std::end(o.functions), false);
      if (!parse_list(argv[++i], "--functions", [&](const std::string& item) {
            for (int fn = 0; fn < kFnCount; ++fn) {
              if (item == kFnNames[fn]) return o.functions[fn] = true;
            }
            return false;
          })) {
        return 2;
      }
    } else if (arg == "--raw-evidence" && has_value) {
      const std::string v = argv[++i];
      int r = 0;
      while (r < 3 && v != kRawEvidenceNames[r]) ++r;
      if (r == 3) {
        std::fprintf(stderr, "error: --raw-evidence: '%s' is not auto, always or never\n%s", v.c_str(), kUsage);
        return 2;
      }
      o.raw_evidence = r;
    } else if (arg == "--ex2-sm-bits" && has_value) {
      o.ex2_sm_bits.clear();
      if (std::string(argv[i + 1]) == "none") {
        ++i;
        continue;
      }
      if (!parse_list(argv[++i], "--ex2-sm-bits", [&](const std::string& item) {
            char* end = nullptr;
            const long b = std::strtol(item.c_str(), &end, 10);
            if (item.empty() || *end != '\0' || b < 8 || b > 24) return false;
            o.ex2_sm_bits.push_back(static_cast<int>(b));
            return true;
          })) {
        return 2;
      }
    } else if (arg == "--lg2-extended") {
      o.lg2_extended = true;
    } else if (arg == "--lg2-raw-evidence" && has_value) {
      const std::string v = argv[++i];
      int r = 0;
      while (r < 3 && v != kRawEvidenceNames[r]) ++r;
      if (r == 3) {
        std::fprintf(stderr, "error: --lg2-raw-evidence: '%s' is not auto, always or never\n%s", v.c_str(), kUsage);
        return 2;
      }
      o.lg2_raw_evidence = r;
    } else if ((arg == "--raw-binades" || arg == "--lg2-raw-binades") && has_value) {
      std::vector<std::uint32_t>& list = arg == "--raw-binades" ? o.raw_binades : o.lg2_raw_binades;
      list.clear();
      if (!parse_list(argv[++i], arg.c_str(), [&](const std::string& item) {
            char* end = nullptr;
            const float v = std::strtof(item.c_str(), &end);
            std::uint32_t bits;
            std::memcpy(&bits, &v, 4);
            const std::uint32_t exponent = (bits >> 23) & 0xffu;
            // a normal +-2^e, each binade once
            if (item.empty() || *end != '\0' || (bits & 0x7fffffu) != 0 || exponent == 0 || exponent == 255 ||
                list.size() == static_cast<std::size_t>(kMaxRawBinades) ||
                std::find(list.begin(), list.end(), bits) != list.end()) {
              return false;
            }
            list.push_back(bits);
            return true;
          })) {
        return 2;
      }
    } else {
      std::fprintf(stderr, "error: unknown or incomplete argument '%s'\n%s", arg.c_str(), kUsage);
      return 2;
    }
  }
  if (o.chunk_log2 < 16 || o.chunk_log2 > 32) {
    std::fprintf(stderr, "error: --chunk-log2 must be in 16..32\n");
    return 2;
  }
  if (o.ex2_roundings.empty() || o.ex2_bits.empty()) {
    std::fprintf(stderr, "error: --ex2-bits and --ex2-roundings need at least one value\n");
    return 2;
  }
  // Fail before the GPU work, not after it, when the summary cannot be written.
  if (!(std::ofstream(o.out_dir + "/sfu_summary.txt") << "fb-sfu-probe: started, no function finished yet\n")) {
    std::fprintf(stderr, "error: cannot write %s/sfu_summary.txt (does --out-dir exist?)\n", o.out_dir.c_str());
    return 2;
  }
  return run(o);
}
