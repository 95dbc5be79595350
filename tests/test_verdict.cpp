// tests/test_verdict.cpp: the bias verdict (studies/verdict.hpp) on synthetic samples whose
// truth is known by construction, its t statistics against Boost.Math's Student t, and the
// moments form (sweep, merge) against the sample form.
#include <doctest/doctest.h>

#include <boost/math/distributions/binomial.hpp>
#include <boost/math/distributions/students_t.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "studies/verdict.hpp"

namespace {

using fb::attn::compare_with_floor;
using fb::attn::FloorComparison;
using fb::attn::FloorMoments;
using fb::attn::Verdict;

// n samples: the floor's error around floor_mean, the kernel's around kernel_mean, each with
// its own noise (sd) and a shared part (both see the same inputs, so their errors correlate).
struct Pairs {
  std::vector<double> kernel, floor;
};
Pairs draw(int n, double kernel_mean, double floor_mean, double sd, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> noise(0.0, sd);
  Pairs p;
  for (int i = 0; i < n; ++i) {
    const double shared = noise(rng);
    p.floor.push_back(floor_mean + shared + 0.1 * noise(rng));
    p.kernel.push_back(kernel_mean + shared + 0.1 * noise(rng));
  }
  return p;
}

// n samples of a floor erring by about -0.0317 ulp (spread by a sine, no two alike) and a kernel
// shifted from it by about `shift` in every sample (scaled by 1 + 0.1 cos i, so the excess has a
// spread): the verdict's size rules on an excess that is significant and tiny.
Pairs shifted_from_floor(int n, double shift) {
  Pairs p;
  for (int i = 0; i < n; ++i) {
    const double f = -0.0317 + 0.004 * std::sin(3.0 * i);
    p.floor.push_back(f);
    p.kernel.push_back(f + shift * (1.0 + 0.1 * std::cos(1.0 * i)));
  }
  return p;
}

// Two-sided p of a one-sample t test, from Boost (the independent reference).
double boost_p(const std::vector<double>& x) {
  const double n = static_cast<double>(x.size());
  double mean = 0;
  for (double v : x) mean += v;
  mean /= n;
  double ss = 0;
  for (double v : x) ss += (v - mean) * (v - mean);
  const double se = std::sqrt(ss / (n - 1) / n);
  boost::math::students_t dist(n - 1);
  return 2.0 * boost::math::cdf(boost::math::complement(dist, std::fabs(mean / se)));
}

}  // namespace

TEST_CASE("direction: a kernel closer to zero than its floor is less biased, never 'adds bias'") {
  // The case: the floor (bf16 O, delta from it) errs by -0.032 ulp, the kernel (O kept
  // in fp32) by +0.0001: the excess is large and positive, but the kernel lies closer to zero.
  const Pairs p = draw(300, 0.0001, -0.032, 0.01, 1);
  const FloorComparison c = compare_with_floor(p.kernel, p.floor, 1e-3, 0.02);
  CHECK(c.excess.mean > 0.03);
  CHECK(c.excess.p_t < 1e-3);
  CHECK(c.distance.mean < 0);
  CHECK(c.verdict == Verdict::less_biased_than_floor);
}

TEST_CASE("direction: further from zero in the floor's direction, or beyond it, adds bias") {
  const Pairs same = draw(64, 0.05, 0.01, 0.01, 2);  // same side, further out
  CHECK(compare_with_floor(same.kernel, same.floor, 1e-3, 0.02).verdict == Verdict::adds_bias);
  const Pairs beyond = draw(64, 0.08, -0.02, 0.01, 3);  // past zero, further out on the other side
  const FloorComparison c = compare_with_floor(beyond.kernel, beyond.floor, 1e-3, 0.02);
  CHECK(c.verdict == Verdict::adds_bias);
  // The reason states the size next to the floor: "excess +0.1 ulp, 5x its floor's -0.02 ulp".
  CHECK(c.reason.find("its floor's") != std::string::npos);
  const Pairs negative = draw(64, -0.06, -0.01, 0.01, 4);  // negative bias: the sign of the excess
  const FloorComparison n = compare_with_floor(negative.kernel, negative.floor, 1e-3, 0.02);
  CHECK(n.excess.mean < 0);
  CHECK(n.verdict == Verdict::adds_bias);
}

