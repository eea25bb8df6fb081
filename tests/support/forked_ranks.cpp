#include "tests/support/forked_ranks.h"

#include <ATen/Parallel.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <vector>

#include "comm/gloo_communicator.h"
#include "comm/tcp_store.h"
#include "tests/support/process.h"

namespace ooze::testing {
namespace {

[[noreturn]] void run_rank(const std::string& scenario, int rank, int world, int port,
                           const std::string& dir,
                           const std::function<void(const RankContext&)>& body,
                           const ForkedRanksOptions& options) {
  const std::string log = dir + "/rank" + std::to_string(rank);
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
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
  std::shared_ptr<comm::TcpStore> store;  // outlives the group
  try {
    store = std::make_shared<comm::TcpStore>("127.0.0.1", port, rank, rank == 0,
                                             options.collective_timeout);
    context.group =
        comm::make_gloo_communicator(store, rank, world, "ranks", options.collective_timeout);
    body(context);
    context.group->barrier();  // rank 0 hosts the store: keep it up until everyone is done
  } catch (const std::exception& e) {
    std::cerr << "UNEXPECTED ERROR (rank " << rank << "): " << e.what() << std::endl;
    std::fflush(nullptr);
    std::_Exit(2);
  }
  std::cout << "rank " << rank << (failures ? " failed" : " passed") << std::endl;
  std::fflush(nullptr);
  std::_Exit(failures ? 1 : 0);
}

}  // namespace

std::string run_forked_ranks(const std::string& scenario, int world,
                             const std::function<void(const RankContext&)>& body,
                             const ForkedRanksOptions& options) {
  const std::string dir = make_temp_dir("ranks");
  const int port = pick_free_port();
  std::fflush(nullptr);  // what this process printed must not be printed again by a child
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    const pid_t pid = ::fork();
    if (pid == 0) run_rank(scenario, rank, world, port, dir, body, options);
    pids.push_back(pid);
  }
  const auto deadline = std::chrono::steady_clock::now() + options.deadline;
  for (int rank = 0; rank < world; ++rank) {
    const ExitStatus status = wait_for_exit(pids[static_cast<size_t>(rank)], deadline);
    std::ifstream in(dir + "/rank" + std::to_string(rank));
    std::stringstream text;
    text << in.rdbuf();
    EXPECT_TRUE(status.exited && status.code == 0)
        << scenario << " rank " << rank << ": " << status.describe() << "\n"
        << text.str();
    if (rank == 0) std::cout << text.str();
  }
  return dir;
}

}  // namespace ooze::testing
