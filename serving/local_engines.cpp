#include "serving/local_engines.h"

namespace ooze::serving {

LocalEngines::LocalEngines(const engine::EngineOptions& options, int count) {
  for (int i = 0; i < count; ++i) {
    engine::EngineOptions engine = options;
    if (engine.seed != 0) engine.seed += i;  // distinct streams for requests without a seed
    engines_.push_back(std::make_unique<engine::Engine>(engine));
    servers_.push_back(std::make_unique<EngineServer>(*engines_.back(), ServerOptions{}));
  }
  RouterOptions router;
  router.engine_urls = urls();
  router_ = std::make_unique<Router>(router);
}

LocalEngines::~LocalEngines() {
  router_.reset();
  servers_.clear();
  engines_.clear();
}

std::vector<std::string> LocalEngines::urls() const {
  std::vector<std::string> urls;
  for (const auto& server : servers_) urls.push_back(server->url());
  return urls;
}

}  // namespace ooze::serving