TEST_CASE("the excess is sized against the floor only where the floor's mean is established") {
  // A floor of mean ~0 (its interval holds 0) printed "2.3e+04x its floor's +1.56e-08 ulp": a
  // ratio to noise. The floor here is drawn around 0, the kernel 0.05 ulp away.
  const Pairs p = draw(64, 0.05, 0.0, 0.01, 11);
  const FloorComparison c = compare_with_floor(p.kernel, p.floor, 1e-3, 0.02);
  REQUIRE(c.floor.ci_low < 0.0);
  REQUIRE(c.floor.ci_high > 0.0);
  CHECK(c.reason.find("its floor's") != std::string::npos);
  CHECK(c.reason.find("not distinguishable from 0") != std::string::npos);
  CHECK(c.reason.find("x its floor's") == std::string::npos);
  // An established floor keeps its ratio.
  const Pairs q = draw(64, 0.05, 0.02, 0.001, 12);
  const FloorComparison d = compare_with_floor(q.kernel, q.floor, 1e-3, 0.02);
  REQUIRE(d.floor.ci_low > 0.0);
  CHECK(d.reason.find("x its floor's") != std::string::npos);
}

TEST_CASE("direction: a mirrored error (moved, no further from zero) is no detectable added bias") {
  // kernel ≈ -floor: the excess is significant, the distance from zero the same.
  std::vector<double> kernel, floor;
  std::mt19937_64 rng(5);
  std::normal_distribution<double> noise(0.0, 0.002);
  for (int i = 0; i < 200; ++i) {
    const double f = 0.03 + noise(rng);
    floor.push_back(f);
    kernel.push_back(-f + 1e-4 * noise(rng));
  }
  const FloorComparison c = compare_with_floor(kernel, floor, 1e-3, 0.02);
  CHECK(c.excess.p_t < 1e-3);
  CHECK(c.verdict == Verdict::no_detectable_bias);
}

TEST_CASE("direction: a floor whose mean is noise gives no direction; its sample sign never decides") {
  // The floor's true mean is 0 (its sample mean is a coin toss) and the kernel adds a small,
  // clearly significant +0.002 ulp: the truth is a kernel further from zero than its floor,
  // never closer. Trusting the floor's sample sign said "less biased" whenever that sign came
  // out negative (a flip with the seed and the trial count). Now the verdict is "adds bias"
  // only where the data show |K| > |F| for either sign of the floor's mean, and otherwise
  // bounds the added bias by the interval of |K| - |F| over the signs left open.
  for (unsigned seed = 100; seed < 140; ++seed) {
    const Pairs p = draw(64, 0.002, 0.0, 0.01, seed);
    const FloorComparison c = compare_with_floor(p.kernel, p.floor, 1e-3, 0.05);
    CAPTURE(seed);
    REQUIRE(c.excess.p_t < 1e-3);  // the excess itself is seen every time
    CHECK(c.verdict != Verdict::less_biased_than_floor);
    if (c.verdict == Verdict::adds_bias) continue;
    // Well below 0.05 ulp at this noise: "no detectable added bias", saying the sign is open.
    CHECK(c.verdict == Verdict::no_detectable_bias);
    CHECK(c.reason.find("established") != std::string::npos);
    // With a stake below that bound the same data cannot decide.
    CHECK(compare_with_floor(p.kernel, p.floor, 1e-3, 1e-4).verdict == Verdict::inconclusive);
  }
}

