// tests/test_cli_op.cpp: the `flashbits op` command line contract (docs/CLI.md `op`,
// shared conventions), by running the built binary.
//
// Contract checked here: the shorthand and flag forms print `RESULT_HEX FLAGS`;
// --json is valid JSON with result, flags and event; `op --batch -` prints one line
// per input line, hex lower-case and zero-padded to the format's width; a malformed
// batch line N prints `error: line N: ...` on stderr and exits 2; bad format names,
// bad hex, wrong operand counts and non-representable decimals exit 2 with one error
// line. Expected results come from MPFR (random batch lines) or are worked out by
// hand from the docs/DESIGN.md §2 encodings in comments; never from the emulator library.
//
// The binary's path comes from the FLASHBITS_BINARY compile definition
// (tests/CMakeLists.txt).
#include <doctest/doctest.h>
#include <mpfr.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>
#include "tests/test_scale.hpp"

#ifndef FLASHBITS_BINARY
#error "FLASHBITS_BINARY must name the flashbits executable"
#endif

namespace {

using fb_test::sanitizer_scale;

struct Run {
  int exit_code;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Runs `flashbits ARGS` with `input` on stdin; captures stdout, stderr, exit code.
Run flashbits(const std::string& args, const std::string& input = "") {
  static int counter = 0;
  const std::string base = "/tmp/fb_test_cli_op." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  {
    std::ofstream in(base + ".in", std::ios::binary);
    in << input;
  }
  const std::string cmd =
      std::string("'") + FLASHBITS_BINARY + "' " + args + " < " + base + ".in > " + base + ".out 2> " + base + ".err";
  const int status = std::system(cmd.c_str());
  Run r{WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(base + ".out"), slurp(base + ".err")};
  for (const char* ext : {".in", ".out", ".err"}) std::remove((base + ext).c_str());
  return r;
}

// ---- an MPFR reference for add / sub / mul in IEEE formats, normal results only ----
struct IeeeFormat {
  const char* name;
  int man_bits, exp_bits, bias, shift, hex_digits;
};
const IeeeFormat kFp32{"fp32", 23, 8, 127, 0, 8}, kTf32{"tf32", 10, 8, 127, 13, 8}, kBf16{"bf16", 7, 8, 127, 0, 4},
    kFp16{"fp16", 10, 5, 15, 0, 4}, kE5m2{"e5m2", 2, 5, 15, 0, 2};

// A random normal operand with unbiased exponent in [-3, 6]: for these five formats,
// sums, differences and products then stay normal (the smallest non-zero difference
// is >= 2^(-3 - 10) >= fp16's 2^-14; the largest product < 2^14 < 57344 and 65504).
std::uint32_t random_operand(const IeeeFormat& f, std::mt19937_64& rng) {
  const std::uint32_t sign = static_cast<std::uint32_t>(rng() & 1u);
  const int exponent = static_cast<int>(rng() % 10) - 3;
  const std::uint32_t man = static_cast<std::uint32_t>(rng()) & ((1u << f.man_bits) - 1u);
  const std::uint32_t layout =
      (sign << (f.exp_bits + f.man_bits)) | (static_cast<std::uint32_t>(exponent + f.bias) << f.man_bits) | man;
  return layout << f.shift;
}

void set_operand(mpfr_t out, const IeeeFormat& f, std::uint32_t stored) {
  const std::uint32_t layout = stored >> f.shift;
  const bool negative = (layout >> (f.exp_bits + f.man_bits)) & 1u;
  const int e = static_cast<int>((layout >> f.man_bits) & ((1u << f.exp_bits) - 1u)) - f.bias;
  const std::uint32_t significand = (layout & ((1u << f.man_bits) - 1u)) | (1u << f.man_bits);
  mpfr_set_ui_2exp(out, significand, e - f.man_bits, MPFR_RNDN);  // exact: precision 64
  if (negative) mpfr_neg(out, out, MPFR_RNDN);
}

// The expected batch output line: result rounded by MPFR at the format's precision,
// encoded by the IEEE rule; "x" when MPFR reports an inexact result.
std::string expected_line(const std::string& op, const IeeeFormat& f, mpfr_rnd_t rnd, std::uint32_t a,
                          std::uint32_t b) {
  mpfr_t x, y, r;
  mpfr_inits2(64, x, y, static_cast<mpfr_ptr>(nullptr));
  mpfr_init2(r, f.man_bits + 1);
  set_operand(x, f, a);
  set_operand(y, f, b);
  int ternary = 0;
  if (op == "add")
    ternary = mpfr_add(r, x, y, rnd);
  else if (op == "sub")
    ternary = mpfr_sub(r, x, y, rnd);
  else
    ternary = mpfr_mul(r, x, y, rnd);
  std::uint32_t layout = mpfr_signbit(r) ? (1u << (f.exp_bits + f.man_bits)) : 0u;
  if (!mpfr_zero_p(r)) {
    mpz_t z;
    mpz_init(z);
    const mpfr_exp_t k = mpfr_get_z_2exp(z, r);  // |r| = z * 2^k, z has man_bits + 1 bits
    mpz_abs(z, z);
    const auto significand = static_cast<std::uint32_t>(mpz_get_ui(z));
    REQUIRE((significand >> f.man_bits) == 1u);
    const long e = static_cast<long>(k) + f.man_bits;  // unbiased exponent of the leading bit
    REQUIRE(e + f.bias >= 1);                          // normal, as random_operand promises
    REQUIRE(e + f.bias < (1 << f.exp_bits) - 1);
    layout |= (static_cast<std::uint32_t>(e + f.bias) << f.man_bits) | (significand & ((1u << f.man_bits) - 1u));
    mpz_clear(z);
  }
  mpfr_clears(x, y, r, static_cast<mpfr_ptr>(nullptr));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%0*x %s", f.hex_digits, layout << f.shift, ternary != 0 ? "x" : "-");
  return buf;
}

bool one_error_line(const Run& r) {
  const auto lines = lines_of(r.err);
  return lines.size() == 1 && lines[0].rfind("error: ", 0) == 0;
}

}  // namespace

TEST_CASE("op shorthand: add bf16 rne 3f80 3b80 prints 3f80 x") {
  // 3f80 = 1.0 and 3b80 = 2^(0x77 - 127) = 2^-8; 1 + 2^-8 lies exactly halfway
  // between 1 and 1 + 2^-7 (bf16 keeps 7 fraction bits), so RNE keeps the even 1.0,
  // inexact.
  const Run r = flashbits("op add bf16 rne 3f80 3b80");
  CHECK(r.exit_code == 0);
  CHECK(r.out == "3f80 x\n");
  CHECK(r.err.empty());
}

TEST_CASE("op flag form equals the shorthand") {
  const char* shorthand[] = {"op add bf16 rne 3f80 3b80", "op mul e4m3 rtz 4e 3a", "op sub fp16 rup 3c00 0x8001",
                             "op cvt e4m3 rne fp32:43f00000 satfinite", "op fma fp32 rdn 3f800000 3f800000 b3800000"};
  const char* flag_form[] = {"op add --format bf16 --round rne 3f80 3b80", "op mul --format e4m3 --round rtz 0x4e 0x3a",
                             "op sub --format fp16 --round rup 3c00 0x8001",
                             "op cvt --format e4m3 --round rne --overflow satfinite fp32:43f00000",
                             "op fma --format fp32 --round rdn 3f800000 3f800000 b3800000"};
  for (std::size_t i = 0; i < std::size(shorthand); ++i) {
    const Run a = flashbits(shorthand[i]), b = flashbits(flag_form[i]);
    INFO(shorthand[i] << " | " << flag_form[i]);
    CHECK(a.exit_code == 0);
    CHECK(b.exit_code == 0);
    CHECK(!a.out.empty());
    CHECK(a.out == b.out);
  }
  // Hand-worked values for three of them:
  // fp16 1 - (-2^-24) rounded up is the next value above 1, 3c01, inexact.
  CHECK(flashbits(shorthand[2]).out == "3c01 x\n");
  // 480 (fp32 43f00000) = 1.111b * 2^8 would be e4m3 code 0x7f, which is the NaN: it
  // exceeds max finite 448 (0x7e), so satfinite gives 448 and still raises overflow
  // and inexact (docs/DESIGN.md §2); ieee gives NaN (e4m3 has no inf).
  CHECK(flashbits(shorthand[3]).out == "7e xo\n");
  const std::string nosat = flashbits("op cvt e4m3 rne fp32:43f00000").out;
  CHECK((nosat == "7f xo\n" || nosat == "ff xo\n"));  // either e4m3 NaN code is acceptable
  // 464 = 1.1101b * 2^8 is halfway between 448 (mantissa 110, even) and 480: RNE keeps
  // 448, inexact, no overflow.
  CHECK(flashbits("op cvt e4m3 rne fp32:0x43e80000").out == "7e x\n");
  // 1*1 - 2^-24 rounded down: 1 - 2^-24 is an fp32 (3f7fffff), exact.
  CHECK(flashbits(shorthand[4]).out == "3f7fffff -\n");
  // A last policy word in the flag form, both policies as in the shorthand (found by the
  // scalar audit: `ieee` was refused as "given twice"); a word that contradicts --overflow is
  // refused, one that agrees is not. 480 overflows e4m3: satfinite 448 (7e), ieee a NaN.
  CHECK(flashbits("op cvt --format e4m3 --round rne fp32:43f00000 satfinite").out == "7e xo\n");
  const Run ieee = flashbits("op cvt --format e4m3 --round rne fp32:43f00000 ieee");
  CHECK(ieee.exit_code == 0);
  CHECK((ieee.out == "7f xo\n" || ieee.out == "ff xo\n"));
  CHECK(flashbits("op cvt --format e4m3 --round rne --overflow ieee fp32:43f00000 ieee").exit_code == 0);
  const Run conflict = flashbits("op cvt --format e4m3 --round rne --overflow satfinite fp32:43f00000 ieee");
  CHECK(conflict.exit_code == 2);
  CHECK(conflict.err.find("--overflow satfinite conflicts with the word 'ieee'") != std::string::npos);
}

TEST_CASE("op --json is valid JSON with result, flags and the rounding event") {
  const Run r = flashbits("op add bf16 rne 3f80 3b80 --json");
  REQUIRE(r.exit_code == 0);
  nlohmann::json j;
  REQUIRE_NOTHROW(j = nlohmann::json::parse(r.out));
  CHECK(j.at("result") == "3f80");
  CHECK(j.at("flags") == "x");
  REQUIRE(j.contains("event"));
  const auto& ev = j.at("event");
  // 1 + 2^-8 in bf16: the first discarded bit is the 2^-8 bit (1), nothing below it.
  CHECK(ev.at("round_bit") == 1);
  CHECK(ev.at("sticky_bit") == 0);
  CHECK(ev.at("tie") == true);
  CHECK(ev.at("error_ulps").get<double>() == -0.5);
  CHECK(ev.at("addition").at("alignment_shift") == 8);
  CHECK(ev.at("addition").at("significand_overflow") == false);
}

TEST_CASE("op on e8m0 below 2^-127: pinned to 2^-127, underflow by tininess after rounding") {
  // fp32 0x00340000 = 0x340000 * 2^-149 = 1.625 * 2^-128, between 2^-128 and 2^-127.
  // With unbounded exponent it rounds to 2^-127 under rne (not tiny: x alone) and to
  // 2^-128 under rtz (tiny: x and u); e8m0 has nothing below 2^-127, so both give 00.
  CHECK(flashbits("op cvt e8m0 rne fp32:0x00340000").out == "00 x\n");
  CHECK(flashbits("op cvt e8m0 rtz fp32:0x00340000").out == "00 xu\n");
  CHECK(flashbits("op cvt e8m0 rup fp32:0x00340000").out == "00 x\n");
  // 1.25 * 2^-128 rounds down under rne too: tiny.
  CHECK(flashbits("op cvt e8m0 rne fp32:0x00280000").out == "00 xu\n");
  const Run r = flashbits("op cvt e8m0 rtz fp32:0x00340000 --json");
  REQUIRE(r.exit_code == 0);
  const auto ev = nlohmann::json::parse(r.out).at("event");
  // On the result's grid (LSB 2^-127) the value is 0.8125 LSB: round bit 1, sticky 1, and
  // the pinned result lies 1 - 0.8125 = 0.1875 LSB above it.
  CHECK(ev.at("round_bit") == 1);
  CHECK(ev.at("sticky_bit") == 1);
  CHECK(ev.at("error_ulps").get<double>() == 0.1875);
  CHECK(ev.at("direction") == "away-from-zero");
  const std::string explained = flashbits("op cvt e8m0 rtz fp32:0x00340000 --explain").out;
  CHECK(explained.find("pinned") != std::string::npos);
}

TEST_CASE("op --batch - : one line per input line, against MPFR") {
  std::mt19937_64 rng(20261122);
  const int n = sanitizer_scale() ? 200 : 4000;
  const IeeeFormat* formats[] = {&kFp32, &kTf32, &kBf16, &kFp16, &kE5m2};
  const char* ops[] = {"add", "sub", "mul"};
  struct Mode {
    const char* name;
    mpfr_rnd_t rnd;
  } modes[] = {{"rne", MPFR_RNDN}, {"rtz", MPFR_RNDZ}, {"rup", MPFR_RNDU}, {"rdn", MPFR_RNDD}};
  std::string input;
  std::vector<std::string> expected;
  for (int i = 0; i < n; ++i) {
    const IeeeFormat& f = *formats[rng() % std::size(formats)];
    const std::string op = ops[rng() % 3];
    const Mode& m = modes[rng() % 4];
    const std::uint32_t a = random_operand(f, rng);
    // One line in eight adds -a, an exact zero (+0, or -0 under rdn).
    std::uint32_t b = random_operand(f, rng);
    if (op == "add" && i % 8 == 0) b = a ^ (1u << (f.exp_bits + f.man_bits + f.shift));
    // Every third line's words carry 0x; the others are written as results are, zero-padded to
    // the format's width without 0x, which reads as the pattern even where it is all digits
    // (4010) or digits e digits (3e12).
    auto operand = [&](std::uint32_t bits) {
      char hex[16];
      std::snprintf(hex, sizeof hex, "%0*x", f.hex_digits, bits);
      return std::string(i % 3 == 0 ? "0x" : "") + hex;
    };
    char line[96];
    std::snprintf(line, sizeof line, "%s %s %s %s %s\n", op.c_str(), f.name, m.name, operand(a).c_str(),
                  operand(b).c_str());
    input += line;
    expected.push_back(expected_line(op, f, m.rnd, a, b));
  }
  const Run r = flashbits("op --batch -", input);
  CHECK(r.exit_code == 0);
  CHECK(r.err.empty());
  const auto got = lines_of(r.out);
  REQUIRE(got.size() == expected.size());
  const std::regex shape("[0-9a-f]+ (-|x?u?o?z?v?)");
  int mismatches = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != expected[i] && mismatches++ < 10) {
      MESSAGE("line " << i + 1 << ": " << lines_of(input)[i] << " -> " << got[i] << ", MPFR " << expected[i]);
    }
    CHECK(std::regex_match(got[i], shape));
  }
  CHECK(mismatches == 0);
}

