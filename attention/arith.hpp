// attention/arith.hpp: the arithmetic a kernel recipe runs on (internal to attention/).
//
// Contract: two policies with the same members.
// - HardwareArith: every result is rounded as the recipe says. Roundings into bf16/fp16
//   and every traced or stochastic rounding go through fb::round_double (round_pack);
//   plain RNE into fp32 uses the host's IEEE double->float conversion, which is the same
//   correctly rounded result. Operations are computed in fp64 and then rounded once:
//   by Figueroa's theorem (1995) double rounding through a format of >= 2p+2 bits is
//   innocuous for +, -, *, / of p-bit operands (p = 24, 11, 8 here), so this equals the
//   correctly rounded operation. FMAs use std::fmaf (one rounding). Dot products use the
//   recipe's DotSpec (its fb::DotModel, whichever family, through the model's one call; with
//   DotSpec::promote_every, groups of that many products from C = 0 added into an fp32
//   accumulator, DeepSeek-V3's promotion).
//   SFUs come from the recipe's SfuSet.
// - ExactArith: every rounding is the identity and special functions are libm in fp64;
//   dots are fp64 FMA chains. Runs the recipe's order of operations in (near-)exact
//   arithmetic, so tests can check that tiling, ordering and the stabilised variants
//   are algebraically right.
// Both are header-only so the engine's loops inline them; no virtual call except the
// SFU models (one per exponential).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "attention/kernel_models.hpp"
#include "emu/sfu/cuda_expf.hpp"
#include "emu/sfu/libdevice_log2f.hpp"
#include "emu/ops.hpp"
#include "emu/dot/dot_model.hpp"
#include "emu/sfu/software_exp2.hpp"
#include "emu/sfu/special_functions.hpp"

namespace fb::attn::detail {

// KOrder::ck_interleave16: x[0, k) rearranged in the order CK's IterateK warp GEMM feeds the
// MFMA, zero-padded to a multiple of 16 (out holds that many). Slot s of a 16-chunk is MFMA
// step i = s / 8, lane group g = (s % 8) / 4, element j = s % 4, which carries chunk k
// 8g + 4i + j (ck_interleave16_source): steps {0-3, 8-11} and {4-7, 12-15}. Returns the
// padded length.
constexpr int ck_interleave16_source(int slot) {
  const int s = slot % 16;
  return slot - s + 8 * ((s % 8) / 4) + 4 * (s / 8) + s % 4;
}
template <class E>
int ck_interleave16(const E* x, int k, E* out) {
  const int padded = (k + 15) / 16 * 16;
  for (int slot = 0; slot < padded; ++slot) {
    const int src = ck_interleave16_source(slot);
    out[slot] = src < k ? x[src] : static_cast<E>(0);
  }
  return padded;
}

inline double round_into(const Format& f, double x, const RoundingSpec& spec, std::uint64_t position = 0,
                         RoundingEvent* event = nullptr) {
  if (f == formats::fp32 && spec.mode == RoundingMode::rne && event == nullptr) {
    return static_cast<double>(static_cast<float>(x));
  }
  return to_double(f, round_double(f, x, spec, position, event).bits);
}

struct HardwareArith {
  static constexpr bool exact = false;
  const KernelModel* km;

