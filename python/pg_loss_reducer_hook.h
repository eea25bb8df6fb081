// A user's reducer of the built-in policy loss's pg_loss in Python
// (--custom-pg-loss-reducer-function-path), Slime's signature: a factory called on each
// micro-batch, whose reducer is then called on the per-token surrogate
//
//   def get_pg_loss_reducer(total_lengths, response_lengths, loss_masks,
//                           calculate_per_token_loss=False) -> Callable[[Tensor], Tensor]
//
// with tensors shared with the caller, as python/loss_hook.h does. The caller (trainer/
// python_loss.h) scales what the reducer returns.
//
//   PgLossReducerHook hook = PgLossReducerHook::load(path, "--custom-pg-loss-reducer-...");
//   at::Tensor sum = hook.reduce(total_lengths, response_lengths, loss_masks, false, x);
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "python/python_hook.h"

namespace ooze::python {

class PgLossReducerHook {
 public:
  // Starts the interpreter and imports torch if needed; checks the factory as PythonHook::load
  // does (four arguments). Throws HookError naming `flag`.
  static PgLossReducerHook load(const std::string& path, const std::string& flag);

  // factory(total_lengths, response_lengths, loss_masks, per_token)(x): a scalar tensor, with a
  // gradient when `x` has one. Takes the GIL, and lets it go before returning. Throws HookError
  // naming the flag and the path when the factory or its reducer raised (with the traceback) or
  // returned something else.
  at::Tensor reduce(const std::vector<int64_t>& total_lengths,
                    const std::vector<int64_t>& response_lengths,
                    const std::vector<at::Tensor>& loss_masks, bool per_token,
                    const at::Tensor& x) const;

 private:
  explicit PgLossReducerHook(PythonHook hook) : hook_(std::move(hook)) {}
  PythonHook hook_;
};

}  // namespace ooze::python
