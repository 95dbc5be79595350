// gpu/mma_probe.cu: fb-mma-probe, measures tensor-core dot products on the GPU.
//
// Contract: runs each instruction form below on batches of inputs (raw random bit
// patterns including NaN, inf and subnormals, plus designed batches that separate the
// accumulation hypotheses of docs/DESIGN.md §4), and writes every output element as one
// probe case (D = C + sum_i a_i b_i, its inputs and the hardware's D) to a probe file
// (traces/probe_file.hpp, gpu/README.md), which `flashbits probe-check` replays on a CPU.
// Forms: mma.sync m16n8k16 bf16/fp16 -> f32, fp16 -> f16, mma.sync m16n8k8 tf32 -> f32
// (sm_80+), wgmma m64n8k16 bf16/fp16 and m64n8k32 e4m3/e5m2 -> f32 (sm_90a only).
// Usage: fb-mma-probe --out FILE [--tiles N] [--seed S] [--forms all|mma|wgmma] [--batches NAME[,NAME...]]
//        [--dry-run: inputs only, no GPU, D = 0xffffffff, source "dry-run:no-gpu"; for checking the generator
//        and file]
// --batches: only the named batches (an unknown name: exit 2); without it, every batch but
// zero_floor, which runs only when named (bf16 and tf32 into fp32 only; 17 * ceil(N/17) tiles
// per form, mma and wgmma alike; gpu/zero_floor_device.sh).
// Per form and batch: N mma tiles (16x8 outputs) or (N+3)/4 wgmma tiles (64x8); the
// `chained` batch records two cases per output. Batch indices are stable: new batches
// are appended (signed_zeros follows chained, then zero_exponent, inf_overflow, zero_floor). The
// file is streamed form by form (a section's cases never sit in memory at once), written
// to FILE.partial and renamed at the end, so an interrupted run leaves no truncated FILE.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "formats/format.hpp"
#include "gpu/device_common.cuh"
#include "traces/probe_file.hpp"

// The forms and kernels, then the host side's input design and launches: one translation
// unit (no -rdc).
#include "gpu/mma_probe_kernels.cuh"
#include "gpu/mma_probe_inputs.cuh"

namespace fb::gpu {
namespace {

// The emu model that should replay a form on this device (docs/DESIGN.md §4 names).
std::string model_for(const FormInfo& f, int major, int minor) {
  const std::string suffix = f.cd == formats::fp16 ? "-f16acc" : "";
  if (major == 9) return (f.wgmma ? "sm90-wgmma" : "sm90-mma") + suffix;
  if (major == 8 && minor == 9) return "sm89" + suffix;
  if (major == 8) return "sm80" + suffix;
  return "sm" + std::to_string(major) + std::to_string(minor) + suffix;
}

// Writes a probe file (gpu/README.md, the layout write_probe_file writes) section by
// section, so that a section's cases need not be held in memory: to PATH.partial, renamed
// to PATH by finish(). Throws ProbeFileError on an I/O error or a case count that differs
// from the header's.
class ProbeFileStream {
 public:
  ProbeFileStream(std::string path, std::uint32_t sections) : path_(std::move(path)), partial_(path_ + ".partial") {
    f_ = std::fopen(partial_.c_str(), "wb");
    if (!f_) throw ProbeFileError(partial_ + ": cannot open for writing");
    buf_.reserve(kBufferWords);
    write_bytes("FBPROBE1", 8);
    put(sections);
    flush();
  }
  ~ProbeFileStream() {
    if (f_) {
      std::fclose(f_);
      std::remove(partial_.c_str());
    }
  }
  ProbeFileStream(const ProbeFileStream&) = delete;
  ProbeFileStream& operator=(const ProbeFileStream&) = delete;

  void begin_section(const ProbeHeader& h, std::uint64_t cases) {
    end_section();
    const std::string text = header_text(h) + "cases=" + std::to_string(cases) + "\n";
    put(static_cast<std::uint32_t>(text.size()));
    flush();
    write_bytes(text.data(), text.size());
    k_ = h.k;
    expected_ = cases;
    written_ = 0;
  }
  void add_case(std::uint32_t batch, std::uint32_t c, const std::uint32_t* a, const std::uint32_t* b, std::uint32_t d) {
    put(batch);
    put(c);
    for (int i = 0; i < k_; ++i) put(a[i]);
    for (int i = 0; i < k_; ++i) put(b[i]);
    put(d);
    ++written_;
  }
  void finish() {
    end_section();
    flush();
    if (std::fclose(f_) != 0) {
      f_ = nullptr;
      throw ProbeFileError(partial_ + ": write failed");
    }
    f_ = nullptr;
    if (std::rename(partial_.c_str(), path_.c_str()) != 0) throw ProbeFileError(path_ + ": cannot rename " + partial_);
  }

