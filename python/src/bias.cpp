// python/src/bias.cpp: bias_test(), `flashbits bias-test --json` as a function.
//
// Contract: the returned object (JSON, converted to Python dicts in the same key order) has
// exactly the fields and values `flashbits bias-test --json` prints for the same arguments
// (python/tests/test_cli_cross.py compares them field by field), built from the same library
// functions (tools/sweep_table.hpp measure_errors, measure_paired, reference_errors, ...;
// attention/statistics.hpp summarize). The CLI keeps its run in an anonymous namespace of
// tools/cmd_bias_test.cpp, so the assembly below follows that file step by step; the
// statistics themselves are not re-implemented. Differences: `traces` is a list of files
// (the CLI's --traces DIR is the sorted *.safetensors of DIR; flashbits.bias_test does that
// listing in Python), and the run stops between trials (or traces) on Ctrl-C.
#include <algorithm>
#include <cmath>
#include <map>

#include "attention/attention.hpp"
#include "attention/kernel_models.hpp"
#include "attention/statistics.hpp"
#include "common.hpp"
#include "tools/recipe_file.hpp"
#include "tools/sweep_table.hpp"
#include "traces/trace.hpp"

namespace fb::py {
namespace {

using cli::InputError;
using nlohmann::ordered_json;

struct BiasOptions {
  std::string model, against, recipe, scenario = "sink", dtype = "bf16";
  std::vector<std::string> traces;
  std::string traces_label;
  int trials = 32, seqlen = 256, headdim = 64;
  double alpha = 1e-3;
  std::uint64_t seed = 0;
  bool by_max = false;
};

class RowMaxGroups {
 public:
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

ordered_json spread_json(const std::vector<double>& v) {
  std::size_t negatives = 0, positives = 0;
  double mean = 0, sd = 0, lo = 0, hi = 0;
  if (!v.empty()) {
    const attn::BiasStatistics m = attn::summarize(v);
    mean = m.mean;
    sd = m.stddev;
    negatives = m.negatives;
    positives = m.positives;
    lo = *std::min_element(v.begin(), v.end());
    hi = *std::max_element(v.begin(), v.end());
  }
  ordered_json j;
  j["values"] = v.size();
  j["mean_ulps"] = mean;
  j["sd_ulps"] = sd;
  j["min_ulps"] = lo;
  j["max_ulps"] = hi;
  j["negatives"] = negatives;
  j["positives"] = positives;
  return j;
}

std::string stat_verdict(const attn::BiasStatistics& s, bool run_has_verdict) {
  if (s.n == 0) return "no samples";
  if (!run_has_verdict) return "none (non-finite output elsewhere in the run)";
  return s.verdict();
}

ordered_json stats_json(const attn::BiasStatistics& s, bool run_has_verdict = true) {
  ordered_json j;
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

ordered_json run_bias_test(const BiasOptions& o, const Cancel& cancel) {
  if (o.model.empty() == o.traces.empty()) throw InputError("give exactly one of model=NAME or traces=[FILES]");
  if (!o.against.empty() && o.model.empty()) throw InputError("against: needs model");
  if (!o.recipe.empty() && o.model.empty()) throw InputError("recipe: needs model (the recipe changes that model)");
  cli::alpha_or_throw(o.alpha, "alpha");
  std::vector<double> o_samples, d_samples, o_cr_samples, d_cr_samples, o_excess, d_excess;
  RowMaxGroups by_max;
  std::string delta_note, subject, provenance;
  std::vector<std::string> non_finite;
  std::size_t non_finite_count = 0;
  if (!o.model.empty()) {
    const auto names = attn::scenario_names();
    if (std::find(names.begin(), names.end(), o.scenario) == names.end())
      throw InputError("scenario " + o.scenario + ": unknown scenario");
    if (o.trials < 2) throw InputError("trials: expected at least 2");
    if (o.seqlen < 1 || o.headdim < 1)
      throw InputError("seqlen " + std::to_string(o.seqlen) + " headdim " + std::to_string(o.headdim) +
                       ": expected positive sizes (an empty problem has no errors to test)");
    const Format dtype = cli::parse_format_or_throw(o.dtype, "dtype");
    attn::ModelHandle model;
    try {
      model = cli::parse_model_for_inputs(o.model, dtype);
    } catch (const std::invalid_argument& e) {
      throw InputError("model " + o.model + ": " + e.what());
    }
    const std::string seed_key = model.name + "/" + o.scenario;
    if (!o.recipe.empty()) model = cli::apply_recipe_file(model, o.recipe);
    attn::ModelHandle against;
    if (!o.against.empty()) {
      try {
        against = cli::parse_model_for_inputs(o.against, dtype);
      } catch (const std::invalid_argument& e) {
        throw InputError("against " + o.against + ": " + e.what());
      }
    }
    subject = model.name + (o.against.empty() ? "" : " against " + against.name) + " on " + o.scenario +
              " (seqlen " + std::to_string(o.seqlen) + ", head dim " + std::to_string(o.headdim) + ", " +
              std::to_string(o.trials) + " trials)";
    provenance = model.recipe->structure == attn::Structure::correctly_rounded
                     ? "the correctly rounded reference (exact attention, rounded once per output): no kernel arithmetic"
                 : model.recipe->hardware_validated()
                     ? "emulated model, all parts validated on hardware"
                     : "emulated model; SFU " + model.recipe->sfu.describe() +
                           " -- parts of this model are unmeasured on hardware";
    for (int t = 0; t < o.trials; ++t) {
      check_cancel(cancel);
      const std::uint64_t s = cli::trial_seed(o.seed, seed_key, static_cast<std::uint64_t>(t));
      const auto in = attn::make_scenario(o.scenario, s, 1, 1, o.seqlen, o.headdim, model.recipe->input, true);
      const cli::TrialErrors e = o.against.empty() ? cli::measure_errors(model, in, s, false)
                                                   : cli::measure_paired(model, against, in, s);
      if (!e.non_finite_rows.empty()) {
        non_finite_count += e.non_finite_rows.size();
        non_finite.push_back("trial " + std::to_string(t) + ": " + std::to_string(e.non_finite_rows.size()) +
                             " row(s) " + cli::describe_rows(e.non_finite_rows, 1, o.seqlen));
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
    }
  } else {
    int hardware = 0;
    for (const auto& f : o.traces) {
      check_cancel(cancel);
      const Trace trace = read_trace(f);
      hardware += is_hardware_capture(trace);
      const auto in = cli::inputs_from_trace(trace);
      cli::check_inputs_support_statistics(in, trace.source_name());
      const auto exact = attn::exact_attention(in);
      const RawTensor o_bits = trace.bits("o");
      const auto o_vals = cli::tensor_from_trace(trace, "o");
      if (o_vals.data.size() != exact.o.data.size())
        throw TraceError(trace.source_name() + ": tensor o: expected the shape of q");
      cli::ReferenceErrors cr;
      {
        attn::ModelHandle named;
        try {
          if (!trace.metadata().model.empty()) named = cli::parse_model_for_inputs(trace.metadata().model, in.dtype);
        } catch (const std::invalid_argument&) {
        }
        cr = named.recipe && named.recipe->output == o_bits.format
                 ? cli::reference_errors(attn::correctly_rounded_reference(*named.recipe), in, exact)
                 : cli::correctly_rounded_errors(o_bits.format, in, exact);
      }
      const int d = o_vals.cols;
      std::vector<std::size_t> bad_rows = cli::non_finite_rows(o_vals);
      std::vector<bool> bad(exact.o.data.size() / static_cast<std::size_t>(d), false);
      for (std::size_t r : bad_rows) bad[r] = true;
      std::vector<std::size_t> kept_rows;
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
      std::vector<double> kernel_delta;
      if (trace.has("delta")) {
        kernel_delta = cli::tensor_from_trace(trace, "delta").data;
      } else if (in.d_o && !trace.metadata().model.empty()) {
        attn::ModelHandle model;
        try {
          model = cli::parse_model_for_inputs(trace.metadata().model, in.dtype);
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
      std::vector<double> trace_delta;
      if (!kernel_delta.empty() && exact.delta) {
        if (kernel_delta.size() != exact.delta->data.size())
          throw TraceError(trace.source_name() + ": tensor delta: expected one value per row of q");
        const std::vector<double> unit = cli::delta_units(o_bits.format, *in.d_o, exact.o, *exact.delta);
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
        if (bad[r]) continue;
        by_max.add(exact.row_max->data[r], o_samples[first_sample + k], trace_delta.empty() ? nullptr : &trace_delta[r]);
      }
      if (!bad_rows.empty()) {
        std::sort(bad_rows.begin(), bad_rows.end());
        non_finite_count += bad_rows.size();
        non_finite.push_back(trace.source_name() + ": " + std::to_string(bad_rows.size()) + " row(s) " +
                             cli::describe_rows(bad_rows, in.q.heads, in.q.rows));
      }
    }
    subject = std::to_string(o.traces.size()) + " traces" + (o.traces_label.empty() ? "" : " in " + o.traces_label) +
              " (one sample per row)";
    provenance = std::to_string(hardware) + " of " + std::to_string(o.traces.size()) +
                 " traces are hardware captures (source cuda:...); the rest are emulated";
  }
  const attn::BiasStatistics so = attn::summarize(o_samples, o.alpha);
  const attn::BiasStatistics sd = attn::summarize(d_samples, o.alpha);
  const bool paired = !o.against.empty();
  const attn::BiasStatistics eo = paired ? so : attn::summarize(o_excess, o.alpha);
  const attn::BiasStatistics ed = paired ? sd : attn::summarize(d_excess, o.alpha);
  const bool has_delta = !d_samples.empty();
  const bool no_verdict = non_finite_count > 0;
  const bool biased = !no_verdict && (eo.biased || (has_delta && ed.biased));
  ordered_json j;
  j["subject"] = subject;
  j["provenance"] = provenance;
  if (!delta_note.empty()) j["delta_note"] = delta_note;
  j["alpha"] = o.alpha;
  j["o"] = stats_json(so, !no_verdict);
  if (has_delta) j["delta"] = stats_json(sd, !no_verdict);
  if (!paired) {
    ordered_json cr, ex;
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
    ordered_json nf;
    nf["rows"] = non_finite_count;
    nf["where"] = non_finite;
    j["non_finite_output"] = nf;
  }
  j["verdict_from"] = no_verdict ? "none" : paired ? "paired" : "excess";
  j["verdict"] = no_verdict ? "no verdict (non-finite output)" : biased ? "biased" : "no detectable bias";
  if (o.by_max) {
    ordered_json g;
    g["distinct_values"] = by_max.size();
    g["o"] = spread_json(by_max.o_means());
    const std::vector<double> dm = by_max.delta_means();
    if (!dm.empty()) g["delta"] = spread_json(dm);
    j["by_row_max"] = g;
  }
  return j;
}

pyb::object bias_test(const std::string& model, const std::string& scenario, const std::vector<std::string>& traces,
                      const std::string& traces_label, const std::string& against, const std::string& recipe,
                      int trials, int seqlen, int headdim, const std::string& dtype, double alpha, std::uint64_t seed,
                      bool by_max) {
  BiasOptions o;
  o.model = model;
  o.scenario = scenario;
  o.traces = traces;
  o.traces_label = traces_label;
  o.against = against;
  o.recipe = recipe;
  o.trials = trials;
  o.seqlen = seqlen;
  o.headdim = headdim;
  o.dtype = dtype;
  o.alpha = alpha;
  o.seed = seed;
  o.by_max = by_max;
  const ordered_json j =
      run_interruptible<ordered_json>([o](const Cancel& cancel) { return run_bias_test(o, cancel); });
  return to_python(j);
}

}  // namespace

void register_bias(pyb::module_& m) {
  using namespace pyb::literals;
  m.def("bias_test", &bias_test, "model"_a, "scenario"_a, "traces"_a, "traces_label"_a, "against"_a, "recipe"_a,
        "trials"_a, "seqlen"_a, "headdim"_a, "dtype"_a, "alpha"_a, "seed"_a, "by_max"_a);
}

}  // namespace fb::py
