// gpu/mma_probe.cu: fb-mma-probe, measures tensor-core dot products on the GPU.
//
// Contract: runs each instruction form below on batches of inputs (raw random bit
// patterns including NaN, inf and subnormals, plus designed batches that separate the
// accumulation hypotheses of DESIGN.md §4), and writes every output element as one
// probe case (D = C + sum_i a_i b_i, its inputs and the hardware's D) to a probe file
// (gpu/probe_file.hpp, gpu/README.md), which `flashbits probe-check` replays on a CPU.
// Forms: mma.sync m16n8k16 bf16/fp16 -> f32, fp16 -> f16, mma.sync m16n8k8 tf32 -> f32
// (sm_80+), wgmma m64n8k16 bf16/fp16 and m64n8k32 e4m3/e5m2 -> f32 (sm_90a only).
// Usage: fb-mma-probe --out FILE [--tiles N] [--seed S] [--dry-run: inputs only, no GPU,
//        D = 0xffffffff, source "dry-run:no-gpu"; for checking the generator and file]
#include <cuda_runtime.h>

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
__device__ __forceinline__ std::uint32_t pack2(std::uint32_t lo, std::uint32_t hi) { return (lo & 0xffffu) | (hi << 16); }

template <int F>
__global__ void mma_kernel(const std::uint32_t* A, const std::uint32_t* Bt, const std::uint32_t* C, std::uint32_t* D) {
  constexpr int M = 16, K = F == kMmaTf32F32 ? 8 : 16;
  const int tile = blockIdx.x, lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  A += tile * M * K;
  Bt += tile * kN * K;
  C += tile * M * kN;
  D += tile * M * kN;
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
  } else {
    float c[4], d[4];
    for (int i = 0; i < 4; ++i) c[i] = __uint_as_float(C[rows[i] * kN + cols[i]]);
    if constexpr (F == kMmaBf16F32) mma_m16n8k16_bf16_f32(d, a, b, c);
    if constexpr (F == kMmaF16F32) mma_m16n8k16_f16_f32(d, a, b, c);
    if constexpr (F == kMmaTf32F32) mma_m16n8k8_tf32_f32(d, a, b, c);
    for (int i = 0; i < 4; ++i) D[rows[i] * kN + cols[i]] = __float_as_uint(d[i]);
  }
}

// wgmma reads A (64 x K) and B (K x 8) from shared memory in the no-swizzle K-major
// canonical layout: 8-row x 16-byte core matrices, each stored as 128 contiguous bytes.
// Core matrix (row group rg, K group kg) sits at byte (rg * 2 + kg) * 128, so the
// leading-dimension byte offset (next core matrix along K) is 128 and the
// stride-dimension byte offset (next 8-row group) is 256. Both tiles are 32 bytes of K.
template <int F>
__global__ void wgmma_kernel(const std::uint32_t* A, const std::uint32_t* Bt, const std::uint32_t* C, std::uint32_t* D) {
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
  for (int e = tid; e < M * K; e += blockDim.x) {
    const int r = e / K, k = e % K, at = kmajor_offset(r, k * elem_bytes);
    if (elem_bytes == 2) *reinterpret_cast<std::uint16_t*>(a_smem + at) = static_cast<std::uint16_t>(A[e]);
    else a_smem[at] = static_cast<unsigned char>(A[e]);
  }
  for (int e = tid; e < kN * K; e += blockDim.x) {
    const int n = e / K, k = e % K, at = kmajor_offset(n, k * elem_bytes);
    if (elem_bytes == 2) *reinterpret_cast<std::uint16_t*>(b_smem + at) = static_cast<std::uint16_t>(Bt[e]);
    else b_smem[at] = static_cast<unsigned char>(Bt[e]);
  }
  // Generic-proxy stores must be made visible to the async proxy that wgmma reads through.
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  const int warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
  const int rows[4] = {16 * warp + g, 16 * warp + g, 16 * warp + g + 8, 16 * warp + g + 8};
  const int cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
  float d[4];
  for (int i = 0; i < 4; ++i) d[i] = __uint_as_float(C[rows[i] * kN + cols[i]]);
  const std::uint64_t da = smem_descriptor(a_smem), db = smem_descriptor(b_smem);
  for (int i = 0; i < 4; ++i) asm volatile("" : "+f"(d[i])::"memory");
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  // scale-d = 1 (D = A*B + D), imm-scale-a = imm-scale-b = 1, no transpose (K-major A and B).
#define FB_WGMMA_16BIT(TYPE)                                                                      \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"                                        \
               "wgmma.mma_async.sync.aligned.m64n8k16.f32." TYPE "." TYPE                         \
               " {%0,%1,%2,%3}, %4, %5, p, 1, 1, 0, 0;\n}\n"                                      \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                   \
               : "l"(da), "l"(db), "r"(1))
