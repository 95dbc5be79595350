// emu/dot/tensor_core_amd.cpp: the AMD MFMA dot-add arithmetics (see the header) and their
// preset table.
//
// The facts, from MMA-Sim (Xie et al. 2025, arXiv:2511.10909). Versions read, oldest first:
// (1) github microsoft/MMA-Sim HEAD c785138 mmasim/simulator/amd.py + mmasim/simulator/
//     arithmetic.py (and the older mmasim/simulator/functions.py it replaced);
// (2) microsoft/MMA-Sim 7969d39/735c9b mmasim/mmasim/amd/sim.py + mmasim/mmasim/arithmetic/
//     fdpa.py, ftz_mul_add.py, fma.py;
// (3) github peichenxie/MMA-Sim (the first author's repository) 0a5ce40
//     src/mmasim/mmasim/arithmetic/fdpa.py, 4da32eb ftz_mul_add.py, 0a5ce40 fma.py.
// This file follows the newest, (3) with the per-instruction choices of (2)'s amd/sim.py:
// - Which arithmetic (amd/sim.py MFMA.__init__): f32 (not xf32) -> MMA_FMA; fp8/bf8
//   (e4m3fnuz/e5m2fnuz) -> MMA_GTR_FDPA(F=24, F2=31, rho="RNE-FP32", L_max=16); CDNA1 bf16/fp16
//   -> MMA_E_FDPA(L_max = 4 for fp16, 2 for bf16); CDNA2 bf16/fp16 -> MMA_FTZ_MUL_ADD(P = 2 for
//   bf16 without _1k, else 4); CDNA3 xf32/fp16/bf16 -> MMA_TR_FDPA(F=24, F2=31, "RNE-FP32",
//   L_max = 4 for xf32, else 8). A step has L = min(K, L_max) products, so the CDNA3 k=4
//   instructions (4x4x4_16b, 16x16x4_4b, 32x32x4_2b; isa/amd.py) fuse 4 (preset "cdna3-k4").
// - MMA_FMA (fma.py): c = fma(a_i, b_i, c) for i in order, IEEE fp32.
// - MMA_E_FDPA (fdpa.py e_fdpa): C and the step's products summed exactly (exact_sum of
//   two_sum parts), normalize_parts_to_fp32 rounds that exact sum to nearest even in fp32
//   (ties broken by the next part's sign: a correctly rounded RNE). (2)'s e_fdpa does the same
//   with an integer sum and a sticky bit. NaN/inf: the fp64 sum of the terms decides.
// - MMA_FTZ_MUL_ADD (ftz_mul_add.py): inputs with |x| < 2^emin (subnormals and both zeros)
//   become +0; products x*y in fp32 (RNE), |p| < 2^-126 flushed keeping the sign (p*0.0);
//   C with |C| < 2^-126 becomes +0; per P products: s = p0+p1 (P = 4: s = s + (p2+p3)),
//   c = c + s, every addition fp32 RNE and flushed keeping the sign.
// - MMA_TR_FDPA (fdpa.py tr_fdpa): products s = sa*sb, e = ea+eb (subnormals at their format's
//   emin, frexp_and_normalize); |product| >= 2^128 becomes inf; zero products get e = -999
//   (out of the maximum); truncated_fused_sum(F): each product truncated toward zero at
//   2^(e_dot - F), summed; C (fp32, zero and subnormals at e = -126) joins with
//   E = max(e_dot, e_c): the product sum floored at 2^(E - F2 - 1), C floored at 2^(E - F);
//   the total renormalised (subnormal below -126), floored to F2 fraction bits, and converted
//   to fp32 (torch's fp64 -> fp32: RNE, overflow to inf).
// - MMA_GTR_FDPA (fdpa.py gtr_fdpa): the same with the products' sum formed as two
//   truncated_fused_sums over the even and the odd indices, each floored at 2^(e_dot - F),
//   e_dot the larger of their exponents; C is zeroed when e_c < E - F - 1.
// Where the versions differ (this model follows (3)):
// - CDNA1 fp16/bf16: (1) chains pairwise fp32 fmaf adds (group 4 / 2) with RNE at every
//   addition; (2) and (3) one exact sum per step (MMA_E_FDPA).
// - CDNA2: (1) products fmaf(a, b, 0.0) (a -0 product becomes +0); (3) a*b (keeps -0).
// - CDNA3 fused kinds: (1) amd_fused_dot_rd_add floors the product sum at 2^(E - 31) (not
//   E - 32), has no final floor to F2 bits, counts zero products at e = -126; (2) 735c9b
//   tr_fdpa counts zeros at -126 ("TODO: handle zero") and returns with the pre-normalisation
//   exponent; (3) is the one with the renormalise-then-floor-to-F2 stage and zeros at -999.
// Choices MMA-Sim leaves open, and what this model does ([assumption]s):
// - NaN is the canonical 0x7fc00000 (MMA-Sim: 0x7fffffff or the host's NaN payload).
// - Exact-zero sums in the fused kinds give +0 (MMA-Sim's sign follows PyTorch's
//   signed-zero arithmetic on its intermediate doubles; the hardware was not measured here).
// - A last step with fewer products than L (MMA-Sim requires K to be a multiple): it fuses
//   what is left; in ftz_pairwise an odd product is added alone (one product: s = p0; three
//   with P = 4: s = (p0+p1) + p2).
// - CDNA1's overflow: MMA-Sim tests the fp64 sum of the terms for inf before rounding; here
//   the exact sum's RNE rounding decides (they differ only within 2^-53 of the threshold).
#include "emu/dot/tensor_core_amd.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "emu/ops.hpp"
#include "emu/rounding.hpp"
#include "emu/summation.hpp"
#include "emu/dot/tensor_core.hpp"
#include "formats/power_of_two.hpp"

