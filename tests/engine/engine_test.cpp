// The rollout engine against independent computations: a model loaded separately from the same
// directory and run without any cache (full forward + argmax, models/log_probs.h for
// log-probs), and block counts derived from the prompt lengths.
#include "engine/engine.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <thread>

#include "models/hf_checkpoint.h"
#include "models/log_probs.h"
#include "models/model_config.h"
#include "models/tokenizer.h"
#include "models/transformer.h"
#include "models/unicode_utils.h"
#include "tests/engine/tiny_engine_test.h"
#include "tests/support/expect_error.h"
#include "tests/support/tiny_model.h"

namespace ooze::engine {
namespace engine_test {

using testing::prompt;

using namespace std::chrono_literals;

// A streamed request in flight: `streamed` counts the tokens it has produced, `done` receives
// its finished output.
struct StreamedRequest {
  std::atomic<int64_t> streamed{0};
  std::promise<GenerateOutput> done;
};

// Submits `request` with streaming on and returns once it has produced `tokens` tokens.
std::unique_ptr<StreamedRequest> start_streaming(Engine& engine, GenerateRequest request,
                                                 int64_t tokens) {
  auto flight = std::make_unique<StreamedRequest>();
  request.stream = true;
  StreamedRequest* target = flight.get();
  engine.submit(std::move(request), [target](const GenerateOutput& out) {
    target->streamed = static_cast<int64_t>(out.output_ids.size());
    if (out.finished) target->done.set_value(out);
  });
  while (flight->streamed < tokens) std::this_thread::sleep_for(std::chrono::microseconds(100));
  return flight;
}

class EngineTest : public testing::TinyEngineTest {
 protected:
  static EngineOptions options(int64_t blocks = 256, int64_t block_size = 4) {
    EngineOptions o;
    o.model_dir = *dir_;
    o.kv_cache_blocks = blocks;
    o.block_size = block_size;
    o.max_running_requests = 16;
    o.chunked_prefill_size = 32;
    o.seed = 1;
    return o;
  }

  // The next `steps` greedy tokens by running the whole sequence through the model each time.
  static std::vector<int64_t> greedy_reference(std::vector<int64_t> ids, int64_t steps) {
    torch::NoGradGuard no_grad;
    std::vector<int64_t> out;
    for (int64_t k = 0; k < steps; ++k) {
      const int64_t n = static_cast<int64_t>(ids.size());
      torch::Tensor hidden =
          (*reference_)
              ->forward(
                  torch::tensor(ids, torch::kLong), torch::arange(n, torch::kLong),
                  torch::tensor(std::vector<int32_t>{0, static_cast<int32_t>(n)}, torch::kInt));
      const int64_t next = (*reference_)->logits(hidden[n - 1]).argmax().item<int64_t>();
      out.push_back(next);
      ids.push_back(next);
    }
    return out;
  }

  static GenerateRequest greedy(std::vector<int64_t> ids, int64_t max_new_tokens) {
    GenerateRequest r;
    r.input_ids = std::move(ids);
    r.sampling.temperature = 0.0;
    r.sampling.max_new_tokens = max_new_tokens;
    r.sampling.ignore_eos = true;
    return r;
  }

