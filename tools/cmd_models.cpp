// tools/cmd_models.cpp: `flashbits models`, the named accumulation and special-function
// models with their parameters, sources and validation status (docs/CLI.md "Kernel models").
//
// Contract: the listing is a sequence of sections (model_sections() below), each
// printing a table for people and a JSON value for `--json` under its key. A new
// family of models (the kernel recipes fa2-sm80, ...) is one more entry in that list.
// Every model not validated on hardware says so in both outputs. `--kind` prints only the
// sections of the kinds named (ModelSection::kind: dot, block-scaled, amd, sfu, kernel), in
// the listing's order; an unknown kind is bad input naming it and the kinds.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "attention/attention.hpp"
#include "emu/sfu/special_functions.hpp"
#include "emu/dot/tensor_core.hpp"
#include "emu/dot/tensor_core_amd.hpp"
#include "emu/dot/tensor_core_block_scaled.hpp"
#include "tools/cli_common.hpp"

namespace fb::cli {
namespace {

struct ModelSection {
  std::string kind;   // the --kind word that selects it
  std::string key;    // JSON key
  std::string title;  // heading of the plain listing
  std::function<void(std::ostream&)> print;
  std::function<nlohmann::json()> json;
};

std::string_view output_name(DotOutput o) {
  switch (o) {
    case DotOutput::fp32_rz:
      return "fp32, normalise then RZ";
    case DotOutput::fp16_rne:
      return "fp16, normalise then RNE";
    case DotOutput::fp32_e8m13:
      return "fp32 truncated (RZ) to 13 fraction bits (e8m13)";
    case DotOutput::exact_rne:
      return "fp32, exact sum then one RNE rounding";
  }
  return "?";
}
std::string_view zero_name(ZeroTermPolicy z) { return z == ZeroTermPolicy::ignored ? "ignored" : "as-min-exponent"; }

// ---- dot (tensor-core) models ------------------------------------------------------
void print_dot_models(std::ostream& os) {
  char line[256];
  std::snprintf(line, sizeof line, "%-18s %-5s %6s %3s %-48s %-10s\n", "model", "input", "k/step", "F", "output",
                "zero terms");
  os << line;
  for (const TensorCoreModel& m : tensor_core_models()) {
    const std::string step = m.products_per_step > 0 ? std::to_string(m.products_per_step) : "all";
    const std::string f = m.truncate_terms ? std::to_string(m.fraction_bits) : "-";
    std::snprintf(line, sizeof line, "%-18.*s %-5s %6s %3s %-48.*s %-10.*s\n", static_cast<int>(m.name.size()),
                  m.name.data(), m.input.name, step.c_str(), f.c_str(), static_cast<int>(output_name(m.output).size()),
                  output_name(m.output).data(), static_cast<int>(zero_name(m.zero_terms).size()),
                  zero_name(m.zero_terms).data());
    os << line;
    os << "    source: " << m.source << "\n";
    if (!m.note.empty()) os << "    note: " << m.note << "\n";
    if (!m.hardware_validated) os << "    status: not yet validated on hardware\n";
  }
  os << "Alignment: C and the products of one step align to their largest exponent; each term is\n"
        "truncated toward zero to F fraction bits of it and summed exactly; k beyond one step chains\n"
        "steps (a step's result is the next C). Zero terms do not choose the exponent ('ignored');\n"
        "an exact zero step result is +0, even when every term is -0 (exact-rne keeps IEEE's signed\n"
        "zeros). See emu/dot/tensor_core.hpp.\n";
}

nlohmann::json dot_models_json() {
  nlohmann::json arr = nlohmann::json::array();
  for (const TensorCoreModel& m : tensor_core_models()) {
    arr.push_back({{"name", std::string(m.name)},
                   {"input", std::string(m.input.name)},
                   {"products_per_step", m.products_per_step},
                   {"fraction_bits", m.fraction_bits},
                   {"truncate_terms", m.truncate_terms},
                   {"output", std::string(output_name(m.output))},
                   {"accumulator_format", accumulator_format(m).name},
                   {"zero_terms", std::string(zero_name(m.zero_terms))},
                   {"hardware_validated", m.hardware_validated},
                   {"status", m.hardware_validated ? "validated on hardware" : "not yet validated on hardware"},
                   {"source", std::string(m.source)},
                   {"note", std::string(m.note)}});
  }
  return arr;
}

// ---- block-scaled (Blackwell) dot models -------------------------------------------
// emu/dot/tensor_core_block_scaled.hpp; every preset is UNMEASURED (none validated on hardware).
std::string scale_format_name(const Format& f) { return std::string(fb::block_scale_format_name(f)); }
std::string input_list(const BlockScaledModel& m) {
  std::string out;
  for (const Format& f : m.inputs) {
    if (!out.empty()) out += ',';
    out += f.name;
  }
  return out;
}
std::string zero_term_rule(const BlockScaledModel& m) {
  return m.zero_exponent == kZeroTermsIgnored ? "ignored" : "at 2^" + std::to_string(m.zero_exponent);
}
constexpr std::string_view kBlockScaledStatus = "UNMEASURED (emulation; not validated on hardware)";

void print_block_scaled_models(std::ostream& os) {
  char line[256];
  std::snprintf(line, sizeof line, "%-6s %-9s %-24s %-6s %5s %6s %3s %5s %-10s %s\n", "model", "kind", "inputs",
                "scale", "block", "k/step", "F", "group", "zero terms", "output");
  os << line;
  for (const BlockScaledModel& m : block_scaled_models()) {
    const std::string group = m.group > 0 ? std::to_string(m.group) : "-";
    std::snprintf(line, sizeof line, "%-6.*s %-9.*s %-24s %-6s %5d %6d %3d %5s %-10s %.*s\n",
                  static_cast<int>(m.name.size()), m.name.data(), static_cast<int>(m.kind.size()), m.kind.data(),
                  input_list(m).c_str(), scale_format_name(m.scale).c_str(), m.block, m.products_per_step,
                  m.fraction_bits, group.c_str(), zero_term_rule(m).c_str(),
                  static_cast<int>(output_name(m.output).size()), output_name(m.output).data());
    os << line;
    os << "    source: " << m.source << "\n";
    if (!m.note.empty()) os << "    note: " << m.note << "\n";
    os << "    status: " << (m.hardware_validated ? "validated on hardware" : kBlockScaledStatus) << "\n";
  }
  os << "D = C + sum a_i*b_i*sa[i/block]*sb[i/block], k in steps of k/step (a step's fp32 result is the next\n"
        "C). group '-': each product times both scales is a term aligned at ea+eb+esa+esb; group G: the\n"
        "products of each run of G are summed exactly, times both scales, aligned at esa+esb alone. C and\n"
        "the terms align to the largest exponent (zero terms at the listed 2^e), are truncated toward zero\n"
        "to F fraction bits, summed exactly and rounded once to fp32 toward zero. Inputs a and b may have\n"
        "different formats among those listed. See emu/dot/tensor_core_block_scaled.hpp.\n";
}

nlohmann::json block_scaled_models_json() {
  nlohmann::json arr = nlohmann::json::array();
  for (const BlockScaledModel& m : block_scaled_models()) {
    nlohmann::json inputs = nlohmann::json::array();
    for (const Format& f : m.inputs) inputs.push_back(f.name);
    arr.push_back({{"name", std::string(m.name)},
                   {"kind", std::string(m.kind)},
                   {"inputs", inputs},
                   {"scale_format", scale_format_name(m.scale)},
                   {"block", m.block},
                   {"products_per_step", m.products_per_step},
                   {"fraction_bits", m.fraction_bits},
                   {"group", m.group},
                   {"zero_exponent",
                    m.zero_exponent == kZeroTermsIgnored ? nlohmann::json(nullptr) : nlohmann::json(m.zero_exponent)},
                   {"output", std::string(output_name(m.output))},
                   {"accumulator_format", "fp32"},
                   {"hardware_validated", m.hardware_validated},
                   {"status", m.hardware_validated ? "validated on hardware" : "UNMEASURED"},
                   {"source", std::string(m.source)},
                   {"note", std::string(m.note)}});
  }
  return arr;
}

// ---- AMD MFMA (CDNA1-3) dot models ---------------------------------------------------
// emu/dot/tensor_core_amd.hpp; every preset is UNMEASURED (no AMD GPU probed by this project).
std::string fraction_bits_or_dash(int bits) { return bits > 0 ? std::to_string(bits) : "-"; }

void print_amd_dot_models(std::ostream& os) {
  char line[256];
  std::snprintf(line, sizeof line, "%-8s %-8s %-8s %-17s %6s %3s %3s\n", "model", "a", "b", "arithmetic", "k/step", "F",
                "F2");
  os << line;
  for (const AmdDotModel& m : amd_dot_models()) {
    const std::string_view arithmetic = to_string(m.arithmetic);
    std::snprintf(line, sizeof line, "%-8.*s %-8s %-8s %-17.*s %6d %3s %3s\n", static_cast<int>(m.name.size()),
                  m.name.data(), m.a_input.name, m.b_input.name, static_cast<int>(arithmetic.size()), arithmetic.data(),
                  m.products_per_step, fraction_bits_or_dash(m.fraction_bits).c_str(),
                  fraction_bits_or_dash(m.sum_fraction_bits).c_str());
    os << line;
    os << "    instructions: " << m.instructions << "\n";
    os << "    source: " << m.source << "\n";
    if (!m.note.empty()) os << "    note: " << m.note << "\n";
    os << "    status: " << (m.hardware_validated ? "validated on hardware" : kBlockScaledStatus) << "\n";
  }
  os << "D = C + sum a_i*b_i, C and D fp32, k in steps of k/step (a step's fp32 result is the next C).\n"
        "fma_chain: one fp32 fma (RNE) per product; exact_step: C + products summed exactly, one RNE\n"
        "rounding; ftz_pairwise: fp32 RNE products and pairwise sums, subnormals flushed; two_stage:\n"
        "products truncated to F bits at their largest exponent, sum floored to F2 bits, RNE to fp32;\n"
        "grouped_two_stage: the same with even/odd products summed apart first. tf32 here is the xf32\n"
        "instructions' input. See emu/dot/tensor_core_amd.hpp.\n";
}

nlohmann::json amd_dot_models_json() {
  nlohmann::json arr = nlohmann::json::array();
  for (const AmdDotModel& m : amd_dot_models()) {
    arr.push_back({{"name", std::string(m.name)},
                   {"a_input", m.a_input.name},
                   {"b_input", m.b_input.name},
                   {"arithmetic", std::string(to_string(m.arithmetic))},
                   {"products_per_step", m.products_per_step},
                   {"fraction_bits", m.fraction_bits},
                   {"sum_fraction_bits", m.sum_fraction_bits},
                   {"accumulator_format", "fp32"},
                   {"instructions", std::string(m.instructions)},
                   {"hardware_validated", m.hardware_validated},
                   {"status", m.hardware_validated ? "validated on hardware" : "UNMEASURED"},
                   {"source", std::string(m.source)},
                   {"note", std::string(m.note)}});
  }
  return arr;
}

// ---- special-function (SFU) model kinds --------------------------------------------
struct SfuKindInfo {
  SfuKind kind;
  const char* name;
  const char* what;
  bool measured;
};
constexpr SfuKindInfo kSfuKinds[] = {
    {SfuKind::correct, "correct",
     "correctly rounded fp32 (RNE) of the exact function after .ftz; NOT the hardware (ex2 ~2 ulp, rcp 1 ulp)", false},
    {SfuKind::table, "table", "values measured on a GPU and loaded from a table file; exact where the table covers",
     true},
    {SfuKind::oracle, "oracle", "values taken from a captured trace; unseen inputs fall back to `correct` (counted)",
     false},
};

void print_sfu_models(std::ostream& os) {
  os << "functions: ex2 rcp lg2 (MUFU, .ftz); exp(x) = ex2(fl32(x*log2 e)), log(x) = fl32(lg2(x)*ln 2)\n";
  for (const SfuKindInfo& k : kSfuKinds) {
    os << "  " << k.name << ": " << k.what << "\n";
    os << "    status: "
       << (k.measured ? "measured on hardware by construction (per loaded table)"
                      : "unmeasured: reports using it say the SFU model is unmeasured")
       << "\n";
  }
}

nlohmann::json sfu_models_json() {
  nlohmann::json arr = nlohmann::json::array();
  for (const SfuKindInfo& k : kSfuKinds) {
    arr.push_back({{"kind", k.name},
                   {"description", k.what},
                   {"hardware_measured", k.measured},
                   {"status", k.measured ? "measured (table)" : "unmeasured"}});
  }
  return arr;
}

// Kernel recipes (attention/kernel_models.cpp) and their variant suffixes
// (attention/kernel_model_parser.cpp).
void print_kernel_models(std::ostream& os) {
  for (const attn::KernelModelDescription& m : attn::describe_kernel_models()) {
    os << "  " << m.name << "\n      " << m.description << "\n";
    if (!m.sources.empty()) os << "      sources: " << m.sources << "\n";
  }
  os << "Models built on the `correct` SFU model or on tensor-core models not validated on hardware say so\n"
        "in every report (replay, sweep, bias-test, demo).\n";
}
nlohmann::json kernel_models_json() {
  nlohmann::json arr = nlohmann::json::array();
  for (const attn::KernelModelDescription& m : attn::describe_kernel_models()) {
    nlohmann::json entry = {{"name", m.name}, {"description", m.description}};
    if (!m.sources.empty()) entry["sources"] = m.sources;
    arr.push_back(entry);
  }
  return arr;
}

// The listing, in order. Append a section here for a new family of models.
const std::vector<ModelSection>& model_sections() {
  static const std::vector<ModelSection> sections{
      {"dot", "dot_models", "Dot (tensor-core accumulation) models — `flashbits dot NAME ...`", print_dot_models,
       dot_models_json},
      {"block-scaled", "block_scaled_dot_models",
       "Block-scaled dot models (Blackwell, UNMEASURED) — `flashbits dot MODEL INFMT C A B --kind KIND "
       "[--scale-format S] [--block N] --scale-a ... --scale-b ... [--input-b FMT]`",
       print_block_scaled_models, block_scaled_models_json},
      {"amd", "amd_dot_models",
       "AMD MFMA dot models (CDNA1-3, UNMEASURED) — `flashbits dot MODEL INFMT C A B [--input-b FMT]`",
       print_amd_dot_models, amd_dot_models_json},
      {"sfu", "special_function_models", "Special-function (SFU) model kinds", print_sfu_models, sfu_models_json},
      {"kernel", "kernel_models", "Kernel models — `--model` of replay, sweep, bias-test, deviation (suffixes compose)",
       print_kernel_models, kernel_models_json},
  };
  return sections;
}

std::string kind_list() {
  std::string out;
  for (const ModelSection& s : model_sections()) out += (out.empty() ? "" : ", ") + s.kind;
  return out;
}

// The sections the --kind values name (each value one kind or a comma-separated list; the
// option may be repeated), in the listing's order; all of them when none is given.
std::vector<const ModelSection*> selected_sections(const std::vector<std::string>& kind_values) {
  std::vector<const ModelSection*> selected;
  if (kind_values.empty()) {
    for (const ModelSection& s : model_sections()) selected.push_back(&s);
    return selected;
  }
  std::string joined;  // one list, so that a kind given twice across repeats is refused too
  for (const std::string& v : kind_values) joined += (joined.empty() ? "" : ",") + v;
  const std::vector<std::string> kinds = split_list(joined, "--kind");
  for (const std::string& k : kinds) {
    const auto& all = model_sections();
    if (std::none_of(all.begin(), all.end(), [&](const ModelSection& s) { return s.kind == k; }))
      throw InputError("--kind " + k + ": unknown model kind (expected " + kind_list() + ")");
  }
  for (const ModelSection& s : model_sections())
    if (std::find(kinds.begin(), kinds.end(), s.kind) != kinds.end()) selected.push_back(&s);
  return selected;
}

int run_models(bool json, const std::vector<std::string>& kind_values) {
  const std::vector<const ModelSection*> sections = selected_sections(kind_values);
  if (json) {
    nlohmann::json j;
    for (const ModelSection* s : sections) j[s->key] = s->json();
    std::cout << json_text(j, 2) << "\n";
    return kExitOk;
  }
  bool first = true;
  for (const ModelSection* section : sections) {
    const ModelSection& s = *section;
    if (!first) std::cout << "\n";
    first = false;
    std::cout << s.title << "\n";
    s.print(std::cout);
  }
  return kExitOk;
}

Runner setup_models(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  auto kinds = std::make_shared<std::vector<std::string>>();
  app.add_flag("--json", *json, "machine-readable output");
  app.add_option("--kind", *kinds,
                 "only these sections: " + kind_list() +
                     " (comma-separated or repeated; kernel: the models --model takes; default all)")
      ->allow_extra_args(false);
  return [json, kinds] { return run_models(*json, *kinds); };
}

}  // namespace
FLASHBITS_SUBCOMMAND(models, "models", "List the kernel, tensor-core and special-function models with their parameters",
                     setup_models);
}  // namespace fb::cli
