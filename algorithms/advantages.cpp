#include "algorithms/advantages.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace ooze::algorithms {
namespace {

void check_rewards(const char* where, const at::Tensor& rewards, int64_t group_size) {
  if (!rewards.defined() || rewards.dim() != 1 || !at::isFloatingType(rewards.scalar_type())) {
    throw Error(std::string(where) + ": rewards must be a 1-D floating tensor [N]");
  }
  if (group_size < 1 || rewards.numel() % group_size != 0) {
    throw Error(std::string(where) + ": " + std::to_string(rewards.numel()) +
                " rewards do not split into groups of n_samples_per_prompt = " +
                std::to_string(group_size) + " consecutive samples");
  }
}

// Every entry of `tensors` (named `name`) must be a 1-D tensor as long as the sample's mask.
void check_per_sample(const char* name, const std::vector<at::Tensor>& tensors,
                      const std::vector<at::Tensor>& masks) {
  if (tensors.size() != masks.size()) {
    throw Error(std::string("compute_advantages: ") + name + " holds " +
                std::to_string(tensors.size()) + " tensors for " + std::to_string(masks.size()) +
                " samples");
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].defined() || tensors[i].dim() != 1 || tensors[i].numel() != masks[i].numel()) {
      throw Error(std::string("compute_advantages: ") + name + "[" + std::to_string(i) +
                  "] must be 1-D with one value per response token (" +
                  std::to_string(masks[i].numel()) + ")");
    }
  }
}

// The output dtype: the rewards' dtype, at least fp32.
at::ScalarType result_dtype(const at::Tensor& rewards) {
  at::ScalarType dtype = rewards.scalar_type();
  return (dtype == at::kHalf || dtype == at::kBFloat16) ? at::kFloat : dtype;
}

// Broadcasts scalar per-sample advantages [N] over each sample's response tokens.
std::vector<at::Tensor> broadcast_over_tokens(const at::Tensor& per_sample,
                                              const std::vector<at::Tensor>& masks,
                                              at::ScalarType dtype) {
  at::Tensor host = per_sample.to(at::kCPU, at::kDouble).contiguous();
  std::vector<at::Tensor> out;
  out.reserve(masks.size());
  for (size_t i = 0; i < masks.size(); ++i) {
    out.push_back(
        at::full({masks[i].numel()}, host.data_ptr<double>()[i], masks[i].options().dtype(dtype)));
  }
  return out;
}

// [N, L] zero-padded copy of per-sample rows, L = the longest row (at least 1).
at::Tensor pad_rows(const std::vector<at::Tensor>& rows, const at::TensorOptions& options) {
  int64_t longest = 1;
  for (const at::Tensor& row : rows) longest = std::max(longest, row.numel());
  at::Tensor padded = at::zeros({static_cast<int64_t>(rows.size()), longest}, options);
  for (size_t i = 0; i < rows.size(); ++i) {
    padded[static_cast<int64_t>(i)].narrow(0, 0, rows[i].numel()).copy_(rows[i]);
  }
  return padded;
}

std::vector<at::Tensor> unpad_rows(const at::Tensor& padded, const std::vector<at::Tensor>& like) {
  std::vector<at::Tensor> out;
  out.reserve(like.size());
  for (size_t i = 0; i < like.size(); ++i) {
    out.push_back(padded[static_cast<int64_t>(i)].narrow(0, 0, like[i].numel()).clone());
  }
  return out;
}

}  // namespace

std::string advantage_estimator_name(AdvantageEstimator estimator) {
  switch (estimator) {
    case AdvantageEstimator::kGrpo:
      return "grpo";
    case AdvantageEstimator::kGspo:
      return "gspo";
    case AdvantageEstimator::kCispo:
      return "cispo";
    case AdvantageEstimator::kRloo:
      return "rloo";
    case AdvantageEstimator::kReinforcePlusPlus:
      return "reinforce_plus_plus";
    case AdvantageEstimator::kReinforcePlusPlusBaseline:
      return "reinforce_plus_plus_baseline";
    case AdvantageEstimator::kPpo:
      return "ppo";
  }
  return "?";
}

