// gpu/probe_check.cpp: replays probe cases through the tensor-core models (probe_check.hpp).
#include "gpu/probe_check.hpp"

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <ostream>
#include <span>
#include <sstream>
#include <vector>

#include "emu/tensor_core.hpp"
#include "gpu/probe_file.hpp"

namespace fb::gpu {
namespace {

std::string hex(const Format& f, std::uint32_t bits) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%0*x", f.hex_digits(), bits);
  return buf;
}
std::string value_text(const Format& f, std::uint32_t bits) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", to_double(f, bits));
  return buf;
}
std::string bits_and_value(const Format& f, std::uint32_t bits) { return hex(f, bits) + " (" + value_text(f, bits) + ")"; }

// Signed distance in units in the last place between two finite values of one format,
// counted along the ordered bit patterns (the usual "ulps apart").
long long ulps_apart(const Format& f, std::uint32_t got, std::uint32_t expected) {
  auto ordered = [&](std::uint32_t bits) -> long long {
    const std::uint32_t layout = to_layout(f, bits);
    const long long magnitude = layout & ~f.sign_mask();
    return (layout & f.sign_mask()) ? -magnitude : magnitude;
  };
  return ordered(got) - ordered(expected);
}

bool same_result(const Format& f, std::uint32_t got, std::uint32_t expected) {
  if (is_nan(f, got) && is_nan(f, expected)) return true;
  return to_layout(f, got) == to_layout(f, expected);
}

// The named preset adapted to the section's output format: the presets are keyed by
// input format, while the same instruction family can accumulate into fp16 (RNE output)
// or, for fp8 on Hopper, into the e8m13 fp32 form the preset already names.
bool model_for_section(const std::string& name, const ProbeHeader& h, TensorCoreModel& model, std::string& why) {
  const TensorCoreModel* preset = nullptr;
  const std::string f16acc = "-f16acc";
  if (h.d_format == formats::fp16 &&
      (name.size() < f16acc.size() || name.compare(name.size() - f16acc.size(), f16acc.size(), f16acc) != 0)) {
    preset = find_tensor_core_model(name + f16acc, h.input);  // the fp16-accumulate preset, if named
  }
  if (!preset) preset = find_tensor_core_model(name, h.input);
  if (!preset) {
    why = "model '" + name + "' has no preset for input format " + std::string(h.input.name);
    return false;
  }
  model = *preset;
  if (h.d_format == formats::fp16) {
    if (!(h.c_format == formats::fp16)) {
      why = "d_format fp16 needs c_format fp16";
      return false;
    }
    model.output = DotOutput::fp16_rne;
  } else if (model.output == DotOutput::fp16_rne) {
    model.output = DotOutput::fp32_rz;
  }
  return true;
}

nlohmann::json step_json(const DotStepEvent& s) {
  return {{"largest_exponent", s.largest_exponent}, {"terms", s.terms},
          {"truncated_value", s.truncated_value},   {"truncated_terms", s.truncated_terms},
          {"carry_out", s.carry_out},               {"normalisation_shift", s.normalisation_shift},
          {"output_residue", s.output_residue}};
}

void explain_text(std::ostream& out, const ProbeSection& sec, std::size_t i, std::uint32_t expected,
                  const DotTrace& trace) {
  const ProbeHeader& h = sec.header;
  out << "  case " << i << " (batch " << h.batches[sec.batch(i)] << ")\n";
  out << "    C = " << bits_and_value(h.c_format, sec.c(i)) << "\n";
  for (int j = 0; j < h.k; ++j) {
    const std::uint32_t a = sec.a(i)[j], b = sec.b(i)[j];
    out << "    a" << j << " = " << bits_and_value(h.input, a) << "  b" << j << " = "
        << bits_and_value(h.input, b) << "  a*b = " << to_double(h.input, a) * to_double(h.input, b) << "\n";
  }
  out << "    expected " << bits_and_value(h.d_format, expected) << "  got " << bits_and_value(h.d_format, sec.d(i));
  if (!is_nan(h.d_format, expected) && !is_nan(h.d_format, sec.d(i))) {
    out << "  (" << ulps_apart(h.d_format, sec.d(i), expected) << " ulp)";
  }
  out << "\n";
  for (std::size_t s = 0; s < trace.steps.size(); ++s) {
    const DotStepEvent& e = trace.steps[s];
    out << "    step " << s << ": largest exponent " << e.largest_exponent << ", " << e.terms << " terms, "
        << e.truncated_terms << " truncated (removed " << e.truncated_value << "), carry "
        << (e.carry_out ? "yes" : "no") << ", normalisation shift " << e.normalisation_shift
        << ", output rounding removed " << e.output_residue << "\n";
  }
}

}  // namespace

