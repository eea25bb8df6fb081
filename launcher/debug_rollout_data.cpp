#include "launcher/debug_rollout_data.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"
#include "rollout/sample_json.h"

namespace ooze::launcher {

std::string debug_rollout_path(std::string pattern, int64_t rollout_id) {
  const std::string key = "{rollout_id}";
  for (size_t at = pattern.find(key); at != std::string::npos; at = pattern.find(key)) {
    pattern.replace(at, key.size(), std::to_string(rollout_id));
  }
  return pattern;
}

void save_debug_rollout_data(const std::string& path,
                             const std::vector<std::vector<rollout::Sample>>& groups) {
  std::string lines;
  for (const auto& group : groups) {
    for (const rollout::Sample& sample : group) {
      lines += rollout::sample_to_json(sample).dump() + "\n";
    }
  }
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  write_file_atomically(path, lines);
}

std::vector<std::vector<rollout::Sample>> load_debug_rollout_data(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw IoError(
        "cannot read the debug rollout data " + path +
        " (--load-debug-rollout-data): does the run that saved it cover this rollout id?");
  }
  std::vector<std::vector<rollout::Sample>> groups;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    rollout::Sample sample;
    try {
      sample = rollout::sample_from_json(nlohmann::json::parse(line));
    } catch (const std::exception& e) {
      throw FormatError(path + ":" + std::to_string(number) + ": not a sample: " + e.what());
    }
    if (groups.empty() || groups.back().front().group_index != sample.group_index) {
      groups.emplace_back();
    }
    groups.back().push_back(std::move(sample));
  }
  return groups;
}

}  // namespace ooze::launcher
