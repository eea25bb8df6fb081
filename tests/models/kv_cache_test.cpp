// Incremental decoding with a KVCache must give, at every step, the logits of running the
// whole sequence so far through the packed forward.
#include "models/kv_cache.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/model_config.h"
#include "models/transformer.h"

namespace {

using ooze::models::KVCache;
using ooze::models::ModelConfig;
using ooze::models::TransformerModel;
using json = nlohmann::json;

ModelConfig tiny_config(const std::string& type) {
  json j = {{"model_type", type},       {"vocab_size", 59},       {"hidden_size", 32},
            {"intermediate_size", 48},  {"num_hidden_layers", 2}, {"num_attention_heads", 4},
            {"num_key_value_heads", 2}, {"rope_theta", 10000.0},  {"torch_dtype", "float32"}};
  if (type == "qwen3") j["head_dim"] = 16;
  if (type == "llama") {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 4.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 16}};
  }
  return ModelConfig::from_json(j, "kv_cache_test config.json");
}

void randomize(TransformerModel& model, uint64_t seed) {
  torch::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(seed);
  for (auto& item : model->named_parameters()) {
    torch::Tensor p = item.value();
    if (p.dim() == 1) {
      p.copy_(1.0 + 0.2 * torch::randn(p.sizes(), gen, torch::kFloat));
    } else {
      double scale =
          item.key().find("embed") != std::string::npos ? 1.0 : 1.0 / std::sqrt(p.size(1));
      p.copy_(scale * torch::randn(p.sizes(), gen, torch::kFloat));
    }
  }
}

int64_t random_token(int64_t vocab, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  return torch::randint(vocab, {1}, gen, torch::kLong).item<int64_t>();
}

std::vector<int64_t> random_ids(int64_t length, int64_t vocab, uint64_t seed) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < length; ++i) ids.push_back(random_token(vocab, seed * 1000 + i));
  return ids;
}

// Next-token logits of the full sequence, through the packed (cache-free) forward.
torch::Tensor full_forward_last_logits(TransformerModel& model, const std::vector<int64_t>& ids) {
  torch::NoGradGuard no_grad;
  const int64_t length = static_cast<int64_t>(ids.size());
  torch::Tensor hidden =
      model->forward(torch::tensor(ids, torch::kLong), torch::arange(length, torch::kLong),
                     torch::tensor(std::vector<int32_t>{0, static_cast<int32_t>(length)}));
  return model->logits(hidden[length - 1]);
}

torch::Tensor slots_tensor(const std::vector<int64_t>& slots) {
  return torch::tensor(slots, torch::kLong);
}

torch::Tensor cu_seqlens_of(const std::vector<std::vector<int64_t>>& sequences) {
  std::vector<int32_t> cu = {0};
  for (const auto& s : sequences) cu.push_back(cu.back() + static_cast<int32_t>(s.size()));
  return torch::tensor(cu, torch::kInt);
}

torch::Tensor concat(const std::vector<std::vector<int64_t>>& sequences) {
  std::vector<int64_t> all;
  for (const auto& s : sequences) all.insert(all.end(), s.begin(), s.end());
  return torch::tensor(all, torch::kLong);
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

class KVCacheTest : public ::testing::Test {
 protected:
  void SetUp() override { at::set_num_threads(1); }
};

// Several sequences of different prompt lengths decode together; they stop at different times,
// a freed slot is reused by a new sequence that is prefilled while the others keep decoding.
// Steps read the cache both as a run of slots (0, 1, 2) and as a gather (1, 2, 0).
TEST_F(KVCacheTest, DecodeMatchesFullForwardWithStaggeredFinishesAndSlotReuse) {
  for (const std::string type : {"qwen3", "qwen2", "llama"}) {
    SCOPED_TRACE(type);
    ModelConfig config = tiny_config(type);
    TransformerModel model(config);
    randomize(model, 3);
    const int64_t vocab = config.vocab_size;
    KVCache cache(config, /*max_sequences=*/3, /*max_length=*/40, torch::kFloat);

    struct Running {
      std::vector<int64_t> ids;
      int64_t slot;
      int64_t steps_left;
    };
    std::map<int, Running> running;  // sequence id -> state
    std::vector<std::vector<int64_t>> prompts = {random_ids(7, vocab, 1), random_ids(2, vocab, 2),
                                                 random_ids(11, vocab, 3)};
    std::vector<int64_t> budgets = {3, 9, 5};
    std::vector<int64_t> slots;
    for (int i = 0; i < 3; ++i) {
      slots.push_back(cache.allocate());
      running[i] = {prompts[i], slots.back(), budgets[i]};
    }
    torch::Tensor prefill_logits =
        model->forward_prefill(concat(prompts), cu_seqlens_of(prompts), slots_tensor(slots), cache);
    ASSERT_EQ(prefill_logits.sizes(), (std::vector<int64_t>{3, vocab}));
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(cache.length(slots[i]), static_cast<int64_t>(prompts[i].size()));
      EXPECT_LT(max_diff(prefill_logits[i], full_forward_last_logits(model, prompts[i])), 1e-5);
    }

    int next_sequence = 3;
    bool reused = false;
    for (int step = 0; !running.empty(); ++step) {
      std::vector<int64_t> tokens, step_slots;
      std::vector<int> order;
      for (auto& [id, state] : running) {
        int64_t token = random_token(vocab, 500 + step * 10 + id);
        state.ids.push_back(token);
        tokens.push_back(token);
        step_slots.push_back(state.slot);
        order.push_back(id);
      }
      torch::Tensor logits =
          model->forward_decode(slots_tensor(tokens), slots_tensor(step_slots), cache);
      ASSERT_EQ(logits.size(0), static_cast<int64_t>(order.size()));
      for (size_t b = 0; b < order.size(); ++b) {
        Running& state = running[order[b]];
        EXPECT_EQ(cache.length(state.slot), static_cast<int64_t>(state.ids.size()));
        EXPECT_LT(max_diff(logits[b], full_forward_last_logits(model, state.ids)), 1e-5)
            << "sequence " << order[b] << " step " << step;
      }
      // Finish sequences whose budget ran out; the first freed slot takes a new prompt.
      for (int id : order) {
        if (--running[id].steps_left > 0) continue;
        int64_t slot = running[id].slot;
        cache.release(slot);
        running.erase(id);
        if (!reused) {
          reused = true;
          int64_t new_slot = cache.allocate();
          EXPECT_EQ(new_slot, slot);  // the lowest free slot
          std::vector<int64_t> prompt = random_ids(4, vocab, 77);
          torch::Tensor first =
              model->forward_prefill(torch::tensor(prompt, torch::kLong), cu_seqlens_of({prompt}),
                                     slots_tensor({new_slot}), cache);
          EXPECT_EQ(cache.length(new_slot), 4);
          EXPECT_LT(max_diff(first[0], full_forward_last_logits(model, prompt)), 1e-5);
          running[next_sequence++] = {prompt, new_slot, 4};
        }
      }
    }
    EXPECT_TRUE(reused);
    EXPECT_EQ(cache.num_free_slots(), 3);
  }
}

