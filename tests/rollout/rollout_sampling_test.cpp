// Slime's sampling flags: --rollout-* for rollouts, and --eval-* for evaluations, each of which
// takes the rollout's value unless given (which the help says instead of a number).
#include <gtest/gtest.h>

#include <string>

#include "core/config.h"
#include "rollout/sample_generation.h"
#include "tests/support/expect_error.h"

namespace ooze::rollout {
namespace rollout_sampling_test {

ConfigSchema sampling_schema() {
  ConfigSchema schema;
  RolloutSampling::fields().declare(schema);
  add_eval_sampling_fields(schema);
  return schema;
}

TEST(RolloutSamplingTest, EvaluationsTakeTheRolloutsValuesUnlessGiven) {
  const Config config = load_config(sampling_schema(), "",
                                    {"--rollout-temperature", "0.7", "--rollout-top-p", "0.9",
                                     "--rollout-top-k", "20", "--rollout-max-response-len", "64"});
  const RolloutSampling rollout = RolloutSampling::fields().read(config);
  const RolloutSampling eval = RolloutSampling::eval_from_config(config);
  EXPECT_DOUBLE_EQ(rollout.temperature, 0.7);
  EXPECT_DOUBLE_EQ(eval.temperature, 0.7);
  EXPECT_DOUBLE_EQ(eval.top_p, 0.9);
  EXPECT_EQ(eval.top_k, 20);
  EXPECT_EQ(eval.max_response_len, 64);
}

TEST(RolloutSamplingTest, GivenEvalFlagsOverrideOnlyTheEvaluations) {
  const Config config =
      load_config(sampling_schema(), "",
                  {"--rollout-temperature", "0.7", "--rollout-max-response-len", "64",
                   "--eval-temperature", "0", "--eval-max-response-len", "256"});
  const RolloutSampling rollout = RolloutSampling::fields().read(config);
  const RolloutSampling eval = RolloutSampling::eval_from_config(config);
  EXPECT_DOUBLE_EQ(eval.temperature, 0.0);
  EXPECT_EQ(eval.max_response_len, 256);
  EXPECT_DOUBLE_EQ(rollout.temperature, 0.7);
  EXPECT_EQ(rollout.max_response_len, 64);
  // Given, even at the schema's default value, a flag is the evaluations' own.
  const Config at_default = load_config(
      sampling_schema(), "", {"--rollout-temperature", "0.7", "--eval-temperature", "1"});
  EXPECT_DOUBLE_EQ(RolloutSampling::eval_from_config(at_default).temperature, 1.0);
}

TEST(RolloutSamplingTest, HelpNamesTheRolloutFlagAsTheEvalDefault) {
  const std::string help = sampling_schema().help();
  EXPECT_CONTAINS(help, "default: --rollout-temperature; range: >= 0");
  EXPECT_CONTAINS(help, "default: --rollout-top-p; range: in (0, 1]");
  EXPECT_CONTAINS(help, "default: --rollout-top-k; range: >= -1");
  EXPECT_CONTAINS(help, "default: --rollout-max-response-len; range: >= 1");
  EXPECT_CONTAINS(help, "default: 1.0; range: >= 0");  // --rollout-temperature's own
}

}  // namespace rollout_sampling_test
}  // namespace ooze::rollout
