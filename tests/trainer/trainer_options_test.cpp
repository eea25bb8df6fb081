#include "trainer/trainer_options.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "actors/wire_archive.h"
#include "core/error.h"
#include "fsdp/lr_schedule.h"
#include "tests/support/expect_error.h"

namespace ooze::trainer {
namespace trainer_options_test {

Config load(const std::vector<std::string>& args, const TrainerOptions& defaults = {}) {
  ConfigSchema schema;
  add_trainer_fields(schema, defaults);
  return load_config(schema, "", args);
}

std::string error_of(const std::vector<std::string>& args, int64_t total_iters = 100) {
  return testing::error_message_of([&] { trainer_options_from_config(load(args), total_iters); });
}

TEST(TrainerOptionsTest, DefaultsAreMegatronsOptimizerAndFullSharding) {
  TrainerOptions options = trainer_options_from_config(load({}), 10);
  EXPECT_DOUBLE_EQ(options.lr_schedule.lr, 1e-6);
  EXPECT_EQ(options.lr_schedule.decay_style, fsdp::LrDecayStyle::kConstant);
  EXPECT_DOUBLE_EQ(options.adamw.weight_decay, 0.01);
  EXPECT_DOUBLE_EQ(options.adamw.beta1, 0.9);
  EXPECT_DOUBLE_EQ(options.adamw.beta2, 0.999);
  EXPECT_DOUBLE_EQ(options.adamw.eps, 1e-8);
  EXPECT_DOUBLE_EQ(options.step.clip_grad, 1.0);
  EXPECT_EQ(options.fsdp.shard.mixed_precision.param_dtype, torch::kFloat);
  EXPECT_TRUE(options.fsdp.shard.reshard_after_forward);
  EXPECT_TRUE(options.fsdp.shard.prefetch);
  EXPECT_FALSE(options.fsdp.activation_checkpointing);
  EXPECT_FALSE(options.checkpoint.iteration.has_value());
  EXPECT_TRUE(options.load_optim);
  EXPECT_TRUE(options.checkpoint.load_rng);
  EXPECT_EQ(options.total_iters, 10);
}

TEST(TrainerOptionsTest, ACommandsOwnDefaultsReplaceThem) {
  TrainerOptions defaults;
  defaults.lr_schedule.lr = 3e-3;
  defaults.lr_schedule.decay_style = fsdp::LrDecayStyle::kCosine;
  defaults.lr_schedule.warmup_iters = 2;
  TrainerOptions options = trainer_options_from_config(load({}, defaults), 10);
  EXPECT_DOUBLE_EQ(options.lr_schedule.lr, 3e-3);
  EXPECT_EQ(options.lr_schedule.decay_style, fsdp::LrDecayStyle::kCosine);
  EXPECT_EQ(options.lr_schedule.warmup_iters, 2);
  // A flag still wins over the command's default.
  EXPECT_DOUBLE_EQ(trainer_options_from_config(load({"--lr", "1e-5"}, defaults), 10).lr_schedule.lr,
                   1e-5);
}

TEST(TrainerOptionsTest, SlimeFlagsReachEveryField) {
  TrainerOptions options = trainer_options_from_config(load({"--lr",
                                                             "2e-5",
                                                             "--min-lr",
                                                             "1e-6",
                                                             "--lr-decay-style",
                                                             "WSD",
                                                             "--lr-warmup-fraction",
                                                             "0.1",
                                                             "--lr-decay-iters",
                                                             "80",
                                                             "--lr-wsd-decay-iters",
                                                             "20",
                                                             "--lr-wsd-decay-style",
                                                             "minus_sqrt",
                                                             "--lr-warmup-init",
                                                             "1e-7",
                                                             "--weight-decay",
                                                             "0.1",
                                                             "--adam-beta1",
                                                             "0.8",
                                                             "--adam-beta2",
                                                             "0.98",
                                                             "--adam-eps",
                                                             "1e-6",
                                                             "--clip-grad",
                                                             "0",
                                                             "--bf16",
                                                             "--no-reshard-after-forward",
                                                             "--no-prefetch",
                                                             "--gradient-checkpointing",
                                                             "--micro-batch-size",
                                                             "4",
                                                             "--use-dynamic-batch-size",
                                                             "--max-tokens-per-gpu",
                                                             "2048",
                                                             "--balance-data",
                                                             "--loss-aggregation",
                                                             "token-mean",
                                                             "--distributed-timeout-minutes",
                                                             "2.5",
                                                             "--ckpt-step",
                                                             "42",
                                                             "--no-load-optim",
                                                             "--no-load-rng"}),
                                                       100);
  EXPECT_DOUBLE_EQ(options.lr_schedule.lr, 2e-5);
  EXPECT_DOUBLE_EQ(options.lr_schedule.min_lr, 1e-6);
  EXPECT_DOUBLE_EQ(options.lr_schedule.warmup_init_lr, 1e-7);
  EXPECT_DOUBLE_EQ(options.adamw.weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(options.adamw.beta1, 0.8);
  EXPECT_DOUBLE_EQ(options.adamw.beta2, 0.98);
  EXPECT_DOUBLE_EQ(options.adamw.eps, 1e-6);
  EXPECT_DOUBLE_EQ(options.step.clip_grad, 0.0);
  EXPECT_EQ(options.fsdp.shard.mixed_precision.param_dtype, torch::kBFloat16);
  EXPECT_FALSE(options.fsdp.shard.reshard_after_forward);
  EXPECT_FALSE(options.fsdp.shard.prefetch);
  EXPECT_TRUE(options.fsdp.activation_checkpointing);
  EXPECT_EQ(options.step.packing.micro_batch_size, 4);
  EXPECT_TRUE(options.step.packing.use_dynamic_batch_size);
  EXPECT_EQ(options.step.packing.max_tokens_per_gpu, 2048);
  EXPECT_TRUE(options.step.packing.balance_data);
  EXPECT_EQ(options.step.loss_aggregation, algorithms::LossAggregation::kTokenMean);
  EXPECT_EQ(options.distributed.timeout(), std::chrono::milliseconds(150'000));
  EXPECT_EQ(options.checkpoint.iteration, 42);
  EXPECT_FALSE(options.load_optim);
  EXPECT_FALSE(options.checkpoint.load_rng);

  // The schedule they describe: warmup 0.1 * 80 = 8 steps, decay over 80, WSD's last 20.
  fsdp::LrSchedule schedule(options.lr_schedule, options.total_iters);
  EXPECT_DOUBLE_EQ(schedule.warmup_iters(), 8.0);
  EXPECT_EQ(schedule.decay_iters(), 80);
  EXPECT_DOUBLE_EQ(schedule.lr_at(0), 1e-7);
  EXPECT_DOUBLE_EQ(schedule.lr_at(30), 2e-5);  // stable phase
  EXPECT_DOUBLE_EQ(schedule.lr_at(90), 1e-6);  // past the decay: min_lr
}

TEST(TrainerOptionsTest, UnsetDecayItersMeanTheWholeRun) {
  TrainerOptions options = trainer_options_from_config(
      load({"--lr-decay-style", "linear", "--lr-warmup-iters", "5"}), 50);
  const fsdp::LrScheduleOptions& lr = options.lr_schedule;
  EXPECT_FALSE(lr.decay_iters.has_value());
  EXPECT_FALSE(lr.warmup_fraction.has_value());
  EXPECT_EQ(fsdp::LrSchedule(lr, 50).decay_iters(), 50);
}

TEST(TrainerOptionsTest, ContradictionsAreRefusedNamingTheFlag) {
  EXPECT_CONTAINS(error_of({"--lr-decay-style", "WSD"}), "--lr-wsd-decay-iters");
  EXPECT_CONTAINS(error_of({"--lr-warmup-iters", "5", "--lr-warmup-fraction", "0.1"}),
                  "--lr-warmup-fraction");
  EXPECT_CONTAINS(error_of({"--lr-decay-style", "cosine", "--lr-warmup-iters", "10"}, 10),
                  "warmup");
  EXPECT_CONTAINS(error_of({"--adam-beta1", "1"}), "--adam-beta1: expected a number in [0, 1)");
  EXPECT_CONTAINS(error_of({"--lr", "0"}), "--lr:");
  EXPECT_CONTAINS(error_of({"--lr-decay-style", "exponential"}),
                  "--lr-decay-style: expected one of");
  EXPECT_CONTAINS(error_of({"--micro-batch-size", "-1"}), "--micro-batch-size");
}

TEST(TrainerOptionsTest, EveryPartTravelsToTheRanks) {
  TrainerOptions sent = trainer_options_from_config(
      load({"--lr", "2e-5", "--lr-decay-iters", "30", "--adam-beta2", "0.95", "--bf16",
            "--context-parallel-size", "2", "--cp-impl", "allgather", "--micro-batch-size", "3",
            "--loss-type", "sft_loss", "--ckpt-step", "7", "--no-load-optim"}),
      40);
  // What the RL loop and the critic set after reading the flags.
  sent.step.policy_loss.kind = algorithms::PolicyLossKind::kCispo;
  sent.step.policy_loss.eps_clip_high = 0.28;
  sent.step.policy_loss.mismatch.level = algorithms::TisLevel::kGeometric;
  sent.step.value_loss.value_clip = 0.3;
  sent.step.temperature = 0.7;
  sent.fsdp.shard.sync_module_states = true;
  sent.distributed.host = "10.0.0.2";

  TrainerOptions received;
  actors::from_wire(actors::to_wire(sent), received);
  EXPECT_DOUBLE_EQ(received.lr_schedule.lr, 2e-5);
  EXPECT_EQ(received.lr_schedule.decay_iters, 30);
  EXPECT_FALSE(received.lr_schedule.warmup_fraction.has_value());
  EXPECT_DOUBLE_EQ(received.adamw.beta2, 0.95);
  EXPECT_EQ(received.fsdp.shard.mixed_precision.param_dtype, torch::kBFloat16);
  EXPECT_TRUE(received.fsdp.shard.sync_module_states);
  EXPECT_EQ(received.fsdp.context_parallel_size, 2);
  EXPECT_EQ(received.fsdp.cp_impl, models::ContextParallelImpl::kAllGather);
  EXPECT_EQ(received.step.packing.micro_batch_size, 3);
  EXPECT_EQ(received.step.packing.context_parallel_size, 2);
  EXPECT_EQ(received.step.loss_type, LossType::kSftLoss);
  EXPECT_EQ(received.step.policy_loss.kind, algorithms::PolicyLossKind::kCispo);
  EXPECT_DOUBLE_EQ(received.step.policy_loss.eps_clip_high, 0.28);
  EXPECT_EQ(received.step.policy_loss.mismatch.level, algorithms::TisLevel::kGeometric);
  EXPECT_DOUBLE_EQ(received.step.value_loss.value_clip, 0.3);
  EXPECT_DOUBLE_EQ(received.step.temperature, 0.7);
  EXPECT_EQ(received.distributed.host, "10.0.0.2");
  EXPECT_EQ(received.checkpoint.iteration, 7);
  EXPECT_FALSE(received.load_optim);
  EXPECT_EQ(received.total_iters, 40);

  // A critic's loss, which no flag names, travels too.
  sent.step.loss_type = LossType::kValueLoss;
  actors::from_wire(actors::to_wire(sent), received);
  EXPECT_EQ(received.step.loss_type, LossType::kValueLoss);
}

}  // namespace trainer_options_test
}  // namespace ooze::trainer
