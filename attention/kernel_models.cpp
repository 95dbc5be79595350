// attention/kernel_models.cpp: the ONE table of kernel recipes (docs/CLI.md "Kernel models").
// The model-name parser with its variant suffixes and help text is attention/kernel_model_parser.cpp;
// which fields the engine reads for a recipe is attention/engine_stage_uses.cpp.
//
// Every field below says where it was read from. "FA2" is Dao-AILab/flash-attention,
// csrc/flash_attn/src (v2.x): softmax.h (softmax_rescale_o, scale_apply_exp2,
// reduce_max/reduce_sum, quad_allreduce_, normalize_softmax_lse), flash_fwd_kernel.h,
// flash_bwd_kernel.h, flash_bwd_preprocess_kernel.h (dot_do_o),
// flash_fwd_launch_template.h and flash_bwd_launch_template.h (tile sizes).
// Facts that are inferred rather than read (nvcc contraction into FFMA, reduction
// orders of PyTorch/Triton, the Qiu & Yao emulation) say so next to the field.
#include "attention/kernel_models.hpp"

#include <algorithm>
#include <bit>
#include <limits>
#include <cmath>
#include <stdexcept>

#include "attention/attention.hpp"
#include "attention/splitkv.hpp"
#include "emu/dot/tensor_core.hpp"
#include "emu/dot/tensor_core_amd.hpp"

