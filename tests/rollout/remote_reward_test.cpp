// RemoteReward against a real HTTP reward model on loopback (serving/http_server.h): answers,
// retries with backoff, timeouts, refused connections, errors that are not retried, and many
// threads scoring at once over kept-alive connections.
#include "rollout/remote_reward.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/timer.h"
#include "serving/http_server.h"
#include "tests/support/expect_error.h"
#include "tests/support/process.h"

namespace ooze::rollout {
namespace remote_reward_test {

using ooze::testing::error_message_of;
using Clock = std::chrono::steady_clock;

Sample make_sample(int64_t index, const std::string& response, const std::string& label) {
  Sample sample;
  sample.index = index;
  sample.group_index = index / 4;
  sample.prompt = "Compute 6 * 7.";
  sample.response = response;
  sample.label = label;
  return sample;
}

// A reward model: POST /reward with {prompt, response, label} answers 1 when the response
// contains the label, else 0. `answer` decides what to send instead (status, body), per call.
class RewardModel {
 public:
  // Returns {status, body}; status 0: answer normally; status -1: never answer.
  using Answer = std::function<std::pair<int, std::string>(int call)>;

  explicit RewardModel(Answer answer = nullptr, bool as_object = false)
      : answer_(std::move(answer)), as_object_(as_object) {
    serving::HttpRoutes routes;
    routes.add("POST", "/reward", [this](std::shared_ptr<serving::HttpExchange> exchange) {
      handle(std::move(exchange));
    });
    serving::ServerOptions options;
    options.threads = 4;
    server_ = std::make_unique<serving::HttpServer>(options, routes.handler());
  }
  ~RewardModel() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      silent_.clear();  // answered (500) while the server still runs; their clients are gone
    }
    server_->stop();
  }

  std::string url() const { return server_->url() + "/reward"; }
  int calls() const { return calls_; }
  std::set<std::string> client_addresses() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return addresses_;
  }
  std::vector<nlohmann::json> bodies() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return bodies_;
  }

 private:
  void handle(std::shared_ptr<serving::HttpExchange> exchange) {
    const int call = ++calls_;
    const std::pair<int, std::string> answer =
        answer_ != nullptr ? answer_(call) : std::pair<int, std::string>{0, ""};
    {
      std::lock_guard<std::mutex> lock(mutex_);
      addresses_.insert(exchange->remote_address());
      bodies_.push_back(nlohmann::json::parse(exchange->body(), nullptr, false));
      if (answer.first == -1) {
        silent_.push_back(exchange);  // held unanswered until the model is destroyed
        return;
      }
    }
    if (answer.first != 0) {
      exchange->respond(answer.first, "application/json", answer.second);
      return;
    }
    const nlohmann::json request = nlohmann::json::parse(exchange->body());
    const std::string response = request.at("response");
    const std::string label = request.at("label");
    const double score = response.find(label) != std::string::npos ? 1.0 : 0.0;
    const nlohmann::json reward =
        as_object_ ? nlohmann::json{{"score", score}, {"length", response.size()}}
                   : nlohmann::json(score);
    exchange->respond(200, "application/json", reward.dump());
  }

  Answer answer_;
  bool as_object_;
  std::atomic<int> calls_{0};
  mutable std::mutex mutex_;
  std::set<std::string> addresses_;
  std::vector<nlohmann::json> bodies_;
  std::vector<std::shared_ptr<serving::HttpExchange>> silent_;
  std::unique_ptr<serving::HttpServer> server_;  // last: stopped before the members it calls
};

RemoteRewardOptions fast_options(const std::string& url) {
  RemoteRewardOptions options;
  options.url = url;
  options.timeout_s = 5;
  options.max_retries = 3;
  options.initial_backoff_s = 0.05;
  options.max_backoff_s = 0.2;
  return options;
}

TEST(RemoteReward, NumberAnswerIsTheRewardAndTheBodyIsSlimes) {
  RewardModel model;
  RemoteReward reward_model(fast_options(model.url()));
  EXPECT_EQ(reward_model.score(make_sample(0, "it is 42", "42")), nlohmann::json(1.0));
  EXPECT_EQ(reward_model.score(make_sample(1, "it is 41", "42")), nlohmann::json(0.0));
  ASSERT_EQ(model.bodies().size(), 2u);
  EXPECT_EQ(
      model.bodies()[0],
      (nlohmann::json{{"prompt", "Compute 6 * 7."}, {"response", "it is 42"}, {"label", "42"}}));
  EXPECT_EQ(RemoteReward::request_body(make_sample(1, "it is 41", "42")), model.bodies()[1]);
}

TEST(RemoteReward, ObjectAnswerIsTheRewardObject) {
  RewardModel model(nullptr, /*as_object=*/true);
  RemoteReward reward_model(fast_options(model.url()));
  Sample sample = make_sample(3, "so 42", "42");
  sample.reward = reward_model.score(sample);
  EXPECT_EQ(sample.reward, (nlohmann::json{{"score", 1.0}, {"length", 5}}));
  EXPECT_EQ(sample.reward_value("score"), 1.0);
}

