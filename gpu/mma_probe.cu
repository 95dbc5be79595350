// gpu/mma_probe.cu: fb-mma-probe, measures tensor-core dot products on the GPU.
//
// Contract: runs each instruction form below on batches of inputs (raw random bit
// patterns including NaN, inf and subnormals, plus designed batches that separate the
// accumulation hypotheses of docs/DESIGN.md §4), and writes every output element as one
// probe case (D = C + sum_i a_i b_i, its inputs and the hardware's D) to a probe file
// (gpu/probe_file.hpp, gpu/README.md), which `flashbits probe-check` replays on a CPU.
// Forms: mma.sync m16n8k16 bf16/fp16 -> f32, fp16 -> f16, mma.sync m16n8k8 tf32 -> f32
// (sm_80+), wgmma m64n8k16 bf16/fp16 and m64n8k32 e4m3/e5m2 -> f32 (sm_90a only).
// Usage: fb-mma-probe --out FILE [--tiles N] [--seed S] [--forms all|mma|wgmma] [--dry-run: inputs only, no GPU,
//        D = 0xffffffff, source "dry-run:no-gpu"; for checking the generator and file]
// Per form and batch: N mma tiles (16x8 outputs) or (N+3)/4 wgmma tiles (64x8); the
// `chained` batch records two cases per output. Batch indices are stable: new batches
// are appended (signed_zeros follows chained, then zero_exponent and inf_overflow). The
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
#include "gpu/probe_file.hpp"

