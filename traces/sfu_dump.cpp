// traces/sfu_dump.cpp: FBSFUDUMP1 files (traces/sfu_dump.hpp).
#include "traces/sfu_dump.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>
#include <stdexcept>

#include "traces/key_value_line.hpp"

namespace fb {
namespace {

constexpr std::size_t kHeaderBytes = 4096;
constexpr std::uint64_t kEntries = std::uint64_t{1} << 32;

class DumpModel final : public SpecialFunctionModel {
 public:
  DumpModel(SpecialFunction f, std::string path, std::string source, const std::uint32_t* outputs, void* map,
            std::size_t map_bytes)
      : function_(f),
        path_(std::move(path)),
        source_(std::move(source)),
        outputs_(outputs),
        map_(map),
        map_bytes_(map_bytes) {}
  ~DumpModel() override { munmap(map_, map_bytes_); }
  DumpModel(const DumpModel&) = delete;
  DumpModel& operator=(const DumpModel&) = delete;
  SpecialFunction function() const override { return function_; }
  SfuKind kind() const override { return SfuKind::table; }
  bool hardware_measured() const override { return true; }
  std::string describe() const override {
    return std::string(to_string(function_)) + ": full hardware dump " + path_ + " (all 2^32 inputs, " + source_ + ")";
  }
  std::string summary() const override {
    return std::string(to_string(function_)) + " dump " + std::filesystem::path(path_).filename().string() +
           " (measured)";
  }
  float evaluate(float x) const override {
    std::uint32_t in;
    std::memcpy(&in, &x, 4);
    const std::uint32_t out = outputs_[in];
    float y;
    std::memcpy(&y, &out, 4);
    return y;
  }

 private:
  SpecialFunction function_;
  std::string path_, source_;
  const std::uint32_t* outputs_;
  void* map_;
  std::size_t map_bytes_;
};

}  // namespace

SfuDumpHeader parse_sfu_dump_header(const std::string& path, std::string_view header, SpecialFunction expected) {
  const std::string text(header.substr(0, std::min(header.find('\0'), header.size())));
  std::istringstream lines(text);
  std::string line;
  std::getline(lines, line);
  std::map<std::string, std::string> kv;
  const bool magic_ok = line == "FBSFUDUMP1";
  while (std::getline(lines, line)) {
    // Only the known keys are read; a line that is not key=value is ignored, as it always was
    // (the checks below name what is missing or wrong).
    std::string key, value;
    if (split_key_value(line, key, value)) kv[key] = value;
  }
  std::string error;
  if (!magic_ok)
    error = "not an FBSFUDUMP1 file";
  else if (kv["function"] != to_string(expected))
    error = "function: '" + kv["function"] + "', expected '" + std::string(to_string(expected)) + "'";
  else if (kv["source"].empty())
    error = "source: missing (a dump states the GPU it was taken on, source=cuda:<gpu>)";
  else if (kv["source"].rfind("cuda:", 0) != 0)
    error = "source: '" + kv["source"] + "' is not a hardware capture (cuda:<gpu>)";
  if (!error.empty()) throw std::runtime_error(path + ": " + error);
  return {kv["source"], kv["instruction"]};
}

std::unique_ptr<SpecialFunctionModel> load_sfu_dump(const std::string& path, SpecialFunction expected) {
  auto fail = [&](const std::string& what) { throw std::runtime_error(path + ": " + what); };
  // Without blocking: a FIFO that no process writes to would wait in open() forever. A dump
  // is mapped, so it must be a regular file.
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK);
  if (fd < 0) fail("cannot open for reading");
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    close(fd);
    fail("cannot stat");
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    fail("not a regular file (an FBSFUDUMP1 dump is one)");
  }
  const std::uint64_t want = kHeaderBytes + kEntries * 4;
  if (static_cast<std::uint64_t>(st.st_size) != want) {
    close(fd);
    fail("size " + std::to_string(st.st_size) + " is not " + std::to_string(want) +
         " (a 4096-byte header and 2^32 u32 outputs)");
  }
  void* map = mmap(nullptr, want, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (map == MAP_FAILED) fail("cannot map");
  const char* header = static_cast<const char*>(map);
  SfuDumpHeader parsed;
  try {
    parsed = parse_sfu_dump_header(path, std::string_view(header, kHeaderBytes), expected);
  } catch (...) {
    munmap(map, want);
    throw;
  }
  madvise(map, want, MADV_RANDOM);
  const auto* outputs = reinterpret_cast<const std::uint32_t*>(header + kHeaderBytes);
  return std::make_unique<DumpModel>(expected, path, parsed.source + ", " + parsed.instruction, outputs, map, want);
}

}  // namespace fb
