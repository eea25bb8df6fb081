#include "models/linear.h"

namespace ooze::models {

LinearImpl::LinearImpl(int64_t in_features, int64_t out_features, bool with_bias,
                       c10::ScalarType dtype) {
  weight = register_parameter("weight", torch::empty({out_features, in_features}, dtype));
  if (with_bias) bias = register_parameter("bias", torch::empty({out_features}, dtype));
}

torch::Tensor LinearImpl::forward(const torch::Tensor& x) {
  return bias.defined() ? torch::linear(x, weight, bias) : torch::linear(x, weight);
}

}  // namespace ooze::models
