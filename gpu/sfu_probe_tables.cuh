// gpu/sfu_probe_tables.cuh: fb-sfu-probe's raw-binade capture kernel, options, and the host drivers
// that emit and verify the FBSFUT1 tables, write ex2 conflicts and raw evidence, and compare ex2nf.
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
#include "gpu/sfu_probe_kernels.cuh"

namespace fb::gpu {
namespace {

// Raw capture (FBSFURAW1, gpu/README.md): ex2.approx.ftz.f32 on every input of each binade
// (2^23 inputs from start[b], the binade's first bit pattern), as int8 ulp deltas from the
// same reference measure_kernel uses; -128 escapes to an explicit (input, output) pair: for
// |delta| > 127, a NaN, or a reference too close to a rounding boundary.
constexpr int kMaxRawBinades = 16;
constexpr signed char kRawEscape = -128;
struct RawBinades {
  int count;
  std::uint32_t start[kMaxRawBinades];
};
// fn: kEx2 or kLg2 (lg2_raw_binades.bin, the same format with function=lg2).
__global__ void raw_binades_kernel(int fn, RawBinades b, signed char* delta, unsigned int* counts,
                                   std::uint32_t* escapes, std::uint32_t escape_cap) {
  // counts: [0] escapes, [1] of which reference-uncertain
  const std::uint32_t total = static_cast<std::uint32_t>(b.count) << 23;
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    const std::uint32_t in = b.start[i >> 23] + (i & 0x7fffffu);
    const float x = __uint_as_float(in);
    const float y = hw(fn, x);
    bool uncertain = false;
    const float ref = sfu_ftz(round_reference(exact_fn(fn, static_cast<double>(sfu_ftz(x))), uncertain));
    const long long d = ordered(__float_as_uint(y)) - ordered(__float_as_uint(ref));
    if (!uncertain && !isnan(y) && !isnan(ref) && d >= -127 && d <= 127) {
      delta[i] = static_cast<signed char>(d);
      continue;
    }
    delta[i] = kRawEscape;
    const unsigned int slot = atomicAdd(&counts[0], 1u);
    if (uncertain) atomicAdd(&counts[1], 1u);
    if (slot < escape_cap) {
      escapes[2 * slot] = in;
      escapes[2 * slot + 1] = __float_as_uint(y);
    }
  }
}

enum RawEvidence : int { kRawAuto, kRawAlways, kRawNever };
const char* const kRawEvidenceNames[3] = {"auto", "always", "never"};

struct Options {
  std::string out_dir = ".";
  std::vector<int> ex2_bits = {20, 22, 23, 24, 25, 26};  // tables only for N <= 24
  std::vector<int> ex2_roundings = {kFloor, kNearestEven, kTowardZero};
  bool functions[kFnCount] = {true, true, true, true};
  int raw_evidence = kRawAuto;
  // First bit pattern of each raw-capture binade: [1,2), (-2,-1], [0.5,1), (-1,-0.5], [2^-8,2^-7).
  std::vector<std::uint32_t> raw_binades = {0x3f800000u, 0xbf800000u, 0x3f000000u, 0xbf000000u, 0x3b800000u};
  // ex2 sign-magnitude hypothesis: fraction bits N tried (empty: not run).
  std::vector<int> ex2_sm_bits = {23};
  // lg2: the extended-precision analysis (--lg2-extended) and its raw evidence.
  bool lg2_extended = false;
  int lg2_raw_evidence = kRawAuto;
  std::vector<std::uint32_t> lg2_raw_binades = {0x3f800000u, 0x3f000000u, 0x40000000u};  // [1,2), [0.5,1), [2,4)
  int chunk_log2 = 28;
};

std::string device_line(const cudaDeviceProp& prop) {
  int driver = 0, runtime = 0;
  FB_CUDA_CHECK(cudaDriverGetVersion(&driver));
  FB_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  std::ostringstream s;
  s << "source=cuda:" << prop.name << "\ndevice=" << prop.name << "\ncompute_capability=" << prop.major << "."
    << prop.minor << "\ndriver=" << driver << "\ncuda_runtime=" << runtime << "\n";
  return s.str();
}

// FBSFUT1 (gpu/README.md): text header up to "end\n", then 2^N 4-bit deltas packed two
// per byte (entry 2i in the low nibble), then u32 escape count and (u32 key, u32 bits) pairs.
// `extra` holds header lines ("key=value\n") that depend on the function (argument
// rounding and the table-model verification for ex2).
// ex2 sign-magnitude tables (key ex2_sign_magnitude) hold 2^(nbits+1) entries, T+ then T-;
// `tail` is appended after the escapes (lg2 extended: the residuals).
// The deltas are computed on the device (table_delta_kernel); the file, its name and the
// summary line are traces/sfu_capture_writer.hpp write_sfu_table's, the writer fb-sfu-rehearse uses.
void emit_table(int fn, int nbits, const std::string& key, std::uint32_t* d_table, const Options& o,
                const std::string& device, std::uint32_t nan_output, const std::string& extra,
                std::ostringstream& summary, const std::string& tail = std::string()) {
  const bool sign_magnitude = key == "ex2_sign_magnitude";
  const std::uint32_t entries = sfu_table_entries(nbits, key), escape_cap = sfu_table_escape_cap(nbits, key);
  signed char* d_delta;
  unsigned int* d_counts;
  std::uint32_t* d_escapes;
  FB_CUDA_CHECK(cudaMalloc(&d_delta, entries));
  FB_CUDA_CHECK(cudaMalloc(&d_counts, 3 * sizeof(unsigned int)));
  FB_CUDA_CHECK(cudaMalloc(&d_escapes, 2ull * escape_cap * 4));
  FB_CUDA_CHECK(cudaMemset(d_counts, 0, 3 * sizeof(unsigned int)));
  table_delta_kernel<<<1024, 256>>>(fn, nbits, sign_magnitude, d_table, entries, d_delta, d_counts, d_escapes,
                                    escape_cap);
  FB_CUDA_CHECK(cudaGetLastError());
  SfuTableDeltas deltas;
  deltas.delta.resize(entries);
  unsigned int counts[3];
  FB_CUDA_CHECK(cudaMemcpy(deltas.delta.data(), d_delta, entries, cudaMemcpyDeviceToHost));
  FB_CUDA_CHECK(cudaMemcpy(counts, d_counts, sizeof counts, cudaMemcpyDeviceToHost));
  deltas.unfilled = counts[0];
  deltas.escape_count = counts[1];
  deltas.uncertain = counts[2];
  deltas.escapes.resize(2ull * std::min(counts[1], escape_cap));
  FB_CUDA_CHECK(cudaMemcpy(deltas.escapes.data(), d_escapes, deltas.escapes.size() * 4, cudaMemcpyDeviceToHost));
  FB_CUDA_CHECK(cudaFree(d_delta));
  FB_CUDA_CHECK(cudaFree(d_counts));
  FB_CUDA_CHECK(cudaFree(d_escapes));
  write_sfu_table(o.out_dir, fn, nbits, key, nan_output, extra, device, deltas, summary, tail);
}

__global__ void nan_output_kernel(int fn, std::uint32_t* out) {
  *out = __float_as_uint(hw(fn, __uint_as_float(0x7fc00000u)));
}

// The bits the hardware returns for a NaN input (the tables' nan_output).
std::uint32_t measure_nan_output(int fn) {
  std::uint32_t* d_nan;
  std::uint32_t nan_output = 0;
  FB_CUDA_CHECK(cudaMalloc(&d_nan, 4));
  nan_output_kernel<<<1, 1>>>(fn, d_nan);
  FB_CUDA_CHECK(cudaMemcpy(&nan_output, d_nan, 4, cudaMemcpyDeviceToHost));
  FB_CUDA_CHECK(cudaFree(d_nan));
  return nan_output;
}

// Evaluates the table model `spec` on all 2^32 inputs against the hardware, writes the
// mismatches per region and the first examples to the summary and returns their count.
unsigned long long verify_table_model(const TableSpec& spec, std::uint32_t nan_output, std::uint64_t chunk,
                                      std::ostringstream& summary) {
  VerifyResult* verify;
  FB_CUDA_CHECK(cudaMallocManaged(&verify, sizeof(VerifyResult)));
  std::memset(verify, 0, sizeof(VerifyResult));
  ++g_passes;
  for (std::uint64_t base = 0; base < (1ull << 32); base += chunk) {
    table_verify_kernel<<<4096, 256>>>(spec, nan_output, base, chunk, verify);
    FB_CUDA_CHECK(cudaGetLastError());
  }
  FB_CUDA_CHECK(cudaDeviceSynchronize());
  const int fn = table_fn(spec.kind);
  switch (spec.kind) {
    case kTmEx2FixedPoint:
      summary << "  table model (emu Ex2FixedPointModel, N=" << spec.nbits << ", " << kArgRoundingNames[spec.rounding]
              << ") vs hardware on all 2^32 inputs:";
      break;
    case kTmEx2SignMagnitude:
      summary << "  table model (emu Ex2SignMagnitudeModel, N=" << spec.nbits << ") vs hardware on all 2^32 inputs:";
      break;
    case kTmRcpMantissa:
      summary << "  table model (emu RcpMantissaModel, 2^23 mantissas) vs hardware on all 2^32 inputs:";
      break;
    case kTmLg2Split:
      summary << "  table model (emu Lg2ExponentSplitModel, 2^23 mantissas) vs hardware on all 2^32 inputs:";
      break;
    default:
      summary << "  table model (emu Lg2ExtendedModel, " << kFinalRoundingNames[spec.rounding] << ", "
              << spec.guard_bits << " guard bits) vs hardware on all 2^32 inputs:";
  }
  const char* const* region_names = fn == kEx2 ? kEx2RegionNames : fn == kRcp ? kRcpRegionNames : kLg2RegionNames;
  unsigned long long mismatches = 0;
  for (int r = 0; r < kRegionCount; ++r) {
    mismatches += verify->mismatches[r];
    summary << " " << region_names[r] << ": " << verify->mismatches[r];
  }
  summary << " mismatches" << (mismatches == 0 ? " (REPRODUCES the hardware)" : "") << "\n";
  for (unsigned int e = 0; e < std::min(verify->examples, kVerifyExamples); ++e) {
    char line[96];
    std::snprintf(line, sizeof line, "    x=0x%08x hardware=0x%08x model=0x%08x\n", verify->example[e][0],
                  verify->example[e][1], verify->example[e][2]);
    summary << line;
  }
  FB_CUDA_CHECK(cudaFree(verify));
  return mismatches;
}

// When the lg2 exponent-split hypothesis held: captures T[m] = lg2hw(1.m), verifies the
// emu's model of it on all inputs and writes it (lg2_table_n23.fbsfut), as for rcp.
void emit_lg2_table(std::uint64_t chunk, const Options& o, const std::string& dev, std::ostringstream& summary) {
  std::uint32_t* d_table;
  FB_CUDA_CHECK(cudaMalloc(&d_table, kLg2MantissaTableEntries * 4ull));
  lg2_mantissa_table_kernel<<<1024, 256>>>(d_table);
  FB_CUDA_CHECK(cudaGetLastError());
  const std::uint32_t nan_output = measure_nan_output(kLg2);
  const unsigned long long mismatches =
      verify_table_model({kTmLg2Split, 23, kFloor, d_table, nullptr, 0}, nan_output, chunk, summary);
  const std::string extra =
      "table_model=lg2_exponent_split\ntable_model_mismatches=" + std::to_string(mismatches) + "\n";
  emit_table(kLg2, 23, "lg2_exponent_split", d_table, o, dev, nan_output, extra, summary);
  FB_CUDA_CHECK(cudaFree(d_table));
}

std::string hex32(std::uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", v);
  return b;
}
std::string dec32(std::uint32_t v) {  // the float, %.9g (round-trips)
  char b[32];
  float f;
  std::memcpy(&f, &v, 4);
  std::snprintf(b, sizeof b, "%.9g", static_cast<double>(f));
  return b;
}

// One ex2 fixed-point hypothesis pass over all 2^32 inputs: fills d_table (2^N values, the
// 32-bit table verify_table_model and emit_table read), `ev` (conflicts per input binade and
// examples) and returns the number of conflicts.
unsigned long long run_ex2_hypothesis(int nbits, int rounding, std::uint64_t chunk, std::uint32_t* d_table,
                                      Ex2Conflicts& ev) {
  const std::uint64_t entries = 1ull << nbits;
  unsigned long long* d_wide;
  unsigned long long* d_conflicts;
  Ex2Conflicts* d_ev;
  FB_CUDA_CHECK(cudaMalloc(&d_wide, entries * 8));
  FB_CUDA_CHECK(cudaMalloc(&d_conflicts, sizeof(unsigned long long)));
  FB_CUDA_CHECK(cudaMalloc(&d_ev, sizeof(Ex2Conflicts)));
  FB_CUDA_CHECK(cudaMemset(d_wide, 0xff, entries * 8));
  FB_CUDA_CHECK(cudaMemset(d_conflicts, 0, sizeof(unsigned long long)));
  FB_CUDA_CHECK(cudaMemset(d_ev, 0, sizeof(Ex2Conflicts)));
  ++g_passes;
  for (std::uint64_t base = 0; base < (1ull << 32); base += chunk) {
    ex2_hypothesis_kernel<<<4096, 256>>>(nbits, rounding, base, chunk, d_wide, d_conflicts, d_ev);
    FB_CUDA_CHECK(cudaGetLastError());
  }
  narrow_table_kernel<<<1024, 256>>>(d_wide, d_table, static_cast<std::uint32_t>(entries));
  FB_CUDA_CHECK(cudaGetLastError());
  unsigned long long conflicts = 0;
  FB_CUDA_CHECK(cudaMemcpy(&conflicts, d_conflicts, sizeof conflicts, cudaMemcpyDeviceToHost));
  FB_CUDA_CHECK(cudaMemcpy(&ev, d_ev, sizeof(Ex2Conflicts), cudaMemcpyDeviceToHost));
  FB_CUDA_CHECK(cudaFree(d_wide));
  FB_CUDA_CHECK(cudaFree(d_conflicts));
  FB_CUDA_CHECK(cudaFree(d_ev));
  return conflicts;
}

// The ex2 hypotheses whose conflicts the raw evidence keeps (ex2_conflicts.txt).
struct ConflictCapture {
  ConflictCapture(int n, int r) : nbits(n), rounding(r) {}
  int nbits, rounding;
  bool captured = false;
  unsigned long long conflicts = 0;
  std::unique_ptr<Ex2Conflicts> ev;
};

// ex2_conflicts.txt: per captured hypothesis its conflict count, the conflicts per input
// binade and the examples sorted by conflicting input (gpu/README.md "SFU raw evidence").
void write_ex2_conflicts(const std::vector<ConflictCapture>& caps, const Options& o, const std::string& dev,
                         std::ostringstream& summary) {
  std::ofstream f(o.out_dir + "/ex2_conflicts.txt");
  f << "# ex2_conflicts.txt: fb-sfu-probe, ex2.approx.ftz.f32 fixed-point hypothesis conflicts (gpu/README.md)\n";
  std::istringstream devs(dev);
  for (std::string line; std::getline(devs, line);) f << "# " << line << "\n";
  f << "# per hypothesis: a 'hypothesis' line, 'binade' lines (sign exponent_field conflicts; the input\n"
       "# binade of the conflicting input), then up to "
    << kConflictExampleCap << " examples (at most " << kConflictExamplesPerBinade
    << " per input binade), sorted by x:\n"
       "#   key first_x first_y x y  first_x first_y x y (hex bits, then %.9g)\n"
       "# first_x: the input whose output was recorded first at the key; x: an input that disagreed.\n"
       "# key and value: x * 2^N rounded to the integer xf (argument rounding), key = xf mod 2^N,\n"
       "# k = floor(xf / 2^N), value = y's bits - k * 2^23 (gpu/sfu_table_model.hpp).\n";
  summary << "  raw evidence: wrote ex2_conflicts.txt:";
  for (const ConflictCapture& c : caps) {
    const unsigned int n = std::min(c.ev->examples, kConflictExampleCap);
    f << "hypothesis N=" << c.nbits << " rounding=" << kArgRoundingNames[c.rounding] << " conflicts=" << c.conflicts
      << " examples=" << n << "\n";
    for (int b = 0; b < kInputBinades; ++b) {
      if (c.ev->per_binade[b]) f << "binade " << (b >> 8) << " " << (b & 0xff) << " " << c.ev->per_binade[b] << "\n";
    }
    std::vector<unsigned int> order(n);
    for (unsigned int i = 0; i < n; ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](unsigned int a, unsigned int b) { return c.ev->example[a][3] < c.ev->example[b][3]; });
    for (unsigned int i : order) {
      const std::uint32_t* e = c.ev->example[i];
      char line[160];
      std::snprintf(line, sizeof line, "0x%06x 0x%08x 0x%08x 0x%08x 0x%08x", e[0], e[1], e[2], e[3], e[4]);
      f << line << " " << dec32(e[1]) << " " << dec32(e[2]) << " " << dec32(e[3]) << " " << dec32(e[4]) << "\n";
    }
    summary << " N=" << c.nbits << " " << kArgRoundingNames[c.rounding] << ": " << c.conflicts << " conflicts, " << n
            << " examples;";
  }
  summary << "\n";
}

