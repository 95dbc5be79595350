// attention/kernel_models.hpp: the kernel recipes (docs/CLI.md "Kernel models", docs/DESIGN.md §6-8).
//
// Contract: a KernelModel is data, not code. For every stage of attention it names the
// format a result is stored in, how it is accumulated, which special-function model is
// used and in which order things happen. The engine (attention/engine_detail.hpp and its
// pass files) runs ONE online-softmax loop and ONE materialised path whose steps read these
// fields; kernel_models.cpp holds the one table of base recipes (with the sources each field
// was read from); kernel_model_parser.cpp the variant suffixes (+dynmax, +delta-dpp, +o-fp32,
// +o-sr; for the fp8 models +block-quant, +hadamard, +promote:N), which only set fields.
//
// Conventions used by the fields:
// - std::optional<Format>: the format a stage's result is rounded to (RNE unless said
//   otherwise); std::nullopt means fp64 (no rounding beyond IEEE double), used by the
//   golden-fp64 models.
// - "fp32" stages with `ftz` follow nvcc --use_fast_math: subnormal results of fp32
//   multiplies/adds are flushed to zero.
#pragma once

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "emu/dot/dot_model.hpp"
#include "emu/rounding.hpp"
#include "emu/sfu/special_functions.hpp"
#include "formats/format.hpp"

