// tests/test_safetensors.cpp: the safetensors container reader and writer.
//
// References are independent of the code under test: random bytes compared after a round
// trip, a file assembled byte by byte here exactly as `safetensors.torch.save_file` lays
// it out (Rust serializer: "__metadata__" first, tensors sorted by dtype descending then
// name, fields dtype/shape/data_offsets, header padded with spaces to a multiple of 8),
// and a table of malformed files with the error text each must produce. data_offsets at the
// exact end of the data section: end == data length is read, end == length + 1 is refused
// with the past-the-end message (an off-by-one there passed every overshoot of 4 bytes).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "traces/safetensors.hpp"
#include "traces/trace.hpp"

namespace {

using Bytes = std::vector<std::uint8_t>;

int test_scale_divisor() {
  const char* s = std::getenv("FLASHBITS_TEST_SCALE");
  return (s != nullptr && std::string(s) == "sanitizer") ? 20 : 1;
}

// Length prefix written out by hand, little-endian, then the header text and the data.
Bytes file_bytes(const std::string& header, const Bytes& data = {}, std::uint64_t declared_length = UINT64_MAX) {
  const std::uint64_t n = declared_length == UINT64_MAX ? header.size() : declared_length;
  Bytes out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::uint8_t>((n >> (8 * i)) & 0xff));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::string error_of(const Bytes& bytes, const char* source = "bad.safetensors") {
  try {
    fb::parse_safetensors(bytes, source);
  } catch (const fb::TraceError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("safetensors_round_trip_every_dtype_random_bits") {
  std::mt19937_64 rng(20261122);
  const int rounds = 200 / test_scale_divisor();
  for (int round = 0; round < rounds; ++round) {
    fb::Safetensors original;
    std::vector<fb::Dtype> order(std::begin(fb::kAllDtypes), std::end(fb::kAllDtypes));
    std::shuffle(order.begin(), order.end(), rng);
    for (fb::Dtype dtype : order) {
      fb::SafeTensor t;
      t.name = "t_" + std::string(fb::dtype_name(dtype)) + "_" + std::to_string(rng() % 1000);
      t.dtype = dtype;
      const int rank = static_cast<int>(rng() % 5);
      for (int d = 0; d < rank; ++d) t.shape.push_back(rng() % 6);  // zero dims included
      const std::uint64_t count = t.element_count();
      t.bytes.resize(count * fb::dtype_size(dtype));
      for (auto& b : t.bytes) b = static_cast<std::uint8_t>(rng());
      original.tensors.push_back(t);
    }
    original.metadata["source"] = "emulated";
    original.metadata["note " + std::to_string(round)] = "caf\xc3\xa9 \"quoted\" \\ back";

    const Bytes bytes = fb::serialize_safetensors(original);
    const std::uint64_t n = [&] {
      std::uint64_t v = 0;
      for (int i = 0; i < 8; ++i) v |= std::uint64_t{bytes[i]} << (8 * i);
      return v;
    }();
    CHECK(n % 8 == 0);  // the data section starts 8-aligned, as Python's writer does
    CHECK(bytes[8] == '{');

    const fb::Safetensors back = fb::parse_safetensors(bytes, "round.safetensors");
    CHECK(back.metadata == original.metadata);
    // Zero-size tensors share an offset with their neighbour, so compare by name.
    REQUIRE(back.tensors.size() == original.tensors.size());
    for (const fb::SafeTensor& t : original.tensors) {
      const fb::SafeTensor* r = back.find(t.name);
      REQUIRE(r != nullptr);
      CHECK(r->dtype == t.dtype);
      CHECK(r->shape == t.shape);
      CHECK(r->bytes == t.bytes);
    }
  }
}

TEST_CASE("safetensors_dtype_table") {
  CHECK(fb::dtype_size(fb::Dtype::BF16) == 2);
  CHECK(fb::dtype_size(fb::Dtype::F8_E5M2) == 1);
  CHECK(fb::dtype_size(fb::Dtype::F64) == 8);
  CHECK(fb::dtype_size(fb::Dtype::U64) == 8);
  CHECK(fb::dtype_size(fb::Dtype::I16) == 2);
  CHECK(std::string(fb::dtype_format(fb::Dtype::BF16)->name) == "bf16");
  CHECK(std::string(fb::dtype_format(fb::Dtype::F16)->name) == "fp16");
  CHECK(std::string(fb::dtype_format(fb::Dtype::F32)->name) == "fp32");
  CHECK(std::string(fb::dtype_format(fb::Dtype::F8_E4M3)->name) == "e4m3");
  CHECK(std::string(fb::dtype_format(fb::Dtype::F8_E5M2)->name) == "e5m2");
  CHECK_FALSE(fb::dtype_format(fb::Dtype::F64).has_value());
  CHECK_FALSE(fb::dtype_format(fb::Dtype::I32).has_value());
  CHECK(fb::parse_dtype("F8_E4M3") == fb::Dtype::F8_E4M3);
  CHECK_FALSE(fb::parse_dtype("f32").has_value());
  CHECK(fb::dtype_of_format(fb::formats::e5m2) == fb::Dtype::F8_E5M2);
  CHECK_FALSE(fb::dtype_of_format(fb::formats::tf32).has_value());
}

TEST_CASE("safetensors_reads_file_laid_out_like_python_save_file") {
  // save_file({"q": bf16 [1,1,2,3], "lse": f32 [1,1,2], "idx": int64 [2]}, f, metadata={"source": "emulated"})
  // Python/Rust order: I64 > F32 > BF16, so idx, lse, q.
  std::string header = R"({"__metadata__":{"source":"emulated"},)"
                       R"("idx":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},)"
                       R"("lse":{"dtype":"F32","shape":[1,1,2],"data_offsets":[16,24]},)"
                       R"("q":{"dtype":"BF16","shape":[1,1,2,3],"data_offsets":[24,36]}})";
  while (header.size() % 8 != 0) header += ' ';
  REQUIRE(header.size() == 224);  // 217 characters of JSON + 7 spaces
  const Bytes data = {            // idx: 7, -2 as little-endian int64
                      0x07, 0, 0, 0, 0, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                      // lse: 0.1f = 0x3dcccccd, -1.5f = 0xbfc00000
                      0xcd, 0xcc, 0xcc, 0x3d, 0x00, 0x00, 0xc0, 0xbf,
                      // q: bf16 1.0 (3f80), -5.0 (c0a0), 0.10009765625 (3dcd), -0 (8000), 2^-133 (0001), inf (7f80)
                      0x80, 0x3f, 0xa0, 0xc0, 0xcd, 0x3d, 0x00, 0x80, 0x01, 0x00, 0x80, 0x7f};
  const Bytes bytes = file_bytes(header, data);
  const fb::Safetensors file = fb::parse_safetensors(bytes, "python.safetensors");

  REQUIRE(file.tensors.size() == 3);
  CHECK(file.tensors[0].name == "idx");
  CHECK(file.tensors[1].name == "lse");
  CHECK(file.tensors[2].name == "q");
  CHECK(file.metadata.size() == 1);
  CHECK(file.metadata.at("source") == "emulated");
  const fb::SafeTensor* q = file.find("q");
  REQUIRE(q != nullptr);
  CHECK(q->dtype == fb::Dtype::BF16);
  CHECK(q->shape == std::vector<std::uint64_t>{1, 1, 2, 3});
  CHECK(q->bytes == Bytes(data.begin() + 24, data.end()));
  CHECK(file.find("lse")->shape == std::vector<std::uint64_t>{1, 1, 2});
  CHECK(file.find("idx")->dtype == fb::Dtype::I64);

  // The same file with the tensors listed in another order and odd but legal whitespace.
  std::string shuffled =
      "{ \"q\" : {\"data_offsets\":[24,36],\"shape\":[1,1,2,3],\"dtype\":\"BF16\"},\n"
      "  \"lse\":{\"shape\":[1,1,2],\"dtype\":\"F32\",\"data_offsets\":[16,24]},\n"
      "  \"__metadata__\":{\"source\":\"emulated\"},\"idx\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}";
  const fb::Safetensors again = fb::parse_safetensors(file_bytes(shuffled, data), "shuffled.safetensors");
  REQUIRE(again.tensors.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(again.tensors[i].name == file.tensors[i].name);
    CHECK(again.tensors[i].bytes == file.tensors[i].bytes);
  }

  // Our writer's output for the same tensors in Python's order is byte-identical.
  fb::Safetensors same;
  same.metadata = file.metadata;
  same.tensors = file.tensors;
  CHECK(fb::serialize_safetensors(same) == bytes);
}

TEST_CASE("safetensors_empty_and_scalar_tensors") {
  // A scalar (shape []) holds one element; a [0] tensor holds none and may share its offset.
  const std::string header =
      R"({"e":{"dtype":"F16","shape":[3,0],"data_offsets":[0,0]},"s":{"dtype":"F64","shape":[],"data_offsets":[0,8]}})";
  const Bytes data = {0, 0, 0, 0, 0, 0, 0xf0, 0x3f};  // 1.0 as fp64
  const fb::Safetensors file = fb::parse_safetensors(file_bytes(header, data), "scalar.safetensors");
  REQUIRE(file.tensors.size() == 2);
  CHECK(file.find("s")->bytes == data);
  CHECK(file.find("e")->bytes.empty());
  CHECK(file.find("e")->element_count() == 0);
  // Dims whose product would overflow are fine next to a zero dim: the tensor is empty.
  const std::string huge_empty = R"({"z":{"dtype":"F64","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}})";
  const fb::Safetensors z = fb::parse_safetensors(file_bytes(huge_empty), "z.safetensors");
  CHECK(z.tensors.at(0).element_count() == 0);
  const fb::Safetensors z_again = fb::parse_safetensors(fb::serialize_safetensors(z), "z2");
  CHECK(z_again.tensors.at(0).shape == std::vector<std::uint64_t>{4294967296u, 4294967296u, 0});
  // An empty header object and no data is a valid, empty file.
  CHECK(fb::parse_safetensors(file_bytes("{}      "), "empty.safetensors").tensors.empty());
}

