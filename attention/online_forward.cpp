// attention/online_forward.cpp: the online-softmax forward of one query row, as FA2's
// compute_attn_1rowblock runs it for that row (every online recipe: FA2, PyTorch's FA2, FA3
// fp8, the Triton tutorial, fa-bf16acc, golden-*-flash).
//
// Contract (attention/engine_detail.hpp online_forward_row): the row walks its visible KV
// tiles in the recipe's order; each tile's steps carry FA2 softmax.h's names where they are
// FA2's steps (reduce_max, softmax_rescale_o with Is_first, scale_apply_exp2, reduce_sum,
// normalize_softmax_lse), and each reads the recipe for how it is rounded. The row's numerics
// depend only on the KV tiling (block_n): max, ℓ and acc_o are per-row registers in FA2.
// Traced rows run the same loop over a TileTraceSink (attention/trace_sink.hpp); untraced
// rows over NullTraceSink, which compiles to nothing.
//
// Modelling notes: causal tiles entirely above a row's diagonal are skipped (for this row
// FA2 would see -inf scores, P̄ = 0 and a rescale of 0 * 0: numerically a no-op), and the
// diagonal tile ends at the row's last visible key; KernelModel::visit_masked_tiles visits
// them as Qiu & Yao's loop does, where a finite mask value and STABLE=1 make them count. A row that
// sees nothing follows FA2's guards: m = -inf is used as 0 in the exponent; l == 0 gives
// inv = 1, O = 0 and the LSE its source writes, empty_row_lse (FA2's +inf; PyTorch-style code
// without guards would give NaN). With a key length other than the query length the causal
// diagonal is aligned bottom-right as in FA2 >= 2.1 (visible_keys); the rows above the corner
// see no key at all: they visit no tile (not even under +visit-masked-tiles) and take the same
// guards, every model alike (FA2's flash_fwd_kernel.h:101-132 writes O = 0 and LSE = +inf for
// a row block with no KV block).
#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "attention/engine_detail.hpp"
#include "attention/splitkv.hpp"
#include "attention/trace_sink.hpp"
#include "emu/array_rounding.hpp"
#include "emu/sfu/software_exp2.hpp"

