// attention/engine_detail.hpp: what the passes of run_attention() share (internal to attention/).
//
// Contract:
// - The passes live one per file, as FlashAttention splits them: attention/online_forward.cpp
//   (the online-softmax loop), attention/materialised_forward.cpp (standard-*, golden-*-baseline),
//   attention/backward.cpp (delta and the three backward kernels); attention/engine.cpp
//   prepares the operands, splits the work over threads and dispatches.
// - Every step helper here reads the kernel recipe (attention/kernel_models.hpp) and computes
//   exactly what the recipe's kernel computes, through an arithmetic policy A
//   (attention/arith.hpp: HardwareArith or ExactArith). The helpers are header-inline so the
//   loops inline them; the passes are templates over (A, E) compiled once in their own files,
//   explicitly instantiated for the three pairs run_attention() uses (FB_ATTN_FOR_EACH_ARITH).
// - E is the element type the operands are held in: float for every recipe whose inputs and
//   P̄ cast are at most fp32-wide, double for the fp64 models and for ExactArith.
// - Which KernelModel fields these passes read (recipe_stage_fields, uses_special_function) is
//   stated beside them, in attention/engine_stage_uses.cpp, naming the step that reads each
//   field: a change to a step here changes its predicate there.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numbers>
#include <optional>
#include <type_traits>
#include <vector>

#include "attention/arith.hpp"
#include "attention/attention.hpp"
#include "attention/kernel_models.hpp"
#include "emu/array_rounding.hpp"
#include "emu/summation.hpp"

namespace fb::attn::detail {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- per-head operands, prepared once (O(N·d)) --------------------------------------
// nq query rows (Q, dO, and their transposes) and nk key rows (K, V, Kᵀ, Vᵀ, K', K'ᵀ).
template <class E>
struct HeadData {
  int nq = 0, nk = 0, d = 0;
  // This head's index b * heads + h in the run's [batch, heads, ...] tensors: a kernel whose order
  // depends on a row's address (PyTorch's plain block softmax backward) reads it.
  int batch_head = 0;
  std::vector<E> q, k, v, vt;        // rows [nq or nk][d]; vt = Vᵀ [d][nk]
  std::vector<E> d_o, d_ot, qt, kt;  // backward: dO rows, dOᵀ [d][nq], Qᵀ [d][nq]; Kᵀ [d][nk] (also tile_scores)
  std::vector<E> kp, kpt;            // triton_prescaled_k backward: the host-prescaled K' rows and K'ᵀ
  const E* q_row(int r) const { return q.data() + static_cast<std::size_t>(r) * d; }
  const E* k_row(int r) const { return k.data() + static_cast<std::size_t>(r) * d; }
  const E* v_row(int r) const { return v.data() + static_cast<std::size_t>(r) * d; }
  const E* vt_row(int c) const { return vt.data() + static_cast<std::size_t>(c) * nk; }
  const E* do_row(int r) const { return d_o.data() + static_cast<std::size_t>(r) * d; }
  const E* dot_row(int c) const { return d_ot.data() + static_cast<std::size_t>(c) * nq; }
  const E* qt_row(int c) const { return qt.data() + static_cast<std::size_t>(c) * nq; }
  const E* kt_row(int c) const { return kt.data() + static_cast<std::size_t>(c) * nk; }
  const E* kp_row(int r) const { return kp.data() + static_cast<std::size_t>(r) * d; }
  const E* kpt_row(int c) const { return kpt.data() + static_cast<std::size_t>(c) * nk; }
  // fp8 models (attention/fp8_quant.hpp): this head's descale per Q block and per K/V
  // block (one entry each under per-tensor scaling); empty otherwise.
  std::vector<double> q_descale, k_descale, v_descale;
  int q_block_rows = 1, kv_block_rows = 1;
  // The matrices a tensor-core dot reads as its column panel, prepared once per head
  // (prepare_panels) for every row (fb::fused_dot_rows), per input format's emin: their
  // alignment exponents (fb::dot_alignment_exponents), and for Kᵀ and Vᵀ, whose rows are nk
  // long, a copy in tiles of kPanelTile columns: a tile's d rows then lie in d * kPanelTile
  // contiguous elements instead of d rows nk elements apart, which map to the same L1 sets.
  static constexpr int kPanelTile = 64;
  struct Panel {
    const E* data;
    std::size_t size;
    int emin;
    std::vector<std::int32_t> alignment;
    int rows = 0;  // tiled copies only: the matrix's rows (d); columns: nk
    std::vector<E> tiled;
    std::vector<std::int32_t> tiled_alignment;
  };
  std::vector<Panel> panels;
  // For float operands and tensor-core dot specs of km (no-op otherwise); call once the
  // matrices are final.
  void prepare_panels(const KernelModel& km) {
    if constexpr (std::is_same_v<E, float>) {
      for (const DotSpec* spec : {&km.score_dot, &km.pv_dot}) {
        if (spec->kind != DotKind::tensor_core || spec->model == nullptr) continue;
        const int emin = spec->model->input.emin();
        // The matrices the dots read as column panels: Kᵀ and V in the forward; with a
        // backward also Vᵀ, dO, Q, K and the prescaled K' (not the other transposes).
        const bool backward = !d_o.empty();
        for (const std::vector<E>* m : {&kt, &v, &vt, &d_o, &q, &k, &kp}) {
          if (m->empty() || (!backward && m != &kt && m != &v) || panel_of(*spec, m->data()) != nullptr) continue;
          Panel& p = panels.emplace_back(Panel{m->data(), m->size(), emin, {}, 0, {}, {}});
          p.alignment.resize(m->size());
          dot_alignment_exponents(*spec->model, m->data(), m->size(), p.alignment.data());
          if (m == &kt || m == &vt) {
            const std::size_t tiles = (static_cast<std::size_t>(nk) + kPanelTile - 1) / kPanelTile;
            const std::size_t tile_size = static_cast<std::size_t>(d) * kPanelTile;
            p.rows = d;
            p.tiled.assign(tiles * tile_size, E{0});
            for (int r = 0; r < d; ++r)
              for (int c = 0; c < nk; ++c)
                p.tiled[static_cast<std::size_t>(c / kPanelTile) * tile_size +
                        static_cast<std::size_t>(r) * kPanelTile + static_cast<std::size_t>(c % kPanelTile)] =
                    (*m)[static_cast<std::size_t>(r) * nk + c];
            p.tiled_alignment.resize(p.tiled.size());
            dot_alignment_exponents(*spec->model, p.tiled.data(), p.tiled.size(), p.tiled_alignment.data());
          }
        }
      }
    }
  }
  // The prepared panel b points into, for spec's input format; null when none.
  const Panel* panel_of(const DotSpec& spec, const E* b) const {
    if (spec.kind != DotKind::tensor_core || spec.model == nullptr) return nullptr;
    const int emin = spec.model->input.emin();
    for (const Panel& p : panels)
      if (p.emin == emin && b >= p.data && b < p.data + p.size) return &p;
    return nullptr;
  }
};

// One head's rows of t as E (exact: t holds values of a format E represents), and optionally
// their transpose (the column operand of the P·V and backward dots).
template <class E>
void copy_rows(const Tensor4& t, int b, int h, std::vector<E>& rows, std::vector<E>* transposed) {
  const int n = t.rows, d = t.cols;
  rows.resize(static_cast<std::size_t>(n) * d);
  for (int r = 0; r < n; ++r) {
    const double* src = t.row(b, h, r);
    for (int c = 0; c < d; ++c) rows[static_cast<std::size_t>(r) * d + c] = static_cast<E>(src[c]);
  }
  if (transposed) {
    transposed->resize(static_cast<std::size_t>(n) * d);
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < d; ++c)
        (*transposed)[static_cast<std::size_t>(c) * n + r] = rows[static_cast<std::size_t>(r) * d + c];
  }
}

