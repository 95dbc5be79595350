// tests/test_probe_file.cpp: the probe file format (traces/probe_file.hpp) and the probe
// checker (traces/probe_check.hpp) without a GPU.
// - Round trip: every header field and case word survives write/read; malformed files
//   fail with an error naming the file and the field.
// - The checker: a probe file whose D values come from an INDEPENDENT computation
//   (exact integer arithmetic in this file implementing the published Hopper rule of
//   docs/DESIGN.md §4: terms truncated to F=25 fraction bits below the largest exponent,
//   exact sum, one truncation to fp32), plus trivially exact integer dot products,
//   must check clean (exit 0); one corrupted D must give exit 1 and a report naming
//   that case; a broken file must give exit 2.
// - probe-check's subsets: with D from the independent computations above (and an
//   fp16-accumulate section of exact integer dots, batches interleaved) and four D bits
//   flipped, --mismatches-out holds exactly those cases (in order, at most
//   --max-mismatches per section, 0-case sections where none), --sample-out exactly the
//   first N cases of every batch, and 1 and 4 threads give the same report and files.
// - fb-mma-probe's generator (probe_mma_dry_run_file, skipped unless run by the ctest
//   gpu_mma_probe_dry_run, which writes the file with `fb-mma-probe --dry-run`): every
//   instruction form and batch is present; the inputs include NaN, inf (where the format
//   has one), subnormals and both zeros, decoded by tests/mpfr_reference.hpp; each
//   designed batch does what it claims, checked in exact arithmetic (ties: C plus one
//   product is exactly a rounding midpoint; cancellation: a product removes C's top bits;
//   exponent gaps; zero terms; C huge or tiny; overflow: D beyond, at or just below max
//   finite, both signs, the RNE tie at max + ulp/2, large C with large products;
//   f_boundary: a term F-3..F+3 binades below the largest with bits below the 2^(E-F) grid,
//   F the emu model's, truncation changing the rounded output in at least half the rows;
//   chained: pairs (C,a,b,D1), (D1,a,b,D2); signed_zeros: an exactly zero sum, every product
//   -0 with C = -0 (half the rows) or +0 (a quarter), or non-zero products cancelling
//   exactly with C = -0 (a quarter); zero_exponent: one zero times a +-2^emax partner per row
//   beside nonzero terms, aligning at the zero's exponent changing the rounded output in most
//   rows, and for bf16/tf32 C = 0 rows beside products below C's emin; inf_overflow: C = +-inf
//   with a product beyond the output's range, of the same and of the opposite sign, in equal
//   numbers). Then the file with D filled in by
//   fused_dot_bits and one bit flipped: probe-check's mismatches file holds exactly that
//   case, its sample the first N cases of every batch, on 1 and 3 threads alike.
// - SFU capture tables (traces/sfu_capture.hpp): an FBSFUT1 file written here byte by byte from
//   the README's layout converts into an emu table model whose outputs equal the MPFR
//   correctly rounded 2^(i/2^N) plus the delta written here (or the escaped bits), under the
//   file's argument rounding; a table whose emu evaluation did not reproduce the hardware,
//   a table of another function or key and broken files are refused with the file and field
//   named. The same for an
//   rcp mantissa capture: it converts into an FBSFU1 rcp_mantissa model whose outputs equal
//   the rule +-T[m] * 2^-e (ftz, overflow to inf) applied here to the exact integer 1 / 1.m
//   (checked against MPFR) plus the captured delta or escaped bits, over every binade; and for an
//   lg2 exponent-split capture: it converts into an FBSFU1 lg2_exponent_split model whose
//   entries equal MPFR's lg2(1.m) plus the captured delta (or the escaped bits) on a stride of
//   mantissas, and whose outputs follow the rule RN_fp32(e + T[m]) (one MPFR rounding written
//   here, ftz) over every binade, with the special inputs of the header.
// - The table model fb-sfu-probe evaluates on the device (gpu/sfu_table_model.hpp) gives the
//   same bits as the emu's table model (emu/sfu/special_functions.cpp) for tables with
//   perturbed, NaN, negative and overflowing entries, on a stride over all 2^32 inputs, random
//   inputs, the region boundaries, and arguments exactly on and half-way between the
//   fixed-point grid (where the argument roundings differ), for every argument rounding;
//   likewise rcp_table_model against the emu's rcp_mantissa model, for a table with
//   perturbed, NaN, zero, subnormal, infinite, negative and overflowing entries; and
//   lg2_table_model against the emu's lg2_exponent_split model for the lg2 capture above (NaN,
//   subnormal, signed zero, infinite and negative escaped entries). The lg2
//   hypothesis' prediction RN_fp32(e + T) (lg2_exponent_split_model) equals MPFR's correctly
//   rounded sum.
// - The shared FBSFUT1 writer (traces/sfu_capture_writer.hpp, fb-sfu-probe's and fb-sfu-rehearse's):
//   for the same deltas, counts and escapes it writes the bytes and summary lines fb-sfu-probe's
//   emit_table wrote before the writer was shared (kept here verbatim), refusals included; its
//   host deltas equal fb-sfu-probe's former per-key computation, and a table written with them
//   converts back to the same entries for every form (a non-GPU source: not measured).
#include <doctest/doctest.h>

#include <boost/multiprecision/cpp_int.hpp>
#include <nlohmann/json.hpp>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <fstream>
#include <iterator>
#include <algorithm>
#include <map>
#include <random>
#include <sstream>

#include "emu/dot/tensor_core.hpp"
#include "gpu/sfu_table_model.hpp"
#include "traces/probe_check.hpp"
#include "traces/probe_file.hpp"
#include "traces/sfu_capture.hpp"
#include "traces/sfu_capture_rules.hpp"
#include "traces/sfu_capture_writer.hpp"
#include "traces/sfu_table_file.hpp"
#include "mpfr_reference.hpp"
#include "rcp_reference.hpp"

