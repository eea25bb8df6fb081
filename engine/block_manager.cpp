#include "engine/block_manager.h"

#include <algorithm>
#include <string>

#include "core/checksum.h"
#include "core/error.h"

namespace ooze::engine {
namespace {

// A SplitMix64 step (the golden-ratio increment, then the finalizer): spreads every input bit.
uint64_t mix64_step(uint64_t x) { return mix64(x + 0x9e3779b97f4a7c15ULL); }

// The chain hash of a prefix extended by one block of tokens.
uint64_t chain(uint64_t previous, const int64_t* tokens, int64_t count) {
  uint64_t hash = mix64_step(previous);
  for (int64_t i = 0; i < count; ++i) hash = mix64_step(hash ^ static_cast<uint64_t>(tokens[i]));
  return hash;
}

}  // namespace

BlockManager::BlockManager(int64_t num_blocks, int64_t block_size, bool enable_prefix_caching)
    : block_size_(block_size), prefix_caching_(enable_prefix_caching) {
  if (num_blocks < 1 || block_size < 1) {
    throw Error("BlockManager: num_blocks (" + std::to_string(num_blocks) + ") and block_size (" +
                std::to_string(block_size) +
                ") must both be >= 1; give the KV cache more memory or smaller blocks");
  }
  blocks_.resize(static_cast<size_t>(num_blocks));
  never_used_.reserve(blocks_.size());
  // Taken from the back: block 0 first.
  for (int64_t block = num_blocks - 1; block >= 0; --block) never_used_.push_back(block);
}

int64_t BlockManager::num_blocks() const { return static_cast<int64_t>(blocks_.size()); }

int64_t BlockManager::num_free_blocks() const {
  return static_cast<int64_t>(never_used_.size() + evictable_.size());
}

int64_t BlockManager::num_cached_blocks() const { return static_cast<int64_t>(by_hash_.size()); }

int64_t BlockManager::ref_count(int64_t block) const {
  check_block(block, "ref_count");
  return blocks_[static_cast<size_t>(block)].ref_count;
}

void BlockManager::check_block(int64_t block, const char* where) const {
  if (block < 0 || block >= num_blocks()) {
    throw Error(std::string("BlockManager::") + where + ": block " + std::to_string(block) +
                " is not in [0, " + std::to_string(num_blocks()) + ")");
  }
}

std::optional<int64_t> BlockManager::take_free_block() {
  int64_t block;
  if (!never_used_.empty()) {
    block = never_used_.back();
    never_used_.pop_back();
  } else if (!evictable_.empty()) {
    block = evictable_.begin()->second;
    uncache(block);  // also leaves evictable_
  } else {
    return std::nullopt;
  }
  Block& b = blocks_[static_cast<size_t>(block)];
  b = Block();
  b.ref_count = 1;
  b.epoch = epoch_;
  return block;
}

void BlockManager::uncache(int64_t block) {
  Block& b = blocks_[static_cast<size_t>(block)];
  if (!b.cached) return;
  auto range = by_hash_.equal_range(b.hash);
  for (auto it = range.first; it != range.second; ++it) {
    if (it->second == block) {
      by_hash_.erase(it);
      break;
    }
  }
  if (b.ref_count == 0) evictable_.erase({b.last_use, block});
  b.cached = false;
  b.tokens.clear();
  b.tokens.shrink_to_fit();
  b.parent = -1;
}

void BlockManager::release(int64_t block) {
  check_block(block, "free");
  Block& b = blocks_[static_cast<size_t>(block)];
  if (b.ref_count <= 0) {
    throw Error("BlockManager::free: block " + std::to_string(block) +
                " is not held by any sequence (a block table was freed twice?)");
  }
  if (--b.ref_count > 0) return;
  if (b.cached) {
    b.last_use = ++clock_;
    evictable_.insert({b.last_use, block});
  } else {
    b = Block();
    never_used_.push_back(block);
  }
}

std::optional<BlockManager::CachedRef> BlockManager::cached_ref(int64_t block) const {
  const Block& b = blocks_[static_cast<size_t>(block)];
  if (b.cached) return CachedRef{block, b.cache_id};
  if (b.same_as >= 0) {
    const Block& same = blocks_[static_cast<size_t>(b.same_as)];
    if (same.cached && same.cache_id == b.same_as_cache_id)
      return CachedRef{b.same_as, same.cache_id};
  }
  return std::nullopt;
}

std::optional<int64_t> BlockManager::find_cached(uint64_t hash, const int64_t* tokens,
                                                 const CachedRef& parent) const {
  auto range = by_hash_.equal_range(hash);
  for (auto it = range.first; it != range.second; ++it) {
    const Block& b = blocks_[static_cast<size_t>(it->second)];
    if (b.parent == parent.block && b.parent_cache_id == parent.cache_id &&
        std::equal(b.tokens.begin(), b.tokens.end(), tokens)) {
      return it->second;
    }
  }
  return std::nullopt;
}

int64_t BlockManager::match_prefix(BlockTable& table, const std::vector<int64_t>& tokens,
                                   int64_t max_tokens) {
  if (!table.blocks.empty() || table.num_tokens != 0) {
    throw Error("BlockManager::match_prefix: the block table already holds " +
                std::to_string(table.blocks.size()) + " blocks; free it first");
  }
  table = BlockTable();
  if (!prefix_caching_ || tokens.empty()) return 0;
  // Never the block holding tokens.back(): its logits are needed.
  const int64_t max_blocks =
      std::min(static_cast<int64_t>(tokens.size()) - 1, std::max<int64_t>(max_tokens, 0)) /
      block_size_;
  CachedRef parent;  // none yet: the first block has no parent
  uint64_t hash = 0;
  for (int64_t j = 0; j < max_blocks; ++j) {
    const int64_t* block_tokens = tokens.data() + j * block_size_;
    const uint64_t next_hash = chain(hash, block_tokens, block_size_);
    std::optional<int64_t> found = find_cached(next_hash, block_tokens, parent);
    if (!found) break;
    Block& b = blocks_[static_cast<size_t>(*found)];
    if (b.ref_count == 0) evictable_.erase({b.last_use, *found});
    ++b.ref_count;
    b.last_use = ++clock_;
    table.blocks.push_back(*found);
    parent = CachedRef{*found, b.cache_id};
    hash = next_hash;
  }
  table.num_tokens = static_cast<int64_t>(table.blocks.size()) * block_size_;
  table.registered = static_cast<int64_t>(table.blocks.size());
  table.chain_hash = hash;
  return table.num_tokens;
}

int64_t BlockManager::blocks_needed(const BlockTable& table, int64_t count) const {
  if (count <= 0) return 0;
  const int64_t held = static_cast<int64_t>(table.blocks.size());
  const int64_t end = table.num_tokens + count;
  int64_t needed = std::max<int64_t>(0, (end + block_size_ - 1) / block_size_ - held);
  // The block the first new token goes into already exists and others share it: copy it.
  const int64_t first = table.num_tokens / block_size_;
  if (first < held && blocks_[static_cast<size_t>(table.blocks[first])].ref_count > 1) ++needed;
  return needed;
}

bool BlockManager::append(BlockTable& table, int64_t count, std::vector<BlockCopy>& copies) {
  if (count < 0) {
    throw Error("BlockManager::append: cannot append " + std::to_string(count) + " tokens");
  }
  if (blocks_needed(table, count) > num_free_blocks()) return false;
  if (count == 0) return true;
  const int64_t first = table.num_tokens / block_size_;
  if (first < static_cast<int64_t>(table.blocks.size())) {
    const int64_t shared = table.blocks[first];
    if (blocks_[static_cast<size_t>(shared)].ref_count > 1) {
      const int64_t copy = *take_free_block();
      // The copy holds keys/values computed when the original was: same flush epoch.
      blocks_[static_cast<size_t>(copy)].epoch = blocks_[static_cast<size_t>(shared)].epoch;
      copies.push_back(BlockCopy{shared, copy});
      release(shared);
      table.blocks[first] = copy;
    }
  }
  const int64_t end = table.num_tokens + count;
  while (static_cast<int64_t>(table.blocks.size()) * block_size_ < end) {
    table.blocks.push_back(*take_free_block());
  }
  table.num_tokens = end;
  return true;
}

void BlockManager::register_full_blocks(BlockTable& table, const std::vector<int64_t>& tokens) {
  if (!prefix_caching_) return;
  if (static_cast<int64_t>(tokens.size()) < table.num_tokens) {
    throw Error("BlockManager::register_full_blocks: " + std::to_string(tokens.size()) +
                " tokens given for a block table holding " + std::to_string(table.num_tokens));
  }
  for (int64_t j = table.registered; (j + 1) * block_size_ <= table.num_tokens; ++j) {
    const int64_t* block_tokens = tokens.data() + j * block_size_;
    const uint64_t hash = chain(table.chain_hash, block_tokens, block_size_);
    const int64_t block = table.blocks[static_cast<size_t>(j)];
    Block& b = blocks_[static_cast<size_t>(block)];
    std::optional<CachedRef> parent = CachedRef{};
    if (j > 0) parent = cached_ref(table.blocks[static_cast<size_t>(j - 1)]);
    // Without a cached parent (flushed, or its duplicate evicted) the chain cannot be verified:
    // the rest of this table stays out of the cache.
    if (!b.cached && parent && b.epoch == epoch_) {
      if (std::optional<int64_t> same = find_cached(hash, block_tokens, *parent)) {
        b.same_as = *same;
        b.same_as_cache_id = blocks_[static_cast<size_t>(*same)].cache_id;
      } else {
        b.cached = true;
        b.hash = hash;
        b.tokens.assign(block_tokens, block_tokens + block_size_);
        b.parent = parent->block;
        b.parent_cache_id = parent->cache_id;
        b.cache_id = ++cache_ids_;
        by_hash_.emplace(hash, block);
      }
    }
    table.chain_hash = hash;
    table.registered = j + 1;
  }
}

BlockTable BlockManager::fork(const BlockTable& table) {
  for (int64_t block : table.blocks) {
    check_block(block, "fork");
    Block& b = blocks_[static_cast<size_t>(block)];
    if (b.ref_count <= 0) {
      throw Error("BlockManager::fork: block " + std::to_string(block) +
                  " of the table is not held (the table was freed?)");
    }
    ++b.ref_count;
  }
  return table;
}

void BlockManager::free(BlockTable& table) {
  for (auto it = table.blocks.rbegin(); it != table.blocks.rend(); ++it) release(*it);
  table = BlockTable();
}

void BlockManager::flush() {
  for (int64_t block = 0; block < num_blocks(); ++block) {
    Block& b = blocks_[static_cast<size_t>(block)];
    if (!b.cached) continue;
    uncache(block);
    if (b.ref_count == 0) {
      b = Block();
      never_used_.push_back(block);
    }
  }
  ++epoch_;
}

}  // namespace ooze::engine
