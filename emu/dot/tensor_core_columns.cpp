// emu/dot/tensor_core_columns.cpp: fused_dot_columns, many dots of one model side by side in
// vector lanes (contract and exactness argument: emu/dot/tensor_core.hpp). Untallied calls go to
// the blocked kernel (fused_dot_rows, emu/dot/tensor_core_gemm.cpp); this file's fp64 lanes
// serve the tallied ones, whose step events need the truncated remainders.
//
// The rules are fused_dot's (emu/dot/tensor_core.cpp holds them in one place: its
// fused_step_body); this file computes the same step for four dots per register in fp64,
// where every intermediate is exact, so only the algorithm's shape differs:
// - a term's alignment exponent: max(its exponent, the format's emin) for a non-zero value
//   (a float subnormal has exponent field 0, read as below every format's emin); a
//   product's is the sum of its factors'; zero terms take no part (ZeroTermPolicy::ignored);
// - E = the largest alignment exponent of C and the step's products, unit u = E - F;
// - each term t becomes trunc(t * 2^-u): exact scaling by a power of two, then one
//   round-toward-zero to an integer, the sign-magnitude truncation of fused_step_body;
// - the exact sum times 2^u is rounded once onto the output's grid (exponent
//   max(e, emin) - fraction bits) toward zero or to nearest even;
// - a zero result is +0 (an exact zero sum, or one whose magnitude rounded to zero).
// NaN, infinities and overflow are not modelled here: a lane that meets one is flagged
// and recomputed by fused_dot, which holds those rules.
#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include "emu/dot/tensor_core.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define FLASHBITS_COLUMNS_AVX2 1
// (GCC gives a lambda the enclosing function's target only when told.)
#define FLASHBITS_COLUMNS_LAMBDA_TARGET __attribute__((target("avx2")))
#endif

namespace fb {
namespace {

// Lane l through fused_dot itself (its column gathered into `column`).
void lane_by_fused_dot(const TensorCoreModel& m, float c, const float* a, const float* b, std::size_t ldb, int k,
                       int lane, std::vector<float>& column, DotTrace* trace, float* d) {
  column.resize(static_cast<std::size_t>(k));
  for (int j = 0; j < k; ++j) column[static_cast<std::size_t>(j)] = b[static_cast<std::size_t>(j) * ldb + lane];
  *d = fused_dot(m, c, a, column.data(), k, trace);
}

#ifdef FLASHBITS_COLUMNS_AVX2
// The products' alignment exponents are integers in 32-bit lanes (eight per register, from
// the inputs' bits); the step's largest then travels as the power of two 2^E (fp64), where
// C's joins it by one max (C's own as 2^A: its exponent bits, a zero C giving 0, below every
// 2^A) and the step's scale 2^-(E-F) is one integer subtraction on the bits of 2^E.
// The floor of E: only an all-zero step is below it (its sum is 0 whatever E is); it keeps
// 2^-(E-F) and 2^(E-F) normal doubles.
constexpr int kLowestExponent = -700;
// A factor's alignment exponent for a zero value: far below kLowestExponent even when
// added to another factor's.
constexpr int kNoTerm = -(1 << 20);

struct LaneConstants {
  int fraction_bits;         // F
  int input_emin;            // alignment floor of a factor
  double accumulator_emin;   // 2^emin of C's format: alignment floor of C
  int output_fraction_bits;  // the output's significand bits after the point
  int output_emin;
  double output_max;  // largest finite output; beyond it the lane goes to fused_dot
};

// 2^A for the alignment exponent A = max(exponent(x), emin) of non-zero x, 0 for x = 0
// (x not a subnormal double; NaN and inf give garbage, caught by the lane's sum).
[[gnu::target("avx2"), gnu::always_inline]] inline __m256d alignment_power(__m256d x, __m256d emin_power) {
  const __m256d exponent_bits = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7ff0000000000000));
  const __m256d power = _mm256_max_pd(_mm256_and_pd(x, exponent_bits), emin_power);
  return _mm256_and_pd(power, _mm256_cmp_pd(x, _mm256_setzero_pd(), _CMP_NEQ_UQ));
}