// nq query rows, nk keys (nq != nk: decoding with a KV cache, cross-attention).
struct Geometry {
  int nq = 0, nk = 0, d = 0;
  double scale = 0.0;
  bool causal = false;
  bool top_left = false;  // AttentionInputs::CausalAlignment::top_left
  TileSizes tiles;
  SoftwareExp2Split software_exp2;  // the run's +sw-exp2 split (KernelModel::software_exp2_split)
  // +splitkv: the run's split count (attention/splitkv.hpp fa2_splitkv_num_splits); 0 without
  // +splitkv. 1 is PyTorch's regular kernel, run through the split loop with one split.
  int num_splits = 0;
  // FlexAttention's decoding kernel under a causal block mask: its SPLIT_KV
  // (flex_decode_split_count); 0 otherwise (without a mask split 0 takes every key: one pass).
  int flex_splits = 0;
};

// Per-row scalars of the forward the backward needs.
struct RowStats {
  double lse = 0.0;         // reported LSE (natural log)
  double lse_kernel = 0.0;  // in the kernel's units (Triton: log2 units); +inf for a row that saw
                            // nothing, the backward's guard, whatever `lse` reports
  double m = 0.0, l = 0.0;  // materialised softmax: max and sum
};

// PyTorch's result type of a binary op between tensors of formats a and b (nullopt = fp64):
// the same format when they agree, fp64 when either is fp64, else fp32 (bf16 with fp16 or
// with fp32 promotes to fp32; the formats modelled here are at most 32 bits wide).
inline std::optional<Format> promoted(const std::optional<Format>& a, const std::optional<Format>& b) {
  if (!a || !b) return std::nullopt;
  if (*a == *b) return a;
  return formats::fp32;
}

// The causal diagonal's offset: query row i's diagonal key is i + causal_offset(g). FA2 >= 2.1
// aligns the mask to the bottom-right corner (csrc/flash_attn/src/mask.h:54, col_idx_limit_right
// = min(max_seqlen_k, row_idx + 1 + max_seqlen_k - max_seqlen_q)), so the last query row sees
// every key; 0 for nq == nk, and for a top-left aligned mask (row i sees keys j <= i).
inline int causal_offset(const Geometry& g) { return g.top_left ? 0 : g.nk - g.nq; }
// Keys a row may see: all nk, or causal up to and including its (bottom-right aligned)
// diagonal, keys j <= row + nk - nq; none for the rows above the corner (row < nq - nk), which
// the kernels' all-masked guards give O = 0 and the LSE each writes (empty_row_lse).
inline int visible_keys(const Geometry& g, int row) {
  return g.causal ? std::clamp(row + 1 + causal_offset(g), 0, g.nk) : g.nk;
}

// FlexAttention's IS_DIVISIBLE false (torch/_inductor/kernel/flex/flex_attention.py: seq_len_q
// and seq_len_kv multiples of 128, its default sparse block): every block then goes through the
// bounds tl.where, so no block of the run contracts its exponent into an FFMA.
inline constexpr int kFlexSparseBlock = 128;
inline bool flex_bounds_masked(const Geometry& g) {
  return g.nq % kFlexSparseBlock != 0 || g.nk % kFlexSparseBlock != 0;
}
// FlexAttention's block mask (KvOrder::partial_then_full), on create_block_mask's sparse blocks of
// kFlexSparseBlock rows by kFlexSparseBlock keys (the template's 128 x 128 tiles; the decoding
// kernel's 16 x 64 tiles lie inside them): whether the sparse block holding the tile whose rows
// start at row_begin and keys at kb has a masked entry (partial; without causal masking there is
// none). A block none of whose entries is visible is not visited at all. create_block_mask pads
// the dense mask with False to whole sparse blocks (flex_attention.py
// _convert_mask_to_block_mask), so a block holding padded rows or keys is never full: under a
// causal mask it is partial (ASSUMED until a capture with a length that is not a multiple of 128
// replays).
inline bool flex_partial_block(const Geometry& g, int row_begin, int kb) {
  if (!g.causal) return false;
  const int rows = row_begin / kFlexSparseBlock * kFlexSparseBlock, keys = kb / kFlexSparseBlock * kFlexSparseBlock;
  if (rows + kFlexSparseBlock > g.nq || keys + kFlexSparseBlock > g.nk) return true;
  return keys + kFlexSparseBlock - 1 > rows + causal_offset(g);
}
// Whether FlexAttention's block (row block from row_begin, keys from kb) passes its scores through
// a tl.where before the max is subtracted: a partially masked block, or any block of a bounds-masked
// run. There the exponent is the rounded product then a subtraction, not an FFMA (forward and
// backward alike).
inline bool flex_block_behind_where(const Geometry& g, int row_begin, int kb) {
  return flex_partial_block(g, row_begin, kb) || flex_bounds_masked(g);
}
// The number of key tiles (of g.tiles.block_n, from key 0) in the full sparse blocks of the row
// block starting at row_begin, at most `blocks`.
inline int flex_full_blocks(const Geometry& g, int row_begin, int blocks) {
  if (!g.causal) return blocks;
  const int rows = row_begin / kFlexSparseBlock * kFlexSparseBlock;
  if (rows + kFlexSparseBlock > g.nq) return 0;  // padded rows: no block is full
  // Keys every row of the sparse block sees (at most nk: a key block reaching past nk holds padding).
  const int visible_to_all = std::min(rows + 1 + causal_offset(g), g.nk);
  const int full_sparse = visible_to_all / kFlexSparseBlock;
  return std::clamp(full_sparse * (kFlexSparseBlock / g.tiles.block_n), 0, blocks);
}