  // fp32 result of an operation computed exactly-enough in fp64 (see file comment),
  // flushed to zero when the recipe runs with fast math. Forced inline: the per-entry loops
  // run it several times per score, where GCC would otherwise leave a call.
  [[gnu::always_inline]] double f32(double x) const { return flush32(static_cast<float>(x)); }
  // One rounding inside a PyTorch tensor op (softmax's backward): its opmath, fp32, or none
  // for an fp64 model's fp64 tensors (KernelModel::fp64_opmath).
  double opmath(double x) const { return km->fp64_opmath ? x : f32(x); }
  // f32's flush of an fp32 value: with ftz a subnormal becomes the zero of its sign (zeros
  // stay), read on the encoding (exponent field 0) without a branch, so that loops over it
  // vectorise.
  [[gnu::always_inline]] float flush32(float f) const {
    const std::uint32_t b = std::bit_cast<std::uint32_t>(f);
    const std::uint32_t keep = km->ftz && (b & 0x7f800000u) == 0 ? 0x80000000u : 0xffffffffu;
    return std::bit_cast<float>(b & keep);
  }
  // Round into a stage format (nullopt = fp64, no rounding). Forced inline, as f32.
  [[gnu::always_inline]] double to(const std::optional<Format>& f, double x) const {
    if (!f) return x;
    if (*f == formats::fp32) return f32(x);
    return round_into(*f, x, RoundingSpec{});
  }
  double to_traced(const std::optional<Format>& f, double x, RoundingEvent* ev, const RoundingSpec& spec = {},
                   std::uint64_t position = 0) const {
    if (!f) return x;
    return round_into(*f, x, spec, position, ev);
  }
  // A PyTorch tensor operation producing a tensor of format f: computed in fp32
  // "opmath" for 16-bit formats, then rounded into f (x is the fp64 value of the op).
  double op(const std::optional<Format>& f, double x) const {
    if (!f) return x;
    if (*f == formats::fp32) return f32(x);
    return round_into(*f, static_cast<float>(x), RoundingSpec{});
  }
  [[gnu::always_inline]] double fma32(double a, double b, double c) const {
    return f32(std::fma(static_cast<float>(a), static_cast<float>(b), static_cast<float>(c)));
  }
  double ex2(double x) const { return km->sfu.ex2->evaluate(static_cast<float>(x)); }
  // FlashAttention-4's FMA-polynomial exp2 (+sw-exp2), bit-exact plain fp32 arithmetic.
  double software_ex2(double x) const { return fa4_software_ex2(static_cast<float>(x)); }
  double rcp(double x) const { return km->sfu.rcp->evaluate(static_cast<float>(x)); }
  double lg2(double x) const { return km->sfu.lg2->evaluate(static_cast<float>(x)); }
  double libdevice_lg2(double x) const { return libdevice_log2f(static_cast<float>(x)); }
  double fast_log(double x) const { return fb::fast_log(km->sfu, static_cast<float>(x)); }
  // PyTorch's exp/log tensor ops, in their opmath. fp32 (CUDA expf/logf, <= 2 ulp): modelled
  // as libm fp64 rounded to fp32, i.e. (almost always) correctly rounded, UNMEASURED against
  // the GPU; with KernelModel::cuda_expf, exp is CUDA's expf sequence over the SFU set's ex2
  // (emu/sfu/cuda_expf.hpp). fp64 (KernelModel::fp64_opmath, fp64 tensors): libm's exp/log in
  // double (< 1 ulp), UNMEASURED against CUDA's exp/log.
  double opmath_exp(double x) const {
    if (km->fp64_opmath) return std::exp(x);
    if (km->cuda_expf) return cuda_expf(static_cast<float>(x), *km->sfu.ex2);
    return static_cast<float>(std::exp(x));
  }
  double opmath_log(double x) const { return km->fp64_opmath ? std::log(x) : static_cast<float>(std::log(x)); }

