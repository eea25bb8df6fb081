#include "models/attention.h"

#include <cmath>

#include "models/causal_attention.h"
#include "models/fused_norm.h"

namespace ooze::models {

AttentionImpl::AttentionImpl(const ModelConfig& config, c10::ScalarType dtype)
    : num_heads_(config.num_attention_heads),
      num_kv_heads_(config.num_key_value_heads),
      head_dim_(config.head_dim),
      scale_(1.0 / std::sqrt(static_cast<double>(config.head_dim))) {
  const int64_t hidden = config.hidden_size;
  const bool qkv_bias = config.has_qkv_bias();
  q_proj = register_module("q_proj", Linear(hidden, num_heads_ * head_dim_, qkv_bias, dtype));
  k_proj = register_module("k_proj", Linear(hidden, num_kv_heads_ * head_dim_, qkv_bias, dtype));
  v_proj = register_module("v_proj", Linear(hidden, num_kv_heads_ * head_dim_, qkv_bias, dtype));
  o_proj = register_module("o_proj",
                           Linear(num_heads_ * head_dim_, hidden, config.has_o_proj_bias(), dtype));
  if (config.has_qk_norm()) {
    q_norm = register_module("q_norm", RMSNorm(head_dim_, config.rms_norm_eps, dtype));
    k_norm = register_module("k_norm", RMSNorm(head_dim_, config.rms_norm_eps, dtype));
  }
}

AttentionImpl::Projected AttentionImpl::project(const torch::Tensor& hidden,
                                                const RotaryTables& rope, bool fused) {
  const int64_t tokens = hidden.size(0);
  torch::Tensor q = q_proj->forward(hidden).view({tokens, num_heads_, head_dim_});
  torch::Tensor k = k_proj->forward(hidden).view({tokens, num_kv_heads_, head_dim_});
  torch::Tensor v = v_proj->forward(hidden).view({tokens, num_kv_heads_, head_dim_});
  if (fused) {
    const bool normed = !q_norm.is_empty();
    return {fused_rms_norm_rotary(normed ? q_norm.get() : nullptr, q, rope),
            fused_rms_norm_rotary(normed ? k_norm.get() : nullptr, k, rope), v};
  }
  if (!q_norm.is_empty()) {
    q = q_norm->forward(q);
    k = k_norm->forward(k);
  }
  return {apply_rotary(q, rope), apply_rotary(k, rope), v};
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& hidden, const RotaryTables& rope,
                                     const std::vector<int64_t>& offsets) {
  Projected p = project(hidden, rope, /*fused=*/false);
  torch::Tensor out = packed_causal_attention(p.q, p.k, p.v, offsets, scale_);
  return o_proj->forward(out.reshape({hidden.size(0), num_heads_ * head_dim_}));
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& hidden, const RotaryTables& rope,
                                     const ContextParallelAttention& cp) {
  Projected p = project(hidden, rope, /*fused=*/false);
  torch::Tensor out =
      context_parallel_attention(p.q, p.k, p.v, *cp.split, cp.group, scale_, cp.impl);
  return o_proj->forward(out.reshape({hidden.size(0), num_heads_ * head_dim_}));
}

torch::Tensor AttentionImpl::forward_cached(const torch::Tensor& hidden, const RotaryTables& rope,
                                            const CacheStep& step, KVCache& cache,
                                            int64_t layer_index) {
  Projected p = project(hidden, rope, /*fused=*/true);
  torch::Tensor& keys = cache.keys(layer_index);
  torch::Tensor& values = cache.values(layer_index);
  // The model checks that the cache has its dtype and device. Each token goes to its slot of
  // the block pool seen as one [num_blocks * block_size] sequence of slots.
  keys.view({-1, num_kv_heads_, head_dim_}).index_copy_(0, step.slot_mapping, p.k);
  values.view({-1, num_kv_heads_, head_dim_}).index_copy_(0, step.slot_mapping, p.v);
  torch::Tensor out = paged_causal_attention(p.q, keys, values, step, scale_);
  return o_proj->forward(out.reshape({hidden.size(0), num_heads_ * head_dim_}));
}

}  // namespace ooze::models
