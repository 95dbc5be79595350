// tools/sweep_table.cpp: trial measurement, sufficient statistics and rendering shared by
// sweep, merge and bias-test (contract in sweep_table.hpp).
#include "tools/sweep_table.hpp"

#include <algorithm>
#include <cinttypes>
#include <climits>
#include <cmath>
#include <stdexcept>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>

#include "attention/kernel_models.hpp"
#include "emu/ops.hpp"
#include "emu/rounding.hpp"
#include "tools/cli_common.hpp"

namespace fb::cli {

std::vector<double> delta_units(const Format& output_format, const attn::Tensor4& d_o, const attn::Tensor4& o_exact,
                                const attn::Tensor4& delta_exact) {
  const int d = d_o.cols;
  std::vector<double> units(delta_exact.data.size());
  for (std::size_t r = 0; r < units.size(); ++r) {
    double magnitude = std::fabs(delta_exact.data[r]);
    double sum_abs = 0;
    for (int c = 0; c < d; ++c) sum_abs += std::fabs(d_o.data[r * d + c] * o_exact.data[r * d + c]);
    units[r] = attn::ulp_at(output_format, std::max(magnitude, sum_abs));
  }
  return units;
}

attn::ModelHandle parse_model_for_inputs(const std::string& name, const Format& dtype) {
  if (dtype == formats::bf16 || dtype == formats::fp16) return attn::parse_kernel_model(name, dtype);
  // Models that name their dtype ignore the one given: parse with bf16, then check.
  std::string text = name;
  if (text == "standard" || text.rfind("standard+", 0) == 0) text = "standard-" + std::string(dtype.name) + text.substr(8);
  attn::ModelHandle h = attn::parse_kernel_model(text, formats::bf16);
  if (!(h.recipe->input == dtype))
    throw std::invalid_argument("kernel model " + name + " reads " + h.recipe->input.name + " inputs, not " +
                                dtype.name + " (a model that does not name its dtype takes bf16 or fp16)");
  return h;
}

ReferenceErrors reference_errors(const attn::ModelHandle& reference, const attn::AttentionInputs& in,
                                 const attn::AttentionOutputs& exact, std::uint64_t seed) {
  attn::RunOptions opt;
  opt.seed = seed;
  const attn::AttentionOutputs cr = attn::round_exact_outputs(*reference.recipe, in, exact, opt);
  const Format& output_format = reference.recipe->output;
  ReferenceErrors r;
  r.o_ulps.resize(cr.o.data.size());
  for (std::size_t i = 0; i < cr.o.data.size(); ++i)
    r.o_ulps[i] = (cr.o.data[i] - exact.o.data[i]) / attn::ulp_at(output_format, exact.o.data[i]);
  if (in.d_o && exact.delta && cr.delta) {
    const std::vector<double> unit = delta_units(output_format, *in.d_o, exact.o, *exact.delta);
    for (std::size_t row = 0; row < exact.delta->data.size(); ++row)
      r.delta_ulps.push_back((cr.delta->data[row] - exact.delta->data[row]) / unit[row]);
  }
  return r;
}

ReferenceErrors correctly_rounded_errors(const Format& output_format, const attn::AttentionInputs& in,
                                         const attn::AttentionOutputs& exact) {
  const attn::ModelHandle reference{
      "correctly-rounded", std::make_shared<const attn::KernelModel>(attn::correctly_rounded_recipe(in.dtype, output_format))};
  return reference_errors(reference, in, exact);
}

std::vector<std::size_t> non_finite_rows(const attn::Tensor4& t) {
  std::vector<std::size_t> rows;
  const std::size_t cols = static_cast<std::size_t>(std::max(1, t.cols));
  for (std::size_t i = 0; i < t.data.size(); ++i)
    if (!std::isfinite(t.data[i]) && (rows.empty() || rows.back() != i / cols)) rows.push_back(i / cols);
  return rows;
}

std::string describe_rows(const std::vector<std::size_t>& rows, int heads, int seqlen, std::size_t limit) {
  std::string text;
  const std::size_t n = static_cast<std::size_t>(std::max(1, seqlen)), h = static_cast<std::size_t>(std::max(1, heads));
  for (std::size_t i = 0; i < rows.size() && i < limit; ++i) {
    const std::size_t r = rows[i];
    text += (i ? ", [" : "[") + std::to_string(r / n / h) + "," + std::to_string(r / n % h) + "," +
            std::to_string(r % n) + "]";
  }
  if (rows.size() > limit) text += " and " + std::to_string(rows.size() - limit) + " more";
  return text;
}

void check_inputs_support_statistics(const attn::AttentionInputs& in, const std::string& source) {
  const attn::Tensor4& q = in.q;
  if (q.batch < 1 || q.heads < 1 || q.rows < 1 || q.cols < 1 || in.k.rows < 1)
    throw InputError(source + ": tensor q has shape [" + std::to_string(q.batch) + "," + std::to_string(q.heads) + "," +
                     std::to_string(q.rows) + "," + std::to_string(q.cols) +
                     "]: a batch, head count, sequence length or head dim of 0 has no rows to measure");
  const std::pair<const char*, const attn::Tensor4*> tensors[] = {
      {"q", &in.q}, {"k", &in.k}, {"v", &in.v}, {"do", in.d_o ? &*in.d_o : nullptr}};
  for (const auto& [name, t] : tensors) {
    if (!t) continue;
    const std::vector<std::size_t> rows = non_finite_rows(*t);
    if (!rows.empty())
      throw InputError(source + ": tensor " + name + ": NaN or infinity in " + std::to_string(rows.size()) +
                       " row(s) " + describe_rows(rows, t->heads, t->rows) +
                       "; errors on non-finite inputs support no verdict");
  }
}

TrialErrors measure_errors(const attn::ModelHandle& model, const attn::AttentionInputs& in, std::uint64_t seed,
                           bool trace_events) {
  attn::RunOptions opt;
  opt.seed = seed;
  attn::Tracer tracer;
  if (trace_events && model.recipe->structure == attn::Structure::online_softmax) {
    for (int r = 0; r < std::min(kTracedRows, in.q.rows); ++r) tracer.rows.push_back({0, 0, r});
    opt.tracer = &tracer;
  }
  const attn::AttentionOutputs got = attn::run_attention(model, in, opt);
  const attn::AttentionOutputs want = attn::exact_attention(in);
  TrialErrors t;
  const Format& out_format = model.recipe->output;
  t.o_ulps.resize(got.o.data.size());
  for (std::size_t i = 0; i < got.o.data.size(); ++i)
    t.o_ulps[i] = (got.o.data[i] - want.o.data[i]) / attn::ulp_at(out_format, want.o.data[i]);
  t.non_finite_rows = non_finite_rows(got.o);
  if (got.delta && want.delta && in.d_o) {
    const std::vector<double> unit = delta_units(model.recipe->output, *in.d_o, want.o, *want.delta);
    for (std::size_t i = 0; i < got.delta->data.size(); ++i)
      t.delta_ulps.push_back((got.delta->data[i] - want.delta->data[i]) / unit[i]);
    for (std::size_t r : non_finite_rows(*got.delta)) t.non_finite_rows.push_back(r);
    std::sort(t.non_finite_rows.begin(), t.non_finite_rows.end());
    t.non_finite_rows.erase(std::unique(t.non_finite_rows.begin(), t.non_finite_rows.end()), t.non_finite_rows.end());
  }
  // The reference in the model's own final-cast mode (+o-MODE), on the same inputs and seed.
  ReferenceErrors cr = reference_errors(attn::correctly_rounded_reference(*model.recipe), in, want, seed);
  t.o_cr_ulps = std::move(cr.o_ulps);
  if (!t.delta_ulps.empty()) t.delta_cr_ulps = std::move(cr.delta_ulps);
  t.row_max = want.row_max->data;
  for (const attn::RowTrace& row : tracer.traces)
    for (const attn::TileRecord& tile : row.tiles) {
      t.significand_overflows += tile.significand_overflows;
      t.ties += tile.ties;
      t.rounded_up += tile.rounded_up;
      t.rounded_down += tile.rounded_down;
    }
  return t;
}

TrialErrors measure_paired(const attn::ModelHandle& model, const attn::ModelHandle& against,
                           const attn::AttentionInputs& in, std::uint64_t seed) {
  if (std::string(model.recipe->input.name) != against.recipe->input.name ||
      std::string(model.recipe->output.name) != against.recipe->output.name)
    throw std::invalid_argument("--against " + against.name + ": takes " + against.recipe->input.name + " -> " +
                                against.recipe->output.name + ", but " + model.name + " takes " +
                                model.recipe->input.name + " -> " + model.recipe->output.name);
  attn::RunOptions opt;
  opt.seed = seed;
  const attn::AttentionOutputs a = attn::run_attention(model, in, opt);
  const attn::AttentionOutputs b = attn::run_attention(against, in, opt);
  const attn::AttentionOutputs want = attn::exact_attention(in);
  // Σ_j P_ij·|V_jc| is exactly the attention output of the same scores over |V|.
  attn::AttentionInputs abs_v = in;
  for (double& x : abs_v.v.data) x = std::fabs(x);
  abs_v.d_o.reset();
  const attn::AttentionOutputs scale = attn::exact_attention(abs_v);
  const Format& out_format = model.recipe->output;
  TrialErrors t;
  t.o_ulps.resize(a.o.data.size());
  for (std::size_t i = 0; i < a.o.data.size(); ++i)
    t.o_ulps[i] = (a.o.data[i] - b.o.data[i]) /
                  attn::ulp_at(out_format, std::max(std::fabs(want.o.data[i]), scale.o.data[i]));
  if (a.delta && b.delta && want.delta && in.d_o) {
    const std::vector<double> unit = delta_units(out_format, *in.d_o, want.o, *want.delta);
    for (std::size_t i = 0; i < a.delta->data.size(); ++i)
      t.delta_ulps.push_back((a.delta->data[i] - b.delta->data[i]) / unit[i]);
  }
  for (const attn::AttentionOutputs* x : {&a, &b}) {
    for (std::size_t r : non_finite_rows(x->o)) t.non_finite_rows.push_back(r);
    if (x->delta)
      for (std::size_t r : non_finite_rows(*x->delta)) t.non_finite_rows.push_back(r);
  }
  std::sort(t.non_finite_rows.begin(), t.non_finite_rows.end());
  t.non_finite_rows.erase(std::unique(t.non_finite_rows.begin(), t.non_finite_rows.end()), t.non_finite_rows.end());
  t.row_max = want.row_max->data;
  return t;
}

attn::Tensor4 tensor_from_trace(const Trace& trace, std::string_view name) {
  const SafeTensor& t = trace.tensor(name);
  std::vector<std::uint64_t> shape = t.shape;
  if (shape.size() == 3) shape.push_back(1);
  if (shape.size() != 4)
    throw TraceError(trace.source_name() + ": tensor " + std::string(name) + ": expected 4 dimensions, got " +
                     std::to_string(t.shape.size()));
  attn::Tensor4 out(static_cast<int>(shape[0]), static_cast<int>(shape[1]), static_cast<int>(shape[2]),
                    static_cast<int>(shape[3]));
  out.data = trace.values(name);
  return out;
}

attn::AttentionInputs inputs_from_trace(const Trace& trace) {
  attn::AttentionInputs in;
  in.q = tensor_from_trace(trace, "q");
  in.k = tensor_from_trace(trace, "k");
  in.v = tensor_from_trace(trace, "v");
  // The models take q, k, v of one shape: say which file does not, before they refuse it
  // without naming the file.
  const auto shape_text = [](const attn::Tensor4& t) {
    return "[" + std::to_string(t.batch) + "," + std::to_string(t.heads) + "," + std::to_string(t.rows) + "," +
           std::to_string(t.cols) + "]";
  };
  const auto same_shape = [](const attn::Tensor4& a, const attn::Tensor4& b) {
    return a.batch == b.batch && a.heads == b.heads && a.rows == b.rows && a.cols == b.cols;
  };
  if (!same_shape(in.q, in.k) || !same_shape(in.q, in.v))
    throw TraceError(trace.source_name() + ": q " + shape_text(in.q) + ", k " + shape_text(in.k) + " and v " +
                     shape_text(in.v) + " must have the same shape (batch, heads, rows, head dim)");
  if (trace.has("do")) in.d_o = tensor_from_trace(trace, "do");
  const TraceMetadata& m = trace.metadata();
  in.dtype = m.dtype ? *m.dtype : trace.bits("q").format;
  in.softmax_scale = m.softmax_scale.value_or(0.0);
  in.causal = m.causal.value_or(false);
  return in;
}

std::uint64_t trial_seed(std::uint64_t seed, const std::string& configuration, std::uint64_t trial) {
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a of the configuration text
  for (unsigned char c : configuration) h = (h ^ c) * 0x100000001b3ull;
  return mix64(mix64(seed ^ 0x6a09e667f3bcc909ull) + mix64(h) + trial * 0x9e3779b97f4a7c15ull);
}

namespace {
double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}
}  // namespace