const OptionFields<AdvantageOptions>& AdvantageOptions::fields() {
  using O = AdvantageOptions;
  static const OptionFields<O> fields = [] {
    OptionFields<O> f;
    f.add_enum("advantage_estimator", &O::estimator,
               {AdvantageEstimator::kGrpo, AdvantageEstimator::kGspo, AdvantageEstimator::kCispo,
                AdvantageEstimator::kRloo, AdvantageEstimator::kReinforcePlusPlus,
                AdvantageEstimator::kReinforcePlusPlusBaseline, AdvantageEstimator::kPpo},
               advantage_estimator_name,
               "Advantage estimator; gspo and cispo use grpo's advantages with the GSPO "
               "(sequence-level ratio) and CISPO policy losses.");
    f.add("disable_rewards_normalization", &O::disable_rewards_normalization,
          "Do not subtract the group mean reward (grpo, gspo, cispo, "
          "reinforce_plus_plus_baseline).");
    f.add("disable_grpo_std_normalization", &O::disable_grpo_std_normalization,
          "Do not divide by the group's reward std (Dr.GRPO).");
    f.add("normalize_advantages", &O::normalize_advantages,
          "Whiten advantages over the step's response tokens across data-parallel ranks (always "
          "done for the reinforce_plus_plus estimators).");
    f.add("gamma", &O::gamma, "Discount of ppo (GAE) and reinforce_plus_plus returns.")
        .min(0)
        .max(1);
    f.add("lambd", &O::lambd, "GAE lambda of ppo.").min(0).max(1);
    f.add("kl_coef", &O::kl_coef,
          "KL penalty in the token rewards (ppo, reinforce_plus_plus estimators).")
        .min(0);
    return f;
  }();
  return fields;
}

bool AdvantageOptions::whitens_advantages() const {
  return normalize_advantages || estimator == AdvantageEstimator::kReinforcePlusPlus ||
         estimator == AdvantageEstimator::kReinforcePlusPlusBaseline;
}

at::Tensor group_normalized_rewards(const at::Tensor& rewards, int64_t group_size,
                                    bool divide_by_std, double epsilon) {
  check_rewards("group_normalized_rewards", rewards, group_size);
  at::Tensor groups = rewards.to(at::kDouble).reshape({-1, group_size});
  at::Tensor centered = groups - groups.mean(1, /*keepdim=*/true);
  if (divide_by_std) {
    // Unbiased (n - 1) std; a group of one has no spread, and its centered reward is 0 anyway.
    at::Tensor variance = group_size > 1 ? centered.square().sum(1, true) / (group_size - 1.0)
                                         : at::zeros_like(centered);
    centered = centered / (variance.sqrt() + epsilon);
  }
  return centered.reshape({-1}).to(rewards.scalar_type());
}

at::Tensor leave_one_out_rewards(const at::Tensor& rewards, int64_t group_size) {
  check_rewards("leave_one_out_rewards", rewards, group_size);
  if (group_size == 1) return at::zeros_like(rewards);
  at::Tensor groups = rewards.to(at::kDouble).reshape({-1, group_size});
  at::Tensor others_mean = (groups.sum(1, true) - groups) / (group_size - 1.0);
  return (groups - others_mean).reshape({-1}).to(rewards.scalar_type());
}

std::vector<at::Tensor> kl_penalized_token_rewards(const at::Tensor& rewards,
                                                   const std::vector<at::Tensor>& kl,
                                                   const std::vector<at::Tensor>& response_masks,
                                                   double kl_coef) {
  if (!kl.empty()) check_per_sample("kl", kl, response_masks);
  at::ScalarType dtype = result_dtype(rewards);
  at::Tensor host_rewards = rewards.to(at::kCPU, at::kDouble).contiguous();
  std::vector<at::Tensor> out;
  out.reserve(response_masks.size());
  for (size_t i = 0; i < response_masks.size(); ++i) {
    const at::Tensor& mask = response_masks[i];
    at::Tensor token_rewards = at::zeros({mask.numel()}, mask.options().dtype(dtype));
    if (!kl.empty()) {
      // Tokens outside the loss mask (tool output, ...) were not produced by the policy: their
      // KL says nothing about it, so they carry no penalty. where() rather than a product keeps
      // them exactly 0 even if their KL is not finite.
      at::Tensor weight = mask.to(mask.device(), dtype);
      at::Tensor penalty = kl[i].to(mask.device(), dtype) * weight * (-kl_coef);
      token_rewards = at::where(weight > 0, penalty, token_rewards);
    }
    at::Tensor counted = at::nonzero(mask.to(at::kCPU) > 0);
    if (counted.numel() > 0) {
      int64_t last = counted[-1][0].item<int64_t>();
      token_rewards[last] += host_rewards.data_ptr<double>()[i];
    }
    out.push_back(token_rewards);
  }
  return out;
}

