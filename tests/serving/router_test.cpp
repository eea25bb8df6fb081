// The router over real sockets. Part one puts it in front of stand-in engines (the real HTTP
// server with canned answers that name the engine) to pin the routing policy down exactly;
// part two puts it in front of real engines serving the tiny model.
#include "serving/router.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "engine/engine.h"
#include "models/tokenizer.h"
#include "serving/engine_server.h"
#include "serving/http_client.h"
#include "serving/http_server.h"
#include "serving/router_server.h"
#include "tests/support/expect_error.h"
#include "tests/support/tiny_model.h"

namespace ooze::serving {
namespace router_test {

using namespace std::chrono_literals;
using nlohmann::json;

// Polls `condition` until it holds or `timeout` passes; returns whether it held.
template <class Condition>
bool eventually(Condition condition, std::chrono::milliseconds timeout = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

// An engine server stand-in: answers /generate (and the OpenAI paths) with {"engine": id,
// "text": the prompt}, streams three events when asked, acknowledges the control paths, and
// counts what it received. It can hold generations unanswered (to pile up outstanding
// requests) and can die in the middle of a stream.
class FakeEngine {
 public:
  explicit FakeEngine(int id, std::string api_key = "") : id_(id), api_key_(std::move(api_key)) {
    start(0);
  }
  ~FakeEngine() { stop(); }

  void start(uint16_t port) {
    HttpRoutes routes;
    routes.add("GET", "/health", [this](std::shared_ptr<HttpExchange> ex) {
      count(ex);
      ex->respond(200, "application/json", "{}");
    });
    routes.add("GET", "/v1/models", [this](std::shared_ptr<HttpExchange> ex) {
      count(ex);
      ex->respond(200, "application/json", json{{"engine", id_}, {"data", json::array()}}.dump());
    });
    for (const char* path : {"/generate", "/v1/completions", "/v1/chat/completions"}) {
      routes.add("POST", path, [this](std::shared_ptr<HttpExchange> ex) { generate(ex); });
    }
    for (const char* path :
         {"/flush_cache", "/abort_request", "/pause_generation", "/continue_generation"}) {
      routes.add("POST", path, [this](std::shared_ptr<HttpExchange> ex) {
        count(ex);
        ex->respond(200, "application/json", json{{"engine", id_}}.dump());
      });
    }
    ServerOptions options;
    options.port = port;
    options.api_key = api_key_;
    server_ = std::make_unique<HttpServer>(options, routes.handler());
    port_ = server_->port();
  }

  void stop() {
    std::vector<std::thread> producers;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
      producers.swap(producers_);
    }
    acks_cv_.notify_all();
    for (std::thread& producer : producers) producer.join();
    if (server_) server_->stop();
    server_.reset();
    std::lock_guard<std::mutex> lock(mutex_);
    held_.clear();
    stopping_ = false;
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  uint16_t port() const { return port_; }
  int id() const { return id_; }

  int calls(const std::string& path) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = calls_.find(path);
    return it == calls_.end() ? 0 : it->second;
  }
  std::string last_authorization() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return last_authorization_;
  }

  // Generations wait unanswered until release_held().
  void hold_generations(bool hold) {
    std::lock_guard<std::mutex> lock(mutex_);
    hold_ = hold;
  }
  size_t held() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return held_.size();
  }
  void release_held() {
    std::vector<std::shared_ptr<HttpExchange>> held;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      held.swap(held_);
      hold_ = false;
    }
    for (auto& ex : held) answer(ex);
  }

  // A stream's events after the first wait for ack() (the reader has handled the previous
  // one), so a relay that held events back shows as ack_timeouts() > 0.
  void ack() {
    std::lock_guard<std::mutex> lock(mutex_);
    ++acks_;
    acks_cv_.notify_all();
  }
  int ack_timeouts() const { return ack_timeouts_; }
  // The next stream stops the whole server after its first event has been acknowledged.
  void die_after_first_event() { die_mid_stream_ = true; }

 private:
  void count(const std::shared_ptr<HttpExchange>& ex) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++calls_[ex->path()];
    last_authorization_ = ex->header("Authorization");
  }

  void answer(const std::shared_ptr<HttpExchange>& ex) {
    const json body = json::parse(ex->body());
    ex->respond(200, "application/json",
                json{{"engine", id_}, {"text", body.value("text", "")}}.dump());
  }

  void generate(const std::shared_ptr<HttpExchange>& ex) {
    count(ex);
    const json body = json::parse(ex->body());
    if (body.value("stream", false)) {
      ex->start_stream();
      std::lock_guard<std::mutex> lock(mutex_);
      producers_.emplace_back([this, ex] { stream(ex); });
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (hold_) {
        held_.push_back(ex);
        return;
      }
    }
    answer(ex);
  }

  void stream(const std::shared_ptr<HttpExchange>& ex) {
    int start_acks = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      start_acks = acks_;
    }
    for (int i = 0; i < 3; ++i) {
      if (i > 0) {
        std::unique_lock<std::mutex> lock(mutex_);
        if (!acks_cv_.wait_for(lock, 5s, [&] { return acks_ >= start_acks + i || stopping_; })) {
          ++ack_timeouts_;
        }
      }
      if (i == 1 && die_mid_stream_.exchange(false)) {
        server_->stop();
        return;
      }
      if (!ex->send_event(json{{"engine", id_}, {"i", i}}.dump())) return;
    }
    ex->send_event("[DONE]");
    ex->finish();
  }

  const int id_;
  const std::string api_key_;
  std::unique_ptr<HttpServer> server_;
  uint16_t port_ = 0;
  mutable std::mutex mutex_;
  std::map<std::string, int> calls_;
  std::string last_authorization_;
  bool hold_ = false;
  std::vector<std::shared_ptr<HttpExchange>> held_;
  std::vector<std::thread> producers_;
  std::condition_variable acks_cv_;
  int acks_ = 0;
  bool stopping_ = false;
  std::atomic<int> ack_timeouts_{0};
  std::atomic<bool> die_mid_stream_{false};
};