void SweepRow::add_trial(const TrialErrors& t) {
  ++trials;
  const double om = mean_of(t.o_ulps);
  o_sum += om;
  o_sumsq += om * om;
  o_pos += om > 0;
  o_neg += om < 0;
  const double dm = mean_of(t.delta_ulps);
  d_sum += dm;
  d_sumsq += dm * dm;
  d_pos += dm > 0;
  d_neg += dm < 0;
  for (double e : t.o_ulps) {
    sq_sum += e * e;
    max_abs = std::max(max_abs, std::fabs(e));
  }
  elements += static_cast<long long>(t.o_ulps.size());
  if (!t.o_cr_ulps.empty()) {
    ++ref_trials;
    const double co = mean_of(t.o_cr_ulps), cd = mean_of(t.delta_cr_ulps);
    const double xo = om - co, xd = dm - cd;
    cr_o_sum += co;
    cr_o_sumsq += co * co;
    cr_o_pos += co > 0;
    cr_o_neg += co < 0;
    cr_d_sum += cd;
    cr_d_sumsq += cd * cd;
    cr_d_pos += cd > 0;
    cr_d_neg += cd < 0;
    ex_o_sum += xo;
    ex_o_sumsq += xo * xo;
    ex_o_pos += xo > 0;
    ex_o_neg += xo < 0;
    ex_d_sum += xd;
    ex_d_sumsq += xd * xd;
    ex_d_pos += xd > 0;
    ex_d_neg += xd < 0;
  }
  sig_overflows += t.significand_overflows;
  ties += t.ties;
  rounded_up += t.rounded_up;
  rounded_down += t.rounded_down;
}

