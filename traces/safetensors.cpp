// traces/safetensors.cpp: the strict safetensors reader and the writer (contract in
// safetensors.hpp). The header is checked in two passes over the same bytes: a SAX pass
// that refuses duplicate keys, deep nesting and long arrays before anything is built
// (nlohmann's DOM would silently keep the last duplicate), then a DOM pass whose values
// are checked field by field.
#include "traces/safetensors.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <system_error>

#include "formats/file_read.hpp"
#include "formats/json_text.hpp"
#include "formats/text_escape.hpp"
#include "traces/little_endian.hpp"

namespace fb {

namespace {

struct DtypeFacts {
  Dtype dtype;
  std::string_view name;
  std::size_t size;
  bool floating;
};
constexpr std::array<DtypeFacts, 15> kDtypeTable{{
    {Dtype::BF16, "BF16", 2, true},
    {Dtype::F16, "F16", 2, true},
    {Dtype::F32, "F32", 4, true},
    {Dtype::F64, "F64", 8, true},
    {Dtype::F8_E4M3, "F8_E4M3", 1, true},
    {Dtype::F8_E5M2, "F8_E5M2", 1, true},
    {Dtype::BOOL, "BOOL", 1, false},
    {Dtype::U8, "U8", 1, false},
    {Dtype::I8, "I8", 1, false},
    {Dtype::I16, "I16", 2, false},
    {Dtype::U16, "U16", 2, false},
    {Dtype::I32, "I32", 4, false},
    {Dtype::U32, "U32", 4, false},
    {Dtype::I64, "I64", 8, false},
    {Dtype::U64, "U64", 8, false},
}};

const DtypeFacts& facts(Dtype dtype) {
  for (const DtypeFacts& f : kDtypeTable)
    if (f.dtype == dtype) return f;
  throw std::logic_error("dtype missing from the dtype table");
}

std::string all_dtype_names() {
  std::string out;
  for (const DtypeFacts& f : kDtypeTable) {
    if (!out.empty()) out += ", ";
    out += f.name;
  }
  return out;
}

[[noreturn]] void fail(std::string_view source, const std::string& message) {
  throw TraceError(std::string(source) + ": " + message);
}

std::string tensor_field(const std::string& name, std::string_view field) {
  return "tensor " + quoted_name(name) + ": field '" + std::string(field) + "': ";
}

// A JSON value summarised for a message. Small values are shown as JSON; long strings are
// cut and big containers only counted, so a message never copies much of the input.
std::string describe_json(const nlohmann::json& value) {
  const std::string type = value.type_name();
  if (value.is_string()) return type + " " + quoted_name(value.get_ref<const std::string&>());
  bool small = !value.is_structured();
  if (value.is_structured() && value.size() <= 4) {
    small = true;
    for (const auto& item : value) {
      small = small && !item.is_structured() && (!item.is_string() || item.get_ref<const std::string&>().size() <= 16);
    }
    for (const auto& [key, item] : value.items()) small = small && key.size() <= 16;
  }
  if (!small) return type + " of " + std::to_string(value.size()) + (value.is_object() ? " keys" : " elements");
  return type + " " + value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The structure limits below are far above anything a real header holds (a shape has a
// handful of dims, a header three levels) and keep the DOM proportional to the input.
constexpr std::size_t kMaxDepth = 3;
constexpr std::size_t kMaxArrayElements = 64;

// First pass: refuses what the DOM cannot show (duplicate keys) or should not build.
class HeaderShapeCheck {
 public:
  using json = nlohmann::json;
  std::string error;

  bool null() { return value(); }
  bool boolean(bool) { return value(); }
  bool number_integer(json::number_integer_t) { return value(); }
  bool number_unsigned(json::number_unsigned_t) { return value(); }
  bool number_float(json::number_float_t, const json::string_t&) { return value(); }
  bool string(json::string_t&) { return value(); }
  bool binary(json::binary_t&) { return value(); }
  bool start_object(std::size_t) {
    if (!value()) return false;
    return open(true);
  }
  bool key(json::string_t& name) {
    Container& top = containers_.back();
    if (!top.keys.insert(name).second) {
      error = where_key() + "duplicate key " + quoted_name(name) + " (JSON keys must be unique)";
      return false;
    }
    top.current_key = name;
    return true;
  }
  bool end_object() { return close(); }
  bool start_array(std::size_t) {
    if (!value()) return false;
    return open(false);
  }
  bool end_array() { return close(); }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& ex) {
    std::string what = json_error_text(ex);
    if (what.size() > 160) {  // keep the line short, cut between characters
      std::size_t cut = 157;
      while (cut > 0 && (static_cast<unsigned char>(what[cut]) & 0xC0) == 0x80) --cut;
      what = what.substr(0, cut) + "...";
    }
    error = "header is not valid JSON (byte " + std::to_string(position) + " of the header): " + what;
    return false;
  }

 private:
  struct Container {
    bool is_object;
    std::set<std::string> keys;
    std::string current_key;
    std::size_t elements = 0;
  };
  std::vector<Container> containers_;

  // Called for every value, including containers, before they open.
  bool value() {
    if (containers_.empty()) return true;
    Container& top = containers_.back();
    if (!top.is_object && ++top.elements > kMaxArrayElements) {
      error = where() + "array longer than " + std::to_string(kMaxArrayElements) + " elements";
      return false;
    }
    return true;
  }
  bool open(bool is_object) {
    if (containers_.empty() && !is_object) {
      error = "header is not a JSON object (it must map tensor names to entries)";
      return false;
    }
    if (containers_.size() >= kMaxDepth) {
      error = where() + "nested deeper than a safetensors header can be";
      return false;
    }
    containers_.push_back(Container{is_object, {}, {}, 0});
    return true;
  }
  bool close() {
    containers_.pop_back();
    return true;
  }
  // "tensor 'q': field 'shape': ": the keys leading into the innermost `levels` containers.
  std::string where(std::size_t levels) const {
    levels = std::min(levels, containers_.size());
    if (levels == 0 || containers_[0].current_key.empty()) return "";
    std::string out = containers_[0].current_key == "__metadata__"
                          ? std::string("__metadata__: ")
                          : "tensor " + quoted_name(containers_[0].current_key) + ": ";
    if (levels >= 2 && containers_[1].is_object && !containers_[1].current_key.empty())
      out += "field " + quoted_name(containers_[1].current_key) + ": ";
    return out;
  }
  // The place of a value being parsed, and of a key being parsed (its own level excluded).
  std::string where() const { return where(containers_.size()); }
  std::string where_key() const { return where(containers_.size() - 1); }
};

// A JSON number that is a non-negative integer (not 2.0: the reference reader refuses it).
std::optional<std::uint64_t> as_count(const nlohmann::json& value) {
  if (value.is_number_unsigned()) return value.get<std::uint64_t>();
  if (value.is_number_integer() && value.get<std::int64_t>() >= 0)
    return static_cast<std::uint64_t>(value.get<std::int64_t>());
  return std::nullopt;
}

struct Entry {
  std::string name;
  Dtype dtype;
  std::vector<std::uint64_t> shape;
  std::uint64_t begin, end;
};

Entry check_entry(std::string_view source, const std::string& name, const nlohmann::json& entry,
                  std::uint64_t data_size) {
  if (!entry.is_object())
    fail(source, "tensor " + quoted_name(name) + ": expected an object with dtype, shape and data_offsets, got " +
                     describe_json(entry));
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!entry.contains(field)) fail(source, "tensor " + quoted_name(name) + ": missing field '" + field + "'");

  Entry out{name, Dtype::F32, {}, 0, 0};
  const nlohmann::json& dtype = entry.at("dtype");
  if (!dtype.is_string())
    fail(source, tensor_field(name, "dtype") + "expected a string such as \"BF16\", got " + describe_json(dtype));
  const auto parsed = parse_dtype(dtype.get_ref<const std::string&>());
  if (!parsed)
    fail(source, tensor_field(name, "dtype") + "unknown dtype " + quoted_name(dtype.get_ref<const std::string&>()) +
                     "; expected one of " + all_dtype_names());
  out.dtype = *parsed;

  const nlohmann::json& shape = entry.at("shape");
  if (!shape.is_array())
    fail(source,
         tensor_field(name, "shape") + "expected an array of non-negative integers, got " + describe_json(shape));
  std::uint64_t count = 1;
  bool overflow = false;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    const auto dim = as_count(shape[i]);
    if (!dim)
      fail(source, tensor_field(name, "shape") + "entry " + std::to_string(i) +
                       " must be a non-negative integer, got " + describe_json(shape[i]));
    out.shape.push_back(*dim);
    overflow = overflow || __builtin_mul_overflow(count, *dim, &count);
  }
  std::uint64_t byte_count = 0;
  overflow = overflow || __builtin_mul_overflow(count, dtype_size(out.dtype), &byte_count);
  // A zero dim makes any product zero, so an overflow elsewhere does not matter then.
  const bool empty = std::find(out.shape.begin(), out.shape.end(), 0u) != out.shape.end();
  if (overflow && !empty)
    fail(source, tensor_field(name, "shape") + shape_string(out.shape) + " of " + std::string(dtype_name(out.dtype)) +
                     " overflows a 64-bit byte count");
  if (empty) byte_count = 0;

