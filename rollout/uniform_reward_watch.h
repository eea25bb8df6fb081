// Notices rollouts that cannot teach. When every sample of a rollout gets the same reward, every
// GRPO-style advantage is 0 and the step learns nothing; a few such rollouts in a row usually
// mean a setup problem, not a hard task. After kStreak of them it warns once per streak (a
// rollout whose rewards differ ends the streak), naming the causes the streak's samples show:
//
//   every label empty                 the reward has nothing to compare with (no --label-key)
//   every (or most) responses cut at  --rollout-max-response-len too short: no answer finishes
//     the length limit
//   every response ended on a         a --rollout-stop string / --rollout-stop-token-ids token
//     stop string or stop token       cuts every answer short
//   every response the same length,   something ends every answer at the same point
//     short of the limit
//
// and, when none of these shows, says so rather than listing them.
//
//   UniformRewardWatch watch(options.sampling, rewards.source(), reward_key);
//   if (auto warning = watch.observe(rollout_id, groups, generator.stats()))
//     OOZE_LOG(WARN) << *warning;
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "rollout/sample.h"
#include "rollout/sample_generation.h"

namespace ooze::rollout {

class UniformRewardWatch {
 public:
  static constexpr int64_t kStreak = 3;

  // `reward_source` names the reward in the warning ("--rm-type math"); `reward_key` is
  // --reward-key, for object rewards.
  UniformRewardWatch(RolloutSampling sampling, std::string reward_source, std::string reward_key);

  // One rollout's kept groups and what its generator received. Returns the warning when this
  // rollout is the kStreak-th in a row whose samples all got one reward, else nullopt.
  std::optional<std::string> observe(int64_t rollout_id,
                                     const std::vector<std::vector<Sample>>& groups,
                                     const GenerationStats& stats);

 private:
  // What the samples of the current streak showed, summed over its rollouts.
  struct Streak {
    int64_t first_rollout = 0;
    int64_t rollouts = 0;
    int64_t samples = 0;
    int64_t empty_labels = 0;
    int64_t truncated = 0;
    int64_t shortest = 0;  // response tokens
    int64_t longest = 0;
    int64_t finished_outputs = 0;
    int64_t stopped_on_stop_string = 0;
    int64_t stopped_on_stop_token = 0;
    std::set<double> rewards;
    bool warned = false;
  };

  std::string warning(int64_t rollout_id) const;
  // The causes the streak's samples show; empty when none does.
  std::vector<std::string> causes() const;

  RolloutSampling sampling_;
  std::string reward_source_;
  std::string reward_key_;
  Streak streak_;
};

}  // namespace ooze::rollout
