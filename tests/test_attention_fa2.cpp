// tests/test_attention_fa2.cpp: the orchestration of the FA2 forward.
//
// An independent, deliberately plain transcription of FA2's forward for one query row
// (csrc/flash_attn/src/softmax.h: reduce_max with the previous max folded in,
// softmax_rescale_o, scale_apply_exp2 as one FFMA, per-thread reduce_sum over the
// columns {2t, 2t+1} + 8i, quad_allreduce_ at the end, normalize_softmax_lse) written
// with the same scalar and dot models (fb::fused_dot, the correct-rounding SFU set,
// std::fmaf, fb::round_double), compared element for element with run_attention().
// Also: the tracer records a consistent story and costs nothing in the results.
// PyTorch's build (pytorch-fa2-sm80/sm90) forms the exponent argument as FMUL then FADD
// (softmax.h UNFUSE_FMA): on a row built so that the FFMA and the two roundings differ
// (found by search here, each argument computed in exact arithmetic and rounded as the
// kernel rounds it), every P̄ must be the MPFR ex2 of the unfused argument.
#include <doctest/doctest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <numbers>
#include <string>
#include <vector>

#include "attention/attention.hpp"
#include "emu/ops.hpp"
#include "emu/sfu/special_functions.hpp"
#include "emu/dot/tensor_core.hpp"
#include "tests/bf16_reference.hpp"
#include "tests/mpfr_sfu_reference.hpp"
#include "studies/scenarios.hpp"

using namespace fb;
using namespace fb::attn;

