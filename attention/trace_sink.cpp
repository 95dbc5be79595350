// attention/trace_sink.cpp: the non-template parts of TileTraceSink (attention/trace_sink.hpp):
// sizing a traced row's record and closing each tile's TileRecord.
#include "attention/trace_sink.hpp"

#include <utility>

#include "attention/engine_detail.hpp"

namespace fb::attn::detail {

void TileTraceSink::on_row_begin(const KernelModel& km, int block_n, int tiles, int visible_keys, int d) {
  const int step = std::max(1, traced_step_size(km.pv_dot, block_n));
  const int steps_per_tile = (block_n + step - 1) / step;
  dot_.steps.reserve(static_cast<std::size_t>(steps_per_tile));
  trace_->tiles.reserve(static_cast<std::size_t>(tiles));
  trace_->o_cast.reserve(static_cast<std::size_t>(d));
  trace_->cumulative_error_by_key.reserve(static_cast<std::size_t>(visible_keys));
  trace_->key_order.reserve(static_cast<std::size_t>(visible_keys));
  if (km.o_acc == OAccumulator::mma_c) {
    trace_->pv_dot_steps.reserve(static_cast<std::size_t>(tiles) * steps_per_tile);
  } else {
    trace_->pv_buffer_events.reserve(2 * static_cast<std::size_t>(tiles));
  }
}

void TileTraceSink::account_rounding(const RoundingEvent& ev, double signed_error, bool significand_overflow) {
  tile_.ties += ev.tie ? 1 : 0;
  if (ev.direction == RoundDirection::up) ++tile_.rounded_up;
  if (ev.direction == RoundDirection::down) ++tile_.rounded_down;
  tile_.significand_overflows += significand_overflow ? 1 : 0;
  tile_.pv_signed_error += signed_error;
}

void TileTraceSink::on_tile_end(const KernelModel& km, int tile_index, int kv_begin, int kv_end, double m, double l,
                                const double* l_thread, const double* p, const double* acc, int len, int d) {
  // Where the tile's P·V ran on the tensor-core model, its step tally becomes the tile's
  // counts (zero for buffer accumulators, counted per rounding by traced_buffer_update).
  tile_.significand_overflows += tally_.significand_overflows;
  tile_.ties += tally_.ties;
  tile_.rounded_up += tally_.rounded_up;
  tile_.rounded_down += tally_.rounded_down;
  tile_.pv_signed_error += tally_.signed_error;
  tile_.kv_tile = tile_index;
  tile_.kv_begin = kv_begin;
  tile_.kv_end = kv_end;
  tile_.running_max = m;
  tile_.running_sum = quad_row_sum(km) ? l_thread[0] + l_thread[1] + l_thread[2] + l_thread[3] : l;
  if (quad_row_sum(km)) std::copy(l_thread, l_thread + 4, tile_.thread_sums.begin());
  tile_.p.assign(p, p + len);
  tile_.acc.assign(acc, acc + d);
  trace_->tiles.push_back(std::move(tile_));
}

}  // namespace fb::attn::detail
