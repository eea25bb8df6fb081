#include "fsdp/sharded_adamw.h"

#include <cmath>
#include <string>

#include "core/error.h"
#include "fsdp/storage.h"

namespace ooze::fsdp {

void ShardedAdamWOptions::validate() const {
  const auto require = [](bool ok, const std::string& what) {
    if (!ok) throw ConfigError("AdamW: " + what);
  };
  require(beta1 >= 0.0 && beta1 < 1.0,
          "--adam-beta1 must be in [0, 1), got " + std::to_string(beta1));
  require(beta2 >= 0.0 && beta2 < 1.0,
          "--adam-beta2 must be in [0, 1), got " + std::to_string(beta2));
  require(eps >= 0.0, "--adam-eps must be >= 0, got " + std::to_string(eps));
  require(weight_decay >= 0.0, "--weight-decay must be >= 0, got " + std::to_string(weight_decay));
}

const OptionFields<ShardedAdamWOptions>& ShardedAdamWOptions::fields() {
  using O = ShardedAdamWOptions;
  static const OptionFields<O> fields = [] {
    OptionFields<O> f;
    f.section("optimizer");
    f.add("weight_decay", &O::weight_decay, "Decoupled weight decay of AdamW.").min(0);
    f.add("adam_beta1", &O::beta1, "AdamW beta1.").min(0).less_than(1);
    f.add("adam_beta2", &O::beta2, "AdamW beta2.").min(0).less_than(1);
    f.add("adam_eps", &O::eps, "AdamW epsilon.").min(0);
    return f;
  }();
  return fields;
}

ShardedAdamW::ShardedAdamW(FullyShardedModule& model, ShardedAdamWOptions options)
    : model_(model), options_(options) {
  options_.validate();
  for (size_t u = 0; u < model_.num_units(); ++u) {
    const torch::Tensor& master = model_.unit(u).master_shard();
    exp_avg_.push_back(torch::zeros_like(master));
    exp_avg_sq_.push_back(torch::zeros_like(master));
    steps_.push_back(0);
  }
}

void ShardedAdamW::step(double lr) {
  if (asleep_) throw Error("ShardedAdamW::step: the optimizer is asleep; call wake_up() first");
  if (!std::isfinite(lr) || lr < 0.0) {
    throw Error("ShardedAdamW::step: learning rate must be finite and >= 0, got " +
                std::to_string(lr));
  }
  torch::NoGradGuard no_grad;
  const double beta1 = options_.beta1, beta2 = options_.beta2;
  for (size_t u = 0; u < model_.num_units(); ++u) {
    FlatParam& flat = model_.unit(u);
    if (flat.reduce_pending()) {
      throw Error("ShardedAdamW::step: unit '" + flat.name() +
                  "' still has a gradient reduce-scatter in flight; call finish_backward() "
                  "(FsdpTransformer::backward does) before stepping");
    }
    if (!flat.has_grad()) continue;
    flat.reshard();  // the gathered copy would be stale after the update
    steps_[u] += 1;
    const double step = static_cast<double>(steps_[u]);
    const double bias_correction1 = 1 - std::pow(beta1, step);
    const double bias_correction2 = 1 - std::pow(beta2, step);
    const double step_size = lr / bias_correction1;
    torch::Tensor& master = flat.master_shard();
    torch::Tensor& grad = flat.grad_shard();
    for (const ShardSlice& slice : flat.shard_slices()) {
      torch::Tensor p = master.narrow(0, slice.shard_offset, slice.numel);
      torch::Tensor g = grad.narrow(0, slice.shard_offset, slice.numel);
      torch::Tensor m = exp_avg_[u].narrow(0, slice.shard_offset, slice.numel);
      torch::Tensor v = exp_avg_sq_[u].narrow(0, slice.shard_offset, slice.numel);
      if (options_.weight_decay != 0) p.mul_(1 - lr * options_.weight_decay);
      m.mul_(beta1).add_(g, 1 - beta1);
      v.mul_(beta2).addcmul_(g, g, 1 - beta2);
      torch::Tensor denom = (v.sqrt() / std::sqrt(bias_correction2)).add_(options_.eps);
      p.addcdiv_(m, denom, -step_size);
    }
    const int64_t valid = flat.valid_shard_numel();
    master.narrow(0, valid, flat.shard_numel() - valid).zero_();
  }
}

size_t ShardedAdamW::state_bytes() const {
  size_t total = 0;
  for (size_t u = 0; u < exp_avg_.size(); ++u) {
    total += storage_bytes(exp_avg_[u]) + storage_bytes(exp_avg_sq_[u]);
  }
  return total;
}

void ShardedAdamW::sleep() {
  if (asleep_ || exp_avg_.empty() || exp_avg_.front().device().is_cpu()) return;
  const auto host = exp_avg_.front().options().device(torch::kCPU).pinned_memory(true);
  offloaded_.clear();
  for (std::vector<torch::Tensor>* states : {&exp_avg_, &exp_avg_sq_}) {
    for (torch::Tensor& state : *states) {
      torch::Tensor copy = torch::empty(state.sizes(), host);
      copy.copy_(state);
      offloaded_.push_back(copy);
      release_storage(state);
    }
  }
  asleep_ = true;
}

void ShardedAdamW::wake_up() {
  if (!asleep_) return;
  size_t k = 0;
  for (std::vector<torch::Tensor>* states : {&exp_avg_, &exp_avg_sq_}) {
    for (torch::Tensor& state : *states) {
      allocate_storage(state, offloaded_[k].nbytes());
      state.copy_(offloaded_[k]);
      ++k;
    }
  }
  offloaded_.clear();
  asleep_ = false;
}

}  // namespace ooze::fsdp
