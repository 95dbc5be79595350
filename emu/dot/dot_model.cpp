// emu/dot/dot_model.cpp: the one lookup over the three dot-model tables and the handle's
// dispatch to each family's own entry points (contract: emu/dot/dot_model.hpp).
#include "emu/dot/dot_model.hpp"

#include <algorithm>
#include <vector>

namespace fb {
namespace {

// Messages by appending (GCC 12's -Wrestrict misfires on `"literal" + std::string(...)`).
template <class... T>
std::string cat(const T&... parts) {
  std::string out;
  (out.append(std::string_view(parts)), ...);
  return out;
}

}  // namespace

std::string_view DotModel::name() const {
  switch (family_) {
    case DotFamily::nvidia:
      return nvidia_->name;
    case DotFamily::amd:
      return amd_->name;
    case DotFamily::block_scaled:
      break;
  }
  return scaled_->name;
}

const Format& DotModel::a_input() const {
  switch (family_) {
    case DotFamily::nvidia:
      return nvidia_->input;
    case DotFamily::amd:
      return amd_->a_input;
    case DotFamily::block_scaled:
      break;
  }
  return scaled_a_;
}

const Format& DotModel::b_input() const {
  switch (family_) {
    case DotFamily::nvidia:
      return nvidia_->input;
    case DotFamily::amd:
      return amd_->b_input;
    case DotFamily::block_scaled:
      break;
  }
  return scaled_b_;
}

const Format& DotModel::accumulator() const {
  if (family_ == DotFamily::nvidia) return accumulator_format(*nvidia_);
  return formats::fp32;  // AMD MFMA and the block-scaled kinds accumulate in fp32 only
}

int DotModel::k_step() const {
  switch (family_) {
    case DotFamily::nvidia:
      return nvidia_->products_per_step;
    case DotFamily::amd:
      return amd_->products_per_step;
    case DotFamily::block_scaled:
      break;
  }
  return scaled_->products_per_step;
}

const Format& DotModel::scale_format() const {
  if (scaled_ == nullptr) throw std::invalid_argument("dot model " + std::string(name()) + " takes no scales");
  return scaled_->scale;
}

std::string_view DotModel::kind() const { return scaled_ != nullptr ? scaled_->kind : std::string_view(); }

std::string_view DotModel::source() const {
  switch (family_) {
    case DotFamily::nvidia:
      return nvidia_->source;
    case DotFamily::amd:
      return amd_->source;
    case DotFamily::block_scaled:
      break;
  }
  return scaled_->source;
}

std::string_view DotModel::note() const {
  switch (family_) {
    case DotFamily::nvidia:
      return nvidia_->note;
    case DotFamily::amd:
      return amd_->note;
    case DotFamily::block_scaled:
      break;
  }
  return scaled_->note;
}

bool DotModel::hardware_validated() const {
  switch (family_) {
    case DotFamily::nvidia:
      return nvidia_->hardware_validated;
    case DotFamily::amd:
      return amd_->hardware_validated;
    case DotFamily::block_scaled:
      break;
  }
  return scaled_->hardware_validated;
}

std::string DotModel::describe() const {
  std::string out(name());
  if (scaled_ != nullptr)
    out += cat(" kind::", scaled_->kind, " ", block_scale_format_name(scaled_->scale), " block ",
               std::to_string(scaled_->block), ",");
  return cat(out, " ", a_input().name, " x ", b_input().name);
}

float DotModel::dot_other(float c, const float* a, const float* b, int k, DotScales scales) const {
  if (family_ == DotFamily::amd) return fused_dot_amd(*amd_, c, a, b, k);
  if (k > 0 && (scales.a == nullptr || scales.b == nullptr))
    throw std::invalid_argument("dot model " + describe() + ": the block-scaled dot needs both scales");
  return fused_dot_block_scaled(*scaled_, scaled_a_, scaled_b_, c, a, b, k, scales.a, scales.b);
}

std::uint32_t DotModel::dot_bits(std::uint32_t c, std::span<const std::uint32_t> a, std::span<const std::uint32_t> b,
                                 std::span<const std::uint8_t> scale_a, std::span<const std::uint8_t> scale_b,
                                 DotTrace* trace) const {
  if (scaled_ == nullptr && (!scale_a.empty() || !scale_b.empty()))
    throw std::invalid_argument("dot model " + describe() + " takes no scales");
  switch (family_) {
    case DotFamily::nvidia:
      return fused_dot_bits(*nvidia_, c, a, b, trace);
    case DotFamily::amd:
      return fused_dot_amd_bits(*amd_, c, a, b);
    case DotFamily::block_scaled:
      break;
  }
  return fused_dot_block_scaled_bits(*scaled_, scaled_a_, scaled_b_, c, a, b, scale_a, scale_b);
}

void DotModel::dot_pairs(const float* c, const float* a, const float* b, int k, int n, float* d,
                         const std::uint8_t* scale_a, const std::uint8_t* scale_b) const {
  if (family_ == DotFamily::nvidia) {
    fused_dot_pairs(*nvidia_, c, a, b, k, n, d);
    return;
  }
  const std::size_t blocks =
      scaled_ != nullptr && scaled_->block > 0 ? static_cast<std::size_t>(k / scaled_->block) : 0;
  for (int i = 0; i < n; ++i) {
    const auto at = static_cast<std::size_t>(i);
    const DotScales s{scale_a != nullptr ? scale_a + at * blocks : nullptr,
                      scale_b != nullptr ? scale_b + at * blocks : nullptr};
    d[i] = dot_other(c[i], a + at * static_cast<std::size_t>(k), b + at * static_cast<std::size_t>(k), k, s);
  }
}

void DotModel::dot_columns(const float* c, const float* a, const float* b, std::size_t ldb, int k, int lanes, float* d,
                           DotStepTally* tally, const std::int32_t* b_alignment) const {
  switch (family_) {
    case DotFamily::nvidia:
      fused_dot_columns(*nvidia_, c, a, b, ldb, k, lanes, d, tally, b_alignment);
      return;
    case DotFamily::amd:
      fused_dot_amd_columns(*amd_, c, a, b, ldb, k, lanes, d);
      return;
    case DotFamily::block_scaled:
      break;
  }
  throw std::invalid_argument("dot model " + describe() + " needs scales: no column dots");
}

void DotModel::dot_rows(const float* c, std::size_t ldc, const float* a, std::size_t lda, int rows, const float* b,
                        const std::int32_t* b_alignment, std::size_t ldb, int k, int lanes, float* d,
                        std::size_t ldd) const {
  switch (family_) {
    case DotFamily::nvidia:
      fused_dot_rows(*nvidia_, c, ldc, a, lda, rows, b, b_alignment, ldb, k, lanes, d, ldd);
      return;
    case DotFamily::amd:
      for (int r = 0; r < rows; ++r) {
        const auto at = static_cast<std::size_t>(r);
        fused_dot_amd_columns(*amd_, c + at * ldc, a + at * lda, b, ldb, k, lanes, d + at * ldd);
      }
      return;
    case DotFamily::block_scaled:
      break;
  }
  throw std::invalid_argument("dot model " + describe() + " needs scales: no row dots");
}

// ---- the lookup -------------------------------------------------------------------------
namespace {

std::string format_pair(const Format& a, const Format& b) {
  return b == a ? std::string(a.name) : std::string(a.name) + " x " + b.name;
}

// The forms a plain (no-kind) name takes, "a" or "a x b (<b word>)", for the error naming them.
std::string plain_forms(std::string_view name, const DotModelWords& words) {
  std::string out;
  auto add = [&](const Format& a, const Format& b) {
    if (!out.empty()) out += ", ";
    out += a.name;
    if (b != a) out += std::string(" x ") + b.name + " (" + std::string(words.b_input) + ")";
  };
  for (const TensorCoreModel& m : tensor_core_models())
    if (m.name == name) add(m.input, m.input);
  for (const AmdDotModel& m : amd_dot_models())
    if (m.name == name) add(m.a_input, m.b_input);
  return out;
}

std::string accepted_inputs(const BlockScaledModel& m) {
  std::string out;
  for (const Format& f : m.inputs) {
    if (!out.empty()) out += ' ';
    out += f.name;
  }
  return out;
}

DotModel find_block_scaled(const DotModelQuery& q, const DotModelWords& w) {
  const std::string name(q.name);
  if (!q.scale_format.empty() && q.scale_format != "ue8m0" && q.scale_format != "ue4m3")
    throw DotModelError(std::string(w.scale_format) + ": '" + std::string(q.scale_format) +
                        "' is not one of ue8m0 ue4m3");
  std::string valid;
  std::vector<const BlockScaledModel*> fits;
  for (const BlockScaledModel& m : block_scaled_models()) {
    if (m.name != q.name) continue;
    if (!valid.empty()) valid += ", ";
    valid += std::string(m.kind) + " " + std::string(block_scale_format_name(m.scale)) + " " + std::to_string(m.block);
    if (m.kind == q.kind && (q.scale_format.empty() || block_scale_format_name(m.scale) == q.scale_format) &&
        (q.block == 0 || m.block == q.block))
      fits.push_back(&m);
  }
  if (valid.empty()) {
    std::string names;
    for (const BlockScaledModel& m : block_scaled_models())
      if (names.find(std::string(m.name)) == std::string::npos) names += cat(" ", m.name);
    throw DotModelError(
        cat(w.model, ": '", name, "' has no block-scaled kinds (", w.kind, "); models with them:", names));
  }
  std::string given = cat(w.kind, " ", q.kind);
  if (!q.scale_format.empty()) given += cat(" ", w.scale_format, " ", q.scale_format);
  if (q.block != 0) given += cat(" ", w.block, " ", std::to_string(q.block));
  if (fits.empty())
    throw DotModelError("model " + name + " has no block-scaled form " + given +
                        "; valid (KIND SCALE-FORMAT BLOCK): " + valid);
  if (fits.size() > 1)
    throw DotModelError("model " + name + " " + given + " is ambiguous: give " + std::string(w.scale_format) + " and " +
                        std::string(w.block) + "; valid (KIND SCALE-FORMAT BLOCK): " + valid);
  const BlockScaledModel& m = *fits.front();
  const Format& b = q.b_input != nullptr ? *q.b_input : q.a_input;
  for (const auto& [f, word] : {std::pair{&q.a_input, w.a_input}, std::pair{&b, w.b_input}}) {
    if (!block_scaled_accepts(m, *f))
      throw DotModelError(std::string(word) + ": " + name + " kind::" + std::string(m.kind) + " takes no " +
                          std::string(f->name) + " operand (it takes " + accepted_inputs(m) + ")");
  }
  return DotModel(m, q.a_input, b);
}

}  // namespace

DotModel find_dot_model(const DotModelQuery& q, const DotModelWords& w) {
  if (!q.kind.empty()) return find_block_scaled(q, w);
  if (!q.scale_format.empty() || q.block != 0)
    throw DotModelError(std::string(w.scale_format) + " and " + std::string(w.block) +
                        " choose among a block-scaled kind's presets: give " + std::string(w.kind));
  const Format& b = q.b_input != nullptr ? *q.b_input : q.a_input;
  if (b == q.a_input) {
    if (const TensorCoreModel* m = find_tensor_core_model(q.name, q.a_input)) return DotModel(*m);
  }
  if (const AmdDotModel* m = find_amd_dot_model(q.name, q.a_input, b)) return DotModel(*m);
  const std::string name(q.name);
  if (!is_dot_model_name(q.name)) throw DotModelError(unknown_dot_model_text(w.model, name));
  const std::string forms = plain_forms(q.name, w);
  throw DotModelError("model " + name + " has no " + format_pair(q.a_input, b) +
                      " input form (that hardware lacks it); it takes " +
                      (forms.empty() ? "only block-scaled kinds (" + std::string(w.kind) + ")" : forms));
}

DotModel find_dot_model(std::string_view name, const Format& input, const DotModelWords& words) {
  DotModelQuery query;
  query.name = name;
  query.a_input = input;
  return find_dot_model(query, words);
}

std::string unknown_dot_model_text(std::string_view word, std::string_view name) {
  return std::string(word) + ": unknown dot model '" + std::string(name) + "' (see `flashbits models`)";
}

bool is_dot_model_name(std::string_view name) {
  return is_tensor_core_model_name(name) || is_amd_dot_model_name(name) ||
         std::any_of(block_scaled_models().begin(), block_scaled_models().end(),
                     [&](const BlockScaledModel& m) { return m.name == name; });
}

std::vector<std::string_view> dot_model_names() {
  std::vector<std::string_view> out;
  auto add = [&](std::string_view n) {
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  };
  for (const TensorCoreModel& m : tensor_core_models()) add(m.name);
  for (const AmdDotModel& m : amd_dot_models()) add(m.name);
  for (const BlockScaledModel& m : block_scaled_models()) add(m.name);
  return out;
}

}  // namespace fb
