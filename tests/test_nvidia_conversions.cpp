// tests/test_nvidia_conversions.cpp: fp32 -> bf16, fp16, e4m3, e5m2 conversions by
// fb::convert, bit for bit against NVIDIA's own host-side conversion functions
// (docs/DESIGN.md §10 rung 2).
//
// Contract: every conversion the CUDA headers provide on the host is compared on
// (a) a strided sample of 2^24 fp32 inputs that hits every sign and exponent, every
//     top-15 mantissa pattern, and low bytes 0x00 (exact ties), 0x01, 0x80 and a
//     hashed byte (sticky bits) (fast tier);
// (b) every rounding boundary of every target value: the fp32 midpoint between two
//     neighbours and its fp32 neighbours up to 2 ulps away, generated from the
//     NVIDIA header's own widening conversions (fast tier);
// (c) all 2^32 fp32 inputs ("exhaustive" test case, slow label).
// Results compare as bits; a NaN result compares as "both NaN" (any NaN encoding is
// acceptable, docs/DESIGN.md §2). __NV_NOSAT maps to OverflowPolicy::ieee and
// __NV_SATFINITE to OverflowPolicy::satfinite (docs/DESIGN.md §2).
// Checked with CUDA 13.0's headers and g++ -std=c++20: all of __float2bfloat16_rn/rz/
// ru/rd, __float2half_rn/rz/ru/rd and __nv_cvt_float_to_fp8 have host versions, so
// none is skipped. Without the headers the test prints a skip message.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "emu/ops.hpp"
#include "formats/format.hpp"
#include "tests/test_scale.hpp"

#if defined(FLASHBITS_HAVE_CUDA_HOST_HEADERS)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

namespace {

using fb::Format;
using fb::OverflowPolicy;
using fb::RoundingMode;
namespace fmt = fb::formats;

using fb_test::sanitizer_scale;

template <class T>
std::uint32_t raw16(const T& v) {
  static_assert(sizeof(T) == 2);
  std::uint16_t u;
  std::memcpy(&u, &v, 2);
  return u;
}

// One NVIDIA host conversion and the emulator settings that must reproduce it.
struct Conversion {
  const char* name;
  Format target;
  RoundingMode mode;
  OverflowPolicy overflow;
  std::uint32_t (*nvidia)(float);
};

const Conversion kConversions[] = {
    {"__float2bfloat16_rn", fmt::bf16, RoundingMode::rne, OverflowPolicy::ieee,
     [](float x) { return raw16(__float2bfloat16_rn(x)); }},
    {"__float2bfloat16_rz", fmt::bf16, RoundingMode::rtz, OverflowPolicy::ieee,
     [](float x) { return raw16(__float2bfloat16_rz(x)); }},
    {"__float2bfloat16_ru", fmt::bf16, RoundingMode::rup, OverflowPolicy::ieee,
     [](float x) { return raw16(__float2bfloat16_ru(x)); }},
    {"__float2bfloat16_rd", fmt::bf16, RoundingMode::rdn, OverflowPolicy::ieee,
     [](float x) { return raw16(__float2bfloat16_rd(x)); }},
    {"__float2half_rn", fmt::fp16, RoundingMode::rne, OverflowPolicy::ieee,
     [](float x) { return raw16(__float2half_rn(x)); }},
    {"__float2half_rz", fmt::fp16, RoundingMode::rtz, OverflowPolicy::ieee,
     [](float x) { return raw16(__float2half_rz(x)); }},
    {"__float2half_ru", fmt::fp16, RoundingMode::rup, OverflowPolicy::ieee,
     [](float x) { return raw16(__float2half_ru(x)); }},
    {"__float2half_rd", fmt::fp16, RoundingMode::rdn, OverflowPolicy::ieee,
     [](float x) { return raw16(__float2half_rd(x)); }},
    {"__nv_cvt_float_to_fp8/E4M3/SATFINITE", fmt::e4m3, RoundingMode::rne, OverflowPolicy::satfinite,
     [](float x) -> std::uint32_t { return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3); }},
    {"__nv_cvt_float_to_fp8/E4M3/NOSAT", fmt::e4m3, RoundingMode::rne, OverflowPolicy::ieee,
     [](float x) -> std::uint32_t { return __nv_cvt_float_to_fp8(x, __NV_NOSAT, __NV_E4M3); }},
    {"__nv_cvt_float_to_fp8/E5M2/SATFINITE", fmt::e5m2, RoundingMode::rne, OverflowPolicy::satfinite,
     [](float x) -> std::uint32_t { return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2); }},
    {"__nv_cvt_float_to_fp8/E5M2/NOSAT", fmt::e5m2, RoundingMode::rne, OverflowPolicy::ieee,
     [](float x) -> std::uint32_t { return __nv_cvt_float_to_fp8(x, __NV_NOSAT, __NV_E5M2); }},
};

