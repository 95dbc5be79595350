// tools/cmd_bias.cpp: `flashbits bias-test` (docs/CLI.md): is a kernel model's O (and
// delta) biased on a scenario, or are captured traces' outputs biased?
//
// This file parses and checks the options, resolves the models and prints; the run itself
// (samples, statistics, the reference and excess, non-finite rows, --by-max groups) is
// studies/bias_run.hpp, which the Python module's bias_test runs too.
// - --model M: one sample per trial over a 1-head problem of --seqlen x --headdim.
// - --traces PATH...: one sample per set of keys and values of the captures given: files, and
//   each directory's *.safetensors and *.npz (sorted), pooled in the order the paths are given
//   (--traces a b, or --traces a --traces b); a file given twice is one sample (the run counts
//   repeats once).
// - --model M --against B: the paired difference of M and B on the same inputs and seed.
// - --model M --recipe FILE: M with the recipe file's stage formats and SFU tables
//   (tools/recipe_file.hpp); trials are seeded as for M alone, so both see the same inputs.
// - --by-max: descriptive only; the verdict and exit code are unchanged.
// - --jobs J: the trials (or trace files) run on J threads, one trial per thread at a time
//   (a default one-head problem has too few row blocks to split one run); the output does
//   not depend on J (studies/bias_run.hpp BiasRun::threads).
// Exit 1 when the kernel adds bias to O or delta, or when an output was non-finite (no
// verdict); 4 (kExitInconclusive) when the test could not have detected the bias at stake.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include "formats/decimal_text.hpp"
#include "attention/kernel_models.hpp"
#include "studies/bias_run.hpp"
#include "attention/trace_inputs.hpp"
#include "tools/capture_options.hpp"
#include "traces/capture_import.hpp"
#include "traces/safetensors.hpp"
#include "tools/cli_common.hpp"
#include "api/models.hpp"
#include "studies/scenarios.hpp"

