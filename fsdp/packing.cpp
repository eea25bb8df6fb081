#include "fsdp/packing.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/logging.h"
#include "fsdp/balanced_partition.h"

namespace ooze::fsdp {
namespace {

std::string str(int64_t value) { return std::to_string(value); }

int64_t total_tokens(const std::vector<int64_t>& lengths, const std::vector<int64_t>& samples) {
  int64_t total = 0;
  for (int64_t index : samples) total += lengths[index];
  return total;
}

void check_lengths(const char* where, const std::vector<int64_t>& lengths) {
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] < 1) {
      throw Error(std::string(where) + ": sample " + std::to_string(i) + " has " + str(lengths[i]) +
                  " tokens; every sample needs at least one token");
    }
  }
}

void check_rank_samples(const char* where, const std::vector<int64_t>& lengths,
                        const std::vector<int64_t>& rank_samples) {
  for (int64_t index : rank_samples) {
    if (index < 0 || index >= static_cast<int64_t>(lengths.size())) {
      throw Error(std::string(where) + ": sample index " + str(index) +
                  " is outside the rollout batch of " + std::to_string(lengths.size()) +
                  " samples");
    }
  }
}

// Maps positions within `rank_samples` (as karmarkar_karp_partition returns) to batch indices.
std::vector<std::vector<int64_t>> to_batch_indices(const std::vector<std::vector<int64_t>>& parts,
                                                   const std::vector<int64_t>& rank_samples) {
  std::vector<std::vector<int64_t>> result;
  for (const std::vector<int64_t>& part : parts) {
    std::vector<int64_t> indices;
    for (int64_t position : part) indices.push_back(rank_samples[position]);
    std::sort(indices.begin(), indices.end());
    result.push_back(std::move(indices));
  }
  return result;
}

std::vector<std::vector<int64_t>> karmarkar_karp_split(const std::vector<int64_t>& lengths,
                                                       const std::vector<int64_t>& rank_samples,
                                                       int64_t num_parts, bool equal_counts) {
  std::vector<int64_t> weights;
  for (int64_t index : rank_samples) weights.push_back(lengths[index]);
  return to_batch_indices(karmarkar_karp_partition(weights, num_parts, equal_counts), rank_samples);
}

// First-fit decreasing: longest sample first, each into the first micro-batch with room, a new one
// when none has. A sample over the budget opens a micro-batch that nothing else fits into.
std::vector<std::vector<int64_t>> first_fit_decreasing(const std::vector<int64_t>& lengths,
                                                       const std::vector<int64_t>& rank_samples,
                                                       int64_t budget) {
  std::vector<int64_t> order = rank_samples;
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return lengths[a] > lengths[b]; });
  std::vector<std::vector<int64_t>> bins;
  std::vector<int64_t> bin_tokens;
  for (int64_t index : order) {
    size_t bin = 0;
    while (bin < bins.size() && bin_tokens[bin] + lengths[index] > budget) ++bin;
    if (bin == bins.size()) {
      bins.emplace_back();
      bin_tokens.push_back(0);
    }
    bins[bin].push_back(index);
    bin_tokens[bin] += lengths[index];
  }
  for (std::vector<int64_t>& bin : bins) std::sort(bin.begin(), bin.end());
  return bins;
}

bool within_budget(const std::vector<int64_t>& lengths,
                   const std::vector<std::vector<int64_t>>& micro_batches, int64_t budget) {
  for (const std::vector<int64_t>& micro_batch : micro_batches) {
    if (micro_batch.size() > 1 && total_tokens(lengths, micro_batch) > budget) return false;
  }
  return true;
}

