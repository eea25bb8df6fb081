// log_softmax over a vocabulary with the sum of exponentials accumulated in fp64. Over Qwen3's
// 151,936 tokens an fp32 sum is off by about 5e-5 at a token of probability near 1, ten times
// what llama.cpp reports there; (x - max) - log(sum exp(x - max)) with the sum in fp64 keeps the
// error to the rounding of the result. The engine's sampler and the trainer both use it, so that
// rollout and training log-probs are computed alike.
//
//   at::Tensor log_p = log_softmax_fp64_sum(logits);              // [N, V], logits' dtype
//   at::Tensor lse = max + log_sum_exp_shifted(logits, max);       // [N]
#pragma once

#include <ATen/ATen.h>

namespace ooze::models {

// log sum_k exp(logits[..., k] - max[...]) over the last dimension: the exponentials in the
// logits' dtype, their sum in fp64, the result in the logits' dtype. Differentiable.
at::Tensor log_sum_exp_shifted(const at::Tensor& logits, const at::Tensor& max);

// log_softmax over the last dimension of floating `logits` [..., V], in their dtype.
// Differentiable.
at::Tensor log_softmax_fp64_sum(const at::Tensor& logits);

}  // namespace ooze::models
