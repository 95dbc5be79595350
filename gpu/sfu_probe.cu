// gpu/sfu_probe.cu: fb-sfu-probe, exhaustive measurement of the MUFU approximations.
//
// Contract: evaluates ex2.approx.ftz.f32, rcp.approx.ftz.f32 and lg2.approx.ftz.f32
// (inline PTX) on all 2^32 fp32 inputs, in chunks, on the device, and compares each
// result with the correctly rounded (RNE) value of the exact function after .ftz input
// flushing, with .ftz output flushing applied to the reference too.
// - The reference is computed on the device in double (CUDA's exp2/log2 are within
//   1-2 double ulps; 1/x is correctly rounded). Where the double result lies within
//   2^-49 (relative) of an fp32 rounding boundary the rounding direction is not proven;
//   those inputs are counted as "uncertain", listed in the summary (up to a cap), and
//   re-resolved on the host with long double (x87, 64-bit significand); any still too
//   close are reported as unresolved (resolve them with MPFR on the CPU side).
// - Hypotheses of docs/DESIGN.md §5 tested exhaustively:
//   ex2: result(x) = 2^k * T(f) where k.f is x as a fixed-point number with N fraction
//        bits, for each N in --ex2-bits (default 20,22,23,24,25,26; tables only for
//        N <= 24) and each way of forming the
//        fixed-point number in --ex2-roundings (floor, nearest_even, toward_zero: the
//        argument roundings the emu's ex2_fixed_point table model implements);
//   rcp: result(2^e * m) = 2^-e * T(m) for normal inputs with normal results (key: the
//        mantissa field, gpu/sfu_table_model.hpp rcp_mantissa_split; domain: biased input
//        exponent 2..252, positive and negative).
//   A hypothesis holds when no two inputs with the same key (inside the domain where
//   2^k * T(f) stays normal, x in [-125, 127) for ex2) disagree. The ex2 key is the table model's
//   own split of x (gpu/sfu_table_model.hpp ex2_fixed_point_split), so the captured table
//   is indexed exactly as the model, and the emu after conversion, reads it.
// - When an ex2 hypothesis holds (N <= 24), the table is then evaluated on the device
//   exactly as the emu's table model evaluates it (emu/sfu/special_functions.cpp
//   Ex2FixedPointModel::evaluate, restated in gpu/sfu_table_model.hpp: input ftz, NaN ->
//   the measured NaN output, x >= 128 -> +inf, x < -160 -> +0, 2^k * T[i] with overflow to
//   inf and flush below 2^-126) on ALL 2^32 inputs and compared bit for bit with the
//   hardware; the mismatch count, per input region, goes into the summary and the table
//   header (table_model_mismatches), and fb-sfu-table-convert converts only a table with 0.
// - Likewise, when the rcp hypothesis holds, its table T[m] (the outputs for 1.m) is evaluated
//   on the device as the emu's FBSFU1 rcp_mantissa model does (RcpMantissaModel::evaluate,
//   restated in gpu/sfu_table_model.hpp rcp_table_model: input ftz, NaN -> the measured NaN
//   output, +-0 -> +-inf, +-inf -> +-0, +-T[m] * 2^-e with flush below 2^-126) on all 2^32
//   inputs; the mismatches per region go into the summary and the header, as for ex2.
// - Writes a summary (sfu_summary.txt) and, for the smallest N (then the first rounding
//   in floor, nearest_even, toward_zero order) at which a hypothesis holds and verifies,
//   a table file in the format documented in gpu/README.md ("FBSFUT1"; written by
//   traces/sfu_capture_writer.hpp, the writer fb-sfu-rehearse shares); if no holding
//   ex2 table verifies, the first holding one is written anyway (its header says how
//   many inputs it gets wrong); the same for the one rcp table (rcp_table_n23.fbsfut).
// - lg2: one hypothesis is counted on all positive normal inputs: lg2(2^e * 1.m) =
//   RN_fp32(e + lg2hw(1.m)), the e = 0 outputs determining every binade
//   (gpu/sfu_table_model.hpp lg2_exponent_split_model); the summary gives the mismatch count,
//   the ulp histogram of hardware minus prediction, the counts per exponent and the first
//   examples. When it holds, T[m] = lg2hw(1.m) is captured and evaluated on the device as the
//   emu's FBSFU1 lg2_exponent_split model does (Lg2ExponentSplitModel::evaluate, restated in
//   gpu/sfu_table_model.hpp lg2_table_model: input ftz, NaN and x < 0 -> the measured NaN
//   output, +-0 -> -inf, +inf -> +inf, RN_fp32(e + T[m])) on all 2^32 inputs, with the
//   mismatches per region in the summary and header, and written as lg2_table_n23.fbsfut.
// - ex2nf: ex2.approx.f32 WITHOUT .ftz (CUDA's exp2f without fast math) on all 2^32 inputs
//   against the correctly rounded exp2 with no flushing at all (subnormal inputs and results
//   kept; the double reference has the range), same histogram and uncertain-input report;
//   then, on all 2^32 inputs, where it differs from ex2.approx.ftz.f32 per region (NaN,
//   subnormal input, +inf result, normal result, subnormal-or-zero result), and two
//   hypotheses for x < -126: RN(2^-24 * ftz(RN(x + 24))) and RN(ftz(x * 0.5)^2), ftz =
//   ex2.approx.ftz.f32 (the second is the FSETP/FMUL/MUFU.EX2/FMUL squaring sequence ptxas
//   is believed to emit; gpu/sass_probe.cu's listing shows what it does emit).
// - Raw evidence for ex2 (--raw-evidence auto|always|never; auto: only when no ex2 hypothesis
//   held): ex2_conflicts.txt, up to 4096 conflicts (key, the input first recorded at the key
//   and its output, the conflicting input and its output; at most 16 per input binade) and
//   the conflicts per input binade, for N=24 floor and N=23 nearest_even; and
//   ex2_raw_binades.bin (FBSFURAW1, gpu/README.md): ex2.approx.ftz.f32 on every input of a
//   few binades (default [1,2), (-2,-1], [0.5,1), (-1,-0.5], [2^-8,2^-7)) as int8 ulp deltas
//   from round_reference() with an escape list.
// - ex2 sign-magnitude (--ex2-sm-bits, default 23; what an H200 was found to do): key = x's sign
//   and |x| truncated to N fraction bits, value = result bits -+ k in the exponent field; when it
//   holds, the emu's form 4 model (Ex2SignMagnitudeModel, gpu/sfu_table_model.hpp
//   ex2_sign_magnitude_table_model) is verified on all 2^32 inputs and ex2_sm_table_nN.fbsfut
//   written (T+ then T-).
// - lg2 extended (--lg2-extended): per mantissa and final rounding (nearest-even, toward zero,
//   down, up) the intersection over all 254 exponents of the intervals of L with
//   round(e + L) = lg2hw(2^e * 1.m) (gpu/sfu_table_model.hpp lg2_interval); empty counts per
//   rounding; when one rounding holds, L[m] = T[m] + R[m] ulp(T[m]) 2^-g (lg2_representative),
//   the emu's form 5 model (Lg2ExtendedModel, lg2_extended_table_model) verified on all 2^32
//   inputs and lg2_extended_n23.fbsfut written; lg2_extended_examples.txt lists mantissas
//   without a consistent L, and lg2_raw_binades.bin (--lg2-raw-evidence auto) is written when no
//   rounding held.
// The summary file is rewritten after each function, so a run cut short keeps what it did,
// and ends with the wall time and the number of 2^32-input passes per function.
// Run on an H200 on 2026-11-26 (before the sign-magnitude and --lg2-extended parts, which are
// compiled here and NOT yet run on a GPU).
// Usage: fb-sfu-probe --out-dir DIR [--functions ex2,ex2nf,rcp,lg2] [--ex2-bits 20,22,23,24,25,26]
//        [--ex2-roundings floor,nearest_even,toward_zero] [--ex2-sm-bits 23|none]
//        [--raw-evidence auto|always|never] [--raw-binades 1,-1,0.5,-0.5,0x1p-8] [--lg2-extended]
//        [--lg2-raw-evidence auto|always|never] [--lg2-raw-binades 1,0.5,2] [--chunk-log2 28]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gpu/device_common.cuh"
#include "gpu/sfu_table_model.hpp"
#include "traces/sfu_capture_writer.hpp"