namespace fb::attn {
namespace {

DotSpec tensor_core_dot(const std::string& name) { return DotSpec{DotKind::tensor_core, name, nullptr}; }

// The dot product a PyTorch matmul of `input` tensors uses (cuBLAS on the GPU the
// reference runs were made on). bf16/fp16: tensor cores with fp32 accumulation; the
// sm80 model is assumed (A100). fp32: cuBLAS SGEMM without TF32 (PyTorch's default
// allow_tf32=False) = fp32 FMA chains; the per-thread k order is modelled as
// sequential (an assumption: cuBLAS splits k differently per kernel). fp64: FMA chain.
DotSpec torch_matmul_dot(const std::optional<Format>& input) {
  if (!input) return DotSpec{DotKind::fp64_fma_chain, "", nullptr};
  if (*input == formats::fp32) return DotSpec{DotKind::fp32_fma_chain, "", nullptr};
  return tensor_core_dot("sm80");
}

// FA2 forward tile sizes (kBlockM x kBlockN) per head dim, for A100 and H100
// (sm80/sm90: is_sm8x is false for both), no dropout, non-causal unless said:
// flash_fwd_launch_template.h run_mha_fwd_hdim32: 128x128; run_mha_fwd_hdim64:
// 128x128 ("Using block size (64 x 256) is 27% slower"); hdim96: 128x64; hdim128:
// 128x64 ("1st ones are good for H100, A100"); hdim192: 128x64; hdim256: 128x64 on A100,
// 64x64 on H100 (its shared-memory test). Backward (flash_bwd_launch_template.h, smem >= 144
// KB): hdim32/64: 128x128; hdim96/128: 64x128; hdim192/256: 64x64. Dao-AILab/flash-attention
// @0251105a csrc/flash_attn/src/. The instantiated head dims are 32, 64, 96, 128, 192, 256
// (static_switch.h HEADDIM_SWITCH; upstream dropped hdim224 in 751c762c and hdim160 in
// ce212720): a head dim runs the next instantiated one, 136 runs hdim192's 128x64. PyTorch
// 2.11's binary has exactly these (the H200 run's SASS listing,
// traces/hw/h200/sass/sass_summary.tsv: flash_fwd_kernel and the backward for 32, 64, 96,
// 128, 192, 256 and no 160 or 224).
std::vector<std::pair<int, TileSizes>> fa2_tiles(bool hopper) {
  return {
      {32, TileSizes{128, 128, 128, 128}}, {64, TileSizes{128, 128, 128, 128}},
      {96, TileSizes{128, 64, 64, 128}},   {128, TileSizes{128, 64, 64, 128}},
      {192, TileSizes{128, 64, 64, 64}},   {256, hopper ? TileSizes{64, 64, 64, 64} : TileSizes{128, 64, 64, 64}},
  };
}

KernelModel fa2(const std::string& name, const std::string& tc, const Format& dtype, bool hopper) {
  KernelModel m;
  m.gqa_reduction_as_fa2 = true;  // mha_bwd: dk_expanded in the dtype, then at::sum over the group
  m.base = name;
  m.description = "FlashAttention-2 (Dao-AILab csrc v2) as docs/DESIGN.md §6, " + tc +
                  " tensor-core model, KV blocks last to first, SFUs: correct rounding (UNMEASURED)";
  m.sources =
      "FA2 (github Dao-AILab/flash-attention @0251105a, csrc/flash_attn/src/) softmax.h, flash_fwd_kernel.h, "
      "flash_bwd_kernel.h, flash_bwd_preprocess_kernel.h; tiles: flash_fwd_launch_template.h and "
      "flash_bwd_launch_template.h @f816dee6";
  m.input = dtype;
  m.output = dtype;
  m.structure = Structure::online_softmax;
  m.kv_order = KvOrder::last_to_first;  // flash_fwd_kernel.h: n_block = n_block_max - 1 downwards
  m.tiles_by_head_dim = fa2_tiles(hopper);
  m.score_dot = tensor_core_dot(tc);
  m.score_format = formats::fp32;
  m.scale = ScaleHandling::exponent_ffma;
  m.scale_log2_from_fp32_scale =
      true;  // set_params_fprop(float softmax_scale): scale_softmax_log2 = softmax_scale * M_LOG2E
  m.max_format = formats::fp32;
  m.p_format = formats::fp32;
  m.row_sum = RowSumOrder::fa2_quad;
  m.row_sum_internal = formats::fp32;
  m.row_sum_format = formats::fp32;
  // softmax.h: `row_sum(mi) *= scores_scale;` then reduce_sum's `summary(mi) = op(summary(mi),
  // tensor(mi, 0))`: contracted into one FFMA (PyTorch's build of the same code: FFMA row_sum,
  // scores_scale, p in its SASS; its replay on H200 matches only with it).
  m.row_sum_rescale_fma = true;
  m.p_cast = dtype;  // convert_type<Element>: cvt.rn, after reduce_sum ran on the fp32 P̄
  m.pv_dot = tensor_core_dot(tc);
  m.o_acc = OAccumulator::mma_c;
  m.normalisation = Normalisation::rcp_multiply;
  m.lse = LseFormula::fa2;
  m.sfu = correct_sfu_set();
  m.ftz = true;
  m.delta = DeltaFormula::fa2_threads;
  m.backward = BackwardKernel::fa2_seqk_parallel;  // flash_bwd_kernel.h compute_dq_dk_dv_seqk_parallel
  // +splitkv's defaults (off unless named): the heuristic's SM count of the GPU the tensor-core
  // model stands for (H100 SXM and H200: 132; A100: 108), and the combine compiled with
  // --use_fast_math as upstream's setup.py:321 (Dao-AILab/flash-attention 0251105a) builds it.
  m.splitkv.sm_count = hopper ? 132 : 108;
  m.splitkv.fast_math = true;
  return m;
}

// The FA2 that PyTorch ships (aten/src/ATen/native/transformers/cuda/flash_attn/, run by
// F.scaled_dot_product_attention's flash backend): FA2's algorithm and tiles, compiled
// differently. Three facts, each read in PyTorch's sources and settled by the SASS of
// torch 2.11.0+cu130's kernels disassembled on an H200 (gpu/sass_flash.py):
// - softmax.h `#define UNFUSE_FMA`: exp2f(__fmul_rn(S, scale_log2) - max_scaled), an FMUL and
//   an FADD before MUFU.EX2, in the forward and in the backward's P;
// - no fast math: exp2f is libdevice's ex2.approx.f32 (FSETP.GEU -126, FMUL 0.5, MUFU.EX2,
//   FMUL r*r), `1.f / sum` an IEEE reciprocal (MUFU.RCP, two FFMAs, a CALL to the slow
//   path), fp32 operations keep subnormals, __logf(sum) = MUFU.LG2 * ln2 (prescaled by 2^24
//   below 2^-126) fused into the LSE's FFMA;
// - flash_api.cpp mha_fwd calls set_params_splitkv, whose num_splits_heuristic(batch*heads*
//   ceil(seqlen_q/64), 2*SMs, ceil(seqlen_k/block_n), 128) picks a split-KV kernel plus a
//   combine kernel when batch*heads*m_blocks < 0.8*2*SMs and seqlen_k spans >= 2 of its blocks
//   (block_n 256 for d <= 64, 128 for d <= 128). The variant +splitkv models it: the five
//   split-KV captures of 2026-12-04 (traces/hw/h200/paths/splitkv; 2, 4 and 8 splits, decode,
//   cross and square shapes, bf16 and fp16) replay bit for bit under pytorch-fa2-sm90+splitkv
//   (docs/DESIGN.md §6 "Split-KV"); gpu/capture_torch.py still tiles its heads to 64 to avoid it.
KernelModel pytorch_fa2(const std::string& name, const std::string& tc, const Format& dtype, bool hopper) {
  KernelModel m = fa2(name, tc, dtype, hopper);
  m.description =
      "FlashAttention-2 as PyTorch ships it (SDPA flash backend): FA2's steps and tiles with the "
      "exponent argument unfused (FMUL, FADD), libdevice exp2f (x < -126: ex2(x/2)^2), IEEE "
      "reciprocal 1/l, no flush to zero; " +
      tc + " tensor-core model; split-KV only with +splitkv (replayed bit for bit on the H200)";
  m.sources =
      "PyTorch aten/src/ATen/native/transformers/cuda/flash_attn/softmax.h (#define UNFUSE_FMA; "
      "scale_apply_exp2; normalize_softmax_lse: inv_sum = 1.f / sum, lse = row_max * softmax_scale + "
      "__logf(sum)), flash_api.cpp (set_params_fprop: scale_softmax_log2 = softmax_scale * M_LOG2E; "
      "set_params_splitkv/num_splits_heuristic with 2*SMs), flash_fwd/bwd_launch_template.h (tiles as "
      "upstream FA2); no fast math and the three compiled forms above: SASS of torch 2.11.0+cu130 "
      "(cuobjdump -sass libtorch_cuda.so, NVIDIA H200, 2026-11-26; traces/hw/h200/sass/)";
  m.exponent_argument = ExponentArgument::fmul_fadd;
  m.exp2_function = Exp2Function::exp2f_libdevice;
  m.normalisation = Normalisation::ieee_reciprocal;
  m.ftz = false;
  m.splitkv.fast_math = false;  // the combine kernel's expf/logf: CUDA's, without fast math
  return m;
}

KernelModel standard(const Format& f) {
  KernelModel m;
  m.gqa_reduction_as_fa2 = true;  // expand's backward sums the group's rounded gradients in fp32
  m.base = std::string("standard-") + f.name;
  m.description = std::string("materialised attention as PyTorch eager runs it in ") + f.name +
                  ": each matmul fp32-accumulated and rounded to " + f.name +
                  ", softmax in fp32 from the rounded scores, rounded to " + f.name;
  m.sources =
      "docs/CLI.md; FlashAttention-3 paper's baseline; PyTorch softmax kernels (fp32 accumulate, "
      "reduction order modelled as pairwise: an assumption)";
  m.input = f;
  m.output = f;
  m.structure = Structure::materialised;
  m.kv_order = KvOrder::first_to_last;
  m.score_dot = torch_matmul_dot(f);
  m.score_format = f;
  m.scale = ScaleHandling::multiply_scores;
  m.scaled_score_format = f;
  m.max_format = f;
  m.sub_format = formats::fp32;  // softmax: fp32 inside (x - max in fp32 from FMT values)
  m.p_format = formats::fp32;
  m.row_sum = RowSumOrder::pairwise;
  m.row_sum_internal = formats::fp32;
  m.row_sum_format = formats::fp32;
  m.p_cast = f;  // softmax output rounded to FMT
  m.pv_dot = torch_matmul_dot(f);
  m.o_acc = OAccumulator::buffer;
  m.o_buffer_format = f;
  m.pv_result_format = f;
  m.normalisation = Normalisation::divide_in_format;  // softmax divides in fp32 then rounds (see engine)
  m.lse = LseFormula::natural;
  m.lse_format = formats::fp32;
  m.sfu = correct_sfu_set();
  m.ftz = false;
  m.delta = DeltaFormula::softmax_backward;
  m.bwd_format = f;
  m.backward = BackwardKernel::tensor_ops;  // autograd through the tensor ops above
  return m;
}

// PyTorch's SDPA math backend (SDPBackend.MATH, _scaled_dot_product_attention_math) on CUDA, as
// PyTorch 2.11 runs it for bf16/fp16 inputs with its default flags: the whole computation in
// fp32 through cuBLAS SIMT SGEMMs and PyTorch's softmax kernels (the warp kernels, and for rows
// over 2048 keys forward or 1024 backward the block kernels of pytorch_softmax, read from the
// source and not yet captured). The four captures of 2026-12-04
// (traces/hw/h200/paths/math: bf16 and fp16, square, causal, and cross-attention with top-left and
// bottom-right masks) replay bit for bit, every element of O, dQ, dK and dV; each ingredient below
// was also shown to matter by the bits (gpu/analysis/math_cudnn/FINDINGS.md, part A).
KernelModel pytorch_math_sm90(const Format& dtype) {
  KernelModel m;
  m.base = "pytorch-math-sm90";
  m.description =
      "PyTorch's SDPA math backend (SDPBackend.MATH) on CUDA: q, k, v upcast to fp32, q and k each "
      "multiplied by fp32(sqrt(scale)), every GEMM an fp32 FMA chain over k from 0 (cuBLAS SIMT FFMA), "
      "warp softmax (32 lanes, xor butterfly) with CUDA's expf, P = e / sum, backward dS = fma(-P, sum, "
      "dP*P); replayed bit for bit on the H200 (O, dQ, dK, dV) with rows of 256 keys; rows over 1024 keys "
      "(PyTorch's block softmax kernels, read from the source, up to 9216 keys) UNMEASURED";
  m.sources =
      "pytorch/pytorch aten/src/ATen/native/transformers/attention.cpp _scaled_dot_product_attention_math "
      "(query_acc = query_.to(kFloat) when !allowFP16BF16ReductionMathSDP; scaling_factor = "
      "calculate_scale(...).sqrt(); query = query_acc * scaling_factor; key_acc.transpose(-2, -1) * "
      "scaling_factor; _safe_softmax; matmul(attn, value).to(origin_dtype)); aten/src/ATen/native/cuda/"
      "PersistentSoftmax.cuh softmax_warp_forward (dim <= 2048) / softmax_warp_backward (dim <= 1024); "
      "SoftMax.cu as of 2.10: host_softmax (cunn_SoftMaxForwardReg past 2048 keys, up to 9216), "
      "host_softmax_backward (cunn_SoftMaxBackwardSmem or cunn_SoftMaxBackward past 1024), "
      "softmax_backward_cuda_out (gI = gO * out first); kernels in the H200 capture logs of 2026-12-04 "
      "(traces/hw/h200/paths/math/capture_log.jsonl: direct_copy to float, "
      "sm80_xmma_gemm_f32f32_f32f32_f32_*_tilesize32x32x8_*_ffma cuBLAS kernels without split-K, "
      "softmax_warp_forward<float,float,float,8>, BinaryFunctor MulFunctor, softmax_warp_backward); "
      "the FMA order, expf and contraction settled from the bits (gpu/analysis/math_cudnn/FINDINGS.md)";
  m.input = dtype;
  m.output = dtype;
  m.structure = Structure::materialised;
  m.kv_order = KvOrder::first_to_last;
  m.score_dot = DotSpec{DotKind::fp32_fma_chain, "", nullptr};  // sm80_xmma_gemm_f32f32 ... ffma: one chain per output
  m.score_format = formats::fp32;
  m.scale = ScaleHandling::sqrt_prescale_qk;
  m.max_format = formats::fp32;
  m.sub_format = formats::fp32;  // x - max in the warp softmax, fp32
  m.p_format = formats::fp32;    // e = expf(x - max); P = e / sum, one IEEE division
  m.cuda_expf = true;            // std::exp on float in device code: CUDA's expf over MUFU.EX2
  m.row_sum = RowSumOrder::warp_softmax;
  m.row_sum_internal = formats::fp32;
  m.row_sum_format = formats::fp32;
  m.p_cast = formats::fp32;  // attn stays fp32 for matmul(attn, value)
  m.pv_dot = DotSpec{DotKind::fp32_fma_chain, "", nullptr};
  m.o_acc = OAccumulator::buffer;
  m.o_buffer_format = formats::fp32;
  m.pv_result_format = dtype;  // .to(origin_dtype): one RNE cast of the fp32 GEMM result
  m.normalisation = Normalisation::divide_in_format;
  m.lse = LseFormula::natural;  // the math backend returns no LSE; fp32(m + log ℓ) for bias-test
  m.lse_format = formats::fp32;
  m.sfu = correct_sfu_set();  // replay of H200 captures takes the measured hw-sm90 set (expf's ex2)
  m.ftz = false;
  m.delta = DeltaFormula::softmax_backward;  // softmax_warp_backward's sum of fp32(dP*P), warp order
  m.softmax_grad_fma = true;
  m.bwd_format = formats::fp32;
  m.backward = BackwardKernel::tensor_ops;  // autograd: dV = Pᵀ·dO, dP = dO·Vᵀ, dq' = dS·k', dk' = dSᵀ·q'
  return m;
}

KernelModel golden(const std::optional<Format>& f, const std::string& fname, bool flash) {
  KernelModel m;
  m.base = "golden-" + fname + (flash ? "-flash" : "-baseline");
  m.description =
      std::string("Golden et al. microbenchmark, ") +
      (flash ? "Flash (tiled online softmax)" : "Baseline (materialised)") + ", every tensor op rounded to " + fname +
      (f ? ", fp32 inside matmuls/sums/softmax" : ", exp and log in fp64 (libm's, UNMEASURED against CUDA's)");
  m.sources =
      "Golden et al. 2024 'Is Flash Attention Stable?' (docs/DESIGN.md §8); tiles B_c = ceil(M/4d), "
      "B_r = min(ceil(M/4d), d) with M = 32768 elements (assumed SRAM size)";
  const Format io = f ? *f : formats::fp32;  // fp64 values are reported as they are (Tensor4 holds doubles)
  m.input = io;
  m.output = io;
  m.structure = flash ? Structure::online_softmax : Structure::materialised;
  m.kv_order = KvOrder::first_to_last;
  m.golden_tiles = flash;
  auto acc = [&](void) -> std::optional<Format> {  // "accumulate in fp32 inside": fp64 stays fp64
    if (!f) return std::nullopt;
    return formats::fp32;
  };
  m.score_dot = torch_matmul_dot(f);
  m.score_format = f;
  m.scale = ScaleHandling::multiply_scores;
  m.scaled_score_format = f;
  m.max_format = f;
  m.row_sum = RowSumOrder::pairwise;
  if (flash) {
    // The online softmax written with FMT tensors: S - m, exp, and the ℓ update are
    // each a tensor op rounded to FMT (the row sum reduces in fp32 inside, rounds once).
    m.sub_format = f;
    m.p_format = f;
    m.row_sum_internal = f;
    m.row_sum_format = f;
  } else {
    // torch.softmax on an FMT tensor: fp32 inside, one rounding of the output.
    m.sub_format = acc();
    m.p_format = acc();
    m.row_sum_internal = acc();
    m.row_sum_format = acc();
  }
  m.p_cast = f;
  m.pv_dot = torch_matmul_dot(f);
  m.o_acc = OAccumulator::buffer;
  m.o_buffer_format = f;
  m.pv_result_format = f;
  m.normalisation = Normalisation::divide_in_format;
  m.lse = LseFormula::natural;
  m.lse_format = acc();
  m.sfu = correct_sfu_set();
  m.fp64_opmath = !f;  // torch.exp/log of an fp64 tensor compute in fp64
  m.ftz = false;
  m.delta = DeltaFormula::softmax_backward;
  m.bwd_format = f;
  m.backward = BackwardKernel::tensor_ops;  // autograd through the tensor ops above
  return m;
}

KernelModel fa_bf16acc() {
  // docs/DESIGN.md §7 "The authors' emulation, step by step", checked line by line against
  // their attention.py (ucker/why-low-precision-training-fails @30ef0216) under bf16
  // autocast: which tensors are bf16 and which fp32 follows PyTorch's type promotion and
  // autocast lists (einsum -> bf16; exp, log -> fp32). What stays inferred: cuBLAS's
  // accumulation order inside each einsum and torch.sum's reduction order.
  KernelModel m;
  m.base = "fa-bf16acc";
  m.unequal_lengths_note =
      "Qiu & Yao's causal mask is placed by q_start = tile*512 - max(Nk - Nq, 0) (top-left when Nq > Nk, "
      "misplaced when Nk > Nq); with Nq != Nk this run applies the engine's causal rule instead (docs/DESIGN.md "
      "§7): their arithmetic, not their mask placement";
  m.unequal_lengths_note_only_when_causal = true;
  m.description =
      "Qiu & Yao's pure-PyTorch FlashAttention (bf16 autocast): 512x512 tiles, m and l in bf16, each tile's "
      "row sum in fp32 clamped to >= 1e-10 (their clamp(min=EPSILON)), P̄V fp32-accumulated returned bf16, O "
      "accumulator and division in bf16; backward as it computes under CUDA autocast (D = fp32 sum of bf16 "
      "dO*O products, dP - D and dS in fp32, every einsum bf16). NOT as they trained: train.py calls "
      "loss.backward() outside autocast, where their backward raises a dtype error (einsum of fp32 P with bf16 "
      "dO), so no run of theirs computed these gradients as written; train.py also compiles the model "
      "(torch.compile, whose fusions can skip bf16 roundings: eager semantics modelled); causal runs: their "
      "loop also visits KV tiles wholly above the diagonal, masked with -finfo(bf16).max (a clamped block sum "
      "of 1e-10, and with STABLE=1 a max of 0), which the model skips unless +visit-masked-tiles is given. "
      "ASSUMED: torch.exp and torch.log on fp32 are correctly rounded; on a GPU torch.exp is CUDA's expf (an "
      "FMA range reduction around ex2.approx.ftz, <= 2 ulp), which +cuda-expf models";
  m.sources =
      "docs/DESIGN.md §7; ucker/why-low-precision-training-fails attention.py and train.py @30ef0216 (dtypes "
      "per PyTorch autocast and type promotion; einsum and sum reduction orders assumed)";
  m.input = formats::bf16;
  m.output = formats::bf16;
  m.structure = Structure::online_softmax;
  m.kv_order = KvOrder::first_to_last;
  m.tiles_by_head_dim = {{0, TileSizes{512, 512, 512, 512}}};
  m.score_dot = tensor_core_dot("sm80");
  m.score_format = formats::bf16;  // einsum under autocast returns bf16
  m.scale = ScaleHandling::multiply_scores;
  m.scaled_score_format = formats::bf16;
  m.scale_in_input_dtype =
      false;  // python float scalar times a bf16 tensor: op in bf16 (scale kept exact until the op)
  m.max_format = formats::bf16;
  m.sub_format = formats::bf16;  // S - m in bf16
  m.p_format = formats::fp32;    // exp autocast to fp32
  m.row_sum = RowSumOrder::pairwise;
  m.row_sum_internal = formats::fp32;  // l update in fp32, stored to bf16
  m.row_sum_format = formats::bf16;
  m.row_sum_clamp_min = 1e-10;  // block_row_sums = exp_weights.sum(...).clamp(min = EPSILON), fp32
  m.p_cast = formats::bf16;     // einsum's autocast, after exp_weights.sum ran in fp32
  m.pv_dot = tensor_core_dot("sm80");
  m.o_acc = OAccumulator::buffer;
  m.o_buffer_format = formats::bf16;
  m.pv_result_format = formats::bf16;
  m.normalisation = Normalisation::divide_in_format;
  m.lse = LseFormula::natural;
  m.lse_format = formats::fp32;
  m.sfu = correct_sfu_set();
  m.ftz = false;
  // backward(), run under autocast: D = (doc * oc).sum(-1): the bf16 product is a plain bf16 op,
  // sum autocasts to fp32, so D stays fp32; ds = p * scale * (dp - D): bf16 dp minus fp32 D
  // promotes to fp32 (engine: the subtraction's format is promoted(bwd_format, delta_format)).
  m.delta = DeltaFormula::rounded_products;
  m.delta_product_format = formats::bf16;
  m.delta_format = formats::fp32;
  m.bwd_format = formats::bf16;             // every einsum autocasts to bf16; dq/dk/dv.add_ in bf16
  m.backward = BackwardKernel::tensor_ops;  // their backward(): Algorithm 2, tile by tile
  return m;
}

// The Triton fused-attention tutorial, triton-lang/triton python/tutorials/06-fused-attention.py
// (read at commit 003da478d84f5bb0f51b3988cf0ea0bbe60282b7). Each field says which line of
// the tutorial it models; "tl.sum order" and "tl.dot order" are assumptions (pairwise and
// the sm80 MMA model). The tutorial is written for fp16 (p.to(tl.float16), dsT.to(tl.float16));
// with bf16 inputs the model casts P̄ and dS to bf16 instead (ASSUMED adaptation).
// The tutorial's host assert on the head dim (_attention.forward: HEAD_DIM_K in {...}) and its
// backward's PRE_BLOCK (assert N_CTX % PRE_BLOCK == 0), shared by both tutorial models.
const std::vector<int> kTutorialAssertedHeadDims = {16, 32, 64, 128, 256};
constexpr int kTutorialPreBlock = 128;

KernelModel triton_tutorial(const Format& dtype) {
  KernelModel m;
  m.unequal_lengths_note =
      "the Triton tutorial takes one N_CTX for q and k; with other lengths its masks are extended as "
      "docs/DESIGN.md §6 describes (ASSUMED: no Triton source has the case)";
  m.base = "triton-tutorial";
  m.description =
      "Triton fused-attention tutorial (06-fused-attention.py): forward qk_scale = fp32(sm_scale*1.44269504), "
      "max in scaled log2 units, l = 1 initially, l = fma(l, alpha, rowsum), P̄ = exp2(fma(qk, qk_scale, -m)) "
      "(causal diagonal block: fp32(qk*qk_scale) then - m), acc fp32 through tl.dot as C, O = acc / l, "
      "M = m + log2(l); backward: delta = tl.sum(o*do) in fp32 from the stored O, K pre-scaled on the host "
      "K' = F(fp32(k*fp32(sm_scale*1.4426950408889634))), P = exp2(Q·K'ᵀ - M), dS = P*(dP - delta) cast to F, "
      "dV, dK per 128-key block over 32-row steps (16 on the causal diagonal), dQ per 128-row block over "
      "32-key steps (diagonal first), dK *= sm_scale, dQ *= fp32(ln 2); sm80 tensor-core model, KV first to "
      "last, SFUs: correct rounding (UNMEASURED), fp32 division modelled correctly rounded (Triton emits "
      "div.full.f32, <= 2 ulp: UNMEASURED); backward is the tutorial's causal kernel (non-causal: ASSUMED "
      "extension over all rows/keys from 0)";
  m.sources =
      "triton-lang/triton python/tutorials/06-fused-attention.py @003da478: _attn_fwd (qk_scale = sm_scale; "
      "qk_scale *= 1.44269504; m_i = -inf; l_i = 1.0; epilogue m_i += log2(l_i), acc / l_i), _attn_fwd_inner "
      "(m_ij = max(m_i, max(qk)*qk_scale); qk = qk*qk_scale - m_ij; causal on-band: qk = qk*qk_scale + mask, "
      "qk -= m_ij; p = exp2(qk); alpha = exp2(m_i - m_ij); l_i = l_i*alpha + sum(p); p.to(fp16); "
      "acc = dot(p, v, acc)), _attention.backward (arg_k = k * (sm_scale * RCP_LN2), BLOCK_M1, BLOCK_N1, "
      "BLOCK_M2, BLOCK_N2 = 32, 128, 128, 32; BLK_SLICE_FACTOR = 2), _attn_bwd_preprocess (delta = "
      "sum(o * do.to(fp32))), _attn_bwd_dkdv (pT = exp2(qkT - m); dv += dot(pT.to(fp16), do); "
      "dsT = pT*(dpT - Di); dk += dot(dsT.to(fp16), qT)), _attn_bwd_dq (ds = p*(dp - Di); "
      "dq += dot(ds.to(fp16), kT) with the pre-scaled kT), _attn_bwd (dk *= sm_scale; dq *= LN2 = "
      "0.6931471824645996). Triton fp-fusion contracts a*b + c into FMA (default enable_fp_fusion); "
      "div.full.f32 from TritonGPUToLLVM FDivOpConversion. ASSUMED: tl.sum pairwise, tl.dot as sm80 MMA, "
      "exp2/log2 correctly rounded";
  m.input = dtype;
  m.output = dtype;
  m.structure = Structure::online_softmax;
  m.kv_order = KvOrder::first_to_last;  // for start_n in range(lo, hi, BLOCK_N)
  // Forward BLOCK_M x BLOCK_N is autotuned over {64, 128} x {32, 64} (`configs`; `keep` drops only
  // 8-warp configs) at run time; 128 x 64 is modelled (+tile:BMxBN names another candidate).
  // Backward: bwd_block_n = BLOCK_N1 = BLOCK_M2 = 128, bwd_block_m = BLOCK_M1 = BLOCK_N2 = 32.
  m.tiles_by_head_dim = {{0, TileSizes{128, 64, 32, 128}}};
  m.tutorial_tiles.asserted_head_dims = kTutorialAssertedHeadDims;
  m.tutorial_tiles.block_m = {64, 128};
  m.tutorial_tiles.block_n = {32, 64};
  m.score_dot = tensor_core_dot("sm80");  // tl.dot(q, k), fp32 accumulator
  m.score_format = formats::fp32;
  m.scale = ScaleHandling::log2_units;     // m_ij = max(m_i, max(qk)*qk_scale); exp2(qk*qk_scale - m_ij)
  m.causal_band_two_step_exponent = true;  // causal on-band: qk = qk*qk_scale + mask; qk -= m_ij
  m.max_format = formats::fp32;
  m.p_format = formats::fp32;
  m.row_sum = RowSumOrder::pairwise;  // l_ij = tl.sum(p, 1) (order assumed)
  m.row_sum_over_full_tile = true;    // tl.sum over all BLOCK_N columns, masked ones are 0
  m.row_sum_internal = formats::fp32;
  m.row_sum_format = formats::fp32;
  m.l_init_one = true;                 // l_i = zeros + 1.0
  m.l_update_fma = true;               // l_i = l_i*alpha + l_ij, fused
  m.p_cast = dtype;                    // p.to(tl.float16), after tl.sum(p) (bf16: adaptation, see above)
  m.pv_dot = tensor_core_dot("sm80");  // acc = tl.dot(p, v, acc)
  m.o_acc = OAccumulator::mma_c;
  m.normalisation = Normalisation::divide_fp32;  // acc / l_i (div.full.f32 modelled as correctly rounded)
  m.lse = LseFormula::log2_units;                // M = m_i + log2(l_i)
  m.sfu = correct_sfu_set();
  m.ftz = false;
  // _attn_bwd_preprocess: o (stored dtype) * do.to(fp32): products exact in fp32, tl.sum in fp32.
  m.delta = DeltaFormula::rounded_products;
  m.delta_product_format = formats::fp32;
  m.delta_format = formats::fp32;
  m.backward = BackwardKernel::triton_prescaled_k;
  m.bwd_k_prescale = 1.4426950408889634;  // RCP_LN2 in _attention.backward
  m.bwd_mask_slice = 2;                   // BLK_SLICE_FACTOR
  return m;
}

// FA3 forward tile sizes (kBlockM x kBlockN) for 1-byte elements on sm90, non-causal,
// V row-major, no paged KV: hopper/tile_size.h tile_size_fwd_sm90 (element_size != 2):
// hdim <= 64: 192x160; <= 96: 192x128; <= 128: 128x224; <= 192: 128x160; else 128x128; for
// causal runs too (only local attention changes kBlockN for 1-byte elements). FA3 has no fp8
// backward.
std::vector<std::pair<int, TileSizes>> fa3_fp8_tiles() {
  return {
      {64, TileSizes{192, 160, 192, 160}},  {96, TileSizes{192, 128, 192, 128}},  {128, TileSizes{128, 224, 128, 224}},
      {192, TileSizes{128, 160, 128, 160}}, {256, TileSizes{128, 128, 128, 128}},
  };
}

// The tutorial as Triton 3.6 compiles it for sm_90 (PyTorch 2.11, H200), read from the PTX and
// SASS of the kernels that ran (traces/hw/h200/paths/tutorial/sass/, 2026-12-04): on sm_90 the
// tutorial takes its TMA forward (_attn_fwd_tma; supports_tma()), whose tl.dot lowers to wgmma
// m64nNk16 with the fp32 accumulator as C; tl.math.exp2 is ex2.approx.ftz.f32 (the MUFU),
// qk*qk_scale - m_ij one fma.rn.f32 (fp-fusion), tl.sum(p, 1) a per-thread add.f32 chain over
// the thread's accumulator columns then shfl.bfly 2 and 1, acc / l_i div.full.f32 (SASS: MUFU.RCP
// of l, operands scaled only outside [2^-126, 2^126], then FMUL: O = fp32(acc * rcp(l)), l >= 1
// here), tl.math.log2 libdevice's __nv_log2f (software, no MUFU.LG2). The backward always masks
// causally (_attn_bwd has no CAUSAL argument).
KernelModel triton_tutorial_sm90(const Format& dtype) {
  KernelModel m = triton_tutorial(dtype);
  m.base = "triton-tutorial-sm90";
  m.description =
      "Triton fused-attention tutorial as Triton 3.6 compiles it on sm_90 (its TMA forward): the "
      "triton-tutorial recipe with the sm90 wgmma tensor-core model, P̄ = ex2.approx.ftz (the MUFU), "
      "tl.sum(p) per thread over its accumulator columns then (t0+t2)+(t1+t3), O = fp32(acc * rcp(l)) "
      "(div.full.f32), M = m + __nv_log2f(l) (libdevice, software), a backward that always masks "
      "causally (as the tutorial's does); measured on the H200: docs/FINDINGS.md \"Attention paths\"";
  m.sources = m.sources +
              "; sm_90 code: PTX and SASS of _attn_fwd_tma, _attn_bwd and _attn_bwd_preprocess as Triton 3.6.0 "
              "compiled them for the H200 (PyTorch 2.11.0+cu130, 2026-12-04; traces/hw/h200/paths/tutorial/sass/): "
              "wgmma.mma_async m64n64k16/m64n128k16 .f32.f16.f16, ex2.approx.ftz.f32, fma.rn.f32, add.f32 chains "
              "and shfl.sync.bfly 2, 1 for tl.sum, div.full.f32 (MUFU.RCP + FMUL), __nv_log2f inlined; delta: "
              "d/8 threads per row, 8 columns each, mul + 7 fma.rn.f32, shfl.sync.bfly d/16 .. 1";
  m.score_dot = tensor_core_dot("sm90-wgmma");
  m.pv_dot = tensor_core_dot("sm90-wgmma");
  m.row_sum = RowSumOrder::triton_quad;
  m.row_sum_over_full_tile = false;
  m.normalisation = Normalisation::rcp_multiply;
  m.lse = LseFormula::log2_libdevice;
  // _attn_bwd_preprocess (PTX, d 64 and 128): each row's d/8 threads hold 8 contiguous columns,
  // a mul then seven fma.rn.f32 in column order (the products of 16-bit values are exact), then
  // shfl.bfly d/16 .. 1: FA4's preprocess layout (chunk d for d 32, 64, 128).
  m.delta = DeltaFormula::fa4_threads;
  m.bwd_always_causal = true;
  // The kernel as it runs, so what it refuses is refused (unmodelled_shape): _attention.forward's
  // `assert HEAD_DIM_K in {16, 32, 64, 128, 256}`; _attn_fwd_tma's autotune over configs_tma
  // (BLOCK_M {64, 128} x BLOCK_N {32, 64, 128}; keep_tma drops only 8-warp configs below 128 x 128
  // on sm_90) with `tl.static_assert(BLOCK_N <= HEAD_DIM)`, so head dim 32 can only run BLOCK_N 32
  // (modelled 128 x 32) and head dim 16 no config at all; one N_CTX = q.shape[2] for q, k and v;
  // no bounds masks; the backward's `assert N_CTX % PRE_BLOCK == 0` (PRE_BLOCK = 128).
  m.tiles_by_head_dim = {{32, TileSizes{128, 32, 32, 128}}, {0, TileSizes{128, 64, 32, 128}}};
  m.tutorial_tiles.block_n = {32, 64, 128};
  m.tutorial_tiles.strict = true;
  m.unequal_lengths_note.clear();  // refused instead
  return m;
}

// PyTorch 2.11's FlexAttention (torch.compile(flex_attention), Inductor's Triton templates, Triton
// 3.6) on sm_90, read from the PTX and SASS of the kernels that ran on the H200
// (traces/hw/h200/paths/flex/sass/, 2026-12-04) and reproduced bit for bit on its captures.
// Head dim 64 measured (BLOCK_M = BLOCK_N = 128 forward; backward BLOCK_M1 = 64, BLOCK_N1 = 128,
// BLOCK_M2 = 128, BLOCK_N2 = 64); other head dims take the same tiles (ASSUMED: Inductor's
// tuning tables pick per head dim). Queries of fewer than 128 rows run the flex-decoding template instead:
// flex-decoding-sm90.
KernelModel flex_attention_sm90(const Format& dtype) {
  KernelModel m;
  m.min_query_rows_run = 128;  // _use_flex_decoding: seq_len_q < 128 runs flex-decoding
  m.base = "flex-attention-sm90";
  m.description =
      "PyTorch 2.11 FlexAttention (torch.compile, Triton 3.6) on sm_90: 128 x 128 tiles through sm90-wgmma, "
      "KV blocks partially masked first then full (each ascending), S = fp32(qk*scale) then max of "
      "fp32(S*1.44269504), P̄ = ex2.approx.ftz(fma(S, log2e, -m)) (partial blocks: fp32(S*log2e) - m), "
      "m = -inf, l = 0, alpha = ex2(m_old - m_new), tile row sum per thread then (t0+t2)+(t1+t3), "
      "l = fma(l, alpha, rowsum), O = fp32(acc * rcp(l)) (div.full.f32), M = m + __nv_log2f(l); backward: "
      "delta 8 threads per row (mul + 7 fma, xor 4, 2, 1), P = ex2(fma(S, log2e, -M)), dS = P*(dP - delta) "
      "cast to F, dK/dV per 128 keys over 64-row steps, dQ per 128 rows over 64-key steps, dQ, dK *= scale; "
      "measured on the H200; a length that is not a multiple of 128 takes the two-step exponent on every block "
      "(ASSUMED from the decode capture); queries under 128 rows run flex-decoding-sm90 instead";
  m.sources =
      "pytorch/pytorch torch/_inductor/kernel/flex/templates/flex_attention.py.jinja (forward_inner over "
      "KV_IDX with IS_FULL_BLOCKS=False, then over FULL_KV_IDX with IS_FULL_BLOCKS=True; l_i = 0, m_i = -inf; "
      "l_i = where(l_i == 0, 1, l_i); acc / l_i; lse = m_i + log2(l_i)), common.py.jinja forward_block_mn "
      "(qk *= SM_SCALE; post_mod_scores = where(mask, ., -inf) on partial blocks; post_mod_scores *= RCP_LN2; "
      "m_ij = max(m_i, max(post_mod_scores)); alpha = exp2(m_i - m_ij); p = exp2(post_mod_scores - m_ij); "
      "l_i = l_i*alpha + sum(p); acc = acc*alpha; acc = dot(p.to(dtype), v, acc)), flex_backwards.py.jinja "
      "(bwd_dq_inner / bwd_dkdv_inner over partial then full blocks; pT = exp2(qkT*RCP_LN2 - lse), lse = "
      "where(lse == -inf, 0, lse); dsT = pT*(dpT - Di); dq *= SM_SCALE, dk *= SM_SCALE), "
      "torch/nn/attention/flex_attention.py (_create_empty_block_mask: one 2^30 block without a mask; "
      "_dense_to_ordered: ascending block indices; lse * math.log(2) returned). sm_90 code: PTX and SASS "
      "as Triton 3.6.0 compiled them for the H200 (PyTorch 2.11.0+cu130, 2026-12-04; "
      "traces/hw/h200/paths/flex/sass/): triton_tem_fused_flex_attention_* (wgmma m64n128k16 and "
      "m64n64k16 .f32.bf16.bf16, mul.f32 by the scale then by 0f3FB8AA3B, fma.rn.f32 into "
      "ex2.approx.ftz.f32 on full blocks, sub.f32 after the select on partial ones, add.f32 chains and "
      "shfl.sync.bfly 2, 1, fma for l, div.full.f32 = MUFU.RCP + FMUL, __nv_log2f inlined), "
      "triton_per_fused_flex_attention_backward_mul_0 (delta: 8 threads per row, mul then 7 fma.rn.f32, "
      "shfl.sync.bfly 4, 2, 1), triton_tem_fused_flex_attention_backward_mul_1 (256 threads, wgmma "
      "m64n64k16, the same fma / sub split for P, mul.f32 by the scale on dQ and dK)";
  m.input = dtype;
  m.output = dtype;
  m.structure = Structure::online_softmax;
  m.kv_order = KvOrder::partial_then_full;
  m.tiles_by_head_dim = {{0, TileSizes{128, 128, 64, 128}}};
  m.score_dot = tensor_core_dot("sm90-wgmma");  // 2 x 4 wgmma m64n128k16, the first from C = 0
  m.score_format = formats::fp32;
  m.scale = ScaleHandling::log2_units;     // the max of post_mod_scores in log2 units
  m.scale_before_log2e = true;             // qk *= SM_SCALE; post_mod_scores *= RCP_LN2
  m.causal_band_two_step_exponent = true;  // partial blocks: where(mask, ., -inf) before the subtraction
  m.max_format = formats::fp32;
  m.p_format = formats::fp32;
  m.row_sum = RowSumOrder::triton_quad;  // tl.sum(p, 1) on the wgmma accumulator layout
  m.row_sum_internal = formats::fp32;
  m.row_sum_format = formats::fp32;
  m.l_init_one = false;                      // l_i = zeros
  m.l_update_fma = true;                     // l_i = l_i*alpha + l_ij, contracted
  m.p_cast = dtype;                          // p.to(MATMUL_PRECISION)
  m.pv_dot = tensor_core_dot("sm90-wgmma");  // 2 x 8 wgmma m64n64k16 with acc as C
  m.o_acc = OAccumulator::mma_c;
  m.normalisation = Normalisation::rcp_multiply;  // div.full.f32: MUFU.RCP + FMUL (l == 0 -> 1)
  m.lse = LseFormula::log2_libdevice;             // lse = m_i + log2(l_i), __nv_log2f
  m.sfu = correct_sfu_set();                      // replay of H200 captures takes the measured hw-sm90 set
  m.ftz = false;
  // triton_per_fused_flex_attention_backward_mul_0 (the autotuned XBLOCK 8/32 configs, which the
  // 512-row capture needs): 8 threads per row over 8 contiguous columns, fp32(o1*do1) then FMAs of
  // columns 0, 2..7 (the products are exact, so this is the column order), shfl.bfly 4, 2, 1:
  // FA4's preprocess layout for d 64. The grad_lse term adds fma(-0, log2e, sum) = sum.
  m.delta = DeltaFormula::fa4_threads;
  m.backward = BackwardKernel::flex_blocks;
  return m;
}

// Inductor's flex-decoding kernel (torch/_inductor/kernel/flex/flex_decoding.py and its template),
// which torch.compile(flex_attention) runs instead of the attention template for queries of fewer
// than 128 rows (_use_flex_decoding, unless FORCE_USE_FLEX_ATTENTION): BLOCK_M 16, BLOCK_N 64, two
// warps of mma.sync m16n8k16, and a split-KV combine. Without a block mask the default mask is one
// sparse block of 2^30 keys, so split 0 takes every key block and the other splits are empty; the
// combine (alpha = ex2(M_s - max M), sums of fma(alpha, L_s or ACC_s, .), div.full, log2f + max)
// is then exact, O = acc / l and M = m + log2f(l) as the attention template's. Under a causal
// block mask the keys spread over the splits (flex_decode_split_row), joined in the combine order
// read from the PTX for 132 splits (batch x kv heads = 2; other split counts refused): ASSUMED.
// Measured: the H200 decode capture (q16 k1024 d64, bf16) replays bit for bit, forward and backward.
KernelModel flex_decoding_sm90(const Format& dtype) {
  KernelModel m = flex_attention_sm90(dtype);
  m.base = "flex-decoding-sm90";
  m.description =
      "FlexAttention's decoding kernel (torch.compile(flex_attention) with a query of fewer than 128 rows, "
      "Inductor's flex-decoding template, PyTorch 2.11, Triton 3.6) on sm_90, without a block mask: 64-key "
      "tiles through mma.sync m16n8k16 (sm90-mma), S = fp32(qk*scale), P̄ = ex2(fp32(S*log2 e) - m) on every "
      "tile (bounds-masked), the two-warp row sum, l = fma(l, alpha, rowsum), O = acc * rcp(l), M = m + "
      "__nv_log2f(l); the backward is FlexAttention's template with every block bounds-masked; measured on the "
      "H200 (decode capture bit for bit); a causal mask spreads the keys over the 132 splits of batch x kv heads "
      "= 2, joined in the combine order read from the PTX (UNMEASURED; other split counts refused)";
  m.sources =
      "pytorch/pytorch torch/_inductor/kernel/flex/flex_decoding.py (create_flex_decoding_kernel: BLOCK_M 16, "
      "BLOCK_N 64, SPLIT_KV from get_split_k, the combine: g_M = max(buf_M), alpha = exp2(buf_M - g_M), g_L = "
      "sum(buf_L * alpha), lse = log2(g_L) + g_M, output = sum(buf_ACC * alpha) / g_L), flex_attention.py "
      "(_use_flex_decoding: seq_len_q < 128; IS_DIVISIBLE: both lengths multiples of 128), templates "
      "flex_decode.py.jinja and common.py.jinja forward_block_mn; H200 PTX of the kernels that ran "
      "(traces/hw/h200/paths/flex/sass/: tem_..._4_6818a76f, mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, "
      "warpsPerCTA [1, 2], the row sum chains, shfl xor 2, 1 and the cross-warp add, fma for l; "
      "backward_mul_1_119e26d5); gpu/analysis/flex/FINDINGS.md \"Decode\" and dec.py";
  m.tiles_by_head_dim = {{0, TileSizes{16, 64, 64, 128}}};
  // mma.sync m16n8k16: the sm90-mma preset (for bf16 and fp16 the same steps as sm90-wgmma, which the
  // backward template's wgmma runs: 16 products per step, 25 fraction bits, RZ).
  m.score_dot = tensor_core_dot("sm90-mma");
  m.pv_dot = tensor_core_dot("sm90-mma");
  m.row_sum = RowSumOrder::flex_decode_warps;
  m.max_query_rows = 127;
  m.min_query_rows_run = 0;  // the template's "Inductor decodes these rows instead" note is not this kernel's
  m.flex_decode_sms = 132;   // the H200's multiprocessors
  return m;
}

// FlashAttention-3's fp8 forward (Dao-AILab/flash-attention hopper/). The inputs are the
// high-precision Q, K, V (`dtype`); the model quantises them to e4m3 as the caller does.
KernelModel fa3_fp8(const Format& dtype) {
  KernelModel m;
  m.base = "fa3-fp8-sm90";
  m.description =
      "FlashAttention-3 fp8 forward (hopper/): Q, K, V quantised to e4m3 as e4m3(fp32(x / scale)), one scale "
      "amax/448 per (batch, kv head) as FA3's descales (Q's amax over the group's q heads), "
      "S and P·V through sm90-wgmma e4m3 (32 products/step, e8m13 truncation, C chained), softmax fp32, "
      "P̄ = ex2(.. + 8) in [0, 256] cast to e4m3, descales folded as FA3 does, O in bf16; "
      "SFUs: correct rounding (UNMEASURED); forward only (backward: delta from O, dO)";
  m.sources =
      "descales: hopper/flash_fwd_kernel_sm90.h (softmax_scale_log2 *= q_descale * k_descale, Max_offset = 8 "
      "for fp8, descale shape (batch, kv heads)); hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp "
      "(softmax.finalize(v_descale), KV blocks n_block_max-1 down to n_block_min); hopper/softmax.h "
      "(scale_apply_exp2: max_scaled = max*scale - max_offset, exp2f(x*scale - max_scaled); thread_reduce_: "
      "per-thread tile sum added to row_sum; finalize: inv_sum = (sum == 0 || sum != sum) ? 0 : 1/sum, "
      "scale = inv_sum*final_scale, LSE = max*(scale_log2*ln2) + logf(sum/2^8)); hopper/flash_attn_interface.py "
      "(q/k/v_descale; e4m3 inputs give bf16 output); hopper/tile_size.h (tiles); quantisation amax/448 per "
      "tensor: FA3 paper arXiv 2407.08608 §3.3 (per-tensor baseline, block quantisation, incoherent "
      "processing). ASSUMED: nvcc contracts max*scale - 8 and x*scale - max_scaled into FFMAs and 1/sum into "
      "rcp.approx (fast math); e4m3 casts RNE satfinite (cvt.rn.satfinite); the row-sum thread layout of "
      "wgmma is FA2's quad layout; the +block-quant descale placement (see `flashbits models`)";
  m.input = dtype;
  m.output = formats::bf16;
  m.structure = Structure::online_softmax;
  m.kv_order = KvOrder::last_to_first;
  m.tiles_by_head_dim = fa3_fp8_tiles();
  m.score_dot = tensor_core_dot("sm90-wgmma");
  m.score_format = formats::fp32;
  m.scale = ScaleHandling::exponent_ffma;
  m.scale_log2_from_fp32_scale = true;  // hopper/flash_api.cpp set_params_fprop(float softmax_scale)
  m.max_format = formats::fp32;
  m.p_format = formats::fp32;
  m.row_sum = RowSumOrder::fa3_quad;
  m.row_sum_internal = formats::fp32;
  m.row_sum_format = formats::fp32;
  m.p_cast = formats::e4m3;  // after online_softmax's reduce_sum on the fp32 exponentials
  m.pv_dot = tensor_core_dot("sm90-wgmma");
  m.o_acc = OAccumulator::mma_c;
  m.normalisation = Normalisation::fa3_finalize;
  m.lse = LseFormula::fa3;
  m.sfu = correct_sfu_set();
  m.ftz = true;
  // FA3 has no fp8 backward; delta (for bias-test) is FA2's dot(dO, O) order (assumed).
  m.delta = DeltaFormula::fa2_threads;
  m.fp8.enabled = true;
  m.fp8.format = formats::e4m3;
  m.fp8.p_max_offset = 8;
  m.backward_modelled = false;
  return m;
}

// FA3 tile sizes for 2-byte elements on sm90, same head dim for V, no paged KV, no softcap.
// Forward (kBlockM x kBlockN): hopper/tile_size.h tile_size_fwd_sm90 (element_size == 2):
// hdim <= 64: 192x192, causal 192x128; <= 96: 192x144; <= 128: 128x176, causal 128x128;
// <= 192: 128x112 (headdim_v > 128); else 128x80. Backward (kBlockM x kBlockN):
// hopper/flash_bwd_launch_template.h run_mha_bwd_hdim* for Arch >= 90: hdim 64: 128x128;
// 96: 64x128; 128: 80x128, causal 64x128; 192: 64x96; 256: 64x80.
std::vector<std::pair<int, TileSizes>> fa3_16bit_tiles(bool causal) {
  return {
      {64, TileSizes{192, causal ? 128 : 192, 128, 128}},
      {96, TileSizes{192, 144, 64, 128}},
      {128, causal ? TileSizes{128, 128, 64, 128} : TileSizes{128, 176, 80, 128}},
      {192, TileSizes{128, 112, 64, 96}},
      {256, TileSizes{128, 80, 64, 80}},
  };
}

// FlashAttention-3's bf16/fp16 forward and backward on Hopper. Forward: the fp8 recipe's
// steps (they are one template, hopper/softmax.h and mainloop_fwd_sm90_tma_gmma_ws.hpp) with
// Max_offset 0, the 16-bit operands fed to wgmma directly, P̄ cast to the input dtype and
// FA3's 2-byte tiles. Backward: hopper/mainloop_bwd_sm90_tma_gmma_ws.hpp has FA2's numerics
// (P = exp2f(S*scale_log2 - LSE*log2e) as one FFMA, dS = P*(dP - dPsum), dV += Pᵀ dO and
// dK += dSᵀ Q chained in the wgmma accumulators, dQ per (n_block, m_block) atomically added
// in fp32, dK and dQ times softmax_scale in fp32 before the cast) with the m_blocks visited
// first to last and FA3's own preprocess (delta layout) and tiles.
KernelModel fa3_16bit(const Format& dtype) {
  KernelModel m = fa3_fp8(dtype);
  m.base = "fa3-sm90";
  m.description =
      "FlashAttention-3 bf16/fp16 forward and backward (hopper/): S and P·V through sm90-wgmma (16 "
      "products/step, 25 fraction bits, C chained), softmax fp32 as FA3 (thread_reduce_ row sums, "
      "exp2f(x*scale - max*scale)), P̄ cast to the input dtype, finalize (rcp of the row sum), O in the input "
      "dtype; KV tiles last to first, FA3's 2-byte tiles (causal runs have their own); backward: FA3's "
      "preprocess (delta: 8 elements per thread, up to 16 threads per row, butterfly), P and dS as FA2, dK/dV "
      "chained over the row blocks first to last, dQ partials added in fp32 in ascending KV-block order (the "
      "hardware's atomic order is not deterministic; deterministic=True orders non-causal runs so); SFUs: "
      "correct rounding (UNMEASURED); GQA dK/dV summed as fa2's (ASSUMED)";
  m.sources =
      "Dao-AILab/flash-attention 0251105a: hopper/flash_fwd_kernel_sm90.h (Softmax<..., Max_offset = !Is_FP8 ? "
      "0 : 8>); hopper/softmax.h (scale_apply_exp2 with Max_offset 0: max_scaled = max*scale; thread_reduce_; "
      "finalize: inv_sum = (sum == 0 || sum != sum) ? 0 : 1/sum, LSE = max*(scale_log2*ln2) + logf(sum)); "
      "hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp (KV blocks n_block_max-1 down to n_block_min; with "
      "IntraWGOverlap O still sees +P·V then *scale in FA2's sequence); hopper/tile_size.h "
      "tile_size_fwd_sm90 (element_size 2, is_causal); hopper/flash_bwd_launch_template.h (run_mha_bwd_hdim*, "
      "Arch >= 90 tiles); hopper/flash_bwd_preprocess_kernel.h (kBlockKGmem = 128/64/32 dividing kHeadDim, "
      "kGmemThreadsPerRow = kBlockKGmem/8, dP_sum = do*o then += do*o, Allreduce; LSE_log2 = lse*M_LOG2E, 0 "
      "for -inf); hopper/flash_api.cpp round_up_headdim; hopper/mainloop_bwd_sm90_tma_gmma_ws.hpp (bwd_step: "
      "exp2f(scores*softmax_scale_log2 - lse_scaled), dS = scores*(dS - dP_sum_cur), P and dS converted to "
      "the input dtype, m_block from m_block_min up, atomicAdd of dQ per m_block, tdKrdK *= softmax_scale); "
      "hopper/flash_bwd_postprocess_kernel.h (dQaccum * softmax_scale, then convert); hopper/epilogue_bwd.hpp "
      "(dK, dV converted). ASSUMED: fast-math FFMA contractions and rcp.approx (hopper/setup.py "
      "--use_fast_math); the row-sum thread layout of wgmma is FA2's quad layout";
  m.output = dtype;
  m.tiles_by_head_dim = fa3_16bit_tiles(false);
  m.causal_tiles_by_head_dim = fa3_16bit_tiles(true);
  m.p_cast = dtype;
  m.fp8 = Fp8Quantisation{};
  m.delta = DeltaFormula::fa3_threads;
  m.backward = BackwardKernel::fa2_seqk_parallel;
  m.bwd_row_block_order = RowBlockOrder::first_to_last;
  m.backward_modelled = true;
  return m;
}

// cuDNN's SDPA (SDPBackend.CUDNN_ATTENTION, cuDNN 9.19) on sm_90: closed source, so a black-box
// fit to the seven H200 captures of 2026-12-04 (traces/hw/h200/paths/cudnn), made by varying
// seqlen, head dim, dtype and mask (gpu/analysis/math_cudnn/FINDINGS.md, part B). Every field
// below was chosen because the bits prefer it over its alternatives; it is NOT bit-exact (the
// residual is measured in docs/FINDINGS.md), hence black_box_fit and the warning.
KernelModel cudnn_sdpa_sm90(const Format& dtype) {
  KernelModel m;
  m.base = "cudnn-sdpa-sm90";
  m.description =
      "cuDNN 9.19's SDPA on sm_90 (PyTorch SDPBackend.CUDNN_ATTENTION), APPROXIMATE: a black-box fit to 7 H200 "
      "captures, not bit-exact; 64-row x 128-key tiles in ascending key order, S through sm90-wgmma, "
      "S' = fp32(S * fp32(scale*log2 e)) before the max, P = ex2(S' - m'), per-tile quad row sum, "
      "l = fp32(l*alpha) + sum, O = acc * (1/l), stats = fma(m', ln 2, __logf(l)); backward 64x64 tiles, "
      "P = ex2((S*scale - LSE)*log2 e), dS scaled before its cast, dQ from 64-key partials in fp32";
  m.sources =
      "no source (closed): kernel names in traces/hw/h200/paths/cudnn/capture_log.jsonl "
      "(cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x{64,128}_4x1x1; "
      "compute_dot_do_o; flash_bprop_wgmma_f16_knob_26_64x64x{64,128}_1x4x1; convert_dq_to_16bits after a "
      "Memset of the fp32 dQ buffer); each step fitted to the captured bits and its alternatives measured "
      "(gpu/analysis/math_cudnn/FINDINGS.md part B, cudnn_emu.py, cudnn_bwd.py, lse_best.py)";
  m.warning =
      "cudnn-sdpa-sm90 is a black-box fit to cuDNN 9.19 on an H200, not bit-exact: on its 7 captures at most 2 "
      "elements of O and up to 7.1% of the LSE differ by an ulp, and up to 104 elements of a gradient by up to 55 "
      "ulps (docs/FINDINGS.md, tests/cudnn_residual.tsv)";
  m.black_box_fit = true;
  m.input = dtype;
  m.output = dtype;
  m.structure = Structure::online_softmax;
  m.kv_order = KvOrder::first_to_last;                      // ascending: descending misses 12,401 O elements of n256
  m.tiles_by_head_dim = {{0, TileSizes{64, 128, 64, 64}}};  // fprop 64x128, bprop 64x64
  m.score_dot = tensor_core_dot("sm90-wgmma");
  m.score_format = formats::fp32;
  m.scale = ScaleHandling::log2_units;                // S' = fp32(S * fp32(fp32(scale) * log2 e)); m' = max S'
  m.exponent_argument = ExponentArgument::fmul_fadd;  // P = ex2(fp32(S' - m')); FA3's FFMA misses 8 O elements
  m.max_format = formats::fp32;
  m.p_format = formats::fp32;
  m.row_sum = RowSumOrder::triton_quad;  // the wgmma accumulator layout, (t0 + t2) + (t1 + t3) per tile
  m.row_sum_internal = formats::fp32;
  m.row_sum_format = formats::fp32;
  m.l_update_fma = false;  // l = fp32(l*alpha) + tile sum: O's best fit (the LSE alone prefers the FMA)
  m.p_cast = dtype;
  m.pv_dot = tensor_core_dot("sm90-wgmma");
  m.o_acc = OAccumulator::mma_c;
  m.normalisation = Normalisation::ieee_reciprocal;  // acc * (1/l): the captures cannot tell 1/l from rcp
  m.lse = LseFormula::cudnn_stats;
  m.sfu = correct_sfu_set();              // replay of H200 captures takes the measured hw-sm90 set
  m.ftz = false;                          // ASSUMED
  m.delta = DeltaFormula::row_fma_chain;  // compute_dot_do_o: sequential over d (16-bit products are exact)
  m.backward = BackwardKernel::fa2_seqk_parallel;
  m.bwd_row_block_order = RowBlockOrder::first_to_last;  // dV, dK chained over the rows ascending
  m.bwd_natural_lse_and_scaled_ds = true;                // scaling dK, dQ at the end misses ~50% at d96, d128
  return m;
}

// FlashAttention-4's forward on Blackwell (flash_attn/cute/flash_fwd_sm100.py, CuTe DSL).
// One thread owns a whole row of the 128-column S tile (SoftmaxSm100, num_rows = 1).
KernelModel fa4(const Format& dtype) {
  KernelModel m;
  m.base = "fa4-sm100";
  m.description =
      "FlashAttention-4 forward and backward (flash_attn/cute, sm100): S and P·V through the sm100 tcgen05 "
      "model (MMA-Sim's parameters, UNMEASURED), KV tiles of 128 last to first, one thread per row: lazy "
      "rescaling (threshold 8 log2 units for 16-bit inputs), P̄ = exp2 of one FFMA, on the MUFU or FA4's "
      "degree-3 FMA polynomial on the columns FA4's tuning table picks for the run (head dim, causal, seqlen, "
      "GQA: every 16 from fragment 1 by default, every 10 for non-causal 2-CTA head dim 128, none at head "
      "dim 192 non-causal), row sum in FA4's 8-lane order, O rescaled in fp32 by the correction warps, rcp of "
      "the row sum, O in the input dtype; backward (flash_bwd_sm100.py): preprocess delta (up to 16 threads "
      "per row), P = ex2 of one FFMA on the MUFU, dS = P*(dP - dPsum), dK/dV chained over 128-row blocks "
      "first to last, dQ partials over 128 keys (256 with 2-CTA at head dim >= 128) added in fp32 in "
      "ascending order (ASSUMED: the hardware's reduce-add order is not deterministic); head dim > 192 "
      "runs FA4's dedicated hd256 kernels, not modelled (refused unless +sw-exp2:off or :EVERY,START is "
      "given); SFUs: correct rounding (UNMEASURED). EMULATION: no Blackwell capture exists";
  m.sources =
      "Dao-AILab/flash-attention 0251105a: flash_attn/cute/flash_fwd_sm100.py (m_block 128 x q_stage 2, "
      "n_block 128; n_block from n_block_max-1 down; rescale_threshold = 8.0 for 16-bit q, 0 for fp8; "
      "max_offset 0 for 16-bit; head_dim_padded = multiple of 16; _TUNING_CONFIG keyed (use_2cta_instrs, "
      "is_causal, head_dim_padded, is_sm103), _default_enable_ex2_emu, ex2_emu_freq default 16 (pack_gqa, "
      "head_dim_padded > 64, non-causal: the table's or 10), ex2_emu_start_frg default 1; "
      "correction_rescale: O *= acc_scale (fp32 mul; skipped by a warp vote when no acc_scale < 1, exact); "
      "correction_epilogue: scale = rcp_approx(row_sum) * v_descale, LSE = (row_max*scale_log2 + "
      "lg2(row_sum) - max_offset)*ln2); flash_attn/cute/interface.py (forward FwdConfig(128, 128); "
      "use_2cta_instrs: sm100, not causal/local/split, head dims padded to 16 in {128, 192} with head_dim_v "
      "128, seqlen_q*group > 2*tile_m, tile_m % group == 0; pack_gqa = group > 1; backward 128 x 128, "
      "use_2cta_instrs = head_dim >= 128; dedicated hd256 kernels); flash_attn/cute/softmax.py SoftmaxSm100 "
      "(update_row_max, scale_subtract_rowmax: FFMA(s, scale_log2, max_offset - max*scale_log2), "
      "apply_exp2_convert, update_row_sum: fadd_reduce(P̄, init = row_sum*acc_scale)); flash_attn/cute/utils.py "
      "(fadd_reduce for arch >= 100: 4 packed f32x2 accumulators; ex2_emulation_2, POLY_EX2); "
      "flash_attn/cute/flash_bwd_preprocess.py (head_dim_v_padded multiple of 32, gmem_k_block_size 128/64/32, "
      "threads_per_row = that / 8, TensorSSA reduce then warp_reduce; lse_log2 = lse*LOG2_E, 0 for -inf); "
      "flash_attn/cute/flash_bwd_sm100.py (m_block from m_block_min up; fma_packed_f32x2(S, scale_log2, "
      "-lse), exp2 fastmath; sub then mul for dS; mma_tiler_dsk reduction over tile_n*cta_group_size; dK *= "
      "softmax_scale before the cast); flash_attn/cute/flash_bwd_postprocess.py (dQ = acc*scale, then the "
      "cast). Tensor core: MMA-Sim (Xie et al. 2025) TCGen05MMASim, 25 fraction bits. ASSUMED: the LSE's "
      "m*scale_log2 + lg2 contracted into an FFMA; row_sum*acc_scale rounded before the packed add; "
      "ex2/rcp/lg2 as fast-math MUFU; num_splits = 1 (FA4 may split KV when batch*heads*m_blocks leave SMs "
      "idle); the preprocess's in-thread reduce sequential; GQA dK/dV summed as fa2's";
  m.input = dtype;
  m.output = dtype;
  m.structure = Structure::online_softmax;
  m.kv_order = KvOrder::last_to_first;
  // Backward tiles 128 x 128; from head dim 128 the backward runs 2-CTA MMAs whose dQ reduction
  // spans the cluster's 2 x 128 keys (the dQ partial per 256 keys; dK and dV per key are
  // unchanged by the pairing).
  m.tiles_by_head_dim = {{127, TileSizes{128, 128, 128, 128}}, {0, TileSizes{128, 128, 128, 256}}};
  m.score_dot = tensor_core_dot("sm100");
  m.score_format = formats::fp32;
  m.scale = ScaleHandling::exponent_ffma;
  m.max_format = formats::fp32;
  m.p_format = formats::fp32;
  m.row_sum = RowSumOrder::fa4_lanes;
  m.row_sum_internal = formats::fp32;
  m.row_sum_format = formats::fp32;
  m.p_cast = dtype;
  m.pv_dot = tensor_core_dot("sm100");
  m.o_acc = OAccumulator::mma_c;
  m.normalisation = Normalisation::rcp_multiply;
  m.lse = LseFormula::fa4;
  m.sfu = correct_sfu_set();
  m.ftz = true;
  m.lazy_rescale_log2 = 8.0;
  m.sw_exp2 = true;
  m.sw_exp2_fa4_tuning = true;
  m.sw_exp2_every = 16;  // FA4's default split (the tuning table refines it per run)
  m.sw_exp2_start_fragment = 1;
  m.delta = DeltaFormula::fa4_threads;
  m.backward = BackwardKernel::fa2_seqk_parallel;
  m.bwd_row_block_order = RowBlockOrder::first_to_last;
  m.backward_modelled = true;
  return m;
}

// FlashAttention-4's fp8 forward on Blackwell: the same kernel (flash_fwd_sm100.py) with
// 8-bit q/k/v: Max_offset 8 (P̄ up to 2^8), no lazy rescaling (rescale_threshold 0 for fp8),
// P̄ cast to the input fp8 format, the q/k descales folded into scale_log2 and the v descale
// into the output scale as FA3 does, O in bf16; _FP8_TUNING_CONFIG for the polynomial split.
// FA4 has no fp8 backward (interface.py raises for requires_grad).
KernelModel fa4_fp8(const Format& dtype) {
  KernelModel m = fa4(dtype);
  m.base = "fa4-fp8-sm100";
  m.description =
      "FlashAttention-4 fp8 forward (flash_attn/cute, sm100): Q, K, V quantised to e4m3 as "
      "e4m3(fp32(x / scale)), one scale amax/448 per (batch, kv head) as fa3-fp8-sm90 (the caller's choice), "
      "S and P·V through the sm100 tcgen05 e4m3 model (kind::f8f6f4, 32 products "
      "per step, MMA-Sim's parameters, UNMEASURED), KV tiles of 128 last to first, one thread per row: no lazy "
      "rescaling (FA4 uses threshold 0 for fp8), P̄ = exp2(fma(S, scale_log2*qk_descale, 8 - m*scale_log2)) in "
      "[0, 256] on the MUFU or FA4's polynomial (FA4's fp8 tuning table), FA4's 8-lane row sum, P̄ cast to e4m3, "
      "O = acc * (rcp(ℓ) * v_descale) in bf16, LSE = (m*scale_log2 + lg2 ℓ - 8)*ln2; SFUs: correct rounding "
      "(UNMEASURED); forward only (FA4 has no fp8 backward; delta from O, dO). EMULATION: no Blackwell "
      "capture exists";
  m.sources = std::string(
                  "Dao-AILab/flash-attention 0251105a: flash_attn/cute/flash_fwd_sm100.py (max_offset = 8 if "
                  "q_dtype.width == 8; rescale_threshold = 8.0 if width 16 else 0.0; _load_effective_descales: "
                  "qk_descale = 1.0 * q_descale * k_descale, softmax_scale_log2_eff = softmax_scale_log2 * "
                  "qk_descale; correction epilogue scale = rcp_approx(row_sum) * v_descale, LSE = (row_max * "
                  "softmax_scale_log2_eff + (log2(row_sum) - max_offset)) * LN2; _FP8_TUNING_CONFIG merged over "
                  "_TUNING_CONFIG for head_dim_padded >= 96); flash_attn/cute/softmax.py (scale_subtract_rowmax: "
                  "bias = max_offset - row_max*scale_log2, FFMA(s, scale_log2, bias)); flash_attn/cute/interface.py "
                  "(fp8 q/k/v give a bf16 output; FP8 backward raises NotImplementedError). ASSUMED: 8 - "
                  "m*scale_log2 contracted into one FFMA (as FA3's fp8 model), e4m3 casts RNE satfinite, "
                  "quantisation amax/448 per (batch, kv head) by the caller. Shared with fa4-sm100: ") +
              m.sources;
  m.output = formats::bf16;
  m.p_cast = formats::e4m3;
  m.lazy_rescale_log2 = 0.0;
  m.normalisation = Normalisation::fa3_finalize;  // rcp(ℓ) * v_descale, then acc * that
  m.fp8.enabled = true;
  m.fp8.format = formats::e4m3;
  m.fp8.p_max_offset = 8;
  m.delta = DeltaFormula::fa4_threads;
  m.backward_modelled = false;
  return m;
}

// Composable Kernel's FMHA forward on CDNA3 (MI300, gfx942), the kernel ROCm FlashAttention's
// CK backend runs for bf16/fp16 (ck_tile BlockFmhaPipelineQRKSVSAsync, FAST_EXP2). The facts
// and their citations are in notes/cdna3_fmha.md; the recipe follows CK 00fe0752 for the P̄
// cast and the LSE, and CK 8e22e1ae's tile table.
KernelModel ck_fmha_cdna3(const Format& dtype) {
  KernelModel m;
  m.base = "ck-fmha-cdna3";
  m.description =
      "Composable Kernel FMHA forward on AMD CDNA3 (MI300, gfx942) as ROCm FlashAttention builds it (bf16/fp16, "
      "FAST_EXP2, flush denormals, bf16 RNE): S and P·V through the cdna3 MFMA model (v_mfma_f32_32x32x8, "
      "MMA-Sim's two-stage arithmetic, UNMEASURED) in CK's IterateK order (each 16-wide k chunk as two "
      "8-product MFMAs over k {0-3,8-11} then {4-7,12-15}), KV tiles first to last (128x64 at head dim <= 64, "
      "128x128 above), P̄ = ex2(fma(S, scale_log2, -fp32(m*scale_log2))), α = ex2(fma(m_old, scale_log2, "
      "-fp32(m_new*scale_log2))) on every tile (not 1 when the max stays), O *= α then P̄·V chained, row sum "
      "in two lane groups of 8-column blocks, ℓ = fma(α, ℓ, tile sum), 1/ℓ correctly rounded, LSE in double "
      "(m*scale_log2 / log2e + logf ℓ); v_exp_f32 and logf modelled as correctly rounded (UNMEASURED: no "
      "bit-exact definition is public); forward only (delta: one thread per row, an fp32 FMA chain). "
      "EMULATION: no AMD capture exists";
  m.sources =
      "notes/cdna3_fmha.md (facts with file and line). ROCm/composable_kernel 8e22e1ae: "
      "include/ck_tile/ops/fmha/pipeline/block_fmha_pipeline_qr_ks_vs_async.hpp (KV loop from "
      "GetTileRangeAlongX upward; row_max = scale_s*m; p = exp2(scale_s*s - row_max); tmp = exp2(scale_s*m_old "
      "- row_max); l = tmp*l + rowsum_p; o_acc *= tmp; o_acc *= 1/l); block_fmha_pipeline_qx_ks_vs_custom_policy.hpp "
      "and ops/gemm/warp/warp_gemm_attribute_mfma.hpp (WarpGemmMfmaBf16Bf16F32M32N32K16 SwizzleB, IterateK "
      "kKIter = 2: k sets of the two MFMAs); ops/reduce/block/block_reduce.hpp (sequential in-thread sum, one "
      "shuffle across the lane groups); example/ck_tile/01_fmha/codegen/ops/fmha_fwd.py (tiles); "
      "ops/fmha/kernel/fmha_fwd_kernel.hpp (scale_s = float(scale * log2e)); CK 00fe0752: LSE = m*scale_s / "
      "C_LOG2E + log(l), the P̄ cast_tile (RNE); ROCm/flash-attention b3ae4966 setup.py "
      "(CK_TILE_FMHA_FWD_FAST_EXP2=1, -fgpu-flush-denormals-to-zero, CK_TILE_FLOAT_TO_BFLOAT16_DEFAULT=3: RNE), "
      "csrc/flash_attn_ck/mha_fwd.cpp (float softmax_scale). MFMA arithmetic: MMA-Sim (Xie et al. 2025) CDNA3. "
      "ASSUMED: HIP's default FMA contraction (-ffp-contract=fast), exp2f as one v_exp_f32, 1/l as IEEE division, "
      "logf correctly rounded; which CK commit a wheel pins (newer CK runs 64x128 tiles with 16x16 MFMAs at "
      "head dim 128 on small grids: not modelled)";
  m.input = dtype;
  m.output = dtype;
  m.structure = Structure::online_softmax;
  m.kv_order = KvOrder::first_to_last;
  m.tiles_by_head_dim = {{64, TileSizes{128, 64, 128, 64}}, {0, TileSizes{128, 128, 128, 128}}};
  m.score_dot = DotSpec{DotKind::tensor_core, "cdna3", nullptr};
  m.score_dot.k_order = KOrder::ck_interleave16;
  m.pv_dot = m.score_dot;
  m.score_format = formats::fp32;
  m.scale = ScaleHandling::exponent_ffma;
  m.scale_log2_from_fp32_scale = true;  // mha_fwd(..., float softmax_scale); scale_s = float(scale * log2e)
  m.exponent_argument = ExponentArgument::ffma;
  m.rescale_exponent = RescaleExponent::ffma_scaled_max;
  m.max_format = formats::fp32;
  m.p_format = formats::fp32;
  m.row_sum = RowSumOrder::ck_two_lanes;
  m.row_sum_internal = formats::fp32;
  m.row_sum_format = formats::fp32;
  m.p_cast = dtype;
  m.o_acc = OAccumulator::mma_c;
  m.normalisation = Normalisation::ieee_reciprocal;
  m.lse = LseFormula::ck_fp64;
  m.sfu = correct_sfu_set();
  m.ftz = true;
  m.delta = DeltaFormula::row_fma_chain;  // block_fmha_bwd_dot_do_o.hpp: one thread per row
  m.backward_modelled = false;
  return m;
}

// The FA3 paper's "baseline FP8": standard (materialised) attention with per-tensor
// scaling, fp32 matmul accumulators and the intermediate softmax in fp16 (arXiv
// 2407.08608 §4.3). The fp8 GEMMs are ASSUMED to be cuBLAS/CUTLASS-style fp8 GEMMs on
// H100 with split accumulation: sm90-wgmma e4m3 partial sums promoted into fp32 every
// 128 products (CUTLASS's default mma_promotion_interval of 4 wgmma k-blocks of 32),
// i.e. +promote:128. P (fp16, in [0, 1]) is quantised per tensor with its bound 1 as
// amax: e4m3(fp32(P * 448)), descaled with V's descale at the output (assumed).
KernelModel standard_fp8(const Format& dtype) {
  KernelModel m = standard(formats::fp16);
  m.base = "standard-fp8";
  m.description =
      "FA3 paper's baseline fp8: materialised attention, Q, K, V e4m3 with one scale per (batch, kv head) as "
      "fa3-fp8-sm90 (the paper's per-tensor baseline has one per tensor: the same for one batch and head), "
      "fp8 GEMMs on "
      "sm90-wgmma with fp32 promotion every 128 products, scores and softmax output in fp16 (fp32 "
      "inside), P quantised as e4m3(P*448), O in fp16; forward only (backward: delta from O, dO)";
  m.sources =
      "FA3 paper arXiv 2407.08608 §4.3 ('per-tensor scaling, matmul accumulator in FP32, intermediate "
      "softmax results kept in FP16'); GEMM accumulation, P scaling and descale placement ASSUMED "
      "(see description); softmax as standard-fp16";
  m.input = dtype;
  m.output = formats::fp16;
  m.score_dot = tensor_core_dot("sm90-wgmma");
  m.score_dot.promote_every = 128;
  m.score_format = formats::fp32;
  m.pv_dot = m.score_dot;
  m.p_cast = formats::e4m3;
  m.delta = DeltaFormula::fa2_threads;  // assumed (no fp8 backward modelled)
  m.fp8.enabled = true;
  m.fp8.format = formats::e4m3;
  m.fp8.p_scale = 448.0;
  m.backward_modelled = false;
  m.fp8.p_before_cast = formats::fp16;
  return m;
}

// The reference (not a kernel): exact attention, then one rounding of every output. One
// description, here; attention/exact.cpp round_exact_outputs() computes it.
KernelModel correctly_rounded_model(const Format& input, const Format& output) {
  KernelModel m;
  m.base = "correctly-rounded";
  m.description =
      "the reference, not a kernel: exact attention (long double, checked against MPFR), then ONE rounding of "
      "each output in the final cast's mode (+o-MODE): O, dQ, dK, dV into the output dtype, LSE into fp32, "
      "delta = sum dO*O of that rounded O (as kernels compute it), summed exactly and rounded once into fp32. "
      "Every rounding (O, LSE, both deltas, dQ, dK, dV) is decided exactly where the long-double value lies "
      "too near a rounding boundary (a rigorous error bound, then MPFR intervals, then an exact comparison "
      "with the boundary), so exact ties and gradients that cancel to 0 round as the exact value does. "
      "The least error any kernel with this output format can have: bias-test's and sweep's floor is this "
      "model in round-to-nearest-even, whatever the kernel's +o-MODE (a mode's bias is the kernel's), and the "
      "excess a kernel's error minus the floor's. Takes only +o-MODE";
  m.sources = "attention/exact.cpp (exact_attention, round_exact_outputs); emu/summation.hpp ExactAccumulator";
  m.input = input;
  m.output = output;
  m.structure = Structure::correctly_rounded;
  m.kv_order = KvOrder::first_to_last;
  // No arithmetic of its own: no tensor cores, no SFUs (uses_special_function is false).
  m.score_dot = DotSpec{DotKind::fp64_fma_chain, "", nullptr};
  m.pv_dot = m.score_dot;
  m.score_format = std::nullopt;
  m.scale = ScaleHandling::multiply_scores;
  m.delta_format = formats::fp32;  // make-trace stores delta in this format
  m.sfu = correct_sfu_set();
  m.ftz = false;
  m.backward = BackwardKernel::tensor_ops;
  return m;
}

}  // namespace

TileSizes KernelModel::tiles_for(int head_dim, int seqlen, bool causal, int seqlen_k) const {
  if (golden_tiles) {
    // FlashAttention's rule with M the on-chip memory in elements. Golden et al. give
    // the rule but this project has not found the M of their runs; M = 32768 elements
    // (128 KiB of fp32) is ASSUMED (d = 64: 128 x 64 tiles). --tiles overrides.
    constexpr int kSramElements = 32768;
    const int bc = std::max(1, (kSramElements + 4 * head_dim - 1) / (4 * head_dim));
    TileSizes t;
    t.block_n = bc;
    t.block_m = std::min(bc, head_dim);
    t.bwd_block_n = t.block_n;
    t.bwd_block_m = t.block_m;
    return t;
  }
  if (tiles_by_head_dim.empty()) {
    TileSizes t;
    t.block_m = t.bwd_block_m = std::max(1, seqlen);
    t.block_n = t.bwd_block_n = std::max(1, seqlen_k > 0 ? seqlen_k : seqlen);
    return t;
  }
  const auto& table = causal && !causal_tiles_by_head_dim.empty() ? causal_tiles_by_head_dim : tiles_by_head_dim;
  for (const auto& [d, t] : table) {
    if (d == 0 || head_dim <= d) return t;
  }
  return table.back().second;
}

// FA4's choice (flash_fwd_sm100.py __init__ and __call__, interface.py _flash_attn_fwd) for
// 16-bit inputs on sm100 (not sm103, whose table turns the polynomial off), non-local,
// non-varlen, one KV split. Sources are cited in fa4()'s `sources`.
SoftwareExp2Split KernelModel::software_exp2_split(int head_dim, bool causal, int seqlen_q,
                                                   int q_heads_per_kv_head) const {
  if (!sw_exp2) return {};
  if (!sw_exp2_fa4_tuning) return {true, sw_exp2_every, sw_exp2_start_fragment};
  const int padded = (head_dim + 15) / 16 * 16;
  if (padded > 192)
    throw std::invalid_argument(base + ": head dim " + std::to_string(head_dim) +
                                " runs FlashAttention-4's dedicated hd256 kernels, which this model does not "
                                "describe; add +sw-exp2:off or +sw-exp2:EVERY,START to run the generic kernel's "
                                "steps anyway (ASSUMED)");
  const int group = std::max(1, q_heads_per_kv_head);
  const bool pack_gqa = group > 1;
  constexpr int kTileM = 128;
  // head_dim_v == head_dim here, so only a padded head dim of 128 meets head_dim_v 128.
  const bool two_cta = !causal && padded == 128 && static_cast<long long>(seqlen_q) * group > 2 * kTileM &&
                       (!pack_gqa || kTileM % group == 0);
  bool enabled = padded <= 128;  // _default_enable_ex2_emu (192 needs 2-CTA, which needs head_dim_v 128)
  int every = 16, start = 1;
  bool tuned = false;
  // _TUNING_CONFIG entries that apply: (2cta, causal, padded) -> (freq, start).
  struct Tuning {
    bool two_cta, causal;
    int padded, freq, start;
  };
  static constexpr Tuning kTable[] = {
      {true, false, 128, 10, 1}, {false, true, 128, 16, 1}, {true, false, 192, 16, 0}, {false, true, 192, 32, 1}};
  // _FP8_TUNING_CONFIG, merged over the 16-bit table for 8-bit inputs at padded head dims >= 96.
  static constexpr Tuning kFp8Table[] = {{true, false, 128, 10, 1}, {false, true, 128, 8, 1}};
  const auto apply = [&](const Tuning& t) {
    if (t.two_cta == two_cta && t.causal == causal && t.padded == padded) {
      enabled = t.freq > 0;
      every = t.freq;
      start = t.start;
      tuned = true;
    }
  };
  for (const Tuning& t : kTable) apply(t);
  if (fp8.enabled && padded >= 96)
    for (const Tuning& t : kFp8Table) apply(t);
  if (!enabled) return {};
  if (pack_gqa && padded > 64 && !causal) every = tuned ? every : 10;
  return {true, every, start};
}

bool KernelModel::hardware_validated() const {
  // The reference has no hardware part to validate (no tensor cores, no SFUs): true vacuously;
  // reports say it is the reference (tools name it so), not that it was measured.
  if (structure == Structure::correctly_rounded) return true;
  if (black_box_fit) return false;
  // Split-KV as PyTorch compiles it (no fast math, the logsum combine) replayed bit for bit on
  // the H200 (traces/hw/h200/paths/splitkv: 2, 4 and 8 splits); upstream FA2's fast-math
  // combine and the inv-sum variant have no capture.
  if (splitkv.enabled && (splitkv.fast_math || splitkv.scale != SplitKvScale::exp_minus_logsum)) return false;
  auto dot_ok = [](const DotSpec& d) {
    return d.kind != DotKind::tensor_core || (d.dot.valid() && d.dot.hardware_validated());
  };
  // A model with no tensor-core step and no special function holds nothing those measurements
  // cover: its arithmetic (IEEE operations in an order it assumes, as standard-fp32's
  // pairwise softmax sum) is measured only where a capture replays it, and none does. It was
  // reported as measured, vacuously.
  if (!has_hardware_steps()) return false;
  return dot_ok(score_dot) && dot_ok(pv_dot) && sfu_hardware_measured(*this);
}

bool KernelModel::has_hardware_steps() const {
  return score_dot.kind == DotKind::tensor_core || pv_dot.kind == DotKind::tensor_core ||
         uses_special_function(*this, SpecialFunction::ex2) || uses_special_function(*this, SpecialFunction::rcp) ||
         uses_special_function(*this, SpecialFunction::lg2);
}

std::vector<SpecialFunction> unmeasured_special_functions(const KernelModel& km) {
  const SfuSet& s = km.sfu;
  std::vector<SpecialFunction> out;
  for (SpecialFunction f : {SpecialFunction::ex2, SpecialFunction::rcp, SpecialFunction::lg2}) {
    const auto& m = f == SpecialFunction::ex2 ? s.ex2 : f == SpecialFunction::rcp ? s.rcp : s.lg2;
    if (uses_special_function(km, f) && (!m || !m->hardware_measured())) out.push_back(f);
  }
  return out;
}

bool sfu_hardware_measured(const KernelModel& km) { return unmeasured_special_functions(km).empty(); }

std::string unmeasured_parts(const KernelModel& km) {
  if (km.structure == Structure::correctly_rounded || km.hardware_validated()) return {};
  return km.has_hardware_steps() ? "SFU " + sfu_report(km) + " -- parts of this model are unmeasured on hardware"
                                 : "no tensor-core or special-function step: its IEEE arithmetic, in the order the "
                                   "model states (see flashbits models), is unmeasured on hardware";
}

std::string sfu_report(const KernelModel& km, bool verbose) {
  std::string report;
  for (SpecialFunction f : {SpecialFunction::ex2, SpecialFunction::rcp, SpecialFunction::lg2}) {
    const auto& m = f == SpecialFunction::ex2 ? km.sfu.ex2 : f == SpecialFunction::rcp ? km.sfu.rcp : km.sfu.lg2;
    if (!report.empty()) report += verbose ? "; " : ", ";
    if (!uses_special_function(km, f))
      report += std::string(to_string(f)) + " not evaluated by this model";
    else
      report += m ? (verbose ? m->describe() : m->summary()) : std::string("(no model)");
  }
  return report;
}

std::vector<KernelModel> base_kernel_models(const Format& dtype) {
  std::vector<KernelModel> table;
  table.push_back(fa2("fa2-sm80", "sm80", dtype, false));
  table.push_back(fa2("fa2-sm90", "sm90-mma", dtype, true));
  table.push_back(pytorch_fa2("pytorch-fa2-sm80", "sm80", dtype, false));
  table.push_back(pytorch_fa2("pytorch-fa2-sm90", "sm90-mma", dtype, true));
  table.push_back(standard(formats::fp32));
  table.push_back(standard(formats::bf16));
  table.push_back(standard(formats::fp16));
  table.push_back(pytorch_math_sm90(dtype));
  table.push_back(fa_bf16acc());
  const std::pair<std::optional<Format>, std::string> golden_formats[] = {
      {formats::bf16, "bf16"}, {formats::fp16, "fp16"}, {formats::fp32, "fp32"}, {std::nullopt, "fp64"}};
  for (const auto& [f, name] : golden_formats) {
    table.push_back(golden(f, name, true));
    table.push_back(golden(f, name, false));
  }
  table.push_back(triton_tutorial(dtype));
  table.push_back(triton_tutorial_sm90(dtype));
  table.push_back(flex_attention_sm90(dtype));
  table.push_back(flex_decoding_sm90(dtype));
  table.push_back(fa3_fp8(dtype));
  table.push_back(fa3_16bit(dtype));
  table.push_back(cudnn_sdpa_sm90(dtype));
  table.push_back(fa4(dtype));
  table.push_back(fa4_fp8(dtype));
  table.push_back(ck_fmha_cdna3(dtype));
  table.push_back(standard_fp8(dtype));
  table.push_back(correctly_rounded_model(dtype, dtype));
  return table;
}

std::optional<Format> stored_o_format(const KernelModel& km) {
  switch (km.structure) {
    case Structure::correctly_rounded:
      if (km.reference_o_exact) return std::nullopt;
      return km.reference_o_store ? km.reference_o_store : std::optional<Format>(km.output);
    case Structure::materialised:
      return km.pv_result_format;
    case Structure::online_softmax:
    default:
      return km.o_acc == OAccumulator::mma_c ? std::optional<Format>(km.output) : km.o_buffer_format;
  }
}

double empty_row_lse(LseFormula lse) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  switch (lse) {
    case LseFormula::fa3:
    case LseFormula::fa4:
    case LseFormula::ck_fp64:
    case LseFormula::log2_units:
    case LseFormula::log2_libdevice:
      return -inf;
    case LseFormula::fa2:
    case LseFormula::natural:
    case LseFormula::cudnn_stats:
      break;
  }
  return inf;
}

