// tests/test_cuda_expf.cpp: emu/cuda_expf (CUDA's expf without fast math, over an ex2 model)
// and the fa-bf16acc+cuda-expf variant that uses it.
//
// Contract: cuda_expf(x, ex2) equals, bit for bit, an evaluation of the PTX sequence written
// here from nvcc 13.0's output (sm_90, `nvcc -arch=sm_90 -ptx` of y = expf(x)) with MPFR at
// 24 bits for each fma.rn / fma.rm step (exact rounding of the exact fused result), the
// saturation and the power of two 2^k derived from j's value (not from its bits), and the
// ex2 step taken from: MPFR's exp2 rounded to 24 bits (for the correct ex2 model), or the
// H200 table model's evaluate() (the measured ex2, the sequence's one approximate primitive).
// Inputs x in [-87, 88.5], where every step and the result are normal fp32 (so 24-bit MPFR
// rounding is fp32 rounding), plus special values. CUDA documents expf's error as at most
// 2 ulp (CUDA C++ Programming Guide, "Single-Precision Floating-Point Functions"); that
// bound is checked against MPFR's exp for both ex2 models, and the sequence must differ from
// the correctly rounded expf on some inputs (else the variant would be a no-op).
#include <doctest/doctest.h>
#include <mpfr.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>

#include "attention/attention.hpp"
#include "emu/sfu/cuda_expf.hpp"
#include "emu/sfu/special_functions.hpp"
#include "formats/format.hpp"
#include "tests/bf16_reference.hpp"
#include "studies/scenarios.hpp"
#include "traces/sfu_sets.hpp"

namespace {

// An MPFR number of 24 bits (fp32's precision), unbounded exponent.
struct Mp24 {
  mpfr_t v;
  Mp24() { mpfr_init2(v, 24); }
  explicit Mp24(float x) : Mp24() { mpfr_set_flt(v, x, MPFR_RNDN); }
  ~Mp24() { mpfr_clear(v); }
  Mp24(const Mp24&) = delete;
  Mp24& operator=(const Mp24&) = delete;
  float get() const { return mpfr_get_flt(v, MPFR_RNDN); }  // exact: v holds 24 bits in fp32's normal range
};

float bits_to_float(std::uint32_t b) { return std::bit_cast<float>(b); }

// The PTX sequence, step by step, ex2 given.
template <class Ex2>
float reference_expf(float x, const Ex2& ex2) {
  Mp24 xv(x), t, u, j, a1, a2;
  Mp24 c_log2e_256(bits_to_float(0x3BBB989Du)), half(0.5f), c252(252.0f), magic(bits_to_float(0x4B400001u));
  Mp24 hi(bits_to_float(0x3FB8AA3Bu)), lo(bits_to_float(0x32A57060u));
  mpfr_fma(t.v, xv.v, c_log2e_256.v, half.v, MPFR_RNDN);  // fma.rn.f32 %f4
  // cvt.sat.f32.f32: [0, 1]
  if (mpfr_cmp_ui(t.v, 0) < 0) {
    mpfr_set_ui(u.v, 0, MPFR_RNDN);
  } else if (mpfr_cmp_ui(t.v, 1) > 0) {
    mpfr_set_ui(u.v, 1, MPFR_RNDN);
  } else {
    mpfr_set(u.v, t.v, MPFR_RNDN);
  }
  mpfr_fma(j.v, u.v, c252.v, magic.v, MPFR_RNDD);  // fma.rm.f32 %f8
  const double jd = mpfr_get_d(j.v, MPFR_RNDN);    // an integer below 2^24: exact
  REQUIRE(jd == std::floor(jd));
  const int n = static_cast<int>(jd - 12582912.0);  // j = 1.5 * 2^23 + n
  REQUIRE(n >= 1);
  REQUIRE(n <= 253);
  const int k = n - 127;
  Mp24 r;
  mpfr_set_si(r.v, -k, MPFR_RNDN);  // -(j - (1.5 * 2^23 + 127)), exact
  mpfr_fma(a1.v, xv.v, hi.v, r.v, MPFR_RNDN);
  mpfr_fma(a2.v, xv.v, lo.v, a1.v, MPFR_RNDN);
  const float e = ex2(a2.get());
  Mp24 result(e);
  mpfr_mul_2si(result.v, result.v, k, MPFR_RNDN);  // times 2^k: exact in the normal range
  return result.get();
}

float mpfr_exp2_24(float a) {
  Mp24 av(a), y;
  mpfr_exp2(y.v, av.v, MPFR_RNDN);
  return y.get();
}

// |y - exp(x)| in units of fp32's ulp at exp(x) (normal range), from a 64-bit MPFR exp.
double ulp_error(float x, float y) {
  mpfr_t e, d;
  mpfr_init2(e, 64);
  mpfr_init2(d, 64);
  mpfr_set_flt(d, x, MPFR_RNDN);
  mpfr_exp(e, d, MPFR_RNDN);
  const long exponent = mpfr_get_exp(e);  // e = m * 2^exponent, m in [1/2, 1)
  mpfr_set_flt(d, y, MPFR_RNDN);
  mpfr_sub(d, d, e, MPFR_RNDN);
  mpfr_mul_2si(d, d, 24 - exponent, MPFR_RNDN);  // ulp = 2^(exponent - 24)
  const double err = std::fabs(mpfr_get_d(d, MPFR_RNDN));
  mpfr_clear(e);
  mpfr_clear(d);
  return err;
}

int sample_count() {
  const char* scale = std::getenv("FLASHBITS_TEST_SCALE");
  return scale && std::string(scale) == "sanitizer" ? 5000 : 100000;
}

// Random fp32 in [-87, 88.5] plus points around the k steps and small arguments.
std::vector<float> inputs() {
  std::vector<float> xs = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 1e-30f, -1e-30f, 88.5f, -87.0f, 0.34657359f, 10.0f, -10.0f};
  std::mt19937_64 rng(35);
  std::uniform_real_distribution<float> wide(-87.0f, 88.5f), narrow(-2.0f, 2.0f);
  const int n = sample_count();
  for (int i = 0; i < n; ++i) xs.push_back(i % 4 == 0 ? narrow(rng) : wide(rng));
  return xs;
}

}  // namespace

