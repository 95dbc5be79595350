// gpu/sfu_table_convert.cpp: fb-sfu-table-convert, turns a table captured by fb-sfu-probe
// (FBSFUT1, gpu/README.md) into the emu's FBSFU1 table file (emu/special_functions.cpp),
// the form `table` SFU models load.
//
// Contract: for an ex2 fixed-point table, T[i] = correctly rounded 2^(i/2^N) (computed
// here with ex2_correct_ftz, exact) plus the captured 4-bit delta, or the escaped
// explicit bits; written as FBSFU1 form ex2_fixed_point with floor argument rounding,
// measured_on_hardware = 1 and the capture's device fields as source. rcp mantissa tables
// have no FBSFU1 form yet: exit 2 with that message. A malformed input exits 2 naming the
// file and field.
// Usage: fb-sfu-table-convert IN.fbsfut OUT.fbsfu
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "emu/special_functions.hpp"

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& field, const std::string& what) {
  throw std::runtime_error(path + ": " + field + ": " + what);
}

int convert(const std::string& in_path, const std::string& out_path) {
  std::ifstream f(in_path, std::ios::binary);
  if (!f) fail(in_path, "file", "cannot open");
  std::ostringstream buf;
  buf << f.rdbuf();
  const std::string data = buf.str();
  const std::size_t end = data.find("\nend\n");
  if (data.compare(0, 8, "FBSFUT1\n") != 0 || end == std::string::npos) fail(in_path, "magic", "not an FBSFUT1 file");
  std::map<std::string, std::string> kv;
  std::istringstream header(data.substr(8, end - 8 + 1));
  for (std::string line; std::getline(header, line);) {
    const std::size_t eq = line.find('=');
    if (eq == std::string::npos) fail(in_path, "header", "line '" + line + "' is not key=value");
    kv[line.substr(0, eq)] = line.substr(eq + 1);
  }
  auto need = [&](const char* key) {
    if (!kv.count(key)) fail(in_path, key, "missing");
    return kv[key];
  };
  if (need("function") != "ex2" || need("key") != "ex2_fixed_point_floor") {
    fail(in_path, "key", "'" + kv["key"] + "' has no FBSFU1 form (only ex2_fixed_point_floor converts); keep the FBSFUT1 file");
  }
  const int nbits = std::stoi(need("key_bits"));
  if (nbits < 1 || nbits > 24) fail(in_path, "key_bits", "must be 1..24");
  const std::size_t entries = std::size_t{1} << nbits;
  if (std::stoull(need("entries")) != entries) fail(in_path, "entries", "is not 2^key_bits");
  std::size_t at = end + 5;
  if (data.size() < at + entries / 2 + 4) fail(in_path, "deltas", "file ends early");
  fb::SfuTable table;
  table.function = fb::SpecialFunction::ex2;
  table.form = fb::SfuTableForm::ex2_fixed_point;
  table.measured_on_hardware = true;
  table.fraction_bits = nbits;
  table.argument_rounding = fb::FixedPointRounding::floor;
  table.nan_output = static_cast<std::uint32_t>(std::stoul(need("nan_output")));
  table.source = "fb-sfu-probe " + kv["source"] + " cc " + kv["compute_capability"] + " driver " + kv["driver"] +
                 " (" + in_path + ")";
  table.fraction_outputs.resize(entries);
  std::vector<bool> escaped(entries, false);
  for (std::size_t i = 0; i < entries; ++i) {
    const unsigned char byte = static_cast<unsigned char>(data[at + i / 2]);
    int d = (i % 2 == 0) ? (byte & 0xf) : (byte >> 4);
    if (d >= 8) d -= 16;
    if (d == -8) {
      escaped[i] = true;
      continue;
    }
    const float base = fb::ex2_correct_ftz(std::ldexp(static_cast<float>(i), -nbits));  // exact: i < 2^24
    std::uint32_t bits;
    std::memcpy(&bits, &base, 4);
    table.fraction_outputs[i] = bits + static_cast<std::uint32_t>(d);
  }
  at += entries / 2;
  std::uint32_t n_escapes = 0;
  std::memcpy(&n_escapes, data.data() + at, 4);
  at += 4;
  if (data.size() != at + 8ull * n_escapes) fail(in_path, "escapes", "count does not match the file size");
  for (std::uint32_t e = 0; e < n_escapes; ++e) {
    std::uint32_t key, bits;
    std::memcpy(&key, data.data() + at + 8ull * e, 4);
    std::memcpy(&bits, data.data() + at + 8ull * e + 4, 4);
    if (key >= entries || !escaped[key]) fail(in_path, "escapes", "entry " + std::to_string(e) + " names a key that is not escaped");
    table.fraction_outputs[key] = bits;
    escaped[key] = false;
  }
  for (std::size_t i = 0; i < entries; ++i) {
    if (escaped[i]) fail(in_path, "escapes", "key " + std::to_string(i) + " is escaped but has no explicit value");
  }
  fb::write_table_file(out_path, table);
  std::printf("wrote %s: ex2 fixed point, N=%d, %u escaped entries\n", out_path.c_str(), nbits, n_escapes);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: fb-sfu-table-convert IN.fbsfut OUT.fbsfu\n");
    return 2;
  }
  try {
    return convert(argv[1], argv[2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
