#include "models/kv_cache.h"

#include <set>
#include <string>

#include "core/error.h"

namespace ooze::models {

KVCache::KVCache(const ModelConfig& config, int64_t max_sequences, int64_t max_length,
                 c10::ScalarType dtype, c10::Device device)
    : max_length_(max_length), dtype_(dtype), device_(device) {
  if (max_sequences < 1 || max_length < 1) {
    throw Error("KVCache: max_sequences = " + std::to_string(max_sequences) +
                " and max_length = " + std::to_string(max_length) + " must both be >= 1");
  }
  auto options = torch::TensorOptions().dtype(dtype).device(device);
  const std::vector<int64_t> shape = {max_sequences, config.num_key_value_heads, max_length,
                                      config.head_dim};
  for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer) {
    keys_.push_back(torch::zeros(shape, options));
    values_.push_back(torch::zeros(shape, options));
  }
  lengths_.assign(max_sequences, 0);
  active_.assign(max_sequences, false);
}

int64_t KVCache::allocate() {
  for (size_t slot = 0; slot < active_.size(); ++slot) {
    if (!active_[slot]) {
      active_[slot] = true;
      lengths_[slot] = 0;
      return static_cast<int64_t>(slot);
    }
  }
  throw Error("KVCache: all " + std::to_string(active_.size()) +
              " slots are in use; release finished sequences first or create a larger cache");
}

void KVCache::check_slot(int64_t slot, const char* operation) const {
  if (slot < 0 || slot >= max_sequences()) {
    throw Error(std::string("KVCache::") + operation + ": slot " + std::to_string(slot) +
                " is out of range [0, " + std::to_string(max_sequences()) + ")");
  }
  if (!active_[slot]) {
    throw Error(std::string("KVCache::") + operation + ": slot " + std::to_string(slot) +
                " is not allocated; call allocate() first");
  }
}

void KVCache::release(int64_t slot) {
  check_slot(slot, "release");
  active_[slot] = false;
  lengths_[slot] = 0;
}

void KVCache::reset() {
  active_.assign(active_.size(), false);
  lengths_.assign(lengths_.size(), 0);
}

bool KVCache::is_active(int64_t slot) const {
  return slot >= 0 && slot < max_sequences() && active_[slot];
}

int64_t KVCache::num_free_slots() const {
  int64_t free = 0;
  for (bool active : active_) free += active ? 0 : 1;
  return free;
}

int64_t KVCache::length(int64_t slot) const {
  check_slot(slot, "length");
  return lengths_[slot];
}

CacheStep KVCache::plan_step(const std::vector<int64_t>& slots,
                             const std::vector<int64_t>& new_tokens, bool is_decode) const {
  if (slots.size() != new_tokens.size()) {
    throw Error("KVCache: " + std::to_string(slots.size()) + " slots but " +
                std::to_string(new_tokens.size()) + " sequences");
  }
  CacheStep step;
  step.is_decode = is_decode;
  step.offsets.push_back(0);
  std::set<int64_t> seen;
  std::vector<int64_t> token_slots, positions;
  for (size_t i = 0; i < slots.size(); ++i) {
    const int64_t slot = slots[i];
    check_slot(slot, is_decode ? "decode" : "prefill");
    if (!seen.insert(slot).second) {
      throw Error("KVCache: slot " + std::to_string(slot) +
                  " appears twice in one step; each sequence needs its own slot");
    }
    if (new_tokens[i] < 1) {
      throw Error("KVCache: sequence " + std::to_string(i) + " (slot " + std::to_string(slot) +
                  ") has no tokens; every sequence of a step needs at least one");
    }
    const int64_t past = lengths_[slot];
    if (past + new_tokens[i] > max_length_) {
      throw Error("KVCache: slot " + std::to_string(slot) + " holds " + std::to_string(past) +
                  " tokens and cannot take " + std::to_string(new_tokens[i]) +
                  " more (max_length = " + std::to_string(max_length_) +
                  "); stop the sequence or create a longer cache");
    }
    step.slots.push_back(slot);
    step.past_lengths.push_back(past);
    step.offsets.push_back(step.offsets.back() + new_tokens[i]);
    for (int64_t t = 0; t < new_tokens[i]; ++t) {
      token_slots.push_back(slot);
      positions.push_back(past + t);
    }
  }
  step.contiguous_slots = true;
  for (size_t i = 0; i < step.slots.size(); ++i) {
    if (step.slots[i] != step.slots[0] + static_cast<int64_t>(i)) step.contiguous_slots = false;
  }
  auto to_device = [&](const std::vector<int64_t>& values) {
    return torch::tensor(values, torch::kLong).to(device_);
  };
  step.slot_index = to_device(step.slots);
  step.token_slots = to_device(token_slots);
  step.position_ids = to_device(positions);
  return step;
}

void KVCache::commit_step(const CacheStep& step) {
  for (size_t i = 0; i < step.slots.size(); ++i) {
    lengths_[step.slots[i]] = step.past_lengths[i] + (step.offsets[i + 1] - step.offsets[i]);
  }
}

}  // namespace ooze::models