namespace {

float ftz(float x) { return std::fabs(x) < FLT_MIN ? std::copysign(0.0f, x) : x; }
// The independent bf16 RNE (tests/bf16_reference.hpp), not the library's rounding: every
// value rounded here is zero or fp32-normal (P-bar from the ftz ex2, O after ftz()).
float to_bf16(float x) { return static_cast<float>(bf16_rne(x)); }

struct PlainResult {
  std::vector<float> o;
  float lse;
};

PlainResult plain_fa2_row(const AttentionInputs& in, const char* tc_name, int row, int block_n) {
  const TensorCoreModel& tc = *find_tensor_core_model(tc_name, formats::bf16);
  const SfuSet sfu = correct_sfu_set();
  const int n = in.q.rows, d = in.q.cols;
  const int visible = in.causal ? row + 1 : n;
  const double scale = in.softmax_scale;
  const float scale_log2 = static_cast<float>(scale * M_LOG2E);
  std::vector<float> q(d), kj(d), vcol(block_n), s(block_n), p(block_n);
  for (int c = 0; c < d; ++c) q[c] = static_cast<float>(in.q.at(0, 0, row, c));
  float row_max = -INFINITY;
  float row_sum[4] = {0, 0, 0, 0};
  std::vector<float> acc_o(d, 0.0f);
  const int n_blocks = (visible + block_n - 1) / block_n;
  for (int nb = n_blocks - 1; nb >= 0; --nb) {
    const int first = nb * block_n, count = std::min(visible, first + block_n) - first;
    for (int j = 0; j < count; ++j) {
      for (int c = 0; c < d; ++c) kj[c] = static_cast<float>(in.k.at(0, 0, first + j, c));
      s[j] = fused_dot(tc, 0.0f, q.data(), kj.data(), d);
    }
    const float prev_max = row_max;
    for (int j = 0; j < count; ++j) row_max = std::max(row_max, s[j]);
    // softmax_rescale_o: `row_sum *= scores_scale` is contracted by nvcc with the next
    // `row_sum += p` into one FFMA per thread (seen in PyTorch's FA2 SASS on H200); a thread
    // with no column in this tile keeps the plain product.
    float scores_scale = 1.0f;
    const bool rescale = nb != n_blocks - 1;
    if (rescale) {
      const float cur = row_max == -INFINITY ? 0.0f : row_max;
      scores_scale = sfu.ex2->evaluate(ftz(ftz(prev_max - cur) * scale_log2));
      for (float& x : acc_o) x = ftz(x * scores_scale);
    }
    bool pending[4] = {rescale, rescale, rescale, rescale};
    const float max_scaled = row_max == -INFINITY ? 0.0f : ftz(row_max * scale_log2);
    for (int j = 0; j < count; ++j) {
      p[j] = sfu.ex2->evaluate(ftz(std::fmaf(s[j], scale_log2, -max_scaled)));
      const int thread = (j % 8) / 2;
      row_sum[thread] =
          pending[thread] ? ftz(std::fmaf(row_sum[thread], scores_scale, p[j])) : ftz(row_sum[thread] + p[j]);
      pending[thread] = false;
    }
    for (int t = 0; t < 4; ++t)
      if (pending[t]) row_sum[t] = ftz(row_sum[t] * scores_scale);
    for (int j = 0; j < count; ++j) p[j] = to_bf16(p[j]);
    for (int c = 0; c < d; ++c) {
      for (int j = 0; j < count; ++j) vcol[j] = static_cast<float>(in.v.at(0, 0, first + j, c));
      acc_o[c] = fused_dot(tc, acc_o[c], p.data(), vcol.data(), count);
    }
  }
  const float sum = ftz(ftz(row_sum[0] + row_sum[2]) + ftz(row_sum[1] + row_sum[3]));
  const bool empty = sum == 0.0f || sum != sum;
  const float inv = empty ? 1.0f : sfu.rcp->evaluate(sum);
  PlainResult res;
  for (int c = 0; c < d; ++c) res.o.push_back(to_bf16(ftz(acc_o[c] * inv)));
  res.lse = empty ? INFINITY : ftz(std::fmaf(row_max, static_cast<float>(scale), fast_log(sfu, sum)));
  return res;
}

void compare_with_plain(const char* model, const char* tc, const AttentionInputs& in, int block_n_override,
                        int default_block_n) {
  CAPTURE(model);
  RunOptions opt;
  opt.block_n = block_n_override;
  const AttentionOutputs got = run_attention(parse_kernel_model(model, formats::bf16), in, opt);
  const int bn = block_n_override > 0 ? block_n_override : default_block_n;
  for (int r = 0; r < in.q.rows; ++r) {
    CAPTURE(r);
    const PlainResult want = plain_fa2_row(in, tc, r, bn);
    for (int c = 0; c < in.q.cols; ++c) REQUIRE(got.o.at(0, 0, r, c) == static_cast<double>(want.o[c]));
    REQUIRE(got.lse.at(0, 0, r, 0) == static_cast<double>(want.lse));
  }
}

// FA2's dot_do_o (flash_bwd_preprocess_kernel.h, compute_dot_do_o): a row is shared by
// kBlockKSmem / 8 threads (kBlockKSmem = 64 when the padded head dim is a multiple of 64,
// else 32); each thread multiplies its 8 contiguous columns of every kBlockKSmem-wide chunk
// and sums them in order in fp32 (first product, then FFMAs; fast math flushes subnormals),
// then Allreduce<threads>: every thread adds the value of its partner at xor threads/2, ...,
// xor 1. Padding columns (head dim rounded up to 32) are zero.
float plain_fa2_delta(const std::vector<float>& d_o, const std::vector<float>& o) {
  const int d = static_cast<int>(o.size());
  const int padded = (d + 31) / 32 * 32;
  const int chunk = padded % 64 == 0 ? 64 : 32;
  const int threads = chunk / 8;
  std::vector<float> value(threads);
  for (int t = 0; t < threads; ++t) {
    float acc = 0.0f;
    bool first = true;
    for (int base = 0; base < padded; base += chunk)
      for (int e = 0; e < 8; ++e) {
        const int col = base + 8 * t + e;
        const float x = col < d ? d_o[col] : 0.0f, y = col < d ? o[col] : 0.0f;
        acc = first ? ftz(x * y) : ftz(std::fmaf(x, y, acc));
        first = false;
      }
    value[t] = acc;
  }
  for (int offset = threads / 2; offset >= 1; offset /= 2) {
    std::vector<float> next(threads);
    for (int t = 0; t < threads; ++t) next[t] = ftz(value[t] + value[t ^ offset]);
    value = next;
  }
  return value[0];
}

}  // namespace

