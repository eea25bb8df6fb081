#include "rollout/rollout_functions.h"

#include "python/hook_path.h"

namespace ooze::rollout {

RolloutFunctions RolloutFunctions::load(const RolloutOptions& options, const RewardModel& rewards) {
  RolloutFunctions functions;
  if (!options.dynamic_sampling_filter_path.empty()) {
    if (rewards.scores_whole_rollout()) {
      throw ConfigError(
          "--dynamic-sampling-filter-path needs each group's rewards as it finishes, but the "
          "batched reward function of --custom-rm-path scores the whole rollout: add --group-rm");
    }
    functions.filter.emplace(options.dynamic_sampling_filter_path, rewards.options().reward_key);
  }
  const std::string& buffer_path = options.buffer_filter_path;
  if (!buffer_path.empty()) {
    if (!options.partial_rollout) {
      throw ConfigError("--buffer-filter-path needs --partial-rollout (there is no buffer)");
    }
    if (python::hook_path_kind(buffer_path) == python::HookPathKind::kPython) {
      functions.python_buffer_filter = python::PythonHook::load(
          buffer_path, "--buffer-filter-path", {"args", "rollout_id", "buffer", "num_samples"});
    } else {
      functions.buffer_filter =
          PluginFunction::load(buffer_path, plugin::Kind::kBufferFilter, "--buffer-filter-path");
    }
  }
  const std::string& generate_path = options.custom_generate_function_path;
  if (!generate_path.empty()) {
    if (python::hook_path_kind(generate_path) == python::HookPathKind::kPython) {
      functions.python_generate.emplace(generate_path);
    } else {
      functions.generate = PluginFunction::load(generate_path, plugin::Kind::kGenerate,
                                                "--custom-generate-function-path");
    }
  }
  if (!options.agent_command.empty()) {
    if (!generate_path.empty()) {
      throw ConfigError(
          "--agent-command and --custom-generate-function-path both say how a "
          "sample is generated: give one");
    }
    functions.agent.emplace(options.agent_command, options.agent_timeout_s);
  }
  if (!options.env_url.empty()) {
    if (!generate_path.empty() || functions.agent) {
      throw ConfigError(
          "--env-url, --agent-command and --custom-generate-function-path each say "
          "how a sample is generated: give one");
    }
    functions.env.emplace(options.env_url, options.env_max_turns, options.env_timeout_s);
  }
  auto python_only = [](const std::string& path, const char* flag) {
    if (python::hook_path_kind(path) != python::HookPathKind::kPython) {
      throw ConfigError(
          std::string(flag) + " " + path +
          " is not a Python function (pkg.mod.fn, pkg.mod:fn or file.py:fn)" +
          (path == "sft" ? ": sft is ooze train's supervised rollout, no engines" : ""));
    }
  };
  if (!options.rollout_function_path.empty()) {
    if (functions.agent || functions.env) {
      throw ConfigError(
          "--agent-command and --env-url run inside ooze's rollout, which "
          "--rollout-function-path replaces: give one");
    }
    python_only(options.rollout_function_path, "--rollout-function-path");
    functions.rollout_function.emplace(options.rollout_function_path, "--rollout-function-path");
  }
  if (!options.eval_function_path.empty()) {
    python_only(options.eval_function_path, "--eval-function-path");
    functions.eval_function.emplace(options.eval_function_path, "--eval-function-path");
  } else if (functions.rollout_function) {
    functions.eval_function = functions.rollout_function;  // Slime's default
  }
  if (!options.data_source_path.empty()) {
    python_only(options.data_source_path, "--data-source-path");
    functions.data_source.emplace(options.data_source_path);
  }
  if (!options.rollout_all_samples_process_path.empty()) {
    python_only(options.rollout_all_samples_process_path, "--rollout-all-samples-process-path");
    functions.all_samples_process = python::PythonHook::load(
        options.rollout_all_samples_process_path, "--rollout-all-samples-process-path",
        {"args", "samples", "data_source"});
  }
  return functions;
}

}  // namespace ooze::rollout
