#include "serving/router.h"

#include <chrono>
#include <set>

#include "core/logging.h"

namespace ooze::serving {

using nlohmann::json;

namespace {

std::chrono::milliseconds to_duration(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

// The message of an engine's error answer: SGLang's {"error": {"message"}} or
// {"error": "..."}, FastAPI's {"detail"}, or the body itself.
std::string error_text(const std::string& body) {
  const json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_object()) {
    if (parsed.contains("error")) {
      const json& error = parsed["error"];
      if (error.is_object() && error.contains("message") && error["message"].is_string()) {
        return error["message"].get<std::string>();
      }
      if (error.is_string()) return error.get<std::string>();
    }
    if (parsed.contains("detail") && parsed["detail"].is_string()) {
      return parsed["detail"].get<std::string>();
    }
    if (parsed.contains("message") && parsed["message"].is_string()) {
      return parsed["message"].get<std::string>();
    }
  }
  return body.size() > 500 ? body.substr(0, 500) + "..." : body;
}

}  // namespace

struct Router::Engine {
  std::string url;
  std::shared_ptr<HttpClient> client;
  // Grows with every replace_engine(): failures of requests sent to an earlier URL are not
  // this engine's.
  uint64_t generation = 0;
  bool alive = false;
  int64_t outstanding = 0;
  int64_t routed = 0;
  int64_t failed = 0;
  std::string last_error;
  // Counts failures, so that a health check that began before a failure cannot put the
  // engine back on the strength of an answer it got before the engine failed.
  uint64_t failure_epoch = 0;
};

// A request counted as outstanding on its engine until it is answered.
class Router::Lease {
 public:
  Lease(Router& router, size_t engine) : router_(router), engine_(engine) {}
  ~Lease() { router_.release(engine_); }
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;

