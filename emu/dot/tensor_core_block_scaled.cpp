// emu/dot/tensor_core_block_scaled.cpp: the block-scaled dot-add (see the header) and its
// preset table.
//
// The facts, from github microsoft/MMA-Sim (Xie et al. 2025, arXiv:2511.10909), snapshot
// c785138 "Refactor code for open source" (files mmasim/simulator/nv_ptx.py,
// mmasim/simulator/arithmetic.py, mmasim/isa/nv_ptx/nv_tcgen05mma.py, mmasim/isa/common.py,
// mmasim/isa/nv_ptx/nv_mma.py), cross-read with the older mmasim/simulator/functions.py and
// mmasim/mmasim/arithmetic/fdpa.py (st_fdpa, gst_fdpa):
// - F: nv_ptx.py tcgen05mma_block_scale.__init__ and mma_block_scale.__init__:
//   n_accum_fractional_bits = 35 if k == 64 else 25; output_type "f32" (d_type f32 only).
// - Shapes: nv_tcgen05mma.py tcgen05mma_block_scale: k == 32 is kind::mxf8f6f4 with ue8m0
//   and block32; k == 64 is kind::mxf4nvf4 with e2m1 only and ue8m0 (block32 or block16) or
//   ue4m3 (block16). nv_mma.py (RTX Blackwell mma.sync block_scale) adds ue4m3 with block32.
// - kind::mxf8f6f4 (k = 32, one block): arithmetic.py fused_dot_add: each product's
//   significand is sa*sb and its exponent ea + eb + e(scale_a) + e(scale_b) (only the
//   scales' exponents: ue8m0 has no significand bits), then fused_sum (truncation to F at
//   the maximum exponent), nv_fused_dot_add normalises and truncates to fp32 (RZ).
//   NaN/inf: the fp64 sum of a*b*scale_a*scale_b plus C is checked first; NaN gives NaN,
//   inf gives inf. So a NaN scale (ue8m0 0xff) gives NaN, even for zero inputs (0*NaN).
// - kind::mxf4 / mxf4nvf4 (k = 64): arithmetic.py nv_fused_dot_add_with_block_scale: NaN
//   if any scale of the instruction (scale_a[i, :], scale_b[:, j]) or C is NaN; ue4m3 scales
//   are abs()'d; products summed exactly in runs of 16 (`for k in range(0, n, 16)`), the run
//   sum times both scales' significands, exponent e0 + e1 (the scales' only), fused_sum with
//   F = 35, then fp32 RZ. (gst_fdpa in fdpa.py: the same with G = 16.)
// - Subnormal inputs and scales count with their format's emin (extract_significand_exponent
//   / fp_to_sig_exp with dtype_min_exponent: e4m3 -6, e5m2 -14, e8m0 -127).
// Choices MMA-Sim leaves open, and what this model does:
// - Zero terms (a zero C, a zero product; in the k = 64 kinds a group whose products are all
//   zero or whose scale is zero) align at a fixed exponent e_zero (`zero_exponent`): the
//   newest MMA-Sim, github peichenxie/MMA-Sim (the first author's repository) commit 0a5ce40,
//   src/mmasim/mmasim/arithmetic/fdpa.py st_fdpa / gst_fdpa (parameter e_zero, measured by its
//   tests/probe/features/fdpa_exponent_for_zero.py). A group whose non-zero products cancel
//   to zero is not a zero term: it aligns at its scales' exponents (gst_fdpa: "zeros resulted
//   from summation do not apply e_zero"; the same in microsoft/MMA-Sim arithmetic.py, where a
//   group's exponent never depends on its sum). Older versions differ (functions.py -999,
//   i.e. ignored; fdpa.py 735c9b -126 with "TODO: handle zero").
//   [assumption] The values: -133 (mxf8f6f4) and -139 (k = 64 kinds) are those a third-party
//   benchmark of MMA-Sim passes for "nv.blackwell.mxfp8" and "nv.blackwell.nvfp4"; MMA-Sim's
//   own table of them was not read; mxf4 and the ue8m0 forms, and sm120, are assumed equal.
//   Effect: C is always a term and a non-zero fp32 C aligns at >= -126, so e_zero matters only
//   when C = 0 and every other term aligns below it (results near fp32's subnormal range).
// - e3m2 and e2m3 (a TODO in MMA-Sim's isa) and e2m1 in kind::mxf8f6f4 (MMA-Sim reads e2m1
//   as torch.uint8 there, which its fused_dot_add cannot decode): the e4m3/e5m2 path, each
//   input's subnormals aligned at its own format's emin, as the project's sm100 presets.
// - An infinite C in the k = 64 kinds (MMA-Sim's math.trunc would raise) gives inf of its
//   sign; overflow of the fp32 result gives inf (MMA-Sim: torch's fp64 -> fp32 conversion).
// - A last step shorter than the instruction (k not a multiple of it) fuses what is there.
#include "emu/dot/tensor_core_block_scaled.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "emu/rounding.hpp"

