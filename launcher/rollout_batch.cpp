#include "launcher/rollout_batch.h"

#include <algorithm>
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
  if (!sample.teacher_log_probs.empty()) {  // scored by a distillation teacher in the rollout
    check_length(sample.teacher_log_probs.size(), "teacher_log_probs");
    out.response_values["teacher_log_probs"] = at::tensor(sample.teacher_log_probs, at::kFloat);
  }
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

bool RolloutBatch::has(const std::string& name) const {
  return !samples.empty() &&
         std::all_of(samples.begin(), samples.end(), [&](const fsdp::PackingSample& sample) {
           return sample.response_values.count(name) != 0;
         });
}

std::vector<trainer::TrainBatch> RolloutBatch::global_batches(int64_t size) const {
  const int64_t total = static_cast<int64_t>(rollout_sizes.size());
  if (size <= 0 || total % size != 0) {
    throw ConfigError("--global-batch-size " + std::to_string(size) + " does not divide the " +
                      std::to_string(total) +
                      " samples of a rollout (rollout_batch_size * n_samples_per_prompt)");
  }
  std::vector<trainer::TrainBatch> batches(static_cast<size_t>(total / size));
  size_t next = 0;
  for (int64_t r = 0; r < total; ++r) {
    for (int64_t i = 0; i < rollout_sizes[r]; ++i) {
      batches[r / size].samples.push_back(samples[next++]);
    }
  }
  return batches;
}

std::vector<int64_t> rollout_sizes_of(const std::vector<rollout::Sample>& group) {
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < group.size(); ++i) {
    const bool continues =
        i > 0 && !group[i].rollout_id.is_null() && group[i].rollout_id == group[i - 1].rollout_id;
    if (continues) {
      ++sizes.back();
    } else {
      sizes.push_back(1);
    }
  }
  return sizes;
}

RolloutBatch rollout_batch(const std::vector<std::vector<rollout::Sample>>& groups,
                           const std::string& reward_key) {
  RolloutBatch batch;
  if (groups.empty()) return batch;
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::vector<rollout::Sample>& group = groups[g];
    const std::vector<int64_t> sizes = rollout_sizes_of(group);
    batch.rollout_sizes.insert(batch.rollout_sizes.end(), sizes.begin(), sizes.end());
    const auto rollouts = static_cast<int64_t>(sizes.size());
    if (g == 0) batch.group_size = rollouts;
    if (rollouts != batch.group_size) {
      throw Error("a rollout's groups must be of one size: group " +
                  (group.empty() ? std::string("?") : std::to_string(group[0].group_index)) +
                  " has " + std::to_string(rollouts) + " rollouts, the first " +
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

namespace {

// Split rollouts: each sample's reward becomes its rollout's, baseline-corrected over the group's
// rollouts, a rollout's reward being the sum of its samples'. The estimator then takes them as
// they are: there is no group of samples left to normalise over.
at::Tensor rollout_level_rewards(const RolloutBatch& batch, algorithms::AdvantageOptions& options) {
  using algorithms::AdvantageEstimator;
  if (options.estimator == AdvantageEstimator::kRloo) {
    throw ConfigError(
        "--advantage-estimator rloo takes one sample per rollout, but the generate "
        "function split rollouts into several samples: use grpo or "
        "reinforce_plus_plus_baseline");
  }
  const at::Tensor rewards = at::tensor(batch.rewards, at::kDouble);
  const bool grouped = options.estimator == AdvantageEstimator::kGrpo ||
                       options.estimator == AdvantageEstimator::kGspo ||
                       options.estimator == AdvantageEstimator::kCispo ||
                       options.estimator == AdvantageEstimator::kReinforcePlusPlusBaseline;
  if (!grouped || options.disable_rewards_normalization) return rewards;
  std::vector<double> totals;
  std::vector<int64_t> rollout_of_sample;
  int64_t next = 0;
  for (size_t r = 0; r < batch.rollout_sizes.size(); ++r) {
    const int64_t size = batch.rollout_sizes[r];
    totals.push_back(rewards.slice(0, next, next + size).sum().item<double>());
    rollout_of_sample.insert(rollout_of_sample.end(), size, static_cast<int64_t>(r));
    next += size;
  }
  const bool divide_by_std = options.estimator != AdvantageEstimator::kReinforcePlusPlusBaseline &&
                             !options.disable_grpo_std_normalization;
  const at::Tensor normalized = algorithms::group_normalized_rewards(
      at::tensor(totals, at::kDouble), batch.group_size, divide_by_std);
  options.disable_rewards_normalization = true;
  return normalized.index_select(0, at::tensor(rollout_of_sample, at::kLong));
}

}  // namespace

namespace {

std::string privileged_information(const rollout::Sample& sample, const std::string& key,
                                   size_t group, size_t index) {
  if (key == "label") return sample.label;
  if (!sample.metadata.is_object() || !sample.metadata.contains(key)) {
    throw Error("--opsd-privileged-info-key " + key + ": sample " + std::to_string(index) +
                " of group " + std::to_string(group) + " has no label by that name nor a '" + key +
                "' field in its metadata (" + sample.metadata.dump() +
                "); give the dataset's field with --metadata-key, or use label");
  }
  const nlohmann::json& value = sample.metadata.at(key);
  return value.is_string() ? value.get<std::string>() : value.dump();
}

}  // namespace

void add_privileged_prompts(RolloutBatch& batch,
                            const std::vector<std::vector<rollout::Sample>>& groups,
                            const std::string& key, const models::Tokenizer& tokenizer) {
  size_t next = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].size(); ++i) {
      const rollout::Sample& sample = groups[g][i];
      std::vector<int64_t> tokens(sample.tokens.begin(),
                                  sample.tokens.begin() + sample.prompt_length());
      const std::vector<int64_t> information =
          tokenizer.encode(privileged_information(sample, key, g, i));
      tokens.insert(tokens.end(), information.begin(), information.end());
      batch.samples.at(next++).teacher_prompt = at::tensor(tokens, at::kLong);
    }
  }
  if (next != batch.samples.size()) {
    throw Error("add_privileged_prompts: " + std::to_string(next) + " samples in the groups, " +
                std::to_string(batch.samples.size()) + " in the batch");
  }
}

void compute_advantages(RolloutBatch& batch, const algorithms::AdvantageOptions& given_options,
                        algorithms::KlEstimator kl_type, const algorithms::OpdOptions& opd) {
  algorithms::AdvantageOptions options = given_options;
  algorithms::AdvantageInputs inputs;
  if (options.estimator == algorithms::AdvantageEstimator::kPpo)
    inputs.values = batch.get("values");
  inputs.group_size = batch.group_size;
  inputs.rewards = at::tensor(batch.rewards, at::kDouble);
  if (batch.has_split_rollouts()) {
    inputs.rewards = rollout_level_rewards(batch, options);
    inputs.group_size = 1;
  }
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
  if (opd.shapes_advantages()) {
    result.advantages = algorithms::distilled_advantages(
        result.advantages, batch.get("old_log_probs"), batch.get("teacher_log_probs"),
        inputs.response_masks, opd.kl_coef);
  }
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
