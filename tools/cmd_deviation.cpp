// tools/cmd_deviation.cpp: `flashbits deviation` (docs/CLI.md), Golden et al.'s framework: per
// kernel model and size, |O - O_golden| (max, mean, std) and RMSE, where O_golden is
// exact_attention (high precision) of the SAME inputs, which are drawn by the --inputs
// scenario and rounded to the model's input dtype. std is the population std of
// |O - O_golden| over every element of O. --tiles BrxBc overrides the recipe's tile
// sizes (tiled models only; a materialised model gets one row per size, tiles "none", and
// --tiles with no tiled model is refused).
// JSON: {"rows":[{"model":..,"seqlen":..,"tiles":..,"max":..,"mean":..,"std":..,"rmse":..}]},
// and "notes": ["MODEL: ...", ...] for what the models take that no hardware measured (the
// lines the text prints as "note: MODEL: ..."; absent when there are none).
// A --heads or --headdim of 0 is bad input (exit 2). A model whose O is NaN or infinite on
// the (finite) inputs gets no figures: its row names the rows of O that are not finite
// (JSON: "non_finite_rows" instead of the statistics) and the command exits 1.
// --jobs J: the engine's threads for each model run (RunOptions::threads, over (head, row
// block)); the output does not depend on J.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "attention/problem_limits.hpp"
#include "api/models.hpp"
#include "attention/attention.hpp"
#include "attention/kernel_models.hpp"
#include "tools/cli_common.hpp"
#include "studies/measure.hpp"
#include "studies/scenarios.hpp"

