// Weight sync from a trainer (this process: one FSDP rank of a tiny Qwen3) to RolloutEngine actors
// in real worker processes, colocated (shared memory) and disaggregated (a Gloo broadcast group
// formed through the head's key-value store). The judge of exactness is independent of the
// sync: the trainer's weights written as a Hugging Face model by fsdp::export_hf_model and loaded
// by an engine of this process, which must then generate the same tokens with the same
// log-probs, bit for bit, as every synced engine.
#include "trainer/weight_syncer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "actors/runtime.h"
#include "engine/engine.h"
#include "fsdp/fsdp_transformer.h"
#include "fsdp/hf_export.h"
#include "models/hf_checkpoint.h"
#include "tests/support/expect_error.h"
#include "tests/support/small_engine_options.h"
#include "tests/support/tiny_model.h"

namespace ooze::trainer {
namespace weight_syncer_test {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using ooze::testing::error_message_of;
using serving::RolloutEngine;

struct SyncCase {
  EnginePlacement placement;
  std::string dtype;     // the engines'
  int64_t bucket_bytes;  // --update-weight-buffer-size
  bool check = true;     // --check-weight-sync (off: the path a training run takes by default)
};

std::string case_name(const ::testing::TestParamInfo<SyncCase>& info) {
  const SyncCase& c = info.param;
  return std::string(c.placement == EnginePlacement::kColocated ? "Colocated" : "Broadcast") +
         (c.dtype == "bfloat16" ? "Bf16" : "Fp32") + "Bucket" + std::to_string(c.bucket_bytes) +
         (c.check ? "" : "Unchecked");
}

// Weight sync segments this process (the trainer) created that are still in /dev/shm; other
// tests running at the same time create their own, under their own pids.
int64_t shared_memory_segments() {
  const std::string mine = std::string(kSegmentPrefix) + "-" + std::to_string(::getpid()) + "-";
  int64_t count = 0;
  for (const auto& entry : fs::directory_iterator("/dev/shm")) {
    if (entry.path().filename().string().rfind(mine, 0) == 0) ++count;
  }
  return count;
}

class WeightSyncerTest : public ::testing::TestWithParam<SyncCase> {
 protected:
  static void SetUpTestSuite() {
    at::set_num_threads(1);
    dir_ = new std::string(::ooze::testing::tiny_model_dir());  // before any worker starts
    actors::RuntimeOptions runtime;
    runtime.resources = {{"CPU", 4}};
    runtime.log_to_driver = false;
    actors::init(runtime);
  }
  static void TearDownTestSuite() {
    actors::shutdown();
    delete dir_;
  }

  void SetUp() override {
    const std::string ref =
        (fs::temp_directory_path() / ("ooze-sync-ref-" + std::to_string(::getpid()))).string();
    reference_dir_ = ref;
    models::TransformerModel model(models::load_model_config(*dir_));
    models::load_hf_weights(*model, *dir_);
    trainer_ = std::make_unique<fsdp::FsdpTransformer>(model, nullptr);
  }
  void TearDown() override {
    for (const auto& engine : engines_) actors::kill(engine);
    std::error_code ec;
    fs::remove_all(reference_dir_, ec);
  }

  engine::EngineOptions engine_options(const std::string& dtype) const {
    return ::ooze::testing::small_engine_options(*dir_, dtype);
  }

  void spawn_engines(int count, const std::string& dtype, int max_restarts = 0) {
    for (int i = 0; i < count; ++i) {
      actors::ActorOptions options = serving::rollout_engine_actor_options();
      options.max_restarts = max_restarts;
      engines_.push_back(actors::spawn<RolloutEngine>(options, engine_options(dtype)));
    }
    for (const auto& engine : engines_) engine.wait_ready();
  }

  // A training step's worth of change to the trainer's fp32 master weights.
  void change_trainer_weights(uint64_t seed) {
    torch::manual_seed(seed);
    torch::NoGradGuard no_grad;
    fsdp::FullyShardedModule& sharded = trainer_->sharded();
    for (size_t u = 0; u < sharded.num_units(); ++u) {
      at::Tensor master = sharded.unit(u).master_shard();
      master.add_(torch::randn_like(master) * 0.05);
    }
  }

