// api/names.cpp: the parsers of api/names.hpp (contract there).
#include "api/names.hpp"

#include <mpfr.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "formats/decimal_text.hpp"
#include "attention/problem_limits.hpp"

namespace fb::api {

Format parse_format_or_throw(std::string_view text, std::string_view what) {
  Format f{};
  if (!parse_format(text, f)) {
    throw InputError(std::string(what) + ": unknown format '" + std::string(text) +
                     "' (expected fp32 tf32 bf16 fp16 e4m3 e5m2 e4m3fnuz e5m2fnuz e3m2 e2m3 e2m1 "
                     "e8m0, or eXmY with 2<=X<=8, 1<=Y<=23)");
  }
  return f;
}

RoundingMode parse_mode_or_throw(std::string_view text, std::string_view what) {
  RoundingMode m{};
  if (!parse_rounding_mode(text, m)) {
    throw InputError(std::string(what) + ": unknown rounding mode '" + std::string(text) +
                     "' (expected rne rna rtz rup rdn rto sr)");
  }
  return m;
}

OverflowPolicy parse_overflow_or_throw(std::string_view text, std::string_view what) {
  if (text == "ieee") return OverflowPolicy::ieee;
  if (text == "satfinite") return OverflowPolicy::satfinite;
  throw InputError(std::string(what) + ": unknown overflow policy '" + std::string(text) +
                   "' (expected ieee or satfinite)");
}

namespace {
// [+-]? (D+ [. D*]? | . D+) ([eE] [+-]? D+)?, or [+-]? inf|nan (any case).
bool is_decimal_word(const std::string& s) {
  std::size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  std::string rest = s.substr(i);
  for (char& c : rest) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (rest == "inf" || rest == "nan") return true;
  auto digits = [&](std::size_t& j) {
    const std::size_t from = j;
    while (j < s.size() && s[j] >= '0' && s[j] <= '9') ++j;
    return j - from;
  };
  std::size_t mantissa = digits(i);
  if (i < s.size() && s[i] == '.') {
    ++i;
    mantissa += digits(i);
  }
  if (mantissa == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (digits(i) == 0) return false;
  }
  return i == s.size();
}
}  // namespace

namespace {

// The value of a decimal word (is_decimal_word) when it is exactly a double, inf and nan
// included. strtod alone would round 1.00000000000000000001 to 1 and 1e400 to inf, so the
// word is read at 53 bits in MPFR, whose exponent range is far wider than a double's: exact
// there (ternary 0) and the same value as a double means exact.
std::optional<double> exact_decimal(const std::string& word) {
  const std::size_t sign = word[0] == '+' || word[0] == '-' ? 1 : 0;
  std::string rest = word.substr(sign);
  for (char& c : rest) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (rest == "inf" || rest == "nan") return std::strtod(word.c_str(), nullptr);
  mpfr_t x;
  mpfr_init2(x, 53);
  const bool exact = mpfr_strtofr(x, word.c_str(), nullptr, 10, MPFR_RNDN) == 0 && mpfr_number_p(x);
  const double d = mpfr_get_d(x, MPFR_RNDN);
  const bool same = exact && std::isfinite(d) && mpfr_cmp_d(x, d) == 0;
  mpfr_clear(x);
  if (!same) return std::nullopt;
  return d;
}

}  // namespace

std::uint32_t parse_operand_or_throw(const Format& f, std::string_view text, std::string_view what) {
  const std::string s(text);
  const std::string w(what);
  if (s.empty()) throw InputError(w + ": empty operand");
  const bool prefixed = s.size() >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
  // A sign anywhere (leading, or an exponent's: 1e+5, 1e-3) or a point: no hex pattern has one.
  const bool marked_decimal = s.find_first_of("+-.") != std::string::npos;
  const bool decimal = is_decimal_word(s);
  if (!prefixed && (marked_decimal || (decimal && !(s[0] >= '0' && s[0] <= '9')))) {
    // A value: signed, with a point, or inf / nan.
    if (!decimal) throw InputError(w + ": '" + s + "' is not a decimal number");
    std::optional<double> v = exact_decimal(s);
    std::uint32_t bits = 0;
    if (!v || !from_double_exact(f, *v, bits)) {
      throw InputError(w + ": " + s + " is not exactly representable in " + f.name +
                       " (give a hex bit pattern 0x... instead)");
    }
    return bits;
  }
  // A word of digits alone at the full width of f's patterns (4000 in bf16, 40 in e4m3,
  // 41200000 in fp32) is the pattern, whatever it reads as in decimal: results are written so
  // (zero-padded, no 0x), and the contract takes hex "with or without 0x", so a printed result
  // reads back. (It was refused as ambiguous where the decimal value fits the format, which
  // broke every script that feeds results back: found by the contract audit.)
  const bool full_width = s.size() == static_cast<std::size_t>(f.hex_digits());
  if (!prefixed && decimal && !full_width && s.find_first_not_of('0') != std::string::npos) {
    // Digits only (or digits e digits), shorter or zero-led longer: a hex pattern and perhaps
    // a decimal number, unless too wide to be a pattern of f (0x12345 is no bf16 pattern: not
    // offered).
    if (s.size() - s.find_first_not_of('0') > static_cast<std::size_t>(f.hex_digits()))
      throw InputError(w + ": '" + s + "' is wider than a " + f.name + " bit pattern: write +" + s + " for the value");
    const std::optional<double> v = exact_decimal(s);
    std::uint32_t value_bits = 0;
    if (v && from_double_exact(f, *v, value_bits))  // both readings are operands: refused
      throw InputError(w + ": '" + s + "' is ambiguous: write 0x" + s + " for the " + f.name + " bit pattern or +" + s +
                       " for the value");
    // The value is no operand either: a word shorter than f's patterns is more likely a value
    // typed than a pattern (257 in bf16), a longer one has zeros before a pattern's digits
    // (038 in e4m3), which no result is written as: refused, offering the pattern.
    throw InputError(w + ": " + s + " is not exactly representable in " + f.name + "; write 0x" + s + " for the " +
                     f.name + " bit pattern (a word of digits alone is read as one only at the full width of " +
                     f.name + " patterns, " + std::to_string(f.hex_digits()) + " digits)");
  }
  // A bare word of zeros is +0 either way, but only as wide as the format's patterns
  // (docs/CLI.md): "00000" is no bf16 pattern; and, shorter than the full width, only where
  // the format has a zero (e8m0's pattern 0 is 2^-127, so "0" would be read as that, silently;
  // "00", the full width, is the pattern as results are written).
  if (!prefixed && decimal && !full_width && !f.has_zero())
    throw InputError(w + ": '" + s + "' is ambiguous: " + f.name + " has no zero, and its bit pattern 0x" + s +
                     " is 2^" + std::to_string(f.emin()) + ": write 0x" + s + " for that pattern");
  if (!prefixed && decimal && s.size() > static_cast<std::size_t>(f.hex_digits()))
    throw InputError(w + ": '" + s + "' is wider than a " + f.name + " bit pattern (" + std::to_string(f.hex_digits()) +
                     " hex digits): write 0 for +0");
  std::string_view hex = text;
  if (prefixed) hex.remove_prefix(2);
  if (hex.empty() || hex.size() > 8) {
    throw InputError(w + ": '" + s + "' is not a hex bit pattern of " + f.name);
  }
  std::uint64_t v = 0;
  for (char ch : hex) {
    int d;
    if (ch >= '0' && ch <= '9')
      d = ch - '0';
    else if (ch >= 'a' && ch <= 'f')
      d = ch - 'a' + 10;
    else if (ch >= 'A' && ch <= 'F')
      d = ch - 'A' + 10;
    else
      throw InputError(w + ": '" + s + "' is not a hex bit pattern (0x...) or a decimal value (+1, 1.5)");
    v = v * 16 + static_cast<std::uint64_t>(d);
  }
  const std::uint64_t container_limit = std::uint64_t{1} << f.container_bits;
  const std::uint32_t layout_bits = static_cast<std::uint32_t>(v) >> f.storage_shift();
  if (v >= container_limit || (static_cast<std::uint32_t>(v) & ((1u << f.storage_shift()) - 1u)) != 0 ||
      (layout_bits & ~f.width_mask()) != 0) {
    throw InputError(w + ": 0x" + std::string(hex) + " is not a valid " + f.name + " bit pattern (" +
                     std::to_string(f.width()) + " bits" +
                     (f.storage_shift() ? ", low " + std::to_string(f.storage_shift()) + " bits zero" : "") + ")");
  }
  return static_cast<std::uint32_t>(v);
}

std::string hex_bits(const Format& f, std::uint32_t bits) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%0*x", f.hex_digits(), bits);
  return buf;
}

