// tests/test_attention_exact.cpp: exact_attention() (long double, attention/exact.cpp)
// against the same mathematics in MPFR at 1024 bits (tests/mpfr_attention.hpp, from the definitions:
// S = scale·QKᵀ, O = softmax(S)V, LSE = m + log Σ exp(S - m), delta = Σ dO∘O,
// dS = P∘(dP - delta), dQ = scale·dS K, dK = scale·dSᵀQ, dV = PᵀdO). The reference must
// agree to ~1e-15 (its output is a double), far inside the 1e-12 the model tests use and
// 11+ orders below a bf16/fp16 ulp. The model `correctly-rounded` (the reference every
// bias verdict subtracts) is checked bit for bit against MPFR's values rounded once.
#include <doctest/doctest.h>
#include <mpfr.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attention/attention.hpp"
#include "attention/kernel_models.hpp"
#include "studies/scenarios.hpp"
#include "tests/mpfr_attention.hpp"

using namespace fb;
using namespace fb::attn;

using fb::test::check_all_close;
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
      check_all_close(got, want);
    }
  }
}

// Found by an audit: the golden-fp64 models computed exp in fp32 (PyTorch's opmath for bf16,
// fp16 and fp32 tensors, not fp64's), so `deviation`'s fp64 rows measured fp32's exp error,
// ~1e-8, and Flash and Baseline agreed to 8 digits. In fp64 throughout, their O, LSE and
// gradients are within a few fp64 ulps of MPFR's (1e-13 leaves room for the sums' orders).
TEST_CASE("golden-fp64 models compute in fp64 throughout, exp and log included") {
  for (const char* name : {"golden-fp64-flash", "golden-fp64-baseline"}) {
    for (bool causal : {false, true}) {
      CAPTURE(name);
      CAPTURE(causal);
      AttentionInputs in = make_scenario("random", 91, 1, 1, 40, 16, formats::fp32, true);
      in.causal = causal;
      // The models read fp32 inputs: the reference reads the same values.
      for (Tensor4* t : {&in.q, &in.k, &in.v, &*in.d_o})
        for (double& x : t->data) x = static_cast<float>(x);
      const AttentionOutputs got = run_attention(parse_kernel_model(name, formats::bf16), in, RunOptions{});
      const MpAttention want = fb::test::mpfr_attention(in, [&](int r) { return causal ? r + 1 : 40; });
      const auto close = [](const Tensor4& g, const std::vector<Mp>& w, const char* what) {
        const std::string tensor = what;
        CAPTURE(tensor);
        REQUIRE(g.data.size() == w.size());
        double worst = 0;
        for (std::size_t i = 0; i < w.size(); ++i)
          worst = std::max(worst, std::fabs(g.data[i] - w[i].d()) / std::max(1.0, std::fabs(w[i].d())));
        CHECK(worst <= 1e-13);
      };
      close(got.o, want.o, "O");
      close(got.lse, want.lse, "LSE");
      REQUIRE((got.dq && got.dk && got.dv));
      close(*got.dq, want.dq, "dQ");
      close(*got.dk, want.dk, "dK");
      close(*got.dv, want.dv, "dV");
    }
  }
}