namespace fb::cli {
namespace {

struct DeviationOptions {
  std::string models, inputs = "normal", seqlens = "1024", tiles, dtype = "bf16";
  int headdim = 64, heads = 1, jobs = default_jobs();
  std::uint64_t seed = 0;
  bool json = false;
  CLI::Option* dtype_option = nullptr;
};

int run_deviation(const DeviationOptions& o) {
  // The CLI's input name "normal" is the engine's "random" (N(0,1)).
  std::string scenario = o.inputs == "normal" ? "random" : o.inputs;
  if (!attn::known_scenario(scenario))
    throw InputError("--inputs " + o.inputs + ": expected normal (N(0,1), the scenario random) or a scenario (" +
                     attn::scenario_list() + ")");
  const Format dtype = parse_format_or_throw(o.dtype, "--dtype");
  std::vector<int> seqlens;
  for (const auto& s : split_list(o.seqlens, "--seqlen")) {
    // Every character a digit, after an optional '+' (as every integer option reads, docs/CLI.md):
    // std::stoi read "1e8" as 1 and "16x" as 16.
    const std::string_view digits =
        s.size() > 1 && s[0] == '+' && s[1] >= '0' && s[1] <= '9' ? std::string_view(s).substr(1) : std::string_view(s);
    int n = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
    if (ec != std::errc() || end != digits.data() + digits.size() || n < 1)
      throw InputError("--seqlen " + s + ": expected an integer 1.." + std::to_string(std::numeric_limits<int>::max()));
    // split_list compares the words: 64 and +64 are one length.
    if (std::find(seqlens.begin(), seqlens.end(), n) != seqlens.end())
      throw InputError("--seqlen " + o.seqlens + ": " + std::to_string(n) + " is given twice");
    seqlens.push_back(n);
  }
  std::vector<std::pair<int, int>> tiles;  // (Br, Bc); (0, 0) = the recipe's
  for (const auto& t : o.tiles.empty() ? std::vector<std::string>{} : split_list(o.tiles, "--tiles")) {
    const auto pair = read_positive_pair(t, "xX");
    if (!pair) throw InputError("--tiles '" + t + "': expected BrxBc, two positive integers and an x, e.g. 64x128");
    if (const std::string refusal = attn::tile_size_refusal(pair->first, pair->second); !refusal.empty())
      throw InputError("--tiles " + t + ": " + refusal);
    tiles.push_back(*pair);
  }
  if (tiles.empty()) tiles.push_back({0, 0});
  std::vector<attn::ModelHandle> models;
  // As every command: a --dtype the model contradicts (standard-fp16 with bf16) is refused;
  // resolve_model's errors name --models and the entry.
  std::map<std::string, std::string> entry_of_kernel;  // canonical name -> the --models entry
  for (const auto& m : split_model_list(o.models, "--models")) {
    models.push_back(api::resolve_model({m, dtype, "model", "", o.dtype_option->count() > 0}, {"--models"}));
    // Two spellings of one kernel (fa2-sm80 and fa2-sm80+o-rne) would print one row twice.
    if (const auto [at, first] = entry_of_kernel.emplace(models.back().name, m); !first)
      throw InputError("--models " + o.models + ": " + at->second + " and " + m + " are one kernel (" +
                       models.back().name + "); give one");
  }
  if (models.empty()) throw InputError("--models: expected at least one model");
  const auto tiled = [](const attn::ModelHandle& m) { return m.recipe->structure == attn::Structure::online_softmax; };
  // A materialised model has no tiles: it gets one row (tiles "none"), not one per --tiles
  // entry, and --tiles with no tiled model would be ignored, so it is refused.
  if (!o.tiles.empty() && std::none_of(models.begin(), models.end(), tiled))
    throw InputError("--tiles " + o.tiles + ": none of --models " + o.models +
                     " is tiled (a materialised model has no tiles); drop --tiles");
  if (o.heads < 1 || o.headdim < 1)
    throw InputError("--heads " + std::to_string(o.heads) + " --headdim " + std::to_string(o.headdim) +
                     ": expected positive sizes (an empty problem has no deviation)");
  for (const int n : seqlens) check_problem_size(1, o.heads, n, o.headdim);
  const int jobs = jobs_or_throw(o.jobs);

  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  // The model column is as wide as the longest name shown (at least 26, as before): a long
  // one (fa3-fp8-sm90+block-quant+hadamard) pushed its row's other columns out of line.
  int model_width = 26;
  for (const auto& model : models) model_width = std::max(model_width, static_cast<int>(model.name.size()));
  if (!o.json)
    std::printf("%-*s %7s %-9s %11s %11s %11s %11s\n", model_width, "model", "seqlen", "tiles", "max", "mean", "std",
                "rmse");
  // What the models take that no hardware measured, "MODEL: ..." a line, as bias-test's notes:
  // printed under the table, and the JSON's `notes` (absent when there are none).
  std::vector<std::string> notes;
  const auto note = [&](std::string line) {
    if (std::find(notes.begin(), notes.end(), line) == notes.end()) notes.push_back(std::move(line));
  };
  std::vector<std::string> non_finite;  // models whose output was NaN or infinite
  std::uint64_t rows_to_run = 0, runs = 0;
  for (int n : seqlens) rows_to_run += static_cast<std::uint64_t>(n) * static_cast<std::uint64_t>(o.heads);
  for (const auto& model : models) runs += tiled(model) ? tiles.size() : 1;
  ProgressBar progress("rows", rows_to_run * runs);
  const std::vector<std::pair<int, int>> recipe_tiles = {{0, 0}};
  for (const auto& model : models) {
    const attn::KernelModel& recipe = *model.recipe;
    if (const std::string unmeasured = attn::unmeasured_parts(recipe); !unmeasured.empty())
      note(model.name + ": " + unmeasured);
    for (int n : seqlens) {
      const auto in = attn::make_scenario(scenario, o.seed, 1, o.heads, n, o.headdim, model.recipe->input, false);
      attn::check_inputs_support_statistics(in, "--inputs " + o.inputs);
      for (std::string& line : attn::unmeasured_shape_notes(recipe, attn::run_shape(in)))
        note(model.name + ": " + (line.rfind("note: ", 0) == 0 ? line.substr(6) : line));
      const auto golden = attn::exact_attention(in);
      for (auto [br, bc] : tiled(model) ? tiles : recipe_tiles) {
        attn::RunOptions opt;
        opt.seed = o.seed;
        opt.threads = jobs;
        opt.block_m = br;
        opt.block_n = bc;
        opt.progress = &progress.counter();
        attn::AttentionOutputs out;
        try {
          out = attn::run_attention(model, in, opt);
        } catch (const std::invalid_argument& e) {  // e.g. +hadamard with a head dim not a power of two
          // Tiles the model cannot take are --tiles' fault (FA2's multiple of 8 keys).
          throw InputError(
              (br ? "--tiles " + std::to_string(br) + "x" + std::to_string(bc) + " with " : std::string()) +
              "--models " + model.name + ": " + e.what());
        }
        std::string tile_text = "none";
        if (model.recipe->structure == attn::Structure::online_softmax) {
          const auto t = model.recipe->tiles_for(o.headdim, n, in.causal);
          tile_text = std::to_string(br ? br : t.block_m) + "x" + std::to_string(bc ? bc : t.block_n);
        }
        // A model whose O is NaN or infinite on these finite inputs has no deviation: its
        // rows are named and the command exits 1 (no figure is printed for it); the row keeps
        // its tiles, which tell one --tiles entry's row from another's.
        const std::vector<std::size_t> bad = attn::non_finite_rows(out.o);
        if (!bad.empty()) {
          const std::string where = model.name + " at seqlen " + std::to_string(n) + ": O is non-finite in " +
                                    std::to_string(bad.size()) + " row(s) " + attn::describe_rows(bad, o.heads, n);
          non_finite.push_back(where);
          if (o.json) {
            nlohmann::ordered_json r;
            r["model"] = model.name;
            r["seqlen"] = n;
            r["tiles"] = tile_text;
            r["non_finite_rows"] = where;
            rows.push_back(r);
          } else {
            progress.clear_line();
            std::printf("%-*s %7d %-9s non-finite output: %s\n", model_width, model.name.c_str(), n, tile_text.c_str(),
                        where.c_str());
            std::fflush(stdout);
          }
          continue;
        }
        double max = 0, sum = 0, sumsq = 0;
        for (std::size_t i = 0; i < out.o.data.size(); ++i) {
          const double d = std::fabs(out.o.data[i] - golden.o.data[i]);
          max = std::max(max, d);
          sum += d;
          sumsq += d * d;
        }
        const double count = static_cast<double>(out.o.data.size());
        const double mean = sum / count;
        const double std = std::sqrt(std::max(0.0, sumsq / count - mean * mean));
        const double rmse = std::sqrt(sumsq / count);
        if (o.json) {
          nlohmann::ordered_json r;
          r["model"] = model.name;
          r["seqlen"] = n;
          r["tiles"] = tile_text;
          r["max"] = max;
          r["mean"] = mean;
          r["std"] = std;
          r["rmse"] = rmse;
          rows.push_back(r);
        } else {
          progress.clear_line();
          std::printf("%-*s %7d %-9s %11.4g %11.4g %11.4g %11.4g\n", model_width, model.name.c_str(), n,
                      tile_text.c_str(), max, mean, std, rmse);
          std::fflush(stdout);
        }
      }
    }
  }
  progress.finish();
  if (o.json) {
    nlohmann::ordered_json j;
    j["rows"] = rows;
    if (!notes.empty()) j["notes"] = notes;
    std::cout << json_text(j) << "\n";
  } else {
    std::printf("inputs: %s, head dim %d, %d head(s), seed %llu; golden = exact_attention of the same inputs\n",
                o.inputs.c_str(), o.headdim, o.heads, static_cast<unsigned long long>(o.seed));
    for (const std::string& line : notes) std::printf("note: %s\n", line.c_str());
  }
  return non_finite.empty() ? kExitOk : kExitCheckFailed;
}

Runner setup_deviation(CLI::App& app) {
  auto o = std::make_shared<DeviationOptions>();
  app.add_option("--models", o->models, "kernel models, comma-separated")->required();
  app.add_option("--inputs", o->inputs,
                 "normal (N(0,1), the scenario random) or a scenario: " + attn::scenario_list() + " (default normal)");
  app.add_option("--seqlen", o->seqlens, "sequence lengths, comma-separated (default 1024)");
  app.add_option("--headdim", o->headdim, "head dimension (default 64)")->check(headdim_in());
  app.add_option("--heads", o->heads, "heads (default 1)")->check(size_in());
  app.add_option("--tiles", o->tiles, "tile sizes BrxBc, comma-separated (default: the recipe's)");
  o->dtype_option = app.add_option("--dtype", o->dtype, "dtype for models that do not name one (default bf16)");
  add_seed_option(app, o->seed, "seed (default 0)");
  add_jobs_option(app, o->jobs);
  app.add_flag("--json", o->json, "JSON output");
  return [o] { return run_deviation(*o); };
}

}  // namespace
FLASHBITS_SUBCOMMAND(deviation, "deviation", "Golden et al.: Flash vs Baseline deviation from an fp64 golden output",
                     setup_deviation);
}  // namespace fb::cli
