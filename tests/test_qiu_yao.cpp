// tests/test_qiu_yao.cpp: Qiu & Yao's worked example of RNE bias (docs/DESIGN.md §7).
//
// Contract: the exact fp32 partial sum -4.703990459442139, bits
// 1 10000001 0010110 1 000011100010111, converts to bf16 -4.71875 under rne. Its
// rounding event shows round bit 1, sticky bit 1, no tie, rounding away from zero
// (RoundDirection::up), and an error of -0.01476 (checked against exact rational
// arithmetic). With its residual (the 15 bits below the round bit) removed the same
// sum is a tie and rounds to even, -4.6875. The same example is also produced as an
// fp32 addition of two same-sign values, the situation the paper describes.
//
// The authors' code (ucker/why-low-precision-training-fails attention.py @30ef0216) as the
// model fa-bf16acc runs it, checked against values derived here by hand:
// - their clamp: block_row_sums = exp_weights.sum(-1).clamp(min = 1e-10). With STABLE=1
//   (+dynmax) and a tied row max of 26 the shift is 52, each tied P-bar is exp(-26) ~ 5.1e-12
//   and the tile's sum 1.02e-11 is clamped up to 1e-10: O collapses to -0.102 (bf16 bdd1)
//   where the exact value is -1. Below a tied max of ~23.7 the sum exceeds 1e-10 and O is
//   about -1; without the fix the row sum is ~2 and O is -1.
// - their backward as it runs under CUDA autocast: D = (dO * O).sum(-1) keeps fp32 (bf16
//   products, an fp32 sum), dP - D is computed in fp32, every einsum returns bf16. Checked
//   on inputs whose dots are exact in fp32 (so any accumulation order gives them), element
//   by element, and against the mixed setting (D in bf16) it replaces, which differs.
#include <doctest/doctest.h>

#include <boost/multiprecision/cpp_int.hpp>
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "attention/attention.hpp"
#include "attention/kernel_models.hpp"
#include "emu/ops.hpp"
#include "formats/format.hpp"
#include "tests/bf16_reference.hpp"

namespace {

using boost::multiprecision::cpp_int;
using boost::multiprecision::cpp_rational;
namespace fmt = fb::formats;

// The value of an fp32 normal pattern, decoded here by the IEEE rule, exactly.
cpp_rational fp32_value(std::uint32_t bits) {
  const bool negative = bits >> 31;
  const int e = static_cast<int>((bits >> 23) & 0xff) - 127;
  const cpp_int significand = cpp_int((bits & 0x7fffff) | 0x800000);
  cpp_rational v(significand);
  v = e - 23 >= 0 ? v * cpp_rational(cpp_int(1) << (e - 23)) : v / cpp_rational(cpp_int(1) << (23 - e));
  return negative ? -v : v;
}

// The paper's bit string, assembled field by field.
constexpr std::uint32_t kSign = 1, kExponent = 0b10000001, kKept = 0b0010110, kRound = 1, kResidual = 0b000011100010111;
constexpr std::uint32_t kPartialSum = (kSign << 31) | (kExponent << 23) | (kKept << 16) | (kRound << 15) | kResidual;
constexpr std::uint32_t kTieSum = kPartialSum & ~std::uint32_t{0x7fff};  // residual removed

fb::RoundingSpec rne() { return fb::RoundingSpec{}; }

}  // namespace

TEST_CASE("Qiu & Yao: -4.703990459442139 rounds to bf16 -4.71875 under RNE, away from zero") {
  static_assert(kPartialSum == 0xc0968717u);
  CHECK(std::bit_cast<float>(kPartialSum) == -4.703990459442139f);
  const cpp_rational exact = fp32_value(kPartialSum);

  fb::RoundingEvent ev;
  const fb::Rounded r = fb::convert(fmt::bf16, fmt::fp32, kPartialSum, rne(), 0, &ev);
  // -4.71875 = -(1 + 23/128) * 4 = 1 10000001 0010111: the kept 0010110 plus one.
  CHECK(r.bits == 0xc097u);
  CHECK(fb::to_double(fmt::bf16, r.bits) == -4.71875);
  CHECK(r.flags == fb::flag::inexact);
  CHECK(ev.round_bit);
  CHECK(ev.sticky_bit);
  CHECK_FALSE(ev.tie);
  CHECK(ev.direction == fb::RoundDirection::up);

  // The error result - exact, exactly, and in ulps of bf16 at 4 (2^-5).
  const cpp_rational error = cpp_rational(-151, 32) - exact;
  const cpp_rational error_ulps = error * 32;
  CHECK(static_cast<double>(error) == doctest::Approx(-0.01476).epsilon(1e-3));
  CHECK(error < 0);  // biased toward -inf: larger in magnitude
  CHECK(ev.error_ulps == doctest::Approx(static_cast<double>(error_ulps)).epsilon(1e-12));
  // The exact error -(2^15 - residual) * 2^-21 = -(32768 - 1815) / 2097152.
  CHECK(error == cpp_rational(-(32768 - 1815), 2097152));
}

