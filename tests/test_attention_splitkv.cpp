// tests/test_attention_splitkv.cpp: FA2's split-KV forward (+splitkv, attention/splitkv.hpp;
// docs/DESIGN.md §6 "Split-KV"). UNMEASURED on hardware; these tests check the model against
// itself and against exact attention, each from a different side:
// - one split is PyTorch's regular kernel: bit for bit the model without +splitkv (the
//   replay-validated path), through the split loop's tile ranges, forward O and LSE, causal
//   or not, N = Nk and decode N = 1;
// - N splits in exact arithmetic (every rounding the identity) equal exact attention: the
//   split ranges cover every visible key once and the combine's formula is the softmax's;
//   in the hardware arithmetic they stay within the final cast's rounding of it;
// - the heuristic against an independent restatement of flash_api.cpp's formula over a grid of
//   decode shapes, and against values worked by hand;
// - the empty-split and all -inf guards;
// - the two combine formulas differ on some inputs and each equals its formula computed here
//   in float arithmetic (the lane order spelled out for 2 and 5 splits).
// - CUDA's logf model (emu/sfu/cuda_logf.hpp): special values and within 1 ulp of log.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attention/attention.hpp"
#include "attention/kernel_models.hpp"
#include "attention/splitkv.hpp"
#include "emu/sfu/cuda_expf.hpp"
#include "emu/sfu/cuda_logf.hpp"
#include "emu/sfu/special_functions.hpp"
#include "studies/scenarios.hpp"
#include "tests/tensor_compare.hpp"

using namespace fb;
using namespace fb::attn;
using fb::test::max_rel_diff;
using fb::test::same_bits;

namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

AttentionInputs forward_inputs(const char* scenario, std::uint64_t seed, int heads, int n, int nk, int d, bool causal) {
  AttentionInputs in = make_scenario(scenario, seed, 1, heads, n, d, formats::bf16, false, 0, nk);
  in.causal = causal;
  return in;
}

AttentionOutputs run(const std::string& model, const AttentionInputs& in, RunOptions opt = {}) {
  return run_attention(parse_kernel_model(model, formats::bf16), in, opt);
}

// flash_api.cpp num_splits_heuristic, restated from the source's text a second time, in the
// most literal form (a vector of efficiencies, the 0.85 rule in double), independently of
// attention/splitkv.cpp.
int restated_heuristic(int bhm, int sms, int n_blocks, int max_splits) {
  if (float(bhm) >= 0.8f * float(sms)) return 1;
  max_splits = std::min(max_splits, std::min(sms, n_blocks));
  auto ceildiv = [](int a, int b) { return (a + b - 1) / b; };
  auto ok = [&](int s) { return s == 1 || ceildiv(n_blocks, s) != ceildiv(n_blocks, s - 1); };
  std::vector<float> eff;
  float best = 0.f;
  for (int s = 1; s <= max_splits; ++s) {
    if (!ok(s)) {
      eff.push_back(0.f);
      continue;
    }
    const float waves = float(bhm * s) / float(sms);
    const float e = waves / std::ceil(waves);
    best = std::max(best, e);
    eff.push_back(e);
  }
  for (int s = 1; s <= max_splits; ++s)
    if (ok(s) && eff[s - 1] >= 0.85 * best) return s;
  return 1;
}

float f32(double x) { return static_cast<float>(x); }

// The recipe of a model name, kept alive for the test's duration.
const KernelModel& recipe(const std::string& name) {
  static std::vector<ModelHandle> kept;
  kept.push_back(parse_kernel_model(name, formats::bf16));
  return *kept.back().recipe;
}

}  // namespace

