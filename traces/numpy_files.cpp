// traces/numpy_files.cpp: the .npy header parser and a ZIP reader for .npz archives
// (contract in numpy_files.hpp). The .npy format is numpy's NEP 1: a magic string, a
// version, a header length, then a Python dict literal {'descr': ..., 'fortran_order': ...,
// 'shape': (...)} padded with spaces, then the raw data.
#include "traces/numpy_files.hpp"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <fstream>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "formats/file_read.hpp"
#include "traces/little_endian.hpp"

namespace fb {

namespace {

[[noreturn]] void fail(std::string_view source, const std::string& message) {
  throw TraceError(std::string(source) + ": " + message);
}

std::uint64_t little(std::span<const std::uint8_t> b, std::size_t at, std::size_t width) {
  return load_little_endian(b.data() + at, width);
}

// The dict literal of an .npy header, read as numpy writes it (and as a careful writer
// could): keys in any order, single or double quotes, a trailing comma, spaces anywhere.
class HeaderDict {
 public:
  HeaderDict(std::string_view text, std::string source) : s_(text), source_(std::move(source)) {}

  struct Parsed {
    std::string descr;
    bool fortran_order = false;
    std::vector<std::uint64_t> shape;
  };

  Parsed parse() {
    Parsed out;
    bool seen_descr = false, seen_order = false, seen_shape = false;
    expect('{');
    while (true) {
      skip();
      if (peek() == '}') {
        ++i_;
        break;
      }
      const std::string key = string();
      expect(':');
      skip();
      if (key == "descr") {
        if (seen_descr) fail(source_, "header: key 'descr' appears twice");
        out.descr = string();
        seen_descr = true;
      } else if (key == "fortran_order") {
        if (seen_order) fail(source_, "header: key 'fortran_order' appears twice");
        out.fortran_order = boolean();
        seen_order = true;
      } else if (key == "shape") {
        if (seen_shape) fail(source_, "header: key 'shape' appears twice");
        out.shape = tuple();
        seen_shape = true;
      } else {
        fail(source_, "header: unexpected key " + quoted_name(key) + " (expected descr, fortran_order, shape)");
      }
      skip();
      if (peek() == ',') ++i_;
    }
    skip();
    if (i_ != s_.size()) fail(source_, "header: text after the closing '}'");
    if (!seen_descr || !seen_order || !seen_shape)
      fail(source_, std::string("header: missing key '") +
                        (!seen_descr   ? "descr"
                         : !seen_order ? "fortran_order"
                                       : "shape") +
                        "'");
    return out;
  }

 private:
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void skip() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  void expect(char c) {
    skip();
    if (peek() != c) fail(source_, std::string("header: expected '") + c + "' at byte " + std::to_string(i_));
    ++i_;
  }
  std::string string() {
    skip();
    const char quote = peek();
    if (quote != '\'' && quote != '"') fail(source_, "header: expected a quoted string at byte " + std::to_string(i_));
    const std::size_t begin = ++i_;
    while (i_ < s_.size() && s_[i_] != quote) ++i_;
    if (i_ >= s_.size()) fail(source_, "header: unterminated string");
    return std::string(s_.substr(begin, i_++ - begin));
  }
  bool boolean() {
    if (s_.substr(i_, 4) == "True") return i_ += 4, true;
    if (s_.substr(i_, 5) == "False") return i_ += 5, false;
    fail(source_, "header: 'fortran_order' must be True or False");
  }
  std::vector<std::uint64_t> tuple() {
    expect('(');
    std::vector<std::uint64_t> dims;
    while (true) {
      skip();
      if (peek() == ')') {
        ++i_;
        return dims;
      }
      if (!std::isdigit(static_cast<unsigned char>(peek())))
        fail(source_, "header: 'shape' must be a tuple of non-negative integers");
      std::uint64_t v = 0;
      while (std::isdigit(static_cast<unsigned char>(peek()))) {
        const std::uint64_t digit = static_cast<std::uint64_t>(s_[i_++] - '0');
        if (v > (std::numeric_limits<std::uint64_t>::max() - digit) / 10)
          fail(source_, "header: a 'shape' dim overflows");
        v = v * 10 + digit;
      }
      dims.push_back(v);
      if (dims.size() > 8) fail(source_, "header: 'shape' has more than 8 dims");
      skip();
      // A Python tuple: dims are separated by commas ("(1 2)" is no tuple; "(1,)" and "(1, 2,)" are).
      if (peek() == ',')
        ++i_;
      else if (peek() != ')')
        fail(source_, "header: 'shape' must be a tuple of non-negative integers separated by commas");
    }
  }

