// traces/sfu_capture_writer.cpp: FBSFUT1 writing shared by fb-sfu-probe and fb-sfu-rehearse; see
// traces/sfu_capture_writer.hpp.
#include "traces/sfu_capture_writer.hpp"

#include <fstream>
#include <stdexcept>

#include "traces/sfu_capture_rules.hpp"

namespace fb::gpu {
namespace {
const char* const kFunctionNames[3] = {"ex2", "rcp", "lg2"};  // SfuTableFunction order

const char* function_name(int fn) {
  if (fn < kSfuTableEx2 || fn > kSfuTableLg2) throw std::invalid_argument("FBSFUT1: function code out of range");
  return kFunctionNames[fn];
}
}  // namespace

std::uint32_t sfu_table_entries(int nbits, const std::string& key) {
  return key == "ex2_sign_magnitude" ? 2u << nbits : 1u << nbits;
}

std::uint32_t sfu_table_escape_cap(int nbits, const std::string& key) {
  // lg2 extended: T = lg2hw(1.m) may be far (in ulps) from lg2(1.m) near m = 0 wherever the
  // hardware's error is absolute, so any number of its entries may escape.
  return key == "lg2_extended" ? sfu_table_entries(nbits, key) : 1u << 20;
}

std::string sfu_table_file_name(int fn, int nbits, const std::string& key) {
  const std::string n = std::to_string(nbits);
  if (key == "ex2_sign_magnitude") return "ex2_sm_table_n" + n + ".fbsfut";
  if (key == "lg2_extended") return "lg2_extended_n" + n + ".fbsfut";
  std::string name = std::string(function_name(fn)) + "_table_n" + n;
  if (fn == kSfuTableEx2) name.append("_").append(key.substr(key.rfind("point_") + 6));  // the argument rounding
  return name + ".fbsfut";
}

SfuTableDeltas sfu_table_deltas(int fn, int nbits, const std::string& key, const std::uint32_t* table) {
  function_name(fn);
  const bool sign_magnitude = key == "ex2_sign_magnitude";
  const std::uint32_t entries = sfu_table_entries(nbits, key), escape_cap = sfu_table_escape_cap(nbits, key);
  SfuTableDeltas d;
  d.delta.assign(entries, 0);
  for (std::uint32_t j = 0; j < entries; ++j) {
    if (table[j] == kSfuTableUnfilled) {
      ++d.unfilled;
      continue;
    }
    const SfuTableDelta e = sfu_table_delta(fn, nbits, sign_magnitude, j, table[j]);
    d.delta[j] = static_cast<signed char>(e.delta);
    if (e.delta != kSfuTableEscape) continue;
    if (d.escape_count++ < escape_cap) {
      d.escapes.push_back(j);
      d.escapes.push_back(table[j]);
    }
    d.uncertain += e.uncertain ? 1u : 0u;
  }
  return d;
}

bool write_sfu_table(const std::string& out_dir, int fn, int nbits, const std::string& key, std::uint32_t nan_output,
                     const std::string& extra, const std::string& device, const SfuTableDeltas& deltas,
                     std::ostream& summary, const std::string& tail) {
  const std::uint32_t entries = sfu_table_entries(nbits, key), escape_cap = sfu_table_escape_cap(nbits, key);
  const std::string name = sfu_table_file_name(fn, nbits, key);
  if (deltas.delta.size() != entries || entries % 2 != 0) {
    throw std::invalid_argument(name + ": " + std::to_string(deltas.delta.size()) + " deltas for " +
                                std::to_string(entries) + " entries");
  }
  if (deltas.escape_count > escape_cap || deltas.unfilled != 0) {
    summary << "  NOT writing " << name << ": " << deltas.unfilled << " keys never seen, " << deltas.escape_count
            << " escapes\n";
    return false;
  }
  if (deltas.escapes.size() != 2ull * deltas.escape_count) {
    throw std::invalid_argument(name + ": " + std::to_string(deltas.escapes.size()) + " escape words for " +
                                std::to_string(deltas.escape_count) + " escapes");
  }
  std::ofstream f(out_dir + "/" + name, std::ios::binary);
  f << "FBSFUT1\nfunction=" << function_name(fn) << "\nkey=" << key << "\nkey_bits=" << nbits << "\nentries=" << entries
    << "\nnan_output=" << nan_output << "\n"
    << extra << device << "end\n";
  std::vector<unsigned char> packed(entries / 2);
  for (std::uint32_t i = 0; i < entries; i += 2) {
    packed[i / 2] = static_cast<unsigned char>((deltas.delta[i] & 0xf) | ((deltas.delta[i + 1] & 0xf) << 4));
  }
  f.write(reinterpret_cast<const char*>(packed.data()), static_cast<std::streamsize>(packed.size()));
  const std::uint32_t n_escapes = deltas.escape_count;
  f.write(reinterpret_cast<const char*>(&n_escapes), 4);  // the device and file are little-endian
  f.write(reinterpret_cast<const char*>(deltas.escapes.data()),
          static_cast<std::streamsize>(deltas.escapes.size() * 4));
  f << tail;
  summary << "  wrote " << name << ": " << entries << " entries, " << deltas.escape_count << " escaped ("
          << deltas.uncertain << " of them because the double reference was too close to a rounding boundary)\n";
  return true;
}

}  // namespace fb::gpu
