// TrainActor groups keeping RolloutEngine actors up to date, driven as the RL loop drives them
// (connect_rollout_engines, then update_weights after every step): two FSDP ranks, colocated and
// disaggregated, real training steps between syncs, requests racing the syncs, and an engine or
// a trainer rank dying in the middle of one. The judge of exactness is independent of the sync:
// an engine of this process loaded from the group's save_hf export of the same weights.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "tests/support/expect_error.h"
#include "tests/support/small_engine_options.h"
#include "tests/trainer/train_actor_fixture.h"

namespace ooze::trainer {
namespace train_actor_weight_sync_test {

using namespace std::chrono_literals;
using serving::RolloutEngine;
using EngineHandle = actors::ActorHandle<RolloutEngine>;
using Clock = std::chrono::steady_clock;

constexpr double kSyncTimeoutSeconds = 10;

struct SyncCase {
  bool colocate;
  std::string dtype;   // the engines'
  std::string bucket;  // "small": 4 KiB, most tensors alone and over size; "one-tensor":
                       // exactly the embedding's bytes; "whole": larger than the model
  std::string name() const {
    return std::string(colocate ? "Colocated" : "Broadcast") +
           (dtype == "bfloat16" ? "Bf16" : "Fp32") +
           (bucket == "small"   ? "SmallBuckets"
            : bucket == "whole" ? "OneBucket"
                                : "TensorBucket");
  }
};

class TrainActorWeightSyncTest : public TrainActorFixture {
 protected:
  void TearDown() override {
    for (const auto& engine : engines_) actors::kill(engine);
    for (const auto& group : groups_) stop(group);
  }

  TrainerGroup start(int size, const std::string& name) {
    groups_.push_back(start_group(size, name));
    return groups_.back();
  }

  // Engines start from the initial model, as the RL loop's do (version 0).
  std::vector<EngineHandle> spawn_engines(int count, const std::string& dtype,
                                          int max_restarts = 0) {
    std::vector<EngineHandle> spawned;
    for (int i = 0; i < count; ++i) {
      actors::ActorOptions options = serving::rollout_engine_actor_options();
      options.max_restarts = max_restarts;
      spawned.push_back(actors::spawn<RolloutEngine>(
          options, ::ooze::testing::small_engine_options(*dir_ + "/model", dtype)));
      engines_.push_back(spawned.back());
    }
    for (const auto& engine : spawned) engine.wait_ready();
    return spawned;
  }

  static void connect(const TrainerGroup& group, const std::vector<EngineHandle>& engines,
                      bool colocate, int64_t bucket_bytes) {
    RolloutEngineConnection connection;
    connection.engines = engines;
    connection.colocate = colocate;
    connection.options.update_weight_buffer_size = bucket_bytes;
    connection.options.timeout_seconds = kSyncTimeoutSeconds;
    connection.options.check = true;
    actors::get_all(group.call_all(&TrainActor::connect_rollout_engines, connection));
  }

  // An engine of this process on the group's weights as they are now (save_hf's export).
  static std::unique_ptr<engine::Engine> reference(const TrainerGroup& group,
                                                   const std::string& dtype,
                                                   const std::string& name) {
    const std::string dir = *dir_ + "/" + name;
    actors::get_all(group.call_all(&TrainActor::save_hf, dir));
    return std::make_unique<engine::Engine>(::ooze::testing::small_engine_options(dir, dtype));
  }

  static engine::GenerateRequest greedy(int64_t max_new_tokens) {
    engine::GenerateRequest request;
    request.input_ids = {84, 104, 101, 32, 119, 101, 105, 103};
    request.sampling.temperature = 0.0;
    request.sampling.max_new_tokens = max_new_tokens;
    request.sampling.ignore_eos = true;
    return request;
  }

  static engine::GenerateOutput generate(const EngineHandle& engine, int64_t max_new_tokens) {
    return engine.call(&RolloutEngine::generate, greedy(max_new_tokens)).get()[0];
  }

