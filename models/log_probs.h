// Log-probabilities (and entropy) of given target tokens under the LM head, in fp32, without
// ever holding fp32 logits for the whole batch: the head is applied chunk by chunk over tokens.
//
//   TokenLogProbs out = compute_token_log_probs(hidden, model->lm_head->weight, targets,
//                                               /*temperature=*/0.7, 1024, /*with_entropy=*/true);
//   loss = -(out.log_probs * advantages).mean() - 0.01 * out.entropy.mean();
//
// Peak extra memory is a few [chunk_tokens, V] fp32 buffers instead of [T, V]. Backward keeps
// only the inputs and one logsumexp (and entropy) per token, and recomputes each chunk's logits,
// so the [T, V] logits are never stored for autograd either. Gradients flow to `hidden` and
// `head_weight` (first order only: the backward is not itself differentiable).
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace ooze {
namespace models {

struct TokenLogProbs {
  at::Tensor log_probs;  // [T], fp32 (fp64 for fp64 inputs)
  at::Tensor entropy;    // [T], same dtype; undefined unless with_entropy
};

// hidden: [T, H] final hidden states (after the last norm), head_weight: [V, H] (the LM head or
// the tied embedding), both in the compute dtype (fp32 or bf16; fp64 is computed in fp64).
// targets: [T] int64 in [0, V). The logits chunk hidden @ head_weight^T is computed in the
// compute dtype, as the model's own head would, then upcast to fp32 and divided by
// `temperature` before the softmax, as Slime and verl do so that training log-probs match those
// of rollouts sampled at that temperature. entropy is that of the tempered distribution.
// Throws ooze::Error on mismatched shapes, dtypes or devices, targets out of range, a
// temperature <= 0 or chunk_tokens < 1.
TokenLogProbs compute_token_log_probs(const at::Tensor& hidden, const at::Tensor& head_weight,
                                      const at::Tensor& targets, double temperature = 1.0,
                                      int64_t chunk_tokens = 1024, bool with_entropy = false);

}  // namespace models
}  // namespace ooze
