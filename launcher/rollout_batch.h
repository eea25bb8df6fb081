// One rollout on its way to the trainer: the driver's side of what Slime does between the
// rollout manager and the optimizer steps.
//
//   RolloutBatch batch = rollout_batch(rollout.groups, reward_key);  // group after group
//   batch.set("old_log_probs", log_probs);   // the trainer's recomputation, or the rollout's
//   batch.set("ref_log_probs", ref);         // with a reference model
//   batch.set("values", values);             // a critic's, with ppo
//   compute_advantages(batch, algorithm.advantage, kl_loss_type);  // "advantages", "returns"
//   for (const TrainBatch& step : batch.global_batches(global_batch_size)) ...
//
// Every sample becomes a fsdp::PackingSample: its tokens, its response length, its loss mask as
// the response mask, and per-token values by name ("rollout_log_probs" from the start, and
// "teacher_log_probs" when a distillation teacher scored the samples in the rollout; the others
// as they are set), each [R] float32 over the response tokens. The driver holds the whole
// rollout, so advantages are computed, and whitened, over all of it at once.
//
// A generate function may split one conversation into several samples sharing a rollout_id
// (rollout::Sample::rollout_id). They count as one rollout of their group: the group's
// baseline is taken over its rollouts, each scored by the sum of its samples' rewards, and every
// sample of a rollout gets its rollout's advantage; optimizer steps take whole rollouts
// (--global-batch-size counts rollouts). Without split samples a rollout is a sample.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/advantages.h"
#include "algorithms/kl.h"
#include "algorithms/on_policy_distillation.h"
#include "models/tokenizer.h"
#include "rollout/sample.h"
#include "trainer/train_actor.h"

namespace ooze::launcher {

struct RolloutBatch {
  std::vector<fsdp::PackingSample> samples;  // the groups' samples, one group after another
  std::vector<double> rewards;               // each sample's scalar reward
  std::vector<int64_t> rollout_sizes;        // samples of each rollout, in order (1 unless split)
  int64_t group_size = 1;                    // rollouts per prompt (--n-samples-per-prompt)
  // The rewards came from --custom-reward-post-process-path, which normalised them: no group
  // normalisation on top.
  bool rewards_are_final = false;

  // Sets every sample's per-token `name` (`values[i]`: [R_i] for sample i). Throws ooze::Error
  // naming the sample whose length differs from its response's.
  void set(const std::string& name, const std::vector<at::Tensor>& values);
  // Every sample's per-token `name`, in order. Throws ooze::Error when it was never set.
  std::vector<at::Tensor> get(const std::string& name) const;
  // Whether every sample has a per-token `name` (a converted batch may have no
  // "rollout_log_probs").
  bool has(const std::string& name) const;
  // Whether some rollout was split into several samples.
  bool has_split_rollouts() const { return rollout_sizes.size() != samples.size(); }
  // The samples of the whole batch as the trainer takes them, the samples of `size` rollouts at
  // a time in order, one TrainBatch per optimizer step. Throws ConfigError unless `size`
  // divides the batch's rollouts.
  std::vector<trainer::TrainBatch> global_batches(int64_t size) const;
};

// The number of samples of each rollout of `group`, in order: consecutive samples sharing a
// rollout_id are one rollout, any other sample is one of its own.
std::vector<int64_t> rollout_sizes_of(const std::vector<rollout::Sample>& group);

// The kept groups of a rollout (rollout::RolloutResult::groups), every group of as many rollouts
// and every sample scored. Throws ooze::Error naming the sample that has no scalar reward (with
// `reward_key` for object rewards, --reward-key), whose per-token vectors do not cover its
// response, or whose group has a different number of rollouts.
RolloutBatch rollout_batch(const std::vector<std::vector<rollout::Sample>>& groups,
                           const std::string& reward_key = "");

// --opd-type self: gives every sample of `batch` (made from `groups`) its teacher_prompt, its
// prompt tokens followed by those of its privileged information, the sample's field `key`:
// "label" (--label-key's value) or a field of its metadata (--metadata-key's object), a string
// as it is and any other value as JSON. The text goes in as it is, so the dataset words it
// ("Reference answer: 42\n"). Throws ooze::Error naming the group, the sample and the key when
// a sample has no such field.
void add_privileged_prompts(RolloutBatch& batch,
                            const std::vector<std::vector<rollout::Sample>>& groups,
                            const std::string& key, const models::Tokenizer& tokenizer);

// Sets "advantages" and "returns" by the estimator of `options` from the rewards and response
// masks, the KL penalty of --kl-coef taken between "old_log_probs" and "ref_log_probs" with
// `kl_type` (--kl-loss-type, as Slime), and whitens the advantages over every counted token of the
// batch when the estimator asks (AdvantageOptions::whitens_advantages). ppo takes GAE over the
// critic's "values" (set them first). With split rollouts the group baseline is taken over
// rollouts (grpo, gspo, cispo, reinforce_plus_plus_baseline; rloo throws ConfigError). With
// `opd` on (--use-opd) the estimator's advantages are lowered by the distillation term between
// "old_log_probs" and "teacher_log_probs" (algorithms/on_policy_distillation.h) before whitening.
void compute_advantages(RolloutBatch& batch, const algorithms::AdvantageOptions& options,
                        algorithms::KlEstimator kl_type, const algorithms::OpdOptions& opd = {});

}  // namespace ooze::launcher
