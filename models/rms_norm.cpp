#include "models/rms_norm.h"

namespace ooze::models {

RMSNormImpl::RMSNormImpl(int64_t size, double eps, c10::ScalarType dtype) : eps(eps) {
  weight = register_parameter("weight", torch::ones({size}, dtype));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  torch::Tensor x32 = x.to(torch::kFloat);
  torch::Tensor inverse_rms = torch::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * (x32 * inverse_rms).to(x.scalar_type());
}

}  // namespace ooze::models
