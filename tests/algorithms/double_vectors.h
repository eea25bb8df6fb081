// The tests compare against references written with plain loops over std::vector<double>;
// these convert between those vectors and tensors, and differentiate such references
// numerically.
#pragma once

#include <ATen/ATen.h>

#include <functional>
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

// Central finite differences of f at x, one coordinate at a time.
inline Vec finite_difference(const std::function<double(const Vec&)>& f, Vec x, double h = 1e-6) {
  Vec grad(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    double saved = x[i];
    x[i] = saved + h;
    double up = f(x);
    x[i] = saved - h;
    double down = f(x);
    x[i] = saved;
    grad[i] = (up - down) / (2 * h);
  }
  return grad;
}

}  // namespace ooze::algorithms
