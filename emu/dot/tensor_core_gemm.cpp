// emu/dot/tensor_core_gemm.cpp: fused_dot_rows, the blocked tensor-core GEMM kernel
// (contract: emu/dot/tensor_core.hpp; docs/DESIGN.md §4).
//
// One description of the fused step, written once (`block`, below) over an instruction-set
// traits type, and instantiated for AVX-512 (16 lanes), AVX2 (8 lanes) and portable C++
// (one lane), chosen at run time. The rules are fused_dot's (emu/dot/tensor_core.cpp); what
// differs is only where the exactness comes from:
// - the inputs are values of formats of at most 11 significand bits, so a product a*b is
//   exact in fp32 whenever it is a normal fp32 number;
// - a step's alignment exponent E and unit u = E - F turn each term t into
//   trunc(t * 2^-u): an exact scaling by a power of two, then one fp32-to-int32 conversion
//   that truncates toward zero (the sign-magnitude truncation of fused_step_body);
// - those integers are below 2^(F+2) in magnitude and are summed exactly in int32, in
//   chunks short enough that a chunk cannot overflow, the chunks in fp64 (exact below 2^53);
// - the exact sum times 2^u is rounded once into the output (dot_step_output's rules).
// Where those arguments fail, the lane is flagged and recomputed by fused_dot, which holds
// every rule: E above kHighestExponent (a product could overflow fp32; overflow, infinities
// and NaN in C live there), E below F - 125 with a non-zero term (2^-u would overflow), and
// a result at or beyond the output's largest finite value. A product that underflows fp32
// is harmless: with E >= F - 125 it is below 2^-125 * 2^125 = 1 after scaling, and
// truncates to 0 whether or not fp32 rounded it, as the exact term does.
// Inputs with a NaN or an infinity never reach the kernel (fused_dot_rows routes them).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "emu/array_lanes.hpp"
#include "emu/dot/tensor_core.hpp"

#ifdef FLASHBITS_LANES_MULTIVERSION
#include <immintrin.h>
#endif