namespace fb::attn {

// How a dot product (a matmul's inner product) is accumulated.
enum class DotKind : std::uint8_t {
  tensor_core,     // the named emu/dot model (fb::DotModel: NVIDIA tensor core or AMD MFMA), C chained
  fp32_fma_chain,  // sequential fp32 FMAs (SIMT / CPU fp32 GEMM)
  fp64_fma_chain,  // sequential fp64 FMAs (golden fp64)
};
// The order in which a kernel feeds the k dimension to its MMA instructions.
enum class KOrder : std::uint8_t {
  ascending,        // k in order, products_per_step at a time (every NVIDIA recipe)
  ck_interleave16,  // Composable Kernel's WarpGemm IterateK<M32N32K8, 2> (SwizzleB): each aligned
                    // chunk of 16 k runs as two chained 8-product MFMAs over k {0-3, 8-11} then
                    // {4-7, 12-15}; a partial last chunk is zero-padded
};

struct DotSpec {
  DotKind kind = DotKind::tensor_core;
  std::string tensor_core;  // dot model name, e.g. "sm80", "sm90-mma", "cdna3" (fb::find_dot_model)
  // dot.nvidia(): the NVIDIA preset the side-by-side kernels and prepared alignment panels
  // take (attention/engine_detail.hpp); null for the other families.
  const TensorCoreModel* model = nullptr;
  // +promote:N (DeepSeek-V3's fp32 promotion): 0 = off. Otherwise the tensor core runs
  // each group of N products from C = 0 (chained fused steps, the model's own output
  // rounding, e.g. e8m13 truncation) and the group's result is added into an fp32
  // accumulator (which starts at the dot's C) by one fp32 add on the CUDA cores.
  int promote_every = 0;
  KOrder k_order = KOrder::ascending;
  // tensor_core: the model, resolved by fb::find_dot_model for the input format at parse time.
  DotModel dot{};
};

// correctly_rounded: not a kernel but the reference any kernel is measured against (model
// `correctly-rounded`): exact_attention(), then ONE rounding of each output, in the final
// cast's mode (o_round): O, dQ, dK, dV into `output`, LSE into fp32, delta = Σ dO·O of the
// rounded O, summed exactly and rounded once into fp32. run_attention() dispatches it to
// round_exact_outputs() (attention/exact.cpp); no other field is read.
enum class Structure : std::uint8_t { online_softmax, materialised, correctly_rounded };
enum class KvOrder : std::uint8_t {
  first_to_last,
  last_to_first,
  // FlexAttention (flex_attention.py.jinja: forward_inner(IS_FULL_BLOCKS=False) over KV_IDX, then
  // forward_inner(IS_FULL_BLOCKS=True) over FULL_KV_IDX): a row block first visits its partially
  // masked block_m x block_n blocks, then its fully visible ones, each group in ascending order
  // (_dense_to_ordered: a stable argsort of the dense block mask). Without a mask every tile is
  // one group, ascending (_create_empty_block_mask). The backward visits its blocks alike.
  partial_then_full,
};

// Where the softmax scale enters.
enum class ScaleHandling : std::uint8_t {
  exponent_ffma,     // FA2: max in raw score units; P̄ = ex2(fma(S, scale_log2, -(m*scale_log2)))
  log2_units,        // Triton tutorial: m = max(m, rowmax(S)*qk_scale); P̄ = ex2(fma(S, qk_scale, -m))
  multiply_scores,   // PyTorch: S = F(S * scale) as a tensor op; P̄ = exp(F(S - m))
  sqrt_prescale_qk,  // PyTorch's SDPA math backend (_scaled_dot_product_attention_math): q' = fp32(q *
                     // fp32(√scale)) and k' = fp32(k * fp32(√scale)) before the score GEMM, so S = q'·k'
                     // carries the scale; P̄ = exp(F(S - m)) as multiply_scores; the backward's dQ and dK
                     // come out of dS·k' and dSᵀ·q' and are multiplied by fp32(√scale) once more.
                     // Materialised models only.
};

// How exponent_ffma models form the exponent argument S*scale_log2 - max_scaled, and
// log2_units models S*qk_scale - m.
enum class ExponentArgument : std::uint8_t {
  ffma,       // one FFMA: nvcc contracts exp2f(x * scale - max_scaled) (upstream FA2 softmax.h)
  fmul_fadd,  // __fmul_rn(S, scale_log2), then a separate FADD: PyTorch's bundled FA2 defines
              // UNFUSE_FMA (seen in its SASS: FMUL, FADD, MUFU.EX2); variant +unfused-exp.
              // log2_units: fp32(S * qk_scale) - m on every tile (cuDNN's scores scaled by one
              // FMUL before the max), not only on the tiles of causal_band_two_step_exponent
};

// How α's base-2 exponent is formed by exponent_ffma recipes when the max moves from m_old to m_new.
enum class RescaleExponent : std::uint8_t {
  scaled_difference,  // FA2, FA3, FA4: fp32(fp32(m_old - m_new) * scale_log2); 0 when the max stays
  ffma_scaled_max,    // CK FMHA: fma(m_old, scale_log2, -fp32(m_new * scale_log2)), the same FFMA as the
                      // exponent of P̄; not 0 when the max stays (m·scale_log2's rounding error), so α
                      // may differ from 1 by an ulp on every tile
};

// Which exp2 an online kernel's exponentials call.
enum class Exp2Function : std::uint8_t {
  ex2_approx_ftz,   // --use_fast_math: exp2f is one ex2.approx.ftz.f32 (the SfuSet's ex2)
  exp2f_libdevice,  // no fast math: exp2f is ex2.approx.f32, which ptxas emits as the ftz MUFU.EX2
                    // with x < -126 computed as ex2(x * 0.5)^2 (FSETP.GEU -126; FMUL 0.5; MUFU.EX2;
                    // FMUL r*r: PyTorch's FA2 SASS; the identity held on all 2^32 inputs on H200)
};

// Order of the row sum ℓ.
enum class RowSumOrder : std::uint8_t {
  fa2_quad,           // per-thread sequential fp32 fold over the thread's columns {2t,2t+1}+8j,
                      // quad sum (t0+t2)+(t1+t3) once at the end of the forward
  pairwise,           // a tensor reduction (PyTorch / Triton tl.sum): recursive pairwise in fp32
  fa3_quad,           // FA3 thread_reduce_: each thread sums its columns of the tile sequentially
                      // (starting from its first column), then adds that tile sum to its running
                      // sum; quad sum at the end as fa2_quad
  ck_two_lanes,       // CK FMHA (gfx942, 32x32 MFMA C layout): lane group g sums, in fp32 from 0 in
                      // ascending order, the tile columns c with floor(c/8) mod 2 == g; the tile sum is
                      // fp32(s0 + s1) (one ds_bpermute step) and ℓ = fma(α, ℓ, tile sum)
  fa4_lanes,          // FA4 (one thread per row) fadd_reduce for sm100: eight fp32 lanes, lane l
                      // folding columns l, l+8, ...; lane 0 starts from ℓ·α (ℓ·α rounded, then + P̄_0);
                      // then lanes (0,1)+=(2,3), (4,5)+=(6,7), (0,1)+=(4,5), ℓ = lane0 + lane1
  triton_quad,        // Triton tl.sum(p, 1) on an MMA accumulator layout (sm_90 PTX of the tutorial):
                      // per tile, thread t of the quad folds its columns {2t, 2t+1} + 8j in order from
                      // its first one; two butterfly shuffles give the tile sum (t0 + t2) + (t1 + t3);
                      // then ℓ = fma(ℓ, α, tile sum) (l_update_fma), else fp32(ℓ·α) + tile sum (cuDNN)
  flex_decode_warps,  // Inductor's flex-decoding template on sm_90 (mma.sync m16n8k16, warpsPerCTA [1, 2]): per
                      // tile, warp w = (c / 8) mod 2 and its thread t = (c mod 8) / 2 own column c; each thread
                      // folds its columns in order from its first one, each warp joins its threads as
                      // (t0 + t2) + (t1 + t3), the tile sum is warp 0 + warp 1 (through shared memory); then
                      // ℓ = fma(ℓ, α, tile sum) (l_update_fma)
  warp_softmax,       // PyTorch's CUDA softmax (SoftMax.cu, PersistentSoftmax.cuh), materialised models: the
                      // kernel host_softmax / host_softmax_backward pick for the row's length (namespace
                      // pytorch_softmax below). softmax_warp_forward/backward: W = min(32, next power of two
                      // of the row length) lanes, lane l folding elements l, l+W, l+2W, ... in fp32 from 0,
                      // then an xor butterfly over offsets W/2, ..., 1; masked keys add 0. Longer rows: the
                      // block kernels' orders (attention/engine_detail.hpp softmax_orders)
};

// Which of PyTorch's CUDA softmax kernels runs an fp32 row of a given length, read from
// aten/src/ATen/native/cuda/SoftMax.cu as of PyTorch 2.10 (host_softmax, host_softmax_backward,
// dispatch_host_softmax_backward). UNMEASURED beyond 1024 keys: every math capture so far has
// at most 256 keys (gpu/capture_paths.py plans two, of 2048 and 3001 keys).
namespace pytorch_softmax {
// softmax_warp_forward runs rows of at most 2048 fp32 (dim_size <= 2048, 8 KiB); longer rows
// run cunn_SoftMaxForwardReg on 1024 threads while ceil(keys / 1024) < 10, then the shared-
// memory or the plain block kernel (not modelled).
inline constexpr int warp_forward_max_keys = 2048;
inline constexpr int register_forward_max_keys = 9 * 1024;
// softmax_warp_backward runs rows of at most 1024 fp32 (4 KiB); longer rows run
// cunn_SoftMaxBackwardSmem (keys a multiple of 4) or cunn_SoftMaxBackward.
inline constexpr int warp_backward_max_keys = 1024;
// The block of the backward's block kernels (SoftMax_getBlockSize with ILP 4): the smallest
// power of two >= min(keys / 4, 1024) / 2, at least a warp.
inline int backward_block_threads(int keys) {
  const int max_block = std::min(keys / 4, 1024) / 2;
  int block = 1;
  while (block < max_block) block *= 2;
  return std::max(block, 32);
}
}  // namespace pytorch_softmax

// FP8 operands (issue 10): Q, K, V are quantised to an 8-bit format inside the model,
// from the high-precision inputs (the model's `input` dtype), as the caller of an FP8
// kernel does before launching it. attention/fp8_quant.hpp does the quantisation.
struct Fp8Quantisation {
  bool enabled = false;
  Format format = formats::e4m3;
  bool block = false;     // +block-quant: one scale per Br x d block of Q and Bc x d block of K, V
  bool hadamard = false;  // +hadamard: Q, K times (random +-1 diagonal)(normalised Hadamard)
  int p_max_offset = 0;   // FA3 Max_offset: P̄ = ex2(S*scale_log2 - (m*scale_log2 - offset)) in [0, 2^offset]
  double p_scale = 1.0;   // materialised baseline: P times p_scale (fp32) before the e4m3 cast
  std::optional<Format> p_before_cast;  // materialised baseline: P stored in this format first (fp16)
};

// How the O accumulator lives.
enum class OAccumulator : std::uint8_t {
  mma_c,   // fp32 accumulator fed to the MMA as C (FA2, Triton): acc = mma(P̄, V, acc*α)
  buffer,  // a tensor in `o_buffer_format`: O = F(F(O·α) + F(P̄V))
};

enum class Normalisation : std::uint8_t {
  rcp_multiply,      // FA2: inv = (l == 0 || l != l) ? 1 : rcp(l); O = fp32(acc*inv)
  ieee_reciprocal,   // FA2 without fast math: inv = (l == 0 || l != l) ? 1 : 1.f / l, correctly
                     // rounded (MUFU.RCP + Newton FFMAs + slow path in PyTorch's SASS, not the
                     // SfuSet's rcp); O = fp32(acc*inv)
  fa3_finalize,      // FA3 Softmax::finalize(v_descale): inv = (l == 0 || l != l) ? 0 : rcp(l);
                     // O = fp32(acc * fp32(inv * v_descale))
  divide_fp32,       // Triton: O = fp32(acc / l)
  divide_in_format,  // PyTorch: O = F(O / ℓ) with F = o_buffer_format
};

enum class LseFormula : std::uint8_t {
  fa2,             // fma(m, softmax_scale, __logf(l)) in fp32; +inf when l == 0 or NaN
  fa3,             // FA3 finalize: fma(m, fp32(scale_log2 * ln2), __logf(l * 2^-max_offset)), scale_log2
                   // with the q/k descales folded in; -inf when l == 0 or NaN
  log2_units,      // Triton: M = m + log2(l) (log2 units); reported as fp32(M * ln2)
  natural,         // PyTorch: fp32(m + log(ℓ)) with m already scaled
  ck_fp64,         // CK FMHA: fp32(fp64(fp64(fp32(m·scale_log2)) / log2e) + fp64(logf(ℓ))), the scale
                   // constant divided out in double; -inf for an empty row
  log2_libdevice,  // Triton on sm_90: M = fp32(m + log2(ℓ)) with libdevice's __nv_log2f (software,
                   // emu/sfu/libdevice_log2f.hpp), not the MUFU; reported as fp32(M * fp32(ln 2)), as
                   // FlexAttention's returned lse * math.log(2) compiles (mul.f32 by 0f3F317218)
  fa4,             // FA4 correction epilogue: (m·scale_log2 + lg2(ℓ))·ln2, the first two contracted into
                   // one FFMA (ASSUMED) and lg2 the MUFU; -inf when l == 0 or NaN
  cudnn_stats,     // cuDNN's softmax stats (natural log) from a log2-unit max: fma(m, fp32(ln 2), __logf(ℓ)),
                   // __logf = fp32(lg2(ℓ)·ln 2) with the MUFU lg2 (a black-box fit: ~95% of the H200 stats)
};

// The LSE a kernel writes for a row that sees no key (ℓ == 0: above the corner of a causal
// mask with more queries than keys), as each source writes it:
// - +inf: FA2 (flash_fwd_kernel.h writes INFINITY for a row block with no KV block, and
//   softmax.h's normalize_softmax_lse gives INFINITY when sum == 0), the FA2 family's split-KV
//   combine (lse_logsum = INFINITY when its sum is 0);
// - -inf: FA3 (hopper/softmax.h finalize: sum == 0 ? -INFINITY; epilogue_fwd.hpp store_zero),
//   FA4 (flash_attn/cute/softmax.py finalize: else -inf), CK FMHA (set_tile(lse, -inf)), and
//   Triton's kernels, whose arithmetic gives it: the tutorial's M = m_i + log2(l_i) with m_i =
//   -inf and l_i = 1, FlexAttention's lse = m_i + log2(where(l_i == 0, 1, l_i)) and its
//   decoding combine's log2(1) + (-inf);
// - +inf by convention where the kernel writes none or nothing was measured: PyTorch's math
//   path returns no LSE (natural: the value bias-test reads), cuDNN's stats (UNMEASURED for an
//   empty row).
// O is 0 in every model. The backward reads neither: a row that sees no key visits no key.
double empty_row_lse(LseFormula lse);
// Whether the kernel's source treats a NaN row sum ℓ as a row that saw nothing (O = 0 and
// empty_row_lse): the CUDA kernels' guards do (FA2 softmax.h `sum == 0.f || sum != sum`, FA3's
// and FA4's finalize, CK's; cuDNN's is taken to, UNMEASURED). Code written as PyTorch tensor
// ops (LseFormula::natural: standard, the math path, Golden et al.'s, Qiu & Yao's) and Triton's
// (m + log2(ℓ), FlexAttention's where(ℓ == 0, 1, ℓ)) has no such guard: a NaN score makes ℓ,
// O and the LSE NaN there, and P in the backward, as softmax propagates it.
bool nan_row_sum_is_empty(LseFormula lse);

enum class DeltaFormula : std::uint8_t {
  // The three FlashAttention preprocess kernels: each thread of a row's group loads 8
  // contiguous 16-bit elements per chunk (the chunk is kBlockKGmem wide), sums its products
  // sequentially in fp32 chunk by chunk, then a butterfly over the group (shfl_xor g/2 .. 1).
  // They differ in the padded head dim and the chunk (delta_thread_layout, backward.cpp):
  fa2_threads,       // FA2 dot_do_o: d padded to a multiple of 32; chunk 64 if that is a multiple of 64, else 32
  fa3_threads,       // FA3 flash_bwd_preprocess_kernel.h: d padded to the instantiated head dim (64, 96, 128,
                     // 192, 256: round_up_headdim); chunk 128, 64 or 32, the largest dividing it
  fa4_threads,       // FA4 flash_bwd_preprocess.py: d padded to a multiple of 32; chunk 128, 64 or 32, the
                     // largest dividing it (the in-thread reduce ASSUMED sequential: a CuTe DSL TensorSSA reduce)
  rounded_products,  // products rounded to `delta_product_format`, summed pairwise in fp32, returned in
                     // delta_format (Qiu & Yao under autocast: bf16 products, an fp32 sum; Triton
                     // tl.sum(o * do) with do in fp32: fp32 products)
  row_fma_chain,     // CK FMHA dot_do_o: one thread per row, d = fma(o, do, d) from 0 over the columns
  softmax_backward,  // PyTorch softmax backward: rowsum(dP∘P) in fp32, in the row sum's order (pairwise or
                     // warp_softmax)
};

// Which backward kernel structure the recipe runs (after delta).
enum class BackwardKernel : std::uint8_t {
  fa2_seqk_parallel,   // FA2 compute_dq_dk_dv_seqk_parallel: per n_block, m_blocks last to first; P from
                       // ex2(S*scale_log2 - LSE*log2e); dK, dQ scaled by softmax_scale at the end
  triton_prescaled_k,  // Triton tutorial _attn_bwd: K pre-scaled on the host; P = exp2(Q·K'ᵀ - M) (log2 units);
                       // dK/dV per KV block of bwd_block_n keys over row steps of bwd_block_m (on the causal
                       // diagonal block bwd_block_m / bwd_mask_slice); dQ per row block over key steps
                       // likewise (diagonal block first, then keys from 0); dK *= sm_scale, dQ *= fp32(ln 2)
  tensor_ops,          // PyTorch autograd through the recipe's tensor ops (standard, golden, fa-bf16acc)
  flex_blocks,         // FlexAttention flex_backwards.py.jinja: P = exp2 of the forward's scores against
                       // its log2-unit LSE (exponent(), two-step on partial blocks), dS = fp32(P*fp32(dP -
                       // delta)); dK/dV per KV block of bwd_block_n keys over row steps of bwd_block_m,
                       // dQ per row block of bwd_block_n rows over key steps of bwd_block_m, blocks in
                       // KvOrder::partial_then_full order; dQ, dK *= fp32(scale) at the end, dV unscaled
};

struct TileSizes {
  int block_m = 128, block_n = 128;         // forward
  int bwd_block_m = 64, bwd_block_n = 128;  // backward
};

// The order in which a backward KV block visits its row (query) blocks. It fixes the order
// of the chained dK and dV accumulations.
enum class RowBlockOrder : std::uint8_t {
  last_to_first,  // FA2 compute_dq_dk_dv_seqk_parallel: m_block from m_block_max - 1 down
  first_to_last,  // FA3 mainloop_bwd_sm90 and FA4 flash_bwd_sm100: m_block from m_block_min up
};

// Which P̄ exponentials of an online forward go through FA4's software exp2 (+sw-exp2).
struct SoftwareExp2Split {
  bool enabled = false;    // some P̄ through the polynomial (else every one on the SFU)
  int every = 0;           // 0: every P̄; else FA4's split (fa4_software_ex2_uses_polynomial)
  int start_fragment = 0;  // with `every`: the first 32-column fragment that uses it
};

// Split-KV forward (+splitkv, FA2 models only; docs/DESIGN.md §6 "Split-KV"): the keys of a
// row are split over num_splits thread blocks (flash_fwd_kernel.h compute_attn_1rowblock_splitkv),
// each normalising its part with its own row sum into an fp32 O_accum and an LSE_accum, and a
// combine kernel (combine_attn_seqk_parallel) joins them. UNMEASURED: no capture of a split
// run has been replayed.
enum class SplitKvScale : std::uint8_t {
  exp_minus_logsum,      // scale_s = expf(lse_s - lse_logsum): FA2 v2.x (flash_fwd_kernel.h at
                         // 3e9414f1, f816dee6 and 0251105a), taken as PyTorch's (ASSUMED)
  exp_minus_max_inv_sum  // scale_s = expf(lse_s - lse_max) * inv_sum, inv_sum = 1/lse_sum (0 when
                         // lse_sum is 0 or NaN): FA3's combine (hopper/flash_fwd_combine_kernel.h
                         // :606-621 at 0251105a), which no FA2 build writes; a what-if on FA2's
                         // combine, its LSE kept; +splitkv:...,combine=inv-sum
};
struct SplitKv {
  bool enabled = false;
  int num_splits = 0;  // 0: flash_api.cpp num_splits_heuristic for the run's shape
  int sm_count = 0;    // the heuristic's multiProcessorCount (132: H100 SXM, H200; 108: A100)
  SplitKvScale scale = SplitKvScale::exp_minus_logsum;
  // The combine kernel's expf, logf and 1.f/x: with --use_fast_math (upstream FA2's setup.py)
  // ex2.approx.ftz(x * log2e), lg2.approx.ftz(x) * ln2 contracted with the following add,
  // rcp.approx.ftz; without (PyTorch) CUDA's expf (emu/sfu/cuda_expf.hpp), libdevice logf
  // (emu/sfu/cuda_logf.hpp) and an IEEE division.
  bool fast_math = true;
};

struct KernelModel {
  std::string base;               // base name, e.g. "fa2-sm90"
  std::string description;        // one line for `flashbits models`
  std::string sources;            // where the recipe's facts come from
  Format input = formats::bf16;   // q, k, v, dO
  Format output = formats::bf16;  // O, dQ, dK, dV
  Structure structure = Structure::online_softmax;
  KvOrder kv_order = KvOrder::last_to_first;
  // Tile sizes for a head dim; 0 head dim rules fall through to the last entry.
  std::vector<std::pair<int, TileSizes>> tiles_by_head_dim;
  // The same for causal runs, where a kernel picks other tiles (FA3); empty: as non-causal.
  std::vector<std::pair<int, TileSizes>> causal_tiles_by_head_dim;
  bool golden_tiles = false;  // Golden et al.: B_c = ceil(M/4d), B_r = min(ceil(M/4d), d), M = SRAM elements