TEST_CASE("fa2 forward equals a plain transcription of FA2, element for element") {
  // Default tiles (hdim 64: 128 keys): 200 keys = a partial tile visited first, then a full one.
  // Under the sanitizer run: 136 keys (a partial tile of 8, then a full one).
  const bool small_run =
      std::getenv("FLASHBITS_TEST_SCALE") && std::string(std::getenv("FLASHBITS_TEST_SCALE")) == "sanitizer";
  AttentionInputs in = make_scenario("random", 21, 1, 1, small_run ? 136 : 200, 64, formats::bf16, false);
  compare_with_plain("fa2-sm80", "sm80", in, 0, 128);
  compare_with_plain("fa2-sm90", "sm90-mma", in, 0, 128);
  // Small tiles and causal masking: many rescalings, masked tails.
  AttentionInputs small = make_scenario("fa3-outliers", 5, 1, 1, 77, 32, formats::bf16, false);
  small.causal = true;
  compare_with_plain("fa2-sm80", "sm80", small, 16, 0);
  // Ties at the max: the sink scenario.
  AttentionInputs sink = make_scenario("sink", 5, 1, 1, 90, 64, formats::bf16, false);
  compare_with_plain("fa2-sm90", "sm90-mma", sink, 32, 0);
}

TEST_CASE("the tracer records a consistent story and does not change results") {
  AttentionInputs in = make_scenario("sink", 12, 1, 1, 150, 64, formats::bf16, true);
  for (const char* name : {"fa2-sm80", "fa-bf16acc"}) {
    CAPTURE(name);
    const ModelHandle m = parse_kernel_model(name, formats::bf16);
    RunOptions plain;
    plain.block_n = 64;
    const AttentionOutputs a = run_attention(m, in, plain);
    Tracer tracer;
    tracer.rows = {{0, 0, 7}, {0, 0, 149}};
    tracer.plot_feature = 4;
    RunOptions traced = plain;
    traced.tracer = &tracer;
    const AttentionOutputs b = run_attention(m, in, traced);
    CHECK(a.o.data == b.o.data);
    CHECK(a.delta->data == b.delta->data);
    CHECK(a.dq->data == b.dq->data);
    REQUIRE(tracer.traces.size() == 2);
    for (const RowTrace& t : tracer.traces) {
      CAPTURE(t.row);
      CHECK(t.tiles.size() == 3);  // 150 keys in tiles of 64
      CHECK(t.o_cast.size() == 64);
      CHECK(t.cumulative_error_by_key.size() == 150);
      CHECK(t.key_order.size() == 150);
      // The sink keys 0 and 1 have P̄ == 1 (after the cast) in the tile that holds them
      // (so may the max of a tile visited before it, while it is the running max).
      const auto& keys = t.p_equal_one_keys;
      CHECK(std::count(keys.begin(), keys.end(), 0) == 1);
      CHECK(std::count(keys.begin(), keys.end(), 1) == 1);
      int ones = 0, repeated = 0, events = 0;
      for (const TileRecord& tile : t.tiles) {
        ones += tile.p_equal_one;
        repeated = std::max(repeated, tile.repeated_max);
        events += tile.rounded_up + tile.rounded_down;
      }
      CHECK(ones == static_cast<int>(keys.size()));
      CHECK(repeated >= 1);
      CHECK(events > 0);
      CHECK(t.pv_dot_steps.size() + t.pv_buffer_events.size() > 0);
      // delta's error decomposition adds up: delta - Σ dO·O_pre = from_o + from_reduction.
      CHECK(std::isfinite(t.delta_error_from_o));
      CHECK(std::isfinite(t.delta_error_from_reduction));
      // The reduction part is delta minus the exact Σ dO·Ō over the kernel's rounded O.
      long double exact_with_cast = 0.0L;
      for (int c = 0; c < 64; ++c)
        exact_with_cast += static_cast<long double>(in.d_o->at(0, 0, t.row, c)) * b.o.at(0, 0, t.row, c);
      const double reduction =
          static_cast<double>(static_cast<long double>(b.delta->at(0, 0, t.row, 0)) - exact_with_cast);
      CHECK(std::fabs(t.delta_error_from_reduction - reduction) <= 1e-12 * (1.0 + std::fabs(reduction)));
      // The O part is zero only if no element of O rounded. FA2 rounds its fp32 O; fa-bf16acc
      // on sink does not: its bf16 ℓ is exactly 2 (two P̄ == 1, the rest below half an ulp) and
      // its accumulator is bf16, so O = acc / 2 is exact.
      if (std::string(name) == "fa2-sm80") CHECK(t.delta_error_from_o != 0.0);
      if (std::string(name) == "fa-bf16acc") CHECK(t.delta_error_from_o == 0.0);
    }
    // FA2 visits KV tiles last to first: the first traced key is in the last tile.
    if (std::string(name) == "fa2-sm80") CHECK(tracer.traces[0].key_order.front() >= 128);
  }
}

