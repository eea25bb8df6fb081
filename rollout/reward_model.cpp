#include "rollout/reward_model.h"

#include "python/hook_path.h"
#include "rollout/python_sample.h"
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
          "Your reward function (wins over --rm-type): package.module.function or "
          "file.py:function, (args, sample) -> float | dict, sync or async; with --group-rm "
          "(args, samples) -> list. Or lib.so:function, a C++ plugin.");
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
  const std::string& path = options_.custom_rm_path;
  if (!path.empty()) {
    source_ = "--custom-rm-path " + path;
    if (python::hook_path_kind(path) == python::HookPathKind::kPython) {
      // Slime's convention: --group-rm decides whether the function scores a group or a sample.
      batched_ = options_.group_rm;
      python_ = python::PythonHook::load(path, "--custom-rm-path",
                                         batched_ ? std::vector<std::string>{"args", "samples"}
                                                  : std::vector<std::string>{"args", "sample"});
    } else {
      // Either kind of C++ reward function; the descriptor says which.
      PluginFunction function = PluginFunction::load_any(
          path, {plugin::Kind::kReward, plugin::Kind::kBatchedReward}, "--custom-rm-path");
      batched_ = function.kind() == plugin::Kind::kBatchedReward;
      plugin_ = std::move(function);
    }
  } else if (options_.rm_type == "remote_rm") {
    if (options_.remote.url.empty()) throw ConfigError("--rm-type remote_rm needs --rm-url");
    remote_ = std::make_unique<RemoteReward>(options_.remote);
    source_ = "--rm-type remote_rm (" + options_.remote.url + ")";
  } else if (options_.rm_type.empty() && options_.environment_rewards) {
    source_ = "--env-url";
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
    if (options_.rm_type.empty()) {
      throw Error(
          "the environment gave it no reward and the run has no --rm-type or "
          "--custom-rm-path");
    }
    return score_builtin_reward(effective_reward_type(options_.rm_type, sample), sample);
  } catch (const std::exception& error) {
    throw RewardError("reward (" + source_ + ") failed on sample " + std::to_string(sample.index) +
                      " (group " + std::to_string(sample.group_index) + "): " + error.what());
  }
}

nlohmann::json RewardModel::score(const Sample& sample) const {
  Sample copy = sample;
  const std::vector<std::exception_ptr> failures = try_score({&copy});
  if (failures[0]) std::rethrow_exception(failures[0]);
  return copy.reward;
}

void RewardModel::score_in_python(const std::vector<Sample*>& samples,
                                  std::vector<std::exception_ptr>& failures) const {
  // `samples[begin, end)` through one call of the hook operation.
  const auto score_range = [&](const char* operation, size_t begin, size_t end) {
    try {
      const nlohmann::json answer = python_->call_with_records(
          operation, end - begin, [&](size_t i, python::RecordWriter& record) {
            write_sample(*samples[begin + i], record);
          });
      take_python_outcomes(answer.at("outcomes"), samples, failures, begin);
      if (answer.contains("seconds")) {
        python_seconds_per_sample_ =
            answer["seconds"].get<double>() / static_cast<double>(end - begin);
      }
    } catch (const std::exception&) {
      std::fill(failures.begin() + begin, failures.begin() + end, std::current_exception());
    }
  };
  // One call: the batch, or every coroutine at once on the hooks' event loop.
  if (batched_ || python_->is_async()) {
    score_range(batched_ ? "reward_batch" : "reward_each", 0, samples.size());
    return;
  }
  // A plain function holds its thread. Quick ones run one after the other in one call: handing
  // the GIL from thread to thread costs more than they do. Slow ones (waiting on I/O or
  // sleeping, which releases the GIL) are spread over the reward threads, as are the first
  // calls, before their time is known.
  const double seconds_per_sample = python_seconds_per_sample_;
  if (seconds_per_sample >= 0 && seconds_per_sample < kQuickPythonReward) {
    score_range("reward_each", 0, samples.size());
    return;
  }
  pool_->run_all(samples.size(), [&](size_t i) { score_range("reward_each", i, i + 1); });
}

void RewardModel::take_python_outcomes(const nlohmann::json& outcomes,
                                       const std::vector<Sample*>& samples,
                                       std::vector<std::exception_ptr>& failures, size_t first) {
  for (size_t i = 0; i < outcomes.size(); ++i) {
    const nlohmann::json& outcome = outcomes[i];  // [true, reward] or [false, message]
    if (outcome[0].get<bool>()) {
      samples[first + i]->reward = outcome[1];
    } else {
      failures[first + i] = std::make_exception_ptr(RewardError(outcome[1].get<std::string>()));
    }
  }
}

std::vector<std::exception_ptr> RewardModel::try_score(const std::vector<Sample*>& samples) const {
  std::vector<std::exception_ptr> failures(samples.size());
  if (samples.empty()) return failures;
  if (python_) {
    score_in_python(samples, failures);
    return failures;
  }
  if (batched_) {
    try {
      std::vector<Sample> copies;
      copies.reserve(samples.size());
      for (const Sample* sample : samples) copies.push_back(*sample);
      std::vector<nlohmann::json> rewards = plugin_->batched_reward(copies);
      for (size_t i = 0; i < samples.size(); ++i) samples[i]->reward = std::move(rewards[i]);
    } catch (const std::exception&) {
      std::fill(failures.begin(), failures.end(), std::current_exception());
    }
    return failures;
  }
  pool_->run_all(samples.size(), [&](size_t i) {
    try {
      samples[i]->reward = score_one(*samples[i]);
    } catch (const std::exception&) {
      failures[i] = std::current_exception();
    }
  });
  return failures;
}

namespace {

void rethrow_first(const std::vector<std::exception_ptr>& failures) {
  for (const std::exception_ptr& failure : failures) {
    if (failure) std::rethrow_exception(failure);
  }
}

}  // namespace

void RewardModel::score_group(std::vector<Sample>& group) {
  if (scores_whole_rollout()) return;
  // A reward a generate function set stays (Slime's); a group function sees the whole group.
  std::vector<Sample*> samples;
  for (Sample& sample : group) {
    if (sample.reward.is_null()) samples.push_back(&sample);
  }
  if (samples.empty()) return;
  if (batched_) {
    samples.clear();
    for (Sample& sample : group) samples.push_back(&sample);
  }
  rethrow_first(try_score(samples));
}

void RewardModel::score_rollout(std::vector<std::vector<Sample>>& groups) {
  // The whole rollout for a rollout-wide batched function, else what is not scored yet.
  std::vector<Sample*> samples;
  for (std::vector<Sample>& group : groups) {
    for (Sample& sample : group) {
      if (scores_whole_rollout() || sample.reward.is_null()) samples.push_back(&sample);
    }
  }
  rethrow_first(try_score(samples));
}

}  // namespace ooze::rollout
