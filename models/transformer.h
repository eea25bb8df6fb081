// The decoder-only transformer shared by training and generation: Qwen3, Qwen2 and Llama from a
// Hugging Face config.json, with Hugging Face parameter names, so checkpoints map one to one:
//
//   model.embed_tokens.weight
//   model.layers.N.input_layernorm.weight
//   model.layers.N.self_attn.{q,k,v,o}_proj.weight   (+ q/k/v .bias: qwen2, attention_bias)
//   model.layers.N.self_attn.{q,k}_norm.weight       (qwen3)
//   model.layers.N.post_attention_layernorm.weight
//   model.layers.N.mlp.{gate,up,down}_proj.weight
//   model.norm.weight
//   lm_head.weight                                    (absent when tie_word_embeddings)
//   score.weight                                      (the value head, instead of lm_head)
//
// Training and scoring run over packed batches: the tokens of B sequences concatenated into
// [T], with cu_seqlens [B+1] the sequence boundaries. Attention never crosses a boundary, and
// positions come only from position_ids, so packing does not change any sequence's output:
//
//   TransformerModel model(load_model_config(dir));        // parameters in config.torch_dtype
//   torch::Tensor hidden = model->forward(input_ids, position_ids, cu_seqlens);  // [T, H]
//   torch::Tensor logits = model->logits(hidden);                                // [T, V]
//
// Generation uses a paged KVCache (models/kv_cache.h) through forward_cached(), one step of
// prompt chunks and decodes at a time; engine/engine.h schedules those steps.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/decoder_layer.h"
#include "models/kv_cache.h"
#include "models/linear.h"
#include "models/model_config.h"
#include "models/rms_norm.h"
#include "models/rotary.h"

namespace ooze::models {

// What the last layer computes from each token's hidden state: next-token logits (a policy), or
// one scalar (a critic's value head: Hugging Face's score.weight [1, hidden_size] of a
// *ForTokenClassification model with one label; the tied or untied lm_head is then absent).
enum class ModelHead { kLanguageModel, kValue };

class TransformerModelImpl : public torch::nn::Module {
 public:
  // Parameters are created (uninitialised: load a checkpoint or call init_weights) on the CPU in
  // `dtype`, config.torch_dtype when not given. Move with ->to(device) as any module.
  explicit TransformerModelImpl(ModelConfig config,
                                std::optional<c10::ScalarType> dtype = std::nullopt,
                                ModelHead head = ModelHead::kLanguageModel);

  const ModelConfig& config() const { return config_; }
  // The dtype of the parameters, which is the compute dtype.
  c10::ScalarType dtype() const;

  // Fills every parameter deterministically from `seed`, as Hugging Face initialises these
  // models: linear and embedding weights ~ normal(0, initializer_range), norms 1, biases 0;
  // a value head 0 (every value starts at 0, as a critic's does).
  // Each parameter draws from its own generator seeded by (seed, name), so the values do not
  // depend on the device, the dtype's rounding aside, or on which other parameters exist.
  void init_weights(uint64_t seed);

  // Packed forward. input_ids: [T] int64; position_ids: [T] int64 (restarting at 0 per sequence
  // for ordinary training, but any values are accepted); cu_seqlens: [B+1] int32 (or int64),
  // 0 = cu_seqlens[0] <= ... <= cu_seqlens[B] = T. Returns the hidden states after the final
  // norm, [T, hidden_size], in dtype(). Throws ooze::Error on malformed inputs.
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                        const torch::Tensor& cu_seqlens);

  // hidden: [..., hidden_size] -> logits [..., vocab_size] in dtype(). For log-probs of a whole
  // batch prefer compute_token_log_probs(hidden, lm_head_weight(), ...) (models/log_probs.h).
  torch::Tensor logits(const torch::Tensor& hidden);

  // Runs the tokens of one cache step (any mix of prompt chunks and single-token decodes; see
  // models/kv_cache.h): their keys and values are written to the cache, and each token attends
  // to the tokens its sequence already holds and to those before it in the step. input_ids: [T]
  // int64, packed in the step's sequence order. Returns the hidden states after the final norm,
  // [T, hidden_size] in dtype() (apply logits() to the rows that need them). No autograd.
  torch::Tensor forward_cached(const torch::Tensor& input_ids, const CacheStep& step,
                               KVCache& cache);

  // Recompute each decoder layer's activations in backward instead of storing them.
  void set_activation_checkpointing(bool enabled) { activation_checkpointing_ = enabled; }
  bool activation_checkpointing() const { return activation_checkpointing_; }

  // The separately wrappable parts, in forward order (FSDP shards each on its own).
  torch::nn::Embedding& embeddings() { return embed_tokens_; }
  std::vector<DecoderLayer>& layers() { return layers_; }
  RMSNorm& final_norm() { return norm_; }
  // The untied head; an empty holder (is_empty()) when tie_word_embeddings or a value head.
  Linear& lm_head() { return lm_head_; }
  // The [vocab_size, hidden_size] matrix the head multiplies by: lm_head.weight, or
  // model.embed_tokens.weight when tied. Throws ooze::Error on a value model.
  torch::Tensor lm_head_weight() const;
  ModelHead head() const { return head_; }
  // score.weight, [1, hidden_size], of a value model (an empty holder otherwise).
  Linear& value_head() { return score_; }

  // The steps of forward(), for callers that drive the layers themselves (e.g. to gather
  // sharded parameters layer by layer). forward() is exactly:
  //   h = embed(input_ids); rope = rotary_tables(position_ids);
  //   for each layer: h = layer->forward(h, rope, offsets);   offsets = sequence_offsets(...)
  //   return final_norm()->forward(h);
  torch::Tensor embed(const torch::Tensor& input_ids);
  RotaryTables rotary_tables(const torch::Tensor& position_ids) const;

 private:
  torch::Tensor run_layer(DecoderLayer& layer, const torch::Tensor& hidden,
                          const RotaryTables& rope, const std::vector<int64_t>& offsets);
  ModelConfig config_;
  RotaryEmbedding rotary_;
  bool activation_checkpointing_ = false;
  // "model": a plain container that gives the backbone's parameters HF's "model." prefix.
  std::shared_ptr<torch::nn::Module> backbone_;
  torch::nn::Embedding embed_tokens_{nullptr};
  torch::nn::ModuleList layer_list_;
  std::vector<DecoderLayer> layers_;
  RMSNorm norm_{nullptr};
  ModelHead head_;
  Linear lm_head_{nullptr};
  Linear score_{nullptr};
};
TORCH_MODULE(TransformerModel);

// The seed of parameter `name`'s generator under a model seed (init_weights, LoRA adapters).
uint64_t parameter_seed(uint64_t seed, const std::string& name);

}  // namespace ooze::models
