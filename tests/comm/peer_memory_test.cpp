// Reading peers' memory on one host (comm/peer_memory.h) between forked ranks: a group on this
// machine agrees to use it, every rank reads the bytes its peers hold, and a read that cannot
// succeed fails naming the peer.
#include "comm/peer_memory.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "comm/comm_error.h"
#include "comm/store.h"
#include "tests/support/rank_group.h"

namespace ooze {
namespace {

using std::chrono::milliseconds;

// Rank r's bytes: no two ranks' agree at any offset.
std::vector<uint8_t> pattern_of(int rank, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(i * 7 + 31 * rank + 1);
  return out;
}

TEST(PeerMemory, RanksOnThisHostReadEachOthersBytes) {
  const int world = 3;
  auto run = testing::run_forked_ranks(world, [](const testing::RankContext& rank) {
    comm::PrefixStore store("peer_memory_test", rank.store);
    std::string why_not;
    auto peers =
        comm::PeerMemory::connect(store, rank.rank, rank.world, milliseconds(30000), &why_not);
    rank.check(peers != nullptr, "ranks forked on one machine may not read each other: " + why_not);
    if (!peers) return;
    // Each rank publishes where its bytes are; every rank reads every peer's, across pages.
    const size_t bytes = (3 << 20) + 123;
    const std::vector<uint8_t> mine = pattern_of(rank.rank, bytes);
    at::Tensor addresses = at::empty({rank.world}, at::kLong);
    rank.group->all_gather(
        addresses,
        at::full({1}, static_cast<int64_t>(reinterpret_cast<uintptr_t>(mine.data())), at::kLong));
    for (int peer = 0; peer < rank.world; ++peer) {
      if (peer == rank.rank) continue;
      std::vector<uint8_t> got(bytes);
      peers->read(peer, static_cast<uint64_t>(addresses[peer].item<int64_t>()), got.data(), bytes);
      rank.check(
          got == pattern_of(peer, bytes),
          "rank " + std::to_string(peer) + "'s bytes as read by rank " + std::to_string(rank.rank));
    }
    // An address the peer has not mapped: the error names the peer and the system's reason.
    const int next = (rank.rank + 1) % rank.world;
    uint64_t word = 0;
    try {
      peers->read(next, 8, &word, sizeof(word));
      rank.check(false, "reading an unmapped address of a peer succeeded");
    } catch (const comm::CommError& e) {
      const std::string text = e.what();
      rank.check(text.find("rank " + std::to_string(next)) != std::string::npos &&
                     text.find("Bad address") != std::string::npos,
                 "the error of an unmapped read should name the rank and the reason: " + text);
    }
    rank.group->barrier();  // nobody frees its bytes while a peer reads them
  });
  EXPECT_TRUE(run.all_passed()) << run.failures();
}

TEST(PeerMemory, AGroupOfOneHasNoPeersToRead) {
  auto run = testing::run_forked_ranks(1, [](const testing::RankContext& rank) {
    comm::PrefixStore store("peer_memory_test", rank.store);
    std::string why_not;
    auto peers = comm::PeerMemory::connect(store, 0, 1, milliseconds(1000), &why_not);
    rank.check(peers == nullptr, "a group of one connected to peers");
    rank.check(why_not.find("no peers") != std::string::npos, "why not: " + why_not);
  });
  EXPECT_TRUE(run.all_passed()) << run.failures();
}

}  // namespace
}  // namespace ooze
