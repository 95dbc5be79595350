// formats/file_read.hpp: the one whole-file read of flashbits, with a size cap per kind of
// file.
//
// (It lives in fb_formats because that is the one library every other links, the gpu/
// standalone build included; it has nothing to do with number formats.)
//
// Contract of read_file_capped:
// - Reads the file at `path` whole and returns its bytes; throws FileReadError, one line
//   "PATH: ..." naming the file, when it cannot be opened, is a directory, fails to read,
//   or holds more than kind.max_bytes bytes ("PATH: larger than the CAP cap for WHAT").
// - At most max_bytes + 1 bytes are ever read, in chunks, whatever the file is: /dev/zero,
//   a FIFO or a growing file cannot exhaust memory; a regular file's size is checked first
//   so that a too-large one is refused before any read.
// - Every kind of input file has its cap here (the FileKind constants below) and nowhere
//   else; docs/CLI.md "Input files" lists them.
// Readers that stream a large regular file instead of reading it whole (safetensors, .npy)
// check its size against their kind's cap with check_file_size_capped.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace fb {

struct FileReadError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A kind of input file: what it is called in messages and the most bytes it may hold.
struct FileKind {
  const char* what;
  std::uint64_t max_bytes;
};

inline constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
inline constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

// Recipe JSON files (bias-test/replay/sweep --recipe): a few lines by design.
inline constexpr FileKind kRecipeFile{"a recipe file", 16 * kMiB};
// Sweep results read back by `merge` (CSV or JSON shards): rows of a few hundred bytes, so
// about a million rows.
inline constexpr FileKind kSweepFile{"a sweep result file", 256 * kMiB};
// FBSFU1 special-function tables (traces/sfu_table_file.cpp): the H200 ones are 2-17 MB; a
// delta table over all 2^32 inputs (4 bits each, with escapes) stays under the cap.
inline constexpr FileKind kSfuTableFile{"an FBSFU1 table", 4 * kGiB};
// The device's SFU captures (FBSFUT1 tables, FBSFURAW1 evidence of a few binades), read by
// fb-sfu-table-convert: hundreds of MB at most.
inline constexpr FileKind kSfuCaptureFile{"an SFU capture", 4 * kGiB};
// FBSFUVAL1 files (replay --sfu-values): 8 bytes per distinct input a replay evaluates; the
// cap holds 2^25 pairs (a 16384-row capture's has about 65,000).
inline constexpr FileKind kSfuValuesFile{"an FBSFUVAL1 file", 256 * kMiB};
// Probe files (FBPROBE1): device files reach gigabytes (fb-mma-probe --tiles 900).
inline constexpr FileKind kProbeFile{"a probe file", 16 * kGiB};
// Traces and captures (.safetensors, .npy, .npz, fb-fa2 inputs): the problem-size limit
// (tools/cli_common.hpp kMaxMemoryBytes, 64 GiB of working arrays) bounds what can be
// replayed long before this. The CLI reads them only from regular files, size checked first.
inline constexpr FileKind kTraceFile{"a trace or capture", 64 * kGiB};

// "16 MiB", "1 GiB", or a byte count when it is neither.
std::string byte_count_text(std::uint64_t bytes);

std::string read_file_capped(const std::string& path, const FileKind& kind);
// The same, as bytes.
std::vector<std::uint8_t> read_file_capped_bytes(const std::string& path, const FileKind& kind);

// Standard input read whole under the same cap, named "standard input" in messages (for
// `merge -`); reads block until its end-of-file.
std::string read_standard_input_capped(const FileKind& kind);

// Throws FileReadError "PATH: larger than ..." when `size` exceeds kind.max_bytes.
void check_file_size_capped(const std::string& path, std::uint64_t size, const FileKind& kind);

// An input opened for reading as read_file_capped opens it, for readers that stream it (batch
// files): a FIFO that no process writes to is refused at once (FileReadError "PATH: a FIFO
// with nothing to read ..."), where open() would wait forever, and a directory is refused.
// The descriptor is blocking; `first` holds a byte the FIFO check had to read from a pipe,
// which comes before the descriptor's next. Closes the descriptor when destroyed.
struct OpenedInput {
  int fd = -1;
  std::optional<char> first;
  bool regular = false;  // a regular file (st_size is its size)
  std::uint64_t size = 0;
  OpenedInput() = default;
  OpenedInput(const OpenedInput&) = delete;
  OpenedInput& operator=(const OpenedInput&) = delete;
  ~OpenedInput();
};
// Never null; the object is not movable, hence the pointer.
std::unique_ptr<OpenedInput> open_input(const std::string& path);

}  // namespace fb
