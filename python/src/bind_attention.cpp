// python/src/bind_attention.cpp: attention(), exact_attention() and the models list.
//
// Contract: q, k, v (and do) arrive as [B,H,N,D] arrays (the Python layer adds leading axes)
// of float64 values, each exactly representable in the model's input format, or of that
// format's bit patterns (unsigned integers of its container width): common.hpp operand_bits,
// ValueError naming the first bad element. k and v may have fewer heads than q (GQA) and
// another length Nk (decoding, cross-attention; causal aligns bottom-right, as FA2, or top-left with
// causal_top_left: AttentionInputs::CausalAlignment). The
// problem size, q's [B,H,N,D] and the per-q-head keys [B,H,Nk,D] (the engine's dK, dV per q
// head), is held to the CLI's limits (attention/problem_limits.hpp). The model
// is parsed as the CLI parses --model with --dtype (attention/trace_inputs.hpp
// parse_model_for_inputs), a recipe file applied as `--recipe` does. The run itself
// (attn::run_attention, or exact_attention) happens on a worker thread with the GIL released
// (common.hpp run_interruptible).
#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <utility>

#include "formats/decimal_text.hpp"
#include "attention/attention.hpp"
#include "attention/kernel_models.hpp"
#include "attention/problem_limits.hpp"
#include "studies/statistics.hpp"
#include "common.hpp"
#include "emu/dot/dot_step_json.hpp"
#include "emu/sfu/special_functions.hpp"
#include "api/event_json.hpp"
#include "api/models.hpp"
#include "attention/trace_inputs.hpp"
#include "studies/measure.hpp"
#include "studies/scenarios.hpp"

