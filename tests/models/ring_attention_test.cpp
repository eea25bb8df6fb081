// Context-parallel attention (ring and all-gather) on C = 1..4 real processes over Gloo on
// loopback, against the single-process packed attention of causal_attention.h on the full
// micro-batch: outputs and the gradients of q, k and v within 1e-6 in fp32, on packed batches
// of mixed lengths (empty, 1, shorter than 2C, long), with grouped-query and plain heads.
#include "models/ring_attention.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "models/causal_attention.h"
#include "models/context_parallel_split.h"
#include "tests/support/expect_error.h"
#include "tests/support/rank_group.h"

namespace ooze::models {
namespace ring_attention_test {

using Check = std::function<void(bool, const std::string&)>;
using RankBody = std::function<void(std::shared_ptr<comm::Communicator>, const Check&)>;

constexpr double kTolerance = 1e-6;

// Forks `world` ranks (tests/support/rank_group.h) and runs `body` on each; prints what rank 0
// reported.
void run_group(const std::string& scenario, int world, const RankBody& body) {
  const testing::RankGroupResult run = testing::run_forked_ranks(
      world, [&](const testing::RankContext& rank) { body(rank.group, rank.check); });
  EXPECT_TRUE(run.all_passed()) << scenario << ":\n" << run.failures();
  std::cout << run.ranks.at(0).log;
}

struct Case {
  std::vector<int64_t> lengths;
  int64_t heads, kv_heads, head_dim;
};

std::vector<int64_t> offsets_of(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> offsets{0};
  for (int64_t length : lengths) offsets.push_back(offsets.back() + length);
  return offsets;
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return a.numel() == 0 ? 0.0 : (a - b).abs().max().item<double>();
}

// Every rank builds the same full batch (same seed), computes the reference on it, runs the
// context-parallel attention on its share, and compares: its local outputs and gradients
// against the reference's rows for its tokens, then the outputs and gradients gathered from
// every rank and put back in token order against the whole reference. Prints the largest
// differences and magnitudes (rank 0's log is shown by the test).
void compare_with_packed_attention(const std::shared_ptr<comm::Communicator>& group,
                                   const Check& check, const Case& c, ContextParallelImpl impl) {
  const std::vector<int64_t> offsets = offsets_of(c.lengths);
  const int64_t tokens = offsets.back();
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  at::manual_seed(1234);
  const at::Tensor q_full = at::randn({tokens, c.heads, c.head_dim}).requires_grad_(true);
  const at::Tensor k_full = at::randn({tokens, c.kv_heads, c.head_dim}).requires_grad_(true);
  const at::Tensor v_full = at::randn({tokens, c.kv_heads, c.head_dim}).requires_grad_(true);
  // Upstream gradients of 1/8 keep q, k and v's gradients of order one like the outputs, the
  // scale 1e-6 is meant for (fp32 rounds values of order one to ~1e-7; with N(0, 1) upstream
  // gradients they reach ~5 and the differences ~2e-6, the same relative rounding).
  const at::Tensor dout_full = at::randn({tokens, c.heads, c.head_dim}) * 0.125;
  const at::Tensor out_full = packed_causal_attention(q_full, k_full, v_full, offsets, scale);
  out_full.backward(dout_full);

  const ContextParallelSplit split =
      split_for_context_parallel(offsets, group->size(), group->rank());
  const at::Tensor q = split.shard(q_full.detach()).requires_grad_(true);
  const at::Tensor k = split.shard(k_full.detach()).requires_grad_(true);
  const at::Tensor v = split.shard(v_full.detach()).requires_grad_(true);
  const at::Tensor out = context_parallel_attention(q, k, v, split, group, scale, impl);
  // Padding rows get no output gradient: they are never part of a loss.
  out.backward(split.shard(dout_full));

  const at::Tensor real = split.padding_mask.logical_not();
  const std::string label = std::string(context_parallel_impl_name(impl)) +
                            " C=" + std::to_string(group->size()) + " heads " +
                            std::to_string(c.heads) + "/" + std::to_string(c.kv_heads);
  auto compare_local = [&](const std::string& what, const at::Tensor& mine,
                           const at::Tensor& reference) {
    const double diff = max_abs_diff(mine.index({real}), split.shard(reference).index({real}));
    check(diff <= kTolerance, label + ": local " + what + " differs by " + std::to_string(diff));
  };
  compare_local("output", out.detach(), out_full.detach());
  compare_local("dq", q.grad(), q_full.grad());
  compare_local("dk", k.grad(), k_full.grad());
  compare_local("dv", v.grad(), v_full.grad());
  // Padding reaches nothing: its keys and values get no gradient, its queries none either.
  for (const auto& [what, grad] : {std::make_pair("dq", q.grad()), std::make_pair("dk", k.grad()),
                                   std::make_pair("dv", v.grad())}) {
    check(grad.index({split.padding_mask}).eq(0).all().item<bool>(),
          label + ": padding rows of " + what + " are not zero");
  }

  // Everything back in token order through unshard, compared on every rank.
  auto gathered = [&](const at::Tensor& local) {
    std::vector<int64_t> shape = local.sizes().vec();
    shape[0] *= group->size();
    at::Tensor all = at::empty(shape, local.options());
    group->all_gather(all, local.contiguous());
    return split.unshard(all);
  };
  const double out_diff = max_abs_diff(gathered(out.detach()), out_full.detach());
  const double dq_diff = max_abs_diff(gathered(q.grad()), q_full.grad());
  const double dk_diff = max_abs_diff(gathered(k.grad()), k_full.grad());
  const double dv_diff = max_abs_diff(gathered(v.grad()), v_full.grad());
  const double worst = std::max({out_diff, dq_diff, dk_diff, dv_diff});
  check(worst <= kTolerance, label + ": gathered results differ by " + std::to_string(worst));
  std::printf("%s, %lld tokens: max |diff| output %.3g dq %.3g dk %.3g dv %.3g\n", label.c_str(),
              static_cast<long long>(tokens), out_diff, dq_diff, dk_diff, dv_diff);
  std::printf("  max |ref| output %.3g dq %.3g dk %.3g dv %.3g\n",
              out_full.abs().max().item<double>(), q_full.grad().abs().max().item<double>(),
              k_full.grad().abs().max().item<double>(), v_full.grad().abs().max().item<double>());
}

// Two attentions in one graph (the second's queries are the first's outputs, as layers stack):
// both rings run in forward, then both backward rings in reverse order, and the gradients of
// every input still match the reference.
void compare_two_layers(const std::shared_ptr<comm::Communicator>& group, const Check& check,
                        ContextParallelImpl impl) {
  const std::vector<int64_t> offsets = offsets_of({5, 1, 2 * group->size() + 3, 30});
  const int64_t tokens = offsets.back();
  at::manual_seed(99);
  std::vector<at::Tensor> full;
  for (int i = 0; i < 5; ++i) full.push_back(at::randn({tokens, 2, 8}).requires_grad_(true));
  const at::Tensor dout_full = at::randn({tokens, 2, 8}) * 0.125;
  const double scale = 0.3;
  packed_causal_attention(packed_causal_attention(full[0], full[1], full[2], offsets, scale),
                          full[3], full[4], offsets, scale)
      .backward(dout_full);

  const ContextParallelSplit split =
      split_for_context_parallel(offsets, group->size(), group->rank());
  std::vector<at::Tensor> local;
  for (const at::Tensor& t : full) local.push_back(split.shard(t.detach()).requires_grad_(true));
  context_parallel_attention(
      context_parallel_attention(local[0], local[1], local[2], split, group, scale, impl), local[3],
      local[4], split, group, scale, impl)
      .backward(split.shard(dout_full));
  const at::Tensor real = split.padding_mask.logical_not();
  for (size_t i = 0; i < full.size(); ++i) {
    const double diff =
        max_abs_diff(local[i].grad().index({real}), split.shard(full[i].grad()).index({real}));
    check(diff <= kTolerance, std::string(context_parallel_impl_name(impl)) +
                                  ": two layers, gradient of input " + std::to_string(i) +
                                  " differs by " + std::to_string(diff));
  }
}

std::vector<Case> cases_for(int64_t cp_size) {
  const int64_t two_c = 2 * cp_size;
  // Lengths 1, below 2C, exactly 2C, empty, odd and long; GQA (4 query heads over 2 kv heads)
  // and plain heads.
  return {
      {{1, two_c - 1, 0, 37, 2, two_c, 64, 5, 1, 3 * two_c + 1}, 4, 2, 8},
      {{97, 1, 13}, 2, 2, 16},
      {{1}, 4, 1, 8},
  };
}

class ContextParallelAttentionTest : public ::testing::TestWithParam<int> {};

TEST_P(ContextParallelAttentionTest, RingMatchesPackedAttentionInOutputsAndGradients) {
  const int world = GetParam();
  run_group("ring", world, [world](std::shared_ptr<comm::Communicator> group, const Check& check) {
    for (const Case& c : cases_for(world)) {
      compare_with_packed_attention(group, check, c, ContextParallelImpl::kRing);
    }
  });
}

TEST_P(ContextParallelAttentionTest, AllGatherMatchesPackedAttentionInOutputsAndGradients) {
  const int world = GetParam();
  run_group("allgather", world,
            [world](std::shared_ptr<comm::Communicator> group, const Check& check) {
              for (const Case& c : cases_for(world)) {
                compare_with_packed_attention(group, check, c, ContextParallelImpl::kAllGather);
              }
            });
}

TEST_P(ContextParallelAttentionTest, StackedAttentionsKeepTheirRingsApart) {
  run_group("stacked", GetParam(),
            [](std::shared_ptr<comm::Communicator> group, const Check& check) {
              compare_two_layers(group, check, ContextParallelImpl::kRing);
              compare_two_layers(group, check, ContextParallelImpl::kAllGather);
            });
}

TEST_P(ContextParallelAttentionTest, ASplitForAnotherRankOrShapeIsRefused) {
  run_group(
      "refused", GetParam(), [](std::shared_ptr<comm::Communicator> group, const Check& check) {
        const int other = (group->rank() + 1) % group->size();
        const ContextParallelSplit split = split_for_context_parallel({0, 9}, group->size(), other);
        const ContextParallelSplit mine =
            split_for_context_parallel({0, 9}, group->size(), group->rank());
        const int64_t n = mine.num_local_tokens();
        const at::Tensor q = at::randn({n, 4, 8}), kv = at::randn({n, 2, 8});
        auto message = [&](const std::function<void()>& action) {
          try {
            action();
          } catch (const Error& e) {
            return std::string(e.what());
          }
          return std::string("no error");
        };
        if (group->size() > 1) {
          const std::string wrong_rank = message([&] {
            context_parallel_attention(q, kv, kv, split, group, 1.0, ContextParallelImpl::kRing);
          });
          check(wrong_rank.find("split was made for rank " + std::to_string(other)) !=
                    std::string::npos,
                "wrong rank: " + wrong_rank);
        }
        const std::string wrong_heads = message([&] {
          context_parallel_attention(at::randn({n, 3, 8}), kv, kv, mine, group, 1.0,
                                     ContextParallelImpl::kRing);
        });
        check(wrong_heads.find("heads a multiple of kv_heads") != std::string::npos,
              "wrong heads: " + wrong_heads);
        const std::string wrong_tokens = message([&] {
          context_parallel_attention(q.narrow(0, 0, n - 1), kv.narrow(0, 0, n - 1),
                                     kv.narrow(0, 0, n - 1), mine, group, 1.0,
                                     ContextParallelImpl::kAllGather);
        });
        check(wrong_tokens.find("the split gives this rank " + std::to_string(n)) !=
                  std::string::npos,
              "wrong tokens: " + wrong_tokens);
      });
}

INSTANTIATE_TEST_SUITE_P(CpSizes, ContextParallelAttentionTest, ::testing::Values(1, 2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "C" + std::to_string(info.param);
                         });

}  // namespace ring_attention_test
}  // namespace ooze::models