TEST_CASE("splitkv: one split is the regular kernel, bit for bit (O and LSE, causal or not, decode)") {
  struct Shape {
    int heads, n, nk, d;
    bool causal;
  };
  // sms=1: 2 "SMs", so the heuristic picks one split for any shape with >= 2 row blocks; :1 forces it.
  for (const char* base : {"pytorch-fa2-sm90", "fa2-sm80"}) {
    for (const Shape& s : {Shape{1, 200, 200, 64, false}, Shape{1, 200, 200, 64, true}, Shape{2, 150, 150, 128, true},
                           Shape{1, 1, 700, 128, false}, Shape{1, 1, 700, 64, true}, Shape{1, 5, 333, 96, true}}) {
      CAPTURE(base);
      CAPTURE(s.n);
      CAPTURE(s.nk);
      CAPTURE(s.d);
      CAPTURE(s.causal);
      const AttentionInputs in = forward_inputs("random", 11, s.heads, s.n, s.nk, s.d, s.causal);
      const AttentionOutputs want = run(base, in);
      for (const std::string variant : {"+splitkv:1", "+splitkv:1,combine=inv-sum"}) {
        const AttentionOutputs got = run(std::string(base) + variant, in);
        CHECK(same_bits(got.o, want.o));
        CHECK(same_bits(got.lse, want.lse));
      }
      if (s.n > 64) {
        const AttentionOutputs got = run(std::string(base) + "+splitkv:auto,sms=1", in);
        CHECK(same_bits(got.o, want.o));
        CHECK(same_bits(got.lse, want.lse));
      }
    }
  }
}

TEST_CASE("splitkv: N splits in exact arithmetic equal exact attention; in hardware, within the cast") {
  struct Shape {
    int n, nk, d;
    bool causal;
  };
  // d 64: block_n 256; d 128: 128. 1000 keys at d 64 are 4 blocks: 3 splits of 2 leave the last
  // split without blocks; causal 300 x 300 at d 128 (3 blocks): early rows see only block 0.
  for (const Shape& s : {Shape{1, 1000, 64, false}, Shape{1, 1000, 64, true}, Shape{300, 300, 128, true},
                         Shape{4, 700, 128, true}, Shape{300, 200, 64, true}, Shape{50, 900, 32, false}}) {
    const AttentionInputs in = forward_inputs("random", 5, 1, s.n, s.nk, s.d, s.causal);
    const AttentionOutputs exact = exact_attention(in);
    for (int splits : {2, 3, 5, 7, 128}) {
      for (const char* base : {"pytorch-fa2-sm90", "fa2-sm90"}) {
        for (const char* combine : {"", ",combine=inv-sum"}) {
          CAPTURE(s.n);
          CAPTURE(s.nk);
          CAPTURE(s.d);
          CAPTURE(s.causal);
          CAPTURE(splits);
          CAPTURE(base);
          CAPTURE(combine);
          const std::string model = std::string(base) + "+splitkv:" + std::to_string(splits) + combine;
          RunOptions exact_opt;
          exact_opt.exact_arithmetic = true;
          const AttentionOutputs ex = run(model, in, exact_opt);
          CHECK(max_rel_diff(ex.o, exact.o) <= 1e-13);
          CHECK(max_rel_diff(ex.lse, exact.lse) <= 1e-13);
          // Hardware: O within a few bf16 ulps (2^-8 relative each) of the exact value, LSE in fp32.
          const AttentionOutputs hw = run(model, in);
          CHECK(max_rel_diff(hw.o, exact.o) <= 0x1p-6);
          CHECK(max_rel_diff(hw.lse, exact.lse) <= 1e-5);
        }
      }
    }
  }
}

