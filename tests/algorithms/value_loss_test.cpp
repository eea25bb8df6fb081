// The clipped value loss against a plain loop, its gradient against finite differences.
#include "algorithms/value_loss.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "tests/algorithms/double_vectors.h"

namespace ooze::algorithms {
namespace value_loss_test {

struct Critic {
  std::vector<int> cu_seqlens = {0};
  Vec mask, values, old_values, returns;

  ValueLossInputs inputs() const {
    ValueLossInputs in;
    in.cu_seqlens = at::tensor(at::ArrayRef<int>(cu_seqlens), at::kInt).clone();
    in.loss_mask = tensor_of(mask);
    in.values = tensor_of(values);
    in.old_values = tensor_of(old_values);
    in.returns = tensor_of(returns);
    return in;
  }
};

Critic random_critic(int samples, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::normal_distribution<double> normal(0.0, 1.0);
  Critic c;
  for (int s = 0; s < samples; ++s) {
    int prompt = 1 + static_cast<int>(uniform(rng) * 3);
    int response = s == 0 ? 0 : static_cast<int>(uniform(rng) * 8);
    for (int t = 0; t < prompt + response; ++t) {
      c.mask.push_back(t >= prompt && uniform(rng) > 0.1 ? 1.0 : 0.0);
      c.old_values.push_back(normal(rng));
      c.values.push_back(c.old_values.back() + 0.4 * normal(rng));
      c.returns.push_back(normal(rng));
    }
    c.cu_seqlens.push_back(static_cast<int>(c.mask.size()));
  }
  return c;
}

// Sequence-mean of token-means, scaled by the gradient factor, as loss_aggregation.h states.
double reference_value_loss(const Critic& c, double clip, double global_sequences, double factor,
                            double* clipfrac) {
  double total = 0;
  *clipfrac = 0;
  for (size_t s = 0; s + 1 < c.cu_seqlens.size(); ++s) {
    double sum = 0, clipped = 0, count = 0;
    for (int t = c.cu_seqlens[s]; t < c.cu_seqlens[s + 1]; ++t) {
      double change = c.values[t] - c.old_values[t];
      double clipped_value = c.old_values[t] + std::min(clip, std::max(-clip, change));
      double loss = std::max(std::pow(c.values[t] - c.returns[t], 2),
                             std::pow(clipped_value - c.returns[t], 2));
      sum += c.mask[t] * loss;
      clipped += c.mask[t] * (std::abs(change) > clip);
      count += c.mask[t];
    }
    total += sum / std::max(count, 1.0) / global_sequences;
    *clipfrac += clipped / std::max(count, 1.0) / global_sequences;
  }
  return total * factor;
}

LossScale scale_of(const Critic& c) {
  LossScale scale;
  scale.global_sequences = 2.0 * static_cast<double>(c.cu_seqlens.size() - 1);
  scale.dp_size = 2;
  return scale;
}

TEST(ValueLossTest, MatchesReference) {
  Critic c = random_critic(8, 1);
  ValueLossOptions options;
  options.value_clip = 0.3;
  LossScale scale = scale_of(c);
  LossOutput out = value_loss(c.inputs(), options, scale);
  double clipfrac = 0;
  double expected = reference_value_loss(c, 0.3, scale.global_sequences, 2.0, &clipfrac);
  EXPECT_NEAR(out.loss.item<double>(), expected, 1e-12);
  EXPECT_NEAR(out.metrics.get("value_loss"), expected / 2.0, 1e-12);
  EXPECT_NEAR(out.metrics.get("value_clipfrac"), clipfrac, 1e-12);
  EXPECT_GT(clipfrac, 0.0) << "the inputs should exercise clipping";
}

TEST(ValueLossTest, GradientMatchesFiniteDifferences) {
  Critic c = random_critic(6, 2);
  ValueLossOptions options;
  options.value_clip = 0.3;
  LossScale scale = scale_of(c);
  ValueLossInputs in = c.inputs();
  in.values.requires_grad_(true);
  value_loss(in, options, scale).loss.backward();
  Vec grad = vec_of(in.values.grad());
  const double h = 1e-6;
  for (size_t t = 0; t < c.values.size(); ++t) {
    Critic up = c, down = c;
    up.values[t] += h;
    down.values[t] -= h;
    double numeric = (value_loss(up.inputs(), options, scale).loss.item<double>() -
                      value_loss(down.inputs(), options, scale).loss.item<double>()) /
                     (2 * h);
    EXPECT_NEAR(grad[t], numeric, 1e-7 * (1 + std::abs(numeric))) << t;
  }
}

TEST(ValueLossTest, InvalidInputsAreRejected) {
  Critic c = random_critic(3, 3);
  ValueLossOptions options;
  options.value_clip = 0;
  EXPECT_THROW(value_loss(c.inputs(), options, scale_of(c)), Error);
  ValueLossInputs missing = c.inputs();
  missing.returns = at::Tensor();
  EXPECT_THROW(value_loss(missing, ValueLossOptions{}, scale_of(c)), Error);
}

}  // namespace value_loss_test
}  // namespace ooze::algorithms
