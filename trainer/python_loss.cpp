#include "trainer/python_loss.h"

#include <map>
#include <mutex>
#include <vector>

#include "algorithms/packed_sequences.h"
#include "python/loss_hook.h"
#include "python/pg_loss_reducer_hook.h"
#include "python/tis_hook.h"

namespace ooze::trainer {
namespace {

constexpr const char* kLossFlag = "--custom-loss-function-path";
constexpr const char* kReducerFlag = "--custom-pg-loss-reducer-function-path";
constexpr const char* kTisFlag = "--custom-tis-function-path";

// The per-token values a policy's samples may carry, under Slime's keys: a rank without samples
// has none to name, so its padding micro-batch gets these, [0]-sized.
const std::vector<std::string> kPolicyValueNames = {
    "advantages", "returns", "old_log_probs", "rollout_log_probs", "ref_log_probs", "values"};

// ooze calls the old policy's log-probs "old_log_probs"; Slime's batch calls them "log_probs".
std::string slime_key(const std::string& name) {
  return name == "old_log_probs" ? "log_probs" : name;
}

// Each function is loaded once per process and kept, as a plugin library is (a process runs one
// or two at most).
template <class Hook>
const Hook& loaded(const std::string& path, const char* flag) {
  static std::mutex mutex;
  static std::map<std::string, Hook> hooks;
  std::lock_guard<std::mutex> lock(mutex);
  auto found = hooks.find(path);
  if (found == hooks.end()) found = hooks.emplace(path, Hook::load(path, flag)).first;
  return found->second;
}

// The response slice of a per-token [T] tensor for each packed sample: views, as
// fsdp::unpack_responses gives, but cut by one split, so that a gradient through them is one
// autograd node for the micro-batch rather than one per sample (each filling a [T] tensor).
std::vector<at::Tensor> responses_of(const fsdp::PackedMicroBatch& batch,
                                     const std::vector<int64_t>& total_lengths,
                                     const at::Tensor& per_token) {
  std::vector<int64_t> pieces;  // prompt, response, prompt, response, ...
  for (size_t b = 0; b < total_lengths.size(); ++b) {
    pieces.push_back(total_lengths[b] - batch.response_lengths[b]);
    pieces.push_back(batch.response_lengths[b]);
  }
  std::vector<at::Tensor> split = at::split_with_sizes(per_token, pieces);
  std::vector<at::Tensor> responses;
  for (size_t i = 1; i < split.size(); i += 2) responses.push_back(std::move(split[i]));
  return responses;
}

// The reverse of responses_of: a per-token [T] tensor from each sample's response values, 0 on
// the prompts (which no loss counts).
at::Tensor packed_from_responses(const fsdp::PackedMicroBatch& batch,
                                 const std::vector<int64_t>& total_lengths,
                                 const std::vector<at::Tensor>& responses) {
  std::vector<at::Tensor> pieces;
  for (size_t b = 0; b < responses.size(); ++b) {
    pieces.push_back(
        at::zeros({total_lengths[b] - batch.response_lengths[b]}, responses[b].options()));
    pieces.push_back(responses[b]);
  }
  return at::cat(pieces);
}

// L_i of each packed sample, from cu_seqlens.
std::vector<int64_t> total_lengths_of(const fsdp::PackedMicroBatch& batch) {
  const at::Tensor cu_seqlens = batch.cu_seqlens.to(at::kCPU, at::kLong).contiguous();
  const int64_t* offsets = cu_seqlens.data_ptr<int64_t>();
  std::vector<int64_t> lengths;
  for (int64_t b = 0; b < batch.num_samples(); ++b) lengths.push_back(offsets[b + 1] - offsets[b]);
  return lengths;
}

}  // namespace

void load_python_losses(const TrainStepOptions& options) {
  if (options.loss_type == LossType::kCustomLoss) {
    loaded<python::LossHook>(options.custom_loss_function_path, kLossFlag);
  }
  if (options.loss_type == LossType::kPolicyLoss &&
      !options.custom_pg_loss_reducer_function_path.empty()) {
    loaded<python::PgLossReducerHook>(options.custom_pg_loss_reducer_function_path, kReducerFlag);
  }
  const algorithms::MismatchCorrectionOptions& mismatch = options.policy_loss.mismatch;
  if (options.loss_type == LossType::kPolicyLoss && mismatch.uses_custom_tis()) {
    loaded<python::TisHook>(mismatch.custom_tis_function_path, kTisFlag);
  }
}

algorithms::LossOutput custom_loss(const std::string& path, const fsdp::PackedMicroBatch& batch,
                                   const models::TokenLogProbs& predicted, bool rank_has_samples,
                                   const algorithms::LossScale& scale, int64_t data_parallel_rank) {
  const python::LossHook& hook = loaded<python::LossHook>(path, kLossFlag);
  const algorithms::PackedSequences sequences(batch.cu_seqlens, batch.num_tokens(),
                                              predicted.log_probs.device());
  const std::vector<int64_t> total_lengths = total_lengths_of(batch);
  auto responses = [&](const at::Tensor& per_token) {
    return responses_of(batch, total_lengths, per_token);
  };
  python::LossHookInputs inputs;
  for (const auto& [name, values] : batch.token_values) {
    inputs.tensor_lists.emplace_back(slime_key(name), responses(values));
  }
  if (!rank_has_samples) {
    for (const std::string& name : kPolicyValueNames) {
      if (batch.token_values.count(name) != 0) continue;
      inputs.tensor_lists.emplace_back(slime_key(name),
                                       responses(at::zeros_like(predicted.log_probs)));
    }
  }
  inputs.tensor_lists.emplace_back("loss_masks", responses(batch.loss_mask));
  inputs.tensor_lists.emplace_back("unconcat_tokens",
                                   at::split_with_sizes(batch.tokens, total_lengths));
  inputs.integer_lists.emplace_back("response_lengths", batch.response_lengths);
  inputs.integer_lists.emplace_back("total_lengths", total_lengths);
  inputs.log_probs = responses(predicted.log_probs);
  inputs.entropy = responses(predicted.entropy);
  inputs.token_weights =
      at::cat(responses(algorithms::loss_token_weights(batch.loss_mask, sequences, scale)));
  inputs.data_parallel_rank = data_parallel_rank;
  inputs.data_parallel_size = scale.dp_size;

  python::LossHookOutput out = hook.call(inputs);
  algorithms::LossOutput loss;
  loss.loss = out.loss * scale.gradient_factor();
  const at::Tensor values = out.metric_values.to(at::kCPU).contiguous();
  const double* data = values.data_ptr<double>();
  for (size_t i = 0; i < out.metric_names.size(); ++i)
    loss.metrics.add(out.metric_names[i], data[i]);
  return loss;
}

std::function<at::Tensor(const at::Tensor& per_token, const at::Tensor& loss_mask)>
custom_pg_loss_reducer(const std::string& path, const fsdp::PackedMicroBatch& batch,
                       const algorithms::LossScale& scale) {
  const python::PgLossReducerHook& hook = loaded<python::PgLossReducerHook>(path, kReducerFlag);
  // Slime's reducers sum over the micro-batch; its loss then divides by the step's samples, or
  // by its tokens when the loss is per token. The counts are clamped as the built-in weights'.
  const bool per_token = scale.aggregation == algorithms::LossAggregation::kTokenMean;
  const double divisor = std::max(per_token ? scale.global_tokens : scale.global_sequences, 1.0);
  // `batch` outlives the reducer: the policy loss of this micro-batch calls it once.
  return [&hook, &batch, per_token, divisor](const at::Tensor& per_token_loss,
                                             const at::Tensor& loss_mask) {
    const std::vector<int64_t> total_lengths = total_lengths_of(batch);
    const at::Tensor reduced = hook.reduce(
        total_lengths, batch.response_lengths, responses_of(batch, total_lengths, loss_mask),
        per_token, at::cat(responses_of(batch, total_lengths, per_token_loss)));
    return reduced / divisor;
  };
}

algorithms::CustomTis custom_tis(const std::string& path, const fsdp::PackedMicroBatch& batch) {
  const python::TisHook& hook = loaded<python::TisHook>(path, kTisFlag);
  return [&hook, &batch](const at::Tensor& per_token_loss, const at::Tensor& old_log_probs,
                         const at::Tensor& rollout_log_probs, const at::Tensor& loss_mask) {
    const std::vector<int64_t> total_lengths = total_lengths_of(batch);
    auto responses = [&](const at::Tensor& per_token) {
      return responses_of(batch, total_lengths, per_token);
    };
    auto packed = [&](const at::Tensor& concatenated) {
      return packed_from_responses(batch, total_lengths,
                                   at::split_with_sizes(concatenated, batch.response_lengths));
    };
    python::TisHookInputs inputs;
    inputs.pg_loss = at::cat(responses(per_token_loss));
    inputs.train_log_probs = responses(old_log_probs);
    inputs.rollout_log_probs = responses(rollout_log_probs);
    inputs.loss_masks = responses(loss_mask);
    inputs.total_lengths = total_lengths;
    inputs.response_lengths = batch.response_lengths;

    python::TisHookOutput out = hook.call(inputs);
    algorithms::CustomTisResult result;
    result.per_token = packed(out.pg_loss);
    result.loss_mask = packed_from_responses(batch, total_lengths, out.loss_masks);
    for (size_t i = 0; i < out.metric_names.size(); ++i) {
      result.metrics.emplace_back(out.metric_names[i], packed(out.metric_values[i]));
    }
    return result;
  };
}

}  // namespace ooze::trainer