void SweepRow::absorb(const SweepRow& o) {
  trials += o.trials;
  o_sum += o.o_sum;
  o_sumsq += o.o_sumsq;
  o_pos += o.o_pos;
  o_neg += o.o_neg;
  d_sum += o.d_sum;
  d_sumsq += o.d_sumsq;
  d_pos += o.d_pos;
  d_neg += o.d_neg;
  elements += o.elements;
  sq_sum += o.sq_sum;
  max_abs = std::max(max_abs, o.max_abs);
  sig_overflows += o.sig_overflows;
  ties += o.ties;
  rounded_up += o.rounded_up;
  rounded_down += o.rounded_down;
  ref_trials += o.ref_trials;
  cr_o_sum += o.cr_o_sum;
  cr_o_sumsq += o.cr_o_sumsq;
  cr_o_pos += o.cr_o_pos;
  cr_o_neg += o.cr_o_neg;
  cr_d_sum += o.cr_d_sum;
  cr_d_sumsq += o.cr_d_sumsq;
  cr_d_pos += o.cr_d_pos;
  cr_d_neg += o.cr_d_neg;
  ex_o_sum += o.ex_o_sum;
  ex_o_sumsq += o.ex_o_sumsq;
  ex_o_pos += o.ex_o_pos;
  ex_o_neg += o.ex_o_neg;
  ex_d_sum += o.ex_d_sum;
  ex_d_sumsq += o.ex_d_sumsq;
  ex_d_pos += o.ex_d_pos;
  ex_d_neg += o.ex_d_neg;
}

std::string SweepRow::configuration() const {
  return format + "/" + round + "/" + model + "/" + scenario + "/n" + std::to_string(seqlen) + "/d" +
         std::to_string(headdim);
}

attn::BiasStatistics stats_from_sums(long long n, double sum, double sumsq, long long pos, long long neg,
                                     double alpha) {
  // Only the sums survive sharding, so the variance comes from them (sum of squares
  // minus n*mean^2); the statistics themselves are statistics.cpp's.
  const double mean = n > 0 ? sum / static_cast<double>(n) : 0.0;
  const double stddev = n > 1 ? std::sqrt(std::max(0.0, sumsq - sum * mean) / static_cast<double>(n - 1)) : 0.0;
  return attn::summarize_moments(static_cast<std::size_t>(n), mean, stddev, static_cast<std::size_t>(pos),
                                 static_cast<std::size_t>(neg), alpha);
}

