// attention/trace_inputs.hpp: the adapter from a captured or emulated trace (traces/trace.hpp)
// to the attention engine: its inputs, the kernel model for its dtype, the SFU set to
// replay it with. replay, bias-test --traces, demo and the Python module read traces
// through it, so a trace means the same inputs everywhere.
//
// Errors: a malformed trace is TraceError; a model or SFU set that does not fit is
// std::invalid_argument (both are bad input to the CLI, exit 2, and ValueError in Python).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attention/attention.hpp"
#include "traces/trace.hpp"

namespace fb::attn {

// A kernel model for inputs of `dtype` (--dtype, or a trace's dtype). bf16 and fp16 go to
// parse_kernel_model; any other dtype (fp32) is accepted only by a model that names it
// (standard-fp32, golden-fp32-*; a bare `standard` becomes standard-DTYPE), so that every
// trace make-trace writes can be replayed. std::invalid_argument otherwise, naming both.
ModelHandle parse_model_for_inputs(const std::string& name, const Format& dtype);

// The inputs a trace captured (q, k, v, and dO when present), with its scale, causal flag
// and dtype (metadata dtype, else q's dtype). k and v may have fewer heads than q
// (grouped-query attention) and another length (Nk != N: decoding, cross-attention); a causal
// mask is aligned as metadata causal_alignment says (bottom-right unless top-left).
// TraceError (naming the file) when k and v differ in shape, or from q in batch or head dim.
AttentionInputs inputs_from_trace(const Trace& trace);
// What a trace must be for a model to run on it and be compared with it, beyond the schema
// (trace.hpp): replay checks it before it runs, and import before it writes a trace, so that
// import never writes a trace replay cannot read. The inputs (inputs_from_trace: k and v of
// one shape, with q's batch and head dim); q, k, v, o, and do, lse, delta, dq, dk, dv
// where present, in a format flashbits decodes (bf16, fp16, fp32, e4m3, e5m2: not F64 or
// integers), since they are compared bit for bit in their own format; dq, dk, dv only with
// the do they are recomputed from; and, when a model is
// named, one that reads the inputs' dtype (parse_model_for_inputs) and takes the trace's
// softmax scale (softmax_scale_refusal: a TraceError naming the file). The model is
// `model_option` when not empty (named as `option_name` in messages), else the metadata's
// (none named: `model` is empty). TraceError naming the file for a defect of the file,
// `FILE: metadata model 'X': ...` included; std::invalid_argument `OPTION X: ...` for a
// model given as an option.
// The rows of batch 0, head 0 whose fb-fa2 intermediates (trace_m, trace_p, ...) the trace
// holds: its tensor trace_rows (empty when absent), each a row of q, none twice, in order.
// TraceError naming the file for a BOOL tensor (rows 0 and 1 by accident), a value that is
// no row of q, or a row listed twice (two recomputations paired with one captured slice).
// check_replayable reads it (ReplayableTrace::intermediate_rows), so that import writes no trace
// replay refuses for it.
std::vector<int> intermediate_rows(const Trace& trace);

struct ReplayableTrace {
  AttentionInputs inputs;
  ModelHandle model;                   // empty (no recipe) when no model is named
  std::vector<int> intermediate_rows;  // intermediate_rows(trace)
};
ReplayableTrace check_replayable(const Trace& trace, const std::string& model_option,
                                 std::string_view option_name = "--model");
// The seed of the run that made `trace` (metadata key "seed"), for a model whose arithmetic
// draws from one (+o-sr's stream, +hadamard's signs; `model_name` names it in the message):
// nullopt when the key is absent; TraceError naming the file and the text when it is not a
// plain unsigned integer, since a guessed seed would read those roundings as errors. Other
// models never read it: a capture may record its own input seeds under the key (the H200 bias
// captures hold one per head, "1000,1001,...").
std::optional<std::uint64_t> recorded_run_seed(const Trace& trace, const std::string& model_name);
// The recorded seed of a model that draws from one (draws_random_bits): as recorded_run_seed,
// and a TraceError naming the file, the key and what the model draws when it is absent (a
// guessed seed would read every draw that differs as the kernel's).
std::uint64_t required_run_seed(const Trace& trace, const ModelHandle& model);
// What inputs_from_trace assumed because the trace's metadata does not say it, one "note: ..."
// line each (empty: nothing assumed): the softmax scale (1/sqrt(head dim)), causality (none),
// and a causal mask's alignment where the lengths differ (bottom-right).
// replay and bias-test --traces print them, so that a capture missing its causal flag is not
// silently measured as the wrong attention.
std::vector<std::string> assumed_metadata_notes(const Trace& trace);
// The mask's part of those notes (causality, alignment): what a reader that states the mask it
// derives (the Python module's load_trace: Trace.causal, Trace.causal_alignment) assumed.
std::vector<std::string> assumed_mask_notes(const Trace& trace);
// The SFU models a trace is replayed with. `choice`: "model" keeps the model's own; a set
// name (correct, hw-sm90) replaces the functions the model evaluates; "auto" picks hw-sm90
// (measured on an H200) for a hardware capture from compute capability 9.0 and the model's
// own otherwise. Returns the model to run and sets `note` to a line saying what auto chose,
// or, for a hardware capture it finds no measured set for (no compute capability recorded,
// another one), a "note: " line saying the model's own SFUs are used and how to pick hw-sm90
// (empty otherwise; auto keeps a model that evaluates no special function).
// std::invalid_argument for an unknown set (the message names the CLI option --sfu, its only
// source of names).
ModelHandle with_capture_sfu(const ModelHandle& model, const Trace& trace, const std::string& choice,
                             std::string& note);
// The model with every special function it evaluates taken from the named SFU set (correct,
// hw-sm90), the others left alone; nullopt when no set has that name. std::invalid_argument
// ("SFU set NAME: FILE: why") when a table the set loads is unreadable, corrupt or of another
// function, or when the model evaluates no special function (the set would change nothing).
std::optional<ModelHandle> with_sfu_set(const ModelHandle& model, const std::string& set_name);
// The named SFU sets, comma separated, for messages.
std::string sfu_set_list();
// Tensor4 of a trace tensor: [B,H,N,D] as is; [B,H,N] as [B,H,N,1]. TraceError otherwise.
Tensor4 tensor_from_trace(const Trace& trace, std::string_view name);
// "[B,H,N,D]", as messages write a trace tensor's shape (shape_string).
std::string shape_text(const Tensor4& t);

}  // namespace fb::attn
