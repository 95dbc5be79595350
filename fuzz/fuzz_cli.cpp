// fuzz/fuzz_cli.cpp: libFuzzer targets for the `flashbits` subcommands that read a file
// of untrusted text, run the way tools/main.cpp runs them (the subcommand registry, the
// real option parsing) with stdout and stderr captured. Compiled once and linked into one
// target per command, each with a one-line source defining fb_fuzz_command
// (fuzz/CMakeLists.txt):
// - "op", "dot": the input is a --batch file (tools/op_line.hpp, tools/cmd_dot.cpp, and
//   cli_common's run_line_batch). The run must return 0 with one output line per input
//   line, or 2 with exactly one stderr line "error: line N: ..." after the N - 1 results
//   of the lines before it. No exception may escape (run_line_batch turns InputError into
//   exit 2; anything else would reach main's "internal error").
// - "merge": the first byte picks --json (odd) or the table; the rest is one shard file
//   (tools/sweep_file.cpp read_sweep_file, CSV or JSON, then emit_rows). The run must return 0
//   (or 1: a row whose edited statistics give the verdict `biased`) or throw
//   fb::cli::InputError with a one-line message starting with the file name.
// Any other exception, a crash, a sanitizer report or a leak is a finding.
#include <algorithm>
#include <cstdint>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.hpp"
#include "tools/cli_common.hpp"

// "op", "dot" or "merge": defined by the target (constant-initialised, so it is set before
// kCommand below is).
extern const char* const fb_fuzz_command;

namespace {

const std::string kCommand = fb_fuzz_command;

// Redirects std::cout and std::cerr into strings for its lifetime.
class Captured {
 public:
  Captured() : old_out_(std::cout.rdbuf(out_.rdbuf())), old_err_(std::cerr.rdbuf(err_.rdbuf())) {}
  ~Captured() {
    std::cout.rdbuf(old_out_);
    std::cerr.rdbuf(old_err_);
  }
  std::string out() const { return out_.str(); }
  std::string err() const { return err_.str(); }

 private:
  std::ostringstream out_, err_;
  std::streambuf* old_out_;
  std::streambuf* old_err_;
};

// Parses argv like main.cpp and runs the one subcommand; a CLI11 parse error is a bug of
// this harness, not of the input, so it aborts.
int run_command(const std::vector<std::string>& args) {
  CLI::App app{"flashbits"};
  app.require_subcommand(1);
  fb::cli::Runner runner;
  CLI::App* sub = nullptr;
  for (const auto& s : fb::cli::subcommand_registry()) {
    if (s.name != kCommand) continue;
    sub = app.add_subcommand(s.name, s.description);
    runner = s.setup(*sub);
  }
  fb::fuzz::require(sub != nullptr, "no subcommand " + kCommand);
  std::vector<char*> argv;
  std::vector<std::string> storage = args;
  for (auto& a : storage) argv.push_back(a.data());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    fb::fuzz::fail(std::string("harness arguments rejected: ") + e.what());
  }
  return runner();
}

std::size_t count_lines(const std::string& text) {  // as std::getline splits it
  const auto n = static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
  return n + (!text.empty() && text.back() != '\n' ? 1 : 0);
}

void check_batch(const std::string& input, int rc, const std::string& out, const std::string& err) {
  const std::size_t lines = count_lines(input);
  if (rc == fb::cli::kExitOk) {
    fb::fuzz::require(err.empty(), "exit 0 with stderr output: " + err);
    fb::fuzz::require(count_lines(out) == lines && (out.empty() || out.back() == '\n'),
                      "exit 0 but not one output line per input line");
    return;
  }
  fb::fuzz::require(rc == fb::cli::kExitBadInput, "batch returned " + std::to_string(rc));
  fb::fuzz::require(err.rfind("error: line ", 0) == 0 && err.find('\n') == err.size() - 1,
                    "exit 2 without exactly one 'error: line N: ...' line: " + err);
  const std::size_t bad_line = std::stoull(err.substr(12));
  fb::fuzz::require(bad_line >= 1 && bad_line <= lines,
                    "error names line " + std::to_string(bad_line) + " of " + std::to_string(lines));
  fb::fuzz::require(count_lines(out) == bad_line - 1, "results of the lines before the bad one are missing");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fb::fuzz::TempFile file("cli_" + kCommand);
  std::vector<std::string> args = {"flashbits", kCommand};
  std::string input;
  if (kCommand == "merge") {
    if (size == 0) return 0;
    if (data[0] & 1u) args.push_back("--json");
    input.assign(reinterpret_cast<const char*>(data) + 1, size - 1);
    args.push_back(file.path());
  } else {
    input.assign(reinterpret_cast<const char*>(data), size);
    args.push_back("--batch");
    args.push_back(file.path());
  }
  file.write(reinterpret_cast<const std::uint8_t*>(input.data()), input.size());
  int rc = 0;
  std::string out, err;
  {
    Captured captured;
    try {
      rc = run_command(args);
    } catch (const fb::cli::InputError& e) {
      // Only merge reports bad input by throwing (main.cpp prints it, exit 2).
      fb::fuzz::require(kCommand == "merge", std::string("InputError escaped the batch: ") + e.what());
      fb::fuzz::check_message(e.what(), file.path());
      return 0;
    }
    out = captured.out();
    err = captured.err();
  }
  if (kCommand == "merge") {
    // 1 is a result, not a failure: a merged row whose statistics give the verdict `adds
    // bias` (docs/CLI.md exit codes; inconclusive rows exit 0); the fuzzer edits those
    // statistics freely.
    fb::fuzz::require(rc == fb::cli::kExitOk || rc == fb::cli::kExitCheckFailed,
                      "merge returned " + std::to_string(rc));
  } else {
    check_batch(input, rc, out, err);
  }
  return 0;
}
