// studies/statistics.cpp: bias statistics; distributions written out from their
// textbook definitions (regularised incomplete beta by Lentz's continued fraction).
#include "studies/statistics.hpp"

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "studies/noncentral_t.hpp"

namespace fb::attn {
namespace {

// Continued fraction for the regularised incomplete beta I_x(a, b) (modified Lentz).
double beta_continued_fraction(double a, double b, double x) {
  constexpr double tiny = 1e-300;
  constexpr double eps = 1e-16;
  double c = 1.0;
  double d = 1.0 - (a + b) * x / (a + 1.0);
  if (std::fabs(d) < tiny) d = tiny;
  d = 1.0 / d;
  double h = d;
  for (int m = 1; m <= 10000; ++m) {
    const double m2 = 2.0 * m;
    double aa = m * (b - m) * x / ((a + m2 - 1.0) * (a + m2));
    d = 1.0 + aa * d;
    if (std::fabs(d) < tiny) d = tiny;
    c = 1.0 + aa / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1.0 / d;
    h *= d * c;
    aa = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0));
    d = 1.0 + aa * d;
    if (std::fabs(d) < tiny) d = tiny;
    c = 1.0 + aa / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1.0 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1.0) < eps) break;
  }
  return h;
}

double regularized_incomplete_beta(double a, double b, double x) {
  if (x <= 0.0) return 0.0;
  if (x >= 1.0) return 1.0;
  const double log_front = std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x);
  // The continued fraction converges fast for x < (a+1)/(a+b+2); use symmetry otherwise.
  if (x < (a + 1.0) / (a + b + 2.0)) return std::exp(log_front) * beta_continued_fraction(a, b, x) / a;
  return 1.0 - std::exp(log_front) * beta_continued_fraction(b, a, 1.0 - x) / b;
}

// Invert a monotone increasing CDF by bisection; robust, and these are not hot paths.
template <class Cdf>
double invert_cdf(Cdf cdf, double p) {
  double lo = -1.0, hi = 1.0;
  while (cdf(lo) > p && lo > -1e300) lo *= 2.0;
  while (cdf(hi) < p && hi < 1e300) hi *= 2.0;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (cdf(mid) < p)
      lo = mid;
    else
      hi = mid;
    if (hi - lo <= 1e-15 * std::max(1.0, std::fabs(mid))) break;
  }
  return 0.5 * (lo + hi);
}

// The sample standard deviation from a sum of squared deviations `ss` of n samples, or 0
// where ss is within the rounding of sums over n samples of squares up to `scale` (each sum
// took up to n roundings, so each is off by at most n·u·scale): such a "spread" is the
// arithmetic's, and gave t statistics of 1e15 on samples that agree to their last ulps.
// summarize and summarize_sums both judge spread by this one rule, so bias-test's sample
// form and sweep's moments form agree on the same data.
double stddev_beyond_rounding(double ss, std::size_t n, double scale) {
  const double rounding = 4.0 * static_cast<double>(n + 1) * std::numeric_limits<double>::epsilon() * scale;
  return n > 1 && ss > rounding ? std::sqrt(ss / static_cast<double>(n - 1)) : 0.0;
}

// min_detectable_effect_in_se(df, alpha, 0.8), remembered per (df, alpha): about a
// millisecond a call, and a merge of a large grid asks for the same few pairs once per row and
// statistic. The cache is a pure function's memo (no floating-point state), bounded in size.
double min_detectable_in_se_at_80_percent(std::size_t df_count, double alpha) {
  const int df = static_cast<int>(std::min<std::size_t>(df_count, INT_MAX));
  const std::pair<int, std::uint64_t> key{df, std::bit_cast<std::uint64_t>(alpha)};
  static std::mutex mutex;
  static std::map<std::pair<int, std::uint64_t>, double> remembered;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (const auto it = remembered.find(key); it != remembered.end()) return it->second;
  }
  const double size = min_detectable_effect_in_se(df, alpha, 0.8);
  std::lock_guard<std::mutex> lock(mutex);
  if (remembered.size() >= 4096) remembered.clear();
  remembered.emplace(key, size);
  return size;
}

// Above this many degrees of freedom the t distribution is taken from its expansion about
// the normal (Cornish-Fisher, Abramowitz & Stegun 26.7.5): the incomplete beta's inputs
// (x = dof/(dof+t^2) near 1, lgamma of dof/2) lose digits as dof grows, ~1e-10 relative at
// dof 10^6 and no digit left at 10^15 (a merged sweep's n can be that large), while the
// expansion's first omitted term, ~z^11/dof^5, is below 1e-15 relative here even at z = 21
// (a tail of 1e-100). tests/test_statistics.cpp checks both sides of the switch against
// Boost.Math.
constexpr double kExpansionDof = 1e5;

