// Multi-process tests of the Gloo backend: real processes (tests/comm/comm_worker.cpp, or forked
// from this test for the large broadcasts) on loopback, 2 to 4 ranks, checked against values the
// ranks compute independently.
#include "comm/gloo_communicator.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/comm_error.h"
#include "comm/tcp_store.h"
#include "tests/support/process.h"

namespace ooze {
namespace gloo_communicator_test {

using std::chrono::milliseconds;
using testing::ExitStatus;
using testing::Process;

struct RankResult {
  ExitStatus status;
  std::string output;
};

// The first number N in "<marker> N ms" within `text`, or -1.
long long ms_after(const std::string& text, const std::string& marker) {
  std::smatch match;
  if (!std::regex_search(text, match, std::regex(marker + " ([0-9]+) ms"))) return -1;
  return std::stoll(match[1].str());
}

// Starts ranks [0, world) except those in `absent`, waits for each up to `limit`.
std::vector<RankResult> run_group(const std::string& scenario, int world, milliseconds timeout,
                                  milliseconds limit, std::vector<int> absent = {}) {
  const std::string dir = testing::make_temp_dir("comm-" + scenario);
  const std::string port = std::to_string(testing::pick_free_port());
  std::vector<Process> procs;
  std::vector<int> ranks;
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < world; ++r) {
    if (std::find(absent.begin(), absent.end(), r) != absent.end()) continue;
    procs.emplace_back(std::vector<std::string>{testing::build_path("tests/comm/comm_worker"),
                                                scenario, std::to_string(r), std::to_string(world),
                                                port, std::to_string(timeout.count())},
                       std::map<std::string, std::string>{{"OMP_NUM_THREADS", "1"}},
                       dir + "/rank" + std::to_string(r) + ".log");
    ranks.push_back(r);
  }
  std::vector<RankResult> results(static_cast<size_t>(world));
  for (size_t i = 0; i < procs.size(); ++i) {
    RankResult& result = results[static_cast<size_t>(ranks[i])];
    auto left =
        limit - std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start);
    result.status = procs[i].wait(std::max(left, milliseconds(1)));
    result.output = procs[i].output();
  }
  return results;
}

void expect_all_passed(const std::vector<RankResult>& results) {
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_TRUE(results[r].status.exited && results[r].status.code == 0)
        << "rank " << r << ": " << results[r].status.describe() << "\n"
        << results[r].output;
  }
}

class GlooGroup : public ::testing::TestWithParam<int> {};

TEST_P(GlooGroup, EveryCollectiveEveryDtypeMatchesIndependentValues) {
  expect_all_passed(
      run_group("collectives", GetParam(), milliseconds(60000), milliseconds(240000)));
}

TEST_P(GlooGroup, AsyncOperationsOverlapAndGroupsAreReusable) {
  expect_all_passed(run_group("async", GetParam(), milliseconds(30000), milliseconds(120000)));
}

TEST_P(GlooGroup, SubGroupsFromRankListsRenumberTheirMembers) {
  expect_all_passed(run_group("subgroups", GetParam(), milliseconds(30000), milliseconds(120000)));
}

TEST_P(GlooGroup, InvalidCallsFailWithClearMessagesAndLeaveTheGroupUsable) {
  expect_all_passed(
      run_group("bad_arguments", GetParam(), milliseconds(30000), milliseconds(120000)));
}

INSTANTIATE_TEST_SUITE_P(Ranks, GlooGroup, ::testing::Values(2, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "W" + std::to_string(info.param);
                         });