  const nlohmann::json& offsets = entry.at("data_offsets");
  const auto begin = offsets.is_array() && offsets.size() == 2 ? as_count(offsets[0]) : std::nullopt;
  const auto end = offsets.is_array() && offsets.size() == 2 ? as_count(offsets[1]) : std::nullopt;
  if (!begin || !end)
    fail(source, tensor_field(name, "data_offsets") + "expected [begin, end] with two non-negative integers, got " +
                     describe_json(offsets));
  out.begin = *begin;
  out.end = *end;
  const std::string span = "[" + std::to_string(out.begin) + ", " + std::to_string(out.end) + "]";
  if (out.begin > out.end) fail(source, tensor_field(name, "data_offsets") + span + ": begin is greater than end");
  if (out.end > data_size)
    fail(source, tensor_field(name, "data_offsets") + span + " runs past the end of the data section (" +
                     std::to_string(data_size) + " bytes)");
  if (out.end - out.begin != byte_count)
    fail(source, tensor_field(name, "data_offsets") + span + " spans " + std::to_string(out.end - out.begin) +
                     " bytes but shape " + shape_string(out.shape) + " of " + std::string(dtype_name(out.dtype)) +
                     " needs " + std::to_string(byte_count));
  return out;
}

}  // namespace

std::string_view dtype_name(Dtype dtype) { return facts(dtype).name; }
std::size_t dtype_size(Dtype dtype) { return facts(dtype).size; }
bool dtype_is_floating(Dtype dtype) { return facts(dtype).floating; }

