#include "launcher/experiment_config.h"

#include <sstream>
#include <string>

namespace ooze::launcher {
namespace {

// To add a field: declare it in the section it belongs to (or a new add_*_fields function
// called from build_schema), with Slime's name where the feature is the same, and put any
// check that relates it to other fields right after it.

void add_run_fields(ConfigSchema& schema) {
  schema.section("run");
  schema.add_int("seed", 1234, "Random seed for initialization and data generation.");
  schema.add_string("output_dir", "runs/default",
                    "Directory for the effective config, metrics and checkpoints.");
  schema.add_enum("log_level", {"debug", "info", "warn", "error"}, "info",
                  "Lowest level of log lines printed to stderr.");
}

void add_comm_fields(ConfigSchema& schema) {
  schema.section("comm");
  schema.add_enum("comm_backend", {"gloo", "nccl"}, "gloo",
                  "Collective backend: gloo (CPU tensors) or nccl (CUDA tensors).");
  schema
      .add_double("comm_timeout_seconds", 300,
                  "Timeout of rendezvous and of every collective, in seconds.")
      .greater_than(0);
  schema.add_int("world_size", 2, "Number of training processes (data-parallel ranks).").min(1);
}

void add_train_fields(ConfigSchema& schema) {
  schema.section("train");
  schema.add_int("num_steps", 50, "Optimizer steps to run.").min(1);
  schema.add_double("lr", 0.05, "Learning rate.").greater_than(0);
  schema.add_int("global_batch_size", 64, "Samples per optimizer step, summed over all ranks.")
      .min(1);
  schema
      .add_int("micro_batch_size", 16,
               "Samples per forward/backward pass on one rank; gradients accumulate over "
               "global_batch_size / (world_size * micro_batch_size) passes per step.")
      .min(1);
  schema.add_int("save_interval", 0, "Save a checkpoint every N steps; 0 saves only at the end.")
      .min(0);

  schema.add_check("global_batch_size_divisible_by_world_size", [](const Config& c) {
    int64_t batch = c.get<int64_t>("global_batch_size");
    int64_t world = c.get<int64_t>("world_size");
    if (batch % world == 0) return std::string();
    return "global_batch_size = " + std::to_string(batch) +
           " is not divisible by world_size = " + std::to_string(world) +
           ": every rank must get the same number of samples";
  });
  schema.add_check("global_batch_size_divisible_by_micro_batches", [](const Config& c) {
    int64_t batch = c.get<int64_t>("global_batch_size");
    int64_t world = c.get<int64_t>("world_size");
    int64_t micro = c.get<int64_t>("micro_batch_size");
    if (batch % world != 0) return std::string();  // reported by the check above
    if (batch % (world * micro) == 0) return std::string();
    return "global_batch_size = " + std::to_string(batch) +
           " is not divisible by world_size * micro_batch_size = " + std::to_string(world) + " * " +
           std::to_string(micro) + " = " + std::to_string(world * micro) + ": each rank's " +
           std::to_string(batch / world) + " samples must split into whole micro-batches";
  });
}

// RL algorithms (algorithms/algorithm_options.h reads these) and the batch layout of training
// (fsdp/packing.h reads the "batching" section). Slime's names and defaults.
void add_algorithm_fields(ConfigSchema& schema) {
  schema.section("algorithm");
  schema.add_enum("advantage_estimator",
                  {"grpo", "gspo", "cispo", "rloo", "reinforce_plus_plus",
                   "reinforce_plus_plus_baseline", "ppo"},
                  "grpo",
                  "Advantage estimator; gspo and cispo use grpo's advantages with the GSPO "
                  "(sequence-level ratio) and CISPO policy losses.");
  schema.add_bool("disable_rewards_normalization", false,
                  "Do not subtract the group mean reward (grpo, gspo, cispo, "
                  "reinforce_plus_plus_baseline).");
  schema.add_bool("disable_grpo_std_normalization", false,
                  "Do not divide by the group's reward std (Dr.GRPO).");
  schema.add_bool("normalize_advantages", false,
                  "Whiten advantages over the step's response tokens across data-parallel ranks "
                  "(always done for the reinforce_plus_plus estimators).");
  schema.add_double("gamma", 1.0, "Discount of ppo (GAE) and reinforce_plus_plus returns.")
      .min(0)
      .max(1);
  schema.add_double("lambd", 1.0, "GAE lambda of ppo.").min(0).max(1);
  schema
      .add_double("kl_coef", 0.0,
                  "KL penalty in the token rewards (ppo, reinforce_plus_plus estimators).")
      .min(0);
  schema.add_bool("use_kl_loss", false, "Add KL(policy || reference) to the loss (GRPO).");
  schema.add_double("kl_loss_coef", 0.0, "Coefficient of the KL loss.").min(0);
  schema.add_enum("kl_loss_type", {"k1", "k2", "k3", "low_var_kl"}, "k1",
                  "KL estimator of the KL loss and of the kl_coef reward penalty.");
  schema.add_bool("use_unbiased_kl", false,
                  "Weight the KL loss by the current/old policy ratio (unbiased KL).");
  schema.add_double("eps_clip", 0.2, "PPO clip: the ratio's lower bound is 1 - eps_clip.")
      .greater_than(0);
  schema
      .add_double("eps_clip_high", 0.0,
                  "PPO clip: the ratio's upper bound is 1 + eps_clip_high (DAPO's clip-higher); "
                  "0 means eps_clip.")
      .min(0);
  schema
      .add_double("eps_clip_c", 0.0,
                  "Dual-clip PPO bound (> 1) on the loss of negative advantages; 0 turns it off.")
      .min(0);
  schema.add_double("entropy_coef", 0.0, "Entropy bonus coefficient.").min(0);
  schema.add_bool("use_tis", false,
                  "Weight the policy loss by the train/inference importance ratio (TIS).");
  schema.add_double("tis_clip", 2.0, "Upper bound of the TIS ratio.").greater_than(0);
  schema.add_double("tis_clip_low", 0.0, "Lower bound of the TIS ratio.").min(0);
  schema.add_enum("tis_level", {"token", "sequence", "geometric"}, "token",
                  "TIS ratio per token, per sequence (product), or per sequence geometric mean.");
  schema.add_enum("tis_mode", {"clip", "mask"}, "clip",
                  "Ratios outside the TIS bounds are clipped (truncated IS) or masked (icepop).");
  schema.add_bool("get_mismatch_metrics", false,
                  "Log train/inference log-prob mismatch metrics without --use-tis.");
  schema.add_bool("use_opsm", false,
                  "Off-policy sequence masking: drop negative-advantage samples whose policy "
                  "drifted by more than opsm_delta.");
  schema.add_double("opsm_delta", 1e-4, "OPSM threshold on the mean old/current log-ratio.").min(0);
  schema.add_double("value_clip", 0.2, "Clip of the critic's value change (ppo).").greater_than(0);
  schema.add_enum("loss_aggregation", {"token-mean", "seq-mean-token-mean", "seq-mean-token-sum"},
                  "seq-mean-token-mean",
                  "Loss normalisation over the step: per token, mean of per-sample means, or "
                  "mean of per-sample sums (Dr.GRPO).");

  // Shortest form of a double ("0.1", not std::to_string's "0.100000").
  auto text = [](double value) {
    std::ostringstream out;
    out << value;
    return out.str();
  };
  schema.add_check("kl_loss_or_kl_reward_penalty", [text](const Config& c) {
    if (!c.get<bool>("use_kl_loss") || c.get<double>("kl_coef") == 0) return std::string();
    return "use_kl_loss = true together with kl_coef = " + text(c.get<double>("kl_coef")) +
           ": the KL is either a loss term (--use-kl-loss --kl-loss-coef) or a reward penalty "
           "(--kl-coef), never both; drop one of them";
  });
  schema.add_check("kl_coef_needs_token_rewards", [text](const Config& c) {
    std::string estimator = c.get<std::string>("advantage_estimator");
    if (c.get<double>("kl_coef") == 0 || estimator == "ppo" || estimator == "reinforce_plus_plus" ||
        estimator == "reinforce_plus_plus_baseline") {
      return std::string();
    }
    return "kl_coef = " + text(c.get<double>("kl_coef")) +
           " has no effect with advantage_estimator = " + estimator +
           ": only ppo and the reinforce_plus_plus estimators put a KL penalty in the rewards; "
           "use --use-kl-loss --kl-loss-coef instead";
  });
  schema.add_check("kl_loss_options_need_use_kl_loss", [text](const Config& c) {
    if (c.get<bool>("use_kl_loss")) return std::string();
    if (c.get<double>("kl_loss_coef") != 0) {
      return "kl_loss_coef = " + text(c.get<double>("kl_loss_coef")) +
             " has no effect without use_kl_loss = true: add --use-kl-loss";
    }
    if (c.get<bool>("use_unbiased_kl")) {
      return std::string(
          "use_unbiased_kl = true has no effect without use_kl_loss = true: add --use-kl-loss");
    }
    return std::string();
  });
  schema.add_check("eps_clip_c_above_one", [text](const Config& c) {
    double bound = c.get<double>("eps_clip_c");
    if (bound == 0 || bound > 1) return std::string();
    return "eps_clip_c = " + text(bound) +
           " must be > 1 (dual-clip caps the loss at -eps_clip_c * advantage), or 0 to turn "
           "dual clip off";
  });
  schema.add_check("tis_clip_low_below_tis_clip", [text](const Config& c) {
    double low = c.get<double>("tis_clip_low"), high = c.get<double>("tis_clip");
    if (low < high) return std::string();
    return "tis_clip_low = " + text(low) + " must be below tis_clip = " + text(high);
  });

  schema.section("batching");
  schema
      .add_int("max_tokens_per_gpu", 16384,
               "Token budget of one micro-batch with use_dynamic_batch_size; a longer sample "
               "gets a micro-batch of its own.")
      .min(1);
  schema.add_bool("use_dynamic_batch_size", false,
                  "Fill micro-batches up to max_tokens_per_gpu instead of micro_batch_size "
                  "samples.");
  schema.add_bool("balance_data", false,
                  "Balance token counts across data-parallel ranks (Karmarkar-Karp) instead of "
                  "dealing samples round robin.");
}

// The foundation demo: data-parallel linear regression over comm + safetensors + metrics.
void add_demo_fields(ConfigSchema& schema) {
  schema.section("demo");
  schema.add_int("feature_dim", 16, "Input features of the demo's linear-regression model.").min(1);
}

ConfigSchema build_schema() {
  ConfigSchema schema;
  add_run_fields(schema);
  add_comm_fields(schema);
  add_train_fields(schema);
  add_algorithm_fields(schema);
  add_demo_fields(schema);
  return schema;
}

}  // namespace

const ConfigSchema& experiment_schema() {
  static const ConfigSchema schema = build_schema();
  return schema;
}

}  // namespace ooze::launcher
