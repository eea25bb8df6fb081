// The trainer's end of a colocated sync in place (weight_sync/weight_receiver.h): this rank's
// shards written straight into an engine's parameters, which the engine keeps in a shared
// memory segment on the node, laid out as one bucket (trainer/shard_slice_writer.h does the
// writing). The ranks write at once, each a 1/W of the model.
//
//   SharedParameterWriter writer(model, tensors, engine.call(&RolloutEngine::share_parameters));
//   ...the engine is in a weight sync (begin_weight_sync), every rank writes:
//   writer.write(nullptr);
//   ...all ranks done (a barrier), then the engine hears shared_parameters_written.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/shared_memory_segment.h"
#include "trainer/shard_slice_writer.h"
#include "trainer/trainer_buckets.h"
#include "weight_sync/protocol.h"

namespace ooze::fsdp {
class FullyShardedModule;
}

namespace ooze::trainer {

class SharedParameterWriter {
 public:
  // Maps the engine's segment writable and plans this rank's copies. Throws Error when the
  // engine's layout and `tensors` differ (a tensor missing on either side, another shape, a
  // dtype that is not floating), IoError when the segment cannot be mapped.
  SharedParameterWriter(fsdp::FullyShardedModule& model, const std::vector<SyncedTensor>& tensors,
                        const weight_sync::SharedParameters& shared);

  const std::string& segment() const { return segment_.name(); }

  // Copies this rank's slice of every tensor into the engine's memory; `sums` as
  // ShardSliceWriter::write's, in the order of the constructor's `tensors`.
  void write(std::vector<std::pair<uint32_t, int64_t>>* sums) { writer_->write(sums); }

 private:
  SharedMemorySegment segment_;
  std::unique_ptr<ShardSliceWriter> writer_;  // views segment_'s mapping
};

}  // namespace ooze::trainer
