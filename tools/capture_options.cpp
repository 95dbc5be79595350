// tools/capture_options.cpp: parsing the capture-statement options (capture_options.hpp).
#include "tools/capture_options.hpp"

#include <array>
#include <charconv>
#include <cmath>
#include <iostream>
#include <memory>
#include <mutex>

#include "tools/cli_common.hpp"

namespace fb::cli {

std::vector<CLI::Option*> add_capture_options(CLI::App& app, CaptureOptionText& t, bool metadata_model,
                                              bool with_dtype) {
  std::vector<CLI::Option*> added;
  added.push_back(app.add_option("--source", t.source,
                                 "where a bare capture came from: cuda:<gpu> (a hardware capture), emulated or "
                                 "unknown; a file's own metadata wins, and a conflict is an error"));
  if (metadata_model)
    added.push_back(app.add_option("--model", t.model, "the kernel that produced the capture (kept as metadata)"));
  added.push_back(app.add_option("--scale", t.scale, "softmax scale of a capture that does not record it"));
  added.push_back(
      app.add_option("--causal", t.causal,
                     "true|false|top-left|bottom-right: causal masking of a capture that does not record it; with "
                     "query length != key length the mask's alignment: top-left (key j <= row i: PyTorch's "
                     "is_causal) or bottom-right (j <= i + Nk - N: FlashAttention >= 2.1, what true means)"));
  if (with_dtype)
    added.push_back(
        app.add_option("--dtype", t.dtype,
                       "format of q, k, v (bf16, fp16, ...); numpy files hold bf16 as uint16 and need --dtype bf16"));
  added.push_back(app.add_option("--layout", t.layout,
                                 "auto|bhsd|bshd: [batch, heads, seq, dim] (PyTorch SDPA) or [batch, seq, heads, dim] "
                                 "(flash_attn); auto decides from the shapes and refuses an ambiguous capture "
                                 "(default auto)"));
  return added;
}

CaptureOptions capture_options_or_throw(const CaptureOptionText& t) {
  CaptureOptions o;
  if (!t.source.empty()) {
    if (!is_valid_source(t.source))
      throw InputError("--source " + t.source + ": expected cuda:<gpu>, emulated or unknown");
    o.source = t.source;
  }
  if (!t.model.empty()) o.model = t.model;
  if (!t.scale.empty()) {
    double scale = 0;
    const auto [end, ec] = std::from_chars(t.scale.data(), t.scale.data() + t.scale.size(), scale);
    if (ec != std::errc() || end != t.scale.data() + t.scale.size() || !std::isfinite(scale) || !(scale > 0))
      throw InputError("--scale " + t.scale + ": expected a finite positive number");
    o.softmax_scale = scale;
  }
  if (!t.causal.empty()) {
    const auto statement = parse_causal_statement(t.causal);
    if (!statement) throw InputError("--causal " + t.causal + ": expected " + std::string(kCausalStatementValues));
    o.set_causal(*statement);
  }
  // One line on stderr per kind of note (an assumed alignment, a layout read), however many
  // captures (bias-test reads a directory's, in threads) give it: stdout stays the report.
  auto noted = std::make_shared<std::array<std::once_flag, CaptureOptions::kNoteKinds>>();
  o.note = [noted](CaptureOptions::NoteKind kind, const std::string& line) {
    std::call_once((*noted)[static_cast<std::size_t>(kind)], [&] { std::cerr << "note: " << line << "\n"; });
  };
  if (!t.dtype.empty()) o.dtype = parse_format_or_throw(t.dtype, "--dtype");
  const auto layout = parse_capture_layout(t.layout);
  if (!layout) throw InputError("--layout " + t.layout + ": expected auto, bhsd or bshd");
  o.layout = *layout;
  return o;
}

Trace load_capture(const std::vector<std::string>& paths, const CaptureOptions& options) {
  std::vector<std::filesystem::path> files(paths.begin(), paths.end());
  return import_capture(files, options);
}

std::vector<std::pair<std::string, std::string>> capture_inputs(const std::string& role,
                                                                const std::vector<std::string>& paths) {
  std::vector<std::pair<std::string, std::string>> inputs;
  for (const auto& file : capture_files(std::vector<std::filesystem::path>(paths.begin(), paths.end())))
    inputs.emplace_back(role, file.string());
  return inputs;
}

}  // namespace fb::cli
