// tools/demo_report.cpp: the demo report (contract in demo_report.hpp).
#include "tools/demo_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <ostream>
#include <vector>

#include "attention/attention.hpp"
#include "emu/ops.hpp"
#include "attention/kernel_models.hpp"
#include "tools/cli_common.hpp"
#include "api/event_json.hpp"
#include "api/models.hpp"
#include "studies/measure.hpp"
#include "attention/trace_inputs.hpp"
#include "studies/verdict.hpp"

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
std::vector<double> row_means(const attn::Tensor4& got, const attn::Tensor4& want, const std::vector<double>& units) {
  std::vector<double> means;
  for (std::size_t r = 0; r * got.cols < got.data.size(); ++r) {
    double s = 0;
    for (int c = 0; c < got.cols; ++c) {
      const std::size_t i = r * got.cols + c;
      s += (got.data[i] - want.data[i]) / units[i];
    }
    means.push_back(s / got.cols);
  }
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

}  // namespace

int run_demo_report(std::ostream& os, const std::string& path) {
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
  os << "flashbits demo: rounding bias of bf16/fp16 attention at tied row maxima (sink rows), on " << path << "\n";
  os << (is_hardware_capture(trace) ? "hardware capture (source " + md.source + ")"
                                    : "EMULATED trace (source " + md.source + "), not a hardware capture")
     << "; model " << model.name << "; SFU " << attn::sfu_report(*model.recipe)
     << (attn::sfu_hardware_measured(*model.recipe) ? "" : " [unmeasured on hardware]") << "\n";
  if (!sfu_note.empty()) os << sfu_note << "\n";
  os << "\n";

  // 1. Replay.
  const attn::AttentionOutputs base = attn::run_attention(model, in, {});
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

  // 2. The mechanism on the element with the most negative error.
  const attn::AttentionOutputs exact = attn::exact_attention(in);
  std::size_t worst = 0;
  double worst_err = 0;
  // The sink scenario makes V mostly negative in some features: show the most negative
  // error among negative outputs there (a rounding away from zero), else anywhere.
  for (int pass = 0; pass < 2 && worst_err == 0; ++pass)
    for (std::size_t i = 0; i < base.o.data.size(); ++i) {
      const double e = (base.o.data[i] - exact.o.data[i]) / attn::ulp_at(out_f, exact.o.data[i]);
      if ((pass == 1 || exact.o.data[i] < 0) && e < worst_err) worst_err = e, worst = i;
    }
  const int d = base.o.cols;
  const int row = static_cast<int>((worst / d) % base.o.rows);
  int feature = static_cast<int>(worst % d);
  // The tracer keeps every rounding event for one feature of the row. Show the feature
  // with the most negative error whose P.V accumulation has a significand overflow that
  // RNE rounded away from zero (the mechanism itself); fall back to the worst element.
  std::vector<int> features_by_error(static_cast<std::size_t>(d));
  for (int c = 0; c < d; ++c) features_by_error[static_cast<std::size_t>(c)] = c;
  const std::size_t row_begin = worst - worst % static_cast<std::size_t>(d);
  auto err_of = [&](int c) {
    const std::size_t i = row_begin + static_cast<std::size_t>(c);
    return (base.o.data[i] - exact.o.data[i]) / attn::ulp_at(out_f, exact.o.data[i]);
  };
  std::stable_sort(features_by_error.begin(), features_by_error.end(),
                   [&](int a, int b) { return err_of(a) < err_of(b); });
  attn::Tracer tracer;
  tracer.rows.push_back({0, 0, row});
  attn::RunOptions opt;
  opt.tracer = &tracer;
  // At most 8 candidates: each is one traced run of the whole trace.
  if (features_by_error.size() > 8) features_by_error.resize(8);
  for (int candidate : features_by_error) {
    tracer.plot_feature = candidate;
    attn::run_attention(model, in, opt);
    const attn::RowTrace& t = tracer.traces.front();
    bool shows_mechanism = false;
    for (const auto& ev : t.pv_buffer_events)
      shows_mechanism |= ev.significand_overflow && ev.direction == RoundDirection::up;
    if (shows_mechanism) {
      feature = candidate;
      break;
    }
  }
  if (tracer.plot_feature != feature) {
    tracer.plot_feature = feature;
    attn::run_attention(model, in, opt);
  }
  worst_err = err_of(feature);
  os << "2. The mechanism, row " << row << " feature " << feature << " (O error " << fmt("%+.3g", worst_err)
     << " ulp):\n";
  if (!tracer.traces.empty()) {
    const attn::RowTrace& t = tracer.traces.front();
    int p1 = 0, ovf = 0, up = 0, down = 0;
    for (const auto& tile : t.tiles) {
      p1 += tile.p_equal_one;
      ovf += tile.significand_overflows;
      up += tile.rounded_up;
      down += tile.rounded_down;
    }
    os << "    " << p1 << " keys have P-bar == 1 exactly (tied row max); the P.V accumulation of this row saw " << ovf
       << " significand overflows, " << up << " roundings up and " << down << " down (in magnitude).\n";
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
    pick([](const RoundingEvent& ev) { return ev.significand_overflow && ev.direction == RoundDirection::up; });
    pick([](const RoundingEvent& ev) { return ev.direction == RoundDirection::up; });
    pick([](const RoundingEvent& ev) { return ev.direction != RoundDirection::exact; });
    if (shown) describe_event(os, "one rounding of this feature's P.V accumulation", *shown, kept);
    if (!t.cumulative_error_by_key.empty())
      os << "    cumulative rounding error of O-bar after all keys: " << fmt("%+.4g", t.cumulative_error_by_key.back())
         << " (value units; `flashbits replay " << path << " --row " << row << " --feature " << feature
         << " --plot FILE.svg` draws it)\n";
  }
  os << "\n";

  // 3. The kernel against the best its output format allows, and the fix beside it: per row
  // the mean error of O against exact, the correctly rounded reference's (exact O rounded
  // once into the output format) and the kernel's excess over it (bias-test's verdict).
  const attn::ModelHandle fixed = api::resolve_model({md.model + "+dynmax", in.dtype, "auto", ""}, {}, &trace);
  const attn::AttentionOutputs fix = attn::run_attention(fixed, in, {});
  // With the fix, a model whose O is NaN or infinite on these finite inputs gets no verdict.
  const std::vector<std::size_t> bad_fix = attn::non_finite_rows(fix.o);
  if (!bad_fix.empty()) {
    os << "3. No statistics: " << fixed.name << "'s O is non-finite in " << bad_fix.size() << " row(s) "
       << attn::describe_rows(bad_fix, fix.o.heads, fix.o.rows)
       << " (finite inputs).\n\nVerdict: none (the output is not finite everywhere).\n";
    return match == static_cast<long long>(captured.bits.size()) ? kExitOk : kExitCheckFailed;
  }
  const attn::ErrorUnits units = attn::error_units(out_f, in, exact);
  const std::vector<double> err = row_means(base.o, exact.o, units.o), err_fix = row_means(fix.o, exact.o, units.o);
  // The floor, as bias-test's: the `correctly-rounded` reference, rounded to nearest even where
  // the kernel keeps O.
  const attn::ModelHandle reference = attn::correctly_rounded_reference(*model.recipe);
  const attn::Tensor4 o_cr = attn::round_exact_outputs(*reference.recipe, in, exact, {}).o;
  const std::vector<double> err_cr = row_means(o_cr, exact.o, units.o);
  std::vector<double> excess(err.size()), excess_fix(err.size());
  for (std::size_t r = 0; r < err.size(); ++r) excess[r] = err[r] - err_cr[r], excess_fix[r] = err_fix[r] - err_cr[r];
  auto line = [&](const std::string& what, const std::vector<double>& v) {
    const auto st = attn::summarize(v);
    os << "    " << what << ": " << fmt("%+.4g", st.mean) << "  99.9% CI [" << fmt("%+.3g", st.ci_low) << ", "
       << fmt("%+.3g", st.ci_high) << "]  p=" << attn::p_value_text(st.p_t) << "\n";
  };
  os << "3. Mean signed error of O per row (ulps of " << out_f.name
     << " at max(|O|, sum_j P_ij |V_jc|), as bias-test), " << err.size() << " rows:\n";
  line(model.name + " against exact", err);
  line("correctly rounded reference (exact, rounded once)", err_cr);
  line(model.name + " excess over the reference", excess);
  line(fixed.name + " excess over the reference", excess_fix);
  // bias-test's verdict (studies/verdict.hpp) on the rows; the rows of one head share its
  // keys, so they are not independent samples and the interval is optimistic: said below.
  const attn::FloorComparison c_base = attn::compare_with_floor(err, err_cr, 1e-3, attn::kDefaultAtStakeUlps);
  const attn::FloorComparison c_fix = attn::compare_with_floor(err_fix, err_cr, 1e-3, attn::kDefaultAtStakeUlps);
  os << "\nVerdict (from the excess: what the kernel adds to its format's own rounding): " << model.name << ": "
     << attn::verdict_text(c_base.verdict)
     << " on this trace; with the dynamic max (every P-bar < 1): " << attn::verdict_text(c_fix.verdict) << ".\n"
     << "(Indicative: these rows share their heads' keys and values, so they are not independent samples and "
        "the intervals above are optimistic; `flashbits bias-test` over many trials or heads gives the verdict.)\n";
  if (!model.recipe->hardware_validated())
    os << "(Emulated: parts of " << model.name << " are not validated on hardware.)\n";
  else if (is_hardware_capture(trace))
    os << "(" << model.name << " with these SFU models is validated on hardware: the replay above is of a "
       << "capture from " << md.source << ".)\n";
  return match == static_cast<long long>(captured.bits.size()) ? kExitOk : kExitCheckFailed;
}

}  // namespace fb::cli