namespace fb {
namespace {

#define FB_AMD_UNMEASURED "UNMEASURED: no AMD GPU probed by this project; "
#define FB_AMD_NAN "NaN canonical 0x7fc00000 (payload not modelled); "
#define FB_AMD_FUSED_ZERO "an exact-zero sum gives +0 (assumed); "
#define FB_AMD_PARTIAL "a last step shorter than L fuses what is left (assumed); "

constexpr std::string_view kFmaSource =
    "Xie et al. 2025 (MMA-Sim, arXiv:2511.10909): github microsoft/MMA-Sim @7969d39 mmasim/mmasim/amd/sim.py (f32 -> "
    "MMA_FMA), "
    "github peichenxie/MMA-Sim @0a5ce40 src/mmasim/mmasim/arithmetic/fma.py (MMA_FMA)";
constexpr std::string_view kExactSource =
    "Xie et al. 2025 (MMA-Sim): github microsoft/MMA-Sim @7969d39 mmasim/mmasim/amd/sim.py (CDNA1 -> MMA_E_FDPA, L_max "
    "4 fp16, "
    "2 bf16), github peichenxie/MMA-Sim @0a5ce40 src/mmasim/mmasim/arithmetic/fdpa.py (e_fdpa, "
    "normalize_parts_to_fp32)";
constexpr std::string_view kFtzSource =
    "Xie et al. 2025 (MMA-Sim): github microsoft/MMA-Sim @7969d39 mmasim/mmasim/amd/sim.py (CDNA2 -> MMA_FTZ_MUL_ADD, "
    "P 2 for "
    "bf16 "
    "without _1k, else 4), github peichenxie/MMA-Sim @4da32eb src/mmasim/mmasim/arithmetic/ftz_mul_add.py";
constexpr std::string_view kTrSource =
    "Xie et al. 2025 (MMA-Sim): github microsoft/MMA-Sim @7969d39 mmasim/mmasim/amd/sim.py (CDNA3 -> MMA_TR_FDPA F=24 "
    "F2=31 "
    "RNE-FP32, L_max 4 xf32, else 8), mmasim/isa/amd.py; github peichenxie/MMA-Sim @0a5ce40 "
    "src/mmasim/mmasim/arithmetic/fdpa.py "
    "(tr_fdpa)";
constexpr std::string_view kGtrSource =
    "Xie et al. 2025 (MMA-Sim): github microsoft/MMA-Sim @7969d39 mmasim/mmasim/amd/sim.py (fp8/bf8 -> MMA_GTR_FDPA "
    "F=24 F2=31 "
    "RNE-FP32 L_max=16), mmasim/isa/amd.py; github peichenxie/MMA-Sim @0a5ce40 src/mmasim/mmasim/arithmetic/fdpa.py "
    "(gtr_fdpa)";
#define FB_AMD_FMA "one IEEE fp32 fma (RNE, subnormals kept) per product, in k order; " FB_AMD_NAN
#define FB_AMD_EXACT                                                                                            \
  "per step of L products: C + products summed exactly, one RNE rounding to fp32 (subnormals kept, overflow "   \
  "to inf); older MMA-Sim (simulator/amd.py) chained pairwise fp32 adds instead; " FB_AMD_NAN FB_AMD_FUSED_ZERO \
      FB_AMD_PARTIAL
#define FB_AMD_FTZ                                                                                              \
  "subnormal (and -0) inputs and C read as +0; products and pairwise sums fp32 RNE, subnormal results flushed " \
  "keeping their sign; " FB_AMD_NAN "an odd last product is added alone (assumed); "
#define FB_AMD_TR                                                                                                  \
  "products truncated (RZ) to F=24 bits at their largest exponent and summed; product sum floored to 32 bits and " \
  "C to 24 bits at max(product, C) exponent; total normalised, floored to F2=31 bits, RNE to fp32; zero products " \
  "out of the maximum, |product| >= 2^128 is inf; " FB_AMD_NAN FB_AMD_FUSED_ZERO FB_AMD_PARTIAL
#define FB_AMD_GTR                                                                                                   \
  "even- and odd-indexed products as two truncated (RZ, F=24) sums, each floored to 24 bits at their larger "        \
  "exponent; then as two_stage (sum floored to 32 bits, C to 24 bits, C dropped below E-25, normalised, floored to " \
  "31 bits, RNE to fp32); " FB_AMD_NAN FB_AMD_FUSED_ZERO FB_AMD_PARTIAL

using enum AmdArithmetic;
constexpr Format kFp32 = formats::fp32;
constexpr Format kFp16 = formats::fp16;
constexpr Format kBf16 = formats::bf16;
constexpr Format kXf32 = formats::tf32;
constexpr Format kFp8 = formats::e4m3fnuz;
constexpr Format kBf8 = formats::e5m2fnuz;

// name, a, b, arithmetic, L, F, F2, validated, instructions, source, note
constexpr AmdDotModel kAmdModels[] = {
    {"cdna1", kFp32, kFp32, fma_chain, 1, 0, 0, false, "v_mfma_f32_{32x32x2,32x32x1,16x16x4,16x16x1,4x4x1}f32",
     kFmaSource, FB_AMD_UNMEASURED "MI100 fp32 MFMA: " FB_AMD_FMA},
    {"cdna1", kFp16, kFp16, exact_step, 4, 0, 0, false, "v_mfma_f32_{32x32x8,32x32x4,16x16x16,16x16x4,4x4x4}f16",
     kExactSource, FB_AMD_UNMEASURED "MI100 fp16 MFMA, L=4: " FB_AMD_EXACT},
    {"cdna1", kBf16, kBf16, exact_step, 2, 0, 0, false, "v_mfma_f32_{32x32x4,32x32x2,16x16x8,16x16x2,4x4x2}bf16",
     kExactSource, FB_AMD_UNMEASURED "MI100 bf16 MFMA, L=2: " FB_AMD_EXACT},
    {"cdna2", kFp32, kFp32, fma_chain, 1, 0, 0, false, "v_mfma_f32_{32x32x2,32x32x1,16x16x4,16x16x1,4x4x1}f32",
     kFmaSource, FB_AMD_UNMEASURED "MI200 fp32 MFMA: " FB_AMD_FMA},
    {"cdna2", kFp16, kFp16, ftz_pairwise, 4, 0, 0, false, "v_mfma_f32_{32x32x8,32x32x4,16x16x16,16x16x4,4x4x4}f16",
     kFtzSource, FB_AMD_UNMEASURED "MI200 fp16 MFMA, P=4: " FB_AMD_FTZ},
    {"cdna2", kBf16, kBf16, ftz_pairwise, 2, 0, 0, false,
     "v_mfma_f32_{32x32x4,32x32x2,16x16x8,16x16x2,4x4x2}bf16 (the CDNA1 encodings)", kFtzSource,
     FB_AMD_UNMEASURED "MI200 bf16 MFMA without _1k, P=2: " FB_AMD_FTZ},
    {"cdna2-1k", kBf16, kBf16, ftz_pairwise, 4, 0, 0, false,
     "v_mfma_f32_{32x32x8,32x32x4,16x16x16,16x16x4,4x4x4}bf16_1k", kFtzSource,
     FB_AMD_UNMEASURED "MI200 bf16_1k MFMA, P=4: " FB_AMD_FTZ},
    {"cdna3", kFp32, kFp32, fma_chain, 1, 0, 0, false,
     "v_mfma_f32_{32x32x2,16x16x4}_f32, v_mfma_f32_{32x32x1_2b,16x16x1_4b,4x4x1_16b}_f32", kFmaSource,
     FB_AMD_UNMEASURED "MI300 fp32 MFMA: " FB_AMD_FMA},
    {"cdna3", kXf32, kXf32, two_stage, 4, 24, 31, false, "v_mfma_f32_{16x16x8,32x32x4}_xf32", kTrSource,
     FB_AMD_UNMEASURED "MI300 xf32 MFMA, L=4, fp32 registers truncated to tf32 (low 13 bits ignored): " FB_AMD_TR},
    {"cdna3", kFp16, kFp16, two_stage, 8, 24, 31, false, "v_mfma_f32_{32x32x8,16x16x16}_f16", kTrSource,
     FB_AMD_UNMEASURED "MI300 fp16 MFMA with k >= 8, L=8: " FB_AMD_TR},
    {"cdna3", kBf16, kBf16, two_stage, 8, 24, 31, false, "v_mfma_f32_{32x32x8,16x16x16}_bf16", kTrSource,
     FB_AMD_UNMEASURED "MI300 bf16 MFMA with k >= 8, L=8: " FB_AMD_TR},
    {"cdna3-k4", kFp16, kFp16, two_stage, 4, 24, 31, false, "v_mfma_f32_{32x32x4_2b,16x16x4_4b,4x4x4_16b}_f16",
     kTrSource, FB_AMD_UNMEASURED "MI300 fp16 MFMA with k = 4, L = min(K, 8) = 4: " FB_AMD_TR},
    {"cdna3-k4", kBf16, kBf16, two_stage, 4, 24, 31, false, "v_mfma_f32_{32x32x4_2b,16x16x4_4b,4x4x4_16b}_bf16",
     kTrSource, FB_AMD_UNMEASURED "MI300 bf16 MFMA with k = 4, L = min(K, 8) = 4: " FB_AMD_TR},
    {"cdna3", kFp8, kFp8, grouped_two_stage, 16, 24, 31, false, "v_mfma_f32_{16x16x32,32x32x16}_fp8_fp8", kGtrSource,
     FB_AMD_UNMEASURED "MI300 fp8 (e4m3fnuz) MFMA, L=16: " FB_AMD_GTR},
    {"cdna3", kBf8, kBf8, grouped_two_stage, 16, 24, 31, false, "v_mfma_f32_{16x16x32,32x32x16}_bf8_bf8", kGtrSource,
     FB_AMD_UNMEASURED "MI300 bf8 (e5m2fnuz) MFMA, L=16: " FB_AMD_GTR},
    {"cdna3", kFp8, kBf8, grouped_two_stage, 16, 24, 31, false, "v_mfma_f32_{16x16x32,32x32x16}_fp8_bf8", kGtrSource,
     FB_AMD_UNMEASURED "MI300 fp8 x bf8 MFMA, L=16: " FB_AMD_GTR},
    {"cdna3", kBf8, kFp8, grouped_two_stage, 16, 24, 31, false, "v_mfma_f32_{16x16x32,32x32x16}_bf8_fp8", kGtrSource,
     FB_AMD_UNMEASURED "MI300 bf8 x fp8 MFMA, L=16: " FB_AMD_GTR},
};
#undef FB_AMD_UNMEASURED
#undef FB_AMD_NAN
#undef FB_AMD_FUSED_ZERO
#undef FB_AMD_PARTIAL
#undef FB_AMD_FMA
#undef FB_AMD_EXACT
#undef FB_AMD_FTZ
#undef FB_AMD_TR
#undef FB_AMD_GTR

constexpr RoundingSpec kRne{};  // rne, ieee overflow
constexpr std::uint32_t kCanonicalNan = 0x7fc00000u;
constexpr std::uint32_t kSign = 0x80000000u;

std::uint32_t bits_of(float x) { return std::bit_cast<std::uint32_t>(x); }
float value_of(std::uint32_t bits) { return std::bit_cast<float>(bits); }
std::uint32_t canonical(std::uint32_t bits) { return std::isnan(value_of(bits)) ? kCanonicalNan : bits; }

// A finite value split as (-1)^negative * significand * 2^lsb, with the exponent it brings to
// an alignment maximum: its leading bit's, or its format's emin for the format's subnormals.
struct Split {
  bool negative;
  std::uint64_t significand;  // 0 for zeros
  int lsb;
  int alignment;
};
Split split(float x, int format_emin) {
  const std::uint32_t u = bits_of(x);
  const auto field = static_cast<int>((u >> 23) & 0xffu);
  const int exponent = field != 0 ? field - 127 : -126;
  return {(u & kSign) != 0, (u & 0x7fffffu) | (field != 0 ? 0x800000u : 0u), exponent - 23,
          std::max(exponent, format_emin)};
}

// x * 2^shift rounded toward minus infinity (an arithmetic shift for negative shifts).
std::int64_t floor_scaled(std::int64_t x, int shift) {
  if (shift >= 0) return x * (std::int64_t{1} << shift);  // callers keep |x| * 2^shift below 2^62
  return shift <= -63 ? (x < 0 ? -1 : 0) : (x >> -shift);
}
// |x| * 2^shift truncated toward zero, with x's sign.
std::int64_t truncated_scaled(bool negative, std::uint64_t magnitude, int shift) {
  const std::uint64_t kept = shift >= 0 ? magnitude << shift : (shift <= -64 ? 0 : magnitude >> -shift);
  return negative ? -static_cast<std::int64_t>(kept) : static_cast<std::int64_t>(kept);
}

// The specials rule shared with the NVIDIA models (SpecialTerms); `overflowing_products`
// adds the two-stage kinds' rule that a finite product of magnitude >= 2^128 is infinite.
bool special_step(float c, const float* a, const float* b, int n, int a_emin, int b_emin, bool overflowing_products,
                  std::uint32_t* out) {
  SpecialTerms specials;
  specials.add_value(c);
  for (int i = 0; i < n; ++i) {
    specials.add_product(a[i], b[i]);
    if (overflowing_products && std::isfinite(a[i]) && std::isfinite(b[i])) {
      const Split x = split(a[i], a_emin), y = split(b[i], b_emin);
      const std::uint64_t magnitude = x.significand * y.significand;
      if (magnitude != 0 && static_cast<int>(std::bit_width(magnitude)) - 1 + x.lsb + y.lsb >= 128)
        specials.add_value(x.negative != y.negative ? -INFINITY : INFINITY);
    }
  }
  if (!specials.any()) return false;
  *out = specials.result(formats::fp32);
  return true;
}

std::uint32_t fma_step(float c, float a, float b) {
  return canonical(fb::fma(formats::fp32, bits_of(a), bits_of(b), bits_of(c), kRne).bits);
}

std::uint32_t exact_step_body(float c, const float* a, const float* b, int n, const AmdDotModel& m) {
  std::uint32_t special = 0;
  if (special_step(c, a, b, n, m.a_input.emin(), m.b_input.emin(), false, &special)) return special;
  ExactAccumulator sum;
  sum.add(c);
  for (int i = 0; i < n; ++i) sum.add_product(a[i], b[i]);
  if (sum.is_zero()) return 0u;  // [assumption] +0 also when every term is -0
  return sum.round(formats::fp32, kRne).bits;
}

// fp32 results below 2^-126 in magnitude become a zero of their sign (MMA-Sim: x * 0.0).
std::uint32_t flush_keep_sign(std::uint32_t bits) { return (bits & 0x7f800000u) == 0 ? bits & kSign : bits; }
// Inputs (and C) below their format's 2^emin in magnitude, zeros included, become +0.
std::uint32_t flush_to_plus_zero(float x, int format_emin) {
  return std::fabs(x) < std::ldexp(1.0f, format_emin) ? 0u : bits_of(x);
}

std::uint32_t ftz_step(float c, const float* a, const float* b, int n, const AmdDotModel& m) {
  std::uint32_t products[4] = {};
  for (int i = 0; i < n; ++i) {
    const std::uint32_t x = flush_to_plus_zero(a[i], m.a_input.emin()), y = flush_to_plus_zero(b[i], m.b_input.emin());
    products[i] = flush_keep_sign(mul(formats::fp32, x, y, kRne).bits);
  }
  auto add_flushed = [](std::uint32_t x, std::uint32_t y) {
    return flush_keep_sign(add(formats::fp32, x, y, kRne).bits);
  };
  std::uint32_t s = n >= 2 ? add_flushed(products[0], products[1]) : products[0];
  if (n == 3) s = add_flushed(s, products[2]);
  if (n == 4) s = add_flushed(s, add_flushed(products[2], products[3]));
  const std::uint32_t acc = flush_to_plus_zero(c, formats::fp32.emin());
  return canonical(n == 0 ? acc : add_flushed(acc, s));
}

// A finite non-zero input's alignment exponent: its exponent (an fp32 subnormal reads as
// -126), at least its format's emin.
int alignment_exponent(float x, int format_emin) {
  const auto field = static_cast<int>((bits_of(x) >> 23) & 0xffu);
  return std::max(field != 0 ? field - 127 : -126, format_emin);
}

// The one-group two-stage step in fp64 (the common case of two_stage_step: finite operands,
// products below 2^128). Every intermediate is an integer times a power of two held exactly:
// products of at most 11-bit significands, scalings by powers of two, trunc and floor of
// values below 2^53. The result is the integer path's (same truncations and floors, the same
// last rounding by round_pack). Returns false where the integer path must decide.
bool two_stage_step_fp64(float c, const float* a, const float* b, int n, const AmdDotModel& m, std::uint32_t* out) {
  constexpr int kNone = std::numeric_limits<int>::min() / 4;
  const int F = m.fraction_bits, F2 = m.sum_fraction_bits;
  const int a_emin = m.a_input.emin(), b_emin = m.b_input.emin();
  if (!std::isfinite(c)) return false;
  double product[64];
  int product_exponent = kNone;
  for (int i = 0; i < n; ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return false;
    product[i] = static_cast<double>(a[i]) * static_cast<double>(b[i]);  // exact
    if (product[i] == 0.0) continue;
    if (std::fabs(product[i]) >= 0x1p128) return false;
    product_exponent = std::max(product_exponent, alignment_exponent(a[i], a_emin) + alignment_exponent(b[i], b_emin));
  }
  double dot_units = 0.0;  // the truncated products' sum in units 2^(product_exponent - F)
  if (product_exponent != kNone) {
    const double scale = power_of_two(F - product_exponent);
    for (int i = 0; i < n; ++i) dot_units += std::trunc(product[i] * scale);
  }
  const int c_exponent = c == 0.0f ? -126 : alignment_exponent(c, -126);
  const int E = std::max(product_exponent, c_exponent);
  const int unit = E - F2 - 1;
  double total = product_exponent == kNone ? 0.0 : std::floor(dot_units * power_of_two(product_exponent - F - unit));
  total += std::floor(static_cast<double>(c) * power_of_two(F - E)) * power_of_two(F2 + 1 - F);
  if (total == 0.0) {
    *out = 0u;  // [assumption] an exact zero gives +0
    return true;
  }
  const int lead = static_cast<int>((std::bit_cast<std::uint64_t>(total) >> 52) & 0x7ffu) - 1023 + unit;
  const int grid = std::max(lead, formats::fp32.emin()) - F2;
  int exponent = unit;
  if (grid > unit) {
    total = std::floor(total * power_of_two(unit - grid));
    exponent = grid;
  }
  if (total == 0.0) {
    *out = 0u;
    return true;
  }
  // total is an integer of at most 32 significant bits (exact in fp64 and in uint64): the one
  // RNE rounding into fp32 is round_pack's, as the integer path's, not the host's conversion,
  // which would follow whatever rounding mode the calling thread has set.
  const bool negative = total < 0;
  const auto kept = static_cast<std::uint64_t>(std::fabs(total));
  *out = round_pack(formats::fp32, negative, exponent, kept, false, kRne).bits;
  return true;
}

// The two-stage (and grouped) fused step of CDNA3.
std::uint32_t two_stage_step(float c, const float* a, const float* b, int n, const AmdDotModel& m) {
  if (m.arithmetic == two_stage) {
    std::uint32_t fast = 0;
    if (two_stage_step_fp64(c, a, b, n, m, &fast)) return fast;
  }
  constexpr int kNone = std::numeric_limits<int>::min() / 4;
  const int F = m.fraction_bits, F2 = m.sum_fraction_bits;
  const int groups = m.arithmetic == grouped_two_stage ? 2 : 1;
  const int a_emin = m.a_input.emin(), b_emin = m.b_input.emin();

  // Stage 1: per group, products truncated toward zero at 2^(group exponent - F), summed.
  // The specials rule (NaN, inf, a product of magnitude >= 2^128) is only consulted when an
  // operand is not finite or a product reaches 2^128: the common case skips it.
  if (!std::isfinite(c)) {
    std::uint32_t special = 0;
    if (special_step(c, a, b, n, a_emin, b_emin, true, &special)) return special;
  }
  // Group exponents and sums in scalars (an array indexed by i % groups keeps them in memory,
  // a store-to-load chain per product).
  int exponent0 = kNone, exponent1 = kNone;
  Split products[64];
  for (int i = 0; i < n; ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) {
      std::uint32_t special = 0;
      if (special_step(c, a, b, n, a_emin, b_emin, true, &special)) return special;
    }
    const Split x = split(a[i], a_emin), y = split(b[i], b_emin);
    products[i] = {x.negative != y.negative, x.significand * y.significand, x.lsb + y.lsb, x.alignment + y.alignment};
    if (products[i].significand != 0) {
      if (static_cast<int>(std::bit_width(products[i].significand)) - 1 + products[i].lsb >= 128) {
        std::uint32_t special = 0;
        if (special_step(c, a, b, n, a_emin, b_emin, true, &special)) return special;
      }
      int& exponent = groups == 2 && (i & 1) != 0 ? exponent1 : exponent0;
      exponent = std::max(exponent, products[i].alignment);
    }
  }
  const int group_exponent[2] = {exponent0, exponent1};
  std::int64_t sum0 = 0, sum1 = 0;
  for (int i = 0; i < n; ++i) {
    const Split& p = products[i];
    if (p.significand == 0) continue;
    const bool odd = groups == 2 && (i & 1) != 0;
    (odd ? sum1 : sum0) += truncated_scaled(p.negative, p.significand, p.lsb - ((odd ? exponent1 : exponent0) - F));
  }
  const std::int64_t group_sum[2] = {sum0, sum1};
  // The products' sum in units 2^(dot_exponent - F); grouped: each group floored onto that grid.
  int dot_exponent = std::max(group_exponent[0], group_exponent[1]);
  std::int64_t dot_sum = group_sum[0];
  if (groups == 2 && dot_exponent != kNone) {
    dot_sum = 0;
    for (int g = 0; g < 2; ++g)
      if (group_exponent[g] != kNone) dot_sum += floor_scaled(group_sum[g], group_exponent[g] - dot_exponent);
  }

