// api/recipe_file.cpp: reads a recipe file and applies it to a kernel model (contract in
// the header). The knowledge of which stage a model reads lives in attention/kernel_models
// (recipe_stage_fields, uses_special_function); this file only parses and checks.
#include "api/recipe_file.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "attention/kernel_models.hpp"
#include "emu/sfu/special_functions.hpp"
#include "formats/file_read.hpp"
#include "formats/text_escape.hpp"
#include "api/input_error.hpp"
#include "api/json_strict.hpp"
#include "formats/json_text.hpp"
#include "traces/sfu_sets.hpp"
#include "traces/sfu_table_file.hpp"

namespace fb::api {
namespace {

// Keys and values come from the file: escape_unprintable shows control characters and bytes
// that are not UTF-8 as \xNN so the error stays one printable line.
std::string printable(const std::string& text) { return escape_unprintable(text); }

[[noreturn]] void fail(const std::string& path, const std::string& field, const std::string& what) {
  throw InputError(path + ": " + printable(field) + ": " + printable(what));
}

std::string string_member(const std::string& path, const std::string& field, const nlohmann::json& v) {
  if (!v.is_string()) fail(path, field, "expected a string, got " + v.dump());
  return v.get<std::string>();
}

// A stage format, or nullopt for "fp64"; checked against what the engine can hold there.
// `pv_dot` is set for p_cast: P̄ as fed to the model's P·V dot.
std::optional<Format> stage_format(const std::string& path, const std::string& field, const std::string& value,
                                   const attn::DotSpec* pv_dot) {
  if (value == "fp64") {
    if (pv_dot) fail(path, field, "fp64 cannot be fed to the P·V dot (P̄ is held as float there)");
    return std::nullopt;
  }
  Format f;
  if (!parse_format(value, f)) fail(path, field, "unknown format '" + value + "' (see flashbits formats, or fp64)");
  if (!f.is_signed || !f.has_zero()) fail(path, field, value + " cannot hold signed values and zero");
  if (!pv_dot) return f;
  // Every format flashbits parses today fits a float (eXmY stops at e8m23); checked so a
  // wider format added to the table is refused here rather than silently double rounded.
  const Format& fp32 = formats::fp32;
  if (f.precision() > fp32.precision() || f.emax() > fp32.emax() || f.emin() - f.man_bits < fp32.emin() - fp32.man_bits)
    fail(path, field, value + " values are not all exact in a float (P̄ is fed to the P·V dot as float)");
  // A tensor-core dot aligns its terms by its input format's exponent range (subnormal
  // inputs clamp to its emin); wider significands stay exact in its products, a wider
  // exponent range would be aligned as no hardware does. So fp32 P̄ into a bf16 MMA is an
  // experiment the model can run (same exponent range), e5m2 P̄ into an e4m3 wgmma is not.
  if (pv_dot->kind == attn::DotKind::tensor_core && pv_dot->model) {
    const Format& input = pv_dot->model->input;
    if (f.emin() < input.emin() || f.emax() > input.emax())
      fail(path, field,
           value + "'s exponent range [" + std::to_string(f.emin()) + ", " + std::to_string(f.emax()) +
               "] is outside that of the P·V tensor-core dot's input format " + std::string(input.name) + " [" +
               std::to_string(input.emin()) + ", " + std::to_string(input.emax()) + "]");
  }
  return f;
}

}  // namespace

attn::ModelHandle apply_recipe_file(const attn::ModelHandle& model, const std::string& path,
                                    std::vector<std::string>* tables_read) {
  std::string contents;
  try {
    contents = read_file_capped(path, kRecipeFile);
  } catch (const FileReadError& e) {
    throw InputError(e.what());
  }
  nlohmann::json j;
  try {
    j = parse_json_strict(contents);
  } catch (const DuplicateJsonKey& e) {
    fail(path, e.key, "duplicate key (each key may appear once per object)");
  } catch (const StrictJsonError& e) {
    fail(path, "JSON", e.what());
  } catch (const nlohmann::json::exception& e) {
    // parse_error: "[json.exception.parse_error.101] parse error at line 2, column 3: ...";
    // out_of_range (a number too large for a double, found by fuzz_recipe): "[...406] number
    // overflow parsing '1e999'". Either way the text after the bracketed id.
    fail(path, "JSON", json_error_text(e));
  }
  if (!j.is_object()) fail(path, "file", "expected a JSON object");
  for (const auto& [key, value] : j.items()) {
    if (key != "name" && key != "stages" && key != "sfu")
      fail(path, key, "unknown key (a recipe has name, stages, sfu)");
  }
  auto recipe = std::make_shared<attn::KernelModel>(*model.recipe);
  // The label goes into every report's model name: no control character (an escape sequence
  // would reach the terminal), a file name's escaped. Checked before the file's changes: a
  // name of the wrong type is named as such, not hidden behind "changes nothing".
  std::string label = escape_unprintable(std::filesystem::path(path).filename().string());
  if (j.contains("name")) {
    label = string_member(path, "name", j["name"]);
    if (label.empty() || std::any_of(label.begin(), label.end(),
                                     [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == '\x7f'; }))
      fail(path, "name", "expected one non-empty line without control characters");
  }
  if (!j.contains("stages") && !j.contains("sfu")) fail(path, "file", "changes nothing: give stages or sfu");
  std::string changes;
  auto note = [&](const std::string& what) { changes += (changes.empty() ? "" : ", ") + what; };

  if (j.contains("stages")) {
    const nlohmann::json& stages = j["stages"];
    if (!stages.is_object() || stages.empty()) fail(path, "stages", "expected a non-empty object of stage: format");
    for (const auto& [name, value] : stages.items()) {
      const std::string field = "stages." + name;
      const attn::StageField* stage = nullptr;
      std::string known;
      for (const attn::StageField& s : attn::recipe_stage_fields()) {
        if (name == s.name) stage = &s;
        known += (known.empty() ? "" : ", ") + std::string(s.name);
      }
      if (!stage) fail(path, field, "unknown stage (known: " + known + ")");
      // The value's own defects (a number, an unknown format) first: they are wrong for any model.
      const std::string text = string_member(path, field, value);
      const auto format =
          stage_format(path, field, text, name == std::string("p_cast") ? &model.recipe->pv_dot : nullptr);
      if (!stage->used(*model.recipe)) fail(path, field, model.name + " does not use this stage (" + stage->what + ")");
      (*recipe).*(stage->member) = format;
      note(name + "=" + text);
    }
  }

  if (j.contains("sfu")) {
    const nlohmann::json& sfu = j["sfu"];
    // A named SFU set (traces/sfu_sets.hpp find_sfu_set), whole ("sfu": "hw-sm90": every
    // function the model evaluates) or per function ("ex2": "hw-sm90"); names take precedence
    // over table paths.
    auto named_set = [&](const std::string& field, const std::string& text) -> std::optional<SfuSet> {
      try {
        return find_sfu_set(text);
      } catch (const std::runtime_error& e) {
        fail(path, field, "SFU set " + text + ": " + e.what());
      }
    };
    auto set_names = [] {
      std::string names;
      for (const std::string& n : sfu_set_names()) names += (names.empty() ? "" : ", ") + n;
      return names;
    };
    if (sfu.is_string()) {
      const std::string text = sfu.get<std::string>();
      std::optional<SfuSet> set = named_set("sfu", text);
      if (!set) fail(path, "sfu", "unknown SFU set '" + text + "' (known: " + set_names() + ")");
      bool any = false;
      for (SpecialFunction f : {SpecialFunction::ex2, SpecialFunction::rcp, SpecialFunction::lg2}) {
        if (!attn::uses_special_function(*model.recipe, f)) continue;
        recipe->sfu.model_for(f) = set->model_for(f);
        any = true;
      }
      // As for a function the model does not evaluate (below): a set that changes nothing
      // would still be named in the report as applied.
      if (!any) fail(path, "sfu", model.name + " evaluates no special function (ex2, rcp, lg2)");
      note("sfu=" + text);
    } else if (!sfu.is_object() || sfu.empty()) {
      fail(path, "sfu",
           "expected the name of an SFU set (" + set_names() + ") or a non-empty object of function: table");
    }
    static const nlohmann::json kNoFunctions = nlohmann::json::object();
    const nlohmann::json& functions = sfu.is_object() ? sfu : kNoFunctions;
    for (const auto& [name, value] : functions.items()) {
      const std::string field = "sfu." + name;
      std::optional<SpecialFunction> function;
      for (SpecialFunction candidate : {SpecialFunction::ex2, SpecialFunction::rcp, SpecialFunction::lg2})
        if (name == to_string(candidate)) function = candidate;
      if (!function) fail(path, field, "unknown function (ex2, rcp, lg2)");
      const SpecialFunction f = *function;
      std::shared_ptr<const SpecialFunctionModel>& slot = recipe->sfu.model_for(f);
      if (!attn::uses_special_function(*model.recipe, f)) fail(path, field, model.name + " does not evaluate " + name);
      const std::string text = string_member(path, field, value);
      if (text == "correct") {
        slot = make_correct_model(f);
      } else if (std::optional<SfuSet> set = named_set(field, text)) {
        slot = set->model_for(f);
      } else {
        std::filesystem::path table = text;
        if (table.empty()) fail(path, field, "expected \"correct\" or the path of an FBSFU1 table");
        if (table.is_relative()) table = std::filesystem::path(path).parent_path() / table;
        std::error_code ec;
        if (!std::filesystem::exists(table, ec))
          fail(path, field, table.string() + ": no such file (a relative path is read from the recipe's folder)");
        if (!std::filesystem::is_regular_file(table, ec)) fail(path, field, table.string() + " is not a regular file");
        std::unique_ptr<SpecialFunctionModel> loaded;
        try {
          loaded = load_table_model(table.string());
        } catch (const std::runtime_error& e) {
          fail(path, field, e.what());
        }
        if (loaded->function() != f)
          fail(path, field,
               table.string() + " is a table of " + std::string(to_string(loaded->function())) + ", not " + name);
        slot = std::move(loaded);
        if (tables_read) tables_read->push_back(table.string());
      }
      note(name + "=" + text);
    }
  }

  // A stage that keeps O in fp32 leaves a +o-MODE with no cast to round.
  if (recipe->o_round != RoundingMode::rne) {
    if (const std::string why = attn::why_o_cast_rounds_nothing(*recipe); !why.empty())
      fail(path, "stages",
           "with this recipe " + why + ": " + model.name + "'s +o-" + std::string(to_string(recipe->o_round)) +
               " would round nothing");
  }

  attn::ModelHandle out;
  out.name = model.name + " with recipe " + label + " (" + changes + ")";
  out.recipe = std::move(recipe);
  return out;
}

}  // namespace fb::api
