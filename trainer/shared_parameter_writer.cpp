#include "trainer/shared_parameter_writer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

#include "core/bfloat16_conversion.h"
#include "core/checksum.h"
#include "core/error.h"
#include "fsdp/fully_shard.h"

namespace ooze::trainer {

bool writable_in_place(const std::vector<SyncedTensor>& tensors) {
  return std::all_of(tensors.begin(), tensors.end(), [](const SyncedTensor& tensor) {
    return tensor.unit.has_value() && tensor.unit_offset.has_value();
  });
}

SharedParameterWriter::SharedParameterWriter(fsdp::FullyShardedModule& model,
                                             const std::vector<SyncedTensor>& tensors,
                                             const weight_sync::SharedParameters& shared)
    : model_(model) {
  if (!writable_in_place(tensors)) {
    throw Error(
        "SharedParameterWriter: some synced tensors are computed (merged), not parameters "
        "as they are; they go through buckets");
  }
  segment_ = SharedMemorySegment::open_writable(shared.segment, shared.layout.nbytes);
  std::map<std::string, at::Tensor> engine_tensors;
  for (auto& [name, view] : weight_sync::unpack_bucket(shared.layout, segment_.as_tensor())) {
    engine_tensors.emplace(name, view);
  }
  if (engine_tensors.size() != tensors.size()) {
    throw Error("the engine shares " + std::to_string(engine_tensors.size()) +
                " parameters, the trainer syncs " + std::to_string(tensors.size()));
  }
  for (const SyncedTensor& tensor : tensors) {
    auto found = engine_tensors.find(tensor.name);
    if (found == engine_tensors.end()) {
      throw Error("the engine shares no parameter '" + tensor.name + "'");
    }
    const at::Tensor& place = found->second;
    if (place.sizes().vec() != tensor.shape || !at::isFloatingType(place.scalar_type())) {
      throw Error("the engine's '" + tensor.name + "' is " + c10::str(place.sizes()) + " " +
                  c10::toString(place.scalar_type()) + ", the trainer's " +
                  c10::str(c10::IntArrayRef(tensor.shape)));
    }
    const size_t index = names_.size();
    names_.push_back(tensor.name);
    // This rank's elements of the unit, [begin, end), against the tensor's, [first, last).
    const fsdp::FlatParam& flat = model.unit(*tensor.unit);
    const int64_t begin = flat.shard_offset(), end = begin + flat.valid_shard_numel();
    const int64_t first = *tensor.unit_offset, last = first + place.numel();
    const int64_t from = std::max(begin, first), to = std::min(end, last);
    if (from >= to) continue;
    copies_.push_back(Copy{index, *tensor.unit, from - begin, to - from,
                           place.view({-1}).narrow(0, from - first, to - from)});
  }
}

void SharedParameterWriter::write(std::vector<std::pair<uint32_t, int64_t>>* sums) {
  at::NoGradGuard no_grad;
  if (sums != nullptr) sums->assign(names_.size(), {0u, 0});
  for (Copy& copy : copies_) {
    const at::Tensor source =
        model_.unit(copy.unit).master_shard().narrow(0, copy.shard_begin, copy.numel);
    if (sums == nullptr) {
      if (copy.destination.scalar_type() == source.scalar_type()) {
        // glibc's memcpy streams past the cache into memory it never reads, where copy_ does not:
        // the fp32 sync of bench_weight_sync_bench went from 7.0 to 8.9 GB/s.
        std::memcpy(copy.destination.data_ptr(), source.data_ptr(), source.nbytes());
      } else {
        copy_converted(copy.destination, source);  // into the engine's dtype as it is copied
      }
      continue;
    }
    // Checked: the slice is converted on its own, summed, then copied, so the engine's later
    // checksum of its memory is compared with the trainer's values, not with itself.
    const at::Tensor converted = source.to(copy.destination.scalar_type()).contiguous();
    (*sums)[copy.tensor] = {crc32(converted.data_ptr(), converted.nbytes()),
                            static_cast<int64_t>(converted.nbytes())};
    copy.destination.copy_(converted);
  }
}

}  // namespace ooze::trainer
