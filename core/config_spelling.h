// How config names and values are spelled in flags, help and messages; shared by the schema,
// the help text and the resolution (core/config_*.cpp). Not part of the public config API.
#pragma once

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ooze::config_spelling {

// "global-batch-size" -> "global_batch_size" (the JSON key).
inline std::string underscores(std::string name) {
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

// "global_batch_size" -> "global-batch-size" (the flag without its "--").
inline std::string dashes(std::string name) {
  std::replace(name.begin(), name.end(), '_', '-');
  return name;
}

inline std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? separator : "") + items[i];
  return out;
}

// A JSON value as it appears in messages: compact, cut short when huge.
inline std::string show_json(const nlohmann::json& value) {
  std::string text = value.dump();
  return text.size() > 80 ? text.substr(0, 77) + "..." : text;
}

}  // namespace ooze::config_spelling