std::optional<Dtype> parse_dtype(std::string_view name) {
  for (const DtypeFacts& f : kDtypeTable)
    if (f.name == name) return f.dtype;
  return std::nullopt;
}

std::optional<Format> dtype_format(Dtype dtype) {
  switch (dtype) {
    case Dtype::BF16:
      return formats::bf16;
    case Dtype::F16:
      return formats::fp16;
    case Dtype::F32:
      return formats::fp32;
    case Dtype::F8_E4M3:
      return formats::e4m3;
    case Dtype::F8_E5M2:
      return formats::e5m2;
    default:
      return std::nullopt;
  }
}

std::optional<Dtype> dtype_of_format(const Format& format) {
  for (const DtypeFacts& f : kDtypeTable) {
    const auto mapped = dtype_format(f.dtype);
    if (mapped && *mapped == format) return f.dtype;
  }
  return std::nullopt;
}

std::uint64_t SafeTensor::element_count() const {
  // A zero dim empties the tensor whatever the other dims (and whatever their product).
  if (std::find(shape.begin(), shape.end(), 0u) != shape.end()) return 0;
  std::uint64_t count = 1;
  for (std::uint64_t dim : shape)
    if (__builtin_mul_overflow(count, dim, &count)) return UINT64_MAX;
  return count;
}

std::uint64_t SafeTensor::element_bits(std::size_t i) const {
  const std::size_t width = dtype_size(dtype);
  return load_little_endian(bytes.data() + i * width, width);
}

void SafeTensor::append_element_bits(std::uint64_t bits) { append_little_endian(bytes, bits, dtype_size(dtype)); }

