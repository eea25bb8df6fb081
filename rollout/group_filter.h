// Dynamic sampling's verdict on a finished group (DAPO): --dynamic-sampling-filter-path is
// `nonzero_std` (the built-in filter: drop groups whose rewards all agree, since their
// advantages are zero and they teach nothing), a user's Python function
// `(args, samples) -> DynamicFilterOutput | bool` (`pkg.mod.fn` or `file.py:fn`, Slime's
// signature), or a C++ `lib.so:function` exported with OOZE_EXPORT_GROUP_FILTER.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "python/python_hook.h"
#include "rollout/plugin_function.h"
#include "rollout/reward_plugin.h"
#include "rollout/sample.h"

namespace ooze::rollout {

class GroupFilter {
 public:
  // Throws PluginError or python::HookError when the function does not load.
  GroupFilter(const std::string& path, std::string reward_key);

  plugin::FilterDecision decide(const std::vector<Sample>& group) const;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string reward_key_;
  std::optional<PluginFunction> plugin_;
  std::optional<python::PythonHook> python_;
};

// The built-in filter: keeps a group when its scalar rewards are not all equal.
plugin::FilterDecision keep_nonzero_reward_std(const std::vector<Sample>& group,
                                               const std::string& reward_key);

}  // namespace ooze::rollout
