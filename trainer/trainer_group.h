// A group of TrainActor ranks as the driver uses it: one global batch dealt out to the ranks as
// fsdp/packing.h balances it (split_across_ranks with the trainer's packing options), every
// collective called on every rank at once, and per-sample answers put back in the batch's order.
//
//   TrainerGroup trainers = TrainerGroup::spawn(world_size, options);
//   std::vector<at::Tensor> old = log_probs(trainers, batch, packing, temperature);
//   TrainStepResult step = train_step(trainers, batch, packing);
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "actors/actor_group.h"
#include "fsdp/packing.h"
#include "trainer/train_actor.h"

namespace ooze::trainer {

using TrainerGroup = actors::ActorGroup<TrainActor>;

// The ranks' shares of `global`: shares[r] holds the indices into global.samples rank r gets.
// With packing.context_parallel_size C > 1 the batch is dealt out to the W / C data-parallel
// groups and the C ranks of a group (r / C the same) get the same share; their answers agree.
std::vector<std::vector<int64_t>> deal(const TrainBatch& global, int world_size,
                                       const fsdp::PackingOptions& packing);

// One optimizer step of the group on `global`. Every rank reports the same step (its metrics are
// reduced over the ranks; ooze::Error when they differ); rank 0's report is returned.
TrainStepResult train_step(const TrainerGroup& group, const TrainBatch& global,
                           const fsdp::PackingOptions& packing);

// The same step in flight, so that two groups (the policy and the critic) train at once:
//   PendingTrainStep critic_step = start_train_step(critics, batch, packing);
//   TrainStepResult policy = train_step(trainers, batch, packing);
//   TrainStepResult critic = critic_step.wait();
struct PendingTrainStep {
  std::vector<actors::Future<TrainStepResult>> ranks;
  TrainStepResult wait();
};
PendingTrainStep start_train_step(const TrainerGroup& group, const TrainBatch& global,
                                  const fsdp::PackingOptions& packing);

// Which weights score the samples.
enum class Scorer { kPolicy, kReference, kTeacher };

// log p of every response token of each sample of `global` ([R_i] float32 each, in the batch's
// order) at `temperature`, by the policy, the frozen reference model or the distillation
// teacher (TrainInit's).
std::vector<at::Tensor> log_probs(const TrainerGroup& group, const TrainBatch& global,
                                  const fsdp::PackingOptions& packing, double temperature,
                                  Scorer scorer = Scorer::kPolicy);

// A critic group's value of every response token of each sample of `global` ([R_i] float32
// each, in the batch's order).
std::vector<at::Tensor> values(const TrainerGroup& critics, const TrainBatch& global,
                               const fsdp::PackingOptions& packing);

}  // namespace ooze::trainer