class RouterTest : public ::testing::Test {
 protected:
  void start_engines(int count, const std::string& api_key = "") {
    for (int i = 0; i < count; ++i) engines_.push_back(std::make_unique<FakeEngine>(i, api_key));
  }
  RouterOptions router_options() const {
    RouterOptions options;
    for (const auto& engine : engines_) options.engine_urls.push_back(engine->url());
    options.health_check_interval_s = 3600;  // the tests check health themselves
    return options;
  }
  FakeEngine& engine_at(const std::string& url) {
    for (auto& engine : engines_) {
      if (engine->url() == url) return *engine;
    }
    throw Error("no engine at " + url);
  }
  static json prompt(const std::string& text) {
    return {{"text", text}, {"sampling_params", {{"max_new_tokens", 4}}}};
  }
  // A routing key whose first request went to the engine at `url`.
  static std::string key_routed_to(Router& router, const std::string& url) {
    for (int i = 0; i < 20; ++i) {
      RouteOptions options;
      options.routing_key = "key-" + std::to_string(i) + "-" + url;
      if (router.forward("/generate", prompt("probe"), options).engine_url == url) {
        return options.routing_key;
      }
    }
    ADD_FAILURE() << "no key went to " << url;
    return "";
  }

  std::vector<std::unique_ptr<FakeEngine>> engines_;
};

TEST_F(RouterTest, ConcurrentDistinctPromptsSpreadByOutstandingRequests) {
  start_engines(3);
  Router router(router_options());
  for (auto& engine : engines_) engine->hold_generations(true);
  std::vector<std::future<json>> results;
  for (int i = 0; i < 12; ++i) {
    results.push_back(router.generate_async(prompt("distinct prompt " + std::to_string(i))));
  }
  ASSERT_TRUE(eventually(
      [&] { return engines_[0]->held() + engines_[1]->held() + engines_[2]->held() == 12; }));
  // Every choice was made while all earlier requests were still outstanding: 4 each.
  for (const EngineStatus& status : router.engines()) {
    EXPECT_TRUE(status.alive);
    EXPECT_EQ(status.outstanding, 4) << status.url;
  }
  for (auto& engine : engines_) EXPECT_EQ(engine->held(), 4u);
  for (auto& engine : engines_) engine->release_held();
  std::map<int, int> answered_by;
  for (auto& result : results) ++answered_by[result.get()["engine"].get<int>()];
  EXPECT_EQ(answered_by, (std::map<int, int>{{0, 4}, {1, 4}, {2, 4}}));
  for (const EngineStatus& status : router.engines()) {
    EXPECT_EQ(status.outstanding, 0);
    EXPECT_EQ(status.routed, 4);
  }
}

TEST_F(RouterTest, RequestsOfOnePromptStayOnOneEngineEvenWhenItIsBusiest) {
  start_engines(3);
  Router router(router_options());
  for (auto& engine : engines_) engine->hold_generations(true);
  std::vector<std::future<json>> results;
  for (int i = 0; i < 6; ++i) results.push_back(router.generate_async(prompt("the same prompt")));
  ASSERT_TRUE(eventually(
      [&] { return engines_[0]->held() + engines_[1]->held() + engines_[2]->held() == 6; }));
  int engines_used = 0;
  for (auto& engine : engines_) engines_used += engine->held() > 0 ? 1 : 0;
  EXPECT_EQ(engines_used, 1) << "the samples of one prompt were split over engines";
  for (auto& engine : engines_) engine->release_held();
  std::set<int> answered_by;
  for (auto& result : results) answered_by.insert(result.get()["engine"].get<int>());
  EXPECT_EQ(answered_by.size(), 1u);

  // Later requests of the prompt, and of token-id and chat prompts, stick the same way.
  const std::string first = router.forward("/generate", prompt("the same prompt")).engine_url;
  const json ids = {{"input_ids", {1, 2, 3}}};
  const json chat = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  const std::string ids_engine = router.forward("/generate", ids).engine_url;
  const std::string chat_engine = router.forward("/v1/chat/completions", chat).engine_url;
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(router.forward("/generate", prompt("the same prompt")).engine_url, first);
    EXPECT_EQ(router.forward("/generate", ids).engine_url, ids_engine);
    EXPECT_EQ(router.forward("/v1/chat/completions", chat).engine_url, chat_engine);
  }
  // An explicit key groups different prompts.
  RouteOptions keyed;
  keyed.routing_key = "group-1";
  const std::string keyed_engine = router.forward("/generate", prompt("a"), keyed).engine_url;
  for (const char* text : {"b", "c", "d"}) {
    EXPECT_EQ(router.forward("/generate", prompt(text), keyed).engine_url, keyed_engine);
  }
}