namespace {

// FA2's exponent argument S·scale_log2 - max_scaled in fp32, two ways. Fused (FFMA): the
// exact value rounded once; S has 8 significant bits and scale_log2 24, so the product is
// exact in double, and S and the max are close enough (both within [-16, 16]) that the
// difference is exact in double too; the caller checks it against std::fmaf. Unfused
// (PyTorch: __fmul_rn, then the FADD): the product rounded to fp32, then the difference.
float fused_argument(float s, float scale_log2, float max_scaled) {
  return static_cast<float>(static_cast<double>(s) * scale_log2 - max_scaled);
}
float unfused_argument(float s, float scale_log2, float max_scaled) {
  const float product = static_cast<float>(static_cast<double>(s) * scale_log2);
  return static_cast<float>(static_cast<double>(product) - max_scaled);
}

}  // namespace

TEST_CASE("pytorch-fa2: P̄ is ex2 of the unfused exponent argument (FMUL, then FADD), where the FFMA differs") {
  // One query row q = e_0, so S_j = k_j[0] exactly; 128 keys, one tile (head dim 64), so
  // every P̄ uses the row max m. Key 0 holds m; key 1 a score S found below such that the
  // fused and unfused arguments differ and so do their ex2 values; the other keys are
  // pseudo-random bf16 scores in (m - 20, m].
  const int n = 128, d = 64;
  const double scale = 0.125;
  // set_params_fprop: scale_softmax_log2 = softmax_scale (a float) * M_LOG2E, stored as float.
  const float scale_log2 = static_cast<float>(static_cast<double>(static_cast<float>(scale)) * std::numbers::log2e);
  const float m = 11.3125f;  // bf16: 1.0110101·2^3
  REQUIRE(bf16_rne(m) == m);
  const float max_scaled = static_cast<float>(static_cast<double>(m) * scale_log2);
  fbref::CorrectSfuFtz sfu;
  float differing_score = 0;
  for (int k = 1; k < 20 * 16 && differing_score == 0; ++k) {
    const float s = m - static_cast<float>(k) / 16;  // a bf16 value: |s| < 16, a multiple of 1/16
    if (bf16_rne(s) != s) continue;
    const float fused = fused_argument(s, scale_log2, max_scaled),
                unfused = unfused_argument(s, scale_log2, max_scaled);
    REQUIRE(fused == std::fmaf(s, scale_log2, -max_scaled));
    if (fused != unfused && sfu.ex2(fused) != sfu.ex2(unfused)) differing_score = s;
  }
  REQUIRE(differing_score != 0);
  CAPTURE(differing_score);

  AttentionInputs in = make_scenario("random", 31, 1, 1, n, d, formats::bf16, false);
  in.softmax_scale = scale;
  for (int c = 0; c < d; ++c) in.q.at(0, 0, 0, c) = c == 0 ? 1.0 : 0.0;
  unsigned state = 12345;
  for (int key = 0; key < n; ++key) {
    state = state * 1664525u + 1013904223u;
    in.k.at(0, 0, key, 0) = bf16_rne(m - 20.0 * static_cast<double>(state >> 8) / (1u << 24));
  }
  in.k.at(0, 0, 0, 0) = m;
  in.k.at(0, 0, 1, 0) = differing_score;

  for (const std::string model : {"pytorch-fa2-sm80", "pytorch-fa2-sm90"}) {
    CAPTURE(model);
    Tracer tracer;
    tracer.rows = {{0, 0, 0}};
    RunOptions opt;
    opt.tracer = &tracer;
    opt.block_n = n;
    run_attention(parse_kernel_model(model, formats::bf16), in, opt);
    REQUIRE(tracer.traces.size() == 1);
    REQUIRE(tracer.traces[0].tiles.size() == 1);
    const TileRecord& tile = tracer.traces[0].tiles[0];
    REQUIRE(tile.running_max == m);
    REQUIRE(tile.p.size() == static_cast<std::size_t>(n));
    int wrong = 0, fused_differs = 0;
    for (int key = 0; key < n; ++key) {
      const float s = static_cast<float>(in.k.at(0, 0, key, 0));
      const float unfused = unfused_argument(s, scale_log2, max_scaled);
      const float fused = fused_argument(s, scale_log2, max_scaled);
      REQUIRE(unfused > -126.0f);  // libdevice exp2f's scaled path is not reached
      const double want = sfu.ex2(unfused);
      wrong += tile.p[static_cast<std::size_t>(key)] != want;
      fused_differs += sfu.ex2(fused) != want;
    }
    CHECK(wrong == 0);
    CHECK(tile.p[1] == sfu.ex2(unfused_argument(differing_score, scale_log2, max_scaled)));
    CHECK(fused_differs >= 1);  // the row tells FMUL+FADD from the FFMA
  }
}

