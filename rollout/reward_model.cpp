#include "rollout/reward_model.h"

#include "rollout/rewards/builtin_rewards.h"

namespace ooze::rollout {

const OptionFields<RewardOptions>& RewardOptions::fields() {
  using O = RewardOptions;
  static const OptionFields<O> fields = [] {
    OptionFields<O> f;
    f.section("reward");
    f.add("rm_type", &O::rm_type,
          "Built-in reward (math, deepscaler, dapo, f1, gpqa, random, boxed_<type>) or "
          "remote_rm.");
    f.add("custom_rm_path", &O::custom_rm_path,
          "lib.so:function, a reward or batched reward plugin (wins over --rm-type).");
    f.add("group_rm", &O::group_rm, "A batched reward function scores each group as it ends.");
    f.add("reward_key", &O::reward_key, "The scalar field of object rewards (dapo: score).");
    f.include("remote", &O::remote, RemoteRewardOptions::fields());
    f.add("reward_threads", &O::reward_threads, "Samples scored at once.").min(1);
    f.add_rule([](const O& options) {
      if (options.rm_type == "remote_rm" && options.remote.url.empty()) {
        throw ConfigError("rm_type = remote_rm needs --rm-url");
      }
    });
    return f;
  }();
  return fields;
}

RewardModel::RewardModel(RewardOptions options) : options_(std::move(options)) {
  if (!options_.custom_rm_path.empty()) {
    // Either kind of reward function; the descriptor says which.
    PluginFunction function = PluginFunction::load_any(
        options_.custom_rm_path, {plugin::Kind::kReward, plugin::Kind::kBatchedReward},
        "--custom-rm-path");
    batched_ = function.kind() == plugin::Kind::kBatchedReward;
    plugin_ = std::move(function);
    source_ = "--custom-rm-path " + options_.custom_rm_path;
  } else if (options_.rm_type == "remote_rm") {
    if (options_.remote.url.empty()) throw ConfigError("--rm-type remote_rm needs --rm-url");
    remote_ = std::make_unique<RemoteReward>(options_.remote);
    source_ = "--rm-type remote_rm (" + options_.remote.url + ")";
  } else if (options_.rm_type.empty()) {
    throw ConfigError(
        "no reward: give --rm-type (a built-in rule or remote_rm) or --custom-rm-path");
  } else {
    if (!is_builtin_reward_type(options_.rm_type)) {
      std::string known;
      for (const std::string& type : builtin_reward_types()) known += " " + type;
      throw ConfigError("--rm-type " + options_.rm_type + " is not a reward type; known:" + known +
                        " remote_rm, and boxed_<type>");
    }
    source_ = "--rm-type " + options_.rm_type;
  }
  pool_ = std::make_unique<ThreadPool>(static_cast<size_t>(options_.reward_threads));
}

nlohmann::json RewardModel::score_one(const Sample& sample) const {
  if (plugin_) return plugin_->reward(sample);  // PluginError names the sample and the plugin
  try {
    if (remote_) return remote_->score(sample);
    return score_builtin_reward(effective_reward_type(options_.rm_type, sample), sample);
  } catch (const std::exception& error) {
    throw RewardError("reward (" + source_ + ") failed on sample " + std::to_string(sample.index) +
                      " (group " + std::to_string(sample.group_index) + "): " + error.what());
  }
}

nlohmann::json RewardModel::score(const Sample& sample) const {
  if (batched_) {
    std::vector<Sample> one = {sample};
    std::vector<nlohmann::json> rewards = plugin_->batched_reward(one);
    return rewards.at(0);
  }
  return score_one(sample);
}

void RewardModel::score_batched(std::vector<Sample*>& samples) {
  std::vector<Sample> copies;
  copies.reserve(samples.size());
  for (const Sample* sample : samples) copies.push_back(*sample);
  std::vector<nlohmann::json> rewards = plugin_->batched_reward(copies);
  for (size_t i = 0; i < samples.size(); ++i) samples[i]->reward = std::move(rewards[i]);
}

void RewardModel::score_group(std::vector<Sample>& group) {
  if (scores_whole_rollout()) return;
  if (batched_) {
    std::vector<Sample*> samples;
    for (Sample& sample : group) samples.push_back(&sample);
    score_batched(samples);
    return;
  }
  if (group.size() == 1) {
    group[0].reward = score_one(group[0]);
    return;
  }
  pool_->run_all(group.size(), [&](size_t i) { group[i].reward = score_one(group[i]); });
}

void RewardModel::score_rollout(std::vector<std::vector<Sample>>& groups) {
  if (scores_whole_rollout()) {
    std::vector<Sample*> samples;
    for (std::vector<Sample>& group : groups) {
      for (Sample& sample : group) samples.push_back(&sample);
    }
    if (!samples.empty()) score_batched(samples);
    return;
  }
  std::vector<Sample*> unscored;
  for (std::vector<Sample>& group : groups) {
    for (Sample& sample : group) {
      if (sample.reward.is_null()) unscored.push_back(&sample);
    }
  }
  if (batched_) {
    if (!unscored.empty()) score_batched(unscored);
    return;
  }
  pool_->run_all(unscored.size(), [&](size_t i) { unscored[i]->reward = score_one(*unscored[i]); });
}

}  // namespace ooze::rollout
