// tests/test_probe_file.cpp: the probe file format (gpu/probe_file.hpp) and the probe
// checker (gpu/probe_check.hpp) without a GPU.
// - Round trip: every header field and case word survives write/read; malformed files
//   fail with an error naming the file and the field.
// - The checker: a probe file whose D values come from an INDEPENDENT computation
//   (exact integer arithmetic in this file implementing the published Hopper rule of
//   DESIGN.md §4: terms truncated to F=25 fraction bits below the largest exponent,
//   exact sum, one truncation to fp32), plus trivially exact integer dot products,
//   must check clean (exit 0); one corrupted D must give exit 1 and a report naming
//   that case; a broken file must give exit 2.
#include <doctest/doctest.h>

#include <boost/multiprecision/cpp_int.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "gpu/probe_check.hpp"
#include "gpu/probe_file.hpp"

namespace {

using boost::multiprecision::cpp_int;
using fb::gpu::ProbeFile;
using fb::gpu::ProbeSection;

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("fb_test_probe_" + std::to_string(::getpid()) + "_" + name)).string();
}

std::uint32_t float_bits(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// bf16 of a float that is exactly representable (the top 16 bits).
std::uint32_t bf16_of(float f) {
  const std::uint32_t b = float_bits(f);
  REQUIRE((b & 0xffffu) == 0u);
  return b >> 16;
}

// Independent model of one Hopper fp32-accumulate step for normal, non-zero bf16 inputs
// and a normal non-zero fp32 C: value = sig * 2^(exp) with integer significands.
struct Term {
  cpp_int sig;  // signed integer significand
  int exp;      // value = sig * 2^exp
  int lead;     // exponent of the leading bit position (alignment exponent)
};
Term bf16_product(std::uint32_t a, std::uint32_t b) {
  auto parts = [](std::uint32_t x, long long& m, int& e) {
    const int field = static_cast<int>((x >> 7) & 0xff);
    m = static_cast<long long>((x & 0x7f) | 0x80) * ((x & 0x8000) ? -1 : 1);
    e = field - 127 - 7;
  };
  long long ma, mb;
  int ea, eb;
  parts(a, ma, ea);
  parts(b, mb, eb);
  // Published rule: the product's exponent is ea + eb (significand in [1,4)).
  return {cpp_int(ma) * mb, ea + eb, ea + 7 + eb + 7};
}
Term fp32_term(std::uint32_t c) {
  const int field = static_cast<int>((c >> 23) & 0xff);
  const long long m = static_cast<long long>((c & 0x7fffff) | 0x800000) * ((c >> 31) ? -1 : 1);
  return {cpp_int(m), field - 127 - 23, field - 127};
}
std::uint32_t hopper_reference(std::uint32_t c, const std::vector<std::uint32_t>& a, const std::vector<std::uint32_t>& b) {
  constexpr int F = 25;
  std::vector<Term> terms{fp32_term(c)};
  for (std::size_t i = 0; i < a.size(); ++i) terms.push_back(bf16_product(a[i], b[i]));
  int largest = terms[0].lead;
  for (const Term& t : terms) largest = std::max(largest, t.lead);
  const int unit = largest - F;
  cpp_int sum = 0;
  for (const Term& t : terms) {
    const int shift = t.exp - unit;
    if (shift >= 0) sum += t.sig << shift;
    else sum += t.sig / (cpp_int(1) << -shift);  // cpp_int division truncates toward zero
  }
  if (sum == 0) return 0;  // +0 (the cases below never sum to zero)
  const bool neg = sum < 0;
  cpp_int mag = neg ? cpp_int(-sum) : sum;
  const int bits = static_cast<int>(msb(mag)) + 1;
  int exponent = unit;
  if (bits > 24) {  // truncate (RZ) to 24 significant bits
    mag >>= (bits - 24);
    exponent += bits - 24;
  }
  const double value = std::ldexp(mag.convert_to<double>(), exponent);  // exact: < 2^24 significand
  REQUIRE(std::fabs(value) >= 0x1p-126);
  REQUIRE(std::fabs(value) < 0x1p127);
  return float_bits(static_cast<float>(neg ? -value : value));
}

ProbeSection hopper_section() {
  ProbeSection sec;
  sec.header.form = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32";
  sec.header.k = 16;
  sec.header.input = fb::formats::bf16;
  sec.header.batches = {"integers", "rule"};
  sec.header.models = {"sm90-mma"};
  sec.header.extra["source"] = "test:independent";
  std::mt19937 rng(12345);
  std::vector<std::uint32_t> a(16), b(16);
  // Trivially exact: small integers, every sum exact in fp32 under any alignment rule.
  for (int i = 0; i < 200; ++i) {
    float sum = static_cast<float>(static_cast<int>(rng() % 201) - 100);
    const std::uint32_t c = float_bits(sum);
    for (int j = 0; j < 16; ++j) {
      const float x = static_cast<float>(static_cast<int>(rng() % 9) - 4);
      const float y = static_cast<float>(static_cast<int>(rng() % 9) - 4);
      a[j] = bf16_of(x);
      b[j] = bf16_of(y);
      sum += x * y;  // exact: integers far below 2^24
    }
    sec.add_case(0, c, a.data(), b.data(), float_bits(sum));
  }
  // Random normal values over a 2^16 exponent spread: truncation matters here.
  auto random_bf16 = [&](int elo, int ehi) {
    const int e = elo + static_cast<int>(rng() % static_cast<unsigned>(ehi - elo + 1));
    return static_cast<std::uint32_t>(((rng() & 1u) << 15) | (static_cast<std::uint32_t>(e + 127) << 7) | (rng() & 0x7fu));
  };
  for (int i = 0; i < 400; ++i) {
    const int ec = -8 + static_cast<int>(rng() % 17);
    const std::uint32_t c = ((rng() & 1u) << 31) | (static_cast<std::uint32_t>(ec + 127) << 23) | (rng() & 0x7fffffu);
    for (int j = 0; j < 16; ++j) {
      a[j] = random_bf16(-8, 4);
      b[j] = random_bf16(-8, 4);
    }
    sec.add_case(1, c, a.data(), b.data(), hopper_reference(c, a, b));
  }
  return sec;
}

}  // namespace

