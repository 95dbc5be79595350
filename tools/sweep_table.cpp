// tools/sweep_table.cpp: sufficient statistics of sweep rows, their derived columns, and
// writing them (table, CSV, JSON) for sweep and merge (contract in sweep_table.hpp; the
// reader is sweep_file.cpp).
#include "formats/decimal_text.hpp"
#include "tools/sweep_table.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "tools/cli_common.hpp"
#include "studies/bias_run.hpp"
#include "studies/verdict.hpp"
#include "tools/sweep_columns.hpp"

namespace fb::cli {

using namespace sweep_columns;

bool SweepRun::read_shard_text(std::string_view text) {
  const auto pair = read_positive_pair(text, "/");
  if (!pair || pair->first > pair->second) return false;
  std::tie(shard_k, shard_n) = *pair;
  return true;
}

void SweepRow::add_trial(const attn::TrialErrors& t) {
  ++trials;
  if (!t.non_finite_rows.empty()) {
    ++non_finite_trials;
    return;
  }
  // The kernel's own errors (against the exact attention of what it computed with: for fp8
  // models the quantised inputs; for every other model exact attention itself).
  const double om = attn::mean_of(t.o_kernel_ulps);
  o.add(om);
  const double dm = attn::mean_of(t.delta_kernel_ulps);
  d.add(dm);
  const double mo = attn::outward_mean(t.o_kernel_ulps, t.o_target_sign);
  const double md = attn::outward_mean(t.delta_kernel_ulps, t.delta_target_sign);
  mag_o.add(mo);
  mag_d.add(md);
  for (double e : t.o_kernel_ulps) {
    sq_sum += e * e;
    max_abs = std::max(max_abs, std::fabs(e));
  }
  elements += static_cast<long long>(t.o_ulps.size());
  if (!t.o_cr_ulps.empty()) {
    ++ref_trials;
    const double co = attn::mean_of(t.o_cr_ulps), cd = attn::mean_of(t.delta_cr_ulps);
    cr_o.add(co);
    cr_d.add(cd);
    ex_o.add(om - co);
    ex_d.add(dm - cd);
    const double cmo = attn::outward_mean(t.o_cr_ulps, t.o_target_sign);
    const double cmd = attn::outward_mean(t.delta_cr_ulps, t.delta_target_sign);
    cr_mag_o.add(cmo);
    cr_mag_d.add(cmd);
    ex_mag_o.add(mo - cmo);
    ex_mag_d.add(md - cmd);
  }
  sig_overflows += t.significand_overflows;
  ties += t.ties;
  rounded_up += t.rounded_up;
  rounded_down += t.rounded_down;
}

void SweepRow::absorb(const SweepRow& other) {
  trials += other.trials;
  o.merge(other.o);
  d.merge(other.d);
  elements += other.elements;
  sq_sum += other.sq_sum;
  max_abs = std::max(max_abs, other.max_abs);
  sig_overflows += other.sig_overflows;
  ties += other.ties;
  rounded_up += other.rounded_up;
  rounded_down += other.rounded_down;
  ref_trials += other.ref_trials;
  non_finite_trials += other.non_finite_trials;
  cr_o.merge(other.cr_o);
  cr_d.merge(other.cr_d);
  ex_o.merge(other.ex_o);
  ex_d.merge(other.ex_d);
  mag_o.merge(other.mag_o);
  mag_d.merge(other.mag_d);
  cr_mag_o.merge(other.cr_mag_o);
  cr_mag_d.merge(other.cr_mag_d);
  ex_mag_o.merge(other.ex_mag_o);
  ex_mag_d.merge(other.ex_mag_d);
}

bool SweepRow::paired() const { return model.find("-vs-") != std::string::npos; }

std::string SweepRow::configuration() const {
  return format + "/" + round + "/" + model + "/" + scenario + "/n" + std::to_string(seqlen) + "/d" +
         std::to_string(headdim);
}

namespace {

struct Derived {
  attn::BiasStatistics o, d;        // the kernel's error
  attn::BiasStatistics cr_o, cr_d;  // the floor's: the correctly rounded reference, or B for A-vs-B rows
  bool has_reference = false;       // false only for rows of older files without a floor
  double rms = 0;
  std::string verdict, verdict_from;
  // Each output's verdict, as bias-test's against_floor; its .excess (error minus the
  // floor's) is the excess columns' series.
  attn::FloorComparison o_vs_floor, d_vs_floor;
  attn::FloorComparison o_mag_vs_floor, d_mag_vs_floor;  // and on its magnitude errors
  attn::Verdict outcome = attn::Verdict::inconclusive;
  bool no_verdict = false;  // some trial's output was not finite (SweepRow::non_finite_trials)
  // Some trial was finite: the sums hold a sample. Without one there is no mean, interval or
  // p-value to print (a 0 would read as "no error"): the table shows '-', the CSV an empty
  // field and the JSON null.
  bool sampled = false;
  bool sampled_reference = false;  // the floor's too (has_reference with some finite trial)
  bool sampled_elements = false;   // rms and max|err| have elements behind them
};
attn::FloorMoments floor_moments(long long n, const attn::ErrorMoments& kernel, const attn::ErrorMoments& floor,
                                 const attn::ErrorMoments& excess) {
  attn::FloorMoments m;
  m.n = static_cast<std::size_t>(n);
  m.sum_k = kernel.sum;
  m.sumsq_k = kernel.sumsq;
  m.sum_f = floor.sum;
  m.sumsq_f = floor.sumsq;
  m.sum_x = excess.sum;
  m.sumsq_x = excess.sumsq;
  m.x_positives = static_cast<std::size_t>(excess.pos);
  m.x_negatives = static_cast<std::size_t>(excess.neg);
  return m;
}
// The levels come from the run: its --alpha and --at-stake (a merge may override both).
Derived derive(const SweepRow& r, const SweepRun& run) {
  const double alpha = run.alpha;
  Derived x;
  const long long finite_trials = r.trials - r.non_finite_trials;  // the samples the sums hold
  // Four comparisons (O and delta, signed and magnitude), each at alpha / 4 as bias-test's
  // (every sweep trial runs the backward, forward-only models' delta included); every
  // interval and p of the row at that level, as bias-test's report.
  const double level = attn::per_comparison_alpha(alpha, kSweepComparisons);
  x.o = r.o.statistics(finite_trials, level);
  x.d = r.d.statistics(finite_trials, level);
  x.has_reference = r.ref_trials > 0;
  x.sampled = finite_trials > 0;
  // A row of no finite trial has no reference sums either, yet the floor columns exist for it.
  x.sampled_reference = x.has_reference;
  x.sampled_elements = r.elements > 0;
  x.cr_o = r.cr_o.statistics(r.ref_trials, level);
  x.cr_d = r.cr_d.statistics(r.ref_trials, level);
  x.rms = r.elements ? std::sqrt(r.sq_sum / static_cast<double>(r.elements)) : 0.0;
  // The verdict (studies/verdict.hpp, as bias-test): the kernel's own share against its
  // floor, its direction, and whether the trials could have seen the bias at stake.
  // A-vs-B rows are judged relative to B, which their reasons name (B is no floor).
  const std::string baseline = r.paired() ? r.model.substr(r.model.find("-vs-") + 4) : "";
  const auto moments = [&](const attn::ErrorMoments& kernel, const attn::ErrorMoments& floor,
                           const attn::ErrorMoments& excess) {
    return floor_moments(r.ref_trials, kernel, floor, excess);
  };
  x.o_vs_floor = attn::compare_with_floor(moments(r.o, r.cr_o, r.ex_o), level, run.at_stake, baseline);
  x.d_vs_floor = attn::compare_with_floor(moments(r.d, r.cr_d, r.ex_d), level, run.at_stake, baseline);
  x.o_mag_vs_floor =
      attn::compare_magnitude_with_floor(moments(r.mag_o, r.cr_mag_o, r.ex_mag_o), level, run.at_stake, baseline);
  x.d_mag_vs_floor =
      attn::compare_magnitude_with_floor(moments(r.mag_d, r.cr_mag_d, r.ex_mag_d), level, run.at_stake, baseline);
  x.outcome = attn::combine(attn::combine(x.o_vs_floor.verdict, x.d_vs_floor.verdict),
                            attn::combine(x.o_mag_vs_floor.verdict, x.d_mag_vs_floor.verdict));
  x.verdict = x.outcome == attn::Verdict::less_biased_than_floor ? "less biased" : attn::verdict_text(x.outcome);
  if (r.non_finite_trials > 0) {  // as bias-test: no verdict from the trials that were finite
    x.no_verdict = true;
    x.verdict = "no verdict (non-finite output)";  // bias-test's words
  }
  x.verdict_from = x.no_verdict ? "none" : r.paired() ? "paired" : "excess";  // as bias-test --json
  return x;
}

std::string exact_text(double v) {  // round-trips exactly
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// Four CSV columns, the sums exactly (they must survive a merge bit for bit).
std::string moments_csv(const attn::ErrorMoments& m) {
  return exact_text(m.sum) + "," + exact_text(m.sumsq) + "," + std::to_string(m.pos) + "," + std::to_string(m.neg);
}
void moments_json(nlohmann::ordered_json& out, const std::string& prefix, const attn::ErrorMoments& m) {
  out[prefix + "_sum"] = m.sum;
  out[prefix + "_sumsq"] = m.sumsq;
  out[prefix + "_pos"] = m.pos;
  out[prefix + "_neg"] = m.neg;
}

// Where a comparison's bare verdict words and the size of its excess disagree, so that the
// words alone would mislead: a bias detected only below the size at stake, or none detected
// beside an excess of that size (the error carried across zero, say). One rule for the
// verdict cell and the notes under the table.
enum class StakeGap { none, detected_below_stake, undetected_at_stake };
StakeGap stake_gap(const attn::FloorComparison& c, double at_stake) {
  const bool large = std::fabs(c.excess.mean) >= at_stake;
  if (c.verdict == attn::Verdict::adds_bias && !large) return StakeGap::detected_below_stake;
  if (c.verdict == attn::Verdict::no_detectable_bias && large) return StakeGap::undetected_at_stake;
  return StakeGap::none;
}

}  // namespace

void write_table(std::ostream& os, const std::vector<SweepRow>& rows, const SweepRun& run) {
  char line[640];
  std::snprintf(line, sizeof line, "%-44s %6s %9s %9s %9s %9s %9s %9s %9s %9s %9s %9s %8s %7s %-15s %s\n",
                "configuration", "trials", "O err", "O CR", "O excess", "dlt err", "dlt CR", "dlt exc.", "O mag ex",
                "dlt mag", "RMS", "max|err|", "sig.ovf", "ties", "PV up/down", "verdict");
  os << line;
  auto or_dash = [](bool has, double v) {
    char buf[32];
    if (!has) return std::string("-");
    std::snprintf(buf, sizeof buf, "%.4g", v);
    return std::string(buf);
  };
  // Derived once per row (its tests and power analyses), for the row and the notes under the table.
  std::vector<Derived> derived;
  derived.reserve(rows.size());
  for (const SweepRow& r : rows) {
    const Derived& x = derived.emplace_back(derive(r, run));
    // The verdict cell carries its size where the bare words would mislead (found by the
    // newcomer audit: fa2-sm80's -0.003 ulp read "adds bias" as fa-bf16acc's +0.2 did): a
    // bias detected only below --at-stake, or none detected beside an excess of that size.
    // The notes under the table give each comparison's reason.
    std::string verdict_cell = x.verdict;
    if (!x.no_verdict) {
      bool large_detected = false, small_detected = false, large_undetected = false;
      for (const attn::FloorComparison* c : {&x.o_vs_floor, &x.d_vs_floor, &x.o_mag_vs_floor, &x.d_mag_vs_floor}) {
        const StakeGap gap = stake_gap(*c, run.at_stake);
        small_detected |= gap == StakeGap::detected_below_stake;
        large_detected |= c->verdict == attn::Verdict::adds_bias && gap == StakeGap::none;
        large_undetected |= gap == StakeGap::undetected_at_stake;
      }
      if (x.outcome == attn::Verdict::adds_bias && small_detected && !large_detected)
        verdict_cell += " (below at stake)";
      else if (x.outcome == attn::Verdict::no_detectable_bias && large_undetected)
        verdict_cell += " (excess >= at stake)";
    }
    const std::string ud = std::to_string(r.rounded_up) + "/" + std::to_string(r.rounded_down);
    std::snprintf(line, sizeof line, "%-44s %6lld %9s %9s %9s %9s %9s %9s %9s %9s %9s %9s %8lld %7lld %-15s %s\n",
                  r.configuration().c_str(), r.trials, or_dash(x.sampled, x.o.mean).c_str(),
                  or_dash(x.sampled_reference, x.cr_o.mean).c_str(),
                  or_dash(x.sampled_reference, x.o_vs_floor.excess.mean).c_str(), or_dash(x.sampled, x.d.mean).c_str(),
                  or_dash(x.sampled_reference, x.cr_d.mean).c_str(),
                  or_dash(x.sampled_reference, x.d_vs_floor.excess.mean).c_str(),
                  or_dash(x.sampled_reference, x.o_mag_vs_floor.excess.mean).c_str(),
                  or_dash(x.sampled_reference, x.d_mag_vs_floor.excess.mean).c_str(),
                  or_dash(x.sampled_elements, x.rms).c_str(), or_dash(x.sampled_elements, r.max_abs).c_str(),
                  r.sig_overflows, r.ties, ud.c_str(), verdict_cell.c_str());
    os << line;
  }
  os << "Means of the per-trial mean signed error, in ulps of the output format at max(|O|, sum_j P_ij |V_jc|)\n"
        "(O) and at max(|delta|, sum|dO*O|) (delta): \"err\" against exact_attention; \"CR\" the correctly rounded\n"
        "reference's on the same inputs (exact, rounded once to nearest even where the row's kernel keeps its\n"
        "outputs, whatever the row's --round: O into the format it stores O in; delta from that O, rounded once\n"
        "to fp32, or the exact delta rounded once to fp32 where the kernel's delta reads no rounded O:\n"
        "+o-fp32, +delta-dpp, the standard-* recipes): the output format's own share; \"excess\"\n"
        "err minus CR, trial by trial: the kernel's own share, a --round mode's bias included; \"O mag ex\" and\n"
        "\"dlt mag\" the excess of the magnitude errors (sign of the exact value x error: < 0 toward zero).\n"
        "RMS and max over every element of O (against exact). Every interval and p at alpha / "
     << kSweepComparisons
     << " (below).\n"
        "PV event counts are from the first "
     << attn::kTracedRows
     << " rows of every trial (tiled models only).\nVerdict (as bias-test, docs/CLI.md): the per-trial excess of O "
        "and of delta against the floor,\nof the signed errors and of the magnitude errors (sign of the exact value x "
        "error, which sees a rounding\ntoward zero on outputs of either sign),\nalpha = "
     << shortest_decimal(run.alpha) << " for the row (each of the " << kSweepComparisons << " comparisons at "
     << shortest_decimal(attn::per_comparison_alpha(run.alpha, kSweepComparisons)) << "), at stake "
     << shortest_decimal(run.at_stake)
     << " ulp: \"adds bias\" when the excess is significant and the error lies\n"
        "further from zero than the floor's; \"less biased\" when it lies significantly closer, by at least the\n"
        "size at stake; \"inconclusive\"\n"
        "when fewer than "
     << attn::kMinVerdictSamples
     << " trials, the test could not detect the bias at stake, or an excess that is not significant has an\n"
        "interval reaching the size at stake. \"(below at stake)\": each comparison that adds bias does so by\n"
        "less than the size at stake; \"(excess >= at stake)\": none adds bias, yet an excess is that large\n"
        "(the lines under this legend give each such comparison's reason). fp8 rows: errors against the exact "
        "attention of the quantised\n"
        "inputs (the quantisation apart).\n"
        "Alpha holds for each row alone, with no correction across rows: of m rows whose kernels add no bias,\n"
        "about m x alpha may read \"adds bias\" by chance; rerun a flagged row with more --trials, or give\n"
        "--alpha A/m for a level over the whole grid.\n"
     << "Rows named A-vs-B (sweep --against B) compare A with B on the same inputs and seed: \"CR\" is B's\n"
        "error, \"excess\" the paired difference A minus B, and the verdict is relative to B, which is no\n"
        "floor (\"no detectable added bias\" there: A adds none beyond B's own); their PV counts are A's.\n";
  for (const SweepRow& r : rows)
    if (r.non_finite_trials > 0)
      os << r.configuration() << ": " << r.non_finite_trials << " of " << r.trials
         << " trial(s) gave a NaN or infinite O or delta on finite inputs: their errors are left out of the row's "
            "figures, and it has no verdict (as bias-test)\n";
  // The reasons the verdict column cannot show (bias-test prints them; the JSON's
  // against_floor holds every one): a bias detected below the size at stake, where the bare
  // "adds bias" would read like a larger one's, and "no detectable added bias" beside an excess
  // of the size at stake (the error carried across zero, say).
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const SweepRow& r = rows[i];
    const Derived& x = derived[i];
    if (x.no_verdict) continue;
    for (const auto& [what, c] : {std::pair<const char*, const attn::FloorComparison&>{"O", x.o_vs_floor},
                                  {"delta", x.d_vs_floor},
                                  {"O magnitude", x.o_mag_vs_floor},
                                  {"delta magnitude", x.d_mag_vs_floor}}) {
      if (stake_gap(c, run.at_stake) != StakeGap::none)
        os << r.configuration() << ": " << what << ": " << attn::verdict_text(c.verdict) << ": " << c.reason << "\n";
    }
  }
  // Where the exit status comes from, when rows decided nothing (the status alone would not say).
  const auto undecided = std::count_if(derived.begin(), derived.end(), [](const Derived& x) {
    return !x.no_verdict && x.outcome == attn::Verdict::inconclusive;
  });
  if (undecided > 0)
    os << undecided << " of " << rows.size()
       << " row(s) inconclusive: their trials could not have detected the bias at stake (more --trials, or a larger "
          "--at-stake); they do not set the exit status (0 unless a row adds bias: 1)\n";
}

namespace {
nlohmann::ordered_json run_json(const SweepRun& run) {
  nlohmann::ordered_json j;
  j["program"] = "flashbits sweep";
  j["seed"] = run.seed;
  j["shard"] = run.shard_text();
  j["configurations"] = run.configurations;
  j["trials"] = run.trials;
  j["formats"] = run.formats;
  j["round"] = run.rounds;
  j["models"] = run.models;
  j["scenarios"] = run.scenarios;
  j["against"] = run.against;
  j["seqlen"] = run.seqlen;
  j["headdim"] = run.headdim;
  j["sr_bits"] = run.sr_bits;
  j["alpha"] = run.alpha;
  j["at_stake_ulps"] = run.at_stake;
  return j;
}
}  // namespace

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

void write_csv(std::ostream& os, const std::vector<SweepRow>& rows, const SweepRun& run) {
  os << kCsvHeader << "\n";
  for (const SweepRow& r : rows) {
    const Derived x = derive(r, run);
    os << r.index << "," << csv_field(r.format) << "," << csv_field(r.round) << "," << csv_field(r.model) << ","
       << csv_field(r.scenario) << "," << r.seqlen << "," << r.headdim << "," << r.trials;
    for (const NamedMoments& m : kTrialMoments) os << "," << moments_csv(r.*m.member);
    os << "," << r.elements << "," << exact_text(r.sq_sum) << "," << exact_text(r.max_abs) << "," << r.sig_overflows
       << "," << r.ties << "," << r.rounded_up << "," << r.rounded_down << "," << r.ref_trials;
    for (const NamedMoments& m : kReferenceMoments) os << "," << moments_csv(r.*m.member);
    os << "," << r.non_finite_trials;
    const auto when = [](bool sampled, double v) { return sampled ? short_text(v) : std::string(); };
    // A t test of one sample means nothing (BiasStatistics::has_spread): empty, as bias-test's null.
    const auto t_test = [&](bool sampled, const attn::BiasStatistics& b) {
      return when(sampled && b.has_spread(), b.p_t);
    };
    os << "," << when(x.sampled, x.o.mean) << "," << t_test(x.sampled, x.o) << ","
       << when(x.sampled_reference, x.cr_o.mean) << "," << when(x.sampled_reference, x.o_vs_floor.excess.mean) << ","
       << t_test(x.sampled_reference, x.o_vs_floor.excess) << "," << when(x.sampled, x.d.mean) << ","
       << t_test(x.sampled, x.d) << "," << when(x.sampled_reference, x.cr_d.mean) << ","
       << when(x.sampled_reference, x.d_vs_floor.excess.mean) << "," << t_test(x.sampled_reference, x.d_vs_floor.excess)
       << "," << when(x.sampled_reference, x.o_mag_vs_floor.excess.mean) << ","
       << t_test(x.sampled_reference, x.o_mag_vs_floor.excess) << ","
       << when(x.sampled_reference, x.d_mag_vs_floor.excess.mean) << ","
       << t_test(x.sampled_reference, x.d_mag_vs_floor.excess) << "," << when(x.sampled_elements, x.rms) << ","
       << when(x.sampled_elements, r.max_abs) << "," << csv_field(x.verdict_from) << "," << csv_field(x.verdict)
       << "\n";
  }
  // Last, so that a truncated file has no run record and merge refuses it.
  os << kRunPrefix << json_text(run_json(run)) << "\n";
}

void write_json(std::ostream& os, const std::vector<SweepRow>& rows, const SweepRun& run,
                const std::vector<std::string>& notes) {
  nlohmann::ordered_json out;
  out["alpha"] = run.alpha;
  out["comparisons"] = kSweepComparisons;
  out["alpha_per_comparison"] = attn::per_comparison_alpha(run.alpha, kSweepComparisons);
  // A level per row: a grid of m rows may hold about m x alpha chance "adds bias" rows.
  out["alpha_applies_to"] = "each row alone (no correction across rows)";
  out["at_stake_ulps"] = run.at_stake;
  out["run"] = run_json(run);
  out["notes"] = notes;
  out["rows"] = nlohmann::ordered_json::array();
  for (const SweepRow& r : rows) {
    const Derived x = derive(r, run);
    nlohmann::ordered_json j;
    j["index"] = r.index;
    j["format"] = r.format;
    j["round"] = r.round;
    j["model"] = r.model;
    j["scenario"] = r.scenario;
    j["seqlen"] = r.seqlen;
    j["headdim"] = r.headdim;
    j["trials"] = r.trials;
    nlohmann::ordered_json sufficient;
    for (const NamedMoments& m : kTrialMoments) moments_json(sufficient, m.prefix, r.*m.member);
    sufficient["elements"] = r.elements;
    sufficient["sq_sum"] = r.sq_sum;
    sufficient["max_abs"] = r.max_abs;
    sufficient["sig_overflows"] = r.sig_overflows;
    sufficient["ties"] = r.ties;
    sufficient["rounded_up"] = r.rounded_up;
    sufficient["rounded_down"] = r.rounded_down;
    sufficient["ref_trials"] = r.ref_trials;
    for (const NamedMoments& m : kReferenceMoments) moments_json(sufficient, m.prefix, r.*m.member);
    sufficient["non_finite"] = r.non_finite_trials;
    j["sufficient"] = sufficient;
    // null where there is no sample (Derived::sampled).
    const auto value = [](bool sampled, double v) { return sampled ? nlohmann::ordered_json(v) : nullptr; };
    // An interval needs two samples that differ, a t test two samples (BiasStatistics::
    // has_interval, has_spread): a [x, x] read as certainty; null, as bias-test writes it.
    const auto interval = [](bool sampled, const attn::BiasStatistics& b) {
      return sampled && b.has_interval() ? nlohmann::ordered_json{b.ci_low, b.ci_high}
                                         : nlohmann::ordered_json(nullptr);
    };
    const auto t_test = [](bool sampled, const attn::BiasStatistics& b) {
      return sampled && b.has_spread() ? nlohmann::ordered_json(b.p_t) : nlohmann::ordered_json(nullptr);
    };
    j["o_mean_ulps"] = value(x.sampled, x.o.mean);
    j["o_ci"] = interval(x.sampled, x.o);
    j["o_p_t"] = t_test(x.sampled, x.o);
    j["o_p_sign"] = value(x.sampled, x.o.p_sign);
    j["delta_mean_ulps"] = value(x.sampled, x.d.mean);
    j["delta_ci"] = interval(x.sampled, x.d);
    j["delta_p_t"] = t_test(x.sampled, x.d);
    j["delta_p_sign"] = value(x.sampled, x.d.p_sign);
    // Rows of older files without a floor have no floor columns; a row of no finite trial has
    // them, null.
    if (x.has_reference || !x.sampled) {
      auto stat = [&](const attn::BiasStatistics& b) {
        nlohmann::ordered_json o;
        o["mean_ulps"] = value(x.sampled_reference, b.mean);
        o["ci"] = interval(x.sampled_reference, b);
        o["p_t"] = t_test(x.sampled_reference, b);
        o["p_sign"] = value(x.sampled_reference, b.p_sign);
        return o;
      };
      j["correctly_rounded"] = {{"o", stat(x.cr_o)}, {"delta", stat(x.cr_d)}};
      j["excess"] = {{"o", stat(x.o_vs_floor.excess)}, {"delta", stat(x.d_vs_floor.excess)}};
    }
    j["rms_ulps"] = value(x.sampled_elements, x.rms);
    j["max_abs_ulps"] = value(x.sampled_elements, r.max_abs);
    // A row with a non-finite trial has no verdict, each output's included (as bias-test's).
    j["against_floor"] = {{"o", attn::floor_comparison_json(x.o_vs_floor, !x.no_verdict)},
                          {"delta", attn::floor_comparison_json(x.d_vs_floor, !x.no_verdict)}};
    j["magnitude_against_floor"] = {{"o", attn::floor_comparison_json(x.o_mag_vs_floor, !x.no_verdict)},
                                    {"delta", attn::floor_comparison_json(x.d_mag_vs_floor, !x.no_verdict)}};
    j["verdict_from"] = x.verdict_from;
    j["verdict"] = x.verdict;
    out["rows"].push_back(j);
  }
  os << json_text(out, 2) << "\n";
}

void check_csv_output(const std::string& csv_path, bool json) {
  if (csv_path == "-" && json)
    throw InputError("--csv - and --json: both would be written to standard output; give one");
  check_output_path("--csv", csv_path, true);
}

int emit_rows(std::vector<SweepRow> rows, const std::string& csv_path, bool json, const SweepRun& run,
              const std::vector<std::string>& notes) {
  std::sort(rows.begin(), rows.end(), [](const SweepRow& a, const SweepRow& b) { return a.index < b.index; });
  if (csv_path == "-") {
    write_csv(std::cout, rows, run);  // the CSV is the output, in place of the table
    for (const std::string& note : notes) std::cerr << note << "\n";
  } else {
    if (!csv_path.empty()) {
      std::ostringstream out;
      write_csv(out, rows, run);
      write_output_file(csv_path, out.str(), "the CSV");
    }
    // The notes (skipped cells, models not validated on hardware) are part of the report: the
    // contract has every report say what is unmeasured (they were on stderr only; found by the
    // contract audit).
    if (json) {
      write_json(std::cout, rows, run, notes);
    } else {
      write_table(std::cout, rows, run);
      for (const std::string& note : notes) std::cout << note << "\n";
    }
  }
  // A row whose kernel adds bias, or whose output was not finite, is a failed check (exit 1),
  // as in bias-test; else 0. Inconclusive rows do not change the status: the contract gives
  // sweep 0, 1 and 2 only (exit 4 is bias-test's), and the table's last line counts them.
  for (const SweepRow& r : rows) {
    const Derived x = derive(r, run);
    if (x.no_verdict || x.outcome == attn::Verdict::adds_bias) return kExitCheckFailed;
  }
  return kExitOk;
}

}  // namespace fb::cli