struct Mismatches {
  std::uint64_t count = 0;
  std::vector<std::string> first;  // a few examples for the failure message
};

// Compares one input; returns false and records it on a mismatch.
bool compare_one(const Conversion& c, std::uint32_t input, Mismatches& m) {
  fb::RoundingSpec spec;
  spec.mode = c.mode;
  spec.overflow = c.overflow;
  const std::uint32_t ours = fb::convert(c.target, fmt::fp32, input, spec).bits;
  const std::uint32_t theirs = c.nvidia(std::bit_cast<float>(input));
  const bool ours_nan = fb::is_nan(c.target, ours), theirs_nan = fb::is_nan(c.target, theirs);
  if ((ours_nan && theirs_nan) || (!ours_nan && !theirs_nan && ours == theirs)) return true;
  ++m.count;
  if (m.first.size() < 8) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s(fp32 %08x = %.9g): flashbits %x, NVIDIA %x", c.name, input,
                  static_cast<double>(std::bit_cast<float>(input)), ours, theirs);
    m.first.emplace_back(buf);
  }
  return false;
}

// Calls for_each_input(thread, threads, visit) on each of `threads` threads; reports mismatches
// from the main thread (doctest assertions stay on one thread).
template <class ForEachInput>
void check_on_threads(const Conversion& c, unsigned threads, ForEachInput for_each_input) {
  std::vector<Mismatches> per_thread(threads);
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back(
        [&, t] { for_each_input(t, threads, [&](std::uint32_t input) { compare_one(c, input, per_thread[t]); }); });
  }
  for (auto& th : pool) th.join();
  std::uint64_t total = 0;
  for (const auto& m : per_thread) {
    total += m.count;
    for (const auto& example : m.first) MESSAGE(example);
  }
  INFO(std::string(c.name));
  CHECK(total == 0);
}

unsigned worker_threads() {
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : hw;
}

// Low byte for the strided sample, cycled by fp32 mantissa bits 17-18 so that every
// exponent sees exact ties (0x00), a lone sticky bit (0x01), a half (0x80) and noise.
// Bits 17-18 lie above bf16's and fp16's round bits (15, 12) and are zero in e4m3's
// and e5m2's exact ties (round bits 19, 20), so every target's exact ties get 0x00.
std::uint32_t low_byte_for(std::uint32_t high24) {
  switch ((high24 >> 9) & 3u) {
    case 0:
      return 0x00;
    case 1:
      return 0x01;
    case 2:
      return 0x80;
    default:
      return (high24 * 0x9e3779b1u) >> 24;
  }
}

// The exact fp32 values of every target pattern, widened by NVIDIA's own host
// functions (an independent decoder), for building boundary inputs.
std::vector<float> nvidia_values(const Format& target) {
  std::vector<float> out;
  const std::uint32_t patterns = 1u << target.width();
  for (std::uint32_t p = 0; p < patterns; ++p) {
    float v;
    if (target == fmt::bf16) {
      __nv_bfloat16_raw raw;
      raw.x = static_cast<unsigned short>(p);
      v = __bfloat162float(__nv_bfloat16(raw));
    } else if (target == fmt::fp16) {
      __half_raw raw;
      raw.x = static_cast<unsigned short>(p);
      v = __half2float(__half(raw));
    } else {
      const __half_raw hr =
          __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(p), target == fmt::e4m3 ? __NV_E4M3 : __NV_E5M2);
      v = __half2float(__half(hr));
    }
    if (std::isfinite(v) && v >= 0.0f) out.push_back(v);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// Midpoints between neighbours (and one spacing beyond max finite) and their fp32
// neighbours, both signs.
std::vector<std::uint32_t> boundary_inputs(const Format& target) {
  const std::vector<float> v = nvidia_values(target);
  std::vector<float> cuts;
  for (std::size_t i = 0; i + 1 < v.size(); ++i) cuts.push_back(v[i] + (v[i + 1] - v[i]) / 2);  // exact
  const float top = v.back(), spacing = v.back() - v[v.size() - 2];
  cuts.push_back(top + spacing / 2);  // the overflow threshold of round-to-nearest
  cuts.push_back(top + spacing);      // the first value past max finite
  cuts.push_back(top + 3 * spacing / 2);
  std::vector<std::uint32_t> out;
  for (float cut : cuts) {
    const auto base = std::bit_cast<std::uint32_t>(cut);
    for (int d = -2; d <= 2; ++d) {
      const std::uint32_t magnitude = base + static_cast<std::uint32_t>(d);
      out.push_back(magnitude);
      out.push_back(magnitude | 0x80000000u);
    }
  }
  for (float x : v) {
    out.push_back(std::bit_cast<std::uint32_t>(x));
    out.push_back(std::bit_cast<std::uint32_t>(x) | 0x80000000u);
  }
  return out;
}

}  // namespace

