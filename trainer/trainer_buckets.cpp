#include "trainer/trainer_buckets.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "core/error.h"
#include "fsdp/fully_shard.h"

namespace ooze::trainer {

TrainerBuckets::TrainerBuckets(fsdp::FullyShardedModule& model, at::ScalarType engine_dtype,
                               int64_t max_bucket_bytes)
    : model_(model) {
  std::vector<weight_sync::TensorSpec> specs;
  std::map<std::string, Source> source_of;
  for (size_t u = 0; u < model.num_units(); ++u) {
    const auto& entries = model.unit(u).entries();
    for (size_t e = 0; e < entries.size(); ++e) {
      specs.push_back(weight_sync::TensorSpec{entries[e].name, engine_dtype, entries[e].shape});
      source_of[entries[e].name] = Source{u, e};
    }
  }
  plan_ = weight_sync::plan_buckets(specs, max_bucket_bytes);
  for (const weight_sync::BucketManifest& bucket : plan_) {
    std::vector<Source> sources;
    for (const weight_sync::BucketEntry& entry : bucket.entries)
      sources.push_back(source_of.at(entry.name));
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
    gathered_ = model_.gather_full_master(unit);
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
  const std::vector<Source>& sources = sources_[index];
  // Visit the entries in walk order, so every rank gathers each unit once and in the same order
  // whatever the bucket's layout order.
  std::vector<size_t> order(sources.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::tie(sources[a].unit, sources[a].entry) <
           std::tie(sources[b].unit, sources[b].entry);
  });
  std::vector<at::Tensor> tensors(sources.size());
  for (size_t i : order) {
    const fsdp::FlatParamEntry& entry = model_.unit(sources[i].unit).entries()[sources[i].entry];
    tensors[i] = gathered(sources[i].unit).narrow(0, entry.offset, entry.numel).view(entry.shape);
  }
  if (buffer != nullptr) {
    at::Tensor view = buffer->narrow(0, 0, bucket.nbytes);
    weight_sync::pack_into(bucket, tensors, view);
  }
  ++next_bucket_;
  if (next_bucket_ == plan_.size()) restart();
}

void TrainerBuckets::restart() {
  gathered_ = at::Tensor();
  next_bucket_ = 0;
}

}  // namespace ooze::trainer
