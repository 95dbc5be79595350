// fuzz/fuzz_util.hpp: what the path-based fuzz targets share. The parsers under test take
// a file path (their public contract), so each input is written to a per-process temp
// file first; the checks abort (a libFuzzer finding) rather than throw.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>
#include <unistd.h>

namespace fb::fuzz {

[[noreturn]] inline void fail(const std::string& why) {
  std::fprintf(stderr, "fuzz check failed: %s\n", why.c_str());
  std::abort();
}

inline void require(bool ok, const std::string& why) {
  if (!ok) fail(why);
}

// The standard's error shape: one line that names the file first.
inline void check_message(const std::string& message, const std::string& path) {
  require(message.rfind(path + ": ", 0) == 0, "error message does not start with the file name: " + message);
  require(message.find('\n') == std::string::npos, "error message spans lines: " + message);
}

// A file under $TMPDIR (default /tmp) named after the target and this process, removed
// when the fuzzer exits normally.
class TempFile {
 public:
  explicit TempFile(std::string_view tag) {
    const char* dir = std::getenv("TMPDIR");
    path_ = std::string(dir && *dir ? dir : "/tmp") + "/fb_fuzz_" + std::string(tag) + "_" + std::to_string(::getpid());
  }
  ~TempFile() { std::remove(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }
  void write(const std::uint8_t* data, std::size_t size) const {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!out) fail("cannot write " + path_);
  }

 private:
  std::string path_;
};

}  // namespace fb::fuzz