TEST_F(KVCacheTest, PrefillCanContinueASlot) {
  ModelConfig config = tiny_config("qwen3");
  TransformerModel model(config);
  randomize(model, 5);
  KVCache cache(config, 2, 32, torch::kFloat);
  std::vector<int64_t> ids = random_ids(13, config.vocab_size, 9);
  int64_t slot = cache.allocate();
  std::vector<int64_t> first(ids.begin(), ids.begin() + 5), second(ids.begin() + 5, ids.end());
  model->forward_prefill(torch::tensor(first, torch::kLong), cu_seqlens_of({first}),
                         slots_tensor({slot}), cache);
  torch::Tensor logits = model->forward_prefill(
      torch::tensor(second, torch::kLong), cu_seqlens_of({second}), slots_tensor({slot}), cache);
  EXPECT_EQ(cache.length(slot), 13);
  EXPECT_LT(max_diff(logits[0], full_forward_last_logits(model, ids)), 1e-5);
}

TEST_F(KVCacheTest, Bfloat16DecodeIsCloseToFloat32FullForward) {
  ModelConfig config = tiny_config("qwen3");
  TransformerModel fp32(config);
  randomize(fp32, 7);
  TransformerModel bf16(config, torch::kBFloat16);
  {
    torch::NoGradGuard no_grad;
    auto source = fp32->named_parameters();
    for (auto& item : bf16->named_parameters()) item.value().copy_(source[item.key()]);
  }
  KVCache cache(config, 1, 16, torch::kBFloat16);
  std::vector<int64_t> ids = random_ids(6, config.vocab_size, 4);
  int64_t slot = cache.allocate();
  bf16->forward_prefill(torch::tensor(ids, torch::kLong), cu_seqlens_of({ids}),
                        slots_tensor({slot}), cache);
  ids.push_back(3);
  torch::Tensor logits = bf16->forward_decode(slots_tensor({3}), slots_tensor({slot}), cache);
  EXPECT_EQ(logits.scalar_type(), torch::kBFloat16);
  torch::Tensor expected = full_forward_last_logits(fp32, ids);
  EXPECT_LT(max_diff(logits[0], expected), 0.1 * expected.abs().max().item<double>());
}

TEST_F(KVCacheTest, SlotBookkeepingAndErrors) {
  ModelConfig config = tiny_config("qwen2");
  TransformerModel model(config);
  randomize(model, 1);
  KVCache cache(config, 2, 6, torch::kFloat);
  EXPECT_EQ(cache.num_free_slots(), 2);
  int64_t a = cache.allocate(), b = cache.allocate();
  EXPECT_EQ(a, 0);
  EXPECT_EQ(b, 1);
  EXPECT_THROW(cache.allocate(), ooze::Error);  // full
  std::vector<int64_t> prompt = {1, 2, 3, 4, 5};
  model->forward_prefill(torch::tensor(prompt, torch::kLong), cu_seqlens_of({prompt}),
                         slots_tensor({a}), cache);
  model->forward_decode(slots_tensor({6}), slots_tensor({a}), cache);  // length 6 = max
  try {
    model->forward_decode(slots_tensor({6}), slots_tensor({a}), cache);
    FAIL() << "expected an error";
  } catch (const ooze::Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_length"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cache.length(a), 6);  // a failed step changes nothing
  // Duplicate slots, wrong counts, an unallocated slot.
  EXPECT_THROW(model->forward_decode(slots_tensor({1, 2}), slots_tensor({b, b}), cache),
               ooze::Error);
  EXPECT_THROW(model->forward_decode(slots_tensor({1, 2}), slots_tensor({b}), cache), ooze::Error);
  cache.release(b);
  EXPECT_THROW(model->forward_decode(slots_tensor({1}), slots_tensor({b}), cache), ooze::Error);
  EXPECT_THROW(cache.release(b), ooze::Error);
  EXPECT_THROW(cache.release(7), ooze::Error);
  // A cache of another dtype is refused.
  KVCache bf16_cache(config, 1, 4, torch::kBFloat16);
  int64_t c = bf16_cache.allocate();
  EXPECT_THROW(model->forward_decode(slots_tensor({1}), slots_tensor({c}), bf16_cache),
               ooze::Error);
  cache.reset();
  EXPECT_EQ(cache.num_free_slots(), 2);
}

}  // namespace