TEST_CASE("op --batch: hex is lower-case and zero-padded to the format's width") {
  // Each result worked out by hand from the §2 encodings:
  const std::string input =
      "add fp32 rne 0x00000001 0x00000001\n"  // 2^-149 + 2^-149 = 2^-148: fp32 00000002, exact
      "add tf32 rne 0x00002000 0x00002000\n"  // tf32 min subnormal 2^-136 twice = 2^-135: 00004000
      "add bf16 rne bf80 bf80\n"              // -1 + -1 = -2: 1 10000000 0000000 = c000
      "add fp16 rne 0x0001 0x0001\n"          // 2^-24 twice = 2^-23: 0002
      "add e5m2 rne bc bc\n"                  // -1 + -1 = -2: 1 10000 00 = c0
      "add e4m3 rne 0x01 0x01\n"              // 2^-9 twice = 2^-8: 02
      "add e3m2 rne 0x01 0x01\n"              // 2^-4 twice = 2^-3: 02
      "add e2m1 rne 0x2 +1.0\n"               // 1 + 1 = 2: 0 10 0 = 4 -> 04
      "mul e8m0 rne 7f 0x80\n"                // 1 * 2 = 2 = 2^(128 - 127): 80
      "add fp32 rne 3fc00000 3fc00000\n"      // 1.5 + 1.5 = 3: 40400000
      "cvt bf16 rne fp32:c0968717\n"          // Qiu & Yao: -4.703990... -> -4.71875 = c097, inexact
      "add fp16 rne 3c00 -1.0\n";             // 1 + (-1) = +0 under rne: 0000
  const std::vector<std::string> expected = {"00000002 -", "00004000 -", "c000 -", "0002 -",     "c0 -",   "02 -",
                                             "02 -",       "04 -",       "80 -",   "40400000 -", "c097 x", "0000 -"};
  const Run r = flashbits("op --batch -", input);
  CHECK(r.exit_code == 0);
  CHECK(lines_of(r.out) == expected);
}