// Survivors must fail (exit code 3 = CommError) with a message naming the group, the operation
// and the culprit. `marker` finds the time the worker reports: "failed after N ms" (measured
// from the start of the operation) or "COMM ERROR after N ms" (from the start of the process).
void expect_failed_naming(const RankResult& result, int rank, const std::string& needle,
                          const std::string& marker, milliseconds bound) {
  EXPECT_TRUE(result.status.exited && result.status.code == 3)
      << "rank " << rank << ": " << result.status.describe() << "\n"
      << result.output;
  long long took = ms_after(result.output, marker);
  EXPECT_GE(took, 0) << "rank " << rank << " reported no time:\n" << result.output;
  EXPECT_LE(took, bound.count()) << "rank " << rank << " took too long:\n" << result.output;
  EXPECT_NE(result.output.find("group 'world'"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find(needle), std::string::npos)
      << "rank " << rank << " should mention '" << needle << "':\n"
      << result.output;
}

TEST(GlooFailures, PeerKilledMidCollectiveIsNamedBySurvivors) {
  const milliseconds timeout(5000);
  auto results = run_group("kill_last", 4, timeout, milliseconds(60000));
  EXPECT_EQ(results[3].status.signal, SIGKILL) << results[3].status.describe();
  for (int r = 0; r < 3; ++r) {
    expect_failed_naming(results[static_cast<size_t>(r)], r, "all_reduce(avg)", "failed after",
                         timeout);
    const std::string& out = results[static_cast<size_t>(r)].output;
    EXPECT_TRUE(out.find("Rank(s) 3 exited") != std::string::npos ||
                out.find("Rank(s) 2, 3 exited") != std::string::npos)
        << "rank " << r << " does not name rank 3 as exited:\n"
        << out;
  }
}

TEST(GlooFailures, DeathOfTheStoreHostIsReported) {
  const milliseconds timeout(5000);
  auto results = run_group("kill_first", 4, timeout, milliseconds(60000));
  EXPECT_EQ(results[0].status.signal, SIGKILL) << results[0].status.describe();
  for (int r = 1; r < 4; ++r) {
    expect_failed_naming(results[static_cast<size_t>(r)], r, "rendezvous store is unreachable",
                         "failed after", timeout);
  }
}

TEST(GlooFailures, PeerThatStopsTakingPartTimesOutNamingIt) {
  const milliseconds timeout(4000);
  // Rank 3 sleeps instead of joining the second all_reduce.
  auto results = run_group("hung_peer", 4, timeout, milliseconds(60000));
  for (int r = 0; r < 3; ++r) {
    expect_failed_naming(results[static_cast<size_t>(r)], r, "Rank(s) 3 are alive but",
                         "failed after", timeout);
    EXPECT_NE(results[static_cast<size_t>(r)].output.find("Timed out"), std::string::npos);
  }
}

TEST(GlooFailures, PeerThatNeverArrivesIsNamedAtRendezvous) {
  const milliseconds timeout(3000);
  auto results = run_group("absent_peer", 4, timeout, milliseconds(30000), /*absent=*/{3});
  for (int r = 0; r < 3; ++r) {
    // Rendezvous starts with the process, so allow for start-up on a loaded machine.
    expect_failed_naming(results[static_cast<size_t>(r)], r, "rank(s) 3 of 4 never arrived",
                         "COMM ERROR after", timeout + milliseconds(2000));
  }
}

// --- large broadcasts: ranks forked from this test, each running a function of this file ---

using Clock = std::chrono::steady_clock;

// The body of one rank; `check` reports a failed expectation (the rank then exits 1).
using RankBody =
    std::function<void(comm::Communicator&, const std::function<void(bool, const std::string&)>&)>;

// One rank in a forked child: forms group 'world' through a store hosted by rank 0, runs `body`,
// and exits like comm_worker: 0 passed, 1 a check failed, 3 a CommError ("COMM ERROR after N ms:
// ..." on stderr, timed from the start of the process).
[[noreturn]] void run_forked_rank(int rank, int world, int port, milliseconds timeout,
                                  const std::string& log, const RankBody& body) {
  int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ::dup2(fd, STDOUT_FILENO);
  ::dup2(fd, STDERR_FILENO);
  ::close(fd);
  at::set_num_threads(1);
  const auto start = Clock::now();
  int failures = 0;
  auto check = [&](bool ok, const std::string& what) {
    if (ok) return;
    std::cerr << "CHECK FAILED: " << what << std::endl;
    ++failures;
  };
  // Outlive the error report below, which may still use the store.
  std::shared_ptr<comm::TcpStore> store;
  std::shared_ptr<comm::Communicator> group;
  try {
    store = std::make_shared<comm::TcpStore>("127.0.0.1", port, rank, rank == 0, timeout);
    group = comm::make_gloo_communicator(store, rank, world, "world", timeout);
    body(*group, check);
    group->barrier();  // rank 0 hosts the store: keep it up until everyone is done
  } catch (const comm::CommError& e) {
    auto ms = std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
    std::cerr << "COMM ERROR after " << ms << " ms: " << e.what() << std::endl;
    // The store host lingers so the other survivors can still diagnose through it.
    if (rank == 0) std::this_thread::sleep_for(std::chrono::seconds(1));
    std::_Exit(3);  // do not wait for threads stuck on a dead group
  } catch (const std::exception& e) {
    std::cerr << "UNEXPECTED ERROR: " << e.what() << std::endl;
    std::_Exit(2);
  }
  std::cout << "rank " << rank << (failures ? " failed" : " passed") << std::endl;
  std::_Exit(failures ? 1 : 0);
}

// Runs `body` on `world` ranks, each a child forked from this (single-threaded) test process.
std::vector<RankResult> run_forked_group(const std::string& scenario, int world,
                                         milliseconds timeout, milliseconds limit,
                                         const RankBody& body) {
  const std::string dir = testing::make_temp_dir("comm-" + scenario);
  const int port = testing::pick_free_port();
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) run_forked_rank(r, world, port, timeout, dir + "/rank" + std::to_string(r), body);
    pids.push_back(pid);
  }
  const auto deadline = Clock::now() + limit;
  std::vector<RankResult> results(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    RankResult& result = results[static_cast<size_t>(r)];
    result.status = testing::wait_for_exit(pids[static_cast<size_t>(r)], deadline);
    std::ifstream in(dir + "/rank" + std::to_string(r));
    std::stringstream text;
    text << in.rdbuf();
    result.output = text.str();
  }
  return results;
}

