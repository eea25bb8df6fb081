// choose_kv_cache_size against sizes worked out by hand: explicit blocks and megabytes, the
// default that holds every running request at the full context, and its cap at
// mem_fraction_static of the available memory less the weights.
#include "engine/kv_cache_size.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "engine/engine.h"
#include "tests/support/expect_error.h"

namespace ooze::engine {
namespace kv_cache_size_test {

constexpr int64_t kMiB = int64_t{1} << 20;

// 1 KiB per token: 16 KiB blocks of 16 tokens; a context of 1000 tokens is 63 blocks.
KvCacheDemand demand() {
  KvCacheDemand d;
  d.bytes_per_token = 1024;
  d.context_length = 1000;
  d.weight_bytes = 100 * kMiB;
  return d;
}

EngineOptions options() {
  EngineOptions o;
  o.max_running_requests = 8;
  o.block_size = 16;
  o.mem_fraction_static = 0.5;
  return o;
}

TEST(KvCacheSizeTest, ExplicitBlocksOrMegabytesWin) {
  EngineOptions o = options();
  o.kv_cache_blocks = 10;
  o.kv_cache_memory_mb = 5;  // ignored: blocks were given
  KvCacheSize size = choose_kv_cache_size(o, demand(), int64_t{1} << 40);
  EXPECT_EQ(size.blocks, 10);
  EXPECT_EQ(size.bytes, 10 * 16 * 1024);
  EXPECT_EQ(size.why, "--kv-cache-blocks");
  o.kv_cache_blocks = 0;
  size = choose_kv_cache_size(o, demand(), std::nullopt);
  EXPECT_EQ(size.blocks, 5 * kMiB / (16 * 1024));  // 320
  EXPECT_EQ(size.why, "--kv-cache-memory-mb 5");
}

TEST(KvCacheSizeTest, ByDefaultEnoughForEveryRunningRequestAtTheFullContext) {
  const KvCacheSize size = choose_kv_cache_size(options(), demand(), int64_t{64} << 30);
  EXPECT_EQ(size.blocks, 8 * 63);
  EXPECT_EQ(size.bytes, 8 * 63 * 16 * 1024);
  EXPECT_EQ(size.why, "enough for --max-running-requests 8 at the full context of 1000 tokens");
  // Unknown available memory on CPU: the demand alone.
  EXPECT_EQ(choose_kv_cache_size(options(), demand(), std::nullopt).blocks, 8 * 63);
}

TEST(KvCacheSizeTest, CappedAtTheFractionOfAvailableMemoryLessTheWeights) {
  EngineOptions o = options();
  o.max_running_requests = 100000;
  // 0.5 * 400 MiB - 100 MiB = 100 MiB = 6400 blocks of 16 KiB.
  const KvCacheSize size = choose_kv_cache_size(o, demand(), 400 * kMiB);
  EXPECT_EQ(size.blocks, 6400);
  EXPECT_EQ(size.why,
            "--mem-fraction-static 0.5 of the 400.0 MB available, less 100.0 MB of weights");
  // On CUDA the free memory is not read: a fixed cap.
  o.device = "cuda:0";
  EXPECT_EQ(choose_kv_cache_size(o, demand(), std::nullopt).bytes, kFallbackCudaMb * kMiB);
}

TEST(KvCacheSizeTest, NoRoomNamesTheFlags) {
  EngineOptions o = options();
  EXPECT_CONTAINS(::ooze::testing::error_message_of<ConfigError>(
                      [&] { choose_kv_cache_size(o, demand(), 150 * kMiB); }),
                  "leaves less than one block; raise --mem-fraction-static or give "
                  "--kv-cache-memory-mb");
  o.kv_cache_memory_mb = 0;
  o.kv_cache_blocks = 0;
  KvCacheDemand huge = demand();
  huge.bytes_per_token = 1 << 20;  // 16 MiB blocks
  o.kv_cache_memory_mb = 8;
  EXPECT_CONTAINS(
      ::ooze::testing::error_message_of<ConfigError>([&] { choose_kv_cache_size(o, huge, {}); }),
      "--kv-cache-memory-mb 8 holds no KV block of 16.0 MB");
}

}  // namespace kv_cache_size_test
}  // namespace ooze::engine
