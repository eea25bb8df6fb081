// compute_token_log_probs against references written here: a naive full-logits computation
// (values and autograd gradients), plain double loops, and central finite differences.
#include "models/log_probs.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "core/error.h"

namespace ooze {
namespace models {
namespace log_probs_test {

class LogProbsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    at::set_num_threads(1);
    torch::manual_seed(1234);
  }
};

struct Case {
  at::Tensor hidden, weight, targets, grad_log_probs, grad_entropy;
};

Case make_case(int64_t tokens, int64_t hidden_size, int64_t vocab, at::ScalarType dtype) {
  Case c;
  c.hidden = torch::randn({tokens, hidden_size}, torch::kDouble).to(dtype);
  c.weight = (torch::randn({vocab, hidden_size}, torch::kDouble) * 0.5).to(dtype);
  c.targets = torch::randint(0, vocab, {tokens}, torch::kLong);
  c.grad_log_probs = torch::randn({tokens}, torch::kFloat);
  c.grad_entropy = torch::randn({tokens}, torch::kFloat);
  return c;
}

struct Result {
  at::Tensor log_probs, entropy, grad_hidden, grad_weight;
};

// The obvious way: materialise all logits, upcast, log_softmax, and let autograd differentiate.
Result naive(const Case& c, double temperature, bool with_entropy) {
  at::Tensor hidden = c.hidden.detach().clone().requires_grad_(true);
  at::Tensor weight = c.weight.detach().clone().requires_grad_(true);
  at::Tensor logits = torch::matmul(hidden, weight.t()).to(torch::kFloat) / temperature;
  at::Tensor log_softmax = torch::log_softmax(logits, -1);
  at::Tensor log_probs = log_softmax.gather(1, c.targets.unsqueeze(1)).squeeze(1);
  at::Tensor loss = (log_probs * c.grad_log_probs).sum();
  Result r;
  if (with_entropy) {
    r.entropy = -(torch::softmax(logits, -1) * log_softmax).sum(-1);
    loss = loss + (r.entropy * c.grad_entropy).sum();
  }
  loss.backward();
  r.log_probs = log_probs.detach();
  if (r.entropy.defined()) r.entropy = r.entropy.detach();
  r.grad_hidden = hidden.grad();
  r.grad_weight = weight.grad();
  return r;
}

Result chunked(const Case& c, double temperature, int64_t chunk, bool with_entropy) {
  at::Tensor hidden = c.hidden.detach().clone().requires_grad_(true);
  at::Tensor weight = c.weight.detach().clone().requires_grad_(true);
  TokenLogProbs out =
      compute_token_log_probs(hidden, weight, c.targets, temperature, chunk, with_entropy);
  at::Tensor loss = (out.log_probs * c.grad_log_probs.to(out.log_probs.scalar_type())).sum();
  if (with_entropy)
    loss = loss + (out.entropy * c.grad_entropy.to(out.entropy.scalar_type())).sum();
  loss.backward();
  Result r;
  r.log_probs = out.log_probs.detach();
  if (with_entropy) r.entropy = out.entropy.detach();
  r.grad_hidden = hidden.grad();
  r.grad_weight = weight.grad();
  return r;
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  if (a.numel() == 0) return 0.0;
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

double max_abs(const at::Tensor& a) { return a.to(torch::kDouble).abs().max().item<double>(); }

TEST_F(LogProbsTest, Fp32MatchesFullLogitsWithUnevenChunksTemperatureAndEntropy) {
  const Case c = make_case(/*tokens=*/37, /*hidden=*/16, /*vocab=*/50, torch::kFloat);
  for (double temperature : {1.0, 0.7, 1.9}) {
    const Result expected = naive(c, temperature, /*with_entropy=*/true);
    const Result got = chunked(c, temperature, /*chunk=*/8, /*with_entropy=*/true);
    EXPECT_EQ(got.log_probs.scalar_type(), torch::kFloat);
    EXPECT_EQ(got.log_probs.sizes(), (std::vector<int64_t>{37}));
    EXPECT_LT(max_abs_diff(got.log_probs, expected.log_probs), 1e-5) << temperature;
    EXPECT_LT(max_abs_diff(got.entropy, expected.entropy), 1e-5) << temperature;
    EXPECT_LT(max_abs_diff(got.grad_hidden, expected.grad_hidden), 1e-5) << temperature;
    EXPECT_LT(max_abs_diff(got.grad_weight, expected.grad_weight), 1e-5) << temperature;
  }
}

TEST_F(LogProbsTest, Fp32WithoutEntropyMatchesFullLogits) {
  const Case c = make_case(21, 8, 33, torch::kFloat);
  const Result expected = naive(c, 1.0, false);
  const Result got = chunked(c, 1.0, 4, false);
  EXPECT_FALSE(got.entropy.defined());
  EXPECT_LT(max_abs_diff(got.log_probs, expected.log_probs), 1e-5);
  EXPECT_LT(max_abs_diff(got.grad_hidden, expected.grad_hidden), 1e-5);
  EXPECT_LT(max_abs_diff(got.grad_weight, expected.grad_weight), 1e-5);
}

TEST_F(LogProbsTest, Bf16InputsGiveFp32LogProbsCloseToFullLogits) {
  const Case c = make_case(45, 32, 64, torch::kBFloat16);
  const Result expected = naive(c, 0.8, true);
  const Result got = chunked(c, 0.8, 16, true);
  EXPECT_EQ(got.log_probs.scalar_type(), torch::kFloat);
  EXPECT_EQ(got.entropy.scalar_type(), torch::kFloat);
  EXPECT_EQ(got.grad_hidden.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(got.grad_weight.scalar_type(), torch::kBFloat16);
  // Same bf16 logits, same fp32 softmax: values agree to fp32 rounding.
  EXPECT_LT(max_abs_diff(got.log_probs, expected.log_probs), 1e-4);
  EXPECT_LT(max_abs_diff(got.entropy, expected.entropy), 1e-4);
  // Gradients pass through bf16 matmuls: a few bf16 ulps relative to their scale.
  EXPECT_LT(max_abs_diff(got.grad_hidden, expected.grad_hidden),
            2e-2 * max_abs(expected.grad_hidden));
  EXPECT_LT(max_abs_diff(got.grad_weight, expected.grad_weight),
            2e-2 * max_abs(expected.grad_weight));
}

TEST_F(LogProbsTest, ValuesMatchPlainDoubleLoops) {
  const int64_t tokens = 6, hidden_size = 5, vocab = 9;
  const double temperature = 0.6;
  const Case c = make_case(tokens, hidden_size, vocab, torch::kFloat);
  TokenLogProbs out = compute_token_log_probs(c.hidden, c.weight, c.targets, temperature, 4, true);
  auto h = c.hidden.accessor<float, 2>();
  auto w = c.weight.accessor<float, 2>();
  auto t = c.targets.accessor<int64_t, 1>();
  for (int64_t i = 0; i < tokens; ++i) {
    std::vector<double> z(vocab);
    double max_z = -1e300;
    for (int64_t v = 0; v < vocab; ++v) {
      double dot = 0.0;
      for (int64_t k = 0; k < hidden_size; ++k) dot += double(h[i][k]) * double(w[v][k]);
      z[v] = dot / temperature;
      max_z = std::max(max_z, z[v]);
    }
    double sum = 0.0;
    for (double zv : z) sum += std::exp(zv - max_z);
    const double lse = max_z + std::log(sum);
    double entropy = 0.0;
    for (double zv : z) entropy -= std::exp(zv - lse) * (zv - lse);
    EXPECT_NEAR(out.log_probs[i].item<double>(), z[t[i]] - lse, 1e-5) << i;
    EXPECT_NEAR(out.entropy[i].item<double>(), entropy, 1e-5) << i;
  }
}

// Central differences of L = sum(a * log_probs) + sum(b * entropy) in double.
TEST_F(LogProbsTest, GradientsMatchFiniteDifferencesInDouble) {
  const Case c = make_case(/*tokens=*/5, /*hidden=*/4, /*vocab=*/6, torch::kDouble);
  const double temperature = 1.3;
  const int64_t chunk = 2;
  auto loss_of = [&](const at::Tensor& hidden, const at::Tensor& weight) {
    TokenLogProbs out =
        compute_token_log_probs(hidden, weight, c.targets, temperature, chunk, true);
    return ((out.log_probs * c.grad_log_probs.to(torch::kDouble)).sum() +
            (out.entropy * c.grad_entropy.to(torch::kDouble)).sum());
  };
  const Result got = chunked(c, temperature, chunk, true);
  EXPECT_EQ(got.log_probs.scalar_type(), torch::kDouble);

  const double eps = 1e-6;
  torch::NoGradGuard no_grad;
  for (int which = 0; which < 2; ++which) {
    at::Tensor base = (which == 0 ? c.hidden : c.weight).clone();
    const at::Tensor& analytic = which == 0 ? got.grad_hidden : got.grad_weight;
    at::Tensor flat = base.view({-1});
    for (int64_t i = 0; i < flat.numel(); ++i) {
      const double saved = flat[i].item<double>();
      flat[i] = saved + eps;
      const double up = which == 0 ? loss_of(base, c.weight).item<double>()
                                   : loss_of(c.hidden, base).item<double>();
      flat[i] = saved - eps;
      const double down = which == 0 ? loss_of(base, c.weight).item<double>()
                                     : loss_of(c.hidden, base).item<double>();
      flat[i] = saved;
      const double numeric = (up - down) / (2 * eps);
      EXPECT_NEAR(analytic.view({-1})[i].item<double>(), numeric, 1e-6)
          << (which == 0 ? "hidden" : "weight") << " element " << i;
    }
  }
}

TEST_F(LogProbsTest, EntropyOnlyLossGivesEntropyGradients) {
  Case c = make_case(13, 8, 20, torch::kFloat);
  c.grad_log_probs.zero_();  // naive reference: log-probs contribute nothing
  const Result expected = naive(c, 1.2, true);

  at::Tensor hidden = c.hidden.clone().requires_grad_(true);
  at::Tensor weight = c.weight.clone().requires_grad_(true);
  TokenLogProbs out = compute_token_log_probs(hidden, weight, c.targets, 1.2, 5, true);
  (out.entropy * c.grad_entropy).sum().backward();  // log_probs unused: no gradient arrives
  EXPECT_LT(max_abs_diff(hidden.grad(), expected.grad_hidden), 1e-5);
  EXPECT_LT(max_abs_diff(weight.grad(), expected.grad_weight), 1e-5);
}

TEST_F(LogProbsTest, OnlyTheWeightNeedsGradient) {
  const Case c = make_case(11, 8, 20, torch::kFloat);
  const Result expected = naive(c, 1.0, false);
  at::Tensor weight = c.weight.clone().requires_grad_(true);
  TokenLogProbs out = compute_token_log_probs(c.hidden, weight, c.targets, 1.0, 3, false);
  (out.log_probs * c.grad_log_probs).sum().backward();
  EXPECT_LT(max_abs_diff(weight.grad(), expected.grad_weight), 1e-5);
}

TEST_F(LogProbsTest, ChunkSizeDoesNotChangeResults) {
  const Case c = make_case(23, 8, 17, torch::kFloat);
  const Result reference = chunked(c, 0.9, 23, true);
  // Only fp32 rounding may differ: the weight gradient is summed over chunks in another order.
  auto tolerance = [](const at::Tensor& t) { return 1e-6 * (1.0 + max_abs(t)); };
  for (int64_t chunk : {1, 5, 22, 1024}) {
    const Result got = chunked(c, 0.9, chunk, true);
    EXPECT_LT(max_abs_diff(got.log_probs, reference.log_probs), tolerance(reference.log_probs))
        << chunk;
    EXPECT_LT(max_abs_diff(got.entropy, reference.entropy), tolerance(reference.entropy)) << chunk;
    EXPECT_LT(max_abs_diff(got.grad_hidden, reference.grad_hidden),
              tolerance(reference.grad_hidden))
        << chunk;
    EXPECT_LT(max_abs_diff(got.grad_weight, reference.grad_weight),
              tolerance(reference.grad_weight))
        << chunk;
  }
}

TEST_F(LogProbsTest, EmptyBatchGivesEmptyOutputsAndZeroWeightGradient) {
  at::Tensor hidden = torch::randn({0, 8}).requires_grad_(true);
  at::Tensor weight = torch::randn({12, 8}).requires_grad_(true);
  at::Tensor targets = torch::zeros({0}, torch::kLong);
  TokenLogProbs out = compute_token_log_probs(hidden, weight, targets, 1.0, 4, true);
  EXPECT_EQ(out.log_probs.numel(), 0);
  EXPECT_EQ(out.entropy.numel(), 0);
  (out.log_probs.sum() + out.entropy.sum()).backward();
  EXPECT_EQ(hidden.grad().sizes(), hidden.sizes());
  ASSERT_TRUE(weight.grad().defined());
  EXPECT_EQ(weight.grad().abs().sum().item<double>(), 0.0);
}

TEST_F(LogProbsTest, WorksWithoutAutograd) {
  const Case c = make_case(9, 4, 10, torch::kFloat);
  const Result expected = naive(c, 1.0, true);
  torch::NoGradGuard no_grad;
  TokenLogProbs out = compute_token_log_probs(c.hidden, c.weight, c.targets, 1.0, 4, true);
  EXPECT_FALSE(out.log_probs.requires_grad());
  EXPECT_LT(max_abs_diff(out.log_probs, expected.log_probs), 1e-5);
}

TEST_F(LogProbsTest, RejectsBadArguments) {
  at::Tensor hidden = torch::randn({4, 8});
  at::Tensor weight = torch::randn({10, 8});
  at::Tensor targets = torch::tensor(std::vector<int64_t>{0, 1, 2, 9});
  EXPECT_THROW(compute_token_log_probs(hidden, torch::randn({10, 7}), targets), Error);
  EXPECT_THROW(compute_token_log_probs(hidden, weight, targets.slice(0, 0, 3)), Error);
  EXPECT_THROW(compute_token_log_probs(hidden, weight, targets.to(torch::kInt)), Error);
  EXPECT_THROW(compute_token_log_probs(hidden, weight.to(torch::kDouble), targets), Error);
  EXPECT_THROW(compute_token_log_probs(hidden, weight, targets, 0.0), Error);
  EXPECT_THROW(compute_token_log_probs(hidden, weight, targets, 1.0, 0), Error);
  try {
    compute_token_log_probs(hidden, weight, torch::tensor(std::vector<int64_t>{0, 1, 10, 3}));
    FAIL() << "expected an out-of-range error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[0, 10)"), std::string::npos) << e.what();
  }
}

}  // namespace log_probs_test
}  // namespace models
}  // namespace ooze
