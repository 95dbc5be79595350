// attention/trace_sink.hpp: where the online forward reports a traced row's story (internal
// to attention/).
//
// Contract: attention/online_forward.cpp runs its loop over a Sink type with these hooks,
// called in this order per row:
//   on_row_begin, then per KV tile: on_tile_begin, repeated_max (a pointer reduce_max fills
//   or nullptr), on_rescale (acc_o *= α of MMA-accumulator models), on_p_cast, the P·V steps,
//   on_tile_end; then traced_o_cast per feature.
// - NullTraceSink (untraced rows): `enabled` is false and every hook is empty or returns
//   nullptr, so the untraced loop compiles to the plain steps; the loop tests
//   `Sink::enabled` (if constexpr) where a traced step must run differently.
// - TileTraceSink (rows of RunOptions::tracer): fills a RowTrace exactly as documented in
//   attention/attention.hpp (TileRecord per tile, the P·V rounding events of the plot
//   feature, the final cast's events). Its traced_* steps compute the SAME value as the
//   untraced step (the same roundings, in the same order) while recording: the per-key plot
//   splits the plot feature's MMA chain into its fused steps (the chain is the same
//   computation), and buffer accumulators round through the traced rounding routine.
// The tracer needs the hardware arithmetic (run_attention refuses ExactArith with a tracer).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>

#include "attention/attention.hpp"
#include "attention/arith.hpp"
#include "attention/kernel_models.hpp"
#include "emu/dot/dot_model.hpp"

namespace fb::attn::detail {

// The products a traced P·V column plots as one step: a +promote group, else the dot model's
// own step when it records its steps (NVIDIA's presets), else the whole tile in one call (the
// AMD models step inside their own call and record none; the non-tensor-core dots have no
// steps).
inline int traced_step_size(const DotSpec& pv_dot, int len) {
  if (pv_dot.promote_every > 0) return pv_dot.promote_every;
  if (pv_dot.kind == DotKind::tensor_core && pv_dot.dot.records_trace()) {
    const int step = pv_dot.dot.k_step();
    return step > 0 ? step : std::max(1, len);
  }
  return len;
}

struct NullTraceSink {
  static constexpr bool enabled = false;
  void on_row_begin(const KernelModel&, int /*block_n*/, int /*tiles*/, int /*visible_keys*/, int /*d*/) {}
  void on_tile_begin() {}
  int* repeated_max() { return nullptr; }
  void on_rescale(double /*alpha*/) {}
  template <class E>
  void on_p_cast(const E* /*pc*/, int /*len*/, int /*kv_begin*/) {}
  // The DotTrace an untraced feature's P·V dot tallies into: none.
  DotTrace* tally_dot() { return nullptr; }
  int plotted_feature(int /*d*/) const { return -1; }
  void on_tile_end(const KernelModel&, int, int, int, double, double, const double*, const double*, const double*, int,
                   int) {}
};

class TileTraceSink {
 public:
  static constexpr bool enabled = true;
  explicit TileTraceSink(RowTrace* trace) : trace_(trace) {}

  // Reserves the record's sizes up front: no reallocation inside the traced loops.
  void on_row_begin(const KernelModel& km, int block_n, int tiles, int visible_keys, int d);
  void on_tile_begin() {
    tile_ = TileRecord{};  // (dot_ keeps its capacity; on_tile_end moved p and acc out)
    tally_ = DotStepTally{};
  }
  int* repeated_max() { return &tile_.repeated_max; }
  void on_rescale(double alpha) { exact_acc_plot_ *= static_cast<long double>(alpha); }
  // P̄ == 1 as the P·V product sees it (after the cast: FA2's ex2 of the FFMA residual is
  // 1 + O(2^-22) at a tied max, which the bf16/fp16 cast makes exactly 1).
  template <class E>
  void on_p_cast(const E* pc, int len, int kv_begin) {
    for (int j = 0; j < len; ++j) {
      if (pc[j] == static_cast<E>(1)) {
        ++tile_.p_equal_one;
        trace_->p_equal_one_keys.push_back(kv_begin + j);
      }
    }
  }
  DotTrace* tally_dot() {
    dot_.tally_only = &tally_;
    return &dot_;
  }
  bool plots(int feature) const { return feature == trace_->plot_feature; }
  // The feature whose P·V steps are recorded, or -1 when it is not one of the row's d.
  int plotted_feature(int d) const {
    return trace_->plot_feature >= 0 && trace_->plot_feature < d ? trace_->plot_feature : -1;
  }

