#include "engine/block_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "core/error.h"

namespace ooze::engine {
namespace block_manager_test {

std::vector<int64_t> iota_tokens(int64_t count, int64_t first = 0) {
  std::vector<int64_t> tokens(static_cast<size_t>(count));
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

std::vector<int64_t> concat(std::vector<int64_t> a, const std::vector<int64_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A sequence whose prompt is computed from scratch and offered to the cache.
BlockTable computed(BlockManager& manager, const std::vector<int64_t>& tokens) {
  BlockTable table;
  std::vector<BlockCopy> copies;
  EXPECT_TRUE(manager.append(table, static_cast<int64_t>(tokens.size()), copies));
  EXPECT_TRUE(copies.empty());
  manager.register_full_blocks(table, tokens);
  return table;
}

TEST(BlockManagerTest, RejectsEmptyPoolOrBlocks) {
  EXPECT_THROW(BlockManager(0, 16, true), Error);
  EXPECT_THROW(BlockManager(4, 0, true), Error);
}

TEST(BlockManagerTest, AppendTakesBlocksAtBoundaries) {
  BlockManager manager(8, 4, false);
  BlockTable table;
  std::vector<BlockCopy> copies;
  EXPECT_EQ(manager.blocks_needed(table, 1), 1);
  ASSERT_TRUE(manager.append(table, 1, copies));
  EXPECT_EQ(table.blocks.size(), 1u);
  EXPECT_EQ(manager.blocks_needed(table, 3), 0);  // fills block 0 exactly
  ASSERT_TRUE(manager.append(table, 3, copies));
  EXPECT_EQ(table.blocks.size(), 1u);
  EXPECT_EQ(table.num_tokens, 4);
  EXPECT_EQ(manager.blocks_needed(table, 1), 1);
  EXPECT_EQ(manager.blocks_needed(table, 9), 3);  // positions 4..12 span blocks 1, 2, 3
  ASSERT_TRUE(manager.append(table, 9, copies));
  EXPECT_EQ(table.blocks.size(), 4u);
  EXPECT_EQ(table.num_tokens, 13);
  EXPECT_EQ(manager.num_free_blocks(), 4);
  EXPECT_EQ(manager.blocks_needed(table, 0), 0);
  ASSERT_TRUE(manager.append(table, 0, copies));
  EXPECT_EQ(table.num_tokens, 13);
  EXPECT_TRUE(copies.empty());
  std::set<int64_t> distinct(table.blocks.begin(), table.blocks.end());
  EXPECT_EQ(distinct.size(), 4u);
  for (int64_t block : table.blocks) EXPECT_EQ(manager.ref_count(block), 1);

  manager.free(table);
  EXPECT_TRUE(table.blocks.empty());
  EXPECT_EQ(table.num_tokens, 0);
  EXPECT_EQ(manager.num_free_blocks(), 8);
  for (int64_t block = 0; block < 8; ++block) EXPECT_EQ(manager.ref_count(block), 0);
}

TEST(BlockManagerTest, AppendIsAllOrNothing) {
  BlockManager manager(3, 4, false);
  BlockTable a;
  BlockTable b;
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(manager.append(a, 6, copies));  // 2 blocks
  EXPECT_EQ(manager.num_free_blocks(), 1);
  EXPECT_EQ(manager.blocks_needed(b, 5), 2);
  EXPECT_FALSE(manager.append(b, 5, copies));
  EXPECT_TRUE(b.blocks.empty());
  EXPECT_EQ(b.num_tokens, 0);
  EXPECT_EQ(manager.num_free_blocks(), 1);
  EXPECT_FALSE(manager.append(a, 7, copies));  // needs blocks 2 and 3
  EXPECT_EQ(a.blocks.size(), 2u);
  EXPECT_EQ(a.num_tokens, 6);
  ASSERT_TRUE(manager.append(a, 6, copies));  // exactly the last block
  EXPECT_EQ(manager.num_free_blocks(), 0);
  EXPECT_FALSE(manager.append(a, 1, copies));
  EXPECT_EQ(a.num_tokens, 12);
  EXPECT_THROW(manager.append(a, -1, copies), Error);
}

TEST(BlockManagerTest, ForksOfAFullPromptShareEveryBlock) {
  BlockManager manager(64, 16, true);
  BlockTable prompt = computed(manager, iota_tokens(512));
  ASSERT_EQ(prompt.blocks.size(), 32u);
  std::vector<BlockTable> samples{prompt};
  for (int i = 1; i < 8; ++i) samples.push_back(manager.fork(prompt));
  EXPECT_EQ(manager.num_free_blocks(), 64 - 32);
  for (int64_t block : prompt.blocks) EXPECT_EQ(manager.ref_count(block), 8);

  // The prompt ends on a block boundary: each first token opens a private block, no copy.
  std::vector<BlockCopy> copies;
  for (BlockTable& sample : samples) {
    EXPECT_EQ(manager.blocks_needed(sample, 1), 1);
    ASSERT_TRUE(manager.append(sample, 1, copies));
    EXPECT_EQ(sample.blocks.size(), 33u);
    EXPECT_EQ(manager.ref_count(sample.blocks.back()), 1);
  }
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(manager.num_free_blocks(), 64 - 40);
  for (int64_t block : prompt.blocks) EXPECT_EQ(manager.ref_count(block), 8);
  for (BlockTable& sample : samples) manager.free(sample);
  EXPECT_EQ(manager.num_free_blocks(), 64);
}

TEST(BlockManagerTest, ForksCopyASharedPartlyFilledBlockOnFirstWrite) {
  BlockManager manager(64, 16, true);
  BlockTable prompt = computed(manager, iota_tokens(500));  // 31 full blocks + 4 tokens
  ASSERT_EQ(prompt.blocks.size(), 32u);
  const int64_t partial = prompt.blocks.back();
  std::vector<BlockTable> samples{prompt};
  for (int i = 1; i < 8; ++i) samples.push_back(manager.fork(prompt));
  EXPECT_EQ(manager.ref_count(partial), 8);
  EXPECT_EQ(manager.num_free_blocks(), 32);

  // While others share the partial block, the first token needs a private copy of it; the
  // last holder writes in place.
  std::set<int64_t> copies_made;
  for (size_t i = 0; i < samples.size(); ++i) {
    BlockTable& sample = samples[i];
    const bool shared = i + 1 < samples.size();
    EXPECT_EQ(manager.ref_count(partial), static_cast<int64_t>(samples.size() - i));
    EXPECT_EQ(manager.blocks_needed(sample, 1), shared ? 1 : 0);
    std::vector<BlockCopy> copies;
    const int64_t free_before = manager.num_free_blocks();
    ASSERT_TRUE(manager.append(sample, 1, copies));
    EXPECT_EQ(sample.num_tokens, 501);
    EXPECT_EQ(sample.blocks.size(), 32u);
    if (shared) {
      ASSERT_EQ(copies.size(), 1u);
      EXPECT_EQ(copies[0].source, partial);
      EXPECT_EQ(copies[0].destination, sample.blocks.back());
      EXPECT_NE(sample.blocks.back(), partial);
      EXPECT_EQ(manager.ref_count(sample.blocks.back()), 1);
      copies_made.insert(sample.blocks.back());
      EXPECT_EQ(manager.num_free_blocks(), free_before - 1);
    } else {
      EXPECT_TRUE(copies.empty());
      EXPECT_EQ(sample.blocks.back(), partial);
      EXPECT_EQ(manager.num_free_blocks(), free_before);
    }
    // The full blocks stay shared by all eight.
    EXPECT_EQ(manager.ref_count(sample.blocks.front()), 8);
    // A second token goes into the now private block.
    std::vector<BlockCopy> more;
    EXPECT_EQ(manager.blocks_needed(sample, 1), 0);
    ASSERT_TRUE(manager.append(sample, 1, more));
    EXPECT_TRUE(more.empty());
  }
  EXPECT_EQ(copies_made.size(), 7u);
  EXPECT_EQ(manager.ref_count(partial), 1);
  EXPECT_EQ(manager.num_free_blocks(), 64 - 32 - 7);
}

TEST(BlockManagerTest, CopyOnWriteNeedsAFreeBlockToo) {
  BlockManager manager(2, 4, false);
  BlockTable a;
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(manager.append(a, 6, copies));
  BlockTable b = manager.fork(a);
  EXPECT_EQ(manager.blocks_needed(b, 1), 1);
  EXPECT_FALSE(manager.append(b, 1, copies));
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(b.num_tokens, 6);
  EXPECT_EQ(b.blocks, a.blocks);
  EXPECT_EQ(manager.ref_count(a.blocks[1]), 2);
  manager.free(a);
  ASSERT_TRUE(manager.append(b, 1, copies));  // alone now: writes in place
  EXPECT_TRUE(copies.empty());
}

TEST(BlockManagerTest, PrefixCacheHitAfterFree) {
  BlockManager manager(16, 16, true);
  const std::vector<int64_t> prompt = iota_tokens(40);  // blocks [0,16) [16,32) + 8 tokens
  BlockTable first = computed(manager, prompt);
  EXPECT_EQ(manager.num_cached_blocks(), 2);  // the partial block is not offered
  EXPECT_EQ(first.registered, 2);
  const std::vector<int64_t> blocks = first.blocks;
  manager.free(first);
  EXPECT_EQ(manager.num_free_blocks(), 16);  // cached blocks no one holds are free
  EXPECT_EQ(manager.num_cached_blocks(), 2);

  BlockTable again;
  EXPECT_EQ(manager.match_prefix(again, prompt), 32);
  EXPECT_EQ(again.num_tokens, 32);
  EXPECT_EQ(again.registered, 2);
  EXPECT_EQ(again.blocks, std::vector<int64_t>(blocks.begin(), blocks.begin() + 2));
  EXPECT_EQ(manager.ref_count(blocks[0]), 1);
  EXPECT_EQ(manager.num_free_blocks(), 14);

  // Another sequence sharing the prefix takes the same blocks.
  BlockTable other;
  EXPECT_EQ(manager.match_prefix(other, concat(iota_tokens(32), {7, 7, 7})), 32);
  EXPECT_EQ(other.blocks, again.blocks);
  EXPECT_EQ(manager.ref_count(blocks[1]), 2);
  EXPECT_EQ(manager.num_free_blocks(), 14);

  // The rest of the prompt is computed as usual, and registering re-offers nothing.
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(manager.append(again, 8, copies));
  manager.register_full_blocks(again, prompt);
  EXPECT_EQ(manager.num_cached_blocks(), 2);
  EXPECT_EQ(again.chain_hash, other.chain_hash);
  manager.free(again);
  manager.free(other);
  EXPECT_EQ(manager.num_free_blocks(), 16);
}

TEST(BlockManagerTest, MatchNeverIncludesTheBlockOfTheLastToken) {
  BlockManager manager(8, 16, true);
  BlockTable table = computed(manager, iota_tokens(48));
  EXPECT_EQ(manager.num_cached_blocks(), 3);
  manager.free(table);

  BlockTable exact;
  EXPECT_EQ(manager.match_prefix(exact, iota_tokens(32)), 16);
  EXPECT_EQ(exact.blocks.size(), 1u);
  manager.free(exact);
  BlockTable one_more;
  EXPECT_EQ(manager.match_prefix(one_more, iota_tokens(33)), 32);
  manager.free(one_more);
  BlockTable short_prompt;
  EXPECT_EQ(manager.match_prefix(short_prompt, iota_tokens(16)), 0);
  EXPECT_TRUE(short_prompt.blocks.empty());
  BlockTable empty;
  EXPECT_EQ(manager.match_prefix(empty, {}), 0);
  EXPECT_EQ(manager.num_free_blocks(), 8);
}

TEST(BlockManagerTest, MatchRequiresAnEmptyTable) {
  BlockManager manager(4, 4, true);
  BlockTable table;
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(manager.append(table, 3, copies));
  EXPECT_THROW(manager.match_prefix(table, iota_tokens(9)), Error);
}

TEST(BlockManagerTest, WithoutPrefixCachingNothingIsCached) {
  BlockManager manager(8, 4, false);
  BlockTable table = computed(manager, iota_tokens(12));
  EXPECT_EQ(manager.num_cached_blocks(), 0);
  manager.free(table);
  BlockTable again;
  EXPECT_EQ(manager.match_prefix(again, iota_tokens(13)), 0);
  EXPECT_EQ(manager.num_free_blocks(), 8);
}

TEST(BlockManagerTest, SameLastBlockAfterADifferentPrefixDoesNotMatch) {
  BlockManager manager(16, 4, true);
  const std::vector<int64_t> shared_block = {9, 9, 9, 9};
  const std::vector<int64_t> a = concat(concat({1, 2, 3, 4}, shared_block), {5});
  const std::vector<int64_t> b = concat(concat({1, 2, 3, 5}, shared_block), {5});
  BlockTable table = computed(manager, a);
  manager.free(table);

  BlockTable other;
  EXPECT_EQ(manager.match_prefix(other, b), 0);
  EXPECT_EQ(manager.num_free_blocks(), 16);
  // Computed, b's second block is cached separately from a's, with the same own tokens.
  BlockTable b_table = computed(manager, b);
  EXPECT_EQ(manager.num_cached_blocks(), 4);
  manager.free(b_table);
  BlockTable hit_a;
  BlockTable hit_b;
  EXPECT_EQ(manager.match_prefix(hit_a, a), 8);
  EXPECT_EQ(manager.match_prefix(hit_b, b), 8);
  EXPECT_NE(hit_a.blocks[1], hit_b.blocks[1]);
  EXPECT_NE(hit_a.chain_hash, hit_b.chain_hash);
}

TEST(BlockManagerTest, SamePrefixComputedTwiceIsCachedOnceAndChainsOn) {
  BlockManager manager(16, 4, true);
  const std::vector<int64_t> prompt = iota_tokens(9);
  // Two sequences compute the same prompt at once (neither found it cached).
  BlockTable a = computed(manager, prompt);
  BlockTable b = computed(manager, prompt);
  EXPECT_NE(a.blocks[0], b.blocks[0]);
  EXPECT_EQ(manager.num_cached_blocks(), 2);  // b's copies are duplicates
  EXPECT_EQ(b.registered, 2);
  EXPECT_EQ(a.chain_hash, b.chain_hash);

  // b goes on alone; its next full block is cached, chained to a's blocks.
  std::vector<int64_t> longer = concat(prompt, {40, 41, 42, 43});
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(manager.append(b, 4, copies));
  manager.register_full_blocks(b, longer);
  EXPECT_EQ(manager.num_cached_blocks(), 3);
  const int64_t b_third = b.blocks[2];
  manager.free(b);
  manager.free(a);

  BlockTable hit;
  EXPECT_EQ(manager.match_prefix(hit, concat(longer, {1})), 12);
  EXPECT_EQ(hit.blocks[2], b_third);
}

TEST(BlockManagerTest, EvictsTheLeastRecentlyUsedFreeCachedBlock) {
  BlockManager manager(4, 2, true);
  BlockTable a = computed(manager, {1, 2, 3});  // block 0 cached, block 1 partial
  BlockTable b = computed(manager, {5, 6, 7});  // block 2 cached, block 3 partial
  const int64_t a_block = a.blocks[0];
  const int64_t b_block = b.blocks[0];
  manager.free(a);
  manager.free(b);
  EXPECT_EQ(manager.num_free_blocks(), 4);
  EXPECT_EQ(manager.num_cached_blocks(), 2);

  // Using a's prefix again makes it the most recent one.
  BlockTable touch;
  EXPECT_EQ(manager.match_prefix(touch, {1, 2, 3}), 2);
  manager.free(touch);

  // Two never-used blocks come first, then b's (older), then a's.
  BlockTable fresh;
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(manager.append(fresh, 4, copies));
  EXPECT_EQ(manager.num_cached_blocks(), 2);
  EXPECT_EQ(std::count(fresh.blocks.begin(), fresh.blocks.end(), a_block), 0);
  EXPECT_EQ(std::count(fresh.blocks.begin(), fresh.blocks.end(), b_block), 0);
  ASSERT_TRUE(manager.append(fresh, 2, copies));
  EXPECT_EQ(fresh.blocks.back(), b_block);
  EXPECT_EQ(manager.num_cached_blocks(), 1);
  BlockTable probe;
  EXPECT_EQ(manager.match_prefix(probe, {5, 6, 7}), 0);
  EXPECT_EQ(manager.match_prefix(probe, {1, 2, 3}), 2);  // still cached, and now held

  // A held cached block is never evicted: the pool is exhausted.
  EXPECT_EQ(manager.num_free_blocks(), 0);
  EXPECT_FALSE(manager.append(fresh, 1, copies));
  EXPECT_EQ(manager.ref_count(a_block), 1);
  manager.free(probe);
  EXPECT_EQ(manager.num_free_blocks(), 1);
  ASSERT_TRUE(manager.append(fresh, 1, copies));
  EXPECT_EQ(fresh.blocks.back(), a_block);
  EXPECT_EQ(manager.num_cached_blocks(), 0);
}

TEST(BlockManagerTest, FreeEvictsAPrefixTailBeforeItsHead) {
  BlockManager manager(3, 2, true);
  BlockTable a = computed(manager, {1, 2, 3, 4, 5});  // blocks 0, 1 cached; 2 partial
  const std::vector<int64_t> blocks = a.blocks;
  manager.free(a);
  BlockTable other;
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(manager.append(other, 4, copies));  // the never-used block, then the tail
  EXPECT_EQ(other.blocks[1], blocks[1]);
  BlockTable hit;
  ASSERT_EQ(manager.match_prefix(hit, {1, 2, 3, 4, 5}), 2);
  EXPECT_EQ(hit.blocks[0], blocks[0]);
}

TEST(BlockManagerTest, FlushForgetsCachedPrefixes) {
  BlockManager manager(8, 2, true);
  BlockTable held = computed(manager, {1, 2, 3, 4, 5});  // 2 cached blocks, still held
  BlockTable gone = computed(manager, {7, 8, 9});        // 1 cached block, freed below
  manager.free(gone);
  EXPECT_EQ(manager.num_cached_blocks(), 3);
  EXPECT_EQ(manager.num_free_blocks(), 5);

  manager.flush();
  EXPECT_EQ(manager.num_cached_blocks(), 0);
  EXPECT_EQ(manager.num_free_blocks(), 5);
  for (int64_t block : held.blocks) EXPECT_EQ(manager.ref_count(block), 1);
  BlockTable probe;
  EXPECT_EQ(manager.match_prefix(probe, {1, 2, 3, 4, 5}), 0);
  EXPECT_EQ(manager.match_prefix(probe, {7, 8, 9}), 0);

  // The held sequence goes on, but what it computed before the flush is never offered again.
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(manager.append(held, 3, copies));
  manager.register_full_blocks(held, {1, 2, 3, 4, 5, 6, 7, 8});
  EXPECT_EQ(held.registered, 4);
  EXPECT_EQ(manager.num_cached_blocks(), 0);
  manager.free(held);
  EXPECT_EQ(manager.num_free_blocks(), 8);

  // Computed afresh after the flush, a prefix is cached again.
  BlockTable after = computed(manager, {1, 2, 3, 4, 5});
  EXPECT_EQ(manager.num_cached_blocks(), 2);
  manager.free(after);
  EXPECT_EQ(manager.match_prefix(probe, {1, 2, 3, 4, 5}), 4);
}

TEST(BlockManagerTest, FlushKeepsAPartialBlockOfBeforeOutOfTheCache) {
  BlockManager manager(4, 4, true);
  BlockTable table = computed(manager, {1, 2});
  manager.flush();
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(manager.append(table, 2, copies));
  manager.register_full_blocks(table, {1, 2, 3, 4});
  EXPECT_EQ(manager.num_cached_blocks(), 0);
}

TEST(BlockManagerTest, FlushKeepsACopyOfABlockOfBeforeOutOfTheCache) {
  BlockManager manager(4, 4, true);
  BlockTable table = computed(manager, {1, 2});
  BlockTable sibling = manager.fork(table);
  manager.flush();
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(manager.append(sibling, 2, copies));
  ASSERT_EQ(copies.size(), 1u);  // the copy holds keys/values computed before the flush
  manager.register_full_blocks(sibling, {1, 2, 3, 4});
  EXPECT_EQ(manager.num_cached_blocks(), 0);
}

// The block manager's chain hash (SplitMix64's finalizer over the previous hash, then over
// each token xor-ed in), rebuilt here to construct collisions: tokens are arbitrary 64-bit
// values, so the last token of a block can be chosen to cancel any difference before it.
uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A block of two tokens, different from {first, second}, with the same hash as the first block.
std::vector<int64_t> colliding_first_block(int64_t first, int64_t second, int64_t other_first) {
  const uint64_t start = mix64(0);
  const uint64_t second_token = mix64(start ^ static_cast<uint64_t>(first)) ^
                                static_cast<uint64_t>(second) ^
                                mix64(start ^ static_cast<uint64_t>(other_first));
  return {other_first, static_cast<int64_t>(second_token)};
}

TEST(BlockManagerTest, HashCollisionsNeverMatch) {
  BlockManager manager(16, 2, true);
  const std::vector<int64_t> x = {1, 2};
  const std::vector<int64_t> y = colliding_first_block(1, 2, 7);
  ASSERT_NE(x, y);
  BlockTable x_table = computed(manager, concat(x, {0}));
  BlockTable y_table = computed(manager, concat(y, {0}));
  ASSERT_EQ(x_table.chain_hash, y_table.chain_hash)
      << "the constructed blocks no longer collide: mix64() above must follow the block "
         "manager's hash for this test to test anything";
  EXPECT_NE(x_table.blocks[0], y_table.blocks[0]);
  EXPECT_EQ(manager.num_cached_blocks(), 2);  // equal hashes, different tokens: both cached
  const int64_t y_block = y_table.blocks[0];
  manager.free(x_table);
  manager.free(y_table);

  // x's block followed by c is cached; y's block followed by c has the same chain hash and
  // the same own tokens for its second block, but a different prefix.
  const std::vector<int64_t> c = {5, 6};
  BlockTable xc = computed(manager, concat(concat(x, c), {0}));
  const int64_t xc_second = xc.blocks[1];
  manager.free(xc);
  BlockTable yc;
  EXPECT_EQ(manager.match_prefix(yc, concat(concat(y, c), {0})), 2);
  ASSERT_EQ(yc.blocks.size(), 1u);
  EXPECT_EQ(yc.blocks[0], y_block);
  EXPECT_NE(yc.blocks[0], xc_second);
}

TEST(BlockManagerTest, MisuseIsReported) {
  BlockManager manager(4, 4, true);
  BlockTable table;
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(manager.append(table, 5, copies));
  EXPECT_THROW(manager.register_full_blocks(table, {1, 2, 3}), Error);
  BlockTable copy = table;
  manager.free(table);
  EXPECT_THROW(manager.free(copy), Error);
  EXPECT_THROW(manager.ref_count(4), Error);
  EXPECT_THROW(manager.ref_count(-1), Error);
}

// Random operations against an independent model: a table's blocks are held once per table
// that lists them, and the "storage" (each slot's token, as the KV cache would hold its
// keys/values) must read back every live sequence's tokens, so handing out a wrong cached
// block, a missing copy-on-write or evicting a held block all show up as a wrong token.
TEST(BlockManagerTest, RandomOperationsKeepCountsAndContents) {
  constexpr int64_t kBlocks = 24;
  constexpr int64_t kBlockSize = 4;
  std::mt19937_64 rng(12345);
  auto uniform = [&](int64_t low, int64_t high) {
    return std::uniform_int_distribution<int64_t>(low, high)(rng);
  };
  for (bool caching : {true, false}) {
    BlockManager manager(kBlocks, kBlockSize, caching);
    std::vector<std::vector<int64_t>> storage(kBlocks, std::vector<int64_t>(kBlockSize, -1));
    struct Live {
      BlockTable table;
      std::vector<int64_t> tokens;  // the KV cache holds tokens[0 .. table.num_tokens)
    };
    std::vector<Live> live;
    // A few prompts with common beginnings, so that the cache is hit.
    std::vector<std::vector<int64_t>> stems = {
        {1, 2, 3, 4, 5, 6, 7, 8}, {1, 2, 3, 4, 9, 9, 9, 9}, {5, 5, 5, 5, 1, 2, 3, 4}};
    int64_t hits = 0;
    int64_t copies_made = 0;
    int64_t exhausted_steps = 0;

    auto write = [&](Live& seq, int64_t count) -> bool {
      std::vector<BlockCopy> copies;
      const int64_t needed = manager.blocks_needed(seq.table, count);
      const int64_t free_before = manager.num_free_blocks();
      const BlockTable before = seq.table;
      if (!manager.append(seq.table, count, copies)) {
        EXPECT_GT(needed, free_before);
        EXPECT_EQ(seq.table.blocks, before.blocks);
        EXPECT_EQ(seq.table.num_tokens, before.num_tokens);
        EXPECT_TRUE(copies.empty());
        return false;
      }
      EXPECT_LE(needed, free_before);
      EXPECT_EQ(manager.num_free_blocks(), free_before - needed);
      for (const BlockCopy& copy : copies) {
        storage[static_cast<size_t>(copy.destination)] = storage[static_cast<size_t>(copy.source)];
        ++copies_made;
      }
      for (int64_t p = seq.table.num_tokens - count; p < seq.table.num_tokens; ++p) {
        const int64_t block = seq.table.blocks[static_cast<size_t>(p / kBlockSize)];
        storage[static_cast<size_t>(block)][static_cast<size_t>(p % kBlockSize)] =
            seq.tokens[static_cast<size_t>(p)];
      }
      manager.register_full_blocks(seq.table, seq.tokens);
      return true;
    };

    for (int step = 0; step < 3000; ++step) {
      const int64_t op = uniform(0, 9);
      if (op <= 2 || live.empty()) {  // a new prompt
        Live seq;
        seq.tokens = stems[static_cast<size_t>(uniform(0, 2))];
        seq.tokens.resize(static_cast<size_t>(uniform(1, 8)));
        for (int64_t extra = uniform(0, 6); extra > 0; --extra) seq.tokens.push_back(uniform(0, 3));
        const int64_t free_before = manager.num_free_blocks();
        const int64_t cached = manager.match_prefix(seq.table, seq.tokens);
        EXPECT_EQ(cached % kBlockSize, 0);
        EXPECT_LT(cached, static_cast<int64_t>(seq.tokens.size()));
        EXPECT_GE(manager.num_free_blocks(), free_before - cached / kBlockSize);
        if (!caching) {
          EXPECT_EQ(cached, 0);
        }
        hits += cached > 0;
        // The matched blocks must already hold exactly these tokens.
        for (int64_t p = 0; p < cached; ++p) {
          const int64_t block = seq.table.blocks[static_cast<size_t>(p / kBlockSize)];
          ASSERT_EQ(storage[static_cast<size_t>(block)][static_cast<size_t>(p % kBlockSize)],
                    seq.tokens[static_cast<size_t>(p)])
              << "step " << step;
        }
        if (write(seq, static_cast<int64_t>(seq.tokens.size()) - cached)) {
          live.push_back(std::move(seq));
        } else {
          manager.free(seq.table);
        }
      } else {
        Live& seq = live[static_cast<size_t>(uniform(0, static_cast<int64_t>(live.size()) - 1))];
        if (op <= 5) {  // decode one token
          seq.tokens.push_back(uniform(0, 3));
          if (!write(seq, 1)) seq.tokens.pop_back();
        } else if (op == 6) {  // fork
          Live child;
          child.table = manager.fork(seq.table);
          child.tokens = seq.tokens;
          live.push_back(std::move(child));
        } else if (op <= 8 || uniform(0, 20) > 0) {  // finish
          manager.free(seq.table);
          seq = std::move(live.back());
          live.pop_back();
        } else {
          manager.flush();
          EXPECT_EQ(manager.num_cached_blocks(), 0);
        }
      }

      // Reference counts are the number of tables listing a block; free blocks are the rest.
      std::map<int64_t, int64_t> model;
      for (const Live& seq : live) {
        EXPECT_EQ(static_cast<int64_t>(seq.table.blocks.size()),
                  (seq.table.num_tokens + kBlockSize - 1) / kBlockSize);
        for (int64_t block : seq.table.blocks) ++model[block];
      }
      for (int64_t block = 0; block < kBlocks; ++block) {
        ASSERT_EQ(manager.ref_count(block), model.count(block) ? model[block] : 0)
            << "block " << block << " at step " << step;
      }
      ASSERT_EQ(manager.num_free_blocks(), kBlocks - static_cast<int64_t>(model.size()));
      EXPECT_LE(manager.num_cached_blocks(), kBlocks);
      if (!caching) {
        EXPECT_EQ(manager.num_cached_blocks(), 0);
      }
      for (const Live& seq : live) {
        for (int64_t p = 0; p < seq.table.num_tokens; ++p) {
          const int64_t block = seq.table.blocks[static_cast<size_t>(p / kBlockSize)];
          ASSERT_EQ(storage[static_cast<size_t>(block)][static_cast<size_t>(p % kBlockSize)],
                    seq.tokens[static_cast<size_t>(p)])
              << "position " << p << " at step " << step;
        }
      }
      exhausted_steps += manager.num_free_blocks() == 0;
    }
    for (Live& seq : live) manager.free(seq.table);
    EXPECT_EQ(manager.num_free_blocks(), kBlocks);
    // The sequence of operations exercised what it is meant to.
    if (caching) {
      EXPECT_GT(hits, 50);
    }
    EXPECT_GT(copies_made, 20);
    EXPECT_GT(exhausted_steps, 20);
  }
}

}  // namespace block_manager_test
}  // namespace ooze::engine
