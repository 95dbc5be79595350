// tests/test_attention_lengths.cpp: a key length Nk other than the query length N (decoding
// with a KV cache, cross-attention), causal masks aligned bottom-right as FA2 >= 2.1 aligns
// them (csrc/flash_attn/src/mask.h: query row i sees keys j <= i + Nk - N).
//
// The references, each independent of the engine's code for the case:
// - MPFR at 1024 bits (tests/mpfr_attention.hpp, from the definitions), the bottom-right rule spelled
//   out again, against exact_attention (long double): O, LSE, delta, dQ, dK, dV for N < Nk,
//   N > Nk (rows above the corner see nothing: O = 0, LSE = +inf, zero gradients) and N = 1.
// - Every kernel model in exact arithmetic (every rounding the identity) against
//   exact_attention, forward and backward: the tiling, KV order, masks, row-block logic and
//   backward loops of each structure with N != Nk.
// - Consistency of the hardware arithmetic: a decode (N = 1, and the last few rows) is the
//   last rows of the square problem with the same keys, bit for bit, for every model whose
//   forward rows depend only on their own query row and the KV tiling (every model but the
//   fp8 ones, whose Q scale is an amax over the rows, and the Triton tutorial's causal band,
//   which depends on the row block); non-causal likewise.
// - Grouped-query attention on the fp8 kernels with N != Nk equals the multi-head run on
//   repeated k and v (K and V descales per kv head, per KV block with +block-quant).
#include <doctest/doctest.h>
#include <mpfr.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "attention/attention.hpp"
#include "attention/kernel_models.hpp"
#include "studies/scenarios.hpp"
#include "tests/always_causal_reference.hpp"
#include "tests/empty_row_lse.hpp"
#include "tests/mpfr_attention.hpp"
#include "tests/tensor_compare.hpp"

using namespace fb;
using namespace fb::attn;
using fb::test::check_all_close;
using fb::test::max_rel_diff;
using fb::test::MpAttention;
using fb::test::same_bits;

namespace {

// Inputs of N query rows and Nk keys, one head; `top_left`: the causal mask aligned top-left.
AttentionInputs inputs(const char* scenario, std::uint64_t seed, int n, int nk, int d, bool causal,
                       bool top_left = false) {
  AttentionInputs in = make_scenario(scenario, seed, 1, 1, n, d, formats::bf16, true, 0, nk);
  in.causal = causal;
  if (top_left) in.causal_alignment = AttentionInputs::CausalAlignment::top_left;
  return in;
}

// Rows [first, first + count) of t (every batch and head).
Tensor4 last_rows(const Tensor4& t, int count) {
  Tensor4 out(t.batch, t.heads, count, t.cols);
  for (int b = 0; b < t.batch; ++b)
    for (int h = 0; h < t.heads; ++h)
      for (int r = 0; r < count; ++r)
        for (int c = 0; c < t.cols; ++c) out.at(b, h, r, c) = t.at(b, h, t.rows - count + r, c);
  return out;
}

}  // namespace

TEST_CASE("make_scenario with another key length: q the last rows, k and v the first keys of the square one") {
  const AttentionInputs square = make_scenario("sink", 3, 1, 2, 20, 8, formats::bf16, true);
  const AttentionInputs decode = make_scenario("sink", 3, 1, 2, 4, 8, formats::bf16, true, 0, 20);
  CHECK(decode.q.rows == 4);
  CHECK(decode.k.rows == 20);
  CHECK(same_bits(decode.q, last_rows(square.q, 4)));
  CHECK(same_bits(*decode.d_o, last_rows(*square.d_o, 4)));
  CHECK(same_bits(decode.k, square.k));
  const AttentionInputs cross = make_scenario("random", 3, 1, 1, 20, 8, formats::bf16, false, 0, 6);
  CHECK(cross.q.rows == 20);
  CHECK(cross.k.rows == 6);
  CHECK(cross.v.rows == 6);
}

