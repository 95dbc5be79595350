// studies/noncentral_t.cpp: the two-sided t test's power as one integral (contract: the header).
//
// With S = sqrt(V / df) and u = log S, conditioning on S gives
//   power = integral over u of g(u) [Phi(delta - c e^u) + Phi(-delta - c e^u)],
//   g(u)  = sqrt(df / pi) exp(-stirling_remainder(df / 2) - (df / 2)(e^{2u} - 1 - 2u)),
// g being the density of log(chi_df / sqrt(df)) written so that no term grows with df (the
// textbook form subtracts lgamma(df / 2) ~ 10^6 from terms of that size and keeps ~1e-10).
// Each term g(u) Phi(+-delta - c e^u) is log-concave in u (log g is concave; log Phi is concave
// and nondecreasing, of an argument concave in u), so it has one peak and tails that fall at
// least exponentially: the window where a term is within e^-50 of its peak holds all but
// ~1e-21 of it. Adaptive Gauss-Kronrod (G7-K15) over the union of the two windows, split at
// the peaks and around the step of Phi(delta - c e^u) at u = log(delta / c) (width ~1/delta
// in u: very sharp where df is small and alpha tiny, e.g. delta ~ c ~ 1e11 at df 1).
#include "studies/noncentral_t.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <stdexcept>
#include <vector>

#include "studies/statistics.hpp"

namespace fb::attn {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kLogSqrt2Pi = 0.918938533204672741780329736406;
constexpr double kSqrtHalf = 0.707106781186547524400844362105;
// Below this the normal CDF goes through its asymptotic series (erfc nears underflow).
constexpr double kNormalTailSwitch = -30.0;
// How far below its peak (in log) a term's window reaches: e^-50 ~ 2e-22.
constexpr double kWindowDrop = 50.0;
constexpr double kRelativeTolerance = 1e-12;  // on |K15 - G7|, itself far above K15's error
constexpr std::size_t kMaxPanels = 4000;

// e^x - 1 - x, without expm1(x) - x's cancellation near 0.
double exp_minus_one_minus_x(double x) {
  if (std::fabs(x) > 0.5) return std::expm1(x) - x;
  double term = 0.5 * x * x, sum = term;
  for (int k = 3; k < 40 && std::fabs(term) > 1e-17 * std::fabs(sum); ++k) {
    term *= x / k;
    sum += term;
  }
  return sum;
}

// lgamma(a) - [(a - 1/2) log a - a + log sqrt(2 pi)], ~1/(12 a): small for every a, unlike
// the terms it is the difference of.
double stirling_remainder(double a) {
  if (a < 15.0) return std::lgamma(a) - ((a - 0.5) * std::log(a) - a + kLogSqrt2Pi);
  const double r = 1.0 / a, r2 = r * r;  // the next term, 691/(360360 a^11), is < 3e-16 here
  return r * (1.0 / 12 - r2 * (1.0 / 360 - r2 * (1.0 / 1260 - r2 * (1.0 / 1680 - r2 / 1188))));
}

// t * Mills ratio (1 - Phi(t)) / phi(t) for t >= 30: its asymptotic series, the terms
// left off below 1e-16 there.
double mills_series(double t) {
  const double r = 1.0 / (t * t);
  return 1 - r * (1 - 3 * r * (1 - 5 * r * (1 - 7 * r * (1 - 9 * r * (1 - 11 * r * (1 - 13 * r))))));
}

double log_normal_cdf(double x) {
  if (x >= 0) return std::log1p(-0.5 * std::erfc(x * kSqrtHalf));
  if (x > kNormalTailSwitch) return std::log(0.5 * std::erfc(-x * kSqrtHalf));
  if (x == -kInf) return -kInf;
  const double t = -x;
  return -0.5 * t * t - std::log(t) - kLogSqrt2Pi + std::log(mills_series(t));
}

// phi(x) / Phi(x): the slope of log Phi.
double normal_pdf_over_cdf(double x) {
  if (x > kNormalTailSwitch) return std::exp(-0.5 * x * x - kLogSqrt2Pi) / (0.5 * std::erfc(-x * kSqrtHalf));
  if (x == -kInf) return kInf;
  return -x / mills_series(-x);
}

class PowerIntegrand {
 public:
  PowerIntegrand(double delta, int df, double t_crit)
      : delta_(delta),
        df_(df),
        c_(t_crit),
        log_front_(0.5 * std::log(df_ / std::numbers::pi) - stirling_remainder(0.5 * df_)) {}

  double log_chi(double u) const { return log_front_ - 0.5 * df_ * exp_minus_one_minus_x(2 * u); }
  // log of one term, g(u) Phi(shift - c e^u), and its slope in u (decreasing: log-concave).
  double log_term(double u, double shift) const { return log_chi(u) + log_normal_cdf(shift - c_ * std::exp(u)); }
  double slope(double u, double shift) const {
    const double ce = c_ * std::exp(u);
    return -df_ * std::expm1(2 * u) - (ce == 0 ? 0.0 : ce * normal_pdf_over_cdf(shift - ce));
  }
  double operator()(double u) const {
    const double ce = c_ * std::exp(u);
    const double log_g = log_chi(u);
    return term(log_g, delta_ - ce) + term(log_g, -delta_ - ce);
  }
  double delta() const { return delta_; }
  double t_crit() const { return c_; }

