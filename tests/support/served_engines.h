// Real engines serving the tiny model over HTTP on loopback, and a router in front of them: what
// the rollout manager, its plugins and the examples are tested against.
#pragma once

#include <ATen/Parallel.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "models/tokenizer.h"
#include "serving/local_engines.h"
#include "tests/support/tiny_model.h"

namespace ooze::testing {

class ServedEngines {
 public:
  explicit ServedEngines(int count, int64_t max_running_requests = 32)
      : engines_(options(max_running_requests), count),
        tokenizer_(models::load_tokenizer(tiny_model_dir())) {}

  serving::Router& router() { return engines_.router(); }
  const models::Tokenizer& tokenizer() const { return tokenizer_; }
  std::vector<std::unique_ptr<engine::Engine>>& engines() { return engines_.engines(); }

 private:
  // Also limits this process to one intra-op thread: several engines share two cores.
  static engine::EngineOptions options(int64_t max_running_requests) {
    at::set_num_threads(1);
    engine::EngineOptions options;
    options.model_dir = tiny_model_dir();
    options.kv_cache_blocks = 512;
    options.block_size = 4;
    options.max_running_requests = max_running_requests;
    options.seed = 11;
    return options;
  }

  serving::LocalEngines engines_;
  models::Tokenizer tokenizer_;
};

// Writes `lines` to `name` in a directory of this process's own under the temp directory (CTest
// runs tests of one binary as concurrent processes) and returns its path.
inline std::string write_lines(const std::string& name, const std::vector<std::string>& lines) {
  const std::string dir = ::testing::TempDir() + "/ooze-rollout-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/" + name;
  std::ofstream out(path);
  for (const std::string& line : lines) out << line << "\n";
  return path;
}

}  // namespace ooze::testing
