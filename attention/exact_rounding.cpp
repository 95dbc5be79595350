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
  const Mp& dot(int j);
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

void RowScores::scale_interval(mpfr_prec_t p, mpfr_t lo, mpfr_t hi) const {
  if (in_.softmax_scale > 0) {  // a double: exact
    mpfr_set_d(lo, in_.softmax_scale, MPFR_RNDN);
    mpfr_set_d(hi, in_.softmax_scale, MPFR_RNDN);
    return;
  }
  Mp root(p);  // 1/sqrt(d), as exact_attention takes the default
  mpfr_sqrt_ui(root.v, static_cast<unsigned long>(d_), MPFR_RNDU);
  mpfr_ui_div(lo, 1, root.v, MPFR_RNDD);
  mpfr_sqrt_ui(root.v, static_cast<unsigned long>(d_), MPFR_RNDD);
  mpfr_ui_div(hi, 1, root.v, MPFR_RNDU);
}

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
  if (in_.softmax_scale > 0) {  // scale * dot, exactly
    Mp score(mpfr_get_prec(dot_value.v) + 53);
    mpfr_mul_d(score.v, dot_value.v, in_.softmax_scale, MPFR_RNDN);
    return mpfr_equal_p(score.v, beta) != 0;
  }
  // dot / sqrt(d): rational only when d is a square (or dot is 0).
  const auto root = static_cast<long>(std::llround(std::sqrt(static_cast<double>(d_))));
  if (root * root == d_) {
    Mp scaled(mpfr_get_prec(beta) + 64);
    mpfr_mul_si(scaled.v, beta, root, MPFR_RNDN);
    return mpfr_equal_p(scaled.v, dot_value.v) != 0;
  }
  return mpfr_zero_p(dot_value.v) && mpfr_zero_p(beta);
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

RoundPackInput decide(const Format& f, const RoundingSpec& spec, std::uint64_t position, const Enclose& enclose,
                      const Compare& compare) {
  Mp lo(kFirstBits), hi(kFirstBits);
  for (const mpfr_prec_t p : {kFirstBits, kSecondBits}) {
    mpfr_set_prec(lo.v, p);
    mpfr_set_prec(hi.v, p);
    enclose(p, lo.v, hi.v);
    const RoundPackInput x = from_mpfr(lo.v);
    if (decided_by(f, x, from_mpfr(hi.v), lo.v, hi.v, spec, position)) return x;
  }
  return locate(f, spec, lo.v, hi.v, compare);
}

// Whether both ends of [approx - bound, approx + bound] round alike.
bool double_decides(const Format& f, double approx, double bound, const RoundingSpec& spec, std::uint64_t position) {
  if (!(bound < std::numeric_limits<double>::infinity())) return false;
  return round_double(f, approx - bound, spec, position).bits == round_double(f, approx + bound, spec, position).bits;
}

// MPFR keeps per-thread caches (constants such as log 2 for exp); the engine's worker threads
// end after the run, so they are freed before returning.
struct FreeMpfrCaches {
  ~FreeMpfrCaches() { mpfr_free_cache2(MPFR_FREE_LOCAL_CACHE); }
};

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
double ExactRounding::mean_error_bound(int b, int h, int r) const {
  const double s =
      exact_.row_score_magnitude ? exact_.row_score_magnitude->at(b, h, r, 0) : std::numeric_limits<double>::infinity();
  const double d = in_.q.cols, nk = visible_keys(r);
  const double bound = std::ldexp(17.0 * (d + 4) * s + 12.0 * nk + 24.0, -64);
  return bound < 0x1p-10 ? bound : std::numeric_limits<double>::infinity();
}

std::vector<std::optional<RoundPackInput>> ExactRounding::o_row(int b, int h, int r, const Format& f,
                                                                const RoundingSpec& spec,
                                                                std::uint64_t first_position) const {
  const int D = in_.v.cols;
  std::vector<std::optional<RoundPackInput>> out(static_cast<std::size_t>(D));
  const int nk = visible_keys(r);
  if (nk == 0) return out;  // no key: O is exactly 0
  const double error = mean_error_bound(b, h, r);
  const double* v_max = column_abs_max(b, h);
  std::vector<int> undecided;
  for (int c = 0; c < D; ++c) {
    const double approx = exact_.o.at(b, h, r, c);
    const double bound = v_max[c] * error + std::ldexp(std::fabs(approx), -52);
    if (!double_decides(f, approx, bound, spec, first_position + static_cast<std::uint64_t>(c))) undecided.push_back(c);
  }
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
  const double bound = scale * (mean_error_bound(b, h, r) + std::ldexp(4.0 * (D + 1), -64)) * (1 + 0x1p-40) +
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
  const double bound = mean_error_bound(b, h, r) + std::ldexp(std::fabs(approx), -51);
  if (double_decides(f, approx, bound, spec, position)) return std::nullopt;
  const FreeMpfrCaches free_caches_on_return;
  if (!inputs_finite(b, h, r, nk, false)) return std::nullopt;
  RowScores scores(in_, b, h, r, nk);
  return decide(
      f, spec, position, [&](mpfr_prec_t p, mpfr_t lo, mpfr_t hi) { scores.enclose_lse(p, lo, hi); },
      [&](const mpfr_t beta) { return scores.compare_lse(beta); });
}

}  // namespace fb::attn
