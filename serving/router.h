// The router in front of several engine servers (`ooze serve`), in the mould of SGLang's
// router; usable in-process by the RL loop and served over HTTP by RouterServer.
//
//   RouterOptions options;
//   options.engine_urls = {"http://127.0.0.1:30000", "http://127.0.0.1:30001"};
//   Router router(options);
//   nlohmann::json out = router.generate({{"text", "1 + 1 ="},
//                                         {"sampling_params", {{"max_new_tokens", 8}}}});
//
// Choosing an engine:
//   affinity     a request's routing key (RouteOptions::routing_key, else a hash of its prompt:
//                `text`, `input_ids`, `prompt` or `messages`) goes to the engine that the
//                key's first request went to, for as long as that engine is alive, so the n
//                samples of a prompt, sent as n requests, share that engine's prefix cache
//   least load   a new key (or a request without a prompt) goes to the live engine with the
//                fewest outstanding requests; ties go round the engines in turn
// Health: an engine whose connection fails leaves the rotation at once; every engine's
// GET /health is checked every health_check_interval_s (and once before the constructor
// returns), and an engine out of the rotation rejoins when /health answers 200 again.
// A request whose engine fails throws EngineFailedError naming the engine's URL, or, when the
// caller allows it (RouteOptions::retry), is sent to another live engine; a response that has
// already started streaming to the caller is never retried.
// An engine restarted at a new URL takes its old one's place with replace_engine(): requests in
// flight to the old URL end as they would have, and their failures no longer count against it.
//
// All methods are safe to call from any thread; each call blocks its own thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "serving/http_client.h"

namespace ooze::serving {

// The engine a request was sent to failed (its connection broke, or it did not answer in
// time) and the request was not retried elsewhere. url() names the engine.
class EngineFailedError : public Error {
 public:
  EngineFailedError(std::string url, const std::string& message)
      : Error(message), url_(std::move(url)) {}
  const std::string& url() const { return url_; }

 private:
  std::string url_;
};

// Every engine is out of the rotation; the message lists them with their last errors.
class NoLiveEngineError : public Error {
 public:
  using Error::Error;
};

// An engine answered with an error status (the request itself was refused: a bad field, an
// unknown model, ...). Thrown by the calls that return parsed JSON (generate()).
class EngineResponseError : public Error {
 public:
  EngineResponseError(std::string url, int status, const std::string& message)
      : Error(message), url_(std::move(url)), status_(status) {}
  const std::string& url() const { return url_; }
  int status() const { return status_; }

 private:
  std::string url_;
  int status_;
};

struct RouterOptions {
  std::vector<std::string> engine_urls;  // "http://host:port" of each engine server
  std::string engine_api_key;  // sent to the engines as "Authorization: Bearer KEY" when set
  double health_check_interval_s = 10.0;
  double health_check_timeout_s = 5.0;
  double connect_timeout_s = 5.0;
  double request_timeout_s = 1800.0;  // a whole response; for a stream, the longest silence
  size_t max_affinity_keys = 100000;  // remembered routing keys; the least recently used go
};

struct RouteOptions {
  // When the chosen engine fails before the response started, send the request to another
  // live engine instead of failing (the first engine may have done some of the work).
  bool retry = false;
  // Requests with the same key go to the same engine; empty: the hash of the prompt.
  std::string routing_key;
};

struct EngineStatus {
  std::string url;
  bool alive = false;
  int64_t outstanding = 0;  // requests sent to it and not yet answered
  int64_t routed = 0;       // requests sent to it since the router started
  int64_t failed = 0;       // requests that failed because it did (connection, timeout)
  std::string last_error;   // why it last left the rotation; empty if it never did
};

struct RoutedResponse {
  HttpResponse response;
  std::string engine_url;  // the engine that answered
};

// One engine's answer to a broadcast.
struct BroadcastResult {
  std::string engine_url;
  int status = 0;    // 0 when it could not be reached
  std::string body;  // the response body, or the error
  bool ok() const { return status >= 200 && status < 300; }
};

class Router {
 public:
  // Checks every engine's /health once (in parallel) and starts the periodic checks. Engines
  // that do not answer start out of the rotation. Throws ConfigError for no or malformed URLs.
  explicit Router(RouterOptions options);
  ~Router();
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  // POST /generate (SGLang's native API) on the chosen engine; returns its JSON answer.
  // Throws EngineResponseError for an error status, EngineFailedError, NoLiveEngineError.
  nlohmann::json generate(const nlohmann::json& body, const RouteOptions& options = {});
  // generate() on a thread of its own.
  std::future<nlohmann::json> generate_async(nlohmann::json body, RouteOptions options = {});
  // generate() with "stream": true: on_chunk gets each streamed JSON object as it arrives
  // (return false to stop: the engine then aborts the request); returns the last one.
  nlohmann::json generate_stream(const nlohmann::json& body,
                                 const std::function<bool(const nlohmann::json&)>& on_chunk,
                                 const RouteOptions& options = {});

