// Generating samples through the router: what the rollout's default generation and a user's
// generate function (rollout/reward_plugin.h) both call, so multi-turn plugins and plain
// rollouts append tokens, log-probs, loss masks and weight versions the same way.
//
//   SampleGenerator generator(router, tokenizer, sampling, &stop_flag);
//   generator.generate_group(group);   // fresh samples of one prompt: one request with n
//   generator.generate(sample);        // one sample, continuing from its tokens so far
//
// Every request asks for log-probs and carries the prompt as token ids (never text), so what
// the engine saw is exactly sample.tokens. A continued sample (a partial rollout, a second
// turn) sends its prompt and response so far and asks for what is left of the response budget;
// the engine's prefix cache makes the resent tokens cheap.
#pragma once

#include <atomic>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/option_fields.h"
#include "rollout/reward_plugin.h"
#include "rollout/sample.h"
#include "serving/router.h"

namespace ooze::models {
class Tokenizer;
}

namespace ooze::rollout {

// How samples are drawn: Slime's --rollout-* sampling flags, or the --eval-* ones.
struct RolloutSampling {
  double temperature = 1.0;
  double top_p = 1.0;
  int64_t top_k = -1;
  int64_t max_response_len = 1024;  // response tokens per sample, all turns together
  std::vector<std::string> stop;
  std::vector<int64_t> stop_token_ids;
  bool skip_special_tokens = true;
  // --sampling-seed: every request's seed derives from it, the sample's run-wide index and how
  // much of its response exists, so a rerun or a resumed run samples the same tokens from the
  // same weights. -1: the engines draw seeds of their own.
  int64_t seed = -1;

  // SGLang's sampling_params object for a request of n samples starting at `sample`.
  nlohmann::json sampling_params(int64_t max_new_tokens, int64_t n, const Sample& sample) const;

  // --rollout-temperature, --rollout-top-p, --rollout-top-k, --rollout-max-response-len,
  // --rollout-stop, --rollout-stop-token-ids, --rollout-skip-special-tokens, --sampling-seed
  // ("rollout" section).
  static const OptionFields<RolloutSampling>& fields();
  // The rollout's sampling with --eval-temperature, --eval-top-p, --eval-top-k and
  // --eval-max-response-len applied where given (add_eval_sampling_fields).
  static RolloutSampling eval_from_config(const Config& config);
};

// Declares the --eval-* sampling flags (section "eval"); unset, each is the rollout's value.
void add_eval_sampling_fields(ConfigSchema& schema);

// What a generator has sent and received since it was made (every field summed over outputs).
struct GenerationStats {
  int64_t requests = 0;
  int64_t prompt_tokens = 0;
  int64_t cached_prompt_tokens = 0;  // prompt tokens the engines took from their prefix cache
  int64_t generated_tokens = 0;
  // Outputs that finished, and those among them that ended on a --rollout-stop string or a
  // --rollout-stop-token-ids token (not EOS): what tells a stop that cuts every answer short.
  int64_t finished_outputs = 0;
  int64_t stopped_on_stop_string = 0;
  int64_t stopped_on_stop_token = 0;
  double cache_hit_rate() const {
    return prompt_tokens == 0 ? 0.0 : static_cast<double>(cached_prompt_tokens) / prompt_tokens;
  }
};

class SampleGenerator final : public plugin::GenerationContext {
 public:
  // `stop`, when set, turns later generate calls into aborts: once a rollout has what it needs,
  // no new request may start behind the abort sent to the engines.
  SampleGenerator(serving::Router& router, const models::Tokenizer& tokenizer,
                  RolloutSampling sampling, const std::atomic<bool>* stop = nullptr);

  // Fresh samples that share one prompt (same tokens, no response yet): one request with
  // n = group.size(), so the engine prefills the prompt once.
  void generate_group(std::vector<Sample>& group);

  std::string generate(Sample& sample, int64_t max_new_tokens = 0) override;
  int64_t append_observation(Sample& sample, const std::string& text) override;
  int64_t remaining_budget(const Sample& sample) const override;
  std::vector<int64_t> tokenize(const std::string& text) const override;
  std::string detokenize(const std::vector<int64_t>& ids) const override;

  const RolloutSampling& sampling() const { return sampling_; }
  GenerationStats stats() const;
  // Counts the tokens of one /generate output object in stats() (an agent session's call).
  void count(const nlohmann::json& output);

 private:
  bool stopping() const { return stop_ != nullptr && stop_->load(); }
  nlohmann::json send(const nlohmann::json& body);

  serving::Router& router_;
  const models::Tokenizer& tokenizer_;
  RolloutSampling sampling_;
  const std::atomic<bool>* stop_;
  std::atomic<int64_t> requests_{0};
  std::atomic<int64_t> prompt_tokens_{0};
  std::atomic<int64_t> cached_prompt_tokens_{0};
  std::atomic<int64_t> generated_tokens_{0};
  std::atomic<int64_t> finished_outputs_{0};
  std::atomic<int64_t> stopped_on_stop_string_{0};
  std::atomic<int64_t> stopped_on_stop_token_{0};
};

// Appends `ids`, tokens the policy did not sample (a tool's answer), to the response: loss mask 0,
// log-prob 0, weight version -1; the response text grows by `text`.
void append_non_policy_tokens(Sample& sample, const std::vector<int64_t>& ids,
                              const std::string& text);

// Appends one /generate output object (text, output_ids, meta_info with log-probs, weight
// versions, finish_reason) to the sample and sets its status. Throws FormatError naming the
// missing or malformed field.
void append_engine_output(Sample& sample, const nlohmann::json& output);

}  // namespace ooze::rollout
