// tools/cli_common.cpp: shared parsing and formatting for the CLI.
#include "tools/cli_common.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <cstdlib>
#include <charconv>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <system_error>

#include "attention/attention.hpp"
#include "attention/problem_limits.hpp"
#include "formats/decimal_text.hpp"
#include "formats/file_read.hpp"
#include "formats/text_escape.hpp"
#include "traces/capture_import.hpp"

namespace fb::cli {

std::vector<Subcommand>& subcommand_registry() {
  static std::vector<Subcommand> registry;
  return registry;
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
  // Standard input, or the file opened as every input is (formats/file_read.hpp open_input: a
  // FIFO that no process writes to is refused, where open() would wait forever).
  std::unique_ptr<OpenedInput> file;
  if (path != "-") {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) throw InputError(path + ": cannot read batch file: is a directory");
    try {
      file = open_input(path);
    } catch (const FileReadError& e) {
      throw InputError(e.what());
    }
  }
  const int fd = file ? file->fd : 0;
  std::string buffer = file && file->first ? std::string(1, *file->first) : std::string();
  std::size_t at = 0;
  bool failed = false;
  auto get = [&](char& c) {
    if (at == buffer.size()) {
      buffer.resize(1 << 16);
      at = 0;
      ssize_t n = 0;
      do {
        n = ::read(fd, buffer.data(), buffer.size());
      } while (n < 0 && errno == EINTR);
      failed = n < 0;
      buffer.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
      if (n <= 0) return false;
    }
    c = buffer[at++];
    return true;
  };
  std::string line, out;
  std::uint64_t line_no = 0;
  // std::getline with a cap: a line (or a file with no newline, /dev/zero) longer than
  // kMaxBatchLineBytes is a bad line, not an unbounded allocation.
  auto next_line = [&] {
    line.clear();
    char c = 0;
    bool any = false;
    while (get(c)) {
      any = true;
      if (c == '\n') return true;
      if (line.size() == kMaxBatchLineBytes) return true;  // the caller reports it
      line += c;
    }
    return any;
  };
  while (next_line()) {
    ++line_no;
    try {
      if (line.size() == kMaxBatchLineBytes)
        throw InputError("longer than " + byte_count_text(kMaxBatchLineBytes) + " (the most a batch line may hold)");
      // A NUL would end every message that quotes the line's words at it (what() is a C
      // string); a file saved as UTF-16 is full of them.
      if (const std::size_t nul = line.find('\0'); nul != std::string::npos)
        throw InputError("a NUL byte at column " + std::to_string(nul + 1) +
                         " (batch files are text: is it UTF-16? save it as UTF-8)");
      // A byte-order mark (an editor's, or files joined with cat) is invisible in the echoed
      // word ("unknown operation 'add'").
      if (line.rfind("\xEF\xBB\xBF", 0) == 0)
        throw InputError("starts with a UTF-8 byte-order mark (bytes EF BB BF); save the file without it");
      out += run_line(split_words(line), line_no);
    } catch (const InputError& e) {
      std::cout << out << std::flush;
      print_error_line("line " + std::to_string(line_no) + ": " + e.what());
      return kExitBadInput;
    }
    out += '\n';
    if (out.size() > (1u << 16)) {
      std::cout << out;
      out.clear();
    }
  }
  if (failed) {
    std::cout << out << std::flush;
    throw InputError((path == "-" ? std::string("standard input") : path) + ": read failed after line " +
                     std::to_string(line_no));
  }
  std::cout << out;
  return kExitOk;
}

std::string shorten_echoes(std::string_view message) {
  std::string out;
  std::size_t i = 0;
  while (i < message.size()) {
    if (message[i] == ' ' || message[i] == '\t' || message[i] == '\n') {
      out += message[i++];
      continue;
    }
    std::size_t j = i;
    while (j < message.size() && message[j] != ' ' && message[j] != '\t' && message[j] != '\n') ++j;
    std::string_view word = message.substr(i, j - i);
    // The quotes (and a trailing colon or comma) around an echoed word are the message's, not
    // the user's: they stay outside the cut, so that the count is the length of what was given.
    const auto is_opening = [](char c) { return c == '\'' || c == '"' || c == '('; };
    const auto is_closing = [](char c) { return c == '\'' || c == '"' || c == ')' || c == ':' || c == ','; };
    std::size_t lead = 0;
    while (lead < word.size() && is_opening(word[lead])) ++lead;
    std::size_t trail = 0;
    while (trail < word.size() - lead && is_closing(word[word.size() - 1 - trail])) ++trail;
    const std::string_view given = word.substr(lead, word.size() - lead - trail);
    if (given.size() > kMaxEchoedWord)
      out += std::string(word.substr(0, lead)) + std::string(given.substr(0, kEchoedPrefix)) + "... (" +
             std::to_string(given.size()) + " bytes)" + std::string(word.substr(word.size() - trail));
    else
      out += word;
    i = j;
  }
  // After the cut, so that a multi-byte character cut in two is shown escaped, not raw.
  return escape_unprintable(out);
}

