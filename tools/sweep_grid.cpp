// tools/sweep_grid.cpp: a sweep run's grid from its options (contract in sweep_grid.hpp).
#include "tools/sweep_grid.hpp"
#include "studies/scenarios.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <memory>
#include <stdexcept>

#include "attention/kernel_models.hpp"
#include "tools/cli_common.hpp"

namespace fb::cli {
namespace {

// A grid cell's model, or why the model cannot run in that format.
struct ResolvedModel {
  std::optional<attn::ModelHandle> model;
  std::string label;         // the row's model column (a bare `standard` made explicit)
  std::string not_runnable;  // set when model is empty
};

ResolvedModel grid_cell_model(const char* option, const std::string& model, const Format& format,
                              const std::string& round, int sr_bits) {
  const std::size_t plus = model.find('+');
  std::string base = model.substr(0, plus);
  const std::string variants = plus == std::string::npos ? "" : model.substr(plus);
  const std::string format_name = format.name;
  if (base == "standard") {
    if (format == formats::fp32 || format == formats::bf16 || format == formats::fp16) {
      base = "standard-" + format_name;
    } else if (format == formats::e4m3) {
      base = "standard-fp8";
    } else {
      return {std::nullopt, model, "standard has no " + format_name + " form (fp32, bf16, fp16, e4m3)"};
    }
  }
  const std::string label = base + variants;
  const std::string name = round == "rne" ? label : label + "+o-" + round;
  // Models that do not name their dtype take bf16 or fp16 from the format.
  const Format dtype = format == formats::fp16 ? formats::fp16 : formats::bf16;
  auto parse = [&](const std::string& text) {
    try {
      return attn::parse_kernel_model(text, dtype);
    } catch (const std::invalid_argument& e) {
      throw InputError(std::string(option) + " " + model + (text == label ? "" : " with --round " + round) + ": " +
                       e.what());
    }
  };
  const attn::ModelHandle own = parse(label);  // the model in its own recipe's final cast
  const attn::KernelModel& r = *own.recipe;
  // The fp8 models run in their fp8 format (CLI.md): they take bf16 inputs and quantise
  // them, so a bf16 cell would repeat the e4m3 cell's figures under another label.
  const bool runs_in_format = r.fp8.enabled ? r.fp8.format == format : r.input == format;
  if (!runs_in_format) {
    std::string runs_in = r.fp8.enabled ? r.fp8.format.name : r.input.name;
    // A model that does not name its dtype runs in both 16-bit formats, unless its kernel refuses
    // bf16 whatever the shape (the Triton tutorial: fp16 only). An fp8 model runs in its fp8
    // format alone, whatever its inputs are drawn in.
    if (!r.fp8.enabled && format != formats::bf16 && format != formats::fp16 &&
        attn::parse_kernel_model(label, formats::fp16).recipe->input == formats::fp16 && r.input == formats::bf16)
      runs_in = attn::unmodelled_shape(r, attn::RunShape{}).empty() ? "bf16 or fp16" : "fp16";
    return {std::nullopt, label, label + " runs in " + runs_in + ", not " + format_name};
  }
  // A model with no final cast of O to round (standard-fp32) cannot take --round MODE: its
  // cell is skipped with a note, as a model that does not run in the format is.
  if (round != "rne") {
    if (const std::string why = attn::why_o_cast_rounds_nothing(r); !why.empty())
      return {std::nullopt, label, "--round " + round + ": " + why};
  }
  attn::ModelHandle h = round == "rne" ? own : parse(name);
  if (round == "sr" && sr_bits != 24) {
    auto recipe = std::make_shared<attn::KernelModel>(*h.recipe);
    recipe->o_sr_bits = sr_bits;
    h.recipe = recipe;
  }
  return {h, label, ""};
}

}  // namespace

SweepGrid sweep_grid(const SweepRun& run) {
  const std::vector<std::string> formats = split_list(run.formats, "--formats");
  const std::vector<std::string> rounds = split_list(run.rounds, "--round");
  const std::vector<std::string> models = split_model_list(run.models, "--model");
  const std::vector<std::string> scenarios = split_list(run.scenarios, "--scenario");
  // Bounded before any model is parsed: merge reads these lists from files it is given.
  const long double cells = static_cast<long double>(formats.size()) * rounds.size() * models.size() * scenarios.size();
  if (cells > static_cast<long double>(kMaxSweepCells))
    throw InputError("--formats x --round x --model x --scenario: " + std::to_string(static_cast<long long>(cells)) +
                     " configurations, over the limit of " + std::to_string(kMaxSweepCells) +
                     "; split the grid into several sweeps");
  std::vector<Format> parsed_formats;
  for (const auto& fmt : formats) {
    parsed_formats.push_back(parse_format_or_throw(fmt, "--formats"));
    // Two names of one format (fp16 and e5m10) would run its rows twice under two labels.
    for (std::size_t i = 0; i + 1 < parsed_formats.size(); ++i)
      if (parsed_formats[i] == parsed_formats.back())
        throw InputError("--formats " + run.formats + ": " + formats[i] + " and " + fmt + " are one format; give one");
  }
  for (const auto& round : rounds) parse_mode_or_throw(round, "--round");
  for (const auto& scenario : scenarios)
    if (!attn::known_scenario(scenario))
      throw InputError("--scenario " + scenario + ": unknown scenario (" + attn::scenario_list() + ")");
  SweepGrid grid;
  std::map<std::string, std::string> model_of_configuration;  // configuration -> the --model entry
  // (canonical kernel name, format) -> the --model entry: two spellings of one kernel
  // (fa2-sm80+o-fp32+dynmax and fa2-sm80+dynmax+o-fp32) would run it twice under two labels.
  // (Entries of one label, standard and standard-bf16, are the configuration check's below.)
  std::map<std::pair<std::string, std::string>, std::pair<std::string, std::string>> model_of_kernel;
  const int sr_bits = static_cast<int>(run.sr_bits);
  for (std::size_t f = 0; f < formats.size(); ++f)
    for (const auto& round : rounds)
      for (const auto& model : models) {
        const ResolvedModel resolved = grid_cell_model("--model", model, parsed_formats[f], round, sr_bits);
        std::optional<ResolvedModel> baseline;
        // The baseline's final cast is its own recipe's (rne); the pair shares inputs and seed.
        if (!run.against.empty())
          baseline = grid_cell_model("--against", run.against, parsed_formats[f], "rne", sr_bits);
        std::string why = !resolved.model                ? resolved.not_runnable
                          : baseline && !baseline->model ? baseline->not_runnable
                                                         : resolved.not_runnable;
        // A kernel that refuses the sweep's shape in this format (the Triton tutorial: bf16, or a
        // head dim its asserts reject) is a cell it cannot run: skipped with a note, as a format
        // it does not run in is, not the whole grid ended by its refusal. Every trial has one
        // head of seqlen queries and keys, with the backward.
        if (why.empty()) {
          const attn::RunShape shape{
              1,     1,   1, static_cast<int>(run.seqlen), static_cast<int>(run.seqlen), static_cast<int>(run.headdim),
              false, true};
          const std::vector<const ResolvedModel*> pair = {&resolved, baseline ? &*baseline : nullptr};
          for (const ResolvedModel* m : pair)
            if (m && why.empty())
              if (const std::string refusal = attn::unmodelled_shape(*m->model->recipe, shape); !refusal.empty())
                why = m->model->name + " in " + formats[f] + " does not model this shape: " + refusal;
        }
        if (resolved.model) {
          if (const auto [at, first] = model_of_kernel.emplace(std::pair(resolved.model->name, formats[f]),
                                                               std::pair(model, resolved.label));
              !first && at->second.second != resolved.label)
            throw InputError("--model " + run.models + ": " + at->second.first + " and " + model + " are one kernel (" +
                             resolved.model->name + "); give one");
        }
        if (!why.empty()) {
          if (std::find(grid.skipped.begin(), grid.skipped.end(), why) == grid.skipped.end())
            grid.skipped.push_back(why);
          continue;  // not grid cells: shards agree on this without running anything
        }
        for (const auto& scenario : scenarios) {
          SweepCell c{SweepRow{}, *resolved.model, resolved.model->recipe->input, std::nullopt};
          c.row.index = static_cast<long long>(grid.cells.size());
          c.row.format = formats[f];
          c.row.round = round;
          c.row.model = resolved.label;
          if (baseline) {
            c.against = *baseline->model;
            c.row.model = resolved.label + "-vs-" + baseline->label;
          }
          c.row.scenario = scenario;
          c.row.seqlen = static_cast<int>(run.seqlen);
          c.row.headdim = static_cast<int>(run.headdim);
          // Two entries that name one configuration (standard and standard-bf16 in bf16) would
          // run it twice under one name.
          if (const auto [at, first] = model_of_configuration.emplace(c.row.configuration(), model); !first)
            throw InputError("--model " + run.models + ": " + at->second + " and " + model +
                             " are both configuration " + at->first + "; give one");
          grid.cells.push_back(std::move(c));
        }
      }
  // Every list holds an entry (split_list), so every cell either runs or was skipped.
  if (grid.cells.empty()) {
    throw InputError("no configuration can run: " + grid.skipped.front() +
                     (grid.skipped.size() > 1 ? " (and " + std::to_string(grid.skipped.size() - 1) + " more)" : ""));
  }
  return grid;
}

std::vector<std::string> sweep_grid_notes(const SweepGrid& grid) {
  std::vector<std::string> notes;
  for (const std::string& why : grid.skipped) notes.push_back("note: skipped: " + why);
  std::vector<std::string> unvalidated;
  const auto add = [&](const attn::ModelHandle& m) {
    if (!m.recipe->hardware_validated() &&
        std::find(unvalidated.begin(), unvalidated.end(), m.name) == unvalidated.end())
      unvalidated.push_back(m.name);
  };
  for (const SweepCell& c : grid.cells) add(c.model);  // --model's first, then --against's
  for (const SweepCell& c : grid.cells)
    if (c.against) add(*c.against);
  if (!unvalidated.empty()) {
    std::string names;
    for (const std::string& n : unvalidated) names += (names.empty() ? "" : ", ") + n;
    notes.push_back("note: " + names + (unvalidated.size() > 1 ? " use" : " uses") +
                    " parts not yet validated on hardware (see `flashbits models`)");
  }
  return notes;
}

}  // namespace fb::cli
