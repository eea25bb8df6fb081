// Which KV-cache block belongs to whom (models/kv_cache.h stores them): a pool of fixed-size
// blocks with reference counts, block tables that grow as sequences do, and the prefix cache.
//
// Prefix cache: a full block is registered under the exact tokens it holds together with every
// token before it (a hash chain over blocks, verified token by token, so a hash collision can
// never hand out wrong keys/values). A later sequence whose prompt starts with those tokens
// takes the block (reference count + 1) instead of computing it again. A registered block that
// no sequence holds any more stays cached, and is evicted least-recently-used only when a fresh
// block is needed.
//
// Copy-on-write: sequences forked from one prompt share every block, the partly filled last one
// included; the first sequence to append to a shared block gets a private copy (the caller
// copies the storage, see BlockCopy).
//
// Not thread-safe: the engine loop is its only user. No torch here.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ooze::engine {

// Copy block `source` into `destination` before the step that writes into `destination`.
struct BlockCopy {
  int64_t source = 0;
  int64_t destination = 0;
};

// A sequence's blocks and how many tokens they hold.
struct BlockTable {
  std::vector<int64_t> blocks;
  int64_t num_tokens = 0;   // tokens whose keys/values are (or are being) written
  int64_t registered = 0;   // leading blocks already offered to the prefix cache
  uint64_t chain_hash = 0;  // hash of the tokens of those blocks
};

class BlockManager {
 public:
  BlockManager(int64_t num_blocks, int64_t block_size, bool enable_prefix_caching);

  int64_t num_blocks() const;
  int64_t block_size() const { return block_size_; }
  // Blocks a sequence could get now: unused ones plus cached ones no sequence holds.
  int64_t num_free_blocks() const;
  // Blocks in the prefix cache (held or not).
  int64_t num_cached_blocks() const;
  int64_t ref_count(int64_t block) const;

  // Starts `table` (empty) with the longest cached prefix of `tokens` in whole blocks, but never
  // the block holding tokens.back(): the step that computes the last prompt token needs its
  // logits anyway; nor more than `max_tokens` tokens (a request scoring its prompt must compute
  // the positions it scores). Returns the number of tokens supplied (table.num_tokens).
  int64_t match_prefix(BlockTable& table, const std::vector<int64_t>& tokens,
                       int64_t max_tokens = INT64_MAX);

  // Makes room in `table` for `count` more tokens: new blocks, and a private copy of a shared
  // last block that the tokens would write into (appended to `copies`). All or nothing: returns
  // false and changes nothing when there are not enough free blocks. Advances num_tokens.
  bool append(BlockTable& table, int64_t count, std::vector<BlockCopy>& copies);
  // How many free blocks append(table, count) needs at most.
  int64_t blocks_needed(const BlockTable& table, int64_t count) const;

  // Offers the table's full blocks (whose tokens are tokens[0 .. table.num_tokens)) to the
  // prefix cache once their keys/values are computed. A no-op without prefix caching.
  void register_full_blocks(BlockTable& table, const std::vector<int64_t>& tokens);

  // A copy of `table` sharing all its blocks (reference counts + 1): the n samples of a prompt.
  BlockTable fork(const BlockTable& table);
  // Drops the table's references; blocks no one holds become free (or stay cached). The last
  // block is released first, so a prefix's tail is evicted before its head.
  void free(BlockTable& table);

  // Forgets every cached prefix (blocks held by sequences stay theirs, but are no longer
  // offered to others). Used on flush_cache and weight updates. Blocks taken before the flush,
  // and every block after them in a table, are never cached afterwards: their keys/values
  // were computed (in part) before it.
  void flush();

 private:
  // A cached block is verified through its parent: it holds `tokens` (its own block_size
  // tokens) right after the prefix that `parent` held when this block was cached. `cache_id`
  // names one caching of a block, so a parent that was evicted and cached again with other
  // tokens no longer vouches for its old children.
  struct Block {
    int64_t ref_count = 0;
    bool cached = false;
    uint64_t hash = 0;            // chain hash of every token up to the end of this block
    std::vector<int64_t> tokens;  // this block's tokens, when cached
    int64_t parent = -1;          // the cached block holding the tokens before, -1 for the first
    uint64_t parent_cache_id = 0;
    uint64_t cache_id = 0;  // set each time the block is cached
    // An uncached block whose tokens equal those of a cached block (the same prefix computed
    // by two sequences at once): its successors chain on to `same_as` instead.
    int64_t same_as = -1;
    uint64_t same_as_cache_id = 0;
    uint64_t epoch = 0;     // flush count when the block was taken; older ones are never cached
    uint64_t last_use = 0;  // when the block became evictable (the LRU key)
  };
  // The cached block that holds exactly the tokens of `block` and every token before it.
  struct CachedRef {
    int64_t block = -1;
    uint64_t cache_id = 0;
  };

  std::optional<int64_t> take_free_block();
  void release(int64_t block);
  void uncache(int64_t block);
  void check_block(int64_t block, const char* where) const;
  // The cached block standing for `block`'s prefix (itself, or the block it duplicates).
  std::optional<CachedRef> cached_ref(int64_t block) const;
  // A cached block with this chain hash, these tokens and this parent, if there is one.
  std::optional<int64_t> find_cached(uint64_t hash, const int64_t* tokens,
                                     const CachedRef& parent) const;

  int64_t block_size_;
  bool prefix_caching_;
  uint64_t clock_ = 0;
  uint64_t cache_ids_ = 0;
  uint64_t epoch_ = 0;
  std::vector<Block> blocks_;
  std::vector<int64_t> never_used_;                     // free and not cached
  std::unordered_multimap<uint64_t, int64_t> by_hash_;  // cached blocks
  std::set<std::pair<uint64_t, int64_t>> evictable_;    // cached, ref_count 0: (last_use, block)
};

}  // namespace ooze::engine