// FBSFURAW1 (gpu/README.md): ex2_raw_binades.bin or lg2_raw_binades.bin.
void write_raw_binades(int fn, const std::vector<std::uint32_t>& binades, const Options& o, const std::string& dev,
                       std::ostringstream& summary) {
  const std::string file = std::string(kFnNames[fn]) + "_raw_binades.bin";
  RawBinades b{};
  b.count = static_cast<int>(binades.size());
  for (int i = 0; i < b.count; ++i) b.start[i] = binades[i];
  const std::uint64_t n = static_cast<std::uint64_t>(b.count) << 23;
  const std::uint32_t escape_cap = 1u << 20;
  signed char* d_delta;
  unsigned int* d_counts;
  std::uint32_t* d_escapes;
  FB_CUDA_CHECK(cudaMalloc(&d_delta, n));
  FB_CUDA_CHECK(cudaMalloc(&d_counts, 2 * sizeof(unsigned int)));
  FB_CUDA_CHECK(cudaMalloc(&d_escapes, 2ull * escape_cap * 4));
  FB_CUDA_CHECK(cudaMemset(d_counts, 0, 2 * sizeof(unsigned int)));
  raw_binades_kernel<<<4096, 256>>>(fn, b, d_delta, d_counts, d_escapes, escape_cap);
  FB_CUDA_CHECK(cudaGetLastError());
  std::vector<signed char> delta(n);
  unsigned int counts[2];
  FB_CUDA_CHECK(cudaMemcpy(delta.data(), d_delta, n, cudaMemcpyDeviceToHost));
  FB_CUDA_CHECK(cudaMemcpy(counts, d_counts, sizeof counts, cudaMemcpyDeviceToHost));
  std::vector<std::uint32_t> escapes(2ull * std::min(counts[0], escape_cap));
  FB_CUDA_CHECK(cudaMemcpy(escapes.data(), d_escapes, escapes.size() * 4, cudaMemcpyDeviceToHost));
  FB_CUDA_CHECK(cudaFree(d_delta));
  FB_CUDA_CHECK(cudaFree(d_counts));
  FB_CUDA_CHECK(cudaFree(d_escapes));
  if (counts[0] > escape_cap) {
    summary << "  raw evidence: NOT writing " << file << ": " << counts[0] << " escapes (more than " << escape_cap
            << ")\n";
    return;
  }
  std::vector<std::pair<std::uint32_t, std::uint32_t>> esc(counts[0]);
  for (unsigned int i = 0; i < counts[0]; ++i) esc[i] = {escapes[2 * i], escapes[2 * i + 1]};
  std::sort(esc.begin(), esc.end());
  long long hist[5] = {};  // |delta| 0, 1, 2, 3..127, escaped
  for (signed char d : delta) ++hist[d == kRawEscape ? 4 : std::min(std::abs(static_cast<int>(d)), 3)];
  std::ofstream f(o.out_dir + "/" + file, std::ios::binary);
  f << "FBSFURAW1\nfunction=" << kFnNames[fn] << "\nptx=" << kFnPtx[fn] << "\nbinades=";
  for (int i = 0; i < b.count; ++i) f << (i ? "," : "") << hex32(b.start[i]);
  f << "\ninputs_per_binade=8388608\nreference=round_reference(" << (fn == kEx2 ? "exp2" : "log2")
    << "(double(x))) RNE, no flushing needed in these binades\n"
       "delta=int8\nescape=-128\nescape_count="
    << counts[0] << "\nescape_uncertain_reference=" << counts[1] << "\n"
    << dev << "end\n";
  f.write(reinterpret_cast<const char*>(delta.data()), static_cast<std::streamsize>(delta.size()));
  const std::uint32_t n_escapes = counts[0];
  f.write(reinterpret_cast<const char*>(&n_escapes), 4);  // the device and file are little-endian
  for (const auto& e : esc) {
    f.write(reinterpret_cast<const char*>(&e.first), 4);
    f.write(reinterpret_cast<const char*>(&e.second), 4);
  }
  summary << "  raw evidence: wrote " << file << ": " << b.count << " binades (";
  for (int i = 0; i < b.count; ++i) summary << (i ? "," : "") << dec32(b.start[i]);
  summary << ") of 2^23 inputs, |delta| 0:" << hist[0] << " 1:" << hist[1] << " 2:" << hist[2] << " 3..127:" << hist[3]
          << " escaped:" << hist[4] << " (" << counts[1] << " for an uncertain reference)\n";
}

