// attention/attention.hpp: the public interface of the attention engine.
//
// Contract:
// - Tensors are [batch][head][row][col], row-major, holding exact values as double
//   (every value of every format of at most 32 bits is exact in fp64).
// - q has N query rows, k and v Nk key rows; Nk may differ from N (decoding with a KV cache,
//   cross-attention). A causal mask is aligned bottom-right as FA2 >= 2.1 aligns it: query
//   row i sees keys j <= i + Nk - N, so a row above the corner (i < N - Nk) sees none and gets
//   every model's all-masked guards (O = 0, zero gradients, and the LSE its source writes:
//   empty_row_lse in kernel_models.hpp, +inf for FA2, -inf for FA3, FA4, CK and Triton's
//   kernels). N == Nk is ordinary
//   causal self-attention. AttentionInputs::causal_alignment top_left instead aligns it to the
//   top-left corner (row i sees keys j <= i: PyTorch's is_causal, FA2 before 2.1), for captures
//   that used it; the same mask when N == Nk.
// - A KernelModel is a documented recipe (attention/kernel_models.cpp holds the one
//   table): for every stage it names the format, rounding, accumulation model,
//   special-function model and operation order. Variants (+dynmax, +delta-dpp,
//   +o-fp32, +o-sr) are parameters of the same steps, not forks of the loop.
// - run_attention() computes the forward (O, LSE) and, when inputs.d_o is present, the
//   backward (delta, dQ, dK, dV) exactly as the recipe's kernel would, deterministically:
//   the result does not depend on `threads`.
// - exact_attention() computes the same mathematics in high precision (the reference
//   errors are measured against).
// - A Tracer, when given, records the per-row, per-tile story of the chosen rows; with
//   no tracer nothing is recorded and nothing is paid.
#pragma once

#include <cstdint>
#include <array>
#include <atomic>
#include <stdexcept>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "emu/rounding.hpp"
#include "emu/dot/tensor_core.hpp"
#include "formats/format.hpp"

namespace fb::attn {

struct Tensor4 {
  int batch = 0, heads = 0, rows = 0, cols = 0;
  std::vector<double> data;