  // ---- scores ----
  DotSpec score_dot;
  std::optional<Format> score_format;  // S = F(Q·Kᵀ); fp32 for FA2
  ScaleHandling scale = ScaleHandling::exponent_ffma;
  // exponent_ffma: the kernel's C++ API takes softmax_scale as a float and forms
  // scale_log2 = float(softmax_scale * M_LOG2E) from it (FA2's and FA3's set_params: the
  // scale is rounded to fp32 first, which changes scale_log2 at head dims such as 48, 80 and
  // 192); false: from the scale in double (FA4's Python softmax_scale * LOG2_E).
  bool scale_log2_from_fp32_scale = false;
  ExponentArgument exponent_argument = ExponentArgument::ffma;            // exponent_ffma models
  Exp2Function exp2_function = Exp2Function::ex2_approx_ftz;              // online models' exp2f
  RescaleExponent rescale_exponent = RescaleExponent::scaled_difference;  // exponent_ffma models' α
  std::optional<Format> scaled_score_format;                              // multiply_scores: S = F(S * scale)
  bool scale_in_input_dtype = false;  // the scale is first rounded to that format (a bf16 tensor op)
  // log2_units, FlexAttention (common.py.jinja forward_block_mn: qk *= SM_SCALE, later
  // post_mod_scores *= RCP_LN2): the scale is its own fp32 multiply on the score, S = fp32(S *
  // fp32(scale)), and qk_scale is fp32(1.44269504) alone, so the max is of fp32(S * log2e) and
  // P̄ = ex2(fma(S, log2e, -m)). It equals the tutorial's folded fp32(scale * log2e) only when
  // the scale is a power of two.
  bool scale_before_log2e = false;
  // ---- max, exponent, sum ----
  std::optional<Format> max_format;  // the m buffer (fp32 for FA2, bf16 for fa-bf16acc)
  std::optional<Format> sub_format;  // multiply_scores: S - m rounded to this
  std::optional<Format> p_format;    // P̄ as stored after exp (fp32; FMT for golden)
  RowSumOrder row_sum = RowSumOrder::fa2_quad;
  std::optional<Format> row_sum_internal;  // format of the ℓ update's operations
  std::optional<Format> row_sum_format;    // the ℓ buffer
  bool l_init_one = false;                 // Triton initialises l = 1 (harmless: the first α is 0)
  bool l_update_fma = false;               // Triton: l = fma(l, α, rowsum) (fp-fusion)
  // Pairwise (tensor-op) row sums: each KV tile's sum is clamped from below to this value,
  // taken in row_sum_internal, before it joins ℓ (0 = no clamp). Qiu & Yao's attention.py:
  // block_row_sums = exp_weights.sum(-1).clamp(min = EPSILON), EPSILON = 1e-10, in fp32.
  double row_sum_clamp_min = 0.0;
  // fa2_quad: softmax_rescale_o's `row_sum *= scores_scale` and reduce_sum's first add of the
  // next tile contract into one FFMA per thread (nvcc's default -fmad=true): ℓ = fma(ℓ, α, P̄_2t).
  bool row_sum_rescale_fma = false;
  // pairwise row sums: the reduction runs over the whole KV tile, causal-masked entries as
  // exact zeros (Triton: tl.sum(p, 1) over BLOCK_N after tl.where/-1e6 masking), which
  // changes the pairing on the diagonal tile; otherwise over the visible keys only.
  bool row_sum_over_full_tile = false;
  // ---- P̄ cast and P·V ----
  std::optional<Format> p_cast;  // P̄ for the P·V matmul; every recipe sums ℓ from P̄ before this cast
  DotSpec pv_dot;
  OAccumulator o_acc = OAccumulator::mma_c;
  std::optional<Format> o_buffer_format;   // buffer: O's format; also the division's
  std::optional<Format> pv_result_format;  // buffer: F(P̄V)
  // ---- end of forward ----
  Normalisation normalisation = Normalisation::rcp_multiply;
  LseFormula lse = LseFormula::fa2;
  std::optional<Format> lse_format;  // natural: LSE rounded to this (fp32)
  SfuSet sfu;                        // ex2 / rcp / lg2 models (FA2, Triton)
  bool ftz = true;                   // fp32 ops flush subnormal results (fast math)