namespace fb::attn::detail {
namespace {

// FA2's Softmax state of one row: row_max and row_sum. Quad recipes (quad_row_sum) keep ℓ
// as each thread's partial sum (l_thread) until normalize_softmax_lse joins them.
struct SoftmaxState {
  double m = -kInf;
  double l_thread[4] = {0, 0, 0, 0};
  double l = 0.0;
  // A tile whose max was -inf held a NaN score (kept only where nan_row_sum_is_empty is false):
  // the max skips NaN as fmaxf does, so a row of NaN scores has max -inf like a row that saw
  // nothing. Beside a finite score a NaN one shows in a NaN ℓ with a finite max, unscanned.
  bool saw_nan_score = false;
};

// The base-2 exponent of α for recipes that rescale with exp2 (not multiply_scores), formed in
// fp32 as the kernels form it: (m_old - m_new)·scale_log2 (FA2, FA3, FA4), or m_old - m_new
// for Triton, whose max is already in log2 units. softmax_rescale_o: scores_max_cur = max ==
// -inf ? 0 : max (Check_inf). FA4's lazy rescaling compares this same value to -T.
// CK FMHA forms it as the exponent of P̄ (RescaleExponent::ffma_scaled_max).
template <class A>
double rescale_exponent(const KernelModel& km, const A& ar, const ScaleConstants& sc, double m_old, double m_new) {
  const double cur = m_new == -kInf ? 0.0 : m_new;
  if (km.scale != ScaleHandling::exponent_ffma) return ar.f32(m_old - cur);
  if (km.rescale_exponent == RescaleExponent::ffma_scaled_max)
    return ar.fma32(m_old, sc.scale_log2, -ar.f32(cur * sc.scale_log2));
  return ar.f32(ar.f32(m_old - cur) * sc.scale_log2);
}

// α = the factor applied to ℓ and O when the max moves from m_old to m_new.
template <class A>
double rescale_factor(const KernelModel& km, const A& ar, const ScaleConstants& sc, double m_old, double m_new) {
  switch (km.scale) {
    case ScaleHandling::exponent_ffma:
    case ScaleHandling::log2_units:
      return kernel_exp2(km, ar, rescale_exponent(km, ar, sc, m_old, m_new));
    case ScaleHandling::multiply_scores:
    case ScaleHandling::sqrt_prescale_qk: {  // materialised only (run_attention refuses it online)
      if (m_old == -kInf) return 0.0;        // nothing accumulated yet (guards -inf - -inf)
      return ar.to(km.p_format, ar.opmath_exp(ar.op(km.sub_format, m_old - m_new)));
    }
  }
  return 1.0;
}

// Whether the quad recipe contracts each thread's ℓ *= α with its first add of the tile
// (KernelModel::row_sum_rescale_fma): then reduce_sum applies α, not softmax_rescale_o.
bool fused_row_sum_rescale(const KernelModel& km, bool Is_first) {
  return !Is_first && km.o_acc == OAccumulator::mma_c && km.row_sum == RowSumOrder::fa2_quad && km.row_sum_rescale_fma;
}

// softmax_rescale_o<Is_first>: acc_o *= α and (quad sums, unless fused into reduce_sum)
// each thread's ℓ *= α; FA2 skips it on the first tile. Buffer accumulators rescale inside
// their P·V update, pairwise row sums inside reduce_sum.
template <class A, class Sink>
void softmax_rescale_o(const KernelModel& km, const A& ar, bool Is_first, double alpha, std::vector<double>& acc,
                       SoftmaxState& state, Sink& sink) {
  if (Is_first || km.o_acc != OAccumulator::mma_c) return;
  for (double& a : acc) a = ar.f32(a * alpha);
  if (quad_row_sum(km) && !fused_row_sum_rescale(km, Is_first))
    for (double& lt : state.l_thread) lt = ar.f32(lt * alpha);
  sink.on_rescale(alpha);
}

// Whether scale_apply_exp2 hands the tile's exponentials to the SFU model at once
// (SpecialFunctionModel::evaluate_array: the same bits as one evaluate() per entry, and for
// the correct ex2 model about twice as fast): FFMA exponents into the .ftz ex2 on the SFU,
// i.e. the entries whose exponent() is ar.ex2(exponent_argument(...)) through kernel_exp2.
template <class A>
bool exp2_over_tile(const KernelModel& km, const Geometry& g) {
  if constexpr (A::exact) return false;
  return km.scale == ScaleHandling::exponent_ffma && km.exp2_function == Exp2Function::ex2_approx_ftz &&
         !g.software_exp2.enabled && !(km.causal_band_two_step_exponent && g.causal);
}

// scale_apply_exp2 over the tile: P̄_j from S_j and the new max. Triton, causal: tiles from
// the row block's first row's diagonal key on take the masked ("on-band") path (_attn_fwd_inner
// STAGE 2: lo = start_m * BLOCK_M). The tutorial takes one N_CTX for q and k; with a key length
// other than the query length the band starts at the shifted diagonal, start_m * BLOCK_M +
// (nk - nq), as FA2 aligns its mask (ASSUMED: the tutorial has no such case).
// ex2_args, ex2_values: fp32 scratch of len entries (exp2_over_tile).
template <class A>
void scale_apply_exp2(const KernelModel& km, const A& ar, const ScaleConstants& k, const Geometry& g, int row,
                      int kv_begin, double m, const double* s, double* p, int len, float* ex2_args, float* ex2_values) {
  if constexpr (!A::exact) {
    if (exp2_over_tile<A>(km, g)) {
      // exponent()'s exponent_ffma case with kernel_exp2's ar.ex2, per entry: the argument is
      // an fp32 value (fma32 or f32), read by ar.ex2 as that float.
      const double max_scaled = exponent_max_scaled(km, ar, k, m);
      if (km.exponent_argument == ExponentArgument::ffma) {
        // exponent_argument's FFMA over the tile at once: ar.fma32(s, scale_log2, -max_scaled)
        // of fp32 values (S, the fp32 constant, the f32/fma32 max), which is std::fma on those
        // floats, flushed as ar.f32 flushes (ffma_uniform_f32_array).
        for (int j = 0; j < len; ++j) ex2_args[j] = static_cast<float>(s[j]);
        ffma_uniform_f32_array(ex2_args, static_cast<float>(k.scale_log2), static_cast<float>(-max_scaled), ex2_args,
                               static_cast<std::size_t>(len), km.ftz);
      } else {
        for (int j = 0; j < len; ++j)
          ex2_args[j] = static_cast<float>(exponent_argument(km, ar, s[j], k.scale_log2, max_scaled));
      }
      ar.km->sfu.ex2->evaluate_array(ex2_args, ex2_values, static_cast<std::size_t>(len));
      for (int j = 0; j < len; ++j) p[j] = ex2_values[j];
      return;
    }
  }
  const int row_begin = row / g.tiles.block_m * g.tiles.block_m;
  const bool two_step =
      km.causal_band_two_step_exponent &&
      (km.kv_order == KvOrder::partial_then_full ? flex_block_behind_where(g, row_begin, kv_begin)
                                                 : g.causal && kv_begin >= row_begin + causal_offset(g));
  for (int j = 0; j < len; ++j) {
    // +sw-exp2: FA4's apply_exp2_convert picks the polynomial by the column's place in the tile.
    const SoftwareExp2Split& sw = g.software_exp2;
    const bool software = sw.enabled && (sw.every == 0 || fa4_software_ex2_uses_polynomial(j, g.tiles.block_n, sw.every,
                                                                                           sw.start_fragment));
    p[j] = exponent(km, ar, k, s[j], m, two_step, software);
  }
}

// +lazy-rescale (FA4's SoftmaxSm100.update_row_max): keep the old max while the new one
// exceeds it by at most T in log2 units, rescale_exponent >= -T. The first tile and a row
// with no finite max yet always move.
template <class A>
bool keep_old_max(const KernelModel& km, const A& ar, const ScaleConstants& sc, bool Is_first, double m_old,
                  double m_new) {
  if (km.lazy_rescale_log2 <= 0.0 || Is_first || m_old == -kInf) return false;
  return rescale_exponent(km, ar, sc, m_old, m_new) >= -km.lazy_rescale_log2;
}

// One tile's per-thread sums of a quad (fa3_quad, triton_quad): thread t owns the columns
// {2t, 2t+1} + 8j and folds them in order from its first one in fp32; a thread with no column
// keeps 0 (started[t] false; started may be null).
template <class A>
void quad_tile_sums(const A& ar, const std::vector<double>& p, int len, double tile_sum[4], bool* started) {
  bool own_started[4] = {false, false, false, false};
  for (int owner = 0; owner < 4; ++owner) tile_sum[owner] = 0.0;
  for (int j = 0; j < len; ++j) {
    const int owner = (j % 8) / 2;
    tile_sum[owner] = own_started[owner] ? ar.f32(tile_sum[owner] + p[j]) : p[j];
    own_started[owner] = true;
  }
  if (started)
    for (int owner = 0; owner < 4; ++owner) started[owner] = own_started[owner];
}

// A quad's per-thread sums joined by shfl.bfly 2 then 1: (t0 + t2) + (t1 + t3).
template <class A>
double quad_butterfly(const A& ar, const double thread_sum[4]) {
  return ar.f32(ar.f32(thread_sum[0] + thread_sum[2]) + ar.f32(thread_sum[1] + thread_sum[3]));
}

// ℓ after a tile whose row sum is rs, for the orders that sum each tile on its own (triton_quad,
// flex_decode_warps): fma(ℓ, α, rs) with l_update_fma, else fp32(ℓ·α) + rs; ℓ starts from 0
// (Triton's l_init_one: from 1, whose first α is 0).
template <class A>
void join_tile_row_sum(const KernelModel& km, const A& ar, bool Is_first, double alpha, double rs,
                       SoftmaxState& state) {
  const double l_old = Is_first && !km.l_init_one ? 0.0 : state.l;
  state.l = km.l_update_fma ? ar.fma32(l_old, alpha, rs) : ar.f32(ar.f32(l_old * alpha) + rs);
}

// The LSE FlexAttention returns, lse * math.log(2) on its log2-unit LSE, which Inductor compiles
// as an fp32 multiply by fp32(ln 2) (mul.f32 ..., 0f3F317218: triton_poi_fused_mul_1; the
// decoding combine's per_mul_8).
template <class A>
double flex_returned_lse(const A& ar, double lse_log2) {
  if constexpr (A::exact) return lse_log2 * std::numbers::ln2;
  return ar.f32(lse_log2 * static_cast<double>(static_cast<float>(std::numbers::ln2)));
}

// reduce_sum: the tile's P̄ (unrounded) joins ℓ in the recipe's order.
template <class A>
void reduce_sum(const KernelModel& km, const A& ar, const Geometry& g, bool Is_first, double alpha, int kv_begin,
                std::vector<double>& p, int len, SoftmaxState& state) {
  if (km.row_sum == RowSumOrder::fa2_quad) {
    // Thread t of the quad owns columns {2t, 2t+1} + 8i of the tile; each folds its
    // columns in order (reduce_sum<zero_init=false>), tile after tile.
    // With the fused rescale a thread's first column is an FFMA ℓ·α + P̄ (its first column 2t
    // is the first visible one: causal masks a suffix of the tile); a thread with no visible
    // column adds masked zeros, i.e. ℓ·α rounded once.
    const bool fused = fused_row_sum_rescale(km, Is_first);
    bool rescale_pending[4] = {fused, fused, fused, fused};
    // The first 8 columns (each thread's first, where the fused rescale is) and a ragged end
    // entry by entry; whole groups of 8 between them with the owners unrolled (the same adds in
    // the same order per thread, four independent chains).
    const int whole_end = std::min(len, 8) + (len - std::min(len, 8)) / 8 * 8;
    auto one_entry = [&](int j) {
      const int owner = (j % 8) / 2;
      double& lt = state.l_thread[owner];
      if (rescale_pending[owner]) {
        lt = ar.fma32(lt, alpha, p[j]);
        rescale_pending[owner] = false;
      } else {
        lt = ar.f32(lt + p[j]);
      }
    };
    for (int j = 0; j < std::min(len, 8); ++j) one_entry(j);
    // P̄ is an fp32 value unless the recipe's exp leaves it in fp64 (multiply_scores without
    // a narrower p_format).
    const bool p_fp32 = km.scale != ScaleHandling::multiply_scores ||
                        (km.p_format && (*km.p_format == formats::fp32 || is_16bit_cast_format(km.p_format)));
    if (A::exact || !p_fp32) {
      for (int j = 8; j < whole_end; j += 8) {
        for (int owner = 0; owner < 4; ++owner) {
          double& lt = state.l_thread[owner];
          lt = ar.f32(lt + p[j + 2 * owner]);
          lt = ar.f32(lt + p[j + 2 * owner + 1]);
        }
      }
    } else if constexpr (!A::exact) {
      // The same adds in fp32: ar.f32(lt + P̄) of two fp32 values is their fp32 sum (the
      // innocuous double rounding of arith.hpp), flushed as f32 flushes.
      float lt[4];
      for (int owner = 0; owner < 4; ++owner) lt[owner] = static_cast<float>(state.l_thread[owner]);
      for (int j = 8; j < whole_end; j += 8) {
        for (int owner = 0; owner < 4; ++owner) {
          lt[owner] = ar.flush32(lt[owner] + static_cast<float>(p[j + 2 * owner]));
          lt[owner] = ar.flush32(lt[owner] + static_cast<float>(p[j + 2 * owner + 1]));
        }
      }
      for (int owner = 0; owner < 4; ++owner) state.l_thread[owner] = lt[owner];
    }
    for (int j = whole_end; j < len; ++j) one_entry(j);
    for (int owner = 0; owner < 4; ++owner)
      if (rescale_pending[owner]) state.l_thread[owner] = ar.f32(state.l_thread[owner] * alpha);
  } else if (km.row_sum == RowSumOrder::fa4_lanes) {
    // FA4 update_row_sum: fadd_reduce over the thread's whole row (arch >= 100): lane l of
    // four packed f32x2 accumulators folds columns l, l+8, ...; lane 0 starts from ℓ·α (the
    // product rounded, then the packed add), lane 1 from 0 (exact). Masked columns past `len`
    // are P̄ = 0 in the kernel: adding them changes nothing, so they are not visited.
    double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const double init = Is_first ? 0.0 : ar.f32(state.l * alpha);
    lane[0] = init;
    for (int j = 0; j < len; ++j) {
      if (j == 0) {
        lane[0] = Is_first ? p[0] : ar.f32(init + p[0]);  // (init, 0) + (P̄_0, P̄_1)
      } else {
        lane[j % 8] = j < 8 ? p[j] : ar.f32(lane[j % 8] + p[j]);
      }
    }
    for (int l = 0; l < 2; ++l) {
      lane[l] = ar.f32(lane[l] + lane[l + 2]);
      lane[l + 4] = ar.f32(lane[l + 4] + lane[l + 6]);
    }
    for (int l = 0; l < 2; ++l) lane[l] = ar.f32(lane[l] + lane[l + 4]);
    state.l = ar.f32(lane[0] + lane[1]);
  } else if (km.row_sum == RowSumOrder::ck_two_lanes) {
    // CK: lane group g folds the tile columns with (c / 8) % 2 == g from 0 (exact first add),
    // one shuffle adds the two, and ℓ = fma(α, ℓ, tile sum) (α = 0 on the first tile, ℓ = 0).
    double lane[2] = {0, 0};
    for (int j = 0; j < len; ++j) {
      double& s = lane[(j / 8) % 2];
      s = ar.f32(s + p[j]);
    }
    const double tile_sum = ar.f32(lane[0] + lane[1]);
    state.l = Is_first ? tile_sum : ar.fma32(alpha, state.l, tile_sum);
  } else if (km.row_sum == RowSumOrder::triton_quad) {
    // Per tile: each thread of the quad folds its columns from its first one (masked columns
    // are P̄ = +0 and change nothing), then shfl.bfly 2 and 1: (t0 + t2) + (t1 + t3).
    double tile_sum[4];
    quad_tile_sums(ar, p, len, tile_sum, nullptr);
    join_tile_row_sum(km, ar, Is_first, alpha, quad_butterfly(ar, tile_sum), state);
  } else if (km.row_sum == RowSumOrder::flex_decode_warps) {
    // Thread (w, t) owns column c with w = (c / 8) % 2, t = (c % 8) / 2, folded from 0 (masked
    // columns are P̄ = +0); each warp's quad (t0 + t2) + (t1 + t3), then warp 0 + warp 1.
    double part[2][4] = {};
    for (int c = 0; c < len; ++c) {
      double& s = part[(c / 8) % 2][(c % 8) / 2];
      s = ar.f32(s + p[c]);
    }
    join_tile_row_sum(km, ar, Is_first, alpha, ar.f32(quad_butterfly(ar, part[0]) + quad_butterfly(ar, part[1])),
                      state);
  } else if (km.row_sum == RowSumOrder::fa3_quad) {
    // FA3 thread_reduce_: a thread's tile sum starts from its first column of the tile,
    // then joins its running sum (0 + x is exact, so the first tile needs no case).
    double tile_sum[4];
    bool started[4];
    quad_tile_sums(ar, p, len, tile_sum, started);
    for (int owner = 0; owner < 4; ++owner)
      if (started[owner]) state.l_thread[owner] = ar.f32(state.l_thread[owner] + tile_sum[owner]);
  } else {
    int sum_len = len;
    if (km.row_sum_over_full_tile) {  // masked columns of the tile enter the reduction as zeros
      sum_len = std::min(g.nk, kv_begin + g.tiles.block_n) - kv_begin;
      std::fill(p.begin() + len, p.begin() + sum_len, 0.0);
    }
    double rs = pairwise_sum(p.data(), sum_len, [&](double a, double b) { return ar.op(km.row_sum_internal, a + b); });
    // Qiu & Yao: block_row_sums.clamp(min = EPSILON), the bound a value of the sum's format
    // (torch.clamp casts the scalar to the tensor's dtype); NaN stays NaN, as clamp keeps it.
    // A row that has seen no finite score (m = -inf) keeps ℓ = 0 and the all-masked guards
    // every model shares (O = 0, LSE empty_row_lse): their code masks with -finfo.max, never -inf,
    // and its causal rows always see the diagonal, so it never reaches such a row.
    if (km.row_sum_clamp_min > 0.0 && state.m != -kInf && !std::isnan(rs))
      rs = std::max(rs, ar.op(km.row_sum_internal, km.row_sum_clamp_min));
    // Every pairwise recipe but an MMA accumulator's first tile rescales ℓ (Triton starts
    // from l = 1, whose first α is 0).
    const bool rescale = !Is_first || km.l_init_one || km.o_acc == OAccumulator::buffer;
    if (km.l_update_fma) {
      state.l = ar.fma32(Is_first && !km.l_init_one ? 0.0 : state.l, alpha, rs);
    } else if (rescale) {
      const double scaled = ar.op(km.row_sum_internal, alpha * state.l);
      state.l = ar.to(km.row_sum_format, ar.op(km.row_sum_internal, scaled + rs));
    }
  }
}

// acc_o += P̄·V for the tile (FA2 gemm_rs with acc_o as C; +block-quant from C = 0 then
// scaled; buffer accumulators O = F(F(O·α) + F(P̄V))).
template <class A, class E, class Sink>
void gemm_pv(const KernelModel& km, const A& ar, const HeadData<E>& hd, Scratch<E>& sc, int kv_begin, int len,
             double alpha, Sink& sink) {
  const int d = hd.d;
  // The tile's P̄ against V's columns [first, first + count), side by side where the model
  // allows it (dots_against_columns); a traced row tallies their steps.
  auto columns = [&](double* acc, int first, int count, DotTrace* tally) {
    dots_against_columns(
        ar, km.pv_dot, hd, acc, sc.pc.data(), hd.v_row(kv_begin) + first, static_cast<std::size_t>(d), len, count,
        [&](int l) { return hd.vt_row(first + l) + kv_begin; }, sc.lane_values, tally);
  };
  if (km.fp8.block) {
    // +block-quant: the tile's P̄·V from C = 0, then acc = fma(tile, v_descale_j, acc) in
    // fp32 (assumed placement). Traced rows count the tile's steps; no per-key plot.
    const double vd = hd.v_descale[kv_begin / hd.kv_block_rows];
    std::fill(sc.tile_dots.begin(), sc.tile_dots.end(), 0.0);
    columns(sc.tile_dots.data(), 0, d, sink.tally_dot());
    for (int c = 0; c < d; ++c) sc.acc[c] = ar.fma32(sc.tile_dots[c], vd, sc.acc[c]);
  } else if (km.o_acc == OAccumulator::mma_c) {
    // Every column in one call, the tally adding their steps lane after lane (column order).
    // A traced row then runs its plotted column again, step by step from the same C, to record
    // those steps (the chain is the same computation, so it ends on the same D).
    const int plotted = Sink::enabled ? sink.plotted_feature(d) : -1;
    const double plotted_c = plotted >= 0 ? sc.acc[static_cast<std::size_t>(plotted)] : 0.0;
    columns(sc.acc.data(), 0, d, sink.tally_dot());
    if constexpr (Sink::enabled) {
      if (plotted >= 0)
        sc.acc[static_cast<std::size_t>(plotted)] =
            sink.traced_mma_column(km, ar, plotted_c, sc.pc.data(), hd.vt_row(plotted) + kv_begin, kv_begin, len);
    }
  } else {
    // P̄V from C = 0 for every column (untraced: a traced row records the buffer update).
    std::fill(sc.tile_dots.begin(), sc.tile_dots.end(), 0.0);
    columns(sc.tile_dots.data(), 0, d, nullptr);
    for (int c = 0; c < d; ++c) {
      const double pv_exact = sc.tile_dots[c];
      const double scaled = ar.op(km.o_buffer_format, sc.acc[c] * alpha);
      if constexpr (Sink::enabled) {
        sc.acc[c] = sink.traced_buffer_update(km, ar, scaled, pv_exact, sc.pc.data(), hd.vt_row(c) + kv_begin, kv_begin,
                                              len, alpha, c);
      } else {
        const double pv = ar.to(km.pv_result_format, pv_exact);
        sc.acc[c] = ar.op(km.o_buffer_format, scaled + pv);
      }
    }
  }
}

// normalize_softmax_lse: quad_allreduce_ of ℓ, O = acc_o normalised by ℓ and cast once into
// the output format, and the row's LSE, each as the recipe's kernel forms them.
template <class A, class E, class Sink>
void normalize_softmax_lse(const KernelModel& km, const A& ar, const HeadData<E>& hd, const ScaleConstants& k,
                           SoftmaxState& state, const std::vector<double>& acc, double* o_out, double* o_pre_out,
                           RowStats& st, std::uint64_t o_position, const RunOptions& opt, Sink& sink) {
  const int d = hd.d;
  const double* l_thread = state.l_thread;
  if (quad_row_sum(km)) {
    // quad_allreduce_: shfl_xor 2 then 1.
    state.l = quad_butterfly(ar, l_thread);
  }
  const double m = state.m, l = state.l;
  // m == -inf: no score seen (a row above the causal corner; Triton's ℓ starts at 1), or every
  // score -inf. A NaN ℓ counts as empty only where the source guards it (nan_row_sum_is_empty).
  const bool empty = nan_row_sum_is_empty(km.lse) ? l == 0.0 || std::isnan(l) || m == -kInf
                                                  : l == 0.0 || (m == -kInf && !state.saw_nan_score);
  // FA3 finalize(v_descale): one per-row output scale, fp32(inv_sum * v_descale).
  const double fa3_out_scale =
      km.normalisation != Normalisation::fa3_finalize
          ? 0.0
          : ar.f32((empty ? 0.0 : ar.rcp(l)) * (km.fp8.enabled && !km.fp8.block ? hd.v_descale[0] : 1.0));
  // ℓ's reciprocal (rcp_multiply) once for the row where the rcp model is a pure function (the
  // correct one): a division per column otherwise. Table and oracle models count their
  // fallbacks per evaluation, so they keep one evaluation per column.
  const bool rcp_once = A::exact || ar.km->sfu.rcp->kind() == SfuKind::correct;
  const double inv_l = km.normalisation == Normalisation::rcp_multiply && !empty && rcp_once ? ar.rcp(l) : 1.0;
  const RoundingSpec out_spec = final_cast_spec(km, opt);
  const std::optional<Format> out_format =
      km.o_acc == OAccumulator::mma_c ? std::optional<Format>(km.output) : km.o_buffer_format;
  // Untraced, RNE into bf16 or fp16: the row's cast after the loop, by
  // round_fp32_values_into_16bit (ar.to per column where some value is not an fp32 one).
  const bool batched_cast =
      !A::exact && !Sink::enabled && km.o_round == RoundingMode::rne && is_16bit_cast_format(out_format);
  for (int c = 0; c < d; ++c) {
    double pre;
    switch (km.normalisation) {
      case Normalisation::rcp_multiply:
        pre = ar.f32(acc[c] * (empty ? 1.0 : rcp_once ? inv_l : ar.rcp(l)));
        break;
      case Normalisation::ieee_reciprocal:
        pre = ar.f32(acc[c] * (empty ? 1.0 : ar.f32(1.0 / l)));
        break;
      case Normalisation::fa3_finalize:
        pre = ar.f32(acc[c] * fa3_out_scale);
        break;
      case Normalisation::divide_fp32:
        pre = empty ? acc[c] : ar.f32(acc[c] / l);
        break;
      case Normalisation::divide_in_format:
      default:
        pre = empty ? acc[c] : ar.op(formats::fp32, acc[c] / l);
        break;
    }
    // The final cast: one rounding of the fp32 value (buffer models: of the division's
    // fp32 opmath result) into the output format.
    const bool use_pre_exact = km.normalisation == Normalisation::divide_in_format && !km.o_buffer_format;
    if (use_pre_exact) pre = empty ? acc[c] : acc[c] / l;  // fp64 buffers
    o_pre_out[c] = pre;
    const std::uint64_t position = o_position + static_cast<std::uint64_t>(c);
    if constexpr (Sink::enabled) {
      o_out[c] = sink.traced_o_cast(ar, out_format, pre, out_spec, position);
    } else if (km.o_round != RoundingMode::rne && !A::exact) {
      o_out[c] = ar.to_traced(out_format, pre, nullptr, out_spec, position);
    } else if (!batched_cast) {
      o_out[c] = ar.to(out_format, pre);
    }
  }
  // The plain RNE cast of the row at once, where the rows above left it (batched_cast).
  if (batched_cast && !round_fp32_values_into_16bit(*out_format, o_pre_out, o_out, d))
    for (int c = 0; c < d; ++c) o_out[c] = ar.to(out_format, o_pre_out[c]);
  const double no_key_lse = empty_row_lse(km.lse);
  switch (km.lse) {
    case LseFormula::fa2:
      st.lse = empty ? no_key_lse : ar.fma32(m, k.scale_f, ar.fast_log(l));
      st.lse_kernel = st.lse;
      break;
    case LseFormula::fa3: {
      // finalize: sum *= 2^-Max_offset (exact); max*(scale_log2*ln2) + __logf(sum) contracted (assumed).
      const double ln2 = A::exact ? std::numbers::ln2 : static_cast<double>(static_cast<float>(std::numbers::ln2));
      const double sum = std::ldexp(l, -km.fp8.p_max_offset);
      st.lse = empty ? no_key_lse : ar.fma32(m, ar.f32(k.scale_log2 * ln2), ar.fast_log(sum));
      st.lse_kernel = st.lse;
      break;
    }
    case LseFormula::log2_units:
    case LseFormula::log2_libdevice:
      st.lse_kernel =
          empty ? no_key_lse : ar.f32(m + (km.lse == LseFormula::log2_libdevice ? ar.libdevice_lg2(l) : ar.lg2(l)));
      if (km.lse == LseFormula::log2_libdevice) {
        st.lse = empty ? no_key_lse : flex_returned_lse(ar, st.lse_kernel);  // as FlexAttention returns it
      } else {
        st.lse = empty ? no_key_lse : ar.f32(st.lse_kernel * std::numbers::ln2);
      }
      break;
    case LseFormula::fa4: {
      // correction_epilogue: (row_max*scale_log2 + (lg2(row_sum) - max_offset)) * ln2 (8 for fp8).
      const double ln2 = A::exact ? std::numbers::ln2 : static_cast<double>(static_cast<float>(std::numbers::ln2));
      const double log_sum = ar.f32(ar.lg2(l) - km.fp8.p_max_offset);
      st.lse = empty ? no_key_lse : ar.f32(ar.fma32(m, k.scale_log2, log_sum) * ln2);
      st.lse_kernel = st.lse;
      break;
    }
    case LseFormula::ck_fp64: {
      // lse = m * scale_s / C_LOG2E + log(l): fp32(m·scale_log2), then a double division by
      // log2 e and a double add of logf(ℓ), converted to float.
      if (empty) {
        st.lse = no_key_lse;
      } else if constexpr (A::exact) {
        st.lse = m * k.scale_log2 / std::numbers::log2e + std::log(l);
      } else {
        const double scaled_max = ar.f32(m * k.scale_log2);
        st.lse = static_cast<float>(scaled_max / std::numbers::log2e + ar.opmath_log(l));
      }
      st.lse_kernel = st.lse;
      break;
    }
    case LseFormula::natural:
      st.lse = empty ? no_key_lse : ar.op(km.lse_format, m + ar.opmath_log(l));
      st.lse_kernel = st.lse;
      break;
    case LseFormula::cudnn_stats: {
      const double ln2 = A::exact ? std::numbers::ln2 : static_cast<double>(static_cast<float>(std::numbers::ln2));
      st.lse = empty ? no_key_lse : ar.fma32(m, ln2, ar.fast_log(l));
      st.lse_kernel = st.lse;
      break;
    }
  }
  // What the backward reads of a row that saw nothing is the engine's guard, not the value
  // written: +inf, so P = exp2(S - inf) = 0 on any key it visits (scores of -inf).
  if (empty) st.lse_kernel = kInf;
  st.m = m;
  st.l = l;
}

// The P̄ cast: pc[j] = ar.to(km.p_cast, p[j]); into bf16 or fp16 by round_fp32_values_into_16bit
// (every P̄ is an fp32 value: it comes out of an fp32 exp), from the tile's ex2 results as floats
// where scale_apply_exp2 left P̄ there (p32: sc.ex2_values, p[j] = p32[j]; null otherwise).
template <class A, class E>
void cast_p(const KernelModel& km, const A& ar, Scratch<E>& sc, int len, const float* p32) {
  if constexpr (!A::exact && std::is_same_v<E, float>) {
    if (is_16bit_cast_format(km.p_cast)) {
      if (p32) {
        round_fp32_values_into_16bit(*km.p_cast, p32, sc.pc.data(), len);
        return;
      }
      if (round_fp32_values_into_16bit(*km.p_cast, sc.p.data(), sc.pc.data(), len)) return;
    }
  }
  if constexpr (!A::exact) {
    if (km.fp8.enabled && km.p_cast) {
      // The fp8 kernels cast P̄ by cvt.rn.satfinite (PTX's only conversion to e4m3/e5m2): a P̄
      // beyond the format's largest finite value saturates to it (+lazy-rescale:T with
      // Max_offset + T above log2 of that value, FA4's fp8 bug before flash-attention#2717).
      RoundingSpec saturating;
      saturating.overflow = OverflowPolicy::satfinite;
      for (int j = 0; j < len; ++j) sc.pc[j] = static_cast<E>(round_into(*km.p_cast, sc.p[j], saturating));
      return;
    }
  }
  for (int j = 0; j < len; ++j) sc.pc[j] = static_cast<E>(ar.to(km.p_cast, sc.p[j]));
}

// One query row's registers across its KV tiles (FA2 keeps them per row: max, ℓ and acc_o,
// which lives in Scratch::acc while the row runs a tile), and the tiles it visits.
template <class E>
struct OnlineRow {
  int row = 0;
  int visible = 0;  // keys at or left of the causal diagonal (all keys without causal)
  int nk = 0;       // keys the loop runs over: visible, or every key with +visit-masked-tiles
  int tiles = 0;
  int first_tile = 0;  // the tiles visited are first_tile .. first_tile + tiles - 1 (+splitkv: a split's)
  bool masked_in_loop = false;
  const E* q = nullptr;
  SoftmaxState state;
};

template <class A, class E>
OnlineRow<E> begin_row(const KernelModel& km, const HeadData<E>& hd, const Geometry& g, int row) {
  OnlineRow<E> r;
  r.row = row;
  // +visit-masked-tiles: the loop runs over every key, the causal-masked ones as scores of
  // -(the input format's largest finite value), as Qiu & Yao's masked_fill_ leaves them.
  r.visible = visible_keys(g, row);
  r.masked_in_loop = km.visit_masked_tiles && g.causal;
  // A row above the causal corner (nq > nk) sees no key: it visits no tile, masked or not.
  r.nk = r.masked_in_loop && r.visible > 0 ? g.nk : r.visible;
  r.tiles = (r.nk + g.tiles.block_n - 1) / g.tiles.block_n;
  r.q = hd.q_row(row);
  r.state.l = km.l_init_one ? 1.0 : 0.0;
  return r;
}

// The keys [kb, ke) of tile `it` (in the row's visiting order) of row r; len = ke - kb.
struct TileSpan {
  int kb = 0, ke = 0, len = 0;
};
template <class E>
TileSpan tile_span(const KernelModel& km, const Geometry& g, const OnlineRow<E>& r, int it) {
  const int bn = g.tiles.block_n;
  int t = it;
  if (km.kv_order == KvOrder::last_to_first) {
    t = r.tiles - 1 - it;
  } else if (km.kv_order == KvOrder::partial_then_full) {
    // The row block's partial tiles the row sees (those after its full ones), then the full ones.
    const int full = flex_full_blocks(g, r.row / g.tiles.block_m * g.tiles.block_m, r.tiles);
    const int partial = r.tiles - full;
    t = it < partial ? full + it : it - partial;
  }
  t += r.first_tile;
  const int kb = t * bn, ke = std::min(r.nk, kb + bn);
  return {kb, ke, ke - kb};
}

// Tile `it` of row r from its scores in sc.s (tile_scores' values) to P̄ in sc.pc: masking, the
// max, the rescale of acc_o (sc.acc) and ℓ, exp2 and the P̄ cast. Returns the rescale factor α
// that gemm_pv takes.
template <class A, class E, class Sink>
double tile_softmax(const KernelModel& km, const A& ar, const HeadData<E>& hd, const Geometry& g,
                    const ScaleConstants& k, OnlineRow<E>& r, int it, const TileSpan& span, Scratch<E>& sc,
                    Sink& sink) {
  SoftmaxState& state = r.state;
  const bool Is_first = it == 0;
  const int kb = span.kb, len = span.len;
  if (r.masked_in_loop) {
    const double masked_score = -to_double(km.input, km.input.max_finite_pattern());
    for (int j = std::max(r.visible - kb, 0); j < len; ++j) sc.s[j] = masked_score;
  }
  if (km.fp8.block) {
    // +block-quant: this (Q block, KV block)'s descale on the fp32 scores (assumed placement).
    const double qk = ar.f32(hd.q_descale[r.row / hd.q_block_rows] * hd.k_descale[kb / hd.kv_block_rows]);
    for (int j = 0; j < len; ++j) sc.s[j] = ar.f32(sc.s[j] * qk);
  }

  const double m_old = state.m;
  state.m = reduce_max(km, ar, k, sc.s.data(), len, m_old, sink.repeated_max());
  if (state.m == -kInf && !state.saw_nan_score && !nan_row_sum_is_empty(km.lse))
    state.saw_nan_score = std::any_of(sc.s.begin(), sc.s.begin() + len, [](double x) { return std::isnan(x); });
  const bool lazy = keep_old_max(km, ar, k, Is_first, m_old, state.m);
  if (lazy) state.m = m_old;
  const double alpha = lazy ? 1.0 : rescale_factor(km, ar, k, m_old, state.m);  // FA4: acc_scale = 1.0
  softmax_rescale_o(km, ar, Is_first, alpha, sc.acc, state, sink);
  scale_apply_exp2(km, ar, k, g, r.row, kb, state.m, sc.s.data(), sc.p.data(), len, sc.ex2_args.data(),
                   sc.ex2_values.data());
  reduce_sum(km, ar, g, Is_first, alpha, kb, sc.p, len, state);

  // P̄ cast for the P·V matmul (convert_type<Element>, after the sum: ℓ used the unrounded P̄).
  cast_p(km, ar, sc, len, exp2_over_tile<A>(km, g) ? sc.ex2_values.data() : nullptr);
  sink.on_p_cast(sc.pc.data(), len, kb);
  return alpha;
}

// Tile `it` (in the row's visiting order) of row r: its scores, softmax steps and P̄·V into
// sc.acc, the row's accumulator.
template <class A, class E, class Sink>
void online_tile(const KernelModel& km, const A& ar, const HeadData<E>& hd, const Geometry& g, const ScaleConstants& k,
                 OnlineRow<E>& r, int it, Scratch<E>& sc, Sink& sink) {
  const TileSpan span = tile_span(km, g, r, it);
  sink.on_tile_begin();
  // S = Q·Kᵀ for the tile; columns past the row's last visible key are masked (not computed).
  tile_scores(km, ar, k, hd, r.q, span.kb, span.len, sc.s.data(), sc.lane_values);
  const double alpha = tile_softmax(km, ar, hd, g, k, r, it, span, sc, sink);
  gemm_pv(km, ar, hd, sc, span.kb, span.len, alpha, sink);
  sink.on_tile_end(km, it, span.kb, span.ke, r.state.m, r.state.l, r.state.l_thread, sc.p.data(), sc.acc.data(),
                   span.len, g.d);
}

// Tile `it` of the untraced rows rows[first, last), which all visit the same keys `span`: the
// steps of online_tile, with the scores of all the rows in one call of the dot kernel, and
// their P̄·V too where gemm_pv is one plain chain from acc_o (acc_o as C: mma_c, no block
// descale). The rows are independent, so the bits are online_tile's; what changes is that the
// kernel's per-call set-up is paid once per tile instead of once per row.
template <class A, class E>
void online_tile_rows(const KernelModel& km, const A& ar, const HeadData<E>& hd, const Geometry& g,
                      const ScaleConstants& k, std::vector<OnlineRow<E>>& rows, int first, int last, int it,
                      const TileSpan& span, Scratch<E>& sc, NullTraceSink& sink) {
  const int n = last - first, d = g.d, len = span.len;
  const auto un = static_cast<std::size_t>(n), ud = static_cast<std::size_t>(d), ulen = static_cast<std::size_t>(len);
  // Q's rows of the block: in place where they are consecutive (the untraced rows usually are).
  const E* q = rows[static_cast<std::size_t>(first)].q;
  bool consecutive = true;
  for (int i = first + 1; i < last; ++i)
    consecutive = consecutive && rows[static_cast<std::size_t>(i)].row == rows[static_cast<std::size_t>(i) - 1].row + 1;
  if (!consecutive) {
    sc.block_q.resize(un * ud);
    for (int i = first; i < last; ++i)
      std::copy(rows[static_cast<std::size_t>(i)].q, rows[static_cast<std::size_t>(i)].q + d,
                sc.block_q.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(i - first) * ud));
    q = sc.block_q.data();
  }
  sc.block_scores.assign(un * ulen, 0.0f);
  rows_against_columns(ar, km.score_dot, hd, sc.block_scores.data(), ulen, q, ud, n, hd.kt_row(0) + span.kb,
                       static_cast<std::size_t>(hd.nk), d, len);
  const bool pv_together = rows_side_by_side<A, E>(km.pv_dot) && km.o_acc == OAccumulator::mma_c && !km.fp8.block;
  if (pv_together) {
    sc.block_pc.resize(un * ulen);
    sc.block_acc.resize(un * ud);
  }
  for (int i = first; i < last; ++i) {
    OnlineRow<E>& r = rows[static_cast<std::size_t>(i)];
    const std::size_t at = static_cast<std::size_t>(i - first);
    std::swap(sc.acc, sc.row_acc[static_cast<std::size_t>(i)]);
    sink.on_tile_begin();
    for (int j = 0; j < len; ++j)
      sc.s[static_cast<std::size_t>(j)] = sc.block_scores[at * ulen + static_cast<std::size_t>(j)];
    scores_of_dots(km, ar, k, sc.s.data(), len);
    const double alpha = tile_softmax(km, ar, hd, g, k, r, it, span, sc, sink);
    if (pv_together) {
      // The accumulators hold fp32 (or fp16) values: exact as float.
      std::copy(sc.pc.begin(), sc.pc.begin() + len, sc.block_pc.begin() + static_cast<std::ptrdiff_t>(at * ulen));
      for (int c = 0; c < d; ++c)
        sc.block_acc[at * ud + static_cast<std::size_t>(c)] = static_cast<float>(sc.acc[static_cast<std::size_t>(c)]);
    } else {
      gemm_pv(km, ar, hd, sc, span.kb, len, alpha, sink);
    }
    sink.on_tile_end(km, it, span.kb, span.ke, r.state.m, r.state.l, r.state.l_thread, sc.p.data(), sc.acc.data(), len,
                     d);
    std::swap(sc.acc, sc.row_acc[static_cast<std::size_t>(i)]);
  }
  if (!pv_together) return;
  rows_against_columns(ar, km.pv_dot, hd, sc.block_acc.data(), ud, sc.block_pc.data(), ulen, n, hd.v_row(span.kb), ud,
                       len, d);
  for (int i = first; i < last; ++i) {
    std::vector<double>& acc = sc.row_acc[static_cast<std::size_t>(i)];
    const std::size_t at = static_cast<std::size_t>(i - first);
    for (int c = 0; c < d; ++c) acc[static_cast<std::size_t>(c)] = sc.block_acc[at * ud + static_cast<std::size_t>(c)];
  }
}

// The loop, over one query row's KV tiles.
template <class A, class E, class Sink>
void online_forward_loop(const KernelModel& km, const A& ar, const HeadData<E>& hd, const Geometry& g,
                         const OnlineRowOutput& out, Scratch<E>& sc, const RunOptions& opt, Sink& sink) {
  const ScaleConstants k = head_scale_constants(km, ar, g, hd);
  OnlineRow<E> r = begin_row<A>(km, hd, g, out.row);
  std::fill(sc.acc.begin(), sc.acc.end(), 0.0);
  sink.on_row_begin(km, g.tiles.block_n, r.tiles, r.nk, g.d);
  for (int it = 0; it < r.tiles; ++it) online_tile(km, ar, hd, g, k, r, it, sc, sink);
  normalize_softmax_lse(km, ar, hd, k, r.state, sc.acc, out.o, out.o_pre, *out.stats, out.o_position, opt, sink);
}

// +splitkv (attention/splitkv.hpp; docs/DESIGN.md §6 "Split-KV"): one query row as FA2's split
// kernel and combine kernel compute it. Split s visits the global KV tiles [s*per, min((s+1)*per,
// n_blocks)), per = ceil(n_blocks / num_splits) (flash_fwd_kernel.h:535-539), cut at the row's
// last visible tile: the tiles between it and its row block's causal limit hold only masked
// scores for this row, which leave max, l and acc_o as they are (as in the regular kernel); a
// split that sees no key of the row writes O_accum = 0 and LSE_accum = -inf (544-581; a split
// whose tiles are all masked for the row ends with l = 0, the same values). Each split runs the
// same tile steps from a fresh state and normalize_softmax_lse (Split=true: its O is kept in
// fp32, O_accum, and an empty row's LSE is -inf, not +inf); the combine joins them. One split is
// PyTorch's regular kernel (run_mha_fwd runs it when num_splits <= 1): its O and LSE directly.
template <class A, class E>
void splitkv_forward_row(const KernelModel& km, const A& ar, const HeadData<E>& hd, const Geometry& g,
                         const ScaleConstants& k, const OnlineRowOutput& out, Scratch<E>& sc, const RunOptions& opt) {
  NullTraceSink sink;
  const int splits = g.num_splits, d = g.d, bn = g.tiles.block_n;
  const int n_blocks = (g.nk + bn - 1) / bn;
  const int per = (n_blocks + splits - 1) / splits;
  std::vector<double> lse(static_cast<std::size_t>(splits)), o_accum(static_cast<std::size_t>(splits) * d);
  std::vector<double> o_cast(static_cast<std::size_t>(d));
  for (int s = 0; s < splits; ++s) {
    OnlineRow<E> r = begin_row<A>(km, hd, g, out.row);
    const int lo = s * per, hi = std::min({(s + 1) * per, n_blocks, r.tiles});
    r.first_tile = lo;
    r.tiles = std::max(0, hi - lo);
    std::fill(sc.acc.begin(), sc.acc.end(), 0.0);
    for (int it = 0; it < r.tiles; ++it) online_tile(km, ar, hd, g, k, r, it, sc, sink);
    if (splits == 1) {  // the regular kernel: O cast and LSE as without +splitkv
      normalize_softmax_lse(km, ar, hd, k, r.state, sc.acc, out.o, out.o_pre, *out.stats, out.o_position, opt, sink);
      return;
    }
    RowStats st;
    double* o_s = o_accum.data() + static_cast<std::size_t>(s) * d;
    normalize_softmax_lse(km, ar, hd, k, r.state, sc.acc, o_cast.data(), o_s, st, out.o_position, opt, sink);
    const bool empty = st.l == 0.0 || std::isnan(st.l) || st.m == -kInf;
    lse[static_cast<std::size_t>(s)] = empty ? -kInf : st.lse;
  }
  const SplitKvCombined c = splitkv_combine_row(km, ar, d, splits, lse.data(), o_accum.data());
  // convert_type<Element>(tOrO) (flash_fwd_kernel.h:1273, at 0251105a): one rounding into the output dtype.
  const RoundingSpec out_spec = final_cast_spec(km, opt);
  for (int col = 0; col < d; ++col) {
    const double pre = c.o_pre[static_cast<std::size_t>(col)];
    out.o_pre[col] = pre;
    out.o[col] = km.o_round != RoundingMode::rne && !A::exact
                     ? ar.to_traced(km.output, pre, nullptr, out_spec, out.o_position + static_cast<std::uint64_t>(col))
                     : ar.to(km.output, pre);
  }
  out.stats->lse = out.stats->lse_kernel = c.lse;
  out.stats->m = c.lse_max;  // the combine's; the FA2 backward reads only the LSE
  out.stats->l = c.lse_sum;
}

// FlexAttention's decoding kernel under a causal block mask (Geometry::flex_splits > 0), one
// query row: the template's splits, then Inductor's combine. ASSUMED until a capture with a
// mask replays (gpu/capture_paths.py plans two).
// - Which key tiles split t visits (flex_decode.py.jinja, gpu/analysis/flex/dec.py
//   decode_split_ranges): create_block_mask pads the one sparse q block (fewer than 128 rows)
//   with False rows, so no block is full and the kv_num_blocks sparse blocks some row sees are
//   all partial, in ascending order; HAS_FULL_BLOCKS holds, so TILE_KV_OG = cdiv(nk, SPLIT_KV),
//   rounded up to whole tiles: split t takes tiles [t*per, (t+1)*per) cut at
//   min(kv_num_blocks * 128 / block_n, cdiv(nk, block_n)). Each split runs the row's tiles there
//   from m = -inf, l = 0, acc = 0 (tiles past the row's last visible key hold only masked
//   scores, which leave them as they are) and stores m (log2 units), l and acc unnormalised.
// - The combine, as compiled for 132 splits (gpu/analysis/flex/FINDINGS.md "Split combine
//   order", PTX lines there): g_M = max m_s; alpha_s = ex2(g_M == -inf ? 0 : fp32(m_s - g_M));
//   per half h of 66 splits, thread r < 64 chains fma(alpha, l) over splits 66h+r and, for r < 2,
//   66h+r+64 from +0, each warp of 32 joins by an xor butterfly, H_h = W_0 + W_1, g_L = H_0 + H_1;
//   O per column likewise over split lanes k < 32 (splits 66h+k, +32, +64 while in the half),
//   warps of 8 lanes by butterfly, P_h = (W_0 + W_2) + (W_1 + W_3), O = fp32(P_0 + P_1) times
//   rcp of (g_M == -inf ? 1 : g_L) (div.full); M = fp32(__nv_log2f(that) + g_M).
template <class A, class E>
void flex_decode_split_row(const KernelModel& km, const A& ar, const HeadData<E>& hd, const Geometry& g,
                           const ScaleConstants& k, const OnlineRowOutput& out, Scratch<E>& sc, const RunOptions& opt) {
  NullTraceSink sink;
  const int splits = g.flex_splits, d = g.d, bn = g.tiles.block_n;
  if (splits != kFlexDecodeModelledSplits)
    throw std::logic_error("flex_decode_split_row: the combine is read for 132 splits only");
  const int n_tiles = std::max((g.nk + bn - 1) / bn, 1);
  const int kv_blocks = (visible_keys(g, g.nq - 1) + kFlexSparseBlock - 1) / kFlexSparseBlock;
  const int last_valid = std::min(kv_blocks * (kFlexSparseBlock / bn), n_tiles);
  const int tile_kv = (g.nk + splits - 1) / splits;
  const int per = (tile_kv + bn - 1) / bn;
  std::vector<double> m(static_cast<std::size_t>(splits), -kInf), l(static_cast<std::size_t>(splits), 0.0);
  std::vector<double> acc(static_cast<std::size_t>(splits) * d, 0.0);
  for (int s = 0; s < splits; ++s) {
    OnlineRow<E> r = begin_row<A>(km, hd, g, out.row);
    const int lo = s * per, hi = std::min({(s + 1) * per, last_valid, r.tiles});
    if (hi <= lo) continue;  // an empty split: m = -inf, l = 0, acc = 0
    r.first_tile = lo;
    r.tiles = hi - lo;
    std::fill(sc.acc.begin(), sc.acc.end(), 0.0);
    for (int it = 0; it < r.tiles; ++it) online_tile(km, ar, hd, g, k, r, it, sc, sink);
    m[static_cast<std::size_t>(s)] = r.state.m;
    l[static_cast<std::size_t>(s)] = r.state.l;
    std::copy(sc.acc.begin(), sc.acc.begin() + d, acc.begin() + static_cast<std::ptrdiff_t>(s) * d);
  }

  constexpr int half = kFlexDecodeModelledSplits / 2;  // 66
  const double g_m = *std::max_element(m.begin(), m.end());
  std::vector<double> alpha(static_cast<std::size_t>(splits));
  for (int s = 0; s < splits; ++s)
    alpha[static_cast<std::size_t>(s)] = ar.ex2(g_m == -kInf ? 0.0 : ar.f32(m[static_cast<std::size_t>(s)] - g_m));
  const auto add = [&](double a, double b) { return ar.f32(a + b); };
  double halves[2];
  for (int h = 0; h < 2; ++h) {
    double v[64];
    for (int r = 0; r < 64; ++r) {
      const int s = half * h + r;
      v[r] = ar.fma32(alpha[static_cast<std::size_t>(s)], l[static_cast<std::size_t>(s)], 0.0);
      if (r + 64 < half)
        v[r] = ar.fma32(alpha[static_cast<std::size_t>(s) + 64], l[static_cast<std::size_t>(s) + 64], v[r]);
    }
    halves[h] = add(xor_butterfly(v, 32, add), xor_butterfly(v + 32, 32, add));
  }
  const double g_l = add(halves[0], halves[1]);
  const bool empty = g_m == -kInf;
  const double g_l_or_one = empty ? 1.0 : g_l;
  const double inv_l = ar.rcp(g_l_or_one);
  const RoundingSpec out_spec = final_cast_spec(km, opt);
  for (int c = 0; c < d; ++c) {
    double parts[2];
    for (int h = 0; h < 2; ++h) {
      double y[32];
      for (int lane = 0; lane < 32; ++lane) {
        double sum = 0.0;
        for (int s = half * h + lane; s < half * (h + 1); s += 32)
          sum = ar.fma32(alpha[static_cast<std::size_t>(s)], acc[static_cast<std::size_t>(s) * d + c], sum);
        y[lane] = sum;
      }
      double warp[4];
      for (int w = 0; w < 4; ++w) warp[w] = xor_butterfly(y + 8 * w, 8, add);
      parts[h] = add(add(warp[0], warp[2]), add(warp[1], warp[3]));
    }
    const double pre = ar.f32(add(parts[0], parts[1]) * inv_l);
    out.o_pre[c] = pre;
    out.o[c] = km.o_round != RoundingMode::rne && !A::exact
                   ? ar.to_traced(km.output, pre, nullptr, out_spec, out.o_position + static_cast<std::uint64_t>(c))
                   : ar.to(km.output, pre);
  }
  RowStats& st = *out.stats;
  st.m = g_m;
  st.l = g_l;
  if (empty) {
    st.lse = empty_row_lse(km.lse);
    st.lse_kernel = kInf;  // the backward's guard (normalize_softmax_lse)
  } else {
    st.lse_kernel = ar.f32(ar.libdevice_lg2(g_l_or_one) + g_m);
    st.lse = flex_returned_lse(ar, st.lse_kernel);
  }
}

}  // namespace

