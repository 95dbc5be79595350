// studies/noncentral_t.hpp: exact power of the two-sided one-sample t test, and the smallest
// effect it detects with a given power (the noncentral t distribution).
//
// Why: the bias report's "smallest |bias| detectable with 80% power" was the approximation
// (t_{alpha/2,df} + t_{0.2,df}) * se, which at n = 8 (df 7) has only 72% power at alpha = 2.5e-4
// (74% at 1e-3); these give the exact figure the sentence claims.
//
// Contract (effects in units of the standard error, i.e. the noncentrality delta = bias / se,
// where se = sigma / sqrt(n) and df = n - 1):
//   power_two_sided_t(delta, df, alpha) = P(|T'| > t_crit), T' = (Z + delta) / sqrt(V / df),
//     Z ~ N(0, 1) and V ~ chi-square(df) independent, t_crit = t_{alpha/2, df} (the upper
//     alpha/2 quantile of Student t, studies/statistics.hpp). Even in delta; equals alpha at
//     delta = 0, increases with |delta| towards 1; +-inf gives 1.
//   min_detectable_effect_in_se(df, alpha, power) = the delta >= 0 with
//     power_two_sided_t(delta, df, alpha) = power.
//   Requirements: df >= 1, 0 < alpha < 1, delta not NaN, alpha < power < 1; otherwise
//   std::invalid_argument.
// Accuracy: computed by adaptive Gauss-Kronrod integration over the chi density (in log
// space, so no overflow for any df) of the normal CDF (std::erfc); validated against an
// independent mpmath reference (tests/test_noncentral_t.cpp) for df 1..10^6 and alpha
// 1e-12..0.5: measured worst 3e-13 relative up to df 1000, below 1e-13 at df 10^6. Beyond,
// the accuracy is t_crit's (student_t_upper_quantile: within 1e-12 of Boost.Math up to df
// 10^18, from the normal expansion above df 10^5).
// Cost: tens of microseconds per power, about ten powers per min_detectable (plus one
// t quantile). Pure functions, no state.
#pragma once

namespace fb::attn {

double power_two_sided_t(double effect_in_se, int df, double alpha);
double min_detectable_effect_in_se(int df, double alpha, double power);

}  // namespace fb::attn
