// gpu/mma_probe_inputs.cuh: fb-mma-probe's host side input design (the batches of raw,
// normal and designed inputs per instruction form) and the launches that run them on the device.
// Contract: it includes what it uses, so that it parses alone (clangd, an IDE). gpu/mma_probe.cu
// includes it once: its launches stay in the one translation unit with the kernels of
// gpu/mma_probe_kernels.cuh (no relocatable device code), hence the anonymous namespace.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "formats/format.hpp"
#include "gpu/device_common.cuh"
#include "gpu/mma_probe_kernels.cuh"
#include "traces/probe_file.hpp"

namespace fb::gpu {
namespace {

// ---- host side: input design ------------------------------------------------------------
enum Batch : int {
  kRandomBits,    // uniform raw bit patterns: every class incl. NaN, inf, subnormals
  kRandomNormal,  // normal values, moderate exponents: the common case
  kSpecials,      // normals with NaN/inf/zero/subnormal sprinkled in
  kTies,          // one term exactly half an output ulp of C, plus optional tiny sticky terms
  kCancellation,  // one product nearly cancels C; the rest sit far below
  kExponentGap,   // terms spread over wide exponent gaps (truncation boundary)
  kZeroTerms,     // many exact zeros of both signs; sign of zero results
  kCHuge,         // C near overflow, inf or NaN
  kCTiny,         // C subnormal or tiny with subnormal inputs
  kOverflow,      // exact D beyond the output's max finite, at it, or just below; large C + large products
  kFBoundary,     // terms F-3..F+3 binades below the largest, low bits set: truncation at F shows in D
  kChained,       // random normal tiles, two cases per output: (C,a,b,D1) then (D1,a,b,D2)
  kSignedZeros,   // exact zero sums: every product -0 (C = -0 or +0), or x - x pairs with C = -0
  kZeroExponent,  // a zero times a huge partner beside tiny terms; C = 0 beside products below C's emin
  kInfOverflow,   // C = +-inf with a product beyond the output's range, of C's sign or the opposite
  kZeroFloor,     // (--batches only) the lowest step exponent a zero term or a zero C imposes (issue 38)
  kBatchCount
};
// Batches of a run without --batches: every batch before zero_floor, so that the default
// run (gpu/device_session.sh) and its file are unchanged. zero_floor runs only when asked.
constexpr int kDefaultBatchCount = kZeroFloor;
const char* const kBatchNames[kBatchCount] = {"random_bits",  "random_normal", "specials",     "ties",
                                              "cancellation", "exponent_gap",  "zero_terms",   "c_huge",
                                              "c_tiny",       "overflow",      "f_boundary",   "chained",
                                              "signed_zeros", "zero_exponent", "inf_overflow", "zero_floor"};

// zero_floor's tiles: tile t of the batch sets the negative term's exponent g = -166 + t % 17.
constexpr int kZeroFloorGs = 17;
// Whether a form runs a batch: zero_floor needs products below 2^-139 with every bit a
// multiple of 2^-149 and an fp32 output: bf16 and tf32 into fp32 (mma.sync bf16 m16n8k16,
// mma.sync tf32 m16n8k8, wgmma bf16 m64n8k16).
bool batch_applies(const FormInfo& f, int batch) {
  if (batch != kZeroFloor) return true;
  return f.input.exp_bits == 8 && f.input.man_bits >= 7 && f.cd == formats::fp32;
}

// F, the aligned-significand width (fraction bits kept below the largest exponent of a
// fused step) of the emu model fb-mma-probe names for a form on a device (model_for
// below); the same numbers as emu/dot/tensor_core.cpp's presets (test_probe_file checks the
// dry-run header's f_boundary_f against them): fp8 13, sm70 23, sm80/sm89 24, sm90 25.
int fraction_bits_for(const FormInfo& f, int major) {
  if (f.input.width() == 8) return 13;
  if (major == 7) return 23;
  if (major == 8) return 24;
  return 25;
}

class Designer {
 public:
  // fraction_bits: F of the form's emu model (fraction_bits_for), the f_boundary target.
  Designer(const FormInfo& f, std::uint64_t seed, int fraction_bits) : f_(f), rng_(seed), F_(fraction_bits) {}

  std::uint32_t uniform(std::uint32_t n) { return static_cast<std::uint32_t>(rng_() % n); }
  int range(int lo, int hi) { return lo + static_cast<int>(uniform(static_cast<std::uint32_t>(hi - lo + 1))); }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }

  // A value of `fmt` with the given sign and unbiased exponent; exponents below the
  // normal range give subnormals (or zero), above it are clamped to the largest binade.
  std::uint32_t value(const Format& fmt, bool negative, int exponent, std::uint32_t mantissa) {
    mantissa &= fmt.man_mask();
    std::uint32_t layout;
    if (exponent > fmt.emax()) exponent = fmt.emax();
    if (exponent >= fmt.emin()) {
      if (exponent == fmt.emax()) mantissa = std::min(mantissa, fmt.max_finite_man_field());
      layout = (static_cast<std::uint32_t>(exponent + fmt.bias) << fmt.man_bits) | mantissa;
    } else {
      const int shift = fmt.emin() - exponent;
      const std::uint64_t sig = (1ull << fmt.man_bits) | mantissa;
      layout = shift > fmt.man_bits ? 0u : static_cast<std::uint32_t>(sig >> shift);
    }
    if (negative) layout |= fmt.sign_mask();
    return to_container(fmt, layout);
  }
  std::uint32_t random_value(const Format& fmt, int elo, int ehi) {
    return value(fmt, chance(0.5), range(elo, ehi), static_cast<std::uint32_t>(rng_()));
  }
  std::uint32_t random_bits(const Format& fmt) {
    // tf32 keeps all 32 register bits: the low 13 show whether the hardware ignores them.
    if (fmt == formats::tf32) return static_cast<std::uint32_t>(rng_());
    return to_container(fmt, static_cast<std::uint32_t>(rng_()) & fmt.width_mask());
  }
  std::uint32_t special(const Format& fmt) {
    switch (uniform(6)) {
      case 0:
        return fmt.has_nan() ? to_container(fmt, fmt.quiet_nan_pattern()) : 0u;
      case 1:
        return pack_inf(fmt, false);
      case 2:
        return pack_inf(fmt, true);
      case 3:
        return to_container(fmt, chance(0.5) ? fmt.sign_mask() : 0u);
      case 4:
        return value(fmt, chance(0.5), fmt.emin() - range(1, fmt.man_bits), static_cast<std::uint32_t>(rng_()));
      default:
        return value(fmt, chance(0.5), fmt.emax(), fmt.man_mask());
    }
  }
  std::uint32_t pack_inf(const Format& fmt, bool negative) {
    if (fmt.has_inf()) return to_container(fmt, fmt.inf_pattern() | (negative ? fmt.sign_mask() : 0u));
    return to_container(fmt, fmt.quiet_nan_pattern());
  }

  // A column of B for a designed tile: +-2^e, so that every row can place exact products.
  void design_b_column(std::uint32_t* b) {
    for (int i = 0; i < f_.k; ++i) b[i] = value(f_.input, chance(0.5), range(-2, 2), 0);
  }
  int b_exponent(std::uint32_t b) const { return decode(f_.input, b).exponent; }
  bool b_negative(std::uint32_t b) const { return decode(f_.input, b).negative; }
  // Whether a[i] can be a normal input (below the top binade unless allow_top) such that
  // a[i] * b[i] has the given exponent.
  bool product_fits(const std::uint32_t* b, int i, int exponent, bool allow_top = false) const {
    const int ea = exponent - b_exponent(b[i]);
    return ea >= f_.input.emin() && ea <= f_.input.emax() - (allow_top ? 0 : 1);
  }

  // a and c of one designed case, given its column b (powers of two).
  void design_row(Batch batch, std::uint32_t* a, const std::uint32_t* b, std::uint32_t& c) {
    if (batch != row_batch_) row_batch_ = batch, batch_row_ = 0;
    const Format& in = f_.input;
    const Format& cf = f_.cd;
    // Precision of the output the ties are placed against: Hopper's fp8 path keeps 13
    // fraction bits (docs/DESIGN.md §4), the others the output format's precision.
    const int out_precision = in.width() == 8 ? 14 : cf.precision();
    const int mid = in.exp_bits >= 8 ? 0 : (in.emin() + in.emax()) / 2 + 1;
    // a[i] such that the product a[i] * b[i] has the given sign, exponent and mantissa
    // (b[i] is +-2^e, so its sign flips a's).
    auto product = [&](int i, bool neg, int exponent, std::uint32_t mantissa) {
      a[i] = value(in, neg != b_negative(b[i]), exponent - b_exponent(b[i]), mantissa);
    };
    auto zero_all = [&] {
      for (int i = 0; i < f_.k; ++i) a[i] = 0;
    };
    switch (batch) {
      case kTies: {
        // C sits out_precision/2 binades above the inputs' middle, so the tie term (half
        // an ulp of C) is representable in narrow input formats too.
        const int ec = mid + out_precision / 2 + range(-1, 1);
        // C keeps only the bits the output precision holds, so C + (half an output ulp) is
        // exactly a rounding midpoint (matters for fp8's 14-bit accumulator inside fp32).
        const std::uint32_t c_keep = ~((1u << (cf.precision() - out_precision)) - 1u);
        c = value(cf, chance(0.5), ec, static_cast<std::uint32_t>(rng_()) & c_keep);
        zero_all();
        // half an output ulp of C, or 3/2 or 1/2 ulp with the opposite sign
        const int which = range(0, f_.k - 1);
        product(which, chance(0.5), ec - out_precision, chance(0.7) ? 0u : (1u << (in.man_bits - 1)));
        for (int i = 0; i < f_.k; ++i) {
          if (i != which && chance(0.3))
            product(i, chance(0.5), ec - out_precision - range(1, 24), static_cast<std::uint32_t>(rng_()));
        }
        break;
      }
      case kCancellation: {
        const int ec = mid + range(-2, 2);
        const std::uint32_t cm = static_cast<std::uint32_t>(rng_());
        const bool neg = chance(0.5);
        c = value(cf, neg, ec, cm);
        // top mantissa bits of C, opposite sign: the sum keeps only C's low bits and the small terms
        const std::uint32_t top = (cm & cf.man_mask()) >> (cf.man_bits - in.man_bits);
        product(0, !neg, ec, top);
        for (int i = 1; i < f_.k; ++i) product(i, chance(0.5), ec - range(1, 30), static_cast<std::uint32_t>(rng_()));
        break;
      }
      case kExponentGap: {
        const int top = mid + range(-2, 2);
        for (int i = 0; i < f_.k; ++i) product(i, chance(0.5), top - range(0, 40), static_cast<std::uint32_t>(rng_()));
        c = value(cf, chance(0.5), top - range(-3, 40), static_cast<std::uint32_t>(rng_()));
        break;
      }
      case kZeroTerms: {
        if (chance(0.3)) {  // every product an exact zero: the sign of a zero result
          for (int i = 0; i < f_.k; ++i) a[i] = to_container(in, chance(0.5) ? in.sign_mask() : 0u);
          c = chance(0.8) ? to_container(cf, chance(0.5) ? cf.sign_mask() : 0u)
                          : value(cf, chance(0.5), mid + range(-3, 3), static_cast<std::uint32_t>(rng_()));
          break;
        }
        for (int i = 0; i < f_.k; ++i) {
          a[i] = chance(0.7) ? to_container(in, chance(0.5) ? in.sign_mask() : 0u)
                             : value(in, chance(0.5), mid + range(-3, 3), static_cast<std::uint32_t>(rng_()));
        }
        c = chance(0.6) ? to_container(cf, chance(0.5) ? cf.sign_mask() : 0u)
                        : value(cf, chance(0.5), mid + range(-3, 3), static_cast<std::uint32_t>(rng_()));
        break;
      }
      case kCHuge: {
        for (int i = 0; i < f_.k; ++i) a[i] = random_value(in, mid - 4, mid + 4);
        const std::uint32_t u = uniform(10);
        c = u == 0   ? pack_inf(cf, chance(0.5))
            : u == 1 ? to_container(cf, cf.quiet_nan_pattern())
                     : value(cf, chance(0.5), cf.emax() - range(0, 4), static_cast<std::uint32_t>(rng_()));
        break;
      }
      case kCTiny: {
        for (int i = 0; i < f_.k; ++i) a[i] = random_value(in, in.emin() - in.man_bits, in.emin() + 2);
        c = value(cf, chance(0.5), cf.emin() - range(-1, cf.man_bits), static_cast<std::uint32_t>(rng_()));
        break;
      }
      case kOverflow:
        design_overflow(a, b, c);
        break;
      case kFBoundary:
        design_f_boundary(a, b, c);
        break;
      case kSignedZeros:
        design_signed_zeros(a, b, c);
        break;
      case kZeroExponent:
        design_zero_exponent(a, b, c);
        break;
      case kInfOverflow:
        design_inf_overflow(a, b, c);
        break;
      default:
        break;
    }
    ++batch_row_;
  }

