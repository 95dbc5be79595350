// studies/measure.hpp: signed errors of a kernel model's outputs against exact attention,
// in ulps, per trial; what sweep, bias-test, replay, demo and the Python module measure with.
//
// Contract:
// - measure_errors() runs one kernel model on given inputs and returns the signed errors
//   (against exact_attention; O in ulps of the output format at the exact value, delta in
//   reduction ulps, see delta_units) of O and delta, the correctly rounded reference's
//   errors on the same inputs, and the P·V rounding-event counts the Tracer records for
//   the first kTracedRows rows (tiled models only; materialised models record none and the
//   counts read 0).
// - measure_paired() is the paired difference of two models on the same inputs and seed,
//   both against one target: the exact attention of their quantised inputs when both
//   quantise to the same values (fp8 A and B alike), else exact attention itself.
// - ErrorMoments holds the sufficient statistics of per-trial mean errors (Σx, Σx², sign
//   counts) so that runs cut into shards merge exactly; the trial count is kept by the
//   owner (several moments share it).
// Errors reported to users (bad inputs) are std::invalid_argument: the CLI and the Python
// module report them as bad input (exit 2, ValueError), the same as their own InputError.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "attention/attention.hpp"
#include "studies/statistics.hpp"

namespace fb::attn {

// measure_errors(trace_events = true) traces this many rows of every trial: enough for the
// event counts to show a pattern, few enough not to slow a sweep down.
inline constexpr int kTracedRows = 8;

// delta's error unit. delta = Σ_c dO_c·O_c is computed from O already rounded to the
// output format (bf16/fp16), so its error is of the size of that format's ulps, not
// fp32's; and the exact value can cancel to near zero while the rounding errors scale
// with Σ|dO_c·O_c|. So delta errors are in ulps of the OUTPUT format at
// max(|exact delta|, Σ_c |dO_c·O_c|) with O the exact output ("reduction ulps"), which
// stays meaningful for cancelled rows and for fp32 delta buffers alike.
// Returns that unit for every row of d_o (same shape as o_exact).
std::vector<double> delta_units(const Format& output_format, const Tensor4& d_o, const Tensor4& o_exact,
                                const Tensor4& delta_exact);

// Every error below is in error_units of the model's output format.
struct TrialErrors {
  std::vector<double> o_ulps;      // per element of O (signed), against exact attention
  std::vector<double> delta_ulps;  // per row (signed); empty without a backward
  // The kernel's own arithmetic: its error against the exact attention of what it was given
  // (the "target"). For fp8 kernels that is the exact attention of the quantised inputs with
  // their descales (inputs_as_quantised); for every other model the target is exact
  // attention itself and these equal o_ulps and delta_ulps. In the target's units.
  std::vector<double> o_kernel_ulps, delta_kernel_ulps;
  // fp8 kernels: the input quantisation's own error, target against exact (empty otherwise).
  std::vector<double> o_quant_ulps, delta_quant_ulps;
  // The floor on the same inputs, against the same target and in the same units as
  // o_kernel_ulps: the correctly rounded reference (reference_errors; measure_errors), or the
  // --against model (measure_paired). The excess, the kernel's own share, is kernel - floor.
  std::vector<double> o_cr_ulps, delta_cr_ulps;
  // The sign (+1, -1, or 0 for an exact zero) of the target's value, per element of O and per
  // row of delta: sign x error is the error's component away from zero (outward_mean), the
  // magnitude error a rounding toward zero shows on outputs of either sign.
  std::vector<double> o_target_sign, delta_target_sign;
  std::vector<double> row_max;  // per row: its exact max scaled score (exact_attention's row_max)
  // Rows (index b·H·N + h·N + r) where the model's O or delta is NaN or infinite although
  // the inputs are finite: no error of such a row means anything (bias-test reports them
  // and gives no verdict). Their errors are left in o_ulps/delta_ulps (non-finite).
  std::vector<std::size_t> non_finite_rows;
  long long significand_overflows = 0, ties = 0, rounded_up = 0, rounded_down = 0;
};
// The units bias-test and sweep measure errors in (docs/DESIGN.md §13): per element of O,
// one ulp of the output format at max(|O_exact|, Σ_j P_ij·|V_jc|), the scale of P·V's
// rounding errors (an O that cancels to near zero would otherwise turn a rounding error of
// the terms' size into thousands of ulps at the tiny exact value, and its heavy tail would
// swamp every mean); per row of delta, delta_units. `exact` = exact_attention(in).
struct ErrorUnits {
  std::vector<double> o, delta;  // delta empty without in.d_o
};
ErrorUnits error_units(const Format& output_format, const AttentionInputs& in, const AttentionOutputs& exact);

// The correctly rounded reference's errors: the model `correctly-rounded` (attention.hpp
// round_exact_outputs: the best any kernel with this output format can do) run on the same
// inputs from `exact` (= exact_attention(in)), in `reference`'s final-cast mode: for a floor,
// correctly_rounded_reference(model), to nearest even where the model keeps its outputs (sr,
// keyed by `seed`, only where a correctly-rounded+o-sr model is passed as itself).
// Errors against the exact values, in `units`. The part of a kernel's error that is its own
// is its error minus this one, element by element on the same inputs (bias-test's and
// sweep's "excess").
struct ReferenceErrors {
  std::vector<double> o_ulps, delta_ulps;
};
ReferenceErrors reference_errors(const ModelHandle& reference, const AttentionInputs& in, const AttentionOutputs& exact,
                                 const ErrorUnits& units, std::uint64_t seed = 0);
// The same with RNE into `output_format` (captured traces: every kernel's final cast is RNE).
ReferenceErrors correctly_rounded_errors(const Format& output_format, const AttentionInputs& in,
                                         const AttentionOutputs& exact, const ErrorUnits& units);
// Rows (b·H·N + h·N + r) of `t` ([B,H,N,cols]) holding a NaN or an infinity.
std::vector<std::size_t> non_finite_rows(const Tensor4& t);
// "[b,h,r], ..." for at most `limit` of `rows` (indices into a [B,H,N] grid), then "and K more".
std::string describe_rows(const std::vector<std::size_t>& rows, int heads, int seqlen, std::size_t limit = 8);
// Refuses inputs on which no error statistic can mean anything (std::invalid_argument): a
// batch, head count, sequence length or head dim of 0, or a NaN or infinity in q, k, v or
// dO. The message names `source` (a file) and the tensor and rows ([b,h,r]) holding them.
void check_inputs_support_statistics(const AttentionInputs& in, const std::string& source);
// in.d_o present => delta errors are measured too. The floor (o_cr_ulps) is
// correctly_rounded_reference(model): rounded where the model keeps its outputs.
TrialErrors measure_errors(const ModelHandle& model, const AttentionInputs& in, std::uint64_t seed, bool trace_events);
// Two models on the SAME inputs and seed (bias-test --against): the floor is `against`, so
// the excess is what `model` changes relative to it (say, a truncating accumulator against
// one promoted to fp32), with the input noise both share cancelled. o_kernel_ulps and
// o_cr_ulps are the two models' errors against model's target; their difference is the
// paired difference. Both models must take the same input dtype and give the same output
// format (else std::invalid_argument).
TrialErrors measure_paired(const ModelHandle& model, const ModelHandle& against, const AttentionInputs& in,
                           std::uint64_t seed);
// Counter-based seed of one trial: independent of threads and shards. `scenario` is the
// scenario's name alone, never a model's: every model of a bias-test, sweep or --against
// comparison sees the same inputs in trial t (rounded to its input dtype), so their results
// pair element by element.
std::uint64_t trial_seed(std::uint64_t seed, const std::string& scenario, std::uint64_t trial);
// The mean of `v` (0 for an empty vector): a trial's sample is the mean of its errors.
double mean_of(const std::vector<double>& v);
// The mean of sign[i] x errors[i] (0 for empty vectors): the magnitude error, > 0 where the
// outputs come out larger in magnitude than the target, < 0 where they shrink toward zero.
// A signed mean cannot see a toward-zero rounding on outputs symmetric in sign (the downward
// errors of the positive outputs cancel the upward ones of the negative); this mean does.
double outward_mean(const std::vector<double>& errors, const std::vector<double>& sign);
// The sign of v as +1, -1 or 0 (NaN: 0).
double sign_of(double v);
// sign_of every element of v.
std::vector<double> signs_of(const std::vector<double>& v);

// Sufficient statistics of per-trial samples: only these survive sharding, and from them
// (with the trial count n, kept by the owner) the bias statistics follow exactly.
struct ErrorMoments {
  double sum = 0, sumsq = 0;
  long long pos = 0, neg = 0;  // samples > 0 and < 0 (zeros count in neither)

  void add(double sample) {
    sum += sample;
    sumsq += sample * sample;
    pos += sample > 0;
    neg += sample < 0;
  }
  void merge(const ErrorMoments& other) {
    sum += other.sum;
    sumsq += other.sumsq;
    pos += other.pos;
    neg += other.neg;
  }
  double mean(long long n) const { return n > 0 ? sum / static_cast<double>(n) : 0.0; }
  // statistics.hpp's summarize_moments from (n, Σx, Σx²): the variance is Σx² - n·mean²
  // (merge has no per-trial vectors), otherwise the same formulas as summarize().
  BiasStatistics statistics(long long n, double alpha) const;
};

}  // namespace fb::attn
