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
#include "rollout/engine.h"
#include "rollout/engine_server.h"
#include "rollout/router.h"
#include "tests/rollout/tiny_model.h"

namespace ooze::rollout::testing {

class ServedEngines {
 public:
  explicit ServedEngines(int count, int64_t max_running_requests = 32) {
    at::set_num_threads(1);
    for (int i = 0; i < count; ++i) {
      EngineOptions options;
      options.model_dir = tiny_model_dir();
      options.kv_cache_blocks = 512;
      options.block_size = 4;
      options.max_running_requests = max_running_requests;
      options.seed = 11 + i;
      engines_.push_back(std::make_unique<Engine>(options));
      servers_.push_back(std::make_unique<EngineServer>(*engines_.back(), ServerOptions{}));
    }
    RouterOptions options;
    for (const auto& server : servers_) options.engine_urls.push_back(server->url());
    options.health_check_interval_s = 3600;
    router_ = std::make_unique<Router>(options);
    tokenizer_ = std::make_unique<models::Tokenizer>(models::load_tokenizer(tiny_model_dir()));
  }
  ~ServedEngines() {
    router_.reset();
    servers_.clear();
    engines_.clear();
  }

  Router& router() { return *router_; }
  const models::Tokenizer& tokenizer() const { return *tokenizer_; }
  std::vector<std::unique_ptr<Engine>>& engines() { return engines_; }

 private:
  std::vector<std::unique_ptr<Engine>> engines_;
  std::vector<std::unique_ptr<EngineServer>> servers_;
  std::unique_ptr<Router> router_;
  std::unique_ptr<models::Tokenizer> tokenizer_;
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

}  // namespace ooze::rollout::testing