namespace {

struct Derived {
  attn::BiasStatistics o, d;          // error against exact
  attn::BiasStatistics cr_o, cr_d;    // the correctly rounded reference's error
  attn::BiasStatistics ex_o, ex_d;    // excess: error minus the reference's
  bool has_reference = false;         // false for paired (A-vs-B) rows
  double rms = 0;
  std::string verdict, verdict_from;
};
Derived derive(const SweepRow& r, double alpha) {
  Derived x;
  x.o = stats_from_sums(r.trials, r.o_sum, r.o_sumsq, r.o_pos, r.o_neg, alpha);
  x.d = stats_from_sums(r.trials, r.d_sum, r.d_sumsq, r.d_pos, r.d_neg, alpha);
  x.has_reference = r.ref_trials > 0;
  x.cr_o = stats_from_sums(r.ref_trials, r.cr_o_sum, r.cr_o_sumsq, r.cr_o_pos, r.cr_o_neg, alpha);
  x.cr_d = stats_from_sums(r.ref_trials, r.cr_d_sum, r.cr_d_sumsq, r.cr_d_pos, r.cr_d_neg, alpha);
  x.ex_o = stats_from_sums(r.ref_trials, r.ex_o_sum, r.ex_o_sumsq, r.ex_o_pos, r.ex_o_neg, alpha);
  x.ex_d = stats_from_sums(r.ref_trials, r.ex_d_sum, r.ex_d_sumsq, r.ex_d_pos, r.ex_d_neg, alpha);
  x.rms = r.elements ? std::sqrt(r.sq_sum / static_cast<double>(r.elements)) : 0.0;
  // The verdict: the kernel's own share (excess over its format's correctly rounded output);
  // a paired row is already a difference of two kernels.
  const bool biased = x.has_reference ? (x.ex_o.biased || x.ex_d.biased) : (x.o.biased || x.d.biased);
  x.verdict = biased ? "biased" : "no detectable bias";
  x.verdict_from = x.has_reference ? "excess" : "paired";
  return x;
}

std::string exact_text(double v) {  // round-trips exactly
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}
std::string short_text(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

const char* kCsvHeader =
    "index,format,round,model,scenario,seqlen,headdim,trials,o_sum,o_sumsq,o_pos,o_neg,d_sum,d_sumsq,d_pos,d_neg,"
    "elements,sq_sum,max_abs,sig_overflows,ties,rounded_up,rounded_down,"
    "ref_trials,cr_o_sum,cr_o_sumsq,cr_o_pos,cr_o_neg,cr_d_sum,cr_d_sumsq,cr_d_pos,cr_d_neg,"
    "ex_o_sum,ex_o_sumsq,ex_o_pos,ex_o_neg,ex_d_sum,ex_d_sumsq,ex_d_pos,ex_d_neg,"
    "o_mean_ulps,o_p_t,o_cr_mean_ulps,o_excess_mean_ulps,o_excess_p_t,"
    "delta_mean_ulps,delta_p_t,delta_cr_mean_ulps,delta_excess_mean_ulps,delta_excess_p_t,"
    "rms_ulps,max_abs_ulps,verdict_from,verdict";
constexpr std::size_t kCsvColumns = 54;
constexpr const char* kRunPrefix = "# run ";

}  // namespace

void write_table(std::ostream& os, const std::vector<SweepRow>& rows, double alpha) {
  char line[640];
  std::snprintf(line, sizeof line, "%-44s %6s %9s %9s %9s %9s %9s %9s %9s %9s %8s %7s %-15s %s\n", "configuration",
                "trials", "O err", "O CR", "O excess", "dlt err", "dlt CR", "dlt exc.", "RMS", "max|err|", "sig.ovf",
                "ties", "PV up/down", "verdict");
  os << line;
  auto or_dash = [](bool has, double v) {
    char buf[32];
    if (!has) return std::string("-");
    std::snprintf(buf, sizeof buf, "%.4g", v);
    return std::string(buf);
  };
  for (const SweepRow& r : rows) {
    const Derived x = derive(r, alpha);
    const std::string ud = std::to_string(r.rounded_up) + "/" + std::to_string(r.rounded_down);
    std::snprintf(line, sizeof line, "%-44s %6lld %9.4g %9s %9s %9.4g %9s %9s %9.4g %9.4g %8lld %7lld %-15s %s\n",
                  r.configuration().c_str(), r.trials, x.o.mean, or_dash(x.has_reference, x.cr_o.mean).c_str(),
                  or_dash(x.has_reference, x.ex_o.mean).c_str(), x.d.mean,
                  or_dash(x.has_reference, x.cr_d.mean).c_str(), or_dash(x.has_reference, x.ex_d.mean).c_str(), x.rms,
                  r.max_abs, r.sig_overflows, r.ties, ud.c_str(), x.verdict.c_str());
    os << line;
  }
  os << "Means of the per-trial mean signed error, in ulps of the output format at the exact value (O) and at\n"
        "max(|delta|, sum|dO*O|) (delta): \"err\" against exact_attention; \"CR\" the correctly rounded\n"
        "reference's on the same inputs (exact, rounded once into the output format in the row's --round mode;\n"
        "delta from that O, rounded once to fp32): the output format's own share; \"excess\" err minus CR,\n"
        "trial by trial: the kernel's own share. RMS and max over every element of O (against exact).\n"
        "PV event counts are from the first "
     << kTracedRows
     << " rows of every trial (tiled models only).\nVerdict: t-test on the per-trial excess of O or delta,\n"
        "alpha = "
     << alpha << ".\n"
     << "Rows named A-vs-B (sweep --against B) are paired differences A minus B on the same inputs and\n"
        "seed, O in ulps at max(|O|, sum_j P_ij |V_jc|), with no reference (-): their verdict tests the\n"
        "difference itself; their PV counts are A's.\n";
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
  return j;
}
}  // namespace

void write_csv(std::ostream& os, const std::vector<SweepRow>& rows, const SweepRun& run) {
  const double alpha = run.alpha;
  os << kCsvHeader << "\n";
  for (const SweepRow& r : rows) {
    const Derived x = derive(r, alpha);
    os << r.index << "," << r.format << "," << r.round << "," << r.model << "," << r.scenario << "," << r.seqlen
       << "," << r.headdim << "," << r.trials << "," << exact_text(r.o_sum) << "," << exact_text(r.o_sumsq) << ","
       << r.o_pos << "," << r.o_neg << "," << exact_text(r.d_sum) << "," << exact_text(r.d_sumsq) << "," << r.d_pos
       << "," << r.d_neg << "," << r.elements << "," << exact_text(r.sq_sum) << "," << exact_text(r.max_abs) << ","
       << r.sig_overflows << "," << r.ties << "," << r.rounded_up << "," << r.rounded_down << "," << r.ref_trials
       << "," << exact_text(r.cr_o_sum) << "," << exact_text(r.cr_o_sumsq) << "," << r.cr_o_pos << "," << r.cr_o_neg
       << "," << exact_text(r.cr_d_sum) << "," << exact_text(r.cr_d_sumsq) << "," << r.cr_d_pos << "," << r.cr_d_neg
       << "," << exact_text(r.ex_o_sum) << "," << exact_text(r.ex_o_sumsq) << "," << r.ex_o_pos << "," << r.ex_o_neg
       << "," << exact_text(r.ex_d_sum) << "," << exact_text(r.ex_d_sumsq) << "," << r.ex_d_pos << "," << r.ex_d_neg
       << "," << short_text(x.o.mean) << "," << short_text(x.o.p_t) << ","
       << (x.has_reference ? short_text(x.cr_o.mean) : "") << "," << (x.has_reference ? short_text(x.ex_o.mean) : "")
       << "," << (x.has_reference ? short_text(x.ex_o.p_t) : "") << "," << short_text(x.d.mean) << ","
       << short_text(x.d.p_t) << "," << (x.has_reference ? short_text(x.cr_d.mean) : "") << ","
       << (x.has_reference ? short_text(x.ex_d.mean) : "") << "," << (x.has_reference ? short_text(x.ex_d.p_t) : "")
       << "," << short_text(x.rms) << "," << short_text(r.max_abs) << "," << x.verdict_from << "," << x.verdict
       << "\n";
  }
  // Last, so that a truncated file has no run record and merge refuses it.
  os << kRunPrefix << run_json(run).dump() << "\n";
}

