// `ooze model init` through run_model_command: what it writes loads back as the model a fresh
// init_weights(seed) builds, deterministically, and bad flags are refused clearly.
#include "launcher/model_init_command.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/safetensors.h"
#include "models/hf_checkpoint.h"
#include "models/model_config.h"
#include "models/model_init.h"
#include "models/tokenizer.h"
#include "models/transformer.h"
#include "tests/support/expect_error.h"
#include "tests/support/process.h"

namespace ooze::launcher {
namespace model_init_command_test {

namespace fs = std::filesystem;

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

// Every file of a directory by name, with its bytes.
std::map<std::string, std::string> directory_contents(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    files[entry.path().filename().string()] = read_bytes(entry.path());
  }
  return files;
}

std::string config_error_of(const std::vector<std::string>& args) {
  return testing::error_message_of([&] { run_model_command(args); });
}

class ModelInitCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    at::set_num_threads(1);
    root_ = ooze::testing::make_temp_dir("model-init");
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string path(const std::string& name) const { return (fs::path(root_) / name).string(); }

  // A tiny byte-tokenizer model.
  std::vector<std::string> tiny_args(const std::string& out, int seed) const {
    return {"init",
            "--arch",
            "qwen3",
            "--hidden-size",
            "32",
            "--layers",
            "2",
            "--heads",
            "4",
            "--kv-heads",
            "2",
            "--tokenizer",
            "byte",
            "--out",
            out,
            "--seed",
            std::to_string(seed)};
  }

  std::string root_;
};

TEST_F(ModelInitCommandTest, LoadsBackAsAFreshInitWithTheSameSeed) {
  const std::string out = path("tiny");
  ASSERT_EQ(run_model_command(tiny_args(out, 7)), 0);

  const models::ModelConfig config = models::load_model_config(out);
  EXPECT_EQ(config.model_type, "qwen3");
  EXPECT_EQ(config.hidden_size, 32);
  EXPECT_EQ(config.num_hidden_layers, 2);
  EXPECT_EQ(config.num_attention_heads, 4);
  EXPECT_EQ(config.num_key_value_heads, 2);
  EXPECT_EQ(config.head_dim, 8);
  EXPECT_EQ(config.intermediate_size, 96);
  EXPECT_EQ(config.vocab_size, 259);  // the byte tokenizer's ids, exactly
  EXPECT_EQ(config.torch_dtype, "float32");
  EXPECT_EQ(config.rope_theta, 1e6);
  EXPECT_EQ(config.eos_token_ids, std::vector<int64_t>{258});  // <|im_end|>

  models::TransformerModel loaded(config);
  models::load_hf_weights(*loaded, out);
  models::TransformerModel fresh(config);
  fresh->init_weights(7);
  const auto expected = fresh->named_parameters();
  for (const auto& item : loaded->named_parameters()) {
    EXPECT_TRUE(torch::equal(item.value(), expected[item.key()])) << item.key();
  }
  // The tokenizer came along and works.
  const models::Tokenizer tokenizer = models::load_tokenizer(out);
  EXPECT_EQ(tokenizer.encode("hi"), (std::vector<int64_t>{'h', 'i'}));
}

TEST_F(ModelInitCommandTest, SameSeedWritesIdenticalFilesAndAnotherSeedOtherWeights) {
  ASSERT_EQ(run_model_command(tiny_args(path("a"), 5)), 0);
  ASSERT_EQ(run_model_command(tiny_args(path("b"), 5)), 0);
  ASSERT_EQ(run_model_command(tiny_args(path("c"), 6)), 0);
  const auto a = directory_contents(path("a"));
  EXPECT_EQ(a, directory_contents(path("b")));
  EXPECT_TRUE(a.count("model.safetensors") && a.count("config.json") &&
              a.count("generation_config.json") && a.count("tokenizer.json") &&
              a.count("tokenizer_config.json"));

  const ShardedSafetensors five = ShardedSafetensors::open(path("a"));
  const ShardedSafetensors six = ShardedSafetensors::open(path("c"));
  ASSERT_EQ(five.names(), six.names());
  for (const std::string& name : five.names()) {
    if (five.tensor(name).dim() < 2) continue;  // norms are all ones whatever the seed
    EXPECT_FALSE(torch::equal(five.tensor(name), six.tensor(name))) << name;
  }
}

