// tools/cmd_bias_test.cpp: `flashbits bias-test` (docs/CLI.md): is a kernel model's O (and
// delta) biased on a scenario?
//
// Samples:
// - --model: one sample per trial, the mean signed error (against exact_attention; O in
//   ulps of the output format at the exact value, delta in reduction ulps as
//   sweep_table.hpp delta_units says) of O and of delta over a 1-head problem
//   of --seqlen x --headdim drawn with trial_seed(seed, model/scenario, trial).
// - --traces DIR: one sample per captured row of every *.safetensors in DIR: the
//   captured o (and delta) against exact_attention of the captured inputs (no replay).
// Statistics: attention/statistics.hpp summarize(). Exit 1 when O or delta is biased.
// No verdict on data that cannot support one: a trace with a NaN or infinity in q, k, v or
// dO, or with a dimension of 0 (and --seqlen/--headdim 0) is bad input (exit 2, the file
// and rows named); a model (or captured kernel) whose O or delta is non-finite on finite
// inputs is reported with its rows, those rows are left out of the statistics, and the run
// gets no verdict (exit 1, JSON verdict "no verdict (non-finite output)").
// - --model M --against B: one sample per trial, the paired difference of M and B on the
//   same inputs and seed (sweep_table.hpp measure_paired): the bias M adds relative to B,
//   free of the input noise they share (fp8 quantisation, say).
// - --model M --recipe FILE: M with the recipe file's stage formats and SFU tables
//   (tools/recipe_file.hpp); trials are seeded as for M alone, so both see the same inputs.
// - --by-max (descriptive; the verdict and exit code are unchanged): the rows grouped by
//   their exact max scaled score, one value per distinct max (the mean over every row
//   sharing it, across trials or traces), summarised by count, mean, spread and signs.
//   A recipe whose rounding depends on the max's value (P̄ = exp(S - m) cast to bf16)
//   errs systematically per value; a bias every token shares gives one sign for every
//   value. No test is made on these values: they are not independent samples (rows of
//   one trial share its keys and values, so a trial's chance offset moves every group
//   at once), which would make any CI too narrow.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "attention/attention.hpp"
#include "attention/kernel_models.hpp"
#include "tools/cli_common.hpp"
#include "tools/recipe_file.hpp"
#include "tools/sweep_table.hpp"

namespace fb::cli {
namespace {

struct BiasOptions {
  std::string model, against, recipe, traces, scenario = "sink", dtype = "bf16";
  int trials = 32, seqlen = 256, headdim = 64;
  double alpha = 1e-3;
  std::uint64_t seed = 0;
  bool json = false, by_max = false;
};

// --by-max: per distinct row max, the sums of the row samples that share it.
class RowMaxGroups {
 public:
  // o_row: the row's mean O error; delta_row: its delta error, or nullptr without one.
  void add(double row_max, double o_row, const double* delta_row) {
    Group& g = groups_[row_max];
    g.o_sum += o_row;
    ++g.o_rows;
    if (delta_row) {
      g.delta_sum += *delta_row;
      ++g.delta_rows;
    }
  }
  std::size_t size() const { return groups_.size(); }
  std::vector<double> o_means() const {
    std::vector<double> out;
    for (const auto& [max, g] : groups_) out.push_back(g.o_sum / static_cast<double>(g.o_rows));
    return out;
  }
  std::vector<double> delta_means() const {
    std::vector<double> out;
    for (const auto& [max, g] : groups_)
      if (g.delta_rows > 0) out.push_back(g.delta_sum / static_cast<double>(g.delta_rows));
    return out;
  }

