#include "trainer/shared_parameter_writer.h"

#include <algorithm>

#include "core/error.h"

namespace ooze::trainer {

SharedParameterWriter::SharedParameterWriter(fsdp::FullyShardedModule& model,
                                             const std::vector<SyncedTensor>& tensors,
                                             const weight_sync::SharedParameters& shared) {
  if (!writable_in_place(tensors)) {
    throw Error(
        "SharedParameterWriter: some synced tensors are computed (merged), not parameters "
        "as they are; they go through buckets");
  }
  const std::vector<weight_sync::BucketEntry>& entries = shared.layout.entries;
  if (entries.size() != tensors.size()) {
    throw Error("the engine shares " + std::to_string(entries.size()) +
                " parameters, the trainer syncs " + std::to_string(tensors.size()));
  }
  for (const SyncedTensor& tensor : tensors) {
    const bool shared_by_engine = std::any_of(
        entries.begin(), entries.end(),
        [&](const weight_sync::BucketEntry& entry) { return entry.name == tensor.name; });
    if (!shared_by_engine) throw Error("the engine shares no parameter '" + tensor.name + "'");
  }
  segment_ = SharedMemorySegment::open_writable(shared.segment, shared.layout.nbytes);
  writer_ = std::make_unique<ShardSliceWriter>(model, tensors, shared.layout, segment_.as_tensor());
}

}  // namespace ooze::trainer
