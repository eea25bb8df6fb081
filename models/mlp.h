// The SwiGLU feed-forward block: down_proj(silu(gate_proj(x)) * up_proj(x)), no biases.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "models/linear.h"

namespace ooze::models {

class MLPImpl : public torch::nn::Module {
 public:
  MLPImpl(int64_t hidden_size, int64_t intermediate_size, c10::ScalarType dtype);

  // x: [..., hidden_size] -> [..., hidden_size].
  torch::Tensor forward(const torch::Tensor& x);

  Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(MLP);

}  // namespace ooze::models