TEST_F(ModelInitCommandTest, ArchitecturesDtypeAndTiedEmbeddings) {
  const std::string out = path("llama");
  ASSERT_EQ(run_model_command({"init",        "--arch",
                               "llama",       "--hidden-size",
                               "24",          "--layers",
                               "1",           "--heads",
                               "3",           "--kv-heads",
                               "1",           "--head-dim",
                               "6",           "--intermediate-size",
                               "40",          "--vocab-size",
                               "300",         "--tie-embeddings",
                               "--dtype",     "bfloat16",
                               "--tokenizer", "byte",
                               "--out",       out}),
            0);
  const models::ModelConfig llama = models::load_model_config(out);
  EXPECT_EQ(llama.model_type, "llama");
  EXPECT_EQ(llama.head_dim, 6);
  EXPECT_EQ(llama.intermediate_size, 40);
  EXPECT_EQ(llama.vocab_size, 300);
  EXPECT_EQ(llama.rope_theta, 5e5);
  EXPECT_TRUE(llama.tie_word_embeddings);
  const ShardedSafetensors files = ShardedSafetensors::open(out);
  EXPECT_FALSE(files.contains("lm_head.weight"));
  EXPECT_EQ(files.info("model.embed_tokens.weight").shape, (std::vector<int64_t>{300, 24}));
  EXPECT_EQ(files.info("model.embed_tokens.weight").dtype, SafetensorsDtype::BF16);

  const std::string qwen2 = path("qwen2");
  ASSERT_EQ(run_model_command({"init", "--arch", "qwen2", "--hidden-size", "16", "--layers", "1",
                               "--heads", "2", "--kv-heads", "2", "--rope-theta", "5000",
                               "--tokenizer", "byte", "--out", qwen2}),
            0);
  EXPECT_EQ(models::load_model_config(qwen2).rope_theta, 5000.0);
  EXPECT_TRUE(ShardedSafetensors::open(qwen2).contains("model.layers.0.self_attn.q_proj.bias"));
}

TEST_F(ModelInitCommandTest, Qwen3TokenizerIsCopiedAndTheVocabularyPaddedAsQwenDoes) {
  std::string tokenizer_dir;
  try {
    tokenizer_dir = models::find_qwen3_tokenizer_dir();
  } catch (const ConfigError& e) {
    GTEST_SKIP() << e.what();
  }
  const std::string out = path("qwen3");
  ASSERT_EQ(run_model_command({"init", "--hidden-size", "16", "--layers", "1", "--heads", "2",
                               "--kv-heads", "1", "--tie-embeddings", "--dtype", "bfloat16",
                               "--tokenizer", "qwen3", "--out", out}),
            0);
  for (const char* file : {"tokenizer.json", "tokenizer_config.json"}) {
    EXPECT_EQ(read_bytes(fs::path(out) / file), read_bytes(fs::path(tokenizer_dir) / file)) << file;
  }
  const models::ModelConfig config = models::load_model_config(out);
  EXPECT_EQ(config.vocab_size, 151936);
  EXPECT_EQ(config.eos_token_ids, std::vector<int64_t>{151645});  // <|im_end|>
  EXPECT_EQ(ShardedSafetensors::open(out).info("model.embed_tokens.weight").shape,
            (std::vector<int64_t>{151936, 16}));
}

TEST_F(ModelInitCommandTest, BadFlagsAreReportedClearlyAndNothingIsWritten) {
  const std::string out = path("never");
  std::string message = config_error_of({"init", "--hiden-size", "32", "--out", out});
  EXPECT_NE(message.find("--hiden-size"), std::string::npos) << message;
  EXPECT_NE(message.find("did you mean '--hidden-size'"), std::string::npos) << message;

  message = config_error_of({"init", "--heads", "4", "--kv-heads", "3", "--dtype", "float64",
                             "--arch", "gpt2", "--out", out});
  EXPECT_NE(message.find("--kv-heads 3"), std::string::npos) << message;
  EXPECT_NE(message.find("float64"), std::string::npos) << message;
  EXPECT_NE(message.find("gpt2"), std::string::npos) << message;

  message = config_error_of({"init", "--tokenizer", "byte"});
  EXPECT_NE(message.find("out"), std::string::npos) << message;

  message = config_error_of(
      {"init", "--hidden-size", "30", "--heads", "4", "--kv-heads", "2", "--out", out});
  EXPECT_NE(message.find("--head-dim"), std::string::npos) << message;

  message = config_error_of(
      {"init", "--tokenizer", "byte", "--vocab-size", "100", "--hidden-size", "16", "--out", out});
  EXPECT_NE(message.find("259"), std::string::npos) << message;

  message =
      config_error_of({"init", "--tokenizer", "byte", "--tokenizer-dir", root_, "--out", out});
  EXPECT_NE(message.find("--tokenizer-dir"), std::string::npos) << message;

  EXPECT_EQ(run_model_command({}), 2);
  EXPECT_EQ(run_model_command({"create"}), 2);
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace model_init_command_test
}  // namespace ooze::launcher