#define FB_WGMMA_8BIT(TYPE)                                                                       \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"                                        \
               "wgmma.mma_async.sync.aligned.m64n8k32.f32." TYPE "." TYPE                         \
               " {%0,%1,%2,%3}, %4, %5, p, 1, 1;\n}\n"                                            \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                   \
               : "l"(da), "l"(db), "r"(1))
  if constexpr (F == kWgmmaBf16) FB_WGMMA_16BIT("bf16");
  if constexpr (F == kWgmmaF16) FB_WGMMA_16BIT("f16");
  if constexpr (F == kWgmmaE4m3) FB_WGMMA_8BIT("e4m3");
  if constexpr (F == kWgmmaE5m2) FB_WGMMA_8BIT("e5m2");
#undef FB_WGMMA_16BIT
#undef FB_WGMMA_8BIT
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  for (int i = 0; i < 4; ++i) asm volatile("" : "+f"(d[i])::"memory");
  for (int i = 0; i < 4; ++i) D[rows[i] * kN + cols[i]] = __float_as_uint(d[i]);
#else
  (void)A, (void)Bt, (void)C, (void)D;
  __trap();  // wgmma exists only on sm_90a; the host never launches this elsewhere
#endif
}

// ---- host side: input design ------------------------------------------------------------
enum Batch : int {
  kRandomBits,    // uniform raw bit patterns: every class incl. NaN, inf, subnormals
  kRandomNormal,  // normal values, moderate exponents: the common case
  kSpecials,      // normals with NaN/inf/zero/subnormal sprinkled in
  kTies,          // one term exactly half an output ulp of C, plus optional tiny sticky terms
  kCancellation,  // one product nearly cancels C; the rest sit far below
  kExponentGap,   // terms spread over wide exponent gaps (truncation boundary)
  kZeroTerms,     // many exact zeros of both signs; sign of zero results
  kCHuge,         // C near overflow, inf or NaN
  kCTiny,         // C subnormal or tiny with subnormal inputs
  kBatchCount
};
const char* const kBatchNames[kBatchCount] = {"random_bits", "random_normal", "specials",  "ties",  "cancellation",
                                              "exponent_gap", "zero_terms",    "c_huge",    "c_tiny"};

class Designer {
 public:
  Designer(const FormInfo& f, std::uint64_t seed) : f_(f), rng_(seed) {}

