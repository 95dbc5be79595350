// tests/bf16_reference.hpp: bf16 round-to-nearest-even written out independently of the
// library (no emu/ or formats/), for the attention tests that predict a recipe's
// roundings by hand (tests/test_attention_bias.cpp, tests/test_attention_models.cpp).
#pragma once

#include <cmath>

// bf16 RNE of x, for x zero or with |x| in bf16's normal range: bf16 keeps 8 significant
// bits, so x's significand is rounded to 8 bits at x's own exponent.
inline double bf16_rne(double x) {
  int e = 0;
  const double m = std::frexp(x, &e) * 256.0;  // |m| in [128, 256)
  double r = std::floor(m);
  const double frac = m - r;
  if (frac > 0.5 || (frac == 0.5 && std::fmod(r, 2.0) != 0.0)) r += 1.0;
  return std::ldexp(r, e - 8);
}
