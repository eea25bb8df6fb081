// Root-mean-square layer norm over the last dimension, as Hugging Face computes it: the
// statistics and the normalisation in fp32, the result cast back to the input dtype, then
// scaled by the weight in that dtype.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace ooze::models {

class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t size, double eps, c10::ScalarType dtype);

  // x: [..., size] -> same shape and dtype.
  torch::Tensor forward(const torch::Tensor& x);

  torch::Tensor weight;  // [size]
  double eps;
};
TORCH_MODULE(RMSNorm);

}  // namespace ooze::models
