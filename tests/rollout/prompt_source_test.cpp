// PromptSource over a real JSONL dataset: epoch order (Python's random.shuffle, as Slime uses
// it), batches across epoch boundaries, and resuming from a saved state.
#include "rollout/prompt_source.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "models/byte_level_tokenizer.h"
#include "models/tokenizer.h"
#include "tests/support/expect_error.h"

namespace ooze::rollout {
namespace prompt_source_test {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ooze::testing::error_message_of;

const models::Tokenizer& byte_tokenizer() {
  static const models::Tokenizer tokenizer = [] {
    const fs::path dir =
        fs::temp_directory_path() / ("ooze-source-tokenizer-" + std::to_string(::getpid()));
    models::write_byte_level_tokenizer(dir.string());
    return models::load_tokenizer(dir.string());
  }();
  return tokenizer;
}

// Permutations printed by CPython: random.seed(s); x = list(range(n)); random.shuffle(x).
const std::vector<int64_t> kPythonSeed42Of10 = {7, 3, 2, 8, 5, 6, 9, 4, 0, 1};
const std::vector<int64_t> kPythonSeed43Of10 = {8, 1, 5, 6, 9, 7, 3, 2, 4, 0};
const std::vector<int64_t> kPythonSeed44Of10 = {4, 5, 0, 2, 9, 3, 7, 1, 8, 6};
const std::vector<int64_t> kPythonSeed7Of6 = {4, 0, 5, 3, 1, 2};

class PromptSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ooze-prompt-source-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A dataset of `count` prompts "p0", "p1", ... with labels "l0", "l1", ...
  std::shared_ptr<const PromptDataset> dataset(int count, const std::string& name = "data.jsonl") {
    const std::string path = (dir_ / name).string();
    {
      std::ofstream out(path);
      for (int i = 0; i < count; ++i) {
        out << json{{"input", "p" + std::to_string(i)},
                    {"label", "l" + std::to_string(i)},
                    {"metadata", {{"i", i}}}}
                   .dump()
            << "\n";
      }
    }
    PromptDatasetOptions options;
    options.path = path;
    options.label_key = "label";
    return std::make_shared<PromptDataset>(options, byte_tokenizer());
  }

  static std::vector<int64_t> indices(const std::vector<DrawnPrompt>& batch) {
    std::vector<int64_t> out;
    for (const DrawnPrompt& drawn : batch) out.push_back(drawn.dataset_index);
    return out;
  }
  static std::vector<int64_t> draw_indices(PromptSource& source, int64_t batches, int64_t size) {
    std::vector<int64_t> out;
    for (int64_t b = 0; b < batches; ++b) {
      for (int64_t index : indices(source.next_batch(size))) out.push_back(index);
    }
    return out;
  }

