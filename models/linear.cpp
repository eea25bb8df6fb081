#include "models/linear.h"

#include "core/error.h"
#include "models/few_rows_linear.h"

namespace ooze::models {

LinearImpl::LinearImpl(int64_t in_features, int64_t out_features, bool with_bias,
                       c10::ScalarType dtype) {
  weight = register_parameter("weight", torch::empty({out_features, in_features}, dtype));
  if (with_bias) bias = register_parameter("bias", torch::empty({out_features}, dtype));
}

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight,
                     const torch::Tensor& bias) {
  // One row (a decode step of one sequence) on the CPU: OpenBLAS's gemm reads the weight at a
  // fifth of the bandwidth its gemv reaches on one row (4.3 against 22.5 GB/s for 3072 x 1024,
  // one thread), and reading the weight is all such a step costs. From two rows on, gemm.
  if (x.numel() == weight.size(1) && x.device().is_cpu() && weight.dim() == 2) {
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = weight.size(0);
    const torch::Tensor row = x.reshape({-1});
    const torch::Tensor y =
        bias.defined() ? torch::addmv(bias, weight, row) : torch::mv(weight, row);
    return y.view(shape);
  }
  if (few_rows_linear_applies(x, weight, bias)) return few_rows_linear(x, weight, bias);
  return bias.defined() ? torch::linear(x, weight, bias) : torch::linear(x, weight);
}

torch::Tensor LinearImpl::forward(const torch::Tensor& x) {
  torch::Tensor y = linear(x, weight, bias);
  if (!lora_A || !adapter_enabled_) return y;
  const bool training = adapter_dropout_ > 0 && torch::GradMode::is_enabled();
  const torch::Tensor adapter_input = training ? torch::dropout(x, adapter_dropout_, true) : x;
  return y + adapter_scaling_ * lora_B->forward(lora_A->forward(adapter_input));
}

void LinearImpl::add_adapter(int64_t rank, double alpha, double dropout, c10::ScalarType dtype) {
  if (lora_A) throw Error("this linear layer already has a LoRA adapter");
  if (rank < 1)
    throw Error("a LoRA adapter needs a rank of at least 1, got " + std::to_string(rank));
  lora_A =
      register_module("lora_A", std::make_shared<LinearImpl>(weight.size(1), rank, false, dtype));
  lora_B =
      register_module("lora_B", std::make_shared<LinearImpl>(rank, weight.size(0), false, dtype));
  adapter_scaling_ = alpha / static_cast<double>(rank);
  adapter_dropout_ = dropout;
}

}  // namespace ooze::models
