// traces/sfu_values.cpp: FBSFUVAL1 files (traces/sfu_values.hpp).
#include "traces/sfu_values.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "formats/file_read.hpp"
#include "traces/key_value_line.hpp"
#include "traces/little_endian.hpp"

namespace fb {
namespace {

constexpr std::uint64_t kMaxPairs = std::uint64_t{1} << 32;

[[noreturn]] void fail(const std::string& path, const std::string& field, const std::string& what) {
  throw std::runtime_error(path + ": " + field + ": " + what);
}

bool parse_function(const std::string& s, SpecialFunction& f) {
  for (SpecialFunction g : {SpecialFunction::ex2, SpecialFunction::rcp, SpecialFunction::lg2}) {
    if (s == to_string(g)) {
      f = g;
      return true;
    }
  }
  return false;
}

}  // namespace

float RecordingSfuModel::evaluate(float x) const {
  const float y = inner_->evaluate(x);
  std::uint32_t in, out;
  std::memcpy(&in, &x, 4);
  std::memcpy(&out, &y, 4);
  std::lock_guard<std::mutex> lock(mutex_);
  seen_.emplace(in, out);
  return y;
}

std::vector<std::pair<std::uint32_t, std::uint32_t>> RecordingSfuModel::recorded() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::pair<std::uint32_t, std::uint32_t>> v(seen_.begin(), seen_.end());
  std::sort(v.begin(), v.end());
  return v;
}

std::string encode_sfu_values(const std::string& path, const SfuValues& values) {
  std::ostringstream out;
  out << "FBSFUVAL1\n";
  for (const auto& [k, v] : values.header) {
    if (k.find_first_of("=\n") != std::string::npos || v.find('\n') != std::string::npos)
      throw std::runtime_error(path + ": header key '" + k + "' or its value holds '=' or a newline");
    out << k << "=" << v << "\n";
  }
  for (const auto& [f, pairs] : values.pairs) out << "function=" << to_string(f) << " count=" << pairs.size() << "\n";
  out << "end\n";
  for (const auto& [f, pairs] : values.pairs) {
    for (const auto& [in, outv] : pairs) {
      for (std::uint32_t w : {in, outv}) {
        char word[4];
        store_little_endian(word, w, 4);
        out.write(word, 4);
      }
    }
  }
  return out.str();
}

SfuValues read_sfu_values(const std::string& path) {
  const std::string data = read_file_capped(path, kSfuValuesFile);
  std::size_t pos = 0;
  auto next_line = [&](std::string& line) {
    const std::size_t nl = data.find('\n', pos);
    if (nl == std::string::npos || nl - pos > 4096) return false;
    line = data.substr(pos, nl - pos);
    pos = nl + 1;
    return true;
  };
  std::string line;
  if (!next_line(line) || line != "FBSFUVAL1") fail(path, "magic", "not an FBSFUVAL1 file");
  SfuValues v;
  std::vector<std::pair<SpecialFunction, std::uint64_t>> order;
  while (true) {
    if (!next_line(line)) fail(path, "header", "ends before 'end'");
    if (line == "end") break;
    if (line.rfind("function=", 0) == 0) {
      // Exactly "function=NAME count=N", as written: a stray space or tab is no part of either
      // word, and a reader that skipped it would take a hand-edited line it cannot vouch for.
      const std::size_t space = line.find(' ');
      const std::string fn_part = line.substr(0, space);
      const std::string count_part = space == std::string::npos ? std::string() : line.substr(space + 1);
      for (const std::string& part : {fn_part, count_part})
        if (part.find_first_of(" \t\r\v\f") != std::string::npos)
          fail(path, "function " + fn_part.substr(9),
               "line '" + line + "' is not 'function=NAME count=N' (one space, nothing after N)");
      SpecialFunction fn;
      if (!parse_function(fn_part.substr(9), fn))
        fail(path, "function", "'" + fn_part.substr(9) + "' is not ex2, rcp or lg2");
      if (count_part.rfind("count=", 0) != 0) fail(path, "function " + fn_part.substr(9), "missing count=N");
      // Decimal digits only: stoull also took "+5" and wrapped "-1" to 2^64 - 1.
      const std::string digits = count_part.substr(6);
      std::uint64_t n = 0;
      const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
      if (digits.empty() || error != std::errc{} || end != digits.data() + digits.size())
        fail(path, "function " + fn_part.substr(9), "count '" + digits + "' is not an integer");
      if (n > kMaxPairs) fail(path, "function " + fn_part.substr(9), "count exceeds 2^32");
      for (const auto& o : order)
        if (o.first == fn) fail(path, "function " + fn_part.substr(9), "listed twice");
      order.emplace_back(fn, n);
      continue;
    }
    std::string key, value;
    if (!split_key_value(line, key, value)) fail(path, "header", "line '" + line + "' is not key=value");
    // A key given twice kept its last value silently: which one the capture meant is unknown.
    if (!v.header.emplace(key, value).second) fail(path, key, "given twice in the header");
  }
  if (v.header["source"].empty())
    fail(path, "source", "missing (the header states the GPU the values were taken on, source=cuda:<gpu>)");
  if (v.header["source"].rfind("cuda:", 0) != 0)
    fail(path, "source", "'" + v.header["source"] + "' is not a hardware capture (cuda:<gpu>)");
  std::uint64_t need = 0;
  for (const auto& o : order) need += o.second * 8;
  if (data.size() - pos != need)
    fail(path, "pairs",
         std::to_string(data.size() - pos) + " bytes after the header, expected " + std::to_string(need));
  auto u32 = [&](std::size_t at) { return static_cast<std::uint32_t>(load_little_endian(data.data() + at, 4)); };
  for (const auto& [fn, n] : order) {
    auto& pairs = v.pairs[fn];
    pairs.reserve(n);
    for (std::uint64_t i = 0; i < n; ++i, pos += 8) {
      const std::uint32_t in = u32(pos), out = u32(pos + 4);
      if (!pairs.empty() && in <= pairs.back().first)
        fail(path, std::string("function ") + std::string(to_string(fn)) + " pair " + std::to_string(i),
             "inputs are not strictly increasing");
      pairs.emplace_back(in, out);
    }
  }
  return v;
}

}  // namespace fb