 private:
  static double term(double log_g, double x) {
    if (x > kNormalTailSwitch) {
      const double phi_cdf = x >= 0 ? 1 - 0.5 * std::erfc(x * kSqrtHalf) : 0.5 * std::erfc(-x * kSqrtHalf);
      return std::exp(log_g) * phi_cdf;
    }
    return std::exp(log_g + log_normal_cdf(x));
  }
  double delta_, df_, c_, log_front_;
};

// The u where log_term(., shift) peaks: its slope is -c phi/Phi(shift - c) <= 0 at u = 0 and
// tends to df > 0 as u -> -inf; bisection on the slope's sign.
double peak_of(const PowerIntegrand& f, double shift) {
  double hi = 0.0, step = 1e-3;
  double lo = -step;
  while (!(f.slope(lo, shift) > 0) && step < 1e6) {
    hi = lo;
    step *= 2;
    lo = -step;
  }
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (mid <= lo || mid >= hi) break;
    (f.slope(mid, shift) > 0 ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

// The first u on `direction`'s side of the peak where the term has fallen kWindowDrop below
// its peak value (approximately, erring outwards).
double window_end(const PowerIntegrand& f, double shift, double peak, double threshold, double direction) {
  double step = 1e-13 * std::max(1.0, std::fabs(peak));
  double inside = peak, outside = peak + direction * step;
  while (f.log_term(outside, shift) > threshold && std::isfinite(outside)) {
    inside = outside;
    step *= 2;
    outside = peak + direction * step;
  }
  for (int i = 0; i < 60 && std::fabs(outside - inside) > 1e-3 * std::fabs(outside - peak); ++i) {
    const double mid = 0.5 * (inside + outside);
    (f.log_term(mid, shift) > threshold ? inside : outside) = mid;
  }
  return outside;
}

struct Panel {
  double a, b, integral, error;
};

Panel gauss_kronrod_15(const PowerIntegrand& f, double a, double b) {
  static constexpr double kronrod_nodes[8] = {0.991455371120812639206854697526329, 0.949107912342758524526189684047851,
                                              0.864864423359769072789712788640926, 0.741531185599394439863864773280788,
                                              0.586087235467691130294144845693013, 0.405845151377397166906606412076961,
                                              0.207784955007898467600689403773245, 0.0};
  static constexpr double kronrod_weights[8] = {
      0.022935322010529224963732008058970, 0.063092092629978553290700663189204, 0.104790010322250183839876322541518,
      0.140653259715525918745189590510238, 0.169004726639267902826583426598550, 0.190350578064785409913256402421014,
      0.204432940075298892414161999234649, 0.209482141084727828012999174891714};
  // Gauss weights of the odd Kronrod nodes 1, 3, 5 and the centre.
  static constexpr double gauss_weights[4] = {0.129484966168869693270611432679082, 0.279705391489276667901467771423780,
                                              0.381830050505118944950369775488975, 0.417959183673469387755102040816327};
  const double centre = 0.5 * (a + b), half = 0.5 * (b - a);
  const double f_centre = f(centre);
  double kronrod = kronrod_weights[7] * f_centre, gauss = gauss_weights[3] * f_centre;
  for (int i = 0; i < 7; ++i) {
    const double pair = f(centre - half * kronrod_nodes[i]) + f(centre + half * kronrod_nodes[i]);
    kronrod += kronrod_weights[i] * pair;
    if (i % 2 == 1) gauss += gauss_weights[i / 2] * pair;
  }
  return {a, b, kronrod * half, std::fabs(kronrod - gauss) * half};
}

double integrate(const PowerIntegrand& f, const std::vector<double>& breakpoints) {
  std::vector<Panel> panels;
  for (std::size_t i = 0; i + 1 < breakpoints.size(); ++i) {
    panels.push_back(gauss_kronrod_15(f, breakpoints[i], breakpoints[i + 1]));
  }
  const auto by_error = [](const Panel& x, const Panel& y) { return x.error < y.error; };
  std::make_heap(panels.begin(), panels.end(), by_error);
  while (panels.size() < kMaxPanels) {
    double total = 0.0, error = 0.0;
    for (const Panel& p : panels) {
      total += p.integral;
      error += p.error;
    }
    if (error <= kRelativeTolerance * std::fabs(total)) break;
    std::pop_heap(panels.begin(), panels.end(), by_error);
    const Panel worst = panels.back();
    panels.pop_back();
    const double mid = 0.5 * (worst.a + worst.b);
    if (!(mid > worst.a && mid < worst.b)) break;  // cannot split further in double
    panels.push_back(gauss_kronrod_15(f, worst.a, mid));
    std::push_heap(panels.begin(), panels.end(), by_error);
    panels.push_back(gauss_kronrod_15(f, mid, worst.b));
    std::push_heap(panels.begin(), panels.end(), by_error);
  }
  double total = 0.0;
  for (const Panel& p : panels) total += p.integral;
  return total;
}

double power_given_crit(double delta, int df, double t_crit) {
  delta = std::fabs(delta);
  if (std::isinf(delta)) return 1.0;
  const PowerIntegrand f(delta, df, t_crit);
  std::vector<double> breakpoints;
  double low = kInf, high = -kInf;
  for (double shift : {delta, -delta}) {
    const double peak = peak_of(f, shift);
    const double threshold = f.log_term(peak, shift) - kWindowDrop;
    low = std::min(low, window_end(f, shift, peak, threshold, -1.0));
    high = std::max(high, window_end(f, shift, peak, threshold, +1.0));
    breakpoints.push_back(peak);
  }
  if (delta > 0) {
    // Phi(delta - c e^u) steps from 1 to 0 around u = log(delta / c), over ~1/delta in u.
    const double step_at = std::log(delta / t_crit), width = 1.0 / std::max(delta, 1.0);
    for (double k : {-16.0, -4.0, -1.0, 0.0, 1.0, 4.0, 16.0}) breakpoints.push_back(step_at + k * width);
  }
  std::erase_if(breakpoints, [&](double u) { return !(u > low && u < high); });
  breakpoints.push_back(low);
  breakpoints.push_back(high);
  std::sort(breakpoints.begin(), breakpoints.end());
  breakpoints.erase(std::unique(breakpoints.begin(), breakpoints.end()), breakpoints.end());
  return std::clamp(integrate(f, breakpoints), 0.0, 1.0);
}

void check_df_alpha(int df, double alpha) {
  if (df < 1) throw std::invalid_argument("noncentral t: df must be at least 1");
  if (!(alpha > 0 && alpha < 1)) throw std::invalid_argument("noncentral t: alpha must lie in (0, 1)");
}

// Brent's root finder (Brent 1973, "zeroin") on [a, b] where f(a) < 0 < f(b).
template <class F>
double brent_root(F f, double a, double b, double fa, double fb) {
  double c = a, fc = fa, d = b - a, e = d;
  for (int iteration = 0; iteration < 200; ++iteration) {
    if ((fb > 0) == (fc > 0)) {
      c = a;
      fc = fa;
      d = e = b - a;
    }
    if (std::fabs(fc) < std::fabs(fb)) {
      a = b;
      b = c;
      c = a;
      fa = fb;
      fb = fc;
      fc = fa;
    }
    const double tolerance = 1e-14 * std::fabs(b) + 1e-300;
    const double half_gap = 0.5 * (c - b);
    if (std::fabs(half_gap) <= tolerance || fb == 0) return b;
    if (std::fabs(e) >= tolerance && std::fabs(fa) > std::fabs(fb)) {
      const double s = fb / fa;
      double p, q;
      if (a == c) {
        p = 2 * half_gap * s;
        q = 1 - s;
      } else {
        const double qa = fa / fc, r = fb / fc;
        p = s * (2 * half_gap * qa * (qa - r) - (b - a) * (r - 1));
        q = (qa - 1) * (r - 1) * (s - 1);
      }
      if (p > 0)
        q = -q;
      else
        p = -p;
      if (2 * p < std::min(3 * half_gap * q - std::fabs(tolerance * q), std::fabs(e * q))) {
        e = d;
        d = p / q;
      } else {
        d = e = half_gap;
      }
    } else {
      d = e = half_gap;
    }
    a = b;
    fa = fb;
    b += std::fabs(d) > tolerance ? d : std::copysign(tolerance, half_gap);
    fb = f(b);
  }
  return b;
}

}  // namespace

double power_two_sided_t(double effect_in_se, int df, double alpha) {
  check_df_alpha(df, alpha);
  if (std::isnan(effect_in_se)) throw std::invalid_argument("power_two_sided_t: effect is NaN");
  return power_given_crit(effect_in_se, df, student_t_upper_quantile(alpha / 2, df));
}

double min_detectable_effect_in_se(int df, double alpha, double power) {
  check_df_alpha(df, alpha);
  if (!(power > alpha && power < 1)) {
    throw std::invalid_argument("min_detectable_effect_in_se: power must lie in (alpha, 1)");
  }
  const double t_crit = student_t_upper_quantile(alpha / 2, df);
  const auto shortfall = [&](double delta) { return power_given_crit(delta, df, t_crit) - power; };
  // At delta = 0 the power is alpha by definition; widen upwards until the power is reached.
  double low = 0.0, f_low = alpha - power;
  double high = t_crit + 2.0, f_high = shortfall(high);
  while (f_high < 0 && std::isfinite(high)) {
    low = high;
    f_low = f_high;
    high *= 2;
    f_high = shortfall(high);
  }
  return brent_root(shortfall, low, high, f_low, f_high);
}

}  // namespace fb::attn
