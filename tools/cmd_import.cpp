// tools/cmd_import.cpp: `flashbits import` converts a capture people already have (a bare
// .safetensors dump, an .npz archive, .npy files; PyTorch's or flash_attn's layout; GQA)
// into a flashbits trace, once, with its provenance stated (tools/capture_options.hpp), so
// that every later replay, bias test or Python session reads a self-describing file.
// The trace is [batch, heads, seq, dim] with the schema's tensor names; the file is written
// whole or not at all, and never over one of its inputs.
#include <iostream>

#include "attention/trace_inputs.hpp"
#include "formats/text_escape.hpp"
#include "tools/capture_options.hpp"
#include "tools/cli_common.hpp"
#include "traces/trace.hpp"

namespace fb::cli {
namespace {

struct ImportOptions {
  std::vector<std::string> captures;
  std::string out;
  CaptureOptionText statement;
};

// The mask the written trace states, as replay will run it (attention/trace_inputs.hpp:
// causal_alignment top-left, else bottom-right), and where the alignment came from.
std::string mask_text(const Trace& trace) {
  const TraceMetadata& md = trace.metadata();
  if (!md.causal.value_or(false)) return md.causal ? "not causal" : "causality not recorded";
  const bool top_left = md.causal_alignment == "top-left";
  std::string text = std::string("causal, aligned ") +
                     (top_left ? "top-left (key j <= row i)" : "bottom-right (key j <= row i + Nk - N)");
  if (!md.causal_alignment) text += " by default: the trace does not state causal_alignment";
  if (trace.rows() == trace.kv_rows()) text += "; with N = Nk both alignments are one mask";
  return text;
}

int run_import(const ImportOptions& o) {
  // The trace's metadata must be UTF-8 (safetensors' header is JSON): refused here, by option,
  // and not when the output is serialised, which blamed the output file. (replay and bias-test
  // only show these strings, escaped, and take them.)
  for (const auto& [option, text] :
       {std::pair<const char*, const std::string&>{"--source", o.statement.source}, {"--model", o.statement.model}})
    if (!is_valid_utf8(text))
      throw InputError(std::string(option) + " '" + text + "': not valid UTF-8 (it goes into the trace's metadata)");
  const CaptureOptions options = capture_options_or_throw(o.statement);
  if (o.out.empty()) throw InputError("--out: the output path is empty");
  // Every file the capture reads, a directory's .npy files included: the more specific refusal
  // of a name the check below would also refuse (DIR/query.npy).
  refuse_output_over_inputs("--out", o.out, capture_inputs("the capture", o.captures));
  check_trace_output_path("--out", o.out);
  const Trace trace = load_capture(o.captures, options);
  // Exactly what replay checks (attention/trace_inputs.hpp): no trace is written that replay,
  // bias-test --traces or Python cannot read. --model is metadata here, merged into the file's.
  attn::check_replayable(trace, o.statement.model);
  const std::vector<std::uint8_t> bytes = serialize_safetensors(trace.file(), o.out);
  parse_trace(bytes, o.out);  // what is written reads back as a valid trace
  write_output_file(o.out, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), "the trace");
  const TraceMetadata& md = trace.metadata();
  std::cout << "wrote " << o.out << ": " << provenance_text(md) << "; q [" << trace.batch() << "," << trace.heads()
            << "," << trace.rows() << "," << trace.head_dim() << "], k/v heads " << trace.kv_heads() << ", kv length "
            << trace.kv_rows() << ", " << trace.file().tensors.size() << " tensors, " << mask_text(trace) << "\n";
  // Notes on stderr, as every command's: stdout is the one line above.
  if (!md.softmax_scale) std::cerr << "note: no softmax scale recorded: replays will use 1/sqrt(head dim)\n";
  if (!md.causal) std::cerr << "note: causality not recorded: replays will assume non-causal\n";
  return kExitOk;
}

Runner setup_import(CLI::App& app) {
  auto o = std::make_shared<ImportOptions>();
  app.add_option("capture", o->captures,
                 "CAPTURE: one .safetensors or .npz file, a directory of .npy files, or several .npy files (each "
                 "named by its tensor: q.npy, k.npy, ...)")
      ->required();
  app.add_option("--out", o->out, "output trace .safetensors (written whole: a temporary file renamed into place)")
      ->required();
  add_capture_options(app, o->statement, true);
  return [o] { return run_import(*o); };
}

}  // namespace
FLASHBITS_SUBCOMMAND(import, "import",
                     "Convert a bare capture (.safetensors, .npz, .npy; bhsd or bshd; GQA) into a flashbits trace",
                     setup_import);
}  // namespace fb::cli
