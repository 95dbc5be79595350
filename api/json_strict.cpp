// api/json_strict.cpp: see the contract in json_strict.hpp.
#include "api/json_strict.hpp"

#include <set>
#include <vector>

namespace fb::api {

nlohmann::json parse_json_strict(const std::string& text) {
  std::vector<std::set<std::string>> seen_keys;  // one set per open object
  std::string duplicate;
  bool found = false;
  const nlohmann::json::parser_callback_t check_keys = [&](int depth, nlohmann::json::parse_event_t event,
                                                           nlohmann::json& parsed) {
    // Thrown at once: the rest of a deep document is not worth reading.
    if (depth > kMaxJsonDepth) throw JsonNestedTooDeep();
    if (event == nlohmann::json::parse_event_t::object_start) {
      seen_keys.emplace_back();
    } else if (event == nlohmann::json::parse_event_t::object_end) {
      if (!seen_keys.empty()) seen_keys.pop_back();
    } else if (event == nlohmann::json::parse_event_t::key && !seen_keys.empty() && !found) {
      const std::string key = parsed.get<std::string>();
      if (!seen_keys.back().insert(key).second) {
        duplicate = key;
        found = true;
      }
    }
    return true;
  };
  nlohmann::json j = nlohmann::json::parse(text, check_keys);
  if (found) throw DuplicateJsonKey(duplicate);
  return j;
}

}  // namespace fb::api