  Tensor4() = default;
  Tensor4(int b, int h, int n, int d)
      : batch(b), heads(h), rows(n), cols(d), data(static_cast<std::size_t>(b) * h * n * d, 0.0) {}
  std::size_t index(int b, int h, int r, int c) const {
    return ((static_cast<std::size_t>(b) * heads + h) * rows + r) * cols + c;
  }
  double& at(int b, int h, int r, int c) { return data[index(b, h, r, c)]; }
  double at(int b, int h, int r, int c) const { return data[index(b, h, r, c)]; }
  const double* row(int b, int h, int r) const { return data.data() + index(b, h, r, 0); }
  double* row(int b, int h, int r) { return data.data() + index(b, h, r, 0); }
};

struct AttentionInputs {
  Tensor4 q, k, v;               // values exactly representable in `dtype`
  std::optional<Tensor4> d_o;    // upstream gradient; when present the backward runs
  Format dtype = formats::bf16;  // input/output dtype of the kernel (bf16 or fp16, e4m3 for fp8)
  double softmax_scale = 0.0;    // 0 means 1/sqrt(head dim)
  bool causal = false;
  // Where a causal mask's diagonal starts when the lengths differ (the contract above).
  enum class CausalAlignment { bottom_right, top_left };
  CausalAlignment causal_alignment = CausalAlignment::bottom_right;
};

// A run's shape, as unmeasured_shape_notes and unmodelled_shape (kernel_models.hpp) read it.
struct RunShape {
  int batch = 1, heads = 1, kv_heads = 1, query_rows = 0, keys = 0, head_dim = 0;
  bool causal = false, backward = false;
};
inline RunShape run_shape(const AttentionInputs& in) {
  return RunShape{in.q.batch, in.q.heads, in.k.heads, in.q.rows, in.k.rows, in.q.cols, in.causal, in.d_o.has_value()};
}

// What a forward leaves for its backward beyond O and LSE (O before its final cast, each
// row's softmax statistics), with what identifies the run it came from. Opaque: only
// run_attention reads it (RunOptions::keep_forward_state, RunOptions::forward_state).
struct ForwardState;

struct AttentionOutputs {
  Tensor4 o;                          // [b][h][n][d], values of the output dtype (n: q's rows)
  Tensor4 lse;                        // [b][h][n][1], fp32 values (natural log)
  std::optional<Tensor4> delta;       // [b][h][n][1]
  std::optional<Tensor4> dq, dk, dv;  // dq like q; dk, dv like k ([b][hk][nk][d])
  // FA2-structured backwards: dQ in fp32 before its cast (dq_accum * softmax_scale), as
  // fb-fa2 records it (dq_accum); empty for other models.
  std::optional<Tensor4> dq_pre_cast;
  // Models whose kernel keeps its LSE in log2 units (Triton: M = m + log2(ℓ), what its backward
  // reads; `lse` is then fp32(M·ln 2)): M as the kernel stores it ([b][h][n][1], fp32 values;
  // +inf for a row that saw no key). Empty for other models.
  std::optional<Tensor4> lse_log2;
  // exact_attention() only: each row's exact max scaled score over its visible keys
  // ([b][h][n][1]; -inf when none is visible). run_attention() leaves it empty.
  std::optional<Tensor4> row_max;
  // exact_attention() only: each row's max over its visible keys of scale * sum_c |q_c k_c|
  // ([b][h][n][1], rounded up), the magnitude that bounds its scores' rounding errors
  // (attention/exact_rounding.hpp). run_attention() leaves it empty.
  std::optional<Tensor4> row_score_magnitude;
  // exact_attention() with a backward only: a rigorous bound on the absolute error of each
  // dq, dk and dv element it returns (attention/exact_rounding.hpp decides the correctly
  // rounded gradients from them). run_attention() leaves it empty.
  struct GradientErrorBounds {
    Tensor4 dq, dk, dv;
  };
  std::optional<GradientErrorBounds> gradient_error_bound;
  // RunOptions::keep_forward_state only: the forward's state, for a backward run alone.
  std::shared_ptr<const ForwardState> forward_state;
};

// A parsed kernel model name: base recipe plus variant suffixes, e.g.
// "fa2-sm90+dynmax:beta=2,tol=1e-3". Throws std::invalid_argument naming the bad part.
struct KernelModel;  // defined in attention/kernel_models.hpp
struct ModelHandle {
  std::string name;  // canonical name, as printed in reports
  std::shared_ptr<const KernelModel> recipe;
};
ModelHandle parse_kernel_model(std::string_view name, const Format& dtype);
// One entry per base model and per variant, for `flashbits models`: what it computes and
// where each fact comes from (`sources` is empty for the variant suffixes, whose facts are
// in their description).
struct KernelModelDescription {
  std::string name, description, sources;
};
std::vector<KernelModelDescription> describe_kernel_models();

// ---- tracing ------------------------------------------------------------------------
struct TileRecord {
  int kv_tile = 0;               // tile index in visiting order
  int kv_begin = 0, kv_end = 0;  // key range
  double running_max = 0.0;      // m after this tile (the kernel's units)
  double running_sum = 0.0;      // l after this tile
  int p_equal_one = 0;           // count of P̄ == 1 exactly in this tile
  int repeated_max = 0;          // entries tied with the tile's row max (beyond the first)
  // P·V accumulation of this tile (over all features of the row)
  int significand_overflows = 0, ties = 0, rounded_up = 0, rounded_down = 0;
  double pv_signed_error = 0.0;  // signed error contributed by roundings in this tile (value units)
  // The kernel's own state after this tile, as an instrumented kernel records it (fb-fa2's
  // trace_l_partial, trace_p, trace_acc_o):
  std::array<double, 4> thread_sums{};  // quad row sums: each thread's partial ℓ (0 otherwise)
  std::vector<double> p;                // P̄ of keys kv_begin..kv_end-1, before its cast
  std::vector<double> acc;              // the O accumulator (every feature) after the tile's P·V
};
struct RowTrace {
  int batch = 0, head = 0, row = 0;
  std::vector<TileRecord> tiles;
  // Final cast of O: per feature, the rounding events' direction and error in ulps.
  std::vector<RoundingEvent> o_cast;
  // Cumulative rounding error of Ō (unnormalised) along the key index, for one feature.
  int plot_feature = 0;
  std::vector<double> cumulative_error_by_key;
  std::vector<int> p_equal_one_keys;
  // Key index of each entry of cumulative_error_by_key (the kernel's visiting order:
  // last to first for FA2), so plots can be drawn along either axis.
  // (cumulative_error_by_key: the signed error, in value units, of Ō after each P·V
  // accumulation step for plot_feature, against the exact sum of the same rounded P̄
  // and V with the same rescalings; one entry per key of the step.)
  std::vector<int> key_order;
  // Every rounding event of the P·V accumulation for plot_feature, in order: the fused
  // steps of MMA models (acc_o as C), or for bf16-accumulator models two RoundingEvents
  // per tile (the rounding of P̄V, then of the accumulator update).
  std::vector<DotStepEvent> pv_dot_steps;
  std::vector<RoundingEvent> pv_buffer_events;
  // delta error decomposition (value units), against Σ dO·O_pre where O_pre is the
  // kernel's own value of O before its final cast: from the rounding of O, and from
  // the reduction.
  double delta_error_from_o = 0.0, delta_error_from_reduction = 0.0;
};
// Materialised models (standard-*, golden-*-baseline) have no KV tiles: their traced
// rows record only the delta decomposition. The tracer needs the hardware arithmetic.
struct Tracer {
  std::vector<std::array<int, 3>> rows;  // (batch, head, row) to trace; empty = none
  int plot_feature = 0;
  std::vector<RowTrace> traces;  // filled by run_attention, in `rows` order
};

// An upper bound, in bytes, on what a Tracer keeps for one traced row of a run of `km` on
// seqlen_q query rows, seqlen_k keys and head_dim features (the RowTrace and the capacity of
// each of its vectors: every tile's P̄ and accumulator, the plot feature's step events and
// per-key errors). block_n is RunOptions::block_n (0: the recipe's tiles). It grows with
// seqlen_k, so tracing every row of a head grows with seqlen_q x seqlen_k; the faces refuse
// a tracer over attention/problem_limits.hpp's trace_size_refusal before they run it.
std::uint64_t traced_row_bytes_bound(const KernelModel& km, int seqlen_q, int seqlen_k, int head_dim, bool causal,
                                     int block_n = 0);

// Why a Tracer records no per-tile story of the rows of `model` run on `in` (empty: it does):
// a materialised model has no KV tiles (its traced rows hold only the delta decomposition),
// and run_attention refuses a tracer for a split-KV run of more than one split and for a split
// flex decode. The one statement of those limits, for run_attention and for the faces that
// trace (demo shows the mechanism only where a row's tiles can be traced). No "attention: "
// prefix: the caller names its context.
std::string untraced_tiles_reason(const ModelHandle& model, const AttentionInputs& in);

// Why `scale` (the softmax scale the run applies) cannot be one of model `model_name`'s runs
// (empty: it can). A kernel that computes scores in a format of fp32's exponent range takes
// the scale as a float (FlashAttention's `float softmax_scale`, the Triton kernels' fp32
// constants): above fp32's largest value it would be inf there and every output NaN, and below
// half fp32's smallest subnormal it would be 0 and every row a uniform average, answers to no
// question the caller asked. The standard-FMT recipes with narrower score formats apply the
// scale as a tensor op of their own and take any. run_attention refuses such a run, and
// check_replayable such a trace, before import writes it. No "attention: " prefix.
std::string softmax_scale_refusal(const std::string& model_name, const KernelModel& km, double scale);
// The softmax scale a run of `in` applies: in.softmax_scale where it is set (> 0), else
// 1/sqrt(head dim) (1 for a head dim of 0, which check_attention_inputs refuses).
double applied_softmax_scale(const AttentionInputs& in);

// Thrown by run_attention when RunOptions::cancel is set while it runs.
struct Cancelled : std::runtime_error {
  Cancelled() : std::runtime_error("attention run cancelled") {}
};

struct RunOptions {
  int threads = 1;
  // Set from another thread to stop a run early (the Python module's Ctrl-C): checked before
  // every forward row and every backward row's delta, and before each head's backward
  // kernel; run_attention then throws Cancelled. Null = never cancelled. The correctly-
  // rounded reference (exact_attention) does not check it.
  const std::atomic<bool>* cancel = nullptr;
  std::uint64_t seed = 0;  // stochastic rounding stream (+o-sr, sr modes)
  Tracer* tracer = nullptr;
  // Tile sizes; 0 = the recipe's default for this head dim. At most tile_size_refusal's
  // limits (attention/problem_limits.hpp): run_attention throws std::invalid_argument beyond.
  int block_m = 0, block_n = 0;
  // Run the recipe's order of operations with every rounding replaced by the identity
  // and special functions by libm (fp64): for checking tiling and ordering.
  bool exact_arithmetic = false;
  // For a progress display: advanced by 1 per forward row and by the row count per head's
  // backward, from any thread (total: batch·heads·rows, doubled when the inputs carry dO);
  // null = not counted. Results never depend on it.
  std::atomic<std::uint64_t>* progress = nullptr;
  // Forward only these rows, (batch, head, row); empty = every row. A forward row of every
  // structure depends only on its own query row and all keys, so the rows computed are
  // exactly those of a full run. The rows left out hold 0 in O and LSE; with dO, delta is
  // computed for the listed rows only (0 elsewhere) and dQ, dK, dV (which need every row)
  // are absent. Traced rows (tracer) are computed as if listed. Rows outside the problem:
  // std::invalid_argument. Progress counts the rows computed (1 per forward row, 1 per delta).
  // The correctly-rounded model (one rounding of exact_attention) ignores it: every row.
  std::vector<std::array<int, 3>> only_rows;
  // keep_forward_state: the outputs also carry the forward's state (AttentionOutputs::
  // forward_state; null for the correctly-rounded model, which has no forward of its own).
  bool keep_forward_state = false;
  // Run the backward alone from a kept state, as a training step's backward runs from what
  // its forward saved: O, LSE, delta, dQ, dK, dV are bit for bit those of one run with the
  // forward. The inputs must carry dO and be the kept run's (q, k, v, dtype, scale, causal and
  // its alignment) under the same model and options (seed, tiles, exact_arithmetic): the
  // engine checks each (the inputs by a hash of their values) and throws
  // std::invalid_argument naming the first that differs. Not with only_rows or a tracer (a
  // traced row's record is the forward's). Null: the forward runs as usual. Progress counts
  // the kept forward's rows as done at the start.
  std::shared_ptr<const ForwardState> forward_state;
};

AttentionOutputs run_attention(const ModelHandle& model, const AttentionInputs& in, const RunOptions& opt);
// What an fp8 kernel model computes with: its quantised Q, K, V (incoherent processing and
// scales as run_attention applies them, for opt's seed and block sizes) times their
// descales, exactly. exact_attention() of these is the exact attention of the quantised
// inputs, against which the kernel's own arithmetic is measured apart from the
// quantisation. nullopt for models that do not quantise their inputs.
std::optional<AttentionInputs> inputs_as_quantised(const KernelModel& km, const AttentionInputs& in,
                                                   const RunOptions& opt);
// The largest head dim the engine models: FlashAttention's kernels stop at 256 (their tile
// tables end there), and exact_attention's error bound is argued for d <= 256 (exact.cpp).
// The CLI checks --headdim against it as it parses the options (tools/cli_common.hpp).
inline constexpr int kMaxHeadDim = 256;
// The shapes every run accepts (std::invalid_argument naming the rule otherwise): q, k, v
// share batch and head dim (head dim at most kMaxHeadDim); k and v share their length Nk
// (any, q's length N or not) and their heads, which divide q's (grouped-query attention: q head
// h reads k/v head h / (H/Hk); dK and dV then have k's heads and length); dO has q's shape.
void check_attention_inputs(const AttentionInputs& in);
// delta for one row as the model's backward computes it from a given O and dO (its
// DeltaFormula, in its order and formats); nullopt for models whose delta needs dP∘P.
// Used to measure the delta a kernel would have computed from a captured O.
std::optional<double> kernel_delta(const ModelHandle& model, const double* d_o, const double* o, int d);
// High-precision reference of the same mathematics (forward and, with d_o, backward).
AttentionOutputs exact_attention(const AttentionInputs& in);

// ---- the correctly rounded reference (model `correctly-rounded`) -----------------------
// A KernelModel whose structure is Structure::correctly_rounded: exact_attention(), then ONE
// rounding of each output in km.o_round (sr: km.o_sr_bits random bits keyed by opt.seed and
// the element, as +o-sr): O, dQ, dK, dV into km.output, LSE into fp32 (+inf stays +inf),
// delta = Σ dO·O of the rounded O, summed exactly (emu ExactAccumulator) and rounded once into
// fp32, as a kernel computes delta from its stored O. run_attention() dispatches such a model
// here; this entry takes `exact` (exact_attention(in), whose row_max and row_score_magnitude
// it reads) already computed. A tracer's rows get their coordinates, the final cast's
// rounding events and delta's decomposition (no tiles). Every output is correctly rounded,
// also where the long-double value cannot decide (attention/exact_rounding.hpp: exact ties
// and gradients that cancel to 0 included).
AttentionOutputs round_exact_outputs(const KernelModel& km, const AttentionInputs& in, const AttentionOutputs& exact,
                                     const RunOptions& opt);
// The reference's delta of one row from a given O (values of km.output) and dO, rounded once
// into fp32 in km.o_round (sr: keyed by seed and position).
double correctly_rounded_delta(const KernelModel& km, const double* d_o, const double* o, int d, std::uint64_t seed,
                               std::uint64_t position);
// The reference a model's errors are measured against, its floor: `correctly-rounded` with the
// model's input and output formats, every output rounded once to nearest even where the model
// keeps it (below), whatever the model's final cast: a +o-MODE cast is the kernel's choice and
// its bias counts as added (an rtz O's error toward zero is not a floor). The
// reference of `correctly-rounded` itself is that model, so its excess is 0; that of
// `correctly-rounded+o-MODE` is the RNE one, whose difference is MODE's own bias.
ModelHandle correctly_rounded_reference(const KernelModel& like);

}  // namespace fb::attn