namespace fb {
namespace {

// Alignment exponent of a zero term: far below any real one (those lie in [-150, 128]), also
// when two are added, yet with every alignment exponent, and every sum of two, inside int16
// (the 16-bit exponent path, block<..., kAlign16>): -12000 + -12000 and 16000 + 16000 fit.
constexpr std::int32_t kNoTerm = -12000;
// A step with E above this goes to fused_dot: its products are below 2^(E+2) <= 2^127,
// finite in fp32, and C (below 2^(E+1)) is finite too.
constexpr int kHighestExponent = 125;

// What one model's step needs, in the form the lanes use.
struct StepRule {
  int fraction_bits;  // F
  int step;           // products per fused step
  int chunk;          // products per int32 partial sum (C joins the first)
  // F - 125: the smallest E whose scale 2^(F-E) is a normal fp32. E is clamped to at least
  // this, so u = E - F >= -125 and a non-zero sum of integers is at least 2^-125 in magnitude:
  // a toward-zero output (fp32, e8m13, whose normal range starts at 2^-126; step_rule checks
  // it) is 0 or a normal number, and the vector kernels need no subnormal path for it.
  std::int32_t lowest;
  std::int32_t accumulator_emin;
  DotOutput output;
  int output_fraction_bits;  // the output's fraction bits (fp32 23, e8m13 13, fp16 10)
  int output_emin;
  double output_max;  // largest finite output; a result at or past it is redone
  // The output rounding on fp64 lanes: in the output's normal range, keep the top bits of
  // the exact value's fp64 significand (after adding just under half an output ulp plus its
  // last kept bit, for round-to-nearest-even); below it, round onto the fixed grid
  // 2^(emin - fraction bits).
  int dropped;                // 52 - output fraction bits
  double normal_floor;        // 2^output_emin
  double to_grid, from_grid;  // 2^(fraction bits - emin) and its inverse
  bool nearest;               // fp16_rne: to nearest even; otherwise toward zero
  // The tallied kernel (block<..., kTally>): a step's carry-out is |sum| >= 2^(F+1); a tie,
  // the dropped part of the exact value exactly half an output ulp (round_pack's tie).
  double carry_from;                 // 2^(F+1)
  std::int32_t tally_product_floor;  // 2m - 149, m the input's fraction bits
  bool tally_checks_products;        // whether a product or its scaled value can be inexact in fp32
  // The narrow form (block<..., kNarrow>): the whole step summed in one int32 and rounded
  // toward zero from it, without the fp64 chunk sums. The step's exact sum is below
  // B = 2^(F+1) + step * 2^(F+2); where B < 2^32 an int32 sum that wrapped reads at least
  // 2^32 - B in magnitude, so a lane whose |sum| reaches narrow_limit = min(2^32 - B, 2^31) is
  // redone by fused_dot (for 16 bf16 products at F = 25 that is a sum within 2^26 of 2^31, which
  // only terms near their largest significand reach). Only toward-zero outputs, with an fp32
  // accumulator (emin -126: a normal fp32 C is its own alignment exponent).
  bool narrow;
  std::uint32_t narrow_limit;
  // The tallied kernel's remainder sum (each remainder in (-1, 1) in units 2^u) is exact in fp64
  // when every remainder's lowest bit is at least 2^-(53 - b), 2^b > step (so 2^b >= the terms):
  // its partial sums are then integers below 2^53 in those units. A product's lowest bit is at
  // least 2^(A - 2m) (A its alignment exponent, m the input's fraction bits), C's at least
  // 2^(A - 23): the sum is certified exact when every non-zero product has
  // A >= u + exact_product_floor and a non-zero C has A >= u + exact_c_floor. (After the fields
  // the untallied kernels read, so that their code stays as it was.)
  std::int32_t exact_product_floor, exact_c_floor;
  // Where the sum is not certified exact its error is still within 2^(2b-54) units of the exact
  // sum (each of at most 2^b - 1 additions rounds by at most 2^(b-54): the partial sums stay
  // below 2^b), so the step's error v = fl(removed * 2^u + residue) has the exact error's sign
  // unless |v| <= near_zero * 2^u, near_zero = 2^(2b-53): only those steps are redone.
  double near_zero;
};

StepRule step_rule(const TensorCoreModel& m) {
  const Format& out = dot_output_format(m.output);
  const int f = m.fraction_bits;
  // C is below 2^(F+1) and each product term below 2^(F+2) after scaling (a product's
  // significand is below 4): a chunk of n products plus C stays below 2^31 when
  // 2^(F+1) + n * 2^(F+2) <= 2^31, i.e. n <= 2^(29-F) - 1/2.
  const int chunk =
      f >= 29 ? 0 : static_cast<int>(std::min<std::int64_t>(m.products_per_step, (std::int64_t{1} << (29 - f)) - 1));
  const std::int64_t step_bound = (std::int64_t{1} << (f + 1)) + m.products_per_step * (std::int64_t{1} << (f + 2));
  const bool toward_zero = m.output == DotOutput::fp32_rz || m.output == DotOutput::fp32_e8m13;
  const auto narrow_limit =
      static_cast<std::uint32_t>(std::min((std::int64_t{1} << 32) - step_bound, std::int64_t{1} << 31));
  if (m.output != DotOutput::fp16_rne && out.emin() > -125)
    throw std::logic_error("step_rule: a toward-zero output whose normal range starts above 2^-125");
  const bool narrow =
      toward_zero && f < 29 && step_bound < (std::int64_t{1} << 32) && accumulator_format(m).emin() <= -126;
  const int term_bits = std::bit_width(static_cast<unsigned>(std::max(m.products_per_step, 1)));  // 2^b > step
  const int exact_bits = 53 - term_bits;
  return StepRule{
      f, m.products_per_step, chunk, f - 125, accumulator_format(m).emin(), m.output, out.man_bits, out.emin(),
      to_double(out, to_container(out, out.max_finite_pattern())), 52 - out.man_bits, std::ldexp(1.0, out.emin()),
      std::ldexp(1.0, out.man_bits - out.emin()), std::ldexp(1.0, out.emin() - out.man_bits),
      m.output == DotOutput::fp16_rne, std::ldexp(1.0, f + 1), 2 * m.input.man_bits - 149,
      // The lowest bit a product can have is 2^(2(emin - m)); scaled by 2^-u, u up to
      // kHighestExponent - F, it stays at or above 2^-149 for fp16 and the fp8 formats.
      2 * (m.input.emin() - m.input.man_bits) - std::max(0, kHighestExponent - f) < -149, narrow, narrow_limit,
      2 * m.input.man_bits - exact_bits, formats::fp32.man_bits - exact_bits, std::ldexp(1.0, 2 * term_bits - 53)};
}

// DotStepTally's signed error over a block's steps, lane after lane, each lane's steps in order:
// error[step * width + lane] for lane in [lane, lanes), step < steps, added to `sum` one at a
// time. The tallied kernel runs a previous block's chain, `quota` lanes per step of its own, so
// that the fp64 chain's latency overlaps the vector work.
struct ErrorChain {
  const double* error = nullptr;
  std::size_t width = 0;
  int steps = 0, lane = 0, lanes = 0;
  double sum = 0.0;
  [[gnu::always_inline]] inline void run(int lane_count) {
    for (const int end = std::min(lanes, lane + lane_count); lane < end; ++lane) {
      const double* error_of_lane = error + lane;
      for (int t = 0; t < steps; ++t) sum += error_of_lane[static_cast<std::size_t>(t) * width];
    }
  }
};
// What the tallied kernel writes per step s: the signed error of lane l at error[s * lanes + l]
// (lanes: the block's G*W), and bit l of carry[s], tie[s], up[s], down[s] (DotStepTally::add's
// counts); bit l of inexact[s] where that step's remainder sum is not certified exact
// (StepRule::exact_product_floor) and its error is near zero (StepRule::near_zero): its error, up
// and down are to be redone; the step's C at step_c[s * lanes + l]; and the chain it continues.
struct TallyOut {
  double* error;
  std::uint64_t *carry, *tie, *up, *down, *inexact;
  float* step_c;
  ErrorChain* chain;
  int quota;
};
constexpr int kNoTally = 0, kTally = 1, kTallyCheckTerms = 2;

// The alignment exponent of a NaN or an infinity: far above kHighestExponent, also when
// added to a zero's kNoTerm (4000), so that any step it joins is redone by fused_dot.
constexpr std::int32_t kNotFinite = 16000;
static_assert(2 * kNoTerm >= -32768 && 2 * kNotFinite <= 32767 && kNotFinite + kNoTerm > kHighestExponent &&
              kNoTerm + 128 < kNoTerm / 2);
// A panel's alignment exponents: int32, or int16 for block<..., kAlign16>.
template <bool kAlign16>
using PanelAlignment = std::conditional_t<kAlign16, std::int16_t, std::int32_t>;

// The alignment exponent of one value: max(exponent, emin) for a finite non-zero value (a
// float subnormal reads as -127, below every emin), kNoTerm for a zero, kNotFinite for a
// NaN or an infinity. Written as selects, without branches, so that a loop over an array
// vectorises (the instruction sets' `alignments`, emu/dot/tensor_core_gemm_block.inc).
inline std::int32_t input_alignment(float x, int emin) {
  const auto bits = std::bit_cast<std::uint32_t>(x);
  const std::int32_t field = static_cast<std::int32_t>((bits >> 23) & 0xffu);
  const std::int32_t exponent = field - 127 > emin ? field - 127 : emin;
  const std::int32_t finite = field == 0xff ? kNotFinite : exponent;
  return (bits & 0x7fffffffu) == 0 ? kNoTerm : finite;
}

// ---------------------------------------------------------------------------------------
// Instruction-set traits. Each gives W lanes of fp32 (F), int32 (I), a lane mask (M), the
// exact step sum (Wide), and the step's output rounding.

namespace portable {
struct Lanes {
  static constexpr int W = 1;
  using F = float;
  using I = std::int32_t;
  using M = bool;
  using Wide = std::int64_t;
  static F load(const float* p) { return *p; }
  static I load(const std::int32_t* p) { return *p; }
  static F splat(float x) { return x; }
  static I splat(std::int32_t x) { return x; }
  static F mul(F a, F b) { return a * b; }
  // Toward zero; a flagged lane may hold anything, so out-of-range values give 0 (never UB).
  static I truncate(F x) { return std::fabs(x) < 2147483648.0f ? static_cast<I>(x) : 0; }
  static I add(I a, I b) { return static_cast<I>(static_cast<std::uint32_t>(a) + static_cast<std::uint32_t>(b)); }
  static I max(I a, I b) { return std::max(a, b); }
  static I min(I a, I b) { return std::min(a, b); }
  static I sub(I a, I b) { return static_cast<I>(static_cast<std::uint32_t>(a) - static_cast<std::uint32_t>(b)); }
  static I min_unsigned(I a, I b) { return static_cast<std::uint32_t>(a) < static_cast<std::uint32_t>(b) ? a : b; }
  static M below_unsigned(I a, I b) { return static_cast<std::uint32_t>(a) < static_cast<std::uint32_t>(b); }
  static M greater(I a, I b) { return a > b; }
  static M either(M a, M b) { return a || b; }
  static M both(M a, M b) { return a && b; }
  static M none() { return false; }
  // 2^(F - e) for e in [lowest, kHighestExponent]: a normal fp32.
  static F scale_down(int f, I e) { return std::bit_cast<float>(static_cast<std::uint32_t>(f - e + 127) << 23); }
  static I accumulator_alignment(F acc, std::int32_t emin) { return input_alignment(acc, emin); }
  static void wide_zero(Wide& w) { w = 0; }
  static void wide_add(Wide& w, I part) { w += part; }
  static F round_output(const StepRule& rule, const Wide& sum, I e, M& bad) {
    const std::uint32_t bits = dot_step_output(rule.output, sum, e - rule.fraction_bits);
    const double value = to_double(rule.nearest ? formats::fp16 : formats::fp32, bits);
    bad = bad || !(std::fabs(value) < rule.output_max);
    return static_cast<float>(value);
  }
  // The narrow form (StepRule::narrow): the int64 sum of the int32 one, flagged where it may
  // have wrapped.
  static F round_narrow(const StepRule& rule, I sum, I e, M& bad) {
    const std::uint32_t magnitude = sum < 0 ? 0u - static_cast<std::uint32_t>(sum) : static_cast<std::uint32_t>(sum);
    bad = bad || magnitude >= rule.narrow_limit;
    return round_output(rule, Wide{sum}, e, bad);
  }
  // (The vector traits' shortcuts for the narrow form; the general forms here.)
  static I narrow_accumulator_alignment(F acc, std::int32_t emin) { return accumulator_alignment(acc, emin); }
  static M narrow_input_check(F) { return false; }
  static void store(float* p, F x) { *p = x; }
  static std::uint64_t mask_bits(M m) { return m ? 1u : 0u; }
  // The tally (block<..., kTally>).
  using Removed = double;
  static F fraction(F x) { return x - std::trunc(x); }
  static void removed_start(Removed& r, F fraction) { r = fraction; }
  static void removed_add(Removed& r, F fraction) { r += static_cast<double>(fraction); }
  static void tally_step(const StepRule& rule, const Wide& sum, I unit, F result, Removed removed, double* error,
                         std::uint64_t& carry, std::uint64_t& tie, std::uint64_t& up, std::uint64_t& down,
                         std::uint64_t& near_zero) {
    const double value = static_cast<double>(sum);
    const double exact = std::ldexp(value, unit);
    const double step_error = -(std::ldexp(removed, unit) + (exact - static_cast<double>(result)));
    *error = step_error;
    near_zero = std::fabs(step_error) <= std::ldexp(rule.near_zero, unit);
    carry = std::fabs(value) >= rule.carry_from;
    const auto bits = std::bit_cast<std::uint64_t>(exact);
    const std::uint64_t low = (std::uint64_t{1} << rule.dropped) - 1, half = std::uint64_t{1} << (rule.dropped - 1);
    const double scaled = std::fabs(exact * rule.to_grid);
    tie = std::fabs(exact) < rule.normal_floor ? scaled - std::trunc(scaled) == 0.5 : (bits & low) == half;
    const bool away_from_zero = (step_error > 0) == (value >= 0);  // as DotStepTally::add
    up = step_error != 0.0 && away_from_zero;
    down = step_error != 0.0 && !away_from_zero;
  }
};
#include "emu/dot/tensor_core_gemm_block.inc"
}  // namespace portable

#ifdef FLASHBITS_LANES_MULTIVERSION
// Each instruction set's traits and kernel are compiled under its own target (GCC: a target
// pragma; clang: the target attribute applied to every function of the region). The includes
// above stay at the default target, so no shared inline function is built for it.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,popcnt"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,popcnt")
#endif
namespace avx2 {
struct Lanes {
  static constexpr int W = 8;
  using F = __m256;
  using I = __m256i;
  using M = __m256i;
  struct Wide {
    __m256d low, high;
  };
  [[gnu::always_inline]] inline static F load(const float* p) { return _mm256_loadu_ps(p); }
  [[gnu::always_inline]] inline static I load(const std::int32_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  [[gnu::always_inline]] inline static F splat(float x) { return _mm256_set1_ps(x); }
  [[gnu::always_inline]] inline static I splat(std::int32_t x) { return _mm256_set1_epi32(x); }
  [[gnu::always_inline]] inline static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  [[gnu::always_inline]] inline static I truncate(F x) { return _mm256_cvttps_epi32(x); }
  [[gnu::always_inline]] inline static I add(I a, I b) { return _mm256_add_epi32(a, b); }
  [[gnu::always_inline]] inline static I max(I a, I b) { return _mm256_max_epi32(a, b); }
  [[gnu::always_inline]] inline static I min(I a, I b) { return _mm256_min_epi32(a, b); }
  [[gnu::always_inline]] inline static I sub(I a, I b) { return _mm256_sub_epi32(a, b); }
  [[gnu::always_inline]] inline static I min_unsigned(I a, I b) { return _mm256_min_epu32(a, b); }
  [[gnu::always_inline]] inline static M below_unsigned(I a, I b) {
    const __m256i flip = _mm256_set1_epi32(std::numeric_limits<std::int32_t>::min());
    return _mm256_cmpgt_epi32(_mm256_xor_si256(b, flip), _mm256_xor_si256(a, flip));
  }
  [[gnu::always_inline]] inline static M greater(I a, I b) { return _mm256_cmpgt_epi32(a, b); }
  [[gnu::always_inline]] inline static M either(M a, M b) { return _mm256_or_si256(a, b); }
  [[gnu::always_inline]] inline static M both(M a, M b) { return _mm256_and_si256(a, b); }
  [[gnu::always_inline]] inline static M none() { return _mm256_setzero_si256(); }
  [[gnu::always_inline]] inline static F scale_down(int f, I e) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(f + 127), e), 23));
  }
  [[gnu::always_inline]] inline static I accumulator_alignment(F acc, std::int32_t emin) {
    const __m256i bits = _mm256_castps_si256(acc);
    const __m256i exponent = _mm256_sub_epi32(_mm256_and_si256(_mm256_srli_epi32(bits, 23), _mm256_set1_epi32(0xff)),
                                              _mm256_set1_epi32(127));
    const __m256i zero =
        _mm256_cmpeq_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff)), _mm256_setzero_si256());
    return _mm256_blendv_epi8(_mm256_max_epi32(exponent, _mm256_set1_epi32(emin)), _mm256_set1_epi32(kNoTerm), zero);
  }
  [[gnu::always_inline]] inline static void wide_zero(Wide& w) { w.low = w.high = _mm256_setzero_pd(); }
  [[gnu::always_inline]] inline static void wide_add(Wide& w, I part) {
    w.low = _mm256_add_pd(w.low, _mm256_cvtepi32_pd(_mm256_castsi256_si128(part)));
    w.high = _mm256_add_pd(w.high, _mm256_cvtepi32_pd(_mm256_extracti128_si256(part, 1)));
  }
  // One half: exact = sum * 2^unit, rounded; `bad` gets |exact| >= output_max.
  [[gnu::always_inline]] inline static __m256d round_half(const StepRule& g, __m256d sum, __m128i unit, __m256d& bad) {
    const __m256d sign = _mm256_set1_pd(-0.0), zero = _mm256_setzero_pd();
    const __m256d power = _mm256_castsi256_pd(
        _mm256_slli_epi64(_mm256_add_epi64(_mm256_cvtepi32_epi64(unit), _mm256_set1_epi64x(1023)), 52));
    const __m256d exact = _mm256_mul_pd(sum, power);
    const __m256d magnitude = _mm256_andnot_pd(sign, exact);
    __m256i bits = _mm256_castpd_si256(exact);
    if (g.nearest)
      bits = _mm256_add_epi64(
          _mm256_add_epi64(bits, _mm256_set1_epi64x((std::int64_t{1} << (g.dropped - 1)) - 1)),
          _mm256_and_si256(_mm256_srl_epi64(bits, _mm_cvtsi32_si128(g.dropped)), _mm256_set1_epi64x(1)));
    const __m256d normal =
        _mm256_castsi256_pd(_mm256_and_si256(bits, _mm256_set1_epi64x(~((std::int64_t{1} << g.dropped) - 1))));
    bad = _mm256_or_pd(bad, _mm256_cmp_pd(magnitude, _mm256_set1_pd(g.output_max), _CMP_GE_OQ));
    // A sum of +0 gives +0 above. Results below the output's normal range are rare: their
    // grid, and the +0 of a tiny negative sum, only where a lane has one.
    const __m256d small = _mm256_cmp_pd(magnitude, _mm256_set1_pd(g.normal_floor), _CMP_LT_OQ);
    if (_mm256_testz_pd(small, small)) return normal;
    const __m256d scaled = _mm256_mul_pd(exact, _mm256_set1_pd(g.to_grid));
    const __m256d on_grid = g.nearest ? _mm256_round_pd(scaled, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
                                      : _mm256_round_pd(scaled, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256d below = _mm256_mul_pd(on_grid, _mm256_set1_pd(g.from_grid));
    const __m256d result = _mm256_blendv_pd(normal, below, small);
    return _mm256_and_pd(result, _mm256_cmp_pd(result, zero, _CMP_NEQ_UQ));
  }
  [[gnu::always_inline]] inline static F round_output(const StepRule& rule, const Wide& sum, I e, M& bad) {
    const __m256i unit = _mm256_sub_epi32(e, _mm256_set1_epi32(rule.fraction_bits));
    if (!rule.nearest) {
      // Toward zero (fp32 and e8m13 outputs): clearing the fp64 sum's low `dropped` significand
      // bits truncates it to the output's precision whatever its exponent; the narrowing to
      // fp32 is then exact, and so is the scaling by 2^unit (a normal fp32): the result is 0 or
      // a normal number (StepRule::lowest).
      const __m256d keep = _mm256_castsi256_pd(_mm256_set1_epi64x(~((std::int64_t{1} << rule.dropped) - 1)));
      const __m256 truncated = _mm256_set_m128(_mm256_cvtpd_ps(_mm256_and_pd(sum.high, keep)),
                                               _mm256_cvtpd_ps(_mm256_and_pd(sum.low, keep)));
      const __m256 power = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(unit, _mm256_set1_epi32(127)), 23));
      const __m256 result = _mm256_mul_ps(truncated, power);
      const __m256 magnitude = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), result);
      bad = _mm256_or_si256(bad, _mm256_castps_si256(_mm256_cmp_ps(
                                     magnitude, _mm256_set1_ps(static_cast<float>(rule.output_max)), _CMP_GE_OQ)));
      return result;
    }
    __m256d bad_low = _mm256_setzero_pd(), bad_high = _mm256_setzero_pd();
    const __m256d low = round_half(rule, sum.low, _mm256_castsi256_si128(unit), bad_low);
    const __m256d high = round_half(rule, sum.high, _mm256_extracti128_si256(unit, 1), bad_high);
    // The fp64 results lie on the output's grid, so the narrowing is exact.
    // Each 64-bit mask lane is all ones or zeros: its low 32 bits make the 32-bit lane.
    const __m256i pick = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    const __m128i low_bits = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(_mm256_castpd_si256(bad_low), pick));
    const __m128i high_bits = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(_mm256_castpd_si256(bad_high), pick));
    bad = _mm256_or_si256(bad, _mm256_set_m128i(high_bits, low_bits));
    return _mm256_set_m128(_mm256_cvtpd_ps(high), _mm256_cvtpd_ps(low));
  }
  // The narrow form (StepRule::narrow): the step's exact sum as one int32 per lane. A lane
  // whose |sum| reaches narrow_limit may have wrapped and is redone. Otherwise the sum is
  // truncated to fp32 (24 bits): the conversion rounds to nearest, and one step back toward
  // zero (the encoding minus one) undoes it where it rounded up in magnitude, which converting
  // back and comparing shows (|sum| < 2^31 - 64 here, so the value converted back is exact).
  // e8m13 keeps 13 of those fraction bits (truncation again). Scaling by 2^unit is exact where
  // the result is finite: it is 0 or a normal number (StepRule::lowest), and a value truncated
  // toward zero below 2^128 is at most the largest finite fp32 (or e8m13) value, while one at
  // or past 2^128 overflows to inf in the multiplication, as the model's output does.
  [[gnu::always_inline]] inline static F round_narrow(const StepRule& rule, I sum, I e, M& bad) {
    const __m256i magnitude = _mm256_abs_epi32(sum);
    bad = _mm256_or_si256(
        bad, below_unsigned(_mm256_set1_epi32(static_cast<std::int32_t>(rule.narrow_limit - 1)), magnitude));
    const __m256 nearest = _mm256_cvtepi32_ps(sum);
    const __m256i rounded_up = _mm256_cmpgt_epi32(_mm256_abs_epi32(_mm256_cvttps_epi32(nearest)), magnitude);
    __m256i truncated = _mm256_add_epi32(_mm256_castps_si256(nearest), rounded_up);
    if (rule.output_fraction_bits < 23)
      truncated = _mm256_and_si256(truncated, _mm256_set1_epi32(~((1 << (23 - rule.output_fraction_bits)) - 1)));
    // 2^unit = 2^(e - F), a normal fp32.
    const __m256 power =
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127 - rule.fraction_bits)), 23));
    return _mm256_mul_ps(_mm256_castsi256_ps(truncated), power);
  }
  // The narrow form's C alignment: C is 0 or a normal fp32 after a step (StepRule::lowest), so
  // an exponent field of 0 means a zero, which gets kNoTerm (_mm256_sign_epi32 zeroes the lanes
  // whose field is 0), and a normal C is its own alignment (emin -126). A non-finite C reads
  // 128, above kHighestExponent. A subnormal C can only come in with the call's C:
  // narrow_input_check flags it.
  [[gnu::always_inline]] inline static I narrow_accumulator_alignment(F acc, std::int32_t) {
    const __m256i field = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(acc), 23), _mm256_set1_epi32(0xff));
    return _mm256_add_epi32(_mm256_sign_epi32(_mm256_sub_epi32(field, _mm256_set1_epi32(127 + kNoTerm)), field),
                            _mm256_set1_epi32(kNoTerm));
  }
  [[gnu::always_inline]] inline static M narrow_input_check(F acc) {
    const __m256i magnitude = _mm256_and_si256(_mm256_castps_si256(acc), _mm256_set1_epi32(0x7fffffff));
    // 0 < magnitude < 2^23 (the encodings of the subnormals)
    return _mm256_and_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(0x800000), magnitude),
                            _mm256_cmpgt_epi32(magnitude, _mm256_setzero_si256()));
  }
  // The 16-bit alignment exponents (block<..., kAlign16>): 16 lanes, two groups, per vector.
  [[gnu::always_inline]] inline static I load16(const std::int16_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  [[gnu::always_inline]] inline static I splat16(std::int16_t x) { return _mm256_set1_epi16(x); }
  [[gnu::always_inline]] inline static I add16(I a, I b) { return _mm256_add_epi16(a, b); }
  [[gnu::always_inline]] inline static I max16(I a, I b) { return _mm256_max_epi16(a, b); }
  [[gnu::always_inline]] inline static I widen_low16(I x) { return _mm256_cvtepi16_epi32(_mm256_castsi256_si128(x)); }
  [[gnu::always_inline]] inline static I widen_high16(I x) {
    return _mm256_cvtepi16_epi32(_mm256_extracti128_si256(x, 1));
  }
  [[gnu::always_inline]] inline static void store(float* p, F x) { _mm256_storeu_ps(p, x); }
  [[gnu::always_inline]] inline static std::uint64_t mask_bits(M m) {
    return static_cast<std::uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(m)));
  }
  // The tally (block<..., kTally>): the portable traits' steps, four fp64 lanes at a time.
  using Removed = Wide;
  [[gnu::always_inline]] inline static F fraction(F x) {
    return _mm256_sub_ps(x, _mm256_round_ps(x, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC));
  }
  [[gnu::always_inline]] inline static void removed_start(Removed& r, F fraction) {
    r.low = _mm256_cvtps_pd(_mm256_castps256_ps128(fraction));
    r.high = _mm256_cvtps_pd(_mm256_extractf128_ps(fraction, 1));
  }
  [[gnu::always_inline]] inline static void removed_add(Removed& r, F fraction) {
    r.low = _mm256_add_pd(r.low, _mm256_cvtps_pd(_mm256_castps256_ps128(fraction)));
    r.high = _mm256_add_pd(r.high, _mm256_cvtps_pd(_mm256_extractf128_ps(fraction, 1)));
  }
  [[gnu::always_inline]] inline static void tally_half(const StepRule& rule, __m256d sum, __m128i unit, __m256d got,
                                                       __m256d removed, double* error, int& carry, int& tie, int& up,
                                                       int& down, int& near_zero) {
    const __m256d sign = _mm256_set1_pd(-0.0);
    const __m256d power = _mm256_castsi256_pd(
        _mm256_slli_epi64(_mm256_add_epi64(_mm256_cvtepi32_epi64(unit), _mm256_set1_epi64x(1023)), 52));
    const __m256d exact = _mm256_mul_pd(sum, power);
    const __m256d residue = _mm256_sub_pd(exact, got);
    const __m256d step_error = _mm256_xor_pd(_mm256_add_pd(_mm256_mul_pd(removed, power), residue), sign);
    _mm256_storeu_pd(error, step_error);
    near_zero = _mm256_movemask_pd(_mm256_cmp_pd(_mm256_andnot_pd(sign, step_error),
                                                 _mm256_mul_pd(power, _mm256_set1_pd(rule.near_zero)), _CMP_LE_OQ));
    carry = _mm256_movemask_pd(_mm256_cmp_pd(_mm256_andnot_pd(sign, sum), _mm256_set1_pd(rule.carry_from), _CMP_GE_OQ));
    const __m256i low = _mm256_set1_epi64x((std::int64_t{1} << rule.dropped) - 1);
    const __m256i half = _mm256_set1_epi64x(std::int64_t{1} << (rule.dropped - 1));
    const __m256d tie_normal =
        _mm256_castsi256_pd(_mm256_cmpeq_epi64(_mm256_and_si256(_mm256_castpd_si256(exact), low), half));
    tie = _mm256_movemask_pd(tie_normal);
    // Below the output's normal range (rare: only where a lane has one), the fixed grid's half
    // (a zero has no tie either way).
    const __m256d below =
        _mm256_and_pd(_mm256_cmp_pd(_mm256_andnot_pd(sign, exact), _mm256_set1_pd(rule.normal_floor), _CMP_LT_OQ),
                      _mm256_cmp_pd(exact, _mm256_setzero_pd(), _CMP_NEQ_OQ));
    if (!_mm256_testz_pd(below, below)) {
      const __m256d scaled = _mm256_andnot_pd(sign, _mm256_mul_pd(exact, _mm256_set1_pd(rule.to_grid)));
      const __m256d fraction = _mm256_sub_pd(scaled, _mm256_round_pd(scaled, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC));
      const __m256d tie_below = _mm256_cmp_pd(fraction, _mm256_set1_pd(0.5), _CMP_EQ_OQ);
      tie = _mm256_movemask_pd(_mm256_blendv_pd(tie_normal, tie_below, below));
    }
    // DotStepTally::add's direction: away from zero when the error has the sum's sign.
    const int nonnegative = _mm256_movemask_pd(_mm256_cmp_pd(sum, _mm256_setzero_pd(), _CMP_GE_OQ));
    const int positive = _mm256_movemask_pd(_mm256_cmp_pd(step_error, _mm256_setzero_pd(), _CMP_GT_OQ));
    const int non_zero = _mm256_movemask_pd(_mm256_cmp_pd(step_error, _mm256_setzero_pd(), _CMP_NEQ_UQ));
    up = non_zero & ~(positive ^ nonnegative);
    down = non_zero & (positive ^ nonnegative);
  }
  [[gnu::always_inline]] inline static void tally_step(const StepRule& rule, const Wide& sum, I unit, F result,
                                                       const Removed& removed, double* error, std::uint64_t& carry,
                                                       std::uint64_t& tie, std::uint64_t& up, std::uint64_t& down,
                                                       std::uint64_t& near_zero) {
    int carry_low, tie_low, up_low, down_low, carry_high, tie_high, up_high, down_high, near_low, near_high;
    tally_half(rule, sum.low, _mm256_castsi256_si128(unit), _mm256_cvtps_pd(_mm256_castps256_ps128(result)),
               removed.low, error, carry_low, tie_low, up_low, down_low, near_low);
    tally_half(rule, sum.high, _mm256_extracti128_si256(unit, 1), _mm256_cvtps_pd(_mm256_extractf128_ps(result, 1)),
               removed.high, error + 4, carry_high, tie_high, up_high, down_high, near_high);
    near_zero = static_cast<std::uint64_t>(near_low | (near_high << 4));
    carry = static_cast<std::uint64_t>(carry_low | (carry_high << 4));
    tie = static_cast<std::uint64_t>(tie_low | (tie_high << 4));
    up = static_cast<std::uint64_t>(up_low | (up_high << 4));
    down = static_cast<std::uint64_t>(down_low | (down_high << 4));
  }
};
#include "emu/dot/tensor_core_gemm_block.inc"
}  // namespace avx2
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,popcnt,avx512f,avx512vl,avx512bw,avx512dq"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,popcnt,avx512f,avx512vl,avx512bw,avx512dq")
#endif
// GCC 12's AVX-512 intrinsics start from an undefined register written as a self-initialised
// variable (`__m512 __Y = __Y;`), which -Wmaybe-uninitialized reports once they are inlined.
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
namespace avx512 {
struct Lanes {
  static constexpr int W = 16;
  using F = __m512;
  using I = __m512i;
  using M = __mmask16;
  struct Wide {
    __m512d low, high;
  };
  [[gnu::always_inline]] inline static F load(const float* p) { return _mm512_loadu_ps(p); }
  [[gnu::always_inline]] inline static I load(const std::int32_t* p) { return _mm512_loadu_si512(p); }
  [[gnu::always_inline]] inline static F splat(float x) { return _mm512_set1_ps(x); }
  [[gnu::always_inline]] inline static I splat(std::int32_t x) { return _mm512_set1_epi32(x); }
  [[gnu::always_inline]] inline static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  [[gnu::always_inline]] inline static I truncate(F x) { return _mm512_cvttps_epi32(x); }
  [[gnu::always_inline]] inline static I add(I a, I b) { return _mm512_add_epi32(a, b); }
  [[gnu::always_inline]] inline static I max(I a, I b) { return _mm512_max_epi32(a, b); }
  [[gnu::always_inline]] inline static I min(I a, I b) { return _mm512_min_epi32(a, b); }
  [[gnu::always_inline]] inline static I sub(I a, I b) { return _mm512_sub_epi32(a, b); }
  [[gnu::always_inline]] inline static I min_unsigned(I a, I b) { return _mm512_min_epu32(a, b); }
  [[gnu::always_inline]] inline static M below_unsigned(I a, I b) { return _mm512_cmplt_epu32_mask(a, b); }
  [[gnu::always_inline]] inline static M greater(I a, I b) { return _mm512_cmpgt_epi32_mask(a, b); }
  [[gnu::always_inline]] inline static M either(M a, M b) { return static_cast<M>(a | b); }
  [[gnu::always_inline]] inline static M both(M a, M b) { return static_cast<M>(a & b); }
  [[gnu::always_inline]] inline static M none() { return 0; }
  [[gnu::always_inline]] inline static F scale_down(int f, I e) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_sub_epi32(_mm512_set1_epi32(f + 127), e), 23));
  }
  [[gnu::always_inline]] inline static I accumulator_alignment(F acc, std::int32_t emin) {
    const __m512i bits = _mm512_castps_si512(acc);
    const __m512i exponent = _mm512_sub_epi32(_mm512_and_si512(_mm512_srli_epi32(bits, 23), _mm512_set1_epi32(0xff)),
                                              _mm512_set1_epi32(127));
    const __mmask16 nonzero = _mm512_test_epi32_mask(bits, _mm512_set1_epi32(0x7fffffff));
    return _mm512_mask_blend_epi32(nonzero, _mm512_set1_epi32(kNoTerm),
                                   _mm512_max_epi32(exponent, _mm512_set1_epi32(emin)));
  }
  [[gnu::always_inline]] inline static void wide_zero(Wide& w) { w.low = w.high = _mm512_setzero_pd(); }
  [[gnu::always_inline]] inline static void wide_add(Wide& w, I part) {
    w.low = _mm512_add_pd(w.low, _mm512_cvtepi32_pd(_mm512_castsi512_si256(part)));
    w.high = _mm512_add_pd(w.high, _mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(part, 1)));
  }
  [[gnu::always_inline]] inline static __m512d round_half(const StepRule& g, __m512d sum, __m256i unit, __mmask8& bad) {
    const __m512d power = _mm512_castsi512_pd(
        _mm512_slli_epi64(_mm512_add_epi64(_mm512_cvtepi32_epi64(unit), _mm512_set1_epi64(1023)), 52));
    const __m512d exact = _mm512_mul_pd(sum, power);
    const __m512d magnitude = _mm512_abs_pd(exact);
    __m512i bits = _mm512_castpd_si512(exact);
    if (g.nearest)
      bits = _mm512_add_epi64(
          _mm512_add_epi64(bits, _mm512_set1_epi64((std::int64_t{1} << (g.dropped - 1)) - 1)),
          _mm512_and_si512(_mm512_srl_epi64(bits, _mm_cvtsi32_si128(g.dropped)), _mm512_set1_epi64(1)));
    const __m512d normal =
        _mm512_castsi512_pd(_mm512_and_si512(bits, _mm512_set1_epi64(~((std::int64_t{1} << g.dropped) - 1))));
    const __m512d scaled = _mm512_mul_pd(exact, _mm512_set1_pd(g.to_grid));
    const __m512d on_grid = g.nearest ? _mm512_roundscale_pd(scaled, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
                                      : _mm512_roundscale_pd(scaled, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m512d below = _mm512_mul_pd(on_grid, _mm512_set1_pd(g.from_grid));
    const __m512d result =
        _mm512_mask_blend_pd(_mm512_cmp_pd_mask(magnitude, _mm512_set1_pd(g.normal_floor), _CMP_LT_OQ), normal, below);
    bad = static_cast<__mmask8>(bad | _mm512_cmp_pd_mask(magnitude, _mm512_set1_pd(g.output_max), _CMP_GE_OQ));
    // +0 for a zero result.
    return _mm512_maskz_mov_pd(_mm512_cmp_pd_mask(result, _mm512_setzero_pd(), _CMP_NEQ_UQ), result);
  }
  [[gnu::always_inline]] inline static F round_output(const StepRule& rule, const Wide& sum, I e, M& bad) {
    const __m512i unit = _mm512_sub_epi32(e, _mm512_set1_epi32(rule.fraction_bits));
    if (!rule.nearest) {
      // fp32 and e8m13 outputs: one conversion with embedded round-toward-zero, which is the
      // truncation onto fp32's grid, subnormals included (no MXCSR state is read); e8m13
      // then drops 10 more fraction bits, truncation again (the grids nest). exact = sum * 2^unit
      // by scalef (exact: the result is far inside fp64's range).
      const __m512d low = _mm512_scalef_pd(sum.low, _mm512_cvtepi32_pd(_mm512_castsi512_si256(unit)));
      const __m512d high = _mm512_scalef_pd(sum.high, _mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(unit, 1)));
      const __m512d limit = _mm512_set1_pd(rule.output_max);
      bad = static_cast<M>(bad | _mm512_cmp_pd_mask(_mm512_abs_pd(low), limit, _CMP_GE_OQ) |
                           (_mm512_cmp_pd_mask(_mm512_abs_pd(high), limit, _CMP_GE_OQ) << 8));
      __m512 result =
          _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvt_roundpd_ps(low, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC)),
                             _mm512_cvt_roundpd_ps(high, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC), 1);
      if (rule.output_fraction_bits < 23)
        result = _mm512_castsi512_ps(_mm512_and_si512(
            _mm512_castps_si512(result), _mm512_set1_epi32(~((1 << (23 - rule.output_fraction_bits)) - 1))));
      // A zero result is +0 (RZ keeps the sign of a tiny negative sum).
      return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(result, _mm512_setzero_ps(), _CMP_NEQ_UQ), result);
    }
    __mmask8 bad_low = 0, bad_high = 0;
    const __m512d low = round_half(rule, sum.low, _mm512_castsi512_si256(unit), bad_low);
    const __m512d high = round_half(rule, sum.high, _mm512_extracti64x4_epi64(unit, 1), bad_high);
    bad = static_cast<M>(bad | bad_low | (bad_high << 8));
    // The fp64 results lie on the output's grid, so the narrowing is exact.
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(low)), _mm512_cvtpd_ps(high), 1);
  }
  // The narrow form (StepRule::narrow), as the AVX2 traits argue it: flagged where the int32
  // sum may have wrapped (|INT_MIN| reads 2^31, at or past every narrow_limit); otherwise
  // truncated onto fp32's 24 bits by the conversion's embedded round-toward-zero (no MXCSR
  // state is read), e8m13 keeping 13 of those fraction bits, then scaled by 2^(e - F), which
  // is exact where the result is finite and overflows to inf at or past 2^128, as the model's
  // output does.
  [[gnu::always_inline]] inline static F round_narrow(const StepRule& rule, I sum, I e, M& bad) {
    bad =
        static_cast<M>(bad | _mm512_cmpge_epu32_mask(_mm512_abs_epi32(sum),
                                                     _mm512_set1_epi32(static_cast<std::int32_t>(rule.narrow_limit))));
    __m512 truncated = _mm512_cvt_roundepi32_ps(sum, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    if (rule.output_fraction_bits < 23)
      truncated = _mm512_castsi512_ps(_mm512_and_si512(
          _mm512_castps_si512(truncated), _mm512_set1_epi32(~((1 << (23 - rule.output_fraction_bits)) - 1))));
    const __m512 power =
        _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(e, _mm512_set1_epi32(127 - rule.fraction_bits)), 23));
    return _mm512_mul_ps(truncated, power);
  }
  // The narrow form's C alignment (the AVX2 traits' argument): C is 0 or a normal fp32 after a
  // step, so an exponent field of 0 is a zero (kNoTerm) and a normal C is its own alignment; a
  // non-finite C reads 128, above kHighestExponent. A subnormal C can only come in with the
  // call's C: narrow_input_check flags it.
  [[gnu::always_inline]] inline static I narrow_accumulator_alignment(F acc, std::int32_t) {
    const __m512i field = _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(acc), 23), _mm512_set1_epi32(0xff));
    return _mm512_mask_blend_epi32(_mm512_test_epi32_mask(field, field), _mm512_set1_epi32(kNoTerm),
                                   _mm512_sub_epi32(field, _mm512_set1_epi32(127)));
  }
  [[gnu::always_inline]] inline static M narrow_input_check(F acc) {
    const __m512i magnitude = _mm512_and_si512(_mm512_castps_si512(acc), _mm512_set1_epi32(0x7fffffff));
    // 0 < magnitude < 2^23 (the encodings of the subnormals)
    return _mm512_mask_cmplt_epi32_mask(_mm512_test_epi32_mask(magnitude, magnitude), magnitude,
                                        _mm512_set1_epi32(0x800000));
  }
  // The 16-bit alignment exponents (block<..., kAlign16>): 32 lanes, two groups, per vector.
  [[gnu::always_inline]] inline static I load16(const std::int16_t* p) { return _mm512_loadu_si512(p); }
  [[gnu::always_inline]] inline static I splat16(std::int16_t x) { return _mm512_set1_epi16(x); }
  [[gnu::always_inline]] inline static I add16(I a, I b) { return _mm512_add_epi16(a, b); }
  [[gnu::always_inline]] inline static I max16(I a, I b) { return _mm512_max_epi16(a, b); }
  [[gnu::always_inline]] inline static I widen_low16(I x) { return _mm512_cvtepi16_epi32(_mm512_castsi512_si256(x)); }
  [[gnu::always_inline]] inline static I widen_high16(I x) {
    return _mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64(x, 1));
  }
  [[gnu::always_inline]] inline static void store(float* p, F x) { _mm512_storeu_ps(p, x); }
  [[gnu::always_inline]] inline static std::uint64_t mask_bits(M m) { return m; }
  // The tally (block<..., kTally>): the portable traits' steps, eight fp64 lanes at a time.
  using Removed = Wide;
  [[gnu::always_inline]] inline static F fraction(F x) {
    return _mm512_sub_ps(x, _mm512_roundscale_ps(x, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC));
  }
  [[gnu::always_inline]] inline static void removed_start(Removed& r, F fraction) {
    r.low = _mm512_cvtps_pd(_mm512_castps512_ps256(fraction));
    r.high = _mm512_cvtps_pd(_mm512_extractf32x8_ps(fraction, 1));
  }
  [[gnu::always_inline]] inline static void removed_add(Removed& r, F fraction) {
    r.low = _mm512_add_pd(r.low, _mm512_cvtps_pd(_mm512_castps512_ps256(fraction)));
    r.high = _mm512_add_pd(r.high, _mm512_cvtps_pd(_mm512_extractf32x8_ps(fraction, 1)));
  }
  [[gnu::always_inline]] inline static void tally_half(const StepRule& rule, __m512d sum, __m256i unit, __m512d got,
                                                       __m512d removed, double* error, __mmask8& carry, __mmask8& tie,
                                                       __mmask8& up, __mmask8& down, __mmask8& near_zero) {
    const __m512d power = _mm512_cvtepi32_pd(unit);
    const __m512d exact = _mm512_scalef_pd(sum, power);
    const __m512d residue = _mm512_sub_pd(exact, got);
    const __m512d step_error = _mm512_castsi512_pd(
        _mm512_xor_si512(_mm512_castpd_si512(_mm512_add_pd(_mm512_scalef_pd(removed, power), residue)),
                         _mm512_set1_epi64(std::numeric_limits<std::int64_t>::min())));
    _mm512_storeu_pd(error, step_error);
    near_zero = _mm512_cmp_pd_mask(_mm512_abs_pd(step_error), _mm512_scalef_pd(_mm512_set1_pd(rule.near_zero), power),
                                   _CMP_LE_OQ);
    carry = _mm512_cmp_pd_mask(_mm512_abs_pd(sum), _mm512_set1_pd(rule.carry_from), _CMP_GE_OQ);
    const __mmask8 tie_normal = _mm512_cmpeq_epi64_mask(
        _mm512_and_si512(_mm512_castpd_si512(exact), _mm512_set1_epi64((std::int64_t{1} << rule.dropped) - 1)),
        _mm512_set1_epi64(std::int64_t{1} << (rule.dropped - 1)));
    tie = tie_normal;
    // Below the output's normal range (rare: only where a lane has one), the fixed grid's half
    // (a zero has no tie either way).
    const __mmask8 below = _mm512_mask_cmp_pd_mask(_mm512_cmp_pd_mask(exact, _mm512_setzero_pd(), _CMP_NEQ_OQ),
                                                   _mm512_abs_pd(exact), _mm512_set1_pd(rule.normal_floor), _CMP_LT_OQ);
    if (below != 0) {
      const __m512d scaled = _mm512_abs_pd(_mm512_mul_pd(exact, _mm512_set1_pd(rule.to_grid)));
      const __m512d fraction =
          _mm512_sub_pd(scaled, _mm512_roundscale_pd(scaled, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC));
      const __mmask8 tie_below = _mm512_cmp_pd_mask(fraction, _mm512_set1_pd(0.5), _CMP_EQ_OQ);
      tie = static_cast<__mmask8>((tie_normal & ~below) | (tie_below & below));
    }
    // DotStepTally::add's direction: away from zero when the error has the sum's sign.
    const __mmask8 nonnegative = _mm512_cmp_pd_mask(sum, _mm512_setzero_pd(), _CMP_GE_OQ);
    const __mmask8 positive = _mm512_cmp_pd_mask(step_error, _mm512_setzero_pd(), _CMP_GT_OQ);
    const __mmask8 non_zero = _mm512_cmp_pd_mask(step_error, _mm512_setzero_pd(), _CMP_NEQ_UQ);
    up = static_cast<__mmask8>(non_zero & ~(positive ^ nonnegative));
    down = static_cast<__mmask8>(non_zero & (positive ^ nonnegative));
  }
  [[gnu::always_inline]] inline static void tally_step(const StepRule& rule, const Wide& sum, I unit, F result,
                                                       const Removed& removed, double* error, std::uint64_t& carry,
                                                       std::uint64_t& tie, std::uint64_t& up, std::uint64_t& down,
                                                       std::uint64_t& near_zero) {
    __mmask8 carry_low, tie_low, up_low, down_low, carry_high, tie_high, up_high, down_high, near_low, near_high;
    tally_half(rule, sum.low, _mm512_castsi512_si256(unit), _mm512_cvtps_pd(_mm512_castps512_ps256(result)),
               removed.low, error, carry_low, tie_low, up_low, down_low, near_low);
    tally_half(rule, sum.high, _mm512_extracti64x4_epi64(unit, 1), _mm512_cvtps_pd(_mm512_extractf32x8_ps(result, 1)),
               removed.high, error + 8, carry_high, tie_high, up_high, down_high, near_high);
    near_zero = near_low | (std::uint64_t{near_high} << 8);
    carry = carry_low | (std::uint64_t{carry_high} << 8);
    tie = tie_low | (std::uint64_t{tie_high} << 8);
    up = up_low | (std::uint64_t{up_high} << 8);
    down = down_low | (std::uint64_t{down_high} << 8);
  }
};
#include "emu/dot/tensor_core_gemm_block.inc"
}  // namespace avx512
#pragma GCC diagnostic pop
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif

using BlockFunction = void (*)(const StepRule&, int, const float*, const std::int32_t*, const float*,
                               const std::int32_t*, std::size_t, float*, std::uint64_t*, const TallyOut*);
// Each instruction set's blocking, as measured: one row against `groups` groups of W columns
// (AVX-512: 4, the 64-lane limit; AVX2: 8, which since the int32 step sums runs the fa2 forwards
// 7-8% faster than 4: the step is bound by its dependent chain, and 8 independent chains hide
// more of it than the register spills cost), then one group, then the zero-padded tail.
// The tallied kernel (one group; `tally_checked`: block<..., kTallyCheckTerms>) and its counts.
// The narrow forms: where StepRule::narrow allows them; `narrow_row_groups16` (AVX2 and
// AVX-512; null for the portable code) reads the panel's alignment exponents as int16, for calls
// over several rows.
using Block16Function = void (*)(const StepRule&, int, const float*, const std::int32_t*, const float*,
                                 const std::int16_t*, std::size_t, float*, std::uint64_t*, const TallyOut*);
struct IsaKernels {
  int lanes;  // W
  int groups;
  BlockFunction row_groups, one_group, pairs;
  void (*alignments)(const float*, std::size_t, int, std::int32_t*);
  BlockFunction tally, tally_checked;
  void (*count_tally)(const TallyOut&, int, std::uint64_t, DotStepTally&);
  BlockFunction narrow_row_groups, narrow_one_group;
  Block16Function narrow_row_groups16;
};
#define FB_ISA_KERNELS(ns, groups, groups16)                                                       \
  IsaKernels {                                                                                     \
    ns::Lanes::W, groups, &ns::block<groups>, &ns::block<1>, &ns::block<1, true>, &ns::alignments, \
        &ns::block<1, false, kTally>, &ns::block<1, false, kTallyCheckTerms>, &ns::count_tally,    \
        &ns::block<groups, false, kNoTally, true>, &ns::block<1, false, kNoTally, true>, groups16  \
  }
