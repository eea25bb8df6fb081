#include "models/causal_attention.h"

#include <torch/version.h>

#include <algorithm>
#include <limits>
#include <string>

#include "core/error.h"

namespace ooze::models {
namespace {

// Causal attention of `num_queries` consecutive queries whose first one sits at key position
// `first_query_position`; query j sees keys 0..first_query_position + j.
// q: [Lq, heads, d]; k, v: [Lk, kv_heads, d] -> [Lq, heads, d].
torch::Tensor attend_one_sequence(const torch::Tensor& q, const torch::Tensor& k,
                                  const torch::Tensor& v, int64_t first_query_position,
                                  double scale) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
  // LibTorch 2.5+ on CUDA: a whole causal sequence (no cached past: SDPA's causal mask is aligned
  // top-left) goes to scaled_dot_product_attention, whose flash and memory-efficient kernels
  // never hold the [L, L] scores. A chunk after a cached past stays on the path below.
  if (q.is_cuda() && first_query_position == 0 && q.size(0) == k.size(0)) {
    auto heads_first = [](const torch::Tensor& t) { return t.transpose(0, 1).unsqueeze(0); };
    torch::Tensor out = at::scaled_dot_product_attention(
        heads_first(q), heads_first(k), heads_first(v), /*attn_mask=*/{}, /*dropout_p=*/0.0,
        /*is_causal=*/true, scale, /*enable_gqa=*/true);
    return out.squeeze(0).transpose(0, 1).contiguous();  // [Lq, heads, d]
  }
#endif
  const int64_t num_queries = q.size(0), heads = q.size(1), head_dim = q.size(2);
  const int64_t kv_heads = k.size(1), group = heads / kv_heads;
  const int64_t per_query = heads * std::max<int64_t>(k.size(0), 1);
  const int64_t block = std::max<int64_t>(1, kMaxScoreElements / per_query);

  std::vector<torch::Tensor> outputs;
  for (int64_t start = 0; start < num_queries; start += block) {
    const int64_t count = std::min(block, num_queries - start);
    // Causality: this block sees no key after its last query.
    const int64_t num_keys = std::min(k.size(0), first_query_position + start + count);
    torch::Tensor keys = k.narrow(0, 0, num_keys).permute({1, 2, 0});    // [kvh, d, Lk]
    torch::Tensor values = v.narrow(0, 0, num_keys).permute({1, 0, 2});  // [kvh, Lk, d]
    // Query head h = kv_head * group + g reads kv_head.
    torch::Tensor queries = q.narrow(0, start, count)
                                .reshape({count, kv_heads, group, head_dim})
                                .permute({1, 2, 0, 3})
                                .reshape({kv_heads, group * count, head_dim});
    torch::Tensor scores = torch::bmm(queries, keys) * scale;  // [kvh, g * count, Lk]
    // Causality: the first query sees keys up to its own position. Where that is every key (a
    // decode), nothing is masked and the mask's operations are skipped.
    if (first_query_position + start < num_keys - 1) {
      torch::Tensor query_positions =
          torch::arange(first_query_position + start, first_query_position + start + count,
                        torch::TensorOptions().dtype(torch::kLong).device(q.device()));
      torch::Tensor key_positions =
          torch::arange(num_keys, torch::TensorOptions().dtype(torch::kLong).device(q.device()));
      torch::Tensor future = key_positions.unsqueeze(0) > query_positions.unsqueeze(1);  // [c, Lk]
      scores = scores.view({kv_heads, group, count, num_keys})
                   .masked_fill(future, -std::numeric_limits<float>::infinity());
    }
    torch::Tensor probs = torch::softmax(scores, -1, torch::kFloat).to(q.scalar_type());
    torch::Tensor out = torch::bmm(probs.view({kv_heads, group * count, num_keys}), values);
    outputs.push_back(out.view({kv_heads, group, count, head_dim})
                          .permute({2, 0, 1, 3})
                          .reshape({count, heads, head_dim}));
  }
  return outputs.size() == 1 ? outputs[0] : torch::cat(outputs, 0);
}

int64_t blocks_for(int64_t tokens, int64_t block_size) {
  return (tokens + block_size - 1) / block_size;
}

// Whether the first `num_blocks` blocks of a table are consecutive in the pool.
bool blocks_in_order(const std::vector<int64_t>& table, int64_t num_blocks) {
  for (int64_t b = 1; b < num_blocks; ++b) {
    if (table[static_cast<size_t>(b)] != table[0] + b) return false;
  }
  return true;
}

}  // namespace

