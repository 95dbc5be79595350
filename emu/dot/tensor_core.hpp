// emu/dot/tensor_core.hpp: tensor-core fused dot-add models (docs/DESIGN.md §4).
//
// Contract: a TensorCoreModel is a named set of parameters, not code. fused_dot()
// computes D = C + sum_i a_i*b_i the way the named hardware does:
// - products are exact;
// - C and the products of one fused step are aligned to the largest exponent among
//   them; each term is truncated toward zero to F fraction bits relative to that
//   exponent and the terms are summed exactly;
// - the sum is normalised once and rounded into the output (fp32 RZ, fp16 RNE, or
//   fp32 truncated to 13 fraction bits for Hopper's fp8 "e8m13" accumulator); a sum
//   that overflows the output gives +-inf (also under RZ), one that rounds to a zero
//   magnitude gives +0;
// - k longer than one step chains steps, each step's result becoming the next C.
// Choices the published sources leave open are named parameters (see ZeroTermPolicy).
//
// STATUS: the parameters are the published ones (Fasi et al. 2021, Khattak &
// Mikaitis 2025, Xie et al. 2025). The sm_90 presets of the forms fb-mma-probe
// measured on an NVIDIA H200 (driver 580.159.04, 2026-11-26; >= 10^6 cases per form,
// gpu/README.md) reproduce the hardware bit for bit and are marked `hardware_validated`:
// sm90-mma bf16/fp16/tf32 and sm90-mma-f16acc, sm90-wgmma bf16/fp16/e4m3/e5m2. Every
// other preset (sm70, sm80, sm89, sm90-wgmma tf32 and f16acc, and the Blackwell sm100
// (tcgen05.mma) and sm120 (RTX Blackwell mma.sync) presets, whose parameters are MMA-Sim's)
// is NOT validated on hardware; the rules measured on sm_90 (overflow to inf, +0 for a
// rounded-to-zero result) are applied to them as Xie et al. 2025 publish them. The
// Blackwell fp6/fp4 (e3m2, e2m3, e2m1) presets go beyond MMA-Sim (assumed: the fp8 path).
// Regression set: traces/hw/probes_h200.fbp (ctest tensor_core_hw_probes_h200).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "emu/rounding.hpp"
#include "formats/format.hpp"