// Pairwise (recursive halving) sum with every addition rounded by `add`: the order of
// emu/summation.hpp pairwise_reduce.
template <class Add>
double pairwise_sum(const double* x, int n, const Add& add) {
  if (n <= 0) return 0.0;
  return pairwise_reduce(
      0, static_cast<std::size_t>(n), [x](std::size_t i) { return x[i]; },
      [&add](double a, double b, std::size_t) { return add(a, b); });
}

// The row sum of a materialised softmax (and of its backward's dP∘P) over the row's first n
// entries, in the recipe's order: RowSumOrder::warp_softmax's PyTorch kernels for a row of
// row_length keys (the entries past n, masked, add zeros), else pairwise; every addition
// rounded by `add`. `pass` picks the forward's or the backward's kernel; `flat_row` is the
// row's index in the [batch, heads, queries] score tensor, whose address sets the plain block
// backward's alignment shift.
enum class SoftmaxPass : std::uint8_t { forward, backward };

// Lane 0 of an xor butterfly over lanes[0, width) (width a power of two), every addition rounded
// by `add`: at offset width/2, ..., 1, lane i < offset adds lane i + offset. Addition commutes, so
// this is every lane's result of shfl_xor, and lane 0's of shfl_down, reductions.
template <class Add>
double xor_butterfly(double* lanes, int width, const Add& add) {
  for (int offset = width / 2; offset >= 1; offset /= 2)
    for (int i = 0; i < offset; ++i) lanes[i] = add(lanes[i], lanes[i + offset]);
  return lanes[0];
}

namespace softmax_orders {
// softmax_warp_forward/backward: W = min(32, next power of two) lanes, lane l folding elements
// l, l+W, ... from 0; then warp_reduce, sum += shfl_xor(sum, offset) for offset = W/2 .. 1.
template <class Value, class Add>
double warp(const Value& x, int row_length, const Add& add) {
  int lanes = 1;
  while (lanes < row_length && lanes < 32) lanes *= 2;
  double lane_sum[32] = {};
  for (int j = 0; j < row_length; ++j) lane_sum[j % lanes] = add(lane_sum[j % lanes], x(j));
  return xor_butterfly(lane_sum, lanes, add);
}
// cuda_utils::BlockReduce (block_reduce.cuh) as blockReduceWarp calls it: each warp's WarpReduce
// (val += shfl_down(val, offset), offset 16 .. 1; lane 0's result equals the xor butterfly's),
// warp w's sum to shared[w], then warp 0 reduces shared[lane] (the identity, 0, on lanes past the
// warp count) the same way.
template <class Add>
double block_reduce_warp(std::vector<double>& thread_sums, const Add& add) {
  const std::size_t warps = thread_sums.size() / 32;
  double lanes[32] = {};
  for (std::size_t w = 0; w < warps; ++w) lanes[w] = xor_butterfly(thread_sums.data() + w * 32, 32, add);
  return xor_butterfly(lanes, 32, add);
}
// SoftMax.cu's older blockReduce (cunn_SoftMaxBackward): thread t's value to smem[t]; lane l of
// warp 0 (l < warps) folds smem[32l .. 32l + 31] in order from 0, then thread 0 folds those
// warp sums in order from 0.
template <class Add>
double block_reduce_shared(const std::vector<double>& thread_sums, const Add& add) {
  const std::size_t warps = thread_sums.size() / 32;
  double block = 0.0;
  for (std::size_t w = 0; w < warps; ++w) {
    double warp_sum = 0.0;
    for (std::size_t i = 0; i < 32; ++i) warp_sum = add(warp_sum, thread_sums[w * 32 + i]);
    block = add(block, warp_sum);
  }
  return block;
}
// cunn_SoftMaxForwardReg<reg_cnt = ceil(keys / 1024)> on 1024 threads: thread t folds
// exp(x[t + 1024 r] - max) for r = 0, 1, ... (keys past the row skipped) from 0; blockReduceWarp.
template <class Value, class Add>
double forward_registers(const Value& x, int row_length, const Add& add) {
  constexpr int threads = 1024;
  std::vector<double> thread_sums(threads, 0.0);
  for (int t = 0; t < threads; ++t)
    for (int j = t; j < row_length; j += threads) thread_sums[t] = add(thread_sums[t], x(j));
  return block_reduce_warp(thread_sums, add);
}
// cunn_SoftMaxBackwardSmem (keys a multiple of 4, 16-byte aligned rows): thread t of B loads the
// float4 vectors t, t + B, ... and folds each vector's 4 values in order from 0; blockReduceWarp.
template <class Value, class Add>
double backward_shared_memory(const Value& x, int row_length, const Add& add) {
  const int threads = pytorch_softmax::backward_block_threads(row_length);
  std::vector<double> thread_sums(static_cast<std::size_t>(threads), 0.0);
  for (int t = 0; t < threads; ++t)
    for (int v = t; 4 * v < row_length; v += threads)
      for (int i = 0; i < 4; ++i) thread_sums[t] = add(thread_sums[t], x(4 * v + i));
  return block_reduce_warp(thread_sums, add);
}
// cunn_SoftMaxBackward's ilpReduce<ILP 4> over a row that starts `shift` floats past a 16-byte
// boundary: thread t >= shift first takes element t - shift; then float4 vectors from the
// boundary, thread t taking vectors t, t + B, ... while they lie in the row's body (a multiple of
// 4B elements); then the tail, element by element, thread t taking tail + t, + B, ...;
// blockReduce (shared memory).
template <class Value, class Add>
double backward_plain(const Value& x, int row_length, int shift, const Add& add) {
  const int threads = pytorch_softmax::backward_block_threads(row_length);
  std::vector<double> thread_sums(static_cast<std::size_t>(threads), 0.0);
  int size = row_length;
  int base = 0;  // element index of data[0] in the row
  if (shift > 0) {
    base = -shift;
    size += shift;
    for (int t = shift; t < threads; ++t) thread_sums[t] = add(thread_sums[t], x(base + t));
    size -= threads;
    base += threads;
  }
  const int last = size % (4 * threads);
  for (int t = 0; t < threads; ++t)
    for (int v = t; 4 * v < size - last; v += threads)
      for (int i = 0; i < 4; ++i) thread_sums[t] = add(thread_sums[t], x(base + 4 * v + i));
  for (int t = 0; t < threads; ++t)
    for (int j = size - last + t; j < size; j += threads) thread_sums[t] = add(thread_sums[t], x(base + j));
  return block_reduce_shared(thread_sums, add);
}
}  // namespace softmax_orders

