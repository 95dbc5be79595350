// tools/sweep_table.hpp: what `flashbits sweep`, `merge` and `bias-test` share.
//
// Contract:
// - measure_trial() runs one kernel model on one seeded scenario and returns the
//   signed errors (against exact_attention; O in ulps of the output format at the exact
//   value, delta in reduction ulps, see delta_units) of O and delta, plus the P·V rounding-event counts the Tracer
//   records for the first kTracedRows rows (tiled models only; materialised models
//   record none and the counts read 0).
// - SweepRow holds a configuration and SUFFICIENT statistics only (n, sums, sums of
//   squares, sign counts, max, counts), for three statistics per output (O, delta): the
//   error against exact, the correctly rounded reference's error on the same inputs, and
//   the excess (error minus reference, per trial). Every derived column (means, RMS,
//   verdict: from the excess, or from the paired difference for A-vs-B rows) is computed
//   from them by derive(), so a merged set of shard rows renders byte for byte as the
//   unsharded run did (configurations are never split across shards).
// - The per-trial bias statistics are computed from the sums (stats_from_sums), the
//   same formulas as attention/statistics.cpp's summarize() but from (n, Σx, Σx²):
//   merge has no per-trial vectors.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "attention/attention.hpp"
#include "attention/statistics.hpp"
#include "traces/trace.hpp"