TEST_CASE("exact_attention with N != Nk agrees with MPFR, causal aligned bottom-right") {
  const int d = 8;
  for (const std::pair<int, int>& lengths : {std::pair{5, 11}, std::pair{11, 5}, std::pair{1, 9}, std::pair{7, 1}}) {
    const int n = lengths.first, nk = lengths.second;
    for (int mask = 0; mask < 3; ++mask) {
      const bool causal = mask > 0, top_left = mask == 2;
      CAPTURE(n);
      CAPTURE(nk);
      CAPTURE(causal);
      CAPTURE(top_left);
      const AttentionInputs in = inputs("random", 77, n, nk, d, causal, top_left);
      REQUIRE(in.q.rows == n);
      REQUIRE(in.k.rows == nk);
      const AttentionOutputs got = exact_attention(in);
      REQUIRE(got.dk->rows == nk);
      REQUIRE(got.dq->rows == n);
      // Bottom-right: the last query row's diagonal is the last key; top-left: row r's is key r.
      const MpAttention want = fb::test::mpfr_attention(
          in, [&](int r) { return causal ? std::max(0, std::min(nk, r + 1 + (top_left ? 0 : nk - n))) : nk; });
      check_all_close(got, want);
    }
  }
}

TEST_CASE("every kernel model with N != Nk in exact arithmetic equals the exact reference") {
  // Tiles of 8 keys over 37 (or 13) keys and row blocks of 16: several rescalings, a ragged
  // last tile, and causal row blocks that straddle the shifted diagonal.
  std::vector<std::string> names;
  for (const KernelModel& m : base_kernel_models(formats::bf16))
    if (m.input != formats::fp16 && m.structure != Structure::correctly_rounded) names.push_back(m.base);
  names.push_back("fa-bf16acc+visit-masked-tiles");
  names.push_back("fa2-sm80+dynmax");
  names.push_back("fa3-fp8-sm90+block-quant");
  for (const std::pair<int, int>& lengths :
       {std::pair{9, 37}, std::pair{37, 13}, std::pair{1, 37}, std::pair{37, 37}}) {
    for (int mask = 0; mask < 3; ++mask) {  // not causal, causal bottom-right, causal top-left
      const bool causal = mask > 0;
      const AttentionInputs in = inputs("random", 5, lengths.first, lengths.second, 16, causal, mask == 2);
      const AttentionOutputs ref = exact_attention(in);
      for (const std::string& name : names) {
        CAPTURE(name);
        CAPTURE(lengths.first);
        CAPTURE(lengths.second);
        CAPTURE(causal);
        const ModelHandle model = parse_kernel_model(name, formats::bf16);
        if (!unmodelled_shape(*model.recipe, run_shape(in)).empty()) continue;
        RunOptions opt;
        opt.exact_arithmetic = true;
        opt.block_m = 16;
        opt.block_n = model.recipe->sw_exp2 ? 32 : 8;
        const AttentionOutputs got = run_attention(model, in, opt);
        // Qiu & Yao's masked tiles each add their sum's clamp, EPSILON = 1e-10, to ℓ (as in
        // the square case): a few 1e-10 relative, not a masking error (which is ~1e-2).
        const double tol = model.recipe->visit_masked_tiles && causal ? 1e-8 : 1e-12;
        REQUIRE(got.o.rows == lengths.first);
        CHECK(max_rel_diff(got.o, ref.o) < tol);
        // The reference's LSE of a row that sees no key is +inf; the kernel's is its source's.
        Tensor4 want_lse = ref.lse;
        for (double& x : want_lse.data)
          if (x == INFINITY) x = fb::test::source_empty_row_lse(name);
        CHECK(max_rel_diff(got.lse, want_lse) < tol);
        REQUIRE(got.delta.has_value());
        CHECK(max_rel_diff(*got.delta, *ref.delta) < tol);
        if (!got.dq) continue;  // forward-only recipes
        REQUIRE(got.dk->rows == lengths.second);
        if (model.recipe->bwd_always_causal && !causal) {  // the tutorial's backward: its own formula
          const fb::test::Gradients want = fb::test::always_causal_gradients(in, ref);
          CHECK(max_rel_diff(*got.dq, want.dq) < 1e-9);
          CHECK(max_rel_diff(*got.dk, want.dk) < 1e-9);
          CHECK(max_rel_diff(*got.dv, want.dv) < 1e-9);
          continue;
        }
        CHECK(max_rel_diff(*got.dq, *ref.dq) < tol);
        CHECK(max_rel_diff(*got.dk, *ref.dk) < tol);
        CHECK(max_rel_diff(*got.dv, *ref.dv) < tol);
      }
    }
  }
}

