#include "models/model_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"

namespace model_config_test {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ooze::models::load_model_config;
using ooze::models::ModelConfig;

// The config.json files published with the models (Hugging Face hub).
json qwen3_0_6b() {
  return json::parse(R"({
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
    "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
    "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
    "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
    "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})");
}

json qwen2_5_0_5b() {
  return json::parse(R"({
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
    "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 24,
    "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24,
    "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "sliding_window": 32768, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "transformers_version": "4.40.1", "use_cache": true, "use_sliding_window": false,
    "vocab_size": 151936})");
}

json llama_3_2_1b() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "head_dim": 64,
    "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": false,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16,
    "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})");
}

// Runs `parse` and returns the message of the ooze exception of type E it must throw.
template <typename E>
std::string error_of(const json& j) {
  try {
    ModelConfig::from_json(j, "/models/x/config.json");
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no exception for " << j.dump();
  return "";
}

void expect_mentions(const std::string& message, const std::vector<std::string>& parts) {
  for (const std::string& part : parts) {
    EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
  }
}

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("ooze_model_config_test_" + std::to_string(::getpid()) +
                                         "_" + std::to_string(counter_++));
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
  static inline int counter_ = 0;
};

TEST(ModelConfigTest, ParsesQwen3) {
  ModelConfig c = ModelConfig::from_json(qwen3_0_6b(), "qwen3.json");
  EXPECT_EQ(c.model_type, "qwen3");
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.hidden_size, 1024);
  EXPECT_EQ(c.intermediate_size, 3072);
  EXPECT_EQ(c.num_hidden_layers, 28);
  EXPECT_EQ(c.num_attention_heads, 16);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);  // explicit, not 1024 / 16
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rope_scaling.rope_type, "default");
  EXPECT_EQ(c.max_position_embeddings, 40960);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.parameter_dtype(), c10::ScalarType::BFloat16);
  EXPECT_EQ(c.bos_token_id, 151643);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{151645});
  EXPECT_TRUE(c.has_qk_norm());
  EXPECT_FALSE(c.has_qkv_bias());
  EXPECT_FALSE(c.has_o_proj_bias());
  EXPECT_EQ(c.extra_keys.at("transformers_version"), "4.51.0");
  EXPECT_EQ(c.origin, "qwen3.json");
  // Qwen3-0.6B's published size: 0.6B parameters, 0.44B of them outside the embedding.
  EXPECT_EQ(c.num_parameters(), 596049920);
}

TEST(ModelConfigTest, ParsesQwen2) {
  ModelConfig c = ModelConfig::from_json(qwen2_5_0_5b(), "qwen2.json");
  EXPECT_EQ(c.head_dim, 64);  // 896 / 14
  EXPECT_TRUE(c.has_qkv_bias());
  EXPECT_FALSE(c.has_o_proj_bias());
  EXPECT_FALSE(c.has_qk_norm());
  EXPECT_EQ(c.num_key_value_heads, 2);
  // Qwen2.5-0.5B's published size.
  EXPECT_EQ(c.num_parameters(), 494032768);
}

TEST(ModelConfigTest, ParsesLlamaWithLlama3RopeScaling) {
  ModelConfig c = ModelConfig::from_json(llama_3_2_1b(), "llama.json");
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.rope_type, "llama3");
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_FALSE(c.has_qkv_bias());
  EXPECT_FALSE(c.has_qk_norm());
  // Llama-3.2-1B's published size.
  EXPECT_EQ(c.num_parameters(), 1235814400);
}

TEST(ModelConfigTest, DefaultsFollowTransformers) {
  json j = {{"model_type", "llama"},    {"vocab_size", 100},      {"hidden_size", 64},
            {"intermediate_size", 128}, {"num_hidden_layers", 2}, {"num_attention_heads", 4}};
  ModelConfig c = ModelConfig::from_json(j, "x");
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.initializer_range, 0.02);
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.torch_dtype, "float32");
  EXPECT_FALSE(c.bos_token_id.has_value());
  EXPECT_TRUE(c.eos_token_ids.empty());
  j["model_type"] = "qwen3";  // Qwen3Config's head_dim default is 128
  EXPECT_EQ(ModelConfig::from_json(j, "x").head_dim, 128);
}