TEST_CASE("power: too few samples, zero variance and a wide interval are inconclusive") {
  // Two trials whose excess happens to be equal: t = inf, yet no evidence.
  CHECK(compare_with_floor({0.5, 0.7}, {0.25, 0.45}, 1e-3, 0.02).verdict == Verdict::inconclusive);
  // Enough samples, zero variance of a nonzero excess: t = inf is no evidence, the sign test
  // is (20 samples of one sign, p = 2^-19 by Boost's binomial), and the verdict goes on.
  std::vector<double> k(20), f(20);
  for (int i = 0; i < 20; ++i) {
    f[i] = 0.25 * i;  // dyadic: k - f is exactly 0.5 in every sample
    k[i] = f[i] + 0.5;
  }
  const FloorComparison zero_var = compare_with_floor(k, f, 1e-3, 0.02);
  CHECK(zero_var.excess.stddev == 0);
  const boost::math::binomial fair20(20, 0.5);
  CHECK(zero_var.excess.p_t == doctest::Approx(2.0 * boost::math::pdf(fair20, 20)).epsilon(1e-12));
  CHECK(zero_var.verdict == Verdict::adds_bias);
  // Ten copies of one sample whose value is no dyadic fraction of n: the fp64 mean,
  // sum / 10, misses the value by an ulp, and a spread of that ulp gave t ~ 1e16 and
  // "adds bias" (ten copies of one capture under bias-test --traces).
  const double copy_k = 0.2184200286865234, copy_f = 0.1;
  double excess_sum = 0;
  for (int i = 0; i < 10; ++i) excess_sum += copy_k - copy_f;
  CHECK(excess_sum / 10 != copy_k - copy_f);  // the case: the plain mean is off by rounding
  const FloorComparison copies =
      compare_with_floor(std::vector<double>(10, copy_k), std::vector<double>(10, copy_f), 1e-3, 0.02);
  CHECK(copies.excess.stddev == 0);
  CHECK(copies.verdict == Verdict::inconclusive);  // ten of one sign: p = 2^-9, above alpha
  CHECK(copies.reason.find("in every sample: with no spread only the sign test decides") != std::string::npos);
  // Noise of 3 ulp per trial over 16 trials: no bias seen, but none of 0.02 ulp could be.
  const Pairs wide = draw(16, 0.0, 0.0, 3.0, 6);
  std::vector<double> noisy = wide.kernel;
  for (std::size_t i = 0; i < noisy.size(); ++i) noisy[i] += 3.0 * std::sin(17.0 * static_cast<double>(i));
  const FloorComparison w = compare_with_floor(noisy, wide.floor, 1e-3, 0.02);
  CHECK(w.excess.p_t >= 1e-3);
  CHECK(w.excess.min_detectable > 0.02);
  CHECK(w.verdict == Verdict::inconclusive);
  CHECK(w.reason.find("could detect only") != std::string::npos);
  // The same data with a larger bias at stake decides.
  CHECK(compare_with_floor(noisy, wide.floor, 1e-3, 1e3).verdict == Verdict::no_detectable_bias);
}

TEST_CASE("a kernel equal to its floor in every sample has no detectable added bias") {
  const Pairs p = draw(12, 0.01, 0.01, 0.01, 7);
  CHECK(compare_with_floor(p.floor, p.floor, 1e-3, 0.02).verdict == Verdict::no_detectable_bias);
}

TEST_CASE("the excess and the distance: t tests against Boost.Math") {
  const Pairs p = draw(40, 0.02, -0.01, 0.01, 8);
  const FloorComparison c = compare_with_floor(p.kernel, p.floor, 1e-3, 0.02);
  std::vector<double> x, z;
  const double s_k = c.kernel.mean < 0 ? -1 : 1, s_f = c.floor.mean < 0 ? -1 : 1;
  for (std::size_t i = 0; i < p.kernel.size(); ++i) {
    x.push_back(p.kernel[i] - p.floor[i]);
    z.push_back(s_k * p.kernel[i] - s_f * p.floor[i]);
  }
  CHECK(c.excess.p_t == doctest::Approx(boost_p(x)).epsilon(1e-6));
  CHECK(c.distance.p_t == doctest::Approx(boost_p(z)).epsilon(1e-6));
  CHECK(c.distance.mean == doctest::Approx(std::fabs(c.kernel.mean) - std::fabs(c.floor.mean)));
}