// The products' largest alignment exponent over rows [j0, j1) for 8 (or 4) lanes: from the
// float bits in 32-bit lanes, max(exponent field - 127, emin) plus the shared factor's (a
// float subnormal reads as -127, below every emin), zero factors out. Independent of C.
[[gnu::target("avx2"), gnu::always_inline]] inline __m256i largest_products8(const float* column, std::size_t ldb,
                                                                             const int* a_alignment, int j0, int j1,
                                                                             int input_emin) {
  const __m256i field_mask = _mm256_set1_epi32(0xff), bias = _mm256_set1_epi32(127);
  const __m256i magnitude = _mm256_set1_epi32(0x7fffffff), emin = _mm256_set1_epi32(input_emin);
  const __m256i no_term = _mm256_set1_epi32(kNoTerm);
  __m256i largest = no_term;
  for (int j = j0; j < j1; ++j) {
    const __m256i bits =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(column + static_cast<std::size_t>(j) * ldb));
    const __m256i exponent = _mm256_sub_epi32(_mm256_and_si256(_mm256_srli_epi32(bits, 23), field_mask), bias);
    const __m256i alignment = _mm256_add_epi32(_mm256_max_epi32(exponent, emin), _mm256_set1_epi32(a_alignment[j]));
    const __m256i is_zero = _mm256_cmpeq_epi32(_mm256_and_si256(bits, magnitude), _mm256_setzero_si256());
    largest = _mm256_max_epi32(largest, _mm256_blendv_epi8(alignment, no_term, is_zero));
  }
  return largest;
}
[[gnu::target("avx2"), gnu::always_inline]] inline __m128i largest_products4(const float* column, std::size_t ldb,
                                                                             const int* a_alignment, int j0, int j1,
                                                                             int input_emin) {
  const __m128i field_mask = _mm_set1_epi32(0xff), bias = _mm_set1_epi32(127);
  const __m128i magnitude = _mm_set1_epi32(0x7fffffff), emin = _mm_set1_epi32(input_emin);
  const __m128i no_term = _mm_set1_epi32(kNoTerm);
  __m128i largest = no_term;
  for (int j = j0; j < j1; ++j) {
    const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(column + static_cast<std::size_t>(j) * ldb));
    const __m128i exponent = _mm_sub_epi32(_mm_and_si128(_mm_srli_epi32(bits, 23), field_mask), bias);
    const __m128i alignment = _mm_add_epi32(_mm_max_epi32(exponent, emin), _mm_set1_epi32(a_alignment[j]));
    const __m128i is_zero = _mm_cmpeq_epi32(_mm_and_si128(bits, magnitude), _mm_setzero_si128());
    largest = _mm_max_epi32(largest, _mm_blendv_epi8(alignment, no_term, is_zero));
  }
  return largest;
}
// 2^e for four int32 exponents in [-1022, 1023].
[[gnu::target("avx2"), gnu::always_inline]] inline __m256d power_of_two(__m128i exponent) {
  const __m256i biased = _mm256_add_epi64(_mm256_cvtepi32_epi64(exponent), _mm256_set1_epi64x(1023));
  return _mm256_castsi256_pd(_mm256_slli_epi64(biased, 52));
}

// Four lanes of row j of the panel, as fp64 (exact).
[[gnu::target("avx2"), gnu::always_inline]] inline __m256d row_values(const float* column, std::size_t ldb, int j) {
  return _mm256_cvtps_pd(_mm_loadu_ps(column + static_cast<std::size_t>(j) * ldb));
}

