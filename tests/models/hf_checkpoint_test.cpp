// load_hf_weights / save_hf_model: round trips (single file, sharded, bf16), hand-built
// checkpoints, strictness errors, the directory swap, and a real TransformerModel.
#include "models/hf_checkpoint.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/safetensors.h"
#include "models/model_config.h"
#include "models/transformer.h"
#include "tests/support/process.h"

namespace ooze::models {
namespace hf_checkpoint_test {

namespace fs = std::filesystem;

// HF-like names without the transformer: model.embed_tokens.weight,
// model.layers.N.self_attn.q_proj.{weight,bias}, model.layers.N.mlp.down_proj.weight,
// model.norm.weight and (untied) lm_head.weight.
struct TinyLmImpl : torch::nn::Module {
  explicit TinyLmImpl(bool tied = false) {
    auto backbone = std::make_shared<torch::nn::Module>();
    embed_tokens = backbone->register_module("embed_tokens", torch::nn::Embedding(10, 4));
    auto layers = torch::nn::ModuleList();
    for (int i = 0; i < 2; ++i) {
      auto layer = std::make_shared<torch::nn::Module>();
      auto attn = std::make_shared<torch::nn::Module>();
      auto mlp = std::make_shared<torch::nn::Module>();
      q_proj.push_back(attn->register_module("q_proj", torch::nn::Linear(4, 4)));
      down_proj.push_back(mlp->register_module(
          "down_proj", torch::nn::Linear(torch::nn::LinearOptions(6, 4).bias(false))));
      layer->register_module("self_attn", attn);
      layer->register_module("mlp", mlp);
      layers->push_back(layer);
    }
    backbone->register_module("layers", layers);
    auto norm_module = backbone->register_module("norm", std::make_shared<torch::nn::Module>());
    norm = norm_module->register_parameter("weight", torch::ones({4}));
    register_module("model", backbone);
    if (!tied) {
      lm_head = register_module("lm_head",
                                torch::nn::Linear(torch::nn::LinearOptions(4, 10).bias(false)));
    }
  }
  torch::nn::Embedding embed_tokens{nullptr};
  std::vector<torch::nn::Linear> q_proj, down_proj;
  at::Tensor norm;
  torch::nn::Linear lm_head{nullptr};
};
TORCH_MODULE(TinyLm);

ModelConfig tiny_config(const std::string& torch_dtype = "float32") {
  ModelConfig config;
  config.model_type = "qwen3";
  config.vocab_size = 64;
  config.hidden_size = 32;
  config.intermediate_size = 48;
  config.num_hidden_layers = 2;
  config.num_attention_heads = 4;
  config.num_key_value_heads = 2;
  config.head_dim = 8;
  config.max_position_embeddings = 128;
  config.rope_theta = 10000.0;
  config.torch_dtype = torch_dtype;
  config.bos_token_id = 1;
  config.eos_token_ids = {2, 3};
  return config;
}

TinyLm random_tiny(uint64_t seed, bool tied = false) {
  torch::manual_seed(seed);
  TinyLm model(tied);
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters()) p.normal_();
  return model;
}

void expect_same_parameters(torch::nn::Module& a, torch::nn::Module& b) {
  const auto pa = a.named_parameters();
  const auto pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (const auto& item : pa) {
    const at::Tensor* other = pb.find(item.key());
    ASSERT_NE(other, nullptr) << item.key();
    EXPECT_EQ(item.value().scalar_type(), other->scalar_type()) << item.key();
    EXPECT_TRUE(torch::equal(item.value(), *other)) << item.key();
  }
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an ooze::Error";
  return "";
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class HfCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    at::set_num_threads(1);
    root_ = ooze::testing::make_temp_dir("hf-checkpoint");
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string path(const std::string& name) const { return (fs::path(root_) / name).string(); }

  // A checkpoint written by hand, tensor by tensor.
  std::string write_checkpoint(const NamedTensors& tensors) {
    const std::string dir = path("hand");
    fs::create_directories(dir);
    save_safetensors(dir + "/model.safetensors", tensors);
    return dir;
  }

  // The tensors of a TinyLm under their HF names, with recognisable values.
  static NamedTensors tiny_tensors() {
    NamedTensors t;
    t.emplace_back("model.embed_tokens.weight", torch::arange(40, torch::kFloat).view({10, 4}));
    for (int i = 0; i < 2; ++i) {
      const std::string layer = "model.layers." + std::to_string(i) + ".";
      t.emplace_back(layer + "self_attn.q_proj.weight", torch::full({4, 4}, 100.0f + i));
      t.emplace_back(layer + "self_attn.q_proj.bias", torch::full({4}, 200.0f + i));
      t.emplace_back(layer + "mlp.down_proj.weight", torch::full({4, 6}, 300.0f + i));
    }
    t.emplace_back("model.norm.weight", torch::full({4}, 7.0f));
    t.emplace_back("lm_head.weight", -torch::arange(40, torch::kFloat).view({10, 4}));
    return t;
  }

  static NamedTensors without(NamedTensors tensors, const std::string& name) {
    NamedTensors out;
    for (auto& item : tensors) {
      if (item.first != name) out.push_back(item);
    }
    return out;
  }

  std::string root_;
};

TEST_F(HfCheckpointTest, SingleFileRoundTripIsBitExact) {
  TinyLm saved = random_tiny(1);
  const std::string dir = path("single");
  save_hf_model(dir, tiny_config(), *saved, "");
  EXPECT_TRUE(fs::exists(dir + "/model.safetensors"));
  EXPECT_FALSE(fs::exists(dir + "/model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(dir + "/config.json"));

  TinyLm loaded = random_tiny(2);
  load_hf_weights(*loaded, dir);
  expect_same_parameters(*saved, *loaded);

  const ModelConfig config = load_model_config(dir);
  EXPECT_EQ(config.to_json(), tiny_config().to_json());
}

TEST_F(HfCheckpointTest, ShardedRoundTripKeepsParameterOrderAcrossShards) {
  TinyLm saved = random_tiny(3);
  const std::string dir = path("sharded");
  save_hf_model(dir, tiny_config(), *saved, "", /*max_shard_bytes=*/200);
  ASSERT_TRUE(fs::exists(dir + "/model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(dir + "/model.safetensors"));

  const ShardedSafetensors files = ShardedSafetensors::open(dir);
  std::vector<std::string> shard_of_each;
  for (const auto& item : saved->named_parameters()) {
    ASSERT_TRUE(files.contains(item.key())) << item.key();
    shard_of_each.push_back(files.file_of(item.key()));
  }
  EXPECT_EQ(files.names().size(), shard_of_each.size());
  EXPECT_GT(std::set<std::string>(shard_of_each.begin(), shard_of_each.end()).size(), 2u);
  EXPECT_TRUE(std::is_sorted(shard_of_each.begin(), shard_of_each.end()))
      << "shards must follow named_parameters() order";

  TinyLm loaded = random_tiny(4);
  load_hf_weights(*loaded, dir);
  expect_same_parameters(*saved, *loaded);
}

TEST_F(HfCheckpointTest, SavesInTheConfigDtypeAndLoadsIntoFp32) {
  TinyLm saved = random_tiny(5);
  const std::string dir = path("bf16");
  save_hf_model(dir, tiny_config("bfloat16"), *saved, "");
  const ShardedSafetensors files = ShardedSafetensors::open(dir);
  for (const std::string& name : files.names()) {
    EXPECT_EQ(files.info(name).dtype, SafetensorsDtype::BF16) << name;
  }
  EXPECT_EQ(nlohmann::json::parse(read_text(dir + "/config.json"))["torch_dtype"], "bfloat16");

  TinyLm loaded = random_tiny(6);
  load_hf_weights(*loaded, dir);
  const auto expected = saved->named_parameters();
  for (const auto& item : loaded->named_parameters()) {
    EXPECT_EQ(item.value().scalar_type(), torch::kFloat);
    EXPECT_TRUE(
        torch::equal(item.value(), expected[item.key()].to(torch::kBFloat16).to(torch::kFloat)))
        << item.key();
  }
}

TEST_F(HfCheckpointTest, HandBuiltCheckpointLoadsIntoTheRightParameters) {
  NamedTensors tensors = tiny_tensors();
  // Older Llama checkpoints carry RoPE frequencies: ignored. A bf16 tensor converts.
  tensors.emplace_back("model.layers.0.self_attn.rotary_emb.inv_freq", torch::ones({2}));
  for (auto& item : tensors) {
    if (item.first == "model.norm.weight") item.second = item.second.to(torch::kBFloat16);
  }
  const std::string dir = write_checkpoint(tensors);

  TinyLm model = random_tiny(7);
  load_hf_weights(*model, dir);
  EXPECT_TRUE(
      torch::equal(model->embed_tokens->weight, torch::arange(40, torch::kFloat).view({10, 4})));
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(torch::equal(model->q_proj[i]->weight, torch::full({4, 4}, 100.0f + i))) << i;
    EXPECT_TRUE(torch::equal(model->q_proj[i]->bias, torch::full({4}, 200.0f + i))) << i;
    EXPECT_TRUE(torch::equal(model->down_proj[i]->weight, torch::full({4, 6}, 300.0f + i))) << i;
  }
  EXPECT_TRUE(torch::equal(model->norm, torch::full({4}, 7.0f)));
  EXPECT_TRUE(
      torch::equal(model->lm_head->weight, -torch::arange(40, torch::kFloat).view({10, 4})));
}

TEST_F(HfCheckpointTest, MissingTensorsAreNamedAndNothingIsLoaded) {
  const std::string dir = write_checkpoint(
      without(without(tiny_tensors(), "model.norm.weight"), "model.layers.1.mlp.down_proj.weight"));
  TinyLm model = random_tiny(8);
  const at::Tensor embed_before = model->embed_tokens->weight.clone();
  const std::string message = error_of([&] { load_hf_weights(*model, dir); });
  EXPECT_NE(message.find("missing: model.norm.weight"), std::string::npos) << message;
  EXPECT_NE(message.find("missing: model.layers.1.mlp.down_proj.weight"), std::string::npos)
      << message;
  EXPECT_NE(message.find(dir), std::string::npos) << message;
  EXPECT_TRUE(torch::equal(model->embed_tokens->weight, embed_before)) << "a failed load copied";

  // Not strict: what is there loads, the rest keeps its values.
  const at::Tensor norm_before = model->norm.clone();
  load_hf_weights(*model, dir, /*strict=*/false);
  EXPECT_TRUE(torch::equal(model->norm, norm_before));
  EXPECT_TRUE(torch::equal(model->q_proj[1]->weight, torch::full({4, 4}, 101.0f)));
}

TEST_F(HfCheckpointTest, UnexpectedTensorIsNamedWithItsFile) {
  NamedTensors tensors = tiny_tensors();
  tensors.emplace_back("model.layers.2.mlp.gate_proj.weight", torch::zeros({6, 4}));
  const std::string dir = write_checkpoint(tensors);
  TinyLm model = random_tiny(9);
  const std::string message = error_of([&] { load_hf_weights(*model, dir); });
  EXPECT_NE(message.find("unexpected: model.layers.2.mlp.gate_proj.weight in model.safetensors"),
            std::string::npos)
      << message;
  load_hf_weights(*model, dir, /*strict=*/false);
  EXPECT_TRUE(torch::equal(model->norm, torch::full({4}, 7.0f)));
}

TEST_F(HfCheckpointTest, ShapeMismatchNamesTheTensorAndBothShapesEvenWhenNotStrict) {
  NamedTensors tensors = tiny_tensors();
  for (auto& item : tensors) {
    if (item.first == "model.layers.1.self_attn.q_proj.weight") item.second = torch::zeros({4, 5});
  }
  const std::string dir = write_checkpoint(tensors);
  TinyLm model = random_tiny(10);
  for (bool strict : {true, false}) {
    const std::string message = error_of([&] { load_hf_weights(*model, dir, strict); });
    EXPECT_NE(message.find("model.layers.1.self_attn.q_proj.weight in model.safetensors is "
                           "[4, 5] but the model's is [4, 4]"),
              std::string::npos)
        << message;
  }
}

TEST_F(HfCheckpointTest, IntegerTensorForAFloatParameterIsAnError) {
  NamedTensors tensors = tiny_tensors();
  for (auto& item : tensors) {
    if (item.first == "model.norm.weight") item.second = torch::ones({4}, torch::kLong);
  }
  const std::string dir = write_checkpoint(tensors);
  TinyLm model = random_tiny(11);
  const std::string message = error_of([&] { load_hf_weights(*model, dir); });
  EXPECT_NE(message.find("model.norm.weight in model.safetensors is I64"), std::string::npos)
      << message;
}

TEST_F(HfCheckpointTest, TiedModelIgnoresAnEqualHeadAndRejectsADifferentOne) {
  NamedTensors tensors = tiny_tensors();
  for (auto& item : tensors) {
    if (item.first == "lm_head.weight")
      item.second = torch::arange(40, torch::kFloat).view({10, 4});
  }
  TinyLm model = random_tiny(12, /*tied=*/true);
  load_hf_weights(*model, write_checkpoint(tensors));
  EXPECT_TRUE(
      torch::equal(model->embed_tokens->weight, torch::arange(40, torch::kFloat).view({10, 4})));

  const std::string dir = write_checkpoint(tiny_tensors());  // head = -embeddings
  const std::string message = error_of([&] { load_hf_weights(*model, dir); });
  EXPECT_NE(message.find("tie_word_embeddings"), std::string::npos) << message;
}

TEST_F(HfCheckpointTest, MissingOrTruncatedCheckpointFilesAreReported) {
  TinyLm model = random_tiny(13);
  EXPECT_THROW(load_hf_weights(*model, path("nothing-here")), IoError);

  const std::string dir = path("truncated");
  save_hf_model(dir, tiny_config(), *model, "");
  const fs::path file = fs::path(dir) / "model.safetensors";
  fs::resize_file(file, fs::file_size(file) - 10);
  const std::string message = error_of([&] { load_hf_weights(*model, dir); });
  EXPECT_NE(message.find("model.safetensors"), std::string::npos) << message;
}

TEST_F(HfCheckpointTest, WritesGenerationConfigAndCopiesTokenizerFiles) {
  const std::string tokenizer = path("tokenizer");
  fs::create_directories(tokenizer);
  std::ofstream(tokenizer + "/tokenizer.json") << "{\"model\": {}}";
  std::ofstream(tokenizer + "/tokenizer_config.json") << "{\"eos_token\": \"x\"}";
  std::ofstream(tokenizer + "/merges.txt") << "a b\n";
  std::ofstream(tokenizer + "/notes.txt") << "not a tokenizer file";

  TinyLm model = random_tiny(14);
  const std::string dir = path("with-tokenizer");
  save_hf_model(dir, tiny_config(), *model, tokenizer);
  for (const char* file : {"tokenizer.json", "tokenizer_config.json", "merges.txt"}) {
    EXPECT_EQ(read_text(fs::path(dir) / file), read_text(fs::path(tokenizer) / file)) << file;
  }
  EXPECT_FALSE(fs::exists(dir + "/notes.txt"));
  const auto generation = nlohmann::json::parse(read_text(dir + "/generation_config.json"));
  EXPECT_EQ(generation["bos_token_id"], 1);
  EXPECT_EQ(generation["eos_token_id"], nlohmann::json::array({2, 3}));

  // A tokenizer directory without tokenizer.json: refused before anything is written.
  const std::string bad = path("bad-tokenizer");
  fs::create_directories(bad);
  EXPECT_THROW(save_hf_model(path("never"), tiny_config(), *model, bad), Error);
  EXPECT_FALSE(fs::exists(path("never")));
}

TEST_F(HfCheckpointTest, ReplacesAModelDirectoryButNeverOtherFiles) {
  const std::string dir = path("model");
  TinyLm first = random_tiny(15);
  save_hf_model(dir, tiny_config(), *first, "", 200);  // sharded
  TinyLm second = random_tiny(16);
  save_hf_model(dir + "/", tiny_config(), *second, "");  // single file, same directory
  EXPECT_FALSE(fs::exists(dir + "/model.safetensors.index.json")) << "old shards survived";
  TinyLm loaded = random_tiny(17);
  load_hf_weights(*loaded, dir);
  expect_same_parameters(*second, *loaded);

  const std::string precious = path("precious");
  fs::create_directories(precious);
  std::ofstream(precious + "/thesis.tex") << "years of work";
  EXPECT_THROW(save_hf_model(precious, tiny_config(), *second, ""), IoError);
  EXPECT_EQ(read_text(precious + "/thesis.tex"), "years of work");

  std::vector<std::string> entries;
  for (const auto& entry : fs::directory_iterator(root_)) {
    entries.push_back(entry.path().filename().string());
  }
  std::sort(entries.begin(), entries.end());
  EXPECT_EQ(entries, (std::vector<std::string>{"model", "precious"})) << "staging dirs left";
}

// The real model: every HF name round-trips, and the reloaded model computes the same logits.
TEST_F(HfCheckpointTest, TransformerModelRoundTripsThroughShardedAndSingleFiles) {
  for (bool tied : {false, true}) {
    ModelConfig config = tiny_config();
    config.tie_word_embeddings = tied;
    TransformerModel saved(config);
    saved->init_weights(21);
    const std::string sharded = path(tied ? "tied-sharded" : "sharded");
    const std::string single = path(tied ? "tied-single" : "single");
    save_hf_model(sharded, config, *saved, "", /*max_shard_bytes=*/16 * 1024);
    save_hf_model(single, config, *saved, "");

    const ShardedSafetensors files = ShardedSafetensors::open(sharded);
    EXPECT_TRUE(files.contains("model.layers.1.self_attn.q_norm.weight"));
    EXPECT_TRUE(files.contains("model.embed_tokens.weight"));
    EXPECT_EQ(files.contains("lm_head.weight"), !tied);
    EXPECT_EQ(files.names().size(), saved->named_parameters().size());

    const at::Tensor ids = torch::randint(0, config.vocab_size, {7}, torch::kLong);
    const at::Tensor positions = torch::arange(7, torch::kLong);
    const at::Tensor cu_seqlens = torch::tensor(std::vector<int32_t>{0, 7});
    torch::NoGradGuard no_grad;
    const at::Tensor expected = saved->logits(saved->forward(ids, positions, cu_seqlens));
    for (const std::string& dir : {sharded, single}) {
      TransformerModel loaded(load_model_config(dir));
      loaded->init_weights(22);
      load_hf_weights(*loaded, dir);
      expect_same_parameters(*saved, *loaded);
      EXPECT_TRUE(
          torch::equal(loaded->logits(loaded->forward(ids, positions, cu_seqlens)), expected))
          << dir;
    }
  }
}

}  // namespace hf_checkpoint_test
}  // namespace ooze::models
