// attention/splitkv.hpp: FA2's split-KV forward (+splitkv; docs/DESIGN.md §6 "Split-KV"):
// how many splits PyTorch's mha_fwd picks, which KV blocks each split covers, and the combine
// kernel that joins the splits' fp32 O_accum and LSE_accum into O and LSE. Measured as
// PyTorch 2.11 compiles it (no fast math, the logsum combine): the five split-KV captures of
// the H200 (traces/hw/h200/paths/splitkv, 2 to 8 splits) replay bit for bit, O and LSE.
//
// Contract: every function restates, in this project's words, a fact read in the sources
// named beside it ("FA2" below is Dao-AILab/flash-attention csrc/flash_attn at 0251105a,
// "PyTorch" is pytorch/pytorch aten/src/ATen/native/transformers/cuda/flash_attn/ at the
// commit named; which of these PyTorch 2.11 compiles is ASSUMED, see docs/DESIGN.md §6):
// - fa2_num_splits_heuristic: flash_api.cpp num_splits_heuristic (FA2 281-315; PyTorch
//   ef3d5c9e, the same text). Returns 1 when batch*heads*m_blocks >= 0.8f*SMs; otherwise the
//   smallest eligible split count whose wave efficiency n/ceil(n), n = float(bhm*s)/SMs, is at
//   least 0.85 of the best over 1..min(max_splits, SMs, n_blocks); a count is eligible when it
//   is 1 or ceil(n_blocks/s) differs from ceil(n_blocks/(s-1)).
// - fa2_splitkv_num_splits: flash_api.cpp mha_fwd and set_params_splitkv (FA2 317-347, 424-436,
//   496-499; PyTorch ef3d5c9e mha_fwd): seqlen_q == 1 drops causal; a decode with grouped heads
//   is run as seqlen_q = heads/kv_heads rows of kv_heads heads (seqlenq_ngroups_swapped);
//   block_n = 256 (d <= 64), 128 (d <= 128), 64; m_blocks = ceil(seqlen_q/64); the heuristic
//   gets 2 * multiProcessorCount (128 threads per block) and max_splits 128.
// - splits: flash_fwd_kernel.h compute_attn_1rowblock_splitkv:535-543: n_blocks_per_split =
//   ceil(ceil(seqlen_k/kBlockN)/num_splits); split s covers [s*per, min((s+1)*per, n_blocks))
//   cut at the row block's causal limit; an empty one writes O_accum = 0 and LSE_accum = -inf
//   (544-581); run_mha_fwd (FA2 261-270) runs the regular kernel when num_splits <= 1.
// - the combine: fa2_splitkv_combine_row below, with its line numbers.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "attention/arith.hpp"
#include "attention/kernel_models.hpp"
#include "emu/sfu/cuda_expf.hpp"
#include "emu/sfu/cuda_logf.hpp"
#include "emu/sfu/special_functions.hpp"

