// tests/mpfr_sfu_reference.hpp: the independent reference for the SFU model the kernel
// tests assume by default (ex2.approx.ftz and lg2.approx.ftz modelled as correctly
// rounded): fp32 2^x and log2(x) rounded to nearest by MPFR, with a subnormal input read
// as zero and a subnormal result flushed to zero. Not the code under test: it shares no
// code with emu/sfu/special_functions.cpp. One object per thread (it owns MPFR variables).
#pragma once

#include <mpfr.h>

#include <cmath>

namespace fbref {

class CorrectSfuFtz {
 public:
  CorrectSfuFtz() {
    mpfr_init2(x_, 64);  // every float is exact in 64 bits
    mpfr_init2(y_, 24);  // fp32's precision; the exponent range is MPFR's (unbounded here)
  }
  ~CorrectSfuFtz() {
    mpfr_clear(x_);
    mpfr_clear(y_);
  }
  CorrectSfuFtz(const CorrectSfuFtz&) = delete;
  CorrectSfuFtz& operator=(const CorrectSfuFtz&) = delete;

  float ex2(float x) {
    if (std::fpclassify(x) == FP_SUBNORMAL) x = 0.0f;
    mpfr_set_flt(x_, x, MPFR_RNDN);
    mpfr_exp2(y_, x_, MPFR_RNDN);
    return flush(mpfr_get_flt(y_, MPFR_RNDN));
  }
  float lg2(float x) {
    mpfr_set_flt(x_, x, MPFR_RNDN);
    mpfr_log2(y_, x_, MPFR_RNDN);
    return flush(mpfr_get_flt(y_, MPFR_RNDN));
  }

 private:
  // A result below 2^-126 is flushed; the 24-bit rounding above has no exponent bound,
  // so a value that rounds up to 2^-126 is kept (rounding happens before the flush).
  static float flush(float y) { return std::fpclassify(y) == FP_SUBNORMAL ? 0.0f : y; }
  mpfr_t x_, y_;
};

}  // namespace fbref
