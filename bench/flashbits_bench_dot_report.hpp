// bench/flashbits_bench_dot_report.hpp: flashbits-bench's tensor-core dot throughput measurement and
// the result tables (text and JSON).
// Contract: not a stand-alone header. bench/flashbits_bench.cpp includes it once, at this point of its
// translation unit (after its includes and the definitions before it), so the code keeps its
// original order and linkage.
#pragma once

namespace {

// ---- dot throughput --------------------------------------------------------------------
// Random finite values of `in` with exponents near 1.0 (as real activations are), random
// sign and mantissa, as floats: a fixed pseudo-random stream (SplitMix64).
std::vector<float> random_dot_inputs(const Format& in, std::size_t n, std::uint64_t seed) {
  std::vector<float> v;
  v.reserve(n);
  std::uint64_t state = seed;
  while (v.size() < n) {
    state += 0x9e3779b97f4a7c15ull;
    const auto bits = static_cast<std::uint32_t>(fb::mix64(state));
    const std::uint32_t layout = bits & in.width_mask();
    const std::uint32_t e = static_cast<std::uint32_t>(in.bias) - 4u + ((bits >> 28) & 7u);
    const std::uint32_t with_exp = (layout & ~(in.exp_field_max() << in.man_bits)) | (e << in.man_bits);
    const double x = fb::to_double(in, fb::to_container(in, with_exp));
    if (std::isfinite(x)) v.push_back(static_cast<float>(x));
  }
  return v;
}

// Products per second of the calling thread's CPU time, for at least min_seconds of it
// (so a loaded machine does not distort the per-core figure).
template <typename Body>
double products_per_cpu_second(double min_seconds, Body body) {
  const double start = thread_cpu_ns();
  std::uint64_t products = 0;
  double elapsed = 0.0;
  do {
    products += body();
    elapsed = (thread_cpu_ns() - start) * 1e-9;
  } while (elapsed < min_seconds);
  return static_cast<double>(products) / elapsed;
}

constexpr int kDotVectors = 256;

double emulated_dot_products_per_second(const fb::TensorCoreModel& model, const Format& in, int k, double min_seconds) {
  const std::vector<float> a = random_dot_inputs(in, static_cast<std::size_t>(k) * kDotVectors, 1);
  const std::vector<float> b = random_dot_inputs(in, static_cast<std::size_t>(k) * kDotVectors, 2);
  volatile float sink = 0.0f;
  return products_per_cpu_second(min_seconds, [&] {
    float acc = 0.0f;
    for (int v = 0; v < kDotVectors; ++v)
      acc += fb::fused_dot(model, 0.0f, a.data() + static_cast<std::size_t>(v) * k,
                           b.data() + static_cast<std::size_t>(v) * k, k);
    sink = sink + acc;
    return static_cast<std::uint64_t>(k) * kDotVectors;
  });
}

// The same model's dots side by side (fb::fused_dot_columns): one shared vector of k against
// kColumnLanes columns of a k x kColumnLanes panel, as attention's P̄·V and q·Kᵀ tiles are.
// Before timing, every lane is compared bit for bit with fused_dot on its column
// (`matches`); a mismatch makes the benchmark exit 1.
constexpr int kColumnLanes = 64;
double columns_products_per_second(const fb::TensorCoreModel& model, const Format& in, int k, double min_seconds,
                                   bool& matches) {
  const std::vector<float> a = random_dot_inputs(in, static_cast<std::size_t>(k), 3);
  const std::vector<float> panel = random_dot_inputs(in, static_cast<std::size_t>(k) * kColumnLanes, 4);
  const std::vector<float> c = random_dot_inputs(fmt::fp32, kColumnLanes, 5);
  std::vector<float> d(kColumnLanes), column(static_cast<std::size_t>(k));
  fb::fused_dot_columns(model, c.data(), a.data(), panel.data(), kColumnLanes, k, kColumnLanes, d.data());
  matches = true;
  for (int l = 0; l < kColumnLanes; ++l) {
    for (int j = 0; j < k; ++j)
      column[static_cast<std::size_t>(j)] =
          panel[static_cast<std::size_t>(j) * kColumnLanes + static_cast<std::size_t>(l)];
    const float one = fb::fused_dot(model, c[static_cast<std::size_t>(l)], a.data(), column.data(), k);
    matches =
        matches && std::bit_cast<std::uint32_t>(one) == std::bit_cast<std::uint32_t>(d[static_cast<std::size_t>(l)]);
  }
  volatile float sink = 0.0f;
  return products_per_cpu_second(min_seconds, [&] {
    for (int v = 0; v < kDotVectors / 16; ++v)
      fb::fused_dot_columns(model, c.data(), a.data(), panel.data(), kColumnLanes, k, kColumnLanes, d.data());
    sink = sink + d[0];
    return static_cast<std::uint64_t>(k) * kColumnLanes * (kDotVectors / 16);
  });
}

// The blocked GEMM kernel (fb::fused_dot_rows) on one instruction set: kGemmRows rows of A
// against kColumnLanes columns of a k x kColumnLanes panel whose alignment exponents are
// prepared once, as attention's K and V panels are. Every lane is compared bit for bit
// with fused_dot before timing (`matches`).
constexpr int kGemmRows = 64;
double gemm_products_per_second(const fb::TensorCoreModel& model, const Format& in, int k, fb::DotIsa isa,
                                double min_seconds, bool& matches) {
  const std::vector<float> a = random_dot_inputs(in, static_cast<std::size_t>(k) * kGemmRows, 6);
  const std::vector<float> panel = random_dot_inputs(in, static_cast<std::size_t>(k) * kColumnLanes, 7);
  const std::vector<float> c = random_dot_inputs(fmt::fp32, static_cast<std::size_t>(kGemmRows) * kColumnLanes, 8);
  std::vector<std::int32_t> alignment(panel.size());
  fb::dot_alignment_exponents(model, panel.data(), panel.size(), alignment.data());
  std::vector<float> d(c.size()), column(static_cast<std::size_t>(k));
  auto run = [&] {
    fb::fused_dot_rows(model, c.data(), kColumnLanes, a.data(), static_cast<std::size_t>(k), kGemmRows, panel.data(),
                       alignment.data(), kColumnLanes, k, kColumnLanes, d.data(), kColumnLanes, isa);
  };
  run();
  matches = true;
  for (int r = 0; r < kGemmRows; ++r)
    for (int l = 0; l < kColumnLanes; ++l) {
      for (int j = 0; j < k; ++j)
        column[static_cast<std::size_t>(j)] =
            panel[static_cast<std::size_t>(j) * kColumnLanes + static_cast<std::size_t>(l)];
      const std::size_t at = static_cast<std::size_t>(r) * kColumnLanes + static_cast<std::size_t>(l);
      const float one = fb::fused_dot(model, c[at], a.data() + static_cast<std::size_t>(r) * k, column.data(), k);
      matches = matches && std::bit_cast<std::uint32_t>(one) == std::bit_cast<std::uint32_t>(d[at]);
    }
  volatile float sink = 0.0f;
  return products_per_cpu_second(min_seconds, [&] {
    run();
    sink = sink + d[0];
    return static_cast<std::uint64_t>(k) * kColumnLanes * kGemmRows;
  });
}

// The native baselines, compiled for the FMA instruction (inline vfmadd, no libm fmaf
// through the PLT). "chain": s = fma(a_i, b_i, s), one dependent chain as a dot product
// is, so each FMA waits for the previous one (the latency bound). "16 accumulators":
// sixteen independent partial sums (product i goes to sum i mod 16), added at the end,
// which the compiler may put in vector registers: the throughput bound a tuned fp32 dot
// reaches (its result differs from the chain's, as the summation order does).
[[gnu::target("avx2,fma")]] float native_fma_chain(const float* x, const float* y, int k) {
  float s = 0.0f;
  for (int i = 0; i < k; ++i) s = __builtin_fmaf(x[i], y[i], s);
  return s;
}
constexpr int kNativeAccumulators = 16;
[[gnu::target("avx2,fma")]] float native_fma_accumulators(const float* x, const float* y, int k) {
  float s[kNativeAccumulators] = {};
  int i = 0;
  for (; i + kNativeAccumulators <= k; i += kNativeAccumulators)
    for (int j = 0; j < kNativeAccumulators; ++j) s[j] = __builtin_fmaf(x[i + j], y[i + j], s[j]);
  for (int j = 0; i < k; ++i, ++j) s[j] = __builtin_fmaf(x[i], y[i], s[j]);
  float total = 0.0f;
  for (float part : s) total += part;
  return total;
}

// Without the FMA instruction: the same two loops through libm's fmaf (slower; reported as is).
float library_fma_chain(const float* x, const float* y, int k) {
  float s = 0.0f;
  for (int i = 0; i < k; ++i) s = std::fmaf(x[i], y[i], s);
  return s;
}
float library_fma_accumulators(const float* x, const float* y, int k) {
  float s[kNativeAccumulators] = {};
  for (int i = 0; i < k; ++i) s[i % kNativeAccumulators] = std::fmaf(x[i], y[i], s[i % kNativeAccumulators]);
  float total = 0.0f;
  for (float part : s) total += part;
  return total;
}

bool cpu_has_avx512f() { return __builtin_cpu_supports("avx512f"); }
bool cpu_has_fma() {
  static const bool has_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has_fma;
}

double native_fma_dot_products_per_second(bool accumulators, int k, double min_seconds) {
  const auto dot = cpu_has_fma() ? (accumulators ? native_fma_accumulators : native_fma_chain)
                                 : (accumulators ? library_fma_accumulators : library_fma_chain);
  const std::vector<float> a = random_dot_inputs(fmt::bf16, static_cast<std::size_t>(k) * kDotVectors, 1);
  const std::vector<float> b = random_dot_inputs(fmt::bf16, static_cast<std::size_t>(k) * kDotVectors, 2);
  volatile float sink = 0.0f;
  return products_per_cpu_second(min_seconds, [&] {
    float acc = 0.0f;
    for (int v = 0; v < kDotVectors; ++v)
      acc += dot(a.data() + static_cast<std::size_t>(v) * k, b.data() + static_cast<std::size_t>(v) * k, k);
    sink = sink + acc;
    return static_cast<std::uint64_t>(k) * kDotVectors;
  });
}

// Emulated tensor-core products per second of CPU time (issue 3 target: >= 2e8 for
// sm80 and sm90-mma), against native fp32 FMA dot products measured in the same run.
constexpr int kDotLength = 64;
struct DotRow {
  std::string model, input;
  double products_per_second;
  double columns_products_per_second;  // fb::fused_dot_columns, kColumnLanes at once
  bool columns_match;                  // its bits == fused_dot's, lane by lane
};
struct GemmRow {
  std::string model, input, isa;
  double products_per_second;
  bool match;  // every lane == fused_dot's bits
};
struct NativeDot {
  double chain = 0.0, accumulators = 0.0;  // products per cpu second
  bool hardware_fma = false;
};
double dot_min_seconds(const Config& cfg) { return cfg.quick ? 0.05 : 0.5; }
const char* isa_name(fb::DotIsa isa) {
  return isa == fb::DotIsa::avx512 ? "avx512" : isa == fb::DotIsa::avx2 ? "avx2" : "portable";
}
// sm90-wgmma bf16 carries issue 36's target (>= 5e9 products/s with AVX2, k = 64).
std::vector<GemmRow> bench_gemm(const Config& cfg) {
  const double min_seconds = dot_min_seconds(cfg);
  std::vector<GemmRow> rows;
  const std::pair<const char*, const Format*> models[] = {
      {"sm90-wgmma", &fmt::bf16}, {"sm90-mma", &fmt::fp16}, {"sm80", &fmt::bf16}, {"sm90-wgmma", &fmt::e4m3}};
  for (const fb::DotIsa isa : {fb::DotIsa::avx512, fb::DotIsa::avx2, fb::DotIsa::portable}) {
    if (!fb::dot_isa_available(isa)) continue;
    for (const auto& [name, f] : models) {
      const fb::TensorCoreModel* m = fb::find_tensor_core_model(name, *f);
      if (!m) continue;
      bool match = false;
      const double rate = gemm_products_per_second(*m, *f, kDotLength, isa,
                                                   isa == fb::DotIsa::portable ? min_seconds / 4 : min_seconds, match);
      rows.push_back({name, f->name, isa_name(isa), rate, match});
    }
  }
  return rows;
}
std::vector<DotRow> bench_dot(const Config& cfg, NativeDot& native) {
  const double min_seconds = dot_min_seconds(cfg);
  native.hardware_fma = cpu_has_fma();
  native.chain = native_fma_dot_products_per_second(false, kDotLength, min_seconds);
  native.accumulators = native_fma_dot_products_per_second(true, kDotLength, min_seconds);
  std::vector<DotRow> rows;
  for (const char* model : {"sm80", "sm90-mma"}) {
    for (const Format* f : {&fmt::bf16, &fmt::fp16}) {
      const fb::TensorCoreModel* m = fb::find_tensor_core_model(model, *f);
      if (!m) continue;
      bool match = false;
      const double one_at_a_time = emulated_dot_products_per_second(*m, *f, kDotLength, min_seconds);
      const double side_by_side = columns_products_per_second(*m, *f, kDotLength, min_seconds, match);
      rows.push_back({model, f->name, one_at_a_time, side_by_side, match});
    }
  }
  return rows;
}

void print_gemm_table(const std::vector<GemmRow>& rows, const NativeDot& native) {
  std::printf(
      "  blocked kernel: fb::fused_dot_rows, %d rows x %d columns (k=%d), panel alignment prepared, each instruction\n"
      "  set this CPU has; bits checked against fused_dot (target: sm90-wgmma bf16 >= 5e9 with AVX2)\n",
      kGemmRows, kColumnLanes, kDotLength);
  std::printf("  %-10s %-5s %-8s  %12s  %9s  %9s  %s\n", "model", "input", "isa", "products/s", "x chain", "x 16 acc",
              "== fused_dot");
  for (const auto& r : rows)
    std::printf("  %-10s %-5s %-8s  %12.3g  %9.3f  %9.3f  %s\n", r.model.c_str(), r.input.c_str(), r.isa.c_str(),
                r.products_per_second, r.products_per_second / native.chain,
                r.products_per_second / native.accumulators, r.match ? "yes" : "MISMATCH");
}

void print_dot_table(const Config& cfg, const std::vector<DotRow>& rows, const NativeDot& native) {
  std::printf(
      "\nTensor-core fused dot products, k=%d, %d vectors a pass, one thread, >= %.2g s of cpu each "
      "(products per cpu second)\n",
      kDotLength, kDotVectors, dot_min_seconds(cfg));
  const char* how = native.hardware_fma ? "inline FMA instruction" : "libm fmaf: no FMA instruction on this CPU";
  std::printf("  native fp32 dot, one dependent fma chain (%s): %.3g\n", how, native.chain);
  std::printf("  native fp32 dot, %d independent accumulators (%s): %.3g\n", kNativeAccumulators, how,
              native.accumulators);
  std::printf("  %-9s %-5s  %12s  %9s  %9s  %-6s %s\n", "model", "input", "products/s", "x chain", "x 16 acc", "target",
              "met");
  for (const auto& r : rows)
    std::printf("  %-9s %-5s  %12.3g  %9.3f  %9.3f  %-6s %s\n", r.model.c_str(), r.input.c_str(), r.products_per_second,
                r.products_per_second / native.chain, r.products_per_second / native.accumulators, "2e8",
                r.products_per_second >= 2e8 ? "yes" : "NO");
  // Issue 25: >= 1e9 products/s with AVX2, >= 2e9 with AVX-512 (the target of the CPU it runs on).
  const double columns_target = cpu_has_avx512f() ? 2e9 : 1e9;
  std::printf(
      "  side by side: fb::fused_dot_columns, one vector against %d columns (k=%d), bits checked against fused_dot\n",
      kColumnLanes, kDotLength);
  std::printf("  %-9s %-5s  %12s  %9s  %9s  %9s  %-6s %-4s %s\n", "model", "input", "products/s", "x one dot",
              "x chain", "x 16 acc", "target", "met", "== fused_dot");
  for (const auto& r : rows)
    std::printf("  %-9s %-5s  %12.3g  %9.2f  %9.3f  %9.3f  %-6.0e %-4s %s\n", r.model.c_str(), r.input.c_str(),
                r.columns_products_per_second, r.columns_products_per_second / r.products_per_second,
                r.columns_products_per_second / native.chain, r.columns_products_per_second / native.accumulators,
                columns_target, r.columns_products_per_second >= columns_target ? "yes" : "NO",
                r.columns_match ? "yes" : "MISMATCH");
}

void print_table(const Config& cfg, const std::vector<NativeRow>& native, const std::vector<ArrayRow>& arrays,
                 const std::vector<OpRow>& ops) {
  const double native_add = native[0].cpu_ns_per_op;
  std::printf("flashbits-bench%s: single thread, median of %d runs, CPU: %s (AVX-512F: %s, AVX2+FMA: %s)\n",
              cfg.quick ? " --quick" : "", cfg.repetitions, cpu_name().c_str(), cpu_has_avx512f() ? "yes" : "no",
              cpu_has_fma() ? "yes" : "no");
  std::printf(
      "vector loops (round_array, batched ops) built for: %s (chosen at run time; FLASHBITS_NO_AVX512=1 or\n"
      " FLASHBITS_NO_AVX2=1 caps it; the figures depend on it)\n",
      fb::lane_instruction_set());
  std::printf(
      "(wall: median steady_clock time; cpu: median CPU time of this thread, which leaves out\n"
      " waiting for a core on a loaded machine; timings depend on the machine and its load;\n"
      " ratios, speedups and targets use the cpu figures, taken within this run)\n\n");

  std::printf("Native fp32 baseline (%zu elements per array)\n", cfg.op_count);
  std::printf("  %-4s  %-32s  %10s  %10s\n", "op", "loop", "wall ns/op", "cpu ns/op");
  for (const auto& r : native)
    std::printf("  %-4s  %-32s  %10.3f  %10.3f\n", r.op.c_str(), r.how.c_str(), r.ns_per_op, r.cpu_ns_per_op);

  std::printf("\nfp32 array -> format rounding, fb::round_array, one thread (%zu elements)\n", cfg.array_elements);
  std::printf("  %-6s %-4s  %9s  %9s  %12s  %6s  %-4s  %s\n", "format", "mode", "wall ns/el", "cpu ns/el",
              "x native add", "target", "met", "== convert");
  for (const auto& r : arrays) {
    std::printf("  %-6s %-4s  %10.3f  %9.3f  %12.1f  %6.1f  %-4s  %s\n", r.format.c_str(), r.mode.c_str(),
                r.ns_per_element, r.cpu_ns_per_element, r.cpu_ns_per_element / native_add, r.target_ns,
                r.cpu_ns_per_element <= r.target_ns ? "yes" : "NO", r.matches_convert ? "yes" : "MISMATCH");
  }

  std::printf("\nScalar ops, rne (emulated: %zu ops; MPFR and the batched API at MPFR's size: %zu ops)\n", cfg.op_count,
              std::min(cfg.mpfr_op_count, cfg.op_count));
  std::printf(
      "  single = one fb::add/mul/fma call per op; batched = fb::add_array/mul_array/fma_array\n"
      "  (emu/array_rounding.hpp) over the whole array; MPFR = a plain loop over mpfr_t operands\n"
      "  (op with MPFR_RNDN, then mpfr_subnormalize, the format's emin/emax; no flashbits call in it).\n"
      "  speedup = MPFR cpu / emulated cpu over the same ops (batched: at MPFR's size, the column\n"
      "  'batched@M'); 50x is judged on the batched speedup\n");
  std::printf("  %-6s %-4s  %9s  %9s  %9s  %9s  %9s  %9s  %9s  %8s  %8s  %-4s  %8s  %8s  %8s  %s\n", "format", "op",
              "single", "single", "batched", "batched", "batched@M", "MPFR", "MPFR", "speedup", "speedup", "50x",
              "x native", "x native", "x native", "== MPFR");
  std::printf("  %-6s %-4s  %9s  %9s  %9s  %9s  %9s  %9s  %9s  %8s  %8s  %-4s  %8s  %8s  %8s  %s\n", "", "", "wall",
              "cpu", "wall", "cpu", "cpu", "wall", "cpu", "single", "batched", "", "single", "batched", "MPFR",
              "(batched == single)");
  for (const auto& r : ops) {
    const double speedup = r.mpfr_cpu_ns / r.batched_cpu_ns_at_mpfr_size;
    char agree[64];
    if (r.mpfr_mismatches == 0) {
      std::snprintf(agree, sizeof agree, "yes (%zu)", r.mpfr_checked);
    } else {
      std::snprintf(agree, sizeof agree, "MISMATCH %zu/%zu", r.mpfr_mismatches, r.mpfr_checked);
    }
    std::printf(
        "  %-6s %-4s  %9.2f  %9.2f  %9.2f  %9.2f  %9.2f  %9.1f  %9.1f  %7.1fx  %7.1fx  %-4s  %8.1f  %8.1f  %8.1f  "
        "%s%s\n",
        r.format.c_str(), r.op.c_str(), r.emulated_ns, r.emulated_cpu_ns, r.batched_ns, r.batched_cpu_ns,
        r.batched_cpu_ns_at_mpfr_size, r.mpfr_ns, r.mpfr_cpu_ns, r.mpfr_cpu_ns / r.emulated_cpu_ns, speedup,
        speedup >= 50.0 ? "yes" : "NO", r.emulated_cpu_ns / r.native_ns, r.batched_cpu_ns / r.native_ns,
        r.mpfr_cpu_ns / r.native_ns, agree, r.batched_matches_single ? "" : " BATCHED MISMATCH");
  }
  std::printf("  (ns per op; x native = cpu time / the native fp32 loop's cpu time for the same op, above)\n");
}

void print_json(const Config& cfg, const std::vector<NativeRow>& native, const std::vector<ArrayRow>& arrays,
                const std::vector<OpRow>& ops, const std::vector<DotRow>& dots, const std::vector<GemmRow>& gemm,
                const NativeDot& native_dot) {
  using nlohmann::json;
  const double native_add = native[0].cpu_ns_per_op;
  json j;
  j["tensor_core_dot"] = {{"k", kDotLength},
                          {"vectors_per_pass", kDotVectors},
                          {"min_cpu_seconds", dot_min_seconds(cfg)},
                          {"native_hardware_fma", native_dot.hardware_fma},
                          {"native_fp32_fma_dot_products_per_second", native_dot.chain},
                          {"native_fp32_fma_16_accumulators_products_per_second", native_dot.accumulators},
                          {"rows", json::array()}};
  for (const auto& r : dots)
    j["tensor_core_dot"]["rows"].push_back(
        {{"model", r.model},
         {"input", r.input},
         {"products_per_second", r.products_per_second},
         {"ratio_to_native", r.products_per_second / native_dot.chain},
         {"ratio_to_native_16_accumulators", r.products_per_second / native_dot.accumulators},
         {"columns_lanes", kColumnLanes},
         {"columns_products_per_second", r.columns_products_per_second},
         {"columns_ratio_to_one_dot", r.columns_products_per_second / r.products_per_second},
         {"columns_match_fused_dot", r.columns_match}});
  j["tensor_core_gemm"] = {
      {"k", kDotLength}, {"rows", kGemmRows}, {"columns", kColumnLanes}, {"results", json::array()}};
  for (const auto& r : gemm)
    j["tensor_core_gemm"]["results"].push_back({{"model", r.model},
                                                {"input", r.input},
                                                {"isa", r.isa},
                                                {"products_per_second", r.products_per_second},
                                                {"ratio_to_native", r.products_per_second / native_dot.chain},
                                                {"match_fused_dot", r.match}});
  j["config"] = {{"quick", cfg.quick},
                 {"repetitions", cfg.repetitions},
                 {"statistic", "median"},
                 {"ns_per_*", "wall time (steady_clock); cpu_ns_per_*: thread CPU time"},
                 {"ratios", "from the cpu figures"},
                 {"array_elements", cfg.array_elements},
                 {"op_count", cfg.op_count},
                 {"mpfr_op_count", cfg.mpfr_op_count},
                 {"threads", 1},
                 {"vector_instruction_set", fb::lane_instruction_set()},
                 {"cpu", cpu_name()},
                 {"cpu_has_avx512f", cpu_has_avx512f()},
                 {"cpu_has_avx2_fma", cpu_has_fma()}};
  j["native"] = json::array();
  for (const auto& r : native) {
    j["native"].push_back({{"op", r.op},
                           {"loop", r.how},
                           {"elements", cfg.op_count},
                           {"ns_per_op", r.ns_per_op},
                           {"cpu_ns_per_op", r.cpu_ns_per_op}});
  }
  j["array_rounding"] = json::array();
  for (const auto& r : arrays) {
    j["array_rounding"].push_back({{"format", r.format},
                                   {"mode", r.mode},
                                   {"elements", cfg.array_elements},
                                   {"ns_per_element", r.ns_per_element},
                                   {"cpu_ns_per_element", r.cpu_ns_per_element},
                                   {"ratio_to_native_add", r.cpu_ns_per_element / native_add},
                                   {"target_ns_per_element", r.target_ns},
                                   {"target_met", r.cpu_ns_per_element <= r.target_ns},
                                   {"matches_convert", r.matches_convert}});
  }
  j["scalar_ops"] = json::array();
  for (const auto& r : ops) {
    j["scalar_ops"].push_back({{"format", r.format},
                               {"op", r.op},
                               {"mode", "rne"},
                               {"emulated_ns_per_op", r.emulated_ns},
                               {"emulated_cpu_ns_per_op", r.emulated_cpu_ns},
                               {"batched_api", "fb::add_array / mul_array / fma_array"},
                               {"batched_ns_per_op", r.batched_ns},
                               {"batched_cpu_ns_per_op", r.batched_cpu_ns},
                               {"batched_matches_single", r.batched_matches_single},
                               {"ops", r.ops},
                               {"mpfr_ops", r.mpfr_ops},
                               {"batched_cpu_ns_per_op_at_mpfr_ops", r.batched_cpu_ns_at_mpfr_size},
                               {"mpfr_loop",
                                "plain loop over mpfr_t operands: op with MPFR_RNDN, then mpfr_subnormalize "
                                "under the format's emin/emax; no flashbits call in it"},
                               {"speedup_vs_mpfr_single", r.mpfr_cpu_ns / r.emulated_cpu_ns},
                               {"ratio_to_native_op", r.emulated_cpu_ns / r.native_ns},
                               {"batched_ratio_to_native_op", r.batched_cpu_ns / r.native_ns},
                               {"mpfr_ratio_to_native_op", r.mpfr_cpu_ns / r.native_ns},
                               {"mpfr_ns_per_op", r.mpfr_ns},
                               {"mpfr_cpu_ns_per_op", r.mpfr_cpu_ns},
                               {"speedup_vs_mpfr", r.mpfr_cpu_ns / r.batched_cpu_ns_at_mpfr_size},
                               {"target_met", r.mpfr_cpu_ns / r.batched_cpu_ns_at_mpfr_size >= 50.0},
                               {"mpfr_checked", r.mpfr_checked},
                               {"mpfr_mismatches", r.mpfr_mismatches}});
  }
  std::cout << j.dump(2) << "\n";
}

}  // namespace
