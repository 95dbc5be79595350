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
#include <string>
#include <system_error>

#include "attention/attention.hpp"
#include "attention/problem_limits.hpp"
#include "formats/text_escape.hpp"

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

namespace {
// [+-]? (D+ [. D*]? | . D+) ([eE] [+-]? D+)?, or [+-]? inf|nan (any case).
bool is_decimal_word(const std::string& s) {
  std::size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  std::string rest = s.substr(i);
  for (char& c : rest) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (rest == "inf" || rest == "nan") return true;
  auto digits = [&](std::size_t& j) {
    const std::size_t from = j;
    while (j < s.size() && s[j] >= '0' && s[j] <= '9') ++j;
    return j - from;
  };
  std::size_t mantissa = digits(i);
  if (i < s.size() && s[i] == '.') {
    ++i;
    mantissa += digits(i);
  }
  if (mantissa == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (digits(i) == 0) return false;
  }
  return i == s.size();
}
}  // namespace

std::uint32_t parse_operand_or_throw(const Format& f, std::string_view text, std::string_view what) {
  const std::string s(text);
  const std::string w(what);
  if (s.empty()) throw InputError(w + ": empty operand");
  const bool prefixed = s.size() >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
  const bool marked_decimal = s[0] == '+' || s[0] == '-' || s.find('.') != std::string::npos;
  const bool decimal = is_decimal_word(s);
  if (!prefixed && (marked_decimal || (decimal && !(s[0] >= '0' && s[0] <= '9')))) {
    // A value: signed, with a point, or inf / nan.
    if (!decimal) throw InputError(w + ": '" + s + "' is not a decimal number");
    const double v = std::strtod(s.c_str(), nullptr);
    std::uint32_t bits = 0;
    if (!from_double_exact(f, v, bits)) {
      throw InputError(w + ": " + s + " is not exactly representable in " + f.name +
                       " (give a hex bit pattern 0x... instead)");
    }
    return bits;
  }
  if (!prefixed && decimal && s.find_first_not_of('0') != std::string::npos) {
    // Digits only (or digits e digits): a hex pattern and a decimal number at once.
    throw InputError(w + ": '" + s + "' is ambiguous: write 0x" + s + " for the " + f.name + " bit pattern or +" + s +
                     " for the value");
  }
  std::string_view hex = text;
  if (prefixed) hex.remove_prefix(2);
  if (hex.empty() || hex.size() > 8) {
    throw InputError(w + ": '" + s + "' is not a hex bit pattern of " + f.name);
  }
  std::uint64_t v = 0;
  for (char ch : hex) {
    int d;
    if (ch >= '0' && ch <= '9')
      d = ch - '0';
    else if (ch >= 'a' && ch <= 'f')
      d = ch - 'a' + 10;
    else if (ch >= 'A' && ch <= 'F')
      d = ch - 'A' + 10;
    else
      throw InputError(w + ": '" + s + "' is not a hex bit pattern (0x...) or a decimal value (+1, 1.5)");
    v = v * 16 + static_cast<std::uint64_t>(d);
  }
  const std::uint64_t container_limit = std::uint64_t{1} << f.container_bits;
  const std::uint32_t layout_bits = static_cast<std::uint32_t>(v) >> f.storage_shift();
  if (v >= container_limit || (static_cast<std::uint32_t>(v) & ((1u << f.storage_shift()) - 1u)) != 0 ||
      (layout_bits & ~f.width_mask()) != 0) {
    throw InputError(w + ": 0x" + std::string(hex) + " is not a valid " + f.name + " bit pattern (" +
                     std::to_string(f.width()) + " bits" +
                     (f.storage_shift() ? ", low " + std::to_string(f.storage_shift()) + " bits zero" : "") + ")");
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
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) throw InputError(path + ": cannot read batch file: is a directory");
    file.open(path);
    if (!file) throw InputError(path + ": cannot open batch file");
    in = &file;
  }
  std::string line, out;
  std::uint64_t line_no = 0;
  // std::getline with a cap: a line (or a file with no newline, /dev/zero) longer than
  // kMaxBatchLineBytes is a bad line, not an unbounded allocation.
  auto next_line = [&] {
    line.clear();
    char c = 0;
    bool any = false;
    while (in->get(c)) {
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
  if (in->bad()) {
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
    const std::string_view word = message.substr(i, j - i);
    if (word.size() > kMaxEchoedWord)
      out += std::string(word.substr(0, kEchoedPrefix)) + "... (" + std::to_string(word.size()) + " bytes)";
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

int jobs_or_throw(long long jobs, std::string_view option) {
  if (jobs < 1 || jobs > kMaxJobs)
    throw InputError(std::string(option) + " " + std::to_string(jobs) + ": expected 1.." + std::to_string(kMaxJobs) +
                     " threads");
  return static_cast<int>(jobs);
}

void check_problem_size(long long batch, long long heads, long long seqlen, long long headdim) {
  const attn::SizeRefusal refusal = attn::problem_size_refusal(batch, heads, seqlen, headdim);
  if (!refusal) return;
  const std::string given = (batch != 1 ? "--batch " + std::to_string(batch) + " " : std::string()) +
                            (heads != 1 ? "--heads " + std::to_string(heads) + " " : std::string()) + "--seqlen " +
                            std::to_string(seqlen) + " --headdim " + std::to_string(headdim);
  throw InputError(given + ": " + refusal.reason + (refusal.too_large ? "; give a smaller --seqlen or --headdim" : ""));
}

void check_trials(long long trials, long long at_least, std::string_view option) {
  const std::string refusal = attn::trials_refusal(trials, at_least);
  if (!refusal.empty()) throw InputError(std::string(option) + " " + std::to_string(trials) + ": " + refusal);
}

int default_jobs() {
  const unsigned n = std::thread::hardware_concurrency();
  return static_cast<int>(std::clamp<unsigned>(n, 1u, static_cast<unsigned>(kMaxJobs)));
}

CLI::Option* add_jobs_option(CLI::App& app, int& jobs) {
  jobs = default_jobs();
  return app.add_option("--jobs", jobs,
                        "threads, 1.." + std::to_string(kMaxJobs) + " (default: the machine's cores, " +
                            std::to_string(default_jobs()) + " here; results do not depend on it)");
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

int sr_bits_or_throw(long long bits, std::string_view option) {
  if (bits < 1 || bits > kMaxSrBits)
    throw InputError(std::string(option) + ": " + std::to_string(bits) + " is outside 1.." +
                     std::to_string(kMaxSrBits));
  return static_cast<int>(bits);
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

double alpha_or_throw(double alpha, std::string_view option) {
  if (!(std::isfinite(alpha) && alpha > 0.0 && alpha < 1.0)) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", alpha);
    throw InputError(std::string(option) + " " + buf + ": expected a significance level strictly between 0 and 1");
  }
  return alpha;
}

namespace {
std::string errno_text(int err) { return std::strerror(err); }

// The file an output path writes: through a symbolic link, the file it names (the link is
// kept and its target replaced), else the path itself.
std::filesystem::path output_target(const std::string& path) {
  std::error_code ec;
  std::filesystem::path target = path;
  if (std::filesystem::is_symlink(target, ec)) {
    const std::filesystem::path resolved = std::filesystem::weakly_canonical(target, ec);
    if (!ec) target = resolved;
  }
  return target;
}

// Writes all of `content` to `fd`; false with errno set on failure.
bool write_all(int fd, std::string_view content) {
  std::size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (n == 0) {
      errno = EIO;
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  return true;
}
}  // namespace

void write_output_file(const std::string& path, std::string_view content, std::string_view what) {
  const std::string prefix = path + ": cannot write " + std::string(what) + ": ";
  if (path.empty()) throw InputError(std::string(what) + ": the output path is empty");
  namespace fs = std::filesystem;
  const fs::path target = output_target(path);
  struct stat st {};
  const bool exists = ::stat(target.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode)) throw InputError(prefix + "is a directory");
  if (exists && !S_ISREG(st.st_mode)) {
    // A device or a pipe: nothing to rename into place; write directly, check everything.
    const int fd = ::open(target.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) throw InputError(prefix + errno_text(errno));
    const bool ok = write_all(fd, content);
    const int write_errno = errno;
    if (::close(fd) != 0 && ok) throw InputError(prefix + errno_text(errno));
    if (!ok) throw InputError(prefix + errno_text(write_errno));
    return;
  }
  fs::path dir = target.parent_path();
  if (dir.empty()) dir = ".";
  std::string tmp = (dir / ("." + target.filename().string() + ".tmp.XXXXXX")).string();
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) throw InputError(prefix + errno_text(errno));
  auto fail = [&](int err) {
    ::unlink(tmp.c_str());
    throw InputError(prefix + errno_text(err));
  };
  // The permissions a newly created file would get (0666 less the umask); an existing
  // file keeps its own.
  mode_t mode = 0;
  if (exists) {
    mode = st.st_mode & 07777;
  } else {
    const mode_t mask = ::umask(0);
    ::umask(mask);
    mode = 0666 & ~mask;
  }
  if (::fchmod(fd, mode) != 0) {
    const int err = errno;
    ::close(fd);
    fail(err);
  }
  if (!write_all(fd, content)) {
    const int err = errno;
    ::close(fd);
    fail(err);
  }
  if (::fsync(fd) != 0 && errno != EINVAL && errno != EROFS) {
    const int err = errno;
    ::close(fd);
    fail(err);
  }
  if (::close(fd) != 0) fail(errno);
  if (std::rename(tmp.c_str(), target.c_str()) != 0) fail(errno);
}

void refuse_output_over_inputs(std::string_view output_option, const std::string& output,
                               const std::vector<std::pair<std::string, std::string>>& inputs) {
  namespace fs = std::filesystem;
  if (output.empty()) return;
  auto same = [](const std::string& a, const std::string& b) {
    std::error_code ec;
    if (fs::exists(a, ec) && fs::exists(b, ec)) {
      const bool eq = fs::equivalent(a, b, ec);
      if (!ec) return eq;
    }
    const fs::path ca = fs::weakly_canonical(a, ec);
    if (ec) return a == b;
    const fs::path cb = fs::weakly_canonical(b, ec);
    if (ec) return a == b;
    return ca == cb;
  };
  for (const auto& [role, input] : inputs) {
    if (input.empty() || input == "-") continue;
    if (same(output, input))
      throw InputError(std::string(output_option) + " " + output + ": is the same file as " + role + " " + input +
                       " (it would be overwritten); choose another output path");
  }
}

void check_output_path(std::string_view option, const std::string& path, bool stdout_allowed) {
  namespace fs = std::filesystem;
  if (path.empty()) return;
  const std::string prefix = std::string(option) + " " + path + ": ";
  if (path == "-") {
    if (stdout_allowed) return;
    throw InputError(prefix + "standard output is not supported here; give a file path (./- for a file named -)");
  }
  // Through a symbolic link: the file it names is replaced (write_output_file), in its directory.
  const fs::path target = output_target(path);
  struct stat st {};
  if (::stat(target.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) throw InputError(prefix + "is a directory, expected a file path");
    if (!S_ISREG(st.st_mode)) {
      // A device or a pipe is written in place.
      if (::access(target.c_str(), W_OK) != 0) throw InputError(prefix + "cannot be written: " + errno_text(errno));
      return;
    }
  }
  // A regular file (or a new one) is a temporary file renamed into place: its directory must
  // take new files.
  fs::path dir = target.parent_path();
  if (dir.empty()) dir = ".";
  struct stat dir_st {};
  if (::stat(dir.c_str(), &dir_st) != 0)
    throw InputError(prefix + "cannot write into directory " + dir.string() + ": " + errno_text(errno));
  if (!S_ISDIR(dir_st.st_mode)) throw InputError(prefix + dir.string() + " is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw InputError(prefix + "cannot write into directory " + dir.string() + ": " + errno_text(errno));
}

bool flush_stdout(std::string& reason) {
  std::cout.flush();
  const bool stream_failed = !std::cout;
  errno = 0;
  const bool flush_failed = std::fflush(stdout) != 0;
  const int err = errno;
  if (flush_failed || std::ferror(stdout) || stream_failed) {
    reason = err != 0 ? errno_text(err) : "output was lost";
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

void warn_about_model(const std::string& name, const std::string& warning) {
  if (!warning.empty()) std::cerr << "warning: " << name << ": " << warning << "\n";
}

}  // namespace fb::cli
