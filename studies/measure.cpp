// studies/measure.cpp: error measurement of kernel models against exact attention
// (contract in measure.hpp).
#include "studies/measure.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <memory>
#include <stdexcept>

#include "attention/kernel_models.hpp"
#include "emu/rounding.hpp"

namespace fb::attn {

std::vector<double> delta_units(const Format& output_format, const Tensor4& d_o, const Tensor4& o_exact,
                                const Tensor4& delta_exact) {
  const int d = d_o.cols;
  std::vector<double> units(delta_exact.data.size());
  for (std::size_t r = 0; r < units.size(); ++r) {
    double magnitude = std::fabs(delta_exact.data[r]);
    double sum_abs = 0;
    for (int c = 0; c < d; ++c) sum_abs += std::fabs(d_o.data[r * d + c] * o_exact.data[r * d + c]);
    units[r] = ulp_at(output_format, std::max(magnitude, sum_abs));
  }
  return units;
}

ErrorUnits error_units(const Format& output_format, const AttentionInputs& in, const AttentionOutputs& exact) {
  // Σ_j P_ij·|V_jc| is exactly the attention output of the same scores over |V|.
  AttentionInputs abs_v = in;
  for (double& x : abs_v.v.data) x = std::fabs(x);
  abs_v.d_o.reset();
  const AttentionOutputs scale = exact_attention(abs_v);
  ErrorUnits u;
  u.o.resize(exact.o.data.size());
  for (std::size_t i = 0; i < u.o.size(); ++i)
    u.o[i] = ulp_at(output_format, std::max(std::fabs(exact.o.data[i]), scale.o.data[i]));
  if (in.d_o && exact.delta) u.delta = delta_units(output_format, *in.d_o, exact.o, *exact.delta);
  return u;
}

ReferenceErrors reference_errors(const ModelHandle& reference, const AttentionInputs& in, const AttentionOutputs& exact,
                                 const ErrorUnits& units, std::uint64_t seed) {
  RunOptions opt;
  opt.seed = seed;
  const AttentionOutputs cr = round_exact_outputs(*reference.recipe, in, exact, opt);
  ReferenceErrors r;
  r.o_ulps.resize(cr.o.data.size());
  for (std::size_t i = 0; i < cr.o.data.size(); ++i) r.o_ulps[i] = (cr.o.data[i] - exact.o.data[i]) / units.o[i];
  if (in.d_o && exact.delta && cr.delta && !units.delta.empty()) {
    for (std::size_t row = 0; row < exact.delta->data.size(); ++row)
      r.delta_ulps.push_back((cr.delta->data[row] - exact.delta->data[row]) / units.delta[row]);
  }
  return r;
}

ReferenceErrors correctly_rounded_errors(const Format& output_format, const AttentionInputs& in,
                                         const AttentionOutputs& exact, const ErrorUnits& units) {
  const ModelHandle reference{"correctly-rounded",
                              std::make_shared<const KernelModel>(correctly_rounded_recipe(in.dtype, output_format))};
  return reference_errors(reference, in, exact, units);
}

std::vector<std::size_t> non_finite_rows(const Tensor4& t) {
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

void check_inputs_support_statistics(const AttentionInputs& in, const std::string& source) {
  const Tensor4& q = in.q;
  if (q.batch < 1 || q.heads < 1 || q.rows < 1 || q.cols < 1 || in.k.rows < 1)
    throw std::invalid_argument(source + ": tensor q has shape [" + std::to_string(q.batch) + "," +
                                std::to_string(q.heads) + "," + std::to_string(q.rows) + "," + std::to_string(q.cols) +
                                "]: a batch, head count, sequence length or head dim of 0 has no rows to measure");
  const std::pair<const char*, const Tensor4*> tensors[] = {
      {"q", &in.q}, {"k", &in.k}, {"v", &in.v}, {"do", in.d_o ? &*in.d_o : nullptr}};
  for (const auto& [name, t] : tensors) {
    if (!t) continue;
    const std::vector<std::size_t> rows = non_finite_rows(*t);
    if (!rows.empty())
      throw std::invalid_argument(source + ": tensor " + name + ": NaN or infinity in " + std::to_string(rows.size()) +
                                  " row(s) " + describe_rows(rows, t->heads, t->rows) +
                                  "; errors on non-finite inputs support no verdict");
  }
}

namespace {

// (got - want) / unit, element by element.
std::vector<double> errors_in(const std::vector<double>& got, const std::vector<double>& want,
                              const std::function<double(std::size_t)>& unit) {
  std::vector<double> e(got.size());
  for (std::size_t i = 0; i < got.size(); ++i) e[i] = (got[i] - want[i]) / unit(i);
  return e;
}

void add_non_finite(TrialErrors& t, const AttentionOutputs& x) {
  for (std::size_t r : non_finite_rows(x.o)) t.non_finite_rows.push_back(r);
  if (x.delta)
    for (std::size_t r : non_finite_rows(*x.delta)) t.non_finite_rows.push_back(r);
  std::sort(t.non_finite_rows.begin(), t.non_finite_rows.end());
  t.non_finite_rows.erase(std::unique(t.non_finite_rows.begin(), t.non_finite_rows.end()), t.non_finite_rows.end());
}

// The exact attention of what `model` computes with: of its quantised inputs for fp8 models
// (with `seen` set to them), else nullopt (the target is exact attention itself).
std::optional<AttentionOutputs> quantised_target(const ModelHandle& model, const AttentionInputs& in,
                                                 std::uint64_t seed, std::optional<AttentionInputs>& seen) {
  RunOptions opt;
  opt.seed = seed;
  seen = inputs_as_quantised(*model.recipe, in, opt);
  if (!seen) return std::nullopt;
  return exact_attention(*seen);
}

}  // namespace

TrialErrors measure_errors(const ModelHandle& model, const AttentionInputs& in, std::uint64_t seed, bool trace_events) {
  RunOptions opt;
  opt.seed = seed;
  Tracer tracer;
  // A split-KV run (+splitkv, or flex-decoding under a causal mask) traces no row (the engine
  // refuses it): its event counts stay 0.
  const bool split_run = model.recipe->splitkv.enabled || (model.recipe->flex_decode_sms > 0 && in.causal);
  if (trace_events && model.recipe->structure == Structure::online_softmax && !split_run) {
    for (int r = 0; r < std::min(kTracedRows, in.q.rows); ++r) tracer.rows.push_back({0, 0, r});
    opt.tracer = &tracer;
  }
  const AttentionOutputs got = run_attention(model, in, opt);
  const AttentionOutputs want = exact_attention(in);
  std::optional<AttentionInputs> seen;
  const std::optional<AttentionOutputs> quantised = quantised_target(model, in, seed, seen);
  const AttentionOutputs& target = quantised ? *quantised : want;
  TrialErrors t;
  // One set of units (at the exact values of the inputs given) for every series, so that the
  // excess kernel - floor is the same whichever target the two are measured against.
  const ErrorUnits units = error_units(model.recipe->output, in, want);
  const auto o_unit = [&](std::size_t i) { return units.o[i]; };
  t.o_ulps = errors_in(got.o.data, want.o.data, o_unit);
  t.o_kernel_ulps = quantised ? errors_in(got.o.data, target.o.data, o_unit) : t.o_ulps;
  t.o_target_sign = signs_of(target.o.data);
  if (quantised) t.o_quant_ulps = errors_in(target.o.data, want.o.data, o_unit);
  if (got.delta && want.delta && in.d_o) {
    const auto d_unit = [&](std::size_t i) { return units.delta[i]; };
    t.delta_ulps = errors_in(got.delta->data, want.delta->data, d_unit);
    t.delta_kernel_ulps = quantised ? errors_in(got.delta->data, target.delta->data, d_unit) : t.delta_ulps;
    t.delta_target_sign = signs_of(target.delta->data);
    if (quantised) t.delta_quant_ulps = errors_in(target.delta->data, want.delta->data, d_unit);
  }
  add_non_finite(t, got);
  // The floor: the reference rounded to nearest even where the model keeps its outputs
  // (correctly_rounded_reference), on the same inputs and seed, against the same target.
  ReferenceErrors cr =
      reference_errors(correctly_rounded_reference(*model.recipe), seen ? *seen : in, target, units, seed);
  t.o_cr_ulps = std::move(cr.o_ulps);
  if (!t.delta_ulps.empty()) t.delta_cr_ulps = std::move(cr.delta_ulps);
  t.row_max = want.row_max->data;
  for (const RowTrace& row : tracer.traces)
    for (const TileRecord& tile : row.tiles) {
      t.significand_overflows += tile.significand_overflows;
      t.ties += tile.ties;
      t.rounded_up += tile.rounded_up;
      t.rounded_down += tile.rounded_down;
    }
  return t;
}

TrialErrors measure_paired(const ModelHandle& model, const ModelHandle& against, const AttentionInputs& in,
                           std::uint64_t seed) {
  if (std::string(model.recipe->input.name) != against.recipe->input.name ||
      std::string(model.recipe->output.name) != against.recipe->output.name)
    throw std::invalid_argument("--against " + against.name + ": takes " + against.recipe->input.name + " -> " +
                                against.recipe->output.name + ", but " + model.name + " takes " +
                                model.recipe->input.name + " -> " + model.recipe->output.name);
  RunOptions opt;
  opt.seed = seed;
  const AttentionOutputs a = run_attention(model, in, opt);
  const AttentionOutputs b = run_attention(against, in, opt);
  const AttentionOutputs want = exact_attention(in);
  // One target for both kernels: the exact attention of the quantised inputs only when A and
  // B quantise to the same values (that share is then measured apart); otherwise exact
  // attention itself, each kernel's quantisation counted in its error. Measuring a bf16 B
  // against an fp8 A's quantised inputs charged B with A's quantisation.
  // The quantised inputs are compared first, so that their exact attention runs once, and
  // only when it is the target.
  const std::optional<AttentionInputs> seen = inputs_as_quantised(*model.recipe, in, opt);
  const std::optional<AttentionInputs> seen_by_b = inputs_as_quantised(*against.recipe, in, opt);
  const auto same_values = [](const AttentionInputs& x, const AttentionInputs& y) {
    return x.q.data == y.q.data && x.k.data == y.k.data && x.v.data == y.v.data && x.softmax_scale == y.softmax_scale &&
           x.d_o.has_value() == y.d_o.has_value() && (!x.d_o || x.d_o->data == y.d_o->data);
  };
  const std::optional<AttentionOutputs> quantised =
      seen && seen_by_b && same_values(*seen, *seen_by_b) ? std::optional(exact_attention(*seen)) : std::nullopt;
  const AttentionOutputs& target = quantised ? *quantised : want;
  const ErrorUnits units = error_units(model.recipe->output, in, want);
  const auto o_unit = [&](std::size_t i) { return units.o[i]; };
  TrialErrors t;
  t.o_ulps = errors_in(a.o.data, want.o.data, o_unit);
  t.o_kernel_ulps = errors_in(a.o.data, target.o.data, o_unit);
  t.o_cr_ulps = errors_in(b.o.data, target.o.data, o_unit);
  t.o_target_sign = signs_of(target.o.data);
  if (quantised) t.o_quant_ulps = errors_in(target.o.data, want.o.data, o_unit);
  if (a.delta && b.delta && want.delta && in.d_o) {
    const auto d_unit = [&](std::size_t i) { return units.delta[i]; };
    t.delta_ulps = errors_in(a.delta->data, want.delta->data, d_unit);
    t.delta_kernel_ulps = errors_in(a.delta->data, target.delta->data, d_unit);
    t.delta_cr_ulps = errors_in(b.delta->data, target.delta->data, d_unit);
    t.delta_target_sign = signs_of(target.delta->data);
    if (quantised) t.delta_quant_ulps = errors_in(target.delta->data, want.delta->data, d_unit);
  }
  add_non_finite(t, a);
  add_non_finite(t, b);
  t.row_max = want.row_max->data;
  return t;
}

std::uint64_t trial_seed(std::uint64_t seed, const std::string& scenario, std::uint64_t trial) {
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a of the scenario's name
  for (unsigned char c : scenario) h = (h ^ c) * 0x100000001b3ull;
  return mix64(mix64(seed ^ 0x6a09e667f3bcc909ull) + mix64(h) + trial * 0x9e3779b97f4a7c15ull);
}

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

double outward_mean(const std::vector<double>& errors, const std::vector<double>& sign) {
  double s = 0;
  for (std::size_t i = 0; i < errors.size(); ++i) s += sign[i] * errors[i];
  return errors.empty() ? 0.0 : s / static_cast<double>(errors.size());
}

double sign_of(double v) { return v > 0 ? 1.0 : v < 0 ? -1.0 : 0.0; }

std::vector<double> signs_of(const std::vector<double>& v) {
  std::vector<double> s(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) s[i] = sign_of(v[i]);
  return s;
}

BiasStatistics ErrorMoments::statistics(long long n, double alpha) const {
  return summarize_sums(static_cast<std::size_t>(std::max(n, 0LL)), sum, sumsq, static_cast<std::size_t>(pos),
                        static_cast<std::size_t>(neg), alpha);
}

}  // namespace fb::attn
