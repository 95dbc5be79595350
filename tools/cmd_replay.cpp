// tools/cmd_replay.cpp: `flashbits replay TRACE` (docs/CLI.md): recompute the captured rows
// under a kernel model (default: the trace's `model` metadata) and compare bit by bit
// every tensor the trace holds that the model computes: O, LSE, and with dO the
// backward's delta, dQ, dK and dV.
//
// Contract:
// - A value matches when the recomputed value, encoded in the captured tensor's format,
//   has the captured bit pattern (NaN matches NaN). Every mismatch is listed with its
//   distance in ulps of the captured format at the captured value.
// - Every report says whether the trace is a hardware capture (source cuda:...) or
//   emulated, and names the SFU model, warning when it is unmeasured on hardware.
// - Exit 0 all match, 1 any mismatch, 2 bad trace / usage (TraceError -> one line).
// - --json: `match` is that verdict on the compared tensors (true exactly when exit 0);
//   `complete` is false when any tensor the trace holds was not compared (`not_compared`
//   names them), so "match": true never stands for tensors nobody looked at.
// - --explain and --plot trace one row: --batch/--head/--row (default 0,0,0).
// - --row R (with --batch/--head, default 0) recomputes only that row's forward
//   (RunOptions::only_rows): O and LSE of the row, and with dO its delta; dQ, dK, dV need
//   every row and are not compared (a note says so; replay without --row compares them).
//   The output says how many rows were recomputed. Negative coordinates, --row with --all,
//   --batch/--head without --row, and an empty --plot path are usage errors (exit 2).
// - No output path (--plot, --sfu-record) may name an input (the trace, each file of a
//   directory capture, --recipe and the tables it loads, --sfu-dump, --sfu-values) or the
//   other output; the plot is written whole or not at all.
// - --recipe FILE changes the model's stage formats or SFU models (tools/recipe_file.hpp),
//   e.g. to replay a hardware capture with the SFU tables captured on the same GPU.
// - --jobs J: the engine's threads (RunOptions::threads, over (batch, head, row block)
//   forward and (batch, head) backward); the output does not depend on J (the traced rows,
//   the SFU recorder and the oracles' fallback counts are per row or thread-safe).
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "attention/attention.hpp"
#include "attention/kernel_models.hpp"
#include "attention/problem_limits.hpp"
#include "studies/statistics.hpp"
#include "formats/decimal_text.hpp"
#include "attention/trace_inputs.hpp"
#include "tools/capture_options.hpp"
#include "tools/cli_common.hpp"
#include "api/event_json.hpp"
#include "api/models.hpp"
#include "tools/svg_plot.hpp"
#include "traces/sfu_dump.hpp"
#include "traces/sfu_values.hpp"
#include "formats/text_escape.hpp"