TEST_CASE("fp32 conversions match NVIDIA host functions on a strided sample of 2^24 inputs") {
  const std::uint32_t step = sanitizer_scale() ? 64u : 1u;  // 2^24 inputs, or 2^18 under sanitizers
  for (const Conversion& c : kConversions) {
    check_on_threads(c, worker_threads(), [step](unsigned t, unsigned n, auto visit) {
      for (std::uint32_t high = t * step; high < (1u << 24); high += n * step) visit((high << 8) | low_byte_for(high));
    });
  }
}

TEST_CASE("fp32 conversions match NVIDIA host functions at every rounding boundary") {
  for (const Conversion& c : kConversions) {
    const std::vector<std::uint32_t> inputs = boundary_inputs(c.target);
    REQUIRE(inputs.size() > 1000);
    check_on_threads(c, 1, [&](unsigned, unsigned, auto visit) {
      for (std::uint32_t x : inputs) visit(x);
    });
  }
}

TEST_CASE("the NVIDIA comparison detects a wrong rounding mode or overflow policy") {
  // Pair each conversion with a deliberately wrong emulator setting: the boundary
  // inputs must expose it, or the checks above could not fail.
  for (const Conversion& c : kConversions) {
    Conversion wrong = c;
    if (c.target == fmt::e4m3 || c.target == fmt::e5m2) {
      wrong.overflow = c.overflow == OverflowPolicy::ieee ? OverflowPolicy::satfinite : OverflowPolicy::ieee;
    } else {
      wrong.mode = c.mode == RoundingMode::rne ? RoundingMode::rna : RoundingMode::rne;
    }
    Mismatches m;
    for (std::uint32_t x : boundary_inputs(c.target)) compare_one(wrong, x, m);
    INFO(std::string(c.name));
    CHECK(m.count > 0);
  }
}

TEST_CASE("fp32 specials convert as NVIDIA host functions do") {
  const std::uint32_t specials[] = {
      0x00000000u,           0x80000000u,           0x7f800000u,         0xff800000u,         0x7fc00000u,
      0xffc00000u,           0x7f800001u,           0x7fffffffu,         0x00000001u,         0x807fffffu,
      0x7f7fffffu,           0xff7fffffu,           0x43e00000u /*448*/, 0x43e80000u /*464*/, 0x47600000u /*57344*/,
      0x47700000u /*61440*/, 0x477fe000u /*65504*/, 0x477ff000u /*65520*/};
  for (const Conversion& c : kConversions) {
    check_on_threads(c, 1, [&](unsigned, unsigned, auto visit) {
      for (std::uint32_t x : specials) visit(x);
    });
  }
}

// One subcase per conversion, so that one can be run alone: --subcase='__float2half_rn' (names hold no commas,
// doctest's filter separator).
TEST_CASE("fp32 conversions match NVIDIA host functions on all 2^32 inputs (exhaustive)") {
  for (const Conversion& c : kConversions) {
    SUBCASE(c.name) {
      check_on_threads(c, worker_threads(), [](unsigned t, unsigned n, auto visit) {
        for (std::uint64_t x = t; x <= 0xffffffffull; x += n) visit(static_cast<std::uint32_t>(x));
      });
      MESSAGE("all 2^32 fp32 inputs compared for " << std::string(c.name));
    }
  }
}

#else  // no CUDA host headers

// doctest has no run-time skip: these cases run, say why nothing was checked, and pass.
TEST_CASE("fp32 conversions against NVIDIA host functions: SKIPPED, no CUDA host headers") {
  MESSAGE("SKIPPED: cuda_bf16.h / cuda_fp16.h / cuda_fp8.h not found; NVIDIA conversion checks not run");
}
TEST_CASE("fp32 conversions against NVIDIA host functions, all inputs (exhaustive): SKIPPED, no CUDA host headers") {
  MESSAGE("SKIPPED: cuda_bf16.h / cuda_fp16.h / cuda_fp8.h not found; NVIDIA conversion checks not run");
}

#endif
