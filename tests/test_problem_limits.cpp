// tests/test_problem_limits.cpp: the size limits the CLI and the Python module share
// (attention/problem_limits.hpp), at their boundaries. The figures expected here are written
// from the documented limits (docs/CLI.md: 2^31 elements per tensor, about 128 bytes an
// element up to 64 GiB, 2^24 trials), not read from the constants under test.
#include <doctest/doctest.h>

#include <climits>
#include <string>

#include "attention/problem_limits.hpp"

using fb::attn::problem_size_refusal;
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