// The kernels and the drivers that launch them, split by topic; one translation unit (no -rdc).
#include "gpu/sfu_probe_kernels.cuh"
#include "gpu/sfu_probe_tables.cuh"
#include "gpu/sfu_probe_analyses.cuh"

namespace fb::gpu {
namespace {

int run(const Options& o) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point t_start = Clock::now();
  int device = 0, device_count = 0;
  const cudaError_t count_err = cudaGetDeviceCount(&device_count);
  if (count_err != cudaSuccess || device_count == 0) {
    const std::string why = std::string("fb-sfu-probe: no usable CUDA device (") +
                            (count_err != cudaSuccess ? cudaGetErrorString(count_err) : "no device found") +
                            "): this program needs a GPU\n";
    std::ofstream(o.out_dir + "/sfu_summary.txt") << why;
    std::fputs(why.c_str(), stderr);
    return 3;
  }
  cudaDeviceProp prop;
  FB_CUDA_CHECK(cudaGetDevice(&device));
  FB_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  const std::string dev = device_line(prop);
  const std::uint64_t chunk = 1ull << o.chunk_log2, total = 1ull << 32;
  std::ostringstream summary, timing;
  summary << "fb-sfu-probe summary (all 2^32 fp32 inputs)\n" << dev;
  {
    summary << "options: functions=";
    const char* sep = "";
    for (int fn : {kEx2, kRcp, kLg2, kEx2Nf}) {
      if (!o.functions[fn]) continue;
      summary << sep << kFnNames[fn];
      sep = ",";
    }
    summary << " ex2_bits=";
    for (std::size_t i = 0; i < o.ex2_bits.size(); ++i) summary << (i ? "," : "") << o.ex2_bits[i];
    summary << " ex2_roundings=";
    for (std::size_t i = 0; i < o.ex2_roundings.size(); ++i)
      summary << (i ? "," : "") << kArgRoundingNames[o.ex2_roundings[i]];
    summary << " ex2_sm_bits=";
    for (std::size_t i = 0; i < o.ex2_sm_bits.size(); ++i) summary << (i ? "," : "") << o.ex2_sm_bits[i];
    if (o.ex2_sm_bits.empty()) summary << "none";
    summary << " raw_evidence=" << kRawEvidenceNames[o.raw_evidence] << " lg2_extended=" << (o.lg2_extended ? 1 : 0)
            << " lg2_raw_evidence=" << kRawEvidenceNames[o.lg2_raw_evidence] << " chunk_log2=" << o.chunk_log2 << "\n";
  }
  // Rewritten after each function, so that a run cut short keeps the functions it finished.
  const auto write_summary = [&](bool final_write) {
    std::ofstream(o.out_dir + "/sfu_summary.txt")
        << summary.str() << (final_write ? "" : "\n(run in progress or cut short: functions above finished)\n");
  };
  Stats* stats;
  FB_CUDA_CHECK(cudaMallocManaged(&stats, sizeof(Stats)));
  timing << "\n[timing] wall seconds (2^32-input passes) per function:";
  // ex2nf last: the three .ftz functions keep their place in the summary.
  for (int fn : {kEx2, kRcp, kLg2, kEx2Nf}) {
    if (!o.functions[fn]) continue;
    const Clock::time_point t_fn = Clock::now();
    const unsigned long long passes_before = g_passes;
    std::memset(stats, 0, sizeof(Stats));
    ++g_passes;
    for (std::uint64_t base = 0; base < total; base += chunk) {
      measure_kernel<<<4096, 256>>>(fn, base, chunk, stats);
      FB_CUDA_CHECK(cudaGetLastError());
    }
    FB_CUDA_CHECK(cudaDeviceSynchronize());
    summary << "\n[" << kFnPtx[fn] << "] vs correctly rounded "
            << (fn == kEx2Nf ? "(RNE, no flushing: subnormal inputs and results kept)\n" : "(RNE, ftz in and out)\n");
    summary << "  max |ulp difference| (non-NaN) = " << stats->max_abs_ulps << "\n  histogram (ulps: count):";
    for (int b = 0; b < kHistBins; ++b) {
      if (stats->hist[b]) summary << " " << (b - kHistHalf) << ":" << stats->hist[b];
    }
    summary << " <-" << kHistHalf << ":" << stats->hist[kBinBelow] << " >" << kHistHalf << ":" << stats->hist[kBinAbove]
            << " nan_both:" << stats->hist[kBinNanBoth] << " nan_mismatch:" << stats->hist[kBinNanMismatch] << "\n";
    // Re-resolve the uncertain references with long double on the host.
    const unsigned int n_unc = std::min(stats->uncertain, kUncertainCap);
    unsigned int still = 0;
    std::ostringstream listing;
    for (unsigned int i = 0; i < n_unc; ++i) {
      const std::uint32_t in = stats->uncertain_inputs[i];
      float x;
      std::memcpy(&x, &in, 4);
      bool unresolved = false;
      float ref;
      if (fn == kEx2Nf) {  // no flushing, and the boundary between 0 and 2^-149 checked too
        ref = round_reference_unflushed_host(exp2l(static_cast<long double>(x)), x == std::rint(x), unresolved);
      } else {
        const long double xl = sfu_ftz(x);
        const long double r = fn == kEx2 ? exp2l(xl) : fn == kRcp ? 1.0L / xl : log2l(xl);
        const float f = static_cast<float>(r);
        const float toward = static_cast<long double>(f) < r ? nextafterf(f, INFINITY) : nextafterf(f, -INFINITY);
        const long double boundary = 0.5L * (static_cast<long double>(f) + static_cast<long double>(toward));
        unresolved = fabsl(r - boundary) <= fabsl(r) * 0x1p-60L;
        ref = sfu_ftz(f);
      }
      still += unresolved;
      char line[96];
      std::snprintf(
          line, sizeof line, "    0x%08x ref(long double)=0x%08x%s\n", in,
          [&] {
            std::uint32_t b;
            std::memcpy(&b, &ref, 4);
            return b;
          }(),
          unresolved ? " UNRESOLVED" : "");
      listing << line;
    }
    summary << "  reference uncertain in double: " << stats->uncertain << " inputs (listed up to " << kUncertainCap
            << "), still unresolved with long double: " << still
            << " (their histogram bins above use the double reference)\n"
            << listing.str();

    if (fn == kEx2 || fn == kRcp) {
      std::vector<int> bits = fn == kEx2 ? o.ex2_bits : std::vector<int>{23};
      std::sort(bits.begin(), bits.end());
      const std::vector<int> roundings = fn == kEx2 ? o.ex2_roundings : std::vector<int>{kFloor};
      bool emitted = false, emitted_clean = false;  // keep the smallest N that holds (and verifies)
      // floor and toward-zero keys nest: the key at N determines the key at any N0 < N, so a
      // hypothesis that held at N0 holds at every larger N and is not re-run (nearest does not nest).
      int held_at[kArgRoundingCount] = {-1, -1, -1};
      // The hypotheses whose conflicts the raw evidence keeps (ex2_conflicts.txt).
      std::vector<ConflictCapture> captures;
      captures.emplace_back(24, kFloor);
      captures.emplace_back(23, kNearestEven);
      for (int nbits : bits) {
        for (int rounding : roundings) {
          if (fn == kEx2 && rounding != kNearestEven && held_at[rounding] >= 0) {
            summary << "  hypothesis ex2(x) = 2^k * T(frac), x fixed point (" << kArgRoundingNames[rounding]
                    << ") with N=" << nbits << " fraction bits: HOLDS (implied by N=" << held_at[rounding] << ")\n";
            continue;
          }
          const std::uint64_t entries = 1ull << nbits;
          std::uint32_t* d_table;
          unsigned long long* d_conflicts;
          FB_CUDA_CHECK(cudaMalloc(&d_table, entries * 4));
          FB_CUDA_CHECK(cudaMalloc(&d_conflicts, sizeof(unsigned long long)));
          FB_CUDA_CHECK(cudaMemset(d_table, 0xff, entries * 4));
          FB_CUDA_CHECK(cudaMemset(d_conflicts, 0, sizeof(unsigned long long)));
          unsigned long long conflicts = 0;
          if (fn == kEx2) {
            auto ev = std::make_unique<Ex2Conflicts>();
            conflicts = run_ex2_hypothesis(nbits, rounding, chunk, d_table, *ev);
            for (ConflictCapture& c : captures) {
              if (c.nbits != nbits || c.rounding != rounding) continue;
              c.captured = true;
              c.conflicts = conflicts;
              c.ev = std::move(ev);
            }
          } else {
            ++g_passes;
            for (std::uint64_t base = 0; base < total; base += chunk) {
              rcp_hypothesis_kernel<<<4096, 256>>>(base, chunk, d_table, d_conflicts);
              FB_CUDA_CHECK(cudaGetLastError());
            }
            FB_CUDA_CHECK(cudaMemcpy(&conflicts, d_conflicts, sizeof conflicts, cudaMemcpyDeviceToHost));
          }
          summary << "  hypothesis "
                  << (fn == kEx2 ? std::string("ex2(x) = 2^k * T(frac), x fixed point (") +
                                       kArgRoundingNames[rounding] + ") with N="
                                 : std::string("rcp(2^e m) = 2^-e * T(m), N="))
                  << nbits << " fraction bits: " << (conflicts == 0 ? "HOLDS" : "fails") << " (" << conflicts
                  << " inputs disagree with the first seen at their key)\n";
          if (conflicts == 0 && held_at[rounding] < 0) held_at[rounding] = nbits;
          if (conflicts == 0 && nbits <= 24 && !emitted_clean) {
            const std::uint32_t nan_output = measure_nan_output(fn);
            const std::string key = fn == kEx2 ? std::string("ex2_fixed_point_") + kArgRoundingNames[rounding]
                                               : std::string("rcp_mantissa");
            const unsigned long long mismatches = verify_table_model(
                {fn == kEx2 ? kTmEx2FixedPoint : kTmRcpMantissa, nbits, rounding, d_table, nullptr, 0}, nan_output,
                chunk, summary);
            const std::string extra =
                (fn == kEx2 ? "argument_rounding=" + std::string(kArgRoundingNames[rounding]) + "\n"
                            : std::string("table_model=rcp_mantissa\n")) +
                "table_model_mismatches=" + std::to_string(mismatches) + "\n";
            if (mismatches == 0 || !emitted) {
              emit_table(fn, nbits, key, d_table, o, dev, nan_output, extra, summary);
              emitted = true;
              emitted_clean = mismatches == 0;
            }
          }
          FB_CUDA_CHECK(cudaFree(d_table));
          FB_CUDA_CHECK(cudaFree(d_conflicts));
        }
      }
      if (fn == kEx2) {
        const bool sm_held = ex2_sign_magnitude(chunk, o, dev, summary);
        // Raw evidence: with --raw-evidence auto only when no hypothesis held (any N, any rounding,
        // the sign-magnitude one included).
        const bool any_held =
            sm_held || std::any_of(std::begin(held_at), std::end(held_at), [](int n) { return n >= 0; });
        const bool want = o.raw_evidence == kRawAlways || (o.raw_evidence == kRawAuto && !any_held);
        summary << "  raw evidence (--raw-evidence " << kRawEvidenceNames[o.raw_evidence] << "): "
                << (want ? (any_held ? "written" : "written, no ex2 hypothesis held")
                         : (o.raw_evidence == kRawNever ? "not written" : "not written, a hypothesis held"))
                << "\n";
        if (want) {
          for (ConflictCapture& c : captures) {
            if (c.captured) continue;  // not among the hypotheses run above: one more pass
            std::uint32_t* d_table;
            FB_CUDA_CHECK(cudaMalloc(&d_table, (1ull << c.nbits) * 4));
            c.ev = std::make_unique<Ex2Conflicts>();
            c.conflicts = run_ex2_hypothesis(c.nbits, c.rounding, chunk, d_table, *c.ev);
            c.captured = true;
            FB_CUDA_CHECK(cudaFree(d_table));
          }
          write_ex2_conflicts(captures, o, dev, summary);
          write_raw_binades(kEx2, o.raw_binades, o, dev, summary);
        }
      }
    }
    if (fn == kLg2 && lg2_split_hypothesis(chunk, summary)) emit_lg2_table(chunk, o, dev, summary);
    if (fn == kLg2 && o.lg2_extended) lg2_extended_analysis(chunk, o, dev, summary);
    if (fn == kEx2Nf) ex2_nf_compare(chunk, summary);
    FB_CUDA_CHECK(cudaDeviceSynchronize());
    const double seconds = std::chrono::duration<double>(Clock::now() - t_fn).count();
    timing << " " << kFnNames[fn] << ": " << seconds << " s (" << (g_passes - passes_before) << ")";
    std::printf("%s done: %.2f s, %llu passes of 2^32 inputs\n", kFnPtx[fn], seconds, g_passes - passes_before);
    std::fflush(stdout);
    write_summary(false);
  }
  FB_CUDA_CHECK(cudaFree(stats));
  timing << "; total " << std::chrono::duration<double>(Clock::now() - t_start).count() << " s (" << g_passes
         << " passes)\n";
  summary << timing.str();
  write_summary(true);
  std::fputs(summary.str().c_str(), stdout);
  return 0;
}

}  // namespace
}  // namespace fb::gpu