TEST_CASE("fa-bf16acc tracer counts Qiu & Yao's significand overflow of P-bar V, hand-built row") {
  // 40 queries (all equal), 40 keys, head dim 4. Keys 3 and 17 tie for the max score (P̄ == 1); every
  // other key scores 40 below (P̄ ~ 2^-58: only sticky bits). V for the tied keys, per
  // feature, chosen so the exact P̄V sum does or does not need an exponent above its
  // largest term: f0: -1.5 + -1.75 = -3.25 (overflow), f1: -1.5 + 1.75 (no),
  // f2: 0.75 + 0.625 = 1.375 (overflow, exponent -1 -> 0), f3: 1.0 + 0.0078125 (no).
  const int n = 40, d = 4;
  AttentionInputs in;
  in.q = Tensor4(1, 1, n, d);  // every query row the same; row 0 is traced
  in.k = Tensor4(1, 1, n, d);
  in.v = Tensor4(1, 1, n, d);
  in.softmax_scale = 1.0;
  for (int j = 0; j < n; ++j) {
    in.q.at(0, 0, j, 0) = 1.0;
    in.k.at(0, 0, j, 0) = (j == 3 || j == 17) ? 8.0 : -32.0;
    for (int c = 0; c < d; ++c) in.v.at(0, 0, j, c) = 0.00390625 * ((j % 5) - 2);  // small, exact in bf16
  }
  const double tied_v[2][d] = {{-1.5, -1.5, 0.75, 1.0}, {-1.75, 1.75, 0.625, 0.0078125}};
  for (int c = 0; c < d; ++c) {
    in.v.at(0, 0, 3, c) = tied_v[0][c];
    in.v.at(0, 0, 17, c) = tied_v[1][c];
  }
  const ModelHandle m = parse_kernel_model("fa-bf16acc", formats::bf16);
  Tracer tracer;
  tracer.rows = {{0, 0, 0}};
  tracer.plot_feature = 0;
  RunOptions opt;
  opt.tracer = &tracer;
  run_attention(m, in, opt);
  REQUIRE(tracer.traces.size() == 1);
  const RowTrace& t = tracer.traces.front();
  REQUIRE(t.tiles.size() == 1);  // 512-key tiles: one tile, so the accumulator update adds to 0
  CHECK(t.tiles[0].p_equal_one == 2);
  CHECK(t.tiles[0].significand_overflows == 2);  // features 0 and 2
  // Feature 0's rounding of P̄V is the overflowed one; the update of a zero accumulator is exact.
  REQUIRE(t.pv_buffer_events.size() == 2);
  CHECK(t.pv_buffer_events[0].significand_overflow);
  CHECK_FALSE(t.pv_buffer_events[1].significand_overflow);
}

TEST_CASE("fa2 delta equals a plain transcription of dot_do_o from the plain forward's bf16 O") {
  // Head dims: 32 (4 threads), 40 (padded to 64: 8 threads, zero padding), 64 (8 threads),
  // 96 (4 threads over 3 chunks of 32), 128 (8 threads over 2 chunks of 64).
  const int n = 40;
  for (int d : {32, 40, 64, 96, 128}) {
    CAPTURE(d);
    AttentionInputs in = make_scenario("random", 50 + d, 1, 1, n, d, formats::bf16, true);
    const AttentionOutputs got = run_attention(parse_kernel_model("fa2-sm80", formats::bf16), in, RunOptions{});
    const int block_n = d <= 64 ? 128 : 64;  // FA2's forward tiles for these head dims
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      const PlainResult fwd = plain_fa2_row(in, "sm80", r, block_n);
      std::vector<float> d_o(d);
      for (int c = 0; c < d; ++c) d_o[c] = static_cast<float>(in.d_o->at(0, 0, r, c));
      REQUIRE(got.delta->at(0, 0, r, 0) == static_cast<double>(plain_fa2_delta(d_o, fwd.o)));
    }
  }
}
