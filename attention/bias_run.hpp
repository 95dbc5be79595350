// attention/bias_run.hpp: one bias-test run (docs/CLI.md bias-test): is a kernel model's O
// (and delta) biased on a scenario, or are captured kernels' outputs biased? The CLI
// (`flashbits bias-test`) and the Python module (flashbits.bias_test) both run it here and
// render its report: the CLI as text or with bias_report_json, Python with
// bias_report_json, so their JSON agrees field by field.
//
// Samples:
// - model mode: one sample per trial, the mean signed error (against exact_attention; O in
//   ulps of the output format at the exact value, delta in reduction ulps as
//   measure.hpp delta_units says) of O and of delta over a 1-head problem of
//   seqlen x headdim drawn with trial_seed(seed, seed_key, trial).
// - with `against`: one sample per trial, the paired difference of the model and `against`
//   on the same inputs and seed (measure.hpp measure_paired): the bias the model adds
//   relative to `against`, free of the input noise they share (fp8 quantisation, say).
// - trace mode: one sample per captured row of every trace file: the captured o (and
//   delta) against exact_attention of the captured inputs (no replay).
// Besides the error against exact, every non-paired run measures the correctly rounded
// reference's error on the same inputs and the excess (error minus reference); the verdict
// tests the excess (the kernel's own share), or the paired difference.
// No verdict on data that cannot support one: a trace with a NaN or infinity in q, k, v or
// dO, or with a dimension of 0, is bad input (std::invalid_argument naming the file and
// rows); a model (or captured kernel) whose O or delta is non-finite on finite inputs is
// reported with its rows, those rows are left out of the statistics, and the run gets no
// verdict (no_verdict; JSON verdict "no verdict (non-finite output)").
// by_max (descriptive, never part of the verdict): the rows grouped by their exact max
// scaled score, one value per distinct max (the mean over every row sharing it, across
// trials or traces). A recipe whose rounding depends on the max's value (P̄ = exp(S - m)
// cast to bf16) errs systematically per value; a bias every token shares gives one sign
// for every value. No test is made on these values: they are not independent samples (rows
// of one trial share its keys and values, so a trial's chance offset moves every group at
// once), which would make any CI too narrow.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "attention/attention.hpp"
#include "traces/capture_import.hpp"
#include "attention/statistics.hpp"

namespace fb::attn {

// by_max: per distinct row max, the sums of the row samples that share it.
class RowMaxGroups {
 public:
  // o_row: the row's mean O error; delta_row: its delta error, or nullptr without one.
  void add(double row_max, double o_row, const double* delta_row);
  std::size_t size() const { return groups_.size(); }
  std::vector<double> o_means() const;
  std::vector<double> delta_means() const;  // only the groups that had a delta

 private:
  struct Group {
    double o_sum = 0, delta_sum = 0;
    long long o_rows = 0, delta_rows = 0;
  };
  std::map<double, Group> groups_;
};

// by_max's description of the per-value means (no inference: see the file comment).
struct ValueSpread {
  std::size_t values = 0, negatives = 0, positives = 0;
  double mean = 0, sd = 0, min = 0, max = 0;
};
ValueSpread describe_values(const std::vector<double>& v);

// What to measure. The caller validates its options (their names differ between the CLI
// and Python) and resolves the models; run_bias checks only what it discovers on the way.
struct BiasRun {
  // Model mode when model.recipe is set. seed_key is the model's name before any recipe
  // file was applied, so that a model with and without a recipe sees the same inputs.
  ModelHandle model;
  std::optional<ModelHandle> against;
  std::string scenario, seed_key;
  int trials = 0, seqlen = 0, headdim = 0;
  std::uint64_t seed = 0;
  // Trace mode otherwise: these files, in this order; the subject says "in traces_label"
  // when it is not empty.
  std::vector<std::filesystem::path> traces;
  CaptureOptions capture;  // what bare captures among them lack (traces/capture_import.hpp)
  std::string traces_label;
  double alpha = 1e-3;
  // The trials (model mode) or trace files (trace mode) run on this many threads, each item
  // on one thread (its attention run on that thread alone). The report does not depend on
  // it: every trial is seeded by its index, every item's samples are kept apart and joined
  // in item order afterwards, and an error is the one the first failing item (in order)
  // raised, as a run on one thread would raise it.
  int threads = 1;
};

// Called before every trial or trace (Python: a pending Ctrl-C stops the run there) and
// after every trial of model mode (the CLI's progress bar). Either may be empty. With
// threads > 1 they are called from the run's threads, concurrently.
// start_threads runs `worker` on `threads` threads and joins them; when a thread cannot be
// started it calls `stop` (the running workers then return soon), joins the started ones
// and throws (the CLI's run_on_threads names --jobs). Empty: std::thread, rethrowing the
// std::system_error. Not called when threads is 1 (the caller's thread does the work).
struct BiasHooks {
  std::function<void()> before_item, after_trial;
  std::function<void(int threads, const std::function<void()>& worker, const std::function<void()>& stop)>
      start_threads;
};

struct BiasReport {
  std::string subject, provenance;
  std::string delta_note;  // how delta was obtained when a trace holds none; else empty
  double alpha = 1e-3;
  bool from_traces = false, paired = false, has_delta = false;
  // no_verdict: some row's output was non-finite (counted and described below).
  bool no_verdict = false, biased = false;
  // Error against exact; the correctly rounded reference's (not for paired runs); the
  // excess, which is the paired difference itself for paired runs (the verdict's statistic).
  BiasStatistics o, delta, o_cr, delta_cr, o_excess, delta_excess;
  std::size_t non_finite_rows = 0;
  std::vector<std::string> non_finite_where;  // one line per trial or trace
  RowMaxGroups by_max;
};

BiasReport run_bias(const BiasRun& run, const BiasHooks& hooks = {});

// A statistic's own verdict, or why it has none (no finite samples; the run's rows with a
// non-finite output, which leave the whole run without a verdict).
std::string stat_verdict(const BiasStatistics& s, bool run_has_verdict);
// `flashbits bias-test --json`'s object (docs/CLI.md); by_max adds "by_row_max".
nlohmann::ordered_json bias_report_json(const BiasReport& report, bool by_max);

}  // namespace fb::attn