void write_json(std::ostream& os, const std::vector<SweepRow>& rows, const SweepRun& run) {
  const double alpha = run.alpha;
  nlohmann::ordered_json out;
  out["alpha"] = alpha;
  out["run"] = run_json(run);
  out["rows"] = nlohmann::ordered_json::array();
  for (const SweepRow& r : rows) {
    const Derived x = derive(r, alpha);
    nlohmann::ordered_json j;
    j["index"] = r.index;
    j["format"] = r.format;
    j["round"] = r.round;
    j["model"] = r.model;
    j["scenario"] = r.scenario;
    j["seqlen"] = r.seqlen;
    j["headdim"] = r.headdim;
    j["trials"] = r.trials;
    j["sufficient"] = {{"o_sum", r.o_sum},         {"o_sumsq", r.o_sumsq},     {"o_pos", r.o_pos},
                       {"o_neg", r.o_neg},         {"d_sum", r.d_sum},         {"d_sumsq", r.d_sumsq},
                       {"d_pos", r.d_pos},         {"d_neg", r.d_neg},         {"elements", r.elements},
                       {"sq_sum", r.sq_sum},       {"max_abs", r.max_abs},     {"sig_overflows", r.sig_overflows},
                       {"ties", r.ties},           {"rounded_up", r.rounded_up}, {"rounded_down", r.rounded_down},
                       {"ref_trials", r.ref_trials}, {"cr_o_sum", r.cr_o_sum}, {"cr_o_sumsq", r.cr_o_sumsq},
                       {"cr_o_pos", r.cr_o_pos},   {"cr_o_neg", r.cr_o_neg},   {"cr_d_sum", r.cr_d_sum},
                       {"cr_d_sumsq", r.cr_d_sumsq}, {"cr_d_pos", r.cr_d_pos}, {"cr_d_neg", r.cr_d_neg},
                       {"ex_o_sum", r.ex_o_sum},   {"ex_o_sumsq", r.ex_o_sumsq}, {"ex_o_pos", r.ex_o_pos},
                       {"ex_o_neg", r.ex_o_neg},   {"ex_d_sum", r.ex_d_sum},   {"ex_d_sumsq", r.ex_d_sumsq},
                       {"ex_d_pos", r.ex_d_pos},   {"ex_d_neg", r.ex_d_neg}};
    j["o_mean_ulps"] = x.o.mean;
    j["o_ci"] = {x.o.ci_low, x.o.ci_high};
    j["o_p_t"] = x.o.p_t;
    j["o_p_sign"] = x.o.p_sign;
    j["delta_mean_ulps"] = x.d.mean;
    j["delta_ci"] = {x.d.ci_low, x.d.ci_high};
    j["delta_p_t"] = x.d.p_t;
    j["delta_p_sign"] = x.d.p_sign;
    if (x.has_reference) {
      auto stat = [](const attn::BiasStatistics& b) {
        nlohmann::ordered_json o;
        o["mean_ulps"] = b.mean;
        o["ci"] = {b.ci_low, b.ci_high};
        o["p_t"] = b.p_t;
        o["p_sign"] = b.p_sign;
        return o;
      };
      j["correctly_rounded"] = {{"o", stat(x.cr_o)}, {"delta", stat(x.cr_d)}};
      j["excess"] = {{"o", stat(x.ex_o)}, {"delta", stat(x.ex_d)}};
    }
    j["rms_ulps"] = x.rms;
    j["max_abs_ulps"] = r.max_abs;
    j["verdict_from"] = x.verdict_from;
    j["verdict"] = x.verdict;
    out["rows"].push_back(j);
  }
  os << out.dump(2) << "\n";
}

namespace {
std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : line) {
    if (c == ',') {
      out.push_back(cur);
      cur.clear();
    } else if (c != '\r') {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}
double to_num(const std::string& s, const std::string& where) {
  try {
    std::size_t used = 0;
    const double v = std::stod(s, &used);
    if (used != s.size()) throw std::invalid_argument("");
    return v;
  } catch (const std::exception&) {
    throw InputError(where + ": expected a number, got '" + s + "'");
  }
}
// An integer column in lo..hi (a value outside would not survive the conversion).
long long to_int(const std::string& s, const std::string& where, long long lo = LLONG_MIN, long long hi = LLONG_MAX) {
  const double v = to_num(s, where);
  if (v != std::floor(v)) throw InputError(where + ": expected an integer, got '" + s + "'");
  // -2^63 <= v < 2^63 before the cast (static_cast is undefined outside long long).
  if (!(v >= -0x1p63 && v < 0x1p63) || static_cast<long long>(v) < lo || static_cast<long long>(v) > hi)
    throw InputError(where + ": " + s + " is outside " + std::to_string(lo) + ".." + std::to_string(hi));
  return static_cast<long long>(v);
}
// An integer member of a JSON row in lo..hi; nlohmann's get<long long>() of a float, or
// of an integer out of range, would convert silently (or be undefined).
long long json_int(const nlohmann::json& row, const char* key, const std::string& where, long long lo = LLONG_MIN,
                   long long hi = LLONG_MAX) {
  const nlohmann::json& v = row.at(key);
  const std::string field = where + " field " + key;
  if (!v.is_number_integer()) throw InputError(field + ": expected an integer, got " + v.dump());
  if (v.is_number_unsigned() && v.get<unsigned long long>() > static_cast<unsigned long long>(hi))
    throw InputError(field + ": " + v.dump() + " is outside " + std::to_string(lo) + ".." + std::to_string(hi));
  const long long x = v.is_number_unsigned() ? static_cast<long long>(v.get<unsigned long long>()) : v.get<long long>();
  if (x < lo || x > hi)
    throw InputError(field + ": " + v.dump() + " is outside " + std::to_string(lo) + ".." + std::to_string(hi));
  return x;
}
}  // namespace

