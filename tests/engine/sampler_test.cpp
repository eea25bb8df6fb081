// sample_tokens against references written here with plain loops in double precision: the
// greedy token and log-probs, the tokens each filter allows, the exact inverse-CDF token for a
// draw, the empirical distribution (chi-square), independence from the rest of the batch, top
// log-probs, bf16 input and the uniform generator.
#include "engine/sampler.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <set>
#include <vector>

#include "core/error.h"
#include "tests/support/expect_error.h"

namespace ooze::engine {
namespace sampler_test {

struct Filter {
  double temperature = 1.0;
  int64_t top_k = -1;
  double top_p = 1.0;
  double min_p = 0.0;
};

SamplingRow row_for(const Filter& f, uint64_t seed, uint64_t draw_index) {
  SamplingRow row;
  row.temperature = f.temperature;
  row.top_k = f.top_k;
  row.top_p = f.top_p;
  row.min_p = f.min_p;
  row.seed = seed;
  row.draw_index = draw_index;
  return row;
}

std::vector<double> tempered_probs(const std::vector<double>& logits, double temperature) {
  const double max_logit = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double total = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    p[i] = std::exp((logits[i] - max_logit) / temperature);
    total += p[i];
  }
  for (double& v : p) v /= total;
  return p;
}

std::vector<double> log_softmax_double(const std::vector<double>& logits, double temperature) {
  std::vector<double> p = tempered_probs(logits, temperature);
  for (double& v : p) v = std::log(v);
  return p;
}

// Token ids by value descending, ties by id ascending.
std::vector<int64_t> by_value(const std::vector<double>& values) {
  std::vector<int64_t> order(values.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return values[a] > values[b]; });
  return order;
}

// The distribution a row samples from: top-k, then top-p on the renormalised top-k
// distribution, then min-p, renormalised; zero for dropped tokens. `boundary_margin` receives how
// far the top-p cut's cumulative mass lies from top_p, so tests can check they are well-posed.
std::vector<double> filtered_distribution(const std::vector<double>& logits, const Filter& f,
                                          double* boundary_margin = nullptr) {
  const std::vector<double> p = tempered_probs(logits, f.temperature);
  const std::vector<int64_t> order = by_value(p);
  size_t keep = order.size();
  if (f.top_k > 0) keep = std::min(keep, static_cast<size_t>(f.top_k));
  double mass_k = 0;
  for (size_t i = 0; i < keep; ++i) mass_k += p[order[i]];
  if (boundary_margin) *boundary_margin = 1.0;
  if (f.top_p < 1.0) {
    double cumulative = 0;
    size_t n = 0;
    while (n < keep) {
      cumulative += p[order[n]] / mass_k;
      ++n;
      if (boundary_margin) {
        *boundary_margin = std::min(*boundary_margin, std::abs(cumulative - f.top_p));
      }
      if (cumulative >= f.top_p) break;
    }
    keep = n;
  }
  size_t n = 0;
  while (n < keep && p[order[n]] >= f.min_p * p[order[0]]) ++n;
  keep = std::max<size_t>(n, 1);
  std::vector<double> target(p.size(), 0.0);
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += p[order[i]];
  for (size_t i = 0; i < keep; ++i) target[order[i]] = p[order[i]] / total;
  return target;
}

// The token inverse CDF picks for uniform number u: the first token, by probability, whose
// cumulative mass exceeds u.
int64_t inverse_cdf(const std::vector<double>& target, double u) {
  double cumulative = 0;
  int64_t last = -1;
  for (int64_t id : by_value(target)) {
    if (target[id] == 0) break;
    cumulative += target[id];
    last = id;
    if (cumulative > u) return id;
  }
  return last;
}

torch::Tensor logits_tensor(const std::vector<std::vector<double>>& rows) {
  std::vector<float> flat;
  for (const auto& row : rows) flat.insert(flat.end(), row.begin(), row.end());
  return torch::tensor(flat).view(
      {static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows.front().size())});
}

