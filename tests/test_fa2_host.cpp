// tests/test_fa2_host.cpp: the host side of fb-fa2 that runs without a GPU
// (traces/fa2_host.hpp, traces/fa2_trace_lite.cpp).
// - Tiles: fa2_tile_sizes equals FA2's launch configuration, written here from FA2's
//   flash_fwd_launch_template.h / flash_bwd_launch_template.h (hdim64: fwd 128x128, bwd
//   128x128; hdim128: fwd 128x64, bwd 64x128), and the tiles of the CPU models fa2-sm80 and
//   fa2-sm90 that replay fb-fa2's traces.
// - Arguments: valid command lines parse to the values written here; each kind of bad
//   argument or shape (head dim other than 64/128, sequence length not a multiple of 128 or
//   out of range, too many heads, bad trace rows, unknown flag, non-numeric value, bad
//   variant, missing --out) throws Fa2UsageError (fb-fa2 exits 2 on it).
// - Traces: what the dependency-free writer produces from host buffers (q k v do o dq dk
//   dv lse delta and fb-fa2's metadata) is read back by the project's independent trace
//   reader (traces/trace.hpp, which validates docs/DESIGN.md §9): every bit pattern equals the
//   one written, the metadata says cuda:<device>, causal, dtype and tiles; the model a
//   --variant dynmax trace names parses as the CPU +dynmax model with the kernel's beta and
//   tolerance (2 and 1e-3, written here from Qiu & Yao / docs/CLI.md). The lite reader
//   reads a file written by the project's TraceBuilder (an independent writer) bit for bit
//   and rejects truncated files.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <unistd.h>
#include <string>
#include <vector>

#include "attention/attention.hpp"
#include "attention/kernel_models.hpp"
#include "traces/fa2_host.hpp"
#include "traces/fa2_trace.hpp"
#include "traces/trace.hpp"

namespace {

using fb::gpu::Fa2Options;
using fb::gpu::Fa2UsageError;

Fa2Options parse(std::vector<const char*> args) {
  args.insert(args.begin(), "fb-fa2");
  return fb::gpu::parse_fa2_args(static_cast<int>(args.size()), args.data());
}

std::filesystem::path temp_file(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("fb_test_fa2_host_" + std::to_string(::getpid()) + "_" + name);
}

// Random finite bf16 bit patterns (subnormals and zeros included, no inf/NaN).
std::vector<std::uint16_t> random_bf16(std::size_t n, std::mt19937& rng) {
  std::vector<std::uint16_t> v(n);
  for (auto& x : v) {
    do {
      x = static_cast<std::uint16_t>(rng() & 0xffffu);
    } while ((x & 0x7f80u) == 0x7f80u);
  }
  return v;
}

fb::gpu::Fa2Tensor tensor(const std::string& name, const char* dtype, std::vector<std::uint64_t> shape,
                          const void* data, std::size_t bytes) {
  fb::gpu::Fa2Tensor t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.bytes.assign(static_cast<const std::uint8_t*>(data), static_cast<const std::uint8_t*>(data) + bytes);
  return t;
}

}  // namespace

TEST_CASE("fa2 tile sizes are FA2's launch configuration and the replay model's") {
  const fb::gpu::Fa2TileSizes d64 = fb::gpu::fa2_tile_sizes(64), d128 = fb::gpu::fa2_tile_sizes(128);
  CHECK(d64.block_m == 128);
  CHECK(d64.block_n == 128);
  CHECK(d64.bwd_block_m == 128);
  CHECK(d64.bwd_block_n == 128);
  CHECK(d128.block_m == 128);
  CHECK(d128.block_n == 64);
  CHECK(d128.bwd_block_m == 64);
  CHECK(d128.bwd_block_n == 128);
  for (const char* model : {"fa2-sm80", "fa2-sm90"}) {
    const auto handle = fb::attn::parse_kernel_model(model, fb::formats::bf16);
    for (int d : {64, 128}) {
      INFO(model << " d=" << d);
      const fb::attn::TileSizes cpu = handle.recipe->tiles_for(d, 256, false);
      const fb::gpu::Fa2TileSizes gpu = fb::gpu::fa2_tile_sizes(d);
      CHECK(cpu.block_m == gpu.block_m);
      CHECK(cpu.block_n == gpu.block_n);
      CHECK(cpu.bwd_block_m == gpu.bwd_block_m);
      CHECK(cpu.bwd_block_n == gpu.bwd_block_n);
    }
  }
  for (int d : {64, 128}) {
    const fb::gpu::Fa2TileSizes t = fb::gpu::fa2_tile_sizes(d);
    for (int tile : {t.block_m, t.block_n, t.bwd_block_m, t.bwd_block_n}) CHECK(fb::gpu::kFa2SeqMultiple % tile == 0);
  }
}

