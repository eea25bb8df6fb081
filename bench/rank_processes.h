// Runs a multi-rank benchmark as real processes: `world_size` copies of this executable
// (/proc/self/exe), each with one intra-op thread, meeting through a TCP store this process
// serves, and each writing its figures to a pipe this process reads.
//
//   std::string report = run_rank_processes(2, [&](int rank, const std::string& port,
//                                                  const std::string& report_fd) {
//     return std::vector<std::string>{"--rank", std::to_string(rank), "--port", port,
//                                     "--report-fd", report_fd};
//   }, "bench_fsdp_training: the W = 2 run");
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_support.h"
#include "comm/tcp_store.h"
#include "core/error.h"

namespace ooze::bench {

// Returns all the ranks wrote to the report fd. Throws ooze::Error naming `what` when a rank
// fails (its stderr, shared with this process's, says why).
inline std::string run_rank_processes(
    int world_size,
    const std::function<std::vector<std::string>(int rank, const std::string& port,
                                                 const std::string& report_fd)>& arguments_of,
    const std::string& what) {
  comm::TcpStoreServer store("127.0.0.1", 0);
  int report_pipe[2];
  if (::pipe(report_pipe) != 0) {
    throw Error(what + ": pipe() failed: " + std::strerror(errno));
  }
  // The ranks' environment, built before fork.
  std::vector<std::string> env_strings = one_thread_environment();
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);

  std::fflush(nullptr);  // what this process printed must not be printed again by a child
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world_size; ++rank) {
    std::vector<std::string> arguments =
        arguments_of(rank, std::to_string(store.port()), std::to_string(report_pipe[1]));
    arguments.insert(arguments.begin(), "/proc/self/exe");
    std::vector<char*> argv;
    for (std::string& argument : arguments) argv.push_back(argument.data());
    argv.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(report_pipe[0]);
      ::execve("/proc/self/exe", argv.data(), envp.data());
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  ::close(report_pipe[1]);
  std::string report;
  char buffer[4096];
  ssize_t n;
  while ((n = ::read(report_pipe[0], buffer, sizeof(buffer))) > 0) report.append(buffer, n);
  ::close(report_pipe[0]);
  bool failed = false;
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = true;
  }
  if (failed) throw Error(what + " failed (see its stderr above)");
  return report;
}

}  // namespace ooze::bench
