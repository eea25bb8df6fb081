// A user's loss function in Python (--custom-loss-function-path), Slime's signature:
//
//   def loss(args, batch, logits, sum_of_sample_mean) -> (loss, metrics)
//
// called on tensors it shares with the caller: nothing is copied on the way in, and the loss it
// returns is the caller's to backpropagate (python/tensor_bridge.h). The caller (trainer/
// python_loss.h) says what the tensors are; this file only carries them to Python and back.
//
//   LossHook hook = LossHook::load("my_loss.py:loss", "--custom-loss-function-path");
//   LossHookOutput out = hook.call(inputs);   // takes the GIL, and lets it go before returning
//   model.backward(out.loss * factor);        // never under the GIL: the autograd engine refuses
//
// Loading imports torch, so that a missing or foreign torch is reported before a run starts.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "python/python_hook.h"

namespace ooze::python {

struct LossHookInputs {
  // `batch`: per-sample lists of tensors by key ("advantages": [R_i] each, ...), and lists of
  // integers by key ("response_lengths", ...), in this order.
  std::vector<std::pair<std::string, std::vector<at::Tensor>>> tensor_lists;
  std::vector<std::pair<std::string, std::vector<int64_t>>> integer_lists;
  // Behind `logits`: the current policy's log-prob and entropy of each response token, one
  // tensor per sample, carrying the gradient to the model.
  std::vector<at::Tensor> log_probs;
  std::vector<at::Tensor> entropy;
  // Behind `sum_of_sample_mean`: the weight of each response token (the samples concatenated).
  at::Tensor token_weights;
  int64_t data_parallel_rank = 0;  // what ooze.mpu reports
  int64_t data_parallel_size = 1;
};

struct LossHookOutput {
  at::Tensor loss;                        // 0-dim, floating, with a gradient
  std::vector<std::string> metric_names;  // "loss" among them
  at::Tensor metric_values;               // float64 [names], on the loss's device
};

class LossHook {
 public:
  // Starts the interpreter and imports torch if needed; checks the function as PythonHook::load
  // does (file, module, attribute, callable, four arguments). Throws HookError naming `flag`.
  static LossHook load(const std::string& path, const std::string& flag);

  const std::string& path() const { return hook_.path(); }

  // Runs the function on `inputs`. Throws HookError naming the flag, the path and, when the
  // function raised, its traceback; or saying what the loss or the metrics should have been.
  LossHookOutput call(const LossHookInputs& inputs) const;

 private:
  explicit LossHook(PythonHook hook) : hook_(std::move(hook)) {}
  PythonHook hook_;
};

}  // namespace ooze::python