TEST_F(RouterTest, AffinityKeysComeFromThePromptOrTheExplicitKey) {
  EXPECT_EQ(Router::affinity_key({{"text", "x"}}, ""), "text:\"x\"");
  EXPECT_EQ(Router::affinity_key({{"input_ids", {1, 2}}}, ""), "input_ids:[1,2]");
  EXPECT_EQ(Router::affinity_key({{"prompt", "p"}, {"model", "m"}}, ""), "prompt:\"p\"");
  EXPECT_EQ(Router::affinity_key({{"text", "x"}}, "k"), "key:k");
  EXPECT_EQ(Router::affinity_key({{"rid", "r"}}, ""), "");
  // The n samples of a prompt agree whatever their sampling parameters.
  EXPECT_EQ(Router::affinity_key({{"text", "x"}, {"sampling_params", {{"seed", 1}}}}, ""),
            Router::affinity_key({{"text", "x"}, {"sampling_params", {{"seed", 2}}}}, ""));
}

TEST_F(RouterTest, AFailedEngineLeavesTheRotationAndTheErrorNamesIt) {
  start_engines(2);
  Router router(router_options());
  const std::string key = key_routed_to(router, engines_[1]->url());
  RouteOptions options;
  options.routing_key = key;
  engines_[1]->stop();

  try {
    router.generate(prompt("x"), options);
    ADD_FAILURE() << "expected EngineFailedError";
  } catch (const EngineFailedError& e) {
    EXPECT_EQ(e.url(), engines_[1]->url());
    EXPECT_CONTAINS(e.what(), "engine " + engines_[1]->url() + " failed");
    EXPECT_CONTAINS(e.what(), "could not connect");
  }
  const std::vector<EngineStatus> statuses = router.engines();
  EXPECT_TRUE(statuses[0].alive);
  EXPECT_FALSE(statuses[1].alive);
  EXPECT_EQ(statuses[1].failed, 1);
  EXPECT_EQ(statuses[1].outstanding, 0);
  EXPECT_CONTAINS(statuses[1].last_error, "could not connect");
  // The key's requests now go to the live engine.
  EXPECT_EQ(router.generate(prompt("x"), options)["engine"], 0);
  EXPECT_EQ(router.generate(prompt("fresh"))["engine"], 0);

  // Back on the same port: the next health check puts it back in the rotation.
  engines_[1]->start(engines_[1]->port());
  router.check_health();
  EXPECT_TRUE(router.engines()[1].alive);

  // With retry, a request whose engine is gone is answered by another one.
  const std::string second_key = key_routed_to(router, engines_[1]->url());
  engines_[1]->stop();
  options.routing_key = second_key;
  options.retry = true;
  EXPECT_EQ(router.generate(prompt("y"), options)["engine"], 0);
  EXPECT_FALSE(router.engines()[1].alive);
  EXPECT_EQ(router.engines()[1].failed, 2);

  // Nothing alive: a clear error listing the engines.
  engines_[0]->stop();
  router.check_health();
  const std::string message =
      ooze::testing::error_message_of<NoLiveEngineError>([&] { router.generate(prompt("z")); });
  EXPECT_CONTAINS(message, engines_[0]->url());
  EXPECT_CONTAINS(message, engines_[1]->url());
}

TEST_F(RouterTest, PeriodicHealthChecksTakeEnginesOutAndBringThemBack) {
  start_engines(2);
  RouterOptions options = router_options();
  options.health_check_interval_s = 0.1;
  options.health_check_timeout_s = 1;
  Router router(options);
  EXPECT_TRUE(router.engines()[0].alive && router.engines()[1].alive);
  engines_[0]->stop();
  EXPECT_TRUE(eventually([&] { return !router.engines()[0].alive; }));
  EXPECT_EQ(router.engines()[0].failed, 0) << "no request failed: the health check noticed";
  for (int i = 0; i < 4; ++i) EXPECT_EQ(router.generate(prompt(std::to_string(i)))["engine"], 1);
  engines_[0]->start(engines_[0]->port());
  EXPECT_TRUE(eventually([&] { return router.engines()[0].alive; }));
}

TEST_F(RouterTest, EnginesDownAtStartJoinWhenTheyAnswer) {
  start_engines(2);
  const uint16_t port = engines_[1]->port();
  engines_[1]->stop();
  RouterOptions options = router_options();
  options.health_check_interval_s = 0.1;
  Router router(options);
  EXPECT_FALSE(router.engines()[1].alive);
  engines_[1]->start(port);
  EXPECT_TRUE(eventually([&] { return router.engines()[1].alive; }));
}

TEST_F(RouterTest, AReplacedEngineTakesItsPlaceAtItsNewUrlWithItsKeys) {
  start_engines(2);
  Router router(router_options());
  const std::string old_url = engines_[1]->url();
  const std::string key = key_routed_to(router, old_url);
  engines_[1]->stop();
  router.check_health();
  ASSERT_FALSE(router.engines()[1].alive);

  // The engine comes back at another port (a restarted process), as a new id to tell them apart.
  engines_.push_back(std::make_unique<FakeEngine>(2));
  const std::string new_url = engines_[2]->url();
  ASSERT_NE(new_url, old_url);
  EXPECT_TRUE(router.replace_engine(1, new_url));
  const std::vector<EngineStatus> statuses = router.engines();
  EXPECT_EQ(statuses[1].url, new_url);
  EXPECT_TRUE(statuses[1].alive);
  EXPECT_EQ(statuses[0].url, engines_[0]->url());

  // The key follows engine 1 to its new server; new prompts spread over both again.
  RouteOptions options;
  options.routing_key = key;
  EXPECT_EQ(router.generate(prompt("k"), options)["engine"], 2);
  std::set<int> answered_by;
  for (int i = 0; i < 4; ++i) {
    answered_by.insert(router.generate(prompt("fresh " + std::to_string(i)))["engine"].get<int>());
  }
  EXPECT_EQ(answered_by, (std::set<int>{0, 2}));
  EXPECT_EQ(engines_[2]->calls("/health"), 1) << "checked once, when it was put in";
  EXPECT_EQ(router.broadcast("/flush_cache", json::object())[1].engine_url, new_url);
  EXPECT_EQ(engines_[2]->calls("/flush_cache"), 1);
}