  // acc += P̄·v for the plot feature of an MMA-accumulator model, fused step by fused step, to
  // place the error after every step on the key axis. (+promote: one promotion group per
  // call, so groups start where the untraced dot's do.) The steps are recorded, not tallied:
  // the caller's call over every column (tally_dot) has counted them already, in column order.
  // A k order other than ascending (CK's interleave) steps through the rearranged, zero-padded
  // keys, so the steps are the untraced dot's; keys are plotted in that order.
  template <class A, class E>
  double traced_mma_column(const KernelModel& km, const A& ar, double acc, const E* pc, const E* vcol, int kv_begin,
                           int len) {
    if (km.pv_dot.k_order == KOrder::ck_interleave16) {
      std::vector<E> pc_order(static_cast<std::size_t>(len) + 16), v_order(pc_order.size());
      std::vector<int> key(static_cast<std::size_t>(len));
      for (int j = 0; j < len; ++j) key[static_cast<std::size_t>(j)] = j + 1;  // 0 marks padding
      std::vector<int> key_order(pc_order.size());
      const int padded = ck_interleave16(pc, len, pc_order.data());
      ck_interleave16(vcol, len, v_order.data());
      ck_interleave16(key.data(), len, key_order.data());
      KernelModel ascending = km;  // the same steps over keys already in the MFMA's order
      ascending.pv_dot.k_order = KOrder::ascending;
      return traced_mma_steps(ascending, ar, acc, pc_order.data(), v_order.data(), kv_begin, padded, key_order.data());
    }
    return traced_mma_steps(km, ar, acc, pc, vcol, kv_begin, len, nullptr);
  }

 private:
  // The steps of traced_mma_column; key_of[i] (when given) is 1 + position i's key within the
  // tile, 0 for padding, which is not plotted.
  template <class A, class E>
  double traced_mma_steps(const KernelModel& km, const A& ar, double acc, const E* pc, const E* vcol, int kv_begin,
                          int len, const int* key_of) {
    const int step = traced_step_size(km.pv_dot, len);
    for (int i = 0; i < len; i += step) {
      const int n = std::min(step, len - i);
      dot_.steps.clear();
      dot_.tally_only = nullptr;
      acc = ar.dot(km.pv_dot, acc, pc + i, vcol + i, n, &dot_);
      for (DotStepEvent ev : dot_.steps) {
        ev.first_product += kv_begin + i;  // as a key index
        trace_->pv_dot_steps.push_back(ev);
      }
      for (int j = 0; j < n; ++j)
        exact_acc_plot_ += static_cast<long double>(pc[i + j]) * static_cast<long double>(vcol[i + j]);
      const double err = static_cast<double>(static_cast<long double>(acc) - exact_acc_plot_);
      for (int j = 0; j < n; ++j) {
        const int key = key_of ? key_of[i + j] - 1 : i + j;
        if (key < 0) continue;  // zero padding of a partial chunk
        trace_->cumulative_error_by_key.push_back(err);
        trace_->key_order.push_back(kv_begin + key);
      }
    }
    return acc;
  }

