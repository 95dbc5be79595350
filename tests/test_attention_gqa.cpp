// tests/test_attention_gqa.cpp: grouped-query attention (k and v with fewer heads than q).
//
// The reference is the definition FA2 and SDPA (enable_gqa) share: GQA is multi-head
// attention with each k/v head repeated over its group of q heads (repeat_interleave, so q
// head h reads k/v head h / group). So a GQA run must equal, bit for bit, the multi-head run
// of the same model on explicitly repeated k and v, for O, LSE, delta and dQ. dK and dV are
// what FA2's mha_bwd makes of the per-q-head gradients: each head's gradient as written
// (the output format), summed over the group in fp32 (PyTorch's reduction, assumed
// sequential) and rounded once; the test forms that sum with native float additions and
// rounds with the independent bf16 rounding of tests/bf16_reference.hpp. The exact and the
// correctly rounded references are checked the same way for the forward and dQ, and their
// dK, dV against the exact sum of the repeated run's.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "attention/attention.hpp"
#include "attention/fp8_quant.hpp"
#include "attention/kernel_models.hpp"
#include "tests/bf16_reference.hpp"
#include "tests/test_scale.hpp"
#include "studies/scenarios.hpp"

using namespace fb;
using namespace fb::attn;

namespace {

Tensor4 repeat_heads(const Tensor4& t, int group) {
  Tensor4 out(t.batch, t.heads * group, t.rows, t.cols);
  for (int b = 0; b < t.batch; ++b)
    for (int h = 0; h < out.heads; ++h)
      for (int r = 0; r < t.rows; ++r)
        for (int c = 0; c < t.cols; ++c) out.at(b, h, r, c) = t.at(b, h / group, r, c);
  return out;
}

void check_equal(const Tensor4& got, const Tensor4& want, const char* what) {
  CAPTURE(what);
  REQUIRE(got.data.size() == want.data.size());
  std::size_t differ = 0;
  for (std::size_t i = 0; i < got.data.size(); ++i)
    differ += !(got.data[i] == want.data[i] || (std::isnan(got.data[i]) && std::isnan(want.data[i])));
  CHECK(differ == 0);
}

}  // namespace

TEST_CASE("grouped-query attention equals multi-head attention on repeated k and v") {
  const char* const models[] = {"fa2-sm80",        "fa2-sm90",   "pytorch-fa2-sm90", "standard-bf16",
                                "triton-tutorial", "fa-bf16acc", "fa2-sm80+dynmax",  "fa2-sm80+o-fp32"};
  // The sanitizer build runs one model of each backward kind.
  const bool sanitizer = fb_test::sanitizer_scale();
  for (const char* model_name : models) {
    const std::string name = model_name;
    if (sanitizer && name != "fa2-sm80" && name != "triton-tutorial" && name != "fa-bf16acc") continue;
    CAPTURE(model_name);
    const ModelHandle model = parse_kernel_model(model_name, formats::bf16);
    // Plain variables, not structured bindings: clang 14 cannot capture bindings (CAPTURE).
    for (const std::pair<int, int>& shape : {std::pair{4, 2}, std::pair{4, 1}, std::pair{6, 3}}) {
      const int heads = shape.first, kv_heads = shape.second;
      CAPTURE(heads);
      CAPTURE(kv_heads);
      for (const char* scenario : {"random", "sink"}) {
        CAPTURE(scenario);
        const AttentionInputs gqa = make_scenario(scenario, 11, 2, heads, 40, 16, formats::bf16, true, kv_heads);
        REQUIRE(gqa.k.heads == kv_heads);
        AttentionInputs mha = gqa;
        const int group = heads / kv_heads;
        mha.k = repeat_heads(gqa.k, group);
        mha.v = repeat_heads(gqa.v, group);
        RunOptions opt;
        opt.block_n = 16;  // three KV tiles, the last ragged
        const AttentionOutputs got = run_attention(model, gqa, opt);
        const AttentionOutputs want = run_attention(model, mha, opt);
        check_equal(got.o, want.o, "o");
        check_equal(got.lse, want.lse, "lse");
        check_equal(*got.delta, *want.delta, "delta");
        check_equal(*got.dq, *want.dq, "dq");
        REQUIRE(got.dk->heads == kv_heads);
        for (const bool is_dk : {true, false}) {
          const Tensor4* got_t = is_dk ? &*got.dk : &*got.dv;
          const Tensor4* want_t = is_dk ? &*want.dk : &*want.dv;
          CAPTURE(is_dk);
          std::size_t differ = 0;
          for (int b = 0; b < got_t->batch; ++b)
            for (int hk = 0; hk < kv_heads; ++hk)
              for (int r = 0; r < got_t->rows; ++r)
                for (int c = 0; c < got_t->cols; ++c) {
                  float sum = 0.0f;
                  for (int h = hk * group; h < (hk + 1) * group; ++h) sum += static_cast<float>(want_t->at(b, h, r, c));
                  differ += got_t->at(b, hk, r, c) != bf16_rne(sum);
                }
          CHECK(differ == 0);
        }
      }
    }
  }
}