// ex2.approx.f32 vs ex2.approx.ftz.f32 per region and the x < -126 hypotheses (summary only).
void ex2_nf_compare(std::uint64_t chunk, std::ostringstream& summary) {
  NfCompare* r;
  FB_CUDA_CHECK(cudaMallocManaged(&r, sizeof(NfCompare)));
  std::memset(r, 0, sizeof(NfCompare));
  ++g_passes;
  for (std::uint64_t base = 0; base < (1ull << 32); base += chunk) {
    ex2_nf_compare_kernel<<<4096, 256>>>(base, chunk, r);
    FB_CUDA_CHECK(cudaGetLastError());
  }
  FB_CUDA_CHECK(cudaDeviceSynchronize());
  summary << "  ex2.approx.f32 vs ex2.approx.ftz.f32 on all 2^32 inputs (differ of inputs, per region):";
  for (int g = 0; g < kNfRegionCount; ++g) {
    summary << (g ? ", " : " ") << kNfRegionNames[g] << ": " << r->differ[g] << " of " << r->inputs[g];
  }
  summary << "\n";
  for (int g = 0; g < kNfRegionCount; ++g) {
    for (unsigned int e = 0; e < std::min(r->region_examples[g], kNfRegionExamples); ++e) {
      const std::uint32_t* x = r->region_example[g][e];
      summary << "    [" << kNfRegionNames[g] << "] x=" << hex32(x[0]) << " (" << dec32(x[0])
              << ") ex2.approx.f32=" << hex32(x[1]) << " ex2.approx.ftz.f32=" << hex32(x[2]) << "\n";
    }
  }
  for (int h = 0; h < kNfHypCount; ++h) {
    summary << "  hypothesis for x < -126 (" << r->hyp_tested
            << " inputs, -inf included): ex2.approx.f32(x) = " << kNfHypNames[h] << ": "
            << (r->hyp_mismatches[h] == 0 ? "HOLDS" : "fails") << " (" << r->hyp_mismatches[h]
            << " inputs differ, max |ulp difference| " << r->hyp_max_ulps[h] << ")\n";
    for (unsigned int e = 0; e < std::min(r->hyp_examples[h], kVerifyExamples); ++e) {
      const std::uint32_t* x = r->hyp_example[h][e];
      summary << "    x=" << hex32(x[0]) << " (" << dec32(x[0]) << ") ex2.approx.f32=" << hex32(x[1])
              << " ex2.approx.ftz.f32=" << hex32(x[2]) << " prediction=" << hex32(x[3]) << "\n";
    }
  }
  FB_CUDA_CHECK(cudaFree(r));
}

}  // namespace
}  // namespace fb::gpu
