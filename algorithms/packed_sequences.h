// The sequence structure of a packed micro-batch, as the losses see it.
//
// A micro-batch of B samples and T tokens holds flat per-token tensors [T] (the samples
// concatenated) and int32 `cu_seqlens` [B + 1] = {0, L_0, L_0 + L_1, ..., T}. A value at index t
// refers to the token at index t; `loss_mask` [T] is 1 exactly on the response tokens that count.
// Sequence-level quantities (GSPO's ratio, OPSM's KL, sequence-level importance weights, the
// per-sequence token counts of the loss) are masked sums over each sample's tokens.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace ooze::algorithms {

class PackedSequences {
 public:
  // `cu_seqlens` may live on any device; it is read once on the host to be checked. Throws
  // ooze::Error unless it is a 1-D integer tensor of B + 1 >= 1 entries starting at 0,
  // nondecreasing, and ending at `num_tokens`.
  PackedSequences(const at::Tensor& cu_seqlens, int64_t num_tokens, at::Device device);

  int64_t num_sequences() const { return num_sequences_; }
  int64_t num_tokens() const { return num_tokens_; }
  // int64 [T]: the sample each token belongs to.
  const at::Tensor& sequence_index() const { return sequence_index_; }

  // [B]: the sum of `per_token` [T] over each sample's tokens. Differentiable.
  at::Tensor sum(const at::Tensor& per_token) const;
  // [T]: each token gets its sample's entry of `per_sequence` [B]. Differentiable.
  at::Tensor expand(const at::Tensor& per_sequence) const;
  // [B]: sum(values * mask) / max(1, sum(mask)) per sample (0 for a sample without tokens).
  at::Tensor masked_mean(const at::Tensor& values, const at::Tensor& mask) const;

 private:
  int64_t num_sequences_ = 0;
  int64_t num_tokens_ = 0;
  at::Tensor lengths_;         // int64 [B] on the tokens' device
  at::Tensor sequence_index_;  // int64 [T]
};

// Throws ooze::Error unless `tensor` is a defined 1-D floating tensor of `num_tokens` entries;
// `name` and `where` appear in the message ("policy_loss: old_log_probs must be ...").
void check_per_token(const char* where, const char* name, const at::Tensor& tensor,
                     int64_t num_tokens);

// Losses are computed in at least fp32: half and bfloat16 inputs are upcast to float32, float32
// and float64 are kept (float64 for gradient checks).
at::Tensor to_compute_dtype(const at::Tensor& tensor);

}  // namespace ooze::algorithms
