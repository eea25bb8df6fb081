// RolloutEngine actors in real worker processes (this test program hosts them: main() below
// serves as a worker when the runtime starts it as one), against an Engine in the test's own
// process on the same model: the same requests give the same tokens, weight loads move both
// alike, the server inside the actor answers like the actor's generate, and controls reach the
// engine while a generate call is in flight.
#include "serving/rollout_engine_actor.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "actors/runtime.h"
#include "core/safetensors.h"
#include "tests/support/expect_error.h"
#include "tests/support/tiny_model.h"

namespace ooze::serving {
namespace rollout_engine_actor_test {

using namespace std::chrono_literals;
using Outputs = std::vector<std::vector<engine::GenerateOutput>>;
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

struct HttpAnswer {
  int status = 0;
  std::string body;
};

// One POST over a fresh connection to the server at `url` ("http://127.0.0.1:PORT").
HttpAnswer post(const std::string& url, const std::string& target, const std::string& body,
                const std::string& api_key = "") {
  namespace beast = boost::beast;
  namespace http = boost::beast::http;
  const std::string prefix = "http://127.0.0.1:";
  if (url.compare(0, prefix.size(), prefix) != 0) throw Error("unexpected server url " + url);
  boost::asio::io_context io;
  beast::tcp_stream stream(io);
  stream.expires_after(30s);
  stream.connect(boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"),
                                                std::stoi(url.substr(prefix.size()))));
  http::request<http::string_body> request(http::verb::post, target, 11);
  request.set(http::field::host, "127.0.0.1");
  request.set(http::field::content_type, "application/json");
  if (!api_key.empty()) request.set(http::field::authorization, "Bearer " + api_key);
  request.body() = body;
  request.prepare_payload();
  http::write(stream, request);
  beast::flat_buffer buffer;
  http::response<http::string_body> response;
  http::read(stream, buffer, response);
  return {static_cast<int>(response.result_int()), response.body()};
}

class RolloutEngineActorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    at::set_num_threads(1);
    // Made here, before any worker starts, so the workers find it written.
    dir_ = new std::string(testing::tiny_model_dir());
    actors::RuntimeOptions runtime;
    runtime.resources = {{"CPU", 2}};
    runtime.log_to_driver = false;
    actors::init(runtime);
  }
  static void TearDownTestSuite() {
    actors::shutdown();
    delete dir_;
  }

  static engine::EngineOptions engine_options() {
    engine::EngineOptions options;
    options.model_dir = *dir_;
    options.device = "auto";
    options.kv_cache_blocks = 128;
    options.block_size = 4;
    options.max_running_requests = 16;
    options.chunked_prefill_size = 32;
    options.intra_op_threads = 1;
    options.seed = 1;
    return options;
  }

  // The same options for an engine in this process ("auto" is the actor's to resolve).
  static engine::EngineOptions local_options() {
    engine::EngineOptions options = engine_options();
    options.device = resolve_engine_device(options.device);
    return options;
  }

  // Killed when the test ends, passed or not, so the next test finds the CPUs free.
  actors::ActorHandle<RolloutEngine> spawn_engine() {
    auto actor = actors::spawn<RolloutEngine>(rollout_engine_actor_options(), engine_options());
    spawned_.push_back(actor);
    actor.wait_ready(60s);
    return actor;
  }
  void TearDown() override {
    for (const auto& actor : spawned_) actors::kill(actor);
  }

  static std::vector<int64_t> prompt(int64_t length, int64_t salt) {
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < length; ++i) ids.push_back(32 + (i * 7 + salt * 13) % 90);
    return ids;
  }

  static engine::GenerateRequest greedy(std::string id, std::vector<int64_t> ids,
                                        int64_t max_new_tokens = 12) {
    engine::GenerateRequest request;
    request.id = std::move(id);
    request.input_ids = std::move(ids);
    request.sampling.temperature = 0.0;
    request.sampling.max_new_tokens = max_new_tokens;
    request.sampling.ignore_eos = true;
    request.return_logprob = true;
    return request;
  }

  // Greedy prompts of several lengths, and one request of two seeded samples (reproducible
  // whatever shares the batch).
  static std::vector<engine::GenerateRequest> batch() {
    std::vector<engine::GenerateRequest> requests;
    for (int64_t r = 0; r < 4; ++r) {
      requests.push_back(greedy("greedy-" + std::to_string(r), prompt(3 + 5 * r, r)));
    }
    engine::GenerateRequest sampled = greedy("sampled", prompt(9, 7), 8);
    sampled.sampling.temperature = 0.8;
    sampled.sampling.top_k = 20;
    sampled.sampling.n = 2;
    sampled.sampling.seed = 5;
    requests.push_back(sampled);
    return requests;
  }

  // The requests one at a time through an engine in this process.
  static Outputs one_by_one(engine::Engine& engine,
                            const std::vector<engine::GenerateRequest>& requests) {
    Outputs outputs;
    for (const engine::GenerateRequest& request : requests)
      outputs.push_back(engine.generate(request));
    return outputs;
  }

  static void expect_same_tokens(const Outputs& actual, const Outputs& expected) {
    ASSERT_EQ(actual.size(), expected.size());
    for (size_t r = 0; r < actual.size(); ++r) {
      ASSERT_EQ(actual[r].size(), expected[r].size()) << "request " << r;
      for (size_t s = 0; s < actual[r].size(); ++s) {
        const engine::GenerateOutput& a = actual[r][s];
        const engine::GenerateOutput& e = expected[r][s];
        EXPECT_EQ(a.request_id, e.request_id);
        EXPECT_EQ(a.index, static_cast<int64_t>(s));
        EXPECT_TRUE(a.finished);
        EXPECT_EQ(a.finish_reason, e.finish_reason) << "request " << r << " sample " << s;
        EXPECT_EQ(a.output_ids, e.output_ids) << "request " << r << " sample " << s;
        EXPECT_EQ(a.text, e.text);
        EXPECT_EQ(a.prompt_tokens, e.prompt_tokens);
        EXPECT_EQ(a.weight_version, e.weight_version);
        EXPECT_EQ(a.weight_versions, e.weight_versions);
        ASSERT_EQ(a.output_logprobs.size(), e.output_logprobs.size());
        for (size_t t = 0; t < a.output_logprobs.size(); ++t) {
          // Batched and single-request forwards sum in different orders.
          EXPECT_NEAR(a.output_logprobs[t], e.output_logprobs[t], 1e-4) << "token " << t;
        }
      }
    }
  }

  // Every tensor of the model file, perturbed by seeded noise.
  static NamedTensors perturbed_weights() {
    const ShardedSafetensors file = ShardedSafetensors::open(*dir_);
    torch::manual_seed(11);
    NamedTensors named;
    for (const std::string& name : file.names()) {
      at::Tensor tensor = file.tensor(name).clone();
      named.emplace_back(name, tensor + 0.05 * torch::randn_like(tensor));
    }
    return named;
  }

  static std::string* dir_;
  std::vector<actors::ActorHandle<RolloutEngine>> spawned_;
};

