// Grouped-query self-attention with Hugging Face's projections: q/k/v/o_proj (bias on q/k/v for
// qwen2 or attention_bias, on o for attention_bias except qwen2), per-head RMSNorm of q and k
// before RoPE for qwen3.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "models/context_parallel_split.h"
#include "models/kv_cache.h"
#include "models/linear.h"
#include "models/model_config.h"
#include "models/ring_attention.h"
#include "models/rms_norm.h"
#include "models/rotary.h"

namespace ooze::models {

// A forward under context parallelism: the tokens are this rank's share of a micro-batch split
// across the ranks of `group` (`split`, made for group->rank() of group->size()), and attention
// reads the keys and values of the whole group (ring_attention.h). Held by value in the layers'
// closures, which activation checkpointing runs again in backward.
struct ContextParallelAttention {
  std::shared_ptr<const ContextParallelSplit> split;
  std::shared_ptr<comm::Communicator> group;
  ContextParallelImpl impl = ContextParallelImpl::kRing;
};

class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(const ModelConfig& config, c10::ScalarType dtype);

  // hidden: [T, hidden_size] packed tokens, sequences given by `offsets` (sequence_offsets()).
  // Returns [T, hidden_size].
  torch::Tensor forward(const torch::Tensor& hidden, const RotaryTables& rope,
                        const std::vector<int64_t>& offsets);
  // hidden: [T_local, hidden_size], this rank's tokens in the local layout of cp.split (rope
  // from their positions). Returns [T_local, hidden_size].
  torch::Tensor forward(const torch::Tensor& hidden, const RotaryTables& rope,
                        const ContextParallelAttention& cp);

  // The tokens of a cache step: their keys/values are written to layer `layer_index` of
  // `cache` at the step's slot mapping, and each attends to its sequence's tokens up to itself.
  // Returns [T, hidden_size].
  torch::Tensor forward_cached(const torch::Tensor& hidden, const RotaryTables& rope,
                               const CacheStep& step, KVCache& cache, int64_t layer_index);

  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  RMSNorm q_norm{nullptr}, k_norm{nullptr};  // qwen3 only

 private:
  struct Projected {
    torch::Tensor q;  // [T, heads, head_dim], normed and rotated
    torch::Tensor k;  // [T, kv_heads, head_dim], normed and rotated
    torch::Tensor v;  // [T, kv_heads, head_dim]
  };
  // `fused`: the q/k norms and rotary of a cache step in one pass each (fused_norm.h).
  Projected project(const torch::Tensor& hidden, const RotaryTables& rope, bool fused);

  int64_t num_heads_;
  int64_t num_kv_heads_;
  int64_t head_dim_;
  double scale_;
};
TORCH_MODULE(Attention);

}  // namespace ooze::models
