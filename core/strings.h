// Small string helpers that C++17's std::string lacks.
#pragma once

#include <string>

namespace ooze {

inline bool starts_with(const std::string& text, const std::string& prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

inline bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// `text` cut to at most `max_length` characters, "..." marking a cut: for values quoted in
// error messages.
inline std::string abbreviated(std::string text, size_t max_length = 80) {
  if (text.size() > max_length) text = text.substr(0, max_length - 3) + "...";
  return text;
}

}  // namespace ooze