 private:
  Router& router_;
  size_t engine_;
};

Router::Router(RouterOptions options) : options_(std::move(options)) {
  if (options_.engine_urls.empty()) {
    throw ConfigError("the router needs at least one engine URL (--engine http://HOST:PORT)");
  }
  if (!(options_.health_check_interval_s > 0) || !(options_.health_check_timeout_s > 0) ||
      !(options_.connect_timeout_s > 0) || !(options_.request_timeout_s > 0)) {
    throw ConfigError(
        "router: the health check interval and every timeout must be positive numbers of "
        "seconds");
  }
  std::set<std::string> seen;
  HttpClientOptions client_options;
  client_options.connect_timeout = to_duration(options_.connect_timeout_s);
  for (const std::string& url : options_.engine_urls) {
    auto engine = std::make_unique<Engine>();
    engine->client = std::make_shared<HttpClient>(url, client_options);
    engine->url = engine->client->url().to_string();
    if (!seen.insert(engine->url).second) {
      throw ConfigError("router: engine " + engine->url + " is given twice");
    }
    engines_.push_back(std::move(engine));
  }
  check_health();
  health_thread_ = std::thread([this] { health_loop(); });
}

Router::~Router() {
  {
    std::lock_guard<std::mutex> lock(health_mutex_);
    stopping_ = true;
  }
  health_wake_.notify_all();
  if (health_thread_.joinable()) health_thread_.join();
}

std::string Router::affinity_key(const json& body, const std::string& routing_key) {
  if (!routing_key.empty()) return "key:" + routing_key;
  if (!body.is_object()) return "";
  for (const char* field : {"text", "input_ids", "prompt", "messages"}) {
    const auto it = body.find(field);
    if (it != body.end() && !it->is_null()) return std::string(field) + ":" + it->dump();
  }
  return "";
}

Router::Chosen Router::snapshot_locked(size_t index) const {
  const Engine& engine = *engines_[index];
  return Chosen{index, engine.client, engine.url, engine.generation};
}

Router::Chosen Router::choose_engine(const std::string& key, const std::vector<size_t>& excluded) {
  auto usable = [&](size_t index) {
    return engines_[index]->alive &&
           std::find(excluded.begin(), excluded.end(), index) == excluded.end();
  };
  const uint64_t key_hash = std::hash<std::string>()(key);
  std::lock_guard<std::mutex> lock(mutex_);
  std::optional<size_t> chosen;
  auto remembered = key.empty() ? affinity_.end() : affinity_.find(key_hash);
  if (remembered != affinity_.end() && usable(remembered->second->second)) {
    chosen = remembered->second->second;
    affinity_order_.splice(affinity_order_.begin(), affinity_order_, remembered->second);
  } else {
    const size_t count = engines_.size();
    for (size_t step = 0; step < count; ++step) {
      const size_t index = (next_turn_ + step) % count;
      if (!usable(index)) continue;
      if (!chosen || engines_[index]->outstanding < engines_[*chosen]->outstanding) {
        chosen = index;
      }
    }
    if (!chosen) throw NoLiveEngineError("no engine is alive: " + describe_engines_locked());
    next_turn_ = (*chosen + 1) % count;
    if (!key.empty()) {
      if (remembered != affinity_.end()) {
        remembered->second->second = *chosen;
        affinity_order_.splice(affinity_order_.begin(), affinity_order_, remembered->second);
      } else {
        affinity_order_.emplace_front(key_hash, *chosen);
        affinity_[key_hash] = affinity_order_.begin();
        if (affinity_order_.size() > options_.max_affinity_keys) {
          affinity_.erase(affinity_order_.back().first);
          affinity_order_.pop_back();
        }
      }
    }
  }
  Engine& engine = *engines_[*chosen];
  ++engine.outstanding;
  ++engine.routed;
  return snapshot_locked(*chosen);
}

void Router::release(size_t engine) {
  std::lock_guard<std::mutex> lock(mutex_);
  --engines_[engine]->outstanding;
}

void Router::mark_failed(const Chosen& chosen, const std::string& error) {
  std::lock_guard<std::mutex> lock(mutex_);
  Engine& engine = *engines_[chosen.index];
  if (engine.generation != chosen.generation) return;  // its old URL failed, not the new one
  ++engine.failed;
  ++engine.failure_epoch;
  engine.last_error = error;
  if (engine.alive) {
    OOZE_LOG(WARN) << "router: engine " << engine.url
                   << " leaves the rotation until its /health answers: " << error;
  }
  engine.alive = false;
}

std::string Router::describe_engines_locked() const {
  std::string text;
  for (const auto& engine : engines_) {
    if (!text.empty()) text += "; ";
    text += engine->url + (engine->alive ? " (alive)" : " (out of the rotation");
    if (!engine->alive) {
      text += engine->last_error.empty() ? ")" : ": " + engine->last_error + ")";
    }
  }
  return text;
}

HttpRequest Router::engine_request(const std::string& method, const std::string& path,
                                   std::string body) const {
  HttpRequest request;
  request.method = method;
  request.target = path;
  request.body = std::move(body);
  request.timeout = to_duration(options_.request_timeout_s);
  if (!options_.engine_api_key.empty()) {
    request.headers.emplace_back("Authorization", "Bearer " + options_.engine_api_key);
  }
  return request;
}

RoutedResponse Router::route(const json& body, const RouteOptions& options, const std::string& path,
                             const SseEventHandler* on_event) {
  const std::string key = affinity_key(body, options.routing_key);
  const std::string payload = body.dump();
  std::vector<size_t> failed;
  std::string last_failure;
  std::string last_failed_url;
  while (true) {
    Chosen engine;
    try {
      engine = choose_engine(key, failed);
    } catch (const NoLiveEngineError&) {
      if (failed.empty()) throw;
      throw EngineFailedError(last_failed_url,
                              last_failure + "; no other engine is alive to retry on");
    }
    Lease lease(*this, engine.index);
    bool streamed = false;  // some of the response has reached the caller
    try {
      const HttpRequest request = engine_request("POST", path, payload);
      if (on_event == nullptr) return {engine.client->send(request), engine.url};
      SseEventHandler relay = [&](const SseEvent& event) {
        streamed = true;
        return (*on_event)(event);
      };
      return {engine.client->send_streaming(request, relay), engine.url};
    } catch (const HttpError& e) {
      // A slow answer is not a dead engine (the health check decides that), and the engine
      // may still be working on the request: such a request is neither retried nor does its
      // engine leave the rotation.
      const bool slow = dynamic_cast<const HttpTimeoutError*>(&e) != nullptr && e.step() == "read";
      if (slow) {
        std::lock_guard<std::mutex> lock(mutex_);
        ++engines_[engine.index]->failed;
      } else {
        mark_failed(engine, e.what());
      }
      last_failure = "engine " + engine.url + " failed: " + e.what();
      last_failed_url = engine.url;
      if (streamed) {
        throw EngineFailedError(engine.url, last_failure +
                                                " (its response had started streaming, so the "
                                                "request is not retried)");
      }
      if (slow) throw EngineFailedError(engine.url, last_failure);
      if (!options.retry) {
        throw EngineFailedError(
            engine.url, last_failure +
                            "; it is out of the rotation until its /health answers again "
                            "(RouteOptions::retry, or `ooze router --retry-on-engine-failure`, "
                            "sends such requests to another engine)");
      }
      OOZE_LOG(WARN) << "router: " << last_failure << "; retrying on another engine";
      failed.push_back(engine.index);
    }
  }
}

RoutedResponse Router::forward(const std::string& path, const json& body,
                               const RouteOptions& options) {
  return route(body, options, path, nullptr);
}

RoutedResponse Router::forward_streaming(const std::string& path, const json& body,
                                         const SseEventHandler& on_event,
                                         const RouteOptions& options) {
  return route(body, options, path, &on_event);
}

json Router::generate(const json& body, const RouteOptions& options) {
  RoutedResponse routed = forward("/generate", body, options);
  const HttpResponse& response = routed.response;
  if (!response.ok()) {
    throw EngineResponseError(routed.engine_url, response.status,
                              "engine " + routed.engine_url + " answered " +
                                  std::to_string(response.status) +
                                  " to POST /generate: " + error_text(response.body));
  }
  json parsed = json::parse(response.body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    throw FormatError(
        "engine " + routed.engine_url +
        " answered POST /generate with a body that is not JSON: " + error_text(response.body));
  }
  return parsed;
}

std::future<json> Router::generate_async(json body, RouteOptions options) {
  return std::async(std::launch::async,
                    [this, body = std::move(body), options = std::move(options)] {
                      return generate(body, options);
                    });
}

json Router::generate_stream(const json& body, const std::function<bool(const json&)>& on_chunk,
                             const RouteOptions& options) {
  json streamed_body = body;
  streamed_body["stream"] = true;
  json last;
  std::string streamed_error;  // an error the engine reported inside the stream
  const SseEventHandler on_event = [&](const SseEvent& event) {
    if (event.data == "[DONE]") return true;
    json chunk = json::parse(event.data, nullptr, /*allow_exceptions=*/false);
    if (chunk.is_discarded()) {
      throw FormatError("an engine streamed an event that is not JSON: " + event.data);
    }
    if (chunk.is_object() && chunk.contains("error")) {
      streamed_error = error_text(event.data);
      return false;
    }
    last = std::move(chunk);
    return on_chunk(last);
  };
  RoutedResponse routed = forward_streaming("/generate", streamed_body, on_event, options);
  const HttpResponse& response = routed.response;
  if (!response.ok() || !streamed_error.empty()) {
    throw EngineResponseError(
        routed.engine_url, response.status,
        "engine " + routed.engine_url + " answered " + std::to_string(response.status) +
            " to POST /generate: " +
            (streamed_error.empty() ? error_text(response.body) : streamed_error));
  }
  if (!response.is_event_stream()) {  // answered whole after all
    last = json::parse(response.body, nullptr, /*allow_exceptions=*/false);
    if (last.is_discarded()) {
      throw FormatError(
          "engine " + routed.engine_url +
          " answered POST /generate with a body that is not JSON: " + error_text(response.body));
    }
    on_chunk(last);
  }
  return last;
}

RoutedResponse Router::get_from_any(const std::string& path) {
  std::vector<size_t> failed;
  while (true) {
    Chosen engine;
    try {
      engine = choose_engine("", failed);
    } catch (const NoLiveEngineError& e) {
      if (failed.empty()) throw;
      throw NoLiveEngineError(std::string("GET ") + path + " failed on every engine: " + e.what());
    }
    Lease lease(*this, engine.index);
    try {
      return {engine.client->send(engine_request("GET", path, "")), engine.url};
    } catch (const HttpError& e) {
      mark_failed(engine, e.what());  // a GET changes nothing: always safe to try the next one
      failed.push_back(engine.index);
    }
  }
}

std::vector<BroadcastResult> Router::broadcast(const std::string& path, const json& body) {
  const std::string payload = body.dump();
  std::vector<Chosen> targets;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t index = 0; index < engines_.size(); ++index) {
      targets.push_back(snapshot_locked(index));
    }
  }
  std::vector<std::future<BroadcastResult>> pending;
  for (const Chosen& engine : targets) {
    pending.push_back(std::async(std::launch::async, [this, &engine, &path, &payload] {
      BroadcastResult result;
      result.engine_url = engine.url;
      try {
        const HttpResponse response = engine.client->send(engine_request("POST", path, payload));
        result.status = response.status;
        result.body = response.body;
      } catch (const HttpError& e) {
        mark_failed(engine, e.what());
        result.body = e.what();
      }
      return result;
    }));
  }
  std::vector<BroadcastResult> results;
  for (auto& future : pending) results.push_back(future.get());
  return results;
}

