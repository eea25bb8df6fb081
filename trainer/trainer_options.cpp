#include "trainer/trainer_options.h"

namespace ooze::trainer {

const OptionFields<TrainerOptions>& TrainerOptions::fields() {
  using O = TrainerOptions;
  static const OptionFields<O> fields = [] {
    OptionFields<O> f;
    f.include("lr_schedule", &O::lr_schedule, fsdp::LrScheduleOptions::fields());
    f.include("adamw", &O::adamw, fsdp::ShardedAdamWOptions::fields());
    f.include("fsdp", &O::fsdp, fsdp::FsdpTransformerOptions::fields());
    f.include("lora", &O::lora, models::LoraOptions::fields());
    f.include("step", &O::step, TrainStepOptions::fields());
    f.include("distributed", &O::distributed, comm::ProcessGroupOptions::fields());
    f.include("checkpoint", &O::checkpoint, fsdp::CheckpointLoadOptions::fields());
    f.section("checkpoint");
    f.add("load_optim", &O::load_optim,
          "Load the AdamW state; --no-load-optim loads the weights only.");
    f.add_internal("total_iters", &O::total_iters);
    return f;
  }();
  return fields;
}

void add_trainer_fields(ConfigSchema& schema, const TrainerOptions& defaults) {
  TrainerOptions::fields().declare(schema, defaults);
  schema.section("checkpoint");
  schema.add_string("load", "", "Resume from the newest checkpoint in this directory.");
}

TrainerOptions trainer_options_from_config(const Config& config, int64_t total_iters) {
  TrainerOptions options = TrainerOptions::fields().read(config);
  options.total_iters = total_iters;
  // One flag, two readers: the packer deals the batch out to the W / C groups, the model forms
  // its CP groups.
  options.step.packing.context_parallel_size = options.fsdp.context_parallel_size;
  if (options.lora.enabled() && options.lora.dropout > 0 && options.fsdp.activation_checkpointing) {
    // The recomputation in backward would draw other dropout masks than the forward did.
    throw ConfigError(
        "--lora-dropout > 0 cannot be combined with --gradient-checkpointing (the recomputed "
        "forward would drop other inputs); set one of them to 0 / off");
  }
  // The schedule's own checks (warmup inside the decay, WSD length, ...) name the flag.
  fsdp::LrSchedule(options.lr_schedule, total_iters);
  return options;
}

}  // namespace ooze::trainer