int run_probe_check(const std::string& path, const ProbeCheckOptions& options, std::ostream& out,
                    std::ostream& err) {
  ProbeFile file;
  try {
    file = read_probe_file(path);
  } catch (const ProbeFileError& e) {
    err << "error: " << e.what() << "\n";
    return 2;
  }
  nlohmann::json report = {{"file", path}, {"forms", nlohmann::json::array()}};
  std::size_t total_mismatches = 0, total_cases = 0;
  for (std::size_t s = 0; s < file.sections.size(); ++s) {
    const ProbeSection& sec = file.sections[s];
    const ProbeHeader& h = sec.header;
    std::string model_name = options.model;
    if (model_name.empty()) {
      if (h.models.empty()) {
        err << "error: " << path << ": section " << s << ": models: missing (pass --model)\n";
        return 2;
      }
      model_name = h.models.front();
    }
    TensorCoreModel model{};
    std::string why;
    if (!model_for_section(model_name, h, model, why)) {
      err << "error: " << path << ": section " << s << " (" << h.form << "): " << why << "\n";
      return 2;
    }
    // Report the preset actually used, and whether its parameters were ever measured.
    model_name = std::string(model.name);
    if (model.output == DotOutput::fp16_rne && model_name.find("f16acc") == std::string::npos) {
      model_name += " (output adapted to fp16 RNE)";
    }
    const std::string validation = model.hardware_validated ? "validated on hardware" : "NOT validated on hardware";
    std::vector<std::size_t> batch_cases(h.batches.size()), batch_mismatches(h.batches.size());
    std::size_t mismatches = 0;
    nlohmann::json explained = nlohmann::json::array();
    std::ostringstream text;
    for (std::size_t i = 0; i < sec.cases(); ++i) {
      const std::span<const std::uint32_t> a(sec.a(i), static_cast<std::size_t>(h.k));
      const std::span<const std::uint32_t> b(sec.b(i), static_cast<std::size_t>(h.k));
      const std::uint32_t expected = fused_dot_bits(model, sec.c(i), a, b);
      ++batch_cases[sec.batch(i)];
      if (same_result(h.d_format, sec.d(i), expected)) continue;
      ++mismatches;
      ++batch_mismatches[sec.batch(i)];
      if (mismatches > options.max_report) continue;
      DotTrace trace;
      fused_dot_bits(model, sec.c(i), a, b, &trace);
      if (options.json) {
        nlohmann::json steps = nlohmann::json::array();
        for (const DotStepEvent& e : trace.steps) steps.push_back(step_json(e));
        nlohmann::json as = nlohmann::json::array(), bs = nlohmann::json::array();
        for (int j = 0; j < h.k; ++j) {
          as.push_back({{"bits", hex(h.input, a[j])}, {"value", to_double(h.input, a[j])}});
          bs.push_back({{"bits", hex(h.input, b[j])}, {"value", to_double(h.input, b[j])}});
        }
        nlohmann::json m = {{"case", i},
                            {"batch", h.batches[sec.batch(i)]},
                            {"c", {{"bits", hex(h.c_format, sec.c(i))}, {"value", to_double(h.c_format, sec.c(i))}}},
                            {"a", as},
                            {"b", bs},
                            {"expected", {{"bits", hex(h.d_format, expected)}, {"value", value_text(h.d_format, expected)}}},
                            {"got", {{"bits", hex(h.d_format, sec.d(i))}, {"value", value_text(h.d_format, sec.d(i))}}},
                            {"steps", steps}};
        if (!is_nan(h.d_format, expected) && !is_nan(h.d_format, sec.d(i))) m["ulps"] = ulps_apart(h.d_format, sec.d(i), expected);
        explained.push_back(m);
      } else {
        explain_text(text, sec, i, expected, trace);
      }
    }
    total_mismatches += mismatches;
    total_cases += sec.cases();
    const std::string source = h.extra.count("source") ? h.extra.at("source") : "unknown";
    if (options.json) {
      nlohmann::json batches = nlohmann::json::object();
      for (std::size_t bi = 0; bi < h.batches.size(); ++bi) {
        batches[h.batches[bi]] = {{"cases", batch_cases[bi]}, {"mismatches", batch_mismatches[bi]}};
      }
      report["forms"].push_back({{"form", h.form}, {"model", model_name}, {"model_hardware_validated", model.hardware_validated}, {"k", h.k}, {"input", h.input.name},
                                 {"source", source}, {"cases", sec.cases()}, {"mismatches", mismatches},
                                 {"batches", batches}, {"explained", explained}});
    } else {
      out << h.form << " [model " << model_name << " (" << validation << "), source " << source << "]: " << sec.cases() << " cases, "
          << sec.cases() - mismatches << " match, " << mismatches << " mismatch\n";
      for (std::size_t bi = 0; bi < h.batches.size(); ++bi) {
        if (batch_cases[bi] == 0) continue;
        out << "  batch " << h.batches[bi] << ": " << batch_cases[bi] << " cases, " << batch_mismatches[bi]
            << " mismatch\n";
      }
      out << text.str();
      if (mismatches > options.max_report) {
        out << "  (" << mismatches - options.max_report << " more mismatches not shown; --max-report)\n";
      }
    }
  }
  if (options.json) {
    report["cases"] = total_cases;
    report["mismatches"] = total_mismatches;
    out << report.dump(2) << "\n";
  } else {
    out << "total: " << total_cases << " cases, " << total_mismatches << " mismatch\n";
  }
  return total_mismatches == 0 ? 0 : 1;
}

}  // namespace fb::gpu