template <class Add>
double materialised_row_sum(const KernelModel& km, const double* x, int n, int row_length, SoftmaxPass pass,
                            std::int64_t flat_row, const Add& add) {
  if (km.row_sum != RowSumOrder::warp_softmax) return pairwise_sum(x, n, add);
  const auto value = [x, n](int j) { return j < n ? x[j] : 0.0; };
  if (pass == SoftmaxPass::forward) {
    if (row_length <= pytorch_softmax::warp_forward_max_keys) return softmax_orders::warp(value, row_length, add);
    return softmax_orders::forward_registers(value, row_length, add);
  }
  if (row_length <= pytorch_softmax::warp_backward_max_keys) return softmax_orders::warp(value, row_length, add);
  if (row_length % 4 == 0) return softmax_orders::backward_shared_memory(value, row_length, add);
  // The caching allocator's blocks are 512-byte aligned, so the row's shift is its offset in
  // floats modulo 4.
  const int shift = static_cast<int>((flat_row * row_length) % 4);
  return softmax_orders::backward_plain(value, row_length, shift, add);
}

// The final cast of O's rounding: the recipe's RNE, or the +o-MODE variant's mode (sr
// keyed by the run's seed; the caller passes the element's index as the position).
inline RoundingSpec final_cast_spec(const KernelModel& km, const RunOptions& opt) {
  RoundingSpec spec;
  spec.mode = km.o_round;
  if (km.o_round == RoundingMode::sr) {
    spec.sr_bits = km.o_sr_bits;
    spec.seed = opt.seed;
  }
  return spec;
}

// ---- constants of the exponent step, computed as the kernel computes them -------------
struct ScaleConstants {
  double scale_log2 = 0.0;        // FA2: (float)(softmax_scale * log2(e)) computed in double
  double qk_scale = 0.0;          // Triton: fp32(sm_scale * 1.44269504)
  double scale_f = 0.0;           // softmax_scale as the kernel's fp32 / PyTorch's opmath scalar
  double natural_per_unit = 1.0;  // converts the max's units to softmax-argument units
  // sqrt_prescale_qk: PyTorch's math backend's factor on q and k (and on dq', dk'), sqrt(scale)
  // in double (calculate_scale(...).sqrt()) as the fp32 opmath scalar of a float tensor op.
  double qk_prescale = 0.0;
};

template <class A>
ScaleConstants scale_constants(const KernelModel& km, const A& ar, double scale) {
  ScaleConstants k;
  if constexpr (A::exact) {
    k.scale_log2 = scale * std::numbers::log2e;
    k.qk_scale = km.scale_before_log2e ? std::numbers::log2e : scale * std::numbers::log2e;
    k.scale_f = scale;
    k.qk_prescale = std::sqrt(scale);
  } else {
    const double scale_param = km.scale_log2_from_fp32_scale ? static_cast<double>(static_cast<float>(scale)) : scale;
    k.scale_log2 = static_cast<float>(scale_param * std::numbers::log2e);
    k.qk_scale = km.scale_before_log2e
                     ? static_cast<double>(1.44269504f)
                     : ar.f32(static_cast<double>(static_cast<float>(scale)) * static_cast<double>(1.44269504f));
    // FA2 passes params.scale_softmax as float; PyTorch multiplies a 16/32-bit tensor by
    // the Python scalar in fp32 opmath; only fp64 tensors keep it in double.
    const bool fp64_tensor_op = km.scale == ScaleHandling::multiply_scores && !km.scaled_score_format;
    k.scale_f = fp64_tensor_op ? scale : static_cast<double>(static_cast<float>(scale));
    k.qk_prescale = static_cast<float>(std::sqrt(scale));
  }
  switch (km.scale) {
    case ScaleHandling::exponent_ffma:
      k.natural_per_unit = scale;
      break;
    case ScaleHandling::log2_units:
      k.natural_per_unit = std::numbers::ln2;
      break;
    case ScaleHandling::multiply_scores:
    case ScaleHandling::sqrt_prescale_qk:
      k.natural_per_unit = 1.0;
      break;
  }
  return k;
}

// The fp8 models' per-tensor q/k descales folded where FA3 folds them
// (softmax_scale_log2 *= q_descale * k_descale, in fp32), or into the PyTorch scalar of
// the materialised baseline. +block-quant descales are applied per tile instead.
template <class A, class E>
ScaleConstants head_scale_constants(const KernelModel& km, const A& ar, const Geometry& g, const HeadData<E>& hd) {
  ScaleConstants k = scale_constants(km, ar, g.scale);
  if (!km.fp8.enabled || km.fp8.block) return k;
  const double qk = ar.f32(hd.q_descale[0] * hd.k_descale[0]);
  k.scale_log2 = ar.f32(k.scale_log2 * qk);
  k.scale_f = ar.f32(k.scale_f * qk);
  if (km.scale == ScaleHandling::exponent_ffma) k.natural_per_unit *= qk;
  return k;
}