  // overflow: every designed row's exact D = C + sum a_i b_i lies beyond the output's max
  // finite M, at it, or within 4 output ulps below it, or C and some product are both within
  // 8 binades of M (checked in tests/test_probe_file.cpp). "ulp" is the output's ulp at M
  // (fp32 2^104, fp16 2^5). When products can reach M (bf16/tf32 -> fp32, fp16 -> fp16), the
  // rows cycle through four designs:
  //  0 products over: same-sign products whose sum is at least 2^(emax+1) (far over M)
  //  1 near M: C = M - j ulp (j = 0..3) plus products worth (4j + t)/4 ulp, so D = M + t/4 ulp,
  //    t in {0, 2, 1, -4, 4, 3, 8} (exactly M, the RNE tie, rounds to M, below, one ulp over,
  //    rounds to inf under RNE, two ulps over), from the second round on sometimes with a
  //    tiny sticky term
  //  2 large C plus large products of random signs (C within 2 binades of M, products within 3)
  //  3 cancel back: C near M plus +X and -X with X within two binades of M: the exact D is C,
  //    a sequential sum would overflow
  // Otherwise (fp16 -> fp32, fp8 -> fp32: products are far below an fp32 ulp at M) C is
  // M - j ulp (j in {0, 0, 1, 2}) plus the largest products the inputs allow (same sign:
  // D exceeds M when j = 0), moderate products of random signs, or products that cancel
  // pairwise (D exactly C).
  void design_overflow(std::uint32_t* a, const std::uint32_t* b, std::uint32_t& c) {
    const Format& in = f_.input;
    const Format& cf = f_.cd;
    const int emax = cf.emax(), ulp_e = cf.emax() - cf.man_bits;
    const bool reach = in.emax() + 2 >= emax - 1;
    const int mid = in.exp_bits >= 8 ? 0 : (in.emin() + in.emax()) / 2 + 1;
    const int row = batch_row_;
    // The sign alternates between successive rows of one design (both signs in few rows).
    const bool neg = ((reach ? row / 4 : row / 3) % 2) == 1;
    for (int i = 0; i < f_.k; ++i) a[i] = 0;
    auto product = [&](int i, bool n, int exponent, std::uint32_t mantissa) {
      a[i] = value(in, n != b_negative(b[i]), exponent - b_exponent(b[i]), mantissa);
    };
    auto near_max_c = [&](int j) {
      return value(cf, neg, emax, cf.max_finite_man_field() - static_cast<std::uint32_t>(j));
    };
    // |n| quarter-ulps as one product (exact: |n| <= 20 needs 5 bits); false if it does not fit
    auto quarter_ulps = [&](int i, int n) {
      if (n == 0) return true;
      const int m = n < 0 ? -n : n;
      int msb = 0;
      while ((m >> (msb + 1)) != 0) ++msb;
      const int exponent = ulp_e - 2 + msb;
      if (!product_fits(b, i, exponent, true)) return false;
      product(i, neg != (n < 0), exponent, (static_cast<std::uint32_t>(m) << (in.man_bits - msb)) & in.man_mask());
      return true;
    };
    if (reach) {
      switch (row % 4) {
        case 0: {  // products over: same sign, sum >= 2^(emax+1)
          double reached = 0.0;
          for (int i = 0; i < f_.k && reached < std::ldexp(1.0, emax + 1); ++i) {
            const int exponent = std::min(emax + 1, in.emax() + b_exponent(b[i]));
            product(i, neg, exponent, static_cast<std::uint32_t>(rng_()));
            reached += std::ldexp(1.0, exponent);
          }
          for (int i = 0; i < f_.k; ++i) {
            if (a[i] == 0 && chance(0.5)) a[i] = random_value(in, mid - 4, mid + 4);
          }
          c = chance(0.5) ? random_value(cf, -4, 4)
                          : value(cf, neg, emax - range(0, 3), static_cast<std::uint32_t>(rng_()));
          return;
        }
        case 1: {                                          // near M
          static const int kT[] = {0, 2, 1, -4, 4, 3, 8};  // the first four cover M, both sides of M + ulp/2, below M
          const int t = kT[(row / 4) % 7], j = (row / 28) % 4;
          c = near_max_c(j);
          const int n = 4 * j + t;
          bool placed = false;
          if (n >= 2 && chance(0.4)) {  // as two products
            const int n1 = range(1, n - 1);
            placed = quarter_ulps(0, n1) && quarter_ulps(1, n - n1);
          }
          if (!placed) {
            for (int i = 0; i < f_.k; ++i) a[i] = 0;
            for (int i = 0; i < f_.k && !placed; ++i) placed = quarter_ulps(i, n);
          }
          if (row >= 28 && chance(0.25)) {  // from the second round of t: a sticky term far below the ulp
            const int exponent = ulp_e - 2 - range(3, 20), i = f_.k - 1;
            if (a[i] == 0 && product_fits(b, i, exponent))
              product(i, chance(0.5), exponent, static_cast<std::uint32_t>(rng_()));
          }
          return;
        }
        case 2: {  // large C plus large products, random signs
          c = value(cf, neg, emax - range(0, 2), static_cast<std::uint32_t>(rng_()));
          const int n = range(1, 4);
          for (int i = 0; i < n; ++i) {
            product(i, chance(0.5), std::min(emax - range(0, 3), in.emax() + b_exponent(b[i])),
                    static_cast<std::uint32_t>(rng_()));
          }
          return;
        }
        default: {  // cancel back: C + X - X, X on the two products with the largest b
          c = chance(0.5) ? near_max_c(0) : value(cf, neg, emax - range(0, 1), static_cast<std::uint32_t>(rng_()));
          int i0 = 0, i1 = 1;
          for (int i = 0; i < f_.k; ++i) {
            if (b_exponent(b[i]) > b_exponent(b[i0]))
              i1 = i0, i0 = i;
            else if (i != i0 && (i1 == i0 || b_exponent(b[i]) > b_exponent(b[i1])))
              i1 = i;
          }
          const int exponent = std::min({emax, in.emax() + b_exponent(b[i0]), in.emax() + b_exponent(b[i1])});
          const std::uint32_t m =
              static_cast<std::uint32_t>(rng_()) & std::min(in.man_mask(), in.max_finite_man_field());
          product(i0, neg, exponent, m);
          product(i1, !neg, exponent, m);
          return;
        }
      }
    }
    static const int kJ[] = {0, 0, 1, 2};
    c = near_max_c(kJ[(row / 3) % 4]);
    switch (row % 3) {
      case 0:  // the largest products the inputs allow, mostly of C's sign
        for (int i = 0; i < f_.k; ++i) {
          if (chance(0.7))
            product(i, chance(0.8) ? neg : !neg, in.emax() + b_exponent(b[i]) - range(0, 1),
                    static_cast<std::uint32_t>(rng_()));
        }
        return;
      case 1:  // moderate products, random signs
        for (int i = 0; i < f_.k; ++i) a[i] = random_value(in, mid - 4, mid + 4);
        return;
      default:  // products that cancel pairwise (or none): D is exactly C
        for (int i = 0; i + 1 < f_.k; i += 2) {
          if (chance(0.5)) continue;
          const int exponent = std::min(in.emax() + b_exponent(b[i]), in.emax() + b_exponent(b[i + 1])) - range(0, 4);
          const std::uint32_t m = static_cast<std::uint32_t>(rng_()) & in.max_finite_man_field();
          const bool s = chance(0.5);
          product(i, s, exponent, m);
          product(i + 1, !s, exponent, m);
        }
        return;
    }
  }

