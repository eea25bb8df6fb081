// The supervised rollout (Slime's sft_rollout, `--rollout-function-path sft`): no engine
// generates; each drawn prompt's label is its response. With `--loss-type sft_loss` the trainer
// then does supervised fine-tuning through the very loop, checkpoints and metrics of RL.
//
//   PromptSource source(dataset, options);
//   std::vector<std::vector<Sample>> groups = sft_rollout(source, tokenizer, batch_size);
//
// A sample's tokens are the prompt's (chat template as the dataset applied it), then the
// label's tokens and the tokenizer's EOS token, all of the response counted by the loss (mask
// 1). Rewards are 0 and log-probs 0: nothing sampled these tokens. The label must be text.
#pragma once

#include <cstdint>
#include <vector>

#include "models/tokenizer.h"
#include "rollout/prompt_source.h"
#include "rollout/sample.h"

namespace ooze::rollout {

// `batch_size` groups of one sample each. Throws ConfigError when the tokenizer has no EOS
// token or a prompt's label is empty (naming the prompt's dataset index).
std::vector<std::vector<Sample>> sft_rollout(PromptSource& source,
                                             const models::Tokenizer& tokenizer,
                                             int64_t batch_size);

}  // namespace ooze::rollout