namespace fb {
namespace {

constexpr Format kMxf8f6f4Inputs[] = {formats::e4m3, formats::e5m2, formats::e3m2, formats::e2m3, formats::e2m1};
constexpr Format kFp4Inputs[] = {formats::e2m1};

constexpr std::string_view kSm100Source =
    "Xie et al. 2025 (MMA-Sim, arXiv:2511.10909), github microsoft/MMA-Sim: mmasim/simulator/nv_ptx.py "
    "(tcgen05mma_block_scale: F = 35 if k == 64 else 25, f32 output), mmasim/simulator/arithmetic.py "
    "(fused_dot_add, nv_fused_dot_add, nv_fused_dot_add_with_block_scale), mmasim/isa/nv_ptx/nv_tcgen05mma.py";
constexpr std::string_view kSm120Source =
    "Xie et al. 2025 (MMA-Sim, arXiv:2511.10909), github microsoft/MMA-Sim: mmasim/simulator/nv_ptx.py "
    "(mma_block_scale: F = 35 if k == 64 else 25, f32 output), mmasim/simulator/arithmetic.py "
    "(fused_dot_add, nv_fused_dot_add_with_block_scale), mmasim/isa/nv_ptx/nv_mma.py (RTX Blackwell "
    "block_scale shapes)";
#define FB_BS_UNMEASURED "UNMEASURED: no Blackwell GPU probed by this project; "
#define FB_BS_ZERO                                                                                          \
  "zero terms align at MMA-Sim's e_zero (zero_exponent; value assumed from a third-party use of MMA-Sim), " \
  "a group whose products cancel at its scales' exponents; "
#define FB_BS_MX                                                                                         \
  "k = 32 per step, one ue8m0 scale per operand per step, product exponent ea+eb+esa+esb, F = 25, fp32 " \
  "RZ; e3m2/e2m3/e2m1 assumed on the e4m3/e5m2 path (MMA-Sim TODO); "
#define FB_BS_FP4                                                                                   \
  "k = 64 per step, e2m1 products summed exactly in groups of 16, each group times its two scales " \
  "aligned at the scales' exponent sum, F = 35, fp32 RZ; a NaN scale anywhere in the step gives NaN; "

using enum DotOutput;

// name, kind, inputs, scale, block, products per step, group, F, zero exponent, output, validated, source, note
constexpr BlockScaledModel kBlockScaledModels[] = {
    {"sm100", "mxf8f6f4", kMxf8f6f4Inputs, formats::e8m0, 32, 32, 0, 25, -133, fp32_rz, false, kSm100Source,
     FB_BS_UNMEASURED "tcgen05.mma kind::mxf8f6f4 block32 ue8m0: " FB_BS_MX FB_BS_ZERO},
    {"sm100", "mxf4", kFp4Inputs, formats::e8m0, 32, 64, 16, 35, -139, fp32_rz, false, kSm100Source,
     FB_BS_UNMEASURED "tcgen05.mma kind::mxf4 block32 ue8m0 (MMA-Sim's k == 64 path): " FB_BS_FP4 FB_BS_ZERO},
    {"sm100", "mxf4nvf4", kFp4Inputs, formats::e8m0, 32, 64, 16, 35, -139, fp32_rz, false, kSm100Source,
     FB_BS_UNMEASURED "tcgen05.mma kind::mxf4nvf4 block32 ue8m0: " FB_BS_FP4 FB_BS_ZERO},
    {"sm100", "mxf4nvf4", kFp4Inputs, formats::e8m0, 16, 64, 16, 35, -139, fp32_rz, false, kSm100Source,
     FB_BS_UNMEASURED "tcgen05.mma kind::mxf4nvf4 block16 ue8m0: " FB_BS_FP4 FB_BS_ZERO},
    {"sm100", "mxf4nvf4", kFp4Inputs, kUe4m3Scale, 16, 64, 16, 35, -139, fp32_rz, false, kSm100Source,
     FB_BS_UNMEASURED
     "tcgen05.mma kind::mxf4nvf4 block16 ue4m3 (NVFP4; scale sign bit ignored, MMA-Sim abs()): " FB_BS_FP4 FB_BS_ZERO},
    {"sm120", "mxf8f6f4", kMxf8f6f4Inputs, formats::e8m0, 32, 32, 0, 25, -133, fp32_rz, false, kSm120Source,
     FB_BS_UNMEASURED "mma.sync m16n8k32 block_scale block32 ue8m0: " FB_BS_MX FB_BS_ZERO},
    {"sm120", "mxf4", kFp4Inputs, formats::e8m0, 32, 64, 16, 35, -139, fp32_rz, false, kSm120Source,
     FB_BS_UNMEASURED "mma.sync m16n8k64 block_scale kind::mxf4 block32 ue8m0: " FB_BS_FP4 FB_BS_ZERO},
    {"sm120", "mxf4nvf4", kFp4Inputs, formats::e8m0, 32, 64, 16, 35, -139, fp32_rz, false, kSm120Source,
     FB_BS_UNMEASURED "mma.sync m16n8k64 block_scale block32 ue8m0: " FB_BS_FP4 FB_BS_ZERO},
    {"sm120", "mxf4nvf4", kFp4Inputs, formats::e8m0, 16, 64, 16, 35, -139, fp32_rz, false, kSm120Source,
     FB_BS_UNMEASURED "mma.sync m16n8k64 block_scale block16 ue8m0: " FB_BS_FP4 FB_BS_ZERO},
    {"sm120", "mxf4nvf4", kFp4Inputs, kUe4m3Scale, 32, 64, 16, 35, -139, fp32_rz, false, kSm120Source,
     FB_BS_UNMEASURED "mma.sync m16n8k64 block_scale block32 ue4m3 (scale sign bit ignored): " FB_BS_FP4 FB_BS_ZERO},
    {"sm120", "mxf4nvf4", kFp4Inputs, kUe4m3Scale, 16, 64, 16, 35, -139, fp32_rz, false, kSm120Source,
     FB_BS_UNMEASURED "mma.sync m16n8k64 block_scale block16 ue4m3 (scale sign bit ignored): " FB_BS_FP4 FB_BS_ZERO},
};
#undef FB_BS_UNMEASURED
#undef FB_BS_ZERO
#undef FB_BS_MX
#undef FB_BS_FP4

// An exact finite value as sign, integer magnitude times 2^lsb, and the exponent it brings
// to the alignment maximum (its leading bit position, its format's emin for subnormals).
struct Term {
  bool negative = false;
  std::uint64_t magnitude = 0;
  int lsb = 0;
  int alignment = 0;
  bool zero = true;  // a zero term: aligns at the model's zero_exponent, not at `alignment`
};

// A finite float known to hold a value of `f` (fp32 for C), split as a Term.
Term term_of(float x, const Format& f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  const int field = static_cast<int>((u >> 23) & 0xffu);
  const int exponent = (field != 0 ? field : 1) - 127;  // of bit 23 of the significand
  const std::uint32_t significand = (u & 0x7fffffu) | (field != 0 ? 0x800000u : 0u);
  Term t;
  t.negative = (u >> 31) != 0;
  t.magnitude = significand;
  t.lsb = exponent - 23;
  const int lead = significand != 0 ? 31 - std::countl_zero(significand) : 0;
  t.alignment = std::max(t.lsb + lead, f.emin());
  t.zero = significand == 0;
  return t;
}

// A scale byte as significand * 2^(exponent - man_bits), alignment at its exponent.
struct Scale {
  bool nan = false;
  std::uint32_t significand = 0;  // 0: a zero scale (ue4m3 only)
  int lsb = 0;
  int alignment = 0;
};
Scale scale_of(const Format& f, std::uint8_t byte) {
  const Decoded d = decode(f, byte);
  Scale s;
  s.nan = d.cls == ValueClass::nan;
  if (d.cls == ValueClass::zero || s.nan) return s;
  s.significand = d.significand;
  s.lsb = d.exponent - f.man_bits;
  s.alignment = d.exponent;
  return s;
}

// Signed value of a term truncated toward zero onto the grid 2^unit.
std::int64_t truncated(const Term& t, int unit) {
  if (t.magnitude == 0) return 0;  // a zero term's lsb may lie anywhere
  const int shift = t.lsb - unit;
  std::uint64_t kept;
  if (shift >= 0)
    kept = t.magnitude << shift;  // callers keep this below 2^62 (see step())
  else
    kept = -shift >= 64 ? 0 : t.magnitude >> -shift;
  const auto v = static_cast<std::int64_t>(kept);
  return t.negative ? -v : v;
}

// One fused step over n products starting at global index `first` (scales indexed by
// global block). Returns fp32 bits.
std::uint32_t step(const BlockScaledModel& m, const Format& fa, const Format& fb, float c, const float* a,
                   const float* b, int first, int n, const std::uint8_t* scale_a, const std::uint8_t* scale_b) {
  // Specials first (MMA-Sim checks them before any alignment).
  // fused_dot's specials rule, plus: a NaN scale among the step's blocks gives NaN.
  SpecialTerms specials;
  specials.add_value(c);
  const int first_block = first / m.block, end_block = (first + n + m.block - 1) / m.block;
  for (int j = first_block; j < end_block; ++j)
    specials.nan = specials.nan || scale_of(m.scale, scale_a[j]).nan || scale_of(m.scale, scale_b[j]).nan;
  for (int i = 0; i < n; ++i) specials.add_product(a[first + i], b[first + i]);
  if (specials.any()) return specials.result(formats::fp32);

  // The terms: C, then one per product (group == 0) or one per group of products.
  // At most 65 terms: C and one per product of a step of <= 64 (every preset's k).
  std::array<Term, 65> terms;
  int count = 0;
  terms[count++] = term_of(c, formats::fp32);
  if (m.group == 0) {
    for (int i = 0; i < n; ++i) {
      const int g = first + i;
      const Scale sa = scale_of(m.scale, scale_a[g / m.block]), sb = scale_of(m.scale, scale_b[g / m.block]);
      const Term ta = term_of(a[g], fa), tb = term_of(b[g], fb);
      Term t;
      t.negative = ta.negative != tb.negative;
      // <= 24 + 24 bits of the inputs; the scales' significands are 1 (group == 0 only with a
      // power-of-two scale, checked in check_arguments).
      t.magnitude = ta.magnitude * tb.magnitude * sa.significand * sb.significand;
      t.lsb = ta.lsb + tb.lsb + sa.lsb + sb.lsb;
      t.alignment = ta.alignment + tb.alignment + sa.alignment + sb.alignment;
      t.zero = t.magnitude == 0;
      terms[count++] = t;
    }
  } else {
    // Group sums in units of the two inputs' smallest subnormal: exact integers (e2m1:
    // |a*b| <= 36 in units of 2^-2, so 16 of them stay below 2^12).
    const int unit_a = fa.emin() - fa.man_bits, unit_b = fb.emin() - fb.man_bits;
    for (int s = 0; s < n; s += m.group) {
      std::int64_t sum = 0;
      bool all_products_zero = true;
      for (int i = s; i < std::min(n, s + m.group); ++i) {
        const auto ia = static_cast<std::int64_t>(std::ldexp(static_cast<double>(a[first + i]), -unit_a));
        const auto ib = static_cast<std::int64_t>(std::ldexp(static_cast<double>(b[first + i]), -unit_b));
        sum += ia * ib;
        all_products_zero = all_products_zero && ia * ib == 0;
      }
      const int g = first + s;
      const Scale sa = scale_of(m.scale, scale_a[g / m.block]), sb = scale_of(m.scale, scale_b[g / m.block]);
      Term t;
      t.negative = sum < 0;
      t.magnitude = static_cast<std::uint64_t>(sum < 0 ? -sum : sum) * sa.significand * sb.significand;
      t.lsb = unit_a + unit_b + sa.lsb + sb.lsb;
      t.alignment = sa.alignment + sb.alignment;
      // A group whose products cancel to zero still aligns at its scales' exponents; only
      // all-zero products or a zero scale make it a zero term (fdpa.py gst_fdpa: "zeros
      // resulted from summation do not apply e_zero").
      t.zero = all_products_zero || sa.significand == 0 || sb.significand == 0;
      terms[count++] = t;
    }
  }

  // Align at the largest exponent (zero terms at zero_exponent), truncate to F bits, sum.
  // Bounds: a term's magnitude is below 2^(alignment - lsb + 1) times at most 2^12 (a group
  // sum's own size) so the left shift by at most F - (alignment - lsb) leaves < 2^(F + 13),
  // and 17 of them (C, 16 groups) or 33 (C, 32 products, each < 2^(F + 2)) fit in int64.
  int largest = kZeroTermsIgnored;
  for (int i = 0; i < count; ++i) largest = std::max(largest, terms[i].zero ? m.zero_exponent : terms[i].alignment);
  if (largest == kZeroTermsIgnored) return 0u;  // every term zero, zero terms ignored: +0
  const int unit = largest - m.fraction_bits;
  std::int64_t sum = 0;
  for (int i = 0; i < count; ++i) sum += truncated(terms[i], unit);
  return dot_step_output(DotOutput::fp32_rz, sum, unit);  // RZ into fp32, inf on overflow, +0
}

void check_arguments(const BlockScaledModel& m, const Format& fa, const Format& fb, int k) {
  static_assert(std::ranges::all_of(kBlockScaledModels, [](const BlockScaledModel& p) {
    return p.products_per_step > 0 && p.products_per_step <= 64 && p.products_per_step % p.block == 0 &&
           (p.group == 0 ? p.scale.man_bits == 0 : p.products_per_step % p.group == 0 && p.block % p.group == 0);
  }));
  if (!block_scaled_accepts(m, fa) || !block_scaled_accepts(m, fb))
    throw std::invalid_argument(std::string(m.name) + " kind::" + std::string(m.kind) + " takes no " +
                                (block_scaled_accepts(m, fa) ? fb.name : fa.name) + " operand");
  if (k < 0 || k % m.block != 0)
    throw std::invalid_argument("block-scaled dot: k = " + std::to_string(k) + " is not a multiple of the block (" +
                                std::to_string(m.block) + ")");
}

}  // namespace

std::span<const BlockScaledModel> block_scaled_models() { return kBlockScaledModels; }

const BlockScaledModel* find_block_scaled_model(std::string_view name, std::string_view kind, const Format& scale,
                                                int block) {
  for (const BlockScaledModel& m : kBlockScaledModels)
    if (m.name == name && m.kind == kind && m.scale == scale && m.block == block) return &m;
  return nullptr;
}

bool block_scaled_accepts(const BlockScaledModel& model, const Format& input) {
  return std::any_of(model.inputs.begin(), model.inputs.end(), [&](const Format& f) { return f == input; });
}

float fused_dot_block_scaled(const BlockScaledModel& model, const Format& a_format, const Format& b_format, float c,
                             const float* a, const float* b, int k, const std::uint8_t* scale_a,
                             const std::uint8_t* scale_b) {
  check_arguments(model, a_format, b_format, k);
  std::uint32_t bits = 0;
  float acc = c;
  int i = 0;
  do {  // k == 0 runs one step with C alone
    const int n = std::min(model.products_per_step, k - i);
    bits = step(model, a_format, b_format, acc, a, b, i, n, scale_a, scale_b);
    acc = std::bit_cast<float>(bits);
    i += n;
  } while (i < k);
  return acc;
}

std::uint32_t fused_dot_block_scaled_bits(const BlockScaledModel& model, const Format& a_format, const Format& b_format,
                                          std::uint32_t c_bits, std::span<const std::uint32_t> a_bits,
                                          std::span<const std::uint32_t> b_bits, std::span<const std::uint8_t> scale_a,
                                          std::span<const std::uint8_t> scale_b) {
  const int k = static_cast<int>(a_bits.size());
  check_arguments(model, a_format, b_format, k);
  const auto blocks = static_cast<std::size_t>(k / model.block);
  if (b_bits.size() != a_bits.size() || scale_a.size() < blocks || scale_b.size() < blocks)
    throw std::invalid_argument("block-scaled dot: b needs k elements and each scale operand k / block bytes");
  std::vector<float> a(a_bits.size()), b(b_bits.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(to_double(a_format, a_bits[i]));
    b[i] = static_cast<float>(to_double(b_format, b_bits[i]));
  }
  return std::bit_cast<std::uint32_t>(fused_dot_block_scaled(model, a_format, b_format, std::bit_cast<float>(c_bits),
                                                             a.data(), b.data(), k, scale_a.data(), scale_b.data()));
}

}  // namespace fb
