// studies/statistics.hpp: bias statistics over signed errors (docs/DESIGN.md, docs/CLI.md bias-test).
//
// Contract: summarize() takes per-trial signed errors (in ulps) and returns the mean
// with a (1 - alpha) confidence interval (Student t), the two-sided one-sample t-test
// p-value against zero, the two-sided exact sign-test p-value (zeros dropped), the
// smallest bias the run could detect at level alpha with 80% power, and the verdict
// (biased when the t-test p-value is below alpha). Where every sample is equal and nonzero the
// t test degenerates (t = ±inf) and p_t is the exact sign test's of n samples of one sign,
// 2^(1-n), so that eight samples of +1 ulp are not "p = 0". Pure functions, no state.
//
// Aggregators over a run (issue #4): summarize_row() folds a traced row's per-tile story
// into totals; ErrorHistogram bins signed errors in ulps; stage_histograms() measures a
// run's every stage against a reference (exact_attention) in ulps of the format the stage
// is stored in, at the reference value: O, dQ, dK, dV in the output format; LSE and delta
// in fp32 (the kernels' storage; a recipe that stores delta in bf16 shows large fp32 ulps).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "attention/attention.hpp"

namespace fb::attn {

struct BiasStatistics {
  std::size_t n = 0;
  double mean = 0.0, stddev = 0.0;
  double ci_low = 0.0, ci_high = 0.0;  // (1 - alpha) confidence interval of the mean
  double t_statistic = 0.0;
  double p_t = 1.0;  // two-sided t-test
  std::size_t positives = 0, negatives = 0;
  double p_sign = 1.0;          // two-sided exact sign test
  double min_detectable = 0.0;  // |bias| detectable at alpha with 80% power
  bool biased = false;
  // One sample has no spread: its interval, t test and detectable size mean nothing (a [x, x]
  // interval or a detectable bias of 0 would read as certainty).
  bool has_spread() const { return n >= 2; }
  // An interval and a detectable size to show: two samples or more that are not all equal
  // (with no spread ci_low == ci_high and min_detectable == 0, which would read as certainty).
  bool has_interval() const { return n >= 2 && stddev > 0.0; }
};

BiasStatistics summarize(const std::vector<double>& signed_errors, double alpha = 1e-3);
// A p-value for reports, "%.3g" except where it underflowed to 0 in double: "<1e-300"
// (printing "0" would claim an impossibility).
std::string p_value_text(double p);
// The same statistics from moments already reduced (n, mean, sample standard deviation,
// sign counts): used where only sufficient statistics survive, e.g. merged sweep shards.
BiasStatistics summarize_moments(std::size_t n, double mean, double stddev, std::size_t positives,
                                 std::size_t negatives, double alpha = 1e-3);
// The same from the sums (n, Σx, Σx²): the variance is Σx² - n·mean², and zero where that is
// within the sums' own rounding error (equal samples, as summarize finds them). sumsq_scale:
// the magnitude Σx² was computed at where it is a difference of larger sums (default: Σx²).
BiasStatistics summarize_sums(std::size_t n, double sum, double sumsq, std::size_t positives, std::size_t negatives,
                              double alpha = 1e-3, double sumsq_scale = 0.0);

// ---- aggregators -----------------------------------------------------------------------
// ulp of format f at x: the spacing of f's grid at |x| (the subnormal spacing below the
// normal range); finite formats of at most 32 bits.
double ulp_at(const Format& f, double x);

// One traced row in totals (sums over its KV tiles, the final cast of O over its features).
struct RowSummary {
  int batch = 0, head = 0, row = 0;
  int tiles = 0;
  double final_max = 0.0, final_sum = 0.0;  // running max and ℓ after the last tile
  int p_equal_one = 0, repeated_max = 0;
  int significand_overflows = 0, ties = 0, rounded_up = 0, rounded_down = 0;  // P·V, all features
  double pv_signed_error = 0.0;                                               // value units
  int o_cast_up = 0, o_cast_down = 0, o_cast_ties = 0;                        // final cast of O (up/down in magnitude)
  double o_cast_error_ulps = 0.0;  // Σ signed error of that cast, output ulps
  double delta_error_from_o = 0.0, delta_error_from_reduction = 0.0;
};
RowSummary summarize_row(const RowTrace& trace);

// Signed errors in ulps, binned: bin i covers [-range + i*width, -range + (i+1)*width);
// values below -range or at/above +range are counted apart, NaN/inf in not_finite.
struct ErrorHistogram {
  double bin_width = 0.125, range = 4.0;
  std::vector<std::uint64_t> counts;
  std::uint64_t below = 0, above = 0, not_finite = 0, total = 0;
  double sum = 0.0;  // of the finite values (for the mean)
  explicit ErrorHistogram(double width = 0.125, double half_range = 4.0);
  void add(double ulps);
  void merge(const ErrorHistogram& other);  // throws std::invalid_argument on other binning
  double bin_low(std::size_t i) const { return -range + static_cast<double>(i) * bin_width; }
  double mean() const;
};

struct StageHistograms {
  ErrorHistogram o, lse, delta, dq, dk, dv;  // delta..dv stay empty without a backward
};
// Adds every element of `run` against `reference` (same shapes) into the histograms.
void add_stage_errors(StageHistograms& h, const AttentionOutputs& run, const AttentionOutputs& reference,
                      const Format& output_format);

// Distribution helpers (exposed for tests). The t distribution's, at any dof >= 1: the
// incomplete beta up to dof 10^5, the normal expansion above (tests/test_statistics.cpp holds
// both within 1e-10 relative of Boost.Math up to dof 10^18).
double student_t_cdf(double t, double dof);
double student_t_quantile(double p, double dof);
// The t with P(T > t) = tail, for 0 < tail < 1, to relative accuracy however small the tail
// (student_t_quantile(1 - tail) loses it once 1 - tail rounds to 1: alpha below ~1e-16).
double student_t_upper_quantile(double tail, double dof);
double normal_quantile(double p);
double binomial_two_sided_p(std::size_t k, std::size_t n);  // p = 1/2

}  // namespace fb::attn