TEST_CASE("splitkv: the heuristic, against the source's formula restated and values worked by hand") {
  const KernelModel& km = recipe("pytorch-fa2-sm90+splitkv");
  CHECK(km.splitkv.sm_count == 132);
  CHECK(parse_kernel_model("pytorch-fa2-sm80+splitkv", formats::bf16).recipe->splitkv.sm_count == 108);
  CHECK(fa2_splitkv_block_n(64) == 256);
  CHECK(fa2_splitkv_block_n(96) == 128);
  CHECK(fa2_splitkv_block_n(128) == 128);
  CHECK(fa2_splitkv_block_n(256) == 64);
  int multi = 0;
  for (int d : {64, 128})
    for (int heads = 1; heads <= 16; ++heads)
      for (int seqlen_q : {1, 2, 16, 64, 65, 128, 200, 256})
        for (int seqlen_k : {512, 1000, 2048, 4096, 8192, 10000, 32768}) {
          CAPTURE(d);
          CAPTURE(heads);
          CAPTURE(seqlen_q);
          CAPTURE(seqlen_k);
          const int block_n = d <= 64 ? 256 : 128;
          const int want =
              restated_heuristic(heads * ((seqlen_q + 63) / 64), 264, (seqlen_k + block_n - 1) / block_n, 128);
          const int got = fa2_splitkv_num_splits(km, 1, heads, heads, seqlen_q, seqlen_k, d);
          CHECK(got == want);
          multi += got > 1 ? 1 : 0;
        }
  CHECK(multi > 100);  // most of these decode shapes split
  // By hand (132 SMs: the heuristic gets 264; "eligible": 1, or ceil(n/s) != ceil(n/(s-1))):
  // - 1 head, 1 row, 4096 keys, d 128: 32 blocks; 1 < 0.8*264; eff(s) = s/264 grows with s; the
  //   eligible counts are 1,2,3,4,5,6,7,8,11,16,32 (ceil 32,16,11,8,7,6,5,4,3,2,1): the best is
  //   32 (32/264) and none below reaches 0.85 of it, so 32.
  CHECK(fa2_splitkv_num_splits(km, 1, 1, 1, 1, 4096, 128) == 32);
  // - 12 heads, 1 row, 1000 keys, d 64: 4 blocks of 256; eligible 1, 2, 4 (3: ceil 2 as for 2);
  //   eff 12/264, 24/264, 48/264: best 48/264, 0.85 of it is 40.8/264 > 24/264, so 4.
  CHECK(fa2_splitkv_num_splits(km, 1, 12, 12, 1, 1000, 64) == 4);
  // - 32 heads, 1 row, 4096 keys, d 128: 32 blocks; waves 32s/264: s = 8 gives 256/264 = 0.970
  //   (also 16 and 32); 0.85 * 0.970 = 0.824; s = 7 (eligible: ceil 5 vs 6) gives 224/264 =
  //   0.848 >= 0.824 and s <= 6 gives at most 192/264 = 0.727, so 7.
  CHECK(fa2_splitkv_num_splits(km, 1, 32, 32, 1, 4096, 128) == 7);
  // - enough to fill the GPU: 4 heads x 64 row blocks = 256 >= 0.8*264 = 211.2: one split.
  CHECK(fa2_splitkv_num_splits(km, 1, 4, 4, 4096, 4096, 128) == 1);
  // Grouped heads at decode run as heads/kv_heads rows of kv_heads heads (mha_fwd's
  // seqlenq_ngroups_swapped): 32 q heads on 8 kv heads = 8 heads x ceil(4/64) = 8, not 32.
  CHECK(fa2_splitkv_num_splits(km, 1, 32, 8, 1, 4096, 128) == restated_heuristic(8, 264, 32, 128));
  CHECK(fa2_splitkv_num_splits(km, 1, 32, 8, 1, 4096, 128) != fa2_splitkv_num_splits(km, 1, 32, 32, 1, 4096, 128));
  // Whatever the head dim: SDPA pads q, k, v to a multiple of 8 before mha_fwd tests
  // head_size_og % 8 == 0 (attention.cpp pad_last_dim<8, false>), so d 100 arrives as 104 and
  // swaps as 104 does (the model-facts audit of 2026-12-07; an earlier audit read mha_fwd alone).
  CHECK(fa2_splitkv_num_splits(km, 1, 32, 8, 1, 4096, 100) == restated_heuristic(8, 264, 32, 128));
  CHECK(fa2_splitkv_num_splits(km, 1, 32, 8, 1, 4096, 104) == restated_heuristic(8, 264, 32, 128));
  // An explicit N is taken as it is.
  CHECK(fa2_splitkv_num_splits(recipe("fa2-sm90+splitkv:5"), 1, 64, 64, 4096, 4096, 128) == 5);
}

