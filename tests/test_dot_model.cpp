// tests/test_dot_model.cpp: the one lookup over every dot-model family (emu/dot/dot_model.hpp).
//
// What is checked, and against what:
// - every preset of the three tables is what find_dot_model returns for its name and formats
//   (and kind, scale format and block): the registries are all reachable from the one lookup;
// - the handle's facts against the preset table fields and the formats' own names;
// - one hand-worked case per family whose exact D is derived in the comments (a routing error
//   to another family's arithmetic gives a different D);
// - the batch calls (dot_pairs, dot_columns, dot_rows: other code paths, AVX2 lanes for AMD two-stage)
//   against dot() lane by lane;
// - what a model lacks is refused with the caller's words.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "emu/dot/dot_model.hpp"
#include "emu/ops.hpp"

namespace {

using fb::DotFamily;
using fb::DotModel;
using fb::DotModelQuery;
namespace formats = fb::formats;

std::string error_of(const DotModelQuery& q, const fb::DotModelWords& w = {}) {
  try {
    fb::find_dot_model(q, w);
  } catch (const fb::DotModelError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("every preset of every family is found by the one lookup") {
  for (const fb::TensorCoreModel& m : fb::tensor_core_models()) {
    const DotModel h = fb::find_dot_model(m.name, m.input);
    REQUIRE(h.valid());
    CHECK(h.family() == DotFamily::nvidia);
    CHECK(h.nvidia() == &m);
    CHECK(h.amd() == nullptr);
    CHECK(h.name() == m.name);
    CHECK(h.a_input() == m.input);
    CHECK(h.b_input() == m.input);
    CHECK(h.k_step() == m.products_per_step);
    CHECK(h.scale_block() == 0);
    CHECK(h.records_trace());
    CHECK(h.hardware_validated() == m.hardware_validated);
    CHECK(h.source() == m.source);
    const bool f16acc = m.name.size() > 7 && m.name.substr(m.name.size() - 7) == "-f16acc";
    CHECK(std::string(h.accumulator().name) == (f16acc ? "fp16" : "fp32"));
    CHECK(fb::is_dot_model_name(m.name));
  }
  for (const fb::AmdDotModel& m : fb::amd_dot_models()) {
    DotModelQuery q;
    q.name = m.name;
    q.a_input = m.a_input;
    q.b_input = &m.b_input;
    const DotModel h = fb::find_dot_model(q);
    CHECK(h.family() == DotFamily::amd);
    CHECK(h.amd() == &m);
    CHECK(h.a_input() == m.a_input);
    CHECK(h.b_input() == m.b_input);
    CHECK(h.k_step() == m.products_per_step);
    CHECK(std::string(h.accumulator().name) == "fp32");
    CHECK_FALSE(h.records_trace());
    CHECK_FALSE(h.hardware_validated());
  }
  int scaled = 0;
  for (const fb::BlockScaledModel& m : fb::block_scaled_models()) {
    for (const fb::Format& a : m.inputs)
      for (const fb::Format& b : m.inputs) {
        DotModelQuery q;
        q.name = m.name;
        q.a_input = a;
        q.b_input = &b;
        q.kind = m.kind;
        q.scale_format = fb::block_scale_format_name(m.scale);
        q.block = m.block;
        const DotModel h = fb::find_dot_model(q);
        CHECK(h.family() == DotFamily::block_scaled);
        CHECK(h.block_scaled() == &m);
        CHECK(h.a_input() == a);
        CHECK(h.b_input() == b);
        CHECK(h.scale_block() == m.block);
        CHECK(h.scale_format() == m.scale);
        CHECK(h.kind() == m.kind);
        CHECK(h.k_step() == m.products_per_step);
        CHECK_FALSE(h.records_trace());
        ++scaled;
      }
  }
  CHECK(scaled > 0);
  // The names: every family's, each once.
  const std::vector<std::string_view> names = fb::dot_model_names();
  for (std::string_view n : {"sm70", "sm80", "sm90-wgmma", "exact-rne", "cdna1", "cdna3-k4", "sm100", "sm120"})
    CHECK(std::count(names.begin(), names.end(), n) == 1);
}

TEST_CASE("one hand-worked dot per family") {
  // a = (1, 1.5*2^-24), b = (1, 1), C = 0, bf16. Exact sum 1 + 1.5*2^-24 = 1 + 0.75 ulp(fp32).
  const float a[] = {1.0f, std::ldexp(1.5f, -24)}, b[] = {1.0f, 1.0f};
  // exact-rne: one RNE rounding of the exact sum: up, 1 + 2^-23.
  CHECK(fb::find_dot_model("exact-rne", formats::bf16).dot(0.0f, a, b, 2) == 1.0f + std::ldexp(1.0f, -23));
  // sm80: terms truncated to F = 24 bits below 2^0 (1.5*2^-24 -> 2^-24), then RZ into fp32: 1.
  CHECK(fb::find_dot_model("sm80", formats::bf16).dot(0.0f, a, b, 2) == 1.0f);
  // cdna3 (two-stage): the same truncation to 2^-24, the total 1 + 2^-24 a tie: RNE to even, 1.
  // cdna1 bf16 (exact step of 2): one RNE rounding of the exact sum, 1 + 2^-23.
  CHECK(fb::find_dot_model("cdna3", formats::bf16).dot(0.0f, a, b, 2) == 1.0f);
  CHECK(fb::find_dot_model("cdna1", formats::bf16).dot(0.0f, a, b, 2) == 1.0f + std::ldexp(1.0f, -23));
  // sm100 kind::mxf4 (e2m1, ue8m0 block 32): 64 products 1*0.5; block 0 scaled by 2^0*2^0,
  // block 1 by 2^1*2^-2: 32*0.5 + 32*0.5*0.5 = 24, exact.
  DotModelQuery q;
  q.name = "sm100";
  q.a_input = formats::e2m1;
  q.kind = "mxf4";
  const DotModel mx = fb::find_dot_model(q);
  std::vector<float> ones(64, 1.0f), halves(64, 0.5f);
  const std::uint8_t sa[] = {127, 128}, sb[] = {127, 125};
  CHECK(mx.dot(0.0f, ones.data(), halves.data(), 64, {sa, sb}) == 24.0f);
  CHECK_THROWS_AS(mx.dot(0.0f, ones.data(), halves.data(), 64), std::invalid_argument);
  CHECK_THROWS_AS(mx.dot_columns(halves.data(), ones.data(), halves.data(), 1, 64, 1, halves.data()),
                  std::invalid_argument);
  // Bits: the same dot through dot_bits (e2m1 1.0 = 0x2, 0.5 = 0x1).
  const std::vector<std::uint32_t> a_bits(64, 0x2), b_bits(64, 0x1);
  CHECK(mx.dot_bits(0, a_bits, b_bits, std::vector<std::uint8_t>{127, 128}, std::vector<std::uint8_t>{127, 125}) ==
        std::bit_cast<std::uint32_t>(24.0f));
  const DotModel sm80 = fb::find_dot_model("sm80", formats::bf16);
  const std::vector<std::uint32_t> one{0x3f80};
  CHECK_THROWS_AS(sm80.dot_bits(0, one, one, std::vector<std::uint8_t>{127}), std::invalid_argument);
}

TEST_CASE("dot_pairs, dot_columns and dot_rows give dot()'s bits lane by lane") {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  struct Form {
    const char* name;
    fb::Format input;
  };
  const Form forms[] = {{"sm80", formats::bf16},      {"sm90-wgmma", formats::e4m3}, {"sm100", formats::e2m1},
                        {"cdna1", formats::fp16},     {"cdna2", formats::bf16},      {"cdna3", formats::bf16},
                        {"cdna3", formats::e4m3fnuz}, {"exact-rne", formats::e3m2}};
  for (const Form& f : forms) {
    CAPTURE(f.name);
    const DotModel m = fb::find_dot_model(f.name, f.input);
    const int k = 40, lanes = 13;
    auto value = [&] {
      const fb::Rounded r = fb::round_double(f.input, normal(rng), fb::RoundingSpec{});
      return static_cast<float>(fb::to_double(f.input, r.bits));
    };
    std::vector<float> a(k), b(static_cast<std::size_t>(k) * lanes), c(lanes), pairs_a, pairs_b;
    for (float& x : a) x = value();
    for (float& x : b) x = value();
    for (float& x : c)
      x = static_cast<float>(
          fb::to_double(m.accumulator(), fb::round_double(m.accumulator(), 64.0 * normal(rng), {}).bits));
    std::vector<float> want(lanes), column(k);
    for (int l = 0; l < lanes; ++l) {
      for (int j = 0; j < k; ++j) column[j] = b[static_cast<std::size_t>(j) * lanes + l];
      want[l] = m.dot(c[l], a.data(), column.data(), k);
      pairs_a.insert(pairs_a.end(), a.begin(), a.end());
      pairs_b.insert(pairs_b.end(), column.begin(), column.end());
    }
    std::vector<float> d(lanes), p(lanes);
    m.dot_columns(c.data(), a.data(), b.data(), lanes, k, lanes, d.data());
    m.dot_pairs(c.data(), pairs_a.data(), pairs_b.data(), k, lanes, p.data());
    for (int l = 0; l < lanes; ++l) {
      CHECK(std::bit_cast<std::uint32_t>(d[l]) == std::bit_cast<std::uint32_t>(want[l]));
      CHECK(std::bit_cast<std::uint32_t>(p[l]) == std::bit_cast<std::uint32_t>(want[l]));
    }
    // dot_rows: row 0 is a with C = c, rows 1 and 2 fresh vectors and fresh C, in strided
    // rows (lda = k + 2, ldc = lanes + 1), C and D in place.
    const int rows = 3;
    const std::size_t lda = k + 2, ldc = lanes + 1;
    std::vector<float> a_rows(rows * lda, 9.0f), cd(rows * ldc, 9.0f), c_rows(rows * ldc);
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < k; ++j) a_rows[r * lda + j] = r == 0 ? a[j] : value();
    for (int r = 0; r < rows; ++r)
      for (int l = 0; l < lanes; ++l)
        cd[r * ldc + l] = r == 0
                              ? c[l]
                              : static_cast<float>(fb::to_double(
                                    m.accumulator(), fb::round_double(m.accumulator(), 64.0 * normal(rng), {}).bits));
    c_rows = cd;
    m.dot_rows(cd.data(), ldc, a_rows.data(), lda, rows, b.data(), nullptr, lanes, k, lanes, cd.data(), ldc);
    for (int r = 0; r < rows; ++r)
      for (int l = 0; l < lanes; ++l) {
        for (int j = 0; j < k; ++j) column[j] = b[static_cast<std::size_t>(j) * lanes + l];
        const float row_want = m.dot(c_rows[r * ldc + l], a_rows.data() + r * lda, column.data(), k);
        CHECK(std::bit_cast<std::uint32_t>(cd[r * ldc + l]) == std::bit_cast<std::uint32_t>(row_want));
      }
    CHECK(cd[ldc - 1] == 9.0f);  // past the lanes: untouched
  }
}

TEST_CASE("the lookup names what does not fit, in the caller's words") {
  const fb::DotModelWords cli{"MODEL", "INFMT", "--input-b", "--kind", "--scale-format", "--block"};
  DotModelQuery q;
  q.name = "sm99";
  q.a_input = formats::bf16;
  CHECK(contains(error_of(q), "model: unknown dot model 'sm99'"));
  CHECK(contains(error_of(q, cli), "MODEL: unknown dot model 'sm99'"));
  q.name = "cdna3";
  q.a_input = formats::e4m3;
  const std::string forms = error_of(q, cli);
  CHECK(contains(forms, "cdna3 has no e4m3 input form"));
  CHECK(contains(forms, "e4m3fnuz x e5m2fnuz (--input-b)"));
  q.name = "sm80";
  q.a_input = formats::bf16;
  q.b_input = &formats::fp16;
  CHECK(contains(error_of(q), "sm80 has no bf16 x fp16 input form"));
  q.b_input = nullptr;
  q.block = 16;
  CHECK(contains(error_of(q), "give kind"));
  q.block = 0;
  q.kind = "mxf4";
  CHECK(contains(error_of(q, cli), "MODEL: 'sm80' has no block-scaled kinds (--kind)"));
  q.name = "sm100";
  q.a_input = formats::e2m1;
  q.kind = "mxf4nvf4";
  CHECK(contains(error_of(q, cli), "is ambiguous: give --scale-format and --block"));
  q.scale_format = "ue5m2";
  CHECK(contains(error_of(q), "scale_format: 'ue5m2' is not one of ue8m0 ue4m3"));
  q.scale_format = "ue4m3";
  q.block = 16;
  q.a_input = formats::e4m3;
  CHECK(contains(error_of(q, cli), "INFMT: sm100 kind::mxf4nvf4 takes no e4m3 operand (it takes e2m1)"));
  q.a_input = formats::e2m1;
  CHECK(error_of(q).empty());
}