bool nan_row_sum_is_empty(LseFormula lse) {
  switch (lse) {
    case LseFormula::natural:
    case LseFormula::log2_units:
    case LseFormula::log2_libdevice:
      return false;
    case LseFormula::fa2:
    case LseFormula::fa3:
    case LseFormula::fa4:
    case LseFormula::ck_fp64:
    case LseFormula::cudnn_stats:
      break;
  }
  return true;
}

std::string why_o_cast_rounds_nothing(const KernelModel& km) {
  const std::optional<Format> stored = stored_o_format(km);
  if (!stored) return km.base + " keeps O in fp64 and never rounds it";
  if (*stored == formats::fp32 && km.structure != Structure::correctly_rounded)
    return km.base + " computes O in fp32 and returns it in fp32, so no final cast rounds it";
  return "";
}

int fa2_instantiated_head_dim(int head_dim) {
  for (const auto& [instantiated, tiles] : fa2_tiles(false))
    if (head_dim <= instantiated) return instantiated;
  throw std::invalid_argument("FA2 runs head dims up to 256, not " + std::to_string(head_dim));
}

int flex_decode_split_count(const KernelModel& km, int batch_kv_heads) {
  // get_split_k (flex_decoding.py): num_SM // bh * 2, at least 1.
  return std::max(km.flex_decode_sms / std::max(batch_kv_heads, 1) * 2, 1);
}