// FA2's and FA3's per-thread row sums, joined across the quad at the end.
inline bool quad_row_sum(const KernelModel& km) {
  return km.row_sum == RowSumOrder::fa2_quad || km.row_sum == RowSumOrder::fa3_quad;
}

// ---- steps shared by the forward passes and the backward ------------------------------
// The score S_j = q·k_j as the recipe computes and stores it (before masking).
// (score_of_dot: the same from the dot's value.)
template <class A>
double score_of_dot(const KernelModel& km, const A& ar, const ScaleConstants& sc, double dot) {
  double s = ar.to(km.score_format, dot);
  if (km.scale == ScaleHandling::multiply_scores) s = ar.op(km.scaled_score_format, s * sc.scale_f);
  if (km.scale_before_log2e) s = ar.f32(s * sc.scale_f);  // FlexAttention: qk *= SM_SCALE
  return s;
}
// score_of_dot over a tile, s[j] = score_of_dot(km, ar, sc, s[j]) for j < len, with the
// recipe's format choices read once (ar.to into fp32 is ar.f32; no score format and no scale
// leaves the dot as it is).
template <class A>
void scores_of_dots(const KernelModel& km, const A& ar, const ScaleConstants& sc, double* s, int len) {
  if (km.scale != ScaleHandling::multiply_scores && !km.scale_before_log2e) {
    if (!km.score_format) return;
    if (*km.score_format == formats::fp32) {
      for (int j = 0; j < len; ++j) s[j] = ar.f32(s[j]);
      return;
    }
  }
  for (int j = 0; j < len; ++j) s[j] = score_of_dot(km, ar, sc, s[j]);
}
template <class A, class E>
double score(const KernelModel& km, const A& ar, const ScaleConstants& sc, const E* q, const E* k, int d) {
  return score_of_dot(km, ar, sc, ar.dot(km.score_dot, 0.0, q, k, d));
}

// Whether `spec`'s dots of one tile run side by side (HardwareArith::dot_columns over
// fb::fused_dot_columns): the same bits as one dot() per column, several times faster.
template <class A, class E>
bool dots_side_by_side(const DotSpec& spec) {
  if constexpr (!A::exact && std::is_same_v<E, float>) return A::columns_batched(spec);
  return false;
}

// HardwareArith::dot_columns where dots_side_by_side<A, E>(spec) (a no-op otherwise, so that
// every instantiation compiles).
template <class A, class E>
void dot_columns(const A& ar, const DotSpec& spec, double* acc, const E* a, const E* b, const std::int32_t* b_alignment,
                 std::size_t ldb, int k, int lanes, std::vector<float>& lane_values, DotTrace* tally = nullptr) {
  if constexpr (!A::exact && std::is_same_v<E, float>)
    ar.dot_columns(spec, acc, a, b, b_alignment, ldb, k, lanes, lane_values, tally);
}

// The column panel b (row stride ldb, `lanes` columns of k rows, pointing into one of hd's
// matrices) as the side-by-side dots read it: run(l0, n, panel, alignment, stride) for its
// columns [l0, l0 + n) in lane order. From the tiled copy where hd prepared one (one tile of
// kPanelTile lanes per call), otherwise as stored, with the prepared alignment exponents where
// there are some (null: none).
template <class E, class Run>
void over_column_panel(const DotSpec& spec, const HeadData<E>& hd, const E* b, std::size_t ldb, int k, int lanes,
                       Run run) {
  const typename HeadData<E>::Panel* panel = hd.panel_of(spec, b);
  const std::size_t offset = panel ? static_cast<std::size_t>(b - panel->data) : 0;
  constexpr int kTile = HeadData<E>::kPanelTile;
  if (panel && !panel->tiled.empty() && ldb == static_cast<std::size_t>(hd.nk) && offset % kTile == 0 && offset < ldb &&
      k <= panel->rows) {
    const std::size_t tile_size = static_cast<std::size_t>(panel->rows) * kTile;
    for (int l0 = 0; l0 < lanes; l0 += kTile) {
      const std::size_t at = (offset / kTile + static_cast<std::size_t>(l0 / kTile)) * tile_size;
      run(l0, std::min(kTile, lanes - l0), panel->tiled.data() + at, panel->tiled_alignment.data() + at,
          static_cast<std::size_t>(kTile));
    }
    return;
  }
  run(0, lanes, b, panel ? panel->alignment.data() + offset : nullptr, ldb);
}

// acc[l] = dot(spec, acc[l], a, column l, k, tally) for l < lanes, column l of the row-major
// panel b being b[j*ldb + l]: side by side where dots_side_by_side allows, otherwise one dot
// per column through column_of(l), a pointer to column l's k elements stored contiguously
// (the transposed matrix's row). Both give the same bits and tally the same steps, column
// after column. `tally`: null, or a DotTrace with tally_only set. b points into one of hd's
// matrices, whose prepared alignment exponents the side-by-side dots read.
template <class A, class E, class ColumnOf>
void dots_against_columns(const A& ar, const DotSpec& spec, const HeadData<E>& hd, double* acc, const E* a, const E* b,
                          std::size_t ldb, int k, int lanes, ColumnOf column_of, std::vector<float>& lane_values,
                          DotTrace* tally = nullptr) {
  if (dots_side_by_side<A, E>(spec)) {
    over_column_panel(spec, hd, b, ldb, k, lanes,
                      [&](int l0, int n, const E* panel, const std::int32_t* alignment, std::size_t stride) {
                        dot_columns(ar, spec, acc + l0, a, panel, alignment, stride, k, n, lane_values, tally);
                      });
    return;
  }
  for (int l = 0; l < lanes; ++l) acc[l] = ar.dot(spec, acc[l], a, column_of(l), k, tally);
}

// Whether `spec`'s dots of a block of rows run as one call (rows_against_columns).
template <class A, class E>
bool rows_side_by_side(const DotSpec& spec) {
  if constexpr (!A::exact && std::is_same_v<E, float>) return A::rows_batched(spec);
  return false;
}

