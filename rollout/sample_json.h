// Samples as JSON: the partial-rollout buffer in checkpoints, `ooze rollout --output` JSONL,
// and anything a user inspects. Every field of rollout/sample.h, under its own name, status as
// its word ("completed", ...). from_json checks what it reads and names the field it refuses.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "rollout/sample.h"

namespace ooze::rollout {

nlohmann::json sample_to_json(const Sample& sample);
// Throws FormatError naming the field.
Sample sample_from_json(const nlohmann::json& json);

nlohmann::json groups_to_json(const std::vector<std::vector<Sample>>& groups);
std::vector<std::vector<Sample>> groups_from_json(const nlohmann::json& json);

}  // namespace ooze::rollout
