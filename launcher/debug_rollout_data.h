// Slime's --save-debug-rollout-data / --load-debug-rollout-data: a rollout's kept samples as
// JSON lines (rollout/sample_json.h), one file per rollout id, so a run can train again on the
// very samples another one generated, without engines.
//
//   save_debug_rollout_data(debug_rollout_path("out/rollout_{rollout_id}.jsonl", 3), groups);
//   auto groups = load_debug_rollout_data(debug_rollout_path(pattern, 3));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rollout/sample.h"

namespace ooze::launcher {

// `pattern` with every "{rollout_id}" replaced by `rollout_id`.
std::string debug_rollout_path(std::string pattern, int64_t rollout_id);

// Writes every sample of `groups`, group after group, one JSON line each, atomically (a crash
// leaves the old file or the whole new one), creating the parent directory.
void save_debug_rollout_data(const std::string& path,
                             const std::vector<std::vector<rollout::Sample>>& groups);

// The groups `path` holds: consecutive samples of one group_index form a group. Throws IoError
// when the file cannot be read and FormatError naming the line that is not a sample.
std::vector<std::vector<rollout::Sample>> load_debug_rollout_data(const std::string& path);

}  // namespace ooze::launcher