std::vector<double> row_values(const torch::Tensor& logits, int64_t row) {
  torch::Tensor r = logits[row].to(torch::kDouble).contiguous();
  return std::vector<double>(r.data_ptr<double>(), r.data_ptr<double>() + r.numel());
}

// Eight tokens with well-separated probabilities, none tied.
const std::vector<double> kLogits = {0.4, 2.1, -0.7, 1.3, 0.9, -1.6, 1.7, 0.1};

// Draws `draws` tokens for one logits row, each draw its own batch row (seed, draw_index = i).
SampledTokens draw_many(const std::vector<double>& logits, const Filter& f, uint64_t seed,
                        int64_t draws) {
  std::vector<SamplingRow> rows;
  for (int64_t i = 0; i < draws; ++i) rows.push_back(row_for(f, seed, i));
  torch::Tensor batch = logits_tensor({logits}).expand({draws, -1}).contiguous();
  return sample_tokens(batch, rows);
}

TEST(SampleTokens, GreedyIsArgmaxWithLogProbsAtTemperatureOne) {
  torch::manual_seed(3);
  torch::Tensor logits = torch::randn({6, 50}) * 3;
  logits[4][7] = 20.0;
  logits[4][31] = 20.0;  // a tie: the lower id wins
  std::vector<SamplingRow> rows(6);
  for (auto& row : rows) row.temperature = 0.0;
  SampledTokens out = sample_tokens(logits, rows);
  const torch::Tensor expected_log_probs = torch::log_softmax(logits.to(torch::kDouble), 1);
  ASSERT_EQ(out.token_ids.size(), 6u);
  for (int64_t r = 0; r < 6; ++r) {
    std::vector<double> values = row_values(logits, r);
    int64_t best = 0;
    for (int64_t v = 1; v < 50; ++v) {
      if (values[v] > values[best]) best = v;
    }
    EXPECT_EQ(out.token_ids[r], best) << "row " << r;
    EXPECT_NEAR(out.logprobs[r], expected_log_probs[r][best].item<double>(), 1e-5);
    EXPECT_TRUE(out.top_logprobs[r].empty());
  }
  EXPECT_EQ(out.token_ids[4], 7);
}

TEST(SampleTokens, SampledLogProbIsThatOfTheTemperedUnfilteredDistribution) {
  torch::manual_seed(4);
  torch::Tensor logits = torch::randn({4, 30}) * 2;
  const double temperatures[] = {0.7, 1.0, 1.6, 0.3};
  std::vector<SamplingRow> rows(4);
  for (int r = 0; r < 4; ++r) {
    rows[r].temperature = temperatures[r];
    rows[r].top_k = r == 3 ? 2 : -1;  // filtered: still the unfiltered log-prob
    rows[r].seed = 10 + r;
  }
  SampledTokens out = sample_tokens(logits, rows);
  for (int r = 0; r < 4; ++r) {
    std::vector<double> expected = log_softmax_double(row_values(logits, r), temperatures[r]);
    EXPECT_NEAR(out.logprobs[r], expected[out.token_ids[r]], 1e-5) << "row " << r;
  }
}

// Many draws under one filter: never a token outside the allowed set, every allowed token seen,
// each draw the exact inverse-CDF token of the reference distribution for its uniform number.
void expect_draws_follow(const Filter& f, uint64_t seed) {
  double margin = 0;
  const std::vector<double> target = filtered_distribution(kLogits, f, &margin);
  ASSERT_GT(margin, 1e-4) << "the top_p cut must not sit on a rounding boundary";
  const std::vector<double> full_log_probs = log_softmax_double(kLogits, f.temperature);
  const int64_t draws = 2000;
  SampledTokens out = draw_many(kLogits, f, seed, draws);
  std::set<int64_t> seen;
  int64_t mismatches = 0;
  for (int64_t i = 0; i < draws; ++i) {
    const int64_t token = out.token_ids[i];
    ASSERT_TRUE(token >= 0 && token < 8);
    ASSERT_GT(target[token], 0.0) << "token " << token << " is filtered out (draw " << i << ")";
    seen.insert(token);
    if (token != inverse_cdf(target, counter_uniform(seed, i))) ++mismatches;
    EXPECT_NEAR(out.logprobs[i], full_log_probs[token], 1e-5);
  }
  EXPECT_EQ(mismatches, 0);
  int64_t allowed = 0;
  for (double p : target) allowed += p > 0;
  EXPECT_EQ(static_cast<int64_t>(seen.size()), allowed);
}