TEST_CASE("moments form (sweep shards) gives the sample form's verdicts and statistics") {
  for (unsigned seed = 10; seed < 16; ++seed) {
    for (const auto& means : {std::pair{0.0001, -0.032}, {0.05, 0.01}, {0.08, -0.02}, {0.0, 0.0}}) {
      const double km = means.first;  // a plain variable: doctest's CAPTURE cannot take a structured binding
      const Pairs p = draw(30, km, means.second, 0.01, seed);
      FloorMoments m;
      for (std::size_t i = 0; i < p.kernel.size(); ++i) m.add(p.kernel[i], p.floor[i]);
      const FloorComparison a = compare_with_floor(p.kernel, p.floor, 1e-3, 0.02);
      const FloorComparison b = compare_with_floor(m, 1e-3, 0.02);
      CAPTURE(seed);
      CAPTURE(km);
      CHECK(a.verdict == b.verdict);
      CHECK(b.excess.mean == doctest::Approx(a.excess.mean).epsilon(1e-9));
      CHECK(b.excess.stddev == doctest::Approx(a.excess.stddev).epsilon(1e-6));
      CHECK(b.distance.mean == doctest::Approx(a.distance.mean).epsilon(1e-9));
      CHECK(b.distance.stddev == doctest::Approx(a.distance.stddev).epsilon(1e-6));
      CHECK(b.excess.positives == a.excess.positives);
    }
  }
}

// Merged sweep shards keep only sums. Equal samples have no spread, but Σx² - Σx·mean leaves
// the sums' rounding error: a "spread" of 1e-17 that gave t = 1e16 and "adds bias" where the
// samples form says zero variance (inconclusive). A real spread, even a small one, survives.
TEST_CASE("moments form: equal samples have zero spread, as the samples form finds") {
  int kept_rounding = 0;
  for (std::size_t n : {2u, 3u, 7u, 10u, 30u, 101u, 1000u}) {
    for (int k = 1; k <= 40; ++k) {
      const double kernel = 0.1 + 0.0371 * k, floor = -0.013 * k + 0.007;  // none exactly representable
      FloorMoments m;
      std::vector<double> ks(n, kernel), fs(n, floor);
      for (std::size_t i = 0; i < n; ++i) m.add(kernel, floor);
      const double raw = m.sumsq_x - m.sum_x * (m.sum_x / static_cast<double>(n));
      if (raw > 0) ++kept_rounding;  // what the old clamp-at-0 formula called spread
      const FloorComparison from_sums = compare_with_floor(m, 1e-3, 0.02);
      const FloorComparison from_samples = compare_with_floor(ks, fs, 1e-3, 0.02);
      CAPTURE(n);
      CAPTURE(k);
      CHECK(from_sums.excess.stddev == 0.0);
      CHECK(from_sums.kernel.stddev == 0.0);
      CHECK(from_sums.distance.stddev == 0.0);
      // Up to 10 samples the sign test (p = 2^(1-n)) stays above alpha; from 11 it decides: the
      // kernel's positive error against the floor's negative one lies further from zero.
      CHECK(from_samples.verdict == (n <= 10 ? Verdict::inconclusive : Verdict::adds_bias));
      CHECK(from_sums.verdict == from_samples.verdict);
    }
  }
  CHECK(kept_rounding > 0);  // the case is real: the sums alone leave a positive numerator
  // Two values a relative 1e-3 apart, alternating: the sample variance is exactly
  // n/(n-1) ((a-b)/2)^2, and the moments form keeps it.
  for (std::size_t n : {10u, 1000u}) {
    const double a = 0.3, b = 0.3 * (1 + 1e-3);
    FloorMoments m;
    for (std::size_t i = 0; i < n; ++i) m.add(i % 2 ? a : b, 0.0);
    const double want = std::sqrt(static_cast<double>(n) / static_cast<double>(n - 1)) * (b - a) / 2;
    const FloorComparison c = compare_with_floor(m, 1e-3, 0.02);
    CAPTURE(n);
    CHECK(c.excess.stddev == doctest::Approx(want).epsilon(1e-3));
  }
}

TEST_CASE("combine: adds bias dominates, then inconclusive, then less biased") {
  CHECK(fb::attn::combine(Verdict::no_detectable_bias, Verdict::adds_bias) == Verdict::adds_bias);
  CHECK(fb::attn::combine(Verdict::inconclusive, Verdict::adds_bias) == Verdict::adds_bias);
  CHECK(fb::attn::combine(Verdict::less_biased_than_floor, Verdict::inconclusive) == Verdict::inconclusive);
  CHECK(fb::attn::combine(Verdict::less_biased_than_floor, Verdict::no_detectable_bias) ==
        Verdict::less_biased_than_floor);
  CHECK(fb::attn::combine(Verdict::no_detectable_bias, Verdict::no_detectable_bias) == Verdict::no_detectable_bias);
}

