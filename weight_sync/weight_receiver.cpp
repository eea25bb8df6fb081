#include "weight_sync/weight_receiver.h"

#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <algorithm>
#include <limits>

#include "actors/kv_store.h"
#include "actors/runtime.h"
#include "comm/comm_error.h"
#include "core/error.h"

namespace ooze::weight_sync {

void WeightReceiver::open_shared_buffers(const SharedWeightBuffers& buffers) {
  std::lock_guard<std::mutex> lock(mutex_);
  shared_tensors_.clear();
  shared_.clear();
  cuda_shared_.clear();
  const at::Device device(sink_.weight_device());
  if (buffers.cuda_ipc && !device.is_cuda()) {
    throw ConfigError("the trainer hands weights over in GPU memory, but this engine runs on " +
                      device.str() + ": a colocated engine computes on its trainer rank's GPU");
  }
  for (const std::string& handle : buffers.handles) {
    if (buffers.cuda_ipc) {
      cuda_shared_.push_back(CudaIpcBuffer::open(handle, buffers.nbytes, device.index()));
      shared_tensors_.push_back(cuda_shared_.back().as_tensor());
    } else {
      shared_.push_back(SharedMemorySegment::open(handle, buffers.nbytes));
      shared_tensors_.push_back(shared_.back().as_tensor());
    }
  }
}

void WeightReceiver::load_shared_bucket(int slot, const BucketManifest& manifest) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (slot < 0 || slot >= static_cast<int>(shared_tensors_.size())) {
    throw Error("weight sync bucket " + std::to_string(manifest.index) + " names shared buffer " +
                std::to_string(slot) + ", but this engine has " +
                std::to_string(shared_tensors_.size()) + " mapped (open_shared_buffers first)");
  }
  const at::Tensor& buffer = shared_tensors_[static_cast<size_t>(slot)];
  if (manifest.nbytes > buffer.numel()) {
    throw FormatError("weight sync bucket " + std::to_string(manifest.index) + " has " +
                      std::to_string(manifest.nbytes) + " bytes; shared buffer " +
                      std::to_string(slot) + " only " + std::to_string(buffer.numel()));
  }
  sink_.load_weight_bucket(unpack_bucket(manifest, buffer.narrow(0, 0, manifest.nbytes)));
  // The copies run on the engine's stream; the trainer reuses the buffer once this returns.
  if (buffer.is_cuda()) torch::cuda::synchronize(buffer.device().index());
}

void WeightReceiver::close_shared_buffers() {
  std::lock_guard<std::mutex> lock(mutex_);
  shared_tensors_.clear();
  shared_.clear();
  cuda_shared_.clear();
}

SharedParameters WeightReceiver::share_parameters() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!shared_parameters_.segment.empty()) {
    SharedParameters shared = shared_parameters_;
    shared.syncing_version = sink_.syncing_version();
    return shared;
  }
  SharedParameters shared;
  shared.host = actors::node_address();
  if (at::Device(sink_.weight_device()).is_cuda()) return shared;
  const std::vector<std::pair<std::string, at::Tensor>> parameters = sink_.parameters();
  std::vector<TensorSpec> specs;
  for (const auto& [name, tensor] : parameters) {
    specs.push_back(TensorSpec{name, tensor.scalar_type(), tensor.sizes().vec()});
  }
  // One bucket holds them all: the layout every trainer rank writes by.
  const std::vector<BucketManifest> plan = plan_buckets(specs, std::numeric_limits<int64_t>::max());
  if (!plan.empty()) shared.layout = plan.front();
  // Unnamed: the memory leaves with the engine, however it ends.
  parameter_segment_ = SharedMemorySegment::create_unnamed(shared.layout.nbytes);
  sink_.move_parameters(unpack_bucket(shared.layout, parameter_segment_.as_tensor()));
  shared.segment = parameter_segment_.name();
  shared_parameters_ = shared;
  shared.syncing_version = sink_.syncing_version();
  return shared;
}

void WeightReceiver::shared_parameters_written() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (shared_parameters_.segment.empty()) {
    throw Error(
        "shared_parameters_written: this engine shares no parameters "
        "(share_parameters first)");
  }
  std::vector<std::string> names;
  for (const BucketEntry& entry : shared_parameters_.layout.entries) names.push_back(entry.name);
  sink_.parameters_written(names);
}

void WeightReceiver::join_broadcast_group(const BroadcastGroupSpec& spec) {
  std::lock_guard<std::mutex> lock(mutex_);
  group_.reset();
  comm::ProcessGroupOptions options = spec.options;
  options.host = actors::node_address();
  auto store = std::make_shared<comm::PrefixStore>(spec.name, std::make_shared<actors::KvStore>());
  group_ = comm::init_process_group(store, spec.rank, spec.world_size, spec.name,
                                    at::Device(sink_.weight_device()), options);
  group_name_ = spec.name;
}

void WeightReceiver::leave_broadcast_group() {
  std::lock_guard<std::mutex> lock(mutex_);
  group_.reset();
}

at::Tensor WeightReceiver::broadcast_buffer(int which, int64_t nbytes) {
  at::Tensor& buffer = broadcast_buffers_[which];
  if (!buffer.defined() || buffer.numel() < nbytes) {
    buffer = at::Tensor();  // the old one goes first
    // On the CPU in a segment, which a trainer on this host fills at memory speed
    // (comm/same_host_collectives.h).
    buffer = empty_for_same_host_peers(nbytes, sink_.weight_device());
  }
  return buffer.narrow(0, 0, nbytes);
}

int64_t WeightReceiver::receive_broadcast(const std::vector<BucketManifest>& manifests) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!group_) {
    throw Error(
        "receive_broadcast: this engine is in no weight sync broadcast group "
        "(join_broadcast_group first, or the last one failed)");
  }
  int64_t largest = 0, received = 0;
  for (const auto& manifest : manifests) largest = std::max(largest, manifest.nbytes);
  auto buffer_of = [&](size_t k) {
    return broadcast_buffer(static_cast<int>(k % 2), largest).narrow(0, 0, manifests[k].nbytes);
  };
  comm::WorkPtr pending;
  if (!manifests.empty()) pending = group_->broadcast_async(buffer_of(0), 0);
  size_t k = 0;
  try {
    for (; k < manifests.size(); ++k) {
      pending->wait();
      pending.reset();
      // Bucket k+1 arrives in the other buffer while bucket k is copied into the weights.
      if (k + 1 < manifests.size()) pending = group_->broadcast_async(buffer_of(k + 1), 0);
      sink_.load_weight_bucket(unpack_bucket(manifests[k], buffer_of(k)));
      received += manifests[k].nbytes;
    }
  } catch (const std::exception& e) {
    const std::string reason = "receiving weight sync bucket " + std::to_string(k) + " of " +
                               std::to_string(manifests.size()) +
                               " from trainer rank 0 in group '" + group_name_ +
                               "' failed: " + e.what();
    if (pending) {
      try {
        pending->wait();  // the root sends it anyway; bounded by the group's timeout
      } catch (const std::exception&) {
      }
    }
    group_.reset();  // out of step with the root: the trainer forms a new group
    sink_.abort_weight_sync(reason);
    throw comm::CommError(reason);
  }
  // On a GPU the buffers would keep device memory from generation until the next sync; on the
  // CPU they stay, so the next sync receives into pages already mapped.
  if (at::Device(sink_.weight_device()).is_cuda()) {
    broadcast_buffers_[0] = at::Tensor();
    broadcast_buffers_[1] = at::Tensor();
  }
  return received;
}

}  // namespace ooze::weight_sync