TEST_CASE("Qiu & Yao: the same sum without its residual is a tie and rounds to even, -4.6875") {
  static_assert(kTieSum == 0xc0968000u);
  fb::RoundingEvent ev;
  const fb::Rounded r = fb::convert(fmt::bf16, fmt::fp32, kTieSum, rne(), 0, &ev);
  // The kept field 0010110 is even, so the tie stays: -(1 + 22/128) * 4 = -4.6875.
  CHECK(r.bits == 0xc096u);
  CHECK(fb::to_double(fmt::bf16, r.bits) == -4.6875);
  CHECK(ev.round_bit);
  CHECK_FALSE(ev.sticky_bit);
  CHECK(ev.tie);
  CHECK(ev.direction == fb::RoundDirection::down);
  const cpp_rational error = cpp_rational(-75, 16) - fp32_value(kTieSum);
  CHECK(error == cpp_rational(1, 64));  // half a bf16 ulp toward zero
  CHECK(ev.error_ulps == doctest::Approx(0.5).epsilon(1e-12));
}

TEST_CASE("Qiu & Yao: as a bf16 addition of two same-sign values, the significand overflow") {
  // Two negative values in [2, 4) whose exact fp32 sum is the paper's partial sum:
  // a = -2.34375 (exact in bf16, 1 10000000 0010110) and b, the rest, which fits fp32.
  // The fp32 add carries out of the significand; the cast to bf16 then rounds away.
  const cpp_rational exact = fp32_value(kPartialSum);
  const cpp_rational a = cpp_rational(-75, 32);  // -2.34375
  const cpp_rational b = exact - a;
  // b = -2.360240459442139... lies in [2, 4), so it is an fp32 iff it is a multiple of 2^-22.
  const cpp_rational b_scaled = b * (cpp_int(1) << 22);  // b in [2, 4): ulp 2^-22
  REQUIRE(boost::multiprecision::denominator(b_scaled) == 1);
  const auto b_bits = std::bit_cast<std::uint32_t>(static_cast<float>(static_cast<double>(b)));
  REQUIRE(fp32_value(b_bits) == b);
  const auto a_bits = std::bit_cast<std::uint32_t>(-2.34375f);
  // In fp32 the sum is exact (no rounding); the event records the carry out.
  fb::RoundingEvent ev32;
  const fb::Rounded s32 = fb::add(fmt::fp32, a_bits, b_bits, rne(), 0, &ev32);
  CHECK(s32.bits == kPartialSum);
  CHECK(s32.flags == 0);
  CHECK(ev32.significand_overflow);  // |a + b| >= 4 > both operands' binade [2, 4)
  // Then the cast to bf16, as in the paper's accumulation.
  const fb::Rounded r = fb::convert(fmt::bf16, fmt::fp32, s32.bits, rne());
  CHECK(r.bits == 0xc097u);
}

namespace {

// One head, 8 rows and keys, head dim 64 (scale 1/8): keys 0 and 1 are (8, 0, ..., 0), the
// other keys (-8, 0, ..., 0); row r's query is (max_r, 0, ..., 0), so its scaled scores are
// max_r on the tied pair and -max_r elsewhere. V is -1 on the pair and 0 elsewhere: exact O
// is -1 in every feature (up to exp(-2·max_r)).
fb::attn::AttentionInputs tied_rows(const std::vector<double>& maxima) {
  const int n = 8, d = 64;
  fb::attn::AttentionInputs in;
  in.dtype = fmt::bf16;
  in.softmax_scale = 0.125;
  in.q = fb::attn::Tensor4(1, 1, n, d);
  in.k = fb::attn::Tensor4(1, 1, n, d);
  in.v = fb::attn::Tensor4(1, 1, n, d);
  for (int r = 0; r < n; ++r) {
    in.q.at(0, 0, r, 0) = maxima[static_cast<std::size_t>(r) % maxima.size()];
    in.k.at(0, 0, r, 0) = r < 2 ? 8.0 : -8.0;
    for (int c = 0; c < d; ++c) in.v.at(0, 0, r, c) = r < 2 ? -1.0 : 0.0;
  }
  return in;
}

double f32(double x) { return static_cast<double>(static_cast<float>(x)); }

}  // namespace

