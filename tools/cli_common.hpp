// tools/cli_common.hpp: what every `flashbits` subcommand shares.
//
// Contract:
// - A subcommand registers itself with FLASHBITS_SUBCOMMAND(name, setup); setup adds
//   its options to the CLI11 sub-app and returns the function to run.
// - Bad input is reported by throwing InputError (exit code 2, one line on stderr), or
//   FileReadError from read_file_capped (formats/file_read.hpp, the one whole-file read:
//   a missing, unreadable or too large input file), also exit 2;
//   a failed check returns 1; success returns 0 (docs/CLI.md conventions).
// - Exit codes: 0 ok; 1 a check failed; 2 bad input, one `error: ...` line on stderr
//   naming what was wrong (a bad option value, file or line; also an output that cannot
//   be written: a missing directory, a full disk, /dev/full, a closed or full stdout --
//   main flushes stdout before exiting and reports a failed flush as exit 2); 3 an
//   internal error (a flashbits bug), one `internal error: ...` line.
// - Every --json output is written by json_text (formats/json_text.hpp): a string that is not
//   UTF-8 (a path with byte 0xff) is escaped, never an exception.
// - Output files are written whole or not at all (write_output_file): a partial file never
//   stands where a complete one is claimed, and no output path may name an input
//   (refuse_output_over_inputs).
#pragma once

#include <CLI/CLI.hpp>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "api/input_error.hpp"
#include "api/names.hpp"
#include "api/output_file.hpp"
#include "emu/rounding.hpp"
#include "formats/file_read.hpp"
#include "formats/json_text.hpp"  // json_text: every --json output
#include "formats/format.hpp"