TEST(SampleTokens, TopKDrawsOnlyTheKMostLikely) {
  Filter f;
  f.top_k = 3;
  expect_draws_follow(f, 101);
}

TEST(SampleTokens, TopPDrawsOnlyTheSmallestPrefixWithThatMass) {
  Filter f;
  f.temperature = 0.8;
  f.top_p = 0.8;
  expect_draws_follow(f, 102);
}

TEST(SampleTokens, MinPDropsTokensBelowAFractionOfTheMostLikely) {
  Filter f;
  f.temperature = 1.2;
  f.min_p = 0.2;
  expect_draws_follow(f, 103);
}

TEST(SampleTokens, TopPAppliesToTheTopKDistributionRenormalised) {
  // The top-4 mass is ~0.86 of the whole; 0.65 of it is reached after two tokens, where 0.65 of
  // the whole distribution would take three.
  Filter f;
  f.top_k = 4;
  f.top_p = 0.65;
  f.min_p = 0.05;
  const std::vector<double> target = filtered_distribution(kLogits, f);
  int64_t kept = 0;
  for (double p : target) kept += p > 0;
  ASSERT_EQ(kept, 2);
  expect_draws_follow(f, 104);
}

TEST(SampleTokens, LargeTopKSortsTheWholeVocabularySmallTopKOnlyItsCandidates) {
  // Vocabulary 3000: top_k 900 takes the partial sort, top_k 1500 the full one; both draw the
  // reference inverse-CDF token (up to float rounding at a rare boundary) and never past the k-th.
  torch::manual_seed(8);
  const std::vector<double> logits = row_values(torch::randn({1, 3000}) * 0.5, 0);
  for (int64_t top_k : {900, 1500}) {
    Filter f;
    f.top_k = top_k;
    const std::vector<double> target = filtered_distribution(logits, f);
    const std::vector<int64_t> order = by_value(tempered_probs(logits, 1.0));
    std::vector<int64_t> rank(order.size());
    for (size_t r = 0; r < order.size(); ++r) rank[order[r]] = r;
    const int64_t draws = 400;
    SampledTokens out = draw_many(logits, f, 55, draws);
    int64_t matches = 0;
    for (int64_t i = 0; i < draws; ++i) {
      ASSERT_LT(rank[out.token_ids[i]], top_k) << "draw " << i;
      matches += out.token_ids[i] == inverse_cdf(target, counter_uniform(55, i));
    }
    EXPECT_GE(matches, draws - 4) << "top_k " << top_k;
  }
}

TEST(SampleTokens, ZeroProbabilityTokensAreNeverDrawn) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  torch::Tensor tensor = torch::full({500, 16}, neg_inf);
  tensor.index_put_({torch::indexing::Slice(), 5}, 0.3);
  tensor.index_put_({torch::indexing::Slice(), 9}, 0.0);
  tensor.index_put_({torch::indexing::Slice(), 12}, -0.2);
  std::vector<SamplingRow> rows;
  for (int64_t i = 0; i < 500; ++i) rows.push_back(row_for(Filter{}, 9, i));
  SampledTokens out = sample_tokens(tensor, rows);
  std::set<int64_t> seen(out.token_ids.begin(), out.token_ids.end());
  EXPECT_EQ(seen, (std::set<int64_t>{5, 9, 12}));
}