TEST_CASE("probe_file_round_trip") {
  ProbeFile file;
  ProbeSection s1 = hopper_section();
  ProbeSection s2;
  s2.header.form = "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3";
  s2.header.k = 32;
  s2.header.input = fb::formats::e4m3;
  s2.header.batches = {"random_bits"};
  s2.header.models = {"sm90-wgmma", "exact-rne"};
  s2.header.extra = {{"device", "NVIDIA H100 80GB HBM3"}, {"compute_capability", "9.0"}};
  std::mt19937 rng(7);
  std::vector<std::uint32_t> a(32), b(32);
  for (int i = 0; i < 50; ++i) {
    for (int j = 0; j < 32; ++j) {
      a[j] = rng() & 0xffu;
      b[j] = rng() & 0xffu;
    }
    s2.add_case(0, rng(), a.data(), b.data(), rng());
  }
  file.sections = {s1, s2};
  const std::string path = temp_path("roundtrip.fbp");
  fb::gpu::write_probe_file(path, file);
  const ProbeFile back = fb::gpu::read_probe_file(path);
  REQUIRE(back.sections.size() == 2);
  for (std::size_t s = 0; s < 2; ++s) {
    const auto& x = file.sections[s].header;
    const auto& y = back.sections[s].header;
    CHECK(y.form == x.form);
    CHECK(y.k == x.k);
    CHECK(y.input == x.input);
    CHECK(y.c_format == x.c_format);
    CHECK(y.d_format == x.d_format);
    CHECK(y.batches == x.batches);
    CHECK(y.models == x.models);
    CHECK(y.extra == x.extra);
    CHECK(back.sections[s].words() == file.sections[s].words());
  }
  CHECK(back.sections[1].cases() == 50);
  CHECK(back.sections[1].a(3)[5] == file.sections[1].a(3)[5]);

  // Truncation, bad magic and a bad field each name the file and the field.
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto expect_error = [&](const std::string& content, const std::string& field) {
    const std::string bad = temp_path("bad.fbp");
    std::ofstream(bad, std::ios::binary) << content;
    try {
      fb::gpu::read_probe_file(bad);
      FAIL("no error for a bad file (" << field << ")");
    } catch (const fb::gpu::ProbeFileError& e) {
      const std::string msg = e.what();
      CHECK(msg.find(bad) != std::string::npos);
      CHECK_MESSAGE(msg.find(field) != std::string::npos, msg);
    }
    std::filesystem::remove(bad);
  };
  expect_error(bytes.substr(0, bytes.size() - 3), "cases");
  expect_error("XXPROBE1" + bytes.substr(8), "magic");
  std::string wrong_input = bytes;
  const std::size_t at = wrong_input.find("input=bf16");
  REQUIRE(at != std::string::npos);
  wrong_input.replace(at, 10, "input=bq16");
  expect_error(wrong_input, "input");
  std::string extra = bytes + "x";
  expect_error(extra, "trailing data");
  std::filesystem::remove(path);
}

TEST_CASE("probe_check_detects_corrupted_output") {
  ProbeFile file;
  file.sections = {hopper_section()};
  const std::string path = temp_path("check.fbp");
  fb::gpu::write_probe_file(path, file);
  fb::gpu::ProbeCheckOptions options;
  {
    std::ostringstream out, err;
    const int rc = fb::gpu::run_probe_check(path, options, out, err);
    CHECK_MESSAGE(rc == 0, out.str() << err.str());
    CHECK(out.str().find("600 cases, 600 match, 0 mismatch") != std::string::npos);
  }
  // Flip the last bit of one rule-based result: exactly one mismatch, explained.
  const std::size_t victim = 417;
  file.sections[0].set_d(victim, file.sections[0].d(victim) ^ 1u);
  fb::gpu::write_probe_file(path, file);
  {
    std::ostringstream out, err;
    const int rc = fb::gpu::run_probe_check(path, options, out, err);
    CHECK(rc == 1);
    const std::string text = out.str();
    CHECK_MESSAGE(text.find("1 mismatch") != std::string::npos, text);
    CHECK(text.find("case 417 (batch rule)") != std::string::npos);
    CHECK(text.find("(1 ulp)") != std::string::npos);
    CHECK(text.find("step 0: largest exponent") != std::string::npos);
  }
  {
    std::ostringstream out, err;
    options.json = true;
    CHECK(fb::gpu::run_probe_check(path, options, out, err) == 1);
    CHECK(out.str().find("\"mismatches\": 1") != std::string::npos);
    options.json = false;
  }
  // A model with no preset for the input, and an unreadable file: exit 2, one line.
  {
    std::ostringstream out, err;
    options.model = "sm70";
    CHECK(fb::gpu::run_probe_check(path, options, out, err) == 2);
    CHECK(err.str().find("sm70") != std::string::npos);
    options.model.clear();
  }
  {
    std::ostringstream out, err;
    CHECK(fb::gpu::run_probe_check(path + ".missing", options, out, err) == 2);
    CHECK(err.str().find(".missing") != std::string::npos);
  }
  std::filesystem::remove(path);
}
