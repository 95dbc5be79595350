// gpu/sfu_probe_analyses.cuh: fb-sfu-probe's ex2 sign-magnitude hypothesis (FBSFU1 form 4) and
// lg2 extended-precision analysis (--lg2-extended, FBSFU1 form 5), kernels and host drivers.
// Contract: it includes what it uses, so that it parses alone (clangd, an IDE). gpu/sfu_probe.cu
// includes it once: its kernels stay in the one translation unit with their launches (no
// relocatable device code), hence the anonymous namespace.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
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
#include "gpu/sfu_probe_tables.cuh"

namespace fb::gpu {
namespace {

// ---- ex2 sign-magnitude hypothesis (FBSFU1 form 4) --------------------------------------------
// For each N in --ex2-sm-bits: the hypothesis pass; when it holds, the table model verified on all
// 2^32 inputs and written (ex2_sm_table_nN.fbsfut: 2^(N+1) entries, T+ then T-), the first N
// whose model reproduces the hardware preferred, else the first that held. True when one held.
bool ex2_sign_magnitude(std::uint64_t chunk, const Options& o, const std::string& dev, std::ostringstream& summary) {
  bool any_held = false, emitted = false, emitted_clean = false;
  for (int nbits : o.ex2_sm_bits) {
    const std::uint64_t entries = 2ull << nbits;
    std::uint32_t* d_table;
    unsigned long long* d_conflicts;
    FB_CUDA_CHECK(cudaMalloc(&d_table, entries * 4));
    FB_CUDA_CHECK(cudaMalloc(&d_conflicts, sizeof(unsigned long long)));
    FB_CUDA_CHECK(cudaMemset(d_table, 0xff, entries * 4));
    FB_CUDA_CHECK(cudaMemset(d_conflicts, 0, sizeof(unsigned long long)));
    ++g_passes;
    for (std::uint64_t base = 0; base < (1ull << 32); base += chunk) {
      ex2_sm_hypothesis_kernel<<<4096, 256>>>(nbits, base, chunk, d_table, d_conflicts);
      FB_CUDA_CHECK(cudaGetLastError());
    }
    unsigned long long conflicts = 0;
    FB_CUDA_CHECK(cudaMemcpy(&conflicts, d_conflicts, sizeof conflicts, cudaMemcpyDeviceToHost));
    summary << "  hypothesis ex2(x) = 2^k * T+(i) for x >= 0, 2^-k * T-(i) for x < 0, |x| truncated to N=" << nbits
            << " fraction bits (k.i, sign-magnitude): " << (conflicts == 0 ? "HOLDS" : "fails") << " (" << conflicts
            << " inputs disagree with the first seen at their key)\n";
    if (conflicts == 0) {
      any_held = true;
      if (!emitted_clean) {
        const std::uint32_t nan_output = measure_nan_output(kEx2);
        const unsigned long long mismatches =
            verify_table_model({kTmEx2SignMagnitude, nbits, 0, d_table, nullptr, 0}, nan_output, chunk, summary);
        const std::string extra =
            "table_model=ex2_sign_magnitude\ntable_model_mismatches=" + std::to_string(mismatches) + "\n";
        if (mismatches == 0 || !emitted) {
          emit_table(kEx2, nbits, "ex2_sign_magnitude", d_table, o, dev, nan_output, extra, summary);
          emitted = true;
          emitted_clean = mismatches == 0;
        }
      }
    }
    FB_CUDA_CHECK(cudaFree(d_table));
    FB_CUDA_CHECK(cudaFree(d_conflicts));
  }
  return any_held;
}

// ---- lg2 extended-precision analysis (--lg2-extended, FBSFU1 form 5) ---------------------------
// Hypothesis: lg2(2^e * 1.m) = round(e + L[m]) for one real L[m] per mantissa and one final
// rounding (nearest-even, toward zero, down, up) for all positive normal inputs. Per mantissa
// and rounding, every exponent e (-126..127, e = 0 included) confines L to an interval; their
// intersection is empty exactly where no L[m] exists for that rounding. Intervals are held in
// units of 2^-60 (gpu/sfu_table_model.hpp lg2_interval, lg2_representative).
constexpr int kLg2Mantissas = 1 << 23;
// One thread per mantissa: all 254 exponents, the four roundings; lo/hi[rounding * 2^23 + m],
// t[m] = the hardware's lg2(1.m); counts[0]: outputs that are NaN or infinite; counts[1 + k]:
// mantissas whose intervals for rounding k are already empty without the e = 0 constraint.
__global__ void lg2_interval_kernel(long long* lo, long long* hi, std::uint32_t* t, unsigned int* counts) {
  for (std::uint32_t m = blockIdx.x * blockDim.x + threadIdx.x; m < kLg2Mantissas; m += gridDim.x * blockDim.x) {
    long long l[kFinalRoundingCount], h[kFinalRoundingCount], l0[kFinalRoundingCount], h0[kFinalRoundingCount];
    for (int k = 0; k < kFinalRoundingCount; ++k) l[k] = -kLg2UnitCap, h[k] = kLg2UnitCap;
    for (int e = -126; e <= 127; ++e) {
      const std::uint32_t in = (static_cast<std::uint32_t>(e + 127) << 23) | m;
      const float r = lg2_approx_ftz(__uint_as_float(in));
      const std::uint32_t rb = __float_as_uint(r);
      if (e == 0) t[m] = rb;
      if (!isfinite(r)) atomicAdd(&counts[0], 1u);
      for (int k = 0; k < kFinalRoundingCount; ++k) {
        long long lo_u, hi_u;
        lg2_interval(e, rb, k, lo_u, hi_u);
        if (e == 0) {
          // x = 1 is the special value lg2(1) = +0 (the model returns it before the rule), so
          // it does not constrain L[0].
          l0[k] = m == 0 ? -kLg2UnitCap : lo_u, h0[k] = m == 0 ? kLg2UnitCap : hi_u;  // applied after the loop
          continue;
        }
        l[k] = max(l[k], lo_u);
        h[k] = min(h[k], hi_u);
      }
    }
    for (int k = 0; k < kFinalRoundingCount; ++k) {
      if (l[k] > h[k]) atomicAdd(&counts[1 + k], 1u);
      lo[static_cast<std::size_t>(k) * kLg2Mantissas + m] = max(l[k], l0[k]);
      hi[static_cast<std::size_t>(k) * kLg2Mantissas + m] = min(h[k], h0[k]);
    }
  }
}

// The hardware's lg2(2^e * 1.m) for e = -126..127 of each listed mantissa (the examples file).
__global__ void lg2_outputs_kernel(const std::uint32_t* mantissas, int n, std::uint32_t* out) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n * 254; i += gridDim.x * blockDim.x) {
    const std::uint32_t in = (static_cast<std::uint32_t>(i % 254 + 1) << 23) | mantissas[i / 254];
    out[i] = __float_as_uint(lg2_approx_ftz(__uint_as_float(in)));
  }
}