namespace fb::cli {

inline constexpr int kTracedRows = 8;


// delta's error unit. delta = Σ_c dO_c·O_c is computed from O already rounded to the
// output format (bf16/fp16), so its error is of the size of that format's ulps, not
// fp32's; and the exact value can cancel to near zero while the rounding errors scale
// with Σ|dO_c·O_c|. So delta errors are in ulps of the OUTPUT format at
// max(|exact delta|, Σ_c |dO_c·O_c|) with O the exact output ("reduction ulps"), which
// stays meaningful for cancelled rows and for fp32 delta buffers alike.
// Returns that unit for every row of d_o (same shape as o_exact).
std::vector<double> delta_units(const Format& output_format, const attn::Tensor4& d_o, const attn::Tensor4& o_exact,
                                const attn::Tensor4& delta_exact);

struct TrialErrors {
  std::vector<double> o_ulps;      // per element of O (signed)
  std::vector<double> delta_ulps;  // per row (signed); empty without a backward
  // The correctly rounded reference on the same inputs (reference_errors), in the same
  // units; filled by measure_errors, empty for paired measurements.
  std::vector<double> o_cr_ulps, delta_cr_ulps;
  std::vector<double> row_max;     // per row: its exact max scaled score (exact_attention's row_max)
  // Rows (index b·H·N + h·N + r) where the model's O or delta is NaN or infinite although
  // the inputs are finite: no error of such a row means anything (bias-test reports them
  // and gives no verdict). Their errors are left in o_ulps/delta_ulps (non-finite).
  std::vector<std::size_t> non_finite_rows;
  long long significand_overflows = 0, ties = 0, rounded_up = 0, rounded_down = 0;
};
// The correctly rounded reference's errors: the model `correctly-rounded` (attention.hpp
// round_exact_outputs: the best any kernel with this output format can do) run on the same
// inputs from `exact` (= exact_attention(in)), in its final cast's mode (`reference`, e.g.
// attn::correctly_rounded_reference(model) for a model's +o-MODE; sr keyed by `seed`).
// Errors against the exact values, O in ulps of the output format at the exact value,
// delta in delta_units. The part of a kernel's error that is its own is its error minus
// this one, element by element on the same inputs (bias-test's and sweep's "excess").
struct ReferenceErrors {
  std::vector<double> o_ulps, delta_ulps;
};
ReferenceErrors reference_errors(const attn::ModelHandle& reference, const attn::AttentionInputs& in,
                                 const attn::AttentionOutputs& exact, std::uint64_t seed = 0);
// The same with RNE into `output_format` (captured traces: every kernel's final cast is RNE).
ReferenceErrors correctly_rounded_errors(const Format& output_format, const attn::AttentionInputs& in,
                                         const attn::AttentionOutputs& exact);
// Rows (b·H·N + h·N + r) of `t` ([B,H,N,cols]) holding a NaN or an infinity.
std::vector<std::size_t> non_finite_rows(const attn::Tensor4& t);
// "[b,h,r], ..." for at most `limit` of `rows` (indices into a [B,H,N] grid), then "and K more".
std::string describe_rows(const std::vector<std::size_t>& rows, int heads, int seqlen, std::size_t limit = 8);
// Refuses inputs on which no error statistic can mean anything (InputError, exit 2): a batch,
// head count, sequence length or head dim of 0, or a NaN or infinity in q, k, v or dO. The
// message names `source` (a file) and the tensor and rows ([b,h,r]) holding them.
void check_inputs_support_statistics(const attn::AttentionInputs& in, const std::string& source);
// in.d_o present => delta errors are measured too.
TrialErrors measure_errors(const attn::ModelHandle& model, const attn::AttentionInputs& in, std::uint64_t seed,
                           bool trace_events);
// Paired difference of two models on the SAME inputs and seed (bias-test --against):
// what `model` changes relative to `against` (say, a truncating accumulator against one
// promoted to fp32), with the input noise both share cancelled. O differences are in
// ulps of model's output format at max(|O_exact|, Σ_j P_ij·|V_jc|) (the scale of P·V's
// rounding errors, so near-zero outputs do not blow the unit up), delta differences in
// delta_units. Both models must take the same input dtype and give the same output
// format (else std::invalid_argument).
TrialErrors measure_paired(const attn::ModelHandle& model, const attn::ModelHandle& against,
                           const attn::AttentionInputs& in, std::uint64_t seed);
// A kernel model for inputs of `dtype` (--dtype, or a trace's dtype). bf16 and fp16 go to
// attn::parse_kernel_model; any other dtype (fp32) is accepted only by a model that names it
// (standard-fp32, golden-fp32-*; a bare `standard` becomes standard-DTYPE), so that every
// trace make-trace writes can be replayed. std::invalid_argument otherwise, naming both.
attn::ModelHandle parse_model_for_inputs(const std::string& name, const Format& dtype);
// Counter-based seed of one trial: independent of threads and shards.
std::uint64_t trial_seed(std::uint64_t seed, const std::string& configuration, std::uint64_t trial);

// The inputs a trace captured (q, k, v, and dO when present), with its scale, causal flag
// and dtype (metadata dtype, else q's dtype).
attn::AttentionInputs inputs_from_trace(const Trace& trace);
// The SFU models a trace is replayed with. `choice`: "model" keeps the model's own; a set
// name (correct, hw-sm90) replaces the functions the model evaluates; "auto" picks hw-sm90
// (measured on an H200) for a hardware capture from compute capability 9.0 and the model's
// own otherwise. Returns the model to run and sets `note` to a line saying what auto chose
// (empty when nothing was chosen). InputError for an unknown set.
attn::ModelHandle with_capture_sfu(const attn::ModelHandle& model, const Trace& trace, const std::string& choice,
                                   std::string& note);
// Tensor4 of a trace tensor: [B,H,N,D] as is; [B,H,N] as [B,H,N,1].
attn::Tensor4 tensor_from_trace(const Trace& trace, std::string_view name);

struct SweepRow {
  long long index = 0;  // position in the full cartesian product
  std::string format, round, model, scenario;
  int seqlen = 0, headdim = 0;
  // sufficient statistics
  long long trials = 0;
  double o_sum = 0, o_sumsq = 0;  // per-trial mean signed error of O (ulps)
  long long o_pos = 0, o_neg = 0;
  double d_sum = 0, d_sumsq = 0;  // per-trial mean signed error of delta (ulps)
  long long d_pos = 0, d_neg = 0;
  long long elements = 0;
  double sq_sum = 0, max_abs = 0;  // over every element of O (ulps)
  long long sig_overflows = 0, ties = 0, rounded_up = 0, rounded_down = 0;
  // The correctly rounded reference (cr_) and the excess (ex_: error minus the reference's,
  // per trial) in the same units; ref_trials counts the trials that had a reference (0 for
  // paired A-vs-B rows, whose error is already a difference of two kernels).
  long long ref_trials = 0;
  double cr_o_sum = 0, cr_o_sumsq = 0;
  long long cr_o_pos = 0, cr_o_neg = 0;
  double cr_d_sum = 0, cr_d_sumsq = 0;
  long long cr_d_pos = 0, cr_d_neg = 0;
  double ex_o_sum = 0, ex_o_sumsq = 0;
  long long ex_o_pos = 0, ex_o_neg = 0;
  double ex_d_sum = 0, ex_d_sumsq = 0;
  long long ex_d_pos = 0, ex_d_neg = 0;

