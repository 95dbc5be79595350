// bench/bench_rounding_vs_cpfloat.cpp: fp32 -> bf16 / fp16 / e4m3 array rounding
// (issue 25, item 3), timed side by side in one run on one core: fb::round_array's
// flags-free path (flags_out null) into uint32 containers and into the format's own
// width (uint16 for bf16/fp16, uint8 for e4m3), its flagged path, the CPU's own conversion
// instruction where it has one (F16C vcvtps2ph for fp16 RNE and RZ; AVX512-BF16
// vcvtneps2bf16 for bf16 RNE) and CPFloat (when built with FLASHBITS_CPFLOAT_DIR).
// Contract: prints ns per element (thread CPU time, best of a few repetitions) for
// 2^24 elements (--quick: 2^20), and exits 1 if any flashbits result (flags-free or
// flagged, bits or flags) differs from the slow path, fb::convert per element, or if
// the CPU instruction's bits differ from flashbits' RNE/RZ ones. CPFloat's results
// are not compared (its e4m3 overflow and sr draws follow its own conventions).
// Note: the uint32 form writes 4 bytes per element, the CPU instructions and the
// narrow form 2 (1 for e4m3), CPFloat 4 (an fp32 array): the loops are bound by that
// memory traffic, so the ratios that compare like with like use the narrow form.
#include <cpuid.h>
#include <immintrin.h>
#include <time.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "emu/array_rounding.hpp"
#include "emu/ops.hpp"
#include "formats/format.hpp"

#ifdef FLASHBITS_HAVE_CPFLOAT
extern "C" int fb_bench_cpfloat_round(float* out, const float* in, std::size_t n, int precision, int emin, int emax,
                                      int with_inf, int mode);
#endif

namespace {

double thread_cpu_ns() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e9 + static_cast<double>(t.tv_nsec);
}

// Best of `reps` runs of each of `variants`, in ns per element. The variants take turns
// (one run of each per round), so that a change in the machine's load or memory state
// during the measurement falls on all of them alike: the ratios compare like with like.
std::vector<double> time_per_element(std::size_t n, int reps, const std::vector<std::function<void()>>& variants) {
  std::vector<double> best(variants.size(), 1e300);
  for (int r = 0; r < reps; ++r) {
    for (std::size_t v = 0; v < variants.size(); ++v) {
      const double t0 = thread_cpu_ns();
      variants[v]();
      best[v] = std::min(best[v], thread_cpu_ns() - t0);
    }
  }
  for (double& b : best) b /= static_cast<double>(n);
  return best;
}

#if defined(__x86_64__) && defined(__GNUC__)
// fp16 by F16C: imm 0 = nearest even, 3 = toward zero (MXCSR untouched).
template <int Imm>
[[gnu::target("avx,f16c")]] void f16c_convert(const float* in, std::uint16_t* out, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(_mm256_loadu_ps(in + i), Imm));
  }
  for (; i < n; ++i) out[i] = static_cast<std::uint16_t>(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(in[i]), Imm), 0));
}
// bf16 by AVX512-BF16 (nearest even; it flushes fp32 subnormals, which the inputs here lack).
[[gnu::target("avx512f,avx512bf16,avx512vl")]] void bf16_convert(const float* in, std::uint16_t* out, std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(in + i));
    std::memcpy(out + i, &h, sizeof h);
  }
  for (; i < n; ++i) {  // the tail in scalar code, nearest even on the top half
    std::uint32_t b = std::bit_cast<std::uint32_t>(in[i]);
    b += 0x7fffu + ((b >> 16) & 1u);
    out[i] = static_cast<std::uint16_t>(b >> 16);
  }
}
// F16C from CPUID leaf 1, ECX bit 29 (clang's __builtin_cpu_supports lacks "f16c").
bool have_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  return ((ecx >> 29) & 1u) != 0 && __builtin_cpu_supports("avx");
}
// AVX512-BF16 from CPUID leaf 7, subleaf 1, EAX bit 5 (not every compiler's
// __builtin_cpu_supports knows it); AVX-512 itself with the OS's support via the builtin.
bool have_avx512bf16() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) return false;
  return ((eax >> 5) & 1u) != 0 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
}
#else
bool have_f16c() { return false; }
bool have_avx512bf16() { return false; }
#endif

// Memory floors: the least a converter can do, one load and one store per element
// (the top half of the fp32 bits, which is bf16 truncated; an fp32 copy). Array
// rounding at 2^24 elements is bound by this traffic, so these bound every ratio:
// a converter writing fp32 (CPFloat) cannot beat copy_fp32, one writing 16-bit values
// cannot beat copy_top_half.
[[gnu::noinline]] void copy_top_half(const float* in, std::uint16_t* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(in[i]) >> 16);
}
[[gnu::noinline]] void copy_fp32(const float* in, float* out, std::size_t n) {
  std::memcpy(out, in, n * sizeof(float));
}