  // POST `path` with a JSON body to the chosen engine; any status is returned as it came.
  RoutedResponse forward(const std::string& path, const nlohmann::json& body,
                         const RouteOptions& options = {});
  // forward() for a streamed answer: an event stream's events go to on_event as they arrive
  // (the returned response then has an empty body); any other answer is returned whole.
  RoutedResponse forward_streaming(const std::string& path, const nlohmann::json& body,
                                   const SseEventHandler& on_event,
                                   const RouteOptions& options = {});
  // GET `path` from the least loaded live engine, trying the others if it fails.
  RoutedResponse get_from_any(const std::string& path);

  // POST `path` with the body to every engine at once (engines out of the rotation too: a
  // pause or a cache flush must not miss one that is coming back); results in engine order.
  std::vector<BroadcastResult> broadcast(const std::string& path, const nlohmann::json& body);

  std::vector<EngineStatus> engines() const;
  // One round of health checks now, on the calling thread (what the periodic check does).
  void check_health();

  // Engine `index` now serves at `url` (a restarted engine's new server): it is checked at once
  // and joins the rotation when its /health answers 200 (returns whether it did; else the
  // periodic check brings it in later). Its routing keys stay with it. Throws ConfigError for
  // an index out of range or a malformed URL, or a URL another engine has.
  bool replace_engine(size_t index, const std::string& url);

  // The affinity key of a request body: "key:" + routing_key when given, else the prompt
  // field that is present; empty when there is none (no affinity).
  static std::string affinity_key(const nlohmann::json& body, const std::string& routing_key);

 private:
  struct Engine;
  class Lease;
  // An engine as one request or check found it: its URL may change (replace_engine) while the
  // request is in flight, so the request keeps the client it started with.
  struct Chosen {
    size_t index = 0;
    std::shared_ptr<HttpClient> client;
    std::string url;
    uint64_t generation = 0;  // Engine::generation when chosen
  };

  // Picks an engine (see the top of this file) and counts the request as outstanding on it.
  Chosen choose_engine(const std::string& key, const std::vector<size_t>& excluded);
  Chosen snapshot_locked(size_t index) const;
  void release(size_t engine);
  // Takes the engine out of the rotation, unless it was replaced since `chosen` was taken.
  void mark_failed(const Chosen& chosen, const std::string& error);
  // GET /health: "" when it answered 200, else why not.
  std::string probe_health(const Chosen& engine) const;
  // Puts the engine in or out of the rotation after a probe that started at `failure_epoch`.
  void apply_health(const Chosen& engine, uint64_t failure_epoch, const std::string& problem);
  std::string describe_engines_locked() const;
  HttpRequest engine_request(const std::string& method, const std::string& path,
                             std::string body) const;
  RoutedResponse route(const nlohmann::json& body, const RouteOptions& options,
                       const std::string& path, const SseEventHandler* on_event);
  void health_loop();

  RouterOptions options_;
  std::vector<std::unique_ptr<Engine>> engines_;

  mutable std::mutex mutex_;  // guards engine states, the affinity table and the turn
  size_t next_turn_ = 0;      // where the search for the least loaded engine starts
  // Hash of a routing key -> engine index, most recently used first (at most
  // max_affinity_keys; the hash keeps the table small however long the prompts are).
  std::list<std::pair<uint64_t, size_t>> affinity_order_;
  std::unordered_map<uint64_t, std::list<std::pair<uint64_t, size_t>>::iterator> affinity_;

  std::mutex health_mutex_;
  std::condition_variable health_wake_;
  bool stopping_ = false;
  std::thread health_thread_;
};

}  // namespace ooze::serving