std::string* RolloutEngineActorTest::dir_ = nullptr;

TEST_F(RolloutEngineActorTest, BatchedGenerateMatchesAnEngineInThisProcess) {
  auto actor = spawn_engine();
  engine::Engine local(local_options());
  const std::vector<engine::GenerateRequest> requests = batch();

  const Outputs remote = actor.call(&RolloutEngine::generate_all, requests).get();
  const Outputs expected = one_by_one(local, requests);
  expect_same_tokens(remote, expected);
  for (const auto& samples : remote) {
    for (const engine::GenerateOutput& output : samples) {
      EXPECT_EQ(output.finish_reason, engine::FinishReason::kLength);
      EXPECT_EQ(output.completion_tokens(), output.request_id == "sampled" ? 8 : 12);
      EXPECT_EQ(output.output_logprobs.size(), output.output_ids.size());
    }
  }
  EXPECT_NE(remote[4][0].output_ids, remote[4][1].output_ids);  // two samples, not one twice

  // The description and the counters come back whole.
  const engine::EngineInfo info = actor.call(&RolloutEngine::info).get();
  const engine::EngineInfo& mine = local.info();
  EXPECT_EQ(info.model_path, mine.model_path);
  EXPECT_EQ(info.served_model_name, mine.served_model_name);
  EXPECT_EQ(info.dtype, mine.dtype);
  EXPECT_EQ(info.device, torch::cuda::is_available() ? "cuda:0" : "cpu");  // "auto" resolved
  EXPECT_EQ(info.vocab_size, mine.vocab_size);
  EXPECT_EQ(info.context_length, mine.context_length);
  EXPECT_EQ(info.block_size, 4);
  EXPECT_EQ(info.num_blocks, 128);
  EXPECT_EQ(info.max_running_requests, 16);
  EXPECT_EQ(info.eos_token_ids, mine.eos_token_ids);
  EXPECT_FALSE(info.eos_token_ids.empty());

  const engine::EngineStats stats = actor.call(&RolloutEngine::stats).get();
  EXPECT_EQ(stats.generated_tokens, 4 * 12 + 2 * 8);
  EXPECT_EQ(stats.running_sequences, 0);
  EXPECT_EQ(stats.waiting_sequences, 0);
  EXPECT_EQ(stats.total_blocks, 128);
  EXPECT_EQ(stats.free_blocks, 128);
  EXPECT_GT(stats.steps, 0);
  EXPECT_GT(stats.prompt_tokens, 0);
  EXPECT_EQ(stats.weight_version, 0);
  EXPECT_FALSE(stats.paused);
  EXPECT_FALSE(stats.sleeping);
  // The second copy of the two-sample prompt is shared, not computed again.
  EXPECT_GT(stats.cached_prompt_tokens, 0);

  // A refused request names itself and its field; the ones before it were withdrawn, and the
  // actor goes on serving.
  std::vector<engine::GenerateRequest> with_bad = {greedy("fine", prompt(5, 1), 200),
                                                   greedy("bad", prompt(5, 2))};
  with_bad[1].sampling.top_p = 1.5;
  const std::string message = ooze::testing::error_message_of<actors::RemoteError>(
      [&] { actor.call(&RolloutEngine::generate_all, with_bad).get(); });
  EXPECT_CONTAINS(message, "sampling_params.top_p");
  EXPECT_CONTAINS(message, "request 1 of 2");
  const engine::EngineStats after = actor.call(&RolloutEngine::stats).get();
  EXPECT_EQ(after.running_sequences + after.waiting_sequences, 0);
  expect_same_tokens(
      actor.call(&RolloutEngine::generate_all, std::vector<engine::GenerateRequest>{requests[0]})
          .get(),
      {expected[0]});
  // The engine's own generate, one request, answers alike.
  expect_same_tokens({actor.call(&RolloutEngine::generate, requests[0]).get()}, {expected[0]});
}