TEST_F(RouterTest, AReplacementThatDoesNotAnswerYetJoinsAtTheNextHealthCheck) {
  start_engines(2);
  Router router(router_options());
  const uint16_t port = engines_[1]->port();
  engines_[1]->stop();
  engines_.push_back(std::make_unique<FakeEngine>(2));
  const uint16_t new_port = engines_[2]->port();
  engines_[2]->stop();
  EXPECT_FALSE(router.replace_engine(1, "http://127.0.0.1:" + std::to_string(new_port)));
  EXPECT_FALSE(router.engines()[1].alive);
  EXPECT_EQ(router.generate(prompt("a"))["engine"], 0);
  engines_[2]->start(new_port);
  router.check_health();
  EXPECT_TRUE(router.engines()[1].alive);
  // The old port answering again does not matter any more: it is not checked.
  engines_[1]->start(port);
  const int old_checks = engines_[1]->calls("/health");
  router.check_health();
  EXPECT_EQ(engines_[1]->calls("/health"), old_checks);
}

TEST_F(RouterTest, AFailureAtTheOldUrlDoesNotTakeTheReplacementOut) {
  start_engines(2);
  Router router(router_options());
  const std::string key = key_routed_to(router, engines_[1]->url());
  engines_[1]->hold_generations(true);
  RouteOptions options;
  options.routing_key = key;
  auto in_flight = router.generate_async(prompt("held"), options);
  ASSERT_TRUE(eventually([&] { return engines_[1]->held() == 1; }));

  engines_.push_back(std::make_unique<FakeEngine>(2));
  ASSERT_TRUE(router.replace_engine(1, engines_[2]->url()));
  engines_[1]->stop();  // the old server dies with the request unanswered
  try {
    in_flight.get();
    ADD_FAILURE() << "expected EngineFailedError";
  } catch (const EngineFailedError& e) {
    EXPECT_EQ(e.url(), engines_[1]->url()) << "the error names the server that failed";
  }
  const std::vector<EngineStatus> statuses = router.engines();
  EXPECT_TRUE(statuses[1].alive) << statuses[1].last_error;
  EXPECT_EQ(statuses[1].failed, 0);
  EXPECT_EQ(statuses[1].outstanding, 0);
  EXPECT_EQ(router.generate(prompt("after"), options)["engine"], 2);
}

TEST_F(RouterTest, ReplacingWhileRequestsRunLosesNone) {
  start_engines(3);
  RouterOptions router_over_two = router_options();
  router_over_two.engine_urls.pop_back();  // engine 2's server is where engine 1 moves to
  Router router(router_over_two);
  std::atomic<bool> done{false};
  std::atomic<int> answered{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      RouteOptions options;
      options.retry = true;
      for (int i = 0; !done; ++i) {
        router.generate(prompt(std::to_string(c) + "/" + std::to_string(i)), options);
        ++answered;
      }
    });
  }
  // Engine 1 moves between two live servers many times while the clients run.
  for (int round = 0; round < 40; ++round) {
    const size_t to = round % 2 == 0 ? 2 : 1;
    EXPECT_TRUE(router.replace_engine(1, engines_[to]->url()));
    std::this_thread::sleep_for(2ms);
  }
  done = true;
  for (std::thread& client : clients) client.join();
  EXPECT_GT(answered.load(), 0);
  for (const EngineStatus& status : router.engines()) {
    EXPECT_EQ(status.outstanding, 0) << status.url;
    EXPECT_EQ(status.failed, 0) << status.url;
  }
}

TEST_F(RouterTest, ReplaceEngineRefusesBadArguments) {
  start_engines(2);
  Router router(router_options());
  using ooze::testing::error_message_of;
  EXPECT_CONTAINS(error_message_of([&] { router.replace_engine(2, "http://127.0.0.1:1"); }),
                  "only 2 engines");
  EXPECT_THROW(router.replace_engine(0, "not a url"), ConfigError);
  EXPECT_CONTAINS(error_message_of([&] { router.replace_engine(0, engines_[1]->url()); }),
                  "engine 1 already serves there");
  EXPECT_EQ(router.engines()[0].url, engines_[0]->url());
  EXPECT_TRUE(router.engines()[0].alive);
}

