// tests/test_attention_exact.cpp: exact_attention() (long double, attention/exact.cpp)
// against the same mathematics in MPFR at 256 bits, written here from the definitions:
// S = scale·QKᵀ, O = softmax(S)V, LSE = m + log Σ exp(S - m), delta = Σ dO∘O,
// dS = P∘(dP - delta), dQ = scale·dS K, dK = scale·dSᵀQ, dV = PᵀdO. The reference must
// agree to ~1e-15 (its output is a double), far inside the 1e-12 the model tests use and
// 11+ orders below a bf16/fp16 ulp. The model `correctly-rounded` (the reference every
// bias verdict subtracts) is checked bit for bit against MPFR's values rounded once.
#include <doctest/doctest.h>
#include <mpfr.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "attention/attention.hpp"
#include "studies/scenarios.hpp"

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
Mp operator+(const Mp& a, const Mp& b) {
  Mp r;
  mpfr_add(r.v, a.v, b.v, MPFR_RNDN);
  return r;
}
Mp operator-(const Mp& a, const Mp& b) {
  Mp r;
  mpfr_sub(r.v, a.v, b.v, MPFR_RNDN);
  return r;
}
Mp operator*(const Mp& a, const Mp& b) {
  Mp r;
  mpfr_mul(r.v, a.v, b.v, MPFR_RNDN);
  return r;
}
Mp operator/(const Mp& a, const Mp& b) {
  Mp r;
  mpfr_div(r.v, a.v, b.v, MPFR_RNDN);
  return r;
}
Mp mp_exp(const Mp& a) {
  Mp r;
  mpfr_exp(r.v, a.v, MPFR_RNDN);
  return r;
}
Mp mp_log(const Mp& a) {
  Mp r;
  mpfr_log(r.v, a.v, MPFR_RNDN);
  return r;
}

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

namespace {

// x rounded once to a p-bit significand in MPFR rounding mode `rnd` (values here are normal
// in the target format, so the significand width is the only limit), as a double.
double mp_round(const Mp& x, mpfr_prec_t p, mpfr_rnd_t rnd) {
  mpfr_t r;
  mpfr_init2(r, p);
  mpfr_set(r, x.v, rnd);
  const double d = mpfr_get_d(r, MPFR_RNDN);  // exact: p <= 53
  mpfr_clear(r);
  return d;
}

}  // namespace

TEST_CASE("correctly-rounded equals MPFR's exact outputs rounded once, in rne, rtz, rup and rdn") {
  // The reference model (attention.hpp round_exact_outputs), checked bit for bit against
  // MPFR at 256 bits computed from the definitions above: O, dQ, dK, dV rounded once to bf16
  // (8 significant bits), LSE to fp32 (24), and delta = Σ dO·O_cr of the ROUNDED O, summed
  // exactly and rounded once to fp32, each in the final cast's mode (+o-MODE).
  const std::pair<const char*, mpfr_rnd_t> modes[] = {
      {"", MPFR_RNDN}, {"+o-rtz", MPFR_RNDZ}, {"+o-rup", MPFR_RNDU}, {"+o-rdn", MPFR_RNDD}};
  int inexact = 0, compared = 0;
  for (const char* scenario : {"random", "sink"}) {
    for (bool causal : {false, true}) {
      AttentionInputs in = make_scenario(scenario, 78, 1, 1, 9, 8, formats::bf16, true);
      in.causal = causal;
      const int n = 9, d = 8;
      const Mp scale(in.softmax_scale);
      std::vector<Mp> o(n * d), lse(n), dq(n * d), dk(n * d), dv(n * d);
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
        Mp delta;
        for (int c = 0; c < d; ++c) {
          Mp acc;
          for (int j = 0; j < nk; ++j) acc = acc + mp_exp(s[j] - m) * Mp(in.v.at(0, 0, j, c));
          o[r * d + c] = acc / l;
          delta = delta + Mp(in.d_o->at(0, 0, r, c)) * o[r * d + c];
        }
        for (int j = 0; j < nk; ++j) {
          const Mp p = mp_exp(s[j] - lse[r]);
          Mp dp;
          for (int c = 0; c < d; ++c) dp = dp + Mp(in.d_o->at(0, 0, r, c)) * Mp(in.v.at(0, 0, j, c));
          const Mp ds = p * (dp - delta);
          for (int c = 0; c < d; ++c) {
            dq[r * d + c] = dq[r * d + c] + scale * ds * Mp(in.k.at(0, 0, j, c));
            dk[j * d + c] = dk[j * d + c] + scale * ds * Mp(in.q.at(0, 0, r, c));
            dv[j * d + c] = dv[j * d + c] + p * Mp(in.d_o->at(0, 0, r, c));
          }
        }
      }
      for (const auto& mode : modes) {
        // Named variables, not structured bindings: clang before 16 cannot capture bindings.
        const char* const suffix = mode.first;
        const mpfr_rnd_t rnd = mode.second;
        const std::string name = std::string("correctly-rounded") + suffix;
        CAPTURE(name);
        CAPTURE(scenario);
        CAPTURE(causal);
        const AttentionOutputs got = run_attention(parse_kernel_model(name, formats::bf16), in, RunOptions{});
        auto check_tensor = [&](const Tensor4& t, const std::vector<Mp>& want, mpfr_prec_t p, const char* what) {
          CAPTURE(what);
          REQUIRE(t.data.size() == want.size());
          for (std::size_t i = 0; i < want.size(); ++i) {
            CAPTURE(i);
            const double w = mp_round(want[i], p, rnd);
            CHECK(t.data[i] == w);
            inexact += w != want[i].d() ? 1 : 0;
            ++compared;
          }
        };
        check_tensor(got.o, o, 8, "O");
        check_tensor(got.lse, lse, 24, "LSE");
        check_tensor(*got.dq, dq, 8, "dQ");
        check_tensor(*got.dk, dk, 8, "dK");
        check_tensor(*got.dv, dv, 8, "dV");
        // delta from the rounded O (MPFR's), exactly, then one rounding to fp32.
        std::vector<Mp> delta_cr(n);
        for (int r = 0; r < n; ++r)
          for (int c = 0; c < d; ++c)
            delta_cr[r] = delta_cr[r] + Mp(in.d_o->at(0, 0, r, c)) * Mp(mp_round(o[r * d + c], 8, rnd));
        check_tensor(*got.delta, delta_cr, 24, "delta");
      }
    }
  }
  CHECK(inexact > compared / 2);  // the roundings are real: most outputs are not representable
}
