#include "fsdp/grad_clip.h"

#include <cmath>

#include "core/error.h"

namespace ooze::fsdp {

GradNormResult clip_grad_norm(FullyShardedModule& model, double max_norm) {
  if (std::isnan(max_norm)) throw Error("clip_grad_norm: max_norm is NaN");
  torch::NoGradGuard no_grad;
  torch::Tensor sum_of_squares;
  for (size_t u = 0; u < model.num_units(); ++u) {
    FlatParam& flat = model.unit(u);
    if (flat.reduce_pending()) {
      throw Error("clip_grad_norm: unit '" + flat.name() +
                  "' still has a gradient reduce-scatter in flight; call finish_backward() first");
    }
    const torch::Tensor valid = flat.grad_shard().narrow(0, 0, flat.valid_shard_numel());
    const torch::Tensor squares = valid.to(torch::kDouble).square().sum();
    sum_of_squares = sum_of_squares.defined() ? sum_of_squares + squares : squares;
  }
  sum_of_squares = sum_of_squares.reshape({1}).contiguous();
  if (model.world_size() > 1) model.communicator()->all_reduce(sum_of_squares, comm::ReduceOp::SUM);

  GradNormResult result;
  result.norm = std::sqrt(sum_of_squares.item<double>());
  result.finite = std::isfinite(result.norm);
  if (!result.finite || max_norm <= 0) return result;
  const double coef = max_norm / (result.norm + 1e-6);
  if (coef < 1.0) {
    result.clip_coef = coef;
    for (size_t u = 0; u < model.num_units(); ++u) model.unit(u).grad_shard().mul_(coef);
  }
  return result;
}

}  // namespace ooze::fsdp