  // f_boundary: the largest alignment exponent E of the row is set by an anchor, and 1-3
  // terms sit d = F-3..F+3 binades below E with their lowest significand bit set, so that
  // truncating terms to F fraction bits below E (the model) and keeping them exactly give
  // different sums. Every term is among C and the first 4 products, so it is one fused step
  // under every model (tf32 steps hold 4 products); the other products are +0. Designs,
  // cycling by row:
  //  0 anchors cancel: +X and -X at E (C and a product, or two products): D is the rounded
  //    sum of the boundary terms alone, so the bits truncation removes show directly
  //  1 on a rounding boundary: C at E holds only output-precision bits (RZ outputs), or
  //    C + half an output ulp is a midpoint with C odd (fp16 RNE); the boundary terms have
  //    C's opposite sign, so the exact sum falls just below the boundary and the truncated
  //    one may not
  //  2 partial cancellation (fp32 outputs): a product removes C's top input-precision bits,
  //    so the sum's leading bit drops and the output keeps bits below the F grid
  // The exponents are drawn until every term is a normal number of its format.
  void design_f_boundary(std::uint32_t* a, const std::uint32_t* b, std::uint32_t& c) {
    const Format& in = f_.input;
    const Format& cf = f_.cd;
    const int group = std::min(4, f_.k);
    const int p_out = in.width() == 8 ? 14 : cf.precision();  // Hopper fp8: e8m13
    const bool rne_out = cf == formats::fp16;
    const int centre = in.exp_bits >= 8 ? 0 : (in.emin() + in.emax()) / 2 + 1;
    struct Term {
      int slot;  // -1: C, else product index
      bool neg;
      int offset;              // the term's exponent is E - offset
      std::uint32_t mantissa;  // field bits of the term's format
    };
    for (int attempt = 0;; ++attempt) {
      int mode = (batch_row_ + attempt) % 3;
      if (mode == 2 && cf.precision() <= in.precision()) mode = 0;
      std::vector<int> free_products(group);
      for (int i = 0; i < group; ++i) free_products[i] = i;
      std::shuffle(free_products.begin(), free_products.end(), rng_);
      auto take = [&] {
        const int i = free_products.back();
        free_products.pop_back();
        return i;
      };
      std::vector<Term> terms;
      const bool neg = chance(0.5);
      const std::uint32_t x = static_cast<std::uint32_t>(rng_()) & in.man_mask();  // anchor fraction, input precision
      bool c_used = true;
      if (mode == 0) {
        c_used = chance(0.5);
        if (c_used)
          terms.push_back({-1, neg, 0, x << (cf.man_bits - in.man_bits)});
        else
          terms.push_back({take(), neg, 0, x});
        terms.push_back({take(), !neg, 0, x});
      } else if (mode == 1) {
        std::uint32_t cm = static_cast<std::uint32_t>(rng_()) & cf.man_mask();
        cm &= ~((1u << (cf.precision() - p_out)) - 1u);  // only output-precision bits
        if (rne_out) cm |= 1u;                           // odd: the midpoint rounds away under RNE
        terms.push_back({-1, neg, 0, cm});
        if (rne_out) terms.push_back({take(), neg, p_out, 0u});  // half an ulp of C
      } else {
        const std::uint32_t cm = static_cast<std::uint32_t>(rng_()) & cf.man_mask();
        terms.push_back({-1, neg, 0, cm});
        terms.push_back({take(), !neg, 0, cm >> (cf.man_bits - in.man_bits)});
      }
      const int boundary = std::min<int>(range(1, 3), static_cast<int>(free_products.size()) + (c_used ? 0 : 1));
      for (int n = 0; n < boundary; ++n) {
        int offset = F_ - 3 + range(0, 6);
        const bool term_neg = mode == 1 ? !neg : chance(0.5);
        // A product (a * 2^e) keeps in.man_bits bits below its lead: at offset <= F - in.man_bits
        // (fp8 at F-3) it has none below the grid; C can take that offset, else draw again.
        const bool product_reaches_grid = offset + in.man_bits > F_;
        if (!c_used && (free_products.empty() || chance(0.4) || !product_reaches_grid)) {
          c_used = true;
          terms.push_back({-1, term_neg, offset, (static_cast<std::uint32_t>(rng_()) & cf.man_mask()) | 1u});
        } else {
          if (!product_reaches_grid) offset = F_ - in.man_bits + 1 + range(0, in.man_bits + 2);
          terms.push_back({take(), term_neg, offset, (static_cast<std::uint32_t>(rng_()) & in.man_mask()) | 1u});
        }
      }
      // E: every term normal (products below the input's top binade, C below the output's).
      int lo = -100000, hi = 100000;
      for (const Term& t : terms) {
        const int tlo = t.slot < 0 ? cf.emin() : in.emin() + b_exponent(b[t.slot]);
        const int thi = t.slot < 0 ? cf.emax() - 1 : in.emax() - 1 + b_exponent(b[t.slot]);
        lo = std::max(lo, tlo + t.offset);
        hi = std::min(hi, thi + t.offset);
      }
      if (lo > hi) {
        if (attempt < 1000) continue;
        // Unreachable for the forms above; keep the row valid rather than loop forever.
        for (int i = 0; i < f_.k; ++i) a[i] = 0;
        c = 0;
        return;
      }
      const int want = centre + range(-3, 3);
      const int e = std::min(hi, std::max(lo, want));
      for (int i = 0; i < f_.k; ++i) a[i] = 0;
      c = 0;
      for (const Term& t : terms) {
        if (t.slot < 0)
          c = value(cf, t.neg, e - t.offset, t.mantissa);
        else
          a[t.slot] = value(in, t.neg != b_negative(b[t.slot]), e - t.offset - b_exponent(b[t.slot]), t.mantissa);
      }
      return;
    }
  }

