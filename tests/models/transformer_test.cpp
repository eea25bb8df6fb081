// TransformerModel against a reference forward written here from the architectures' published
// definitions (double precision, one sequence at a time, its own RMSNorm / RoPE / attention),
// plus the properties packing, FSDP and checkpoints rely on.
#include "models/transformer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/model_config.h"

namespace transformer_test {

using ooze::models::ModelConfig;
using ooze::models::TransformerModel;
using json = nlohmann::json;

// ---------------------------------------------------------------------------------------------
// Tiny configurations, one per architectural variant.

json qwen3_json() {
  // head_dim 16 != hidden / heads = 8: Qwen3 takes head_dim as given.
  return {{"model_type", "qwen3"},
          {"vocab_size", 61},
          {"hidden_size", 32},
          {"intermediate_size", 48},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"head_dim", 16},
          {"rms_norm_eps", 1e-6},
          {"rope_theta", 10000.0},
          {"tie_word_embeddings", false},
          {"torch_dtype", "float32"}};
}

json qwen2_json() {
  return {{"model_type", "qwen2"},       {"vocab_size", 53},        {"hidden_size", 32},
          {"intermediate_size", 40},     {"num_hidden_layers", 2},  {"num_attention_heads", 4},
          {"num_key_value_heads", 1},    {"rms_norm_eps", 1e-6},    {"rope_theta", 1000.0},
          {"tie_word_embeddings", true}, {"torch_dtype", "float32"}};
}

json llama3_json() {
  // Wavelengths 2*pi*10000^(i/8) for i = 0..7 fall on both sides of and between the llama3
  // thresholds 32/4 = 8 and 32/1 = 32, so every branch of the scaling is exercised.
  return {{"model_type", "llama"},
          {"vocab_size", 47},
          {"hidden_size", 32},
          {"intermediate_size", 64},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 2},
          {"num_key_value_heads", 1},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 10000.0},
          {"rope_scaling",
           {{"rope_type", "llama3"},
            {"factor", 8.0},
            {"low_freq_factor", 1.0},
            {"high_freq_factor", 4.0},
            {"original_max_position_embeddings", 32}}},
          {"tie_word_embeddings", true},
          {"torch_dtype", "float32"}};
}

json llama_bias_json() {
  json j = llama3_json();
  j.erase("rope_scaling");
  j["attention_bias"] = true;
  j["num_attention_heads"] = 4;
  j["num_key_value_heads"] = 4;
  j["tie_word_embeddings"] = false;
  return j;
}

ModelConfig make_config(const json& j) { return ModelConfig::from_json(j, "test config.json"); }

// Random parameters large enough that attention is far from uniform and norms are not 1, with
// std 1/sqrt(fan_in) so that activations and logits stay O(1) through the layers.
void randomize(TransformerModel& model, uint64_t seed) {
  torch::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(seed);
  for (auto& item : model->named_parameters()) {
    torch::Tensor p = item.value();
    torch::Tensor values;
    if (p.dim() == 1 && item.key().find("bias") == std::string::npos) {
      values = 1.0 + 0.2 * torch::randn(p.sizes(), gen, torch::kFloat);
    } else if (p.dim() == 1) {
      values = 0.2 * torch::randn(p.sizes(), gen, torch::kFloat);
    } else {
      values = torch::randn(p.sizes(), gen, torch::kFloat) / std::sqrt(double(p.size(1)));
    }
    p.copy_(values);
  }
}

// ---------------------------------------------------------------------------------------------
// The reference: one sequence, double precision, written from the model definitions.

struct Reference {
  json config;
  std::map<std::string, torch::Tensor> w;  // HF name -> double tensor

  Reference(const json& config_json, TransformerModel& model) : config(config_json) {
    for (auto& item : model->named_parameters()) {
      w[item.key()] = item.value().detach().to(torch::kDouble).clone();
    }
  }

  int64_t get(const char* key) const { return config.at(key).get<int64_t>(); }
  std::string type() const { return config.at("model_type").get<std::string>(); }
  int64_t head_dim() const {
    return config.contains("head_dim") ? get("head_dim")
                                       : get("hidden_size") / get("num_attention_heads");
  }