 private:
  static constexpr std::size_t kBufferWords = std::size_t{1} << 20;
  void end_section() {
    if (written_ != expected_) {
      throw ProbeFileError(partial_ + ": section has " + std::to_string(written_) + " cases, header says " +
                           std::to_string(expected_));
    }
  }
  void put(std::uint32_t v) {
    buf_.push_back(v);
    if (buf_.size() == kBufferWords) flush();
  }
  void flush() {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    for (std::uint32_t& w : buf_) w = __builtin_bswap32(w);  // the file is little-endian
#endif
    write_bytes(buf_.data(), buf_.size() * 4);
    buf_.clear();
  }
  void write_bytes(const void* p, std::size_t n) {
    if (n != 0 && std::fwrite(p, 1, n, f_) != n) throw ProbeFileError(partial_ + ": write failed");
  }
  std::string path_, partial_;
  std::FILE* f_ = nullptr;
  std::vector<std::uint32_t> buf_;
  int k_ = 0;
  std::uint64_t expected_ = 0, written_ = 0;
};

// The tiles of one form's section, batch after batch (in Batch order): tiles_per_batch per
// selected batch that applies to the form, zero_floor_tiles for zero_floor.
std::vector<int> section_tiles(const FormInfo& f, const std::vector<bool>& selected, int tiles_per_batch,
                               int zero_floor_tiles) {
  std::vector<int> batch_of_tile;
  for (int b = 0; b < kBatchCount; ++b) {
    if (!selected[b] || !batch_applies(f, b)) continue;
    batch_of_tile.insert(batch_of_tile.end(), b == kZeroFloor ? zero_floor_tiles : tiles_per_batch, b);
  }
  return batch_of_tile;
}

// Cases of one form's section: every output of every tile, the chained tiles' twice.
std::uint64_t section_cases(const FormInfo& f, const std::vector<int>& batch_of_tile) {
  std::uint64_t tiles = 0;
  for (int b : batch_of_tile) tiles += b == kChained ? 2 : 1;
  return tiles * static_cast<std::uint64_t>(f.m) * kN;
}

// Generates, runs (unless dry_run) and streams one form's section. dry_run: no device
// work; D (and a chained tile's D2) is left as 0xffffffff (a NaN pattern in every
// container) so the file exercises the writer and the checker but never looks like a
// measurement; a chained pair's second case then has C = D1 = 0xffffffff too.
// Tiles are laid out batch after batch (in Batch order); cases are written tile by
// tile, row by row, 8 columns each; a chained tile writes, per output, (C, a, b, D1) and
// then (D1, a, b, D2).
// batch_of_tile (section_tiles): the batch of every tile; the chained tiles are contiguous.
// The header names the batches up to the last one run (a default run: the 15 before
// zero_floor, as before it existed), so batch indices are the same in every file.
void probe_form(ProbeFileStream& out, int form, const std::vector<int>& batch_of_tile, std::uint64_t seed,
                const cudaDeviceProp& prop, const std::map<std::string, std::string>& device_fields, bool dry_run) {
  const FormInfo& f = kForms[form];
  const int F = fraction_bits_for(f, prop.major);
  Designer designer(f, seed * 1315423911u + static_cast<std::uint64_t>(form), F);
  const int tiles = static_cast<int>(batch_of_tile.size());
  const auto first_chained = std::find(batch_of_tile.begin(), batch_of_tile.end(), static_cast<int>(kChained));
  const int chained_from = static_cast<int>(first_chained - batch_of_tile.begin()),
            chained_to = chained_from +
                         static_cast<int>(std::count(first_chained, batch_of_tile.end(), static_cast<int>(kChained)));
  const int chained_tiles = std::max(chained_to - chained_from, 1);
  const std::size_t a_n = static_cast<std::size_t>(f.m) * f.k, b_n = static_cast<std::size_t>(kN) * f.k,
                    c_n = static_cast<std::size_t>(f.m) * kN;
  const std::size_t all = static_cast<std::size_t>(tiles), chained = static_cast<std::size_t>(chained_tiles);
  std::vector<std::uint32_t> A(a_n * all), Bt(b_n * all), C(c_n * all), D(c_n * all, 0xffffffffu),
      D2(c_n * chained, 0xffffffffu);
  for (int t = 0; t < tiles; ++t) {
    designer.fill_tile(static_cast<Batch>(batch_of_tile[t]), &A[a_n * t], &Bt[b_n * t], &C[c_n * t]);
  }
  if (!dry_run) {
    std::uint32_t *dA, *dB, *dC, *dD, *dD2;
    FB_CUDA_CHECK(cudaMalloc(&dA, A.size() * 4));
    FB_CUDA_CHECK(cudaMalloc(&dB, Bt.size() * 4));
    FB_CUDA_CHECK(cudaMalloc(&dC, C.size() * 4));
    FB_CUDA_CHECK(cudaMalloc(&dD, D.size() * 4));
    FB_CUDA_CHECK(cudaMalloc(&dD2, D2.size() * 4));
    FB_CUDA_CHECK(cudaMemcpy(dA, A.data(), A.size() * 4, cudaMemcpyHostToDevice));
    FB_CUDA_CHECK(cudaMemcpy(dB, Bt.data(), Bt.size() * 4, cudaMemcpyHostToDevice));
    FB_CUDA_CHECK(cudaMemcpy(dC, C.data(), C.size() * 4, cudaMemcpyHostToDevice));
    launch_form(form, tiles, chained_from, chained_to, a_n, b_n, c_n, dA, dB, dC, dD, dD2);
    FB_CUDA_CHECK(cudaMemcpy(D.data(), dD, D.size() * 4, cudaMemcpyDeviceToHost));
    FB_CUDA_CHECK(cudaMemcpy(D2.data(), dD2, D2.size() * 4, cudaMemcpyDeviceToHost));
    for (std::uint32_t* p : {dA, dB, dC, dD, dD2}) FB_CUDA_CHECK(cudaFree(p));
  }

  ProbeHeader h;
  h.form = f.ptx;
  h.k = f.k;
  h.input = f.input;
  h.c_format = f.cd;
  h.d_format = f.cd;
  const int last_batch =
      tiles == 0 ? kDefaultBatchCount - 1 : *std::max_element(batch_of_tile.begin(), batch_of_tile.end());
  h.batches.assign(kBatchNames, kBatchNames + std::max(kDefaultBatchCount, last_batch + 1));
  h.models = {model_for(f, prop.major, prop.minor)};
  h.extra = device_fields;
  h.extra["tile"] = "m" + std::to_string(f.m) + "n8k" + std::to_string(f.k);
  h.extra["seed"] = std::to_string(seed);
  h.extra["f_boundary_f"] = std::to_string(F);
  out.begin_section(h, section_cases(f, batch_of_tile));
  for (int t = 0; t < tiles; ++t) {
    const auto batch = static_cast<std::uint32_t>(batch_of_tile[t]);
    for (int r = 0; r < f.m; ++r) {
      const std::uint32_t* a = &A[a_n * t + static_cast<std::size_t>(r) * f.k];
      for (int n = 0; n < kN; ++n) {
        const std::size_t at = static_cast<std::size_t>(r) * kN + n, ci = c_n * t + at;
        const std::uint32_t* b = &Bt[b_n * t + static_cast<std::size_t>(n) * f.k];
        out.add_case(batch, C[ci], a, b, D[ci]);
        if (t >= chained_from && t < chained_to) out.add_case(batch, D[ci], a, b, D2[c_n * (t - chained_from) + at]);
      }
    }
  }
}

int run(int argc, char** argv) {
  std::string out;
  int tiles = 4;
  std::uint64_t seed = 1;
  bool dry_run = false;
  std::string only = "all";    // all | mma | wgmma: a device session runs mma.sync and wgmma as
                               // separate processes, so a wgmma fault cannot lose the mma.sync file
  std::string batches_arg;     // --batches NAME[,NAME...]
  bool batches_given = false;  // without --batches: the default batches
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--dry-run")
      dry_run = true;
    else if (arg == "--forms" && i + 1 < argc)
      only = argv[++i];
    else if (arg == "--batches" && i + 1 < argc)
      batches_arg = argv[++i], batches_given = true;
    else if (arg == "--out" && i + 1 < argc)
      out = argv[++i];
    else if (arg == "--tiles" && i + 1 < argc)
      tiles = std::atoi(argv[++i]);
    else if (arg == "--seed" && i + 1 < argc)
      seed = std::strtoull(argv[++i], nullptr, 10);
    else {
      std::fprintf(stderr,
                   "usage: fb-mma-probe --out FILE [--tiles N per batch, default 4] [--seed S] [--forms all|mma|wgmma] "
                   "[--batches NAME[,NAME...]] [--dry-run]\n");
      return 2;
    }
  }
  if (only != "all" && only != "mma" && only != "wgmma") {
    std::fprintf(stderr, "error: --forms must be all, mma or wgmma, not '%s'\n", only.c_str());
    return 2;
  }
  // --batches: the named batches only (zero_floor runs only when named); strict names.
  std::vector<bool> selected(kBatchCount, false);
  if (!batches_given) {
    for (int b = 0; b < kDefaultBatchCount; ++b) selected[b] = true;
  } else {
    std::size_t from = 0;
    while (true) {
      const std::size_t comma = batches_arg.find(',', from);
      const std::string name = batches_arg.substr(from, comma == std::string::npos ? std::string::npos : comma - from);
      const auto it = std::find_if(kBatchNames, kBatchNames + kBatchCount, [&](const char* n) { return name == n; });
      if (it == kBatchNames + kBatchCount) {
        std::string known;
        for (int b = 0; b < kBatchCount; ++b) known += std::string(b ? "," : "") + kBatchNames[b];
        std::fprintf(stderr, "error: --batches: unknown batch '%s' (known: %s)\n", name.c_str(), known.c_str());
        return 2;
      }
      selected[static_cast<std::size_t>(it - kBatchNames)] = true;
      if (comma == std::string::npos) break;
      from = comma + 1;
    }
  }
  // 100000 tiles: 150 million cases and about 40 GB of file per form; far beyond any use.
  if (out.empty() || tiles < 1 || tiles > 100000) {
    std::fprintf(stderr, "error: --out FILE is required and --tiles must be in 1..100000\n");
    return 2;
  }
  int device = 0, driver = 0, runtime = 0;
  cudaDeviceProp prop{};
  if (dry_run) {  // pretend sm_90 so every form is generated; nothing is measured
    std::snprintf(prop.name, sizeof prop.name, "dry-run (no GPU, D not measured)");
    prop.major = 9;
    prop.minor = 0;
  } else {
    FB_CUDA_CHECK(cudaGetDevice(&device));
    FB_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    FB_CUDA_CHECK(cudaDriverGetVersion(&driver));
    FB_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  }
  const std::map<std::string, std::string> fields = {
      {"source", dry_run ? std::string("dry-run:no-gpu") : std::string("cuda:") + prop.name},
      {"device", prop.name},
      {"compute_capability", std::to_string(prop.major) + "." + std::to_string(prop.minor)},
      {"driver", std::to_string(driver)},
      {"cuda_runtime", std::to_string(runtime)},
      {"program", "fb-mma-probe"}};
  std::vector<int> forms;
  for (int form = 0; form < kFormCount; ++form) {
    const FormInfo& f = kForms[form];
    if ((only == "mma" && f.wgmma) || (only == "wgmma" && !f.wgmma)) continue;
    bool any = false;
    for (int b = 0; b < kBatchCount; ++b) any = any || (selected[b] && batch_applies(f, b));
    if (!any) {
      std::printf("skip %s: none of the selected batches applies to it\n", f.ptx);
      continue;
    }
    if (f.wgmma && prop.major != 9) {
      std::printf("skip %s: wgmma needs sm_90a, device is sm_%d%d\n", f.ptx, prop.major, prop.minor);
      continue;
    }
    forms.push_back(form);
  }
  ProbeFileStream file(out, static_cast<std::uint32_t>(forms.size()));
  for (int form : forms) {
    const FormInfo& f = kForms[form];
    const auto start = std::chrono::steady_clock::now();
    // wgmma tiles hold 4x the outputs of an mma tile; keep the case counts comparable.
    // zero_floor: whole sweeps of its 17 exponents g, in mma and wgmma tiles alike.
    const int per_batch = f.wgmma ? (tiles + 3) / 4 : tiles;
    const int zero_floor_tiles = (tiles + kZeroFloorGs - 1) / kZeroFloorGs * kZeroFloorGs;
    const std::vector<int> batch_of_tile = section_tiles(f, selected, per_batch, zero_floor_tiles);
    probe_form(file, form, batch_of_tile, seed, prop, fields, dry_run);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%s: %llu cases (%.2f s)\n", f.ptx, static_cast<unsigned long long>(section_cases(f, batch_of_tile)),
                seconds);
    std::fflush(stdout);
  }
  file.finish();
  std::printf("wrote %s (%s)\n", out.c_str(), prop.name);
  return 0;
}

}  // namespace
}  // namespace fb::gpu

int main(int argc, char** argv) {
  try {
    return fb::gpu::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
