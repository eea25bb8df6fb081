#include "models/mlp.h"

namespace ooze::models {

MLPImpl::MLPImpl(int64_t hidden_size, int64_t intermediate_size, c10::ScalarType dtype) {
  gate_proj = register_module("gate_proj", Linear(hidden_size, intermediate_size, false, dtype));
  up_proj = register_module("up_proj", Linear(hidden_size, intermediate_size, false, dtype));
  down_proj = register_module("down_proj", Linear(intermediate_size, hidden_size, false, dtype));
}

torch::Tensor MLPImpl::forward(const torch::Tensor& x) {
  return down_proj->forward(torch::silu(gate_proj->forward(x)) * up_proj->forward(x));
}

}  // namespace ooze::models
