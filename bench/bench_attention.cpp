// bench/bench_attention.cpp: speed and memory of the emulated FlashAttention forward
// against a native-float implementation of the same tiled algorithm, in the same run
// (issue 4, "Speed and memory").
//
// Usage: bench_attention [--model fa2-sm90] [--seqlen 4096] [--headdim 64] [--threads 1]
//                        [--trace] [--backward] [--quick] [--memory] [--against MODEL]
// - Default: the native float tiled forward, then the emulated run; one line each with
//   wall and CPU seconds, products per CPU second and the ratio to native.
// - --trace: also the same run with every row traced ("full statistics"), in the same
//   process; prints the traced / untraced CPU ratio (target <= 1.5, issue 36) and a checksum of every
//   traced record (to check that a change to the tracer leaves the records identical); with one
//   thread also the records' size and the CPU time of allocating and writing that much memory
//   alone, as a ratio to the untraced run (the floor under any tracer keeping these records).
// - --threads N > 1: the emulated runs use N threads, and the single-thread run is made
//   as well; O, LSE (and with --backward delta, dQ, dK, dV, and with --trace every
//   traced record) must be identical bit for bit: exit 1 on a mismatch.
// - --memory: peak resident memory of one emulated forward (seqlen 32768 unless
//   --seqlen is given) in a forked child, read from the child's own rusage (ru_maxrss),
//   so the figure is for that run alone; exit 1 when it reaches 1 GiB. Nothing else runs.
// - --against MODEL: also times MODEL's emulated forward on the same inputs in the same run
//   and prints the ratio of the two CPU times (issue 23: every new kernel model within 2x
//   of fa2-sm90's emulation time).
// - --quick (CI smoke): seqlen 256.
// CPU time is that of the benchmark thread for single-thread runs (on a shared, loaded
// machine this is the honest measure of the work done) and of the process for
// multi-thread runs; wall time is printed too.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <functional>
#include <memory>
#include <string>

#include "attention/attention.hpp"
#include "attention/kernel_models.hpp"
#include "bench/native_flash.hpp"
#include "studies/scenarios.hpp"

using namespace fb;
using namespace fb::attn;

