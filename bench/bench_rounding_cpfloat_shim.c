/* bench/bench_rounding_cpfloat_shim.c: CPFloat (a header-only C library, not part of
 * flashbits) wrapped in one C function for bench_rounding_vs_cpfloat. Built only when
 * FLASHBITS_CPFLOAT_DIR names a copy of CPFloat's src/ folder, with -O3 -march=native.
 * CPFloat draws its stochastic-rounding bits from PCG32 when pcg_variants.h is
 * included; the few PCG32 routines it uses are written out here (O'Neill's minimal
 * PCG32, pcg-random.org) so that no pcg-c install is needed. */
#include <stddef.h>
#include <stdint.h>

typedef struct {
  uint64_t state, inc;
} pcg32_random_t;
static inline uint32_t pcg32_random_r(pcg32_random_t* rng) {
  const uint64_t old = rng->state;
  rng->state = old * 6364136223846793005ULL + rng->inc;
  const uint32_t xorshifted = (uint32_t)(((old >> 18u) ^ old) >> 27u);
  const uint32_t rot = (uint32_t)(old >> 59u);
  return (xorshifted >> rot) | (xorshifted << ((-rot) & 31));
}
static inline void pcg32_srandom_r(pcg32_random_t* rng, uint64_t initstate, uint64_t initseq) {
  rng->state = 0u;
  rng->inc = (initseq << 1u) | 1u;
  pcg32_random_r(rng);
  rng->state += initstate;
  pcg32_random_r(rng);
}
static inline void pcg32_advance_r(pcg32_random_t* rng, uint64_t delta) {
  uint64_t cur_mult = 6364136223846793005ULL, cur_plus = rng->inc, acc_mult = 1u, acc_plus = 0u;
  while (delta > 0) {
    if (delta & 1) {
      acc_mult *= cur_mult;
      acc_plus = acc_plus * cur_mult + cur_plus;
    }
    cur_plus = (cur_mult + 1) * cur_plus;
    cur_mult *= cur_mult;
    delta /= 2;
  }
  rng->state = acc_mult * rng->state + acc_plus;
}
/* CPFloat names the 64-bit generator's type too; only its binary64 functions use it. */
typedef struct {
  uint64_t state[4];
} pcg64_random_t;
#define PCG_VARIANTS_H_INCLUDED
#include "cpfloat_binary32.h"

/* mode: 0 round to nearest even, 1 toward zero, 2 stochastic (proportional).
 * Rounds n floats to (precision, emin, emax), in place in out; returns CPFloat's status. */
int fb_bench_cpfloat_round(float* out, const float* in, size_t n, int precision, int emin, int emax, int with_inf,
                           int mode) {
  static optstruct* opts = NULL;
  if (opts == NULL) opts = init_optstruct();
  opts->precision = (cpfloat_precision_t)precision;
  opts->emin = emin;
  opts->emax = emax;
  opts->explim = CPFLOAT_EXPRANGE_TARG;
  opts->infinity = with_inf ? CPFLOAT_INF_USE : CPFLOAT_INF_NO;
  opts->round = mode == 0 ? CPFLOAT_RND_NE : mode == 1 ? CPFLOAT_RND_TZ : CPFLOAT_RND_SP;
  opts->saturation = CPFLOAT_SAT_NO;
  opts->subnormal = CPFLOAT_SUBN_USE;
  opts->flip = CPFLOAT_SOFTERR_NO;
  opts->p = 0;
  return cpfloatf(out, in, n, opts);
}
