// api/names.hpp: what users name and type, parsed the same way by every face: formats,
// rounding modes, overflow policies, operands, and the values of the options several
// commands and Python functions share.
//
// Contract: each parser returns the parsed value or throws InputError naming `what` (the
// caller's spelling of the option or argument: "--format", "fmt") and the offending word.
// The limits are those of the engine (attention/problem_limits.hpp) and of the rounding core.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "api/input_error.hpp"
#include "emu/rounding.hpp"
#include "formats/format.hpp"

namespace fb::api {

Format parse_format_or_throw(std::string_view text, std::string_view what);
RoundingMode parse_mode_or_throw(std::string_view text, std::string_view what);
OverflowPolicy parse_overflow_or_throw(std::string_view text, std::string_view what);
// An operand of `op` and `dot` (docs/COMMANDS.md "Operands"):
// - a bit pattern in hex: "0x3f80", or bare "3f80" when the word cannot be read as a
//   decimal number (it holds a hex letter other than an exponent's e, as "3f80", "c097");
// - a value, exactly representable in the format: a decimal with a sign or a point or both
//   ("1.5", "-2", "+0.5e3", "-0", "1.0"), or inf / nan with an optional sign.
// A bare word of digits only, or digits e digits, at the full width results are printed in
// ("4000" or "4040" in bf16, "40" in e4m3, "41200000" in fp32) is the bit pattern, whatever
// it reads as in decimal, so a result reads back (the contract: hex with or without 0x).
// Shorter (or zero-led longer), it is both where its value is exactly representable in the
// format ("1", "10", "1e3" in bf16): ambiguous and refused, naming the word and both readings
// -- except all zeros, +0 either way where the format has a zero; where its value is not
// representable it is refused, offering 0x. Throws InputError naming `what` and the word.
std::uint32_t parse_operand_or_throw(const Format& f, std::string_view text, std::string_view what);
// A bit pattern as the format's hex digits ("3f80"); flags as the letters xuozv or "-".
std::string hex_bits(const Format& f, std::uint32_t bits);
std::string flags_string(Flags flags);

// ---- option values; each throws InputError naming `option` ---------------------------
// Worker threads: 1..kMaxJobs (results never depend on the count).
inline constexpr int kMaxJobs = 1024;
int jobs_or_throw(long long jobs, std::string_view option = "--jobs");
// Problem sizes, checked before anything is allocated against the limits of
// attention/problem_limits.hpp: each size positive, at most attn::kMaxTensorElements elements
// per tensor and attn::kMaxMemoryBytes of memory estimate; trials at most attn::kMaxTrials.
void check_problem_size(long long batch, long long heads, long long seqlen, long long headdim,
                        std::string_view seqlen_option = "--seqlen");
void check_trials(long long trials, long long at_least, std::string_view option = "--trials");
// Stochastic rounding's random bits: 1..kMaxSrBits.
int sr_bits_or_throw(long long bits, std::string_view option = "--sr-bits");
// A significance level, finite, in [kSmallestAlpha, 1).
inline constexpr double kSmallestAlpha = 1e-100;
double alpha_or_throw(double alpha, std::string_view option = "--alpha");
// The size of bias at stake in a verdict (studies/verdict.hpp), in ulps: finite and > 0.
double at_stake_or_throw(double ulps, std::string_view option = "--at-stake");

}  // namespace fb::api