TEST_CASE("grouped-query attention: the exact and correctly rounded references") {
  const AttentionInputs gqa = make_scenario("random", 5, 1, 4, 24, 8, formats::bf16, true, 2);
  AttentionInputs mha = gqa;
  mha.k = repeat_heads(gqa.k, 2);
  mha.v = repeat_heads(gqa.v, 2);
  const AttentionOutputs got = exact_attention(gqa), want = exact_attention(mha);
  check_equal(got.o, want.o, "o");
  check_equal(got.lse, want.lse, "lse");
  check_equal(*got.dq, *want.dq, "dq");
  for (const bool is_dk : {true, false}) {
    const Tensor4* got_t = is_dk ? &*got.dk : &*got.dv;
    const Tensor4* want_t = is_dk ? &*want.dk : &*want.dv;
    for (int hk = 0; hk < 2; ++hk)
      for (int r = 0; r < 24; ++r)
        for (int c = 0; c < 8; ++c) {
          // The group's sum of the repeated run's gradients (each a double of the exact value).
          const double want_sum = want_t->at(0, 2 * hk, r, c) + want_t->at(0, 2 * hk + 1, r, c);
          CHECK(std::fabs(got_t->at(0, hk, r, c) - want_sum) <= 1e-12 * (1 + std::fabs(want_sum)));
        }
  }
  const ModelHandle cr = parse_kernel_model("correctly-rounded", formats::bf16);
  const AttentionOutputs cr_got = run_attention(cr, gqa, RunOptions{});
  check_equal(cr_got.o, run_attention(cr, mha, RunOptions{}).o, "correctly rounded o");
  REQUIRE(cr_got.dk->heads == 2);
  for (std::size_t i = 0; i < cr_got.dk->data.size(); ++i) CHECK(cr_got.dk->data[i] == bf16_rne(got.dk->data[i]));
}

TEST_CASE("grouped-query attention: shapes that do not divide are refused") {
  AttentionInputs in = make_scenario("random", 1, 1, 4, 8, 8, formats::bf16, false, 2);
  in.k = make_scenario("random", 1, 1, 3, 8, 8, formats::bf16, false).k;
  in.v = in.k;
  CHECK_THROWS_AS(run_attention(parse_kernel_model("fa2-sm80", formats::bf16), in, RunOptions{}),
                  std::invalid_argument);
  CHECK_THROWS_AS(make_scenario("random", 1, 1, 4, 8, 8, formats::bf16, false, 3), std::invalid_argument);
}