TEST_CASE("Qiu & Yao's clamp: with STABLE=1 a tied max of 26 collapses O to -0.102 (bf16 bdd1), as their code does") {
  using namespace fb::attn;
  const AttentionInputs in = tied_rows({26.0, 23.0, 8.0});
  const AttentionOutputs fixed = run_attention(parse_kernel_model("fa-bf16acc+dynmax", fmt::bf16), in, RunOptions{});
  const AttentionOutputs plain = run_attention(parse_kernel_model("fa-bf16acc", fmt::bf16), in, RunOptions{});
  // Their arithmetic at max 26, by hand: m = bf16(2 * 26) = 52; each tied P-bar = fp32 exp(-26)
  // (S - m = -26 exactly in bf16); the tile's fp32 sum ~2 exp(-26) = 1.02e-11 (the other keys
  // add exp(-78) ~ 1e-34) is clamped to fp32(1e-10); l = bf16 of it; P-bar is cast to bf16 for
  // the einsum, whose sum over the pair, -2 bf16(P-bar), is exact; O = bf16(fp32(that / l)).
  const double p = f32(std::exp(-26.0));
  REQUIRE(2 * p < 1e-10);
  const double l = bf16_rne(f32(1e-10));
  const double want = bf16_rne(f32(-2.0 * bf16_rne(p) / l));
  CHECK(want == -0.10205078125);  // bf16 0xbdd1
  std::uint32_t bits = 0;
  REQUIRE(fb::from_double_exact(fmt::bf16, want, bits));
  CHECK(bits == 0xbdd1u);
  for (int c = 0; c < 64; ++c) {
    CAPTURE(c);
    CHECK(fixed.o.at(0, 0, 0, c) == want);                                 // their output: the clamp wins
    CHECK(plain.o.at(0, 0, 0, c) == -1.0);                                 // no fix: l ~ 2, no clamp
    CHECK(fixed.o.at(0, 0, 2, c) == doctest::Approx(-1.0).epsilon(0.01));  // max 8: fine
    // Max 23: 2 exp(-23) = 2.05e-10 > 1e-10, no clamp; O is -1 within bf16's rounding.
    CHECK(fixed.o.at(0, 0, 1, c) == doctest::Approx(-1.0).epsilon(0.01));
  }
  // The collapse starts where 2 exp(-r) falls below 1e-10: r > ln(2e10) = 23.72.
  CHECK(std::log(2e10) == doctest::Approx(23.72).epsilon(1e-3));
  const AttentionInputs edge = tied_rows({23.5, 24.0});
  const AttentionOutputs e = run_attention(parse_kernel_model("fa-bf16acc+dynmax", fmt::bf16), edge, RunOptions{});
  CHECK(e.o.at(0, 0, 0, 0) == doctest::Approx(-1.0).epsilon(0.01));
  CHECK(e.o.at(0, 0, 1, 0) > -0.8);  // 2 exp(-24) / 1e-10 = 0.755
}

