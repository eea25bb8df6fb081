// y = x W^T (+ b), with parameters named "weight" and "bias" like torch.nn.Linear (so Hugging
// Face names map one to one), created uninitialised in the requested dtype: models are either
// loaded from a checkpoint or filled by TransformerModel::init_weights, so a default init would
// only cost time (minutes for billions of parameters).
//
// A LoRA adapter (models/lora.h) adds a low-rank update beside the frozen weight, as PEFT does:
//   y = x W^T (+ b) + scaling * B(A(dropout(x))),   A: [r, in], B: [out, r], scaling = alpha / r
// A and B are the child modules "lora_A" and "lora_B" (parameters "lora_A.weight", PEFT's names).
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace ooze::models {

// x W^T (+ bias), as torch::linear; a single row goes through a matrix-vector product (why: in
// linear.cpp). `bias` may be undefined.
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight,
                     const torch::Tensor& bias = {});

class LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(int64_t in_features, int64_t out_features, bool with_bias, c10::ScalarType dtype);

  // x: [..., in_features] -> [..., out_features].
  torch::Tensor forward(const torch::Tensor& x);

  // Registers lora_A [rank, in] and lora_B [out, rank] (uninitialised, in `dtype`). Dropout on
  // the adapter's input applies only while grad is enabled (a training forward), never when
  // scoring or generating.
  void add_adapter(int64_t rank, double alpha, double dropout, c10::ScalarType dtype);
  bool has_adapter() const { return lora_A != nullptr; }
  // An adapter that is off computes the base layer alone (the reference model of a LoRA run).
  void set_adapter_enabled(bool enabled) { adapter_enabled_ = enabled; }
  double adapter_scaling() const { return adapter_scaling_; }

  torch::Tensor weight;                        // [out_features, in_features]
  torch::Tensor bias;                          // [out_features], undefined without bias
  std::shared_ptr<LinearImpl> lora_A, lora_B;  // null without an adapter

 private:
  double adapter_scaling_ = 0;
  double adapter_dropout_ = 0;
  bool adapter_enabled_ = true;
};
TORCH_MODULE(Linear);

}  // namespace ooze::models