// Pearson's statistic of `counts` against `target` over the tokens the target keeps; tokens it
// drops must have no counts.
double chi_square(const std::vector<int64_t>& counts, const std::vector<double>& target,
                  int64_t draws, int64_t* degrees_of_freedom) {
  double statistic = 0;
  int64_t kept = 0;
  for (size_t t = 0; t < target.size(); ++t) {
    if (target[t] == 0) {
      EXPECT_EQ(counts[t], 0) << "token " << t;
      continue;
    }
    const double expected = target[t] * draws;
    statistic += (counts[t] - expected) * (counts[t] - expected) / expected;
    ++kept;
  }
  *degrees_of_freedom = kept - 1;
  return statistic;
}

// The 0.999 quantile of the chi-square distribution, by degrees of freedom (from a table).
double chi_square_999(int64_t degrees_of_freedom) {
  const double table[] = {0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32};
  EXPECT_TRUE(degrees_of_freedom >= 1 && degrees_of_freedom <= 7);
  return table[degrees_of_freedom];
}

void expect_frequencies_match(const Filter& f, uint64_t seed, int64_t expected_df) {
  const int64_t draws = 20000;
  const std::vector<double> target = filtered_distribution(kLogits, f);
  SampledTokens out = draw_many(kLogits, f, seed, draws);
  std::vector<int64_t> counts(kLogits.size(), 0);
  for (int64_t token : out.token_ids) ++counts[token];
  int64_t df = 0;
  const double statistic = chi_square(counts, target, draws, &df);
  EXPECT_EQ(df, expected_df);
  EXPECT_LT(statistic, chi_square_999(df)) << "df " << df;
}

TEST(SampleTokens, TemperatureSamplingMatchesTheTemperedDistribution) {
  Filter f;
  f.temperature = 0.9;
  expect_frequencies_match(f, 2024, 7);
}

TEST(SampleTokens, FilteredSamplingMatchesTheRenormalisedDistribution) {
  Filter f;
  f.temperature = 1.3;
  f.top_k = 6;
  f.top_p = 0.9;
  expect_frequencies_match(f, 77, 4);
}

TEST(SampleTokens, ChiSquareRejectsTheUnfilteredDistribution) {
  // The statistic has power: the filtered draws do not pass as draws from the plain
  // distribution.
  Filter f;
  f.temperature = 1.3;
  f.top_k = 6;
  f.top_p = 0.9;
  const int64_t draws = 20000;
  SampledTokens out = draw_many(kLogits, f, 77, draws);
  std::vector<int64_t> counts(kLogits.size(), 0);
  for (int64_t token : out.token_ids) ++counts[token];
  const std::vector<double> plain = tempered_probs(kLogits, f.temperature);
  double statistic = 0;
  for (size_t t = 0; t < plain.size(); ++t) {
    const double expected = plain[t] * draws;
    statistic += (counts[t] - expected) * (counts[t] - expected) / expected;
  }
  EXPECT_GT(statistic, chi_square_999(7));
}