namespace fb::py {
namespace {

// An input tensor as values of f: bit patterns or exactly representable values (operand_bits,
// naming the first bad element by its 4-D index), decoded exactly.
attn::Tensor4 tensor4(const pyb::object& obj, const Format& f, const char* name) {
  const pyb::array a = pyb::array::ensure(obj);
  if (!a || a.ndim() != 4)
    throw api::InputError(std::string(name) + ": expected a 4-dimensional array [batch, head, row, col]");
  std::vector<std::uint32_t> bits;
  try {
    bits = operand_bits(f, a, name);
  } catch (const api::InputError& e) {
    // Values of another format given under the default dtype (an fp16 capture's q with bf16
    // assumed): rounding them to f, as the generic advice says, would run other inputs than
    // the kernel's. Where every value is one of another format's, the advice names that dtype.
    if (a.dtype().kind() == 'f') {
      const carray<double> values(a);
      for (const Format* other : {&formats::fp16, &formats::bf16, &formats::fp32}) {
        if (*other == f) continue;
        std::uint32_t unused = 0;
        if (std::all_of(values.data(), values.data() + values.size(),
                        [&](double v) { return from_double_exact(*other, v, unused); }))
          throw api::InputError(std::string(e.what()) + "; every value of " + name + " is an " +
                                std::string(other->name) + " value: for " + std::string(other->name) +
                                " inputs pass dtype='" + std::string(other->name) + "' (to a model that reads " +
                                std::string(other->name) + ")");
      }
    }
    throw;
  }
  attn::Tensor4 t(static_cast<int>(a.shape(0)), static_cast<int>(a.shape(1)), static_cast<int>(a.shape(2)),
                  static_cast<int>(a.shape(3)));
  std::transform(bits.begin(), bits.end(), t.data.begin(), [&](std::uint32_t b) { return to_double(f, b); });
  return t;
}

pyb::array_t<double> to_array(const attn::Tensor4& t, bool squeeze_last) {
  std::vector<pyb::ssize_t> shape{t.batch, t.heads, t.rows};
  if (!squeeze_last) shape.push_back(t.cols);
  pyb::array_t<double> a(shape);
  std::copy(t.data.begin(), t.data.end(), a.mutable_data());
  return a;
}

// The CLI's size limits on q's shape [B,H,N,D]. The Python layer calls this (as
// _check_attention_size) before it converts any array, and make_inputs again.
void check_size(const std::array<long long, 4>& q) {
  if (const attn::SizeRefusal refusal = attn::problem_size_refusal(q[0], q[1], q[2], q[3]))
    throw api::InputError("q [" + std::to_string(q[0]) + "," + std::to_string(q[1]) + "," + std::to_string(q[2]) + "," +
                          std::to_string(q[3]) + "]: " + refusal.reason);
}

using Shape4 = std::array<long long, 4>;
Shape4 shape4(const pyb::object& obj, const char* name) {
  const pyb::array a = pyb::array::ensure(obj);
  if (!a || a.ndim() != 4)
    throw api::InputError(std::string(name) + ": expected a 4-dimensional array [batch, head, row, col]");
  return Shape4{a.shape(0), a.shape(1), a.shape(2), a.shape(3)};
}
std::string shape_text(const Shape4& s) {
  return "[" + std::to_string(s[0]) + "," + std::to_string(s[1]) + "," + std::to_string(s[2]) + "," +
         std::to_string(s[3]) + "]";
}
// dO, when given, has q's shape (attention() and the backward of a kept forward).
void check_do_shape(const pyb::object& d_o, const Shape4& q) {
  if (!d_o.is_none() && shape4(d_o, "do") != q) throw api::InputError("do: expected the shape of q " + shape_text(q));
}

// Shapes and sizes are checked before any tensor is converted (a problem over the CLI's size
// limits is refused without allocating it).
attn::AttentionInputs make_inputs(const pyb::object& q, const pyb::object& k, const pyb::object& v,
                                  const pyb::object& d_o, bool causal, bool causal_top_left,
                                  std::optional<double> scale, const Format& dtype) {
  const Shape4 Q = shape4(q, "q"), K = shape4(k, "k"), V = shape4(v, "v");
  // k and v may carry fewer heads than q, dividing them (grouped-query attention).
  const auto kv_fits = [&](const Shape4& t) { return t[0] == Q[0] && t[1] >= 1 && Q[1] % t[1] == 0 && t[1] == K[1]; };
  if (!kv_fits(K) || !kv_fits(V) || K[2] != V[2] || K[3] != Q[3] || V[3] != Q[3])
    throw api::InputError("k, v: expected shape [" + std::to_string(Q[0]) + ",Hk,Nk," + std::to_string(Q[3]) +
                          "] (q's batch and head dim; Hk heads, the same for k and v, dividing q's " +
                          std::to_string(Q[1]) + "); got q " + shape_text(Q) + ", k " + shape_text(K) + ", v " +
                          shape_text(V));
  check_do_shape(d_o, Q);
  check_size(Q);
  // The keys as the engine holds them, one copy per q head (dK and dV before the GQA sum).
  if (const attn::SizeRefusal refusal = attn::problem_size_refusal(Q[0], Q[1], K[2], Q[3]))
    throw api::InputError("k " + shape_text(K) + " (over q's " + std::to_string(Q[1]) + " heads): " + refusal.reason);
  attn::AttentionInputs in;
  in.q = tensor4(q, dtype, "q");
  in.k = tensor4(k, dtype, "k");
  in.v = tensor4(v, dtype, "v");
  if (!d_o.is_none()) in.d_o = tensor4(d_o, dtype, "do");
  in.dtype = dtype;
  in.causal = causal;
  if (causal_top_left) in.causal_alignment = attn::AttentionInputs::CausalAlignment::top_left;
  if (scale) {
    if (!(std::isfinite(*scale) && *scale > 0))
      throw api::InputError("scale: " + shortest_decimal(*scale) + " is not a finite positive number");
    in.softmax_scale = *scale;
  } else {
    in.softmax_scale = 1.0 / std::sqrt(static_cast<double>(Q[3]));
  }
  return in;
}

// The model as every face builds it (api/models.hpp: the name for `dtype`, the SFU set, then
// the recipe, which wins over the set), with Python's spelling of the arguments in messages.
// dtype_given: the caller named dtype (not Python's default), which a model naming another
// input format then contradicts. model_argument: the Python argument that named the model
// (exact_attention's rounded_as), which its messages name.
attn::ModelHandle model_or_throw(const std::string& name, const Format& dtype, const std::string& recipe,
                                 const std::string& sfu, bool dtype_given = false,
                                 const std::string& model_argument = "model") {
  return api::resolve_model({name, dtype, sfu, recipe, dtype_given}, {model_argument, "sfu", "dtype", "recipe"});
}

// A P·V step's record (emu/dot/dot_step_json.hpp, the one serialiser) and its output rounding.
pyb::dict dot_step_dict(const DotStepEvent& s) {
  pyb::dict d = to_python(dot_step_json(s));
  d["output_event"] = to_python(api::event_to_json(formats::fp32, s.output_event));
  return d;
}

pyb::dict row_trace_dict(const attn::RowTrace& t, const attn::KernelModel& km) {
  pyb::dict d;
  d["batch"] = t.batch;
  d["head"] = t.head;
  d["row"] = t.row;
  d["plot_feature"] = t.plot_feature;
  pyb::list tiles;
  for (const attn::TileRecord& tr : t.tiles) {
    pyb::dict e = to_python(api::tile_record_json(tr));
    e["repeated_max"] = tr.repeated_max;
    e["thread_sums"] = pyb::array_t<double>(4, tr.thread_sums.data());
    e["p"] = pyb::array_t<double>(static_cast<pyb::ssize_t>(tr.p.size()), tr.p.data());
    e["acc"] = pyb::array_t<double>(static_cast<pyb::ssize_t>(tr.acc.size()), tr.acc.data());
    tiles.append(e);
  }
  d["tiles"] = tiles;
  pyb::list o_cast;
  for (const RoundingEvent& ev : t.o_cast) o_cast.append(to_python(api::event_to_json(km.output, ev)));
  d["o_cast"] = o_cast;
  d["cumulative_error_by_key"] = pyb::array_t<double>(static_cast<pyb::ssize_t>(t.cumulative_error_by_key.size()),
                                                      t.cumulative_error_by_key.data());
  d["key_order"] = pyb::array_t<int>(static_cast<pyb::ssize_t>(t.key_order.size()), t.key_order.data());
  d["p_equal_one_keys"] =
      pyb::array_t<int>(static_cast<pyb::ssize_t>(t.p_equal_one_keys.size()), t.p_equal_one_keys.data());
  pyb::list steps;
  for (const DotStepEvent& s : t.pv_dot_steps) steps.append(dot_step_dict(s));
  d["pv_dot_steps"] = steps;
  pyb::list buffer;
  for (const RoundingEvent& ev : t.pv_buffer_events) buffer.append(to_python(api::event_to_json(km.output, ev)));
  d["pv_buffer_events"] = buffer;
  d["delta_error_from_o"] = t.delta_error_from_o;
  d["delta_error_from_reduction"] = t.delta_error_from_reduction;
  const attn::RowSummary s = attn::summarize_row(t);
  pyb::dict sum;
  sum["tiles"] = s.tiles;
  sum["final_max"] = s.final_max;
  sum["final_sum"] = s.final_sum;
  sum["p_equal_one"] = s.p_equal_one;
  sum["repeated_max"] = s.repeated_max;
  sum["significand_overflows"] = s.significand_overflows;
  sum["ties"] = s.ties;
  sum["rounded_up"] = s.rounded_up;
  sum["rounded_down"] = s.rounded_down;
  sum["pv_signed_error"] = s.pv_signed_error;
  sum["o_cast_up"] = s.o_cast_up;
  sum["o_cast_down"] = s.o_cast_down;
  sum["o_cast_ties"] = s.o_cast_ties;
  sum["o_cast_error_ulps"] = s.o_cast_error_ulps;
  d["summary"] = sum;
  return d;
}

pyb::dict outputs_dict(const attn::AttentionOutputs& out) {
  pyb::dict d;
  d["o"] = to_array(out.o, false);
  d["lse"] = to_array(out.lse, true);
  d["delta"] = out.delta ? pyb::object(to_array(*out.delta, true)) : pyb::object(pyb::none());
  d["dq"] = out.dq ? pyb::object(to_array(*out.dq, false)) : pyb::object(pyb::none());
  d["dk"] = out.dk ? pyb::object(to_array(*out.dk, false)) : pyb::object(pyb::none());
  d["dv"] = out.dv ? pyb::object(to_array(*out.dv, false)) : pyb::object(pyb::none());
  return d;
}

struct RunResult {
  attn::AttentionOutputs out;
  std::optional<attn::Tracer> tracer;
};

// A run's traced rows, kept as the engine recorded them; row i becomes a Python dict only when
// it is read (row_trace_dict, a new dict per read). Every row's dicts at once would cost far
// more than the run (bench/python_trace.py, seqlen 2048, every row traced: 12.7 s and 2.2 GB
// of dicts against 0.22 s for the untraced call), since a P·V step's record alone is two
// dicts. (_TraceRows; flashbits.RowTraces gives it Python's sequence protocol.)
class TraceRows {
 public:
  TraceRows(attn::Tracer tracer, std::shared_ptr<const attn::KernelModel> recipe)
      : tracer_(std::make_shared<const attn::Tracer>(std::move(tracer))), recipe_(std::move(recipe)) {}
  std::size_t size() const { return tracer_->traces.size(); }
  // Row i of the traced rows (0 <= i < size(), which flashbits.RowTraces checks first).
  pyb::dict row(std::size_t i) const {
    if (i >= size()) throw pyb::index_error("trace row " + std::to_string(i) + " out of range");
    return row_trace_dict(tracer_->traces[i], *recipe_);
  }

