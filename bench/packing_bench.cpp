// Batch layout on a long-tailed rollout batch: 1000 samples whose lengths are drawn from a
// log-normal (median 600 tokens, sigma 1, capped at 16k; fixed seed), laid out for 8
// data-parallel ranks with --use-dynamic-batch-size --max-tokens-per-gpu 16384 --balance-data.
// Baselines are measured in the same run:
//
//   padding_fraction  ours: the share of token slots wasted, counting that ranks run micro-batch
//                     m in lockstep (every rank waits for the fullest micro-batch m of any rank):
//                     1 - real tokens / (ranks * sum over m of the largest micro-batch m). Packed
//                     micro-batches themselves hold no padding.
//                     baseline: every sequence padded to the batch's longest, 1 - real / (n * max).
//   dp_balance        max / mean tokens per rank; baseline: contiguous split (n / 8 in order).
//   pack_time         plan + pack of every micro-batch of every rank, with a loss mask and four
//                     per-token values; baseline: building the padded [n, max] batch of the same
//                     tensors. Median of 5 runs.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "core/load_time_settings.h"
#include "fsdp/packing.h"

using namespace ooze::fsdp;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kSamples = 1000;
constexpr int kRanks = 8;
constexpr int64_t kMaxTokensPerGpu = 16384;
const std::vector<std::string> kValueNames = {"advantages", "old_log_probs", "ref_log_probs",
                                              "rollout_log_probs"};

std::vector<PackingSample> make_batch() {
  std::mt19937_64 rng(1234);
  std::lognormal_distribution<double> draw(std::log(600.0), 1.0);
  std::vector<PackingSample> samples;
  for (int i = 0; i < kSamples; ++i) {
    const int64_t length = std::clamp<int64_t>(std::llround(draw(rng)), 2, 16384);
    const int64_t prompt = 1 + static_cast<int64_t>(rng() % std::min<int64_t>(length - 1, 256));
    PackingSample sample;
    sample.tokens = at::randint(0, 150000, {length}, at::kLong);
    sample.response_length = length - prompt;
    for (const std::string& name : kValueNames) {
      sample.response_values[name] = at::randn({sample.response_length});
    }
    samples.push_back(std::move(sample));
  }
  return samples;
}

void print_line(const std::string& metric, double value, const std::string& unit, double baseline) {
  std::printf(
      "{\"bench\": \"packing.lognormal_1k.%dranks\", \"metric\": \"%s\", \"value\": %.6g, "
      "\"unit\": \"%s\", \"baseline\": %.6g, \"ratio\": %.4f}\n",
      kRanks, metric.c_str(), value, unit.c_str(), baseline, value / baseline);
  std::fflush(stdout);
}

double median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  return xs[xs.size() / 2];
}

int64_t tokens_of(const std::vector<int64_t>& lengths, const std::vector<int64_t>& indices) {
  int64_t total = 0;
  for (int64_t index : indices) total += lengths[index];
  return total;
}

std::vector<PackedMicroBatch> pack_everything(const std::vector<PackingSample>& samples,
                                              const PackingOptions& options) {
  const BatchPlan plan = plan_batch(sample_lengths(samples), kRanks, options);
  std::vector<PackedMicroBatch> packed;
  for (const auto& rank : plan.micro_batches) {
    for (const auto& indices : rank) packed.push_back(pack_micro_batch(samples, indices));
  }
  return packed;
}

// The padded layout: [n, max] tokens, mask and values, sequences left-aligned.
std::vector<at::Tensor> pad_everything(const std::vector<PackingSample>& samples) {
  int64_t longest = 0;
  for (const PackingSample& sample : samples) longest = std::max(longest, sample.length());
  const int64_t n = static_cast<int64_t>(samples.size());
  std::vector<at::Tensor> padded = {at::zeros({n, longest}, at::kLong),
                                    at::zeros({n, longest}, at::kFloat)};
  for (size_t v = 0; v < kValueNames.size(); ++v) {
    padded.push_back(at::zeros({n, longest}, at::kFloat));
  }
  for (int64_t i = 0; i < n; ++i) {
    const PackingSample& sample = samples[i];
    const int64_t prompt = sample.prompt_length(), response = sample.response_length;
    padded[0][i].narrow(0, 0, sample.length()).copy_(sample.tokens);
    padded[1][i].narrow(0, prompt, response).fill_(1.0);
    for (size_t v = 0; v < kValueNames.size(); ++v) {
      padded[2 + v][i].narrow(0, prompt, response).copy_(sample.response_values.at(kValueNames[v]));
    }
  }
  return padded;
}

}  // namespace

int main(int, char** argv) {
  ooze::start_with_load_time_settings(argv);  // first: it may start this program again
  at::set_num_threads(1);
  const std::vector<PackingSample> samples = make_batch();
  const std::vector<int64_t> lengths = sample_lengths(samples);
  int64_t total = 0, longest = 0;
  for (int64_t length : lengths) {
    total += length;
    longest = std::max(longest, length);
  }

  PackingOptions options;
  options.use_dynamic_batch_size = true;
  options.max_tokens_per_gpu = kMaxTokensPerGpu;
  options.balance_data = true;
  const BatchPlan plan = plan_batch(lengths, kRanks, options);

  // Padding: lockstep waste of our plan vs padding every sequence to the longest.
  int64_t slots = 0;
  for (int64_t m = 0; m < plan.num_micro_batches(); ++m) {
    int64_t fullest = 0;
    for (const auto& rank : plan.micro_batches) {
      fullest = std::max(fullest, tokens_of(lengths, rank[m]));
    }
    slots += fullest * kRanks;
  }
  const double padding = 1.0 - static_cast<double>(total) / static_cast<double>(slots);
  const double padded_baseline =
      1.0 - static_cast<double>(total) / static_cast<double>(longest * kSamples);
  print_line("padding_fraction", padding, "fraction", padded_baseline);

  // DP balance: Karmarkar–Karp vs a contiguous split.
  const double mean = static_cast<double>(total) / kRanks;
  int64_t heaviest = 0, heaviest_contiguous = 0;
  for (const auto& rank : plan.micro_batches) {
    int64_t tokens = 0;
    for (const auto& micro_batch : rank) tokens += tokens_of(lengths, micro_batch);
    heaviest = std::max(heaviest, tokens);
  }
  for (int r = 0; r < kRanks; ++r) {
    int64_t tokens = 0;
    for (int i = r * kSamples / kRanks; i < (r + 1) * kSamples / kRanks; ++i) tokens += lengths[i];
    heaviest_contiguous = std::max(heaviest_contiguous, tokens);
  }
  print_line("dp_balance_max_over_mean", static_cast<double>(heaviest) / mean, "ratio",
             static_cast<double>(heaviest_contiguous) / mean);

  // Time: plan + pack vs building the padded batch.
  std::vector<double> pack_times, pad_times;
  for (int repeat = 0; repeat < 5; ++repeat) {
    auto start = Clock::now();
    std::vector<PackedMicroBatch> packed = pack_everything(samples, options);
    pack_times.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    start = Clock::now();
    std::vector<at::Tensor> padded = pad_everything(samples);
    pad_times.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  print_line("pack_time", median(pack_times), "ms", median(pad_times));
  return 0;
}