std::string int_set_text(const std::vector<int>& values) {
  std::string text = "{";
  for (std::size_t i = 0; i < values.size(); ++i) text += (i ? ", " : "") + std::to_string(values[i]);
  return text + "}";
}

namespace {

// What the Triton tutorial (06-fused-attention.py @003da478; the fields' comment in
// kernel_models.hpp) refuses of this run, or computes as something other than its attention,
// as a clause ("runs only ...; ... is refused"); empty when it runs it as the model does.
// triton-tutorial-sm90 (tutorial_tiles.strict) refuses such a run; the recipe runs it as its
// extension and says so in a note (unmeasured_shape_notes).
std::string what_the_tutorial_refuses(const KernelModel& km, const RunShape& shape) {
  const KernelModel::TritonTutorialTiles& tt = km.tutorial_tiles;
  if (tt.block_n.empty()) return "";
  const TileSizes tile = km.tiles_for(shape.head_dim, shape.query_rows, shape.causal, shape.keys);
  // _attention.forward: dtype = tl.float8e5 if FP8_OUTPUT else tl.float16; P and O are cast to it
  // and tl.dot asserts its operands share a dtype, so bf16 inputs compile no kernel.
  if (!(km.input == formats::fp16))
    return std::string(
               "runs fp16 inputs only: the tutorial casts P and O to tl.float16 (its fp8 path apart), and "
               "tl.dot and the output descriptor take one dtype; ") +
           km.input.name + " is refused";
  if (shape.head_dim > 0) {
    // A head dim the host assert admits and some candidate BLOCK_N (or the named one) fits.
    const int narrowest = tt.named ? tile.block_n : *std::min_element(tt.block_n.begin(), tt.block_n.end());
    std::vector<int> runnable;
    for (int d : tt.asserted_head_dims)
      if (d >= narrowest) runnable.push_back(d);
    if (std::find(runnable.begin(), runnable.end(), shape.head_dim) == runnable.end())
      return "runs only head dims " + int_set_text(runnable) +
             ": the tutorial's _attention.forward asserts HEAD_DIM_K in " + int_set_text(tt.asserted_head_dims) +
             " and its forward compiles only BLOCK_N <= HEAD_DIM " + "(tl.static_assert), BLOCK_N " +
             (tt.named ? std::to_string(tile.block_n) + " (+tile)" : "in " + int_set_text(tt.block_n)) + "; head dim " +
             std::to_string(shape.head_dim) + " is refused";
  }
  if (shape.heads != shape.kv_heads)
    return "runs only as many k and v heads as query heads: its k and v descriptors take q's head count (heads "
           "past the kv heads read past k and v) and its backward asserts q, k and v share strides; " +
           std::to_string(shape.heads) + " query heads over " + std::to_string(shape.kv_heads) +
           " kv heads are refused";
  if (shape.query_rows != shape.keys)
    return "takes one N_CTX for q, k and v (the tutorial reads k and v with q's length, N_CTX = q.shape[2]); " +
           std::to_string(shape.query_rows) + " query rows over " + std::to_string(shape.keys) + " keys are refused";
  const int tile_rows = std::max(tile.block_m, tile.block_n);
  if (shape.query_rows % tile_rows != 0)
    return "runs only lengths that are a multiple of its " + std::to_string(tile.block_m) + " x " +
           std::to_string(tile.block_n) + " tile: the tutorial's forward has no bounds mask, so a partial tile " +
           "reads and writes another head's rows; N_CTX " + std::to_string(shape.query_rows) + " is refused";
  if (shape.backward && shape.query_rows % kTutorialPreBlock != 0)
    return "runs a backward only for lengths that are a multiple of " + std::to_string(kTutorialPreBlock) +
           ": its backward asserts N_CTX % PRE_BLOCK == 0 (PRE_BLOCK = " + std::to_string(kTutorialPreBlock) +
           "); N_CTX " + std::to_string(shape.query_rows) + " is refused";
  if (shape.causal && tile.block_n > tile.block_m)
    return "runs a causal mask only with BLOCK_N <= BLOCK_M: with " + std::to_string(tile.block_m) + " x " +
           std::to_string(tile.block_n) +
           " the tutorial's off-band loop (STAGE 1: keys below start_m*BLOCK_M in unmasked steps of BLOCK_N) "
           "reads keys past the diagonal, which its on-band loop reads again: not attention";
  return "";
}

}  // namespace

