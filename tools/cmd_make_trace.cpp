// tools/cmd_make_trace.cpp: `flashbits make-trace` writes an emulated trace (docs/DESIGN.md §9):
// the scenario's inputs, and the outputs of the named kernel model, with full metadata and
// source = "emulated" (it can never pass as a hardware capture). The softmax scale is
// written explicitly (1/sqrt(D) in fp64, shortest round trip), so a replay reuses it
// exactly. Extra metadata: scenario, seed.
// Everything it writes, replay reads back (fp32 models included: attention/trace_inputs.hpp
// parse_model_for_inputs); a model whose outputs no trace tensor can hold (golden-fp64-*)
// is refused before any work. The file is written whole or not at all (write_output_file).
// --jobs J: the engine's threads (RunOptions::threads, over (batch, head, row block) forward
// and (batch, head) backward); the trace's bytes do not depend on J.
#include <cmath>
#include <iostream>

#include "attention/attention.hpp"
#include "attention/kernel_models.hpp"
#include "api/models.hpp"
#include "tools/cli_common.hpp"
#include "attention/trace_inputs.hpp"
#include "traces/capture_import.hpp"
#include "traces/trace.hpp"
#include "studies/scenarios.hpp"

namespace fb::cli {
namespace {

struct MakeTraceOptions {
  std::string model, scenario = "sink", out, dtype = "bf16", causal;  // causal empty: not given
  CLI::Option* dtype_option = nullptr;
  int seqlen = 256, headdim = 64, seqlen_k = 0;  // seqlen_k 0: not given, = seqlen
  int batch = 1, heads = 1, kv_heads = 0;        // kv_heads 0: not given, = heads (--kv-heads 0 is refused)
  int jobs = default_jobs();
  std::uint64_t seed = 0;
  bool backward = false;
};

std::vector<std::uint64_t> shape_of(const attn::Tensor4& t) {
  return {static_cast<std::uint64_t>(t.batch), static_cast<std::uint64_t>(t.heads), static_cast<std::uint64_t>(t.rows),
          static_cast<std::uint64_t>(t.cols)};
}
std::vector<std::uint64_t> row_shape(const attn::Tensor4& t) {
  return {static_cast<std::uint64_t>(t.batch), static_cast<std::uint64_t>(t.heads), static_cast<std::uint64_t>(t.rows)};
}

int run_make_trace(const MakeTraceOptions& o) {
  const Format dtype = parse_format_or_throw(o.dtype, "--dtype");
  const attn::ModelHandle model = api::resolve_model({o.model, dtype, "model", "", o.dtype_option->count() > 0});
  // A trace holds bf16, fp16, fp32, e4m3 or e5m2 tensors: a model whose O is never rounded
  // to a format (golden-fp64-*: fp64 throughout) cannot be written, nor replayed. Refused
  // here, before any work, rather than after the run.
  {
    const attn::KernelModel& km = *model.recipe;
    const bool o_unrounded = km.structure != attn::Structure::correctly_rounded &&
                             km.o_acc != attn::OAccumulator::mma_c && !km.o_buffer_format;
    if (o_unrounded)
      throw InputError("--model " + o.model +
                       ": its outputs are fp64 values, which a trace cannot hold (trace "
                       "tensors are bf16, fp16, fp32, e4m3 or e5m2); measure it with bias-test or deviation instead");
  }
  if (o.seqlen < 1 || o.headdim < 1) throw InputError("--seqlen and --headdim: expected positive sizes");
  if (o.batch < 1 || o.heads < 1) throw InputError("--batch and --heads: expected positive sizes");
  const int kv_heads = o.kv_heads == 0 ? o.heads : o.kv_heads;
  if (kv_heads < 1 || o.heads % kv_heads != 0)
    throw InputError("--kv-heads " + std::to_string(o.kv_heads) + ": expected a divisor of --heads " +
                     std::to_string(o.heads) + " (grouped-query attention)");
  check_problem_size(o.batch, o.heads, o.seqlen, o.headdim);
  const int seqlen_k = o.seqlen_k == 0 ? o.seqlen : o.seqlen_k;
  if (seqlen_k != o.seqlen) check_problem_size(o.batch, o.heads, seqlen_k, o.headdim, "--seqlen-k");
  const int jobs = jobs_or_throw(o.jobs);
  if (o.out.empty()) throw InputError("--out: the output path is empty");
  check_trace_output_path("--out", o.out);
  attn::AttentionInputs in;
  try {
    in = attn::make_scenario(o.scenario, o.seed, o.batch, o.heads, o.seqlen, o.headdim, model.recipe->input, o.backward,
                             kv_heads, seqlen_k);
  } catch (const std::invalid_argument& e) {
    throw InputError("--scenario " + o.scenario + ": " + e.what());
  }
  in.softmax_scale = 1.0 / std::sqrt(static_cast<double>(o.headdim));
  // The mask is the run's, not the scenario's: the same inputs, masked as the option says. A
  // plain `true` takes the engine's default alignment, bottom-right, and the trace names it,
  // so a replay never has to guess (with N = Nk the two alignments are one mask).
  if (!o.causal.empty()) {
    const auto statement = parse_causal_statement(o.causal);
    if (!statement) throw InputError("--causal " + o.causal + ": expected " + std::string(kCausalStatementValues));
    in.causal = statement->causal;
    if (statement->alignment == "top-left") in.causal_alignment = attn::AttentionInputs::CausalAlignment::top_left;
  }
  attn::refuse_unmodelled_shape(model.name, *model.recipe, attn::run_shape(in));  // before warning about the run
  warn_about_model(model.name, model.recipe->warning);
  warn_about_model(model.name, attn::shape_warning(*model.recipe, attn::run_shape(in)));
  attn::RunOptions opt;
  opt.seed = o.seed;
  opt.threads = jobs;
  ProgressBar progress("rows", static_cast<std::uint64_t>(o.batch) * o.heads * o.seqlen * (o.backward ? 2 : 1));
  opt.progress = &progress.counter();
  const auto out = attn::run_attention(model, in, opt);
  progress.finish();
  // Parts of the model this shape takes that no capture measured, as replay names them (on
  // stderr: stdout is make-trace's one line); after the run, which may refuse the shape.
  for (const std::string& note : attn::unmeasured_shape_notes(*model.recipe, attn::run_shape(in)))
    std::cerr << note << "\n";  // each begins "note: "

  TraceMetadata md;
  md.source = std::string(kEmulatedSource);
  md.kernel = "flashbits emulator";
  md.model = model.name;
  md.device = "none (emulated on CPU)";
  md.versions = "flashbits";
  md.softmax_scale = in.softmax_scale;
  md.causal = in.causal;
  md.causal_alignment = !in.causal                                                                ? "none"
                        : in.causal_alignment == attn::AttentionInputs::CausalAlignment::top_left ? "top-left"
                                                                                                  : "bottom-right";
  md.dtype = model.recipe->input;
  if (model.recipe->structure == attn::Structure::online_softmax) {
    const auto t = model.recipe->tiles_for(o.headdim, o.seqlen, in.causal, seqlen_k);
    md.block_m = t.block_m;
    md.block_n = t.block_n;
  }
  TraceBuilder b(md);
  b.extra_metadata("scenario", o.scenario);
  b.extra_metadata("seed", std::to_string(o.seed));
  const Format& in_f = model.recipe->input;
  const Format& out_f = model.recipe->output;
  b.add_values("q", in_f, shape_of(in.q), in.q.data);
  b.add_values("k", in_f, shape_of(in.k), in.k.data);
  b.add_values("v", in_f, shape_of(in.v), in.v.data);
  b.add_values("o", out_f, shape_of(out.o), out.o.data);
  b.add_values("lse", formats::fp32, row_shape(out.lse), out.lse.data);
  if (in.d_o) {
    b.add_values("do", in_f, shape_of(*in.d_o), in.d_o->data);
    if (out.delta)
      b.add_values("delta", model.recipe->delta_format.value_or(formats::fp32), row_shape(*out.delta), out.delta->data);
    if (out.dq) b.add_values("dq", out_f, shape_of(*out.dq), out.dq->data);
    if (out.dk) b.add_values("dk", out_f, shape_of(*out.dk), out.dk->data);
    if (out.dv) b.add_values("dv", out_f, shape_of(*out.dv), out.dv->data);
  }
  const std::vector<std::uint8_t> bytes = b.serialize(o.out);  // validated as the reader would
  write_output_file(o.out, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), "the trace");
  std::cout << "wrote " << o.out << " (source emulated, model " << model.name << ", scenario " << o.scenario
            << ", batch " << o.batch << ", heads " << o.heads
            << (kv_heads != o.heads ? " over kv heads " + std::to_string(kv_heads) : std::string()) << ", seqlen "
            << o.seqlen << (seqlen_k != o.seqlen ? ", kv length " + std::to_string(seqlen_k) : std::string())
            << ", head dim " << o.headdim
            << (in.causal ? std::string(", causal ") + *md.causal_alignment : std::string())
            << (!in.d_o  ? ""
                : out.dq ? ", with backward"
                         : ", with dO and delta only: " + model.name + " models no dQ, dK, dV")
            << ")\n";
  return kExitOk;
}

Runner setup_make_trace(CLI::App& app) {
  auto o = std::make_shared<MakeTraceOptions>();
  app.add_option("--model", o->model, "kernel model")->required();
  app.add_option("--scenario", o->scenario, attn::scenario_list() + " (default sink)");
  app.add_option("--seqlen", o->seqlen, "sequence length (default 256)")->check(size_in());
  app.add_option("--seqlen-k", o->seqlen_k,
                 "key/value length (default: --seqlen; the scenario's first SEQLEN_K keys, q its last --seqlen rows)")
      ->check(size_in());
  app.add_option("--headdim", o->headdim, "head dimension (default 64)")->check(headdim_in());
  app.add_option("--batch", o->batch, "batch size (default 1)")->check(size_in());
  app.add_option("--heads", o->heads, "query heads (default 1)")->check(size_in());
  app.add_option("--kv-heads", o->kv_heads,
                 "key/value heads, a divisor of --heads (default: --heads; fewer is grouped-query attention)")
      ->check(size_in());
  add_seed_option(app, o->seed, "seed (default 0)");
  o->dtype_option =
      app.add_option("--dtype", o->dtype,
                     "dtype for models that do not name one: bf16 or fp16 (default bf16); fp32 makes a bare "
                     "`standard` standard-fp32");
  add_jobs_option(app, o->jobs);
  app.add_option("--causal", o->causal,
                 "true|false|top-left|bottom-right: mask row i to keys j <= i + SEQLEN_K - SEQLEN (bottom-right, "
                 "FlashAttention >= 2.1, what true means) or j <= i (top-left, PyTorch's is_causal); the trace "
                 "records causal and causal_alignment (default false)");
  app.add_flag("--backward", o->backward, "also run and record the backward (do, delta, dq, dk, dv)");
  app.add_option("--out", o->out, "output .safetensors file (written whole: a temporary file renamed into place)")
      ->required();
  return [o] { return run_make_trace(*o); };
}

}  // namespace
FLASHBITS_SUBCOMMAND(make_trace, "make-trace", "Write an emulated trace of a kernel model on a scenario",
                     setup_make_trace);
}  // namespace fb::cli