at::Tensor reverse_discounted_sum(const at::Tensor& x, double discount, int64_t chunk_size) {
  if (!x.defined() || x.dim() != 2) {
    throw Error("reverse_discounted_sum: expected a 2-D tensor [N, L]");
  }
  if (chunk_size < 1) throw Error("reverse_discounted_sum: chunk_size must be >= 1");
  const int64_t rows = x.size(0), length = x.size(1);
  if (rows == 0 || length == 0) return x.clone();
  const int64_t chunk = std::min(chunk_size, length);
  const int64_t num_chunks = (length + chunk - 1) / chunk;
  at::Tensor padded = at::constant_pad_nd(x, {0, num_chunks * chunk - length}, 0);
  at::Tensor chunks = padded.reshape({rows, num_chunks, chunk});

  // within[k][t] = discount^(k - t) for k >= t: (chunks @ within)[t] sums the chunk's tail.
  auto host = at::TensorOptions().dtype(at::kDouble);
  at::Tensor steps = at::arange(chunk, host);
  at::Tensor distance = steps.unsqueeze(1) - steps.unsqueeze(0);
  at::Tensor within = at::where(distance >= 0, at::pow(discount, at::clamp_min(distance, 0)),
                                at::zeros_like(distance))
                          .to(x.options());
  // Position t of a chunk receives discount^(chunk - t) times the value at the next chunk's start.
  at::Tensor carry = at::pow(discount, chunk - steps).to(x.options());

  at::Tensor local = at::matmul(chunks, within);
  std::vector<at::Tensor> pieces(num_chunks);
  at::Tensor next_start = at::zeros({rows, 1}, x.options());
  for (int64_t c = num_chunks - 1; c >= 0; --c) {
    pieces[c] = local.select(1, c) + next_start * carry;
    next_start = pieces[c].narrow(1, 0, 1);
  }
  return at::cat(pieces, 1).narrow(1, 0, length);
}

GaeResult gae_loop(const std::vector<at::Tensor>& token_rewards,
                   const std::vector<at::Tensor>& values, double gamma, double lambd) {
  check_per_sample("values", values, token_rewards);
  GaeResult result;
  for (size_t i = 0; i < token_rewards.size(); ++i) {
    at::Tensor r = token_rewards[i].to(at::kCPU, at::kDouble).contiguous();
    at::Tensor v = values[i].to(at::kCPU, at::kDouble).contiguous();
    const int64_t length = r.numel();
    at::Tensor advantages = at::zeros({length}, r.options());
    const double* rp = r.data_ptr<double>();
    const double* vp = v.data_ptr<double>();
    double* ap = advantages.data_ptr<double>();
    double running = 0;
    for (int64_t t = length - 1; t >= 0; --t) {
      double next_value = t + 1 < length ? vp[t + 1] : 0.0;
      running = rp[t] + gamma * next_value - vp[t] + gamma * lambd * running;
      ap[t] = running;
    }
    at::TensorOptions out = values[i].options();
    result.advantages.push_back(advantages.to(out));
    result.returns.push_back((advantages + v).to(out));
  }
  return result;
}

GaeResult gae_chunked(const std::vector<at::Tensor>& token_rewards,
                      const std::vector<at::Tensor>& values, double gamma, double lambd) {
  check_per_sample("values", values, token_rewards);
  GaeResult result;
  if (values.empty()) return result;
  at::TensorOptions options = values[0].options();
  at::Tensor r = pad_rows(token_rewards, options);
  at::Tensor v = pad_rows(values, options);
  // Padding past each row's end is 0, so V_{R} = 0 and the padded deltas vanish.
  at::Tensor next_v = at::constant_pad_nd(v.narrow(1, 1, v.size(1) - 1), {0, 1}, 0);
  at::Tensor deltas = r + gamma * next_v - v;
  at::Tensor advantages = reverse_discounted_sum(deltas, gamma * lambd);
  result.advantages = unpad_rows(advantages, values);
  result.returns = unpad_rows(advantages + v, values);
  return result;
}

GaeResult gae(const std::vector<at::Tensor>& token_rewards, const std::vector<at::Tensor>& values,
              double gamma, double lambd) {
  const bool on_host = values.empty() || values[0].device().is_cpu();
  return on_host ? gae_loop(token_rewards, values, gamma, lambd)
                 : gae_chunked(token_rewards, values, gamma, lambd);
}

