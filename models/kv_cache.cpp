#include "models/kv_cache.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <unordered_map>

#include "core/error.h"

namespace ooze::models {
namespace {

std::string sequence_name(size_t index) { return "sequence " + std::to_string(index); }

// A zeroed CPU tensor in anonymous mapped memory: the kernel hands out zero pages as they are
// first written, so a cache sized for the worst case keeps resident only the blocks in use
// (torch::zeros would write, and so commit, every page at once).
torch::Tensor zeroed_on_first_touch(const std::vector<int64_t>& shape, c10::ScalarType dtype) {
  size_t bytes = c10::elementSize(dtype);
  for (const int64_t size : shape) bytes *= static_cast<size_t>(size);
  void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (memory == MAP_FAILED) {
    throw Error("KVCache: cannot map " + std::to_string(bytes) +
                " bytes for a layer's keys or values: " + std::strerror(errno));
  }
  return torch::from_blob(
      memory, shape, [bytes](void* data) { munmap(data, bytes); },
      torch::TensorOptions().dtype(dtype));
}

}  // namespace

KVCache::KVCache(const ModelConfig& config, int64_t num_blocks, int64_t block_size,
                 c10::ScalarType dtype, c10::Device device)
    : num_blocks_(num_blocks),
      block_size_(block_size),
      num_layers_(config.num_hidden_layers),
      num_kv_heads_(config.num_key_value_heads),
      head_dim_(config.head_dim),
      dtype_(dtype),
      device_(device) {
  if (num_blocks < 1 || block_size < 1) {
    throw Error("KVCache: num_blocks = " + std::to_string(num_blocks) +
                " and block_size = " + std::to_string(block_size) + " must both be >= 1");
  }
  allocate();
}

void KVCache::allocate() {
  auto options = torch::TensorOptions().dtype(dtype_).device(device_);
  const std::vector<int64_t> shape = {num_blocks_, block_size_, num_kv_heads_, head_dim_};
  keys_.clear();
  values_.clear();
  for (int64_t layer = 0; layer < num_layers_; ++layer) {
    if (device_.is_cpu()) {
      keys_.push_back(zeroed_on_first_touch(shape, dtype_));
      values_.push_back(zeroed_on_first_touch(shape, dtype_));
    } else {
      keys_.push_back(torch::zeros(shape, options));
      values_.push_back(torch::zeros(shape, options));
    }
  }
}

int64_t KVCache::bytes_per_block() const {
  return 2 * num_layers_ * block_size_ * num_kv_heads_ * head_dim_ *
         static_cast<int64_t>(c10::elementSize(dtype_));
}

CacheStep KVCache::plan_step(const std::vector<std::vector<int64_t>>& block_tables,
                             const std::vector<int64_t>& past_lengths,
                             const std::vector<int64_t>& new_tokens) const {
  if (block_tables.size() != past_lengths.size() || block_tables.size() != new_tokens.size()) {
    throw Error("KVCache::plan_step: " + std::to_string(block_tables.size()) + " block tables, " +
                std::to_string(past_lengths.size()) + " past lengths and " +
                std::to_string(new_tokens.size()) +
                " new-token counts; give one of each per sequence");
  }
  if (block_tables.empty()) {
    throw Error("KVCache::plan_step: the step has no sequences; give at least one");
  }
  CacheStep step;
  step.block_tables = block_tables;
  step.past_lengths = past_lengths;
  step.offsets.push_back(0);
  std::vector<int64_t> slots, positions, decode_lengths;
  // Which sequence writes each slot: two writers in one step would race.
  std::unordered_map<int64_t, size_t> writer_of_slot;
  int64_t max_decode_blocks = 0;
  for (size_t i = 0; i < block_tables.size(); ++i) {
    const std::vector<int64_t>& table = block_tables[i];
    const int64_t past = past_lengths[i], count = new_tokens[i];
    if (count < 1) {
      throw Error("KVCache::plan_step: " + sequence_name(i) + " adds " + std::to_string(count) +
                  " tokens; every sequence of a step adds at least one");
    }
    if (past < 0) {
      throw Error("KVCache::plan_step: " + sequence_name(i) + " has past length " +
                  std::to_string(past) + "; it must be >= 0");
    }
    const int64_t total = past + count;
    const int64_t needed = (total + block_size_ - 1) / block_size_;
    if (static_cast<int64_t>(table.size()) < needed) {
      throw Error("KVCache::plan_step: " + sequence_name(i) + " holds " + std::to_string(total) +
                  " tokens after this step, which need " + std::to_string(needed) + " blocks of " +
                  std::to_string(block_size_) + ", but its block table has " +
                  std::to_string(table.size()) + "; allocate its blocks before the step");
    }
    for (size_t b = 0; b < table.size(); ++b) {
      if (table[b] < 0 || table[b] >= num_blocks_) {
        throw Error("KVCache::plan_step: " + sequence_name(i) + " lists block " +
                    std::to_string(table[b]) + " at table index " + std::to_string(b) +
                    ", outside [0, " + std::to_string(num_blocks_) + ")");
      }
    }
    for (int64_t position = past; position < total; ++position) {
      const int64_t block = table[position / block_size_];
      const int64_t slot = block * block_size_ + position % block_size_;
      auto [it, inserted] = writer_of_slot.emplace(slot, i);
      if (!inserted) {
        throw Error("KVCache::plan_step: " + sequence_name(it->second) + " and " +
                    sequence_name(i) + " both write offset " +
                    std::to_string(position % block_size_) + " of block " + std::to_string(block) +
                    " in one step; a shared block must be copied (copy_block) before a sequence "
                    "writes into it");
      }
      slots.push_back(slot);
      positions.push_back(position);
    }
    step.offsets.push_back(step.offsets.back() + count);
    if (count == 1) {
      step.decode_sequences.push_back(static_cast<int64_t>(i));
      decode_lengths.push_back(total);
      max_decode_blocks = std::max(max_decode_blocks, needed);
    }
  }
  auto on_device = [&](const std::vector<int64_t>& values) {
    return torch::tensor(values, torch::kLong).to(device_);
  };
  step.slot_mapping = on_device(slots);
  step.position_ids = on_device(positions);
  if (!step.decode_sequences.empty()) {
    const int64_t num_decodes = static_cast<int64_t>(step.decode_sequences.size());
    std::vector<int64_t> table(num_decodes * max_decode_blocks, 0);
    for (int64_t d = 0; d < num_decodes; ++d) {
      const std::vector<int64_t>& blocks = block_tables[step.decode_sequences[d]];
      const int64_t used = (decode_lengths[d] + block_size_ - 1) / block_size_;
      std::copy(blocks.begin(), blocks.begin() + used, table.begin() + d * max_decode_blocks);
    }
    step.decode_block_table = on_device(table).view({num_decodes, max_decode_blocks});
    step.decode_lengths = on_device(decode_lengths);
  }
  return step;
}

void KVCache::copy_block(int64_t source, int64_t destination) {
  for (int64_t block : {source, destination}) {
    if (block < 0 || block >= num_blocks_) {
      throw Error("KVCache::copy_block: block " + std::to_string(block) + " is outside [0, " +
                  std::to_string(num_blocks_) + ")");
    }
  }
  if (!has_memory()) {
    throw Error(
        "KVCache::copy_block: the cache's memory is released (the engine is asleep); call "
        "reacquire_memory() first");
  }
  if (source == destination) return;
  torch::NoGradGuard no_grad;
  for (int64_t layer = 0; layer < num_layers_; ++layer) {
    keys_[layer][destination].copy_(keys_[layer][source]);
    values_[layer][destination].copy_(values_[layer][source]);
  }
}

void KVCache::release_memory() {
  keys_.clear();
  values_.clear();
}

void KVCache::reacquire_memory() {
  if (!has_memory()) allocate();
}

torch::Tensor& KVCache::keys(int64_t layer) {
  if (!has_memory()) {
    throw Error(
        "KVCache: the cache's memory is released (the engine is asleep); call "
        "reacquire_memory() before reading or writing it");
  }
  if (layer < 0 || layer >= num_layers_) {
    throw Error("KVCache: layer " + std::to_string(layer) + " is outside [0, " +
                std::to_string(num_layers_) + ")");
  }
  return keys_[layer];
}

torch::Tensor& KVCache::values(int64_t layer) {
  keys(layer);  // the same checks
  return values_[layer];
}

}  // namespace ooze::models
