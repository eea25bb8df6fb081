#include "fsdp/flat_param.h"

#include <algorithm>
#include <set>

#include "core/error.h"
#include "fsdp/storage.h"

namespace ooze::fsdp {
namespace {

std::string describe_shape(const torch::Tensor& tensor) { return c10::str(tensor.sizes()); }

}  // namespace

FlatParam::FlatParam(std::string name,
                     std::vector<std::pair<std::string, torch::Tensor>> parameters,
                     std::shared_ptr<comm::Communicator> comm, MixedPrecisionPolicy policy)
    : name_(std::move(name)), comm_(std::move(comm)), policy_(policy) {
  policy_.validate();
  if (parameters.empty()) {
    throw Error("fsdp unit '" + name_ + "' has no parameters; every unit needs at least one");
  }
  rank_ = comm_ ? comm_->rank() : 0;
  world_size_ = comm_ ? comm_->size() : 1;

  const torch::Device device = parameters.front().second.device();
  std::set<const c10::TensorImpl*> seen;
  for (auto& [param_name, tensor] : parameters) {
    if (!tensor.defined()) {
      throw Error("fsdp unit '" + name_ + "': parameter '" + param_name + "' is undefined");
    }
    if (!seen.insert(tensor.unsafeGetTensorImpl()).second) {
      throw Error("fsdp unit '" + name_ + "': parameter '" + param_name +
                  "' is listed twice (a shared tensor must belong to one unit, once)");
    }
    if (!tensor.is_floating_point()) {
      throw Error("fsdp unit '" + name_ + "': parameter '" + param_name + "' has dtype " +
                  c10::toString(tensor.scalar_type()) + "; only floating parameters are sharded");
    }
    if (tensor.device() != device) {
      throw Error("fsdp unit '" + name_ + "': parameter '" + param_name + "' is on " +
                  tensor.device().str() + " but '" + parameters.front().first + "' is on " +
                  device.str() + "; move the module to one device before sharding it");
    }
    FlatParamEntry entry;
    entry.name = param_name;
    entry.parameter = tensor;
    entry.shape = tensor.sizes().vec();
    entry.offset = numel_;
    entry.numel = tensor.numel();
    numel_ += entry.numel;
    entries_.push_back(std::move(entry));
  }
  shard_numel_ = (numel_ + world_size_ - 1) / world_size_;

  const int64_t shard_begin = shard_offset(), shard_end = shard_begin + shard_numel_;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const int64_t begin = std::max(entries_[i].offset, shard_begin);
    const int64_t end = std::min(entries_[i].offset + entries_[i].numel, shard_end);
    if (begin >= end) continue;
    shard_slices_.push_back(
        ShardSlice{i, begin - entries_[i].offset, begin - shard_begin, end - begin});
  }

  torch::NoGradGuard no_grad;
  const auto fp32 = torch::TensorOptions().dtype(torch::kFloat).device(device);
  master_ = torch::zeros({shard_numel_}, fp32);
  grad_ = torch::zeros({shard_numel_}, fp32);
  for (const ShardSlice& slice : shard_slices_) {
    const torch::Tensor source = entries_[slice.entry].parameter.detach().reshape({-1});
    master_.narrow(0, slice.shard_offset, slice.numel)
        .copy_(source.narrow(0, slice.param_offset, slice.numel));
  }

  aliases_master_ = world_size_ == 1 && policy_.param_dtype == torch::kFloat;
  unsharded_ =
      aliases_master_ ? master_ : torch::empty({padded_numel()}, fp32.dtype(policy_.param_dtype));
  // From here on the module's parameters are views of the unsharded buffer; their old storage
  // is dropped (freed unless the caller holds another reference to it).
  for (FlatParamEntry& entry : entries_) {
    entry.parameter.set_data(unsharded_.narrow(0, entry.offset, entry.numel).view(entry.shape));
  }
  if (aliases_master_) {
    state_ = State::kUnsharded;
  } else {
    release_storage(unsharded_);
    state_ = State::kSharded;
  }
}

int64_t FlatParam::valid_shard_numel() const {
  return std::clamp<int64_t>(numel_ - shard_offset(), 0, shard_numel_);
}

void FlatParam::unshard_async() {
  if (state_ != State::kSharded) return;
  if (asleep_) {
    throw Error("fsdp unit '" + name_ + "' is asleep; call wake_up() before running the model");
  }
  allocate_storage(unsharded_, static_cast<size_t>(padded_numel()) * unsharded_.element_size());
  torch::NoGradGuard no_grad;
  if (world_size_ == 1) {  // bf16 compute on one rank: a cast, no communication
    unsharded_.copy_(master_);
    state_ = State::kUnsharded;
    return;
  }
  gather_input_ = policy_.param_dtype == torch::kFloat ? master_ : master_.to(policy_.param_dtype);
  gather_work_ = comm_->all_gather_async(unsharded_, gather_input_);
  state_ = State::kGathering;
}

