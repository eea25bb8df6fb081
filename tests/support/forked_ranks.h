// Multi-rank tests inside one test: `world` ranks forked from the test process, each joining a
// Gloo group through a TCP store that rank 0 hosts, running the same body with one intra-op
// thread. A rank reports through its exit code (0: every check passed, 1: a check failed, 2: an
// exception) and a log of its own; the test expects every rank to pass and prints rank 0's log,
// which reports what the ranks measured.
//
//   run_forked_ranks("ring", 4, [](const RankContext& rank) {
//     at::Tensor mine = ...;  rank.group->all_reduce(mine);
//     rank.check(mine.equal(expected), "the sum");
//   });
//
// Forking needs a test process that has run no LibTorch code yet (no intra-op pool to inherit).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "comm/communicator.h"

namespace ooze::testing {

struct RankContext {
  int rank = 0;
  int world = 1;
  std::shared_ptr<comm::Communicator> group;
  // Records a failed check (the rank goes on, and exits 1 at the end).
  std::function<void(bool ok, const std::string& what)> check;
  std::string dir;  // the ranks' directory: their logs, and files a test wants back
};

struct ForkedRanksOptions {
  std::chrono::milliseconds collective_timeout{60000};
  std::chrono::seconds deadline{180};  // for the whole group; ranks still running are killed
};

// Runs `body` on `world` forked ranks; returns the ranks' directory. Failures are the test's
// (EXPECT), naming `scenario`, the rank, how it ended and its log.
std::string run_forked_ranks(const std::string& scenario, int world,
                             const std::function<void(const RankContext&)>& body,
                             const ForkedRanksOptions& options = {});

}  // namespace ooze::testing
