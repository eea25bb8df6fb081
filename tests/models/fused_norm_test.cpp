// fused_rms_norm and fused_rms_norm_rotary against the module's LibTorch operations and against
// the formula in fp64, written here as plain loops.
#include "models/fused_norm.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "models/model_config.h"

namespace ooze::models {
namespace {

class FusedNormTest : public ::testing::Test {
 protected:
  void SetUp() override {
    at::set_num_threads(1);
    torch::manual_seed(7);
  }
};

RMSNorm random_norm(int64_t size) {
  RMSNorm norm(size, 1e-6, torch::kFloat);
  torch::NoGradGuard no_grad;
  norm->weight.copy_(torch::rand({size}) + 0.5);
  return norm;
}

// weight * x / sqrt(mean(x^2) + eps) of one row, in fp64.
std::vector<double> reference_row(const float* x, const float* weight, int64_t size, double eps) {
  double sum = 0;
  for (int64_t i = 0; i < size; ++i) sum += static_cast<double>(x[i]) * x[i];
  const double inverse = 1.0 / std::sqrt(sum / static_cast<double>(size) + eps);
  std::vector<double> row(static_cast<size_t>(size));
  for (int64_t i = 0; i < size; ++i) row[i] = weight[i] * (x[i] * inverse);
  return row;
}

double max_abs_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

// As in a cache step: nothing records a graph, so the fused loops run.
TEST_F(FusedNormTest, EqualsTheFormulaInFp64AndTheModuleForEveryRow) {
  torch::NoGradGuard no_grad;
  for (int64_t rows : {1, 3, 100}) {  // 100 rows of 1024 split into parallel tasks
    for (int64_t size : {1, 7, 128, 1024}) {
      RMSNorm norm = random_norm(size);
      const torch::Tensor x = torch::randn({rows, size}) * 3;
      const torch::Tensor got = fused_rms_norm(*norm, x);
      ASSERT_EQ(got.sizes(), x.sizes());
      torch::Tensor expected = torch::empty({rows, size}, torch::kDouble);
      for (int64_t r = 0; r < rows; ++r) {
        const std::vector<double> row =
            reference_row(x[r].data_ptr<float>(), norm->weight.data_ptr<float>(), size, 1e-6);
        expected[r].copy_(torch::tensor(row, torch::kDouble));
      }
      // fp32 results: a few units in the last place of values up to ~10.
      EXPECT_LT(max_abs_difference(got, expected), 5e-6) << rows << " x " << size;
      EXPECT_LT(max_abs_difference(got, norm->forward(x)), 5e-6) << rows << " x " << size;
    }
  }
}

TEST_F(FusedNormTest, NormAndRotaryEqualApplyRotaryOfTheNormedHeads) {
  torch::NoGradGuard no_grad;
  ModelConfig config;
  config.head_dim = 128;
  config.rope_theta = 1e6;
  const RotaryEmbedding rotary(config);
  const RotaryTables rope =
      rotary.tables(torch::tensor({0, 5, 17, 300}, torch::kLong), torch::kFloat);
  RMSNorm norm = random_norm(config.head_dim);
  const torch::Tensor x = torch::randn({4, 6, config.head_dim}) * 2;

  const torch::Tensor got = fused_rms_norm_rotary(norm.get(), x, rope);
  const torch::Tensor expected = apply_rotary(norm->forward(x), rope);
  ASSERT_EQ(got.sizes(), x.sizes());
  EXPECT_LT(max_abs_difference(got, expected), 5e-6);
  // The rotation moves values between the halves: a norm alone is far from the result.
  EXPECT_GT(max_abs_difference(got, norm->forward(x)), 0.1);

  // Without a norm (a model with no qk-norm): the rotary alone.
  EXPECT_TRUE(torch::equal(fused_rms_norm_rotary(nullptr, x, rope), apply_rotary(x, rope)));
}

TEST_F(FusedNormTest, OtherInputsTakeTheModulesOperations) {
  RMSNorm norm = random_norm(64);
  // A tensor that needs a gradient (or a weight that does, outside no-grad) keeps its graph.
  const torch::Tensor leaf = torch::randn({2, 64}).requires_grad_();
  const torch::Tensor with_grad = fused_rms_norm(*norm, leaf);
  ASSERT_TRUE(with_grad.requires_grad());
  with_grad.sum().backward();
  EXPECT_TRUE(leaf.grad().defined());
  // bf16 and non-contiguous input: the module's result, bit for bit.
  torch::NoGradGuard no_grad;
  const torch::Tensor bf16 = torch::randn({3, 64}).to(torch::kBFloat16);
  RMSNorm bf16_norm(64, 1e-6, torch::kBFloat16);
  EXPECT_TRUE(torch::equal(fused_rms_norm(*bf16_norm, bf16), bf16_norm->forward(bf16)));
  const torch::Tensor strided = torch::randn({64, 3}).t();
  EXPECT_TRUE(torch::equal(fused_rms_norm(*norm, strided), norm->forward(strided)));
}

}  // namespace
}  // namespace ooze::models
