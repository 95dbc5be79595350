// attention/exact_rounding.cpp: see the contract in exact_rounding.hpp.
#include "attention/exact_rounding.hpp"

#include <gmp.h>
#include <mpfr.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>

#include "emu/ops.hpp"

namespace fb::attn {
namespace {

// exact_attention's error bound (mean_error_bound) assumes x87's 64-bit significand or wider.
static_assert(std::numeric_limits<long double>::digits >= 64, "exact_attention's error bound needs 64-bit long double");
constexpr long double kLongDoubleUlp = 0x1p-64L;  // x87's unit roundoff

// One MPFR variable, freed on scope exit. Only per-variable precision is set; MPFR's
// global defaults and exponent range are left alone.
struct Mp {
  mpfr_t v;
  explicit Mp(mpfr_prec_t precision) { mpfr_init2(v, precision); }
  ~Mp() { mpfr_clear(v); }
  Mp(Mp&& other) noexcept {
    mpfr_init2(v, mpfr_get_prec(other.v));
    mpfr_swap(v, other.v);
  }
  Mp(const Mp&) = delete;
  Mp& operator=(const Mp&) = delete;
  Mp& operator=(Mp&&) = delete;
};

constexpr mpfr_prec_t kFirstBits = 128, kSecondBits = 512;
constexpr mpfr_prec_t kLastBits = mpfr_prec_t{1} << 16;

// x as round_pack takes it: 64 leading bits and a sticky bit. Rounding this is rounding x,
// for every format and mode here (their boundaries lie on multiples of x's 64th bit).
RoundPackInput from_mpfr(const mpfr_t x) {
  RoundPackInput in;
  in.negative = mpfr_signbit(x) != 0;
  if (mpfr_zero_p(x)) return in;
  mpz_t z;
  mpz_init(z);
  long exponent = mpfr_get_z_2exp(z, x);
  mpz_abs(z, z);
  const std::size_t bits = mpz_sizeinbase(z, 2);
  if (bits > 64) {
    const std::size_t shift = bits - 64;
    in.sticky = mpz_scan1(z, 0) < shift;
    mpz_tdiv_q_2exp(z, z, shift);
    exponent += static_cast<long>(shift);
  }
  in.significand = mpz_get_ui(z);
  mpz_clear(z);
  // Far outside every format's range either way; keeps the int conversion defined.
  in.exponent = static_cast<int>(std::clamp<long>(exponent, INT_MIN / 4, INT_MAX / 4));
  return in;
}

// ---- exact arithmetic: each result's precision grown to hold it exactly -------------------
// x = m * 2^low_bit(x) with m an odd integer (x nonzero).
long low_bit(const mpfr_t x) { return static_cast<long>(mpfr_get_exp(x)) - static_cast<long>(mpfr_min_prec(x)); }

// out = a + b, exactly (out is neither a nor b).
void set_exact_sum(Mp& out, const mpfr_t a, const mpfr_t b) {
  if (mpfr_zero_p(a) || mpfr_zero_p(b)) {
    const mpfr_srcptr x = mpfr_zero_p(a) ? b : a;
    mpfr_set_prec(out.v, mpfr_zero_p(x) ? MPFR_PREC_MIN : std::max<mpfr_prec_t>(mpfr_min_prec(x), MPFR_PREC_MIN));
    mpfr_set(out.v, x, MPFR_RNDN);
    return;
  }
  const long high = std::max<long>(mpfr_get_exp(a), mpfr_get_exp(b)) + 1;
  const long low = std::min(low_bit(a), low_bit(b));
  mpfr_set_prec(out.v, std::max<mpfr_prec_t>(high - low, MPFR_PREC_MIN));
  mpfr_add(out.v, a, b, MPFR_RNDN);  // exact: the precision spans both operands' bits and a carry
}
void add_exact(Mp& acc, const mpfr_t term) {
  Mp sum(MPFR_PREC_MIN);
  set_exact_sum(sum, acc.v, term);
  mpfr_swap(acc.v, sum.v);
}
void set_exact_difference(Mp& out, const mpfr_t a, const mpfr_t b) {
  Mp negated(mpfr_get_prec(b));
  mpfr_neg(negated.v, b, MPFR_RNDN);
  set_exact_sum(out, a, negated.v);
}
// sum_c a_c * b_c, exactly: in a precision spanning every product's bits (each a product of
// two doubles, 106 bits) and the carries of up to 2^63 terms.
Mp exact_dot(const double* a, const double* b, int n) {
  int highest = INT_MIN, lowest = INT_MAX;
  for (int c = 0; c < n; ++c)
    if (a[c] != 0.0 && b[c] != 0.0) {
      const int e = std::ilogb(a[c]) + std::ilogb(b[c]);
      highest = std::max(highest, e);
      lowest = std::min(lowest, e);
    }
  Mp sum(highest < lowest ? MPFR_PREC_MIN : static_cast<mpfr_prec_t>(highest - lowest) + 2 * 53 + 2 + 64);
  mpfr_set_zero(sum.v, 1);
  Mp product(2 * 53);
  for (int c = 0; c < n; ++c) {
    if (a[c] == 0.0 || b[c] == 0.0) continue;
    const bool floats =
        static_cast<double>(static_cast<float>(a[c])) == a[c] && static_cast<double>(static_cast<float>(b[c])) == b[c];
    if (floats) {  // the product of two floats is an exact double
      mpfr_add_d(sum.v, sum.v, a[c] * b[c], MPFR_RNDN);
    } else {
      mpfr_set_d(product.v, a[c], MPFR_RNDN);
      mpfr_mul_d(product.v, product.v, b[c], MPFR_RNDN);
      mpfr_add(sum.v, sum.v, product.v, MPFR_RNDN);
    }
  }
  return sum;
}

// The values x_j of a weighted mean, one per visible key: doubles (a column of V, exact as
// they are), or exact MPFR values with long-double approximations (dO . V_j).
class KeyValues {
 public:
  explicit KeyValues(std::vector<double> doubles) : doubles_(std::move(doubles)) {}
  KeyValues(std::vector<Mp> exact, std::vector<long double> approx, long double approx_relative_error)
      : exact_(std::move(exact)), approx_(std::move(approx)), approx_relative_error_(approx_relative_error) {}

  // out = w * x_j, rounded in direction rnd.
  void multiply(mpfr_t out, const mpfr_t w, int j, mpfr_rnd_t rnd) const {
    const auto at = static_cast<std::size_t>(j);
    if (exact_.empty())
      mpfr_mul_d(out, w, doubles_[at], rnd);
    else
      mpfr_mul(out, w, exact_[at].v, rnd);
  }
  int sign(int j) const {
    const auto at = static_cast<std::size_t>(j);
    return exact_.empty() ? (doubles_[at] > 0) - (doubles_[at] < 0) : mpfr_sgn(exact_[at].v);
  }
  // acc += x_j, exactly.
  void add_to(Mp& acc, int j) const {
    const auto at = static_cast<std::size_t>(j);
    if (!exact_.empty()) return add_exact(acc, exact_[at].v);
    Mp x(53);
    mpfr_set_d(x.v, doubles_[at], MPFR_RNDN);
    add_exact(acc, x.v);
  }
  long double approx(int j) const {
    const auto at = static_cast<std::size_t>(j);
    return exact_.empty() ? static_cast<long double>(doubles_[at]) : approx_[at];
  }
  long double approx_relative_error() const { return approx_relative_error_; }  // |approx - x| / |x|

 private:
  std::vector<double> doubles_;
  std::vector<Mp> exact_;
  std::vector<long double> approx_;
  long double approx_relative_error_ = 0.0L;
};

// The softmax scale, enclosed at p bits: a given softmax_scale (a double) exactly, else
// 1/sqrt(d), as exact_attention takes the default.
void enclose_scale(const AttentionInputs& in, mpfr_prec_t p, mpfr_t lo, mpfr_t hi) {
  if (in.softmax_scale > 0) {
    mpfr_set_d(lo, in.softmax_scale, MPFR_RNDN);
    mpfr_set_d(hi, in.softmax_scale, MPFR_RNDN);
    return;
  }
  const auto d = static_cast<unsigned long>(in.q.cols);
  Mp root(p);
  mpfr_sqrt_ui(root.v, d, MPFR_RNDU);
  mpfr_ui_div(lo, 1, root.v, MPFR_RNDD);
  mpfr_sqrt_ui(root.v, d, MPFR_RNDD);
  mpfr_ui_div(hi, 1, root.v, MPFR_RNDU);
}

// Whether scale * x == y, exactly.
bool scale_times_is(const AttentionInputs& in, const mpfr_t x, const mpfr_t y) {
  if (in.softmax_scale > 0) {  // scale * x, exactly
    Mp product(mpfr_get_prec(x) + 53);
    mpfr_mul_d(product.v, x, in.softmax_scale, MPFR_RNDN);
    return mpfr_equal_p(product.v, y) != 0;
  }
  // x / sqrt(d): rational only when d is a square (or x is 0).
  const int d = in.q.cols;
  const auto root = static_cast<long>(std::llround(std::sqrt(static_cast<double>(d))));
  if (root * root == d) {
    Mp scaled(mpfr_get_prec(y) + 64);
    mpfr_mul_si(scaled.v, y, root, MPFR_RNDN);
    return mpfr_equal_p(scaled.v, x) != 0;
  }
  return mpfr_zero_p(x) && mpfr_zero_p(y);
}

// ---- one row's scores ----------------------------------------------------------------
// The visible keys of one row, with exact scores where exactness matters. Keys within 50 of
// the max score (the head) get exact score gaps and MPFR weights; the others (the tail)
// long-double weights with a rigorous relative bound. Caches; one thread.
class RowScores {
 public:
  RowScores(const AttentionInputs& in, int b, int h, int r, int nk);