struct Case {
  const char* format_name;
  fb::Format format;
  fb::RoundingMode mode;
  int cpfloat_precision, cpfloat_emin, cpfloat_emax, cpfloat_inf;
};

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  const std::size_t n = quick ? (std::size_t{1} << 20) : (std::size_t{1} << 24);
  const int reps = quick ? 2 : 5;
  // Inputs: magnitudes across 2^-24 .. 2^24 with random significands and signs
  // (most round inexactly; e4m3 sees underflow and overflow too). No inf or NaN.
  std::vector<float> in(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t r = fb::mix64(i + 12345);
    const std::uint32_t exponent_field = 127 - 24 + static_cast<std::uint32_t>((r >> 32) % 49);
    in[i] = std::bit_cast<float>(static_cast<std::uint32_t>(r & 0x807fffffu) | (exponent_field << 23));
  }
  std::vector<std::uint32_t> fast(n), flagged(n);
  std::vector<std::uint16_t> narrow16(n);
  std::vector<std::uint8_t> narrow8(n);
  std::vector<std::uint16_t> native(n);
  std::vector<float> cpf(n);
  using fb::RoundingMode;
  const Case cases[] = {
      {"bf16", fb::formats::bf16, RoundingMode::rne, 8, -126, 127, 1},
      {"bf16", fb::formats::bf16, RoundingMode::rtz, 8, -126, 127, 1},
      {"bf16", fb::formats::bf16, RoundingMode::sr, 8, -126, 127, 1},
      {"fp16", fb::formats::fp16, RoundingMode::rne, 11, -14, 15, 1},
      {"fp16", fb::formats::fp16, RoundingMode::rtz, 11, -14, 15, 1},
      {"fp16", fb::formats::fp16, RoundingMode::sr, 11, -14, 15, 1},
      {"e4m3", fb::formats::e4m3, RoundingMode::rne, 4, -6, 8, 0},
      {"e4m3", fb::formats::e4m3, RoundingMode::rtz, 4, -6, 8, 0},
      {"e4m3", fb::formats::e4m3, RoundingMode::sr, 4, -6, 8, 0},
  };
  std::printf("fp32 array rounding, %zu elements (2^%d), ns/element, thread CPU time, best of %d; lane ISA: %s\n", n,
              std::countr_zero(n), reps, fb::lane_instruction_set());
#ifdef FLASHBITS_HAVE_CPFLOAT
  std::printf("CPFloat: built from %s with -O3 -march=native, PCG32 for sr\n", FLASHBITS_CPFLOAT_DIR_STRING);
#else
  std::printf("CPFloat: not found (configure with -DFLASHBITS_CPFLOAT_DIR=<cpfloat>/src); its rows are skipped\n");
