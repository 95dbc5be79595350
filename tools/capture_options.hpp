// tools/capture_options.hpp: the options that state what a bare capture lacks, shared by
// `import`, `replay` and `bias-test --traces` (traces/capture_import.hpp does the work).
//
//   --source cuda:<gpu>|emulated|unknown   where the capture came from
//   --scale X                              softmax scale (finite, positive)
//   --causal true|false|top-left|bottom-right   causal masking; with N != Nk its alignment:
//                                          top-left (PyTorch's is_causal) or bottom-right
//                                          (FlashAttention >= 2.1; what a plain true means:
//                                          a note on stderr says so when N != Nk)
//   --dtype F                              the format of q, k, v (and of uint16/uint8 arrays)
//   --layout auto|bhsd|bshd                [batch, heads, seq, dim] or flash_attn's [b, s, h, d]
// `import` also takes --model NAME (the kernel that produced the capture, kept as metadata);
// `replay`'s own --model chooses the model to replay under and is not metadata.
// Contract: capture_options_or_throw throws InputError (exit 2) naming the option and the
// value; load_capture reports file defects as TraceError (exit 2), naming the file.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "traces/capture_import.hpp"

namespace fb::cli {

struct CaptureOptionText {
  std::string source, model, scale, causal, dtype, layout = "auto";
};

// Adds the options above to `app` (--model only when `metadata_model`, --dtype only when
// `with_dtype`: bias-test has its own --dtype, which names a capture's format in trace
// mode) and returns them, so a command can tie them to the option that reads captures.
std::vector<CLI::Option*> add_capture_options(CLI::App& app, CaptureOptionText& text, bool metadata_model,
                                              bool with_dtype = true);
CaptureOptions capture_options_or_throw(const CaptureOptionText& text);
// import_capture on the paths (one file, one directory of .npy, or several .npy files).
Trace load_capture(const std::vector<std::string>& paths, const CaptureOptions& options);
// The files load_capture reads for `paths` (a directory's .npy files, traces/capture_import.hpp
// capture_files), each as (role, file) for refuse_output_over_inputs.
std::vector<std::pair<std::string, std::string>> capture_inputs(const std::string& role,
                                                                const std::vector<std::string>& paths);

}  // namespace fb::cli
