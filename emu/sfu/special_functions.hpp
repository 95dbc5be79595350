// emu/sfu/special_functions.hpp: models of the GPU special-function unit (docs/DESIGN.md §5).
//
// Contract: a SpecialFunctionModel maps an fp32 input to an fp32 output for one of
// ex2, rcp, lg2 (the MUFU instructions FA2 uses through fast math), with PTX `.ftz`
// behaviour: subnormal inputs are read as zero of the same sign and subnormal
// results are flushed to zero of the same sign. exp and log are built from them as
// FA2's fast-math code does: exp(x) = ex2(x * log2(e)) with the multiply rounded in
// fp32 (mul.ftz.f32, RNE), log(x) = lg2(x) * ln(2) with the multiply rounded in fp32.
//
// Special values (every model; a table or oracle may only override finite inputs it
// covers, see below):
//   ex2: ex2(-inf) = +0, ex2(+inf) = +inf, ex2(NaN) = NaN, ex2(+-0) = ex2(+-subnormal) = 1;
//        x < -126 gives a subnormal 2^x, flushed to +0; x >= 128 overflows to +inf.
//   rcp: rcp(+-0) = rcp(+-subnormal) = +-inf, rcp(+-inf) = +-0, rcp(NaN) = NaN;
//        |x| > 2^126 gives a subnormal 1/x, flushed to +-0.
//   lg2: lg2(+-0) = lg2(+-subnormal) = -inf, lg2(x < 0) = NaN (-inf included), lg2(+inf) = +inf,
//        lg2(1) = +0, lg2(NaN) = NaN.
// A NaN result is fp32's quiet NaN from the format table (0x7fc00000). The hardware
// returns NVIDIA's canonical NaN 0x7fffffff instead; a table file can record that.
// Whether a result is "subnormal" is decided on the correctly rounded value; for these
// three functions no exact value lies in (2^-126 * (1 - 2^-24), 2^-126), so deciding on
// the exact value gives the same answer (ex2: 2^x is in that gap for no fp32 x;
// rcp: 1/x for x = 2^126 is 2^-126, for the next fp32 it is below 2^-126 * (1 - 2^-24);
// lg2: |lg2(x)| >= 2^-24 for x != 1).
//
// Sources checked (search tool, 2026-11-22): the PTX ISA page itself was not in the
// searchable corpus. Found: (1) a SASS MUFU opcode description (third-party copy of
// NVIDIA SDK docs at nintyconservation9619.github.io/.../opMUFU.htm): "Denorm
// input/output is flushed to sign preserving 0.0", "EX2(-denorm) gives +1.0 ...
// EX2(-Inf) or underflow gives +0.0, EX2(+Inf) or overflow gives +Inf", input NaNs give
// canonical NaN 0x7fff_ffff; (2) llvm/llvm-project PR #120519 (NVPTX lowering): "The PTX
// ex2 and log2 functions are always approximate", libdevice uses ex2.approx for exp2.
// The rcp and lg2 special values above follow the PTX ISA tables as given in docs/DESIGN.md §5;
// they were NOT re-read from the PTX ISA here.
//
// Kinds:
// - correct: correctly rounded (RNE) fp32 of the exact function (after ftz), computed
//   without MPFR: a double evaluation with an error bound decides almost every input,
//   a double-double one the rest, and a 192-bit Boost cpp_bin_float evaluation is the
//   last resort (see special_functions.cpp). NOT the hardware: the hardware is
//   approximate (ex2 max 2 ulp, rcp 1 ulp); every report using it must say the SFU
//   model is unmeasured.
// - table:   loaded from a file measured on a GPU (format: FBSFU1, documented in
//   traces/sfu_table_file.cpp); bit-exact by construction where the table covers the
//   input; inputs it does not cover fall back to `correct` and are counted.
// - oracle:  values taken from a captured trace: a map input bits -> output bits,
//   falling back to `correct` (and counting the fallbacks) for unseen inputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace fb {