namespace fb::attn {

int fa2_num_splits_heuristic(int batch_nheads_mblocks, int num_sms, int num_n_blocks, int max_splits);
// The split kernel's kBlockN for head dim d (flash_fwd_launch_template.h run_mha_fwd_splitkv_dispatch:184).
int fa2_splitkv_block_n(int head_dim);
// The split count PyTorch's mha_fwd runs for this shape: km.splitkv.num_splits when given, else
// the heuristic with km.splitkv.sm_count. causal only matters through seqlen_q == 1.
int fa2_splitkv_num_splits(const KernelModel& km, int batch, int heads, int kv_heads, int seqlen_q, int seqlen_k,
                           int head_dim);

// The combine kernel's thread layout for a head dim and split count
// (flash_fwd_launch_template.h:136-160 and combine_attn_seqk_parallel:1122-1187): kBlockM rows
// per block (4 when the instantiated head dim is a multiple of 128, 8 of 64, else 16), kMaxSplits
// = 2^Log_max_splits (the smallest power of two >= num_splits, at least 2), 128 threads;
// kRowsPerLoadTranspose = min(128 / kBlockM, kMaxSplits) lanes share a row, lane j holding the
// splits l*kRowsPerLoadTranspose + j for l < kNLsePerThread = ceil(kMaxSplits*kBlockM/128).
struct SplitKvCombineLayout {
  int block_m = 0, max_splits = 0, rows_per_load_transpose = 0, lse_per_thread = 0;
};
SplitKvCombineLayout fa2_splitkv_combine_layout(int head_dim, int num_splits);

// What the combine leaves for one query row: the LSE it writes, its lse_max and lse_sum, the
// per-split scales and O in fp32 before the cast (one entry per column).
struct SplitKvCombined {
  double lse = 0, lse_max = 0, lse_sum = 0;
  std::vector<double> scale, o_pre;
};

namespace detail {

// The combine's expf: fast math ex2.approx.ftz(fl.ftz(x * log2e)); otherwise CUDA's expf over
// the SFU set's ex2.approx.ftz (emu/sfu/cuda_expf.hpp).
template <class A>
double splitkv_expf(const KernelModel& km, const A& ar, double x) {
  if constexpr (A::exact) {
    return std::exp(x);
  } else {
    (void)ar;
    if (km.splitkv.fast_math) return fast_exp(km.sfu, static_cast<float>(x));
    return cuda_expf(static_cast<float>(x), *km.sfu.ex2);
  }
}

// combine_attn_seqk_parallel for one query row (flash_fwd_kernel.h at 0251105a, lines named):
// lse[s] and o_accum[s * d + c] for s < num_splits (LSE_accum and O_accum as the split kernel
// wrote them: fp32 values, -inf and 0 for an empty split).
//  1166-1187: the row's splits spread over rows_per_load_transpose lanes, -inf past num_splits;
//  1191-1196: lse_max = the largest (exact), -inf -> 0;
//  1197-1199: each lane sums expf(lse - lse_max) over its splits in l order, in fp32;
//  1200-1201: Allreduce<rows_per_load_transpose> (utils.h:112-131): shfl_xor with offsets
//             T/2, T/4, ..., 1, each lane adding its partner's value (every lane ends equal);
//  1204: lse_logsum = (sum == 0 or NaN) ? +inf : logf(sum) + lse_max (fast math: one FFMA
//        lg2(sum)*ln2 + lse_max, as nvcc contracts __logf's multiply with the add);
//  1216-1222: scale_s = expf(lse_s - lse_logsum) (combine=inv-sum: expf(lse_s - lse_max) * inv_sum,
//             inv_sum = (sum == 0 or NaN) ? 0 : 1.f / sum: the newest upstream as reported, NOT read);
//  1252-1271: O = 0, then per split in order O = fma(scale_s, O_accum_s, O) (nvcc contracts
//             `tOrO += lse_scale * tOrOaccum`), in fp32; 1273: cast to the output dtype (caller).
template <class A>
SplitKvCombined splitkv_combine_row(const KernelModel& km, const A& ar, int head_dim, int num_splits, const double* lse,
                                    const double* o_accum) {
  constexpr double kInfinity = std::numeric_limits<double>::infinity();
  const SplitKvCombineLayout lay = fa2_splitkv_combine_layout(head_dim, num_splits);
  const int lanes = lay.rows_per_load_transpose;
  SplitKvCombined out;
  auto lane_value = [&](int lane, int l) {
    const int split = l * lanes + lane;
    return split < num_splits ? lse[split] : -kInfinity;
  };
  double lse_max = -kInfinity;
  for (int lane = 0; lane < lanes; ++lane)
    for (int l = 0; l < lay.lse_per_thread; ++l) lse_max = std::max(lse_max, lane_value(lane, l));
  if (lse_max == -kInfinity) lse_max = 0.0;
  std::vector<double> sum(static_cast<std::size_t>(lanes));
  for (int lane = 0; lane < lanes; ++lane) {
    double s = splitkv_expf(km, ar, ar.f32(lane_value(lane, 0) - lse_max));
    for (int l = 1; l < lay.lse_per_thread; ++l)
      s = ar.f32(s + splitkv_expf(km, ar, ar.f32(lane_value(lane, l) - lse_max)));
    sum[static_cast<std::size_t>(lane)] = s;
  }
  for (int offset = lanes / 2; offset >= 1; offset /= 2) {
    std::vector<double> next(sum.size());
    for (int lane = 0; lane < lanes; ++lane)
      next[static_cast<std::size_t>(lane)] =
          ar.f32(sum[static_cast<std::size_t>(lane)] + sum[static_cast<std::size_t>(lane ^ offset)]);
    sum.swap(next);
  }
  const double lse_sum = sum[0];
  const bool empty = lse_sum == 0.0 || std::isnan(lse_sum);
  double lse_logsum;
  if (empty) {
    lse_logsum = kInfinity;
  } else if constexpr (A::exact) {
    lse_logsum = std::log(lse_sum) + lse_max;
  } else if (km.splitkv.fast_math) {
    lse_logsum = ar.fma32(ar.lg2(lse_sum), static_cast<double>(std::bit_cast<float>(kLn2Fp32Bits)), lse_max);
  } else {
    lse_logsum = ar.f32(static_cast<double>(cuda_logf(static_cast<float>(lse_sum))) + lse_max);
  }
  out.lse = lse_logsum;
  out.lse_max = lse_max;
  out.lse_sum = lse_sum;
  out.scale.resize(static_cast<std::size_t>(num_splits));
  double inv_sum = 0.0;
  if (km.splitkv.scale == SplitKvScale::exp_minus_max_inv_sum && !empty) {
    if constexpr (A::exact) {
      inv_sum = 1.0 / lse_sum;
    } else {
      inv_sum = km.splitkv.fast_math ? ar.rcp(lse_sum) : ar.f32(1.0 / lse_sum);
    }
  }
  for (int s = 0; s < num_splits; ++s) {
    out.scale[static_cast<std::size_t>(s)] = km.splitkv.scale == SplitKvScale::exp_minus_logsum
                                                 ? splitkv_expf(km, ar, ar.f32(lse[s] - lse_logsum))
                                                 : ar.f32(splitkv_expf(km, ar, ar.f32(lse[s] - lse_max)) * inv_sum);
  }
  out.o_pre.assign(static_cast<std::size_t>(head_dim), 0.0);
  for (int s = 0; s < num_splits; ++s)
    for (int c = 0; c < head_dim; ++c)
      out.o_pre[static_cast<std::size_t>(c)] =
          ar.fma32(out.scale[static_cast<std::size_t>(s)], o_accum[static_cast<std::size_t>(s) * head_dim + c],
                   out.o_pre[static_cast<std::size_t>(c)]);
  return out;
}

}  // namespace detail

// splitkv_combine_row in the hardware arithmetic (exact: every rounding the identity), for tests.
SplitKvCombined fa2_splitkv_combine(const KernelModel& km, int head_dim, const std::vector<double>& lse,
                                    const std::vector<double>& o_accum, bool exact = false);

}  // namespace fb::attn