std::string flags_string(Flags flags) {
  char buf[6];
  flags_to_chars(flags, buf);
  return buf;
}

int jobs_or_throw(long long jobs, std::string_view option) {
  if (jobs < 1 || jobs > kMaxJobs)
    throw InputError(std::string(option) + " " + std::to_string(jobs) + ": expected 1.." + std::to_string(kMaxJobs) +
                     " threads");
  return static_cast<int>(jobs);
}

void check_problem_size(long long batch, long long heads, long long seqlen, long long headdim,
                        std::string_view seqlen_option) {
  const attn::SizeRefusal refusal = attn::problem_size_refusal(batch, heads, seqlen, headdim);
  if (!refusal) return;
  // The options given, each named as the user wrote it (--seqlen-k for the keys' length).
  std::vector<std::pair<std::string, long long>> sizes;
  if (batch != 1) sizes.emplace_back("--batch", batch);
  if (heads != 1) sizes.emplace_back("--heads", heads);
  sizes.emplace_back(std::string(seqlen_option), seqlen);
  sizes.emplace_back("--headdim", headdim);
  std::string given, smaller;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    given += (i ? " " : "") + sizes[i].first + " " + std::to_string(sizes[i].second);
    smaller += (i == 0 ? "" : i + 1 == sizes.size() ? " or " : ", ") + sizes[i].first;
  }
  throw InputError(given + ": " + refusal.reason + (refusal.too_large ? "; give a smaller " + smaller : ""));
}

