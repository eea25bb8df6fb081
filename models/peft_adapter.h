// LoRA adapters as PEFT stores them, so that an adapter trained here loads with
// PeftModel.from_pretrained (and vLLM's and SGLang's LoRA loaders), and one trained elsewhere
// starts or serves here:
//
//   adapter_config.json         {"peft_type": "LORA", "r", "lora_alpha", "lora_dropout",
//                                "target_modules", "bias": "none", "task_type": "CAUSAL_LM",
//                                "base_model_name_or_path", ...}
//   adapter_model.safetensors   base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight
//                               [r, in] and ...lora_B.weight [out, r], for every adapted
//                               projection
//
//   save_peft_adapter("out/adapter", options, tensors, "/models/Qwen3-0.6B");
//   PeftAdapter adapter = load_peft_adapter("out/adapter");
//   load_adapter_weights(*model, adapter);   // a model with adapters of the same shape
//   merge_adapter_weights(*model, adapter);  // or a plain model: W += (alpha / r) B A
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>

#include "models/lora.h"
#include "models/transformer.h"

namespace ooze::models {

struct PeftAdapter {
  LoraOptions options;  // r, alpha, dropout and target modules from adapter_config.json
  // Tensors by the model's parameter name ("model.layers.0.self_attn.q_proj.lora_A.weight").
  std::map<std::string, torch::Tensor> tensors;
};

// Writes `tensors` (named as the model names its adapter parameters, on any device) and the
// config into `dir` through a staging directory that replaces `dir` when complete. An existing
// `dir` must be an adapter or model directory, or empty (IoError otherwise).
void save_peft_adapter(const std::string& dir, const LoraOptions& options,
                       const std::map<std::string, torch::Tensor>& tensors,
                       const std::string& base_model_name_or_path);

// Reads an adapter directory. Throws IoError when a file is missing, FormatError naming the
// file and key for a config that is not a plain LoRA one (DoRA, rsLoRA, per-module ranks, biases
// or modules_to_save are not supported) or a tensor outside the layers' projections.
PeftAdapter load_peft_adapter(const std::string& dir);

// Copies the adapter into `model`'s adapters, which must match it exactly: the same projections
// adapted, the same shapes and scaling (FormatError listing every difference, before anything
// is copied).
void load_adapter_weights(TransformerModelImpl& model, const PeftAdapter& adapter);

// Adds each adapter's update to the weight it adapts in a model without adapters, in fp32
// before rounding to the model's dtype. Throws FormatError when a tensor's shape does not fit.
void merge_adapter_weights(TransformerModelImpl& model, const PeftAdapter& adapter);

}  // namespace ooze::models
