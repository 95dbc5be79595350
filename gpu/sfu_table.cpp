// gpu/sfu_table.cpp: FBSFUT1 (fb-sfu-probe) -> SfuTable (emu table model); see sfu_table.hpp.
#include "gpu/sfu_table.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <vector>

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
  if (text.empty() || used != text.size() || text[0] == '-') fail(path, field, "'" + text + "' is not an unsigned integer");
  return v;
}

}  // namespace

SfuTable sfu_capture_to_table(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, "file", "cannot open");
  std::ostringstream buf;
  buf << f.rdbuf();
  const std::string data = buf.str();
  const std::size_t end = data.find("\nend\n");
  if (data.compare(0, 8, "FBSFUT1\n") != 0 || end == std::string::npos) fail(path, "magic", "not an FBSFUT1 file");
  std::map<std::string, std::string> kv;
  std::istringstream header(data.substr(8, end - 8 + 1));
  for (std::string line; std::getline(header, line);) {
    const std::size_t eq = line.find('=');
    if (eq == std::string::npos || eq == 0) fail(path, "header", "line '" + line + "' is not key=value");
    kv[line.substr(0, eq)] = line.substr(eq + 1);
  }
  auto need = [&](const char* key) {
    if (!kv.count(key)) fail(path, key, "missing");
    return kv[key];
  };
  const std::string function = need("function");
  if (function != "ex2" && function != "rcp" && function != "lg2") {
    fail(path, "function", "'" + function + "' has no FBSFU1 form (only ex2, rcp and lg2 tables convert); keep the FBSFUT1 file");
  }
  const bool is_ex2 = function == "ex2", is_lg2 = function == "lg2";
  const std::string key = need("key");
  const std::map<std::string, FixedPointRounding> roundings = {
      {"ex2_fixed_point_floor", FixedPointRounding::floor},
      {"ex2_fixed_point_nearest_even", FixedPointRounding::nearest_even},
      {"ex2_fixed_point_toward_zero", FixedPointRounding::toward_zero}};
  if (is_ex2 && !roundings.count(key)) fail(path, "key", "'" + key + "' is not an ex2 fixed-point key");
  if (function == "rcp" && key != "rcp_mantissa") fail(path, "key", "'" + key + "' is not rcp_mantissa");
  if (is_lg2 && key != "lg2_exponent_split") fail(path, "key", "'" + key + "' is not lg2_exponent_split");
  // fb-sfu-probe evaluates the table the way the emu does on every input; only a table that
  // reproduced the hardware everywhere may call itself measured.
  const unsigned long long mismatches = parse_unsigned(path, "table_model_mismatches", need("table_model_mismatches"));
  if (mismatches != 0) {
    fail(path, "table_model_mismatches",
         std::to_string(mismatches) + " inputs where the table model differs from the hardware; not converted");
  }
  const unsigned long long nbits = parse_unsigned(path, "key_bits", need("key_bits"));
  if (is_ex2 && (nbits < 1 || nbits > 24)) fail(path, "key_bits", "must be 1..24");
  if (!is_ex2 && nbits != 23) fail(path, "key_bits", "must be 23 for " + key);
  const std::size_t entries = std::size_t{1} << nbits;
  if (parse_unsigned(path, "entries", need("entries")) != entries) fail(path, "entries", "is not 2^key_bits");
  std::size_t at = end + 5;
  if (data.size() < at + (entries + 1) / 2 + 4) fail(path, "deltas", "file ends early");
  SfuTable table;
  table.measured_on_hardware = true;
  const unsigned long long nan_output = parse_unsigned(path, "nan_output", need("nan_output"));
  if (nan_output > 0xffffffffull) fail(path, "nan_output", "does not fit 32 bits");
  table.nan_output = static_cast<std::uint32_t>(nan_output);
  table.source = "fb-sfu-probe " + kv["source"] + " cc " + kv["compute_capability"] + " driver " + kv["driver"];
  // The deltas are ulps from the correctly rounded value at the key (gpu/README.md), the same
  // base FBSFU1 uses for these forms.
  std::vector<std::uint32_t>* outputs = nullptr;
  float (*base_value)(std::size_t, int) = nullptr;
  if (is_ex2) {
    table.function = SpecialFunction::ex2;
    table.form = SfuTableForm::ex2_fixed_point;
    table.fraction_bits = static_cast<int>(nbits);
    table.argument_rounding = roundings.at(key);
    table.source += ", argument " + key.substr(std::string("ex2_fixed_point_").size());
    outputs = &table.fraction_outputs;
    base_value = [](std::size_t i, int n) { return ex2_correct_ftz(std::ldexp(static_cast<float>(i), -n)); };  // exact: i < 2^24
  } else if (is_lg2) {
    table.function = SpecialFunction::lg2;
    table.form = SfuTableForm::lg2_exponent_split;
    table.source += ", lg2 exponent split";
    outputs = &table.mantissa_outputs;
    base_value = [](std::size_t m, int n) { return lg2_correct_ftz(1.0f + std::ldexp(static_cast<float>(m), -n)); };  // exact: 1.m
  } else {
    table.function = SpecialFunction::rcp;
    table.form = SfuTableForm::rcp_mantissa;
    table.source += ", rcp mantissa";
    outputs = &table.mantissa_outputs;
    base_value = [](std::size_t m, int n) { return rcp_correct_ftz(1.0f + std::ldexp(static_cast<float>(m), -n)); };  // exact: 1.m
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
  std::uint32_t n_escapes = 0;
  for (int b = 0; b < 4; ++b) n_escapes |= static_cast<std::uint32_t>(static_cast<unsigned char>(data[at + b])) << (8 * b);
  at += 4;
  if (data.size() != at + 8ull * n_escapes) fail(path, "escapes", "count does not match the file size");
  auto u32_at = [&](std::size_t p) {
    std::uint32_t v = 0;
    for (int b = 0; b < 4; ++b) v |= static_cast<std::uint32_t>(static_cast<unsigned char>(data[p + b])) << (8 * b);
    return v;
  };
  for (std::uint32_t e = 0; e < n_escapes; ++e) {
    const std::uint32_t k = u32_at(at + 8ull * e), bits = u32_at(at + 8ull * e + 4);
    if (k >= entries || !escaped[k]) fail(path, "escapes", "entry " + std::to_string(e) + " names a key that is not escaped");
    (*outputs)[k] = bits;
    escaped[k] = false;
  }
  for (std::size_t i = 0; i < entries; ++i) {
    if (escaped[i]) fail(path, "escapes", "key " + std::to_string(i) + " is escaped but has no explicit value");
  }
  return table;
}

}  // namespace fb::gpu
