// tests/test_attention_exact.cpp: exact_attention() (long double, attention/exact.cpp)
// against the same mathematics in MPFR at 256 bits, written here from the definitions:
// S = scale·QKᵀ, O = softmax(S)V, LSE = m + log Σ exp(S - m), delta = Σ dO∘O,
// dS = P∘(dP - delta), dQ = scale·dS K, dK = scale·dSᵀQ, dV = PᵀdO. The reference must
// agree to ~1e-15 (its output is a double), far inside the 1e-12 the model tests use and
// 11+ orders below a bf16/fp16 ulp.
#include <doctest/doctest.h>
#include <mpfr.h>

#include <cmath>
#include <vector>

#include "attention/attention.hpp"

using namespace fb;
using namespace fb::attn;

namespace {

constexpr mpfr_prec_t kPrec = 256;

struct Mp {
  mpfr_t v;
  Mp() { mpfr_init2(v, kPrec), mpfr_set_zero(v, 1); }
  explicit Mp(double x) { mpfr_init2(v, kPrec), mpfr_set_d(v, x, MPFR_RNDN); }
  Mp(const Mp& o) { mpfr_init2(v, kPrec), mpfr_set(v, o.v, MPFR_RNDN); }
  Mp& operator=(const Mp& o) {
    mpfr_set(v, o.v, MPFR_RNDN);
    return *this;
  }
  ~Mp() { mpfr_clear(v); }
  double d() const { return mpfr_get_d(v, MPFR_RNDN); }
};
Mp operator+(const Mp& a, const Mp& b) { Mp r; mpfr_add(r.v, a.v, b.v, MPFR_RNDN); return r; }
Mp operator-(const Mp& a, const Mp& b) { Mp r; mpfr_sub(r.v, a.v, b.v, MPFR_RNDN); return r; }
Mp operator*(const Mp& a, const Mp& b) { Mp r; mpfr_mul(r.v, a.v, b.v, MPFR_RNDN); return r; }
Mp operator/(const Mp& a, const Mp& b) { Mp r; mpfr_div(r.v, a.v, b.v, MPFR_RNDN); return r; }
Mp mp_exp(const Mp& a) { Mp r; mpfr_exp(r.v, a.v, MPFR_RNDN); return r; }
Mp mp_log(const Mp& a) { Mp r; mpfr_log(r.v, a.v, MPFR_RNDN); return r; }

void check_close(const Tensor4& got, const std::vector<Mp>& want, const char* what) {
  CAPTURE(what);
  REQUIRE(got.data.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double w = want[i].d();
    CAPTURE(i);
    CHECK(std::fabs(got.data[i] - w) <= 1e-15 * std::max(1.0, std::fabs(w)));
  }
}

}  // namespace

TEST_CASE("exact_attention agrees with MPFR at 256 bits: O, LSE, delta, dQ, dK, dV") {
  for (const char* scenario : {"random", "fa3-outliers", "sink"}) {
    for (bool causal : {false, true}) {
      CAPTURE(scenario);
      CAPTURE(causal);
      AttentionInputs in = make_scenario(scenario, 77, 1, 1, 11, 8, formats::bf16, true);
      in.causal = causal;
      const int n = 11, d = 8;
      const AttentionOutputs got = exact_attention(in);
      const Mp scale(in.softmax_scale);
      std::vector<Mp> o(n * d), lse(n), delta(n), dq(n * d), dk(n * d), dv(n * d);
      for (int r = 0; r < n; ++r) {
        const int nk = causal ? r + 1 : n;
        std::vector<Mp> s(nk);
        Mp m;
        for (int j = 0; j < nk; ++j) {
          Mp acc;
          for (int c = 0; c < d; ++c) acc = acc + Mp(in.q.at(0, 0, r, c)) * Mp(in.k.at(0, 0, j, c));
          s[j] = acc * scale;
          if (j == 0 || mpfr_greater_p(s[j].v, m.v)) m = s[j];
        }
        Mp l;
        for (int j = 0; j < nk; ++j) l = l + mp_exp(s[j] - m);
        lse[r] = m + mp_log(l);
        for (int c = 0; c < d; ++c) {
          Mp acc;
          for (int j = 0; j < nk; ++j) acc = acc + mp_exp(s[j] - m) * Mp(in.v.at(0, 0, j, c));
          o[r * d + c] = acc / l;
          delta[r] = delta[r] + Mp(in.d_o->at(0, 0, r, c)) * o[r * d + c];
        }
        for (int j = 0; j < nk; ++j) {
          const Mp p = mp_exp(s[j] - lse[r]);
          Mp dp;
          for (int c = 0; c < d; ++c) dp = dp + Mp(in.d_o->at(0, 0, r, c)) * Mp(in.v.at(0, 0, j, c));
          const Mp ds = p * (dp - delta[r]);
          for (int c = 0; c < d; ++c) {
            dq[r * d + c] = dq[r * d + c] + scale * ds * Mp(in.k.at(0, 0, j, c));
            dk[j * d + c] = dk[j * d + c] + scale * ds * Mp(in.q.at(0, 0, r, c));
            dv[j * d + c] = dv[j * d + c] + p * Mp(in.d_o->at(0, 0, r, c));
          }
        }
      }
      check_close(got.o, o, "O");
      check_close(got.lse, lse, "LSE");
      check_close(*got.delta, delta, "delta");
      check_close(*got.dq, dq, "dQ");
      check_close(*got.dk, dk, "dK");
      check_close(*got.dv, dv, "dV");
    }
  }
}