  // An enclosure [lo, hi] of sum_j e^(s_j) x_j / sum_j e^(s_j), at p bits.
  void enclose_mean(const KeyValues& x, mpfr_prec_t p, mpfr_t lo, mpfr_t hi);
  // An enclosure [lo, hi] of log sum_j e^(s_j), at p bits.
  void enclose_lse(mpfr_prec_t p, mpfr_t lo, mpfr_t hi);
  // The sign of sum_j e^(s_j) (x_j - beta), exactly (0: the mean is beta).
  int compare_mean(const KeyValues& x, const mpfr_t beta);
  // The sign of sum_j e^(s_j) - e^beta, exactly (0: the LSE is beta).
  int compare_lse(const mpfr_t beta);

  const double* key(int j) const { return in_.k.row(b_, hk_, j); }
  const double* value(int j) const { return in_.v.row(b_, hk_, j); }
  const Mp& dot(int j);                     // q . k_j, exactly
  int top_key() const { return top_key_; }  // a key of the row's max score

 private:
  struct Weights {  // the head's weights e^(s_j - s_top) and the whole denominator, at p bits
    std::vector<Mp> lo, hi;
    Mp den_lo, den_hi;
    explicit Weights(mpfr_prec_t p) : den_lo(p), den_hi(p) {}
  };
  struct Group {  // the keys of one exact score, highest score first
    int first_key;
    std::vector<int> keys;
  };
  // coefficient * e^(exponent) in a sum whose sign is wanted: exponent scale * (dot - top),
  // or beta - scale * top for the LSE's e^beta term.
  struct Term {
    Mp coefficient;
    int key = -1;  // a key of the term's group; -1: the e^beta term
  };

  const Weights& weights(mpfr_prec_t p);
  void scale_interval(mpfr_prec_t p, mpfr_t lo, mpfr_t hi) const;
  void score_interval(int key, mpfr_prec_t p, mpfr_t lo, mpfr_t hi) const;  // scale * dot(key), enclosed
  const std::vector<Group>& groups();
  bool score_equals(const Mp& dot, const mpfr_t beta) const;
  int sign_of_sum(std::vector<Term>& terms, const mpfr_t beta);