TEST_CASE("fa2 command line parses and rejects bad arguments") {
  const Fa2Options o = parse({"--out", "t.safetensors", "--hdim", "128", "--seq", "512", "--batch", "2", "--heads", "3",
                              "--seed", "9", "--causal", "--variant", "dynmax", "--trace-rows", "0,5,511"});
  CHECK(o.out == "t.safetensors");
  CHECK(o.hdim == 128);
  CHECK(o.seq == 512);
  CHECK(o.batch == 2);
  CHECK(o.heads == 3);
  CHECK(o.seed == 9u);
  CHECK(o.causal);
  CHECK(o.variant == "dynmax");
  CHECK(o.trace_rows == std::vector<int>{0, 5, 511});
  CHECK_NOTHROW(fb::gpu::validate_fa2_problem(o));

  const Fa2Options defaults = parse({"--out", "x"});
  CHECK_FALSE(defaults.causal);
  CHECK(defaults.variant == "standard");
  CHECK(defaults.hdim == 64);
  CHECK_NOTHROW(fb::gpu::validate_fa2_problem(defaults));

  CHECK_THROWS_AS(parse({}), Fa2UsageError);                              // --out missing
  CHECK_THROWS_AS(parse({"--out", "x", "--bogus"}), Fa2UsageError);       // unknown flag
  CHECK_THROWS_AS(parse({"--out", "x", "--seq"}), Fa2UsageError);         // missing value
  CHECK_THROWS_AS(parse({"--out", "x", "--seq", "12x"}), Fa2UsageError);  // not a number
  CHECK_THROWS_AS(parse({"--out", "x", "--hdim", ""}), Fa2UsageError);
  CHECK_THROWS_AS(parse({"--out", "x", "--seq", "99999999999"}), Fa2UsageError);
  CHECK_THROWS_AS(parse({"--out", "x", "--seed", "-1"}), Fa2UsageError);
  CHECK_THROWS_AS(parse({"--out", "x", "--variant", "fast"}), Fa2UsageError);
  CHECK_THROWS_AS(parse({"--out", "x", "--trace-rows", "1,a"}), Fa2UsageError);
}

TEST_CASE("fa2 problem checks: head dim, sequence length, grid, trace rows") {
  auto shape = [](int hdim, int seq, int batch = 1, int heads = 1) {
    Fa2Options o = parse({"--out", "x"});
    o.hdim = hdim;
    o.seq = seq;
    o.batch = batch;
    o.heads = heads;
    o.trace_rows = {0};
    return o;
  };
  for (int hdim : {0, 32, 63, 65, 96, 127, 129, 256, -64}) {
    INFO("hdim " << hdim);
    try {
      fb::gpu::validate_fa2_problem(shape(hdim, 256));
      FAIL("accepted");
    } catch (const Fa2UsageError& e) {
      CHECK(std::string(e.what()).find("head dim must be 64 or 128") != std::string::npos);
    }
  }
  for (int seq : {0, -128, 64, 100, 192, 200, 32768 + 128}) {
    INFO("seq " << seq);
    CHECK_THROWS_AS(fb::gpu::validate_fa2_problem(shape(64, seq)), Fa2UsageError);
  }
  for (int seq : {128, 256, 384, 32768}) {
    INFO("seq " << seq);
    CHECK_NOTHROW(fb::gpu::validate_fa2_problem(shape(128, seq)));
  }
  CHECK_THROWS_AS(fb::gpu::validate_fa2_problem(shape(64, 128, 0, 1)), Fa2UsageError);
  CHECK_THROWS_AS(fb::gpu::validate_fa2_problem(shape(64, 128, 1, -2)), Fa2UsageError);
  CHECK_NOTHROW(fb::gpu::validate_fa2_problem(shape(64, 128, 65535, 1)));
  CHECK_THROWS_AS(fb::gpu::validate_fa2_problem(shape(64, 128, 256, 256)), Fa2UsageError);  // grid y > 65535

  Fa2Options rows = shape(64, 256);
  rows.trace_rows = {0, 255};
  CHECK_NOTHROW(fb::gpu::validate_fa2_problem(rows));
  rows.trace_rows = {256};
  CHECK_THROWS_AS(fb::gpu::validate_fa2_problem(rows), Fa2UsageError);
  rows.trace_rows = {-1};
  CHECK_THROWS_AS(fb::gpu::validate_fa2_problem(rows), Fa2UsageError);
  rows.trace_rows = {3, 3};
  CHECK_THROWS_AS(fb::gpu::validate_fa2_problem(rows), Fa2UsageError);
  rows.trace_rows = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  CHECK_THROWS_AS(fb::gpu::validate_fa2_problem(rows), Fa2UsageError);

  CHECK(fb::gpu::parse_fa2_bool("True", "causal"));
  CHECK(fb::gpu::parse_fa2_bool("1", "causal"));
  CHECK_FALSE(fb::gpu::parse_fa2_bool("false", "causal"));
  CHECK_THROWS_AS(fb::gpu::parse_fa2_bool("yes", "causal"), Fa2UsageError);
}

