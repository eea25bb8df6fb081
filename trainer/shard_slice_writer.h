// This rank's slices of the synced tensors, written where a flat layout (a weight-sync bucket:
// names, dtypes, shapes, offsets) keeps them, converted to each entry's dtype as they are copied.
//
// Every rank holds one contiguous slice of each unit's flat vector, so every rank can write its
// own slice of each tensor, and the ranks together write each tensor whole without gathering a
// unit or packing a bucket: the bytes are copied once, from the master shards to where they go.
// Two places use it: a colocated engine's parameters (trainer/shared_parameter_writer.h) and,
// disaggregated, trainer rank 0's broadcast buffers, which the other ranks on its host map.
//
//   ShardSliceWriter writer(model, tensors, bucket_manifest, destination);  // plans the copies
//   writer.write(nullptr);  // every rank, each its slices; then a barrier before anyone reads
//
// Only tensors that are parameters as they are (SyncedTensor::unit_offset) can be written so; a
// LoRA model's merged tensors go through buckets (trainer/trainer_buckets.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "trainer/trainer_buckets.h"
#include "weight_sync/bucket.h"

namespace ooze::fsdp {
class FullyShardedModule;
}

namespace ooze::trainer {

// Whether every tensor can be written in place (each is a parameter as it is).
bool writable_in_place(const std::vector<SyncedTensor>& tensors);

class ShardSliceWriter {
 public:
  // Plans this rank's copies of the `tensors` that `layout` holds into `destination` (a
  // contiguous uint8 CPU tensor of at least layout.nbytes, which must outlive the writer).
  // Throws Error when a layout entry is not among `tensors`, has another shape, or is not
  // floating, or when a tensor it holds is not a parameter as it is.
  ShardSliceWriter(fsdp::FullyShardedModule& model, const std::vector<SyncedTensor>& tensors,
                   const weight_sync::BucketManifest& layout, const at::Tensor& destination);

  // Copies this rank's slice of every tensor of the layout. With `sums` (sized as `tensors`),
  // also the CRC-32 of each slice as written (in the destination's dtype) and its bytes, at the
  // tensor's index in `tensors`: slices of all ranks, combined in rank order (crc32_combine),
  // give each tensor's CRC-32. Tensors the layout does not hold keep their entries.
  void write(std::vector<std::pair<uint32_t, int64_t>>* sums);

 private:
  struct Copy {
    size_t tensor;               // into the constructor's `tensors`
    size_t unit;                 // the shard it reads
    int64_t shard_begin, numel;  // elements [shard_begin, shard_begin + numel) of the shard
    at::Tensor destination;      // a flat view of the destination, in its dtype
  };

  fsdp::FullyShardedModule& model_;
  std::vector<Copy> copies_;
};

}  // namespace ooze::trainer
