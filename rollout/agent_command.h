// --agent-command: the user's agent program, in any language, run once per sample against an
// OpenAI-compatible session (serving/session_server.h) whose exact tokens become the sample.
//
//   AgentCommand agent("python3 my_agent.py", /*timeout_s=*/600);
//   std::vector<Sample> samples = agent.run(sample, sessions, settings, tokenizer, &stop);
//
// The program gets, for the sample:
//   OPENAI_BASE_URL  the session's base URL (http://127.0.0.1:PORT/sessions/ID/v1)
//   OPENAI_API_KEY   the session server's key
//   stdin            one JSON line: {"index", "group_index", "prompt", "label", "metadata",
//                    "tools"}, the sample as the prompt data gave it
// and may print, as lines of its stdout, JSON objects with
//   "reward": R        the sample's reward (a number, or an object with the --reward-key field);
//                      the last one counts. Without one, the run's --rm-type / --custom-rm-path
//                      scores the final sample.
//   "metrics": {...}   numbers of its own (tool calls it answered, ...), reported as the
//                      rollout's rollout/<name> means.
// Other output is ignored.
//
// An agent that exits non-zero, dies by a signal, outlives --agent-timeout or cannot start
// gives an aborted sample (abort_reason says which, with the tail of its stderr; what its
// session recorded is kept; reward 0 unless it printed one) and the rollout goes on. Its
// sample.metrics carry agent/aborted_<why> = 1 (exit_code, signal, timeout, start, no_calls).
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "rollout/sample.h"
#include "serving/session_server.h"

namespace ooze::models {
class Tokenizer;
}

namespace ooze::rollout {

class AgentCommand {
 public:
  AgentCommand(std::string command, double timeout_s);

  // Runs the agent for `sample` in a session opened with `settings`. `stop`, once set, kills a
  // running agent (its sample is aborted: the rollout had what it needed).
  std::vector<Sample> run(const Sample& sample, serving::SessionServer& sessions,
                          const serving::SessionSettings& settings,
                          const models::Tokenizer& tokenizer,
                          const std::atomic<bool>* stop = nullptr) const;

  const std::string& command() const { return command_; }

 private:
  std::string command_;
  double timeout_s_;
};

// What an agent printed for ooze: the reward of the last stdout line with one (null when none),
// and the numbers of every "metrics" object, later lines winning.
struct AgentReport {
  nlohmann::json reward = nullptr;
  nlohmann::json metrics = nlohmann::json::object();
};
AgentReport read_agent_report(const std::string& stdout_text);

}  // namespace ooze::rollout
