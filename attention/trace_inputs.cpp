// attention/trace_inputs.cpp: traces to engine inputs, models and SFU sets (contract in
// trace_inputs.hpp).
#include "attention/trace_inputs.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <memory>
#include <optional>
#include <stdexcept>
#include <vector>

#include "attention/kernel_models.hpp"
#include "emu/sfu/special_functions.hpp"
#include "formats/decimal_text.hpp"
#include "formats/text_escape.hpp"
#include "traces/sfu_sets.hpp"

namespace fb::attn {

ModelHandle parse_model_for_inputs(const std::string& name, const Format& dtype) {
  if (dtype == formats::bf16 || dtype == formats::fp16) return parse_kernel_model(name, dtype);
  // Models that name their dtype ignore the one given: parse with bf16, then check.
  std::string text = name;
  if (text == "standard" || text.rfind("standard+", 0) == 0)
    text = "standard-" + std::string(dtype.name) + text.substr(8);
  ModelHandle h = parse_kernel_model(text, formats::bf16);
  if (!(h.recipe->input == dtype))
    throw std::invalid_argument("kernel model " + name + " reads " + h.recipe->input.name + " inputs, not " +
                                dtype.name + " (a model that does not name its dtype takes bf16 or fp16" +
                                (dtype == formats::fp32
                                     ? std::string("; fp32 arrays whose values are all bf16 or fp16 values are read as "
                                                   "such when the capture's dtype is stated: --dtype bf16)")
                                     : std::string(")")));
  return h;
}

std::string shape_text(const Tensor4& t) {
  return shape_string({static_cast<std::uint64_t>(t.batch), static_cast<std::uint64_t>(t.heads),
                       static_cast<std::uint64_t>(t.rows), static_cast<std::uint64_t>(t.cols)});
}

Tensor4 tensor_from_trace(const Trace& trace, std::string_view name) {
  const SafeTensor& t = trace.tensor(name);
  std::vector<std::uint64_t> shape = t.shape;
  if (shape.size() == 3) shape.push_back(1);
  if (shape.size() != 4)
    throw TraceError(trace.source_name() + ": tensor " + std::string(name) + ": expected 4 dimensions, got " +
                     std::to_string(t.shape.size()));
  Tensor4 out(static_cast<int>(shape[0]), static_cast<int>(shape[1]), static_cast<int>(shape[2]),
              static_cast<int>(shape[3]));
  out.data = trace.values(name);
  return out;
}

AttentionInputs inputs_from_trace(const Trace& trace) {
  AttentionInputs in;
  in.q = tensor_from_trace(trace, "q");
  in.k = tensor_from_trace(trace, "k");
  in.v = tensor_from_trace(trace, "v");
  // Say which file does not fit the models, before they refuse it without naming the file.
  const auto same_shape = [](const Tensor4& a, const Tensor4& b) {
    return a.batch == b.batch && a.heads == b.heads && a.rows == b.rows && a.cols == b.cols;
  };
  // Grouped-query traces (k and v with fewer heads, dividing q's) are fine; the engine maps
  // q head h to k/v head h / (H/Hk). So is a KV length other than q's (decoding,
  // cross-attention; a causal mask is then aligned bottom-right, as FA2 aligns it).
  Tensor4 k_like_q = in.k;
  k_like_q.heads = in.q.heads;
  k_like_q.rows = in.q.rows;
  if (!same_shape(in.k, in.v) || !same_shape(in.q, k_like_q))
    throw TraceError(trace.source_name() + ": q " + shape_text(in.q) + ", k " + shape_text(in.k) + " and v " +
                     shape_text(in.v) +
                     ": the models need k and v of one shape, with q's batch and head dim (their heads may "
                     "divide q's: grouped-query attention; their length may differ from q's)");
  if (in.q.cols > kMaxHeadDim)
    throw TraceError(trace.source_name() + ": tensor 'q': head dim " + std::to_string(in.q.cols) +
                     ": the models run head dims up to " + std::to_string(kMaxHeadDim) + ", as FlashAttention does");
  if (trace.has("do")) in.d_o = tensor_from_trace(trace, "do");
  const TraceMetadata& m = trace.metadata();
  in.dtype = m.dtype ? *m.dtype : trace.bits("q").format;
  in.softmax_scale = m.softmax_scale.value_or(0.0);
  in.causal = m.causal.value_or(false);
  if (m.causal_alignment == "top-left") in.causal_alignment = AttentionInputs::CausalAlignment::top_left;
  return in;
}

std::optional<std::uint64_t> recorded_run_seed(const Trace& trace, const std::string& model_name) {
  const auto it = trace.raw_metadata().find("seed");
  if (it == trace.raw_metadata().end()) return std::nullopt;
  const std::string& text = it->second;
  std::uint64_t seed = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), seed);
  if (text.empty() || error != std::errc{} || end != text.data() + text.size())
    throw TraceError(trace.source_name() + ": __metadata__: key 'seed': expected an unsigned integer (" + model_name +
                     " draws from it), got '" + escape_unprintable(text) + "'");
  return seed;
}

