// emu/dot/tensor_core_amd_columns.cpp: fused_dot_amd_columns, many dots of one AMD preset side by
// side in vector lanes (contract: emu/dot/tensor_core_amd.hpp).
//
// The two-stage kind (CDNA3 fp16/bf16/xf32, one group) runs four dots per AVX2 register in
// fp64, with the same exact arithmetic as the scalar step (tensor_core_amd.cpp
// two_stage_step_fp64, whose rules live there): products of <= 11-bit significands are exact;
// the step's product exponent E_p (each factor at least its format's emin, zeros excluded)
// scales them by 2^(F - E_p), truncated toward zero and summed (integers below 2^53); C joins
// at E = max(E_p, C's exponent) on the grid 2^(E - F2 - 1): the products' sum floored there,
// C floored to 2^(E - F) first; the total's leading bit fixes the floor to F2 fraction bits
// (never below 2^(-126 - F2)); the result is the total's conversion to fp32, round to nearest
// even (the hardware conversion, overflow to infinity included). An exact zero is +0.
// Lanes that meet a NaN, an infinity or a product of 2^128 or more, every other kind, and
// every lane on a CPU without AVX2 run fused_dot_amd itself.
#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include "emu/dot/tensor_core_amd.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define FLASHBITS_AMD_COLUMNS_AVX2 1
#endif

namespace fb {
namespace {

void lane_by_fused_dot_amd(const AmdDotModel& m, float c, const float* a, const float* b, std::size_t ldb, int k,
                           int lane, std::vector<float>& column, float* d) {
  column.resize(static_cast<std::size_t>(k));
  for (int j = 0; j < k; ++j) column[static_cast<std::size_t>(j)] = b[static_cast<std::size_t>(j) * ldb + lane];
  *d = fused_dot_amd(m, c, a, column.data(), k);
}

#ifdef FLASHBITS_AMD_COLUMNS_AVX2
// A factor's alignment exponent for a zero value: far below every real one even when added
// to another factor's, so the sum never wins a max; products' exponents are clamped before
// they scale anything.
constexpr int kNoTerm = -(1 << 20);

[[gnu::target("avx2"), gnu::always_inline]] inline __m256d power_of_two_lanes(__m128i exponent) {
  const __m128i clamped = _mm_min_epi32(_mm_max_epi32(exponent, _mm_set1_epi32(-1022)), _mm_set1_epi32(1023));
  const __m256i wide = _mm256_cvtepi32_epi64(_mm_add_epi32(clamped, _mm_set1_epi32(1023)));
  return _mm256_castsi256_pd(_mm256_slli_epi64(wide, 52));
}

// Alignment exponents of four floats (their exponent, -126 for fp32 subnormals, at least
// emin); zeros give kNoTerm. `not_finite` collects lanes whose value is inf or NaN.
[[gnu::target("avx2"), gnu::always_inline]] inline __m128i alignment_lanes(__m128 x, int emin, __m128i& not_finite) {
  const __m128i bits = _mm_castps_si128(x);
  const __m128i field = _mm_and_si128(_mm_srli_epi32(bits, 23), _mm_set1_epi32(0xff));
  not_finite = _mm_or_si128(not_finite, _mm_cmpeq_epi32(field, _mm_set1_epi32(0xff)));
  const __m128i exponent = _mm_max_epi32(_mm_sub_epi32(field, _mm_set1_epi32(127)), _mm_set1_epi32(-126));
  const __m128i aligned = _mm_max_epi32(exponent, _mm_set1_epi32(emin));
  const __m128i zero = _mm_cmpeq_epi32(_mm_and_si128(bits, _mm_set1_epi32(0x7fffffff)), _mm_setzero_si128());
  return _mm_blendv_epi8(aligned, _mm_set1_epi32(kNoTerm), zero);
}

// Four lanes [lane, lane + 4) from C = c4[0..3] through every step into d[lane..]; returns a
// mask of the lanes to recompute.
[[gnu::target("avx2")]] int four_lanes(const AmdDotModel& m, const float* c4, const float* a, const float* b,
                                       std::size_t ldb, int k, int lane, float* d) {
  const int F = m.fraction_bits, F2 = m.sum_fraction_bits, step = m.products_per_step;
  const int a_emin = m.a_input.emin(), b_emin = m.b_input.emin();
  __m128 acc = _mm_loadu_ps(c4);
  __m128i special = _mm_setzero_si128();
  __m256d product[16];
  for (int i = 0; i < k; i += step) {
    const int n = std::min(step, k - i);
    __m128i product_exponent = _mm_set1_epi32(kNoTerm);
    for (int j = 0; j < n; ++j) {
      const float x = a[i + j];
      const __m128 y = _mm_loadu_ps(b + static_cast<std::size_t>(i + j) * ldb + lane);
      __m128i not_finite = _mm_setzero_si128();
      const __m128i y_exponent = alignment_lanes(y, b_emin, not_finite);
      if (!std::isfinite(x)) not_finite = _mm_set1_epi32(-1);
      const __m256d p = _mm256_mul_pd(_mm256_set1_pd(static_cast<double>(x)), _mm256_cvtps_pd(y));
      product[j] = p;
      // |p| >= 2^128: the scalar path's specials rule.
      const __m256d big = _mm256_cmp_pd(_mm256_andnot_pd(_mm256_set1_pd(-0.0), p), _mm256_set1_pd(0x1p128), _CMP_GE_OQ);
      const __m128i big32 = _mm256_castsi256_si128(
          _mm256_permutevar8x32_epi32(_mm256_castpd_si256(big), _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6)));
      special = _mm_or_si128(special, _mm_or_si128(not_finite, big32));
      if (x == 0.0f) continue;
      const int x_exponent =
          std::max(std::max(static_cast<int>((std::bit_cast<std::uint32_t>(x) >> 23) & 0xffu) - 127, -126), a_emin);
      product_exponent = _mm_max_epi32(product_exponent, _mm_add_epi32(_mm_set1_epi32(x_exponent), y_exponent));
    }
    __m256d dot_units = _mm256_setzero_pd();
    const __m256d scale = power_of_two_lanes(_mm_sub_epi32(_mm_set1_epi32(F), product_exponent));
    for (int j = 0; j < n; ++j)
      dot_units = _mm256_add_pd(dot_units, _mm256_round_pd(_mm256_mul_pd(product[j], scale), _MM_FROUND_TO_ZERO));
    __m128i c_not_finite = _mm_setzero_si128();
    const __m128i c_exponent = _mm_max_epi32(alignment_lanes(acc, -126, c_not_finite), _mm_set1_epi32(-126));
    special = _mm_or_si128(special, c_not_finite);
    const __m128i E = _mm_max_epi32(product_exponent, c_exponent);
    const __m128i unit = _mm_sub_epi32(E, _mm_set1_epi32(F2 + 1));
    // Products' sum floored onto 2^unit; none (all zero) leaves dot_units = 0.
    const __m256d products_total = _mm256_floor_pd(_mm256_mul_pd(
        dot_units, power_of_two_lanes(_mm_sub_epi32(_mm_sub_epi32(product_exponent, _mm_set1_epi32(F)), unit))));
    const __m256d c_total = _mm256_mul_pd(
        _mm256_floor_pd(_mm256_mul_pd(_mm256_cvtps_pd(acc), power_of_two_lanes(_mm_sub_epi32(_mm_set1_epi32(F), E)))),
        _mm256_set1_pd(static_cast<double>(1u << (F2 + 1 - F))));
    // + 0.0 makes an exact zero +0 (floor(-0) and -0 sums would keep -0).
    __m256d total = _mm256_add_pd(_mm256_add_pd(products_total, c_total), _mm256_setzero_pd());
    // The leading bit's exponent (unit added), the floor to F2 fraction bits at it (never
    // below 2^(-126 - F2)).
    const __m256i total_field =
        _mm256_and_si256(_mm256_srli_epi64(_mm256_castpd_si256(total), 52), _mm256_set1_epi64x(0x7ff));
    const __m128i lead32 = _mm_add_epi32(_mm_sub_epi32(_mm256_castsi256_si128(_mm256_permutevar8x32_epi32(
                                                           total_field, _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6))),
                                                       _mm_set1_epi32(1023)),
                                         unit);
    const __m128i grid = _mm_sub_epi32(_mm_max_epi32(lead32, _mm_set1_epi32(-126)), _mm_set1_epi32(F2));
    const __m128i exponent = _mm_max_epi32(grid, unit);
    total = _mm256_floor_pd(_mm256_mul_pd(total, power_of_two_lanes(_mm_sub_epi32(unit, exponent))));
    acc = _mm256_cvtpd_ps(_mm256_mul_pd(total, power_of_two_lanes(exponent)));
  }
  _mm_storeu_ps(d + lane, acc);
  return _mm_movemask_ps(_mm_castsi128_ps(special));
}