TEST(SampleTokens, ARowSamplesTheSameTokenWhateverElseIsInTheBatch) {
  torch::manual_seed(11);
  const int64_t vocab = 200;
  torch::Tensor mine = torch::randn({1, vocab}) * 2;
  torch::Tensor others = torch::randn({4, vocab}) * 3;
  SamplingRow row;
  row.temperature = 0.8;
  row.top_p = 0.95;
  row.top_k = 40;
  row.min_p = 0.01;
  row.seed = 42;
  row.top_logprobs_num = 3;
  std::vector<SamplingRow> other_rows(4);
  other_rows[0].temperature = 0.0;
  other_rows[1].top_k = 150;  // widens the partial sort shared with `row`
  other_rows[2].temperature = 1.5;
  other_rows[2].top_logprobs_num = 7;
  other_rows[3].top_k = 3;
  other_rows[3].min_p = 0.3;
  std::set<int64_t> distinct;
  for (uint64_t draw = 0; draw < 100; ++draw) {
    row.draw_index = draw;
    for (auto& other : other_rows) other.seed = 1000 + draw;
    SampledTokens alone = sample_tokens(mine, {row});
    for (int64_t position : {0, 2, 4}) {
      std::vector<SamplingRow> rows = other_rows;
      rows.insert(rows.begin() + position, row);
      torch::Tensor batch =
          torch::cat({others.slice(0, 0, position), mine, others.slice(0, position, 4)}, 0);
      SampledTokens together = sample_tokens(batch, rows);
      ASSERT_EQ(together.token_ids[position], alone.token_ids[0])
          << "draw " << draw << " at position " << position;
      EXPECT_EQ(together.logprobs[position], alone.logprobs[0]);
      ASSERT_EQ(together.top_logprobs[position].size(), 3u);
      for (int j = 0; j < 3; ++j) {
        EXPECT_EQ(together.top_logprobs[position][j].token_id, alone.top_logprobs[0][j].token_id);
      }
    }
    distinct.insert(alone.token_ids[0]);
  }
  // The row really samples: different draws give different tokens.
  EXPECT_GT(distinct.size(), 5u);
}

TEST(SampleTokens, DifferentSeedsDrawDifferentTokens) {
  std::vector<SamplingRow> rows;
  for (uint64_t seed = 0; seed < 100; ++seed) rows.push_back(row_for(Filter{}, seed, 0));
  torch::Tensor logits = torch::zeros({100, 50});
  SampledTokens out = sample_tokens(logits, rows);
  std::set<int64_t> distinct(out.token_ids.begin(), out.token_ids.end());
  EXPECT_GT(distinct.size(), 30u);
  // And the same seed and draw index draw the same token again.
  SampledTokens again = sample_tokens(logits, rows);
  EXPECT_EQ(again.token_ids, out.token_ids);
}

TEST(SampleTokens, TopLogProbsAreTheMostLikelyTokensIdAscendingOnTies) {
  // Tied logits at ids 2, 4 and 6, below the top token 5.
  const std::vector<double> logits = {0.1, -1.0, 1.5, 0.2, 1.5, 3.0, 1.5, -2.0, 0.0, 1.0};
  SamplingRow sampled;
  sampled.temperature = 0.5;
  sampled.top_logprobs_num = 4;
  SamplingRow greedy;
  greedy.temperature = 0.0;
  greedy.top_logprobs_num = 20;  // more than the vocabulary: all of it
  SamplingRow silent;
  SampledTokens out =
      sample_tokens(logits_tensor({logits, logits, logits}), {sampled, greedy, silent});

  auto expect_top = [&](const std::vector<TopLogProb>& got, double temperature, size_t count) {
    const std::vector<double> expected = log_softmax_double(logits, temperature);
    const std::vector<int64_t> order = by_value(expected);
    ASSERT_EQ(got.size(), count);
    for (size_t j = 0; j < count; ++j) {
      EXPECT_EQ(got[j].token_id, order[j]) << "entry " << j;
      EXPECT_NEAR(got[j].logprob, expected[order[j]], 1e-5) << "entry " << j;
    }
  };
  expect_top(out.top_logprobs[0], 0.5, 4);
  expect_top(out.top_logprobs[1], 1.0, 10);
  EXPECT_TRUE(out.top_logprobs[2].empty());
  EXPECT_EQ(out.top_logprobs[0][1].token_id, 2);
  EXPECT_EQ(out.top_logprobs[0][2].token_id, 4);
  EXPECT_EQ(out.top_logprobs[0][3].token_id, 6);
}