// dots_against_columns for `rows` vectors at once, where rows_side_by_side: cd[r*ldc + l] =
// dot(spec, cd[r*ldc + l], a + r*lda, column l, k), the accumulators as floats. The same bits
// as one dots_against_columns per row (untallied), with the kernel's set-up paid once per block.
template <class A, class E>
void rows_against_columns(const A& ar, const DotSpec& spec, const HeadData<E>& hd, float* cd, std::size_t ldc,
                          const E* a, std::size_t lda, int rows, const E* b, std::size_t ldb, int k, int lanes) {
  if constexpr (!A::exact && std::is_same_v<E, float>) {
    over_column_panel(spec, hd, b, ldb, k, lanes,
                      [&](int l0, int n, const E* panel, const std::int32_t* alignment, std::size_t stride) {
                        ar.dot_rows(spec, cd + l0, ldc, a, lda, rows, panel, alignment, stride, k, n);
                      });
  }
}

// The scores of keys [kb, kb + len) for query q into s[0, len), through the keys' Kᵀ
// columns side by side where the score dot allows it (hd.kt holds Kᵀ).
template <class A, class E>
void tile_scores(const KernelModel& km, const A& ar, const ScaleConstants& sc, const HeadData<E>& hd, const E* q,
                 int kb, int len, double* s, std::vector<float>& lane_values) {
  std::fill(s, s + len, 0.0);
  dots_against_columns(
      ar, km.score_dot, hd, s, q, hd.kt_row(0) + kb, static_cast<std::size_t>(hd.nk), hd.d, len,
      [&](int l) { return hd.k_row(kb + l); }, lane_values);
  scores_of_dots(km, ar, sc, s, len);
}

// FA2 softmax.h reduce_max: the stabilising max after a tile, m_new = max(m_old, tile max)
// in the max's units, with Qiu & Yao's dynamic max when the recipe asks for it. FA2 folds
// the previous max into a per-thread sequential max, then shfl_xor 2 and 1 across the
// quad; max is exact, associative and commutative on non-NaN values, so that order cannot
// change the result and is not spelled out (NaN scores are skipped, as fmaxf skips them;
// materialised rows make their max NaN themselves, as amax does). `repeated_max`
// (traced rows only) receives the count of entries tied with the tile's max, beyond one.
template <class A>
double reduce_max(const KernelModel& km, const A& ar, const ScaleConstants& sc, const double* s, int n, double m_old,
                  int* repeated_max) {
  double r = -kInf;
  {
    // r = max(r, s[j]) in order keeps the first entry that equals the largest value (NaNs
    // skipped), which fixes the sign of a zero maximum. Eight lanes of that fold, joined,
    // find the largest value without a chain of dependent compares; a largest value of zero
    // takes the sign of its first entry from a scan (any other value has one encoding).
    constexpr int kLanes = 8;
    double lane[kLanes];
    std::fill(lane, lane + kLanes, -kInf);
    int j = 0;
    for (; j + kLanes <= n; j += kLanes)
      for (int l = 0; l < kLanes; ++l) lane[l] = std::max(lane[l], s[j + l]);
    for (; j < n; ++j) lane[0] = std::max(lane[0], s[j]);
    double largest = -kInf;
    for (int l = 0; l < kLanes; ++l) largest = std::max(largest, lane[l]);
    r = largest;
    if (largest == 0.0)
      for (j = 0; j < n; ++j)
        if (s[j] == 0.0) {
          r = s[j];
          break;
        }
  }
  if (repeated_max && r != -kInf) {
    int ties = 0;
    for (int j = 0; j < n; ++j) ties += s[j] == r ? 1 : 0;
    *repeated_max = ties - 1;
  }
  // Triton tracks the max of qk * qk_scale (tl.max(qk, 1) * qk_scale).
  double r_units = km.scale == ScaleHandling::log2_units && r != -kInf ? ar.f32(r * sc.qk_scale) : r;
  if (km.dynmax && r != -kInf) {
    // r_s: entries within tol of the block max, in softmax-argument (natural) units.
    const double raw_per_natural = km.scale == ScaleHandling::exponent_ffma ? sc.natural_per_unit
                                   : km.scale == ScaleHandling::log2_units  ? sc.qk_scale * std::numbers::ln2
                                                                            : 1.0;
    int r_s = 0;
    if (km.scale == ScaleHandling::multiply_scores) {
      // The authors' attention.py: attn_weights >= (block_row_maxes - 1e-3), a tensor op
      // in the scores' dtype (fp32 opmath, the scalar as a float), so the threshold is
      // rounded before the compare; for |r| >= 0.5 in bf16 it rounds back to r.
      const double tol = km.scaled_score_format ? ar.f32(km.dynmax_tol) : km.dynmax_tol;
      const double threshold = ar.op(km.scaled_score_format, r - tol);
      for (int j = 0; j < n; ++j) r_s += s[j] >= threshold ? 1 : 0;
    } else {
      // Kernel variants (fb-fa2 --variant dynmax runs the same test): exact, in natural units.
      for (int j = 0; j < n; ++j) r_s += (r - s[j]) * raw_per_natural <= km.dynmax_tol ? 1 : 0;
    }
    if (r_s > 1 && r_units > 0) {
      r_units = ar.to(km.max_format, km.dynmax_beta * r_units);
    } else if (r_s > 1 && r_units < 0) {
      r_units = 0.0;
    }
  }
  return std::max(m_old, r_units);
}

// exp2f as the recipe's kernel calls it (KernelModel::exp2_function): without fast math
// ptxas emits ex2.approx.f32 as the ftz MUFU.EX2 with x < -126 (FSETP.GEU, so not NaN)
// computed as ex2(x * 0.5)^2, the square rounded once in fp32.
template <class A>
double kernel_exp2(const KernelModel& km, const A& ar, double x) {
  if constexpr (!A::exact) {
    if (km.exp2_function == Exp2Function::exp2f_libdevice && x < -126.0) {
      const double half = ar.ex2(ar.f32(x * 0.5));
      return ar.f32(half * half);
    }
  }
  return ar.ex2(x);
}