  std::string_view s_;
  std::string source_;
  std::size_t i_ = 0;
};

struct ElementType {
  Dtype dtype;
  bool swap;  // stored big-endian
};

ElementType element_type(const std::string& descr, std::string_view source) {
  if (descr.size() < 3) fail(source, "header: 'descr' " + quoted_name(descr) + " is not a numpy scalar type");
  const char order = descr[0];
  const std::string kind = descr.substr(1);
  if (order != '<' && order != '>' && order != '|' && order != '=')
    fail(source, "header: 'descr' " + quoted_name(descr) + " has no byte order (<, >, | or =)");
  static const std::array<std::pair<std::string_view, Dtype>, 12> kKinds{{
      {"f2", Dtype::F16},
      {"f4", Dtype::F32},
      {"f8", Dtype::F64},
      {"u1", Dtype::U8},
      {"i1", Dtype::I8},
      {"b1", Dtype::BOOL},
      {"u2", Dtype::U16},
      {"i2", Dtype::I16},
      {"u4", Dtype::U32},
      {"i4", Dtype::I32},
      {"u8", Dtype::U64},
      {"i8", Dtype::I64},
  }};
  for (const auto& entry : kKinds)
    if (kind == entry.first) return {entry.second, order == '>' && dtype_size(entry.second) > 1};
  fail(source, "header: element type " + quoted_name(descr) +
                   " is not supported (float16, float32, float64, integers or bool; a bf16 capture is saved as "
                   "uint16 and read with --dtype bf16)");
}

std::vector<std::uint8_t> read_file(const std::filesystem::path& path) {
  const std::string source = path.string();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    fail(source, ec ? "cannot open: " + ec.message() : std::string("not a regular file"));
  try {
    return read_file_capped_bytes(source, kTraceFile);
  } catch (const FileReadError& e) {
    throw TraceError(e.what());
  }
}

// ---- ZIP (PKWARE APPNOTE 6.3): the central directory, ZIP64 records, stored or deflate. ----

constexpr std::uint32_t kEndOfCentralDirectory = 0x06054b50;
constexpr std::uint32_t kZip64EndLocator = 0x07064b50;
constexpr std::uint32_t kZip64End = 0x06064b50;
constexpr std::uint32_t kCentralHeader = 0x02014b50;
constexpr std::uint32_t kLocalHeader = 0x04034b50;

struct Member {
  std::string name;
  std::uint16_t method = 0;
  std::uint32_t crc = 0;
  std::uint64_t compressed = 0, uncompressed = 0, local_offset = 0;
};

std::vector<std::uint8_t> inflate_member(std::span<const std::uint8_t> data, std::uint64_t expected,
                                         const std::string& where) {
  // Refuse absurd declared sizes before allocating: deflate cannot expand more than ~1032x.
  if (expected / 1032 > data.size() + 1) fail(where, "declared size " + std::to_string(expected) + " is impossible");
  // The buffer grows as the data inflates, doubling up to the declared size: a member that
  // declares a gigabyte and inflates to a megabyte costs a few megabytes, not the gigabyte.
  std::vector<std::uint8_t> out;
  std::uint64_t produced = 0;
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK) fail(where, "cannot start inflating");
  z.next_in = const_cast<Bytef*>(data.data());
  std::uint64_t in_left = data.size();
  int rc = Z_OK;
  while (rc == Z_OK) {
    // Full at the declared size, inflate still runs (with no room) to read the stream's end;
    // a stream that has more is refused below (no progress, or not at its end).
    if (produced == out.size() && out.size() < expected)
      out.resize(static_cast<std::size_t>(
          std::min<std::uint64_t>(expected, std::max<std::uint64_t>(std::uint64_t{1} << 20, 2 * out.size()))));
    const uInt in_chunk = static_cast<uInt>(std::min<std::uint64_t>(in_left, 1u << 30));
    const uInt out_chunk = static_cast<uInt>(std::min<std::uint64_t>(out.size() - produced, 1u << 30));
    z.next_out = out.data() + produced;
    z.avail_in = in_chunk;
    z.avail_out = out_chunk;
    rc = inflate(&z, Z_NO_FLUSH);
    in_left -= in_chunk - z.avail_in;
    produced += out_chunk - z.avail_out;
    if (rc == Z_OK && in_chunk == z.avail_in && out_chunk == z.avail_out) rc = Z_BUF_ERROR;  // no progress
  }
  inflateEnd(&z);
  const std::uint64_t out_left = expected - produced;
  if (rc != Z_STREAM_END || out_left != 0)
    fail(where, "deflate data is corrupt or does not inflate to the declared " + std::to_string(expected) + " bytes");
  return out;
}

std::vector<Member> central_directory(std::span<const std::uint8_t> b, std::string_view source) {
  if (b.size() < 22) fail(source, "not a ZIP archive (.npz): shorter than an end-of-directory record");
  // The end record sits in the last 22 + 65535 (comment) bytes.
  std::size_t end = b.size() - 22;
  const std::size_t stop = b.size() > 22 + 65535 ? b.size() - 22 - 65535 : 0;
  while (little(b, end, 4) != kEndOfCentralDirectory) {
    if (end == stop) fail(source, "not a ZIP archive (.npz): no end-of-central-directory record");
    --end;
  }
  std::uint64_t count = little(b, end + 10, 2);
  std::uint64_t dir_size = little(b, end + 12, 4);
  std::uint64_t dir_offset = little(b, end + 16, 4);
  if (count == 0xffff || dir_size == 0xffffffff || dir_offset == 0xffffffff) {
    if (end < 20 || little(b, end - 20, 4) != kZip64EndLocator)
      fail(source, "ZIP: the end record asks for ZIP64 but there is no ZIP64 locator");
    const std::uint64_t z64 = little(b, end - 20 + 8, 8);
    if (z64 > b.size() - 56 || b.size() < 56 || little(b, z64, 4) != kZip64End)
      fail(source, "ZIP: the ZIP64 end record is missing or outside the file");
    count = little(b, z64 + 32, 8);
    dir_size = little(b, z64 + 40, 8);
    dir_offset = little(b, z64 + 48, 8);
  }
  if (dir_offset > b.size() || dir_size > b.size() - dir_offset)
    fail(source, "ZIP: the central directory lies outside the file");
  std::vector<Member> members;
  std::size_t at = dir_offset;
  const std::size_t dir_end = dir_offset + dir_size;
  for (std::uint64_t i = 0; i < count; ++i) {
    if (at + 46 > dir_end || little(b, at, 4) != kCentralHeader)
      fail(source, "ZIP: central directory entry " + std::to_string(i) + " is malformed");
    Member m;
    const std::uint16_t flags = static_cast<std::uint16_t>(little(b, at + 8, 2));
    m.method = static_cast<std::uint16_t>(little(b, at + 10, 2));
    m.crc = static_cast<std::uint32_t>(little(b, at + 16, 4));
    m.compressed = little(b, at + 20, 4);
    m.uncompressed = little(b, at + 24, 4);
    const std::size_t name_len = little(b, at + 28, 2), extra_len = little(b, at + 30, 2),
                      comment_len = little(b, at + 32, 2);
    m.local_offset = little(b, at + 42, 4);
    if (at + 46 + name_len + extra_len + comment_len > dir_end)
      fail(source, "ZIP: central directory entry " + std::to_string(i) + " runs past the directory");
    m.name.assign(reinterpret_cast<const char*>(b.data() + at + 46), name_len);
    if (flags & 1u) fail(source, "ZIP member " + quoted_name(m.name) + " is encrypted");
    // ZIP64 extended information: the 0xffffffff fields, in order, as 8-byte values.
    std::size_t e = at + 46 + name_len;
    const std::size_t e_end = e + extra_len;
    while (e + 4 <= e_end) {
      const std::uint16_t id = static_cast<std::uint16_t>(little(b, e, 2));
      const std::size_t len = little(b, e + 2, 2);
      if (e + 4 + len > e_end)
        fail(source, "ZIP member " + quoted_name(m.name) + ": an extra field runs past its entry");
      if (id == 0x0001) {
        std::size_t f = e + 4;
        for (std::uint64_t* field : {&m.uncompressed, &m.compressed, &m.local_offset}) {
          if (*field != 0xffffffff) continue;
          if (f + 8 > e + 4 + len) fail(source, "ZIP member " + quoted_name(m.name) + ": ZIP64 field too short");
          *field = little(b, f, 8);
          f += 8;
        }
      }
      e += 4 + len;
    }
    members.push_back(std::move(m));
    at += 46 + name_len + extra_len + comment_len;
  }
  return members;
}

}  // namespace