namespace {
double clock_seconds(clockid_t id) {
  timespec ts;
  clock_gettime(id, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Timing {
  double wall = 0.0, cpu = 0.0;
};
// Single-thread runs execute on the calling thread (parallel_for runs inline), so the
// thread's CPU clock measures exactly the run; with more threads, the process clock.
Timing timed(int threads, const std::function<void()>& fn) {
  const clockid_t clock = threads > 1 ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_THREAD_CPUTIME_ID;
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = clock_seconds(clock);
  fn();
  Timing t;
  t.cpu = clock_seconds(clock) - c0;
  t.wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return t;
}

// Bitwise equality (NaN payloads and signed zeros included).
bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}
bool same_bits(const std::optional<Tensor4>& a, const std::optional<Tensor4>& b) {
  return a.has_value() == b.has_value() && (!a || same_bits(a->data, b->data));
}
bool same_outputs(const AttentionOutputs& a, const AttentionOutputs& b) {
  return same_bits(a.o.data, b.o.data) && same_bits(a.lse.data, b.lse.data) && same_bits(a.delta, b.delta) &&
         same_bits(a.dq, b.dq) && same_bits(a.dk, b.dk) && same_bits(a.dv, b.dv);
}

// FNV-1a over every field of every traced record (doubles by their bits).
struct Fnv {
  std::uint64_t h = 1469598103934665603ull;
  void bytes(const void* p, std::size_t n) {
    const auto* c = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ c[i]) * 1099511628211ull;
  }
  void u(std::uint64_t x) { bytes(&x, sizeof x); }
  void i(long long x) { u(static_cast<std::uint64_t>(x)); }
  void d(double x) { u(std::bit_cast<std::uint64_t>(x)); }
  void event(const RoundingEvent& e) {
    i(e.negative), i(e.exponent), u(e.significand), i(e.input_sticky), i(e.kept_bits), i(e.round_bit);
    i(e.sticky_bit), i(e.tie), i(static_cast<int>(e.direction)), i(e.rounding_carry), d(e.error_ulps);
    u(static_cast<std::uint64_t>(e.flags)), i(e.is_addition), i(e.alignment_shift), i(e.significand_overflow);
    i(e.cancellation_depth), i(e.exact_zero);
  }
};
std::uint64_t trace_checksum(const Tracer& tracer) {
  Fnv f;
  for (const RowTrace& t : tracer.traces) {
    f.i(t.batch), f.i(t.head), f.i(t.row), f.i(t.plot_feature);
    f.u(t.tiles.size());
    for (const TileRecord& r : t.tiles) {
      f.i(r.kv_tile), f.i(r.kv_begin), f.i(r.kv_end), f.d(r.running_max), f.d(r.running_sum), f.i(r.p_equal_one);
      f.i(r.repeated_max), f.i(r.significand_overflows), f.i(r.ties), f.i(r.rounded_up), f.i(r.rounded_down);
      f.d(r.pv_signed_error);
    }
    f.u(t.o_cast.size());
    for (const RoundingEvent& e : t.o_cast) f.event(e);
    f.u(t.cumulative_error_by_key.size());
    for (double x : t.cumulative_error_by_key) f.d(x);
    f.u(t.p_equal_one_keys.size());
    for (int k : t.p_equal_one_keys) f.i(k);
    f.u(t.key_order.size());
    for (int k : t.key_order) f.i(k);
    f.u(t.pv_dot_steps.size());
    for (const DotStepEvent& s : t.pv_dot_steps) {
      f.i(s.largest_exponent), f.i(s.terms), f.d(s.truncated_value), f.i(s.truncated_terms), f.i(s.carry_out);
      f.i(s.normalisation_shift), f.d(s.output_residue), f.i(s.first_product), f.i(s.fraction_bits);
      f.i(s.aligned_sum), f.event(s.output_event), f.i(s.special);
    }
    f.u(t.pv_buffer_events.size());
    for (const RoundingEvent& e : t.pv_buffer_events) f.event(e);
    f.d(t.delta_error_from_o), f.d(t.delta_error_from_reduction);
  }
  return f.h;
}

// Every vector a traced run's records hold (the traces and, per row, each of its vectors and
// each tile's P̄ and accumulator), by its capacity (what the tracer reserved and wrote), in the
// order the tracer makes them: visit(bytes).
template <class Visit>
void each_record_vector(const Tracer& tracer, Visit&& visit) {
  auto bytes_of = [](const auto& v) { return v.capacity() * sizeof(v[0]); };
  visit(bytes_of(tracer.traces));
  for (const RowTrace& t : tracer.traces) {
    visit(bytes_of(t.tiles)), visit(bytes_of(t.o_cast)), visit(bytes_of(t.cumulative_error_by_key));
    visit(bytes_of(t.key_order)), visit(bytes_of(t.pv_dot_steps)), visit(bytes_of(t.pv_buffer_events));
    visit(bytes_of(t.p_equal_one_keys));
    for (const TileRecord& r : t.tiles) visit(bytes_of(r.p)), visit(bytes_of(r.acc));
  }
}
std::size_t record_bytes(const Tracer& tracer) {
  std::size_t n = 0;
  each_record_vector(tracer, [&](std::size_t bytes) { n += bytes; });
  return n;
}
// The floor under any tracer that keeps these records: the same allocations written once and
// kept until the last is made, with none of the tracing work. On a machine where a fresh page
// costs a fault (this benchmark's VM), this alone is a large part of an untraced forward.
double allocation_floor_seconds(const Tracer& tracer) {
  std::vector<std::unique_ptr<unsigned char[]>> kept;
  const double c0 = clock_seconds(CLOCK_THREAD_CPUTIME_ID);
  each_record_vector(tracer, [&](std::size_t bytes) {
    if (bytes == 0) return;
    kept.emplace_back(new unsigned char[bytes]);
    std::memset(kept.back().get(), 1, bytes);
  });
  const double seconds = clock_seconds(CLOCK_THREAD_CPUTIME_ID) - c0;
  kept.clear();
  return seconds;
}

// Peak RSS of one emulated forward, run in a forked child so that the figure is that
// run's alone (the child starts from this small process, before any tensor exists).
int memory_mode(const std::string& model, int seqlen, int head_dim, int threads) {
  constexpr double kLimitMiB = 1024.0;
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid < 0) {
    std::perror("fork");
    return 2;
  }
  if (pid == 0) {
    const AttentionInputs in = make_scenario("random", 1, 1, 1, seqlen, head_dim, formats::bf16, false);
    RunOptions opt;
    opt.threads = threads;
    const AttentionOutputs out = run_attention(parse_kernel_model(model, formats::bf16), in, opt);
    // Touch the result so that nothing of the run can be optimised away.
    _exit(std::isnan(out.o.data[0]) ? 3 : 0);
  }
  int status = 0;
  rusage ru{};
  if (wait4(pid, &status, 0, &ru) != pid) {
    std::perror("wait4");
    return 2;
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "error: the measured run failed (status %d)\n", status);
    return 1;
  }
  rusage self{};
  getrusage(RUSAGE_SELF, &self);
  const double peak_mib = static_cast<double>(ru.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
  const double cpu = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                     1e-6 * static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
  std::printf(
      "memory: emulated %s forward, seqlen %d head dim %d one head, %d threads: peak RSS %.1f MiB "
      "(limit %.0f MiB; the parent at fork: %.1f MiB), %.1f s wall, %.1f s cpu\n",
      model.c_str(), seqlen, head_dim, threads, peak_mib, kLimitMiB, static_cast<double>(self.ru_maxrss) / 1024.0, wall,
      cpu);
  if (peak_mib >= kLimitMiB) {
    std::fprintf(stderr, "error: peak RSS %.1f MiB is not under %.0f MiB\n", peak_mib, kLimitMiB);
    return 1;
  }
  return 0;
}
}  // namespace

