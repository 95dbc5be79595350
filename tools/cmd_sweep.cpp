// tools/cmd_sweep.cpp: `flashbits sweep` (docs/CLI.md): the cartesian product formats × rounding
// modes × kernel models × scenarios, N seeded trials each, one row per configuration.
//
// How --formats and --round apply to a kernel model (documented in docs/COMMANDS.md):
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
// error on the same inputs (the model `correctly-rounded` in the row's --round mode) and the
// excess (the difference, trial by trial); the verdict tests the excess (sweep_table.hpp).
// Determinism: trial t of configuration c draws its inputs from
// trial_seed(seed, c's scenario, t), so results do not depend on --jobs or --shard, and every
// model of a scenario sees the same inputs.
// --shard K/N runs the configurations i (0-based, in product order) with i % N == K-1;
// every output records the run (sweep_table.hpp SweepRun: seed, shard, grid, trials, ...)
// so that merge can refuse an incomplete or mixed set of shards.
// --jobs: 1..kMaxJobs threads; a thread the system cannot start is exit 2 (run_on_threads).
// --sr-bits 1..32 and --alpha in (0, 1) as everywhere else (cli_common.hpp).
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
#include "tools/sweep_table.hpp"

namespace fb::cli {
namespace {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

struct SweepOptions {
  std::string formats = "bf16", rounds = "rne", models, scenarios = "sink", shard, csv, against;
  int seqlen = 256, headdim = 64, trials = 8, jobs = default_jobs(), sr_bits = 24;
  std::uint64_t seed = 0;
  double alpha = 1e-3;
  bool json = false;
};

struct Config {
  SweepRow row;
  attn::ModelHandle model;
  Format dtype;                              // the inputs' dtype (the model's input)
  std::optional<attn::ModelHandle> against;  // --against: rows are paired differences
};

// A grid cell's model, or why the model cannot run in that format.
struct ResolvedModel {
  std::optional<attn::ModelHandle> model;
  std::string label;         // the row's model column (a bare `standard` made explicit)
  std::string not_runnable;  // set when model is empty
};

ResolvedModel resolve_model(const std::string& model, const Format& format, const std::string& round, int sr_bits) {
  const std::size_t plus = model.find('+');
  std::string base = model.substr(0, plus);
  const std::string variants = plus == std::string::npos ? "" : model.substr(plus);
  const std::string format_name = format.name;
  if (base == "standard") {
    if (format == formats::fp32 || format == formats::bf16 || format == formats::fp16) {
      base = "standard-" + format_name;
    } else if (format == formats::e4m3) {
      base = "standard-fp8";
    } else {
      return {std::nullopt, model, "standard has no " + format_name + " form (fp32, bf16, fp16, e4m3)"};
    }
  }
  const std::string label = base + variants;
  const std::string name = round == "rne" ? label : label + "+o-" + round;
  attn::ModelHandle h;
  try {
    // Models that do not name their dtype take bf16 or fp16 from the format.
    h = attn::parse_kernel_model(name, format == formats::fp16 ? formats::fp16 : formats::bf16);
  } catch (const std::invalid_argument& e) {
    throw InputError(std::string("--model ") + model + ": " + e.what());
  }
  const attn::KernelModel& r = *h.recipe;
  const bool runs_in_format = r.input == format || (r.fp8.enabled && r.fp8.format == format);
  if (!runs_in_format) {
    std::string runs_in = r.input.name;
    if (r.fp8.enabled) runs_in += std::string(" or ") + r.fp8.format.name;
    return {std::nullopt, label, label + " runs in " + runs_in + ", not " + format_name};
  }
  if (round == "sr" && sr_bits != 24) {
    auto recipe = std::make_shared<attn::KernelModel>(r);
    recipe->o_sr_bits = sr_bits;
    h.recipe = recipe;
  }
  return {h, label, ""};
}

int run_sweep(const SweepOptions& o) {
  int shard_k = 1, shard_n = 1;
  if (!o.shard.empty()) {
    char slash = 0;
    std::istringstream ss(o.shard);
    if (!(ss >> shard_k >> slash >> shard_n) || slash != '/' || !ss.eof() || shard_n < 1 || shard_k < 1 ||
        shard_k > shard_n)
      throw InputError("--shard " + o.shard + ": expected K/N with 1 <= K <= N");
  }
  if (o.trials < 1) throw InputError("--trials: expected at least 1");
  if (o.seqlen < 1 || o.headdim < 1) throw InputError("--seqlen and --headdim: expected positive sizes");
  check_problem_size(1, 1, o.seqlen, o.headdim);
  check_trials(o.trials, 1);
  const int jobs = jobs_or_throw(o.jobs);
  sr_bits_or_throw(o.sr_bits);
  alpha_or_throw(o.alpha);
  const auto scenario_list = attn::scenario_names();
  std::vector<Config> configs;
  std::vector<std::string> not_runnable;  // distinct reasons, in grid order
  std::vector<std::string> warned;        // models whose warning was printed
  long long index = 0, runnable = 0;
  for (const auto& fmt : split_list(o.formats))
    for (const auto& round : split_list(o.rounds))
      for (const auto& model : split_list(o.models))
        for (const auto& scenario : split_list(o.scenarios)) {
          const Format format = parse_format_or_throw(fmt, "--formats");
          parse_mode_or_throw(round, "--round");
          if (std::find(scenario_list.begin(), scenario_list.end(), scenario) == scenario_list.end())
            throw InputError("--scenario " + scenario + ": unknown scenario");
          const ResolvedModel resolved = resolve_model(model, format, round, o.sr_bits);
          std::optional<ResolvedModel> baseline;
          // The baseline's final cast is its own recipe's (rne); the pair shares inputs and seed.
          if (!o.against.empty()) baseline = resolve_model(o.against, format, "rne", o.sr_bits);
          const std::string& why = !resolved.model                ? resolved.not_runnable
                                   : baseline && !baseline->model ? baseline->not_runnable
                                                                  : resolved.not_runnable;
          if (!why.empty()) {
            if (std::find(not_runnable.begin(), not_runnable.end(), why) == not_runnable.end())
              not_runnable.push_back(why);
            continue;  // not a grid cell: shards agree on this without running anything
          }
          ++runnable;
          if (std::find(warned.begin(), warned.end(), resolved.model->name) == warned.end()) {
            warned.push_back(resolved.model->name);
            warn_about_model(resolved.model->name, resolved.model->recipe->warning);
          }
          Config c{SweepRow{}, *resolved.model, resolved.model->recipe->input, std::nullopt};
          c.row.index = index;
          c.row.format = fmt;
          c.row.round = round;
          c.row.model = resolved.label;
          if (baseline) {
            c.against = *baseline->model;
            c.row.model = resolved.label + "-vs-" + baseline->label;
          }
          c.row.scenario = scenario;
          c.row.seqlen = o.seqlen;
          c.row.headdim = o.headdim;
          if (index % shard_n == shard_k - 1) configs.push_back(std::move(c));
          ++index;
        }
  if (runnable == 0) {
    if (not_runnable.empty()) throw InputError("--model: expected at least one model");
    throw InputError("no configuration can run: " + not_runnable.front() +
                     (not_runnable.size() > 1 ? " (and " + std::to_string(not_runnable.size() - 1) + " more)" : ""));
  }
  for (const std::string& why : not_runnable) std::cerr << "note: skipped: " << why << "\n";

  const std::size_t total = configs.size() * static_cast<std::size_t>(o.trials);
  std::vector<SweepRow> per_trial(total);
  std::atomic<std::size_t> next{0};
  ProgressBar progress("trials", total);
  std::mutex error_mutex;
  std::string error;
  bool error_is_bad_input = false;
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
    if (error_is_bad_input) throw InputError(error);
    throw std::runtime_error(error);
  }