  // signed_zeros: the exact D is zero in every designed row, so only the sign of the zero
  // result is measured (IEEE RN: -0 only when every term is -0). Rows cycle by 4 (batch_row_):
  //  0    every a[i] a zero of the sign opposite to b[i] (every product -0), C = +0
  //  1, 2 the same, C = -0 (IEEE: -0; mma.sync tf32 on sm_90 was seen to give +0)
  //  3    every product non-zero, in pairs x and -x (paired at random positions, so pairs
  //       straddle the fused steps), C = -0: the exact sum is zero with non-zero terms (IEEE
  //       RN: +0). The pairs' exponents lie within 2 binades, so every term fits any
  //       model's aligned width F (>= 13 with fp8's <= 8-bit products): the zero is exact
  //       under truncating alignment too.
  // C = -0 in 3 of every 4 rows. Checked in tests/test_probe_file.cpp.
  void design_signed_zeros(std::uint32_t* a, const std::uint32_t* b, std::uint32_t& c) {
    const Format& in = f_.input;
    const Format& cf = f_.cd;
    const int row = batch_row_ % 4;
    const std::uint32_t neg_zero_c = to_container(cf, cf.sign_mask());
    if (row < 3) {
      for (int i = 0; i < f_.k; ++i) a[i] = to_container(in, b_negative(b[i]) ? 0u : in.sign_mask());
      c = row == 0 ? to_container(cf, 0u) : neg_zero_c;
      return;
    }
    const int mid = in.exp_bits >= 8 ? 0 : (in.emin() + in.emax()) / 2 + 1;
    std::vector<int> order(static_cast<std::size_t>(f_.k));
    for (int i = 0; i < f_.k; ++i) order[i] = i;
    for (int i = f_.k - 1; i > 0; --i) std::swap(order[i], order[uniform(static_cast<std::uint32_t>(i + 1))]);
    const int base = mid + range(-2, 0);
    for (int j = 0; j + 1 < f_.k; j += 2) {
      const bool neg = chance(0.5);
      const int exponent = base + range(0, 2);
      const std::uint32_t mantissa = static_cast<std::uint32_t>(rng_());
      for (int h = 0; h < 2; ++h) {
        const int i = order[j + h];
        a[i] = value(in, (neg != (h == 1)) != b_negative(b[i]), exponent - b_exponent(b[i]), mantissa);
      }
    }
    c = neg_zero_c;
  }

