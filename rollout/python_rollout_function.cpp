#include "rollout/python_rollout_function.h"

#include <algorithm>

#include "rollout/sample_json.h"

namespace ooze::rollout {

PythonRolloutFunction::PythonRolloutFunction(const std::string& path, const std::string& flag)
    : hook_(python::PythonHook::load(path, flag,
                                     {"args", "rollout_id", "data_source", "evaluation"})) {}

nlohmann::json PythonRolloutFunction::call(int64_t rollout_id, bool evaluation,
                                           const HookServices& services) const {
  const HookBindings bindings(evaluation ? "evaluation" : "rollout", services);
  return hook_.call(
      "run_rollout",
      {{"generation", bindings.name()}, {"rollout_id", rollout_id}, {"evaluation", evaluation}});
}

PythonRollout PythonRolloutFunction::generate(int64_t rollout_id,
                                              const HookServices& services) const {
  const nlohmann::json answer = call(rollout_id, /*evaluation=*/false, services);
  PythonRollout rollout;
  try {
    rollout.groups = groups_from_json(answer.at("groups"));
  } catch (const FormatError& error) {
    throw python::HookError(hook_.flag() + " " + hook_.path() + " returned rollout " +
                            std::to_string(rollout_id) +
                            " with a sample ooze cannot train on: " + error.what());
  }
  rollout.metrics = answer.at("metrics").get<MetricMap>();
  return rollout;
}

PythonEvaluation PythonRolloutFunction::evaluate(int64_t rollout_id,
                                                 const HookServices& services) const {
  const nlohmann::json answer = call(rollout_id, /*evaluation=*/true, services);
  PythonEvaluation evaluation;
  for (const auto& [name, entry] : answer.at("data").items()) {
    EvalData data;
    data.rewards = entry.at("rewards").get<std::vector<double>>();
    data.truncated = entry.at("truncated").get<std::vector<bool>>();
    try {
      for (const nlohmann::json& record : entry.at("samples")) {
        data.samples.push_back(sample_from_json(record));
      }
    } catch (const FormatError& error) {
      throw python::HookError(hook_.flag() + " " + hook_.path() + " returned evaluation data " +
                              name + " with a sample ooze cannot read: " + error.what());
    }
    if (data.samples.size() == data.rewards.size()) {  // the rewards are the samples'
      for (size_t i = 0; i < data.samples.size(); ++i) data.samples[i].reward = data.rewards[i];
    }
    evaluation.data[name] = std::move(data);
  }
  evaluation.metrics = answer.at("metrics").get<MetricMap>();
  return evaluation;
}

MetricMap evaluation_metrics(const PythonEvaluation& evaluation, const std::string& reward_key,
                             bool log_passrate) {
  MetricMap metrics;
  for (const auto& [name, data] : evaluation.data) {
    if (!data.samples.empty()) {
      std::map<int64_t, std::vector<Sample>> by_group;
      for (const Sample& sample : data.samples) by_group[sample.group_index].push_back(sample);
      std::vector<std::vector<Sample>> groups;
      for (auto& [group_index, group] : by_group) groups.push_back(std::move(group));
      const MetricMap dataset = eval_metrics(name, groups, reward_key, log_passrate);
      metrics.insert(dataset.begin(), dataset.end());
      continue;
    }
    double sum = 0;
    for (double reward : data.rewards) sum += reward;
    metrics["eval/" + name] = data.rewards.empty() ? 0.0 : sum / data.rewards.size();
    if (!data.truncated.empty()) {
      const auto truncated = std::count(data.truncated.begin(), data.truncated.end(), true);
      metrics["eval/" + name + "/truncated_ratio"] =
          static_cast<double>(truncated) / data.truncated.size();
    }
  }
  for (const auto& [key, value] : evaluation.metrics) metrics[key] = value;
  return metrics;
}

}  // namespace ooze::rollout
