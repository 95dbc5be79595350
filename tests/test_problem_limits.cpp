// tests/test_problem_limits.cpp: the size limits the CLI and the Python module share
// (attention/problem_limits.hpp), at their boundaries. The figures expected here are written
// from the documented limits (docs/CLI.md: 2^31 elements per tensor, about 128 bytes an
// element up to 64 GiB, 2^24 trials), not read from the constants under test.
//
// The bound on a traced row's record (traced_row_bytes_bound) is checked against what traced
// runs keep: the test walks each RowTrace and adds up its vectors' capacities itself.
#include <doctest/doctest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "attention/attention.hpp"
#include "attention/problem_limits.hpp"
#include "studies/scenarios.hpp"

using fb::attn::problem_size_refusal;
using fb::attn::tile_size_refusal;
using fb::attn::trace_size_refusal;
using fb::attn::trials_refusal;

TEST_CASE("problem sizes are refused at the documented limits") {
  // 2^29 elements x 128 bytes is exactly 64 GiB: the largest problem accepted.
  CHECK(!problem_size_refusal(1, 1, 1 << 15, 1 << 14));
  CHECK(!problem_size_refusal(2, 4, 1 << 12, 1 << 14));
  // One more row of 1 element: over the memory limit, though far under 2^31 elements.
  const auto memory = problem_size_refusal(1, 1, (1 << 29) + 1, 1);
  CHECK(memory.too_large);
  CHECK(memory.reason == "needs about 64.0 GiB, over the limit of 64 GiB");
  CHECK(problem_size_refusal(1, 1, 1 << 16, 1 << 14).reason == "needs about 128.0 GiB, over the limit of 64 GiB");
  // Over 2^31 elements: that limit is named first, with the exact count.
  const auto elements = problem_size_refusal(1, 1, 256, 100000000);
  CHECK(elements.too_large);
  CHECK(elements.reason == "25600000000 elements per tensor, over the limit of 2^31 (2147483648)");
  // Exactly 2^31 elements is within that limit; its 256 GiB are not within the memory one.
  CHECK(problem_size_refusal(1, 2, 1 << 15, 1 << 15).reason == "needs about 256.0 GiB, over the limit of 64 GiB");
  CHECK(problem_size_refusal(1, 2, 1 << 15, (1 << 15) + 1).reason ==
        "2147549184 elements per tensor, over the limit of 2^31 (2147483648)");
  // Products that overflow 64 bits are still refused, not wrapped into range.
  const auto huge = problem_size_refusal(LLONG_MAX, LLONG_MAX, LLONG_MAX, LLONG_MAX);
  CHECK(huge.too_large);
  CHECK(huge.reason.find("elements per tensor, over the limit of 2^31") != std::string::npos);
  // Non-positive sizes: refused, and not as "too large".
  for (long long bad : {0LL, -1LL, LLONG_MIN}) {
    CAPTURE(bad);
    const auto r = problem_size_refusal(1, 1, bad, 64);
    CHECK(r.reason == "expected positive sizes");
    CHECK(!r.too_large);
    CHECK(problem_size_refusal(bad, 1, 1, 1).reason == "expected positive sizes");
  }
}

TEST_CASE("trial counts are refused outside at_least..2^24") {
  CHECK(trials_refusal(16777216, 2).empty());
  CHECK(trials_refusal(2, 2).empty());
  CHECK(trials_refusal(1, 1).empty());
  CHECK(trials_refusal(16777217, 2) == "expected 2..16777216");
  CHECK(trials_refusal(1, 2) == "expected 2..16777216");
  CHECK(trials_refusal(0, 1) == "expected 1..16777216");
  CHECK(trials_refusal(LLONG_MAX, 2) == "expected 2..16777216");
  CHECK(trials_refusal(LLONG_MIN, 2) == "expected 2..16777216");
}

TEST_CASE("tiles are refused over 2^16 a side or 2^22 elements, before anything is allocated") {
  // Found by the CLI audit: deviation --tiles 64x1073741824 allocated tile-sized buffers (13 GB
  // and growing) on a 64-key problem.
  CHECK(tile_size_refusal(0, 0).empty());  // the recipe's
  CHECK(tile_size_refusal(64, 65536).empty());
  CHECK(tile_size_refusal(2048, 2048).empty());
  CHECK(tile_size_refusal(1, 65537) ==
        "a tile of 1x65537: at most 65536 a side and 4194304 elements (kernels' tiles are at most 256 a side)");
  CHECK_FALSE(tile_size_refusal(2048, 2049).empty());
  CHECK_FALSE(tile_size_refusal(64, 1073741824).empty());
  CHECK_FALSE(tile_size_refusal(-1, 64).empty());
  using namespace fb::attn;
  const AttentionInputs in = make_scenario("random", 5, 1, 1, 64, 16, fb::formats::bf16, false);
  RunOptions opt;
  opt.block_m = 64;
  opt.block_n = 1 << 30;
  CHECK_THROWS_WITH_AS(run_attention(parse_kernel_model("golden-bf16-flash", fb::formats::bf16), in, opt),
                       doctest::Contains("a tile of 64x1073741824"), std::invalid_argument);
  opt.block_n = 128;
  CHECK(run_attention(parse_kernel_model("golden-bf16-flash", fb::formats::bf16), in, opt).o.data.size() == 64 * 16);
}

