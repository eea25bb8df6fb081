// The fsdp_worker command line of the multi-process fsdp tests, started as a group of rank
// processes (tests/support/rank_group.h).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "tests/support/rank_group.h"

namespace ooze::fsdp_test {

// Runs W fsdp_worker processes over `configs` (rendezvous on a free port that rank 0 serves, logs
// and outputs in `dir`), all of them within `timeout`.
inline testing::RankGroupResult launch_workers(
    int world, const std::vector<std::string>& configs, const std::string& dir,
    std::chrono::milliseconds timeout = std::chrono::seconds(120)) {
  testing::RankProcessOptions options;
  options.dir = dir;
  options.deadline = timeout;
  return testing::run_rank_processes(
      world,
      [&](int rank, int port) {
        std::vector<std::string> argv = {testing::build_path("tests/fsdp/fsdp_worker"),
                                         std::to_string(rank),
                                         std::to_string(world),
                                         std::to_string(port),
                                         "60000",
                                         dir};
        argv.insert(argv.end(), configs.begin(), configs.end());
        return argv;
      },
      options);
}

// launch_workers, expecting every rank to exit with 0.
inline void launch_workers_expecting_success(
    int world, const std::vector<std::string>& configs, const std::string& dir,
    std::chrono::milliseconds timeout = std::chrono::seconds(120)) {
  const testing::RankGroupResult run = launch_workers(world, configs, dir, timeout);
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(run.ranks[r].passed())
        << "W = " << world << " rank " << r << ": " << run.ranks[r].describe() << "\n"
        << run.ranks[r].log;
  }
}

}  // namespace ooze::fsdp_test