TEST_F(RolloutEngineActorTest, LoadedWeightsChangeResultsAsTheyDoInThisProcess) {
  auto actor = spawn_engine();
  engine::Engine local(local_options());
  const std::vector<engine::GenerateRequest> requests = batch();
  const Outputs before = actor.call(&RolloutEngine::generate_all, requests).get();

  // The tensors cross the process boundary (the larger ones out of band) and land in the
  // actor's model exactly as in the local one.
  const NamedTensors weights = perturbed_weights();
  actor.call(&RolloutEngine::load_weights, weights, std::optional<int64_t>(3)).get();
  local.load_weights(weights, 3);
  EXPECT_EQ(actor.call(&RolloutEngine::stats).get().weight_version, 3);

  const Outputs after = actor.call(&RolloutEngine::generate_all, requests).get();
  expect_same_tokens(after, one_by_one(local, requests));
  int changed = 0;
  for (size_t r = 0; r < after.size(); ++r) {
    EXPECT_EQ(after[r][0].weight_version, 3);
    EXPECT_EQ(after[r][0].weight_versions, std::vector<int64_t>{3});
    changed += after[r][0].output_ids != before[r][0].output_ids;
  }
  EXPECT_GE(changed, 3) << "the new weights should change most greedy continuations";

  // A version that does not increase is refused, and a load without one keeps the version.
  EXPECT_CONTAINS(
      ooze::testing::error_message_of<actors::RemoteError>([&] {
        actor.call(&RolloutEngine::load_weights, NamedTensors{}, std::optional<int64_t>(2)).get();
      }),
      "not newer");
  actor.call(&RolloutEngine::load_weights, NamedTensors{weights.front()}, std::nullopt).get();
  EXPECT_EQ(actor.call(&RolloutEngine::stats).get().weight_version, 3);
}

TEST_F(RolloutEngineActorTest, ServerInsideTheActorAnswersLikeGenerate) {
  auto actor = spawn_engine();
  const std::string url =
      actor.call(&RolloutEngine::start_server, std::string(), 0, std::string("sesame")).get();
  EXPECT_EQ(url.rfind("http://127.0.0.1:", 0), 0u) << url;

  const engine::GenerateRequest request = greedy("over-http", prompt(11, 3));
  const engine::GenerateOutput expected =
      actor.call(&RolloutEngine::generate_all, std::vector<engine::GenerateRequest>{request})
          .get()[0][0];
  const nlohmann::json body = {{"input_ids", request.input_ids},
                               {"sampling_params",
                                {{"temperature", 0.0},
                                 {"max_new_tokens", request.sampling.max_new_tokens},
                                 {"ignore_eos", true}}}};
  EXPECT_EQ(post(url, "/generate", body.dump()).status, 401);  // the key is required
  const HttpAnswer answer = post(url, "/generate", body.dump(), "sesame");
  ASSERT_EQ(answer.status, 200) << answer.body;
  const nlohmann::json reply = nlohmann::json::parse(answer.body);
  EXPECT_EQ(reply.at("output_ids").get<std::vector<int64_t>>(), expected.output_ids);
  EXPECT_EQ(reply.at("text").get<std::string>(), expected.text);
  EXPECT_EQ(reply.at("meta_info").at("finish_reason").at("type").get<std::string>(), "length");

  // One server at a time; after stop_server the port is closed, and a new one can start.
  EXPECT_CONTAINS(ooze::testing::error_message_of<actors::RemoteError>([&] {
                    actor.call(&RolloutEngine::start_server, std::string(), 0, std::string()).get();
                  }),
                  "already runs at " + url);
  actor.call(&RolloutEngine::stop_server).get();
  EXPECT_THROW(post(url, "/generate", body.dump(), "sesame"), boost::system::system_error);
  const std::string second =
      actor.call(&RolloutEngine::start_server, std::string("127.0.0.1"), 0, std::string()).get();
  const HttpAnswer again = post(second, "/generate", body.dump());
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(nlohmann::json::parse(again.body).at("output_ids").get<std::vector<int64_t>>(),
            expected.output_ids);
}

