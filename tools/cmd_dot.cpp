// tools/cmd_dot.cpp: `flashbits dot`, tensor-core fused dot products, exactly (docs/CLI.md).
//
// Contract:
// - `flashbits dot [--model NAME] --batch FILE|-`: each line is
//   `MODEL INFMT C_HEX A1,...,Ak B1,...,Bk`; each output line is D's hex (fp32, or
//   fp16 for the *-f16acc models), lower case, zero padded.
// - `--model`, when given, is a cross-check: every line's MODEL must equal it (a
//   mismatch is a bad line). Without --batch, the five words of one line may be
//   given on the command line; `--trace` then also prints the per-step record.
// - A malformed line prints `error: line N: ...` on stderr and exits 2, after the
//   results of the lines before it. A model/input-format pair the hardware lacks is
//   such an error and names both.
// - The sm90 forms (sm90-mma bf16/fp16/tf32 and its f16acc, sm90-wgmma bf16/fp16/e4m3/e5m2)
//   were validated on an H200 (docs/DESIGN.md §4, §11); every other model's parameters are
//   published ones or assumptions NOT validated on hardware (`flashbits models` gives each
//   model's status).
// - Block-scaled (Blackwell kind::mxf8f6f4 / mxf4 / mxf4nvf4, emu/dot/tensor_core_block_scaled.hpp):
//   `--kind` on the command line (not --batch) selects the preset of MODEL with --scale-format
//   and --block (each may be left out when only one preset fits); --scale-a / --scale-b give
//   k / block scale bytes each; --input-b gives b's format when it differs from INFMT. The one
//   output line is `D_HEX (VALUE) UNMEASURED: emulation of ...`: hex first, as every dot line,
//   and always the UNMEASURED mark (no block-scaled preset is validated on hardware). No
//   --trace: the block-scaled model records no per-step trace.
// - AMD MFMA (CDNA1-3, emu/dot/tensor_core_amd.hpp): MODEL an AMD preset name (cdna1, cdna2, ...) on
//   the command line (not --batch); INFMT is a's format and b's unless --input-b names b's (the
//   mixed fp8 pairs). The output line is as the block-scaled one, with the UNMEASURED mark (no
//   AMD preset is validated on hardware). No --trace, --kind or scales: those models record no
//   trace and take no scales.
// - Every model is resolved by emu/dot/dot_model.hpp's one lookup (find_dot_model) and run
//   through its one call; what a model needs (scales, a trace) is read from the DotModel,
//   so the family decides only how the result line looks (below).
#include <bit>
#include <charconv>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "formats/decimal_text.hpp"
#include "emu/dot/dot_model.hpp"
#include "tools/cli_common.hpp"