const SafeTensor* Safetensors::find(std::string_view name) const {
  for (const SafeTensor& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

std::string quoted_name(std::string_view name) {
  constexpr std::size_t kShown = 64;
  std::string out = "'";
  for (std::size_t i = 0; i < name.size() && i < kShown; ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += escaped_byte(c);
    }
  }
  if (name.size() > kShown) out += "...";
  return out + "'";
}

std::string shape_string(const std::vector<std::uint64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

namespace {

// The header length from the 8-byte prefix, checked against the file's size.
std::uint64_t header_length(std::span<const std::uint8_t> prefix, std::uint64_t file_size, std::string_view source) {
  if (file_size < 8)
    fail(source, "file is " + std::to_string(file_size) + " bytes, too short for the 8-byte header length");
  const std::uint64_t header_size = load_little_endian(prefix.data(), 8);
  if (header_size > kMaxHeaderBytes)
    fail(source, "header length " + std::to_string(header_size) + " is absurd (limit " +
                     std::to_string(kMaxHeaderBytes) + " bytes); this is not a safetensors file");
  if (header_size > file_size - 8)
    fail(source, "header length " + std::to_string(header_size) + " runs past the end of the file (" +
                     std::to_string(file_size) + " bytes)");
  return header_size;
}

struct Layout {
  std::map<std::string, std::string> metadata;
  std::vector<Entry> entries;  // in data-offset order, tiling the data section exactly
};

// Everything the header says, checked against a data section of `data_size` bytes, before
// any tensor data is read.
Layout parse_header(std::span<const std::uint8_t> header_bytes, std::uint64_t data_size, std::string_view source) {
  const auto* header_begin = reinterpret_cast<const char*>(header_bytes.data());
  const auto* header_end = header_begin + header_bytes.size();
  // The format's own reader takes a header that starts with '{' and pads it with spaces
  // (0x20) only. A BOM or leading whitespace is refused there (other first bytes are no JSON
  // object, which the parse below says), and a NUL byte ends the JSON parser's input early,
  // so trailing NUL padding would otherwise read as a valid header.
  if (!header_bytes.empty() && (header_bytes.front() == 0xEF || std::isspace(header_bytes.front())))
    fail(source, "header must start with '{', got byte " + escaped_byte(header_bytes.front()) +
                     (header_bytes.front() == 0xEF ? " (a UTF-8 byte order mark?)" : ""));
  if (const auto nul = std::find(header_bytes.begin(), header_bytes.end(), std::uint8_t{0}); nul != header_bytes.end())
    fail(source, "header byte " + std::to_string(nul - header_bytes.begin()) +
                     " is NUL; a safetensors header is padded with spaces (0x20) only");
  HeaderShapeCheck check;
  if (!nlohmann::json::sax_parse(header_begin, header_end, &check)) fail(source, check.error);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(header_begin, header_end);
  } catch (const nlohmann::json::exception& e) {
    fail(source, std::string("header is not valid JSON: ") + e.what());  // the SAX pass saw it first
  }

  if (!header.is_object())
    fail(source, "header is not a JSON object (it must map tensor names to entries), got " + describe_json(header));
  Layout out;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object())
        fail(source, "__metadata__: expected an object of string values, got " + describe_json(entry));
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string())
          fail(source,
               "__metadata__: key " + quoted_name(key) + ": expected a string value, got " + describe_json(value));
        out.metadata.emplace(key, value.get<std::string>());
      }
      continue;
    }
    out.entries.push_back(check_entry(source, name, entry, data_size));
  }

  // Full, non-overlapping coverage of the data section, as the reference reader demands.
  std::vector<Entry>& entries = out.entries;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : (a.end != b.end ? a.end < b.end : a.name < b.name);
  });
  std::uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : entries) {
    const std::string span = "[" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
    if (e.begin < covered)
      fail(source, tensor_field(e.name, "data_offsets") + span + " overlaps tensor " + quoted_name(previous->name) +
                       " [" + std::to_string(previous->begin) + ", " + std::to_string(previous->end) + "]");
    if (e.begin > covered)
      fail(source,
           tensor_field(e.name, "data_offsets") + span + " leaves a gap after " +
               (previous ? "tensor " + quoted_name(previous->name) + ", which ends at " + std::to_string(covered)
                         : std::string("the start of the data section")) +
               "; safetensors requires tensors to cover the data section without gaps");
    covered = e.end;
    previous = &e;
  }
  if (covered != data_size)
    fail(source, "data section is " + std::to_string(data_size) + " bytes but the tensors cover only " +
                     std::to_string(covered) + "; safetensors requires exact coverage (truncated or padded file?)");
  return out;
}

SafeTensor tensor_of(Entry& e) {
  SafeTensor t;
  t.name = std::move(e.name);
  t.dtype = e.dtype;
  t.shape = std::move(e.shape);
  return t;
}

}  // namespace