bool columns_run_side_by_side(const AmdDotModel& m, int k) {
  static const bool has_avx2 = __builtin_cpu_supports("avx2");
  return has_avx2 && k > 0 && m.arithmetic == AmdArithmetic::two_stage && m.products_per_step >= 1 &&
         m.products_per_step <= 16 && m.fraction_bits + 2 <= 30 && m.sum_fraction_bits + 1 - m.fraction_bits <= 30;
}
#endif

}  // namespace

void fused_dot_amd_columns(const AmdDotModel& model, const float* c, const float* a, const float* b, std::size_t ldb,
                           int k, int lanes, float* d) {
  std::vector<float> column;
  int lane = 0;
#ifdef FLASHBITS_AMD_COLUMNS_AVX2
  if (columns_run_side_by_side(model, k)) {
    // xf32 inputs drop their low 13 bits first, as fused_dot_amd does.
    const bool xf32 = model.a_input == formats::tf32 || model.b_input == formats::tf32;
    if (!xf32) {
      for (; lane + 4 <= lanes; lane += 4) {
        float c_lanes[4];
        std::copy(c + lane, c + lane + 4, c_lanes);  // c and d may be the same array
        const int redo = four_lanes(model, c_lanes, a, b, ldb, k, lane, d);
        for (int l = 0; l < 4; ++l)
          if ((redo >> l) & 1) lane_by_fused_dot_amd(model, c_lanes[l], a, b, ldb, k, lane + l, column, d + lane + l);
      }
    }
  }
#endif
  for (; lane < lanes; ++lane) lane_by_fused_dot_amd(model, c[lane], a, b, ldb, k, lane, column, d + lane);
}

}  // namespace fb
