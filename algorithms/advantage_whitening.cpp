#include "algorithms/advantage_whitening.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"

namespace ooze::algorithms {

WhiteningStats& WhiteningStats::operator+=(const WhiteningStats& other) {
  sum += other.sum;
  sum_of_squares += other.sum_of_squares;
  count += other.count;
  return *this;
}

at::Tensor WhiteningStats::to_tensor() const {
  at::Tensor out = at::empty({3}, at::TensorOptions().dtype(at::kDouble));
  double* data = out.data_ptr<double>();
  data[0] = sum;
  data[1] = sum_of_squares;
  data[2] = count;
  return out;
}

WhiteningStats WhiteningStats::from_tensor(const at::Tensor& reduced) {
  if (!reduced.defined() || reduced.numel() != 3) {
    throw Error("WhiteningStats::from_tensor: expected the 3 values of to_tensor()");
  }
  at::Tensor host = reduced.to(at::kCPU, at::kDouble).contiguous();
  const double* data = host.data_ptr<double>();
  return WhiteningStats{data[0], data[1], data[2]};
}

WhiteningStats masked_whitening_stats(const std::vector<at::Tensor>& values,
                                      const std::vector<at::Tensor>& masks) {
  if (values.size() != masks.size()) {
    throw Error("masked_whitening_stats: " + std::to_string(values.size()) + " samples but " +
                std::to_string(masks.size()) + " masks");
  }
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i].numel() != masks[i].numel()) {
      throw Error("masked_whitening_stats: sample " + std::to_string(i) + " has " +
                  std::to_string(values[i].numel()) + " values but " +
                  std::to_string(masks[i].numel()) + " mask entries");
    }
  }
  if (values.empty()) return WhiteningStats{};
  at::NoGradGuard no_grad;
  at::Tensor x = at::cat(values).to(at::kDouble);
  at::Tensor m = at::cat(masks).to(x.device(), at::kDouble);
  at::Tensor sums = at::stack({(x * m).sum(), (x.square() * m).sum(), m.sum()});
  return WhiteningStats::from_tensor(sums);
}

std::vector<at::Tensor> apply_whitening(const std::vector<at::Tensor>& values,
                                        const WhiteningStats& global, double epsilon) {
  if (global.count <= 0) {
    throw Error(
        "apply_whitening: the step has no counted response token on any rank (the reduced mask "
        "sum is 0), so advantages cannot be whitened: check the response masks");
  }
  const double mean = global.sum / global.count;
  double variance = std::max(global.sum_of_squares / global.count - mean * mean, 0.0);
  if (global.count >= 2) variance *= global.count / (global.count - 1);
  const double inverse_std = 1.0 / std::sqrt(variance + epsilon);
  std::vector<at::Tensor> out;
  out.reserve(values.size());
  for (const at::Tensor& x : values) out.push_back((x - mean) * inverse_std);
  return out;
}

}  // namespace ooze::algorithms
