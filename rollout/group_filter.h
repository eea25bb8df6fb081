// Dynamic sampling's verdict on a finished group (DAPO): --dynamic-sampling-filter-path is
// `nonzero_std` (the built-in filter: drop groups whose rewards all agree, since their
// advantages are zero and they teach nothing) or a user's `lib.so:function` exported with
// OOZE_EXPORT_GROUP_FILTER.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "rollout/plugin_function.h"
#include "rollout/reward_plugin.h"
#include "rollout/sample.h"

namespace ooze::rollout {

class GroupFilter {
 public:
  // Throws PluginError when a plugin does not load.
  GroupFilter(const std::string& path, std::string reward_key);

  plugin::FilterDecision decide(const std::vector<Sample>& group) const;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string reward_key_;
  std::optional<PluginFunction> plugin_;
};

// The built-in filter: keeps a group when its scalar rewards are not all equal.
plugin::FilterDecision keep_nonzero_reward_std(const std::vector<Sample>& group,
                                               const std::string& reward_key);

}  // namespace ooze::rollout
