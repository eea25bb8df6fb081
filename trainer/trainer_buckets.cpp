#include "trainer/trainer_buckets.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "core/error.h"
#include "fsdp/fully_shard.h"

namespace ooze::trainer {

std::vector<SyncedTensor> sharded_parameters(fsdp::FullyShardedModule& model) {
  std::vector<SyncedTensor> tensors;
  for (size_t u = 0; u < model.num_units(); ++u) {
    for (const fsdp::FlatParamEntry& entry : model.unit(u).entries()) {
      tensors.push_back(SyncedTensor{
          entry.name, entry.shape, u,
          [offset = entry.offset, numel = entry.numel, shape = entry.shape](
              const at::Tensor& gathered) { return gathered.narrow(0, offset, numel).view(shape); },
          entry.offset});
    }
  }
  return tensors;
}

TrainerBuckets::TrainerBuckets(fsdp::FullyShardedModule& model, std::vector<SyncedTensor> tensors,
                               at::ScalarType engine_dtype, int64_t max_bucket_bytes)
    : model_(model), tensors_(std::move(tensors)), gather_dtypes_(model.num_units(), at::kFloat) {
  // A unit whose tensors are all slices of it as they are is gathered in the engines' dtype
  // (W > 1): half the bytes for bf16 engines, each rank converting its own shard. A unit with a
  // computed tensor (a merged LoRA weight) is computed from fp32 and converted once, at the end.
  if (model.world_size() > 1 && at::isFloatingType(engine_dtype)) {
    std::vector<bool> plain(model.num_units(), true);
    for (const SyncedTensor& tensor : tensors_) {
      if (tensor.unit && !tensor.unit_offset) plain[*tensor.unit] = false;
    }
    for (size_t u = 0; u < plain.size(); ++u) {
      if (plain[u]) gather_dtypes_[u] = engine_dtype;
    }
  }
  std::vector<weight_sync::TensorSpec> specs;
  std::map<std::string, size_t> index_of;
  std::optional<size_t> last_unit;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (const std::optional<size_t> unit = tensors_[i].unit) {
      if (last_unit && *unit < *last_unit) {
        throw Error("TrainerBuckets: '" + tensors_[i].name + "' comes from unit " +
                    std::to_string(*unit) + " after a tensor of unit " +
                    std::to_string(*last_unit) + "; list the tensors in unit order");
      }
      last_unit = unit;
    }
    specs.push_back(weight_sync::TensorSpec{tensors_[i].name, engine_dtype, tensors_[i].shape});
    index_of[tensors_[i].name] = i;
  }
  plan_ = weight_sync::plan_buckets(specs, max_bucket_bytes);
  for (const weight_sync::BucketManifest& bucket : plan_) {
    std::vector<size_t> sources;
    for (const weight_sync::BucketEntry& entry : bucket.entries)
      sources.push_back(index_of.at(entry.name));
    sources_.push_back(std::move(sources));
  }
}

int64_t TrainerBuckets::largest_bucket_bytes() const {
  int64_t largest = 0;
  for (const weight_sync::BucketManifest& bucket : plan_)
    largest = std::max(largest, bucket.nbytes);
  return largest;
}

int64_t TrainerBuckets::total_bytes() const {
  int64_t total = 0;
  for (const weight_sync::BucketManifest& bucket : plan_) {
    for (const weight_sync::BucketEntry& entry : bucket.entries) total += entry.nbytes;
  }
  return total;
}

const at::Tensor& TrainerBuckets::gathered(size_t unit) {
  if (!gathered_.defined() || gathered_unit_ != unit) {
    gathered_ = at::Tensor();  // the unit behind us goes before the next is gathered
    gathered_ = model_.gather_full_master(unit, gather_dtypes_[unit], &gather_buffer_);
    gathered_unit_ = unit;
  }
  return gathered_;
}

void TrainerBuckets::pack(size_t index, at::Tensor* buffer) {
  if (index != next_bucket_ || index >= plan_.size()) {
    throw Error("TrainerBuckets::pack: bucket " + std::to_string(index) + " asked for, but the " +
                "walk is at bucket " + std::to_string(next_bucket_) + " of " +
                std::to_string(plan_.size()) + " (buckets go in order; restart() to begin again)");
  }
  const weight_sync::BucketManifest& bucket = plan_[index];
  const std::vector<size_t>& sources = sources_[index];
  // Visit the entries in walk order (tensors whose unit comes earlier first), so every rank
  // gathers each unit once and in the same order whatever the bucket's layout order.
  std::vector<size_t> order(sources.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return sources[a] < sources[b]; });
  if (buffer == nullptr) {
    for (size_t i : order) {
      if (const std::optional<size_t> unit = tensors_[sources[i]].unit) gathered(*unit);
    }
  } else {
    // Each value is copied before the next unit's gather reuses the memory it views.
    at::Tensor view = buffer->narrow(0, 0, bucket.nbytes);
    weight_sync::pack_into(
        bucket, order,
        [&](size_t i) {
          const SyncedTensor& tensor = tensors_[sources[i]];
          return tensor.value(tensor.unit ? gathered(*tensor.unit) : at::Tensor());
        },
        view);
  }
  ++next_bucket_;
  if (next_bucket_ == plan_.size()) restart();
}

void TrainerBuckets::restart() {
  gathered_ = at::Tensor();
  next_bucket_ = 0;
}

}  // namespace ooze::trainer