// Found by the verdict audit: 15 of 16 samples with a positive excess (sign test p = 0.0005)
// beside "no detectable added bias" and no word of it. One sample far the other way keeps the
// mean's t test from significance; the verdict rests on the mean, and the reason now names the
// sign test's finding with the mean's interval.
TEST_CASE("a sign test that finds a direction the t test does not is named in the reason") {
  std::vector<double> floor, kernel;
  for (int i = 0; i < 16; ++i) {
    const double f = -0.03 + 0.001 * std::sin(i + 1.0);
    const double x = i == 7 ? -0.02 : 0.001 * (1.0 + 0.01 * i);
    floor.push_back(f);
    kernel.push_back(f + x);
  }
  const FloorComparison c = compare_with_floor(kernel, floor, 1e-3, 0.05);
  // The two tests' truths, from Boost: the t test's p above alpha, the sign test's below.
  std::vector<double> x;
  for (std::size_t i = 0; i < kernel.size(); ++i) x.push_back(kernel[i] - floor[i]);
  REQUIRE(boost_p(x) > 1e-3);
  const double p_sign = 2.0 * boost::math::cdf(boost::math::binomial(16, 0.5), 1.0);
  REQUIRE(p_sign < 1e-3);
  CHECK(c.excess.p_sign == doctest::Approx(p_sign).epsilon(1e-9));
  CHECK(c.verdict == Verdict::no_detectable_bias);
  CHECK(c.reason.find("sign test finds the excess mostly positive (+15/-1") != std::string::npos);
  CHECK(c.reason.find("its mean lies in [") != std::string::npos);
  // Without the outlier the t test agrees with the sign test: nothing to point out.
  std::vector<double> steady = kernel;
  steady[7] = floor[7] + 0.001;
  const FloorComparison agreed = compare_with_floor(steady, floor, 1e-3, 0.05);
  REQUIRE(agreed.excess.p_t < 1e-3);
  CHECK(agreed.reason.find("sign test") == std::string::npos);
}

// Found by the verdict audit: correctly-rounded+o-rna's delta lies 6e-7 ulp closer to zero than
// its floor's, every trial: significant, and called "less biased than its format's floor" with
// both means printed as -0.0317. An improvement below the size at stake adds no bias and is no
// improvement that matters; the reason names its size.
TEST_CASE("an improvement below the size at stake is no detectable added bias, with its size") {
  const Pairs p = shifted_from_floor(32, 6e-7);  // closer to zero: the floor's errors are < 0
  const std::vector<double>&floor = p.floor, &kernel = p.kernel;
  const FloorComparison c = compare_with_floor(kernel, floor, 1e-3, 0.05);
  REQUIRE(c.excess.p_t < 1e-3);
  CHECK(c.verdict == Verdict::no_detectable_bias);
  CHECK(c.reason.find("e-07 ulp closer to zero than the floor's, below the 0.05 ulp at stake") != std::string::npos);
  // At a size at stake below the improvement, it is less biased.
  const FloorComparison fine = compare_with_floor(kernel, floor, 1e-3, 1e-7);
  CHECK(fine.verdict == Verdict::less_biased_than_floor);
  CHECK(fine.reason.find("ulp closer to zero than the floor's") != std::string::npos);
}

// Found by the verdict audit: with --against B the reasons called B "its floor", so
// fa2-sm80+o-rtz against correctly-rounded+o-rtz read as "no detectable added bias" under a
// floor heading. B has its own bias: every reason names it.
TEST_CASE("a named baseline is named in every reason, never called a floor") {
  const std::string b = "correctly-rounded+o-rtz";
  const Pairs adds = draw(40, 0.08, 0.01, 0.01, 21);
  const FloorComparison a = compare_with_floor(adds.kernel, adds.floor, 1e-3, 0.02, b);
  REQUIRE(a.verdict == Verdict::adds_bias);
  CHECK(a.reason.find(b + "'s") != std::string::npos);
  CHECK(a.reason.find("floor") == std::string::npos);
  const FloorComparison same = compare_with_floor(adds.floor, adds.floor, 1e-3, 0.02, b);
  CHECK(same.reason == "equal to " + b + " in every sample");
  const Pairs less = draw(300, 0.0001, -0.032, 0.01, 1);
  const FloorComparison l = compare_with_floor(less.kernel, less.floor, 1e-3, 0.02, b);
  REQUIRE(l.verdict == Verdict::less_biased_than_floor);
  CHECK(l.reason.find("closer to zero than " + b + "'s") != std::string::npos);
  CHECK(l.reason.find("floor") == std::string::npos);
}

