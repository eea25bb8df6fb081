// The router over HTTP (`ooze router`): clients talk to it as to one engine server.
//
//   POST /generate, /v1/completions, /v1/chat/completions
//        forwarded to the engine the Router chooses (affinity by prompt, else least load;
//        header X-Routing-Key: an explicit affinity key). With "stream": true the engine's
//        event stream is relayed event by event; otherwise the engine's answer is returned as
//        it came, with X-Ooze-Engine naming the engine.
//   GET  /v1/models, /get_model_info
//        from one live engine.
//   POST /flush_cache, /abort_request, /pause_generation, /continue_generation
//        sent to every engine: 200 when all answered 2xx, else 502; the body lists each
//        engine's answer: {"engines": [{"url", "status", "response"}]}.
//   GET  /health
//        the router's own: 200 when at least one engine is in the rotation, else 503 naming
//        the engines and why each is out.
//   GET  /list_engines
//        {"engines": [{"url", "alive", "outstanding", "routed", "failed", "last_error"}]}.
//
// Errors: an engine that fails before answering gives 502 naming its URL (or, with
// retry_on_engine_failure, the request goes to another engine); no live engine gives 503; a
// stream that breaks after it started ends with an error event
// (data: {"error": {"message", "type", "code"}}). The client API key (ServerOptions::api_key)
// guards every path but GET /health; RouterOptions::engine_api_key is sent to the engines.
//
// Forwarded requests each wait for their engine on a thread of their own, so a slow
// generation holds no server thread. A client that leaves a stream stops the relay, and the
// engine sees its connection close.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "serving/http_server.h"
#include "serving/router.h"

namespace ooze::serving {

struct RouterServerOptions {
  ServerOptions server;  // host, port, client API key, limits
  RouterOptions router;  // engines, engine API key, health checks, timeouts
  // Requests whose engine fails before answering are sent to another live engine.
  bool retry_on_engine_failure = false;
};

class RouterServer {
 public:
  // Starts the Router (one health check of every engine) and listens. Throws ConfigError for
  // bad engine URLs, ServerError when the address cannot be bound.
  explicit RouterServer(RouterServerOptions options);
  // Serves `router`, which its owner keeps using (ooze train's, so that the user's functions
  // reach the run's engines over HTTP as they would Slime's router).
  RouterServer(ServerOptions server, std::shared_ptr<Router> router);
  // Stops listening and waits (up to 10 s) for forwarded requests still waiting for their
  // engines; a request whose engine hangs longer finishes on its own thread later.
  ~RouterServer();
  RouterServer(const RouterServer&) = delete;
  RouterServer& operator=(const RouterServer&) = delete;

  std::string url() const { return server_->url(); }
  uint16_t port() const { return server_->port(); }
  Router& router();

 private:
  HttpRoutes routes();
  void forward(const std::shared_ptr<HttpExchange>& exchange);
  void get_from_any(const std::shared_ptr<HttpExchange>& exchange);
  void broadcast(const std::shared_ptr<HttpExchange>& exchange);
  void health(const std::shared_ptr<HttpExchange>& exchange);
  void list_engines(const std::shared_ptr<HttpExchange>& exchange);
  struct Shared;
  // Runs `work` on a thread of its own, counted so the destructor can wait for it.
  void run_detached(std::function<void(Router&)> work);

  RouterServerOptions options_;
  std::shared_ptr<Shared> shared_;
  std::unique_ptr<HttpServer> server_;  // last: it calls into the members above
};

}  // namespace ooze::serving