TEST_CASE("cuda_expf over the correct ex2 is nvcc's expf sequence evaluated step by step with MPFR") {
  const auto ex2 = fb::make_correct_model(fb::SpecialFunction::ex2);
  int differs_from_correctly_rounded = 0;
  double worst = 0.0;
  for (float x : inputs()) {
    CAPTURE(x);
    const float got = fb::cuda_expf(x, *ex2);
    const float want = reference_expf(x, mpfr_exp2_24);
    REQUIRE(std::bit_cast<std::uint32_t>(got) == std::bit_cast<std::uint32_t>(want));
    Mp24 xv(x), e;
    mpfr_exp(e.v, xv.v, MPFR_RNDN);
    differs_from_correctly_rounded += got != e.get() ? 1 : 0;
    worst = std::max(worst, ulp_error(x, got));
  }
  MESSAGE("cuda_expf (correct ex2) differs from the correctly rounded expf on ", differs_from_correctly_rounded,
          " inputs; worst error ", worst, " ulp");
  CHECK(differs_from_correctly_rounded > 0);
  CHECK(worst <= 2.0);  // CUDA's documented bound for expf
}

TEST_CASE("cuda_expf over the H200's measured ex2 table is the same sequence with that ex2") {
  const auto set = fb::find_sfu_set("hw-sm90");
  REQUIRE(set.has_value());
  const auto& ex2 = *set->ex2;
  if (!ex2.hardware_measured()) {
    MESSAGE("hw-sm90 has no measured ex2 table here: skipped");
    return;
  }
  int differs_from_correct_ex2 = 0;
  double worst = 0.0;
  const auto correct = fb::make_correct_model(fb::SpecialFunction::ex2);
  for (float x : inputs()) {
    CAPTURE(x);
    const float got = fb::cuda_expf(x, ex2);
    const float want = reference_expf(x, [&](float a) { return ex2.evaluate(a); });
    REQUIRE(std::bit_cast<std::uint32_t>(got) == std::bit_cast<std::uint32_t>(want));
    differs_from_correct_ex2 += got != fb::cuda_expf(x, *correct) ? 1 : 0;
    worst = std::max(worst, ulp_error(x, got));
  }
  MESSAGE("with the H200 ex2: differs from the correct-ex2 sequence on ", differs_from_correct_ex2,
          " inputs; worst error ", worst, " ulp");
  CHECK(differs_from_correct_ex2 > 0);
  CHECK(worst <= 2.0);  // CUDA's documented bound, met by the measured ex2
}