// t as a function of the normal deviate z with the same tail, to order 1/dof^4.
double t_from_normal_deviate(double z, double dof) {
  const double z2 = z * z;
  const double g1 = (z2 + 1.0) * z / 4.0;
  const double g2 = ((5.0 * z2 + 16.0) * z2 + 3.0) * z / 96.0;
  const double g3 = (((3.0 * z2 + 19.0) * z2 + 17.0) * z2 - 15.0) * z / 384.0;
  const double g4 = ((((79.0 * z2 + 776.0) * z2 + 1482.0) * z2 - 1920.0) * z2 - 945.0) * z / 92160.0;
  return z + (g1 + (g2 + (g3 + g4 / dof) / dof) / dof) / dof;
}

// Its inverse by Newton's method: t_from_normal_deviate is increasing in z and within a
// relative 1e-9 of z there (|g_k| / dof^k tiny), so a few steps from z = t converge.
double normal_deviate_from_t(double t, double dof) {
  double z = t;
  for (int i = 0; i < 8; ++i) {
    const double h = std::max(1e-300, 1e-7 * std::fabs(z));
    const double slope = (t_from_normal_deviate(z + h, dof) - t_from_normal_deviate(z - h, dof)) / (2.0 * h);
    const double step = (t_from_normal_deviate(z, dof) - t) / slope;
    z -= step;
    if (std::fabs(step) <= 1e-17 * std::fabs(z)) break;
  }
  return z;
}

double normal_cdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }

}  // namespace

double student_t_cdf(double t, double dof) {
  if (std::isinf(t)) return t > 0 ? 1.0 : 0.0;
  if (dof >= kExpansionDof) return normal_cdf(normal_deviate_from_t(t, dof));
  // P(T > |t|) = I_x(dof/2, 1/2) / 2 with x = dof/(dof+t^2), accurate however small the
  // tail is. Only for |t| < 1 (a tail above ~0.15, so no cancellation) use the complementary
  // form 1 - I_{t^2/(dof+t^2)}(1/2, dof/2), since x rounds to 1 for t^2 << dof. (Switching at
  // t^2 < dof instead computed tails like 1e-17 as 1 - (1 - 1e-17): 0 or 4.4e-16.)
  const double t2 = t * t;
  const double tail = t2 < 1.0 ? 0.5 * (1.0 - regularized_incomplete_beta(0.5, 0.5 * dof, t2 / (dof + t2)))
                               : 0.5 * regularized_incomplete_beta(0.5 * dof, 0.5, dof / (dof + t2));
  return t > 0 ? 1.0 - tail : tail;
}

double student_t_quantile(double p, double dof) {
  if (dof >= kExpansionDof) return t_from_normal_deviate(normal_quantile(p), dof);
  return invert_cdf([dof](double t) { return student_t_cdf(t, dof); }, p);
}

double student_t_upper_quantile(double tail, double dof) {
  // P(T <= -t) = P(T > t): the lower tail at -t is computed directly (student_t_cdf), so
  // inverting it keeps tails like 1e-25 that 1 - tail cannot hold.
  if (dof >= kExpansionDof) return -t_from_normal_deviate(normal_quantile(tail), dof);
  return -invert_cdf([dof](double t) { return student_t_cdf(t, dof); }, tail);
}

double normal_quantile(double p) {
  return invert_cdf([](double x) { return normal_cdf(x); }, p);
}

double binomial_two_sided_p(std::size_t k, std::size_t n) {
  if (n == 0) return 1.0;
  const std::size_t low = std::min(k, n - k);
  // log P(X <= low) for X ~ Bin(n, 1/2), summed in log space so large n cannot underflow.
  const double log_half_n = -static_cast<double>(n) * std::log(2.0);
  const double lgn1 = std::lgamma(static_cast<double>(n) + 1.0);
  double log_sum = -std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i <= low; ++i) {
    const double term =
        lgn1 - std::lgamma(static_cast<double>(i) + 1.0) - std::lgamma(static_cast<double>(n - i) + 1.0) + log_half_n;
    const double hi = std::max(log_sum, term);
    log_sum = hi + std::log(std::exp(log_sum - hi) + std::exp(term - hi));
  }
  return std::min(1.0, 2.0 * std::exp(log_sum));
}

