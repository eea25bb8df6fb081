// log_softmax_fp64_sum and the trainer's token log-probs over a Qwen3-sized vocabulary, against
// LibTorch's log_softmax in fp64: at a token of probability near 1 an fp32 log_softmax is off by
// about 5e-5; summing in fp64 keeps the error to fp32 rounding.
#include "models/log_softmax.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "models/log_probs.h"

namespace ooze::models {
namespace log_softmax_test {

constexpr int64_t kQwen3Vocabulary = 151936;

// Four rows of logits whose token 0 is far above the rest: its probability is 1 - 1e-4 or so.
at::Tensor peaked_logits() {
  at::Tensor logits =
      at::randn({4, kQwen3Vocabulary}, at::detail::createCPUGenerator(7), at::kFloat) * 2;
  logits.select(1, 0).add_(25);
  return logits;
}

double max_error(const at::Tensor& values, const at::Tensor& reference) {
  return (values.to(at::kDouble) - reference).abs().max().item<double>();
}

TEST(LogSoftmaxFp64Sum, IsExactToFp32RoundingWhereAnFp32SumIsNot) {
  at::set_num_threads(1);
  const at::Tensor logits = peaked_logits();
  const at::Tensor reference = at::log_softmax(logits.to(at::kDouble), -1);
  const at::Tensor peak = reference.select(1, 0);
  EXPECT_LT(peak.abs().max().item<double>(), 1e-3);  // the rows are peaked
  const at::Tensor ours = log_softmax_fp64_sum(logits);
  EXPECT_EQ(ours.scalar_type(), at::kFloat);
  EXPECT_LT(max_error(ours.select(1, 0), peak), 1e-9);
  // LibTorch's fp32 log_softmax, for contrast: the error this removes.
  EXPECT_GT(max_error(at::log_softmax(logits, -1).select(1, 0), peak), 1e-6);
  EXPECT_LT(max_error(ours, reference), 4e-6);  // every token: fp32 rounding of values up to ~60
}

TEST(LogSoftmaxFp64Sum, ItsGradientIsLogSoftmaxs) {
  at::set_num_threads(1);
  const at::Tensor logits =
      at::randn({4, 1000}, at::detail::createCPUGenerator(8), at::kFloat).requires_grad_(true);
  const at::Tensor weights = at::rand({4, 1000}, at::detail::createCPUGenerator(9));
  const at::Tensor grad =
      torch::autograd::grad({(log_softmax_fp64_sum(logits) * weights).sum()}, {logits})[0];
  const at::Tensor expected = torch::autograd::grad(
      {(at::log_softmax(logits.to(at::kDouble), -1) * weights.to(at::kDouble)).sum()}, {logits})[0];
  EXPECT_LT(max_error(grad, expected), 1e-5);
}

// The trainer's chunked log-probs (compute_token_log_probs) sum in fp64 the same way. Hidden
// state r is the unit vector r, so row r of the logits is column r of the head: the peaked rows.
TEST(LogSoftmaxFp64Sum, TheTrainersTokenLogProbsAreAsExact) {
  at::set_num_threads(1);
  const at::Tensor logits = peaked_logits();
  const at::Tensor weight = at::zeros({kQwen3Vocabulary, 8}, at::kFloat);
  weight.narrow(1, 0, 4).copy_(logits.t());
  const at::Tensor hidden = at::eye(4, 8, at::kFloat);
  const at::Tensor reference = at::log_softmax(logits.to(at::kDouble), -1).select(1, 0);
  const TokenLogProbs out =
      compute_token_log_probs(hidden, weight, at::zeros({4}, at::kLong), 1.0, 3);
  EXPECT_LT(max_error(out.log_probs, reference), 1e-9);
}

}  // namespace log_softmax_test
}  // namespace ooze::models
