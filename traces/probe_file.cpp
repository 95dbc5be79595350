// traces/probe_file.cpp: reader and writer of the probe file format (see probe_file.hpp).
#include "traces/probe_file.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "formats/decimal_text.hpp"
#include "formats/file_read.hpp"
#include "formats/text_escape.hpp"
#include "traces/key_value_line.hpp"
#include "traces/little_endian.hpp"

namespace fb::gpu {
namespace {

constexpr char kMagic[8] = {'F', 'B', 'P', 'R', 'O', 'B', 'E', '1'};
// Limits that turn a corrupted length field into a clear error instead of a huge allocation.
constexpr std::uint32_t kMaxSections = 1024;
constexpr std::uint32_t kMaxHeaderBytes = 1u << 20;
constexpr int kMaxK = 256;

void put_u32(std::string& out, std::uint32_t v) { append_little_endian(out, v, 4); }

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  if (s.empty()) return parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t pos = s.find(sep, start);
    parts.push_back(s.substr(start, pos - start));
    if (pos == std::string::npos) break;
    start = pos + 1;
  }
  return parts;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + v[i];
  return s;
}

class Reader {
 public:
  Reader(std::string path, std::string data) : path_(std::move(path)), data_(std::move(data)) {}
  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw ProbeFileError(path_ + ": " + field + ": " + what);
  }
  std::uint32_t u32(const std::string& field) {
    if (data_.size() - pos_ < 4) fail(field, "file ends early at byte " + std::to_string(pos_));
    const auto v = static_cast<std::uint32_t>(load_little_endian(data_.data() + pos_, 4));
    pos_ += 4;
    return v;
  }
  std::string bytes(std::size_t n, const std::string& field) {
    if (data_.size() - pos_ < n) fail(field, "file ends early at byte " + std::to_string(pos_));
    std::string s = data_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  std::size_t remaining() const { return data_.size() - pos_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string data_;
  std::size_t pos_ = 0;
};

Format parse_format_field(const Reader& r, const std::string& field, const std::string& value) {
  Format f;
  if (!parse_format(value, f)) r.fail(field, "unknown format '" + value + "'");
  return f;
}

ProbeHeader parse_header(const Reader& r, const std::string& prefix, const std::string& text, std::uint64_t& cases) {
  // Header text reaches JSON reports (probe-check --json), which need UTF-8.
  if (!is_valid_utf8(text)) r.fail(prefix + "header", "not UTF-8 text");
  std::map<std::string, std::string> kv;
  for (const std::string& line : split(text, '\n')) {
    if (line.empty()) continue;
    std::string key, value;
    if (!split_key_value(line, key, value)) r.fail(prefix + "header", "line '" + line + "' is not key=value");
    if (!kv.emplace(key, value).second) r.fail(prefix + "header", "key '" + key + "' is given twice");
  }
  auto take = [&](const std::string& key) {
    auto it = kv.find(key);
    if (it == kv.end()) r.fail(prefix + key, "missing");
    std::string v = it->second;
    kv.erase(it);
    return v;
  };
  auto take_int = [&](const std::string& key, long long lo, long long hi) {
    const std::string v = take(key);
    // Plain digits, as the writer puts them: stoll skipped leading spaces and took '+'.
    long long x = 0;
    const PlainIntegerError error = read_plain_integer(v, x, false);
    if (error == PlainIntegerError::not_plain_digits)
      r.fail(prefix + key, "'" + v + "' is not an integer (plain digits)");
    if (error == PlainIntegerError::out_of_range || x < lo || x > hi)
      r.fail(prefix + key, "'" + v + "' is not an integer in " + std::to_string(lo) + ".." + std::to_string(hi));
    return x;
  };
  ProbeHeader h;
  h.form = take("form");
  if (h.form.empty()) r.fail(prefix + "form", "empty");
  h.k = static_cast<int>(take_int("k", 1, kMaxK));
  h.input = parse_format_field(r, prefix + "input", take("input"));
  h.c_format = parse_format_field(r, prefix + "c_format", take("c_format"));
  h.d_format = parse_format_field(r, prefix + "d_format", take("d_format"));
  for (const char* key : {"c_format", "d_format"}) {
    const Format& f = std::string(key) == "c_format" ? h.c_format : h.d_format;
    if (!(f == formats::fp32) && !(f == formats::fp16))
      r.fail(prefix + key, std::string("must be fp32 or fp16, not ") + f.name);
  }
  cases = static_cast<std::uint64_t>(take_int("cases", 0, 1ll << 40));
  h.batches = split(take("batches"), ',');
  if (h.batches.empty()) r.fail(prefix + "batches", "empty list");
  // Cases name their batch by index, and reports count them by name: an empty name or one
  // given twice would merge two batches' counts under one name.
  for (std::size_t i = 0; i < h.batches.size(); ++i) {
    if (h.batches[i].empty()) r.fail(prefix + "batches", "batch " + std::to_string(i) + " has an empty name");
    for (std::size_t j = 0; j < i; ++j)
      if (h.batches[j] == h.batches[i])
        r.fail(prefix + "batches", "'" + h.batches[i] + "' is named twice (batches " + std::to_string(j) + " and " +
                                       std::to_string(i) + ")");
  }
  if (kv.count("models")) h.models = split(take("models"), ',');
  h.extra = std::move(kv);
  return h;
}

}  // namespace