TEST_CASE("splitkv: parsing, canonical names, UNMEASURED") {
  CHECK(parse_kernel_model("pytorch-fa2-sm90+splitkv", formats::bf16).name == "pytorch-fa2-sm90+splitkv:auto,sms=132");
  CHECK(parse_kernel_model("fa2-sm80+splitkv:4", formats::bf16).name == "fa2-sm80+splitkv:4");
  CHECK(parse_kernel_model("fa2-sm80+splitkv:n=4,combine=inv-sum", formats::bf16).name ==
        "fa2-sm80+splitkv:4,combine=inv-sum");
  CHECK(parse_kernel_model("fa2-sm90+splitkv:auto,sms=114", formats::bf16).name == "fa2-sm90+splitkv:auto,sms=114");
  const ModelHandle h = parse_kernel_model("pytorch-fa2-sm90+splitkv", formats::bf16);
  CHECK(h.recipe->description.find("UNMEASURED") != std::string::npos);
  CHECK_FALSE(h.recipe->hardware_validated());
  CHECK_THROWS(parse_kernel_model("fa3-fp8-sm90+splitkv", formats::bf16));
  CHECK_THROWS(parse_kernel_model("fa2-sm90+splitkv:0", formats::bf16));
  CHECK_THROWS(parse_kernel_model("fa2-sm90+splitkv:129", formats::bf16));
  CHECK_THROWS(parse_kernel_model("fa2-sm90+splitkv:4,combine=other", formats::bf16));
  // Found by an input audit: a repeated parameter kept its last value, and sms beside a fixed
  // split count was dropped unread (the model recorded as +splitkv:4), where +dynmax refuses.
  for (const char* name : {"fa2-sm80+splitkv:auto,sms=3,sms=5", "fa2-sm80+splitkv:auto,combine=logsum,combine=inv-sum",
                           "fa2-sm80+splitkv:auto,n=3"})
    CHECK_THROWS_WITH_AS(parse_kernel_model(name, formats::bf16), doctest::Contains("is given twice"),
                         std::invalid_argument);
  CHECK_THROWS_WITH_AS(parse_kernel_model("fa2-sm80+splitkv:4,sms=3", formats::bf16),
                       doctest::Contains("sms sets the SM count of the auto heuristic"), std::invalid_argument);
  CHECK(parse_kernel_model("fa2-sm80+splitkv:auto,sms=3", formats::bf16).recipe->splitkv.sm_count == 3);
  bool listed = false;
  for (const KernelModelDescription& m : describe_kernel_models())
    if (m.name.rfind("+splitkv", 0) == 0) listed = m.description.find("UNMEASURED") != std::string::npos;
  CHECK(listed);
}

TEST_CASE("splitkv: the combine's thread layout (flash_fwd_launch_template.h, combine_attn_seqk_parallel)") {
  // kBlockM: 4 (instantiated head dim a multiple of 128), 8 (of 64), 16; the instantiated head
  // dims are 32, 64, 96, 128, 192, 256 (no 160 or 224 in PyTorch 2.11: 136..192 run 192's
  // combine, 193..256 256's); kMaxSplits: power of two >= splits, >= 2;
  // lanes = min(128 / kBlockM, kMaxSplits); splits per lane = ceil(kMaxSplits * kBlockM / 128).
  struct Want {
    int d, splits, block_m, max_splits, lanes, per_lane;
  };
  for (const Want& w :
       {Want{128, 2, 4, 2, 2, 1}, Want{128, 5, 4, 8, 8, 1}, Want{128, 128, 4, 128, 32, 4}, Want{64, 40, 8, 64, 16, 4},
        Want{96, 3, 16, 4, 4, 1}, Want{32, 100, 16, 128, 8, 16}, Want{256, 17, 4, 32, 32, 1},
        Want{160, 9, 8, 16, 16, 1}, Want{224, 40, 4, 64, 32, 2}, Want{136, 3, 8, 4, 4, 1}}) {
    CAPTURE(w.d);
    CAPTURE(w.splits);
    const SplitKvCombineLayout lay = fa2_splitkv_combine_layout(w.d, w.splits);
    CHECK(lay.block_m == w.block_m);
    CHECK(lay.max_splits == w.max_splits);
    CHECK(lay.rows_per_load_transpose == w.lanes);
    CHECK(lay.lse_per_thread == w.per_lane);
  }
}

