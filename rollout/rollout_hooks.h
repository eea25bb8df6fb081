// The Python hooks that see a whole rollout on its way to the trainer, with Slime's flags and
// signatures:
//
//   --rollout-sample-filter-path         (args, groups) -> None: sets sample.remove_sample on
//                                        samples that should not be trained on; they still count
//                                        in their group's reward normalisation (their loss mask
//                                        becomes 0)
//   --custom-reward-post-process-path    (args, samples) -> (raw_rewards, rewards): the rewards
//                                        advantages start from, replacing the group
//                                        normalisation of grpo and its kin
//   --custom-rollout-log-function-path   (rollout_id, args, samples, rollout_extra_metrics,
//                                        rollout_time) -> bool: True skips ooze's own rollout/*
//                                        metrics of that rollout
//   --custom-eval-rollout-log-function-path
//                                        (rollout_id, args, data, extra_metrics) -> bool, data
//                                        {name: {"rewards", "truncated", "samples"}}: True skips
//                                        ooze's own eval/* metrics of that evaluation
//
//   RolloutHooks hooks(RolloutHookOptions::fields().read(config));   // loads and checks them
//   hooks.filter_samples(groups);
//   std::optional<std::vector<double>> rewards = hooks.post_process_rewards(groups);
//   bool skip_default_log = hooks.log_rollout(rollout_id, groups, metrics, seconds);
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/option_fields.h"
#include "python/python_hook.h"
#include "rollout/python_rollout_function.h"
#include "rollout/sample.h"

namespace ooze::rollout {

struct RolloutHookOptions {
  std::string rollout_sample_filter_path;
  std::string custom_reward_post_process_path;
  std::string custom_rollout_log_function_path;
  std::string custom_eval_rollout_log_function_path;

  // Section "rollout"; read() checks that each path names a Python function.
  static const OptionFields<RolloutHookOptions>& fields();
};

class RolloutHooks {
 public:
  // Loads the hooks that are set; throws python::HookError (or ConfigError for a path that is
  // not a Python function).
  explicit RolloutHooks(const RolloutHookOptions& options);

  // --rollout-sample-filter-path: the samples the hook removed get loss mask 0. Returns how
  // many (0 without the hook).
  int64_t filter_samples(std::vector<std::vector<Sample>>& groups) const;
  // --custom-reward-post-process-path: one reward per sample, group after group; nullopt
  // without the hook.
  std::optional<std::vector<double>> post_process_rewards(
      const std::vector<std::vector<Sample>>& groups) const;
  // --custom-rollout-log-function-path: whether the hook asks to skip ooze's own rollout/*
  // metrics (false without the hook).
  bool log_rollout(int64_t rollout_id, const std::vector<std::vector<Sample>>& groups,
                   const std::map<std::string, double>& metrics, double rollout_seconds) const;
  // --custom-eval-rollout-log-function-path: whether the hook asks to skip ooze's own eval/*
  // metrics (false without the hook).
  bool log_eval(int64_t rollout_id, const std::map<std::string, EvalData>& data,
                const std::map<std::string, double>& metrics) const;

 private:
  std::optional<python::PythonHook> sample_filter_;
  std::optional<python::PythonHook> reward_post_process_;
  std::optional<python::PythonHook> rollout_log_;
  std::optional<python::PythonHook> eval_log_;
};

}  // namespace ooze::rollout
