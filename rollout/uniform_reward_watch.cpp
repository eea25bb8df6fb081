#include "rollout/uniform_reward_watch.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "rollout/rewards/reward_text.h"

namespace ooze::rollout {
namespace {

std::string number_text(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

// The rewards seen, "0" or "0, 1 and 0.5" (the streak's rollouts may each agree on another).
std::string reward_list(const std::set<double>& rewards) {
  std::string list;
  size_t i = 0;
  for (double reward : rewards) {
    if (i > 0) list += i + 1 == rewards.size() ? " and " : ", ";
    list += number_text(reward);
    ++i;
  }
  return list;
}

// The rollout's scalar rewards when they all agree; nullopt when they differ, a sample has
// none, or there are no samples.
std::optional<double> common_reward(const std::vector<std::vector<Sample>>& groups,
                                    const std::string& reward_key) {
  std::optional<double> common;
  for (const std::vector<Sample>& group : groups) {
    for (const Sample& sample : group) {
      double reward = 0;
      try {
        reward = sample.reward_value(reward_key);
      } catch (const std::exception&) {
        return std::nullopt;
      }
      if (common && *common != reward) return std::nullopt;
      common = reward;
    }
  }
  return common;
}

std::string tokens(int64_t count) {
  return std::to_string(count) + (count == 1 ? " token" : " tokens");
}

// A flag's list as JSON, its first few items only when it is long.
template <typename T>
std::string short_list(const std::vector<T>& items) {
  constexpr size_t kShown = 8;
  if (items.size() <= kShown) return nlohmann::json(items).dump();
  const std::string head =
      nlohmann::json(std::vector<T>(items.begin(), items.begin() + kShown)).dump();
  return head.substr(0, head.size() - 1) + ", ... (" + std::to_string(items.size()) + " in all)]";
}

}  // namespace

UniformRewardWatch::UniformRewardWatch(RolloutSampling sampling, std::string reward_source,
                                       std::string reward_key)
    : sampling_(std::move(sampling)),
      reward_source_(std::move(reward_source)),
      reward_key_(std::move(reward_key)) {}

std::optional<std::string> UniformRewardWatch::observe(
    int64_t rollout_id, const std::vector<std::vector<Sample>>& groups,
    const GenerationStats& stats) {
  const std::optional<double> reward = common_reward(groups, reward_key_);
  if (!reward) {
    streak_ = {};
    return std::nullopt;
  }
  Streak& s = streak_;
  if (s.rollouts == 0) s.first_rollout = rollout_id;
  ++s.rollouts;
  s.rewards.insert(*reward);
  for (const std::vector<Sample>& group : groups) {
    for (const Sample& sample : group) {
      s.shortest =
          s.samples == 0 ? sample.response_length : std::min(s.shortest, sample.response_length);
      s.longest = std::max(s.longest, sample.response_length);
      ++s.samples;
      s.empty_labels += trim_ascii(sample.label).empty() ? 1 : 0;
      s.truncated += sample.status == Sample::Status::kTruncated ? 1 : 0;
    }
  }
  s.finished_outputs += stats.finished_outputs;
  s.stopped_on_stop_string += stats.stopped_on_stop_string;
  s.stopped_on_stop_token += stats.stopped_on_stop_token;
  if (s.rollouts < kStreak || s.warned) return std::nullopt;
  s.warned = true;
  return warning(rollout_id);
}

std::vector<std::string> UniformRewardWatch::causes() const {
  const Streak& s = streak_;
  const std::string limit =
      "--rollout-max-response-len " + std::to_string(sampling_.max_response_len);
  std::vector<std::string> found;
  if (s.empty_labels == s.samples) {
    found.push_back(
        "every sample's label is empty, so a reward that compares the response "
        "with a label has nothing to compare with (is --label-key given?)");
  }
  if (s.truncated == s.samples) {
    found.push_back("every response was cut at " + limit +
                    " (finish reason length), so no answer finished: raise the limit");
  } else if (2 * s.truncated > s.samples) {
    found.push_back(std::to_string(s.truncated) + " of " + std::to_string(s.samples) +
                    " responses were cut at " + limit +
                    " (finish reason length): the limit may be too short for an answer");
  }
  const std::string lengths =
      s.shortest == s.longest ? "exactly " + tokens(s.shortest) : "at most " + tokens(s.longest);
  if (s.finished_outputs > 0 && s.stopped_on_stop_string == s.finished_outputs) {
    found.push_back("every response ended on a --rollout-stop string " +
                    short_list(sampling_.stop) + ", after " + lengths +
                    ": the stop may cut every answer short");
  } else if (s.finished_outputs > 0 && s.stopped_on_stop_token == s.finished_outputs) {
    found.push_back("every response ended on a --rollout-stop-token-ids token " +
                    short_list(sampling_.stop_token_ids) + ", after " + lengths +
                    ": the stop may cut every answer short");
  } else if (s.truncated == 0 && s.shortest == s.longest && s.samples > 1) {
    found.push_back("every response is exactly " + tokens(s.shortest) + " long, short of " + limit +
                    ": something ends every answer at the same point");
  }
  return found;
}

std::string UniformRewardWatch::warning(int64_t rollout_id) const {
  const Streak& s = streak_;
  std::string text = "rollouts " + std::to_string(s.first_rollout) + " to " +
                     std::to_string(rollout_id) + ": every sample of each got the same reward (" +
                     reward_list(s.rewards) + ", " + reward_source_ +
                     "), so every advantage is 0 and the policy learns nothing from them. ";
  const std::vector<std::string> found = causes();
  if (found.empty()) {
    return text + "The samples show no label missing, no stop cutting every answer and " +
           std::to_string(s.truncated) + " of " + std::to_string(s.samples) +
           " responses cut at --rollout-max-response-len " +
           std::to_string(sampling_.max_response_len) +
           ": the reward may not read these answers (try a few with ooze reward), or the task "
           "is out of the model's reach (or too easy) as it stands.";
  }
  text += found.size() == 1 ? "The likely cause: " : "Likely causes: ";
  for (size_t i = 0; i < found.size(); ++i) text += (i > 0 ? "; " : "") + found[i];
  return text + ".";
}

}  // namespace ooze::rollout