void ProbeSection::add_case(std::uint32_t batch_id, std::uint32_t c_bits, const std::uint32_t* a_bits,
                            const std::uint32_t* b_bits, std::uint32_t d_bits) {
  words_.push_back(batch_id);
  words_.push_back(c_bits);
  words_.insert(words_.end(), a_bits, a_bits + header.k);
  words_.insert(words_.end(), b_bits, b_bits + header.k);
  words_.push_back(d_bits);
}

std::string header_text(const ProbeHeader& h) {
  std::ostringstream s;
  s << "form=" << h.form << "\n"
    << "k=" << h.k << "\n"
    << "input=" << h.input.name << "\n"
    << "c_format=" << h.c_format.name << "\n"
    << "d_format=" << h.d_format.name << "\n"
    << "batches=" << join(h.batches) << "\n";
  if (!h.models.empty()) s << "models=" << join(h.models) << "\n";
  for (const auto& [key, value] : h.extra) {
    if (key.find('=') != std::string::npos || key.find('\n') != std::string::npos ||
        value.find('\n') != std::string::npos) {
      throw ProbeFileError("header field '" + key + "' contains '=' or a newline");
    }
    s << key << "=" << value << "\n";
  }
  return s.str();
}

void write_probe_file(const std::string& path, const ProbeFile& file) {
  std::string out(kMagic, sizeof kMagic);
  put_u32(out, static_cast<std::uint32_t>(file.sections.size()));
  for (const ProbeSection& sec : file.sections) {
    if (sec.header.k <= 0 || sec.words().size() % sec.words_per_case() != 0) {
      throw ProbeFileError(path + ": section '" + sec.header.form + "': case words do not match k");
    }
    const std::string text = header_text(sec.header) + "cases=" + std::to_string(sec.cases()) + "\n";
    put_u32(out, static_cast<std::uint32_t>(text.size()));
    out += text;
    for (std::uint32_t w : sec.words()) put_u32(out, w);
  }
  // Whole or not at all: a temporary file beside `path`, closed with every write checked,
  // then renamed over it. A device or a pipe (which cannot be renamed into) is written
  // directly, its write and close checked as well.
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  const bool direct = std::filesystem::exists(status) && !std::filesystem::is_regular_file(status);
  const std::string tmp = direct ? path : path + ".tmp." + std::to_string(::getpid());
  std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
  if (!f) throw ProbeFileError(path + ": cannot open for writing");
  f.write(out.data(), static_cast<std::streamsize>(out.size()));
  f.close();
  if (!f) {
    if (!direct) std::remove(tmp.c_str());
    throw ProbeFileError(path + ": write failed");
  }
  if (!direct && std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw ProbeFileError(path + ": cannot rename the written file into place");
  }
}

