#include "rollout/agent_command.h"

#include <sstream>

#include "rollout/agent_process.h"
#include "rollout/agent_trajectory.h"

namespace ooze::rollout {

namespace {

// The part of an aborted sample's reason that names the failure in metrics.
const char* failure_kind(const AgentProcessResult& result) {
  switch (result.end) {
    case AgentProcessResult::End::kExited:
      return "exit_code";
    case AgentProcessResult::End::kSignaled:
      return "signal";
    case AgentProcessResult::End::kTimedOut:
      return "timeout";
    case AgentProcessResult::End::kStopped:
      return "stopped";
    case AgentProcessResult::End::kFailedToStart:
      return "start";
  }
  return "exit_code";
}

std::string trimmed_tail(const std::string& text, size_t max_bytes) {
  std::string tail = text.size() > max_bytes ? text.substr(text.size() - max_bytes) : text;
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
  return tail;
}

}  // namespace

AgentCommand::AgentCommand(std::string command, double timeout_s)
    : command_(std::move(command)), timeout_s_(timeout_s) {}

AgentReport read_agent_report(const std::string& stdout_text) {
  AgentReport report;
  std::istringstream lines(stdout_text);
  std::string line;
  while (std::getline(lines, line)) {
    const nlohmann::json parsed = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_object()) continue;
    if (parsed.contains("reward") && !parsed["reward"].is_null()) report.reward = parsed["reward"];
    if (parsed.contains("metrics") && parsed["metrics"].is_object()) {
      for (const auto& [name, value] : parsed["metrics"].items()) {
        if (value.is_number()) report.metrics[name] = value;
      }
    }
  }
  return report;
}

std::vector<Sample> AgentCommand::run(const Sample& sample, serving::SessionServer& sessions,
                                      const serving::SessionSettings& settings,
                                      const models::Tokenizer& tokenizer,
                                      const std::atomic<bool>* stop) const {
  const nlohmann::json input = {{"index", sample.index},       {"group_index", sample.group_index},
                                {"prompt", sample.prompt},     {"label", sample.label},
                                {"metadata", sample.metadata}, {"tools", sample.tools}};
  const std::string id = sessions.open(settings);
  const AgentProcessResult result = run_agent_process(
      command_,
      {{"OPENAI_BASE_URL", sessions.base_url(id)}, {"OPENAI_API_KEY", sessions.api_key()}},
      input.dump() + "\n", timeout_s_, stop);
  const serving::SessionRecord record = sessions.close(id);
  const AgentReport report = read_agent_report(result.stdout_text);
  const nlohmann::json& reward = report.reward;

  std::vector<Sample> samples = trajectory_samples(sample, record, tokenizer);
  std::string failure;
  const char* kind = nullptr;
  if (!result.succeeded()) {
    kind = failure_kind(result);
    failure = "agent " + result.describe();
  } else if (samples.empty()) {
    kind = "no_calls";
    failure = "agent exited without calling the model";
  }
  if (samples.empty()) {
    // Nothing sampled: the dataset's prompt with an empty response stands for the rollout.
    Sample empty = sample;
    empty.response_length = 0;
    empty.tokens.resize(static_cast<size_t>(sample.prompt_length()));
    empty.response.clear();
    empty.loss_mask.clear();
    empty.rollout_log_probs.clear();
    empty.weight_versions.clear();
    empty.metrics = {{"agent/turns", 0}, {"agent/tool_calls", 0}, {"agent/segments", 1}};
    samples.push_back(std::move(empty));
  }
  Sample& last = samples.back();
  if (kind) {
    const std::string stderr_tail = trimmed_tail(result.stderr_tail, 500);
    last.status = Sample::Status::kAborted;
    last.abort_reason =
        failure + (stderr_tail.empty() ? "" : "; stderr: " + stderr_tail) +
        (record.refused_calls > 0 ? "; last refused call: " + record.last_refusal : "");
    samples.front().metrics[std::string("agent/aborted_") + kind] = 1;
    if (reward.is_null()) last.reward = 0;
  }
  if (!reward.is_null()) last.reward = reward;
  samples.front().metrics.update(report.metrics);
  return samples;
}

}  // namespace ooze::rollout