  std::uint32_t uniform(std::uint32_t n) { return static_cast<std::uint32_t>(rng_() % n); }
  int range(int lo, int hi) { return lo + static_cast<int>(uniform(static_cast<std::uint32_t>(hi - lo + 1))); }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }

  // A value of `fmt` with the given sign and unbiased exponent; exponents below the
  // normal range give subnormals (or zero), above it are clamped to the largest binade.
  std::uint32_t value(const Format& fmt, bool negative, int exponent, std::uint32_t mantissa) {
    mantissa &= fmt.man_mask();
    std::uint32_t layout;
    if (exponent > fmt.emax()) exponent = fmt.emax();
    if (exponent >= fmt.emin()) {
      if (exponent == fmt.emax()) mantissa = std::min(mantissa, fmt.max_finite_man_field());
      layout = (static_cast<std::uint32_t>(exponent + fmt.bias) << fmt.man_bits) | mantissa;
    } else {
      const int shift = fmt.emin() - exponent;
      const std::uint64_t sig = (1ull << fmt.man_bits) | mantissa;
      layout = shift > fmt.man_bits ? 0u : static_cast<std::uint32_t>(sig >> shift);
    }
    if (negative) layout |= fmt.sign_mask();
    return to_container(fmt, layout);
  }
  std::uint32_t random_value(const Format& fmt, int elo, int ehi) {
    return value(fmt, chance(0.5), range(elo, ehi), static_cast<std::uint32_t>(rng_()));
  }
  std::uint32_t random_bits(const Format& fmt) {
    // tf32 keeps all 32 register bits: the low 13 show whether the hardware ignores them.
    if (fmt == formats::tf32) return static_cast<std::uint32_t>(rng_());
    return to_container(fmt, static_cast<std::uint32_t>(rng_()) & fmt.width_mask());
  }
  std::uint32_t special(const Format& fmt) {
    switch (uniform(6)) {
      case 0: return fmt.has_nan() ? to_container(fmt, fmt.quiet_nan_pattern()) : 0u;
      case 1: return pack_inf(fmt, false);
      case 2: return pack_inf(fmt, true);
      case 3: return to_container(fmt, chance(0.5) ? fmt.sign_mask() : 0u);
      case 4: return value(fmt, chance(0.5), fmt.emin() - range(1, fmt.man_bits), static_cast<std::uint32_t>(rng_()));
      default: return value(fmt, chance(0.5), fmt.emax(), fmt.man_mask());
    }
  }
  std::uint32_t pack_inf(const Format& fmt, bool negative) {
    if (fmt.has_inf()) return to_container(fmt, fmt.inf_pattern() | (negative ? fmt.sign_mask() : 0u));
    return to_container(fmt, fmt.quiet_nan_pattern());
  }

  // A column of B for a designed tile: +-2^e, so that every row can place exact products.
  void design_b_column(std::uint32_t* b) {
    for (int i = 0; i < f_.k; ++i) b[i] = value(f_.input, chance(0.5), range(-2, 2), 0);
  }
  int b_exponent(std::uint32_t b) const { return decode(f_.input, b).exponent; }
  bool b_negative(std::uint32_t b) const { return decode(f_.input, b).negative; }

  // a and c of one designed case, given its column b (powers of two).
  void design_row(Batch batch, std::uint32_t* a, const std::uint32_t* b, std::uint32_t& c) {
    const Format& in = f_.input;
    const Format& cf = f_.cd;
    // Precision of the output the ties are placed against: Hopper's fp8 path keeps 13
    // fraction bits (DESIGN.md §4), the others the output format's precision.
    const int out_precision = in.width() == 8 ? 14 : cf.precision();
    const int mid = in.exp_bits >= 8 ? 0 : (in.emin() + in.emax()) / 2 + 1;
    // a[i] such that the product a[i] * b[i] has the given sign, exponent and mantissa
    // (b[i] is +-2^e, so its sign flips a's).
    auto product = [&](int i, bool neg, int exponent, std::uint32_t mantissa) {
      a[i] = value(in, neg != b_negative(b[i]), exponent - b_exponent(b[i]), mantissa);
    };
    auto zero_all = [&] {
      for (int i = 0; i < f_.k; ++i) a[i] = 0;
    };
    switch (batch) {
      case kTies: {
        // C sits out_precision/2 binades above the inputs' middle, so the tie term (half
        // an ulp of C) is representable in narrow input formats too.
        const int ec = mid + out_precision / 2 + range(-1, 1);
        // C keeps only the bits the output precision holds, so C + (half an output ulp) is
        // exactly a rounding midpoint (matters for fp8's 14-bit accumulator inside fp32).
        const std::uint32_t c_keep = ~((1u << (cf.precision() - out_precision)) - 1u);
        c = value(cf, chance(0.5), ec, static_cast<std::uint32_t>(rng_()) & c_keep);
        zero_all();
        // half an output ulp of C, or 3/2 or 1/2 ulp with the opposite sign
        const int which = range(0, f_.k - 1);
        product(which, chance(0.5), ec - out_precision, chance(0.7) ? 0u : (1u << (in.man_bits - 1)));
        for (int i = 0; i < f_.k; ++i) {
          if (i != which && chance(0.3)) product(i, chance(0.5), ec - out_precision - range(1, 24), static_cast<std::uint32_t>(rng_()));
        }
        break;
      }
      case kCancellation: {
        const int ec = mid + range(-2, 2);
        const std::uint32_t cm = static_cast<std::uint32_t>(rng_());
        const bool neg = chance(0.5);
        c = value(cf, neg, ec, cm);
        // top mantissa bits of C, opposite sign: the sum keeps only C's low bits and the small terms
        const std::uint32_t top = (cm & cf.man_mask()) >> (cf.man_bits - in.man_bits);
        product(0, !neg, ec, top);
        for (int i = 1; i < f_.k; ++i) product(i, chance(0.5), ec - range(1, 30), static_cast<std::uint32_t>(rng_()));
        break;
      }
      case kExponentGap: {
        const int top = mid + range(-2, 2);
        for (int i = 0; i < f_.k; ++i) product(i, chance(0.5), top - range(0, 40), static_cast<std::uint32_t>(rng_()));
        c = value(cf, chance(0.5), top - range(-3, 40), static_cast<std::uint32_t>(rng_()));
        break;
      }
      case kZeroTerms: {
        if (chance(0.3)) {  // every product an exact zero: the sign of a zero result
          for (int i = 0; i < f_.k; ++i) a[i] = to_container(in, chance(0.5) ? in.sign_mask() : 0u);
          c = chance(0.8) ? to_container(cf, chance(0.5) ? cf.sign_mask() : 0u)
                          : value(cf, chance(0.5), mid + range(-3, 3), static_cast<std::uint32_t>(rng_()));
          break;
        }
        for (int i = 0; i < f_.k; ++i) {
          a[i] = chance(0.7) ? to_container(in, chance(0.5) ? in.sign_mask() : 0u)
                             : value(in, chance(0.5), mid + range(-3, 3), static_cast<std::uint32_t>(rng_()));
        }
        c = chance(0.6) ? to_container(cf, chance(0.5) ? cf.sign_mask() : 0u)
                        : value(cf, chance(0.5), mid + range(-3, 3), static_cast<std::uint32_t>(rng_()));
        break;
      }
      case kCHuge: {
        for (int i = 0; i < f_.k; ++i) a[i] = random_value(in, mid - 4, mid + 4);
        const std::uint32_t u = uniform(10);
        c = u == 0 ? pack_inf(cf, chance(0.5))
            : u == 1 ? to_container(cf, cf.quiet_nan_pattern())
                     : value(cf, chance(0.5), cf.emax() - range(0, 4), static_cast<std::uint32_t>(rng_()));
        break;
      }
      case kCTiny: {
        for (int i = 0; i < f_.k; ++i) a[i] = random_value(in, in.emin() - in.man_bits, in.emin() + 2);
        c = value(cf, chance(0.5), cf.emin() - range(-1, cf.man_bits), static_cast<std::uint32_t>(rng_()));
        break;
      }
      default: break;
    }
  }

  // Fills one tile (A[m][k], Bt[n][k], C[m][n]) of the given batch.
  void fill_tile(Batch batch, std::uint32_t* A, std::uint32_t* Bt, std::uint32_t* C) {
    const Format& in = f_.input;
    const int M = f_.m, K = f_.k;
    if (batch == kRandomBits || batch == kRandomNormal || batch == kSpecials) {
      const int mid = in.exp_bits >= 8 ? 0 : (in.emin() + in.emax()) / 2 + 1;
      auto element = [&](const Format& fmt, int centre) {
        if (batch == kRandomBits) return random_bits(fmt);
        if (batch == kSpecials && chance(0.08)) return special(fmt);
        return random_value(fmt, centre - 4, centre + 4);
      };
      for (int i = 0; i < M * K; ++i) A[i] = element(in, mid);
      for (int i = 0; i < kN * K; ++i) Bt[i] = element(in, mid);
      for (int i = 0; i < M * kN; ++i) C[i] = element(f_.cd, 2 * mid);
      return;
    }
    for (int n = 0; n < kN; ++n) design_b_column(Bt + n * K);
    for (int i = 0; i < M * kN; ++i) C[i] = random_value(f_.cd, -4, 4);
    // Row r is designed against column r % 8; its other seven outputs mix it with other columns.
    for (int r = 0; r < M; ++r) {
      std::uint32_t c = 0;
      design_row(batch, A + r * K, Bt + (r % kN) * K, c);
      C[r * kN + r % kN] = c;
    }
  }

 private:
  const FormInfo& f_;
  std::mt19937_64 rng_;
};