namespace fb::cli {
namespace {

// The lookup's errors in the CLI's words (the option or positional word at fault).
constexpr DotModelWords kCliWords{"MODEL", "INFMT", "--input-b", "--kind", "--scale-format", "--block"};

// Whether D's line carries the UNMEASURED mark: the AMD and block-scaled families, none of
// whose presets is measured. An NVIDIA line is D's hex alone, as `dot --batch` has always
// printed it (scripts parse it; `flashbits models` gives each preset's status). This is the
// one place the CLI looks at the family, and only for the look of its output.
bool marked_output(const DotModel& m) { return m.family() != DotFamily::nvidia; }

std::vector<std::uint32_t> parse_list(const Format& f, const std::string& text, std::string_view what) {
  std::vector<std::uint32_t> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    out.push_back(parse_operand_or_throw(f, item, std::string(what) + "[" + std::to_string(out.size() + 1) + "]"));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// The block-scaled options and --input-b; all empty: an ordinary dot.
struct BlockScaledOptions {
  std::string kind, scale_format, block, input_b, scale_a, scale_b;  // empty: not given
  bool any_given() const {
    return !kind.empty() || !scale_format.empty() || !block.empty() || !input_b.empty() || !scale_a.empty() ||
           !scale_b.empty();
  }
};

struct DotOptions {
  std::string model, batch;
  std::vector<std::string> words;
  bool trace = false;
  BlockScaledOptions scaled;
};

// One dot's model and operands, parsed from the five words (and the options).
struct DotRequest {
  DotModel model;
  std::uint32_t c = 0;
  std::vector<std::uint32_t> a, b;
  std::vector<std::uint8_t> scale_a, scale_b;
};

std::string scale_format_name(const Format& f) { return std::string(fb::block_scale_format_name(f)); }

std::vector<std::uint8_t> parse_scales(const Format& scale, const std::string& text, const std::string& option,
                                       std::size_t expected, int k, int block);

// The dot model a `dot` line names (MODEL and INFMT, with --input-b/--kind/--scale-format/--block),
// through the one lookup every face uses (fb::find_dot_model).
DotModel dot_model_of_line(const std::vector<std::string>& words, const std::string& expected_model,
                           const BlockScaledOptions& s) {
  if (words.size() != 5) {
    throw InputError("expected 5 words `MODEL INFMT C_HEX A1,...,Ak B1,...,Bk`, got " + std::to_string(words.size()));
  }
  const std::string& name = words[0];
  if (!expected_model.empty() && name != expected_model) {
    throw InputError("MODEL '" + name + "' differs from --model " + expected_model);
  }
  const Format fa = parse_format_or_throw(words[1], "INFMT");
  std::optional<Format> fb;
  if (!s.input_b.empty()) fb = parse_format_or_throw(s.input_b, "--input-b");
  int block = 0;
  if (!s.block.empty()) {
    const auto [ptr, ec] = std::from_chars(s.block.data(), s.block.data() + s.block.size(), block);
    if (ec != std::errc() || ptr != s.block.data() + s.block.size() || block <= 0)
      throw InputError("--block: '" + s.block + "' is not a number of elements (32 or 16)");
  }
  try {
    return find_dot_model(DotModelQuery{name, fa, fb ? &*fb : nullptr, s.kind, s.scale_format, block}, kCliWords);
  } catch (const DotModelError& e) {
    throw InputError(e.what());
  }
}

DotRequest parse_dot(const std::vector<std::string>& words, const std::string& expected_model,
                     const BlockScaledOptions& s) {
  DotRequest req;
  req.model = dot_model_of_line(words, expected_model, s);
  const DotModel& m = req.model;
  req.c = parse_operand_or_throw(m.accumulator(), words[2], "C");
  req.a = parse_list(m.a_input(), words[3], "A");
  req.b = parse_list(m.b_input(), words[4], "B");
  if (req.a.size() != req.b.size()) {
    throw InputError("A has " + std::to_string(req.a.size()) + " elements but B has " + std::to_string(req.b.size()));
  }
  const int k = static_cast<int>(req.a.size());
  const int block = m.scale_block();
  if (block == 0) {
    for (const auto& [given, option] : {std::pair{&s.scale_a, "--scale-a"}, std::pair{&s.scale_b, "--scale-b"}})
      if (!given->empty())
        throw InputError(std::string(option) + ": model " + m.describe() +
                         " takes no scales (block-scaled dots do: give --kind)");
    return req;
  }
  if (k % block != 0)
    throw InputError("k = " + std::to_string(k) + " (the elements of A and B) is not a multiple of the block (" +
                     std::to_string(block) + ")");
  const auto blocks = static_cast<std::size_t>(k / block);
  req.scale_a = parse_scales(m.scale_format(), s.scale_a, "--scale-a", blocks, k, block);
  req.scale_b = parse_scales(m.scale_format(), s.scale_b, "--scale-b", blocks, k, block);
  return req;
}

std::uint32_t run_request(const DotRequest& r, DotTrace* trace) {
  try {
    return r.model.dot_bits(r.c, r.a, r.b, r.scale_a, r.scale_b, trace);
  } catch (const std::invalid_argument& e) {
    throw InputError(e.what());  // the checks in parse_dot should leave none
  }
}

// One scale byte: `2^E` (a power of two), a value (as an operand: signed or with a point,
// exactly representable in the scale format), or the byte in hex (`0x7f`, or bare with a hex
// letter: `7f`); a bare word of digits is refused as ambiguous, as for operands. Any byte
// 0x00..0xff is taken: ue4m3's sign bit is ignored by the hardware (the model's decode).
std::uint8_t parse_scale(const Format& scale, const std::string& word, const std::string& what) {
  const std::string name = scale_format_name(scale);
  if (word.size() > 2 && word[0] == '2' && word[1] == '^') {
    int e = 0;
    const char* end = word.data() + word.size();
    const char* digits = word.data() + 2 + (word[2] == '+' && word.size() > 3 && word[3] != '-' ? 1 : 0);
    const auto [ptr, ec] = std::from_chars(digits, end, e);
    std::uint32_t bits = 0;
    if (ec != std::errc() || ptr != end)
      throw InputError(what + ": '" + word + "' is not 2^E with E a decimal integer");
    if (e < -1000 || e > 1000 || !from_double_exact(scale, std::ldexp(1.0, e), bits))
      throw InputError(what + ": " + word + " is not a " + name + " scale");
    return static_cast<std::uint8_t>(bits);
  }
  const bool prefixed = word.size() >= 2 && word[0] == '0' && (word[1] == 'x' || word[1] == 'X');
  const char first = word.empty() ? '+' : static_cast<char>(std::tolower(static_cast<unsigned char>(word[0])));
  const bool value = !prefixed && (first == '+' || first == '-' || first == 'i' || first == 'n' ||
                                   word.find('.') != std::string::npos);
  if (value) return static_cast<std::uint8_t>(parse_operand_or_throw(scale, word, what));
  const std::string hex = prefixed ? word.substr(2) : word;
  const bool digits_only = hex.find_first_not_of("0123456789") == std::string::npos;
  // A word of zeros is +0 either way for ue4m3; for ue8m0 byte 0 is 2^-127, not zero.
  if (!prefixed && digits_only && (scale == formats::e8m0 || hex.find_first_not_of('0') != std::string::npos)) {
    // 0xWORD is offered only where it is a byte (127 is not).
    const std::size_t significant = hex.size() - std::min(hex.size(), hex.find_first_not_of('0'));
    const std::string as_byte = significant <= 2 ? "write 0x" + word + " for the " + name + " byte, " : "write ";
    throw InputError(what + ": '" + word + "' is ambiguous: " + as_byte + "2^E for a power of two or +" + word +
                     " for the value");
  }
  if (hex.empty() || hex.size() > 2 || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
    throw InputError(what + ": '" + word + "' is not a scale byte (0x00..0xff, 2^E, or a value such as +0.5)");
  return static_cast<std::uint8_t>(std::stoul(hex, nullptr, 16));
}

std::vector<std::uint8_t> parse_scales(const Format& scale, const std::string& text, const std::string& option,
                                       std::size_t expected, int k, int block) {
  if (text.empty())
    throw InputError(option + ": missing: give k / block = " + std::to_string(expected) + " scale byte(s)");
  std::vector<std::uint8_t> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    out.push_back(parse_scale(scale, item, option + "[" + std::to_string(out.size() + 1) + "]"));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (out.size() != expected)
    throw InputError(option + ": " + std::to_string(out.size()) + " scale(s) given, but k = " + std::to_string(k) +
                     " with block " + std::to_string(block) + " needs " + std::to_string(expected));
  return out;
}

int run_batch(const DotOptions& o) {
  // An unknown --model is the option's fault, before any line: each line's MODEL was said to
  // differ from it instead.
  if (!o.model.empty() && !is_dot_model_name(o.model)) throw InputError(unknown_dot_model_text("--model", o.model));
  return run_line_batch(o.batch, [&](const std::vector<std::string>& words, std::uint64_t) {
    const DotRequest req = parse_dot(words, o.model, {});
    // A batch prints D's hex alone, one per line: no room for the mark those models carry.
    if (marked_output(req.model))
      throw InputError("MODEL: " + req.model.describe() +
                       " is an UNMEASURED emulation whose result carries that mark: give its words on the command "
                       "line, not --batch");
    return hex_bits(req.model.accumulator(), run_request(req, nullptr));
  });
}

void print_trace(const DotTrace& t) {
  for (std::size_t i = 0; i < t.steps.size(); ++i) {
    const DotStepEvent& s = t.steps[i];
    if (s.special) {
      std::printf("step %zu: products %d..%d: NaN/inf step (no fixed-point sum)\n", i, s.first_product,
                  s.first_product + s.terms - 2);
      continue;
    }
    const std::string largest =
        s.every_term_zero ? std::string("none (every term is zero)") : std::to_string(s.largest_exponent);
    std::printf(
        "step %zu: products %d..%d, largest exponent %s, F=%d, truncated %d term(s) by %.17g, "
        "carry-out %s, normalisation shift %d, output residue %.17g\n",
        i, s.first_product, s.first_product + s.terms - 2, largest.c_str(), s.fraction_bits, s.truncated_terms,
        s.truncated_value, s.carry_out ? "yes" : "no", s.normalisation_shift, s.output_residue);
  }
}

int run_dot(const DotOptions& o) {
  if (!o.batch.empty()) {
    if (o.scaled.any_given())
      throw InputError(
          "--batch lines take no --kind, --scale-format, --block, --scale-a, --scale-b or --input-b: give one such "
          "dot's words on the command line, not --batch");
    if (!o.words.empty()) throw InputError("--batch takes no dot words on the command line");
    // A batch prints one D per line; a trace would break that one-to-one format.
    if (o.trace)
      throw InputError(
          "--batch and --trace cannot be combined (a batch prints one D per line; trace one "
          "line at a time)");
    return run_batch(o);
  }
  if (o.words.empty()) throw InputError("give --batch FILE|- or the words MODEL INFMT C_HEX A1,... B1,...");
  const DotRequest req = parse_dot(o.words, o.model, o.scaled);
  const DotModel& m = req.model;
  if (o.trace && !m.records_trace())
    throw InputError("--trace: " + m.describe() + " records no per-step trace (leave out --trace)");
  DotTrace trace;
  const std::uint32_t d = run_request(req, o.trace ? &trace : nullptr);
  if (!marked_output(m)) {
    std::cout << hex_bits(m.accumulator(), d) << "\n";
    if (o.trace) print_trace(trace);
    return kExitOk;
  }
  std::cout << hex_bits(m.accumulator(), d) << " (" << shortest_decimal(std::bit_cast<float>(d))
            << ") UNMEASURED: emulation of " << m.describe() << " (MMA-Sim's parameters, not validated on hardware)\n";
  return kExitOk;
}

Runner setup_dot(CLI::App& app) {
  auto o = std::make_shared<DotOptions>();
  // The shield main() puts on a word such as -nan reaches option values too: every value
  // option takes it off, so that a message quotes the word as typed.
  app.add_option("--model", o->model, "expected model of every line (a cross-check; see `flashbits models`)")
      ->transform(operand_word());
  app.add_option("--batch", o->batch, "file of lines `MODEL INFMT C_HEX A1,...,Ak B1,...,Bk`, or - for stdin")
      ->transform(operand_word());
  app.add_flag("--trace", o->trace, "print each fused step's alignment, truncation and normalisation");
  app.add_option("words", o->words, "one line's words: MODEL INFMT C_HEX A1,...,Ak B1,...,Bk")
      ->transform(operand_word());
  app.add_option("--kind", o->scaled.kind,
                 "block-scaled Blackwell kind (sm100, sm120): mxf8f6f4, mxf4 or mxf4nvf4; UNMEASURED emulation")
      ->transform(operand_word());
  app.add_option("--scale-format", o->scaled.scale_format,
                 "block-scaled: ue8m0 or ue4m3 (may be left out when the kind has one)")
      ->transform(operand_word());
  app.add_option("--block", o->scaled.block,
                 "block-scaled: elements of k per scale, 32 or 16 (may be left out when the kind has one)")
      ->transform(operand_word());
  app.add_option("--scale-a", o->scaled.scale_a,
                 "block-scaled: a's k/block scales S1,...: hex byte (0x7f), 2^E or an exact value (+0.5)")
      ->transform(operand_word());
  app.add_option("--scale-b", o->scaled.scale_b, "block-scaled: b's k/block scales, as --scale-a")
      ->transform(operand_word());
  app.add_option("--input-b", o->scaled.input_b,
                 "b's format when it differs from INFMT (block-scaled mxf8f6f4; AMD cdna3 fp8/bf8 pairs)")
      ->transform(operand_word());
  return [o] { return run_dot(*o); };
}

}  // namespace
FLASHBITS_SUBCOMMAND(
    dot, "dot",
    "Tensor-core fused dot products D = C + sum a_i*b_i, bit for bit (sm90 forms validated on an H200, the "
    "others unmeasured: see `flashbits models`)",
    setup_dot);
}  // namespace fb::cli
