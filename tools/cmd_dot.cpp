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
// - Every model's parameters are published ones NOT yet validated on hardware by this
//   project (`flashbits models` says so).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "emu/tensor_core.hpp"
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

struct DotOptions {
  std::string model, batch;
  std::vector<std::string> words;
  bool trace = false;
};

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
  return [o] { return run_dot(*o); };
}

}  // namespace
FLASHBITS_SUBCOMMAND(
    dot, "dot",
    "Tensor-core fused dot products D = C + sum a_i*b_i, bit for bit (models not yet validated on hardware)",
    setup_dot);
}  // namespace fb::cli