// The fp8 kernels: FA3 takes its descales per (batch, kv head), so under GQA one q scale
// (amax over the group's q heads) serves the whole group, while K and V keep one scale per
// kv head. The references: (1) with +block-quant, scales are per q head and per k/v block,
// so GQA must equal the multi-head run on repeated k/v; (2) per-tensor, when every q head of
// a group has the same amax (one shared largest element) the group scale is each head's own
// scale, so GQA must again equal the repeated run; (3) in general the group's q scale is the
// largest of its heads' own scales (fp32(amax / 448) is monotone in amax), taken from the
// multi-head quantisation.
TEST_CASE("grouped-query attention on the fp8 kernels") {
  const int heads = 4, kv_heads = 2, group = 2, n = 48, d = 16;
  for (const char* model_name : {"fa3-fp8-sm90", "fa3-fp8-sm90+block-quant", "fa3-fp8-sm90+hadamard", "standard-fp8"}) {
    CAPTURE(model_name);
    const ModelHandle model = parse_kernel_model(model_name, formats::bf16);
    for (const char* scenario : {"random", "sink"}) {
      CAPTURE(scenario);
      AttentionInputs gqa = make_scenario(scenario, 7, 2, heads, n, d, formats::bf16, true, kv_heads);
      const bool per_tensor = std::string(model_name).find("block-quant") == std::string::npos;
      if (per_tensor) {
        // One shared largest |q| in every head (and, with +hadamard, after the transform the
        // amaxes differ again: that model is checked by (3) below only).
        double largest = 1.0;  // a power of two above every |q| (exact in bf16)
        for (const double x : gqa.q.data)
          while (std::fabs(x) >= largest) largest *= 2;
        for (int b = 0; b < gqa.q.batch; ++b)
          for (int h = 0; h < heads; ++h) gqa.q.at(b, h, 3, 5) = -largest;
      }
      AttentionInputs mha = gqa;
      mha.k = repeat_heads(gqa.k, group);
      mha.v = repeat_heads(gqa.v, group);
      RunOptions opt;
      opt.block_n = 16;
      opt.block_m = 16;
      const Fp8Quantisation& spec = model.recipe->fp8;
      const Fp8Inputs gq = quantise_fp8_inputs(spec, gqa, opt.block_m, opt.block_n, opt.seed, false);
      const Fp8Inputs mq = quantise_fp8_inputs(spec, mha, opt.block_m, opt.block_n, opt.seed, false);
      // (3) q's descale: the group's largest per-head scale, for every head of the group;
      // k's and v's: the first head of each repeated group's.
      REQUIRE(gq.q_descale.size() == mq.q_descale.size());
      REQUIRE(gq.k_descale.size() * group == mq.k_descale.size());
      const int qb = gq.q_blocks, kb = gq.kv_blocks;
      for (int b = 0; b < 2; ++b)
        for (int h = 0; h < heads; ++h)
          for (int blk = 0; blk < qb; ++blk) {
            double want = mq.q_descale[(static_cast<std::size_t>(b) * heads + h) * qb + blk];
            if (!spec.block)
              for (int g = (h / group) * group; g < (h / group + 1) * group; ++g)
                want = std::max(want, mq.q_descale[(static_cast<std::size_t>(b) * heads + g) * qb + blk]);
            CHECK(gq.q_descale[(static_cast<std::size_t>(b) * heads + h) * qb + blk] == want);
          }
      for (int b = 0; b < 2; ++b)
        for (int hk = 0; hk < kv_heads; ++hk)
          for (int blk = 0; blk < kb; ++blk) {
            const std::size_t at = (static_cast<std::size_t>(b) * kv_heads + hk) * kb + blk;
            const std::size_t from = (static_cast<std::size_t>(b) * heads + hk * group) * kb + blk;
            CHECK(gq.k_descale[at] == mq.k_descale[from]);
            CHECK(gq.v_descale[at] == mq.v_descale[from]);
          }
      if (std::string(model_name).find("hadamard") != std::string::npos) continue;
      // (1), (2): the whole forward and delta equal the repeated run's.
      const AttentionOutputs got = run_attention(model, gqa, opt);
      const AttentionOutputs want = run_attention(model, mha, opt);
      check_equal(got.o, want.o, "o");
      check_equal(got.lse, want.lse, "lse");
      check_equal(*got.delta, *want.delta, "delta");
    }
  }
}
