#include "models/decoder_layer.h"

#include "models/fused_norm.h"

namespace ooze::models {

DecoderLayerImpl::DecoderLayerImpl(const ModelConfig& config, c10::ScalarType dtype) {
  input_layernorm =
      register_module("input_layernorm", RMSNorm(config.hidden_size, config.rms_norm_eps, dtype));
  self_attn = register_module("self_attn", Attention(config, dtype));
  post_attention_layernorm = register_module(
      "post_attention_layernorm", RMSNorm(config.hidden_size, config.rms_norm_eps, dtype));
  mlp = register_module("mlp", MLP(config.hidden_size, config.intermediate_size, dtype));
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& hidden, const RotaryTables& rope,
                                        const std::vector<int64_t>& offsets) {
  torch::Tensor h = hidden + self_attn->forward(input_layernorm->forward(hidden), rope, offsets);
  return h + mlp->forward(post_attention_layernorm->forward(h));
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& hidden, const RotaryTables& rope,
                                        const ContextParallelAttention& cp) {
  torch::Tensor h = hidden + self_attn->forward(input_layernorm->forward(hidden), rope, cp);
  return h + mlp->forward(post_attention_layernorm->forward(h));
}

torch::Tensor DecoderLayerImpl::forward_cached(const torch::Tensor& hidden,
                                               const RotaryTables& rope, const CacheStep& step,
                                               KVCache& cache, int64_t layer_index) {
  torch::Tensor h = hidden + self_attn->forward_cached(fused_rms_norm(*input_layernorm, hidden),
                                                       rope, step, cache, layer_index);
  return h + mlp->forward(fused_rms_norm(*post_attention_layernorm, h));
}

}  // namespace ooze::models
