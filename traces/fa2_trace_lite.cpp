// traces/fa2_trace_lite.cpp: a dependency-free implementation of traces/fa2_trace.hpp's *_lite
// functions, what fb-fa2 uses in the standalone gpu/ build on a device machine that lacks
// nlohmann_json (the project build uses fa2_trace.cpp and fb_traces instead; the tests check
// this writer's output with fb_traces).
//
// Contract: writes the safetensors layout (u64 LE header length, JSON header with
// "__metadata__" and per-tensor dtype/shape/data_offsets, raw LE data) and reads the
// subset fb-fa2 needs: BF16 tensors q, k, v, do and a flat string metadata map. Any
// malformed header throws std::runtime_error naming the file and what was wrong.
#include <cctype>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "formats/file_read.hpp"
#include "traces/fa2_trace.hpp"
#include "traces/little_endian.hpp"

namespace fb::gpu {
namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// A minimal JSON reader for safetensors headers: objects, arrays, strings, integers.
struct Json {
  enum Kind { kObject, kArray, kString, kNumber } kind = kString;
  // Keys and values of an object in file order, as two vectors: a std::pair of the
  // still-incomplete Json inside a vector member is undefined, and clang refuses it.
  std::vector<std::string> member_keys;
  std::vector<Json> member_values;
  std::vector<Json> items;
  std::string text;
  const Json* get(const std::string& key) const {
    for (std::size_t i = 0; i < member_keys.size(); ++i)
      if (member_keys[i] == key) return &member_values[i];
    return nullptr;
  }
};

class Parser {
 public:
  Parser(const std::string& s, const std::string& path) : s_(s), path_(path) {}
  Json parse() {
    Json j = value();
    skip();
    if (i_ != s_.size()) fail("trailing characters in header");
    return j;
  }

 private:
  [[noreturn]] void fail(const std::string& what) {
    throw std::runtime_error(path_ + ": header: " + what + " at byte " + std::to_string(i_));
  }
  void skip() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t')) ++i_;
  }
  void expect(char c) {
    skip();
    if (i_ >= s_.size() || s_[i_] != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  std::string string() {
    expect('"');
    std::string out;
    while (i_ < s_.size() && s_[i_] != '"') {
      if (s_[i_] == '\\') {
        if (++i_ >= s_.size()) fail("bad escape");
        const char e = s_[i_];
        if (e == 'u') {
          if (i_ + 4 >= s_.size()) fail("bad \\u escape");
          const unsigned code = std::stoul(s_.substr(i_ + 1, 4), nullptr, 16);
          if (code > 0x7f) fail("non-ASCII \\u escape not supported");
          out += static_cast<char>(code);
          i_ += 4;
        } else {
          out += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e == 'b' ? '\b' : e == 'f' ? '\f' : e;
        }
      } else {
        out += s_[i_];
      }
      ++i_;
    }
    if (i_ >= s_.size()) fail("unterminated string");
    ++i_;
    return out;
  }
  Json value() {
    skip();
    if (i_ >= s_.size()) fail("unexpected end");
    Json j;
    if (s_[i_] == '{') {
      j.kind = Json::kObject;
      ++i_;
      skip();
      if (i_ < s_.size() && s_[i_] == '}') return ++i_, j;
      while (true) {
        std::string key = string();
        expect(':');
        j.member_values.push_back(value());
        j.member_keys.push_back(key);
        skip();
        if (i_ < s_.size() && s_[i_] == ',') {
          ++i_;
          continue;
        }
        expect('}');
        return j;
      }
    }
    if (s_[i_] == '[') {
      j.kind = Json::kArray;
      ++i_;
      skip();
      if (i_ < s_.size() && s_[i_] == ']') return ++i_, j;
      while (true) {
        j.items.push_back(value());
        skip();
        if (i_ < s_.size() && s_[i_] == ',') {
          ++i_;
          continue;
        }
        expect(']');
        return j;
      }
    }
    if (s_[i_] == '"') {
      j.kind = Json::kString;
      j.text = string();
      return j;
    }
    j.kind = Json::kNumber;
    const std::size_t start = i_;
    while (i_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[i_])) || s_[i_] == '-')) ++i_;
    if (i_ == start) fail("unsupported value");
    j.text = s_.substr(start, i_ - start);
    return j;
  }
  const std::string& s_;
  const std::string& path_;
  std::size_t i_ = 0;
};