TEST_CASE("cuda_expf special values follow the sequence: inf, -inf, NaN, overflow, zero") {
  const auto ex2 = fb::make_correct_model(fb::SpecialFunction::ex2);
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(fb::cuda_expf(inf, *ex2) == inf);
  CHECK(fb::cuda_expf(-inf, *ex2) == 0.0f);
  CHECK(std::isnan(fb::cuda_expf(std::numeric_limits<float>::quiet_NaN(), *ex2)));
  CHECK(fb::cuda_expf(100.0f, *ex2) == inf);  // 2^126 * ex2(~18.3) overflows in the final multiply
  CHECK(fb::cuda_expf(0.0f, *ex2) == 1.0f);
  CHECK(fb::cuda_expf(-120.0f, *ex2) == 0.0f);  // 2^-126 * ex2(~-47.1): the ftz ex2 flushes
  // A subnormal result from the final multiply (mul.rn.f32 keeps it): exp(-88) ~ 6.05e-39.
  const float tiny = fb::cuda_expf(-88.0f, *ex2);
  CHECK(tiny > 0.0f);
  CHECK(tiny < std::numeric_limits<float>::min());
}

TEST_CASE("fa-bf16acc+cuda-expf changes the model's exponentials and is refused elsewhere") {
  using namespace fb::attn;
  // The traced row's P-bar, before its bf16 cast (the model's bf16 l and O hide most of a
  // 1-ulp change in P-bar): each is exp of a bf16 argument x = bf16(S - m), which the plain
  // model's P-bar = fp32(exp(x)) gives back as bf16(log P-bar); under +cuda-expf each must be
  // cuda_expf(x) over the model's (correct) ex2, and some must differ from the plain one.
  const AttentionInputs in = make_scenario("random", 3, 1, 1, 256, 16, fb::formats::bf16, false);
  auto traced_p = [&](const std::string& name) {
    Tracer tracer;
    tracer.rows = {{0, 0, 255}};
    RunOptions opt;
    opt.tracer = &tracer;
    run_attention(parse_kernel_model(name, fb::formats::bf16), in, opt);
    std::vector<double> p;
    for (const TileRecord& t : tracer.traces.at(0).tiles) p.insert(p.end(), t.p.begin(), t.p.end());
    return p;
  };
  const std::vector<double> plain = traced_p("fa-bf16acc"), cuda = traced_p("fa-bf16acc+cuda-expf");
  REQUIRE(plain.size() == 256);
  REQUIRE(cuda.size() == plain.size());
  const auto ex2 = fb::make_correct_model(fb::SpecialFunction::ex2);
  int differ = 0, checked = 0;
  for (std::size_t j = 0; j < plain.size(); ++j) {
    if (plain[j] == 0.0) continue;
    const double x = bf16_rne(std::log(plain[j]));
    CAPTURE(j);
    CAPTURE(x);
    REQUIRE(plain[j] == static_cast<double>(static_cast<float>(std::exp(x))));
    CHECK(cuda[j] == static_cast<double>(fb::cuda_expf(static_cast<float>(x), *ex2)));
    differ += cuda[j] != plain[j] ? 1 : 0;
    ++checked;
  }
  MESSAGE("P-bar entries that differ from the correctly rounded exp: ", differ, " of ", checked);
  CHECK(checked > 200);
  CHECK(differ > 0);
  CHECK_THROWS_WITH_AS(parse_kernel_model("fa2-sm80+cuda-expf", fb::formats::bf16),
                       doctest::Contains("applies to fa-bf16acc only"), std::invalid_argument);
}
