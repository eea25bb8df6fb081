#include "models/activation_checkpoint.h"

#include <utility>

#include "core/error.h"

namespace ooze {
namespace models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// AutogradContext::saved_data holds IValues; a capsule carries the block into backward.
struct BlockHolder : torch::CustomClassHolder {
  explicit BlockHolder(CheckpointedBlock b) : block(std::move(b)) {}
  CheckpointedBlock block;
};

// Inputs, in autograd edge order: input, then each parameter. The block is not a variable.
class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const CheckpointedBlock& block,
                            const at::Tensor& input, at::TensorList parameters) {
    ctx->saved_data["block"] = at::IValue::make_capsule(c10::make_intrusive<BlockHolder>(block));
    // Saving the parameters too lets autograd's version check catch one modified in place
    // (an optimizer step) between forward and backward, which would make the recompute wrong.
    variable_list to_save{input};
    to_save.insert(to_save.end(), parameters.begin(), parameters.end());
    ctx->save_for_backward(to_save);
    return block(input);  // Function::apply runs forward with grad disabled
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const auto holder =
        c10::static_intrusive_pointer_cast<BlockHolder>(ctx->saved_data["block"].toCapsule());
    const size_t num_parameters = saved.size() - 1;
    variable_list grads(2 + num_parameters);  // block, input, parameters...

    // Recompute from a detached input, so the new graph ends at this node.
    at::Tensor input = saved[0].detach();
    const bool need_input = ctx->needs_input_grad(0);
    if (need_input) input.requires_grad_(true);
    std::vector<at::Tensor> wrt;
    std::vector<size_t> grad_slot;  // where each of wrt's gradients goes in `grads`
    if (need_input) {
      wrt.push_back(input);
      grad_slot.push_back(1);
    }
    for (size_t i = 0; i < num_parameters; ++i) {
      if (ctx->needs_input_grad(1 + i) && saved[1 + i].requires_grad()) {
        wrt.push_back(saved[1 + i]);
        grad_slot.push_back(2 + i);
      }
    }
    if (wrt.empty()) return grads;

    at::Tensor output;
    {
      torch::AutoGradMode enable_grad(true);
      output = holder->block(input);
    }
    if (!output.requires_grad()) return grads;  // the block used nothing differentiable
    const variable_list computed =
        torch::autograd::grad({output}, wrt, {grad_outputs[0]}, /*retain_graph=*/false,
                              /*create_graph=*/false, /*allow_unused=*/true);
    for (size_t k = 0; k < computed.size(); ++k) grads[grad_slot[k]] = computed[k];
    return grads;
  }
};

}  // namespace

at::Tensor checkpointed(const CheckpointedBlock& block, const at::Tensor& input,
                        const std::vector<at::Tensor>& parameters) {
  if (!block) throw Error("checkpointed: the block function is empty");
  if (!input.defined()) throw Error("checkpointed: the input tensor is undefined");
  bool any_requires_grad = input.requires_grad();
  for (const at::Tensor& p : parameters) {
    if (!p.defined()) throw Error("checkpointed: parameters contains an undefined tensor");
    any_requires_grad = any_requires_grad || p.requires_grad();
  }
  if (!torch::GradMode::is_enabled() || !any_requires_grad) return block(input);
  // TensorList (not std::vector) so that apply registers each parameter as an input variable.
  return CheckpointFunction::apply(block, input, at::TensorList(parameters));
}

}  // namespace models
}  // namespace ooze