std::vector<std::vector<int64_t>> split_dynamic(const std::vector<int64_t>& lengths,
                                                const std::vector<int64_t>& rank_samples,
                                                int64_t num_micro_batches, int64_t budget) {
  for (int64_t index : rank_samples) {
    if (lengths[index] > budget) {
      OOZE_LOG(WARN) << "sample " << index << " has " << lengths[index]
                     << " tokens, more than a micro-batch's budget of " << budget
                     << " (--max-tokens-per-gpu times --context-parallel-size): it gets a "
                        "micro-batch of its own (raise either if that runs out of memory)";
    }
  }
  // Balanced micro-batches when the budget allows; otherwise the first-fit decreasing packing
  // (which fits by construction), its heaviest micro-batches halved until there are enough.
  std::vector<std::vector<int64_t>> micro_batches =
      karmarkar_karp_split(lengths, rank_samples, num_micro_batches, /*equal_counts=*/false);
  if (!within_budget(lengths, micro_batches, budget)) {
    micro_batches = first_fit_decreasing(lengths, rank_samples, budget);
    while (static_cast<int64_t>(micro_batches.size()) < num_micro_batches) {
      int64_t heaviest = -1, heaviest_tokens = -1;
      for (size_t m = 0; m < micro_batches.size(); ++m) {
        const int64_t tokens = total_tokens(lengths, micro_batches[m]);
        if (micro_batches[m].size() > 1 && tokens > heaviest_tokens) {
          heaviest = static_cast<int64_t>(m);
          heaviest_tokens = tokens;
        }
      }
      if (heaviest < 0) {  // every micro-batch holds one sample: the rest stay empty
        micro_batches.emplace_back();
        continue;
      }
      std::vector<std::vector<int64_t>> halves =
          karmarkar_karp_split(lengths, micro_batches[heaviest], 2, /*equal_counts=*/false);
      micro_batches[heaviest] = std::move(halves[0]);
      micro_batches.push_back(std::move(halves[1]));
    }
  }
  // Heaviest first on every rank: ranks step through micro-batches in lockstep, so pairing the
  // heavy ones together makes the sum over steps of the slowest rank's work smallest.
  std::stable_sort(micro_batches.begin(), micro_batches.end(),
                   [&](const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
                     return total_tokens(lengths, a) > total_tokens(lengths, b);
                   });
  return micro_batches;
}

std::vector<std::vector<int64_t>> split_fixed(const std::vector<int64_t>& rank_samples,
                                              int64_t num_micro_batches) {
  const int64_t n = static_cast<int64_t>(rank_samples.size());
  std::vector<std::vector<int64_t>> micro_batches(num_micro_batches);
  int64_t next = 0;
  for (int64_t m = 0; m < num_micro_batches; ++m) {
    const int64_t size = n / num_micro_batches + (m < n % num_micro_batches ? 1 : 0);
    micro_batches[m].assign(rank_samples.begin() + next, rank_samples.begin() + next + size);
    next += size;
  }
  return micro_batches;
}

std::string sample_name(int64_t index) { return "pack_micro_batch: sample " + str(index); }

void check_sample(const PackingSample& sample, int64_t index, const PackingSample& reference) {
  if (!sample.tokens.defined() || sample.tokens.dim() != 1 ||
      sample.tokens.scalar_type() != at::kLong) {
    throw Error(sample_name(index) + ": tokens must be a 1-D int64 tensor");
  }
  const int64_t length = sample.length(), response = sample.response_length;
  if (response < 0 || response >= length) {
    throw Error(sample_name(index) + ": response_length = " + str(response) + " with " +
                str(length) +
                " tokens; it must be in [0, L - 1] (a response needs at least one prompt token "
                "before it)");
  }
  if (sample.tokens.device() != reference.tokens.device()) {
    throw Error(sample_name(index) + ": tokens are on " + sample.tokens.device().str() +
                " but sample 0's are on " + reference.tokens.device().str() +
                "; move every sample to one device");
  }
  for (const auto& [name, value] : sample.response_values) {
    auto expected = reference.response_values.find(name);
    if (expected == reference.response_values.end()) {
      throw Error(sample_name(index) + ": has value '" + name +
                  "' that sample 0 lacks; every sample needs the same values");
    }
    if (!value.defined() || value.dim() != 1 || value.numel() != response) {
      throw Error(sample_name(index) + ": value '" + name + "' must be 1-D of length " +
                  "response_length = " + str(response) +
                  (value.defined() ? ", got " + str(value.numel()) + " elements" : ", undefined"));
    }
    if (!at::isFloatingType(value.scalar_type()) ||
        value.scalar_type() != expected->second.scalar_type()) {
      throw Error(sample_name(index) + ": value '" + name + "' has dtype " +
                  std::string(c10::toString(value.scalar_type())) + "; it must be floating and " +
                  "match sample 0's " + std::string(c10::toString(expected->second.scalar_type())));
    }
  }
  for (const auto& entry : reference.response_values) {
    if (sample.response_values.count(entry.first) == 0) {
      throw Error(sample_name(index) + ": lacks value '" + entry.first +
                  "' that sample 0 has; every sample needs the same values");
    }
  }
  if (sample.response_mask.defined() &&
      (sample.response_mask.dim() != 1 || sample.response_mask.numel() != response)) {
    throw Error(sample_name(index) + ": response_mask must be 1-D of length response_length = " +
                str(response) + ", got " + str(sample.response_mask.numel()) + " elements");
  }
}

}  // namespace

