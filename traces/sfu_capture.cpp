// traces/sfu_capture.cpp: FBSFUT1 (fb-sfu-probe) -> SfuTable (emu table model); see traces/sfu_capture.hpp.
#include "traces/sfu_capture.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "formats/file_read.hpp"
#include "traces/key_value_line.hpp"
#include "traces/little_endian.hpp"

namespace fb::gpu {
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& field, const std::string& what) {
  throw std::runtime_error(path + ": " + field + ": " + what);
}

unsigned long long parse_unsigned(const std::string& path, const std::string& field, const std::string& text) {
  std::size_t used = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(text, &used, 10);
  } catch (const std::exception&) {
    used = 0;
  }
  if (text.empty() || used != text.size() || text[0] == '-')
    fail(path, field, "'" + text + "' is not an unsigned integer");
  return v;
}

// The text header fb-sfu-probe writes before its binary part: `magic` (with its newline),
// "key=value" lines, then "end". `body` is the offset just past "end\n".
struct CaptureHeader {
  std::string path;
  std::map<std::string, std::string> fields;
  std::size_t body = 0;

  std::string need(const char* key) const {
    const auto it = fields.find(key);
    if (it == fields.end()) fail(path, key, "missing");
    return it->second;
  }
  // The provenance keys are written by every fb-sfu-probe, but a missing one only blanks its
  // part of the description.
  std::string optional(const char* key) const {
    const auto it = fields.find(key);
    return it == fields.end() ? std::string() : it->second;
  }
  std::string device() const {
    return optional("source") + " cc " + optional("compute_capability") + " driver " + optional("driver");
  }
};

CaptureHeader read_capture_header(const std::string& path, const std::string& data, const std::string& magic) {
  const std::size_t end = data.find("\nend\n");
  const std::string name = magic.substr(0, magic.size() - 1);
  if (data.compare(0, magic.size(), magic) != 0 || end == std::string::npos)
    fail(path, "magic", "not an " + name + " file");
  CaptureHeader h;
  h.path = path;
  std::istringstream header(data.substr(magic.size(), end - magic.size() + 1));
  for (std::string line, key, value; std::getline(header, line);) {
    if (!split_key_value(line, key, value)) fail(path, "header", "line '" + line + "' is not key=value");
    h.fields[key] = value;
  }
  h.body = end + 5;
  return h;
}

// The little-endian 32-bit word at byte p of a capture (the caller has checked the size).
std::uint32_t u32_at(const std::string& data, std::size_t p) {
  return static_cast<std::uint32_t>(load_little_endian(data.data() + p, 4));
}

}  // namespace

