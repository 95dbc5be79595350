// attention/exact_o_rounding.cpp: see the contract in exact_o_rounding.hpp.
#include "attention/exact_o_rounding.hpp"

#include <gmp.h>
#include <mpfr.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <stdexcept>
#include <string>

#include "emu/ops.hpp"

namespace fb::attn {
namespace {

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
// Exact sums of up to 2^31 doubles: their exponents span 1023 + 1074 + 53 bits.
constexpr mpfr_prec_t kSumBits = 2200 + 64;
constexpr mpfr_prec_t kLastBits = mpfr_prec_t{1} << 16;

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

}  // namespace

Rounded round_pack_input(const Format& f, const RoundPackInput& x, const RoundingSpec& spec, std::uint64_t position,
                         RoundingEvent* event) {
  if (x.significand == 0) return round_double(f, x.negative ? -0.0 : 0.0, spec, position, event);
  return round_pack(f, x.negative, x.exponent, x.significand, x.sticky, spec, position, event);
}

ExactORounding::ExactORounding(const AttentionInputs& in, const AttentionOutputs& exact) : in_(in), exact_(exact) {
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

std::vector<std::optional<RoundPackInput>> ExactORounding::row_round_inputs(int b, int h, int r, const Format& f,
                                                                            const RoundingSpec& spec,
                                                                            std::uint64_t first_position) const {
  const int D = in_.v.cols, N = in_.q.rows, Nk = in_.k.rows, Hk = in_.k.heads;
  const int group = Hk > 0 ? in_.q.heads / Hk : 1;
  const int hk = h / group;
  std::vector<std::optional<RoundPackInput>> out(static_cast<std::size_t>(D));
  const int offset = in_.causal_alignment == AttentionInputs::CausalAlignment::top_left ? 0 : Nk - N;
  const int nk = in_.causal ? std::clamp(r + 1 + offset, 0, Nk) : Nk;
  if (nk == 0) return out;  // no key: O is exactly 0

  // exact_attention's O is accurate to ~(d + |m|) * 2^-64 of the scale sum_j P_j |V_jc| <=
  // max |V_c| (exact.cpp); this bound is 2^16 times wider, plus the double's half ulp.
  const double row_max = exact_.row_max ? std::fabs(exact_.row_max->at(b, h, r, 0)) : 0.0;
  const double* v_max = &v_abs_max_[(static_cast<std::size_t>(b) * Hk + hk) * D];
  std::vector<int> undecided;
  for (int c = 0; c < D; ++c) {
    const double approx = exact_.o.at(b, h, r, c);
    const double bound =
        std::ldexp(v_max[c], -40) * (1.0 + std::ldexp(row_max, -18)) + std::ldexp(std::fabs(approx), -52);
    const std::uint64_t position = first_position + static_cast<std::uint64_t>(c);
    if (round_double(f, approx - bound, spec, position).bits != round_double(f, approx + bound, spec, position).bits)
      undecided.push_back(c);
  }
  if (undecided.empty()) return out;
  // MPFR keeps per-thread caches (constants such as log 2 for exp); the engine's worker
  // threads end after the run, so free them here rather than leak them with the thread.
  struct FreeMpfrCaches {
    ~FreeMpfrCaches() { mpfr_free_cache2(MPFR_FREE_LOCAL_CACHE); }
  } free_caches_on_return;
  // Infinite scores (an infinite q or k entry) are outside this argument; such rows keep
  // exact_attention's value, as documented in the header.
  const double* q = in_.q.row(b, h, r);
  for (int c = 0; c < D; ++c)
    if (!std::isfinite(q[c])) return out;
  for (int j = 0; j < nk; ++j)
    for (int c = 0; c < D; ++c)
      if (!std::isfinite(in_.k.row(b, hk, j)[c]) || !std::isfinite(in_.v.row(b, hk, j)[c])) return out;

  // Scores up to the common scale: q.k per visible key, first in long double with an error
  // bound, which sorts the keys into a head (within e^-50 of the max weight) and a tail.
  const long double scale_ld = in_.softmax_scale > 0 ? static_cast<long double>(in_.softmax_scale)
                                                     : 1.0L / std::sqrt(static_cast<long double>(D));
  std::vector<long double> dot_ld(static_cast<std::size_t>(nk)), dot_err(static_cast<std::size_t>(nk));
  int top_ld = 0;
  for (int j = 0; j < nk; ++j) {
    const double* k = in_.k.row(b, hk, j);
    long double sum = 0.0L, magnitude = 0.0L;
    for (int c = 0; c < D; ++c) {
      const long double product = static_cast<long double>(q[c]) * k[c];
      sum += product;
      magnitude += std::fabs(product);
    }
    const auto at = static_cast<std::size_t>(j);
    dot_ld[at] = sum;
    dot_err[at] = static_cast<long double>(D + 2) * std::ldexp(1.0L, -63) * magnitude;  // products exact or 2^-64
    if (sum > dot_ld[static_cast<std::size_t>(top_ld)]) top_ld = j;
  }
  std::vector<int> head;
  for (int j = 0; j < nk; ++j)
    if (scale_ld * (dot_ld[static_cast<std::size_t>(j)] - dot_ld[static_cast<std::size_t>(top_ld)]) >= -50.0L)
      head.push_back(j);

  // Exact scores where exactness matters: sums of products of two doubles (floats, for every
  // format here), in just enough bits for the products' exponent span.
  int highest = INT_MIN, lowest = INT_MAX;
  for (int j = 0; j < nk; ++j) {
    const double* k = in_.k.row(b, hk, j);
    for (int c = 0; c < D; ++c)
      if (q[c] != 0.0 && k[c] != 0.0) {
        const int e = std::ilogb(q[c]) + std::ilogb(k[c]);
        highest = std::max(highest, e);
        lowest = std::min(lowest, e);
      }
  }
  const mpfr_prec_t exact_bits =
      highest < lowest ? 64 : static_cast<mpfr_prec_t>(highest - lowest) + 106 + 128;  // carries of < 2^126 terms
  auto exact_dot = [&](int j, Mp& dot) {
    Mp product(exact_bits);
    mpfr_set_zero(dot.v, 1);
    const double* k = in_.k.row(b, hk, j);
    for (int c = 0; c < D; ++c) {
      const bool floats = static_cast<double>(static_cast<float>(q[c])) == q[c] &&
                          static_cast<double>(static_cast<float>(k[c])) == k[c];
      if (floats) {  // the product of two floats is an exact double
        mpfr_add_d(dot.v, dot.v, q[c] * k[c], MPFR_RNDN);
      } else {
        mpfr_set_d(product.v, q[c], MPFR_RNDN);
        mpfr_mul_d(product.v, product.v, k[c], MPFR_RNDN);
        mpfr_add(dot.v, dot.v, product.v, MPFR_RNDN);
      }
    }
  };
  // The head's exact gaps dot_j - dot_max <= 0 (the max key is in the head).
  std::vector<Mp> head_gaps;
  head_gaps.reserve(head.size());
  for (const int j : head) {
    head_gaps.emplace_back(exact_bits + 1);
    exact_dot(j, head_gaps.back());
  }
  Mp top_dot(exact_bits + 1);
  {
    std::size_t top = 0;
    for (std::size_t i = 1; i < head.size(); ++i)
      if (mpfr_cmp(head_gaps[i].v, head_gaps[top].v) > 0) top = i;
    mpfr_set(top_dot.v, head_gaps[top].v, MPFR_RNDN);
    for (Mp& gap : head_gaps) mpfr_sub(gap.v, gap.v, top_dot.v, MPFR_RNDN);
  }

  // The tail's weights in long double, each with a relative error bound: the scores' own
  // bounds, scale, the max's conversion and the subtraction (x's absolute error is w's
  // relative error), and expl's 2^-61; below ~e^-11000 a weight is taken as [0, 2^-15800].
  std::vector<long double> tail_w(static_cast<std::size_t>(nk), 0.0L);
  std::vector<bool> in_tail(static_cast<std::size_t>(nk), true);
  for (const int j : head) in_tail[static_cast<std::size_t>(j)] = false;
  long double tail_eps = 0.0L;
  bool tail_underflow = false;
  {
    const long double top_ld_exact = mpfr_get_ld(top_dot.v, MPFR_RNDN);
    const long double top_err = std::fabs(top_ld_exact) * std::ldexp(1.0L, -63);
    for (int j = 0; j < nk; ++j) {
      const auto at = static_cast<std::size_t>(j);
      if (!in_tail[at]) continue;
      const long double x = scale_ld * (dot_ld[at] - top_ld_exact);
      if (x < -11000.0L) {
        tail_underflow = true;
        continue;
      }
      tail_w[at] = std::exp(x);
      const long double x_err =
          scale_ld * (dot_err[at] + top_err) * (1.0L + std::ldexp(1.0L, -60)) + std::fabs(x) * std::ldexp(1.0L, -61);
      tail_eps = std::max(tail_eps, x_err * 1.01L + std::ldexp(1.0L, -61));
    }
  }
  const long double sum_eps = (tail_eps + static_cast<long double>(nk + 2) * std::ldexp(1.0L, -63)) * 1.01L;
  const long double underflow_w = tail_underflow ? std::ldexp(1.0L, -15800) : 0.0L;

  // Narrow an enclosure of each undecided O until both ends round alike: the head in MPFR
  // at p bits with directed rounding, the tail as a long-double interval.
  auto narrow = [&](mpfr_prec_t p, std::vector<int>& pending) {
    Mp scale_lo(p), scale_hi(p), x(p), t(p), num_lo(p), num_hi(p), den_lo(p), den_hi(p), o_lo(p), o_hi(p);
    if (in_.softmax_scale > 0) {
      mpfr_set_d(scale_lo.v, in_.softmax_scale, MPFR_RNDN);
      mpfr_set_d(scale_hi.v, in_.softmax_scale, MPFR_RNDN);
    } else {  // 1/sqrt(d), as exact_attention takes the default
      mpfr_sqrt_ui(t.v, static_cast<unsigned long>(D), MPFR_RNDU);
      mpfr_ui_div(scale_lo.v, 1, t.v, MPFR_RNDD);
      mpfr_sqrt_ui(t.v, static_cast<unsigned long>(D), MPFR_RNDD);
      mpfr_ui_div(scale_hi.v, 1, t.v, MPFR_RNDU);
    }
    std::vector<Mp> w_lo, w_hi;
    w_lo.reserve(head.size());
    w_hi.reserve(head.size());
    mpfr_set_zero(den_lo.v, 1);
    mpfr_set_zero(den_hi.v, 1);
    for (const Mp& gap : head_gaps) {
      w_lo.emplace_back(p);
      w_hi.emplace_back(p);
      mpfr_mul(x.v, gap.v, scale_hi.v, MPFR_RNDD);  // gap <= 0: the larger scale gives the lower end
      mpfr_exp(w_lo.back().v, x.v, MPFR_RNDD);
      mpfr_mul(x.v, gap.v, scale_lo.v, MPFR_RNDU);
      mpfr_exp(w_hi.back().v, x.v, MPFR_RNDU);
      mpfr_add(den_lo.v, den_lo.v, w_lo.back().v, MPFR_RNDD);
      mpfr_add(den_hi.v, den_hi.v, w_hi.back().v, MPFR_RNDU);
    }
    {
      long double tail_den = 0.0L;
      for (const long double w : tail_w) tail_den += w;
      const long double err = sum_eps * tail_den + static_cast<long double>(nk) * underflow_w;
      mpfr_set_ld(t.v, std::max(0.0L, tail_den - err), MPFR_RNDD);
      mpfr_add(den_lo.v, den_lo.v, t.v, MPFR_RNDD);
      mpfr_set_ld(t.v, tail_den + err, MPFR_RNDU);
      mpfr_add(den_hi.v, den_hi.v, t.v, MPFR_RNDU);
    }
    std::vector<int> still;
    for (const int c : pending) {
      mpfr_set_zero(num_lo.v, 1);
      mpfr_set_zero(num_hi.v, 1);
      for (std::size_t i = 0; i < head.size(); ++i) {
        const double v = in_.v.row(b, hk, head[i])[c];
        mpfr_mul_d(t.v, v >= 0 ? w_lo[i].v : w_hi[i].v, v, MPFR_RNDD);
        mpfr_add(num_lo.v, num_lo.v, t.v, MPFR_RNDD);
        mpfr_mul_d(t.v, v >= 0 ? w_hi[i].v : w_lo[i].v, v, MPFR_RNDU);
        mpfr_add(num_hi.v, num_hi.v, t.v, MPFR_RNDU);
      }
      long double tail_num = 0.0L, tail_abs = 0.0L, tail_v_max = 0.0L;
      for (int j = 0; j < nk; ++j) {
        if (!in_tail[static_cast<std::size_t>(j)]) continue;
        const double v = in_.v.row(b, hk, j)[c];
        const long double term = tail_w[static_cast<std::size_t>(j)] * v;
        tail_num += term;
        tail_abs += std::fabs(term);
        tail_v_max = std::max(tail_v_max, static_cast<long double>(std::fabs(v)));
      }
      const long double err = sum_eps * tail_abs + static_cast<long double>(nk) * underflow_w * tail_v_max;
      mpfr_set_ld(t.v, tail_num - err, MPFR_RNDD);
      mpfr_add(num_lo.v, num_lo.v, t.v, MPFR_RNDD);
      mpfr_set_ld(t.v, tail_num + err, MPFR_RNDU);
      mpfr_add(num_hi.v, num_hi.v, t.v, MPFR_RNDU);
      mpfr_div(o_lo.v, num_lo.v, mpfr_sgn(num_lo.v) >= 0 ? den_hi.v : den_lo.v, MPFR_RNDD);
      mpfr_div(o_hi.v, num_hi.v, mpfr_sgn(num_hi.v) >= 0 ? den_lo.v : den_hi.v, MPFR_RNDU);
      const RoundPackInput lo = from_mpfr(o_lo.v), hi = from_mpfr(o_hi.v);
      const std::uint64_t position = first_position + static_cast<std::uint64_t>(c);
      if (round_pack_input(f, lo, spec, position).bits == round_pack_input(f, hi, spec, position).bits)
        out[static_cast<std::size_t>(c)] = lo;
      else
        still.push_back(c);
    }
    pending = std::move(still);
  };
  std::vector<int> pending = undecided;
  for (mpfr_prec_t p = kFirstBits; p <= kSecondBits && !pending.empty(); p *= 4) narrow(p, pending);
  if (pending.empty()) return out;

  // Still undecided: O may be exactly a boundary. It is rational only if every group of keys
  // with equal scores has the same mean of V_c, and then O is that mean, exactly. (The
  // tail's weights are intervals, so its exact scores are needed here.)
  std::vector<Mp> dots;
  dots.reserve(static_cast<std::size_t>(nk));
  for (int j = 0; j < nk; ++j) {
    dots.emplace_back(exact_bits + 1);
    exact_dot(j, dots.back());
  }
  std::vector<int> order(static_cast<std::size_t>(nk));
  for (int j = 0; j < nk; ++j) order[static_cast<std::size_t>(j)] = j;
  std::sort(order.begin(), order.end(), [&](int x, int y) {
    return mpfr_cmp(dots[static_cast<std::size_t>(x)].v, dots[static_cast<std::size_t>(y)].v) > 0;
  });
  std::vector<int> irrational;
  for (const int c : pending) {
    bool rational = true;
    Mp mean(kSumBits), group_sum(kSumBits), cross(kSumBits), first_sum(kSumBits);
    long first_count = 0;
    for (std::size_t i = 0; i < order.size() && rational;) {
      std::size_t end = i;
      mpfr_set_zero(group_sum.v, 1);
      while (end < order.size() &&
             mpfr_equal_p(dots[static_cast<std::size_t>(order[end])].v, dots[static_cast<std::size_t>(order[i])].v)) {
        mpfr_add_d(group_sum.v, group_sum.v, in_.v.row(b, hk, order[end])[c], MPFR_RNDN);
        ++end;
      }
      const long count = static_cast<long>(end - i);
      if (i == 0) {
        mpfr_set(first_sum.v, group_sum.v, MPFR_RNDN);
        first_count = count;
      } else {  // same mean: group_sum * first_count == first_sum * count, exactly
        mpfr_mul_si(cross.v, group_sum.v, first_count, MPFR_RNDN);
        mpfr_mul_si(mean.v, first_sum.v, count, MPFR_RNDN);
        rational = mpfr_equal_p(cross.v, mean.v) != 0;
      }
      i = end;
    }
    if (rational && mpfr_div_si(mean.v, first_sum.v, first_count, MPFR_RNDN) == 0)
      out[static_cast<std::size_t>(c)] = from_mpfr(mean.v);  // O is this dyadic rational, exactly
    else
      irrational.push_back(c);  // on no boundary (every boundary is dyadic): narrowing ends
  }
  for (mpfr_prec_t p = kSecondBits * 4; p <= kLastBits && !irrational.empty(); p *= 4) narrow(p, irrational);
  if (!irrational.empty())
    throw std::runtime_error("correctly-rounded: O at (" + std::to_string(b) + "," + std::to_string(h) + "," +
                             std::to_string(r) + "," + std::to_string(irrational.front()) +
                             ") is not separated from a rounding boundary at " + std::to_string(kLastBits) + " bits");
  return out;
}

}  // namespace fb::attn
