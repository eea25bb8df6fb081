// Starting the fsdp_worker rank processes that the multi-process fsdp tests share.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "tests/support/process.h"

namespace ooze::fsdp_test {

struct WorkerRun {
  std::vector<ooze::testing::ExitStatus> statuses;
  std::vector<std::string> outputs;
};

// Starts W fsdp_worker processes over `configs` (rendezvous on a free port, logs in `dir`) and
// waits for all of them, `timeout` in total.
inline WorkerRun launch_workers(int world, const std::vector<std::string>& configs,
                                const std::string& dir,
                                std::chrono::milliseconds timeout = std::chrono::seconds(120)) {
  const std::string port = std::to_string(ooze::testing::pick_free_port());
  std::vector<ooze::testing::Process> procs;
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> argv = {ooze::testing::build_path("tests/fsdp/fsdp_worker"),
                                     std::to_string(r),
                                     std::to_string(world),
                                     port,
                                     "60000",
                                     dir};
    argv.insert(argv.end(), configs.begin(), configs.end());
    procs.emplace_back(argv, std::map<std::string, std::string>{{"OMP_NUM_THREADS", "1"}},
                       dir + "/rank" + std::to_string(r) + ".log");
  }
  WorkerRun run;
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < world; ++r) {
    const auto left = timeout - std::chrono::duration_cast<std::chrono::milliseconds>(
                                    std::chrono::steady_clock::now() - start);
    run.statuses.push_back(procs[r].wait(std::max(left, std::chrono::milliseconds(1))));
    run.outputs.push_back(procs[r].output());
  }
  return run;
}

// launch_workers, expecting every rank to exit with 0.
inline void launch_workers_expecting_success(
    int world, const std::vector<std::string>& configs, const std::string& dir,
    std::chrono::milliseconds timeout = std::chrono::seconds(120)) {
  const WorkerRun run = launch_workers(world, configs, dir, timeout);
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(run.statuses[r].exited && run.statuses[r].code == 0)
        << "W = " << world << " rank " << r << ": " << run.statuses[r].describe() << "\n"
        << run.outputs[r];
  }
}

}  // namespace ooze::fsdp_test