// Found by the fourth verdict audit: fa2-sm80+o-fp32's delta "adds bias" (exit 1) by 0.000175
// ulp, 1/286 of the size at stake, while fa2-sm80 passes. A detected bias is a failed check by
// the contract, however small; the reason now says how small.
TEST_CASE("an added bias below the size at stake is still added, and the reason says it is small") {
  const Pairs p = shifted_from_floor(40, -2e-4);  // further from zero: the floor's errors are < 0
  const std::vector<double>&floor = p.floor, &kernel = p.kernel;
  const FloorComparison c = compare_with_floor(kernel, floor, 1e-3, 0.05);
  REQUIRE(c.verdict == Verdict::adds_bias);
  CHECK(c.reason.find("ulp: detectable, though below the 0.05 ulp at stake") != std::string::npos);
  const FloorComparison small_stake = compare_with_floor(kernel, floor, 1e-3, 1e-5);
  CHECK(small_stake.verdict == Verdict::adds_bias);
  CHECK(small_stake.reason.find("below the") == std::string::npos);
}

// Found by the fifth verdict audit: a capture +1 ulp off in every element of 12 heads printed
// t = inf, p < 1e-300, "mean differs from 0", then "inconclusive: zero variance" (exit 4),
// while the same kernel made slightly LESS biased (one sample jittered) got "adds bias" (exit
// 1). The p-value of equal samples is the sign test's, and both now add bias.
TEST_CASE("a kernel off by one ulp in every sample adds bias, as one with jitter does") {
  std::vector<double> floor(12), kernel(12);
  for (int i = 0; i < 12; ++i) {
    floor[i] = 0.01 * std::sin(2.0 * i);  // the floor's error: noise about 0, no two alike
    kernel[i] = floor[i] + 1.0;
  }
  const FloorComparison constant = compare_with_floor(kernel, floor, 1e-3, 0.05);
  REQUIRE(constant.excess.stddev == 0);
  const boost::math::binomial fair12(12, 0.5);
  CHECK(constant.excess.p_t == doctest::Approx(2.0 * boost::math::pdf(fair12, 12)).epsilon(1e-12));
  CHECK(constant.verdict == Verdict::adds_bias);
  kernel[5] = floor[5] + 0.9;  // less biased, with a spread
  CHECK(compare_with_floor(kernel, floor, 1e-3, 0.05).verdict == Verdict::adds_bias);
  FloorMoments m;  // the sums (sweep, merge) decide alike
  for (int i = 0; i < 12; ++i) m.add(floor[i] + 1.0, floor[i]);
  CHECK(compare_with_floor(m, 1e-3, 0.05).verdict == Verdict::adds_bias);
}

// Found by the fifth verdict audit: "less biased than B" was given for an improvement whose
// estimate (0.107 ulp) reached the 0.1 at stake while its interval reached down to 0.012: the
// interval's bound decides, as it does on the other side ("by at most").
TEST_CASE("less biased needs the improvement's interval, not its estimate, to reach the size at stake") {
  Pairs p;
  for (int i = 0; i < 8; ++i) {
    const double f = -0.5 + 0.01 * std::sin(3.0 * i);  // the floor errs by -0.5 ulp
    p.floor.push_back(f);
    p.kernel.push_back(f + 0.11 + 0.03 * std::cos(1.7 * i));  // about 0.11 ulp closer to zero
  }
  const FloorComparison few = compare_with_floor(p.kernel, p.floor, 1e-3, 0.1);
  REQUIRE(few.excess.p_t < 1e-3);
  REQUIRE(-few.distance.mean >= 0.1);    // the estimate reaches the size at stake...
  REQUIRE(-few.distance.ci_high < 0.1);  // ...its interval does not
  CHECK(few.verdict == Verdict::no_detectable_bias);
  CHECK(few.reason.find("not shown to reach the 0.1 ulp at stake") != std::string::npos);
  // With the interval above the size at stake, it is less biased.
  CHECK(compare_with_floor(p.kernel, p.floor, 1e-3, 0.05).verdict == Verdict::less_biased_than_floor);
}