TEST_CASE("safetensors_bad_files_give_one_clear_error") {
  const Bytes four_f32(16, 0);
  std::string many_ones;
  for (int i = 0; i < 100; ++i) many_ones += "1,";
  auto one = [](const std::string& entry, const Bytes& data = Bytes(16, 0)) {
    return file_bytes("{\"a\":" + entry + "}", data);
  };
  struct Case {
    const char* what;
    Bytes bytes;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {"too short", Bytes{1, 0, 0, 0, 0}, "bad.safetensors: file is 5 bytes, too short for the 8-byte header length"},
      {"length past end", file_bytes("{}", {}, 100), "header length 100 runs past the end of the file (10 bytes)"},
      {"absurd length", file_bytes("{}", {}, std::uint64_t{1} << 40), "header length 1099511627776 is absurd"},
      {"all ones length", file_bytes("{}", {}, UINT64_MAX - 1), "is absurd"},
      {"invalid json", file_bytes(R"({"a":)"), "header is not valid JSON"},
      {"trailing garbage", file_bytes(R"({} x)"), "header is not valid JSON"},
      {"empty header", file_bytes(""), "header is not valid JSON"},
      {"bad utf8 key", file_bytes("{\"\xff\":1}"), "header is not valid JSON"},
      {"array header", file_bytes("[1,2]"), "header is not a JSON object"},
      {"scalar header", file_bytes("5"), "header is not a JSON object"},
      {"entry not object", one("5"),
       "bad.safetensors: tensor 'a': expected an object with dtype, shape and data_offsets, got number 5"},
      {"missing dtype", one(R"({"shape":[4],"data_offsets":[0,16]})"), "tensor 'a': missing field 'dtype'"},
      {"missing shape", one(R"({"dtype":"F32","data_offsets":[0,16]})"), "tensor 'a': missing field 'shape'"},
      {"missing offsets", one(R"({"dtype":"F32","shape":[4]})"), "tensor 'a': missing field 'data_offsets'"},
      {"dtype number", one(R"({"dtype":32,"shape":[4],"data_offsets":[0,16]})"),
       "tensor 'a': field 'dtype': expected a string such as \"BF16\", got number 32"},
      {"unknown dtype", one(R"({"dtype":"F128","shape":[4],"data_offsets":[0,16]})"),
       "tensor 'a': field 'dtype': unknown dtype 'F128'; expected one of BF16, F16, F32, F64, F8_E4M3"},
      {"lower-case dtype", one(R"({"dtype":"f32","shape":[4],"data_offsets":[0,16]})"), "unknown dtype 'f32'"},
      {"shape not array", one(R"({"dtype":"F32","shape":4,"data_offsets":[0,16]})"),
       "tensor 'a': field 'shape': expected an array of non-negative integers, got number 4"},
      {"negative shape", one(R"({"dtype":"F32","shape":[2,-2],"data_offsets":[0,16]})"),
       "tensor 'a': field 'shape': entry 1 must be a non-negative integer, got number -2"},
      {"float shape", one(R"({"dtype":"F32","shape":[4.0],"data_offsets":[0,16]})"),
       "field 'shape': entry 0 must be a non-negative integer, got number 4.0"},
      {"string shape", one(R"({"dtype":"F32","shape":["4"],"data_offsets":[0,16]})"),
       "entry 0 must be a non-negative integer"},
      {"huge shape", one(R"({"dtype":"F32","shape":[18446744073709551616],"data_offsets":[0,16]})"),
       "entry 0 must be a non-negative integer"},
      {"shape overflow", one(R"({"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,16]})"),
       "tensor 'a': field 'shape': [4294967296,4294967296] of U8 overflows a 64-bit byte count"},
      {"byte overflow", one(R"({"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,16]})"),
       "overflows a 64-bit byte count"},
      {"offsets not array", one(R"({"dtype":"F32","shape":[4],"data_offsets":16})"),
       "tensor 'a': field 'data_offsets': expected [begin, end] with two non-negative integers, got number 16"},
      {"three offsets", one(R"({"dtype":"F32","shape":[4],"data_offsets":[0,8,16]})"), "expected [begin, end]"},
      {"negative offset", one(R"({"dtype":"F32","shape":[4],"data_offsets":[-1,16]})"), "expected [begin, end]"},
      {"begin after end", one(R"({"dtype":"F32","shape":[0],"data_offsets":[16,0]})"),
       "tensor 'a': field 'data_offsets': [16, 0]: begin is greater than end"},
      {"end past data", one(R"({"dtype":"F32","shape":[5],"data_offsets":[0,20]})"),
       "tensor 'a': field 'data_offsets': [0, 20] runs past the end of the data section (16 bytes)"},
      {"size mismatch", one(R"({"dtype":"F32","shape":[3],"data_offsets":[0,16]})"),
       "tensor 'a': field 'data_offsets': [0, 16] spans 16 bytes but shape [3] of F32 needs 12"},
      {"overlap",
       file_bytes(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
                  R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                  four_f32),
       "tensor 'b': field 'data_offsets': [8, 16] overlaps tensor 'a' [0, 12]"},
      {"hole",
       file_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                  R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                  four_f32),
       "tensor 'b': field 'data_offsets': [8, 16] leaves a gap after tensor 'a', which ends at 4"},
      {"hole at start", one(R"({"dtype":"F32","shape":[2],"data_offsets":[8,16]})"),
       "leaves a gap after the start of the data section"},
      {"trailing bytes", one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})"),
       "bad.safetensors: data section is 16 bytes but the tensors cover only 8"},
      {"metadata not object", file_bytes(R"({"__metadata__":["x"]})"),
       "__metadata__: expected an object of string values, got array [\"x\"]"},
      {"metadata number", file_bytes(R"({"__metadata__":{"source":"emulated","causal":true}})"),
       "__metadata__: key 'causal': expected a string value, got boolean true"},
      {"duplicate tensor",
       file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                  R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                  four_f32),
       "bad.safetensors: duplicate key 'a' (JSON keys must be unique)"},
      {"duplicate field", one(R"({"dtype":"F32","dtype":"F16","shape":[4],"data_offsets":[0,16]})"),
       "tensor 'a': duplicate key 'dtype'"},
      {"duplicate metadata", file_bytes(R"({"__metadata__":{"k":"1","k":"2"}})"), "__metadata__: duplicate key 'k'"},
      {"deep nesting", one(R"({"dtype":"F32","shape":[[[4]]],"data_offsets":[0,16]})"),
       "tensor 'a': field 'shape': nested deeper than a safetensors header can be"},
      {"byte order mark", file_bytes("\xef\xbb\xbf{}"),
       "header must start with '{', got byte \\xef (a UTF-8 byte order mark?)"},
      {"leading space", file_bytes(" {}"), "header must start with '{', got byte \\x20"},
      {"NUL padding", file_bytes(std::string("{}\0\0\0\0\0\0", 8)),
       "header byte 2 is NUL; a safetensors header is padded with spaces (0x20) only"},
      {"long array", one("{\"dtype\":\"F32\",\"shape\":[" + many_ones + "1]}"), "array longer than 64 elements"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    const std::string message = error_of(c.bytes);
    CHECK_MESSAGE(message.find(c.expected) != std::string::npos, message);
    CHECK(message.rfind("bad.safetensors: ", 0) == 0);
    CHECK(message.find('\n') == std::string::npos);
  }
}