  fs::path dir_;
};

TEST_F(PromptSourceTest, WithoutShuffleEpochsRepeatFileOrderAndBatchesCrossThem) {
  PromptSource source(dataset(10));
  EXPECT_EQ(indices(source.next_batch(4)), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(indices(source.next_batch(4)), (std::vector<int64_t>{4, 5, 6, 7}));
  const std::vector<DrawnPrompt> crossing = source.next_batch(4);
  EXPECT_EQ(indices(crossing), (std::vector<int64_t>{8, 9, 0, 1}));
  EXPECT_EQ(crossing[1].epoch, 0);
  EXPECT_EQ(crossing[2].epoch, 1);
  for (size_t i = 0; i < crossing.size(); ++i) {
    EXPECT_EQ(crossing[i].group_index, 8 + static_cast<int64_t>(i));
    EXPECT_EQ(crossing[i].prompt.text, "p" + std::to_string(crossing[i].dataset_index));
  }
  EXPECT_EQ(source.epoch(), 1);
  EXPECT_EQ(source.offset(), 2);
  EXPECT_EQ(source.groups_drawn(), 12);
}

TEST_F(PromptSourceTest, ShuffleOrderIsPythonsRandomShuffleAsSlimeUsesIt) {
  PromptSourceOptions options;
  options.shuffle = true;
  PromptSource source(dataset(10), options);
  EXPECT_EQ(source.epoch_order(0), kPythonSeed42Of10);
  EXPECT_EQ(source.epoch_order(1), kPythonSeed43Of10);
  EXPECT_EQ(source.epoch_order(2), kPythonSeed44Of10);
  options.seed = 7;
  EXPECT_EQ(PromptSource(dataset(6, "six.jsonl"), options).epoch_order(0), kPythonSeed7Of6);

  // A batch crossing the epoch boundary: the rest of epoch 0, then the start of epoch 1.
  EXPECT_EQ(indices(source.next_batch(7)), (std::vector<int64_t>{7, 3, 2, 8, 5, 6, 9}));
  EXPECT_EQ(indices(source.next_batch(7)), (std::vector<int64_t>{4, 0, 1, 8, 1, 5, 6}));
}

TEST_F(PromptSourceTest, ShuffleIsDeterministicAndVisitsEveryPromptOncePerEpoch) {
  const auto data = dataset(23);
  PromptSourceOptions options;
  options.shuffle = true;
  PromptSource a(data, options);
  PromptSource b(data, options);
  const std::vector<int64_t> drawn_a = draw_indices(a, 10, 7);  // 70 draws: 3 epochs and a bit
  EXPECT_EQ(drawn_a, draw_indices(b, 10, 7));

  std::vector<std::vector<int64_t>> epochs;
  for (int e = 0; e < 3; ++e) {
    std::vector<int64_t> epoch(drawn_a.begin() + 23 * e, drawn_a.begin() + 23 * (e + 1));
    EXPECT_EQ(epoch, a.epoch_order(e));
    std::sort(epoch.begin(), epoch.end());
    for (int i = 0; i < 23; ++i) ASSERT_EQ(epoch[i], i) << "epoch " << e;
    epochs.push_back(a.epoch_order(e));
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);

  options.seed = 43;
  PromptSource other_seed(data, options);
  EXPECT_NE(draw_indices(other_seed, 1, 23), epochs[0]);
}

TEST_F(PromptSourceTest, BatchLargerThanTheDatasetSpansSeveralEpochs) {
  PromptSource source(dataset(3));
  const std::vector<DrawnPrompt> batch = source.next_batch(8);
  EXPECT_EQ(indices(batch), (std::vector<int64_t>{0, 1, 2, 0, 1, 2, 0, 1}));
  EXPECT_EQ(batch.back().epoch, 2);
  EXPECT_EQ(batch.back().group_index, 7);
  EXPECT_THROW(source.next_batch(0), std::invalid_argument);
}

TEST_F(PromptSourceTest, ResumedSourceDrawsWhatTheUninterruptedOneWould) {
  const auto data = dataset(10);
  PromptSourceOptions options;
  options.shuffle = true;
  options.seed = 1234;
  PromptSource uninterrupted(data, options);
  PromptSource interrupted(data, options);
  for (int b = 0; b < 3; ++b) {
    interrupted.next_batch(4);  // 12 draws: into epoch 1
    uninterrupted.next_batch(4);
  }
  EXPECT_EQ(interrupted.take_sample_indices(12 * 8), 0);
  uninterrupted.take_sample_indices(12 * 8);
  const std::string checkpoint = (dir_ / "iter_0000003").string();
  interrupted.save(checkpoint);
  for (const auto& entry : fs::directory_iterator(checkpoint)) {
    EXPECT_EQ(entry.path().filename(), "prompt_source.json");  // no temporaries left behind
  }

  PromptSource resumed(dataset(10, "copy.jsonl"), options);  // same content, another path
  resumed.load(checkpoint);
  EXPECT_EQ(resumed.state()["epoch"], 1);
  EXPECT_EQ(resumed.state()["offset"], 2);
  for (int b = 0; b < 5; ++b) {
    const std::vector<DrawnPrompt> expected = uninterrupted.next_batch(4);
    const std::vector<DrawnPrompt> got = resumed.next_batch(4);
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].dataset_index, expected[i].dataset_index) << "batch " << b;
      EXPECT_EQ(got[i].group_index, expected[i].group_index);
      EXPECT_EQ(got[i].epoch, expected[i].epoch);
      EXPECT_EQ(got[i].prompt.text, expected[i].prompt.text);
    }
  }
  EXPECT_EQ(resumed.take_sample_indices(8), uninterrupted.take_sample_indices(8));
  json resumed_state = resumed.state();
  json uninterrupted_state = uninterrupted.state();
  resumed_state["dataset"].erase("path");  // the copy lives elsewhere; all else is equal
  uninterrupted_state["dataset"].erase("path");
  EXPECT_EQ(resumed_state, uninterrupted_state);
}

TEST_F(PromptSourceTest, ResumeAtTheEndOfAnEpoch) {
  const auto data = dataset(6);
  PromptSourceOptions options;
  options.shuffle = true;
  PromptSource first(data, options);
  first.next_batch(6);
  PromptSource resumed(data, options);
  resumed.restore(first.state());
  EXPECT_EQ(resumed.offset(), 6);
  const std::vector<DrawnPrompt> next = resumed.next_batch(6);
  EXPECT_EQ(indices(next), indices(first.next_batch(6)));
  EXPECT_EQ(indices(next), resumed.epoch_order(1));
  EXPECT_EQ(next.front().epoch, 1);
}

