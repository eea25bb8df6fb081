// The critic's loss of one packed micro-batch (ppo), as Slime: the prediction may move at most
// --value-clip away from the rollout-time value before the error stops decreasing,
//   loss_t = max((v_t - R_t)^2, (v_old_t + clamp(v_t - v_old_t, -clip, clip) - R_t)^2),
// aggregated as the policy loss (loss_aggregation.h). Metrics: value_loss, value_clipfrac (share
// of tokens with |v - v_old| > clip).
#pragma once

#include <ATen/ATen.h>

#include "algorithms/loss_aggregation.h"
#include "algorithms/loss_metrics.h"
#include "core/option_fields.h"

namespace ooze::algorithms {

struct ValueLossOptions {
  double value_clip = 0.2;  // --value-clip

  static const OptionFields<ValueLossOptions>& fields();

  template <class A>
  void save(A& ar) const {
    save_options(ar, *this);
  }
  template <class A>
  void load(A& ar) {
    load_options(ar, *this);
  }
};

// One packed micro-batch; every tensor is [T] except cu_seqlens.
struct ValueLossInputs {
  at::Tensor cu_seqlens;  // int32 [B + 1]
  at::Tensor loss_mask;
  at::Tensor values;                 // the critic's current predictions; carries the gradient
  at::Tensor old_values;             // the predictions at rollout time
  at::Tensor returns;                // the targets (AdvantageResult::returns)
  at::Tensor sequence_token_counts;  // optional [B], as in PolicyLossInputs
};

// Throws ooze::Error on a missing or misshapen input, or value_clip <= 0.
LossOutput value_loss(const ValueLossInputs& inputs, const ValueLossOptions& options,
                      const LossScale& scale);

}  // namespace ooze::algorithms
