// The engine's side of a weight sync (Engine::begin_weight_sync / load_weight_bucket /
// finish_weight_sync): a complete sync serves exactly the new weights (checked against the
// model code run without the engine), versions only move forward, and a sync that breaks
// (parameters missing, silence past the timeout, an abort) leaves the engine refusing to
// generate until a complete one arrives, in process and over HTTP.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/checksum.h"
#include "engine/engine.h"
#include "models/hf_checkpoint.h"
#include "models/transformer.h"
#include "serving/engine_server.h"
#include "tests/support/expect_error.h"
#include "tests/support/http_test_client.h"
#include "tests/support/small_engine_options.h"
#include "tests/support/tiny_model.h"

namespace ooze::engine {
namespace engine_weight_sync_test {

using namespace std::chrono_literals;
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;
using ooze::testing::error_message_of;

class EngineWeightSyncTest : public ::testing::Test {
 protected:
  void SetUp() override {
    at::set_num_threads(1);
    dir_ = testing::tiny_model_dir();
    // The new weights: the initial ones, perturbed, held by a model of our own.
    torch::manual_seed(3);
    reference_ = models::TransformerModel(models::load_model_config(dir_));
    models::load_hf_weights(*reference_, dir_);
    torch::NoGradGuard no_grad;
    for (auto& item : reference_->named_parameters()) {
      item.value().add_(torch::randn_like(item.value()) * 0.05);
      new_weights_.emplace_back(item.key(), item.value().detach().clone());
    }
  }

  EngineOptions options() const { return testing::small_engine_options(dir_); }

  static GenerateRequest greedy(int64_t max_new_tokens) {
    GenerateRequest r;
    r.input_ids = {72, 101, 108, 108, 111, 32, 119};
    r.sampling.temperature = 0.0;
    r.sampling.max_new_tokens = max_new_tokens;
    r.sampling.ignore_eos = true;
    return r;
  }

  // Greedy tokens of the new weights by the model's plain forward (no engine, no cache).
  std::vector<int64_t> reference_tokens(std::vector<int64_t> ids, int64_t steps) {
    torch::NoGradGuard no_grad;
    std::vector<int64_t> out;
    for (int64_t k = 0; k < steps; ++k) {
      const int64_t n = static_cast<int64_t>(ids.size());
      torch::Tensor hidden = reference_->forward(
          torch::tensor(ids, torch::kLong), torch::arange(n, torch::kLong),
          torch::tensor(std::vector<int32_t>{0, static_cast<int32_t>(n)}, torch::kInt));
      out.push_back(reference_->logits(hidden[n - 1]).argmax().item<int64_t>());
      ids.push_back(out.back());
    }
    return out;
  }

  // The new weights in two buckets, as a sync sends them.
  void sync(Engine& engine, int64_t version) {
    engine.begin_weight_sync(version, /*abort_in_flight=*/false, 10s);
    const size_t half = new_weights_.size() / 2;
    engine.load_weight_bucket(NamedTensors(new_weights_.begin(), new_weights_.begin() + half));
    engine.load_weight_bucket(NamedTensors(new_weights_.begin() + half, new_weights_.end()));
    engine.finish_weight_sync(version);
  }

