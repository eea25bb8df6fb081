// One pre-norm decoder block: h += attention(input_layernorm(h)); h +=
// mlp(post_attention_layernorm(h)).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "models/attention.h"
#include "models/kv_cache.h"
#include "models/mlp.h"
#include "models/model_config.h"
#include "models/rms_norm.h"
#include "models/rotary.h"

namespace ooze::models {

class DecoderLayerImpl : public torch::nn::Module {
 public:
  DecoderLayerImpl(const ModelConfig& config, c10::ScalarType dtype);

  // hidden: [T, hidden_size] packed tokens, sequences given by `offsets`.
  torch::Tensor forward(const torch::Tensor& hidden, const RotaryTables& rope,
                        const std::vector<int64_t>& offsets);
  // This rank's share of a micro-batch under context parallelism (AttentionImpl::forward).
  torch::Tensor forward(const torch::Tensor& hidden, const RotaryTables& rope,
                        const ContextParallelAttention& cp);

  // The tokens of a cache step (see AttentionImpl::forward_cached), its norms fused
  // (fused_norm.h).
  torch::Tensor forward_cached(const torch::Tensor& hidden, const RotaryTables& rope,
                               const CacheStep& step, KVCache& cache, int64_t layer_index);

  RMSNorm input_layernorm{nullptr};
  Attention self_attn{nullptr};
  RMSNorm post_attention_layernorm{nullptr};
  MLP mlp{nullptr};
};
TORCH_MODULE(DecoderLayer);

}  // namespace ooze::models
