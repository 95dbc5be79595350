// tests/test_file_read.cpp: the one whole-file read (formats/file_read.hpp), the escaping of
// bytes that are not printable UTF-8 (formats/text_escape.hpp) and json_text
// (formats/json_text.hpp), issue 34.
//
// Independent facts checked: the size caps hold for a regular file at, and one byte past, the
// cap, and for /dev/zero (which never ends: the read must stop at cap + 1 bytes); the UTF-8
// validity rules are those of RFC 3629 (overlong forms, surrogates and code points above
// U+10FFFF are invalid), written here as byte strings, not derived from the code.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "formats/file_read.hpp"
#include "formats/json_text.hpp"
#include "formats/text_escape.hpp"

namespace {

std::filesystem::path scratch_dir() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("fb_file_read_test_" + std::to_string(::getpid()));
    std::filesystem::remove_all(d);  // an earlier run's, whose pid this one reuses
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

std::string write_bytes(const std::string& name, const std::string& bytes) {
  const std::string path = (scratch_dir() / name).string();
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string error_of(const std::string& path, const fb::FileKind& kind) {
  try {
    (void)fb::read_file_capped(path, kind);
  } catch (const fb::FileReadError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("read_file_capped: a file up to the cap is read whole; one byte more is refused naming file and cap") {
  constexpr fb::FileKind kSmall{"a test file", 1000};
  std::string content(1000, 'a');
  content[17] = '\0';  // binary content comes back byte for byte
  content[999] = '\xff';
  const std::string at_cap = write_bytes("at_cap.bin", content);
  CHECK(fb::read_file_capped(at_cap, kSmall) == content);
  CHECK(fb::read_file_capped_bytes(at_cap, kSmall).size() == 1000);
  const std::string over = write_bytes("over_cap.bin", content + "b");
  CHECK(error_of(over, kSmall) == over + ": 1001 bytes, larger than the 1000 bytes cap for a test file");
  CHECK(fb::read_file_capped(write_bytes("empty.bin", ""), kSmall).empty());
}

TEST_CASE("read_file_capped: /dev/zero, a directory and a missing file are errors naming the file, never a crash") {
  constexpr fb::FileKind kMiB{"a test file", fb::kMiB};
  CHECK(error_of("/dev/zero", kMiB) == "/dev/zero: larger than the 1 MiB cap for a test file");
  CHECK(error_of(scratch_dir().string(), kMiB) == scratch_dir().string() + ": cannot read: is a directory");
  const std::string missing = (scratch_dir() / "missing.bin").string();
  CHECK(error_of(missing, kMiB) == missing + ": cannot open: No such file or directory");
  // An empty name (`merge ''`) is named as such, not as a file called "".
  CHECK(error_of("", kMiB) == "an empty file name where a file to read was expected");
  // The documented caps (docs/CLI.md "Input files").
  CHECK(fb::byte_count_text(fb::kRecipeFile.max_bytes) == "16 MiB");
  CHECK(fb::byte_count_text(fb::kSweepFile.max_bytes) == "256 MiB");
  CHECK(fb::byte_count_text(fb::kSfuValuesFile.max_bytes) == "256 MiB");
  CHECK(fb::byte_count_text(fb::kTraceFile.max_bytes) == "64 GiB");
}

TEST_CASE("escape_unprintable: bytes outside RFC 3629 UTF-8 and control characters become \\xNN") {
  using fb::escape_unprintable;
  CHECK(escape_unprintable("plain ascii, tab\tkept") == "plain ascii, tab\tkept");
  // Valid multi-byte characters are kept: U+00E9, U+20AC, U+1F600 and the largest, U+10FFFF.
  const std::string valid = "\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf";
  CHECK(escape_unprintable(valid) == valid);
  CHECK(escape_unprintable("a\xff"
                           "b") == "a\\xffb");
  CHECK(escape_unprintable("\xc0\xaf") == "\\xc0\\xaf");                    // overlong '/'
  CHECK(escape_unprintable("\xe0\x80\xaf") == "\\xe0\\x80\\xaf");           // overlong, 3 bytes
  CHECK(escape_unprintable("\xed\xa0\x80") == "\\xed\\xa0\\x80");           // a UTF-16 surrogate, U+D800
  CHECK(escape_unprintable("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");  // U+110000
  CHECK(escape_unprintable("\xe2\x82") == "\\xe2\\x82");                    // cut short
  CHECK(escape_unprintable("\x80") == "\\x80");                             // a lone continuation byte
  CHECK(escape_unprintable("line\nbreak\r\x1b[31m\x7f") == "line\\x0abreak\\x0d\\x1b[31m\\x7f");
  CHECK(escape_unprintable("line\nbreak", false) == "line\nbreak");
}

TEST_CASE("json_text: a string that is not UTF-8 is escaped, in values and keys, instead of throwing") {
  nlohmann::json j = {{"file", "/tmp/p\xff.fbp"}, {"list", {"ok", "x\xfe"}}, {"k\xff", 1}};
  CHECK_THROWS(j.dump());  // what every --json output did before issue 34
  const nlohmann::json back = nlohmann::json::parse(fb::json_text(j, 2));
  CHECK(back["file"] == "/tmp/p\\xff.fbp");
  CHECK(back["list"][1] == "x\\xfe");
  CHECK(back["k\\xff"] == 1);
  // Valid text is unchanged, key order of an ordered_json kept.
  nlohmann::ordered_json o;
  o["z"] = "\xc3\xa9";
  o["a"] = 1;
  CHECK(fb::json_text(o) == o.dump());
  o["b"] = "\xff";
  CHECK(fb::json_text(o) == "{\"z\":\"\xc3\xa9\",\"a\":1,\"b\":\"\\\\xff\"}");
}
