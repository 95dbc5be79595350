// emu/dot/dot_model.hpp: one entry for every dot model (docs/DESIGN.md §4, "One entry").
//
// Contract: emu/dot/ holds three families of dot-add models, each a table of presets with its
// own arithmetic: NVIDIA tensor cores (TensorCoreModel, emu/dot/tensor_core.hpp), AMD MFMA
// (AmdDotModel, emu/dot/tensor_core_amd.hpp) and Blackwell block-scaled kinds
// (BlockScaledModel, emu/dot/tensor_core_block_scaled.hpp). Callers (the CLI's `dot`, Python's
// fb.dot, the attention recipes) reach all three through this one lookup and this one type,
// so that none of them branches on the family to resolve or call a model:
// - find_dot_model(query) resolves a name and operand formats (plus a block-scaled kind, and
//   optionally its scale format and block) to a DotModel, or throws DotModelError whose
//   message names what does not fit in the caller's own words (DotModelWords);
// - a DotModel says what it is (name, a/b input formats, accumulator format, k-step, source,
//   hardware status) and what extra operands it needs: scale_block() > 0 means the dot takes
//   k / scale_block() scale bytes of scale_format() for a and for b (the block-scaled
//   kinds); 0 means none, and scales passed to it are refused by the caller's own check;
// - dot(), dot_bits(), dot_pairs() and dot_columns() compute with the family's own code,
//   bit for bit what its per-family entry point gives (the handle adds no arithmetic).
// The underlying preset stays reachable (nvidia(), amd(), block_scaled()) for the NVIDIA
// side-by-side kernels (fused_dot_rows, prepared alignment panels) that take a TensorCoreModel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "emu/dot/tensor_core.hpp"
#include "emu/dot/tensor_core_amd.hpp"
#include "emu/dot/tensor_core_block_scaled.hpp"
#include "formats/format.hpp"

namespace fb {

enum class DotFamily : std::uint8_t { nvidia, amd, block_scaled };

// The per-block scales of one dot: k / scale_block() bytes each, in the model's scale format.
struct DotScales {
  const std::uint8_t* a = nullptr;
  const std::uint8_t* b = nullptr;
};

class DotModel {
 public:
  DotModel() = default;  // no model: valid() is false, nothing else may be called
  explicit DotModel(const TensorCoreModel& model) : family_(DotFamily::nvidia), nvidia_(&model) {}
  explicit DotModel(const AmdDotModel& model) : family_(DotFamily::amd), amd_(&model) {}
  // A block-scaled preset takes several input formats (mixed pairs allowed): the handle fixes a's and b's.
  DotModel(const BlockScaledModel& model, const Format& a_input, const Format& b_input)
      : family_(DotFamily::block_scaled), scaled_(&model), scaled_a_(a_input), scaled_b_(b_input) {}

  bool valid() const { return nvidia_ != nullptr || amd_ != nullptr || scaled_ != nullptr; }
  DotFamily family() const { return family_; }
  std::string_view name() const;
  const Format& a_input() const;
  const Format& b_input() const;
  const Format& accumulator() const;  // the format of C and D: fp32, or fp16 for the *-f16acc presets
  // Products fused in one step (the instruction's k); 0 or less: one step takes all of k.
  int k_step() const;
  // Elements of k per scale byte; 0 when the model takes no scales.
  int scale_block() const { return scaled_ != nullptr ? scaled_->block : 0; }
  const Format& scale_format() const;                        // precondition: scale_block() > 0
  std::string_view kind() const;                             // the block-scaled kind (mxf8f6f4, ...), empty otherwise
  std::string_view source() const;                           // where the parameters come from
  std::string_view note() const;                             // what is assumed rather than published (may be empty)
  bool hardware_validated() const;                           // measured bit for bit on a GPU by this project
  bool records_trace() const { return nvidia_ != nullptr; }  // DotTrace is filled
  std::string describe() const;                              // one phrase naming the preset and operands, for reports