// Bytes no shift or swap of chunks could reproduce: a hash of the offset, different per root.
at::Tensor broadcast_pattern(int64_t bytes, int root) {
  at::Tensor t = at::empty({bytes}, at::kByte);
  uint8_t* p = t.data_ptr<uint8_t>();
  for (int64_t i = 0; i < bytes; ++i) {
    uint64_t x = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(root);
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    p[i] = static_cast<uint8_t>(x >> 56);
  }
  return t;
}

// Sizes that no power-of-two chunk divides, one exactly 4 MiB, one byte-sized element type.
struct BroadcastCase {
  int64_t numel;
  at::ScalarType dtype;
};
const std::vector<BroadcastCase> kLargeBroadcasts = {
    {(9 << 20) + 4097, at::kByte}, {(4 << 20) / 4, at::kFloat}, {(5 << 20) / 8 + 3, at::kDouble}};

class GlooLargeBroadcast : public ::testing::TestWithParam<int> {};

// Every root, including non-zero ones, so the chain wraps around; every rank compares every byte
// with the pattern it computes itself. Then broadcasts from two roots and an all_reduce queued
// at once complete in order with the right bytes.
TEST_P(GlooLargeBroadcast, EveryRankGetsTheRootsBytes) {
  const int world = GetParam();
  auto results = run_forked_group(
      "large_broadcast", world, milliseconds(30000), milliseconds(120000),
      [](comm::Communicator& group, const std::function<void(bool, const std::string&)>& check) {
        const int W = group.size(), R = group.rank();
        auto bytes_of = [](const at::Tensor& t) {
          return at::from_blob(t.data_ptr(), {static_cast<int64_t>(t.nbytes())}, at::kByte);
        };
        // Each rank starts from its own pattern, so a rank the bytes never reach is caught.
        auto filled = [&](const BroadcastCase& c, int seed) {
          at::Tensor t = at::empty({c.numel}, c.dtype);
          bytes_of(t).copy_(broadcast_pattern(static_cast<int64_t>(t.nbytes()), seed));
          return t;
        };
        auto expect_root_bytes = [&](const at::Tensor& t, int root, const std::string& what) {
          at::Tensor want = broadcast_pattern(static_cast<int64_t>(t.nbytes()), root);
          at::Tensor differs = bytes_of(t).ne(want).nonzero();
          check(differs.numel() == 0,
                what + ": " + std::to_string(differs.numel()) + " bytes differ from root " +
                    std::to_string(root) + "'s, first at byte " +
                    (differs.numel() ? std::to_string(differs[0].item<int64_t>()) : "-"));
        };
        for (const auto& c : kLargeBroadcasts) {
          for (int root = 0; root < W; ++root) {
            at::Tensor t = filled(c, R == root ? root : 100 + R);
            group.broadcast(t, root);
            expect_root_bytes(t, root,
                              "broadcast of " + std::to_string(t.nbytes()) + " bytes from root " +
                                  std::to_string(root));
          }
        }
        const auto& c = kLargeBroadcasts[0];
        at::Tensor first = filled(c, R == 0 ? 0 : 100 + R);
        at::Tensor second = filled(c, R == W - 1 ? W - 1 : 100 + R);
        at::Tensor ones = at::ones({5});
        auto a = group.broadcast_async(first, 0);
        auto b = group.all_reduce_async(ones, comm::ReduceOp::SUM);
        auto d = group.broadcast_async(second, W - 1);
        d->wait();
        b->wait();
        a->wait();
        expect_root_bytes(first, 0, "queued broadcast from root 0");
        expect_root_bytes(second, W - 1, "queued broadcast from the last rank");
        check(ones[4].item<double>() == W, "all_reduce queued between broadcasts");
      });
  expect_all_passed(results);
}

