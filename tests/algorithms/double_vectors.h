// The tests compare against references written with plain loops over std::vector<double>;
// these convert between those vectors and tensors.
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace ooze::algorithms {

using Vec = std::vector<double>;

inline at::Tensor tensor_of(const Vec& values) {
  return at::tensor(at::ArrayRef<double>(values), at::TensorOptions().dtype(at::kDouble)).clone();
}

inline Vec vec_of(const at::Tensor& tensor) {
  at::Tensor host = tensor.detach().to(at::kCPU, at::kDouble).contiguous();
  return Vec(host.data_ptr<double>(), host.data_ptr<double>() + host.numel());
}

}  // namespace ooze::algorithms
