// traces/capture_import.hpp: turning the captures people already have into flashbits traces.
//
// A capture may be a flashbits trace, a bare .safetensors dump written by
// `safetensors.torch.save_file({"q": q, ...})` with no metadata, an .npz archive, or .npy
// files (one per tensor, named by the file's stem; or a directory of them). What a bare
// file lacks (its provenance, softmax scale, causality, dtype) is supplied by CaptureOptions,
// which the CLI fills from --source, --model, --scale, --causal, --dtype and --layout.
//
// Contract of import_capture:
// - Tensor names: the usual spellings are accepted and renamed to the schema's
//   (trace.hpp): query->q, key->k, value->v, out/output->o, dout/grad_out/grad_output->do,
//   softmax_lse->lse. Two tensors naming one schema tensor is an error.
// - Layout: the schema is [batch, heads, seq, dim] (PyTorch SDPA, "bhsd"). flash_attn's
//   flash_attn_func uses [batch, seq, heads, dim] ("bshd"); such tensors are transposed on
//   import. CaptureLayout::automatic decides from the shapes where only one reading is
//   consistent (lse's [batch, heads, seq] against q, or which dims of q and k divide into
//   query groups), takes bhsd for a file with flashbits metadata (flashbits writes bhsd),
//   and is an error naming both readings otherwise.
// - Grouped-query attention: k, v (and dk, dv) may have fewer heads than q, dividing them
//   (the schema's rule, trace.hpp).
// - numpy has no bfloat16: uint16 (and int16) arrays are reinterpreted as bf16 or fp16 bit
//   patterns, and uint8 as e4m3 or e5m2, only when options.dtype names that format;
//   otherwise an integer q is an error saying so. An fp32 q, k, v, do with options.dtype
//   naming a narrower format (PyTorch's `t.float().numpy()` of bf16 tensors) is re-encoded
//   in it, exactly, when every value is one of that format (`note` says so once, kind
//   inputs_narrowed); a value that is not is an error naming the tensor and element (never
//   rounded: the replay would run other inputs than the kernel's). Outputs keep their dtype.
// - Metadata: the file's own __metadata__ wins; an option that disagrees with it is an
//   error naming both values. A capture with no source after the merge is an error: the
//   source must be stated ("cuda:<gpu>", "emulated" or "unknown"); "unknown" is kept and is
//   never treated as a hardware capture.
// - Causal alignment: with the query length N != the key length Nk, "causal" is ambiguous:
//   bottom-right (key j <= i + Nk - N: FlashAttention >= 2.1, the default) or top-left
//   (j <= i: PyTorch's is_causal, SDPA's math path, FA2 before 2.1). The option names it
//   (causal_alignment) or says only "causal" (causal true, alignment nullopt: the file's
//   causal_alignment, else bottom-right). An option given writes both keys, causal and
//   causal_alignment (none, bottom-right or top-left), where the file lacks them; one that
//   contradicts either key is an error naming the option and the key (with N = Nk the two
//   alignments are one mask and do not contradict). When a plain "causal" leaves the alignment to the default and N !=
//   Nk, `note` (when set) receives one line saying which alignment was assumed and how to choose the other.
// - Layout auto: the one reading (bhsd or bshd) the shapes allow, an error when both fit. When
//   the reading makes q's and k's lengths or head counts differ, `note` receives one line
//   with the reading: a capture of the other layout whose head counts do not divide would
//   otherwise import as cross-attention without a word.
// - Every defect throws TraceError with one line naming the file and what was wrong; the
//   result passes the same validation as read_trace. The schema names tensors and shapes as
//   it reads them, so a message about a renamed tensor or a transposed [batch, seq, heads,
//   dim] file ends with how it read the file: "(read the capture's 'query' as q; shapes as
//   [batch, heads, seq, dim]: ... transposed on import)".
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/format.hpp"
#include "traces/trace.hpp"

