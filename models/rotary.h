// Rotary position embeddings (RoPE) in Hugging Face's "rotate_half" convention: dimension i is
// paired with i + head_dim/2, and both halves of cos/sin repeat the same frequencies.
// Frequencies follow rope_theta and rope_scaling ("linear", or "llama3": long wavelengths
// slowed down by `factor`, short ones kept, a smooth blend in between).
#pragma once

#include <torch/torch.h>

#include "models/model_config.h"

namespace ooze::models {

// cos and sin for a batch of tokens, each [T, head_dim] in the compute dtype. Computed once per
// forward and shared by every layer.
struct RotaryTables {
  torch::Tensor cos;
  torch::Tensor sin;
};

class RotaryEmbedding {
 public:
  explicit RotaryEmbedding(const ModelConfig& config);

  // position_ids: [T] integers, any device. The angles are computed in fp32 (as HF does, so
  // trainer and other engines agree), cos/sin then cast to `dtype`.
  RotaryTables tables(const torch::Tensor& position_ids, c10::ScalarType dtype) const;

  // [head_dim / 2] fp32 on the CPU.
  const torch::Tensor& inverse_frequencies() const { return inverse_frequencies_; }

 private:
  torch::Tensor inverse_frequencies_;
};

// x: [T, heads, head_dim]; tables from RotaryEmbedding::tables for the same T tokens.
torch::Tensor apply_rotary(const torch::Tensor& x, const RotaryTables& tables);

}  // namespace ooze::models
