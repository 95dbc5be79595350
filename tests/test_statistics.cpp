// tests/test_statistics.cpp: the bias statistics against Boost.Math's distributions,
// and their behaviour on synthetic data with known bias and with none.
#include <doctest/doctest.h>

#include <boost/math/distributions/binomial.hpp>
#include <boost/math/distributions/normal.hpp>
#include <boost/math/distributions/non_central_t.hpp>
#include <boost/math/distributions/students_t.hpp>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>

#include "studies/statistics.hpp"
#include "tests/test_scale.hpp"

namespace {
using fb_test::sanitizer_scale;
}  // namespace

TEST_CASE("student_t_cdf_and_quantile_match_boost") {
  for (double dof : {1.0, 2.0, 3.5, 10.0, 29.0, 100.0, 1e4, 1e6}) {
    boost::math::students_t dist(dof);
    for (double t : {-40.0, -7.3, -2.0, -0.5, 0.0, 0.1, 1.3, 3.0, 12.0}) {
      const double expected = boost::math::cdf(dist, t);
      CAPTURE(dof);
      CAPTURE(t);
      CHECK(fb::attn::student_t_cdf(t, dof) == doctest::Approx(expected).epsilon(1e-9));
    }
    for (double p : {1e-6, 0.0005, 0.05, 0.5, 0.8, 0.9995}) {
      CAPTURE(dof);
      CAPTURE(p);
      CHECK(fb::attn::student_t_quantile(p, dof) == doctest::Approx(boost::math::quantile(dist, p)).epsilon(1e-7));
    }
  }
  // Upper quantiles keep tails that 1 - tail cannot hold (--alpha 1e-25 reached only ~1e-16).
  for (double dof : {7.0, 31.0, 299.0}) {
    boost::math::students_t dist(dof);
    for (double tail : {0.2, 5e-4, 1e-12, 5e-17, 1e-25, 1e-100}) {
      CAPTURE(dof);
      CAPTURE(tail);
      CHECK(fb::attn::student_t_upper_quantile(tail, dof) ==
            doctest::Approx(boost::math::quantile(boost::math::complement(dist, tail))).epsilon(1e-7));
    }
  }
  // Large dof (a merged sweep's n): the incomplete beta lost every digit by dof 10^15 (an upper
  // quantile of 0.03 for 3.48); the expansion that replaces it above 10^5 is checked on both
  // sides of the switch, quantiles and tails down to 1e-100.
  for (double dof : {9.9e4, 1e5, 3e5, 1e6, 1e9, 1e12, 1e15, 1e18}) {
    boost::math::students_t dist(dof);
    for (double tail : {0.4, 0.2, 5e-4, 1e-12, 1e-25, 1e-100}) {
      CAPTURE(dof);
      CAPTURE(tail);
      CHECK(fb::attn::student_t_upper_quantile(tail, dof) ==
            doctest::Approx(boost::math::quantile(boost::math::complement(dist, tail))).epsilon(1e-10));
      CHECK(fb::attn::student_t_quantile(tail, dof) ==
            doctest::Approx(boost::math::quantile(dist, tail)).epsilon(1e-10));
    }
    for (double t : {-40.0, -21.0, -7.0, -3.0, -1.0, -0.3, 0.0, 0.5, 2.0}) {
      CAPTURE(dof);
      CAPTURE(t);
      CHECK(fb::attn::student_t_cdf(t, dof) == doctest::Approx(boost::math::cdf(dist, t)).epsilon(1e-10));
    }
  }
  boost::math::normal normal;
  for (double p : {1e-9, 1e-3, 0.2, 0.5, 0.975}) {
    CHECK(fb::attn::normal_quantile(p) == doctest::Approx(boost::math::quantile(normal, p)).epsilon(1e-9));
  }
}

TEST_CASE("student_t_cdf: small tails to relative accuracy, as reports print them") {
  // doctest's Approx has an absolute floor of epsilon, so tails like 1e-17 need their own
  // relative check: a tail computed as 1 - (1 - p) comes out as 0 or 4.4e-16.
  for (double dof : {3.0, 29.0, 255.0, 999.0, 1e4, 1e6}) {
    boost::math::students_t dist(dof);
    for (double t : {-1.0, -2.5, -6.0, -9.0, -14.0, -30.0, -80.0}) {
      const double expected = boost::math::cdf(dist, t);
      if (!(expected > 1e-300)) continue;
      CAPTURE(dof);
      CAPTURE(t);
      CHECK(std::fabs(fb::attn::student_t_cdf(t, dof) - expected) <= 1e-8 * expected);
    }
  }
}