int run_benchmark(int argc, char** argv) {
  std::string model = "fa2-sm90", against;
  int seqlen = 4096, head_dim = 64, threads = 1;
  bool trace = false, backward = false, memory = false, seqlen_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "error: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model")
      model = next();
    else if (a == "--seqlen")
      seqlen = std::atoi(next()), seqlen_given = true;
    else if (a == "--headdim")
      head_dim = std::atoi(next());
    else if (a == "--threads")
      threads = std::atoi(next());
    else if (a == "--trace")
      trace = true;
    else if (a == "--backward")
      backward = true;
    else if (a == "--memory")
      memory = true;
    else if (a == "--against")
      against = next();
    else if (a == "--quick")
      seqlen = 256, seqlen_given = true;
    else {
      std::fprintf(stderr, "error: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (seqlen < 1 || head_dim < 1 || threads < 1) {
    std::fprintf(stderr, "error: --seqlen, --headdim and --threads must be positive\n");
    return 2;
  }
  if (memory) return memory_mode(model, seqlen_given ? seqlen : 32768, head_dim, threads);

  const AttentionInputs in = make_scenario("random", 1, 1, 1, seqlen, head_dim, formats::bf16, backward);
  const double products = 2.0 * seqlen * static_cast<double>(seqlen) * head_dim * (backward ? 2.5 : 1.0);
  const ModelHandle m = parse_kernel_model(model, formats::bf16);

  AttentionOutputs native;
  const Timing t_native = timed(1, [&] {
    native = fb::bench::native_flash_forward(in, m.recipe->tiles_for(head_dim, seqlen, in.causal).block_n, 1);
  });
  std::printf(
      "native float tiled forward: seqlen %d head dim %d, 1 thread: %.3f s wall, %.3f s cpu (%.3g products/cpu s)\n",
      seqlen, head_dim, t_native.wall, t_native.cpu,
      2.0 * seqlen * static_cast<double>(seqlen) * head_dim / t_native.cpu);
  const char* what = backward ? "forward+backward" : "forward";

  RunOptions opt;
  opt.threads = threads;
  AttentionOutputs emu;
  const Timing t_emu = timed(threads, [&] { emu = run_attention(m, in, opt); });
  double max_diff = 0.0;
  for (std::size_t i = 0; i < emu.o.data.size(); ++i)
    max_diff = std::max(max_diff, std::fabs(emu.o.data[i] - native.o.data[i]));
  std::printf(
      "emulated %s %s, %d thread%s: %.3f s wall, %.3f s cpu (%.3g products/cpu s, %.2fx native cpu); "
      "max |O_emu - O_native| = %g\n",
      m.name.c_str(), what, threads, threads > 1 ? "s" : "", t_emu.wall, t_emu.cpu, products / t_emu.cpu,
      t_emu.cpu / t_native.cpu, max_diff);

  if (!against.empty()) {
    const ModelHandle base = parse_kernel_model(against, formats::bf16);
    AttentionOutputs base_out;
    const Timing t_base = timed(threads, [&] { base_out = run_attention(base, in, opt); });
    std::printf("emulated %s %s, %d thread%s: %.3f s wall, %.3f s cpu; %s / %s cpu = %.2f\n", base.name.c_str(), what,
                threads, threads > 1 ? "s" : "", t_base.wall, t_base.cpu, m.name.c_str(), base.name.c_str(),
                t_emu.cpu / t_base.cpu);
  }

  int status = 0;
  Tracer tracer;
  if (trace) {
    // "Full statistics": every row of the head traced.
    tracer.rows.reserve(static_cast<std::size_t>(seqlen));
    for (int r = 0; r < seqlen; ++r) tracer.rows.push_back({0, 0, r});
    RunOptions traced_opt = opt;
    traced_opt.tracer = &tracer;
    AttentionOutputs traced;
    const Timing t_traced = timed(threads, [&] { traced = run_attention(m, in, traced_opt); });
    std::printf(
        "emulated %s %s traced (every row), %d thread%s: %.3f s wall, %.3f s cpu: %.2fx the untraced cpu "
        "(target <= 1.5, issue 36); trace checksum %016llx\n",
        m.name.c_str(), what, threads, threads > 1 ? "s" : "", t_traced.wall, t_traced.cpu, t_traced.cpu / t_emu.cpu,
        static_cast<unsigned long long>(trace_checksum(tracer)));
    if (threads == 1) {
      const double floor = allocation_floor_seconds(tracer);
      std::printf(
          "  the traced records: %.1f MB; allocating and writing the same memory, no tracing work: %.3f s cpu, "
          "%.2fx the untraced cpu (the floor under these records)\n",
          1e-6 * static_cast<double>(record_bytes(tracer)), floor, floor / t_emu.cpu);
    }
    if (!same_outputs(traced, emu)) {
      std::fprintf(stderr, "error: the traced run's results differ from the untraced run's\n");
      status = 1;
    }
  }

  if (threads > 1) {
    // The single-thread run, for the bit-for-bit identity the contract promises.
    RunOptions one = opt;
    one.threads = 1;
    AttentionOutputs single;
    const Timing t_one = timed(1, [&] { single = run_attention(m, in, one); });
    bool same = same_outputs(single, emu);
    std::uint64_t traced_one = 0;
    if (trace) {
      Tracer tracer_one;
      tracer_one.rows = tracer.rows;
      one.tracer = &tracer_one;
      (void)run_attention(m, in, one);
      traced_one = trace_checksum(tracer_one);
      same = same && traced_one == trace_checksum(tracer);
    }
    std::printf(
        "emulated %s %s, 1 thread: %.3f s wall, %.3f s cpu (%d threads: %.2fx faster wall); results%s %s "
        "the %d-thread run's bit for bit\n",
        m.name.c_str(), what, t_one.wall, t_one.cpu, threads, t_one.wall / t_emu.wall,
        trace ? " and traced records" : "", same ? "identical to" : "DIFFER from", threads);
    if (!same) status = 1;
  }
  return status;
}

int main(int argc, char** argv) {
  try {
    return run_benchmark(argc, argv);
  } catch (const std::exception& e) {  // a bad --model or --against, or a refused problem
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