IsaKernels kernels_for(DotIsa isa) {
  switch (isa) {
#ifdef FLASHBITS_LANES_MULTIVERSION
    case DotIsa::avx512:
      return FB_ISA_KERNELS(avx512, 4, (&avx512::block<4, false, kNoTally, true, true>));
    case DotIsa::avx2:
      return FB_ISA_KERNELS(avx2, 8, (&avx2::block<8, false, kNoTally, true, true>));
#endif
    default:
      return FB_ISA_KERNELS(portable, 1, nullptr);
  }
}
#undef FB_ISA_KERNELS

// Per-thread scratch of fused_dot_rows (a call allocates nothing once it has grown).
struct RowsScratch {
  std::vector<float> a_value, acc, c_in, tail_value, column;
  std::vector<std::int32_t> a_alignment, own_alignment, tail_alignment;
  std::vector<std::int16_t> alignment16;  // the panel's, narrowed for narrow_row_groups16
  std::vector<double> step_error;         // the tallied kernel's TallyOut, two groups'
  std::vector<std::uint64_t> step_flags;
  std::vector<float> step_c;
  DotTrace step_trace;  // one step redone by fused_dot (TallyOut::inexact)
};

}  // namespace

DotIsa best_dot_isa() {
#ifdef FLASHBITS_LANES_MULTIVERSION
  switch (array_lanes::lane_isa()) {
    case array_lanes::LaneIsa::avx512:
      return DotIsa::avx512;
    case array_lanes::LaneIsa::avx2:
      return DotIsa::avx2;
    case array_lanes::LaneIsa::baseline:
      break;
  }
#endif
  return DotIsa::portable;
}