TEST_F(RouterTest, StreamsAreRelayedEventByEventAndNeverRetriedOnceStarted) {
  start_engines(2);
  Router router(router_options());
  std::vector<json> chunks;
  const json last = router.generate_stream(prompt("stream me"), [&](const json& chunk) {
    chunks.push_back(chunk);
    for (auto& engine : engines_) engine->ack();
    return true;
  });
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(last["i"], 2);
  for (auto& engine : engines_) EXPECT_EQ(engine->ack_timeouts(), 0);

  // The engine dies after its first event: the caller has seen part of the answer, so even
  // with retry the request fails, naming the engine, and no other engine gets it.
  RouteOptions options;
  options.routing_key = key_routed_to(router, engines_[1]->url());
  options.retry = true;
  engines_[1]->die_after_first_event();
  const int other_before = engines_[0]->calls("/generate");
  int seen = 0;
  try {
    router.generate_stream(
        prompt("dies"),
        [&](const json&) {
          ++seen;
          engines_[1]->ack();
          return true;
        },
        options);
    ADD_FAILURE() << "expected EngineFailedError";
  } catch (const EngineFailedError& e) {
    EXPECT_EQ(e.url(), engines_[1]->url());
    EXPECT_CONTAINS(e.what(), "started streaming");
  }
  EXPECT_EQ(seen, 1);
  EXPECT_EQ(engines_[0]->calls("/generate"), other_before);
}

TEST_F(RouterTest, BroadcastReachesEveryEngineAndGetUsesOne) {
  start_engines(3);
  Router router(router_options());
  const std::vector<BroadcastResult> results = router.broadcast("/flush_cache", json::object());
  ASSERT_EQ(results.size(), 3u);
  for (size_t i = 0; i < results.size(); ++i) {
    EXPECT_EQ(results[i].engine_url, engines_[i]->url());
    EXPECT_TRUE(results[i].ok());
    EXPECT_EQ(json::parse(results[i].body)["engine"], static_cast<int>(i));
    EXPECT_EQ(engines_[i]->calls("/flush_cache"), 1);
  }
  engines_[2]->stop();
  const std::vector<BroadcastResult> paused = router.broadcast("/pause_generation", {});
  EXPECT_TRUE(paused[0].ok() && paused[1].ok());
  EXPECT_EQ(paused[2].status, 0);
  EXPECT_CONTAINS(paused[2].body, engines_[2]->url().substr(7));
  EXPECT_FALSE(router.engines()[2].alive);

  const RoutedResponse models = router.get_from_any("/v1/models");
  EXPECT_EQ(models.response.status, 200);
  EXPECT_NE(models.engine_url, engines_[2]->url());
}

TEST_F(RouterTest, BadOptionsAreConfigErrors) {
  EXPECT_CONTAINS(ooze::testing::error_message_of([] { Router router(RouterOptions{}); }),
                  "at least one engine");
  RouterOptions twice;
  twice.engine_urls = {"http://127.0.0.1:1", "127.0.0.1:1"};
  EXPECT_CONTAINS(ooze::testing::error_message_of([&] { Router router(twice); }), "twice");
  RouterOptions bad_interval;
  bad_interval.engine_urls = {"http://127.0.0.1:1"};
  bad_interval.health_check_interval_s = 0;
  EXPECT_CONTAINS(ooze::testing::error_message_of([&] { Router router(bad_interval); }),
                  "positive");
}

// ---- the router over HTTP, in front of the stand-ins ----

class RouterServerTest : public RouterTest {
 protected:
  void start_router(bool retry = false) {
    RouterServerOptions options;
    options.router = router_options();
    options.router.engine_api_key = "engine-key";
    options.server.api_key = "client-key";
    options.retry_on_engine_failure = retry;
    router_ = std::make_unique<RouterServer>(options);
    client_ = std::make_unique<HttpClient>(router_->url());
  }
  HttpResponse call(const std::string& method, const std::string& target, const json& body = {},
                    const std::string& key = "client-key") {
    HttpRequest request;
    request.method = method;
    request.target = target;
    if (!body.is_null()) request.body = body.dump();
    if (!key.empty()) request.headers = {{"Authorization", "Bearer " + key}};
    return client_->send(request);
  }

  std::unique_ptr<RouterServer> router_;
  std::unique_ptr<HttpClient> client_;
};

TEST_F(RouterServerTest, ForwardsWithTheEngineKeyAndChecksTheClientKey) {
  start_engines(2, "engine-key");
  start_router();
  EXPECT_EQ(call("POST", "/generate", prompt("hi"), "").status, 401);
  EXPECT_EQ(call("POST", "/generate", prompt("hi"), "wrong").status, 401);
  const HttpResponse answer = call("POST", "/generate", prompt("hi"));
  ASSERT_EQ(answer.status, 200) << answer.body;
  EXPECT_EQ(json::parse(answer.body)["text"], "hi");
  const std::string engine = answer.header("X-Ooze-Engine");
  EXPECT_EQ(engine_at(engine).last_authorization(), "Bearer engine-key");
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    EXPECT_EQ(call("POST", path, {{"prompt", "p"}}).status, 200) << path;
  }
  EXPECT_EQ(call("GET", "/v1/models").status, 200);
  EXPECT_EQ(call("POST", "/generate", "not an object").status, 400);
  EXPECT_EQ(call("GET", "/health", {}, "").status, 200);
}

TEST_F(RouterServerTest, StreamsPassThroughEventByEvent) {
  start_engines(2, "engine-key");
  start_router();
  HttpRequest request;
  request.method = "POST";
  request.target = "/generate";
  json body = prompt("stream");
  body["stream"] = true;
  request.body = body.dump();
  request.headers = {{"Authorization", "Bearer client-key"}};
  std::vector<std::string> data;
  const HttpResponse response = client_->send_streaming(request, [&](const SseEvent& event) {
    data.push_back(event.data);
    for (auto& engine : engines_) engine->ack();
    return true;
  });
  EXPECT_EQ(response.status, 200);
  EXPECT_TRUE(response.is_event_stream());
  ASSERT_EQ(data.size(), 4u);
  EXPECT_EQ(json::parse(data[2])["i"], 2);
  EXPECT_EQ(data[3], "[DONE]");
  for (auto& engine : engines_) EXPECT_EQ(engine->ack_timeouts(), 0) << "events were held back";
}

