// tests/test_attention_exact.cpp: exact_attention() (long double, attention/exact.cpp)
// against the same mathematics in MPFR at 1024 bits (tests/mpfr_attention.hpp, from the definitions:
// S = scale·QKᵀ, O = softmax(S)V, LSE = m + log Σ exp(S - m), delta = Σ dO∘O,
// dS = P∘(dP - delta), dQ = scale·dS K, dK = scale·dSᵀQ, dV = PᵀdO). The reference must
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
#include "tests/mpfr_attention.hpp"

using namespace fb;
using namespace fb::attn;

using fb::test::check_close;
using fb::test::Mp;
using fb::test::MpAttention;

TEST_CASE("exact_attention agrees with MPFR at 1024 bits: O, LSE, delta, dQ, dK, dV") {
  for (const char* scenario : {"random", "fa3-outliers", "sink"}) {
    for (bool causal : {false, true}) {
      CAPTURE(scenario);
      CAPTURE(causal);
      AttentionInputs in = make_scenario(scenario, 77, 1, 1, 11, 8, formats::bf16, true);
      in.causal = causal;
      const int n = 11;
      const AttentionOutputs got = exact_attention(in);
      const MpAttention want = fb::test::mpfr_attention(in, [&](int r) { return causal ? r + 1 : n; });
      check_close(got.o, want.o, {}, "O");
      check_close(got.lse, want.lse, {}, "LSE");
      check_close(*got.delta, want.delta, {}, "delta");
      check_close(*got.dq, want.dq, {}, "dQ");
      check_close(*got.dk, want.dk, {}, "dK");
      check_close(*got.dv, want.dv, {}, "dV");
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

// The final cast's modes MPFR has, as model suffixes (+o-MODE) and MPFR rounding modes.
struct ReferenceMode {
  const char* suffix;
  mpfr_rnd_t rnd;
};
constexpr ReferenceMode kReferenceModes[] = {
    {"", MPFR_RNDN}, {"+o-rtz", MPFR_RNDZ}, {"+o-rup", MPFR_RNDU}, {"+o-rdn", MPFR_RNDD}};

}  // namespace

TEST_CASE("correctly-rounded equals MPFR's exact outputs rounded once, in rne, rtz, rup and rdn") {
  // The reference model (attention.hpp round_exact_outputs), checked bit for bit against
  // MPFR at 1024 bits (tests/mpfr_attention.hpp): O, dQ, dK, dV rounded once to bf16
  // (8 significant bits), LSE to fp32 (24), and delta = Σ dO·O_cr of the ROUNDED O, summed
  // exactly and rounded once to fp32, each in the final cast's mode (+o-MODE).
  int inexact = 0, compared = 0;
  for (const char* scenario : {"random", "sink"}) {
    for (bool causal : {false, true}) {
      AttentionInputs in = make_scenario(scenario, 78, 1, 1, 9, 8, formats::bf16, true);
      in.causal = causal;
      const int n = 9, d = 8;
      const MpAttention want = fb::test::mpfr_attention(in, [&](int r) { return causal ? r + 1 : n; });
      for (const ReferenceMode& mode : kReferenceModes) {
        // Named variables, not structured bindings: clang before 16 cannot capture bindings.
        const char* const suffix = mode.suffix;
        const mpfr_rnd_t rnd = mode.rnd;
        const std::string name = std::string("correctly-rounded") + suffix;
        CAPTURE(name);
        CAPTURE(scenario);
        CAPTURE(causal);
        const AttentionOutputs got = run_attention(parse_kernel_model(name, formats::bf16), in, RunOptions{});
        auto check_tensor = [&](const Tensor4& t, const std::vector<Mp>& exact, mpfr_prec_t p, const char* what) {
          CAPTURE(what);
          REQUIRE(t.data.size() == exact.size());
          for (std::size_t i = 0; i < exact.size(); ++i) {
            CAPTURE(i);
            const double w = mp_round(exact[i], p, rnd);
            CHECK(t.data[i] == w);
            inexact += w != exact[i].d() ? 1 : 0;
            ++compared;
          }
        };
        check_tensor(got.o, want.o, 8, "O");
        check_tensor(got.lse, want.lse, 24, "LSE");
        check_tensor(*got.dq, want.dq, 8, "dQ");
        check_tensor(*got.dk, want.dk, 8, "dK");
        check_tensor(*got.dv, want.dv, 8, "dV");
        // delta from the rounded O (MPFR's), exactly, then one rounding to fp32.
        std::vector<Mp> delta_cr(n);
        for (int r = 0; r < n; ++r)
          for (int c = 0; c < d; ++c)
            delta_cr[r] = delta_cr[r] + Mp(in.d_o->at(0, 0, r, c)) * Mp(mp_round(want.o[r * d + c], 8, rnd));
        check_tensor(*got.delta, delta_cr, 24, "delta");
      }
    }
  }
  CHECK(inexact > compared / 2);  // the roundings are real: most outputs are not representable
}

TEST_CASE("correctly-rounded O on the ties scenario: decided exactly where a double cannot") {
  // `ties` puts keys 150-200 below the row max: their weights (<= e^-150 ~ 2^-216) move O off a
  // bf16 value or midpoint by far less than a double resolves, yet decide its rounding. MPFR
  // at 1024 bits holds that offset (tests/mpfr_attention.hpp). O is checked bit for bit in
  // every mode MPFR has, and delta, which the reference sums exactly from the rounded O.
  int beyond_double = 0;
  for (bool causal : {false, true}) {
    AttentionInputs in = make_scenario("ties", 91, 1, 1, 12, 8, formats::bf16, true);
    in.causal = causal;
    const int n = 12, d = 8;
    const MpAttention want = fb::test::mpfr_attention(in, [&](int r) { return causal ? r + 1 : n; });
    for (const ReferenceMode& mode : kReferenceModes) {
      const char* const suffix = mode.suffix;
      const mpfr_rnd_t rnd = mode.rnd;
      const std::string name = std::string("correctly-rounded") + suffix;
      CAPTURE(name);
      CAPTURE(causal);
      const AttentionOutputs got = run_attention(parse_kernel_model(name, formats::bf16), in, RunOptions{});
      for (int i = 0; i < n * d; ++i) {
        CAPTURE(i);
        const double w = mp_round(want.o[static_cast<std::size_t>(i)], 8, rnd);
        CHECK(got.o.data[static_cast<std::size_t>(i)] == w);
        // The case this test is for: MPFR's value as a double rounds elsewhere.
        beyond_double += mp_round(Mp(want.o[static_cast<std::size_t>(i)].d()), 8, rnd) != w ? 1 : 0;
      }
      for (int r = 0; r < n; ++r) {
        CAPTURE(r);
        Mp delta;
        for (int c = 0; c < d; ++c)
          delta =
              delta + Mp(in.d_o->at(0, 0, r, c)) * Mp(mp_round(want.o[static_cast<std::size_t>(r * d + c)], 8, rnd));
        CHECK(got.delta->data[static_cast<std::size_t>(r)] == mp_round(delta, 24, rnd));
      }
    }
  }
  CHECK(beyond_double > 0);
}