TEST_CASE("op --batch: a malformed line N prints 'error: line N: ...' and exits 2") {
  struct Bad {
    const char* line;
    const char* why;
  } bad[] = {{"add bf16 rne 3f80", "too few operands"},
             {"add bf17 rne 3f80 3b80", "bad format"},
             {"add bf16 rne 3g80 3b80", "bad hex"},
             {"add bf16 rne 0.1 1.0", "0.1 is not a bf16"},
             {"frob bf16 rne 3f80 3b80", "bad op"},
             {"add bf16 rnx 3f80 3b80", "bad rounding mode"},
             {"add bf16 rne 13f80 3b80", "pattern wider than 16 bits"}};
  for (const Bad& b : bad) {
    INFO(b.why);
    // Five good lines, then the bad one at line 6, then more good lines.
    std::string input;
    for (int i = 0; i < 5; ++i) input += "add bf16 rne 3f80 3b80\n";
    input += std::string(b.line) + "\n";
    input += "add bf16 rne 3f80 3b80\n";
    const Run r = flashbits("op --batch -", input);
    CHECK(r.exit_code == 2);
    CHECK(one_error_line(r));
    CHECK(r.err.rfind("error: line 6: ", 0) == 0);
    // The malformed line is never skipped: nothing after it is computed.
    CHECK(lines_of(r.out).size() <= 5);
  }
  // A NUL in a line (a file saved as UTF-16) cut the error message at it: "operand B: '3f80".
  const std::string nul_line = std::string("add bf16 rne 3f80 3f80") + '\0' + "x\n";
  const Run nul = flashbits("op --batch -", nul_line);
  CHECK(nul.exit_code == 2);
  CHECK(one_error_line(nul));
  CHECK(nul.err == "error: line 1: a NUL byte at column 23 (batch files are text: is it UTF-16? save it as UTF-8)\n");
  // A byte-order mark was echoed invisibly: "unknown operation 'add'".
  const Run bom = flashbits("op --batch -",
                            "\xEF\xBB\xBF"
                            "add bf16 rne 3f80 3f80\n");
  CHECK(bom.exit_code == 2);
  CHECK(one_error_line(bom));
  CHECK(bom.err == "error: line 1: starts with a UTF-8 byte-order mark (bytes EF BB BF); save the file without it\n");
  // Files joined with cat put one at the start of a later line.
  const Run joined = flashbits("op --batch -",
                               "add bf16 rne 3f80 3f80\n\xEF\xBB\xBF"
                               "add bf16 rne 3f80 3f80\n");
  CHECK(joined.exit_code == 2);
  CHECK(joined.err.rfind("error: line 2: starts with a UTF-8 byte-order mark", 0) == 0);
  CHECK(lines_of(joined.out).size() == 1);
}

