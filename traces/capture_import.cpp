// traces/capture_import.cpp: reading bare captures (.safetensors, .npz, .npy) into traces,
// with names, layout, integer bit patterns and metadata settled as capture_import.hpp says.
#include "traces/capture_import.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <charconv>
#include <cmath>
#include <set>

#include "formats/decimal_text.hpp"
#include "formats/text_escape.hpp"
#include "traces/metadata_bool.hpp"
#include "traces/numpy_files.hpp"

namespace fb {

namespace {

[[noreturn]] void fail(std::string_view source, const std::string& message) {
  throw TraceError(std::string(source) + ": " + message);
}

// The usual spellings of the schema's tensors (PyTorch, flash_attn and hand-written dumps).
constexpr std::array<std::pair<std::string_view, std::string_view>, 9> kAliases{{
    {"query", "q"},
    {"key", "k"},
    {"value", "v"},
    {"out", "o"},
    {"output", "o"},
    {"dout", "do"},
    {"grad_out", "do"},
    {"grad_output", "do"},
    {"softmax_lse", "lse"},
}};

// Tensors laid out [batch, seq, heads, dim] by flash_attn (lse stays [batch, heads, seq]).
constexpr std::array<std::string_view, 8> kSequenceMajor{"q", "k", "v", "o", "do", "dq", "dk", "dv"};

std::string canonical_name(const std::string& name) {
  for (const auto& alias : kAliases)
    if (name == alias.first) return std::string(alias.second);
  return name;
}

// Renames the file's tensors to the schema's names; returns (file's name, schema name) for
// each tensor it renamed, for messages.
std::vector<std::pair<std::string, std::string>> rename_aliases(Safetensors& file, std::string_view source) {
  std::map<std::string, std::string> claimed;  // schema name -> the file's name for it
  std::vector<std::pair<std::string, std::string>> renamed;
  for (SafeTensor& t : file.tensors) {
    const std::string schema = canonical_name(t.name);
    const auto [it, fresh] = claimed.emplace(schema, t.name);
    if (!fresh)
      fail(source, "tensors " + quoted_name(it->second) + " and " + quoted_name(t.name) + " both name the schema's '" +
                       schema + "'; keep one");
    if (schema != t.name) renamed.emplace_back(t.name, schema);
    t.name = schema;
  }
  return renamed;
}

// Integer arrays holding bit patterns (numpy has no bf16 or fp8) become the named format.
void reinterpret_bit_patterns(Safetensors& file, const std::optional<Format>& dtype, const std::string& remedy,
                              std::string_view source) {
  for (SafeTensor& t : file.tensors) {
    if (std::find(kSequenceMajor.begin(), kSequenceMajor.end(), t.name) == kSequenceMajor.end()) continue;
    if (dtype_is_floating(t.dtype)) continue;
    const std::size_t width = dtype_size(t.dtype);
    const std::optional<Dtype> target = dtype ? dtype_of_format(*dtype) : std::nullopt;
    const bool fits = target && dtype_size(*target) == width && t.dtype != Dtype::BOOL && (width == 1 || width == 2);
    if (!fits)
      fail(source, "tensor " + quoted_name(t.name) + " is " + std::string(dtype_name(t.dtype)) +
                       (dtype ? ", which does not hold " + std::string(dtype->name) + " bit patterns"
                              : "; if it holds bit patterns, " + remedy));
    t.dtype = *target;
  }
}

// Reorders a rank-4 tensor from [b, s, h, d] to [b, h, s, d].
void transpose_sequence_major(SafeTensor& t) {
  const std::uint64_t B = t.shape[0], S = t.shape[1], H = t.shape[2], D = t.shape[3];
  const std::size_t size = dtype_size(t.dtype);
  std::vector<std::uint8_t> out(t.bytes.size());
  const std::size_t row = static_cast<std::size_t>(D) * size;
  for (std::uint64_t b = 0; b < B; ++b)
    for (std::uint64_t s = 0; s < S; ++s)
      for (std::uint64_t h = 0; h < H; ++h) {
        const std::size_t from = static_cast<std::size_t>(((b * S + s) * H + h) * D) * size;
        const std::size_t to = static_cast<std::size_t>(((b * H + h) * S + s) * D) * size;
        std::copy_n(t.bytes.begin() + from, row, out.begin() + to);
      }
  t.bytes = std::move(out);
  t.shape = {B, H, S, D};
}

// How many dims of q, k and lse disagree when read as [b, heads, seq, d] (heads_dim 1) or as
// [b, seq, heads, d] (heads_dim 2): k's heads divide q's, batch and head dim agree, lse (when
// present) is [b, heads, seq] or [b, heads, seq, 1]. 0: the reading is consistent. The tensors
// like q or k (o, do, dq; v, dk, dv) read alike under both, so their disagreements count the
// same under both readings: they never decide between them.
int misfits(const Safetensors& f, int heads_dim) {
  const SafeTensor* q = f.find("q");
  const SafeTensor* k = f.find("k");
  if (!q || !k || q->shape.size() != 4 || k->shape.size() != 4) return 0;  // validation reports it
  const int seq_dim = 3 - heads_dim;
  const std::uint64_t h = q->shape[heads_dim], hk = k->shape[heads_dim];
  int count = (q->shape[0] != k->shape[0]) + (q->shape[3] != k->shape[3]) + (hk == 0 || h % hk != 0);
  for (const char* like_k : {"v", "dk", "dv"})
    if (const SafeTensor* t = f.find(like_k); t && t->shape != k->shape) ++count;
  for (const char* like_q : {"o", "do", "dq"})
    if (const SafeTensor* t = f.find(like_q); t && t->shape != q->shape) ++count;
  if (const SafeTensor* lse = f.find("lse")) {
    const auto& s = lse->shape;
    if (s.size() < 3 || s.size() > 4 || (s.size() == 4 && s[3] != 1)) return count;  // validation reports it
    count += (s[0] != q->shape[0]) + (s[1] != h) + (s[2] != q->shape[seq_dim]);
  }
  return count;
}

CaptureLayout decide_layout(const Safetensors& f, const CaptureOptions& options, std::string_view source) {
  const int bhsd_misfits = misfits(f, 1), bshd_misfits = misfits(f, 2);
  const bool as_bhsd = bhsd_misfits == 0, as_bshd = bshd_misfits == 0;
  const std::string q_shape = f.find("q") ? shape_string(f.find("q")->shape) : "?";
  const std::string k_shape = f.find("k") ? shape_string(f.find("k")->shape) : "?";
  if (options.layout != CaptureLayout::automatic) {
    const bool bhsd = options.layout == CaptureLayout::bhsd;
    if (!(bhsd ? as_bhsd : as_bshd) && (bhsd ? as_bshd : as_bhsd))
      fail(source, std::string("--layout ") + (bhsd ? "bhsd" : "bshd") + " does not fit q " + q_shape + " and k " +
                       k_shape + (f.find("lse") ? " with lse " + shape_string(f.find("lse")->shape) : "") +
                       "; the other layout does");
    return options.layout;
  }
  if (f.metadata.count(std::string(trace_keys::source))) return CaptureLayout::bhsd;  // a flashbits trace
  // Without a rank-4 q and k there is nothing to decide: validation names what is missing.
  const SafeTensor *q = f.find("q"), *k = f.find("k");
  if (!q || !k || q->shape.size() != 4 || k->shape.size() != 4) return CaptureLayout::bhsd;
  if (as_bhsd != as_bshd) {
    // One reading fits. Where it makes the lengths or head counts of q and k differ (decoding,
    // cross-attention, GQA), a mis-shaped capture of the other layout would hide in it: the
    // reading is noted (q [1,6,8,32] with k [1,4,8,32] is 8 heads of 6 and 4 rows as bshd).
    const std::size_t seq = as_bhsd ? 2 : 1, heads = as_bhsd ? 1 : 2;
    if (options.note && (q->shape[seq] != k->shape[seq] || q->shape[heads] != k->shape[heads]))
      options.note(CaptureOptions::NoteKind::layout_read,
                   std::string(source) + ": --layout auto read q " + q_shape + " and k " + k_shape + " as " +
                       (as_bhsd ? "bhsd [batch, heads, seq, dim]" : "bshd [batch, seq, heads, dim]") + ": " +
                       std::to_string(q->shape[heads]) + " q heads over " + std::to_string(k->shape[heads]) +
                       " kv heads, query length " + std::to_string(q->shape[seq]) + ", key length " +
                       std::to_string(k->shape[seq]) + " (the other layout does not fit); pass --layout " +
                       (as_bhsd ? "bhsd" : "bshd") + " to state it");
    return as_bhsd ? CaptureLayout::bhsd : CaptureLayout::bshd;
  }
  // Neither fits: validation names a bad shape, under the reading that leaves the fewest (a
  // bshd capture with a padded lse fits bshd but for lse's length; read as bhsd, it would be
  // blamed on every tensor's heads).
  if (!as_bhsd) return bshd_misfits < bhsd_misfits ? CaptureLayout::bshd : CaptureLayout::bhsd;
  fail(source, "layout is ambiguous: q " + q_shape + " and k " + k_shape +
                   " read as [batch, heads, seq, dim] (PyTorch SDPA) and as [batch, seq, heads, dim] (flash_attn); "
                   "pass --layout bhsd or --layout bshd");
}

// Merges one option into the metadata map: absent (or empty: it states nothing) -> set;
// present and equal -> kept; present and different -> an error naming both.
template <class T, class Parse>
void merge_option(std::map<std::string, std::string>& metadata, std::string_view key, const std::optional<T>& option,
                  const std::string& option_text, const std::string& flag, Parse parse, std::string_view source) {
  if (!option) return;
  const auto it = metadata.find(std::string(key));
  if (it == metadata.end() || it->second.empty()) {
    metadata[std::string(key)] = option_text;
    return;
  }
  const std::optional<T> theirs = parse(it->second);
  if (!theirs || !(*theirs == *option))
    fail(source, flag + " " + option_text + " conflicts with the file's __metadata__ " + std::string(key) + "=" +
                     quoted_name(it->second) + " (the file's own metadata wins; drop " + flag + ")");
}

// Merges --causal into the keys causal and causal_alignment (capture_import.hpp: the
// file's keys win, a contradiction is an error naming the option and the key, and a plain
// "true" that leaves the alignment to the default with N != Nk is noted).
void merge_causal(Safetensors& f, const CaptureOptions& o, std::string_view source) {
  if (!o.causal && !o.causal_alignment) return;
  const bool causal = o.causal.value_or(true);  // an alignment alone says causal
  const std::string option_text =
      "--causal " + (o.causal_alignment ? *o.causal_alignment : std::string(causal ? "true" : "false"));
  if (o.causal_alignment && (!causal || (*o.causal_alignment != "bottom-right" && *o.causal_alignment != "top-left")))
    fail(source, option_text + ": expected " + std::string(kCausalStatementValues));
  auto& m = f.metadata;
  const auto conflict = [&](std::string_view key, const std::string& theirs) {
    fail(source, option_text + " conflicts with the file's __metadata__ " + std::string(key) + "=" +
                     quoted_name(theirs) + " (the file's own metadata wins; drop --causal)");
  };
  const std::string causal_key(trace_keys::causal), alignment_key(trace_keys::causal_alignment);
  const SafeTensor *q = f.find("q"), *k = f.find("k");
  const bool lengths_known = q && k && q->shape.size() == 4 && k->shape.size() == 4;
  // With N = Nk top-left and bottom-right are one mask: naming the other is no contradiction.
  const bool one_mask = lengths_known && q->shape[2] == k->shape[2];
  if (const auto it = m.find(causal_key); it != m.end()) {
    const std::string& s = it->second;
    if (parse_metadata_bool(s) != causal) conflict(trace_keys::causal, s);
  }
  const auto stated = m.find(alignment_key);
  if (stated != m.end()) {
    const std::string& theirs = stated->second;
    // A plain "true" agrees with either alignment; a named one, or "false", only with itself.
    // (A named alignment was checked above to be one of the two.)
    const bool both_aligned = theirs == "top-left" || theirs == "bottom-right";
    const bool agrees = o.causal_alignment ? theirs == *o.causal_alignment || (one_mask && both_aligned)
                                           : (causal ? theirs != "none" : theirs == "none");
    if (!agrees) conflict(trace_keys::causal_alignment, theirs);
  }
  m.emplace(causal_key, causal ? "true" : "false");
  if (stated != m.end()) return;
  m[alignment_key] = !causal ? "none" : o.causal_alignment.value_or("bottom-right");
  if (causal && !o.causal_alignment && o.note && lengths_known && !one_mask)
    o.note(CaptureOptions::NoteKind::alignment_assumed,
           std::string(source) + ": --causal true with query length " + std::to_string(q->shape[2]) +
               " != key length " + std::to_string(k->shape[2]) +
               ": assumed the causal mask aligned bottom-right (key j <= i + Nk - N: FlashAttention >= 2.1); "
               "PyTorch's is_causal aligns it top-left (j <= i): say --causal top-left or --causal bottom-right");
}

// The inputs q, k, v and do stored as fp32 whose every value is one of `format` (narrower than
// fp32), re-encoded as `format`: exact, no rounding. A value that is not one of `format` is an
// error naming the tensor and the element (a rounding here would replay other inputs than the
// kernel's). Outputs keep their dtype: replay compares them by value.
void narrow_exact_inputs(Safetensors& f, const Format& format, std::string_view source, const CaptureOptions& o) {
  const std::optional<Dtype> target = dtype_of_format(format);
  if (!target || format == formats::fp32) return;
  const std::size_t width = dtype_size(*target);
  std::string narrowed;
  for (SafeTensor& t : f.tensors) {
    if ((t.name != "q" && t.name != "k" && t.name != "v" && t.name != "do") || t.dtype != Dtype::F32) continue;
    const std::size_t count = t.bytes.size() / 4;
    SafeTensor narrow{t.name, *target, t.shape, {}};
    narrow.bytes.reserve(count * width);
    for (std::size_t i = 0; i < count; ++i) {
      const float value = std::bit_cast<float>(static_cast<std::uint32_t>(t.element_bits(i)));
      std::uint32_t stored = 0;
      if (!from_double_exact(format, static_cast<double>(value), stored))
        fail(source, "tensor " + quoted_name(t.name) + " is F32, and its element " + std::to_string(i) + " (" +
                         shortest_decimal(value) + ") is not a " + format.name + " value: --dtype " + format.name +
                         " reads fp32 inputs only when every value is one (store the " + format.name +
                         " bit patterns, or drop --dtype to read the capture as fp32)");
      narrow.append_element_bits(stored);
    }
    t = std::move(narrow);
    narrowed += (narrowed.empty() ? "" : ", ") + t.name;
  }
  if (!narrowed.empty() && o.note)
    o.note(CaptureOptions::NoteKind::inputs_narrowed,
           std::string(source) + ": " + narrowed + " are fp32 arrays whose every value is a " + format.name +
               " value: read as " + format.name + " (--dtype " + format.name + "), exactly");
}

void merge_metadata(Safetensors& f, const CaptureOptions& o, std::string_view source) {
  auto& m = f.metadata;
  auto text = [](const std::string& s) { return std::optional<std::string>(s); };
  merge_option(m, trace_keys::source, o.source, o.source.value_or(""), "--source", text, source);
  merge_option(m, trace_keys::model, o.model, o.model.value_or(""), "--model", text, source);
  merge_option(
      m, trace_keys::softmax_scale, o.softmax_scale, o.softmax_scale ? shortest_decimal(*o.softmax_scale) : "",
      "--scale",
      [](const std::string& s) -> std::optional<double> {
        double v = 0;
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
        return v;
      },
      source);
  merge_causal(f, o, source);
  // fp32 inputs holding values of the narrower --dtype (PyTorch's `t.float().numpy()` of bf16
  // tensors, numpy having no bf16) are read as that format when every value is one of it.
  if (const SafeTensor* q = f.find("q");
      o.dtype && q && q->dtype == Dtype::F32 && !m.count(std::string(trace_keys::dtype)))
    narrow_exact_inputs(f, *o.dtype, source, o);
  // An explicit --dtype that q's own dtype contradicts is the option's fault: merged into the
  // metadata first, it was reported as the file's __metadata__ dtype.
  if (const SafeTensor* q = f.find("q"); o.dtype && q && !m.count(std::string(trace_keys::dtype)))
    if (const auto q_format = dtype_format(q->dtype); q_format && !(*q_format == *o.dtype))
      fail(source, "--dtype " + std::string(o.dtype->name) + " contradicts tensor 'q', which is " +
                       std::string(dtype_name(q->dtype)) + " (drop --dtype: q's dtype names the format)");
  merge_option(m, trace_keys::dtype, o.dtype, o.dtype ? o.dtype->name : "", "--dtype", parse_trace_dtype, source);
  const auto src = m.find(std::string(trace_keys::source));
  if (src == m.end())
    fail(source,
         "the capture does not say where it came from: pass --source cuda:<gpu> (a hardware capture), "
         "--source emulated or --source unknown");
  if (o.source && !is_valid_source(*o.source))
    fail(source, "--source " + quoted_name(*o.source) + ": expected cuda:<gpu>, emulated or unknown");
}

std::string extension(const std::filesystem::path& p) {
  std::string e = p.extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return e;
}

}  // namespace

bool is_numpy_file_name(const std::filesystem::path& path) {
  const std::string e = extension(path);
  return e == ".npz" || e == ".npy";
}

bool is_trace_file_name(const std::filesystem::path& path) {
  const std::string e = extension(path);
  return e == ".safetensors" || e == ".npz";
}

namespace {

Safetensors load(const std::vector<std::filesystem::path>& given, std::string& source) {
  const std::vector<std::filesystem::path> paths = capture_files(given);
  // A directory of .npy arrays is named as the directory: a fault of the capture as a whole
  // (q missing, say) is not its first file's.
  source = (paths.size() > 1 || paths.front() != given.front() ? given.front() : paths.front()).string();
  if (paths.size() == 1 && extension(paths.front()) == ".npz") return read_npz(paths.front());
  if (paths.size() == 1 && extension(paths.front()) != ".npy") return read_safetensors(paths.front());
  Safetensors out;
  for (const auto& p : paths) {
    if (extension(p) != ".npy")
      fail(p.string(), "several files make one capture only as .npy arrays (one per tensor, named by the file)");
    SafeTensor t = read_npy(p);
    // The file's name names the tensor, which the trace's JSON header must hold as UTF-8.
    if (!is_valid_utf8(t.name))
      fail(p.string(), "the file name is not valid UTF-8, and it would name the tensor; rename the file");
    if (out.find(t.name)) fail(p.string(), "a second array named " + quoted_name(t.name));
    out.tensors.push_back(std::move(t));
  }
  return out;
}

// Why a directory without .npy arrays is no capture, and what to give instead. A folder of
// traces given where one capture is read (replay DIR, import DIR, load_trace(DIR)) is the
// usual cause: say how many trace files it holds, directly or
// in subfolders (bias-test --traces reads one folder's files, not its subfolders), and that
// one trace file, or bias-test --traces with a folder, is what reads them.
std::string what_a_directory_without_arrays_holds(const std::filesystem::path& directory) {
  const auto counted = [](std::size_t safetensors, std::size_t npz) {
    std::string text;
    if (safetensors > 0) text = std::to_string(safetensors) + " .safetensors";
    if (npz > 0) text += (text.empty() ? "" : " and ") + std::to_string(npz) + " .npz";
    return text + " file(s)";
  };
  const std::string one_capture =
      ": a directory here is one capture of .npy arrays (one file per tensor, named by it); give one trace "
      "file";
  std::error_code ec;
  std::size_t safetensors = 0, npz = 0;
  for (const auto& entry : std::filesystem::directory_iterator(directory, ec))
    if (is_trace_file_name(entry.path())) ++(extension(entry.path()) == ".npz" ? npz : safetensors);
  if (safetensors + npz > 0)
    return " but " + counted(safetensors, npz) + one_capture + ", or the folder to `flashbits bias-test --traces " +
           directory.string() + "` (Python: bias_test(traces=DIR)), which tests a folder of traces";
  // Subfolders, searched only this far: the hint must not turn a mistyped path (/, $HOME)
  // into a long walk.
  constexpr std::size_t kEntriesLooked = 20000;
  constexpr int kDepth = 4;
  std::size_t looked = 0, nested_safetensors = 0, nested_npz = 0;
  std::optional<std::filesystem::path> first_folder;  // the smallest name, whatever the listing order
  std::filesystem::recursive_directory_iterator it(directory,
                                                   std::filesystem::directory_options::skip_permission_denied, ec);
  for (; !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (++looked > kEntriesLooked) break;
    if (it.depth() >= kDepth) it.disable_recursion_pending();
    if (!is_trace_file_name(it->path())) continue;
    ++(extension(it->path()) == ".npz" ? nested_npz : nested_safetensors);
    if (!first_folder || it->path().parent_path() < *first_folder) first_folder = it->path().parent_path();
  }
  if (first_folder)
    return " and no trace file, but its subfolders hold " + std::string(looked > kEntriesLooked ? "at least " : "") +
           counted(nested_safetensors, nested_npz) + " (the first in " + first_folder->string() + ")" + one_capture +
           ", or one folder of them to `flashbits bias-test --traces DIR`, which tests the files of that folder, "
           "not of its subfolders";
  return one_capture + " (.safetensors or .npz) or such a directory";
}

}  // namespace

std::vector<std::filesystem::path> capture_files(const std::vector<std::filesystem::path>& paths) {
  if (paths.empty()) throw TraceError("import: no capture file given");
  // open("") fails with ENOENT, which read ": cannot open: No such file or directory".
  for (const std::filesystem::path& path : paths)
    if (path.empty()) throw TraceError("an empty file name where a trace or capture was expected");
  std::error_code ec;
  if (paths.size() != 1 || !std::filesystem::is_directory(paths.front(), ec)) return paths;
  const std::string source = paths.front().string();
  std::vector<std::filesystem::path> arrays;
  // Every entry named *.npy, whatever it is: one that cannot be read (a dangling link, a
  // directory, a pipe) is the reader's error naming it. Skipped, it was a tensor dropped
  // without a word (a missing do), or a required one reported "missing".
  for (const auto& entry : std::filesystem::directory_iterator(paths.front(), ec))
    if (extension(entry.path()) == ".npy") arrays.push_back(entry.path());
  if (ec) fail(source, "cannot list the directory: " + ec.message());
  if (arrays.empty())
    fail(source, "directory holds no .npy files" + what_a_directory_without_arrays_holds(paths.front()));
  std::sort(arrays.begin(), arrays.end());
  return arrays;
}

CaptureListing list_captures(const std::vector<std::filesystem::path>& paths) {
  CaptureListing out;
  for (const std::filesystem::path& path : paths) {
    if (path.empty()) throw TraceError("an empty file name where a trace or capture was expected");
    std::error_code ec;
    if (!std::filesystem::is_directory(path, ec)) {
      out.captures.push_back(path);
      continue;
    }
    std::vector<std::filesystem::path> traces;
    bool has_arrays = false;
    for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
      if (is_trace_file_name(entry.path())) traces.push_back(entry.path());
      has_arrays = has_arrays || extension(entry.path()) == ".npy";
    }
    if (ec) fail(path.string(), "cannot list the directory: " + ec.message());
    if (!traces.empty() && has_arrays)
      fail(path.string(),
           "directory holds both trace files (.safetensors, .npz) and .npy arrays, so whether it is a "
           "folder of traces or one capture of arrays cannot be told; move one kind out");
    if (traces.empty() && !has_arrays)
      fail(path.string(), "directory holds no trace file (.safetensors, .npz) and no .npy array" +
                              std::string(" (a folder's subfolders are not read)"));
    if (traces.empty()) {
      out.captures.push_back(path);  // one capture of .npy arrays
      continue;
    }
    std::sort(traces.begin(), traces.end());
    out.captures.insert(out.captures.end(), traces.begin(), traces.end());
  }
  std::error_code ec;
  if (paths.size() == 1 && std::filesystem::is_directory(paths.front(), ec)) {
    out.label = paths.front().string();
  } else if (paths.size() > 1) {
    for (const std::filesystem::path& path : paths) out.label += (out.label.empty() ? "" : ", ") + path.string();
  }
  return out;
}

