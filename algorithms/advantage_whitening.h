// Whitening of advantages over the counted response tokens of the whole step, across the
// data-parallel group (--normalize-advantages, and always for the reinforce_plus_plus estimators).
//
// algorithms/ does not depend on comm/, so the collective is the caller's:
//
//   WhiteningStats local = masked_whitening_stats(advantages, response_masks);
//   at::Tensor stats = local.to_tensor();
//   communicator.all_reduce(stats, ReduceOp::SUM);  // over the DP (x CP) group
//   advantages = apply_whitening(advantages, WhiteningStats::from_tensor(stats));
//
// As Slime: mean and variance over tokens with mask 1, the variance with Bessel's correction when
// there are at least 2 tokens, then (x - mean) / sqrt(variance + 1e-8) on every token.
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace ooze::algorithms {

struct WhiteningStats {
  double sum = 0;             // sum of x * mask
  double sum_of_squares = 0;  // sum of x^2 * mask
  double count = 0;           // sum of mask

  WhiteningStats& operator+=(const WhiteningStats& other);
  // float64 [3] = {sum, sum_of_squares, count}, on the CPU: all-reduce it with SUM.
  at::Tensor to_tensor() const;
  static WhiteningStats from_tensor(const at::Tensor& reduced);
};

// This rank's statistics, summed in float64. `values` and `masks` are per sample, same lengths.
WhiteningStats masked_whitening_stats(const std::vector<at::Tensor>& values,
                                      const std::vector<at::Tensor>& masks);

// Whitens every sample's values with the step's (reduced) statistics. Throws ooze::Error when
// global.count is 0 (no counted response token in the whole step: check the loss masks).
std::vector<at::Tensor> apply_whitening(const std::vector<at::Tensor>& values,
                                        const WhiteningStats& global, double epsilon = 1e-8);

}  // namespace ooze::algorithms