TEST_F(RouterServerTest, BroadcastsHealthAndTheEngineList) {
  start_engines(3, "engine-key");
  start_router();
  for (const char* path :
       {"/flush_cache", "/abort_request", "/pause_generation", "/continue_generation"}) {
    const HttpResponse response = call(
        "POST", path, path == std::string("/abort_request") ? json{{"rid", "r1"}} : json::object());
    EXPECT_EQ(response.status, 200) << path << ": " << response.body;
    const json engines = json::parse(response.body)["engines"];
    ASSERT_EQ(engines.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(engines[i]["url"], engines_[i]->url());
      EXPECT_EQ(engines[i]["response"]["engine"], static_cast<int>(i));
      EXPECT_EQ(engines_[i]->calls(path), 1) << path;
    }
  }
  const json listed = json::parse(call("GET", "/list_engines").body)["engines"];
  ASSERT_EQ(listed.size(), 3u);
  EXPECT_EQ(listed[2]["url"], engines_[2]->url());
  EXPECT_EQ(listed[2]["alive"], true);

  engines_[2]->stop();
  EXPECT_EQ(call("POST", "/flush_cache", json::object()).status, 502);
  EXPECT_EQ(json::parse(call("GET", "/list_engines").body)["engines"][2]["alive"], false);
  EXPECT_EQ(call("GET", "/health", {}, "").status, 200);
  engines_[0]->stop();
  engines_[1]->stop();
  router_->router().check_health();
  const HttpResponse down = call("GET", "/health", {}, "");
  EXPECT_EQ(down.status, 503);
  for (auto& engine : engines_) EXPECT_CONTAINS(down.body, engine->url());
  EXPECT_EQ(call("POST", "/generate", prompt("nobody")).status, 503);
}

TEST_F(RouterServerTest, AFailedEngineIs502NamingItUnlessRetriesAreOn) {
  for (bool retry : {false, true}) {
    engines_.clear();
    start_engines(2, "engine-key");
    start_router(retry);
    engines_[1]->stop();
    // Two fresh prompts with nothing outstanding: one goes to each engine.
    std::vector<int> statuses;
    std::string failure;
    for (const char* text : {"first", "second"}) {
      const HttpResponse response = call("POST", "/generate", prompt(text));
      statuses.push_back(response.status);
      if (response.status != 200) failure = response.body;
    }
    if (retry) {
      EXPECT_EQ(statuses, (std::vector<int>{200, 200}));
    } else {
      std::sort(statuses.begin(), statuses.end());
      EXPECT_EQ(statuses, (std::vector<int>{200, 502}));
      EXPECT_CONTAINS(failure, engines_[1]->url());
    }
    EXPECT_FALSE(router_->router().engines()[1].alive);
    router_.reset();
  }
}

// ---- the router in front of real engines serving the tiny model ----

// An engine and the server in front of it; the server can stop and start again on its port
// while the engine lives on.
struct ServedEngine {
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<EngineServer> server;
  uint16_t port = 0;
  std::string url;

  void stop() { server.reset(); }
  void restart() {
    ServerOptions options;
    options.port = port;
    server = std::make_unique<EngineServer>(*engine, options);
  }
};

class RouterEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    at::set_num_threads(1);
    testing::tiny_model_dir();
  }

  void start_engines(int count) {
    for (int i = 0; i < count; ++i) {
      auto served = std::make_unique<ServedEngine>();
      engine::EngineOptions options;
      options.model_dir = testing::tiny_model_dir();
      options.kv_cache_blocks = 256;
      options.block_size = 4;
      options.max_running_requests = 16;
      options.seed = 1;
      served->engine = std::make_unique<engine::Engine>(options);
      served->server = std::make_unique<EngineServer>(*served->engine, ServerOptions{});
      served->port = served->server->port();
      served->url = served->server->url();
      engines_.push_back(std::move(served));
    }
  }
  RouterOptions router_options() const {
    RouterOptions options;
    for (const auto& served : engines_) options.engine_urls.push_back(served->url);
    options.health_check_interval_s = 3600;  // the tests check health themselves
    return options;
  }
  void start_router_server() {
    RouterServerOptions options;
    options.router = router_options();
    router_server_ = std::make_unique<RouterServer>(options);
    router_client_ = std::make_unique<HttpClient>(router_server_->url());
  }
  ServedEngine& served_at(const std::string& url) {
    for (auto& served : engines_) {
      if (served->url == url) return *served;
    }
    throw Error("no engine at " + url);
  }

  static json greedy(const std::string& text, int64_t max_new_tokens = 8) {
    return {{"text", text},
            {"sampling_params",
             {{"temperature", 0}, {"max_new_tokens", max_new_tokens}, {"ignore_eos", true}}}};
  }
  static HttpResponse post(HttpClient& client, const std::string& path, const json& body) {
    HttpRequest request;
    request.method = "POST";
    request.target = path;
    request.body = body.dump();
    return client.send(request);
  }
  static json post_json(HttpClient& client, const std::string& path, const json& body) {
    const HttpResponse response = post(client, path, body);
    EXPECT_EQ(response.status, 200) << path << ": " << response.body;
    return json::parse(response.body);
  }
  // The data of every event of a streamed POST.
  static std::vector<std::string> stream(HttpClient& client, const std::string& path, json body) {
    body["stream"] = true;
    HttpRequest request;
    request.method = "POST";
    request.target = path;
    request.body = body.dump();
    std::vector<std::string> events;
    const HttpResponse response = client.send_streaming(request, [&](const SseEvent& event) {
      events.push_back(event.data);
      return true;
    });
    EXPECT_EQ(response.status, 200) << response.body;
    EXPECT_TRUE(response.is_event_stream());
    return events;
  }

  // Members in this order: the router and its client go before the engines they call.
  std::vector<std::unique_ptr<ServedEngine>> engines_;
  std::unique_ptr<RouterServer> router_server_;
  std::unique_ptr<HttpClient> router_client_;
};