void print_error_line(std::string_view message, std::string_view prefix) {
  std::cerr << prefix << shorten_echoes(message) << "\n";
}

bool stderr_is_terminal() { return ::isatty(2) != 0; }

int default_jobs() {
  const unsigned n = std::thread::hardware_concurrency();
  return static_cast<int>(std::clamp<unsigned>(n, 1u, static_cast<unsigned>(kMaxJobs)));
}

CLI::Option* add_jobs_option(CLI::App& app, int& jobs) {
  jobs = default_jobs();
  return app
      .add_option("--jobs", jobs,
                  "threads, 1.." + std::to_string(kMaxJobs) + " (default: the machine's cores, " +
                      std::to_string(default_jobs()) + " here; results do not depend on it)")
      ->check(decimal_word("1.." + std::to_string(kMaxJobs)));  // the range: jobs_or_throw, naming the count
}

CLI::Validator decimal_word(const std::string& range) {
  auto check = [range](std::string& word) -> std::string {
    std::string_view digits = word;
    if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
    const bool decimal =
        !digits.empty() && std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
    return decimal ? "" : "expected an integer " + range + ", got '" + word + "'";
  };
  return CLI::Validator(check, range, "decimal_word");
}

void check_output_path(std::string_view option, const std::string& path, bool stdout_allowed) {
  if (path.size() > 1 && path.front() == '-')
    throw InputError(std::string(option) + ": expected a file path, got '" + path +
                     "', an option's spelling (for a file of that name write ./" + path + ")");
  api::check_output_path(option, path, stdout_allowed);
}

void check_trace_output_path(std::string_view option, const std::string& path) {
  if (is_numpy_file_name(path))
    throw InputError(std::string(option) + " " + path +
                     ": a trace is written as safetensors, and a file named .npz or .npy is read as numpy's; name it "
                     "*.safetensors");
  check_output_path(option, path);
}

std::optional<std::pair<int, int>> read_positive_pair(std::string_view text, std::string_view separators) {
  const std::size_t at = text.find_first_of(separators);
  if (at == std::string_view::npos) return std::nullopt;
  const auto positive = [](std::string_view digits) -> std::optional<int> {
    long long n = 0;
    if (read_plain_integer(digits, n, false) != PlainIntegerError::none || n < 1 || n > std::numeric_limits<int>::max())
      return std::nullopt;
    return static_cast<int>(n);
  };
  const auto first = positive(text.substr(0, at)), second = positive(text.substr(at + 1));
  if (!first || !second) return std::nullopt;
  return std::pair{*first, *second};
}

CLI::Validator decimal_number() {
  auto check = [](std::string& word) -> std::string {
    if (word.empty()) return "";  // refused by name after parsing: "an empty value" (tools/main.cpp)
    const std::optional<double> v = read_decimal(word);
    if (!v) return "expected a decimal number, got '" + word + "'";
    // A nonzero spelling below the smallest double reads as 0; handed on, the option's own
    // check would echo "0", a value nobody typed.
    const std::string_view mantissa = std::string_view(word).substr(0, word.find_first_of("eE"));
    if (*v == 0 && mantissa.find_first_of("123456789") != std::string_view::npos)
      return "'" + word + "' is below the smallest double (4.9e-324) and would read as 0";
    // CLI11 converts through strtold and a cast, which can round twice; where that misses the
    // correctly rounded value, the word handed on is its 17 digits (read back exactly either way).
    if (static_cast<double>(std::strtold(word.c_str(), nullptr)) != *v) {
      char digits[40];
      std::snprintf(digits, sizeof digits, "%.17g", *v);
      word = digits;
    }
    return "";
  };
  return CLI::Validator(check, "NUMBER", "decimal_number");
}