enum class SpecialFunction : std::uint8_t { ex2, rcp, lg2 };
enum class SfuKind : std::uint8_t { correct, table, oracle };

std::string_view to_string(SpecialFunction f);
std::string_view to_string(SfuKind k);

class SpecialFunctionModel {
 public:
  virtual ~SpecialFunctionModel() = default;
  virtual SpecialFunction function() const = 0;
  virtual SfuKind kind() const = 0;
  // true only for models measured on hardware (a table captured on a GPU that covers
  // every input); false for correct, oracle and partial or synthetic tables.
  virtual bool hardware_measured() const = 0;
  // The full description, for --verbose and JSON reports: the table's path and provenance,
  // its rule, its coverage (several hundred characters for a table).
  virtual std::string describe() const = 0;
  // A few words for the one line a report prints by default, with no paths but a file name:
  // the function, the kind and whether it is measured on hardware, e.g. "ex2 correct
  // (UNMEASURED)", "rcp table rcp_h200.fbsfu (measured)".
  virtual std::string summary() const {
    return std::string(to_string(function())) + " " + std::string(to_string(kind())) +
           (hardware_measured() ? " (measured)" : " (UNMEASURED)");
  }
  virtual float evaluate(float x) const = 0;
  // y[i] = evaluate(x[i]) for i < n (x and y must not overlap). The correct ex2 model runs
  // ex2_correct_ftz_array; other models loop over evaluate().
  virtual void evaluate_array(const float* x, float* y, std::size_t n) const {
    for (std::size_t i = 0; i < n; ++i) y[i] = evaluate(x[i]);
  }
  // How many evaluations so far fell back to `correct` (oracle: unseen inputs; table:
  // inputs outside the table). Always 0 for `correct`. Thread-safe.
  virtual std::uint64_t fallback_count() const { return 0; }
};

// ---- correct rounding, with .ftz (the default, unmeasured model) ------------------
float ex2_correct_ftz(float x);
// y[i] = ex2_correct_ftz(x[i]) for i < n, bit for bit (x and y must not overlap): the same
// function, its double stage run over chunks of the array in passes (each Horner step over
// every element of the chunk) in loops that vectorise, compiled for AVX-512, AVX2 and the
// baseline and chosen at run time as lane_instruction_set() says (emu/array_rounding.hpp;
// about 2 ns an element with AVX-512, 5 with AVX2, 11 on the baseline), and the elements that
// stage does not decide (364 of the 2^32 inputs), specials, integers and out-of-range inputs
// redone by ex2_correct_ftz.
void ex2_correct_ftz_array(const float* x, float* y, std::size_t n);
float rcp_correct_ftz(float x);
float lg2_correct_ftz(float x);
float correct_ftz(SpecialFunction f, float x);
std::unique_ptr<SpecialFunctionModel> make_correct_model(SpecialFunction f);
// The same model with `note` appended to describe() (a named set says there why no hardware
// model stands in for it).
std::unique_ptr<SpecialFunctionModel> make_correct_model(SpecialFunction f, std::string note);

// The stages of the correct-rounding evaluation, exposed so tests can check each one
// alone against MPFR. Each returns the correctly rounded result when its error bound
// decides the rounding and nullopt when the value is too close to a rounding boundary;
// `multiprecision` always decides. ex2_correct_ftz / lg2_correct_ftz try them in order.
enum class CorrectStage : std::uint8_t { double_only, double_double, multiprecision };
std::optional<float> ex2_correct_ftz_at(float x, CorrectStage stage);
std::optional<float> lg2_correct_ftz_at(float x, CorrectStage stage);