  // ---- backward ----
  // Tensor-op backward: the softmax backward's dS = fma(-P, Σ, fp32(dP·P)), PyTorch's
  // softmax_warp_backward `grad - output * sum` contracted by nvcc into one FFMA, with
  // Σ = delta; the scale is not applied to dS (sqrt_prescale_qk carries it). false: dS =
  // F(F(P·fp32(dP - delta)) · scale).
  bool softmax_grad_fma = false;
  // fa2_seqk_parallel, cuDNN's flash_bprop: P = ex2(fp32(fp32(fp32(S·scale) - LSE)·log2 e)) from the
  // natural-log LSE (not ex2(S·scale_log2 - LSE·log2 e)), and dS = fp32(fp32(P·fp32(dP - delta))·scale)
  // before its cast, so that dQ and dK are not scaled at the end.
  bool bwd_natural_lse_and_scaled_ds = false;
  DeltaFormula delta = DeltaFormula::fa2_threads;
  std::optional<Format> delta_format;          // rounded_products: the result (the stored delta / D tensor)
  std::optional<Format> delta_product_format;  // rounded_products: each product dO·O
  std::optional<Format> bwd_format;            // tensor-op models: every op's result (dP, dS, ...)
  BackwardKernel backward = BackwardKernel::fa2_seqk_parallel;
  RowBlockOrder bwd_row_block_order = RowBlockOrder::last_to_first;  // fa2_seqk_parallel
  // triton_prescaled_k: the host multiplies K by (softmax_scale * bwd_k_prescale) in double
  // (Python floats), PyTorch passes it to the kernel as an fp32 scalar and rounds
  // fp32(k * scalar) to the input format: K' = F(fp32(k * fp32(c))).
  double bwd_k_prescale = 0.0;
  // triton_prescaled_k: BLK_SLICE_FACTOR, the divisor of the step on the causal diagonal block.
  int bwd_mask_slice = 1;
  // triton_prescaled_k: the backward applies the causal mask whatever the forward did (the
  // tutorial's _attn_bwd has no CAUSAL argument: its MASK=True diagonal steps and the row and
  // key ranges are always the causal ones).
  bool bwd_always_causal = false;
  // Triton tutorial, causal forward: on KV tiles from the row block's first key on
  // (start_n >= start_m*BLOCK_M, the "masked" path), qk = fp32(qk*qk_scale) (+ mask) first and
  // the max is subtracted by a separate fp32 subtraction; elsewhere one FMA qk*qk_scale - m.
  // With KvOrder::partial_then_full (FlexAttention) the two-step tiles are the partially masked
  // blocks (the tl.where of the mask sits between the multiply and the subtraction, so LLVM
  // does not contract them), in the forward and in the backward's P; and every block when the
  // query or key length is not a multiple of the 128-wide sparse block (IS_DIVISIBLE false in
  // torch/_inductor/kernel/flex/flex_attention.py: the bounds tl.where is on every block;
  // measured on the decode capture, ASSUMED for the attention template: flex_bounds_masked).
  bool causal_band_two_step_exponent = false;
  // The shapes a recipe models (0: any): FlexAttention's decoding template runs for queries of
  // fewer than this many rows only (Inductor's _use_flex_decoding: seq_len_q < 128); the engine
  // refuses longer ones.
  int max_query_rows = 0;
  // FlexAttention's attention template: Inductor runs it for queries of at least this many rows
  // (128) and shorter ones through its decoding kernel (flex-decoding-sm90); the template's
  // model still runs them, with a note (unmeasured_shape_notes). 0: any length.
  int min_query_rows_run = 0;
  // Said when the query and key lengths differ and the source has no such case (the Triton
  // tutorial's one N_CTX) or places its mask otherwise (Qiu & Yao's q_start); empty: modelled
  // as the source handles unequal lengths.
  std::string unequal_lengths_note;
  // The note is about where the source places its causal mask (Qiu & Yao's q_start), so it is
  // said for causal runs only: without the mask the source handles unequal lengths as modelled.
  bool unequal_lengths_note_only_when_causal = false;
  // The Triton tutorial's forward tile and its limits (python/tutorials/06-fused-attention.py
  // @003da478): the autotuner tries BLOCK_M x BLOCK_N over `block_m` x `block_n` at run time
  // (configs_tma on sm_90, configs otherwise) and picks by timing, so the tile is not a fact of
  // the source: the model runs one candidate (tiles_by_head_dim, the captures' forced 128 x 64,
  // or the one +tile:BMxBN names: `named`) and a note says so (unmeasured_shape_notes). Where
  // `strict`, unmodelled_shape refuses what the tutorial refuses or does not compute as
  // attention: a head dim outside `asserted_head_dims` (`assert HEAD_DIM_K in {16, 32, 64, 128,
  // 256}`) or narrower than the tile's BLOCK_N (`tl.static_assert(BLOCK_N <= HEAD_DIM)`), query
  // and key lengths that differ (one N_CTX), a length that is not a multiple of the tiles (no
  // bounds masks; the backward's `assert N_CTX % PRE_BLOCK == 0`, PRE_BLOCK 128), and a causal
  // run with BLOCK_N > BLOCK_M. Not strict (triton-tutorial, the recipe): those runs are the
  // recipe's extension, with a note. Empty `block_n`: not the tutorial.
  struct TritonTutorialTiles {
    std::vector<int> asserted_head_dims;
    std::vector<int> block_m, block_n;
    bool named = false;
    bool strict = false;
  } tutorial_tiles;
  // Grouped-query backward: true where the source reduces a kv head's dK and dV as the engine
  // does, FA2's mha_bwd (each query head's gradient rounded to the dtype, the group summed in
  // fp32 and rounded once; PyTorch eager's expand backward alike). Other kernels reduce the
  // group in fp32 before one rounding (FA3's dK_accum, FlexAttention's loop over the group,
  // the math path's fp32 key_acc), which the engine does not model: a note says so.
  bool gqa_reduction_as_fa2 = false;
  // FlexAttention's decoding kernel: get_split_k's SM count (flex_decoding.py: SPLIT_KV =
  // max(SMs // (batch * kv heads) * 2, 1), flex_decode_split_count); 0 for every other recipe.
  // Without a block mask split 0 takes every key and the combine is exact; under a causal
  // create_block_mask the keys spread over the splits (attention/online_forward.cpp
  // flex_decode_split_row), whose combine order is read from the PTX Inductor compiled for
  // kFlexDecodeModelledSplits splits only: other split counts are refused with a causal mask.
  int flex_decode_sms = 0;

