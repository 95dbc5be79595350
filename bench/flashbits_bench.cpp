// bench/flashbits_bench.cpp: `flashbits-bench`, throughput of the emulator's hot paths
// (issue 2 "Speed", docs/DESIGN.md §3 "Speed without losing exactness").
//
// Contract: one run measures, single-threaded, the median over several repetitions
// (wall time with std::chrono::steady_clock, and this thread's CPU time) of
// - fp32 array -> bf16 / fp16 / e4m3 rounding through fb::round_array (rne, rtz, sr),
//   in ns per element (default 2^24 elements: the size changes the figure, ~20% between
//   2^22 and 2^24, so every report prints it; --array-elements sets it);
// - native fp32 add / mul / fma loops over float arrays (the baseline of this run);
// - emulated scalar bf16 / fp16 / e4m3 add, mul, fma through emu/ops.hpp (rne), one
//   call per op ("single") and through the batched API fb::add_array / mul_array /
//   fma_array ("batched", emu/array_rounding.hpp; the speedup target is judged on it);
// - the same ops as a plain MPFR loop, the reference path (issue 25 "honest baselines"):
//   operands already mpfr_t (converted before the timed region), each op the MPFR
//   operation with MPFR_RNDN then mpfr_subnormalize, the format's emin/emax set once
//   around the loop, and no flashbits call inside it; the speedup divides its time by
//   the batched API's over the same operands (the same count);
// - tensor-core fused dot products (k = 64) against native fp32 dot products compiled
//   with the FMA instruction: one dependent FMA chain, and 16 independent accumulators;
// and prints each figure with its size, its ratio to the native baseline and the
// emulated-vs-MPFR speedup (ratios from the CPU times, which a loaded machine distorts
// least), as a table or (--json) as one JSON object. --quick runs small sizes (the
// CI smoke test). As a cross-check that the timed code computes the right thing, the
// run also compares, outside the timed regions, the emulated results with the MPFR
// results (bits, and inexact below overflow) and
// round_array with per-element fb::convert (bits and OR-ed flags) on the timed data,
// and the batched ops' bits and OR-ed flags with the single calls';
// any mismatch makes the exit status 1.
//
// Timings depend on the machine and on its load: they are measurements, not claims.
#include <mpfr.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "emu/array_rounding.hpp"
#include "emu/dot/tensor_core.hpp"
#include "emu/ops.hpp"
#include "formats/format.hpp"

namespace {

using fb::Format;
using fb::Rounded;
using fb::RoundingMode;
using fb::RoundingSpec;
namespace fmt = fb::formats;

struct Config {
  bool quick = false;
  bool json = false;
  std::size_t array_elements = std::size_t{1} << 24;
  std::size_t op_count = std::size_t{1} << 20;
  std::size_t mpfr_op_count = std::size_t{1} << 17;
  int repetitions = 7;
};

// Keeps results observable so the optimiser cannot drop a timed loop.
volatile std::uint64_t g_sink = 0;
void keep_memory(const void* p) { asm volatile("" : : "r"(p) : "memory"); }

// CPU time of this thread: unlike wall time, it does not count time the thread
// spent waiting for a core on a loaded machine. Reported next to the wall figure.
double thread_cpu_ns() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e9 + static_cast<double>(t.tv_nsec);
}

struct Timing {
  double wall_ns;  // median of steady_clock, per item: the headline figure
  double cpu_ns;   // median of thread CPU time, per item
};

template <class Body>
Timing median_ns_per_item(const Config& cfg, std::size_t items, Body&& body) {
  body();  // warm caches, page in the output
  std::vector<double> wall, cpu;
  for (int r = 0; r < cfg.repetitions; ++r) {
    const double c0 = thread_cpu_ns();
    const auto t0 = std::chrono::steady_clock::now();
    body();
    const auto t1 = std::chrono::steady_clock::now();
    const double c1 = thread_cpu_ns();
    wall.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(items));
    cpu.push_back((c1 - c0) / static_cast<double>(items));
  }
  std::sort(wall.begin(), wall.end());
  std::sort(cpu.begin(), cpu.end());
  return {wall[wall.size() / 2], cpu[cpu.size() / 2]};
}

