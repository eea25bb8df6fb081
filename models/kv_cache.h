// Keys and values of past tokens for many sequences decoded at once. The cache has a fixed
// number of slots; each sequence being generated owns one slot from allocate() until release(),
// so sequences can start and finish at different times and a finished sequence's slot is reused.
//
//   KVCache cache(model->config(), /*max_sequences=*/64, /*max_length=*/4096, torch::kBFloat16);
//   int64_t slot = cache.allocate();
//   logits = model->forward_prefill(prompt_ids, cu_seqlens, slots, cache);  // fills the slots
//   logits = model->forward_decode(next_ids, slots, cache);                 // one token each
//   cache.release(slot);
//
// The position of a slot's next token is the number of tokens it holds (length()).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "models/model_config.h"

namespace ooze::models {

// Where the tokens of one cached forward step go, resolved once per step and shared by every
// layer: sequence i holds new_tokens[i] packed tokens starting at token offsets[i] of the step,
// goes to slot slots[i], after the past_lengths[i] tokens already there.
struct CacheStep {
  std::vector<int64_t> slots;
  std::vector<int64_t> past_lengths;
  std::vector<int64_t> offsets;   // size slots.size() + 1, offsets[0] == 0
  bool is_decode = false;         // one new token per sequence
  bool contiguous_slots = false;  // slots[i] == slots[0] + i: the cache is read without a copy
  torch::Tensor slot_index;       // [B] int64 on the cache's device
  torch::Tensor token_slots;      // [T] int64 on the cache's device: the slot of each token
  torch::Tensor position_ids;     // [T] int64 on the cache's device: past_length + i
};

class KVCache {
 public:
  KVCache(const ModelConfig& config, int64_t max_sequences, int64_t max_length,
          c10::ScalarType dtype, c10::Device device = c10::Device(c10::kCPU));

  int64_t max_sequences() const { return static_cast<int64_t>(lengths_.size()); }
  int64_t max_length() const { return max_length_; }
  int64_t num_layers() const { return static_cast<int64_t>(keys_.size()); }
  c10::ScalarType dtype() const { return dtype_; }
  c10::Device device() const { return device_; }

  // The lowest free slot, now active and empty. Throws ooze::Error when every slot is taken.
  int64_t allocate();
  // Frees `slot` (its content is dropped). Throws ooze::Error if it is not active.
  void release(int64_t slot);
  // Releases every slot.
  void reset();
  bool is_active(int64_t slot) const;
  int64_t num_free_slots() const;
  // Tokens stored in `slot`, which is also the position of its next token.
  int64_t length(int64_t slot) const;

  // Validates a step that appends new_tokens[i] tokens to slots[i] (active, distinct, within
  // max_length) and resolves it. Throws ooze::Error naming the slot otherwise.
  CacheStep plan_step(const std::vector<int64_t>& slots, const std::vector<int64_t>& new_tokens,
                      bool is_decode) const;
  // Makes the tokens of a finished step part of each slot's length.
  void commit_step(const CacheStep& step);

  // [max_sequences, num_key_value_heads, max_length, head_dim] storage of layer `layer`
  // (heads before positions, so that a run of slots is one strided batch of matrices).
  torch::Tensor& keys(int64_t layer) { return keys_.at(layer); }
  torch::Tensor& values(int64_t layer) { return values_.at(layer); }

 private:
  void check_slot(int64_t slot, const char* operation) const;

  int64_t max_length_;
  c10::ScalarType dtype_;
  c10::Device device_;
  std::vector<torch::Tensor> keys_;
  std::vector<torch::Tensor> values_;
  std::vector<int64_t> lengths_;
  std::vector<bool> active_;
};

}  // namespace ooze::models