  template <class E>
  double dot(const DotSpec& spec, double c, const E* a, const E* b, int k, DotTrace* trace = nullptr) const {
    if constexpr (std::is_same_v<E, float>) {
      if (spec.k_order == KOrder::ck_interleave16) {  // both operands in the MFMA's k order, once
        thread_local std::vector<float> pa, pb;
        pa.resize(static_cast<std::size_t>(k) + 16);
        pb.resize(static_cast<std::size_t>(k) + 16);
        const int padded = ck_interleave16(a, k, pa.data());
        ck_interleave16(b, k, pb.data());
        return dot_in_k_order(spec, c, pa.data(), pb.data(), padded, trace);
      }
    }
    return dot_in_k_order(spec, c, a, b, k, trace);
  }
  // dot() with a and b already in the order the instructions take k.
  template <class E>
  double dot_in_k_order(const DotSpec& spec, double c, const E* a, const E* b, int k, DotTrace* trace) const {
    if constexpr (std::is_same_v<E, float>) {
      switch (spec.kind) {
        case DotKind::tensor_core: {
          // Models that record no per-step trace (AMD MFMA) leave traced rows without step events.
          if (spec.promote_every <= 0) return spec.dot.dot(static_cast<float>(c), a, b, k, {}, trace);
          // +promote:N: each group of N products runs on the tensor core from C = 0; its
          // result is added into the fp32 accumulator by one CUDA-core fp32 add.
          double acc = f32(c);
          for (int i = 0; i < k; i += spec.promote_every) {
            const int n = std::min(spec.promote_every, k - i);
            acc = f32(acc + static_cast<double>(spec.dot.dot(0.0f, a + i, b + i, n, {}, trace)));
          }
          return acc;
        }
        case DotKind::fp32_fma_chain: {
          float s = static_cast<float>(c);
          for (int i = 0; i < k; ++i) s = std::fma(a[i], b[i], s);
          return s;
        }
        case DotKind::fp64_fma_chain:
          break;
      }
    }
    double s = c;
    for (int i = 0; i < k; ++i) s = std::fma(static_cast<double>(a[i]), static_cast<double>(b[i]), s);
    return s;
  }
  // Whether dot_columns runs `spec`'s dots side by side in vector lanes (fb::DotModel::
  // dot_columns): a dot model's chain without +promote, in any k order. Otherwise callers
  // loop over dot(); the results are the same bits either way.
  static bool columns_batched(const DotSpec& spec) {
    return spec.kind == DotKind::tensor_core && spec.promote_every <= 0;
  }
  // dot() for `lanes` columns at once (only where columns_batched): acc[l] =
  // dot(spec, acc[l], a, column l, k, tally), column l = b[j*ldb + l]. `tally`: null, or a
  // DotTrace with tally_only set (a traced row's step counts). `lane_values` is scratch.
  // `b_alignment`: b's prepared alignment exponents (fb::fused_dot_rows), or null.
  void dot_columns(const DotSpec& spec, double* acc, const float* a, const float* b, const std::int32_t* b_alignment,
                   std::size_t ldb, int k, int lanes, std::vector<float>& lane_values,
                   DotTrace* tally = nullptr) const {
    lane_values.resize(static_cast<std::size_t>(lanes));
    // The accumulators hold fp32 (or fp16) values: exact as float.
    for (int l = 0; l < lanes; ++l) lane_values[static_cast<std::size_t>(l)] = static_cast<float>(acc[l]);
    DotStepTally* const steps = tally != nullptr ? tally->tally_only : nullptr;
    if (spec.k_order == KOrder::ck_interleave16) {
      // CK's interleave: the shared vector and the panel's rows (k) rearranged once per call,
      // zero-padded to whole 16-chunks (b_alignment describes b's own layout: not passed).
      thread_local std::vector<float> a_order, panel;
      const int padded = (k + 15) / 16 * 16;
      a_order.resize(static_cast<std::size_t>(padded));
      ck_interleave16(a, k, a_order.data());
      panel.assign(static_cast<std::size_t>(padded) * lanes, 0.0f);
      for (int slot = 0; slot < padded; ++slot) {
        const int j = ck_interleave16_source(slot);
        if (j < k)
          std::copy(b + static_cast<std::size_t>(j) * ldb, b + static_cast<std::size_t>(j) * ldb + lanes,
                    panel.begin() + static_cast<std::ptrdiff_t>(slot) * lanes);
      }
      spec.dot.dot_columns(lane_values.data(), a_order.data(), panel.data(), static_cast<std::size_t>(lanes), padded,
                           lanes, lane_values.data(), steps);
    } else {
      spec.dot.dot_columns(lane_values.data(), a, b, ldb, k, lanes, lane_values.data(), steps, b_alignment);
    }
    for (int l = 0; l < lanes; ++l) acc[l] = lane_values[static_cast<std::size_t>(l)];
  }
  // Whether dot_rows runs `spec`'s dots: columns_batched, in the k order as stored.
  static bool rows_batched(const DotSpec& spec) {
    return columns_batched(spec) && spec.k_order != KOrder::ck_interleave16;
  }
  // dot_columns for `rows` vectors (only where rows_batched): cd[r*ldc + l] = dot(spec,
  // cd[r*ldc + l], a + r*lda, column l, k), the accumulators as floats (they hold fp32 or fp16
  // values). Untallied.
  void dot_rows(const DotSpec& spec, float* cd, std::size_t ldc, const float* a, std::size_t lda, int rows,
                const float* b, const std::int32_t* b_alignment, std::size_t ldb, int k, int lanes) const {
    spec.dot.dot_rows(cd, ldc, a, lda, rows, b, b_alignment, ldb, k, lanes, cd, ldc);
  }
};

struct ExactArith {
  static constexpr bool exact = true;
  const KernelModel* km;
  double f32(double x) const { return x; }
  double opmath(double x) const { return x; }
  double to(const std::optional<Format>&, double x) const { return x; }
  double to_traced(const std::optional<Format>&, double x, RoundingEvent*, const RoundingSpec& = {},
                   std::uint64_t = 0) const {
    return x;
  }
  double op(const std::optional<Format>&, double x) const { return x; }
  double fma32(double a, double b, double c) const { return std::fma(a, b, c); }
  double ex2(double x) const { return std::exp2(x); }
  double software_ex2(double x) const { return std::exp2(x); }
  double rcp(double x) const { return 1.0 / x; }
  double lg2(double x) const { return std::log2(x); }
  double libdevice_lg2(double x) const { return std::log2(x); }
  double fast_log(double x) const { return std::log(x); }
  double opmath_exp(double x) const { return std::exp(x); }
  double opmath_log(double x) const { return std::log(x); }
  template <class E>
  double dot(const DotSpec&, double c, const E* a, const E* b, int k, DotTrace* = nullptr) const {
    double s = c;
    for (int i = 0; i < k; ++i) s = std::fma(static_cast<double>(a[i]), static_cast<double>(b[i]), s);
    return s;
  }
};

}  // namespace fb::attn::detail
