// Real child processes for multi-process tests: spawn, wait with a deadline, kill.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace ooze {
namespace testing {

struct ExitStatus {
  bool exited = false;     // exited normally (see code)
  int code = -1;           // exit code when exited
  int signal = 0;          // terminating signal otherwise
  bool timed_out = false;  // still running at the deadline (and then killed)
  std::string describe() const;
};

class Process {
 public:
  // Starts `argv` with the current environment plus `env`; stdout and stderr go to `log_path`
  // (empty: they stay this process's).
  Process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
          const std::string& log_path);
  ~Process();  // kills the child if it still runs
  Process(Process&& other) noexcept;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  void kill(int signal);
  // Waits until the child exits or `timeout` passes (then kills it with SIGKILL).
  ExitStatus wait(std::chrono::milliseconds timeout);
  std::string output() const;  // what it wrote to its log so far

 private:
  pid_t pid_ = -1;
  std::string log_path_;
};

// Waits for the child `pid` (one this process forked) until `deadline`, then kills it with
// SIGKILL and reports it timed out.
ExitStatus wait_for_exit(pid_t pid, std::chrono::steady_clock::time_point deadline);

// The build directory joined with `relative`.
std::string build_path(const std::string& relative);
// The `ooze` binary users run (build/launcher/ooze).
inline std::string ooze_binary() { return build_path("launcher/ooze"); }
// A fresh temporary directory, unique per call.
std::string make_temp_dir(const std::string& tag);
// A TCP port on 127.0.0.1 that was free a moment ago.
int pick_free_port();

}  // namespace testing
}  // namespace ooze