  std::string dir_;
  models::TransformerModel reference_{nullptr};
  NamedTensors new_weights_;
};

TEST_F(EngineWeightSyncTest, ACompleteSyncServesExactlyTheNewWeightsUnderItsVersion) {
  Engine engine(options());
  const GenerateRequest r = greedy(8);
  const std::vector<int64_t> expected = reference_tokens(r.input_ids, 8);
  ASSERT_NE(engine.generate(r)[0].output_ids, expected) << "the perturbation changes nothing";

  sync(engine, 1);
  const GenerateOutput out = engine.generate(r)[0];
  EXPECT_EQ(out.output_ids, expected);
  EXPECT_EQ(out.weight_version, 1);
  EXPECT_EQ(out.output_weight_versions, std::vector<int64_t>(8, 1));
  EXPECT_EQ(engine.stats().weight_version, 1);
  EXPECT_FALSE(engine.stats().syncing_weights);

  // The per-tensor checksums are those of the bytes sent.
  const auto sums = engine.weight_checksums();
  ASSERT_EQ(sums.size(), new_weights_.size());
  for (const auto& [name, tensor] : new_weights_) {
    const at::Tensor bytes = tensor.contiguous();
    const uint32_t expected_sum = crc32(bytes.data_ptr(), bytes.nbytes());
    bool found = false;
    for (const auto& [sum_name, sum] : sums) {
      if (sum_name == name) {
        found = true;
        EXPECT_EQ(sum, expected_sum) << name;
      }
    }
    EXPECT_TRUE(found) << name;
  }
}

TEST_F(EngineWeightSyncTest, VersionsOnlyMoveForward) {
  Engine engine(options());
  EXPECT_CONTAINS(error_message_of<Error>([&] { engine.begin_weight_sync(0, false, 10s); }),
                  "not newer than the engine's version 0");
  sync(engine, 3);
  EXPECT_CONTAINS(error_message_of<Error>([&] { engine.begin_weight_sync(3, false, 10s); }),
                  "weight sync to version 3 refused");
  EXPECT_CONTAINS(error_message_of<Error>([&] { engine.begin_weight_sync(2, false, 10s); }),
                  "versions must increase");
  EXPECT_EQ(engine.stats().weight_version, 3);
  EXPECT_FALSE(engine.stats().weights_incomplete) << "a refused version breaks nothing";
  EXPECT_CONTAINS(error_message_of<Error>([&] { engine.load_weight_bucket(new_weights_); }),
                  "no weight sync is in progress");
}

TEST_F(EngineWeightSyncTest, ASyncWithParametersMissingLeavesTheEngineRefusingUntilAFullOne) {
  Engine engine(options());
  engine.begin_weight_sync(1, false, 10s);
  engine.load_weight_bucket(NamedTensors(new_weights_.begin(), new_weights_.end() - 1));
  const std::string message = error_message_of<FormatError>([&] { engine.finish_weight_sync(1); });
  EXPECT_CONTAINS(message, "ended without 1 of the model's parameters");
  EXPECT_CONTAINS(message, new_weights_.back().first);
  EXPECT_TRUE(engine.stats().weights_incomplete);
  EXPECT_EQ(engine.stats().weight_version, 0);
  EXPECT_CONTAINS(error_message_of<WeightsIncomplete>([&] { engine.submit(greedy(4), nullptr); }),
                  "refuses to generate");

  sync(engine, 1);  // the same version again, complete this time
  EXPECT_FALSE(engine.stats().weights_incomplete);
  EXPECT_EQ(engine.generate(greedy(4))[0].output_ids, reference_tokens(greedy(4).input_ids, 4));
}

TEST_F(EngineWeightSyncTest, SilencePastTheTimeoutAbortsKeptRequestsAndRefusesNewOnes) {
  Engine engine(options());
  std::promise<GenerateOutput> finished;
  engine.submit(greedy(40), [&](const GenerateOutput& out) {
    if (out.finished) finished.set_value(out);
  });
  // The trainer begins (keeping the request in flight), sends one bucket and dies.
  engine.begin_weight_sync(1, /*abort_in_flight=*/false, 300ms);
  engine.load_weight_bucket(NamedTensors(new_weights_.begin(), new_weights_.begin() + 1));
  auto future = finished.get_future();
  ASSERT_EQ(future.wait_for(10s), std::future_status::ready) << "the request was never ended";
  const GenerateOutput out = future.get();
  EXPECT_EQ(out.finish_reason, FinishReason::kAbort);
  EXPECT_CONTAINS(out.abort_message, "weights incomplete");
  EXPECT_CONTAINS(out.abort_message, "--weight-sync-timeout");
  // Every token it did get came from the complete old weights.
  for (int64_t v : out.output_weight_versions) EXPECT_EQ(v, 0);
  EXPECT_TRUE(engine.stats().weights_incomplete);
  EXPECT_CONTAINS(error_message_of<WeightsIncomplete>([&] { engine.submit(greedy(4), nullptr); }),
                  "the trainer may have died");
}

TEST_F(EngineWeightSyncTest, RequestsArrivingDuringASyncWaitAndGetTheNewWeights) {
  Engine engine(options());
  engine.begin_weight_sync(1, false, 10s);
  std::promise<GenerateOutput> finished;
  engine.submit(greedy(6), [&](const GenerateOutput& out) {
    if (out.finished) finished.set_value(out);
  });
  auto future = finished.get_future();
  EXPECT_EQ(future.wait_for(300ms), std::future_status::timeout) << "generated mid-sync";
  engine.load_weight_bucket(new_weights_);
  engine.finish_weight_sync(1);
  ASSERT_EQ(future.wait_for(10s), std::future_status::ready);
  const GenerateOutput out = future.get();
  EXPECT_EQ(out.output_ids, reference_tokens(greedy(6).input_ids, 6));
  EXPECT_EQ(out.output_weight_versions, std::vector<int64_t>(6, 1));
}

TEST_F(EngineWeightSyncTest, AnAbortedSyncAbortsWhatWaitedAndABucketThatDoesNotFitBreaksIt) {
  Engine engine(options());
  engine.begin_weight_sync(1, false, 10s);
  engine.abort_weight_sync("broadcast of bucket 2 failed");
  EXPECT_CONTAINS(error_message_of<WeightsIncomplete>([&] { engine.submit(greedy(4), nullptr); }),
                  "broadcast of bucket 2 failed");

  engine.begin_weight_sync(1, false, 10s);
  EXPECT_FALSE(engine.stats().weights_incomplete) << "a new sync lets requests queue again";
  NamedTensors wrong = {{new_weights_[0].first, torch::zeros({1})}};
  EXPECT_CONTAINS(error_message_of<FormatError>([&] { engine.load_weight_bucket(wrong); }),
                  new_weights_[0].first);
  EXPECT_TRUE(engine.stats().weights_incomplete);
  EXPECT_CONTAINS(error_message_of<Error>([&] { engine.finish_weight_sync(1); }),
                  "no weight sync to that version is in progress");
}

// HTTP clients of an engine whose weights are incomplete get 503 (unavailable: try again after
// the next sync) with the reason, from every endpoint that generates; once a complete sync
// arrives they get the new weights' answer.
TEST_F(EngineWeightSyncTest, OverHttpAnInterruptedSyncAnswers503UntilACompleteOne) {
  Engine engine(options());
  serving::EngineServer server(engine, serving::ServerOptions{});
  testing::TestHttpClient client(server.port());
  const nlohmann::json generate = {
      {"input_ids", greedy(4).input_ids},
      {"sampling_params", {{"temperature", 0}, {"max_new_tokens", 4}, {"ignore_eos", true}}}};
  const nlohmann::json completion = {{"prompt", "Hello"}, {"max_tokens", 4}, {"temperature", 0}};
  engine.begin_weight_sync(1, false, 10s);
  engine.abort_weight_sync("the trainer died during bucket 3");

  testing::HttpReply reply = client.post_json("/generate", generate);
  EXPECT_EQ(reply.status, 503) << reply.body;
  EXPECT_CONTAINS(reply.body, "the trainer died during bucket 3");
  reply = client.post_json("/v1/completions", completion);
  EXPECT_EQ(reply.status, 503) << reply.body;
  EXPECT_CONTAINS(reply.body, "weights are incomplete");
  EXPECT_EQ(client.request("GET", "/health_generate").status, 503);
  // curl, a client nobody here wrote, sees the same refusal.
  const std::string curl =
      "curl -s -o /dev/null -w '%{http_code}' -X POST -H "
      "'Content-Type: application/json' -d '" +
      generate.dump() + "' http://127.0.0.1:" + std::to_string(server.port()) + "/generate";
  if (FILE* pipe = ::popen(curl.c_str(), "r")) {
    char code[8] = {};
    const size_t read = std::fread(code, 1, sizeof(code) - 1, pipe);
    ::pclose(pipe);
    EXPECT_EQ(std::string(code, read), "503");
  } else {
    ADD_FAILURE() << "cannot run curl";
  }
  const nlohmann::json info = client.request("GET", "/get_server_info").json();
  EXPECT_TRUE(info["stats"]["weights_incomplete"]) << info.dump();

  sync(engine, 1);
  reply = client.post_json("/generate", generate);
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.json()["output_ids"].get<std::vector<int64_t>>(),
            reference_tokens(greedy(4).input_ids, 4));
  EXPECT_EQ(reply.json()["meta_info"]["weight_version"], 1) << reply.body;
  EXPECT_EQ(client.post_json("/v1/completions", completion).status, 200);
}

}  // namespace engine_weight_sync_test
}  // namespace ooze::engine