  // Stage 2: C joins at E = max(dot exponent, C's); units 2^(E - F2 - 1).
  const Split sc = split(c, formats::fp32.emin());  // a zero C aligns at -126
  const int E = std::max(dot_exponent, sc.alignment);
  const int unit = E - F2 - 1;
  std::int64_t total = dot_exponent == kNone ? 0 : floor_scaled(dot_sum, (dot_exponent - F) - unit);
  const auto c_signed =
      sc.negative ? -static_cast<std::int64_t>(sc.significand) : static_cast<std::int64_t>(sc.significand);
  const bool c_dropped = groups == 2 && sc.alignment < E - F - 1;
  if (!c_dropped) total += floor_scaled(c_signed, sc.lsb - (E - F)) * (std::int64_t{1} << (F2 + 1 - F));
  if (total == 0) return 0u;  // [assumption] an exact zero gives +0

  // Normalise, floor to F2 fraction bits (below 2^-126 on the fixed grid 2^(-126 - F2)),
  // then one RNE rounding into fp32.
  const std::uint64_t magnitude =
      total < 0 ? 0u - static_cast<std::uint64_t>(total) : static_cast<std::uint64_t>(total);
  const int lead = static_cast<int>(std::bit_width(magnitude)) - 1 + unit;
  const int grid = std::max(lead, formats::fp32.emin()) - F2;
  int exponent = unit;
  if (grid > unit) {
    total = floor_scaled(total, unit - grid);
    exponent = grid;
  }
  if (total == 0) return 0u;
  const bool negative = total < 0;
  const std::uint64_t kept = negative ? 0u - static_cast<std::uint64_t>(total) : static_cast<std::uint64_t>(total);
  return round_pack(formats::fp32, negative, exponent, kept, false, kRne).bits;
}

std::uint32_t run_step(const AmdDotModel& m, float c, const float* a, const float* b, int n) {
  switch (m.arithmetic) {
    case fma_chain:
      return n == 0 ? canonical(bits_of(c)) : fma_step(c, a[0], b[0]);
    case exact_step:
      return exact_step_body(c, a, b, n, m);
    case ftz_pairwise:
      return ftz_step(c, a, b, n, m);
    case two_stage:
    case grouped_two_stage:
      return two_stage_step(c, a, b, n, m);
  }
  return kCanonicalNan;
}

// tf32 (xf32) operands: the register's low 13 bits are ignored.
float as_input(const Format& f, float x) {
  return f == formats::tf32 && !std::isnan(x) ? value_of(bits_of(x) & ~0x1fffu) : x;
}

// The step buffers hold 64 products (4 for ftz_pairwise); every preset is within that.
void check_model(const AmdDotModel& m, int k) {
  const bool fits = m.arithmetic == ftz_pairwise ? (m.products_per_step == 2 || m.products_per_step == 4)
                    : m.arithmetic == fma_chain  ? m.products_per_step == 1
                                                 : m.products_per_step >= 1 && m.products_per_step <= 64;
  if (!fits || k < 0)
    throw std::invalid_argument("AMD MFMA dot: " + std::string(m.name) + " has an unsupported step (" +
                                std::to_string(m.products_per_step) + " products) or k < 0");
}

}  // namespace

