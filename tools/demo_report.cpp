// tools/demo_report.cpp: the demo report (contract in demo_report.hpp).
#include "tools/demo_report.hpp"

#include <algorithm>
#include <filesystem>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <optional>
#include <ostream>
#include <sstream>
#include <vector>

#include "attention/attention.hpp"
#include "formats/decimal_text.hpp"
#include "emu/ops.hpp"
#include "attention/kernel_models.hpp"
#include "tools/cli_common.hpp"
#include "api/event_json.hpp"
#include "api/models.hpp"
#include "studies/bias_run.hpp"
#include "studies/measure.hpp"
#include "attention/trace_inputs.hpp"
#include "studies/verdict.hpp"
#include "traces/capture_import.hpp"

namespace fb::cli {
namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// Per-row mean signed error of O against the exact output, in bias-test's units (`units`:
// attn::error_units, one ulp of the output format at max(|O|, Σ P·|V|) per element), so that
// the demo's figures are the ones bias-test reports for the same rows.
std::vector<double> row_means(const attn::Tensor4& got, const attn::Tensor4& want, const std::vector<double>& units,
                              bool magnitude = false) {
  std::vector<double> means;
  for (std::size_t r = 0; r * got.cols < got.data.size(); ++r) {
    double s = 0;
    for (int c = 0; c < got.cols; ++c) {
      const std::size_t i = r * got.cols + c;
      // The magnitude error (studies/measure.hpp outward_mean): the component away from zero.
      s += (magnitude ? attn::sign_of(want.data[i]) : 1.0) * (got.data[i] - want.data[i]) / units[i];
    }
    means.push_back(s / got.cols);
  }
  return means;
}

// One sample per kv head of each batch entry, as bias-test --traces counts them: the mean of
// its rows' means (rows that see no key, `keep` false, left out). Rows of one kv head share its
// keys and values, so they are no independent samples.
std::vector<double> cluster_means(const std::vector<double>& row_mean, const std::vector<bool>& keep,
                                  const attn::AttentionInputs& in) {
  std::vector<double> sum(attn::kv_cluster_count(in), 0.0);
  std::vector<long long> count(sum.size(), 0);
  for (std::size_t r = 0; r < row_mean.size(); ++r) {
    if (!keep[r]) continue;
    const std::size_t c = attn::kv_cluster_of(in, r);
    sum[c] += row_mean[r];
    ++count[c];
  }
  std::vector<double> means;
  for (std::size_t c = 0; c < sum.size(); ++c)
    if (count[c] > 0) means.push_back(sum[c] / static_cast<double>(count[c]));
  return means;
}

void describe_event(std::ostream& os, const char* what, const RoundingEvent& ev, int kept_bits) {
  os << "    " << what << ": exact value " << api::exact_value_string(ev) << "\n";
  // The significand as bits: kept bits | round bit | what sticky covers.
  std::string bits;
  for (int i = 63; i >= 0 && 63 - i < kept_bits + 12; --i) {
    if (63 - i == kept_bits)
      bits += " | ";
    else if (63 - i == kept_bits + 1)
      bits += " ";
    bits += ((ev.significand >> i) & 1) ? '1' : '0';
  }
  os << "      significand bits: " << bits << "...  (kept | round bit, then sticky region)\n";
  os << "      significand overflow: " << (ev.significand_overflow ? "yes (a same-sign add carried out a bit)" : "no")
     << ", round bit " << ev.round_bit << ", sticky " << ev.sticky_bit << (ev.tie ? ", exact tie" : "") << "\n";
  // The mode is the step's own (a tensor core's truncation, a buffer's RNE): name none.
  os << "      decision: rounded "
     << (ev.direction == RoundDirection::up     ? "up (away from zero)"
         : ev.direction == RoundDirection::down ? "down (toward zero)"
                                                : "exactly")
     << ", error " << fmt("%+.3g", ev.error_ulps) << " ulp\n";
}

// The report itself, into `os`; `progress` is started once the trace's size is known.
int write_report(std::ostream& os, const std::string& path, std::optional<ProgressBar>& progress) {
  // A numpy capture holds no metadata naming its kernel, which the demo replays under; read as
  // safetensors it was "header length ... is absurd". Say what demo reads and how to make one.
  std::error_code ec;
  const std::string make_one =
      "a numpy capture becomes one with `flashbits import " + path + " --model NAME --source S --out FILE.safetensors`";
  if (std::filesystem::is_directory(path, ec))
    throw InputError(path + ": a directory; demo reads one trace file (`flashbits bias-test --traces " + path +
                     "` tests a folder of traces; " + make_one + ")");
  if (is_numpy_file_name(path) && std::filesystem::exists(path, ec))
    throw InputError(path + ": demo reads a flashbits trace (.safetensors whose metadata names its kernel model); " +
                     make_one);
  Trace trace = [&] {
    try {
      return read_trace(path);
    } catch (const TraceError& e) {
      throw InputError(e.what());
    }
  }();
  const TraceMetadata& md = trace.metadata();
  const attn::AttentionInputs in = attn::inputs_from_trace(trace);
  // No verdict on inputs that cannot support one (exit 2, naming the file and rows).
  attn::check_inputs_support_statistics(in, path);
  // The metadata's model (an unknown or unfit one is an error of this file), with the SFUs
  // measured on the capture's GPU where there are some (api/models.hpp).
  if (md.model.empty())
    throw InputError(
        path +
        ": names no model (its metadata key model is absent or empty): demo replays a trace under the model it names "
        "(`flashbits import --model NAME` records one; `flashbits replay FILE --model NAME` "
        "replays without)");
  // As replay and import check it: a model for the trace's dtype (TraceError names the file).
  const attn::ModelHandle named = attn::check_replayable(trace, "").model;
  api::ModelResolutionNotes resolution;
  const attn::ModelHandle model = api::refine_model(named, "auto", "", {}, &trace, &resolution);
  // The demo measures against exact attention of the trace's inputs: an fp8 kernel's input
  // quantisation would read as its bias there. bias-test --traces keeps it apart.
  if (model.recipe->fp8.enabled)
    throw InputError(path + ": model " + model.name +
                     " quantises its inputs to fp8; demo shows the bf16/fp16 sink mechanism and measures against "
                     "exact attention of the trace's inputs, which would count the quantisation as bias: "
                     "`flashbits bias-test --traces " +
                     path + "` measures it apart");
  const std::string& sfu_note = resolution.sfu_note;
  const Format& out_f = model.recipe->output;
  // The runs below, counted in rows: the replay, up to 8 traced candidates and one more, the fix.
  // With dO a run counts each row twice, its forward and its share of the backward (as replay).
  const std::uint64_t rows = static_cast<std::uint64_t>(in.q.batch) * in.q.heads * in.q.rows * (in.d_o ? 2 : 1);
  const std::size_t candidates = std::min<std::size_t>(8, static_cast<std::size_t>(in.q.cols));
  progress.emplace("rows", rows * (candidates + 3));
  // The header names what demo looks for, not what the trace holds: on a trace without tied
  // maxima section 2 says so ("no tie").
  os << "flashbits demo: looking for the rounding bias of bf16/fp16 attention at tied row maxima (sink rows), on "
     << path << "\n";
  // provenance_text: a capture of unknown source is called so, not "emulated" (it may well be
  // a hardware dump that did not record its GPU).
  os << provenance_text(md) << "; model " << model.name << "; SFU " << attn::sfu_report(*model.recipe)
     << (attn::sfu_hardware_measured(*model.recipe) ? "" : " [unmeasured on hardware]") << "\n";
  if (!sfu_note.empty()) os << sfu_note << "\n";
  // A model's own warning (a black-box fit that is not bit-exact, an fp8 P-bar that saturates),
  // as replay and bias-test give it: a mismatch below is then the model's known residual.
  if (!model.recipe->warning.empty()) os << "warning: " << model.name << ": " << model.recipe->warning << "\n";
  // What the trace's metadata leaves unsaid and the replay assumes (scale, causality, a causal
  // mask's alignment), as replay and bias-test --traces print it.
  for (const std::string& note : attn::assumed_metadata_notes(trace)) os << note << "\n";
  os << "\n";

  // 1. Replay, with the run's recorded seed where the model draws from one (+o-sr), as replay.
  attn::RunOptions run_options;
  run_options.progress = &progress->counter();
  if (attn::draws_random_bits(*model.recipe)) run_options.seed = attn::required_run_seed(trace, model);
  const attn::AttentionOutputs base = attn::run_attention(model, in, run_options);
  const RawTensor captured = trace.bits("o");
  long long match = 0;
  for (std::size_t i = 0; i < captured.bits.size(); ++i) {
    std::uint32_t b = 0;
    match += from_double_exact(captured.format, base.o.data[i], b) && b == captured.bits[i];
  }
  os << "1. Replay: " << match << "/" << captured.bits.size() << " elements of O match the trace bit for bit.\n\n";
  // A model whose O is NaN or infinite on these finite inputs gets no verdict: say where.
  const std::vector<std::size_t> bad_base = attn::non_finite_rows(base.o);
  if (!bad_base.empty()) {
    os << "2. No mechanism, no statistics: " << model.name << "'s O is non-finite in " << bad_base.size() << " row(s) "
       << attn::describe_rows(bad_base, base.o.heads, base.o.rows)
       << " (finite inputs).\n\nVerdict: none (the output is not finite everywhere).\n";
    return match == static_cast<long long>(captured.bits.size()) ? kExitOk : kExitCheckFailed;
  }

  // 2. The mechanism, looked for on the element with the most negative error in bias-test's
  // units (one ulp of the output format at max(|O|, sum_j P_ij |V_jc|)): in ulps at |exact O|
  // alone, an element whose tied keys' values cancel (exact O near 0) would win on the small
  // terms' error measured against a near-zero value, a cancellation rather than the mechanism.
  const attn::AttentionOutputs exact = attn::exact_attention(in);
  const attn::ErrorUnits units = attn::error_units(out_f, in, exact);
  auto error_in_units = [&](std::size_t i) { return (base.o.data[i] - exact.o.data[i]) / units.o[i]; };
  std::size_t worst = 0;
  double worst_err = 0;
  // The sink scenario makes V mostly negative in some features: show the most negative
  // error among negative outputs there (a rounding away from zero), else anywhere.
  for (int pass = 0; pass < 2 && worst_err == 0; ++pass)
    for (std::size_t i = 0; i < base.o.data.size(); ++i) {
      const double e = error_in_units(i);
      if ((pass == 1 || exact.o.data[i] < 0) && e < worst_err) worst_err = e, worst = i;
    }
  const int d = base.o.cols;
  // A row's per-tile story exists only where the model has tiles and runs them unsplit: a
  // materialised model's tracer records no per-key events (its counts would all read 0, and "0
  // keys have P-bar == 1" is never true), and a split run refuses a tracer. Said, and section 3
  // follows: the replay and the verdict do not need the trace.
  const std::string untraced = attn::untraced_tiles_reason(model, in);
  if (!untraced.empty()) {
    os << "2. The mechanism: not traced on this trace: " << untraced
       << " (bias-test and the verdict below do not need it; `flashbits demo` on a trace of a tiled, unsplit kernel "
          "shows it).\n\n";
    progress->advance((candidates + 1) * rows);  // the traced runs not made
  }
  if (untraced.empty()) {
    const int row = static_cast<int>((worst / d) % base.o.rows);
    const int head = static_cast<int>((worst / d / base.o.rows) % base.o.heads);
    const int batch = static_cast<int>(worst / d / base.o.rows / base.o.heads);
    int feature = static_cast<int>(worst % d);
    // The tracer keeps every rounding event for one feature of the row. Show the feature
    // with the most negative error whose P.V accumulation has a significand overflow that
    // was rounded away from zero (the mechanism itself); else say that none of those tried has one.
    std::vector<int> features_by_error(static_cast<std::size_t>(d));
    for (int c = 0; c < d; ++c) features_by_error[static_cast<std::size_t>(c)] = c;
    const std::size_t row_begin = worst - worst % static_cast<std::size_t>(d);
    auto err_of = [&](int c) { return error_in_units(row_begin + static_cast<std::size_t>(c)); };
    std::stable_sort(features_by_error.begin(), features_by_error.end(),
                     [&](int a, int b) { return err_of(a) < err_of(b); });
    attn::Tracer tracer;
    tracer.rows.push_back({batch, head, row});
    attn::RunOptions opt = run_options;
    opt.tracer = &tracer;
    auto carried_away = [](const RoundingEvent& ev) {
      return ev.significand_overflow && ev.direction == RoundDirection::up;
    };
    // At most 8 candidates: each is one traced run of the whole trace.
    if (features_by_error.size() > 8) features_by_error.resize(8);
    std::size_t runs_left = features_by_error.size() + 1;  // the candidates, and the re-run after them
    bool mechanism_found = false;
    for (int candidate : features_by_error) {
      tracer.plot_feature = candidate;
      attn::run_attention(model, in, opt);
      --runs_left;
      const attn::RowTrace& t = tracer.traces.front();
      for (const auto& ev : t.pv_buffer_events) mechanism_found |= carried_away(ev);
      for (const auto& step : t.pv_dot_steps) mechanism_found |= carried_away(step.output_event);
      if (mechanism_found) {
        feature = candidate;
        break;
      }
    }
    if (tracer.plot_feature != feature) {
      tracer.plot_feature = feature;
      attn::run_attention(model, in, opt);
      --runs_left;
    }
    progress->advance(runs_left * rows);  // the runs a candidate showing the mechanism made unneeded
    worst_err = err_of(feature);
    const std::string where = (base.o.batch > 1 ? "batch " + std::to_string(batch) + ", " : std::string()) +
                              (base.o.heads > 1 ? "head " + std::to_string(head) + ", " : std::string()) + "row " +
                              std::to_string(row);
    const std::string replay_where = (base.o.batch > 1 ? " --batch " + std::to_string(batch) : std::string()) +
                                     (base.o.heads > 1 ? " --head " + std::to_string(head) : std::string()) +
                                     " --row " + std::to_string(row);
    os << (mechanism_found ? "2. The mechanism, " : "2. Looking for the mechanism, ") << where << " feature " << feature
       << " (O error " << fmt("%+.3g", worst_err) << " ulps of " << out_f.name
       << " at max(|O|, sum_j P_ij |V_jc|), the row's most negative):\n";
    if (!mechanism_found)
      os << "    none of the " << features_by_error.size()
         << " features with this row's most negative errors has a rounding in its P.V accumulation that carried a bit "
            "out and rounded it away from zero"
         << (model.recipe->o_buffer_format ? "" : " (" + model.name + " keeps O in its fp32 accumulator between tiles)")
         << ".\n";
    if (!tracer.traces.empty()) {
      const attn::RowTrace& t = tracer.traces.front();
      // P-bar == 1 at the row's final max are the tied keys; a P-bar == 1 at an earlier tile's
      // running max was rescaled by alpha < 1 once a larger score came, and ties nothing.
      const double final_max = t.tiles.empty() ? 0.0 : t.tiles.back().running_max;
      int tied = 0, superseded = 0, ovf = 0, up = 0, down = 0;
      for (const auto& tile : t.tiles) {
        (tile.running_max == final_max ? tied : superseded) += tile.p_equal_one;
        ovf += tile.significand_overflows;
        up += tile.rounded_up;
        down += tile.rounded_down;
      }
      os << "    " << tied << (tied == 1 ? " key has" : " keys have") << " P-bar == 1 exactly at the row's final max"
         << (tied > 1    ? " (tied row max)"
             : tied == 1 ? " (no tie)"
                         : "");
      if (superseded > 0)
        os << ", " << superseded << " more at an earlier tile's running max (rescaled once a larger score came)";
      os << "; the P.V accumulation of this row saw " << ovf << " significand overflows, " << up << " roundings up and "
         << down << " down (in magnitude).\n";
      // Prefer a rounding that shows the mechanism: a carried-out (significand overflow)
      // bit rounded away from zero; else any rounding away from zero; else any inexact one.
      const RoundingEvent* shown = nullptr;
      int kept = out_f.precision();
      auto pick = [&](auto&& wanted) {
        for (const auto& ev : t.pv_buffer_events)
          if (!shown && wanted(ev)) shown = &ev, kept = out_f.precision();
        for (const auto& step : t.pv_dot_steps)
          if (!shown && wanted(step.output_event)) shown = &step.output_event, kept = formats::fp32.precision();
      };
      pick(carried_away);
      pick([](const RoundingEvent& ev) { return ev.direction == RoundDirection::up; });
      pick([](const RoundingEvent& ev) { return ev.direction != RoundDirection::exact; });
      if (shown) describe_event(os, "one rounding of this feature's P.V accumulation", *shown, kept);
      if (!t.cumulative_error_by_key.empty())
        os << "    cumulative rounding error of O-bar after all keys: "
           << fmt("%+.4g", t.cumulative_error_by_key.back()) << " (value units; `flashbits replay " << path
           << replay_where << " --feature " << feature << " --plot FILE.svg` draws it)\n";
    }
    os << "\n";
  }

  // 3. The kernel against the best its output format allows, and the fix beside it: per row
  // the mean error of O against exact, the correctly rounded reference's (exact O rounded
  // once into the output format) and the kernel's excess over it (bias-test's verdict).
  // A trace of a kernel that already runs the dynamic max (a +dynmax capture) has no fix to
  // show beside it: "+dynmax" appended twice was refused as a bad --model.
  std::optional<attn::ModelHandle> fixed;
  std::optional<attn::AttentionOutputs> fix;
  if (!model.recipe->dynmax) {
    fixed = api::resolve_model({md.model + "+dynmax", in.dtype, "auto", ""}, {}, &trace);
    attn::RunOptions fix_options;
    fix_options.progress = &progress->counter();
    fix = attn::run_attention(*fixed, in, fix_options);
    // With the fix, a model whose O is NaN or infinite on these finite inputs gets no verdict.
    const std::vector<std::size_t> bad_fix = attn::non_finite_rows(fix->o);
    if (!bad_fix.empty()) {
      os << "3. No statistics: " << fixed->name << "'s O is non-finite in " << bad_fix.size() << " row(s) "
         << attn::describe_rows(bad_fix, fix->o.heads, fix->o.rows)
         << " (finite inputs).\n\nVerdict: none (the output is not finite everywhere).\n";
      return match == static_cast<long long>(captured.bits.size()) ? kExitOk : kExitCheckFailed;
    }
  }
  // The kernel's error is the captured O's (what bias-test --traces measures; the replay above
  // says whether the model reproduces it), the fix's is its recomputation's.
  attn::Tensor4 captured_o = base.o;
  for (std::size_t i = 0; i < captured.bits.size(); ++i)
    captured_o.data[i] = to_double(captured.format, captured.bits[i]);
  const std::vector<double> err = row_means(captured_o, exact.o, units.o);
  const std::vector<double> err_fix = fix ? row_means(fix->o, exact.o, units.o) : std::vector<double>{};
  // The floor, as bias-test's: the `correctly-rounded` reference, rounded to nearest even where
  // the kernel keeps O.
  const attn::ModelHandle reference = attn::correctly_rounded_reference(*model.recipe);
  const attn::Tensor4 o_cr = attn::round_exact_outputs(*reference.recipe, in, exact, {}).o;
  const std::vector<double> err_cr = row_means(o_cr, exact.o, units.o);
  // Rows that see no key (a causal mask with more queries than keys) hold O = 0 by every
  // kernel's guard: no rounding to measure, left out as bias-test leaves them out.
  std::vector<bool> keep(err.size(), true);
  long long without_keys = 0;
  for (std::size_t r = 0; r < keep.size(); ++r)
    if (exact.lse.data[r] == std::numeric_limits<double>::infinity()) keep[r] = false, ++without_keys;
  const std::vector<double> samples = cluster_means(err, keep, in), samples_cr = cluster_means(err_cr, keep, in);
  const std::vector<double> samples_fix = fix ? cluster_means(err_fix, keep, in) : std::vector<double>{};
  std::vector<double> excess(samples.size()), excess_fix(samples_fix.size());
  for (std::size_t c = 0; c < samples.size(); ++c) excess[c] = samples[c] - samples_cr[c];
  for (std::size_t c = 0; c < samples_fix.size(); ++c) excess_fix[c] = samples_fix[c] - samples_cr[c];
  // bias-test's level for this file (studies/verdict.hpp): the run's alpha 1e-3 over its
  // comparisons, signed and magnitude per output, delta's too where the trace holds dO (from
  // which bias-test computes delta). The demo shows O's; its intervals are at the same level.
  const int comparisons = attn::run_comparisons(in.d_o.has_value());
  const double level = attn::per_comparison_alpha(1e-3, comparisons);
  auto line = [&](const std::string& what, const std::vector<double>& v) {
    const auto st = attn::summarize(v, level);
    os << "    " << what << ": " << fmt("%+.4g", st.mean);
    if (st.has_interval())
      os << "  " << fmt("%.6g", 100.0 * (1.0 - level)) << "% CI [" << fmt("%+.3g", st.ci_low) << ", "
         << fmt("%+.3g", st.ci_high) << "]  p=" << attn::p_value_text(st.p_t);
    else if (st.has_spread())
      os << " in every sample (no spread: no interval)";
    os << "\n";
  };
  os << "3. Mean signed error of O (ulps of " << out_f.name << " at max(|O|, sum_j P_ij |V_jc|), as bias-test), "
     << samples.size() << " independent sample(s): one per kv head (its rows share keys and values)"
     << (without_keys > 0 ? "; " + std::to_string(without_keys) + " row(s) that see no key left out" : "") << ":\n";
  // An emulated trace's O is the model's own: "captured" would read as a measurement.
  line(
      model.name + (is_hardware_capture(trace) ? " (the captured O)" : " (the trace's O, emulated)") + " against exact",
      samples);
  line("correctly rounded reference (exact, rounded once)", samples_cr);
  line(model.name + " excess over the reference", excess);
  // The fix is the model run on the trace's inputs, never a capture: said on its line, so that
  // it is not read as the hardware's next to the captured O's. Measured parts (tensor cores,
  // SFU tables) do not make the variant measured: no capture of this trace's kernel runs it.
  if (fixed)
    line(fixed->name + " excess over the reference (emulated on the trace's inputs; this variant is UNMEASURED on " +
             "hardware" + (fixed->recipe->hardware_validated() ? ", though its tensor cores and SFUs are" : "") + ")",
         excess_fix);
  // bias-test's verdict rules (studies/verdict.hpp) on those samples: O's verdict, as
  // bias-test --traces gives it for this file's O: its signed and its magnitude errors against
  // the floor's, each at `level`.
  const auto magnitude_samples = [&](const attn::Tensor4& o) {
    return cluster_means(row_means(o, exact.o, units.o, true), keep, in);
  };
  const std::vector<double> magnitude_cr = magnitude_samples(o_cr);
  struct Judged {
    attn::FloorComparison signed_error, magnitude;
    attn::Verdict verdict() const { return attn::combine(signed_error.verdict, magnitude.verdict); }
  };
  const auto judge = [&](const std::vector<double>& signed_samples, const attn::Tensor4& o) {
    return Judged{
        attn::compare_with_floor(signed_samples, samples_cr, level, attn::kDefaultAtStakeUlps),
        attn::compare_magnitude_with_floor(magnitude_samples(o), magnitude_cr, level, attn::kDefaultAtStakeUlps)};
  };
  const Judged j_base = judge(samples, captured_o);
  os << "\nVerdict on O (from the excess: what the kernel adds to its format's own rounding): " << model.name << ": "
     << attn::verdict_text(j_base.verdict()) << " (signed error: " << attn::verdict_text(j_base.signed_error.verdict)
     << ", " << j_base.signed_error.reason;
  // Each comparison has its own words before its reason: the run's verdict may be the other
  // one's, and a reason that bounds the bias below the stake must not read as backing "adds
  // bias". The magnitude comparison always has its words: equal words are still another test.
  os << "; magnitude error: " << attn::verdict_text(j_base.magnitude.verdict) << ", " << j_base.magnitude.reason;
  os << "; each comparison at " << shortest_decimal(level) << ", as bias-test's " << comparisons
     << " comparisons on this file)";
  if (fixed) {
    os << "; with the dynamic max (a tied max no longer gives P-bar = 1; emulated): "
       << attn::verdict_text(judge(samples_fix, fix->o).verdict());
  } else {
    os << "; this kernel already runs the dynamic max";
  }
  os << ".\n";
  if (samples.size() < attn::kMinVerdictSamples)
    os << "(This trace holds " << samples.size() << " independent sample(s), fewer than a verdict needs: "
       << "`flashbits bias-test --model " << model.name << " --scenario sink` draws as many trials as asked, and "
       << "`flashbits bias-test --traces DIR` tests a folder of captures, delta too.)\n";
  if (!model.recipe->hardware_validated())
    os << "(Emulated: parts of " << model.name << " are not validated on hardware.)\n";
  else if (is_hardware_capture(trace))
    os << "(" << model.name << " with these SFU models is validated on hardware: the replay above is of a "
       << "capture from " << md.source << ".)\n";
  return match == static_cast<long long>(captured.bits.size()) ? kExitOk : kExitCheckFailed;
}

}  // namespace

int run_demo_report(std::ostream& os, const std::string& path) {
  // A run of several seconds shows a progress bar on a terminal's stderr; the report is held
  // until the bar is cleared, so that the two never share a line. A failing run prints what
  // it had before the error, as it did when printing as it went.
  std::ostringstream report;
  std::optional<ProgressBar> progress;
  int exit_code = kExitOk;
  try {
    exit_code = write_report(report, path, progress);
  } catch (...) {
    if (progress) progress->finish();
    os << report.str() << std::flush;
    throw;
  }
  if (progress) progress->finish();
  os << report.str();
  return exit_code;
}

}  // namespace fb::cli
