// What a TrainActor is configured with, beyond the model: the optimizer and its learning-rate
// schedule, the FSDP options, how checkpoints are loaded, and the fields of the modules its
// step runs (micro-batching from fsdp/packing.h, the loss aggregation from algorithms/, the
// collective group's timeout from comm/process_group.h). Flags carry Megatron's / Slime's
// names where the feature is the same (--lr-decay-style, --adam-beta2, --clip-grad,
// --no-load-optim, ...), so a Slime launcher script's optimizer block reads the same here.
// Defaults are Megatron's (weight decay 0.01, betas 0.9 / 0.999, eps 1e-8, clipping at 1.0),
// with the learning rate and the constant schedule of Slime's RL scripts.
//
// Each part is the options struct of the module it configures, filled by that module's own field
// list (core/option_fields.h), so TrainActor hands each module its part as it is.
//
//   add_trainer_fields(schema);  // optimizer, fsdp, checkpoint, batching, loss, distributed
//   TrainerOptions options = trainer_options_from_config(config, num_steps);
//   fsdp::ShardedAdamW optimizer(model.sharded(), options.adamw);
#pragma once

#include <cstdint>
#include <string>

#include "comm/process_group.h"
#include "core/option_fields.h"
#include "fsdp/checkpoint.h"
#include "fsdp/fsdp_transformer.h"
#include "fsdp/lr_schedule.h"
#include "fsdp/sharded_adamw.h"
#include "models/lora.h"
#include "trainer/train_step.h"

namespace ooze::trainer {

struct TrainerOptions {
  fsdp::LrScheduleOptions lr_schedule;  // --lr, --min-lr, --lr-decay-style, warmup, WSD
  fsdp::ShardedAdamWOptions adamw;      // --adam-beta1, --adam-beta2, --adam-eps, --weight-decay
  // --bf16, --reshard-after-forward, --prefetch, --gradient-checkpointing,
  // --context-parallel-size, --cp-impl
  fsdp::FsdpTransformerOptions fsdp;
  // --lora-rank, --lora-alpha, --lora-dropout, --target-modules, --lora-load: train a LoRA
  // adapter on the frozen base instead of the full model.
  models::LoraOptions lora;
  // Batching, --loss-aggregation, --loss-type, --clip-grad. The policy loss's options (the
  // algorithm section) and the rollouts' temperature (log-probs are taken at it) are the RL
  // loop's to set.
  TrainStepOptions step;
  comm::ProcessGroupOptions distributed;  // --distributed-timeout-minutes
  // Loading a checkpoint (TrainActor::load): --ckpt-step, --load-rng, and --no-load-optim.
  fsdp::CheckpointLoadOptions checkpoint;
  bool load_optim = true;
  int64_t total_iters = 1;  // the run's optimizer steps: the default decay length

  static const OptionFields<TrainerOptions>& fields();

  template <class A>
  void save(A& ar) const {
    save_options(ar, *this);
  }
  template <class A>
  void load(A& ar) {
    load_options(ar, *this);
  }
};

// Declares the fields of TrainerOptions, with the values in `defaults` as defaults
// (TrainerOptions{} holds Slime's), and --load.
void add_trainer_fields(ConfigSchema& schema, const TrainerOptions& defaults = {});

// Reads the fields add_trainer_fields declared. Throws ooze::ConfigError naming the flag when
// the schedule or the optimizer settings contradict each other (checked here, before any
// process starts, rather than in every TrainActor).
TrainerOptions trainer_options_from_config(const Config& config, int64_t total_iters);

}  // namespace ooze::trainer
