// attention/statistics.hpp: bias statistics over signed errors (DESIGN.md, CLI.md bias-test).
//
// Contract: summarize() takes per-trial signed errors (in ulps) and returns the mean
// with a (1 - alpha) confidence interval (Student t), the two-sided one-sample t-test
// p-value against zero, the two-sided exact sign-test p-value (zeros dropped), the
// smallest bias the run could detect at level alpha with 80% power, and the verdict
// (biased when the t-test p-value is below alpha). Pure functions, no state.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace fb::attn {

struct BiasStatistics {
  std::size_t n = 0;
  double mean = 0.0, stddev = 0.0;
  double ci_low = 0.0, ci_high = 0.0;  // (1 - alpha) confidence interval of the mean
  double t_statistic = 0.0;
  double p_t = 1.0;                    // two-sided t-test
  std::size_t positives = 0, negatives = 0;
  double p_sign = 1.0;                 // two-sided exact sign test
  double min_detectable = 0.0;         // |bias| detectable at alpha with 80% power
  bool biased = false;
  std::string verdict() const { return biased ? "biased" : "no detectable bias"; }
};

BiasStatistics summarize(const std::vector<double>& signed_errors, double alpha = 1e-3);
// The same statistics from moments already reduced (n, mean, sample standard deviation,
// sign counts): used where only sufficient statistics survive, e.g. merged sweep shards.
BiasStatistics summarize_moments(std::size_t n, double mean, double stddev, std::size_t positives,
                                 std::size_t negatives, double alpha = 1e-3);

// Distribution helpers (exposed for tests).
double student_t_cdf(double t, double dof);
double student_t_quantile(double p, double dof);
double normal_quantile(double p);
double binomial_two_sided_p(std::size_t k, std::size_t n);  // p = 1/2

}  // namespace fb::attn