std::optional<CausalStatement> parse_causal_statement(std::string_view text) {
  if (text == "true" || text == "1") return CausalStatement{true, std::nullopt};
  if (text == "false" || text == "0" || text == "none") return CausalStatement{false, std::nullopt};
  if (text == "top-left" || text == "bottom-right") return CausalStatement{true, std::string(text)};
  return std::nullopt;
}

std::optional<CaptureLayout> parse_capture_layout(std::string_view text) {
  if (text == "auto") return CaptureLayout::automatic;
  if (text == "bhsd") return CaptureLayout::bhsd;
  if (text == "bshd") return CaptureLayout::bshd;
  return std::nullopt;
}

Trace import_capture(const std::vector<std::filesystem::path>& paths, const CaptureOptions& options) {
  std::string source;
  Safetensors file = load(paths, source);
  const auto renamed = rename_aliases(file, source);
  bool sequence_major = false;
  try {
    reinterpret_bit_patterns(file, options.dtype, options.dtype_remedy, source);
    sequence_major = decide_layout(file, options, source) == CaptureLayout::bshd;
    if (sequence_major)
      for (SafeTensor& t : file.tensors)
        if (t.shape.size() == 4 &&
            std::find(kSequenceMajor.begin(), kSequenceMajor.end(), t.name) != kSequenceMajor.end())
          transpose_sequence_major(t);
    merge_metadata(file, options, source);
    return Trace::from_safetensors(std::move(file), source);
  } catch (const TraceError& e) {
    // The messages name tensors and shapes as the schema reads them: a user holding 'query'
    // [batch, seq, heads, dim] must be told how that reading came from the file, or the
    // names and shapes in the message are not the ones in the file.
    const std::string message = e.what();
    std::string reading;
    for (const auto& [theirs, schema] : renamed)  // those the message names: 'q', or q's
      if (message.find("'" + schema + "'") != std::string::npos ||
          message.find(" " + schema + "'s ") != std::string::npos)
        reading += (reading.empty() ? "read the capture's " : ", ") + quoted_name(theirs) + " as " + schema;
    if (sequence_major)
      reading += (reading.empty() ? "" : "; ") +
                 std::string(
                     "shapes as [batch, heads, seq, dim]: the capture's [batch, seq, heads, dim] tensors "
                     "were transposed on import");
    if (reading.empty()) throw;
    throw TraceError(message + " (" + reading + ")");
  }
}

}  // namespace fb
