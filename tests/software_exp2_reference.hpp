// tests/software_exp2_reference.hpp: an independent reference for FlashAttention-4's software
// exp2 (emu/sfu/software_exp2.hpp), shared by tests/test_software_exp2.cpp and
// tests/test_attention_fa4_variants.cpp. Nothing here calls emu/.
//
// It evaluates the kernel's instruction sequence in MPFR at 24 bits with the rounding each
// instruction states (add.rm: MPFR_RNDD; sub.rn, fma.rn: MPFR_RNDN). Every intermediate is a
// normal fp32 value (r near 1.5·2^23, f in [0, 1), p in [1, 2)), so a 24-bit MPFR number with
// MPFR's default exponent range rounds exactly as fp32 does. The final step, an integer add
// on bit patterns in the kernel, is written as arithmetic on values: p·2^n for n = floor(x)
// >= -126 (exact in MPFR), and (p - 1)·2^-126 for n = -127, the subnormal the integer add
// makes when p's exponent field 127 drops to 0. One object per thread (MPFR scratch).
#pragma once

#include <gmp.h>
#include <mpfr.h>

#include <cmath>
#include <vector>

namespace fb_test {

// The polynomial's coefficients as FA4 prints them (POLY_EX2[3]), parsed here by MPFR.
inline const char* const kCoefficients[] = {"0.695146143436431884765625", "0.227564394474029541015625",
                                            "0.077119089663028717041015625"};

class SoftwareExp2Reference {
 public:
  SoftwareExp2Reference() {
    for (mpfr_t* v : all()) mpfr_init2(*v, 24);
    mpfr_set_str(c1_, kCoefficients[0], 10, MPFR_RNDN);
    mpfr_set_str(c2_, kCoefficients[1], 10, MPFR_RNDN);
    mpfr_set_str(c3_, kCoefficients[2], 10, MPFR_RNDN);
    mpfr_set_ui(round_int_, 12582912u, MPFR_RNDN);  // 1.5·2^23
    mpfr_set_ui(one_, 1u, MPFR_RNDN);
  }
  ~SoftwareExp2Reference() {
    for (mpfr_t* v : all()) mpfr_clear(*v);
  }
  SoftwareExp2Reference(const SoftwareExp2Reference&) = delete;
  SoftwareExp2Reference& operator=(const SoftwareExp2Reference&) = delete;

  float operator()(float x) {
    // ftz, then the clamp (max.ftz.f32 returns the non-NaN operand).
    if (std::fpclassify(x) == FP_SUBNORMAL) x = std::signbit(x) ? -0.0f : 0.0f;
    if (std::isnan(x) || x < -127.0f) x = -127.0f;
    mpfr_set_flt(xc_, x, MPFR_RNDN);
    mpfr_add(r_, xc_, round_int_, MPFR_RNDD);  // add.rm
    mpfr_sub(back_, r_, round_int_, MPFR_RNDN);
    mpfr_sub(f_, xc_, back_, MPFR_RNDN);
    mpfr_fma(p_, c3_, f_, c2_, MPFR_RNDN);
    mpfr_fma(p_, p_, f_, c1_, MPFR_RNDN);
    mpfr_fma(p_, p_, f_, one_, MPFR_RNDN);
    const long n = mpfr_get_si(back_, MPFR_RNDN);  // floor(x), an integer
    if (n >= -126) {
      mpfr_mul_2si(p_, p_, n, MPFR_RNDN);  // exact
    } else {
      mpfr_sub(p_, p_, one_, MPFR_RNDN);  // exact: p in [1, 2)
      mpfr_mul_2si(p_, p_, -126, MPFR_RNDN);
    }
    return mpfr_get_flt(p_, MPFR_RNDN);  // exactly representable (checked below)
  }
  // Whether the last conversion was exact (the value is a float).
  bool last_exact() const { return mpfr_get_flt(p_, MPFR_RNDD) == mpfr_get_flt(p_, MPFR_RNDU); }

 private:
  std::vector<mpfr_t*> all() { return {&xc_, &r_, &back_, &f_, &p_, &c1_, &c2_, &c3_, &round_int_, &one_}; }
  mpfr_t xc_, r_, back_, f_, p_, c1_, c2_, c3_, round_int_, one_;
};

}  // namespace fb_test
