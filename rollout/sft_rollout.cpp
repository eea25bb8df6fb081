#include "rollout/sft_rollout.h"

#include "core/error.h"

namespace ooze::rollout {

std::vector<std::vector<Sample>> sft_rollout(PromptSource& source,
                                             const models::Tokenizer& tokenizer,
                                             int64_t batch_size) {
  const std::optional<int64_t> eos = tokenizer.eos_token_id();
  if (!eos) {
    throw ConfigError(
        "--rollout-function-path sft ends each response with the EOS token, but "
        "the tokenizer of --hf-checkpoint has none (tokenizer_config.json "
        "eos_token)");
  }
  std::vector<std::vector<Sample>> groups;
  for (const DrawnPrompt& drawn : source.next_batch(batch_size)) {
    if (drawn.prompt.label.empty()) {
      throw ConfigError(
          "--rollout-function-path sft: prompt " + std::to_string(drawn.dataset_index) + " of " +
          source.dataset().options().path + " has no label (--label-key) to train on");
    }
    Sample sample = make_sample(drawn, source.take_sample_indices(1));
    std::vector<int64_t> response = tokenizer.encode(sample.label);
    response.push_back(*eos);
    sample.tokens.insert(sample.tokens.end(), response.begin(), response.end());
    sample.response = sample.label;
    sample.response_length = static_cast<int64_t>(response.size());
    sample.loss_mask.assign(response.size(), 1);
    sample.rollout_log_probs.assign(response.size(), 0.0f);
    sample.weight_versions.assign(response.size(), -1);
    sample.reward = 0.0;
    sample.status = Sample::Status::kCompleted;
    groups.push_back({std::move(sample)});
  }
  return groups;
}

}  // namespace ooze::rollout
