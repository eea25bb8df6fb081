// One training step of a data-parallel rank, read top to bottom:
//
//   1. plan     this rank's samples cut into micro-batches (packing.h: a token budget with
//               --use-dynamic-batch-size, else --micro-batch-size samples), as many on every rank;
//   2. pack     each micro-batch into flat tokens with cu_seqlens and restarting positions;
//   3. forward  the sharded model, then log p(token | earlier tokens of its sample) per token;
//   4. loss     through algorithms/: the policy loss of RL (policy_loss.h, from each sample's
//               "advantages" and "old_log_probs", with "ref_log_probs" and "rollout_log_probs"
//               when the options use them), the SFT loss, or a critic's value loss
//               (value_loss.h, from "values" and "returns"), normalised by the step's global
//               counts (loss_aggregation.h) so that the world size and the micro-batch split do
//               not change the gradient; or a user's Python loss (python_loss.h) on the same
//               tensors, normalised the same way;
//      With distillation over the vocabulary (--opd-type self, or trainer with --opd-full-vocab)
//      the policy loss gains the JSD term of algorithms/vocabulary_distillation.h: the teacher
//      (DistillationTeacher) first reads each sample without gradients (after its teacher_prompt
//      when self-distilling), then the policy's forward gives the student's side at the same
//      response tokens;
//   5. backward accumulating into the gradient shards, micro-batch after micro-batch;
//   6. step     global-norm clipping and AdamW (optimizer_step.h).
//
//   TrainStepResult out = train_step(model, optimizer, lr, my_samples, options);
//   out.metrics.at("loss");   // the step's value, the same on every rank
//
// compute_log_probs scores samples over the same plan, pack and forward, without gradients.
// Both are collectives: every rank of the model's group calls them, each with its own samples
// (split_across_ranks in packing.h deals a rollout batch out to the ranks).
//
// Context parallelism (the model's cp_size() C > 1, options.packing.context_parallel_size the
// same): the C ranks of a CP group are given the same samples and plan the same micro-batches;
// each runs the model on its share of every micro-batch's tokens, and the per-token log-probs
// (and entropy) are gathered over the group (context_parallel_gather.h), so that every loss sees
// whole samples and compute_log_probs returns whole responses, on each rank of the group. The
// step's counts count each sample once, the loss is scaled for D x C ranks, and FSDP reduces the
// gradients over all of them: the step does not depend on C.
#pragma once

#include <ATen/ATen.h>

#include <cereal/types/vector.hpp>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "algorithms/loss_aggregation.h"
#include "algorithms/on_policy_distillation.h"
#include "algorithms/policy_loss.h"
#include "algorithms/value_loss.h"
#include "fsdp/fsdp_transformer.h"
#include "fsdp/packing.h"
#include "fsdp/sharded_adamw.h"

namespace ooze::trainer {

// Which loss a step trains on: --loss-type (Slime's values) for the policy; a critic (a model
// with a value head, models::ModelHead::kValue) trains on the value loss.
enum class LossType { kPolicyLoss, kSftLoss, kValueLoss, kCustomLoss };

// "policy_loss", "sft_loss", "value_loss", "custom_loss".
std::string loss_type_name(LossType type);

struct TrainStepOptions {
  fsdp::PackingOptions packing;
  algorithms::LossAggregation loss_aggregation =
      algorithms::LossAggregation::kSequenceMeanTokenMean;  // --loss-aggregation
  double clip_grad = 1.0;  // --clip-grad; <= 0: no clipping (the norm is still computed)
  LossType loss_type = LossType::kPolicyLoss;  // --loss-type (a critic: kValueLoss)
  algorithms::PolicyLossOptions policy_loss;   // with kPolicyLoss
  algorithms::ValueLossOptions value_loss;     // with kValueLoss
  // --custom-loss-function-path: with kCustomLoss, the user's Python loss (python_loss.h). Its
  // entropy gets a gradient when policy_loss.entropy_coef is not 0.
  std::string custom_loss_function_path;
  // --custom-pg-loss-reducer-function-path: with kPolicyLoss, the user's reducer of pg_loss.
  std::string custom_pg_loss_reducer_function_path;
  // The policy's log-probs are those of softmax(logits / temperature), the distribution the
  // rollouts sampled from (--rollout-temperature), as the old and rollout log-probs are.
  double temperature = 1.0;
  // The algorithm's --use-opd flags: with opd.distills_vocabulary() the policy loss gains the
  // JSD term (then train_step needs a DistillationTeacher).
  algorithms::OpdOptions opd;

