#include "models/log_probs.h"

#include <algorithm>
#include <sstream>
#include <string>

#include "core/error.h"
#include "models/log_softmax.h"

namespace ooze {
namespace models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// fp32 for fp32/bf16/fp16 inputs; fp64 stays fp64 so finite-difference checks are meaningful.
at::ScalarType accumulate_dtype(at::ScalarType compute) {
  return compute == at::kDouble ? at::kDouble : at::kFloat;
}

// The tempered fp32 logits of tokens [start, end): [end - start, V].
at::Tensor chunk_logits(const at::Tensor& hidden, const at::Tensor& weight, int64_t start,
                        int64_t end, double temperature) {
  at::Tensor logits =
      at::mm(hidden.slice(0, start, end), weight.t()).to(accumulate_dtype(weight.scalar_type()));
  if (temperature != 1.0) logits.div_(temperature);
  return logits;
}

std::string shape_text(const at::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

void check_arguments(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                     double temperature, int64_t chunk_tokens) {
  const std::string where = "compute_token_log_probs: ";
  if (!hidden.defined() || !weight.defined() || !targets.defined()) {
    throw Error(where + "hidden, head_weight and targets must all be defined tensors");
  }
  if (hidden.dim() != 2 || weight.dim() != 2 || hidden.size(1) != weight.size(1)) {
    throw Error(where + "expected hidden [T, H] and head_weight [V, H], got hidden " +
                shape_text(hidden) + " and head_weight " + shape_text(weight) +
                " (flatten packed batches to [T, H] first)");
  }
  if (targets.dim() != 1 || targets.size(0) != hidden.size(0)) {
    throw Error(where + "targets must be [T] with T = " + std::to_string(hidden.size(0)) +
                " (the rows of hidden), got " + shape_text(targets));
  }
  if (targets.scalar_type() != at::kLong) {
    throw Error(where + "targets must be int64, got " +
                std::string(c10::toString(targets.scalar_type())));
  }
  if (!at::isFloatingType(hidden.scalar_type()) || hidden.scalar_type() != weight.scalar_type()) {
    throw Error(where + "hidden and head_weight must share one floating dtype, got " +
                std::string(c10::toString(hidden.scalar_type())) + " and " +
                std::string(c10::toString(weight.scalar_type())));
  }
  if (hidden.device() != weight.device() || hidden.device() != targets.device()) {
    throw Error(where + "hidden, head_weight and targets must be on one device");
  }
  if (!(temperature > 0.0)) {
    throw Error(where + "temperature must be > 0, got " + std::to_string(temperature));
  }
  if (chunk_tokens < 1) {
    throw Error(where + "chunk_tokens must be >= 1, got " + std::to_string(chunk_tokens));
  }
  if (targets.numel() > 0) {
    const int64_t vocab = weight.size(0);
    const int64_t low = targets.min().item<int64_t>();
    const int64_t high = targets.max().item<int64_t>();
    if (low < 0 || high >= vocab) {
      throw Error(where + "targets must lie in [0, " + std::to_string(vocab) +
                  ") (the rows of head_weight), found ids from " + std::to_string(low) + " to " +
                  std::to_string(high));
    }
  }
}

// Saves hidden, weight, targets and per-token logsumexp (and entropy); recomputes logits per
// chunk in backward.
class TokenLogProbsFunction : public torch::autograd::Function<TokenLogProbsFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& hidden,
                               const at::Tensor& weight, const at::Tensor& targets,
                               double temperature, int64_t chunk_tokens, bool with_entropy) {
    const int64_t tokens = hidden.size(0);
    const auto options = hidden.options().dtype(accumulate_dtype(hidden.scalar_type()));
    at::Tensor log_probs = at::empty({tokens}, options);
    at::Tensor logsumexp = at::empty({tokens}, options);
    at::Tensor entropy = with_entropy ? at::empty({tokens}, options) : at::empty({0}, options);

    for (int64_t start = 0; start < tokens; start += chunk_tokens) {
      const int64_t end = std::min(tokens, start + chunk_tokens);
      at::Tensor logits = chunk_logits(hidden, weight, start, end, temperature);
      // log p_t = (z_t - max) - log sum exp(z - max), the sum in fp64 (models/log_softmax.h);
      // backward needs only lse = max + log sum.
      const at::Tensor max = std::get<0>(logits.max(1));
      const at::Tensor log_sum = log_sum_exp_shifted(logits, max);
      at::Tensor target_logits =
          logits.gather(1, targets.slice(0, start, end).unsqueeze(1)).squeeze(1);
      log_probs.slice(0, start, end).copy_((target_logits - max) - log_sum);
      const at::Tensor lse = max + log_sum;
      logsumexp.slice(0, start, end).copy_(lse);
      if (with_entropy) {
        at::Tensor log_p = logits.sub_(lse.unsqueeze(1));  // in place: logits are done
        at::Tensor p_log_p = log_p.exp().mul_(log_p);
        entropy.slice(0, start, end).copy_(p_log_p.sum({1}).neg_());
      }
    }

    ctx->save_for_backward({hidden, weight, targets, logsumexp, entropy});
    ctx->saved_data["temperature"] = temperature;
    ctx->saved_data["chunk_tokens"] = chunk_tokens;
    ctx->saved_data["with_entropy"] = with_entropy;
    ctx->set_materialize_grads(false);
    if (with_entropy) return {log_probs, entropy};
    return {log_probs};
  }

