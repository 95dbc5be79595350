// studies/bias_run.cpp: a bias-test run and its JSON report (contract in bias_run.hpp).
#include "studies/bias_run.hpp"
#include "studies/scenarios.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdio>
#include <exception>
#include <limits>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "attention/kernel_models.hpp"
#include "emu/ops.hpp"
#include "formats/decimal_text.hpp"
#include "studies/measure.hpp"
#include "attention/trace_inputs.hpp"
#include "traces/trace.hpp"

namespace fb::attn {

void RowMaxGroups::add(double row_max, double o_row, const double* delta_row) {
  Group& g = groups_[row_max];
  g.o_sum += o_row;
  ++g.o_rows;
  if (delta_row) {
    g.delta_sum += *delta_row;
    ++g.delta_rows;
  }
}

std::vector<double> RowMaxGroups::o_means() const {
  std::vector<double> out;
  for (const auto& [max, g] : groups_) out.push_back(g.o_sum / static_cast<double>(g.o_rows));
  return out;
}

std::vector<double> RowMaxGroups::delta_means() const {
  std::vector<double> out;
  for (const auto& [max, g] : groups_)
    if (g.delta_rows > 0) out.push_back(g.delta_sum / static_cast<double>(g.delta_rows));
  return out;
}

ValueSpread describe_values(const std::vector<double>& v) {
  ValueSpread s;
  s.values = v.size();
  if (v.empty()) return s;
  const BiasStatistics moments = summarize(v);  // its mean, sd and signs only
  s.mean = moments.mean;
  s.sd = moments.stddev;
  s.negatives = moments.negatives;
  s.positives = moments.positives;
  s.min = *std::min_element(v.begin(), v.end());
  s.max = *std::max_element(v.begin(), v.end());
  return s;
}

namespace {

// The samples of a run, before they are summarised. Per output: the error against exact,
// the kernel's own error against its target, the input quantisation's (fp8 only), and the
// floor's against the same target (measure.hpp TrialErrors); the excess is kernel - floor.
// The *_outward series are the kernel's and the floor's magnitude errors (outward_mean).
struct Samples {
  std::vector<double> o, delta, o_kernel, delta_kernel, o_quant, delta_quant, o_cr, delta_cr;
  std::vector<double> o_kernel_outward, delta_kernel_outward, o_cr_outward, delta_cr_outward;
  ElementSpread o_spread;  // every element of O: the kernel's own error and the floor's
};

// One output's sums over a trace cluster's rows: each row's mean error against exact, the
// kernel's own (against its target), the quantisation's and the floor's, the kernel's and the
// floor's magnitude errors (outward_mean), with the rows counted.
struct OutputSums {
  double error = 0, kernel = 0, quant = 0, floor = 0, kernel_outward = 0, floor_outward = 0;
  long long rows = 0;
  void add(const OutputSums& x) {
    error += x.error, kernel += x.kernel, quant += x.quant, floor += x.floor;
    kernel_outward += x.kernel_outward, floor_outward += x.floor_outward;
    rows += x.rows;
  }
  // The cluster's sample: its means, appended to the run's (nothing when it has no row; the
  // quantisation's only where the run measures one).
  void emit(std::vector<double>& errors, std::vector<double>& kernels, std::vector<double>* quants,
            std::vector<double>& floors, std::vector<double>& kernels_outward,
            std::vector<double>& floors_outward) const {
    if (rows == 0) return;
    const auto n = static_cast<double>(rows);
    errors.push_back(error / n);
    kernels.push_back(kernel / n);
    if (quants) quants->push_back(quant / n);
    floors.push_back(floor / n);
    kernels_outward.push_back(kernel_outward / n);
    floors_outward.push_back(floor_outward / n);
  }
};
struct ClusterSums {
  OutputSums o, delta;
  void add(const ClusterSums& x) {
    o.add(x.o);
    delta.add(x.delta);
  }
};

// What one trial or one trace file adds to the report. Items run apart (possibly on
// several threads) and are joined in item order by merge_item, which appends and adds in
// exactly the order a run on one thread would: the report is the same bit for bit.
struct ItemResult {
  struct RowMax {
    double row_max, o_row;
    std::optional<double> delta_row;
  };
  Samples s;
  std::vector<RowMax> by_max;  // in the order RowMaxGroups::add would see them
  std::size_t non_finite_rows = 0;
  std::string non_finite_where;      // empty when every row was finite
  std::string delta_note;            // trace mode: how delta was obtained, when computed
  std::vector<std::string> assumed;  // trace mode: what the metadata did not say, how o was read
  std::size_t rows_without_keys = 0;
  bool hardware = false, unknown_source = false, emulated = false;
  // Trace mode: the file, and its metadata model's canonical name (the identity compared across
  // traces: it lists the variants in one order and drops a +o-rne restating the final cast).
  std::string source_name, model;
  std::string formats;       // trace mode: "bf16 inputs, bf16 O", the formats it was judged in
  std::string units_format;  // trace mode: the format whose ulps its errors are in (O's)
  // Trace mode: one entry per cluster (kv head of a batch entry), in cluster order: a hash of
  // everything its sample is computed from, a hash of its keys and values alone, its sums, and
  // what its rows add to the run's other counts. merge_item counts a cluster whose hash an
  // earlier one had once only (its rows, elements and row maxima too), and pools clusters that
  // share their keys and values into one sample. Trace mode leaves the item's own by_max,
  // spread and row counts empty: they are the clusters'.
  struct ClusterKey {
    std::uint64_t hash, kv_hash;
    ClusterSums sums;
    std::vector<RowMax> by_max;  // its rows', in row order
    ElementSpread o_spread;
    std::size_t rows_without_keys = 0, non_finite_rows = 0;
  };
  std::vector<ClusterKey> cluster_keys;
  bool quantised = false;  // trace mode: measured against its quantised inputs (o_quant, delta_quant)
};

}  // namespace

std::size_t kv_cluster_count(const AttentionInputs& in) {
  return static_cast<std::size_t>(std::max(1, in.q.batch)) * static_cast<std::size_t>(std::max(1, in.k.heads));
}

std::size_t kv_cluster_of(const AttentionInputs& in, std::size_t row) {
  const auto heads = static_cast<std::size_t>(in.q.heads), rows = static_cast<std::size_t>(in.q.rows);
  const auto kv_heads = static_cast<std::size_t>(std::max(1, in.k.heads));
  const std::size_t group = std::max<std::size_t>(1, heads / kv_heads);
  const std::size_t b = row / (heads * rows), h = (row / rows) % heads;
  return b * kv_heads + h / group;
}

namespace {

void append(std::vector<double>& to, const std::vector<double>& from) { to.insert(to.end(), from.begin(), from.end()); }

// Trace mode's samples, formed once every item is merged: one per group of clusters that
// share their keys and values (the same k and v, bit for bit), in the order the groups were
// first seen. Rows that read the same keys and values are not independent samples, wherever
// they sit: in one trace's heads (k and v repeated per head, as repeat_kv does before SDPA),
// in its batch entries, or in other traces (a capture split into chunks of query rows).
struct KvGroups {
  std::unordered_set<std::uint64_t> seen;  // whole-cluster hashes: a cluster seen again is a copy
  std::unordered_map<std::uint64_t, std::size_t> group_of;
  std::vector<ClusterSums> groups;
  bool quantised = false;
  void emit(Samples& s) const {
    for (const ClusterSums& g : groups) {
      g.o.emit(s.o, s.o_kernel, quantised ? &s.o_quant : nullptr, s.o_cr, s.o_kernel_outward, s.o_cr_outward);
      g.delta.emit(s.delta, s.delta_kernel, quantised ? &s.delta_quant : nullptr, s.delta_cr, s.delta_kernel_outward,
                   s.delta_cr_outward);
    }
  }
};

// `groups`: the clusters of the items merged so far (trace mode). A cluster whose inputs and
// outputs repeat an earlier one's bit for bit (a capture given twice, a file and its copy) is
// the same sample again, not an independent one: counted twice, its copies would shrink the
// interval at will, and a few exact copies give a spread of rounding noise and a t in the
// quadrillions. A cluster that shares only its keys and values with an earlier one joins its
// sample (KvGroups).
void merge_item(const ItemResult& item, Samples& s, BiasReport& report, KvGroups& groups) {
  // What rows add beside the samples: an item's (trial mode) or a cluster's not seen before.
  const auto add_rows = [&](const std::vector<ItemResult::RowMax>& by_max, const ElementSpread& spread,
                            std::size_t rows_without_keys, std::size_t non_finite_rows) {
    s.o_spread.merge(spread);
    for (const ItemResult::RowMax& r : by_max)
      report.by_max.add(r.row_max, r.o_row, r.delta_row ? &*r.delta_row : nullptr);
    report.rows_without_keys += rows_without_keys;
    report.non_finite_rows += non_finite_rows;
  };
  if (item.cluster_keys.empty()) {
    append(s.o, item.s.o);
    append(s.delta, item.s.delta);
    append(s.o_kernel, item.s.o_kernel);
    append(s.delta_kernel, item.s.delta_kernel);
    append(s.o_quant, item.s.o_quant);
    append(s.delta_quant, item.s.delta_quant);
    append(s.o_cr, item.s.o_cr);
    append(s.delta_cr, item.s.delta_cr);
    append(s.o_kernel_outward, item.s.o_kernel_outward);
    append(s.o_cr_outward, item.s.o_cr_outward);
    append(s.delta_kernel_outward, item.s.delta_kernel_outward);
    append(s.delta_cr_outward, item.s.delta_cr_outward);
    add_rows(item.by_max, item.s.o_spread, item.rows_without_keys, item.non_finite_rows);
    if (!item.non_finite_where.empty()) report.non_finite_where.push_back(item.non_finite_where);
  } else {
    groups.quantised = groups.quantised || item.quantised;
    bool fresh_non_finite = false;
    for (const ItemResult::ClusterKey& key : item.cluster_keys) {
      const bool has_sample = key.sums.o.rows > 0 || key.sums.delta.rows > 0;
      if (!groups.seen.insert(key.hash).second) {
        if (has_sample) ++report.repeated_samples;
        continue;
      }
      add_rows(key.by_max, key.o_spread, key.rows_without_keys, key.non_finite_rows);
      fresh_non_finite = fresh_non_finite || key.non_finite_rows > 0;
      if (!has_sample) continue;
      const auto [at, fresh] = groups.group_of.emplace(key.kv_hash, groups.groups.size());
      if (fresh)
        groups.groups.emplace_back();
      else
        ++report.shared_kv_clusters;
      groups.groups[at->second].add(key.sums);
    }
    // A copy's non-finite rows were named with the original's.
    if (fresh_non_finite) report.non_finite_where.push_back(item.non_finite_where);
  }
  if (!item.delta_note.empty()) report.delta_note = item.delta_note;
  for (const std::string& note : item.assumed) report.notes.push_back(note.substr(std::string("note: ").size()));
}

// Runs run_item(i) for every i in [0, count) on `threads` threads (the caller's own when 1)
// and rethrows the error of the first failing item in index order. Items are taken in
// increasing order, so when item i fails every item before it has been taken and runs to
// its end; the items after i not yet taken are skipped. The error is then the one a run on
// one thread would raise.
void for_each_item(int count, int threads, const BiasHooks& hooks, const std::function<void(int)>& run_item) {
  threads = std::clamp(threads, 1, std::max(count, 1));
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(count));
  std::atomic<int> next{0};
  const auto stop = [&] { next.store(count); };
  const auto worker = [&] {
    for (int i = next++; i < count; i = next++) {
      try {
        run_item(i);
      } catch (...) {
        errors[static_cast<std::size_t>(i)] = std::current_exception();
        stop();
      }
    }
  };
  if (threads == 1) {
    worker();
  } else if (hooks.start_threads) {
    hooks.start_threads(threads, worker, stop);
  } else {
    std::vector<std::thread> pool;
    std::exception_ptr start_failure;
    for (int t = 0; t < threads && !start_failure; ++t) {
      try {
        pool.emplace_back(worker);
      } catch (const std::system_error&) {
        start_failure = std::current_exception();
        stop();
      }
    }
    for (std::thread& t : pool) t.join();
    if (start_failure) std::rethrow_exception(start_failure);
  }
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

void run_trial(const BiasRun& run, int t, ItemResult& item) {
  const ModelHandle& model = run.model;
  // Seeded by the scenario alone: every model sees the same inputs in trial t.
  const std::uint64_t seed = trial_seed(run.seed, run.scenario, static_cast<std::uint64_t>(t));
  const auto in = make_scenario(run.scenario, seed, 1, 1, run.seqlen, run.headdim, model.recipe->input, true);
  const TrialErrors e =
      run.against ? measure_paired(model, *run.against, in, seed) : measure_errors(model, in, seed, false);
  Samples& s = item.s;
  if (!e.non_finite_rows.empty()) {
    item.non_finite_rows = e.non_finite_rows.size();
    item.non_finite_where = "trial " + std::to_string(t) + ": " + std::to_string(e.non_finite_rows.size()) +
                            " row(s) " + describe_rows(e.non_finite_rows, 1, run.seqlen);
    return;
  }
  s.o.push_back(mean_of(e.o_ulps));
  s.o_kernel.push_back(mean_of(e.o_kernel_ulps));
  for (std::size_t i = 0; i < e.o_kernel_ulps.size(); ++i) s.o_spread.add(e.o_kernel_ulps[i], e.o_cr_ulps[i]);
  s.o_cr.push_back(mean_of(e.o_cr_ulps));
  s.o_kernel_outward.push_back(outward_mean(e.o_kernel_ulps, e.o_target_sign));
  s.o_cr_outward.push_back(outward_mean(e.o_cr_ulps, e.o_target_sign));
  if (!e.o_quant_ulps.empty()) s.o_quant.push_back(mean_of(e.o_quant_ulps));
  if (!e.delta_ulps.empty()) {
    s.delta.push_back(mean_of(e.delta_ulps));
    s.delta_kernel.push_back(mean_of(e.delta_kernel_ulps));
    s.delta_cr.push_back(mean_of(e.delta_cr_ulps));
    s.delta_kernel_outward.push_back(outward_mean(e.delta_kernel_ulps, e.delta_target_sign));
    s.delta_cr_outward.push_back(outward_mean(e.delta_cr_ulps, e.delta_target_sign));
    if (!e.delta_quant_ulps.empty()) s.delta_quant.push_back(mean_of(e.delta_quant_ulps));
  }
  const std::size_t d = static_cast<std::size_t>(run.headdim);
  for (std::size_t r = 0; r < e.row_max.size(); ++r) {
    double row_sum = 0;
    for (std::size_t c = 0; c < d; ++c) row_sum += e.o_ulps[r * d + c];
    item.by_max.push_back({e.row_max[r], row_sum / static_cast<double>(d),
                           e.delta_ulps.empty() ? std::nullopt : std::optional<double>(e.delta_ulps[r])});
  }
}

// Kernels take the softmax scale as an fp32 value (every FlashAttention's params hold a
// float), exact attention the scale itself: for a scale that is no fp32 value (1/sqrt(d) at a
// head dim that is no power of 4) the scale's own rounding tilts every score one way, and in
// the ulps of an fp32 output that alone shows as added bias (docs/DESIGN.md §13; the fifth
// verdict audit found it unnamed at head dim 128). Said where it can matter: nothing for an
// fp32 scale or an output narrower than fp32. `scale` 0 means 1/sqrt(head_dim).
std::optional<std::string> softmax_scale_rounding_note(const std::string& who, double scale, int head_dim,
                                                       const Format& output) {
  const bool default_scale = !(scale > 0);
  const double exact_scale = default_scale ? 1.0 / std::sqrt(static_cast<double>(head_dim)) : scale;
  const double fp32_scale = static_cast<double>(static_cast<float>(exact_scale));
  if (fp32_scale == exact_scale || output.precision() < formats::fp32.precision()) return std::nullopt;
  char what[96];
  if (default_scale)
    std::snprintf(what, sizeof what, "1/sqrt(%d)", head_dim);
  else
    std::snprintf(what, sizeof what, "%.17g", scale);
  char buf[480];
  std::snprintf(buf, sizeof buf,
                "%s: the softmax scale %s is no fp32 value; a kernel computes with it rounded to fp32 "
                "(relative error %+.2g), exact attention with %s itself: in ulps of the %s output that "
                "rounding alone can show as added bias (%s)",
                who.c_str(), what, (fp32_scale - exact_scale) / exact_scale, what, std::string(output.name).c_str(),
                default_scale ? "a head dim that is a power of 4 has an exact scale"
                              : "a scale recorded as its fp32 value has none");
  return std::string(buf);
}

void run_model_trials(const BiasRun& run, const BiasHooks& hooks, Samples& s, BiasReport& report) {
  const ModelHandle& model = run.model;
  report.units_format = model.recipe->output.name;
  report.subject = model.name + (run.against ? " against " + run.against->name : "") + " on " + run.scenario +
                   " (seqlen " + std::to_string(run.seqlen) + ", head dim " + std::to_string(run.headdim) + ", " +
                   std::to_string(run.trials) + " trials)";
  report.provenance =
      model.recipe->structure == Structure::correctly_rounded
          ? "the correctly rounded reference (exact attention, rounded once per output): no kernel arithmetic"
      : model.recipe->hardware_validated()
          ? "emulated model; its tensor cores and SFUs were measured on hardware (the recipe itself only where a "
            "capture replays: see flashbits models)"
          : "emulated model; " + unmeasured_parts(*model.recipe);
  for (const ModelHandle* m : {&model, run.against ? &*run.against : nullptr})
    if (m && !m->recipe->warning.empty()) report.warnings.push_back(m->name + ": " + m->recipe->warning);
  // Every trial has run_trial's shape: one head, seqlen rows and keys, with the backward.
  const RunShape shape{1, 1, 1, run.seqlen, run.seqlen, run.headdim, false, true};
  for (const ModelHandle* m : {&model, run.against ? &*run.against : nullptr})
    if (m)
      for (std::string_view note : unmeasured_shape_notes(*m->recipe, shape)) {
        if (note.starts_with("note: ")) note.remove_prefix(6);  // the printer adds its own
        report.notes.push_back(m->name + ": " + std::string(note));
      }
  if (model.recipe->structure != Structure::correctly_rounded)
    if (auto note = softmax_scale_rounding_note(model.name, 0.0, run.headdim, model.recipe->output))
      report.notes.push_back(*note);
  std::vector<ItemResult> items(static_cast<std::size_t>(std::max(run.trials, 0)));
  for_each_item(run.trials, run.threads, hooks, [&](int t) {
    if (hooks.before_item) hooks.before_item();
    run_trial(run, t, items[static_cast<std::size_t>(t)]);
    if (hooks.after_trial) hooks.after_trial();
  });
  KvGroups unused;  // model trials draw their own inputs: no cluster keys
  for (const ItemResult& item : items) merge_item(item, s, report, unused);
}

// The trace's own model (its metadata), or no recipe when it names none. A name that does not
// resolve for the trace's dtype (unknown, misspelt, or a model that reads another format) is
// the trace's error, as replay reports it: measured as no model, an fp8 capture's quantisation
// would read as its kernel's bias, and its delta would go untested without a word.
ModelHandle trace_model(const Trace& trace, const Format& dtype) {
  ModelHandle named;
  if (trace.metadata().model.empty()) return named;
  try {
    named = parse_model_for_inputs(trace.metadata().model, dtype);
  } catch (const std::invalid_argument& e) {
    throw TraceError(trace.source_name() + ": metadata model '" + trace.metadata().model + "': " + e.what());
  }
  return named;
}

void add_trace(const Trace& trace, ItemResult& item) {
  const auto in = inputs_from_trace(trace);
  check_inputs_support_statistics(in, trace.source_name());
  const auto exact = exact_attention(in);
  const RawTensor o_bits = trace.bits("o");
  const auto o_vals = tensor_from_trace(trace, "o");
  if (o_vals.data.size() != exact.o.data.size())
    throw TraceError(trace.source_name() + ": tensor o: expected the shape of q");
  // The floor where the trace's model keeps O (an fp32 O buffer, say; RNE into o's format
  // when the metadata names no model of o's format).
  const ModelHandle named = trace_model(trace, in.dtype);
  item.model = named.recipe ? named.name : std::string();
  // The format the kernel wrote O in. A capture may keep O in a wider container (a bf16 O
  // saved with .float()); judged on the container's floor, bf16's own rounding would read as
  // the kernel's error. The values decide: a model's O must lie on its output format's grid
  // (else the trace contradicts its model), and with no model an O that lies wholly on the
  // inputs' grid is taken as written in it (a genuine fp32 O does so with odds 2^-16 an element).
  Format o_format = o_bits.format;
  const auto on_grid = [&](const Format& f) {
    for (double v : o_vals.data)
      if (std::isfinite(v) && to_double(f, round_double(f, v, RoundingSpec{}).bits) != v) return false;
    return true;
  };
  const auto narrower = [&](const Format& f) { return f.precision() < o_bits.format.precision(); };
  if (named.recipe && named.recipe->output != o_bits.format && narrower(named.recipe->output)) {
    if (!on_grid(named.recipe->output))
      throw TraceError(trace.source_name() + ": tensor o: stored as " + std::string(o_bits.format.name) +
                       " with values that are not " + std::string(named.recipe->output.name) + " values, but model " +
                       named.name + " writes a " + std::string(named.recipe->output.name) + " O");
    o_format = named.recipe->output;
  } else if (named.recipe && named.recipe->output != o_bits.format &&
             named.recipe->output.precision() > o_bits.format.precision()) {
    // A container narrower than what the kernel wrote has rounded its O a second time.
    throw TraceError(trace.source_name() + ": tensor o: stored as " + std::string(o_bits.format.name) +
                     ", narrower than the " + std::string(named.recipe->output.name) + " O model " + named.name +
                     " writes: the capture rounded it again");
  } else if (!named.recipe) {
    // The inputs' format first, then the 16-bit formats a whole capture upcast to float32 may
    // hold (numpy has no bf16): bf16 before fp16, since every bf16 value in fp16's range is
    // also an fp16 value, while a genuine fp16 O lies on bf16's grid with odds 1/8 an element.
    for (const Format& f : {in.dtype, formats::bf16, formats::fp16})
      if (narrower(f) && on_grid(f)) {
        o_format = f;
        break;
      }
  }
  if (o_format != o_bits.format)
    item.assumed.push_back("note: " + trace.source_name() + ": tensor o is stored as " +
                           std::string(o_bits.format.name) + " but every value is a " + std::string(o_format.name) +
                           " value: measured against " + std::string(o_format.name) + "'s floor");
  const bool named_fits = named.recipe && named.recipe->output == o_format;
  // One verdict is about one kernel in one format: ulps of bf16 and of fp16 do not pool.
  item.formats = std::string(in.dtype.name) + " inputs, " + std::string(o_format.name) + " O";
  item.units_format = o_format.name;
  if (auto note = softmax_scale_rounding_note(trace.source_name(), in.softmax_scale, in.q.cols, o_format))
    item.assumed.push_back("note: " + *note);
  // An fp8 kernel computes with its quantised inputs: its own error and the floor's are
  // measured against their exact attention, and the quantisation's share apart, as with
  // --model (counted in, the quantisation read as the kernel's bias). A model whose
  // quantisation draws from a seed (+hadamard) takes the trace's recorded one.
  std::optional<AttentionInputs> seen;
  std::optional<AttentionOutputs> quantised_exact;
  if (named_fits) {
    RunOptions opt;
    if (named.recipe->fp8.hadamard) opt.seed = required_run_seed(trace, named);
    seen = inputs_as_quantised(*named.recipe, in, opt);
    if (seen) quantised_exact = exact_attention(*seen);
  }
  const AttentionOutputs& target = quantised_exact ? *quantised_exact : exact;
  const ErrorUnits units = error_units(o_format, in, exact);
  const ReferenceErrors cr =
      named_fits ? reference_errors(correctly_rounded_reference(*named.recipe), seen ? *seen : in, target, units)
                 : correctly_rounded_errors(o_format, in, exact, units);
  const int d = o_vals.cols;
  // Rows of one kv head of one batch entry share its keys and values: they are one cluster,
  // whose mean is one independent sample (a row each would make the interval far too narrow).
  const auto cluster_of = [&](std::size_t r) { return kv_cluster_of(in, r); };
  const std::size_t clusters = kv_cluster_count(in);
  std::vector<ItemResult::ClusterKey> per_cluster(clusters);
  const std::size_t row_count = exact.o.data.size() / static_cast<std::size_t>(d);
  // Rows that see no key: exact attention's LSE of such a row is +inf (BiasReport::rows_without_keys).
  // What a kernel writes there is its guard's (0 in the flash kernels and in SDPA's math path,
  // whose _safe_softmax zeroes such a row; NaN from an eager softmax of all -inf): no rounding
  // to measure, and no fault either. Any
  // other value is named.
  std::vector<bool> without_keys(row_count, false);
  std::size_t keyless_with_values = 0;
  for (std::size_t r = 0; r < row_count; ++r)
    if (exact.lse.data[r] == std::numeric_limits<double>::infinity()) {
      without_keys[r] = true;
      ++per_cluster[cluster_of(r)].rows_without_keys;
      bool guarded = true;
      for (int c = 0; c < d; ++c) {
        const double v = o_vals.data[r * static_cast<std::size_t>(d) + static_cast<std::size_t>(c)];
        guarded = guarded && (v == 0.0 || std::isnan(v));
      }
      if (!guarded) ++keyless_with_values;
    }
  if (keyless_with_values > 0)
    item.assumed.push_back("note: " + trace.source_name() + ": " + std::to_string(keyless_with_values) +
                           " row(s) that see no key hold an O other than 0 or NaN (what a kernel's guard writes "
                           "there); left out like every row that sees no key, but the capture is not what a "
                           "kernel writes");
  // The captured kernel's output, non-finite on these finite inputs: reported, not measured.
  std::vector<std::size_t> bad_rows;
  for (std::size_t r : non_finite_rows(o_vals))
    if (!without_keys[r]) bad_rows.push_back(r);
  std::vector<bool> bad(row_count, false);
  for (std::size_t r : bad_rows) bad[r] = true;
  std::vector<double> row_o(bad.size(), 0.0);  // each row's mean O error (by_max)
  for (std::size_t r = 0; r * d < o_vals.data.size(); ++r) {
    if (bad[r] || without_keys[r]) continue;
    double sum = 0, sum_kernel = 0, sum_quant = 0, sum_cr = 0, sum_kernel_outward = 0, sum_cr_outward = 0;
    for (int c = 0; c < d; ++c) {
      const std::size_t i = r * d + c;
      sum += (o_vals.data[i] - exact.o.data[i]) / units.o[i];
      const double kernel = (o_vals.data[i] - target.o.data[i]) / units.o[i];
      const double sign = sign_of(target.o.data[i]);
      sum_kernel += kernel;
      sum_quant += (target.o.data[i] - exact.o.data[i]) / units.o[i];
      sum_cr += cr.o_ulps[i];
      sum_kernel_outward += sign * kernel;
      sum_cr_outward += sign * cr.o_ulps[i];
      per_cluster[cluster_of(r)].o_spread.add(kernel, cr.o_ulps[i]);
    }
    row_o[r] = sum / d;
    OutputSums& cs = per_cluster[cluster_of(r)].sums.o;
    cs.error += sum / d;
    cs.kernel += sum_kernel / d;
    cs.quant += sum_quant / d;
    cs.floor += sum_cr / d;
    cs.kernel_outward += sum_kernel_outward / d;
    cs.floor_outward += sum_cr_outward / d;
    ++cs.rows;
  }
  // delta: the captured one, else (PyTorch's SDPA does not return it) the one the trace's
  // kernel computes from the captured O and dO (kernel_delta).
  std::vector<double> kernel_deltas;
  if (trace.has("delta") && !in.d_o) {
    // delta is dO·O, and its exact value needs dO: a captured delta alone cannot be measured.
    item.delta_note = "delta: NOT tested for " + trace.source_name() +
                      ": the capture holds delta but no dO, which its exact value needs";
  } else if (trace.has("delta")) {
    // The format the kernel writes delta in: fp32 (its reduction's), or a rounded_products
    // model's delta_format. A container narrower than that rounded delta a second time, and
    // judged against the fp32 floor that rounding would read as the kernel's bias: refused
    // under a model (as a narrower O is, and as replay says it), named in a note without one.
    const Format written =
        named.recipe && named.recipe->delta == DeltaFormula::rounded_products && named.recipe->delta_format
            ? *named.recipe->delta_format
            : formats::fp32;
    // (An F64 or integer container has no fb::Format: none of them is narrower than fp32.)
    const std::optional<Format> container = dtype_format(trace.tensor("delta").dtype);
    if (container && container->precision() < written.precision()) {
      const Format& stored = *container;
      if (named.recipe)
        throw TraceError(trace.source_name() + ": tensor delta: stored as " + std::string(stored.name) +
                         ", narrower than the " + std::string(written.name) + " delta model " + named.name +
                         " writes: the capture rounded it again");
      item.assumed.push_back("note: " + trace.source_name() + ": tensor delta is stored as " +
                             std::string(stored.name) + ", narrower than the " + std::string(written.name) +
                             " a kernel writes delta in: the capture rounded it again, and that rounding is counted "
                             "as the kernel's error against the " +
                             std::string(written.name) + " floor (capture delta in " + std::string(written.name) +
                             " to measure the kernel alone)");
    }
    kernel_deltas = tensor_from_trace(trace, "delta").data;
  } else if (in.d_o && named.recipe && delta_reads_unrounded_o(*named.recipe)) {
    // Its delta reads O before the final cast (+o-fp32) or is rowsum(dP∘P) (+delta-dpp, the
    // tensor-op softmax backward): computed from the captured O it would be another kernel's,
    // and its excess over the fp32 floor would be O's own rounding.
    item.delta_note = "delta: NOT tested for " + trace.source_name() + ": the capture holds no delta, and " +
                      named.name +
                      "'s delta reads what a capture does not hold (O before its final cast, or dP and P), so it "
                      "cannot be computed from the captured O";
  } else if (in.d_o && !trace.metadata().model.empty()) {
    if (named.recipe) {
      for (std::size_t r = 0; r * d < o_vals.data.size(); ++r) {
        const auto v = kernel_delta(named, &in.d_o->data[r * d], &o_vals.data[r * d], d);
        if (!v) {
          kernel_deltas.clear();
          break;
        }
        kernel_deltas.push_back(*v);
      }
      if (!kernel_deltas.empty())
        item.delta_note = "delta: computed from each trace's captured O and dO as its kernel does (" +
                          trace.metadata().model + "'s reduction), since the capture holds no delta";
    }
  } else if (in.d_o) {
    item.delta_note = "delta: NOT tested for " + trace.source_name() +
                      ": the capture holds dO but no delta, and its metadata names no model to compute delta as "
                      "its kernel does (flashbits import --model NAME records one)";
  }
  std::vector<double> trace_delta;  // per row (NaN where the row is left out)
  if (!kernel_deltas.empty() && exact.delta) {
    if (kernel_deltas.size() != exact.delta->data.size())
      throw TraceError(trace.source_name() + ": tensor delta: expected one value per row of q");
    for (std::size_t i = 0; i < kernel_deltas.size(); ++i) {
      trace_delta.push_back((kernel_deltas[i] - exact.delta->data[i]) / units.delta[i]);
      if (!std::isfinite(kernel_deltas[i]) && !without_keys[i]) {
        if (!bad[i]) bad_rows.push_back(i);
        bad[i] = true;
      }
      if (bad[i] || without_keys[i]) continue;
      OutputSums& cs = per_cluster[cluster_of(i)].sums.delta;
      cs.error += trace_delta.back();
      const double target_delta = target.delta ? target.delta->data[i] : exact.delta->data[i];
      const double kernel = (kernel_deltas[i] - target_delta) / units.delta[i];
      cs.kernel += kernel;
      cs.quant += (target_delta - exact.delta->data[i]) / units.delta[i];
      cs.floor += cr.delta_ulps[i];
      cs.kernel_outward += sign_of(target_delta) * kernel;
      cs.floor_outward += sign_of(target_delta) * cr.delta_ulps[i];
      ++cs.rows;
    }
  }
  // Each cluster's fingerprint: its heads' q, O, dO and delta rows, its kv head's k and v,
  // the scale and the mask (FNV-1a over the values' bits).
  std::vector<std::uint64_t> hashes(clusters, 0xcbf29ce484222325ull);
  const auto mix = [](std::uint64_t& h, double v) {
    const auto bits = std::bit_cast<std::uint64_t>(v);
    for (int byte = 0; byte < 8; ++byte) h = (h ^ ((bits >> (8 * byte)) & 0xffu)) * 0x100000001b3ull;
  };
  for (std::size_t r = 0; r < bad.size(); ++r) {
    std::uint64_t& h = hashes[cluster_of(r)];
    for (int c = 0; c < d; ++c) {
      mix(h, in.q.data[r * d + c]);
      mix(h, o_vals.data[r * d + c]);
      if (in.d_o) mix(h, in.d_o->data[r * d + c]);
    }
    if (!kernel_deltas.empty()) mix(h, kernel_deltas[r]);
  }
  const std::size_t kv_rows = static_cast<std::size_t>(in.k.rows), kv_cols = static_cast<std::size_t>(in.k.cols),
                    v_cols = static_cast<std::size_t>(in.v.cols);
  // And its keys and values alone, with their shape: clusters that read the same ones are one
  // sample whatever else differs (KvGroups).
  std::vector<std::uint64_t> kv_hashes(clusters, 0xcbf29ce484222325ull);
  for (std::size_t cluster = 0; cluster < clusters; ++cluster) {
    std::uint64_t& kv = kv_hashes[cluster];
    mix(kv, static_cast<double>(kv_rows));
    mix(kv, static_cast<double>(kv_cols));
    mix(kv, static_cast<double>(v_cols));
    for (std::size_t i = 0; i < kv_rows * kv_cols; ++i) mix(kv, in.k.data[cluster * kv_rows * kv_cols + i]);
    for (std::size_t i = 0; i < kv_rows * v_cols; ++i) mix(kv, in.v.data[cluster * kv_rows * v_cols + i]);
    std::uint64_t& h = hashes[cluster];
    mix(h, static_cast<double>(kv));
    mix(h, in.softmax_scale);
    mix(h, in.causal ? 1.0 + static_cast<double>(in.causal_alignment) : 0.0);
  }
  // The kernel's own error is against its target: exact attention of the captured inputs, or
  // of their quantised form for an fp8 kernel (whose quantisation's share is kept apart).
  item.quantised = quantised_exact.has_value();
  for (std::size_t r = 0; r < bad.size(); ++r) {
    if (bad[r] || without_keys[r]) continue;  // its O or delta was non-finite, or it saw no key
    per_cluster[cluster_of(r)].by_max.push_back(
        {exact.row_max->data[r], row_o[r], trace_delta.empty() ? std::nullopt : std::optional<double>(trace_delta[r])});
  }
  for (std::size_t r : bad_rows) ++per_cluster[cluster_of(r)].non_finite_rows;
  for (std::size_t cluster = 0; cluster < clusters; ++cluster) {
    per_cluster[cluster].hash = hashes[cluster];
    per_cluster[cluster].kv_hash = kv_hashes[cluster];
  }
  item.cluster_keys = std::move(per_cluster);
  if (!bad_rows.empty()) {
    // A row with a finite O but a non-finite delta already gave its O to its cluster; drop
    // the run's verdict all the same, and name every such row.
    std::sort(bad_rows.begin(), bad_rows.end());
    item.non_finite_where = trace.source_name() + ": " + std::to_string(bad_rows.size()) + " row(s) " +
                            describe_rows(bad_rows, in.q.heads, in.q.rows);
  }
}

}  // namespace

BiasReport run_bias(const BiasRun& run, const BiasHooks& hooks) {
  BiasReport report;
  report.alpha = run.alpha;
  Samples s;
  if (run.model.recipe) {
    run_model_trials(run, hooks, s, report);
  } else {
    report.from_traces = true;
    std::vector<ItemResult> items(run.traces.size());
    for_each_item(static_cast<int>(run.traces.size()), run.threads, hooks, [&](int i) {
      if (hooks.before_item) hooks.before_item();
      ItemResult& item = items[static_cast<std::size_t>(i)];
      const Trace trace = import_capture({run.traces[static_cast<std::size_t>(i)]}, run.capture);
      item.hardware = is_hardware_capture(trace);
      item.unknown_source = trace.metadata().source == kUnknownSource;
      item.emulated = trace.metadata().source == kEmulatedSource;
      item.source_name = trace.source_name();
      item.assumed = assumed_metadata_notes(trace);
      add_trace(trace, item);
    });
    // One verdict is about one kernel: traces that name different models (or some none)
    // would pool their kernels' errors into a "this kernel" verdict that describes none of them.
    for (const ItemResult& item : items)
      if (item.model == items.front().model && item.formats != items.front().formats)
        // One kernel in two formats: the same model, so "test each kernel apart" would not help.
        throw std::invalid_argument(items.front().source_name + " (" + items.front().formats + ") and " +
                                    item.source_name + " (" + item.formats + ")" +
                                    (item.model.empty() ? "" : ", both of model " + item.model) +
                                    ": the traces mix formats, and a verdict is in one format's ulps; test each "
                                    "format's traces apart: give one format's files to --traces at a time "
                                    "(--traces FILE...; Python: bias_test(traces=[FILE, ...]))");
      else if (item.model != items.front().model) {
        const auto named = [](const ItemResult& x) {
          return x.source_name + (x.model.empty() ? " names no model" : " names model " + x.model) + " (" + x.formats +
                 ")";
        };
        throw std::invalid_argument(named(items.front()) + ", " + named(item) +
                                    ": a verdict is about one kernel; test each kernel's traces apart (flashbits "
                                    "import --model NAME records a capture's)");
      }
    // One model's traces may still differ in whether they are measured against quantised
    // inputs (an O stored in another format than the model's): the quantisation's share would
    // then cover some samples and read as bias in the others.
    for (const ItemResult& item : items)
      if (item.quantised != items.front().quantised)
        throw std::invalid_argument(items.front().source_name + " and " + item.source_name +
                                    ": one is measured against its quantised inputs and the other not (their o "
                                    "formats differ); test them apart");
    int hardware = 0, unknown = 0, emulated = 0;
    KvGroups groups;
    for (const ItemResult& item : items) {
      merge_item(item, s, report, groups);
      hardware += item.hardware;
      unknown += item.unknown_source;
      emulated += item.emulated;
    }
    groups.emit(s);
    report.units_format = items.front().units_format;  // one for all: the formats were checked equal
    // Each source counted by what it is: a capture of unknown provenance is not emulated.
    const int other = static_cast<int>(run.traces.size()) - hardware - unknown - emulated;
    report.subject = std::to_string(run.traces.size()) + (run.traces.size() == 1 ? " trace" : " traces") +
                     (run.traces_label.empty() ? "" : " in " + run.traces_label) +
                     " (one sample per set of keys and values)";
    report.provenance = std::to_string(hardware) + " of " + std::to_string(run.traces.size()) +
                        " traces are hardware captures (source cuda:...)" +
                        (emulated ? "; " + std::to_string(emulated) + " emulated" : "") +
                        (unknown ? "; " + std::to_string(unknown) + " of UNKNOWN provenance" : "") +
                        (other > 0 ? "; " + std::to_string(other) + " from another source" : "");
  }
  report.paired = run.against.has_value();
  if (run.against) report.baseline = run.against->name;
  report.alpha = run.alpha;
  report.at_stake = run.at_stake;
  report.samples_note =
      report.from_traces
          ? "one sample per set of keys and values: the rows of a kv head of a batch entry of a trace share them, "
            "as do rows in other heads, entries or traces that read the same keys and values bit for bit; such "
            "rows are one cluster, and the sample is their mean"
          : "one sample per trial (each trial draws its own keys and values)";
  report.has_delta = !s.delta.empty();
  report.has_quantisation = !s.o_quant.empty();
  // Two comparisons per output, signed and magnitude, each at alpha / comparisons (verdict.hpp).
  report.comparisons = run_comparisons(report.has_delta);
  report.alpha_per_comparison = per_comparison_alpha(run.alpha, report.comparisons);
  const double level = report.alpha_per_comparison;
  // Every interval and "differs from 0" of the report at that one level: an excess series at
  // alpha beside a verdict at alpha / comparisons read "differs from 0" and then "no
  // detectable added bias" for a p between the two (the verdict audit).
  report.o = summarize(s.o, level);
  report.delta = summarize(s.delta, level);
  report.o_quant = summarize(s.o_quant, level);
  report.delta_quant = summarize(s.delta_quant, level);
  report.o_cr = summarize(s.o_cr, level);
  report.delta_cr = summarize(s.delta_cr, level);
  report.o_vs_floor = compare_with_floor(s.o_kernel, s.o_cr, level, run.at_stake, report.baseline);
  report.delta_vs_floor = compare_with_floor(s.delta_kernel, s.delta_cr, level, run.at_stake, report.baseline);
  report.o_magnitude_vs_floor =
      compare_magnitude_with_floor(s.o_kernel_outward, s.o_cr_outward, level, run.at_stake, report.baseline);
  report.delta_magnitude_vs_floor =
      compare_magnitude_with_floor(s.delta_kernel_outward, s.delta_cr_outward, level, run.at_stake, report.baseline);
  report.o_spread = s.o_spread;
  report.no_verdict = report.non_finite_rows > 0;
  report.verdict = combine(report.o_vs_floor.verdict, report.o_magnitude_vs_floor.verdict);
  if (report.has_delta)
    report.verdict =
        combine(report.verdict, combine(report.delta_vs_floor.verdict, report.delta_magnitude_vs_floor.verdict));
  report.biased = !report.no_verdict && report.verdict == Verdict::adds_bias;
  return report;
}

std::string report_verdict_text(const BiasReport& r) {
  return r.no_verdict ? "no verdict (non-finite output)" : verdict_text(r.verdict);
}

std::vector<std::string> quantisation_outputs_biased(const BiasReport& r) {
  std::vector<std::string> outputs;
  if (!r.has_quantisation || r.no_verdict) return outputs;
  // At the report's one level, as the quantisation's own lines judge "mean differs from 0":
  // a clause here must not contradict the line it summarises.
  if (r.o_quant.n >= 2 && r.o_quant.biased) outputs.push_back("o");
  if (r.has_delta && r.delta_quant.n >= 2 && r.delta_quant.biased) outputs.push_back("delta");
  return outputs;
}

std::string quantisation_verdict_note(const BiasReport& r) {
  if (!r.has_quantisation || r.no_verdict) return "";
  const auto share = [](const char* output, const BiasStatistics& q) {
    char mean[32];
    std::snprintf(mean, sizeof mean, "%+.3g", q.mean);
    return std::string(output) + " " + mean + " ulp, p=" + p_value_text(q.p_t);
  };
  std::string note =
      "the verdict is the kernel's arithmetic against the exact attention of its quantised inputs: the input "
      "quantisation's own error is measured apart and not part of it";
  const std::vector<std::string> biased = quantisation_outputs_biased(r);
  if (biased.empty()) {
    // Its sizes all the same: a share near the level is worth seeing beside the verdict.
    std::string shares;
    if (r.o_quant.n >= 2) shares = share("O", r.o_quant);
    if (r.has_delta && r.delta_quant.n >= 2) shares += (shares.empty() ? "" : "; ") + share("delta", r.delta_quant);
    if (!shares.empty())
      note += " (" + shares + ": not distinguishable from 0 at " + shortest_decimal(r.alpha_per_comparison) + ")";
    return note;
  }
  note += "; the input quantisation adds its own bias (";
  for (std::size_t i = 0; i < biased.size(); ++i)
    note += (i ? "; " : "") + (biased[i] == "o" ? share("O", r.o_quant) : share("delta", r.delta_quant));
  return note + "), not counted here";
}

std::string stat_verdict(const BiasStatistics& s, bool run_has_verdict) {
  if (s.n == 0) return "no samples";
  if (!run_has_verdict) return "none (non-finite output elsewhere in the run)";
  return s.biased ? "mean differs from 0" : "mean not distinguishable from 0";
}

namespace {

nlohmann::ordered_json stats_json(const BiasStatistics& s, bool run_has_verdict) {
  nlohmann::ordered_json j;
  j["n"] = s.n;
  j["mean_ulps"] = s.mean;
  // No interval and no detectable size without spread (one sample, or all equal): a [x, x]
  // and a 0 would read as certainty.
  const bool has_interval = s.has_interval();
  j["ci"] = has_interval ? nlohmann::ordered_json{s.ci_low, s.ci_high} : nlohmann::ordered_json(nullptr);
  // One sample: no t test (the text says so); a p of 1 would read as evidence of no bias.
  const bool tested = s.n >= 2;
  j["t"] = tested ? nlohmann::ordered_json(s.t_statistic) : nlohmann::ordered_json(nullptr);
  j["p_t"] = tested ? nlohmann::ordered_json(s.p_t) : nlohmann::ordered_json(nullptr);
  j["positives"] = s.positives;
  j["negatives"] = s.negatives;
  j["p_sign"] = s.p_sign;
  j["min_detectable_ulps"] = has_interval ? nlohmann::ordered_json(s.min_detectable) : nlohmann::ordered_json(nullptr);
  j["verdict"] = stat_verdict(s, run_has_verdict);
  return j;
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

}  // namespace

nlohmann::ordered_json floor_comparison_json(const FloorComparison& c, bool run_has_verdict) {
  nlohmann::ordered_json j;
  j["verdict"] = run_has_verdict ? verdict_text(c.verdict) : "none (non-finite output)";
  // Without a verdict the statistic's own reason ("0 independent samples", when every trial
  // was non-finite) would hide why.
  j["reason"] = run_has_verdict ? c.reason
                                : "some trial gave a NaN or infinite output on finite inputs: no verdict from the "
                                  "trials that were finite";
  // No sample, no mean or p-value (a 0 would read as "no error"): null, as its reason says why.
  const auto value = [&c](double v) { return c.kernel.n > 0 ? nlohmann::ordered_json(v) : nullptr; };
  j["kernel_mean_ulps"] = value(c.kernel.mean);
  j["floor_mean_ulps"] = value(c.floor.mean);
  j["excess_mean_ulps"] = value(c.excess.mean);
  // A t test needs two samples: null for one, as the series' p_t (stats_json).
  const auto p_value = [&c](double p) { return c.excess.n >= 2 ? nlohmann::ordered_json(p) : nullptr; };
  j["excess_p_t"] = p_value(c.excess.p_t);
  j["min_detectable_ulps"] =
      c.excess.has_interval() ? nlohmann::ordered_json(c.excess.min_detectable) : nlohmann::ordered_json(nullptr);
  j["distance_mean_ulps"] = value(c.distance.mean);
  j["distance_p_t"] = p_value(c.distance.p_t);
  return j;
}

nlohmann::ordered_json bias_report_json(const BiasReport& r, bool by_max) {
  const bool has_verdict = !r.no_verdict;
  nlohmann::ordered_json j;
  j["subject"] = r.subject;
  j["provenance"] = r.provenance;
  if (!r.delta_note.empty()) j["delta_note"] = r.delta_note;
  if (r.rows_without_keys > 0) j["rows_without_keys"] = r.rows_without_keys;
  if (r.repeated_samples > 0) j["repeated_samples"] = r.repeated_samples;
  if (r.shared_kv_clusters > 0) j["shared_kv_clusters"] = r.shared_kv_clusters;
  if (!r.warnings.empty()) j["warnings"] = r.warnings;
  if (!r.notes.empty()) j["notes"] = r.notes;
  j["samples"] = r.samples_note;
  j["units_format"] = r.units_format;
  j["alpha"] = r.alpha;
  j["comparisons"] = r.comparisons;
  j["alpha_per_comparison"] = r.alpha_per_comparison;
  j["at_stake_ulps"] = r.at_stake;
  j["o"] = stats_json(r.o, has_verdict);
  if (r.has_delta) j["delta"] = stats_json(r.delta, has_verdict);
  if (r.has_quantisation) {
    nlohmann::ordered_json q;
    q["o"] = stats_json(r.o_quant, has_verdict);
    if (r.has_delta) q["delta"] = stats_json(r.delta_quant, has_verdict);
    j["quantisation"] = q;
  }
  nlohmann::ordered_json cr, ex, vs, magnitude;
  cr["o"] = stats_json(r.o_cr, has_verdict);
  ex["o"] = stats_json(r.o_vs_floor.excess, has_verdict);
  vs["o"] = floor_comparison_json(r.o_vs_floor, has_verdict);
  magnitude["o"] = floor_comparison_json(r.o_magnitude_vs_floor, has_verdict);
  if (r.has_delta) {
    cr["delta"] = stats_json(r.delta_cr, has_verdict);
    ex["delta"] = stats_json(r.delta_vs_floor.excess, has_verdict);
    vs["delta"] = floor_comparison_json(r.delta_vs_floor, has_verdict);
    magnitude["delta"] = floor_comparison_json(r.delta_magnitude_vs_floor, has_verdict);
  }
  j[r.paired ? "against" : "correctly_rounded"] = cr;
  j["excess"] = ex;
  j["against_floor"] = vs;
  j["magnitude_against_floor"] = magnitude;
  nlohmann::ordered_json spread;
  spread["elements"] = r.o_spread.elements;
  spread["kernel_rms_ulps"] = r.o_spread.kernel_rms();
  spread["floor_rms_ulps"] = r.o_spread.floor_rms();
  spread["kernel_max_abs_ulps"] = r.o_spread.kernel_max_abs;
  j["o_spread"] = spread;
  if (r.no_verdict) {
    nlohmann::ordered_json nf;
    nf["rows"] = r.non_finite_rows;
    nf["where"] = r.non_finite_where;
    j["non_finite_output"] = nf;
  }
  j["verdict_from"] = r.no_verdict ? "none" : r.paired ? "paired" : "excess";
  // With --against the verdict is relative to that model, which is no floor: it has its own bias.
  if (r.paired) j["relative_to"] = r.baseline;
  j["verdict"] = report_verdict_text(r);
  // fp8 kernels: the verdict leaves the input quantisation out, and says so (with any share of
  // it that is itself significant).
  if (const std::string note = quantisation_verdict_note(r); !note.empty()) {
    j["verdict_note"] = note;
    j["quantisation_biased"] = quantisation_outputs_biased(r);
  }
  if (by_max) {
    nlohmann::ordered_json g;
    g["distinct_values"] = r.by_max.size();
    g["o"] = spread_json(describe_values(r.by_max.o_means()));
    const std::vector<double> dm = r.by_max.delta_means();
    if (!dm.empty()) g["delta"] = spread_json(describe_values(dm));
    j["by_row_max"] = g;
  }
  return j;
}

}  // namespace fb::attn
