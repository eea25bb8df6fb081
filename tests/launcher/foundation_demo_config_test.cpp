#include "launcher/foundation_demo_config.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "tests/support/expect_error.h"

namespace ooze::launcher {
namespace {

std::string error_of(const std::vector<std::string>& args) {
  return testing::error_message_of([&] { load_config(foundation_demo_schema(), "", args); });
}

TEST(FoundationDemoConfigTest, DefaultsAreValid) {
  Config config = load_config(foundation_demo_schema(), "", {});
  EXPECT_EQ(config.get<int64_t>("seed"), 1234);
  EXPECT_EQ(config.get<std::string>("output_dir"), "runs/default");
  EXPECT_EQ(config.get<std::string>("log_level"), "info");
  EXPECT_DOUBLE_EQ(config.get<double>("distributed_timeout_minutes"), 10.0);
  EXPECT_EQ(config.get<int64_t>("world_size"), 2);
  EXPECT_EQ(config.get<int64_t>("num_steps"), 50);
  EXPECT_DOUBLE_EQ(config.get<double>("lr"), 0.05);
  EXPECT_EQ(config.get<int64_t>("global_batch_size"), 64);
  EXPECT_EQ(config.get<int64_t>("micro_batch_size"), 16);
  EXPECT_EQ(config.get<int64_t>("save_interval"), 0);
  EXPECT_EQ(config.get<int64_t>("feature_dim"), 16);
}

TEST(FoundationDemoConfigTest, SlimeFlagNames) {
  Config config = load_config(foundation_demo_schema(), "",
                              {"--lr", "1e-3", "--global-batch-size", "128", "--micro-batch-size",
                               "32", "--save-interval", "10"});
  EXPECT_DOUBLE_EQ(config.get<double>("lr"), 1e-3);
  EXPECT_EQ(config.get<int64_t>("global_batch_size"), 128);
  EXPECT_EQ(config.get<int64_t>("micro_batch_size"), 32);
  EXPECT_EQ(config.get<int64_t>("save_interval"), 10);
}

TEST(FoundationDemoConfigTest, Ranges) {
  EXPECT_CONTAINS(error_of({"--world-size", "0"}), "--world-size: expected an integer >= 1");
  EXPECT_CONTAINS(error_of({"--lr", "0"}), "--lr: expected a number > 0, got '0'");
  EXPECT_CONTAINS(error_of({"--distributed-timeout-minutes", "-5"}), "expected a number > 0");
  EXPECT_CONTAINS(error_of({"--save-interval", "-1"}), "expected an integer >= 0");
  EXPECT_CONTAINS(error_of({"--micro-batch-size", "0"}),
                  "--micro-batch-size: expected an integer >= 1");
  // Flags of commands that train models are not the demo's: it refuses them instead of
  // ignoring them.
  EXPECT_CONTAINS(error_of({"--use-dynamic-batch-size"}),
                  "unknown flag '--use-dynamic-batch-size'");
  EXPECT_CONTAINS(error_of({"--advantage-estimator", "grpo"}),
                  "unknown flag '--advantage-estimator'");
  EXPECT_CONTAINS(error_of({"--log-level", "verbose"}),
                  "expected one of {debug, info, warn, error}, got 'verbose'");
}

TEST(FoundationDemoConfigTest, GlobalBatchMustSplitAcrossRanks) {
  std::string message = error_of({"--world-size", "3"});
  EXPECT_CONTAINS(message, "global_batch_size = 64 is not divisible by world_size = 3");
  EXPECT_CONTAINS(message, "(1 problem)");  // the micro-batch check does not pile on
}

TEST(FoundationDemoConfigTest, GlobalBatchMustSplitIntoMicroBatches) {
  std::string message = error_of({"--micro-batch-size", "24"});
  EXPECT_CONTAINS(message,
                  "global_batch_size = 64 is not divisible by world_size * "
                  "micro_batch_size = 2 * 24 = 48");
  Config config =
      load_config(foundation_demo_schema(), "", {"--world-size", "4", "--micro-batch-size", "8"});
  EXPECT_EQ(config.get<int64_t>("world_size"), 4);
}

TEST(FoundationDemoConfigTest, HelpCoversEveryFieldBySection) {
  std::string help = foundation_demo_schema().help();
  for (const auto& spec : foundation_demo_schema().fields()) {
    // Bool flags are listed with their negation: --[no-]use-tis.
    std::string flag =
        spec.type == FieldType::kBool ? "--[no-]" + spec.flag().substr(2) : spec.flag();
    EXPECT_CONTAINS(help, flag);
  }
  size_t run = help.find("run:"), distributed = help.find("distributed:"),
         demo = help.find("demo:");
  ASSERT_NE(demo, std::string::npos);
  EXPECT_LT(run, distributed);
  EXPECT_LT(distributed, demo);
}

}  // namespace
}  // namespace ooze::launcher
