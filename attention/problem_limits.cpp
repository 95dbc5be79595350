// attention/problem_limits.cpp: the size checks of attention/problem_limits.hpp; the figures
// in the messages are written from the constants, never restated.
#include "attention/problem_limits.hpp"

#include <algorithm>
#include <bit>
#include <cstdio>

namespace fb::attn {

static_assert(std::has_single_bit(static_cast<unsigned long long>(kMaxTensorElements)),
              "the message names the element limit as a power of two");

SizeRefusal problem_size_refusal(long long batch, long long heads, long long seqlen, long long headdim) {
  if (batch < 1 || heads < 1 || seqlen < 1 || headdim < 1) return {"expected positive sizes", false};
  const long double elements = static_cast<long double>(batch) * heads * seqlen * headdim;
  if (elements > static_cast<long double>(kMaxTensorElements)) {
    char count[64];
    std::snprintf(count, sizeof count, "%.0Lf", elements);
    const int log2_limit = std::countr_zero(static_cast<unsigned long long>(kMaxTensorElements));
    return {std::string(count) + " elements per tensor, over the limit of 2^" + std::to_string(log2_limit) + " (" +
                std::to_string(kMaxTensorElements) + ")",
            true};
  }
  const long double bytes = elements * kBytesPerElement;
  if (bytes > static_cast<long double>(kMaxMemoryBytes)) {
    char needed[64];
    std::snprintf(needed, sizeof needed, "%.1f", static_cast<double>(bytes / (1LL << 30)));
    return {std::string("needs about ") + needed + " GiB, over the limit of " + std::to_string(kMaxMemoryBytes >> 30) +
                " GiB",
            true};
  }
  return {};
}

SizeRefusal trace_size_refusal(long long traced_rows, unsigned long long bytes_per_row) {
  if (traced_rows <= 0) return {};
  const long double bytes = static_cast<long double>(traced_rows) * static_cast<long double>(bytes_per_row);
  if (bytes <= static_cast<long double>(kMaxMemoryBytes)) return {};
  char needed[64], per_row[64];
  std::snprintf(needed, sizeof needed, "%.1f", static_cast<double>(bytes / (1LL << 30)));
  std::snprintf(per_row, sizeof per_row, "%.0f", static_cast<double>(bytes_per_row) / 1024.0);
  return {"tracing " + std::to_string(traced_rows) + " row" + (traced_rows == 1 ? "" : "s") + " keeps about " + needed +
              " GiB of records (about " + per_row + " KiB a row), over the limit of " +
              std::to_string(kMaxMemoryBytes >> 30) + " GiB",
          true};
}

std::string tile_size_refusal(long long block_m, long long block_n) {
  const long long side = std::max(block_m, block_n), elements = std::max(block_m, 1LL) * std::max(block_n, 1LL);
  if (block_m < 0 || block_n < 0)
    return "a tile of " + std::to_string(block_m) + "x" + std::to_string(block_n) + ": expected positive sizes";
  if (side <= kMaxTileSide && elements <= kMaxTileElements) return {};
  return "a tile of " + std::to_string(block_m) + "x" + std::to_string(block_n) + ": at most " +
         std::to_string(kMaxTileSide) + " a side and " + std::to_string(kMaxTileElements) +
         " elements (kernels' tiles are at most 256 a side)";
}

std::string trials_refusal(long long trials, long long at_least) {
  if (trials >= at_least && trials <= kMaxTrials) return {};
  return "expected " + std::to_string(at_least) + ".." + std::to_string(kMaxTrials);
}

}  // namespace fb::attn
