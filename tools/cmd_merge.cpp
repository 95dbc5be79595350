// tools/cmd_merge.cpp: `flashbits merge FILES... [--csv FILE] [--json]` joins the CSV or
// JSON shards of a sharded `flashbits sweep` and prints exactly what the unsharded sweep
// prints: the shards carry sufficient statistics and every derived column is recomputed
// (tools/sweep_table.hpp). The files must be exactly the N shards of one run, as their run
// records say (sweep_table.hpp check_shards): a missing or repeated shard, shards of
// different runs (seed, trials, grid, sizes, sr bits) or a row that is not its shard's are
// refused (exit 2, one line naming the file and what mismatched). --alpha and --at-stake
// judge the merged rows at other levels than the shards'.
#include <algorithm>
#include <iostream>
#include <optional>

#include "tools/cli_common.hpp"
#include "tools/sweep_grid.hpp"
#include "tools/sweep_table.hpp"

namespace fb::cli {
namespace {

struct MergeOptions {
  std::vector<std::string> files;
  std::string csv;
  bool json = false;
  double alpha = 1e-3, at_stake = 0;
  CLI::Option* alpha_option = nullptr;
  CLI::Option* at_stake_option = nullptr;
};

int run_merge(const MergeOptions& o) {
  std::optional<double> alpha;
  if (o.alpha_option && o.alpha_option->count() > 0) alpha = alpha_or_throw(o.alpha);
  std::optional<double> at_stake;
  if (o.at_stake_option && o.at_stake_option->count() > 0) at_stake = at_stake_or_throw(o.at_stake);
  check_csv_output(o.csv, o.json);
  // Standard input holds one shard: read twice, its second reading would be empty.
  if (std::count(o.files.begin(), o.files.end(), "-") > 1)
    throw InputError("merge: - (standard input) is given more than once");
  std::vector<std::pair<std::string, std::string>> inputs;
  for (const auto& f : o.files)
    if (f != "-") inputs.emplace_back("shard", f);
  refuse_output_over_inputs("--csv", o.csv, inputs);
  std::vector<std::pair<std::string, SweepFile>> shards;
  for (const auto& f : o.files) shards.emplace_back(f == "-" ? "standard input" : f, read_sweep_file(f));
  const SweepRun run = check_shards(shards, alpha, at_stake);
  std::vector<SweepRow> rows;
  for (auto& [path, file] : shards)
    for (auto& r : file.rows) rows.push_back(std::move(r));
  // The sweep's own notes (skipped cells, models not validated on hardware), which its shards'
  // CSV files do not carry: from the grid their run record makes, as check_shards checked it,
  // so that the merged report says what the unsharded one says.
  return emit_rows(std::move(rows), o.csv, o.json, run, sweep_grid_notes(sweep_grid(run)));
}

Runner setup_merge(CLI::App& app) {
  auto o = std::make_shared<MergeOptions>();
  app.add_option(
         "shards", o->files,
         "shard files written by sweep --csv or --json (all N shards of one run); - reads one from standard input")
      ->required();
  app.add_option("--csv", o->csv,
                 "write the merged rows as CSV (written whole: a temporary file renamed into place); - writes it to "
                 "standard output instead of the table");
  app.add_flag("--json", o->json, "print JSON instead of the table");
  o->alpha_option =
      app.add_option("--alpha", o->alpha, "significance level of the verdict, in (0, 1) (default: the shards' own)")
          ->check(decimal_number());
  o->at_stake_option =
      app.add_option(
             "--at-stake", o->at_stake,
             "the smallest bias (ulps) that matters to the verdict: a test that could not detect it is inconclusive "
             "(default: the shards' own)")
          ->check(decimal_number());
  app.footer(kRowsExitStatus);
  return [o] { return run_merge(*o); };
}

}  // namespace
FLASHBITS_SUBCOMMAND(merge, "merge", "Join the shards of a sharded sweep", setup_merge);
}  // namespace fb::cli