namespace fb::cli {

// The library API (api/: every face's input errors, parsers, option values and output files),
// under the names the subcommands call them by.
using api::alpha_or_throw;
using api::at_stake_or_throw;
using api::check_problem_size;
using api::check_trials;
using api::flags_string;
using api::hex_bits;
using api::InputError;
using api::jobs_or_throw;
using api::kMaxJobs;
using api::parse_format_or_throw;
using api::parse_mode_or_throw;
using api::parse_operand_or_throw;
using api::parse_overflow_or_throw;
using api::refuse_output_over_inputs;
using api::sr_bits_or_throw;
using api::write_output_file;

// api::check_output_path for a command-line option, which first refuses a path that starts
// with '-' (but "-" itself): CLI11 hands an output option the next word, so `--csv --json`
// wrote a file named --json and dropped --json. A file of such a name is ./--json.
void check_output_path(std::string_view option, const std::string& path, bool stdout_allowed = false);

// check_output_path for an option that writes a safetensors trace (make-trace, import): a
// name ending in .npz or .npy is refused, since replay, bias-test and import read such a file
// as numpy's and would call the trace a broken archive.
void check_trace_output_path(std::string_view option, const std::string& path);

// Two positive integers in plain digits around one separator character from `separators`
// ("64x128", "2/8"): nothing else, no space, no sign. Streams (>>) skipped leading spaces
// (' 1/2', '64x 64' were read) and took '+64'. nullopt for anything else.
std::optional<std::pair<int, int>> read_positive_pair(std::string_view text, std::string_view separators);

inline constexpr int kExitOk = 0;
inline constexpr int kExitCheckFailed = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitInternalError = 3;
// bias-test: the test could not have detected a bias of the size at stake (too few samples,
// zero variance, or too little power): no verdict either way.
inline constexpr int kExitInconclusive = 4;

// A comma-separated option's entries, at least one; an empty entry (`a,,b`, a trailing comma:
// likely a typo) or an entry given twice (one configuration measured twice) is an
// InputError naming `option`.
std::vector<std::string> split_list(const std::string& text, const std::string& option);
// split_list for a list of kernel model names, whose variants' parameters hold commas too
// (fa2-sm80+dynmax:beta=2,tol=0.01, +sw-exp2:8,0): a piece after a comma continues the name
// before it when that name's last variant has opened parameters (a ':') and the piece reads as
// a parameter (key=value, or a number), not as a model name, which starts with a letter.
std::vector<std::string> split_model_list(const std::string& text, const std::string& option);

// A kernel model's warning (KernelModel::warning, e.g. an fp8 P̄ that saturates), one line on
// stderr: `warning: NAME: WARNING`. Nothing when `warning` is empty.
void warn_about_model(const std::string& name, const std::string& warning);

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
  static const ::fb::cli::SubcommandRegistration ident##_registration { name, description, setup }

// ---- shared parsing helpers; each throws InputError naming what was wrong --------
// Batch mode shared by `op --batch` and `dot --batch` (docs/CLI.md): reads FILE or "-" line by
// line, splits each line into whitespace-separated words and writes run_line's result as
// one output line, in input order. run_line throws InputError for a malformed line; the
// batch then prints `error: line N: ...` on stderr (after flushing earlier results) and
// returns kExitBadInput. line_no counts from 1. A line of kMaxBatchLineBytes or more (a
// file without newlines, /dev/zero) is such a malformed line: no line is held whole past it.
inline constexpr std::size_t kMaxBatchLineBytes = std::size_t{16} << 20;
using BatchLineRunner = std::function<std::string(const std::vector<std::string>& words, std::uint64_t line_no)>;
int run_line_batch(const std::string& path, const BatchLineRunner& run_line);

// An error message made safe to print as one line: every echoed word (a run of non-blank
// characters) longer than kMaxEchoedWord cut to its first kEchoedPrefix bytes + "... (N
// bytes)" (a 10 MB operand is not copied whole into the one error line), then every byte
// that is not printable UTF-8 -- a control character, a newline, byte 0xff of a path --
// shown as \xNN (formats/text_escape.hpp escape_unprintable).
inline constexpr std::size_t kMaxEchoedWord = 200;
inline constexpr std::size_t kEchoedPrefix = 64;
std::string shorten_echoes(std::string_view message);
// The one printer of error lines on stderr: `prefix` ("error: " or "internal error: ") and
// shorten_echoes(message), then a newline. Every error line of the CLI goes through it.
void print_error_line(std::string_view message, std::string_view prefix = "error: ");

// ---- operand words that begin with a minus ---------------------------------------------
// CLI11 reads a word of a minus and a letter (`-inf`, `-nan`, a dot's `-inf,+1`) as a cluster
// of short options and refuses it, although the operand grammar (docs/CLI.md) takes it.
// shield_operand_words returns argv with every such word after `op` or `dot` prefixed by
// kOperandShield (CLI11 then sees a positional word), `-h` excepted; and a `--` there (the
// POSIX end of options) dropped, every later word shielded. operand_word(), the transform of
// those commands' positional words, removes the prefix again: the commands see what was typed.
inline constexpr char kOperandShield = '\x1f';
std::vector<std::string> shield_operand_words(int argc, char** argv);
CLI::Validator operand_word();

// Whether stderr is a terminal (progress bars are shown only then).
bool stderr_is_terminal();

// ---- option values shared by several subcommands; each throws InputError -----------
// The default of every --jobs: the machine's hardware threads
// (std::thread::hardware_concurrency()), at least 1 and at most kMaxJobs.
int default_jobs();
// Adds --jobs to a command with the wording sweep's has: "threads, 1..kMaxJobs (default:
// the machine's cores, N here; results do not depend on it)", defaulting `jobs` to
// default_jobs(). The command checks the value with jobs_or_throw before any work.
CLI::Option* add_jobs_option(CLI::App& app, int& jobs);
// Runs `worker` on `jobs` threads and joins them. A thread that cannot be started (the
// system's thread or memory limit) calls `stop` (which must make the running workers return
// soon), joins the ones started and throws InputError naming `option` and the count.
void run_on_threads(int jobs, const std::function<void()>& worker, const std::function<void()>& stop,
                    std::string_view option = "--jobs");
// An integer option checked as CLI11 reads it (a usage error, exit 2, before any work): the
// word is decimal digits, with an optional '+', of a value in lo..hi. Without it CLI11 clamps
// an unsigned option (`--seed -1`, `2^64` and `1e20` all became 2^64-1) and says of `--trials
// 1e12` only that it cannot be converted. CLI11 puts the option's name before the message:
// `--trials: expected an integer 1..16777216 (2^24, the most trials), got '1e12'`; `limit`,
// when given, is that parenthesis.
CLI::Validator integer_in(std::uint64_t lo, std::uint64_t hi, const std::string& limit = "");
// The word alone: decimal digits with an optional '+' (CLI11 would also read 0x10, 0b1 and
// 1e1 as integers), for an option whose range a later check names with its value (--jobs).
// `range` is said in the message: "expected an integer 1..1024, got '0x2'".
CLI::Validator decimal_word(const std::string& range);
// A real-valued option (--alpha, --at-stake): the word must be a decimal number
// (formats/decimal_text.hpp read_decimal; CLI11 alone took 0x0.1, and read through long
// double, which rounds twice), and is handed on as the shortest text of its correctly rounded
// double. "expected a decimal number, got '0x0.1'".
CLI::Validator decimal_number();
// --seed of every command that takes one: 0..2^64-1, checked by integer_in.
CLI::Option* add_seed_option(CLI::App& app, std::uint64_t& seed, const std::string& description);
// The checks of the problem-size options, as CLI11 reads them (integer_in): --trials
// at_least..kMaxTrials; --headdim 1..attn::kMaxHeadDim (the engine models no larger head);
// --seqlen, --heads, --kv-heads and --batch 1..INT_MAX (their product is check_problem_size's).
CLI::Validator trials_in(long long at_least);
CLI::Validator headdim_in();
CLI::Validator size_in();

// ---- output files --------------------------------------------------------------------
// Flushes stdout (std::cout and C stdio); false when anything written to it was lost.
bool flush_stdout(std::string& reason);

// docs/CLI.md: a run that takes more than about 2 s shows a progress bar on stderr when
// stderr is a terminal, and stays quiet otherwise. The work advances counter() from any
// thread; when stderr is a terminal a drawing thread waits 2 s, then redraws every
// 200 ms. The destructor stops it and clears the line, so the run's own output (stdout
// and any final stderr line) is never interleaved with a half-drawn bar.
// The bar's line for `columns` terminal columns: never longer than columns - 1 (the bar
// shrinks, then is dropped), with an ETA once some work is done. Exposed for tests.
std::string progress_line(std::uint64_t done, std::uint64_t total, const std::string& unit, double elapsed_seconds,
                          int columns);

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
  std::size_t drawn_width_ = 0;  // widest line drawn, cleared by clear_line() and finish()
  std::thread drawer_;
  void start_drawer();
};

}  // namespace fb::cli