std::vector<EngineStatus> Router::engines() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<EngineStatus> statuses;
  for (const auto& engine : engines_) {
    EngineStatus status;
    status.url = engine->url;
    status.alive = engine->alive;
    status.outstanding = engine->outstanding;
    status.routed = engine->routed;
    status.failed = engine->failed;
    status.last_error = engine->last_error;
    statuses.push_back(std::move(status));
  }
  return statuses;
}

std::string Router::probe_health(const Chosen& engine) const {
  HttpRequest request = engine_request("GET", "/health", "");
  request.timeout = to_duration(options_.health_check_timeout_s);
  try {
    const HttpResponse response = engine.client->send(request);
    if (response.ok()) return "";
    return "GET " + engine.url + "/health answered " + std::to_string(response.status) + ": " +
           error_text(response.body);
  } catch (const HttpError& e) {
    return e.what();
  }
}

void Router::apply_health(const Chosen& checked, uint64_t failure_epoch,
                          const std::string& problem) {
  std::lock_guard<std::mutex> lock(mutex_);
  Engine& engine = *engines_[checked.index];
  if (engine.generation != checked.generation) return;  // replaced meanwhile: checked its old URL
  if (problem.empty()) {
    if (!engine.alive && engine.failure_epoch == failure_epoch) {
      engine.alive = true;
      OOZE_LOG(INFO) << "router: engine " << engine.url << " is in the rotation";
    }
  } else {
    if (engine.alive) {
      OOZE_LOG(WARN) << "router: engine " << engine.url
                     << " leaves the rotation until its /health answers: " << problem;
    }
    engine.alive = false;
    engine.last_error = problem;
  }
}

