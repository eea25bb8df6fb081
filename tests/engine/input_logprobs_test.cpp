// Prompt log-probs (GenerateRequest::logprob_start_len) against an independent computation: the
// training path's packed forward over the same tokens (TransformerModel::forward + logits, no
// KV cache), log-softmax in fp64. And against the engine's own output log-probs: a greedy
// continuation scored as a prompt gets the log-probs it was sampled with.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cereal/archives/binary.hpp>
#include <sstream>

#include "engine/engine.h"
#include "engine/request_serialization.h"
#include "models/hf_checkpoint.h"
#include "models/model_config.h"
#include "models/transformer.h"
#include "tests/engine/tiny_engine_test.h"
#include "tests/support/tiny_model.h"

namespace ooze::engine {
namespace input_logprobs_test {

using testing::prompt;

class InputLogprobsTest : public testing::TinyEngineTest {
 protected:
  static EngineOptions options() {
    EngineOptions o;
    o.model_dir = *dir_;
    o.kv_cache_blocks = 256;
    o.block_size = 4;
    o.max_running_requests = 16;
    o.chunked_prefill_size = 32;
    o.seed = 1;
    return o;
  }

  // log p(ids[p] | ids[:p]) for every p >= 1 (index p - 1), from one packed forward in fp64.
  static torch::Tensor reference_log_probs(const std::vector<int64_t>& ids) {
    torch::NoGradGuard no_grad;
    const int64_t n = static_cast<int64_t>(ids.size());
    const torch::Tensor hidden =
        (*reference_)
            ->forward(torch::tensor(ids, torch::kLong), torch::arange(n, torch::kLong),
                      torch::tensor(std::vector<int32_t>{0, static_cast<int32_t>(n)}, torch::kInt));
    return (*reference_)->logits(hidden).to(torch::kDouble).log_softmax(1);  // [n, V]
  }

  static GenerateRequest scoring(std::vector<int64_t> ids, int64_t start) {
    GenerateRequest r;
    r.input_ids = std::move(ids);
    r.sampling.temperature = 0.0;
    r.sampling.max_new_tokens = 0;
    r.return_logprob = true;
    r.logprob_start_len = start;
    return r;
  }