TEST(ModelConfigTest, ReadsTransformers5Keys) {
  json j = llama_3_2_1b();
  j.erase("rope_scaling");
  j.erase("rope_theta");
  j.erase("torch_dtype");
  j["dtype"] = "float16";
  j["rope_parameters"] = {{"rope_type", "llama3"},   {"rope_theta", 250000.0},
                          {"factor", 8.0},           {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 4096}};
  ModelConfig c = ModelConfig::from_json(j, "x");
  EXPECT_EQ(c.torch_dtype, "float16");
  EXPECT_DOUBLE_EQ(c.rope_theta, 250000.0);
  EXPECT_EQ(c.rope_scaling.rope_type, "llama3");
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 4096);
}

TEST(ModelConfigTest, ErrorsNameTheFileAndTheKey) {
  const std::string file = "/models/x/config.json";
  json j = qwen3_0_6b();
  j.erase("hidden_size");
  expect_mentions(error_of<ooze::FormatError>(j), {file, "hidden_size"});

  j = qwen3_0_6b();
  j["num_hidden_layers"] = "28";
  expect_mentions(error_of<ooze::FormatError>(j), {file, "num_hidden_layers", "integer"});

  j = qwen3_0_6b();
  j["tie_word_embeddings"] = 1;
  expect_mentions(error_of<ooze::FormatError>(j), {file, "tie_word_embeddings"});

  j = qwen3_0_6b();
  j["eos_token_id"] = "</s>";
  expect_mentions(error_of<ooze::FormatError>(j), {file, "eos_token_id"});

  j = qwen3_0_6b();
  j["model_type"] = "mistral";
  expect_mentions(error_of<ooze::ConfigError>(j), {file, "mistral", "qwen3", "qwen2", "llama"});

  j = qwen3_0_6b();
  j.erase("model_type");
  expect_mentions(error_of<ooze::FormatError>(j), {file, "model_type"});

  j = qwen2_5_0_5b();
  j["num_attention_heads"] = 15;  // 896 / 15 is not whole, and qwen2 has no head_dim
  expect_mentions(error_of<ooze::ConfigError>(j),
                  {file, "hidden_size", "num_attention_heads", "head_dim"});

  j = qwen3_0_6b();
  j["num_key_value_heads"] = 5;
  expect_mentions(error_of<ooze::ConfigError>(j),
                  {file, "num_key_value_heads = 5", "num_attention_heads = 16"});

  j = qwen3_0_6b();
  j["head_dim"] = 0;
  expect_mentions(error_of<ooze::ConfigError>(j), {file, "head_dim"});

  j = qwen3_0_6b();
  j["head_dim"] = 127;
  expect_mentions(error_of<ooze::ConfigError>(j), {file, "head_dim", "even"});

  j = qwen3_0_6b();
  j["rms_norm_eps"] = -1.0;
  expect_mentions(error_of<ooze::ConfigError>(j), {file, "rms_norm_eps"});

  j = llama_3_2_1b();
  j["rope_scaling"]["rope_type"] = "yarn";
  expect_mentions(error_of<ooze::ConfigError>(j), {file, "yarn", "llama3"});

  j = llama_3_2_1b();
  j["rope_scaling"]["high_freq_factor"] = 0.5;
  expect_mentions(error_of<ooze::ConfigError>(j), {file, "high_freq_factor", "low_freq_factor"});

  j = qwen3_0_6b();
  j["torch_dtype"] = "float8";
  expect_mentions(error_of<ooze::ConfigError>(j), {file, "torch_dtype", "float8"});

  j = qwen3_0_6b();
  j["hidden_act"] = "gelu";
  expect_mentions(error_of<ooze::ConfigError>(j), {file, "hidden_act", "gelu"});

  j = qwen2_5_0_5b();
  j["use_sliding_window"] = true;
  expect_mentions(error_of<ooze::ConfigError>(j), {file, "use_sliding_window"});

  expect_mentions(error_of<ooze::FormatError>(json::array()), {file, "object"});
}

