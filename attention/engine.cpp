// attention/engine.cpp: run_attention(): one online-softmax loop and one materialised
// path, whose every step reads the kernel recipe (attention/kernel_models.hpp), plus the
// backward passes.
//
// Contract (see attention.hpp): deterministic, independent of RunOptions::threads
// (work is split over (batch, head, row block) in the forward and (batch, head) in the
// backward; every reduction has a fixed order). The forward keeps O(N·d) memory: it
// walks one query row at a time over KV tiles. In the FA2 forward each row's numerics
// depend only on the KV tiling (block_n), never on block_m, because max, ℓ and acc_o
// are per-row registers; so block_m only matters for the backward.
//
// Modelling notes, stated once:
// - Causal: tiles entirely above a row's diagonal are skipped. FA2 visits them for the
//   other rows of its m-block, but for this row they give -inf scores, P̄ = 0 and a
//   rescale of 0 * 0: numerically a no-op.
// - All-masked rows (only possible with causal + seqlen 0, or masked inputs): every
//   model follows FA2's guards (m = -inf is used as 0 in the exponent; l == 0 gives
//   inv = 1, O = 0 and LSE = +inf). PyTorch-style code without guards would give NaN.
// - FA2 backward dQ: the per-n_block partial (an MMA from C = 0) is atomically added to
//   dq_accum in fp32; the hardware order is not deterministic, the model adds n_blocks
//   in ascending order.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <stdexcept>
#include <thread>

#include "attention/arith.hpp"
#include "attention/attention.hpp"
#include "attention/fp8_quant.hpp"
#include "attention/kernel_models.hpp"
#include "emu/summation.hpp"

namespace fb::attn {
namespace {

using detail::ExactArith;
using detail::HardwareArith;

constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- per-head operands, prepared once (O(N·d)) --------------------------------------
template <class E>
struct HeadData {
  int n = 0, d = 0;
  std::vector<E> q, k, v, vt;       // rows [n][d]; vt = Vᵀ [d][n]
  std::vector<E> d_o, d_ot, qt, kt; // backward: dO rows, dOᵀ, Qᵀ, Kᵀ
  std::vector<E> kp, kpt;           // triton_prescaled_k backward: the host-prescaled K' rows and K'ᵀ
  const E* q_row(int r) const { return q.data() + static_cast<std::size_t>(r) * d; }
  const E* k_row(int r) const { return k.data() + static_cast<std::size_t>(r) * d; }
  const E* v_row(int r) const { return v.data() + static_cast<std::size_t>(r) * d; }
  const E* vt_row(int c) const { return vt.data() + static_cast<std::size_t>(c) * n; }
  const E* do_row(int r) const { return d_o.data() + static_cast<std::size_t>(r) * d; }
  const E* dot_row(int c) const { return d_ot.data() + static_cast<std::size_t>(c) * n; }
  const E* qt_row(int c) const { return qt.data() + static_cast<std::size_t>(c) * n; }
  const E* kt_row(int c) const { return kt.data() + static_cast<std::size_t>(c) * n; }
  const E* kp_row(int r) const { return kp.data() + static_cast<std::size_t>(r) * d; }
  const E* kpt_row(int c) const { return kpt.data() + static_cast<std::size_t>(c) * n; }
  // fp8 models (attention/fp8_quant.hpp): this head's descale per Q block and per K/V
  // block (one entry each under per-tensor scaling); empty otherwise.
  std::vector<double> q_descale, k_descale, v_descale;
  int q_block_rows = 1, kv_block_rows = 1;
};

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
      for (int c = 0; c < d; ++c) (*transposed)[static_cast<std::size_t>(c) * n + r] = rows[static_cast<std::size_t>(r) * d + c];
  }
}

struct Geometry {
  int n = 0, d = 0;
  double scale = 0.0;
  bool causal = false;
  TileSizes tiles;
};

// Per-row scalars of the forward the backward needs.
struct RowStats {
  double lse = 0.0;         // reported LSE (natural log)
  double lse_kernel = 0.0;  // in the kernel's units (Triton: log2 units)
  double m = 0.0, l = 0.0;  // materialised softmax: max and sum
};

// PyTorch's result type of a binary op between tensors of formats a and b (nullopt = fp64):
// the same format when they agree, fp64 when either is fp64, else fp32 (bf16 with fp16 or
// with fp32 promotes to fp32; the formats modelled here are at most 32 bits wide).
std::optional<Format> promoted(const std::optional<Format>& a, const std::optional<Format>& b) {
  if (!a || !b) return std::nullopt;
  if (*a == *b) return a;
  return formats::fp32;
}

// Keys a row may see (causal: up to and including the diagonal).
int visible_keys(const Geometry& g, int row) { return g.causal ? std::min(g.n, row + 1) : g.n; }

// Pairwise (recursive halving) sum with every addition rounded by `add`: the order of
// emu/summation.hpp pairwise_reduce.
template <class Add>
double pairwise_sum(const double* x, int n, const Add& add) {
  if (n <= 0) return 0.0;
  return pairwise_reduce(
      0, static_cast<std::size_t>(n), [x](std::size_t i) { return x[i]; },
      [&add](double a, double b, std::size_t) { return add(a, b); });
}

// ---- tracing sinks -------------------------------------------------------------------
// Accumulates the P·V story of one row; compiled out entirely when kTrace is false.
struct PvTraceState {
  TileRecord tile;
  DotStepTally tally;                 // the tile's tensor-core P·V steps, in the order they ran
  DotTrace dot;                       // reused for every traced dot (no allocation per call)
  long double exact_acc_plot = 0.0L;  // exact Σ P̄c·v for the plot feature, same rescalings
};

// Where the tile's P·V ran on the tensor-core model, its step tally becomes the tile's counts.
void add_tally(const DotStepTally& t, TileRecord& tr) {
  tr.significand_overflows += t.significand_overflows;
  tr.ties += t.ties;
  tr.rounded_up += t.rounded_up;
  tr.rounded_down += t.rounded_down;
  tr.pv_signed_error += t.signed_error;
}

void account_rounding(const RoundingEvent& ev, double signed_error, bool significand_overflow, TileRecord& tr) {
  tr.ties += ev.tie ? 1 : 0;
  if (ev.direction == RoundDirection::up) ++tr.rounded_up;
  if (ev.direction == RoundDirection::down) ++tr.rounded_down;
  tr.significand_overflows += significand_overflow ? 1 : 0;
  tr.pv_signed_error += signed_error;
}

// ---- the online-softmax forward of one row --------------------------------------------
template <class E>
struct Scratch {
  std::vector<double> s, p, acc, o_pre;
  std::vector<E> pc;
  void size(int bn, int d) {
    s.resize(static_cast<std::size_t>(bn));
    p.resize(static_cast<std::size_t>(bn));
    pc.resize(static_cast<std::size_t>(bn));
    acc.resize(static_cast<std::size_t>(d));
    o_pre.resize(static_cast<std::size_t>(d));
  }
};

// Constants of the exponent step, computed as the kernel computes them.
// The final cast of O's rounding: the recipe's RNE, or the +o-MODE variant's mode (sr
// keyed by the run's seed; the caller passes the element's index as the position).
RoundingSpec final_cast_spec(const KernelModel& km, const RunOptions& opt) {
  RoundingSpec spec;
  spec.mode = km.o_round;
  if (km.o_round == RoundingMode::sr) {
    spec.sr_bits = km.o_sr_bits;
    spec.seed = opt.seed;
  }
  return spec;
}

struct ScaleConstants {
  double scale_log2 = 0.0;  // FA2: (float)(softmax_scale * log2(e)) computed in double
  double qk_scale = 0.0;    // Triton: fp32(sm_scale * 1.44269504)
  double scale_f = 0.0;     // softmax_scale as the kernel's fp32 / PyTorch's opmath scalar
  double natural_per_unit = 1.0;  // converts the max's units to softmax-argument units
};

