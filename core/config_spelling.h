// How config names and values are spelled in flags, help and messages; shared by the schema,
// the help text, the resolution (core/config_*.cpp) and the command table's "did you mean"
// (launcher/commands.cpp). Not part of the public config API.
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

// Levenshtein distance: how near a misspelt name is to a known one ("did you mean").
inline size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
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
