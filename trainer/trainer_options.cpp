#include "trainer/trainer_options.h"

#include "fsdp/lr_schedule.h"

namespace ooze::trainer {

void add_trainer_fields(ConfigSchema& schema, const TrainerOptions& defaults) {
  schema.section("optimizer");
  schema.add_double("lr", defaults.lr, "Peak learning rate of AdamW.").greater_than(0);
  schema.add_double("min_lr", defaults.min_lr, "Learning rate the decay ends at.").min(0);
  schema.add_enum("lr_decay_style", {"constant", "linear", "cosine", "WSD"},
                  defaults.lr_decay_style,
                  "Decay after warmup (Megatron's OptimizerParamScheduler).");
  schema
      .add_int("lr_warmup_iters", defaults.lr_warmup_iters,
               "Linear warmup length in optimizer steps.")
      .min(0);
  schema
      .add_double("lr_warmup_fraction", defaults.lr_warmup_fraction,
                  "Warmup as a fraction of the decay steps; > 0 replaces --lr-warmup-iters.")
      .min(0)
      .max(1);
  schema.add_double("lr_warmup_init", defaults.lr_warmup_init, "Learning rate warmup starts from.")
      .min(0);
  schema
      .add_int("lr_decay_iters", defaults.lr_decay_iters,
               "Decay length in optimizer steps; 0: the whole run.")
      .min(0);
  schema
      .add_int("lr_wsd_decay_iters", defaults.lr_wsd_decay_iters, "WSD: steps of the final decay.")
      .min(0);
  schema.add_enum("lr_wsd_decay_style", {"linear", "cosine", "exponential", "minus_sqrt"},
                  defaults.lr_wsd_decay_style, "WSD: shape of the final decay.");
  schema.add_double("weight_decay", defaults.weight_decay, "Decoupled weight decay of AdamW.")
      .min(0);
  schema.add_double("adam_beta1", defaults.adam_beta1, "AdamW beta1.").min(0).less_than(1);
  schema.add_double("adam_beta2", defaults.adam_beta2, "AdamW beta2.").min(0).less_than(1);
  schema.add_double("adam_eps", defaults.adam_eps, "AdamW epsilon.").min(0);
  schema
      .add_double("clip_grad", defaults.clip_grad,
                  "Clip the global gradient norm to this; 0 turns clipping off. A non-finite "
                  "norm skips the step either way.")
      .min(0);

  schema.section("fsdp");
  schema.add_bool("bf16", defaults.bf16,
                  "All-gather and compute in bf16; master weights, gradients and AdamW state "
                  "stay fp32.");
  schema.add_bool("reshard_after_forward", defaults.reshard_after_forward,
                  "Free each layer's gathered parameters after its forward and gather them "
                  "again for backward (ZeRO-3); --no-reshard-after-forward keeps them (ZeRO-2).");
  schema.add_bool("prefetch", defaults.prefetch,
                  "Gather the next layer's parameters while the current one computes.");
  schema.add_bool("gradient_checkpointing", defaults.gradient_checkpointing,
                  "Recompute each decoder layer's activations in backward instead of keeping "
                  "them.");
  schema
      .add_int("context_parallel_size", defaults.packing.context_parallel_size,
               "Context parallelism: groups of this many trainer ranks share every micro-batch, "
               "each holding 1/C of its tokens (--max-tokens-per-gpu then counts a rank's "
               "share); must divide the trainer's world size.")
      .min(1);
  schema.add_enum("cp_impl", {"ring", "allgather"},
                  models::context_parallel_impl_name(defaults.cp_impl),
                  "How context-parallel attention gets the other ranks' keys and values: passed "
                  "around a ring while computing, or all-gathered at once.");

  schema.section("checkpoint");
  schema.add_string("load", "", "Resume from the newest checkpoint in this directory.");
  schema
      .add_int("ckpt_step", defaults.ckpt_step,
               "Load this iteration instead of the newest; -1: the newest.")
      .min(-1);
  schema.add_bool("load_optim", defaults.load_optim,
                  "Load the AdamW state; --no-load-optim loads the weights only.");
  schema.add_bool("load_rng", defaults.load_rng,
                  "Restore each rank's RNG state; --no-load-rng skips it.");

  fsdp::add_batching_fields(schema, defaults.packing);
  algorithms::add_loss_aggregation_field(schema, defaults.loss_aggregation);
  schema.add_enum("loss_type", {"policy_loss", "sft_loss"},
                  defaults.loss_type == LossType::kSftLoss ? "sft_loss" : "policy_loss",
                  "What the trainer minimises: the RL policy loss (algorithm section) or the "
                  "supervised loss on response tokens.");
  comm::add_distributed_fields(schema, defaults.distributed);
}

fsdp::LrScheduleOptions lr_schedule_options(const TrainerOptions& options) {
  fsdp::LrScheduleOptions lr;
  lr.lr = options.lr;
  lr.min_lr = options.min_lr;
  lr.warmup_init_lr = options.lr_warmup_init;
  lr.warmup_iters = options.lr_warmup_iters;
  if (options.lr_warmup_fraction > 0) lr.warmup_fraction = options.lr_warmup_fraction;
  if (options.lr_decay_iters > 0) lr.decay_iters = options.lr_decay_iters;
  lr.decay_style = fsdp::parse_lr_decay_style(options.lr_decay_style);
  lr.wsd_decay_iters = options.lr_wsd_decay_iters;
  lr.wsd_decay_style = fsdp::parse_wsd_decay_style(options.lr_wsd_decay_style);
  return lr;
}

TrainerOptions trainer_options_from_config(const Config& config, int64_t total_iters) {
  TrainerOptions options;
  options.lr = config.get<double>("lr");
  options.min_lr = config.get<double>("min_lr");
  options.lr_warmup_init = config.get<double>("lr_warmup_init");
  options.lr_warmup_iters = config.get<int64_t>("lr_warmup_iters");
  options.lr_warmup_fraction = config.get<double>("lr_warmup_fraction");
  options.lr_decay_iters = config.get<int64_t>("lr_decay_iters");
  options.lr_decay_style = config.get<std::string>("lr_decay_style");
  options.lr_wsd_decay_iters = config.get<int64_t>("lr_wsd_decay_iters");
  options.lr_wsd_decay_style = config.get<std::string>("lr_wsd_decay_style");
  options.total_iters = total_iters;
  options.weight_decay = config.get<double>("weight_decay");
  options.adam_beta1 = config.get<double>("adam_beta1");
  options.adam_beta2 = config.get<double>("adam_beta2");
  options.adam_eps = config.get<double>("adam_eps");
  options.clip_grad = config.get<double>("clip_grad");
  options.bf16 = config.get<bool>("bf16");
  options.reshard_after_forward = config.get<bool>("reshard_after_forward");
  options.prefetch = config.get<bool>("prefetch");
  options.gradient_checkpointing = config.get<bool>("gradient_checkpointing");
  options.packing = fsdp::PackingOptions::from_config(config);
  options.packing.context_parallel_size = config.get<int64_t>("context_parallel_size");
  options.cp_impl = models::context_parallel_impl_from_name(config.get<std::string>("cp_impl"));
  options.loss_aggregation =
      algorithms::parse_loss_aggregation(config.get<std::string>("loss_aggregation"));
  options.loss_type = config.get<std::string>("loss_type") == "sft_loss" ? LossType::kSftLoss
                                                                         : LossType::kPolicyLoss;
  options.distributed = comm::ProcessGroupOptions::from_config(config);
  options.ckpt_step = config.get<int64_t>("ckpt_step");
  options.load_optim = config.get<bool>("load_optim");
  options.load_rng = config.get<bool>("load_rng");
  // The schedule's own checks (warmup inside the decay, WSD length, ...) name the flag.
  fsdp::LrSchedule(lr_schedule_options(options), total_iters);
  return options;
}

}  // namespace ooze::trainer