// ---- input data --------------------------------------------------------------

// fp32 values with a realistic spread: mostly Gaussian values over a range of
// scales, plus fp32 subnormals, huge values, signed zeros and values that are exact
// on a coarse grid (no rounding needed).
std::vector<float> make_array_input(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> gauss(0.0, 1.0);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double kind = unit(rng);
    const bool negative = (rng() & 1) != 0;
    float x;
    if (kind < 0.94) {
      x = static_cast<float>(gauss(rng) * std::exp2(unit(rng) * 12.0 - 6.0));
    } else if (kind < 0.96) {  // fp32 subnormal
      x = std::bit_cast<float>(static_cast<std::uint32_t>(rng() % 0x7fffffu) + 1u);
    } else if (kind < 0.98) {  // huge
      x = static_cast<float>(std::exp2(16.0 + unit(rng) * 111.0));
    } else if (kind < 0.99) {
      x = 0.0f;
    } else {  // exact on a coarse grid
      x = static_cast<float>(static_cast<int>(rng() % 64)) * 0.25f;
    }
    v[i] = negative ? -x : x;
  }
  return v;
}

// Operands of a format: Gaussian values over a few binades rounded into the format
// (satfinite, so there are no NaNs).
std::vector<std::uint32_t> make_operands(const Format& f, std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> gauss(0.0, 1.0);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<float> values(n);
  for (auto& x : values) x = static_cast<float>(gauss(rng) * std::exp2(unit(rng) * 8.0 - 4.0));
  std::vector<std::uint32_t> bits(n);
  RoundingSpec spec;
  spec.overflow = fb::OverflowPolicy::satfinite;
  fb::round_array(f, values.data(), bits.data(), n, spec);
  return bits;
}

// ---- result rows ---------------------------------------------------------------

struct ArrayRow {
  std::string format, mode;
  double ns_per_element, cpu_ns_per_element;
  double target_ns;
  bool matches_convert;
};
struct NativeRow {
  std::string op, how;
  double ns_per_op, cpu_ns_per_op;
};
struct OpRow {
  std::string format, op;
  double emulated_ns, mpfr_ns, native_ns, emulated_cpu_ns, mpfr_cpu_ns;  // native_ns: cpu time
  double batched_ns, batched_cpu_ns;   // the batched API (fb::add_array / mul_array / fma_array), n ops
  double batched_cpu_ns_at_mpfr_size;  // the same over the first mpfr_ops operands: the speedup's numerator
  std::size_t ops, mpfr_ops;           // sizes: emulated (single and batched) and MPFR
  std::size_t mpfr_checked, mpfr_mismatches;
  bool batched_matches_single;  // batched bits and OR-ed flags == the single calls'
};

// ---- array rounding --------------------------------------------------------------

ArrayRow bench_array(const Config& cfg, const Format& f, RoundingMode mode, const std::vector<float>& in) {
  RoundingSpec spec;
  spec.mode = mode;
  spec.seed = 12345;
  spec.sr_bits = 24;
  std::vector<std::uint32_t> out(in.size());
  fb::Flags flags = 0;
  const Timing t = median_ns_per_item(cfg, in.size(), [&] {
    fb::round_array(f, in.data(), out.data(), in.size(), spec, 1000, &flags);
    keep_memory(out.data());
  });
  // Cross-check against per-element fb::convert on a stride of the same data.
  bool same = true;
  fb::Flags convert_flags = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const Rounded r = fb::convert(f, fmt::fp32, std::bit_cast<std::uint32_t>(in[i]), spec, 1000 + i);
    convert_flags |= r.flags;
    if (r.bits != out[i]) same = false;
  }
  same = same && convert_flags == flags;
  return {f.name, std::string(fb::to_string(mode)), t.wall_ns, t.cpu_ns, mode == RoundingMode::sr ? 1.5 : 1.0, same};
}

