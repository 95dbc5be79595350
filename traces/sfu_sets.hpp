// traces/sfu_sets.hpp: the named SFU sets (find_sfu_set), which load the shipped FBSFU1 tables
// (emu/tables/) through traces/sfu_table_file.hpp.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "emu/sfu/special_functions.hpp"

namespace fb {

// Sets a recipe can name (api/recipe_file.cpp: "sfu": "<set>" or per function):
// - "correct": correct_sfu_set().
// - "hw-sm90": the tables measured on an NVIDIA H200 (sm_90) shipped in emu/tables/
//   (rcp_h200.fbsfu, ex2_h200.fbsfu, lg2_h200.fbsfu, each used when present); a function
//   without a table is correctly rounded and its describe() says loudly that it is
//   UNMEASURED and approximate on that hardware.
// The tables are looked up in sfu_table_dirs(), first match wins: $FLASHBITS_SFU_TABLES alone
// if set, else this source tree's emu/tables and the build's emu/tables (where the build
// extracts emu/tables/*.tar.xz, for tables too large to ship uncompressed), both compiled in.
// Loaded once per process and shared.
std::vector<std::string> sfu_set_names();
// nullopt for an unknown name; a shipped table that exists but does not load, or a path of a
// table's name that is not a regular file, throws std::runtime_error naming the file.
std::optional<SfuSet> find_sfu_set(std::string_view name);
// std::runtime_error when $FLASHBITS_SFU_TABLES names no directory (an empty one is allowed).
std::vector<std::string> sfu_table_dirs();
// Every path a named set may load a table from (each directory of sfu_table_dirs() times each
// table's file name, present or not): files a command's output must never overwrite
// (api::check_output_path refuses them).
std::vector<std::string> sfu_table_paths();

}  // namespace fb
