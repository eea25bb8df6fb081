#include "launcher/slime_flags.h"

#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace ooze::launcher {
namespace {

using Sets = std::vector<std::pair<std::string, nlohmann::json>>;

const char* const kSection = "Slime's spellings";

// A Slime flag ooze takes with Slime's meaning, and the fields it sets.
struct SlimeAlias {
  std::string name;
  FieldType type = FieldType::kBool;
  std::string doc;
  std::vector<std::string> needs = {};  // fields the command must have for the flag to mean it
  AliasExpansion expand = {};
  std::optional<double> min = {};
};

// A flag of Slime's that only states what ooze does anyway: `true` (or 0 for a number) is
// accepted and sets nothing; anything else is refused with `why`.
AliasExpansion always(const std::string& why) {
  return [why](const nlohmann::json& value) -> Sets {
    if (value == true || (value.is_number() && value.get<double>() == 0.0)) return {};
    throw ConfigError(why);
  };
}

const std::vector<SlimeAlias>& slime_aliases() {
  static const std::vector<SlimeAlias> aliases = {
      {"seed",
       FieldType::kInt,
       "Slime's run seed. ooze's trainer draws nothing at random (weights come from "
       "--hf-checkpoint, models have no dropout), so the seed is the sampling's: it sets "
       "--sampling-seed (a rerun samples the same tokens). The shuffle keeps --rollout-seed.",
       {"sampling_seed"},
       [](const nlohmann::json& value) -> Sets {
         return {{"sampling_seed", value}};
       },
       0},
      {"calculate_per_token_loss",
       FieldType::kBool,
       "Slime's per-token loss normalisation: sets --loss-aggregation token-mean "
       "(--no-calculate-per-token-loss: seq-mean-token-mean, Slime's default).",
       {"loss_aggregation"},
       [](const nlohmann::json& value) -> Sets {
         return {{"loss_aggregation", value == true ? "token-mean" : "seq-mean-token-mean"}};
       }},
      {"optimizer",
       FieldType::kString,
       "Slime's optimizer choice: adam (Megatron's Adam with decoupled weight decay) and adamw "
       "are ooze's sharded AdamW (--lr, --adam-beta1, --adam-beta2, --adam-eps, "
       "--weight-decay); ooze has no other optimizer.",
       {"adam_beta1"},
       [](const nlohmann::json& value) -> Sets {
         const std::string name = value.get<std::string>();
         if (name == "adam" || name == "adamw") return {};
         throw ConfigError(
             "ooze's optimizer is AdamW, sharded over the trainer ranks: one of adam, "
             "adamw (set by --lr, --adam-beta1, --adam-beta2, --adam-eps, "
             "--weight-decay), got '" +
             name + "'");
       }},
      {"sglang_max_running_requests",
       FieldType::kInt,
       "SGLang's running-request limit of each engine: sets --engine-max-running-requests.",
       {"engine_max_running_requests"},
       [](const nlohmann::json& value) -> Sets {
         return {{"engine_max_running_requests", value}};
       },
       1},
      {"attention_dropout",
       FieldType::kDouble,
       "Megatron's attention dropout: ooze's models have none, so 0 is taken and anything else "
       "refused.",
       {"adam_beta1"},
       always("ooze's models have no dropout: only 0 is taken")},
      {"hidden_dropout",
       FieldType::kDouble,
       "Megatron's hidden dropout: ooze's models have none, so 0 is taken and anything else "
       "refused.",
       {"adam_beta1"},
       always("ooze's models have no dropout: only 0 is taken")},
      {"use_distributed_optimizer",
       FieldType::kBool,
       "Megatron's sharded optimizer state: ooze's FSDP always shards it over the trainer ranks.",
       {"adam_beta1"},
       always("ooze's FSDP always shards the optimizer state over the trainer ranks")},
      {"accumulate_allreduce_grads_in_fp32",
       FieldType::kBool,
       "Megatron's fp32 gradient reduction: ooze's gradients and AdamW state are always fp32 "
       "(--bf16 covers the all-gathers and the compute only).",
       {"bf16"},
       always("ooze always reduces and keeps gradients in fp32")},
      {"use_tensorboard",
       FieldType::kBool,
       "ooze always writes TensorBoard events, to OUTPUT_DIR/tensorboard (--output-dir).",
       {"output_dir"},
       always("ooze always writes TensorBoard events to OUTPUT_DIR/tensorboard")},
  };
  return aliases;
}

const std::vector<std::pair<std::string, std::string>>& slime_hints() {
  static const std::string parallelism =
      "ooze trains with FSDP, not Megatron's tensor/pipeline/expert split: every trainer rank "
      "holds a shard of every layer, the ranks are --actor-num-nodes x --actor-num-gpus-per-node, "
      "and --context-parallel-size splits long sequences over ranks";
  static const std::string architecture =
      "ooze reads the model's architecture from --hf-checkpoint's config.json: drop Megatron's "
      "model flags (MODEL_ARGS)";
  static const std::string metrics =
      "ooze does not log to Weights & Biases: every run writes its metrics (Slime's keys) to "
      "OUTPUT_DIR/metrics.jsonl and TensorBoard events to OUTPUT_DIR/tensorboard (--output-dir); "
      "`ooze plot OUTPUT_DIR` draws them";
  static const std::string recompute =
      "ooze recomputes every decoder layer's activations in backward with "
      "--gradient-checkpointing; it has no finer granularity";
  static const std::vector<std::pair<std::string, std::string>> hints = {
      {"use_wandb", metrics},
      {"wandb_*", metrics},
      {"tensor_model_parallel_size", parallelism},
      {"pipeline_model_parallel_size", parallelism},
      {"virtual_pipeline_model_parallel_size", parallelism},
      {"decoder_last_pipeline_num_layers", parallelism},
      {"expert_model_parallel_size", parallelism},
      {"expert_tensor_parallel_size", parallelism},
      {"sequence_parallel", parallelism},
      {"recompute_granularity", recompute},
      {"recompute_method", recompute},
      {"recompute_num_layers", recompute},
      {"megatron_to_hf_mode",
       "ooze trains the Hugging Face model of --hf-checkpoint directly: there is no Megatron "
       "checkpoint to convert"},
      {"sglang_mem_fraction_static",
       "the engines of `ooze train` keep a KV cache of --engine-kv-cache-memory-mb (1024; 0: "
       "what --engine-max-running-requests can use, within half the memory available at start), "
       "as the trainer allocates after them (ooze serve: --mem-fraction-static)"},
      {"sglang_server_concurrency",
       "ooze bounds the requests in flight over all engines with --rollout-concurrency; each "
       "engine decodes at most --engine-max-running-requests of them at once"},
      {"sglang_router_ip",
       "ooze starts its own router in front of its engines; `ooze rollout --engine-urls` uses "
       "engines that already run"},
      {"sglang_router_port",
       "ooze starts its own router in front of its engines; `ooze rollout --engine-urls` uses "
       "engines that already run"},
      {"sglang_*",
       "ooze's rollout engines are its own, not SGLang: their flags are "
       "--engine-max-running-requests, --engine-kv-cache-memory-mb and --engine-threads "
       "(`ooze config-help train`, section engines)"},
      {"num_layers", architecture},
      {"ffn_hidden_size", architecture},
      {"num_attention_heads", architecture},
      {"group_query_attention", architecture},
      {"num_query_groups", architecture},
      {"kv_channels", architecture},
      {"swiglu", architecture},
      {"normalization", architecture},
      {"norm_epsilon", architecture},
      {"rotary_base", architecture},
      {"vocab_size", architecture},
      {"disable_bias_linear", architecture},
      {"add_qkv_bias", architecture},
      {"qk_layernorm", architecture},
      {"untie_embeddings_and_output_weights", architecture},
      {"use_rotary_position_embeddings", architecture},
      {"max_position_embeddings", architecture},
      {"seq_length", architecture},
  };
  return hints;
}

}  // namespace

