// formats/json_text.hpp: the one way flashbits turns a JSON value into text (every --json
// output, and every JSON report or header written to a file).
//
// Contract: json_text(j, indent) is j.dump(indent) except that a string (a value or an
// object's key) that is not valid UTF-8 -- a path or metadata value holding byte 0xff,
// say -- is written with those bytes escaped as the text \xNN (formats/text_escape.hpp)
// instead of making nlohmann::json throw "invalid UTF-8 byte". Valid strings are written
// unchanged. Works for nlohmann::json and nlohmann::ordered_json (key order kept).
// Header-only so that it needs nothing but nlohmann_json where it is used.
#pragma once

#include <exception>
#include <nlohmann/json.hpp>
#include <string>

#include "formats/text_escape.hpp"

namespace fb {

namespace json_text_detail {
template <class Json>
Json escaped(const Json& j) {
  if (j.is_string()) return Json(escape_unprintable(j.template get_ref<const std::string&>(), false));
  if (j.is_array()) {
    Json out = Json::array();
    for (const auto& e : j) out.push_back(escaped(e));
    return out;
  }
  if (j.is_object()) {
    Json out = Json::object();
    for (auto it = j.begin(); it != j.end(); ++it) out[escape_unprintable(it.key(), false)] = escaped(it.value());
    return out;
  }
  return j;
}
}  // namespace json_text_detail

template <class Json>
std::string json_text(const Json& j, int indent = -1) {
  try {
    return j.dump(indent);
  } catch (const typename Json::type_error&) {
    // Only a string that is not valid UTF-8 makes dump throw (type_error 316): escape and retry.
    return json_text_detail::escaped(j).dump(indent);
  }
}

// A JSON library error as flashbits' messages show it: nlohmann's text without its
// "[json.exception.parse_error.101] " tag ("parse error at line 1, column 271: ...", "key
// 'sufficient' not found"), which names the library, not the file's defect.
inline std::string json_error_text(const std::exception& e) {
  const std::string what = e.what();
  const auto tag_end = what.rfind("[json.exception.", 0) == 0 ? what.find("] ") : std::string::npos;
  return tag_end == std::string::npos ? what : what.substr(tag_end + 2);
}

}  // namespace fb
