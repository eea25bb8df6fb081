// few_rows_linear against the product in fp64 (LibTorch's matmul of the inputs widened), at the
// row counts, widths and output counts that exercise its blocks and tails, on two threads.
#include "models/few_rows_linear.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include "core/cpu_features.h"

namespace ooze::models {
namespace {

class FewRowsLinearTest : public ::testing::Test {
 protected:
  void SetUp() override {
    at::set_num_threads(2);  // the weight's rows split between two threads
    at::manual_seed(3);
  }
  void TearDown() override { at::set_num_threads(1); }
};

TEST_F(FewRowsLinearTest, EqualsTheProductInFp64) {
  if (!cpu_has_avx512f()) GTEST_SKIP() << "no AVX-512: linear() keeps OpenBLAS's gemm";
  c10::InferenceMode inference;
  // rows: a block of 4 and tails of 1-3; in: whole vectors and a masked tail; out: blocks of 4,
  // a tail, and more than one thread's share.
  for (int64_t rows : {2, 3, 5, 16, 32}) {
    for (int64_t in : {16, 37, 1024}) {
      for (int64_t out : {7, 130}) {
        for (bool with_bias : {false, true}) {
          const at::Tensor x = at::randn({rows, in});
          const at::Tensor weight = at::randn({out, in}) / 8;
          const at::Tensor bias = with_bias ? at::randn({out}) : at::Tensor();
          ASSERT_TRUE(few_rows_linear_applies(x, weight, bias));
          const at::Tensor got = few_rows_linear(x, weight, bias);
          at::Tensor expected = at::matmul(x.to(at::kDouble), weight.to(at::kDouble).t());
          if (with_bias) expected = expected + bias.to(at::kDouble);
          ASSERT_EQ(got.sizes(), (std::vector<int64_t>{rows, out}));
          const double error = (got.to(at::kDouble) - expected).abs().max().item<double>();
          EXPECT_LT(error, 2e-5) << rows << " rows, " << in << " in, " << out << " out";
        }
      }
    }
  }
}

TEST_F(FewRowsLinearTest, TakesOnlyAFewFp32RowsUnderInferenceMode) {
  const at::Tensor weight = at::randn({8, 16});
  const at::Tensor none;
  // Outside InferenceMode (a trainer's forward, with or without a gradient): gemm's order stays.
  EXPECT_FALSE(few_rows_linear_applies(at::randn({4, 16}), weight, none));
  c10::InferenceMode inference;
  EXPECT_EQ(few_rows_linear_applies(at::randn({4, 16}), weight, none), cpu_has_avx512f());
  EXPECT_FALSE(few_rows_linear_applies(at::randn({1, 16}), weight, none));  // torch::mv's
  EXPECT_FALSE(few_rows_linear_applies(at::randn({kFewRowsLinearMaxRows + 1, 16}), weight, none));
  EXPECT_FALSE(few_rows_linear_applies(at::randn({4, 16}).to(at::kBFloat16),
                                       weight.to(at::kBFloat16), none));
  EXPECT_FALSE(few_rows_linear_applies(at::randn({16, 4}).t(), weight, none));  // not contiguous
  EXPECT_FALSE(few_rows_linear_applies(at::randn({4, 16}), weight, at::randn({7})));
}

}  // namespace
}  // namespace ooze::models
