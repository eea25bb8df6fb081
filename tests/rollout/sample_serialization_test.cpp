// Samples through cereal (actor calls) and through JSON (checkpoints, saved rollouts): every
// field comes back, and malformed input is refused with the field named.
#include "rollout/sample_serialization.h"

#include <gtest/gtest.h>

#include <cereal/archives/binary.hpp>
#include <sstream>

#include "rollout/sample_json.h"
#include "tests/support/expect_error.h"

namespace ooze::rollout {
namespace sample_serialization_test {

Sample full_sample() {
  Sample sample;
  sample.group_index = 7;
  sample.index = 29;
  sample.prompt = "2 + 2 = ";
  sample.tokens = {50, 32, 43, 32, 50, 52, 258, 99};
  sample.response = "4<obs>";
  sample.response_length = 3;
  sample.label = "4";
  sample.metadata = {{"source", "gsm8k"}, {"difficulty", 2}};
  sample.tools = nlohmann::json::array({{{"name", "calc"}}});
  sample.reward = {{"score", 1.0}, {"acc", 1}};
  sample.loss_mask = {1, 0, 1};
  sample.rollout_log_probs = {-0.25f, 0.0f, -1.5f};
  sample.weight_versions = {3, -1, 4};
  sample.teacher_log_probs = {-0.5f, -3.0f, -0.125f};
  sample.status = Sample::Status::kTruncated;
  sample.abort_reason = "";
  sample.metrics = {{"turns", 2}};
  return sample;
}

void expect_same(const Sample& a, const Sample& b) {
  EXPECT_EQ(a.group_index, b.group_index);
  EXPECT_EQ(a.index, b.index);
  EXPECT_EQ(a.prompt, b.prompt);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.response, b.response);
  EXPECT_EQ(a.response_length, b.response_length);
  EXPECT_EQ(a.label, b.label);
  EXPECT_EQ(a.metadata, b.metadata);
  EXPECT_EQ(a.tools, b.tools);
  EXPECT_EQ(a.reward, b.reward);
  EXPECT_EQ(a.loss_mask, b.loss_mask);
  EXPECT_EQ(a.rollout_log_probs, b.rollout_log_probs);
  EXPECT_EQ(a.weight_versions, b.weight_versions);
  EXPECT_EQ(a.teacher_log_probs, b.teacher_log_probs);
  EXPECT_EQ(a.status, b.status);
  EXPECT_EQ(a.abort_reason, b.abort_reason);
  EXPECT_EQ(a.metrics, b.metrics);
}

TEST(SampleSerializationTest, CerealRoundTripKeepsEveryField) {
  const Sample sample = full_sample();
  std::stringstream bytes;
  {
    cereal::BinaryOutputArchive out(bytes);
    out(sample);
  }
  Sample back;
  cereal::BinaryInputArchive in(bytes);
  in(back);
  expect_same(sample, back);
  EXPECT_EQ(back.reward_value("score"), 1.0);
}

TEST(SampleSerializationTest, UnknownStatusCodeIsRefused) {
  Sample sample = full_sample();
  sample.status = static_cast<Sample::Status>(9);
  std::stringstream bytes;
  {
    cereal::BinaryOutputArchive out(bytes);
    out(sample);
  }
  Sample back;
  cereal::BinaryInputArchive in(bytes);
  EXPECT_CONTAINS(ooze::testing::error_message_of<FormatError>([&] { in(back); }), "status code 9");
}

TEST(SampleSerializationTest, JsonRoundTripKeepsEveryFieldAndNamesBadFields) {
  const Sample sample = full_sample();
  expect_same(sample, sample_from_json(nlohmann::json::parse(sample_to_json(sample).dump())));

  nlohmann::json bad = sample_to_json(sample);
  bad["status"] = "finished";
  EXPECT_CONTAINS(ooze::testing::error_message_of<FormatError>([&] { sample_from_json(bad); }),
                  "'finished'");
  bad = sample_to_json(sample);
  bad.erase("loss_mask");
  EXPECT_CONTAINS(ooze::testing::error_message_of<FormatError>([&] { sample_from_json(bad); }),
                  "loss_mask");
  bad = sample_to_json(sample);
  bad["weight_versions"] = {1, 2};  // one short of the response
  EXPECT_CONTAINS(ooze::testing::error_message_of<FormatError>([&] { sample_from_json(bad); }),
                  "response_length (3)");
  // Samples no teacher scored (and samples saved before ooze kept the field) have none.
  bad = sample_to_json(sample);
  bad.erase("teacher_log_probs");
  EXPECT_TRUE(sample_from_json(bad).teacher_log_probs.empty());
  bad["teacher_log_probs"] = {-1.0};
  EXPECT_CONTAINS(ooze::testing::error_message_of<FormatError>([&] { sample_from_json(bad); }),
                  "teacher_log_probs has 1 entries; it must be empty or have response_length (3)");
}

}  // namespace sample_serialization_test
}  // namespace ooze::rollout
