#include "rollout/rollout_hooks.h"

#include "python/hook_path.h"
#include "rollout/sample_json.h"

namespace ooze::rollout {
namespace {

void require_python(const std::string& flag, const std::string& path) {
  if (!path.empty() && python::hook_path_kind(path) != python::HookPathKind::kPython) {
    throw ConfigError(flag + " " + path +
                      " must name a Python function (package.module.function or "
                      "file.py:function)");
  }
}

std::optional<python::PythonHook> load(const std::string& path, const std::string& flag,
                                       const std::vector<std::string>& parameters) {
  if (path.empty()) return std::nullopt;
  require_python(flag, path);
  return python::PythonHook::load(path, flag, parameters);
}

nlohmann::json samples_json(const std::vector<std::vector<Sample>>& groups) {
  nlohmann::json samples = nlohmann::json::array();
  for (const std::vector<Sample>& group : groups) {
    for (const Sample& sample : group) samples.push_back(sample_to_json(sample));
  }
  return samples;
}

}  // namespace

const OptionFields<RolloutHookOptions>& RolloutHookOptions::fields() {
  using O = RolloutHookOptions;
  static const OptionFields<O> fields = [] {
    OptionFields<O> f;
    f.section("rollout");
    f.add("rollout_sample_filter_path", &O::rollout_sample_filter_path,
          "Your function (args, groups) -> None setting sample.remove_sample: removed samples "
          "count in reward normalisation but are not trained on.");
    f.add("custom_reward_post_process_path", &O::custom_reward_post_process_path,
          "Your function (args, samples) -> (raw_rewards, rewards): the rewards advantages "
          "start from, instead of the group normalisation.");
    f.add("custom_rollout_log_function_path", &O::custom_rollout_log_function_path,
          "Your function (rollout_id, args, samples, rollout_extra_metrics, rollout_time) -> "
          "bool, after each rollout; True skips ooze's rollout/* metrics.");
    f.add("custom_eval_rollout_log_function_path", &O::custom_eval_rollout_log_function_path,
          "Your function (rollout_id, args, data, extra_metrics) -> bool, after each "
          "evaluation (data: {name: {rewards, truncated, samples}}); True skips ooze's eval/* "
          "metrics.");
    f.add_rule([](const O& options) {
      require_python("--rollout-sample-filter-path", options.rollout_sample_filter_path);
      require_python("--custom-reward-post-process-path", options.custom_reward_post_process_path);
      require_python("--custom-rollout-log-function-path",
                     options.custom_rollout_log_function_path);
      require_python("--custom-eval-rollout-log-function-path",
                     options.custom_eval_rollout_log_function_path);
    });
    return f;
  }();
  return fields;
}

RolloutHooks::RolloutHooks(const RolloutHookOptions& options)
    : sample_filter_(load(options.rollout_sample_filter_path, "--rollout-sample-filter-path",
                          {"args", "groups"})),
      reward_post_process_(load(options.custom_reward_post_process_path,
                                "--custom-reward-post-process-path", {"args", "samples"})),
      rollout_log_(
          load(options.custom_rollout_log_function_path, "--custom-rollout-log-function-path",
               {"rollout_id", "args", "samples", "rollout_extra_metrics", "rollout_time"})),
      eval_log_(load(options.custom_eval_rollout_log_function_path,
                     "--custom-eval-rollout-log-function-path",
                     {"rollout_id", "args", "data", "extra_metrics"})) {}

int64_t RolloutHooks::filter_samples(std::vector<std::vector<Sample>>& groups) const {
  if (!sample_filter_) return 0;
  // [[group, sample], ...] of the samples the hook removed.
  const nlohmann::json removed = sample_filter_->call("filter_samples", groups_to_json(groups));
  for (const nlohmann::json& at : removed) {
    Sample& sample = groups.at(at[0].get<size_t>()).at(at[1].get<size_t>());
    std::fill(sample.loss_mask.begin(), sample.loss_mask.end(), 0);
  }
  return static_cast<int64_t>(removed.size());
}

std::optional<std::vector<double>> RolloutHooks::post_process_rewards(
    const std::vector<std::vector<Sample>>& groups) const {
  if (!reward_post_process_) return std::nullopt;
  return reward_post_process_->call("post_process_rewards", samples_json(groups))
      .get<std::vector<double>>();
}

bool RolloutHooks::log_rollout(int64_t rollout_id, const std::vector<std::vector<Sample>>& groups,
                               const std::map<std::string, double>& metrics,
                               double rollout_seconds) const {
  if (!rollout_log_) return false;
  return rollout_log_
      ->call("log_rollout", {{"rollout_id", rollout_id},
                             {"samples", samples_json(groups)},
                             {"metrics", metrics},
                             {"rollout_time", rollout_seconds}})
      .get<bool>();
}

bool RolloutHooks::log_eval(int64_t rollout_id, const std::map<std::string, EvalData>& data,
                            const std::map<std::string, double>& metrics) const {
  if (!eval_log_) return false;
  nlohmann::json datasets = nlohmann::json::object();
  for (const auto& [name, dataset] : data) {
    nlohmann::json samples = nlohmann::json::array();
    for (const Sample& sample : dataset.samples) samples.push_back(sample_to_json(sample));
    datasets[name] = {
        {"rewards", dataset.rewards}, {"truncated", dataset.truncated}, {"samples", samples}};
  }
  return eval_log_
      ->call("log_eval_rollout",
             {{"rollout_id", rollout_id}, {"data", datasets}, {"metrics", metrics}})
      .get<bool>();
}

}  // namespace ooze::rollout