std::uint64_t required_run_seed(const Trace& trace, const ModelHandle& model) {
  if (const std::optional<std::uint64_t> seed = recorded_run_seed(trace, model.name)) return *seed;
  throw TraceError(trace.source_name() + ": __metadata__: key 'seed' is absent: " + model.name +
                   (model.recipe->fp8.hadamard ? " quantises with signs drawn from the run's seed"
                                               : " rounds O stochastically from the run's seed") +
                   ", which its results depend on");
}

std::vector<std::string> assumed_metadata_notes(const Trace& trace) {
  std::vector<std::string> notes;
  if (!trace.metadata().softmax_scale)
    notes.push_back("note: " + trace.source_name() + " records no softmax_scale: 1/sqrt(" +
                    std::to_string(trace.head_dim()) + ") assumed (--scale X states it for a bare capture)");
  for (std::string& note : assumed_mask_notes(trace)) notes.push_back(std::move(note));
  return notes;
}

std::vector<std::string> assumed_mask_notes(const Trace& trace) {
  std::vector<std::string> notes;
  const TraceMetadata& m = trace.metadata();
  if (!m.causal)
    notes.push_back("note: " + trace.source_name() +
                    " records no causal flag: non-causal assumed (--causal states it for a bare capture)");
  // With N = Nk the two alignments are one mask; otherwise the engine's default is a choice.
  if (m.causal && *m.causal && !m.causal_alignment && trace.rows() != trace.kv_rows())
    notes.push_back("note: " + trace.source_name() + " records no causal_alignment for " +
                    std::to_string(trace.rows()) + " queries and " + std::to_string(trace.kv_rows()) +
                    " keys: bottom-right assumed (--causal top-left|bottom-right states it)");
  return notes;
}

std::vector<int> intermediate_rows(const Trace& trace) {
  std::vector<int> rows;
  if (!trace.has("trace_rows")) return rows;
  // Row numbers: fb-fa2 writes I32, Python's save_trace F64 (whole values).
  if (trace.tensor("trace_rows").dtype == Dtype::BOOL)
    throw TraceError(trace.source_name() + ": tensor trace_rows: dtype BOOL, expected row numbers (fb-fa2 writes I32)");
  for (double r : trace.values("trace_rows")) {
    if (!(r >= 0 && r < static_cast<double>(trace.rows())) || r != std::floor(r))
      throw TraceError(trace.source_name() + ": tensor trace_rows: " + shortest_decimal(r) + " is not a row of q (0.." +
                       std::to_string(trace.rows() - 1) + ")");
    if (std::find(rows.begin(), rows.end(), static_cast<int>(r)) != rows.end())
      throw TraceError(trace.source_name() + ": tensor trace_rows: row " + shortest_decimal(r) + " is listed twice");
    rows.push_back(static_cast<int>(r));
  }
  return rows;
}

ReplayableTrace check_replayable(const Trace& trace, const std::string& model_option, std::string_view option_name) {
  for (const char* name : {"q", "k", "v", "o", "do", "lse", "delta", "dq", "dk", "dv"}) {
    if (!trace.has(name)) continue;
    const Dtype dtype = trace.tensor(name).dtype;
    if (!dtype_format(dtype))
      throw TraceError(trace.source_name() + ": tensor " + name + " is " + std::string(dtype_name(dtype)) +
                       ": replay reads and compares tensors in bf16, fp16, fp32, e4m3 or e5m2 (store it in the "
                       "format the kernel used)");
  }
  // Gradients are recomputed from dO: without it they can be neither compared nor read as a
  // backward (replay refused such a file that import, load_trace and demo had accepted).
  if (!trace.has("do"))
    for (const char* gradient : {"dq", "dk", "dv"})
      if (trace.has(gradient))
        throw TraceError(trace.source_name() + ": tensor " + gradient +
                         " is captured but the trace has no do to recompute it from (store do with the gradients)");
  ReplayableTrace out;
  out.intermediate_rows = intermediate_rows(trace);  // throws for a trace_rows replay would refuse
  out.inputs = inputs_from_trace(trace);
  const std::string& metadata_model = trace.metadata().model;
  const std::string& name = model_option.empty() ? metadata_model : model_option;
  if (name.empty()) return out;
  try {
    out.model = parse_model_for_inputs(name, out.inputs.dtype);
    // The trace's values are of its dtype: a model naming another (standard-fp16 for bf16
    // values) would only be refused by the run, after import had written the trace.
    if (!reads_inputs_of(*out.model.recipe, out.inputs.dtype))
      throw std::invalid_argument("kernel model " + name + " reads " + out.model.recipe->input.name +
                                  " inputs, not the trace's " + out.inputs.dtype.name);
  } catch (const std::invalid_argument& e) {
    // A model named by the trace's metadata is an error of the file: name the file first.
    if (model_option.empty()) throw TraceError(trace.source_name() + ": metadata model '" + name + "': " + e.what());
    throw std::invalid_argument(std::string(option_name) + " " + name + ": " + e.what());
  }
  // The scale the run would refuse: import wrote such a trace, which replay then refused.
  if (const std::string refusal = softmax_scale_refusal(name, *out.model.recipe, applied_softmax_scale(out.inputs));
      !refusal.empty())
    throw TraceError(trace.source_name() + ": " + refusal);
  return out;
}