template <class A, class E>
void online_forward_row(const KernelModel& km, const A& ar, const HeadData<E>& hd, const Geometry& g,
                        const OnlineRowOutput& out, Scratch<E>& sc, const RunOptions& opt, RowTrace* trace) {
  if (trace) {
    TileTraceSink sink(trace);
    online_forward_loop(km, ar, hd, g, out, sc, opt, sink);
  } else {
    NullTraceSink sink;
    online_forward_loop(km, ar, hd, g, out, sc, opt, sink);
  }
}

template <class A, class E>
void online_forward_rows(const KernelModel& km, const A& ar, const HeadData<E>& hd, const Geometry& g,
                         const OnlineRowOutput* outs, int count, Scratch<E>& sc, const RunOptions& opt) {
  if (count <= 0) return;
  const ScaleConstants k = head_scale_constants(km, ar, g, hd);
  if (g.num_splits > 0) {
    for (int i = 0; i < count; ++i) splitkv_forward_row(km, ar, hd, g, k, outs[i], sc, opt);
    return;
  }
  if (g.flex_splits > 0) {
    for (int i = 0; i < count; ++i) flex_decode_split_row(km, ar, hd, g, k, outs[i], sc, opt);
    return;
  }
  NullTraceSink sink;
  std::vector<OnlineRow<E>> rows;
  rows.reserve(static_cast<std::size_t>(count));
  int most_tiles = 0;
  for (int i = 0; i < count; ++i) {
    rows.push_back(begin_row<A>(km, hd, g, outs[i].row));
    most_tiles = std::max(most_tiles, rows.back().tiles);
  }
  // Each row's acc_o, swapped into sc.acc while the row runs a tile.
  sc.row_acc.resize(static_cast<std::size_t>(count));
  for (auto& acc : sc.row_acc) acc.assign(static_cast<std::size_t>(g.d), 0.0);
  // Tile index outer, rows inner: the rows of the block visit their it-th tiles one after
  // another, so a tile's K and V (and their panels) are read from memory once per block of
  // rows instead of once per row. The rows are independent (FA2's per-row registers), so the
  // order in which their steps interleave cannot change a bit.
  // Where the score dots run for a block of rows at once, each run of rows that visit the same
  // keys at step `it` (all rows without causal masking) goes through online_tile_rows.
  const bool together = rows_side_by_side<A, E>(km.score_dot);
  for (int it = 0; it < most_tiles; ++it) {
    for (int i = 0; i < count;) {
      OnlineRow<E>& r = rows[static_cast<std::size_t>(i)];
      if (it >= r.tiles) {
        ++i;
        continue;
      }
      if (together) {
        const TileSpan span = tile_span(km, g, r, it);
        int last = i + 1;
        while (last < count && it < rows[static_cast<std::size_t>(last)].tiles) {
          const TileSpan next = tile_span(km, g, rows[static_cast<std::size_t>(last)], it);
          if (next.kb != span.kb || next.len != span.len) break;
          ++last;
        }
        online_tile_rows(km, ar, hd, g, k, rows, i, last, it, span, sc, sink);
        i = last;
        continue;
      }
      std::swap(sc.acc, sc.row_acc[static_cast<std::size_t>(i)]);
      online_tile(km, ar, hd, g, k, r, it, sc, sink);
      std::swap(sc.acc, sc.row_acc[static_cast<std::size_t>(i)]);
      ++i;
    }
  }
  for (int i = 0; i < count; ++i) {
    const OnlineRowOutput& out = outs[i];
    normalize_softmax_lse(km, ar, hd, k, rows[static_cast<std::size_t>(i)].state,
                          sc.row_acc[static_cast<std::size_t>(i)], out.o, out.o_pre, *out.stats, out.o_position, opt,
                          sink);
  }
}

#define FB_ATTN_INSTANTIATE(A, E)                                                                            \
  template void online_forward_row<A, E>(const KernelModel&, const A&, const HeadData<E>&, const Geometry&,  \
                                         const OnlineRowOutput&, Scratch<E>&, const RunOptions&, RowTrace*); \
  template void online_forward_rows<A, E>(const KernelModel&, const A&, const HeadData<E>&, const Geometry&, \
                                          const OnlineRowOutput*, int, Scratch<E>&, const RunOptions&);
FB_ATTN_FOR_EACH_ARITH(FB_ATTN_INSTANTIATE)
#undef FB_ATTN_INSTANTIATE

}  // namespace fb::attn::detail