TEST_CASE("splitkv: empty splits and all -inf guards") {
  for (const char* name :
       {"pytorch-fa2-sm90+splitkv:3", "fa2-sm90+splitkv:3", "pytorch-fa2-sm90+splitkv:3,combine=inv-sum"}) {
    CAPTURE(name);
    const KernelModel& km = recipe(name);
    const int d = 128;
    // Every split empty (a row above the causal corner): LSE +inf, O = 0.
    {
      const SplitKvCombined c =
          fa2_splitkv_combine(km, d, {-kInfinity, -kInfinity, -kInfinity}, std::vector<double>(3 * d, 0.0));
      CHECK(c.lse == kInfinity);
      CHECK(c.lse_max == 0.0);
      CHECK(c.lse_sum == 0.0);
      for (double o : c.o_pre) CHECK((o == 0.0 && !std::signbit(o)));
    }
    // An empty split among others (O_accum 0, LSE_accum -inf) changes no bit: the same as the two
    // others alone (its expf is 0, each add of it exact, its scale 0).
    {
      std::mt19937 rng(7);
      std::normal_distribution<float> nd;
      for (int trial = 0; trial < 200; ++trial) {
        const double a = f32(nd(rng) * 3), b = f32(nd(rng) * 3);
        std::vector<double> o2(2 * d), o3(3 * d, 0.0);
        for (int c = 0; c < d; ++c) {
          o2[c] = o3[c] = f32(nd(rng));
          o2[d + c] = o3[2 * d + c] = f32(nd(rng));
        }
        const SplitKvCombined two = fa2_splitkv_combine(km, d, {a, b}, o2);
        const SplitKvCombined three = fa2_splitkv_combine(km, d, {a, -kInfinity, b}, o3);
        CHECK(std::bit_cast<std::uint64_t>(two.lse) == std::bit_cast<std::uint64_t>(three.lse));
        for (int c = 0; c < d; ++c)
          CHECK(std::bit_cast<std::uint64_t>(two.o_pre[c]) == std::bit_cast<std::uint64_t>(three.o_pre[c]));
      }
    }
    // One split only holding keys: its O_accum and LSE come through unchanged (scale expf(0) = 1,
    // logf(1) = 0).
    {
      const double lse0 = f32(2.75);
      std::vector<double> o(3 * d, 0.0);
      for (int c = 0; c < d; ++c) o[d + c] = f32(0.01 * (c - 40));
      const SplitKvCombined c = fa2_splitkv_combine(km, d, {-kInfinity, lse0, -kInfinity}, o);
      CHECK(c.lse == lse0);
      for (int col = 0; col < d; ++col) CHECK(c.o_pre[col] == o[d + col]);
    }
  }
  // In the engine: rows whose other splits see none of their keys are the regular kernel's rows
  // (same tiles: block_n fixed at 128 for both runs); rows above the causal corner (300 rows, 200
  // keys) get O = 0 and LSE = +inf; a decode whose last split has no KV block (4 blocks in 3
  // splits of 2) equals the 2-split run, bit for bit.
  {
    RunOptions opt;
    opt.block_n = 128;
    const AttentionInputs in = forward_inputs("random", 9, 1, 300, 300, 128, true);
    const AttentionOutputs regular = run("pytorch-fa2-sm90", in, opt);
    const AttentionOutputs split = run("pytorch-fa2-sm90+splitkv:3", in, opt);
    for (int r = 0; r < 128; ++r) {
      CAPTURE(r);
      CHECK(split.lse.at(0, 0, r, 0) == regular.lse.at(0, 0, r, 0));
      for (int c = 0; c < 128; ++c) CHECK(split.o.at(0, 0, r, c) == regular.o.at(0, 0, r, c));
    }
    CHECK_FALSE(same_bits(split.o, regular.o));  // rows that see several splits do differ
  }
  {
    const AttentionInputs in = forward_inputs("random", 9, 1, 300, 200, 64, true);
    const AttentionOutputs split = run("pytorch-fa2-sm90+splitkv:4", in);
    for (int r = 0; r < 100; ++r) {
      CHECK(split.lse.at(0, 0, r, 0) == kInfinity);
      for (int c = 0; c < 64; ++c) CHECK((split.o.at(0, 0, r, c) == 0.0 && !std::signbit(split.o.at(0, 0, r, c))));
    }
    CHECK(std::isfinite(split.lse.at(0, 0, 100, 0)));
  }
  {
    const AttentionInputs in = forward_inputs("random", 4, 2, 1, 1000, 64, false);
    const AttentionOutputs two = run("pytorch-fa2-sm90+splitkv:2", in);
    const AttentionOutputs three = run("pytorch-fa2-sm90+splitkv:3", in);
    CHECK(same_bits(two.o, three.o));
    CHECK(same_bits(two.lse, three.lse));
    CHECK_FALSE(same_bits(two.o, run("pytorch-fa2-sm90", in).o));
  }
}