ModelHandle with_capture_sfu(const ModelHandle& model, const Trace& trace, const std::string& choice,
                             std::string& note) {
  note.clear();
  std::string set_name = choice;
  if (set_name == "auto") {
    set_name = "model";
    if (is_hardware_capture(trace) && trace.metadata().compute_capability == "9.0" &&
        evaluates_special_functions(*model.recipe)) {
      set_name = "hw-sm90";
      note = "SFU set hw-sm90 (measured on an H200): the trace was captured on " + trace.metadata().source +
             ", compute capability 9.0 (--sfu model keeps the model's own)";
    } else if (is_hardware_capture(trace) && evaluates_special_functions(*model.recipe)) {
      // The model's own SFUs on a hardware capture: a replay mismatch in the LSE or O may be
      // the SFU's alone. Said, with the way out, rather than left to a bare MISMATCH.
      const std::string& cc = trace.metadata().compute_capability;
      note = (cc.empty() ? "note: the trace records no compute capability"
                         : "note: no SFU set was measured for compute capability " + cc) +
             ", so the model's own SFUs are used: a capture from an sm_90 GPU (H100, H200) replays with --sfu hw-sm90";
    }
  }
  if (set_name == "model") return model;
  if (std::optional<ModelHandle> changed = with_sfu_set(model, set_name)) {
    // Chosen for the capture's GPU, the set must hold that GPU's tables: where one the model
    // reads is missing (an emptied FLASHBITS_SFU_TABLES, an unpacked table left out), the
    // function is correctly rounded, and "measured on an H200" above a mismatch would blame the
    // kernel model for the missing table. Said first, naming the folders searched.
    const std::vector<SpecialFunction> unmeasured = unmeasured_special_functions(*changed->recipe);
    if (choice == "auto" && !unmeasured.empty()) {
      std::string missing, dirs;
      for (SpecialFunction f : unmeasured) missing += (missing.empty() ? "" : ", ") + std::string(to_string(f));
      for (const std::string& dir : sfu_table_dirs()) dirs += (dirs.empty() ? "" : ", ") + dir;
      note = "warning: SFU set " + set_name + " chosen for a capture from " + trace.metadata().source +
             " (compute capability 9.0), but its table(s) for " + missing + " were not found in " + dirs +
             ": those functions are correctly rounded (UNMEASURED), and a replay mismatch may be theirs alone";
    }
    return *changed;
  }
  throw std::invalid_argument("--sfu " + set_name + ": unknown SFU set (auto, model, " + sfu_set_list() + ")");
}

std::optional<ModelHandle> with_sfu_set(const ModelHandle& model, const std::string& set_name) {
  std::optional<SfuSet> set;
  try {
    set = find_sfu_set(set_name);
  } catch (const std::runtime_error& e) {
    // A table the set loads is unreadable, corrupt or of another function: the user's
    // table directory (FLASHBITS_SFU_TABLES) or installation, not a flashbits fault.
    throw std::invalid_argument("SFU set " + set_name + ": " + e.what());
  }
  if (!set) return std::nullopt;
  // A set the model never reads would be accepted and change nothing: refused instead.
  if (!evaluates_special_functions(*model.recipe))
    throw std::invalid_argument("model " + model.name +
                                " evaluates no special function (ex2, rcp, lg2): an SFU set would change nothing");
  auto recipe = std::make_shared<KernelModel>(*model.recipe);
  for (SpecialFunction f : {SpecialFunction::ex2, SpecialFunction::rcp, SpecialFunction::lg2})
    if (uses_special_function(*recipe, f)) recipe->sfu.model_for(f) = set->model_for(f);
  ModelHandle out = model;
  out.recipe = std::move(recipe);
  return out;
}

std::string sfu_set_list() {
  std::string names;
  for (const auto& n : sfu_set_names()) names += (names.empty() ? "" : ", ") + n;
  return names;
}

}  // namespace fb::attn
