// --loss-type custom_loss: the policy's micro-batch loss is a user's Python function, Slime's
// --custom-loss-function-path PATH (package.module.function, package.module:function or
// file.py:function):
//
//   def my_loss(args, batch, logits, sum_of_sample_mean) -> (loss, metrics)
//
// run on every micro-batch of every rank, in place of algorithms/policy_loss.h. What it gets
// shares memory and autograd with the step (python/loss_hook.h):
//   args                the run's flags (python/hook_args.h)
//   batch               Slime's keys, one tensor per sample of the micro-batch, in packed order:
//                       "advantages", "log_probs" (the old policy's), "rollout_log_probs",
//                       "ref_log_probs" (with a reference model), "returns", "values" (ppo),
//                       any other per-token value by its name, each [R_i] float32 over the
//                       response; "loss_masks" [R_i] (1 on the tokens that count),
//                       "unconcat_tokens" [L_i] (prompt then response); and the integer lists
//                       "response_lengths" and "total_lengths" (L_i)
//   logits              a handle: ooze never holds [T, V] logits. ooze.get_log_probs_and_entropy
//                       (logits, ...) gives the current policy's log-probs and entropy of the
//                       response tokens ([R_i] each, at the rollouts' temperature, with their
//                       gradient; the entropy's only when --entropy-coef is not 0, as Slime)
//   sum_of_sample_mean  x [sum R_i] -> this micro-batch's share of the step's mean of x under
//                       --loss-aggregation, normalised by the step's global counts
//                       (algorithms/loss_aggregation.h)
// The loss it returns (a scalar reduced with sum_of_sample_mean) is scaled by the loss's
// gradient factor and backpropagated as the built-in losses are, so a Python loss written like
// the built-in one trains the same at any world size and micro-batch split. Its metrics (a dict
// of scalar tensors or numbers) are summed over micro-batches and ranks as the built-in ones are
// (so those reduced with sum_of_sample_mean are the step's means) and logged under train/;
// "loss" is the loss unless the function reports its own.
//
// A rank with no sample of its own (there are more ranks than samples) still runs its share of
// the collectives on a padding micro-batch: one sample of no response token, every list present
// and [0]-sized.
//
// --loss-type policy_loss --custom-pg-loss-reducer-function-path PATH: the built-in policy loss,
// with its pg_loss reduced by a user's function instead of --loss-aggregation (Slime's):
//
//   def get_pg_loss_reducer(total_lengths, response_lengths, loss_masks,
//                           calculate_per_token_loss=False) -> Callable[[Tensor], Tensor]
//
// called on each micro-batch; its reducer gets the per-token surrogate [sum R_i] and returns a
// sum over the micro-batch, which is divided, as in Slime, by the step's samples (or with
// --loss-aggregation token-mean, where calculate_per_token_loss is True, by its counted tokens).
// So a reducer that sums each sample's mean (or, per token, every counted token) gives the
// built-in pg_loss. The other terms and metrics keep --loss-aggregation.
//
// --loss-type policy_loss --use-tis --custom-tis-function-path PATH: the built-in policy loss,
// with its rollout importance sampling done by a user's function instead of
// algorithms/mismatch_correction.h (Slime's), called by keyword:
//
//   def tis_fn(args, *, pg_loss, train_log_probs, rollout_log_probs, loss_masks, total_lengths,
//              response_lengths, **kwargs) -> (pg_loss, loss_masks, metrics)
//
// on each micro-batch (python/tis_hook.h): pg_loss is the per-token surrogate of its response
// tokens [sum R_i], with its gradient; train_log_probs (the old policy's), rollout_log_probs and
// loss_masks are [R_i] per sample. It returns pg_loss reweighted, the loss masks pg_loss then
// counts (a token it rejects leaves pg_loss's denominator: with the default aggregation, its
// sample's mean is over the tokens left), and per-token metrics ([sum R_i] each) averaged over
// the step's counted tokens as the built-in tis metrics are, logged under train/. The other
// terms and metrics keep the step's loss masks.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <string>

#include "algorithms/loss_aggregation.h"
#include "algorithms/loss_metrics.h"
#include "fsdp/packing.h"
#include "models/log_probs.h"
#include "trainer/train_step.h"

namespace ooze::trainer {

// Loads the Python functions `options` use (--custom-loss-function-path with --loss-type
// custom_loss, --custom-pg-loss-reducer-function-path and --custom-tis-function-path with
// policy_loss), once per process (later calls return at once), and checks that each takes
// Slime's arguments. Starts the interpreter and
// imports torch when there is one. Throws python::HookError naming the flag, the path and what is
// wrong: no such file or module, an import that raised (with its traceback), no such function,
// another signature.
void load_python_losses(const TrainStepOptions& options);

// The micro-batch loss of the function `path` names (loaded if need be): its loss already
// multiplied by scale.gradient_factor(), its metrics the function's. `predicted` is the current
// policy's log-probs and entropy of every packed token (the entropy detached unless its gradient
// is wanted). Throws python::HookError naming the flag and the path when the function raised
// (with its traceback) or returned something other than a scalar tensor and a dict of scalars.
algorithms::LossOutput custom_loss(const std::string& path, const fsdp::PackedMicroBatch& batch,
                                   const models::TokenLogProbs& predicted, bool rank_has_samples,
                                   const algorithms::LossScale& scale, int64_t data_parallel_rank);

// The pg_loss reducer of the built-in policy loss (algorithms::PolicyLossInputs) that runs the
// factory `path` names (loaded if need be) on `batch` and scales its sum to this micro-batch's
// share of the step (`scale`'s counts). The reducer throws python::HookError naming the flag; it
// refers to `batch`, which must outlive it.
std::function<at::Tensor(const at::Tensor& per_token, const at::Tensor& loss_mask)>
custom_pg_loss_reducer(const std::string& path, const fsdp::PackedMicroBatch& batch,
                       const algorithms::LossScale& scale);

// The custom TIS of the built-in policy loss (algorithms::PolicyLossInputs) that runs the
// function `path` names (loaded if need be) on `batch`'s samples. It throws python::HookError
// naming the flag; it refers to `batch`, which must outlive it.
algorithms::CustomTis custom_tis(const std::string& path, const fsdp::PackedMicroBatch& batch);

}  // namespace ooze::trainer
