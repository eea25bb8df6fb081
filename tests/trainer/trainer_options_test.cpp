#include "trainer/trainer_options.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

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
  EXPECT_DOUBLE_EQ(options.lr, 1e-6);
  EXPECT_EQ(options.lr_decay_style, "constant");
  EXPECT_DOUBLE_EQ(options.weight_decay, 0.01);
  EXPECT_DOUBLE_EQ(options.adam_beta1, 0.9);
  EXPECT_DOUBLE_EQ(options.adam_beta2, 0.999);
  EXPECT_DOUBLE_EQ(options.adam_eps, 1e-8);
  EXPECT_DOUBLE_EQ(options.clip_grad, 1.0);
  EXPECT_FALSE(options.bf16);
  EXPECT_TRUE(options.reshard_after_forward);
  EXPECT_TRUE(options.prefetch);
  EXPECT_FALSE(options.gradient_checkpointing);
  EXPECT_EQ(options.ckpt_step, -1);
  EXPECT_TRUE(options.load_optim);
  EXPECT_TRUE(options.load_rng);
  EXPECT_EQ(options.total_iters, 10);
}

TEST(TrainerOptionsTest, ACommandsOwnDefaultsReplaceThem) {
  TrainerOptions defaults;
  defaults.lr = 3e-3;
  defaults.lr_decay_style = "cosine";
  defaults.lr_warmup_iters = 2;
  TrainerOptions options = trainer_options_from_config(load({}, defaults), 10);
  EXPECT_DOUBLE_EQ(options.lr, 3e-3);
  EXPECT_EQ(options.lr_decay_style, "cosine");
  EXPECT_EQ(options.lr_warmup_iters, 2);
  // A flag still wins over the command's default.
  EXPECT_DOUBLE_EQ(trainer_options_from_config(load({"--lr", "1e-5"}, defaults), 10).lr, 1e-5);
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
  EXPECT_DOUBLE_EQ(options.lr, 2e-5);
  EXPECT_DOUBLE_EQ(options.min_lr, 1e-6);
  EXPECT_DOUBLE_EQ(options.lr_warmup_init, 1e-7);
  EXPECT_DOUBLE_EQ(options.weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(options.adam_beta1, 0.8);
  EXPECT_DOUBLE_EQ(options.adam_beta2, 0.98);
  EXPECT_DOUBLE_EQ(options.adam_eps, 1e-6);
  EXPECT_DOUBLE_EQ(options.clip_grad, 0.0);
  EXPECT_TRUE(options.bf16);
  EXPECT_FALSE(options.reshard_after_forward);
  EXPECT_FALSE(options.prefetch);
  EXPECT_TRUE(options.gradient_checkpointing);
  EXPECT_EQ(options.packing.micro_batch_size, 4);
  EXPECT_TRUE(options.packing.use_dynamic_batch_size);
  EXPECT_EQ(options.packing.max_tokens_per_gpu, 2048);
  EXPECT_TRUE(options.packing.balance_data);
  EXPECT_EQ(options.loss_aggregation, algorithms::LossAggregation::kTokenMean);
  EXPECT_EQ(options.distributed.timeout(), std::chrono::milliseconds(150'000));
  EXPECT_EQ(options.ckpt_step, 42);
  EXPECT_FALSE(options.load_optim);
  EXPECT_FALSE(options.load_rng);

  // The schedule they describe: warmup 0.1 * 80 = 8 steps, decay over 80, WSD's last 20.
  fsdp::LrSchedule schedule(lr_schedule_options(options), options.total_iters);
  EXPECT_DOUBLE_EQ(schedule.warmup_iters(), 8.0);
  EXPECT_EQ(schedule.decay_iters(), 80);
  EXPECT_DOUBLE_EQ(schedule.lr_at(0), 1e-7);
  EXPECT_DOUBLE_EQ(schedule.lr_at(30), 2e-5);  // stable phase
  EXPECT_DOUBLE_EQ(schedule.lr_at(90), 1e-6);  // past the decay: min_lr
}

TEST(TrainerOptionsTest, UnsetDecayItersMeanTheWholeRun) {
  TrainerOptions options = trainer_options_from_config(
      load({"--lr-decay-style", "linear", "--lr-warmup-iters", "5"}), 50);
  fsdp::LrScheduleOptions lr = lr_schedule_options(options);
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

}  // namespace trainer_options_test
}  // namespace ooze::trainer
