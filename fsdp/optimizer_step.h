// One optimizer step of a sharded model: global-norm clipping, then AdamW, with the step
// skipped when the gradient norm is not finite (an overflow or a NaN loss must not poison the
// weights or the Adam moments).
#pragma once

#include "fsdp/fully_shard.h"
#include "fsdp/sharded_adamw.h"

namespace ooze::fsdp {

struct OptimizerStepResult {
  double grad_norm = 0.0;  // before clipping; for logging
  double clip_coef = 1.0;
  bool skipped = false;  // the norm was not finite: weights and optimizer state untouched
};

// After the last micro-batch's backward: clips to `clip_grad` (--clip-grad; <= 0 disables
// clipping, the norm is still computed), steps `optimizer` at `lr` unless the norm is not
// finite (then logs a warning naming the norm and reports skipped), and zeroes the gradients
// either way, ready for the next step. A collective: call on every rank.
OptimizerStepResult clip_and_step(FullyShardedModule& model, ShardedAdamW& optimizer, double lr,
                         double clip_grad);

}  // namespace ooze::fsdp
