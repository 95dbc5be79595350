// attention/splitkv.cpp: FA2's split-KV shape rules and the combine's test entry
// (attention/splitkv.hpp has the contract and the sources).
#include "attention/splitkv.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

namespace fb::attn {

int fa2_num_splits_heuristic(int batch_nheads_mblocks, int num_sms, int num_n_blocks, int max_splits) {
  // "Enough to almost fill the SMs": the comparison is in float (0.8f * SMs).
  if (static_cast<float>(batch_nheads_mblocks) >= 0.8f * static_cast<float>(num_sms)) return 1;
  const int most = std::min({max_splits, num_sms, num_n_blocks});
  const auto blocks_per = [&](int s) { return (num_n_blocks + s - 1) / s; };
  const auto eligible = [&](int s) { return s == 1 || blocks_per(s) != blocks_per(s - 1); };
  std::vector<float> eff(static_cast<std::size_t>(std::max(most, 0)), 0.0f);
  float best = 0.0f;
  for (int s = 1; s <= most; ++s) {
    if (!eligible(s)) continue;
    const float waves = static_cast<float>(batch_nheads_mblocks * s) / static_cast<float>(num_sms);
    eff[static_cast<std::size_t>(s - 1)] = waves / std::ceil(waves);
    best = std::max(best, eff[static_cast<std::size_t>(s - 1)]);
  }
  // The 85% rule compares in double (0.85 is a double literal).
  for (int s = 1; s <= most; ++s)
    if (eligible(s) && static_cast<double>(eff[static_cast<std::size_t>(s - 1)]) >= 0.85 * static_cast<double>(best))
      return s;
  return 1;
}

int fa2_splitkv_block_n(int head_dim) { return head_dim <= 64 ? 256 : head_dim <= 128 ? 128 : 64; }

int fa2_splitkv_num_splits(const KernelModel& km, int batch, int heads, int kv_heads, int seqlen_q, int seqlen_k,
                           int head_dim) {
  if (km.splitkv.num_splits > 0) return km.splitkv.num_splits;
  // mha_fwd: a one-row decode of grouped heads runs as heads/kv_heads rows of kv_heads heads
  // (seqlenq_ngroups_swapped). Its head_size_og % 8 == 0 condition always holds on this path:
  // SDPA pads q, k, v to a multiple of 8 before it calls _scaled_dot_product_flash_attention
  // (attention.cpp, pad_last_dim<8, false>), as flash_attn's Python interface does. Windows,
  // ALiBi and dropout, its other conditions, are not modelled.
  if (seqlen_q == 1 && kv_heads > 0 && heads > kv_heads) {
    seqlen_q = heads / kv_heads;
    heads = kv_heads;
  }
  const int block_n = fa2_splitkv_block_n(head_dim);
  const int n_blocks = (seqlen_k + block_n - 1) / block_n;
  const int m_blocks = (seqlen_q + 63) / 64;
  return fa2_num_splits_heuristic(batch * heads * m_blocks, 2 * km.splitkv.sm_count, n_blocks, 128);
}

SplitKvCombineLayout fa2_splitkv_combine_layout(int head_dim, int num_splits) {
  if (num_splits < 1 || num_splits > 128) throw std::invalid_argument("split-KV: num_splits must be in 1..128");
  const int k_head_dim = fa2_instantiated_head_dim(head_dim);  // no 160 or 224 in PyTorch 2.11
  SplitKvCombineLayout lay;
  lay.block_m = k_head_dim % 128 == 0 ? 4 : k_head_dim % 64 == 0 ? 8 : 16;
  lay.max_splits = 2;
  while (lay.max_splits < num_splits) lay.max_splits *= 2;
  constexpr int kThreads = 128;
  lay.rows_per_load_transpose = std::min(kThreads / lay.block_m, lay.max_splits);
  lay.lse_per_thread = (lay.max_splits * lay.block_m + kThreads - 1) / kThreads;
  return lay;
}

SplitKvCombined fa2_splitkv_combine(const KernelModel& km, int head_dim, const std::vector<double>& lse,
                                    const std::vector<double>& o_accum, bool exact) {
  const int splits = static_cast<int>(lse.size());
  if (o_accum.size() != lse.size() * static_cast<std::size_t>(head_dim))
    throw std::invalid_argument("fa2_splitkv_combine: o_accum must hold num_splits rows of head_dim");
  if (exact)
    return detail::splitkv_combine_row(km, detail::ExactArith{&km}, head_dim, splits, lse.data(), o_accum.data());
  return detail::splitkv_combine_row(km, detail::HardwareArith{&km}, head_dim, splits, lse.data(), o_accum.data());
}

}  // namespace fb::attn
