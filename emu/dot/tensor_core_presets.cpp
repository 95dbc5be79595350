// emu/dot/tensor_core_presets.cpp: the table of named tensor-core presets (emu/dot/tensor_core.hpp,
// docs/DESIGN.md §4) and the look-ups over it.
//
// Contract: each row is one hardware instruction form's parameters for one input format,
// with where they come from (`source`), what is assumed or measured (`note`) and whether
// this project reproduced the hardware bit for bit (`hardware_validated`). Rows are data
// only; emu/dot/tensor_core.cpp runs them. Names are unique per (name, input format).
#include <algorithm>
#include <iterator>

#include "emu/dot/tensor_core.hpp"

namespace fb {
namespace {

constexpr std::string_view kFasi =
    "Fasi, Higham, Mikaitis, Pranesh 2021 (PeerJ CS 7:e330); Khattak & Mikaitis 2025; Xie et al. 2025 (MMA-Sim)";
constexpr std::string_view kKhattak =
    "Khattak & Mikaitis 2025 (arXiv:2512.07004); Xie et al. 2025 (MMA-Sim, arXiv:2511.10909)";
constexpr std::string_view kFp8 = "Xie et al. 2025 (MMA-Sim); Khattak & Mikaitis 2025: fp8 F=13, e8m13 output";

// Notes (string literals, so that they concatenate): what is measured, what is assumed.
#define FB_MEASURED "measured on NVIDIA H200, driver 580.159.04, 2026-11-26 (bit for bit, >= 10^6 probe cases)"
#define FB_UNMEASURED_RULES \
  "overflow gives inf and a result rounded to zero is +0 (follows Xie et al. 2025; measured on sm_90 only)"
#define FB_F16ACC \
  "assumed: alignment as the fp32-accumulate form of the same target, output RNE to fp16 (Fasi et al. 2021)"

using enum DotOutput;
constexpr ZeroTermPolicy kZ = ZeroTermPolicy::ignored;

// Blackwell (Xie et al. 2025's MMA-Sim): one fused step over the instruction's k, F = 25 for
// every non-block-scaled kind (fp8 included: Hopper's and Ada's 13-bit fp8 path is not used),
// fp32 output truncated (RZ), fp16 output RNE.
constexpr std::string_view kMmaSimSm100 =
    "Xie et al. 2025 (MMA-Sim, arXiv:2511.10909), github microsoft/MMA-Sim @c78513835c8b "
    "mmasim/simulator/nv_ptx.py (tcgen05mma: F=25; only the block-scaled k=64 kinds differ), "
    "mmasim/isa/nv_ptx/nv_tcgen05mma.py (k per kind), mmasim/simulator/arithmetic.py (nv_fused_dot_add: "
    "truncation to F, fp32 RZ / fp16 RNE output)";
constexpr std::string_view kMmaSimSm120 =
    "Xie et al. 2025 (MMA-Sim, arXiv:2511.10909), github microsoft/MMA-Sim @c78513835c8b "
    "mmasim/simulator/nv_ptx.py (mma, arch_accum_fractional_bits \"RTX Blackwell\": 25, no split-k, no 13-bit fp8 "
    "path), mmasim/isa/nv_ptx/nv_mma.py (RTX Blackwell mma.sync shapes), mmasim/simulator/arithmetic.py "
    "(nv_fused_dot_add)";
#define FB_BLACKWELL "UNMEASURED: no Blackwell GPU probed by this project; "
#define FB_FP6_FP4                                                                                   \
  "ASSUMED beyond MMA-Sim, whose kind::f8f6f4 takes only e4m3/e5m2 (e3m2, e2m3, e2m1 are a TODO in " \
  "its isa): the e4m3/e5m2 path (F=25, 32 per step), the input's subnormals aligned at its own emin; "

// name, input, products per step, F, truncate, output, zero terms, validated, source, note
constexpr TensorCoreModel kModels[] = {
    {"sm70", formats::fp16, 4, 23, true, fp32_rz, kZ, false, kFasi, FB_UNMEASURED_RULES},
    {"sm70-f16acc", formats::fp16, 4, 23, true, fp16_rne, kZ, false, kFasi, FB_F16ACC "; " FB_UNMEASURED_RULES},
    {"sm80", formats::bf16, 8, 24, true, fp32_rz, kZ, false, kFasi, FB_UNMEASURED_RULES},
    {"sm80", formats::fp16, 8, 24, true, fp32_rz, kZ, false, kFasi, FB_UNMEASURED_RULES},
    {"sm80", formats::tf32, 4, 24, true, fp32_rz, kZ, false, kFasi,
     "F=24 assumed equal to the fp16/bf16 path; m16n8k8 as two steps of 4 (Xie et al. 2025); " FB_UNMEASURED_RULES},
    {"sm80-f16acc", formats::fp16, 8, 24, true, fp16_rne, kZ, false, kFasi, FB_F16ACC "; " FB_UNMEASURED_RULES},
    {"sm89", formats::bf16, 8, 24, true, fp32_rz, kZ, false, kKhattak, FB_UNMEASURED_RULES},
    {"sm89", formats::fp16, 8, 24, true, fp32_rz, kZ, false, kKhattak, FB_UNMEASURED_RULES},
    {"sm89", formats::tf32, 4, 24, true, fp32_rz, kZ, false, kKhattak, "as sm80 tf32 (assumed); " FB_UNMEASURED_RULES},
    {"sm89", formats::e4m3, 16, 13, true, fp32_e8m13, kZ, false, kFp8,
     "16 products per step assumed; " FB_UNMEASURED_RULES},
    {"sm89", formats::e5m2, 16, 13, true, fp32_e8m13, kZ, false, kFp8,
     "16 products per step assumed; " FB_UNMEASURED_RULES},
    {"sm89-f16acc", formats::fp16, 8, 24, true, fp16_rne, kZ, false, kKhattak, FB_F16ACC "; " FB_UNMEASURED_RULES},
    {"sm90-mma", formats::bf16, 16, 25, true, fp32_rz, kZ, true, kKhattak,
     "m16n8k16: 16 products per step, F=25, RZ, overflow to inf: " FB_MEASURED},
    {"sm90-mma", formats::fp16, 16, 25, true, fp32_rz, kZ, true, kKhattak,
     "m16n8k16: 16 products per step, F=25, RZ: " FB_MEASURED},
    {"sm90-mma", formats::tf32, 8, 25, true, fp32_rz, kZ, true, kKhattak,
     "m16n8k8 fuses all 8 products in one step (not Ampere's two steps of 4), F=25, the register's low 13 bits "
     "ignored, overflow to inf: " FB_MEASURED},
    {"sm90-mma-f16acc", formats::fp16, 16, 25, true, fp16_rne, kZ, true, kKhattak,
     "alignment as the fp32-accumulate form (F=25), output RNE to fp16, a result rounded to zero is +0: " FB_MEASURED},
    {"sm90-wgmma", formats::bf16, 16, 25, true, fp32_rz, kZ, true, kKhattak,
     "m64n8k16: 16 products per step, F=25, RZ, overflow to inf: " FB_MEASURED},
    {"sm90-wgmma", formats::fp16, 16, 25, true, fp32_rz, kZ, true, kKhattak,
     "m64n8k16: 16 products per step, F=25, RZ: " FB_MEASURED},
    {"sm90-wgmma", formats::tf32, 8, 25, true, fp32_rz, kZ, false, kKhattak,
     "as sm90-mma tf32 (8 products per step, F=25; measured there, not for wgmma); " FB_UNMEASURED_RULES},
    {"sm90-wgmma", formats::e4m3, 32, 13, true, fp32_e8m13, kZ, true, kFp8,
     "m64n8k32: 32 products per step, F=13, e8m13: " FB_MEASURED},
    {"sm90-wgmma", formats::e5m2, 32, 13, true, fp32_e8m13, kZ, true, kFp8,
     "m64n8k32: 32 products per step, F=13, e8m13: " FB_MEASURED},
    {"sm90-wgmma-f16acc", formats::fp16, 16, 25, true, fp16_rne, kZ, false, kKhattak,
     "assumed as sm90-mma-f16acc (measured there): alignment as the fp32-accumulate form, output RNE to fp16; no "
     "wgmma f16-accumulate form was probed; " FB_UNMEASURED_RULES},
    {"sm100", formats::bf16, 16, 25, true, fp32_rz, kZ, false, kMmaSimSm100,
     FB_BLACKWELL "tcgen05.mma kind::f16 (k=16): 16 products per step, F=25, RZ; " FB_UNMEASURED_RULES},
    {"sm100", formats::fp16, 16, 25, true, fp32_rz, kZ, false, kMmaSimSm100,
     FB_BLACKWELL "tcgen05.mma kind::f16 (k=16): 16 products per step, F=25, RZ; " FB_UNMEASURED_RULES},
    {"sm100", formats::tf32, 8, 25, true, fp32_rz, kZ, false, kMmaSimSm100,
     FB_BLACKWELL
     "tcgen05.mma kind::tf32 (k=8): 8 products per step, F=25, register's low 13 bits ignored; " FB_UNMEASURED_RULES},
    {"sm100", formats::e4m3, 32, 25, true, fp32_rz, kZ, false, kMmaSimSm100,
     FB_BLACKWELL
     "tcgen05.mma kind::f8f6f4 (k=32): 32 products per step, F=25 (not Hopper's 13), fp32 RZ; " FB_UNMEASURED_RULES},
    {"sm100", formats::e5m2, 32, 25, true, fp32_rz, kZ, false, kMmaSimSm100,
     FB_BLACKWELL
     "tcgen05.mma kind::f8f6f4 (k=32): 32 products per step, F=25 (not Hopper's 13), fp32 RZ; " FB_UNMEASURED_RULES},
    {"sm100", formats::e3m2, 32, 25, true, fp32_rz, kZ, false, kMmaSimSm100,
     FB_BLACKWELL "tcgen05.mma kind::f8f6f4 (k=32); " FB_FP6_FP4 FB_UNMEASURED_RULES},
    {"sm100", formats::e2m3, 32, 25, true, fp32_rz, kZ, false, kMmaSimSm100,
     FB_BLACKWELL "tcgen05.mma kind::f8f6f4 (k=32); " FB_FP6_FP4 FB_UNMEASURED_RULES},
    {"sm100", formats::e2m1, 32, 25, true, fp32_rz, kZ, false, kMmaSimSm100,
     FB_BLACKWELL "tcgen05.mma kind::f8f6f4 (k=32); " FB_FP6_FP4 FB_UNMEASURED_RULES},
    {"sm100-f16acc", formats::fp16, 16, 25, true, fp16_rne, kZ, false, kMmaSimSm100,
     FB_BLACKWELL "tcgen05.mma kind::f16 with f16 D (k=16): F=25, output RNE to fp16; " FB_UNMEASURED_RULES},
    {"sm100-f16acc", formats::e4m3, 32, 25, true, fp16_rne, kZ, false, kMmaSimSm100,
     FB_BLACKWELL "tcgen05.mma kind::f8f6f4 with f16 D (k=32): F=25, output RNE to fp16; " FB_UNMEASURED_RULES},
    {"sm100-f16acc", formats::e5m2, 32, 25, true, fp16_rne, kZ, false, kMmaSimSm100,
     FB_BLACKWELL "tcgen05.mma kind::f8f6f4 with f16 D (k=32): F=25, output RNE to fp16; " FB_UNMEASURED_RULES},
    {"sm120", formats::bf16, 16, 25, true, fp32_rz, kZ, false, kMmaSimSm120,
     FB_BLACKWELL "mma.sync m16n8k16: 16 products per step, F=25, RZ; " FB_UNMEASURED_RULES},
    {"sm120", formats::fp16, 16, 25, true, fp32_rz, kZ, false, kMmaSimSm120,
     FB_BLACKWELL "mma.sync m16n8k16: 16 products per step, F=25, RZ; " FB_UNMEASURED_RULES},
    {"sm120", formats::tf32, 8, 25, true, fp32_rz, kZ, false, kMmaSimSm120,
     FB_BLACKWELL "mma.sync m16n8k8 as one step of 8 (not Ampere's two of 4), F=25, register's low 13 bits "
                  "ignored; " FB_UNMEASURED_RULES},
    {"sm120", formats::e4m3, 32, 25, true, fp32_rz, kZ, false, kMmaSimSm120,
     FB_BLACKWELL
     "mma.sync m16n8k32 (and kind::f8f6f4): 32 products per step, F=25 (not Ada's 13), fp32 RZ; " FB_UNMEASURED_RULES},
    {"sm120", formats::e5m2, 32, 25, true, fp32_rz, kZ, false, kMmaSimSm120,
     FB_BLACKWELL
     "mma.sync m16n8k32 (and kind::f8f6f4): 32 products per step, F=25 (not Ada's 13), fp32 RZ; " FB_UNMEASURED_RULES},
    {"sm120", formats::e3m2, 32, 25, true, fp32_rz, kZ, false, kMmaSimSm120,
     FB_BLACKWELL "mma.sync m16n8k32 kind::f8f6f4; " FB_FP6_FP4 FB_UNMEASURED_RULES},
    {"sm120", formats::e2m3, 32, 25, true, fp32_rz, kZ, false, kMmaSimSm120,
     FB_BLACKWELL "mma.sync m16n8k32 kind::f8f6f4; " FB_FP6_FP4 FB_UNMEASURED_RULES},
    {"sm120", formats::e2m1, 32, 25, true, fp32_rz, kZ, false, kMmaSimSm120,
     FB_BLACKWELL "mma.sync m16n8k32 kind::f8f6f4; " FB_FP6_FP4 FB_UNMEASURED_RULES},
    {"sm120-f16acc", formats::fp16, 16, 25, true, fp16_rne, kZ, false, kMmaSimSm120,
     FB_BLACKWELL "mma.sync m16n8k16 f16 D and C: F=25, output RNE to fp16; " FB_UNMEASURED_RULES},
    {"sm120-f16acc", formats::e4m3, 32, 25, true, fp16_rne, kZ, false, kMmaSimSm120,
     FB_BLACKWELL "mma.sync m16n8k32 f16 D and C: F=25, output RNE to fp16; " FB_UNMEASURED_RULES},
    {"sm120-f16acc", formats::e5m2, 32, 25, true, fp16_rne, kZ, false, kMmaSimSm120,
     FB_BLACKWELL "mma.sync m16n8k32 f16 D and C: F=25, output RNE to fp16; " FB_UNMEASURED_RULES},
    {"exact-rne", formats::bf16, 0, 0, false, exact_rne, kZ, false, "reference: exact sum, one RNE rounding", {}},
    {"exact-rne", formats::fp16, 0, 0, false, exact_rne, kZ, false, "reference: exact sum, one RNE rounding", {}},
    {"exact-rne", formats::tf32, 0, 0, false, exact_rne, kZ, false, "reference: exact sum, one RNE rounding", {}},
    {"exact-rne", formats::e4m3, 0, 0, false, exact_rne, kZ, false, "reference: exact sum, one RNE rounding", {}},
    {"exact-rne", formats::e5m2, 0, 0, false, exact_rne, kZ, false, "reference: exact sum, one RNE rounding", {}},
    {"exact-rne", formats::e3m2, 0, 0, false, exact_rne, kZ, false, "reference: exact sum, one RNE rounding", {}},
    {"exact-rne", formats::e2m3, 0, 0, false, exact_rne, kZ, false, "reference: exact sum, one RNE rounding", {}},
    {"exact-rne", formats::e2m1, 0, 0, false, exact_rne, kZ, false, "reference: exact sum, one RNE rounding", {}},
};
#undef FB_MEASURED
#undef FB_UNMEASURED_RULES
#undef FB_F16ACC
#undef FB_BLACKWELL
#undef FB_FP6_FP4

}  // namespace

std::span<const TensorCoreModel> tensor_core_models() { return kModels; }

const TensorCoreModel* find_tensor_core_model(std::string_view name, const Format& input) {
  for (const TensorCoreModel& m : kModels) {
    if (m.name == name && input == m.input) return &m;
  }
  return nullptr;
}

bool is_tensor_core_model_name(std::string_view name) {
  return std::any_of(std::begin(kModels), std::end(kModels), [&](const auto& m) { return m.name == name; });
}

}  // namespace fb
