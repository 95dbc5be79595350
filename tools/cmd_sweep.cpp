// tools/cmd_sweep.cpp: `flashbits sweep` (docs/CLI.md): the cartesian product formats × rounding
// modes × kernel models × scenarios, N seeded trials each, one row per configuration.
//
// How --formats and --round apply to a kernel model (tools/sweep_grid.hpp computes the grid;
// documented in docs/COMMANDS.md):
// - --formats is the format the kernel works in: the dtype of q, k, v, dO and O for the
//   bf16/fp16 models; a model that names its dtype (standard-fp32, golden-bf16-flash, ...)
//   runs only in that one; the fp8 models run in e4m3 (from bf16 inputs, so `bf16` names
//   them too). A bare `standard` is standard-FMT for each format (standard-fp8 for e4m3).
//   A grid cell whose model cannot run in its format is skipped with a note on stderr
//   (docs/CLI.md's own example crosses fa2-sm90 with e4m3); a grid with no cell left is a
//   usage error (exit 2). Nothing is silently run in another format.
// - --round is the rounding of the final cast of O: `rne` is every recipe's own cast;
//   any other mode selects the +o-MODE variant (sr: --sr-bits random bits).
// Columns: per output (O, delta) the error against exact, the correctly rounded reference's
// error on the same inputs (the model `correctly-rounded`, to nearest even whatever the row's
// --round: a mode's bias is the kernel's) and the excess (the difference, trial by trial); the
// verdict tests the excess (sweep_table.hpp).
// Determinism: trial t of configuration c draws its inputs from
// trial_seed(seed, c's scenario, t), so results do not depend on --jobs or --shard, and every
// model of a scenario sees the same inputs.
// --shard K/N runs the configurations i (0-based, in product order) with i % N == K-1;
// every output records the run (sweep_table.hpp SweepRun: seed, shard, grid, trials, ...)
// so that merge can refuse an incomplete or mixed set of shards.
// --jobs: 1..kMaxJobs threads; a thread the system cannot start is exit 2 (run_on_threads).
// --sr-bits 1..32, --alpha in (0, 1) and --at-stake > 0 as everywhere else (cli_common.hpp).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <mutex>
#include <sstream>
#include <optional>
#include <thread>

#include "attention/attention.hpp"
#include "attention/kernel_models.hpp"
#include "tools/cli_common.hpp"
#include "tools/sweep_grid.hpp"
#include "tools/sweep_table.hpp"
#include "studies/scenarios.hpp"