TEST_F(RouterEngineTest, GreedyAnswersThroughTheRouterEqualTheEngineAnswers) {
  start_engines(2);
  start_router_server();
  HttpClient direct(engines_[0]->url);
  for (const char* text : {"1 + 1 =", "The quick brown fox", "ooze"}) {
    const json expected = post_json(direct, "/generate", greedy(text));
    ASSERT_EQ(expected["output_ids"].size(), 8u);
    const json routed = post_json(*router_client_, "/generate", greedy(text));
    EXPECT_EQ(routed["text"], expected["text"]) << text;
    EXPECT_EQ(routed["output_ids"], expected["output_ids"]) << text;
    EXPECT_EQ(router_server_->router().generate(greedy(text))["output_ids"],
              expected["output_ids"]);

    const json completion = {{"prompt", text}, {"max_tokens", 8}, {"temperature", 0}};
    EXPECT_EQ(post_json(*router_client_, "/v1/completions", completion)["choices"][0]["text"],
              post_json(direct, "/v1/completions", completion)["choices"][0]["text"]);
  }
  HttpRequest models;
  models.target = "/v1/models";
  const HttpResponse listed = router_client_->send(models);
  EXPECT_EQ(listed.status, 200);
  EXPECT_EQ(json::parse(listed.body)["data"].size(), 1u);
  models.target = "/get_model_info";
  EXPECT_EQ(router_client_->send(models).status, 200);
}

TEST_F(RouterEngineTest, ConcurrentDistinctPromptsUseEveryEngine) {
  start_engines(2);
  Router router(router_options());
  std::vector<std::future<json>> results;
  for (int i = 0; i < 16; ++i) {
    // Equal lengths, so each engine's prompt-token count says how many requests it served.
    const std::string text =
        "distinct prompt " + std::string(i < 10 ? "0" : "") + std::to_string(i);
    results.push_back(router.generate_async(greedy(text, 16)));
  }
  for (auto& result : results) EXPECT_EQ(result.get()["output_ids"].size(), 16u);
  const int64_t prompt_length =
      static_cast<int64_t>(engines_[0]->engine->tokenizer().encode("distinct prompt 00").size());
  int64_t routed_total = 0;
  const std::vector<EngineStatus> statuses = router.engines();
  for (size_t i = 0; i < engines_.size(); ++i) {
    EXPECT_GE(statuses[i].routed, 4) << "engine " << i << " was left idle";
    EXPECT_EQ(engines_[i]->engine->stats().prompt_tokens, statuses[i].routed * prompt_length)
        << "the router's count disagrees with what engine " << i << " served";
    routed_total += statuses[i].routed;
  }
  EXPECT_EQ(routed_total, 16);
}

TEST_F(RouterEngineTest, RepeatsOfAPromptShareOneEnginesPrefixCache) {
  start_engines(2);
  start_router_server();
  const std::string prompt = "A prompt long enough to fill several KV-cache blocks.";
  std::set<std::string> served_by;
  std::vector<int64_t> cached;
  for (int i = 0; i < 6; ++i) {
    json body = greedy(prompt, 4);
    body["sampling_params"]["temperature"] = 1.0;  // distinct samples of one prompt
    body["sampling_params"]["seed"] = i;
    const HttpResponse response = post(*router_client_, "/generate", body);
    ASSERT_EQ(response.status, 200) << response.body;
    served_by.insert(response.header("X-Ooze-Engine"));
    cached.push_back(json::parse(response.body)["meta_info"]["cached_tokens"].get<int64_t>());
  }
  ASSERT_EQ(served_by.size(), 1u) << "the samples of one prompt went to different engines";
  const ServedEngine& used = served_at(*served_by.begin());
  for (const auto& served : engines_) {
    if (served.get() != &used) {
      EXPECT_EQ(served->engine->stats().prompt_tokens, 0);
    }
  }
  EXPECT_EQ(cached[0], 0);
  for (size_t i = 1; i < cached.size(); ++i) EXPECT_GT(cached[i], 0) << "request " << i;
  EXPECT_GT(used.engine->stats().cache_hit_rate(), 0.5);
}