ProbeFile read_probe_file(const std::string& path) {
  // Not a probe file is said before anything is read whole: a FIFO without a writer would
  // block in open(), and /dev/zero or a gigabyte of something else would be read into memory
  // (up to the cap) only to fail at its first 8 bytes.
  {
    std::error_code ec;
    const auto status = std::filesystem::status(path, ec);
    if (!ec && std::filesystem::exists(status) && !std::filesystem::is_regular_file(status))
      throw ProbeFileError(path + ": not a regular file (a probe file is one)");
    std::ifstream head(path, std::ios::binary);
    char magic[sizeof kMagic] = {};
    if (head && head.read(magic, sizeof magic) && std::memcmp(magic, kMagic, sizeof kMagic) != 0)
      throw ProbeFileError(path + ": magic: not a probe file (expected FBPROBE1)");
  }
  // One read into one buffer: device files reach gigabytes (fb-mma-probe --tiles 900).
  std::string data;
  try {
    data = read_file_capped(path, kProbeFile);
  } catch (const FileReadError& e) {
    throw ProbeFileError(e.what());
  }
  Reader r(path, std::move(data));
  if (r.bytes(8, "magic") != std::string(kMagic, sizeof kMagic))
    r.fail("magic", "not a probe file (expected FBPROBE1)");
  const std::uint32_t n = r.u32("section_count");
  if (n > kMaxSections) r.fail("section_count", std::to_string(n) + " exceeds " + std::to_string(kMaxSections));
  ProbeFile file;
  for (std::uint32_t s = 0; s < n; ++s) {
    const std::string prefix = "section " + std::to_string(s) + ": ";
    const std::uint32_t len = r.u32(prefix + "header_length");
    if (len > kMaxHeaderBytes) r.fail(prefix + "header_length", std::to_string(len) + " is too large");
    std::uint64_t cases = 0;
    ProbeSection sec;
    sec.header = parse_header(r, prefix, r.bytes(len, prefix + "header"), cases);
    const std::uint64_t words = cases * sec.words_per_case();
    if (words * 4 > r.remaining()) {
      r.fail(prefix + "cases", std::to_string(cases) + " cases need " + std::to_string(words * 4) + " bytes but only " +
                                   std::to_string(r.remaining()) + " remain");
    }
    std::vector<std::uint32_t>& w = sec.mutable_words();
    w.resize(words);
    const std::string case_field = prefix + "case data";  // built once, not per word
    for (std::uint64_t i = 0; i < words; ++i) w[i] = r.u32(case_field);
    // A pattern with bits above its format's would be masked when replayed, so the case
    // checked would not be the case the GPU ran. (Bits below a tf32 pattern's are the fp32
    // register's, which the tensor core ignores: they stay.)
    auto check_pattern = [&](const Format& f, std::uint32_t bits, std::size_t i, const std::string& operand) {
      if (((bits >> f.storage_shift()) & ~f.width_mask()) != 0) {
        char hex[16];
        std::snprintf(hex, sizeof hex, "0x%08x", bits);
        r.fail(prefix + "case " + std::to_string(i) + " " + operand,
               std::string(hex) + " has bits outside a " + f.name + " pattern");
      }
    };
    for (std::size_t i = 0; i < sec.cases(); ++i) {
      if (sec.batch(i) >= sec.header.batches.size()) {
        r.fail(prefix + "case " + std::to_string(i) + " batch", std::to_string(sec.batch(i)) + " is not a batch index");
      }
      for (int j = 0; j < sec.header.k; ++j) {
        check_pattern(sec.header.input, sec.a(i)[j], i, "a[" + std::to_string(j) + "]");
        check_pattern(sec.header.input, sec.b(i)[j], i, "b[" + std::to_string(j) + "]");
      }
      // Not C or D: an fp16 C or D is half of a 32-bit register, whose other half the probe
      // fills (the dry run with ones) and the tensor core ignores.
    }
    file.sections.push_back(std::move(sec));
  }
  if (r.remaining() != 0) r.fail("trailing data", std::to_string(r.remaining()) + " bytes after the last section");
  return file;
}

}  // namespace fb::gpu
