// The engine the weight sync tests start on a tiny model: a small paged cache (64 blocks of 4
// tokens), one intra-op thread, a fixed seed, so an engine of the test process and one in an
// actor generate alike.
#pragma once

#include <string>

#include "engine/engine.h"

namespace ooze::testing {

inline engine::EngineOptions small_engine_options(const std::string& model_dir,
                                                  const std::string& dtype = "auto") {
  engine::EngineOptions options;
  options.model_dir = model_dir;
  options.dtype = dtype;
  options.kv_cache_blocks = 64;
  options.block_size = 4;
  options.intra_op_threads = 1;
  options.seed = 1;
  return options;
}

}  // namespace ooze::testing
