// api/json_strict.hpp: JSON text read strictly, as every file flashbits reads is.
//
// Contract: parse_json_strict(text) returns the document, or throws
// nlohmann::json::exception for malformed text (as nlohmann::json::parse does),
// DuplicateJsonKey when one object gives a key twice (nlohmann would keep the last one
// silently, so an edited file could change a result without a word), and JsonNestedTooDeep
// when arrays and objects nest deeper than kMaxJsonDepth (no file flashbits reads nests more
// than a few levels; the parse itself is iterative, but printing such a value in an error
// message, as dump() does, recursed until the stack ran out). Both are StrictJsonError.
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace fb::api {

struct StrictJsonError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct DuplicateJsonKey : StrictJsonError {
  explicit DuplicateJsonKey(const std::string& key_name)
      : StrictJsonError("key '" + key_name + "' is given twice in one object"), key(key_name) {}
  std::string key;
};

inline constexpr int kMaxJsonDepth = 64;

struct JsonNestedTooDeep : StrictJsonError {
  JsonNestedTooDeep()
      : StrictJsonError("arrays and objects nested deeper than " + std::to_string(kMaxJsonDepth) +
                        " levels (no flashbits file nests more than a few)") {}
};

nlohmann::json parse_json_strict(const std::string& text);

}  // namespace fb::api