std::string_view to_string(AmdArithmetic arithmetic) {
  switch (arithmetic) {
    case fma_chain:
      return "fma_chain";
    case exact_step:
      return "exact_step";
    case ftz_pairwise:
      return "ftz_pairwise";
    case two_stage:
      return "two_stage";
    case grouped_two_stage:
      return "grouped_two_stage";
  }
  return "?";
}

std::span<const AmdDotModel> amd_dot_models() { return kAmdModels; }

const AmdDotModel* find_amd_dot_model(std::string_view name, const Format& a_input, const Format& b_input) {
  for (const AmdDotModel& m : kAmdModels)
    if (m.name == name && m.a_input == a_input && m.b_input == b_input) return &m;
  return nullptr;
}

const AmdDotModel* find_amd_dot_model(std::string_view name, const Format& input) {
  return find_amd_dot_model(name, input, input);
}

bool is_amd_dot_model_name(std::string_view name) {
  return std::any_of(std::begin(kAmdModels), std::end(kAmdModels),
                     [&](const AmdDotModel& m) { return m.name == name; });
}

float fused_dot_amd(const AmdDotModel& model, float c, const float* a, const float* b, int k) {
  check_model(model, k);
  const int step = std::max(model.products_per_step, 1);
  const bool a_xf32 = model.a_input == formats::tf32, b_xf32 = model.b_input == formats::tf32;
  float acc = c;
  int i = 0;
  do {  // k == 0 runs one step with C alone
    const int n = std::min(step, k - i);
    float xa[64], xb[64];
    for (int j = 0; j < n; ++j) {
      xa[j] = a_xf32 ? as_input(formats::tf32, a[i + j]) : a[i + j];
      xb[j] = b_xf32 ? as_input(formats::tf32, b[i + j]) : b[i + j];
    }
    acc = value_of(run_step(model, acc, xa, xb, n));
    i += n;
  } while (i < k);
  return acc;
}

std::uint32_t fused_dot_amd_bits(const AmdDotModel& model, std::uint32_t c_bits, std::span<const std::uint32_t> a_bits,
                                 std::span<const std::uint32_t> b_bits) {
  if (a_bits.size() != b_bits.size()) throw std::invalid_argument("AMD MFMA dot: a and b need the same k");
  std::vector<float> a(a_bits.size()), b(b_bits.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(to_double(model.a_input, a_bits[i]));
    b[i] = static_cast<float>(to_double(model.b_input, b_bits[i]));
  }
  return bits_of(fused_dot_amd(model, value_of(c_bits), a.data(), b.data(), static_cast<int>(a.size())));
}

}  // namespace fb
