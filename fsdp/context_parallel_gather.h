// Per-token values of a micro-batch shared by a context-parallel group, put back together: each
// CP rank computes its share (the local layout of models/context_parallel_split.h), and every
// rank of the group gets the whole micro-batch's values in token order, so the loss (which needs
// whole sequences: per-sample means, GSPO's sequence ratios, ...) and the returned log-probs are
// those of CP = 1.
//
//   at::Tensor local = ...;                                          // [T_local], with grad
//   at::Tensor full = gather_context_parallel(local, split, cp_group);  // [T], token order
//   loss_of(full).backward();   // every rank of the group: the same loss of the same values
//
// The gradient is exact under one condition: every rank of the group computes the SAME function
// of `full` (the same loss of the same samples, as the train step does). Then the gradient of
// that loss with respect to this rank's values is its own slice of the gradient of `full`, and
// backward takes that slice without communicating; the parameters' gradients summed over the
// group (FSDP's reduce-scatter) are those of one loss.
#pragma once

#include <ATen/ATen.h>

#include <memory>

#include "comm/communicator.h"
#include "models/context_parallel_split.h"

namespace ooze::fsdp {

// local: [T_local] or [T_local, ...] values of this rank's tokens (split.cp_rank == group's
// rank). Returns [T, ...]: every rank's values in the original token order (padding dropped).
// A collective over `group`; differentiable as described above.
at::Tensor gather_context_parallel(const at::Tensor& local,
                                   const models::ContextParallelSplit& split,
                                   const std::shared_ptr<comm::Communicator>& group);

}  // namespace ooze::fsdp
