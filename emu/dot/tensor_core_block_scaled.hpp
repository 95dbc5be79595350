// emu/dot/tensor_core_block_scaled.hpp: block-scaled tensor-core dot-add models, the Blackwell
// kinds whose inputs carry one scale per block of k (docs/DESIGN.md §4, "Blackwell").
//
// Contract: a BlockScaledModel is a named set of parameters, not code, like TensorCoreModel
// (emu/dot/tensor_core.hpp), whose rules it shares. fused_dot_block_scaled() computes
//   D = C + sum_i a_i * b_i * sa[i / block] * sb[i / block]
// the way MMA-Sim (Xie et al. 2025, github microsoft/MMA-Sim) models the hardware:
// - k is cut into steps of `products_per_step` (the instruction's k: 32 or 64); each step
//   is one fused dot-add whose result (fp32) is the next step's C;
// - group == 0 (kind::mxf8f6f4): every product a_i*b_i*2^(ea_s + eb_s) is one term, exact,
//   its alignment exponent that of the two inputs (subnormals at their format's emin) plus
//   the two scale exponents [MMA-Sim simulator/arithmetic.py fused_dot_add];
// - group > 0 (kind::mxf4, kind::mxf4nvf4): the products of each run of `group` elements
//   are summed exactly first; the group's term is that sum times both scales, and its
//   alignment exponent is the sum of the two scales' exponents only, whatever the group
//   sum's magnitude [MMA-Sim arithmetic.py nv_fused_dot_add_with_block_scale];
// - C and the terms are aligned to the largest alignment exponent E among them, where a zero
//   term (zero C, zero product, all-zero group, zero scale) counts with the model's
//   zero_exponent (MMA-Sim's e_zero) and a group whose products cancel keeps its scales'
//   exponent sum; each term is truncated toward zero to F fraction bits below E, the terms
//   summed exactly, and the sum rounded once into fp32 toward zero; overflow gives +-inf, a
//   zero result +0;
// - NaN: a NaN C, a NaN input, inf*0, +inf with -inf, or a NaN scale among the step's
//   blocks (also one whose products are zero) gives the canonical NaN (0x7fc00000; MMA-Sim
//   writes 0x7fffffff, the payload is not modelled); otherwise an infinite C or product
//   gives inf of its sign.
// Preconditions (std::invalid_argument otherwise): k >= 0 a multiple of `block`; a and b
// hold values of formats the model accepts (block_scaled_accepts); one scale byte per block.
//
// STATUS: UNMEASURED. No preset is validated on hardware (no Blackwell GPU was probed);
// every parameter is MMA-Sim's, and the choices MMA-Sim leaves open are [assumption]s
// named in emu/dot/tensor_core_block_scaled.cpp and each preset's `note`.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <string_view>

#include "emu/dot/tensor_core.hpp"
#include "formats/format.hpp"

namespace fb {

// ue4m3, the NVFP4 scale: e4m3 (OCP E4M3FN) with the sign bit ignored, as MMA-Sim reads it
// (isa/common.py maps "ue4m3" to torch.float8_e4m3fn; arithmetic.py
// nv_fused_dot_add_with_block_scale takes abs() of the scales). Unsigned 7-bit layout in a
// byte, so decode() ignores bit 7; 0x7f (and so 0xff) is NaN; 0x00 and 0x80 are zero;
// subnormals 2^-9 .. 7*2^-9. This is the one place the project defines it.
inline constexpr Format kUe4m3Scale{"ue4m3", 4, 3, 7, SpecialEncoding::fn, false, 8, false};

inline constexpr int kZeroTermsIgnored = std::numeric_limits<int>::min() / 4;

struct BlockScaledModel {
  std::string_view name;           // "sm100" (tcgen05.mma), "sm120" (mma.sync block_scale)
  std::string_view kind;           // "mxf8f6f4", "mxf4", "mxf4nvf4"
  std::span<const Format> inputs;  // formats a and b may each have (mixed pairs allowed)
  Format scale;                    // formats::e8m0 or kUe4m3Scale
  int block;                       // elements of k per scale byte (32 or 16)
  int products_per_step;           // the instruction's k: one fused step
  int group;                       // 0: products are terms; > 0: products summed in groups first
  int fraction_bits;               // F
  // Alignment exponent of a zero term (zero C, zero product, all-zero group, zero scale):
  // it takes part in the largest exponent with this value (MMA-Sim's e_zero), or not at all
  // when kZeroTermsIgnored.
  int zero_exponent;
  DotOutput output;            // fp32_rz for every block-scaled kind
  bool hardware_validated;     // false for every preset (see STATUS)
  std::string_view source;     // where the parameters come from
  std::string_view note = {};  // what is assumed rather than published
};

// The scale format's name as PTX spells it: ue8m0 for formats::e8m0 (the format table's
// e8m0 is already unsigned), ue4m3 for kUe4m3Scale.
inline std::string_view block_scale_format_name(const Format& scale) {
  return scale == formats::e8m0 ? std::string_view("ue8m0") : std::string_view(scale.name);
}

// All presets: sm100 and sm120, kinds mxf8f6f4 (ue8m0, block 32), mxf4 (ue8m0, block 32) and
// mxf4nvf4 (ue8m0 block 32 or 16, ue4m3 block 16; sm120 also ue4m3 block 32).
std::span<const BlockScaledModel> block_scaled_models();
// The preset for (name, kind, scale format, block), or nullptr.
const BlockScaledModel* find_block_scaled_model(std::string_view name, std::string_view kind, const Format& scale,
                                                int block);
// Whether `input` is among the model's input formats.
bool block_scaled_accepts(const BlockScaledModel& model, const Format& input);

// a[i] holds the exact value of an element of a_format (b likewise), c an fp32 value;
// scale_a/scale_b hold k / block raw scale bytes (model.scale's encoding). Returns D.
float fused_dot_block_scaled(const BlockScaledModel& model, const Format& a_format, const Format& b_format, float c,
                             const float* a, const float* b, int k, const std::uint8_t* scale_a,
                             const std::uint8_t* scale_b);

// Bit-level entry point (for `flashbits dot` and probe checkers): inputs as raw bit patterns
// of their formats, C and D as fp32 bits; k = a_bits.size() (b_bits must match).
std::uint32_t fused_dot_block_scaled_bits(const BlockScaledModel& model, const Format& a_format, const Format& b_format,
                                          std::uint32_t c_bits, std::span<const std::uint32_t> a_bits,
                                          std::span<const std::uint32_t> b_bits, std::span<const std::uint8_t> scale_a,
                                          std::span<const std::uint8_t> scale_b);

}  // namespace fb