TEST(SampleTokens, Bf16LogitsGiveTheResultsOfTheirFp32Values) {
  torch::manual_seed(5);
  torch::Tensor bf16 = (torch::randn({5, 64}) * 2).to(torch::kBFloat16);
  std::vector<SamplingRow> rows(5);
  rows[0].temperature = 0.0;
  rows[1].top_k = 5;
  rows[2].top_p = 0.7;
  rows[2].temperature = 0.6;
  rows[3].min_p = 0.1;
  rows[4].top_logprobs_num = 6;
  for (size_t r = 0; r < rows.size(); ++r) rows[r].seed = 300 + r;
  SampledTokens from_bf16 = sample_tokens(bf16, rows);
  SampledTokens from_fp32 = sample_tokens(bf16.to(torch::kFloat), rows);
  EXPECT_EQ(from_bf16.token_ids, from_fp32.token_ids);
  EXPECT_EQ(from_bf16.logprobs, from_fp32.logprobs);
  ASSERT_EQ(from_bf16.top_logprobs[4].size(), 6u);
  for (int j = 0; j < 6; ++j) {
    EXPECT_EQ(from_bf16.top_logprobs[4][j].token_id, from_fp32.top_logprobs[4][j].token_id);
  }
  // bf16 ties often; greedy still takes the lowest id among the maxima.
  std::vector<double> values = row_values(bf16, 0);
  int64_t best = 0;
  for (int64_t v = 1; v < 64; ++v) {
    if (values[v] > values[best]) best = v;
  }
  EXPECT_EQ(from_bf16.token_ids[0], best);
}

TEST(SampleTokens, EmptyBatchGivesEmptyResult) {
  SampledTokens out = sample_tokens(torch::zeros({0, 10}), {});
  EXPECT_TRUE(out.token_ids.empty());
  EXPECT_TRUE(out.logprobs.empty());
  EXPECT_TRUE(out.top_logprobs.empty());
}

TEST(SampleTokens, RejectsMismatchedOrMalformedInput) {
  using ooze::testing::error_message_of;
  EXPECT_CONTAINS(error_message_of<Error>([] {
                    sample_tokens(torch::zeros({3, 10}), std::vector<SamplingRow>(2));
                  }),
                  "2 sampling rows");
  EXPECT_CONTAINS(error_message_of<Error>(
                      [] { sample_tokens(torch::zeros({10}), std::vector<SamplingRow>(1)); }),
                  "2-D");
  EXPECT_CONTAINS(error_message_of<Error>([] {
                    sample_tokens(torch::zeros({2, 3, 4}), std::vector<SamplingRow>(2));
                  }),
                  "2-D");
  EXPECT_CONTAINS(error_message_of<Error>([] {
                    sample_tokens(torch::zeros({1, 4}, torch::kLong), std::vector<SamplingRow>(1));
                  }),
                  "floating point");
  SamplingRow bad;
  bad.temperature = -0.5;
  EXPECT_CONTAINS(error_message_of<Error>([&] {
                    sample_tokens(torch::zeros({2, 4}), {SamplingRow{}, bad});
                  }),
                  "row 1: temperature");
  bad = SamplingRow{};
  bad.top_p = 0.0;
  EXPECT_CONTAINS(error_message_of<Error>([&] {
                    sample_tokens(torch::zeros({1, 4}), {bad});
                  }),
                  "top_p");
}

TEST(CounterUniform, IsDeterministicInRangeAndUniform) {
  EXPECT_EQ(counter_uniform(7, 3), counter_uniform(7, 3));
  EXPECT_NE(counter_uniform(7, 3), counter_uniform(7, 4));
  EXPECT_NE(counter_uniform(7, 3), counter_uniform(8, 3));
  const int64_t n = 100000;
  std::vector<int64_t> bins(10, 0);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    // Half the values walk the draw index, half the seed.
    const double u = i % 2 ? counter_uniform(12345, i) : counter_uniform(i, 0);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    ++bins[static_cast<int>(u * 10)];
  }
  EXPECT_NEAR(sum / n, 0.5, 0.005);
  double statistic = 0;
  for (int64_t count : bins) statistic += (count - n / 10.0) * (count - n / 10.0) / (n / 10.0);
  EXPECT_LT(statistic, 27.88);  // chi-square, 9 degrees of freedom, 0.999 quantile
}

}  // namespace sampler_test
}  // namespace ooze::engine