TEST_CASE("op: bad format, bad hex, wrong operand count, non-representable decimal exit 2") {
  const char* bad[] = {
      "op add bf17 rne 3f80 3b80",   // unknown format
      "op add e9m2 rne 3f 3b",       // exponent bits out of range
      "op add bf16 rne 3g80 3b80",   // not hex
      "op add bf16 rne 3f80",        // one operand for add
      "op sqrt bf16 rne 3f80 3f80",  // two for sqrt
      "op fma bf16 rne 3f80 3f80",   // two for fma
      "op add bf16 rne 0.1 1.0",     // 0.1 is not a dyadic rational
      "op add e4m3 rne 1.0 +500.0",  // beyond e4m3's 448
      "op add fp16 rne 3c00 -1e-9",  // below fp16's 2^-24 and not zero
      "op add --format bf16 --round rne 3f80 3g80",
      "op cvt bf16 rne 3f80",  // cvt needs SRC:HEX
      // Decimals a double cannot hold exactly: strtod made them inf, 0 and 1.
      "op add fp32 rne +1e400 +1",
      "op mul fp32 rne +1e-400 +1",
      "op add bf16 rne -1e999 +0",
      "op add fp32 rne +1.00000000000000000001 +0",
      "op add fp32 rne +1e99999999999999999999 +0",
      "dot sm80 bf16 +1e400 3f80 3f80",
  };
  for (const char* args : bad) {
    INFO(args);
    const Run r = flashbits(args);
    CHECK(r.exit_code == 2);
    CHECK(one_error_line(r));
    CHECK(r.out.empty());
  }
  // A decimal that is exact is accepted: 1.0 + 0.5 = 1.5 = bf16 3fc0, exact.
  const Run ok = flashbits("op add bf16 rne 1.0 +0.5");
  CHECK(ok.exit_code == 0);
  CHECK(ok.out == "3fc0 -\n");
  // However many digits it takes: fp32's largest value (2^128 - 2^104) and least subnormal
  // (2^-149), written out in full.
  const Run largest = flashbits("op add fp32 rne +340282346638528859811704183484516925440 +0");
  CHECK(largest.exit_code == 0);
  CHECK(largest.out == "7f7fffff -\n");
  const Run least = flashbits(
      "op add fp32 rne "
      "+1.40129846432481707092372958328991613128026194187651577175706828388979108268586060148663818836212"
      "158203125e-45 +0");
  CHECK(least.exit_code == 0);
  CHECK(least.out == "00000001 -\n");
}