AdvantageResult compute_advantages(const AdvantageInputs& inputs, const AdvantageOptions& options) {
  at::NoGradGuard no_grad;
  check_rewards("compute_advantages", inputs.rewards, inputs.group_size);
  const auto& masks = inputs.response_masks;
  if (static_cast<int64_t>(masks.size()) != inputs.rewards.numel()) {
    throw Error("compute_advantages: " + std::to_string(masks.size()) + " response masks for " +
                std::to_string(inputs.rewards.numel()) + " rewards: give one mask per sample");
  }
  for (size_t i = 0; i < masks.size(); ++i) {
    if (!masks[i].defined() || masks[i].dim() != 1) {
      throw Error("compute_advantages: response_masks[" + std::to_string(i) +
                  "] must be a 1-D tensor over the sample's response tokens");
    }
  }
  const AdvantageEstimator estimator = options.estimator;
  const bool uses_kl = estimator == AdvantageEstimator::kPpo ||
                       estimator == AdvantageEstimator::kReinforcePlusPlus ||
                       estimator == AdvantageEstimator::kReinforcePlusPlusBaseline;
  if (uses_kl && options.kl_coef != 0) {
    if (inputs.kl.empty()) {
      throw Error("compute_advantages: kl_coef = " + std::to_string(options.kl_coef) +
                  " needs the per-token KL of every sample (AdvantageInputs::kl)");
    }
    check_per_sample("kl", inputs.kl, masks);
  }
  const at::ScalarType dtype = result_dtype(inputs.rewards);
  const std::vector<at::Tensor> no_kl;
  const std::vector<at::Tensor>& kl = (uses_kl && options.kl_coef != 0) ? inputs.kl : no_kl;

  AdvantageResult result;
  switch (estimator) {
    case AdvantageEstimator::kGrpo:
    case AdvantageEstimator::kGspo:
    case AdvantageEstimator::kCispo: {
      at::Tensor scalar = options.disable_rewards_normalization
                              ? inputs.rewards
                              : group_normalized_rewards(inputs.rewards, inputs.group_size,
                                                         !options.disable_grpo_std_normalization);
      result.advantages = broadcast_over_tokens(scalar, masks, dtype);
      break;
    }
    case AdvantageEstimator::kRloo:
      result.advantages = broadcast_over_tokens(
          leave_one_out_rewards(inputs.rewards, inputs.group_size), masks, dtype);
      break;
    case AdvantageEstimator::kReinforcePlusPlus: {
      std::vector<at::Tensor> token_rewards =
          kl_penalized_token_rewards(inputs.rewards, kl, masks, options.kl_coef);
      // The discounted return is GAE without a critic (V = 0) and with lambda = 1.
      std::vector<at::Tensor> no_values;
      for (const at::Tensor& r : token_rewards) no_values.push_back(at::zeros_like(r));
      result.advantages = gae(token_rewards, no_values, options.gamma, 1.0).advantages;
      break;
    }
    case AdvantageEstimator::kReinforcePlusPlusBaseline: {
      at::Tensor scalar = options.disable_rewards_normalization
                              ? inputs.rewards
                              : group_normalized_rewards(inputs.rewards, inputs.group_size,
                                                         /*divide_by_std=*/false);
      result.advantages = broadcast_over_tokens(scalar, masks, dtype);
      // As in the token rewards: no KL penalty on tokens outside the loss mask.
      for (size_t i = 0; i < kl.size(); ++i) {
        const at::Tensor counted = masks[i].to(masks[i].device(), dtype) > 0;
        const at::Tensor penalty = options.kl_coef * kl[i].to(masks[i].device(), dtype);
        result.advantages[i] =
            at::where(counted, result.advantages[i] - penalty, result.advantages[i]);
      }
      break;
    }
    case AdvantageEstimator::kPpo: {
      check_per_sample("values", inputs.values, masks);
      std::vector<at::Tensor> token_rewards =
          kl_penalized_token_rewards(inputs.rewards, kl, masks, options.kl_coef);
      std::vector<at::Tensor> values;
      values.reserve(inputs.values.size());
      for (size_t i = 0; i < inputs.values.size(); ++i) {
        values.push_back(inputs.values[i].to(masks[i].device(), dtype));
      }
      GaeResult gae_result = gae(token_rewards, values, options.gamma, options.lambd);
      result.advantages = std::move(gae_result.advantages);
      result.returns = std::move(gae_result.returns);
      return result;
    }
  }
  for (const at::Tensor& advantages : result.advantages)
    result.returns.push_back(advantages.clone());
  return result;
}

}  // namespace ooze::algorithms