 private:
  std::shared_ptr<const attn::Tracer> tracer_;
  std::shared_ptr<const attn::KernelModel> recipe_;
};

// A forward kept for its backward (attention(keep_forward=True), AttentionResult.backward):
// the model, the inputs as the engine read them (without dO), the run's seed and the engine's
// state (null for the correctly-rounded model, whose backward then runs whole).
struct KeptForward {
  attn::ModelHandle model;
  std::shared_ptr<const attn::AttentionInputs> inputs;
  std::uint64_t seed = 0;
  std::shared_ptr<const attn::ForwardState> state;
};

// The result dict of a run: the outputs, the model's formats and SFU set, the scale used.
pyb::dict result_dict(const attn::AttentionOutputs& out, const attn::ModelHandle& model,
                      const attn::AttentionInputs& in) {
  pyb::dict d = outputs_dict(out);
  d["model"] = model.name;
  d["scale"] = in.softmax_scale;
  d["dtype"] = std::string(model.recipe->input.name);
  // The format O's values are in: where the kernel keeps O (an fp32-storage recipe: fp32), fp64
  // where it keeps O unrounded (golden-fp64-*), not the nominal output dtype.
  const std::optional<Format> o_format = attn::stored_o_format(*model.recipe);
  d["output_format"] = o_format ? std::string(o_format->name) : std::string("fp64");
  d["sfu"] = fb::attn::sfu_report(*model.recipe, true);
  d["warning"] = model.recipe->warning;  // an approximate model says so (cudnn-sdpa-sm90), as the CLI does
  // A backward this run makes wrong (the tutorial's, always causal, with causal off), as the CLI says.
  d["shape_warning"] = attn::shape_warning(*model.recipe, attn::run_shape(in));
  pyb::list notes;  // what this shape takes that no capture measured, as replay says
  for (const std::string& n : attn::unmeasured_shape_notes(*model.recipe, attn::run_shape(in))) notes.append(n);
  // dO given to a forward-only model: its gradients are None, said here as replay says it.
  if (in.d_o.has_value() && !model.recipe->backward_modelled &&
      model.recipe->structure != attn::Structure::correctly_rounded)
    notes.append(model.name +
                 " models its kernel's forward and delta only: dq, dk and dv are None "
                 "(flashbits.torch.model_formats(name)[\"backward\"] says which models have a backward)");
  d["notes"] = notes;
  d["traces"] = pyb::none();
  d["kept_forward"] = pyb::none();
  return d;
}

void check_threads(long long threads) {
  if (threads < 1 || threads > api::kMaxJobs)
    throw api::InputError("threads=" + std::to_string(threads) + ": expected 1.." + std::to_string(api::kMaxJobs));
}

pyb::dict attention(const pyb::object& q, const pyb::object& k, const pyb::object& v, const std::string& model_name,
                    const pyb::object& d_o, bool causal, std::optional<double> scale, const std::string& recipe,
                    const std::optional<std::vector<std::array<int, 3>>>& trace_rows, bool trace_all,
                    const std::string& dtype_name, std::uint64_t seed, long long threads, int plot_feature,
                    const std::string& sfu, bool keep_forward, bool dtype_given, bool causal_top_left) {
  const Format dtype = parse_fmt(dtype_name, "dtype");
  const attn::ModelHandle model = model_or_throw(model_name, dtype, recipe, sfu, dtype_given);
  check_threads(threads);
  auto in = std::make_shared<attn::AttentionInputs>(
      make_inputs(q, k, v, d_o, causal, causal_top_left, scale, model.recipe->input));
  std::optional<attn::Tracer> tracer;
  if (trace_all || trace_rows) {
    // Refused before a row is listed: trace=True over 2^31 one-feature rows would list them.
    const long long traced = trace_all ? static_cast<long long>(in->q.batch) * in->q.heads * in->q.rows
                                       : static_cast<long long>(trace_rows->size());
    const std::uint64_t row_bytes =
        attn::traced_row_bytes_bound(*model.recipe, in->q.rows, in->k.rows, in->q.cols, in->causal);
    if (const attn::SizeRefusal refusal = attn::trace_size_refusal(traced, row_bytes))
      throw api::InputError("trace: " + refusal.reason +
                            (trace_all ? "; pass a list of the rows to trace" : "; trace fewer rows"));
    tracer.emplace();
    tracer->plot_feature = plot_feature;
    if (trace_all) {
      for (int b = 0; b < in->q.batch; ++b)
        for (int h = 0; h < in->q.heads; ++h)
          for (int r = 0; r < in->q.rows; ++r) tracer->rows.push_back({b, h, r});
    } else {
      for (const auto& [b, h, r] : *trace_rows) {
        if (b < 0 || b >= in->q.batch || h < 0 || h >= in->q.heads || r < 0 || r >= in->q.rows)
          throw api::InputError("trace: row (" + std::to_string(b) + "," + std::to_string(h) + "," + std::to_string(r) +
                                ") is outside the problem");
        tracer->rows.push_back({b, h, r});
      }
    }
  }
  RunResult result =
      run_interruptible<RunResult>([in, model, tracer, seed, threads, keep_forward](const Cancel& cancel) mutable {
        attn::RunOptions opt;
        opt.cancel = &cancel;  // Ctrl-C stops the engine between rows
        opt.threads = static_cast<int>(threads);
        opt.seed = seed;
        opt.keep_forward_state = keep_forward;
        if (tracer) opt.tracer = &*tracer;
        RunResult r;
        r.out = attn::run_attention(model, *in, opt);
        r.tracer = std::move(tracer);
        return r;
      });
  pyb::dict d = result_dict(result.out, model, *in);
  if (result.tracer) d["traces"] = TraceRows(std::move(*result.tracer), model.recipe);
  if (keep_forward) {
    // The inputs as the forward read them, without dO: shared as they are when it had none
    // (a training step's forward), a copy otherwise.
    std::shared_ptr<const attn::AttentionInputs> forward_inputs = in;
    if (in->d_o) {
      auto copy = std::make_shared<attn::AttentionInputs>(*in);
      copy->d_o.reset();
      forward_inputs = std::move(copy);
    }
    d["kept_forward"] = KeptForward{model, std::move(forward_inputs), seed, result.out.forward_state};
  }
  return d;
}

// The backward of a kept forward, with dO [batch, head, row, col] (q's shape): the outputs of
// attention() with that dO, without running the forward again (RunOptions::forward_state).
pyb::dict backward(const KeptForward& kept, const pyb::object& d_o, long long threads) {
  check_threads(threads);
  if (d_o.is_none()) throw api::InputError("do: a backward needs dO");
  const attn::Tensor4& q = kept.inputs->q;
  check_do_shape(d_o, Shape4{q.batch, q.heads, q.rows, q.cols});
  auto in = std::make_shared<attn::AttentionInputs>(*kept.inputs);
  in->d_o = tensor4(d_o, in->dtype, "do");
  const attn::AttentionOutputs out =
      run_interruptible<attn::AttentionOutputs>([in, kept, threads](const Cancel& cancel) {
        attn::RunOptions opt;
        opt.cancel = &cancel;
        opt.threads = static_cast<int>(threads);
        opt.seed = kept.seed;
        opt.forward_state = kept.state;
        return attn::run_attention(kept.model, *in, opt);
      });
  return result_dict(out, kept.model, *in);
}

// rounded_as (empty: none): the exact outputs rounded once where that model keeps its outputs,
// its floor (attn::correctly_rounded_reference, as bias-test measures a kernel against it), and
// with dO the unit bias-test measures delta in (studies/measure.hpp delta_units: an ulp of the
// model's output format at max(|delta|, sum|dO*O|), per row).
pyb::dict exact(const pyb::object& q, const pyb::object& k, const pyb::object& v, const pyb::object& d_o, bool causal,
                std::optional<double> scale, const std::string& dtype_name, bool causal_top_left,
                const std::string& rounded_as, const std::string& recipe) {
  const Format dtype = parse_fmt(dtype_name, "dtype");
  std::optional<attn::ModelHandle> floor;
  std::optional<Format> unit_format;
  if (!rounded_as.empty()) {
    // dtype is the inputs' format here, as a capture's (an fp32 model reads bf16 inputs), not a
    // request for the model's input format.
    const attn::ModelHandle model = model_or_throw(rounded_as, dtype, recipe, "model", false, "rounded_as");
    floor = attn::correctly_rounded_reference(*model.recipe);
    unit_format = model.recipe->output;
  }
  auto in = std::make_shared<attn::AttentionInputs>(make_inputs(q, k, v, d_o, causal, causal_top_left, scale, dtype));
  struct Floor {
    attn::AttentionOutputs out;
    std::vector<double> delta_unit;  // with rounded_as and dO
  };
  const Floor result = run_interruptible<Floor>([in, floor, unit_format](const Cancel&) {
    attn::AttentionOutputs exact = attn::exact_attention(*in);
    if (!floor) return Floor{std::move(exact), {}};
    attn::AttentionOutputs rounded = attn::round_exact_outputs(*floor->recipe, *in, exact, attn::RunOptions{});
    rounded.row_max = exact.row_max;
    std::vector<double> unit;
    if (in->d_o && exact.delta) unit = attn::delta_units(*unit_format, *in->d_o, exact.o, *exact.delta);
    return Floor{std::move(rounded), std::move(unit)};
  });
  const attn::AttentionOutputs& out = result.out;
  pyb::dict d = outputs_dict(out);
  if (!result.delta_unit.empty()) {
    attn::Tensor4 unit = *out.delta;  // delta's shape, one unit per row
    unit.data = result.delta_unit;
    d["delta_unit"] = to_array(unit, true);
  }
  d["row_max"] = out.row_max ? pyb::object(to_array(*out.row_max, true)) : pyb::object(pyb::none());
  d["model"] = floor ? "floor of " + rounded_as : std::string("exact");
  d["scale"] = in->softmax_scale;
  d["dtype"] = std::string(dtype.name);
  const std::optional<Format> stored = floor ? attn::stored_o_format(*floor->recipe) : std::nullopt;
  d["output_format"] = stored ? std::string(stored->name) : std::string("fp64");
  d["traces"] = pyb::none();
  return d;
}

// What flashbits.torch needs before it converts a tensor: the format the model reads its
// inputs in (and dO), the format of its outputs, whether it has a backward, and whether its
// arithmetic draws from the run's seed (`seeded`: +o-sr's stream, +hadamard's signs; the test
// `flashbits replay` applies to a trace's seed), so that a call without a seed draws a fresh one
// (and a seed given to a model that draws none is refused), and whether its backward masks
// causally whatever the forward did (`backward_always_causal`).
pyb::dict model_formats(const std::string& name, const std::string& dtype_name, const std::string& recipe,
                        const std::string& sfu, bool dtype_given) {
  const attn::ModelHandle model = model_or_throw(name, parse_fmt(dtype_name, "dtype"), recipe, sfu, dtype_given);
  pyb::dict d;
  d["model"] = model.name;
  d["input"] = std::string(model.recipe->input.name);
  // The format O is stored in: fp64 where the model never rounds O (golden-fp64-*), whose
  // recipe output names fp32 only as the container type of its tables.
  const std::optional<Format> stored = attn::stored_o_format(*model.recipe);
  d["output"] = stored ? std::string(stored->name) : std::string("fp64");
  d["backward"] = model.recipe->structure == attn::Structure::correctly_rounded || model.recipe->backward_modelled;
  d["seeded"] = attn::draws_random_bits(*model.recipe);
  // The Triton tutorial's backward masks causally whatever the forward did: without the causal
  // mask its dQ, dK, dV are not the gradients of its O (flashbits.torch refuses that case).
  d["backward_always_causal"] = model.recipe->bwd_always_causal;
  return d;
}

pyb::list models() {
  pyb::list l;
  for (const attn::KernelModelDescription& m : attn::describe_kernel_models()) {
    pyb::dict d;
    d["name"] = m.name;
    d["description"] = m.description;
    d["sources"] = m.sources;
    l.append(d);
  }
  return l;
}

}  // namespace

void register_attention(pyb::module_& m) {
  using namespace pyb::literals;
  pyb::class_<TraceRows>(m, "_TraceRows")
      .def("__len__", &TraceRows::size)
      .def("row", &TraceRows::row, "i"_a, InDefaultFloatingPoint());
  pyb::class_<KeptForward>(m, "_KeptForward");
  m.def("attention", &attention, "q"_a, "k"_a, "v"_a, "model"_a, "do"_a, "causal"_a, "scale"_a, "recipe"_a,
        "trace_rows"_a, "trace_all"_a, "dtype"_a, "seed"_a, "threads"_a, "plot_feature"_a, "sfu"_a, "keep_forward"_a,
        "dtype_given"_a = false, "causal_top_left"_a = false, InDefaultFloatingPoint());
  m.def("attention_backward", &backward, "kept"_a, "do"_a, "threads"_a, InDefaultFloatingPoint());
  m.def("exact_attention", &exact, "q"_a, "k"_a, "v"_a, "do"_a, "causal"_a, "scale"_a, "dtype"_a,
        "causal_top_left"_a = false, "rounded_as"_a = "", "recipe"_a = "", InDefaultFloatingPoint());
  m.def("_check_attention_size", &check_size, "q_shape"_a, InDefaultFloatingPoint());
  m.def("_model_formats", &model_formats, "model"_a, "dtype"_a, "recipe"_a, "sfu"_a, "dtype_given"_a = false,
        InDefaultFloatingPoint());
  m.def("models", &models, InDefaultFloatingPoint());
  m.def("scenario_names", &attn::scenario_names, InDefaultFloatingPoint());
}

}  // namespace fb::py