  const AttentionInputs& in_;
  int b_, hk_, nk_, d_;
  const double* q_;
  std::vector<std::optional<Mp>> dots_;  // exact q . k_j, computed when first needed
  std::vector<int> head_;
  std::vector<Mp> head_gaps_;  // exact dot_j - top dot of the head's keys
  int top_key_ = 0;
  std::vector<long double> tail_w_;  // e^(s_j - s_top) of tail keys (0 in the head)
  std::vector<bool> underflowed_;    // tail keys below e^-11000, taken as weights in [0, 2^-15800]
  long double sum_eps_ = 0.0L, underflow_w_ = 0.0L;
  std::map<mpfr_prec_t, Weights> weights_;
  std::vector<Group> groups_;
  bool grouped_ = false;
};

RowScores::RowScores(const AttentionInputs& in, int b, int h, int r, int nk)
    : in_(in),
      b_(b),
      hk_(h / (in.k.heads > 0 ? in.q.heads / in.k.heads : 1)),
      nk_(nk),
      d_(in.q.cols),
      q_(in.q.row(b, h, r)) {
  dots_.resize(static_cast<std::size_t>(nk));
  tail_w_.assign(static_cast<std::size_t>(nk), 0.0L);
  underflowed_.assign(static_cast<std::size_t>(nk), false);
  // Scores first in long double with an error bound (products of doubles holding floats are
  // exact; the sum errs by at most (d + 2) ulps of the magnitude).
  const long double scale_ld = in.softmax_scale > 0 ? static_cast<long double>(in.softmax_scale)
                                                    : 1.0L / std::sqrt(static_cast<long double>(d_));
  std::vector<long double> dot_ld(static_cast<std::size_t>(nk)), dot_err(static_cast<std::size_t>(nk));
  int top_ld = 0;
  for (int j = 0; j < nk; ++j) {
    const double* k = key(j);
    long double sum = 0.0L, magnitude = 0.0L;
    for (int c = 0; c < d_; ++c) {
      const long double product = static_cast<long double>(q_[c]) * k[c];
      sum += product;
      magnitude += std::fabs(product);
    }
    const auto at = static_cast<std::size_t>(j);
    dot_ld[at] = sum;
    dot_err[at] = static_cast<long double>(d_ + 2) * 2 * kLongDoubleUlp * magnitude;
    if (sum > dot_ld[static_cast<std::size_t>(top_ld)]) top_ld = j;
  }
  // The head: keys within 50 of the max, and any whose long-double score is too loose for
  // the tail's linear bound. The max key is in it, so the head's exact max is the row's.
  std::vector<bool> in_head(static_cast<std::size_t>(nk), false);
  const long double top_err = dot_err[static_cast<std::size_t>(top_ld)];
  for (int j = 0; j < nk; ++j) {
    const auto at = static_cast<std::size_t>(j);
    const bool near = scale_ld * (dot_ld[at] - dot_ld[static_cast<std::size_t>(top_ld)]) >= -50.0L;
    const bool loose = scale_ld * (dot_err[at] + top_err) > 0x1p-30L;
    if (near || loose) {
      in_head[at] = true;
      head_.push_back(j);
    }
  }
  top_key_ = head_.front();
  for (const int j : head_)
    if (mpfr_cmp(dot(j).v, dot(top_key_).v) > 0) top_key_ = j;
  head_gaps_.reserve(head_.size());
  for (const int j : head_) {
    head_gaps_.emplace_back(MPFR_PREC_MIN);
    set_exact_difference(head_gaps_.back(), dot(j).v, dot(top_key_).v);
  }
  // The tail's weights in long double, each with a relative error bound: the scores' bounds
  // (x's absolute error is w's relative error, linear below 2^-30), the top's conversion,
  // scale, the subtraction and expl's 2 ulps; below e^-11000 a weight is [0, 2^-15800].
  long double tail_eps = 0.0L;
  bool any_underflow = false;
  const long double top_exact = mpfr_get_ld(dot(top_key_).v, MPFR_RNDN);
  const long double top_conversion = std::fabs(top_exact) * kLongDoubleUlp;
  for (int j = 0; j < nk; ++j) {
    const auto at = static_cast<std::size_t>(j);
    if (in_head[at]) continue;
    const long double x = scale_ld * (dot_ld[at] - top_exact);
    if (x < -11000.0L) {
      underflowed_[at] = any_underflow = true;
      continue;
    }
    tail_w_[at] = std::exp(x);
    const long double x_err =
        scale_ld * (dot_err[at] + top_conversion) * (1.0L + 8 * kLongDoubleUlp) + std::fabs(x) * 4 * kLongDoubleUlp;
    tail_eps = std::max(tail_eps, x_err * 1.01L + 4 * kLongDoubleUlp);
  }
  sum_eps_ = (tail_eps + static_cast<long double>(nk + 2) * 2 * kLongDoubleUlp) * 1.01L;
  underflow_w_ = any_underflow ? 0x1p-15800L : 0.0L;
}

const Mp& RowScores::dot(int j) {
  auto& slot = dots_[static_cast<std::size_t>(j)];
  if (!slot) slot.emplace(exact_dot(q_, key(j), d_));
  return *slot;
}

void RowScores::scale_interval(mpfr_prec_t p, mpfr_t lo, mpfr_t hi) const { enclose_scale(in_, p, lo, hi); }

// scale * dot(key), enclosed (the key's dot already computed).
void RowScores::score_interval(int key, mpfr_prec_t p, mpfr_t lo, mpfr_t hi) const {
  Mp scale_lo(p), scale_hi(p);
  scale_interval(p, scale_lo.v, scale_hi.v);
  const mpfr_srcptr top = dots_[static_cast<std::size_t>(key)]->v;
  const bool nonnegative = mpfr_sgn(top) >= 0;
  mpfr_mul(lo, top, nonnegative ? scale_lo.v : scale_hi.v, MPFR_RNDD);
  mpfr_mul(hi, top, nonnegative ? scale_hi.v : scale_lo.v, MPFR_RNDU);
}

const RowScores::Weights& RowScores::weights(mpfr_prec_t p) {
  if (const auto it = weights_.find(p); it != weights_.end()) return it->second;
  Weights& w = weights_.try_emplace(p, p).first->second;
  Mp scale_lo(p), scale_hi(p), x(p), t(p);
  scale_interval(p, scale_lo.v, scale_hi.v);
  mpfr_set_zero(w.den_lo.v, 1);
  mpfr_set_zero(w.den_hi.v, 1);
  w.lo.reserve(head_.size());
  w.hi.reserve(head_.size());
  for (const Mp& gap : head_gaps_) {
    w.lo.emplace_back(p);
    w.hi.emplace_back(p);
    mpfr_mul(x.v, gap.v, scale_hi.v, MPFR_RNDD);  // gap <= 0: the larger scale gives the lower end
    mpfr_exp(w.lo.back().v, x.v, MPFR_RNDD);
    mpfr_mul(x.v, gap.v, scale_lo.v, MPFR_RNDU);
    mpfr_exp(w.hi.back().v, x.v, MPFR_RNDU);
    mpfr_add(w.den_lo.v, w.den_lo.v, w.lo.back().v, MPFR_RNDD);
    mpfr_add(w.den_hi.v, w.den_hi.v, w.hi.back().v, MPFR_RNDU);
  }
  long double tail_den = 0.0L;
  for (const long double tw : tail_w_) tail_den += tw;
  const long double err = sum_eps_ * tail_den + static_cast<long double>(nk_) * underflow_w_;
  mpfr_set_ld(t.v, std::max(0.0L, tail_den - err), MPFR_RNDD);
  mpfr_add(w.den_lo.v, w.den_lo.v, t.v, MPFR_RNDD);
  mpfr_set_ld(t.v, tail_den + err, MPFR_RNDU);
  mpfr_add(w.den_hi.v, w.den_hi.v, t.v, MPFR_RNDU);
  return w;
}

void RowScores::enclose_mean(const KeyValues& x, mpfr_prec_t p, mpfr_t lo, mpfr_t hi) {
  const Weights& w = weights(p);
  Mp num_lo(p), num_hi(p), t(p);
  mpfr_set_zero(num_lo.v, 1);
  mpfr_set_zero(num_hi.v, 1);
  for (std::size_t i = 0; i < head_.size(); ++i) {
    const bool nonnegative = x.sign(head_[i]) >= 0;
    x.multiply(t.v, nonnegative ? w.lo[i].v : w.hi[i].v, head_[i], MPFR_RNDD);
    mpfr_add(num_lo.v, num_lo.v, t.v, MPFR_RNDD);
    x.multiply(t.v, nonnegative ? w.hi[i].v : w.lo[i].v, head_[i], MPFR_RNDU);
    mpfr_add(num_hi.v, num_hi.v, t.v, MPFR_RNDU);
  }
  long double tail_num = 0.0L, tail_abs = 0.0L, underflowed_max = 0.0L;
  for (int j = 0; j < nk_; ++j) {
    const auto at = static_cast<std::size_t>(j);
    if (tail_w_[at] != 0.0L) {
      const long double term = tail_w_[at] * x.approx(j);
      tail_num += term;
      tail_abs += std::fabs(term);
    } else if (underflowed_[at]) {
      underflowed_max = std::max(underflowed_max, std::fabs(x.approx(j)));
    }
  }
  const long double rel = x.approx_relative_error();
  const long double err = (sum_eps_ + 2 * rel) * tail_abs +
                          static_cast<long double>(nk_) * underflow_w_ * underflowed_max * (1.0L + rel) * 1.01L;
  mpfr_set_ld(t.v, tail_num - err, MPFR_RNDD);
  mpfr_add(num_lo.v, num_lo.v, t.v, MPFR_RNDD);
  mpfr_set_ld(t.v, tail_num + err, MPFR_RNDU);
  mpfr_add(num_hi.v, num_hi.v, t.v, MPFR_RNDU);
  mpfr_div(lo, num_lo.v, mpfr_sgn(num_lo.v) >= 0 ? w.den_hi.v : w.den_lo.v, MPFR_RNDD);
  mpfr_div(hi, num_hi.v, mpfr_sgn(num_hi.v) >= 0 ? w.den_lo.v : w.den_hi.v, MPFR_RNDU);
}

void RowScores::enclose_lse(mpfr_prec_t p, mpfr_t lo, mpfr_t hi) {
  const Weights& w = weights(p);
  Mp top_lo(p), top_hi(p), t(p);
  score_interval(top_key_, p, top_lo.v, top_hi.v);
  mpfr_log(t.v, w.den_lo.v, MPFR_RNDD);
  mpfr_add(lo, top_lo.v, t.v, MPFR_RNDD);
  mpfr_log(t.v, w.den_hi.v, MPFR_RNDU);
  mpfr_add(hi, top_hi.v, t.v, MPFR_RNDU);
}

const std::vector<RowScores::Group>& RowScores::groups() {
  if (grouped_) return groups_;
  std::vector<int> order(static_cast<std::size_t>(nk_));
  for (int j = 0; j < nk_; ++j) order[static_cast<std::size_t>(j)] = j;
  for (const int j : order) dot(j);
  std::sort(order.begin(), order.end(), [&](int x, int y) { return mpfr_cmp(dot(x).v, dot(y).v) > 0; });
  for (const int j : order) {
    if (groups_.empty() || !mpfr_equal_p(dot(groups_.back().first_key).v, dot(j).v)) groups_.push_back({j, {}});
    groups_.back().keys.push_back(j);
  }
  grouped_ = true;
  return groups_;
}

bool RowScores::score_equals(const Mp& dot_value, const mpfr_t beta) const {
  return scale_times_is(in_, dot_value.v, beta);
}

// The sign of sum_t coefficient_t * e^(exponent_t - scale * top), the terms' exponents
// distinct algebraic numbers and their coefficients nonzero rationals, so the sum is not 0
// (Lindemann-Weierstrass); terms[0] is the group with the highest score.
int RowScores::sign_of_sum(std::vector<Term>& terms, const mpfr_t beta) {
  bool positive = false, negative = false;
  for (const Term& t : terms) (mpfr_sgn(t.coefficient.v) > 0 ? positive : negative) = true;
  if (!negative) return 1;  // every e^x > 0
  if (!positive) return -1;
  const Mp& top = dot(terms.front().key);
  std::vector<Mp> gaps;
  gaps.reserve(terms.size());
  for (const Term& t : terms) {
    gaps.emplace_back(MPFR_PREC_MIN);
    if (t.key >= 0) set_exact_difference(gaps.back(), dot(t.key).v, top.v);
  }
  for (mpfr_prec_t p = kFirstBits; p <= kLastBits; p *= 4) {
    Mp scale_lo(p), scale_hi(p), x_lo(p), x_hi(p), e_lo(p), e_hi(p), term(p), sum_lo(p), sum_hi(p);
    Mp top_lo(p), top_hi(p);
    scale_interval(p, scale_lo.v, scale_hi.v);
    score_interval(terms.front().key, p, top_lo.v, top_hi.v);
    mpfr_set_zero(sum_lo.v, 1);
    mpfr_set_zero(sum_hi.v, 1);
    for (std::size_t i = 0; i < terms.size(); ++i) {
      if (terms[i].key >= 0) {  // gap <= 0: the larger scale gives the lower end
        mpfr_mul(x_lo.v, gaps[i].v, scale_hi.v, MPFR_RNDD);
        mpfr_mul(x_hi.v, gaps[i].v, scale_lo.v, MPFR_RNDU);
      } else {
        mpfr_sub(x_lo.v, beta, top_hi.v, MPFR_RNDD);
        mpfr_sub(x_hi.v, beta, top_lo.v, MPFR_RNDU);
      }
      mpfr_exp(e_lo.v, x_lo.v, MPFR_RNDD);
      mpfr_exp(e_hi.v, x_hi.v, MPFR_RNDU);
      const mpfr_srcptr c = terms[i].coefficient.v;
      const bool c_positive = mpfr_sgn(c) > 0;
      mpfr_mul(term.v, c, c_positive ? e_lo.v : e_hi.v, MPFR_RNDD);
      mpfr_add(sum_lo.v, sum_lo.v, term.v, MPFR_RNDD);
      mpfr_mul(term.v, c, c_positive ? e_hi.v : e_lo.v, MPFR_RNDU);
      mpfr_add(sum_hi.v, sum_hi.v, term.v, MPFR_RNDU);
    }
    if (mpfr_sgn(sum_lo.v) > 0) return 1;
    if (mpfr_sgn(sum_hi.v) < 0) return -1;
  }
  throw std::runtime_error("correctly-rounded: a value is not separated from a rounding boundary at " +
                           std::to_string(kLastBits) + " bits");
}

int RowScores::compare_mean(const KeyValues& x, const mpfr_t beta) {
  // sum_g e^(a_g) C_g over the groups, C_g = sum_{j in g} x_j - |g| beta, exactly.
  std::vector<Term> terms;
  for (const Group& g : groups()) {
    Mp sum(MPFR_PREC_MIN), multiple(mpfr_get_prec(beta) + 64);
    mpfr_set_zero(sum.v, 1);
    for (const int j : g.keys) x.add_to(sum, j);
    mpfr_mul_si(multiple.v, beta, static_cast<long>(g.keys.size()), MPFR_RNDN);  // exact
    Term t{Mp(MPFR_PREC_MIN), g.first_key};
    set_exact_difference(t.coefficient, sum.v, multiple.v);
    if (!mpfr_zero_p(t.coefficient.v)) terms.push_back(std::move(t));
  }
  if (terms.empty()) return 0;  // the mean is beta, exactly
  return sign_of_sum(terms, beta);
}

int RowScores::compare_lse(const mpfr_t beta) {
  // sum_g |g| e^(a_g) - e^beta; e^beta merges with a group whose score is beta.
  std::vector<Term> terms;
  bool merged = false;
  for (const Group& g : groups()) {
    long count = static_cast<long>(g.keys.size());
    if (!merged && score_equals(dot(g.first_key), beta)) {
      merged = true;
      --count;
    }
    if (count == 0) continue;
    Term t{Mp(64), g.first_key};
    mpfr_set_si(t.coefficient.v, count, MPFR_RNDN);
    terms.push_back(std::move(t));
  }
  if (!merged) {
    Term t{Mp(64), -1};
    mpfr_set_si(t.coefficient.v, -1, MPFR_RNDN);
    terms.push_back(std::move(t));
  }
  if (terms.empty()) return 0;           // one key, and its score is beta
  if (terms.front().key < 0) return -1;  // only e^beta is left
  return sign_of_sum(terms, beta);
}

// ---- deciding one value ----------------------------------------------------------------
// A mode's rounding (result and flags) is constant on each open cell between consecutive
// points of the grid of ulp * 2^-grid_bits (ulp of the value's binade, with unbounded
// exponent for the tininess test): midpoints for the nearest modes, sr's draw resolution.
int grid_bits(const RoundingSpec& spec) {
  switch (spec.mode) {
    case RoundingMode::rne:
    case RoundingMode::rna:
      return 1;
    case RoundingMode::sr:
      return spec.sr_bits;
    default:
      return 0;
  }
}

using Enclose = std::function<void(mpfr_prec_t, mpfr_t, mpfr_t)>;
using Compare = std::function<int(const mpfr_t)>;

// n * 2^k, exactly.
Mp grid_point(const mpz_t n, long k) {
  Mp x(std::max<mpfr_prec_t>(static_cast<mpfr_prec_t>(mpz_sizeinbase(n, 2)) + 1, MPFR_PREC_MIN));
  mpfr_set_z_2exp(x.v, n, k, MPFR_RNDN);
  return x;
}

// The value's cell of the boundary grid inside [lo, hi], found by bisection with exact
// comparisons; a value rounding as the exact one does (see the header).
RoundPackInput locate(const Format& f, const RoundingSpec& spec, const mpfr_t lo, const mpfr_t hi,
                      const Compare& compare) {
  long e = LONG_MIN / 4;  // the smallest binade in [lo, hi]: unbounded below when 0 is inside
  if (mpfr_sgn(lo) * mpfr_sgn(hi) > 0) e = static_cast<long>(mpfr_get_exp(mpfr_cmpabs(lo, hi) <= 0 ? lo : hi)) - 1;
  const long k = std::max<long>(e, f.emin() - 1) - f.man_bits - grid_bits(spec);
  mpz_t a, z, mid;
  mpz_inits(a, z, mid, nullptr);
  {
    Mp scaled(std::max(mpfr_get_prec(lo), mpfr_get_prec(hi)));
    mpfr_mul_2si(scaled.v, lo, -k, MPFR_RNDN);  // exact
    mpfr_get_z(a, scaled.v, MPFR_RNDD);
    mpfr_mul_2si(scaled.v, hi, -k, MPFR_RNDN);
    mpfr_get_z(z, scaled.v, MPFR_RNDD);
    mpz_add_ui(z, z, 1);
  }
  // Invariant: value >= a * 2^k (a * 2^k <= lo), value < z * 2^k (z * 2^k > hi).
  int at_a = 2;  // compare(a * 2^k) when known
  while (true) {
    mpz_sub(mid, z, a);
    if (mpz_cmp_ui(mid, 1) <= 0) break;
    mpz_add(mid, a, z);
    mpz_fdiv_q_2exp(mid, mid, 1);
    const int c = compare(grid_point(mid, k).v);
    if (c >= 0) {
      mpz_set(a, mid);
      at_a = c;
    } else {
      mpz_set(z, mid);
    }
  }
  const Mp cell_low = grid_point(a, k);
  if (at_a == 2) at_a = compare(cell_low.v);
  RoundPackInput out;
  if (at_a == 0) {
    out = from_mpfr(cell_low.v);  // the value is this grid point
  } else if (mpfr_cmp(lo, cell_low.v) > 0) {
    out = from_mpfr(lo);  // lo is inside the value's cell
  } else if (mpfr_cmp(hi, grid_point(z, k).v) < 0) {
    out = from_mpfr(hi);
  } else {  // the cell's midpoint, (2a + 1) * 2^(k-1)
    mpz_mul_2exp(mid, a, 1);
    mpz_add_ui(mid, mid, 1);
    out = from_mpfr(grid_point(mid, k - 1).v);
  }
  mpz_clears(a, z, mid, nullptr);
  return out;
}

// Whether x and y round alike (result, and flags but inexact) and the result is not inside
// [x, y], where the value could be that result exactly.
bool decided_by(const Format& f, const RoundPackInput& x, const RoundPackInput& y, const mpfr_t lo, const mpfr_t hi,
                const RoundingSpec& spec, std::uint64_t position) {
  const Rounded a = round_pack_input(f, x, spec, position), b = round_pack_input(f, y, spec, position);
  if (a.bits != b.bits || (a.flags & ~flag::inexact) != (b.flags & ~flag::inexact)) return false;
  const double result = to_double(f, a.bits);
  if (!std::isfinite(result)) return true;
  return mpfr_cmp_d(lo, result) > 0 || mpfr_cmp_d(hi, result) < 0 || mpfr_equal_p(lo, hi);
}

// Thrown by a Compare that cannot decide exactly within its budget (a gradient whose common
// denominator multiplies out to more than kMaxProducts products).
struct Undecided : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Where the exact comparison gives up (Undecided), enclosures at these precisions are tried
// before the error: a value e^-G from a boundary needs about G / ln 2 bits, and keys below
// e^-11000 enter as weights in [0, 2^-15800] (RowScores), which no precision narrows.
constexpr mpfr_prec_t kLadderBits[] = {2048, 16384};

// `refine`, where given, is a costlier enclosure tried at kSecondBits before the exact
// comparison, and in its place on the ladder: one that keeps its precision relative where
// `enclose` cancels.
RoundPackInput decide(const Format& f, const RoundingSpec& spec, std::uint64_t position, const Enclose& enclose,
                      const Compare& compare, const Enclose* refine = nullptr) {
  Mp lo(kFirstBits), hi(kFirstBits);
  auto try_enclosure = [&](const Enclose& e, mpfr_prec_t p) {
    mpfr_set_prec(lo.v, p);
    mpfr_set_prec(hi.v, p);
    e(p, lo.v, hi.v);
    return decided_by(f, from_mpfr(lo.v), from_mpfr(hi.v), lo.v, hi.v, spec, position);
  };
  for (const mpfr_prec_t p : {kFirstBits, kSecondBits})
    if (try_enclosure(enclose, p)) return from_mpfr(lo.v);
  if (refine && try_enclosure(*refine, kSecondBits)) return from_mpfr(lo.v);
  try {
    return locate(f, spec, lo.v, hi.v, compare);
  } catch (const Undecided&) {
    for (const mpfr_prec_t p : kLadderBits)
      if (try_enclosure(refine ? *refine : enclose, p)) return from_mpfr(lo.v);
    throw;
  }
}

// Whether both ends of [approx - bound, approx + bound] round alike.
bool double_decides(const Format& f, double approx, double bound, const RoundingSpec& spec, std::uint64_t position) {
  if (!(bound < std::numeric_limits<double>::infinity())) return false;
  return round_double(f, approx - bound, spec, position).bits == round_double(f, approx + bound, spec, position).bits;
}

// The columns of row (b, h, r) of `approx` whose double cannot decide its rounding into f
// (double_decides, at position first_position + c) within bound(c, double).
template <class Bound>
std::vector<int> undecided_columns(const Tensor4& approx, int b, int h, int r, const Format& f,
                                   const RoundingSpec& spec, std::uint64_t first_position, Bound bound) {
  std::vector<int> undecided;
  for (int c = 0; c < approx.cols; ++c) {
    const double x = approx.at(b, h, r, c);
    if (!double_decides(f, x, bound(c, x), spec, first_position + static_cast<std::uint64_t>(c)))
      undecided.push_back(c);
  }
  return undecided;
}

// MPFR keeps per-thread caches (constants such as log 2 for exp); the engine's worker threads
// end after the run, so they are freed before returning.
struct FreeMpfrCaches {
  ~FreeMpfrCaches() { mpfr_free_cache2(MPFR_FREE_LOCAL_CACHE); }
};

// ---- the gradients: sums of exponentials over a common denominator ---------------------
// (the header's "A gradient is compared the same way over a common denominator")

constexpr std::size_t kMaxProducts = std::size_t{1} << 18;

Mp exact_copy(const mpfr_t x) {
  Mp y(std::max<mpfr_prec_t>(mpfr_zero_p(x) ? MPFR_PREC_MIN : mpfr_min_prec(x), MPFR_PREC_MIN));
  mpfr_set(y.v, x, MPFR_RNDN);
  return y;
}
Mp exact_product(const mpfr_t a, const mpfr_t b) {
  Mp product(std::max<mpfr_prec_t>(mpfr_min_prec(a) + mpfr_min_prec(b), MPFR_PREC_MIN));
  mpfr_mul(product.v, a, b, MPFR_RNDN);  // exact: the precision holds both significands
  return product;
}
Mp exact_value(double x) {
  Mp y(53);
  mpfr_set_d(y.v, x, MPFR_RNDN);
  return y;
}

struct MpLess {
  using is_transparent = void;
  bool operator()(const Mp& a, const Mp& b) const { return mpfr_cmp(a.v, b.v) < 0; }
  bool operator()(const Mp& a, mpfr_srcptr b) const { return mpfr_cmp(a.v, b) < 0; }
  bool operator()(mpfr_srcptr a, const Mp& b) const { return mpfr_cmp(a, b.v) < 0; }
};

// Thrown where multiplying out would take more than kMaxProducts products.
struct TooManyTerms {};

// sum_t c_t e^(scale * E_t): exact rational exponents E_t (sums of q . k dots) and nonzero
// exact coefficients c_t, one term per exponent.
class ExpSum {
 public:
  void add(mpfr_srcptr exponent, mpfr_srcptr coefficient) {  // this += c e^(scale E)
    if (mpfr_zero_p(coefficient)) return;
    const auto it = terms_.find(exponent);
    if (it == terms_.end()) {
      terms_.emplace(exact_copy(exponent), exact_copy(coefficient));
      return;
    }
    add_exact(it->second, coefficient);
    if (mpfr_zero_p(it->second.v)) terms_.erase(it);
  }
  // this += factor * e^(scale * shift) * other
  void add_shifted(const ExpSum& other, mpfr_srcptr shift, mpfr_srcptr factor) {
    Mp exponent(MPFR_PREC_MIN);
    for (const auto& [e, c] : other.terms_) {
      set_exact_sum(exponent, e.v, shift);
      const Mp coefficient = exact_product(c.v, factor);
      add(exponent.v, coefficient.v);
    }
  }
  ExpSum times(const ExpSum& other) const {
    if (terms_.size() * other.terms_.size() > kMaxProducts) throw TooManyTerms{};
    ExpSum out;
    for (const auto& [e, c] : terms_) out.add_shifted(other, e.v, c.v);
    return out;
  }
  bool operator==(const ExpSum& other) const {
    return terms_.size() == other.terms_.size() &&
           std::equal(terms_.begin(), terms_.end(), other.terms_.begin(), [](const auto& x, const auto& y) {
             return mpfr_equal_p(x.first.v, y.first.v) && mpfr_equal_p(x.second.v, y.second.v);
           });
  }
  bool empty() const { return terms_.empty(); }
  const std::map<Mp, Mp, MpLess>& terms() const { return terms_; }