// Issue 21: bare integers were read as hex bit patterns (`op add bf16 rne 1 2` printed
// 0003, and 1e3 became the pattern 01e3). A word that is both hex digits and a decimal
// number is now refused as ambiguous, naming the word; a sign or a point makes a value,
// 0x a bit pattern (docs/COMMANDS.md "Operands").
TEST_CASE("op: an operand that reads as hex and as a decimal number is refused, naming it") {
  for (const char* args :
       {"op add bf16 rne 1 2", "op add bf16 rne 3f80 10", "op add bf16 rne 1e3 3f80", "op add fp16 rne 3c00 800",
        "op add --format bf16 --round rne 3f80 2", "op add bf16 rne 3f80 400", "op cvt bf16 rne fp32:10",
        "op cvt bf16 rne fp32:4120000", "op mul e4m3 rne 0001 4e", "op add e4m3 rne 4 38"}) {
    INFO(args);
    const Run r = flashbits(args);
    CHECK(r.exit_code == 2);
    CHECK(one_error_line(r));
    CHECK(r.err.find("ambiguous") != std::string::npos);
    CHECK(r.out.empty());
  }
  const Run named = flashbits("op add bf16 rne 3f80 1e3");
  CHECK(named.err.find("operand B: '1e3' is ambiguous") != std::string::npos);
  CHECK(named.err.find("0x1e3") != std::string::npos);  // how to say either
  CHECK(named.err.find("+1e3") != std::string::npos);
  // Values: a sign or a point. 1 + 2 = 3 = bf16 4040 (0 10000000 1000000), exact.
  CHECK(flashbits("op add bf16 rne +1 +2").out == "4040 -\n");
  CHECK(flashbits("op add bf16 rne 1.0 2.").out == "4040 -\n");
  // 1e3 = 1111101000b = 1.111101b * 2^9: bf16 0 10001000 1111010 = 447a; + 1 rounds back
  // to 1000 (the ulp at 2^9 is 4), inexact.
  CHECK(flashbits("op add bf16 rne +1e3 0x3f80").out == "447a x\n");
  // An exponent's sign marks a decimal too (no hex pattern has one): 1e+2 = 100 = 1.5625 *
  // 2^6, bf16 0 10000101 1001000 = 42c8. It was called ambiguous, offering 0x1e+2, which is
  // itself refused; 1e-2 is no bf16 value.
  CHECK(flashbits("op add bf16 rne 1e+2 0").out == "42c8 -\n");
  const Run tiny = flashbits("op add bf16 rne 1e-2 0");
  CHECK(tiny.exit_code == 2);
  CHECK(tiny.err.find("1e-2 is not exactly representable in bf16") != std::string::npos);
  // Bit patterns: 0x, or a word with a hex letter. 0x1 + 0x2 are bf16 subnormals: 0003.
  CHECK(flashbits("op add bf16 rne 0x1 0x2").out == "0003 -\n");
  CHECK(flashbits("op add bf16 rne 3f80 0x3f80").out == "4000 -\n");
  // All zeros is +0 either way; -0 is a value.
  CHECK(flashbits("op add bf16 rne 0 0000").out == "0000 -\n");
  CHECK(flashbits("op add bf16 rne -0 -0.0").out == "8000 -\n");
  // Found by the CLI contract audit ("hex ... with or without 0x; decimal operands where the
  // value is exactly representable"): a word of digits whose value the format cannot hold can
  // only be a pattern, and was refused all the same, with advice (+38) itself refused, so a
  // printed result such as bf16 4040 (3.0) did not read back. At the full width results are
  // printed in, it is read as the pattern: e4m3 38 is 1.0 (0 0111 000) and 1 + 1 = 2 is
  // 0 1000 000 = 40; bf16 4040 + 1 = 4 is 0 10000001 0000000 = 4080; fp16 8001 is -2^-24, and
  // 1 - 2^-24 rounds to nearest 1 (3c00), inexact; fp32 3e800000 is 0.25, bf16 3e80.
  CHECK(flashbits("op add e4m3 rne 38 38").out == "40 -\n");
  CHECK(flashbits("op add bf16 rne 4040 0x3f80").out == "4080 -\n");
  CHECK(flashbits("op add fp16 rne 3c00 8001").out == "3c00 x\n");
  CHECK(flashbits("op cvt bf16 rne fp32:3e800000").out == "3e80 -\n");
  CHECK(flashbits("dot sm80 bf16 0 3f80,4040 3f80,3f80").out == flashbits("dot sm80 bf16 0 3f80,0x4040 3f80,3f80").out);
  // The same where the decimal reading is a value of the format too (the second contract
  // audit: refused as ambiguous, so a printed result such as bf16 4000, 2.0, did not read
  // back): bf16 4000 is 2.0 and 2 + 1 = 3 is 4040; fp16 8000 is -0, and 1 + -0 = 1; e4m3 40
  // is 2.0 (0 1000 000) and 2 + 1 = 3 is 0 1000 100 = 44; fp32 41200000 is 10.0, bf16 4120;
  // e8m0's full-width 00 is its pattern 2^-127 (e8m0 has no zero), and 2^-127 * 2^0 (7f) is
  // exact; the short word 0 stays refused there.
  CHECK(flashbits("op add bf16 rne 4000 3f80").out == "4040 -\n");
  CHECK(flashbits("op add fp16 rne 3c00 8000").out == "3c00 -\n");
  CHECK(flashbits("op add e4m3 rne 40 38").out == "44 -\n");
  CHECK(flashbits("op cvt bf16 rne fp32:41200000").out == "4120 -\n");
  CHECK(flashbits("op mul e8m0 rne 00 7f").out == "00 -\n");
  CHECK(flashbits("op mul e8m0 rne 0 7f").exit_code == 2);
  CHECK(flashbits("op --batch -", "add bf16 rne 4000 3f80\nmul fp32 rne 40000000 40000000\n").out ==
        "4040 -\n40800000 -\n");
  CHECK(flashbits("dot sm80 bf16 40000000 4000,3f80 3f80,4000").out ==
        flashbits("dot sm80 bf16 0x40000000 0x4000,3f80 3f80,0x4000").out);
  // Shorter than that, it is more likely a value mistyped: refused, offering the pattern.
  const Run short_word = flashbits("op add bf16 rne 257 3f80");
  CHECK(short_word.exit_code == 2);
  CHECK(short_word.err ==
        "error: operand A: 257 is not exactly representable in bf16; write 0x257 for the bf16 bit "
        "pattern (a word of digits alone is read as one only at the full width of bf16 patterns, 4 digits)\n");
  // Longer, with zeros before the digits (found by fuzz_dot: the message's padding underflowed
  // and threw std::length_error): refused the same way, one line, exit 2.
  const Run long_word = flashbits("dot sm89 e4m3 0 038,8 0x38,0x38");
  CHECK(long_word.exit_code == 2);
  CHECK(long_word.err.find("038 is not exactly representable in e4m3; write 0x038") != std::string::npos);
  CHECK(one_error_line(long_word));
  CHECK(flashbits("op add bf16 rne 0257 0x3f80").exit_code == 0);
  // The batch and dot read operands the same way.
  const Run batch = flashbits("op --batch -", "add bf16 rne 3f80 3f80\nadd bf16 rne 1 2\n");
  CHECK(batch.exit_code == 2);
  CHECK(batch.out == "4000 -\n");
  CHECK(batch.err.rfind("error: line 2: operand A: '1' is ambiguous", 0) == 0);
  const Run dot = flashbits("dot sm80 bf16 0 3f80,10 3f80,3f80");
  CHECK(dot.exit_code == 2);
  CHECK(dot.err.find("'10' is ambiguous") != std::string::npos);
  // A word of more digits than the format's pattern has is no pattern: 0x12345 is not offered
  // for bf16, nor 0x127 for a ue8m0 scale byte.
  const Run wide = flashbits("op add bf16 rne 12345 3f80");
  CHECK(wide.exit_code == 2);
  CHECK(wide.err == "error: operand A: '12345' is wider than a bf16 bit pattern: write +12345 for the value\n");
  std::string twos;
  for (int i = 0; i < 32; ++i) twos += i ? ",0x2" : "0x2";
  const std::string mxf4 = "dot sm100 e2m1 00000000 " + twos + " " + twos +
                           " --kind mxf4 --scale-format ue8m0 --block 32 --scale-b 0x7f --scale-a ";
  const Run byte_wide = flashbits(mxf4 + "127");
  CHECK(byte_wide.exit_code == 2);
  CHECK(byte_wide.err.find("'127' is ambiguous: write 2^E for a power of two or +127") != std::string::npos);
  CHECK(byte_wide.err.find("0x127") == std::string::npos);
  CHECK(flashbits(mxf4 + "12").err.find("write 0x12 for the ue8m0 byte") != std::string::npos);
}

