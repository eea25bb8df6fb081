// Batch layout: the plan (ranks, micro-batches, budget), packing and unpacking, each checked
// against layouts computed here with plain loops from the samples themselves.
#include "fsdp/packing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/error.h"

namespace ooze::fsdp {
namespace packing_test {

const std::vector<std::string> kValueNames = {"advantages", "old_log_probs", "ref_log_probs",
                                              "rollout_log_probs"};

std::vector<int64_t> long_tailed_lengths(int n, uint64_t seed, double median = 600,
                                         int64_t cap = 16384) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> draw(std::log(median), 1.0);
  std::vector<int64_t> lengths;
  for (int i = 0; i < n; ++i) {
    lengths.push_back(std::clamp<int64_t>(std::llround(draw(rng)), 2, cap));
  }
  return lengths;
}

// Samples of the given lengths: random tokens, a response of 0 .. L-1 tokens (some empty), double
// values, and a 0/1 response mask on every other sample.
std::vector<PackingSample> make_samples(const std::vector<int64_t>& lengths, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<PackingSample> samples;
  for (size_t i = 0; i < lengths.size(); ++i) {
    const int64_t length = lengths[i];
    PackingSample sample;
    sample.tokens = at::empty({length}, at::kLong);
    for (int64_t t = 0; t < length; ++t) {
      sample.tokens[t] = static_cast<int64_t>(rng() % 50000);
    }
    sample.response_length = i % 7 == 3 ? 0 : static_cast<int64_t>(rng() % length);
    const int64_t response = sample.response_length;
    for (const std::string& name : kValueNames) {
      at::Tensor value = at::empty({response}, at::kDouble);
      for (int64_t r = 0; r < response; ++r) {
        value[r] = static_cast<double>(rng() % 100000) / 1000.0 - 50.0;
      }
      sample.response_values[name] = value;
    }
    if (i % 2 == 1) {
      sample.response_mask = at::empty({response}, at::kFloat);
      for (int64_t r = 0; r < response; ++r) sample.response_mask[r] = (rng() % 4 == 0) ? 0.f : 1.f;
    }
    samples.push_back(sample);
  }
  return samples;
}

int64_t tokens_of(const std::vector<int64_t>& lengths, const std::vector<int64_t>& indices) {
  int64_t total = 0;
  for (int64_t index : indices) total += lengths[index];
  return total;
}

// The invariants every plan must satisfy, checked from scratch.
void check_plan(const BatchPlan& plan, const std::vector<int64_t>& lengths, int64_t num_ranks,
                const PackingOptions& options) {
  ASSERT_EQ(plan.num_ranks(), num_ranks);
  const int64_t num_micro_batches = plan.num_micro_batches();
  ASSERT_GE(num_micro_batches, 1);
  std::vector<int> seen(lengths.size(), 0);
  for (int64_t rank = 0; rank < num_ranks; ++rank) {
    ASSERT_EQ(static_cast<int64_t>(plan.micro_batches[rank].size()), num_micro_batches)
        << "rank " << rank << ": every rank needs the same number of micro-batches";
    for (const auto& micro_batch : plan.micro_batches[rank]) {
      EXPECT_TRUE(std::is_sorted(micro_batch.begin(), micro_batch.end()));
      for (int64_t index : micro_batch) {
        ASSERT_GE(index, 0);
        ASSERT_LT(index, static_cast<int64_t>(lengths.size()));
        ++seen[index];
      }
      if (options.use_dynamic_batch_size) {
        if (micro_batch.size() > 1) {
          EXPECT_LE(tokens_of(lengths, micro_batch), options.max_tokens_per_gpu) << "rank " << rank;
        }
      } else {
        EXPECT_LE(static_cast<int64_t>(micro_batch.size()), options.micro_batch_size);
      }
    }
  }
  for (size_t i = 0; i < lengths.size(); ++i) {
    EXPECT_EQ(seen[i], 1) << "sample " << i << " must appear exactly once";
  }
}

PackingOptions dynamic_options(int64_t budget, bool balance = true) {
  PackingOptions options;
  options.use_dynamic_batch_size = true;
  options.max_tokens_per_gpu = budget;
  options.balance_data = balance;
  return options;
}

TEST(PackMicroBatch, MatchesTheLayoutBuiltByHand) {
  std::vector<PackingSample> samples = make_samples({9, 5, 12, 3, 7}, 11);
  const std::vector<int64_t> indices = {4, 0, 2, 3};
  PackedMicroBatch batch = pack_micro_batch(samples, indices);

  std::vector<int64_t> tokens, positions, cu_seqlens = {0};
  std::vector<double> loss_mask;
  std::map<std::string, std::vector<double>> values;
  int64_t max_seqlen = 0;
  for (int64_t index : indices) {
    const PackingSample& sample = samples[index];
    const int64_t length = sample.tokens.size(0), response = sample.response_length;
    const int64_t prompt = length - response;
    for (int64_t t = 0; t < length; ++t) {
      tokens.push_back(sample.tokens[t].item<int64_t>());
      positions.push_back(t);
      const bool is_response = t >= prompt;
      double mask = is_response ? 1.0 : 0.0;
      if (is_response && sample.response_mask.defined()) {
        mask = sample.response_mask[t - prompt].item<double>();
      }
      loss_mask.push_back(mask);
      for (const std::string& name : kValueNames) {
        values[name].push_back(
            is_response ? sample.response_values.at(name)[t - prompt].item<double>() : 0.0);
      }
    }
    cu_seqlens.push_back(cu_seqlens.back() + length);
    max_seqlen = std::max(max_seqlen, length);
  }

  const int64_t total = static_cast<int64_t>(tokens.size());
  ASSERT_EQ(batch.num_tokens(), total);
  ASSERT_EQ(batch.tokens.scalar_type(), at::kLong);
  ASSERT_EQ(batch.position_ids.scalar_type(), at::kLong);
  ASSERT_EQ(batch.cu_seqlens.scalar_type(), at::kInt);
  ASSERT_EQ(batch.loss_mask.scalar_type(), at::kFloat);
  ASSERT_EQ(batch.cu_seqlens.numel(), static_cast<int64_t>(cu_seqlens.size()));
  for (int64_t t = 0; t < total; ++t) {
    EXPECT_EQ(batch.tokens[t].item<int64_t>(), tokens[t]) << t;
    EXPECT_EQ(batch.position_ids[t].item<int64_t>(), positions[t]) << t;
    EXPECT_EQ(batch.loss_mask[t].item<double>(), loss_mask[t]) << t;
    for (const std::string& name : kValueNames) {
      EXPECT_EQ(batch.value(name)[t].item<double>(), values[name][t]) << name << " " << t;
    }
  }
  for (size_t b = 0; b < cu_seqlens.size(); ++b) {
    EXPECT_EQ(batch.cu_seqlens[b].item<int64_t>(), cu_seqlens[b]);
  }
  EXPECT_EQ(batch.max_seqlen, max_seqlen);
  EXPECT_EQ(batch.sample_indices, indices);
  EXPECT_EQ(batch.token_values.size(), kValueNames.size());
  EXPECT_EQ(batch.value("advantages").scalar_type(), at::kDouble);
}

// Plan, pack every micro-batch of every rank, unpack: each sample gets back exactly its values,
// its mask, and its response rows of a fake model output; every sample exactly once.
TEST(PackUnpack, RoundTripIsTheIdentity) {
  const std::vector<int64_t> lengths = long_tailed_lengths(60, 5, 40, 400);
  std::vector<PackingSample> samples = make_samples(lengths, 6);
  const PackingOptions options = dynamic_options(600);
  const BatchPlan plan = plan_batch(sample_lengths(samples), 3, options);
  check_plan(plan, lengths, 3, options);

  std::vector<int> unpacked(samples.size(), 0);
  for (const auto& rank : plan.micro_batches) {
    for (const auto& indices : rank) {
      PackedMicroBatch batch = pack_micro_batch(samples, indices);
      // A fake [T, 2] model output that depends on the token and its position.
      at::Tensor output = at::stack({batch.tokens.to(at::kDouble) * 3 + batch.position_ids,
                                     batch.position_ids.to(at::kDouble) - 0.5},
                                    1);
      std::vector<at::Tensor> rows = unpack_responses(batch, output);
      std::vector<at::Tensor> masks = unpack_responses(batch, batch.loss_mask);
      std::map<std::string, std::vector<at::Tensor>> values;
      for (const std::string& name : kValueNames) {
        values[name] = unpack_responses(batch, batch.value(name));
      }
      ASSERT_EQ(static_cast<int64_t>(rows.size()), batch.num_samples());
      for (int64_t b = 0; b < batch.num_samples(); ++b) {
        const int64_t index = batch.sample_indices[b];
        const PackingSample& sample = samples[index];
        ++unpacked[index];
        const int64_t length = sample.tokens.size(0), response = sample.response_length;
        ASSERT_EQ(rows[b].size(0), response);
        ASSERT_EQ(rows[b].size(1), 2);
        for (int64_t r = 0; r < response; ++r) {
          const int64_t position = length - response + r;
          EXPECT_EQ(rows[b][r][0].item<double>(),
                    3.0 * static_cast<double>(sample.tokens[position].item<int64_t>()) +
                        static_cast<double>(position));
          EXPECT_EQ(rows[b][r][1].item<double>(), static_cast<double>(position) - 0.5);
          const double mask =
              sample.response_mask.defined() ? sample.response_mask[r].item<double>() : 1.0;
          EXPECT_EQ(masks[b][r].item<double>(), mask);
        }
        for (const std::string& name : kValueNames) {
          EXPECT_TRUE(at::equal(values[name][b], sample.response_values.at(name))) << name;
        }
      }
    }
  }
  for (size_t i = 0; i < samples.size(); ++i) EXPECT_EQ(unpacked[i], 1) << "sample " << i;
}

TEST(PackUnpack, EmptyResponsesHaveNoLossAndEmptySlices) {
  std::vector<PackingSample> samples = make_samples({4, 6}, 3);
  for (PackingSample& sample : samples) {
    sample.response_length = 0;
    sample.response_mask = at::Tensor();
    for (auto& entry : sample.response_values) entry.second = at::empty({0}, at::kDouble);
  }
  PackedMicroBatch batch = pack_micro_batch(samples, {0, 1});
  EXPECT_EQ(batch.loss_mask.sum().item<double>(), 0.0);
  for (const at::Tensor& slice : unpack_responses(batch, at::ones({10, 3}))) {
    EXPECT_EQ(slice.size(0), 0);
    EXPECT_EQ(slice.size(1), 3);
  }
}

TEST(PackUnpack, EmptyMicroBatchStillHasEveryValue) {
  std::vector<PackingSample> samples = make_samples({4, 6}, 3);
  PackedMicroBatch batch = pack_micro_batch(samples, {});
  EXPECT_EQ(batch.num_tokens(), 0);
  EXPECT_EQ(batch.cu_seqlens.numel(), 1);
  EXPECT_EQ(batch.max_seqlen, 0);
  for (const std::string& name : kValueNames) EXPECT_EQ(batch.value(name).numel(), 0);
  EXPECT_TRUE(unpack_responses(batch, at::zeros({0})).empty());
}

// Expects `action` to throw ooze::Error whose message contains `needle`.
template <typename Action>
void expect_error(Action action, const std::string& needle) {
  try {
    action();
    ADD_FAILURE() << "expected an error mentioning '" << needle << "'";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find(needle), std::string::npos) << error.what();
  }
}

