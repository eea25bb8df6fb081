// Slime's train data, the dict a --custom-convert-samples-to-train-data-path function makes of a
// rollout, as the RolloutBatch ooze trains on (launcher/rollout_batch.h). One entry per trained
// sample in every list, in the order the batch takes them:
//
//   "tokens"             [[int]]    prompt then response, each sample's
//   "response_lengths"   [int]      the response tokens at the end of each sample's tokens
//   "rewards"            [float]    the rewards advantages start from, final: no group
//                                   normalisation on top (as --custom-reward-post-process-path)
//   "loss_masks"         [[0 | 1]]  over each response: 1 on the tokens that train
//   "rollout_log_probs"  [[float]]  over each response, optional: without it, the rollout's
//                                   samples' when the tokens are theirs (same samples, same
//                                   tokens and response lengths); else the batch has none, which
//                                   a run that needs them (--use-tis, --get-mismatch-metrics,
//                                   --use-rollout-logprobs) refuses
//   "teacher_log_probs"  [[float]]  over each response, optional (--use-opd --opd-type engine):
//                                   without it, each sample's own when the entry keeps its tokens
//   "raw_reward", "truncated", "sample_indices"   accepted and not used: ooze's rollout metrics
//                                   come from the samples
//
// Other keys are Slime's or the user's and are not read. The samples keep the rollout's rollouts
// and groups (for rloo, and --global-batch-size, which counts rollouts) when the data has one
// entry per sample of the rollout; otherwise each is a rollout and a group of its own.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "launcher/rollout_batch.h"
#include "rollout/sample.h"

namespace ooze::launcher {

// The batch `train_data` describes, for the rollout `groups` it was made from. Throws ooze::Error
// naming the key, the entry and (when the entries are the rollout's samples) the sample: a
// missing key, a list of the wrong length or type, a response longer than its sample's tokens
// (every sample keeps a prompt token), a loss mask or rollout log-probs not covering the
// response, missing rollout log-probs that `needs_rollout_log_probs`.
RolloutBatch rollout_batch_from_train_data(const nlohmann::json& train_data,
                                           const std::vector<std::vector<rollout::Sample>>& groups,
                                           bool needs_rollout_log_probs);

}  // namespace ooze::launcher
