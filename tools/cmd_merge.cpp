// tools/cmd_merge.cpp: `flashbits merge FILES... [--csv FILE] [--json]` joins the CSV or
// JSON shards of a sharded `flashbits sweep` and prints exactly what the unsharded sweep
// prints: the shards carry sufficient statistics and every derived column is recomputed
// (tools/sweep_table.hpp). A configuration index seen twice is an error (exit 2).
#include <iostream>
#include <set>

#include "tools/cli_common.hpp"
#include "tools/sweep_table.hpp"

namespace fb::cli {
namespace {

struct MergeOptions {
  std::vector<std::string> files;
  std::string csv;
  bool json = false;
  double alpha = 1e-3;
};

int run_merge(const MergeOptions& o) {
  std::vector<SweepRow> rows;
  std::set<long long> seen;
  for (const auto& f : o.files)
    for (auto& r : read_rows(f)) {
      if (!seen.insert(r.index).second)
        throw InputError(f + ": configuration index " + std::to_string(r.index) + " (" + r.configuration() +
                         ") appears in more than one shard");
      rows.push_back(std::move(r));
    }
  return emit_rows(std::move(rows), o.csv, o.json, o.alpha);
}

Runner setup_merge(CLI::App& app) {
  auto o = std::make_shared<MergeOptions>();
  app.add_option("files", o->files, "shard files written by sweep --csv or --json")->required();
  app.add_option("--csv", o->csv, "write the merged rows as CSV");
  app.add_flag("--json", o->json, "print JSON instead of the table");
  app.add_option("--alpha", o->alpha, "significance level of the verdict (default 1e-3)");
  return [o] { return run_merge(*o); };
}

}  // namespace
FLASHBITS_SUBCOMMAND(merge, "merge", "Join the shards of a sharded sweep", setup_merge);
}  // namespace fb::cli