TEST_F(RolloutEngineActorTest, MemoryIsReleasedAndResumedWithTheSameResults) {
  auto actor = spawn_engine();
  const std::vector<engine::GenerateRequest> requests = {greedy("a", prompt(7, 1)),
                                                         greedy("b", prompt(13, 2))};
  const Outputs before = actor.call(&RolloutEngine::generate_all, requests).get();

  actor.call(&RolloutEngine::release_memory).get();
  EXPECT_TRUE(actor.call(&RolloutEngine::stats).get().sleeping);
  // A generate sent while asleep waits for the wake-up (it runs on another of the actor's
  // threads, so resume_memory still gets through).
  auto pending = actor.call(&RolloutEngine::generate_all, requests);
  std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(pending.ready());
  actor.call(&RolloutEngine::resume_memory).get(10s);
  const Outputs during = pending.get(30s);
  EXPECT_FALSE(actor.call(&RolloutEngine::stats).get().sleeping);

  EXPECT_GT(actor.call(&RolloutEngine::stats).get().cached_blocks, 0);
  actor.call(&RolloutEngine::flush_cache).get();  // recomputed from scratch, still the same
  EXPECT_EQ(actor.call(&RolloutEngine::stats).get().cached_blocks, 0);
  const Outputs after = actor.call(&RolloutEngine::generate_all, requests).get();
  expect_same_tokens(during, before);
  expect_same_tokens(after, before);
}

TEST_F(RolloutEngineActorTest, ControlsReachTheEngineWhileAGenerateIsInFlight) {
  auto actor = spawn_engine();
  actor.call(&RolloutEngine::pause_generation, false).get();
  auto held = actor.call(&RolloutEngine::generate_all,
                         std::vector<engine::GenerateRequest>{greedy("held", prompt(6, 4)),
                                                              greedy("kept", prompt(8, 5))});
  // Wait until the engine has both requests queued behind the pause.
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  engine::EngineStats stats;
  do {
    stats = actor.call(&RolloutEngine::stats).get(10s);  // answered during the generate
  } while (stats.waiting_sequences + stats.running_sequences < 2 &&
           std::chrono::steady_clock::now() < deadline);
  EXPECT_TRUE(stats.paused);
  EXPECT_FALSE(held.ready());

  actor.call(&RolloutEngine::abort, std::string("held")).get();
  actor.call(&RolloutEngine::continue_generation).get();
  const Outputs outputs = held.get(30s);
  ASSERT_EQ(outputs.size(), 2u);
  EXPECT_EQ(outputs[0][0].request_id, "held");
  EXPECT_EQ(outputs[0][0].finish_reason, engine::FinishReason::kAbort);
  EXPECT_TRUE(outputs[0][0].output_ids.empty());
  EXPECT_EQ(outputs[1][0].request_id, "kept");
  EXPECT_EQ(outputs[1][0].finish_reason, engine::FinishReason::kLength);
  EXPECT_EQ(outputs[1][0].completion_tokens(), 12);

  // abort_all ends a generate that would otherwise run for a long time. Once it has begun, the
  // engine pauses with it in flight, so a fast machine cannot finish its 500 tokens before the
  // abort arrives.
  auto long_one =
      actor.call(&RolloutEngine::generate_all,
                 std::vector<engine::GenerateRequest>{greedy("long", prompt(4, 6), 500)});
  const int64_t generated_before = actor.call(&RolloutEngine::stats).get().generated_tokens;
  while (actor.call(&RolloutEngine::stats).get(10s).generated_tokens == generated_before &&
         std::chrono::steady_clock::now() < deadline + 20s) {
  }
  actor.call(&RolloutEngine::pause_generation, false).get();
  actor.call(&RolloutEngine::abort_all).get();
  actor.call(&RolloutEngine::continue_generation).get();
  const Outputs ended = long_one.get(30s);
  EXPECT_EQ(ended[0][0].finish_reason, engine::FinishReason::kAbort);
  EXPECT_LT(ended[0][0].completion_tokens(), 500);
}

}  // namespace rollout_engine_actor_test
}  // namespace ooze::serving