BiasStatistics summarize_moments(std::size_t n, double mean, double stddev, std::size_t positives,
                                 std::size_t negatives, double alpha) {
  BiasStatistics s;
  s.n = n;
  s.positives = positives;
  s.negatives = negatives;
  if (n == 0) return s;
  s.mean = mean;
  s.p_sign = binomial_two_sided_p(positives, positives + negatives);
  if (n < 2) {
    s.ci_low = s.ci_high = s.mean;
    return s;
  }
  const double dof = static_cast<double>(n - 1);
  s.stddev = stddev;
  const double se = s.stddev / std::sqrt(static_cast<double>(n));
  const double t_crit = student_t_upper_quantile(alpha / 2.0, dof);
  s.ci_low = s.mean - t_crit * se;
  s.ci_high = s.mean + t_crit * se;
  if (se == 0.0) {
    // Every sample equal: t = ±inf whatever n, no evidence of its own (8 samples of +1 ulp
    // read as p = 0). The evidence is the exact sign test's: n samples, each the mean, so of
    // one sign (known so also where the sign counts were not kept, as for sums).
    s.t_statistic = s.mean == 0.0 ? 0.0 : std::copysign(std::numeric_limits<double>::infinity(), s.mean);
    s.p_t = s.mean == 0.0 ? 1.0 : binomial_two_sided_p(n, n);
  } else {
    s.t_statistic = s.mean / se;
    s.p_t = 2.0 * student_t_cdf(-std::fabs(s.t_statistic), dof);
  }
  // Smallest |bias| a two-sided test at alpha detects with 80% power: the exact noncentral t
  // size (the usual (t_crit + t_0.2) * se has only 72% power at 8 samples and alpha / 4).
  s.min_detectable = min_detectable_in_se_at_80_percent(n - 1, alpha) * se;
  s.biased = s.p_t < alpha;
  return s;
}

BiasStatistics summarize_sums(std::size_t n, double sum, double sumsq, std::size_t positives, std::size_t negatives,
                              double alpha, double sumsq_scale) {
  const double mean = n ? sum / static_cast<double>(n) : 0.0;
  // Σx² - Σx·mean cancels: samples that are all equal leave the rounding error of the sums,
  // and that "spread" gave a t of 1e16 where the samples form (summarize) says zero spread.
  // Each sum took up to n roundings, so each is off by at most n·u·(its scale), and
  // |Σx·mean| <= Σx² (Cauchy-Schwarz): a numerator within 4(n + 1)·eps·scale is that error.
  const double stddev = stddev_beyond_rounding(sumsq - sum * mean, n, std::max(sumsq, sumsq_scale));
  return summarize_moments(n, mean, stddev, positives, negatives, alpha);
}

BiasStatistics summarize(const std::vector<double>& errors, double alpha) {
  const std::size_t n = errors.size();
  if (n == 0) return summarize_moments(0, 0.0, 0.0, 0, 0, alpha);
  // Equal samples have a mean of that value and no spread; sum / n can miss the value by an
  // ulp, and the "spread" that leaves would give a t of 1e16.
  if (std::all_of(errors.begin(), errors.end(), [&](double e) { return e == errors.front(); })) {
    const double e = errors.front();
    return summarize_moments(n, e, 0.0, e > 0 ? n : 0, e < 0 ? n : 0, alpha);
  }
  // Two-pass mean and variance: accurate, and independent of summation-order quirks.
  double sum = 0.0;
  for (double e : errors) sum += e;
  const double mean = sum / static_cast<double>(n);
  double ss = 0.0;
  std::size_t positives = 0, negatives = 0;
  for (double e : errors) {
    ss += (e - mean) * (e - mean);
    if (e > 0)
      ++positives;
    else if (e < 0)
      ++negatives;
  }
  // A spread within the rounding of the samples themselves is none, as summarize_sums rules:
  // samples that agree to their last ulps (near-copies of one trace, a bit of k flipped) gave
  // a t of 1e15 where the sums' form of the same data says zero spread.
  double sumsq = 0.0;
  for (double e : errors) sumsq += e * e;
  const double stddev = stddev_beyond_rounding(ss, n, sumsq);
  return summarize_moments(n, mean, stddev, positives, negatives, alpha);
}

// ---- aggregators -----------------------------------------------------------------------
double ulp_at(const Format& f, double x) {
  const double ax = std::fabs(x);
  int e = f.emin();
  if (ax > 0 && std::isfinite(ax)) e = std::max(std::ilogb(ax), f.emin());
  return std::ldexp(1.0, e - f.man_bits);
}