  // zero_exponent: which exponent a zero term takes in the alignment. flashbits' presets
  // ignore zero terms (ZeroTermPolicy::ignored); the hypotheses this batch separates from it:
  // a zero product aligns at e_zero + e_partner (the zero's exponent field read as emin), or a
  // zero C aligns at C's emin (ZeroTermPolicy::as_min_exponent). The B columns of its tiles
  // (zero_exponent_b_column) hold one huge partner +-2^emax at a random position p and small
  // powers of two 2^eb elsewhere, eb chosen so the terms below are normal. Rows alternate:
  //  even  a[p] = +-0 (a zero times the huge partner: Ez = emin + emax), every other product
  //        nonzero with its lead at Ez - F + d, d in [-2, 6], lowest bit set; C +-0 or a value
  //        at the same level. Aligned at Ez, the terms lose bits below 2^(Ez - F) (all of them
  //        for d < 0); ignored, the zero changes nothing.
  //  odd   (forms whose products reach that far below C's emin: bf16, tf32) C = +-0, a[p] = 0
  //        too, the other products nonzero with leads in (g, g + man_bits], g = C's emin - F,
  //        lowest bit set: aligned at C's emin, their bits below 2^g are lost (the losses of
  //        up to 15 terms reach the fp32 output's subnormal ulp 2^-149); other forms (fp16,
  //        fp8: no normal product reaches there) repeat the even design.
  // Checked in exact arithmetic in tests/test_probe_file.cpp (the truncation is visible in the
  // rounded output in most rows).
  int zero_exponent_level() const { return f_.input.emin() + f_.input.emax() - F_; }  // Ez - F
  int zero_exponent_small_b() const {
    const Format& in = f_.input;
    const int eb = zero_exponent_level() + 2 - (in.emin() + in.emax()) / 2;
    return std::max(in.emin(), std::min(in.emax() - 1, eb));
  }
  void zero_exponent_b_column(std::uint32_t* b) {
    const Format& in = f_.input;
    const int p = range(0, f_.k - 1), eb = zero_exponent_small_b();
    for (int i = 0; i < f_.k; ++i) {
      b[i] = i == p ? value(in, chance(0.5), in.emax(), 0)
                    : value(in, chance(0.5), std::max(in.emin(), std::min(in.emax() - 1, eb + range(-1, 1))), 0);
    }
  }
  void design_zero_exponent(std::uint32_t* a, const std::uint32_t* b, std::uint32_t& c) {
    const Format& in = f_.input;
    const Format& cf = f_.cd;
    int p = 0;
    for (int i = 1; i < f_.k; ++i) {
      if (b_exponent(b[i]) > b_exponent(b[p])) p = i;
    }
    auto product = [&](int i, bool neg, int exponent, std::uint32_t mantissa) {
      a[i] = value(in, neg != b_negative(b[i]), exponent - b_exponent(b[i]), mantissa);
    };
    const std::uint32_t zero_a = to_container(in, chance(0.5) ? in.sign_mask() : 0u);
    const bool same_sign = chance(0.5), neg = chance(0.5);
    // Odd rows: C = 0 beside products whose leads lie in (g, g + man_bits], g = C's emin - F,
    // so each keeps its lowest bit (set) below the grid 2^g, where every product fits as a
    // normal input below C's emin.
    if (batch_row_ % 2 == 1) {
      const int g = cf.emin() - F_;
      auto lowest = [&](int i) { return std::max(g + 1, in.emin() + b_exponent(b[i])); };
      auto highest = [&] { return std::min(g + in.man_bits, cf.emin() - 1); };
      bool fits = true;
      for (int i = 0; i < f_.k && fits; ++i) fits = i == p || (lowest(i) <= highest() && product_fits(b, i, highest()));
      if (fits) {
        for (int i = 0; i < f_.k; ++i) {
          if (i == p)
            a[i] = zero_a;
          else
            product(i, same_sign ? neg : chance(0.5), range(lowest(i), highest()),
                    static_cast<std::uint32_t>(rng_()) | 1u);
        }
        c = to_container(cf, chance(0.5) ? cf.sign_mask() : 0u);
        return;
      }
    }
    // Even rows (and odd rows where the above cannot be built); a term whose a would be
    // subnormal moves up to the lowest normal one (narrow formats: fp8).
    const int base = zero_exponent_level() + range(-2, 6);
    for (int i = 0; i < f_.k; ++i) {
      const int exponent = i == p ? 0 : std::max(base - range(0, 2), in.emin() + b_exponent(b[i]));
      if (i == p)
        a[i] = zero_a;
      else if (product_fits(b, i, exponent))
        product(i, same_sign ? neg : chance(0.5), exponent, static_cast<std::uint32_t>(rng_()) | 1u);
      else
        a[i] = to_container(in, 0u);
    }
    c = chance(0.5) ? to_container(cf, chance(0.5) ? cf.sign_mask() : 0u)
                    : value(cf, chance(0.5), base - range(0, 2), static_cast<std::uint32_t>(rng_()) | 1u);
  }