INSTANTIATE_TEST_SUITE_P(Ranks, GlooLargeBroadcast, ::testing::Values(2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "W" + std::to_string(info.param);
                         });

// The last rank of the chain, which never talks to the root, dies while large broadcasts run:
// its predecessor and the root both fail within the timeout, naming it.
TEST(GlooFailures, ReceiverKilledMidBroadcastIsNamedByTheRoot) {
  const milliseconds timeout(3000);
  auto results = run_forked_group(
      "broadcast_kill", 3, timeout, milliseconds(30000),
      [](comm::Communicator& group, const std::function<void(bool, const std::string&)>&) {
        at::Tensor big = at::ones({16 << 20}, at::kByte);
        if (group.rank() == 2) {
          std::thread([] {
            std::this_thread::sleep_for(milliseconds(300));
            ::raise(SIGKILL);
          }).detach();
        }
        for (int i = 0; i < 100000; ++i) group.broadcast(big, 0);
      });
  EXPECT_EQ(results[2].status.signal, SIGKILL) << results[2].status.describe();
  for (int r = 0; r < 2; ++r) {
    const RankResult& result = results[static_cast<size_t>(r)];
    expect_failed_naming(result, r, "broadcast(root 0)", "failed after", timeout);
    EXPECT_TRUE(std::regex_search(result.output, std::regex("Rank\\(s\\) ([0-9]+, )*2 exited")))
        << "rank " << r << " does not name rank 2 as exited:\n"
        << result.output;
  }
}

// reduce_scatter fills an output of any shape with its rank's share, a group of one included
// (which copies instead of running the ring).
class GlooReduceScatterShape : public ::testing::TestWithParam<int> {};

TEST_P(GlooReduceScatterShape, ATwoDimensionalOutputGetsItsRanksReducedShare) {
  auto results = run_forked_group(
      "reduce_scatter_shape", GetParam(), milliseconds(30000), milliseconds(60000),
      [](comm::Communicator& group, const std::function<void(bool, const std::string&)>& check) {
        const int W = group.size(), R = group.rank();
        // Rank q contributes q + i at flat index i; rank r's share is indices [6r, 6r + 6).
        at::Tensor input = at::arange(6 * W, at::kFloat) + R;
        at::Tensor output = at::empty({2, 3}, at::kFloat);
        group.reduce_scatter(output, input, comm::ReduceOp::SUM);
        at::Tensor want =
            (at::arange(6 * R, 6 * R + 6, at::kFloat) * W + W * (W - 1) / 2.0).view({2, 3});
        check(output.equal(want), "rank " + std::to_string(R) + " of " + std::to_string(W) +
                                      " got a wrong share of the reduce_scatter");
      });
  expect_all_passed(results);
}

INSTANTIATE_TEST_SUITE_P(Ranks, GlooReduceScatterShape, ::testing::Values(1, 2));

}  // namespace gloo_communicator_test
}  // namespace ooze
