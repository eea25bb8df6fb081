// The load-balanced token split of context parallelism: a packed micro-batch (sequences given by
// cu_seqlens, T tokens in all) is shared by the C ranks of a CP group. Every sequence is padded
// to a multiple of 2C tokens and cut into 2C equal chunks; CP rank r holds chunks r and
// 2C-1-r, so under causal attention every rank has the same amount of work (an early chunk,
// cheap, paired with a late one, expensive).
//
// A rank's local micro-batch keeps the sequence order: sequence s contributes its chunk r, then
// its chunk 2C-1-r, so locally sequence s has 2 * chunk_size(s) tokens and every rank has the
// same local layout (local_offsets) and the same number of local tokens. Padding sits at the
// end of a sequence (positions >= its length): under causal attention no real token sees it, so
// it never reaches a real token's output, and its loss mask is zero.
//
//   ContextParallelSplit split = split_for_context_parallel(offsets, cp_size, cp_rank);
//   at::Tensor local_ids = split.shard(input_ids);             // [T_local], padding 0
//   at::Tensor local_positions = split.shard(position_ids);    // RoPE positions of real tokens
//   at::Tensor local_loss_mask = split.shard(loss_mask);       // padding 0: never in the loss
//   ... forward on the local tokens (attention: ring_attention.h) ...
//   group.all_gather(gathered, local_log_probs);               // [C * T_local], rank-major
//   at::Tensor log_probs = split.unshard(gathered);            // [T], the original order
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace ooze::models {

struct ContextParallelSplit {
  int64_t cp_size = 1;
  int64_t cp_rank = 0;
  std::vector<int64_t> offsets;        // the full micro-batch's cu_seqlens [B + 1], T at the end
  std::vector<int64_t> local_offsets;  // the local layout's [B + 1], the same on every rank

  // Per local token [T_local], int64: the index of the token in the full micro-batch, or -1
  // for padding; its position within its sequence (the causal order attention follows);
  // whether it is padding (bool).
  at::Tensor token_index;
  at::Tensor positions;
  at::Tensor padding_mask;

  // Per token of the full micro-batch [T], int64: where it lies in the rank-major
  // concatenation of every rank's local tokens (owner rank * T_local + local slot).
  at::Tensor gather_index;

  int64_t num_tokens() const { return offsets.back(); }
  int64_t num_local_tokens() const { return local_offsets.back(); }
  int64_t num_sequences() const { return static_cast<int64_t>(offsets.size()) - 1; }
  // Tokens of one chunk of sequence s: its padded length / 2C (0 for an empty sequence).
  int64_t chunk_size(int64_t sequence) const {
    return (local_offsets[sequence + 1] - local_offsets[sequence]) / 2;
  }
  // The local layout as cu_seqlens: int32 [B + 1], as packing makes them.
  at::Tensor local_cu_seqlens() const;

  // Per-token values of the full micro-batch [T, ...] -> this rank's [T_local, ...]; padding
  // gets `padding_value`. Differentiable (an index_select).
  at::Tensor shard(const at::Tensor& values, double padding_value = 0) const;
  // Every rank's local values concatenated in rank order [C * T_local, ...] (what all_gather
  // returns) -> the full micro-batch's [T, ...] in the original token order; padding dropped.
  at::Tensor unshard(const at::Tensor& gathered) const;
};

// The split of a micro-batch with sequence offsets `offsets` (cu_seqlens, as
// sequence_offsets() returns them) for rank `cp_rank` of `cp_size`. Sequences of any length are
// accepted, empty ones and ones shorter than 2 * cp_size included. Throws ooze::Error for a
// cp_size below 1, a rank outside [0, cp_size) or malformed offsets.
ContextParallelSplit split_for_context_parallel(const std::vector<int64_t>& offsets,
                                                int64_t cp_size, int64_t cp_rank);

}  // namespace ooze::models
