// tools/sweep_table.hpp: the sweep file format and rendering `flashbits sweep` and `merge`
// share (the measurement itself is studies/measure.hpp).
//
// Contract:
// - SweepRow holds a configuration and SUFFICIENT statistics only (n, sums, sums of
//   squares, sign counts, max, counts), for three statistics per output (O, delta): the
//   error against exact, the correctly rounded reference's error on the same inputs, and
//   the excess (error minus reference, per trial). Every derived column (means, RMS,
//   verdict: from the excess, or from the paired difference for A-vs-B rows) is computed
//   from them by derive(), so a merged set of shard rows renders byte for byte as the
//   unsharded run did (configurations are never split across shards).
// - The per-trial bias statistics are computed from the sums (attn::ErrorMoments), the
//   same formulas as studies/statistics.cpp's summarize() but from (n, Σx, Σx²):
//   merge has no per-trial vectors.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "studies/measure.hpp"
#include "studies/verdict.hpp"

namespace fb::cli {

// Every row's verdict combines four comparisons, O and delta, signed and magnitude
// (studies/verdict.hpp), each at alpha / 4: every sweep trial runs the backward.
inline constexpr int kSweepComparisons = attn::run_comparisons(true);

struct SweepRow {
  long long index = 0;  // position in the full cartesian product
  std::string format, round, model, scenario;
  int seqlen = 0, headdim = 0;
  // sufficient statistics
  long long trials = 0;
  attn::ErrorMoments o, d;  // per-trial mean signed error of O and of delta (ulps)
  long long elements = 0;
  double sq_sum = 0, max_abs = 0;  // over every element of O (ulps)
  long long sig_overflows = 0, ties = 0, rounded_up = 0, rounded_down = 0;
  // The correctly rounded reference (cr_) and the excess (ex_: error minus the reference's,
  // per trial) in the same units; ref_trials counts the trials that had a reference (for
  // paired A-vs-B rows B on the same inputs: every finite trial).
  long long ref_trials = 0;
  attn::ErrorMoments cr_o, cr_d, ex_o, ex_d;
  // The magnitude errors (measure.hpp outward_mean: sign of the target x error), per trial:
  // the kernel's (mag_, over the finite trials), the floor's (cr_mag_) and the excess
  // (ex_mag_), both over ref_trials. The verdict compares them as it compares the signed ones.
  attn::ErrorMoments mag_o, mag_d, cr_mag_o, cr_mag_d, ex_mag_o, ex_mag_d;
  // Trials whose O or delta came out NaN or infinite on finite inputs: counted in `trials`,
  // left out of every sum (no error of theirs means anything), and the row has no verdict,
  // as bias-test gives none (it wrote NaN sums and called the row inconclusive).
  long long non_finite_trials = 0;

