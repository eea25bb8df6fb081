#include "rollout/agent_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <vector>

extern char** environ;

namespace ooze::rollout {

namespace {

using Clock = std::chrono::steady_clock;

// How long the pipes are still read after the program exited (its output may be in flight).
constexpr std::chrono::milliseconds kDrainAfterExit(200);

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// The environment as execve wants it: this process's, with `overrides` replacing or adding.
std::vector<std::string> child_environment(const std::map<std::string, std::string>& overrides) {
  std::vector<std::string> out;
  for (char** entry = environ; entry && *entry; ++entry) {
    const std::string text(*entry);
    const std::string name = text.substr(0, text.find('='));
    if (overrides.count(name) == 0) out.push_back(text);
  }
  for (const auto& [name, value] : overrides) out.push_back(name + "=" + value);
  return out;
}

}  // namespace

std::string AgentProcessResult::describe() const {
  switch (end) {
    case End::kExited:
      return "exited with code " + std::to_string(exit_code);
    case End::kSignaled:
      return "killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
    case End::kTimedOut:
      return "timed out after " + std::to_string(static_cast<int64_t>(seconds)) + " s";
    case End::kStopped:
      return "stopped: the rollout had what it needed";
    case End::kFailedToStart:
      return "could not start: " + start_error;
  }
  return "";
}

AgentProcessResult run_agent_process(const std::string& command,
                                     const std::map<std::string, std::string>& environment,
                                     const std::string& stdin_text, double timeout_s,
                                     const std::atomic<bool>* stop) {
  // A program that exits without reading its stdin must not kill this process with SIGPIPE.
  static std::once_flag ignore_sigpipe;
  std::call_once(ignore_sigpipe, [] { ::signal(SIGPIPE, SIG_IGN); });

  AgentProcessResult result;
  int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    result.start_error = std::string("pipe: ") + std::strerror(errno);
    for (int* fds : {in, out, err}) {
      close_fd(fds[0]);
      close_fd(fds[1]);
    }
    return result;
  }
  // Everything the child needs is built before fork: after it, only async-signal-safe calls.
  const std::vector<std::string> env_strings = child_environment(environment);
  std::vector<char*> envp;
  for (const std::string& entry : env_strings) envp.push_back(const_cast<char*>(entry.c_str()));
  envp.push_back(nullptr);
  const char* argv[] = {"sh", "-c", command.c_str(), nullptr};
  const pid_t parent = ::getpid();

  const Clock::time_point start = Clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) {
    result.start_error = std::string("fork: ") + std::strerror(errno);
    for (int* fds : {in, out, err}) {
      close_fd(fds[0]);
      close_fd(fds[1]);
    }
    return result;
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the parent died before prctl
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    ::execve("/bin/sh", const_cast<char* const*>(argv), envp.data());
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here, so the group exists before any kill below
  close_fd(in[0]);
  close_fd(out[1]);
  close_fd(err[1]);
  for (int fd : {in[1], out[0], err[0]}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  if (stdin_text.empty()) close_fd(in[1]);

  const Clock::time_point deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  size_t written = 0;
  std::string stderr_text;
  bool exited = false;
  int status = 0;
  Clock::time_point drain_until = Clock::time_point::max();
  auto kill_group = [pid] { ::kill(-pid, SIGKILL); };

  while (out[0] >= 0 || err[0] >= 0 || !exited) {
    const Clock::time_point now = Clock::now();
    if (!exited) {
      const pid_t done = ::waitpid(pid, &status, WNOHANG);
      if (done == pid) {
        exited = true;
        result.seconds = std::chrono::duration<double>(now - start).count();
        drain_until = now + kDrainAfterExit;
        close_fd(in[1]);
      } else if (now >= deadline || (stop && stop->load())) {
        result.end = now >= deadline ? AgentProcessResult::End::kTimedOut
                                     : AgentProcessResult::End::kStopped;
        kill_group();
        ::waitpid(pid, &status, 0);
        result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
        break;
      }
    } else if (now >= drain_until) {
      break;  // something the program started still holds the pipes
    }
    std::vector<pollfd> fds;
    if (in[1] >= 0 && written < stdin_text.size()) fds.push_back({in[1], POLLOUT, 0});
    if (out[0] >= 0) fds.push_back({out[0], POLLIN, 0});
    if (err[0] >= 0) fds.push_back({err[0], POLLIN, 0});
    if (fds.empty()) {
      ::usleep(10 * 1000);  // only waiting for the exit now
      continue;
    }
    if (::poll(fds.data(), fds.size(), 50) < 0 && errno != EINTR) break;
    for (const pollfd& entry : fds) {
      if (entry.revents == 0) continue;
      if (entry.fd == in[1]) {
        const ssize_t n = ::write(in[1], stdin_text.data() + written, stdin_text.size() - written);
        if (n > 0) written += static_cast<size_t>(n);
        if (n < 0 && errno != EAGAIN) close_fd(in[1]);  // it closed its stdin: fine
        if (written == stdin_text.size()) close_fd(in[1]);
        continue;
      }
      char buffer[65536];
      const ssize_t n = ::read(entry.fd, buffer, sizeof(buffer));
      const bool is_out = entry.fd == out[0];
      if (n > 0) {
        if (is_out) {
          const size_t room =
              kMaxStdoutBytes - std::min(kMaxStdoutBytes, result.stdout_text.size());
          result.stdout_text.append(buffer, std::min(room, static_cast<size_t>(n)));
        } else {
          stderr_text.append(buffer, static_cast<size_t>(n));
          if (stderr_text.size() > 4 * kStderrTailBytes) {
            stderr_text.erase(0, stderr_text.size() - kStderrTailBytes);
          }
        }
      } else if (n == 0 || errno != EAGAIN) {
        close_fd(is_out ? out[0] : err[0]);
      }
    }
  }
  kill_group();  // whatever it left behind
  for (int* fd : {&in[1], &out[0], &err[0]}) close_fd(*fd);
  result.stderr_tail = stderr_text.size() > kStderrTailBytes
                           ? stderr_text.substr(stderr_text.size() - kStderrTailBytes)
                           : stderr_text;
  if (exited) {
    if (WIFEXITED(status)) {
      result.end = AgentProcessResult::End::kExited;
      result.exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
      result.end = AgentProcessResult::End::kSignaled;
      result.signal = WTERMSIG(status);
    }
  }
  return result;
}

}  // namespace ooze::rollout
