// Loss aggregation: the per-token weights against their formulas, and the invariance the trainer
// relies on: one step's gradient computed whole equals the gradient computed split across DP (and
// CP) ranks and micro-batches (micro-batch gradients summed per rank, averaged over ranks), for
// every aggregation and loss. Also the merging of metrics across micro-batches and ranks.
#include "algorithms/loss_aggregation.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "algorithms/loss_metrics.h"
#include "algorithms/policy_loss.h"
#include "algorithms/value_loss.h"
#include "core/error.h"
#include "tests/algorithms/double_vectors.h"

namespace ooze::algorithms {
namespace loss_aggregation_test {

const LossAggregation kAggregations[] = {LossAggregation::kTokenMean,
                                         LossAggregation::kSequenceMeanTokenMean,
                                         LossAggregation::kSequenceMeanTokenSum};

TEST(LossAggregationTest, TokenWeightsFollowTheirFormulas) {
  // Three samples: 2 counted of 4 tokens, none of 2, 3 of 3.
  Vec mask = {0, 1, 0, 1, 0, 0, 1, 1, 1};
  at::Tensor cu_seqlens = at::tensor({0, 4, 6, 9}, at::kInt);
  PackedSequences sequences(cu_seqlens, 9, at::kCPU);
  LossScale scale;
  scale.global_tokens = 20;
  scale.global_sequences = 8;
  const Vec counts = {2, 2, 2, 2, 1, 1, 3, 3, 3};  // max(1, counted) of each token's sample
  for (LossAggregation aggregation : kAggregations) {
    scale.aggregation = aggregation;
    Vec got = vec_of(loss_token_weights(tensor_of(mask), sequences, scale));
    for (size_t t = 0; t < mask.size(); ++t) {
      double expected = aggregation == LossAggregation::kTokenMean ? mask[t] / 20
                        : aggregation == LossAggregation::kSequenceMeanTokenSum
                            ? mask[t] / 8
                            : mask[t] / (counts[t] * 8);
      EXPECT_DOUBLE_EQ(got[t], expected) << loss_aggregation_name(aggregation) << " " << t;
    }
  }
  // Counts over all CP ranks replace the local ones.
  scale.aggregation = LossAggregation::kSequenceMeanTokenMean;
  Vec got = vec_of(loss_token_weights(tensor_of(mask), sequences, scale, tensor_of({4, 0, 6})));
  EXPECT_DOUBLE_EQ(got[1], 1.0 / (4 * 8));
  EXPECT_DOUBLE_EQ(got[6], 1.0 / (6 * 8));
  EXPECT_THROW(loss_token_weights(tensor_of(mask), sequences, scale, tensor_of({1, 2})), Error);
}

TEST(LossAggregationTest, MalformedBoundariesAreRejected) {
  EXPECT_THROW(PackedSequences(at::tensor({1, 4}, at::kInt), 4, at::kCPU), Error);
  EXPECT_THROW(PackedSequences(at::tensor({0, 3, 2, 4}, at::kInt), 4, at::kCPU), Error);
  EXPECT_THROW(PackedSequences(at::tensor({0, 3}, at::kInt), 4, at::kCPU), Error);
  EXPECT_THROW(PackedSequences(at::tensor({0.0, 4.0}), 4, at::kCPU), Error);
  EXPECT_THROW(PackedSequences(at::Tensor(), 0, at::kCPU), Error);
  PackedSequences empty(at::zeros({1}, at::kInt), 0, at::kCPU);
  EXPECT_EQ(empty.num_sequences(), 0);
}

// --- The invariance test ---

constexpr int kParameters = 6;

// One step's samples. The "model" is theta [kParameters]: token t's log-prob, entropy and value
// move with theta[feature_t] * coefficient_t, so every micro-batch of every rank contributes to
// the same parameters, as the layers of a real model do.
struct Sample {
  Vec mask, base_log_probs, old_log_probs, ref_log_probs, rollout_log_probs, advantages,
      base_entropy, base_values, old_values, returns, coefficient;
  std::vector<int64_t> feature;
  int length() const { return static_cast<int>(mask.size()); }
};

std::vector<Sample> random_step(int num_samples, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<Sample> step(num_samples);
  for (int s = 0; s < num_samples; ++s) {
    Sample& x = step[s];
    int prompt = 1 + static_cast<int>(uniform(rng) * 3);
    int response = s % 7 == 0 ? 0 : static_cast<int>(uniform(rng) * 8);
    double advantage = normal(rng);
    for (int t = 0; t < prompt + response; ++t) {
      double lp = -0.1 - 2.0 * uniform(rng);
      x.mask.push_back(t >= prompt && s % 5 != 1 && uniform(rng) > 0.2 ? 1.0 : 0.0);
      x.base_log_probs.push_back(lp);
      x.old_log_probs.push_back(lp + 0.4 * normal(rng));
      x.ref_log_probs.push_back(lp + 0.4 * normal(rng));
      x.rollout_log_probs.push_back(x.old_log_probs.back() + 0.3 * normal(rng));
      x.advantages.push_back(advantage + 0.1 * normal(rng));
      x.base_entropy.push_back(2.0 * uniform(rng));
      x.base_values.push_back(normal(rng));
      x.old_values.push_back(x.base_values.back() + 0.3 * normal(rng));
      x.returns.push_back(normal(rng));
      x.coefficient.push_back(2.0 * uniform(rng) - 1.0);
      x.feature.push_back(static_cast<int64_t>(uniform(rng) * kParameters));
    }
  }
  return step;
}

// A piece of a sample: tokens [begin, end) of step[sample] (the whole sample without CP).
struct Piece {
  int sample, begin, end;
};

struct MicroBatch {
  at::Tensor cu_seqlens, mask, log_probs, old_log_probs, ref_log_probs, rollout_log_probs,
      advantages, entropy, values, old_values, returns, sequence_token_counts;
};

MicroBatch pack(const std::vector<Sample>& step, const std::vector<Piece>& pieces,
                const at::Tensor& theta) {
  std::vector<int> cu = {0};
  Vec mask, base_lp, old, ref, rollout, adv, base_ent, base_v, old_v, ret, coef, counts;
  std::vector<int64_t> feature;
  for (const Piece& piece : pieces) {
    const Sample& x = step[piece.sample];
    auto append = [&](Vec& out, const Vec& from) {
      out.insert(out.end(), from.begin() + piece.begin, from.begin() + piece.end);
    };
    append(mask, x.mask);
    append(base_lp, x.base_log_probs);
    append(old, x.old_log_probs);
    append(ref, x.ref_log_probs);
    append(rollout, x.rollout_log_probs);
    append(adv, x.advantages);
    append(base_ent, x.base_entropy);
    append(base_v, x.base_values);
    append(old_v, x.old_values);
    append(ret, x.returns);
    append(coef, x.coefficient);
    feature.insert(feature.end(), x.feature.begin() + piece.begin, x.feature.begin() + piece.end);
    cu.push_back(cu.back() + piece.end - piece.begin);
    double counted = 0;
    for (double m : x.mask) counted += m;
    counts.push_back(counted);  // the whole sample's count, wherever its tokens are
  }
  MicroBatch mb;
  mb.cu_seqlens = at::tensor(at::ArrayRef<int>(cu), at::kInt).clone();
  at::Tensor moved =
      theta.index_select(0, at::tensor(at::ArrayRef<int64_t>(feature), at::kLong).clone()) *
      tensor_of(coef);
  at::Tensor next = theta.index_select(
      0, (at::tensor(at::ArrayRef<int64_t>(feature), at::kLong).clone() + 1) % kParameters);
  mb.mask = tensor_of(mask);
  mb.log_probs = tensor_of(base_lp) + 0.3 * moved;
  mb.entropy = tensor_of(base_ent) + 0.2 * next * tensor_of(coef);
  mb.values = tensor_of(base_v) + 0.5 * moved;
  mb.old_log_probs = tensor_of(old);
  mb.ref_log_probs = tensor_of(ref);
  mb.rollout_log_probs = tensor_of(rollout);
  mb.advantages = tensor_of(adv);
  mb.old_values = tensor_of(old_v);
  mb.returns = tensor_of(ret);
  mb.sequence_token_counts = tensor_of(counts);
  return mb;
}

using LossFunction = std::function<LossOutput(const MicroBatch&, const LossScale&)>;

struct Result {
  Vec gradient;
  LossMetrics metrics;
};

// ranks[r][m]: the pieces of micro-batch m on rank r. Every rank starts from zero gradients,
// accumulates (sums) its micro-batches' gradients; the ranks' gradients are then averaged.
Result run_split(const std::vector<Sample>& step, const Vec& theta_values,
                 const std::vector<std::vector<std::vector<Piece>>>& ranks, LossScale scale,
                 const LossFunction& loss, bool pass_sequence_counts) {
  Result result{Vec(kParameters, 0.0), {}};
  for (const auto& micro_batches : ranks) {
    at::Tensor theta = tensor_of(theta_values).requires_grad_(true);
    for (const auto& pieces : micro_batches) {
      MicroBatch mb = pack(step, pieces, theta);
      if (!pass_sequence_counts) mb.sequence_token_counts = at::Tensor();
      LossOutput out = loss(mb, scale);
      out.loss.backward();
      result.metrics.merge(out.metrics);
    }
    Vec grad = theta.grad().defined() ? vec_of(theta.grad()) : Vec(kParameters, 0.0);
    for (int i = 0; i < kParameters; ++i) {
      result.gradient[i] += grad[i] / static_cast<double>(ranks.size());
    }
  }
  return result;
}

// Shuffles the samples, deals them to `num_ranks` ranks in uneven contiguous shares, and cuts each
// share into `num_micro` micro-batches of random (possibly zero) sizes.
std::vector<std::vector<std::vector<Piece>>> random_split(const std::vector<Sample>& step,
                                                          int num_ranks, int num_micro,
                                                          uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int> order(step.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::shuffle(order.begin(), order.end(), rng);
  auto random_cuts = [&](int n, int parts) {
    std::uniform_int_distribution<int> position(0, n);
    std::vector<int> cuts = {0, n};
    for (int i = 1; i < parts; ++i) cuts.push_back(position(rng));
    std::sort(cuts.begin(), cuts.end());
    return cuts;
  };
  std::vector<std::vector<std::vector<Piece>>> ranks(num_ranks);
  std::vector<int> rank_cuts = random_cuts(static_cast<int>(order.size()), num_ranks);
  for (int r = 0; r < num_ranks; ++r) {
    int begin = rank_cuts[r], n = rank_cuts[r + 1] - begin;
    std::vector<int> micro_cuts = random_cuts(n, num_micro);
    for (int m = 0; m < num_micro; ++m) {
      std::vector<Piece> pieces;
      for (int i = micro_cuts[m]; i < micro_cuts[m + 1]; ++i) {
        int s = order[begin + i];
        pieces.push_back({s, 0, step[s].length()});
      }
      ranks[r].push_back(pieces);
    }
  }
  return ranks;
}

LossScale step_scale(const std::vector<Sample>& step, LossAggregation aggregation) {
  LossScale scale;
  scale.aggregation = aggregation;
  for (const Sample& x : step) {
    for (double m : x.mask) scale.global_tokens += m;
  }
  scale.global_sequences = static_cast<double>(step.size());
  return scale;
}

void expect_same(const Result& whole, const Result& split, const std::string& what) {
  for (int i = 0; i < kParameters; ++i) {
    EXPECT_NEAR(split.gradient[i], whole.gradient[i], 1e-12) << what << ": d/d theta[" << i << "]";
  }
  double largest = 0;
  for (double g : whole.gradient) largest = std::max(largest, std::abs(g));
  EXPECT_GT(largest, 1e-3) << what << ": the test needs a non-trivial gradient";
  for (const auto& [name, entry] : whole.metrics.entries()) {
    ASSERT_TRUE(split.metrics.contains(name)) << what << ": " << name;
    EXPECT_NEAR(split.metrics.get(name), entry.value, 1e-12) << what << ": metric " << name;
  }
}

LossFunction policy_loss_of(const PolicyLossOptions& options) {
  return [options](const MicroBatch& mb, const LossScale& scale) {
    PolicyLossInputs in;
    in.cu_seqlens = mb.cu_seqlens;
    in.loss_mask = mb.mask;
    in.log_probs = mb.log_probs;
    in.old_log_probs = mb.old_log_probs;
    in.ref_log_probs = mb.ref_log_probs;
    in.rollout_log_probs = mb.rollout_log_probs;
    in.advantages = mb.advantages;
    in.entropy = mb.entropy;
    in.sequence_token_counts = mb.sequence_token_counts;
    return policy_loss(in, options, scale);
  };
}

struct NamedLoss {
  std::string name;
  LossFunction loss;
};

std::vector<NamedLoss> losses_to_check() {
  std::vector<NamedLoss> losses;
  {
    PolicyLossOptions o;
    o.eps_clip_high = 0.28;
    o.eps_clip_c = 3.0;
    o.entropy_coef = 0.01;
    o.use_kl_loss = true;
    o.kl_loss_coef = 0.05;
    o.kl_loss_type = KlEstimator::kK3;
    o.use_unbiased_kl = true;
    o.mismatch.use_tis = true;
    o.mismatch.tis_clip = 1.5;
    o.mismatch.tis_clip_low = 0.5;
    o.use_opsm = true;
    o.opsm_delta = 0.05;
    losses.push_back({"ppo+dual+kl+entropy+tis+opsm", policy_loss_of(o)});
  }
  {
    PolicyLossOptions o;
    o.kind = PolicyLossKind::kGspo;
    o.eps_clip = 0.05;
    o.eps_clip_high = 0.06;
    o.mismatch.use_tis = true;
    o.mismatch.level = TisLevel::kSequence;
    o.mismatch.mode = TisMode::kMask;
    o.mismatch.tis_clip = 2.0;
    o.mismatch.tis_clip_low = 0.2;
    losses.push_back({"gspo+sequence icepop", policy_loss_of(o)});
  }
  {
    PolicyLossOptions o;
    o.kind = PolicyLossKind::kCispo;
    o.eps_clip = 1.0;
    o.eps_clip_high = 0.2;
    o.use_kl_loss = true;
    o.kl_loss_coef = 0.1;
    o.kl_loss_type = KlEstimator::kK2;
    losses.push_back({"cispo+kl", policy_loss_of(o)});
  }
  losses.push_back({"value", [](const MicroBatch& mb, const LossScale& scale) {
                      ValueLossInputs in;
                      in.cu_seqlens = mb.cu_seqlens;
                      in.loss_mask = mb.mask;
                      in.values = mb.values;
                      in.old_values = mb.old_values;
                      in.returns = mb.returns;
                      in.sequence_token_counts = mb.sequence_token_counts;
                      return value_loss(in, ValueLossOptions{}, scale);
                    }});
  return losses;
}

TEST(LossAggregationTest, GradientIsIndependentOfRanksAndMicroBatches) {
  std::vector<Sample> step = random_step(24, 1);
  Vec theta = {0.1, -0.2, 0.05, 0.3, -0.1, 0.2};
  std::vector<std::vector<std::vector<Piece>>> whole(1, std::vector<std::vector<Piece>>(1));
  for (int s = 0; s < static_cast<int>(step.size()); ++s)
    whole[0][0].push_back({s, 0, step[s].length()});

  for (const NamedLoss& loss : losses_to_check()) {
    for (LossAggregation aggregation : kAggregations) {
      LossScale scale = step_scale(step, aggregation);
      Result reference = run_split(step, theta, whole, scale, loss.loss, false);
      for (auto [ranks, micro] : std::vector<std::pair<int, int>>{{1, 4}, {2, 3}, {4, 2}, {4, 5}}) {
        LossScale split_scale = scale;
        split_scale.dp_size = ranks;
        Result split = run_split(step, theta, random_split(step, ranks, micro, 7 * ranks + micro),
                                 split_scale, loss.loss, false);
        expect_same(reference, split,
                    loss.name + " " + loss_aggregation_name(aggregation) + " " +
                        std::to_string(ranks) + " ranks x " + std::to_string(micro) + " micro");
      }
    }
  }
}

// Context parallelism: every sample's tokens are split between 2 CP ranks (the gradient is then
// averaged over dp_size * cp_size ranks), with the whole samples' token counts passed in.
// Token-level losses only: GSPO, OPSM and sequence-level TIS need the whole sample on each rank.
TEST(LossAggregationTest, GradientIsIndependentOfContextParallelSplits) {
  std::vector<Sample> step = random_step(16, 2);
  Vec theta = {-0.1, 0.25, 0.05, -0.3, 0.15, 0.1};
  PolicyLossOptions o;
  o.eps_clip_c = 3.0;
  o.entropy_coef = 0.01;
  o.use_kl_loss = true;
  o.kl_loss_coef = 0.05;
  o.mismatch.use_tis = true;
  LossFunction loss = policy_loss_of(o);
  std::vector<std::vector<std::vector<Piece>>> whole(1, std::vector<std::vector<Piece>>(1));
  for (int s = 0; s < static_cast<int>(step.size()); ++s)
    whole[0][0].push_back({s, 0, step[s].length()});

  for (LossAggregation aggregation : kAggregations) {
    LossScale scale = step_scale(step, aggregation);
    Result reference = run_split(step, theta, whole, scale, loss, false);
    // 2 DP ranks x 2 CP ranks; each DP rank has 2 micro-batches.
    std::vector<std::vector<std::vector<Piece>>> dp_split = random_split(step, 2, 2, 3);
    std::vector<std::vector<std::vector<Piece>>> ranks;
    for (const auto& micro_batches : dp_split) {
      for (int cp_rank = 0; cp_rank < 2; ++cp_rank) {
        std::vector<std::vector<Piece>> local;
        for (const auto& pieces : micro_batches) {
          std::vector<Piece> halves;
          for (const Piece& piece : pieces) {
            int middle = (piece.end + 1) / 2;
            halves.push_back(cp_rank == 0 ? Piece{piece.sample, 0, middle}
                                          : Piece{piece.sample, middle, piece.end});
          }
          local.push_back(halves);
        }
        ranks.push_back(local);
      }
    }
    LossScale split_scale = scale;
    split_scale.dp_size = 2;
    split_scale.cp_size = 2;
    Result split = run_split(step, theta, ranks, split_scale, loss, true);
    expect_same(reference, split, "cp " + loss_aggregation_name(aggregation));
  }
}

// --- Metrics ---

TEST(LossMetricsTest, MergeSumsMaximaAndMinima) {
  LossMetrics a, b;
  a.add("pg_loss", 0.25);
  a.add("tis_max", 3.0, LossMetrics::Reduction::kMax);
  a.add("tis_min", 0.5, LossMetrics::Reduction::kMin);
  b.add("pg_loss", 0.5);
  b.add("tis_max", 4.0, LossMetrics::Reduction::kMax);
  b.add("tis_min", 0.75, LossMetrics::Reduction::kMin);
  b.add("kl_loss", 0.125);
  a.merge(b);
  EXPECT_DOUBLE_EQ(a.get("pg_loss"), 0.75);
  EXPECT_DOUBLE_EQ(a.get("tis_max"), 4.0);
  EXPECT_DOUBLE_EQ(a.get("tis_min"), 0.5);
  EXPECT_DOUBLE_EQ(a.get("kl_loss"), 0.125);
  EXPECT_EQ(a.to_map().size(), 4u);
  EXPECT_THROW(a.add("pg_loss", 1.0, LossMetrics::Reduction::kMax), Error);
  try {
    a.get("entropy");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pg_loss"), std::string::npos) << e.what();
  }
}

}  // namespace loss_aggregation_test
}  // namespace ooze::algorithms