namespace {
std::string json_string(const nlohmann::json& j, const char* key, const std::string& where) {
  const nlohmann::json& v = j.at(key);
  if (!v.is_string()) throw InputError(where + " field " + key + ": expected a string, got " + v.dump());
  return v.get<std::string>();
}

SweepRun parse_run(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw InputError(where + ": expected a JSON object");
  SweepRun run;
  try {
    if (json_string(j, "program", where) != "flashbits sweep")
      throw InputError(where + " field program: expected \"flashbits sweep\"");
    const nlohmann::json& seed = j.at("seed");
    if (!seed.is_number_unsigned() && !(seed.is_number_integer() && seed.get<long long>() >= 0))
      throw InputError(where + " field seed: expected an unsigned integer, got " + seed.dump());
    run.seed = seed.get<std::uint64_t>();
    const std::string shard = json_string(j, "shard", where);
    {
      char slash = 0;
      std::istringstream ss(shard);
      long long k = 0, n = 0;
      if (!(ss >> k >> slash >> n) || slash != '/' || !ss.eof() || n < 1 || k < 1 || k > n || n > INT_MAX)
        throw InputError(where + " field shard: '" + shard + "' is not K/N with 1 <= K <= N");
      run.shard_k = static_cast<int>(k);
      run.shard_n = static_cast<int>(n);
    }
    run.configurations = json_int(j, "configurations", where, 1);
    run.trials = json_int(j, "trials", where, 1, INT_MAX);
    run.formats = json_string(j, "formats", where);
    run.rounds = json_string(j, "round", where);
    run.models = json_string(j, "models", where);
    run.scenarios = json_string(j, "scenarios", where);
    run.against = json_string(j, "against", where);
    run.seqlen = json_int(j, "seqlen", where, 1, INT_MAX);
    run.headdim = json_int(j, "headdim", where, 1, INT_MAX);
    run.sr_bits = json_int(j, "sr_bits", where, 1, kMaxSrBits);
    const nlohmann::json& alpha = j.at("alpha");
    if (!alpha.is_number()) throw InputError(where + " field alpha: expected a number, got " + alpha.dump());
    run.alpha = alpha_or_throw(alpha.get<double>(), where + " field alpha");
  } catch (const nlohmann::json::exception& e) {
    throw InputError(where + ": " + e.what());
  }
  return run;
}
}  // namespace

SweepFile read_sweep_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw InputError(path + ": is a directory, expected a sweep CSV or JSON file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open");
  std::stringstream buf;
  buf << in.rdbuf();
  if (in.bad()) throw InputError(path + ": read failed");
  const std::string text = buf.str();
  SweepFile file;
  std::vector<SweepRow>& rows = file.rows;
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
      if (!j.is_object()) throw InputError(path + ": not a sweep JSON file (expected an object)");
      if (j.contains("run")) file.run = parse_run(j.at("run"), path + ": run");
      for (const auto& r : j.at("rows")) {
        const std::string where = path + ": rows[" + std::to_string(rows.size()) + "]";
        SweepRow s;
        s.index = json_int(r, "index", where);
        s.format = r.at("format").get<std::string>();
        s.round = r.at("round").get<std::string>();
        s.model = r.at("model").get<std::string>();
        s.scenario = r.at("scenario").get<std::string>();
        s.seqlen = static_cast<int>(json_int(r, "seqlen", where, INT_MIN, INT_MAX));
        s.headdim = static_cast<int>(json_int(r, "headdim", where, INT_MIN, INT_MAX));
        s.trials = json_int(r, "trials", where);
        const auto& q = r.at("sufficient");
        s.o_sum = q.at("o_sum").get<double>();
        s.o_sumsq = q.at("o_sumsq").get<double>();
        s.o_pos = json_int(q, "o_pos", where);
        s.o_neg = json_int(q, "o_neg", where);
        s.d_sum = q.at("d_sum").get<double>();
        s.d_sumsq = q.at("d_sumsq").get<double>();
        s.d_pos = json_int(q, "d_pos", where);
        s.d_neg = json_int(q, "d_neg", where);
        s.elements = json_int(q, "elements", where);
        s.sq_sum = q.at("sq_sum").get<double>();
        s.max_abs = q.at("max_abs").get<double>();
        s.sig_overflows = json_int(q, "sig_overflows", where);
        s.ties = json_int(q, "ties", where);
        s.rounded_up = json_int(q, "rounded_up", where);
        s.rounded_down = json_int(q, "rounded_down", where);
        s.ref_trials = json_int(q, "ref_trials", where);
        s.cr_o_sum = q.at("cr_o_sum").get<double>();
        s.cr_o_sumsq = q.at("cr_o_sumsq").get<double>();
        s.cr_o_pos = json_int(q, "cr_o_pos", where);
        s.cr_o_neg = json_int(q, "cr_o_neg", where);
        s.cr_d_sum = q.at("cr_d_sum").get<double>();
        s.cr_d_sumsq = q.at("cr_d_sumsq").get<double>();
        s.cr_d_pos = json_int(q, "cr_d_pos", where);
        s.cr_d_neg = json_int(q, "cr_d_neg", where);
        s.ex_o_sum = q.at("ex_o_sum").get<double>();
        s.ex_o_sumsq = q.at("ex_o_sumsq").get<double>();
        s.ex_o_pos = json_int(q, "ex_o_pos", where);
        s.ex_o_neg = json_int(q, "ex_o_neg", where);
        s.ex_d_sum = q.at("ex_d_sum").get<double>();
        s.ex_d_sumsq = q.at("ex_d_sumsq").get<double>();
        s.ex_d_pos = json_int(q, "ex_d_pos", where);
        s.ex_d_neg = json_int(q, "ex_d_neg", where);
        rows.push_back(s);
      }
    } catch (const nlohmann::json::exception& e) {
      throw InputError(path + ": not a sweep JSON file (" + e.what() + ")");
    }
    return file;
  }
  std::istringstream lines(text);
  std::string line;
  int line_no = 0;
  while (std::getline(lines, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const std::string where = path + ": line " + std::to_string(line_no);
    if (file.run) throw InputError(where + ": text after the run record (the record is the last line)");
    if (line.rfind(kRunPrefix, 0) == 0 && line_no > 1) {
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line.substr(std::string(kRunPrefix).size()));
      } catch (const nlohmann::json::exception& e) {
        throw InputError(where + ": run record: " + e.what());
      }
      file.run = parse_run(j, where + ": run record");
      continue;
    }
    if (line_no == 1) {
      if (line != kCsvHeader) throw InputError(where + ": expected the sweep CSV header");
      continue;
    }
    const auto f = split_csv(line);
    if (f.size() != kCsvColumns)
      throw InputError(where + ": expected " + std::to_string(kCsvColumns) + " columns, got " + std::to_string(f.size()));
    SweepRow s;
    s.index = to_int(f[0], where + " column index");
    s.format = f[1];
    s.round = f[2];
    s.model = f[3];
    s.scenario = f[4];
    s.seqlen = static_cast<int>(to_int(f[5], where + " column seqlen", INT_MIN, INT_MAX));
    s.headdim = static_cast<int>(to_int(f[6], where + " column headdim", INT_MIN, INT_MAX));
    s.trials = to_int(f[7], where + " column trials");
    s.o_sum = to_num(f[8], where + " column o_sum");
    s.o_sumsq = to_num(f[9], where + " column o_sumsq");
    s.o_pos = to_int(f[10], where + " column o_pos");
    s.o_neg = to_int(f[11], where + " column o_neg");
    s.d_sum = to_num(f[12], where + " column d_sum");
    s.d_sumsq = to_num(f[13], where + " column d_sumsq");
    s.d_pos = to_int(f[14], where + " column d_pos");
    s.d_neg = to_int(f[15], where + " column d_neg");
    s.elements = to_int(f[16], where + " column elements");
    s.sq_sum = to_num(f[17], where + " column sq_sum");
    s.max_abs = to_num(f[18], where + " column max_abs");
    s.sig_overflows = to_int(f[19], where + " column sig_overflows");
    s.ties = to_int(f[20], where + " column ties");
    s.rounded_up = to_int(f[21], where + " column rounded_up");
    s.rounded_down = to_int(f[22], where + " column rounded_down");
    s.ref_trials = to_int(f[23], where + " column ref_trials");
    s.cr_o_sum = to_num(f[24], where + " column cr_o_sum");
    s.cr_o_sumsq = to_num(f[25], where + " column cr_o_sumsq");
    s.cr_o_pos = to_int(f[26], where + " column cr_o_pos");
    s.cr_o_neg = to_int(f[27], where + " column cr_o_neg");
    s.cr_d_sum = to_num(f[28], where + " column cr_d_sum");
    s.cr_d_sumsq = to_num(f[29], where + " column cr_d_sumsq");
    s.cr_d_pos = to_int(f[30], where + " column cr_d_pos");
    s.cr_d_neg = to_int(f[31], where + " column cr_d_neg");
    s.ex_o_sum = to_num(f[32], where + " column ex_o_sum");
    s.ex_o_sumsq = to_num(f[33], where + " column ex_o_sumsq");
    s.ex_o_pos = to_int(f[34], where + " column ex_o_pos");
    s.ex_o_neg = to_int(f[35], where + " column ex_o_neg");
    s.ex_d_sum = to_num(f[36], where + " column ex_d_sum");
    s.ex_d_sumsq = to_num(f[37], where + " column ex_d_sumsq");
    s.ex_d_pos = to_int(f[38], where + " column ex_d_pos");
    s.ex_d_neg = to_int(f[39], where + " column ex_d_neg");
    rows.push_back(s);
  }
  if (line_no == 0) throw InputError(path + ": empty file, expected a sweep CSV or JSON");
  return file;
}