  // A one-line warning every front end prints when the model is named (empty: none): a
  // variant that reproduces a known kernel bug, e.g. an fp8 P̄ that saturates. What depends
  // on the run's shape (bwd_always_causal without causal) is shape_warning's, not this.
  std::string warning;
  // A black-box fit to captures of a closed-source kernel, known not to be bit-exact (cuDNN):
  // never reported as hardware-validated, whatever its tensor cores and SFUs.
  bool black_box_fit = false;

  // Whether the recipe models its kernel's backward (dQ, dK, dV). Forward-only recipes (the
  // fp8 models) still give delta, from O and dO in delta's order, so that
  // bias-test can measure it; their dQ, dK, dV are absent.
  bool backward_modelled = true;

  // ---- FP8 (fa3-fp8-sm90, standard-fp8) ----
  Fp8Quantisation fp8;

  // ---- variants (suffixes) ----
  SplitKv splitkv;  // +splitkv[:N|auto][,sms=S][,combine=logsum|inv-sum]
  bool dynmax = false;
  double dynmax_beta = 2.0, dynmax_tol = 1e-3;
  // +visit-masked-tiles (fa-bf16acc): Qiu & Yao's causal loop (attention.py @30ef0216,
  // lines 68-109). Every row visits every KV tile, those wholly above its diagonal included,
  // and each tile holds all its keys: the causal-masked scores are masked_fill_ed with
  // -finfo(q.dtype).max (line 29, 78), the input format's largest finite value negated, not
  // -inf, and then run through the tile's max (with +dynmax their STABLE=1 block max, which
  // is 0 on a wholly masked tile, line 89), exp, clamped block sum and O update like any
  // score. Off: the visible keys only (masked tiles skipped, the diagonal tile cut short).
  bool visit_masked_tiles = false;
  // +cuda-expf (fa-bf16acc): the fp32 exp of the tensor ops (torch.exp on a CUDA tensor) is
  // CUDA's expf, an FMA range reduction around the SfuSet's ex2 (emu/sfu/cuda_expf.hpp), instead
  // of correctly rounded.
  bool cuda_expf = false;
  // The exp and log of the tensor ops compute in fp64, as PyTorch's do on fp64 tensors (the
  // golden-fp64 models), not in fp32 opmath (every other tensor-op model: bf16, fp16 and fp32
  // tensors compute exp and log in fp32).
  bool fp64_opmath = false;
  bool delta_dpp = false;  // delta = rowsum(dP∘P)
  bool o_fp32 = false;     // delta from O kept in fp32 (before the final cast)
  // The final cast of O: rne is every recipe's own (cvt.rn / .to(dtype)); +o-MODE
  // replaces it with MODE in every structure (sr: o_sr_bits random bits keyed by the
  // run's seed and the element's index).
  RoundingMode o_round = RoundingMode::rne;
  int o_sr_bits = 24;
  // Structure::correctly_rounded only, set by correctly_rounded_reference() for a kernel: the
  // reference rounds where that kernel's outputs actually are. O is rounded once into
  // reference_o_store when set (the kernel's O buffer, e.g. fp32 under an fp32-storage
  // recipe), left exact with reference_o_exact (an fp64 buffer), else rounded into `output`;
  // with reference_delta_exact delta is the exact delta rounded once into fp32 (a kernel whose
  // delta reads an O before its final cast, or rowsum(dP∘P)), else Σ dO·O of that stored O.
  std::optional<Format> reference_o_store;
  bool reference_o_exact = false, reference_delta_exact = false;
  // +lazy-rescale[:T] (FlashAttention-4's rescale_threshold, softmax.py SoftmaxSm100): after a
  // KV tile the running max is kept, and O and ℓ are not rescaled, while the new max exceeds
  // it by at most T in log2 units ((m_old - m_new)·scale_log2 >= -T, in fp32 as FA4 forms it);
  // P̄ may then reach 2^T instead of 1. 0 = off (FA2, FA3: the max always moves).
  double lazy_rescale_log2 = 0.0;
  // +sw-exp2[:EVERY,START] (FlashAttention-4's ex2 emulation, emu/sfu/software_exp2.hpp): the
  // forward's P̄ exponentials go through FA4's degree-3 FMA polynomial instead of the SFU
  // ex2; all of them (sw_exp2_every == 0), or FA4's split of each 32-column fragment
  // (fa4_software_ex2_uses_polynomial with EVERY, START). The rescale factor α and the
  // backward keep the SFU, as FA4 does.
  bool sw_exp2 = false;
  int sw_exp2_every = 0, sw_exp2_start_fragment = 0;
  // fa4-sm100's own split: EVERY and START (and whether the polynomial is used at all) come
  // from FA4's tuning table for the run's head dim, causal flag, seqlen and GQA group
  // (software_exp2_split); an explicit +sw-exp2[:EVERY,START|:off] replaces it.
  bool sw_exp2_fa4_tuning = false;