TEST_CASE("op: the stochastic stream's options with another mode are refused, not ignored") {
  for (const char* option : {"--sr-bits 5", "--seed 4", "--position 2"}) {
    INFO(option);
    const Run r = flashbits(std::string("op add bf16 rne 3f80 3b80 ") + option);
    CHECK(r.exit_code == 2);
    CHECK(one_error_line(r));
    CHECK(r.err.find("applies to stochastic rounding only (the mode is rne, not sr)") != std::string::npos);
  }
  CHECK(flashbits("op add bf16 sr 3f80 3b80 --sr-bits 5 --seed 4 --position 2").exit_code == 0);
  const Run batch = flashbits("op --batch - --position 7", "add bf16 sr 3f80 3b80\n");
  CHECK(batch.exit_code == 2);
  CHECK(batch.err.find("--batch and --position cannot be combined") != std::string::npos);
  // The syntax is in --help.
  const Run help = flashbits("op --help");
  CHECK(help.exit_code == 0);
  CHECK(help.out.find("ambiguous") != std::string::npos);
  CHECK(help.out.find("0x3f80") != std::string::npos);
}

TEST_CASE("op: a batch FILE that is a directory is bad input") {
  const Run r = flashbits("op --batch /tmp");
  CHECK(r.exit_code == 2);
  CHECK(one_error_line(r));
  CHECK(r.err.find("/tmp") != std::string::npos);
}

TEST_CASE("issue 21: op refuses conflicts it used to resolve silently") {
  // The satfinite word against an explicit --overflow ieee.
  for (const char* cmd : {"op add bf16 rne 7f7f 7f7f satfinite --overflow ieee",
                          "op add --format bf16 --round rne 7f7f 7f7f satfinite --overflow ieee",
                          "op add bf16 rne 7f7f 7f7f ieee --overflow satfinite"}) {
    CAPTURE(cmd);
    const Run r = flashbits(cmd);
    CHECK(r.exit_code == 2);
    CHECK(one_error_line(r));
    CHECK(r.err.find("--overflow") != std::string::npos);
    CHECK(r.out.empty());
  }
  // Agreeing or without --overflow: fine.
  CHECK(flashbits("op add bf16 rne 7f7f 7f7f satfinite --overflow satfinite").out == "7f7f xo\n");
  CHECK(flashbits("op add bf16 rne 7f7f 7f7f satfinite").out == "7f7f xo\n");
  // --batch with an option it ignores, including a batch line's word against --overflow.
  for (const char* opt : {"--format bf16", "--round rtz", "--json", "--explain"}) {
    CAPTURE(opt);
    const Run r = flashbits(std::string("op --batch - ") + opt, "add bf16 rne 3f80 3f80\n");
    CHECK(r.exit_code == 2);
    CHECK(one_error_line(r));
    CHECK(r.err.find("--batch and " + std::string(opt).substr(0, std::string(opt).find(' '))) != std::string::npos);
  }
  const Run line = flashbits("op --batch - --overflow ieee", "add bf16 rne 7f7f 7f7f satfinite\n");
  CHECK(line.exit_code == 2);
  CHECK(line.err.find("conflicts") != std::string::npos);
}

