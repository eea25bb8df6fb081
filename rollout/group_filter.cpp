#include "rollout/group_filter.h"

#include "python/hook_path.h"
#include "rollout/python_sample.h"

namespace ooze::rollout {

plugin::FilterDecision keep_nonzero_reward_std(const std::vector<Sample>& group,
                                               const std::string& reward_key) {
  for (const Sample& sample : group) {
    if (sample.reward_value(reward_key) != group.front().reward_value(reward_key)) return true;
  }
  return {false, "zero_std"};
}

GroupFilter::GroupFilter(const std::string& path, std::string reward_key)
    : path_(path), reward_key_(std::move(reward_key)) {
  if (path_ == "nonzero_std") return;
  if (python::hook_path_kind(path_) == python::HookPathKind::kPython) {
    python_ =
        python::PythonHook::load(path_, "--dynamic-sampling-filter-path", {"args", "samples"});
  } else {
    plugin_ =
        PluginFunction::load(path_, plugin::Kind::kGroupFilter, "--dynamic-sampling-filter-path");
  }
}

plugin::FilterDecision GroupFilter::decide(const std::vector<Sample>& group) const {
  if (python_) {
    const nlohmann::json verdict = python_->call_with_records(
        "filter_group", group.size(),
        [&](size_t i, python::RecordWriter& record) { write_sample(group[i], record); });
    const std::string reason = verdict.at("reason").get<std::string>();
    return {verdict.at("keep").get<bool>(), reason.empty() ? "filtered" : reason};
  }
  if (plugin_) {
    plugin::FilterDecision decision = plugin_->filter_group(group);
    if (!decision.keep && decision.reason.empty()) decision.reason = "filtered";
    return decision;
  }
  return keep_nonzero_reward_std(group, reward_key_);
}

}  // namespace ooze::rollout
