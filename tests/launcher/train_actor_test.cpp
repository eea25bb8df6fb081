// TrainActors as a driver uses them: W FSDP ranks in worker processes (the `ooze` binary hosts
// them), trained, scored, put to sleep, checkpointed, and loaded by a group of another size.
#include "launcher/train_actor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "actors/actor_group.h"
#include "actors/runtime.h"
#include "models/model_init.h"
#include "tests/support/process.h"

namespace ooze::launcher {
namespace {

using actors::ActorGroup;
using actors::get_all;
using Sequences = std::vector<std::vector<int64_t>>;

constexpr int kBatchSize = 4;

class TrainActorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    actors::RuntimeOptions options;
    options.worker_executable = testing::build_path("launcher/ooze");
    options.resources = {{"CPU", 4}};
    options.log_to_driver = false;
    actors::init(options);
    dir_ = new std::string(testing::make_temp_dir("train-actor"));
    models::ModelInitOptions model;
    model.hidden_size = 64;
    model.num_layers = 2;
    model.num_heads = 4;
    model.num_kv_heads = 2;
    model.tokenizer = "byte";
    model.out_dir = *dir_ + "/model";
    model.seed = 7;
    vocab_ = models::init_hf_model(model).vocab_size;
  }
  static void TearDownTestSuite() {
    actors::shutdown();
    delete dir_;
  }

  // `size` TrainActors on the initial model, joined as one FSDP group.
  static ActorGroup<TrainActor> start_group(int size, const std::string& name,
                                            int64_t micro_batch_size = 0) {
    actors::ActorGroupOptions options;
    options.actor.resources = {{"CPU", 1}};
    options.group_name = name;
    auto group = ActorGroup<TrainActor>::spawn(size, options);
    TrainerOptions trainer;
    trainer.lr = 1e-2;
    trainer.total_iters = 10;
    trainer.micro_batch_size = micro_batch_size;
    get_all(group.call_all(&TrainActor::init, TrainInit{*dir_ + "/model", name, trainer}));
    return group;
  }

  // Frees the group's CPUs for the next test.
  static void stop(const ActorGroup<TrainActor>& group) {
    for (const auto& actor : group.actors()) actors::kill(actor);
  }

  // Global batch `step`: kBatchSize random sequences of 5..16 tokens.
  static Sequences batch(int step) {
    std::mt19937_64 random(1000 + step);
    Sequences sequences(kBatchSize);
    for (auto& sequence : sequences) {
      sequence.resize(5 + random() % 12);
      for (int64_t& token : sequence) token = static_cast<int64_t>(random() % vocab_);
    }
    return sequences;
  }

  // One step of `group` on global batch `step`, rank r taking every W-th sequence; returns
  // the mean loss over the batch's predicted tokens.
  static double train(const ActorGroup<TrainActor>& group, int step) {
    Sequences sequences = batch(step);
    int world = group.size();
    std::vector<TrainBatch> shares(world);
    int64_t tokens = 0;
    for (size_t i = 0; i < sequences.size(); ++i) {
      shares[i % world].sequences.push_back(sequences[i]);
      tokens += static_cast<int64_t>(sequences[i].size()) - 1;
    }
    for (TrainBatch& share : shares) {
      share.global_tokens = tokens;
      share.global_samples = kBatchSize;
    }
    auto results = get_all(group.call_each(
        &TrainActor::train_step, [&](int rank) { return std::make_tuple(shares[rank]); }));
    double loss_sum = 0;
    for (const TrainStepResult& result : results) {
      EXPECT_FALSE(result.skipped);
      EXPECT_GT(result.grad_norm, 0.0);
      loss_sum += result.loss_sum;
    }
    return loss_sum / static_cast<double>(tokens);
  }

  // Every rank's log-probs of the same sequences (rank 0's are returned): each rank scores the
  // whole batch with the full weights, so all must agree exactly.
  static std::vector<std::vector<float>> score(const ActorGroup<TrainActor>& group,
                                               const Sequences& sequences) {
    TrainBatch scored;
    scored.sequences = sequences;
    auto per_rank = get_all(group.call_all(&TrainActor::compute_log_probs, scored));
    for (size_t rank = 1; rank < per_rank.size(); ++rank) {
      EXPECT_EQ(per_rank[rank], per_rank[0]) << "rank " << rank;
    }
    return per_rank[0];
  }

  static std::string* dir_;
  static int64_t vocab_;
};

std::string* TrainActorTest::dir_ = nullptr;
int64_t TrainActorTest::vocab_ = 0;

double max_difference(const std::vector<std::vector<float>>& a,
                      const std::vector<std::vector<float>>& b) {
  EXPECT_EQ(a.size(), b.size());
  double most = 0;
  for (size_t s = 0; s < std::min(a.size(), b.size()); ++s) {
    EXPECT_EQ(a[s].size(), b[s].size()) << "sequence " << s;
    for (size_t t = 0; t < std::min(a[s].size(), b[s].size()); ++t) {
      most = std::max(most, std::abs(static_cast<double>(a[s][t]) - b[s][t]));
    }
  }
  return most;
}

