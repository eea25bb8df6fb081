#include "serving/router_server.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/logging.h"

namespace ooze::serving {

using nlohmann::json;

namespace {

// How long stopping waits for forwarded requests still waiting for their engines; the threads
// of any left finish on their own (they share the Router).
constexpr std::chrono::seconds kShutdownWait(10);

// An engine's answer as JSON when it is JSON, else as the text it was.
json as_json(const std::string& body) {
  json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
  return parsed.is_discarded() ? json(body) : parsed;
}

std::string error_event(const std::string& message, int code) {
  return json{{"error", {{"message", message}, {"type", "server_error"}, {"code", code}}}}.dump();
}

}  // namespace

// The Router and the count of forwarded requests in flight, owned jointly by the server and
// the threads that wait for engines, so a thread may outlive the server.
struct RouterServer::Shared {
  explicit Shared(std::shared_ptr<Router> router) : router(std::move(router)) {}
  std::shared_ptr<Router> router;
  std::mutex mutex;
  std::condition_variable idle;
  int64_t in_flight = 0;
};

RouterServer::RouterServer(RouterServerOptions options)
    : options_(std::move(options)),
      shared_(std::make_shared<Shared>(std::make_shared<Router>(options_.router))) {
  server_ = std::make_unique<HttpServer>(options_.server, routes().handler());
}

RouterServer::RouterServer(ServerOptions server, std::shared_ptr<Router> router)
    : shared_(std::make_shared<Shared>(std::move(router))) {
  options_.server = std::move(server);
  server_ = std::make_unique<HttpServer>(options_.server, routes().handler());
}

RouterServer::~RouterServer() {
  server_->stop();
  std::unique_lock<std::mutex> lock(shared_->mutex);
  if (!shared_->idle.wait_for(lock, kShutdownWait, [this] { return shared_->in_flight == 0; })) {
    OOZE_LOG(WARN) << "router: stopping with " << shared_->in_flight
                   << " forwarded requests still waiting for their engines";
  }
}

Router& RouterServer::router() { return *shared_->router; }

HttpRoutes RouterServer::routes() {
  HttpRoutes routes;
  for (const char* path : {"/generate", "/v1/completions", "/v1/chat/completions"}) {
    routes.add("POST", path, [this](std::shared_ptr<HttpExchange> exchange) { forward(exchange); });
  }
  for (const char* path : {"/v1/models", "/get_model_info"}) {
    routes.add("GET", path,
               [this](std::shared_ptr<HttpExchange> exchange) { get_from_any(exchange); });
  }
  for (const char* path :
       {"/flush_cache", "/abort_request", "/pause_generation", "/continue_generation"}) {
    routes.add("POST", path,
               [this](std::shared_ptr<HttpExchange> exchange) { broadcast(exchange); });
  }
  routes.add("GET", "/health",
             [this](std::shared_ptr<HttpExchange> exchange) { health(exchange); });
  routes.add("GET", "/list_engines",
             [this](std::shared_ptr<HttpExchange> exchange) { list_engines(exchange); });
  return routes;
}

void RouterServer::run_detached(std::function<void(Router&)> work) {
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    ++shared_->in_flight;
  }
  std::thread([shared = shared_, work = std::move(work)] {
    try {
      work(*shared->router);
    } catch (const std::exception& e) {
      OOZE_LOG(ERROR) << "router: " << e.what();
    }
    std::lock_guard<std::mutex> lock(shared->mutex);
    --shared->in_flight;
    shared->idle.notify_all();
  }).detach();
}

