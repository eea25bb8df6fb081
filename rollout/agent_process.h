// One run of a user's agent program: `/bin/sh -c COMMAND` in a process group of its own, with
// extra environment variables, the given text on its stdin, its stdout kept and the tail of
// its stderr, and a deadline. The program and everything it started are killed (SIGKILL to the
// group) at the deadline, when `stop` is set, and once the program exited (what it left
// running would hold the pipes open). They also die with the process that started them.
//
//   AgentProcessResult result = run_agent_process(command, {{"OPENAI_BASE_URL", url}},
//                                                 sample_json, 600.0, &stop_flag);
#pragma once

#include <atomic>
#include <map>
#include <string>

namespace ooze::rollout {

struct AgentProcessResult {
  enum class End { kExited, kSignaled, kTimedOut, kStopped, kFailedToStart };
  End end = End::kFailedToStart;
  int exit_code = -1;       // kExited
  int signal = 0;           // kSignaled
  std::string stdout_text;  // up to kMaxStdoutBytes
  std::string stderr_tail;  // the last kStderrTailBytes
  double seconds = 0.0;     // from start to exit
  std::string start_error;  // kFailedToStart: why

  bool succeeded() const { return end == End::kExited && exit_code == 0; }
  // "exited with code 3", "killed by signal 11 (Segmentation fault)", "timed out after 5 s", ...
  std::string describe() const;
};

constexpr size_t kMaxStdoutBytes = 1 << 20;
constexpr size_t kStderrTailBytes = 2000;

AgentProcessResult run_agent_process(const std::string& command,
                                     const std::map<std::string, std::string>& environment,
                                     const std::string& stdin_text, double timeout_s,
                                     const std::atomic<bool>* stop = nullptr);

}  // namespace ooze::rollout
