// studies/bias_run.hpp: one bias-test run (docs/CLI.md bias-test): does a kernel model add
// bias to O (and delta) beyond its format's floor on a scenario, or do captured kernels'
// outputs? The CLI (`flashbits bias-test`) and the Python module (flashbits.bias_test) both
// run it here and render its report: the CLI as text or with bias_report_json, Python with
// bias_report_json, so their JSON agrees field by field.
//
// Samples (independent ones: the verdict's interval and p-value assume it):
// - model mode: one per trial, the mean signed error of O and of delta over a 1-head
//   problem of seqlen x headdim drawn with trial_seed(seed, scenario, trial): every model
//   sees the same inputs in trial t, whatever its name.
// - trace mode: one per cluster of captured rows that share their keys and values (one kv
//   head of one batch entry of one trace), the mean over the cluster's rows of the captured
//   o (and delta) against exact_attention of the captured inputs (no replay).
// Per sample, three errors (measure.hpp TrialErrors): against exact; the kernel's own
// (against the exact attention of what it computed with: for fp8 models the quantised
// inputs, whose quantisation error is reported on its own); and the floor's: the correctly
// rounded reference rounded where the kernel keeps its outputs, or with `against` that
// model on the same inputs and seed; and the kernel's and the floor's magnitude errors (the
// mean of sign(target) x error, measure.hpp outward_mean). verdict.hpp compares kernel and
// floor, for each output, on the signed and on the magnitude errors, each comparison at
// alpha / comparisons: the excess, its direction and the test's power decide the verdict.
// No verdict on data that cannot support one: a trace with a NaN or infinity in q, k, v or
// dO, or with a dimension of 0, is bad input (std::invalid_argument naming the file and
// rows); a model (or captured kernel) whose O or delta is non-finite on finite inputs is
// reported with its rows, those rows are left out of the statistics, and the run gets no
// verdict (no_verdict; JSON verdict "no verdict (non-finite output)").
// Storage that rounded a second time: a captured O or delta in a container narrower than the
// format the trace's metadata model writes it in (delta: fp32, or a rounded_products model's
// delta_format) is refused (TraceError naming the file, the tensor and both formats): that
// rounding would read as the kernel's bias. With no model, a delta narrower than fp32 is
// measured, and a note says that its storage's rounding counts as the kernel's error.
// by_max (descriptive, never part of the verdict): the rows grouped by their exact max
// scaled score, one value per distinct max (the mean over every row sharing it, across
// trials or traces). A recipe whose rounding depends on the max's value (P̄ = exp(S - m)
// cast to bf16) errs systematically per value; a bias every token shares gives one sign
// for every value. No test is made on these values: they are not independent samples (rows
// of one trial share its keys and values, so a trial's chance offset moves every group at
// once), which would make any CI too narrow.
#pragma once

#include <algorithm>
#include <cmath>
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
#include "studies/statistics.hpp"
#include "studies/verdict.hpp"

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

// The cluster of query row `row` (flattened [batch][head][row]): its batch entry's kv head,
// b * kv heads + h / (heads / kv heads), of kv_cluster_count(in). Rows of one cluster read the
// same keys and values, so they are one independent sample, never one each (bias-test
// --traces, demo).
std::size_t kv_cluster_count(const AttentionInputs& in);
std::size_t kv_cluster_of(const AttentionInputs& in, std::size_t row);

// by_max's description of the per-value means (no inference: see the file comment).
struct ValueSpread {
  std::size_t values = 0, negatives = 0, positives = 0;
  double mean = 0, sd = 0, min = 0, max = 0;
};
ValueSpread describe_values(const std::vector<double>& v);