TEST(PackUnpack, RejectsMalformedSamplesWithClearErrors) {
  auto base = [] { return make_samples({5, 6}, 9); };
  {
    auto samples = base();
    samples[1].response_length = 6;  // no prompt token left
    expect_error([&] { pack_micro_batch(samples, {0, 1}); }, "sample 1: response_length = 6");
    expect_error([&] { check_samples(samples); }, "sample 1: response_length = 6");
  }
  {
    auto samples = base();
    samples[1].tokens = samples[1].tokens.to(at::kInt);
    expect_error([&] { pack_micro_batch(samples, {1}); }, "int64");
  }
  {
    auto samples = base();
    samples[1].response_values["advantages"] =
        at::zeros({samples[1].response_length + 1}, at::kDouble);
    expect_error([&] { pack_micro_batch(samples, {1}); }, "value 'advantages'");
  }
  {
    auto samples = base();
    samples[1].response_values.erase("ref_log_probs");
    expect_error([&] { pack_micro_batch(samples, {1}); }, "lacks value 'ref_log_probs'");
  }
  {
    auto samples = base();
    samples[1].response_values["old_log_probs"] =
        samples[1].response_values["old_log_probs"].to(at::kFloat);
    expect_error([&] { pack_micro_batch(samples, {1}); }, "dtype");
  }
  {
    auto samples = base();
    expect_error([&] { pack_micro_batch(samples, {2}); }, "outside the rollout batch");
  }
  {
    auto samples = base();
    PackedMicroBatch batch = pack_micro_batch(samples, {0, 1});
    expect_error([&] { unpack_responses(batch, at::zeros({10})); }, "one row per packed token");
    expect_error([&] { batch.value("returns"); }, "no value 'returns'");
  }
}

