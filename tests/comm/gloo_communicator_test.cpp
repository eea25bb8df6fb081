// Multi-process tests of the Gloo backend: real processes (tests/comm/comm_worker.cpp) on
// loopback, 2 and 4 ranks, checked against values the workers compute independently.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <regex>
#include <string>
#include <vector>

#include "tests/support/process.h"

namespace ooze {
namespace {

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

}  // namespace
}  // namespace ooze