TEST_CASE(
    "rows above the causal corner (N > Nk) get O = 0 and their source's LSE in every model, hardware "
    "arithmetic") {
  const AttentionInputs in = inputs("random", 9, 20, 6, 16, true);
  int minus_inf_models = 0;
  for (const KernelModel& m : base_kernel_models(formats::bf16)) {
    if (m.input == formats::fp16 || !unmodelled_shape(m, run_shape(in)).empty()) continue;
    CAPTURE(m.base);
    const ModelHandle model = parse_kernel_model(m.base, formats::bf16);
    RunOptions opt;
    opt.block_n = model.recipe->sw_exp2 ? 32 : 8;
    const AttentionOutputs got = run_attention(model, in, opt);
    const double empty_lse = fb::test::source_empty_row_lse(m.base);
    minus_inf_models += empty_lse < 0 ? 1 : 0;
    for (int r = 0; r < 20; ++r) {
      CAPTURE(r);
      const bool above = r < 20 - 6;
      CHECK((got.lse.at(0, 0, r, 0) == empty_lse) == above);
      if (got.lse_log2) CHECK((got.lse_log2->at(0, 0, r, 0) == -INFINITY) == above);
      if (!above) continue;
      for (int c = 0; c < 16; ++c) CHECK(got.o.at(0, 0, r, c) == 0.0);
      if (got.dq)
        for (int c = 0; c < 16; ++c) CHECK(got.dq->at(0, 0, r, c) == 0.0);
    }
    for (double x : got.o.data) CHECK(std::isfinite(x));
    if (got.dk)
      for (double x : got.dk->data) CHECK(std::isfinite(x));
  }
  CHECK(minus_inf_models >= 6);  // fa3, fa4, ck, the two tutorials, flex (decoding is fp16-free too)
}

TEST_CASE("a decode is the last rows of the square problem, bit for bit (hardware arithmetic)") {
  // The same keys: q of the decode is the square problem's last rows (make_scenario), so with
  // the bottom-right diagonal each decode row sees exactly the keys its square row sees.
  const int nk = 70, d = 32;
  const AttentionInputs square_in = make_scenario("sink", 21, 1, 2, nk, d, formats::bf16, false);
  for (const KernelModel& m : base_kernel_models(formats::bf16)) {
    if (m.input == formats::fp16 || m.fp8.enabled) continue;  // fp8: Q's scale is an amax over the rows
    for (bool causal : {false, true}) {
      // The Triton tutorial's causal on-band tiles are a row block's: not a per-row fact.
      if (causal && m.causal_band_two_step_exponent) continue;
      for (int n : {1, 5}) {
        CAPTURE(m.base);
        CAPTURE(causal);
        CAPTURE(n);
        // FlexAttention's decoding kernel runs no square problem of 70 rows: refused.
        if (!unmodelled_shape(m, nk, nk, causal).empty()) continue;
        const ModelHandle model = parse_kernel_model(m.base, formats::bf16);
        AttentionInputs square = square_in, decode = make_scenario("sink", 21, 1, 2, n, d, formats::bf16, false, 0, nk);
        square.causal = decode.causal = causal;
        RunOptions opt;
        opt.block_n = model.recipe->sw_exp2 ? 32 : 16;
        const AttentionOutputs full = run_attention(model, square, opt);
        const AttentionOutputs dec = run_attention(model, decode, opt);
        CHECK(same_bits(dec.o, last_rows(full.o, n)));
        CHECK(same_bits(dec.lse, last_rows(full.lse, n)));
      }
    }
  }
}