  void add_trial(const attn::TrialErrors& t);
  // Adds another row's statistics (trials of the same configuration, in trial order).
  void absorb(const SweepRow& other);
  std::string configuration() const;
  // A paired row (sweep --against B, named A-vs-B): its floor (cr_) is B on the same inputs.
  bool paired() const;
};

// What one `flashbits sweep` run (or one shard of it) was: every parameter its rows depend
// on, so that merge can refuse shards that are not one whole run. The CSV carries it as its
// last line, `# run {JSON}` (a truncated file has none), the JSON output as the member "run";
// both hold the same object:
//   {"program": "flashbits sweep", "seed": S, "shard": "K/N", "configurations": C,
//    "trials": T, "formats": "...", "round": "...", "models": "...", "scenarios": "...",
//    "against": "...", "seqlen": N, "headdim": D, "sr_bits": R, "alpha": A, "at_stake_ulps": U}
// `configurations` counts the grid cells of the unsharded run (shard K/N holds those with
// index % N == K - 1); the lists are the options as given. A merged set is shard 1/1.
// alpha and at_stake are the verdict's levels (studies/verdict.hpp), not the rows': a record
// without at_stake (written before sweep had --at-stake) was judged at the default.
struct SweepRun {
  std::uint64_t seed = 0;
  int shard_k = 1, shard_n = 1;
  long long configurations = 0;
  long long trials = 0;
  std::string formats, rounds, models, scenarios, against;
  long long seqlen = 0, headdim = 0, sr_bits = 24;
  double alpha = 1e-3;
  double at_stake = attn::kDefaultAtStakeUlps;  // ulps
  std::string shard_text() const { return std::to_string(shard_k) + "/" + std::to_string(shard_n); }
  // Reads shard_text's form, "K/N" with 1 <= K <= N in plain digits (--shard and the run
  // record alike); false, the fields untouched, for anything else.
  bool read_shard_text(std::string_view text);
};

// The verdicts use run.alpha and run.at_stake.
void write_table(std::ostream& os, const std::vector<SweepRow>& rows, const SweepRun& run);
// Text fields (format, round, model, scenario, verdict) go through csv_field: quoted as RFC
// 4180 says where they hold a comma, a quote or a line break (a model's parameters,
// +dynmax:beta=2,tol=0.01), so that merge reads back the columns written.
void write_csv(std::ostream& os, const std::vector<SweepRow>& rows, const SweepRun& run);
std::string csv_field(const std::string& text);
// `notes`: the grid's notes (sweep_grid_notes), the JSON's "notes" array.
void write_json(std::ostream& os, const std::vector<SweepRow>& rows, const SweepRun& run,
                const std::vector<std::string>& notes = {});
// Reads what write_csv / write_json wrote (sniffs the first character); throws
// InputError naming the file, line and column on a defect. `run` is empty when the file
// has no run record (written by an older flashbits, or truncated). "-" reads standard input
// (named "standard input" in messages).
struct SweepFile {
  std::vector<SweepRow> rows;
  std::vector<std::string> row_where;  // where each row is, for messages: "line N" (CSV), "rows[i]" (JSON)
  std::optional<SweepRun> run;
};
SweepFile read_sweep_file(const std::string& path);
// Checks that `files` (path, contents) are exactly the shards of one sweep run: each has a
// valid run record; every record agrees on every parameter but the shard K (and the levels
// alpha and at_stake, which merge may give);
// no shard appears twice and none of 1..N is missing; every row belongs to its shard
// (index < configurations, index % N == K - 1, the run's trials, seqlen and headdim,
// counts within 0..trials) and is the configuration its index names in the run's grid
// (sweep_grid.hpp, from the record's options; a record whose options make another number of
// configurations is refused too). Throws InputError naming the file (and the row's line)
// and what mismatched. Returns
// the merged run (shard 1/1; alpha and at_stake: the ones given, else the shards' common
// ones, and shards that differ in one not given are refused).
SweepRun check_shards(const std::vector<std::pair<std::string, SweepFile>>& files, std::optional<double> alpha,
                      std::optional<double> at_stake);
// Renders rows the way sweep does (table on stdout, --csv FILE written whole, --json),
// with run.alpha and run.at_stake as the verdict's levels. `--csv -` writes the CSV to stdout in
// place of the table. Returns kExitCheckFailed (1) when any row's kernel adds bias or a row
// has no verdict (as bias-test does), else kExitOk, inconclusive rows included (the contract
// gives sweep no exit 4; the table's last line counts those rows).
// `notes` (skipped cells, models not validated on hardware: sweep_grid_notes) follow the table
// on stdout, are the JSON's "notes", and go to stderr beside a CSV written to stdout.
int emit_rows(std::vector<SweepRow> rows, const std::string& csv_path, bool json, const SweepRun& run,
              const std::vector<std::string>& notes);
// sweep's and merge's --csv and --json, checked before any work: the CSV's path can be
// written (check_output_path; - is stdout) and `--csv -` is not given with --json (both
// would be stdout). InputError (exit 2) otherwise.
void check_csv_output(const std::string& csv_path, bool json);
// The exit statuses of emit_rows, as sweep's and merge's --help state them.
inline constexpr const char* kRowsExitStatus =
    "Exit status: 0 no row adds bias (inconclusive rows included: the table's last line counts them); 1 a row's "
    "kernel adds bias or a row has no verdict (non-finite output), as bias-test; 2 bad input.";

}  // namespace fb::cli