namespace fb::cli {
namespace {

struct SweepOptions {
  std::string formats = "bf16", rounds = "rne", models, scenarios = "sink", shard, csv, against;
  int seqlen = 256, headdim = 64, trials = 8, jobs = default_jobs(), sr_bits = 24;
  std::uint64_t seed = 0;
  double alpha = 1e-3, at_stake = attn::kDefaultAtStakeUlps;
  bool json = false;
  bool sr_bits_given = false;
  // --dtype F (the contract's input dtype of models that name none) is --formats F.
  std::string dtype;
  CLI::Option *dtype_option = nullptr, *formats_option = nullptr;
};

// A configuration to run (sweep_grid.hpp).
using Config = SweepCell;

int run_sweep(const SweepOptions& o) {
  check_csv_output(o.csv, o.json);
  SweepRun run;  // shard 1/1 unless --shard says otherwise
  if (!o.shard.empty() && !run.read_shard_text(o.shard))
    throw InputError("--shard '" + o.shard + "': expected K/N with 1 <= K <= N");
  const int shard_k = run.shard_k, shard_n = run.shard_n;
  if (o.trials < 1) throw InputError("--trials: expected at least 1");
  if (o.seqlen < 1 || o.headdim < 1) throw InputError("--seqlen and --headdim: expected positive sizes");
  check_problem_size(1, 1, o.seqlen, o.headdim);
  check_trials(o.trials, 1);
  const int jobs = jobs_or_throw(o.jobs);
  sr_bits_or_throw(o.sr_bits);
  // As in op: random bits without stochastic rounding would be accepted and never used.
  if (const auto rounds = split_list(o.rounds, "--round");
      o.sr_bits_given && std::find(rounds.begin(), rounds.end(), "sr") == rounds.end())
    throw InputError("--sr-bits applies to stochastic rounding only (--round " + o.rounds + " has no sr)");
  alpha_or_throw(o.alpha);
  at_stake_or_throw(o.at_stake);
  run.seed = o.seed;
  run.trials = o.trials;
  run.formats = o.formats;
  if (o.dtype_option->count() > 0) {
    parse_format_or_throw(o.dtype, "--dtype");  // one format: a list is --formats'
    if (o.formats_option->count() > 0 && o.formats != o.dtype)
      throw InputError("--dtype " + o.dtype + " conflicts with --formats " + o.formats +
                       " (--dtype F is --formats F: give one)");
    run.formats = o.dtype;
  }
  run.rounds = o.rounds;
  run.models = o.models;
  run.scenarios = o.scenarios;
  run.against = o.against;
  run.seqlen = o.seqlen;
  run.headdim = o.headdim;
  run.sr_bits = o.sr_bits;
  run.alpha = o.alpha;
  run.at_stake = o.at_stake;
  SweepGrid grid = sweep_grid(run);
  run.configurations = static_cast<long long>(grid.cells.size());
  // Printed after the rows (merge prints the same), so that a failed write stays one error
  // line; taken before the cells are moved into the shard's list.
  const std::vector<std::string> notes = sweep_grid_notes(grid);
  std::vector<Config> configs;
  std::vector<std::string> warned;  // models whose warning was printed
  for (Config& c : grid.cells) {
    if (std::find(warned.begin(), warned.end(), c.model.name) == warned.end()) {
      warned.push_back(c.model.name);
      warn_about_model(c.model.name, c.model.recipe->warning);
    }
    if (c.row.index % shard_n == shard_k - 1) configs.push_back(std::move(c));
  }
  // An empty shard is a complete one (merge needs every shard), but an empty table alone
  // would read like a failed run.
  if (configs.empty())
    std::cerr << "note: shard " << run.shard_text() << " holds no configuration: the grid has " << run.configurations
              << ", and shard K of N runs those i with i % N == K-1 (merge still needs it)\n";

  const std::size_t total = configs.size() * static_cast<std::size_t>(o.trials);
  std::vector<SweepRow> per_trial(total);
  std::atomic<std::size_t> next{0};
  ProgressBar progress("trials", total);
  std::mutex error_mutex;
  std::string error;
  bool error_is_bad_input = false, error_is_out_of_memory = false;
  auto worker = [&] {
    for (std::size_t item = next++; item < total; item = next++) {
      const Config& c = configs[item / o.trials];
      const std::uint64_t trial = item % o.trials;
      try {
        // Seeded by the scenario, never the model: every row of one scenario sees the same inputs.
        const std::uint64_t s = attn::trial_seed(o.seed, c.row.scenario, trial);
        const auto in = attn::make_scenario(c.row.scenario, s, 1, 1, o.seqlen, o.headdim, c.dtype, true);
        attn::TrialErrors e = attn::measure_errors(c.model, in, s, true);
        if (c.against) {
          // A paired row: its floor is B on the same inputs and seed (the PV events stay A's).
          attn::TrialErrors paired = attn::measure_paired(c.model, *c.against, in, s);
          paired.significand_overflows = e.significand_overflows;
          paired.ties = e.ties;
          paired.rounded_up = e.rounded_up;
          paired.rounded_down = e.rounded_down;
          e = std::move(paired);
        }
        per_trial[item].add_trial(e);
      } catch (const std::invalid_argument& e) {
        // An impossible combination the user asked for (e.g. +hadamard at head dim 96).
        std::lock_guard<std::mutex> lock(error_mutex);
        if (error.empty()) {
          error = c.row.configuration() + ": " + e.what();
          error_is_bad_input = true;
        }
      } catch (const std::bad_alloc&) {
        // The size asked for, not a bug: main's "out of memory" line, exit 2.
        std::lock_guard<std::mutex> lock(error_mutex);
        if (error.empty()) {
          error = "out of memory";
          error_is_out_of_memory = true;
        }
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (error.empty()) error = c.row.configuration() + ": " + e.what();
      }
      progress.advance();
    }
  };
  // A thread that cannot start stops the others (no item is left for them) before the error.
  run_on_threads(jobs, worker, [&] { next = total; });
  progress.finish();
  if (!error.empty()) {
    if (error_is_out_of_memory) throw std::bad_alloc();
    if (error_is_bad_input) throw InputError(error);
    throw std::runtime_error(error);
  }

  std::vector<SweepRow> rows;
  for (std::size_t ci = 0; ci < configs.size(); ++ci) {
    SweepRow r = configs[ci].row;
    for (int t = 0; t < o.trials; ++t) r.absorb(per_trial[ci * o.trials + t]);
    rows.push_back(r);
  }
  return emit_rows(std::move(rows), o.csv, o.json, run, notes);
}

Runner setup_sweep(CLI::App& app) {
  auto o = std::make_shared<SweepOptions>();
  o->formats_option = app.add_option("--formats", o->formats,
                                     "formats the kernels work in (bf16, fp16, fp32, e4m3), comma-separated (default "
                                     "bf16); a model that cannot run in one is skipped with a note");
  o->dtype_option =
      app.add_option("--dtype", o->dtype, "one format, as --formats with one entry (bias-test's --dtype)");
  app.add_option("--round", o->rounds,
                 "final cast of O: rne (each recipe's own) or rtz, rup, rdn, rna, rto, sr (+o-MODE), comma-separated");
  app.add_option("--model", o->models, "kernel models, comma-separated")->required();
  app.add_option("--scenario", o->scenarios, "scenarios, comma-separated (default sink)");
  app.add_option("--against", o->against, "paired: each row is --model minus this model on the same inputs and seed");
  app.add_option("--seqlen", o->seqlen, "sequence length (default 256)")->check(size_in());
  app.add_option("--headdim", o->headdim, "head dimension (default 64)")->check(headdim_in());
  app.add_option("--trials", o->trials, "trials per configuration (default 8)")->check(trials_in(1));
  add_seed_option(app, o->seed, "seed (default 0)");
  app.add_option("--sr-bits", o->sr_bits, "random bits for --round sr, 1..32 (default 24)")
      ->check(decimal_word("1..32"))
      ->each([o](const std::string&) { o->sr_bits_given = true; });
  app.add_option("--jobs", o->jobs,
                 "threads, 1.." + std::to_string(kMaxJobs) + " (default: the machine's cores, " +
                     std::to_string(default_jobs()) + " here; results do not depend on it)")
      ->check(decimal_word("1.." + std::to_string(kMaxJobs)));
  app.add_option("--shard", o->shard,
                 "K/N: run configurations i with i % N == K-1 (the output's run record lets merge check the set)");
  app.add_option("--alpha", o->alpha,
                 "each row's significance level, in (0, 1) (default 1e-3): its four comparisons (O and delta, "
                 "signed and magnitude) are each made at alpha / 4")
      ->check(decimal_number());
  app.add_option("--at-stake", o->at_stake,
                 "the smallest bias (ulps) that matters to the verdict: a row whose test could not detect it is "
                 "inconclusive (default 0.05, as bias-test)")
      ->check(decimal_number());
  app.add_option("--csv", o->csv,
                 "also write the rows (with sufficient statistics and a last `# run` line recording the "
                 "parameters, seed and shard) as CSV; - writes it to standard output instead of the table");
  app.add_flag("--json", o->json, "print JSON instead of the table");
  app.footer(kRowsExitStatus);
  return [o] { return run_sweep(*o); };
}

}  // namespace
FLASHBITS_SUBCOMMAND(sweep, "sweep", "Bias and error of kernel models over formats, roundings and scenarios",
                     setup_sweep);
}  // namespace fb::cli
