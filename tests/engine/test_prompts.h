// Prompts for the engine tests: `length` printable byte tokens, different for each `salt`.
#pragma once

#include <cstdint>
#include <vector>

namespace ooze::testing {

inline std::vector<int64_t> prompt(int64_t length, int64_t salt) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < length; ++i) ids.push_back(32 + (i * 7 + salt * 13) % 90);
  return ids;
}

}  // namespace ooze::testing