  // The engine's input log-probs equal the reference's from max(start, 1) on.
  static void expect_reference(const GenerateOutput& out, const std::vector<int64_t>& ids,
                               int64_t start) {
    const torch::Tensor reference = reference_log_probs(ids);
    const int64_t first = std::max<int64_t>(start, 1);
    const int64_t length = static_cast<int64_t>(ids.size());
    ASSERT_EQ(static_cast<int64_t>(out.input_logprobs.size()), length - first);
    for (int64_t p = first; p < length; ++p) {
      const double expected = reference[p - 1][ids[p]].item<double>();
      EXPECT_NEAR(out.input_logprobs[p - first], expected, 1e-5) << "prompt position " << p;
    }
  }
};

TEST_F(InputLogprobsTest, ScoringAPromptMatchesThePackedForward) {
  Engine engine(options());
  const std::vector<int64_t> ids = prompt(20, 1);
  const GenerateOutput out = engine.generate(scoring(ids, 0))[0];
  expect_reference(out, ids, 0);
  // max_new_tokens 0: the prompt only, finished for length, no token.
  EXPECT_TRUE(out.finished);
  EXPECT_EQ(out.finish_reason, FinishReason::kLength);
  EXPECT_TRUE(out.output_ids.empty());
  EXPECT_TRUE(out.output_logprobs.empty());
  EXPECT_EQ(out.prompt_tokens, 20);
  EXPECT_EQ(out.weight_versions, std::vector<int64_t>{0});
  EXPECT_EQ(engine.stats().generated_tokens, 0);

  // A start inside the prompt, and the last position (its own log-prob only).
  expect_reference(engine.generate(scoring(ids, 7))[0], ids, 7);
  expect_reference(engine.generate(scoring(ids, 19))[0], ids, 19);
  // A one-token prompt has nothing to score.
  EXPECT_TRUE(engine.generate(scoring({65}, 0))[0].input_logprobs.empty());
}

TEST_F(InputLogprobsTest, AChunkedPromptIsScoredAcrossItsChunks) {
  Engine engine(options());  // chunks of 32 prompt tokens
  const std::vector<int64_t> ids = prompt(100, 2);
  expect_reference(engine.generate(scoring(ids, 0))[0], ids, 0);
  expect_reference(engine.generate(scoring(ids, 45))[0], ids, 45);
  // Alongside another request's prefill, sharing the step's budget.
  GenerateRequest other = scoring(prompt(50, 3), 10);
  other.sampling.max_new_tokens = 4;
  std::promise<GenerateOutput> other_done;
  engine.submit(other, [&](const GenerateOutput& out) {
    if (out.finished) other_done.set_value(out);
  });
  expect_reference(engine.generate(scoring(ids, 3))[0], ids, 3);
  expect_reference(other_done.get_future().get(), other.input_ids, 10);
}

TEST_F(InputLogprobsTest, GreedyOutputScoredAsAPromptGetsItsOwnLogprobs) {
  Engine engine(options());
  const std::vector<int64_t> ids = prompt(12, 4);
  GenerateRequest greedy;
  greedy.input_ids = ids;
  greedy.sampling.temperature = 0.0;
  greedy.sampling.max_new_tokens = 6;
  greedy.sampling.ignore_eos = true;
  greedy.return_logprob = true;
  const GenerateOutput generated = engine.generate(greedy)[0];
  ASSERT_EQ(generated.output_ids.size(), 6u);

  std::vector<int64_t> whole = ids;
  whole.insert(whole.end(), generated.output_ids.begin(), generated.output_ids.end());
  engine.flush_cache();
  const GenerateOutput scored =
      engine.generate(scoring(whole, static_cast<int64_t>(ids.size())))[0];
  ASSERT_EQ(scored.input_logprobs.size(), 6u);
  for (size_t k = 0; k < 6; ++k) {
    EXPECT_NEAR(scored.input_logprobs[k], generated.output_logprobs[k], 1e-5) << "token " << k;
  }
}

TEST_F(InputLogprobsTest, ACachedPrefixIsRecomputedWhereItIsScored) {
  Engine engine(options());  // blocks of 4 tokens
  const std::vector<int64_t> shared = prompt(40, 5);
  GenerateRequest warm;
  warm.input_ids = shared;
  warm.sampling.max_new_tokens = 1;
  engine.generate(warm);  // caches the prompt's full blocks

  std::vector<int64_t> ids = shared;
  for (int64_t id : prompt(6, 6)) ids.push_back(id);
  // Scoring from 0: nothing cached may be used.
  const GenerateOutput all = engine.generate(scoring(ids, 0))[0];
  EXPECT_EQ(all.cached_tokens, 0);
  expect_reference(all, ids, 0);
  // Scoring from 30: position 29 scores token 30, so the blocks before it (28 tokens) are reused.
  const GenerateOutput tail = engine.generate(scoring(ids, 30))[0];
  EXPECT_EQ(tail.cached_tokens, 28);
  expect_reference(tail, ids, 30);
  // Blocks computed for scoring are cached as any others: without logprob_start_len the whole
  // prompt but its last block comes from the cache (11 blocks of the 46 tokens).
  GenerateRequest plain = warm;
  plain.input_ids = ids;
  EXPECT_EQ(engine.generate(plain)[0].cached_tokens, 44);
}

TEST_F(InputLogprobsTest, SamplesOfOnePromptShareItsLogprobsAndTopLogprobs) {
  Engine engine(options());
  const std::vector<int64_t> ids = prompt(15, 7);
  GenerateRequest r = scoring(ids, 0);
  r.sampling.temperature = 0.8;  // input log-probs stay at temperature 1
  r.sampling.max_new_tokens = 3;
  r.sampling.ignore_eos = true;
  r.sampling.n = 2;
  r.top_logprobs_num = 3;
  const std::vector<GenerateOutput> outs = engine.generate(r);
  ASSERT_EQ(outs.size(), 2u);
  const torch::Tensor reference = reference_log_probs(ids);
  for (const GenerateOutput& out : outs) {
    expect_reference(out, ids, 0);
    EXPECT_EQ(out.input_logprobs, outs[0].input_logprobs);
    EXPECT_EQ(out.output_ids.size(), 3u);
    ASSERT_EQ(out.input_top_logprobs.size(), ids.size() - 1);
    for (size_t j = 0; j < out.input_top_logprobs.size(); ++j) {
      const std::vector<TopLogProb>& top = out.input_top_logprobs[j];
      ASSERT_EQ(top.size(), 3u);
      const auto best = reference[static_cast<int64_t>(j)].topk(3);
      for (size_t k = 0; k < 3; ++k) {
        EXPECT_EQ(top[k].token_id, std::get<1>(best)[static_cast<int64_t>(k)].item<int64_t>());
        EXPECT_NEAR(top[k].logprob, std::get<0>(best)[static_cast<int64_t>(k)].item<double>(),
                    1e-5);
      }
    }
  }
}

TEST_F(InputLogprobsTest, MaxNewTokensZeroWithoutLogprobsFinishesAfterThePrompt) {
  Engine engine(options());
  GenerateRequest r;
  r.input_ids = prompt(9, 8);
  r.sampling.max_new_tokens = 0;
  r.sampling.n = 2;
  const std::vector<GenerateOutput> outs = engine.generate(r);
  ASSERT_EQ(outs.size(), 2u);
  for (const GenerateOutput& out : outs) {
    EXPECT_EQ(out.finish_reason, FinishReason::kLength);
    EXPECT_TRUE(out.output_ids.empty());
    EXPECT_TRUE(out.text.empty());
    EXPECT_TRUE(out.input_logprobs.empty());
  }
  EXPECT_EQ(engine.stats().free_blocks, engine.stats().total_blocks);
}

TEST_F(InputLogprobsTest, AStartOutsideThePromptIsRefusedNamingTheField) {
  Engine engine(options());
  for (int64_t start : {int64_t{5}, int64_t{6}, int64_t{-2}}) {
    try {
      engine.submit(scoring(prompt(5, 9), start), nullptr);
      ADD_FAILURE() << "logprob_start_len " << start << " was accepted";
    } catch (const InvalidRequest& e) {
      EXPECT_EQ(e.field(), "logprob_start_len");
    }
  }
}

TEST_F(InputLogprobsTest, TheNewFieldsSurviveSerialization) {
  GenerateRequest request = scoring({1, 2, 3}, 1);
  GenerateOutput output;
  output.input_logprobs = {-0.5f, -1.5f};
  output.input_top_logprobs = {{{7, -0.25f}}, {{8, -0.75f}}};
  std::stringstream bytes;
  {
    cereal::BinaryOutputArchive archive(bytes);
    archive(request, output);
  }
  GenerateRequest request_back;
  GenerateOutput output_back;
  {
    cereal::BinaryInputArchive archive(bytes);
    archive(request_back, output_back);
  }
  EXPECT_EQ(request_back.logprob_start_len, 1);
  EXPECT_EQ(output_back.input_logprobs, output.input_logprobs);
  ASSERT_EQ(output_back.input_top_logprobs.size(), 2u);
  EXPECT_EQ(output_back.input_top_logprobs[1][0].token_id, 8);
  EXPECT_EQ(output_back.input_top_logprobs[1][0].logprob, -0.75f);
}

}  // namespace input_logprobs_test
}  // namespace ooze::engine