  // D = C + sum_i a_i*b_i (times the blocks' scales when scale_block() > 0); a[i], b[i] exact
  // values of a_input() / b_input() as float, c of accumulator(). `trace` is filled only where
  // records_trace(). The block-scaled kinds need k a multiple of scale_block() and both scales
  // (std::invalid_argument otherwise).
  float dot(float c, const float* a, const float* b, int k, DotScales scales = {}, DotTrace* trace = nullptr) const {
    // The NVIDIA call is the attention engine's hot path: no call beyond fused_dot's own.
    if (family_ == DotFamily::nvidia) [[likely]]
      return fused_dot(*nvidia_, c, a, b, k, trace);
    return dot_other(c, a, b, k, scales);
  }
  // Bit-level: a, b as bit patterns of their formats, C and D of accumulator(); scales as
  // raw bytes (empty when scale_block() == 0).
  std::uint32_t dot_bits(std::uint32_t c, std::span<const std::uint32_t> a, std::span<const std::uint32_t> b,
                         std::span<const std::uint8_t> scale_a = {}, std::span<const std::uint8_t> scale_b = {},
                         DotTrace* trace = nullptr) const;
  // n unrelated dots: d[i] = dot(c[i], a + i*k, b + i*k, k, scales of pair i), the scales of
  // pair i at scale_a + i*(k/scale_block()) (likewise b). NVIDIA runs the blocked kernel
  // (fused_dot_pairs); the other families one dot after another. c and d may alias.
  void dot_pairs(const float* c, const float* a, const float* b, int k, int n, float* d,
                 const std::uint8_t* scale_a = nullptr, const std::uint8_t* scale_b = nullptr) const;
  // Many dots side by side, column l of b = b[j*ldb + l]: d[l] = dot(c[l], a, column l, k),
  // bit for bit (c and d may alias). `tally` and `b_alignment` as fused_dot_columns takes them
  // (NVIDIA only; the other families record no steps and ignore them). Precondition:
  // scale_block() == 0 (std::invalid_argument otherwise).
  void dot_columns(const float* c, const float* a, const float* b, std::size_t ldb, int k, int lanes, float* d,
                   DotStepTally* tally = nullptr, const std::int32_t* b_alignment = nullptr) const;
  // dot_columns for `rows` vectors at once, row r of a at a + r*lda, its C and D in rows of c and
  // d (strides ldc, ldd; c and d may alias): d[r*ldd + l] = dot(c[r*ldc + l], row r, column l, k),
  // bit for bit. NVIDIA runs fused_dot_rows over the whole block, so that its per-call set-up is
  // paid once; `b_alignment` as there (null: computed). Precondition: scale_block() == 0.
  void dot_rows(const float* c, std::size_t ldc, const float* a, std::size_t lda, int rows, const float* b,
                const std::int32_t* b_alignment, std::size_t ldb, int k, int lanes, float* d, std::size_t ldd) const;

  // The underlying preset of the handle's family, null for the others.
  const TensorCoreModel* nvidia() const { return nvidia_; }
  const AmdDotModel* amd() const { return amd_; }
  const BlockScaledModel* block_scaled() const { return scaled_; }

 private:
  float dot_other(float c, const float* a, const float* b, int k, DotScales scales) const;

  DotFamily family_ = DotFamily::nvidia;
  const TensorCoreModel* nvidia_ = nullptr;
  const AmdDotModel* amd_ = nullptr;
  const BlockScaledModel* scaled_ = nullptr;
  Format scaled_a_{}, scaled_b_{};
};

// How the caller names the things a lookup error points at, so the one lookup gives the CLI's
// messages (`MODEL`, `INFMT`, `--input-b`, ...) and Python's (`model`, `fmt`, `fmt_b`, ...).
struct DotModelWords {
  std::string_view model = "model", a_input = "fmt", b_input = "fmt_b";
  std::string_view kind = "kind", scale_format = "scale_format", block = "block";
};

struct DotModelQuery {
  std::string_view name;            // "sm80", "cdna3", "sm100", ...
  Format a_input;                   // a's format
  const Format* b_input = nullptr;  // b's format when it differs from a's (AMD fp8 pairs, mxf8f6f4)
  std::string_view kind;            // a block-scaled kind (mxf8f6f4, mxf4, mxf4nvf4); empty: none
  std::string_view scale_format;    // with kind: "ue8m0" or "ue4m3"; empty: the one that fits
  int block = 0;                    // with kind: 32 or 16; 0: the one that fits
};

// A lookup that found no model; what() names the cause and, where there is one, what fits.
struct DotModelError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// The one lookup. Without a kind, the name's NVIDIA or AMD preset for the input formats (a
// block-scaled preset needs its kind: sm100 and sm120 name both an NVIDIA and block-scaled
// presets). Throws DotModelError.
DotModel find_dot_model(const DotModelQuery& query, const DotModelWords& words = {});
// find_dot_model({name, input}): one input format for a and b, no kind.
DotModel find_dot_model(std::string_view name, const Format& input, const DotModelWords& words = {});
// Whether any preset of any family has this name.
bool is_dot_model_name(std::string_view name);
// "WORD: unknown dot model 'NAME' (see `flashbits models`)": the one wording, for a line's
// MODEL and for `dot --model` alike.
std::string unknown_dot_model_text(std::string_view word, std::string_view name);
// Every model name, NVIDIA's first (tensor_core_models() order), then AMD's, each once.
std::vector<std::string_view> dot_model_names();

}  // namespace fb
