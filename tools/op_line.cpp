// tools/op_line.cpp: parsing of scalar operation words.
#include "tools/op_line.hpp"

#include <cmath>

#include "formats/decimal_text.hpp"

namespace fb::cli {
namespace {

// A FORMAT: prefix is cvt's way to name its source format; an operand of any other op is in
// the op's own format, so a prefixed word there (`add bf16 rne bf16:3f80 ...`) is refused as
// that, with the operand written as the op reads it where the prefixed word names a value the
// op's format holds (0x3f80 or +1), not as a word that merely fails to be hex.
void refuse_format_prefix(const OpRequest& req, const std::string& word, const std::string& what) {
  const std::string op(to_string(req.op));
  std::string advice = "write an operand of " + std::string(req.format.name) +
                       ": a hex bit pattern (0x...) or a signed value (+1, -2.5)";
  Format source{};
  const auto colon = word.find(':');
  if (parse_format(word.substr(0, colon), source)) {
    try {
      const std::uint32_t source_bits = parse_operand_or_throw(source, word.substr(colon + 1), what);
      const double value = to_double(source, source_bits);
      std::uint32_t bits = 0;
      if (!std::isnan(value) && from_double_exact(req.format, value, bits))
        advice = "write 0x" + hex_bits(req.format, bits) + " or " + (std::signbit(value) ? "" : "+") +
                 shortest_decimal(value);
    } catch (const InputError&) {
      // Not an operand of its prefix's format either: the general advice stands.
    }
  }
  throw InputError(what + ": '" + word + "': a FORMAT: prefix names cvt's source format only; for " + op + " " +
                   advice);
}

}  // namespace

void parse_operands(OpRequest& req, const std::vector<std::string>& words) {
  const int needed = operand_count(req.op);
  // One word too many that is no operand is a misspelt overflow policy ("sat"): named as
  // that, not as a surplus operand.
  if (static_cast<int>(words.size()) == needed + 1) {
    bool is_operand = req.op != OpKind::cvt || words.back().find(':') != std::string::npos;
    if (req.op != OpKind::cvt) try {
        (void)parse_operand_or_throw(req.format, words.back(), "operand");
      } catch (const InputError&) {
        is_operand = false;
      }
    if (!is_operand && (words.back() == "satfinite" || words.back() == "ieee"))
      throw InputError("'" + words.back() + "': the overflow policy is given twice (one word, last)");
    if (!is_operand)
      throw InputError("'" + words.back() + "': unknown overflow policy (expected satfinite or ieee, last)");
  }
  if (static_cast<int>(words.size()) != needed) {
    throw InputError(std::string(to_string(req.op)) + " takes " + std::to_string(needed) + " operand" +
                     (needed > 1 ? "s" : "") + ", got " + std::to_string(words.size()));
  }
  if (req.op == OpKind::cvt) {
    const std::string& w = words[0];
    const auto colon = w.find(':');
    if (colon == std::string::npos) {
      throw InputError("cvt operand '" + w +
                       "': expected SRC_FORMAT:OPERAND, the source format, a colon and a hex bit pattern or signed "
                       "value of it, e.g. fp32:40490fdb or fp32:+1.5");
    }
    req.source_format = parse_format_or_throw(w.substr(0, colon), "cvt source format");
    req.operands[0] = parse_operand_or_throw(req.source_format, w.substr(colon + 1), "cvt operand");
    return;
  }
  static const char* names[] = {"operand A", "operand B", "operand C"};
  for (int i = 0; i < needed; ++i) {
    if (words[i].find(':') != std::string::npos) refuse_format_prefix(req, words[i], names[i]);
    req.operands[i] = parse_operand_or_throw(req.format, words[i], names[i]);
  }
}

OpRequest parse_op_words(const std::vector<std::string>& words_in, const RoundingSpec& base) {
  std::vector<std::string> words = words_in;
  OpRequest req;
  req.spec = base;
  if (!words.empty() && (words.back() == "satfinite" || words.back() == "ieee")) {
    req.spec.overflow = words.back() == "satfinite" ? OverflowPolicy::satfinite : OverflowPolicy::ieee;
    words.pop_back();
  }
  if (words.size() < 4) {
    throw InputError("expected 'OP FORMAT ROUND A [B [C]] [satfinite]', got " + std::to_string(words_in.size()) +
                     " word(s)");
  }
  if (!parse_op(words[0], req.op)) {
    throw InputError("unknown operation '" + words[0] + "' (expected add sub mul div fma sqrt cvt)");
  }
  req.format = parse_format_or_throw(words[1], "format");
  req.spec.mode = parse_mode_or_throw(words[2], "rounding mode");
  parse_operands(req, std::vector<std::string>(words.begin() + 3, words.end()));
  return req;
}

}  // namespace fb::cli