// Long-tailed batches on several rank counts and budgets: the invariants, and micro-batches that
// stay within the budget and near-balanced token counts across ranks.
TEST(PlanBatch, DynamicPlansKeepEveryInvariant) {
  for (uint64_t seed : {1, 2, 3}) {
    const std::vector<int64_t> lengths = long_tailed_lengths(400, seed);
    for (int64_t ranks : {1, 3, 8}) {
      for (int64_t budget : {8192, 16384, 40000}) {
        for (bool balance : {false, true}) {
          const PackingOptions options = dynamic_options(budget, balance);
          const BatchPlan plan = plan_batch(lengths, ranks, options);
          check_plan(plan, lengths, ranks, options);
          // A lower bound on the micro-batch count when no sample exceeds the budget: the
          // heaviest rank's tokens over the budget.
          if (*std::max_element(lengths.begin(), lengths.end()) > budget) continue;
          int64_t heaviest = 0;
          for (const auto& rank : plan.micro_batches) {
            int64_t tokens = 0;
            for (const auto& micro_batch : rank) tokens += tokens_of(lengths, micro_batch);
            heaviest = std::max(heaviest, tokens);
          }
          EXPECT_GE(plan.num_micro_batches(), (heaviest + budget - 1) / budget);
        }
      }
    }
  }
}