  void add_trial(const TrialErrors& t);
  // Adds another row's statistics (trials of the same configuration, in trial order).
  void absorb(const SweepRow& other);
  std::string configuration() const;
};

attn::BiasStatistics stats_from_sums(long long n, double sum, double sumsq, long long pos, long long neg,
                                     double alpha);

// What one `flashbits sweep` run (or one shard of it) was: every parameter its rows depend
// on, so that merge can refuse shards that are not one whole run. The CSV carries it as its
// last line, `# run {JSON}` (a truncated file has none), the JSON output as the member "run";
// both hold the same object:
//   {"program": "flashbits sweep", "seed": S, "shard": "K/N", "configurations": C,
//    "trials": T, "formats": "...", "round": "...", "models": "...", "scenarios": "...",
//    "against": "...", "seqlen": N, "headdim": D, "sr_bits": R, "alpha": A}
// `configurations` counts the grid cells of the unsharded run (shard K/N holds those with
// index % N == K - 1); the lists are the options as given. A merged set is shard 1/1.
struct SweepRun {
  std::uint64_t seed = 0;
  int shard_k = 1, shard_n = 1;
  long long configurations = 0;
  long long trials = 0;
  std::string formats, rounds, models, scenarios, against;
  long long seqlen = 0, headdim = 0, sr_bits = 24;
  double alpha = 1e-3;
  std::string shard_text() const { return std::to_string(shard_k) + "/" + std::to_string(shard_n); }
};

void write_table(std::ostream& os, const std::vector<SweepRow>& rows, double alpha);
void write_csv(std::ostream& os, const std::vector<SweepRow>& rows, const SweepRun& run);
void write_json(std::ostream& os, const std::vector<SweepRow>& rows, const SweepRun& run);
// Reads what write_csv / write_json wrote (sniffs the first character); throws
// InputError naming the file, line and column on a defect. `run` is empty when the file
// has no run record (written by an older flashbits, or truncated).
struct SweepFile {
  std::vector<SweepRow> rows;
  std::optional<SweepRun> run;
};
SweepFile read_sweep_file(const std::string& path);
// Checks that `files` (path, contents) are exactly the shards of one sweep run: each has a
// valid run record; every record agrees on every parameter but the shard K (and alpha);
// no shard appears twice and none of 1..N is missing; every row belongs to its shard
// (index < configurations, index % N == K - 1, the run's trials, seqlen and headdim,
// counts within 0..trials). Throws InputError naming the file and what mismatched. Returns
// the merged run (shard 1/1; alpha: `alpha` when given, else the shards' common one).
SweepRun check_shards(const std::vector<std::pair<std::string, SweepFile>>& files, std::optional<double> alpha);
// Renders rows the way sweep does (table on stdout, --csv FILE written whole, --json),
// with run.alpha as the verdict's significance level. Returns kExitCheckFailed (1) when any
// row's verdict is "biased" (as bias-test does), else kExitOk.
int emit_rows(std::vector<SweepRow> rows, const std::string& csv_path, bool json, const SweepRun& run);

}  // namespace fb::cli