TEST_CASE("safetensors_data_offsets_may_end_at_the_data_length_but_not_one_byte_past") {
  // 16 data bytes 0..15. U8 tensors so that a span of any length has a shape that fits it:
  // only the offsets' bound can refuse them.
  Bytes data(16);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::uint8_t>(i + 1);
  // One tensor ending exactly at the end of the data: read, every byte.
  const fb::Safetensors whole =
      fb::parse_safetensors(file_bytes(R"({"a":{"dtype":"U8","shape":[16],"data_offsets":[0,16]}})", data), "ok");
  REQUIRE(whole.tensors.size() == 1);
  CHECK(whole.tensors[0].bytes == data);
  // Two tensors, the second ending exactly at the end: both read, split where the header says.
  const fb::Safetensors split =
      fb::parse_safetensors(file_bytes(R"({"a":{"dtype":"U8","shape":[7],"data_offsets":[0,7]},)"
                                       R"("b":{"dtype":"U8","shape":[9],"data_offsets":[7,16]}})",
                                       data),
                            "ok");
  REQUIRE(split.tensors.size() == 2);
  for (const auto& t : split.tensors) {
    CAPTURE(t.name);
    const std::size_t begin = t.name == "a" ? 0 : 7, end = t.name == "a" ? 7 : 16;
    CHECK(t.bytes ==
          Bytes(data.begin() + static_cast<std::ptrdiff_t>(begin), data.begin() + static_cast<std::ptrdiff_t>(end)));
  }
  // One byte past the end, alone, as the second of two, and as a one-byte tensor starting
  // at the end: refused, naming the tensor, its span and the data length.
  struct Case {
    std::string what, header, expected;
  };
  const Case cases[] = {
      {"one tensor", R"({"a":{"dtype":"U8","shape":[17],"data_offsets":[0,17]}})",
       "bad.safetensors: tensor 'a': field 'data_offsets': [0, 17] runs past the end of the data section (16 bytes)"},
      {"second tensor",
       R"({"a":{"dtype":"U8","shape":[7],"data_offsets":[0,7]},"b":{"dtype":"U8","shape":[10],"data_offsets":[7,17]}})",
       "bad.safetensors: tensor 'b': field 'data_offsets': [7, 17] runs past the end of the data section (16 bytes)"},
      {"starts at the end",
       R"({"a":{"dtype":"U8","shape":[16],"data_offsets":[0,16]},"b":{"dtype":"U8","shape":[1],"data_offsets":[16,17]}})",
       "bad.safetensors: tensor 'b': field 'data_offsets': [16, 17] runs past the end of the data section (16 bytes)"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    const std::string message = error_of(file_bytes(c.header, data));
    CHECK(message == c.expected);
  }
  // The same refusal from a file on disk.
  const auto path = std::filesystem::temp_directory_path() / ("fb_safetensors_bound_" + std::to_string(::getpid()));
  {
    const Bytes bytes = file_bytes(cases[0].header, data);
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  std::string from_file = "(no error)";
  try {
    fb::read_safetensors(path);
  } catch (const fb::TraceError& e) {
    from_file = e.what();
  }
  std::filesystem::remove(path);
  CHECK(from_file.find("tensor 'a': field 'data_offsets': [0, 17] runs past the end of the data section (16 bytes)") !=
        std::string::npos);
  CHECK(from_file.find(path.filename().string()) != std::string::npos);
}

TEST_CASE("safetensors_error_quotes_odd_names_on_one_line") {
  const std::string header = "{\"a\\nb\\u0001'\":{\"dtype\":\"F99\",\"shape\":[],\"data_offsets\":[0,0]}}";
  const std::string message = error_of(file_bytes(header));
  CHECK_MESSAGE(message.find(R"(tensor 'a\x0ab\x01\x27')") != std::string::npos, message);
  CHECK(message.find('\n') == std::string::npos);
  const std::string long_name(5000, 'n');
  const std::string message2 = error_of(file_bytes("{\"" + long_name + "\":1}"));
  CHECK(message2.size() < 300);
}

TEST_CASE("safetensors_path_io") {
  const auto dir = std::filesystem::temp_directory_path() / ("fb_safetensors_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);  // an earlier run's, whose pid this one reuses
  std::filesystem::create_directories(dir);
  fb::Safetensors file;
  file.tensors.push_back({"x", fb::Dtype::U16, {3}, {1, 2, 3, 4, 5, 6}});
  file.metadata["k"] = "v";
  const auto path = dir / "x.safetensors";
  fb::write_safetensors(path, file);
  const fb::Safetensors back = fb::read_safetensors(path);
  CHECK(back.find("x")->bytes == Bytes{1, 2, 3, 4, 5, 6});
  CHECK(back.metadata.at("k") == "v");
  // The file on disk is exactly the serialized bytes.
  std::ifstream in(path, std::ios::binary);
  const Bytes on_disk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(on_disk == fb::serialize_safetensors(file));

  auto path_error = [](const std::filesystem::path& p) -> std::string {
    try {
      fb::read_safetensors(p);
    } catch (const fb::TraceError& e) {
      return e.what();
    }
    return "(no error)";
  };
  CHECK(path_error(dir / "missing.safetensors").find("missing.safetensors: cannot open: No such file or directory") !=
        std::string::npos);
  CHECK(path_error(dir).find("not a regular file") != std::string::npos);

  // Reading from a path (header first, then each tensor) refuses exactly what parsing the
  // same bytes in memory refuses, with the same message.
  const std::vector<Bytes> bad = {
      Bytes{1, 2, 3},
      Bytes{},
      file_bytes("{}", {}, 100),
      file_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", Bytes(3, 0)),
      file_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", Bytes(5, 0)),
      file_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", Bytes(8, 0)),
      file_bytes(R"({"a":)"),
  };
  const auto bad_path = dir / "bad.safetensors";
  for (const Bytes& b : bad) {
    {
      std::ofstream out(bad_path, std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    }
    const std::string from_path = path_error(bad_path);
    CHECK(from_path.rfind(bad_path.string() + ": ", 0) == 0);
    CHECK(from_path == error_of(b, bad_path.string().c_str()));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("safetensors_writer_refuses_inconsistent_tensors") {
  auto write_error = [](const fb::Safetensors& f) -> std::string {
    try {
      fb::serialize_safetensors(f, "out.safetensors");
    } catch (const fb::TraceError& e) {
      return e.what();
    }
    return "(no error)";
  };
  fb::Safetensors f;
  f.tensors.push_back({"a", fb::Dtype::F32, {2}, Bytes(7, 0)});
  CHECK(write_error(f).find("out.safetensors: tensor 'a': holds 7 bytes but shape [2] of F32 needs 2 elements") !=
        std::string::npos);
  f.tensors[0].bytes.resize(8);
  f.tensors.push_back(f.tensors[0]);
  CHECK(write_error(f).find("tensor 'a' appears twice") != std::string::npos);
  f.tensors[1].name = "__metadata__";
  CHECK(write_error(f).find("reserved") != std::string::npos);
  f.tensors[1].name = "\xff";
  CHECK(write_error(f).find("not valid UTF-8") != std::string::npos);
}

// Random corruptions of a valid trace: the reader and the trace validator may refuse
// them only by TraceError, with a one-line message naming the file. What they accept
// must survive a write/read round trip unchanged.
TEST_CASE("safetensors_random_mutations_only_throw_trace_error") {
  fb::TraceMetadata meta;
  meta.source = "emulated";
  meta.kernel = "fa2";
  meta.softmax_scale = 0.125;
  meta.causal = true;
  std::vector<std::uint32_t> q_bits(1 * 2 * 3 * 4), k_bits(1 * 2 * 5 * 4), lse_bits(6);
  std::mt19937_64 rng(7);
  for (auto& b : q_bits) b = rng() & 0xffff;
  for (auto& b : k_bits) b = rng() & 0xffff;
  for (auto& b : lse_bits) b = static_cast<std::uint32_t>(rng());
  const Bytes valid = fb::TraceBuilder(meta)
                          .add_bits("q", fb::formats::bf16, {1, 2, 3, 4}, q_bits)
                          .add_bits("k", fb::formats::bf16, {1, 2, 5, 4}, k_bits)
                          .add_bits("v", fb::formats::bf16, {1, 2, 5, 4}, k_bits)
                          .add_bits("o", fb::formats::bf16, {1, 2, 3, 4}, q_bits)
                          .add_bits("lse", fb::formats::fp32, {1, 2, 3}, lse_bits)
                          .serialize("valid");
  const std::size_t header_end = 8 + [&] {
    std::size_t n = 0;
    for (int i = 0; i < 8; ++i) n |= std::size_t{valid[i]} << (8 * i);
    return n;
  }();

  const char json_alphabet[] = "{}[]\":,0123456789-.eE \\u\xff";
  const int iterations = 20000 / test_scale_divisor();
  int accepted = 0, refused = 0;
  for (int it = 0; it < iterations; ++it) {
    Bytes bytes = valid;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && bytes.size() > 8; ++e) {
      const std::size_t in_header = 8 + rng() % (std::min(header_end, bytes.size()) - 8);
      switch (rng() % 8) {
        case 0:
          bytes[in_header] = static_cast<std::uint8_t>(json_alphabet[rng() % (sizeof json_alphabet - 1)]);
          break;
        case 1:
          bytes[rng() % bytes.size()] ^= static_cast<std::uint8_t>(1u << (rng() % 8));
          break;
        case 2:
          bytes.resize(rng() % bytes.size());
          break;
        case 3:
          bytes.insert(bytes.begin() + static_cast<std::ptrdiff_t>(in_header), json_alphabet[rng() % 10]);
          break;
        case 4:
          bytes.erase(bytes.begin() + static_cast<std::ptrdiff_t>(in_header));
          break;
        case 5:
          bytes[rng() % 8] = static_cast<std::uint8_t>(rng());
          break;
        case 6: {  // change a digit: shapes, offsets and the header length disagree
          for (std::size_t i = in_header; i < std::min(bytes.size(), header_end); ++i)
            if (bytes[i] >= '0' && bytes[i] <= '9') {
              bytes[i] = static_cast<std::uint8_t>('0' + rng() % 10);
              break;
            }
          break;
        }
        default:
          bytes.insert(bytes.end(), static_cast<std::size_t>(rng() % 3), 0);
          break;
      }
    }
    try {
      const fb::Safetensors parsed = fb::parse_safetensors(bytes, "mutant.safetensors");
      const fb::Safetensors again = fb::parse_safetensors(fb::serialize_safetensors(parsed), "again");
      CHECK(again.tensors.size() == parsed.tensors.size());
      for (std::size_t i = 0; i < parsed.tensors.size(); ++i) CHECK(again.tensors[i].bytes == parsed.tensors[i].bytes);
      CHECK(again.metadata == parsed.metadata);
      fb::Trace::from_safetensors(parsed, "mutant.safetensors");
      ++accepted;
    } catch (const fb::TraceError& e) {
      const std::string message = e.what();
      CHECK(message.rfind("mutant.safetensors: ", 0) == 0);
      CHECK(message.find('\n') == std::string::npos);
      ++refused;
    }
  }
  MESSAGE("mutations accepted: " << accepted << ", refused: " << refused);
  CHECK(refused > iterations / 2);
}