template <int F>
void launch(int tiles, const std::uint32_t* A, const std::uint32_t* Bt, const std::uint32_t* C, std::uint32_t* D) {
  if constexpr (F >= kWgmmaBf16) wgmma_kernel<F><<<tiles, 128>>>(A, Bt, C, D);
  else mma_kernel<F><<<tiles, 32>>>(A, Bt, C, D);
}
void launch_form(int form, int tiles, const std::uint32_t* A, const std::uint32_t* Bt, const std::uint32_t* C,
                 std::uint32_t* D) {
  switch (form) {
    case kMmaBf16F32: launch<kMmaBf16F32>(tiles, A, Bt, C, D); break;
    case kMmaF16F32: launch<kMmaF16F32>(tiles, A, Bt, C, D); break;
    case kMmaF16F16: launch<kMmaF16F16>(tiles, A, Bt, C, D); break;
    case kMmaTf32F32: launch<kMmaTf32F32>(tiles, A, Bt, C, D); break;
    case kWgmmaBf16: launch<kWgmmaBf16>(tiles, A, Bt, C, D); break;
    case kWgmmaF16: launch<kWgmmaF16>(tiles, A, Bt, C, D); break;
    case kWgmmaE4m3: launch<kWgmmaE4m3>(tiles, A, Bt, C, D); break;
    case kWgmmaE5m2: launch<kWgmmaE5m2>(tiles, A, Bt, C, D); break;
  }
  FB_CUDA_CHECK(cudaGetLastError());
  FB_CUDA_CHECK(cudaDeviceSynchronize());
}