TEST_F(PromptSourceTest, StateOfOtherDataOrSeedIsRefused) {
  PromptSourceOptions options;
  options.shuffle = true;
  PromptSource source(dataset(10), options);
  source.next_batch(3);
  const json state = source.state();
  EXPECT_EQ(state["dataset"]["prompts"], 10);
  EXPECT_EQ(state["seed"], 42);
  EXPECT_EQ(state["groups_drawn"], 3);

  PromptSource eleven(dataset(11, "eleven.jsonl"), options);
  const std::string message =
      error_message_of<ConfigError>([&] { eleven.restore(state, "ckpt/prompt_source.json"); });
  EXPECT_CONTAINS(message, "ckpt/prompt_source.json was made for the prompt data");
  EXPECT_CONTAINS(message, "data.jsonl");
  EXPECT_CONTAINS(message, "eleven.jsonl");
  EXPECT_EQ(eleven.groups_drawn(), 0);  // unchanged

  // Same size, other content: the fingerprint still tells them apart.
  const std::string other = (dir_ / "other.jsonl").string();
  {
    std::ofstream out(other);
    for (int i = 0; i < 10; ++i) out << json{{"input", "q" + std::to_string(i)}}.dump() << "\n";
  }
  PromptDatasetOptions other_options;
  other_options.path = other;
  PromptSource same_size(std::make_shared<PromptDataset>(other_options, byte_tokenizer()), options);
  error_message_of<ConfigError>([&] { same_size.restore(state); });

  PromptSourceOptions other_seed = options;
  other_seed.seed = 43;
  PromptSource reseeded(dataset(10, "again.jsonl"), other_seed);
  EXPECT_CONTAINS(error_message_of<ConfigError>([&] { reseeded.restore(state); }),
                  "rollout_seed = 42, this run has 43");
  PromptSource unshuffled(dataset(10, "again2.jsonl"));
  EXPECT_CONTAINS(error_message_of<ConfigError>([&] { unshuffled.restore(state); }),
                  "--rollout-shuffle");

  // Without shuffling the seed changes nothing, so it is not held against the state.
  PromptSource plain(dataset(10, "plain.jsonl"));
  plain.next_batch(4);
  PromptSourceOptions plain_other_seed;
  plain_other_seed.seed = 5;
  PromptSource plain_resumed(dataset(10, "plain2.jsonl"), plain_other_seed);
  plain_resumed.restore(plain.state());
  EXPECT_EQ(indices(plain_resumed.next_batch(2)), (std::vector<int64_t>{4, 5}));
}

TEST_F(PromptSourceTest, MalformedStatesAndMissingFiles) {
  PromptSource source(dataset(5));
  json state = source.state();
  state.erase("offset");
  EXPECT_CONTAINS(error_message_of<FormatError>([&] { source.restore(state); }), "'offset'");
  state = source.state();
  state["offset"] = 6;
  EXPECT_CONTAINS(error_message_of<FormatError>([&] { source.restore(state); }),
                  "offset 6 is past the 5 prompts");
  state = source.state();
  state["epoch"] = -1;
  error_message_of<FormatError>([&] { source.restore(state); });
  error_message_of<FormatError>([&] { source.restore(json::array()); });

  const std::string empty_dir = (dir_ / "no_state").string();
  fs::create_directories(empty_dir);
  EXPECT_CONTAINS(error_message_of<IoError>([&] { source.load(empty_dir); }), "prompt_source.json");
  std::ofstream(PromptSource::state_path(empty_dir)) << "{\"epoch\": ";
  error_message_of<FormatError>([&] { source.load(empty_dir); });
  EXPECT_EQ(source.groups_drawn(), 0);
}

TEST_F(PromptSourceTest, SamplesCarryThePromptsFields) {
  PromptSource source(dataset(4));
  source.next_batch(2);
  const DrawnPrompt drawn = source.next_batch(1)[0];
  const Sample sample = make_sample(drawn, 17);
  EXPECT_EQ(sample.group_index, 2);
  EXPECT_EQ(sample.index, 17);
  EXPECT_EQ(sample.prompt, "p2");
  EXPECT_EQ(sample.tokens, (std::vector<int64_t>{'p', '2'}));
  EXPECT_EQ(sample.response_length, 0);
  EXPECT_EQ(sample.prompt_length(), 2);
  EXPECT_EQ(sample.label, "l2");
  EXPECT_EQ(sample.metadata, (json{{"i", 2}}));
  EXPECT_EQ(sample.status, Sample::Status::kPending);
}

TEST(NumRolloutsTest, FromNumEpochOrGivenDirectly) {
  EXPECT_EQ(num_rollouts(0, 3, 100, 32), 9);  // 3 epochs of 100 / 32 = 3 full batches
  EXPECT_EQ(num_rollouts(0, 1, 64, 32), 2);
  EXPECT_EQ(num_rollouts(50, 3, 100, 32), 50);  // --num-rollout wins
  EXPECT_CONTAINS(error_message_of<ConfigError>([] { num_rollouts(0, 0, 100, 32); }),
                  "--num-rollout");
  EXPECT_CONTAINS(error_message_of<ConfigError>([] { num_rollouts(0, 2, 10, 32); }),
                  "do not fill one rollout batch of 32");

  ConfigSchema schema;
  add_prompt_data_fields(schema);
  EXPECT_EQ(num_rollouts(load_config(schema, "", {"--num-epoch", "2"}), 100, 10), 20);
  EXPECT_EQ(
      num_rollouts(load_config(schema, "", {"--num-epoch", "2", "--num-rollout", "7"}), 100, 10),
      7);
}

}  // namespace prompt_source_test
}  // namespace ooze::rollout
