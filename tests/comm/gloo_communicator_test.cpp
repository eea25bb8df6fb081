// Multi-process tests of the Gloo backend: real processes on loopback, 2 to 4 ranks (each a
// tests/comm/comm_worker.cpp, or forked from this test for the large broadcasts; both through
// tests/support/rank_group.h), checked against values the ranks compute independently.
#include "comm/gloo_communicator.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/comm_error.h"
#include "core/shared_memory_segment.h"
#include "tests/support/rank_group.h"

namespace ooze {
namespace gloo_communicator_test {

using std::chrono::milliseconds;
using testing::RankOutcome;

// The first number N in "<marker> N ms" within `text`, or -1.
long long ms_after(const std::string& text, const std::string& marker) {
  std::smatch match;
  if (!std::regex_search(text, match, std::regex(marker + " ([0-9]+) ms"))) return -1;
  return std::stoll(match[1].str());
}

// Runs `scenario` of comm_worker on ranks [0, world) except those in `absent`, the whole group
// within `limit`; returns how each rank ended.
std::vector<RankOutcome> run_group(const std::string& scenario, int world, milliseconds timeout,
                                   milliseconds limit, std::vector<int> absent = {}) {
  testing::RankProcessOptions options;
  options.deadline = limit;
  options.absent_ranks = std::move(absent);
  return testing::run_rank_processes(
             world,
             [&](int rank, int port) {
               return std::vector<std::string>{testing::build_path("tests/comm/comm_worker"),
                                               scenario,
                                               std::to_string(rank),
                                               std::to_string(world),
                                               std::to_string(port),
                                               std::to_string(timeout.count())};
             },
             options)
      .ranks;
}

void expect_all_passed(const std::vector<RankOutcome>& results) {
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_TRUE(results[r].passed()) << "rank " << r << ": " << results[r].describe() << "\n"
                                     << results[r].log;
  }
}

class GlooGroup : public ::testing::TestWithParam<int> {};

TEST_P(GlooGroup, EveryCollectiveEveryDtypeMatchesIndependentValues) {
  expect_all_passed(
      run_group("collectives", GetParam(), milliseconds(60000), milliseconds(240000)));
}

TEST_P(GlooGroup, EveryCollectiveEveryDtypeMatchesIndependentValuesOverLoopbackTcp) {
  expect_all_passed(
      run_group("collectives_tcp", GetParam(), milliseconds(60000), milliseconds(240000)));
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
void expect_failed_naming(const RankOutcome& result, int rank, const std::string& needle,
                          const std::string& marker, milliseconds bound) {
  EXPECT_TRUE(result.status.exited && result.status.code == 3)
      << "rank " << rank << ": " << result.status.describe() << "\n"
      << result.log;
  long long took = ms_after(result.log, marker);
  EXPECT_GE(took, 0) << "rank " << rank << " reported no time:\n" << result.log;
  EXPECT_LE(took, bound.count()) << "rank " << rank << " took too long:\n" << result.log;
  EXPECT_NE(result.log.find("group 'world'"), std::string::npos) << result.log;
  EXPECT_NE(result.log.find(needle), std::string::npos)
      << "rank " << rank << " should mention '" << needle << "':\n"
      << result.log;
}

TEST(GlooFailures, PeerKilledMidCollectiveIsNamedBySurvivors) {
  const milliseconds timeout(5000);
  auto results = run_group("kill_last", 4, timeout, milliseconds(60000));
  EXPECT_EQ(results[3].status.signal, SIGKILL) << results[3].status.describe();
  for (int r = 0; r < 3; ++r) {
    expect_failed_naming(results[static_cast<size_t>(r)], r, "all_reduce(avg)", "failed after",
                         timeout);
    const std::string& out = results[static_cast<size_t>(r)].log;
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
    EXPECT_NE(results[static_cast<size_t>(r)].log.find("Timed out"), std::string::npos);
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

using Check = std::function<void(bool, const std::string&)>;

// Runs `body` on `world` ranks forked from this test (tests/support/rank_group.h), which exit
// like comm_worker: 0 passed, 1 a check failed, 3 a CommError ("COMM ERROR after N ms: ...").
std::vector<RankOutcome> run_forked_group(
    int world, milliseconds timeout, milliseconds limit,
    const std::function<void(comm::Communicator&, const Check&)>& body,
    comm::SameHostPath same_host_path = comm::SameHostPath::kWhenPossible) {
  testing::ForkedRanksOptions options;
  options.collective_timeout = timeout;
  options.deadline = limit;
  options.same_host_path = same_host_path;
  return testing::run_forked_ranks(
             world, [&](const testing::RankContext& rank) { body(*rank.group, rank.check); },
             options)
      .ranks;
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

// Ranks on one host read the root's memory; over TCP large broadcasts go down a chain.
class GlooLargeBroadcast : public ::testing::TestWithParam<std::tuple<int, comm::SameHostPath>> {};

// Every root, including non-zero ones, so the chain wraps around; every rank compares every byte
// with the pattern it computes itself. Then broadcasts from two roots and an all_reduce queued
// at once complete in order with the right bytes.
TEST_P(GlooLargeBroadcast, EveryRankGetsTheRootsBytes) {
  const auto [world, same_host_path] = GetParam();
  auto results = run_forked_group(
      world, milliseconds(30000), milliseconds(120000),
      [](comm::Communicator& group, const Check& check) {
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
      },
      same_host_path);
  expect_all_passed(results);
}

INSTANTIATE_TEST_SUITE_P(
    Ranks, GlooLargeBroadcast,
    ::testing::Combine(::testing::Values(2, 3, 4),
                       ::testing::Values(comm::SameHostPath::kWhenPossible,
                                         comm::SameHostPath::kOff)),
    [](const ::testing::TestParamInfo<std::tuple<int, comm::SameHostPath>>& info) {
      return "W" + std::to_string(std::get<0>(info.param)) +
             (std::get<1>(info.param) == comm::SameHostPath::kOff ? "Tcp" : "SameHost");
    });

// Rank 2 of 3 kills itself 300 ms into a loop of large broadcasts from `root`: ranks 0 and 1
// must fail within the timeout, naming the broadcast and rank 2 as exited.
void expect_death_in_broadcasts_named(int root, int64_t bytes, comm::SameHostPath same_host_path) {
  const milliseconds timeout(3000);
  auto results = run_forked_group(
      3, timeout, milliseconds(30000),
      [&](comm::Communicator& group, const Check&) {
        at::Tensor big = at::ones({bytes}, at::kByte);
        if (group.rank() == 2) {
          std::thread([] {
            std::this_thread::sleep_for(milliseconds(300));
            ::raise(SIGKILL);
          }).detach();
        }
        for (int i = 0; i < 100000; ++i) group.broadcast(big, root);
      },
      same_host_path);
  EXPECT_EQ(results[2].status.signal, SIGKILL) << results[2].status.describe();
  const std::string what = "broadcast(root " + std::to_string(root) + ")";
  for (int r = 0; r < 2; ++r) {
    const RankOutcome& result = results[static_cast<size_t>(r)];
    expect_failed_naming(result, r, what, "failed after", timeout);
    EXPECT_TRUE(std::regex_search(result.log, std::regex("Rank\\(s\\) ([0-9]+, )*2 exited")))
        << "rank " << r << " does not name rank 2 as exited:\n"
        << result.log;
  }
}

// Over TCP: the last rank of the chain, which never talks to the root, dies: its predecessor
// and the root both name it.
TEST(GlooFailures, ReceiverKilledMidBroadcastIsNamedByTheRoot) {
  expect_death_in_broadcasts_named(/*root=*/0, 16 << 20, comm::SameHostPath::kOff);
}

// On one host the readers copy from the root's memory (and the root writes into theirs): when
// the root dies, both readers name it.
TEST(GlooFailures, RootKilledMidSameHostBroadcastIsNamedByItsReaders) {
  expect_death_in_broadcasts_named(/*root=*/2, 64 << 20, comm::SameHostPath::kWhenPossible);
}

// reduce_scatter fills an output of any shape with its rank's share, a group of one included
// (which copies instead of running the ring).
class GlooReduceScatterShape : public ::testing::TestWithParam<int> {};

TEST_P(GlooReduceScatterShape, ATwoDimensionalOutputGetsItsRanksReducedShare) {
  auto results = run_forked_group(
      GetParam(), milliseconds(30000), milliseconds(60000),
      [](comm::Communicator& group, const Check& check) {
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

// --- tensors in unnamed shared memory segments: peers map them and copy as from their own ---

// A tensor inside an unnamed segment, a page and a line past the segment's start, so that a
// reader that confused the two would read the wrong bytes.
at::Tensor in_segment(int64_t numel, at::ScalarType dtype) {
  constexpr int64_t kOffset = 4096 + 64;
  const int64_t bytes = numel * static_cast<int64_t>(c10::elementSize(dtype));
  return empty_for_same_host_peers(kOffset + bytes).narrow(0, kOffset, bytes).view(dtype);
}

// The inodes of the shared memory files this process maps (the fifth field of /proc/self/maps).
std::set<uint64_t> mapped_shared_memory_inodes() {
  std::ifstream maps("/proc/self/maps");
  std::set<uint64_t> inodes;
  for (std::string line; std::getline(maps, line);) {
    if (line.find("memfd:") == std::string::npos) continue;
    std::istringstream fields(line);
    std::string range, mode, offset, device;
    uint64_t inode = 0;
    fields >> range >> mode >> offset >> device >> inode;
    inodes.insert(inode);
  }
  return inodes;
}

// Whether each rank puts its tensors in segments: all of them, or every other one, so that one
// operation mixes peers read through a mapping with peers read through the kernel.
enum class SegmentRanks { kAll, kEven };

class GlooSegmentTensors : public ::testing::TestWithParam<std::tuple<int, SegmentRanks>> {};

// Every collective of the same-host path on tensors in segments, against values each rank
// computes itself; then the mapping itself: a reader maps the root's segment, and drops it once
// the root has let it go and broadcasts from a new one.
TEST_P(GlooSegmentTensors, PeersReadThemThroughMappingsAndGetTheRightValues) {
  const auto [world, segment_ranks] = GetParam();
  auto results = run_forked_group(
      world, milliseconds(30000), milliseconds(120000),
      [segment_ranks = segment_ranks](comm::Communicator& group, const Check& check) {
        const int W = group.size(), R = group.rank();
        const bool mine_in_segment = segment_ranks == SegmentRanks::kAll || R % 2 == 0;
        auto make = [&](int64_t numel, at::ScalarType dtype) {
          return mine_in_segment ? in_segment(numel, dtype) : at::empty({numel}, dtype);
        };
        // Integers in floats: every sum over the ranks is exact.
        auto values = [](int rank, int64_t n) {
          return (at::arange(n, at::kFloat) * 7 + rank * 3).remainder(101);
        };
        const int64_t n = (1 << 20) + 5;  // 4 MiB and a bit: over the same-host threshold

        for (int root = 0; root < W; ++root) {
          at::Tensor t = make(3 * n, at::kByte);
          t.copy_(broadcast_pattern(t.numel(), R == root ? root : 100 + R));
          group.broadcast(t, root);
          check(t.equal(broadcast_pattern(t.numel(), root)),
                "broadcast from root " + std::to_string(root) + " differs from its bytes");
        }

        at::Tensor input = make(n, at::kFloat);
        input.copy_(values(R, n));
        at::Tensor gathered = make(W * n, at::kFloat);
        group.all_gather(gathered, input);
        at::Tensor in_place = make(W * n, at::kFloat);
        in_place.narrow(0, R * n, n).copy_(values(R, n));
        group.all_gather(in_place, in_place.narrow(0, R * n, n));
        for (int r = 0; r < W; ++r) {
          check(gathered.narrow(0, r * n, n).equal(values(r, n)),
                "all_gather: rank " + std::to_string(r) + "'s slot differs");
          check(in_place.narrow(0, r * n, n).equal(values(r, n)),
                "all_gather in place: rank " + std::to_string(r) + "'s slot differs");
        }

        at::Tensor full = make(W * n, at::kFloat);
        full.copy_(values(R, W * n));
        at::Tensor sum = values(0, W * n);
        for (int r = 1; r < W; ++r) sum += values(r, W * n);
        at::Tensor share = make(n, at::kFloat);
        group.reduce_scatter(share, full, comm::ReduceOp::SUM);
        check(share.equal(sum.narrow(0, R * n, n)), "reduce_scatter: the share differs");
        group.all_reduce(full, comm::ReduceOp::SUM);
        check(full.equal(sum), "all_reduce: the sum differs");

        if (segment_ranks != SegmentRanks::kAll) return;
        // The root's segment is mapped here; once the root lets it go and broadcasts from a new
        // one, the old mapping is dropped and the new bytes arrive.
        uint64_t previous = 0;
        for (int round = 0; round < 2; ++round) {
          at::Tensor source = in_segment(n, at::kFloat).fill_(R == 0 ? round + 1 : -1);
          const auto place = find_unnamed_segment(source.data_ptr(), source.nbytes());
          check(place.has_value(), "a tensor in a segment is not found in it");
          if (!place) return;
          at::Tensor inode = at::full({1}, static_cast<int64_t>(place->inode), at::kLong);
          group.broadcast(inode, 0);
          group.broadcast(source, 0);
          check(source.eq(round + 1).all().item<bool>(),
                "round " + std::to_string(round) + ": the root's new bytes did not arrive");
          if (R != 0) {
            const std::set<uint64_t> mapped = mapped_shared_memory_inodes();
            check(mapped.count(static_cast<uint64_t>(inode.item<int64_t>())) == 1,
                  "round " + std::to_string(round) + ": the root's segment is not mapped here");
            check(round == 0 || mapped.count(previous) == 0,
                  "the root's previous segment, let go, is still mapped here");
            previous = static_cast<uint64_t>(inode.item<int64_t>());
          }
          group.barrier();  // the root lets its segment go only after every reader is done
        }
      });
  expect_all_passed(results);
}

INSTANTIATE_TEST_SUITE_P(Ranks, GlooSegmentTensors,
                         ::testing::Combine(::testing::Values(2, 3),
                                            ::testing::Values(SegmentRanks::kAll,
                                                              SegmentRanks::kEven)),
                         [](const ::testing::TestParamInfo<std::tuple<int, SegmentRanks>>& info) {
                           return "W" + std::to_string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) == SegmentRanks::kAll ? "AllRanks"
                                                                                 : "EvenRanks");
                         });

}  // namespace gloo_communicator_test
}  // namespace ooze