void FlatParam::wait_unshard() {
  if (state_ != State::kGathering) return;
  gather_work_->wait();
  gather_work_.reset();
  gather_input_ = torch::Tensor();
  state_ = State::kUnsharded;
}

void FlatParam::reshard() {
  if (aliases_master_) return;
  if (state_ == State::kGathering) wait_unshard();
  if (state_ == State::kUnsharded) {
    release_storage(unsharded_);
    state_ = State::kSharded;
  }
}

void FlatParam::reduce_grad_async(const std::vector<torch::Tensor>& grads) {
  if (grads.size() != entries_.size()) {
    throw Error("fsdp unit '" + name_ + "': reduce_grad_async got " + std::to_string(grads.size()) +
                " gradients for " + std::to_string(entries_.size()) + " parameters");
  }
  if (reduce_pending_) {
    throw Error("fsdp unit '" + name_ +
                "': a gradient reduce-scatter is already in flight; wait for it first");
  }
  for (size_t i = 0; i < grads.size(); ++i) {
    if (grads[i].defined() && grads[i].numel() != entries_[i].numel) {
      throw Error("fsdp unit '" + name_ + "': gradient of '" + entries_[i].name + "' has shape " +
                  describe_shape(grads[i]) + ", expected " +
                  c10::str(c10::IntArrayRef(entries_[i].shape)));
    }
  }
  torch::NoGradGuard no_grad;
  if (world_size_ == 1) {
    // The shard is the whole vector: accumulate in place, as autograd accumulates .grad.
    for (size_t i = 0; i < grads.size(); ++i) {
      torch::Tensor target = grad_.narrow(0, entries_[i].offset, entries_[i].numel);
      if (!has_grad_) {
        if (grads[i].defined()) {
          target.copy_(grads[i].reshape({-1}));
        } else {
          target.zero_();
        }
      } else if (grads[i].defined()) {
        target.add_(grads[i].reshape({-1}));
      }
    }
    has_grad_ = true;
    return;
  }
  reduce_input_ = torch::empty({padded_numel()}, master_.options().dtype(policy_.reduce_dtype));
  for (size_t i = 0; i < grads.size(); ++i) {
    torch::Tensor target = reduce_input_.narrow(0, entries_[i].offset, entries_[i].numel);
    if (grads[i].defined()) {
      target.copy_(grads[i].reshape({-1}));
    } else {
      target.zero_();
    }
  }
  reduce_input_.narrow(0, numel_, padded_numel() - numel_).zero_();
  // The first gradient since zero_grad lands in the shard directly; later ones are added.
  reduce_output_ = has_grad_ ? torch::empty_like(grad_) : grad_;
  reduce_work_ = comm_->reduce_scatter_async(reduce_output_, reduce_input_, comm::ReduceOp::AVG);
  reduce_pending_ = true;
}

void FlatParam::wait_reduce_grad() {
  if (!reduce_pending_) return;
  reduce_work_->wait();
  reduce_work_.reset();
  reduce_input_ = torch::Tensor();
  torch::NoGradGuard no_grad;
  if (has_grad_) grad_.add_(reduce_output_);
  reduce_output_ = torch::Tensor();
  const int64_t valid = valid_shard_numel();
  grad_.narrow(0, valid, shard_numel_ - valid).zero_();
  has_grad_ = true;
  reduce_pending_ = false;
}

void FlatParam::zero_grad() {
  if (reduce_pending_) {
    throw Error("fsdp unit '" + name_ +
                "': zero_grad while a gradient reduce-scatter is in flight; finish the backward "
                "pass (FullyShardedModule::finish_backward) first");
  }
  torch::NoGradGuard no_grad;
  grad_.zero_();
  has_grad_ = false;
}

void FlatParam::sleep() {
  if (asleep_ || master_.device().is_cpu()) return;
  if (reduce_pending_ || (!aliases_master_ && state_ != State::kSharded)) {
    throw Error("fsdp unit '" + name_ +
                "': sleep() while parameters are gathered or gradients are in flight; finish "
                "the step first");
  }
  const auto host = master_.options().device(torch::kCPU).pinned_memory(true);
  offloaded_master_ = torch::empty(master_.sizes(), host);
  offloaded_master_.copy_(master_);
  offloaded_grad_ = torch::empty(grad_.sizes(), host);
  offloaded_grad_.copy_(grad_);
  release_storage(master_);  // with aliases_master_, the module's parameters go with it
  release_storage(grad_);
  asleep_ = true;
}

void FlatParam::wake_up() {
  if (!asleep_) return;
  allocate_storage(master_, offloaded_master_.nbytes());
  master_.copy_(offloaded_master_);
  allocate_storage(grad_, offloaded_grad_.nbytes());
  grad_.copy_(offloaded_grad_);
  offloaded_master_ = torch::Tensor();
  offloaded_grad_ = torch::Tensor();
  asleep_ = false;
}

}  // namespace ooze::fsdp
