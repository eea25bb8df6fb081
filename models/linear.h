// y = x W^T (+ b), with parameters named "weight" and "bias" like torch.nn.Linear (so Hugging
// Face names map one to one), created uninitialised in the requested dtype: models are either
// loaded from a checkpoint or filled by TransformerModel::init_weights, so a default init would
// only cost time (minutes for billions of parameters).
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace ooze::models {

class LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(int64_t in_features, int64_t out_features, bool with_bias, c10::ScalarType dtype);

  // x: [..., in_features] -> [..., out_features].
  torch::Tensor forward(const torch::Tensor& x);

  torch::Tensor weight;  // [out_features, in_features]
  torch::Tensor bias;    // [out_features], undefined without bias
};
TORCH_MODULE(Linear);

}  // namespace ooze::models
