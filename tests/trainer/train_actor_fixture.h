// What tests of TrainActor groups share: one actor runtime per test program whose workers are
// the `ooze` binary, a tiny initial model (byte tokenizer), groups of W ranks started on it,
// random language-modelling batches and one training step dealt out as a driver deals it.
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "actors/actor_group.h"
#include "actors/runtime.h"
#include "core/config.h"
#include "fsdp/packing.h"
#include "models/model_init.h"
#include "tests/support/process.h"
#include "trainer/train_actor.h"
#include "trainer/trainer_group.h"

namespace ooze::trainer {

using Sequences = std::vector<std::vector<int64_t>>;

constexpr int kBatchSize = 4;

class TrainActorFixture : public ::testing::Test {
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

  // The options every group here trains with, then `flags` (trainer_options.h's flags).
  static TrainerOptions trainer_options(const std::vector<std::string>& flags = {}) {
    TrainerOptions defaults;
    defaults.lr_schedule.lr = 1e-2;
    defaults.step.loss_aggregation = algorithms::LossAggregation::kTokenMean;
    defaults.step.loss_type = LossType::kSftLoss;
    ConfigSchema schema;
    add_trainer_fields(schema, defaults);
    return trainer_options_from_config(load_config(schema, "", flags), /*total_iters=*/10);
  }

  // `size` TrainActors on the initial model, joined as one FSDP group.
  static TrainerGroup start_group(int size, const std::string& name,
                                  const TrainerOptions& trainer = trainer_options()) {
    TrainInit init;
    init.options = trainer;
    return start_group(size, name, init);
  }
  // The same with `init`'s other fields (a reference model, ...).
  static TrainerGroup start_group(int size, const std::string& name, TrainInit init) {
    actors::ActorGroupOptions options;
    options.actor.resources = {{"CPU", 1}};
    options.group_name = name;
    auto group = TrainerGroup::spawn(size, options);
    init.model_dir = *dir_ + "/model";
    init.group_name = name;
    actors::get_all(group.call_all(&TrainActor::init, init));
    return group;
  }

  // Frees the group's CPUs for the next test.
  static void stop(const TrainerGroup& group) {
    for (const auto& actor : group.actors()) actors::kill(actor);
  }

  // Global batch `step`: `size` random sequences of 5..16 tokens.
  static Sequences batch(int step, int size = kBatchSize) {
    std::mt19937_64 random(1000 + step);
    Sequences sequences(size);
    for (auto& sequence : sequences) {
      sequence.resize(5 + random() % 12);
      for (int64_t& token : sequence) token = static_cast<int64_t>(random() % vocab_);
    }
    return sequences;
  }

  static TrainBatch batch_of(const Sequences& sequences) {
    TrainBatch out;
    for (const auto& sequence : sequences) {
      out.samples.push_back(language_modeling_sample(sequence));
    }
    return out;
  }

  // One step of `group` on `global` dealt out as the driver deals it (trainer/trainer_group.h).
  static TrainStepResult train(const TrainerGroup& group, const TrainBatch& global,
                               const fsdp::PackingOptions& packing) {
    const TrainStepResult result = train_step(group, global, packing);
    EXPECT_FALSE(result.skipped);
    EXPECT_GT(result.grad_norm, 0.0);
    EXPECT_EQ(result.samples, static_cast<int64_t>(global.samples.size()));
    return result;
  }
  // The same on plain language-modelling sequences; returns the step's loss.
  static double train(const TrainerGroup& group, const Sequences& sequences,
                      const fsdp::PackingOptions& packing = {}) {
    return train(group, batch_of(sequences), packing).metrics.at("loss");
  }
  static double train(const TrainerGroup& group, int step) { return train(group, batch(step)); }

  static inline std::string* dir_ = nullptr;
  static inline int64_t vocab_ = 0;
};

}  // namespace ooze::trainer
