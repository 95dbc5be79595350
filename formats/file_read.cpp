// formats/file_read.cpp: read_file_capped and its size checks (contract in file_read.hpp).
#include "formats/file_read.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

namespace fb {

std::string byte_count_text(std::uint64_t bytes) {
  if (bytes >= kGiB && bytes % kGiB == 0) return std::to_string(bytes / kGiB) + " GiB";
  if (bytes >= kMiB && bytes % kMiB == 0) return std::to_string(bytes / kMiB) + " MiB";
  return std::to_string(bytes) + " bytes";
}

namespace {
[[noreturn]] void too_large(const std::string& path, const FileKind& kind, const std::string& size) {
  throw FileReadError(path + ": " + size + "larger than the " + byte_count_text(kind.max_bytes) + " cap for " +
                      kind.what);
}
}  // namespace

void check_file_size_capped(const std::string& path, std::uint64_t size, const FileKind& kind) {
  if (size > kind.max_bytes) too_large(path, kind, std::to_string(size) + " bytes, ");
}

OpenedInput::~OpenedInput() {
  if (fd >= 0) ::close(fd);
}

std::unique_ptr<OpenedInput> open_input(const std::string& path) {
  // open("") fails with ENOENT, which would read ": cannot open: No such file or directory".
  if (path.empty()) throw FileReadError("an empty file name where a file to read was expected");
  auto in = std::make_unique<OpenedInput>();
  // Opened without blocking: a FIFO that no process writes to would block in open() forever.
  in->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (in->fd < 0) throw FileReadError(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(in->fd, &st) != 0) throw FileReadError(path + ": cannot open: " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw FileReadError(path + ": cannot read: is a directory");
  in->regular = S_ISREG(st.st_mode);
  in->size = in->regular ? static_cast<std::uint64_t>(st.st_size) : 0;
  // A FIFO's first byte is read without blocking: a pipe with a writer (`merge <(cat shard)`)
  // says EAGAIN until data comes, and is then read as any file; a FIFO that no process writes
  // to gives end-of-file at once (a blocking open or read would wait forever).
  if (S_ISFIFO(st.st_mode)) {
    char byte = 0;
    ssize_t n = 0;
    do {
      n = ::read(in->fd, &byte, 1);
    } while (n < 0 && errno == EINTR);
    if (n == 0) throw FileReadError(path + ": a FIFO with nothing to read (no process writes to it)");
    if (n == 1) in->first = byte;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
      throw FileReadError(path + ": read failed: " + std::strerror(errno));
  }
  // Blocking again for the reads: a pipe's writer may be slower than this reader.
  if (const int flags = ::fcntl(in->fd, F_GETFL); flags >= 0) ::fcntl(in->fd, F_SETFL, flags & ~O_NONBLOCK);
  return in;
}

namespace {
// Container: std::string or std::vector<std::uint8_t>.
// `path` names the input in messages.
template <class Container>
Container read_capped(const std::string& path, const OpenedInput* in, const FileKind& kind) {
  const int fd = in->fd;
  constexpr std::size_t kChunk = std::size_t{1} << 20, kSmallAsk = std::size_t{1} << 16;
  Container data;
  if (in->first) data.push_back(static_cast<typename Container::value_type>(*in->first));
  if (in->regular) {
    check_file_size_capped(path, in->size, kind);
    // Room for the end-of-file read below too, so that it does not move what was read.
    data.reserve(static_cast<std::size_t>(in->size) + kSmallAsk);
  }
  // Reads, never more than max_bytes + 1 in all: a device or pipe that never ends (/dev/zero)
  // or a file that grows while being read is refused as soon as it passes the cap. Each read
  // zero-fills what it asks for first, so the asks follow what is there: a regular file's
  // whole size and one byte more (one read, then one that finds the end), otherwise 64 KiB,
  // doubling up to 1 MiB while reads come back full. (Asking 1 MiB every time zero-filled
  // 2 MiB to read a small file.)
  std::size_t ask = in->regular ? static_cast<std::size_t>(in->size) + 1 : kSmallAsk;
  while (true) {
    const std::uint64_t room = kind.max_bytes + 1 - data.size();
    const std::size_t want = static_cast<std::size_t>(room < ask ? room : ask);
    const std::size_t had = data.size();
    data.resize(had + want);
    const ssize_t n = ::read(fd, data.data() + had, want);
    if (n < 0) {
      data.resize(had);
      if (errno == EINTR) continue;
      throw FileReadError(path + ": read failed: " + std::strerror(errno));
    }
    data.resize(had + static_cast<std::size_t>(n));
    if (n == 0) break;
    if (data.size() > kind.max_bytes) too_large(path, kind, "");
    ask = static_cast<std::size_t>(n) == want ? std::min(2 * want, kChunk) : kSmallAsk;
  }
  return data;
}
}  // namespace

std::string read_file_capped(const std::string& path, const FileKind& kind) {
  return read_capped<std::string>(path, open_input(path).get(), kind);
}

std::vector<std::uint8_t> read_file_capped_bytes(const std::string& path, const FileKind& kind) {
  return read_capped<std::vector<std::uint8_t>>(path, open_input(path).get(), kind);
}

std::string read_standard_input_capped(const FileKind& kind) {
  // A duplicate, so that the OpenedInput closing it leaves descriptor 0 open. Blocking reads:
  // standard input is the caller's to feed (a terminal waits for its end-of-file, as cat does).
  OpenedInput in;
  in.fd = ::fcntl(0, F_DUPFD_CLOEXEC, 0);
  if (in.fd < 0) throw FileReadError(std::string("standard input: cannot read: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(in.fd, &st) == 0 && S_ISREG(st.st_mode)) {
    // A redirected file read from where it stands, as every reader of standard input does.
    const off_t at = ::lseek(in.fd, 0, SEEK_CUR);
    in.regular = true;
    in.size = at >= 0 && at <= st.st_size ? static_cast<std::uint64_t>(st.st_size - at) : 0;
  }
  return read_capped<std::string>("standard input", &in, kind);
}

}  // namespace fb
