#include "models/fused_norm.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <vector>

namespace ooze::models {
namespace {

bool fusable(const torch::Tensor& x, const torch::Tensor& weight) {
  const bool needs_grad =
      torch::GradMode::is_enabled() && (x.requires_grad() || weight.requires_grad());
  return !needs_grad && x.device().is_cpu() && x.scalar_type() == torch::kFloat &&
         weight.scalar_type() == torch::kFloat && x.is_contiguous() && weight.is_contiguous() &&
         x.dim() >= 1 && x.size(-1) == weight.numel();
}

// 1 / sqrt(mean(x^2) + eps) over one row; eps in fp32, as LibTorch adds a scalar to a fp32 tensor.
float inverse_rms(const float* x, int64_t size, float eps) {
  double sum = 0;
  for (int64_t i = 0; i < size; ++i) sum += static_cast<double>(x[i]) * x[i];
  return 1.0f / std::sqrt(static_cast<float>(sum / static_cast<double>(size)) + eps);
}

void normalize_row(const float* x, const float* weight, int64_t size, float eps, float* out) {
  const float inverse = inverse_rms(x, size, eps);
  for (int64_t i = 0; i < size; ++i) out[i] = weight[i] * (x[i] * inverse);
}

// Rows per parallel task: about 32k elements, so a decode step's few rows run inline.
int64_t grain(int64_t size) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(size, 1)); }

}  // namespace

torch::Tensor fused_rms_norm(RMSNormImpl& norm, const torch::Tensor& x) {
  if (!fusable(x, norm.weight)) return norm.forward(x);
  const int64_t size = x.size(-1), rows = size == 0 ? 0 : x.numel() / size;
  torch::Tensor out = torch::empty_like(x);
  const float* in = x.data_ptr<float>();
  const float* weight = norm.weight.data_ptr<float>();
  float* result = out.data_ptr<float>();
  const auto eps = static_cast<float>(norm.eps);
  at::parallel_for(0, rows, grain(size), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      normalize_row(in + r * size, weight, size, eps, result + r * size);
    }
  });
  return out;
}

torch::Tensor fused_rms_norm_rotary(RMSNormImpl* norm, const torch::Tensor& x,
                                    const RotaryTables& rope) {
  const bool rope_fusable = rope.cos.scalar_type() == torch::kFloat &&
                            rope.sin.scalar_type() == torch::kFloat && rope.cos.is_contiguous() &&
                            rope.sin.is_contiguous() && rope.cos.device().is_cpu() &&
                            rope.sin.device().is_cpu();
  if (norm == nullptr || x.dim() != 3 || !fusable(x, norm->weight) || !rope_fusable ||
      rope.cos.sizes() != torch::IntArrayRef{x.size(0), x.size(2)} ||
      rope.sin.sizes() != rope.cos.sizes() || x.size(2) % 2 != 0) {
    return apply_rotary(norm == nullptr ? x : norm->forward(x), rope);
  }
  const int64_t heads = x.size(1), head_dim = x.size(2), half = head_dim / 2;
  torch::Tensor out = torch::empty_like(x);
  const float* in = x.data_ptr<float>();
  const float* weight = norm->weight.data_ptr<float>();
  const float* cos = rope.cos.data_ptr<float>();
  const float* sin = rope.sin.data_ptr<float>();
  float* result = out.data_ptr<float>();
  const auto eps = static_cast<float>(norm->eps);
  at::parallel_for(0, x.size(0) * heads, grain(head_dim), [&](int64_t begin, int64_t end) {
    std::vector<float> normed(static_cast<size_t>(head_dim));
    for (int64_t r = begin; r < end; ++r) {
      normalize_row(in + r * head_dim, weight, head_dim, eps, normed.data());
      // rotate_half: the first half pairs with minus the second, the second with the first.
      const float* c = cos + (r / heads) * head_dim;
      const float* s = sin + (r / heads) * head_dim;
      float* o = result + r * head_dim;
      for (int64_t i = 0; i < half; ++i) o[i] = normed[i] * c[i] + -normed[i + half] * s[i];
      for (int64_t i = half; i < head_dim; ++i) o[i] = normed[i] * c[i] + normed[i - half] * s[i];
    }
  });
  return out;
}

}  // namespace ooze::models
