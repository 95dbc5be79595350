// tools/sweep_grid.hpp: the grid of a `flashbits sweep` run, computed from its options as
// given (a SweepRun): what sweep runs, and what merge checks each shard row against.
//
// Contract (docs/CLI.md `sweep`, docs/COMMANDS.md):
// - The cells are formats × rounds × models × scenarios, in that product order, less the
//   cells a model cannot run (a model that names its dtype, in another format; the reasons
//   are kept, distinct and in grid order, for sweep's `note: skipped:` lines). Cell i of
//   the result is configuration index i.
// - --formats is the format the kernel works in; a bare `standard` is standard-FMT
//   (standard-fp8 for e4m3); the fp8 models run in e4m3. --round is the final cast of O:
//   `rne` is each recipe's own, any other mode appends +o-MODE (sr with run.sr_bits bits).
//   --against B makes every row the paired difference `A-vs-B`.
// - Throws InputError naming the option and the word: an unknown format, rounding mode,
//   scenario or model; an entry given twice in one list (`--model a,a`); two cells that are
//   one configuration (`--model standard,standard-bf16` with bf16); more than
//   kMaxSweepCells cells in the product (checked before any model is parsed, as merge
//   computes the grid from the lists in the files it is given).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "attention/attention.hpp"
#include "formats/format.hpp"
#include "tools/sweep_table.hpp"

namespace fb::cli {

inline constexpr long long kMaxSweepCells = 1 << 16;

struct SweepCell {
  SweepRow row;  // the configuration: index, format, round, model (as the row names it), scenario, sizes
  attn::ModelHandle model;
  Format dtype;                              // the inputs' dtype (the model's input)
  std::optional<attn::ModelHandle> against;  // --against: rows are paired differences
};

struct SweepGrid {
  std::vector<SweepCell> cells;
  std::vector<std::string> skipped;  // why cells were left out, distinct, in grid order
};

SweepGrid sweep_grid(const SweepRun& run);

// The `note:` lines sweep prints on stderr about its grid, and merge about the grid its shards
// were cut from: each skipped cell's reason, and the models (--against's too) that use parts not
// yet validated on hardware, by name.
std::vector<std::string> sweep_grid_notes(const SweepGrid& grid);

}  // namespace fb::cli
