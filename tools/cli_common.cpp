// tools/cli_common.cpp: shared parsing and formatting for the CLI.
#include "tools/cli_common.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <cstdlib>
#include <string>

namespace fb::cli {

std::vector<Subcommand>& subcommand_registry() {
  static std::vector<Subcommand> registry;
  return registry;
}

Format parse_format_or_throw(std::string_view text, std::string_view what) {
  Format f{};
  if (!parse_format(text, f)) {
    throw InputError(std::string(what) + ": unknown format '" + std::string(text) +
                     "' (expected fp32 tf32 bf16 fp16 e4m3 e5m2 e4m3fnuz e5m2fnuz e3m2 e2m3 e2m1 "
                     "e8m0, or eXmY with 2<=X<=8, 1<=Y<=23)");
  }
  return f;
}

RoundingMode parse_mode_or_throw(std::string_view text, std::string_view what) {
  RoundingMode m{};
  if (!parse_rounding_mode(text, m)) {
    throw InputError(std::string(what) + ": unknown rounding mode '" + std::string(text) +
                     "' (expected rne rna rtz rup rdn rto sr)");
  }
  return m;
}

OverflowPolicy parse_overflow_or_throw(std::string_view text, std::string_view what) {
  if (text == "ieee") return OverflowPolicy::ieee;
  if (text == "satfinite") return OverflowPolicy::satfinite;
  throw InputError(std::string(what) + ": unknown overflow policy '" + std::string(text) +
                   "' (expected ieee or satfinite)");
}

std::uint32_t parse_operand_or_throw(const Format& f, std::string_view text, std::string_view what) {
  const std::string s(text);
  if (s.empty()) throw InputError(std::string(what) + ": empty operand");
  const bool decimal = s.find('.') != std::string::npos || s[0] == '+' || s[0] == '-' ||
                       s == "inf" || s == "nan";
  if (decimal) {
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size()) {
      throw InputError(std::string(what) + ": '" + s + "' is not a decimal number");
    }
    std::uint32_t bits = 0;
    if (!from_double_exact(f, v, bits)) {
      throw InputError(std::string(what) + ": " + s + " is not exactly representable in " + f.name +
                       " (give a hex bit pattern instead)");
    }
    return bits;
  }
  std::string_view hex = text;
  if (hex.size() > 2 && hex[0] == '0' && (hex[1] == 'x' || hex[1] == 'X')) hex.remove_prefix(2);
  if (hex.empty() || hex.size() > 8) {
    throw InputError(std::string(what) + ": '" + s + "' is not a hex bit pattern of " + f.name);
  }
  std::uint64_t v = 0;
  for (char ch : hex) {
    int d;
    if (ch >= '0' && ch <= '9') d = ch - '0';
    else if (ch >= 'a' && ch <= 'f') d = ch - 'a' + 10;
    else if (ch >= 'A' && ch <= 'F') d = ch - 'A' + 10;
    else throw InputError(std::string(what) + ": '" + s + "' is not a hex bit pattern");
    v = v * 16 + static_cast<std::uint64_t>(d);
  }
  const std::uint64_t container_limit = std::uint64_t{1} << f.container_bits;
  const std::uint32_t layout_bits = static_cast<std::uint32_t>(v) >> f.storage_shift();
  if (v >= container_limit || (static_cast<std::uint32_t>(v) & ((1u << f.storage_shift()) - 1u)) != 0 ||
      (layout_bits & ~f.width_mask()) != 0) {
    throw InputError(std::string(what) + ": 0x" + std::string(hex) + " is not a valid " + f.name +
                     " bit pattern (" + std::to_string(f.width()) + " bits" +
                     (f.storage_shift() ? ", low " + std::to_string(f.storage_shift()) + " bits zero" : "") +
                     ")");
  }
  return static_cast<std::uint32_t>(v);
}

std::string hex_bits(const Format& f, std::uint32_t bits) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%0*x", f.hex_digits(), bits);
  return buf;
}

std::string flags_string(Flags flags) {
  char buf[6];
  flags_to_chars(flags, buf);
  return buf;
}

namespace {
std::vector<std::string> split_words(const std::string& line) {
  std::vector<std::string> words;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    std::size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') ++j;
    if (j > i) words.emplace_back(line.substr(i, j - i));
    i = j;
  }
  return words;
}
}  // namespace

int run_line_batch(const std::string& path, const BatchLineRunner& run_line) {
  std::istream* in = &std::cin;
  std::ifstream file;
  if (path != "-") {
    file.open(path);
    if (!file) throw InputError(path + ": cannot open batch file");
    in = &file;
  }
  std::string line, out;
  std::uint64_t line_no = 0;
  while (std::getline(*in, line)) {
    ++line_no;
    try {
      out += run_line(split_words(line), line_no);
    } catch (const InputError& e) {
      std::cout << out << std::flush;
      std::cerr << "error: line " << line_no << ": " << e.what() << "\n";
      return kExitBadInput;
    }
    out += '\n';
    if (out.size() > (1u << 16)) {
      std::cout << out;
      out.clear();
    }
  }
  std::cout << out;
  return kExitOk;
}

bool stderr_is_terminal() { return ::isatty(2) != 0; }

ProgressBar::ProgressBar(std::string unit, std::uint64_t total) : unit_(std::move(unit)), total_(total) {
  if (!stderr_is_terminal() || total_ == 0) return;
  drawer_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mutex_);
    if (stop_signal_.wait_for(lock, std::chrono::seconds(2), [this] { return stop_; })) return;
    while (true) {
      const std::uint64_t done = std::min(done_.load(std::memory_order_relaxed), total_);
      constexpr int kWidth = 40;
      const int filled = static_cast<int>(kWidth * done / total_);
      std::cerr << "\r[" << std::string(filled, '#') << std::string(kWidth - filled, ' ') << "] " << done << "/"
                << total_ << " " << unit_ << std::flush;
      drawn_ = true;
      if (stop_signal_.wait_for(lock, std::chrono::milliseconds(200), [this] { return stop_; })) return;
    }
  });
}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::clear_line() {
  if (!drawer_.joinable()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (drawn_) std::cerr << "\r" << std::string(60 + unit_.size(), ' ') << "\r" << std::flush;
  drawn_ = false;
}

void ProgressBar::finish() {
  if (!drawer_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  stop_signal_.notify_all();
  drawer_.join();
  if (drawn_) std::cerr << "\r" << std::string(60 + unit_.size(), ' ') << "\r" << std::flush;
}

}  // namespace fb::cli
