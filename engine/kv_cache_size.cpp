#include "engine/kv_cache_size.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "core/error.h"
#include "engine/engine.h"

namespace ooze::engine {

namespace {

std::string megabytes(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f MB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

}  // namespace

KvCacheSize choose_kv_cache_size(const EngineOptions& options, const KvCacheDemand& demand,
                                 std::optional<int64_t> available_bytes) {
  const int64_t block_bytes = demand.bytes_per_token * options.block_size;
  KvCacheSize size;
  if (options.kv_cache_blocks > 0) {
    size.blocks = options.kv_cache_blocks;
    size.why = "--kv-cache-blocks";
  } else if (options.kv_cache_memory_mb > 0) {
    size.blocks = options.kv_cache_memory_mb * (int64_t{1} << 20) / block_bytes;
    size.why = "--kv-cache-memory-mb " + std::to_string(options.kv_cache_memory_mb);
    if (size.blocks < 1) {
      throw ConfigError("--kv-cache-memory-mb " + std::to_string(options.kv_cache_memory_mb) +
                        " holds no KV block of " + megabytes(block_bytes) +
                        " (block_size tokens of the model): raise it");
    }
  } else {
    // The most the engine can use: every running request at the full context.
    const int64_t tokens_per_request =
        (demand.context_length + options.block_size - 1) / options.block_size;
    size.blocks = options.max_running_requests * tokens_per_request;
    size.why = "enough for --max-running-requests " + std::to_string(options.max_running_requests) +
               " at the full context of " + std::to_string(demand.context_length) + " tokens";
    int64_t cap_bytes = -1;
    std::string cap_why;
    if (options.device.rfind("cuda", 0) == 0) {
      cap_bytes = kFallbackCudaMb << 20;
      cap_why =
          "at most " + std::to_string(kFallbackCudaMb) + " MB on CUDA without --kv-cache-memory-mb";
    } else if (available_bytes) {
      cap_bytes = static_cast<int64_t>(options.mem_fraction_static *
                                       static_cast<double>(*available_bytes)) -
                  demand.weight_bytes;
      char fraction[16];
      std::snprintf(fraction, sizeof(fraction), "%g", options.mem_fraction_static);
      cap_why = "--mem-fraction-static " + std::string(fraction) + " of the " +
                megabytes(*available_bytes) + " available, less " + megabytes(demand.weight_bytes) +
                " of weights";
      if (cap_bytes < block_bytes) {
        throw ConfigError("no room for a KV cache: " + cap_why +
                          " leaves less than one block; raise --mem-fraction-static or give "
                          "--kv-cache-memory-mb");
      }
    }
    if (cap_bytes >= 0 && cap_bytes / block_bytes < size.blocks) {
      size.blocks = cap_bytes / block_bytes;
      size.why = cap_why;
    }
  }
  size.bytes = size.blocks * block_bytes;
  return size;
}

std::optional<int64_t> available_host_memory() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return std::nullopt;
}

}  // namespace ooze::engine