SfuTable sfu_capture_to_table(const std::string& path) {
  const std::string data = read_file_capped(path, kSfuCaptureFile);
  const CaptureHeader header = read_capture_header(path, data, "FBSFUT1\n");
  const std::string function = header.need("function");
  if (function != "ex2" && function != "rcp" && function != "lg2") {
    fail(path, "function",
         "'" + function + "' has no FBSFU1 form (only ex2, rcp and lg2 tables convert); keep the FBSFUT1 file");
  }
  const bool is_ex2 = function == "ex2", is_lg2 = function == "lg2";
  const std::string key = header.need("key");
  const bool ex2_sm = is_ex2 && key == "ex2_sign_magnitude", lg2_ext = is_lg2 && key == "lg2_extended";
  const std::map<std::string, FixedPointRounding> roundings = {
      {"ex2_fixed_point_floor", FixedPointRounding::floor},
      {"ex2_fixed_point_nearest_even", FixedPointRounding::nearest_even},
      {"ex2_fixed_point_toward_zero", FixedPointRounding::toward_zero}};
  if (is_ex2 && !ex2_sm && !roundings.count(key)) {
    fail(path, "key", "'" + key + "' is not an ex2 fixed-point key or ex2_sign_magnitude");
  }
  if (function == "rcp" && key != "rcp_mantissa") fail(path, "key", "'" + key + "' is not rcp_mantissa");
  if (is_lg2 && !lg2_ext && key != "lg2_exponent_split") {
    fail(path, "key", "'" + key + "' is not lg2_exponent_split or lg2_extended");
  }
  // fb-sfu-probe evaluates the table the way the emu does on every input; only a table that
  // reproduced the hardware everywhere may call itself measured.
  const unsigned long long mismatches =
      parse_unsigned(path, "table_model_mismatches", header.need("table_model_mismatches"));
  if (mismatches != 0) {
    fail(path, "table_model_mismatches",
         std::to_string(mismatches) + " inputs where the table model differs from the hardware; not converted");
  }
  const unsigned long long nbits = parse_unsigned(path, "key_bits", header.need("key_bits"));
  if (is_ex2 && (nbits < 1 || nbits > 24)) fail(path, "key_bits", "must be 1..24");
  if (!is_ex2 && nbits != 23) fail(path, "key_bits", "must be 23 for " + key);
  const std::size_t entries = std::size_t{1} << (ex2_sm ? nbits + 1 : nbits);
  if (parse_unsigned(path, "entries", header.need("entries")) != entries) {
    fail(path, "entries", ex2_sm ? "is not 2^(key_bits + 1)" : "is not 2^key_bits");
  }
  std::size_t at = header.body;
  if (data.size() < at + (entries + 1) / 2 + 4) fail(path, "deltas", "file ends early");
  SfuTable table;
  // A capture on a GPU (fb-sfu-probe: source=cuda:<device>) is a measurement; a rehearsal's
  // table (fb-sfu-rehearse: source=rehearsal:..., a stand-in for the GPU) is not.
  table.measured_on_hardware = header.optional("source").rfind("cuda:", 0) == 0;
  const unsigned long long nan_output = parse_unsigned(path, "nan_output", header.need("nan_output"));
  if (nan_output > 0xffffffffull) fail(path, "nan_output", "does not fit 32 bits");
  table.nan_output = static_cast<std::uint32_t>(nan_output);
  table.source = "fb-sfu-probe " + header.device();
  // The deltas are ulps from the correctly rounded value at the key (traces/README.md
  // "FBSFUT1"), the same base FBSFU1 uses for these forms.
  std::vector<std::uint32_t>* outputs = nullptr;
  float (*base_value)(std::size_t, int) = nullptr;
  std::vector<std::uint32_t> sign_magnitude_outputs;
  if (ex2_sm) {
    table.function = SpecialFunction::ex2;
    table.form = SfuTableForm::ex2_sign_magnitude;
    table.fraction_bits = static_cast<int>(nbits);
    table.source += ", ex2 sign magnitude";
    outputs = &sign_magnitude_outputs;
    base_value = [](std::size_t i, int n) {
      const std::size_t half = std::size_t{1} << n;
      const float frac = std::ldexp(static_cast<float>(i % half), -n);  // exact: i < 2^24
      return ex2_correct_ftz(i < half ? frac : -frac);
    };
  } else if (is_ex2) {
    table.function = SpecialFunction::ex2;
    table.form = SfuTableForm::ex2_fixed_point;
    table.fraction_bits = static_cast<int>(nbits);
    table.argument_rounding = roundings.at(key);
    table.source += ", argument " + key.substr(std::string("ex2_fixed_point_").size());
    outputs = &table.fraction_outputs;
    base_value = [](std::size_t i, int n) {
      return ex2_correct_ftz(std::ldexp(static_cast<float>(i), -n));
    };  // exact: i < 2^24
  } else if (is_lg2) {
    table.function = SpecialFunction::lg2;
    table.form = lg2_ext ? SfuTableForm::lg2_extended : SfuTableForm::lg2_exponent_split;
    table.source += lg2_ext ? ", lg2 extended" : ", lg2 exponent split";
    outputs = &table.mantissa_outputs;
    base_value = [](std::size_t m, int n) {
      return lg2_correct_ftz(1.0f + std::ldexp(static_cast<float>(m), -n));
    };  // exact: 1.m
  } else {
    table.function = SpecialFunction::rcp;
    table.form = SfuTableForm::rcp_mantissa;
    table.source += ", rcp mantissa";
    outputs = &table.mantissa_outputs;
    base_value = [](std::size_t m, int n) {
      return rcp_correct_ftz(1.0f + std::ldexp(static_cast<float>(m), -n));
    };  // exact: 1.m
  }
  table.source += " (" + path + ")";
  outputs->resize(entries);
  std::vector<bool> escaped(entries, false);
  for (std::size_t i = 0; i < entries; ++i) {
    const unsigned char byte = static_cast<unsigned char>(data[at + i / 2]);
    int d = (i % 2 == 0) ? (byte & 0xf) : (byte >> 4);
    if (d >= 8) d -= 16;
    if (d == -8) {
      escaped[i] = true;
      continue;
    }
    const float base = base_value(i, static_cast<int>(nbits));
    std::uint32_t bits;
    std::memcpy(&bits, &base, 4);
    (*outputs)[i] = bits + static_cast<std::uint32_t>(d);
  }
  at += (entries + 1) / 2;
  const std::uint32_t n_escapes = u32_at(data, at);
  at += 4;
  if (lg2_ext ? data.size() < at + 8ull * n_escapes : data.size() != at + 8ull * n_escapes) {
    fail(path, "escapes", "count does not match the file size");
  }
  for (std::uint32_t e = 0; e < n_escapes; ++e) {
    const std::uint32_t k = u32_at(data, at + 8ull * e), bits = u32_at(data, at + 8ull * e + 4);
    if (k >= entries || !escaped[k])
      fail(path, "escapes", "entry " + std::to_string(e) + " names a key that is not escaped");
    (*outputs)[k] = bits;
    escaped[k] = false;
  }
  for (std::size_t i = 0; i < entries; ++i) {
    if (escaped[i]) fail(path, "escapes", "key " + std::to_string(i) + " is escaped but has no explicit value");
  }
  if (ex2_sm) {
    const std::size_t half = entries / 2;
    table.fraction_outputs.assign(sign_magnitude_outputs.begin(),
                                  sign_magnitude_outputs.begin() + static_cast<std::ptrdiff_t>(half));
    table.negative_fraction_outputs.assign(sign_magnitude_outputs.begin() + static_cast<std::ptrdiff_t>(half),
                                           sign_magnitude_outputs.end());
  }
  if (lg2_ext) {
    // guard_bits, final_rounding, then the residuals R[m] as zigzag LEB128 varints.
    const unsigned long long guard = parse_unsigned(path, "guard_bits", header.need("guard_bits"));
    if (guard > 24) fail(path, "guard_bits", "must be 0..24");
    table.guard_bits = static_cast<int>(guard);
    const std::string rounding = header.need("final_rounding");
    bool known = false;
    for (FinalRounding r :
         {FinalRounding::nearest_even, FinalRounding::toward_zero, FinalRounding::down, FinalRounding::up}) {
      if (rounding == to_string(r)) table.final_rounding = r, known = true;
    }
    if (!known) fail(path, "final_rounding", "'" + rounding + "' is not nearest_even, toward_zero, down or up");
    table.source += ", final rounding " + rounding + ", " + std::to_string(guard) + " guard bits";
    std::size_t p = at + 8ull * n_escapes;
    table.extended_residuals.resize(entries);
    for (std::size_t m = 0; m < entries; ++m) {
      std::uint64_t v = 0;
      for (int shift = 0;; shift += 7) {
        if (p >= data.size()) fail(path, "residuals", "file ends early (entry " + std::to_string(m) + ")");
        if (shift > 35) fail(path, "residuals", "entry " + std::to_string(m) + " is longer than 5 bytes");
        const auto byte = static_cast<unsigned char>(data[p++]);
        v |= static_cast<std::uint64_t>(byte & 0x7f) << shift;
        if (!(byte & 0x80)) break;
      }
      if (v > 0xffffffffull) fail(path, "residuals", "entry " + std::to_string(m) + " does not fit 32 bits");
      const auto z = static_cast<std::uint32_t>(v);
      table.extended_residuals[m] = static_cast<std::int32_t>((z >> 1) ^ (0u - (z & 1u)));
    }
    if (p != data.size()) fail(path, "residuals", std::to_string(data.size() - p) + " bytes after the last residual");
  }
  return table;
}