#endif
  std::printf("bf16 instruction (AVX512-BF16 vcvtneps2bf16): %s; fp16 instruction (F16C vcvtps2ph): %s\n",
              have_avx512bf16() ? "yes" : "none", have_f16c() ? "yes" : "none");
  {
    std::vector<std::uint16_t> half(n);
    const std::vector<double> t = time_per_element(
        n, reps, {[&] { copy_top_half(in.data(), half.data(), n); }, [&] { copy_fp32(in.data(), cpf.data(), n); }});
    const double t_half = t[0], t_copy = t[1];
    std::printf(
        "memory floors: fp32 -> 16-bit top half %.3f, fp32 copy (memcpy) %.3f ns/element: %.2fx, the most a "
        "16-bit writer can gain on an fp32 writer here\n",
        t_half, t_copy, t_copy / t_half);
  }
  std::printf("%-5s %-4s %10s %10s %10s %10s %10s %14s %14s\n", "fmt", "mode", "free-u32", "free-narrow", "flagged",
              "cpu-insn", "cpfloat", "narrow/insn", "cpfloat/narrow");
  bool ok = true;
  for (const Case& c : cases) {
    fb::RoundingSpec spec;
    spec.mode = c.mode;
    spec.seed = 7;
    fb::Flags flags = 0;
    const bool eight_bit = c.format.container_bits == 8;
    std::vector<std::function<void()>> variants = {
        [&] { fb::round_array(c.format, in.data(), fast.data(), n, spec); },
        [&] {
          if (eight_bit) {
            fb::round_array(c.format, in.data(), narrow8.data(), n, spec);
          } else {
            fb::round_array(c.format, in.data(), narrow16.data(), n, spec);
          }
        },
        [&] { fb::round_array(c.format, in.data(), flagged.data(), n, spec, 0, &flags); }};
    // The CPU's own conversion and CPFloat, when present, take their turns too.
    int native_at = -1, cpfloat_at = -1;
#if defined(__x86_64__) && defined(__GNUC__)
    const bool fp16 = c.format == fb::formats::fp16, bf16 = c.format == fb::formats::bf16;
    if (fp16 && have_f16c() && (c.mode == RoundingMode::rne || c.mode == RoundingMode::rtz)) {
      native_at = static_cast<int>(variants.size());
      variants.push_back([&] {
        if (c.mode == RoundingMode::rne) {
          f16c_convert<0>(in.data(), native.data(), n);
        } else {
          f16c_convert<3>(in.data(), native.data(), n);
        }
      });
    } else if (bf16 && have_avx512bf16() && c.mode == RoundingMode::rne) {
      native_at = static_cast<int>(variants.size());
      variants.push_back([&] { bf16_convert(in.data(), native.data(), n); });
    }
#endif
#ifdef FLASHBITS_HAVE_CPFLOAT
    const int cpf_mode = c.mode == RoundingMode::rne ? 0 : c.mode == RoundingMode::rtz ? 1 : 2;
    cpfloat_at = static_cast<int>(variants.size());
    variants.push_back([&] {
      fb_bench_cpfloat_round(cpf.data(), in.data(), n, c.cpfloat_precision, c.cpfloat_emin, c.cpfloat_emax,
                             c.cpfloat_inf, cpf_mode);
    });
#endif
    const std::vector<double> times = time_per_element(n, reps, variants);
    const double t_free = times[0], t_narrow = times[1], t_flag = times[2];
    const double t_native = native_at >= 0 ? times[static_cast<std::size_t>(native_at)] : -1;
    const double t_cpf = cpfloat_at >= 0 ? times[static_cast<std::size_t>(cpfloat_at)] : -1;
    // The slow path: fb::convert per element, bits and the OR of the flags.
    fb::Flags want_flags = 0;
    std::size_t differ = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const fb::Rounded r = fb::convert(c.format, fb::formats::fp32, std::bit_cast<std::uint32_t>(in[i]), spec, i);
      want_flags |= r.flags;
      const std::uint32_t narrow_bits = eight_bit ? narrow8[i] : narrow16[i];
      differ += (r.bits != fast[i]) + (r.bits != flagged[i]) + (r.bits != narrow_bits);
    }
    if (differ != 0 || flags != want_flags) {
      std::printf("MISMATCH %s %s: %zu elements differ from fb::convert, flags 0x%x want 0x%x\n", c.format_name,
                  std::string(fb::to_string(c.mode)).c_str(), differ, flags, want_flags);
      ok = false;
    }
    if (t_native >= 0) {
      std::size_t native_differ = 0;
      for (std::size_t i = 0; i < n; ++i) native_differ += native[i] != fb::to_layout(c.format, fast[i]);
      if (native_differ != 0) {
        std::printf("MISMATCH %s %s: %zu elements differ from the CPU instruction\n", c.format_name,
                    std::string(fb::to_string(c.mode)).c_str(), native_differ);
        ok = false;
      }
    }
    char native_s[16] = "none", cpf_s[16] = "-", ratio_native[16] = "-", ratio_cpf[16] = "-";
    if (t_native >= 0) {
      std::snprintf(native_s, sizeof native_s, "%.3f", t_native);
      std::snprintf(ratio_native, sizeof ratio_native, "%.2fx", t_narrow / t_native);
    }
    if (t_cpf >= 0) {
      std::snprintf(cpf_s, sizeof cpf_s, "%.3f", t_cpf);
      std::snprintf(ratio_cpf, sizeof ratio_cpf, "%.2fx", t_cpf / t_narrow);
    }
    std::printf("%-5s %-4s %10.3f %10.3f %10.3f %10s %10s %14s %14s\n", c.format_name,
                std::string(fb::to_string(c.mode)).c_str(), t_free, t_narrow, t_flag, native_s, cpf_s, ratio_native,
                ratio_cpf);
  }
  std::printf(
      "narrow/insn: flags-free narrow-container time over the CPU instruction's, both writing 16-bit values (target "
      "<= 1.25); cpfloat/narrow: how many times faster than CPFloat (target >= 1.5)\n");
  if (!ok) {
    std::printf("FAILED: results differ\n");
    return 1;
  }
  std::printf("all results equal the slow path\n");
  return 0;
}