namespace fb::gpu {
namespace {

enum Form : int {
  kMmaBf16F32,
  kMmaF16F32,
  kMmaF16F16,
  kMmaTf32F32,
  kWgmmaBf16,
  kWgmmaF16,
  kWgmmaE4m3,
  kWgmmaE5m2,
  kFormCount
};

struct FormInfo {
  const char* ptx;
  int m, k;
  Format input, cd;
  bool wgmma;
};
const FormInfo kForms[kFormCount] = {
    {"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", 16, 16, formats::bf16, formats::fp32, false},
    {"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", 16, 16, formats::fp16, formats::fp32, false},
    {"mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16", 16, 16, formats::fp16, formats::fp16, false},
    {"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", 16, 8, formats::tf32, formats::fp32, false},
    {"wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16", 64, 16, formats::bf16, formats::fp32, true},
    {"wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16", 64, 16, formats::fp16, formats::fp32, true},
    {"wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3", 64, 32, formats::e4m3, formats::fp32, true},
    {"wgmma.mma_async.sync.aligned.m64n8k32.f32.e5m2.e5m2", 64, 32, formats::e5m2, formats::fp32, true},
};
constexpr int kN = 8;  // every form probes an n8 tile

// ---- device side ----------------------------------------------------------------------
// Tiles are stored as element arrays of container bits: A[m][k], Bt[n][k], C[m][n], D[m][n].
// kChain (the `chained` batch): D2[m][n] = mma(A, B, D) as a kernel's K loop does it.
__device__ __forceinline__ std::uint32_t pack2(std::uint32_t lo, std::uint32_t hi) {
  return (lo & 0xffffu) | (hi << 16);
}

template <int F, bool kChain>
__global__ void mma_kernel(const std::uint32_t* A, const std::uint32_t* Bt, const std::uint32_t* C, std::uint32_t* D,
                           std::uint32_t* D2) {
  constexpr int M = 16, K = F == kMmaTf32F32 ? 8 : 16;
  const int tile = blockIdx.x, lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  A += tile * M * K;
  Bt += tile * kN * K;
  C += tile * M * kN;
  D += tile * M * kN;
  if constexpr (kChain) D2 += tile * M * kN;
  auto a_at = [&](int r, int k) { return A[r * K + k]; };
  auto b_at = [&](int k, int n) { return Bt[n * K + k]; };
  std::uint32_t a[4], b[2];
  if constexpr (F == kMmaTf32F32) {
    a[0] = a_at(g, t);
    a[1] = a_at(g + 8, t);
    a[2] = a_at(g, t + 4);
    a[3] = a_at(g + 8, t + 4);
    b[0] = b_at(t, g);
    b[1] = b_at(t + 4, g);
  } else {
    a[0] = pack2(a_at(g, 2 * t), a_at(g, 2 * t + 1));
    a[1] = pack2(a_at(g + 8, 2 * t), a_at(g + 8, 2 * t + 1));
    a[2] = pack2(a_at(g, 2 * t + 8), a_at(g, 2 * t + 9));
    a[3] = pack2(a_at(g + 8, 2 * t + 8), a_at(g + 8, 2 * t + 9));
    b[0] = pack2(b_at(2 * t, g), b_at(2 * t + 1, g));
    b[1] = pack2(b_at(2 * t + 8, g), b_at(2 * t + 9, g));
  }
  const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
  if constexpr (F == kMmaF16F16) {
    std::uint32_t c[2] = {pack2(C[g * kN + 2 * t], C[g * kN + 2 * t + 1]),
                          pack2(C[(g + 8) * kN + 2 * t], C[(g + 8) * kN + 2 * t + 1])};
    std::uint32_t d[2];
    mma_m16n8k16_f16_f16(d, a, b, c);
    for (int i = 0; i < 4; ++i) D[rows[i] * kN + cols[i]] = (d[i / 2] >> (16 * (i & 1))) & 0xffffu;
    if constexpr (kChain) {  // the f16x2 accumulator registers fed straight back as C
      std::uint32_t d2[2];
      mma_m16n8k16_f16_f16(d2, a, b, d);
      for (int i = 0; i < 4; ++i) D2[rows[i] * kN + cols[i]] = (d2[i / 2] >> (16 * (i & 1))) & 0xffffu;
    }
  } else {
    float c[4], d[4];
    for (int i = 0; i < 4; ++i) c[i] = __uint_as_float(C[rows[i] * kN + cols[i]]);
    if constexpr (F == kMmaBf16F32) mma_m16n8k16_bf16_f32(d, a, b, c);
    if constexpr (F == kMmaF16F32) mma_m16n8k16_f16_f32(d, a, b, c);
    if constexpr (F == kMmaTf32F32) mma_m16n8k8_tf32_f32(d, a, b, c);
    for (int i = 0; i < 4; ++i) D[rows[i] * kN + cols[i]] = __float_as_uint(d[i]);
    if constexpr (kChain) {  // the fp32 accumulator registers fed straight back as C
      float d2[4];
      if constexpr (F == kMmaBf16F32) mma_m16n8k16_bf16_f32(d2, a, b, d);
      if constexpr (F == kMmaF16F32) mma_m16n8k16_f16_f32(d2, a, b, d);
      if constexpr (F == kMmaTf32F32) mma_m16n8k8_tf32_f32(d2, a, b, d);
      for (int i = 0; i < 4; ++i) D2[rows[i] * kN + cols[i]] = __float_as_uint(d2[i]);
    }
  }
}

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
// kRepeat wgmma instructions of form F on the accumulator registers acc, issued in one asm
// statement (so they provably use the same registers), scale-d = 1 (D = A*B + D),
// imm-scale-a = imm-scale-b = 1, no transpose (K-major A and B). The caller fences before
// and commits/waits after; consecutive wgmmas of one shape on the same accumulator need no
// fence between them (PTX ISA, wgmma.fence).
template <int F, int kRepeat>
__device__ __forceinline__ void wgmma_issue(float (&acc)[4], std::uint64_t da, std::uint64_t db) {
  static_assert(kRepeat == 1 || kRepeat == 2);
#define FB_WGMMA_ONE(SHAPE, TYPE, TAIL) \
  "wgmma.mma_async.sync.aligned." SHAPE ".f32." TYPE "." TYPE " {%0,%1,%2,%3}, %4, %5, p, 1, 1" TAIL ";\n"
#define FB_WGMMA_RUN(INSTRUCTIONS)                                            \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n" INSTRUCTIONS "}\n" \
               : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])       \
               : "l"(da), "l"(db), "r"(1))
#define FB_WGMMA(SHAPE, TYPE, TAIL)                \
  if constexpr (kRepeat == 1)                      \
    FB_WGMMA_RUN(FB_WGMMA_ONE(SHAPE, TYPE, TAIL)); \
  else                                             \
    FB_WGMMA_RUN(FB_WGMMA_ONE(SHAPE, TYPE, TAIL) FB_WGMMA_ONE(SHAPE, TYPE, TAIL))
  if constexpr (F == kWgmmaBf16) {
    FB_WGMMA("m64n8k16", "bf16", ", 0, 0");
  }
  if constexpr (F == kWgmmaF16) {
    FB_WGMMA("m64n8k16", "f16", ", 0, 0");
  }
  if constexpr (F == kWgmmaE4m3) {
    FB_WGMMA("m64n8k32", "e4m3", "");
  }
  if constexpr (F == kWgmmaE5m2) {
    FB_WGMMA("m64n8k32", "e5m2", "");
  }
#undef FB_WGMMA
#undef FB_WGMMA_RUN
#undef FB_WGMMA_ONE
}
#endif