  torch::Tensor rms(const torch::Tensor& x, const torch::Tensor& weight) const {
    double eps = config.at("rms_norm_eps").get<double>();
    return x / torch::sqrt(x.pow(2).mean(-1, true) + eps) * weight;
  }

  // Frequency of pair i, with the llama3 rule written out case by case.
  std::vector<double> frequencies() const {
    const int64_t d = head_dim();
    const double theta = config.at("rope_theta").get<double>();
    std::vector<double> freq;
    for (int64_t i = 0; i < d / 2; ++i) {
      double f = 1.0 / std::pow(theta, 2.0 * i / d);
      if (config.contains("rope_scaling") && !config["rope_scaling"].is_null()) {
        const json& s = config["rope_scaling"];
        double factor = s["factor"], low = s["low_freq_factor"], high = s["high_freq_factor"];
        double old_context = s["original_max_position_embeddings"].get<double>();
        double wavelength = 2 * M_PI / f;
        if (wavelength < old_context / high) {
          // high frequency: unchanged
        } else if (wavelength > old_context / low) {
          f = f / factor;
        } else {
          double smooth = (old_context / wavelength - low) / (high - low);
          f = (1 - smooth) * f / factor + smooth * f;
        }
      }
      freq.push_back(f);
    }
    return freq;
  }

  // x: [L, heads, d]; pairs (i, i + d/2) rotate by angle position * freq[i].
  torch::Tensor rope(const torch::Tensor& x, const std::vector<int64_t>& positions) const {
    const int64_t d = x.size(2), half = d / 2;
    std::vector<double> freq = frequencies();
    torch::Tensor out = torch::empty_like(x);
    auto xa = x.accessor<double, 3>();
    auto oa = out.accessor<double, 3>();
    for (int64_t t = 0; t < x.size(0); ++t) {
      for (int64_t h = 0; h < x.size(1); ++h) {
        for (int64_t i = 0; i < half; ++i) {
          double angle = positions[t] * freq[i];
          double a = xa[t][h][i], b = xa[t][h][i + half];
          oa[t][h][i] = a * std::cos(angle) - b * std::sin(angle);
          oa[t][h][i + half] = b * std::cos(angle) + a * std::sin(angle);
        }
      }
    }
    return out;
  }

  torch::Tensor linear(const torch::Tensor& x, const std::string& name, bool bias) const {
    torch::Tensor y = torch::matmul(x, w.at(name + ".weight").t());
    return bias ? y + w.at(name + ".bias") : y;
  }

  // Logits [L, V] for one sequence with the given positions.
  torch::Tensor logits(const std::vector<int64_t>& ids, const std::vector<int64_t>& positions) {
    const int64_t L = static_cast<int64_t>(ids.size());
    const int64_t heads = get("num_attention_heads");
    const int64_t kv_heads =
        config.contains("num_key_value_heads") ? get("num_key_value_heads") : heads;
    const int64_t d = head_dim();
    const bool llama_bias = type() == "llama" && config.value("attention_bias", false);
    const bool qkv_bias = type() == "qwen2" || llama_bias;
    const bool o_bias = llama_bias;
    const bool qk_norm = type() == "qwen3";

    torch::Tensor x = w.at("model.embed_tokens.weight").index_select(0, torch::tensor(ids));
    for (int64_t layer = 0; layer < get("num_hidden_layers"); ++layer) {
      const std::string p = "model.layers." + std::to_string(layer) + ".";
      torch::Tensor h = rms(x, w.at(p + "input_layernorm.weight"));
      torch::Tensor q = linear(h, p + "self_attn.q_proj", qkv_bias).view({L, heads, d});
      torch::Tensor k = linear(h, p + "self_attn.k_proj", qkv_bias).view({L, kv_heads, d});
      torch::Tensor v = linear(h, p + "self_attn.v_proj", qkv_bias).view({L, kv_heads, d});
      if (qk_norm) {
        q = rms(q, w.at(p + "self_attn.q_norm.weight"));
        k = rms(k, w.at(p + "self_attn.k_norm.weight"));
      }
      q = rope(q, positions);
      k = rope(k, positions);
      torch::Tensor causal = torch::ones({L, L}, torch::kBool).triu(1);
      std::vector<torch::Tensor> head_outputs;
      for (int64_t head = 0; head < heads; ++head) {
        int64_t kv = head / (heads / kv_heads);
        torch::Tensor scores =
            torch::matmul(q.select(1, head), k.select(1, kv).t()) / std::sqrt(double(d));
        scores = scores.masked_fill(causal, -INFINITY);
        head_outputs.push_back(torch::matmul(torch::softmax(scores, -1), v.select(1, kv)));
      }
      torch::Tensor attention = torch::cat(head_outputs, 1);  // [L, heads * d]
      x = x + linear(attention, p + "self_attn.o_proj", o_bias);
      h = rms(x, w.at(p + "post_attention_layernorm.weight"));
      torch::Tensor gate = linear(h, p + "mlp.gate_proj", false);
      torch::Tensor up = linear(h, p + "mlp.up_proj", false);
      x = x + linear(gate * torch::sigmoid(gate) * up, p + "mlp.down_proj", false);
    }
    x = rms(x, w.at("model.norm.weight"));
    const bool tied = config.value("tie_word_embeddings", false);
    return torch::matmul(x, w.at(tied ? "model.embed_tokens.weight" : "lm_head.weight").t());
  }
};

