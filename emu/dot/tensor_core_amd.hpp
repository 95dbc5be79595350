// emu/dot/tensor_core_amd.hpp: AMD Instinct MFMA dot-add models, CDNA1 (MI100), CDNA2 (MI200)
// and CDNA3 (MI300) (docs/DESIGN.md §4), as MMA-Sim (Xie et al. 2025, arXiv:2511.10909)
// models them.
//
// Contract: an AmdDotModel is a named set of parameters, not code, like TensorCoreModel
// (emu/dot/tensor_core.hpp); fused_dot_amd() computes D = C + sum_i a_i*b_i with C and D fp32,
// k cut into steps of `products_per_step` (a last shorter step takes what is left; k == 0
// runs one step with C alone), each step's fp32 result the next step's C. AMD's arithmetic
// does not fit TensorCoreModel's single truncate-then-round step, so each model names one of
// these arithmetics (rules in emu/dot/tensor_core_amd.cpp, with their MMA-Sim sources):
// - fma_chain (fp32 MFMA, every CDNA): one IEEE fp32 fma, round to nearest even, per
//   product, in order.
// - exact_step (CDNA1 fp16/bf16): each step's C plus its products summed exactly, one
//   round to nearest even into fp32.
// - ftz_pairwise (CDNA2 fp16/bf16): subnormal inputs and a subnormal C read as +0; every
//   product and every addition is an fp32 operation rounded to nearest even whose subnormal
//   result is flushed to a zero of its sign; a step of 2 adds (p0+p1) to C, a step of 4
//   adds ((p0+p1)+(p2+p3)).
// - two_stage (CDNA3 fp16/bf16/xf32): products truncated toward zero to F fraction bits at
//   their own largest exponent and summed; that sum floored to F2+1 bits and C floored to
//   F bits at the larger of the two exponents; the total normalised, floored to F2 fraction
//   bits, and rounded to nearest even into fp32.
// - grouped_two_stage (CDNA3 fp8): as two_stage, but the even- and odd-indexed products
//   are two truncated sums first, each floored to F bits at the larger of their exponents
//   and added; C is dropped when its exponent is below the alignment exponent minus F+1.
// Common rules: a NaN input or C, inf*0, or +inf with -inf gives the canonical NaN
// 0x7fc00000 (MMA-Sim's NaN payloads are 0x7fffffff or the host's: payloads are not
// modelled); otherwise an infinite input or C gives inf of its sign, and in the two-stage
// kinds a product of finite inputs at least 2^128 in magnitude counts as inf. Overflow of an
// fp32 rounding gives +-inf. Zero results: IEEE rules in the fma/ftz chains; in the fused
// kinds an exact zero sum gives +0 and a non-zero sum that rounds to zero a zero of its sign.
//
// STATUS: UNMEASURED. No preset is validated on hardware (no AMD GPU here); every
// parameter is MMA-Sim's, choices it leaves open are [assumption]s in the .cpp and in each
// preset's `note`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "formats/format.hpp"

namespace fb {

enum class AmdArithmetic : std::uint8_t { fma_chain, exact_step, ftz_pairwise, two_stage, grouped_two_stage };
std::string_view to_string(AmdArithmetic arithmetic);

struct AmdDotModel {
  std::string_view name;  // "cdna1", "cdna2", "cdna2-1k", "cdna3", "cdna3-k4"
  Format a_input;         // format of a (tf32: the xf32 instructions' fp32 registers, low 13 bits ignored)
  Format b_input;         // format of b (differs from a_input only for CDNA3's mixed fp8/bf8)
  AmdArithmetic arithmetic;
  int products_per_step;          // MMA-Sim's L_max (fused kinds), P (ftz_pairwise), 1 (fma_chain)
  int fraction_bits;              // F of the two-stage kinds (0 where unused)
  int sum_fraction_bits;          // F2 of the two-stage kinds (0 where unused)
  bool hardware_validated;        // false for every preset (see STATUS)
  std::string_view instructions;  // the MFMA instructions the preset stands for
  std::string_view source;        // where the parameters come from
  std::string_view note = {};     // what is assumed rather than published
};

// Every preset, per (name, a format, b format); the accumulator is always fp32.
std::span<const AmdDotModel> amd_dot_models();
// The preset for a name and one input format used for both a and b, or nullptr.
const AmdDotModel* find_amd_dot_model(std::string_view name, const Format& input);
// The preset for a name and the formats of a and b, or nullptr.
const AmdDotModel* find_amd_dot_model(std::string_view name, const Format& a_input, const Format& b_input);
// Whether any preset has this name (for error messages naming the missing input format).
bool is_amd_dot_model_name(std::string_view name);

// a[i], b[i] hold the exact values of elements of the model's a_input / b_input (as float;
// every input format here is exact in float; tf32 values have their low 13 bits ignored);
// c is an fp32 value. Returns D.
float fused_dot_amd(const AmdDotModel& model, float c, const float* a, const float* b, int k);

// Bit-level entry point (for `flashbits dot` and probe checkers): a and b as raw bit patterns of
// their formats, C and D as fp32 bits; k = a_bits.size() (std::invalid_argument unless b_bits
// has the same size).
// Many dots of one preset side by side: for every lane l < lanes,
//   d[l] = fused_dot_amd(model, c[l], a, column l of b, k),  column l of b = b[j*ldb + l], j < k,
// bit for bit; c and d may be the same array. The two-stage kind (CDNA3 fp16/bf16) runs four
// lanes per AVX2 register in fp64, where every step quantity is exact
// (emu/dot/tensor_core_amd_columns.cpp); other kinds, xf32, lanes meeting NaN, infinities or
// products of 2^128 or more, and CPUs without AVX2 run fused_dot_amd per lane.
void fused_dot_amd_columns(const AmdDotModel& model, const float* c, const float* a, const float* b, std::size_t ldb,
                           int k, int lanes, float* d);

std::uint32_t fused_dot_amd_bits(const AmdDotModel& model, std::uint32_t c_bits, std::span<const std::uint32_t> a_bits,
                                 std::span<const std::uint32_t> b_bits);

}  // namespace fb
