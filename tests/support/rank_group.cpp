#include "tests/support/rank_group.h"

#include <ATen/Parallel.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "comm/comm_error.h"
#include "comm/gloo_communicator.h"
#include "comm/tcp_store.h"

namespace ooze::testing {
namespace {

using Clock = std::chrono::steady_clock;

std::string log_path_of(const std::string& dir, int rank) {
  return dir + "/rank" + std::to_string(rank) + ".log";
}

std::string text_of(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

[[noreturn]] void run_forked_rank(int rank, int world, int port, const std::string& dir,
                                  const std::function<void(const RankContext&)>& body,
                                  const ForkedRanksOptions& options) {
  const auto start = Clock::now();
  const int fd = ::open(log_path_of(dir, rank).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ::dup2(fd, STDOUT_FILENO);
  ::dup2(fd, STDERR_FILENO);
  ::close(fd);
  at::set_num_threads(1);
  int failures = 0;
  RankContext context;
  context.rank = rank;
  context.world = world;
  context.dir = dir;
  context.check = [&](bool ok, const std::string& what) {
    if (ok) return;
    std::cerr << "CHECK FAILED (rank " << rank << "): " << what << std::endl;
    ++failures;
  };
  std::shared_ptr<comm::TcpStore> store;  // outlives the group and the error reports below
  try {
    store = std::make_shared<comm::TcpStore>("127.0.0.1", port, rank, rank == 0,
                                             options.collective_timeout);
    context.store = store;
    context.group =
        comm::make_gloo_communicator(store, rank, world, "world", options.collective_timeout,
                                     "127.0.0.1", options.same_host_path);
    body(context);
    context.group->barrier();  // rank 0 hosts the store: keep it up until everyone is done
  } catch (const comm::CommError& e) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    std::cerr << "COMM ERROR after " << ms.count() << " ms: " << e.what() << std::endl;
    if (rank == 0) std::this_thread::sleep_for(std::chrono::seconds(2));
    std::_Exit(3);  // no destructors: threads may be stuck on the dead group
  } catch (const std::exception& e) {
    std::cerr << "UNEXPECTED ERROR (rank " << rank << "): " << e.what() << std::endl;
    std::_Exit(2);
  }
  std::cout << "rank " << rank << (failures ? " failed" : " passed") << std::endl;
  std::_Exit(failures ? 1 : 0);
}

}  // namespace

bool RankGroupResult::all_passed() const {
  return std::all_of(ranks.begin(), ranks.end(),
                     [](const RankOutcome& rank) { return !rank.started || rank.passed(); });
}

std::string RankGroupResult::failures() const {
  std::string text;
  for (size_t rank = 0; rank < ranks.size(); ++rank) {
    if (!ranks[rank].started || ranks[rank].passed()) continue;
    text += "rank " + std::to_string(rank) + ": " + ranks[rank].describe() + "\n" +
            ranks[rank].log + (ranks[rank].log.empty() ? "" : "\n");
  }
  return text;
}

RankGroupResult run_forked_ranks(int world, const std::function<void(const RankContext&)>& body,
                                 const ForkedRanksOptions& options) {
  RankGroupResult result;
  result.dir = make_temp_dir("ranks");
  const int port = pick_free_port();
  std::fflush(nullptr);  // what this process printed must not be printed again by a child
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    const pid_t pid = ::fork();
    if (pid == 0) run_forked_rank(rank, world, port, result.dir, body, options);
    pids.push_back(pid);
  }
  const auto deadline = Clock::now() + options.deadline;
  for (int rank = 0; rank < world; ++rank) {
    RankOutcome outcome;
    outcome.started = true;
    outcome.status = wait_for_exit(pids[static_cast<size_t>(rank)], deadline);
    outcome.log = text_of(log_path_of(result.dir, rank));
    result.ranks.push_back(std::move(outcome));
  }
  return result;
}

RankProcesses::RankProcesses(int world, const RankCommand& command_of,
                             const RankProcessOptions& options)
    : dir_(options.dir.empty() ? make_temp_dir("ranks") : options.dir),
      share_output_(options.share_output),
      deadline_(Clock::now() + options.deadline) {
  if (options.serve_store) {
    store_ = std::make_unique<comm::TcpStoreServer>("127.0.0.1", 0);
    port_ = store_->port();
  } else {
    port_ = pick_free_port();
  }
  for (int rank = 0; rank < world; ++rank) {
    const auto& absent = options.absent_ranks;
    if (std::find(absent.begin(), absent.end(), rank) != absent.end()) {
      processes_.emplace_back();
      continue;
    }
    processes_.emplace_back(std::in_place, command_of(rank, port_),
                            std::map<std::string, std::string>{{"OMP_NUM_THREADS", "1"}},
                            share_output_ ? "" : log_path_of(dir_, rank));
  }
}

RankProcesses::~RankProcesses() = default;

RankGroupResult RankProcesses::wait() {
  RankGroupResult result;
  result.dir = dir_;
  for (std::optional<Process>& process : processes_) {
    RankOutcome outcome;
    if (process) {
      outcome.started = true;
      outcome.status = process->wait(
          std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()),
                   std::chrono::milliseconds(1)));
      outcome.log = process->output();
    }
    result.ranks.push_back(std::move(outcome));
  }
  store_.reset();
  return result;
}

RankGroupResult run_rank_processes(int world, const RankCommand& command_of,
                                   const RankProcessOptions& options) {
  return RankProcesses(world, command_of, options).wait();
}

}  // namespace ooze::testing