// Found by the fifth verdict audit: an excess detected (+0.059 ulp, p = 7e-7) beside "no
// detectable added bias" read as a contradiction; the excess carried the error across zero.
TEST_CASE("an excess that carries the error across zero says so beside no detectable added bias") {
  Pairs p;
  for (int i = 0; i < 30; ++i) {
    const double f = -0.04 + 0.01 * std::sin(3.0 * i);
    p.floor.push_back(f);
    p.kernel.push_back(f + 0.06 + 0.06 * std::cos(1.3 * i));  // about +0.02: across zero, closer to it
  }
  const FloorComparison c = compare_with_floor(p.kernel, p.floor, 1e-3, 0.05);
  REQUIRE(c.excess.p_t < 1e-3);
  REQUIRE(c.floor.p_t < 1e-3);    // the floor's sign is established...
  REQUIRE(c.kernel.p_t >= 1e-3);  // ...the kernel's is not (as in the audit's run)
  CHECK(c.verdict == Verdict::no_detectable_bias);
  CHECK(c.reason.find("the excess carries the error across zero") != std::string::npos);
}

// A run combines four comparisons (O and delta, signed and magnitude). Each at alpha, a kernel
// that adds no bias would be called biased far more often than alpha; each at
// per_comparison_alpha(alpha, 4) the run holds alpha whatever their dependence (Bonferroni).
// Null runs drawn here: four independent comparisons, kernel and floor of one mean, with
// noise of their own (so the excess has a spread), the floor's mean -0.03 or +0.03 (a format's
// own bias, established at this n): the kernel adds bias when the excess lies significantly
// beyond it, which chance does in about alpha / 2 of the comparisons.
TEST_CASE("a run's verdict holds its level alpha over its four comparisons") {
  const double alpha = 0.05;
  const int runs = 1500;
  const auto false_alarms = [&](double level) {
    int alarms = 0;
    for (int run = 0; run < runs; ++run) {
      Verdict v = Verdict::no_detectable_bias;
      for (int c = 0; c < 4; ++c) {
        const double mean = c % 2 == 0 ? 0.03 : -0.03;
        const Pairs p = draw(16, mean, mean, 0.01, static_cast<unsigned>(run * 4 + c + 1));
        v = fb::attn::combine(v, compare_with_floor(p.kernel, p.floor, level, 0.05).verdict);
      }
      alarms += v == Verdict::adds_bias;
    }
    return static_cast<double>(alarms) / runs;
  };
  const double held = false_alarms(fb::attn::per_comparison_alpha(alpha, 4));
  const double each_at_alpha = false_alarms(alpha);
  CAPTURE(held);
  CAPTURE(each_at_alpha);
  // 3 standard errors of a binomial proportion alpha over `runs` runs.
  const double slack = 3.0 * std::sqrt(alpha * (1 - alpha) / runs);
  CHECK(held <= alpha + slack);
  CHECK(each_at_alpha > alpha + slack);  // what the level per comparison prevents
  CHECK(fb::attn::per_comparison_alpha(alpha, 4) == alpha / 4);
  CHECK(fb::attn::per_comparison_alpha(alpha, 2) == alpha / 2);
}