TEST_CASE("Qiu & Yao's backward under CUDA autocast: D in fp32, dP - D in fp32, einsums bf16") {
  using namespace fb::attn;
  // D = (dO * O).sum(-1): bf16 products, an fp32 sum that stays fp32 (1 + 2^-10 has no bf16).
  const ModelHandle model = parse_kernel_model("fa-bf16acc", fmt::bf16);
  const double d_o[2] = {1.0, 1.0}, o[2] = {1.0, std::ldexp(1.0, -10)};
  CHECK(kernel_delta(model, d_o, o, 2) == 1.0 + std::ldexp(1.0, -10));

  // One 16-row tile, head dim 16 (scale 1/4). Q, K in {-0.5, 0, 0.5} and V, dO in
  // {-1, -0.5, 0, 0.5, 1}: scores in [-1, 1], P in [e^-2, 1], and every dot below is a sum
  // of at most 16 terms of 8 significant bits over a few binades, exact in fp32 (checked),
  // so the tensor-core model's accumulation order cannot matter.
  const int n = 16, d = 16;
  AttentionInputs in;
  in.dtype = fmt::bf16;
  in.softmax_scale = 0.25;
  in.q = Tensor4(1, 1, n, d);
  in.k = Tensor4(1, 1, n, d);
  in.v = Tensor4(1, 1, n, d);
  in.d_o = Tensor4(1, 1, n, d);
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < d; ++c) {
      const int h = (r * 7 + c * 13 + (r * c) % 5) % 11;
      in.q.at(0, 0, r, c) = 0.5 * ((h % 3) - 1);
      in.k.at(0, 0, r, c) = 0.5 * (((h / 3 + c) % 3) - 1);
      in.v.at(0, 0, r, c) = 0.5 * (((r + 2 * c + h) % 5) - 2);
      in.d_o->at(0, 0, r, c) = 0.5 * (((3 * r + c + h) % 5) - 2);
    }
  const AttentionOutputs got = run_attention(model, in, RunOptions{});
  // An exact sum that must also be an fp32 value (so no accumulation order can change it).
  auto exact_sum = [](const std::vector<double>& terms) {
    long double s = 0;
    for (double t : terms) s += t;
    REQUIRE(static_cast<long double>(static_cast<float>(s)) == s);
    return static_cast<double>(s);
  };
  std::vector<double> s(n * n), p(n * n), dp(n * n), delta(n), delta_mixed(n);
  for (int i = 0; i < n; ++i) {
    std::vector<double> prods;
    for (int c = 0; c < d; ++c) prods.push_back(bf16_rne(in.d_o->at(0, 0, i, c) * got.o.at(0, 0, i, c)));
    delta[i] = f32(exact_sum(prods));  // autocast: sum -> fp32, and D stays fp32
    delta_mixed[i] = bf16_rne(delta[i]);
    for (int j = 0; j < n; ++j) {
      std::vector<double> qk, dv;
      for (int c = 0; c < d; ++c) {
        qk.push_back(in.q.at(0, 0, i, c) * in.k.at(0, 0, j, c));
        dv.push_back(in.d_o->at(0, 0, i, c) * in.v.at(0, 0, j, c));
      }
      s[i * n + j] = bf16_rne(f32(bf16_rne(exact_sum(qk)) * 0.25));  // einsum -> bf16, * scale in bf16
      // p = exp(attn_weights - lse): bf16 minus fp32 promotes to fp32; exp autocasts to fp32.
      p[i * n + j] = f32(std::exp(f32(s[i * n + j] - got.lse.at(0, 0, i, 0))));
      dp[i * n + j] = bf16_rne(exact_sum(dv));
    }
  }
  auto gradients = [&](const std::vector<double>& dd, bool mixed, std::vector<double>& dq, std::vector<double>& dk,
                       std::vector<double>& dvv) {
    std::vector<double> ds(n * n);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        const double diff = mixed ? bf16_rne(f32(dp[i * n + j] - dd[i])) : f32(dp[i * n + j] - dd[i]);
        ds[i * n + j] = f32(f32(p[i * n + j] * 0.25) * diff);  // p * scale * (dp - D)
      }
    dq.assign(n * d, 0.0);
    dk.assign(n * d, 0.0);
    dvv.assign(n * d, 0.0);
    for (int a = 0; a < n; ++a)
      for (int c = 0; c < d; ++c) {
        std::vector<double> tq, tk, tv;
        for (int b = 0; b < n; ++b) {
          tq.push_back(bf16_rne(ds[a * n + b]) * in.k.at(0, 0, b, c));    // einsum(ds, k): ds cast to bf16
          tk.push_back(bf16_rne(ds[b * n + a]) * in.q.at(0, 0, b, c));    // einsum(ds, q)
          tv.push_back(bf16_rne(p[b * n + a]) * in.d_o->at(0, 0, b, c));  // einsum(p, do)
        }
        dq[a * d + c] = bf16_rne(exact_sum(tq));
        dk[a * d + c] = bf16_rne(exact_sum(tk));
        dvv[a * d + c] = bf16_rne(exact_sum(tv));
      }
  };
  std::vector<double> dq, dk, dv, dq_mixed, dk_mixed, dv_mixed;
  gradients(delta, false, dq, dk, dv);
  gradients(delta_mixed, true, dq_mixed, dk_mixed, dv_mixed);
  int differ_from_mixed = 0, fp32_only_delta = 0;
  for (int i = 0; i < n; ++i) {
    CAPTURE(i);
    CHECK(got.delta->at(0, 0, i, 0) == delta[i]);
    fp32_only_delta += delta[i] != delta_mixed[i] ? 1 : 0;
  }
  for (int x = 0; x < n * d; ++x) {
    CAPTURE(x);
    CHECK(got.dq->data[x] == dq[x]);
    CHECK(got.dk->data[x] == dk[x]);
    CHECK(got.dv->data[x] == dv[x]);
    differ_from_mixed += (dq[x] != dq_mixed[x]) + (dk[x] != dk_mixed[x]);
  }
  // The check has power: D is not a bf16 value in most rows, and the mixed setting the model
  // used before (D in bf16) gives other dQ, dK.
  CHECK(fp32_only_delta > n / 2);
  CHECK(differ_from_mixed > n * d / 4);
}
