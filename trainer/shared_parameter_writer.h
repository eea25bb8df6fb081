// The trainer's end of a colocated sync in place (weight_sync/weight_receiver.h): this rank's
// shards written straight into an engine's parameters, which the engine keeps in a shared
// memory segment on the node.
//
// Every rank holds one contiguous slice of each unit's flat vector, so every rank writes its own
// slice of each tensor, converted to the engine's dtype, where the engine keeps those elements.
// The ranks write at once, each a 1/W of the model, and nothing is gathered or packed: the
// bytes are copied once, from the master shards to the engine's memory.
//
//   SharedParameterWriter writer(model, tensors, engine.call(&RolloutEngine::share_parameters));
//   ...the engine is in a weight sync (begin_weight_sync), every rank writes:
//   writer.write(nullptr);
//   ...all ranks done (a barrier), then the engine hears shared_parameters_written.
//
// Only tensors that are parameters as they are (SyncedTensor::unit_offset) can be written so; a
// LoRA model's merged tensors go through buckets (trainer/trainer_buckets.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "trainer/trainer_buckets.h"
#include "weight_sync/protocol.h"
#include "core/shared_memory_segment.h"

namespace ooze::fsdp {
class FullyShardedModule;
}

namespace ooze::trainer {

// Whether every tensor can be written in place (each is a parameter as it is).
bool writable_in_place(const std::vector<SyncedTensor>& tensors);

class SharedParameterWriter {
 public:
  // Maps the engine's segment writable and plans this rank's copies. Throws Error when the
  // engine's layout and `tensors` differ (a tensor missing on either side, another shape, a
  // dtype that is not floating), IoError when the segment cannot be mapped.
  SharedParameterWriter(fsdp::FullyShardedModule& model, const std::vector<SyncedTensor>& tensors,
                        const weight_sync::SharedParameters& shared);

  const std::string& segment() const { return segment_.name(); }

  // Copies this rank's slice of every tensor into the engine's memory. With `sums`, also the
  // CRC-32 of each slice as written (in the engine's dtype) and its bytes, in the order of
  // tensor_names(): slices of all ranks, combined in rank order (crc32_combine), give each
  // tensor's CRC-32.
  void write(std::vector<std::pair<uint32_t, int64_t>>* sums);
  const std::vector<std::string>& tensor_names() const { return names_; }

 private:
  struct Copy {
    size_t tensor;               // into names_
    size_t unit;                 // the shard it reads
    int64_t shard_begin, numel;  // elements [shard_begin, shard_begin + numel) of the shard
    at::Tensor destination;      // a flat view of the engine's memory, in its dtype
  };

  fsdp::FullyShardedModule& model_;
  SharedMemorySegment segment_;
  std::vector<std::string> names_;
  std::vector<Copy> copies_;
};

}  // namespace ooze::trainer