SweepRun check_shards(const std::vector<std::pair<std::string, SweepFile>>& files, std::optional<double> alpha) {
  if (files.empty()) throw InputError("merge: no shard files");
  for (const auto& [path, file] : files)
    if (!file.run)
      throw InputError(path + ": no run record (the sweep's parameters, seed and shard: a file written by an older "
                              "flashbits, or truncated); rerun that sweep shard");
  const std::string& first_path = files.front().first;
  const SweepRun& first = *files.front().second.run;
  // Every parameter the rows depend on must agree.
  for (const auto& [shard_path, file] : files) {
    // A named reference, not the structured binding: clang before 16 cannot capture bindings.
    const std::string& path = shard_path;
    const SweepRun& r = *file.run;
    auto differ = [&](const std::string& what, const std::string& mine, const std::string& theirs) {
      if (mine != theirs)
        throw InputError(path + ": " + what + " " + mine + " differs from " + theirs + " in " + first_path +
                         " (shards of one sweep share every parameter)");
    };
    differ("seed", std::to_string(r.seed), std::to_string(first.seed));
    if (r.shard_n != first.shard_n)
      throw InputError(path + ": shard " + r.shard_text() + " is of a sweep cut into " + std::to_string(r.shard_n) +
                       " shards, " + first_path + " (" + first.shard_text() + ") of one cut into " +
                       std::to_string(first.shard_n));
  }
  for (const auto& [shard_path, file] : files) {
    const std::string& path = shard_path;
    const SweepRun& r = *file.run;
    auto differ = [&](const std::string& what, const std::string& mine, const std::string& theirs) {
      if (mine != theirs)
        throw InputError(path + ": " + what + " '" + mine + "' differs from '" + theirs + "' in " + first_path +
                         " (shards of one sweep share every parameter)");
    };
    differ("--trials", std::to_string(r.trials), std::to_string(first.trials));
    differ("--formats", r.formats, first.formats);
    differ("--round", r.rounds, first.rounds);
    differ("--model", r.models, first.models);
    differ("--scenario", r.scenarios, first.scenarios);
    differ("--against", r.against, first.against);
    differ("--seqlen", std::to_string(r.seqlen), std::to_string(first.seqlen));
    differ("--headdim", std::to_string(r.headdim), std::to_string(first.headdim));
    differ("--sr-bits", std::to_string(r.sr_bits), std::to_string(first.sr_bits));
    differ("configuration count", std::to_string(r.configurations), std::to_string(first.configurations));
  }
  // Each shard K of 1..N exactly once.
  std::vector<const std::string*> shard_file(static_cast<std::size_t>(first.shard_n), nullptr);
  for (const auto& [path, file] : files) {
    const std::string*& seen = shard_file[static_cast<std::size_t>(file.run->shard_k - 1)];
    if (seen)
      throw InputError(path + ": shard " + file.run->shard_text() + " is given twice (also " + *seen + ")");
    seen = &path;
  }
  for (int k = 1; k <= first.shard_n; ++k)
    if (!shard_file[static_cast<std::size_t>(k - 1)])
      throw InputError(first_path + ": its sweep has " + std::to_string(first.shard_n) + " shards and shard " +
                       std::to_string(k) + "/" + std::to_string(first.shard_n) + " is missing");
  // Every row belongs to its shard and holds the run's trials.
  std::set<long long> index_seen;
  for (const auto& [path, file] : files) {
    const SweepRun& r = *file.run;
    long long expected_rows = 0;
    if (r.configurations >= r.shard_k) expected_rows = (r.configurations - r.shard_k) / r.shard_n + 1;
    for (std::size_t i = 0; i < file.rows.size(); ++i) {
      const SweepRow& row = file.rows[i];
      const std::string where = path + ": row " + std::to_string(i + 1) + " (index " + std::to_string(row.index) + ")";
      if (row.index < 0 || row.index >= r.configurations || row.index % r.shard_n != r.shard_k - 1)
        throw InputError(where + ": not a configuration of shard " + r.shard_text() + " of " +
                         std::to_string(r.configurations));
      if (row.trials != r.trials)
        throw InputError(where + ": trials " + std::to_string(row.trials) + " differs from the run's " +
                         std::to_string(r.trials));
      if (row.seqlen != r.seqlen || row.headdim != r.headdim)
        throw InputError(where + ": seqlen/headdim " + std::to_string(row.seqlen) + "/" + std::to_string(row.headdim) +
                         " differ from the run's " + std::to_string(r.seqlen) + "/" + std::to_string(r.headdim));
      if (row.ref_trials != 0 && row.ref_trials != row.trials)
        throw InputError(where + ": ref_trials " + std::to_string(row.ref_trials) + " is neither 0 nor trials");
      const std::pair<const char*, long long> counts[] = {
          {"o_pos", row.o_pos},       {"o_neg", row.o_neg},       {"d_pos", row.d_pos},       {"d_neg", row.d_neg},
          {"cr_o_pos", row.cr_o_pos}, {"cr_o_neg", row.cr_o_neg}, {"cr_d_pos", row.cr_d_pos}, {"cr_d_neg", row.cr_d_neg},
          {"ex_o_pos", row.ex_o_pos}, {"ex_o_neg", row.ex_o_neg}, {"ex_d_pos", row.ex_d_pos}, {"ex_d_neg", row.ex_d_neg}};
      for (const auto& [name, v] : counts)
        if (v < 0 || v > row.trials)
          throw InputError(where + ": " + name + " " + std::to_string(v) + " is outside 0..trials");
      for (const auto& [name, v] : {std::pair<const char*, long long>{"elements", row.elements},
                                    {"sig_overflows", row.sig_overflows}, {"ties", row.ties},
                                    {"rounded_up", row.rounded_up}, {"rounded_down", row.rounded_down}})
        if (v < 0) throw InputError(where + ": " + name + " " + std::to_string(v) + " is negative");
      if (!index_seen.insert(row.index).second)
        throw InputError(where + ": configuration " + row.configuration() + " appears twice");
    }
    if (static_cast<long long>(file.rows.size()) != expected_rows)
      throw InputError(path + ": shard " + r.shard_text() + " of " + std::to_string(r.configurations) +
                       " configurations should hold " + std::to_string(expected_rows) + " rows, holds " +
                       std::to_string(file.rows.size()));
  }
  SweepRun merged = first;
  merged.shard_k = merged.shard_n = 1;
  if (alpha) {
    merged.alpha = *alpha;
  } else {
    for (const auto& [path, file] : files)
      if (file.run->alpha != first.alpha)
        throw InputError(path + ": --alpha " + short_text(file.run->alpha) + " differs from " +
                         short_text(first.alpha) + " in " + first_path + "; give merge --alpha");
  }
  return merged;
}