SafeTensor parse_npy(std::span<const std::uint8_t> b, std::string_view name, std::string_view source_name) {
  const std::string source(source_name);
  static constexpr std::uint8_t kMagic[] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (b.size() < 10 || !std::equal(std::begin(kMagic), std::end(kMagic), b.begin()))
    fail(source, "not an .npy file (no \\x93NUMPY magic)");
  const int major = b[6];
  if (major < 1 || major > 3)
    fail(source, "unsupported .npy format version " + std::to_string(major) + "." + std::to_string(b[7]));
  const int length_width = major == 1 ? 2 : 4;
  if (b.size() < 8u + length_width) fail(source, "truncated .npy header");
  const std::uint64_t header_len = little(b, 8, length_width);
  const std::size_t data_begin = 8 + length_width;
  if (header_len > b.size() - data_begin) fail(source, "the .npy header runs past the end of the file");
  const std::string_view text(reinterpret_cast<const char*>(b.data() + data_begin), header_len);
  const HeaderDict::Parsed h = HeaderDict(text, source).parse();
  if (h.fortran_order)
    fail(source, "array is stored in Fortran order; save it in C order (np.ascontiguousarray) and retry");
  const ElementType type = element_type(h.descr, source);
  SafeTensor t;
  t.name = std::string(name);
  t.dtype = type.dtype;
  t.shape = h.shape;
  const std::uint64_t count = t.element_count();
  const std::size_t size = dtype_size(t.dtype);
  const std::uint64_t data = b.size() - data_begin - header_len;
  if (count == UINT64_MAX || count > data / size || count * size != data)
    fail(source, "shape " + shape_string(t.shape) + " of " + quoted_name(h.descr) + " needs " +
                     (count == UINT64_MAX || count > data / size ? std::string("more than the file holds")
                                                                 : std::to_string(count * size) + " bytes") +
                     ", the file holds " + std::to_string(data) + " bytes of data");
  const std::uint8_t* p = b.data() + data_begin + header_len;
  t.bytes.assign(p, p + data);
  if (type.swap)
    for (std::size_t i = 0; i < t.bytes.size(); i += size)
      std::reverse(t.bytes.begin() + i, t.bytes.begin() + i + size);
  return t;
}

