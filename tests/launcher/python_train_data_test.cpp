// The train-data hooks (launcher/train_data_hooks.h) on a rollout of two groups, run by the
// embedded interpreter in this process; the hooks are tests/python/hooks/train_data.py:
//   - a conversion that writes out ooze's own gives rollout_batch()'s batch (tokens, response
//     lengths, loss masks, rollout log-probs, rewards, groups), with or without
//     "rollout_log_probs" (the samples' own) and with tensors for lists; its rewards are final;
//   - one that changes the loss masks and rewards changes them, one that changes the tokens has
//     no rollout log-probs, which a run that needs them refuses;
//   - each way train data can be wrong is named with the key, the entry and the sample;
//   - a postprocess function changes the batch's tensors in place (advantages, loss masks) and
//     sees Slime's keys, one with Slime's arity (args) is called, and one that raises or takes
//     other arguments is named.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "launcher/train_data_hooks.h"
#include "python/hook_args.h"
#include "tests/launcher/made_samples.h"
#include "tests/launcher/tiny_train_command.h"
#include "tests/support/expect_error.h"

namespace ooze::launcher {
namespace python_train_data_test {

const std::string kHooks = std::string(OOZE_TEST_HOOKS_DIR) + "/train_data.py:";

using ::ooze::testing::make_sample;

std::vector<std::vector<rollout::Sample>> two_groups() {
  return {{make_sample(0, 0, 2, 1.0), make_sample(0, 1, 3, 0.0, true), make_sample(0, 2, 4, 0.25)},
          {make_sample(1, 3, 4, 1.0), make_sample(1, 4, 2, 1.0), make_sample(1, 5, 3, 0.0, true)}};
}

TrainDataHooks converting_by(const std::string& function) {
  python::set_hook_args({{"reward_key", ""}});
  TrainDataHookOptions options;
  options.custom_convert_samples_to_train_data_path = kHooks + function;
  return TrainDataHooks(options);
}

TrainDataHooks postprocessing_by(const std::string& function, const std::string& output_dir) {
  python::set_hook_args({{"output_dir", output_dir}});
  TrainDataHookOptions options;
  options.rollout_data_postprocess_path = kHooks + function;
  return TrainDataHooks(options);
}

void expect_same_samples(const RolloutBatch& got, const RolloutBatch& want) {
  ASSERT_EQ(got.samples.size(), want.samples.size());
  for (size_t i = 0; i < want.samples.size(); ++i) {
    SCOPED_TRACE("sample " + std::to_string(i));
    const fsdp::PackingSample& a = got.samples[i];
    const fsdp::PackingSample& b = want.samples[i];
    EXPECT_TRUE(at::equal(a.tokens, b.tokens));
    EXPECT_EQ(a.tokens.scalar_type(), at::kLong);
    EXPECT_EQ(a.response_length, b.response_length);
    EXPECT_TRUE(at::equal(a.response_mask, b.response_mask));
    EXPECT_TRUE(at::equal(a.response_values.at("rollout_log_probs"),
                          b.response_values.at("rollout_log_probs")));
  }
}

TEST(PythonTrainDataTest, ConvertingAsOozeDoesGivesTheSameBatch) {
  const auto groups = two_groups();
  const RolloutBatch want = rollout_batch(groups);
  for (const char* function : {"default_conversion", "without_log_probs"}) {
    SCOPED_TRACE(function);
    const TrainDataHooks hooks = converting_by(function);
    ASSERT_TRUE(hooks.converts_samples());
    const RolloutBatch got = hooks.convert_samples(groups, /*needs_rollout_log_probs=*/true);
    expect_same_samples(got, want);
    EXPECT_EQ(got.rewards, want.rewards);
    EXPECT_EQ(got.group_size, 3);
    EXPECT_EQ(got.rollout_sizes, want.rollout_sizes);
    EXPECT_TRUE(got.rewards_are_final);  // no group normalisation on top
  }
}

TEST(PythonTrainDataTest, AConversionChangesTheMasksRewardsAndTokens) {
  const auto groups = two_groups();
  const RolloutBatch want = rollout_batch(groups);
  const RolloutBatch changed =
      converting_by("first_token_masked_reward_plus_one").convert_samples(groups, true);
  ASSERT_EQ(changed.samples.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    at::Tensor mask = want.samples[i].response_mask.clone();
    mask[0] = 0;
    EXPECT_TRUE(at::equal(changed.samples[i].response_mask, mask)) << i;
    EXPECT_EQ(changed.rewards[i], want.rewards[i] + 1.0) << i;
  }

  // New tokens have no engine log-probs: a run that needs them refuses the batch.
  const TrainDataHooks retokenized = converting_by("retokenized");
  const RolloutBatch longer = retokenized.convert_samples(groups, false);
  EXPECT_EQ(longer.samples[0].response_length, 3);
  EXPECT_EQ(longer.samples[0].tokens[-1].item<int64_t>(), 7);
  EXPECT_FALSE(longer.has("rollout_log_probs"));
  EXPECT_CONTAINS(::ooze::testing::error_message_of<python::HookError>(
                      [&] { retokenized.convert_samples(groups, true); }),
                  "--custom-convert-samples-to-train-data-path " + kHooks +
                      "retokenized returned train data ooze cannot train on: the train data has "
                      "no \"rollout_log_probs\", and its tokens are not the rollout's samples'");
}

TEST(PythonTrainDataTest, EachWayTrainDataCanBeWrongIsNamed) {
  const auto groups = two_groups();
  auto error_of = [&](const std::string& function) {
    return ::ooze::testing::error_message_of<python::HookError>(
        [&] { converting_by(function).convert_samples(groups, true); });
  };
  const std::string flag = "--custom-convert-samples-to-train-data-path " + kHooks;
  EXPECT_CONTAINS(error_of("not_a_dict"),
                  flag + "not_a_dict returned a list; expected a dict of train data");
  EXPECT_CONTAINS(error_of("no_loss_masks"),
                  flag +
                      "no_loss_masks returned train data ooze cannot train on: the train "
                      "data has no \"loss_masks\"");
  EXPECT_CONTAINS(error_of("short_mask"),
                  "\"loss_masks\"[1] (sample 1, group 0) has 2 entries for a response of 3 "
                  "tokens (\"response_lengths\"[1])");
  EXPECT_CONTAINS(error_of("short_log_probs"),
                  "\"rollout_log_probs\"[4] (sample 4, group 1) has 1 entries for a response of "
                  "2 tokens");
  EXPECT_CONTAINS(error_of("response_longer_than_tokens"),
                  "\"response_lengths\"[0] (sample 0, group 0) is 5 for 5 tokens: a response is "
                  "at most the tokens after the first");
  EXPECT_CONTAINS(error_of("tokens_as_text"),
                  "\"tokens\"[0] (sample 0, group 0) is a str, not a list");
  EXPECT_CONTAINS(error_of("reward_as_text"),
                  "\"rewards\"[2] (sample 2, group 0) is \"high\", not a finite number");
  EXPECT_CONTAINS(error_of("half_mask"),
                  "\"loss_masks\"[3] (sample 3, group 1) has 0.5 at [1]: expected 0 or 1");
  EXPECT_CONTAINS(error_of("rewards_missing_one"),
                  "\"rewards\" has 5 entries for the 6 samples of \"tokens\"");
}

TEST(PythonTrainDataTest, APostprocessFunctionChangesWhatTrainsInPlace) {
  const std::string dir = ::ooze::testing::make_temp_dir("python-train-data-postprocess");
  RolloutBatch batch = rollout_batch(two_groups());
  batch.set("old_log_probs", batch.get("rollout_log_probs"));
  compute_advantages(batch, algorithms::AdvantageOptions{}, algorithms::KlEstimator::kK1);
  const std::vector<at::Tensor> before = batch.get("advantages");
  std::vector<at::Tensor> kept;
  for (const at::Tensor& advantages : before) kept.push_back(advantages.clone());

  postprocessing_by("zero_odd_advantages", dir).postprocess(4, batch);
  const std::vector<at::Tensor> after = batch.get("advantages");
  for (size_t i = 0; i < after.size(); ++i) {
    SCOPED_TRACE("sample " + std::to_string(i));
    EXPECT_GT(kept[i].abs().sum().item<double>(), 0);  // grpo: rewards differ in each group
    if (i % 2 == 1) {
      EXPECT_EQ(after[i].abs().sum().item<double>(), 0);
    } else {
      EXPECT_TRUE(at::equal(after[i], kept[i]));
    }
  }
  // What trains is the batch's own tensors.
  const std::vector<trainer::TrainBatch> steps = batch.global_batches(6);
  EXPECT_EQ(steps[0].samples[1].response_values.at("advantages").abs().sum().item<double>(), 0);
  EXPECT_EQ(batch.samples[0].response_mask[0].item<float>(), 0.0f);
  EXPECT_EQ(batch.samples[0].response_mask[1].item<float>(), 1.0f);

  const std::vector<nlohmann::json> seen =
      ::ooze::testing::read_json_lines(dir + "/rollout_data.jsonl");
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0]["rollout_id"], 4);
  EXPECT_EQ(seen[0]["samples"], 6);
  EXPECT_EQ(seen[0]["keys"], nlohmann::json({"advantages", "log_probs", "loss_masks", "returns",
                                             "rewards", "rollout_log_probs", "tokens"}));
  EXPECT_EQ(seen[0]["rewards"], nlohmann::json(batch.rewards));
}

