// The policy loss (PPO clip, dual clip, GSPO, CISPO, entropy, KL loss, TIS/icepop, OPSM) against a
// plain-loop implementation written here, and its gradients against finite differences.
#include "algorithms/policy_loss.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "tests/algorithms/double_vectors.h"

namespace ooze::algorithms {
namespace policy_loss_test {

double clamp(double x, double low, double high) { return std::min(high, std::max(low, x)); }

// A packed micro-batch on the host.
struct Packed {
  std::vector<int> cu_seqlens = {0};
  Vec mask, log_probs, old_log_probs, ref_log_probs, rollout_log_probs, advantages, entropy;

  int num_sequences() const { return static_cast<int>(cu_seqlens.size()) - 1; }
  int num_tokens() const { return cu_seqlens.back(); }
  int sequence_of(int t) const {
    int s = 0;
    while (cu_seqlens[s + 1] <= t) ++s;
    return s;
  }
  double counted(int s) const {
    double n = 0;
    for (int t = cu_seqlens[s]; t < cu_seqlens[s + 1]; ++t) n += mask[t];
    return n;
  }
};

// Samples of 1..4 prompt tokens (mask 0) and 0..8 response tokens (mostly mask 1), one sample with
// an empty response and one whose response does not count at all. `spread` scales how far the
// current policy is from the old one.
Packed random_packed(int samples, uint32_t seed, double spread = 0.4) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::normal_distribution<double> normal(0.0, 1.0);
  Packed p;
  for (int s = 0; s < samples; ++s) {
    int prompt = 1 + static_cast<int>(uniform(rng) * 4);
    int response = s == 0 ? 0 : static_cast<int>(uniform(rng) * 9);
    double advantage = normal(rng);
    for (int t = 0; t < prompt + response; ++t) {
      bool counts = t >= prompt && s != 1 && uniform(rng) > 0.15;
      double lp = -0.05 - 2.5 * uniform(rng);
      p.mask.push_back(counts ? 1.0 : 0.0);
      p.log_probs.push_back(lp);
      p.old_log_probs.push_back(lp + spread * normal(rng));
      p.ref_log_probs.push_back(lp + 0.5 * normal(rng));
      p.rollout_log_probs.push_back(p.old_log_probs.back() + 0.3 * normal(rng));
      p.advantages.push_back(advantage + 0.2 * normal(rng));
      p.entropy.push_back(2.0 * uniform(rng));
    }
    p.cu_seqlens.push_back(static_cast<int>(p.mask.size()));
  }
  return p;
}

PolicyLossInputs inputs_of(const Packed& p) {
  PolicyLossInputs in;
  in.cu_seqlens = at::tensor(at::ArrayRef<int>(p.cu_seqlens), at::kInt).clone();
  in.loss_mask = tensor_of(p.mask);
  in.log_probs = tensor_of(p.log_probs);
  in.old_log_probs = tensor_of(p.old_log_probs);
  in.ref_log_probs = tensor_of(p.ref_log_probs);
  in.rollout_log_probs = tensor_of(p.rollout_log_probs);
  in.advantages = tensor_of(p.advantages);
  in.entropy = tensor_of(p.entropy);
  return in;
}

// The per-token weight of the aggregation, from loss_aggregation.h's formulas.
Vec reference_weights(const Packed& p, const LossScale& scale) {
  Vec w(p.num_tokens());
  for (int t = 0; t < p.num_tokens(); ++t) {
    switch (scale.aggregation) {
      case LossAggregation::kTokenMean:
        w[t] = p.mask[t] / std::max(scale.global_tokens, 1.0);
        break;
      case LossAggregation::kSequenceMeanTokenMean:
        w[t] = p.mask[t] / (std::max(p.counted(p.sequence_of(t)), 1.0) * scale.global_sequences);
        break;
      case LossAggregation::kSequenceMeanTokenSum:
        w[t] = p.mask[t] / scale.global_sequences;
        break;
    }
  }
  return w;
}

double reference_kl(double x, KlEstimator estimator, double ratio) {
  double kl = 0;
  if (estimator == KlEstimator::kK1) kl = x;
  if (estimator == KlEstimator::kK2) kl = x * x / 2;
  if (estimator == KlEstimator::kK3 || estimator == KlEstimator::kLowVarKl) {
    double r = clamp(-x, -20, 20);
    kl = std::exp(r) - 1 - r;
  }
  kl *= ratio;
  if (estimator == KlEstimator::kLowVarKl) kl = clamp(kl, -10, 10);
  return kl;
}

struct Reference {
  double loss = 0;  // with the gradient factor
  std::map<std::string, double> metrics;
};

// Everything policy_loss.h documents, one token at a time.
Reference reference_policy_loss(const Packed& p, const PolicyLossOptions& o,
                                const LossScale& scale) {
  const int T = p.num_tokens(), B = p.num_sequences();
  Vec w = reference_weights(p, scale);
  // Per-sequence means of log pi - log pi_old, of the OPSM drift, and TIS log-ratios.
  Vec seq_log_ratio(B, 0), seq_rollout_sum(B, 0);
  for (int s = 0; s < B; ++s) {
    for (int t = p.cu_seqlens[s]; t < p.cu_seqlens[s + 1]; ++t) {
      seq_log_ratio[s] += p.mask[t] * (p.log_probs[t] - p.old_log_probs[t]);
      seq_rollout_sum[s] += p.mask[t] * (p.old_log_probs[t] - p.rollout_log_probs[t]);
    }
  }
  // eps_clip_high 0 means eps_clip, as --eps-clip-high documents.
  const double clip_high = o.eps_clip_high == 0 ? o.eps_clip : o.eps_clip_high;
  std::map<std::string, double> m;
  double pg_loss = 0, inf = std::numeric_limits<double>::infinity();
  double abs_max = 0, tis_max = 0, tis_min = inf;
  for (int t = 0; t < T; ++t) {
    const int s = p.sequence_of(t);
    const double n = std::max(p.counted(s), 1.0), a = p.advantages[t];
    double log_ratio = p.log_probs[t] - p.old_log_probs[t];
    if (o.kind == PolicyLossKind::kGspo) log_ratio = seq_log_ratio[s] / n;
    const double ratio = std::exp(clamp(log_ratio, -20, 20));
    double loss = 0, clipped = 0;
    if (o.kind == PolicyLossKind::kCispo) {
      double weight = clamp(ratio, 1 - o.eps_clip, 1 + clip_high);
      loss = -weight * a * p.log_probs[t];
      clipped = weight != ratio;
    } else {
      double unclipped_loss = -ratio * a;
      double clipped_loss = -clamp(ratio, 1 - o.eps_clip, 1 + clip_high) * a;
      loss = std::max(unclipped_loss, clipped_loss);
      clipped = clipped_loss > unclipped_loss;
      if (o.eps_clip_c != 0 && a < 0) loss = std::min(loss, -o.eps_clip_c * a);
    }
    if (o.use_opsm) {
      double drift = -seq_log_ratio[s] / n;
      bool dropped = a < 0 && drift > o.opsm_delta;
      if (dropped) loss = 0;
      m["opsm_clipfrac"] += dropped * w[t];
    }
    if (o.mismatch.needs_rollout_log_probs()) {
      double d = p.old_log_probs[t] - p.rollout_log_probs[t], level = d;
      if (o.mismatch.level == TisLevel::kSequence) level = seq_rollout_sum[s];
      if (o.mismatch.level == TisLevel::kGeometric) level = seq_rollout_sum[s] / n;
      double is_ratio = std::exp(clamp(level, -20, 20));
      bool inside = is_ratio >= o.mismatch.tis_clip_low && is_ratio <= o.mismatch.tis_clip;
      double weight = o.mismatch.mode == TisMode::kClip
                          ? clamp(is_ratio, o.mismatch.tis_clip_low, o.mismatch.tis_clip)
                          : (inside ? is_ratio : 0.0);
      if (o.mismatch.use_tis) loss *= weight;
      double dc = clamp(d, -20, 20);
      m["train_rollout_logprob_abs_diff"] += std::abs(d) * w[t];
      m["train_rollout_k3_kl"] += (std::exp(dc) - 1 - dc) * w[t];
      m["tis"] += is_ratio * w[t];
      m["tis_abs"] += std::abs(is_ratio - 1) * w[t];
      m["tis_clipfrac"] += (inside ? 0.0 : 1.0) * w[t];
      if (p.mask[t] > 0) {
        abs_max = std::max(abs_max, std::abs(d));
        tis_max = std::max(tis_max, is_ratio);
        tis_min = std::min(tis_min, is_ratio);
      }
    }
    pg_loss += loss * w[t];
    m["pg_clipfrac"] += clipped * w[t];
    m["ppo_kl"] += -log_ratio * w[t];
    m["entropy_loss"] += p.entropy[t] * w[t];
    if (o.use_kl_loss) {
      double ratio_for_kl =
          o.use_unbiased_kl ? std::exp(clamp(p.log_probs[t] - p.old_log_probs[t], -20, 20)) : 1;
      m["kl_loss"] +=
          reference_kl(p.log_probs[t] - p.ref_log_probs[t], o.kl_loss_type, ratio_for_kl) * w[t];
    }
  }
  if (o.mismatch.needs_rollout_log_probs()) {
    m["train_rollout_logprob_abs_diff_max"] = abs_max;
    m["tis_max"] = tis_max;
    m["tis_min"] = tis_min;
  }
  m["pg_loss"] = pg_loss;
  double loss = pg_loss - o.entropy_coef * m["entropy_loss"];
  if (o.use_kl_loss) loss += o.kl_loss_coef * m["kl_loss"];
  m["loss"] = loss;
  return Reference{loss * scale.gradient_factor(), m};
}

LossScale scale_for(const Packed& p, LossAggregation aggregation, int64_t dp_size = 1) {
  LossScale scale;
  scale.aggregation = aggregation;
  for (double v : p.mask) scale.global_tokens += v;
  scale.global_tokens *= 1.7;  // the step is bigger than this micro-batch
  scale.global_sequences = 2.5 * p.num_sequences();
  scale.dp_size = dp_size;
  return scale;
}

const LossAggregation kAggregations[] = {LossAggregation::kTokenMean,
                                         LossAggregation::kSequenceMeanTokenMean,
                                         LossAggregation::kSequenceMeanTokenSum};

void expect_matches(const Reference& expected, const LossOutput& got, const std::string& what) {
  ASSERT_TRUE(got.loss.defined());
  EXPECT_NEAR(got.loss.item<double>(), expected.loss, 1e-12) << what;
  for (const auto& [name, value] : expected.metrics) {
    ASSERT_TRUE(got.metrics.contains(name)) << what << ": missing metric " << name;
    EXPECT_NEAR(got.metrics.get(name), value, 1e-12) << what << ": " << name;
  }
  for (const auto& [name, entry] : got.metrics.entries()) {
    EXPECT_TRUE(expected.metrics.count(name)) << what << ": unexpected metric " << name;
  }
}

TEST(PolicyLossTest, PpoClipMatchesReference) {
  for (double eps_clip_c : {0.0, 3.0}) {
    for (LossAggregation aggregation : kAggregations) {
      Packed p = random_packed(7, 1, 0.6);
      PolicyLossOptions options;
      options.eps_clip = 0.2;
      options.eps_clip_high = 0.28;
      options.eps_clip_c = eps_clip_c;
      LossScale scale = scale_for(p, aggregation, 4);
      std::string what = loss_aggregation_name(aggregation) + " dual " + std::to_string(eps_clip_c);
      LossOutput got = policy_loss(inputs_of(p), options, scale);
      expect_matches(reference_policy_loss(p, options, scale), got, what);
      EXPECT_GT(got.metrics.get("pg_clipfrac"), 0.0) << "the inputs should exercise clipping";
    }
  }
}

TEST(PolicyLossTest, GspoClipsTheSequenceRatio) {
  for (LossAggregation aggregation : kAggregations) {
    Packed p = random_packed(8, 2, 0.05);
    PolicyLossOptions options;
    options.kind = PolicyLossKind::kGspo;
    options.eps_clip = 3e-3;
    options.eps_clip_high = 4e-3;
    LossScale scale = scale_for(p, aggregation, 2);
    expect_matches(reference_policy_loss(p, options, scale),
                   policy_loss(inputs_of(p), options, scale),
                   "gspo " + loss_aggregation_name(aggregation));
  }
}

TEST(PolicyLossTest, CispoWeightsLogProbsByTheClippedRatioWithoutItsGradient) {
  Packed p = random_packed(7, 3, 0.6);
  PolicyLossOptions options;
  options.kind = PolicyLossKind::kCispo;
  options.eps_clip = 1.0;  // canonical CISPO: no lower bound
  options.eps_clip_high = 0.28;
  LossScale scale = scale_for(p, LossAggregation::kTokenMean, 2);
  PolicyLossInputs in = inputs_of(p);
  in.log_probs.requires_grad_(true);
  LossOutput got = policy_loss(in, options, scale);
  expect_matches(reference_policy_loss(p, options, scale), got, "cispo");
  got.loss.backward();
  Vec grad = vec_of(in.log_probs.grad()), w = reference_weights(p, scale);
  for (int t = 0; t < p.num_tokens(); ++t) {
    double ratio = std::exp(p.log_probs[t] - p.old_log_probs[t]);
    double weight = std::min(ratio, 1 + options.eps_clip_high);
    EXPECT_NEAR(grad[t], -weight * p.advantages[t] * w[t] * scale.gradient_factor(), 1e-12) << t;
  }
}

TEST(PolicyLossTest, EntropyKlLossTisAndOpsmTogether) {
  for (KlEstimator kl_type :
       {KlEstimator::kK1, KlEstimator::kK2, KlEstimator::kK3, KlEstimator::kLowVarKl}) {
    for (bool unbiased : {false, true}) {
      Packed p = random_packed(9, 4, 0.3);
      PolicyLossOptions options;
      options.eps_clip_c = 2.5;
      options.entropy_coef = 0.01;
      options.use_kl_loss = true;
      options.kl_loss_coef = 0.05;
      options.kl_loss_type = kl_type;
      options.use_unbiased_kl = unbiased;
      options.mismatch.use_tis = true;
      options.mismatch.tis_clip = 1.5;
      options.mismatch.tis_clip_low = 0.5;
      options.use_opsm = true;
      options.opsm_delta = 0.05;
      LossScale scale = scale_for(p, LossAggregation::kSequenceMeanTokenMean, 3);
      LossOutput got = policy_loss(inputs_of(p), options, scale);
      expect_matches(reference_policy_loss(p, options, scale), got,
                     kl_estimator_name(kl_type) + (unbiased ? " unbiased" : ""));
      EXPECT_GT(got.metrics.get("opsm_clipfrac"), 0.0) << "the inputs should exercise OPSM";
      EXPECT_GT(got.metrics.get("tis_clipfrac"), 0.0) << "the inputs should exercise TIS";
    }
  }
}

TEST(PolicyLossTest, TisLevelsAndModes) {
  for (TisLevel level : {TisLevel::kToken, TisLevel::kSequence, TisLevel::kGeometric}) {
    for (TisMode mode : {TisMode::kClip, TisMode::kMask}) {
      for (bool use_tis : {true, false}) {
        Packed p = random_packed(8, 5, 0.3);
        PolicyLossOptions options;
        options.mismatch.use_tis = use_tis;
        options.mismatch.get_mismatch_metrics = !use_tis;
        options.mismatch.level = level;
        options.mismatch.mode = mode;
        options.mismatch.tis_clip = 1.3;
        options.mismatch.tis_clip_low = 0.7;
        LossScale scale = scale_for(p, LossAggregation::kTokenMean);
        expect_matches(reference_policy_loss(p, options, scale),
                       policy_loss(inputs_of(p), options, scale),
                       "level " + std::to_string(static_cast<int>(level)) + " mode " +
                           std::to_string(static_cast<int>(mode)) + (use_tis ? " tis" : ""));
      }
    }
  }
}

void expect_gradients_match(const Packed& p, const PolicyLossOptions& options,
                            const LossScale& scale, const std::string& what) {
  PolicyLossInputs in = inputs_of(p);
  in.log_probs.requires_grad_(true);
  in.entropy.requires_grad_(true);
  policy_loss(in, options, scale).loss.backward();
  Vec grad_log_probs = vec_of(in.log_probs.grad());
  // Without an entropy bonus the entropy is only a metric and gets no gradient.
  Vec grad_entropy =
      in.entropy.grad().defined() ? vec_of(in.entropy.grad()) : Vec(p.entropy.size(), 0.0);

  auto loss_at = [&](const Vec& log_probs, const Vec& entropy) {
    PolicyLossInputs x = inputs_of(p);
    x.log_probs = tensor_of(log_probs);
    x.entropy = tensor_of(entropy);
    return policy_loss(x, options, scale).loss.item<double>();
  };
  Vec numeric_log_probs =
      finite_difference([&](const Vec& x) { return loss_at(x, p.entropy); }, p.log_probs);
  Vec numeric_entropy =
      finite_difference([&](const Vec& x) { return loss_at(p.log_probs, x); }, p.entropy);
  for (int t = 0; t < p.num_tokens(); ++t) {
    EXPECT_NEAR(grad_log_probs[t], numeric_log_probs[t],
                1e-7 * (1 + std::abs(numeric_log_probs[t])))
        << what << ": d/d log_probs[" << t << "]";
    EXPECT_NEAR(grad_entropy[t], numeric_entropy[t], 1e-7) << what << ": d/d entropy[" << t << "]";
  }
}

TEST(PolicyLossTest, GradientsMatchFiniteDifferences) {
  for (LossAggregation aggregation : kAggregations) {
    for (PolicyLossKind kind : {PolicyLossKind::kPpoClip, PolicyLossKind::kGspo}) {
      Packed p = random_packed(6, 6, kind == PolicyLossKind::kGspo ? 0.1 : 0.5);
      PolicyLossOptions options;
      options.kind = kind;
      options.eps_clip_high = 0.28;
      options.eps_clip_c = 3.0;
      options.entropy_coef = 0.02;
      options.use_kl_loss = true;
      options.kl_loss_coef = 0.1;
      options.kl_loss_type = KlEstimator::kLowVarKl;
      options.use_unbiased_kl = true;
      options.mismatch.use_tis = true;
      options.mismatch.level = TisLevel::kGeometric;
      options.use_opsm = true;
      options.opsm_delta = 0.02;
      expect_gradients_match(
          p, options, scale_for(p, aggregation, 2),
          loss_aggregation_name(aggregation) + (kind == PolicyLossKind::kGspo ? " gspo" : " ppo"));
    }
  }
  for (KlEstimator kl_type : {KlEstimator::kK1, KlEstimator::kK2, KlEstimator::kK3}) {
    Packed p = random_packed(5, 7, 0.5);
    PolicyLossOptions options;
    options.use_kl_loss = true;
    options.kl_loss_coef = 0.3;
    options.kl_loss_type = kl_type;
    expect_gradients_match(p, options, scale_for(p, LossAggregation::kTokenMean),
                           "kl " + kl_estimator_name(kl_type));
  }
}

TEST(PolicyLossTest, ExtremeLogRatiosGiveFiniteLossAndGradients) {
  Packed p = random_packed(6, 8);
  const double offsets[] = {-1000.0, -60.0, 60.0, 1000.0};
  for (int t = 0; t < p.num_tokens(); ++t) {
    p.old_log_probs[t] = p.log_probs[t] + offsets[t % 4];
    p.rollout_log_probs[t] = p.old_log_probs[t] - offsets[(t + 1) % 4];
    p.ref_log_probs[t] = p.log_probs[t] + offsets[(t + 2) % 4];
  }
  for (PolicyLossKind kind :
       {PolicyLossKind::kPpoClip, PolicyLossKind::kGspo, PolicyLossKind::kCispo}) {
    for (at::ScalarType dtype : {at::kFloat, at::kDouble}) {
      PolicyLossOptions options;
      options.kind = kind;
      options.eps_clip_c = kind == PolicyLossKind::kCispo ? 0.0 : 3.0;
      options.entropy_coef = 0.01;
      options.use_kl_loss = true;
      options.kl_loss_coef = 0.1;
      options.kl_loss_type = KlEstimator::kK3;
      options.use_unbiased_kl = true;
      options.mismatch.use_tis = true;
      options.mismatch.level = TisLevel::kSequence;
      options.use_opsm = true;
      PolicyLossInputs in = inputs_of(p);
      for (at::Tensor* t : {&in.log_probs, &in.old_log_probs, &in.ref_log_probs,
                            &in.rollout_log_probs, &in.advantages, &in.entropy, &in.loss_mask}) {
        *t = t->to(dtype);
      }
      in.log_probs.requires_grad_(true);
      LossOutput out = policy_loss(in, options, scale_for(p, LossAggregation::kTokenMean));
      out.loss.backward();
      EXPECT_TRUE(std::isfinite(out.loss.item<double>()));
      for (double g : vec_of(in.log_probs.grad())) EXPECT_TRUE(std::isfinite(g));
      for (const auto& [name, entry] : out.metrics.entries()) {
        EXPECT_TRUE(std::isfinite(entry.value)) << name;
      }
    }
  }
}

TEST(PolicyLossTest, EmptyMicroBatchGivesZeroLossThatBackpropagates) {
  PolicyLossInputs in;
  in.cu_seqlens = at::zeros({1}, at::kInt);
  for (at::Tensor* t :
       {&in.loss_mask, &in.log_probs, &in.old_log_probs, &in.advantages, &in.rollout_log_probs}) {
    *t = at::zeros({0}, at::kDouble);
  }
  in.log_probs.requires_grad_(true);
  PolicyLossOptions options;
  options.mismatch.use_tis = true;
  LossScale scale;
  scale.global_tokens = 10;
  scale.global_sequences = 4;
  LossOutput out = policy_loss(in, options, scale);
  EXPECT_EQ(out.loss.item<double>(), 0.0);
  out.loss.backward();
  EXPECT_EQ(out.metrics.get("pg_loss"), 0.0);
  EXPECT_EQ(out.metrics.get("tis_max"), 0.0);
  EXPECT_EQ(out.metrics.get("tis_min"), std::numeric_limits<double>::infinity());
  // Samples without tokens, sequence-level everything: the backward must still run.
  in.cu_seqlens = at::zeros({3}, at::kInt);
  options.kind = PolicyLossKind::kGspo;
  options.use_opsm = true;
  options.mismatch.level = TisLevel::kSequence;
  LossOutput gspo = policy_loss(in, options, scale);
  EXPECT_EQ(gspo.loss.item<double>(), 0.0);
  gspo.loss.backward();
}

TEST(PolicyLossTest, HalfPrecisionLogProbsAreComputedInFloat32) {
  Packed p = random_packed(5, 9);
  PolicyLossInputs in = inputs_of(p);
  in.log_probs = in.log_probs.to(at::kBFloat16).requires_grad_(true);
  LossOutput out = policy_loss(in, PolicyLossOptions{}, scale_for(p, LossAggregation::kTokenMean));
  EXPECT_EQ(out.loss.scalar_type(), at::kFloat);
  out.loss.backward();
  EXPECT_EQ(in.log_probs.grad().scalar_type(), at::kBFloat16);
}

TEST(PolicyLossTest, MissingInputsAndInvalidOptionsAreReported) {
  Packed p = random_packed(4, 10);
  LossScale scale = scale_for(p, LossAggregation::kTokenMean);
  auto message_of = [&](PolicyLossInputs in, const PolicyLossOptions& options) {
    try {
      policy_loss(in, options, scale);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  PolicyLossOptions kl;
  kl.use_kl_loss = true;
  PolicyLossInputs no_ref = inputs_of(p);
  no_ref.ref_log_probs = at::Tensor();
  EXPECT_NE(message_of(no_ref, kl).find("ref_log_probs"), std::string::npos);

  PolicyLossOptions tis;
  tis.mismatch.use_tis = true;
  PolicyLossInputs no_rollout = inputs_of(p);
  no_rollout.rollout_log_probs = at::Tensor();
  EXPECT_NE(message_of(no_rollout, tis).find("rollout_log_probs"), std::string::npos);

  PolicyLossOptions entropy;
  entropy.entropy_coef = 0.1;
  PolicyLossInputs no_entropy = inputs_of(p);
  no_entropy.entropy = at::Tensor();
  EXPECT_NE(message_of(no_entropy, entropy).find("entropy"), std::string::npos);

  PolicyLossInputs short_advantages = inputs_of(p);
  short_advantages.advantages = short_advantages.advantages.slice(0, 1);
  EXPECT_NE(message_of(short_advantages, {}).find("advantages"), std::string::npos);

  PolicyLossInputs bad_boundaries = inputs_of(p);
  bad_boundaries.cu_seqlens[1] = 1000;
  EXPECT_NE(message_of(bad_boundaries, {}).find("cu_seqlens"), std::string::npos);

  PolicyLossOptions dual;
  dual.eps_clip_c = 0.8;
  EXPECT_NE(message_of(inputs_of(p), dual).find("eps_clip_c"), std::string::npos);
  tis.mismatch.tis_clip_low = 3.0;
  EXPECT_NE(message_of(inputs_of(p), tis).find("tis_clip_low"), std::string::npos);

  LossScale too_few = scale;
  too_few.aggregation = LossAggregation::kSequenceMeanTokenMean;
  too_few.global_sequences = 1;
  EXPECT_THROW(policy_loss(inputs_of(p), {}, too_few), Error);
}

}  // namespace policy_loss_test
}  // namespace ooze::algorithms