// The emu model that should replay a form on this device (DESIGN.md §4 names).
std::string model_for(const FormInfo& f, int major, int minor) {
  const std::string suffix = f.cd == formats::fp16 ? "-f16acc" : "";
  if (major == 9) return (f.wgmma ? "sm90-wgmma" : "sm90-mma") + suffix;
  if (major == 8 && minor == 9) return "sm89" + suffix;
  if (major == 8) return "sm80" + suffix;
  return "sm" + std::to_string(major) + std::to_string(minor) + suffix;
}

// dry_run: no device work; D is left as 0xffffffff (a NaN pattern in every container) so
// the file exercises the writer and the checker but never looks like a measurement.
ProbeSection probe_form(int form, int tiles_per_batch, std::uint64_t seed, const cudaDeviceProp& prop,
                        const std::map<std::string, std::string>& device_fields, bool dry_run) {
  const FormInfo& f = kForms[form];
  Designer designer(f, seed * 1315423911u + static_cast<std::uint64_t>(form));
  const int tiles = tiles_per_batch * kBatchCount;
  const std::size_t a_n = static_cast<std::size_t>(f.m) * f.k, b_n = static_cast<std::size_t>(kN) * f.k,
                    c_n = static_cast<std::size_t>(f.m) * kN;
  std::vector<std::uint32_t> A(a_n * tiles), Bt(b_n * tiles), C(c_n * tiles), D(c_n * tiles, 0xffffffffu);
  std::vector<int> tile_batch(tiles);
  for (int t = 0; t < tiles; ++t) {
    tile_batch[t] = t / tiles_per_batch;
    designer.fill_tile(static_cast<Batch>(tile_batch[t]), &A[a_n * t], &Bt[b_n * t], &C[c_n * t]);
  }
  if (!dry_run) {
    std::uint32_t *dA, *dB, *dC, *dD;
    FB_CUDA_CHECK(cudaMalloc(&dA, A.size() * 4));
    FB_CUDA_CHECK(cudaMalloc(&dB, Bt.size() * 4));
    FB_CUDA_CHECK(cudaMalloc(&dC, C.size() * 4));
    FB_CUDA_CHECK(cudaMalloc(&dD, D.size() * 4));
    FB_CUDA_CHECK(cudaMemcpy(dA, A.data(), A.size() * 4, cudaMemcpyHostToDevice));
    FB_CUDA_CHECK(cudaMemcpy(dB, Bt.data(), Bt.size() * 4, cudaMemcpyHostToDevice));
    FB_CUDA_CHECK(cudaMemcpy(dC, C.data(), C.size() * 4, cudaMemcpyHostToDevice));
    launch_form(form, tiles, dA, dB, dC, dD);
    FB_CUDA_CHECK(cudaMemcpy(D.data(), dD, D.size() * 4, cudaMemcpyDeviceToHost));
    for (std::uint32_t* p : {dA, dB, dC, dD}) FB_CUDA_CHECK(cudaFree(p));
  }

  ProbeSection sec;
  sec.header.form = f.ptx;
  sec.header.k = f.k;
  sec.header.input = f.input;
  sec.header.c_format = f.cd;
  sec.header.d_format = f.cd;
  sec.header.batches.assign(kBatchNames, kBatchNames + kBatchCount);
  sec.header.models = {model_for(f, prop.major, prop.minor)};
  sec.header.extra = device_fields;
  sec.header.extra["tile"] = "m" + std::to_string(f.m) + "n8k" + std::to_string(f.k);
  sec.header.extra["seed"] = std::to_string(seed);
  std::vector<std::uint32_t> b(f.k);
  for (int t = 0; t < tiles; ++t) {
    for (int r = 0; r < f.m; ++r) {
      for (int n = 0; n < kN; ++n) {
        const std::size_t ci = c_n * t + static_cast<std::size_t>(r) * kN + n;
        sec.add_case(static_cast<std::uint32_t>(tile_batch[t]), C[ci], &A[a_n * t + static_cast<std::size_t>(r) * f.k],
                     &Bt[b_n * t + static_cast<std::size_t>(n) * f.k], D[ci]);
      }
    }
  }
  return sec;
}

