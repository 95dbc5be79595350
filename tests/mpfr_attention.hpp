// tests/mpfr_attention.hpp: attention's mathematics in MPFR at 1024 bits, written from the
// definitions, as the independent reference of the engine's exact paths
// (tests/test_attention_exact.cpp, tests/test_attention_lengths.cpp):
//   S = scale·QKᵀ over the keys a row sees, O = softmax(S)V, LSE = m + log Σ exp(S - m),
//   delta = Σ dO∘O, dS = P∘(dP - delta), dQ = scale·dS K, dK = scale·dSᵀQ, dV = PᵀdO.
//
// Contract:
// - Mp: one 1024-bit MPFR value (round to nearest in every operation), with + - * / and
//   mp_exp / mp_log. 1024 bits put the reference's own error ~290 orders below a double
//   ulp, and hold the e^-200 (2^-289) by which the `ties` scenario's far keys move O.
// - mpfr_attention(in, visible_keys) computes batch 0, head 0 of `in` (which must carry dO):
//   row r sees keys [0, visible_keys(r)). A row that sees none gets O = delta = dQ = 0 and
//   lse_infinite[r] = true (every model's all-masked guards); its lse entry is 0.
// - check_close(got, want, infinite, what): every element of `got` within 1e-15 (relative,
//   absolute below 1) of `want`, or +inf where `infinite` is set (empty: nowhere).
// - check_all_close(got, want): check_close on O, LSE (+inf where want.lse_infinite), delta,
//   dQ, dK and dV of a run with a backward.
#pragma once

#include <doctest/doctest.h>
#include <mpfr.h>

#include <cmath>
#include <limits>
#include <vector>

#include "attention/attention.hpp"

namespace fb::test {

inline constexpr mpfr_prec_t kMpPrec = 1024;

struct Mp {
  mpfr_t v;
  Mp() { mpfr_init2(v, kMpPrec), mpfr_set_zero(v, 1); }
  explicit Mp(double x) { mpfr_init2(v, kMpPrec), mpfr_set_d(v, x, MPFR_RNDN); }
  Mp(const Mp& o) { mpfr_init2(v, kMpPrec), mpfr_set(v, o.v, MPFR_RNDN); }
  Mp& operator=(const Mp& o) {
    mpfr_set(v, o.v, MPFR_RNDN);
    return *this;
  }
  ~Mp() { mpfr_clear(v); }
  double d() const { return mpfr_get_d(v, MPFR_RNDN); }
};

inline Mp mp_binary(const Mp& a, const Mp& b, int (*f)(mpfr_ptr, mpfr_srcptr, mpfr_srcptr, mpfr_rnd_t)) {
  Mp r;
  f(r.v, a.v, b.v, MPFR_RNDN);
  return r;
}
inline Mp operator+(const Mp& a, const Mp& b) { return mp_binary(a, b, mpfr_add); }
inline Mp operator-(const Mp& a, const Mp& b) { return mp_binary(a, b, mpfr_sub); }
inline Mp operator*(const Mp& a, const Mp& b) { return mp_binary(a, b, mpfr_mul); }
inline Mp operator/(const Mp& a, const Mp& b) { return mp_binary(a, b, mpfr_div); }
inline Mp mp_exp(const Mp& a) {
  Mp r;
  mpfr_exp(r.v, a.v, MPFR_RNDN);
  return r;
}
inline Mp mp_log(const Mp& a) {
  Mp r;
  mpfr_log(r.v, a.v, MPFR_RNDN);
  return r;
}

// One head's outputs, row-major: o, dq [N·d]; dk, dv [Nk·d]; lse, delta [N].
struct MpAttention {
  std::vector<Mp> o, lse, delta, dq, dk, dv;
  std::vector<bool> lse_infinite;
};

template <class VisibleKeys>
MpAttention mpfr_attention(const attn::AttentionInputs& in, VisibleKeys visible_keys) {
  const int n = in.q.rows, nk = in.k.rows, d = in.q.cols;
  REQUIRE(in.d_o.has_value());
  const Mp scale(in.softmax_scale);
  MpAttention out;
  out.o.resize(n * d), out.lse.resize(n), out.delta.resize(n), out.dq.resize(n * d);
  out.dk.resize(nk * d), out.dv.resize(nk * d);
  out.lse_infinite.assign(n, false);
  for (int r = 0; r < n; ++r) {
    const int visible = visible_keys(r);
    if (visible == 0) {
      out.lse_infinite[r] = true;  // O, delta, dQ stay 0
      continue;
    }
    std::vector<Mp> s(visible);
    Mp m;
    for (int j = 0; j < visible; ++j) {
      Mp acc;
      for (int c = 0; c < d; ++c) acc = acc + Mp(in.q.at(0, 0, r, c)) * Mp(in.k.at(0, 0, j, c));
      s[j] = acc * scale;
      if (j == 0 || mpfr_greater_p(s[j].v, m.v)) m = s[j];
    }
    Mp l;
    for (int j = 0; j < visible; ++j) l = l + mp_exp(s[j] - m);
    out.lse[r] = m + mp_log(l);
    for (int c = 0; c < d; ++c) {
      Mp acc;
      for (int j = 0; j < visible; ++j) acc = acc + mp_exp(s[j] - m) * Mp(in.v.at(0, 0, j, c));
      out.o[r * d + c] = acc / l;
      out.delta[r] = out.delta[r] + Mp(in.d_o->at(0, 0, r, c)) * out.o[r * d + c];
    }
    for (int j = 0; j < visible; ++j) {
      const Mp p = mp_exp(s[j] - out.lse[r]);
      Mp dp;
      for (int c = 0; c < d; ++c) dp = dp + Mp(in.d_o->at(0, 0, r, c)) * Mp(in.v.at(0, 0, j, c));
      const Mp ds = p * (dp - out.delta[r]);
      for (int c = 0; c < d; ++c) {
        out.dq[r * d + c] = out.dq[r * d + c] + scale * ds * Mp(in.k.at(0, 0, j, c));
        out.dk[j * d + c] = out.dk[j * d + c] + scale * ds * Mp(in.q.at(0, 0, r, c));
        out.dv[j * d + c] = out.dv[j * d + c] + p * Mp(in.d_o->at(0, 0, r, c));
      }
    }
  }
  return out;
}

inline void check_close(const attn::Tensor4& got, const std::vector<Mp>& want, const std::vector<bool>& infinite,
                        const char* what) {
  CAPTURE(what);
  REQUIRE(got.data.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    if (!infinite.empty() && infinite[i]) {
      CHECK(got.data[i] == std::numeric_limits<double>::infinity());
      continue;
    }
    const double w = want[i].d();
    CHECK(std::fabs(got.data[i] - w) <= 1e-15 * std::max(1.0, std::fabs(w)));
  }
}

inline void check_all_close(const attn::AttentionOutputs& got, const MpAttention& want) {
  check_close(got.o, want.o, {}, "O");
  check_close(got.lse, want.lse, want.lse_infinite, "LSE");
  REQUIRE((got.delta && got.dq && got.dk && got.dv));
  check_close(*got.delta, want.delta, {}, "delta");
  check_close(*got.dq, want.dq, {}, "dQ");
  check_close(*got.dk, want.dk, {}, "dK");
  check_close(*got.dv, want.dv, {}, "dV");
}

}  // namespace fb::test