 private:
  struct Group {
    double o_sum = 0, delta_sum = 0;
    long long o_rows = 0, delta_rows = 0;
  };
  std::map<double, Group> groups_;
};

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

// --by-max's description of the per-value means (no inference: see the file comment).
struct ValueSpread {
  std::size_t values = 0, negatives = 0, positives = 0;
  double mean = 0, sd = 0, min = 0, max = 0;
};
ValueSpread describe_values(const std::vector<double>& v) {
  ValueSpread s;
  s.values = v.size();
  if (v.empty()) return s;
  const attn::BiasStatistics moments = attn::summarize(v);  // its mean, sd and signs only
  s.mean = moments.mean;
  s.sd = moments.stddev;
  s.negatives = moments.negatives;
  s.positives = moments.positives;
  s.min = *std::min_element(v.begin(), v.end());
  s.max = *std::max_element(v.begin(), v.end());
  return s;
}
nlohmann::ordered_json spread_json(const ValueSpread& s) {
  nlohmann::ordered_json j;
  j["values"] = s.values;
  j["mean_ulps"] = s.mean;
  j["sd_ulps"] = s.sd;
  j["min_ulps"] = s.min;
  j["max_ulps"] = s.max;
  j["negatives"] = s.negatives;
  j["positives"] = s.positives;
  return j;
}
void print_spread(const char* what, const ValueSpread& s) {
  std::printf("%-6s %zu values: %zu negative, %zu positive; mean %+.4g ulp, sd %.4g, from %+.4g to %+.4g\n", what,
              s.values, s.negatives, s.positives, s.mean, s.sd, s.min, s.max);
}

// A statistic's own verdict, or why it has none (no finite samples; the run's rows with a
// non-finite output, which leave the whole run without a verdict).
std::string stat_verdict(const attn::BiasStatistics& s, bool run_has_verdict) {
  if (s.n == 0) return "no samples";
  if (!run_has_verdict) return "none (non-finite output elsewhere in the run)";
  return s.verdict();
}

nlohmann::ordered_json stats_json(const attn::BiasStatistics& s, bool run_has_verdict = true) {
  nlohmann::ordered_json j;
  j["n"] = s.n;
  j["mean_ulps"] = s.mean;
  j["ci"] = {s.ci_low, s.ci_high};
  j["t"] = s.t_statistic;
  j["p_t"] = s.p_t;
  j["positives"] = s.positives;
  j["negatives"] = s.negatives;
  j["p_sign"] = s.p_sign;
  j["min_detectable_ulps"] = s.min_detectable;
  j["verdict"] = stat_verdict(s, run_has_verdict);
  return j;
}

void print_stats(const char* what, const attn::BiasStatistics& s, double alpha, bool run_has_verdict = true) {
  std::printf("%-6s n=%zu  mean %+.4g ulp  %.4g%% CI [%+.4g, %+.4g]  t=%.4g p=%s  sign +%zu/-%zu p=%s\n"
              "       min detectable bias %.3g ulp  -> %s\n",
              what, s.n, s.mean, 100.0 * (1.0 - alpha), s.ci_low, s.ci_high, s.t_statistic,
              attn::p_value_text(s.p_t).c_str(), s.positives, s.negatives, attn::p_value_text(s.p_sign).c_str(),
              s.min_detectable, stat_verdict(s, run_has_verdict).c_str());
}

int run_bias_test(const BiasOptions& o) {
  if (o.model.empty() == o.traces.empty()) throw InputError("give exactly one of --model NAME or --traces DIR");
  if (!o.against.empty() && o.model.empty()) throw InputError("--against: needs --model");
  if (!o.recipe.empty() && o.model.empty()) throw InputError("--recipe: needs --model (the recipe changes that model)");
  alpha_or_throw(o.alpha);
  // Per output: the error against exact, the correctly rounded reference's error on the same
  // inputs, and the excess (error minus reference, element by element, then averaged like
  // the error). Paired runs (--against) have no reference: their difference is the excess.
  std::vector<double> o_samples, d_samples, o_cr_samples, d_cr_samples, o_excess, d_excess;
  RowMaxGroups by_max;
  std::string delta_note;
  std::string subject, provenance;
  // Rows whose output is NaN or infinite on finite inputs: their samples are left out, and
  // the run gets no verdict (a statistic of the rest would hide the failure).
  std::vector<std::string> non_finite;
  std::size_t non_finite_count = 0;
  if (!o.model.empty()) {
    const auto names = attn::scenario_names();
    if (std::find(names.begin(), names.end(), o.scenario) == names.end())
      throw InputError("--scenario " + o.scenario + ": unknown scenario");
    if (o.trials < 2) throw InputError("--trials: expected at least 2");
    if (o.seqlen < 1 || o.headdim < 1)
      throw InputError("--seqlen " + std::to_string(o.seqlen) + " --headdim " + std::to_string(o.headdim) +
                       ": expected positive sizes (an empty problem has no errors to test)");
    check_problem_size(1, 1, o.seqlen, o.headdim);
    check_trials(o.trials, 2);
    const Format dtype = parse_format_or_throw(o.dtype, "--dtype");
    attn::ModelHandle model;
    try {
      model = parse_model_for_inputs(o.model, dtype);
    } catch (const std::invalid_argument& e) {
      throw InputError("--model " + o.model + ": " + e.what());
    }
    // Trials are keyed by the model's own name: with and without the recipe, the same inputs.
    const std::string seed_key = model.name + "/" + o.scenario;
    if (!o.recipe.empty()) model = apply_recipe_file(model, o.recipe);
    attn::ModelHandle against;
    if (!o.against.empty()) {
      try {
        against = parse_model_for_inputs(o.against, dtype);
      } catch (const std::invalid_argument& e) {
        throw InputError("--against " + o.against + ": " + e.what());
      }
    }
    subject = model.name + (o.against.empty() ? "" : " against " + against.name) + " on " + o.scenario + " (seqlen " + std::to_string(o.seqlen) + ", head dim " +
              std::to_string(o.headdim) + ", " + std::to_string(o.trials) + " trials)";
    provenance = model.recipe->structure == attn::Structure::correctly_rounded
                     ? "the correctly rounded reference (exact attention, rounded once per output): no kernel arithmetic"
                 : model.recipe->hardware_validated()
                     ? "emulated model, all parts validated on hardware"
                     : "emulated model; SFU " + model.recipe->sfu.describe() +
                           " -- parts of this model are unmeasured on hardware";
    ProgressBar progress("trials", static_cast<std::uint64_t>(o.trials));
    for (int t = 0; t < o.trials; ++t) {
      const std::uint64_t s = trial_seed(o.seed, seed_key, static_cast<std::uint64_t>(t));
      const auto in = attn::make_scenario(o.scenario, s, 1, 1, o.seqlen, o.headdim, model.recipe->input, true);
      const TrialErrors e = o.against.empty() ? measure_errors(model, in, s, false)
                                              : measure_paired(model, against, in, s);
      if (!e.non_finite_rows.empty()) {
        non_finite_count += e.non_finite_rows.size();
        non_finite.push_back("trial " + std::to_string(t) + ": " + std::to_string(e.non_finite_rows.size()) +
                             " row(s) " + describe_rows(e.non_finite_rows, 1, o.seqlen));
        progress.advance();
        continue;
      }
      o_samples.push_back(mean_of(e.o_ulps));
      if (!e.delta_ulps.empty()) d_samples.push_back(mean_of(e.delta_ulps));
      if (!e.o_cr_ulps.empty()) {
        o_cr_samples.push_back(mean_of(e.o_cr_ulps));
        o_excess.push_back(o_samples.back() - o_cr_samples.back());
      }
      if (!e.delta_cr_ulps.empty()) {
        d_cr_samples.push_back(mean_of(e.delta_cr_ulps));
        d_excess.push_back(d_samples.back() - d_cr_samples.back());
      }
      const std::size_t d = static_cast<std::size_t>(o.headdim);
      for (std::size_t r = 0; r < e.row_max.size(); ++r) {
        double row_sum = 0;
        for (std::size_t c = 0; c < d; ++c) row_sum += e.o_ulps[r * d + c];
        by_max.add(e.row_max[r], row_sum / static_cast<double>(d), e.delta_ulps.empty() ? nullptr : &e.delta_ulps[r]);
      }
      progress.advance();
    }
  } else {
    std::vector<std::filesystem::path> files;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(o.traces, ec))
      if (entry.path().extension() == ".safetensors") files.push_back(entry.path());
    if (ec) throw InputError("--traces " + o.traces + ": cannot list directory (" + ec.message() + ")");
    std::sort(files.begin(), files.end());
    if (files.empty()) throw InputError("--traces " + o.traces + ": no .safetensors files");
    int hardware = 0;
    for (const auto& f : files) {
      const Trace trace = read_trace(f);
      hardware += is_hardware_capture(trace);
      const auto in = inputs_from_trace(trace);
      check_inputs_support_statistics(in, trace.source_name());
      const auto exact = attn::exact_attention(in);
      const RawTensor o_bits = trace.bits("o");
      const auto o_vals = tensor_from_trace(trace, "o");
      if (o_vals.data.size() != exact.o.data.size())
        throw TraceError(trace.source_name() + ": tensor o: expected the shape of q");
      // The reference in the final cast's mode of the trace's model (+o-MODE; RNE, every
      // kernel's own cast, when the metadata names no model of o's format).
      ReferenceErrors cr;
      {
        attn::ModelHandle named;
        try {
          if (!trace.metadata().model.empty()) named = parse_model_for_inputs(trace.metadata().model, in.dtype);
        } catch (const std::invalid_argument&) {
        }
        cr = named.recipe && named.recipe->output == o_bits.format
                 ? reference_errors(attn::correctly_rounded_reference(*named.recipe), in, exact)
                 : correctly_rounded_errors(o_bits.format, in, exact);
      }
      const int d = o_vals.cols;
      // The captured kernel's output, non-finite on these finite inputs: reported, not measured.
      std::vector<std::size_t> bad_rows = non_finite_rows(o_vals);
      std::vector<bool> bad(exact.o.data.size() / static_cast<std::size_t>(d), false);
      for (std::size_t r : bad_rows) bad[r] = true;
      std::vector<std::size_t> kept_rows;  // trace row of each sample added below
      for (std::size_t r = 0; r * d < o_vals.data.size(); ++r) {
        if (bad[r]) continue;
        double sum = 0, sum_cr = 0;
        for (int c = 0; c < d; ++c) {
          const double want = exact.o.data[r * d + c];
          sum += (o_vals.data[r * d + c] - want) / attn::ulp_at(o_bits.format, want);
          sum_cr += cr.o_ulps[r * d + c];
        }
        o_samples.push_back(sum / d);
        o_cr_samples.push_back(sum_cr / d);
        o_excess.push_back((sum - sum_cr) / d);
        kept_rows.push_back(r);
      }
      // delta: the captured one, else (PyTorch's SDPA does not return it) the one the
      // trace's kernel computes from the captured O and dO (attn::kernel_delta).
      std::vector<double> kernel_delta;
      if (trace.has("delta")) {
        kernel_delta = tensor_from_trace(trace, "delta").data;
      } else if (in.d_o && !trace.metadata().model.empty()) {
        attn::ModelHandle model;
        try {
          model = parse_model_for_inputs(trace.metadata().model, in.dtype);
        } catch (const std::invalid_argument&) {
        }
        if (model.recipe) {
          for (std::size_t r = 0; r * d < o_vals.data.size(); ++r) {
            const auto v = attn::kernel_delta(model, &in.d_o->data[r * d], &o_vals.data[r * d], d);
            if (!v) {
              kernel_delta.clear();
              break;
            }
            kernel_delta.push_back(*v);
          }
          if (!kernel_delta.empty())
            delta_note = "delta: computed from each trace's captured O and dO as its kernel does (" +
                         trace.metadata().model + "'s reduction), since the capture holds no delta";
        }
      }
      std::vector<double> trace_delta;  // per row (NaN where the row is left out)
      if (!kernel_delta.empty() && exact.delta) {
        if (kernel_delta.size() != exact.delta->data.size())
          throw TraceError(trace.source_name() + ": tensor delta: expected one value per row of q");
        const std::vector<double> unit = delta_units(o_bits.format, *in.d_o, exact.o, *exact.delta);
        for (std::size_t i = 0; i < kernel_delta.size(); ++i) {
          trace_delta.push_back((kernel_delta[i] - exact.delta->data[i]) / unit[i]);
          if (!std::isfinite(kernel_delta[i])) {
            if (!bad[i]) bad_rows.push_back(i);
            bad[i] = true;
          }
          if (bad[i]) continue;
          d_samples.push_back(trace_delta.back());
          d_cr_samples.push_back(cr.delta_ulps[i]);
          d_excess.push_back(trace_delta.back() - cr.delta_ulps[i]);
        }
      }
      const std::size_t first_sample = o_samples.size() - kept_rows.size();
      for (std::size_t k = 0; k < kept_rows.size(); ++k) {
        const std::size_t r = kept_rows[k];
        if (bad[r]) continue;  // its delta was non-finite
        by_max.add(exact.row_max->data[r], o_samples[first_sample + k], trace_delta.empty() ? nullptr : &trace_delta[r]);
      }
      if (!bad_rows.empty()) {
        // A row with a finite O but a non-finite delta already gave its O sample; drop the
        // run's verdict all the same (below), and name every such row.
        std::sort(bad_rows.begin(), bad_rows.end());
        non_finite_count += bad_rows.size();
        non_finite.push_back(trace.source_name() + ": " + std::to_string(bad_rows.size()) + " row(s) " +
                             describe_rows(bad_rows, in.q.heads, in.q.rows));
      }
    }
    subject = std::to_string(files.size()) + " traces in " + o.traces + " (one sample per row)";
    provenance = std::to_string(hardware) + " of " + std::to_string(files.size()) +
                 " traces are hardware captures (source cuda:...); the rest are emulated";
  }
  const attn::BiasStatistics so = attn::summarize(o_samples, o.alpha);
  const attn::BiasStatistics sd = attn::summarize(d_samples, o.alpha);
  const bool paired = !o.against.empty();
  // The verdict's statistic: the excess over the correctly rounded reference (the part of
  // the error that is the kernel's, not its output format's); paired runs: the difference.
  const attn::BiasStatistics eo = paired ? so : attn::summarize(o_excess, o.alpha);
  const attn::BiasStatistics ed = paired ? sd : attn::summarize(d_excess, o.alpha);
  const bool has_delta = !d_samples.empty();
  const bool no_verdict = non_finite_count > 0;
  const bool biased = !no_verdict && (eo.biased || (has_delta && ed.biased));
  const char* verdict_basis = paired ? "the paired difference" : "the excess over the correctly rounded reference";
  const std::string non_finite_text =
      std::to_string(non_finite_count) + " row(s) with a NaN or infinite output on finite inputs (" +
      (o.model.empty() ? "the captured kernel's o or delta" : "the model's O or delta") +
      "): no verdict; the statistics above leave those rows (trials) out";
  if (o.json) {
    nlohmann::ordered_json j;
    j["subject"] = subject;
    j["provenance"] = provenance;
    if (!delta_note.empty()) j["delta_note"] = delta_note;
    j["alpha"] = o.alpha;
    j["o"] = stats_json(so, !no_verdict);
    if (has_delta) j["delta"] = stats_json(sd, !no_verdict);
    if (!paired) {
      nlohmann::ordered_json cr, ex;
      cr["o"] = stats_json(attn::summarize(o_cr_samples, o.alpha), !no_verdict);
      ex["o"] = stats_json(eo, !no_verdict);
      if (has_delta) {
        cr["delta"] = stats_json(attn::summarize(d_cr_samples, o.alpha), !no_verdict);
        ex["delta"] = stats_json(ed, !no_verdict);
      }
      j["correctly_rounded"] = cr;
      j["excess"] = ex;
    }
    if (no_verdict) {
      nlohmann::ordered_json nf;
      nf["rows"] = non_finite_count;
      nf["where"] = non_finite;
      j["non_finite_output"] = nf;
    }
    j["verdict_from"] = no_verdict ? "none" : paired ? "paired" : "excess";
    j["verdict"] = no_verdict ? "no verdict (non-finite output)" : biased ? "biased" : "no detectable bias";
    if (o.by_max) {
      nlohmann::ordered_json g;
      g["distinct_values"] = by_max.size();
      g["o"] = spread_json(describe_values(by_max.o_means()));
      const std::vector<double> dm = by_max.delta_means();
      if (!dm.empty()) g["delta"] = spread_json(describe_values(dm));
      j["by_row_max"] = g;
    }
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << "bias-test: " << subject << "\n" << provenance << "\n";
    if (!delta_note.empty()) std::cout << delta_note << "\n";
    if (paired) {
      print_stats("O", so, o.alpha, !no_verdict);
      if (has_delta) print_stats("delta", sd, o.alpha, !no_verdict);
      std::cout << "(paired: " << o.model << " minus " << o.against << " on the same inputs and seed; O in ulps "
                   "of its format at max(|O|, sum_j P_ij |V_jc|), delta in ulps of O's format at max(|delta|, "
                   "sum|dO*O|))\n";
    } else {
      std::cout << "error against exact:\n";
      print_stats("O", so, o.alpha, !no_verdict);
      if (has_delta) print_stats("delta", sd, o.alpha, !no_verdict);
      std::cout << "correctly rounded reference (exact, rounded once to the output format) on the same inputs:\n";
      print_stats("O", attn::summarize(o_cr_samples, o.alpha), o.alpha, !no_verdict);
      if (has_delta) print_stats("delta", attn::summarize(d_cr_samples, o.alpha), o.alpha, !no_verdict);
      std::cout << "excess over the reference (error minus the reference's, element by element):\n";
      print_stats("O", eo, o.alpha, !no_verdict);
      if (has_delta) print_stats("delta", ed, o.alpha, !no_verdict);
      std::cout << "(O in ulps of its format at the exact value; delta in ulps of O's format at "
                   "max(|delta|, sum|dO*O|), the scale of its rounding errors)\n";
    }
    if (o.by_max) {
      std::cout << "by row max: " << by_max.size()
                << " distinct values, each the mean error over the rows sharing it (descriptive: the values "
                   "share each trial's inputs, so no test is made on them)\n";
      print_spread("O", describe_values(by_max.o_means()));
      const std::vector<double> dm = by_max.delta_means();
      if (!dm.empty()) print_spread("delta", describe_values(dm));
    }
    if (no_verdict) {
      std::cout << "non-finite output: " << non_finite_text << "\n";
      for (const std::string& w : non_finite) std::cout << "  " << w << "\n";
      std::cout << "verdict: none (the output is not finite everywhere)\n";
    } else {
      std::cout << "verdict (from " << verdict_basis << "): "
                << (biased ? "this kernel adds bias" : "no detectable bias") << "\n";
    }
  }
  return biased || no_verdict ? kExitCheckFailed : kExitOk;
}

Runner setup_bias_test(CLI::App& app) {
  auto o = std::make_shared<BiasOptions>();
  app.add_option("--model", o->model, "kernel model");
  app.add_option("--against", o->against, "paired: measure --model minus this model on the same inputs");
  app.add_option("--recipe", o->recipe, "JSON file changing --model's stage formats and SFU tables");
  auto* traces = app.add_option("--traces", o->traces,
                                 "directory of .safetensors traces (takes none of --scenario --trials --seed "
                                 "--seqlen --headdim --dtype: the traces hold their inputs)");
  auto* scenario = app.add_option("--scenario", o->scenario, "sink|random|ties|wide-ties|fa3-outliers (default sink)");
  auto* trials = app.add_option("--trials", o->trials, "trials (default 32)");
  app.add_option("--alpha", o->alpha, "significance level, in (0, 1) (default 1e-3)");
  auto* seed = app.add_option("--seed", o->seed, "seed (default 0)");
  auto* seqlen = app.add_option("--seqlen", o->seqlen, "sequence length (default 256)");
  auto* headdim = app.add_option("--headdim", o->headdim, "head dimension (default 64)");
  auto* dtype = app.add_option("--dtype", o->dtype, "dtype for models that do not name one (default bf16)");
  // A trace run would ignore these silently; refuse them (exit 2, naming both options).
  for (CLI::Option* generator : {scenario, trials, seed, seqlen, headdim, dtype}) traces->excludes(generator);
  app.add_flag("--by-max", o->by_max,
               "also describe the errors grouped by each row's exact max score (descriptive)");
  app.add_flag("--json", o->json, "JSON output");
  return [o] { return run_bias_test(*o); };
}

}  // namespace
FLASHBITS_SUBCOMMAND(bias_test, "bias-test", "Test a kernel model or traces for a signed bias in O and delta",
                     setup_bias_test);
}  // namespace fb::cli