int emit_rows(std::vector<SweepRow> rows, const std::string& csv_path, bool json, const SweepRun& run) {
  std::sort(rows.begin(), rows.end(), [](const SweepRow& a, const SweepRow& b) { return a.index < b.index; });
  if (!csv_path.empty()) {
    std::ostringstream out;
    write_csv(out, rows, run);
    write_output_file(csv_path, out.str(), "the CSV");
  }
  if (json) write_json(std::cout, rows, run);
  else write_table(std::cout, rows, run.alpha);
  // A row whose verdict is "biased" is a failed check (exit 1), as in bias-test.
  for (const SweepRow& r : rows)
    if (derive(r, run.alpha).verdict == "biased") return kExitCheckFailed;
  return kExitOk;
}

attn::ModelHandle with_capture_sfu(const attn::ModelHandle& model, const Trace& trace, const std::string& choice,
                                   std::string& note) {
  note.clear();
  std::string set_name = choice;
  if (set_name == "auto") {
    set_name = "model";
    if (is_hardware_capture(trace) && trace.metadata().compute_capability == "9.0") {
      set_name = "hw-sm90";
      note = "SFU set hw-sm90 (measured on an H200): the trace was captured on " + trace.metadata().source +
             ", compute capability 9.0 (--sfu model keeps the model's own)";
    }
  }
  if (set_name == "model") return model;
  const std::optional<SfuSet> set = find_sfu_set(set_name);
  if (!set) {
    std::string names;
    for (const auto& n : sfu_set_names()) names += (names.empty() ? "" : ", ") + n;
    throw InputError("--sfu " + set_name + ": unknown SFU set (auto, model, " + names + ")");
  }
  auto recipe = std::make_shared<attn::KernelModel>(*model.recipe);
  SfuSet chosen = *set;
  for (SpecialFunction f : {SpecialFunction::ex2, SpecialFunction::rcp, SpecialFunction::lg2})
    if (attn::uses_special_function(*recipe, f)) recipe->sfu.model_for(f) = chosen.model_for(f);
  attn::ModelHandle out = model;
  out.recipe = std::move(recipe);
  return out;
}

}  // namespace fb::cli
