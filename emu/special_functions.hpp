// emu/special_functions.hpp: models of the GPU special-function unit (DESIGN.md §5).
//
// Contract: a SpecialFunctionModel maps an fp32 input to an fp32 output for one of
// ex2, rcp, lg2 (the MUFU instructions FA2 uses through fast math), with PTX `.ftz`
// behaviour: subnormal inputs are read as zero of the same sign and subnormal
// results are flushed to zero of the same sign. exp and log are built from them as
// FA2's fast-math code does: exp(x) = ex2(x * log2(e)) with the multiply rounded in
// fp32, log(x) = lg2(x) * ln(2) with the multiply rounded in fp32.
//
// Kinds:
// - correct: correctly rounded (RNE) fp32 of the exact function (after ftz).
//   NOT the hardware: the hardware is approximate (ex2 max 2 ulp, rcp 1 ulp); every
//   report using it must say the SFU model is unmeasured.
// - table:   loaded from a file measured on a GPU (format: docs in special_functions.cpp
//   and README); bit-exact by construction where the table covers the input.
// - oracle:  values taken from a captured trace: a map input bits -> output bits,
//   falling back to `correct` (and counting the fallbacks) for unseen inputs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

namespace fb {

enum class SpecialFunction : std::uint8_t { ex2, rcp, lg2 };
enum class SfuKind : std::uint8_t { correct, table, oracle };

std::string_view to_string(SpecialFunction f);
std::string_view to_string(SfuKind k);

class SpecialFunctionModel {
 public:
  virtual ~SpecialFunctionModel() = default;
  virtual SfuKind kind() const = 0;
  // true only for models measured on hardware (a table captured on a GPU)
  virtual bool hardware_measured() const = 0;
  // A one-line description for reports, e.g. "ex2: correct (UNMEASURED on hardware)".
  virtual std::string describe() const = 0;
  virtual float evaluate(float x) const = 0;
};

// ---- correct rounding, with .ftz (the default, unmeasured model) ------------------
float ex2_correct_ftz(float x);
float rcp_correct_ftz(float x);
float lg2_correct_ftz(float x);
std::unique_ptr<SpecialFunctionModel> make_correct_model(SpecialFunction f);

// ---- table model ------------------------------------------------------------------
// Loads a table file; throws std::runtime_error naming the file and field on a bad file.
std::unique_ptr<SpecialFunctionModel> load_table_model(const std::string& path);

// ---- oracle model -----------------------------------------------------------------
std::unique_ptr<SpecialFunctionModel> make_oracle_model(SpecialFunction f,
                                                        std::unordered_map<std::uint32_t, std::uint32_t> seen);

// The set of SFU models one kernel recipe uses.
struct SfuSet {
  std::shared_ptr<const SpecialFunctionModel> ex2, rcp, lg2;
  bool all_hardware_measured() const;
  std::string describe() const;  // for reports
};
SfuSet correct_sfu_set();

// FA2 fast-math compositions.
float fast_exp(const SfuSet& s, float x);  // ex2(fl32(x * log2e))
float fast_log(const SfuSet& s, float x);  // fl32(lg2(x) * ln2)

}  // namespace fb