TEST_CASE("the Triton tutorial's causal band follows the shifted diagonal") {
  // Rows of one row block: for a decode row the on-band tiles start at its diagonal key, so a
  // one-row decode with the row block of one row equals the square problem's last row when the
  // square problem's row blocks are one row too (block_m = 1: every tile from the row's own
  // diagonal tile on is on-band in both).
  const int nk = 40, d = 16;
  const ModelHandle model = parse_kernel_model("triton-tutorial", formats::bf16);
  AttentionInputs square = make_scenario("random", 4, 1, 1, nk, d, formats::bf16, false);
  AttentionInputs decode = make_scenario("random", 4, 1, 1, 1, d, formats::bf16, false, 0, nk);
  square.causal = decode.causal = true;
  RunOptions opt;
  opt.block_m = 1;
  opt.block_n = 8;
  const AttentionOutputs full = run_attention(model, square, opt);
  const AttentionOutputs dec = run_attention(model, decode, opt);
  CHECK(same_bits(dec.o, last_rows(full.o, 1)));
  CHECK(same_bits(dec.lse, last_rows(full.lse, 1)));
}

TEST_CASE("grouped-query attention on the fp8 kernels with N != Nk equals multi-head on repeated k and v") {
  const int heads = 4, kv_heads = 2, group = 2, d = 16;
  for (const char* model_name : {"fa3-fp8-sm90", "fa3-fp8-sm90+block-quant", "standard-fp8", "fa4-fp8-sm100"}) {
    for (const std::pair<int, int>& lengths : {std::pair{8, 40}, std::pair{40, 24}}) {
      for (bool causal : {false, true}) {
        CAPTURE(model_name);
        CAPTURE(lengths.first);
        CAPTURE(causal);
        const ModelHandle model = parse_kernel_model(model_name, formats::bf16);
        AttentionInputs gqa =
            make_scenario("random", 7, 2, heads, lengths.first, d, formats::bf16, true, kv_heads, lengths.second);
        gqa.causal = causal;
        // Per-tensor scaling takes Q's scale over each group of q heads: one shared largest
        // |q| in every head makes it each head's own (as tests/test_attention_gqa.cpp).
        double largest = 1.0;
        for (const double x : gqa.q.data)
          while (std::fabs(x) >= largest) largest *= 2;
        for (int b = 0; b < 2; ++b)
          for (int h = 0; h < heads; ++h) gqa.q.at(b, h, 0, 3) = -largest;
        AttentionInputs mha = gqa;
        Tensor4 k(2, heads, lengths.second, d), v(2, heads, lengths.second, d);
        for (int b = 0; b < 2; ++b)
          for (int h = 0; h < heads; ++h)
            for (int r = 0; r < lengths.second; ++r)
              for (int c = 0; c < d; ++c) {
                k.at(b, h, r, c) = gqa.k.at(b, h / group, r, c);
                v.at(b, h, r, c) = gqa.v.at(b, h / group, r, c);
              }
        mha.k = k;
        mha.v = v;
        RunOptions opt;
        opt.block_m = 16;
        opt.block_n = std::string(model_name).rfind("fa4", 0) == 0 ? 32 : 16;
        const AttentionOutputs got = run_attention(model, gqa, opt);
        const AttentionOutputs want = run_attention(model, mha, opt);
        CHECK(same_bits(got.o, want.o));
        CHECK(same_bits(got.lse, want.lse));
        REQUIRE(got.delta.has_value());
        CHECK(same_bits(*got.delta, *want.delta));
      }
    }
  }
}

TEST_CASE("shapes: k and v of different lengths are refused, naming both") {
  AttentionInputs in = inputs("random", 1, 8, 12, 8, false);
  in.v = Tensor4(1, 1, 11, 8);
  const ModelHandle model = parse_kernel_model("fa2-sm80", formats::bf16);
  CHECK_THROWS_WITH_AS(run_attention(model, in, RunOptions{}),
                       "attention: k and v must have the same length (12 and 11)", std::invalid_argument);
}
