#include "rollout/rollout_metrics.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace ooze::rollout {
namespace {

struct Moments {
  double sum = 0, sum_sq = 0, max = 0;
  int64_t count = 0;
  void add(double x) {
    max = count == 0 ? x : std::max(max, x);
    sum += x;
    sum_sq += x * x;
    ++count;
  }
  double mean() const { return count == 0 ? 0.0 : sum / count; }
  double std() const {
    if (count == 0) return 0.0;
    return std::sqrt(std::max(0.0, sum_sq / count - mean() * mean()));
  }
};

}  // namespace

MetricMap rollout_metrics(const std::vector<std::vector<Sample>>& groups,
                          const std::string& reward_key) {
  MetricMap metrics;
  Moments reward, length;
  int64_t min_length = 0, max_length = 0, truncated = 0, aborted = 0, zero_std_groups = 0;
  std::map<std::string, Moments> sample_metrics;
  for (const std::vector<Sample>& group : groups) {
    Moments group_reward;
    for (const Sample& sample : group) {
      if (!sample.reward.is_null()) {
        const double value = sample.reward_value(reward_key);
        reward.add(value);
        group_reward.add(value);
      }
      if (length.count == 0) min_length = max_length = sample.response_length;
      min_length = std::min(min_length, sample.response_length);
      max_length = std::max(max_length, sample.response_length);
      length.add(static_cast<double>(sample.response_length));
      truncated += sample.status == Sample::Status::kTruncated;
      aborted += sample.status == Sample::Status::kAborted;
      for (const auto& [name, value] : sample.metrics.items()) {
        if (value.is_number()) sample_metrics[name].add(value.get<double>());
      }
    }
    if (group_reward.count > 0 && group_reward.std() == 0.0) ++zero_std_groups;
  }
  const double samples = static_cast<double>(length.count);
  metrics["rollout/samples"] = samples;
  metrics["rollout/groups"] = static_cast<double>(groups.size());
  if (length.count == 0) return metrics;
  metrics["rollout/raw_reward"] = reward.mean();
  metrics["rollout/raw_reward_std"] = reward.std();
  metrics["rollout/response_len/mean"] = length.mean();
  metrics["rollout/response_len/max"] = static_cast<double>(max_length);
  metrics["rollout/response_len/min"] = static_cast<double>(min_length);
  metrics["rollout/truncated_ratio"] = truncated / samples;
  metrics["rollout/aborted_ratio"] = aborted / samples;
  metrics["rollout/zero_std_group_ratio"] =
      static_cast<double>(zero_std_groups) / static_cast<double>(groups.size());
  const std::string aborted_agent = "agent/aborted_";
  for (const auto& [name, moments] : sample_metrics) {
    if (name.rfind(aborted_agent, 0) == 0) {
      // Counted, not averaged: how many agents failed this way.
      metrics["rollout/agent/aborted/" + name.substr(aborted_agent.size())] = moments.sum;
    } else if (name == "agent/turns") {
      metrics["rollout/agent/turns/mean"] = moments.mean();
      metrics["rollout/agent/turns/max"] = moments.max;
    } else {
      metrics["rollout/" + name] = moments.mean();
    }
  }
  return metrics;
}

double pass_at_k(int64_t n, int64_t c, int64_t k) {
  if (k < 1 || k > n || c < 0 || c > n) {
    throw std::invalid_argument(
        "pass_at_k: need 1 <= k <= n and 0 <= c <= n (n = " + std::to_string(n) +
        ", c = " + std::to_string(c) + ", k = " + std::to_string(k) + ")");
  }
  if (n - c < k) return 1.0;
  // C(n-c, k) / C(n, k) = prod_{i = n-c+1}^{n} (1 - k / i): stable for large n.
  double none_correct = 1.0;
  for (int64_t i = n - c + 1; i <= n; ++i) none_correct *= 1.0 - static_cast<double>(k) / i;
  return 1.0 - none_correct;
}

MetricMap eval_metrics(const std::string& name, const std::vector<std::vector<Sample>>& groups,
                       const std::string& reward_key, bool log_passrate) {
  MetricMap metrics;
  Moments reward, length;
  int64_t truncated = 0;
  int64_t samples_per_prompt = 0;
  for (const std::vector<Sample>& group : groups) {
    samples_per_prompt = samples_per_prompt == 0
                             ? static_cast<int64_t>(group.size())
                             : std::min<int64_t>(samples_per_prompt, group.size());
    for (const Sample& sample : group) {
      reward.add(sample.reward_value(reward_key));
      length.add(static_cast<double>(sample.response_length));
      truncated += sample.status == Sample::Status::kTruncated;
    }
  }
  const std::string prefix = "eval/" + name;
  metrics[prefix] = reward.mean();
  metrics[prefix + "/response_len/mean"] = length.mean();
  metrics[prefix + "/truncated_ratio"] =
      length.count == 0 ? 0.0 : static_cast<double>(truncated) / length.count;
  if (log_passrate && samples_per_prompt > 0) {
    for (int64_t k = 1; k <= samples_per_prompt; k *= 2) {
      Moments pass;
      for (const std::vector<Sample>& group : groups) {
        int64_t correct = 0;
        for (const Sample& sample : group) correct += sample.reward_value(reward_key) > 0;
        pass.add(pass_at_k(static_cast<int64_t>(group.size()), correct, k));
      }
      metrics[prefix + "/pass@" + std::to_string(k)] = pass.mean();
    }
  }
  return metrics;
}

}  // namespace ooze::rollout