// Found by the fifth verdict audit: a non-significant excess was called "no detectable added
// bias" on power alone, whatever its interval allowed: +0.26 ulp with an interval up to +0.65
// passed a 0.5 ulp stake (Qiu & Yao's biased kernel, 8 trials). The interval here is
// Boost.Math's Student t, computed in the test.
TEST_CASE("a non-significant excess whose interval reaches the size at stake is inconclusive") {
  const double alpha = 1e-3 / 4, at_stake = 0.5;
  // Eight excesses around +0.26 (no two alike, none exactly representable), floor around -0.09.
  std::vector<double> k, f;
  for (int i = 0; i < 8; ++i) {
    const double floor = -0.09 + 0.013 * std::sin(3.0 * i), excess = 0.26 + 0.17 * std::cos(2.1 * i + 0.3);
    f.push_back(floor);
    k.push_back(floor + excess);
  }
  double mean = 0, ss = 0;
  for (int i = 0; i < 8; ++i) mean += (k[i] - f[i]) / 8;
  for (int i = 0; i < 8; ++i) ss += (k[i] - f[i] - mean) * (k[i] - f[i] - mean);
  const double se = std::sqrt(ss / 7 / 8);
  const boost::math::students_t t7(7);
  const double p = 2 * boost::math::cdf(boost::math::complement(t7, mean / se));
  const double ci_high = mean + boost::math::quantile(boost::math::complement(t7, alpha / 2)) * se;
  const double power_size = (boost::math::quantile(boost::math::complement(t7, alpha / 2)) +
                             boost::math::quantile(boost::math::complement(t7, 0.2))) *
                            se;
  // The case: not significant, the test's power enough for the stake, the interval beyond it.
  REQUIRE(p > alpha);
  REQUIRE(power_size < at_stake);
  REQUIRE(ci_high > at_stake);
  const FloorComparison c = compare_with_floor(k, f, alpha, at_stake);
  CHECK(c.verdict == Verdict::inconclusive);
  CHECK_MESSAGE(c.reason.find("its interval allows an added bias of up to") != std::string::npos, c.reason);
  // With a stake above the interval's reach the same data have no detectable added bias.
  const FloorComparison wide = compare_with_floor(k, f, alpha, 1.01 * ci_high);
  CHECK(wide.verdict == Verdict::no_detectable_bias);
  // Where both means' signs are established and equal, the bound is the interval's end on the
  // kernel's side: a kernel closer to zero than its floor by a noisy, non-significant amount
  // adds nothing, however far the interval reaches the other way.
  std::vector<double> k2, f2;
  for (int i = 0; i < 16; ++i) {
    const double floor = -1.0 + 0.01 * std::sin(1.7 * i);
    f2.push_back(floor);
    k2.push_back(floor + 0.1 + 0.17 * std::cos(2.3 * i + 0.1));  // toward zero, not significantly
  }
  const double stake = 0.2;
  const FloorComparison closer = compare_with_floor(k2, f2, alpha, stake);
  REQUIRE(closer.excess.p_t > alpha);
  REQUIRE(closer.excess.min_detectable < stake);
  REQUIRE(closer.excess.ci_high > stake);  // |X|'s bound alone would leave it undecided
  REQUIRE(-closer.excess.ci_low < stake);  // the added bias -X is bounded below the stake
  CHECK_MESSAGE(closer.verdict == Verdict::no_detectable_bias, closer.reason);
}

// Found by the fifth verdict audit: eight near-copies of one trace (a low bit of k flipped in
// each) gave samples that differ only by the rounding of their own computation, and that
// "spread" gave t = 3e15 and "adds bias"; the moments form (sweep, merge) called the same data
// spread-free. Both forms now agree: a spread within the samples' rounding is none.
TEST_CASE("a spread within the samples' own rounding is none, as the moments form rules") {
  std::vector<double> k, f;
  for (int i = 0; i < 8; ++i) {
    const double x = 0.001951 * (1 + 4e-16 * (i % 3));  // a few ulps apart
    f.push_back(0.0021 * (1 + 3e-16 * (i % 2)));
    k.push_back(f.back() + x);
  }
  const FloorComparison c = compare_with_floor(k, f, 1e-3 / 4, 0.05);
  CHECK(c.excess.stddev == 0.0);
  CHECK(!c.excess.has_interval());
  // Eight samples of one sign: the sign test's p = 2^-7 is above alpha, so no verdict.
  CHECK(c.verdict == Verdict::inconclusive);
  FloorMoments m;
  for (int i = 0; i < 8; ++i) m.add(k[i], f[i]);
  CHECK(compare_with_floor(m, 1e-3 / 4, 0.05).verdict == c.verdict);
}