TEST_CASE("splitkv: the two combine formulas differ, and each is its formula in float arithmetic") {
  const KernelModel& logsum = recipe("pytorch-fa2-sm90+splitkv:2");
  const KernelModel& inv_sum = recipe("pytorch-fa2-sm90+splitkv:2,combine=inv-sum");
  const KernelModel& fast = recipe("fa2-sm90+splitkv:2");
  const KernelModel& logsum5 = recipe("pytorch-fa2-sm90+splitkv:5");
  const KernelModel& inv_sum5 = recipe("pytorch-fa2-sm90+splitkv:5,combine=inv-sum");
  const KernelModel& fast5 = recipe("fa2-sm90+splitkv:5");
  const SpecialFunctionModel& ex2 = *logsum.sfu.ex2;
  auto expf_cuda = [&](float x) { return cuda_expf(x, ex2); };
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  const int d = 128;
  int differ_scale = 0, differ_o = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    for (int splits : {2, 5}) {
      std::vector<double> lse(static_cast<std::size_t>(splits)), o(static_cast<std::size_t>(splits) * d);
      std::vector<float> l32(static_cast<std::size_t>(splits)), o32(o.size());
      for (int s = 0; s < splits; ++s) l32[s] = nd(rng) * 4.0f, lse[s] = l32[s];
      for (std::size_t i = 0; i < o.size(); ++i) o32[i] = nd(rng), o[i] = o32[i];
      float mx = l32[0];
      for (float v : l32) mx = std::max(mx, v);
      std::vector<float> e(8, 0.0f);  // lanes of the butterfly: splits past `splits` hold expf(-inf) = 0
      std::vector<float> e_fast(8, 0.0f);
      for (int s = 0; s < splits; ++s) {
        e[s] = expf_cuda(l32[s] - mx);
        e_fast[s] = fast_exp(fast.sfu, l32[s] - mx);
      }
      // d 128: kBlockM 4; 2 splits: kMaxSplits 2, 2 lanes: e0 + e1. 5 splits: kMaxSplits 8, 8 lanes,
      // one split each: shfl_xor 4, 2, 1 from lane 0: ((e0 + e4) + (e2 + e6)) + ((e1 + e5) + (e3 + e7)).
      auto lane_sum = [&](const std::vector<float>& x) {
        if (splits == 2) return x[0] + x[1];
        return ((x[0] + x[4]) + (x[2] + x[6])) + ((x[1] + x[5]) + (x[3] + x[7]));
      };
      const float sum = lane_sum(e), sum_fast = lane_sum(e_fast);
      const float lse_logsum = cuda_logf(sum) + mx;
      const float ln2 = std::bit_cast<float>(0x3f317218u);
      const float lse_fast = std::fma(static_cast<float>(fast.sfu.lg2->evaluate(sum_fast)), ln2, mx);
      const float inv = 1.0f / sum;
      const KernelModel& km_logsum = splits == 2 ? logsum : logsum5;
      const KernelModel& km_inv = splits == 2 ? inv_sum : inv_sum5;
      const KernelModel& km_fast = splits == 2 ? fast : fast5;
      const SplitKvCombined a = fa2_splitkv_combine(km_logsum, d, lse, o);
      const SplitKvCombined b = fa2_splitkv_combine(km_inv, d, lse, o);
      const SplitKvCombined f = fa2_splitkv_combine(km_fast, d, lse, o);
      CHECK(a.lse == lse_logsum);
      CHECK(b.lse == lse_logsum);
      CHECK(f.lse == lse_fast);
      for (int s = 0; s < splits; ++s) {
        const float scale_a = expf_cuda(l32[s] - lse_logsum);
        const float scale_b = expf_cuda(l32[s] - mx) * inv;
        const float scale_f = fast_exp(fast.sfu, l32[s] - lse_fast);
        CHECK(a.scale[s] == scale_a);
        CHECK(b.scale[s] == scale_b);
        CHECK(f.scale[s] == scale_f);
        differ_scale += scale_a != scale_b ? 1 : 0;
      }
      for (int c = 0; c < d; ++c) {
        float oa = 0.0f, ob = 0.0f, of = 0.0f;
        for (int s = 0; s < splits; ++s) {
          oa = std::fma(static_cast<float>(a.scale[s]), o32[static_cast<std::size_t>(s) * d + c], oa);
          ob = std::fma(static_cast<float>(b.scale[s]), o32[static_cast<std::size_t>(s) * d + c], ob);
          of = std::fma(static_cast<float>(f.scale[s]), o32[static_cast<std::size_t>(s) * d + c], of);
        }
        CHECK(a.o_pre[c] == oa);
        CHECK(b.o_pre[c] == ob);
        CHECK(f.o_pre[c] == of);
        differ_o += oa != ob ? 1 : 0;
      }
    }
  }
  CHECK(differ_scale > 0);
  CHECK(differ_o > 0);
  MESSAGE("scales that differ between the two combines: " << differ_scale << ", O values: " << differ_o);
}

