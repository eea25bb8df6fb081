// The RMS norms of a cache step (the engine's prefill and decode), each one pass over the rows.
//
// Why: a decode step of one sequence reads every weight once, and the rest of its time is the
// dispatch of small operations; RMSNormImpl::forward takes six of them per norm and the rotary
// that follows q_norm and k_norm five more, four norms and two rotaries in every layer. Written
// as loops over contiguous fp32 rows on the CPU, each is one call.
//
// The formula is RMSNormImpl::forward's (the mean of squares in fp32, rsqrt, x times it, times
// the weight), except that the squares are summed in fp64: the result can differ from the
// module's in the last bit. Other inputs (bf16, a GPU, a tensor that needs a gradient) take the
// module's forward and apply_rotary, so they are what they always were.
#pragma once

#include <torch/torch.h>

#include "models/rms_norm.h"
#include "models/rotary.h"

namespace ooze::models {

// norm->forward(x) for x: [..., size].
torch::Tensor fused_rms_norm(RMSNormImpl& norm, const torch::Tensor& x);

// apply_rotary(norm->forward(x), rope) for x: [T, heads, head_dim] (q or k of a cache step),
// normalising each head's vector; without a norm (a model with no qk-norm), apply_rotary alone.
torch::Tensor fused_rms_norm_rotary(RMSNormImpl* norm, const torch::Tensor& x,
                                    const RotaryTables& rope);

}  // namespace ooze::models