namespace {

// One head of n query rows and nk keys, head dim d, every entry 0, with a dO (a backward) and
// softmax scale `scale`: the hand-worked cases below set the entries that matter.
AttentionInputs zero_inputs(int n, int nk, int d, double scale) {
  AttentionInputs in;
  in.q = Tensor4(1, 1, n, d);
  in.k = Tensor4(1, 1, nk, d);
  in.v = Tensor4(1, 1, nk, d);
  in.d_o = Tensor4(1, 1, n, d);
  in.softmax_scale = scale;
  return in;
}

// x rounded once to a p-bit significand in MPFR rounding mode `rnd`, as a double, in a
// format whose least normal is 2^-126 (bf16, p = 8, and fp32, p = 24): below it, to a
// multiple of the least subnormal 2^(-126 - (p - 1)), a zero keeping x's sign. (No value
// here overflows.)
double mp_round(const Mp& x, mpfr_prec_t p, mpfr_rnd_t rnd) {
  mpfr_t r;
  mpfr_init2(r, p);
  double d;
  Mp least_normal;
  mpfr_set_ui_2exp(least_normal.v, 1, -126, MPFR_RNDN);
  if (mpfr_cmpabs(x.v, least_normal.v) < 0) {
    const long quantum = -126 - (p - 1);
    Mp scaled;
    mpfr_mul_2si(scaled.v, x.v, -quantum, MPFR_RNDN);                            // exact
    mpfr_rint(scaled.v, scaled.v, rnd);                                          // a zero keeps the sign of x
    d = std::ldexp(mpfr_get_d(scaled.v, MPFR_RNDN), static_cast<int>(quantum));  // exact: < 2^p
  } else {
    mpfr_set(r, x.v, rnd);
    d = mpfr_get_d(r, MPFR_RNDN);  // exact: p <= 53
  }
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

// Runs `correctly-rounded` in each mode of kReferenceModes on a scenario's inputs (seed, n rows,
// head dim d, one head, with dO; causal and not) and hands each run, with MPFR's exact outputs
// of the same inputs, to check(in, want, got, suffix, rnd).
template <class Check>
void each_reference_run(const char* scenario, std::uint64_t seed, int n, int d, Check check) {
  for (bool causal : {false, true}) {
    AttentionInputs in = make_scenario(scenario, seed, 1, 1, n, d, formats::bf16, true);
    in.causal = causal;
    const MpAttention want = fb::test::mpfr_attention(in, [&](int r) { return causal ? r + 1 : n; });
    for (const ReferenceMode& mode : kReferenceModes) {
      // Named variables, not structured bindings: clang before 16 cannot capture bindings.
      const char* const suffix = mode.suffix;
      const mpfr_rnd_t rnd = mode.rnd;
      const std::string name = std::string("correctly-rounded") + suffix;
      CAPTURE(name);
      CAPTURE(scenario);
      CAPTURE(seed);
      CAPTURE(causal);
      const AttentionOutputs got = run_attention(parse_kernel_model(name, formats::bf16), in, RunOptions{});
      check(in, want, got, suffix, rnd);
    }
  }
}

}  // namespace

TEST_CASE("correctly-rounded equals MPFR's exact outputs rounded once, in rne, rtz, rup and rdn") {
  // The reference model (attention.hpp round_exact_outputs), checked bit for bit against
  // MPFR at 1024 bits (tests/mpfr_attention.hpp): O, dQ, dK, dV rounded once to bf16
  // (8 significant bits), LSE to fp32 (24), and delta = Σ dO·O_cr of the ROUNDED O, summed
  // exactly and rounded once to fp32, each in the final cast's mode (+o-MODE).
  int inexact = 0, compared = 0;
  const int n = 9, d = 8;
  for (const char* scenario : {"random", "sink"}) {
    each_reference_run(
        scenario, 78, n, d,
        [&](const AttentionInputs& in, const MpAttention& want, const AttentionOutputs& got, const char*,
            mpfr_rnd_t rnd) {
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
        });
  }
  CHECK(inexact > compared / 2);  // the roundings are real: most outputs are not representable
}

TEST_CASE("a +o-MODE kernel's floor rounds every output to nearest even, delta from that O") {
  // The floor is the one rounding no kernel avoids, the format's RNE: a +o-MODE cast is the
  // kernel's choice, so its bias must show as added, not sit in the floor. Checked against
  // MPFR: O, LSE, dQ, dK, dV to nearest, delta = Σ dO·O of the RNE O, summed exactly, rounded
  // to nearest; and correctly-rounded+o-MODE's floor is that same RNE reference, while
  // correctly-rounded's (RNE) floor is the model itself.
  const int n = 9, d = 8;
  int o_mode_differs = 0;
  for (const char* scenario : {"random", "sink"})
    each_reference_run(
        scenario, 79, n, d,
        [&](const AttentionInputs& in, const MpAttention& want, const AttentionOutputs&, const char* suffix,
            mpfr_rnd_t rnd) {
          const ModelHandle ref =
              correctly_rounded_reference(*parse_kernel_model(std::string("fa2-sm80") + suffix, formats::bf16).recipe);
          CAPTURE(ref.name);
          CHECK(ref.recipe->o_round == RoundingMode::rne);
          const ModelHandle own = correctly_rounded_reference(
              *parse_kernel_model(std::string("correctly-rounded") + suffix, formats::bf16).recipe);
          CHECK(own.recipe->o_round == RoundingMode::rne);
          CHECK((own.name.find("the model itself") != std::string::npos) == (std::string(suffix).empty()));
          const AttentionOutputs got = run_attention(ref, in, RunOptions{});
          auto check_tensor = [&](const Tensor4& t, const std::vector<Mp>& exact, mpfr_prec_t p) {
            REQUIRE(t.data.size() == exact.size());
            for (std::size_t i = 0; i < exact.size(); ++i) {
              CAPTURE(i);
              CHECK(t.data[i] == mp_round(exact[i], p, MPFR_RNDN));
            }
          };
          check_tensor(got.o, want.o, 8);
          check_tensor(got.lse, want.lse, 24);
          check_tensor(*got.dq, want.dq, 8);
          check_tensor(*got.dk, want.dk, 8);
          check_tensor(*got.dv, want.dv, 8);
          std::vector<Mp> delta(n);
          for (int r = 0; r < n; ++r)
            for (int c = 0; c < d; ++c)
              delta[r] = delta[r] + Mp(in.d_o->at(0, 0, r, c)) * Mp(mp_round(want.o[r * d + c], 8, MPFR_RNDN));
          check_tensor(*got.delta, delta, 24);
          for (const Mp& x : want.o) o_mode_differs += mp_round(x, 8, rnd) != mp_round(x, 8, MPFR_RNDN) ? 1 : 0;
        });
  CHECK(o_mode_differs > 0);  // the rule is visible: the modes' O roundings differ from RNE's
}

TEST_CASE("correctly-rounded O, LSE, delta and gradients on the ties scenario: decided exactly where a double cannot") {
  // `ties` puts keys 150-200 below the row max: their weights (<= e^-150 ~ 2^-216) move O and
  // delta off a rounding boundary by far less than a double resolves, yet decide their
  // rounding. MPFR at 1024 bits holds that offset (tests/mpfr_attention.hpp). Checked bit for
  // bit in every mode MPFR has: O; LSE; delta of the rounded O (summed exactly); and delta of
  // the exact O, the reference of a kernel whose delta reads O before its cast (+o-fp32).
  int o_beyond_double = 0, delta_beyond_double = 0, gradients_beyond_double = 0;
  const int n = 24, d = 8;
  for (const std::uint64_t seed : {91, 92, 93}) {
    each_reference_run(
        "ties", seed, n, d,
        [&](const AttentionInputs& in, const MpAttention& want, const AttentionOutputs& got, const char* suffix,
            mpfr_rnd_t rnd) {
          for (int i = 0; i < n * d; ++i) {
            CAPTURE(i);
            const Mp& exact = want.o[static_cast<std::size_t>(i)];
            const double w = mp_round(exact, 8, rnd);
            CHECK(got.o.data[static_cast<std::size_t>(i)] == w);
            // The case this test is for: MPFR's value as a double rounds elsewhere.
            o_beyond_double += mp_round(Mp(exact.d()), 8, rnd) != w ? 1 : 0;
            // The gradients: the far keys move dQ of the sink column (whose
            // dP - delta nearly cancels) to ~2^-250, where only its sign and the
            // exact value decide an rup or rdn rounding (bf16's least subnormal is
            // 2^-133); the sign of a zero is compared too.
            const auto at = static_cast<std::size_t>(i);
            const double dq = mp_round(want.dq[at], 8, rnd), dk = mp_round(want.dk[at], 8, rnd),
                         dv = mp_round(want.dv[at], 8, rnd);
            CHECK(got.dq->data[at] == dq);
            CHECK(std::signbit(got.dq->data[at]) == std::signbit(dq));
            CHECK(got.dk->data[at] == dk);
            CHECK(got.dv->data[at] == dv);
            gradients_beyond_double += (mp_round(Mp(want.dq[at].d()), 8, rnd) != dq) +
                                       (mp_round(Mp(want.dk[at].d()), 8, rnd) != dk) +
                                       (mp_round(Mp(want.dv[at].d()), 8, rnd) != dv);
          }
          const ModelHandle exact_o_delta = correctly_rounded_reference(
              *parse_kernel_model(std::string("fa2-sm80+o-fp32") + suffix, formats::bf16).recipe);
          REQUIRE(exact_o_delta.name.find("delta from the exact O") != std::string::npos);
          const AttentionOutputs from_exact_o = run_attention(exact_o_delta, in, RunOptions{});
          // The same reference in the run's mode: the exact decision of a
          // directed rounding of the exact delta.
          KernelModel in_mode = *exact_o_delta.recipe;
          in_mode.o_round = parse_kernel_model(std::string("fa2-sm80") + suffix, formats::bf16).recipe->o_round;
          const AttentionOutputs from_exact_o_in_mode =
              run_attention(ModelHandle{"in mode", std::make_shared<const KernelModel>(in_mode)}, in, RunOptions{});
          for (int r = 0; r < n; ++r) {
            CAPTURE(r);
            const auto at = static_cast<std::size_t>(r);
            CHECK(got.lse.data[at] == mp_round(want.lse[at], 24, rnd));
            Mp delta;
            for (int c = 0; c < d; ++c)
              delta = delta +
                      Mp(in.d_o->at(0, 0, r, c)) * Mp(mp_round(want.o[static_cast<std::size_t>(r * d + c)], 8, rnd));
            CHECK(got.delta->data[at] == mp_round(delta, 24, rnd));
            CHECK(from_exact_o.delta->data[at] == mp_round(want.delta[at], 24, MPFR_RNDN));
            const double w = mp_round(want.delta[at], 24, rnd);
            CHECK(from_exact_o_in_mode.delta->data[at] == w);
            delta_beyond_double += mp_round(Mp(want.delta[at].d()), 24, rnd) != w ? 1 : 0;
          }
        });
  }
  CHECK(o_beyond_double > 0);
  CHECK(delta_beyond_double > 0);
  CHECK(gradients_beyond_double > 0);
}

TEST_CASE("correctly-rounded with a key e^-12800 below the max: beyond every fixed precision, decided by sign") {
  // One query, two keys, scale 1/2: scores 0 and 128 * -100 = -12800, so O = (v0 + e v1) / (1 + e)
  // with e = e^-12800 ~ 2^-18467, which no 1024-bit MPFR value can add to 1. The exact values
  // are worked by hand from the sign of v1 - v0: O_c lies just above v0_c where v1_c > v0_c,
  // just below where v1_c < v0_c, and is v0_c where they are equal. LSE = log(1 + e) lies just
  // above 0; delta = (w0 + e w1) / (1 + e) with w_j = dO . v_j = 4 and 3 lies just below 4.
  AttentionInputs in = zero_inputs(1, 2, 4, 0.5);
  in.q.at(0, 0, 0, 0) = 256.0;
  in.k.at(0, 0, 1, 0) = -100.0;
  const double v0[4] = {1.0, -1.0, 0.5, 3.0}, v1[4] = {2.0, -2.0, 0.5, 1.0}, d_o[4] = {1.0, 0.0, 0.0, 1.0};
  for (int c = 0; c < 4; ++c) {
    in.v.at(0, 0, 0, c) = v0[c];
    in.v.at(0, 0, 1, c) = v1[c];
    in.d_o->at(0, 0, 0, c) = d_o[c];
  }
  // bf16 neighbours: 1 + 2^-7 above 1, 3 - 2^-6 below 3; fp32: 4 - 2^-22 below 4, 2^-149 above 0.
  struct Expected {
    const char* suffix;
    double o[4], lse, delta;
  };
  const Expected expected[] = {
      {"", {1.0, -1.0, 0.5, 3.0}, 0.0, 4.0},
      {"+o-rtz", {1.0, -1.0, 0.5, 3.0 - 0x1p-6}, 0.0, 4.0 - 0x1p-22},
      {"+o-rup", {1.0 + 0x1p-7, -1.0, 0.5, 3.0}, 0x1p-149, 4.0},
      {"+o-rdn", {1.0, -1.0 - 0x1p-7, 0.5, 3.0 - 0x1p-6}, 0.0, 4.0 - 0x1p-22},
  };
  for (const Expected& e : expected) {
    const std::string suffix = e.suffix;
    CAPTURE(suffix);
    const AttentionOutputs got =
        run_attention(parse_kernel_model("correctly-rounded" + suffix, formats::bf16), in, RunOptions{});
    for (int c = 0; c < 4; ++c) {
      CAPTURE(c);
      CHECK(got.o.at(0, 0, 0, c) == e.o[c]);
    }
    CHECK(got.lse.at(0, 0, 0, 0) == e.lse);
    const ModelHandle kernel_reference =
        correctly_rounded_reference(*parse_kernel_model("fa2-sm80+o-fp32" + suffix, formats::bf16).recipe);
    // A kernel's floor rounds delta to nearest whatever its O cast's mode: just below 4 is 4.
    CHECK(run_attention(kernel_reference, in, RunOptions{}).delta->at(0, 0, 0, 0) == 4.0);
    KernelModel in_mode = *kernel_reference.recipe;
    in_mode.o_round = parse_kernel_model("correctly-rounded" + suffix, formats::bf16).recipe->o_round;
    const AttentionOutputs from_exact_o =
        run_attention(ModelHandle{"in mode", std::make_shared<const KernelModel>(in_mode)}, in, RunOptions{});
    CHECK(from_exact_o.delta->at(0, 0, 0, 0) == e.delta);
  }
}

TEST_CASE("correctly-rounded LSE of one visible key is its score, exactly, in every mode") {
  // Causal row 0 sees key 0 alone: LSE = scale * q.k = 0.5 * (1.5 * 3 + 0.25 * -1) = 2.125, an
  // fp32 value, so no mode may move it. Row 1 sees two keys of equal score 0.5 * 3 = 1.5:
  // LSE = 1.5 + log 2 (MPFR, rounded in the same mode).
  AttentionInputs in;
  in.q = Tensor4(1, 1, 2, 4);
  in.k = Tensor4(1, 1, 2, 4);
  in.v = Tensor4(1, 1, 2, 4);
  in.causal = true;
  in.q.at(0, 0, 0, 0) = 1.5;
  in.q.at(0, 0, 0, 1) = 0.25;
  in.q.at(0, 0, 1, 0) = 1.0;
  for (int j = 0; j < 2; ++j) {
    in.k.at(0, 0, j, 0) = 3.0;
    in.k.at(0, 0, j, 1) = j == 0 ? -1.0 : 0.0;
    in.v.at(0, 0, j, 0) = 1.0 + j;
  }
  Mp log2_exact;
  mpfr_const_log2(log2_exact.v, MPFR_RNDN);
  const Mp two_keys = Mp(1.5) + log2_exact;
  for (const ReferenceMode& mode : kReferenceModes) {
    const std::string suffix = mode.suffix;
    CAPTURE(suffix);
    const AttentionOutputs got =
        run_attention(parse_kernel_model("correctly-rounded" + suffix, formats::bf16), in, RunOptions{});
    CHECK(got.lse.at(0, 0, 0, 0) == 2.125);
    CHECK(got.lse.at(0, 0, 1, 0) == mp_round(two_keys, 24, mode.rnd));
  }
}

TEST_CASE("exact_attention and correctly-rounded where a long-double dot product cancels") {
  // Key 1's products are 2^40, 2^-25 and -2^40: long double (64 bits) drops the 2^-25, so its
  // score 2^-28 becomes 0, and O = (1 + e^(s1) (1 + 2^-7)) / (1 + e^(s1) + e^(-25.625)) comes out
  // 2^-38 below the bf16 midpoint 1 + 2^-8 when it lies 2^-38 above it. An error bound that
  // ignores the score's magnitude (2^38 here, against a score of 2^-28) lets that double decide,
  // and rounds down; MPFR (tests/mpfr_attention.hpp) rounds up.
  AttentionInputs in;
  const int d = 64;
  in.q = Tensor4(1, 1, 1, d);
  in.k = Tensor4(1, 1, 3, d);
  in.v = Tensor4(1, 1, 3, d);
  in.d_o = Tensor4(1, 1, 1, d);
  in.softmax_scale = 0.125;
  in.q.at(0, 0, 0, 0) = 0x1p20;
  in.q.at(0, 0, 0, 1) = 0x1p-15;
  in.q.at(0, 0, 0, 2) = 0x1p20;
  in.k.at(0, 0, 1, 0) = 0x1p20;
  in.k.at(0, 0, 1, 1) = 0x1p-10;
  in.k.at(0, 0, 1, 2) = -0x1p20;
  in.k.at(0, 0, 2, 0) = -205 * 0x1p-20;
  in.v.at(0, 0, 0, 0) = 1.0;
  in.v.at(0, 0, 1, 0) = 1.0 + 0x1p-7;
  in.d_o->at(0, 0, 0, 0) = 1.0;
  in.d_o->at(0, 0, 0, 1) = -0.5;
  const MpAttention want = fb::test::mpfr_attention(in, [](int) { return 3; });
  // exact_attention itself sums the cancelling dot again with compensation: the lost 2^-25
  // would move O by 2^-38 and dK by far more than 1e-15.
  const AttentionOutputs exact = exact_attention(in);
  check_all_close(exact, want);
  for (const ReferenceMode& mode : kReferenceModes) {
    const std::string suffix = mode.suffix;
    CAPTURE(suffix);
    const AttentionOutputs got =
        run_attention(parse_kernel_model("correctly-rounded" + suffix, formats::bf16), in, RunOptions{});
    CHECK(got.o.at(0, 0, 0, 0) == mp_round(want.o[0], 8, mode.rnd));
    CHECK(got.lse.at(0, 0, 0, 0) == mp_round(want.lse[0], 24, mode.rnd));
  }
  CHECK(mp_round(want.o[0], 8, MPFR_RNDN) == 1.0 + 0x1p-7);  // the case: above the midpoint
}

namespace {

// Runs `correctly-rounded` in each mode of kReferenceModes (bf16) and hands each run to
// check(got, rnd).
template <class Check>
void each_mode(const AttentionInputs& in, Check check) {
  for (const ReferenceMode& mode : kReferenceModes) {
    const std::string name = std::string("correctly-rounded") + mode.suffix;
    CAPTURE(name);
    check(run_attention(parse_kernel_model(name, formats::bf16), in, RunOptions{}), mode.rnd);
  }
}

}  // namespace

TEST_CASE("correctly-rounded gradients that are a rounding boundary exactly, worked by hand, in every mode") {
  // exact_attention's long-double gradients err by ~1e-19 of their terms, so where the exact
  // gradient is 0 (or a cancellation leaves it small) the double lies off the boundary by far
  // more than its own ulp: its rounding is a guess. Each expected value below follows from
  // the definitions by hand, not from the engine.
  SUBCASE("two equal keys: P = 1/2, so dQ = 0, dV = (dO_0 + dO_1) / 2 and dK_0 = -dK_1 = scale/4 sum_r q_r w") {
    // w_r = dO_r . (v0 - v1); dS_r0 = (w_r0 - delta_r) / 2 = w_r / 4, dS_r1 = -w_r / 4.
    AttentionInputs in = zero_inputs(2, 2, 4, 0.5);
    const double q[2][4] = {{1.5, 0.25, -1.0, 0.0}, {0.75, 2.0, 0.0, 1.0}};
    const double k[4] = {1.0, 0.5, 0.0, 0.0};
    const double v[2][4] = {{1.0, 0.0, 0.5, 2.0}, {1.0 + 0x1p-7, 1.0, -0.5, 3.0}};
    const double d_o[2][4] = {{1.0 + 0x1p-7, 0.5, 0.0, 0.0}, {1.0, 0.0, 0.25, 0.0}};
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < 4; ++c) {
        in.q.at(0, 0, r, c) = q[r][c];
        in.k.at(0, 0, r, c) = k[c];
        in.v.at(0, 0, r, c) = v[r][c];
        in.d_o->at(0, 0, r, c) = d_o[r][c];
      }
    // dV column 0: (1 + 2^-7 + 1) / 2 = 1 + 2^-8, the midpoint of 1 and 1 + 2^-7.
    // w_0 = -(1 + 2^-7) 2^-7 - 0.5, w_1 = -2^-7 + 0.25; dK_03 = w_1 / 8 = 2^-5 - 2^-10, a bf16 value.
    Mp w[2];
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < 4; ++c) w[r] = w[r] + Mp(d_o[r][c]) * (Mp(v[0][c]) - Mp(v[1][c]));
    CHECK(w[1].d() == 0.25 - 0x1p-7);
    each_mode(in, [&](const AttentionOutputs& got, mpfr_rnd_t rnd) {
      for (int c = 0; c < 4; ++c) {
        CAPTURE(c);
        const Mp dv = (Mp(d_o[0][c]) + Mp(d_o[1][c])) * Mp(0.5);
        const Mp dk0 = (Mp(q[0][c]) * w[0] + Mp(q[1][c]) * w[1]) * Mp(0.125);
        for (int r = 0; r < 2; ++r) {
          CAPTURE(r);
          CHECK(got.dq->at(0, 0, r, c) == 0.0);
          CHECK(!std::signbit(got.dq->at(0, 0, r, c)));
          CHECK(got.dv->at(0, 0, r, c) == mp_round(dv, 8, rnd));
          CHECK(got.dk->at(0, 0, r, c) == mp_round(r == 0 ? dk0 : Mp(0.0) - dk0, 8, rnd));
        }
      }
      CHECK(got.dv->at(0, 0, 0, 0) == (rnd == MPFR_RNDU ? 1.0 + 0x1p-7 : 1.0));  // the midpoint, decided
      CHECK(got.dk->at(0, 0, 0, 3) == 0x1p-5 - 0x1p-10);
    });
  }
  SUBCASE("rows whose weights sum to 1 across rows: dV = 0 exactly though every weight is transcendental") {
    // Scores (s, 0) and (0, s) in a pair of rows give P_00 + P_10 = e^s/(1 + e^s) + 1/(1 + e^s)
    // = 1, and likewise for key 1. Rows 0, 1 (s = 1.5) carry dO_0 = 1, rows 2, 3 (s = 2.5)
    // dO_0 = -1: dV_j0 = 1 - 1 = 0. Column 1: dO_1 = 0.5, 0.5, 0.25, 0.25, so dV_j1 = 0.75.
    AttentionInputs in = zero_inputs(4, 2, 2, 0.5);
    const double q[4][2] = {{3.0, 0.0}, {0.0, 3.0}, {5.0, 0.0}, {0.0, 5.0}};
    const double d_o[4][2] = {{1.0, 0.5}, {1.0, 0.5}, {-1.0, 0.25}, {-1.0, 0.25}};
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 2; ++c) {
        in.q.at(0, 0, r, c) = q[r][c];
        in.d_o->at(0, 0, r, c) = d_o[r][c];
      }
    in.k.at(0, 0, 0, 0) = in.k.at(0, 0, 1, 1) = 1.0;
    in.v.at(0, 0, 0, 0) = 1.0;
    in.v.at(0, 0, 0, 1) = 2.0;
    in.v.at(0, 0, 1, 0) = 0.5;
    in.v.at(0, 0, 1, 1) = -1.0;
    // The long-double value is not 0 (the case): its rounding would be a tiny nonzero bf16.
    CHECK(exact_attention(in).dv->at(0, 0, 0, 0) != 0.0);
    const MpAttention want = fb::test::mpfr_attention(in, [](int) { return 2; });
    each_mode(in, [&](const AttentionOutputs& got, mpfr_rnd_t rnd) {
      for (int j = 0; j < 2; ++j) {
        CAPTURE(j);
        CHECK(got.dv->at(0, 0, j, 0) == 0.0);
        CHECK(got.dv->at(0, 0, j, 1) == 0.75);
        // dQ and dK here are no boundary: MPFR's 1024-bit values round as the exact ones.
        for (int c = 0; c < 2; ++c) CHECK(got.dk->at(0, 0, j, c) == mp_round(want.dk[j * 2 + c], 8, rnd));
      }
      for (int i = 0; i < 8; ++i) CHECK(got.dq->data[i] == mp_round(want.dq[i], 8, rnd));
    });
  }
  SUBCASE("equal value rows: every dP - delta is 0, so dQ = dK = 0 on random queries and keys (GQA, causal)") {
    AttentionInputs in = make_scenario("random", 5, 1, 2, 16, 8, formats::bf16, true);
    // Two q heads share one kv head: key j's dK sums the rows of both.
    Tensor4 k(1, 1, 16, 8), v(1, 1, 16, 8);
    for (int j = 0; j < 16; ++j)
      for (int c = 0; c < 8; ++c) {
        k.at(0, 0, j, c) = in.k.at(0, 0, j, c);
        v.at(0, 0, j, c) = in.v.at(0, 0, 0, c);
      }
    in.k = k;
    in.v = v;
    in.causal = true;
    const AttentionOutputs exact = exact_attention(in);
    int off_zero = 0;  // the long-double gradients that are not 0 (the case)
    for (const double x : exact.dq->data) off_zero += x != 0.0 ? 1 : 0;
    CHECK(off_zero > 0);
    each_mode(in, [&](const AttentionOutputs& got, mpfr_rnd_t) {
      for (const double x : got.dq->data) CHECK(x == 0.0);
      for (const double x : got.dk->data) CHECK(x == 0.0);
    });
  }
}

