// Where rewards come from, chosen as in Slime: a user's function (--custom-rm-path: a Python
// `package.module.function` or `file.py:function`, `(args, sample)` or with --group-rm
// `(args, samples)`, sync or async; or a C++ `lib.so:function`, a reward or a batched reward
// plugin), else --rm-type: a built-in rule
// (rollout/rewards/builtin_rewards.h, with the boxed_ prefix) or remote_rm (--rm-url, Slime's
// request body). Everything is checked when the model is built (unknown type, missing URL,
// a library or symbol that does not load), so a run fails at start-up, not at its first rollout.
//
//   RewardModel rewards(RewardOptions::fields().read(config));
//   rewards.score_group(group);        // fills sample.reward for every sample of the group
//
// Samples are scored concurrently on --reward-threads threads (remote models and plugins wait
// on I/O), except by an async Python function, whose calls are all awaited at once on the
// hooks' event loop; a batched function gets the group in one call (--group-rm), or, for a C++
// plugin without --group-rm, the whole rollout at its end (score_rollout). A failure names the
// sample and where its reward came from (with a Python function, its traceback).
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/thread_pool.h"
#include "python/python_hook.h"
#include "rollout/plugin_function.h"
#include "rollout/remote_reward.h"
#include "rollout/sample.h"

namespace ooze::rollout {

// A reward that could not be computed; says which sample and which reward source.
class RewardError : public Error {
 public:
  using Error::Error;
};

struct RewardOptions {
  std::string rm_type;         // a built-in type, "remote_rm", or "" when custom_rm_path is set
  std::string custom_rm_path;  // a Python function path, or "lib.so:function"
  bool group_rm = false;       // a batched function scores each group as it finishes
  std::string reward_key;      // the scalar field of object rewards (dapo's "score", ...)
  RemoteRewardOptions remote;  // --rm-url and its timeouts and retries
  int64_t reward_threads = 16;
  // --env-url: the environment rewards every sample, so no reward function is needed (a sample
  // left without a reward is then an error when it is scored). Not a flag: set by the caller.
  bool environment_rewards = false;

  // --rm-type, --custom-rm-path, --group-rm, --reward-key, --rm-url, --rm-timeout,
  // --rm-max-retries, --reward-threads ("reward" section); read() checks that remote_rm has a URL.
  static const OptionFields<RewardOptions>& fields();
};

class RewardModel {
 public:
  // Throws ConfigError (nothing chosen without environment_rewards, unknown type, remote_rm
  // without --rm-url) or PluginError.
  explicit RewardModel(RewardOptions options);

  // One sample's reward (a number or an object). Not for batched functions.
  nlohmann::json score(const Sample& sample) const;
  // Fills the reward of every sample of the group that has none (a group function with
  // --group-rm scores the whole group when one has none). With a batched function and no
  // --group-rm it does nothing: score_rollout() scores the rollout once it is complete.
  void score_group(std::vector<Sample>& group);
  // With a batched function and no --group-rm: one call over every sample of the rollout.
  // Otherwise scores the groups not scored yet.
  void score_rollout(std::vector<std::vector<Sample>>& groups);
  // Scores `samples` together (a batched function gets them in one call) and fills in each
  // one's reward; returns each sample's failure, null where it was scored. The others are
  // scored whatever fails, so a caller may report every failure, not only the first.
  std::vector<std::exception_ptr> try_score(const std::vector<Sample*>& samples) const;

  // Whether rewards are only known once the whole rollout is (dynamic sampling needs them per
  // group, so it refuses this combination).
  bool scores_whole_rollout() const { return batched_ && !options_.group_rm; }
  // "--rm-type math", "--custom-rm-path lib.so:fn", ...: how errors and logs name the source.
  const std::string& source() const { return source_; }
  const RewardOptions& options() const { return options_; }

 private:
  nlohmann::json score_one(const Sample& sample) const;
  void score_in_python(const std::vector<Sample*>& samples,
                       std::vector<std::exception_ptr>& failures) const;
  // The hook's outcomes ([ok, reward or message] per sample) into rewards and failures.
  static void take_python_outcomes(const nlohmann::json& outcomes,
                                   const std::vector<Sample*>& samples,
                                   std::vector<std::exception_ptr>& failures, size_t first);

  RewardOptions options_;
  std::string source_;
  bool batched_ = false;
  std::optional<PluginFunction> plugin_;
  std::optional<python::PythonHook> python_;
  // A plain Python function's latest time per sample (-1 until measured); below
  // kQuickPythonReward its calls are not spread over threads.
  static constexpr double kQuickPythonReward = 100e-6;
  mutable std::atomic<double> python_seconds_per_sample_{-1};
  std::unique_ptr<RemoteReward> remote_;
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace ooze::rollout
