// Keys and values of past tokens, paged: every layer's storage is a pool of fixed-size blocks,
// and each sequence is described by a block table (the blocks holding its tokens 0..B-1,
// B..2B-1, ...). Memory follows the tokens actually held, and two sequences with a common
// prefix may list the same blocks. Which block belongs to whom is decided by the caller
// (engine/block_manager.h); the cache only stores and reads.
//
//   KVCache cache(model->config(), /*num_blocks=*/1024, /*block_size=*/16, torch::kBFloat16);
//   CacheStep step = cache.plan_step({table_a, table_b}, /*past_lengths=*/{0, 37},
//                                    /*new_tokens=*/{12, 1});      // a prompt and a decode
//   torch::Tensor hidden = model->forward_cached(input_ids, step, cache);  // [13, H]
//
// The position of a sequence's next token is its past length: plan_step derives position ids.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "models/model_config.h"

namespace ooze::models {

// One cached forward step, resolved once and shared by every layer: sequence i appends its
// new_tokens (packed tokens offsets[i]..offsets[i+1] of the step) after the past_lengths[i]
// tokens it already holds, in the blocks block_tables[i].
struct CacheStep {
  std::vector<std::vector<int64_t>> block_tables;
  std::vector<int64_t> past_lengths;
  std::vector<int64_t> offsets;  // size block_tables.size() + 1, offsets[0] == 0
  torch::Tensor slot_mapping;    // [T] int64: block * block_size + offset, where each token goes
  torch::Tensor position_ids;    // [T] int64: past_length + i
  // Sequences that add exactly one token (decodes), attended to in one batched product.
  std::vector<int64_t> decode_sequences;
  torch::Tensor decode_block_table;  // [D, max_blocks] int64, padded with block 0
  torch::Tensor decode_lengths;      // [D] int64: tokens each decode sequence attends to
};

class KVCache {
 public:
  KVCache(const ModelConfig& config, int64_t num_blocks, int64_t block_size, c10::ScalarType dtype,
          c10::Device device = c10::Device(c10::kCPU));

  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  int64_t num_layers() const { return num_layers_; }
  c10::ScalarType dtype() const { return dtype_; }
  c10::Device device() const { return device_; }
  // Bytes one block takes over all layers, keys and values.
  int64_t bytes_per_block() const;

  // Validates a step (tables cover past + new tokens, blocks in range, every sequence adds at
  // least one token) and resolves it. Throws ooze::Error naming the sequence otherwise.
  CacheStep plan_step(const std::vector<std::vector<int64_t>>& block_tables,
                      const std::vector<int64_t>& past_lengths,
                      const std::vector<int64_t>& new_tokens) const;

  // Copies block `source` into block `destination` in every layer (copy-on-write of a shared
  // block before a sequence writes into it).
  void copy_block(int64_t source, int64_t destination);

  // Frees the storage (a sleeping engine gives its memory to a colocated trainer) and allocates
  // it again, zeroed. Using the cache while released throws ooze::Error.
  void release_memory();
  void reacquire_memory();
  bool has_memory() const { return !keys_.empty(); }

  // [num_blocks, block_size, num_key_value_heads, head_dim] storage of layer `layer`.
  torch::Tensor& keys(int64_t layer);
  torch::Tensor& values(int64_t layer);

 private:
  void allocate();

  int64_t num_blocks_;
  int64_t block_size_;
  int64_t num_layers_;
  int64_t num_kv_heads_;
  int64_t head_dim_;
  c10::ScalarType dtype_;
  c10::Device device_;
  std::vector<torch::Tensor> keys_;
  std::vector<torch::Tensor> values_;
};

}  // namespace ooze::models