// What to measure. The caller validates its options (their names differ between the CLI
// and Python) and resolves the models; run_bias checks only what it discovers on the way.
struct BiasRun {
  // Model mode when model.recipe is set; the trials are seeded by scenario, seed and trial only.
  ModelHandle model;
  std::optional<ModelHandle> against;
  std::string scenario;
  int trials = 0, seqlen = 0, headdim = 0;
  std::uint64_t seed = 0;
  // Trace mode otherwise: these files, in this order; the subject says "in traces_label"
  // when it is not empty.
  std::vector<std::filesystem::path> traces;
  CaptureOptions capture;  // what bare captures among them lack (traces/capture_import.hpp)
  std::string traces_label;
  double alpha = 1e-3;
  double at_stake = kDefaultAtStakeUlps;  // verdict.hpp: the bias the test must be able to see
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

// The spread of O's errors over every element (no test: rows and elements are not
// independent): the kernel's own error and the floor's, RMS and largest. A kernel whose
// damage is not a signed bias (a P̄ that saturates shrinks the largest weights of some rows,
// with either sign in O) shows here.
struct ElementSpread {
  std::size_t elements = 0;
  double kernel_sumsq = 0, floor_sumsq = 0, kernel_max_abs = 0;
  void add(double kernel, double floor) {
    ++elements;
    kernel_sumsq += kernel * kernel;
    floor_sumsq += floor * floor;
    kernel_max_abs = std::max(kernel_max_abs, std::fabs(kernel));
  }
  void merge(const ElementSpread& o) {
    elements += o.elements;
    kernel_sumsq += o.kernel_sumsq;
    floor_sumsq += o.floor_sumsq;
    kernel_max_abs = std::max(kernel_max_abs, o.kernel_max_abs);
  }
  double kernel_rms() const { return elements ? std::sqrt(kernel_sumsq / static_cast<double>(elements)) : 0.0; }
  double floor_rms() const { return elements ? std::sqrt(floor_sumsq / static_cast<double>(elements)) : 0.0; }
};

struct BiasReport {
  std::string subject, provenance;
  std::string delta_note;             // how delta was obtained when a trace holds none; else empty
  std::string samples_note;           // what one sample is, and why the samples are independent
  std::vector<std::string> warnings;  // "NAME: ..." of every model that carries a KernelModel::warning
  // Scenario runs: "NAME: ..." for each part of a model that this run's shape takes and no
  // hardware capture measured (unmeasured_shape_notes, as replay prints them). Trace runs:
  // "FILE records no ...: ... assumed" for what a trace's metadata did not say
  // (assumed_metadata_notes; a trace's samples are its captured outputs, whatever model could
  // recompute them).
  std::vector<std::string> notes;
  // The format whose ulps every error is in: the kernel's output format (a trace's O format),
  // also where the kernel keeps O or delta wider (an fp32 O buffer, +o-fp32's delta).
  std::string units_format;
  // --against's model name: what the floor is, and the verdict relative to (empty otherwise).
  std::string baseline;
  double alpha = 1e-3, at_stake = kDefaultAtStakeUlps;
  bool from_traces = false, paired = false, has_delta = false, has_quantisation = false;
  // no_verdict: some row's output was non-finite (counted and described below).
  bool no_verdict = false;
  Verdict verdict = Verdict::inconclusive;  // combine() of the comparisons unless no_verdict
  bool biased = false;                      // verdict == adds_bias (and a verdict was given)
  // Error against exact; the input quantisation's (fp8 kernels: the exact attention of the
  // quantised inputs against exact); the floor's (the correctly rounded reference, or the
  // --against model) against the kernel's target. The excess (kernel minus floor per sample)
  // is each comparison's own (o_vs_floor.excess), one series for the verdict and the report.
  BiasStatistics o, delta, o_quant, delta_quant, o_cr, delta_cr;
  // Each output's signed errors against the floor's, and its magnitude errors (sign of the
  // target x error: a toward-zero rounding on outputs of either sign shows here, verdict.hpp).
  FloorComparison o_vs_floor, delta_vs_floor, o_magnitude_vs_floor, delta_magnitude_vs_floor;
  // How many comparisons the verdict combines (2 per output), and the level each is made at:
  // alpha / comparisons, which holds the run's false alarms to alpha.
  int comparisons = 2;
  double alpha_per_comparison = 1e-3 / 2;
  ElementSpread o_spread;
  std::size_t non_finite_rows = 0;
  std::vector<std::string> non_finite_where;  // one line per trial or trace
  // Trace rows that see no key (a causal mask with more queries than keys): O = 0 and delta = 0
  // by every kernel's guard, exactly the reference's, so they carry no rounding error to
  // measure; counted in, they would pull each mean toward 0 by the visible fraction. Left out
  // of every sample (clusters, spread, --by-max) and counted here.
  std::size_t rows_without_keys = 0;
  // Trace samples (kv heads of a batch entry) whose inputs and outputs repeat an earlier
  // sample's bit for bit, in the traces' order: the same sample again (a capture given twice),
  // counted once. Left out of every sample; the spread and --by-max still see their rows.
  std::size_t repeated_samples = 0;
  // Trace clusters that read the same keys and values (bit for bit) as an earlier one, in
  // another head, batch entry or trace: pooled into that one's sample, since rows that share
  // their keys and values are no independent samples.
  std::size_t shared_kv_clusters = 0;
  RowMaxGroups by_max;
};

// The verdict line's words for a run ("adds bias", ..., "no verdict (non-finite output)").
std::string report_verdict_text(const BiasReport& report);

// What an fp8 kernel's verdict leaves out (empty unless report.has_quantisation and a verdict
// was given): the verdict is the kernel's arithmetic against the exact attention of its
// quantised inputs, so the input quantisation's own error (report.o_quant, .delta_quant) is
// measured apart and is no part of it. Each output's quantisation share is named with its mean
// and p-value; one whose mean differs from 0 at the report's level (alpha_per_comparison, the
// level of its every line) is said to add its own bias. Printed on bias-test's verdict line,
// JSON "verdict_note"; quantisation_outputs_biased lists those outputs ("o", "delta"), JSON
// "quantisation_biased".
std::string quantisation_verdict_note(const BiasReport& report);
std::vector<std::string> quantisation_outputs_biased(const BiasReport& report);

BiasReport run_bias(const BiasRun& run, const BiasHooks& hooks = {});

// A statistic's own verdict, or why it has none (no finite samples; the run's rows with a
// non-finite output, which leave the whole run without a verdict).
std::string stat_verdict(const BiasStatistics& s, bool run_has_verdict);
// One output's verdict against its floor as bias-test's and sweep's JSON write it ("verdict",
// "reason", the means, p-values and the smallest detectable bias); run_has_verdict false
// writes the verdict as none (a non-finite output).
nlohmann::ordered_json floor_comparison_json(const FloorComparison& c, bool run_has_verdict);
// `flashbits bias-test --json`'s object (docs/CLI.md); by_max adds "by_row_max".
nlohmann::ordered_json bias_report_json(const BiasReport& report, bool by_max);

}  // namespace fb::attn
