// Batch layout for training, in three steps: split a rollout batch across data-parallel ranks
// balanced by token count, cut each rank's share into micro-batches (under a token budget, or a
// fixed number of samples) with the same number of micro-batches on every rank, then pack each
// micro-batch into flat per-token tensors. Model outputs are unpacked back to per-sample responses.
//
//   PackingOptions options = PackingOptions::fields().read(config);
//   BatchPlan plan = plan_batch(sample_lengths(samples), world_size, options);
//   for (const std::vector<int64_t>& indices : plan.micro_batches[rank]) {
//     PackedMicroBatch batch = pack_micro_batch(samples, indices);
//     at::Tensor log_probs = ...;  // [T], log p(token t | earlier tokens of its sample)
//     std::vector<at::Tensor> responses = unpack_responses(batch, log_probs);
//     // responses[b] belongs to samples[batch.sample_indices[b]]
//   }
//
// Packed layout of a micro-batch of B samples and T tokens: the samples' tokens concatenated, each
// sample being its prompt followed by its response. Per-token tensors are aligned to tokens: the
// value at index t refers to the token at index t (a log-prob is that of token t given the tokens
// before it in its sample); prompt positions hold 0. Every sample has at least one prompt token,
// so no response token is ever the first of its sample.
//
// Plain functions with no FSDP dependency: they use only ATen and core/.
#pragma once

#include <ATen/ATen.h>

#include <cereal/types/map.hpp>
#include <cereal/types/string.hpp>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/option_fields.h"
#include "core/tensor_serialization.h"

namespace ooze::fsdp {

// One rollout sample as the trainer receives it.
struct PackingSample {
  at::Tensor tokens;            // int64 [L]: prompt tokens, then response tokens
  int64_t response_length = 0;  // R: the last R tokens are the response; 0 <= R < L
  // Per-response-token values by name ("advantages", "returns", "values", "old_log_probs",
  // "ref_log_probs", "rollout_log_probs", ...), each floating [R]; entry r refers to token
  // L - R + r. Every sample of a batch carries the same names with the same dtype.
  std::map<std::string, at::Tensor> response_values;
  // Optional [R]: 0 on response tokens that must not count (truncated or masked turns), 1 on
  // the others. Undefined: every response token counts.
  at::Tensor response_mask;
  // Optional int64 [P']: with on-policy self-distillation, what the teacher reads in place of the
  // prompt (the prompt followed by privileged information); its response is the same. Packing
  // ignores it.
  at::Tensor teacher_prompt;

  int64_t length() const { return tokens.defined() ? tokens.numel() : 0; }
  int64_t prompt_length() const { return length() - response_length; }

  // Samples travel to the train actors as they are (core/tensor_serialization.h).
  template <class A>
  void serialize(A& ar) {
    ar(tokens, response_length, response_values, response_mask, teacher_prompt);
  }
};

// A packed micro-batch of B samples, T tokens in all.
struct PackedMicroBatch {
  at::Tensor tokens;        // int64 [T]
  at::Tensor position_ids;  // int64 [T]: 0, 1, ..., L_b - 1 within each sample
  at::Tensor cu_seqlens;    // int32 [B + 1]: 0, L_0, L_0 + L_1, ..., T
  int64_t max_seqlen = 0;   // the longest L_b; 0 when B = 0
  // float32 [T]: the sample's response mask (1 when it has none) on response tokens, 0 on prompt
  // tokens. Exactly the tokens whose loss counts.
  at::Tensor loss_mask;
  // The samples' response_values by name, each [T] of the samples' dtype, 0 on prompt tokens.
  std::map<std::string, at::Tensor> token_values;
  std::vector<int64_t> sample_indices;    // rollout-batch index of each packed sample, in order
  std::vector<int64_t> response_lengths;  // R_b of each packed sample

  int64_t num_samples() const { return static_cast<int64_t>(sample_indices.size()); }
  int64_t num_tokens() const { return tokens.defined() ? tokens.numel() : 0; }
  // token_values.at(name); throws ooze::Error naming the values there are when it is missing.
  const at::Tensor& value(const std::string& name) const;
};

// How a rollout batch is laid out for training. Field names are Slime's flags.
struct PackingOptions {
  // --use-dynamic-batch-size: a micro-batch holds as many samples as fit in max_tokens_per_gpu;
  // otherwise micro_batch_size samples.
  bool use_dynamic_batch_size = false;
  // --max-tokens-per-gpu: token budget of one micro-batch (dynamic mode only). A sample longer
  // than the budget gets a micro-batch of its own and a warning.
  int64_t max_tokens_per_gpu = 16384;
  // --micro-batch-size: samples per micro-batch (fixed mode only).
  int64_t micro_batch_size = 1;
  // --balance-data: split across ranks by Karmarkar–Karp on token counts; otherwise round robin
  // (sample i to rank i % world), as Slime does.
  bool balance_data = false;
  // With balance_data: give every rank the same number of samples (within one when the world
  // size does not divide the batch), as Slime does. Not a flag.
  bool equal_samples_per_rank = true;
  // --context-parallel-size C (declared with the trainer's flags): the C ranks of a
  // context-parallel group (ranks d * C .. d * C + C - 1) share every micro-batch, each holding
  // about 1/C of its tokens. So split_across_ranks deals the batch out to the W / C groups (every
  // rank of a group gets the group's share), and max_tokens_per_gpu counts tokens per CP rank:
  // a micro-batch holds up to C * max_tokens_per_gpu tokens.
  int64_t context_parallel_size = 1;