// wgmma reads A (64 x K) and B (K x 8) from shared memory in the no-swizzle K-major
// canonical layout: 8-row x 16-byte core matrices, each stored as 128 contiguous bytes.
// Core matrix (row group rg, K group kg) sits at byte (rg * 2 + kg) * 128, so the
// leading-dimension byte offset (next core matrix along K) is 128 and the
// stride-dimension byte offset (next 8-row group) is 256. Both tiles are 32 bytes of K.
// kChain: besides D = wgmma(A, B, C) (waited), D2 = two wgmmas on one accumulator starting
// from C, the second issued before any wait, as a kernel's K loop does. D1 of the chain
// cannot be read without a wait, so the recorded D1 is D, the first, separate wgmma on the
// same inputs; D2 differs from wgmma(A, B, D) when the chain does not round to fp32 between
// the two instructions.
template <int F, bool kChain>
__global__ void wgmma_kernel(const std::uint32_t* A, const std::uint32_t* Bt, const std::uint32_t* C, std::uint32_t* D,
                             std::uint32_t* D2) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int M = 64, K = (F == kWgmmaE4m3 || F == kWgmmaE5m2) ? 32 : 16, elem_bytes = 32 / K;
  constexpr int kCoreBytes = 128, kLbo = 128, kSbo = 256;
  auto kmajor_offset = [](int row, int k_byte) {
    return ((row / 8) * 2 + k_byte / 16) * kCoreBytes + (row % 8) * 16 + k_byte % 16;
  };
  auto smem_descriptor = [](const void* smem) {
    const auto addr = static_cast<std::uint32_t>(__cvta_generic_to_shared(smem));
    return (static_cast<std::uint64_t>((addr & 0x3ffffu) >> 4)) | (static_cast<std::uint64_t>(kLbo >> 4) << 16) |
           (static_cast<std::uint64_t>(kSbo >> 4) << 32);  // bits 62-63 = 0: no swizzle
  };
  __shared__ __align__(128) unsigned char a_smem[M * 32];
  __shared__ __align__(128) unsigned char b_smem[kN * 32];
  const int tile = blockIdx.x, tid = threadIdx.x;
  A += tile * M * K;
  Bt += tile * kN * K;
  C += tile * M * kN;
  D += tile * M * kN;
  if constexpr (kChain) D2 += tile * M * kN;
  for (int e = tid; e < M * K; e += blockDim.x) {
    const int r = e / K, k = e % K, at = kmajor_offset(r, k * elem_bytes);
    if (elem_bytes == 2)
      *reinterpret_cast<std::uint16_t*>(a_smem + at) = static_cast<std::uint16_t>(A[e]);
    else
      a_smem[at] = static_cast<unsigned char>(A[e]);
  }
  for (int e = tid; e < kN * K; e += blockDim.x) {
    const int n = e / K, k = e % K, at = kmajor_offset(n, k * elem_bytes);
    if (elem_bytes == 2)
      *reinterpret_cast<std::uint16_t*>(b_smem + at) = static_cast<std::uint16_t>(Bt[e]);
    else
      b_smem[at] = static_cast<unsigned char>(Bt[e]);
  }
  // Generic-proxy stores must be made visible to the async proxy that wgmma reads through.
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  const int warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
  const int rows[4] = {16 * warp + g, 16 * warp + g, 16 * warp + g + 8, 16 * warp + g + 8};
  const int cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
  const std::uint64_t da = smem_descriptor(a_smem), db = smem_descriptor(b_smem);
  float d[4];
  for (int i = 0; i < 4; ++i) d[i] = __uint_as_float(C[rows[i] * kN + cols[i]]);
  for (int i = 0; i < 4; ++i) asm volatile("" : "+f"(d[i])::"memory");
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  wgmma_issue<F, 1>(d, da, db);
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  for (int i = 0; i < 4; ++i) asm volatile("" : "+f"(d[i])::"memory");
  for (int i = 0; i < 4; ++i) D[rows[i] * kN + cols[i]] = __float_as_uint(d[i]);
  if constexpr (kChain) {
    float d2[4];
    for (int i = 0; i < 4; ++i) d2[i] = __uint_as_float(C[rows[i] * kN + cols[i]]);
    for (int i = 0; i < 4; ++i) asm volatile("" : "+f"(d2[i])::"memory");
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    wgmma_issue<F, 2>(d2, da, db);  // D2 = A*B + (A*B + C), no wait in between
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    for (int i = 0; i < 4; ++i) asm volatile("" : "+f"(d2[i])::"memory");
    for (int i = 0; i < 4; ++i) D2[rows[i] * kN + cols[i]] = __float_as_uint(d2[i]);
  }