bool dot_isa_available(DotIsa isa) {
  switch (isa) {
    case DotIsa::portable:
      return true;
    case DotIsa::avx2:
      return best_dot_isa() == DotIsa::avx2 || best_dot_isa() == DotIsa::avx512;
    case DotIsa::avx512:
      return best_dot_isa() == DotIsa::avx512;
    case DotIsa::best:
      return true;
  }
  return false;
}

bool fused_dot_rows_blocked(const TensorCoreModel& model) {
  return model.products_per_step > 0 && model.output != DotOutput::exact_rne &&
         model.zero_terms == ZeroTermPolicy::ignored && model.fraction_bits < 29 && model.input.man_bits <= 10;
}

void dot_alignment_exponents(const TensorCoreModel& model, const float* b, std::size_t n, std::int32_t* alignment) {
  const int emin = model.input.emin();
  kernels_for(best_dot_isa()).alignments(b, n, emin, alignment);
}

namespace {

// fused_dot_rows, and with `tally` (rows == 1) fused_dot_columns' tallied form: every step of
// every lane added to *tally lane after lane, as fused_dot with DotTrace::tally_only would.
void rows_through_kernel(const TensorCoreModel& model, const float* c, std::size_t ldc, const float* a, std::size_t lda,
                         int rows, const float* b, const std::int32_t* b_alignment, std::size_t ldb, int k, int lanes,
                         float* d, std::size_t ldd, DotIsa isa, DotStepTally* tally) {
  if (rows <= 0 || lanes <= 0) return;
  thread_local RowsScratch scratch;
  DotTrace lane_trace;
  lane_trace.tally_only = tally;
  DotTrace* const trace = tally != nullptr ? &lane_trace : nullptr;
  auto fused_dot_of_lane = [&](int r, int l, float c_value) {
    scratch.column.resize(static_cast<std::size_t>(std::max(k, 0)));  // a negative k is 0, as in fused_dot
    for (int j = 0; j < k; ++j) scratch.column[static_cast<std::size_t>(j)] = b[static_cast<std::size_t>(j) * ldb + l];
    return fused_dot(model, c_value, a + static_cast<std::size_t>(r) * lda, scratch.column.data(), k, trace);
  };
  auto by_fused_dot = [&](int r, int l, float c_value) {
    d[static_cast<std::size_t>(r) * ldd + l] = fused_dot_of_lane(r, l, c_value);
  };
  if (k <= 0 || !fused_dot_rows_blocked(model)) {
    for (int r = 0; r < rows; ++r)
      for (int l = 0; l < lanes; ++l) by_fused_dot(r, l, c[static_cast<std::size_t>(r) * ldc + l]);
    return;
  }
  const StepRule rule = step_rule(model);
  if (isa == DotIsa::best || !dot_isa_available(isa)) isa = best_dot_isa();
  const IsaKernels kernels = kernels_for(isa);
  const int w = kernels.lanes;
  const int emin = model.input.emin();
  const std::size_t uk = static_cast<std::size_t>(k);

  // The panel's alignment exponents, computed here when the caller has none prepared.
  if (b_alignment == nullptr) {
    scratch.own_alignment.resize(uk * ldb);
    for (std::size_t j = 0; j < uk; ++j)
      kernels.alignments(b + j * ldb, static_cast<std::size_t>(lanes), emin, scratch.own_alignment.data() + j * ldb);
    b_alignment = scratch.own_alignment.data();
  }
  // The last partial group of lanes reads a zero-padded copy of its columns (the tallied
  // form: only when there are fewer lanes than one group).
  const int full = lanes / w * w;
  if (full < lanes && (tally == nullptr || lanes < w)) {
    scratch.tail_value.assign(uk * w, 0.0f);
    scratch.tail_alignment.assign(uk * w, kNoTerm);
    for (std::size_t j = 0; j < uk; ++j)
      for (int l = full; l < lanes; ++l) {
        scratch.tail_value[j * w + (l - full)] = b[j * ldb + l];
        scratch.tail_alignment[j * w + (l - full)] = b_alignment[j * ldb + l];
      }
  }
  const int max_lanes = kernels.groups * w;
  scratch.a_value.resize(uk);
  scratch.a_alignment.resize(uk);
  scratch.acc.resize(static_cast<std::size_t>(max_lanes));
  scratch.c_in.resize(scratch.acc.size());

  if (tally != nullptr) {
    // One row (fused_dot_columns), in lane order, one group of W lanes per kernel call (four
    // groups per call measured no faster: the tallied step is bound by its arithmetic). Each
    // call also runs the fp64 chain of the previous call's errors (ErrorChain), so that only the
    // last call's chain runs on its own. A group with a lane to redo tallies here, in order,
    // with fused_dot for that lane. When the lanes are not a multiple of W, the last group is
    // the last W lanes (its lanes already done are recomputed and dropped: their C may be a D
    // by now); with fewer than W lanes, the zero-padded copy.
    std::copy(a, a + uk, scratch.a_value.begin());
    kernels.alignments(a, uk, emin, scratch.a_alignment.data());
    const int steps = (k + rule.step - 1) / rule.step;
    const std::size_t per_block = static_cast<std::size_t>(steps) * static_cast<std::size_t>(w);
    scratch.step_error.resize(2 * per_block);
    scratch.step_flags.resize(2 * 5 * static_cast<std::size_t>(steps));
    scratch.step_c.resize(2 * per_block);
    const BlockFunction run = rule.tally_checks_products ? kernels.tally_checked : kernels.tally;
    ErrorChain chain;
    chain.sum = tally->signed_error;
    int pending = 0, parity = 0;
    for (int done = 0; done < lanes; parity ^= 1) {
      const bool padded = lanes < w;
      const int width = w;
      const int l0 = padded ? 0 : std::min(done, lanes - width);
      const float* panel = padded ? scratch.tail_value.data() : b + l0;
      const std::int32_t* panel_alignment = padded ? scratch.tail_alignment.data() : b_alignment + l0;
      const std::size_t stride = padded ? static_cast<std::size_t>(w) : ldb;
      const int first = done - l0, end = std::min(lanes - l0, width);  // the block's new lanes
      std::copy(c + l0, c + l0 + end, scratch.c_in.begin());
      std::fill(scratch.c_in.begin() + end, scratch.c_in.begin() + width, 0.0f);
      std::copy(scratch.c_in.begin(), scratch.c_in.begin() + width, scratch.acc.begin());
      double* error = scratch.step_error.data() + static_cast<std::size_t>(parity) * per_block;
      std::uint64_t* flags = scratch.step_flags.data() + static_cast<std::size_t>(parity) * 5 * steps;
      float* step_c = scratch.step_c.data() + static_cast<std::size_t>(parity) * per_block;
      const TallyOut out{error,
                         flags + 0 * steps,
                         flags + 1 * steps,
                         flags + 2 * steps,
                         flags + 3 * steps,
                         flags + 4 * steps,
                         step_c,
                         &chain,
                         (pending + steps - 1) / steps};
      std::uint64_t bad = 0;
      run(rule, k, scratch.a_value.data(), scratch.a_alignment.data(), panel, panel_alignment, stride,
          scratch.acc.data(), &bad, &out);
      chain.run(lanes);  // (the previous block's chain is done by now)
      std::copy(scratch.acc.begin() + first, scratch.acc.begin() + end, d + l0 + first);
      const std::uint64_t new_lanes =
          ((end == 64 ? 0 : std::uint64_t{1} << end) - 1) & ~((std::uint64_t{1} << first) - 1);
      // The steps whose remainder sum the kernel could not certify exact: each redone alone by
      // fused_dot from the C it started from, which gives its exact error (and the same carry-out
      // and tie); its error and direction replace the kernel's before they are counted and chained.
      for (int t = 0; t < steps; ++t) {
        for (std::uint64_t redo = out.inexact[t] & new_lanes & ~bad; redo != 0; redo &= redo - 1) {
          const int l = std::countr_zero(redo);
          const int i0 = t * rule.step, n = std::min(rule.step, k - i0);
          scratch.column.resize(static_cast<std::size_t>(n));
          for (int j = 0; j < n; ++j)
            scratch.column[static_cast<std::size_t>(j)] = panel[static_cast<std::size_t>(i0 + j) * stride + l];
          scratch.step_trace.steps.clear();
          fused_dot(model, step_c[static_cast<std::size_t>(t) * w + l], scratch.a_value.data() + i0,
                    scratch.column.data(), n, &scratch.step_trace);
          const DotStepEvent& redone = scratch.step_trace.steps.front();
          error[static_cast<std::size_t>(t) * w + l] = redone.error;
          const bool away_from_zero = (redone.error > 0) == (redone.aligned_sum >= 0);  // as DotStepTally::add
          const std::uint64_t bit = std::uint64_t{1} << l;
          out.up[t] = (out.up[t] & ~bit) | (redone.error != 0.0 && away_from_zero ? bit : 0);
          out.down[t] = (out.down[t] & ~bit) | (redone.error != 0.0 && !away_from_zero ? bit : 0);
        }
      }
      kernels.count_tally(out, steps, new_lanes & ~bad, *tally);
      chain.error = error;
      chain.width = static_cast<std::size_t>(width);
      chain.steps = steps;
      chain.lane = first;
      chain.lanes = end;
      pending = end - first;
      if ((bad & new_lanes) != 0) {
        for (int l = first; l < end; ++l) {
          if ((bad >> l) & 1) {
            tally->signed_error = chain.sum;
            by_fused_dot(0, l0 + l, scratch.c_in[static_cast<std::size_t>(l)]);
            chain.sum = tally->signed_error;
          } else {
            chain.lane = l;
            chain.run(1);
          }
        }
        chain.lane = chain.lanes;
        pending = 0;
      }
      done = l0 + end;
    }
    chain.run(lanes);
    tally->signed_error = chain.sum;
    return;
  }

  // Row r (its values a_row) against lanes [l0, l0 + n), n <= width, through `run` over `panel`
  // / `panel_alignment` (row stride `stride`).
  auto run_block = [&](auto run, int r, const float* a_row, int l0, int n, int width, const float* panel,
                       const auto* panel_alignment, std::size_t stride) {
    const float* c_row = c + static_cast<std::size_t>(r) * ldc + l0;
    std::copy(c_row, c_row + n, scratch.acc.begin());
    std::fill(scratch.acc.begin() + n, scratch.acc.begin() + width, 0.0f);
    std::uint64_t bad = 0;
    run(rule, k, a_row, scratch.a_alignment.data(), panel, panel_alignment, stride, scratch.acc.data(), &bad, nullptr);
    // The lanes to redo, each from its C, before D is written (c and d may alias).
    for (std::uint64_t redo = bad & (n == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << n) - 1); redo != 0;
         redo &= redo - 1) {
      const int l = std::countr_zero(redo);
      scratch.acc[static_cast<std::size_t>(l)] = fused_dot_of_lane(r, l0 + l, c_row[l]);
    }
    std::copy(scratch.acc.begin(), scratch.acc.begin() + n, d + static_cast<std::size_t>(r) * ldd + l0);
  };
  const BlockFunction row_groups = rule.narrow ? kernels.narrow_row_groups : kernels.row_groups;
  const BlockFunction one_group = rule.narrow ? kernels.narrow_one_group : kernels.one_group;
  const int wide = kernels.groups * w;
  // The 16-bit panel for the whole register blocks, narrowed once per call: over several rows
  // its cost (one pass over k x lanes exponents) is repaid.
  const bool narrow16 = rule.narrow && kernels.narrow_row_groups16 != nullptr && rows >= 4 && lanes >= wide;
  if (narrow16) {
    const std::size_t blocked = static_cast<std::size_t>(lanes / wide * wide);
    scratch.alignment16.resize(uk * ldb);
    for (std::size_t j = 0; j < uk; ++j)
      for (std::size_t l = 0; l < blocked; ++l)
        scratch.alignment16[j * ldb + l] = static_cast<std::int16_t>(b_alignment[j * ldb + l]);
  }
  for (int r = 0; r < rows; ++r) {
    const float* a_row = a + static_cast<std::size_t>(r) * lda;
    kernels.alignments(a_row, uk, emin, scratch.a_alignment.data());
    int l0 = 0;
    if (narrow16)
      for (; l0 + wide <= lanes; l0 += wide)
        run_block(kernels.narrow_row_groups16, r, a_row, l0, wide, wide, b + l0, scratch.alignment16.data() + l0, ldb);
    for (; l0 + wide <= lanes; l0 += wide)
      run_block(row_groups, r, a_row, l0, wide, wide, b + l0, b_alignment + l0, ldb);
    for (; l0 + w <= lanes; l0 += w) run_block(one_group, r, a_row, l0, w, w, b + l0, b_alignment + l0, ldb);
    if (l0 < lanes)
      run_block(one_group, r, a_row, l0, lanes - l0, w, scratch.tail_value.data(), scratch.tail_alignment.data(),
                static_cast<std::size_t>(w));
  }
}

}  // namespace

