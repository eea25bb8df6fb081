// KL estimators against plain loops, their gradients against finite differences.
#include "algorithms/kl.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "algorithms/policy_loss.h"
#include "core/error.h"
#include "tests/algorithms/double_vectors.h"

namespace ooze::algorithms {
namespace kl_test {

double reference_kl(double log_prob, double base, KlEstimator estimator, double ratio) {
  double x = log_prob - base, kl = 0;
  switch (estimator) {
    case KlEstimator::kK1:
      kl = x;
      break;
    case KlEstimator::kK2:
      kl = x * x / 2;
      break;
    case KlEstimator::kK3:
    case KlEstimator::kLowVarKl: {
      double reverse = std::min(20.0, std::max(-20.0, -x));  // the documented overflow guard
      kl = std::exp(reverse) - 1 - reverse;
      break;
    }
  }
  kl *= ratio;
  if (estimator == KlEstimator::kLowVarKl) kl = std::min(10.0, std::max(-10.0, kl));
  return kl;
}

const KlEstimator kAll[] = {KlEstimator::kK1, KlEstimator::kK2, KlEstimator::kK3,
                            KlEstimator::kLowVarKl};

struct Inputs {
  Vec log_probs, base, old;
};

Inputs random_inputs(int n, uint32_t seed, double spread) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uniform(-spread, spread);
  Inputs in;
  for (int i = 0; i < n; ++i) {
    in.log_probs.push_back(-1.0 + uniform(rng));
    in.base.push_back(-1.0 + uniform(rng));
    in.old.push_back(-1.0 + uniform(rng) * 0.3);
  }
  return in;
}

TEST(KlTest, EstimatorsMatchReference) {
  Inputs in = random_inputs(40, 1, 1.5);
  for (KlEstimator estimator : kAll) {
    Vec got = vec_of(approx_kl(tensor_of(in.log_probs), tensor_of(in.base), estimator));
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], reference_kl(in.log_probs[i], in.base[i], estimator, 1.0), 1e-13)
          << kl_estimator_name(estimator) << " " << i;
    }
  }
}

TEST(KlTest, UnbiasedKlMultipliesByTheRatioBeforeTheLowVarClamp) {
  Inputs in = random_inputs(40, 2, 3.0);
  Vec ratio(in.log_probs.size());
  for (size_t i = 0; i < ratio.size(); ++i) ratio[i] = std::exp(in.log_probs[i] - in.old[i]);
  for (KlEstimator estimator : kAll) {
    Vec got =
        vec_of(approx_kl(tensor_of(in.log_probs), tensor_of(in.base), estimator, tensor_of(ratio)));
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], reference_kl(in.log_probs[i], in.base[i], estimator, ratio[i]), 1e-12)
          << kl_estimator_name(estimator) << " " << i;
    }
  }
}

TEST(KlTest, ExtremeLogRatiosStayFinite) {
  Vec log_probs = {-200.0, 0.0, -1e-3, -80.0, -1.0};
  Vec base = {0.0, -200.0, -90.0, -1e-3, -1.0};
  for (at::ScalarType dtype : {at::kFloat, at::kDouble}) {
    for (KlEstimator estimator : kAll) {
      at::Tensor x = tensor_of(log_probs).to(dtype).requires_grad_(true);
      at::Tensor kl = approx_kl(x, tensor_of(base).to(dtype), estimator);
      kl.sum().backward();
      for (double v : vec_of(kl)) EXPECT_TRUE(std::isfinite(v)) << kl_estimator_name(estimator);
      for (double g : vec_of(x.grad()))
        EXPECT_TRUE(std::isfinite(g)) << kl_estimator_name(estimator);
    }
  }
}

TEST(KlTest, HalfPrecisionInputsAreComputedInFloat32) {
  Inputs in = random_inputs(16, 3, 1.0);
  for (at::ScalarType dtype : {at::kBFloat16, at::kHalf}) {
    at::Tensor lp = tensor_of(in.log_probs).to(dtype), base = tensor_of(in.base).to(dtype);
    at::Tensor kl = approx_kl(lp, base, KlEstimator::kK3);
    EXPECT_EQ(kl.scalar_type(), at::kFloat);
    Vec lp_rounded = vec_of(lp), base_rounded = vec_of(base), got = vec_of(kl);
    for (size_t i = 0; i < got.size(); ++i) {
      // Exact in float32 on the rounded inputs, not in the half type.
      EXPECT_NEAR(got[i], reference_kl(lp_rounded[i], base_rounded[i], KlEstimator::kK3, 1.0),
                  1e-6);
    }
  }
}

TEST(KlTest, GradientsMatchFiniteDifferences) {
  Inputs in = random_inputs(12, 4, 1.0);
  // Weighted sum so that every coordinate has its own gradient.
  Vec weights(in.log_probs.size());
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = 0.5 + 0.1 * static_cast<double>(i);
  for (bool unbiased : {false, true}) {
    for (KlEstimator estimator : kAll) {
      auto evaluate = [&](const at::Tensor& lp) {
        at::Tensor ratio;
        if (unbiased) ratio = (lp - tensor_of(in.old)).exp();  // carries the gradient
        return (approx_kl(lp, tensor_of(in.base), estimator, ratio) * tensor_of(weights)).sum();
      };
      at::Tensor lp = tensor_of(in.log_probs).requires_grad_(true);
      evaluate(lp).backward();
      Vec autograd = vec_of(lp.grad());
      Vec numeric = finite_difference(
          [&](const Vec& x) { return evaluate(tensor_of(x)).item<double>(); }, in.log_probs);
      for (size_t i = 0; i < numeric.size(); ++i) {
        EXPECT_NEAR(autograd[i], numeric[i], 1e-6 * (1 + std::abs(numeric[i])))
            << kl_estimator_name(estimator) << (unbiased ? " unbiased " : " ") << i;
      }
    }
  }
}

TEST(KlTest, NamesRoundTripAndUnknownNamesAreRejected) {
  // --kl-loss-type: every name reads back as itself, an unknown one is refused.
  ConfigSchema schema;
  PolicyLossOptions::fields().declare(schema);
  for (const char* name : {"k1", "k2", "k3", "low_var_kl"}) {
    const Config config = load_config(schema, "", {"--kl-loss-type", name});
    EXPECT_EQ(kl_estimator_name(PolicyLossOptions::fields().read(config).kl_loss_type), name);
  }
  EXPECT_THROW(load_config(schema, "", {"--kl-loss-type", "kl"}), ConfigError);
  EXPECT_THROW(approx_kl(tensor_of({1.0}), tensor_of({1.0, 2.0}), KlEstimator::kK1), Error);
}

}  // namespace kl_test
}  // namespace ooze::algorithms