template <class A>
ScaleConstants scale_constants(const KernelModel& km, const A& ar, double scale) {
  ScaleConstants k;
  if constexpr (A::exact) {
    k.scale_log2 = scale * std::numbers::log2e;
    k.qk_scale = scale * std::numbers::log2e;
    k.scale_f = scale;
  } else {
    k.scale_log2 = static_cast<float>(scale * std::numbers::log2e);
    k.qk_scale = ar.f32(static_cast<double>(static_cast<float>(scale)) * static_cast<double>(1.44269504f));
    // FA2 passes params.scale_softmax as float; PyTorch multiplies a 16/32-bit tensor by
    // the Python scalar in fp32 opmath; only fp64 tensors keep it in double.
    const bool fp64_tensor_op = km.scale == ScaleHandling::multiply_scores && !km.scaled_score_format;
    k.scale_f = fp64_tensor_op ? scale : static_cast<double>(static_cast<float>(scale));
  }
  switch (km.scale) {
    case ScaleHandling::exponent_ffma: k.natural_per_unit = scale; break;
    case ScaleHandling::log2_units: k.natural_per_unit = std::numbers::ln2; break;
    case ScaleHandling::multiply_scores: k.natural_per_unit = 1.0; break;
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
bool quad_row_sum(const KernelModel& km) {
  return km.row_sum == RowSumOrder::fa2_quad || km.row_sum == RowSumOrder::fa3_quad;
}

// The score S_j = q·k_j as the recipe computes and stores it (before masking).
template <class A, class E>
double score(const KernelModel& km, const A& ar, const ScaleConstants& sc, const E* q, const E* k, int d) {
  double s = ar.to(km.score_format, ar.dot(km.score_dot, 0.0, q, k, d));
  if (km.scale == ScaleHandling::multiply_scores) s = ar.op(km.scaled_score_format, s * sc.scale_f);
  return s;
}

// The stabilising max after a tile: m_new = max(m_old, tile max) in the max's units,
// with Qiu & Yao's dynamic max when the recipe asks for it. FA2 folds the previous max
// into a per-thread sequential max, then shfl_xor 2 and 1 across the quad; max is
// exact, associative and commutative on non-NaN values, so that order cannot change
// the result and is not spelled out (NaN scores are not modelled).
template <class A>
double stabilising_max(const KernelModel& km, const A& ar, const ScaleConstants& sc, const double* s, int n,
                       double m_old, int* repeated_max) {
  double r = -kInf;
  for (int j = 0; j < n; ++j) r = std::max(r, s[j]);
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
                                   : km.scale == ScaleHandling::log2_units ? sc.qk_scale * std::numbers::ln2
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

// α = the factor applied to ℓ and O when the max moves from m_old to m_new.
template <class A>
double rescale_factor(const KernelModel& km, const A& ar, const ScaleConstants& sc, double m_old, double m_new) {
  switch (km.scale) {
    case ScaleHandling::exponent_ffma: {
      // softmax_rescale_o: scores_max_cur = max == -inf ? 0 : max (Check_inf).
      const double cur = m_new == -kInf ? 0.0 : m_new;
      return kernel_exp2(km, ar, ar.f32(ar.f32(m_old - cur) * sc.scale_log2));
    }
    case ScaleHandling::log2_units: {
      const double cur = m_new == -kInf ? 0.0 : m_new;
      return kernel_exp2(km, ar, ar.f32(m_old - cur));
    }
    case ScaleHandling::multiply_scores: {
      if (m_old == -kInf) return 0.0;  // nothing accumulated yet (guards -inf - -inf)
      return ar.to(km.p_format, ar.exp32(ar.op(km.sub_format, m_old - m_new)));
    }
  }
  return 1.0;
}

// P̄_j from the score and the current max. `two_step`: the Triton tutorial's causal on-band
// tiles scale first and subtract the max separately (KernelModel::causal_band_two_step_exponent).
template <class A>
double exponent(const KernelModel& km, const A& ar, const ScaleConstants& sc, double s, double m,
                bool two_step = false) {
  switch (km.scale) {
    case ScaleHandling::exponent_ffma: {
      // scale_apply_exp2: max_scaled = max == -inf ? 0 : max * scale; exp2f(S*scale - max_scaled),
      // one FFMA or FMUL then FADD (exponent_argument).
      // FA3 fp8 subtracts Max_offset from the scaled max (one FFMA, assumed), so P̄ <= 2^offset.
      const double offset = km.fp8.p_max_offset;
      const double max_scaled = m == -kInf ? 0.0
                                : offset != 0 ? ar.fma32(m, sc.scale_log2, -offset)
                                              : ar.f32(m * sc.scale_log2);
      return kernel_exp2(km, ar, exponent_argument(km, ar, s, sc.scale_log2, max_scaled));
    }
    case ScaleHandling::log2_units: {
      const double mm = m == -kInf ? 0.0 : m;
      if (two_step) return kernel_exp2(km, ar, ar.f32(ar.f32(s * sc.qk_scale) - mm));  // qk = qk*qk_scale + 0; qk -= m_ij
      return kernel_exp2(km, ar, ar.fma32(s, sc.qk_scale, -mm));  // qk * qk_scale - m_ij, fused by Triton
    }
    case ScaleHandling::multiply_scores: {
      if (s == -kInf) return 0.0;
      const double mm = m == -kInf ? 0.0 : m;
      return ar.to(km.p_format, ar.exp32(ar.op(km.sub_format, s - mm)));
    }
  }
  return 0.0;
}

template <class A, class E, bool kTrace>
void online_forward_row(const KernelModel& km, const A& ar, const HeadData<E>& hd, const Geometry& g, int row,
                        double* o_out, double* o_pre_out, RowStats& st, Scratch<E>& sc, std::uint64_t o_position,
                        const RunOptions& opt, RowTrace* trace) {
  const int d = g.d;
  const int nk = visible_keys(g, row);
  const int bn = g.tiles.block_n;
  const int tiles = (nk + bn - 1) / bn;
  const ScaleConstants k = head_scale_constants(km, ar, g, hd);
  const E* q = hd.q_row(row);
  double m = -kInf;
  double l_thread[4] = {0, 0, 0, 0};  // FA2: per-thread partial sums of the quad
  double l = km.l_init_one ? 1.0 : 0.0;
  std::fill(sc.acc.begin(), sc.acc.end(), 0.0);
  PvTraceState ts;
  if constexpr (kTrace) {
    // The record's sizes are known up front: no reallocation inside the traced loops.
    const int step = km.pv_dot.model ? std::max(1, fused_step_size(*km.pv_dot.model, bn)) : bn;
    const int steps_per_tile = (bn + step - 1) / step;
    ts.dot.steps.reserve(static_cast<std::size_t>(steps_per_tile));
    trace->tiles.reserve(static_cast<std::size_t>(tiles));
    trace->o_cast.reserve(static_cast<std::size_t>(d));
    trace->cumulative_error_by_key.reserve(static_cast<std::size_t>(nk));
    trace->key_order.reserve(static_cast<std::size_t>(nk));
    if (km.o_acc == OAccumulator::mma_c) {
      trace->pv_dot_steps.reserve(static_cast<std::size_t>(tiles) * steps_per_tile);
    } else {
      trace->pv_buffer_events.reserve(2 * static_cast<std::size_t>(tiles));
    }
  }

  for (int it = 0; it < tiles; ++it) {
    const int t = km.kv_order == KvOrder::last_to_first ? tiles - 1 - it : it;
    const int kb = t * bn, ke = std::min(nk, kb + bn), len = ke - kb;
    // Scores; columns past the row's last visible key inside the tile are masked.
    for (int j = 0; j < len; ++j) sc.s[j] = score(km, ar, k, q, hd.k_row(kb + j), d);
    if (km.fp8.block) {
      // +block-quant: this (Q block, KV block)'s descale on the fp32 scores (assumed placement).
      const double qk = ar.f32(hd.q_descale[row / hd.q_block_rows] * hd.k_descale[kb / hd.kv_block_rows]);
      for (int j = 0; j < len; ++j) sc.s[j] = ar.f32(sc.s[j] * qk);
    }

    int repeated = 0;
    const double m_old = m;
    m = stabilising_max(km, ar, k, sc.s.data(), len, m_old, kTrace ? &repeated : nullptr);
    const double alpha = rescale_factor(km, ar, k, m_old, m);
    const bool rescale = it > 0 || km.l_init_one || km.o_acc == OAccumulator::buffer;

    // Rescale ℓ and O by α (FA2: only from the second tile on: softmax_rescale_o<Is_first>).
    // fused_rescale: each thread's ℓ *= α is contracted with its first add of the tile.
    const bool fused_rescale = it > 0 && km.o_acc == OAccumulator::mma_c && km.row_sum == RowSumOrder::fa2_quad &&
                               km.row_sum_rescale_fma;
    if (it > 0 && km.o_acc == OAccumulator::mma_c) {
      for (int c = 0; c < d; ++c) sc.acc[c] = ar.f32(sc.acc[c] * alpha);
      if (quad_row_sum(km) && !fused_rescale)
        for (double& lt : l_thread) lt = ar.f32(lt * alpha);
      if constexpr (kTrace) ts.exact_acc_plot *= static_cast<long double>(alpha);
    }

    // P̄ and the row sum. Triton, causal: tiles from the row block's first key on take the
    // masked ("on-band") path (start_n >= start_m * BLOCK_M).
    const bool two_step =
        km.causal_band_two_step_exponent && g.causal && kb >= row / g.tiles.block_m * g.tiles.block_m;
    for (int j = 0; j < len; ++j) sc.p[j] = exponent(km, ar, k, sc.s[j], m, two_step);
    if (km.row_sum == RowSumOrder::fa2_quad) {
      // Thread t of the quad owns columns {2t, 2t+1} + 8i of the tile; each folds its
      // columns in order (reduce_sum<zero_init=false>), tile after tile.
      // With fused_rescale a thread's first column is an FFMA ℓ·α + P̄ (its first column 2t is
      // the first visible one: causal masks a suffix of the tile); a thread with no visible
      // column adds masked zeros, i.e. ℓ·α rounded once.
      bool rescale_pending[4] = {fused_rescale, fused_rescale, fused_rescale, fused_rescale};
      for (int j = 0; j < len; ++j) {
        const int owner = (j % 8) / 2;
        if (rescale_pending[owner]) {
          l_thread[owner] = ar.fma32(l_thread[owner], alpha, sc.p[j]);
          rescale_pending[owner] = false;
        } else {
          l_thread[owner] = ar.f32(l_thread[owner] + sc.p[j]);
        }
      }
      for (int owner = 0; owner < 4; ++owner)
        if (rescale_pending[owner]) l_thread[owner] = ar.f32(l_thread[owner] * alpha);
    } else if (km.row_sum == RowSumOrder::fa3_quad) {
      // FA3 thread_reduce_: a thread's tile sum starts from its first column of the tile,
      // then joins its running sum (0 + x is exact, so the first tile needs no case).
      double tile_sum[4] = {0, 0, 0, 0};
      bool started[4] = {false, false, false, false};
      for (int j = 0; j < len; ++j) {
        const int owner = (j % 8) / 2;
        tile_sum[owner] = started[owner] ? ar.f32(tile_sum[owner] + sc.p[j]) : sc.p[j];
        started[owner] = true;
      }
      for (int owner = 0; owner < 4; ++owner)
        if (started[owner]) l_thread[owner] = ar.f32(l_thread[owner] + tile_sum[owner]);
    } else {
      int sum_len = len;
      if (km.row_sum_over_full_tile) {  // masked columns of the tile enter the reduction as zeros
        sum_len = std::min(g.n, kb + bn) - kb;
        std::fill(sc.p.begin() + len, sc.p.begin() + sum_len, 0.0);
      }
      double rs = pairwise_sum(sc.p.data(), sum_len, [&](double a, double b) { return ar.op(km.row_sum_internal, a + b); });
      // Qiu & Yao: block_row_sums.clamp(min = EPSILON), the bound a value of the sum's format
      // (torch.clamp casts the scalar to the tensor's dtype); NaN stays NaN, as clamp keeps it.
      // A row that has seen no finite score (m = -inf) keeps ℓ = 0 and the all-masked guards
      // every model shares (O = 0, LSE = +inf): their code masks with -finfo.max, never -inf,
      // and its causal rows always see the diagonal, so it never reaches such a row.
      if (km.row_sum_clamp_min > 0.0 && m != -kInf && !std::isnan(rs))
        rs = std::max(rs, ar.op(km.row_sum_internal, km.row_sum_clamp_min));
      if (km.l_update_fma) {
        l = ar.fma32(it == 0 && !km.l_init_one ? 0.0 : l, alpha, rs);
      } else if (rescale) {
        const double scaled = ar.op(km.row_sum_internal, alpha * l);
        l = ar.to(km.row_sum_format, ar.op(km.row_sum_internal, scaled + rs));
      }
    }

    // P̄ cast for the P·V matmul (after the sum: ℓ used the unrounded P̄).
    for (int j = 0; j < len; ++j) sc.pc[j] = static_cast<E>(ar.to(km.p_cast, sc.p[j]));
    // P̄ == 1 as the P·V product sees it (after the cast: FA2's ex2 of the FFMA residual
    // is 1 + O(2^-22) at a tied max, which the bf16/fp16 cast makes exactly 1).
    int p_one = 0;
    if constexpr (kTrace) {
      for (int j = 0; j < len; ++j) {
        if (sc.pc[j] == static_cast<E>(1)) {
          ++p_one;
          trace->p_equal_one_keys.push_back(kb + j);
        }
      }
    }

    // P·V.
    if constexpr (kTrace) {
      ts.tile = TileRecord{};  // (ts.dot keeps its capacity)
      ts.tally = DotStepTally{};
    }
    if (km.fp8.block) {
      // +block-quant: the tile's P̄·V from C = 0, then acc = fma(tile, v_descale_j, acc) in
      // fp32 (assumed placement). Traced rows count the tile's steps; no per-key plot.
      const double vd = hd.v_descale[kb / hd.kv_block_rows];
      for (int c = 0; c < d; ++c) {
        const E* vcol = hd.vt_row(c) + kb;
        DotTrace* dt = nullptr;
        if constexpr (kTrace) {
          ts.dot.tally_only = &ts.tally;
          dt = &ts.dot;
        }
        const double tile = ar.dot(km.pv_dot, 0.0, sc.pc.data(), vcol, len, dt);
        sc.acc[c] = ar.fma32(tile, vd, sc.acc[c]);
      }
    } else if (km.o_acc == OAccumulator::mma_c) {
      for (int c = 0; c < d; ++c) {
        const E* vcol = hd.vt_row(c) + kb;
        if constexpr (kTrace) {
          if (c == trace->plot_feature) {
            // Step by step (the chained steps are the same computation) to place the
            // error after every fused step on the key axis.
            // (+promote: one promotion group per call, so groups start where the untraced dot's do.)
            const int step = km.pv_dot.promote_every > 0 ? km.pv_dot.promote_every
                             : km.pv_dot.model          ? fused_step_size(*km.pv_dot.model, len)
                                                        : len;
            for (int i = 0; i < len; i += step) {
              const int n = std::min(step, len - i);
              DotTrace& dt = ts.dot;
              dt.steps.clear();
              dt.tally_only = nullptr;
              sc.acc[c] = ar.dot(km.pv_dot, sc.acc[c], sc.pc.data() + i, vcol + i, n, &dt);
              for (DotStepEvent ev : dt.steps) {
                ts.tally.add(ev);
                ev.first_product += kb + i;  // as a key index
                trace->pv_dot_steps.push_back(ev);
              }
              for (int j = 0; j < n; ++j)
                ts.exact_acc_plot += static_cast<long double>(sc.pc[i + j]) * static_cast<long double>(vcol[i + j]);
              const double err = static_cast<double>(static_cast<long double>(sc.acc[c]) - ts.exact_acc_plot);
              for (int j = 0; j < n; ++j) {
                trace->cumulative_error_by_key.push_back(err);
                trace->key_order.push_back(kb + i + j);
              }
            }
            continue;
          }
          ts.dot.tally_only = &ts.tally;
          sc.acc[c] = ar.dot(km.pv_dot, sc.acc[c], sc.pc.data(), vcol, len, &ts.dot);
          continue;
        }
        sc.acc[c] = ar.dot(km.pv_dot, sc.acc[c], sc.pc.data(), vcol, len);
      }
    } else {
      // O = F(F(O·α) + F(P̄V)).
      for (int c = 0; c < d; ++c) {
        const E* vcol = hd.vt_row(c) + kb;
        const double pv_exact = ar.dot(km.pv_dot, 0.0, sc.pc.data(), vcol, len);
        const double scaled = ar.op(km.o_buffer_format, sc.acc[c] * alpha);
        if constexpr (kTrace) {
          RoundingEvent ev_pv, ev_add;
          const double pv = ar.to_traced(km.pv_result_format, pv_exact, &ev_pv);
          // Qiu & Yao's significand overflow: the exact P̄V sum needs a higher exponent than
          // its largest term (two tied P̄ == 1 keys times same-sign V), so its lowest bit is
          // pushed into the rounding.
          int largest_term_exponent = std::numeric_limits<int>::min();
          for (int j = 0; j < len; ++j) {
            const double term = static_cast<double>(sc.pc[j]) * static_cast<double>(vcol[j]);
            if (term != 0.0) largest_term_exponent = std::max(largest_term_exponent, std::ilogb(term));
          }
          ev_pv.significand_overflow = pv_exact != 0.0 && largest_term_exponent != std::numeric_limits<int>::min() &&
                                       std::ilogb(pv_exact) > largest_term_exponent;
          account_rounding(ev_pv, pv - pv_exact, ev_pv.significand_overflow, ts.tile);
          const double sum_exact = scaled + pv;
          const double sum_opmath = km.o_buffer_format && !(*km.o_buffer_format == formats::fp32)
                                        ? static_cast<double>(static_cast<float>(sum_exact))
                                        : sum_exact;
          const double updated = ar.to_traced(km.o_buffer_format, sum_opmath, &ev_add);
          const bool overflow = scaled != 0.0 && pv != 0.0 && std::signbit(scaled) == std::signbit(pv) &&
                                std::ilogb(sum_exact) > std::max(std::ilogb(scaled), std::ilogb(pv));
          ev_add.significand_overflow = overflow;
          account_rounding(ev_add, updated - sum_exact, overflow, ts.tile);
          if (c == trace->plot_feature) {
            trace->pv_buffer_events.push_back(ev_pv);
            trace->pv_buffer_events.push_back(ev_add);
            ts.exact_acc_plot *= static_cast<long double>(alpha);
            for (int j = 0; j < len; ++j)
              ts.exact_acc_plot += static_cast<long double>(sc.pc[j]) * static_cast<long double>(vcol[j]);
            const double err = static_cast<double>(static_cast<long double>(updated) - ts.exact_acc_plot);
            for (int j = 0; j < len; ++j) {
              trace->cumulative_error_by_key.push_back(err);
              trace->key_order.push_back(kb + j);
            }
          }
          sc.acc[c] = updated;
        } else {
          const double pv = ar.to(km.pv_result_format, pv_exact);
          sc.acc[c] = ar.op(km.o_buffer_format, scaled + pv);
        }
      }
    }
    if constexpr (kTrace) {
      add_tally(ts.tally, ts.tile);  // zero for buffer accumulators (counted per rounding above)
      ts.tile.kv_tile = it;
      ts.tile.kv_begin = kb;
      ts.tile.kv_end = ke;
      ts.tile.running_max = m;
      ts.tile.running_sum = quad_row_sum(km) ? l_thread[0] + l_thread[1] + l_thread[2] + l_thread[3] : l;
      ts.tile.p_equal_one = p_one;
      ts.tile.repeated_max = repeated;
      if (quad_row_sum(km)) std::copy(l_thread, l_thread + 4, ts.tile.thread_sums.begin());
      ts.tile.p.assign(sc.p.begin(), sc.p.begin() + len);
      ts.tile.acc.assign(sc.acc.begin(), sc.acc.begin() + d);
      trace->tiles.push_back(ts.tile);
    }
  }

  // ---- end of the forward ----
  if (quad_row_sum(km)) {
    // quad_allreduce_: shfl_xor 2 then 1.
    l = ar.f32(ar.f32(l_thread[0] + l_thread[2]) + ar.f32(l_thread[1] + l_thread[3]));
  }
  const bool empty = l == 0.0 || std::isnan(l);
  // FA3 finalize(v_descale): one per-row output scale, fp32(inv_sum * v_descale).
  const double fa3_out_scale =
      km.normalisation != Normalisation::fa3_finalize
          ? 0.0
          : ar.f32((empty ? 0.0 : ar.rcp(l)) * (km.fp8.enabled && !km.fp8.block ? hd.v_descale[0] : 1.0));
  const RoundingSpec out_spec = final_cast_spec(km, opt);
  const std::optional<Format> out_format =
      km.o_acc == OAccumulator::mma_c ? std::optional<Format>(km.output) : km.o_buffer_format;
  for (int c = 0; c < d; ++c) {
    double pre;
    switch (km.normalisation) {
      case Normalisation::rcp_multiply: pre = ar.f32(sc.acc[c] * (empty ? 1.0 : ar.rcp(l))); break;
      case Normalisation::ieee_reciprocal: pre = ar.f32(sc.acc[c] * (empty ? 1.0 : ar.f32(1.0 / l))); break;
      case Normalisation::fa3_finalize: pre = ar.f32(sc.acc[c] * fa3_out_scale); break;
      case Normalisation::divide_fp32: pre = empty ? sc.acc[c] : ar.f32(sc.acc[c] / l); break;
      case Normalisation::divide_in_format:
      default: pre = empty ? sc.acc[c] : ar.op(formats::fp32, sc.acc[c] / l); break;
    }
    // The final cast: one rounding of the fp32 value (buffer models: of the division's
    // fp32 opmath result) into the output format.
    const bool use_pre_exact = km.normalisation == Normalisation::divide_in_format && !km.o_buffer_format;
    if (use_pre_exact) pre = empty ? sc.acc[c] : sc.acc[c] / l;  // fp64 buffers
    o_pre_out[c] = pre;
    if constexpr (kTrace) {
      RoundingEvent ev;
      o_out[c] = ar.to_traced(out_format, pre, &ev, out_spec, o_position + static_cast<std::uint64_t>(c));
      trace->o_cast.push_back(ev);
    } else if (km.o_round != RoundingMode::rne && !A::exact) {
      o_out[c] = ar.to_traced(out_format, pre, nullptr, out_spec, o_position + static_cast<std::uint64_t>(c));
    } else {
      o_out[c] = ar.to(out_format, pre);
    }
  }
  switch (km.lse) {
    case LseFormula::fa2:
      st.lse = empty ? kInf : ar.fma32(m, k.scale_f, ar.fast_log(l));
      st.lse_kernel = st.lse;
      break;
    case LseFormula::fa3: {
      // finalize: sum *= 2^-Max_offset (exact); max*(scale_log2*ln2) + __logf(sum) contracted (assumed).
      const double ln2 = A::exact ? std::numbers::ln2 : static_cast<double>(static_cast<float>(std::numbers::ln2));
      const double sum = std::ldexp(l, -km.fp8.p_max_offset);
      st.lse = empty ? kInf : ar.fma32(m, ar.f32(k.scale_log2 * ln2), ar.fast_log(sum));
      st.lse_kernel = st.lse;
      break;
    }
    case LseFormula::log2_units:
      st.lse_kernel = empty ? kInf : ar.f32(m + ar.lg2(l));
      st.lse = empty ? kInf : ar.f32(st.lse_kernel * std::numbers::ln2);
      break;
    case LseFormula::natural:
      st.lse = empty ? kInf : ar.op(km.lse_format, m + ar.log32(l));
      st.lse_kernel = st.lse;
      break;
  }
  st.m = m;
  st.l = l;
}

// ---- the materialised forward of one row (standard-FMT, golden-FMT-baseline) ----------
template <class A, class E>
void materialised_forward_row(const KernelModel& km, const A& ar, const HeadData<E>& hd, const Geometry& g, int row,
                              double* o_out, double* o_pre_out, RowStats& st, std::vector<double>& s,
                              std::vector<E>& pc, std::uint64_t o_position, const RunOptions& opt) {
  const int d = g.d;
  const int nk = visible_keys(g, row);
  const ScaleConstants k = head_scale_constants(km, ar, g, hd);
  s.resize(static_cast<std::size_t>(g.n));
  pc.resize(static_cast<std::size_t>(g.n));
  for (int j = 0; j < nk; ++j) s[j] = score(km, ar, k, hd.q_row(row), hd.k_row(j), d);
  // The row's max, or +dynmax's over the whole row (one "tile"); the backward recomputes P
  // from this m.
  const double m = stabilising_max(km, ar, k, s.data(), nk, -kInf, nullptr);
  // softmax: p = exp(s - m), l = Σ p, P = F(p / l) (fp32 inside)
  std::vector<double> p(static_cast<std::size_t>(nk));
  for (int j = 0; j < nk; ++j) p[j] = exponent(km, ar, k, s[j], m);
  const double l = pairwise_sum(p.data(), nk, [&](double a, double b) { return ar.op(km.row_sum_internal, a + b); });
  const bool empty = l == 0.0 || std::isnan(l);
  for (int j = 0; j < nk; ++j) {
    double pj = empty ? 0.0 : ar.op(km.p_format, p[j] / l);
    // fp8 baseline: P kept in fp16, then e4m3(fp32(P * p_scale)).
    if (km.fp8.p_before_cast) pj = ar.f32(ar.op(km.fp8.p_before_cast, pj) * km.fp8.p_scale);
    pc[j] = static_cast<E>(empty ? 0.0 : ar.op(km.p_cast, pj));
  }
  const RoundingSpec out_spec = final_cast_spec(km, opt);
  // fp8 baseline: the P·V GEMM's descale, fp32(v_descale / p_scale), on its fp32 result.
  const double out_descale = km.fp8.enabled ? ar.f32(hd.v_descale[0] / km.fp8.p_scale) : 1.0;
  for (int c = 0; c < d; ++c) {
    const double raw = ar.dot(km.pv_dot, 0.0, pc.data(), hd.vt_row(c), nk);
    const double dot = km.fp8.enabled ? ar.f32(raw * out_descale) : raw;
    o_pre_out[c] = dot;
    o_out[c] = km.o_round == RoundingMode::rne || A::exact
                   ? ar.to(km.pv_result_format, dot)
                   : ar.to_traced(km.pv_result_format, dot, nullptr, out_spec, o_position + static_cast<std::uint64_t>(c));
  }
  st.m = m;
  st.l = l;
  st.lse = empty ? kInf : ar.op(km.lse_format, m + ar.log32(l));
  st.lse_kernel = st.lse;
}

// Recompute the materialised softmax row P (values of p_cast) from the saved m, l.
template <class A, class E>
void materialised_p_row(const KernelModel& km, const A& ar, const HeadData<E>& hd, const Geometry& g, int row,
                        const RowStats& st, double* p_out) {
  const ScaleConstants k = scale_constants(km, ar, g.scale);
  const int nk = visible_keys(g, row);
  const bool empty = st.l == 0.0 || std::isnan(st.l);
  for (int j = 0; j < g.n; ++j) {
    if (j >= nk || empty) {
      p_out[j] = 0.0;
      continue;
    }
    const double s = score(km, ar, k, hd.q_row(row), hd.k_row(j), g.d);
    const double p = exponent(km, ar, k, s, st.m);
    p_out[j] = ar.op(km.p_cast, ar.op(km.p_format, p / st.l));
  }
}

// ---- backward -------------------------------------------------------------------------
// delta for one row from O (or O kept in fp32) and dO.
template <class A, class E>
double delta_from_o(const KernelModel& km, const A& ar, const E* d_o, const double* o, int d) {
  switch (km.delta) {
    case DeltaFormula::fa2_threads: {
      // dot_do_o: FA2's head dim template is d rounded up to a multiple of 32; each
      // thread loads 8 contiguous elements per kBlockKSmem-wide chunk (64 if the
      // template head dim is a multiple of 64, else 32), so a row is shared by
      // kBlockKSmem/8 threads; each sums its elements sequentially (chunk by chunk) in
      // fp32 (products of bf16/fp16 are exact, so the FFMA equals add-of-product), then
      // Allreduce<threads> (shfl_xor threads/2, ..., 1).
      const int padded = (d + 31) / 32 * 32;
      const int chunk = padded % 64 == 0 ? 64 : 32;
      const int threads = chunk / 8;
      double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int t = 0; t < threads; ++t) {
        bool first = true;
        for (int base = 0; base < padded; base += chunk) {
          for (int e = 0; e < 8; ++e) {
            const int col = base + 8 * t + e;
            const double x = col < d ? static_cast<double>(d_o[col]) : 0.0;  // padding columns are zero
            const double y = col < d ? o[col] : 0.0;
            part[t] = first ? ar.f32(x * y) : ar.fma32(x, y, part[t]);
            first = false;
          }
        }
      }
      for (int off = threads / 2; off >= 1; off /= 2)
        for (int t = 0; t < off; ++t) part[t] = ar.f32(part[t] + part[t + off]);
      return part[0];
    }
    case DeltaFormula::rounded_products: {
      std::vector<double> prod(static_cast<std::size_t>(d));
      for (int c = 0; c < d; ++c) prod[c] = ar.op(km.delta_product_format, static_cast<double>(d_o[c]) * o[c]);
      const double s = pairwise_sum(prod.data(), d, [&](double a, double b) { return ar.f32(a + b); });
      return ar.to(km.delta_format, s);
    }
    case DeltaFormula::softmax_backward:
    default: return 0.0;  // computed from dP∘P by the caller
  }
}

template <class E>
struct BwdBuffers {
  std::vector<double> dq, dk, dv;  // accumulators [n][d]
};

// P for one row and key in the FA2 backward: ex2(S*scale_log2 - LSE*log2e) (Scale_max=false:
// max_scaled = lse * float(M_LOG2E)).
template <class A>
double fa2_backward_p(const KernelModel& km, const A& ar, const ScaleConstants& k, double s, double lse_kernel) {
  double log2e = std::numbers::log2e;
  if constexpr (!A::exact) log2e = static_cast<float>(std::numbers::log2e);
  const double lse_scaled = lse_kernel == -kInf ? 0.0 : ar.f32(lse_kernel * log2e);
  return kernel_exp2(km, ar, exponent_argument(km, ar, s, k.scale_log2, lse_scaled));
}

// The FA2 backward (compute_dq_dk_dv_seqk_parallel) for one head: for each n_block,
// m_blocks from last to first; dV += P̄ᵀdO and dK += dSᵀQ through the MMA with the
// accumulators as C; dQ partial per (n_block, m_block) added to dq_accum in fp32.
template <class A, class E>
void mma_backward_head(const KernelModel& km, const A& ar, const HeadData<E>& hd, const Geometry& g,
                       const std::vector<RowStats>& stats, const std::vector<double>& delta, double* dq_out,
                       double* dk_out, double* dv_out, double* dq_pre_out) {
  const int n = g.n, d = g.d;
  const int bm = g.tiles.bwd_block_m, bn = g.tiles.bwd_block_n;
  const ScaleConstants k = scale_constants(km, ar, g.scale);
  std::vector<double> dq_acc(static_cast<std::size_t>(n) * d, 0.0);
  std::vector<double> dk_acc(static_cast<std::size_t>(bn) * d), dv_acc(static_cast<std::size_t>(bn) * d);
  std::vector<E> pt(static_cast<std::size_t>(bn) * bm), dst(static_cast<std::size_t>(bn) * bm),
      ds_rows(static_cast<std::size_t>(bm) * bn);
  const int n_blocks = (n + bn - 1) / bn, m_blocks = (n + bm - 1) / bm;
  for (int nb = 0; nb < n_blocks; ++nb) {
    const int kb = nb * bn, ke = std::min(n, kb + bn), klen = ke - kb;
    std::fill(dk_acc.begin(), dk_acc.end(), 0.0);
    std::fill(dv_acc.begin(), dv_acc.end(), 0.0);
    const int mb_min = g.causal ? kb / bm : 0;
    for (int mb = m_blocks - 1; mb >= mb_min; --mb) {
      const int rb = mb * bm, re = std::min(n, rb + bm), rlen = re - rb;
      for (int r = rb; r < re; ++r) {
        const int nk = visible_keys(g, r);
        for (int j = kb; j < ke; ++j) {
          double p = 0.0, ds = 0.0;
          if (j < nk) {
            const double s = ar.to(km.score_format, ar.dot(km.score_dot, 0.0, hd.q_row(r), hd.k_row(j), d));
            p = fa2_backward_p(km, ar, k, s, stats[r].lse_kernel);
            const double dp = ar.dot(km.score_dot, 0.0, hd.do_row(r), hd.v_row(j), d);
            ds = ar.f32(p * ar.f32(dp - delta[r]));  // pointwise_mult: p * (dp - d)
          }
          const std::size_t tj = static_cast<std::size_t>(j - kb) * bm + (r - rb);
          pt[tj] = static_cast<E>(ar.to(km.p_cast, p));
          dst[tj] = static_cast<E>(ar.to(km.p_cast, ds));
          ds_rows[static_cast<std::size_t>(r - rb) * bn + (j - kb)] = dst[tj];
        }
      }
      for (int j = 0; j < klen; ++j) {
        const E* pcol = pt.data() + static_cast<std::size_t>(j) * bm;
        const E* dscol = dst.data() + static_cast<std::size_t>(j) * bm;
        for (int c = 0; c < d; ++c) {
          double& dv = dv_acc[static_cast<std::size_t>(j) * d + c];
          dv = ar.dot(km.pv_dot, dv, pcol, hd.dot_row(c) + rb, rlen);
          double& dk = dk_acc[static_cast<std::size_t>(j) * d + c];
          dk = ar.dot(km.pv_dot, dk, dscol, hd.qt_row(c) + rb, rlen);
        }
      }
      for (int r = rb; r < re; ++r) {
        const E* dsr = ds_rows.data() + static_cast<std::size_t>(r - rb) * bn;
        for (int c = 0; c < d; ++c) {
          const double part = ar.dot(km.pv_dot, 0.0, dsr, hd.kt_row(c) + kb, klen);
          double& acc = dq_acc[static_cast<std::size_t>(r) * d + c];
          acc = ar.f32(acc + part);
        }
      }
    }
    for (int j = 0; j < klen; ++j)
      for (int c = 0; c < d; ++c) {
        const std::size_t i = static_cast<std::size_t>(j) * d + c, o = static_cast<std::size_t>(kb + j) * d + c;
        dk_out[o] = ar.to(km.output, ar.f32(dk_acc[i] * k.scale_f));
        dv_out[o] = ar.to(km.output, dv_acc[i]);
      }
  }
  for (std::size_t i = 0; i < dq_acc.size(); ++i) {
    const double pre = ar.f32(dq_acc[i] * k.scale_f);  // convert_dq: dq_accum * scale, in fp32
    if (dq_pre_out) dq_pre_out[i] = pre;
    dq_out[i] = ar.to(km.output, pre);
  }
}

// ---- the Triton tutorial's backward (BackwardKernel::triton_prescaled_k) ----------------
// The host's K pre-scale factor as the kernel sees it: softmax_scale * RCP_LN2 in Python
// double, passed by PyTorch's tensor * scalar as an fp32 opmath scalar.
template <class A>
double triton_k_prescale(const KernelModel& km, double softmax_scale) {
  if constexpr (A::exact) return softmax_scale * std::numbers::log2e;
  return static_cast<float>(softmax_scale * km.bwd_k_prescale);
}

// P for one row and key: qkT = tl.dot(k', qT) in fp32 (log2 units, K' pre-scaled), then
// pT = exp2(qkT - M) with M = m + log2(l) from the forward (a separate fp32 subtraction).
// Rows that saw nothing have M = +inf, so P = exp2(-inf) = 0.
template <class A, class E>
double triton_backward_p(const KernelModel& km, const A& ar, const HeadData<E>& hd, int row, int key, double m_log2) {
  const double s = ar.to(km.score_format, ar.dot(km.score_dot, 0.0, hd.q_row(row), hd.kp_row(key), hd.d));
  return kernel_exp2(km, ar, ar.f32(s - m_log2));
}

// A half-open range of rows or keys visited by one tl.dot step.
struct Span {
  int begin = 0, end = 0;
};

// The tutorial's visiting order along the inner index for one outer block starting at
// `block_begin` (a KV block of _attn_bwd_dkdv or a row block of _attn_bwd_dq). Causal: the
// diagonal block [block_begin, block_begin + block) in steps of step / slice (MASK=True),
// then `rest` in steps of `step` (MASK=False). Non-causal: [0, n) in steps of `step`
// (ASSUMED: the tutorial's backward is written for causal attention only).
void triton_steps(bool causal, int n, int block_begin, int block, int step, int slice, Span rest, std::vector<Span>& out) {
  out.clear();
  auto cover = [&](int b, int e, int st) {
    for (int i = b; i < e; i += st) out.push_back(Span{i, std::min(e, i + st)});
  };
  if (!causal) {
    cover(0, n, step);
    return;
  }
  cover(block_begin, std::min(n, block_begin + block), std::max(1, step / std::max(1, slice)));
  cover(rest.begin, rest.end, step);
}

// _attn_bwd for one head. dK, dV: per key (its KV block of bwd_block_n keys fixes the
// diagonal block), dv += tl.dot(pT.to(F), do) and dk += tl.dot(dsT.to(F), qT) over the row
// steps with the fp32 accumulators as C; dsT = pT * (dpT - delta) in fp32; at the end
// dk *= sm_scale (fp32) and both are stored in F. dQ: per row (its row block of bwd_block_n
// rows), dq += tl.dot(ds.to(F), K') over the key steps (diagonal block first, then keys from
// 0), then dq *= fp32(ln 2) because K' carried sm_scale * log2(e). Masked entries
// (tl.where(mask, p, 0)) stay in their steps as zeros.
template <class A, class E>
void triton_backward_head(const KernelModel& km, const A& ar, const HeadData<E>& hd, const Geometry& g,
                          const std::vector<RowStats>& stats, const std::vector<double>& delta, double* dq_out,
                          double* dk_out, double* dv_out) {
  const int n = g.n, d = g.d;
  const int block = g.tiles.bwd_block_n, step = g.tiles.bwd_block_m;
  const ScaleConstants k = scale_constants(km, ar, g.scale);
  const double ln2 = A::exact ? std::numbers::ln2 : static_cast<double>(static_cast<float>(std::numbers::ln2));
  std::vector<Span> spans;
  std::vector<E> p_col(static_cast<std::size_t>(n)), ds_col(static_cast<std::size_t>(n));
  auto p_and_ds = [&](int r, int j, E& p_out, E& ds_out) {
    if (j >= visible_keys(g, r)) {  // tl.where(mask, pT, 0.0)
      p_out = ds_out = static_cast<E>(0);
      return;
    }
    const double p = triton_backward_p(km, ar, hd, r, j, stats[r].lse_kernel);
    const double dp = ar.dot(km.score_dot, 0.0, hd.do_row(r), hd.v_row(j), d);  // tl.dot(v, do^T), fp32
    p_out = static_cast<E>(ar.to(km.p_cast, p));
    ds_out = static_cast<E>(ar.to(km.p_cast, ar.f32(p * ar.f32(dp - delta[r]))));
  };
  // dK, dV.
  for (int j = 0; j < n; ++j) {
    const int kb = j / block * block;
    triton_steps(g.causal, n, kb, block, step, km.bwd_mask_slice, Span{std::min(n, kb + block), n}, spans);
    for (const Span& sp : spans)
      for (int r = sp.begin; r < sp.end; ++r) p_and_ds(r, j, p_col[r], ds_col[r]);
    for (int c = 0; c < d; ++c) {
      double dv = 0.0, dk = 0.0;
      for (const Span& sp : spans) {
        const int len = sp.end - sp.begin;
        dv = ar.dot(km.pv_dot, dv, p_col.data() + sp.begin, hd.dot_row(c) + sp.begin, len);
        dk = ar.dot(km.pv_dot, dk, ds_col.data() + sp.begin, hd.qt_row(c) + sp.begin, len);
      }
      const std::size_t o = static_cast<std::size_t>(j) * d + c;
      dv_out[o] = ar.to(km.output, dv);
      dk_out[o] = ar.to(km.output, ar.f32(dk * k.scale_f));
    }
  }
  // dQ (the kernel recomputes P and dS; the same arithmetic gives the same values).
  std::vector<E>& ds_row = ds_col;
  for (int r = 0; r < n; ++r) {
    const int rb = r / block * block;
    triton_steps(g.causal, n, rb, block, step, km.bwd_mask_slice, Span{0, rb}, spans);
    for (const Span& sp : spans)
      for (int j = sp.begin; j < sp.end; ++j) {
        E p_unused;
        p_and_ds(r, j, p_unused, ds_row[j]);
      }
    for (int c = 0; c < d; ++c) {
      double dq = 0.0;
      for (const Span& sp : spans)
        dq = ar.dot(km.pv_dot, dq, ds_row.data() + sp.begin, hd.kpt_row(c) + sp.begin, sp.end - sp.begin);
      dq_out[static_cast<std::size_t>(r) * d + c] = ar.to(km.output, ar.f32(dq * ln2));
    }
  }
}

// The tensor-op backward (PyTorch autograd through the recipe's forward): per KV tile
// and query tile, block matmuls fp32-accumulated and rounded to bwd_format, the tiles'
// results accumulated in bwd_format. Materialised models use one tile each way.
template <class A, class E>
void tensorop_backward_head(const KernelModel& km, const A& ar, const HeadData<E>& hd, const Geometry& g,
                            const std::vector<RowStats>& stats, const std::vector<double>& delta, double* dq_out,
                            double* dk_out, double* dv_out) {
  const int n = g.n, d = g.d;
  const bool materialised = km.structure == Structure::materialised;
  const int bm = materialised ? std::max(1, n) : g.tiles.bwd_block_m, bn = materialised ? std::max(1, n) : g.tiles.bwd_block_n;
  const ScaleConstants k = scale_constants(km, ar, g.scale);
  std::fill(dq_out, dq_out + static_cast<std::size_t>(n) * d, 0.0);
  std::fill(dk_out, dk_out + static_cast<std::size_t>(n) * d, 0.0);
  std::fill(dv_out, dv_out + static_cast<std::size_t>(n) * d, 0.0);
  std::vector<E> pt(static_cast<std::size_t>(bn) * bm), dst(static_cast<std::size_t>(bn) * bm),
      ds_rows(static_cast<std::size_t>(bm) * bn);
  std::vector<double> prow(static_cast<std::size_t>(n));
  const std::optional<Format> F = km.bwd_format;
  const int n_blocks = (n + bn - 1) / bn, m_blocks = (n + bm - 1) / bm;
  for (int nb = 0; nb < n_blocks; ++nb) {
    const int kb = nb * bn, ke = std::min(n, kb + bn), klen = ke - kb;
    for (int mb = 0; mb < m_blocks; ++mb) {
      const int rb = mb * bm, re = std::min(n, rb + bm), rlen = re - rb;
      for (int r = rb; r < re; ++r) {
        const int nk = visible_keys(g, r);
        if (materialised) materialised_p_row(km, ar, hd, g, r, stats[r], prow.data());
        for (int j = kb; j < ke; ++j) {
          double p = 0.0, ds = 0.0;
          if (j < nk) {
            if (materialised) {
              p = prow[j];
            } else {
              const double s = score(km, ar, k, hd.q_row(r), hd.k_row(j), d);
              // P = exp(S - LSE): S (FMT) minus LSE (lse_format) promotes to the wider.
              const std::optional<Format> sub = km.lse_format && km.sub_format && *km.sub_format == formats::bf16
                                                    ? km.lse_format
                                                    : km.sub_format;
              p = stats[r].lse == kInf ? 0.0 : ar.to(km.p_format, ar.exp32(ar.op(sub, s - stats[r].lse)));
            }
            const double dp = ar.to(F, ar.dot(km.pv_dot, 0.0, hd.do_row(r), hd.v_row(j), d));
            if (km.delta == DeltaFormula::rounded_products && !km.delta_dpp) {
              // Qiu & Yao: dS = p * scale * (dp - D): fp32 * python float; dp (bwd_format) minus D
              // (delta_format) in PyTorch's promoted type: fp32 under autocast, where D is fp32.
              ds = ar.f32(ar.f32(p * k.scale_f) * ar.op(promoted(F, km.delta_format), dp - delta[r]));
            } else {
              // softmax backward (fp32 inside, one rounding), then the scale as a tensor op.
              const double soft = ar.op(F, p * ar.f32(dp - delta[r]));
              ds = ar.op(F, soft * k.scale_f);
            }
          }
          const std::size_t tj = static_cast<std::size_t>(j - kb) * bm + (r - rb);
          pt[tj] = static_cast<E>(ar.to(km.p_cast, p));
          dst[tj] = static_cast<E>(ar.to(F ? F : km.p_cast, ds));
          ds_rows[static_cast<std::size_t>(r - rb) * bn + (j - kb)] = dst[tj];
        }
      }
      for (int j = 0; j < klen; ++j)
        for (int c = 0; c < d; ++c) {
          const std::size_t o = static_cast<std::size_t>(kb + j) * d + c;
          const double dv_blk = ar.to(F, ar.dot(km.pv_dot, 0.0, pt.data() + static_cast<std::size_t>(j) * bm, hd.dot_row(c) + rb, rlen));
          const double dk_blk = ar.to(F, ar.dot(km.pv_dot, 0.0, dst.data() + static_cast<std::size_t>(j) * bm, hd.qt_row(c) + rb, rlen));
          dv_out[o] = mb == 0 ? dv_blk : ar.op(F, dv_out[o] + dv_blk);
          dk_out[o] = mb == 0 ? dk_blk : ar.op(F, dk_out[o] + dk_blk);
        }
      for (int r = rb; r < re; ++r)
        for (int c = 0; c < d; ++c) {
          const std::size_t o = static_cast<std::size_t>(r) * d + c;
          const double blk = ar.to(F, ar.dot(km.pv_dot, 0.0, ds_rows.data() + static_cast<std::size_t>(r - rb) * bn, hd.kt_row(c) + kb, klen));
          dq_out[o] = nb == 0 ? blk : ar.op(F, dq_out[o] + blk);
        }
    }
  }
}

// delta = rowsum(dP∘P) (the +delta-dpp variant, and PyTorch's softmax backward):
// P as the backward recomputes it, dP through the score dot model, products rounded
// to fp32 and summed pairwise in fp32.
template <class A, class E>
double delta_from_dpp(const KernelModel& km, const A& ar, const HeadData<E>& hd, const Geometry& g, int row,
                      const RowStats& st, std::vector<double>& scratch) {
  const ScaleConstants k = scale_constants(km, ar, g.scale);
  const int nk = visible_keys(g, row);
  scratch.assign(static_cast<std::size_t>(nk), 0.0);
  std::vector<double> prow;
  if (km.structure == Structure::materialised) {
    prow.resize(static_cast<std::size_t>(g.n));
    materialised_p_row(km, ar, hd, g, row, st, prow.data());
  }
  for (int j = 0; j < nk; ++j) {
    double p;
    double dp;
    if (km.backward == BackwardKernel::triton_prescaled_k) {
      p = triton_backward_p(km, ar, hd, row, j, st.lse_kernel);
      dp = ar.dot(km.score_dot, 0.0, hd.do_row(row), hd.v_row(j), g.d);
    } else if (km.backward == BackwardKernel::fa2_seqk_parallel) {
      const double s = ar.to(km.score_format, ar.dot(km.score_dot, 0.0, hd.q_row(row), hd.k_row(j), g.d));
      p = fa2_backward_p(km, ar, k, s, st.lse_kernel);
      dp = ar.dot(km.score_dot, 0.0, hd.do_row(row), hd.v_row(j), g.d);
    } else {
      if (km.structure == Structure::materialised) {
        p = prow[j];
      } else {
        const double s = score(km, ar, k, hd.q_row(row), hd.k_row(j), g.d);
        p = st.lse == kInf ? 0.0 : ar.to(km.p_format, ar.exp32(ar.op(km.lse_format, s - st.lse)));
      }
      dp = ar.to(km.bwd_format, ar.dot(km.pv_dot, 0.0, hd.do_row(row), hd.v_row(j), g.d));
    }
    scratch[j] = ar.f32(p * dp);
  }
  return pairwise_sum(scratch.data(), nk, [&](double a, double b) { return ar.f32(a + b); });
}

// ---- orchestration ----------------------------------------------------------------------
// RunOptions::cancel: stop between rows.
void check_cancel(const RunOptions& opt) {
  if (opt.cancel && opt.cancel->load(std::memory_order_relaxed)) throw Cancelled();
}

template <class Fn>
void parallel_for(int count, int threads, const Fn& fn) {
  threads = std::max(1, std::min(threads, count));
  if (threads == 1) {
    for (int i = 0; i < count; ++i) fn(i);
    return;
  }
  std::atomic<int> next{0};
  std::vector<std::thread> pool;
  std::exception_ptr error;
  std::atomic<bool> failed{false};
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (int i = next++; i < count && !failed; i = next++) {
        try {
          fn(i);
        } catch (...) {
          if (!failed.exchange(true)) error = std::current_exception();
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

void check_inputs(const AttentionInputs& in) {
  auto same = [](const Tensor4& a, const Tensor4& b) { return a.batch == b.batch && a.heads == b.heads && a.rows == b.rows; };
  if (!same(in.q, in.k) || !same(in.k, in.v) || in.q.cols != in.k.cols || in.v.cols != in.q.cols) {
    throw std::invalid_argument("attention: q, k, v must have the same batch, heads, seqlen and head dim");
  }
  if (in.d_o && (!same(*in.d_o, in.q) || in.d_o->cols != in.q.cols)) {
    throw std::invalid_argument("attention: dO must have the shape of O");
  }
  if (in.q.cols > 256) throw std::invalid_argument("attention: head dim above 256 is not modelled");
}

template <class A, class E>
AttentionOutputs run_typed(const KernelModel& km, const A& ar, const AttentionInputs& in, const RunOptions& opt) {
  check_inputs(in);
  const int B = in.q.batch, H = in.q.heads, N = in.q.rows, D = in.q.cols;
  Geometry g;
  g.n = N;
  g.d = D;
  g.scale = in.softmax_scale > 0 ? in.softmax_scale : (D > 0 ? 1.0 / std::sqrt(static_cast<double>(D)) : 1.0);
  g.causal = in.causal;
  g.tiles = km.tiles_for(D, N);
  if (opt.block_m > 0) g.tiles.block_m = g.tiles.bwd_block_m = opt.block_m;
  if (opt.block_n > 0) g.tiles.block_n = g.tiles.bwd_block_n = opt.block_n;
  g.tiles.block_n = std::max(1, g.tiles.block_n);
  g.tiles.block_m = std::max(1, g.tiles.block_m);
  g.tiles.bwd_block_m = std::max(1, g.tiles.bwd_block_m);
  g.tiles.bwd_block_n = std::max(1, g.tiles.bwd_block_n);
  if (quad_row_sum(km) && g.tiles.block_n % 8 != 0 && g.tiles.block_n < N) {
    throw std::invalid_argument("attention: FA2 tiles must be a multiple of 8 keys");
  }

  AttentionOutputs out;
  out.o = Tensor4(B, H, N, D);
  out.lse = Tensor4(B, H, N, 1);
  Tensor4 o_pre(B, H, N, D);
  const bool backward = in.d_o.has_value();
  std::vector<std::vector<RowStats>> stats(static_cast<std::size_t>(B) * H, std::vector<RowStats>(static_cast<std::size_t>(N)));

  // fp8 models: incoherent processing and quantisation of Q, K, V (attention/fp8_quant.hpp),
  // with the run's tiles as the +block-quant blocks.
  std::optional<Fp8Inputs> fp8;
  if (km.fp8.enabled) fp8 = quantise_fp8_inputs(km.fp8, in, g.tiles.block_m, g.tiles.block_n, opt.seed, A::exact);

  // Prepare operands per head.
  std::vector<HeadData<E>> heads(static_cast<std::size_t>(B) * H);
  parallel_for(B * H, opt.threads, [&](int bh) {
    const int b = bh / H, h = bh % H;
    HeadData<E>& hd = heads[static_cast<std::size_t>(bh)];
    hd.n = N;
    hd.d = D;
    copy_rows(fp8 ? fp8->q : in.q, b, h, hd.q, backward ? &hd.qt : nullptr);
    copy_rows(fp8 ? fp8->k : in.k, b, h, hd.k, backward ? &hd.kt : nullptr);
    copy_rows(fp8 ? fp8->v : in.v, b, h, hd.v, &hd.vt);
    if (fp8) {
      auto slice = [bh](const std::vector<double>& all, int blocks) {
        return std::vector<double>(all.begin() + static_cast<std::ptrdiff_t>(bh) * blocks,
                                   all.begin() + static_cast<std::ptrdiff_t>(bh + 1) * blocks);
      };
      hd.q_descale = slice(fp8->q_descale, fp8->q_blocks);
      hd.k_descale = slice(fp8->k_descale, fp8->kv_blocks);
      hd.v_descale = slice(fp8->v_descale, fp8->kv_blocks);
      hd.q_block_rows = fp8->q_block_rows;
      hd.kv_block_rows = fp8->kv_block_rows;
    }
    if (backward) copy_rows(*in.d_o, b, h, hd.d_o, &hd.d_ot);
    if (backward && km.backward == BackwardKernel::triton_prescaled_k) {
      // _attention.backward: arg_k = k * (sm_scale * RCP_LN2), a tensor op in the input format.
      const double factor = triton_k_prescale<A>(km, g.scale);
      hd.kp.resize(hd.k.size());
      hd.kpt.resize(hd.k.size());
      for (int r = 0; r < N; ++r)
        for (int c = 0; c < D; ++c) {
          const std::size_t i = static_cast<std::size_t>(r) * D + c;
          hd.kp[i] = static_cast<E>(ar.op(km.input, static_cast<double>(hd.k[i]) * factor));
          hd.kpt[static_cast<std::size_t>(c) * N + r] = hd.kp[i];
        }
    }
  });

  // Traced rows, by (b, h, r).
  std::vector<int> trace_slot(static_cast<std::size_t>(B) * H * N, -1);
  if (opt.tracer) {
    opt.tracer->traces.assign(opt.tracer->rows.size(), RowTrace{});
    for (std::size_t i = 0; i < opt.tracer->rows.size(); ++i) {
      const auto& [b, h, r] = opt.tracer->rows[i];
      if (b < 0 || b >= B || h < 0 || h >= H || r < 0 || r >= N) {
        throw std::invalid_argument("tracer: row (" + std::to_string(b) + "," + std::to_string(h) + "," +
                                    std::to_string(r) + ") is outside the problem");
      }
      RowTrace& t = opt.tracer->traces[i];
      t.batch = b;
      t.head = h;
      t.row = r;
      t.plot_feature = std::clamp(opt.tracer->plot_feature, 0, std::max(0, D - 1));
      trace_slot[(static_cast<std::size_t>(b) * H + h) * N + r] = static_cast<int>(i);
    }
  }

  // RunOptions::only_rows: the rows to compute (traced rows too); empty = all.
  std::vector<char> selected;
  if (!opt.only_rows.empty()) {
    selected.assign(static_cast<std::size_t>(B) * H * N, 0);
    for (const auto& [b, h, r] : opt.only_rows) {
      if (b < 0 || b >= B || h < 0 || h >= H || r < 0 || r >= N)
        throw std::invalid_argument("only_rows: row (" + std::to_string(b) + "," + std::to_string(h) + "," +
                                    std::to_string(r) + ") is outside the problem");
      selected[(static_cast<std::size_t>(b) * H + h) * N + r] = 1;
    }
    for (std::size_t i = 0; i < trace_slot.size(); ++i)
      if (trace_slot[i] >= 0) selected[i] = 1;
  }
  auto row_selected = [&](int b, int h, int r) {
    return selected.empty() || selected[(static_cast<std::size_t>(b) * H + h) * N + r] != 0;
  };

  // Forward: (batch, head, row block) work items.
  const int rows_per_item = 64;
  const int row_blocks = (N + rows_per_item - 1) / rows_per_item;
  parallel_for(B * H * row_blocks, opt.threads, [&](int item) {
    const int bh = item / row_blocks, rbk = item % row_blocks;
    const int b = bh / H, h = bh % H;
    const HeadData<E>& hd = heads[static_cast<std::size_t>(bh)];
    Scratch<E> sc;
    sc.size(g.tiles.block_n, D);
    std::vector<double> s_full;
    std::vector<E> pc_full;
    for (int r = rbk * rows_per_item; r < std::min(N, (rbk + 1) * rows_per_item); ++r) {
      if (!row_selected(b, h, r)) continue;
      check_cancel(opt);
      double* o = out.o.row(b, h, r);
      double* pre = o_pre.row(b, h, r);
      RowStats& st = stats[static_cast<std::size_t>(bh)][static_cast<std::size_t>(r)];
      const int slot = trace_slot[(static_cast<std::size_t>(b) * H + h) * N + r];
      const std::uint64_t pos = out.o.index(b, h, r, 0);
      if (km.structure == Structure::materialised) {
        materialised_forward_row(km, ar, hd, g, r, o, pre, st, s_full, pc_full, pos, opt);
      } else if (slot >= 0) {
        online_forward_row<A, E, true>(km, ar, hd, g, r, o, pre, st, sc, pos, opt, &opt.tracer->traces[slot]);
      } else {
        online_forward_row<A, E, false>(km, ar, hd, g, r, o, pre, st, sc, pos, opt, nullptr);
      }
      out.lse.at(b, h, r, 0) = st.lse;
      if (opt.progress) opt.progress->fetch_add(1, std::memory_order_relaxed);
    }
  });
  if (!backward) return out;

  if (!selected.empty()) {
    // A row subset: delta of the listed rows (each from its own row's forward); no dQ, dK,
    // dV, which need every row.
    out.delta = Tensor4(B, H, N, 1);
    parallel_for(B * H, opt.threads, [&](int bh) {
      const int b = bh / H, h = bh % H;
      const HeadData<E>& hd = heads[static_cast<std::size_t>(bh)];
      const auto& st = stats[static_cast<std::size_t>(bh)];
      std::vector<double> scratch;
      const bool dpp = km.delta_dpp || km.delta == DeltaFormula::softmax_backward;
      for (int r = 0; r < N; ++r) {
        if (!row_selected(b, h, r)) continue;
        check_cancel(opt);
        const double* o_used = km.o_fp32 ? o_pre.row(b, h, r) : out.o.row(b, h, r);
        out.delta->at(b, h, r, 0) =
            dpp ? delta_from_dpp(km, ar, hd, g, r, st[r], scratch) : delta_from_o(km, ar, hd.do_row(r), o_used, D);
        if (opt.progress) opt.progress->fetch_add(1, std::memory_order_relaxed);
      }
    });
    return out;
  }

  // Backward: (batch, head) work items.
  out.delta = Tensor4(B, H, N, 1);
  out.dq = Tensor4(B, H, N, D);
  out.dk = Tensor4(B, H, N, D);
  out.dv = Tensor4(B, H, N, D);
  if (km.backward == BackwardKernel::fa2_seqk_parallel) out.dq_pre_cast = Tensor4(B, H, N, D);
  parallel_for(B * H, opt.threads, [&](int bh) {
    const int b = bh / H, h = bh % H;
    const HeadData<E>& hd = heads[static_cast<std::size_t>(bh)];
    const auto& st = stats[static_cast<std::size_t>(bh)];
    std::vector<double> delta(static_cast<std::size_t>(N)), scratch;
    for (int r = 0; r < N; ++r) {
      check_cancel(opt);
      const bool dpp = km.delta_dpp || km.delta == DeltaFormula::softmax_backward;
      const double* o_used = km.o_fp32 ? o_pre.row(b, h, r) : out.o.row(b, h, r);
      delta[r] = dpp ? delta_from_dpp(km, ar, hd, g, r, st[r], scratch) : delta_from_o(km, ar, hd.do_row(r), o_used, D);
      out.delta->at(b, h, r, 0) = delta[r];
      const int slot = trace_slot[(static_cast<std::size_t>(b) * H + h) * N + r];
      if (slot >= 0) {
        // Decomposition of delta's error against Σ dO·O_pre (the kernel's own unrounded O).
        long double with_pre = 0, with_cast = 0;
        for (int c = 0; c < D; ++c) {
          with_pre += static_cast<long double>(hd.do_row(r)[c]) * o_pre.row(b, h, r)[c];
          with_cast += static_cast<long double>(hd.do_row(r)[c]) * out.o.row(b, h, r)[c];
        }
        RowTrace& t = opt.tracer->traces[static_cast<std::size_t>(slot)];
        t.delta_error_from_o = static_cast<double>(with_cast - with_pre);
        t.delta_error_from_reduction = static_cast<double>(static_cast<long double>(delta[r]) - with_cast);
      }
    }
    check_cancel(opt);
    // The head's backward rows count as done when its gradients are (a progress bar that
    // counted them after delta sat at 100% through the whole backward kernel).
    const auto count_backward_rows = [&] {
      if (opt.progress) opt.progress->fetch_add(static_cast<std::uint64_t>(N), std::memory_order_relaxed);
    };
    if (km.fp8.enabled) return count_backward_rows();  // no fp8 backward is modelled: delta only
    double* dq = out.dq->row(b, h, 0);
    double* dk = out.dk->row(b, h, 0);
    double* dv = out.dv->row(b, h, 0);
    switch (km.backward) {
      case BackwardKernel::fa2_seqk_parallel:
        mma_backward_head(km, ar, hd, g, st, delta, dq, dk, dv, out.dq_pre_cast->row(b, h, 0));
        break;
      case BackwardKernel::triton_prescaled_k: triton_backward_head(km, ar, hd, g, st, delta, dq, dk, dv); break;
      case BackwardKernel::tensor_ops: tensorop_backward_head(km, ar, hd, g, st, delta, dq, dk, dv); break;
    }
    count_backward_rows();
  });
  if (km.fp8.enabled) {
    out.dq.reset();
    out.dk.reset();
    out.dv.reset();
    out.dq_pre_cast.reset();
  }
  return out;
}

}  // namespace

std::optional<double> kernel_delta(const ModelHandle& model, const double* d_o, const double* o, int d) {
  const KernelModel& km = *model.recipe;
  if (km.structure == Structure::correctly_rounded) return correctly_rounded_delta(km, d_o, o, d, 0, 0);
  if (km.delta == DeltaFormula::softmax_backward) return std::nullopt;  // needs dP and P, not O
  const detail::HardwareArith ar{&km};
  return delta_from_o(km, ar, d_o, o, d);
}

AttentionOutputs run_attention(const ModelHandle& model, const AttentionInputs& in, const RunOptions& opt) {
  if (!model.recipe) throw std::invalid_argument("run_attention: empty kernel model");
  const KernelModel& km = *model.recipe;
  // Inputs must be values of the recipe's input format (a bf16 recipe cannot read fp16
  // values, which it could not represent, and vice versa).
  const bool narrower = (km.input == formats::bf16 && in.dtype == formats::fp16) ||
                        (km.input == formats::fp16 && in.dtype == formats::bf16);
  if (narrower) {
    throw std::invalid_argument("kernel model '" + model.name + "' reads " + km.input.name + " inputs, got " +
                                in.dtype.name + " (parse the model with the inputs' dtype)");
  }
  if (km.structure == Structure::correctly_rounded) {
    if (opt.exact_arithmetic) return exact_attention(in);  // its one rounding per output is the identity
    check_inputs(in);
    return round_exact_outputs(km, in, exact_attention(in), opt);
  }
  if (opt.exact_arithmetic) {
    if (opt.tracer) throw std::invalid_argument("run_attention: the tracer needs the hardware arithmetic");
    return run_typed<ExactArith, double>(km, ExactArith{&km}, in, opt);
  }
  const bool fp64_model = km.score_dot.kind == DotKind::fp64_fma_chain || !km.p_cast;
  if (fp64_model) return run_typed<HardwareArith, double>(km, HardwareArith{&km}, in, opt);
  return run_typed<HardwareArith, float>(km, HardwareArith{&km}, in, opt);
}

// ---- the native-float speed baseline ---------------------------------------------------------
AttentionOutputs native_flash_forward(const AttentionInputs& in, int block_n, int threads) {
  check_inputs(in);
  const int B = in.q.batch, H = in.q.heads, N = in.q.rows, D = in.q.cols;
  const double scale = in.softmax_scale > 0 ? in.softmax_scale : 1.0 / std::sqrt(static_cast<double>(std::max(D, 1)));
  const float scale_log2 = static_cast<float>(scale * std::numbers::log2e);
  block_n = std::max(1, block_n);
  AttentionOutputs out;
  out.o = Tensor4(B, H, N, D);
  out.lse = Tensor4(B, H, N, 1);
  parallel_for(B * H, threads, [&](int bh) {
    const int b = bh / H, h = bh % H;
    std::vector<float> k, vt;
    copy_rows<float>(in.k, b, h, k, nullptr);
    std::vector<float> v;
    copy_rows(in.v, b, h, v, &vt);
    std::vector<float> q(static_cast<std::size_t>(D)), s(static_cast<std::size_t>(block_n)), acc(static_cast<std::size_t>(D));
    for (int r = 0; r < N; ++r) {
      for (int c = 0; c < D; ++c) q[c] = static_cast<float>(in.q.at(b, h, r, c));
      const int nk = in.causal ? r + 1 : N;
      float m = -std::numeric_limits<float>::infinity(), l = 0.f;
      std::fill(acc.begin(), acc.end(), 0.f);
      const int tiles = (nk + block_n - 1) / block_n;
      for (int t = tiles - 1; t >= 0; --t) {
        const int kb = t * block_n, len = std::min(nk, kb + block_n) - kb;
        float tm = m;
        for (int j = 0; j < len; ++j) {
          float dot = 0.f;
          const float* kr = k.data() + static_cast<std::size_t>(kb + j) * D;
          for (int c = 0; c < D; ++c) dot += q[c] * kr[c];
          s[j] = dot;
          tm = std::max(tm, dot);
        }
        const float alpha = std::exp2((m - tm) * scale_log2);
        l *= alpha;
        for (float& a : acc) a *= alpha;
        m = tm;
        for (int j = 0; j < len; ++j) {
          s[j] = std::exp2(s[j] * scale_log2 - m * scale_log2);
          l += s[j];
        }
        for (int c = 0; c < D; ++c) {
          const float* vc = vt.data() + static_cast<std::size_t>(c) * N + kb;
          float a = acc[c];
          for (int j = 0; j < len; ++j) a += s[j] * vc[j];
          acc[c] = a;
        }
      }
      for (int c = 0; c < D; ++c) {
        const float o = l > 0 ? acc[c] / l : 0.f;
        out.o.at(b, h, r, c) = to_double(in.dtype, round_double(in.dtype, o, RoundingSpec{}).bits);
      }
      out.lse.at(b, h, r, 0) = l > 0 ? m * scale + std::log(l) : std::numeric_limits<double>::infinity();
    }
  });
  return out;
}

}  // namespace fb::attn