  // Tile sizes this recipe uses for a problem (RunOptions' block sizes override when > 0).
  // seqlen (the query length) and seqlen_k (the key length; 0: = seqlen): models without a
  // tile table use one tile each way (block_m = seqlen, block_n = seqlen_k); causal:
  // causal_tiles_by_head_dim where given.
  TileSizes tiles_for(int head_dim, int seqlen, bool causal, int seqlen_k = 0) const;
  // Which of the forward's P̄ exponentials go through the software exp2 in a run of this
  // shape (`q_heads_per_kv_head` > 1: grouped-query attention).
  SoftwareExp2Split software_exp2_split(int head_dim, bool causal, int seqlen_q, int q_heads_per_kv_head) const;
  // Whether every part of the recipe was measured on hardware (SFUs, tensor cores); false for
  // a model with neither (has_hardware_steps), whose arithmetic no measurement covers.
  bool hardware_validated() const;
  // Whether the recipe has a tensor-core dot or evaluates a special function: the steps the
  // hardware measurements (probes, SFU tables) cover.
  bool has_hardware_steps() const;
};

// The format O leaves a kernel in, i.e. what AttentionOutputs::o holds: the output dtype for
// MMA-accumulator models, the O buffer's format for buffer models (a recipe may keep it in
// fp32), F(P̄·V)'s for materialised ones; nullopt: fp64, never rounded.
std::optional<Format> stored_o_format(const KernelModel& km);
// Why a final cast of O in a mode other than RNE (+o-MODE) would round nothing in this recipe,
// as one clause; empty when it rounds. O's value before that cast is at most fp32 (an fp32 GEMM,
// division or rescale) or exact (fp64 recipes), so a cast into fp32 or into fp64 is exact in
// every mode: +o-rtz on standard-fp32 would otherwise be accepted and silently change only the
// correctly rounded reference it is measured against. The parser, recipe files and sweep
// --round refuse or skip such a request with this clause.
std::string why_o_cast_rounds_nothing(const KernelModel& km);
// Whether the kernel's delta reads anything but its stored O: O kept in fp32 before the final
// cast (+o-fp32), or rowsum(dP∘P) (+delta-dpp, the tensor-op softmax backward).
bool delta_reads_unrounded_o(const KernelModel& km);
// Why the recipe does not model a run of `query_rows` queries over `keys` keys (`causal`: with a
// causal mask), as one clause naming the rule; empty when it does. run_attention refuses such a
// run with it: a kernel that takes another code path there (PyTorch's block softmax beyond 1024
// keys, Inductor's flex-decoding choice and its split combine) is not silently run as this one.
// batch_kv_heads: batch x kv heads, which sets the flex-decoding kernel's split count.
std::string unmodelled_shape(const KernelModel& km, int query_rows, int keys, bool causal, int batch_kv_heads = 1,
                             int heads_per_kv_head = 1);

struct RunShape;  // attention/attention.hpp
// The same for a whole run, which also reads the head dim (the Triton tutorial's asserted head
// dims and its BLOCK_N <= HEAD_DIM; flex decoding's warp layout, set by the P·V dot's
// BLOCK_M x head dim) and whether the backward runs (the tutorial backward's N_CTX % 128 assert).
// The overload above is this one with head dim 0 (those checks skipped) and no backward.
std::string unmodelled_shape(const KernelModel& km, const RunShape& shape);
// Throws std::invalid_argument "attention: NAME does not model this shape: it WHY" where
// unmodelled_shape gives a reason: run_attention's refusal, which a front end calls before it
// prints the model's warnings, so that a refused run prints no warning about itself.
void refuse_unmodelled_shape(const std::string& model_name, const KernelModel& km, const RunShape& shape);

// What this shape takes of the model that no hardware capture has measured, one "note: ..."
// line each (empty: nothing beyond the model's own status, hardware_validated()): PyTorch's
// block softmax kernels past 1024 keys, split-KV combine layouts and paths never captured, the
// causal flex decode's combine, FlexAttention's template on queries Inductor decodes, unequal
// lengths the source has no case for, and a grouped-query backward reduced as FA2 reduces it.
// replay and the Python module print or return them with every run.
std::vector<std::string> unmeasured_shape_notes(const KernelModel& km, const RunShape& shape);
// Whether the model's arithmetic draws from a run's seed (+o-sr's stream, +hadamard's signs):
// its results are the seed's, so a replay must take the recorded one and a seed for any other
// model is refused rather than ignored.
bool draws_random_bits(const KernelModel& km);
// The warning a front end prints for this run of the model beside KernelModel::warning
// (empty: none): a backward that masks causally whatever the forward did (bwd_always_causal)
// warns on the runs it makes wrong, a backward with causal off, and on those only.
std::string shape_warning(const KernelModel& km, const RunShape& shape);
// A set of integers as messages write it, "{32, 64, 128}" (the tutorial's tiles and head dims).
std::string int_set_text(const std::vector<int>& values);
// FlexAttention's decoding kernel (km.flex_decode_sms > 0): its split count for a run of
// batch_kv_heads (batch x kv heads), get_split_k in torch/_inductor/kernel/flex/flex_decoding.py.
int flex_decode_split_count(const KernelModel& km, int batch_kv_heads);

// The head dim of the FA2 kernel a head dim runs: the smallest instantiated one >= head_dim
// (static_switch.h HEADDIM_SWITCH: 32, 64, 96, 128, 192, 256; fa2_tiles in kernel_models.cpp
// lists them). head_dim in 1..256.
int fa2_instantiated_head_dim(int head_dim);
// The split count whose combine order flashbits has read (gpu/analysis/flex/FINDINGS.md "Split
// combine order": Inductor's red_7 / per_mul_8 / red_9 / per_10 for SPLIT_KV = 132).
inline constexpr int kFlexDecodeModelledSplits = 132;
// Whether a recipe can read inputs of `dtype`: a bf16 recipe cannot read fp16 values (which
// it could not represent) nor an fp16 recipe bf16 ones; fp8 recipes quantise what they get.
// run_attention refuses such inputs, and a trace's replay checks it before any run
// (parse_model_for_inputs), so that import never writes a trace replay then refuses.
bool reads_inputs_of(const KernelModel& km, const Format& dtype);
// The one input format a model's kernel runs, where it runs one only whatever dtype it was
// parsed with: fp16 for triton-tutorial-sm90 (what_the_tutorial_refuses). A caller that was
// given no dtype runs such a model in it, rather than refusing the default bf16 as a shape.
std::optional<Format> sole_input_format(const KernelModel& km);

// The table of base recipes for a given input dtype (bf16 or fp16 where the model
// does not name its own). Exposed for tests and `flashbits models`.
std::vector<KernelModel> base_kernel_models(const Format& dtype);
// The recipe of the `correctly-rounded` reference (Structure::correctly_rounded) for inputs
// of `input` and outputs (O, dQ, dK, dV) of `output`, any format of at most 32 bits.
KernelModel correctly_rounded_recipe(const Format& input, const Format& output);

// ---- recipe overrides (bias-test --recipe FILE, tools/recipe_file.hpp) ----------------
// The stages whose result format a recipe file may set: one entry per std::optional<Format>
// field of KernelModel, named as the member. `used(model)` is whether the engine's passes
// read the field for that model (attention/engine_stage_uses.cpp, beside them) (its structure, scale handling,
// accumulator, row sum, LSE, delta and backward kinds, +dynmax), so an override the model would ignore is refused
// instead of dropped. A stage format is any signed format with a zero, or std::nullopt
// (fp64: no rounding); `p_cast` must in addition hold its values exactly in a float (at
// most 24 significant bits, exponents within fp32's), since P̄ is fed to the P·V dot as
// float.
struct StageField {
  const char* name;  // e.g. "p_cast"
  const char* what;  // one line: what the stage is
  std::optional<Format> KernelModel::*member;
  bool (*used)(const KernelModel&);
};
const std::vector<StageField>& recipe_stage_fields();
// Whether the model evaluates special function f (ex2: the exponent or the backward's P;
// rcp: the normalisation; lg2: the LSE), i.e. whether replacing km.sfu's model for f
// changes anything.
bool uses_special_function(const KernelModel& km, SpecialFunction f);
// Whether the model evaluates any of them (ex2, rcp, lg2): an SFU set changes nothing otherwise.
bool evaluates_special_functions(const KernelModel& km);
// The special functions the model evaluates whose model was not measured on hardware, in the
// order ex2, rcp, lg2 (an unused function's model does not count).
std::vector<SpecialFunction> unmeasured_special_functions(const KernelModel& km);
// Whether every special function the model evaluates has a model measured on hardware.
bool sfu_hardware_measured(const KernelModel& km);
// The model's SFU set for reports: each function's model (its summary(), or describe() when
// `verbose`), and "not evaluated" for a function the model does not evaluate, so that an
// unmeasured model of an unused function is not reported as if it mattered.
std::string sfu_report(const KernelModel& km, bool verbose = false);
// What of the model no hardware measured, as reports say it: its SFU set where it has a
// tensor-core or special-function step ("SFU ... -- parts of this model are unmeasured on
// hardware"), else that its IEEE arithmetic is unmeasured; empty for a model measured on
// hardware (hardware_validated) and for the correctly rounded reference, which has no kernel
// arithmetic.
std::string unmeasured_parts(const KernelModel& km);

}  // namespace fb::attn
