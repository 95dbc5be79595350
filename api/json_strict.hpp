// api/json_strict.hpp: JSON text read strictly, as every file flashbits reads is.
//
// Contract: parse_json_strict(text) returns the document, or throws
// nlohmann::json::exception for malformed text (as nlohmann::json::parse does) and
// DuplicateJsonKey when one object gives a key twice (nlohmann would keep the last one
// silently, so an edited file could change a result without a word).
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace fb::api {

struct DuplicateJsonKey : std::runtime_error {
  explicit DuplicateJsonKey(const std::string& key_name)
      : std::runtime_error("key '" + key_name + "' is given twice in one object"), key(key_name) {}
  std::string key;
};

nlohmann::json parse_json_strict(const std::string& text);

}  // namespace fb::api
