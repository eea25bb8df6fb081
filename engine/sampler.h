// Turns a step's next-token logits into tokens and log-probs, one row per sequence, each with
// its own parameters, in a few batched tensor operations.
//
// Reproducible sampling: row i draws its uniform number from (seed, draw_index) alone with a
// counter-based generator, and picks the token by inverse CDF: over the filtered distribution
// sorted by probability (ties by token id) when the row filters, over the whole distribution in
// token-id order when it does not (no sort: on a large vocabulary that is most of the cost).
// So a seeded sequence samples the same tokens whatever else shares its batch, and after a
// preemption.
//
// Filters apply in order to softmax(logits / T): top-k; then top-p on the top-k distribution
// renormalised (the smallest prefix, by probability, holding at least top_p of its mass);
// then min-p (drop tokens below min_p times the most likely one's probability); the most likely
// token always stays, and tokens of probability 0 are never drawn. The kept tokens are
// renormalised before the draw.
//
// Log-probs follow engine/request.h's definition: log softmax(logits / T) over the whole
// vocabulary (T = 1 for greedy rows), before filtering. top_logprobs lists the most likely
// tokens under that same distribution, ties by token id.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "engine/request.h"

namespace ooze::engine {

struct SamplingRow {
  double temperature = 1.0;  // 0: argmax
  double top_p = 1.0;
  int64_t top_k = -1;
  double min_p = 0.0;
  uint64_t seed = 0;
  uint64_t draw_index = 0;  // position of the token in the output (0 for the first)
  int64_t top_logprobs_num = 0;
};

struct SampledTokens {
  std::vector<int64_t> token_ids;
  std::vector<float> logprobs;
  std::vector<std::vector<TopLogProb>> top_logprobs;  // one list per row (empty if not asked)
};

// The uniform number in [0, 1) a row with this seed draws at this index.
double counter_uniform(uint64_t seed, uint64_t draw_index);

// logits: [rows, vocab] in any floating dtype (upcast to fp32 first), on any device. Throws
// ooze::Error when logits are not a 2-D floating tensor, rows.size() != logits.size(0), or a
// row's parameters are out of range (temperature < 0, top_p outside (0, 1], min_p outside
// [0, 1], top_k < -1, top_logprobs_num < 0).
SampledTokens sample_tokens(const torch::Tensor& logits, const std::vector<SamplingRow>& rows);

// The log-probs of given tokens (a prompt's, engine/request.h) under each row of `logits` at
// temperature 1: log softmax(logits.float())[targets[i]], the same computation as a greedy
// row's above, so a prompt token scores what it scored when it was sampled. With
// top_logprobs_num > 0, top_logprobs lists each row's most likely tokens (ties by token id).
// Throws ooze::Error when logits are not 2-D floating or targets.size() != logits.size(0).
SampledTokens score_tokens(const torch::Tensor& logits, const std::vector<int64_t>& targets,
                           int64_t top_logprobs_num);

}  // namespace ooze::engine