TEST_CASE("op: FORMAT and ROUND words given with --format and --round are named as such") {
  // It read as "add takes 2 operands, got 4" (the bad-input audit).
  const Run r = flashbits("op add bf16 rne 0x3f80 0x3f80 --format fp16 --round rne");
  CHECK(r.exit_code == 2);
  CHECK(one_error_line(r));
  CHECK(r.err.find("'bf16 rne' are FORMAT and ROUND words, given with --format and --round too") != std::string::npos);
  // Operands that happen to read as neither are still counted.
  CHECK(flashbits("op add --format bf16 --round rne 3f80 3f80 3f80").err.find("takes 2 operands, got 3") !=
        std::string::npos);
}

TEST_CASE("dot --batch: an unknown --model is named as the option's fault") {
  // It read as every line's fault: "line 1: MODEL 'sm80' differs from --model sm81".
  const Run r = flashbits("dot --batch - --model sm81", "sm80 bf16 0 3f80,3f80 3f80,3f80\n");
  CHECK(r.exit_code == 2);
  CHECK(one_error_line(r));
  CHECK(r.err == "error: --model: unknown dot model 'sm81' (see `flashbits models`)\n");
  CHECK(r.out.empty());
  // A known --model still checks each line's MODEL against it.
  const Run differs = flashbits("dot --batch - --model sm90-mma", "sm80 bf16 0 3f80,3f80 3f80,3f80\n");
  CHECK(differs.err.find("line 1: MODEL 'sm80' differs from --model sm90-mma") != std::string::npos);
}

TEST_CASE("issue 21: dot --batch --trace is refused rather than the trace dropped") {
  const Run r = flashbits("dot --batch - --trace", "sm80 bf16 0 3f80,3f80 3f80,3f80\n");
  CHECK(r.exit_code == 2);
  CHECK(one_error_line(r));
  CHECK(r.err.find("--batch and --trace") != std::string::npos);
  CHECK(r.out.empty());
  // Without --trace the batch runs; the single form still traces.
  CHECK(flashbits("dot --batch -", "sm80 bf16 0 3f80,3f80 3f80,3f80\n").exit_code == 0);
  CHECK(flashbits("dot sm80 bf16 0 3f80,3f80 3f80,3f80 --trace").out.find("step 0:") != std::string::npos);
}

TEST_CASE("issue 21: x/0 flags follow one documented rule in every format and policy; sNaN is quiet") {
  struct Case {
    const char* format;
    const char* one;
    const char* ieee;
    const char* satfinite;
  };
  // With inf: exact infinity, z alone; satfinite packs it as max finite. Without inf: an
  // overflow, xoz; NaN (e4m3) or max finite (e2m1, no NaN) under ieee.
  for (const Case& c :
       {Case{"fp32", "0x3f800000", "7f800000 z", "7f7fffff z"}, Case{"bf16", "0x3f80", "7f80 z", "7f7f z"},
        Case{"fp16", "0x3c00", "7c00 z", "7bff z"}, Case{"e5m2", "0x3c", "7c z", "7b z"},
        Case{"e4m3", "0x38", "7f xoz", "7e xoz"}, Case{"e2m1", "0x2", "07 xoz", "07 xoz"}}) {
    CAPTURE(c.format);
    CHECK(flashbits(std::string("op div ") + c.format + " rne " + c.one + " 0x0").out == std::string(c.ieee) + "\n");
    CHECK(flashbits(std::string("op div ") + c.format + " rne " + c.one + " 0x0 satfinite").out ==
          std::string(c.satfinite) + "\n");
  }
  // A signalling NaN operand is treated as quiet: canonical NaN, no flag (documented).
  CHECK(flashbits("op add fp32 rne 0x7f800001 0x3f800000").out == "7fc00000 -\n");
}

TEST_CASE("issue 21: a huge operand is not echoed whole into the error line") {
  const std::string huge(1 << 20, '7');  // 1 MiB word
  const Run batch = flashbits("op --batch -", "add bf16 rne " + huge + " 3f80\n");
  CHECK(batch.exit_code == 2);
  CHECK(one_error_line(batch));
  CHECK(batch.err.size() < 400);
  CHECK(batch.err.find("... (10485") != std::string::npos);
  // The count is the length of the word given: the quotes the message puts around it are
  // neither counted nor cut away.
  const Run mode = flashbits("op add bf16 " + std::string(300, '1') + " 3f80 3f80");
  CHECK(mode.exit_code == 2);
  CHECK(mode.err.find("'" + std::string(64, '1') + "... (300 bytes)' ") != std::string::npos);
  const Run dot = flashbits("dot --batch -", "sm80 bf16 0 " + huge + " 3f80\n");
  CHECK(dot.exit_code == 2);
  CHECK(dot.err.size() < 400);
}

TEST_CASE("op: a misspelt overflow word is named as that, not as a surplus operand") {
  for (const char* cmd : {"op add bf16 rne 3f80 3f80 sat", "op sqrt fp32 rne 40000000 saturate",
                          "op cvt e4m3 rne fp32:43f00000 satfin"}) {
    CAPTURE(cmd);
    const Run r = flashbits(cmd);
    CHECK(r.exit_code == 2);
    CHECK(one_error_line(r));
    CHECK(r.err.find("unknown overflow policy") != std::string::npos);
    CHECK(r.out.empty());
  }
  const Run batch = flashbits("op --batch -", "add bf16 rne 3f80 3f80 sat\n");
  CHECK(batch.exit_code == 2);
  CHECK(batch.err.find("unknown overflow policy") != std::string::npos);
  // A surplus word that is an operand (inf, a number) is still a count error.
  const Run surplus = flashbits("op add bf16 rne 3f80 3f80 inf");
  CHECK(surplus.exit_code == 2);
  CHECK(surplus.err.find("takes 2 operands, got 3") != std::string::npos);
  // Two policies: the valid one was called unknown ("'satfinite': unknown overflow policy").
  for (const char* cmd : {"op add bf16 rne 3f80 3f80 satfinite ieee", "op add bf16 rne 3f80 3f80 ieee ieee"}) {
    CAPTURE(cmd);
    const Run twice = flashbits(cmd);
    CHECK(twice.exit_code == 2);
    CHECK(one_error_line(twice));
    CHECK(twice.err.find("the overflow policy is given twice") != std::string::npos);
  }
  const Run batch_twice = flashbits("op --batch -", "add bf16 rne 3f80 3f80 satfinite ieee\n");
  CHECK(batch_twice.err.find("line 1: 'satfinite': the overflow policy is given twice") != std::string::npos);
}