  // The engine's greedy tokens and log-probs == the reference's, bit for bit, under `version`.
  static void expect_serves(const EngineHandle& engine, engine::Engine& reference, int64_t version,
                            const std::string& what) {
    const engine::GenerateOutput expected = reference.generate(greedy(8))[0];
    const engine::GenerateOutput out = generate(engine, 8);
    EXPECT_EQ(out.output_ids, expected.output_ids) << what;
    EXPECT_EQ(out.output_logprobs, expected.output_logprobs) << what;
    EXPECT_EQ(out.weight_version, version) << what;
  }

  // Polls the engine's stats until `condition` holds; fails the test after `timeout`.
  template <class Condition>
  static bool wait_for(const EngineHandle& engine, Condition condition,
                       std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      if (condition(engine.call(&RolloutEngine::stats).get())) return true;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }

  std::vector<EngineHandle> engines_;
  std::vector<TrainerGroup> groups_;
};

class TrainActorWeightSyncCaseTest : public TrainActorWeightSyncTest,
                                     public ::testing::WithParamInterface<SyncCase> {};

TEST_P(TrainActorWeightSyncCaseTest, TwoRanksTrainAndEveryEngineServesExactlyTheirWeights) {
  const SyncCase& c = GetParam();
  auto group = start(2, "sync-" + c.name());
  const auto engines = spawn_engines(2, c.dtype);
  const int64_t element = c.dtype == "bfloat16" ? 2 : 4;
  const int64_t bucket = c.bucket == "small"        ? 4096
                         : c.bucket == "one-tensor" ? vocab_ * 64 * element  // the embedding
                                                    : int64_t{1} << 30;
  connect(group, engines, c.colocate, bucket);
  for (int64_t version = 1; version <= 2; ++version) {
    train(group, static_cast<int>(version));
    const auto reports =
        actors::get_all(group.call_all(&TrainActor::update_weights, version, true));
    // Colocated, each rank serves the engine on its node; otherwise rank 0 sends to both.
    EXPECT_EQ(reports[0].engines, c.colocate ? 1 : 2);
    EXPECT_EQ(reports[1].engines, c.colocate ? 1 : 0);
    EXPECT_EQ(reports[0].buckets, reports[1].buckets);
    // On the CPU each rank writes its own shards' slices, into the engines' parameters or into
    // rank 0's broadcast buffers: no unit is gathered.
    EXPECT_TRUE(reports[0].slices_written);
    EXPECT_TRUE(reports[1].slices_written);
    if (c.colocate) {
      // On the CPU each rank writes its shards into the engines' parameters: no bucket.
      EXPECT_EQ(reports[0].buckets, 0);
    } else if (c.bucket == "whole") {
      EXPECT_EQ(reports[0].buckets, 1);
    } else {
      EXPECT_GT(reports[0].buckets, 2);
    }
    auto expected = reference(group, c.dtype, c.name() + "-v" + std::to_string(version));
    for (size_t i = 0; i < engines.size(); ++i) {
      expect_serves(engines[i], *expected, version, "engine " + std::to_string(i));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(PlacementsDtypesAndBucketSizes, TrainActorWeightSyncCaseTest,
                         ::testing::Values(SyncCase{true, "float32", "one-tensor"},
                                           SyncCase{true, "bfloat16", "small"},
                                           SyncCase{false, "float32", "small"},
                                           SyncCase{false, "bfloat16", "whole"}),
                         [](const auto& info) { return info.param.name(); });

// Requests sent one after another while the group trains and syncs (in-flight ones aborted, as
// the RL loop does without partial rollouts): each is answered wholly by one version's weights,
// the one its output names, so its tokens are a prefix of that version's greedy answer.
TEST_F(TrainActorWeightSyncTest, RequestsRacingSyncsAreAnsweredByTheVersionTheyName) {
  auto group = start(2, "racing");
  const auto engines = spawn_engines(2, "float32");
  connect(group, engines, /*colocate=*/true, 4096);
  constexpr int64_t kTokens = 24;
  std::map<int64_t, std::vector<int64_t>> answers;  // version -> its greedy tokens
  answers[0] = reference(group, "float32", "racing-v0")->generate(greedy(kTokens))[0].output_ids;

  std::atomic<bool> done{false};
  std::vector<engine::GenerateOutput> outputs;
  std::thread client([&] {
    while (!done) outputs.push_back(generate(engines[0], kTokens));
  });
  for (int64_t version = 1; version <= 3; ++version) {
    train(group, static_cast<int>(version));
    answers[version] = reference(group, "float32", "racing-v" + std::to_string(version))
                           ->generate(greedy(kTokens))[0]
                           .output_ids;
    actors::get_all(group.call_all(&TrainActor::update_weights, version, true));
  }
  std::this_thread::sleep_for(300ms);  // a few answers from the last version too
  done = true;
  client.join();

  std::set<int64_t> versions_seen;
  int aborted = 0;
  for (const engine::GenerateOutput& out : outputs) {
    const std::set<int64_t> versions(out.output_weight_versions.begin(),
                                     out.output_weight_versions.end());
    ASSERT_LE(versions.size(), 1u) << "one answer mixes weight versions";
    if (out.output_ids.empty()) continue;
    EXPECT_EQ(*versions.begin(), out.weight_version);
    const std::vector<int64_t>& expected = answers.at(out.weight_version);
    ASSERT_LE(out.output_ids.size(), expected.size());
    EXPECT_TRUE(std::equal(out.output_ids.begin(), out.output_ids.end(), expected.begin()))
        << "version " << out.weight_version << " answered with other weights' tokens";
    if (out.finish_reason == engine::FinishReason::kAbort) {
      ++aborted;
    } else {
      EXPECT_EQ(out.output_ids.size(), expected.size());
    }
    versions_seen.insert(out.weight_version);
  }
  std::printf("%zu answers, %d aborted by a sync, versions seen: %zu\n", outputs.size(), aborted,
              versions_seen.size());
  EXPECT_GE(versions_seen.size(), 3u) << "the requests did not race the syncs";
  EXPECT_TRUE(versions_seen.count(3)) << "no answer came from the last weights";
}

// Rank 0 begins a sync and waits for rank 1 in the first all-reduce; its engine dies there and
// restarts. Rank 1's engine still gets the version; rank 0's error names its engine, which the
// ranks found outside the sync (a new instance, serving what it loaded) and so did not write,
// within the timeout; and the engine, restarted from the initial model, is brought up to date
// alone.
TEST_F(TrainActorWeightSyncTest, AnEngineKilledMidSyncIsNamedAndResyncsAloneAfterRestart) {
  auto group = start(2, "engine-dies");
  const auto engines = spawn_engines(2, "float32", /*max_restarts=*/1);
  connect(group, engines, /*colocate=*/true, 4096);
  train(group, 1);
  actors::get_all(group.call_all(&TrainActor::update_weights, int64_t{1}, true));
  train(group, 2);
  auto rank0 = group.call(0, &TrainActor::update_weights, int64_t{2}, true);
  ASSERT_TRUE(wait_for(
      engines[0], [](const engine::EngineStats& s) { return s.syncing_weights; }, 10s));
  actors::kill(engines[0], /*allow_restart=*/true);
  const auto killed = Clock::now();
  // kill() returns before the process is gone: rank 1 joins (and bucket 0 can be sent) only once
  // the runtime has seen engine 0 die, so the sync fails at bucket 0 however loaded the machine.
  const Clock::time_point seen_deadline = killed + 10s;
  while (engines[0].info().restarts < 1 && Clock::now() < seen_deadline) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_GE(engines[0].info().restarts, 1) << "engine 0 was not seen to die within 10 s";
  auto rank1 = group.call(1, &TrainActor::update_weights, int64_t{2}, true);
  EXPECT_EQ(rank1.get(60s).engines, 1);
  const std::string message =
      testing::error_message_of<actors::RemoteError>([&] { rank0.get(60s); });
  EXPECT_LT(Clock::now() - killed, std::chrono::seconds(static_cast<int>(kSyncTimeoutSeconds) + 5));
  EXPECT_CONTAINS(message, "failed for 1 of 1 engines");
  EXPECT_CONTAINS(message, "engine 0 (");
  // The restarted engine is not in the sync rank 0 began: nobody writes into it.
  EXPECT_CONTAINS(message, "not in the sync to version 2");

  engines[0].wait_ready();
  EXPECT_EQ(engines[0].call(&RolloutEngine::stats).get().weight_version, 0);
  actors::get_all(group.call_all(&TrainActor::update_engine_weights, int64_t{0}, int64_t{2}));
  auto expected = reference(group, "float32", "engine-dies-v2");
  expect_serves(engines[0], *expected, 2, "restarted engine 0");
  expect_serves(engines[1], *expected, 2, "engine 1");
}

// Rank 0 of a disaggregated group begins a sync (the engines wait in the broadcast, rank 0 in
// the first all-gather) and is killed. The engines give the sync up, refuse to generate rather
// than serve a half-updated model, and serve again once another trainer completes a sync.
TEST_F(TrainActorWeightSyncTest, ATrainerKilledMidSyncLeavesEnginesRefusingUntilACompleteOne) {
  auto group = start(2, "trainer-dies");
  const auto engines = spawn_engines(2, "float32");
  connect(group, engines, /*colocate=*/false, 4096);
  train(group, 1);
  actors::get_all(group.call_all(&TrainActor::update_weights, int64_t{1}, true));
  train(group, 2);
  auto rank0 = group.call(0, &TrainActor::update_weights, int64_t{2}, true);
  for (const auto& engine : engines) {
    ASSERT_TRUE(wait_for(
        engine, [](const engine::EngineStats& s) { return s.syncing_weights; }, 10s));
  }
  std::this_thread::sleep_for(500ms);  // into the broadcast
  actors::kill(group.actors()[0]);
  const auto killed = Clock::now();
  for (size_t i = 0; i < engines.size(); ++i) {
    EXPECT_TRUE(wait_for(
        engines[i], [](const engine::EngineStats& s) { return s.weights_incomplete; },
        std::chrono::seconds(static_cast<int>(kSyncTimeoutSeconds) + 5)))
        << "engine " << i << " still waits for the dead trainer";
    const std::string message =
        testing::error_message_of<actors::RemoteError>([&] { generate(engines[i], 4); });
    EXPECT_CONTAINS(message, "weights are incomplete");
  }
  std::printf("the engines gave the sync up %.2f s after the trainer died\n",
              std::chrono::duration<double>(Clock::now() - killed).count());
  stop(group);

  auto fresh = start(1, "trainer-after");
  connect(fresh, engines, /*colocate=*/false, 4096);
  actors::get_all(fresh.call_all(&TrainActor::update_weights, int64_t{3}, true));
  auto expected = reference(fresh, "float32", "trainer-after-v3");
  for (size_t i = 0; i < engines.size(); ++i) {
    expect_serves(engines[i], *expected, 3, "engine " + std::to_string(i));
  }
}

// LoRA: the engines run the plain model and receive the frozen base with the adapters merged
// in, W + (alpha / r) B A; after an engine's first sync only the adapted weights travel. The
// judge: an engine of this process on the base with the group's saved PEFT adapter merged at
// start (what `ooze serve --lora` runs). Colocated first, then the same group reconnected to
// the engines by broadcast, which sends everything once again.
TEST_F(TrainActorWeightSyncTest, LoraEnginesGetMergedWeightsAndThenOnlyTheAdaptedOnes) {
  groups_.push_back(start_group(2, "lora-sync",
                                trainer_options({"--lora-rank", "4", "--lora-alpha", "16",
                                                 "--target-modules", "q_proj,v_proj,down_proj"})));
  const TrainerGroup group = groups_.back();
  const auto engines = spawn_engines(2, "float32");
  // hidden 64, 4 heads of 16 (2 for keys and values), intermediate 3 x 64: per layer q_proj
  // [64, 64], v_proj [32, 64] and down_proj [64, 192], in fp32.
  const int64_t adapted_bytes = 2 * (64 * 64 + 32 * 64 + 64 * 192) * 4;
  int64_t version = 0;
  for (const bool colocate : {true, false}) {
    connect(group, engines, colocate, 4096);
    for (int sync = 0; sync < 2; ++sync) {
      ++version;
      train(group, static_cast<int>(version));
      const auto reports =
          actors::get_all(group.call_all(&TrainActor::update_weights, version, true));
      // Merged tensors are computed from gathered units, whatever the placement.
      EXPECT_FALSE(reports[0].slices_written) << "version " << version;
      if (sync == 0) {
        EXPECT_GT(reports[0].bytes, 3 * adapted_bytes) << "version " << version;
      } else {
        EXPECT_EQ(reports[0].bytes, adapted_bytes) << "version " << version;
      }
      const std::string adapter = *dir_ + "/lora-sync-v" + std::to_string(version);
      actors::get_all(group.call_all(&TrainActor::save_hf, adapter));
      engine::EngineOptions options = ::ooze::testing::small_engine_options(*dir_ + "/model");
      options.lora = adapter;
      engine::Engine expected(options);
      for (size_t i = 0; i < engines.size(); ++i) {
        expect_serves(engines[i], expected, version,
                      "engine " + std::to_string(i) + ", version " + std::to_string(version));
      }
    }
  }
}

// --lora-sync adapter: the engines hold adapters of the trainer's shape and receive the frozen
// base once, then A and B alone; they serve what the merged adapter serves (the same greedy
// tokens, log-probs within fp32 rounding of the other order of computation).
TEST_F(TrainActorWeightSyncTest, LoraAdapterSyncSendsOnlyAAndBAndServesAsTheMergedAdapter) {
  const TrainerOptions options =
      trainer_options({"--lora-rank", "4", "--lora-alpha", "16", "--target-modules",
                       "q_proj,v_proj,down_proj", "--lora-sync", "adapter"});
  groups_.push_back(start_group(1, "lora-adapter-sync", options));
  const TrainerGroup group = groups_.back();
  engine::EngineOptions engine_options = ::ooze::testing::small_engine_options(*dir_ + "/model");
  engine_options.adapter = options.lora;
  engines_.push_back(
      actors::spawn<RolloutEngine>(serving::rollout_engine_actor_options(), engine_options));
  const EngineHandle engine = engines_.back();
  engine.wait_ready();
  connect(group, {engine}, /*colocate=*/true, 4096);
  // Per layer A [4, in] and B [out, 4] of q_proj (64 -> 64), v_proj (64 -> 32) and down_proj
  // (192 -> 64), in fp32.
  const int64_t adapter_bytes = 2 * 4 * ((64 + 64) + (64 + 32) + (192 + 64)) * 4;
  for (int64_t version = 1; version <= 2; ++version) {
    train(group, static_cast<int>(version));
    const auto reports =
        actors::get_all(group.call_all(&TrainActor::update_weights, version, true));
    if (version == 1) {
      EXPECT_GT(reports[0].bytes, 10 * adapter_bytes);  // the base too
    } else {
      EXPECT_EQ(reports[0].bytes, adapter_bytes);
    }
    const std::string adapter = *dir_ + "/lora-adapter-sync-v" + std::to_string(version);
    actors::get_all(group.call_all(&TrainActor::save_hf, adapter));
    engine::EngineOptions merged = ::ooze::testing::small_engine_options(*dir_ + "/model");
    merged.lora = adapter;
    const engine::GenerateOutput expected = engine::Engine(merged).generate(greedy(8))[0];
    const engine::GenerateOutput out = generate(engine, 8);
    EXPECT_EQ(out.output_ids, expected.output_ids) << "version " << version;
    ASSERT_EQ(out.output_logprobs.size(), expected.output_logprobs.size());
    for (size_t t = 0; t < out.output_logprobs.size(); ++t) {
      EXPECT_NEAR(out.output_logprobs[t], expected.output_logprobs[t], 1e-5) << "token " << t;
    }
    EXPECT_EQ(out.weight_version, version);
  }
}

}  // namespace train_actor_weight_sync_test
}  // namespace ooze::trainer