std::string unmodelled_shape(const KernelModel& km, int query_rows, int keys, bool causal, int batch_kv_heads,
                             int heads_per_kv_head) {
  RunShape shape;
  shape.batch = std::max(batch_kv_heads, 1);
  shape.kv_heads = 1;
  shape.heads = std::max(heads_per_kv_head, 1);
  shape.query_rows = query_rows;
  shape.keys = keys;
  shape.causal = causal;
  return unmodelled_shape(km, shape);
}

void refuse_unmodelled_shape(const std::string& model_name, const KernelModel& km, const RunShape& shape) {
  if (const std::string why = unmodelled_shape(km, shape); !why.empty())
    throw std::invalid_argument("attention: " + model_name + " does not model this shape: it " + why);
}

std::string unmodelled_shape(const KernelModel& km, const RunShape& shape) {
  const int query_rows = shape.query_rows, keys = shape.keys;
  const bool causal = shape.causal;
  const int batch_kv_heads = shape.batch * shape.kv_heads;
  const int heads_per_kv_head = shape.heads / std::max(shape.kv_heads, 1);
  if (km.tutorial_tiles.strict)
    if (const std::string why = what_the_tutorial_refuses(km, shape); !why.empty()) return why;
  if (km.max_query_rows > 0 && query_rows > km.max_query_rows)
    return "runs only for queries of at most " + std::to_string(km.max_query_rows) +
           " rows (Inductor's flex-decoding choice); " + std::to_string(query_rows) +
           " rows run FlexAttention's template: flex-attention-sm90";
  if (km.flex_decode_sms > 0) {
    // flex_decoding.py: BLOCK_M = max(next_power_of_2(seq_len_q * gqa_group_size), 16).
    // Its 2 warps (num_warps 2 for every head dim) go along the keys, [1, 2], the row sum modelled,
    // unless the first of the loop's two chained dots that Triton converts to mma.sync has at least
    // as many rows as columns (AccelerateMatmul.cpp warpsPerTileV2: shape[0] >= shape[1] gives
    // [num_warps, 1], warps along the rows, and the other dot takes that layout). MLIR's greedy
    // rewriter visits bottom-up, so that is the P·V dot, BLOCK_M x V_HEAD_DIM_ROUNDED (the next
    // power of two of the head dim); the q·k dot, BLOCK_M x BLOCK_N, would decide in the other
    // order. Accepted only where both give [1, 2], so the order does not matter.
    const long long packed = static_cast<long long>(query_rows) * std::max(heads_per_kv_head, 1);
    long long block_m = 16;
    while (block_m < packed) block_m *= 2;
    const long long block_n = km.tiles_for(shape.head_dim, query_rows, causal, keys).block_n;
    const long long d_rounded = shape.head_dim > 0 ? std::bit_ceil(static_cast<unsigned>(shape.head_dim)) : 0;
    const bool rows_by_pv = d_rounded > 0 && block_m >= d_rounded;
    if (block_m >= block_n || rows_by_pv)
      return "models the decoding kernel's 2 warps laid along the keys ([1, 2]); this run packs " +
             std::to_string(packed) + " query rows (rows x heads per kv head) into a block of " +
             std::to_string(block_m) + " rows, and Triton lays the warps along the rows when a chained dot " +
             "has at least as many rows as columns (AccelerateMatmul.cpp warpsPerTileV2): here the " +
             (rows_by_pv ? "P·V dot, " + std::to_string(block_m) + " x " + std::to_string(d_rounded) + " (head dim " +
                               std::to_string(shape.head_dim) + " rounded to a power of two)"
                         : "q·k dot, " + std::to_string(block_m) + " x " + std::to_string(block_n) + " keys") +
             ", which sums a row in another order";
  }
  if (km.flex_decode_sms > 0 && causal && flex_decode_split_count(km, batch_kv_heads) != kFlexDecodeModelledSplits)
    return "models the split combine Inductor compiles for " + std::to_string(kFlexDecodeModelledSplits) +
           " splits (batch x kv heads = 2 on " + std::to_string(km.flex_decode_sms) +
           " SMs); under a causal mask this run's keys spread over " +
           std::to_string(flex_decode_split_count(km, batch_kv_heads)) + " splits, whose combine is not read";
  if (km.row_sum == RowSumOrder::warp_softmax && keys > pytorch_softmax::register_forward_max_keys)
    return "models PyTorch's softmax kernels for rows of at most " +
           std::to_string(pytorch_softmax::register_forward_max_keys) + " keys; " + std::to_string(keys) +
           " keys run its shared-memory or plain block softmax (cunn_SoftMaxForwardSmem, cunn_SoftMaxForward), "
           "not modelled";
  return "";
}

