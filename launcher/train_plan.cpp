#include "launcher/train_plan.h"

#include <filesystem>

#include "algorithms/algorithm_options.h"
#include "core/error.h"
#include "engine/engine.h"
#include "launcher/engine_supervisor.h"
#include "launcher/slime_flags.h"
#include "launcher/train_data_hooks.h"
#include "models/hf_checkpoint.h"
#include "models/lora.h"
#include "models/model_config.h"
#include "models/transformer.h"
#include "rollout/prompt_source.h"
#include "rollout/reward_model.h"
#include "rollout/rollout_hooks.h"
#include "rollout/rollout_options.h"
#include "trainer/trainer_options.h"
#include "trainer/weight_sync_options.h"

namespace ooze::launcher {
namespace {

ConfigSchema build_train_schema() {
  ConfigSchema schema;
  schema.section("model");
  schema.add_string("hf_checkpoint", "", "Hugging Face model directory: the initial policy.")
      .required();
  schema.add_string("ref_load", "",
                    "Hugging Face model directory of the reference model; empty: the initial "
                    "policy.");
  schema.section("placement");
  schema.add_string("address", "",
                    "HOST:PORT of a cluster started with `ooze start`; empty: $OOZE_ADDRESS, "
                    "else this machine alone (nothing to start).");
  schema.add_int("actor_num_nodes", 1, "Nodes of the trainer.").min(1);
  schema
      .add_int("actor_num_gpus_per_node", 1,
               "Trainer ranks per node (a GPU each; a process slot on the CPU).")
      .min(1);
  schema.add_int("rollout_num_gpus", 1, "GPUs (process slots) of all rollout engines.").min(1);
  schema.add_int("rollout_num_gpus_per_engine", 1, "GPUs of one engine (tensor parallel).").min(1);
  schema.add_bool("colocate", false,
                  "Engines share the trainer ranks' GPUs and receive weights through shared "
                  "memory (CUDA IPC); otherwise they have GPUs of their own and receive weights "
                  "by broadcast.");
  schema.add_enum("offload", {"auto", "on", "off"}, "auto",
                  "Colocated: the trainer and the engines take turns on each GPU (the trainer's "
                  "state in host memory while the engines generate, the engines' memory released "
                  "while it trains). auto: on GPUs, not on CPU slots, which share host memory "
                  "anyway.");
  engine::EngineOptions::launched_engine_fields().declare(schema,
                                                          engine::launched_engine_defaults());
  schema.section("training");
  schema
      .add_int("global_batch_size", 0,
               "Samples per optimizer step; 0: the whole rollout (rollout_batch_size * "
               "n_samples_per_prompt) in one step.")
      .min(0);
  schema
      .add_int("num_steps_per_rollout", 0,
               "Slime's other way to set the batch: the rollout's samples split into this many "
               "optimizer steps (--global-batch-size = rollout_batch_size * "
               "n_samples_per_prompt / N); 0: --global-batch-size decides.")
      .min(0);
  schema.add_bool("use_rollout_logprobs", false,
                  "Use the engines' log-probs as the old policy's instead of recomputing them.");
  schema.section("critic (--advantage-estimator ppo)");
  schema.add_string("critic_load", "",
                    "Hugging Face model directory the critic starts from (a score.weight value "
                    "head, else a zero one); empty: the initial policy with a zero value head.");
  schema.add_double("critic_lr", 0.0, "Peak learning rate of the critic; 0: --lr.").min(0);
  schema.add_int("critic_num_nodes", 1, "Nodes of the critic.").min(1);
  schema
      .add_int("critic_num_gpus_per_node", 1,
               "Critic ranks per node (a GPU each; a process slot on the CPU).")
      .min(1);
  schema
      .add_int("num_critic_only_steps", 0,
               "Rollouts at the start that train the critic alone; the policy stays put.")
      .min(0);
  schema.section("asynchronous training");
  schema.add_bool("async", false,
                  "Generate rollout k+1 while the trainer trains on rollout k (disaggregated "
                  "placement only), syncing the weights after every rollout.");
  schema
      .add_int("max_staleness", 1,
               "With --async: no trained sample has a token from weights more than this many "
               "versions behind the policy it trains.")
      .min(1);
  EngineSupervisorOptions::fields().declare(schema);
  schema.section("fault tolerance");
  schema
      .add_int("max_restarts", 0,
               "Restarts of the job from the last checkpoint (--save) after a trainer rank "
               "dies; 0: it stops.")
      .min(0);
  schema.section("output");
  schema.add_string("output_dir", "runs/train",
                    "Where config.json, metrics.jsonl and tensorboard/ go.");
  schema.add_string("save", "",
                    "Directory of checkpoints (trainer, optimizer, schedule, RNG, rollout id, "
                    "prompt position); --load resumes from it.");
  schema.add_int("save_interval", 0, "Save every N rollouts; 0: only after the last.").min(0);
  schema.add_string("save_hf", "",
                    "Write the final policy here as a Hugging Face model directory (what "
                    "ooze serve and --hf-checkpoint load); with --lora-rank, its PEFT adapter "
                    "directory (ooze serve --lora loads it).");
  schema.add_string("save_hf_merged", "",
                    "With --lora-rank: also write the final policy here with the adapters merged "
                    "in, a plain Hugging Face model directory for engines without LoRA.");
  schema.section("debug");
  schema.add_string("save_debug_rollout_data", "",
                    "Write each rollout's kept samples as JSON lines; {rollout_id} in the path "
                    "is replaced.");
  schema.add_string("load_debug_rollout_data", "",
                    "Train on the samples a run saved with --save-debug-rollout-data instead of "
                    "generating ({rollout_id} replaced); no engine starts.");
  schema.add_bool("debug_rollout_only", false, "Generate and score only: no trainer starts.");
  schema.add_bool("debug_train_only", false,
                  "Train only, on --load-debug-rollout-data or the sft rollout: no engine "
                  "starts.");
  rollout::add_prompt_data_fields(schema);
  rollout::RolloutOptions::fields().declare(schema);
  rollout::RolloutHookOptions::fields().declare(schema);
  TrainDataHookOptions::fields().declare(schema);
  rollout::RewardOptions::fields().declare(schema);
  rollout::add_eval_fields(schema);
  algorithms::add_algorithm_fields(schema);
  trainer::add_trainer_fields(schema);
  trainer::WeightSyncOptions::fields().declare(schema);
  add_slime_flags(schema);
  schema.add_check("debug_modes", [](const Config& c) -> std::string {
    const bool loads = !c.get<std::string>("load_debug_rollout_data").empty();
    const bool sft = c.get<std::string>("rollout_function_path") == "sft";
    if (c.get<bool>("debug_rollout_only") && (loads || sft || c.get<bool>("debug_train_only"))) {
      return "--debug-rollout-only trains nothing: drop --debug-train-only, "
             "--load-debug-rollout-data and --rollout-function-path sft";
    }
    if (loads && sft) {
      return "--load-debug-rollout-data and --rollout-function-path sft both say where the "
             "samples come from: keep one";
    }
    if (c.get<bool>("debug_train_only") && !loads && !sft) {
      return "--debug-train-only starts no engine: give --load-debug-rollout-data or "
             "--rollout-function-path sft";
    }
    return "";
  });
  schema.add_check("rollout_num_gpus_per_engine", [](const Config& c) -> std::string {
    if (c.get<int64_t>("rollout_num_gpus_per_engine") != 1) {
      return "--rollout-num-gpus-per-engine must be 1: engines are not tensor parallel yet";
    }
    return "";
  });
  return schema;
}

// The teacher scores the student's token ids: the two must share a vocabulary.
void check_teacher_vocabulary(const std::string& teacher, const std::string& student) {
  const int64_t teacher_vocab = models::load_model_config(teacher).vocab_size;
  const int64_t student_vocab = models::load_model_config(student).vocab_size;
  if (teacher_vocab != student_vocab) {
    throw ConfigError("--opd-teacher-hf-checkpoint " + teacher + " has a vocabulary of " +
                      std::to_string(teacher_vocab) + " tokens (config.json vocab_size), the " +
                      "student (--hf-checkpoint " + student + ") " + std::to_string(student_vocab) +
                      ": on-policy distillation scores the student's token ids, so the two must "
                      "share a tokenizer");
  }
}

}  // namespace

int TrainPlan::first_engine_bundle() const { return with_trainers && !colocate ? world_size : 0; }

int TrainPlan::gpus_needed() const {
  const int trainer = with_trainers ? world_size : 0;
  const int engines = with_engines() ? num_engines : 0;
  return (colocate && with_trainers ? std::max(trainer, engines) : trainer + engines) +
         num_teacher_engines;
}

TrainPlan TrainPlan::resolve(const Config& config, int64_t num_prompts) {
  TrainPlan plan;
  plan.actor_num_nodes = static_cast<int>(config.get<int64_t>("actor_num_nodes"));
  plan.actor_gpus_per_node = static_cast<int>(config.get<int64_t>("actor_num_gpus_per_node"));
  plan.world_size = plan.actor_num_nodes * plan.actor_gpus_per_node;
  const int64_t rollout_gpus = config.get<int64_t>("rollout_num_gpus");
  plan.num_engines =
      static_cast<int>(rollout_gpus / config.get<int64_t>("rollout_num_gpus_per_engine"));
  plan.colocate = config.get<bool>("colocate");
  plan.offload = config.get<std::string>("offload");
  plan.with_trainers = !config.get<bool>("debug_rollout_only");
  if (!config.get<std::string>("load_debug_rollout_data").empty()) {
    plan.source = RolloutSource::kDebugData;
  } else if (config.get<std::string>("rollout_function_path") == "sft") {
    plan.source = RolloutSource::kSft;
  }
  if (plan.colocate && plan.with_trainers && rollout_gpus > plan.world_size) {
    throw ConfigError("--colocate puts the engines on the trainer's " +
                      std::to_string(plan.world_size) + " GPUs (--actor-num-nodes * " +
                      "--actor-num-gpus-per-node), but --rollout-num-gpus asks for " +
                      std::to_string(rollout_gpus) + ": lower it or add trainer GPUs");
  }

  const int64_t batch_size = config.get<int64_t>("rollout_batch_size");
  const int64_t n_samples =
      plan.source == RolloutSource::kSft ? 1 : config.get<int64_t>("n_samples_per_prompt");
  if (plan.source == RolloutSource::kSft && config.get<int64_t>("n_samples_per_prompt") != 1) {
    throw ConfigError(
        "--rollout-function-path sft makes one sample per prompt (its label): "
        "set --n-samples-per-prompt 1");
  }
  plan.num_rollout = rollout::num_rollouts(config, num_prompts, batch_size);
  plan.rollout_samples = batch_size * n_samples;
  const int64_t given_batch_size = config.get<int64_t>("global_batch_size");
  plan.global_batch_size = given_batch_size > 0 ? given_batch_size : plan.rollout_samples;
  // Slime's --num-steps-per-rollout says the same thing from the other side.
  if (const int64_t steps = config.get<int64_t>("num_steps_per_rollout"); steps > 0) {
    const std::string samples = "a rollout's " + std::to_string(plan.rollout_samples) +
                                " samples (--rollout-batch-size * --n-samples-per-prompt)";
    if (plan.rollout_samples % steps != 0) {
      throw ConfigError("--num-steps-per-rollout " + std::to_string(steps) + " does not divide " +
                        samples);
    }
    const int64_t derived = plan.rollout_samples / steps;
    if (given_batch_size > 0 && given_batch_size != derived) {
      throw ConfigError("--num-steps-per-rollout " + std::to_string(steps) +
                        " means --global-batch-size " + std::to_string(derived) + " (" + samples +
                        " in " + std::to_string(steps) + " steps), but --global-batch-size is " +
                        std::to_string(given_batch_size) + ": keep one");
    }
    plan.global_batch_size = derived;
  }
  if (plan.rollout_samples % plan.global_batch_size != 0) {
    throw ConfigError("--global-batch-size " + std::to_string(plan.global_batch_size) +
                      " does not divide a rollout's " + std::to_string(plan.rollout_samples) +
                      " samples (--rollout-batch-size * --n-samples-per-prompt)");
  }
  plan.steps_per_rollout = plan.rollout_samples / plan.global_batch_size;
  // The C ranks of a context-parallel group share their samples: the batch is dealt over the
  // world_size / C data-parallel groups.
  const int64_t cp_size = config.get<int64_t>("context_parallel_size");
  if (plan.with_trainers && plan.world_size % cp_size != 0) {
    throw ConfigError("--context-parallel-size " + std::to_string(cp_size) +
                      " does not divide the " + std::to_string(plan.world_size) +
                      " trainer ranks (--actor-num-nodes * --actor-num-gpus-per-node)");
  }
  const int64_t dp_size = plan.world_size / cp_size;
  if (plan.with_trainers && plan.global_batch_size < dp_size) {
    throw ConfigError("--global-batch-size " + std::to_string(plan.global_batch_size) +
                      " is smaller than the " + std::to_string(dp_size) +
                      " data-parallel groups of trainer ranks: every group needs a sample per "
                      "step");
  }

  const algorithms::AlgorithmOptions algorithm = algorithms::AlgorithmOptions::from_config(config);
  plan.needs_reference =
      plan.with_trainers && (algorithm.policy_loss.use_kl_loss || algorithm.advantage.kl_coef != 0);
  plan.use_rollout_logprobs = config.get<bool>("use_rollout_logprobs");
  if (plan.source == RolloutSource::kSft) {
    if (config.get<std::string>("loss_type") != "sft_loss") {
      throw ConfigError(
          "--rollout-function-path sft makes samples without rewards, which the "
          "policy loss cannot learn from: add --loss-type sft_loss");
    }
    if (plan.use_rollout_logprobs || plan.needs_reference) {
      throw ConfigError(
          "--rollout-function-path sft samples were not generated: drop "
          "--use-rollout-logprobs, --use-kl-loss and --kl-coef");
    }
  }

  if (algorithm.opd.use_opd) {
    if (plan.source == RolloutSource::kSft || !plan.with_trainers) {
      throw ConfigError(
          "--use-opd distills into a policy trained on its own rollouts: it needs trainers and "
          "generated samples");
    }
    const std::string& teacher = algorithm.opd.teacher_hf_checkpoint;
    if (!teacher.empty()) {
      check_model_directory(teacher, "--opd-teacher-hf-checkpoint");
      check_teacher_vocabulary(teacher, config.get<std::string>("hf_checkpoint"));
    }
    if (algorithm.opd.launches_teacher_engines()) {
      plan.num_teacher_engines = static_cast<int>(algorithm.opd.teacher_num_engines);
    }
  }
  plan.self_distills = algorithm.opd.self_distills();
  if (algorithm.opd.distills_vocabulary()) {
    const std::string flags =
        plan.self_distills ? "--opd-type self" : "--opd-type trainer --opd-full-vocab";
    // The teacher's vocabulary log-probs at a micro-batch's response tokens are that
    // micro-batch's own: they are not split over context-parallel ranks.
    if (cp_size > 1) {
      throw ConfigError(flags + " does not run with --context-parallel-size " +
                        std::to_string(cp_size) + " yet: use 1");
    }
    if (config.get<std::string>("loss_type") != "policy_loss") {
      throw ConfigError(flags + " adds its JSD to the policy loss: --loss-type " +
                        config.get<std::string>("loss_type") + " has none");
    }
  }
  if (plan.self_distills &&
      !config.get<std::string>("custom_convert_samples_to_train_data_path").empty()) {
    throw ConfigError(
        "--opd-type self shows the teacher each sample's privileged information: it cannot "
        "follow --custom-convert-samples-to-train-data-path's samples back to theirs");
  }
  if (plan.needs_reference && !config.get<std::string>("ref_load").empty()) {
    check_model_directory(config.get<std::string>("ref_load"), "--ref-load");
  }
  if (!config.get<std::string>("save_hf_merged").empty() &&
      !models::LoraOptions::fields().read(config).enabled()) {
    throw ConfigError(
        "--save-hf-merged merges LoRA adapters into the base: without --lora-rank, --save-hf "
        "writes the whole model");
  }

  plan.with_critic =
      plan.with_trainers && algorithm.advantage.estimator == algorithms::AdvantageEstimator::kPpo;
  if (plan.with_critic) {
    plan.critic_world_size = static_cast<int>(config.get<int64_t>("critic_num_nodes") *
                                              config.get<int64_t>("critic_num_gpus_per_node"));
    if (plan.source == RolloutSource::kSft) {
      throw ConfigError(
          "--advantage-estimator ppo trains a critic on rewards, which the sft rollout does not "
          "have: use another estimator with --rollout-function-path sft");
    }
    if (plan.critic_world_size % cp_size != 0 ||
        plan.global_batch_size < plan.critic_world_size / cp_size) {
      throw ConfigError("the critic's " + std::to_string(plan.critic_world_size) +
                        " ranks (--critic-num-nodes * --critic-num-gpus-per-node) must be a "
                        "multiple of --context-parallel-size " +
                        std::to_string(cp_size) +
                        " with a sample per data-parallel group in --global-batch-size " +
                        std::to_string(plan.global_batch_size));
    }
    if (!config.get<std::string>("critic_load").empty()) {
      check_model_directory(config.get<std::string>("critic_load"), "--critic-load");
    }
  }

  plan.async_training = config.get<bool>("async");
  plan.max_staleness = config.get<int64_t>("max_staleness");
  if (plan.async_training) {
    if (!plan.with_engines() || !plan.with_trainers) {
      throw ConfigError(
          "--async overlaps the engines' generation with training: it needs both (drop "
          "--debug-rollout-only, --debug-train-only, --load-debug-rollout-data and "
          "--rollout-function-path sft, or --async)");
    }
    if (plan.colocate) {
      throw ConfigError(
          "--async generates while the trainer trains, so the engines need GPUs of their own: "
          "drop --colocate (or --async)");
    }
  }
  plan.fault_tolerance = config.get<bool>("use_fault_tolerance");
  plan.max_restarts = config.get<int64_t>("max_restarts");
  if (plan.max_restarts > 0 && config.get<std::string>("save").empty()) {
    throw ConfigError("--max-restarts " + std::to_string(plan.max_restarts) +
                      " restarts the job from its last checkpoint: give --save DIR (and a "
                      "--save-interval)");
  }
  return plan;
}

// A Hugging Face model directory holds config.json and safetensors weights; anything else is
// refused here rather than by the first trainer rank or engine that tries to load it.
void check_model_directory(const std::string& dir, const std::string& flag) {
  namespace fs = std::filesystem;
  const std::string what_to_give =
      ": give a Hugging Face model directory (config.json, *.safetensors, tokenizer.json); "
      "`ooze model init` makes one, --save-hf exports one";
  if (!fs::is_directory(dir))
    throw ConfigError(flag + " " + dir + " is not a directory" + what_to_give);
  if (!fs::exists(fs::path(dir) / "config.json")) {
    throw ConfigError(flag + " " + dir + " has no config.json" + what_to_give);
  }
  models::load_model_config(dir);  // names what is wrong in config.json
  bool has_weights = false;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    has_weights |= entry.path().extension() == ".safetensors";
  }
  if (!has_weights) {
    throw ConfigError(flag + " " + dir + " has no *.safetensors weights" + what_to_give);
  }
  // The headers only (the files are mapped, not read): a truncated or malformed file, an index
  // naming a missing shard, or a config.json whose shapes are not the weights' is refused before
  // any worker starts to load it. The model's parameters are allocated but never touched: no
  // page of them is resident, whatever the model's size.
  try {
    models::check_hf_weights(*models::TransformerModel(models::load_model_config(dir)), dir);
  } catch (const Error& e) {
    throw ConfigError(flag + " " + dir + ": " + e.what());
  }
}

const ConfigSchema& train_schema() {
  static const ConfigSchema schema = build_train_schema();
  return schema;
}

}  // namespace ooze::launcher