void lg2_extended_analysis(std::uint64_t chunk, const Options& o, const std::string& dev, std::ostringstream& summary) {
  const std::size_t n = kLg2Mantissas, modes = kFinalRoundingCount;
  long long *d_lo, *d_hi;
  std::uint32_t* d_t;
  unsigned int* d_counts;
  FB_CUDA_CHECK(cudaMalloc(&d_lo, modes * n * 8));
  FB_CUDA_CHECK(cudaMalloc(&d_hi, modes * n * 8));
  FB_CUDA_CHECK(cudaMalloc(&d_t, n * 4));
  FB_CUDA_CHECK(cudaMalloc(&d_counts, 8 * sizeof(unsigned int)));
  FB_CUDA_CHECK(cudaMemset(d_counts, 0, 8 * sizeof(unsigned int)));
  ++g_passes;  // 2^31 - 2^24 inputs: every positive normal
  lg2_interval_kernel<<<2048, 256>>>(d_lo, d_hi, d_t, d_counts);
  FB_CUDA_CHECK(cudaGetLastError());
  std::vector<long long> lo(modes * n), hi(modes * n);
  std::vector<std::uint32_t> t(n);
  unsigned int counts[8];
  FB_CUDA_CHECK(cudaMemcpy(lo.data(), d_lo, modes * n * 8, cudaMemcpyDeviceToHost));
  FB_CUDA_CHECK(cudaMemcpy(hi.data(), d_hi, modes * n * 8, cudaMemcpyDeviceToHost));
  FB_CUDA_CHECK(cudaMemcpy(t.data(), d_t, n * 4, cudaMemcpyDeviceToHost));
  FB_CUDA_CHECK(cudaMemcpy(counts, d_counts, sizeof counts, cudaMemcpyDeviceToHost));
  FB_CUDA_CHECK(cudaFree(d_lo));
  FB_CUDA_CHECK(cudaFree(d_hi));
  summary << "  lg2 extended precision (--lg2-extended): lg2(2^e * 1.m) = round(e + L[m]), one L[m] per mantissa over "
             "e = -126..127 (2130706432 positive normal inputs; "
          << counts[0] << " NaN or infinite outputs)\n";
  std::size_t empty[kFinalRoundingCount] = {};
  for (std::size_t k = 0; k < modes; ++k) {
    for (std::size_t m = 0; m < n; ++m) empty[k] += lo[k * n + m] > hi[k * n + m];
    summary << "    final rounding " << kFinalRoundingNames[k] << ": " << (empty[k] == 0 ? "HOLDS" : "fails") << " ("
            << empty[k] << " of 8388608 mantissas have no consistent L; " << counts[1 + k]
            << " already without the e = 0 constraint)\n";
  }
  int best = 0;
  for (int k = 1; k < kFinalRoundingCount; ++k) best = empty[k] < empty[best] ? k : best;
  // Diagnostics: the first mantissas without a consistent L, for nearest-even and the best rounding.
  {
    std::vector<std::pair<int, std::uint32_t>> listed;
    for (int k : {0, best}) {
      int taken = 0;
      for (std::size_t m = 0; m < n && taken < 16; ++m) {
        if (lo[k * n + m] > hi[k * n + m]) listed.emplace_back(k, static_cast<std::uint32_t>(m)), ++taken;
      }
      if (best == 0) break;
    }
    if (!listed.empty()) {
      std::vector<std::uint32_t> ms;
      for (const auto& p : listed) ms.push_back(p.second);
      std::uint32_t *d_m, *d_out;
      FB_CUDA_CHECK(cudaMalloc(&d_m, ms.size() * 4));
      FB_CUDA_CHECK(cudaMalloc(&d_out, ms.size() * 254 * 4));
      FB_CUDA_CHECK(cudaMemcpy(d_m, ms.data(), ms.size() * 4, cudaMemcpyHostToDevice));
      lg2_outputs_kernel<<<64, 256>>>(d_m, static_cast<int>(ms.size()), d_out);
      FB_CUDA_CHECK(cudaGetLastError());
      std::vector<std::uint32_t> outs(ms.size() * 254);
      FB_CUDA_CHECK(cudaMemcpy(outs.data(), d_out, outs.size() * 4, cudaMemcpyDeviceToHost));
      FB_CUDA_CHECK(cudaFree(d_m));
      FB_CUDA_CHECK(cudaFree(d_out));
      std::ofstream f(o.out_dir + "/lg2_extended_examples.txt");
      f << "# lg2_extended_examples.txt: fb-sfu-probe --lg2-extended, mantissas m with no consistent L[m]\n"
           "# (gpu/README.md). Per example: 'rounding m T lo hi' (T = the hardware's lg2(1.m) bits, lo/hi the\n"
           "# intersected bounds of L in units of 2^-60 for each rounding in the order nearest_even\n"
           "# toward_zero down up), then the hardware's lg2(2^e * 1.m) bits for e = -126 .. 127.\n";
      std::istringstream devs(dev);
      for (std::string line; std::getline(devs, line);) f << "# " << line << "\n";
      for (std::size_t i = 0; i < listed.size(); ++i) {
        const std::uint32_t m = listed[i].second;
        char line[96];
        std::snprintf(line, sizeof line, "%s m=0x%06x T=0x%08x", kFinalRoundingNames[listed[i].first], m, t[m]);
        f << line;
        for (std::size_t k = 0; k < modes; ++k) f << " " << lo[k * n + m] << " " << hi[k * n + m];
        for (int e = 0; e < 254; ++e) {
          std::snprintf(line, sizeof line, "%s0x%08x", e % 8 == 0 ? "\n  " : " ", outs[i * 254 + e]);
          f << line;
        }
        f << "\n";
      }
      summary << "    wrote lg2_extended_examples.txt: " << listed.size() << " mantissas without a consistent L\n";
    }
  }
  const bool held = empty[best] == 0;
  const bool want_raw = o.lg2_raw_evidence == kRawAlways || (o.lg2_raw_evidence == kRawAuto && !held);
  if (held) {
    // T[0]: the hardware's lg2(1) is the special value +0; the table keeps a float inside
    // L[0]'s interval instead, so that L[0] = T[0] + R ulp(T[0]) 2^-g is representable.
    {
      const long double mid = std::ldexp(0.5L * (static_cast<long double>(lo[best * n]) + hi[best * n]), -60);
      t[0] = sfu_bits(static_cast<float>(mid));
      FB_CUDA_CHECK(cudaMemcpy(d_t, t.data(), 4, cudaMemcpyHostToDevice));
      summary << "    T[0] = " << static_cast<double>(mid)
              << " (L[0]'s interval midpoint; lg2(1) = +0 is a special value)\n";
    }
    // L[m] = T[m] + R[m] ulp(T[m]) 2^-g with the fewest guard bits per mantissa; G the largest.
    std::vector<int> g(n);
    std::vector<long long> r(n);
    std::size_t unrepresentable = 0, guard_hist[25] = {}, zero_r = 0;
    int guard = 0;
    for (std::size_t m = 0; m < n; ++m) {
      if (!lg2_representative(t[m], lo[best * n + m], hi[best * n + m], g[m], r[m])) {
        ++unrepresentable;
        g[m] = 0, r[m] = 0;
        continue;
      }
      ++guard_hist[g[m]];
      guard = std::max(guard, g[m]);
    }
    std::vector<int> residuals(n);
    std::string tail;
    for (std::size_t m = 0; m < n; ++m) {
      residuals[m] = static_cast<int>(r[m] * (1ll << (guard - g[m])));  // |R| <= 2^guard
      zero_r += residuals[m] == 0;
      std::uint32_t z =
          (static_cast<std::uint32_t>(residuals[m]) << 1) ^ static_cast<std::uint32_t>(residuals[m] >> 31);
      do {
        tail += static_cast<char>((z & 0x7fu) | (z > 0x7fu ? 0x80u : 0u));
        z >>= 7;
      } while (z);
    }
    summary << "    representative L[m] = T[m] + R[m] ulp(T[m]) 2^-g (" << kFinalRoundingNames[best]
            << "): guard bits needed per mantissa:";
    for (int b = 0; b <= 24; ++b) {
      if (guard_hist[b]) summary << " " << b << ":" << guard_hist[b];
    }
    summary << "; table guard bits " << guard << ", R = 0 for " << zero_r << " mantissas, " << unrepresentable
            << " mantissas need more than 24 guard bits\n";
    if (unrepresentable == 0) {
      int* d_r;
      FB_CUDA_CHECK(cudaMalloc(&d_r, n * 4));
      FB_CUDA_CHECK(cudaMemcpy(d_r, residuals.data(), n * 4, cudaMemcpyHostToDevice));
      const std::uint32_t nan_output = measure_nan_output(kLg2);
      const unsigned long long mismatches =
          verify_table_model({kTmLg2Extended, 23, best, d_t, d_r, guard}, nan_output, chunk, summary);
      const std::string extra = "table_model=lg2_extended\nguard_bits=" + std::to_string(guard) +
                                "\nfinal_rounding=" + kFinalRoundingNames[best] +
                                "\ntable_model_mismatches=" + std::to_string(mismatches) + "\n";
      emit_table(kLg2, 23, "lg2_extended", d_t, o, dev, nan_output, extra, summary, tail);
      FB_CUDA_CHECK(cudaFree(d_r));
    }
  }
  FB_CUDA_CHECK(cudaFree(d_t));
  FB_CUDA_CHECK(cudaFree(d_counts));
  summary << "  lg2 raw evidence (--lg2-raw-evidence " << kRawEvidenceNames[o.lg2_raw_evidence]
          << "): " << (want_raw ? "written" : "not written") << "\n";
  if (want_raw) write_raw_binades(kLg2, o.lg2_raw_binades, o, dev, summary);
}

}  // namespace
}  // namespace fb::gpu
