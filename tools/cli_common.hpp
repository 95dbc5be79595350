// tools/cli_common.hpp: what every `flashbits` subcommand shares.
//
// Contract:
// - A subcommand registers itself with FLASHBITS_SUBCOMMAND(name, setup); setup adds
//   its options to the CLI11 sub-app and returns the function to run.
// - Bad input is reported by throwing InputError (exit code 2, one line on stderr);
//   a failed check returns 1; success returns 0 (CLI.md conventions).
#pragma once

#include <CLI/CLI.hpp>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "emu/rounding.hpp"
#include "formats/format.hpp"

namespace fb::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitCheckFailed = 1;
inline constexpr int kExitBadInput = 2;

struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

using Runner = std::function<int()>;
using Setup = std::function<Runner(CLI::App&)>;

struct Subcommand {
  std::string name;
  std::string description;
  Setup setup;
};
std::vector<Subcommand>& subcommand_registry();
struct SubcommandRegistration {
  SubcommandRegistration(std::string name, std::string description, Setup setup) {
    subcommand_registry().push_back({std::move(name), std::move(description), std::move(setup)});
  }
};
#define FLASHBITS_SUBCOMMAND(ident, name, description, setup) \
  static const ::fb::cli::SubcommandRegistration ident##_registration{name, description, setup}

// ---- shared parsing helpers; each throws InputError naming what was wrong --------
Format parse_format_or_throw(std::string_view text, std::string_view what);
RoundingMode parse_mode_or_throw(std::string_view text, std::string_view what);
OverflowPolicy parse_overflow_or_throw(std::string_view text, std::string_view what);
// A hex bit pattern ("3f80", "0x3f80") or an exactly representable decimal ("1.5",
// "-2", "+inf", "nan"; decimals need a sign or a '.', so "10" is hex).
std::uint32_t parse_operand_or_throw(const Format& f, std::string_view text, std::string_view what);
std::string hex_bits(const Format& f, std::uint32_t bits);
std::string flags_string(Flags flags);
// Batch mode shared by `op --batch` and `dot --batch` (CLI.md): reads FILE or "-" line by
// line, splits each line into whitespace-separated words and writes run_line's result as
// one output line, in input order. run_line throws InputError for a malformed line; the
// batch then prints `error: line N: ...` on stderr (after flushing earlier results) and
// returns kExitBadInput. line_no counts from 1.
using BatchLineRunner = std::function<std::string(const std::vector<std::string>& words, std::uint64_t line_no)>;
int run_line_batch(const std::string& path, const BatchLineRunner& run_line);

// Whether stderr is a terminal (progress bars are shown only then).
bool stderr_is_terminal();

// CLI.md: a run that takes more than about 2 s shows a progress bar on stderr when
// stderr is a terminal, and stays quiet otherwise. The work advances counter() from any
// thread; when stderr is a terminal a drawing thread waits 2 s, then redraws every
// 200 ms. The destructor stops it and clears the line, so the run's own output (stdout
// and any final stderr line) is never interleaved with a half-drawn bar.
class ProgressBar {
 public:
  ProgressBar(std::string unit, std::uint64_t total);
  ~ProgressBar();  // finish()
  // Stops drawing and clears the bar; call it before printing the run's results.
  void finish();
  // Clears the bar's line (it is redrawn on the next tick); call it before printing a
  // line of output while the run goes on.
  void clear_line();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;
  std::atomic<std::uint64_t>& counter() { return done_; }
  void advance(std::uint64_t n = 1) { done_.fetch_add(n, std::memory_order_relaxed); }

 private:
  std::string unit_;
  std::uint64_t total_;
  std::atomic<std::uint64_t> done_{0};
  std::mutex mutex_;
  std::condition_variable stop_signal_;
  bool stop_ = false, drawn_ = false;
  std::thread drawer_;
};

}  // namespace fb::cli