// S*scale_log2 - max_scaled as the recipe's kernel forms it (KernelModel::exponent_argument).
template <class A>
double exponent_argument(const KernelModel& km, const A& ar, double s, double scale_log2, double max_scaled) {
  if (km.exponent_argument == ExponentArgument::fmul_fadd) return ar.f32(ar.f32(s * scale_log2) - max_scaled);
  return ar.fma32(s, scale_log2, -max_scaled);
}

// exponent_ffma models: scale_apply_exp2's max_scaled = max == -inf ? 0 : max * scale.
// FA3 fp8 subtracts Max_offset from the scaled max (one FFMA, assumed), so P̄ <= 2^offset.
template <class A>
double exponent_max_scaled(const KernelModel& km, const A& ar, const ScaleConstants& sc, double m) {
  const double offset = km.fp8.p_max_offset;
  return m == -kInf ? 0.0 : offset != 0 ? ar.fma32(m, sc.scale_log2, -offset) : ar.f32(m * sc.scale_log2);
}

// P̄_j from the score and the current max (FA2 softmax.h scale_apply_exp2, per entry).
// `two_step`: the Triton tutorial's causal on-band tiles scale first and subtract the max
// separately (KernelModel::causal_band_two_step_exponent). `software`: the exp2 is FA4's
// FMA polynomial (+sw-exp2) instead of the SFU's.
template <class A>
double exponent(const KernelModel& km, const A& ar, const ScaleConstants& sc, double s, double m, bool two_step = false,
                bool software = false) {
  const auto p_exp2 = [&](double x) { return software ? ar.software_ex2(x) : kernel_exp2(km, ar, x); };
  switch (km.scale) {
    case ScaleHandling::exponent_ffma: {
      // scale_apply_exp2: exp2f(S*scale - max_scaled), one FFMA or FMUL then FADD (exponent_argument).
      return p_exp2(exponent_argument(km, ar, s, sc.scale_log2, exponent_max_scaled(km, ar, sc, m)));
    }
    case ScaleHandling::log2_units: {
      const double mm = m == -kInf ? 0.0 : m;
      // qk = qk*qk_scale + 0; qk -= m_ij (cuDNN: on every tile)
      if (two_step || km.exponent_argument == ExponentArgument::fmul_fadd)
        return p_exp2(ar.f32(ar.f32(s * sc.qk_scale) - mm));
      return p_exp2(ar.fma32(s, sc.qk_scale, -mm));  // qk * qk_scale - m_ij, fused by Triton
    }
    case ScaleHandling::multiply_scores:
    case ScaleHandling::sqrt_prescale_qk: {
      if (s == -kInf) return 0.0;
      const double mm = m == -kInf ? 0.0 : m;
      return ar.to(km.p_format, ar.opmath_exp(ar.op(km.sub_format, s - mm)));
    }
  }
  return 0.0;
}

// ---- casts of whole rows into bf16 or fp16 --------------------------------------------
// to_double of every encoding of a 16-bit format, as float (exact: bf16 and fp16 values are
// fp32 values), built once per format: round_fp32_values_into_16bit reads a value back from its
// bits by one load instead of decoding it per entry. Only for bf16 and fp16.
inline const float* values_of_encodings(const Format& f) {
  auto build = [](const Format& g) {
    std::vector<float> values(std::size_t{1} << 16);
    for (std::uint32_t b = 0; b < values.size(); ++b) values[b] = static_cast<float>(to_double(g, b));
    return values;
  };
  static const std::vector<float> bf16 = build(formats::bf16), fp16 = build(formats::fp16);
  return f == formats::bf16 ? bf16.data() : fp16.data();
}

// ar.to(f, x[j]) into out[j] for j < n, with f bf16 or fp16 (HardwareArith: RNE through
// round_double), where every x[j] holds an fp32 value (false, nothing written, otherwise): the
// array goes through fb::round_array (flags-free), which for an fp32 value gives the bits of
// fb::convert from fp32, the one RNE rounding of the same value, so the same bits; they are read
// back as round_into reads them, by to_double (values_of_encodings). Scratch is per thread.
// The float overload takes the fp32 values as floats (nothing to check).
template <class T>
void round_fp32_values_into_16bit(const Format& f, const float* x32, T* out, int n) {
  thread_local std::vector<std::uint16_t> bits;
  bits.resize(static_cast<std::size_t>(n));
  round_array(f, x32, bits.data(), static_cast<std::size_t>(n), RoundingSpec{});
  const float* values = values_of_encodings(f);
  for (int j = 0; j < n; ++j) out[j] = static_cast<T>(values[bits[j]]);
}
template <class T>
bool round_fp32_values_into_16bit(const Format& f, const double* x, T* out, int n) {
  thread_local std::vector<float> x32;
  x32.resize(static_cast<std::size_t>(n));
  bool all_fp32 = true;
  for (int j = 0; j < n; ++j) {
    x32[j] = static_cast<float>(x[j]);
    all_fp32 &= static_cast<double>(x32[j]) == x[j];  // `&=`: no branch
  }
  if (!all_fp32) return false;
  round_fp32_values_into_16bit(f, x32.data(), out, n);
  return true;
}
inline bool is_16bit_cast_format(const std::optional<Format>& f) {
  return f && (*f == formats::bf16 || *f == formats::fp16);
}
// out[j] = ar.to(f, x[j]) for j < n: into bf16 or fp16 by round_fp32_values_into_16bit where it
// can (the same values), otherwise entry by entry.
template <class A, class T>
void to_row(const A& ar, const std::optional<Format>& f, const double* x, T* out, int n) {
  if constexpr (!A::exact) {
    if (is_16bit_cast_format(f) && round_fp32_values_into_16bit(*f, x, out, n)) return;
  }
  for (int j = 0; j < n; ++j) out[j] = static_cast<T>(ar.to(f, x[j]));
}