TEST(PlanBatch, BalanceDataEvensTokensAcrossRanks) {
  for (uint64_t seed : {4, 5}) {
    const std::vector<int64_t> lengths = long_tailed_lengths(1000, seed);
    double total = 0;
    for (int64_t length : lengths) total += static_cast<double>(length);
    auto max_over_mean = [&](const std::vector<std::vector<int64_t>>& ranks) {
      int64_t heaviest = 0;
      for (const auto& rank : ranks) heaviest = std::max(heaviest, tokens_of(lengths, rank));
      return static_cast<double>(heaviest) / (total / static_cast<double>(ranks.size()));
    };
    PackingOptions balanced = dynamic_options(16384, true);
    PackingOptions round_robin = dynamic_options(16384, false);
    const double balanced_ratio = max_over_mean(split_across_ranks(lengths, 8, balanced));
    const double round_robin_ratio = max_over_mean(split_across_ranks(lengths, 8, round_robin));
    EXPECT_LT(balanced_ratio, 1.001) << "seed " << seed;
    EXPECT_LT(balanced_ratio, round_robin_ratio) << "seed " << seed;
  }
}

TEST(PlanBatch, EqualSampleCountsWhenRequested) {
  const std::vector<int64_t> lengths = long_tailed_lengths(203, 8);
  PackingOptions options = dynamic_options(16384, true);
  options.equal_samples_per_rank = true;
  for (int64_t ranks : {7, 8}) {  // 7 divides 203, 8 does not
    auto split = split_across_ranks(lengths, ranks, options);
    for (const auto& rank : split) {
      EXPECT_GE(static_cast<int64_t>(rank.size()), 203 / ranks);
      EXPECT_LE(static_cast<int64_t>(rank.size()), (203 + ranks - 1) / ranks);
    }
  }
}

// 10 samples of 500 tokens under a 1000-token budget on one rank: exactly 5 micro-batches of 2.
TEST(PlanBatch, FewestMicroBatchesOnAnExactFit) {
  const std::vector<int64_t> lengths(10, 500);
  const BatchPlan plan = plan_batch(lengths, 1, dynamic_options(1000));
  ASSERT_EQ(plan.num_micro_batches(), 5);
  for (const auto& micro_batch : plan.micro_batches[0]) EXPECT_EQ(micro_batch.size(), 2u);
  EXPECT_EQ(plan_batch(lengths, 1, dynamic_options(5000)).num_micro_batches(), 1);
}

// {8,6,4,4,3,3} fits a budget of 10 in 3 micro-batches only as {8} {6,4} {4,3,3}; the most even
// 3-way split by tokens ({8,3} ...) would break the budget, which must win.
TEST(PlanBatch, BudgetWinsOverBalance) {
  const std::vector<int64_t> lengths = {8, 6, 4, 4, 3, 3};
  const std::vector<int64_t> all = {0, 1, 2, 3, 4, 5};
  auto micro_batches = split_into_micro_batches(lengths, all, 3, dynamic_options(10));
  ASSERT_EQ(micro_batches.size(), 3u);
  std::vector<int> seen(6, 0);
  for (const auto& micro_batch : micro_batches) {
    EXPECT_LE(tokens_of(lengths, micro_batch), 10);
    for (int64_t index : micro_batch) ++seen[index];
  }
  EXPECT_EQ(seen, std::vector<int>(6, 1));
}