SfuTable sfu_raw_ex2_to_sign_magnitude_table(const std::string& path, std::string& report) {
  const std::string data = read_file_capped(path, kSfuCaptureFile);
  const CaptureHeader header = read_capture_header(path, data, "FBSFURAW1\n");
  if (header.need("function") != "ex2" || header.need("ptx") != "ex2.approx.ftz.f32")
    fail(path, "function", "not ex2.approx.ftz.f32");
  if (header.need("delta") != "int8" || header.need("escape") != "-128")
    fail(path, "delta", "expected int8 deltas, escape -128");
  constexpr std::size_t kPerBinade = std::size_t{1} << 23;
  if (parse_unsigned(path, "inputs_per_binade", header.need("inputs_per_binade")) != kPerBinade) {
    fail(path, "inputs_per_binade", "must be 8388608");
  }
  std::vector<std::uint32_t> starts;
  {
    std::istringstream list(header.need("binades"));
    for (std::string item; std::getline(list, item, ',');) {
      std::size_t used = 0;
      unsigned long v = 0;
      try {
        v = std::stoul(item, &used, 16);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != item.size() || v > 0xffffffffu || (v & 0x7fffffu) != 0)
        fail(path, "binades", "'" + item + "' is not a binade start");
      starts.push_back(static_cast<std::uint32_t>(v));
    }
  }
  std::size_t at = header.body;
  if (data.size() < at + starts.size() * kPerBinade + 4) fail(path, "deltas", "file ends early");
  const std::size_t escapes_at = at + starts.size() * kPerBinade;
  const std::uint32_t n_escapes = u32_at(data, escapes_at);
  if (data.size() != escapes_at + 4 + 8ull * n_escapes) fail(path, "escapes", "count does not match the file size");
  std::map<std::uint32_t, std::uint32_t> escaped;
  for (std::uint32_t e = 0; e < n_escapes; ++e)
    escaped[u32_at(data, escapes_at + 4 + 8ull * e)] = u32_at(data, escapes_at + 8 + 8ull * e);
  // The hardware's output for every input of binade b (the reference is the correctly rounded
  // 2^x, which the device's reference equals wherever it did not escape).
  auto outputs_of = [&](std::size_t b) {
    std::vector<std::uint32_t> out(kPerBinade);
    for (std::size_t m = 0; m < kPerBinade; ++m) {
      const std::uint32_t in = starts[b] + static_cast<std::uint32_t>(m);
      const auto d = static_cast<signed char>(data[at + b * kPerBinade + m]);
      if (d == -128) {
        const auto it = escaped.find(in);
        if (it == escaped.end()) fail(path, "escapes", "input " + std::to_string(in) + " is escaped but not listed");
        out[m] = it->second;
        continue;
      }
      float x;
      std::memcpy(&x, &in, 4);
      const float ref = ex2_correct_ftz(x);
      std::uint32_t rb;
      std::memcpy(&rb, &ref, 4);
      out[m] = rb + static_cast<std::uint32_t>(static_cast<int>(d));  // outputs are positive: bits order as values
    }
    return out;
  };
  const auto find = [&](std::uint32_t start) {
    const auto it = std::find(starts.begin(), starts.end(), start);
    if (it == starts.end()) fail(path, "binades", "the binades [1, 2) and (-2, -1] are needed");
    return static_cast<std::size_t>(it - starts.begin());
  };
  SfuTable table;
  table.function = SpecialFunction::ex2;
  table.form = SfuTableForm::ex2_sign_magnitude;
  table.fraction_bits = 23;
  table.measured_on_hardware = false;
  table.nan_output = 0x7fffffffu;
  table.fraction_outputs = outputs_of(find(0x3f800000u));
  table.negative_fraction_outputs = outputs_of(find(0xbf800000u));
  for (std::size_t i = 0; i < kPerBinade; ++i) {
    table.fraction_outputs[i] -= 1u << 23;           // ex2(1 + f) = 2 T+[f]: exponent field - 1
    table.negative_fraction_outputs[i] += 1u << 23;  // ex2(-1 - f) = T-[f] / 2: exponent field + 1
  }
  // The rule must reproduce every input of every binade in the file.
  const auto model = [&](std::uint32_t in) {
    float x;
    std::memcpy(&x, &in, 4);
    const double scaled = std::ldexp(std::fabs(static_cast<double>(x)), 23);
    const auto fixed = static_cast<std::uint64_t>(std::floor(scaled));
    const int k = static_cast<int>(fixed >> 23);
    const std::size_t i = fixed & 0x7fffffu;
    const bool negative = (in >> 31) != 0;
    float t;
    const std::uint32_t t_bits = negative ? table.negative_fraction_outputs[i] : table.fraction_outputs[i];
    std::memcpy(&t, &t_bits, 4);
    const float v = std::ldexp(t, negative ? -k : k);  // normal for the binades accepted below
    std::uint32_t vb;
    std::memcpy(&vb, &v, 4);
    return vb;
  };
  std::uint64_t checked = 0;
  for (std::size_t b = 0; b < starts.size(); ++b) {
    const std::uint32_t biased = (starts[b] >> 23) & 0xffu;
    if (biased < 96 || biased > 132) fail(path, "binades", "only binades with 2^-31 <= |x| < 64 are checked here");
    const std::vector<std::uint32_t> out = outputs_of(b);
    for (std::size_t m = 0; m < kPerBinade; ++m, ++checked) {
      const std::uint32_t in = starts[b] + static_cast<std::uint32_t>(m);
      if (model(in) != out[m]) {
        fail(path, "rule", "the sign-magnitude rule differs from the hardware at input " + std::to_string(in));
      }
    }
  }
  table.source = "fb-sfu-probe raw evidence " + header.device() + " (" +
                 std::filesystem::path(path).filename().string() +
                 "): T+ from [1,2), T- from (-2,-1]; the sign-magnitude rule (N=23) reproduces all " +
                 std::to_string(starts.size()) + " binades of the file (" + std::to_string(checked) +
                 " inputs), NOT yet verified on all 2^32 inputs; nan_output assumed 0x7fffffff";
  report = "sign-magnitude rule (N=23) reproduces all " + std::to_string(checked) + " inputs of " +
           std::to_string(starts.size()) + " binades (" + header.need("binades") + ")";
  return table;
}

}  // namespace fb::gpu