namespace fb {

// Overflow: the tensor-core outputs give +-inf when the step's (truncated) sum is at
// least 2^(emax+1) in magnitude, i.e. when the rounded value with unbounded exponent
// exceeds max finite (so under RZ, |sum| in (max finite, 2^128) still gives max finite).
enum class DotOutput : std::uint8_t {
  fp32_rz,     // normalise, truncate to fp32, overflow to inf (Volta..Hopper fp16/bf16/tf32 into f32)
  fp16_rne,    // normalise, round to nearest even into fp16, overflow to inf (fp16 accumulate)
  fp32_e8m13,  // fp32 truncated to 13 fraction bits, overflow to inf (Hopper fp8 wgmma, Ada fp8 mma)
  exact_rne,   // exact sum, one IEEE RNE rounding into fp32 (the `exact-rne` reference)
};

// Exponent a zero (or zero-product) term contributes to the alignment maximum.
enum class ZeroTermPolicy : std::uint8_t {
  ignored,          // zero terms do not take part in choosing the largest exponent (default)
  as_min_exponent,  // zero terms count with the smallest exponent of their format
                    // (a zero product: 2*emin of the input format; a zero C: emin of C's format)
};

// Rules of every hardware preset (the `exact-rne` reference follows IEEE 754 instead: one
// RNE rounding of the exact sum, a zero or underflowed result keeping the sign IEEE gives it,
// -0 for a negative sum that rounds to zero). "Measured" means: reproduced bit for bit on the
// H200 probe set (sm_90 forms above); the other targets follow the same rules as published,
// unmeasured.
// - A term's alignment exponent is that of its hardware encoding: a subnormal input
//   (or C) counts with its format's emin, its value kept exactly; a product's alignment
//   exponent is ea+eb with significand in [0,4). (Measured: c_tiny, specials.)
// - tf32 inputs are the top 19 bits of the 32-bit register; the low 13 bits are
//   ignored (truncation, not rounding). (Measured: random_bits keeps them non-zero.)
// - Zero results: a step whose exact sum is zero gives +0, also when every term (C and
//   each product, sign = sign(a) xor sign(b)) is a -0, where IEEE addition keeps -0
//   (measured on every sm_90 form: the signed_zeros batch, 4960 such rows per form, all
//   +0). A non-zero sum whose magnitude rounds to zero gives +0 whatever its sign
//   (measured once, fp16 output: -2^-25 gives +0; applied to the fp32/e8m13 outputs
//   too, not measured there).
// - Specials per step: any NaN, inf*0, or +inf and -inf together give the canonical
//   quiet NaN (fp32 0x7fc00000, fp16 0x7e00; probe-check matches any NaN, so the
//   payload is not measured); otherwise an infinite term gives inf of its sign.
//   (Measured: specials, c_huge, random_bits.)
// - Overflow gives +-inf for every output (see DotOutput; follows Xie et al. 2025,
//   measured on sm_90 only); an infinite C of a chained step then propagates. Tiny
//   results become subnormal (no flush).
// - k == 0 runs one step with C alone: C is re-rounded into the output by the step's rules
//   (a value C keeps, except e8m13's truncation to 13 fraction bits; -0 becomes +0 by the zero
//   rule, a NaN the canonical NaN). A negative k is treated as 0.

struct TensorCoreModel {
  std::string_view name;  // "sm80", "sm90-mma", ...
  Format input;           // the input format this preset applies to
  int products_per_step;  // products fused in one step (k of the step)
  int fraction_bits;      // F
  bool truncate_terms;    // each aligned term truncated toward zero to F bits
  DotOutput output;
  ZeroTermPolicy zero_terms;
  bool hardware_validated;     // measured bit for bit on a GPU by this project (see STATUS)
  std::string_view source;     // where the parameters come from
  std::string_view note = {};  // parameters assumed rather than published, if any
};

// Fused steps of `model` for k products: products_per_step <= 0 means one step for all.
constexpr int fused_step_size(const TensorCoreModel& model, int k) {
  return model.products_per_step > 0 ? model.products_per_step : (k > 0 ? k : 1);
}
// The format of C and D: fp16 for fp16_rne output, fp32 otherwise.
const Format& accumulator_format(const TensorCoreModel& model);
// Whether any preset has this name (for error messages naming the missing input format).
bool is_tensor_core_model_name(std::string_view name);
// The custom format e8m13 in fp32's 32-bit layout (low 10 bits zero): Hopper's fp8 accumulator.
inline constexpr Format kE8m13InFp32Layout{"e8m13", 8, 13, 127, SpecialEncoding::ieee, true, 32, true};
// The format a step's exact sum is rounded into: fp16, fp32, or e8m13 in fp32's layout.
constexpr const Format& dot_output_format(DotOutput output) {
  return output == DotOutput::fp16_rne     ? formats::fp16
         : output == DotOutput::fp32_e8m13 ? kE8m13InFp32Layout
                                           : formats::fp32;
}

// All presets: sm70, sm80, sm89, sm90-mma, sm90-wgmma, sm100, sm120, exact-rne, each per
// input format (the table is emu/dot/tensor_core_presets.cpp).
std::span<const TensorCoreModel> tensor_core_models();
// The preset for a model name and input format, or nullptr when that hardware has no
// such instruction form.
const TensorCoreModel* find_tensor_core_model(std::string_view name, const Format& input);

// What one fused step did (docs/DESIGN.md §3-4); the attention tracer builds on these.
// Exactness: truncated_value is the exact signed sum of the removed parts rounded once to
// double (to nearest even), and output_residue is exact. `error` (output - exact sum of C and
// the products) has the exact sign, and is 0 exactly when the step is exact; its value is
// v = -(T + output_residue), one fp64 addition, T the fp64 sum of the removed parts in term
// order (C first). v is the exact error rounded once whenever T is exact, which holds when
// every removed part's lowest bit is at least 2^(unit - 46), unit = 2^(largest_exponent - F)
// (no term far below the step's largest; every step of typical data). Otherwise T is within
// 2^(2b-54) units of the exact sum (2^b > products per step): v is used when
// |v| > 2^(2b-53) units, where its sign is the exact one and it is within 2^(2b-54) units
// (plus half an ulp) of the exact error; at or below that bound `error` is the exact error
// rounded once (formed exactly). (Exact rounding everywhere would cost the tallied
// fused_dot_columns kernel a wide sum per term.) -(truncated_value + output_residue) can
// differ from `error` and even have the wrong sign or read 0: read a step's error from
// `error`. (The exact-rne model, exact_rne output: one step, truncated_value 0,
// output_residue from round_pack's error_ulps; error = -output_residue.)
struct DotStepEvent {
  int largest_exponent = 0;      // alignment exponent of the step
  int terms = 0;                 // C plus the products in this step
  double truncated_value = 0.0;  // signed sum of what truncation to F bits removed (exact, rounded once)
  int truncated_terms = 0;       // terms that lost bits to the truncation
  bool carry_out = false;        // the fixed-point sum carried past the largest exponent
  int normalisation_shift = 0;   // final left (+) or right (-) shift before output rounding
  double output_residue = 0.0;   // what the output rounding removed (signed): exact - output,
                                 // ∓inf when the output overflowed to ±inf
  // Additions to the published record (may be ignored by readers):
  int first_product = 0;         // index of the step's first product in a/b
  int fraction_bits = 0;         // F used for the truncation
  std::int64_t aligned_sum = 0;  // exact fixed-point sum, in units of 2^(largest_exponent - F)
  RoundingEvent output_event{};  // round_pack's event for the output rounding
  bool special = false;          // NaN/inf step: no fixed-point sum was formed
  // Every term (C and the products) is zero: no exponent took part in the alignment, and
  // largest_exponent is only the grid the zero sum was formed on (C's format's emin).
  bool every_term_zero = false;
  // output - (C + sum of the products): exact sign, exact zero-ness, value as above (±inf when
  // the output overflowed; an exact step reads -0.0): the error DotStepTally counts and adds.
  double error = 0.0;
};
// Per-term detail, recorded only when DotTrace::record_terms is set.
struct DotTermEvent {
  int step = 0;
  int product = -1;              // index into a/b, or -1 for C
  int alignment_exponent = 0;    // exponent this term brought to the alignment maximum
  double value = 0.0;            // exact term (product or C)
  double truncated_value = 0.0;  // signed part removed by truncation to F bits
};
// Totals over traced steps, for callers that need only counts (the attention tracer
// traces every P·V step of every traced row). A step's signed error is DotStepEvent::error
// (output - exact, with the exact sign; its value is described there); it rounded up (away
// from zero) when that error has the sign of the aligned sum, down when the opposite, neither
// when it is 0. The direction is therefore exact for every step; signed_error is the fp64
// sum of the steps' errors. NaN/inf steps are not counted.
struct DotStepTally {
  int significand_overflows = 0, ties = 0, rounded_up = 0, rounded_down = 0;
  double signed_error = 0.0;  // summed step by step, in the order the steps ran
  void add(const DotStepEvent& step) {
    if (!step.special) add(step.carry_out, step.output_event.tie, step.error, step.aligned_sum >= 0);
  }
  void add(bool carry_out, bool tie, double error, bool sum_nonnegative) {
    significand_overflows += carry_out ? 1 : 0;
    ties += tie ? 1 : 0;
    // Branch-free counts (the direction is data-dependent: branches mispredict).
    const bool away_from_zero = (error > 0) == sum_nonnegative;
    rounded_up += error != 0.0 && away_from_zero ? 1 : 0;
    rounded_down += error != 0.0 && !away_from_zero ? 1 : 0;
    signed_error += error;
  }
};
struct DotTrace {
  std::vector<DotStepEvent> steps;
  bool record_terms = false;
  std::vector<DotTermEvent> terms;
  // When set, each step is added to *tally_only instead of being recorded (steps and
  // terms stay empty): the same counts without building and storing the events.
  DotStepTally* tally_only = nullptr;
};

// Hot path (no allocation unless tracing). a, b hold the exact values of `k` elements of the model's input format
// (as float; all of bf16/fp16/tf32/fp8/fp6/fp4 are exact in float); c is an fp32 value (or an
// fp16 value for fp16_rne output). Returns the output value as float. NaN/inf follow
// IEEE propagation (inf - inf and 0*inf give the canonical NaN).
float fused_dot(const TensorCoreModel& model, float c, const float* a, const float* b, int k,
                DotTrace* trace = nullptr);

// The instruction set of the blocked kernel (see fused_dot_rows).
enum class DotIsa : std::uint8_t { portable, avx2, avx512, best };

// Many dots of one model at once, in the shapes attention runs: one P̄ row against the
// columns of a V tile, one q against the columns of a Kᵀ tile. For every lane l < lanes,
//   d[l] = fused_dot(model, c[l], a, column l of b, k),  column l of b = b[j*ldb + l], j < k,
// bit for bit (NaN payloads included). c and d may be the same array. b_alignment and isa: as
// fused_dot_rows' (null: computed here).
// This is fused_dot_rows with one row (the blocked kernel below). With `tally`, every step of
// every lane is also added to it as fused_dot with DotTrace::tally_only = tally would add it,
// lane after lane (the same counts and the same signed error, summed in the same order; each
// step's error with its exact sign and DotStepEvent::error's value): the kernel's tallied form
// also keeps each term's truncation remainder (exact in fp32) and sums it in fp64 in term order,
// then forms the step's error, carry-out and tie as fused_step_body does. That sum is certified
// exact where every remainder's lowest bit is at least 2^(u-(53-b)) (u: the step's unit, 2^b >
// the step's term count, judged from the terms' alignment exponents); a step not certified whose
// error is within 2^(2b-53) * 2^u of zero is redone alone by fused_dot (its exact sum) from the C
// the kernel recorded for it. Lanes it cannot run exactly (its fallbacks, and steps where a
// term's remainder could be inexact in fp32: a bit of the scaled term below 2^-149) run
// fused_dot itself, in lane order.
void fused_dot_columns(const TensorCoreModel& model, const float* c, const float* a, const float* b, std::size_t ldb,
                       int k, int lanes, float* d, DotStepTally* tally = nullptr,
                       const std::int32_t* b_alignment = nullptr, DotIsa isa = DotIsa::best);

// The blocked GEMM kernel (emu/dot/tensor_core_gemm.cpp). For r < rows and l < lanes:
//   d[r*ldd + l] = fused_dot(model, c[r*ldc + l], a + r*lda, column l of b, k),
// column l of b = b[j*ldb + l] for j < k, bit for bit (NaN payloads included). c and d may
// be the same array with ldc == ldd. b_alignment, when not null, holds
// dot_alignment_exponents of b in b's layout (a panel prepared once for many calls);
// otherwise it is computed here.
// How: each row of A against four registers of 16 (AVX-512) or 8 (AVX2) columns at once
// (independent chains), in fp32 and int32 lanes: each product is exact in fp32, scaled by
// 2^-(E-F) and truncated by one fp32-to-int32 conversion, and the step's integers summed
// exactly; the exponent work reads the prepared alignment exponents. A model outside
// fused_dot_rows_blocked and k == 0 run fused_dot; so does each lane whose step leaves the
// kernel's exact range (a NaN or infinity in its row, column or C, overflow, a non-zero
// step whose largest term is below 2^(F-125)).
// `isa` picks the instruction set (tests check each); `best` is the CPU's best, which
// FLASHBITS_NO_AVX512 / FLASHBITS_NO_AVX2 cap. An unavailable one falls back to `best`.
DotIsa best_dot_isa();
bool dot_isa_available(DotIsa isa);
// Whether fused_dot_rows runs `model` in its lanes: a model with fused steps, truncated
// or not, ZeroTermPolicy::ignored, F < 29, inputs of at most 10 fraction bits.
bool fused_dot_rows_blocked(const TensorCoreModel& model);
// Each element's alignment exponent for `model`'s input format (an opaque int32 per
// element, for fused_dot_rows' b_alignment).
void dot_alignment_exponents(const TensorCoreModel& model, const float* b, std::size_t n, std::int32_t* alignment);
void fused_dot_rows(const TensorCoreModel& model, const float* c, std::size_t ldc, const float* a, std::size_t lda,
                    int rows, const float* b, const std::int32_t* b_alignment, std::size_t ldb, int k, int lanes,
                    float* d, std::size_t ldd, DotIsa isa = DotIsa::best);
// n independent dots through the same kernel, W at a time side by side: for i < n,
//   d[i] = fused_dot(model, c[i], a + i*k, b + i*k, k)
// bit for bit (c and d may be the same array). For batches of unrelated dots
// (fb.dot, `flashbits dot --batch`); the same fallbacks as fused_dot_rows.
void fused_dot_pairs(const TensorCoreModel& model, const float* c, const float* a, const float* b, int k, int n,
                     float* d, DotIsa isa = DotIsa::best);

// The output rounding of one fused step, the rules above in one place: the exact sum
// sum * 2^unit rounded into `output` (bits of fp32, fp16, or e8m13 in fp32's layout), overflow
// giving +-inf and a zero or rounded-to-zero result +0. Other dot models reuse it
// (emu/dot/tensor_core_block_scaled.cpp).
std::uint32_t dot_step_output(DotOutput output, std::int64_t sum, int unit);

// The specials rule of one fused step, in one place (other dot models reuse it,
// emu/dot/tensor_core_block_scaled.cpp): C and each product a*b classified; any NaN, inf*0, or
// +inf with -inf makes the step the canonical NaN, otherwise an infinite term makes it the
// infinity of its sign. result() gives those bits in `out` (precondition: any()).
struct SpecialTerms {
  bool nan = false, positive_inf = false, negative_inf = false;
  void add_value(float c) {
    nan = nan || std::isnan(c);
    positive_inf = positive_inf || (std::isinf(c) && c > 0);
    negative_inf = negative_inf || (std::isinf(c) && c < 0);
  }
  void add_product(float x, float y) {
    if (std::isnan(x) || std::isnan(y)) {
      nan = true;
    } else if (std::isinf(x) || std::isinf(y)) {
      if (x == 0.0f || y == 0.0f)
        nan = true;
      else
        (std::signbit(x) != std::signbit(y) ? negative_inf : positive_inf) = true;
    }
  }
  bool any() const { return nan || positive_inf || negative_inf; }
  std::uint32_t result(const Format& out) const {
    if (nan || (positive_inf && negative_inf)) return pack_nan(out);
    return to_container(out, (negative_inf ? out.sign_mask() : 0u) | out.inf_pattern());
  }
};

// Bit-level entry point used by `flashbits dot` and the probe checker: inputs as
// raw bit patterns of the model's input format, C and D as fp32 (or fp16) bits.
std::uint32_t fused_dot_bits(const TensorCoreModel& model, std::uint32_t c_bits, std::span<const std::uint32_t> a_bits,
                             std::span<const std::uint32_t> b_bits, DotTrace* trace = nullptr);

}  // namespace fb