void add_slime_flags(ConfigSchema& schema) {
  for (const SlimeAlias& alias : slime_aliases()) {
    if (schema.find(alias.name) != nullptr) continue;  // the command's own field wins
    bool meaningful = true;
    for (const std::string& field : alias.needs) meaningful = meaningful && schema.find(field);
    if (!meaningful) continue;
    FieldSpec spec;
    spec.name = alias.name;
    spec.type = alias.type;
    spec.doc = alias.doc;
    spec.section = kSection;
    if (alias.min) spec.lower = alias.min;
    schema.add_alias(std::move(spec), alias.expand);
  }
  for (const auto& [name, message] : slime_hints()) {
    if (schema.find(name) == nullptr) schema.add_hint(name, message);
  }
}

void add_sglang_server_flags(ConfigSchema& schema) {
  const std::string section = "SGLang's spellings";
  schema.section(section);
  schema.add_synonym("model_path", "model", "SGLang's spelling of --model.");
  const std::string no_tensor_parallel =
      "an ooze engine runs on one device (--device): it is not tensor or data parallel yet; "
      "start several `ooze serve` and balance them with `ooze router`";
  for (const char* name : {"tp_size", "tensor_parallel_size", "dp_size", "data_parallel_size"}) {
    schema.add_hint(name, no_tensor_parallel);
  }
}

}  // namespace ooze::launcher
