// One FSDP unit's parameters as a single flat vector, sharded over the W ranks of a group.
//
// Layout. The unit's parameters, in the given order, are concatenated (row-major) into a flat
// vector of numel() elements, zero-padded to padded_numel() = W * shard_numel() with
// shard_numel() = ceil(numel() / W). Rank r owns elements [r * shard_numel(), (r + 1) *
// shard_numel()): its fp32 master shard and its fp32 gradient shard. Padding is zero in both.
//
// Parameters. The module's parameter tensors become views of one "unsharded" buffer of
// padded_numel() elements in the compute dtype (param_dtype). unshard() fills it by
// all-gathering every rank's shard (cast to param_dtype); reshard() frees its memory by
// releasing the storage (fsdp/storage.h). Every view, the module's parameters and whatever
// autograd saved from them, shares that storage, so they see the memory come and go while their
// shapes stay; nothing holds a stale copy.
//
// Gradients. reduce_grad_async() takes the unit's full gradients (any floating dtype), writes
// them into a padded fp32 flat buffer and reduce-scatters it with ReduceOp::AVG into this
// rank's gradient shard, which ACCUMULATES over calls (micro-batches) until zero_grad().
//
// W = 1 with fp32 compute takes no extra copies: the unsharded buffer is the master shard
// itself, nothing is gathered, freed or reduced, and the module is the plain model whose
// parameters the optimizer updates in place.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "fsdp/mixed_precision.h"

namespace ooze::fsdp {

struct FlatParamEntry {
  std::string name;         // full name in the module, "model.layers.0.mlp.up_proj.weight"
  torch::Tensor parameter;  // the module's own tensor (the same TensorImpl)
  std::vector<int64_t> shape;
  int64_t offset = 0;  // first element in the flat vector
  int64_t numel = 0;
};

// The part of one parameter that lies in this rank's shard.
struct ShardSlice {
  size_t entry = 0;          // index into FlatParam::entries()
  int64_t param_offset = 0;  // first element, in the parameter's row-major order
  int64_t shard_offset = 0;  // where that element lives in the shard
  int64_t numel = 0;
};

class FlatParam {
 public:
  // Takes over `parameters` (name and the module's tensor, in flat order): copies this rank's
  // part of their current values into the fp32 master shard, then makes each a view of the
  // unsharded buffer, which starts released (except for W = 1 fp32, where it is the master).
  // `comm` is the sharding group; null means a single rank. Throws ooze::Error for an empty
  // list, a duplicate tensor, or a non-floating or non-contiguous parameter.
  FlatParam(std::string name, std::vector<std::pair<std::string, torch::Tensor>> parameters,
            std::shared_ptr<comm::Communicator> comm, MixedPrecisionPolicy policy);
  FlatParam(const FlatParam&) = delete;
  FlatParam& operator=(const FlatParam&) = delete;

  const std::string& name() const { return name_; }
  const std::vector<FlatParamEntry>& entries() const { return entries_; }
  const MixedPrecisionPolicy& policy() const { return policy_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int64_t numel() const { return numel_; }
  int64_t padded_numel() const { return shard_numel_ * world_size_; }
  int64_t shard_numel() const { return shard_numel_; }
  // First flat element of this rank's shard.
  int64_t shard_offset() const { return shard_numel_ * rank_; }
  // Elements of this rank's shard that are not padding: they come first in the shard.
  int64_t valid_shard_numel() const;
  // The pieces of parameters in this rank's shard, in flat order.
  const std::vector<ShardSlice>& shard_slices() const { return shard_slices_; }
  // True when the module's parameters are the master shard itself (W = 1, fp32).
  bool aliases_master() const { return aliases_master_; }

  // fp32 [shard_numel()]. Whoever writes it (optimizer, loader) keeps the padding zero and
  // calls reshard() first when not aliases_master(), so no stale unsharded copy remains.
  torch::Tensor& master_shard() { return master_; }
  // fp32 [shard_numel()]; zero until the first reduce after zero_grad().
  torch::Tensor& grad_shard() { return grad_; }
  bool has_grad() const { return has_grad_; }

  // Starts gathering the full parameters (no-op when unsharded or already in flight).
  void unshard_async();
  // Waits for a gather started by unshard_async (no-op otherwise).
  void wait_unshard();
  void unshard() {
    unshard_async();
    wait_unshard();
  }
  // Frees the unsharded buffer (waits for a gather in flight first). No-op when it aliases the
  // master shard.
  void reshard();
  // Full parameters available (gathered and waited for).
  bool is_unsharded() const { return state_ == State::kUnsharded; }
  // The buffer the module's parameters view: param_dtype [padded_numel()].
  const torch::Tensor& unsharded_buffer() const { return unsharded_; }

  // grads[i]: the gradient of entries()[i] over this rank's data (undefined: zero). Starts the
  // reduce-scatter (average over ranks) into the gradient shard. One at a time per unit.
  void reduce_grad_async(const std::vector<torch::Tensor>& grads);
  // Finishes it: accumulates into grad_shard() and zeroes the padding. No-op if none pending.
  void wait_reduce_grad();
  bool reduce_pending() const { return reduce_pending_; }
  // Forgets the accumulated gradient (zero_grad of the optimizer).
  void zero_grad();

  // Moves the master and gradient shards to host memory and frees their device memory (CUDA);
  // a no-op on the CPU. Requires the unit resharded and no reduce pending.
  void sleep();
  void wake_up();

 private:
  enum class State { kSharded, kGathering, kUnsharded };

  std::string name_;
  std::vector<FlatParamEntry> entries_;
  std::vector<ShardSlice> shard_slices_;
  std::shared_ptr<comm::Communicator> comm_;
  MixedPrecisionPolicy policy_;
  int rank_ = 0;
  int world_size_ = 1;
  int64_t numel_ = 0;
  int64_t shard_numel_ = 0;
  bool aliases_master_ = false;

  torch::Tensor master_;  // fp32 [shard]
  torch::Tensor grad_;    // fp32 [shard]
  bool has_grad_ = false;
  torch::Tensor unsharded_;  // param_dtype [padded]; storage released while sharded
  State state_ = State::kSharded;
  torch::Tensor gather_input_;  // this rank's shard in param_dtype, alive while gathering
  comm::WorkPtr gather_work_;

  bool reduce_pending_ = false;
  torch::Tensor reduce_input_;   // fp32 [padded], alive while reducing
  torch::Tensor reduce_output_;  // grad_ itself, or a scratch shard when accumulating
  comm::WorkPtr reduce_work_;

  // Host copies while asleep (CUDA only).
  bool asleep_ = false;
  torch::Tensor offloaded_master_;
  torch::Tensor offloaded_grad_;
};

}  // namespace ooze::fsdp