namespace fb::cli {
namespace {

struct BiasOptions {
  std::string model, against, recipe, scenario = "sink", dtype = "bf16";
  std::vector<std::string> traces;  // files and directories, pooled in this order
  int trials = 32, seqlen = 256, headdim = 64, jobs = default_jobs();
  double alpha = 1e-3, at_stake = attn::kDefaultAtStakeUlps;
  std::uint64_t seed = 0;
  bool json = false, by_max = false;
  CaptureOptionText capture;  // --traces: what bare captures lack (--source, --scale, --causal, --layout)
  CLI::Option* dtype_option = nullptr;
  // The contract's synopsis gives --scenario and --trials with --traces too: set, they are
  // checked or noted there, never ignored silently.
  CLI::Option *scenario_option = nullptr, *trials_option = nullptr, *seed_option = nullptr;
};

void print_spread(const char* what, const attn::ValueSpread& s) {
  std::printf("%-6s %zu values: %zu negative, %zu positive; mean %+.4g ulp, sd %.4g, from %+.4g to %+.4g\n", what,
              s.values, s.negatives, s.positives, s.mean, s.sd, s.min, s.max);
}

// An excess that differs from 0 is not yet a verdict (its direction against the floor's
// decides it): said on its line, so that "differs from 0" above "no detectable added bias"
// does not read as a contradiction.
constexpr const char* kExcessNote = " (whether that adds bias: the comparisons below)";

// when_differs: appended to the line's "mean differs from 0".
void print_stats(const char* what, const attn::BiasStatistics& s, double alpha, bool run_has_verdict,
                 const char* when_differs = "") {
  if (s.n == 0) {  // every sample left out (non-finite outputs): no mean either
    std::printf("%-6s n=0  (no finite sample: no mean, no interval, no t test)  -> %s\n", what,
                attn::stat_verdict(s, run_has_verdict).c_str());
    return;
  }
  if (!s.has_interval()) {
    // No interval and no detectable size (the JSON's nulls): one sample; or every sample equal,
    // where a nonzero mean's t is infinite and its p the sign test's (statistics.hpp), and an
    // exactly zero one has no t test at all.
    const std::string shape = !s.has_spread() ? "  (one sample: no interval, no t test)"
                              : s.mean != 0.0 ? std::string(" in every sample (no spread: no interval; t=") +
                                                    (s.t_statistic > 0 ? "+inf" : "-inf") + ", so p is the sign test's)"
                                              : " in every sample (no spread: no interval, no t test)";
    std::printf("%-6s n=%zu  mean %+.4g ulp%s  sign +%zu/-%zu p=%s\n       min detectable: none %s  -> %s\n", what, s.n,
                s.mean, shape.c_str(), s.positives, s.negatives, attn::p_value_text(s.p_sign).c_str(),
                s.has_spread() ? "without spread" : "with one sample", attn::stat_verdict(s, run_has_verdict).c_str());
    return;
  }
  std::printf(
      "%-6s n=%zu  mean %+.4g ulp  %.6g%% CI [%+.4g, %+.4g]  t=%.4g p=%s  sign +%zu/-%zu p=%s\n"
      "       min detectable %.3g ulp  -> %s%s\n",
      what, s.n, s.mean, 100.0 * (1.0 - alpha), s.ci_low, s.ci_high, s.t_statistic, attn::p_value_text(s.p_t).c_str(),
      s.positives, s.negatives, attn::p_value_text(s.p_sign).c_str(), s.min_detectable,
      attn::stat_verdict(s, run_has_verdict).c_str(), s.biased && run_has_verdict ? when_differs : "");
}

// One output's verdict against its floor, with its reason (the size next to the floor, or
// why the test cannot decide).
// baseline: --against's model (empty: the floor), which "less biased than" then names.
void print_comparison(const char* what, const attn::FloorComparison& c, const std::string& baseline) {
  const std::string verdict = !baseline.empty() && c.verdict == attn::Verdict::less_biased_than_floor
                                  ? "less biased than " + baseline
                                  : attn::verdict_text(c.verdict);
  std::printf("%-6s %s: %s\n", what, verdict.c_str(), c.reason.c_str());
}

// --model mode: checks the options and resolves the models (the run checks nothing of them).
attn::BiasRun model_run(const BiasOptions& o) {
  if (!attn::known_scenario(o.scenario))
    throw InputError("--scenario " + o.scenario + ": unknown scenario (" + attn::scenario_list() + ")");
  // One trial is allowed: the contract's "too few trials" is a verdict, inconclusive (exit 4).
  if (o.trials < 1) throw InputError("--trials: expected at least 1");
  if (o.seqlen < 1 || o.headdim < 1)
    throw InputError("--seqlen " + std::to_string(o.seqlen) + " --headdim " + std::to_string(o.headdim) +
                     ": expected positive sizes (an empty problem has no errors to test)");
  check_problem_size(1, 1, o.seqlen, o.headdim);
  check_trials(o.trials, 1);
  const Format dtype = parse_format_or_throw(o.dtype, "--dtype");
  attn::BiasRun run;
  run.model = api::resolve_model({o.model, dtype, "model", o.recipe, o.dtype_option->count() > 0});
  warn_about_model(run.model.name, run.model.recipe->warning);
  if (!o.against.empty()) {
    try {
      run.against = api::parse_against_model(o.against, *run.model.recipe, dtype);
    } catch (const std::invalid_argument& e) {
      throw InputError("--against " + o.against + ": " + e.what());
    }
    warn_about_model(run.against->name, run.against->recipe->warning);
  }
  run.scenario = o.scenario;
  run.trials = o.trials;
  run.seqlen = o.seqlen;
  run.headdim = o.headdim;
  run.seed = o.seed;
  return run;
}

// --traces mode: capture files and the sorted *.safetensors and *.npz of directories, in the
// order the paths are given, pooled into one run (as one directory's files are), each read
// with the capture statements (--dtype names the captures' format here).
attn::BiasRun traces_run(const BiasOptions& o) {
  attn::BiasRun run;
  CaptureOptionText statement = o.capture;
  if (o.dtype_option->count() > 0) statement.dtype = o.dtype;
  run.capture = capture_options_or_throw(statement);
  // One rule for the paths, shared with Python's bias_test (traces/capture_import.hpp).
  fb::CaptureListing listed = fb::list_captures(std::vector<std::filesystem::path>(o.traces.begin(), o.traces.end()));
  // --scenario states what the traces hold: a trace that records another scenario is a
  // conflict (exit 2); one that records none (a bare capture) is taken as stated, and said.
  if (o.scenario_option->count() > 0) {
    if (!attn::known_scenario(o.scenario))
      throw InputError("--scenario " + o.scenario + ": unknown scenario (" + attn::scenario_list() + ")");
    std::size_t unrecorded = 0;
    for (const std::filesystem::path& path : listed.captures) {
      if (path.extension() != ".safetensors") {
        ++unrecorded;
        continue;
      }
      const Safetensors file = read_safetensors(path);
      const auto recorded = file.metadata.find("scenario");
      if (recorded == file.metadata.end())
        ++unrecorded;
      else if (recorded->second != o.scenario)
        throw InputError("--scenario " + o.scenario + " conflicts with " + path.string() +
                         ": its __metadata__ scenario is " + recorded->second +
                         " (give the traces of one scenario, or leave --scenario out)");
    }
    if (unrecorded > 0)
      std::cerr << "note: --scenario " << o.scenario << ": " << unrecorded << " of " << listed.captures.size()
                << " capture(s) record no scenario; taken as stated\n";
  }
  // The traces hold their inputs and their samples: a trial count or seed has nothing to set.
  for (const CLI::Option* generator : {o.trials_option, o.seed_option})
    if (generator->count() > 0)
      std::cerr << "note: " << generator->get_name() << " " << generator->as<std::string>()
                << " has no effect with --traces: the traces hold their inputs, and each kv head of each trace is "
                   "one sample\n";
  run.traces = std::move(listed.captures);
  run.traces_label = std::move(listed.label);
  return run;
}

void print_report(const attn::BiasReport& r, const BiasOptions& o) {
  const bool has_verdict = !r.no_verdict;
  std::cout << "bias-test: " << r.subject << "\n" << r.provenance << "\n";
  for (const std::string& note : r.notes) std::cout << "note: " << note << "\n";
  if (!r.delta_note.empty()) std::cout << r.delta_note << "\n";
  if (r.rows_without_keys > 0)
    std::cout
        << r.rows_without_keys
        << " row(s) see no key (a causal mask with more queries than keys): O and delta there are what a kernel's "
           "guard writes (0 in the flash kernels and SDPA's math path, NaN from an eager softmax of all -inf), no "
           "rounding to measure, so "
           "they are left out of the samples\n";
  if (r.repeated_samples > 0)
    std::cout << r.repeated_samples
              << " sample(s) repeat an earlier sample's inputs and outputs bit for bit (a capture given twice?): "
                 "counted once, since a copy is no independent sample\n";
  if (r.shared_kv_clusters > 0)
    std::cout << r.shared_kv_clusters
              << " cluster(s) read the same keys and values as an earlier one (another head, batch entry or trace): "
                 "pooled into its sample, since rows that share keys and values are no independent samples\n";
  std::cout << "samples: " << r.samples_note << "\n";
  std::cout << "error against exact (every interval and test of this report at "
            << shortest_decimal(r.alpha_per_comparison) << ", the level of each of the run's " << r.comparisons
            << " comparisons against " << (r.paired ? r.baseline : std::string("the floor")) << " below):\n";
  print_stats("O", r.o, r.alpha_per_comparison, has_verdict);
  if (r.has_delta) print_stats("delta", r.delta, r.alpha_per_comparison, has_verdict);
  if (r.has_quantisation) {
    std::cout << "input quantisation (exact attention of the quantised inputs with their descales, against "
                 "exact; not the kernel's arithmetic):\n";
    print_stats("O", r.o_quant, r.alpha_per_comparison, has_verdict);
    if (r.has_delta) print_stats("delta", r.delta_quant, r.alpha_per_comparison, has_verdict);
  }
  const std::string target = r.has_quantisation ? "the exact attention of the quantised inputs" : "exact";
  if (r.paired) {
    // B is no floor: it has a bias of its own (its line here), and the verdict below is
    // relative to it, never a statement that either kernel is unbiased.
    std::cout << "baseline (not a floor: its own bias is shown here): " << r.baseline
              << " on the same inputs and seed, against " << target << ":\n";
  } else {
    std::cout << "floor: the correctly rounded reference (" << target
              << " rounded once, where the kernel keeps its outputs), against " << target << ":\n";
  }
  print_stats("O", r.o_cr, r.alpha_per_comparison, has_verdict);
  if (r.has_delta) print_stats("delta", r.delta_cr, r.alpha_per_comparison, has_verdict);
  if (r.paired)
    std::cout << "excess over " << r.baseline << " (the kernel's error minus " << r.baseline
              << "'s, sample by sample):\n";
  else
    std::cout << "excess over the floor (the kernel's error minus the floor's, sample by sample):\n";
  print_stats("O", r.o_vs_floor.excess, r.alpha_per_comparison, has_verdict, kExcessNote);
  if (r.has_delta) print_stats("delta", r.delta_vs_floor.excess, r.alpha_per_comparison, has_verdict, kExcessNote);
  std::printf("spread of O over %zu elements (descriptive): RMS %.4g ulp (%s %.4g), largest |error| %.4g ulp\n",
              r.o_spread.elements, r.o_spread.kernel_rms(), r.paired ? (r.baseline + "'s").c_str() : "the floor's",
              r.o_spread.floor_rms(), r.o_spread.kernel_max_abs);
  std::cout << "(O and delta in ulps of " << r.units_format
            << ", the kernel's output format, also where it keeps them wider or unrounded: O at max(|O|, sum_j P_ij "
               "|V_jc|), delta "
               "at max(|delta|, sum|dO*O|), the scales of their rounding errors)\n";
  if (o.by_max) {
    std::cout << "by row max: " << r.by_max.size()
              << " distinct values, each the mean error over the rows sharing it (descriptive: the values "
                 "share each trial's inputs, so no test is made on them)\n";
    print_spread("O", attn::describe_values(r.by_max.o_means()));
    const std::vector<double> dm = r.by_max.delta_means();
    if (!dm.empty()) print_spread("delta", attn::describe_values(dm));
  }
  if (r.no_verdict) {
    std::cout << "non-finite output: " << r.non_finite_rows
              << " row(s) with a NaN or infinite output on finite inputs ("
              << (r.from_traces ? "the captured kernel's o or delta" : "the model's O or delta")
              << "): no verdict; the statistics above leave those rows (trials) out\n";
    for (const std::string& w : r.non_finite_where) std::cout << "  " << w << "\n";
    std::cout << "verdict: none (the output is not finite everywhere)\n";
    return;
  }
  // Each comparison at alpha / comparisons (studies/verdict.hpp), which holds the run's
  // false alarms to alpha; said here, since each line's p-values are judged at that level.
  std::cout << "against " << (r.paired ? r.baseline : std::string("the floor")) << " (alpha "
            << shortest_decimal(o.alpha) << " for the run: each of its " << r.comparisons << " comparisons at "
            << shortest_decimal(r.alpha_per_comparison) << "; at stake " << shortest_decimal(o.at_stake)
            << " ulp), signed error:\n";
  print_comparison("O", r.o_vs_floor, r.baseline);
  if (r.has_delta) print_comparison("delta", r.delta_vs_floor, r.baseline);
  std::cout << "magnitude error (sign of the exact value x error: > 0 away from zero, < 0 toward it; a rounding "
               "toward zero cancels in the signed mean of outputs of either sign and shows here):\n";
  print_comparison("O", r.o_magnitude_vs_floor, r.baseline);
  if (r.has_delta) print_comparison("delta", r.delta_magnitude_vs_floor, r.baseline);
  // With --against every verdict names B: "no detectable added bias" alone read as "unbiased"
  // for a kernel that rounds toward zero, measured against another that does.
  const std::string basis =
      r.paired ? "the paired difference with " + r.baseline : "the excess over the correctly rounded reference";
  const std::string relative = r.paired ? " relative to " + r.baseline : "";
  std::string words;
  switch (r.verdict) {
    case attn::Verdict::adds_bias:
      words = "this kernel adds bias" + relative;
      break;
    case attn::Verdict::less_biased_than_floor:
      words = "this kernel is less biased than " + (r.paired ? r.baseline : std::string("its format's floor"));
      break;
    case attn::Verdict::no_detectable_bias:
      words = "no detectable added bias" + relative;
      break;
    case attn::Verdict::inconclusive:
      words = "inconclusive (the reasons above)";
      break;
  }
  // fp8 kernels: the verdict is about the arithmetic on the quantised inputs; the line says so,
  // and names a quantisation share that is itself significant (studies/bias_run.hpp).
  const std::string quantisation = attn::quantisation_verdict_note(r);
  std::cout << "verdict (from " << basis << "): " << words << (quantisation.empty() ? "" : "; " + quantisation) << "\n";
  // Traces without a delta: delta is the model's reduction of the captured O and dO. Where it
  // alone decides the verdict, the verdict is not the hardware's output alone, and says so.
  const bool o_decides = r.o_vs_floor.verdict == r.verdict || r.o_magnitude_vs_floor.verdict == r.verdict;
  if (r.from_traces && r.has_delta && !r.delta_note.empty() && r.verdict != attn::Verdict::inconclusive && !o_decides)
    std::cout << "  (decided by delta, which the model computed from the captured O and dO of the traces that hold "
                 "no delta)\n";
}

int run_bias_test(const BiasOptions& o) {
  if (o.model.empty() == o.traces.empty())
    throw InputError("give exactly one of --model NAME or --traces PATH... (trace files or directories)");
  if (!o.against.empty() && o.model.empty()) throw InputError("--against: needs --model");
  if (!o.recipe.empty() && o.model.empty()) throw InputError("--recipe: needs --model (the recipe changes that model)");
  alpha_or_throw(o.alpha);
  const int jobs = jobs_or_throw(o.jobs);
  attn::BiasRun run = o.model.empty() ? traces_run(o) : model_run(o);
  run.alpha = o.alpha;
  run.at_stake = at_stake_or_throw(o.at_stake);
  run.threads = jobs;
  std::optional<ProgressBar> progress;
  attn::BiasHooks hooks;
  // A thread the system cannot start is exit 2 naming --jobs, as in sweep.
  hooks.start_threads = [](int threads, const std::function<void()>& worker, const std::function<void()>& stop) {
    run_on_threads(threads, worker, stop);
  };
  if (!o.model.empty()) {
    progress.emplace("trials", static_cast<std::uint64_t>(o.trials));
    hooks.after_trial = [&progress] { progress->advance(); };
  }
  const attn::BiasReport report = attn::run_bias(run, hooks);
  progress.reset();  // clears its line before the report
  if (o.json)
    std::cout << json_text(attn::bias_report_json(report, o.by_max), 2) << "\n";
  else
    print_report(report, o);
  if (report.biased || report.no_verdict) return kExitCheckFailed;
  return report.verdict == attn::Verdict::inconclusive ? kExitInconclusive : kExitOk;
}

Runner setup_bias_test(CLI::App& app) {
  auto o = std::make_shared<BiasOptions>();
  app.add_option("--model", o->model, "kernel model");
  app.add_option("--against", o->against, "paired: measure --model minus this model on the same inputs");
  app.add_option("--recipe", o->recipe, "JSON file changing --model's stage formats and SFU tables");
  auto* traces = app.add_option("--traces", o->traces,
                                "traces or bare captures, or directories of .safetensors/.npz ones, pooled into "
                                "one run (--traces A B, or --traces A --traces B; the traces hold their inputs: "
                                "--scenario is checked against their metadata, --trials and --seed have no effect "
                                "(a note says so), --seqlen and --headdim are refused; --dtype names a capture's "
                                "format)");
  auto* scenario = app.add_option("--scenario", o->scenario, attn::scenario_list() + " (default sink)");
  auto* trials =
      app.add_option("--trials", o->trials, "trials (default 32; fewer than 8 is inconclusive)")->check(trials_in(1));
  app.add_option("--alpha", o->alpha,
                 "the run's significance level, in (0, 1) (default 1e-3): each of its comparisons (O and delta, "
                 "signed and magnitude) is made at alpha / their number")
      ->check(decimal_number());
  app.add_option("--at-stake", o->at_stake,
                 "the smallest bias (ulps) that matters: a test that could not detect it is inconclusive "
                 "(default 0.05)")
      ->check(decimal_number());
  auto* seed = add_seed_option(app, o->seed, "seed (default 0)");
  auto* seqlen = app.add_option("--seqlen", o->seqlen, "sequence length (default 256)")->check(size_in());
  auto* headdim = app.add_option("--headdim", o->headdim, "head dimension (default 64)")->check(headdim_in());
  o->dtype_option = app.add_option("--dtype", o->dtype,
                                   "dtype for models that do not name one (default bf16); with --traces, the format "
                                   "of the captures' q, k, v");
  // A trace run has no problem size to set: refused (exit 2, naming both options). --scenario,
  // --trials and --seed are in the contract's synopsis beside --traces: traces_run checks the
  // scenario against the traces' metadata and notes the others on stderr.
  for (CLI::Option* generator : {seqlen, headdim}) traces->excludes(generator);
  o->scenario_option = scenario;
  o->trials_option = trials;
  o->seed_option = seed;
  for (CLI::Option* statement : add_capture_options(app, o->capture, false, false)) statement->needs(traces);
  add_jobs_option(app, o->jobs);
  app.add_flag("--by-max", o->by_max, "also describe the errors grouped by each row's exact max score (descriptive)");
  app.add_flag("--json", o->json, "JSON output");
  app.footer(
      "Exit status: 0 no detectable added bias, or less biased than its format's floor; 1 the kernel adds bias to O "
      "or delta, or an output is non-finite (no verdict); 4 inconclusive: the test could not have detected a bias "
      "of --at-stake ulp; 2 bad input.");
  return [o] { return run_bias_test(*o); };
}

}  // namespace
FLASHBITS_SUBCOMMAND(bias_test, "bias-test", "Test a kernel model or traces for a signed bias in O and delta",
                     setup_bias_test);
}  // namespace fb::cli
