// The attention arithmetic itself (no projections): causal softmax(q k^T * scale) v with
// grouped-query heads (query head i reads key/value head i / (heads / kv_heads), as HF's
// repeat_kv), over packed sequences or over a paged KV cache. Scores are computed in the input
// dtype and the softmax in fp32, cast back, as HF's eager attention does.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "models/kv_cache.h"

namespace ooze::models {

// Upper bound on the elements of one block of attention scores: long sequences are processed
// in query blocks so that memory stays O(block * length), not O(length^2) per head. Ring
// attention (ring_attention.cpp) blocks its rows by the same bound.
constexpr int64_t kMaxScoreElements = int64_t{1} << 24;

// Validates cu_seqlens ([B+1], int32 or int64, any device, 0 = c[0] <= c[1] <= ... <= c[B] =
// num_tokens) and returns it as offsets on the CPU. Throws ooze::Error saying what is wrong.
std::vector<int64_t> sequence_offsets(const torch::Tensor& cu_seqlens, int64_t num_tokens);

// q: [T, heads, head_dim], k and v: [T, kv_heads, head_dim], sequences given by offsets (from
// sequence_offsets). Token t of sequence s attends to tokens offsets[s]..t only, whatever the
// position ids were. Returns [T, heads, head_dim].
torch::Tensor packed_causal_attention(const torch::Tensor& q, const torch::Tensor& k,
                                      const torch::Tensor& v, const std::vector<int64_t>& offsets,
                                      double scale);

// q: [T, heads, head_dim] for the new tokens of a cache step; cache_keys / cache_values: one
// layer's paged storage [num_blocks, block_size, kv_heads, head_dim] that already holds this
// step's keys and values. The new token at position p of a sequence attends to positions 0..p
// of that sequence, read through its block table. Decodes are batched into one product; prompt
// chunks are attended to one sequence at a time. Returns [T, heads, head_dim] in step order.
torch::Tensor paged_causal_attention(const torch::Tensor& q, const torch::Tensor& cache_keys,
                                     const torch::Tensor& cache_values, const CacheStep& step,
                                     double scale);

}  // namespace ooze::models