  // The batching flags, --loss-aggregation, --loss-type, the two Python loss paths (each refused
  // with another loss type) and --clip-grad. The losses' options and
  // the temperature travel with the struct; their flags are the algorithm's and the rollout's.
  static const OptionFields<TrainStepOptions>& fields();
};

struct TrainStepResult {
  // The step's loss metrics ("loss", ...), reduced over every micro-batch and rank: the same
  // values on every rank.
  std::map<std::string, double> metrics;
  int64_t samples = 0;           // over all ranks
  int64_t loss_tokens = 0;       // response tokens that count, over all ranks
  int64_t micro_batches = 0;     // per rank
  double grad_norm = 0.0;        // global, before clipping
  double lr = 0.0;               // the rate the step took
  bool skipped = false;          // non-finite norm: weights and optimizer state untouched
  double compute_seconds = 0.0;  // the whole step on this rank
  // This rank's memory (TrainActor fills them; the group's wait() keeps the largest rank's):
  int64_t state_bytes = 0;     // its shards of parameters, gradients, optimizer and reference
  int64_t peak_rss_bytes = 0;  // the most resident memory its process held during the step
  template <class A>
  void serialize(A& ar) {
    ar(metrics, samples, loss_tokens, micro_batches, grad_norm, lr, skipped, compute_seconds,
       state_bytes, peak_rss_bytes);
  }
};

// The teacher of the JSD term: for self-distillation the frozen initial policy, a model of its
// own (the reference model) or, with LoRA, the policy itself with its adapters off (the base);
// with --opd-full-vocab the trainer's teacher model.
struct DistillationTeacher {
  fsdp::FsdpTransformer* model = nullptr;
  bool adapters_off = false;
};

// Trains on this rank's `samples` (possibly none) and steps `optimizer` at `lr`. Throws
// ooze::Error naming the sample on malformed samples (packing.h), or when the packing options'
// context_parallel_size is not the model's. With options.opd.distills_vocabulary(), `teacher`
// must be given and the model must not use context parallelism; self-distilling, every sample
// must have a teacher_prompt.
TrainStepResult train_step(fsdp::FsdpTransformer& model, fsdp::ShardedAdamW& optimizer, double lr,
                           const std::vector<fsdp::PackingSample>& samples,
                           const TrainStepOptions& options,
                           const DistillationTeacher& teacher = {});

// Steps 1-5 of train_step, no optimizer step: this rank's share of the step's gradient added to
// the model's gradient shards (for callers that inspect gradients or step on their own). The
// output's grad_norm and skipped stay unset.
TrainStepResult accumulate_gradients(fsdp::FsdpTransformer& model,
                                     const std::vector<fsdp::PackingSample>& samples,
                                     const TrainStepOptions& options,
                                     const DistillationTeacher& teacher = {});

// log p of each response token of each sample under softmax(logits / temperature) (the
// distribution rollouts at that temperature sample from), and with `with_entropy` the entropy
// of that distribution, in the order of `samples`: element i holds [R_i] fp32 values. For the
// policy (a TrainActor) and the frozen reference model alike.
struct ResponseLogProbs {
  std::vector<at::Tensor> log_probs;
  std::vector<at::Tensor> entropy;  // empty unless with_entropy

  template <class A>
  void serialize(A& ar) {
    ar(log_probs, entropy);
  }
};
ResponseLogProbs compute_log_probs(fsdp::FsdpTransformer& model,
                                   const std::vector<fsdp::PackingSample>& samples,
                                   const fsdp::PackingOptions& packing, double temperature = 1.0,
                                   bool with_entropy = false);

// A critic's value of each response token of each sample, in the order of `samples`: element i
// holds [R_i] fp32 values. The value of response token t is read from the hidden state of the
// token before it, the state the policy sampled t from (as its log-prob is). A collective like
// compute_log_probs; the model must have a value head.
std::vector<at::Tensor> compute_values(fsdp::FsdpTransformer& model,
                                       const std::vector<fsdp::PackingSample>& samples,
                                       const fsdp::PackingOptions& packing);

// A sample trained on every token after its first (plain language modelling).
fsdp::PackingSample language_modeling_sample(const std::vector<int64_t>& tokens);

}  // namespace ooze::trainer