std::vector<int64_t> sequence_offsets(const torch::Tensor& cu_seqlens, int64_t num_tokens) {
  if (!cu_seqlens.defined() || cu_seqlens.dim() != 1 || cu_seqlens.size(0) < 2) {
    throw Error(
        "cu_seqlens must be a 1-D tensor [num_sequences + 1] with at least 2 entries, "
        "got " +
        (cu_seqlens.defined()
             ? std::to_string(cu_seqlens.dim()) + "-D shape " + c10::str(cu_seqlens.sizes())
             : std::string("an undefined tensor")));
  }
  if (cu_seqlens.scalar_type() != torch::kInt && cu_seqlens.scalar_type() != torch::kLong) {
    throw Error(std::string("cu_seqlens must be int32 or int64, got ") +
                c10::toString(cu_seqlens.scalar_type()));
  }
  torch::Tensor cpu = cu_seqlens.to(torch::kCPU, torch::kLong).contiguous();
  const int64_t* data = cpu.data_ptr<int64_t>();
  std::vector<int64_t> offsets(data, data + cpu.numel());
  if (offsets.front() != 0 || offsets.back() != num_tokens) {
    throw Error("cu_seqlens must start at 0 and end at the number of tokens " +
                std::to_string(num_tokens) + ", got [" + std::to_string(offsets.front()) +
                ", ..., " + std::to_string(offsets.back()) + "]");
  }
  for (size_t i = 1; i < offsets.size(); ++i) {
    if (offsets[i] < offsets[i - 1]) {
      throw Error("cu_seqlens must be non-decreasing, but cu_seqlens[" + std::to_string(i) +
                  "] = " + std::to_string(offsets[i]) + " < cu_seqlens[" + std::to_string(i - 1) +
                  "] = " + std::to_string(offsets[i - 1]));
    }
  }
  return offsets;
}

torch::Tensor packed_causal_attention(const torch::Tensor& q, const torch::Tensor& k,
                                      const torch::Tensor& v, const std::vector<int64_t>& offsets,
                                      double scale) {
  std::vector<torch::Tensor> outputs;
  for (size_t s = 0; s + 1 < offsets.size(); ++s) {
    const int64_t begin = offsets[s], length = offsets[s + 1] - offsets[s];
    if (length == 0) continue;
    outputs.push_back(attend_one_sequence(q.narrow(0, begin, length), k.narrow(0, begin, length),
                                          v.narrow(0, begin, length), 0, scale));
  }
  if (outputs.empty()) return torch::empty_like(q);
  return outputs.size() == 1 ? outputs[0] : torch::cat(outputs, 0);
}

