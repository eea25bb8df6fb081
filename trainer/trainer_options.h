// What a TrainActor is configured with, beyond the model: the optimizer and its learning-rate
// schedule, the FSDP options, how checkpoints are loaded, and the fields of the modules its
// step runs (micro-batching from fsdp/packing.h, the loss aggregation from algorithms/, the
// collective group's timeout from comm/process_group.h). Flags carry Megatron's / Slime's
// names where the feature is the same (--lr-decay-style, --adam-beta2, --clip-grad,
// --no-load-optim, ...), so a Slime launcher script's optimizer block reads the same here.
// Defaults are Megatron's (weight decay 0.01, betas 0.9 / 0.999, eps 1e-8, clipping at 1.0),
// with the learning rate and the constant schedule of Slime's RL scripts.
//
//   add_trainer_fields(schema);  // optimizer, fsdp, checkpoint, batching, loss, distributed
//   TrainerOptions options = trainer_options_from_config(config, num_steps);
#pragma once

#include <cstdint>
#include <string>

#include "algorithms/loss_aggregation.h"
#include "algorithms/policy_loss.h"
#include "comm/process_group.h"
#include "core/config.h"
#include "fsdp/lr_schedule.h"
#include "fsdp/packing.h"
#include "models/ring_attention.h"
#include "trainer/train_step.h"

namespace ooze::trainer {

struct TrainerOptions {
  // Optimizer: AdamW over the fp32 shards, global gradient-norm clipping.
  double lr = 1e-6;
  double min_lr = 0.0;
  double lr_warmup_init = 0.0;
  int64_t lr_warmup_iters = 0;
  double lr_warmup_fraction = 0.0;  // > 0 replaces lr_warmup_iters
  int64_t lr_decay_iters = 0;       // 0: the run's total iterations
  std::string lr_decay_style = "constant";
  int64_t lr_wsd_decay_iters = 0;
  std::string lr_wsd_decay_style = "linear";
  int64_t total_iters = 1;  // the run's optimizer steps: the default decay length
  double weight_decay = 0.01;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_eps = 1e-8;
  double clip_grad = 1.0;  // 0 turns clipping off (the norm is still computed and returned)

  // FSDP.
  bool bf16 = false;  // all-gather and compute in bf16 (master weights and moments stay fp32)
  bool reshard_after_forward = true;
  bool prefetch = true;
  bool gradient_checkpointing = false;
  // Context parallelism: --context-parallel-size lives in packing.context_parallel_size (the
  // batch is dealt out to W / C groups); --cp-impl says how attention exchanges keys and values.
  models::ContextParallelImpl cp_impl = models::ContextParallelImpl::kRing;

  // The step: micro-batches, the loss and its normalisation. --loss-type is read here; the
  // policy loss's options (the algorithm section) and the rollouts' temperature (log-probs are
  // taken at it) are the RL loop's to set.
  fsdp::PackingOptions packing;
  algorithms::LossAggregation loss_aggregation =
      algorithms::LossAggregation::kSequenceMeanTokenMean;
  LossType loss_type = LossType::kPolicyLoss;
  algorithms::PolicyLossOptions policy_loss;
  algorithms::ValueLossOptions value_loss;  // a critic's (loss_type kValueLoss)
  double temperature = 1.0;

  // The collective group.
  comm::ProcessGroupOptions distributed;

  // Loading a checkpoint (TrainActor::load).
  int64_t ckpt_step = -1;  // -1: the iteration the tracker names
  bool load_optim = true;
  bool load_rng = true;

  template <class A>
  void serialize(A& ar) {
    ar(lr, min_lr, lr_warmup_init, lr_warmup_iters, lr_warmup_fraction, lr_decay_iters,
       lr_decay_style, lr_wsd_decay_iters, lr_wsd_decay_style, total_iters, weight_decay,
       adam_beta1, adam_beta2, adam_eps, clip_grad);
    ar(bf16, reshard_after_forward, prefetch, gradient_checkpointing, cp_impl);
    ar(packing, loss_aggregation, loss_type, policy_loss, value_loss, temperature, distributed);
    ar(ckpt_step, load_optim, load_rng);
  }
};

// Declares the optimizer, fsdp and checkpoint-loading sections (`lr` among them) and composes
// the batching, loss and distributed sections of the modules the step runs, with the values in
// `defaults` as defaults (TrainerOptions{} holds Slime's).
void add_trainer_fields(ConfigSchema& schema, const TrainerOptions& defaults = {});

// Reads the fields add_trainer_fields declared. Throws ooze::ConfigError naming the flag when
// the schedule or the optimizer settings contradict each other (checked here, before any
// process starts, rather than in every TrainActor).
TrainerOptions trainer_options_from_config(const Config& config, int64_t total_iters);

// The schedule these options describe.
fsdp::LrScheduleOptions lr_schedule_options(const TrainerOptions& options);

}  // namespace ooze::trainer