  // With z = logits / temperature, p = softmax(z), log p_t = z_t - lse and
  // H = -sum_k p_k log p_k:  d log p_t / dz = onehot(t) - p,  dH / dz_k = -p_k (log p_k + H).
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& hidden = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& targets = saved[2];
    const at::Tensor& logsumexp = saved[3];
    const at::Tensor& entropy = saved[4];
    const double temperature = ctx->saved_data["temperature"].toDouble();
    const int64_t chunk_tokens = ctx->saved_data["chunk_tokens"].toInt();
    const bool with_entropy = ctx->saved_data["with_entropy"].toBool();

    const at::Tensor grad_log_probs = grad_outputs[0];
    const at::Tensor grad_entropy = with_entropy ? grad_outputs[1] : at::Tensor();
    const bool need_hidden = ctx->needs_input_grad(0);
    const bool need_weight = ctx->needs_input_grad(1);
    variable_list grads(6);
    if ((!grad_log_probs.defined() && !grad_entropy.defined()) || (!need_hidden && !need_weight)) {
      return grads;
    }

    const at::ScalarType compute = weight.scalar_type();
    const at::ScalarType accumulate = accumulate_dtype(compute);
    const int64_t tokens = hidden.size(0);
    at::Tensor grad_hidden = need_hidden ? at::empty_like(hidden) : at::Tensor();
    // Summed over chunks in fp32 even for bf16 weights, so the result does not depend on the
    // chunk size beyond one final rounding.
    at::Tensor grad_weight =
        need_weight ? at::zeros(weight.sizes(), weight.options().dtype(accumulate)) : at::Tensor();

    for (int64_t start = 0; start < tokens; start += chunk_tokens) {
      const int64_t end = std::min(tokens, start + chunk_tokens);
      at::Tensor log_p = chunk_logits(hidden, weight, start, end, temperature)
                             .sub_(logsumexp.slice(0, start, end).unsqueeze(1));
      at::Tensor p = log_p.exp();
      at::Tensor grad_z;  // d loss / dz, [chunk, V], fp32
      if (grad_entropy.defined()) {
        grad_z = log_p.add_(entropy.slice(0, start, end).unsqueeze(1))
                     .mul_(p)
                     .mul_(grad_entropy.slice(0, start, end).to(accumulate).neg().unsqueeze(1));
      }
      if (grad_log_probs.defined()) {
        at::Tensor g = grad_log_probs.slice(0, start, end).to(accumulate).unsqueeze(1);
        at::Tensor target_index = targets.slice(0, start, end).unsqueeze(1);
        if (grad_z.defined()) {
          grad_z.sub_(p.mul_(g));
        } else {
          grad_z = p.mul_(g).neg_();
        }
        grad_z.scatter_add_(1, target_index, g);
      }
      if (temperature != 1.0) grad_z.div_(temperature);

      const at::Tensor grad_logits = grad_z.to(compute);
      const at::Tensor hidden_chunk = hidden.slice(0, start, end);
      if (need_hidden) grad_hidden.slice(0, start, end).copy_(at::mm(grad_logits, weight));
      if (need_weight) {
        if (compute == accumulate) {
          grad_weight.addmm_(grad_logits.t(), hidden_chunk);
        } else {
          grad_weight.add_(at::mm(grad_logits.t(), hidden_chunk));
        }
      }
    }
    grads[0] = grad_hidden;
    if (need_weight) grads[1] = grad_weight.to(compute);
    return grads;
  }
};

}  // namespace

TokenLogProbs compute_token_log_probs(const at::Tensor& hidden, const at::Tensor& head_weight,
                                      const at::Tensor& targets, double temperature,
                                      int64_t chunk_tokens, bool with_entropy) {
  check_arguments(hidden, head_weight, targets, temperature, chunk_tokens);
  variable_list outputs = TokenLogProbsFunction::apply(hidden, head_weight, targets, temperature,
                                                       chunk_tokens, with_entropy);
  TokenLogProbs result;
  result.log_probs = outputs[0];
  if (with_entropy) result.entropy = outputs[1];
  return result;
}

}  // namespace models
}  // namespace ooze
