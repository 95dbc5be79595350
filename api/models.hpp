// api/models.hpp: the one way a kernel model is built from what a user names, for every face
// (the CLI's --model/--dtype/--sfu/--recipe, Python's model=, dtype=, sfu=, recipe=).
//
// Contract, in this order:
//  1. the name with its variant suffixes, for inputs of `dtype` (attn::parse_model_for_inputs:
//     a model that names its own input format keeps it);
//  2. the SFU set: "model" keeps the model's own; a set name (correct, hw-sm90) replaces every
//     special function the model evaluates, and is refused for a model that evaluates none
//     (it would change nothing); "auto" (a capture only) picks the set measured on the
//     capture's GPU (attn::with_capture_sfu);
//  3. the recipe file (api/recipe_file.hpp), which replaces what it names: it wins over the set.
// Every problem throws InputError naming the caller's option (ModelOptionNames: "--model" on
// the command line, "model" in Python) and the word.
#pragma once

#include <string>
#include <vector>

#include "api/input_error.hpp"
#include "attention/attention.hpp"
#include "formats/format.hpp"
#include "traces/trace.hpp"

namespace fb::api {

struct ModelChoice {
  std::string name;               // model name with variant suffixes
  Format dtype = formats::bf16;   // the inputs' format
  std::string sfu_set = "model";  // model | a set name | auto (with a capture)
  std::string recipe_path;        // empty: none
  // The user named `dtype` (--dtype, dtype=): a model that names another input format
  // (standard-fp16, fa-bf16acc for fp16) is then refused rather than the dtype ignored.
  bool dtype_given = false;
};
struct ModelOptionNames {
  std::string model = "--model", sfu = "--sfu", dtype = "--dtype", recipe = "--recipe";
};
// What resolving found besides the model: the line saying what "auto" chose (empty when it
// chose nothing), and the SFU tables the recipe loaded (inputs no output may overwrite).
struct ModelResolutionNotes {
  std::string sfu_note;
  std::vector<std::string> recipe_tables;
};

// bias-test's --against model (against=): parsed for the inputs the tested model reads, its
// own input format where that is bf16 or fp16 (fp16 for triton-tutorial-sm90 given no dtype),
// else `dtype`. Throws std::invalid_argument, which each caller names with its option.
attn::ModelHandle parse_against_model(const std::string& name, const attn::KernelModel& tested, const Format& dtype);

attn::ModelHandle resolve_model(const ModelChoice& choice, const ModelOptionNames& names = {},
                                const Trace* capture = nullptr, ModelResolutionNotes* notes = nullptr);
// Steps 2 and 3 on a model already parsed (replay: the model a trace's metadata names).
attn::ModelHandle refine_model(attn::ModelHandle model, const std::string& sfu_set, const std::string& recipe_path,
                               const ModelOptionNames& names = {}, const Trace* capture = nullptr,
                               ModelResolutionNotes* notes = nullptr);

}  // namespace fb::api
