// The trainer's full weights, cut into weight-sync buckets (weight_sync/bucket.h) straight from
// the FSDP shards: the trainer's end of every transfer path.
//
// The walk goes unit by unit in forward order (embeddings, layers, the root: the Hugging Face
// order of a checkpoint) and entry by entry within a unit. A unit is all-gathered
// (fsdp::FullyShardedModule::gather_full_master) when the walk first needs it, into one buffer
// that every unit reuses and that is kept between walks, so a rank holds its shards, that
// buffer (the largest unit) and the bucket buffers the caller passes. At W > 1 a unit is
// gathered in the engine's dtype, each rank converting its own shard; otherwise each tensor is
// converted as it is copied into the bucket. Either way, no full-size temporary.
//
//   TrainerBuckets buckets(fsdp.sharded(), at::kBFloat16, max_bucket_bytes);
//   for (size_t k = 0; k < buckets.plan().size(); ++k) {
//     buckets.pack(k, &buffer);   // every rank of the trainer calls it, in order (a collective)
//     ...hand `buffer` over...
//   }
//
// Ranks that hand nothing over pass nullptr: they take part in the gathers only.
//
// What the engines receive need not be the FSDP parameters one to one: a LoRA model sends its
// frozen base with the adapters merged in (trainer/lora_weights.h). Each tensor is then a
// SyncedTensor: its engine name and shape, the unit it is computed from, and how.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "weight_sync/bucket.h"

namespace ooze::fsdp {
class FullyShardedModule;
}

namespace ooze::trainer {

// One tensor the engines receive.
struct SyncedTensor {
  std::string name;  // the engine's (Hugging Face) parameter name
  std::vector<int64_t> shape;
  // The FSDP unit its values are computed from, gathered when the walk reaches it; none for a
  // tensor the module holds whole (a frozen, replicated one).
  std::optional<size_t> unit;
  // Its values in any floating dtype, given the unit's gathered flat vector (undefined when
  // `unit` is none): fp32, or the engine's dtype when every tensor of the unit has a
  // unit_offset (a slice of it as it is).
  std::function<at::Tensor(const at::Tensor& gathered_unit)> value;
  // Set when the tensor is a parameter of `unit` as it is: its elements start here in the unit's
  // flat vector, so each rank holds a slice of it in its shard and can write that slice where
  // the engine keeps the tensor without gathering (trainer/shared_parameter_writer.h).
  std::optional<int64_t> unit_offset = std::nullopt;
};

// Every parameter of `model`, as it is: what a sync of a fully trained model sends.
std::vector<SyncedTensor> sharded_parameters(fsdp::FullyShardedModule& model);

class TrainerBuckets {
 public:
  // Plans the buckets (plan_buckets) of `tensors` in `engine_dtype`. The tensors come in walk
  // order: the units they are computed from never decrease (Error otherwise).
  TrainerBuckets(fsdp::FullyShardedModule& model, std::vector<SyncedTensor> tensors,
                 at::ScalarType engine_dtype, int64_t max_bucket_bytes);
  // The same for every parameter of `model`.
  TrainerBuckets(fsdp::FullyShardedModule& model, at::ScalarType engine_dtype,
                 int64_t max_bucket_bytes)
      : TrainerBuckets(model, sharded_parameters(model), engine_dtype, max_bucket_bytes) {}

  const std::vector<weight_sync::BucketManifest>& plan() const { return plan_; }
  const std::vector<SyncedTensor>& tensors() const { return tensors_; }
  // The largest bucket's size: what a reused buffer needs.
  int64_t largest_bucket_bytes() const;
  int64_t total_bytes() const;

  // Cuts bucket `index` into *buffer (a contiguous 1-D uint8 tensor of at least the bucket's
  // nbytes, any device), or only takes part in the gathers when buffer is nullptr. Buckets go in
  // order 0, 1, ...; after the last the walk starts over by itself. Throws Error when called out
  // of order.
  void pack(size_t index, at::Tensor* buffer);
  // Abandons a walk midway: frees the gathered unit and starts again at bucket 0.
  void restart();

 private:
  // The full flat values of `unit`, gathered if the walk has just reached it.
  const at::Tensor& gathered(size_t unit);

  fsdp::FullyShardedModule& model_;
  std::vector<SyncedTensor> tensors_;
  std::vector<weight_sync::BucketManifest> plan_;
  std::vector<std::vector<size_t>> sources_;  // per bucket, per manifest entry: its tensor
  size_t next_bucket_ = 0;
  std::vector<at::ScalarType> gather_dtypes_;  // per unit
  at::Tensor gather_buffer_;  // bytes; grown to the largest unit, reused by every gather
  size_t gathered_unit_ = 0;
  at::Tensor gathered_;  // a view of gather_buffer_ (or the shard); undefined when none
};

}  // namespace ooze::trainer