  static engine::GenerateRequest greedy_request() {
    engine::GenerateRequest r;
    r.input_ids = {84, 104, 101, 32, 119, 101, 105, 103};
    r.sampling.temperature = 0.0;
    r.sampling.max_new_tokens = 8;
    r.sampling.ignore_eos = true;
    return r;
  }

  // Every engine's tokens and log-probs == those of an engine loaded from the trainer's export.
  void expect_engines_match_trainer(const std::string& dtype, int64_t version) {
    fsdp::export_hf_model(reference_dir_, *trainer_, *dir_);
    engine::EngineOptions options = engine_options(dtype);
    options.model_dir = reference_dir_;
    engine::Engine reference(options);
    const engine::GenerateOutput expected = reference.generate(greedy_request())[0];
    for (size_t i = 0; i < engines_.size(); ++i) {
      const auto out = engines_[i].call(&RolloutEngine::generate, greedy_request()).get()[0];
      EXPECT_EQ(out.output_ids, expected.output_ids) << "engine " << i;
      EXPECT_EQ(out.output_logprobs, expected.output_logprobs) << "engine " << i;
      EXPECT_EQ(out.weight_version, version) << "engine " << i;
    }
  }

  WeightSyncOptions sync_options(int64_t bucket_bytes) const {
    WeightSyncOptions options;
    options.update_weight_buffer_size = bucket_bytes;
    options.timeout_seconds = 20;
    options.check = true;
    return options;
  }

  static at::ScalarType dtype_of(const std::string& name) {
    return name == "bfloat16" ? at::kBFloat16 : at::kFloat;
  }