const at::Tensor& PackedMicroBatch::value(const std::string& name) const {
  auto found = token_values.find(name);
  if (found != token_values.end()) return found->second;
  std::string names;
  for (const auto& entry : token_values) names += (names.empty() ? "" : ", ") + entry.first;
  throw Error("PackedMicroBatch has no value '" + name + "'; it has: " +
              (names.empty() ? "none" : names) + ". Set it in every sample's response_values.");
}

const OptionFields<PackingOptions>& PackingOptions::fields() {
  using O = PackingOptions;
  static const OptionFields<O> fields = [] {
    OptionFields<O> f;
    f.section("batching");
    f.add("micro_batch_size", &O::micro_batch_size,
          "Samples per forward/backward on one rank (without --use-dynamic-batch-size); "
          "gradients accumulate over the rank's micro-batches.")
        .min(1);
    f.add("use_dynamic_batch_size", &O::use_dynamic_batch_size,
          "Fill micro-batches up to --max-tokens-per-gpu tokens instead of --micro-batch-size "
          "samples.");
    f.add("max_tokens_per_gpu", &O::max_tokens_per_gpu,
          "Token budget of one micro-batch with --use-dynamic-batch-size, on each rank (with "
          "context parallelism, of each rank's share); a longer sample gets a micro-batch of its "
          "own.")
        .min(1);
    f.add("balance_data", &O::balance_data,
          "Balance token counts across data-parallel ranks (Karmarkar-Karp) instead of dealing "
          "samples round robin.");
    f.add_internal("equal_samples_per_rank", &O::equal_samples_per_rank);
    f.add_internal("context_parallel_size", &O::context_parallel_size);
    f.add_rule([](const O& options) { options.validate(); });
    return f;
  }();
  return fields;
}

void PackingOptions::validate() const {
  if (micro_batch_size < 1) {
    throw ConfigError("micro_batch_size = " + str(micro_batch_size) + " must be at least 1");
  }
  if (use_dynamic_batch_size && max_tokens_per_gpu < 1) {
    throw ConfigError(
        "use_dynamic_batch_size needs a token budget: set --max-tokens-per-gpu "
        "(got max_tokens_per_gpu = " +
        str(max_tokens_per_gpu) + ")");
  }
  if (context_parallel_size < 1) {
    throw ConfigError("context_parallel_size = " + str(context_parallel_size) +
                      " must be at least 1 (--context-parallel-size)");
  }
}

std::vector<int64_t> sample_lengths(const std::vector<PackingSample>& samples) {
  std::vector<int64_t> lengths;
  lengths.reserve(samples.size());
  for (const PackingSample& sample : samples) lengths.push_back(sample.length());
  return lengths;
}