TEST(ModelConfigTest, ToJsonRoundTripsAndKeepsUnknownKeys) {
  for (const json& original : {qwen3_0_6b(), qwen2_5_0_5b(), llama_3_2_1b()}) {
    ModelConfig c = ModelConfig::from_json(original, "a.json");
    json written = c.to_json();
    // Every key of the published file survives with the same value (numbers compared as
    // numbers: 1000000 and 1000000.0 are the same rope_theta).
    for (auto it = original.begin(); it != original.end(); ++it) {
      ASSERT_TRUE(written.contains(it.key())) << it.key();
      if (it.value().is_number()) {
        EXPECT_DOUBLE_EQ(written[it.key()].get<double>(), it.value().get<double>()) << it.key();
      } else {
        EXPECT_EQ(written[it.key()], it.value()) << it.key();
      }
    }
    ModelConfig again = ModelConfig::from_json(written, "b.json");
    EXPECT_EQ(again.to_json(), written);
  }
  // Architectures are filled in when the original had none.
  json bare = qwen2_5_0_5b();
  bare.erase("architectures");
  EXPECT_EQ(ModelConfig::from_json(bare, "x").to_json()["architectures"],
            json::array({"Qwen2ForCausalLM"}));
  bare = qwen3_0_6b();
  bare.erase("architectures");
  EXPECT_EQ(ModelConfig::from_json(bare, "x").to_json()["architectures"],
            json::array({"Qwen3ForCausalLM"}));
}

TEST(ModelConfigTest, LoadAndSaveFiles) {
  TempDir dir;
  {
    std::ofstream out(dir.str() + "/config.json");
    out << llama_3_2_1b().dump(2);
  }
  ModelConfig from_dir = load_model_config(dir.str());
  EXPECT_EQ(from_dir.origin, dir.str() + "/config.json");
  EXPECT_EQ(from_dir.hidden_size, 2048);
  ModelConfig from_file = load_model_config(dir.str() + "/config.json");
  EXPECT_EQ(from_file.to_json(), from_dir.to_json());

  TempDir out_dir;
  from_dir.hidden_size = 1024;
  ooze::models::save_model_config(from_dir, out_dir.str());
  ModelConfig saved = load_model_config(out_dir.str());
  EXPECT_EQ(saved.hidden_size, 1024);
  EXPECT_EQ(saved.to_json(), from_dir.to_json());
  for (const auto& entry : fs::directory_iterator(out_dir.str())) {
    EXPECT_EQ(entry.path().filename(), "config.json");  // no temporary left behind
  }

  // A failed save names the file and leaves neither a temporary nor a changed directory.
  TempDir blocked_dir;
  fs::create_directory(blocked_dir.str() + "/config.json");  // the rename over it must fail
  try {
    ooze::models::save_model_config(from_dir, blocked_dir.str());
    FAIL() << "expected IoError";
  } catch (const ooze::IoError& e) {
    expect_mentions(e.what(), {blocked_dir.str() + "/config.json"});
  }
  for (const auto& entry : fs::directory_iterator(blocked_dir.str())) {
    EXPECT_EQ(entry.path().filename(), "config.json");
  }
  EXPECT_TRUE(fs::is_directory(blocked_dir.str() + "/config.json"));

  try {
    load_model_config(dir.str() + "/missing");
    FAIL() << "expected IoError";
  } catch (const ooze::IoError& e) {
    expect_mentions(e.what(), {dir.str() + "/missing"});
  }
  {
    std::ofstream out(dir.str() + "/config.json");
    out << "{\"model_type\": \"qwen3\",\n \"vocab_size\": }";
  }
  try {
    load_model_config(dir.str());
    FAIL() << "expected FormatError";
  } catch (const ooze::FormatError& e) {
    expect_mentions(e.what(), {dir.str() + "/config.json", "line 2"});
  }
}

}  // namespace model_config_test
