// Engines in this process, each behind its own HTTP server on loopback, and a router in front of
// them: what `ooze rollout` starts when no engine URL is given, and what benchmarks and tests
// drive the rollout manager against. Requests still go over real sockets, exactly as they do to
// `ooze serve` engines.
//
//   EngineOptions engine;
//   engine.model_dir = "/models/qwen3";
//   LocalEngines engines(engine, /*count=*/2);
//   RolloutManager manager(options, source, engines.router(), tokenizer, rewards);
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "serving/engine_server.h"
#include "serving/router.h"

namespace ooze::serving {

class LocalEngines {
 public:
  // Starts `count` engines from `options` (engine i seeded with options.seed + i when a seed is
  // given) and the router over their servers.
  LocalEngines(const engine::EngineOptions& options, int count);
  // Router first, then the servers (their exchanges hold the engines), then the engines.
  ~LocalEngines();
  LocalEngines(const LocalEngines&) = delete;
  LocalEngines& operator=(const LocalEngines&) = delete;

  Router& router() { return *router_; }
  std::vector<std::unique_ptr<engine::Engine>>& engines() { return engines_; }
  std::vector<std::string> urls() const;

 private:
  std::vector<std::unique_ptr<engine::Engine>> engines_;
  std::vector<std::unique_ptr<EngineServer>> servers_;
  std::unique_ptr<Router> router_;
};

}  // namespace ooze::serving