TEST_CASE("traced rows' records are refused over 64 GiB") {
  // 64 GiB is 2^36 bytes: 2^26 rows of 1 KiB fit exactly, one more byte a row does not.
  CHECK(!trace_size_refusal(1LL << 26, 1024));
  CHECK(!trace_size_refusal(0, ULLONG_MAX));  // nothing traced: nothing kept
  const auto over = trace_size_refusal(1LL << 26, 1025);
  CHECK(over.too_large);
  CHECK(over.reason ==
        "tracing 67108864 rows keeps about 64.1 GiB of records (about 1 KiB a row), over the limit of 64 GiB");
  // One row of 2^40 bytes (1 TiB); the product of huge counts does not wrap.
  CHECK(trace_size_refusal(1, 1ULL << 40).reason ==
        "tracing 1 row keeps about 1024.0 GiB of records (about 1073741824 KiB a row), over the limit of 64 GiB");
  CHECK(trace_size_refusal(LLONG_MAX, ULLONG_MAX).too_large);
}

namespace {
using namespace fb::attn;

// What a RowTrace holds, by the capacity of each of its vectors (the test's own walk).
std::uint64_t kept_bytes(const RowTrace& t) {
  auto bytes = [](const auto& v) { return static_cast<std::uint64_t>(v.capacity() * sizeof(v[0])); };
  std::uint64_t n = sizeof(RowTrace) + bytes(t.tiles) + bytes(t.o_cast) + bytes(t.cumulative_error_by_key) +
                    bytes(t.key_order) + bytes(t.pv_dot_steps) + bytes(t.pv_buffer_events) + bytes(t.p_equal_one_keys);
  for (const TileRecord& r : t.tiles) n += bytes(r.p) + bytes(r.acc);
  return n;
}
}  // namespace

TEST_CASE("a traced row keeps at most traced_row_bytes_bound, and not far below it") {
  // Every structure and accumulator kind, step sizes from 1 product to whole tiles, CK's
  // interleaved k order, promotion groups; square, decode-like and cross shapes, causal or
  // not; scenarios with many P-bar == 1 keys (ties) and none.
  const char* models[] = {"fa2-sm80",          "fa2-sm90",
                          "pytorch-fa2-sm80",  "triton-tutorial",
                          "fa3-sm90",          "fa3-fp8-sm90",
                          "fa4-sm100",         "ck-fmha-cdna3",
                          "fa-bf16acc",        "fa-bf16acc+visit-masked-tiles",
                          "golden-bf16-flash", "standard-bf16",
                          "correctly-rounded", "fa3-fp8-sm90+promote:32",
                          "fa2-sm90+sw-exp2"};
  struct Shape {
    int nq, nk, d;
    bool causal;
  };
  const Shape shapes[] = {
      {70, 70, 32, false}, {70, 70, 32, true}, {3, 300, 64, true}, {90, 20, 16, true}, {1, 257, 8, false}};
  for (const std::string name : models) {
    for (const Shape& s : shapes) {
      for (const std::string scenario : {"random", "ties"}) {
        CAPTURE(name);
        CAPTURE(s.nq);
        CAPTURE(s.nk);
        CAPTURE(s.causal);
        CAPTURE(scenario);
        const AttentionInputs in = make_scenario(scenario, 5, 1, 1, s.nq, s.d, fb::formats::bf16, false, 0, s.nk);
        AttentionInputs run_in = in;
        run_in.causal = s.causal;
        const ModelHandle model = parse_kernel_model(name, fb::formats::bf16);
        Tracer tracer;
        for (int r = 0; r < s.nq; ++r) tracer.rows.push_back({0, 0, r});
        RunOptions opt;
        opt.tracer = &tracer;
        run_attention(model, run_in, opt);
        const std::uint64_t bound = traced_row_bytes_bound(*model.recipe, s.nq, s.nk, s.d, s.causal);
        std::uint64_t most = 0;
        for (const RowTrace& t : tracer.traces) {
          CHECK(kept_bytes(t) <= bound);
          most = std::max(most, kept_bytes(t));
        }
        // The row that sees the most keys keeps at least half the bound (a looser bound would
        // refuse traces that fit).
        CHECK(2 * most >= bound);
      }
    }
  }
}