TEST_F(TrainActorTest, TwoRanksCheckpointAndOneRankContinuesTheirRun) {
  auto pair = start_group(2, "pair");
  auto single = start_group(1, "single");
  // Sharding halves what each rank holds (parameters, gradients, AdamW moments).
  int64_t whole = get_all(single.call_all(&TrainActor::state_bytes))[0];
  for (int64_t half : get_all(pair.call_all(&TrainActor::state_bytes))) {
    EXPECT_NEAR(static_cast<double>(whole) / static_cast<double>(half), 2.0, 0.02);
  }

  Sequences probe = batch(99);
  std::vector<std::vector<float>> initial = score(pair, probe);
  EXPECT_EQ(score(single, probe), initial);  // the same initial weights, sharded or not
  for (const auto& values : initial) {
    EXPECT_EQ(values.size() + 1, probe[&values - &initial[0]].size());
    for (float value : values) EXPECT_LT(value, 0.0f);
  }

  double first = train(pair, 0);
  double second = train(pair, 1);
  EXPECT_LT(second, first + 1.0);
  std::vector<std::vector<float>> trained = score(pair, probe);
  EXPECT_GT(max_difference(trained, initial), 1e-3);  // training moved the weights

  // Sleeping and waking (host offload on a GPU, a no-op here) keeps every number.
  get_all(pair.call_all(&TrainActor::sleep));
  get_all(pair.call_all(&TrainActor::wake_up));
  EXPECT_EQ(score(pair, probe), trained);

  std::string checkpoints = *dir_ + "/checkpoints";
  for (const TrainProgress& saved : get_all(pair.call_all(&TrainActor::save, checkpoints))) {
    EXPECT_EQ(saved.iteration, 2);
    EXPECT_EQ(saved.consumed_samples, 2 * kBatchSize);
  }

  // One rank loads the two ranks' shards: the same weights, so the same scores bit for bit.
  TrainProgress loaded = get_all(single.call_all(&TrainActor::load, checkpoints))[0];
  EXPECT_EQ(loaded.iteration, 2);
  EXPECT_EQ(loaded.consumed_samples, 2 * kBatchSize);
  EXPECT_EQ(score(single, probe), trained);

  // And the optimizer state came along: the next step matches the two-rank run's to fp32
  // rounding (sums over ranks are ordered differently).
  double pair_third = train(pair, 2);
  double single_third = train(single, 2);
  EXPECT_NEAR(single_third, pair_third, 1e-5);
  EXPECT_LT(max_difference(score(single, probe), score(pair, probe)), 1e-5);
  stop(pair);
  stop(single);
}

TEST_F(TrainActorTest, MistakesComeBackAsRemoteErrorsNamingThem) {
  actors::ActorGroupOptions options;
  options.actor.resources = {{"CPU", 1}};
  options.group_name = "uninitialised";
  auto group = ActorGroup<TrainActor>::spawn(1, options);
  try {
    group.call(0, &TrainActor::train_step, TrainBatch{}).get();
    ADD_FAILURE() << "train_step before init succeeded";
  } catch (const actors::RemoteError& error) {
    EXPECT_NE(std::string(error.what()).find("train_step before init"), std::string::npos)
        << error.what();
  }

  auto single = start_group(1, "no-checkpoint");
  std::string empty = testing::make_temp_dir("train-actor-empty");
  try {
    single.call(0, &TrainActor::load, empty).get();
    ADD_FAILURE() << "loading from a directory without checkpoints succeeded";
  } catch (const actors::RemoteError& error) {
    EXPECT_NE(std::string(error.what()).find(empty + " has no latest_checkpointed_iteration.txt"),
              std::string::npos)
        << error.what();
  }
  // The actor survived its caller's mistakes and still trains.
  EXPECT_TRUE(std::isfinite(train(single, 0)));
  stop(group);
  stop(single);
}

TEST_F(TrainActorTest, UnevenMicroBatchCountsAreRefusedOnEveryRankInsteadOfHanging) {
  auto pair = start_group(2, "uneven", /*micro_batch_size=*/1);
  Sequences sequences = batch(0);
  TrainBatch three, one;
  three.sequences = {sequences[0], sequences[1], sequences[2]};
  one.sequences = {sequences[3]};
  three.global_tokens = one.global_tokens = 10;
  auto futures = pair.call_each(&TrainActor::train_step,
                                [&](int rank) { return std::make_tuple(rank == 0 ? three : one); });
  for (auto& future : futures) {
    try {
      future.get(std::chrono::seconds(60));
      ADD_FAILURE() << "uneven micro-batches were trained";
    } catch (const actors::RemoteError& error) {
      EXPECT_NE(std::string(error.what()).find("range from 1 to 3"), std::string::npos)
          << error.what();
    }
  }
  // Nothing ran, so the group is still in step: an even batch trains.
  EXPECT_TRUE(std::isfinite(train(pair, 1)));
  stop(pair);
}

}  // namespace
}  // namespace ooze::launcher