namespace {

using boost::multiprecision::cpp_int;
using fb::gpu::ProbeFile;
using fb::gpu::ProbeSection;

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("fb_test_probe_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

std::uint32_t float_bits(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// bf16 of a float that is exactly representable (the top 16 bits).
std::uint32_t bf16_of(float f) {
  const std::uint32_t b = float_bits(f);
  REQUIRE((b & 0xffffu) == 0u);
  return b >> 16;
}

// Independent model of one Hopper fp32-accumulate step for normal, non-zero bf16 inputs
// and a normal non-zero fp32 C: value = sig * 2^(exp) with integer significands.
struct Term {
  cpp_int sig;  // signed integer significand
  int exp;      // value = sig * 2^exp
  int lead;     // exponent of the leading bit position (alignment exponent)
};
Term bf16_product(std::uint32_t a, std::uint32_t b) {
  auto parts = [](std::uint32_t x, long long& m, int& e) {
    const int field = static_cast<int>((x >> 7) & 0xff);
    m = static_cast<long long>((x & 0x7f) | 0x80) * ((x & 0x8000) ? -1 : 1);
    e = field - 127 - 7;
  };
  long long ma, mb;
  int ea, eb;
  parts(a, ma, ea);
  parts(b, mb, eb);
  // Published rule: the product's exponent is ea + eb (significand in [1,4)).
  return {cpp_int(ma) * mb, ea + eb, ea + 7 + eb + 7};
}
Term fp32_term(std::uint32_t c) {
  const int field = static_cast<int>((c >> 23) & 0xff);
  const long long m = static_cast<long long>((c & 0x7fffff) | 0x800000) * ((c >> 31) ? -1 : 1);
  return {cpp_int(m), field - 127 - 23, field - 127};
}
std::uint32_t hopper_reference(std::uint32_t c, const std::vector<std::uint32_t>& a,
                               const std::vector<std::uint32_t>& b) {
  constexpr int F = 25;
  std::vector<Term> terms{fp32_term(c)};
  for (std::size_t i = 0; i < a.size(); ++i) terms.push_back(bf16_product(a[i], b[i]));
  int largest = terms[0].lead;
  for (const Term& t : terms) largest = std::max(largest, t.lead);
  const int unit = largest - F;
  cpp_int sum = 0;
  for (const Term& t : terms) {
    const int shift = t.exp - unit;
    if (shift >= 0)
      sum += t.sig << shift;
    else
      sum += t.sig / (cpp_int(1) << -shift);  // cpp_int division truncates toward zero
  }
  if (sum == 0) return 0;  // +0 (the cases below never sum to zero)
  const bool neg = sum < 0;
  cpp_int mag = neg ? cpp_int(-sum) : sum;
  const int bits = static_cast<int>(msb(mag)) + 1;
  int exponent = unit;
  if (bits > 24) {  // truncate (RZ) to 24 significant bits
    mag >>= (bits - 24);
    exponent += bits - 24;
  }
  const double value = std::ldexp(mag.convert_to<double>(), exponent);  // exact: < 2^24 significand
  REQUIRE(std::fabs(value) >= 0x1p-126);
  REQUIRE(std::fabs(value) < 0x1p127);
  return float_bits(static_cast<float>(neg ? -value : value));
}

ProbeSection hopper_section() {
  ProbeSection sec;
  sec.header.form = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32";
  sec.header.k = 16;
  sec.header.input = fb::formats::bf16;
  sec.header.batches = {"integers", "rule"};
  sec.header.models = {"sm90-mma"};
  sec.header.extra["source"] = "test:independent";
  std::mt19937 rng(12345);
  std::vector<std::uint32_t> a(16), b(16);
  // Trivially exact: small integers, every sum exact in fp32 under any alignment rule.
  for (int i = 0; i < 200; ++i) {
    float sum = static_cast<float>(static_cast<int>(rng() % 201) - 100);
    const std::uint32_t c = float_bits(sum);
    for (int j = 0; j < 16; ++j) {
      const float x = static_cast<float>(static_cast<int>(rng() % 9) - 4);
      const float y = static_cast<float>(static_cast<int>(rng() % 9) - 4);
      a[j] = bf16_of(x);
      b[j] = bf16_of(y);
      sum += x * y;  // exact: integers far below 2^24
    }
    sec.add_case(0, c, a.data(), b.data(), float_bits(sum));
  }
  // Random normal values over a 2^16 exponent spread: truncation matters here.
  auto random_bf16 = [&](int elo, int ehi) {
    const int e = elo + static_cast<int>(rng() % static_cast<unsigned>(ehi - elo + 1));
    return static_cast<std::uint32_t>(((rng() & 1u) << 15) | (static_cast<std::uint32_t>(e + 127) << 7) |
                                      (rng() & 0x7fu));
  };
  for (int i = 0; i < 400; ++i) {
    const int ec = -8 + static_cast<int>(rng() % 17);
    const std::uint32_t c = ((rng() & 1u) << 31) | (static_cast<std::uint32_t>(ec + 127) << 23) | (rng() & 0x7fffffu);
    for (int j = 0; j < 16; ++j) {
      a[j] = random_bf16(-8, 4);
      b[j] = random_bf16(-8, 4);
    }
    sec.add_case(1, c, a.data(), b.data(), hopper_reference(c, a, b));
  }
  return sec;
}

}  // namespace

TEST_CASE("probe_file_round_trip") {
  ProbeFile file;
  ProbeSection s1 = hopper_section();
  ProbeSection s2;
  s2.header.form = "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3";
  s2.header.k = 32;
  s2.header.input = fb::formats::e4m3;
  s2.header.batches = {"random_bits"};
  s2.header.models = {"sm90-wgmma", "exact-rne"};
  s2.header.extra = {{"device", "NVIDIA H100 80GB HBM3"}, {"compute_capability", "9.0"}};
  std::mt19937 rng(7);
  std::vector<std::uint32_t> a(32), b(32);
  for (int i = 0; i < 50; ++i) {
    for (int j = 0; j < 32; ++j) {
      a[j] = rng() & 0xffu;
      b[j] = rng() & 0xffu;
    }
    s2.add_case(0, rng(), a.data(), b.data(), rng());
  }
  file.sections = {s1, s2};
  const std::string path = temp_path("roundtrip.fbp");
  fb::gpu::write_probe_file(path, file);
  const ProbeFile back = fb::gpu::read_probe_file(path);
  REQUIRE(back.sections.size() == 2);
  for (std::size_t s = 0; s < 2; ++s) {
    const auto& x = file.sections[s].header;
    const auto& y = back.sections[s].header;
    CHECK(y.form == x.form);
    CHECK(y.k == x.k);
    CHECK(y.input == x.input);
    CHECK(y.c_format == x.c_format);
    CHECK(y.d_format == x.d_format);
    CHECK(y.batches == x.batches);
    CHECK(y.models == x.models);
    CHECK(y.extra == x.extra);
    CHECK(back.sections[s].words() == file.sections[s].words());
  }
  CHECK(back.sections[1].cases() == 50);
  CHECK(back.sections[1].a(3)[5] == file.sections[1].a(3)[5]);

  // Truncation, bad magic and a bad field each name the file and the field.
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto expect_error = [&](const std::string& content, const std::string& field) {
    const std::string bad = temp_path("bad.fbp");
    std::ofstream(bad, std::ios::binary) << content;
    try {
      fb::gpu::read_probe_file(bad);
      FAIL("no error for a bad file (" << field << ")");
    } catch (const fb::gpu::ProbeFileError& e) {
      const std::string msg = e.what();
      CHECK(msg.find(bad) != std::string::npos);
      CHECK_MESSAGE(msg.find(field) != std::string::npos, msg);
    }
    std::filesystem::remove(bad);
  };
  expect_error(bytes.substr(0, bytes.size() - 3), "cases");
  expect_error("XXPROBE1" + bytes.substr(8), "magic");
  std::string wrong_input = bytes;
  const std::size_t at = wrong_input.find("input=bf16");
  REQUIRE(at != std::string::npos);
  wrong_input.replace(at, 10, "input=bq16");
  expect_error(wrong_input, "input");
  std::string extra = bytes + "x";
  expect_error(extra, "trailing data");
  std::filesystem::remove(path);
}

TEST_CASE("probe_check_detects_corrupted_output") {
  ProbeFile file;
  file.sections = {hopper_section()};
  const std::string path = temp_path("check.fbp");
  fb::gpu::write_probe_file(path, file);
  fb::gpu::ProbeCheckOptions options;
  {
    std::ostringstream out, err;
    const int rc = fb::gpu::run_probe_check(path, options, out, err);
    CHECK_MESSAGE(rc == 0, out.str() << err.str());
    CHECK(out.str().find("600 cases, 600 match, 0 mismatch") != std::string::npos);
  }
  // Flip the last bit of one rule-based result: exactly one mismatch, explained.
  const std::size_t victim = 417;
  file.sections[0].set_d(victim, file.sections[0].d(victim) ^ 1u);
  fb::gpu::write_probe_file(path, file);
  {
    std::ostringstream out, err;
    const int rc = fb::gpu::run_probe_check(path, options, out, err);
    CHECK(rc == 1);
    const std::string text = out.str();
    CHECK_MESSAGE(text.find("1 mismatch") != std::string::npos, text);
    CHECK(text.find("case 417 (batch rule)") != std::string::npos);
    CHECK(text.find("(1 ulp)") != std::string::npos);
    CHECK(text.find("step 0: largest exponent") != std::string::npos);
  }
  {
    std::ostringstream out, err;
    options.json = true;
    CHECK(fb::gpu::run_probe_check(path, options, out, err) == 1);
    CHECK(out.str().find("\"mismatches\": 1") != std::string::npos);
    options.json = false;
  }
  // A model with no preset for the input, and an unreadable file: exit 2, one line.
  {
    std::ostringstream out, err;
    options.model = "sm70";
    CHECK(fb::gpu::run_probe_check(path, options, out, err) == 2);
    CHECK(err.str().find("sm70") != std::string::npos);
    CHECK(err.str().find("no preset for input format") != std::string::npos);
    options.model.clear();
  }
  // A name no preset has is named as unknown, with the known names, not as a missing format.
  {
    std::ostringstream out, err;
    options.model = "cdna3";
    CHECK(fb::gpu::run_probe_check(path, options, out, err) == 2);
    CHECK_MESSAGE(err.str().find("unknown tensor-core model 'cdna3' (known: ") != std::string::npos, err.str());
    CHECK(err.str().find("sm90-wgmma") != std::string::npos);
    CHECK(err.str().find("no preset") == std::string::npos);
    options.model.clear();
  }
  {
    std::ostringstream out, err;
    CHECK(fb::gpu::run_probe_check(path + ".missing", options, out, err) == 2);
    CHECK(err.str().find(".missing") != std::string::npos);
  }
  std::filesystem::remove(path);
}

namespace {

// fp16 bits of an integer |n| <= 2048 (exact), written out here.
std::uint32_t fp16_of_int(int n) {
  if (n == 0) return 0;
  const std::uint32_t sign = n < 0 ? 0x8000u : 0u;
  const int m = n < 0 ? -n : n;
  int e = 0;
  while ((m >> (e + 1)) != 0) ++e;
  return sign | static_cast<std::uint32_t>(e + 15) << 10 | ((static_cast<std::uint32_t>(m) << (10 - e)) & 0x3ffu);
}

// An fp16-accumulate section of small integer dots (every sum exact in fp16, so D is the
// integer sum whatever the alignment rule; an exact zero sum with a non-zero C is +0), its
// three batches interleaved (batch of case i: i % 3 == 0 -> x, i % 5 == 1 -> z, else y).
ProbeSection integer_fp16_section() {
  ProbeSection sec;
  sec.header.form = "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16";
  sec.header.k = 16;
  sec.header.input = fb::formats::fp16;
  sec.header.c_format = fb::formats::fp16;
  sec.header.d_format = fb::formats::fp16;
  sec.header.batches = {"x", "y", "z"};
  sec.header.models = {"sm90-mma"};
  sec.header.extra["source"] = "test:integers";
  std::mt19937 rng(777);
  std::vector<std::uint32_t> a(16), b(16);
  for (int i = 0; i < 300; ++i) {
    int sum = static_cast<int>(rng() % 401) - 200;
    if (sum == 0) sum = 1;
    const std::uint32_t c = fp16_of_int(sum);
    for (int j = 0; j < 16; ++j) {
      const int x = static_cast<int>(rng() % 9) - 4, y = static_cast<int>(rng() % 9) - 4;
      a[j] = fp16_of_int(x);
      b[j] = fp16_of_int(y);
      sum += x * y;
    }
    const std::uint32_t batch = i % 3 == 0 ? 0u : (i % 5 == 1 ? 2u : 1u);
    sec.add_case(batch, c, a.data(), b.data(), fp16_of_int(sum));
  }
  return sec;
}

// The words of case i of a section.
std::vector<std::uint32_t> case_words(const ProbeSection& sec, std::size_t i) {
  const auto& w = sec.words();
  const std::size_t n = sec.words_per_case();
  return {w.begin() + static_cast<std::ptrdiff_t>(i * n), w.begin() + static_cast<std::ptrdiff_t>((i + 1) * n)};
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Checks a --sample-out file against its source: every section, in order, with the same
// header fields, holding exactly the first `n` cases of every batch (fewer where the batch
// has fewer), in file order.
void check_sample_file(const ProbeFile& source, const std::string& sample_path, std::size_t n) {
  const ProbeFile sample = fb::gpu::read_probe_file(sample_path);
  REQUIRE(sample.sections.size() == source.sections.size());
  for (std::size_t s = 0; s < source.sections.size(); ++s) {
    const ProbeSection& from = source.sections[s];
    const ProbeSection& got = sample.sections[s];
    CAPTURE(s);
    CHECK(got.header.form == from.header.form);
    CHECK(got.header.batches == from.header.batches);
    CHECK(got.header.models == from.header.models);
    CHECK(got.header.extra.at("subset") == "sample");
    std::vector<std::size_t> want;
    std::vector<std::size_t> taken(from.header.batches.size());
    for (std::size_t i = 0; i < from.cases(); ++i) {
      if (taken[from.batch(i)]++ < n) want.push_back(i);
    }
    REQUIRE(got.cases() == want.size());
    for (std::size_t j = 0; j < want.size(); ++j) CHECK(case_words(got, j) == case_words(from, want[j]));
    std::vector<std::size_t> per_batch(from.header.batches.size());
    for (std::size_t j = 0; j < got.cases(); ++j) ++per_batch[got.batch(j)];
    for (std::size_t bi = 0; bi < per_batch.size(); ++bi) CHECK(per_batch[bi] == std::min(n, taken[bi]));
  }
}

}  // namespace

TEST_CASE("probe_check_mismatches_out_sample_out_and_jobs") {
  ProbeFile file;
  file.sections = {hopper_section(), integer_fp16_section()};
  // Corrupted outputs: cases 17 (batch integers), 417 and 599 (rule) of section 0, case 5 of
  // section 1 (an fp16 D: its low bit).
  const std::vector<std::size_t> bad0 = {17, 417, 599};
  for (std::size_t i : bad0) file.sections[0].set_d(i, file.sections[0].d(i) ^ 1u);
  file.sections[1].set_d(5, file.sections[1].d(5) ^ 1u);
  const std::string path = temp_path("subsets.fbp"), mism = temp_path("subsets_mismatches.fbp"),
                    sample = temp_path("subsets_sample.fbp");
  fb::gpu::write_probe_file(path, file);
  fb::gpu::ProbeCheckOptions options;
  options.mismatches_out = mism;
  options.sample_out = sample;
  options.sample_per_batch = 3;
  std::string text1, mism1, sample1;
  for (const unsigned jobs : {1u, 4u}) {
    CAPTURE(jobs);
    options.jobs = jobs;
    std::ostringstream out, err;
    CHECK(fb::gpu::run_probe_check(path, options, out, err) == 1);
    CHECK(err.str().empty());
    if (jobs == 1) {
      text1 = out.str();
      mism1 = file_bytes(mism);
      sample1 = file_bytes(sample);
      CHECK(text1.find("batch integers: 200 cases, 199 match, 1 mismatch") != std::string::npos);
      CHECK(text1.find("batch rule: 400 cases, 398 match, 2 mismatch") != std::string::npos);
      CHECK(text1.find("mismatches: 4 cases written to " + mism) != std::string::npos);
    } else {  // the same report and the same files from 4 threads (the sections span several chunks)
      CHECK(out.str() == text1);
      CHECK(file_bytes(mism) == mism1);
      CHECK(file_bytes(sample) == sample1);
    }
  }
  {
    const ProbeFile m = fb::gpu::read_probe_file(mism);
    REQUIRE(m.sections.size() == 2);
    REQUIRE(m.sections[0].cases() == 3);
    for (std::size_t j = 0; j < 3; ++j) CHECK(case_words(m.sections[0], j) == case_words(file.sections[0], bad0[j]));
    REQUIRE(m.sections[1].cases() == 1);
    CHECK(case_words(m.sections[1], 0) == case_words(file.sections[1], 5));
    CHECK(m.sections[1].header.form == file.sections[1].header.form);
    CHECK(m.sections[1].header.d_format == fb::formats::fp16);
    CHECK(m.sections[1].header.batches == file.sections[1].header.batches);
    CHECK(m.sections[0].header.extra.at("subset") == "mismatches");
    CHECK(m.sections[0].header.extra.at("subset_mismatches_total") == "3");
    CHECK(m.sections[0].header.extra.at("source") == "test:independent");
    // Replaying the mismatches file finds exactly those cases again.
    fb::gpu::ProbeCheckOptions plain;
    std::ostringstream out, err;
    CHECK(fb::gpu::run_probe_check(mism, plain, out, err) == 1);
    CHECK(out.str().find("total: 4 cases, 4 mismatch") != std::string::npos);
  }
  check_sample_file(file, sample, 3);
  // --max-mismatches 2: the first two of section 0, in file order; nothing mismatching
  // anywhere: every section written with 0 cases.
  options.max_mismatches = 2;
  options.sample_out.clear();
  {
    std::ostringstream out, err;
    CHECK(fb::gpu::run_probe_check(path, options, out, err) == 1);
    const ProbeFile m = fb::gpu::read_probe_file(mism);
    REQUIRE(m.sections[0].cases() == 2);
    CHECK(case_words(m.sections[0], 0) == case_words(file.sections[0], 17));
    CHECK(case_words(m.sections[0], 1) == case_words(file.sections[0], 417));
    CHECK(m.sections[0].header.extra.at("subset_mismatches_total") == "3");
    CHECK(m.sections[1].cases() == 1);
  }
  for (std::size_t i : bad0) file.sections[0].set_d(i, file.sections[0].d(i) ^ 1u);
  file.sections[1].set_d(5, file.sections[1].d(5) ^ 1u);
  fb::gpu::write_probe_file(path, file);
  {
    std::ostringstream out, err;
    options.json = true;
    CHECK(fb::gpu::run_probe_check(path, options, out, err) == 0);
    const ProbeFile m = fb::gpu::read_probe_file(mism);
    REQUIRE(m.sections.size() == 2);
    CHECK(m.sections[0].cases() == 0);
    CHECK(m.sections[1].cases() == 0);
    // JSON: per batch cases, matches and mismatches; the files written.
    const auto j = nlohmann::json::parse(out.str());
    CHECK(j["forms"][1]["batches"]["x"]["cases"] == 100);
    CHECK(j["forms"][1]["batches"]["x"]["matches"] == 100);
    CHECK(j["forms"][1]["batches"]["z"]["mismatches"] == 0);
    CHECK(j["forms"][0]["matches"] == 600);
    CHECK(j["mismatches_out"]["cases"] == 0);
  }
  // An output file that cannot be written: exit 2, one line naming it.
  {
    std::ostringstream out, err;
    options.json = false;
    options.mismatches_out = temp_path("no_such_dir") + "/m.fbp";
    CHECK(fb::gpu::run_probe_check(path, options, out, err) == 2);
    CHECK(err.str().find("no_such_dir") != std::string::npos);
  }
  for (const std::string& p : {path, mism, sample}) std::filesystem::remove(p);
}

// Found by fuzz/fuzz_probe_file: a header byte that is not UTF-8 (here 0xff in the form)
// used to be read without complaint, and `probe-check --json` then threw nlohmann's
// type_error while writing the report (main's "internal error", exit 3). It is bad input:
// the reader refuses it naming the file and the header, and probe-check exits 2.
TEST_CASE("probe_file_refuses_patterns_wider_than_their_format_and_a_key_given_twice") {
  // A bf16 operand 0xffff3f80 was masked to 3f80 when replayed (and matched as 1.0), and a
  // header key given twice kept its last value.
  ProbeFile file;
  file.sections = {hopper_section()};
  file.sections[0].mutable_words()[2 + 3] |= 0xffff0000u;  // case 0, a[3]
  const std::string wide = temp_path("wide.fbp");
  fb::gpu::write_probe_file(wide, file);
  CHECK_THROWS_WITH_AS(fb::gpu::read_probe_file(wide),
                       (wide + ": section 0: case 0 a[3]: 0xffff" +
                        [&] {
                          char hex[8];
                          std::snprintf(hex, sizeof hex, "%04x", file.sections[0].a(0)[3] & 0xffffu);
                          return std::string(hex);
                        }() +
                        " has bits outside a bf16 pattern")
                           .c_str(),
                       fb::gpu::ProbeFileError);
  std::filesystem::remove(wide);
  file.sections = {hopper_section()};
  const std::string twice = temp_path("twice.fbp");
  fb::gpu::write_probe_file(twice, file);
  std::string bytes;
  {
    std::ifstream in(twice, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::size_t at = bytes.find("c_format=fp32");
  REQUIRE(at != std::string::npos);
  bytes.replace(at, 1, "d");  // the same length: d_format given twice, c_format missing
  std::ofstream(twice, std::ios::binary | std::ios::trunc) << bytes;
  CHECK_THROWS_WITH_AS(fb::gpu::read_probe_file(twice),
                       (twice + ": section 0: header: key 'd_format' is given twice").c_str(), fb::gpu::ProbeFileError);
  std::filesystem::remove(twice);
}

TEST_CASE("probe_file_refuses_a_batch_named_twice_or_unnamed") {
  // Found by the bad-input audit: batches=a,a,... was read, and probe-check --json then
  // counted every case of the twelve batches under one "a" (64 of 1068).
  for (const bool empty : {false, true}) {
    CAPTURE(empty);
    ProbeFile file;
    file.sections = {hopper_section()};
    auto& batches = file.sections[0].header.batches;
    REQUIRE_FALSE(batches.empty());
    batches.push_back(empty ? std::string() : batches.front());
    const std::string path = temp_path("batches.fbp");
    fb::gpu::write_probe_file(path, file);
    const std::string expected =
        empty ? "section 0: batches: batch " + std::to_string(batches.size() - 1) + " has an empty name"
              : "section 0: batches: '" + batches.front() + "' is named twice (batches 0 and " +
                    std::to_string(batches.size() - 1) + ")";
    CHECK_THROWS_WITH_AS(fb::gpu::read_probe_file(path), doctest::Contains(expected.c_str()), fb::gpu::ProbeFileError);
    std::filesystem::remove(path);
  }
}

TEST_CASE("probe_file_header_integers_are_plain_digits") {
  // Found by the bad-input audit: stoll skipped leading spaces and took a sign, so "k= 6" and
  // "k=+6" were read as k = 6. Edited at the same length, so that the section stays framed.
  ProbeFile file;
  file.sections = {hopper_section()};
  const std::string path = temp_path("padded_k.fbp");
  fb::gpu::write_probe_file(path, file);
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::size_t at = bytes.find("\nk=");
  REQUIRE(at != std::string::npos);
  REQUIRE(bytes.compare(at + 2, 3, "=16") == 0);  // hopper_section is k = 16
  for (const char* edit : {"= 6", "=+6", "=\t6"}) {
    CAPTURE(edit);
    std::string edited = bytes;
    edited.replace(at + 2, 3, edit);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << edited;
    CHECK_THROWS_WITH_AS(
        fb::gpu::read_probe_file(path),
        doctest::Contains(("section 0: k: '" + std::string(edit + 1) + "' is not an integer (plain digits)").c_str()),
        fb::gpu::ProbeFileError);
  }
  std::filesystem::remove(path);
}

TEST_CASE("probe_file_header_not_utf8_is_bad_input") {
  ProbeFile file;
  file.sections = {hopper_section()};
  for (const std::string& bad_form : {std::string("mma.sync\xff.f32"), std::string("mma\xc0\xafsync"),
                                      std::string("mma\xed\xa0\x80"), std::string("mma\xe2\x82")}) {
    file.sections[0].header.form = bad_form;
    const std::string path = temp_path("not_utf8.fbp");
    fb::gpu::write_probe_file(path, file);
    try {
      fb::gpu::read_probe_file(path);
      FAIL("no error for a header that is not UTF-8");
    } catch (const fb::gpu::ProbeFileError& e) {
      const std::string msg = e.what();
      CHECK(msg.rfind(path + ": section 0: header: ", 0) == 0);
      CHECK(msg.find("UTF-8") != std::string::npos);
    }
    for (const bool json : {false, true}) {
      std::ostringstream out, err;
      fb::gpu::ProbeCheckOptions options;
      options.json = json;
      CHECK(fb::gpu::run_probe_check(path, options, out, err) == 2);
      CHECK(err.str().find("UTF-8") != std::string::npos);
    }
    std::filesystem::remove(path);
  }
  // Multi-byte UTF-8 (a device name with U+00B5 and U+1F600) is still accepted.
  file.sections[0].header.form = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32";
  file.sections[0].header.extra = {{"device", "NVIDIA \xc2\xb5 \xf0\x9f\x98\x80"}};
  const std::string path = temp_path("utf8.fbp");
  fb::gpu::write_probe_file(path, file);
  CHECK(fb::gpu::read_probe_file(path).sections.at(0).header.extra == file.sections[0].header.extra);
  std::filesystem::remove(path);
}

// ---- fb-mma-probe --dry-run output ------------------------------------------------------
namespace {

using fbref::RefFormat;
namespace ref = fbref;

struct ExpectedForm {
  const char* form;
  int k;
  const RefFormat* input;
  const RefFormat* cd;
  int out_precision;        // the precision ties are placed against (fp8 on Hopper: 13 fraction bits)
  bool products_reach_max;  // some a*b can exceed the output's max finite (bf16/tf32 -> fp32, fp16 -> fp16)
};

double value_of(const RefFormat& f, std::uint32_t bits) { return ref::to_double(ref::decode(f, bits)); }

// Exponent of the leading bit of a finite non-zero double.
int exponent_of(double x) {
  int e = 0;
  std::frexp(x, &e);
  return e - 1;
}

// x (finite, exact in double) is exactly half-way between two neighbours of precision p.
bool is_midpoint(double x, int p) {
  if (x == 0.0 || !std::isfinite(x)) return false;
  const double scaled = std::ldexp(std::fabs(x), p - 1 - exponent_of(x));  // integer part: p bits
  const double twice = scaled * 2.0;
  return twice == std::floor(twice) && scaled != std::floor(scaled);
}

// Exact values as integers in units of 2^-kScale (every finite value, and every product of
// two, of the formats here is one: the smallest bit is 2^-149, a product's 2^-298).
constexpr int kScale = 400;
cpp_int pow2(int e) {
  REQUIRE(e + kScale >= 0);
  return cpp_int(1) << (e + kScale);
}
cpp_int exact_of(const RefFormat& f, std::uint32_t bits) {
  const ref::RefValue v = ref::decode(f, bits);
  REQUIRE((v.cls == ref::Class::finite || v.cls == ref::Class::zero));
  if (v.cls == ref::Class::zero) return 0;
  const cpp_int m = cpp_int(v.significand) << (v.exponent + kScale);
  return v.negative ? cpp_int(-m) : m;
}
cpp_int exact_product(const RefFormat& f, std::uint32_t a, std::uint32_t b) {
  const ref::RefValue x = ref::decode(f, a), y = ref::decode(f, b);
  REQUIRE((x.cls == ref::Class::finite || x.cls == ref::Class::zero));
  REQUIRE((y.cls == ref::Class::finite || y.cls == ref::Class::zero));
  if (x.cls == ref::Class::zero || y.cls == ref::Class::zero) return 0;
  REQUIRE(x.exponent + y.exponent + kScale >= 0);
  const cpp_int m = (cpp_int(x.significand) * y.significand) << (x.exponent + y.exponent + kScale);
  return x.negative != y.negative ? cpp_int(-m) : m;
}
// Alignment exponent of a finite non-zero element: its leading bit position for a normal,
// emin for a subnormal (the published alignment; a product's is the sum of its factors').
int lead_of(const RefFormat& f, std::uint32_t bits) {
  const ref::RefValue v = ref::decode(f, bits);
  return v.significand >> f.man_bits ? v.exponent + f.man_bits : f.emin();
}
cpp_int abs_of(const cpp_int& x) { return x < 0 ? cpp_int(-x) : x; }
// x truncated toward zero to a multiple of 2^e.
cpp_int truncate_to(const cpp_int& x, int e) {
  const cpp_int unit = pow2(e);
  const cpp_int kept = (abs_of(x) / unit) * unit;
  return x < 0 ? cpp_int(-kept) : kept;
}
// x rounded to precision p (subnormal below 2^emin), toward zero or to nearest even; no
// overflow handling (callers stay far below it).
cpp_int round_to(const cpp_int& x, int p, int emin, bool nearest_even) {
  if (x == 0) return 0;
  const cpp_int mag = abs_of(x);
  const int lead = static_cast<int>(msb(mag)) - kScale;
  const int quantum = std::max(lead, emin) - (p - 1);
  if (quantum + kScale <= 0) return x;
  const cpp_int unit = pow2(quantum);
  cpp_int q = mag / unit;
  const cpp_int rem = mag - q * unit;
  if (nearest_even && (2 * rem > unit || (2 * rem == unit && (q & 1) != 0))) ++q;
  return x < 0 ? cpp_int(-(q * unit)) : cpp_int(q * unit);
}

}  // namespace

TEST_CASE("probe_mma_dry_run_file" * doctest::skip()) {
  const char* path = std::getenv("FB_PROBE_DRY_RUN_FILE");
  REQUIRE_MESSAGE(path != nullptr, "run by ctest gpu_mma_probe_dry_run (FB_PROBE_DRY_RUN_FILE)");
  const ProbeFile file = fb::gpu::read_probe_file(path);
  const ExpectedForm forms[] = {
      {"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", 16, &fbref::table::bf16, &fbref::table::fp32, 24, true},
      {"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", 16, &fbref::table::fp16, &fbref::table::fp32, 24, false},
      {"mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16", 16, &fbref::table::fp16, &fbref::table::fp16, 11, true},
      {"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", 8, &fbref::table::tf32, &fbref::table::fp32, 24, true},
      {"wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16", 16, &fbref::table::bf16, &fbref::table::fp32, 24, true},
      {"wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16", 16, &fbref::table::fp16, &fbref::table::fp32, 24, false},
      {"wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3", 32, &fbref::table::e4m3, &fbref::table::fp32, 14, false},
      {"wgmma.mma_async.sync.aligned.m64n8k32.f32.e5m2.e5m2", 32, &fbref::table::e5m2, &fbref::table::fp32, 14, false},
  };
  const std::vector<std::string> batches = {
      "random_bits", "random_normal", "specials",   "ties",    "cancellation", "exponent_gap",  "zero_terms",  "c_huge",
      "c_tiny",      "overflow",      "f_boundary", "chained", "signed_zeros", "zero_exponent", "inf_overflow"};
  REQUIRE(file.sections.size() == std::size(forms));
  for (std::size_t s = 0; s < std::size(forms); ++s) {
    const ExpectedForm& x = forms[s];
    const ProbeSection& sec = file.sections[s];
    const std::string form_name = x.form;
    CAPTURE(form_name);
    CHECK(sec.header.form == x.form);
    REQUIRE(sec.header.k == x.k);
    CHECK(std::string(sec.header.input.name) == x.input->name);
    CHECK(std::string(sec.header.c_format.name) == x.cd->name);
    CHECK(std::string(sec.header.d_format.name) == x.cd->name);
    CHECK(sec.header.batches == batches);
    REQUIRE(!sec.header.models.empty());
    CHECK(sec.header.extra.at("source") == "dry-run:no-gpu");  // never mistaken for a measurement
    // f_boundary is designed against the F of the form's own model, as emu/dot/tensor_core has it.
    const int F = std::stoi(sec.header.extra.at("f_boundary_f"));
    const fb::TensorCoreModel* model = fb::find_tensor_core_model(sec.header.models.front(), sec.header.input);
    REQUIRE(model != nullptr);
    CHECK(model->fraction_bits == F);
    const RefFormat& in = *x.input;
    const RefFormat& cd = *x.cd;
    // Rows are written tile by tile, row by row, 8 columns each; row r of a designed tile is
    // designed against column r % 8 (mma_probe.cu fill_tile). Every batch but chained (two
    // cases per output, a whole number of tiles, so later rows keep their place) has one case
    // per output.
    const int m = sec.header.form.find("wgmma") == 0 ? 64 : 16;
    std::map<std::string, int> designed, passed;
    std::map<ref::Class, int> input_classes, c_classes;
    int input_subnormals = 0, c_subnormals = 0, tf32_low_bits = 0, negative_zero_inputs = 0, d_not_dry = 0;
    std::vector<int> per_batch(batches.size());
    // overflow: the output's max finite M and ulp at M, exactly
    const cpp_int max_finite = cpp_int(cd.max_significand()) * pow2(cd.emax() - cd.man_bits);
    const cpp_int ulp_at_max = pow2(cd.emax() - cd.man_bits);
    std::map<std::string, int> overflow_kinds;
    int f_boundary_visible = 0;
    // signed_zeros: rows of -0 products with C = -0 / C = +0, rows of x, -x pairs with C = -0
    int sz_neg_products_neg_c = 0, sz_neg_products_pos_c = 0, sz_cancel = 0, sz_neg_c = 0;
    // zero_exponent: rows of a zero times the huge partner, rows of C = 0 beside products below
    // C's emin; how many of each show the alignment at the zero's exponent in the rounded output
    int ze_partner = 0, ze_partner_visible = 0, ze_c_zero = 0, ze_c_zero_visible = 0;
    // inf_overflow: (C sign, largest product's sign relative to C) -> rows
    std::map<std::string, int> inf_kinds;
    std::vector<std::size_t> chained_cases;
    for (std::size_t i = 0; i < sec.cases(); ++i) {
      ++per_batch[sec.batch(i)];
      d_not_dry += sec.d(i) != 0xffffffffu ? 1 : 0;
      const std::uint32_t c = sec.c(i);
      const ref::RefValue cv = ref::decode(cd, c);
      ++c_classes[cv.cls];
      if (cv.cls == ref::Class::finite && cv.significand < (std::uint64_t{1} << cd.man_bits)) ++c_subnormals;
      for (int j = 0; j < x.k; ++j) {
        for (std::uint32_t bits : {sec.a(i)[j], sec.b(i)[j]}) {
          const ref::RefValue v = ref::decode(in, bits);
          ++input_classes[v.cls];
          if (v.cls == ref::Class::finite && v.significand < (std::uint64_t{1} << in.man_bits)) ++input_subnormals;
          if (v.cls == ref::Class::zero && v.negative) ++negative_zero_inputs;
          if (in.left_aligned && (bits & 0x1fffu) != 0) ++tf32_low_bits;
        }
      }
      const std::string& batch = batches[sec.batch(i)];
      if (batch == "chained") {
        chained_cases.push_back(i);
        continue;
      }
      const std::size_t row = (i / 8) % static_cast<std::size_t>(m), column = i % 8;
      if (batch == "random_bits" || batch == "random_normal" || batch == "specials" || column != row % 8) continue;
      ++designed[batch];
      const double cval = value_of(cd, c);
      std::vector<double> products(static_cast<std::size_t>(x.k));
      for (int j = 0; j < x.k; ++j) products[j] = value_of(in, sec.a(i)[j]) * value_of(in, sec.b(i)[j]);  // exact
      bool ok = false;
      if (batch == "ties") {
        for (double p : products)
          ok = ok || (p != 0.0 && is_midpoint(cval + p, x.out_precision));  // C + p exact in double
      } else if (batch == "cancellation") {
        const double p = products[0];
        ok = std::isfinite(cval) && cval != 0.0 && p != 0.0 && std::signbit(p) != std::signbit(cval) &&
             std::fabs(cval + p) < std::ldexp(1.0, exponent_of(cval) - in.man_bits);
      } else if (batch == "exponent_gap") {
        int lo = INT_MAX, hi = INT_MIN;
        for (double p : products) {
          if (p == 0.0) continue;
          lo = std::min(lo, exponent_of(p));
          hi = std::max(hi, exponent_of(p));
        }
        ok = hi != INT_MIN && hi - lo >= 10;
      } else if (batch == "zero_terms") {
        int zeros = 0;
        for (int j = 0; j < x.k; ++j) zeros += value_of(in, sec.a(i)[j]) == 0.0 ? 1 : 0;
        ok = 2 * zeros >= x.k;
      } else if (batch == "c_huge") {
        ok = !std::isfinite(cval) || std::fabs(cval) >= std::ldexp(1.0, cd.emax() - 4);
      } else if (batch == "c_tiny") {
        ok = std::isfinite(cval) && std::fabs(cval) < std::ldexp(1.0, cd.emin() + 2);
      } else if (batch == "overflow") {
        // Exact D beyond M, at it or within 4 ulps below it; or C and a product both near M.
        const cpp_int cx = exact_of(cd, c);
        cpp_int sum = cx, largest_product = 0;
        std::vector<cpp_int> ps;
        for (int j = 0; j < x.k; ++j) {
          ps.push_back(exact_product(in, sec.a(i)[j], sec.b(i)[j]));
          sum += ps.back();
          largest_product = std::max(largest_product, abs_of(ps.back()));
        }
        const cpp_int mag = abs_of(sum);
        const bool large_pair = abs_of(cx) >= pow2(cd.emax() - 2) && largest_product >= pow2(cd.emax() - 3);
        ok = mag >= max_finite - 4 * ulp_at_max || large_pair;
        if (sum > max_finite) ++overflow_kinds["over, positive"];
        if (sum < -max_finite) ++overflow_kinds["over, negative"];
        if (mag == max_finite) ++overflow_kinds["exactly max finite"];
        if (mag < max_finite && mag >= max_finite - 4 * ulp_at_max) ++overflow_kinds["just below max finite"];
        if (mag > max_finite && 2 * (mag - max_finite) < ulp_at_max) ++overflow_kinds["over, rounds to max under RNE"];
        if (2 * (mag - max_finite) >= ulp_at_max && mag <= max_finite + 2 * ulp_at_max) {
          ++overflow_kinds["over, rounds to inf under RNE, within 2 ulps"];
        }
        if (mag >= 2 * pow2(cd.emax())) ++overflow_kinds["over by a binade"];
        if (large_pair) ++overflow_kinds["large C and large products"];
        for (std::size_t p1 = 0; p1 < ps.size(); ++p1) {
          for (std::size_t p2 = p1 + 1; p2 < ps.size(); ++p2) {
            if (ps[p1] == -ps[p2] && abs_of(ps[p1]) >= pow2(cd.emax() - 2) && abs_of(cx) >= pow2(cd.emax() - 1)) {
              ++overflow_kinds["C + X - X near M"];
            }
          }
        }
      } else if (batch == "f_boundary") {
        // Terms C and a_j*b_j (only j < 4: one fused step of every model); E the largest
        // alignment exponent; some term F-3..F+3 below E with bits below the grid 2^(E-F).
        std::vector<std::pair<cpp_int, int>> terms;  // exact value, alignment exponent
        bool beyond_4 = false;
        if (exact_of(cd, c) != 0) terms.push_back({exact_of(cd, c), lead_of(cd, c)});
        for (int j = 0; j < x.k; ++j) {
          const cpp_int p = exact_product(in, sec.a(i)[j], sec.b(i)[j]);
          if (p == 0) continue;
          beyond_4 = beyond_4 || j >= 4;
          terms.push_back({p, lead_of(in, sec.a(i)[j]) + lead_of(in, sec.b(i)[j])});
        }
        int e = INT_MIN;
        for (const auto& t : terms) e = std::max(e, t.second);
        bool boundary_term = false;
        cpp_int exact = 0, truncated = 0;
        for (const auto& [v, lead] : terms) {
          const int d = e - lead;
          boundary_term = boundary_term || (d >= F - 3 && d <= F + 3 && truncate_to(v, e - F) != v);
          exact += v;
          truncated += truncate_to(v, e - F);
        }
        ok = !terms.empty() && !beyond_4 && boundary_term;
        // Visible: the output rounding of the truncated sum differs from that of the exact sum.
        const bool rne = cd.man_bits == 10;
        if (ok &&
            round_to(truncated, x.out_precision, cd.emin(), rne) != round_to(exact, x.out_precision, cd.emin(), rne)) {
          ++f_boundary_visible;
        }
      } else if (batch == "signed_zeros") {
        // The exact D is zero. Either every a[i] is a zero and b[i] a non-zero finite of the
        // other sign (every product -0) and C is a zero, or every product is non-zero, they
        // sum to exactly zero and C = -0.
        const ref::RefValue cz = ref::decode(cd, c);
        bool all_neg_zero = true, all_nonzero = true;
        cpp_int sum = 0;
        for (int j = 0; j < x.k; ++j) {
          const ref::RefValue av = ref::decode(in, sec.a(i)[j]), bv = ref::decode(in, sec.b(i)[j]);
          all_neg_zero =
              all_neg_zero && av.cls == ref::Class::zero && bv.cls == ref::Class::finite && av.negative != bv.negative;
          all_nonzero = all_nonzero && av.cls == ref::Class::finite && bv.cls == ref::Class::finite;
          if (all_nonzero) sum += exact_product(in, sec.a(i)[j], sec.b(i)[j]);
        }
        if (cz.cls == ref::Class::zero) {
          if (all_neg_zero) ++(cz.negative ? sz_neg_products_neg_c : sz_neg_products_pos_c);
          if (all_nonzero && sum == 0 && cz.negative) ++sz_cancel;
          sz_neg_c += cz.negative ? 1 : 0;
          ok = all_neg_zero || (all_nonzero && sum == 0 && cz.negative);
        }
      } else if (batch == "zero_exponent") {
        // Exactly one input pair is a zero a_j times the huge partner b_j = +-2^emax; every
        // other product is zero or finite. Even rows: some other product is nonzero; odd rows
        // (when present) C = +-0 and every other product nonzero with its lead in (g, g + man_bits],
        // g = C's emin - F (below C's emin, bits below the grid 2^g).
        int partners = 0, zero_partner = 0, nonzero = 0, below_grid = 0;
        std::vector<std::pair<cpp_int, int>> terms;  // exact value, alignment exponent
        const ref::RefValue cz = ref::decode(cd, c);
        if (cz.cls == ref::Class::finite) terms.push_back({exact_of(cd, c), lead_of(cd, c)});
        bool finite = cz.cls == ref::Class::finite || cz.cls == ref::Class::zero;
        for (int j = 0; j < x.k; ++j) {
          const ref::RefValue av = ref::decode(in, sec.a(i)[j]), bv = ref::decode(in, sec.b(i)[j]);
          finite =
              finite && (av.cls == ref::Class::finite || av.cls == ref::Class::zero) && bv.cls == ref::Class::finite;
          if (bv.cls == ref::Class::finite && std::fabs(value_of(in, sec.b(i)[j])) == std::ldexp(1.0, in.emax())) {
            ++partners;
            zero_partner += av.cls == ref::Class::zero ? 1 : 0;
          } else if (av.cls == ref::Class::finite) {
            ++nonzero;
            const int lead = lead_of(in, sec.a(i)[j]) + lead_of(in, sec.b(i)[j]);
            below_grid += lead > cd.emin() - F && lead <= cd.emin() - F + in.man_bits ? 1 : 0;
            terms.push_back({exact_product(in, sec.a(i)[j], sec.b(i)[j]), lead});
          }
        }
        const bool c_zero_design = cz.cls == ref::Class::zero && nonzero == x.k - 1 && below_grid == nonzero;
        ok = finite && partners == 1 && zero_partner == 1 && nonzero > 0;
        if (ok) {
          // Alignment at the zero's exponent (the partner's zero times 2^emax: emin + emax; a zero
          // C: C's emin) against zero terms ignored: truncation of every term to F bits below the
          // largest exponent, exact sum, the output's rounding.
          int e_ignored = INT_MIN;
          for (const auto& t : terms) e_ignored = std::max(e_ignored, t.second);
          const int e_zero =
              c_zero_design ? std::max(e_ignored, cd.emin()) : std::max(e_ignored, in.emin() + in.emax());
          cpp_int kept_ignored = 0, kept_zero = 0;
          for (const auto& t : terms) {
            kept_ignored += truncate_to(t.first, e_ignored - F);
            kept_zero += truncate_to(t.first, e_zero - F);
          }
          const bool rne = cd.man_bits == 10;
          const bool visible = round_to(kept_ignored, x.out_precision, cd.emin(), rne) !=
                               round_to(kept_zero, x.out_precision, cd.emin(), rne);
          ++(c_zero_design ? ze_c_zero : ze_partner);
          (c_zero_design ? ze_c_zero_visible : ze_partner_visible) += visible ? 1 : 0;
        }
      } else if (batch == "inf_overflow") {
        // C = +-inf; every input finite; the largest product (a_j at the input's top binade)
        // beyond the output's max finite where the inputs can reach it.
        const ref::RefValue cv2 = ref::decode(cd, c);
        bool finite = true;
        int largest = -1;
        double largest_mag = 0.0;
        for (int j = 0; j < x.k; ++j) {
          const ref::RefValue av = ref::decode(in, sec.a(i)[j]), bv = ref::decode(in, sec.b(i)[j]);
          finite = finite && av.cls != ref::Class::nan && av.cls != ref::Class::inf && bv.cls == ref::Class::finite;
          const double mag = std::fabs(products[j]);
          if (mag > largest_mag) largest_mag = mag, largest = j;
        }
        const bool top_binade =
            largest >= 0 && std::fabs(value_of(in, sec.a(i)[largest])) >= std::ldexp(1.0, in.emax());
        const bool beyond_abs =
            largest >= 0 && abs_of(exact_product(in, sec.a(i)[largest], sec.b(i)[largest])) > max_finite;
        ok = cv2.cls == ref::Class::inf && finite && top_binade && (beyond_abs || !x.products_reach_max);
        if (ok) {
          const bool same = std::signbit(products[largest]) == cv2.negative;
          ++inf_kinds[std::string(cv2.negative ? "-inf" : "+inf") + (same ? ", same sign" : ", opposite sign")];
          if (beyond_abs) ++inf_kinds["product beyond max finite"];
        }
      }
      passed[batch] += ok ? 1 : 0;
    }
    for (std::size_t b = 0; b < batches.size(); ++b) CHECK_MESSAGE(per_batch[b] > 0, batches[b]);
    CHECK(input_classes[ref::Class::nan] > 0);
    if (in.has_inf()) CHECK(input_classes[ref::Class::inf] > 0);
    CHECK(input_subnormals > 0);
    CHECK(input_classes[ref::Class::zero] > 0);
    CHECK(negative_zero_inputs > 0);
    CHECK(c_classes[ref::Class::nan] > 0);
    CHECK(c_classes[ref::Class::inf] > 0);
    CHECK(c_classes[ref::Class::zero] > 0);
    CHECK(c_subnormals > 0);
    CHECK(d_not_dry == 0);                          // a dry run measures nothing: every D is 0xffffffff
    if (in.left_aligned) CHECK(tf32_low_bits > 0);  // the hardware's use of the low 13 bits is probed
    // Designed rows: the fraction that must do what the batch promises (ties: 70% of rows
    // place an exact half-ulp term, the rest 3/4 ulp; sticky terms come later in the sum).
    const std::map<std::string, double> required = {
        {"ties", 0.4},         {"cancellation", 0.9},  {"exponent_gap", 0.5}, {"zero_terms", 0.75},
        {"c_huge", 1.0},       {"c_tiny", 1.0},        {"overflow", 1.0},     {"f_boundary", 1.0},
        {"signed_zeros", 1.0}, {"zero_exponent", 1.0}, {"inf_overflow", 1.0}};
    for (const auto& requirement : required) {
      // Named variables, not structured bindings: clang before 16 cannot capture bindings.
      const std::string& batch = requirement.first;
      const double need = requirement.second;
      CAPTURE(batch);
      REQUIRE(designed[batch] > 0);
      CHECK(passed[batch] >= need * designed[batch]);
    }
    // overflow covers both signs beyond M, M itself, the values that round to M, and (where
    // products reach M) the RNE inf side, far overflow, large C with large products and the
    // fused C + X - X.
    std::vector<std::string> kinds = {"over, positive", "over, negative", "exactly max finite",
                                      "over, rounds to max under RNE"};
    if (x.products_reach_max) {
      for (const char* k : {"just below max finite", "over, rounds to inf under RNE, within 2 ulps", "over by a binade",
                            "large C and large products", "C + X - X near M"}) {
        kinds.push_back(k);
      }
    }
    for (const std::string& kind : kinds) CHECK_MESSAGE(overflow_kinds[kind] > 0, kind);
    // f_boundary: truncation at F changes the output for most designed rows (all three designs
    // can, the on-a-boundary design only when every boundary term lies wholly below the grid).
    CHECK_MESSAGE(f_boundary_visible * 2 >= designed["f_boundary"], f_boundary_visible, " of ", designed["f_boundary"]);
    // signed_zeros: rows cycle by 4 (mma_probe.cu design_signed_zeros) and every batch holds
    // a multiple of 16 designed rows: C = -0 in exactly 3 of 4, a quarter x - x rows, a
    // quarter -0 products with C = +0, half -0 products with C = -0.
    {
      const int n = designed["signed_zeros"];
      CHECK(n % 16 == 0);
      CHECK(4 * sz_neg_c == 3 * n);
      CHECK(4 * sz_cancel == n);
      CHECK(4 * sz_neg_products_pos_c == n);
      CHECK(2 * sz_neg_products_neg_c == n);
    }
    // zero_exponent: aligning at the zero's exponent changes the rounded output in most rows
    // (not for fp16 outputs, whose subnormal ulp lies above every lost bit); the C = 0 rows
    // exist where products reach below C's emin - F + man_bits (bf16 and tf32 inputs).
    {
      MESSAGE(form_name, ": zero_exponent partner rows ", ze_partner, " (visible ", ze_partner_visible,
              "), C = 0 rows ", ze_c_zero, " (visible ", ze_c_zero_visible, ")");
      CHECK(ze_partner > 0);
      if (cd.man_bits != 10) CHECK(ze_partner_visible * 4 >= ze_partner * 3);
      if (in.exp_bits == 8) {
        CHECK(ze_c_zero * 2 == designed["zero_exponent"]);
        CHECK(ze_c_zero_visible * 4 >= ze_c_zero);
      } else {
        CHECK(ze_c_zero == 0);
      }
    }
    // inf_overflow: the four (C sign, product sign) kinds in equal numbers; products beyond the
    // output's range in every row where the inputs can reach it.
    {
      const int n = designed["inf_overflow"];
      CHECK(n % 16 == 0);
      for (const char* kind : {"+inf, same sign", "+inf, opposite sign", "-inf, same sign", "-inf, opposite sign"}) {
        CHECK_MESSAGE(4 * inf_kinds[kind] == n, kind);
      }
      CHECK(inf_kinds["product beyond max finite"] == (x.products_reach_max ? n : 0));
    }
    // chained: pairs (C, a, b, D1), (D1, a, b, D2) of random normal inputs, as many outputs as
    // any other batch; in a dry run D1 = D2 = 0xffffffff, so the second C is that pattern too.
    REQUIRE(chained_cases.size() == 2 * static_cast<std::size_t>(per_batch[1]));
    for (std::size_t j = 0; j < chained_cases.size(); j += 2) {
      const std::size_t first = chained_cases[j], second = chained_cases[j + 1];
      REQUIRE(second == first + 1);
      CHECK(sec.c(second) == sec.d(first));
      CHECK(std::equal(sec.a(first), sec.a(first) + 2 * x.k, sec.a(second)));  // a then b
      const ref::RefValue c1 = ref::decode(cd, sec.c(first));
      CHECK(c1.cls == ref::Class::finite);
      for (int k = 0; k < x.k; ++k) CHECK(ref::decode(in, sec.a(first)[k]).cls == ref::Class::finite);
    }
  }

  // probe-check's subsets on this file with D filled in from the emu (fused_dot_bits under the
  // header's model; a chained pair's second C = its first D), one D bit flipped: the
  // mismatches file holds exactly that case, the sample the first N cases of every batch.
  ProbeFile filled = file;
  std::size_t victim_section = 2, victim = 0;
  for (std::size_t s = 0; s < filled.sections.size(); ++s) {
    ProbeSection& sec = filled.sections[s];
    const fb::TensorCoreModel* model = fb::find_tensor_core_model(sec.header.models.front(), sec.header.input);
    REQUIRE(model != nullptr);
    const std::size_t k = static_cast<std::size_t>(sec.header.k), per_case = sec.words_per_case();
    const auto chained =
        static_cast<std::uint32_t>(std::find(batches.begin(), batches.end(), "chained") - batches.begin());
    std::size_t chained_seen = 0;
    for (std::size_t i = 0; i < sec.cases(); ++i) {
      if (sec.batch(i) == chained && chained_seen++ % 2 == 1) sec.mutable_words()[i * per_case + 1] = sec.d(i - 1);
      sec.set_d(i, fb::fused_dot_bits(*model, sec.c(i), {sec.a(i), k}, {sec.b(i), k}));
    }
  }
  {
    ProbeSection& sec = filled.sections[victim_section];  // the fp16-accumulate form: a 16-bit D
    const auto boundary =
        static_cast<std::uint32_t>(std::find(batches.begin(), batches.end(), "f_boundary") - batches.begin());
    while (sec.batch(victim) != boundary || ref::decode(fbref::table::fp16, sec.d(victim)).cls == ref::Class::nan)
      ++victim;
    sec.set_d(victim, sec.d(victim) ^ 1u);
  }
  const std::string filled_path = temp_path("dry_filled.fbp"), mism = temp_path("dry_mismatches.fbp"),
                    sample = temp_path("dry_sample.fbp");
  fb::gpu::write_probe_file(filled_path, filled);
  fb::gpu::ProbeCheckOptions options;
  options.mismatches_out = mism;
  options.sample_out = sample;
  options.sample_per_batch = 5;
  options.max_report = 1;
  std::string text_one_thread, mism_one_thread;
  for (const unsigned jobs : {1u, 3u}) {
    options.jobs = jobs;
    std::ostringstream out, err;
    CHECK(fb::gpu::run_probe_check(filled_path, options, out, err) == 1);
    CHECK_MESSAGE(out.str().find("total: " + std::to_string([&] {
                                   std::size_t n = 0;
                                   for (const auto& sec : filled.sections) n += sec.cases();
                                   return n;
                                 }()) +
                                 " cases, 1 mismatch") != std::string::npos,
                  out.str());
    if (jobs == 1) {
      text_one_thread = out.str();
      mism_one_thread = file_bytes(mism);
    } else {
      CHECK(out.str() == text_one_thread);
      CHECK(file_bytes(mism) == mism_one_thread);
    }
  }
  const ProbeFile m = fb::gpu::read_probe_file(mism);
  REQUIRE(m.sections.size() == filled.sections.size());
  for (std::size_t s = 0; s < m.sections.size(); ++s) {
    CHECK(m.sections[s].header.form == filled.sections[s].header.form);
    CHECK(m.sections[s].cases() == (s == victim_section ? 1u : 0u));
  }
  CHECK(case_words(m.sections[victim_section], 0) == case_words(filled.sections[victim_section], victim));
  check_sample_file(filled, sample, 5);
  for (const std::string& p : {filled_path, mism, sample}) std::filesystem::remove(p);
}

// ---- SFU capture tables -----------------------------------------------------------------
namespace {

// fp32 bits of the correctly rounded (RNE) 2^(i / 2^n), from MPFR.
std::uint32_t exp2_rne_bits(std::uint32_t i, int n) {
  mpfr_t x, y;
  mpfr_init2(x, 64);
  mpfr_init2(y, 24);
  mpfr_set_ui(x, i, MPFR_RNDN);
  mpfr_div_2ui(x, x, static_cast<unsigned long>(n), MPFR_RNDN);  // exact
  mpfr_exp2(y, x, MPFR_RNDN);
  const float f = mpfr_get_flt(y, MPFR_RNDN);  // exact: y has 24 bits, in [1, 2)
  mpfr_clear(x);
  mpfr_clear(y);
  return float_bits(f);
}

struct CaptureSpec {
  std::string function = "ex2", key = "ex2_fixed_point_floor", mismatches = "0";
  int n = 6;
  std::uint32_t entries = 0;  // 0: 2^n
  std::string extra_header;   // more "key=value\n" lines
  std::string tail;           // bytes after the escapes (lg2_extended: the residuals)
  std::vector<int> deltas;    // per key, -7..7 or -8 (escaped)
  std::vector<std::pair<std::uint32_t, std::uint32_t>> escapes;
  bool drop_last_escape = false;
};

// An FBSFUT1 file written from traces/README.md's layout.
std::string write_capture(const std::string& name, const CaptureSpec& spec) {
  std::string out =
      "FBSFUT1\nfunction=" + spec.function + "\nkey=" + spec.key + "\nkey_bits=" + std::to_string(spec.n) +
      "\nentries=" + std::to_string(spec.entries ? spec.entries : 1u << spec.n) +
      "\nnan_output=2147483647\nsource=cuda:Test GPU\n" +
      "device=Test GPU\ncompute_capability=9.0\ndriver=1\ncuda_runtime=1\ntable_model_mismatches=" + spec.mismatches +
      "\n" + spec.extra_header + "end\n";
  for (std::size_t i = 0; i < spec.deltas.size(); i += 2) {
    out.push_back(static_cast<char>((spec.deltas[i] & 0xf) | ((spec.deltas[i + 1] & 0xf) << 4)));
  }
  const std::size_t count = spec.escapes.size() - (spec.drop_last_escape ? 1 : 0);
  auto put = [&](std::uint32_t v) {
    for (int b = 0; b < 4; ++b) out.push_back(static_cast<char>((v >> (8 * b)) & 0xffu));
  };
  put(static_cast<std::uint32_t>(count));
  for (std::size_t e = 0; e < count; ++e) {
    put(spec.escapes[e].first);
    put(spec.escapes[e].second);
  }
  out += spec.tail;
  const std::string path = temp_path(name);
  std::ofstream(path, std::ios::binary) << out;
  return path;
}

}  // namespace

TEST_CASE("sfu_capture_table_converts_to_the_emu_table_model") {
  for (const std::string rounding : {"floor", "nearest_even", "toward_zero"}) {
    CAPTURE(rounding);
    CaptureSpec spec;
    spec.key = "ex2_fixed_point_" + rounding;
    const int n = spec.n, entries = 1 << n;
    std::mt19937 rng(99);
    std::vector<std::uint32_t> expected(entries);
    for (int i = 0; i < entries; ++i) {
      int d = static_cast<int>(rng() % 15) - 7;
      if (i % 11 == 3) d = -8;  // escaped: an explicit output far from the correct value
      spec.deltas.push_back(d);
      const std::uint32_t correct = exp2_rne_bits(static_cast<std::uint32_t>(i), n);
      if (d == -8) {
        expected[i] = correct + 20u + static_cast<std::uint32_t>(i);
        spec.escapes.push_back({static_cast<std::uint32_t>(i), expected[i]});
      } else {
        expected[i] = correct + static_cast<std::uint32_t>(d);
      }
    }
    const std::string in = write_capture("cap_" + rounding + ".fbsfut", spec);
    const fb::SfuTable table = fb::gpu::sfu_capture_to_table(in);
    CHECK(table.measured_on_hardware);
    CHECK(table.fraction_bits == n);
    CHECK(table.nan_output == 0x7fffffffu);
    CHECK(table.source.find("Test GPU") != std::string::npos);
    const std::string out = temp_path("cap_" + rounding + ".fbsfu");
    fb::write_table_file(out, table);
    const auto model = fb::load_table_model(out);
    CHECK(model->hardware_measured());
    // x = k + (i + frac) / 2^n: the key is i (or a neighbour, by the rounding rule written
    // here) and the result T[key] * 2^k, exact in float for these small k.
    const double fracs[] = {0.0, 0.25, 0.5, 0.75};
    for (int k : {-3, -1, 0, 2}) {
      for (int i = 0; i < entries; ++i) {
        for (double frac : fracs) {
          const double exact_arg = k + (i + frac) / entries;
          const float x = static_cast<float>(exact_arg);  // exact: few bits
          REQUIRE(static_cast<double>(x) == exact_arg);
          double scaled = exact_arg * entries;  // exact
          double fixed = std::floor(scaled);
          if (rounding == "toward_zero") fixed = std::trunc(scaled);
          if (rounding == "nearest_even") fixed = std::nearbyint(scaled);  // default FE_TONEAREST: ties to even
          const long long q = static_cast<long long>(fixed);
          const long long kk = (q - (((q % entries) + entries) % entries)) / entries;
          const int key = static_cast<int>(((q % entries) + entries) % entries);
          float t;
          std::memcpy(&t, &expected[key], 4);
          const float want = std::ldexp(t, static_cast<int>(kk));
          const float got = model->evaluate(x);
          CHECK_MESSAGE(float_bits(got) == float_bits(want), "x=" << exact_arg << " key " << key);
        }
      }
    }
    float nan_in;
    const std::uint32_t qnan = 0x7fc00000u;
    std::memcpy(&nan_in, &qnan, 4);
    CHECK(float_bits(model->evaluate(nan_in)) == 0x7fffffffu);
    std::filesystem::remove(in);
    std::filesystem::remove(out);
  }

  auto expect_refusal = [](const std::string& path, const std::string& field) {
    try {
      fb::gpu::sfu_capture_to_table(path);
      FAIL("no error (" << field << ")");
    } catch (const std::runtime_error& e) {
      const std::string msg = e.what();
      CHECK_MESSAGE(msg.find(path) != std::string::npos, msg);
      CHECK_MESSAGE(msg.find(field) != std::string::npos, msg);
    }
    std::filesystem::remove(path);
  };
  CaptureSpec good;
  good.deltas.assign(64, 0);
  good.deltas[5] = -8;
  good.escapes = {{5u, 0x3f800000u}};
  CaptureSpec mismatched = good;
  mismatched.mismatches = "12";
  expect_refusal(write_capture("mismatch.fbsfut", mismatched), "table_model_mismatches");
  CaptureSpec other_function = good;
  other_function.function = "tanh";
  expect_refusal(write_capture("tanh.fbsfut", other_function), "function");
  CaptureSpec lg2 = good;
  lg2.function = "lg2";
  lg2.key = "lg2_whatever";
  expect_refusal(write_capture("lg2.fbsfut", lg2), "key");
  CaptureSpec lg2_bits = good;  // an lg2 exponent-split table has 23 key bits
  lg2_bits.function = "lg2";
  lg2_bits.key = "lg2_exponent_split";
  expect_refusal(write_capture("lg2bits.fbsfut", lg2_bits), "key_bits");
  CaptureSpec rcp = good;  // an rcp mantissa table has 23 key bits
  rcp.function = "rcp";
  rcp.key = "rcp_mantissa";
  expect_refusal(write_capture("rcp.fbsfut", rcp), "key_bits");
  CaptureSpec rcp_key = good;
  rcp_key.function = "rcp";
  expect_refusal(write_capture("rcpkey.fbsfut", rcp_key), "key");
  CaptureSpec unknown_key = good;
  unknown_key.key = "ex2_fixed_point_sideways";
  expect_refusal(write_capture("key.fbsfut", unknown_key), "key");
  CaptureSpec missing_escape = good;
  missing_escape.drop_last_escape = true;
  expect_refusal(write_capture("escape.fbsfut", missing_escape), "escapes");
  // Header lines must be key=value with a non-empty key (traces/key_value_line.hpp); a value
  // may hold '=' itself.
  for (const std::string bad_line : {"no equals sign\n", "=value without a key\n"}) {
    CaptureSpec bad_header = good;
    bad_header.extra_header = bad_line;
    expect_refusal(write_capture("header.fbsfut", bad_header),
                   "header: line '" + bad_line.substr(0, bad_line.size() - 1));
  }
  CaptureSpec equals_in_value = good;
  equals_in_value.extra_header = "program=fb-sfu-probe --ex2-bits=23\n";
  const std::string with_equals = write_capture("equals.fbsfut", equals_in_value);
  CHECK(fb::gpu::sfu_capture_to_table(with_equals).fraction_bits == good.n);
  std::filesystem::remove(with_equals);
  const std::string truncated = write_capture("trunc.fbsfut", good);
  {
    std::ifstream in(truncated, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(truncated, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() - 20);
  }
  expect_refusal(truncated, "file ends early");
}

namespace {

// The FBSFU1 rcp_mantissa rule for a normal x, written here: +-T[m] * 2^-e exactly (long
// double), inf from 2^128 up, signed zero below 2^-126, a NaN entry as is.
std::uint32_t rcp_mantissa_rule(std::uint32_t x_bits, std::uint32_t t_bits) {
  float t;
  std::memcpy(&t, &t_bits, 4);
  if (std::isnan(t)) return t_bits;
  const int e = static_cast<int>((x_bits >> 23) & 0xffu) - 127;
  const long double v = std::ldexp(static_cast<long double>(t), -e) * ((x_bits >> 31) ? -1.0L : 1.0L);
  if (std::fabs(v) >= 0x1p128L) return std::signbit(v) ? 0xff800000u : 0x7f800000u;
  if (std::fabs(v) < 0x1p-126L) return std::signbit(v) ? 0x80000000u : 0u;
  return float_bits(static_cast<float>(v));
}

// Inputs on which a device table model (gpu/sfu_table_model.hpp) is compared with the emu's:
// a stride over all 2^32 bit patterns, random patterns, each edge of either sign with its
// 64 neighbours each side, and every listed mantissa field in every binade, both signs.
std::vector<std::uint32_t> mirror_inputs(bool small, std::mt19937& rng, std::initializer_list<float> edges,
                                         const std::vector<std::uint32_t>& mantissas) {
  std::vector<std::uint32_t> inputs;
  for (std::uint64_t b = 0; b < (1ull << 32); b += small ? 262139 : 4093)
    inputs.push_back(static_cast<std::uint32_t>(b));
  for (int i = 0; i < (small ? 20000 : 1000000); ++i) inputs.push_back(static_cast<std::uint32_t>(rng()));
  for (float edge : edges) {
    for (std::uint32_t sign : {0u, 0x80000000u}) {
      const std::uint32_t e = float_bits(edge) | sign;
      for (std::uint32_t d = 0; d < 64; ++d) {
        inputs.push_back(e + d);
        inputs.push_back(e - d);
      }
    }
  }
  for (std::uint32_t biased = 0; biased <= 255; ++biased) {
    for (std::uint32_t m : mantissas) {
      inputs.push_back((biased << 23) | m);
      inputs.push_back(0x80000000u | (biased << 23) | m);
    }
  }
  return inputs;
}

// device(x) against emu.evaluate(x), bit for bit on every input; the first 5 differences
// fail a check each. Returns how many differ.
template <class Device>
std::size_t count_mirror_differences(const std::vector<std::uint32_t>& inputs, Device device,
                                     const fb::SpecialFunctionModel& emu) {
  std::size_t differ = 0;
  for (std::uint32_t in : inputs) {
    float x;
    std::memcpy(&x, &in, 4);
    const std::uint32_t mirror = device(x);
    const std::uint32_t reference = float_bits(emu.evaluate(x));
    if (mirror != reference && ++differ <= 5) {
      char line[96];
      std::snprintf(line, sizeof line, "x bits 0x%08x: device model 0x%08x, emu 0x%08x", in, mirror, reference);
      FAIL_CHECK(line);
    }
  }
  return differ;
}

// A mantissa-table capture file (rcp or lg2) converted: the table's header fields are
// checked here, its entries by the caller.
fb::SfuTable convert_mantissa_capture(const std::string& capture_path, fb::SpecialFunction function,
                                      fb::SfuTableForm form, std::uint32_t entries) {
  const fb::SfuTable table = fb::gpu::sfu_capture_to_table(capture_path);
  CHECK(table.function == function);
  CHECK(table.form == form);
  CHECK(table.measured_on_hardware);
  CHECK(table.nan_output == 0x7fffffffu);
  CHECK(table.source.find("Test GPU") != std::string::npos);
  REQUIRE(table.mantissa_outputs.size() == entries);
  return table;
}

}  // namespace

TEST_CASE("sfu_capture_rcp_table_converts_to_the_emu_table_model") {
  // The integer reference agrees with MPFR (24-bit 1 / 1.m) on a stride of mantissas.
  {
    mpfr_t x, y;
    mpfr_init2(x, 24);
    mpfr_init2(y, 24);
    for (std::uint32_t m = 0; m < (1u << 23); m += 1009) {
      mpfr_set_ui_2exp(x, (1u << 23) + m, -23, MPFR_RNDN);  // exact
      mpfr_ui_div(y, 1, x, MPFR_RNDN);
      REQUIRE(exact_rcp_of_one_point_m(m) == float_bits(mpfr_get_flt(y, MPFR_RNDN)));
    }
    mpfr_clear(x);
    mpfr_clear(y);
  }
  constexpr int n = 23;
  constexpr std::uint32_t entries = 1u << n;
  CaptureSpec spec;
  spec.function = "rcp";
  spec.key = "rcp_mantissa";
  spec.n = n;
  std::mt19937 rng(4242);
  std::vector<std::uint32_t> expected(entries);
  spec.deltas.resize(entries);
  for (std::uint32_t m = 0; m < entries; ++m) {
    int d = static_cast<int>(rng() % 15) - 7;
    if (m % 100003 == 3 || m == 0x2aaaaau) d = -8;  // escaped: an explicit output
    spec.deltas[m] = d;
    if (d == -8) {
      expected[m] =
          m == 0x2aaaaau ? 0x40800000u : exact_rcp_of_one_point_m(m) + 1000u + m % 7;  // 4: overflows at e = -126
      spec.escapes.push_back({m, expected[m]});
    } else {
      expected[m] = exact_rcp_of_one_point_m(m) + static_cast<std::uint32_t>(d);
    }
  }
  const std::string in = write_capture("cap_rcp.fbsfut", spec);
  const fb::SfuTable table =
      convert_mantissa_capture(in, fb::SpecialFunction::rcp, fb::SfuTableForm::rcp_mantissa, entries);
  std::size_t differ = 0;
  for (std::uint32_t m = 0; m < entries; ++m) differ += table.mantissa_outputs[m] != expected[m];
  CHECK(differ == 0);
  const std::string out = temp_path("cap_rcp.fbsfu");
  fb::write_table_file(out, table);
  const auto model = fb::load_table_model(out);
  CHECK(model->hardware_measured());
  CHECK(model->function() == fb::SpecialFunction::rcp);
  // Inputs over every binade and both signs, at mantissas with every kind of entry.
  std::vector<std::uint32_t> mantissas = {0, 1, 3, 0x2aaaaau, 0x7fffffu, 100003 + 3};
  for (int i = 0; i < 30; ++i) mantissas.push_back(rng() & 0x7fffffu);
  std::size_t inf_results = 0;
  for (std::uint32_t biased = 1; biased <= 254; ++biased) {
    for (std::uint32_t m : mantissas) {
      for (std::uint32_t sign : {0u, 0x80000000u}) {
        const std::uint32_t x_bits = sign | (biased << 23) | m;
        float x;
        std::memcpy(&x, &x_bits, 4);
        const std::uint32_t want = rcp_mantissa_rule(x_bits, expected[m]);
        inf_results += (want & 0x7fffffffu) == 0x7f800000u;
        const std::uint32_t got = float_bits(model->evaluate(x));
        if (got != want) {
          char line[96];
          std::snprintf(line, sizeof line, "x bits 0x%08x: model 0x%08x, want 0x%08x", x_bits, got, want);
          FAIL(line);
        }
      }
    }
  }
  CHECK(inf_results == 2);  // T = 4 at e = -126, both signs
  float nan_in;
  const std::uint32_t qnan = 0x7fc00000u;
  std::memcpy(&nan_in, &qnan, 4);
  CHECK(float_bits(model->evaluate(nan_in)) == 0x7fffffffu);
  CHECK(float_bits(model->evaluate(0.0f)) == 0x7f800000u);
  CHECK(float_bits(model->evaluate(-HUGE_VALF)) == 0x80000000u);
  std::filesystem::remove(in);
  std::filesystem::remove(out);
}

TEST_CASE("sfu_device_rcp_table_model_matches_the_emu_table_model") {
  const bool small =
      std::getenv("FLASHBITS_TEST_SCALE") && std::string(std::getenv("FLASHBITS_TEST_SCALE")) == "sanitizer";
  std::mt19937 rng(2025);
  fb::SfuTable table;
  table.function = fb::SpecialFunction::rcp;
  table.form = fb::SfuTableForm::rcp_mantissa;
  table.nan_output = 0x7fffffffu;
  table.source = "test: synthetic";
  table.mantissa_outputs.resize(fb::gpu::kRcpMantissaTableEntries);
  for (std::uint32_t m = 0; m < fb::gpu::kRcpMantissaTableEntries; ++m) {
    table.mantissa_outputs[m] =
        exact_rcp_of_one_point_m(m) + static_cast<std::uint32_t>(static_cast<int>(rng() % 9) - 4);
  }
  // Entries beyond what hardware returns: each special case of the rule.
  const std::vector<std::pair<std::uint32_t, std::uint32_t>> special = {
      {0u, 0x3f7fffffu},  {1u, 0x3f800000u},  {2u, 0x7fc00000u},  {3u, 0xffc00123u},       {4u, 0x40800000u},
      {5u, 0x407fffffu},  {6u, 0xbf400000u},  {7u, 0x00000000u},  {8u, 0x80000000u},       {9u, 0x00400000u},
      {10u, 0x80000001u}, {11u, 0x7f800000u}, {12u, 0xff800000u}, {0x7fffffu, 0x3f000001u}};
  for (const auto& [m, bits] : special) table.mantissa_outputs[m] = bits;
  const std::string path = temp_path("mirror_rcp.fbsfu");
  fb::write_table_file(path, table);
  const auto emu = fb::load_table_model(path);

  std::vector<std::uint32_t> special_mantissas;
  for (const auto& entry : special) special_mantissas.push_back(entry.first);
  const std::vector<std::uint32_t> inputs = mirror_inputs(
      small, rng, {0x1p126f, 0x1p127f, 0x1p-126f, 0x1p-125f, 1.f, 2.f, 0.f, 0x1p-130f, HUGE_VALF, 0x1.fffffep127f},
      special_mantissas);
  const std::size_t differ = count_mirror_differences(
      inputs, [&](float x) { return fb::gpu::rcp_table_model(x, table.mantissa_outputs.data(), table.nan_output); },
      *emu);
  CHECK(differ == 0);
  std::filesystem::remove(path);
}

namespace {

// fp32 bits of the correctly rounded (RNE) lg2(1.m), from MPFR.
std::uint32_t lg2_rne_bits(std::uint32_t m) {
  mpfr_t x, y;
  mpfr_init2(x, 24);
  mpfr_init2(y, 24);
  mpfr_set_ui_2exp(x, (1u << 23) + m, -23, MPFR_RNDN);  // exact
  mpfr_log2(y, x, MPFR_RNDN);
  const float f = mpfr_get_flt(y, MPFR_RNDN);  // exact: 24 bits, in [0, 1)
  mpfr_clear(x);
  mpfr_clear(y);
  return float_bits(f);
}

// The FBSFU1 lg2_exponent_split rule for a positive normal x, written here: a NaN entry as is,
// otherwise e + T rounded once to 24 bits (MPFR, RNE, IEEE signed zeros), a sum below 2^-126
// flushed to zero of its sign (here only e = 0 with a subnormal T, where the sum is exact).
std::uint32_t lg2_split_rule(std::uint32_t x_bits, std::uint32_t t_bits, bool* inexact = nullptr) {
  float t;
  std::memcpy(&t, &t_bits, 4);
  if (std::isnan(t)) return t_bits;
  mpfr_t sum, tm, em;
  mpfr_inits2(24, sum, tm, em, (mpfr_ptr) nullptr);
  mpfr_set_flt(tm, t, MPFR_RNDN);                                               // exact
  mpfr_set_si(em, static_cast<long>((x_bits >> 23) & 0xffu) - 127, MPFR_RNDN);  // exact
  const int ternary = mpfr_add(sum, tm, em, MPFR_RNDN);
  if (inexact) *inexact = ternary != 0;
  const float f = mpfr_get_flt(sum, MPFR_RNDN);  // exact: 24 bits
  mpfr_clears(sum, tm, em, (mpfr_ptr) nullptr);
  if (f != 0.f && std::fabs(f) < 0x1p-126f) return float_bits(f) & 0x80000000u;
  return float_bits(f);
}

}  // namespace

TEST_CASE("sfu_capture_lg2_table_converts_and_device_model_matches_the_emu") {
  // One test case for the conversion and the device mirror: each 2^23-entry conversion, write
  // or load costs about 0.35 s.
  const bool small =
      std::getenv("FLASHBITS_TEST_SCALE") && std::string(std::getenv("FLASHBITS_TEST_SCALE")) == "sanitizer";
  constexpr int n = 23;
  constexpr std::uint32_t entries = 1u << n;
  CaptureSpec spec;
  spec.function = "lg2";
  spec.key = "lg2_exponent_split";
  spec.n = n;
  std::mt19937 rng(4343);
  // Escaped entries: explicit outputs far from lg2(1.m), and each special case of the rule.
  const std::vector<std::pair<std::uint32_t, std::uint32_t>> special = {
      {0x2aaaaau, 0x7fc00123u},   // NaN with a payload: returned as is
      {0x155555u, 0x00400000u},   // subnormal 2^-127: flushed at e = 0
      {0x012345u, 0x80400000u},   // -2^-127: -0 at e = 0
      {0x333333u, 0x80000000u},   // -0: +0 at e = 0
      {0x444444u, 0x7f800000u},   // +inf
      {0x555555u, 0xff800000u},   // -inf
      {0x666666u, 0xbf800000u},   // -1: +0 at e = 1
      {0x777777u, 0x3f7fffffu}};  // 1 - 2^-24: -2^-24 at e = -1, 128 at e = 127
  std::map<std::uint32_t, std::uint32_t> escaped(special.begin(), special.end());
  for (std::uint32_t m = 3; m < entries; m += 100003)
    escaped.emplace(m, 0x3f000000u + m % 977);  // explicit, in [0.5, 1)
  spec.deltas.resize(entries);
  for (std::uint32_t m = 0; m < entries; ++m) spec.deltas[m] = escaped.count(m) ? -8 : static_cast<int>(rng() % 15) - 7;
  spec.deltas[0] = 0;  // T[0] = lg2(1) = +0, not a negative delta from +0's bits
  for (const auto& [m, bits] : escaped) spec.escapes.push_back({m, bits});
  // The expected entry at m: the escaped bits, or MPFR's lg2(1.m) plus the delta.
  auto expected = [&](std::uint32_t m) {
    const auto it = escaped.find(m);
    return it != escaped.end() ? it->second : lg2_rne_bits(m) + static_cast<std::uint32_t>(spec.deltas[m]);
  };
  const std::string in = write_capture("cap_lg2.fbsfut", spec);
  const fb::SfuTable table =
      convert_mantissa_capture(in, fb::SpecialFunction::lg2, fb::SfuTableForm::lg2_exponent_split, entries);
  std::vector<std::uint32_t> sampled = {0, 1, 2, 0x7fffffu, 0x400000u};
  for (std::uint32_t m = 0; m < entries; m += small ? 100019 : 1009) sampled.push_back(m);
  for (const auto& e : escaped) sampled.push_back(e.first);
  std::size_t differ = 0;
  for (std::uint32_t m : sampled) differ += table.mantissa_outputs[m] != expected(m);
  CHECK(differ == 0);

  const std::string out = temp_path("cap_lg2.fbsfu");
  fb::write_table_file(out, table);
  const auto model = fb::load_table_model(out);
  CHECK(model->hardware_measured());
  CHECK(model->function() == fb::SpecialFunction::lg2);
  // The rule over every binade, at mantissas with every kind of entry.
  std::vector<std::uint32_t> mantissas = {0, 1, 3, 0x7fffffu, 0x400000u};
  for (const auto& s : special) mantissas.push_back(s.first);
  for (int i = 0; i < (small ? 5 : 30); ++i) mantissas.push_back(rng() & 0x7fffffu);
  std::vector<std::uint32_t> t_of(mantissas.size());
  for (std::size_t i = 0; i < mantissas.size(); ++i) t_of[i] = expected(mantissas[i]);
  std::size_t inexact_sums = 0;
  for (std::uint32_t biased = 1; biased <= 254; ++biased) {
    for (std::size_t i = 0; i < mantissas.size(); ++i) {
      const std::uint32_t x_bits = (biased << 23) | mantissas[i];
      float x;
      std::memcpy(&x, &x_bits, 4);
      bool inexact = false;
      const std::uint32_t want = lg2_split_rule(x_bits, t_of[i], &inexact);
      inexact_sums += inexact;
      const std::uint32_t got = float_bits(model->evaluate(x));
      if (got != want) {
        char line[96];
        std::snprintf(line, sizeof line, "x bits 0x%08x: model 0x%08x, want 0x%08x", x_bits, got, want);
        FAIL(line);
      }
    }
  }
  CHECK(inexact_sums > 1000);  // the one rounding is exercised, not only exact sums
  auto eval_bits = [&](std::uint32_t b) {
    float x;
    std::memcpy(&x, &b, 4);
    return float_bits(model->evaluate(x));
  };
  CHECK(eval_bits(0x7fc00000u) == 0x7fffffffu);  // NaN -> nan_output
  CHECK(eval_bits(0xbf800000u) == 0x7fffffffu);  // x < 0 -> nan_output
  CHECK(eval_bits(0xff800000u) == 0x7fffffffu);  // -inf
  CHECK(eval_bits(0x80000000u) == 0xff800000u);  // -0 -> -inf
  CHECK(eval_bits(0x00000001u) == 0xff800000u);  // subnormal -> -inf
  CHECK(eval_bits(0x7f800000u) == 0x7f800000u);  // +inf
  CHECK(eval_bits(0x3f800000u | 0x155555u) == 0u);
  CHECK(eval_bits(0x3f800000u | 0x012345u) == 0x80000000u);
  CHECK(eval_bits(0x3f800000u | 0x333333u) == 0u);
  CHECK(eval_bits(0x40000000u | 0x666666u) == 0u);

  // The device model (gpu/sfu_table_model.hpp lg2_table_model) gives the emu's bits: a stride
  // over all 2^32 inputs, random inputs, the region edges and every escaped entry in every binade.
  std::vector<std::uint32_t> escaped_mantissas;
  for (const auto& entry : escaped) escaped_mantissas.push_back(entry.first);
  const std::vector<std::uint32_t> inputs =
      mirror_inputs(small, rng, {1.f, 2.f, 0.5f, 0x1p-126f, 0x1p127f, 0.f, HUGE_VALF}, escaped_mantissas);
  const std::size_t mirror_differ = count_mirror_differences(
      inputs, [&](float x) { return fb::gpu::lg2_table_model(x, table.mantissa_outputs.data(), table.nan_output); },
      *model);
  CHECK(mirror_differ == 0);
  std::filesystem::remove(in);
  std::filesystem::remove(out);
}

TEST_CASE("sfu_lg2_exponent_split_prediction_is_one_rounding") {
  // fb-sfu-probe's lg2 hypothesis predicts RN_fp32(e + T); checked against MPFR's correctly
  // rounded 24-bit sum for every exponent and T from lg2's range on [1, 2) (0 and random bit
  // patterns in [2^-24, 1)), so results from 2^-24 to 128 and every cancellation at e = -1.
  mpfr_t sum, t_m;
  mpfr_init2(sum, 24);
  mpfr_init2(t_m, 24);
  std::mt19937 rng(31);
  std::size_t inexact = 0;
  for (int e = -126; e <= 127; ++e) {
    std::vector<std::uint32_t> ts = {0u, 0x33800000u, 0x3f7fffffu, 0x3f000000u, 0x3f3504f3u};
    for (int i = 0; i < 200; ++i) ts.push_back(0x33800000u + rng() % (0x3f800000u - 0x33800000u));
    for (std::uint32_t t_bits : ts) {
      const std::uint32_t x_bits = static_cast<std::uint32_t>(e + 127) << 23 | (rng() & 0x7fffffu);
      float t;
      std::memcpy(&t, &t_bits, 4);
      mpfr_set_flt(t_m, t, MPFR_RNDN);  // exact
      const int ternary = mpfr_add_si(sum, t_m, e, MPFR_RNDN);
      inexact += ternary != 0;
      const std::uint32_t want = float_bits(mpfr_get_flt(sum, MPFR_RNDN));  // exact: 24 bits, normal or 0
      INFO("e = ", e, " t bits ", t_bits);
      REQUIRE(fb::gpu::lg2_exponent_split_model(x_bits, t_bits) == want);
    }
  }
  CHECK(inexact > 1000);  // the rounding is exercised, not only exact sums
  mpfr_clear(sum);
  mpfr_clear(t_m);
}

TEST_CASE("sfu_device_table_model_matches_the_emu_table_model") {
  const bool small =
      std::getenv("FLASHBITS_TEST_SCALE") && std::string(std::getenv("FLASHBITS_TEST_SCALE")) == "sanitizer";
  std::mt19937 rng(2024);
  std::vector<std::uint32_t> inputs;
  for (std::uint64_t b = 0; b < (1ull << 32); b += small ? 262139 : 4093)
    inputs.push_back(static_cast<std::uint32_t>(b));
  for (int i = 0; i < (small ? 20000 : 1000000); ++i) inputs.push_back(static_cast<std::uint32_t>(rng()));
  for (float edge : {128.f, 127.f, -125.f, -126.f, -150.f, -160.f, 0.f, -0.f, 0x1p-130f, -0x1p-130f, 1e-30f, -1e-30f,
                     HUGE_VALF, -HUGE_VALF}) {
    const std::uint32_t e = float_bits(edge);
    for (std::uint32_t d = 0; d < 64; ++d) {
      inputs.push_back(e + d);
      inputs.push_back(e - d);
    }
  }
  inputs.push_back(0x7fc00000u);
  inputs.push_back(0xffc00001u);
  inputs.push_back(0x7f800001u);
  // Where the argument roundings differ: x exactly on the grid j / 2^n (all three agree) and
  // exactly half-way between grid points (nearest-even rounds to the even j; floor and
  // toward-zero part ways for negative x), for both table sizes below, positive and
  // negative, including the region ends; each exact in fp32 (at most 19 significant bits).
  for (int n : {3, 10}) {
    const long long lo = -160ll << n, hi = 128ll << n;
    std::vector<long long> js = {lo, lo + 1, -1, 0, 1, 2, hi - 1, hi, -(125ll << n), -(126ll << n), 127ll << n};
    // every special table entry below (indices 0..7) at the powers where it overflows or flushes
    for (long long k : {127ll, 126ll, -125ll, -126ll, -127ll, -128ll, -159ll, -160ll, 0ll}) {
      for (long long idx = 0; idx < 8; ++idx) js.push_back((k << n) + idx);
    }
    for (int i = 0; i < (small ? 500 : 20000); ++i)
      js.push_back(lo + static_cast<long long>(rng() % static_cast<std::uint64_t>(hi - lo)));
    for (long long j : js) {
      for (long long twice : {2 * j, 2 * j + 1, 2 * j - 1}) {
        const float x = std::ldexp(static_cast<float>(twice), -(n + 1));
        REQUIRE(static_cast<double>(x) == std::ldexp(static_cast<double>(twice), -(n + 1)));
        inputs.push_back(float_bits(x));
      }
    }
  }
  for (int n : {3, 10}) {
    for (int rounding : {0, 1, 2}) {
      CAPTURE(n);
      CAPTURE(rounding);
      fb::SfuTable table;
      table.function = fb::SpecialFunction::ex2;
      table.form = fb::SfuTableForm::ex2_fixed_point;
      table.fraction_bits = n;
      table.argument_rounding = static_cast<fb::FixedPointRounding>(rounding);
      table.nan_output = 0x7fffffffu;
      table.source = "test: synthetic";
      for (int i = 0; i < (1 << n); ++i) {
        const float base = static_cast<float>(std::exp2(static_cast<double>(i) / (1 << n)));
        table.fraction_outputs.push_back(float_bits(base) +
                                         static_cast<std::uint32_t>(static_cast<int>(rng() % 9) - 4));
      }
      table.fraction_outputs[1] = 0x7fc00000u;  // a NaN entry is returned as is
      table.fraction_outputs[2] = 0x3fffffffu;  // just below 2: the largest finite result at k = 127
      table.fraction_outputs[3] = 0x3f000001u;  // below 1: flushes earlier at the bottom
      table.fraction_outputs[4] = 0xc0000000u;  // -2: overflows to -inf at k = 127 (sign kept)
      table.fraction_outputs[5] = 0x40000000u;  // 2: overflows to +inf at k = 127
      table.fraction_outputs[6] = 0xbf000000u;  // -0.5: flushes to -0 at k = -126
      const std::string path = temp_path("mirror_" + std::to_string(n) + "_" + std::to_string(rounding) + ".fbsfu");
      fb::write_table_file(path, table);
      const auto emu = fb::load_table_model(path);
      std::size_t differ = 0;
      for (std::uint32_t in : inputs) {
        float x;
        std::memcpy(&x, &in, 4);
        const std::uint32_t mirror =
            fb::gpu::ex2_table_model(x, n, rounding, table.fraction_outputs.data(), table.nan_output);
        const std::uint32_t reference = float_bits(emu->evaluate(x));
        if (mirror != reference && ++differ <= 5) {
          char line[96];
          std::snprintf(line, sizeof line, "x bits 0x%08x: device model 0x%08x, emu 0x%08x", in, mirror, reference);
          FAIL_CHECK(line);
        }
      }
      CHECK(differ == 0);
      std::filesystem::remove(path);
    }
  }
}

// ---- ex2 sign-magnitude and lg2 extended captures (FBSFU1 forms 4 and 5) -------------------
namespace {

// fp32 bits of the correctly rounded (RNE) 2^(-i / 2^n), from MPFR (in (1/2, 1]).
std::uint32_t exp2_neg_rne_bits(std::uint32_t i, int n) {
  mpfr_t x, y;
  mpfr_init2(x, 64);
  mpfr_init2(y, 24);
  mpfr_set_ui(x, i, MPFR_RNDN);
  mpfr_div_2ui(x, x, static_cast<unsigned long>(n), MPFR_RNDN);  // exact
  mpfr_neg(x, x, MPFR_RNDN);
  mpfr_exp2(y, x, MPFR_RNDN);
  const float f = mpfr_get_flt(y, MPFR_RNDN);
  mpfr_clear(x);
  mpfr_clear(y);
  return float_bits(f);
}

// The ex2_sign_magnitude rule written here with integer operations on the bits (the emu and
// the device model use double): |x| = sig * 2^(ex - 23), X = floor(|x| * 2^n) by shifts.
std::uint32_t sign_magnitude_rule(std::uint32_t x_bits, int n, const std::vector<std::uint32_t>& pos,
                                  const std::vector<std::uint32_t>& neg, std::uint32_t nan_output) {
  const std::uint32_t biased = (x_bits >> 23) & 0xffu;
  const bool negative = (x_bits >> 31) != 0;
  if (biased == 255 && (x_bits & 0x7fffffu)) return nan_output;
  if (biased == 0) x_bits &= 0x80000000u;  // ftz: +-0
  float x;
  std::memcpy(&x, &x_bits, 4);
  if (x >= 128.f) return 0x7f800000u;
  if (x < -160.f) return 0u;
  std::uint64_t fixed = 0;
  if (biased != 0) {
    const std::uint64_t sig = (x_bits & 0x7fffffu) | 0x800000u;
    const int shift = static_cast<int>(biased) - 127 - 23 + n;
    fixed = shift >= 0 ? sig << shift : (shift > -64 ? sig >> -shift : 0);
  }
  const int k = static_cast<int>(fixed >> n);
  const std::uint32_t i = static_cast<std::uint32_t>(fixed & ((1u << n) - 1));
  const std::uint32_t t = negative ? neg[i] : pos[i];
  float tf;
  std::memcpy(&tf, &t, 4);
  if (std::isnan(tf)) return t;
  const double v = std::ldexp(static_cast<double>(tf), negative ? -k : k);
  if (std::fabs(v) >= 0x1p128) return (t & 0x80000000u) | 0x7f800000u;
  if (std::fabs(v) < 0x1p-126) return t & 0x80000000u;
  return float_bits(static_cast<float>(v));
}

// e + L (L = T + R * ulp(T) * 2^-g exactly) rounded once to 24 bits by MPFR in `rnd`, an exact
// zero +0, a result below 2^-126 flushed: what lg2_extended_rule claims, from MPFR.
std::uint32_t lg2_extended_mpfr(int e, std::uint32_t t_bits, long r, int g, mpfr_rnd_t rnd) {
  float t;
  std::memcpy(&t, &t_bits, 4);
  const std::uint32_t biased = (t_bits >> 23) & 0xffu;
  const int ue = static_cast<int>(std::max(biased, 1u)) - 150;
  mpfr_t v, w, out;
  mpfr_inits2(512, v, w, (mpfr_ptr) nullptr);
  mpfr_init2(out, 24);
  mpfr_set_flt(v, t, MPFR_RNDN);              // exact
  mpfr_set_si_2exp(w, r, ue - g, MPFR_RNDN);  // exact
  mpfr_add(v, v, w, MPFR_RNDN);               // exact at 512 bits
  mpfr_add_si(v, v, e, MPFR_RNDN);            // exact
  const bool zero = mpfr_zero_p(v) != 0;
  mpfr_set(out, v, rnd);                         // the one rounding
  const float f = mpfr_get_flt(out, MPFR_RNDN);  // exact
  mpfr_clears(v, w, out, (mpfr_ptr) nullptr);
  if (zero) return 0u;
  if (std::fabs(f) < 0x1p-126f) return float_bits(f) & 0x80000000u;
  return float_bits(f);
}

const mpfr_rnd_t kMpfrFinalRounding[4] = {MPFR_RNDN, MPFR_RNDZ, MPFR_RNDD, MPFR_RNDU};

}  // namespace

TEST_CASE("sfu_capture_ex2_sign_magnitude_converts_and_device_model_matches_the_emu") {
  const bool small =
      std::getenv("FLASHBITS_TEST_SCALE") && std::string(std::getenv("FLASHBITS_TEST_SCALE")) == "sanitizer";
  constexpr int n = 10;
  constexpr std::uint32_t half = 1u << n;
  CaptureSpec spec;
  spec.function = "ex2";
  spec.key = "ex2_sign_magnitude";
  spec.n = n;
  spec.entries = 2 * half;
  std::mt19937 rng(5151);
  // Escaped entries: each special case of the rule, on both sides.
  const std::map<std::uint32_t, std::uint32_t> escaped = {
      {1u, 0x7fc00123u},          // NaN with a payload: returned as is
      {2u, 0x3fffffffu},          // just below 2: the largest finite result at k = 127
      {3u, 0x40000000u},          // 2: overflows at k = 127
      {half + 1u, 0x3f000001u},   // T- just above 1/2: flushes from k = 126 on
      {half + 2u, 0x3f800000u},   // T- = 1: 2^-126 at k = 126 is normal
      {half + 3u, 0xbf400000u},   // negative T-: -0 once flushed
      {half + 4u, 0x7fc00001u}};  // NaN on the negative side
  spec.deltas.resize(spec.entries);
  for (std::uint32_t j = 0; j < spec.entries; ++j)
    spec.deltas[j] = escaped.count(j) ? -8 : static_cast<int>(rng() % 15) - 7;
  spec.deltas[0] = spec.deltas[half] = 0;  // T+[0] = T-[0] = 1
  for (const auto& [j, bits] : escaped) spec.escapes.push_back({j, bits});
  auto expected = [&](std::uint32_t j) {
    const auto it = escaped.find(j);
    if (it != escaped.end()) return it->second;
    const std::uint32_t base = j < half ? exp2_rne_bits(j, n) : exp2_neg_rne_bits(j - half, n);
    return base + static_cast<std::uint32_t>(spec.deltas[j]);
  };
  const std::string in = write_capture("cap_ex2_sm.fbsfut", spec);
  const fb::SfuTable table = fb::gpu::sfu_capture_to_table(in);
  CHECK(table.function == fb::SpecialFunction::ex2);
  CHECK(table.form == fb::SfuTableForm::ex2_sign_magnitude);
  CHECK(table.fraction_bits == n);
  CHECK(table.measured_on_hardware);
  CHECK(table.nan_output == 0x7fffffffu);
  REQUIRE(table.fraction_outputs.size() == half);
  REQUIRE(table.negative_fraction_outputs.size() == half);
  std::size_t differ = 0;
  for (std::uint32_t i = 0; i < half; ++i) {
    differ += table.fraction_outputs[i] != expected(i);
    differ += table.negative_fraction_outputs[i] != expected(half + i);
  }
  CHECK(differ == 0);

  const std::string out = temp_path("cap_ex2_sm.fbsfu");
  fb::write_table_file(out, table);
  const auto model = fb::load_table_model(out);
  CHECK(model->hardware_measured());
  std::vector<std::uint32_t> mantissas = {0, 1, 0x400000u, 0x7fffffu, 0x7ffffeu};
  for (int i = 0; i < 16; ++i) mantissas.push_back(rng() & 0x7fffffu);
  const std::vector<std::uint32_t> inputs = mirror_inputs(
      small, rng, {128.f, 127.f, 126.f, 125.f, 1.f, 0x1p-10f, 0x1p-11f, 0.f, 0x1p-130f, 160.f, HUGE_VALF}, mantissas);
  // The emu model against the rule written here, then the device model against the emu.
  std::size_t rule_differ = 0;
  for (std::uint32_t b : inputs) {
    float x;
    std::memcpy(&x, &b, 4);
    const std::uint32_t want =
        sign_magnitude_rule(b, n, table.fraction_outputs, table.negative_fraction_outputs, 0x7fffffffu);
    if (float_bits(model->evaluate(x)) != want && ++rule_differ <= 5) {
      char line[64];
      std::snprintf(line, sizeof line, "x bits 0x%08x: emu 0x%08x, rule 0x%08x", b, float_bits(model->evaluate(x)),
                    want);
      FAIL_CHECK(line);
    }
  }
  CHECK(rule_differ == 0);
  std::vector<std::uint32_t> device_table = table.fraction_outputs;
  device_table.insert(device_table.end(), table.negative_fraction_outputs.begin(),
                      table.negative_fraction_outputs.end());
  const std::size_t mirror_differ = count_mirror_differences(
      inputs, [&](float x) { return fb::gpu::ex2_sign_magnitude_table_model(x, n, device_table.data(), 0x7fffffffu); },
      *model);
  CHECK(mirror_differ == 0);
  auto eval_bits = [&](std::uint32_t b) {
    float x;
    std::memcpy(&x, &b, 4);
    return float_bits(model->evaluate(x));
  };
  // Written out: the sign picks the table; |x| is truncated (toward zero) on both sides.
  CHECK(eval_bits(float_bits(1.0f)) == expected(0) + (1u << 23));
  CHECK(eval_bits(float_bits(-1.0f)) == expected(half) - (1u << 23));
  CHECK(eval_bits(float_bits(-0.0f)) == expected(half));
  CHECK(eval_bits(0x80000001u) == expected(half));                       // negative subnormal: -0
  CHECK(eval_bits(float_bits(-3.0f * 0x1p-11f)) == expected(half + 1));  // |x| = 1.5 / 2^10: i = 1
  CHECK(eval_bits(float_bits(3.0f * 0x1p-11f)) == 0x7fc00123u);          // i = 1: the NaN entry
  CHECK(eval_bits(float_bits(127.0f + 2.0f / half)) == 0x7f7fffffu);     // T+[2] * 2^127
  CHECK(eval_bits(float_bits(127.0f + 3.0f / half)) == 0x7f800000u);     // overflow
  CHECK(eval_bits(float_bits(-126.0f - 2.0f / half)) == 0x00800000u);    // T-[2] = 1: 2^-126
  CHECK(eval_bits(float_bits(-126.0f - 1.0f / half)) == 0u);             // flushed
  CHECK(eval_bits(float_bits(-126.0f - 3.0f / half)) == 0x80000000u);    // negative entry: -0
  CHECK(eval_bits(0xff800000u) == 0u);
  CHECK(eval_bits(0x7f800000u) == 0x7f800000u);

  // Refused: a table that did not reproduce the hardware, and entries not 2^(key_bits + 1).
  CaptureSpec bad = spec;
  bad.mismatches = "3";
  const std::string bad_path = write_capture("cap_ex2_sm_bad.fbsfut", bad);
  CHECK_THROWS_WITH_AS(fb::gpu::sfu_capture_to_table(bad_path), doctest::Contains("table_model_mismatches"),
                       std::runtime_error);
  bad = spec;
  bad.entries = half;
  bad.deltas.resize(half);
  bad.escapes = {{1u, 0x7fc00123u}, {2u, 0x3fffffffu}, {3u, 0x40000000u}};
  write_capture("cap_ex2_sm_bad.fbsfut", bad);
  CHECK_THROWS_WITH_AS(fb::gpu::sfu_capture_to_table(bad_path), doctest::Contains("entries"), std::runtime_error);
  for (const std::string& p : {in, out, bad_path}) std::filesystem::remove(p);
}

TEST_CASE("sfu_lg2_extended_model_matches_the_emu_rule_and_mpfr") {
  // gpu lg2_extended_model, emu lg2_extended_rule and MPFR's one rounding of the exact e + L,
  // for T across lg2's range on [1, 2) and beyond (0, subnormal, negative, tiny: the sticky
  // path), every guard width and all four final roundings.
  std::mt19937 rng(777);
  std::size_t checked = 0, inexact_zero_e = 0;
  for (int iter = 0; iter < 60000; ++iter) {
    const int g = static_cast<int>(rng() % 25);
    std::uint32_t t_bits;
    switch (rng() % 8) {
      case 0:
        t_bits = 0u;
        break;
      case 1:
        t_bits = rng() % 0x800000u;
        break;  // subnormal
      case 2:
        t_bits = 0x80000000u | (0x30000000u + rng() % 0x0f800000u);
        break;  // negative, |T| < 1
      case 3:
        t_bits = 0x20000000u + rng() % 0x13000000u;
        break;  // tiny: 2^-63 .. 2^-25
      case 4:
        t_bits = 0x3f7fffffu - rng() % 64;
        break;  // just below 1
      default:
        t_bits = 0x33800000u + rng() % (0x3f800000u - 0x33800000u);
        break;  // [2^-24, 1)
    }
    const long r = static_cast<long>(rng() % (2u << g)) - (1l << g);  // |R| <= 2^g
    const int e = (rng() % 4 == 0) ? static_cast<int>(rng() % 5) - 2 : static_cast<int>(rng() % 254) - 126;
    for (int k = 0; k < 4; ++k) {
      const std::uint32_t device = fb::gpu::lg2_extended_model(e, t_bits, static_cast<int>(r), g, k);
      const std::uint32_t emu =
          fb::lg2_extended_rule(e, t_bits, static_cast<std::int32_t>(r), g, static_cast<fb::FinalRounding>(k));
      const std::uint32_t want = lg2_extended_mpfr(e, t_bits, r, g, kMpfrFinalRounding[k]);
      INFO("e=", e, " T=0x", std::hex, t_bits, std::dec, " R=", r, " g=", g, " rounding=", k);
      REQUIRE(device == emu);
      REQUIRE(emu == want);
      ++checked;
      inexact_zero_e += e == 0 && r != 0;
    }
  }
  CHECK(checked == 240000);
  CHECK(inexact_zero_e > 1000);
  // Written out: 0 guard bits, R = 0, nearest-even is RN(e + T) (the lg2_exponent_split rule).
  CHECK(fb::lg2_extended_rule(64, 0x3f7fffffu, 0, 0, fb::FinalRounding::nearest_even) == float_bits(65.0f));
  CHECK(fb::lg2_extended_rule(64, 0x3f7fffffu, 0, 0, fb::FinalRounding::toward_zero) == float_bits(64.99999237f));
  CHECK(fb::lg2_extended_rule(-1, 0x3f800000u, 0, 0, fb::FinalRounding::down) == 0u);  // exact zero: +0
  CHECK(fb::lg2_extended_rule(3, 0x7fc00001u, 0, 5, fb::FinalRounding::up) == 0x7fc00001u);
  mpfr_free_cache();
}

TEST_CASE("sfu_lg2_extended_interval_analysis_recovers_a_synthetic_hardware") {
  // fb-sfu-probe --lg2-extended on the CPU: a synthetic "hardware" that holds lg2(1.m) as a
  // fixed-point L with 30 fraction bits and rounds e + L once (toward zero, or nearest-even),
  // sampled mantissas. The intervals (lg2_interval) intersected over all 254 exponents must be
  // non-empty for its own rounding, the representative (lg2_representative) must reproduce every
  // output through lg2_extended_model, and the other roundings must fail for some mantissas.
  std::mt19937 rng(99);
  std::vector<std::uint32_t> ms = {0u, 1u, 2u, 3u, 0x7fffffu, 0x7ffffeu, 0x400000u, 0x3504f3u};
  for (int i = 0; i < 400; ++i) ms.push_back(rng() & 0x7fffffu);
  for (int own : {fb::gpu::kFinalTowardZero, fb::gpu::kFinalNearestEven}) {
    CAPTURE(own);
    int empty_own = 0, empty_other[4] = {}, max_g = 0;
    std::size_t reproduced = 0;
    for (std::uint32_t m : ms) {
      // L = floor(log2(1.m) * 2^30) / 2^30 (MPFR, exact), outputs round(e + L) in the rounding `own`.
      mpfr_t l;
      mpfr_init2(l, 128);
      mpfr_set_ui_2exp(l, (1u << 23) + m, -23, MPFR_RNDN);
      mpfr_log2(l, l, MPFR_RNDN);
      mpfr_mul_2ui(l, l, 30, MPFR_RNDN);
      mpfr_floor(l, l);
      const long l30 = mpfr_get_si(l, MPFR_RNDN);
      mpfr_clear(l);
      std::vector<std::uint32_t> out(254);
      for (int e = -126; e <= 127; ++e) {
        mpfr_t v, o;
        mpfr_init2(v, 128);
        mpfr_init2(o, 24);
        mpfr_set_si_2exp(v, l30, -30, MPFR_RNDN);
        mpfr_add_si(v, v, e, MPFR_RNDN);
        const bool zero = mpfr_zero_p(v) != 0;
        mpfr_set(o, v, kMpfrFinalRounding[own]);
        out[e + 126] = zero ? 0u : float_bits(mpfr_get_flt(o, MPFR_RNDN));
        mpfr_clear(v);
        mpfr_clear(o);
      }
      const std::uint32_t t_bits = out[126];  // e = 0
      long long lo[4], hi[4];
      for (int k = 0; k < 4; ++k) {
        lo[k] = -fb::gpu::kLg2UnitCap, hi[k] = fb::gpu::kLg2UnitCap;
        for (int e = -126; e <= 127; ++e) {
          long long a, b;
          fb::gpu::lg2_interval(e, out[e + 126], k, a, b);
          lo[k] = std::max(lo[k], a);
          hi[k] = std::min(hi[k], b);
        }
        if (lo[k] > hi[k]) (k == own ? empty_own : empty_other[k])++;
      }
      // The true L lies in its own rounding's interval.
      CHECK(lo[own] <= l30 * (1ll << 30));
      CHECK(l30 * (1ll << 30) <= hi[own]);
      int g = 0;
      long long r = 0;
      REQUIRE(fb::gpu::lg2_representative(t_bits, lo[own], hi[own], g, r));
      max_g = std::max(max_g, g);
      for (int e = -126; e <= 127; ++e) {
        const std::uint32_t got = fb::gpu::lg2_extended_model(e, t_bits, static_cast<int>(r), g, own);
        if (got != out[e + 126]) {
          char line[96];
          std::snprintf(line, sizeof line, "m=0x%06x e=%d: model 0x%08x, synthetic hardware 0x%08x", m, e, got,
                        out[e + 126]);
          FAIL_CHECK(line);
          break;
        }
        ++reproduced;
      }
    }
    CHECK(empty_own == 0);
    CHECK(reproduced == ms.size() * 254);
    CHECK(max_g <= 7);  // 30 fraction bits against T's 24 significant bits
    for (int k = 0; k < 4; ++k) {
      if (k != own) CHECK(empty_other[k] > 0);
    }
    MESSAGE("own rounding ", own, ": others empty ", empty_other[0], " ", empty_other[1], " ", empty_other[2], " ",
            empty_other[3], " of ", ms.size(), ", max guard bits ", max_g);
  }
  mpfr_free_cache();
}

TEST_CASE("sfu_capture_lg2_extended_converts_and_device_model_matches_the_emu") {
  const bool small =
      std::getenv("FLASHBITS_TEST_SCALE") && std::string(std::getenv("FLASHBITS_TEST_SCALE")) == "sanitizer";
  constexpr int n = 23;
  constexpr std::uint32_t entries = 1u << n;
  CaptureSpec spec;
  spec.function = "lg2";
  spec.key = "lg2_extended";
  spec.n = n;
  spec.extra_header = "guard_bits=3\nfinal_rounding=toward_zero\n";
  std::mt19937 rng(6262);
  const std::map<std::uint32_t, std::uint32_t> escaped = {
      {0x2aaaaau, 0x7fc00123u}, {0x155555u, 0x00400000u}, {0x333333u, 0x80000000u}, {0x012345u, 0xb5000000u}};
  spec.deltas.resize(entries);
  for (std::uint32_t m = 0; m < entries; ++m) spec.deltas[m] = escaped.count(m) ? -8 : static_cast<int>(rng() % 5) - 2;
  spec.deltas[0] = 0;
  for (const auto& [m, bits] : escaped) spec.escapes.push_back({m, bits});
  std::vector<std::int32_t> residuals(entries);
  for (std::uint32_t m = 0; m < entries; ++m) {
    residuals[m] = escaped.count(m) && escaped.at(m) == 0x7fc00123u ? 0 : static_cast<std::int32_t>(rng() % 17) - 8;
    if (m == 5) residuals[m] = 300;  // a two-byte varint
    std::uint32_t z = (static_cast<std::uint32_t>(residuals[m]) << 1) ^ static_cast<std::uint32_t>(residuals[m] >> 31);
    do {
      spec.tail += static_cast<char>((z & 0x7fu) | (z > 0x7fu ? 0x80u : 0u));
      z >>= 7;
    } while (z);
  }
  residuals[5] = 300;
  const std::string in = write_capture("cap_lg2_ext.fbsfut", spec);
  const fb::SfuTable table =
      convert_mantissa_capture(in, fb::SpecialFunction::lg2, fb::SfuTableForm::lg2_extended, entries);
  CHECK(table.guard_bits == 3);
  CHECK(table.final_rounding == fb::FinalRounding::toward_zero);
  CHECK(table.extended_residuals == residuals);
  for (std::uint32_t m : {1u, 2u, 0x400000u, 0x7fffffu}) {
    CHECK(table.mantissa_outputs[m] == lg2_rne_bits(m) + static_cast<std::uint32_t>(spec.deltas[m]));
  }
  for (const auto& [m, bits] : escaped) CHECK(table.mantissa_outputs[m] == bits);

  const std::string out = temp_path("cap_lg2_ext.fbsfu");
  fb::write_table_file(out, table);
  const auto model = fb::load_table_model(out);
  CHECK(model->hardware_measured());
  CHECK(model->describe().find("toward_zero") != std::string::npos);
  std::vector<std::uint32_t> mantissas = {0, 1, 5, 0x7fffffu, 0x400000u};
  for (const auto& e : escaped) mantissas.push_back(e.first);
  const std::vector<std::uint32_t> inputs =
      mirror_inputs(small, rng, {1.f, 2.f, 0.5f, 0x1p-126f, 0x1p127f, 0.f, HUGE_VALF}, mantissas);
  const std::size_t mirror_differ = count_mirror_differences(
      inputs,
      [&](float x) {
        return fb::gpu::lg2_extended_table_model(x, table.mantissa_outputs.data(), table.extended_residuals.data(),
                                                 table.guard_bits, static_cast<int>(table.final_rounding),
                                                 table.nan_output);
      },
      *model);
  CHECK(mirror_differ == 0);
  // The emu model against MPFR's rounding of e + L on every binade at a few mantissas.
  for (std::uint32_t biased = 1; biased <= 254; ++biased) {
    for (std::uint32_t m : {1u, 5u, 0x400000u, 0x7fffffu, 0x155555u, 0x012345u}) {
      const std::uint32_t b = (biased << 23) | m;
      float x;
      std::memcpy(&x, &b, 4);
      const std::uint32_t want =
          lg2_extended_mpfr(static_cast<int>(biased) - 127, table.mantissa_outputs[m], residuals[m], 3, MPFR_RNDZ);
      REQUIRE(float_bits(model->evaluate(x)) == want);
    }
  }
  // Refused: residuals cut short, bytes after them, an unknown final rounding.
  CaptureSpec bad = spec;
  bad.tail.pop_back();
  const std::string bad_path = write_capture("cap_lg2_ext_bad.fbsfut", bad);
  CHECK_THROWS_WITH_AS(fb::gpu::sfu_capture_to_table(bad_path), doctest::Contains("residuals"), std::runtime_error);
  bad = spec;
  bad.tail += "x";
  write_capture("cap_lg2_ext_bad.fbsfut", bad);
  CHECK_THROWS_WITH_AS(fb::gpu::sfu_capture_to_table(bad_path), doctest::Contains("residuals"), std::runtime_error);
  bad = spec;
  bad.extra_header = "guard_bits=3\nfinal_rounding=sideways\n";
  write_capture("cap_lg2_ext_bad.fbsfut", bad);
  CHECK_THROWS_WITH_AS(fb::gpu::sfu_capture_to_table(bad_path), doctest::Contains("final_rounding"),
                       std::runtime_error);
  for (const std::string& p : {in, out, bad_path}) std::filesystem::remove(p);
  mpfr_free_cache();
}

// ---- the shared FBSFUT1 writer (traces/sfu_capture_writer.hpp) -----------------------------
namespace {

// fb-sfu-probe's emit_table as it was before its host side moved into the shared writer
// (commit 06ae31a, gpu/sfu_probe.cu), verbatim from the name on; `delta`, `counts` and
// `escapes` are what it copied back from the device.
void legacy_emit_table(int fn, int nbits, const std::string& key, const std::string& out_dir, const std::string& device,
                       std::uint32_t nan_output, const std::string& extra, std::ostringstream& summary,
                       const std::vector<signed char>& delta, const unsigned int counts[3],
                       const std::vector<std::uint32_t>& escapes, const std::string& tail) {
  const char* const kFnNames[3] = {"ex2", "rcp", "lg2"};
  const int kEx2 = 0;
  const bool sign_magnitude = key == "ex2_sign_magnitude";
  const std::uint32_t entries = sign_magnitude ? 2u << nbits : 1u << nbits;
  std::string suffix;  // (the original built the name in one expression)
  if (fn == kEx2 && !sign_magnitude) suffix = "_" + key.substr(key.rfind("point_") + 6);
  const std::string name = sign_magnitude ? "ex2_sm_table_n" + std::to_string(nbits) + ".fbsfut"
                           : key == "lg2_extended"
                               ? "lg2_extended_n" + std::to_string(nbits) + ".fbsfut"
                               : std::string(kFnNames[fn]) + "_table_n" + std::to_string(nbits) + suffix + ".fbsfut";
  const std::uint32_t escape_cap = key == "lg2_extended" ? entries : 1u << 20;
  if (counts[1] > escape_cap || counts[0] != 0) {
    summary << "  NOT writing " << name << ": " << counts[0] << " keys never seen, " << counts[1] << " escapes\n";
    return;
  }
  std::ofstream f(out_dir + "/" + name, std::ios::binary);
  f << "FBSFUT1\nfunction=" << kFnNames[fn] << "\nkey=" << key << "\nkey_bits=" << nbits << "\nentries=" << entries
    << "\nnan_output=" << nan_output << "\n"
    << extra << device << "end\n";
  std::vector<unsigned char> packed(entries / 2);
  for (std::uint32_t i = 0; i < entries; i += 2) {
    packed[i / 2] = static_cast<unsigned char>((delta[i] & 0xf) | ((delta[i + 1] & 0xf) << 4));
  }
  f.write(reinterpret_cast<const char*>(packed.data()), static_cast<std::streamsize>(packed.size()));
  const std::uint32_t n_escapes = counts[1];
  f.write(reinterpret_cast<const char*>(&n_escapes), 4);  // the device and file are little-endian
  f.write(reinterpret_cast<const char*>(escapes.data()), static_cast<std::streamsize>(escapes.size() * 4));
  f << tail;
  summary << "  wrote " << name << ": " << entries << " entries, " << counts[1] << " escaped (" << counts[2]
          << " of them because the double reference was too close to a rounding boundary)\n";
}

// fb-sfu-probe's table_delta_kernel body as it was (same commit), one key on the host.
int legacy_table_delta(int fn, int nbits, bool sign_magnitude, std::uint32_t j, std::uint32_t value, bool& uncertain) {
  uncertain = false;
  const std::uint32_t half = 1u << nbits;
  const double frac = std::ldexp(static_cast<double>(sign_magnitude ? j % half : j), -nbits);
  const double arg = sign_magnitude && j >= half ? -frac : frac;
  const double r = fn == 0 ? std::exp2(arg) : fn == 1 ? 1.0 / (1.0 + frac) : std::log2(1.0 + frac);
  float ref = static_cast<float>(r);  // round_reference
  if (std::isfinite(r) && r != 0.0 && std::isfinite(ref) && ref != 0.f) {
    const float toward = static_cast<double>(ref) < r ? std::nextafter(ref, INFINITY) : std::nextafter(ref, -INFINITY);
    if (std::isfinite(toward)) {
      const double boundary = 0.5 * (static_cast<double>(ref) + static_cast<double>(toward));
      uncertain = std::fabs(r - boundary) <= std::fabs(r) * 0x1p-49;
    }
  }
  const long long d = static_cast<long long>(value) - static_cast<long long>(float_bits(ref));
  if (uncertain || d < -7 || d > 7) return -8;
  uncertain = false;
  return static_cast<int>(d);
}

// The correctly rounded value at key j (the base the converter adds the deltas to).
std::uint32_t table_key_correct_bits(int fn, int nbits, bool sign_magnitude, std::uint32_t j) {
  const std::uint32_t half = 1u << nbits;
  const float frac = std::ldexp(static_cast<float>(sign_magnitude ? j % half : j), -nbits);  // exact
  if (fn == 0) return float_bits(fb::ex2_correct_ftz(sign_magnitude && j >= half ? -frac : frac));
  return float_bits(fn == 1 ? fb::rcp_correct_ftz(1.0f + frac) : fb::lg2_correct_ftz(1.0f + frac));
}

}  // namespace

TEST_CASE("sfu_table_writer_writes_what_fb_sfu_probe_wrote") {
  // For the same deltas, counts and escapes (in an arbitrary order, as the device lists them),
  // the shared writer gives the bytes and summary lines fb-sfu-probe's emit_table gave; and
  // when it refuses (unfilled keys, too many escapes) the same line and no file.
  struct Case {
    int fn, nbits;
    std::string key;
    unsigned unfilled;
    bool over_cap;
    std::string tail;
  };
  const std::vector<Case> cases = {{0, 8, "ex2_fixed_point_floor", 0, false, ""},
                                   {0, 10, "ex2_fixed_point_nearest_even", 0, false, ""},
                                   {0, 9, "ex2_fixed_point_toward_zero", 0, false, ""},
                                   {0, 8, "ex2_sign_magnitude", 0, false, ""},
                                   {1, 12, "rcp_mantissa", 0, false, ""},
                                   {2, 12, "lg2_exponent_split", 0, false, ""},
                                   {2, 12, "lg2_extended", 0, false, std::string("\x02\x81\x01\x00\x7f", 5)},
                                   {1, 12, "rcp_mantissa", 3, false, ""},
                                   {0, 21, "ex2_fixed_point_floor", 0, true, ""}};
  std::mt19937 rng(5);
  const std::string dir_old = temp_path("writer_old"), dir_new = temp_path("writer_new");
  std::filesystem::create_directories(dir_old);
  std::filesystem::create_directories(dir_new);
  const std::string device =
      "source=cuda:Test GPU\ndevice=Test GPU\ncompute_capability=9.0\ndriver=1\ncuda_runtime=1\n";
  for (const Case& c : cases) {
    CAPTURE(c.key);
    CAPTURE(c.nbits);
    const std::uint32_t entries = fb::gpu::sfu_table_entries(c.nbits, c.key),
                        cap = fb::gpu::sfu_table_escape_cap(c.nbits, c.key);
    CHECK(entries == (c.key == "ex2_sign_magnitude" ? 2u << c.nbits : 1u << c.nbits));
    fb::gpu::SfuTableDeltas d;
    d.delta.resize(entries);
    std::vector<std::uint32_t> escaped_keys;
    for (std::uint32_t j = 0; j < entries; ++j) {
      const int v = c.over_cap ? -8 : static_cast<int>(rng() % 16) - 8;
      d.delta[j] = static_cast<signed char>(v);
      if (v == -8) escaped_keys.push_back(j);
    }
    std::shuffle(escaped_keys.begin(), escaped_keys.end(), rng);
    d.escape_count = static_cast<std::uint32_t>(escaped_keys.size());
    d.unfilled = c.unfilled;
    d.uncertain = d.escape_count / 3;
    for (std::size_t e = 0; e < escaped_keys.size() && e < cap; ++e) {
      d.escapes.push_back(escaped_keys[e]);
      d.escapes.push_back(static_cast<std::uint32_t>(rng()));
    }
    const std::string extra = "table_model=" + c.key + "\ntable_model_mismatches=0\n";
    const unsigned int counts[3] = {d.unfilled, d.escape_count, d.uncertain};
    std::ostringstream summary_old, summary_new;
    const std::string name = fb::gpu::sfu_table_file_name(c.fn, c.nbits, c.key);
    std::filesystem::remove(dir_old + "/" + name);
    std::filesystem::remove(dir_new + "/" + name);
    legacy_emit_table(c.fn, c.nbits, c.key, dir_old, device, 0x7fffffffu, extra, summary_old, d.delta, counts,
                      d.escapes, c.tail);
    const bool wrote =
        fb::gpu::write_sfu_table(dir_new, c.fn, c.nbits, c.key, 0x7fffffffu, extra, device, d, summary_new, c.tail);
    CHECK(summary_new.str() == summary_old.str());
    CHECK(wrote == (c.unfilled == 0 && !c.over_cap));
    CHECK(std::filesystem::exists(dir_new + "/" + name) == wrote);
    CHECK(std::filesystem::exists(dir_old + "/" + name) == wrote);
    if (wrote) {
      const std::string bytes = file_bytes(dir_new + "/" + name);
      CHECK(bytes == file_bytes(dir_old + "/" + name));
      CHECK(bytes.size() > entries / 2 + 4 + 8ull * d.escape_count);
    }
  }
  CHECK(fb::gpu::sfu_table_file_name(0, 23, "ex2_fixed_point_nearest_even") == "ex2_table_n23_nearest_even.fbsfut");
  CHECK(fb::gpu::sfu_table_file_name(0, 23, "ex2_sign_magnitude") == "ex2_sm_table_n23.fbsfut");
  CHECK(fb::gpu::sfu_table_file_name(1, 23, "rcp_mantissa") == "rcp_table_n23.fbsfut");
  CHECK(fb::gpu::sfu_table_file_name(2, 23, "lg2_exponent_split") == "lg2_table_n23.fbsfut");
  CHECK(fb::gpu::sfu_table_file_name(2, 23, "lg2_extended") == "lg2_extended_n23.fbsfut");
  // A delta count that does not fit the key is a programming error, not a file.
  fb::gpu::SfuTableDeltas wrong;
  wrong.delta.resize(10);
  std::ostringstream ignored;
  CHECK_THROWS_AS(fb::gpu::write_sfu_table(dir_new, 1, 8, "rcp_mantissa", 0, "", device, wrong, ignored),
                  std::invalid_argument);
  std::filesystem::remove_all(dir_old);
  std::filesystem::remove_all(dir_new);
}

TEST_CASE("sfu_table_writer_deltas_convert_back_to_the_table") {
  // sfu_table_deltas (fb-sfu-rehearse's deltas; per key the function fb-sfu-probe's kernel
  // applies) gives fb-sfu-probe's former per-key result, and a table written with it converts
  // (fb-sfu-table-convert's sfu_capture_to_table, whose base is the emu's correctly rounded
  // value) back to the same entries: the writer's double reference and escapes agree with the
  // converter's exact one. Entries: the correct value plus -9..9 ulps (beyond 7: escaped), a
  // NaN and an infinity, for every table form; a non-GPU source converts as not measured.
  struct Case {
    int fn, nbits;
    std::string key, extra;
  };
  const std::vector<Case> cases = {
      {0, 11, "ex2_fixed_point_floor", "argument_rounding=floor\n"},
      {0, 10, "ex2_sign_magnitude", "table_model=ex2_sign_magnitude\n"},
      {1, 23, "rcp_mantissa", "table_model=rcp_mantissa\n"},
      {2, 23, "lg2_exponent_split", "table_model=lg2_exponent_split\n"},
      {2, 23, "lg2_extended", "table_model=lg2_extended\nguard_bits=2\nfinal_rounding=toward_zero\n"}};
  std::mt19937 rng(17);
  const std::string dir = temp_path("writer_round_trip");
  std::filesystem::create_directories(dir);
  // The sanitizer build runs the two small table forms (2^10, 2^11 entries), not the 2^23 ones.
  const bool small =
      std::getenv("FLASHBITS_TEST_SCALE") && std::string(std::getenv("FLASHBITS_TEST_SCALE")) == "sanitizer";
  for (const Case& c : cases) {
    if (small && c.nbits > 11) continue;
    CAPTURE(c.key);
    const bool sm = c.key == "ex2_sign_magnitude";
    const std::uint32_t entries = fb::gpu::sfu_table_entries(c.nbits, c.key);
    std::vector<std::uint32_t> table(entries);
    for (std::uint32_t j = 0; j < entries; ++j) {
      const std::uint32_t correct = table_key_correct_bits(c.fn, c.nbits, sm, j);
      const int d = (j % 5 == 0) ? static_cast<int>(rng() % 19) - 9 : static_cast<int>(rng() % 3) - 1;
      table[j] = correct + static_cast<std::uint32_t>(d);
    }
    table[3] = 0x7fffffffu;
    table[entries - 2] = 0x7f800000u;
    const fb::gpu::SfuTableDeltas d = fb::gpu::sfu_table_deltas(c.fn, c.nbits, c.key, table.data());
    REQUIRE(d.delta.size() == entries);
    CHECK(d.unfilled == 0);
    std::uint32_t legacy_escapes = 0, legacy_uncertain = 0, mismatched = 0;
    for (std::uint32_t j = 0; j < entries; ++j) {
      bool uncertain = false;
      const int expected = legacy_table_delta(c.fn, c.nbits, sm, j, table[j], uncertain);
      legacy_escapes += expected == -8;
      legacy_uncertain += uncertain;
      mismatched += d.delta[j] != expected;
    }
    CHECK(mismatched == 0);
    CHECK(d.escape_count == legacy_escapes);
    CHECK(d.uncertain == legacy_uncertain);
    CHECK(d.escape_count > entries / 40);  // the -9..9 entries: some beyond 7
    REQUIRE(d.escapes.size() == 2ull * d.escape_count);
    for (std::size_t e = 0; e + 1 < d.escapes.size(); e += 2) {
      CHECK(d.delta[d.escapes[e]] == -8);
      CHECK(d.escapes[e + 1] == table[d.escapes[e]]);
      if (e >= 2) CHECK(d.escapes[e - 2] < d.escapes[e]);  // key order
    }
    // lg2 extended: 2^23 residuals, zigzag LEB128 (R[m] = m % 7 - 3).
    std::string tail;
    for (std::uint32_t m = 0; c.key == "lg2_extended" && m < entries; ++m) {
      const int r = static_cast<int>(m % 7) - 3;
      std::uint32_t z = (static_cast<std::uint32_t>(r) << 1) ^ static_cast<std::uint32_t>(r >> 31);
      do {
        tail += static_cast<char>((z & 0x7fu) | (z > 0x7fu ? 0x80u : 0u));
        z >>= 7;
      } while (z);
    }
    for (const std::string source : {"cuda:Test GPU", "rehearsal:fb-sfu-rehearse"}) {
      CAPTURE(source);
      const std::string device =
          "source=" + source + "\ndevice=Test\ncompute_capability=9.0\ndriver=1\ncuda_runtime=1\n";
      std::ostringstream summary;
      REQUIRE(fb::gpu::write_sfu_table(dir, c.fn, c.nbits, c.key, 0x7fffffffu, c.extra + "table_model_mismatches=0\n",
                                       device, d, summary, tail));
      CHECK(summary.str().find("  wrote " + fb::gpu::sfu_table_file_name(c.fn, c.nbits, c.key) + ": " +
                               std::to_string(entries) + " entries, " + std::to_string(d.escape_count) + " escaped") ==
            0);
      const fb::SfuTable converted =
          fb::gpu::sfu_capture_to_table(dir + "/" + fb::gpu::sfu_table_file_name(c.fn, c.nbits, c.key));
      CHECK(converted.measured_on_hardware == (source == std::string("cuda:Test GPU")));
      std::vector<std::uint32_t> back = c.fn == 0 ? converted.fraction_outputs : converted.mantissa_outputs;
      if (sm)
        back.insert(back.end(), converted.negative_fraction_outputs.begin(), converted.negative_fraction_outputs.end());
      REQUIRE(back.size() == table.size());
      std::uint32_t differ = 0;
      for (std::uint32_t j = 0; j < entries; ++j) differ += back[j] != table[j];
      CHECK(differ == 0);
      if (c.key == "lg2_extended") {
        REQUIRE(converted.extended_residuals.size() == entries);
        CHECK(converted.extended_residuals[12345] == 12345 % 7 - 3);
        CHECK(converted.guard_bits == 2);
      }
    }
  }
  std::filesystem::remove_all(dir);
}
