// traces/sfu_sets.cpp: the named SFU sets (traces/sfu_sets.hpp find_sfu_set).
//
// "hw-sm90" holds what was measured on an NVIDIA H200 (sm_90, driver 580.159.04, CUDA 13.0)
// with fb-sfu-probe (gpu/README.md), converted with fb-sfu-table-convert into emu/tables/:
//   rcp_h200.fbsfu  rcp.approx.ftz.f32: rcp_mantissa table; its model reproduced the hardware
//                   on all 2^32 inputs on the device (0 mismatches).
//   ex2_h200.fbsfu  ex2.approx.ftz.f32: ex2_sign_magnitude table, when present (see
//                   emu/tables/README.md for how far it is verified).
//   lg2_h200.fbsfu  lg2.approx.ftz.f32: lg2_extended (or lg2_exponent_split) table, when present.
// A function without a table is correctly rounded, with a note saying it is UNMEASURED. A table
// too large to ship uncompressed goes in as emu/tables/<name>.tar.xz; emu/CMakeLists.txt
// extracts it into the build's emu/tables at configure time (CMake's own xz, no dependency).
#include "traces/sfu_sets.hpp"

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>

#include "emu/sfu/special_functions.hpp"
#include "traces/sfu_table_file.hpp"

#ifndef FLASHBITS_SFU_TABLE_DIR
#define FLASHBITS_SFU_TABLE_DIR "emu/tables"
#endif
#ifndef FLASHBITS_SFU_TABLE_BUILD_DIR
#define FLASHBITS_SFU_TABLE_BUILD_DIR FLASHBITS_SFU_TABLE_DIR
#endif

namespace fb {
namespace {

// The H200 measurement's verdicts, for the note of a function the set has no table for.
const char* unmeasured_note(SpecialFunction f) {
  switch (f) {
    case SpecialFunction::ex2:
      return "-- hw-sm90 has no ex2 table (emu/tables/ex2_h200.fbsfu missing): ex2.approx.ftz.f32 on sm_90 is "
             "APPROXIMATE (H200: up to 2 ulp from correct rounding, 4.4% of inputs differ); results using it "
             "are not bit-exact";
    case SpecialFunction::rcp:
      return "-- hw-sm90 has no rcp table (emu/tables/rcp_h200.fbsfu missing): rcp.approx.ftz.f32 on sm_90 is "
             "APPROXIMATE (H200: up to 1 ulp, 13% of inputs differ); results using it are not bit-exact";
    case SpecialFunction::lg2:
      return "-- hw-sm90 has no lg2 table (emu/tables/lg2_h200.fbsfu missing): lg2.approx.ftz.f32 on sm_90 is "
             "APPROXIMATE (H200: about half the inputs differ, by up to 2^24 ulps near 1); results using it are "
             "not bit-exact";
  }
  return "";
}

const char* table_file(SpecialFunction f) {
  switch (f) {
    case SpecialFunction::ex2:
      return "ex2_h200.fbsfu";
    case SpecialFunction::rcp:
      return "rcp_h200.fbsfu";
    case SpecialFunction::lg2:
      return "lg2_h200.fbsfu";
  }
  return "";
}

// One load per path per process: a 2^23-entry table takes about 0.3 s to decode.
std::shared_ptr<const SpecialFunctionModel> cached_table(const std::string& path) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<const SpecialFunctionModel>> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(path);
  if (it != cache.end()) return it->second;
  std::shared_ptr<const SpecialFunctionModel> model = load_table_model(path);
  cache.emplace(path, model);
  return model;
}

SfuSet hw_sm90_set() {
  SfuSet set;
  const std::vector<std::string> dirs = sfu_table_dirs();
  for (SpecialFunction f : {SpecialFunction::ex2, SpecialFunction::rcp, SpecialFunction::lg2}) {
    std::filesystem::path path;
    for (const std::string& dir : dirs) {
      std::error_code ec;
      const std::filesystem::path candidate = std::filesystem::path(dir) / table_file(f);
      if (std::filesystem::is_regular_file(candidate, ec)) {
        path = candidate;
        break;
      }
      // Something else by a table's name (a FIFO, a folder) is no table: read as absent, the
      // function ran correctly rounded with no word beyond its UNMEASURED note.
      if (std::filesystem::exists(candidate, ec))
        throw std::runtime_error(candidate.string() + ": not a regular file (an FBSFU1 table is one)");
    }
    std::shared_ptr<const SpecialFunctionModel> model;
    if (!path.empty()) {
      model = cached_table(path.string());
      if (model->function() != f) {
        throw std::runtime_error(path.string() + ": is a table of " + std::string(to_string(model->function())) +
                                 ", not " + std::string(to_string(f)));
      }
    } else {
      model = make_correct_model(f, unmeasured_note(f));
    }
    set.model_for(f) = std::move(model);
  }
  return set;
}

// The table folders as set: $FLASHBITS_SFU_TABLES alone, else the two compiled in; whether they
// exist or not.
std::vector<std::string> configured_table_dirs() {
  if (const char* env = std::getenv("FLASHBITS_SFU_TABLES"); env && *env) return {env};
  return {FLASHBITS_SFU_TABLE_DIR, FLASHBITS_SFU_TABLE_BUILD_DIR};
}

}  // namespace

std::vector<std::string> sfu_table_dirs() {
  std::vector<std::string> dirs = configured_table_dirs();
  // A folder without tables is a choice (every function correctly rounded, each saying so); a
  // $FLASHBITS_SFU_TABLES that does not exist is a mistyped setting, which would turn every
  // hardware replay into a mismatch of the SFUs' making.
  std::error_code ec;
  const char* env = std::getenv("FLASHBITS_SFU_TABLES");
  if (env && *env && !std::filesystem::is_directory(dirs.front(), ec))
    throw std::runtime_error("FLASHBITS_SFU_TABLES=" + dirs.front() + ": not a directory");
  return dirs;
}

std::vector<std::string> sfu_table_paths() {
  std::vector<std::string> paths;
  // Whether the folders exist or not (sfu_table_dirs refuses a missing one when a set is
  // loaded): an output can overwrite no table in a folder that is not there.
  for (const std::string& dir : configured_table_dirs())
    for (SpecialFunction f : {SpecialFunction::ex2, SpecialFunction::rcp, SpecialFunction::lg2})
      paths.push_back((std::filesystem::path(dir) / table_file(f)).string());
  return paths;
}

std::vector<std::string> sfu_set_names() { return {"correct", "hw-sm90"}; }

std::optional<SfuSet> find_sfu_set(std::string_view name) {
  if (name == "correct") return correct_sfu_set();
  if (name == "hw-sm90") return hw_sm90_set();
  return std::nullopt;
}

}  // namespace fb
