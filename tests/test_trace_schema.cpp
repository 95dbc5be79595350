// tests/test_trace_schema.cpp: the attention trace schema (docs/DESIGN.md §9) on top of
// safetensors: validation messages, exact accessors, the builder, and the hardware /
// emulated distinction.
//
// Values are checked against decoders written here from the format definitions
// (independent of formats/ and traces/), against bit patterns written by hand, and
// against a trace file assembled byte by byte as Python's save_file lays it out.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "traces/trace.hpp"

namespace {

using Bytes = std::vector<std::uint8_t>;
using Shape = std::vector<std::uint64_t>;

// IEEE-style binary decode from the definition: sign, biased exponent, fraction.
double decode_reference(std::uint32_t bits, int exp_bits, int man_bits, bool e4m3fn) {
  const int bias = (1 << (exp_bits - 1)) - 1;
  const bool negative = (bits >> (exp_bits + man_bits)) & 1u;
  const int e = static_cast<int>((bits >> man_bits) & ((1u << exp_bits) - 1u));
  const std::uint32_t m = bits & ((1u << man_bits) - 1u);
  double magnitude;
  const int top = (1 << exp_bits) - 1;
  if (e4m3fn && e == top && m == (1u << man_bits) - 1u) return std::numeric_limits<double>::quiet_NaN();
  if (!e4m3fn && e == top) {
    if (m != 0) return std::numeric_limits<double>::quiet_NaN();
    magnitude = std::numeric_limits<double>::infinity();
  } else if (e == 0) {
    magnitude = std::ldexp(static_cast<double>(m), 1 - bias - man_bits);
  } else {
    magnitude = std::ldexp(static_cast<double>(m + (1u << man_bits)), e - bias - man_bits);
  }
  return negative ? -magnitude : magnitude;
}

bool same_value(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

fb::TraceMetadata emulated_metadata() {
  fb::TraceMetadata m;
  m.source = "emulated";
  m.kernel = "flash_fwd_kernel";
  m.model = "fa2-sm90";
  m.softmax_scale = 1.0 / std::sqrt(80.0);  // not a short decimal: must round-trip exactly
  m.causal = false;
  m.dtype = fb::formats::bf16;
  m.block_m = 128;
  m.block_n = 64;
  return m;
}

std::vector<std::uint32_t> random_bits(std::mt19937_64& rng, std::size_t n, std::uint32_t mask) {
  std::vector<std::uint32_t> out(n);
  for (auto& b : out) b = static_cast<std::uint32_t>(rng()) & mask;
  return out;
}

// A valid trace B=1 H=2 N=3 Nk=5 D=4 with every optional tensor, as a builder.
fb::TraceBuilder full_builder(std::mt19937_64& rng, const fb::TraceMetadata& meta = emulated_metadata()) {
  fb::TraceBuilder b(meta);
  const Shape q{1, 2, 3, 4}, k{1, 2, 5, 4}, row{1, 2, 3}, scores{1, 2, 3, 5};
  b.add_bits("q", fb::formats::bf16, q, random_bits(rng, 24, 0xffff))
      .add_bits("k", fb::formats::bf16, k, random_bits(rng, 40, 0xffff))
      .add_bits("v", fb::formats::bf16, k, random_bits(rng, 40, 0xffff))
      .add_bits("o", fb::formats::bf16, q, random_bits(rng, 24, 0xffff))
      .add_bits("lse", fb::formats::fp32, row, random_bits(rng, 6, 0xffffffff))
      .add_bits("do", fb::formats::bf16, q, random_bits(rng, 24, 0xffff))
      .add_bits("dq", fb::formats::fp32, q, random_bits(rng, 24, 0xffffffff))
      .add_bits("dk", fb::formats::bf16, k, random_bits(rng, 40, 0xffff))
      .add_bits("dv", fb::formats::bf16, k, random_bits(rng, 40, 0xffff))
      .add_bits("delta", fb::formats::fp32, {1, 2, 3, 1}, random_bits(rng, 6, 0xffffffff))
      .add_bits("s", fb::formats::fp32, scores, random_bits(rng, 30, 0xffffffff))
      .add_bits("p", fb::formats::e4m3, scores, random_bits(rng, 30, 0xff))
      .add_bits("m", fb::formats::fp32, row, random_bits(rng, 6, 0xffffffff))
      .add_bits("l", fb::formats::fp16, row, random_bits(rng, 6, 0xffff))
      .add_bits("acc_scale", fb::formats::e5m2, {7}, random_bits(rng, 7, 0xff));
  return b;
}

// A header in the layout Python writes, for the minimal q/k/v/o trace with the given
// metadata JSON and o's shape, plus its data (all bf16, shapes [1,1,2,2] unless told).
Bytes minimal_trace(const std::string& metadata_json, const std::string& o_shape = "[1,1,2,2]",
                    const std::string& q_dtype = "BF16") {
  const std::uint64_t o_count = o_shape == "[1,1,2,2]" ? 4 : 6;
  const std::uint64_t q_size = q_dtype == "F32" ? 16 : (q_dtype == "U8" ? 4 : 8);
  std::string header = "{\"__metadata__\":" + metadata_json + ",";
  std::uint64_t at = 0;
  auto entry = [&](const std::string& name, const std::string& dtype, const std::string& shape, std::uint64_t size) {
    header += "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
              std::to_string(at) + "," + std::to_string(at + size) + "]},";
    at += size;
  };
  entry("k", "BF16", "[1,1,2,2]", 8);
  entry("o", "BF16", o_shape, o_count * 2);
  entry("q", q_dtype, "[1,1,2,2]", q_size);
  entry("v", "BF16", "[1,1,2,2]", 8);
  header.back() = '}';
  while (header.size() % 8) header += ' ';
  Bytes out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::uint8_t>(header.size() >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.resize(out.size() + at, 0x3f);
  return out;
}

std::string trace_error(const Bytes& bytes) {
  try {
    fb::parse_trace(bytes, "trace.safetensors");
  } catch (const fb::TraceError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("trace_builder_round_trip_bits_and_exact_values") {
  std::mt19937_64 rng(99);
  for (int round = 0; round < 20; ++round) {
    const fb::TraceBuilder builder = full_builder(rng);
    const fb::Trace trace = builder.build("built.safetensors");
    CHECK(trace.batch() == 1);
    CHECK(trace.heads() == 2);
    CHECK(trace.rows() == 3);
    CHECK(trace.head_dim() == 4);
    CHECK(trace.kv_rows() == 5);
    CHECK_FALSE(fb::is_hardware_capture(trace));
    CHECK(trace.metadata().source == "emulated");
    CHECK(trace.metadata().softmax_scale == 1.0 / std::sqrt(80.0));
    CHECK(trace.metadata().block_m == 128);
    CHECK(trace.metadata().causal == false);
    CHECK(trace.metadata().dtype->name == std::string("bf16"));
    // Tensors come back in the order written, with every bit.
    const fb::Safetensors written = builder.to_safetensors();
    REQUIRE(trace.file().tensors.size() == written.tensors.size());
    for (std::size_t i = 0; i < written.tensors.size(); ++i) {
      CHECK(trace.file().tensors[i].name == written.tensors[i].name);
      CHECK(trace.file().tensors[i].bytes == written.tensors[i].bytes);
    }
    struct Check {
      const char* name;
      int exp_bits, man_bits;
      bool e4m3fn;
    };
    for (const Check& c : {Check{"q", 8, 7, false}, Check{"lse", 8, 23, false}, Check{"p", 4, 3, true},
                           Check{"l", 5, 10, false}, Check{"acc_scale", 5, 2, false}}) {
      CAPTURE(c.name);
      const fb::RawTensor raw = trace.bits(c.name);
      const std::vector<double> values = trace.values(c.name);
      const fb::SafeTensor& t = trace.tensor(c.name);
      REQUIRE(values.size() == raw.bits.size());
      for (std::size_t i = 0; i < values.size(); ++i) {
        std::uint32_t le = 0;
        for (std::size_t b = 0; b < fb::dtype_size(t.dtype); ++b)
          le |= std::uint32_t{t.bytes[i * fb::dtype_size(t.dtype) + b]} << (8 * b);
        CHECK(raw.bits[i] == le);
        CHECK(same_value(values[i], decode_reference(le, c.exp_bits, c.man_bits, c.e4m3fn)));
      }
    }
    // fp32 and bf16 also against the hardware's own float.
    const fb::RawTensor dq = trace.bits("dq");
    const std::vector<double> dq_values = trace.values("dq");
    for (std::size_t i = 0; i < dq.bits.size(); ++i)
      CHECK(same_value(dq_values[i], static_cast<double>(std::bit_cast<float>(dq.bits[i]))));
    const fb::RawTensor k = trace.bits("k");
    const std::vector<double> k_values = trace.values("k");
    for (std::size_t i = 0; i < k.bits.size(); ++i)
      CHECK(same_value(k_values[i], static_cast<double>(std::bit_cast<float>(k.bits[i] << 16))));
  }
}

TEST_CASE("trace_builder_values_and_f64") {
  fb::TraceMetadata meta = emulated_metadata();
  meta.dtype.reset();
  // 0.10009765625 is bf16 0x3dcd; 0.1 is not representable in bf16 at all.
  const std::vector<double> q = {1.0, -5.0, 0.10009765625, -0.0, std::ldexp(1.0, -133), 3.0, -7.5, 0x1.92p+99};
  fb::TraceBuilder b(meta);
  b.add_values("q", fb::formats::bf16, {1, 1, 2, 4}, q)
      .add_values("k", fb::formats::bf16, {1, 1, 2, 4}, q)
      .add_values("v", fb::formats::bf16, {1, 1, 2, 4}, q)
      .add_f64("o", {1, 1, 2, 4}, std::vector<double>{0.1, -0.2, 1.0 / 3.0, 0.0, -0.0, 1e-310, 1e300, -1.0});
  const fb::Trace trace = b.build();
  const std::vector<std::uint32_t> expected_q_bits = {0x3f80, 0xc0a0, 0x3dcd, 0x8000, 0x0001, 0x4040, 0xc0f0, 0x7149};
  CHECK(trace.bits("q").bits == expected_q_bits);
  const std::vector<double> o = trace.values("o");
  CHECK(o[0] == 0.1);
  CHECK(o[2] == 1.0 / 3.0);
  CHECK(std::signbit(o[4]));
  CHECK(o[5] == 1e-310);
  const std::vector<double> q_back = trace.values("q");
  for (std::size_t i = 0; i < q.size(); ++i) CHECK(same_value(q_back[i], q[i]));

  std::string message;
  try {
    fb::TraceBuilder(meta).add_values("q", fb::formats::bf16, {1}, std::vector<double>{0.1});
  } catch (const fb::TraceError& e) {
    message = e.what();
  }
  CHECK(message == "trace builder: tensor 'q': element 0 (0.1) is not exactly representable in bf16");
  try {
    fb::TraceBuilder(meta).add_bits("q", fb::formats::bf16, {1, 1, 2, 2}, std::vector<std::uint32_t>(3));
  } catch (const fb::TraceError& e) {
    message = e.what();
  }
  CHECK(message == "trace builder: tensor 'q': 3 values do not fill shape [1,1,2,2]");
  try {
    fb::TraceBuilder(meta).add_bits("q", fb::formats::tf32, {1}, std::vector<std::uint32_t>(1));
  } catch (const fb::TraceError& e) {
    message = e.what();
  }
  CHECK(message == "trace builder: tensor 'q': format tf32 has no safetensors dtype");

  CHECK_THROWS_WITH_AS(trace.bits("o"),
                       "trace: tensor 'o' has dtype F64, which has no flashbits format; read it with values()",
                       fb::TraceError);
  CHECK_THROWS_WITH_AS(trace.tensor("dq"), "trace: no tensor 'dq' in this trace", fb::TraceError);
}

TEST_CASE("trace_reads_hand_written_python_layout") {
  const std::string header =
      R"({"__metadata__":{"source":"cuda:NVIDIA H100 80GB HBM3","softmax_scale":"0.11180339887498948",)"
      R"("causal":"True","dtype":"torch.bfloat16","compute_capability":"9.0","format":"pt"},)"
      R"("pos":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},)"
      R"("lse":{"dtype":"F32","shape":[1,1,1],"data_offsets":[16,20]},)"
      R"("k":{"dtype":"BF16","shape":[1,1,1,2],"data_offsets":[20,24]},)"
      R"("o":{"dtype":"BF16","shape":[1,1,1,2],"data_offsets":[24,28]},)"
      R"("q":{"dtype":"BF16","shape":[1,1,1,2],"data_offsets":[28,32]},)"
      R"("v":{"dtype":"BF16","shape":[1,1,1,2],"data_offsets":[32,36]}})";
  std::string padded = header;
  while (padded.size() % 8) padded += ' ';
  Bytes bytes;
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<std::uint8_t>(padded.size() >> (8 * i)));
  bytes.insert(bytes.end(), padded.begin(), padded.end());
  // Python's order: I64 first, then F32, then the BF16 tensors by name.
  const Bytes data = {
      0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,  // pos = -1
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x20, 0x00,  // pos = 2^53
      0x00, 0x00, 0x80, 0x3f,                          // lse = 1.0f
      0xcd, 0x3d, 0x80, 0xbf,                          // k = 0.10009765625, -1.0
      0x01, 0x80, 0x7f, 0x7f,                          // o = -2^-133, 0x7f7f (max finite bf16)
      0xc0, 0x7f, 0x80, 0xff,                          // q = NaN (7fc0), -inf (ff80)
      0x00, 0x00, 0x49, 0x40,                          // v = 0.0, 3.140625 (4049)
  };
  bytes.insert(bytes.end(), data.begin(), data.end());
  const fb::Trace trace = fb::parse_trace(bytes, "python.safetensors");
  CHECK(fb::is_hardware_capture(trace));
  CHECK(trace.metadata().causal == true);
  CHECK(trace.metadata().softmax_scale == 0.11180339887498948);
  CHECK(trace.metadata().softmax_scale == 1.0 / std::sqrt(80.0));
  CHECK(trace.metadata().dtype->name == std::string("bf16"));
  CHECK(trace.metadata().compute_capability == "9.0");
  CHECK(trace.raw_metadata().at("format") == "pt");
  CHECK(trace.values("lse") == std::vector<double>{1.0});
  CHECK(trace.values("k") == std::vector<double>{0.10009765625, -1.0});
  const std::vector<double> o = trace.values("o");
  CHECK(o[0] == -std::ldexp(1.0, -133));
  CHECK(o[1] == 0x1.fep+127);
  const std::vector<double> q = trace.values("q");
  CHECK(std::isnan(q[0]));
  CHECK(q[1] == -std::numeric_limits<double>::infinity());
  CHECK(trace.values("v") == std::vector<double>{0.0, 3.140625});
  CHECK(trace.values("pos") == std::vector<double>{-1.0, 9007199254740992.0});
  CHECK(trace.bits("q").bits == std::vector<std::uint32_t>{0x7fc0, 0xff80});
  CHECK(std::string(trace.bits("q").format.name) == "bf16");
}

TEST_CASE("trace_integer_values_beyond_2_pow_53_are_refused") {
  std::mt19937_64 rng(5);
  fb::Safetensors file = full_builder(rng).to_safetensors();
  file.tensors.push_back({"big", fb::Dtype::U64, {1}, {1, 0, 0, 0, 0, 0, 0x20, 0}});  // 2^53 + 1
  const fb::Trace trace = fb::Trace::from_safetensors(file, "t");
  CHECK_THROWS_WITH_AS(
      trace.values("big"),
      "t: tensor 'big': element 0 is an integer too large to be exact as a double; read its bytes instead",
      fb::TraceError);
}

TEST_CASE("trace_validation_names_tensor_and_field") {
  const std::string ok_meta = R"({"source":"emulated"})";
  CHECK(trace_error(minimal_trace(ok_meta)) == "(no error)");
  struct Case {
    const char* what;
    Bytes bytes;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {"no source", minimal_trace(R"({"kernel":"x"})"),
       "trace.safetensors: __metadata__: missing key 'source' (expected \"cuda:<gpu>\" for a hardware capture, "
       "\"emulated\" or \"unknown\"; for a bare capture, state it with --source)"},
      {"bad source", minimal_trace(R"({"source":"gpu"})"),
       "trace.safetensors: __metadata__: key 'source': expected \"cuda:<gpu>\" for a hardware capture, "
       "\"emulated\" or \"unknown\", got 'gpu'"},
      {"cuda without gpu", minimal_trace(R"({"source":"cuda:"})"), "got 'cuda:'"},
      {"capitalised emulated", minimal_trace(R"({"source":"Emulated"})"), "got 'Emulated'"},
      {"o last dim", minimal_trace(ok_meta, "[1,1,2,3]"),
       "trace.safetensors: tensor 'o': shape [1,1,2,3] does not match q's [1,1,2,2] in the last dim (expected 2)"},
      {"o rows", minimal_trace(ok_meta, "[1,1,3,2]"),
       "tensor 'o': shape [1,1,3,2] does not match q's [1,1,2,2] in the rows dim"},
      {"o heads", minimal_trace(ok_meta, "[1,3,1,2]"), "in the heads dim"},
      {"o rank", minimal_trace(ok_meta, "[6]"), "tensor 'o': shape [6] has rank 1; expected rank 4"},
      {"q dtype", minimal_trace(ok_meta, "[1,1,2,2]", "F32"), "tensor 'k': dtype BF16 differs from q's F32"},
      {"q integer", minimal_trace(ok_meta, "[1,1,2,2]", "U8"),
       "tensor 'q': dtype U8 is not a floating-point dtype; expected one of BF16, F16, F32, F64, F8_E4M3, F8_E5M2"},
      {"scale text", minimal_trace(R"({"source":"emulated","softmax_scale":"abc"})"),
       "__metadata__: key 'softmax_scale': expected a finite positive decimal number, got 'abc'"},
      {"scale negative", minimal_trace(R"({"source":"emulated","softmax_scale":"-0.125"})"), "key 'softmax_scale'"},
      {"scale inf", minimal_trace(R"({"source":"emulated","softmax_scale":"inf"})"), "key 'softmax_scale'"},
      {"scale trailing", minimal_trace(R"({"source":"emulated","softmax_scale":"0.125x"})"), "key 'softmax_scale'"},
      {"causal", minimal_trace(R"({"source":"emulated","causal":"yes"})"),
       "__metadata__: key 'causal': expected true or false, got 'yes'"},
      {"dtype name", minimal_trace(R"({"source":"emulated","dtype":"bfloat17"})"),
       "__metadata__: key 'dtype': expected a format name"},
      {"dtype mismatch", minimal_trace(R"({"source":"emulated","dtype":"fp16"})"),
       "__metadata__: key 'dtype': says fp16 but tensor 'q' is BF16"},
      {"tile zero", minimal_trace(R"({"source":"emulated","block_m":"0"})"),
       "__metadata__: key 'block_m': expected a positive tile size (at most 65536), got '0'"},
      {"tile text", minimal_trace(R"({"source":"emulated","block_n":"64x"})"), "key 'block_n'"},
      // The stated lengths (issue 38) must be the shapes': q's rows and k's rows (2 here).
      {"seqlen_q wrong", minimal_trace(R"({"source":"emulated","seqlen_q":"3"})"),
       "trace.safetensors: __metadata__: key 'seqlen_q': says 3 but tensor 'q' has 2 rows [1,1,2,2]"},
      {"seqlen_k wrong", minimal_trace(R"({"source":"emulated","seqlen_k":"1"})"),
       "__metadata__: key 'seqlen_k': says 1 but tensor 'k' has 2 rows"},
      {"seqlen_k text", minimal_trace(R"({"source":"emulated","seqlen_k":"2k"})"),
       "__metadata__: key 'seqlen_k': expected a positive sequence length (at most 2^31-1), got '2k'"},
      {"seqlen_q zero", minimal_trace(R"({"source":"emulated","seqlen_q":"0"})"), "key 'seqlen_q'"},
      {"alignment name", minimal_trace(R"({"source":"emulated","causal_alignment":"top_left"})"),
       "__metadata__: key 'causal_alignment': expected none, bottom-right or top-left, got 'top_left'"},
      {"alignment vs causal", minimal_trace(R"({"source":"emulated","causal":"false","causal_alignment":"top-left"})"),
       "__metadata__: key 'causal_alignment': says 'top-left' but key 'causal' says false"},
      // Replay picks the H200's SFU tables by "9.0": "9.0 " replayed under other functions.
      {"capability space", minimal_trace(R"({"source":"cuda:H200","compute_capability":"9.0 "})"),
       "__metadata__: key 'compute_capability': expected MAJOR.MINOR (\"9.0\", as torch.cuda.get_device_capability "
       "gives) or \"none\", got '9.0 '"},
      {"capability text", minimal_trace(R"({"source":"cuda:H200","compute_capability":"abc"})"),
       "key 'compute_capability'"},
      {"capability no minor", minimal_trace(R"({"source":"cuda:H200","compute_capability":"9."})"),
       "key 'compute_capability'"},
      {"capability two-digit minor", minimal_trace(R"({"source":"cuda:H200","compute_capability":"9.00"})"),
       "key 'compute_capability'"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    const std::string message = trace_error(c.bytes);
    CHECK_MESSAGE(message.find(c.expected) != std::string::npos, message);
  }
  for (const char* good :
       {R"({"source":"cuda:A100","causal":"False","dtype":"bf16","block_m":"64"})",
        R"({"source":"emulated","causal":"1","dtype":"torch.bfloat16","softmax_scale":"1e-1"})",
        R"({"source":"emulated","seqlen_q":"2","seqlen_k":"2"})",
        R"({"source":"emulated","causal":"true","causal_alignment":"top-left"})",
        R"({"source":"emulated","causal":"0","causal_alignment":"none"})",
        R"({"source":"cuda:H200","compute_capability":"9.0"})", R"({"source":"cuda:B200","compute_capability":"10.0"})",
        R"({"source":"emulated","compute_capability":"none"})"})
    CHECK(trace_error(minimal_trace(good)) == "(no error)");
}

TEST_CASE("trace_validation_of_optional_tensors") {
  std::mt19937_64 rng(3);
  const fb::Safetensors good = full_builder(rng).to_safetensors();
  auto error_with = [&](const std::string& name, fb::Dtype dtype, Shape shape, bool remove = false) -> std::string {
    fb::Safetensors f = good;
    std::erase_if(f.tensors, [&](const fb::SafeTensor& t) { return t.name == name; });
    if (!remove) {
      fb::SafeTensor t{name, dtype, shape, {}};
      t.bytes.resize(t.element_count() * fb::dtype_size(dtype));
      f.tensors.push_back(t);
    }
    try {
      fb::Trace::from_safetensors(f, "x.safetensors");
    } catch (const fb::TraceError& e) {
      return e.what();
    }
    return "(no error)";
  };
  CHECK(error_with("lse", fb::Dtype::F32, {1, 2, 3}) == "(no error)");
  CHECK(error_with("lse", fb::Dtype::F32, {1, 2, 3, 1}) == "(no error)");
  CHECK(error_with("lse", fb::Dtype::F32, {1, 2, 3, 2}) ==
        "x.safetensors: tensor 'lse': shape [1,2,3,2] does not match q's [1,2,3,4] in the last dim (expected 1)");
  CHECK(error_with("lse", fb::Dtype::F32, {1, 2, 4}) ==
        "x.safetensors: tensor 'lse': shape [1,2,4] does not match q's [1,2,3,4] in the rows dim (expected 3)");
  CHECK(error_with("lse", fb::Dtype::F32, {1, 2})
            .find("tensor 'lse': shape [1,2] has rank 2; expected [batch, heads, rows]") != std::string::npos);
  CHECK(error_with("lse", fb::Dtype::I32, {1, 2, 3}).find("tensor 'lse': dtype I32 is not a floating-point dtype") !=
        std::string::npos);
  CHECK(error_with("delta", fb::Dtype::F64, {1, 2, 3}) == "(no error)");
  CHECK(error_with("dk", fb::Dtype::BF16, {1, 2, 3, 4}) ==
        "x.safetensors: tensor 'dk': shape [1,2,3,4] does not match k's [1,2,5,4] in the rows dim (expected 5)");
  CHECK(error_with("v", fb::Dtype::BF16, {1, 2, 5, 3}).find("tensor 'v': shape [1,2,5,3] does not match k's") !=
        std::string::npos);
  CHECK(error_with("k", fb::Dtype::BF16, {1, 2, 5, 3})
            .find("tensor 'k': shape [1,2,5,3] does not match q's [1,2,3,4] in the last dim") != std::string::npos);
  CHECK(error_with("s", fb::Dtype::F32, {1, 2, 3, 4})
            .find("tensor 's': shape [1,2,3,4] does not match q's [1,2,3,4] in the last dim (expected 5)") !=
        std::string::npos);
  CHECK(error_with("q", fb::Dtype::BF16, {1, 2, 3, 4, 1}).find("tensor 'q': shape [1,2,3,4,1] has rank 5") !=
        std::string::npos);
  CHECK(error_with("o", fb::Dtype::BF16, {}, true) ==
        "x.safetensors: missing required tensor 'o' (a trace always has q, k, v and o)");
  CHECK(error_with("extra_intermediate", fb::Dtype::I32, {9, 9}) == "(no error)");  // other names are kept
  fb::Safetensors zero = good;
  for (auto& t : zero.tensors) {
    if (t.name != "q" && t.name != "o" && t.name != "k" && t.name != "v") continue;
    t.shape[2] = 0;
    t.bytes.clear();
  }
  std::erase_if(zero.tensors, [](const fb::SafeTensor& t) {
    return t.name != "q" && t.name != "o" && t.name != "k" && t.name != "v";
  });
  CHECK_THROWS_WITH_AS(fb::Trace::from_safetensors(zero, "z"),
                       "z: tensor 'q': shape [1,2,0,4] has a dim outside [1, 2^31-1]", fb::TraceError);
  // Zero heads everywhere: an empty tensor, named as such, not "0 heads, which do not divide
  // q's 0" (the fuzz audit of 2026-12-07).
  for (auto& t : zero.tensors) {
    t.shape[1] = 0;
    t.shape[2] = 3;
  }
  CHECK_THROWS_WITH_AS(fb::Trace::from_safetensors(zero, "z"),
                       "z: tensor 'q': shape [1,0,3,4] has a dim outside [1, 2^31-1]", fb::TraceError);
}

TEST_CASE("trace_source_distinguishes_hardware_from_emulated") {
  std::mt19937_64 rng(11);
  fb::TraceMetadata hw = emulated_metadata();
  hw.source = "cuda:NVIDIA A100-SXM4-80GB";
  hw.device = "NVIDIA A100-SXM4-80GB";
  hw.compute_capability = "8.0";
  hw.versions = "torch=2.4.0 flash_attn=2.6.3 cuda=12.4";
  const fb::Trace hardware = full_builder(rng, hw).build();
  CHECK(fb::is_hardware_capture(hardware));
  CHECK(hardware.metadata().versions == "torch=2.4.0 flash_attn=2.6.3 cuda=12.4");
  const fb::Trace emulated = full_builder(rng).build();
  CHECK_FALSE(fb::is_hardware_capture(emulated));
  // The builder refuses to write a trace the reader would refuse.
  fb::TraceMetadata bad = emulated_metadata();
  bad.source = "gpu0";
  CHECK_THROWS_AS(full_builder(rng, bad).serialize(), fb::TraceError);
}

TEST_CASE("trace_write_and_read_path") {
  std::mt19937_64 rng(12);
  const auto path =
      std::filesystem::temp_directory_path() / ("fb_trace_" + std::to_string(::getpid()) + ".safetensors");
  const fb::TraceBuilder builder = full_builder(rng);
  builder.write(path);
  const fb::Trace trace = fb::read_trace(path);
  CHECK(trace.source_name() == path.string());
  CHECK(trace.file().tensors.size() == 15);
  CHECK(trace.bits("p").bits == builder.build().bits("p").bits);
  std::filesystem::remove(path);
}
