// Causal packed attention under context parallelism: each CP rank holds its share of every
// sequence (context_parallel_split.h) and its queries must see the keys and values of all the
// ranks. Two ways to get them, selected by --cp-impl:
//
// - ring: K/V blocks travel around the CP group (each rank sends to rank + 1 and receives from
//   rank - 1) while the current block is being attended to, so the transfer hides behind the
//   compute; the partial results are merged with an online softmax (running log-sum-exp).
//   Backward sends K/V around again with their gradient accumulators, which arrive home after
//   a full turn. Memory stays O(T_local) per rank whatever C is.
// - allgather: every rank gathers all K/V (C * T_local rows) and attends locally; backward
//   reduce-scatters the K/V gradients. Simpler, more memory; the reference and the fallback.
//
// Both respect sequence boundaries (no attention across packed sequences) and causality by the
// tokens' positions in their sequences, support grouped-query heads (query head h reads key/value
// head h / (heads / kv_heads)), compute in fp32 and return the input dtype. They give the packed
// attention of causal_attention.h on the full micro-batch, to fp32 rounding, and gradients of
// q, k and v through autograd.
//
//   ContextParallelSplit split = split_for_context_parallel(offsets, cp_group->size(), cp_rank);
//   at::Tensor out = context_parallel_attention(q, k, v, split, cp_group, scale,
//                                               ContextParallelImpl::kRing);
//
// Every rank of the CP group must call it in the same order with the same split layout
// (cu_seqlens); the group should be used by nothing else concurrently.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "models/context_parallel_split.h"

namespace ooze::models {

enum class ContextParallelImpl { kRing, kAllGather };

// "ring" or "allgather" (--cp-impl).
const char* context_parallel_impl_name(ContextParallelImpl impl);

// q: [T_local, heads, head_dim], k and v: [T_local, kv_heads, head_dim]: this rank's tokens in
// the local layout of `split` (split.cp_rank == group->rank(), split.cp_size == group->size()).
// Local query i attends to the keys, on every rank, of its own sequence at positions up to its
// own. Returns [T_local, heads, head_dim]. Throws ooze::Error for mismatched shapes, a
// non-floating dtype or a split made for another rank or group size.
at::Tensor context_parallel_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const ContextParallelSplit& split,
                                      std::shared_ptr<comm::Communicator> group, double scale,
                                      ContextParallelImpl impl = ContextParallelImpl::kRing);

}  // namespace ooze::models