std::size_t dtype_bytes(const std::string& dtype) {
  if (dtype == "BF16" || dtype == "F16") return 2;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "U8" || dtype == "I8" || dtype == "BOOL" || dtype == "F8_E4M3" || dtype == "F8_E5M2") return 1;
  return 0;
}

}  // namespace

void write_fa2_trace_lite(const std::string& path, const std::vector<Fa2Tensor>& tensors,
                          const std::map<std::string, std::string>& metadata) {
  std::string header = "{\"__metadata__\":{";
  bool first = true;
  for (const auto& [k, v] : metadata) {
    if (!first) header += ',';
    header.append(json_string(k)).append(":").append(json_string(v));
    first = false;
  }
  header += "}";
  std::uint64_t offset = 0;
  for (const Fa2Tensor& t : tensors) {
    std::uint64_t count = 1;
    std::string shape = "[";
    for (std::size_t i = 0; i < t.shape.size(); ++i) {
      if (i) shape += ',';
      shape.append(std::to_string(t.shape[i]));
      count *= t.shape[i];
    }
    shape += "]";
    if (dtype_bytes(t.dtype) == 0 || count * dtype_bytes(t.dtype) != t.bytes.size()) {
      throw std::runtime_error(path + ": tensor " + t.name + ": byte count does not match dtype and shape");
    }
    header.append(",").append(json_string(t.name)).append(":{\"dtype\":").append(json_string(t.dtype));
    header.append(",\"shape\":").append(shape).append(",\"data_offsets\":[").append(std::to_string(offset));
    header.append(",").append(std::to_string(offset + t.bytes.size())).append("]}");
    offset += t.bytes.size();
  }
  header += "}";
  while (header.size() % 8) header += ' ';  // the reference writer pads to 8 bytes
  std::ofstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(path + ": cannot open for writing");
  const std::uint64_t n = header.size();
  char len[8];
  store_little_endian(len, n, 8);
  f.write(len, 8);
  f << header;
  for (const Fa2Tensor& t : tensors)
    f.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
  if (!f) throw std::runtime_error(path + ": write failed");
}

Fa2Inputs read_fa2_inputs_lite(const std::string& path) {
  const std::string data = read_file_capped(path, kTraceFile);  // FileReadError: a runtime_error
  if (data.size() < 8) throw std::runtime_error(path + ": header length: file shorter than 8 bytes");
  const std::uint64_t n = load_little_endian(data.data(), 8);
  if (n > data.size() - 8) throw std::runtime_error(path + ": header length: exceeds the file");
  const std::string header = data.substr(8, n);
  const Json root = Parser(header, path).parse();
  if (root.kind != Json::kObject) throw std::runtime_error(path + ": header: not an object");
  const std::size_t base = 8 + n;
  Fa2Inputs r;
  if (const Json* meta = root.get("__metadata__")) {
    for (std::size_t i = 0; i < meta->member_keys.size(); ++i)
      r.metadata[meta->member_keys[i]] = meta->member_values[i].text;
  }
  auto load = [&](const char* name, std::vector<std::uint16_t>& dst, bool first) {
    const Json* t = root.get(name);
    if (!t) throw std::runtime_error(path + ": " + name + ": missing");
    const Json* dtype = t->get("dtype");
    const Json* shape = t->get("shape");
    const Json* offs = t->get("data_offsets");
    if (!dtype || dtype->text != "BF16") throw std::runtime_error(path + ": " + name + ": dtype is not BF16");
    if (!shape || shape->items.size() != 4) throw std::runtime_error(path + ": " + name + ": shape is not [B,H,N,D]");
    if (!offs || offs->items.size() != 2) throw std::runtime_error(path + ": " + name + ": bad data_offsets");
    std::vector<std::uint64_t> dims;
    std::uint64_t count = 1;
    for (const Json& d : shape->items) {
      dims.push_back(std::stoull(d.text));
      count *= dims.back();
    }
    if (first)
      r.shape = dims;
    else if (dims != r.shape)
      throw std::runtime_error(path + ": " + name + ": shape differs from q");
    const std::uint64_t begin = std::stoull(offs->items[0].text), end = std::stoull(offs->items[1].text);
    if (end < begin || end - begin != count * 2 || base + end > data.size()) {
      throw std::runtime_error(path + ": " + name + ": data_offsets do not match the shape or the file");
    }
    dst.resize(count);
    std::memcpy(dst.data(), data.data() + base + begin, count * 2);
  };
  load("q", r.q, true);
  load("k", r.k, false);
  load("v", r.v, false);
  load("do", r.dout, false);
  return r;
}

}  // namespace fb::gpu