  std::vector<SweepRow> rows;
  for (std::size_t ci = 0; ci < configs.size(); ++ci) {
    SweepRow r = configs[ci].row;
    for (int t = 0; t < o.trials; ++t) r.absorb(per_trial[ci * o.trials + t]);
    rows.push_back(r);
  }
  if (configs.size() && !configs.front().model.recipe->hardware_validated())
    std::cerr << "note: some models use parts not yet validated on hardware (see `flashbits models`)\n";
  SweepRun run;
  run.seed = o.seed;
  run.shard_k = shard_k;
  run.shard_n = shard_n;
  run.configurations = index;
  run.trials = o.trials;
  run.formats = o.formats;
  run.rounds = o.rounds;
  run.models = o.models;
  run.scenarios = o.scenarios;
  run.against = o.against;
  run.seqlen = o.seqlen;
  run.headdim = o.headdim;
  run.sr_bits = o.sr_bits;
  run.alpha = o.alpha;
  return emit_rows(std::move(rows), o.csv, o.json, run);
}

Runner setup_sweep(CLI::App& app) {
  auto o = std::make_shared<SweepOptions>();
  app.add_option("--formats", o->formats,
                 "formats the kernels work in (bf16, fp16, fp32, e4m3), comma-separated (default bf16); a model "
                 "that cannot run in one is skipped with a note");
  app.add_option("--round", o->rounds,
                 "final cast of O: rne (each recipe's own) or rtz, rup, rdn, rna, rto, sr (+o-MODE), comma-separated");
  app.add_option("--model", o->models, "kernel models, comma-separated")->required();
  app.add_option("--scenario", o->scenarios, "scenarios, comma-separated (default sink)");
  app.add_option("--against", o->against, "paired: each row is --model minus this model on the same inputs and seed");
  app.add_option("--seqlen", o->seqlen, "sequence length (default 256)");
  app.add_option("--headdim", o->headdim, "head dimension (default 64)");
  app.add_option("--trials", o->trials, "trials per configuration (default 8)");
  app.add_option("--seed", o->seed, "seed (default 0)");
  app.add_option("--sr-bits", o->sr_bits, "random bits for sr, 1..32 (default 24)");
  app.add_option("--jobs", o->jobs,
                 "threads, 1.." + std::to_string(kMaxJobs) + " (default: the machine's cores, " +
                     std::to_string(default_jobs()) + " here; results do not depend on it)");
  app.add_option("--shard", o->shard,
                 "K/N: run configurations i with i % N == K-1 (the output's run record lets merge check the set)");
  app.add_option("--alpha", o->alpha, "significance level of the verdict, in (0, 1) (default 1e-3)");
  app.add_option("--csv", o->csv,
                 "also write the rows (with sufficient statistics and a last `# run` line recording the "
                 "parameters, seed and shard) as CSV");
  app.add_flag("--json", o->json, "print JSON instead of the table");
  app.footer("Exit status: 0 no row is biased; 1 a row's verdict is \"biased\" (as bias-test); 2 bad input.");
  return [o] { return run_sweep(*o); };
}

}  // namespace
FLASHBITS_SUBCOMMAND(sweep, "sweep", "Bias and error of kernel models over formats, roundings and scenarios",
                     setup_sweep);
}  // namespace fb::cli