namespace fb {

enum class CaptureLayout { automatic, bhsd, bshd };

// "auto", "bhsd", "bshd"; nullopt for anything else.
std::optional<CaptureLayout> parse_capture_layout(std::string_view text);

// What --causal (Python's causal=) states: causal or not, and the mask's alignment when named.
struct CausalStatement {
  bool causal = false;
  std::optional<std::string> alignment;  // "bottom-right" or "top-left"; nullopt: not named
};
// The accepted spellings, for messages: the one list of them.
inline constexpr std::string_view kCausalStatementValues = "true, false, top-left or bottom-right";
// true|1 -> causal, alignment not named; false|0|none -> not causal; top-left|bottom-right ->
// causal with that alignment. nullopt for anything else.
std::optional<CausalStatement> parse_causal_statement(std::string_view text);

struct CaptureOptions {
  std::optional<std::string> source;  // "cuda:<gpu>", "emulated" or "unknown"
  std::optional<std::string> model;   // the kernel that produced the capture (metadata "model")
  std::optional<double> softmax_scale;
  std::optional<bool> causal;
  // With causal true: "bottom-right" or "top-left" when the option named the alignment;
  // nullopt for a plain true (the file's causal_alignment, else bottom-right).
  std::optional<std::string> causal_alignment;
  std::optional<Format> dtype;  // the format of q, k, v (and how integer arrays are read)
  CaptureLayout layout = CaptureLayout::automatic;
  // How the caller's user names the format of integer arrays that hold bit patterns, said
  // when a capture holds some and `dtype` is not given (the Python module has no --dtype).
  std::string dtype_remedy = "name their format with --dtype (bf16 or fp16 for 16-bit, e4m3 or e5m2 for 8-bit)";
  // Receives the notes on an assumed alignment or layout, or narrowed inputs (see the contract
  // above), each with its kind, so that a caller printing each kind once drops none; may be
  // empty.
  enum class NoteKind { layout_read, alignment_assumed, inputs_narrowed };
  static constexpr std::size_t kNoteKinds = 3;  // a printer keeps one flag per kind
  std::function<void(NoteKind, const std::string&)> note;

  void set_causal(const CausalStatement& statement) {
    causal = statement.causal;
    causal_alignment = statement.alignment;
  }
  bool any() const {
    return source || model || softmax_scale || causal || causal_alignment || dtype ||
           layout != CaptureLayout::automatic;
  }
};

// Reads one capture: a single .safetensors or .npz file, or one or more .npy files, or a
// directory holding .npy files. Throws TraceError (see the contract above).
Trace import_capture(const std::vector<std::filesystem::path>& paths, const CaptureOptions& options);

// The files import_capture reads for `paths`: a directory's .npy files (sorted), else `paths`
// itself. The one listing of a capture directory, so that a command can refuse an output path
// naming any file it reads (tools/cli_common.hpp refuse_output_over_inputs). Throws TraceError
// for a directory that cannot be listed or holds no .npy file.
std::vector<std::filesystem::path> capture_files(const std::vector<std::filesystem::path>& paths);

// Whether a file's name makes it a trace file where a folder's files are read as samples:
// *.safetensors or *.npz, in any case (.NPZ from a Windows share is one too).
bool is_trace_file_name(const std::filesystem::path& path);
// Whether every reader takes a file of this name for numpy's (*.npz, *.npy, any case), so that
// a safetensors trace written under it would be read as a broken archive.
bool is_numpy_file_name(const std::filesystem::path& path);

// The captures that paths given to be read as samples name (the CLI's bias-test --traces and
// Python's bias_test(traces=...), one rule for both): a path that is no directory as given (its
// reader names it when missing or bad); a directory holding trace files (is_trace_file_name)
// as those files, sorted by path (its subfolders are not read: a capture of .npy arrays inside
// one would otherwise be read twice); a directory of .npy arrays and no trace file as one
// capture, as import_capture reads it. `label` names what was given as a whole, for a report's
// subject: the directory when one directory was given, every path joined with ", " when
// several were, else empty. Throws TraceError naming a directory that cannot be listed, holds
// neither trace files nor .npy arrays, or holds both (which reading is meant cannot be told).
struct CaptureListing {
  std::vector<std::filesystem::path> captures;
  std::string label;
};
CaptureListing list_captures(const std::vector<std::filesystem::path>& paths);

}  // namespace fb