void fused_dot_rows(const TensorCoreModel& model, const float* c, std::size_t ldc, const float* a, std::size_t lda,
                    int rows, const float* b, const std::int32_t* b_alignment, std::size_t ldb, int k, int lanes,
                    float* d, std::size_t ldd, DotIsa isa) {
  rows_through_kernel(model, c, ldc, a, lda, rows, b, b_alignment, ldb, k, lanes, d, ldd, isa, nullptr);
}

void fused_dot_columns(const TensorCoreModel& model, const float* c, const float* a, const float* b, std::size_t ldb,
                       int k, int lanes, float* d, DotStepTally* tally, const std::int32_t* b_alignment, DotIsa isa) {
  rows_through_kernel(model, c, 0, a, 0, 1, b, b_alignment, ldb, k, lanes, d, 0, isa, tally);
}

void fused_dot_pairs(const TensorCoreModel& model, const float* c, const float* a, const float* b, int k, int n,
                     float* d, DotIsa isa) {
  if (n <= 0) return;
  if (k <= 0 || !fused_dot_rows_blocked(model)) {
    for (int i = 0; i < n; ++i)
      d[i] = fused_dot(model, c[i], a + static_cast<std::size_t>(i) * k, b + static_cast<std::size_t>(i) * k, k);
    return;
  }
  const StepRule rule = step_rule(model);
  if (isa == DotIsa::best || !dot_isa_available(isa)) isa = best_dot_isa();
  const IsaKernels kernels = kernels_for(isa);
  const int w = kernels.lanes, emin = model.input.emin();
  const std::size_t uk = static_cast<std::size_t>(k), uw = static_cast<std::size_t>(w);
  // W dots at a time, transposed into k x W panels (lanes past n: zeros, never stored).
  std::vector<float> a_panel(uk * uw), b_panel(uk * uw), acc(uw), c_in(uw);
  std::vector<std::int32_t> a_alignment(uk * uw), b_alignment(uk * uw);
  std::uint64_t bad = 0;
  for (int i0 = 0; i0 < n; i0 += w) {
    const int lanes = std::min(w, n - i0);
    for (int l = 0; l < w; ++l) {
      const float* a_dot = a + static_cast<std::size_t>(i0 + l) * uk;
      const float* b_dot = b + static_cast<std::size_t>(i0 + l) * uk;
      for (std::size_t j = 0; j < uk; ++j) {
        const float x = l < lanes ? a_dot[j] : 0.0f, y = l < lanes ? b_dot[j] : 0.0f;
        a_panel[j * uw + l] = x;
        b_panel[j * uw + l] = y;
        a_alignment[j * uw + l] = input_alignment(x, emin);
        b_alignment[j * uw + l] = input_alignment(y, emin);
      }
      c_in[static_cast<std::size_t>(l)] = acc[static_cast<std::size_t>(l)] = l < lanes ? c[i0 + l] : 0.0f;
    }
    kernels.pairs(rule, k, a_panel.data(), a_alignment.data(), b_panel.data(), b_alignment.data(), uw, acc.data(), &bad,
                  nullptr);
    for (int l = 0; l < lanes; ++l) {
      const std::size_t i = static_cast<std::size_t>(i0 + l);
      d[i] = (bad >> l) & 1 ? fused_dot(model, c_in[static_cast<std::size_t>(l)], a + i * uk, b + i * uk, k)
                            : acc[static_cast<std::size_t>(l)];
    }
  }
}

}  // namespace fb
