// bench/bench_attention.cpp: speed of the emulated FlashAttention forward against a
// native-float implementation of the same tiled algorithm, in the same run.
//
// Usage: bench_attention [--model fa2-sm90] [--seqlen 4096] [--headdim 64] [--threads 1]
//                        [--trace] [--backward] [--quick]
// Prints one line per measurement: what ran, seconds, emulated products per second.
// --quick (CI smoke): seqlen 256.
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "attention/attention.hpp"
#include "attention/kernel_models.hpp"
#include <cmath>

using namespace fb;
using namespace fb::attn;

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
// CPU time of the whole process: on a shared, loaded machine this is the honest
// measure of the work done (wall time is printed too).
double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}
}  // namespace

int main(int argc, char** argv) {
  std::string model = "fa2-sm90";
  int seqlen = 4096, head_dim = 64, threads = 1;
  bool trace = false, backward = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "error: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model") model = next();
    else if (a == "--seqlen") seqlen = std::atoi(next());
    else if (a == "--headdim") head_dim = std::atoi(next());
    else if (a == "--threads") threads = std::atoi(next());
    else if (a == "--trace") trace = true;
    else if (a == "--backward") backward = true;
    else if (a == "--quick") seqlen = 256;
    else {
      std::fprintf(stderr, "error: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  const AttentionInputs in = make_scenario("random", 1, 1, 1, seqlen, head_dim, formats::bf16, backward);
  const double products = 2.0 * seqlen * static_cast<double>(seqlen) * head_dim;
  const ModelHandle m = parse_kernel_model(model, formats::bf16);

  auto t0 = std::chrono::steady_clock::now();
  double c0 = cpu_seconds();
  const AttentionOutputs native = native_flash_forward(in, m.recipe->tiles_for(head_dim, seqlen).block_n, threads);
  const double t_native = seconds_since(t0), c_native = cpu_seconds() - c0;

  RunOptions opt;
  opt.threads = threads;
  Tracer tracer;
  if (trace) {
    // "Full statistics": every row of the head traced.
    for (int r = 0; r < seqlen; ++r) tracer.rows.push_back({0, 0, r});
    opt.tracer = &tracer;
  }
  t0 = std::chrono::steady_clock::now();
  c0 = cpu_seconds();
  const AttentionOutputs emu = run_attention(m, in, opt);
  const double t_emu = seconds_since(t0), c_emu = cpu_seconds() - c0;

  double max_diff = 0.0;
  for (std::size_t i = 0; i < emu.o.data.size(); ++i) max_diff = std::max(max_diff, std::fabs(emu.o.data[i] - native.o.data[i]));
  std::printf("native float tiled forward: seqlen %d head dim %d threads %d: %.3f s wall, %.3f s cpu (%.3g products/cpu s)\n",
              seqlen, head_dim, threads, t_native, c_native, products / c_native);
  std::printf("emulated %s%s%s: %.3f s wall, %.3f s cpu (%.3g products/cpu s, %.1fx native cpu); max |O_emu - O_native| = %g\n",
              m.name.c_str(), trace ? " traced (every row)" : "", backward ? " forward+backward" : " forward", t_emu, c_emu,
              products * (backward ? 2.5 : 1.0) / c_emu, c_emu / c_native, max_diff);
  return 0;
}