void check_trials(long long trials, long long at_least, std::string_view option) {
  const std::string refusal = attn::trials_refusal(trials, at_least);
  if (!refusal.empty()) throw InputError(std::string(option) + " " + std::to_string(trials) + ": " + refusal);
}

int sr_bits_or_throw(long long bits, std::string_view option) {
  if (bits < 1 || bits > kMaxSrBits)
    throw InputError(std::string(option) + ": " + std::to_string(bits) + " is outside 1.." +
                     std::to_string(kMaxSrBits));
  return static_cast<int>(bits);
}

double alpha_or_throw(double alpha, std::string_view option) {
  if (!(std::isfinite(alpha) && alpha > 0.0 && alpha < 1.0))
    throw InputError(std::string(option) + " " + shortest_decimal(alpha) +
                     ": expected a significance level strictly between 0 and 1" +
                     (alpha == 1.0   ? " (a level within 2^-54 of 1 reads as 1 in double precision)"
                      : alpha == 0.0 ? " (a level below 2^-1074 reads as 0 in double precision)"
                                     : ""));
  // A level far below any test's reach; the run divides it among its comparisons (bias-test
  // --traces among every file's), and a smaller one reached 0 there, failing after the run.
  if (alpha < kSmallestAlpha)
    throw InputError(std::string(option) + " " + shortest_decimal(alpha) + ": below " +
                     shortest_decimal(kSmallestAlpha) +
                     ", the smallest significance level flashbits takes (the run divides the level among its "
                     "comparisons, and a smaller one may reach 0 in double precision)");
  return alpha;
}

double at_stake_or_throw(double ulps, std::string_view option) {
  if (!(std::isfinite(ulps) && ulps > 0.0))
    throw InputError(std::string(option) + " " + shortest_decimal(ulps) +
                     ": expected a positive, finite number of ulps" +
                     (ulps == 0.0 ? " (a number below 2^-1074 reads as 0 in double precision)" : ""));
  return ulps;
}

}  // namespace fb::api