// ---- the passes (each defined in its own file) --------------------------------------------
// Online-softmax scratch of one worker: one KV tile's scores, P̄ and P̄ cast, the O
// accumulator and O before its cast.
template <class E>
struct Scratch {
  std::vector<double> s, p, acc, o_pre, tile_dots;
  std::vector<E> pc;
  std::vector<float> lane_values;  // HardwareArith::dot_columns
  // One tile's ex2 arguments and results as fp32, for the SFU model's evaluate_array.
  std::vector<float> ex2_args, ex2_values;
  // online_forward_rows: each row's acc_o while a block of rows walks the KV tiles together.
  std::vector<std::vector<double>> row_acc;
  // online_tile_rows: a block's Q rows (where not consecutive), its scores, P̄ and acc_o as
  // floats, row-major.
  std::vector<E> block_q, block_pc;
  std::vector<float> block_scores, block_acc;
  void size(int bn, int d) {
    s.resize(static_cast<std::size_t>(bn));
    p.resize(static_cast<std::size_t>(bn));
    ex2_args.resize(static_cast<std::size_t>(bn));
    ex2_values.resize(static_cast<std::size_t>(bn));
    pc.resize(static_cast<std::size_t>(bn));
    acc.resize(static_cast<std::size_t>(d));
    tile_dots.resize(static_cast<std::size_t>(d));
    o_pre.resize(static_cast<std::size_t>(d));
  }
};

// Where one row of the online forward writes: O (the output format's values), O before its
// final cast, and the row's statistics; o_position is O's first element's index in the output
// (stochastic rounding's position).
struct OnlineRowOutput {
  int row = 0;
  double* o = nullptr;
  double* o_pre = nullptr;
  RowStats* stats = nullptr;
  std::uint64_t o_position = 0;
};

// attention/online_forward.cpp: one query row over its KV tiles (FA2 compute_attn_1rowblock,
// for one row). `trace` non-null: the row's story is recorded into it
// (attention/trace_sink.hpp), with the same numerics.
template <class A, class E>
void online_forward_row(const KernelModel& km, const A& ar, const HeadData<E>& hd, const Geometry& g,
                        const OnlineRowOutput& out, Scratch<E>& sc, const RunOptions& opt, RowTrace* trace);
// The same for `count` untraced rows of one head at once, with the same bits as
// online_forward_row per row: tile by tile, each row in turn, so that one tile's K and V serve
// the whole block while they are in cache (as FA2's row block shares them in shared memory).
template <class A, class E>
void online_forward_rows(const KernelModel& km, const A& ar, const HeadData<E>& hd, const Geometry& g,
                         const OnlineRowOutput* outs, int count, Scratch<E>& sc, const RunOptions& opt);

// attention/materialised_forward.cpp: one row of the materialised softmax (standard-FMT,
// golden-FMT-baseline, standard-fp8): S, P = F(p / l) and O = P·V over every visible key.
template <class A, class E>
void materialised_forward_row(const KernelModel& km, const A& ar, const HeadData<E>& hd, const Geometry& g, int row,
                              double* o_out, double* o_pre_out, RowStats& st, std::vector<double>& s,
                              std::vector<E>& pc, std::uint64_t o_position, const RunOptions& opt);
// The materialised softmax row P (values of p_cast, g.nk entries, 0 past the visible keys)
// recomputed from the saved m and l, as the backward recomputes it.
template <class A, class E>
void materialised_p_row(const KernelModel& km, const A& ar, const HeadData<E>& hd, const Geometry& g, int row,
                        const RowStats& st, double* p_out);

// attention/backward.cpp. The thread layout of a DeltaFormula::*_threads preprocess for head
// dim d: the head dim the kernel was instantiated for (padding columns are zero) and the
// chunk one load of the row's threads covers (chunk / 8 threads per row, at most 16).
struct DeltaThreadLayout {
  int padded_head_dim = 0;
  int chunk = 0;
};
DeltaThreadLayout delta_thread_layout(DeltaFormula formula, int d);
// delta for one row from O (or O kept in fp32) and dO; 0 for DeltaFormula::softmax_backward,
// whose delta is delta_from_dpp.
template <class A, class E>
double delta_from_o(const KernelModel& km, const A& ar, const E* d_o, const double* o, int d);
// delta = rowsum(dP∘P) (+delta-dpp, and PyTorch's softmax backward). `scratch` is reused.
template <class A, class E>
double delta_from_dpp(const KernelModel& km, const A& ar, const HeadData<E>& hd, const Geometry& g, int row,
                      const RowStats& st, std::vector<double>& scratch);
// One head's dQ ([nq][d]), dK and dV ([nk][d]) from the forward's row statistics and delta, by the
// recipe's backward kernel. dq_pre_out (fa2 only): dQ in fp32 before its cast.
template <class A, class E>
void mma_backward_head(const KernelModel& km, const A& ar, const HeadData<E>& hd, const Geometry& g,
                       const std::vector<RowStats>& stats, const std::vector<double>& delta, double* dq_out,
                       double* dk_out, double* dv_out, double* dq_pre_out);
template <class A, class E>
void triton_backward_head(const KernelModel& km, const A& ar, const HeadData<E>& hd, const Geometry& g,
                          const std::vector<RowStats>& stats, const std::vector<double>& delta, double* dq_out,
                          double* dk_out, double* dv_out);
template <class A, class E>
void flex_backward_head(const KernelModel& km, const A& ar, const HeadData<E>& hd, const Geometry& g,
                        const std::vector<RowStats>& stats, const std::vector<double>& delta, double* dq_out,
                        double* dk_out, double* dv_out);
template <class A, class E>
void tensorop_backward_head(const KernelModel& km, const A& ar, const HeadData<E>& hd, const Geometry& g,
                            const std::vector<RowStats>& stats, const std::vector<double>& delta, double* dq_out,
                            double* dk_out, double* dv_out);
// The host's K pre-scale factor of the Triton backward, as the kernel sees it: softmax_scale *
// RCP_LN2 in Python double, passed by PyTorch's tensor * scalar as an fp32 opmath scalar.
template <class A>
double triton_k_prescale(const KernelModel& km, double softmax_scale) {
  if constexpr (A::exact) return softmax_scale * std::numbers::log2e;
  return static_cast<float>(softmax_scale * km.bwd_k_prescale);
}

// The (arithmetic, element) pairs run_attention() runs the passes with: each pass file
// instantiates its templates for these, so adding a pair is one line here.
#define FB_ATTN_FOR_EACH_ARITH(X)              \
  X(::fb::attn::detail::ExactArith, double)    \
  X(::fb::attn::detail::HardwareArith, double) \
  X(::fb::attn::detail::HardwareArith, float)

}  // namespace fb::attn::detail