void run_on_threads(int jobs, const std::function<void()>& worker, const std::function<void()>& stop,
                    std::string_view option) {
  std::vector<std::thread> threads;
  std::string failure;
  for (int j = 0; j < jobs; ++j) {
    try {
      threads.emplace_back(worker);
    } catch (const std::system_error& e) {
      failure = std::string(option) + " " + std::to_string(jobs) + ": cannot start thread " + std::to_string(j + 1) +
                " (" + e.code().message() + "); give a smaller " + std::string(option);
      stop();
      break;
    }
  }
  for (auto& t : threads) t.join();
  if (!failure.empty()) throw InputError(failure);
}

std::vector<std::string> shield_operand_words(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  if (argc < 2 || (args[1] != "op" && args[1] != "dot")) return args;
  std::vector<std::string> out(args.begin(), args.begin() + 2);
  bool operands_only = false;
  for (std::size_t i = 2; i < args.size(); ++i) {
    const std::string& word = args[i];
    if (!operands_only && word == "--") {
      operands_only = true;
      continue;
    }
    const bool minus_letter = word.size() >= 2 && word[0] == '-' && std::isalpha(static_cast<unsigned char>(word[1]));
    const bool shield = operands_only ? !word.empty() && word[0] == '-' : minus_letter && word != "-h";
    out.push_back(shield ? kOperandShield + word : word);
  }
  return out;
}

CLI::Validator operand_word() {
  return CLI::Validator(
      [](std::string& word) -> std::string {
        if (!word.empty() && word.front() == kOperandShield) word.erase(0, 1);
        return {};
      },
      "", "operand word");
}

CLI::Validator integer_in(std::uint64_t lo, std::uint64_t hi, const std::string& limit) {
  const std::string range = std::to_string(lo) + ".." + std::to_string(hi);
  auto check = [lo, hi, range, limit](std::string& word) -> std::string {
    std::string_view digits = word;
    if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
    std::uint64_t value = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    const bool in_range =
        !digits.empty() && end == digits.data() + digits.size() && ec == std::errc() && value >= lo && value <= hi;
    if (in_range) return "";
    return "expected an integer " + range + (limit.empty() ? "" : " (" + limit + ")") + ", got '" + word + "'";
  };
  return CLI::Validator(check, range, "integer_in");
}

CLI::Option* add_seed_option(CLI::App& app, std::uint64_t& seed, const std::string& description) {
  return app.add_option("--seed", seed, description)
      ->check(integer_in(0, std::numeric_limits<std::uint64_t>::max(), "2^64-1"));
}

CLI::Validator trials_in(long long at_least) {
  return integer_in(static_cast<std::uint64_t>(at_least), static_cast<std::uint64_t>(attn::kMaxTrials),
                    "at most 2^24 trials");
}

CLI::Validator headdim_in() {
  return integer_in(1, attn::kMaxHeadDim,
                    "the engine models head dims up to " + std::to_string(attn::kMaxHeadDim) + ", as FlashAttention");
}

CLI::Validator size_in() { return integer_in(1, static_cast<std::uint64_t>(std::numeric_limits<int>::max())); }

bool flush_stdout(std::string& reason) {
  std::cout.flush();
  const bool stream_failed = !std::cout;
  errno = 0;
  const bool flush_failed = std::fflush(stdout) != 0;
  const int err = errno;
  if (flush_failed || std::ferror(stdout) || stream_failed) {
    reason = err != 0 ? std::string(std::strerror(err)) : "output was lost";
    return false;
  }
  return true;
}

namespace {
// Columns of the terminal on stderr (TIOCGWINSZ, else $COLUMNS, else 80).
int terminal_columns() {
  winsize ws{};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  if (const char* c = std::getenv("COLUMNS")) {
    const int n = std::atoi(c);
    if (n > 0) return n;
  }
  return 80;
}

std::string duration_text(double seconds) {
  const long s = static_cast<long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, (s / 60) % 60);
  else if (s >= 60)
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%lds", s);
  return buf;
}
}  // namespace

