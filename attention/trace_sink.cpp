// attention/trace_sink.cpp: the non-template parts of TileTraceSink (attention/trace_sink.hpp):
// sizing a traced row's record and closing each tile's TileRecord.
#include "attention/trace_sink.hpp"

#include <utility>

#include "attention/engine_detail.hpp"

namespace fb::attn::detail {

namespace {
// The P·V steps a traced tile of block_n keys records for the plot feature.
int traced_steps_per_tile(const KernelModel& km, int block_n) {
  const int step = std::max(1, traced_step_size(km.pv_dot, block_n));
  return (block_n + step - 1) / step;
}
}  // namespace

void TileTraceSink::on_row_begin(const KernelModel& km, int block_n, int tiles, int visible_keys, int d) {
  const int steps_per_tile = traced_steps_per_tile(km, block_n);
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

namespace fb::attn {

// What on_row_begin reserves for a row visiting every key (the most any row visits: causal
// rows see fewer, +visit-masked-tiles rows all), and what grows past its reservation:
// p_equal_one_keys (push_back, at most one per key; capacity under twice the size) and the
// tiles' P̄ (assigned: one entry per key visited) and accumulator (assigned: d a tile).
// Materialised rows keep the RowTrace alone (delta's decomposition); correctly-rounded rows
// also the final cast's d events, pushed back (exact.cpp).
std::uint64_t traced_row_bytes_bound(const KernelModel& km, int seqlen_q, int seqlen_k, int head_dim, bool causal,
                                     int block_n) {
  const std::uint64_t d = static_cast<std::uint64_t>(std::max(0, head_dim));
  const std::uint64_t row = sizeof(RowTrace);
  if (km.structure == Structure::materialised) return row;
  if (km.structure == Structure::correctly_rounded) return row + 2 * d * sizeof(RoundingEvent);
  const int bn = std::max(1, block_n > 0 ? block_n : km.tiles_for(head_dim, seqlen_q, causal, seqlen_k).block_n);
  const std::uint64_t keys = static_cast<std::uint64_t>(std::max(0, seqlen_k));
  const std::uint64_t tiles = (keys + static_cast<std::uint64_t>(bn) - 1) / static_cast<std::uint64_t>(bn);
  const std::uint64_t per_tile =
      sizeof(TileRecord) + d * sizeof(double) +
      (km.o_acc == OAccumulator::mma_c
           ? static_cast<std::uint64_t>(detail::traced_steps_per_tile(km, bn)) * sizeof(DotStepEvent)
           : 2 * sizeof(RoundingEvent));
  // P̄, the plot's error and key order, and (at most) twice a P̄ == 1 key.
  const std::uint64_t per_key = sizeof(double) + sizeof(double) + sizeof(int) + 2 * sizeof(int);
  return row + d * sizeof(RoundingEvent) + tiles * per_tile + keys * per_key;
}

}  // namespace fb::attn