// ---------------------------------------------------------------------------------------------

std::vector<int64_t> random_ids(int64_t length, int64_t vocab, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  torch::Tensor t = torch::randint(vocab, {length}, gen, torch::kLong);
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + length);
}

std::vector<int64_t> range_from(int64_t start, int64_t length) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < length; ++i) v.push_back(start + i);
  return v;
}

struct Packed {
  torch::Tensor ids, positions, cu_seqlens;
};

// Concatenates sequences; positions restart at 0 unless `continuing`.
Packed pack(const std::vector<std::vector<int64_t>>& sequences, bool continuing = false) {
  std::vector<int64_t> ids, positions;
  std::vector<int32_t> cu = {0};
  for (const auto& s : sequences) {
    for (size_t i = 0; i < s.size(); ++i) {
      ids.push_back(s[i]);
      positions.push_back(continuing ? static_cast<int64_t>(positions.size())
                                     : static_cast<int64_t>(i));
    }
    cu.push_back(static_cast<int32_t>(ids.size()));
  }
  return {torch::tensor(ids, torch::kLong), torch::tensor(positions, torch::kLong),
          torch::tensor(cu, torch::kInt)};
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

class TransformerTest : public ::testing::Test {
 protected:
  void SetUp() override { at::set_num_threads(1); }
};

struct Arch {
  std::string name;
  json config;
};

std::vector<Arch> all_archs() {
  return {{"qwen3", qwen3_json()},
          {"qwen2", qwen2_json()},
          {"llama3_scaled", llama3_json()},
          {"llama_bias", llama_bias_json()}};
}

TEST_F(TransformerTest, MatchesReferenceForwardForEveryArchitecture) {
  for (const Arch& arch : all_archs()) {
    SCOPED_TRACE(arch.name);
    TransformerModel model(make_config(arch.config));
    randomize(model, 7);
    Reference reference(arch.config, model);
    const int64_t vocab = arch.config["vocab_size"];
    // Long enough (40) that positions reach past the llama3 original context (32).
    std::vector<std::vector<int64_t>> sequences = {random_ids(40, vocab, 1),
                                                   random_ids(5, vocab, 2), random_ids(1, vocab, 3),
                                                   random_ids(17, vocab, 4)};
    Packed batch = pack(sequences);
    torch::Tensor logits =
        model->logits(model->forward(batch.ids, batch.positions, batch.cu_seqlens));
    ASSERT_EQ(logits.sizes(), (std::vector<int64_t>{63, vocab}));
    int64_t offset = 0;
    for (const auto& s : sequences) {
      const int64_t length = static_cast<int64_t>(s.size());
      torch::Tensor expected = reference.logits(s, range_from(0, length));
      // The reference is not trivially small: it would catch a wrong scale.
      EXPECT_GT(expected.abs().max().item<double>(), 0.5);
      EXPECT_LT(max_diff(logits.narrow(0, offset, length), expected), 1e-5);
      offset += length;
    }
  }
}

TEST_F(TransformerTest, PackedOutputEqualsEachSequenceAlone) {
  TransformerModel model(make_config(qwen3_json()));
  randomize(model, 11);
  std::vector<std::vector<int64_t>> sequences = {random_ids(9, 61, 5), random_ids(3, 61, 6),
                                                 random_ids(12, 61, 7)};
  Packed batch = pack(sequences);
  torch::Tensor packed = model->forward(batch.ids, batch.positions, batch.cu_seqlens);
  int64_t offset = 0;
  for (const auto& s : sequences) {
    Packed alone = pack({s});
    torch::Tensor single = model->forward(alone.ids, alone.positions, alone.cu_seqlens);
    EXPECT_LT(max_diff(packed.narrow(0, offset, s.size()), single), 1e-5);
    offset += static_cast<int64_t>(s.size());
  }
}

TEST_F(TransformerTest, CuSeqlensIsolatesSequencesEvenWhenPositionsContinue) {
  for (const Arch& arch : all_archs()) {
    SCOPED_TRACE(arch.name);
    TransformerModel model(make_config(arch.config));
    randomize(model, 13);
    Reference reference(arch.config, model);
    const int64_t vocab = arch.config["vocab_size"];
    std::vector<std::vector<int64_t>> sequences = {
        random_ids(6, vocab, 8), random_ids(10, vocab, 9), random_ids(4, vocab, 10)};
    // Positions 0..19 run across the boundaries: nothing in them marks where a sequence starts.
    Packed batch = pack(sequences, /*continuing=*/true);
    torch::Tensor logits =
        model->logits(model->forward(batch.ids, batch.positions, batch.cu_seqlens));
    int64_t offset = 0;
    for (const auto& s : sequences) {
      const int64_t length = static_cast<int64_t>(s.size());
      torch::Tensor expected = reference.logits(s, range_from(offset, length));
      EXPECT_LT(max_diff(logits.narrow(0, offset, length), expected), 1e-5);
      offset += length;
    }

    // Changing the other sequences' tokens leaves a sequence's output unchanged.
    std::vector<std::vector<int64_t>> changed = sequences;
    changed[0] = random_ids(6, vocab, 100);
    changed[2] = random_ids(4, vocab, 101);
    Packed other = pack(changed, /*continuing=*/true);
    torch::Tensor other_logits =
        model->logits(model->forward(other.ids, other.positions, other.cu_seqlens));
    EXPECT_EQ(max_diff(other_logits.narrow(0, 6, 10), logits.narrow(0, 6, 10)), 0.0);
  }
}

TEST_F(TransformerTest, EmptySequencesInCuSeqlensAreAllowed) {
  TransformerModel model(make_config(qwen2_json()));
  randomize(model, 3);
  Reference reference(qwen2_json(), model);
  std::vector<int64_t> s = random_ids(5, 53, 21);
  torch::Tensor ids = torch::tensor(s, torch::kLong);
  torch::Tensor positions = torch::arange(5, torch::kLong);
  torch::Tensor cu = torch::tensor(std::vector<int32_t>{0, 0, 5, 5}, torch::kInt);
  torch::Tensor logits = model->logits(model->forward(ids, positions, cu));
  EXPECT_LT(max_diff(logits, reference.logits(s, range_from(0, 5))), 1e-5);
}

TEST_F(TransformerTest, LongSequenceUsesQueryBlocksAndStaysExact) {
  // 8 heads x 1500^2 scores exceed the per-block budget, so queries are processed in blocks.
  json j = {{"model_type", "qwen3"},    {"vocab_size", 31},        {"hidden_size", 16},
            {"intermediate_size", 16},  {"num_hidden_layers", 1},  {"num_attention_heads", 8},
            {"num_key_value_heads", 2}, {"head_dim", 4},           {"rope_theta", 10000.0},
            {"rms_norm_eps", 1e-6},     {"torch_dtype", "float32"}};
  TransformerModel model(make_config(j));
  randomize(model, 17);
  Reference reference(j, model);
  std::vector<int64_t> s = random_ids(1500, 31, 22);
  Packed batch = pack({s, random_ids(7, 31, 23)});
  torch::Tensor logits =
      model->logits(model->forward(batch.ids, batch.positions, batch.cu_seqlens));
  EXPECT_LT(max_diff(logits.narrow(0, 0, 1500), reference.logits(s, range_from(0, 1500))), 1e-5);
}

// The HF names and shapes, written out from the architectures' definitions.
std::map<std::string, std::vector<int64_t>> expected_parameters(const json& j) {
  const std::string type = j["model_type"];
  const int64_t V = j["vocab_size"], H = j["hidden_size"], I = j["intermediate_size"];
  const int64_t heads = j["num_attention_heads"], kv = j["num_key_value_heads"];
  const int64_t d = j.contains("head_dim") ? j["head_dim"].get<int64_t>() : H / heads;
  const bool bias_all = type != "qwen2" && j.value("attention_bias", false);
  std::map<std::string, std::vector<int64_t>> expected;
  expected["model.embed_tokens.weight"] = {V, H};
  for (int64_t l = 0; l < j["num_hidden_layers"].get<int64_t>(); ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    expected[p + "input_layernorm.weight"] = {H};
    expected[p + "self_attn.q_proj.weight"] = {heads * d, H};
    expected[p + "self_attn.k_proj.weight"] = {kv * d, H};
    expected[p + "self_attn.v_proj.weight"] = {kv * d, H};
    expected[p + "self_attn.o_proj.weight"] = {H, heads * d};
    if (type == "qwen2" || bias_all) {
      expected[p + "self_attn.q_proj.bias"] = {heads * d};
      expected[p + "self_attn.k_proj.bias"] = {kv * d};
      expected[p + "self_attn.v_proj.bias"] = {kv * d};
    }
    if (bias_all) expected[p + "self_attn.o_proj.bias"] = {H};
    if (type == "qwen3") {
      expected[p + "self_attn.q_norm.weight"] = {d};
      expected[p + "self_attn.k_norm.weight"] = {d};
    }
    expected[p + "post_attention_layernorm.weight"] = {H};
    expected[p + "mlp.gate_proj.weight"] = {I, H};
    expected[p + "mlp.up_proj.weight"] = {I, H};
    expected[p + "mlp.down_proj.weight"] = {H, I};
  }
  expected["model.norm.weight"] = {H};
  if (!j.value("tie_word_embeddings", false)) expected["lm_head.weight"] = {V, H};
  return expected;
}

TEST_F(TransformerTest, ParameterNamesAndShapesAreHuggingFaces) {
  for (const Arch& arch : all_archs()) {
    SCOPED_TRACE(arch.name);
    TransformerModel model(make_config(arch.config));
    std::map<std::string, std::vector<int64_t>> actual;
    int64_t total = 0;
    for (auto& item : model->named_parameters()) {
      actual[item.key()] = item.value().sizes().vec();
      total += item.value().numel();
    }
    EXPECT_EQ(actual, expected_parameters(arch.config));
    EXPECT_EQ(total, model->config().num_parameters());
    // One wrappable unit per layer, plus embeddings and the final norm.
    EXPECT_EQ(static_cast<int64_t>(model->layers().size()),
              arch.config["num_hidden_layers"].get<int64_t>());
    EXPECT_EQ(model->layers()[1]->named_parameters().size(),
              model->layers()[0]->named_parameters().size());
    EXPECT_EQ(model->embeddings()->weight.data_ptr(),
              model->named_parameters()["model.embed_tokens.weight"].data_ptr());
    EXPECT_EQ(model->final_norm()->weight.data_ptr(),
              model->named_parameters()["model.norm.weight"].data_ptr());
  }
}

TEST_F(TransformerTest, TiedAndUntiedHeads) {
  json tied_json = qwen3_json();
  tied_json["tie_word_embeddings"] = true;
  TransformerModel tied(make_config(tied_json));
  randomize(tied, 5);
  EXPECT_TRUE(tied->lm_head().is_empty());
  EXPECT_EQ(tied->named_parameters().find("lm_head.weight"), nullptr);
  EXPECT_EQ(tied->lm_head_weight().data_ptr(), tied->embeddings()->weight.data_ptr());

  Packed batch = pack({random_ids(6, 61, 31)});
  torch::Tensor hidden = tied->forward(batch.ids, batch.positions, batch.cu_seqlens);
  torch::Tensor expected =
      torch::matmul(hidden.to(torch::kDouble), tied->embeddings()->weight.to(torch::kDouble).t());
  EXPECT_LT(max_diff(tied->logits(hidden), expected), 1e-5);

  TransformerModel untied(make_config(qwen3_json()));
  randomize(untied, 5);
  ASSERT_FALSE(untied->lm_head().is_empty());
  EXPECT_NE(untied->lm_head_weight().data_ptr(), untied->embeddings()->weight.data_ptr());
  EXPECT_EQ(untied->lm_head_weight().data_ptr(),
            untied->named_parameters()["lm_head.weight"].data_ptr());
}

TEST_F(TransformerTest, TorchDtypeIsRespectedAndCanBeOverridden) {
  json j = qwen3_json();
  j["torch_dtype"] = "bfloat16";
  TransformerModel from_config(make_config(j));
  for (auto& item : from_config->named_parameters()) {
    EXPECT_EQ(item.value().scalar_type(), torch::kBFloat16) << item.key();
  }
  TransformerModel overridden(make_config(j), torch::kFloat);
  for (auto& item : overridden->named_parameters()) {
    EXPECT_EQ(item.value().scalar_type(), torch::kFloat) << item.key();
  }
}

TEST_F(TransformerTest, Bfloat16ForwardIsCloseToFloat32) {
  for (const Arch& arch : all_archs()) {
    SCOPED_TRACE(arch.name);
    TransformerModel fp32(make_config(arch.config));
    randomize(fp32, 19);
    TransformerModel bf16(make_config(arch.config), torch::kBFloat16);
    {
      torch::NoGradGuard no_grad;
      auto source = fp32->named_parameters();
      for (auto& item : bf16->named_parameters()) item.value().copy_(source[item.key()]);
    }
    const int64_t vocab = arch.config["vocab_size"];
    Packed batch = pack({random_ids(12, vocab, 41), random_ids(7, vocab, 42)});
    torch::Tensor expected =
        fp32->logits(fp32->forward(batch.ids, batch.positions, batch.cu_seqlens));
    torch::Tensor hidden = bf16->forward(batch.ids, batch.positions, batch.cu_seqlens);
    EXPECT_EQ(hidden.scalar_type(), torch::kBFloat16);
    torch::Tensor actual = bf16->logits(hidden);
    const double scale = expected.abs().max().item<double>();
    // bf16 keeps 8 bits of mantissa; two layers of rounding stay within a few percent.
    EXPECT_LT(max_diff(actual, expected), 0.1 * scale);
    double cosine = torch::cosine_similarity(actual.to(torch::kDouble).flatten(),
                                             expected.to(torch::kDouble).flatten(), 0)
                        .item<double>();
    EXPECT_GT(cosine, 0.999);
  }
}

TEST_F(TransformerTest, InitWeightsIsDeterministicAndFollowsHuggingFace) {
  json j = qwen2_json();  // has biases
  j["tie_word_embeddings"] = false;
  j["initializer_range"] = 0.05;
  TransformerModel a(make_config(j)), b(make_config(j)), c(make_config(j));
  a->init_weights(1234);
  b->init_weights(1234);
  c->init_weights(1235);
  auto pa = a->named_parameters(), pb = b->named_parameters(), pc = c->named_parameters();
  bool any_different = false;
  for (auto& item : pa) {
    const std::string& name = item.key();
    torch::Tensor value = item.value();
    EXPECT_TRUE(torch::equal(value, pb[name])) << name;
    if (!torch::equal(value, pc[name])) any_different = true;
    if (name.find(".bias") != std::string::npos) {
      EXPECT_EQ(value.abs().max().item<double>(), 0.0) << name;
    } else if (value.dim() == 1) {
      EXPECT_TRUE(torch::equal(value, torch::ones_like(value))) << name;
    } else {
      EXPECT_NEAR(value.std().item<double>(), 0.05, 0.05 * 0.15) << name;
      EXPECT_NEAR(value.mean().item<double>(), 0.0, 0.02) << name;
    }
  }
  EXPECT_TRUE(any_different);
  // Distinct parameters get distinct draws, not one stream restarted per tensor.
  EXPECT_FALSE(torch::equal(pa["model.layers.0.mlp.gate_proj.weight"],
                            pa["model.layers.0.mlp.up_proj.weight"]));
  // The same seed gives the same values in bf16, up to rounding.
  TransformerModel d(make_config(j), torch::kBFloat16);
  d->init_weights(1234);
  auto pd = d->named_parameters();
  EXPECT_TRUE(torch::equal(pd["lm_head.weight"], pa["lm_head.weight"].to(torch::kBFloat16)));
}

TEST_F(TransformerTest, GradientsReachEveryParameter) {
  for (bool checkpointing : {false, true}) {
    for (const Arch& arch : all_archs()) {
      SCOPED_TRACE(arch.name + (checkpointing ? " checkpointed" : ""));
      TransformerModel model(make_config(arch.config));
      randomize(model, 23);
      model->set_activation_checkpointing(checkpointing);
      const int64_t vocab = arch.config["vocab_size"];
      Packed batch = pack({random_ids(8, vocab, 51), random_ids(5, vocab, 52)});
      torch::Tensor logits =
          model->logits(model->forward(batch.ids, batch.positions, batch.cu_seqlens));
      torch::Tensor targets = torch::roll(batch.ids, -1);
      torch::Tensor loss = torch::nll_loss(torch::log_softmax(logits, -1), targets);
      loss.backward();
      for (auto& item : model->named_parameters()) {
        ASSERT_TRUE(item.value().grad().defined()) << item.key();
        EXPECT_TRUE(torch::isfinite(item.value().grad()).all().item<bool>()) << item.key();
        EXPECT_GT(item.value().grad().abs().sum().item<double>(), 0.0) << item.key();
      }
    }
  }
}

TEST_F(TransformerTest, ActivationCheckpointingGivesTheSameGradients) {
  TransformerModel model(make_config(qwen3_json()));
  randomize(model, 29);
  Packed batch = pack({random_ids(8, 61, 61), random_ids(11, 61, 62)});
  std::map<std::string, torch::Tensor> plain;
  for (bool checkpointing : {false, true}) {
    model->zero_grad();
    model->set_activation_checkpointing(checkpointing);
    torch::Tensor logits =
        model->logits(model->forward(batch.ids, batch.positions, batch.cu_seqlens));
    logits.pow(2).mean().backward();
    for (auto& item : model->named_parameters()) {
      if (!checkpointing) {
        plain[item.key()] = item.value().grad().clone();
      } else {
        EXPECT_LT(max_diff(item.value().grad(), plain[item.key()]), 1e-6) << item.key();
      }
    }
  }
}

TEST_F(TransformerTest, RejectsMalformedInputs) {
  TransformerModel model(make_config(qwen3_json()));
  randomize(model, 1);
  torch::Tensor ids = torch::tensor(std::vector<int64_t>{1, 2, 3, 4}, torch::kLong);
  torch::Tensor positions = torch::arange(4, torch::kLong);
  auto cu = [](std::vector<int32_t> v) { return torch::tensor(v, torch::kInt); };
  EXPECT_NO_THROW(model->forward(ids, positions, cu({0, 2, 4})));
  EXPECT_THROW(model->forward(ids, positions, cu({0, 2, 3})), ooze::Error);     // not ending at T
  EXPECT_THROW(model->forward(ids, positions, cu({1, 2, 4})), ooze::Error);     // not starting at 0
  EXPECT_THROW(model->forward(ids, positions, cu({0, 3, 2, 4})), ooze::Error);  // decreasing
  EXPECT_THROW(model->forward(ids, positions, cu({4})), ooze::Error);
  EXPECT_THROW(model->forward(ids, positions, torch::tensor({0.0, 4.0})), ooze::Error);
  EXPECT_THROW(model->forward(ids, torch::arange(3, torch::kLong), cu({0, 4})), ooze::Error);
  EXPECT_THROW(model->forward(ids.view({2, 2}), positions, cu({0, 4})), ooze::Error);
  torch::Tensor out_of_vocab = torch::tensor(std::vector<int64_t>{1, 2, 61, 4}, torch::kLong);
  try {
    model->forward(out_of_vocab, positions, cu({0, 4}));
    FAIL() << "expected an error";
  } catch (const ooze::Error& e) {
    EXPECT_NE(std::string(e.what()).find("61"), std::string::npos) << e.what();
  }
}

}  // namespace transformer_test