  // inf_overflow: C = +-inf together with a product beyond the output's range (where the
  // inputs can make one: bf16/tf32 into fp32, fp16 into fp16; else the largest product the
  // inputs allow) of C's sign or the opposite one. Rows cycle by 4: (C = +inf, same sign),
  // (+inf, opposite), (-inf, same), (-inf, opposite). IEEE-style per-product rounding turns an
  // opposite-sign overflowing product into inf - inf = NaN; an exact (wide) accumulation
  // keeps C's inf; flashbits' presets say which. In half the rows a second large product
  // of the same sign as the first, the other products moderate or zero. Each tile's B
  // columns hold a +-2^2 (inf_overflow_b_column) so the product can exceed the range.
  void inf_overflow_b_column(std::uint32_t* b) {
    design_b_column(b);
    const Format& in = f_.input;
    b[range(0, f_.k - 1)] = value(in, chance(0.5), std::min(2, in.emax()), 0);
  }
  void design_inf_overflow(std::uint32_t* a, const std::uint32_t* b, std::uint32_t& c) {
    const Format& in = f_.input;
    const Format& cf = f_.cd;
    const int row = batch_row_ % 4;
    const bool c_neg = row >= 2, opposite = row % 2 == 1;
    const int mid = in.exp_bits >= 8 ? 0 : (in.emin() + in.emax()) / 2 + 1;
    c = pack_inf(cf, c_neg);
    int big = 0;
    for (int i = 1; i < f_.k; ++i) {
      if (b_exponent(b[i]) > b_exponent(b[big])) big = i;
    }
    const bool p_neg = c_neg != opposite;
    for (int i = 0; i < f_.k; ++i) a[i] = chance(0.3) ? 0u : random_value(in, mid - 4, mid + 4);
    // the largest a: exponent emax, the mantissa the largest finite one of that binade at most
    a[big] = value(in, p_neg != b_negative(b[big]), in.emax(), static_cast<std::uint32_t>(rng_()));
    if (chance(0.5)) {
      const int second = (big + 1 + range(0, f_.k - 2)) % f_.k;
      a[second] = value(in, p_neg != b_negative(b[second]), in.emax(), static_cast<std::uint32_t>(rng_()));
    }
  }

  // zero_floor (issue 38 item 7): which lowest alignment exponent ("floor") a zero C or a
  // zero product imposes on a fused step. Every row makes the exact sum fall just short of a
  // multiple of 2^-149 (the fp32 subnormal ulp), so that a floor shows as a one-ulp
  // difference: K-2 positive products a * 2^-21, the first with its lead at 2^-139, the
  // others at 2^-147..2^-139, every bit a multiple of 2^-149 (their sum N * 2^-149); one
  // negative product T = -2^-126 * 2^(g+126) = -2^g, g = -166 + t % 17 for the batch's tile
  // t; one partner slot. Aligned at E and truncated to the grid 2^(E-25), T survives (RZ
  // gives N-1 ulps) iff g >= E - 25, else D = N ulps: today's rule (zero terms ignored,
  // E = -139) flips at g = -164, a floor X at g = X - 25. The slots' positions are drawn
  // per tile (the same in every column). Partner slot per column n: b = 2^-21, +2^127,
  // -2^127, 2^64, 2^0, 2^-64, 2^-126, +0. Rows (r % 4): a[partner] = +0, 2^-122, -0,
  // 2^-122: a zero product against each partner in the zero rows; in the others column 0
  // has no zero product (a 2^-143 product) and column 7 a zero product 2^-122 * +0 (the
  // other columns' large or far-below products are recorded too). C = +0 in rows r % 16 <
  // 8, -0 in the others: C is zero in every row.
  void fill_zero_floor_tile(std::uint32_t* A, std::uint32_t* Bt, std::uint32_t* C) {
    const Format& in = f_.input;
    const Format& cf = f_.cd;
    const int M = f_.m, K = f_.k;
    const int g = -166 + zero_floor_tile_++ % kZeroFloorGs;
    std::vector<int> order(static_cast<std::size_t>(K));
    for (int i = 0; i < K; ++i) order[i] = i;
    for (int i = K - 1; i > 0; --i) std::swap(order[i], order[uniform(static_cast<std::uint32_t>(i + 1))]);
    const int t_slot = order[0], partner = order[1];
    static const int kPartnerExp[kN] = {-21, 127, 127, 64, 0, -64, -126, 0};
    for (int n = 0; n < kN; ++n) {
      std::uint32_t* b = Bt + n * K;
      for (int i = 0; i < K; ++i) b[i] = value(in, false, -21, 0);
      b[t_slot] = value(in, false, g + 126, 0);
      b[partner] = n == kN - 1 ? to_container(in, 0u) : value(in, n == 2, kPartnerExp[n], 0);
    }
    for (int r = 0; r < M; ++r) {
      std::uint32_t* a = A + r * K;
      for (int j = 2; j < K; ++j) {
        const int lead = j == 2 ? -139 : range(-147, -139);
        // bits below 2^-149 cleared: every product a multiple of the fp32 subnormal ulp
        const int drop = std::max(0, in.man_bits - (lead + 149));
        const std::uint32_t mantissa = ((static_cast<std::uint32_t>(rng_()) & in.man_mask()) >> drop) << drop;
        a[order[j]] = value(in, false, lead + 21, mantissa);
      }
      a[t_slot] = value(in, true, -126, 0);
      const int kind = r % 4;
      a[partner] = kind % 2 == 1 ? value(in, false, -122, 0) : to_container(in, kind == 2 ? in.sign_mask() : 0u);
      for (int n = 0; n < kN; ++n) C[r * kN + n] = to_container(cf, r % 16 < 8 ? 0u : cf.sign_mask());
    }
  }