  static void expect_all_blocks_free(const Engine& engine) {
    const EngineStats stats = engine.stats();
    EXPECT_EQ(stats.free_blocks, stats.total_blocks);
    EXPECT_EQ(stats.running_sequences, 0);
    EXPECT_EQ(stats.waiting_sequences, 0);
  }
};

// Runs requests submitted from several threads at staggered times and collects the finished
// outputs by request id.
std::map<std::string, GenerateOutput> run_staggered(Engine& engine,
                                                    std::vector<GenerateRequest> requests,
                                                    std::chrono::milliseconds gap) {
  std::mutex mutex;
  std::map<std::string, GenerateOutput> results;
  std::atomic<int64_t> remaining{static_cast<int64_t>(requests.size())};
  for (GenerateRequest& request : requests) {
    engine.submit(request, [&](const GenerateOutput& out) {
      if (!out.finished) return;
      std::lock_guard<std::mutex> lock(mutex);
      results[out.request_id] = out;
      --remaining;
    });
    std::this_thread::sleep_for(gap);
  }
  while (remaining > 0) std::this_thread::sleep_for(1ms);
  return results;
}

TEST_F(EngineTest, GreedyEqualsFullForwardForMixedLengthsAndStaggeredArrivals) {
  Engine engine(options());
  std::vector<GenerateRequest> requests;
  const std::vector<int64_t> lengths = {3, 17, 40, 1, 65, 9};
  for (size_t i = 0; i < lengths.size(); ++i) {
    GenerateRequest r = greedy(prompt(lengths[i], i), 6 + 3 * static_cast<int64_t>(i));
    r.id = "r" + std::to_string(i);
    requests.push_back(r);
  }
  auto results = run_staggered(engine, requests, 3ms);
  for (const GenerateRequest& r : requests) {
    const GenerateOutput& out = results.at(r.id);
    EXPECT_EQ(out.finish_reason, FinishReason::kLength);
    EXPECT_EQ(out.output_ids, greedy_reference(r.input_ids, r.sampling.max_new_tokens)) << r.id;
  }
  EXPECT_GT(engine.stats().steps, 0);
  expect_all_blocks_free(engine);
}

TEST_F(EngineTest, GreedyEqualsFullForwardUnderPreemptionWithATinyCache) {
  // 14 blocks of 4 tokens: the four requests (up to 40 tokens each) cannot all hold their
  // blocks at once, so running sequences are preempted and recomputed.
  EngineOptions o = options(/*blocks=*/14, /*block_size=*/4);
  o.enable_prefix_caching = false;
  Engine engine(o);
  std::vector<GenerateRequest> requests;
  for (int64_t i = 0; i < 4; ++i) {
    GenerateRequest r = greedy(prompt(10 + 3 * i, i + 20), 24);
    r.id = "p" + std::to_string(i);
    requests.push_back(r);
  }
  auto results = run_staggered(engine, requests, 0ms);
  EXPECT_GT(engine.stats().preemptions, 0);
  for (const GenerateRequest& r : requests) {
    EXPECT_EQ(results.at(r.id).output_ids, greedy_reference(r.input_ids, 24)) << r.id;
  }
  expect_all_blocks_free(engine);
}

TEST_F(EngineTest, SharedPrefixesAreReusedAndGiveTheSameTokens) {
  Engine engine(options());
  const std::vector<int64_t> common = prompt(48, 3);
  GenerateRequest first = greedy(common, 5);
  std::vector<int64_t> extended = common;
  for (int64_t t : prompt(7, 9)) extended.push_back(t);
  engine.generate(first);
  GenerateOutput second = engine.generate(greedy(extended, 8))[0];
  // 48 common tokens = 12 full blocks of 4, all cached.
  EXPECT_EQ(second.cached_tokens, 48);
  EXPECT_EQ(second.output_ids, greedy_reference(extended, 8));
  EXPECT_GT(engine.stats().cache_hit_rate(), 0.0);
  expect_all_blocks_free(engine);
}

TEST_F(EngineTest, LogProbsMatchTheTrainersComputationAtTheSameTemperature) {
  Engine engine(options());
  for (double temperature : {0.7, 1.0}) {
    GenerateRequest r;
    r.input_ids = prompt(21, 5);
    r.sampling.temperature = temperature;
    r.sampling.max_new_tokens = 12;
    r.sampling.ignore_eos = true;
    r.sampling.seed = 42;
    r.return_logprob = true;
    r.top_logprobs_num = 3;
    GenerateOutput out = engine.generate(r)[0];
    ASSERT_EQ(out.output_logprobs.size(), out.output_ids.size());

    std::vector<int64_t> all = r.input_ids;
    all.insert(all.end(), out.output_ids.begin(), out.output_ids.end());
    const int64_t n = static_cast<int64_t>(all.size()), p = 21;
    torch::NoGradGuard no_grad;
    torch::Tensor hidden =
        (*reference_)
            ->forward(torch::tensor(all, torch::kLong), torch::arange(n, torch::kLong),
                      torch::tensor(std::vector<int32_t>{0, static_cast<int32_t>(n)}, torch::kInt));
    // Position i predicts token i + 1: the outputs are predicted by positions p-1 .. n-2.
    torch::Tensor targets = torch::tensor(out.output_ids, torch::kLong);
    models::TokenLogProbs expected = models::compute_token_log_probs(
        hidden.narrow(0, p - 1, n - p), (*reference_)->lm_head_weight(), targets, temperature);
    for (size_t i = 0; i < out.output_ids.size(); ++i) {
      EXPECT_NEAR(out.output_logprobs[i], expected.log_probs[i].item<float>(), 1e-5)
          << "token " << i << " at temperature " << temperature;
      ASSERT_EQ(out.top_logprobs[i].size(), 3u);
      EXPECT_GE(out.top_logprobs[i][0].logprob, out.output_logprobs[i] - 1e-6);
    }
  }
}

TEST_F(EngineTest, NSamplesOfALongPromptStoreItsBlocksOnce) {
  // A 512-token prompt in blocks of 16 is 32 blocks; 8 samples each need one block of their
  // own for their first tokens. Without sharing that would be 8 * 33 blocks.
  EngineOptions o = options(/*blocks=*/400, /*block_size=*/16);
  o.chunked_prefill_size = 512;
  Engine engine(o);
  GenerateRequest r = greedy(prompt(512, 1), 40);
  r.sampling.n = 8;
  r.stream = true;
  std::atomic<int64_t> finished{0};
  std::vector<GenerateOutput> outputs(8);
  std::mutex mutex;
  engine.submit(r, [&](const GenerateOutput& out) {
    std::lock_guard<std::mutex> lock(mutex);
    if (out.finished) {
      outputs[out.index] = out;
      ++finished;
    }
  });
  // Pause once the samples are decoding, and count the blocks they hold.
  while (engine.stats().generated_tokens < 16) std::this_thread::sleep_for(100us);
  engine.pause_generation(/*abort_in_flight=*/false);
  const EngineStats held = engine.stats();
  EXPECT_EQ(held.running_sequences, 8);
  EXPECT_EQ(held.computed_prefill_tokens, 512);
  // Each sample has sampled k tokens and holds the first k - 1 in its own blocks.
  const int64_t k = held.generated_tokens / 8;
  ASSERT_GE(k, 2);
  ASSERT_LT(k, 40);
  EXPECT_EQ(held.total_blocks - held.free_blocks, 32 + 8 * ((k - 1 + 15) / 16));
  engine.continue_generation();
  while (finished < 8) std::this_thread::sleep_for(1ms);

  const std::vector<int64_t> expected = greedy_reference(r.input_ids, 40);
  for (const GenerateOutput& out : outputs) {
    EXPECT_EQ(out.output_ids, expected) << "sample " << out.index;
    EXPECT_EQ(out.prompt_tokens, 512);
  }
  EXPECT_EQ(outputs[1].cached_tokens, 512);  // the shared prompt
  // Sharing off: the same request as 8 separate ones gives the same tokens.
  EngineOptions unshared = o;
  unshared.enable_prefix_caching = false;
  Engine separate(unshared);
  for (int64_t i = 0; i < 2; ++i) {
    EXPECT_EQ(separate.generate(greedy(r.input_ids, 40))[0].output_ids, expected);
  }
  EXPECT_EQ(separate.stats().computed_prefill_tokens, 2 * 512);
  expect_all_blocks_free(engine);
}

TEST_F(EngineTest, SeededSamplingIsTheSameAloneAndInABatch) {
  Engine engine(options());
  GenerateRequest r;
  r.input_ids = prompt(12, 4);
  r.sampling.temperature = 1.0;
  r.sampling.top_p = 0.9;
  r.sampling.max_new_tokens = 16;
  r.sampling.ignore_eos = true;
  r.sampling.seed = 1234;
  const std::vector<int64_t> alone = engine.generate(r)[0].output_ids;
  std::vector<GenerateRequest> batch;
  for (int64_t i = 0; i < 5; ++i) {
    GenerateRequest other = r;
    other.id = "other" + std::to_string(i);
    other.input_ids = prompt(5 + 9 * i, 30 + i);
    other.sampling.seed = 99 + i;
    batch.push_back(other);
  }
  GenerateRequest again = r;
  again.id = "again";
  batch.insert(batch.begin() + 2, again);
  auto results = run_staggered(engine, batch, 0ms);
  EXPECT_EQ(results.at("again").output_ids, alone);
  EXPECT_NE(results.at("other0").output_ids, alone);
}

TEST_F(EngineTest, StopStringAcrossTokensStopTokenAndLength) {
  // The byte tokenizer makes every byte a token, so a 3-byte stop string spans 3 tokens. Take
  // it from a free run: the first window of 3 printable ASCII tokens after 4 plain bytes.
  Engine engine(options());
  GenerateRequest r;
  std::vector<int64_t> ids;
  size_t window = 0;
  for (int64_t salt = 0; window == 0 && salt < 50; ++salt) {
    r = greedy(prompt(9, salt), 30);
    ids = engine.generate(r)[0].output_ids;
    for (size_t i = 4; i + 3 <= ids.size() && window == 0; ++i) {
      bool ok = true;
      for (size_t j = 0; j < i + 3; ++j) ok = ok && ids[j] < 256;
      for (size_t j = i; j < i + 3; ++j) ok = ok && ids[j] >= 32 && ids[j] < 127;
      if (ok) window = i;
    }
  }
  ASSERT_GT(window, 0u) << "no printable window in 50 greedy runs";
  std::string bytes;
  for (int64_t id : ids) bytes.push_back(static_cast<char>(id < 256 ? id : 0));
  const std::string stop = bytes.substr(window, 3);
  const size_t stop_at = bytes.find(stop);
  r.sampling.stop = {"never-seen", stop};
  GenerateOutput stopped = engine.generate(r)[0];
  EXPECT_EQ(stopped.finish_reason, FinishReason::kStop);
  EXPECT_EQ(stopped.matched_stop, stop);
  EXPECT_EQ(stopped.text, models::utf8_lossy(bytes.substr(0, stop_at)));
  // Token ids keep every sampled token, those spelling the stop string included.
  EXPECT_EQ(stopped.output_ids, std::vector<int64_t>(ids.begin(), ids.begin() + stop_at + 3));

  r.sampling.stop.clear();
  r.sampling.stop_token_ids = {ids[4]};
  GenerateOutput by_token = engine.generate(r)[0];
  EXPECT_EQ(by_token.finish_reason, FinishReason::kStop);
  EXPECT_EQ(by_token.matched_token, ids[4]);
  const auto first = std::find(ids.begin(), ids.end(), ids[4]);
  EXPECT_EQ(by_token.output_ids, std::vector<int64_t>(ids.begin(), first + 1));

  r.sampling.stop_token_ids.clear();
  r.sampling.max_new_tokens = 3;
  GenerateOutput short_run = engine.generate(r)[0];
  EXPECT_EQ(short_run.finish_reason, FinishReason::kLength);
  EXPECT_EQ(short_run.output_ids, std::vector<int64_t>(ids.begin(), ids.begin() + 3));
}

TEST_F(EngineTest, EosFromGenerationConfigFinishesUnlessIgnored) {
  // A copy of the model whose generation_config.json names, besides <|im_end|>, a token the
  // greedy output is known to produce: the engine must gather EOS ids from there too.
  const GenerateRequest r = greedy(prompt(9, 2), 30);
  const std::vector<int64_t> free_run = Engine(options()).generate(r)[0].output_ids;
  const int64_t eos = free_run[5];
  namespace fs = std::filesystem;
  const fs::path copy = fs::path(*dir_ + "-eos");
  fs::remove_all(copy);
  fs::copy(*dir_, copy);
  std::ofstream(copy / "generation_config.json") << "{\"eos_token_id\": [258, " << eos << "]}";
  EngineOptions o = options();
  o.model_dir = copy.string();
  Engine engine(o);
  GenerateRequest sampled = r;
  sampled.sampling.ignore_eos = false;
  GenerateOutput out = engine.generate(sampled)[0];
  EXPECT_EQ(out.finish_reason, FinishReason::kStop);
  EXPECT_EQ(out.matched_token, eos);
  const auto first = std::find(free_run.begin(), free_run.end(), eos);
  EXPECT_EQ(out.output_ids, std::vector<int64_t>(free_run.begin(), first + 1));
  EXPECT_EQ(engine.generate(r)[0].output_ids, free_run);  // ignore_eos
  fs::remove_all(copy);
}

TEST_F(EngineTest, AbortMidGenerationReturnsThePartialOutputAndFreesBlocks) {
  Engine engine(options());
  GenerateRequest r = greedy(prompt(10, 1), 100);
  r.id = "long";
  auto flight = start_streaming(engine, r, 5);
  engine.abort("long");
  GenerateOutput out = flight->done.get_future().get();
  EXPECT_EQ(out.finish_reason, FinishReason::kAbort);
  EXPECT_GE(out.completion_tokens(), 5);
  EXPECT_LT(out.completion_tokens(), 100);
  const std::vector<int64_t> expected = greedy_reference(r.input_ids, out.completion_tokens());
  EXPECT_EQ(out.output_ids, expected);
  expect_all_blocks_free(engine);
  engine.abort("no-such-request");  // ignored
}

TEST_F(EngineTest, PauseKeepsOrAbortsInFlightRequests) {
  Engine engine(options());
  GenerateRequest r = greedy(prompt(14, 6), 60);
  auto flight = start_streaming(engine, r, 3);
  engine.pause_generation(/*abort_in_flight=*/false);
  const int64_t steps = engine.stats().steps;
  std::this_thread::sleep_for(30ms);
  EXPECT_EQ(engine.stats().steps, steps);
  EXPECT_TRUE(engine.stats().paused);
  engine.continue_generation();
  GenerateOutput out = flight->done.get_future().get();
  EXPECT_EQ(out.finish_reason, FinishReason::kLength);
  EXPECT_EQ(out.output_ids, greedy_reference(r.input_ids, 60));

  // Abort mode: what is in flight ends at once, marked aborted.
  GenerateRequest again = greedy(prompt(14, 7), 500);
  again.stream = true;
  std::promise<GenerateOutput> aborted;
  std::atomic<bool> started{false};
  engine.submit(again, [&](const GenerateOutput& o) {
    if (o.finished) aborted.set_value(o);
    started = true;
  });
  while (!started) std::this_thread::sleep_for(100us);
  engine.pause_generation(/*abort_in_flight=*/true);
  EXPECT_EQ(aborted.get_future().get().finish_reason, FinishReason::kAbort);
  engine.continue_generation();
  expect_all_blocks_free(engine);
}

TEST_F(EngineTest, FlushForgetsThePrefixCache) {
  Engine engine(options());
  const std::vector<int64_t> p = prompt(33, 2);
  engine.generate(greedy(p, 2));
  EXPECT_GT(engine.stats().cached_blocks, 0);
  EXPECT_EQ(engine.generate(greedy(p, 2))[0].cached_tokens, 32);
  engine.flush_cache();
  EXPECT_EQ(engine.stats().cached_blocks, 0);
  EXPECT_EQ(engine.generate(greedy(p, 2))[0].cached_tokens, 0);
}

TEST_F(EngineTest, SleepAndWakeKeepRequestsAndResults) {
  Engine engine(options());
  GenerateRequest r = greedy(prompt(20, 3), 40);
  auto flight = start_streaming(engine, r, 4);
  engine.release_memory();
  EXPECT_TRUE(engine.stats().sleeping);
  EXPECT_EQ(engine.stats().free_blocks, engine.stats().total_blocks);
  // A request submitted while asleep waits for wake.
  std::future<std::vector<GenerateOutput>> later =
      std::async(std::launch::async, [&] { return engine.generate(greedy(prompt(5, 1), 4)); });
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(later.wait_for(0ms), std::future_status::timeout);
  engine.resume_memory();
  EXPECT_EQ(flight->done.get_future().get().output_ids, greedy_reference(r.input_ids, 40));
  EXPECT_EQ(later.get()[0].output_ids, greedy_reference(prompt(5, 1), 4));
  expect_all_blocks_free(engine);
}

TEST_F(EngineTest, RequestKeptThroughAWeightUpdateRecordsTheVersionOfEveryToken) {
  Engine engine(options());
  auto flight = start_streaming(engine, greedy(prompt(9, 2), 40), 3);
  engine.pause_generation(/*abort_in_flight=*/false);
  const int64_t before_update = engine.stats().generated_tokens;
  std::vector<std::pair<std::string, at::Tensor>> same;
  for (auto& item : (*reference_)->named_parameters()) {
    same.emplace_back(item.key(), item.value().detach().clone());
  }
  engine.load_weights(same, /*new_version=*/4);
  engine.continue_generation();
  GenerateOutput out = flight->done.get_future().get();

  ASSERT_EQ(out.output_weight_versions.size(), out.output_ids.size());
  EXPECT_EQ(out.weight_versions, (std::vector<int64_t>{0, 4}));
  const auto first_new =
      std::find(out.output_weight_versions.begin(), out.output_weight_versions.end(), 4);
  const int64_t old_tokens = first_new - out.output_weight_versions.begin();
  EXPECT_EQ(old_tokens, before_update);  // every token sampled before the pause is version 0
  EXPECT_TRUE(
      std::all_of(first_new, out.output_weight_versions.end(), [](int64_t v) { return v == 4; }));
}

TEST_F(EngineTest, LoadWeightsChangesTheModelAndTheVersion) {
  Engine engine(options());
  const GenerateRequest r = greedy(prompt(11, 4), 10);
  const std::vector<int64_t> before = engine.generate(r)[0].output_ids;

  // New weights: the reference model's, scaled; the reference follows along.
  std::vector<std::pair<std::string, at::Tensor>> named;
  {
    torch::NoGradGuard no_grad;
    for (auto& item : (*reference_)->named_parameters()) {
      if (item.key().find("mlp.down_proj") != std::string::npos) item.value().mul_(3.0);
      named.emplace_back(item.key(), item.value().clone());
    }
  }
  engine.load_weights(named, /*new_version=*/1);
  GenerateOutput after = engine.generate(r)[0];
  EXPECT_EQ(after.weight_version, 1);
  EXPECT_EQ(after.output_ids, greedy_reference(r.input_ids, 10));
  EXPECT_NE(after.output_ids, before);

  EXPECT_CONTAINS(ooze::testing::error_message_of<Error>([&] { engine.load_weights({}, 1); }),
                  "not newer");
  std::vector<std::pair<std::string, at::Tensor>> bad = {{"model.norm.weight", torch::ones({3})},
                                                         {"model.nonsense", torch::ones({1})}};
  const std::string message =
      ooze::testing::error_message_of<FormatError>([&] { engine.load_weights(bad, 2); });
  EXPECT_CONTAINS(message, "model.norm.weight");
  EXPECT_CONTAINS(message, "model.nonsense");
  EXPECT_EQ(engine.stats().weight_version, 1);
  // Put the reference back for the other tests.
  torch::NoGradGuard no_grad;
  for (auto& item : (*reference_)->named_parameters()) {
    if (item.key().find("mlp.down_proj") != std::string::npos) item.value().div_(3.0);
  }
}

TEST_F(EngineTest, InvalidRequestsNameTheirField) {
  Engine engine(options(/*blocks=*/64, /*block_size=*/4));
  auto field_of = [&](GenerateRequest r) {
    try {
      engine.submit(std::move(r), nullptr);
    } catch (const InvalidRequest& e) {
      return e.field();
    }
    return std::string("(accepted)");
  };
  GenerateRequest ok = greedy(prompt(4, 1), 4);
  GenerateRequest r = ok;
  r.input_ids.clear();
  EXPECT_EQ(field_of(r), "input_ids");
  r = ok;
  r.input_ids[2] = engine.info().vocab_size;
  EXPECT_EQ(field_of(r), "input_ids");
  r = ok;
  r.input_ids.assign(static_cast<size_t>(engine.info().context_length), 65);
  EXPECT_EQ(field_of(r), "input_ids");
  r = ok;
  r.sampling.top_p = 0.0;
  EXPECT_EQ(field_of(r), "sampling_params.top_p");
  r = ok;
  r.sampling.max_new_tokens = 1000;  // 64 blocks of 4 tokens hold 256
  EXPECT_EQ(field_of(r), "sampling_params.max_new_tokens");
  r = ok;
  r.sampling.n = 17;
  EXPECT_EQ(field_of(r), "sampling_params.n");
  r = ok;
  r.top_logprobs_num = -1;
  EXPECT_EQ(field_of(r), "top_logprobs_num");
  engine.pause_generation(false);
  r = ok;
  r.id = "same";
  EXPECT_EQ(field_of(r), "(accepted)");
  EXPECT_EQ(field_of(r), "rid");
  engine.abort("same");
  engine.continue_generation();
}

}  // namespace engine_test
}  // namespace ooze::engine