TEST_CASE("correctly-rounded gradients below double's range keep their sign and size, in every mode") {
  // One query, two keys, scale 1/2: scores 0 and -800, so P_1 = e^-800 / (1 + e^-800), below
  // double's least subnormal (e^-744): exact_attention's double of a gradient that P_1 scales
  // is 0, though the gradient is not. With w_j = dO . V_j = 0.5 and 1 (dO = e_0):
  //   dV_1 = dO P_1 > 0 (column 0), dV_0 = dO P_0 just below dO;
  //   dS_1 = P_1 (w_1 - delta) = P_0 P_1 (w_1 - w_0) > 0, dS_0 = -dS_1;
  //   dK_j = scale dS_j q: dK_1 > 0, dK_0 < 0 (column 0); dQ = scale dS_1 k_1 < 0 (k_1 = -1600).
  // Each rounds to bf16's least subnormal 2^-133 in the mode that rounds away from 0, to a zero
  // of its sign otherwise; dV_0 to 1 - 2^-8 below 1 in rtz and rdn.
  AttentionInputs in = zero_inputs(1, 2, 4, 0.5);
  in.q.at(0, 0, 0, 0) = 1.0;
  in.k.at(0, 0, 1, 0) = -1600.0;
  in.v.at(0, 0, 0, 0) = 0.5;
  in.v.at(0, 0, 1, 0) = 1.0;
  in.d_o->at(0, 0, 0, 0) = 1.0;
  CHECK(exact_attention(in).dv->at(0, 0, 1, 0) == 0.0);  // the case: the double lost it
  const double least = 0x1p-133;
  // A tiny value of sign `sign` under rnd: the least subnormal away from 0, else a signed zero.
  auto tiny = [&](int sign, mpfr_rnd_t rnd) {
    const bool away = (sign > 0 && rnd == MPFR_RNDU) || (sign < 0 && rnd == MPFR_RNDD);
    return away ? sign * least : (sign > 0 ? 0.0 : -0.0);
  };
  each_mode(in, [&](const AttentionOutputs& got, mpfr_rnd_t rnd) {
    auto same = [](double got_value, double want) {
      return got_value == want && std::signbit(got_value) == std::signbit(want);
    };
    CHECK(same(got.dv->at(0, 0, 1, 0), tiny(1, rnd)));
    CHECK(same(got.dv->at(0, 0, 0, 0), rnd == MPFR_RNDZ || rnd == MPFR_RNDD ? 1.0 - 0x1p-8 : 1.0));
    CHECK(same(got.dk->at(0, 0, 1, 0), tiny(1, rnd)));
    CHECK(same(got.dk->at(0, 0, 0, 0), tiny(-1, rnd)));
    CHECK(same(got.dq->at(0, 0, 0, 0), tiny(-1, rnd)));
    for (int c = 1; c < 4; ++c) {  // K_c = 0 for both keys: dQ_c = 0 exactly; dO_c = 0: dV_c = 0
      CAPTURE(c);
      CHECK(same(got.dq->at(0, 0, 0, c), 0.0));
      CHECK(same(got.dv->at(0, 0, 1, c), 0.0));
    }
  });
}