  // The flags above ("batching" section; --context-parallel-size is FsdpTransformerOptions',
  // which the trainer copies here). read() checks validate().
  static const OptionFields<PackingOptions>& fields();
  // Throws ConfigError on a micro_batch_size < 1, dynamic mode with max_tokens_per_gpu < 1, or
  // a context_parallel_size < 1.
  void validate() const;
  // The token budget of one whole micro-batch: max_tokens_per_gpu on each of its CP ranks.
  int64_t micro_batch_token_budget() const { return max_tokens_per_gpu * context_parallel_size; }

  template <class A>
  void save(A& ar) const {
    save_options(ar, *this);
  }
  template <class A>
  void load(A& ar) {
    load_options(ar, *this);
  }
};

// Which samples each rank trains on, micro-batch by micro-batch.
struct BatchPlan {
  // micro_batches[rank][m]: rollout-batch indices of micro-batch m on `rank`, increasing. Every
  // rank has the same number of micro-batches, so ranks issue the same collectives. A rank with
  // fewer samples than that number gets empty micro-batches (B = T = 0) at the end: it must still
  // run them (they add nothing to the loss).
  std::vector<std::vector<std::vector<int64_t>>> micro_batches;

  int64_t num_ranks() const { return static_cast<int64_t>(micro_batches.size()); }
  int64_t num_micro_batches() const {
    return micro_batches.empty() ? 0 : static_cast<int64_t>(micro_batches.front().size());
  }
};

// Token count (prompt + response) of every sample.
std::vector<int64_t> sample_lengths(const std::vector<PackingSample>& samples);

// Step 1. Rollout-batch indices for each of `num_ranks` ranks, increasing. With balance_data the
// token counts are balanced by karmarkar_karp_partition; otherwise round robin. Under context
// parallelism the batch is split across the num_ranks / C data-parallel groups and the C ranks of
// a group get the same indices. Throws ooze::Error when there are fewer samples than groups
// (every group needs at least one), when C does not divide num_ranks, or a length is < 1.
std::vector<std::vector<int64_t>> split_across_ranks(const std::vector<int64_t>& lengths,
                                                     int64_t num_ranks,
                                                     const PackingOptions& options);

// Step 2a. The fewest micro-batches this rank's samples (indices into `lengths`) need: in dynamic
// mode by first-fit decreasing under micro_batch_token_budget() (max_tokens_per_gpu per CP rank),
// otherwise ceil(n / micro_batch_size).
// Every rank must then use the maximum over ranks (all_reduce MAX when ranks plan on their own).
int64_t count_micro_batches(const std::vector<int64_t>& lengths,
                            const std::vector<int64_t>& rank_samples,
                            const PackingOptions& options);

// Step 2b. Cuts this rank's samples into exactly `num_micro_batches` micro-batches (at least
// count_micro_batches, else ooze::Error) of rollout-batch indices, each increasing.
// Dynamic mode: token counts balanced across micro-batches (Karmarkar–Karp, or first-fit decreasing
// then splitting the heaviest where that would break the budget); no micro-batch exceeds
// micro_batch_token_budget() unless it is a single longer sample (logged as a warning); heaviest
// micro-batch first, so that ranks running in lockstep wait on each other as little as possible.
// Fixed mode: consecutive samples, at most micro_batch_size per micro-batch, sizes as even as
// possible.
std::vector<std::vector<int64_t>> split_into_micro_batches(const std::vector<int64_t>& lengths,
                                                           const std::vector<int64_t>& rank_samples,
                                                           int64_t num_micro_batches,
                                                           const PackingOptions& options);

// Steps 1 and 2 for all ranks at once, when one process sees the whole rollout batch.
BatchPlan plan_batch(const std::vector<int64_t>& lengths, int64_t num_ranks,
                     const PackingOptions& options);

// Throws the ooze::Error pack_micro_batch would throw for the first malformed sample, without
// packing anything: a rank can check its whole share before the ranks start a step together.
void check_samples(const std::vector<PackingSample>& samples);

// Step 3. Packs samples[sample_indices[0]], samples[sample_indices[1]], ... in that order into
// tensors on the samples' device. The value names and dtypes come from samples[0], so an empty
// micro-batch still has every value (as [0] tensors). Throws ooze::Error naming the sample and
// what is wrong: tokens not int64 [L], response_length outside [0, L - 1], a value or mask not of
// length R, a value missing, extra or of another dtype, T beyond int32.
PackedMicroBatch pack_micro_batch(const std::vector<PackingSample>& samples,
                                  const std::vector<int64_t>& sample_indices);

// The response slice of a per-token model output ([T] or [T, ...], aligned as the packed tokens)
// for each packed sample, in packed order: element b holds rows cu_seqlens[b+1] - R_b ..
// cu_seqlens[b+1] - 1, a view of `per_token_output` (no copy). Throws ooze::Error when the output
// does not have T rows.
std::vector<at::Tensor> unpack_responses(const PackedMicroBatch& batch,
                                         const at::Tensor& per_token_output);

}  // namespace ooze::fsdp
