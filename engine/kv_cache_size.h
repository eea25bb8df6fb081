// How large an engine's KV cache is, and why. The cache is allocated when the engine starts (on
// the CPU its pages become resident as blocks are first used, models/kv_cache.cpp); by default
// it is no larger than the engine can use, and no larger than its share of the machine:
//
//   --kv-cache-blocks N        N blocks, as given;
//   --kv-cache-memory-mb MB    as many blocks as MB holds;
//   neither (the default)      enough for --max-running-requests requests each at the model's
//                              full context, capped so that the weights and the cache together
//                              take at most --mem-fraction-static of the memory available when
//                              the engine starts (SGLang's flag; on CPU, /proc/meminfo's
//                              MemAvailable). On CUDA, whose free memory is not read here, the
//                              cap is kFallbackCudaMb.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ooze::engine {

struct EngineOptions;

struct KvCacheSize {
  int64_t blocks = 0;
  int64_t bytes = 0;
  std::string why;  // for the start-up line: "enough for 64 requests at the full context ..."
};

// What the engine's model asks of the cache.
struct KvCacheDemand {
  int64_t bytes_per_token = 0;  // K and V of every layer, in the cache's dtype
  int64_t context_length = 0;   // the model's max_position_embeddings
  int64_t weight_bytes = 0;     // the loaded weights
};

constexpr int64_t kFallbackCudaMb = 1024;

// The size for `options` and `demand`; `available_bytes` is the memory available when the
// engine started (nullopt where it is not known). Throws ConfigError when no block fits,
// naming the flag to change.
KvCacheSize choose_kv_cache_size(const EngineOptions& options, const KvCacheDemand& demand,
                                 std::optional<int64_t> available_bytes);

// MemAvailable of /proc/meminfo in bytes; nullopt when it cannot be read.
std::optional<int64_t> available_host_memory();

}  // namespace ooze::engine
