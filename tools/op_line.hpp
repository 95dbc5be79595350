// tools/op_line.hpp: one scalar operation as words, shared by `op` and `op --batch`.
//
// Contract: the words are those of a batch line, `OP FORMAT ROUND A [B [C]] [satfinite]`,
// or for cvt `cvt FORMAT ROUND SRC_FORMAT:OPERAND [satfinite]`. parse_op_words throws
// InputError naming the bad word.
#pragma once

#include <string>
#include <vector>

#include "emu/ops.hpp"
#include "tools/cli_common.hpp"

namespace fb::cli {

struct OpRequest {
  OpKind op = OpKind::add;
  Format format{};
  Format source_format{};  // cvt only
  RoundingSpec spec{};
  std::uint32_t operands[3] = {0, 0, 0};
};

// Words after OP FORMAT ROUND are the operands; a trailing "satfinite" or "ieee" sets
// the overflow policy. `spec` supplies sr bits and seed.
OpRequest parse_op_words(const std::vector<std::string>& words, const RoundingSpec& base);
// Parse operands for an already known op/format (used by the flag form).
void parse_operands(OpRequest& req, const std::vector<std::string>& operand_words);

}  // namespace fb::cli
