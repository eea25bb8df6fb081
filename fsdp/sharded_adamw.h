// AdamW over the fp32 master shards of a FullyShardedModule. Each rank updates only its own
// shards with its own gradient shards, so the step never communicates.
//
// The arithmetic is that of LibTorch's torch::optim::AdamW (1.13 and 2.x), operation for
// operation, applied to each parameter's piece of the shard (ShardSlice) so that it runs the
// same kernels over the same element runs as AdamW over the unsharded parameter:
//
//   p *= 1 - lr * weight_decay                    (decoupled decay, when weight_decay != 0)
//   m  = beta1 * m + (1 - beta1) * g
//   v  = beta2 * v + (1 - beta2) * g * g
//   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
//
// with t counting this unit's steps. Weight decay applies to every parameter, as it does in
// torch::optim::AdamW. A unit with no gradient since zero_grad() is skipped (as AdamW skips a
// parameter whose .grad is undefined). Padding stays zero.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/option_fields.h"
#include "fsdp/fully_shard.h"

namespace ooze::fsdp {

// Megatron / Slime flags: --adam-beta1, --adam-beta2, --adam-eps, --weight-decay.
struct ShardedAdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;

  // Throws ooze::ConfigError naming the flag of a value out of range.
  void validate() const;
  // The flags above ("optimizer" section).
  static const OptionFields<ShardedAdamWOptions>& fields();
};

class ShardedAdamW {
 public:
  // State (exp_avg, exp_avg_sq: fp32, shard-sized, zero) is allocated for every unit now.
  ShardedAdamW(FullyShardedModule& model, ShardedAdamWOptions options);

  // One update of every unit that has a gradient, at learning rate `lr`. Call after
  // finish_backward() (gradient shards complete); reshards gathered units first so that no
  // stale gathered copy of the old weights survives.
  void step(double lr);

  const ShardedAdamWOptions& options() const { return options_; }
  // Per unit, in FullyShardedModule unit order.
  torch::Tensor& exp_avg(size_t unit) { return exp_avg_.at(unit); }
  torch::Tensor& exp_avg_sq(size_t unit) { return exp_avg_sq_.at(unit); }
  int64_t steps(size_t unit) const { return steps_.at(unit); }
  void set_steps(size_t unit, int64_t steps) { steps_.at(unit) = steps; }

  // Bytes held by the optimizer state.
  size_t state_bytes() const;

  // Move the state to host memory and back (CUDA); no-ops on the CPU.
  void sleep();
  void wake_up();

 private:
  FullyShardedModule& model_;
  ShardedAdamWOptions options_;
  std::vector<torch::Tensor> exp_avg_;
  std::vector<torch::Tensor> exp_avg_sq_;
  std::vector<int64_t> steps_;
  // Host copies while asleep (CUDA only).
  bool asleep_ = false;
  std::vector<torch::Tensor> offloaded_;
};

}  // namespace ooze::fsdp