RowSummary summarize_row(const RowTrace& trace) {
  RowSummary s;
  s.batch = trace.batch;
  s.head = trace.head;
  s.row = trace.row;
  s.tiles = static_cast<int>(trace.tiles.size());
  if (!trace.tiles.empty()) {
    s.final_max = trace.tiles.back().running_max;
    s.final_sum = trace.tiles.back().running_sum;
  }
  for (const TileRecord& t : trace.tiles) {
    s.p_equal_one += t.p_equal_one;
    s.repeated_max += t.repeated_max;
    s.significand_overflows += t.significand_overflows;
    s.ties += t.ties;
    s.rounded_up += t.rounded_up;
    s.rounded_down += t.rounded_down;
    s.pv_signed_error += t.pv_signed_error;
  }
  for (const RoundingEvent& ev : trace.o_cast) {
    s.o_cast_up += ev.direction == RoundDirection::up ? 1 : 0;
    s.o_cast_down += ev.direction == RoundDirection::down ? 1 : 0;
    s.o_cast_ties += ev.tie ? 1 : 0;
    if (std::isfinite(ev.error_ulps)) s.o_cast_error_ulps += ev.error_ulps;
  }
  s.delta_error_from_o = trace.delta_error_from_o;
  s.delta_error_from_reduction = trace.delta_error_from_reduction;
  return s;
}

ErrorHistogram::ErrorHistogram(double width, double half_range) : bin_width(width), range(half_range) {
  if (!(width > 0) || !(half_range > 0) || !std::isfinite(half_range / width) || half_range / width > 1e7) {
    throw std::invalid_argument("ErrorHistogram: bin width and range must be positive (at most 2e7 bins)");
  }
  counts.assign(static_cast<std::size_t>(std::ceil(2.0 * half_range / width)), 0);
}

void ErrorHistogram::add(double ulps) {
  ++total;
  if (!std::isfinite(ulps)) {
    ++not_finite;
    return;
  }
  sum += ulps;
  if (ulps < -range) {
    ++below;
    return;
  }
  const double index = std::floor((ulps + range) / bin_width);
  if (index >= static_cast<double>(counts.size())) {
    ++above;
    return;
  }
  ++counts[static_cast<std::size_t>(index)];
}

void ErrorHistogram::merge(const ErrorHistogram& other) {
  if (other.bin_width != bin_width || other.range != range || other.counts.size() != counts.size()) {
    throw std::invalid_argument("ErrorHistogram::merge: different binning");
  }
  for (std::size_t i = 0; i < counts.size(); ++i) counts[i] += other.counts[i];
  below += other.below;
  above += other.above;
  not_finite += other.not_finite;
  total += other.total;
  sum += other.sum;
}

double ErrorHistogram::mean() const {
  const std::uint64_t finite = total - not_finite;
  return finite == 0 ? 0.0 : sum / static_cast<double>(finite);
}

namespace {
void add_tensor(ErrorHistogram& h, const Tensor4& run, const Tensor4& reference, const Format& f) {
  if (run.data.size() != reference.data.size()) throw std::invalid_argument("add_stage_errors: shapes differ");
  for (std::size_t i = 0; i < run.data.size(); ++i) {
    const double x = run.data[i], ref = reference.data[i];
    if (x == ref) {  // also +inf == +inf (LSE of an empty row)
      h.add(0.0);
      continue;
    }
    h.add((x - ref) / ulp_at(f, ref));
  }
}
}  // namespace

void add_stage_errors(StageHistograms& h, const AttentionOutputs& run, const AttentionOutputs& reference,
                      const Format& output_format) {
  add_tensor(h.o, run.o, reference.o, output_format);
  add_tensor(h.lse, run.lse, reference.lse, formats::fp32);
  if (run.delta && reference.delta) add_tensor(h.delta, *run.delta, *reference.delta, formats::fp32);
  if (run.dq && reference.dq) add_tensor(h.dq, *run.dq, *reference.dq, output_format);
  if (run.dk && reference.dk) add_tensor(h.dk, *run.dk, *reference.dk, output_format);
  if (run.dv && reference.dv) add_tensor(h.dv, *run.dv, *reference.dv, output_format);
}

std::string p_value_text(double p) {
  if (p == 0.0) return "<1e-300";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", p);
  return buf;
}

}  // namespace fb::attn
