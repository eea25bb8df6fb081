#include "fsdp/context_parallel_gather.h"

#include <torch/torch.h>

#include <string>
#include <vector>

#include "core/error.h"

namespace ooze::fsdp {
namespace {

// all_gather in rank order; backward keeps this rank's slice of the gradient (see the header:
// every rank differentiates the same function of the gathered values).
class GatherOverGroup : public torch::autograd::Function<GatherOverGroup> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& local,
                               comm::Communicator* group) {
    ctx->saved_data["rank"] = static_cast<int64_t>(group->rank());
    ctx->saved_data["rows"] = local.size(0);
    std::vector<int64_t> shape = local.sizes().vec();
    shape[0] *= group->size();
    torch::Tensor gathered = torch::empty(shape, local.options());
    group->all_gather(gathered, local.contiguous());
    return gathered;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const int64_t rank = ctx->saved_data["rank"].toInt();
    const int64_t rows = ctx->saved_data["rows"].toInt();
    return {grads[0].narrow(0, rank * rows, rows), torch::Tensor()};
  }
};

}  // namespace

at::Tensor gather_context_parallel(const at::Tensor& local,
                                   const models::ContextParallelSplit& split,
                                   const std::shared_ptr<comm::Communicator>& group) {
  if (!group || group->size() != split.cp_size || group->rank() != split.cp_rank) {
    throw Error("gather_context_parallel: the split is for CP rank " +
                std::to_string(split.cp_rank) + " of " + std::to_string(split.cp_size) +
                (group ? ", the group's rank is " + std::to_string(group->rank()) + " of " +
                             std::to_string(group->size())
                       : std::string(", and no group was given")));
  }
  if (!local.defined() || local.dim() < 1 || local.size(0) != split.num_local_tokens()) {
    throw Error("gather_context_parallel: expected " + std::to_string(split.num_local_tokens()) +
                " local rows, got " +
                (local.defined() ? "shape " + c10::str(local.sizes()) : "an undefined tensor"));
  }
  return split.unshard(GatherOverGroup::apply(local, group.get()));
}

}  // namespace ooze::fsdp
