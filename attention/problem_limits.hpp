// attention/problem_limits.hpp: the largest problems the CLI and the Python module accept,
// one set of limits below both (tools/cli_common.hpp check_problem_size and check_trials,
// python/src bias_test and attention), so that neither can drift from the other.
//
// Contract:
// - A problem is batch x heads x seqlen x headdim elements per tensor (q, k, v, o, dO): at
//   most kMaxTensorElements, and its memory estimate, kBytesPerElement per element (about
//   16 fp64 arrays of that size: inputs, outputs, gradients, their packed copies), at most
//   kMaxMemoryBytes. A trial count is at most kMaxTrials. The records of traced rows are
//   counted apart, against the same memory limit (trace_size_refusal): they grow with the
//   traced rows times the keys, so tracing every row of a long sequence needs far more than
//   its tensors.
// - The checks return why the values are refused, as a phrase to follow the caller's own
//   naming of them ("--seqlen 256 --headdim 100000000: " in the CLI, "seqlen=256
//   headdim=100000000: " in Python), or an empty string when they are within the limits.
//   They throw nothing: each caller raises its own kind of error (InputError, ValueError).
#pragma once

#include <string>

namespace fb::attn {

inline constexpr long long kMaxTensorElements = 1LL << 31;
inline constexpr long long kBytesPerElement = 128;
inline constexpr long long kMaxMemoryBytes = 64LL << 30;
inline constexpr long long kMaxTrials = 1LL << 24;

struct SizeRefusal {
  std::string reason;      // empty: the sizes are within the limits
  bool too_large = false;  // true: over a limit (the caller may say which sizes to shrink)
  explicit operator bool() const { return !reason.empty(); }
};

// "expected positive sizes", "N elements per tensor, over the limit of 2^31 (2147483648)" or
// "needs about X GiB, over the limit of 64 GiB"; empty when the sizes are fine. Any long long
// sizes (the product is formed in long double: no overflow).
SizeRefusal problem_size_refusal(long long batch, long long heads, long long seqlen, long long headdim);

// A tracer's records: traced_rows rows of at most bytes_per_row each (traced_row_bytes_bound,
// attention/attention.hpp), at most kMaxMemoryBytes on top of the problem's own estimate.
// "tracing N rows keeps about X GiB of records (about Y KiB a row), over the limit of 64 GiB",
// too_large set; empty when within the limit (or when no row is traced).
SizeRefusal trace_size_refusal(long long traced_rows, unsigned long long bytes_per_row);

// "expected AT_LEAST..kMaxTrials", or empty when trials is in that range.
std::string trials_refusal(long long trials, long long at_least);

// Tile sizes a run may name (RunOptions::block_m, block_n): each at most kMaxTileSide and the
// tile at most kMaxTileElements, since the engine's per-thread buffers are tile-sized (a
// backward holds block_m x block_n of P, dS and their transposes) whatever the sequence: a
// 64x1073741824 tile had `deviation` allocate 13 GB and more. Kernels' tiles are at most 256
// a side. "a tile of BRxBC: ..." or empty when within; 0 (the recipe's) always is.
inline constexpr long long kMaxTileSide = 1LL << 16;
inline constexpr long long kMaxTileElements = 1LL << 22;
std::string tile_size_refusal(long long block_m, long long block_n);

}  // namespace fb::attn