void RouterServer::forward(const std::shared_ptr<HttpExchange>& exchange) {
  json body = json::parse(exchange->body(), nullptr, /*allow_exceptions=*/false);
  if (!body.is_object()) {
    exchange->respond_error(
        400, "the request body of POST " + exchange->path() + " must be a JSON object");
    return;
  }
  RouteOptions route;
  route.retry = options_.retry_on_engine_failure;
  route.routing_key = exchange->header("X-Routing-Key");
  const auto stream_field = body.find("stream");
  const bool stream =
      stream_field != body.end() && stream_field->is_boolean() && stream_field->get<bool>();
  run_detached([exchange, body = std::move(body), route, stream](Router& router) {
    bool started = false;  // the relayed stream's headers went out
    try {
      RoutedResponse routed;
      if (!stream) {
        routed = router.forward(exchange->path(), body, route);
      } else {
        routed = router.forward_streaming(
            exchange->path(), body,
            [&](const SseEvent& event) {
              started = true;
              return exchange->send_bytes(encode_sse_event(event));  // false once the client left
            },
            route);
      }
      const HttpResponse& response = routed.response;
      if (response.is_event_stream()) {
        if (!started) exchange->start_stream(response.status, response.content_type);
        exchange->finish();
        return;
      }
      exchange->respond(response.status,
                        response.content_type.empty() ? "application/json" : response.content_type,
                        response.body, {{"X-Ooze-Engine", routed.engine_url}});
    } catch (const EngineFailedError& e) {
      if (started) {
        exchange->send_event(error_event(e.what(), 502));
        exchange->finish();
      } else {
        exchange->respond_error(502, e.what());
      }
    } catch (const NoLiveEngineError& e) {
      exchange->respond_error(503, e.what());
    } catch (const std::exception& e) {
      if (started) {
        exchange->send_event(error_event(e.what(), 500));
        exchange->finish();
      } else {
        exchange->respond_error(500, e.what());
      }
    }
  });
}

void RouterServer::get_from_any(const std::shared_ptr<HttpExchange>& exchange) {
  run_detached([exchange](Router& router) {
    try {
      const RoutedResponse routed = router.get_from_any(exchange->target());
      const HttpResponse& response = routed.response;
      exchange->respond(response.status,
                        response.content_type.empty() ? "application/json" : response.content_type,
                        response.body, {{"X-Ooze-Engine", routed.engine_url}});
    } catch (const NoLiveEngineError& e) {
      exchange->respond_error(503, e.what());
    } catch (const std::exception& e) {
      exchange->respond_error(500, e.what());
    }
  });
}

void RouterServer::broadcast(const std::shared_ptr<HttpExchange>& exchange) {
  json body = json::object();
  if (!exchange->body().empty()) {
    body = json::parse(exchange->body(), nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded()) {
      exchange->respond_error(
          400, "the request body of POST " + exchange->path() + " is not valid JSON");
      return;
    }
  }
  run_detached([exchange, body = std::move(body)](Router& router) {
    const std::vector<BroadcastResult> results = router.broadcast(exchange->path(), body);
    json engines = json::array();
    bool all_ok = true;
    for (const BroadcastResult& result : results) {
      all_ok = all_ok && result.ok();
      engines.push_back({{"url", result.engine_url},
                         {"status", result.status},
                         {"response", as_json(result.body)}});
    }
    exchange->respond(all_ok ? 200 : 502, "application/json", json{{"engines", engines}}.dump());
  });
}

void RouterServer::health(const std::shared_ptr<HttpExchange>& exchange) {
  std::vector<std::string> alive;
  std::string out;
  for (const EngineStatus& engine : shared_->router->engines()) {
    if (engine.alive) {
      alive.push_back(engine.url);
    } else {
      out += (out.empty() ? "" : "; ") + engine.url + ": " +
             (engine.last_error.empty() ? "not checked yet" : engine.last_error);
    }
  }
  if (alive.empty()) {
    exchange->respond_error(503, "no engine is in the rotation: " + out);
    return;
  }
  exchange->respond(200, "application/json",
                    json{{"status", "ok"}, {"alive_engines", alive}}.dump());
}

void RouterServer::list_engines(const std::shared_ptr<HttpExchange>& exchange) {
  json engines = json::array();
  for (const EngineStatus& engine : shared_->router->engines()) {
    engines.push_back({{"url", engine.url},
                       {"alive", engine.alive},
                       {"outstanding", engine.outstanding},
                       {"routed", engine.routed},
                       {"failed", engine.failed},
                       {"last_error", engine.last_error}});
  }
  exchange->respond(200, "application/json", json{{"engines", engines}}.dump());
}

}  // namespace ooze::serving
