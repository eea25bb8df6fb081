// Generation through the paged KVCache must give, for every token of every step, the logits of
// running the whole sequence so far through the packed (cache-free) forward, however the
// sequences' blocks are laid out, shared, copied or reused, and however prompts are chunked.
#include "models/kv_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "models/model_config.h"
#include "models/transformer.h"
#include "tests/support/expect_error.h"

namespace kv_cache_test {

using ooze::models::CacheStep;
using ooze::models::KVCache;
using ooze::models::ModelConfig;
using ooze::models::TransformerModel;
using ooze::testing::error_message_of;
using json = nlohmann::json;

constexpr double kFp32Tolerance = 1e-5;

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

// Weights large enough that attention is far from uniform, so a wrong key changes the logits.
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

std::vector<int64_t> random_ids(int64_t length, int64_t vocab, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  torch::Tensor ids = torch::randint(vocab, {length}, gen, torch::kLong);
  return std::vector<int64_t>(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + length);
}

// Logits of every position of `ids`, [L, V], through the packed forward.
torch::Tensor full_forward_logits(TransformerModel& model, const std::vector<int64_t>& ids) {
  torch::NoGradGuard no_grad;
  const int64_t length = static_cast<int64_t>(ids.size());
  torch::Tensor hidden =
      model->forward(torch::tensor(ids, torch::kLong), torch::arange(length, torch::kLong),
                     torch::tensor(std::vector<int32_t>{0, static_cast<int32_t>(length)}));
  return model->logits(hidden);
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

// A sequence being generated: the tokens it holds (or is about to hold) and its blocks.
struct Sequence {
  std::vector<int64_t> ids;    // every token so far, including those of the running step
  std::vector<int64_t> table;  // its blocks, in token order
  int64_t held = 0;            // tokens already in the cache
};

// The caller's side of the paged cache: a free list of block ids, handed out in a shuffled
// order (tables neither contiguous nor sorted) or in order (tables that are runs of blocks, read
// without a copy), and steps that check every new token's logits against the full forward.
class Harness {
 public:
  Harness(TransformerModel model, KVCache& cache, uint64_t seed, bool shuffled = true)
      : model_(std::move(model)), cache_(cache) {
    free_.resize(cache.num_blocks());
    std::iota(free_.rbegin(), free_.rend(), 0);  // block 0 is handed out first
    if (shuffled) std::shuffle(free_.begin(), free_.end(), std::mt19937_64(seed));
  }

  // Gives `sequence` enough blocks to hold `tokens` tokens.
  void grow(Sequence& sequence, int64_t tokens) {
    while (static_cast<int64_t>(sequence.table.size()) * cache_.block_size() < tokens) {
      if (free_.empty()) throw std::runtime_error("test harness: out of blocks");
      sequence.table.push_back(free_.back());
      free_.pop_back();
    }
  }
  int64_t take_block() {
    int64_t block = free_.back();
    free_.pop_back();
    return block;
  }
  // Returns the sequence's blocks; the next ones handed out are these.
  void finish(Sequence& sequence) {
    for (auto it = sequence.table.rbegin(); it != sequence.table.rend(); ++it) free_.push_back(*it);
    sequence.table.clear();
  }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }

  // One step: each listed sequence appends its tokens. Returns the step's logits [T, V] and
  // checks each row against the full forward of its sequence (the largest difference is kept).
  torch::Tensor step(const std::vector<std::pair<Sequence*, std::vector<int64_t>>>& parts) {
    std::vector<std::vector<int64_t>> tables;
    std::vector<int64_t> past, counts, input;
    for (const auto& [sequence, tokens] : parts) {
      grow(*sequence, sequence->held + static_cast<int64_t>(tokens.size()));
      tables.push_back(sequence->table);
      past.push_back(sequence->held);
      counts.push_back(static_cast<int64_t>(tokens.size()));
      input.insert(input.end(), tokens.begin(), tokens.end());
    }
    const CacheStep plan = cache_.plan_step(tables, past, counts);
    torch::Tensor logits =
        model_->logits(model_->forward_cached(torch::tensor(input, torch::kLong), plan, cache_));
    int64_t row = 0;
    for (const auto& [sequence, tokens] : parts) {
      sequence->ids.insert(sequence->ids.end(), tokens.begin(), tokens.end());
      torch::Tensor expected = full_forward_logits(model_, sequence->ids);
      const int64_t count = static_cast<int64_t>(tokens.size());
      worst_ = std::max(worst_, max_diff(logits.narrow(0, row, count),
                                         expected.narrow(0, sequence->held, count)));
      sequence->held += count;
      row += count;
    }
    return logits;
  }

  // The largest difference to the full forward over every step so far.
  double worst() const { return worst_; }

 private:
  TransformerModel model_;
  KVCache& cache_;
  std::vector<int64_t> free_;
  double worst_ = 0.0;
};

class KVCacheTest : public ::testing::Test {
 protected:
  void SetUp() override { at::set_num_threads(1); }
};

// Prompts of different lengths (one a single token, which takes the decode path) are prefilled
// in one step, then decode together; sequences finish at different times, and the blocks a
// finished sequence frees go to a new prompt that is prefilled in the same steps as the others'
// decodes.
TEST_F(KVCacheTest, StaggeredDecodesOverShuffledBlocksMatchFullForward) {
  for (const std::string type : {"qwen3", "qwen2", "llama"}) {
    SCOPED_TRACE(type);
    ModelConfig config = tiny_config(type);
    TransformerModel model(config);
    randomize(model, 3);
    const int64_t vocab = config.vocab_size;
    KVCache cache(config, /*num_blocks=*/24, /*block_size=*/4, torch::kFloat);
    Harness harness(model, cache, /*seed=*/11);

    std::map<int, Sequence> running;
    std::map<int, int64_t> steps_left = {{0, 3}, {1, 9}, {2, 5}};
    const std::vector<int64_t> prompt_lengths = {7, 1, 11};
    std::vector<std::pair<Sequence*, std::vector<int64_t>>> prefill;
    for (int i = 0; i < 3; ++i)
      prefill.push_back({&running[i], random_ids(prompt_lengths[i], vocab, i)});
    harness.step(prefill);

    std::vector<int64_t> freed;
    bool reused = false;
    for (int step = 0; !running.empty(); ++step) {
      std::vector<std::pair<Sequence*, std::vector<int64_t>>> parts;
      for (auto& [id, sequence] : running) {
        if (sequence.held == 0) {  // a new prompt, in the same step as the others' decodes
          parts.push_back({&sequence, random_ids(6, vocab, 77)});
        } else {
          parts.push_back({&sequence, random_ids(1, vocab, 500 + step * 10 + id)});
        }
      }
      harness.step(parts);
      std::vector<int> finished;
      for (auto& [id, sequence] : running) {
        if (--steps_left[id] == 0) finished.push_back(id);
      }
      for (int id : finished) {
        if (!reused) freed = running[id].table;
        harness.finish(running[id]);
        running.erase(id);
        if (!reused) {
          reused = true;
          running[3] = Sequence();
          steps_left[3] = 4;
          harness.grow(running[3], 6);
          // The new sequence lives in blocks the finished one held.
          for (int64_t block : running[3].table) {
            EXPECT_NE(std::find(freed.begin(), freed.end(), block), freed.end());
          }
        }
      }
    }
    EXPECT_TRUE(reused);
    EXPECT_EQ(harness.free_blocks(), 24);
    EXPECT_LT(harness.worst(), kFp32Tolerance);
  }
}

// A prompt split over several steps (chunks crossing block boundaries, one a single token) while
// another sequence decodes in the same steps.
TEST_F(KVCacheTest, ChunkedPrefillMixedWithDecodesMatchesFullForward) {
  for (bool shuffled : {true, false}) {
    SCOPED_TRACE(shuffled ? "shuffled blocks" : "blocks in order");
    ModelConfig config = tiny_config("qwen3");
    TransformerModel model(config);
    randomize(model, 5);
    const int64_t vocab = config.vocab_size;
    KVCache cache(config, 16, 4, torch::kFloat);
    Harness harness(model, cache, 2, shuffled);
    Sequence chunked, decoding;
    std::vector<int64_t> prompt = random_ids(17, vocab, 9);
    harness.step({{&decoding, random_ids(5, vocab, 10)}});
    harness.grow(chunked, 21);  // every block it will need, up front (a table may be longer)
    harness.step({{&chunked, std::vector<int64_t>(prompt.begin(), prompt.begin() + 5)}});
    int64_t start = 5;
    int decode_step = 0;
    for (int64_t chunk : {1, 6, 3, 2}) {
      std::vector<int64_t> part(prompt.begin() + start, prompt.begin() + start + chunk);
      start += chunk;
      harness.step({{&decoding, random_ids(1, vocab, 20 + decode_step++)}, {&chunked, part}});
    }
    ASSERT_EQ(chunked.held, 17);
    if (!shuffled) {  // one run of blocks: attention reads them in place
      EXPECT_EQ(chunked.table, (std::vector<int64_t>{2, 3, 4, 5, 6, 7}));
    }
    for (int i = 0; i < 4; ++i) {
      harness.step(
          {{&chunked, random_ids(1, vocab, 40 + i)}, {&decoding, random_ids(1, vocab, 60 + i)}});
    }
    EXPECT_LT(harness.worst(), kFp32Tolerance);
  }
}

// One sequence alone, prompt then decodes across block boundaries: over blocks in order its
// decodes read the cache in place (no gather, no mask), over shuffled ones they take the batched
// path; both match the full forward.
TEST_F(KVCacheTest, ALoneDecodeMatchesFullForwardOverBlocksInOrderOrNot) {
  for (const std::string type : {"qwen3", "llama"}) {
    for (bool shuffled : {false, true}) {
      SCOPED_TRACE(type + (shuffled ? ", shuffled blocks" : ", blocks in order"));
      ModelConfig config = tiny_config(type);
      TransformerModel model(config);
      randomize(model, 8);
      KVCache cache(config, 8, 4, torch::kFloat);
      Harness harness(model, cache, 4, shuffled);
      Sequence alone;
      harness.step({{&alone, random_ids(6, config.vocab_size, 1)}});
      for (int i = 0; i < 9; ++i) harness.step({{&alone, random_ids(1, config.vocab_size, 2 + i)}});
      ASSERT_EQ(alone.held, 15);
      if (!shuffled) {
        EXPECT_EQ(alone.table, (std::vector<int64_t>{0, 1, 2, 3}));
      }
      EXPECT_LT(harness.worst(), kFp32Tolerance);
    }
  }
}

// A second sequence lists the first one's full blocks as its own prefix and plans only its
// remaining tokens: its logits are those of computing it alone, and both keep decoding.
TEST_F(KVCacheTest, SharedPrefixBlocksGiveTheLogitsOfComputingAlone) {
  ModelConfig config = tiny_config("qwen2");
  TransformerModel model(config);
  randomize(model, 8);
  const int64_t vocab = config.vocab_size;
  KVCache cache(config, 16, 4, torch::kFloat);
  Harness harness(model, cache, 4);
  Sequence first, second;
  harness.step({{&first, random_ids(10, vocab, 1)}});
  // 8 shared tokens: two full blocks. The third block of `first` is partly filled, not shared.
  second.ids.assign(first.ids.begin(), first.ids.begin() + 8);
  second.table.assign(first.table.begin(), first.table.begin() + 2);
  second.held = 8;
  const std::vector<int64_t> suffix = random_ids(5, vocab, 2);
  torch::Tensor shared_logits = harness.step({{&second, suffix}});

  // The same sequence alone, in a cache of its own.
  KVCache alone_cache(config, 8, 4, torch::kFloat);
  Harness alone(model, alone_cache, 5);
  Sequence solo;
  torch::Tensor solo_logits = alone.step({{&solo, second.ids}});
  EXPECT_LT(max_diff(shared_logits, solo_logits.narrow(0, 8, 5)), kFp32Tolerance);

  for (int i = 0; i < 5; ++i) {
    harness.step({{&first, random_ids(1, vocab, 30 + i)}, {&second, random_ids(1, vocab, 50 + i)}});
  }
  EXPECT_LT(harness.worst(), kFp32Tolerance);
  EXPECT_LT(alone.worst(), kFp32Tolerance);
}

// Forking a sequence whose last block is partly filled: the child shares the full blocks and
// gets a copy of the partial one; both then continue with different tokens.
TEST_F(KVCacheTest, CopyBlockLetsAForkDiverge) {
  ModelConfig config = tiny_config("llama");
  TransformerModel model(config);
  randomize(model, 9);
  const int64_t vocab = config.vocab_size;
  KVCache cache(config, 16, 4, torch::kFloat);
  Harness harness(model, cache, 6);
  Sequence parent;
  harness.step({{&parent, random_ids(10, vocab, 3)}});  // blocks: 4 + 4 + 2 tokens
  Sequence child = parent;
  child.table.back() = harness.take_block();
  cache.copy_block(parent.table.back(), child.table.back());
  for (int64_t layer = 0; layer < cache.num_layers(); ++layer) {
    EXPECT_TRUE(torch::equal(cache.keys(layer)[child.table.back()],
                             cache.keys(layer)[parent.table.back()]));
    EXPECT_TRUE(torch::equal(cache.values(layer)[child.table.back()],
                             cache.values(layer)[parent.table.back()]));
  }
  // Without the copy, both would write offset 2 of the same block in one step.
  std::vector<int64_t> shared_table = parent.table;
  EXPECT_CONTAINS(error_message_of<ooze::Error>([&] {
                    cache.plan_step({parent.table, shared_table}, {10, 10}, {1, 1});
                  }),
                  "copy_block");
  for (int i = 0; i < 6; ++i) {
    harness.step(
        {{&parent, random_ids(1, vocab, 100 + i)}, {&child, random_ids(1, vocab, 200 + i)}});
  }
  EXPECT_NE(parent.ids, child.ids);
  EXPECT_LT(harness.worst(), kFp32Tolerance);
}

TEST_F(KVCacheTest, Bfloat16IsCloseToFloat32FullForward) {
  ModelConfig config = tiny_config("qwen3");
  TransformerModel fp32(config);
  randomize(fp32, 7);
  TransformerModel bf16(config, torch::kBFloat16);
  {
    torch::NoGradGuard no_grad;
    auto source = fp32->named_parameters();
    for (auto& item : bf16->named_parameters()) item.value().copy_(source[item.key()]);
  }
  KVCache cache(config, 8, 4, torch::kBFloat16);
  std::vector<int64_t> ids = random_ids(9, config.vocab_size, 4);
  const std::vector<int64_t> table = {5, 2, 7};
  bf16->forward_cached(torch::tensor(std::vector<int64_t>(ids.begin(), ids.begin() + 6)),
                       cache.plan_step({table}, {0}, {6}), cache);
  bf16->forward_cached(torch::tensor(std::vector<int64_t>(ids.begin() + 6, ids.begin() + 8)),
                       cache.plan_step({table}, {6}, {2}), cache);
  torch::Tensor logits = bf16->logits(bf16->forward_cached(
      torch::tensor(std::vector<int64_t>{ids[8]}), cache.plan_step({table}, {8}, {1}), cache));
  EXPECT_EQ(logits.scalar_type(), torch::kBFloat16);
  torch::Tensor expected = full_forward_logits(fp32, ids)[8];
  const double scale = expected.abs().max().item<double>();
  EXPECT_LT(max_diff(logits[0], expected), 0.1 * scale);
  EXPECT_GT(max_diff(logits[0], expected), 0.0);  // bf16 really ran
}

// plan_step's resolution, computed by hand: slots through the tables, positions, decodes.
TEST_F(KVCacheTest, PlanStepResolvesSlotsPositionsAndDecodes) {
  ModelConfig config = tiny_config("qwen3");
  KVCache cache(config, 10, 4, torch::kFloat);
  // Sequence 0: a decode at position 5 (block 9, offset 1). Sequence 1: prompt chunk of 3 at
  // positions 2..4 (blocks 3, 3, 0). Sequence 2: a decode at position 0 (block 6).
  CacheStep step = cache.plan_step({{1, 9, 4}, {3, 0}, {6}}, {5, 2, 0}, {1, 3, 1});
  EXPECT_EQ(step.offsets, (std::vector<int64_t>{0, 1, 4, 5}));
  EXPECT_EQ(step.past_lengths, (std::vector<int64_t>{5, 2, 0}));
  EXPECT_TRUE(torch::equal(step.slot_mapping, torch::tensor({37, 14, 15, 0, 24}, torch::kLong)));
  EXPECT_TRUE(torch::equal(step.position_ids, torch::tensor({5, 2, 3, 4, 0}, torch::kLong)));
  EXPECT_EQ(step.decode_sequences, (std::vector<int64_t>{0, 2}));
  // Only the blocks a decode reads: 2 for sequence 0 (6 tokens), 1 for sequence 2, padded.
  EXPECT_TRUE(torch::equal(step.decode_block_table,
                           torch::tensor({1, 9, 6, 0}, torch::kLong).view({2, 2})));
  EXPECT_TRUE(torch::equal(step.decode_lengths, torch::tensor({6, 1}, torch::kLong)));
  EXPECT_EQ(cache.bytes_per_block(), 2 * 2 * 4 * 2 * 16 * 4);
  EXPECT_EQ(cache.keys(1).sizes(), (std::vector<int64_t>{10, 4, 2, 16}));
}

TEST_F(KVCacheTest, PlanStepErrorsNameTheSequence) {
  ModelConfig config = tiny_config("qwen3");
  KVCache cache(config, 6, 4, torch::kFloat);
  using Tables = std::vector<std::vector<int64_t>>;
  auto plan_error = [&](Tables tables, std::vector<int64_t> past, std::vector<int64_t> count) {
    return error_message_of<ooze::Error>([&] { cache.plan_step(tables, past, count); });
  };
  // 5 + 4 = 9 tokens need 3 blocks of 4.
  std::string message = plan_error({{0}, {1, 2}}, {0, 5}, {1, 4});
  EXPECT_CONTAINS(message, "sequence 1");
  EXPECT_CONTAINS(message, "3 blocks");
  message = plan_error({{0}, {1, 6}}, {0, 0}, {1, 5});
  EXPECT_CONTAINS(message, "sequence 1");
  EXPECT_CONTAINS(message, "block 6");
  EXPECT_CONTAINS(plan_error({{0}, {-1}}, {0, 0}, {1, 1}), "block -1");
  message = plan_error({{0}, {1}}, {0, 0}, {2, 0});
  EXPECT_CONTAINS(message, "sequence 1");
  EXPECT_CONTAINS(message, "at least one");
  EXPECT_CONTAINS(plan_error({{0}}, {-1}, {1}), "sequence 0");
  EXPECT_CONTAINS(plan_error({{0}, {1}}, {0}, {1, 1}), "one of each per sequence");
  EXPECT_CONTAINS(plan_error({}, {}, {}), "no sequences");
  EXPECT_CONTAINS(error_message_of<ooze::Error>([&] { cache.copy_block(0, 6); }), "block 6");
  EXPECT_THROW(KVCache(config, 0, 4, torch::kFloat), ooze::Error);
  EXPECT_THROW(KVCache(config, 4, 0, torch::kFloat), ooze::Error);
}

TEST_F(KVCacheTest, ForwardRefusesAMismatchedCacheOrInput) {
  ModelConfig config = tiny_config("qwen2");
  TransformerModel model(config);
  randomize(model, 1);
  KVCache bf16_cache(config, 4, 4, torch::kBFloat16);
  CacheStep step = bf16_cache.plan_step({{0}}, {0}, {2});
  EXPECT_CONTAINS(error_message_of<ooze::Error>([&] {
                    model->forward_cached(torch::tensor({1, 2}, torch::kLong), step, bf16_cache);
                  }),
                  "does not match the model");
  ModelConfig deeper = config;
  deeper.num_hidden_layers = 3;
  KVCache deep_cache(deeper, 4, 4, torch::kFloat);
  EXPECT_THROW(model->forward_cached(torch::tensor({1, 2}, torch::kLong), step, deep_cache),
               ooze::Error);
  KVCache cache(config, 4, 4, torch::kFloat);
  EXPECT_CONTAINS(error_message_of<ooze::Error>([&] {
                    model->forward_cached(torch::tensor({1, 2, 3}, torch::kLong), step, cache);
                  }),
                  "3 tokens");
  EXPECT_CONTAINS(error_message_of<ooze::Error>([&] {
                    model->forward_cached(torch::tensor({1, 59}, torch::kLong), step, cache);
                  }),
                  "vocabulary");
}

// A sleeping engine releases the cache's memory; using it then is an error, and after
// reacquiring, the (zeroed) cache serves new sequences exactly again.
TEST_F(KVCacheTest, ReleasedMemoryIsRefusedUntilReacquired) {
  ModelConfig config = tiny_config("qwen3");
  TransformerModel model(config);
  randomize(model, 2);
  KVCache cache(config, 8, 4, torch::kFloat);
  Harness harness(model, cache, 3);
  Sequence before;
  harness.step({{&before, random_ids(6, config.vocab_size, 1)}});
  EXPECT_TRUE(cache.has_memory());

  cache.release_memory();
  EXPECT_FALSE(cache.has_memory());
  CacheStep step = cache.plan_step({{0, 1}}, {0}, {5});  // planning needs no storage
  EXPECT_CONTAINS(
      error_message_of<ooze::Error>([&] {
        model->forward_cached(torch::tensor({1, 2, 3, 4, 5}, torch::kLong), step, cache);
      }),
      "released");
  EXPECT_CONTAINS(error_message_of<ooze::Error>([&] { cache.copy_block(0, 1); }), "released");
  EXPECT_CONTAINS(error_message_of<ooze::Error>([&] { cache.keys(0); }), "released");

  cache.reacquire_memory();
  ASSERT_TRUE(cache.has_memory());
  for (int64_t layer = 0; layer < cache.num_layers(); ++layer) {
    EXPECT_EQ(cache.keys(layer).sizes(), (std::vector<int64_t>{8, 4, 2, 16}));
    EXPECT_EQ(cache.keys(layer).abs().max().item<float>(), 0.0f);
    EXPECT_EQ(cache.values(layer).abs().max().item<float>(), 0.0f);
  }
  harness.finish(before);
  Sequence after;
  harness.step({{&after, random_ids(7, config.vocab_size, 2)}});
  harness.step({{&after, random_ids(1, config.vocab_size, 3)}});
  EXPECT_LT(harness.worst(), kFp32Tolerance);
}

}  // namespace kv_cache_test