torch::Tensor paged_causal_attention(const torch::Tensor& q, const torch::Tensor& cache_keys,
                                     const torch::Tensor& cache_values, const CacheStep& step,
                                     double scale) {
  const int64_t num_sequences = static_cast<int64_t>(step.block_tables.size());
  const int64_t num_decodes = static_cast<int64_t>(step.decode_sequences.size());
  const int64_t block_size = cache_keys.size(1), kv_heads = cache_keys.size(2);
  const int64_t heads = q.size(1), head_dim = q.size(2), group = heads / kv_heads;
  const auto long_options = torch::TensorOptions().dtype(torch::kLong).device(q.device());

  // A lone sequence decoding over blocks that lie in order in the pool (one request at a time, as
  // a single user's chat): the loop below reads its keys and values as views, where the batched
  // product would gather and mask them; at one sequence those operations are most of the step's
  // attention.
  const bool lone_decode =
      num_sequences == 1 && num_decodes == 1 &&
      blocks_in_order(step.block_tables[0], blocks_for(step.past_lengths[0] + 1, block_size));

  // Every decode in one batched product over its blocks [D, max_blocks * block_size]; keys past
  // a sequence's length (the rest of its last block, padding blocks) are masked out.
  torch::Tensor decode_out;
  if (num_decodes > 0 && !lone_decode) {
    const int64_t num_keys = step.decode_block_table.size(1) * block_size;
    const torch::Tensor blocks = step.decode_block_table.reshape({-1});
    // [D * max_blocks, bs, kvh, d] -> [D, kvh, Lk, d] -> [D * kvh, Lk, d]
    auto gather = [&](const torch::Tensor& cache) {
      return cache.index_select(0, blocks)
          .view({num_decodes, num_keys, kv_heads, head_dim})
          .permute({0, 2, 1, 3})
          .reshape({num_decodes * kv_heads, num_keys, head_dim});
    };
    torch::Tensor keys = gather(cache_keys), values = gather(cache_values);
    torch::Tensor decode_q = q;
    torch::Tensor decode_rows;
    if (num_decodes != num_sequences) {
      std::vector<int64_t> rows;
      for (int64_t s : step.decode_sequences) rows.push_back(step.offsets[s]);
      decode_rows = torch::tensor(rows, torch::kLong).to(q.device());
      decode_q = q.index_select(0, decode_rows);
    }
    // Query head h = kv_head * group + g reads kv_head.
    torch::Tensor queries = decode_q.reshape({num_decodes * kv_heads, group, head_dim});
    torch::Tensor scores = (torch::bmm(queries, keys.transpose(1, 2)) * scale)
                               .view({num_decodes, kv_heads, group, num_keys});
    torch::Tensor key_positions = torch::arange(num_keys, long_options);
    torch::Tensor beyond =
        key_positions.unsqueeze(0) >= step.decode_lengths.unsqueeze(1);  // [D, Lk]
    scores = scores.masked_fill(beyond.view({num_decodes, 1, 1, num_keys}),
                                -std::numeric_limits<float>::infinity());
    torch::Tensor probs = torch::softmax(scores, -1, torch::kFloat).to(q.scalar_type());
    decode_out = torch::bmm(probs.view({num_decodes * kv_heads, group, num_keys}), values)
                     .view({num_decodes, heads, head_dim});
    if (num_decodes == num_sequences) return decode_out;
    torch::Tensor out = torch::empty_like(q);
    out.index_copy_(0, decode_rows, decode_out);
    decode_out = out;
  }

  // Prompt chunks (past > 0 for a later chunk or a cached prefix) and a lone decode, each over
  // its own blocks.
  torch::Tensor out = decode_out.defined() ? decode_out : torch::empty_like(q);
  const torch::Tensor flat_keys = cache_keys.view({-1, kv_heads, head_dim});
  const torch::Tensor flat_values = cache_values.view({-1, kv_heads, head_dim});
  for (int64_t s = 0; s < num_sequences; ++s) {
    const int64_t begin = step.offsets[s], count = step.offsets[s + 1] - begin;
    if (count == 1 && !lone_decode) continue;  // a decode, done above
    const int64_t past = step.past_lengths[s], total = past + count;
    const int64_t num_blocks = blocks_for(total, block_size);
    const std::vector<int64_t>& table = step.block_tables[s];
    torch::Tensor keys, values;
    if (blocks_in_order(table, num_blocks)) {  // a view, no copy
      keys = flat_keys.narrow(0, table[0] * block_size, total);
      values = flat_values.narrow(0, table[0] * block_size, total);
    } else {
      const torch::Tensor blocks =
          torch::tensor(std::vector<int64_t>(table.begin(), table.begin() + num_blocks),
                        torch::kLong)
              .to(q.device());
      keys = cache_keys.index_select(0, blocks).view({-1, kv_heads, head_dim}).narrow(0, 0, total);
      values =
          cache_values.index_select(0, blocks).view({-1, kv_heads, head_dim}).narrow(0, 0, total);
    }
    torch::Tensor attended =
        attend_one_sequence(q.narrow(0, begin, count), keys, values, past, scale);
    if (num_sequences == 1) return attended;
    out.narrow(0, begin, count).copy_(attended);
  }
  return out;
}

}  // namespace ooze::models