TEST(RemoteReward, TwoServerErrorsAreRetriedThenTheAnswerIsUsed) {
  RewardModel model([](int call) -> std::pair<int, std::string> {
    if (call <= 2) return {500, R"({"error": "model is loading"})"};
    return {0, ""};
  });
  RemoteReward reward_model(fast_options(model.url()));
  const Clock::time_point start = Clock::now();
  EXPECT_EQ(reward_model.score(make_sample(0, "42", "42")), nlohmann::json(1.0));
  EXPECT_EQ(model.calls(), 3);
  // Waited 0.05 s, then 0.1 s (plus at most 10%) before the retries.
  EXPECT_GE(seconds_since(start), 0.15);
}

TEST(RemoteReward, ServerThatStaysDownFailsAfterAllAttemptsWithBackoff) {
  RewardModel model([](int) -> std::pair<int, std::string> { return {503, "overloaded"}; });
  RemoteReward reward_model(fast_options(model.url()));
  const Clock::time_point start = Clock::now();
  bool caught = false;
  std::string message;
  try {
    reward_model.score(make_sample(9, "x", "42"));
  } catch (const RemoteRewardError& error) {
    caught = true;
    message = error.what();
    EXPECT_EQ(error.attempts(), 4);
    EXPECT_EQ(error.url(), model.url());
  }
  const double elapsed = seconds_since(start);
  ASSERT_TRUE(caught) << "expected a RemoteRewardError";
  EXPECT_EQ(model.calls(), 4);
  // Backoff 0.05 + 0.1 + 0.2 (the cap) = 0.35 s, each up to 10% longer.
  EXPECT_GE(elapsed, 0.35);
  EXPECT_LT(elapsed, 2.0);
  EXPECT_CONTAINS(message, model.url());
  EXPECT_CONTAINS(message, "sample 9 (group 2)");
  EXPECT_CONTAINS(message, "no reward after 4 attempts");
  EXPECT_CONTAINS(message, "HTTP 503: overloaded");
}

TEST(RemoteReward, ServerThatNeverAnswersTimesOutEachAttempt) {
  RewardModel model([](int) -> std::pair<int, std::string> { return {-1, ""}; });
  RemoteRewardOptions options = fast_options(model.url());
  options.timeout_s = 0.3;
  options.max_retries = 1;
  RemoteReward reward_model(options);
  const Clock::time_point start = Clock::now();
  const std::string message =
      error_message_of<RemoteRewardError>([&] { reward_model.score(make_sample(0, "x", "42")); });
  const double elapsed = seconds_since(start);
  EXPECT_EQ(model.calls(), 2);
  EXPECT_GE(elapsed, 0.3 + 0.05 + 0.3);
  EXPECT_LT(elapsed, 3.0);
  EXPECT_CONTAINS(message, "no reward after 2 attempts");
  EXPECT_CONTAINS(message, "no response from");
  EXPECT_CONTAINS(message, "within 0.3 s");
}