SafeTensor read_npy(const std::filesystem::path& path) {
  const std::vector<std::uint8_t> bytes = read_file(path);
  return parse_npy(bytes, path.stem().string(), path.string());
}

Safetensors parse_npz(std::span<const std::uint8_t> b, std::string_view source_name) {
  const std::string source(source_name);
  Safetensors out;
  std::set<std::string> names;  // Safetensors::find is linear: a set keeps many members linear
  for (const Member& m : central_directory(b, source)) {
    const std::string where = source + ": member " + quoted_name(m.name);
    if (!m.name.ends_with(".npy")) fail(source, "member " + quoted_name(m.name) + " is not an .npy array");
    const std::string name = m.name.substr(0, m.name.size() - 4);
    if (name.empty()) fail(source, "member " + quoted_name(m.name) + " names no array (numpy writes NAME.npy)");
    if (!names.insert(name).second) fail(source, "member " + quoted_name(m.name) + " appears twice");
    const std::uint64_t at = m.local_offset;
    if (at > b.size() || b.size() - at < 30 || little(b, at, 4) != kLocalHeader)
      fail(where, "its local header is missing or outside the file");
    const std::uint64_t data_at = at + 30 + little(b, at + 26, 2) + little(b, at + 28, 2);
    if (data_at > b.size() || m.compressed > b.size() - data_at) fail(where, "its data runs past the end of the file");
    const std::span<const std::uint8_t> data = b.subspan(data_at, m.compressed);
    std::vector<std::uint8_t> inflated;
    std::span<const std::uint8_t> npy;
    if (m.method == 0) {
      if (m.compressed != m.uncompressed) fail(where, "stored, but its two sizes differ");
      npy = data;
    } else if (m.method == 8) {
      inflated = inflate_member(data, m.uncompressed, where);
      npy = inflated;
    } else {
      fail(where, "compression method " + std::to_string(m.method) + " is not supported (stored or deflate)");
    }
    uLong crc = crc32(0L, Z_NULL, 0);
    for (std::size_t done = 0; done < npy.size();) {
      const uInt chunk = static_cast<uInt>(std::min<std::size_t>(npy.size() - done, 1u << 30));
      crc = crc32(crc, npy.data() + done, chunk);
      done += chunk;
    }
    if (crc != m.crc) fail(where, "CRC-32 does not match: the archive is corrupt");
    out.tensors.push_back(parse_npy(npy, name, where));
  }
  if (out.tensors.empty()) fail(source, "the archive holds no arrays");
  return out;
}

Safetensors read_npz(const std::filesystem::path& path) {
  const std::vector<std::uint8_t> bytes = read_file(path);
  return parse_npz(bytes, path.string());
}

}  // namespace fb
