// A user's function on a rollout's train data, after its advantages and before training
// (--rollout-data-postprocess-path), in Slime's form or a fuller one:
//
//   def postprocess(args) -> None
//   def postprocess(args, rollout_id, rollout_data) -> None
//
// rollout_data is a dict of per-sample lists of tensors that share memory with the caller
// (python/tensor_bridge.h), so what the function changes in place is what the caller then has.
// The caller (launcher/train_data_hooks.h) says what the lists are.
//
//   RolloutDataHook hook = RolloutDataHook::load(path, "--rollout-data-postprocess-path");
//   hook.call(rollout_id, data);   // takes the GIL, and lets it go before returning
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "python/python_hook.h"

namespace ooze::python {

struct RolloutData {
  // Per-sample lists by key ("advantages": [R_i] each, ...), and lists of numbers by key
  // ("rewards"), in this order.
  std::vector<std::pair<std::string, std::vector<at::Tensor>>> tensor_lists;
  std::vector<std::pair<std::string, std::vector<double>>> number_lists;
};

class RolloutDataHook {
 public:
  // Starts the interpreter and imports torch if needed; checks the function as PythonHook::load
  // does, for either signature. Throws HookError naming `flag`.
  static RolloutDataHook load(const std::string& path, const std::string& flag);

  // Runs the function (with `rollout_id` and `data` when it takes them). Throws HookError naming
  // the flag, the path and the rollout, with the traceback, when it raised.
  void call(int64_t rollout_id, const RolloutData& data) const;

 private:
  explicit RolloutDataHook(PythonHook hook) : hook_(std::move(hook)) {}
  PythonHook hook_;
};

}  // namespace ooze::python
