// What a rollout and an evaluation report, under Slime's key families: rollout/... for the
// samples, eval/<dataset>... for evaluations, perf/... for time and throughput (the manager
// adds those it measures). Values are plain numbers, ready for core/metrics.h sinks.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "rollout/sample.h"

namespace ooze::rollout {

using MetricMap = std::map<std::string, double>;

// Over the rollout's groups:
//   rollout/raw_reward, rollout/raw_reward_std       mean and std of the scalar rewards
//   rollout/response_len/mean, /max, /min            response tokens
//   rollout/truncated_ratio, rollout/aborted_ratio   fractions of samples
//   rollout/zero_std_group_ratio                     groups whose rewards all agree
//   rollout/samples, rollout/groups
//   rollout/<name>                                   mean of every number in sample.metrics
//                                                    (over the samples that have it)
//   rollout/agent/turns/mean, /max                   model calls per agent session
//   rollout/agent/tool_calls, rollout/agent/segments per agent session (means)
//   rollout/agent/aborted/<why>                      agents that failed: exit_code, signal,
//                                                    timeout, start, stopped, no_calls,
//                                                    env (an --env-url server failed)
MetricMap rollout_metrics(const std::vector<std::vector<Sample>>& groups,
                          const std::string& reward_key);

// The unbiased pass@k estimator (Chen et al. 2021) for one prompt with n samples of which c are
// correct: 1 - C(n - c, k) / C(n, k). Requires 1 <= k <= n.
double pass_at_k(int64_t n, int64_t c, int64_t k);

// For one evaluation dataset: eval/<name> (mean reward), eval/<name>/response_len/mean,
// eval/<name>/truncated_ratio, and with `log_passrate` eval/<name>/pass@k for k = 1, 2, 4, ...
// up to the samples per prompt, a sample counting as correct when its reward is > 0.
MetricMap eval_metrics(const std::string& name, const std::vector<std::vector<Sample>>& groups,
                       const std::string& reward_key, bool log_passrate);

}  // namespace ooze::rollout