TEST(PythonTrainDataTest, SlimesArityIsCalledAndEachWayAPostprocessCanBeWrongIsNamed) {
  const std::string dir = ::ooze::testing::make_temp_dir("python-train-data-arity");
  RolloutBatch batch = rollout_batch(two_groups());
  const TrainDataHooks slimes = postprocessing_by("count_calls", dir);
  EXPECT_FALSE(slimes.converts_samples());
  slimes.postprocess(0, batch);
  slimes.postprocess(1, batch);
  EXPECT_EQ(::ooze::testing::read_file(dir + "/postprocess_calls.txt"), "called\ncalled\n");

  const std::string flag = "--rollout-data-postprocess-path " + kHooks;
  EXPECT_CONTAINS(::ooze::testing::error_message_of<python::HookError>(
                      [&] { postprocessing_by("postprocess_raises", dir).postprocess(2, batch); }),
                  flag + "postprocess_raises raised on rollout 2:\nTraceback");
  EXPECT_CONTAINS(::ooze::testing::error_message_of<python::HookError>(
                      [&] { postprocessing_by("two_arguments", dir); }),
                  "ooze calls it as " + kHooks +
                      "two_arguments(args, rollout_id, rollout_data) or " + kHooks +
                      "two_arguments(args), but it is declared (args, rollout_id)");
  EXPECT_CONTAINS(::ooze::testing::error_message_of<ConfigError>([&] {
                    TrainDataHookOptions options;
                    options.rollout_data_postprocess_path = "libmine.so:postprocess";
                    TrainDataHooks hooks(options);
                  }),
                  "--rollout-data-postprocess-path libmine.so:postprocess must name a Python "
                  "function");
}

}  // namespace python_train_data_test
}  // namespace ooze::launcher
