// A user's truncated importance sampling in Python (--custom-tis-function-path), Slime's
// signature, every argument passed by keyword as Slime passes them:
//
//   def tis_fn(args, *, pg_loss, train_log_probs, rollout_log_probs, loss_masks, total_lengths,
//              response_lengths, **kwargs) -> (pg_loss, loss_masks, metrics)
//
// called on tensors shared with the caller, as python/loss_hook.h does: the pg_loss it returns
// carries the gradient back into the caller's graph. The caller (trainer/python_loss.h) says what
// the tensors are; this file carries them to Python and back, checked.
//
//   TisHook hook = TisHook::load("my_tis.py:tis", "--custom-tis-function-path");
//   TisHookOutput out = hook.call(inputs);   // takes the GIL, and lets it go before returning
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "python/python_hook.h"

namespace ooze::python {

struct TisHookInputs {
  at::Tensor pg_loss;  // [sum R_i]: the per-token surrogate of the response tokens, with its graph
  std::vector<at::Tensor> train_log_probs;    // [R_i] each: the old policy's
  std::vector<at::Tensor> rollout_log_probs;  // [R_i] each: the engines'
  std::vector<at::Tensor> loss_masks;         // [R_i] each
  std::vector<int64_t> total_lengths;         // L_i: prompt and response
  std::vector<int64_t> response_lengths;      // R_i
};

struct TisHookOutput {
  at::Tensor pg_loss;                     // [sum R_i], floating, with a gradient when it had one
  std::vector<at::Tensor> loss_masks;     // [R_i] each, float32
  std::vector<std::string> metric_names;  // in the dict's order
  std::vector<at::Tensor> metric_values;  // [sum R_i] each, detached: one value per token
};

class TisHook {
 public:
  // Starts the interpreter and imports torch if needed; checks the function as PythonHook::load
  // does, its arguments by keyword. Throws HookError naming `flag`.
  static TisHook load(const std::string& path, const std::string& flag);

  // Runs the function on one micro-batch. Throws HookError naming the flag, the path and, when
  // the function raised, its traceback; or saying what it should have returned.
  TisHookOutput call(const TisHookInputs& inputs) const;

 private:
  explicit TisHook(PythonHook hook) : hook_(std::move(hook)) {}
  PythonHook hook_;
};

}  // namespace ooze::python