#else
  (void)A, (void)Bt, (void)C, (void)D, (void)D2;
  __trap();  // wgmma exists only on sm_90a; the host never launches this elsewhere
#endif
}

}  // namespace
}  // namespace fb::gpu

// The host side of fb-mma-probe: input design and launches, one translation unit (no -rdc).
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

// Cases of one form's section: every output of every tile, the chained tiles' twice.
std::uint64_t section_cases(const FormInfo& f, int tiles_per_batch) {
  return static_cast<std::uint64_t>(tiles_per_batch) * static_cast<std::uint64_t>(f.m) * kN * (kBatchCount + 1);
}

// Generates, runs (unless dry_run) and streams one form's section. dry_run: no device
// work; D (and a chained tile's D2) is left as 0xffffffff (a NaN pattern in every
// container) so the file exercises the writer and the checker but never looks like a
// measurement; a chained pair's second case then has C = D1 = 0xffffffff too.
// Tiles are laid out batch after batch (in Batch order); cases are written tile by
// tile, row by row, 8 columns each; a chained tile writes, per output, (C, a, b, D1) and
// then (D1, a, b, D2).
void probe_form(ProbeFileStream& out, int form, int tiles_per_batch, std::uint64_t seed, const cudaDeviceProp& prop,
                const std::map<std::string, std::string>& device_fields, bool dry_run) {
  const FormInfo& f = kForms[form];
  const int F = fraction_bits_for(f, prop.major);
  Designer designer(f, seed * 1315423911u + static_cast<std::uint64_t>(form), F);
  const int tiles = tiles_per_batch * kBatchCount, chained_from = tiles_per_batch * kChained,
            chained_to = chained_from + tiles_per_batch;
  const std::size_t a_n = static_cast<std::size_t>(f.m) * f.k, b_n = static_cast<std::size_t>(kN) * f.k,
                    c_n = static_cast<std::size_t>(f.m) * kN;
  const std::size_t all = static_cast<std::size_t>(tiles), chained = static_cast<std::size_t>(tiles_per_batch);
  std::vector<std::uint32_t> A(a_n * all), Bt(b_n * all), C(c_n * all), D(c_n * all, 0xffffffffu),
      D2(c_n * chained, 0xffffffffu);
  for (int t = 0; t < tiles; ++t) {
    designer.fill_tile(static_cast<Batch>(t / tiles_per_batch), &A[a_n * t], &Bt[b_n * t], &C[c_n * t]);
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
  h.batches.assign(kBatchNames, kBatchNames + kBatchCount);
  h.models = {model_for(f, prop.major, prop.minor)};
  h.extra = device_fields;
  h.extra["tile"] = "m" + std::to_string(f.m) + "n8k" + std::to_string(f.k);
  h.extra["seed"] = std::to_string(seed);
  h.extra["f_boundary_f"] = std::to_string(F);
  out.begin_section(h, section_cases(f, tiles_per_batch));
  for (int t = 0; t < tiles; ++t) {
    const auto batch = static_cast<std::uint32_t>(t / tiles_per_batch);
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
  std::string only = "all";  // all | mma | wgmma: a device session runs mma.sync and wgmma as
                             // separate processes, so a wgmma fault cannot lose the mma.sync file
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--dry-run")
      dry_run = true;
    else if (arg == "--forms" && i + 1 < argc)
      only = argv[++i];
    else if (arg == "--out" && i + 1 < argc)
      out = argv[++i];
    else if (arg == "--tiles" && i + 1 < argc)
      tiles = std::atoi(argv[++i]);
    else if (arg == "--seed" && i + 1 < argc)
      seed = std::strtoull(argv[++i], nullptr, 10);
    else {
      std::fprintf(stderr,
                   "usage: fb-mma-probe --out FILE [--tiles N per batch, default 4] [--seed S] [--forms all|mma|wgmma] "
                   "[--dry-run]\n");
      return 2;
    }
  }
  if (only != "all" && only != "mma" && only != "wgmma") {
    std::fprintf(stderr, "error: --forms must be all, mma or wgmma, not '%s'\n", only.c_str());
    return 2;
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
    const int per_batch = f.wgmma ? (tiles + 3) / 4 : tiles;
    probe_form(file, form, per_batch, seed, prop, fields, dry_run);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%s: %llu cases (%.2f s)\n", f.ptx, static_cast<unsigned long long>(section_cases(f, per_batch)),
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
