#include "algorithms/kl.h"

#include "algorithms/log_ratio.h"
#include "algorithms/packed_sequences.h"
#include "core/error.h"

namespace ooze::algorithms {
namespace {

constexpr double kLowVarKlBound = 10.0;

}  // namespace

std::string kl_estimator_name(KlEstimator estimator) {
  switch (estimator) {
    case KlEstimator::kK1:
      return "k1";
    case KlEstimator::kK2:
      return "k2";
    case KlEstimator::kK3:
      return "k3";
    case KlEstimator::kLowVarKl:
      return "low_var_kl";
  }
  return "?";
}

at::Tensor approx_kl(const at::Tensor& log_probs, const at::Tensor& base_log_probs,
                     KlEstimator estimator, const at::Tensor& importance_ratio) {
  if (!log_probs.defined() || !base_log_probs.defined() ||
      log_probs.sizes() != base_log_probs.sizes()) {
    throw Error("approx_kl: log_probs and base_log_probs must be defined and of the same shape");
  }
  at::Tensor log_ratio = to_compute_dtype(log_probs) - to_compute_dtype(base_log_probs);
  at::Tensor kl;
  switch (estimator) {
    case KlEstimator::kK1:
      kl = log_ratio;
      break;
    case KlEstimator::kK2:
      kl = log_ratio.square() * 0.5;
      break;
    case KlEstimator::kK3:
    case KlEstimator::kLowVarKl: {
      at::Tensor reverse = bounded_log_ratio(-log_ratio);
      kl = reverse.exp() - 1.0 - reverse;
      break;
    }
  }
  if (importance_ratio.defined()) {
    if (importance_ratio.sizes() != log_ratio.sizes()) {
      throw Error("approx_kl: importance_ratio must have the shape of log_probs");
    }
    kl = to_compute_dtype(importance_ratio) * kl;
  }
  if (estimator == KlEstimator::kLowVarKl) kl = at::clamp(kl, -kLowVarKlBound, kLowVarKlBound);
  return kl;
}

}  // namespace ooze::algorithms
