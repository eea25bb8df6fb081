#include "engine/engine.h"

namespace ooze::engine {

const OptionFields<EngineOptions>& EngineOptions::fields() {
  using O = EngineOptions;
  static const OptionFields<O> fields = [] {
    OptionFields<O> f;
    f.section("engine");
    f.add("model", &O::model_dir, "Hugging Face model directory (config, weights, tokenizer).")
        .required();
    f.add("lora", &O::lora,
          "A PEFT LoRA adapter directory (adapter_config.json, adapter_model.safetensors) "
          "merged into --model's weights at start, so it costs nothing per token.");
    f.add("served_model_name", &O::served_model_name,
          "Name /v1/models reports; the model path if empty.");
    f.add_choice("dtype", &O::dtype, {"auto", "float32", "bfloat16"},
                 "Weights and activations; auto: config.json's torch_dtype.");
    f.add("device", &O::device, "cpu, cuda or cuda:N.");
    f.add("max_running_requests", &O::max_running_requests, "Sequences decoding at once.").min(1);
    f.add("kv_cache_blocks", &O::kv_cache_blocks,
          "KV-cache blocks; 0: as many as kv_cache_memory_mb holds.")
        .min(0);
    f.add("kv_cache_memory_mb", &O::kv_cache_memory_mb,
          "KV-cache memory when kv_cache_blocks is 0; 0: what max_running_requests can use at "
          "the model's full context, within mem_fraction_static.")
        .min(0);
    f.add("mem_fraction_static", &O::mem_fraction_static,
          "With the KV cache sized automatically: the weights and the cache take at most this "
          "fraction of the memory available at start (SGLang's flag).")
        .min(0.01)
        .max(1.0);
    f.add("block_size", &O::block_size, "Tokens per KV-cache block.").min(1);
    f.add("chunked_prefill_size", &O::chunked_prefill_size,
          "Prompt tokens computed per step, at most.")
        .min(1);
    f.add_custom(
        "disable_prefix_caching", FieldType::kBool,
        [](const O& o) { return nlohmann::json(!o.enable_prefix_caching); },
        [](const nlohmann::json& value, O& o) { o.enable_prefix_caching = !value.get<bool>(); },
        "Compute every prompt in full instead of reusing cached prefixes.");
    f.add("threads", &O::intra_op_threads,
          "Intra-op CPU threads for the forward; 0: LibTorch's default.")
        .min(0);
    f.add("seed", &O::seed, "Seeds requests that give no seed; 0: random.").min(0);
    f.include("adapter", &O::adapter, models::LoraOptions::fields(), /*as_flags=*/false);
    return f;
  }();
  return fields;
}

const OptionFields<EngineOptions>& EngineOptions::launched_engine_fields() {
  using O = EngineOptions;
  static const OptionFields<O> fields = [] {
    OptionFields<O> f;
    f.section("engines");
    f.add("engine_max_running_requests", &O::max_running_requests,
          "Sequences each engine decodes at once.")
        .min(1);
    f.add("engine_kv_cache_memory_mb", &O::kv_cache_memory_mb,
          "KV-cache memory of each engine; 0: sized as `ooze serve` sizes it.")
        .min(0);
    f.add("engine_threads", &O::intra_op_threads, "Intra-op CPU threads of each engine.").min(1);
    return f;
  }();
  return fields;
}

}  // namespace ooze::engine