TEST_CASE("cuda_logf: special values and within 1 ulp of log (the PTX sequence of nvcc 13.0)") {
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(cuda_logf(1.0f) == 0.0f);
  CHECK(!std::signbit(cuda_logf(1.0f)));
  CHECK(cuda_logf(0.0f) == -inf);
  CHECK(cuda_logf(-0.0f) == -inf);
  CHECK(cuda_logf(inf) == inf);
  CHECK(std::isnan(cuda_logf(-1.0f)));
  CHECK(std::isnan(cuda_logf(-inf)));
  CHECK(std::isnan(cuda_logf(std::numeric_limits<float>::quiet_NaN())));
  CHECK(cuda_logf(2.0f) == std::bit_cast<float>(0x3f317218u));  // ln 2 rounded: e = 1, f = 0
  std::mt19937 rng(1);
  std::uniform_int_distribution<std::uint32_t> bits(1u, 0x7f7fffffu);
  long worst = 0;
  for (int i = 0; i < 2000000; ++i) {
    const float x = std::bit_cast<float>(bits(rng));
    const float got = cuda_logf(x);
    const float want = static_cast<float>(std::log(static_cast<double>(x)));
    const long ulps = std::labs(static_cast<long>(std::bit_cast<std::int32_t>(got)) -
                                static_cast<long>(std::bit_cast<std::int32_t>(want)));
    worst = std::max(worst, got == want ? 0L : (std::signbit(got) == std::signbit(want) ? ulps : 1000L));
  }
  CHECK(worst <= 1);
}