TEST(PlanBatch, GiantSequenceGetsItsOwnMicroBatchAndAWarning) {
  std::vector<int64_t> lengths = long_tailed_lengths(40, 9, 200, 1000);
  lengths[17] = 50000;
  const PackingOptions options = dynamic_options(4096);
  ::testing::internal::CaptureStderr();
  const BatchPlan plan = plan_batch(lengths, 2, options);
  const std::string log = ::testing::internal::GetCapturedStderr();
  check_plan(plan, lengths, 2, options);
  EXPECT_NE(log.find("sample 17 has 50000 tokens"), std::string::npos) << log;
  int holders = 0;
  for (const auto& rank : plan.micro_batches) {
    for (const auto& micro_batch : rank) {
      if (std::find(micro_batch.begin(), micro_batch.end(), 17) == micro_batch.end()) continue;
      ++holders;
      EXPECT_EQ(micro_batch, std::vector<int64_t>{17});
    }
  }
  EXPECT_EQ(holders, 1);
}

TEST(PlanBatch, FixedMicroBatchSize) {
  const std::vector<int64_t> lengths = long_tailed_lengths(50, 10);
  PackingOptions options;
  options.micro_batch_size = 4;
  for (bool balance : {false, true}) {
    options.balance_data = balance;
    const BatchPlan plan = plan_batch(lengths, 3, options);
    check_plan(plan, lengths, 3, options);
    // 50 samples on 3 ranks: 17, 17, 16 per rank, so ceil(17 / 4) = 5 micro-batches.
    EXPECT_EQ(plan.num_micro_batches(), 5);
  }
}

TEST(PlanBatch, FewerSamplesThanRanksIsAClearError) {
  expect_error(
      [] {
        plan_batch({100, 200, 300}, 8, dynamic_options(1000));
      },
      "3 samples cannot be split across 8 data-parallel ranks");
}

// When one rank holds fewer samples than the micro-batch count the others need, it gets empty
// micro-batches rather than a different count.
TEST(PlanBatch, ShortRankGetsEmptyMicroBatches) {
  PackingOptions options = dynamic_options(1000, true);
  options.equal_samples_per_rank = false;
  // One giant sample balances against ten that need five micro-batches.
  std::vector<int64_t> lengths(10, 500);
  lengths.push_back(5000);
  const BatchPlan plan = plan_batch(lengths, 2, options);
  check_plan(plan, lengths, 2, options);
  EXPECT_EQ(plan.num_micro_batches(), 5);
}

TEST(PlanBatch, SplitIntoTooFewMicroBatchesIsAnError) {
  const std::vector<int64_t> lengths(10, 500);
  std::vector<int64_t> all = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  expect_error([&] { split_into_micro_batches(lengths, all, 4, dynamic_options(1000)); },
               "too few");
}

TEST(PackingOptions, FromTheBatchingFieldsItDeclares) {
  ConfigSchema schema;
  PackingOptions::fields().declare(schema);
  PackingOptions options = PackingOptions::fields().read(
      load_config(schema, "",
                  {"--use-dynamic-batch-size", "--max-tokens-per-gpu", "4096", "--balance-data",
                   "--micro-batch-size", "3"}));
  EXPECT_TRUE(options.use_dynamic_batch_size);
  EXPECT_EQ(options.max_tokens_per_gpu, 4096);
  EXPECT_TRUE(options.balance_data);
  EXPECT_EQ(options.micro_batch_size, 3);

  // One default per field: the struct's, which the schema declares.
  const PackingOptions defaults = PackingOptions::fields().read(load_config(schema, "", {}));
  EXPECT_FALSE(defaults.use_dynamic_batch_size);
  EXPECT_FALSE(defaults.balance_data);
  EXPECT_EQ(defaults.micro_batch_size, PackingOptions{}.micro_batch_size);
  EXPECT_EQ(defaults.max_tokens_per_gpu, PackingOptions{}.max_tokens_per_gpu);
  EXPECT_EQ(schema.find("micro_batch_size")->section, "batching");

  expect_error(
      [&] {
        load_config(schema, "", {"--max-tokens-per-gpu", "0"});
      },
      "--max-tokens-per-gpu");
  expect_error([&] { load_config(schema, "", {"--micro-batch-size", "0"}); }, "--micro-batch-size");
}

}  // namespace packing_test
}  // namespace ooze::fsdp