TEST_CASE("p_value_text: 3 significant digits, and an underflow never prints as 0") {
  CHECK(fb::attn::p_value_text(0.0123456) == "0.0123");
  CHECK(fb::attn::p_value_text(1.0) == "1");
  CHECK(fb::attn::p_value_text(0.0) == "<1e-300");
}

TEST_CASE("sign_test_p_matches_boost_binomial") {
  for (std::size_t n : {1u, 5u, 20u, 101u, 1000u, 20000u}) {
    boost::math::binomial dist(static_cast<double>(n), 0.5);
    for (std::size_t k : {std::size_t{0}, n / 3, n / 2, n - n / 4, n}) {
      const std::size_t low = std::min(k, n - k);
      const double expected = std::min(1.0, 2.0 * boost::math::cdf(dist, static_cast<double>(low)));
      CAPTURE(n);
      CAPTURE(k);
      if (expected > 1e-250) {
        CHECK(fb::attn::binomial_two_sided_p(k, n) == doctest::Approx(expected).epsilon(1e-8));
      } else {
        CHECK(fb::attn::binomial_two_sided_p(k, n) < 1e-200);
      }
    }
  }
}

TEST_CASE("summarize_detects_known_bias_and_reports_ci") {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> noise(0.0, 1.0);
  std::vector<double> data(20000);
  for (double& x : data) x = -0.1 + noise(rng);
  const auto s = fb::attn::summarize(data, 1e-3);
  CHECK(s.biased);
  CHECK(s.p_t < 1e-6);
  CHECK(s.p_sign < 1e-3);
  CHECK(s.ci_low < -0.1);
  CHECK(s.ci_high > -0.1);
  CHECK(s.ci_high < 0.0);
  // The smallest detectable bias (alpha 1e-3, 80% power): a bias of that size, in standard
  // errors the noncentrality of the t statistic, is rejected with probability 0.8 by the
  // two-sided test, by Boost.Math's noncentral t. (The usual (t_.9995 + t_.8) * se has less
  // power, so it is smaller.)
  const double df = static_cast<double>(data.size() - 1);
  const double se = s.stddev / std::sqrt(static_cast<double>(data.size()));
  const boost::math::students_t t(df);
  const double t_crit = boost::math::quantile(t, 0.9995);
  const boost::math::non_central_t shifted(df, s.min_detectable / se);
  const double power = boost::math::cdf(boost::math::complement(shifted, t_crit)) + boost::math::cdf(shifted, -t_crit);
  CHECK(power == doctest::Approx(0.8).epsilon(1e-6));
  CHECK(s.min_detectable > (t_crit + boost::math::quantile(t, 0.8)) * se);
  CHECK(s.min_detectable < 0.1);
}

TEST_CASE("summarize_false_positive_rate_within_binomial_bound") {
  // With no bias, the t-test rejects at rate alpha; over many seeds the number of
  // rejections must fall inside the 99.9% binomial interval.
  const int repeats = sanitizer_scale() ? 400 : 2000;
  const double alpha = 0.05;
  int rejections = 0;
  for (int seed = 0; seed < repeats; ++seed) {
    std::mt19937_64 rng(static_cast<std::uint64_t>(seed) * 7919u + 1u);
    std::normal_distribution<double> noise(0.0, 3.0);
    std::vector<double> data(200);
    for (double& x : data) x = noise(rng);
    if (fb::attn::summarize(data, alpha).biased) ++rejections;
  }
  boost::math::binomial dist(repeats, alpha);
  const double lo = boost::math::quantile(dist, 0.0005);
  const double hi = boost::math::quantile(boost::math::complement(dist, 0.0005));
  CAPTURE(rejections);
  CHECK(rejections >= lo);
  CHECK(rejections <= hi);
}

TEST_CASE("summarize_edge_cases") {
  CHECK_FALSE(fb::attn::summarize({}, 1e-3).biased);
  CHECK_FALSE(fb::attn::summarize({0.0, 0.0, 0.0}, 1e-3).biased);
  // Equal samples: t = inf is no evidence of its own; the p-value is the exact sign test's,
  // n samples of one sign (Boost's binomial): 4 of them are not significant, 12 are.
  const auto constant = fb::attn::summarize({0.5, 0.5, 0.5, 0.5}, 1e-3);
  CHECK(constant.p_t == doctest::Approx(2.0 * boost::math::pdf(boost::math::binomial(4, 0.5), 4)).epsilon(1e-12));
  CHECK_FALSE(constant.biased);
  const auto twelve = fb::attn::summarize(std::vector<double>(12, -0.5), 1e-3);
  CHECK(twelve.p_t == doctest::Approx(2.0 * boost::math::pdf(boost::math::binomial(12, 0.5), 0)).epsilon(1e-12));
  CHECK(twelve.biased);
}