TEST_CASE("fa2 lite trace writer: host buffers with dk/dv read back by the trace reader") {
  std::mt19937 rng(20261122u);
  const std::uint64_t B = 1, H = 2, N = 128, D = 128;
  const std::size_t n = B * H * N * D, rows = B * H * N;
  const std::vector<std::uint64_t> shape = {B, H, N, D}, row_shape = {B, H, N};
  const char* names[] = {"q", "k", "v", "do", "o", "dq", "dk", "dv"};
  std::vector<std::vector<std::uint16_t>> bf16_data;
  std::vector<fb::gpu::Fa2Tensor> tensors;
  for (const char* name : names) {
    bf16_data.push_back(random_bf16(n, rng));
    tensors.push_back(tensor(name, "BF16", shape, bf16_data.back().data(), n * 2));
  }
  // lse and delta: decimal values written here, a +inf LSE for an empty row among them.
  std::vector<float> lse(rows), delta(rows);
  for (std::size_t i = 0; i < rows; ++i) {
    lse[i] = 0.1f * static_cast<float>(i) - 3.3f;
    delta[i] = -0.0078125f * static_cast<float>(i % 17) + 1.0e-3f;
  }
  lse[5] = std::numeric_limits<float>::infinity();
  tensors.push_back(tensor("lse", "F32", row_shape, lse.data(), rows * 4));
  tensors.push_back(tensor("delta", "F32", row_shape, delta.data(), rows * 4));
  const std::int32_t traced[] = {0, 17};
  tensors.push_back(tensor("trace_rows", "I32", {2}, traced, sizeof traced));

  fb::gpu::Fa2RunFacts facts;
  facts.options = parse({"--out", "unused"});
  facts.options.hdim = 128;
  facts.options.seq = 128;
  facts.options.heads = 2;
  facts.options.causal = true;
  facts.softmax_scale = 0.125f;
  facts.scale_log2 = 0.180336878f;
  facts.trace_rows = {0, 17};
  facts.scenario = "sink";
  fb::gpu::Fa2DeviceInfo device;
  device.name = "NVIDIA H100 80GB HBM3";
  device.major = 9;
  device.minor = 0;
  device.driver = 12040;
  device.runtime = 12030;
  const auto metadata = fb::gpu::fa2_trace_metadata(facts, device);
  const auto path = temp_file("lite.safetensors");
  fb::gpu::write_fa2_trace_lite(path.string(), tensors, metadata);

  const fb::Trace trace = fb::read_trace(path);
  CHECK(fb::is_hardware_capture(trace));
  const fb::TraceMetadata& md = trace.metadata();
  CHECK(md.source == "cuda:NVIDIA H100 80GB HBM3");
  CHECK(md.device == "NVIDIA H100 80GB HBM3");
  CHECK(md.compute_capability == "9.0");
  CHECK(md.model == "fa2-sm90");
  REQUIRE(md.causal.has_value());
  CHECK(*md.causal);
  REQUIRE(md.softmax_scale.has_value());
  CHECK(*md.softmax_scale == 0.125);
  REQUIRE(md.dtype.has_value());
  CHECK(*md.dtype == fb::formats::bf16);
  CHECK(md.block_m == 128);
  CHECK(md.block_n == 64);
  CHECK(trace.raw_metadata().at("bwd_block_m") == "64");
  CHECK(trace.raw_metadata().at("bwd_block_n") == "128");
  CHECK(trace.raw_metadata().at("scenario") == "sink");
  CHECK(trace.raw_metadata().at("trace_rows") == "0,17");
  CHECK(trace.head_dim() == D);
  for (std::size_t i = 0; i < std::size(names); ++i) {
    INFO(names[i]);
    const fb::RawTensor raw = trace.bits(names[i]);
    CHECK(raw.shape == shape);
    REQUIRE(raw.bits.size() == n);
    std::size_t differing = 0;
    for (std::size_t j = 0; j < n; ++j) differing += raw.bits[j] != bf16_data[i][j] ? 1 : 0;
    CHECK(differing == 0);
  }
  const std::vector<double> lse_back = trace.values("lse"), delta_back = trace.values("delta");
  REQUIRE(lse_back.size() == rows);
  for (std::size_t i = 0; i < rows; ++i) {
    CHECK(lse_back[i] == static_cast<double>(lse[i]));
    CHECK(delta_back[i] == static_cast<double>(delta[i]));
  }
  CHECK(trace.values("trace_rows") == std::vector<double>{0, 17});

  // A metadata map for an sm80 device and the standard variant, non-causal.
  facts.options.causal = false;
  facts.options.hdim = 64;
  device.major = 8;
  const auto md80 = fb::gpu::fa2_trace_metadata(facts, device);
  CHECK(md80.at("causal") == "false");
  CHECK(md80.at("model") == "fa2-sm80");
  CHECK(md80.at("block_n") == "128");
  facts.options.variant = "dynmax";
  const auto md_dynmax = fb::gpu::fa2_trace_metadata(facts, device);
  CHECK(md_dynmax.at("model") == "fa2-sm80+dynmax");
  // The replay model the trace names is the CPU +dynmax with the kernel's beta and tolerance
  // (Qiu & Yao's beta = 2, tol = 1e-3, docs/CLI.md).
  const auto replay = fb::attn::parse_kernel_model(md_dynmax.at("model"), fb::formats::bf16);
  CHECK(replay.recipe->dynmax);
  CHECK(replay.recipe->dynmax_beta == 2.0);
  CHECK(replay.recipe->dynmax_tol == 1e-3);
  CHECK(static_cast<double>(fb::gpu::kFa2DynmaxBeta) == replay.recipe->dynmax_beta);
  CHECK(fb::gpu::kFa2DynmaxTol == replay.recipe->dynmax_tol);
  CHECK(std::stod(md_dynmax.at("dynmax_beta")) == 2.0);
  CHECK(std::stod(md_dynmax.at("dynmax_tolerance")) == 1e-3);
  CHECK(!fb::attn::parse_kernel_model(md80.at("model"), fb::formats::bf16).recipe->dynmax);

  // The writer refuses a tensor whose bytes do not match its dtype and shape.
  std::vector<fb::gpu::Fa2Tensor> bad = {tensor("q", "BF16", shape, bf16_data[0].data(), n * 2 - 2)};
  CHECK_THROWS(fb::gpu::write_fa2_trace_lite(temp_file("bad.safetensors").string(), bad, metadata));
  std::filesystem::remove(path);
  std::filesystem::remove(temp_file("bad.safetensors"));
}