TEST_F(RouterEngineTest, StreamsPassThroughEventByEvent) {
  start_engines(2);
  start_router_server();
  HttpClient direct(engines_[1]->url);
  const json body = greedy("Stream this", 32);
  const json whole = post_json(direct, "/generate", body);
  // Each event carries the output so far (the engine may merge steps when its sender lags):
  // the outputs grow event by event and end at the unstreamed answer.
  const std::vector<std::string> routed = stream(*router_client_, "/generate", body);
  ASSERT_GE(routed.size(), 3u) << "fewer than two events before [DONE]";
  EXPECT_EQ(routed.back(), "[DONE]");
  std::vector<int64_t> previous;
  for (size_t i = 0; i + 1 < routed.size(); ++i) {
    const std::vector<int64_t> ids = json::parse(routed[i])["output_ids"];
    ASSERT_GT(ids.size(), previous.size()) << "event " << i;
    EXPECT_TRUE(std::equal(previous.begin(), previous.end(), ids.begin())) << "event " << i;
    previous = ids;
  }
  EXPECT_EQ(json::parse(routed[routed.size() - 2])["output_ids"], whole["output_ids"]);
  EXPECT_EQ(json::parse(routed[routed.size() - 2])["text"], whole["text"]);

  int chunks = 0;
  const json last = router_server_->router().generate_stream(body, [&](const json&) {
    ++chunks;
    return true;
  });
  EXPECT_GE(chunks, 2);
  EXPECT_EQ(last["output_ids"], whole["output_ids"]);
}

TEST_F(RouterEngineTest, AStoppedEngineLeavesTheRotationAndRejoinsOnItsPort) {
  start_engines(2);
  Router router(router_options());
  const json reference = router.generate(greedy("same answer everywhere"));

  // A key whose requests go to engine 1, which then stops.
  RouteOptions options;
  for (int i = 0; i < 10 && options.routing_key.empty(); ++i) {
    RouteOptions probe;
    probe.routing_key = "probe-" + std::to_string(i);
    if (router.forward("/generate", greedy("x", 1), probe).engine_url == engines_[1]->url) {
      options = probe;
    }
  }
  ASSERT_FALSE(options.routing_key.empty());
  engines_[1]->stop();
  try {
    router.generate(greedy("same answer everywhere"), options);
    ADD_FAILURE() << "expected EngineFailedError";
  } catch (const EngineFailedError& e) {
    EXPECT_EQ(e.url(), engines_[1]->url);
    EXPECT_CONTAINS(e.what(), engines_[1]->url);
  }
  EXPECT_FALSE(router.engines()[1].alive);
  EXPECT_EQ(router.generate(greedy("same answer everywhere"), options)["output_ids"],
            reference["output_ids"]);

  // Started again on the same port: the health check takes it back, and the key's next new
  // requests can land on it.
  engines_[1]->restart();
  router.check_health();
  ASSERT_TRUE(router.engines()[1].alive);
  RouteOptions retried;
  retried.retry = true;
  for (int i = 0; i < 10 && retried.routing_key.empty(); ++i) {
    RouteOptions probe;
    probe.routing_key = "again-" + std::to_string(i);
    if (router.forward("/generate", greedy("x", 1), probe).engine_url == engines_[1]->url) {
      retried.routing_key = probe.routing_key;
    }
  }
  ASSERT_FALSE(retried.routing_key.empty());
  engines_[1]->stop();
  // With retry the request is answered by the live engine, the same greedy answer.
  EXPECT_EQ(router.generate(greedy("same answer everywhere"), retried)["output_ids"],
            reference["output_ids"]);
  EXPECT_FALSE(router.engines()[1].alive);
  EXPECT_EQ(router.engines()[1].failed, 2);

  // The periodic check brings it back by itself.
  RouterOptions periodic = router_options();
  periodic.health_check_interval_s = 0.1;
  Router watching(periodic);
  EXPECT_FALSE(watching.engines()[1].alive);
  engines_[1]->restart();
  EXPECT_TRUE(eventually([&] { return watching.engines()[1].alive; }));
}

TEST_F(RouterEngineTest, BroadcastsReachEveryEngineAndHealthFollowsThem) {
  start_engines(2);
  start_router_server();
  // Fill both engines' prefix caches.
  for (int i = 0; i < 4; ++i) {
    post_json(*router_client_, "/generate", greedy("cache me " + std::to_string(i), 2));
  }
  for (const auto& served : engines_) EXPECT_GT(served->engine->stats().cached_blocks, 0);
  // The engines apply controls between steps; their statistics follow shortly.
  EXPECT_EQ(post(*router_client_, "/flush_cache", json::object()).status, 200);
  for (const auto& served : engines_) {
    EXPECT_TRUE(eventually([&] { return served->engine->stats().cached_blocks == 0; }));
  }
  EXPECT_EQ(post(*router_client_, "/pause_generation", {{"mode", "in_place"}}).status, 200);
  for (const auto& served : engines_) {
    EXPECT_TRUE(eventually([&] { return served->engine->stats().paused; }));
  }
  EXPECT_EQ(post(*router_client_, "/continue_generation", json::object()).status, 200);
  for (const auto& served : engines_) {
    EXPECT_TRUE(eventually([&] { return !served->engine->stats().paused; }));
  }
  EXPECT_EQ(post(*router_client_, "/abort_request", {{"abort_all", true}}).status, 200);
  // The engines' own 400 comes back per engine.
  const HttpResponse refused = post(*router_client_, "/abort_request", json::object());
  EXPECT_EQ(refused.status, 502);
  EXPECT_EQ(json::parse(refused.body)["engines"][0]["status"], 400);

  HttpRequest health;
  health.target = "/health";
  EXPECT_EQ(router_client_->send(health).status, 200);
  for (auto& served : engines_) served->stop();
  router_server_->router().check_health();
  const HttpResponse down = router_client_->send(health);
  EXPECT_EQ(down.status, 503);
  for (const auto& served : engines_) EXPECT_CONTAINS(down.body, served->url);
}

}  // namespace router_test
}  // namespace ooze::serving