 private:
  std::map<Mp, Mp, MpLess> terms_;
};

ExpSum one_term(mpfr_srcptr exponent, mpfr_srcptr coefficient) {
  ExpSum s;
  s.add(exponent, coefficient);
  return s;
}

// The sign of scale X - beta Y (scaled) or of X - beta Y, exactly: per exponent E of X or Y,
// the coefficient (scale x_E - beta y_E) of e^(scale E) is zero or a nonzero algebraic
// number, and the exponents are distinct, so the sum of the nonzero terms is not zero
// (Lindemann-Weierstrass); its sign is found at rising precision.
int sign_of_difference(const AttentionInputs& in, const ExpSum& x, const ExpSum& y, mpfr_srcptr beta, bool scaled) {
  struct Term {
    mpfr_srcptr exponent;
    Mp x, beta_y;  // scale x - beta y, or x when not scaled (beta_y folded into x)
    int sign;      // known sign, or 0
  };
  std::vector<Term> terms;
  auto x_at = x.terms().begin(), y_at = y.terms().begin();
  const Mp zero = exact_value(0.0);
  while (x_at != x.terms().end() || y_at != y.terms().end()) {
    const bool take_x =
        y_at == y.terms().end() || (x_at != x.terms().end() && mpfr_cmp(x_at->first.v, y_at->first.v) <= 0);
    const bool take_y =
        x_at == x.terms().end() || (y_at != y.terms().end() && mpfr_cmp(y_at->first.v, x_at->first.v) <= 0);
    const mpfr_srcptr exponent = take_x ? x_at->first.v : y_at->first.v;
    Term t{exponent, exact_copy(take_x ? x_at->second.v : zero.v),
           take_y ? exact_product(beta, y_at->second.v) : exact_copy(zero.v), 0};
    if (take_x) ++x_at;
    if (take_y) ++y_at;
    if (!scaled) {  // x - beta y, exactly
      Mp difference(MPFR_PREC_MIN);
      set_exact_difference(difference, t.x.v, t.beta_y.v);
      if (mpfr_zero_p(difference.v)) continue;
      t.sign = mpfr_sgn(difference.v);
      mpfr_swap(t.x.v, difference.v);
      mpfr_set_zero(t.beta_y.v, 1);
      terms.push_back(std::move(t));
      continue;
    }
    const int sx = mpfr_sgn(t.x.v), sy = mpfr_sgn(t.beta_y.v);
    if (sx == 0 && sy == 0) continue;
    if (sx != 0 && sy != 0 && scale_times_is(in, t.x.v, t.beta_y.v)) continue;
    if (sx == 0)
      t.sign = -sy;
    else if (sy == 0 || sy != sx)
      t.sign = sx;  // scale > 0
    terms.push_back(std::move(t));
  }
  if (terms.empty()) return 0;
  bool positive = false, negative = false, unknown = false;
  for (const Term& t : terms) (t.sign > 0 ? positive : t.sign < 0 ? negative : unknown) = true;
  if (!unknown && !negative) return 1;
  if (!unknown && !positive) return -1;
  const mpfr_srcptr top = terms.back().exponent;  // the largest: x and y are sorted ascending
  for (mpfr_prec_t p = kFirstBits; p <= kLastBits; p *= 4) {
    Mp s_lo(p), s_hi(p), gap(MPFR_PREC_MIN), a_lo(p), a_hi(p), e_lo(p), e_hi(p), c_lo(p), c_hi(p), term(p);
    Mp sum_lo(p), sum_hi(p);
    enclose_scale(in, p, s_lo.v, s_hi.v);
    mpfr_set_zero(sum_lo.v, 1);
    mpfr_set_zero(sum_hi.v, 1);
    for (const Term& t : terms) {
      set_exact_difference(gap, t.exponent, top);  // <= 0: the larger scale gives the lower end
      mpfr_mul(a_lo.v, gap.v, s_hi.v, MPFR_RNDD);
      mpfr_mul(a_hi.v, gap.v, s_lo.v, MPFR_RNDU);
      mpfr_exp(e_lo.v, a_lo.v, MPFR_RNDD);
      mpfr_exp(e_hi.v, a_hi.v, MPFR_RNDU);
      if (scaled) {
        const bool x_nonnegative = mpfr_sgn(t.x.v) >= 0;
        mpfr_mul(c_lo.v, t.x.v, x_nonnegative ? s_lo.v : s_hi.v, MPFR_RNDD);
        mpfr_mul(c_hi.v, t.x.v, x_nonnegative ? s_hi.v : s_lo.v, MPFR_RNDU);
        mpfr_sub(c_lo.v, c_lo.v, t.beta_y.v, MPFR_RNDD);
        mpfr_sub(c_hi.v, c_hi.v, t.beta_y.v, MPFR_RNDU);
      } else {
        mpfr_set(c_lo.v, t.x.v, MPFR_RNDD);
        mpfr_set(c_hi.v, t.x.v, MPFR_RNDU);
      }
      mpfr_mul(term.v, c_lo.v, mpfr_sgn(c_lo.v) >= 0 ? e_lo.v : e_hi.v, MPFR_RNDD);
      mpfr_add(sum_lo.v, sum_lo.v, term.v, MPFR_RNDD);
      mpfr_mul(term.v, c_hi.v, mpfr_sgn(c_hi.v) >= 0 ? e_hi.v : e_lo.v, MPFR_RNDU);
      mpfr_add(sum_hi.v, sum_hi.v, term.v, MPFR_RNDU);
    }
    if (mpfr_sgn(sum_lo.v) > 0) return 1;
    if (mpfr_sgn(sum_hi.v) < 0) return -1;
  }
  throw std::runtime_error("correctly-rounded: a gradient is not separated from a rounding boundary at " +
                           std::to_string(kLastBits) + " bits");
}

// w_i = dO . V_i of one row's first nk keys, exactly.
std::vector<Mp> exact_w(const AttentionInputs& in, int b, int h, int r, int nk) {
  const int d = in.q.cols, hk = h / (in.k.heads > 0 ? in.q.heads / in.k.heads : 1);
  std::vector<Mp> w;
  w.reserve(static_cast<std::size_t>(nk));
  for (int i = 0; i < nk; ++i) w.push_back(exact_dot(in.d_o->row(b, h, r), in.v.row(b, hk, i), d));
  return w;
}

// Exact values x_j as KeyValues (a weighted mean's values) with their long doubles.
KeyValues exact_key_values(std::vector<Mp> exact) {
  std::vector<long double> approx;
  approx.reserve(exact.size());
  for (const Mp& x : exact) approx.push_back(mpfr_get_ld(x.v, MPFR_RNDN));
  return KeyValues(std::move(exact), std::move(approx), 2 * kLongDoubleUlp);
}

std::vector<Mp> exact_copies(const std::vector<Mp>& xs) {
  std::vector<Mp> out;
  out.reserve(xs.size());
  for (const Mp& x : xs) out.push_back(exact_copy(x.v));
  return out;
}

// One row's exact sums, from its w (exact_w): the dots d_i = q . k_i of its visible keys, and
// l = sum_i e^(scale d_i), weighted = sum_i w_i e^(scale d_i).
struct ExactRow {
  std::vector<Mp> dots;
  ExpSum l, weighted;
};
ExactRow exact_row(const AttentionInputs& in, int b, int h, int r, const std::vector<Mp>& w) {
  const int d = in.q.cols, hk = h / (in.k.heads > 0 ? in.q.heads / in.k.heads : 1);
  ExactRow row;
  const Mp one = exact_value(1.0);
  for (std::size_t i = 0; i < w.size(); ++i) {
    row.dots.push_back(exact_dot(in.q.row(b, h, r), in.k.row(b, hk, static_cast<int>(i)), d));
    row.l.add(row.dots.back().v, one.v);
    row.weighted.add(row.dots.back().v, w[i].v);
  }
  return row;
}

// Whether every w_i of a row is the same (then its every dP_i - delta is exactly 0).
bool uniform(const std::vector<Mp>& w) {
  return std::all_of(w.begin(), w.end(), [&](const Mp& x) { return mpfr_equal_p(x.v, w.front().v) != 0; });
}

// The interval product [a_lo, a_hi] * [b_lo, b_hi] (b_lo >= 0) into [lo, hi].
void multiply_by_nonnegative(mpfr_t lo, mpfr_t hi, mpfr_srcptr a_lo, mpfr_srcptr a_hi, mpfr_srcptr b_lo,
                             mpfr_srcptr b_hi) {
  mpfr_mul(lo, a_lo, mpfr_sgn(a_lo) >= 0 ? b_lo : b_hi, MPFR_RNDD);
  mpfr_mul(hi, a_hi, mpfr_sgn(a_hi) >= 0 ? b_hi : b_lo, MPFR_RNDU);
}

}  // namespace

Rounded round_pack_input(const Format& f, const RoundPackInput& x, const RoundingSpec& spec, std::uint64_t position,
                         RoundingEvent* event) {
  if (x.significand == 0) return round_double(f, x.negative ? -0.0 : 0.0, spec, position, event);
  return round_pack(f, x.negative, x.exponent, x.significand, x.sticky, spec, position, event);
}

ExactRounding::ExactRounding(const AttentionInputs& in, const AttentionOutputs& exact) : in_(in), exact_(exact) {
  const int B = in.k.batch, Hk = in.k.heads, Nk = in.k.rows, D = in.v.cols;
  v_abs_max_.assign(static_cast<std::size_t>(B) * Hk * D, 0.0);
  for (int b = 0; b < B; ++b)
    for (int hk = 0; hk < Hk; ++hk)
      for (int j = 0; j < Nk; ++j) {
        const double* v = in.v.row(b, hk, j);
        double* m = &v_abs_max_[(static_cast<std::size_t>(b) * Hk + hk) * D];
        for (int c = 0; c < D; ++c) m[c] = std::max(m[c], std::fabs(v[c]));
      }
}

int ExactRounding::kv_head(int h) const { return h / (in_.k.heads > 0 ? in_.q.heads / in_.k.heads : 1); }

const double* ExactRounding::column_abs_max(int b, int h) const {
  return &v_abs_max_[(static_cast<std::size_t>(b) * in_.k.heads + kv_head(h)) * in_.v.cols];
}

bool ExactRounding::inputs_finite(int b, int h, int r, int nk, bool with_values) const {
  const auto finite = [](const double* x, int n) {
    return std::all_of(x, x + n, [](double e) { return std::isfinite(e); });
  };
  const int D = in_.q.cols, hk = kv_head(h);
  if (!finite(in_.q.row(b, h, r), D)) return false;
  for (int j = 0; j < nk; ++j)
    if (!finite(in_.k.row(b, hk, j), D) || (with_values && !finite(in_.v.row(b, hk, j), D))) return false;
  return true;
}

int ExactRounding::visible_keys(int r) const {
  const int N = in_.q.rows, Nk = in_.k.rows;
  const int offset = in_.causal_alignment == AttentionInputs::CausalAlignment::top_left ? 0 : Nk - N;
  return in_.causal ? std::clamp(r + 1 + offset, 0, Nk) : Nk;
}

// exact_attention's long-double arithmetic (u = 2^-64), with S = scale * max_j sum_c |q_c k_jc|
// over the row's nk visible keys: each score errs by at most (d + 4) u S; each weight
// e^(s_j - m) relatively by 2.02 (d + 4) u S + u |s_j - m| + 2 u; the sum of weights l >= 1
// and the numerator add nk u each, and sum_j p_j |s_j - m| <= nk / e. So a weighted mean of
// values |x_j| <= 1 errs by at most u (4.04 (d + 4) S + 2.74 nk + 6), and LSE = m + log l by
// u (3.03 (d + 4) S + 1.4 nk + 2 log nk + 2 + |LSE|). The bound returned is four times the
// larger of these (without LSE's |LSE| term), or infinite where it is not small enough for
// the linear argument.
double mean_error_bound(int d, int nk, double score_magnitude) {
  const double bound = std::ldexp(17.0 * (d + 4) * score_magnitude + 12.0 * nk + 24.0, -64);
  return bound < 0x1p-10 ? bound : std::numeric_limits<double>::infinity();
}

// p_j = e^(x) with x = s_j - LSE computed: s_j errs by (d + 4) u S, LSE by the bound above,
// the subtraction by u |x| <= u (S + |LSE|) (|s_j| <= S), and expl adds 2 ulps; a relative
// error of e^x is x's absolute error (times 1.01 below 2^-20).
double weight_error_bound(int d, int nk, double score_magnitude, double lse) {
  const double s = score_magnitude, argued = 1.01 * ((d + 4) * s + 3.03 * (d + 4) * s + 1.4 * nk +
                                                     2 * std::log(std::max(nk, 1)) + 2 + 2 * std::fabs(lse) + s) +
                                             2;
  const double bound = std::ldexp(4 * argued, -64);
  return bound < 0x1p-20 ? bound : std::numeric_limits<double>::infinity();
}

double ExactRounding::row_mean_error_bound(int b, int h, int r) const {
  const double s =
      exact_.row_score_magnitude ? exact_.row_score_magnitude->at(b, h, r, 0) : std::numeric_limits<double>::infinity();
  return mean_error_bound(in_.q.cols, visible_keys(r), s);
}

std::vector<std::optional<RoundPackInput>> ExactRounding::o_row(int b, int h, int r, const Format& f,
                                                                const RoundingSpec& spec,
                                                                std::uint64_t first_position) const {
  const int D = in_.v.cols;
  std::vector<std::optional<RoundPackInput>> out(static_cast<std::size_t>(D));
  const int nk = visible_keys(r);
  if (nk == 0) return out;  // no key: O is exactly 0
  const double error = row_mean_error_bound(b, h, r);
  const double* v_max = column_abs_max(b, h);
  const std::vector<int> undecided =
      undecided_columns(exact_.o, b, h, r, f, spec, first_position,
                        [&](int c, double approx) { return v_max[c] * error + std::ldexp(std::fabs(approx), -52); });
  if (undecided.empty()) return out;
  const FreeMpfrCaches free_caches_on_return;
  if (!inputs_finite(b, h, r, nk, true)) return out;
  RowScores scores(in_, b, h, r, nk);
  for (const int c : undecided) {
    std::vector<double> column(static_cast<std::size_t>(nk));
    for (int j = 0; j < nk; ++j) column[static_cast<std::size_t>(j)] = scores.value(j)[c];
    const KeyValues x(std::move(column));
    out[static_cast<std::size_t>(c)] = decide(
        f, spec, first_position + static_cast<std::uint64_t>(c),
        [&](mpfr_prec_t p, mpfr_t lo, mpfr_t hi) { scores.enclose_mean(x, p, lo, hi); },
        [&](const mpfr_t beta) { return scores.compare_mean(x, beta); });
  }
  return out;
}

std::optional<RoundPackInput> ExactRounding::delta(int b, int h, int r, const Format& f, const RoundingSpec& spec,
                                                   std::uint64_t position) const {
  if (!in_.d_o || !exact_.delta) return std::nullopt;
  const int D = in_.v.cols;
  const int nk = visible_keys(r);
  if (nk == 0) return std::nullopt;  // delta is exactly 0
  const double* d_o = in_.d_o->row(b, h, r);
  const double* v_max = column_abs_max(b, h);
  // delta = sum_c dO_c o_c of the long-double O: each o_c errs as a mean (mean_error_bound),
  // and the sum adds d + 1 ulps of sum_c |dO_c| max|V_c|.
  double scale = 0.0;
  for (int c = 0; c < D; ++c) scale += std::fabs(d_o[c]) * v_max[c];
  const double approx = exact_.delta->at(b, h, r, 0);
  const double bound = scale * (row_mean_error_bound(b, h, r) + std::ldexp(4.0 * (D + 1), -64)) * (1 + 0x1p-40) +
                       std::ldexp(std::fabs(approx), -52);
  if (double_decides(f, approx, bound, spec, position)) return std::nullopt;
  const FreeMpfrCaches free_caches_on_return;
  if (!std::all_of(d_o, d_o + D, [](double x) { return std::isfinite(x); }) || !inputs_finite(b, h, r, nk, true))
    return std::nullopt;
  RowScores scores(in_, b, h, r, nk);
  // delta = sum_j e^(s_j) w_j / sum_j e^(s_j) with w_j = dO . V_j, exactly.
  std::vector<Mp> exact_w;
  std::vector<long double> approx_w(static_cast<std::size_t>(nk));
  exact_w.reserve(static_cast<std::size_t>(nk));
  for (int j = 0; j < nk; ++j) {
    exact_w.push_back(exact_dot(d_o, scores.value(j), D));
    approx_w[static_cast<std::size_t>(j)] = mpfr_get_ld(exact_w.back().v, MPFR_RNDN);
  }
  const KeyValues w(std::move(exact_w), std::move(approx_w), 2 * kLongDoubleUlp);
  return decide(
      f, spec, position, [&](mpfr_prec_t p, mpfr_t lo, mpfr_t hi) { scores.enclose_mean(w, p, lo, hi); },
      [&](const mpfr_t beta) { return scores.compare_mean(w, beta); });
}

std::optional<RoundPackInput> ExactRounding::lse(int b, int h, int r, const Format& f, const RoundingSpec& spec,
                                                 std::uint64_t position) const {
  const double approx = exact_.lse.at(b, h, r, 0);
  if (!std::isfinite(approx)) return std::nullopt;  // no visible key
  const int nk = visible_keys(r);
  // The argued bound (mean_error_bound's comment) with LSE's own rounding and the double's.
  const double bound = row_mean_error_bound(b, h, r) + std::ldexp(std::fabs(approx), -51);
  if (double_decides(f, approx, bound, spec, position)) return std::nullopt;
  const FreeMpfrCaches free_caches_on_return;
  if (!inputs_finite(b, h, r, nk, false)) return std::nullopt;
  RowScores scores(in_, b, h, r, nk);
  return decide(
      f, spec, position, [&](mpfr_prec_t p, mpfr_t lo, mpfr_t hi) { scores.enclose_lse(p, lo, hi); },
      [&](const mpfr_t beta) { return scores.compare_lse(beta); });
}

// ---- the gradients -----------------------------------------------------------------

namespace {

// The bound on a gradient element's double: exact_attention's bound plus the double's own
// rounding, relative or, below double's normal range, absolute (2^-1074: a long-double value
// such as e^-4000 becomes 0).
// `bounds` is exact_attention's tensor of them (none: unbounded).
auto gradient_bound(const Tensor4* bounds, int b, int h, int r) {
  return [=](int c, double approx) {
    const double bound = bounds ? bounds->at(b, h, r, c) : std::numeric_limits<double>::infinity();
    return bound + std::ldexp(std::fabs(approx), -52) + 0x1p-1074;
  };
}

// scale * (E[a] - E[y] E[z]) under the row's softmax, enclosed at p bits: dQ's covariance
// (a = w K, y = w, z = K), or the same about the top key (relative where it dominates).
void enclose_scaled_covariance(const AttentionInputs& in, RowScores& scores, const KeyValues& a, const KeyValues& y,
                               const KeyValues& z, mpfr_prec_t p, mpfr_t lo, mpfr_t hi) {
  Mp a_lo(p), a_hi(p), y_lo(p), y_hi(p), z_lo(p), z_hi(p), t(p), low(p), high(p), s_lo(p), s_hi(p);
  scores.enclose_mean(a, p, a_lo.v, a_hi.v);
  scores.enclose_mean(y, p, y_lo.v, y_hi.v);
  scores.enclose_mean(z, p, z_lo.v, z_hi.v);
  mpfr_set_inf(low.v, 1);
  mpfr_set_inf(high.v, -1);
  for (const mpfr_srcptr yx : {y_lo.v, y_hi.v})
    for (const mpfr_srcptr zx : {z_lo.v, z_hi.v}) {
      mpfr_mul(t.v, yx, zx, MPFR_RNDD);
      mpfr_min(low.v, low.v, t.v, MPFR_RNDD);
      mpfr_mul(t.v, yx, zx, MPFR_RNDU);
      mpfr_max(high.v, high.v, t.v, MPFR_RNDU);
    }
  mpfr_sub(a_lo.v, a_lo.v, high.v, MPFR_RNDD);  // the covariance's interval
  mpfr_sub(a_hi.v, a_hi.v, low.v, MPFR_RNDU);
  enclose_scale(in, p, s_lo.v, s_hi.v);
  multiply_by_nonnegative(lo, hi, a_lo.v, a_hi.v, s_lo.v, s_hi.v);
}

Undecided too_many_terms(const char* what, int b, int h, int r, int c) {
  return Undecided(
      "correctly-rounded: " + std::string(what) + "[" + std::to_string(b) + "," + std::to_string(h) + "," +
      std::to_string(r) + "," + std::to_string(c) + "] lies too near a rounding boundary for intervals of up to " +
      std::to_string(kLadderBits[std::size(kLadderBits) - 1]) + " bits, and deciding it exactly would take more than " +
      std::to_string(kMaxProducts) + " products of exponential sums");
}

}  // namespace

std::vector<std::optional<RoundPackInput>> ExactRounding::dq_row(int b, int h, int r, const Format& f,
                                                                 const RoundingSpec& spec,
                                                                 std::uint64_t first_position) const {
  const int D = in_.q.cols;
  std::vector<std::optional<RoundPackInput>> out(static_cast<std::size_t>(D));
  const int nk = visible_keys(r);
  if (nk == 0 || !in_.d_o || !exact_.dq) return out;  // no key: dQ is exactly 0
  const auto& bounds = exact_.gradient_error_bound;
  std::vector<int> undecided = undecided_columns(*exact_.dq, b, h, r, f, spec, first_position,
                                                 gradient_bound(bounds ? &bounds->dq : nullptr, b, h, r));
  if (undecided.empty()) return out;
  const FreeMpfrCaches free_caches_on_return;
  const double* d_o = in_.d_o->row(b, h, r);
  if (!std::all_of(d_o, d_o + D, [](double x) { return std::isfinite(x); }) || !inputs_finite(b, h, r, nk, true))
    return out;
  // dQ = scale * (E[w K] - E[w] E[K]) under the row's softmax: zero where K_c or w is the
  // same for every key.
  const int hk = kv_head(h);
  std::erase_if(undecided, [&](int c) {
    const double first = in_.k.at(b, hk, 0, c);
    for (int j = 1; j < nk; ++j)
      if (in_.k.at(b, hk, j, c) != first) return false;
    out[static_cast<std::size_t>(c)] = RoundPackInput{};
    return true;
  });
  if (undecided.empty()) return out;
  RowScores scores(in_, b, h, r, nk);
  const std::vector<Mp> w = exact_w(in_, b, h, r, nk);
  if (uniform(w)) {
    for (const int c : undecided) out[static_cast<std::size_t>(c)] = RoundPackInput{};
    return out;
  }
  const KeyValues w_values = exact_key_values(exact_copies(w));
  std::optional<ExactRow> row;  // for exact comparisons, made when first needed
  std::optional<ExpSum> l_squared;
  for (const int c : undecided) {
    std::vector<double> column(static_cast<std::size_t>(nk));
    for (int j = 0; j < nk; ++j) column[static_cast<std::size_t>(j)] = scores.key(j)[c];
    std::vector<Mp> wk;
    for (int j = 0; j < nk; ++j) {
      const Mp k = exact_value(column[static_cast<std::size_t>(j)]);
      wk.push_back(exact_product(w[static_cast<std::size_t>(j)].v, k.v));
    }
    const KeyValues wk_values = exact_key_values(exact_copies(wk));
    const KeyValues k_values(column);
    std::optional<ExpSum> x;  // l * sum_j w_j K_jc e^(scale d_j) - weighted * sum_j K_jc e^(scale d_j)
    auto enclose = [&](mpfr_prec_t p, mpfr_t lo, mpfr_t hi) {
      enclose_scaled_covariance(in_, scores, wk_values, w_values, k_values, p, lo, hi);
    };
    // The covariance again, as E[(w - w_t)(K - K_t)] - E[w - w_t] E[K - K_t] about the top
    // key t: where t dominates the row (scores hundreds of nats apart) every term is 0 for t
    // and tiny for the keys far below, so the enclosure is relative to dQ, about e^-gap,
    // which the one above loses in 2^-p of E[wK]. Costlier; tried where that one fails.
    const Enclose enclose_relative = [&](mpfr_prec_t p, mpfr_t lo, mpfr_t hi) {
      const auto t = static_cast<std::size_t>(scores.top_key());
      const Mp k_t = exact_value(column[t]);
      std::vector<Mp> dw, dk, product;
      for (int j = 0; j < nk; ++j) {
        const auto at = static_cast<std::size_t>(j);
        const Mp k = exact_value(column[at]);
        dw.emplace_back(MPFR_PREC_MIN);
        set_exact_difference(dw.back(), w[at].v, w[t].v);
        dk.emplace_back(MPFR_PREC_MIN);
        set_exact_difference(dk.back(), k.v, k_t.v);
        product.push_back(exact_product(dw.back().v, dk.back().v));
      }
      enclose_scaled_covariance(in_, scores, exact_key_values(std::move(product)), exact_key_values(std::move(dw)),
                                exact_key_values(std::move(dk)), p, lo, hi);
    };
    auto compare = [&](const mpfr_t beta) {
      try {
        if (!row) row = exact_row(in_, b, h, r, w);
        if (!l_squared) l_squared = row->l.times(row->l);
        if (!x) {
          ExpSum k_sum, wk_sum;
          for (int j = 0; j < nk; ++j) {
            const Mp k = exact_value(column[static_cast<std::size_t>(j)]);
            k_sum.add(row->dots[static_cast<std::size_t>(j)].v, k.v);
            wk_sum.add(row->dots[static_cast<std::size_t>(j)].v, wk[static_cast<std::size_t>(j)].v);
          }
          x = row->l.times(wk_sum);
          const Mp zero = exact_value(0.0), minus_one = exact_value(-1.0);
          x->add_shifted(row->weighted.times(k_sum), zero.v, minus_one.v);
        }
      } catch (const TooManyTerms&) {
        throw too_many_terms("dQ", b, h, r, c);
      }
      return sign_of_difference(in_, *x, *l_squared, beta, true);
    };
    out[static_cast<std::size_t>(c)] =
        decide(f, spec, first_position + static_cast<std::uint64_t>(c), enclose, compare, &enclose_relative);
  }
  return out;
}

// The rows (q head of the group, row) of one (b, hk) as dk_row and dv_row need them.
struct ExactRounding::KeyRows {
  struct Enclosure {  // the row's LSE and delta, enclosed at one precision
    Mp lse_lo, lse_hi, delta_lo, delta_hi;
    explicit Enclosure(mpfr_prec_t p) : lse_lo(p), lse_hi(p), delta_lo(p), delta_hi(p) {}
  };
  struct Row {
    int h = 0, r = 0, nk = 0;
    bool finite = false;
    std::map<mpfr_prec_t, Enclosure> enclosures;  // made when first needed, at both precisions
    std::optional<std::vector<Mp>> w;             // exact_w, made when first needed
    std::optional<ExactRow> exact;                // made when first needed
  };
  int b = -1, hk = -1;
  std::vector<Row> rows;  // every row of the group's q heads that sees a key
};

ExactRounding::~ExactRounding() = default;

ExactRounding::KeyRows& ExactRounding::key_rows(int b, int hk) const {
  if (key_rows_ && key_rows_->b == b && key_rows_->hk == hk) return *key_rows_;
  key_rows_ = std::make_unique<KeyRows>();
  key_rows_->b = b;
  key_rows_->hk = hk;
  const int group = in_.k.heads > 0 ? in_.q.heads / in_.k.heads : 1;
  for (int h = hk * group; h < (hk + 1) * group; ++h)
    for (int r = 0; r < in_.q.rows; ++r) {
      const int nk = visible_keys(r);
      if (nk == 0) continue;
      KeyRows::Row row;
      row.h = h;
      row.r = r;
      row.nk = nk;
      const double* d_o = in_.d_o->row(b, h, r);
      row.finite = std::all_of(d_o, d_o + in_.q.cols, [](double x) { return std::isfinite(x); }) &&
                   inputs_finite(b, h, r, nk, true);
      key_rows_->rows.push_back(std::move(row));
    }
  return *key_rows_;
}

std::vector<std::optional<RoundPackInput>> ExactRounding::dk_row(int b, int hk, int j, const Format& f,
                                                                 const RoundingSpec& spec,
                                                                 std::uint64_t first_position) const {
  return key_row(KeyGradient::dk, b, hk, j, f, spec, first_position);
}
std::vector<std::optional<RoundPackInput>> ExactRounding::dv_row(int b, int hk, int j, const Format& f,
                                                                 const RoundingSpec& spec,
                                                                 std::uint64_t first_position) const {
  return key_row(KeyGradient::dv, b, hk, j, f, spec, first_position);
}

std::vector<std::optional<RoundPackInput>> ExactRounding::key_row(KeyGradient which, int b, int hk, int j,
                                                                  const Format& f, const RoundingSpec& spec,
                                                                  std::uint64_t first_position) const {
  const int D = in_.v.cols;
  const bool dk = which == KeyGradient::dk;
  std::vector<std::optional<RoundPackInput>> out(static_cast<std::size_t>(D));
  const std::optional<Tensor4>& approx_tensor = dk ? exact_.dk : exact_.dv;
  if (!in_.d_o || !approx_tensor) return out;
  const auto& bounds = exact_.gradient_error_bound;
  const std::vector<int> undecided =
      undecided_columns(*approx_tensor, b, hk, j, f, spec, first_position,
                        gradient_bound(bounds ? (dk ? &bounds->dk : &bounds->dv) : nullptr, b, hk, j));
  if (undecided.empty()) return out;
  const FreeMpfrCaches free_caches_on_return;
  KeyRows& rows = key_rows(b, hk);
  std::vector<KeyRows::Row*> seeing;  // the rows that see key j
  for (KeyRows::Row& row : rows.rows)
    if (row.nk > j) {
      if (!row.finite) return out;
      seeing.push_back(&row);
    }
  const double* k_j = in_.k.row(b, hk, j);
  auto w_of = [&](KeyRows::Row& row) -> const std::vector<Mp>& {
    if (!row.w) row.w = exact_w(in_, b, row.h, row.r, row.nk);
    return *row.w;
  };
  // Per row: P_j = e^(scale q . k_j - LSE) and dk's w_j - delta, enclosed at p bits. The
  // difference of w_j and the row's delta enclosure errs by that enclosure's width, about
  // 2^-p of delta plus the long-double bound of the keys far below the max, so where a key
  // dominates its rows (scores hundreds of nats apart) its w_j - delta, about e^-gap, is
  // lost in it. `relative` encloses it instead as the mean of the exact differences w_j - w_i
  // (sum_i P_i = 1), whose terms are 0 for key j and tiny for the keys far below: an
  // enclosure relative to the value, costlier (each row's weights again, for this key), so
  // tried only where the first cannot decide.
  struct RowFactors {
    std::vector<Mp> p_lo, p_hi, t_lo, t_hi;
  };
  std::map<std::pair<mpfr_prec_t, bool>, RowFactors> factors;
  auto row_factors = [&](mpfr_prec_t p, bool relative) -> const RowFactors& {
    if (const auto it = factors.find({p, relative}); it != factors.end()) return it->second;
    RowFactors& rf = factors[{p, relative}];
    Mp s_lo(p), s_hi(p), score_lo(p), score_hi(p), x(p);
    enclose_scale(in_, p, s_lo.v, s_hi.v);
    for (KeyRows::Row* row : seeing) {
      std::optional<RowScores> scores;  // the row's, made once where needed below
      auto row_scores = [&]() -> RowScores& {
        if (!scores) scores.emplace(in_, b, row->h, row->r, row->nk);
        return *scores;
      };
      if (!row->enclosures.contains(p)) {  // both usual precisions at once, a ladder's alone
        const KeyValues w_values = exact_key_values(exact_copies(w_of(*row)));
        for (const mpfr_prec_t precision : {kFirstBits, kSecondBits, p}) {
          const auto [it, made] = row->enclosures.try_emplace(precision, precision);
          if (!made) continue;
          row_scores().enclose_lse(precision, it->second.lse_lo.v, it->second.lse_hi.v);
          row_scores().enclose_mean(w_values, precision, it->second.delta_lo.v, it->second.delta_hi.v);
        }
      }
      const KeyRows::Enclosure& e = row->enclosures.at(p);
      const Mp dot = exact_dot(in_.q.row(b, row->h, row->r), k_j, D);
      multiply_by_nonnegative(score_lo.v, score_hi.v, dot.v, dot.v, s_lo.v, s_hi.v);
      rf.p_lo.emplace_back(p);
      rf.p_hi.emplace_back(p);
      mpfr_sub(x.v, score_lo.v, e.lse_hi.v, MPFR_RNDD);
      mpfr_exp(rf.p_lo.back().v, x.v, MPFR_RNDD);
      mpfr_sub(x.v, score_hi.v, e.lse_lo.v, MPFR_RNDU);
      mpfr_exp(rf.p_hi.back().v, x.v, MPFR_RNDU);
      rf.t_lo.emplace_back(p);
      rf.t_hi.emplace_back(p);
      if (dk && relative) {
        const std::vector<Mp>& w = w_of(*row);
        std::vector<Mp> differences;  // w_j - w_i, exactly
        differences.reserve(w.size());
        for (const Mp& w_i : w) {
          differences.emplace_back(MPFR_PREC_MIN);
          set_exact_difference(differences.back(), w[static_cast<std::size_t>(j)].v, w_i.v);
        }
        row_scores().enclose_mean(exact_key_values(std::move(differences)), p, rf.t_lo.back().v, rf.t_hi.back().v);
      } else if (dk) {
        const Mp& w = w_of(*row)[static_cast<std::size_t>(j)];
        mpfr_sub(rf.t_lo.back().v, w.v, e.delta_hi.v, MPFR_RNDD);
        mpfr_sub(rf.t_hi.back().v, w.v, e.delta_lo.v, MPFR_RNDU);
      }
    }
    return rf;
  };
  bool too_many_products = false;
  for (const int c : undecided) {
    // The rows whose term is exactly 0 leave the sum: dO_c = 0 (dV); q_c = 0 or every
    // dP - delta 0 (dK).
    std::vector<std::size_t> terms;
    for (std::size_t i = 0; i < seeing.size(); ++i) {
      const KeyRows::Row& row = *seeing[i];
      const double factor = dk ? in_.q.at(b, row.h, row.r, c) : in_.d_o->at(b, row.h, row.r, c);
      // A row with one w for every key has every dP - delta exactly 0.
      if (factor == 0.0 || (dk && uniform(w_of(*seeing[i])))) continue;
      terms.push_back(i);
    }
    if (terms.empty()) {
      out[static_cast<std::size_t>(c)] = RoundPackInput{};
      continue;
    }
    auto factor_of = [&](std::size_t i) {
      const KeyRows::Row& row = *seeing[i];
      return dk ? in_.q.at(b, row.h, row.r, c) : in_.d_o->at(b, row.h, row.r, c);
    };
    auto enclose_with = [&](bool relative, mpfr_prec_t p, mpfr_t lo, mpfr_t hi) {
      const RowFactors& rf = row_factors(p, relative);
      Mp t_lo(p), t_hi(p), term_lo(p), term_hi(p), s_lo(p), s_hi(p);
      mpfr_set_zero(lo, 1);
      mpfr_set_zero(hi, 1);
      for (const std::size_t i : terms) {
        if (dk) {  // P (w - delta)
          multiply_by_nonnegative(t_lo.v, t_hi.v, rf.t_lo[i].v, rf.t_hi[i].v, rf.p_lo[i].v, rf.p_hi[i].v);
        } else {
          mpfr_set(t_lo.v, rf.p_lo[i].v, MPFR_RNDD);
          mpfr_set(t_hi.v, rf.p_hi[i].v, MPFR_RNDU);
        }
        const double factor = factor_of(i);  // times q_c (dK) or dO_c (dV)
        mpfr_mul_d(term_lo.v, factor > 0 ? t_lo.v : t_hi.v, factor, MPFR_RNDD);
        mpfr_mul_d(term_hi.v, factor > 0 ? t_hi.v : t_lo.v, factor, MPFR_RNDU);
        mpfr_add(lo, lo, term_lo.v, MPFR_RNDD);
        mpfr_add(hi, hi, term_hi.v, MPFR_RNDU);
      }
      if (dk) {
        enclose_scale(in_, p, s_lo.v, s_hi.v);
        mpfr_set(t_lo.v, lo, MPFR_RNDD);
        mpfr_set(t_hi.v, hi, MPFR_RNDU);
        multiply_by_nonnegative(lo, hi, t_lo.v, t_hi.v, s_lo.v, s_hi.v);
      }
    };
    const Enclose enclose = [&](mpfr_prec_t p, mpfr_t lo, mpfr_t hi) { enclose_with(false, p, lo, hi); };
    const Enclose enclose_relative = [&](mpfr_prec_t p, mpfr_t lo, mpfr_t hi) { enclose_with(true, p, lo, hi); };
    // X / Y: the rows' terms over a common denominator, rows of equal l sharing theirs.
    std::optional<std::pair<ExpSum, ExpSum>> ratio;
    auto compare = [&](const mpfr_t beta) {
      // The products' count depends on the rows' denominators, not on the column: once too
      // many for one column of this key, for all of them (each attempt is costly).
      if (too_many_products) throw too_many_terms(dk ? "dK" : "dV", b, hk, j, c);
      if (!ratio) {
        try {
          const Mp zero = exact_value(0.0), one = exact_value(1.0);
          std::vector<std::pair<const ExpSum*, ExpSum>> classes;  // (l, sum of the numerators)
          for (const std::size_t i : terms) {
            KeyRows::Row& row = *seeing[i];
            if (!row.exact) row.exact = exact_row(in_, b, row.h, row.r, w_of(row));
            const ExactRow& er = *row.exact;
            const Mp factor = exact_value(factor_of(i));
            const mpfr_srcptr d_j = er.dots[static_cast<std::size_t>(j)].v;
            ExpSum numerator;  // dV: dO_c e^(scale d_j); dK: q_c e^(scale d_j) (w_j l - weighted)
            if (dk) {
              const Mp qw = exact_product(factor.v, w_of(row)[static_cast<std::size_t>(j)].v);
              Mp minus_q(53);
              mpfr_neg(minus_q.v, factor.v, MPFR_RNDN);
              numerator.add_shifted(er.l, d_j, qw.v);
              numerator.add_shifted(er.weighted, d_j, minus_q.v);
            } else {
              numerator.add(d_j, factor.v);
            }
            const auto same =
                std::find_if(classes.begin(), classes.end(), [&](const auto& cls) { return *cls.first == er.l; });
            if (same == classes.end())
              classes.emplace_back(&er.l, std::move(numerator));
            else
              same->second.add_shifted(numerator, zero.v, one.v);
          }
          ExpSum x, y = one_term(zero.v, one.v);  // x / y += numerator / denominator, class by class
          for (const auto& [l, numerator] : classes) {
            const ExpSum denominator = dk ? l->times(*l) : l->times(one_term(zero.v, one.v));
            ExpSum next_x = x.times(denominator);
            next_x.add_shifted(numerator.times(y), zero.v, one.v);
            y = y.times(denominator);
            x = std::move(next_x);
          }
          ratio.emplace(std::move(x), std::move(y));
        } catch (const TooManyTerms&) {
          too_many_products = true;
          throw too_many_terms(dk ? "dK" : "dV", b, hk, j, c);
        }
      }
      return sign_of_difference(in_, ratio->first, ratio->second, beta, dk);
    };
    out[static_cast<std::size_t>(c)] = decide(f, spec, first_position + static_cast<std::uint64_t>(c), enclose, compare,
                                              dk ? &enclose_relative : nullptr);
  }
  return out;
}

}  // namespace fb::attn
