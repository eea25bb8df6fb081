// Exporting a sharded model's full weights as a Hugging Face model directory, streamed one
// FSDP unit at a time so that no rank ever holds the whole model:
//
//   for each unit (embeddings, each decoder layer, the root), in order:
//     every rank all-gathers the unit's fp32 master shards (exact values);
//     rank 0 writes the unit's parameters, converted to the config's torch_dtype and under their
//     Hugging Face names, to model-0000i-of-0000n.safetensors (one file per unit), and frees
//     the gathered unit before the next.
//
// Then rank 0 writes model.safetensors.index.json, config.json, generation_config.json and
// the tokenizer files, all into "<dir>.tmp.<pid>", and renames that to `dir` at the end, so a
// crash never leaves a half-written model under `dir`. The result loads with
// models::load_hf_weights (and transformers, vLLM, SGLang).
//
//   export_hf_model("runs/exp/hf_iter_0000100", fsdp, /*tokenizer_dir=*/"/models/Qwen3-0.6B");
#pragma once

#include <string>

#include "fsdp/fsdp_transformer.h"
#include "models/lora.h"

namespace ooze::fsdp {

// A collective: every rank of `model`'s group calls it; only rank 0 writes. tokenizer_dir: the
// tokenizer files present there (tokenizer.json, tokenizer_config.json, vocab.json, ...) are
// copied; "" copies none. An existing model directory at `dir` (one with config.json, or an
// empty one) is replaced; any other existing path is refused before anything is gathered
// (ooze::IoError), so a mistyped path never deletes unrelated files. When writing fails on
// rank 0, every rank throws (IoError) and `dir` is untouched.
void export_hf_model(const std::string& dir, FsdpTransformer& model,
                     const std::string& tokenizer_dir = "");

// A LoRA model's adapters (its only sharded parameters) as a PEFT adapter directory
// (models/peft_adapter.h) naming `base_model` as its base. A collective like export_hf_model:
// every rank gathers, rank 0 writes, and every rank throws IoError when rank 0 could not.
void export_peft_adapter(const std::string& dir, FsdpTransformer& model,
                         const models::LoraOptions& lora, const std::string& base_model);

// A LoRA model as a plain Hugging Face model directory, every adapted weight W + (alpha / r) B A
// computed in fp32 and written in the config's dtype (models::merge_adapter_weights), what
// --save-hf-merged writes for engines that know no adapters. The base is replicated on every
// rank, so rank 0 builds the merged copy alone, holding the model twice meanwhile. A collective
// like export_hf_model, with its guarantees (staging directory, `dir` untouched on failure).
void export_merged_lora_model(const std::string& dir, FsdpTransformer& model,
                              const models::LoraOptions& lora,
                              const std::string& tokenizer_dir = "");

}  // namespace ooze::fsdp
