// traces/probe_check.cpp: replays probe cases through the tensor-core models (probe_check.hpp).
#include "traces/probe_check.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "emu/dot/dot_step_json.hpp"
#include "emu/dot/tensor_core.hpp"
#include "formats/json_text.hpp"
#include "traces/probe_file.hpp"

namespace fb::gpu {

std::string unknown_tensor_core_model_text(const std::string& name) {
  std::set<std::string> known;
  for (const TensorCoreModel& m : tensor_core_models()) known.insert(std::string(m.name));
  std::string text = "unknown tensor-core model '" + name + "' (known: ";
  for (const std::string& k : known) text += (k == *known.begin() ? "" : ", ") + k;
  return text + ")";
}

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
std::string bits_and_value(const Format& f, std::uint32_t bits) {
  return hex(f, bits) + " (" + value_text(f, bits) + ")";
}

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
    if (!is_tensor_core_model_name(name)) {
      // A name no preset has: listing the input format would suggest a missing table entry.
      why = unknown_tensor_core_model_text(name);
    } else {
      why = "model '" + name + "' has no preset for input format " + std::string(h.input.name);
    }
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

void explain_text(std::ostream& out, const ProbeSection& sec, std::size_t i, std::uint32_t expected,
                  const DotTrace& trace) {
  const ProbeHeader& h = sec.header;
  out << "  case " << i << " (batch " << h.batches[sec.batch(i)] << ")\n";
  out << "    C = " << bits_and_value(h.c_format, sec.c(i)) << "\n";
  for (int j = 0; j < h.k; ++j) {
    const std::uint32_t a = sec.a(i)[j], b = sec.b(i)[j];
    out << "    a" << j << " = " << bits_and_value(h.input, a) << "  b" << j << " = " << bits_and_value(h.input, b)
        << "  a*b = " << to_double(h.input, a) * to_double(h.input, b) << "\n";
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

// Replays cases of one section under one model. expected() gives fused_dot_bits' result
// (for a NaN, possibly another NaN pattern: NaNs compare equal here) without its per-call
// allocations and decoding: inputs through a table of (float)to_double(format, pattern),
// exactly fused_dot_bits' conversion, then fused_dot on the floats, whose result carries
// the output bits (fp32 outputs: the float's bits; fp16: its value, re-encoded exactly).
// Mismatches are explained with fused_dot_bits itself.
class Replayer {
 public:
  Replayer(const TensorCoreModel& model, const ProbeHeader& h) : model_(model), h_(h) {
    const Format& acc = accumulator_format(model);
    fp16_acc_ = acc == formats::fp16;
    if (h.input.width() <= 20) in_table_ = table(h.input);
    if (fp16_acc_) c_table_ = table(formats::fp16);
  }
  std::uint32_t expected(const ProbeSection& sec, std::size_t i, float* a, float* b) const {
    const int k = h_.k;
    const std::uint32_t* ab = sec.a(i);
    const std::uint32_t* bb = sec.b(i);
    if (in_table_.empty())
      return fused_dot_bits(model_, sec.c(i), {ab, static_cast<std::size_t>(k)}, {bb, static_cast<std::size_t>(k)});
    const int shift = h_.input.storage_shift();
    const std::uint32_t mask = h_.input.width_mask();
    for (int j = 0; j < k; ++j) {
      a[j] = in_table_[(ab[j] >> shift) & mask];
      b[j] = in_table_[(bb[j] >> shift) & mask];
    }
    const std::uint32_t cb = sec.c(i);
    float c;
    if (fp16_acc_) {
      c = c_table_[cb & 0xffffu];
    } else {
      c = std::bit_cast<float>(cb);
      if (std::isnan(c)) c = static_cast<float>(to_double(formats::fp32, cb));  // as fused_dot_bits converts it
    }
    const float d = fused_dot(model_, c, a, b, k);
    if (!fp16_acc_) return std::bit_cast<std::uint32_t>(d);
    std::uint32_t bits = 0;
    if (std::isnan(d)) return to_container(formats::fp16, formats::fp16.quiet_nan_pattern());
    if (from_double_exact(formats::fp16, static_cast<double>(d), bits)) return bits;
    return fused_dot_bits(model_, cb, {ab, static_cast<std::size_t>(k)}, {bb, static_cast<std::size_t>(k)});
  }

 private:
  static std::vector<float> table(const Format& f) {
    std::vector<float> t(std::size_t{1} << f.width());
    for (std::uint32_t layout = 0; layout < t.size(); ++layout) {
      t[layout] = static_cast<float>(to_double(f, to_container(f, layout)));
    }
    return t;
  }
  const TensorCoreModel& model_;
  const ProbeHeader& h_;
  bool fp16_acc_ = false;
  std::vector<float> in_table_, c_table_;
};

// What replaying one section found: counts per batch and the mismatching cases in file order.
struct SectionResult {
  std::vector<std::size_t> batch_cases, batch_mismatches;
  std::vector<std::size_t> mismatches;
};

// Replays every case of `sec` on up to `jobs` threads. The cases are cut into chunks in
// file order; each chunk's counts and mismatches are kept apart and joined in chunk order,
// so the result does not depend on the thread count or on which thread ran which chunk.
SectionResult replay_section(const ProbeSection& sec, const TensorCoreModel& model, unsigned jobs) {
  const ProbeHeader& h = sec.header;
  const Replayer replayer(model, h);
  const std::size_t n = sec.cases(), nb = h.batches.size();
  const std::size_t chunk = std::clamp<std::size_t>(n / (16 * std::max(1u, jobs)) + 1, 64, std::size_t{1} << 16);
  const std::size_t chunks = (n + chunk - 1) / chunk;
  std::vector<SectionResult> parts(chunks);
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    std::vector<float> a(static_cast<std::size_t>(h.k)), b(static_cast<std::size_t>(h.k));
    for (std::size_t ci; (ci = next.fetch_add(1)) < chunks;) {
      SectionResult& r = parts[ci];
      r.batch_cases.assign(nb, 0);
      r.batch_mismatches.assign(nb, 0);
      const std::size_t end = std::min(n, (ci + 1) * chunk);
      for (std::size_t i = ci * chunk; i < end; ++i) {
        const std::uint32_t expected = replayer.expected(sec, i, a.data(), b.data());
        ++r.batch_cases[sec.batch(i)];
        if (same_result(h.d_format, sec.d(i), expected)) continue;
        ++r.batch_mismatches[sec.batch(i)];
        r.mismatches.push_back(i);
      }
    }
  };
  const std::size_t threads = std::min<std::size_t>(std::max(1u, jobs), chunks);
  std::vector<std::thread> pool;
  std::string spawn_failure;
  for (std::size_t t = 1; t < threads; ++t) {
    try {
      pool.emplace_back(work);
    } catch (const std::system_error& e) {
      // The system's thread or memory limit: stop the started threads (no chunk is left for
      // them), join them and report it (bad input: --jobs too large for this machine).
      spawn_failure = "--jobs " + std::to_string(jobs) + ": cannot start thread " + std::to_string(t + 1) + " (" +
                      e.code().message() + "); give a smaller --jobs";
      next = chunks;
      break;
    }
  }
  if (spawn_failure.empty()) work();
  for (std::thread& t : pool) t.join();
  if (!spawn_failure.empty()) throw std::invalid_argument(spawn_failure);
  SectionResult all;
  all.batch_cases.assign(nb, 0);
  all.batch_mismatches.assign(nb, 0);
  for (const SectionResult& r : parts) {
    for (std::size_t bi = 0; bi < nb; ++bi) {
      all.batch_cases[bi] += r.batch_cases[bi];
      all.batch_mismatches[bi] += r.batch_mismatches[bi];
    }
    all.mismatches.insert(all.mismatches.end(), r.mismatches.begin(), r.mismatches.end());
  }
  return all;
}

// A section with `sec`'s header (plus `extra` keys) and no cases yet.
ProbeSection subset_of(const ProbeSection& sec, const std::map<std::string, std::string>& extra) {
  ProbeSection out;
  out.header = sec.header;
  for (const auto& [key, value] : extra) out.header.extra[key] = value;
  return out;
}
void copy_case(const ProbeSection& from, std::size_t i, ProbeSection& to) {
  to.add_case(from.batch(i), from.c(i), from.a(i), from.b(i), from.d(i));
}

}  // namespace

int run_probe_check(const std::string& path, const ProbeCheckOptions& options, std::ostream& out, std::ostream& err) {
  ProbeFile file;
  try {
    file = read_probe_file(path);
  } catch (const ProbeFileError& e) {
    err << "error: " << e.what() << "\n";
    return 2;
  }
  // A file of no section would "match" vacuously (exit 0 on nothing). Sections of 0 cases are
  // a real file: --mismatches-out writes every section, 0 cases where nothing mismatched.
  if (file.sections.empty()) {
    err << "error: " << path << ": holds no section: nothing to check\n";
    return 2;
  }
  const unsigned jobs = options.jobs != 0 ? options.jobs : std::max(1u, std::thread::hardware_concurrency());
  ProbeFile mismatch_file, sample_file, prediction_file;
  std::size_t mismatch_file_cases = 0, sample_file_cases = 0;
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
    const SectionResult result = replay_section(sec, model, jobs);
    const std::vector<std::size_t>& batch_cases = result.batch_cases;
    const std::vector<std::size_t>& batch_mismatches = result.batch_mismatches;
    const std::size_t mismatches = result.mismatches.size();
    nlohmann::json explained = nlohmann::json::array();
    std::ostringstream text;
    for (std::size_t m = 0; m < mismatches && m < options.max_report; ++m) {
      const std::size_t i = result.mismatches[m];
      const std::span<const std::uint32_t> a(sec.a(i), static_cast<std::size_t>(h.k));
      const std::span<const std::uint32_t> b(sec.b(i), static_cast<std::size_t>(h.k));
      DotTrace trace;
      const std::uint32_t expected = fused_dot_bits(model, sec.c(i), a, b, &trace);
      if (options.json) {
        nlohmann::json steps = nlohmann::json::array();
        for (const DotStepEvent& e : trace.steps) steps.push_back(nlohmann::json(dot_step_json(e)));
        nlohmann::json as = nlohmann::json::array(), bs = nlohmann::json::array();
        for (int j = 0; j < h.k; ++j) {
          as.push_back({{"bits", hex(h.input, a[j])}, {"value", to_double(h.input, a[j])}});
          bs.push_back({{"bits", hex(h.input, b[j])}, {"value", to_double(h.input, b[j])}});
        }
        nlohmann::json m_json = {
            {"case", i},
            {"batch", h.batches[sec.batch(i)]},
            {"c", {{"bits", hex(h.c_format, sec.c(i))}, {"value", to_double(h.c_format, sec.c(i))}}},
            {"a", as},
            {"b", bs},
            {"expected", {{"bits", hex(h.d_format, expected)}, {"value", value_text(h.d_format, expected)}}},
            {"got", {{"bits", hex(h.d_format, sec.d(i))}, {"value", value_text(h.d_format, sec.d(i))}}},
            {"steps", steps}};
        if (!is_nan(h.d_format, expected) && !is_nan(h.d_format, sec.d(i)))
          m_json["ulps"] = ulps_apart(h.d_format, sec.d(i), expected);
        explained.push_back(m_json);
      } else {
        explain_text(text, sec, i, expected, trace);
      }
    }
    if (!options.mismatches_out.empty()) {
      ProbeSection sub = subset_of(sec, {{"subset", "mismatches"},
                                         {"subset_model", model_name},
                                         {"subset_mismatches_total", std::to_string(mismatches)}});
      for (std::size_t m = 0; m < mismatches && m < options.max_mismatches; ++m)
        copy_case(sec, result.mismatches[m], sub);
      mismatch_file_cases += sub.cases();
      mismatch_file.sections.push_back(std::move(sub));
    }
    if (!options.sample_out.empty()) {
      ProbeSection sub =
          subset_of(sec, {{"subset", "sample"}, {"subset_per_batch", std::to_string(options.sample_per_batch)}});
      std::vector<std::size_t> taken(h.batches.size(), 0);
      for (std::size_t i = 0; i < sec.cases(); ++i) {
        if (taken[sec.batch(i)] < options.sample_per_batch) {
          ++taken[sec.batch(i)];
          copy_case(sec, i, sub);
        }
      }
      sample_file_cases += sub.cases();
      sample_file.sections.push_back(std::move(sub));
    }
    if (!options.predictions_out.empty()) {
      // Every case with D = the model's output: what a rehearsal (no GPU) checks against.
      ProbeSection sub =
          subset_of(sec, {{"source", "model-prediction:" + model_name}, {"subset", "model_predictions"}});
      for (std::size_t i = 0; i < sec.cases(); ++i) {
        const std::span<const std::uint32_t> a(sec.a(i), static_cast<std::size_t>(h.k));
        const std::span<const std::uint32_t> b(sec.b(i), static_cast<std::size_t>(h.k));
        sub.add_case(sec.batch(i), sec.c(i), sec.a(i), sec.b(i), fused_dot_bits(model, sec.c(i), a, b));
      }
      prediction_file.sections.push_back(std::move(sub));
    }
    total_mismatches += mismatches;
    total_cases += sec.cases();
    const std::string source = h.extra.count("source") ? h.extra.at("source") : "unknown";
    if (options.json) {
      nlohmann::json batches = nlohmann::json::object();
      for (std::size_t bi = 0; bi < h.batches.size(); ++bi) {
        batches[h.batches[bi]] = {{"cases", batch_cases[bi]},
                                  {"matches", batch_cases[bi] - batch_mismatches[bi]},
                                  {"mismatches", batch_mismatches[bi]}};
      }
      report["forms"].push_back({{"form", h.form},
                                 {"model", model_name},
                                 {"model_hardware_validated", model.hardware_validated},
                                 {"k", h.k},
                                 {"input", h.input.name},
                                 {"source", source},
                                 {"cases", sec.cases()},
                                 {"matches", sec.cases() - mismatches},
                                 {"mismatches", mismatches},
                                 {"batches", batches},
                                 {"explained", explained}});
    } else {
      out << h.form << " [model " << model_name << " (" << validation << "), source " << source << "]: " << sec.cases()
          << " cases, " << sec.cases() - mismatches << " match, " << mismatches << " mismatch\n";
      for (std::size_t bi = 0; bi < h.batches.size(); ++bi) {
        if (batch_cases[bi] == 0) continue;
        out << "  batch " << h.batches[bi] << ": " << batch_cases[bi] << " cases, "
            << batch_cases[bi] - batch_mismatches[bi] << " match, " << batch_mismatches[bi] << " mismatch\n";
      }
      out << text.str();
      if (mismatches > options.max_report) {
        out << "  (" << mismatches - options.max_report << " more mismatches not shown; --max-report)\n";
      }
    }
  }
  // The subsets, written once every section has been replayed.
  auto write_subset = [&](const std::string& to, const ProbeFile& subset) {
    try {
      write_probe_file(to, subset);
      return true;
    } catch (const ProbeFileError& e) {
      err << "error: " << e.what() << "\n";
      return false;
    }
  };
  if (!options.mismatches_out.empty() && !write_subset(options.mismatches_out, mismatch_file)) return 2;
  if (!options.predictions_out.empty() && !write_subset(options.predictions_out, prediction_file)) return 2;
  if (!options.sample_out.empty() && !write_subset(options.sample_out, sample_file)) return 2;
  if (options.json) {
    report["cases"] = total_cases;
    report["matches"] = total_cases - total_mismatches;
    report["mismatches"] = total_mismatches;
    if (!options.mismatches_out.empty())
      report["mismatches_out"] = {{"file", options.mismatches_out}, {"cases", mismatch_file_cases}};
    if (!options.sample_out.empty())
      report["sample_out"] = {{"file", options.sample_out}, {"cases", sample_file_cases}};
    out << json_text(report, 2) << "\n";
  } else {
    out << "total: " << total_cases << " cases, " << total_mismatches << " mismatch\n";
    if (!options.mismatches_out.empty())
      out << "mismatches: " << mismatch_file_cases << " cases written to " << options.mismatches_out << "\n";
    if (!options.sample_out.empty())
      out << "sample: " << sample_file_cases << " cases written to " << options.sample_out << "\n";
  }
  return total_mismatches == 0 ? 0 : 1;
}

}  // namespace fb::gpu
