// api/output_file.cpp: whole-file writes and output-path checks (contract: api/output_file.hpp).
#include "api/output_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "traces/capture_import.hpp"
#include "traces/sfu_sets.hpp"

namespace fb::api {

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
  // (Appended rather than "." + name: GCC 12 warns falsely, -Wrestrict, on operator+(const
  // char*, string&&) inlined here.)
  std::string temporary_name(".");
  temporary_name.append(target.filename().string()).append(".tmp.XXXXXX");
  std::string tmp = (dir / temporary_name).string();
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
  if (is_numpy_file_name(path))
    throw InputError(prefix +
                     "flashbits writes no numpy file, and one named .npz or .npy is read as numpy's (in a folder of "
                     ".npy arrays, as one more tensor of that capture); give it another name");
  // The SFU tables a run may load by a set's name (--sfu hw-sm90, or auto for a hardware
  // capture) are inputs no option names, so no command's own list of inputs holds them.
  std::vector<std::pair<std::string, std::string>> tables;
  for (const std::string& table : sfu_table_paths()) tables.emplace_back("flashbits' SFU table", table);
  refuse_output_over_inputs(option, path, tables);
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

}  // namespace fb::api