// kGroups groups of four lanes (columns l0 .. l0 + 4*kGroups - 1), carried together so
// that the out-of-order core overlaps their dependent chains. `bad` receives, per lane,
// whether it met a NaN, an infinity or an overflow. kNearest: RNE output (fp16
// accumulators), otherwise toward zero.
// Each lane's steps are also recorded for DotStepTally::add, lane i of the
// call at [i * steps + s]: the signed error, and bits 1 carry-out, 2 tie, 4 sum >= 0.
template <int kGroups, bool kNearest>
[[gnu::target("avx2")]] void lane_groups(const LaneConstants& lc, int step, const float* c, const double* a_value,
                                         const int* a_alignment, const float* b, std::size_t ldb, int k, int l0,
                                         float* d, bool* bad, double* step_error, std::uint8_t* step_bits) {
  static_assert(kGroups == 1 || kGroups % 2 == 0);
  const __m256d zero = _mm256_setzero_pd(), sign = _mm256_set1_pd(-0.0);
  const __m256d acc_emin = _mm256_set1_pd(lc.accumulator_emin);
  // 2^-(E-F) from the bits of 2^E: ((F + 2*1023) << 52) - bits(2^E); and 2^(E-F) = 2^E * 2^-F.
  const __m256i down_base = _mm256_set1_epi64x(static_cast<long long>(lc.fraction_bits + 2046) << 52);
  const __m256d minus_f = _mm256_set1_pd(std::ldexp(1.0, -lc.fraction_bits));
  // The output rounding: onto the output's significand in its normal range (an integer mask,
  // or an integer round-half-even add, on the fp64 bits), onto the fixed grid
  // 2^(emin - fraction bits) below it.
  const int dropped = 52 - lc.output_fraction_bits;
  const __m256i keep_mask = _mm256_set1_epi64x(~((std::int64_t{1} << dropped) - 1));
  const __m256i half_minus_one = _mm256_set1_epi64x((std::int64_t{1} << (dropped - 1)) - 1);
  const __m256i one = _mm256_set1_epi64x(1);
  const __m256d normal_floor = _mm256_set1_pd(std::ldexp(1.0, lc.output_emin));
  const __m256d to_grid = _mm256_set1_pd(std::ldexp(1.0, lc.output_fraction_bits - lc.output_emin));
  const __m256d from_grid = _mm256_set1_pd(std::ldexp(1.0, lc.output_emin - lc.output_fraction_bits));
  const __m256d output_max = _mm256_set1_pd(lc.output_max);
  constexpr int kToZero = _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC;
  constexpr int kOutputMode = (kNearest ? _MM_FROUND_TO_NEAREST_INT : _MM_FROUND_TO_ZERO) | _MM_FROUND_NO_EXC;

  __m256d acc[kGroups], flagged[kGroups];
  for (int g = 0; g < kGroups; ++g) {
    acc[g] = _mm256_cvtps_pd(_mm_loadu_ps(c + l0 + 4 * g));
    flagged[g] = zero;
  }
  const int steps = (k + step - 1) / step;
  const __m256d carry_from = _mm256_set1_pd(std::ldexp(1.0, lc.fraction_bits + 1));
  const __m256i low_mask = _mm256_set1_epi64x((std::int64_t{1} << dropped) - 1);
  const __m256i half_bit = _mm256_set1_epi64x(std::int64_t{1} << (dropped - 1));
  const __m256d half = _mm256_set1_pd(0.5);
  for (int j0 = 0, s = 0; j0 < k; j0 += step, ++s) {
    const int j1 = std::min(k, j0 + step);
    // The products' largest alignment exponents, 2^E of each group: independent of C.
    __m128i products[kGroups];
    if constexpr (kGroups % 2 == 0) {
      for (int g = 0; g < kGroups; g += 2) {
        const __m256i both =
            _mm256_max_epi32(largest_products8(b + l0 + 4 * g, ldb, a_alignment, j0, j1, lc.input_emin),
                             _mm256_set1_epi32(kLowestExponent));
        products[g] = _mm256_castsi256_si128(both);
        products[g + 1] = _mm256_extracti128_si256(both, 1);
      }
    } else {
      products[0] = _mm_max_epi32(largest_products4(b + l0, ldb, a_alignment, j0, j1, lc.input_emin),
                                  _mm_set1_epi32(kLowestExponent));
    }
    for (int g = 0; g < kGroups; ++g) {
      const float* column = b + l0 + 4 * g;
      const __m256d largest = _mm256_max_pd(power_of_two(products[g]), alignment_power(acc[g], acc_emin));
      const __m256d down = _mm256_castsi256_pd(_mm256_sub_epi64(down_base, _mm256_castpd_si256(largest)));
      const __m256d up = _mm256_mul_pd(largest, minus_f);
      // Each term truncated toward zero onto the grid 2^(E-F), as an integer; the sum is exact.
      // Traced: what truncation removed (exact: x - trunc(x), then scaled back), summed in
      // term order (C, then the products) as fused_step_body sums it.
      __m256d removed = zero;
      auto truncate = [&](__m256d scaled) FLASHBITS_COLUMNS_LAMBDA_TARGET {
        const __m256d kept = _mm256_round_pd(scaled, kToZero);
        removed = _mm256_add_pd(removed, _mm256_mul_pd(_mm256_sub_pd(scaled, kept), up));
        return kept;
      };
      __m256d sum0 = truncate(_mm256_mul_pd(acc[g], down)), sum1 = zero;
      int j = j0;
      for (; j + 1 < j1; j += 2) {
        const __m256d p0 = _mm256_mul_pd(row_values(column, ldb, j), _mm256_set1_pd(a_value[j]));
        const __m256d p1 = _mm256_mul_pd(row_values(column, ldb, j + 1), _mm256_set1_pd(a_value[j + 1]));
        sum0 = _mm256_add_pd(sum0, truncate(_mm256_mul_pd(p0, down)));
        sum1 = _mm256_add_pd(sum1, truncate(_mm256_mul_pd(p1, down)));
      }
      if (j < j1) {
        const __m256d p0 = _mm256_mul_pd(row_values(column, ldb, j), _mm256_set1_pd(a_value[j]));
        sum0 = _mm256_add_pd(sum0, truncate(_mm256_mul_pd(p0, down)));
      }
      // The exact sum, rounded once into the output.
      const __m256d sum = _mm256_add_pd(sum0, sum1);
      const __m256d exact = _mm256_mul_pd(sum, up);
      __m256i bits = _mm256_castpd_si256(exact);
      if constexpr (kNearest)
        bits = _mm256_add_epi64(_mm256_add_epi64(bits, half_minus_one),
                                _mm256_and_si256(_mm256_srli_epi64(bits, dropped), one));
      const __m256d normal = _mm256_castsi256_pd(_mm256_and_si256(bits, keep_mask));
      const __m256d below = _mm256_mul_pd(_mm256_round_pd(_mm256_mul_pd(exact, to_grid), kOutputMode), from_grid);
      const __m256d result =
          _mm256_blendv_pd(normal, below, _mm256_cmp_pd(_mm256_andnot_pd(sign, exact), normal_floor, _CMP_LT_OQ));
      // +0 for a zero result; NaN compares unequal, so it stays and is flagged below.
      acc[g] = _mm256_and_pd(result, _mm256_cmp_pd(result, zero, _CMP_NEQ_UQ));
      {
        // DotStepTally::add's inputs as fused_step_body forms them: the error
        // -(removed + (exact - result)); carry-out |sum| >= 2^(F+1); a tie when the bits the
        // output dropped are exactly one half (from exact's own bits in the normal range, from
        // its scaled fraction on the fixed grid below it).
        const __m256d error = _mm256_sub_pd(zero, _mm256_add_pd(removed, _mm256_sub_pd(exact, acc[g])));
        const __m256d carry = _mm256_cmp_pd(_mm256_andnot_pd(sign, sum), carry_from, _CMP_GE_OQ);
        const __m256i exact_bits = _mm256_castpd_si256(exact);
        const __m256d tie_normal =
            _mm256_castsi256_pd(_mm256_cmpeq_epi64(_mm256_and_si256(exact_bits, low_mask), half_bit));
        const __m256d scaled = _mm256_mul_pd(exact, to_grid);
        const __m256d fraction = _mm256_andnot_pd(sign, _mm256_sub_pd(scaled, _mm256_round_pd(scaled, kToZero)));
        const __m256d tie_below = _mm256_cmp_pd(fraction, half, _CMP_EQ_OQ);
        const __m256d is_below = _mm256_cmp_pd(_mm256_andnot_pd(sign, exact), normal_floor, _CMP_LT_OQ);
        const __m256d tie = _mm256_blendv_pd(tie_normal, tie_below, is_below);
        const __m256d nonnegative = _mm256_cmp_pd(sum, zero, _CMP_GE_OQ);
        double lane_error[4];
        _mm256_storeu_pd(lane_error, error);
        const int carry_mask = _mm256_movemask_pd(carry), tie_mask = _mm256_movemask_pd(tie),
                  nonnegative_mask = _mm256_movemask_pd(nonnegative);
        for (int i = 0; i < 4; ++i) {
          const std::size_t at = static_cast<std::size_t>(4 * g + i) * static_cast<std::size_t>(steps) + s;
          step_error[at] = lane_error[i];
          step_bits[at] = static_cast<std::uint8_t>(((carry_mask >> i) & 1) | (((tie_mask >> i) & 1) << 1) |
                                                    (((nonnegative_mask >> i) & 1) << 2));
        }
      }
      flagged[g] = _mm256_or_pd(flagged[g], _mm256_cmp_pd(_mm256_andnot_pd(sign, acc[g]), output_max, _CMP_NLE_UQ));
    }
  }
  for (int g = 0; g < kGroups; ++g) {
    _mm_storeu_ps(d + l0 + 4 * g, _mm256_cvtpd_ps(acc[g]));
    const int mask = _mm256_movemask_pd(flagged[g]);
    for (int i = 0; i < 4; ++i) bad[4 * g + i] = (mask >> i) & 1;
  }
}