TEST(RemoteReward, RefusedConnectionIsRetriedThenReported) {
  // A bound socket that does not listen: connecting to it is refused, and no other process can
  // take the port meanwhile.
  const int socket_fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(socket_fd, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(socket_fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  socklen_t length = sizeof(address);
  ASSERT_EQ(::getsockname(socket_fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const std::string url = "http://127.0.0.1:" + std::to_string(ntohs(address.sin_port)) + "/rm";

  RemoteRewardOptions options = fast_options(url);
  options.max_retries = 2;
  RemoteReward reward_model(options);
  const Clock::time_point start = Clock::now();
  const std::string message =
      error_message_of<RemoteRewardError>([&] { reward_model.score(make_sample(5, "x", "42")); });
  EXPECT_LT(seconds_since(start), 2.0);
  ::close(socket_fd);
  EXPECT_CONTAINS(message, url);
  EXPECT_CONTAINS(message, "no reward after 3 attempts");
  EXPECT_CONTAINS(message, "refused");
}

TEST(RemoteReward, ClientErrorIsNotRetried) {
  RewardModel model([](int) -> std::pair<int, std::string> {
    return {400, R"({"error": "missing field 'question'"})"};
  });
  RemoteReward reward_model(fast_options(model.url()));
  bool caught = false;
  try {
    reward_model.score(make_sample(2, "x", "42"));
  } catch (const RemoteRewardError& error) {
    caught = true;
    EXPECT_EQ(error.attempts(), 1);
    EXPECT_CONTAINS(error.what(), "HTTP 400");
    EXPECT_CONTAINS(error.what(), "missing field 'question'");
    EXPECT_CONTAINS(error.what(), "not retried");
  }
  EXPECT_TRUE(caught) << "expected a RemoteRewardError";
  EXPECT_EQ(model.calls(), 1);
}

TEST(RemoteReward, TooManyRequestsIsRetried) {
  RewardModel model([](int call) -> std::pair<int, std::string> {
    if (call == 1) return {429, "slow down"};
    return {0, ""};
  });
  RemoteReward reward_model(fast_options(model.url()));
  EXPECT_EQ(reward_model.score(make_sample(0, "42", "42")), nlohmann::json(1.0));
  EXPECT_EQ(model.calls(), 2);
}

TEST(RemoteReward, AnswerThatIsNotARewardFailsAtOnce) {
  RewardModel not_json([](int) -> std::pair<int, std::string> { return {200, "<html>ok"}; });
  RemoteReward first(fast_options(not_json.url()));
  std::string message =
      error_message_of<RemoteRewardError>([&] { first.score(make_sample(0, "x", "42")); });
  EXPECT_CONTAINS(message, "the answer is not JSON: '<html>ok'");
  EXPECT_EQ(not_json.calls(), 1);

  RewardModel a_string([](int) -> std::pair<int, std::string> { return {200, R"("good")"}; });
  RemoteReward second(fast_options(a_string.url()));
  message = error_message_of<RemoteRewardError>([&] { second.score(make_sample(0, "x", "42")); });
  EXPECT_CONTAINS(message, "the answer \"good\" is not a reward");
  EXPECT_EQ(a_string.calls(), 1);
}

TEST(RemoteReward, BadUrlsAndOptionsAreConfigErrors) {
  RemoteRewardOptions options;
  options.url = "https://rm.example.com/reward";
  EXPECT_CONTAINS(error_message_of<ConfigError>([&] { RemoteReward model(options); }),
                  "scheme 'https' is not supported");
  options.url = "http:///reward";
  EXPECT_CONTAINS(error_message_of<ConfigError>([&] { RemoteReward model(options); }), "no host");
  options.url = "";
  EXPECT_CONTAINS(error_message_of<ConfigError>([&] { RemoteReward model(options); }),
                  "--rm-url is empty");
  options.url = "http://127.0.0.1:8000/reward";
  options.timeout_s = 0;
  EXPECT_CONTAINS(error_message_of<ConfigError>([&] { RemoteReward model(options); }),
                  "timeout must be positive");
  options.timeout_s = 1;
  options.max_retries = -1;
  EXPECT_CONTAINS(error_message_of<ConfigError>([&] { RemoteReward model(options); }),
                  "max_retries");
  options.max_retries = 0;
  options.url = "rm-host/reward";  // no scheme, no port: http on port 80
  EXPECT_NO_THROW(RemoteReward model(options));
}

TEST(RemoteReward, ManyThreadsScoreAtOnceOverKeptConnections) {
  RewardModel model;
  RemoteReward reward_model(fast_options(model.url()));
  constexpr int kThreads = 8;
  constexpr int kCallsPerThread = 50;
  std::vector<std::vector<double>> rewards(kThreads);
  std::vector<std::string> failures(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        for (int i = 0; i < kCallsPerThread; ++i) {
          const int64_t index = t * kCallsPerThread + i;
          const bool right = index % 3 == 0;
          rewards[t].push_back(
              reward_model.score(make_sample(index, right ? "42!" : "41", "42")).get<double>());
        }
      } catch (const std::exception& e) {
        failures[t] = e.what();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(failures[t], "") << "thread " << t;
    ASSERT_EQ(rewards[t].size(), static_cast<size_t>(kCallsPerThread));
    for (int i = 0; i < kCallsPerThread; ++i) {
      EXPECT_EQ(rewards[t][i], (t * kCallsPerThread + i) % 3 == 0 ? 1.0 : 0.0);
    }
  }
  EXPECT_EQ(model.calls(), kThreads * kCallsPerThread);
  // Keep-alive: far fewer connections than calls (at most one per concurrent caller).
  EXPECT_LE(model.client_addresses().size(), static_cast<size_t>(kThreads));
}

// A reward model nobody here wrote: Python's http.server, as Slime users' reward servers are.
TEST(RemoteRewardInteropTest, PythonRewardServerScoresSlimesBody) {
  if (!std::filesystem::exists("/usr/bin/python3")) GTEST_SKIP() << "no /usr/bin/python3";
  const int port = ooze::testing::pick_free_port();
  const std::string dir = ooze::testing::make_temp_dir("python-reward-server");
  ooze::testing::Process server(
      {"/usr/bin/python3", OOZE_PYTHON_REWARD_SERVER, std::to_string(port)}, {}, dir + "/log.txt");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (server.output().find("listening") == std::string::npos) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << server.output();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  RemoteRewardOptions options;
  options.url = "http://127.0.0.1:" + std::to_string(port) + "/reward";
  options.max_retries = 0;
  RemoteReward reward(options);
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        const int index = t * 25 + i;
        Sample sample = make_sample(index, index % 3 == 0 ? " 42 " : "41", "42");
        sample.prompt = "question " + std::to_string(index);
        const nlohmann::json answer = reward.score(sample);
        const double expected = index % 3 == 0 ? 1.0 : 0.0;
        if (answer.value("score", -1.0) != expected ||
            answer.value("prompt", "") != sample.prompt) {
          ++wrong;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace remote_reward_test
}  // namespace ooze::rollout