// One line that never wraps: "[####   ] done/total unit  ETA 1m05s", the bar shrinking (and
// then dropped) to fit the terminal's width; the ETA from the rate since the start.
std::string progress_line(std::uint64_t done, std::uint64_t total, const std::string& unit, double elapsed_seconds,
                          int columns) {
  std::string counts = std::to_string(done) + "/" + std::to_string(total) + " " + unit;
  if (done > 0 && done < total && elapsed_seconds > 0)
    counts += "  ETA " + duration_text(elapsed_seconds * static_cast<double>(total - done) / static_cast<double>(done));
  const int room = columns - 1 - static_cast<int>(counts.size()) - 3;  // "[" "] " and the cursor's column
  const int width = std::min(40, room);
  if (width < 5) return counts.substr(0, static_cast<std::size_t>(std::max(0, columns - 1)));
  const int filled =
      total == 0
          ? width
          : static_cast<int>(static_cast<double>(width) * static_cast<double>(done) / static_cast<double>(total));
  return "[" + std::string(static_cast<std::size_t>(filled), '#') +
         std::string(static_cast<std::size_t>(width - filled), ' ') + "] " + counts;
}

ProgressBar::ProgressBar(std::string unit, std::uint64_t total) : unit_(std::move(unit)), total_(total) {
  if (!stderr_is_terminal() || total_ == 0) return;
  // A drawer the system cannot start (no thread left) leaves the run undrawn, not failed.
  try {
    start_drawer();
  } catch (const std::system_error&) {
  }
}

void ProgressBar::start_drawer() {
  drawer_ = std::thread([this] {
    const auto start = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock(mutex_);
    if (stop_signal_.wait_for(lock, std::chrono::seconds(2), [this] { return stop_; })) return;
    while (true) {
      const std::uint64_t done = std::min(done_.load(std::memory_order_relaxed), total_);
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const int columns = terminal_columns();
      const std::string line = progress_line(done, total_, unit_, elapsed, columns);
      // Clear what a longer previous line left, then draw.
      std::cerr << "\r" << line << std::string(drawn_width_ > line.size() ? drawn_width_ - line.size() : 0, ' ') << "\r"
                << line << std::flush;
      drawn_width_ = std::max(drawn_width_, line.size());
      drawn_ = true;
      if (stop_signal_.wait_for(lock, std::chrono::milliseconds(200), [this] { return stop_; })) return;
    }
  });
}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::clear_line() {
  if (!drawer_.joinable()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (drawn_) std::cerr << "\r" << std::string(drawn_width_, ' ') << "\r" << std::flush;
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
  if (drawn_) std::cerr << "\r" << std::string(drawn_width_, ' ') << "\r" << std::flush;
}

namespace {
// The comma-separated pieces, empty ones included (a trailing comma's is read, not dropped).
std::vector<std::string> split_list_pieces(const std::string& text, const std::string& option) {
  if (text.empty()) throw InputError(option + ": expected at least one entry, got none");
  std::vector<std::string> out;
  std::stringstream ss(text + ",");
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  return out;
}
// The entries, refused where one is empty (a typo) or given twice (measured twice).
std::vector<std::string> checked_entries(std::vector<std::string> entries, const std::string& text,
                                         const std::string& option) {
  std::set<std::string> seen;
  for (const std::string& item : entries) {
    if (item.empty()) throw InputError(option + " " + text + ": an empty entry (two commas, or one at an end)");
    if (!seen.insert(item).second) throw InputError(option + " " + text + ": " + item + " is given twice");
  }
  return entries;
}
}  // namespace

std::vector<std::string> split_list(const std::string& text, const std::string& option) {
  return checked_entries(split_list_pieces(text, option), text, option);
}

std::vector<std::string> split_model_list(const std::string& text, const std::string& option) {
  const auto last_variant_has_parameters = [](const std::string& name) {
    const std::size_t plus = name.rfind('+');
    return name.find(':', plus == std::string::npos ? 0 : plus) != std::string::npos;
  };
  std::vector<std::string> joined;
  for (const std::string& piece : split_list_pieces(text, option)) {
    const bool opened = !joined.empty() && last_variant_has_parameters(joined.back());
    const std::size_t equals = piece.find('='), plus = piece.find('+');
    const bool parameter =
        !piece.empty() && (!std::isalpha(static_cast<unsigned char>(piece[0])) ||
                           (equals != std::string::npos && (plus == std::string::npos || equals < plus)));
    if (opened && parameter)
      joined.back() += "," + piece;
    else
      joined.push_back(piece);
  }
  return checked_entries(joined, text, option);
}

void warn_about_model(const std::string& name, const std::string& warning) {
  if (!warning.empty()) std::cerr << "warning: " << name << ": " << warning << "\n";
}

}  // namespace fb::cli