bool lanes_apply(const TensorCoreModel& m, int k) {
  static const bool has_avx2 = __builtin_cpu_supports("avx2");
  return has_avx2 && k > 0 && m.products_per_step > 0 && m.output != DotOutput::exact_rne &&
         m.zero_terms == ZeroTermPolicy::ignored;
}
#endif

}  // namespace

void fused_dot_columns(const TensorCoreModel& model, const float* c, const float* a, const float* b, std::size_t ldb,
                       int k, int lanes, float* d, DotStepTally* tally, const std::int32_t* b_alignment) {
  if (tally == nullptr) {
    fused_dot_rows(model, c, 0, a, 0, 1, b, b_alignment, ldb, k, lanes, d, 0);
    return;
  }
  std::vector<float> column;
  DotTrace lane_trace;
  lane_trace.tally_only = tally;
  DotTrace* const trace = tally != nullptr ? &lane_trace : nullptr;
  int lane = 0;
#ifdef FLASHBITS_COLUMNS_AVX2
  if (lanes >= 4 && lanes_apply(model, k)) {
    const Format& out = dot_output_format(model.output);
    const int input_emin = model.input.emin();
    const LaneConstants lc{
        model.fraction_bits, input_emin, std::ldexp(1.0, accumulator_format(model).emin()),
        out.man_bits,        out.emin(), to_double(out, to_container(out, out.max_finite_pattern()))};
    // The shared vector once: its values in fp64 and its alignment exponents.
    std::vector<double> a_value(static_cast<std::size_t>(k));
    std::vector<int> a_alignment(static_cast<std::size_t>(k));
    for (int j = 0; j < k; ++j) {
      const auto bits = std::bit_cast<std::uint32_t>(a[j]);
      const int exponent = static_cast<int>((bits >> 23) & 0xffu) - 127;
      a_value[static_cast<std::size_t>(j)] = a[j];
      a_alignment[static_cast<std::size_t>(j)] = (bits & 0x7fffffffu) == 0 ? kNoTerm : std::max(exponent, input_emin);
    }
    const int step = model.products_per_step, steps = (k + step - 1) / step;
    std::vector<double> step_error(tally != nullptr ? static_cast<std::size_t>(16) * steps : 0);
    std::vector<std::uint8_t> step_bits(step_error.size());
    bool bad[16];
    auto run = [&](auto groups, int l0) {
      constexpr int kGroups = decltype(groups)::value;
      // c and d may alias: a lane to redo needs its own C, kept before d is written.
      float c_in[4 * kGroups];
      std::copy(c + l0, c + l0 + 4 * kGroups, c_in);
      const bool nearest = model.output == DotOutput::fp16_rne;
      // (Only tallied calls come here: untallied ones run fused_dot_rows above.)
      auto kernel = nearest ? &lane_groups<kGroups, true> : &lane_groups<kGroups, false>;
      kernel(lc, step, c, a_value.data(), a_alignment.data(), b, ldb, k, l0, d, bad, step_error.data(),
             step_bits.data());
      // Lane by lane in order, so that a tally adds the steps as one dot after another would.
      for (int i = 0; i < 4 * kGroups; ++i) {
        if (bad[i]) {
          lane_by_fused_dot(model, c_in[i], a, b, ldb, k, l0 + i, column, trace, d + l0 + i);
        } else if (tally) {
          for (int t = 0; t < steps; ++t) {
            const std::size_t at = static_cast<std::size_t>(i) * steps + t;
            const std::uint8_t f = step_bits[at];
            tally->add((f & 1) != 0, (f & 2) != 0, step_error[at], (f & 4) != 0);
          }
        }
      }
    };
    for (; lane + 16 <= lanes; lane += 16) run(std::integral_constant<int, 4>{}, lane);
    for (; lane + 8 <= lanes; lane += 8) run(std::integral_constant<int, 2>{}, lane);
    for (; lane + 4 <= lanes; lane += 4) run(std::integral_constant<int, 1>{}, lane);
  }
#endif
  for (; lane < lanes; ++lane) lane_by_fused_dot(model, c[lane], a, b, ldb, k, lane, column, trace, d + lane);
}

}  // namespace fb