// Found by the newcomer audit: a FORMAT: prefix on an operand of add (`bf16:3f80`, cvt's
// spelling) was called "not a hex bit pattern of bf16", which sends the reader to check the
// digits; and cvt without a prefix said "expected SRC_FORMAT:HEX" although a value
// (fp32:+1.5) is accepted. The prefix is named as cvt's alone, with the operand as the op
// reads it where the op's format holds the value. Expected patterns and values from the
// encodings (docs/DESIGN.md §2): bf16 3f80 = 1, bf16 3c00 = 2^(120-127) = 0.0078125,
// bf16 c000 = -2, fp16 3c00 = 1, fp16 c000 = -2, fp32 3fc00000 = 1.5, fp32 3f800001 = 1 + 2^-23
// (not a bf16 value), fp32 3f800000 = 1, bf16 3fc0 = 1.5.
TEST_CASE("op: a FORMAT: prefix outside cvt is named as cvt's, with the operand as the op reads it") {
  struct Case {
    const char *args, *error;
  };
  const Case cases[] = {
      {"op add bf16 rne bf16:3f80 bf16:3c00",
       "error: operand A: 'bf16:3f80': a FORMAT: prefix names cvt's source format only; for add write 0x3f80 or +1"},
      {"op add bf16 rne 3f80 bf16:3c00",
       "error: operand B: 'bf16:3c00': a FORMAT: prefix names cvt's source format only; for add write 0x3c00 or "
       "+0.0078125"},
      {"op mul fp32 rne fp16:3c00 +1",
       "error: operand A: 'fp16:3c00': a FORMAT: prefix names cvt's source format only; for mul write 0x3f800000 or "
       "+1"},
      {"op sub fp16 rne +1 bf16:c000",
       "error: operand B: 'bf16:c000': a FORMAT: prefix names cvt's source format only; for sub write 0xc000 or -2"},
      {"op add bf16 rne fp32:3fc00000 +1",
       "error: operand A: 'fp32:3fc00000': a FORMAT: prefix names cvt's source format only; for add write 0x3fc0 or "
       "+1.5"},
      // A value bf16 cannot hold, and a prefix that is no format: the general advice.
      {"op add bf16 rne fp32:3f800001 +1",
       "error: operand A: 'fp32:3f800001': a FORMAT: prefix names cvt's source format only; for add write an "
       "operand of bf16: a hex bit pattern (0x...) or a signed value (+1, -2.5)"},
      {"op sqrt bf16 rne foo:3f80",
       "error: operand A: 'foo:3f80': a FORMAT: prefix names cvt's source format only; for sqrt write an operand of "
       "bf16: a hex bit pattern (0x...) or a signed value (+1, -2.5)"},
      {"op add --format bf16 --round rne bf16:3f80 3f80",
       "error: operand A: 'bf16:3f80': a FORMAT: prefix names cvt's source format only; for add write 0x3f80 or +1"},
      {"op cvt bf16 rne 1.5",
       "error: cvt operand '1.5': expected SRC_FORMAT:OPERAND, the source format, a colon and a hex bit pattern or "
       "signed value of it, e.g. fp32:40490fdb or fp32:+1.5"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.args);
    const Run r = flashbits(c.args);
    CHECK(r.exit_code == 2);
    CHECK(r.err == std::string(c.error) + "\n");
    CHECK(r.out.empty());
  }
  const Run batch = flashbits("op --batch -", "add bf16 rne bf16:3f80 3f80\n");
  CHECK(batch.exit_code == 2);
  CHECK(batch.err ==
        "error: line 1: operand A: 'bf16:3f80': a FORMAT: prefix names cvt's source format only; for add write 0x3f80 "
        "or +1\n");
  // What the cvt message offers is accepted: fp32 +1.5 is bf16 3fc0, exact.
  const Run value = flashbits("op cvt bf16 rne fp32:+1.5");
  CHECK(value.exit_code == 0);
  CHECK(value.out == "3fc0 -\n");
  // And the two spellings the prefix message offers give what the prefixed words meant:
  // 1 + 1 = 2 (bf16 4000), exact.
  const Run offered = flashbits("op add bf16 rne 0x3f80 +1");
  CHECK(offered.exit_code == 0);
  CHECK(offered.out == "4000 -\n");
}

// Found by the GEMM audit: the shield main() puts on a word such as -nan (so that CLI11 takes
// it as an operand) stayed on option values, and the message quoted '\x1f-nan'.
TEST_CASE("op and dot: an option value that begins with a minus and a letter is read as typed") {
  std::string ones;
  for (int i = 0; i < 32; ++i) ones += (i ? ",0x38" : "0x38");
  const Run scale =
      flashbits("dot sm100 e4m3 0 " + ones + " " + ones + " --kind mxf8f6f4 --scale-a -nan --scale-b 0x7f");
  CHECK(scale.exit_code == 2);
  CHECK(scale.err.find("--scale-a[1]: -nan is not") != std::string::npos);
  CHECK(scale.err.find("\\x1f") == std::string::npos);
  CHECK(scale.err.find('\x1f') == std::string::npos);
  const Run round = flashbits("op add --format bf16 --round -rne 3f80 3f80");
  CHECK(round.exit_code == 2);
  CHECK(round.err.find("'-rne'") != std::string::npos);
  CHECK(round.err.find("\\x1f") == std::string::npos);
}
