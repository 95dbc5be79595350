// studies/verdict.hpp: the answer bias-test and sweep give: does a kernel add bias beyond
// its format's floor, could the test have seen a bias of the size at stake, and which way
// does the kernel's error lie (docs/CLI.md bias-test, docs/DESIGN.md §13).
//
// Contract. Per independent sample i (a trial, or a cluster of captured rows that share
// their keys and values) the caller gives two signed errors in the same units (ulps):
//   K_i, the kernel's error, and F_i, the floor's: the correctly rounded reference's error,
// both against the exact value of what the kernel was given (for fp8 kernels, the exact
// attention of the quantised inputs with their descales, so the input quantisation is
// measured apart). The excess X_i = K_i - F_i is the kernel's own share. The distance
// Z_i = s_K K_i - s_F F_i, with s_K and s_F the signs of the two means (+1 for a zero
// mean; s_F = s_K when the floor's mean is 0), has mean |mean K| - |mean F|: positive when
// the kernel's error lies further from zero than the floor's, in the floor's direction or
// beyond it on the other side.
//
// The verdict, each test two-sided Student t at level alpha:
//   - inconclusive when there are fewer than kMinVerdictSamples samples, or the excess has
//     zero variance without being identically zero (a t statistic of +-inf is no evidence);
//   - no detectable added bias when every X_i is exactly 0 (the kernel is its floor);
//   - when the excess is significant, the added bias d = |mean K| - |mean F| is judged with
//     each mean's sign taken as established only where that mean is itself significant (a
//     floor whose mean is noise has no direction: its sample sign flipped the verdict with
//     the seed). With s_K, s_F the sample signs and "every sign" meaning the established one
//     or both: adds bias if s_K K - t F is significantly positive for every sign t of F's
//     mean (then d > 0), however small d is (a detected added bias is a failed check; the
//     reason notes a d below `at_stake`); less biased than its format's floor if s_F F - u K is for every
//     sign u of K's mean (then d < 0) and the improvement -d it shows (the least over those
//     signs) is at least `at_stake` (a smaller one, 6e-7 ulp say, is no detectable added bias:
//     the kernel adds none, and its improvement is of no consequence); otherwise no detectable added bias if the upper
//     end of the interval of u K - s_F F, over every sign u, lies below `at_stake` (d can be no larger), else
//     inconclusive. With both signs established this is the test of Z;
//   - when the excess is not significant: inconclusive if the smallest bias the test could
//     detect (80% power) exceeds `at_stake`, or if the interval of X allows an added bias of
//     `at_stake` or more (d <= |mean X|, so the bound is the larger end of X's interval in
//     magnitude; where both means' signs are established and equal, d = s mean X and the
//     bound is that end alone); else no detectable added bias. A sign test that
//     is significant where the t test is not (one sample far the other way) is named in the
//     reason with the mean's interval; the verdict rests on the mean, the bias that adds up.
// `baseline` names what F is in the reasons: empty for the correctly rounded floor ("its
// floor"), else the --against model's name (no floor: it has a bias of its own).
//
// A run makes two comparisons per output (O, and delta when there is one): of the signed
// errors, and of the magnitude errors (sign(target) x error, measure.hpp outward_mean: a
// rounding toward zero on outputs of either sign cancels in the signed mean and shows here).
// Each is made at per_comparison_alpha(alpha, comparisons) = alpha / comparisons (Bonferroni),
// so that a kernel that adds no bias is called `adds bias` by a run with probability at most
// alpha, however the comparisons depend on each other; the run's verdict is combine() of all.
// Pure functions, no state.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "studies/statistics.hpp"

namespace fb::attn {

// Fewer independent samples than this never give a verdict (t with < 7 degrees of freedom
// at alpha = 1e-3 needs t > 5.4, and one outlier decides it).
inline constexpr std::size_t kMinVerdictSamples = 8;
// The default size at stake, in ulps of the output format: a bias per attention call that
// the test must be able to see for "no detectable added bias" to mean anything. Half the smallest
// bias known to break training: Qiu & Yao's bf16 P̄·V bias (fa-bf16acc, sink, seqlen 256)
// measures -0.09 ulp in O and +0.16 ulp in delta here (docs/DESIGN.md §13).
inline constexpr double kDefaultAtStakeUlps = 0.05;

enum class Verdict { adds_bias, less_biased_than_floor, no_detectable_bias, inconclusive };
// "adds bias", "less biased than its format's floor", "no detectable added bias", "inconclusive".
std::string verdict_text(Verdict v);
// The combined verdict of a run's comparisons (O, delta; signed and magnitude): adds bias if
// any adds bias, else inconclusive if any is, else less biased if any is, else no detectable
// added bias.
Verdict combine(Verdict a, Verdict b);
// The level of each of a run's `comparisons` tests for a run-level level `alpha`: alpha /
// comparisons (comparisons >= 1).
double per_comparison_alpha(double alpha, int comparisons);
// How many comparisons a run makes: signed and magnitude for O, and for delta where the run
// has one (bias-test, demo on a trace with dO; sweep always runs the backward).
constexpr int run_comparisons(bool has_delta) { return has_delta ? 4 : 2; }

// Sufficient statistics of the pairs (K_i, F_i) and of their difference X_i, kept apart so
// that a kernel equal to its floor has an exactly zero excess (sweep shards carry these).
struct FloorMoments {
  std::size_t n = 0;
  double sum_k = 0, sumsq_k = 0, sum_f = 0, sumsq_f = 0, sum_x = 0, sumsq_x = 0;
  std::size_t x_positives = 0, x_negatives = 0;
  void add(double kernel, double floor);
};

struct FloorComparison {
  Verdict verdict = Verdict::inconclusive;
  BiasStatistics kernel, floor;  // K and F
  BiasStatistics excess;         // X = K - F (its sign test included)
  BiasStatistics distance;       // Z: > 0 when the kernel lies further from zero (no sign test)
  double at_stake = kDefaultAtStakeUlps;
  std::string reason;  // why this verdict, one clause ("excess +0.31 ulp, 12x its floor ...")
};

FloorComparison compare_with_floor(const FloorMoments& m, double alpha, double at_stake,
                                   const std::string& baseline = {});
// The same from the samples themselves (kernel.size() == floor.size()).
FloorComparison compare_with_floor(const std::vector<double>& kernel, const std::vector<double>& floor, double alpha,
                                   double at_stake, const std::string& baseline = {});
// compare_with_floor of magnitude errors (sign of the target x error), its reason ending with
// which way the magnitudes move where the verdict found a direction: for "adds bias" the
// kernel's ("; magnitudes shrink toward zero" when its mean is negative, "; magnitudes grow
// away from zero" when positive); for "less biased" the floor's (or the baseline's), which
// the kernel follows less ("; the floor's magnitudes shrink toward zero, the kernel's less").
// The distance words ("further from zero") are about the magnitude error's mean, which reads
// the wrong way round alone.
FloorComparison compare_magnitude_with_floor(const FloorMoments& m, double alpha, double at_stake,
                                             const std::string& baseline = {});
FloorComparison compare_magnitude_with_floor(const std::vector<double>& kernel, const std::vector<double>& floor,
                                             double alpha, double at_stake, const std::string& baseline = {});

}  // namespace fb::attn
