// api/models.cpp: model resolution (contract: api/models.hpp).
#include "api/models.hpp"

#include <optional>
#include <stdexcept>

#include "api/recipe_file.hpp"
#include "attention/kernel_models.hpp"
#include "attention/trace_inputs.hpp"

namespace fb::api {

attn::ModelHandle resolve_model(const ModelChoice& choice, const ModelOptionNames& names, const Trace* capture,
                                ModelResolutionNotes* notes) {
  attn::ModelHandle model;
  try {
    model = attn::parse_model_for_inputs(choice.name, choice.dtype);
  } catch (const std::invalid_argument& e) {
    throw InputError(names.model + " " + choice.name + ": " + e.what());
  }
  // A named dtype is the run's input format: a model whose own input format differs (standard-fp16
  // with bf16; standard-fp32 or golden-fp32-flash with bf16, which would run on fp32 inputs as if
  // bf16 had not been asked for) contradicts it. A capture's format is no such request: an
  // fp32-input model still reads bf16 captures (attn::reads_inputs_of, for traces).
  if (const std::optional<Format> sole = attn::sole_input_format(*model.recipe); sole && choice.dtype_given) {
    if (choice.dtype != *sole)
      throw InputError(names.model + " " + choice.name + " runs " + sole->name + " inputs only; " + names.dtype + " " +
                       choice.dtype.name + " contradicts it (leave " + names.dtype + " out)");
  } else if (sole && model.recipe->input != *sole) {
    // No dtype asked for: the model's own (triton-tutorial-sm90 runs fp16 only).
    try {
      model = attn::parse_model_for_inputs(choice.name, *sole);
    } catch (const std::invalid_argument& e) {
      throw InputError(names.model + " " + choice.name + ": " + e.what());
    }
  }
  if (choice.dtype_given && model.recipe->input != choice.dtype)
    throw InputError(names.model + " " + choice.name + " reads " + model.recipe->input.name + " inputs; " +
                     names.dtype + " " + choice.dtype.name + " contradicts it (leave " + names.dtype + " out)");
  return refine_model(std::move(model), choice.sfu_set, choice.recipe_path, names, capture, notes);
}

attn::ModelHandle parse_against_model(const std::string& name, const attn::KernelModel& tested, const Format& dtype) {
  const bool sixteen_bit = tested.input == formats::bf16 || tested.input == formats::fp16;
  return attn::parse_model_for_inputs(name, sixteen_bit ? tested.input : dtype);
}

attn::ModelHandle refine_model(attn::ModelHandle model, const std::string& sfu_set, const std::string& recipe_path,
                               const ModelOptionNames& names, const Trace* capture, ModelResolutionNotes* notes) {
  if (sfu_set == "auto") {
    if (capture == nullptr)
      throw InputError(names.sfu +
                       " auto: picks the set measured on a capture's GPU; there is no capture here "
                       "(give model or a set: " +
                       attn::sfu_set_list() + ")");
    std::string note;
    try {
      model = attn::with_capture_sfu(model, *capture, sfu_set, note);
    } catch (const std::invalid_argument& e) {
      throw InputError(e.what());
    }
    if (notes != nullptr) notes->sfu_note = note;
  } else if (sfu_set != "model") {
    std::optional<attn::ModelHandle> changed;
    try {
      changed = attn::with_sfu_set(model, sfu_set);
    } catch (const std::invalid_argument& e) {
      // with_sfu_set names the set in a table's error ("SFU set NAME: FILE: ..."): said once.
      std::string why = e.what();
      if (const std::string named = "SFU set " + sfu_set + ": "; why.starts_with(named)) why.erase(0, named.size());
      throw InputError(names.sfu + " " + sfu_set + ": " + why);
    }
    if (!changed)
      throw InputError(names.sfu + " " + sfu_set + ": unknown SFU set (" + (capture ? "auto, " : "") + "model, " +
                       attn::sfu_set_list() + ")");
    model = std::move(*changed);
  }
  if (!recipe_path.empty()) {
    // The file's own errors name the file; the option is said first, as the others' are.
    try {
      model = apply_recipe_file(model, recipe_path, notes != nullptr ? &notes->recipe_tables : nullptr);
    } catch (const InputError& e) {
      throw InputError(names.recipe + ": " + e.what());
    }
  }
  return model;
}

}  // namespace fb::api