void Router::check_health() {
  std::vector<Chosen> targets;
  std::vector<uint64_t> epochs;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t index = 0; index < engines_.size(); ++index) {
      targets.push_back(snapshot_locked(index));
      epochs.push_back(engines_[index]->failure_epoch);
    }
  }
  // Checked in parallel, so one hung engine delays the round by one timeout, not one each.
  std::vector<std::future<std::string>> checks;  // "" when healthy, else why not
  for (const Chosen& engine : targets) {
    checks.push_back(
        std::async(std::launch::async, [this, &engine] { return probe_health(engine); }));
  }
  for (size_t index = 0; index < targets.size(); ++index) {
    apply_health(targets[index], epochs[index], checks[index].get());
  }
}

bool Router::replace_engine(size_t index, const std::string& url) {
  HttpClientOptions client_options;
  client_options.connect_timeout = to_duration(options_.connect_timeout_s);
  auto client = std::make_shared<HttpClient>(url, client_options);  // ConfigError if malformed
  const std::string normalized = client->url().to_string();
  Chosen replaced;
  uint64_t epoch = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (index >= engines_.size()) {
      throw ConfigError("router: replace_engine(" + std::to_string(index) + ", " + url +
                        "): there are only " + std::to_string(engines_.size()) + " engines");
    }
    for (size_t other = 0; other < engines_.size(); ++other) {
      if (other != index && engines_[other]->url == normalized) {
        throw ConfigError("router: replace_engine(" + std::to_string(index) + ", " + url +
                          "): engine " + std::to_string(other) + " already serves there");
      }
    }
    Engine& engine = *engines_[index];
    OOZE_LOG(INFO) << "router: engine " << index << " moves from " << engine.url << " to "
                   << normalized;
    engine.url = normalized;
    engine.client = std::move(client);
    ++engine.generation;
    ++engine.failure_epoch;  // a check of the old URL under way cannot vouch for the new one
    engine.alive = false;
    engine.last_error = "replaced; not checked yet";
    replaced = snapshot_locked(index);
    epoch = engine.failure_epoch;
  }
  apply_health(replaced, epoch, probe_health(replaced));
  std::lock_guard<std::mutex> lock(mutex_);
  return engines_[index]->alive && engines_[index]->generation == replaced.generation;
}

void Router::health_loop() {
  const auto interval = to_duration(options_.health_check_interval_s);
  std::unique_lock<std::mutex> lock(health_mutex_);
  while (!health_wake_.wait_for(lock, interval, [this] { return stopping_; })) {
    lock.unlock();
    check_health();
    lock.lock();
  }
}

}  // namespace ooze::serving
