// Global gradient-norm clipping over sharded gradients (--clip-grad).
//
// The L2 norm of the whole model's gradient is sqrt(sum over ranks of the squared norm of each
// rank's gradient shards). Each rank sums its squares in fp64 over the valid elements of its
// shards (padding excluded), and ONE all-reduce of that single value gives every rank the same
// norm. Clipping then scales every shard by max_norm / (norm + 1e-6) when that is below 1, as
// torch.nn.utils.clip_grad_norm_ and Megatron do.
#pragma once

#include "fsdp/fully_shard.h"

namespace ooze::fsdp {

struct GradNormResult {
  double norm = 0.0;  // before clipping; NaN or inf when some gradient is not finite
  bool finite = true;
  double clip_coef = 1.0;  // the factor applied to the gradients (1: not clipped)
};

// Computes the global norm and, when max_norm > 0 and the norm is finite, clips. A non-finite
// norm leaves the gradients untouched (the caller skips the step: see clip_and_step). Call
// after finish_backward(), on every rank (it is a collective).
GradNormResult clip_grad_norm(FullyShardedModule& model, double max_norm);

}  // namespace ooze::fsdp