std::vector<std::vector<int64_t>> split_across_ranks(const std::vector<int64_t>& lengths,
                                                     int64_t num_ranks,
                                                     const PackingOptions& options) {
  if (num_ranks < 1) {
    throw Error("split_across_ranks: num_ranks = " + str(num_ranks) + " must be at least 1");
  }
  const int64_t cp_size = options.context_parallel_size;
  if (cp_size < 1 || num_ranks % cp_size != 0) {
    throw Error("split_across_ranks: " + str(num_ranks) +
                " ranks do not form whole context-parallel groups of " + str(cp_size) +
                " (--context-parallel-size must divide the trainer's world size)");
  }
  const int64_t num_groups = num_ranks / cp_size;
  const int64_t n = static_cast<int64_t>(lengths.size());
  if (n < num_groups) {
    throw Error("split_across_ranks: " + str(n) + " samples cannot be split across " +
                str(num_groups) +
                " data-parallel ranks: every rank needs at least one sample. Raise the batch "
                "(rollout_batch_size * n_samples_per_prompt) or use fewer ranks.");
  }
  check_lengths("split_across_ranks", lengths);
  std::vector<std::vector<int64_t>> groups(num_groups);
  if (options.balance_data) {
    std::vector<int64_t> all(lengths.size());
    std::iota(all.begin(), all.end(), 0);
    groups = karmarkar_karp_split(lengths, all, num_groups, options.equal_samples_per_rank);
  } else {
    for (int64_t i = 0; i < n; ++i) groups[i % num_groups].push_back(i);
  }
  // Rank r belongs to data-parallel group r / C.
  std::vector<std::vector<int64_t>> ranks;
  ranks.reserve(static_cast<size_t>(num_ranks));
  for (int64_t r = 0; r < num_ranks; ++r) ranks.push_back(groups[r / cp_size]);
  return ranks;
}

int64_t count_micro_batches(const std::vector<int64_t>& lengths,
                            const std::vector<int64_t>& rank_samples,
                            const PackingOptions& options) {
  options.validate();
  check_rank_samples("count_micro_batches", lengths, rank_samples);
  if (!options.use_dynamic_batch_size) {
    const int64_t n = static_cast<int64_t>(rank_samples.size());
    return (n + options.micro_batch_size - 1) / options.micro_batch_size;
  }
  return static_cast<int64_t>(
      first_fit_decreasing(lengths, rank_samples, options.micro_batch_token_budget()).size());
}

std::vector<std::vector<int64_t>> split_into_micro_batches(const std::vector<int64_t>& lengths,
                                                           const std::vector<int64_t>& rank_samples,
                                                           int64_t num_micro_batches,
                                                           const PackingOptions& options) {
  const int64_t needed = count_micro_batches(lengths, rank_samples, options);
  if (num_micro_batches < needed || num_micro_batches < 1) {
    throw Error("split_into_micro_batches: " + str(num_micro_batches) +
                " micro-batches are too few for this rank's " +
                std::to_string(rank_samples.size()) + " samples, which need " + str(needed) +
                "; use the maximum of count_micro_batches over all ranks");
  }
  if (options.use_dynamic_batch_size) {
    return split_dynamic(lengths, rank_samples, num_micro_batches,
                         options.micro_batch_token_budget());
  }
  return split_fixed(rank_samples, num_micro_batches);
}

BatchPlan plan_batch(const std::vector<int64_t>& lengths, int64_t num_ranks,
                     const PackingOptions& options) {
  options.validate();
  const std::vector<std::vector<int64_t>> ranks = split_across_ranks(lengths, num_ranks, options);
  int64_t num_micro_batches = 1;
  for (const std::vector<int64_t>& rank_samples : ranks) {
    num_micro_batches =
        std::max(num_micro_batches, count_micro_batches(lengths, rank_samples, options));
  }
  BatchPlan plan;
  for (const std::vector<int64_t>& rank_samples : ranks) {
    plan.micro_batches.push_back(
        split_into_micro_batches(lengths, rank_samples, num_micro_batches, options));
  }
  return plan;
}

void check_samples(const std::vector<PackingSample>& samples) {
  for (size_t i = 0; i < samples.size(); ++i) {
    check_sample(samples[i], static_cast<int64_t>(i), samples[0]);
  }
}