// ---- table model ------------------------------------------------------------------
// What the table models (emu/sfu/sfu_table_models.hpp) are built from. The FBSFU1 table file,
// its in-memory form (SfuTable) and its loader are traces/sfu_table_file.hpp.
// How the lg2_extended form rounds the exact e + L[m] to fp32 (once; results below 2^-126 flushed).
enum class FinalRounding : std::uint8_t { nearest_even = 0, toward_zero = 1, down = 2, up = 3 };
std::string_view to_string(FinalRounding r);
// Entries of an rcp_mantissa or lg2_exponent_split table: one per mantissa field m of x in [1, 2).
inline constexpr std::uint32_t kRcpMantissaEntries = std::uint32_t{1} << 23;
inline constexpr std::uint32_t kLg2MantissaEntries = std::uint32_t{1} << 23;
// How the ex2 argument is converted to fixed point (the hypothesis to test on a GPU).
enum class FixedPointRounding : std::uint8_t { floor = 0, nearest_even = 1, toward_zero = 2 };

// The lg2_extended rule (FBSFU1 form 5) for a positive normal x = 2^e * 1.m (e in -126..127)
// given its entries T[m] (fp32 bits) and R[m]: a NaN or infinite T is returned as is; otherwise
// the exact e + L, L = T + R * ulp(T) * 2^-guard_bits, rounded once to fp32 by `rounding`
// (an exact zero gives +0; a result below 2^-126 is flushed to zero of its sign). It is
// emu/sfu/sfu_table_rules.hpp lg2_extended_model, the one statement of the rule, which the device
// code evaluates too (tests/test_probe_file.cpp checks it against MPFR). Requires guard_bits in 0..24, |R| < 2^30 and
// |L| < 2.
std::uint32_t lg2_extended_rule(int e, std::uint32_t t_bits, std::int32_t r, int guard_bits, FinalRounding rounding);

// ---- oracle model -----------------------------------------------------------------
std::unique_ptr<SpecialFunctionModel> make_oracle_model(SpecialFunction f,
                                                        std::unordered_map<std::uint32_t, std::uint32_t> seen);

// The set of SFU models one kernel recipe uses.
struct SfuSet {
  std::shared_ptr<const SpecialFunctionModel> ex2, rcp, lg2;
  // The member that holds function f's model.
  std::shared_ptr<const SpecialFunctionModel>& model_for(SpecialFunction f) {
    return f == SpecialFunction::ex2 ? ex2 : f == SpecialFunction::rcp ? rcp : lg2;
  }
  bool all_hardware_measured() const;
  std::string describe() const;  // each model's describe(): for --verbose and JSON reports
  std::string summary() const;   // each model's summary(), one short line: for reports
};
SfuSet correct_sfu_set();

// ---- ex2.approx.f32 (no .ftz) ------------------------------------------------------------
// From a model of ex2.approx.ftz.f32: x < -126 (-inf included) gives RN(ftz(x * 0.5)^2), one
// fp32 rounding to nearest even with subnormal results KEPT (x * 0.5 is exact there); every
// other input gives the .ftz model's output (subnormal inputs too: they give 1). Measured on
// an H200 (sm_90) on all 2^32 inputs: the squaring rule HOLDS with the hardware's .ftz ex2,
// and outside x < -126 the two instructions agree everywhere. Its function() is ex2; it is
// hardware-measured exactly when `ex2_ftz` is.
std::unique_ptr<SpecialFunctionModel> make_ex2_no_ftz_model(std::shared_ptr<const SpecialFunctionModel> ex2_ftz);

// FA2 fast-math compositions. The fp32 constants are those CUDA's __expf / __logf use.
inline constexpr std::uint32_t kLog2eFp32Bits = 0x3fb8aa3bu;  // 1.44269502f
inline constexpr std::uint32_t kLn2Fp32Bits = 0x3f317218u;    // 0.693147182f
float fast_exp(const SfuSet& s, float x);                     // ex2(fl32.ftz(x * log2e))
float fast_log(const SfuSet& s, float x);                     // fl32.ftz(lg2(x) * ln2)

}  // namespace fb