  // Fills one tile (A[m][k], Bt[n][k], C[m][n]) of the given batch.
  void fill_tile(Batch batch, std::uint32_t* A, std::uint32_t* Bt, std::uint32_t* C) {
    const Format& in = f_.input;
    const int M = f_.m, K = f_.k;
    if (batch == kZeroFloor) {
      fill_zero_floor_tile(A, Bt, C);
      return;
    }
    if (batch == kRandomBits || batch == kRandomNormal || batch == kSpecials || batch == kChained) {
      const int mid = in.exp_bits >= 8 ? 0 : (in.emin() + in.emax()) / 2 + 1;
      auto element = [&](const Format& fmt, int centre) {
        if (batch == kRandomBits) return random_bits(fmt);
        if (batch == kSpecials && chance(0.08)) return special(fmt);
        return random_value(fmt, centre - 4, centre + 4);
      };
      for (int i = 0; i < M * K; ++i) A[i] = element(in, mid);
      for (int i = 0; i < kN * K; ++i) Bt[i] = element(in, mid);
      for (int i = 0; i < M * kN; ++i) C[i] = element(f_.cd, 2 * mid);
      return;
    }
    for (int n = 0; n < kN; ++n) {
      if (batch == kZeroExponent)
        zero_exponent_b_column(Bt + n * K);
      else if (batch == kInfOverflow)
        inf_overflow_b_column(Bt + n * K);
      else
        design_b_column(Bt + n * K);
    }
    for (int i = 0; i < M * kN; ++i) C[i] = random_value(f_.cd, -4, 4);
    // Row r is designed against column r % 8; its other seven outputs mix it with other columns.
    for (int r = 0; r < M; ++r) {
      std::uint32_t c = 0;
      design_row(batch, A + r * K, Bt + (r % kN) * K, c);
      C[r * kN + r % kN] = c;
    }
  }

 private:
  const FormInfo& f_;
  std::mt19937_64 rng_;
  int F_;
  // Designed rows of the current batch so far: the overflow and f_boundary designs cycle by it.
  int row_batch_ = -1, batch_row_ = 0;
  int zero_floor_tile_ = 0;  // zero_floor tiles filled so far: tile t has g = -166 + t % 17
};

template <int F, bool kChain>
void launch(int tiles, const std::uint32_t* A, const std::uint32_t* Bt, const std::uint32_t* C, std::uint32_t* D,
            std::uint32_t* D2) {
  if (tiles <= 0) return;
  if constexpr (F >= kWgmmaBf16)
    wgmma_kernel<F, kChain><<<tiles, 128>>>(A, Bt, C, D, D2);
  else
    mma_kernel<F, kChain><<<tiles, 32>>>(A, Bt, C, D, D2);
}
template <int F>
void launch_both(int tiles, int chained_from, int chained_to, std::size_t a_n, std::size_t b_n, std::size_t c_n,
                 const std::uint32_t* A, const std::uint32_t* Bt, const std::uint32_t* C, std::uint32_t* D,
                 std::uint32_t* D2) {
  const std::size_t first = static_cast<std::size_t>(chained_from), after = static_cast<std::size_t>(chained_to);
  launch<F, false>(chained_from, A, Bt, C, D, nullptr);
  launch<F, true>(chained_to - chained_from, A + a_n * first, Bt + b_n * first, C + c_n * first, D + c_n * first, D2);
  launch<F, false>(tiles - chained_to, A + a_n * after, Bt + b_n * after, C + c_n * after, D + c_n * after, nullptr);
}
// Tiles [0, chained_from) and [chained_to, tiles) run one instruction; tiles
// [chained_from, chained_to) also write the chained result D2 (their own tile index from 0).
void launch_form(int form, int tiles, int chained_from, int chained_to, std::size_t a_n, std::size_t b_n,
                 std::size_t c_n, const std::uint32_t* A, const std::uint32_t* Bt, const std::uint32_t* C,
                 std::uint32_t* D, std::uint32_t* D2) {
  switch (form) {
    case kMmaBf16F32:
      launch_both<kMmaBf16F32>(tiles, chained_from, chained_to, a_n, b_n, c_n, A, Bt, C, D, D2);
      break;
    case kMmaF16F32:
      launch_both<kMmaF16F32>(tiles, chained_from, chained_to, a_n, b_n, c_n, A, Bt, C, D, D2);
      break;
    case kMmaF16F16:
      launch_both<kMmaF16F16>(tiles, chained_from, chained_to, a_n, b_n, c_n, A, Bt, C, D, D2);
      break;
    case kMmaTf32F32:
      launch_both<kMmaTf32F32>(tiles, chained_from, chained_to, a_n, b_n, c_n, A, Bt, C, D, D2);
      break;
    case kWgmmaBf16:
      launch_both<kWgmmaBf16>(tiles, chained_from, chained_to, a_n, b_n, c_n, A, Bt, C, D, D2);
      break;
    case kWgmmaF16:
      launch_both<kWgmmaF16>(tiles, chained_from, chained_to, a_n, b_n, c_n, A, Bt, C, D, D2);
      break;
    case kWgmmaE4m3:
      launch_both<kWgmmaE4m3>(tiles, chained_from, chained_to, a_n, b_n, c_n, A, Bt, C, D, D2);
      break;
    case kWgmmaE5m2:
      launch_both<kWgmmaE5m2>(tiles, chained_from, chained_to, a_n, b_n, c_n, A, Bt, C, D, D2);
      break;
  }
  FB_CUDA_CHECK(cudaGetLastError());
  FB_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace fb::gpu
