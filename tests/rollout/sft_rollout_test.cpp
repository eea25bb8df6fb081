// The sft rollout over a real JSONL dataset and the byte-level tokenizer (token id = byte value,
// so the expected tokens are written down from the text itself): prompt tokens, then the
// label's bytes and EOS, all counted by the loss; sample numbering continues across rollouts.
#include "rollout/sft_rollout.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/byte_level_tokenizer.h"
#include "models/tokenizer.h"
#include "tests/support/expect_error.h"

namespace ooze::rollout {
namespace sft_rollout_test {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ooze::testing::error_message_of;

class SftRolloutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ooze-sft-rollout-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    models::write_byte_level_tokenizer((dir_ / "tokenizer").string());
  }
  void TearDown() override { fs::remove_all(dir_); }

  models::Tokenizer tokenizer() const {
    return models::load_tokenizer((dir_ / "tokenizer").string());
  }

  std::shared_ptr<const PromptDataset> dataset(
      const std::vector<std::pair<std::string, std::string>>& rows,
      const models::Tokenizer& tokenizer) {
    const std::string path = (dir_ / "sft.jsonl").string();
    std::ofstream out(path);
    for (const auto& [input, label] : rows)
      out << json{{"input", input}, {"label", label}}.dump() << "\n";
    out.close();
    PromptDatasetOptions options;
    options.path = path;
    options.label_key = "label";
    return std::make_shared<PromptDataset>(options, tokenizer);
  }

  static std::vector<int64_t> bytes(const std::string& text) {
    return std::vector<int64_t>(text.begin(), text.end());
  }

  fs::path dir_;
};

TEST_F(SftRolloutTest, EachLabelBecomesAResponseEndingInEosThatTheLossCounts) {
  const models::Tokenizer byte_tokenizer = tokenizer();
  const int64_t eos = byte_tokenizer.eos_token_id().value();
  PromptSource source(dataset({{"3+4=", "7"}, {"9+9=", "18"}, {"0+0=", "0"}}, byte_tokenizer));

  const std::vector<std::vector<Sample>> first = sft_rollout(source, byte_tokenizer, 2);
  ASSERT_EQ(first.size(), 2u);
  const Sample& sample = first[1].front();
  std::vector<int64_t> expected = bytes("9+9=");
  for (int64_t token : bytes("18")) expected.push_back(token);
  expected.push_back(eos);
  EXPECT_EQ(sample.tokens, expected);
  EXPECT_EQ(sample.response_length, 3);
  EXPECT_EQ(sample.prompt_length(), 4);
  EXPECT_EQ(sample.response, "18");
  EXPECT_EQ(sample.loss_mask, (std::vector<int32_t>{1, 1, 1}));
  EXPECT_EQ(sample.rollout_log_probs, (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(sample.status, Sample::Status::kCompleted);
  EXPECT_DOUBLE_EQ(sample.reward_value(), 0.0);

  // The next rollout continues the draw (into the second epoch) and the numbering.
  const std::vector<std::vector<Sample>> second = sft_rollout(source, byte_tokenizer, 2);
  EXPECT_EQ(second[0].front().response, "0");
  EXPECT_EQ(second[1].front().response, "7");
  EXPECT_EQ(second[1].front().index, 3);
  EXPECT_EQ(second[1].front().group_index, 3);
}

TEST_F(SftRolloutTest, APromptWithoutALabelIsRefusedByItsIndex) {
  const models::Tokenizer byte_tokenizer = tokenizer();
  PromptSource source(dataset({{"1+1=", "2"}, {"2+2=", ""}}, byte_tokenizer));
  const std::string message =
      error_message_of<ConfigError>([&] { sft_rollout(source, byte_tokenizer, 2); });
  EXPECT_NE(message.find("prompt 1 of"), std::string::npos) << message;
  EXPECT_NE(message.find("no label"), std::string::npos) << message;
}

TEST_F(SftRolloutTest, ATokenizerWithoutEosIsRefused) {
  const fs::path config_path = dir_ / "tokenizer" / "tokenizer_config.json";
  json config = json::parse(std::ifstream(config_path));
  config.erase("eos_token");
  std::ofstream(config_path) << config.dump();
  const models::Tokenizer without_eos = tokenizer();
  ASSERT_FALSE(without_eos.eos_token_id().has_value());
  PromptSource source(dataset({{"1+1=", "2"}}, without_eos));
  const std::string message =
      error_message_of<ConfigError>([&] { sft_rollout(source, without_eos, 1); });
  EXPECT_NE(message.find("EOS"), std::string::npos) << message;
}

}  // namespace sft_rollout_test
}  // namespace ooze::rollout
