// Hugging Face model directories: weights in, weights and the files around them out.
//
//   TransformerModel model(load_model_config(dir));
//   load_hf_weights(*model, dir);                 // model.safetensors or the sharded layout
//   ...
//   save_hf_model(out_dir, model->config(), *model, /*tokenizer_dir=*/dir);
//
// Tensors map to named_parameters() by name, one to one, so any module whose parameter names
// are Hugging Face's (models/transformer.h) loads and saves checkpoints that transformers,
// vLLM and SGLang read.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "models/model_config.h"

namespace ooze::models {

// transformers' default max_shard_size for save_pretrained.
constexpr uint64_t kDefaultMaxShardBytes = 5ull * 1000 * 1000 * 1000;

// Copies every tensor of the checkpoint in `dir` into the parameter (or buffer) of the same
// name, converting between floating dtypes (a bf16 checkpoint into fp32 parameters, ...) and
// devices. Checks everything before copying anything and reports every problem in one
// ooze::FormatError, naming the tensors, the files that hold them and the shapes:
//   - a tensor whose shape differs from the parameter's (a config.json that does not match the
//     weights), or whose dtype is not floating where the parameter's is;
//   - strict (the default): a parameter with no tensor in the checkpoint ("missing"), and a
//     checkpoint tensor that names no parameter or buffer ("unexpected").
// Not strict: missing parameters keep their values and unexpected tensors are skipped, both
// logged as warnings. Shape and dtype problems are errors either way. Buffers are loaded when
// the checkpoint has them but never required (those of these models are derived, like RoPE).
// Always ignored, as transformers does: "*rotary_emb.inv_freq" (older Llama checkpoints store
// the RoPE frequencies, which ooze computes from config.json), and "lm_head.weight" when the
// model has no such parameter but has model.embed_tokens.weight (tied embeddings), provided it
// equals the embeddings; a different one is an error (the weights are untied: set
// tie_word_embeddings false in config.json).
// Throws ooze::IoError when `dir` holds no checkpoint; FormatError for malformed files.
void load_hf_weights(torch::nn::Module& model, const std::string& dir, bool strict = true);

// load_hf_weights' checks alone, not strict: reads the files' headers and copies nothing, so a
// model of uninitialised parameters (TransformerModel as constructed: its memory is never
// touched) judges a directory of any size in milliseconds. Throws what load_hf_weights would:
// a config.json whose shapes are not the weights' is refused before any process loads them.
void check_hf_weights(const torch::nn::Module& model, const std::string& dir);

// Writes a Hugging Face model directory at `dir`:
//   config.json              config.to_json(); torch_dtype is that of the saved weights
//   model.safetensors        or model-0000i-of-0000n.safetensors + model.safetensors.index.json
//                            when the weights exceed max_shard_bytes: every parameter of
//                            `model` in named_parameters() order (HF's order for
//                            TransformerModel), converted to config.torch_dtype, on the CPU
//   generation_config.json   bos_token_id / eos_token_id from the config (those that are set)
//   tokenizer files          tokenizer.json, tokenizer_config.json and the other tokenizer
//                            files present in tokenizer_dir (skipped when tokenizer_dir is "")
// Everything is written into a temporary sibling directory "<dir>.tmp.<pid>" and renamed to
// `dir` at the end, so a crash never leaves a half-written model under `dir`. An existing model
// directory at `dir` (one with config.json, or an empty directory) is replaced; any other
// existing path is refused before anything is written (ooze::IoError), so a mistyped --out
// never deletes unrelated files. Buffers are not saved (they are derived from config.json).
// Throws ooze::Error when tokenizer_dir lacks tokenizer.json, IoError when writing fails.
void save_hf_model(const std::string& dir, const ModelConfig& config, torch::nn::Module& model,
                   const std::string& tokenizer_dir,
                   uint64_t max_shard_bytes = kDefaultMaxShardBytes);

}  // namespace ooze::models
