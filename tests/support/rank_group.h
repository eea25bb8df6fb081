// Groups of ranks on loopback for multi-rank tests and benchmarks, one process per rank, started
// in one of two ways:
//
// - forked: run_forked_ranks forks `world` children of this process, each joining the Gloo group
//   'world' through a TCP store that rank 0 hosts and running the same body with one intra-op
//   thread. Forking needs a process that has started no LibTorch thread pool (the tests' main
//   sets one thread).
//
//     RankGroupResult run = run_forked_ranks(4, [](const RankContext& rank) {
//       at::Tensor mine = ...;  rank.group->all_reduce(mine);
//       rank.check(mine.equal(expected), "the sum");
//     });
//     EXPECT_TRUE(run.all_passed()) << run.failures();
//
// - exec'd: RankProcesses (or run_rank_processes) starts one program per rank, the command line
//   `command_of(rank, port)`, with OMP_NUM_THREADS=1; the ranks meet at `port`, where rank 0
//   hosts the store or this process serves it (options.serve_store).
//
// Either way the whole group has one deadline: ranks still running when it passes are killed.
// The result says how each rank ended, with its log (rankR.log in the group's directory).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/gloo_communicator.h"
#include "tests/support/process.h"

namespace ooze::comm {
class Communicator;
class Store;
class TcpStoreServer;
}  // namespace ooze::comm

namespace ooze::testing {

// How one rank of a group ended.
struct RankOutcome {
  bool started = false;  // false for the group's absent ranks
  ExitStatus status;
  std::string log;  // what it wrote, when its output went to a log
  bool passed() const { return started && status.exited && status.code == 0; }
  std::string describe() const { return started ? status.describe() : "not started"; }
};

struct RankGroupResult {
  std::string dir;                 // the ranks' directory: their logs and what they wrote
  std::vector<RankOutcome> ranks;  // by rank
  // Whether every rank that was started exited with 0.
  bool all_passed() const;
  // "rank R: <how it ended>" and its log, for every started rank that did not pass.
  std::string failures() const;
};

// --- forked ---

struct RankContext {
  int rank = 0;
  int world = 1;
  std::shared_ptr<comm::Communicator> group;  // 'world'
  std::shared_ptr<comm::Store> store;         // the group's rendezvous store (rank 0 hosts it)
  // Records a failed check (the rank goes on, and exits 1 at the end).
  std::function<void(bool ok, const std::string& what)> check;
  std::string dir;  // the ranks' directory, for files a test wants back
};

struct ForkedRanksOptions {
  std::chrono::milliseconds collective_timeout{60000};
  std::chrono::milliseconds deadline{180000};  // for the whole group
  comm::SameHostPath same_host_path = comm::SameHostPath::kWhenPossible;
};

// Runs `body` on `world` forked ranks. A rank exits 0 when every check passed, 1 when one failed,
// 3 on a comm::CommError ("COMM ERROR after N ms: ...", timed from the fork; rank 0 lingers so
// that the others can still reach its store) and 2 on any other exception. Its stdout and stderr
// go to its log.
RankGroupResult run_forked_ranks(int world, const std::function<void(const RankContext&)>& body,
                                 const ForkedRanksOptions& options = {});

// --- exec'd ---

// The command line of rank `rank` (argv[0] a path), meeting the others at `port`.
using RankCommand = std::function<std::vector<std::string>(int rank, int port)>;

struct RankProcessOptions {
  std::string dir;                             // the ranks' directory; empty: a fresh temporary one
  std::chrono::milliseconds deadline{180000};  // for the whole group, from the start
  // Ranks not started: a peer that never arrives, or one this process plays itself.
  std::vector<int> absent_ranks;
  // The ranks write to this process's stdout and stderr instead of their logs.
  bool share_output = false;
  // This process serves the store at `port` until wait() returns, every rank joining as a client;
  // otherwise rank 0 hosts it.
  bool serve_store = false;
};

class RankProcesses {
 public:
  // Starts the ranks of [0, world) but the absent ones.
  RankProcesses(int world, const RankCommand& command_of, const RankProcessOptions& options = {});
  ~RankProcesses();  // kills the ranks still running
  RankProcesses(const RankProcesses&) = delete;
  RankProcesses& operator=(const RankProcesses&) = delete;

  int port() const { return port_; }
  const std::string& dir() const { return dir_; }
  // Waits for every rank until the deadline, killing those still running then.
  RankGroupResult wait();

 private:
  std::unique_ptr<comm::TcpStoreServer> store_;
  std::string dir_;
  int port_ = 0;
  bool share_output_ = false;
  std::chrono::steady_clock::time_point deadline_;
  std::vector<std::optional<Process>> processes_;  // by rank; none for an absent one
};

// RankProcesses(world, command_of, options).wait().
RankGroupResult run_rank_processes(int world, const RankCommand& command_of,
                                   const RankProcessOptions& options = {});

}  // namespace ooze::testing