  static std::string* dir_;
  std::string reference_dir_;
  std::unique_ptr<fsdp::FsdpTransformer> trainer_;
  std::vector<actors::ActorHandle<RolloutEngine>> engines_;
};

std::string* WeightSyncerTest::dir_ = nullptr;

template <class Condition>
bool eventually(Condition condition, std::chrono::milliseconds timeout = 30s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

TEST_P(WeightSyncerTest, SyncsInARowDeliverTheTrainersWeightsExactlyUnderIncreasingVersions) {
  const SyncCase& c = GetParam();
  const int64_t segments_before = shared_memory_segments();
  spawn_engines(2, c.dtype);
  WeightSyncOptions options = sync_options(c.bucket_bytes);
  options.check = c.check;
  WeightSyncer syncer(trainer_->sharded(), dtype_of(c.dtype), engines_, c.placement, options,
                      "syncer-test");
  for (int64_t version = 1; version <= 2; ++version) {
    change_trainer_weights(static_cast<uint64_t>(version));
    const WeightSyncReport report = syncer.sync(version);
    EXPECT_EQ(report.engines, 2);
    // Colocated on the CPU, the trainer writes the engines' parameters in place: no bucket.
    EXPECT_EQ(report.buckets, c.placement == EnginePlacement::kColocated
                                  ? 0
                                  : static_cast<int64_t>(syncer.plan().size()));
    expect_engines_match_trainer(c.dtype, version);
    EXPECT_EQ(shared_memory_segments(), segments_before) << "a segment was left in /dev/shm";
  }
  // A version sent twice is refused by every engine, which keeps serving the one it has.
  const std::string message = error_message_of<WeightSyncError>([&] { syncer.sync(2); });
  EXPECT_CONTAINS(message, "failed for 2 of 2 engines");
  EXPECT_CONTAINS(message, "not newer than the engine's version 2");
  expect_engines_match_trainer(c.dtype, 2);
}

INSTANTIATE_TEST_SUITE_P(
    PlacementsDtypesAndBucketSizes, WeightSyncerTest,
    ::testing::Values(
        // Buckets smaller than one tensor (each travels alone), and larger than the model.
        SyncCase{EnginePlacement::kColocated, "float32", 4096},
        SyncCase{EnginePlacement::kColocated, "bfloat16", int64_t{1} << 30},
        // The fp32 shards converted to bf16 as they are written (core/bfloat16_conversion.h);
        // the engines must still match one loaded from the trainer's export bit for bit.
        SyncCase{EnginePlacement::kColocated, "bfloat16", int64_t{1} << 30, /*check=*/false},
        SyncCase{EnginePlacement::kDisaggregated, "float32", int64_t{1} << 30},
        SyncCase{EnginePlacement::kDisaggregated, "bfloat16", 4096}),
    case_name);

class WeightSyncerFaultTest : public WeightSyncerTest {};

TEST_F(WeightSyncerFaultTest, ADeadEngineIsNamedTheOthersSyncAndItResyncsAloneAfterRestart) {
  spawn_engines(2, "float32", /*max_restarts=*/1);
  WeightSyncer syncer(trainer_->sharded(), at::kFloat, engines_, EnginePlacement::kColocated,
                      sync_options(16384), "fault-test");
  change_trainer_weights(1);
  syncer.sync(1);

  actors::kill(engines_[1], /*allow_restart=*/true);
  change_trainer_weights(2);
  // The news of engine 1's death races the sync's first call to it. Usually the call goes to the
  // old process and fails. When the news comes first, the call waits for the restart
  // (actors/client.cpp) and the sync reaches both engines, the new process included.
  const auto start = std::chrono::steady_clock::now();
  try {
    EXPECT_EQ(syncer.sync(2).engines, 2);
  } catch (const WeightSyncError& e) {
    EXPECT_LT(std::chrono::steady_clock::now() - start, 20s) << "not within the timeout";
    EXPECT_CONTAINS(e.what(), "failed for 1 of 2 engines");
    EXPECT_CONTAINS(e.what(), "engine 1 (");
    EXPECT_EQ(engines_[0].call(&RolloutEngine::stats).get().weight_version, 2);
    // Restarted from its model directory (version 0), it is brought up to date alone.
    engines_[1].wait_ready();
    const WeightSyncReport report = syncer.sync_engine(1, 2);
    EXPECT_EQ(report.engines, 1);
  }
  expect_engines_match_trainer("float32", 2);
}

TEST_F(WeightSyncerFaultTest, ABroadcastEngineRestartedAgainAndAgainJoinsANewGroupEachTime) {
  spawn_engines(2, "float32", /*max_restarts=*/2);
  WeightSyncer syncer(trainer_->sharded(), at::kFloat, engines_, EnginePlacement::kDisaggregated,
                      sync_options(16384), "restart-test");
  change_trainer_weights(1);
  syncer.sync(1);
  for (int restart = 1; restart <= 2; ++restart) {
    const int pid = engines_[1].info().pid;
    actors::kill(engines_[1], /*allow_restart=*/true);
    ASSERT_TRUE(eventually([&] {
      const actors::ActorInfo info = engines_[1].info();
      return info.state == actors::ActorState::kAlive && info.pid != pid;
    })) << "restart "
        << restart;
    // The new process is in no group: the one formed for the last restart must not be reused.
    const WeightSyncReport report = syncer.sync_engine(1, 1);
    EXPECT_EQ(report.engines, 1) << "restart " << restart;
    expect_engines_match_trainer("float32", 1);
  }
  // A full sync afterwards forms a group of both again.
  change_trainer_weights(2);
  EXPECT_EQ(syncer.sync(2).engines, 2);
  expect_engines_match_trainer("float32", 2);
}

TEST_F(WeightSyncerFaultTest, AnEngineThatDiedBeforeTheBroadcastLeavesNoStaleGroup) {
  spawn_engines(2, "float32", /*max_restarts=*/1);
  WeightSyncer syncer(trainer_->sharded(), at::kFloat, engines_, EnginePlacement::kDisaggregated,
                      sync_options(16384), "stale-group-test");
  change_trainer_weights(1);
  syncer.sync(1);
  actors::kill(engines_[1], /*allow_restart=*/true);
  change_trainer_weights(2);
  // The news of engine 1's death races the sync's first call to it. Usually the call goes to the
  // old process and fails, and then the sync fails for both. When the news comes first, the call
  // waits for the restart (actors/client.cpp) and the sync reaches both, in a new group.
  try {
    EXPECT_EQ(syncer.sync(2).engines, 2);
  } catch (const WeightSyncError& e) {
    EXPECT_CONTAINS(e.what(), "failed for 2 of 2 engines");
  }
  // Both back (engine 1 restarted, engine 0 refusing until a complete sync): the next full sync
  // needs a new group, not the one engine 1's old process was in.
  engines_[1].wait_ready();
  EXPECT_EQ(syncer.sync(3).engines, 2);
  expect_engines_match_trainer("float32", 3);
}

// A broadcast engine killed while the buckets are on the wire (a whole sync takes tens of ms
// here, so kills 1 to 10 ms in land during it): the sync fails within seconds, not after
// --weight-sync-timeout (60 s here), naming the dead engine; the survivor does not wait out its
// own timeout either; and the next full sync reaches both. Before the trainer closed its end of a
// failed group at once, such a kill cost the whole timeout.
TEST_F(WeightSyncerFaultTest, AnEngineKilledDuringTheBroadcastFailsTheSyncInSeconds) {
  spawn_engines(2, "float32", /*max_restarts=*/3);
  WeightSyncOptions options = sync_options(4096);
  options.timeout_seconds = 60;
  WeightSyncer syncer(trainer_->sharded(), at::kFloat, engines_, EnginePlacement::kDisaggregated,
                      options, "death-test");
  change_trainer_weights(1);
  syncer.sync(1);
  int64_t version = 1;
  for (int delay_ms : {1, 5, 10}) {
    change_trainer_weights(static_cast<uint64_t>(++version));
    const int pid = engines_[1].info().pid;
    std::thread killer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      actors::kill(engines_[1], /*allow_restart=*/true);
    });
    const auto start = std::chrono::steady_clock::now();
    std::string message;
    try {
      syncer.sync(version);
    } catch (const WeightSyncError& e) {
      message = e.what();
    }
    const auto took = std::chrono::steady_clock::now() - start;
    killer.join();
    EXPECT_LT(took, 10s) << "killed " << delay_ms << " ms in: " << message;
    if (!message.empty()) {
      EXPECT_CONTAINS(message, "engine 1 (");
      EXPECT_EQ(message.find("no answer within"), std::string::npos) << message;
    }
    ASSERT_TRUE(eventually([&] {
      const actors::ActorInfo info = engines_[1].info();
      return info.state == actors::ActorState::kAlive && info.pid != pid;
    }));
    engines_[1].wait_ready();
    change_trainer_weights(static_cast<uint64_t>(++version));
    EXPECT_EQ(syncer.sync(version).engines, 2);
  }
  expect_engines_match_trainer("float32", version);
}

TEST_F(WeightSyncerFaultTest, AHundredSyncsLeaveNoSharedMemoryBehind) {
  const int64_t before = shared_memory_segments();
  spawn_engines(2, "float32");
  {
    WeightSyncOptions options = sync_options(int64_t{1} << 20);
    options.check = false;
    WeightSyncer syncer(trainer_->sharded(), at::kFloat, engines_, EnginePlacement::kColocated,
                        options, "leak-test");
    for (int64_t version = 1; version <= 100; ++version) syncer.sync(version);
    EXPECT_EQ(shared_memory_segments(), before);
  }
  EXPECT_EQ(shared_memory_segments(), before);
  // Nor do the engines: their parameters' memory has no name in /dev/shm.
  for (const auto& engine : engines_) {
    const std::string names =
        std::string(kSegmentPrefix) + "-" + std::to_string(engine.info().pid) + "-";
    for (const auto& entry : fs::directory_iterator("/dev/shm")) {
      EXPECT_NE(entry.path().filename().string().rfind(names, 0), 0u) << entry.path();
    }
  }
  expect_engines_match_trainer("float32", 100);
}

}  // namespace weight_syncer_test
}  // namespace ooze::trainer
