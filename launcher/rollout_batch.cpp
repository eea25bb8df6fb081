#include "launcher/rollout_batch.h"

#include <stdexcept>

#include "algorithms/advantage_whitening.h"
#include "core/error.h"

namespace ooze::launcher {
namespace {

std::string sample_name(const rollout::Sample& sample) {
  return "sample " + std::to_string(sample.index) + " (group " +
         std::to_string(sample.group_index) + ")";
}

fsdp::PackingSample packing_sample(const rollout::Sample& sample) {
  const int64_t response = sample.response_length;
  if (response < 0 || response >= static_cast<int64_t>(sample.tokens.size())) {
    throw Error(sample_name(sample) + " has " + std::to_string(sample.tokens.size()) +
                " tokens and a response of " + std::to_string(response) +
                ": a trained sample needs at least one prompt token");
  }
  auto check_length = [&](size_t size, const char* what) {
    if (static_cast<int64_t>(size) != response) {
      throw Error(sample_name(sample) + ": " + what + " has " + std::to_string(size) +
                  " entries for " + std::to_string(response) + " response tokens");
    }
  };
  check_length(sample.loss_mask.size(), "loss_mask");
  check_length(sample.rollout_log_probs.size(), "rollout_log_probs");

  fsdp::PackingSample out;
  out.tokens = at::tensor(sample.tokens, at::kLong);
  out.response_length = response;
  out.response_mask = at::tensor(sample.loss_mask, at::kInt).to(at::kFloat);
  out.response_values["rollout_log_probs"] = at::tensor(sample.rollout_log_probs, at::kFloat);
  return out;
}

}  // namespace

void RolloutBatch::set(const std::string& name, const std::vector<at::Tensor>& values) {
  if (values.size() != samples.size()) {
    throw Error("RolloutBatch::set(\"" + name + "\"): " + std::to_string(values.size()) +
                " values for " + std::to_string(samples.size()) + " samples");
  }
  for (size_t i = 0; i < samples.size(); ++i) {
    if (values[i].dim() != 1 || values[i].size(0) != samples[i].response_length) {
      throw Error("RolloutBatch::set(\"" + name + "\"): sample " + std::to_string(i) + " has " +
                  std::to_string(samples[i].response_length) +
                  " response tokens, its values have shape " + c10::str(values[i].sizes()));
    }
  }
  for (size_t i = 0; i < samples.size(); ++i) {
    samples[i].response_values[name] = values[i].detach().to(at::kCPU, at::kFloat);
  }
}

std::vector<at::Tensor> RolloutBatch::get(const std::string& name) const {
  std::vector<at::Tensor> values;
  for (const fsdp::PackingSample& sample : samples) {
    auto found = sample.response_values.find(name);
    if (found == sample.response_values.end()) {
      throw Error("RolloutBatch: the samples have no per-token \"" + name + "\" yet");
    }
    values.push_back(found->second);
  }
  return values;
}

std::vector<trainer::TrainBatch> RolloutBatch::global_batches(int64_t size) const {
  const int64_t total = static_cast<int64_t>(samples.size());
  if (size <= 0 || total % size != 0) {
    throw ConfigError("--global-batch-size " + std::to_string(size) + " does not divide the " +
                      std::to_string(total) +
                      " samples of a rollout (rollout_batch_size * n_samples_per_prompt)");
  }
  std::vector<trainer::TrainBatch> batches(static_cast<size_t>(total / size));
  for (int64_t i = 0; i < total; ++i) batches[i / size].samples.push_back(samples[i]);
  return batches;
}

RolloutBatch rollout_batch(const std::vector<std::vector<rollout::Sample>>& groups,
                           const std::string& reward_key) {
  RolloutBatch batch;
  if (groups.empty()) return batch;
  batch.group_size = static_cast<int64_t>(groups.front().size());
  for (const auto& group : groups) {
    if (static_cast<int64_t>(group.size()) != batch.group_size) {
      throw Error("a rollout's groups must be of one size: group " +
                  (group.empty() ? std::string("?") : std::to_string(group[0].group_index)) +
                  " has " + std::to_string(group.size()) + " samples, the first " +
                  std::to_string(batch.group_size));
    }
    for (const rollout::Sample& sample : group) {
      try {
        batch.rewards.push_back(sample.reward_value(reward_key));
      } catch (const std::invalid_argument& e) {
        throw Error(e.what());
      }
      batch.samples.push_back(packing_sample(sample));
    }
  }
  return batch;
}

void compute_advantages(RolloutBatch& batch, const algorithms::AdvantageOptions& options,
                        algorithms::KlEstimator kl_type) {
  algorithms::AdvantageInputs inputs;
  if (options.estimator == algorithms::AdvantageEstimator::kPpo)
    inputs.values = batch.get("values");
  inputs.rewards = at::tensor(batch.rewards, at::kDouble);
  inputs.group_size = batch.group_size;
  for (const fsdp::PackingSample& sample : batch.samples) {
    inputs.response_masks.push_back(sample.response_mask);
  }
  if (options.kl_coef != 0) {
    const std::vector<at::Tensor> old = batch.get("old_log_probs");
    const std::vector<at::Tensor> ref = batch.get("ref_log_probs");
    for (size_t i = 0; i < old.size(); ++i) {
      inputs.kl.push_back(algorithms::approx_kl(old[i], ref[i], kl_type));
    }
  }
  algorithms::AdvantageResult result = algorithms::compute_advantages(inputs, options);
  if (options.whitens_advantages()) {
    // The driver holds the whole step: its own statistics are the global ones.
    const algorithms::WhiteningStats stats =
        algorithms::masked_whitening_stats(result.advantages, inputs.response_masks);
    result.advantages = algorithms::apply_whitening(result.advantages, stats);
  }
  batch.set("advantages", result.advantages);
  batch.set("returns", result.returns);
}

}  // namespace ooze::launcher