bool draws_random_bits(const KernelModel& km) { return km.o_round == RoundingMode::sr || km.fp8.hadamard; }

std::string shape_warning(const KernelModel& km, const RunShape& shape) {
  if (km.bwd_always_causal && shape.backward && !shape.causal)
    return "this backward always masks causally, as the kernel's does: with causal off, its dQ, dK, dV are not the "
           "gradients of its O";
  return {};
}

std::vector<std::string> unmeasured_shape_notes(const KernelModel& km, const RunShape& shape) {
  std::vector<std::string> notes;
  if (km.structure == Structure::correctly_rounded) return notes;
  if (km.row_sum == RowSumOrder::warp_softmax && shape.keys > 1024)
    notes.push_back("note: rows of " + std::to_string(shape.keys) +
                    " keys run PyTorch's softmax kernels for rows over 1024 keys (SoftMax.cu), modelled from the "
                    "source, UNMEASURED (the captures hold rows of 256 keys)");
  if (km.splitkv.enabled) {
    const int splits = fa2_splitkv_num_splits(km, shape.batch, shape.heads, shape.kv_heads, shape.query_rows,
                                              shape.keys, shape.head_dim);
    if (splits > 1) {
      const SplitKvCombineLayout layout = fa2_splitkv_combine_layout(shape.head_dim, splits);
      if (layout.lse_per_thread > 1)
        notes.push_back("note: " + std::to_string(splits) +
                        " splits: the combine spreads a row's LSEs over several threads per lane, a layout no "
                        "capture has (the H200's ran 2 to 8 splits): UNMEASURED");
      if (shape.query_rows == 1 && shape.heads > shape.kv_heads)  // as splitkv.cpp swaps
        notes.push_back(
            "note: a grouped-query decode, which FA2's mha_fwd runs with the group's heads as query rows "
            "(seqlen_q = heads per kv head): UNMEASURED");
      if (shape.head_dim > 128)
        notes.push_back("note: head dim " + std::to_string(shape.head_dim) +
                        " splits with 64-key blocks, a configuration no capture has: UNMEASURED");
    }
  }
  if (km.flex_decode_sms > 0 && shape.causal)
    notes.push_back("note: a causal flex decode spreads its keys over " +
                    std::to_string(flex_decode_split_count(km, shape.batch * shape.kv_heads)) +
                    " splits, whose combine is modelled from the PTX Inductor compiled: UNMEASURED");
  // Inductor's _use_flex_decoding (flex_attention.py): newer versions also ask for a power-of-two
  // group of query heads per kv head (pw_of_two) and fall back to the template otherwise; which
  // test PyTorch 2.11 makes is not settled here.
  const int group = shape.heads / std::max(shape.kv_heads, 1);
  const bool power_of_two_group = group > 0 && (group & (group - 1)) == 0;
  if (km.min_query_rows_run > 0 && shape.query_rows < km.min_query_rows_run)
    notes.push_back("note: Inductor runs queries under " + std::to_string(km.min_query_rows_run) +
                    " rows through its flex-decoding kernel (flex-decoding-sm90), not this template" +
                    (power_of_two_group ? std::string()
                                        : " (versions that test for a power-of-two group of query heads per kv "
                                          "head, " +
                                              std::to_string(group) + " here, run this template)") +
                    ": this run is the template's arithmetic");
  if (km.max_query_rows > 0 && km.flex_decode_sms > 0 && !power_of_two_group)
    notes.push_back("note: " + std::to_string(group) +
                    " query heads per kv head: Inductor versions whose _use_flex_decoding asks for a power of two "
                    "run FlexAttention's template (flex-attention-sm90) on this shape, not this kernel");
  // FlexAttention's tiles were measured at head dim 64 only (the H200's captures); Inductor's
  // tuning table (template_heuristics/triton.py h100_default_flex_config and the default beside
  // it) picks them per head dim and dtype, and its entries differ between PyTorch versions.
  if (km.min_query_rows_run > 0 && shape.head_dim != 64 && shape.head_dim > 0)
    notes.push_back("note: head dim " + std::to_string(shape.head_dim) +
                    ": Inductor's tuning table picks FlexAttention's tiles per head dim and dtype (128 x 64 for bf16 "
                    "at 128 and 64 x 32 at 256 in the versions read; 128 x 128 at 64, the captures'); this run "
                    "keeps the measured head-dim-64 tiles, so another tile's row sums and rescales differ: "
                    "UNMEASURED (ASSUMED tiles)");
  if (!km.unequal_lengths_note.empty() && shape.query_rows != shape.keys &&
      (shape.causal || !km.unequal_lengths_note_only_when_causal))
    notes.push_back("note: " + km.unequal_lengths_note);
  if (const KernelModel::TritonTutorialTiles& tt = km.tutorial_tiles; !tt.block_n.empty()) {
    // The H200 captures forced this tile (gpu/capture_paths.py load_tutorial; their metadata's
    // tutorial_autotune): the only one measured.
    constexpr int kCapturedBlockM = 128, kCapturedBlockN = 64;
    const TileSizes tile = km.tiles_for(shape.head_dim, shape.query_rows, shape.causal, shape.keys);
    const std::string tile_text = std::to_string(tile.block_m) + " x " + std::to_string(tile.block_n);
    const bool captured = tile.block_m == kCapturedBlockM && tile.block_n == kCapturedBlockN;
    if (!tt.named)
      notes.push_back("note: the tutorial autotunes its forward tile at run time, by timing, over BLOCK_M " +
                      int_set_text(tt.block_m) + " x BLOCK_N " + int_set_text(tt.block_n) +
                      " (BLOCK_N <= head dim); this run models " + tile_text +
                      (captured ? ", the tile the H200 captures forced" : ", a tile no capture ran (UNMEASURED)") +
                      ": another BLOCK_N sums and rescales a row in another order, another BLOCK_M moves the "
                      "causal band (ASSUMED; +tile:BMxBN names one)");
    else if (!captured)
      notes.push_back("note: +tile:" + std::to_string(tile.block_m) + "x" + std::to_string(tile.block_n) +
                      " is a tile the tutorial's autotuner may pick, but no capture ran it (they forced " +
                      std::to_string(kCapturedBlockM) + "x" + std::to_string(kCapturedBlockN) + "): UNMEASURED");
    if (tt.strict && shape.batch > 1)
      notes.push_back(
          "note: the tutorial's TMA forward (@003da478) starts batch z, head h at row offset_y = off_z + off_h * "
          "N_CTX, not (z * H + h) * N_CTX, so for batch > 1 the kernel reads other rows; the model computes each "
          "batch's own attention, which the kernel does only for batch 0 (ASSUMED to be what is wanted)");
    if (!tt.strict)
      if (const std::string why = what_the_tutorial_refuses(km, shape); !why.empty())
        notes.push_back("note: the tutorial " + why + ": this run is " + km.base +
                        "'s extension (triton-tutorial-sm90 refuses it)");
  }
  // A forward-only model computes delta alone: no dK or dV to reduce.
  if (!km.gqa_reduction_as_fa2 && km.backward_modelled && shape.backward && shape.heads > shape.kv_heads)
    notes.push_back(
        "note: grouped-query dK and dV are reduced as FA2's mha_bwd reduces them (each query head's "
        "gradient rounded, the group summed in fp32); " +
        km.base + "'s kernel reduces the group its own way, which is not modelled (ASSUMED)");
  return notes;
}

bool reads_inputs_of(const KernelModel& km, const Format& dtype) {
  return !((km.input == formats::bf16 && dtype == formats::fp16) ||
           (km.input == formats::fp16 && dtype == formats::bf16));
}

std::optional<Format> sole_input_format(const KernelModel& km) {
  if (km.tutorial_tiles.strict) return formats::fp16;
  return std::nullopt;
}

bool delta_reads_unrounded_o(const KernelModel& km) {
  if (km.structure == Structure::correctly_rounded) return km.reference_delta_exact;
  return km.o_fp32 || km.delta_dpp || km.delta == DeltaFormula::softmax_backward;
}

KernelModel correctly_rounded_recipe(const Format& input, const Format& output) {
  return correctly_rounded_model(input, output);
}

}  // namespace fb::attn
