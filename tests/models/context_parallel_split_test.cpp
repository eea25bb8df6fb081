// The load-balanced context-parallel split against a plain reference (each sequence padded to a
// multiple of 2C, cut into 2C chunks, rank r taking chunks r and 2C-1-r), over every rank of
// C = 1..4 and many packed batches, including empty sequences and ones shorter than 2C.
#include "models/context_parallel_split.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "tests/support/expect_error.h"

namespace ooze::models {
namespace context_parallel_split_test {

// What rank `rank` of `cp_size` should hold: indices into the packed batch, -1 for padding.
struct ExpectedRank {
  std::vector<int64_t> token_index;
  std::vector<int64_t> positions;
  std::vector<int64_t> local_offsets{0};
};

ExpectedRank reference_split(const std::vector<int64_t>& lengths, int64_t cp_size, int64_t rank) {
  ExpectedRank expected;
  int64_t start = 0;
  for (int64_t length : lengths) {
    std::vector<int64_t> padded;
    for (int64_t i = 0; i < length; ++i) padded.push_back(start + i);
    while (padded.size() % static_cast<size_t>(2 * cp_size) != 0) padded.push_back(-1);
    const int64_t chunk = static_cast<int64_t>(padded.size()) / (2 * cp_size);
    for (int64_t which : {rank, 2 * cp_size - 1 - rank}) {
      for (int64_t i = which * chunk; i < (which + 1) * chunk; ++i) {
        expected.token_index.push_back(padded[static_cast<size_t>(i)]);
        expected.positions.push_back(i);
      }
    }
    expected.local_offsets.push_back(expected.local_offsets.back() + 2 * chunk);
    start += length;
  }
  return expected;
}

std::vector<int64_t> offsets_of(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> offsets{0};
  for (int64_t length : lengths) offsets.push_back(offsets.back() + length);
  return offsets;
}

std::vector<int64_t> to_vector(const at::Tensor& t) {
  at::Tensor c = t.to(at::kLong).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

// Batches of 1..6 sequences, lengths 0..3 * 2C (short, exact multiples, one over), plus fixed
// ones with every length below 2C.
std::vector<std::vector<int64_t>> batches_for(int64_t cp_size) {
  std::vector<std::vector<int64_t>> batches;
  std::vector<int64_t> every_short;
  for (int64_t l = 0; l <= 2 * cp_size; ++l) every_short.push_back(l);
  batches.push_back(every_short);
  batches.push_back({1});
  batches.push_back({0});
  batches.push_back({2 * cp_size});
  batches.push_back({1, 1, 1});
  std::mt19937 rng(static_cast<unsigned>(cp_size));
  std::uniform_int_distribution<int64_t> count(1, 6), length(0, 6 * cp_size + 1);
  for (int i = 0; i < 200; ++i) {
    std::vector<int64_t> lengths(static_cast<size_t>(count(rng)));
    for (int64_t& l : lengths) l = length(rng);
    batches.push_back(lengths);
  }
  return batches;
}

class SplitBySize : public ::testing::TestWithParam<int64_t> {};

TEST_P(SplitBySize, EveryRankHoldsChunksRAnd2CMinus1MinusR) {
  const int64_t cp_size = GetParam();
  for (const auto& lengths : batches_for(cp_size)) {
    for (int64_t rank = 0; rank < cp_size; ++rank) {
      const ExpectedRank expected = reference_split(lengths, cp_size, rank);
      const ContextParallelSplit split =
          split_for_context_parallel(offsets_of(lengths), cp_size, rank);
      ASSERT_EQ(split.local_offsets, expected.local_offsets) << "rank " << rank;
      ASSERT_EQ(to_vector(split.token_index), expected.token_index) << "rank " << rank;
      ASSERT_EQ(to_vector(split.positions), expected.positions) << "rank " << rank;
      std::vector<int64_t> padding;
      for (int64_t index : expected.token_index) padding.push_back(index < 0 ? 1 : 0);
      ASSERT_EQ(to_vector(split.padding_mask), padding) << "rank " << rank;
      ASSERT_EQ(to_vector(split.local_cu_seqlens()), expected.local_offsets);
      EXPECT_EQ(split.local_cu_seqlens().scalar_type(), at::kInt);
      for (int64_t s = 0; s < split.num_sequences(); ++s) {
        EXPECT_EQ(2 * split.chunk_size(s), expected.local_offsets[static_cast<size_t>(s) + 1] -
                                               expected.local_offsets[static_cast<size_t>(s)]);
      }
    }
  }
}

TEST_P(SplitBySize, CausalWorkIsTheSameOnEveryRank) {
  // A token at position p attends to p + 1 keys: the ranks' sums must be equal.
  const int64_t cp_size = GetParam();
  for (const auto& lengths : batches_for(cp_size)) {
    std::vector<int64_t> work;
    for (int64_t rank = 0; rank < cp_size; ++rank) {
      const ContextParallelSplit split =
          split_for_context_parallel(offsets_of(lengths), cp_size, rank);
      work.push_back((split.positions + 1).sum().item<int64_t>());
    }
    for (int64_t w : work) EXPECT_EQ(w, work[0]);
  }
}

TEST_P(SplitBySize, ShardThenUnshardRestoresEveryTokenInOrder) {
  const int64_t cp_size = GetParam();
  for (const auto& lengths : batches_for(cp_size)) {
    const std::vector<int64_t> offsets = offsets_of(lengths);
    const int64_t tokens = offsets.back();
    const at::Tensor values = at::randn({tokens, 3}, at::kDouble);
    const at::Tensor ids = at::arange(100, 100 + tokens, at::kLong);
    std::vector<at::Tensor> local_values, local_ids;
    for (int64_t rank = 0; rank < cp_size; ++rank) {
      const ContextParallelSplit split = split_for_context_parallel(offsets, cp_size, rank);
      local_values.push_back(split.shard(values, -7.0));
      local_ids.push_back(split.shard(ids));
      ASSERT_EQ(local_values.back().size(0), split.num_local_tokens());
      // Padding rows carry the padding value, real rows the token's own values.
      const at::Tensor pad = split.padding_mask;
      EXPECT_TRUE(local_values.back().index({pad}).eq(-7.0).all().item<bool>());
      EXPECT_TRUE(local_ids.back().index({pad}).eq(0).all().item<bool>());
      const at::Tensor real = pad.logical_not();
      EXPECT_TRUE(local_ids.back().index({real}).sub(100).equal(split.token_index.index({real})));
    }
    const ContextParallelSplit split0 = split_for_context_parallel(offsets, cp_size, 0);
    EXPECT_TRUE(split0.unshard(at::cat(local_values, 0)).equal(values));
    EXPECT_TRUE(split0.unshard(at::cat(local_ids, 0)).equal(ids));
  }
}

INSTANTIATE_TEST_SUITE_P(CpSizes, SplitBySize, ::testing::Values(1, 2, 3, 4),
                         [](const ::testing::TestParamInfo<int64_t>& info) {
                           return "C" + std::to_string(info.param);
                         });

TEST(ContextParallelSplit, ALengthOneSequenceLeavesOtherRanksOnlyPadding) {
  // C = 2: the sequence is padded to 4 tokens; rank 0 holds positions 0 and 3, rank 1 holds 1
  // and 2, all padding.
  const ContextParallelSplit rank0 = split_for_context_parallel({0, 1}, 2, 0);
  const ContextParallelSplit rank1 = split_for_context_parallel({0, 1}, 2, 1);
  EXPECT_EQ(to_vector(rank0.token_index), (std::vector<int64_t>{0, -1}));
  EXPECT_EQ(to_vector(rank0.positions), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(to_vector(rank1.token_index), (std::vector<int64_t>{-1, -1}));
  EXPECT_EQ(to_vector(rank1.positions), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(to_vector(rank0.gather_index), (std::vector<int64_t>{0}));
}

TEST(ContextParallelSplit, ShardIsDifferentiableAndPaddingGetsNoGradient) {
  const ContextParallelSplit split = split_for_context_parallel({0, 3, 8}, 2, 1);
  at::Tensor values = at::randn({8, 2}, at::kDouble).requires_grad_(true);
  at::Tensor local = split.shard(values);
  local.sum().backward();
  // Each real local token passes gradient 1 to its own row, and nothing else gets any.
  at::Tensor expected = at::zeros({8, 2}, at::kDouble);
  for (int64_t index : to_vector(split.token_index)) {
    if (index >= 0) expected[index] += 1;
  }
  EXPECT_TRUE(values.grad().equal(expected));
}

TEST(ContextParallelSplit, BadArgumentsAreRefusedWithTheirValues) {
  EXPECT_CONTAINS(testing::error_message_of<Error>([] {
                    split_for_context_parallel({0, 4}, 0, 0);
                  }),
                  "at least 1, got 0");
  EXPECT_CONTAINS(testing::error_message_of<Error>([] {
                    split_for_context_parallel({0, 4}, 2, 2);
                  }),
                  "rank 2 is outside [0, 2)");
  EXPECT_CONTAINS(testing::error_message_of<Error>([] {
                    split_for_context_parallel({0, 4, 3}, 2, 0);
                  }),
                  "non-decreasing");
  EXPECT_CONTAINS(testing::error_message_of<Error>([] { split_for_context_parallel({}, 2, 0); }),
                  "start at 0");
  const ContextParallelSplit split = split_for_context_parallel({0, 4}, 2, 0);
  EXPECT_CONTAINS(testing::error_message_of<Error>([&] { split.shard(at::zeros({5})); }),
                  "expected a tensor of 4 rows");
  EXPECT_CONTAINS(testing::error_message_of<Error>([&] { split.unshard(at::zeros({2})); }),
                  "expected a tensor of 4 rows");
}

}  // namespace context_parallel_split_test
}  // namespace ooze::models
