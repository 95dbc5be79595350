// api/recipe_file.hpp: `bias-test --model NAME --recipe FILE` (docs/CLI.md): a JSON file that
// changes named stages of a kernel model, to test a kernel variant that has no model name.
//
// File format (docs/COMMANDS.md "Recipe files"):
//   {
//     "name": "fp32 storage",                        optional; shown in reports
//     "stages": { "p_cast": "fp32", "o_buffer_format": "fp32", "lse_format": "fp64" },
//     "sfu": { "ex2": "tables/ex2_h100.fbsfu", "rcp": "correct" }
//   }
// - "stages": KernelModel fields from attn::recipe_stage_fields() to a format name
//   (flashbits formats, custom eXmY included) or "fp64" (no rounding). A stage the model
//   does not read, a format it cannot hold (unsigned, no zero; for p_cast more than 24
//   significant bits or exponents beyond fp32's, fp64, or an exponent range beyond a
//   tensor-core P·V dot's input format) is refused.
// - "sfu": ex2 | rcp | lg2 to "correct" or the path of an FBSFU1 table (relative paths from
//   the recipe file's folder) of that function; refused when the model does not evaluate it.
// - At least one of "stages" and "sfu"; any other key is refused.
//
// Contract: apply_recipe_file() returns a copy of `model` with the changes applied, its name
// "<model> with recipe <name or file>" (its sfu and hardware_validated() follow the tables'
// provenance); `model` is unchanged. Every problem throws InputError
// "<path>: <field>: <what>" (one line; JSON syntax errors name line and column).
#pragma once

#include <string>
#include <vector>

#include "attention/attention.hpp"

namespace fb::api {

// `tables_read`, when given, receives the path of every FBSFU1 table the recipe loaded (inputs
// a command's output paths must not name: refuse_output_over_inputs).
attn::ModelHandle apply_recipe_file(const attn::ModelHandle& model, const std::string& path,
                                    std::vector<std::string>* tables_read = nullptr);

}  // namespace fb::api
