#include "models/transformer.h"

#include <string>

#include "core/error.h"
#include "models/activation_checkpoint.h"
#include "models/causal_attention.h"
#include "models/fused_norm.h"

namespace ooze::models {
namespace {

void check_token_ids(const torch::Tensor& ids, const char* what, int64_t vocab_size) {
  if (!ids.defined() || ids.dim() != 1 ||
      (ids.scalar_type() != torch::kLong && ids.scalar_type() != torch::kInt)) {
    throw Error(std::string(what) + " must be a 1-D int64 tensor, got " +
                (ids.defined()
                     ? std::to_string(ids.dim()) + "-D " + c10::toString(ids.scalar_type())
                     : std::string("an undefined tensor")));
  }
  if (ids.numel() > 0) {
    const int64_t low = ids.min().item<int64_t>(), high = ids.max().item<int64_t>();
    if (low < 0 || high >= vocab_size) {
      throw Error(std::string(what) + " holds token id " + std::to_string(low < 0 ? low : high) +
                  " outside the vocabulary [0, " + std::to_string(vocab_size) + ")");
    }
  }
}

ModelConfig validated(ModelConfig config) {
  config.validate();
  return config;
}

}  // namespace

// FNV-1a of the name, then a splitmix64 finaliser: std::hash differs between standard libraries.
uint64_t parameter_seed(uint64_t seed, const std::string& name) {
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : name) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  uint64_t z = hash ^ (seed + 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

TransformerModelImpl::TransformerModelImpl(ModelConfig config, std::optional<c10::ScalarType> dtype,
                                           ModelHead head)
    : config_(validated(std::move(config))), rotary_(config_), head_(head) {
  const c10::ScalarType param_dtype = dtype ? *dtype : config_.parameter_dtype();
  backbone_ = register_module("model", std::make_shared<torch::nn::Module>("model"));
  embed_tokens_ = backbone_->register_module(
      "embed_tokens",
      torch::nn::Embedding(
          torch::nn::EmbeddingOptions(config_.vocab_size, config_.hidden_size)
              ._weight(torch::empty({config_.vocab_size, config_.hidden_size}, param_dtype))));
  layer_list_ = backbone_->register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    layers_.push_back(DecoderLayer(config_, param_dtype));
    layer_list_->push_back(layers_.back());
  }
  norm_ = backbone_->register_module(
      "norm", RMSNorm(config_.hidden_size, config_.rms_norm_eps, param_dtype));
  if (head_ == ModelHead::kValue) {
    score_ = register_module("score", Linear(config_.hidden_size, 1, false, param_dtype));
  } else if (!config_.tie_word_embeddings) {
    lm_head_ = register_module("lm_head",
                               Linear(config_.hidden_size, config_.vocab_size, false, param_dtype));
  }
}

c10::ScalarType TransformerModelImpl::dtype() const { return embed_tokens_->weight.scalar_type(); }

void TransformerModelImpl::init_weights(uint64_t seed) {
  torch::NoGradGuard no_grad;
  for (const auto& item : named_parameters(/*recurse=*/true)) {
    const std::string& name = item.key();
    torch::Tensor param = item.value();
    const bool is_bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    if (is_bias || name == "score.weight") {
      param.zero_();
    } else if (param.dim() == 1) {  // RMSNorm scales
      param.fill_(1.0);
    } else {
      // Drawn on the CPU in fp32 so the values do not depend on the device.
      torch::Tensor values = torch::empty(param.sizes(), torch::kFloat);
      values.normal_(0.0, config_.initializer_range,
                     at::detail::createCPUGenerator(parameter_seed(seed, name)));
      param.copy_(values);
    }
  }
}

torch::Tensor TransformerModelImpl::lm_head_weight() const {
  if (head_ == ModelHead::kValue) {
    throw Error("this model has a value head (score.weight), not a language-model head");
  }
  return config_.tie_word_embeddings ? embed_tokens_->weight : lm_head_->weight;
}

torch::Tensor TransformerModelImpl::embed(const torch::Tensor& input_ids) {
  return embed_tokens_->forward(input_ids);
}

RotaryTables TransformerModelImpl::rotary_tables(const torch::Tensor& position_ids) const {
  return rotary_.tables(position_ids, dtype());
}

torch::Tensor TransformerModelImpl::run_layer(DecoderLayer& layer, const torch::Tensor& hidden,
                                              const RotaryTables& rope,
                                              const std::vector<int64_t>& offsets) {
  if (!activation_checkpointing_) return layer->forward(hidden, rope, offsets);
  // rope and offsets are not differentiable and outlive backward (captured by value).
  return checkpointed([impl = layer.ptr(), rope,
                       offsets](const at::Tensor& x) { return impl->forward(x, rope, offsets); },
                      hidden, layer->parameters());
}

torch::Tensor TransformerModelImpl::forward(const torch::Tensor& input_ids,
                                            const torch::Tensor& position_ids,
                                            const torch::Tensor& cu_seqlens) {
  check_token_ids(input_ids, "input_ids", config_.vocab_size);
  const int64_t tokens = input_ids.size(0);
  if (!position_ids.defined() || position_ids.dim() != 1 || position_ids.size(0) != tokens) {
    throw Error("position_ids must be a 1-D tensor with one position per token (" +
                std::to_string(tokens) + "), got shape " +
                (position_ids.defined() ? c10::str(position_ids.sizes()) : "undefined"));
  }
  const std::vector<int64_t> offsets = sequence_offsets(cu_seqlens, tokens);
  torch::Tensor hidden = embed(input_ids);
  const RotaryTables rope = rotary_tables(position_ids.to(hidden.device()));
  for (DecoderLayer& layer : layers_) hidden = run_layer(layer, hidden, rope, offsets);
  return norm_->forward(hidden);
}

torch::Tensor TransformerModelImpl::logits(const torch::Tensor& hidden) {
  return models::linear(hidden, lm_head_weight());
}

torch::Tensor TransformerModelImpl::forward_cached(const torch::Tensor& input_ids,
                                                   const CacheStep& step, KVCache& cache) {
  torch::NoGradGuard no_grad;
  const c10::Device device = embed_tokens_->weight.device();
  if (cache.num_layers() != config_.num_hidden_layers || cache.dtype() != dtype() ||
      cache.device() != device) {
    throw Error("KVCache does not match the model: it has " + std::to_string(cache.num_layers()) +
                " layers, dtype " + c10::toString(cache.dtype()) + ", device " +
                cache.device().str() + "; the model has " +
                std::to_string(config_.num_hidden_layers) + " layers, " + c10::toString(dtype()) +
                ", " + device.str() +
                ". Create the cache from the model's config, dtype and device");
  }
  if (!cache.has_memory()) {
    throw Error(
        "forward_cached: the KVCache's memory is released (the engine is asleep); call "
        "reacquire_memory() before running the model");
  }
  check_token_ids(input_ids, "input_ids", config_.vocab_size);
  if (step.offsets.empty() || !step.slot_mapping.defined() ||
      step.offsets.size() != step.block_tables.size() + 1) {
    throw Error("forward_cached: the CacheStep is not planned; make it with KVCache::plan_step");
  }
  if (input_ids.size(0) != step.offsets.back()) {
    throw Error("forward_cached: input_ids holds " + std::to_string(input_ids.size(0)) +
                " tokens but the step plans " + std::to_string(step.offsets.back()) +
                "; pass each sequence's new tokens, packed in the step's order");
  }
  torch::Tensor hidden = embed(input_ids.to(device, torch::kLong));
  const RotaryTables rope = rotary_tables(step.position_ids);
  for (size_t i = 0; i < layers_.size(); ++i) {
    hidden = layers_[i]->forward_cached(hidden, rope, step, cache, static_cast<int64_t>(i));
  }
  return fused_rms_norm(*norm_, hidden);
}

}  // namespace ooze::models
