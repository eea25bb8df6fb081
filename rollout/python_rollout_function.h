// --rollout-function-path / --eval-function-path: a whole rollout written in Python, Slime's
//
//   def generate_rollout(args, rollout_id, data_source, evaluation=False)
//       -> RolloutFnTrainOutput(samples=groups, metrics) | groups            (training)
//       -> RolloutFnEvalOutput(data={name: {"rewards", "truncated", "samples"}}, metrics) | data
//
// It draws prompts from data_source (the --data-source-path class, or the run's own prompts
// behind the partial-rollout buffer), generates with ooze.generate against the run's engines
// (the request the built-in rollout sends, so the trained tokens are the engine's), rewards with
// ooze.score (the run's --rm-type or --custom-rm-path) and returns the groups to train on.
//
//   PythonRolloutFunction function(path, "--rollout-function-path");   // at start-up
//   PythonRollout rollout = function.generate(rollout_id, services);
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "python/python_hook.h"
#include "rollout/hook_bindings.h"
#include "rollout/rollout_metrics.h"
#include "rollout/sample.h"

namespace ooze::rollout {

struct PythonRollout {
  std::vector<std::vector<Sample>> groups;
  MetricMap metrics;  // the function's own, under its keys
};

// One evaluation dataset as an eval function returns it.
struct EvalData {
  std::vector<double> rewards;
  std::vector<bool> truncated;  // empty when the function gave none
  std::vector<Sample> samples;  // empty when the function gave none
};

struct PythonEvaluation {
  std::map<std::string, EvalData> data;
  MetricMap metrics;
};

class PythonRolloutFunction {
 public:
  // `flag` names the flag in errors. Throws python::HookError when the function cannot load or
  // take (args, rollout_id, data_source, evaluation).
  PythonRolloutFunction(const std::string& path, const std::string& flag);

  // Throws python::HookError naming the rollout when the function raises or returns something
  // else than groups of samples (or evaluation data).
  PythonRollout generate(int64_t rollout_id, const HookServices& services) const;
  PythonEvaluation evaluate(int64_t rollout_id, const HookServices& services) const;

  const python::PythonHook& hook() const { return hook_; }

 private:
  nlohmann::json call(int64_t rollout_id, bool evaluation, const HookServices& services) const;

  python::PythonHook hook_;
};

// eval_metrics() of each dataset whose samples the function returned (grouped by group_index),
// else eval/<name> (mean reward) and eval/<name>/truncated_ratio; then the function's metrics.
MetricMap evaluation_metrics(const PythonEvaluation& evaluation, const std::string& reward_key,
                             bool log_passrate);

}  // namespace ooze::rollout