Safetensors parse_safetensors(std::span<const std::uint8_t> bytes, std::string_view source) {
  const std::uint64_t header_size = header_length(bytes, bytes.size(), source);
  const std::span<const std::uint8_t> data = bytes.subspan(8 + header_size);
  Layout layout = parse_header(bytes.subspan(8, header_size), data.size(), source);
  Safetensors out;
  out.metadata = std::move(layout.metadata);
  out.tensors.reserve(layout.entries.size());
  for (Entry& e : layout.entries) {
    SafeTensor t = tensor_of(e);
    t.bytes.assign(data.begin() + static_cast<std::ptrdiff_t>(e.begin),
                   data.begin() + static_cast<std::ptrdiff_t>(e.end));
    out.tensors.push_back(std::move(t));
  }
  return out;
}

// Reads the header first, so a bad header is reported without reading the data, and then
// each tensor straight into its own buffer.
Safetensors read_safetensors(const std::filesystem::path& path) {
  const std::string source = path.string();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    fail(source, ec ? "cannot open: " + ec.message() : std::string("not a regular file"));
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) fail(source, "cannot read its size: " + ec.message());
  try {
    check_file_size_capped(source, size, kTraceFile);  // each tensor is read into its own buffer
  } catch (const FileReadError& e) {
    throw TraceError(e.what());
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(source, "cannot open for reading");
  auto read_exactly = [&](std::uint8_t* into, std::uint64_t count) {
    in.read(reinterpret_cast<char*>(into), static_cast<std::streamsize>(count));
    if (static_cast<std::uint64_t>(in.gcount()) != count) fail(source, "read failed (file changed while reading?)");
  };
  std::array<std::uint8_t, 8> prefix{};
  if (size >= 8) read_exactly(prefix.data(), 8);
  const std::uint64_t header_size = header_length(prefix, size, source);
  std::vector<std::uint8_t> header(header_size);
  read_exactly(header.data(), header_size);
  Layout layout = parse_header(header, size - 8 - header_size, source);
  Safetensors out;
  out.metadata = std::move(layout.metadata);
  out.tensors.reserve(layout.entries.size());
  for (Entry& e : layout.entries) {  // in offset order, contiguous: a sequential read
    SafeTensor t = tensor_of(e);
    t.bytes.resize(e.end - e.begin);
    read_exactly(t.bytes.data(), t.bytes.size());
    out.tensors.push_back(std::move(t));
  }
  return out;
}

std::vector<std::uint8_t> serialize_safetensors(const Safetensors& file, std::string_view target) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!file.metadata.empty()) header["__metadata__"] = file.metadata;
  std::set<std::string_view> names;
  std::uint64_t offset = 0;
  for (const SafeTensor& t : file.tensors) {
    if (t.name == "__metadata__") fail(target, "tensor name '__metadata__' is reserved for the metadata map");
    if (!names.insert(t.name).second) fail(target, "tensor " + quoted_name(t.name) + " appears twice");
    const std::uint64_t count = t.element_count();
    if (count == UINT64_MAX || t.bytes.size() / dtype_size(t.dtype) != count ||
        t.bytes.size() % dtype_size(t.dtype) != 0)
      fail(target, "tensor " + quoted_name(t.name) + ": holds " + std::to_string(t.bytes.size()) + " bytes but shape " +
                       shape_string(t.shape) + " of " + std::string(dtype_name(t.dtype)) + " needs " +
                       std::to_string(count) + " elements");
    nlohmann::ordered_json entry;
    entry["dtype"] = dtype_name(t.dtype);
    entry["shape"] = t.shape;
    entry["data_offsets"] = {offset, offset + t.bytes.size()};
    // Appended, not header[name]: ordered_json's lookup is linear, so inserting by key made a
    // file of many tensors quadratic. The names are unique (checked above).
    header.get_ref<nlohmann::ordered_json::object_t&>().emplace_back(t.name, std::move(entry));
    offset += t.bytes.size();
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception&) {
    fail(target, "a tensor name or metadata string is not valid UTF-8");
  }
  text.append((8 - text.size() % 8) % 8, ' ');

  std::vector<std::uint8_t> out;
  out.reserve(8 + text.size() + offset);
  append_little_endian(out, text.size(), 8);
  out.insert(out.end(), text.begin(), text.end());
  for (const SafeTensor& t : file.tensors) out.insert(out.end(), t.bytes.begin(), t.bytes.end());
  return out;
}

void write_safetensors(const std::filesystem::path& path, const Safetensors& file) {
  const std::string target = path.string();
  const std::vector<std::uint8_t> bytes = serialize_safetensors(file, target);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail(target, "cannot open for writing");
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) fail(target, "write failed");
}

}  // namespace fb