TEST_CASE("fa2 lite trace reader reads an independently written trace") {
  std::mt19937 rng(7u);
  const std::uint64_t B = 2, H = 1, N = 128, D = 64;
  const std::size_t n = B * H * N * D;
  fb::TraceMetadata md;
  md.source = "emulated";
  md.causal = true;
  md.softmax_scale = 0.125;
  fb::TraceBuilder builder(md);
  builder.extra_metadata("scenario", "fa3-outliers");
  std::vector<std::vector<std::uint32_t>> bits;
  for (const char* name : {"q", "k", "v", "o", "do"}) {
    const std::vector<std::uint16_t> b16 = random_bf16(n, rng);
    bits.emplace_back(b16.begin(), b16.end());
    builder.add_bits(name, fb::formats::bf16, {B, H, N, D}, bits.back());
  }
  const auto path = temp_file("builder.safetensors");
  builder.write(path);
  const fb::gpu::Fa2Inputs in = fb::gpu::read_fa2_inputs_lite(path.string());
  CHECK(in.shape == std::vector<std::uint64_t>{B, H, N, D});
  const std::vector<std::uint16_t>* got[] = {&in.q, &in.k, &in.v, nullptr, &in.dout};
  for (int i = 0; i < 5; ++i) {
    if (!got[i]) continue;
    REQUIRE(got[i]->size() == n);
    std::size_t differing = 0;
    for (std::size_t j = 0; j < n; ++j) differing += (*got[i])[j] != bits[i][j] ? 1 : 0;
    CHECK(differing == 0);
  }
  CHECK(in.metadata.at("scenario") == "fa3-outliers");
  CHECK(fb::gpu::parse_fa2_bool(in.metadata.at("causal"), "causal"));
  CHECK(in.metadata.at("source") == "emulated");

  // Truncated: the last tensor's data no longer fits.
  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size - 3);
  CHECK_THROWS_AS(fb::gpu::read_fa2_inputs_lite(path.string()), std::runtime_error);
  std::filesystem::resize_file(path, 5);
  CHECK_THROWS_AS(fb::gpu::read_fa2_inputs_lite(path.string()), std::runtime_error);
  std::filesystem::remove(path);
}