 public:
  // A buffer accumulator's update O = F(F(O·α) + F(P̄V)) for feature c, given scaled = F(O·α)
  // and the exact P̄V; each rounding counted into the tile, the plot feature's two events kept.
  template <class A, class E>
  double traced_buffer_update(const KernelModel& km, const A& ar, double scaled, double pv_exact, const E* pc,
                              const E* vcol, int kv_begin, int len, double alpha, int c) {
    RoundingEvent ev_pv, ev_add;
    const double pv = ar.to_traced(km.pv_result_format, pv_exact, &ev_pv);
    // Qiu & Yao's significand overflow: the exact P̄V sum needs a higher exponent than its
    // largest term (two tied P̄ == 1 keys times same-sign V), so its lowest bit is pushed
    // into the rounding.
    int largest_term_exponent = std::numeric_limits<int>::min();
    for (int j = 0; j < len; ++j) {
      const double term = static_cast<double>(pc[j]) * static_cast<double>(vcol[j]);
      if (term != 0.0) largest_term_exponent = std::max(largest_term_exponent, std::ilogb(term));
    }
    ev_pv.significand_overflow = pv_exact != 0.0 && largest_term_exponent != std::numeric_limits<int>::min() &&
                                 std::ilogb(pv_exact) > largest_term_exponent;
    account_rounding(ev_pv, pv - pv_exact, ev_pv.significand_overflow);
    const double sum_exact = scaled + pv;
    // ar.op's fp32 opmath, spelled out so the event sees the one rounding into the buffer.
    const double sum_opmath = km.o_buffer_format && !(*km.o_buffer_format == formats::fp32)
                                  ? static_cast<double>(static_cast<float>(sum_exact))
                                  : sum_exact;
    const double updated = ar.to_traced(km.o_buffer_format, sum_opmath, &ev_add);
    const bool overflow = scaled != 0.0 && pv != 0.0 && std::signbit(scaled) == std::signbit(pv) &&
                          std::ilogb(sum_exact) > std::max(std::ilogb(scaled), std::ilogb(pv));
    ev_add.significand_overflow = overflow;
    account_rounding(ev_add, updated - sum_exact, overflow);
    if (plots(c)) {
      trace_->pv_buffer_events.push_back(ev_pv);
      trace_->pv_buffer_events.push_back(ev_add);
      exact_acc_plot_ *= static_cast<long double>(alpha);
      for (int j = 0; j < len; ++j)
        exact_acc_plot_ += static_cast<long double>(pc[j]) * static_cast<long double>(vcol[j]);
      const double err = static_cast<double>(static_cast<long double>(updated) - exact_acc_plot_);
      for (int j = 0; j < len; ++j) {
        trace_->cumulative_error_by_key.push_back(err);
        trace_->key_order.push_back(kv_begin + j);
      }
    }
    return updated;
  }

  // The tile's record: running max m, the row sum (l, or the quad's per-thread sums
  // l_thread when quad_row_sum), P̄ (p, len entries) and the accumulator (acc, d entries).
  void on_tile_end(const KernelModel& km, int tile_index, int kv_begin, int kv_end, double m, double l,
                   const double* l_thread, const double* p, const double* acc, int len, int d);

  // The final cast of O, feature c: always the traced rounding routine, so the event is kept.
  template <class A>
  double traced_o_cast(const A& ar, const std::optional<Format>& out_format, double pre, const RoundingSpec& spec,
                       std::uint64_t position) {
    RoundingEvent ev;
    const double o = ar.to_traced(out_format, pre, &ev, spec, position);
    trace_->o_cast.push_back(ev);
    return o;
  }

 private:
  void account_rounding(const RoundingEvent& ev, double signed_error, bool significand_overflow);

  RowTrace* trace_;
  TileRecord tile_;
  DotStepTally tally_;                 // the tile's tensor-core P·V steps, in the order they ran
  DotTrace dot_;                       // reused for every traced dot (no allocation per call)
  long double exact_acc_plot_ = 0.0L;  // exact Σ P̄c·v for the plot feature, same rescalings
};

}  // namespace fb::attn::detail