namespace {
const char kUsage[] =
    "usage: fb-sfu-probe --out-dir DIR [--functions ex2,ex2nf,rcp,lg2] [--ex2-bits 20,22,23,24,25,26]\n"
    "                    [--ex2-roundings floor,nearest_even,toward_zero] [--ex2-sm-bits 23|none]\n"
    "                    [--raw-evidence auto|always|never] [--raw-binades 1,-1,0.5,-0.5,0x1p-8]\n"
    "                    [--lg2-extended] [--lg2-raw-evidence auto|always|never] [--lg2-raw-binades 1,0.5,2]\n"
    "                    [--chunk-log2 28]\n"
    "  --functions     which to measure (default all): ex2 = ex2.approx.ftz.f32 (+ table hypotheses),\n"
    "                  ex2nf = ex2.approx.f32 (no ftz), rcp = rcp.approx.ftz.f32, lg2 = lg2.approx.ftz.f32\n"
    "  --ex2-bits      fixed-point fraction bits N tried (8..26; tables written only for N <= 24)\n"
    "  --raw-evidence  ex2_conflicts.txt + ex2_raw_binades.bin: auto = only when no ex2 hypothesis held\n"
    "  --raw-binades   binades of the raw capture, each named by +-2^e: all 2^23 inputs with that sign and\n"
    "                  exponent (1 = [1,2), -1 = (-2,-1]); at most 16\n"
    "  --ex2-sm-bits   sign-magnitude ex2 hypothesis (|x| truncated to N fraction bits), N in 8..24, or none\n"
    "  --lg2-extended  lg2: one L[m] per mantissa with round(e + L[m]) for 4 final roundings; table when one holds\n"
    "  --lg2-raw-evidence  lg2_raw_binades.bin (--lg2-raw-binades): auto = when --lg2-extended found no L\n"
    "Writes DIR/sfu_summary.txt (and tables, raw evidence); exit 2 bad arguments, 3 CUDA error or no GPU.\n";

bool parse_list(const char* arg, const char* option, const std::function<bool(const std::string&)>& item_ok) {
  std::stringstream s(arg);
  std::string item;
  bool any = false;
  while (std::getline(s, item, ',')) {
    if (!item_ok(item)) {
      std::fprintf(stderr, "error: %s: '%s' is not valid\n%s", option, item.c_str(), kUsage);
      return false;
    }
    any = true;
  }
  if (!any) std::fprintf(stderr, "error: %s: empty list\n%s", option, kUsage);
  return any;
}
}  // namespace

