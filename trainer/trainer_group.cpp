#include "trainer/trainer_group.h"

#include <algorithm>
#include <string>
#include <tuple>

#include "core/error.h"

namespace ooze::trainer {
namespace {

std::vector<TrainBatch> shares_of(const TrainBatch& global,
                                  const std::vector<std::vector<int64_t>>& shares) {
  std::vector<TrainBatch> per_rank(shares.size());
  for (size_t rank = 0; rank < shares.size(); ++rank) {
    for (int64_t index : shares[rank]) per_rank[rank].samples.push_back(global.samples[index]);
  }
  return per_rank;
}

// Per-sample answers of the ranks (answers[r][i] for sample shares[r][i]) in the batch's order.
std::vector<at::Tensor> in_batch_order(size_t num_samples,
                                       const std::vector<std::vector<int64_t>>& shares,
                                       const std::vector<std::vector<at::Tensor>>& answers) {
  std::vector<at::Tensor> ordered(num_samples);
  for (size_t rank = 0; rank < shares.size(); ++rank) {
    for (size_t i = 0; i < shares[rank].size(); ++i) ordered[shares[rank][i]] = answers[rank].at(i);
  }
  return ordered;
}

}  // namespace

std::vector<std::vector<int64_t>> deal(const TrainBatch& global, int world_size,
                                       const fsdp::PackingOptions& packing) {
  return fsdp::split_across_ranks(fsdp::sample_lengths(global.samples), world_size, packing);
}

PendingTrainStep start_train_step(const TrainerGroup& group, const TrainBatch& global,
                                  const fsdp::PackingOptions& packing) {
  const std::vector<TrainBatch> per_rank = shares_of(global, deal(global, group.size(), packing));
  return {group.call_each(&TrainActor::train_step,
                          [&](int rank) { return std::make_tuple(per_rank[rank]); })};
}

TrainStepResult train_step(const TrainerGroup& group, const TrainBatch& global,
                           const fsdp::PackingOptions& packing) {
  return start_train_step(group, global, packing).wait();
}

TrainStepResult PendingTrainStep::wait() {
  auto results = actors::get_all(std::move(ranks));
  // The step's numbers are reduced over the ranks: ranks that disagree are out of step.
  for (size_t rank = 1; rank < results.size(); ++rank) {
    if (results[rank].metrics != results[0].metrics ||
        results[rank].grad_norm != results[0].grad_norm ||
        results[rank].samples != results[0].samples) {
      throw Error("trainer ranks 0 and " + std::to_string(rank) +
                  " report different steps: the group is out of step");
    }
  }
  // Memory is per rank: the step needs what its largest rank held.
  TrainStepResult result = results.front();
  for (const TrainStepResult& rank : results) {
    result.state_bytes = std::max(result.state_bytes, rank.state_bytes);
    result.peak_rss_bytes = std::max(result.peak_rss_bytes, rank.peak_rss_bytes);
  }
  return result;
}

std::vector<at::Tensor> values(const TrainerGroup& critics, const TrainBatch& global,
                               const fsdp::PackingOptions& packing) {
  const std::vector<std::vector<int64_t>> shares = deal(global, critics.size(), packing);
  const std::vector<TrainBatch> per_rank = shares_of(global, shares);
  return in_batch_order(global.samples.size(), shares,
                        actors::get_all(critics.call_each(&TrainActor::compute_values, [&](int r) {
                          return std::make_tuple(per_rank[r]);
                        })));
}

std::vector<at::Tensor> log_probs(const TrainerGroup& group, const TrainBatch& global,
                                  const fsdp::PackingOptions& packing, double temperature,
                                  Scorer scorer) {
  const std::vector<std::vector<int64_t>> shares = deal(global, group.size(), packing);
  const std::vector<TrainBatch> per_rank = shares_of(global, shares);
  std::vector<ResponseLogProbs> answers;
  if (scorer == Scorer::kPolicy) {
    answers = actors::get_all(group.call_each(&TrainActor::compute_log_probs, [&](int rank) {
      return std::make_tuple(per_rank[rank], temperature, false);
    }));
  } else {
    const auto method = scorer == Scorer::kReference ? &TrainActor::compute_ref_log_probs
                                                     : &TrainActor::compute_teacher_log_probs;
    answers = actors::get_all(group.call_each(
        method, [&](int rank) { return std::make_tuple(per_rank[rank], temperature); }));
  }
  std::vector<std::vector<at::Tensor>> log_probs;
  for (ResponseLogProbs& answer : answers) log_probs.push_back(std::move(answer.log_probs));
  return in_batch_order(global.samples.size(), shares, log_probs);
}

}  // namespace ooze::trainer