PackedMicroBatch pack_micro_batch(const std::vector<PackingSample>& samples,
                                  const std::vector<int64_t>& sample_indices) {
  const int64_t batch_size = static_cast<int64_t>(samples.size());
  for (int64_t index : sample_indices) {
    if (index < 0 || index >= batch_size) {
      throw Error("pack_micro_batch: sample index " + str(index) +
                  " is outside the rollout batch of " + str(batch_size) + " samples");
    }
  }
  if (!samples.empty()) check_sample(samples[0], 0, samples[0]);
  int64_t total = 0, max_seqlen = 0;
  for (int64_t index : sample_indices) {
    check_sample(samples[index], index, samples[0]);
    total += samples[index].length();
    max_seqlen = std::max(max_seqlen, samples[index].length());
  }
  if (total > std::numeric_limits<int32_t>::max()) {
    throw Error("pack_micro_batch: " + str(total) +
                " tokens do not fit int32 cu_seqlens; lower --max-tokens-per-gpu or "
                "--micro-batch-size");
  }

  const at::Device device = samples.empty() ? at::Device(at::kCPU) : samples[0].tokens.device();
  const int64_t num_samples = static_cast<int64_t>(sample_indices.size());
  at::Tensor position_ids = at::empty({total}, at::kLong);
  at::Tensor cu_seqlens = at::empty({num_samples + 1}, at::kInt);
  int64_t* positions = position_ids.data_ptr<int64_t>();
  int32_t* offsets = cu_seqlens.data_ptr<int32_t>();
  offsets[0] = 0;
  int64_t start = 0;
  for (int64_t b = 0; b < num_samples; ++b) {
    const int64_t length = samples[sample_indices[b]].length();
    for (int64_t t = 0; t < length; ++t) positions[start + t] = t;
    start += length;
    offsets[b + 1] = static_cast<int32_t>(start);
  }

  PackedMicroBatch batch;
  batch.position_ids = position_ids.to(device);
  batch.cu_seqlens = cu_seqlens.to(device);
  batch.max_seqlen = max_seqlen;
  batch.sample_indices = sample_indices;
  batch.tokens = at::empty({total}, at::TensorOptions().dtype(at::kLong).device(device));
  batch.loss_mask = at::zeros({total}, at::TensorOptions().dtype(at::kFloat).device(device));
  if (!samples.empty()) {
    for (const auto& [name, value] : samples[0].response_values) {
      batch.token_values[name] = at::zeros({total}, value.options().device(device));
    }
  }
  start = 0;
  for (int64_t index : sample_indices) {
    const PackingSample& sample = samples[index];
    const int64_t length = sample.length(), response = sample.response_length;
    const int64_t response_start = start + length - response;
    batch.response_lengths.push_back(response);
    batch.tokens.narrow(0, start, length).copy_(sample.tokens);
    at::Tensor mask = batch.loss_mask.narrow(0, response_start, response);
    if (sample.response_mask.defined()) {
      mask.copy_(sample.response_mask);
    } else {
      mask.fill_(1.0);
    }
    for (const auto& [name, value] : sample.response_values) {
      batch.token_values[name].narrow(0, response_start, response).copy_(value);
    }
    start += length;
  }
  return batch;
}

std::vector<at::Tensor> unpack_responses(const PackedMicroBatch& batch,
                                         const at::Tensor& per_token_output) {
  const int64_t total = batch.num_tokens();
  if (!per_token_output.defined() || per_token_output.dim() < 1 ||
      per_token_output.size(0) != total) {
    throw Error("unpack_responses: the output must have one row per packed token (" + str(total) +
                "), got " +
                (per_token_output.defined() && per_token_output.dim() >= 1
                     ? str(per_token_output.size(0)) + " rows"
                     : std::string("no rows")));
  }
  const at::Tensor offsets = batch.cu_seqlens.to(at::kCPU).to(at::kLong);
  const int64_t num_samples = batch.num_samples();
  if (offsets.numel() != num_samples + 1 ||
      static_cast<int64_t>(batch.response_lengths.size()) != num_samples) {
    throw Error("unpack_responses: the micro-batch is inconsistent: " + str(num_samples) +
                " samples but " + str(offsets.numel()) + " cu_seqlens entries and " +
                std::to_string(batch.response_lengths.size()) + " response lengths");
  }
  const int64_t* offset = offsets.data_ptr<int64_t>();
  std::vector<at::Tensor> responses;
  responses.reserve(num_samples);
  for (int64_t b = 0; b < num_samples; ++b) {
    const int64_t response = batch.response_lengths[b];
    if (response < 0 || response >= offset[b + 1] - offset[b]) {
      throw Error("unpack_responses: packed sample " + str(b) + " has response length " +
                  str(response) + " but " + str(offset[b + 1] - offset[b]) + " tokens");
    }
    responses.push_back(per_token_output.narrow(0, offset[b + 1] - response, response));
  }
  return responses;
}

}  // namespace ooze::fsdp
