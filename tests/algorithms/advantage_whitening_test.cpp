// Whitening over the step's counted tokens, with the batch split over "ranks" in one process: each
// rank's statistics summed here stand in for the all-reduce.
#include "algorithms/advantage_whitening.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "tests/algorithms/double_vectors.h"

namespace ooze::algorithms {
namespace advantage_whitening_test {

struct Step {
  std::vector<Vec> values, masks;
};

Step random_step(int samples, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uniform(-2.0, 3.0);
  std::uniform_int_distribution<int> length(0, 12);
  Step step;
  for (int i = 0; i < samples; ++i) {
    int n = length(rng);
    Vec v(n), m(n);
    for (int t = 0; t < n; ++t) {
      v[t] = uniform(rng);
      m[t] = uniform(rng) > -1.0 ? 1.0 : 0.0;
    }
    step.values.push_back(v);
    step.masks.push_back(m);
  }
  return step;
}

// Whitening of the whole step, two passes over the counted values.
std::vector<Vec> reference_whiten(const Step& step) {
  double count = 0, sum = 0;
  for (size_t i = 0; i < step.values.size(); ++i) {
    for (size_t t = 0; t < step.values[i].size(); ++t) {
      count += step.masks[i][t];
      sum += step.masks[i][t] * step.values[i][t];
    }
  }
  double mean = sum / count, squares = 0;
  for (size_t i = 0; i < step.values.size(); ++i) {
    for (size_t t = 0; t < step.values[i].size(); ++t) {
      squares += step.masks[i][t] * std::pow(step.values[i][t] - mean, 2);
    }
  }
  double variance = count >= 2 ? squares / (count - 1) : squares / count;
  std::vector<Vec> out = step.values;
  for (Vec& sample : out) {
    for (double& v : sample) v = (v - mean) / std::sqrt(variance + 1e-8);
  }
  return out;
}

std::vector<at::Tensor> tensors_of(const std::vector<Vec>& rows, size_t begin, size_t end) {
  std::vector<at::Tensor> out;
  for (size_t i = begin; i < end; ++i) out.push_back(tensor_of(rows[i]));
  return out;
}

TEST(AdvantageWhiteningTest, SplitAcrossRanksMatchesWholeStep) {
  Step step = random_step(10, 1);
  std::vector<Vec> expected = reference_whiten(step);
  // Contiguous, uneven shares; with 4 ranks one gets no sample at all.
  for (std::vector<size_t> bounds :
       std::vector<std::vector<size_t>>{{0, 10}, {0, 6, 10}, {0, 3, 3, 8, 10}}) {
    const size_t ranks = bounds.size() - 1;
    WhiteningStats reduced;
    for (size_t r = 0; r < ranks; ++r) {
      reduced += masked_whitening_stats(tensors_of(step.values, bounds[r], bounds[r + 1]),
                                        tensors_of(step.masks, bounds[r], bounds[r + 1]));
    }
    // Through the tensor form, as the all-reduce sees it.
    WhiteningStats global = WhiteningStats::from_tensor(reduced.to_tensor());
    for (size_t r = 0; r < ranks; ++r) {
      std::vector<at::Tensor> out =
          apply_whitening(tensors_of(step.values, bounds[r], bounds[r + 1]), global);
      for (size_t i = bounds[r]; i < bounds[r + 1]; ++i) {
        Vec got = vec_of(out[i - bounds[r]]);
        ASSERT_EQ(got.size(), expected[i].size());
        for (size_t t = 0; t < got.size(); ++t) {
          EXPECT_NEAR(got[t], expected[i][t], 1e-10) << "ranks " << ranks << " sample " << i;
        }
      }
    }
  }
}

TEST(AdvantageWhiteningTest, CountedTokensHaveZeroMeanUnitVariance) {
  Step step = random_step(6, 2);
  std::vector<at::Tensor> values = tensors_of(step.values, 0, 6);
  std::vector<at::Tensor> masks = tensors_of(step.masks, 0, 6);
  std::vector<at::Tensor> out = apply_whitening(values, masked_whitening_stats(values, masks));
  double count = 0, sum = 0, squares = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    Vec v = vec_of(out[i]);
    for (size_t t = 0; t < v.size(); ++t) {
      count += step.masks[i][t];
      sum += step.masks[i][t] * v[t];
      squares += step.masks[i][t] * v[t] * v[t];
    }
  }
  EXPECT_NEAR(sum / count, 0.0, 1e-12);
  EXPECT_NEAR(squares / (count - 1), 1.0, 1e-6);  // unbiased variance, up to the 1e-8 epsilon
}

TEST(AdvantageWhiteningTest, ConstantAndSingleTokenStepsStayFinite) {
  std::vector<at::Tensor> constant = {tensor_of({0.5, 0.5, 0.5})};
  std::vector<at::Tensor> ones = {tensor_of({1, 1, 1})};
  for (double v : vec_of(apply_whitening(constant, masked_whitening_stats(constant, ones))[0])) {
    EXPECT_TRUE(std::isfinite(v));
    EXPECT_NEAR(v, 0.0, 1e-6);
  }
  std::vector<at::Tensor> single = {tensor_of({2.0})};
  std::vector<at::Tensor> one = {tensor_of({1.0})};
  double v = vec_of(apply_whitening(single, masked_whitening_stats(single, one))[0])[0];
  EXPECT_TRUE(std::isfinite(v));
  EXPECT_NEAR(v, 0.0, 1e-12);
}

TEST(AdvantageWhiteningTest, StepWithoutCountedTokensIsAnError) {
  std::vector<at::Tensor> values = {tensor_of({1.0, 2.0}), tensor_of({})};
  std::vector<at::Tensor> masks = {tensor_of({0.0, 0.0}), tensor_of({})};
  WhiteningStats stats = masked_whitening_stats(values, masks);
  EXPECT_EQ(stats.count, 0.0);
  EXPECT_THROW(apply_whitening(values, stats), Error);
  EXPECT_EQ(masked_whitening_stats({}, {}).count, 0.0);
  EXPECT_THROW(masked_whitening_stats(values, {masks[0]}), Error);
}

}  // namespace advantage_whitening_test
}  // namespace ooze::algorithms