int run(int argc, char** argv) {
  std::string out;
  int tiles = 4;
  std::uint64_t seed = 1;
  bool dry_run = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--dry-run") dry_run = true;
    else if (arg == "--out" && i + 1 < argc) out = argv[++i];
    else if (arg == "--tiles" && i + 1 < argc) tiles = std::atoi(argv[++i]);
    else if (arg == "--seed" && i + 1 < argc) seed = std::strtoull(argv[++i], nullptr, 10);
    else {
      std::fprintf(stderr, "usage: fb-mma-probe --out FILE [--tiles N per batch, default 4] [--seed S] [--dry-run]\n");
      return 2;
    }
  }
  if (out.empty() || tiles < 1) {
    std::fprintf(stderr, "error: --out FILE is required and --tiles must be >= 1\n");
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
  ProbeFile file;
  for (int form = 0; form < kFormCount; ++form) {
    const FormInfo& f = kForms[form];
    if (f.wgmma && prop.major != 9) {
      std::printf("skip %s: wgmma needs sm_90a, device is sm_%d%d\n", f.ptx, prop.major, prop.minor);
      continue;
    }
    // wgmma tiles hold 4x the outputs of an mma tile; keep the case counts comparable.
    const int per_batch = f.wgmma ? (tiles + 3) / 4 : tiles;
    file.sections.push_back(probe_form(form, per_batch, seed, prop, fields, dry_run));
    std::printf("%s: %zu cases\n", f.ptx, file.sections.back().cases());
  }
  write_probe_file(out, file);
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