int main(int argc, char** argv) {
  using namespace fb::gpu;
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (arg == "--out-dir" && has_value) {
      o.out_dir = argv[++i];
    } else if (arg == "--chunk-log2" && has_value) {
      o.chunk_log2 = std::atoi(argv[++i]);
    } else if (arg == "--ex2-roundings" && has_value) {
      o.ex2_roundings.clear();
      if (!parse_list(argv[++i], "--ex2-roundings", [&](const std::string& item) {
            int r = 0;
            while (r < kArgRoundingCount && item != kArgRoundingNames[r]) ++r;
            if (r == kArgRoundingCount) return false;
            o.ex2_roundings.push_back(r);
            return true;
          })) {
        return 2;
      }
    } else if (arg == "--ex2-bits" && has_value) {
      o.ex2_bits.clear();
      if (!parse_list(argv[++i], "--ex2-bits", [&](const std::string& item) {
            char* end = nullptr;
            const long b = std::strtol(item.c_str(), &end, 10);
            if (item.empty() || *end != '\0' || b < 8 || b > 26) return false;
            o.ex2_bits.push_back(static_cast<int>(b));
            return true;
          })) {
        return 2;
      }
    } else if (arg == "--functions" && has_value) {
      std::fill(std::begin(o.functions), std::end(o.functions), false);
      if (!parse_list(argv[++i], "--functions", [&](const std::string& item) {
            for (int fn = 0; fn < kFnCount; ++fn) {
              if (item == kFnNames[fn]) return o.functions[fn] = true;
            }
            return false;
          })) {
        return 2;
      }
    } else if (arg == "--raw-evidence" && has_value) {
      const std::string v = argv[++i];
      int r = 0;
      while (r < 3 && v != kRawEvidenceNames[r]) ++r;
      if (r == 3) {
        std::fprintf(stderr, "error: --raw-evidence: '%s' is not auto, always or never\n%s", v.c_str(), kUsage);
        return 2;
      }
      o.raw_evidence = r;
    } else if (arg == "--ex2-sm-bits" && has_value) {
      o.ex2_sm_bits.clear();
      if (std::string(argv[i + 1]) == "none") {
        ++i;
        continue;
      }
      if (!parse_list(argv[++i], "--ex2-sm-bits", [&](const std::string& item) {
            char* end = nullptr;
            const long b = std::strtol(item.c_str(), &end, 10);
            if (item.empty() || *end != '\0' || b < 8 || b > 24) return false;
            o.ex2_sm_bits.push_back(static_cast<int>(b));
            return true;
          })) {
        return 2;
      }
    } else if (arg == "--lg2-extended") {
      o.lg2_extended = true;
    } else if (arg == "--lg2-raw-evidence" && has_value) {
      const std::string v = argv[++i];
      int r = 0;
      while (r < 3 && v != kRawEvidenceNames[r]) ++r;
      if (r == 3) {
        std::fprintf(stderr, "error: --lg2-raw-evidence: '%s' is not auto, always or never\n%s", v.c_str(), kUsage);
        return 2;
      }
      o.lg2_raw_evidence = r;
    } else if ((arg == "--raw-binades" || arg == "--lg2-raw-binades") && has_value) {
      std::vector<std::uint32_t>& list = arg == "--raw-binades" ? o.raw_binades : o.lg2_raw_binades;
      list.clear();
      if (!parse_list(argv[++i], arg.c_str(), [&](const std::string& item) {
            char* end = nullptr;
            const float v = std::strtof(item.c_str(), &end);
            std::uint32_t bits;
            std::memcpy(&bits, &v, 4);
            const std::uint32_t exponent = (bits >> 23) & 0xffu;
            // a normal +-2^e, each binade once
            if (item.empty() || *end != '\0' || (bits & 0x7fffffu) != 0 || exponent == 0 || exponent == 255 ||
                list.size() == static_cast<std::size_t>(kMaxRawBinades) ||
                std::find(list.begin(), list.end(), bits) != list.end()) {
              return false;
            }
            list.push_back(bits);
            return true;
          })) {
        return 2;
      }
    } else {
      std::fprintf(stderr, "error: unknown or incomplete argument '%s'\n%s", arg.c_str(), kUsage);
      return 2;
    }
  }
  if (o.chunk_log2 < 16 || o.chunk_log2 > 32) {
    std::fprintf(stderr, "error: --chunk-log2 must be in 16..32\n");
    return 2;
  }
  if (o.ex2_roundings.empty() || o.ex2_bits.empty()) {
    std::fprintf(stderr, "error: --ex2-bits and --ex2-roundings need at least one value\n");
    return 2;
  }
  // Fail before the GPU work, not after it, when the summary cannot be written.
  if (!(std::ofstream(o.out_dir + "/sfu_summary.txt") << "fb-sfu-probe: started, no function finished yet\n")) {
    std::fprintf(stderr, "error: cannot write %s/sfu_summary.txt (does --out-dir exist?)\n", o.out_dir.c_str());
    return 2;
  }
  return run(o);
}