// ---- native fp32 baseline ----------------------------------------------------------

// Hardware FMA where the CPU has it (the default build targets baseline x86-64, whose
// only FMA is libm's fmaf); the choice is reported.
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("fma"))) void fma_loop_hw(const float* a, const float* b, const float* c, float* out,
                                                std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = __builtin_fmaf(a[i], b[i], c[i]);
}
bool have_hw_fma() { return __builtin_cpu_supports("fma"); }
#else
void fma_loop_hw(const float*, const float*, const float*, float*, std::size_t) {}
bool have_hw_fma() { return false; }
#endif
void fma_loop_libm(const float* a, const float* b, const float* c, float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = std::fma(a[i], b[i], c[i]);
}

std::vector<NativeRow> bench_native(const Config& cfg, const std::vector<float>& a, const std::vector<float>& b,
                                    const std::vector<float>& c) {
  const std::size_t n = a.size();
  std::vector<float> out(n);
  std::vector<NativeRow> rows;
  auto add_row = [&](const char* op, const char* how, Timing t) { rows.push_back({op, how, t.wall_ns, t.cpu_ns}); };
  add_row("add", "float a+b", median_ns_per_item(cfg, n, [&] {
            for (std::size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
            keep_memory(out.data());
          }));
  add_row("mul", "float a*b", median_ns_per_item(cfg, n, [&] {
            for (std::size_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
            keep_memory(out.data());
          }));
  const bool hw = have_hw_fma();
  add_row("fma", hw ? "hardware fmaf (target fma)" : "libm fmaf", median_ns_per_item(cfg, n, [&] {
            if (hw) {
              fma_loop_hw(a.data(), b.data(), c.data(), out.data(), n);
            } else {
              fma_loop_libm(a.data(), b.data(), c.data(), out.data(), n);
            }
            keep_memory(out.data());
          }));
  g_sink = g_sink + std::bit_cast<std::uint32_t>(out[n / 2]);
  return rows;
}

// ---- MPFR reference path -------------------------------------------------------------

// The format's exponent range in MPFR's convention (significand in [1/2, 1)), so
// that mpfr_subnormalize rounds exactly as the format does below 2^emin.
struct MpfrRange {
  explicit MpfrRange(const Format& f) : old_emin(mpfr_get_emin()), old_emax(mpfr_get_emax()) {
    mpfr_set_emin(f.emin() - f.precision() + 2);
    mpfr_set_emax(f.emax() + 1);
  }
  ~MpfrRange() {
    mpfr_set_emin(old_emin);
    mpfr_set_emax(old_emax);
  }
  MpfrRange(const MpfrRange&) = delete;
  MpfrRange& operator=(const MpfrRange&) = delete;
  mpfr_exp_t old_emin, old_emax;
};

// Encodes an MPFR result already rounded to the format's precision and range: a
// magnitude above max finite (e4m3's S.1111.111 code, or inf) is an rne overflow.
std::uint32_t encode_rounded_double(const Format& f, double d, const RoundingSpec& spec) {
  std::uint32_t bits = 0;
  if (fb::from_double_exact(f, d, bits)) return bits;
  return fb::pack_infinite(f, std::signbit(d), spec.overflow);
}

enum class BenchOp { add, mul, fma };

// Bits of an MPFR result, and whether it was inexact.
struct MpfrResult {
  std::uint32_t bits;
  bool inexact;
};

// An array of MPFR numbers of one precision, initialised and cleared outside any timed
// region (mpfr_t is an array type, so the elements are its struct).
class MpfrArray {
 public:
  MpfrArray(std::size_t n, mpfr_prec_t precision) : values_(n) {
    for (auto& v : values_) mpfr_init2(&v, precision);
  }
  ~MpfrArray() {
    for (auto& v : values_) mpfr_clear(&v);
  }
  MpfrArray(const MpfrArray&) = delete;
  MpfrArray& operator=(const MpfrArray&) = delete;
  mpfr_ptr operator[](std::size_t i) { return &values_[i]; }

 private:
  std::vector<__mpfr_struct> values_;
};

// The plain MPFR loop the emulator is compared with (issue 25 "honest baselines"): the
// operands are already mpfr_t, each op is the MPFR operation with MPFR_RNDN followed by
// mpfr_subnormalize, under the format's exponent range (set once by the caller). No
// flashbits call, no conversion and no flag clearing inside: the ternary value of each
// result is kept (non-zero = inexact). MPFR's operations return results already in the
// current exponent range, so mpfr_check_range is not needed.
template <BenchOp Op>
void mpfr_loop(MpfrArray& r, MpfrArray& x, MpfrArray& y, MpfrArray& z, int* ternary, std::size_t m) {
  for (std::size_t i = 0; i < m; ++i) {
    int t;
    if constexpr (Op == BenchOp::add) {
      t = mpfr_add(r[i], x[i], y[i], MPFR_RNDN);
    } else if constexpr (Op == BenchOp::mul) {
      t = mpfr_mul(r[i], x[i], y[i], MPFR_RNDN);
    } else {
      t = mpfr_fma(r[i], x[i], y[i], z[i], MPFR_RNDN);
    }
    ternary[i] = mpfr_subnormalize(r[i], t, MPFR_RNDN);
  }
}

template <BenchOp Op>
Rounded emulated_one(const Format& f, std::uint32_t a, std::uint32_t b, std::uint32_t c, const RoundingSpec& spec,
                     std::uint64_t position) {
  if constexpr (Op == BenchOp::add) {
    return fb::add(f, a, b, spec, position);
  } else if constexpr (Op == BenchOp::mul) {
    return fb::mul(f, a, b, spec, position);
  } else {
    return fb::fma(f, a, b, c, spec, position);
  }
}

template <BenchOp Op>
void emulated_batch(const Format& f, const std::vector<std::uint32_t>& a, const std::vector<std::uint32_t>& b,
                    const std::vector<std::uint32_t>& c, std::vector<std::uint32_t>& out, const RoundingSpec& spec,
                    fb::Flags& flags) {
  if constexpr (Op == BenchOp::add) {
    fb::add_array(f, a.data(), b.data(), out.data(), a.size(), spec, 0, &flags);
  } else if constexpr (Op == BenchOp::mul) {
    fb::mul_array(f, a.data(), b.data(), out.data(), a.size(), spec, 0, &flags);
  } else {
    fb::fma_array(f, a.data(), b.data(), c.data(), out.data(), a.size(), spec, 0, &flags);
  }
}

template <BenchOp Op>
OpRow bench_op(const Config& cfg, const Format& f, std::string_view name, double native_ns) {
  const std::size_t n = cfg.op_count;
  const auto a = make_operands(f, n, 11), b = make_operands(f, n, 22), c = make_operands(f, n, 33);
  const RoundingSpec spec;  // rne, ieee overflow
  std::vector<std::uint32_t> emulated(n);
  std::uint32_t single_flags = 0;
  const Timing emu = median_ns_per_item(cfg, n, [&] {
    std::uint32_t flags = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const Rounded r = emulated_one<Op>(f, a[i], b[i], c[i], spec, i);
      emulated[i] = r.bits;
      flags |= r.flags;
    }
    keep_memory(emulated.data());
    g_sink = g_sink + flags;
    single_flags = flags;
  });
  std::vector<std::uint32_t> batched(n);
  fb::Flags batched_flags = 0;
  const Timing batch = median_ns_per_item(cfg, n, [&] {
    emulated_batch<Op>(f, a, b, c, batched, spec, batched_flags);
    keep_memory(batched.data());
  });
  const bool batched_same = batched == emulated && batched_flags == single_flags;

  // The batched API again over the first m operands: the speedup over MPFR compares
  // the same number of ops (m), so that cache effects of the size do not enter it.
  const std::size_t m = std::min(cfg.mpfr_op_count, n);
  const std::vector<std::uint32_t> am(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(m)),
      bm(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(m)),
      cm(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(m));
  std::vector<std::uint32_t> batched_m(m);
  fb::Flags batched_m_flags = 0;
  const Timing batch_m = median_ns_per_item(cfg, m, [&] {
    emulated_batch<Op>(f, am, bm, cm, batched_m, spec, batched_m_flags);
    keep_memory(batched_m.data());
  });

  // MPFR: operands converted (exactly) before the timed region; range set once around it.
  const MpfrRange range(f);
  MpfrArray x(m, f.precision()), y(m, f.precision()), z(m, f.precision()), r(m, f.precision());
  for (std::size_t i = 0; i < m; ++i) {
    mpfr_set_d(x[i], fb::to_double(f, a[i]), MPFR_RNDN);
    mpfr_set_d(y[i], fb::to_double(f, b[i]), MPFR_RNDN);
    mpfr_set_d(z[i], fb::to_double(f, c[i]), MPFR_RNDN);
  }
  std::vector<int> ternary(m);
  const Timing mpfr = median_ns_per_item(cfg, m, [&] {
    mpfr_loop<Op>(r, x, y, z, ternary.data(), m);
    keep_memory(ternary.data());
  });
  std::vector<MpfrResult> reference(m);
  for (std::size_t i = 0; i < m; ++i)
    reference[i] = {encode_rounded_double(f, mpfr_get_d(r[i], MPFR_RNDN), spec), ternary[i] != 0};

  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < m; ++i) {
    const Rounded e = emulated_one<Op>(f, a[i], b[i], c[i], spec, i);
    const bool same_bits = e.bits == reference[i].bits || (fb::is_nan(f, e.bits) && fb::is_nan(f, reference[i].bits));
    // MPFR's range ends at a full binade, so an overflow into e4m3's NaN code can
    // look exact to it: compare inexact only below overflow.
    const bool same_inexact =
        (e.flags & fb::flag::overflow) != 0 || ((e.flags & fb::flag::inexact) != 0) == reference[i].inexact;
    if (!same_bits || !same_inexact) ++mismatches;
  }
  const bool batched_m_same = std::equal(batched_m.begin(), batched_m.end(), emulated.begin());
  return {f.name,
          std::string(name),
          emu.wall_ns,
          mpfr.wall_ns,
          native_ns,
          emu.cpu_ns,
          mpfr.cpu_ns,
          batch.wall_ns,
          batch.cpu_ns,
          batch_m.cpu_ns,
          n,
          m,
          m,
          mismatches,
          batched_same && batched_m_same};
}

