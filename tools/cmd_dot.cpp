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
#include <bit>
#include <charconv>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>

#include "emu/dot/tensor_core.hpp"
#include "emu/dot/tensor_core_amd.hpp"
#include "emu/dot/tensor_core_block_scaled.hpp"
#include "tools/cli_common.hpp"

namespace fb::cli {
namespace {

constexpr std::string_view kDotInputs[] = {"bf16", "fp16", "tf32", "e4m3", "e5m2", "e3m2", "e2m3", "e2m1"};

struct DotRequest {
  const TensorCoreModel* model = nullptr;
  std::uint32_t c = 0;
  std::vector<std::uint32_t> a, b;
};

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

DotRequest parse_dot_words(const std::vector<std::string>& words, const std::string& expected_model) {
  if (words.size() != 5) {
    throw InputError("expected 5 words `MODEL INFMT C_HEX A1,...,Ak B1,...,Bk`, got " + std::to_string(words.size()));
  }
  const std::string& name = words[0];
  if (!expected_model.empty() && name != expected_model) {
    throw InputError("MODEL '" + name + "' differs from --model " + expected_model);
  }
  if (is_amd_dot_model_name(name)) {
    throw InputError("MODEL: AMD MFMA model '" + name + "' takes the words on the command line, not --batch");
  }
  if (!is_tensor_core_model_name(name)) {
    throw InputError("MODEL: unknown dot model '" + name + "' (see `flashbits models`)");
  }
  bool known_input = false;
  for (auto n : kDotInputs) known_input |= words[1] == n;
  if (!known_input) throw InputError("INFMT: '" + words[1] + "' is not one of bf16 fp16 tf32 e4m3 e5m2 e3m2 e2m3 e2m1");
  const Format input = parse_format_or_throw(words[1], "INFMT");
  DotRequest req;
  req.model = find_tensor_core_model(name, input);
  if (!req.model) {
    throw InputError("model " + name + " has no " + words[1] + " input form (that hardware lacks it)");
  }
  req.c = parse_operand_or_throw(accumulator_format(*req.model), words[2], "C");
  req.a = parse_list(input, words[3], "A");
  req.b = parse_list(input, words[4], "B");
  if (req.a.size() != req.b.size()) {
    throw InputError("A has " + std::to_string(req.a.size()) + " elements but B has " + std::to_string(req.b.size()));
  }
  return req;
}

std::string run_request(const DotRequest& r, DotTrace* trace) {
  return hex_bits(accumulator_format(*r.model), fused_dot_bits(*r.model, r.c, r.a, r.b, trace));
}

// The block-scaled options; `kind` empty: an ordinary dot.
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

// ---- block-scaled kinds ------------------------------------------------------------
std::string scale_format_name(const Format& f) { return std::string(fb::block_scale_format_name(f)); }

std::string preset_combination(const BlockScaledModel& m) {
  return std::string(m.kind) + " " + scale_format_name(m.scale) + " " + std::to_string(m.block);
}

std::string accepted_inputs(const BlockScaledModel& m) {
  std::string out;
  for (const Format& f : m.inputs) {
    if (!out.empty()) out += ' ';
    out += f.name;
  }
  return out;
}

// The preset that MODEL and the options name; InputError listing the valid combinations
// when none (or more than one, with --scale-format or --block left out) fits.
const BlockScaledModel& choose_block_scaled_model(const std::string& name, const BlockScaledOptions& o) {
  std::string valid;
  std::vector<const BlockScaledModel*> fits;
  for (const BlockScaledModel& m : block_scaled_models()) {
    if (m.name != name) continue;
    if (!valid.empty()) valid += ", ";
    valid += preset_combination(m);
    if (m.kind == o.kind && (o.scale_format.empty() || scale_format_name(m.scale) == o.scale_format) &&
        (o.block.empty() || std::to_string(m.block) == o.block))
      fits.push_back(&m);
  }
  if (valid.empty()) {
    std::string names;
    for (const BlockScaledModel& m : block_scaled_models())
      if (names.find(std::string(m.name)) == std::string::npos) names += " " + std::string(m.name);
    throw InputError("MODEL: '" + name + "' has no block-scaled kinds (--kind); models with them:" + names);
  }
  const std::string given = "--kind " + o.kind + (o.scale_format.empty() ? "" : " --scale-format " + o.scale_format) +
                            (o.block.empty() ? "" : " --block " + o.block);
  if (fits.empty())
    throw InputError("model " + name + " has no block-scaled form " + given +
                     "; valid (KIND SCALE-FORMAT BLOCK): " + valid);
  if (fits.size() > 1)
    throw InputError("model " + name + " " + given + " is ambiguous: give --scale-format and --block; valid (KIND " +
                     "SCALE-FORMAT BLOCK): " + valid);
  return *fits.front();
}

// An input format the preset takes, named in the error when it does not.
Format block_scaled_input(const BlockScaledModel& m, const std::string& text, std::string_view what) {
  const Format f = parse_format_or_throw(text, what);
  if (!block_scaled_accepts(m, f))
    throw InputError(std::string(what) + ": " + std::string(m.name) + " kind::" + std::string(m.kind) + " takes no " +
                     text + " operand (it takes " + accepted_inputs(m) + ")");
  return f;
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
  if (!prefixed && digits_only && (scale == formats::e8m0 || hex.find_first_not_of('0') != std::string::npos))
    throw InputError(what + ": '" + word + "' is ambiguous: write 0x" + word + " for the " + name +
                     " byte, 2^E for a power of two or +" + word + " for the value");
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

std::string shortest_value(float x) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}

int run_block_scaled(const DotOptions& o) {
  const BlockScaledOptions& s = o.scaled;
  if (!o.batch.empty()) throw InputError("--kind (block-scaled dot) takes the words on the command line, not --batch");
  if (o.trace) throw InputError("--trace: the block-scaled model records no per-step trace (leave out --trace)");
  if (o.words.size() != 5)
    throw InputError("--kind: expected 5 words `MODEL INFMT C_HEX A1,...,Ak B1,...,Bk`, got " +
                     std::to_string(o.words.size()));
  const std::string& name = o.words[0];
  if (!o.model.empty() && name != o.model) throw InputError("MODEL '" + name + "' differs from --model " + o.model);
  if (!s.scale_format.empty() && s.scale_format != "ue8m0" && s.scale_format != "ue4m3")
    throw InputError("--scale-format: '" + s.scale_format + "' is not one of ue8m0 ue4m3");
  const BlockScaledModel& m = choose_block_scaled_model(name, s);
  const Format fa = block_scaled_input(m, o.words[1], "INFMT");
  const Format fb = s.input_b.empty() ? fa : block_scaled_input(m, s.input_b, "--input-b");
  const std::uint32_t c = parse_operand_or_throw(formats::fp32, o.words[2], "C");
  const std::vector<std::uint32_t> a = parse_list(fa, o.words[3], "A"), b = parse_list(fb, o.words[4], "B");
  if (a.size() != b.size())
    throw InputError("A has " + std::to_string(a.size()) + " elements but B has " + std::to_string(b.size()));
  const int k = static_cast<int>(a.size());
  if (k % m.block != 0)
    throw InputError("k = " + std::to_string(k) + " (the elements of A and B) is not a multiple of the block (" +
                     std::to_string(m.block) + ")");
  const auto blocks = static_cast<std::size_t>(k / m.block);
  const std::vector<std::uint8_t> sa = parse_scales(m.scale, s.scale_a, "--scale-a", blocks, k, m.block);
  const std::vector<std::uint8_t> sb = parse_scales(m.scale, s.scale_b, "--scale-b", blocks, k, m.block);
  std::uint32_t d = 0;
  try {
    d = fused_dot_block_scaled_bits(m, fa, fb, c, a, b, sa, sb);
  } catch (const std::invalid_argument& e) {
    throw InputError(e.what());  // the checks above should leave none
  }
  std::cout << hex_bits(formats::fp32, d) << " (" << shortest_value(std::bit_cast<float>(d))
            << ") UNMEASURED: emulation of " << m.name << " kind::" << m.kind << " " << scale_format_name(m.scale)
            << " block " << m.block << ", " << fa.name << " x " << fb.name
            << " (MMA-Sim's parameters, not validated on hardware)\n";
  return kExitOk;
}

// ---- AMD MFMA (CDNA1-3) -------------------------------------------------------------
// The formats of MODEL's presets, `a` or `a x b` for the mixed pairs (for the error naming them).
std::string amd_input_forms(const std::string& name) {
  std::string out;
  for (const AmdDotModel& m : amd_dot_models()) {
    if (m.name != name) continue;
    if (!out.empty()) out += ", ";
    out += m.a_input.name;
    if (m.b_input != m.a_input) out += std::string(" x ") + m.b_input.name + " (--input-b)";
  }
  return out;
}

int run_amd(const DotOptions& o) {
  const BlockScaledOptions& s = o.scaled;
  if (!o.batch.empty()) throw InputError("--batch: AMD MFMA models take the words on the command line, not --batch");
  if (o.trace) throw InputError("--trace: the AMD MFMA models record no per-step trace (leave out --trace)");
  if (!s.kind.empty() || !s.scale_format.empty() || !s.block.empty() || !s.scale_a.empty() || !s.scale_b.empty())
    throw InputError(
        "--kind, --scale-format, --block, --scale-a and --scale-b belong to a block-scaled dot (sm100, "
        "sm120), not to AMD MFMA model " +
        o.words[0]);
  if (o.words.size() != 5)
    throw InputError("expected 5 words `MODEL INFMT C_HEX A1,...,Ak B1,...,Bk`, got " + std::to_string(o.words.size()));
  const std::string& name = o.words[0];
  if (!o.model.empty() && name != o.model) throw InputError("MODEL '" + name + "' differs from --model " + o.model);
  const Format fa = parse_format_or_throw(o.words[1], "INFMT");
  const Format fb = s.input_b.empty() ? fa : parse_format_or_throw(s.input_b, "--input-b");
  const AmdDotModel* m = find_amd_dot_model(name, fa, fb);
  if (!m) {
    const std::string given = fb == fa ? std::string(fa.name) : std::string(fa.name) + " x " + fb.name;
    throw InputError("model " + name + " has no " + given + " input form (that hardware lacks it); it takes " +
                     amd_input_forms(name));
  }
  const std::uint32_t c = parse_operand_or_throw(formats::fp32, o.words[2], "C");
  const std::vector<std::uint32_t> a = parse_list(fa, o.words[3], "A"), b = parse_list(fb, o.words[4], "B");
  if (a.size() != b.size())
    throw InputError("A has " + std::to_string(a.size()) + " elements but B has " + std::to_string(b.size()));
  std::uint32_t d = 0;
  try {
    d = fused_dot_amd_bits(*m, c, a, b);
  } catch (const std::invalid_argument& e) {
    throw InputError(e.what());  // the checks above should leave none
  }
  std::cout << hex_bits(formats::fp32, d) << " (" << shortest_value(std::bit_cast<float>(d))
            << ") UNMEASURED: emulation of " << m->name << " " << fa.name << " x " << fb.name
            << " (MMA-Sim's parameters, not validated on hardware)\n";
  return kExitOk;
}

int run_batch(const DotOptions& o) {
  return run_line_batch(o.batch, [&](const std::vector<std::string>& words, std::uint64_t) {
    return run_request(parse_dot_words(words, o.model), nullptr);
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
    std::printf(
        "step %zu: products %d..%d, largest exponent %d, F=%d, truncated %d term(s) by %.17g, "
        "carry-out %s, normalisation shift %d, output residue %.17g\n",
        i, s.first_product, s.first_product + s.terms - 2, s.largest_exponent, s.fraction_bits, s.truncated_terms,
        s.truncated_value, s.carry_out ? "yes" : "no", s.normalisation_shift, s.output_residue);
  }
}

int run_dot(const DotOptions& o) {
  if (!o.words.empty() && is_amd_dot_model_name(o.words[0])) return run_amd(o);
  if (!o.scaled.kind.empty()) return run_block_scaled(o);
  if (o.scaled.any_given())
    throw InputError(
        "--scale-format, --block, --scale-a, --scale-b and --input-b belong to a block-scaled dot: give --kind");
  if (!o.batch.empty()) {
    if (!o.words.empty()) throw InputError("--batch takes no dot words on the command line");
    // A batch prints one D per line; a trace would break that one-to-one format.
    if (o.trace)
      throw InputError(
          "--batch and --trace cannot be combined (a batch prints one D per line; trace one "
          "line at a time)");
    return run_batch(o);
  }
  if (o.words.empty()) throw InputError("give --batch FILE|- or the words MODEL INFMT C_HEX A1,... B1,...");
  const DotRequest req = parse_dot_words(o.words, o.model);
  DotTrace trace;
  std::cout << run_request(req, o.trace ? &trace : nullptr) << "\n";
  if (o.trace) print_trace(trace);
  return kExitOk;
}

Runner setup_dot(CLI::App& app) {
  auto o = std::make_shared<DotOptions>();
  app.add_option("--model", o->model, "expected model of every line (a cross-check; see `flashbits models`)");
  app.add_option("--batch", o->batch, "file of lines `MODEL INFMT C_HEX A1,...,Ak B1,...,Bk`, or - for stdin");
  app.add_flag("--trace", o->trace, "print each fused step's alignment, truncation and normalisation");
  app.add_option("words", o->words, "one line's words: MODEL INFMT C_HEX A1,...,Ak B1,...,Bk");
  app.add_option("--kind", o->scaled.kind,
                 "block-scaled Blackwell kind (sm100, sm120): mxf8f6f4, mxf4 or mxf4nvf4; UNMEASURED emulation");
  app.add_option("--scale-format", o->scaled.scale_format,
                 "block-scaled: ue8m0 or ue4m3 (may be left out when the kind has one)");
  app.add_option("--block", o->scaled.block,
                 "block-scaled: elements of k per scale, 32 or 16 (may be left out when the kind has one)");
  app.add_option("--scale-a", o->scaled.scale_a,
                 "block-scaled: a's k/block scales S1,...: hex byte (0x7f), 2^E or an exact value (+0.5)");
  app.add_option("--scale-b", o->scaled.scale_b, "block-scaled: b's k/block scales, as --scale-a");
  app.add_option("--input-b", o->scaled.input_b,
                 "b's format when it differs from INFMT (block-scaled mxf8f6f4; AMD cdna3 fp8/bf8 pairs)");
  return [o] { return run_dot(*o); };
}

}  // namespace
FLASHBITS_SUBCOMMAND(
    dot, "dot",
    "Tensor-core fused dot products D = C + sum a_i*b_i, bit for bit (sm90 forms validated on an H200, the "
    "others unmeasured: see `flashbits models`)",
    setup_dot);
}  // namespace fb::cli
