// The log-probs a model directory gives a token sequence, from the plain model's training
// forward in fp64: an independent judge of what engines and teachers report over HTTP.
//
//   std::vector<double> expected = reference_log_probs(model_dir, tokens, /*response=*/4);
#pragma once

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "models/hf_checkpoint.h"
#include "models/model_config.h"
#include "models/transformer.h"

namespace ooze::testing {

// log p(tokens[t] | tokens[:t]) for each of the last `response` tokens.
inline std::vector<double> reference_log_probs(const std::string& model_dir,
                                               const std::vector<int64_t>& tokens,
                                               int64_t response) {
  models::TransformerModel model(models::load_model_config(model_dir));
  models::load_hf_weights(*model, model_dir);
  const int64_t n = static_cast<int64_t>(tokens.size());
  torch::NoGradGuard no_grad;
  const at::Tensor hidden = model->forward(at::tensor(tokens, at::kLong), at::arange(n, at::kLong),
                                           at::tensor({0, static_cast<int>(n)}, at::kInt));
  const at::Tensor log_probs = model->logits(hidden).to(at::kDouble).log_softmax(-1);
  std::vector<double> out;
  for (int64_t t = n - response; t < n; ++t) {
    out.push_back(log_probs[t - 1][tokens[t]].item<double>());
  }
  return out;
}

}  // namespace ooze::testing