// ---- reporting ---------------------------------------------------------------------

std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown";
}

}  // namespace

// Tensor-core dot throughput and the text and JSON reports.
#include "bench/flashbits_bench_dot_report.hpp"

int main(int argc, char** argv) {
  static constexpr const char* kUsage =
      "usage: flashbits-bench [--quick] [--json] [--array-elements N] [--ops N] [--mpfr-ops N]\n"
      "  defaults: 2^24 array elements, 2^20 emulated ops, 2^17 MPFR ops (--quick: 2^16, 2^14, 2^12)\n";
  Config cfg;
  struct {
    std::size_t array_elements = 0, op_count = 0, mpfr_op_count = 0;
  } sized;  // sizes given on the command line (0: the default)
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--quick") {
      cfg.quick = true;
    } else if (arg == "--json") {
      cfg.json = true;
    } else if (arg == "--array-elements" || arg == "--ops" || arg == "--mpfr-ops") {
      // Sizes change the figures (2^22 and 2^24 array elements differ by ~20%), so they
      // are options, and every report prints them.
      char* end = nullptr;
      const unsigned long long v = i + 1 < argc ? std::strtoull(argv[i + 1], &end, 10) : 0;
      if (i + 1 >= argc || end == argv[i + 1] || *end != '\0' || v < 1 || v > (1ull << 30)) {
        std::fprintf(stderr, "error: %s needs a count from 1 to 2^30\n", argv[i]);
        return 2;
      }
      ++i;
      (arg == "--array-elements" ? sized.array_elements : arg == "--ops" ? sized.op_count : sized.mpfr_op_count) = v;
    } else if (arg == "--help" || arg == "-h") {
      std::printf("%s", kUsage);
      return 0;
    } else {
      std::fprintf(stderr, "error: unknown argument '%s'\n%s", argv[i], kUsage);
      return 2;
    }
  }
  if (cfg.quick) {
    cfg.array_elements = std::size_t{1} << 16;
    cfg.op_count = std::size_t{1} << 14;
    cfg.mpfr_op_count = std::size_t{1} << 12;
    cfg.repetitions = 3;
  }
  if (sized.array_elements) cfg.array_elements = sized.array_elements;
  if (sized.op_count) cfg.op_count = sized.op_count;
  if (sized.mpfr_op_count) cfg.mpfr_op_count = sized.mpfr_op_count;

  // Native baseline over the float values of bf16 operands: the same count and the
  // same kind of data as the emulated ops.
  std::vector<float> na(cfg.op_count), nb(cfg.op_count), nc(cfg.op_count);
  {
    const auto a = make_operands(fmt::bf16, cfg.op_count, 11), b = make_operands(fmt::bf16, cfg.op_count, 22),
               c = make_operands(fmt::bf16, cfg.op_count, 33);
    for (std::size_t i = 0; i < cfg.op_count; ++i) {
      na[i] = static_cast<float>(fb::to_double(fmt::bf16, a[i]));
      nb[i] = static_cast<float>(fb::to_double(fmt::bf16, b[i]));
      nc[i] = static_cast<float>(fb::to_double(fmt::bf16, c[i]));
    }
  }
  const std::vector<NativeRow> native = bench_native(cfg, na, nb, nc);

  const std::vector<float> array_input = make_array_input(cfg.array_elements, 2024);
  std::vector<ArrayRow> arrays;
  for (const Format* f : {&fmt::bf16, &fmt::fp16, &fmt::e4m3}) {
    for (RoundingMode m : {RoundingMode::rne, RoundingMode::rtz, RoundingMode::sr}) {
      arrays.push_back(bench_array(cfg, *f, m, array_input));
    }
  }

  std::vector<OpRow> ops;
  for (const Format* f : {&fmt::bf16, &fmt::fp16, &fmt::e4m3}) {
    ops.push_back(bench_op<BenchOp::add>(cfg, *f, "add", native[0].cpu_ns_per_op));
    ops.push_back(bench_op<BenchOp::mul>(cfg, *f, "mul", native[1].cpu_ns_per_op));
    ops.push_back(bench_op<BenchOp::fma>(cfg, *f, "fma", native[2].cpu_ns_per_op));
  }

  NativeDot native_dot;
  const std::vector<DotRow> dots = bench_dot(cfg, native_dot);
  const std::vector<GemmRow> gemm = bench_gemm(cfg);

  if (cfg.json) {
    print_json(cfg, native, arrays, ops, dots, gemm, native_dot);
  } else {
    print_table(cfg, native, arrays, ops);
    print_dot_table(cfg, dots, native_dot);
    print_gemm_table(gemm, native_dot);
  }
  bool ok = true;
  for (const auto& r : arrays) ok = ok && r.matches_convert;
  for (const auto& r : ops) ok = ok && r.mpfr_mismatches == 0 && r.batched_matches_single;
  for (const auto& r : dots) ok = ok && r.columns_match;
  for (const auto& r : gemm) ok = ok && r.match;
  if (!ok) std::fprintf(stderr, "error: a timed result disagrees with its reference (see the table)\n");
  return ok ? 0 : 1;
}