namespace fb::cli {
namespace {

// The final cast of O over a row's features, as --explain reports it (text and JSON alike).
struct CastSummary {
  std::size_t features = 0;
  int up = 0, down = 0, ties = 0;
  double mean_error_ulps = 0.0;
};
CastSummary summarize_cast(const std::vector<RoundingEvent>& cast) {
  CastSummary s;
  s.features = cast.size();
  double err = 0;
  for (const auto& e : cast) {
    s.up += e.direction == RoundDirection::up;
    s.down += e.direction == RoundDirection::down;
    s.ties += e.tie;
    err += e.error_ulps;
  }
  s.mean_error_ulps = cast.empty() ? 0.0 : err / static_cast<double>(cast.size());
  return s;
}

struct ReplayOptions {
  std::string path, model, plot, recipe;
  std::vector<std::string> sfu_dumps;  // FUNC=FILE
  std::string sfu_record, sfu_values;
  std::string sfu_set = "auto";  // auto | model | a named SFU set
  CaptureOptionText capture;     // --source, --scale, --causal, --dtype, --layout of a bare capture
  int batch = -1, head = -1, row = -1;
  int jobs = default_jobs();
  int feature = 0;  // --feature: the feature of O whose P·V accumulation --plot/--explain traces
  bool all = false, explain = false, json = false, verbose = false;
  // Given on the command line (the defaults -1 and "" would otherwise hide it).
  CLI::Option *batch_option = nullptr, *head_option = nullptr, *row_option = nullptr, *plot_option = nullptr;
  CLI::Option* feature_option = nullptr;
};

constexpr std::size_t kListedMismatches = 20;  // per tensor in the text report

struct Mismatch {
  int b, h, r, c;  // [batch, head, row, column]; intermediates: [0, traced row, kv block, element]
  std::uint32_t captured, recomputed;
  bool recomputed_exact;
  double ulps;
};
// The ulp distance of every mismatch, counted: "ulps of the 383 mismatches: -1 x120, +1 x250,
// +2 x13" where they take at most 16 values, else by |ulps| in binades ("ulps of the 1867
// mismatches, by |ulps|: [1,2) x366, [2,4) x559, ...", NaN apart), so that the text accounts for each mismatch, as the
// contract asks, in a line however many there are (each one with its index: --json).
std::string ulp_distribution(const std::vector<Mismatch>& mismatches) {
  constexpr std::size_t kMostValues = 16;
  std::map<double, std::size_t> by_value;
  std::size_t nans = 0;
  for (const Mismatch& m : mismatches) {
    if (std::isnan(m.ulps))
      ++nans;
    else
      ++by_value[m.ulps];
  }
  std::string out = "ulps of the " + std::to_string(mismatches.size()) + " mismatches:";
  const auto add = [&](const std::string& what, std::size_t count) {
    out += (out.back() == ':' ? " " : ", ") + what + " x" + std::to_string(count);
  };
  if (by_value.size() <= kMostValues) {
    for (const auto& [ulps, count] : by_value) add((ulps > 0 ? "+" : "") + shortest_decimal(ulps), count);
  } else {
    // Binade k holds 2^k <= |ulps| < 2^(k+1); k = -1 everything under 1 (a value the output
    // format cannot hold, compared at its own precision).
    std::map<int, std::size_t> by_binade;
    for (const auto& [ulps, count] : by_value)
      by_binade[std::isinf(ulps) ? INT_MAX : std::fabs(ulps) < 1 ? -1 : std::ilogb(ulps)] += count;
    out.back() = ',';
    out += " by |ulps|:";
    for (const auto& [k, count] : by_binade) {
      if (k == INT_MAX)
        add("inf", count);
      else if (k < 0)
        add("<1", count);
      else
        add("[" + shortest_decimal(std::ldexp(1.0, k)) + "," + shortest_decimal(std::ldexp(1.0, k + 1)) + ")", count);
    }
  }
  if (nans) add("a NaN against a number", nans);
  return out;
}

struct Comparison {
  std::string name;
  Format format = formats::fp32;  // the captured tensor's, set by compare (trace.bits decodes the whole tensor)
  // The format the ulps count in: the captured one, or the narrower one the kernel wrote where
  // a capture widened it (bf16 values in an fp32 array: numpy has no bf16), as bias-test does.
  Format units = formats::fp32;
  // The format the kernel writes the tensor in, where the capture's is narrower: its values
  // were rounded again on the way to the file, and cannot match bit for bit.
  std::optional<Format> rounded_again_from;
  long long compared = 0, matching = 0;
  std::vector<Mismatch> mismatches;
};

bool row_selected(const ReplayOptions& o, int b, int h, int r) {
  if (o.row < 0) return true;
  return b == std::max(o.batch, 0) && h == std::max(o.head, 0) && r == o.row;
}

// `written`: the format the kernel writes this tensor in (O, dQ, dK, dV: the model's output
// format; LSE and delta: fp32), if any: where the capture stores it wider and every compared
// value lies on its grid, a mismatch's ulps are counted in it (one bf16 ulp is 65536 of
// fp32's); where the capture stores it narrower, the comparison says so.
Comparison compare(const ReplayOptions& o, const Trace& trace, const std::string& name, const attn::Tensor4& recomputed,
                   const std::optional<Format>& written = std::nullopt) {
  Comparison cmp;
  cmp.name = name;
  const RawTensor captured = trace.bits(name);
  cmp.format = captured.format;
  cmp.units = captured.format;
  const attn::Tensor4 shape = attn::tensor_from_trace(trace, name);
  // The shape, not only the count: a dq_accum [1,1,128,128] holds as many values as a
  // [1,1,256,64] one, and compared element by element it would match nothing it should.
  if (shape.batch != recomputed.batch || shape.heads != recomputed.heads || shape.rows != recomputed.rows ||
      shape.cols != recomputed.cols)
    throw TraceError(trace.source_name() + ": tensor " + name + ": shape " + attn::shape_text(shape) +
                     ", but the model computes " + attn::shape_text(recomputed) +
                     " [batch, heads, rows, cols] from q, k and v");
  const Format& f = captured.format;
  if (written && written->precision() > f.precision()) cmp.rounded_again_from = *written;
  if (written && written->precision() < f.precision()) {
    bool on_grid = true;
    for (int b = 0; b < shape.batch && on_grid; ++b)
      for (int h = 0; h < shape.heads && on_grid; ++h)
        for (int r = 0; r < shape.rows && on_grid; ++r) {
          if (!row_selected(o, b, h, r)) continue;
          for (int c = 0; c < shape.cols && on_grid; ++c) {
            const std::uint32_t want = captured.bits[shape.index(b, h, r, c)];
            std::uint32_t narrow_bits = 0;
            on_grid = is_nan(f, want) || from_double_exact(*written, to_double(f, want), narrow_bits);
          }
        }
    if (on_grid) cmp.units = *written;
  }
  for (int b = 0; b < shape.batch; ++b)
    for (int h = 0; h < shape.heads; ++h)
      for (int r = 0; r < shape.rows; ++r) {
        if (!row_selected(o, b, h, r)) continue;
        for (int c = 0; c < shape.cols; ++c) {
          const std::size_t i = shape.index(b, h, r, c);
          const std::uint32_t want = captured.bits[i];
          const double got = recomputed.data[i];
          std::uint32_t got_bits = 0;
          const bool exact = from_double_exact(f, got, got_bits);
          ++cmp.compared;
          const bool both_nan = is_nan(f, want) && std::isnan(got);
          if (both_nan || (exact && got_bits == want)) {
            ++cmp.matching;
            continue;
          }
          const double want_v = to_double(f, want);
          cmp.mismatches.push_back(
              {b, h, r, c, want, got_bits, exact, (got - want_v) / attn::ulp_at(cmp.units, want_v)});
        }
      }
  return cmp;
}

// One of fb-fa2's per-row intermediates ([traced row][kv block][...], fp32, NaN where the
// kernel never visited the block) against the traced rows' tile records. `value` gives the
// model's value of element `e` of a tile, or nullopt where that tile does not hold it. A
// causal m-block also visits KV blocks where a row sees no key (FA2 visits n < ceil(((m + 1)
// * block_m + seqlen_k - seqlen_q) / block_n), flash_fwd_kernel.h:94); the model skips them as
// the no-ops they are, so there the kernel's state is still the initial one: max -inf, sums 0,
// P 0, accumulator 0 (`empty`). `causal_offset`: seqlen_k - seqlen_q.
template <class Value>
// `rows`: trace_rows, whole (the captured tensor's first dim); `traced[slot]`: the recomputed
// trace of rows[slot], or nullptr for a row not recomputed (--row names another), not compared.
Comparison compare_intermediate(const Trace& trace, const std::string& name, const std::vector<int>& rows,
                                const std::vector<const attn::RowTrace*>& traced, const attn::TileSizes& tiles,
                                bool causal, int causal_offset, double empty, Value value) {
  const int block_n = tiles.block_n;
  Comparison cmp;
  cmp.name = name;
  const RawTensor captured = trace.bits(name);
  cmp.format = captured.format;
  cmp.units = captured.format;
  if (captured.shape.size() < 2 || captured.shape[0] != rows.size())
    throw TraceError(trace.source_name() + ": tensor " + name + ": expected [" + std::to_string(rows.size()) +
                     " traced rows][kv blocks]...");
  const std::size_t blocks = captured.shape[1];
  // One entry per KV block of block_n keys: another count is a malformed trace, not a mismatch.
  const std::uint64_t kv_blocks =
      (trace.kv_rows() + static_cast<std::uint64_t>(block_n) - 1) / static_cast<std::uint64_t>(block_n);
  if (blocks != kv_blocks)
    throw TraceError(trace.source_name() + ": tensor " + name + ": " + std::to_string(blocks) + " kv blocks, but " +
                     std::to_string(trace.kv_rows()) + " keys in blocks of " + std::to_string(block_n) + " make " +
                     std::to_string(kv_blocks));
  std::size_t inner = 1;
  for (std::size_t i = 2; i < captured.shape.size(); ++i) inner *= captured.shape[i];
  const Format& f = captured.format;
  for (std::size_t slot = 0; slot < rows.size(); ++slot) {
    if (!traced[slot]) continue;
    for (std::size_t kb = 0; kb < blocks; ++kb) {
      const attn::TileRecord* tile = nullptr;
      for (const auto& t : traced[slot]->tiles)
        if (t.kv_begin == static_cast<int>(kb) * block_n) tile = &t;
      const int m_block = rows[slot] / tiles.block_m;
      const std::size_t visited =
          causal ? static_cast<std::size_t>(std::max(0, (m_block + 1) * tiles.block_m + causal_offset + block_n - 1) /
                                            block_n)
                 : blocks;
      for (std::size_t e = 0; e < inner; ++e) {
        const std::uint32_t want = captured.bits[(slot * blocks + kb) * inner + e];
        const std::optional<double> got = tile           ? value(*tile, e)
                                          : kb < visited ? std::optional<double>(empty)
                                                         : std::optional<double>(std::nan(""));
        if (!got) continue;
        ++cmp.compared;
        std::uint32_t got_bits = 0;
        const bool exact = from_double_exact(f, *got, got_bits);
        if ((is_nan(f, want) && std::isnan(*got)) || (exact && got_bits == want)) {
          ++cmp.matching;
          continue;
        }
        const double want_v = to_double(f, want);
        cmp.mismatches.push_back({0, rows[slot], static_cast<int>(kb), static_cast<int>(e), want, got_bits, exact,
                                  std::isfinite(want_v) ? (*got - want_v) / attn::ulp_at(f, want_v) : NAN});
      }
    }
  }
  return cmp;
}

void check_options(const ReplayOptions& o) {
  const bool row_given = o.row_option->count() > 0;  // --batch, --head, --row: integer_in, 0..2^31-1
  if (row_given && o.all) throw InputError("--row and --all: give one (--all compares every row, --row one)");
  if (!row_given && (o.batch_option->count() > 0 || o.head_option->count() > 0) && !o.explain && o.plot.empty())
    throw InputError("--batch/--head: they select the row of --row (or the row --explain/--plot traces)");
  if (o.plot_option->count() > 0 && o.plot.empty()) throw InputError("--plot: the output path is empty");
  if (o.feature_option->count() > 0 && o.plot.empty() && !o.explain)
    throw InputError("--feature: it selects the feature --plot/--explain traces; give one of them");
  // Every file the command reads: a directory capture's .npy files included.
  std::vector<std::pair<std::string, std::string>> inputs = capture_inputs("the trace", {o.path});
  inputs.insert(inputs.end(), {{"--recipe", o.recipe}, {"--sfu-values", o.sfu_values}});
  for (const std::string& spec : o.sfu_dumps)
    if (const auto eq = spec.find('='); eq != std::string::npos) inputs.emplace_back("--sfu-dump", spec.substr(eq + 1));
  // An output over an input first: the more specific refusal of a name (DIR/out.npy) that
  // check_output_path also refuses.
  refuse_output_over_inputs("--plot", o.plot, inputs);
  refuse_output_over_inputs("--sfu-record", o.sfu_record, inputs);
  refuse_output_over_inputs("--plot", o.plot, {{"--sfu-record", o.sfu_record}});
  check_output_path("--plot", o.plot);
  check_output_path("--sfu-record", o.sfu_record);
}

int run_replay(const ReplayOptions& o) {
  check_options(o);
  const int jobs = jobs_or_throw(o.jobs);
  const Trace trace = load_capture({o.path}, capture_options_or_throw(o.capture));
  const TraceMetadata& md = trace.metadata();
  if (o.model.empty() && md.model.empty())
    throw InputError(o.path + ": names no model (its metadata key model is absent or empty); give --model NAME");
  // What import checks before it writes a trace (attention/trace_inputs.hpp), so that every
  // imported trace replays.
  attn::ReplayableTrace replayable = attn::check_replayable(trace, o.model);
  const attn::AttentionInputs& in = replayable.inputs;
  attn::ModelHandle model = std::move(replayable.model);
  attn::refuse_unmodelled_shape(model.name, *model.recipe, attn::run_shape(in));  // before warning about the run
  warn_about_model(model.name, model.recipe->warning);
  warn_about_model(model.name, attn::shape_warning(*model.recipe, attn::run_shape(in)));
  std::vector<std::string> notes;
  // The SFU models: a hardware capture from a GPU whose SFUs were measured is replayed with
  // those measurements (auto); --sfu model keeps the model's own, --sfu NAME picks a set; then
  // the recipe replaces what it names (api/models.hpp, as every face resolves a model).
  {
    api::ModelResolutionNotes resolution;
    model = api::refine_model(std::move(model), o.sfu_set, o.recipe, {}, &trace, &resolution);
    if (!resolution.sfu_note.empty()) notes.push_back(resolution.sfu_note);
    for (std::string& n : attn::assumed_metadata_notes(trace)) notes.push_back(std::move(n));
    for (std::string& n : attn::unmeasured_shape_notes(*model.recipe, attn::run_shape(in)))
      notes.push_back(std::move(n));
    // Tiles the trace records that are not the model's: the tiles order a row's sums, so a run
    // with others differs there, which would otherwise read as the kernel's mismatch.
    if (const fb::TraceMetadata& recorded = trace.metadata();
        (recorded.block_m || recorded.block_n) && model.recipe->structure == attn::Structure::online_softmax) {
      const attn::TileSizes t =
          model.recipe->tiles_for(static_cast<int>(trace.head_dim()), static_cast<int>(trace.rows()), in.causal,
                                  static_cast<int>(trace.kv_rows()));
      if ((recorded.block_m && *recorded.block_m != t.block_m) || (recorded.block_n && *recorded.block_n != t.block_n))
        notes.push_back("note: " + trace.source_name() + " records tiles block_m " +
                        (recorded.block_m ? std::to_string(*recorded.block_m) : std::string("-")) + ", block_n " +
                        (recorded.block_n ? std::to_string(*recorded.block_n) : std::string("-")) + "; " + model.name +
                        " runs " + std::to_string(t.block_m) + " x " + std::to_string(t.block_n) +
                        " here: other tiles order a row's sums otherwise, so mismatches may be theirs");
    }
    // The recipe's tables are inputs too; they are known once it is read, before any output.
    for (const std::string& table : resolution.recipe_tables)
      for (const auto& [option, output] : {std::pair{"--plot", o.plot}, {"--sfu-record", o.sfu_record}})
        refuse_output_over_inputs(option, output, {{"the recipe's table", table}});
  }
  if (!o.sfu_dumps.empty()) {
    auto recipe = std::make_shared<attn::KernelModel>(*model.recipe);
    for (const std::string& spec : o.sfu_dumps) {
      const auto eq = spec.find('=');
      const std::string fn = spec.substr(0, eq);
      SpecialFunction f;
      if (fn == "ex2")
        f = SpecialFunction::ex2;
      else if (fn == "rcp")
        f = SpecialFunction::rcp;
      else if (fn == "lg2")
        f = SpecialFunction::lg2;
      else
        throw InputError("--sfu-dump " + spec + ": expected ex2=FILE, rcp=FILE or lg2=FILE");
      if (eq == std::string::npos || eq + 1 == spec.size()) throw InputError("--sfu-dump " + spec + ": no FILE");
      try {
        recipe->sfu.model_for(f) = load_sfu_dump(spec.substr(eq + 1), f);
      } catch (const std::runtime_error& e) {
        throw InputError(std::string("--sfu-dump: ") + e.what());
      }
      if (!attn::uses_special_function(*recipe, f))
        notes.push_back("note: " + model.name + " does not evaluate " + fn + "; its --sfu-dump changes nothing");
    }
    model.recipe = std::move(recipe);
  }
  std::map<SpecialFunction, std::shared_ptr<const SpecialFunctionModel>> oracles;
  if (!o.sfu_values.empty()) {
    SfuValues values;
    try {
      values = read_sfu_values(o.sfu_values);
    } catch (const std::runtime_error& e) {
      throw InputError(e.what());
    }
    auto recipe = std::make_shared<attn::KernelModel>(*model.recipe);
    for (auto& [f, pairs] : values.pairs) {
      std::unordered_map<std::uint32_t, std::uint32_t> seen(pairs.begin(), pairs.end());
      std::shared_ptr<const SpecialFunctionModel> oracle = make_oracle_model(f, std::move(seen));
      recipe->sfu.model_for(f) = oracle;
      oracles[f] = oracle;
    }
    notes.push_back("SFU values: " + o.sfu_values + " (hardware outputs from " + values.header["source"] +
                    " for the inputs this replay evaluates)");
    model.recipe = std::move(recipe);
  }
  std::vector<std::shared_ptr<const RecordingSfuModel>> recorders;
  if (!o.sfu_record.empty()) {
    auto recipe = std::make_shared<attn::KernelModel>(*model.recipe);
    for (SpecialFunction f : {SpecialFunction::ex2, SpecialFunction::rcp, SpecialFunction::lg2}) {
      if (!attn::uses_special_function(*recipe, f) || !recipe->sfu.model_for(f)) continue;
      auto rec = std::make_shared<const RecordingSfuModel>(recipe->sfu.model_for(f));
      recipe->sfu.model_for(f) = rec;
      recorders.push_back(rec);
    }
    model.recipe = std::move(recipe);
  }
  if (o.row >= 0) {
    // Name the coordinate that misses and the extent it must fit in.
    for (const auto& [option, value, extent] :
         {std::tuple<const char*, int, std::size_t>{"--batch", std::max(o.batch, 0), trace.batch()},
          {"--head", std::max(o.head, 0), trace.heads()},
          {"--row", o.row, trace.rows()}})
      if (static_cast<std::size_t>(value) >= extent)
        throw InputError(std::string(option) + " " + std::to_string(value) + ": outside the trace's shape (batch " +
                         std::to_string(trace.batch()) + ", heads " + std::to_string(trace.heads()) + ", rows " +
                         std::to_string(trace.rows()) + "; coordinates count from 0)");
  }
  attn::RunOptions opt;
  opt.threads = jobs;
  // The seed of the run that made the trace, for a model whose arithmetic draws from it (a
  // malformed or absent one is refused: a guessed seed would read every draw that differs as
  // the kernel's mismatch).
  if (attn::draws_random_bits(*model.recipe)) opt.seed = attn::required_run_seed(trace, model);
  attn::Tracer tracer;
  const int tb = std::max(o.batch, 0), th = std::max(o.head, 0), tr = std::max(o.row, 0);
  if (o.explain || !o.plot.empty()) {
    if (o.feature < 0 || static_cast<std::uint64_t>(o.feature) >= trace.head_dim())
      throw InputError("--feature " + std::to_string(o.feature) + ": expected 0.." +
                       std::to_string(trace.head_dim() - 1) + " (the head dim of " + trace.source_name() + ")");
    tracer.rows.push_back({tb, th, tr});
    tracer.plot_feature = o.feature;
    opt.tracer = &tracer;
  }
  // fb-fa2's per-row intermediates (gpu/README.md): rows of batch 0, head 0. Every one is
  // recomputed and compared, or with --row only the one it names (if it is one of them).
  const std::vector<int>& intermediate_rows = replayable.intermediate_rows;  // checked by check_replayable
  std::vector<std::optional<std::size_t>> intermediate_trace;                // its index in tracer.rows, if recomputed
  for (const int r : intermediate_rows) {
    const bool recomputed = o.row < 0 || (tb == 0 && th == 0 && tr == r);
    intermediate_trace.push_back(recomputed ? std::optional<std::size_t>(tracer.rows.size()) : std::nullopt);
    if (recomputed) tracer.rows.push_back({0, 0, r});
  }
  const bool intermediates_compared =
      std::any_of(intermediate_trace.begin(), intermediate_trace.end(), [](const auto& t) { return t.has_value(); });
  if (intermediates_compared) opt.tracer = &tracer;
  if (const attn::SizeRefusal refusal = attn::trace_size_refusal(
          static_cast<long long>(tracer.rows.size()),
          attn::traced_row_bytes_bound(*model.recipe, in.q.rows, in.k.rows, in.q.cols, in.causal)))
    throw TraceError(trace.source_name() + ": tensor trace_rows: " + refusal.reason);
  // --row: only that row's forward (and delta); the backward's dQ, dK, dV need every row.
  const bool one_row = o.row >= 0;
  if (one_row) opt.only_rows.push_back({tb, th, tr});
  const std::uint64_t all_rows = static_cast<std::uint64_t>(in.q.batch) * in.q.heads * in.q.rows;
  const std::uint64_t row_units = in.d_o ? 2 : 1;  // progress: a forward row, and its delta/backward share
  ProgressBar progress("rows", (one_row ? 1 : all_rows) * row_units);
  opt.progress = &progress.counter();
  // What the engine refuses of this trace (a shape, a softmax_scale beyond the model's float)
  // is about this file: said with its name.
  const auto out = [&] {
    try {
      return attn::run_attention(model, in, opt);
    } catch (const std::invalid_argument& e) {
      throw TraceError(trace.source_name() + ": " + e.what());
    }
  }();
  progress.finish();
  const std::uint64_t rows_recomputed = progress.counter().load() / row_units;
  if (!o.sfu_record.empty()) {
    if (!attn::sfu_hardware_measured(*model.recipe))
      throw InputError(
          "--sfu-record: the SFU models are not all hardware tables (give --sfu-dump for each "
          "function the model evaluates): recorded values must be the hardware's");
    SfuValues values;
    values.header["source"] = md.source.rfind("cuda:", 0) == 0 ? md.source : "cuda:unknown";
    values.header["trace"] = o.path;
    values.header["model"] = model.name;
    values.header["program"] = "flashbits replay --sfu-record";
    for (const auto& rec : recorders) values.pairs[rec->function()] = rec->recorded();
    try {
      // Whole or not at all.
      write_output_file(o.sfu_record, encode_sfu_values(o.sfu_record, values), "the SFU values");
    } catch (const std::runtime_error& e) {
      throw InputError(e.what());
    }
  }
  std::uint64_t oracle_fallbacks = 0;
  for (const auto& [f, m] : oracles) oracle_fallbacks += m->fallback_count();
  if (!oracles.empty())
    notes.push_back("SFU values: " + std::to_string(oracle_fallbacks) +
                    " evaluations were not in the file and used correct rounding" +
                    (oracle_fallbacks ? " (NOT hardware-exact)" : ""));

  std::vector<Comparison> comparisons;
  std::vector<std::string> not_compared;        // --row: tensors that need every row's backward
  const Format written = model.recipe->output;  // O, dQ, dK, dV: the kernel's output format
  comparisons.push_back(compare(o, trace, "o", out.o, written));
  if (trace.has("lse")) comparisons.push_back(compare(o, trace, "lse", out.lse, formats::fp32));
  // The Triton tutorial's M (gpu/capture_paths.py stores it as m_log2_tutorial).
  if (trace.has("m_log2_tutorial") && out.lse_log2)
    comparisons.push_back(compare(o, trace, "m_log2_tutorial", *out.lse_log2, formats::fp32));
  // FlexAttention captures (traces/hw/h200/paths/flex/): the lse flex_attention returns, lse * math.log(2)
  // of its log2-unit LSE, in natural units as the models report it.
  if (trace.has("lse_flex")) comparisons.push_back(compare(o, trace, "lse_flex", out.lse, formats::fp32));
  if (trace.has("do") && trace.has("delta") && out.delta)
    comparisons.push_back(compare(o, trace, "delta", *out.delta, formats::fp32));
  if (trace.has("dq_accum") && out.dq_pre_cast) comparisons.push_back(compare(o, trace, "dq_accum", *out.dq_pre_cast));
  if (trace.has("dq_accum") && one_row && trace.has("do")) not_compared.push_back("dq_accum");
  if (intermediates_compared) {
    std::vector<const attn::RowTrace*> traced;
    for (const auto& at : intermediate_trace) traced.push_back(at ? &tracer.traces[*at] : nullptr);
    const attn::TileSizes tiles =
        model.recipe->tiles_for(static_cast<int>(trace.head_dim()), static_cast<int>(trace.rows()), in.causal,
                                static_cast<int>(trace.kv_rows()));
    const bool causal = in.causal;
    const int causal_offset = in.causal_alignment == attn::AttentionInputs::CausalAlignment::top_left
                                  ? 0
                                  : static_cast<int>(trace.kv_rows()) - static_cast<int>(trace.rows());
    using Tile = attn::TileRecord;
    if (trace.has("trace_m"))
      comparisons.push_back(
          compare_intermediate(trace, "trace_m", intermediate_rows, traced, tiles, causal, causal_offset, -INFINITY,
                               [](const Tile& t, std::size_t) { return std::optional<double>(t.running_max); }));
    if (trace.has("trace_l_partial"))
      comparisons.push_back(compare_intermediate(
          trace, "trace_l_partial", intermediate_rows, traced, tiles, causal, causal_offset, 0.0,
          [](const Tile& t, std::size_t e) { return e < 4 ? std::optional<double>(t.thread_sums[e]) : std::nullopt; }));
    if (trace.has("trace_p"))
      comparisons.push_back(compare_intermediate(trace, "trace_p", intermediate_rows, traced, tiles, causal,
                                                 causal_offset, 0.0, [](const Tile& t, std::size_t e) {
                                                   // keys past the row's causal limit: exp2(-inf) = 0
                                                   return std::optional<double>(e < t.p.size() ? t.p[e] : 0.0);
                                                 }));
    if (trace.has("trace_acc_o"))
      comparisons.push_back(compare_intermediate(trace, "trace_acc_o", intermediate_rows, traced, tiles, causal,
                                                 causal_offset, 0.0, [](const Tile& t, std::size_t e) {
                                                   return e < t.acc.size() ? std::optional<double>(t.acc[e])
                                                                           : std::nullopt;
                                                 }));
  }
  // The backward's outputs, whenever the trace holds them (the run computes them from dO).
  const std::pair<const char*, const std::optional<attn::Tensor4>*> gradients[] = {
      {"dq", &out.dq}, {"dk", &out.dk}, {"dv", &out.dv}};
  bool group_summed_gradient = false;
  std::vector<std::string> not_modelled;  // a forward-only model's gradients (it gives delta)
  for (const auto& [name, tensor] : gradients) {
    if (!trace.has(name)) continue;
    // The trace holds do with any gradient (check_replayable refuses one without it), so the
    // run computed the gradients, unless the model is forward-only.
    if (one_row) {
      not_compared.push_back(name);
      continue;
    }
    if (!tensor->has_value()) {
      not_modelled.push_back(name);
      continue;
    }
    comparisons.push_back(compare(o, trace, name, **tensor, written));
    group_summed_gradient |= name != std::string("dq") && trace.kv_heads() < trace.heads();
  }
  // A model whose kernel reduces the group otherwise has its own note (unmeasured_shape_notes).
  if (group_summed_gradient && model.recipe->gqa_reduction_as_fa2)
    notes.push_back(
        "note: grouped-query dk, dv: each q head's gradient in the output format, summed over its group in fp32 "
        "in head order and rounded once (FA2's mha_bwd sums with a PyTorch reduction; that order is ASSUMED, not "
        "measured on hardware)");

  const bool hardware = is_hardware_capture(trace);
  const std::string source_line = provenance_text(md);
  // One short line by default (each model's summary); the full descriptions (table paths,
  // provenance, rules) under --verbose and in the JSON.
  const std::string sfu = attn::sfu_report(*model.recipe, true);
  const bool sfu_measured = attn::sfu_hardware_measured(*model.recipe);  // the functions it evaluates
  const std::string sfu_line = "SFU model: " + (o.verbose ? sfu : attn::sfu_report(*model.recipe)) +
                               (sfu_measured ? "" : "  [warning: unmeasured on hardware]");
  bool mismatch = oracle_fallbacks != 0;
  for (const auto& c : comparisons) mismatch |= !c.mismatches.empty();

  const attn::RowTrace* row_trace = tracer.traces.empty() ? nullptr : &tracer.traces.front();
  if (!o.plot.empty() && row_trace) {
    // Only a tiled kernel's P·V accumulates key by key; a materialised or correctly rounded
    // model, or a row its mask leaves without keys, has no curve: an empty plot would claim one.
    if (model.recipe->structure != attn::Structure::online_softmax)
      throw InputError("--plot: " + model.name + " is not a tiled kernel (" +
                       (model.recipe->structure == attn::Structure::materialised
                            ? "it materialises P and computes each output's P·V as one dot"
                            : "it rounds the exact result once") +
                       "): --plot draws a tiled kernel's accumulation of P·V key by key, and there is none to draw "
                       "(nothing written; --explain describes its rounding)");
    if (row_trace->cumulative_error_by_key.empty())
      throw InputError("--plot: row " + std::to_string(tr) + " of batch " + std::to_string(tb) + ", head " +
                       std::to_string(th) + " sees no key (the causal mask leaves it none): " + model.name +
                       " accumulates nothing for it, and there is no curve to plot (nothing written)");
    LinePlot p;
    // The batch entry and head whenever the trace has more than one (row 5 of which head?).
    const bool several = in.q.batch > 1 || in.q.heads > 1;
    p.title = "Cumulative rounding error of O-bar, " + model.name + ", row " + std::to_string(tr) +
              (several ? " (batch " + std::to_string(tb) + ", head " + std::to_string(th) + ")" : "") + ", feature " +
              std::to_string(row_trace->plot_feature) +
              (hardware                                     ? ""
               : trace.metadata().source == kEmulatedSource ? " (emulated trace)"
                                                            : " (capture of unknown provenance)");
    p.y_label = "cumulative error of unnormalised O-bar (value units)";
    p.series_label = "cumulative rounding error";
    p.marker_label = "keys with P-bar == 1";
    const auto& cum = row_trace->cumulative_error_by_key;
    const auto& order = row_trace->key_order;
    // Plot along the key index when the kernel visits keys in increasing order; otherwise
    // (FA2 visits KV tiles last to first) along the accumulation step, so the curve stays
    // cumulative, with the P-bar == 1 keys marked at the step that visited them.
    const bool increasing = std::is_sorted(order.begin(), order.end()) && order.size() == cum.size();
    p.x_label =
        increasing ? "key index" : "accumulation step (the kernel's visiting order of keys; KV tiles last to first)";
    for (std::size_t i = 0; i < cum.size(); ++i) {
      p.xs.push_back(increasing ? order[i] : static_cast<double>(i));
      p.ys.push_back(cum[i]);
    }
    for (int k : row_trace->p_equal_one_keys) {
      if (increasing) {
        p.markers.push_back(k);
        continue;
      }
      for (std::size_t i = 0; i < order.size(); ++i)
        if (order[i] == k) p.markers.push_back(static_cast<double>(i));
    }
    if (const std::size_t dropped = non_finite_points(p); dropped > 0)
      std::cerr << "warning: --plot: " << dropped << " of " << p.xs.size()
                << " points are NaN or infinite (the row's output is not finite) and are left out of the plot\n";
    write_line_plot(o.plot, p);  // throws (exit 2) before anything claims it was written
  }
  const auto comma_list = [](const std::vector<std::string>& names) {
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    return list;
  };
  if (!not_compared.empty())
    notes.push_back("note: --row recomputes one row's forward only: " + comma_list(not_compared) +
                    " need the backward of every row and are not compared (replay without --row compares them)");
  if (!not_modelled.empty()) {
    notes.push_back("note: " + model.name + " models its kernel's forward and delta only: " + comma_list(not_modelled) +
                    " are not compared (`flashbits models` names the models with a backward)");
    not_compared.insert(not_compared.end(), not_modelled.begin(), not_modelled.end());
  }
  // --row naming a row whose intermediates the trace does not hold: they are the other rows'.
  if (!intermediate_rows.empty() && !intermediates_compared) {
    std::vector<std::string> intermediates;
    std::string held;
    for (const SafeTensor& t : trace.file().tensors)
      if (t.name.rfind("trace_", 0) == 0 && t.name != "trace_rows") intermediates.push_back(t.name);
    for (int r : intermediate_rows) held += (held.empty() ? "" : ", ") + std::to_string(r);
    if (!intermediates.empty()) {
      notes.push_back("note: not compared: " + comma_list(intermediates) + " hold rows " + held +
                      " of batch 0, head 0, and --row names batch " + std::to_string(tb) + ", head " +
                      std::to_string(th) + ", row " + std::to_string(tr) +
                      " (--row one of those compares its intermediates)");
      not_compared.insert(not_compared.end(), intermediates.begin(), intermediates.end());
    }
  }
  // Tensors the trace holds that replay neither reads nor compares (m, l, s, p, a name it does
  // not know, a delta without dO): named, so that "all compared values match" is never read as
  // covering them.
  std::vector<std::string> unread;
  for (const SafeTensor& t : trace.file().tensors) {
    const bool read = t.name == "q" || t.name == "k" || t.name == "v" || t.name == "do" || t.name == "trace_rows";
    const bool compared =
        std::any_of(comparisons.begin(), comparisons.end(), [&](const Comparison& c) { return c.name == t.name; }) ||
        std::find(not_compared.begin(), not_compared.end(), t.name) != not_compared.end();
    if (!read && !compared) unread.push_back(t.name);
  }
  if (!unread.empty()) {
    notes.push_back("note: not compared: " + comma_list(unread) +
                    " (replay compares o, lse, delta with do, dq, dk, dv, dq_accum, lse_flex, m_log2_tutorial and "
                    "the trace_* intermediates of trace_rows)");
    not_compared.insert(not_compared.end(), unread.begin(), unread.end());
  }

  if (o.json) {
    nlohmann::ordered_json j;
    j["trace"] = o.path;
    j["source"] = md.source;
    j["hardware_capture"] = hardware;
    j["model"] = model.name;
    j["sfu"] = sfu;
    j["sfu_summary"] = attn::sfu_report(*model.recipe);
    j["sfu_hardware_measured"] = sfu_measured;
    if (!oracles.empty()) j["sfu_values_fallbacks"] = oracle_fallbacks;
    j["model_hardware_validated"] = model.recipe->hardware_validated();
    if (!notes.empty()) j["notes"] = notes;
    j["rows_recomputed"] = rows_recomputed;
    j["rows"] = all_rows;
    if (!not_compared.empty()) j["not_compared"] = not_compared;
    j["tensors"] = nlohmann::ordered_json::array();
    for (const auto& c : comparisons) {
      nlohmann::ordered_json t;
      t["name"] = c.name;
      t["compared"] = c.compared;
      t["matching"] = c.matching;
      t["ulps_of"] = c.units.name;
      // The kernel's format where the capture stored the tensor narrower (null otherwise).
      t["rounded_again_from"] = c.rounded_again_from ? nlohmann::ordered_json(c.rounded_again_from->name) : nullptr;
      t["mismatches"] = nlohmann::ordered_json::array();
      for (const auto& m : c.mismatches) {
        nlohmann::ordered_json mm;
        mm["index"] = {m.b, m.h, m.r, m.c};
        mm["captured"] = hex_bits(c.format, m.captured);
        mm["recomputed"] = m.recomputed_exact ? hex_bits(c.format, m.recomputed) : "not representable";
        mm["ulps"] = m.ulps;
        t["mismatches"].push_back(mm);
      }
      j["tensors"].push_back(t);
    }
    if (o.explain && row_trace) {
      j["explain"] = nlohmann::ordered_json::array();
      for (const auto& t : row_trace->tiles) j["explain"].push_back(api::tile_record_json(t));
      // The contract's --explain ends with the final cast; the JSON had only the tiles (found
      // by the contract audit).
      const CastSummary cast = summarize_cast(row_trace->o_cast);
      j["final_cast"] = {{"features", cast.features},
                         {"rounded_up", cast.up},
                         {"rounded_down", cast.down},
                         {"ties", cast.ties},
                         {"mean_error_ulps", cast.mean_error_ulps}};
    }
    j["match"] = !mismatch;
    // `match` is the exit status's verdict on what was compared; a script that reads only it
    // would take a --row replay (dq, dk, dv left out) as checking the whole trace.
    j["complete"] = not_compared.empty();
    std::cout << json_text(j, 2) << "\n";
  } else {
    std::cout << "replay " << o.path << " under " << model.name << "\n" << source_line << "\n" << sfu_line << "\n";
    for (const auto& n : notes) std::cout << n << "\n";
    std::cout << "rows recomputed: " << rows_recomputed << " of " << all_rows << "\n";
    if (!model.recipe->hardware_validated())
      std::cout << "note: parts of this model are not validated on hardware (see `flashbits models`)\n";
    for (const auto& c : comparisons) {
      std::cout << c.name << ": " << c.matching << "/" << c.compared << " match bit for bit";
      if (!c.mismatches.empty()) {
        double worst = 0.0;
        // A NaN against a number has no distance: it shows as nan, not as a 0 that std::max
        // would keep.
        for (const auto& m : c.mismatches)
          if (std::isnan(m.ulps) || std::fabs(m.ulps) > worst) worst = std::fabs(m.ulps);
        std::cout << " (" << c.mismatches.size() << " differ, max |ulps| ";
        if (std::isnan(worst))
          std::cout << "none: a NaN against a number";
        else
          std::cout << worst;
        if (c.units != c.format)
          std::cout << " of " << c.units.name << ": stored as " << c.format.name << ", every value a " << c.units.name
                    << " value";
        if (c.rounded_again_from)
          std::cout << "; stored as " << c.format.name << ", narrower than the " << c.rounded_again_from->name
                    << " the kernel writes: the capture rounded it again";
        std::cout << ")";
      }
      std::cout << "\n";
      if (c.mismatches.size() > kListedMismatches) std::cout << "  " << ulp_distribution(c.mismatches) << "\n";
      std::size_t listed = 0;
      for (const auto& m : c.mismatches) {
        if (listed++ == kListedMismatches) {
          std::cout << "  ... " << (c.mismatches.size() - kListedMismatches) << " more (all of them: --json)\n";
          break;
        }
        char line[200];
        std::snprintf(line, sizeof line, "  %s[%d,%d,%d,%d]: captured %s, recomputed %s, ", c.name.c_str(), m.b, m.h,
                      m.r, m.c, hex_bits(c.format, m.captured).c_str(),
                      m.recomputed_exact ? hex_bits(c.format, m.recomputed).c_str() : "(not representable)");
        std::cout << line;
        if (std::isnan(m.ulps)) {
          std::cout << "a NaN against a number (no distance in ulps)\n";
        } else {
          std::snprintf(line, sizeof line, "%+.6g ulps\n", m.ulps);
          std::cout << line;
        }
      }
    }
    if (o.explain) {
      const attn::Structure structure = model.recipe->structure;
      if (row_trace && row_trace->tiles.empty() && structure == attn::Structure::online_softmax) {
        // A tiled kernel visits no tile for a row its causal mask leaves without keys (a
        // bottom-right mask with more queries than keys): not a materialised model.
        std::cout << "explain row (" << tb << "," << th << "," << tr << "): sees no key (the causal mask leaves it "
                  << "none), so " << model.name << " visits no KV tile and writes O = 0\n";
      } else if (!row_trace || row_trace->tiles.empty()) {
        std::cout << "explain: " << model.name
                  << (structure == attn::Structure::correctly_rounded ? " rounds the exact result once"
                                                                      : " is materialised")
                  << " (no KV tiles); nothing per tile to show\n";
      } else {
        std::cout << "explain row (" << tb << "," << th << "," << tr << "), KV tiles in visiting order:\n";
        std::printf("  %4s %11s %14s %14s %6s %8s %6s %8s %14s\n", "tile", "keys", "running max", "l", "P==1",
                    "sig.ovf", "ties", "up/down", "PV error");
        for (const auto& t : row_trace->tiles) {
          const std::string keys = std::to_string(t.kv_begin) + "-" + std::to_string(t.kv_end - 1);
          const std::string ud = std::to_string(t.rounded_up) + "/" + std::to_string(t.rounded_down);
          std::printf("  %4d %11s %14.8g %14.8g %6d %8d %6d %8s %14.6g\n", t.kv_tile, keys.c_str(), t.running_max,
                      t.running_sum, t.p_equal_one, t.significand_overflows, t.ties, ud.c_str(), t.pv_signed_error);
        }
        const CastSummary cast = summarize_cast(row_trace->o_cast);
        std::printf("  final cast of O (%zu features): %d rounded up, %d down, %d ties, mean error %+.4g ulps\n",
                    cast.features, cast.up, cast.down, cast.ties, cast.mean_error_ulps);
      }
    }
    if (!o.plot.empty()) std::cout << (row_trace ? "plot written to " + o.plot : "no plot: nothing traced") << "\n";
    // fa2-* is the flash_attn package's FA2; PyTorch's bundled copy differs in its exp2 FMA and
    // LSE (pytorch-fa2-*). A capture from torch's SDPA replayed as fa2-* mismatches: the likely
    // cause is named, unless the trace itself names another kernel.
    if (mismatch && model.name.rfind("fa2-sm", 0) == 0 && (md.model.empty() || md.model.rfind("pytorch-fa2-", 0) == 0))
      std::cout << "note: " << model.name
                << " is the flash_attn package's FA2; PyTorch's SDPA flash backend (its bundled FA2: the exponent "
                   "argument unfused, libdevice exp2f, an IEEE reciprocal, its own LSE) is pytorch-fa2-sm80 / "
                   "pytorch-fa2-sm90: a capture from torch's scaled_dot_product_attention replays under those\n";
    std::cout << (mismatch ? "result: MISMATCH" : "result: all compared values match") << "\n";
  }
  return mismatch ? kExitCheckFailed : kExitOk;
}

Runner setup_replay(CLI::App& app) {
  auto o = std::make_shared<ReplayOptions>();
  app.add_option("trace", o->path,
                 "TRACE.safetensors, or a bare capture (.safetensors, .npz, a directory of .npy files) with what it "
                 "lacks stated by the options below")
      ->required();
  app.add_option("--model", o->model, "kernel model (default: the trace's metadata)");
  app.add_option("--recipe", o->recipe, "JSON file changing the model's stage formats and SFU tables");
  app.add_option("--sfu", o->sfu_set,
                 "SFU models: auto (a hardware capture from compute capability 9.0 uses hw-sm90, the "
                 "measured H200 tables; else the model's own), model, or a set name (correct, hw-sm90)")
      ->capture_default_str();
  app.add_option("--sfu-dump", o->sfu_dumps,
                 "FUNC=FILE (ex2, rcp, lg2): the function's outputs for all 2^32 inputs, dumped on a GPU "
                 "(gpu/sfu_dump.cu, FBSFUDUMP1; 16 GiB: for the device machine)");
  app.add_option("--sfu-record", o->sfu_record,
                 "write the (input, output) pairs the SFU models evaluated to FILE (FBSFUVAL1; needs --sfu-dump)");
  app.add_option("--sfu-values", o->sfu_values,
                 "FBSFUVAL1 file: hardware SFU outputs for this replay's inputs (from --sfu-record on the device)");
  // Coordinates are checked as CLI11 reads them: decimal digits in 0..2^31-1 (CLI11 alone took
  // 0x1 and " 1", and answered 1e3 with its raw "Could not convert").
  const CLI::Validator coordinate = integer_in(0, std::numeric_limits<int>::max(), "2^31-1");
  o->batch_option =
      app.add_option("--batch", o->batch, "batch of the row to compare (with --row; default 0)")->check(coordinate);
  o->head_option =
      app.add_option("--head", o->head, "head of the row to compare (with --row; default 0)")->check(coordinate);
  o->row_option = app.add_option("--row", o->row,
                                 "recompute and compare only this row (>= 0): O, LSE and delta; dQ, dK, dV need "
                                 "every row and are skipped (default: all rows)")
                      ->check(coordinate);
  app.add_flag("--all", o->all, "compare every row (the default; not with --row)");
  app.add_flag("--explain", o->explain, "per KV tile story of the row (default row 0)");
  o->plot_option = app.add_option("--plot", o->plot,
                                  "write the cumulative rounding error of O-bar as SVG to this path (not an input)");
  o->feature_option = app.add_option("--feature", o->feature,
                                     "feature (column) of O whose accumulation --plot draws; --explain's counts are "
                                     "over every feature of the row (0..head dim - 1; default 0)")
                          ->check(coordinate);
  app.add_flag("--json", o->json, "JSON output");
  app.add_flag("--verbose", o->verbose,
               "the SFU models' full descriptions (table paths, provenance, rules) instead of one short line");
  add_jobs_option(app, o->jobs);
  add_capture_options(app, o->capture, false);
  return [o] { return run_replay(*o); };
}

}  // namespace
FLASHBITS_SUBCOMMAND(replay, "replay", "Recompute a trace under a kernel model and compare bit by bit", setup_replay);
}  // namespace fb::cli
