// On-policy self-distillation's generalized JSD and loss against an independent python3-torch
// computation (probabilities in fp64, the mixture taken as it is defined, gradients by torch's
// autograd), and the rules of its flags.
#include "algorithms/vocabulary_distillation.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "algorithms/algorithm_options.h"
#include "core/config.h"
#include "core/error.h"
#include "tests/models/python_reference.h"
#include "tests/support/expect_error.h"

namespace ooze::algorithms {
namespace vocabulary_distillation_test {

using testing::error_message_of;

// Reads {"student": [[...]], "teacher": [[...]], "beta": b, "clip": c, "rows": [sample of each
// row], "mask": [...], "coef": k} and prints the per-row JSD, and the gradient with respect to
// the student's logits of coef * the mean over samples of the mean over their counted rows of
// min(JSD, clip) (clip 0: none).
constexpr const char* kReference = R"PY(
import json, sys, torch
given = json.load(sys.stdin)
student = torch.tensor(given["student"], dtype=torch.float64, requires_grad=True)
teacher = torch.tensor(given["teacher"], dtype=torch.float64)
beta = given["beta"]
p_s = torch.softmax(student, -1)
p_t = torch.softmax(teacher, -1)
def kl(p, q):
    return (p * (p.log() - q.log())).sum(-1)
if beta == 0:
    jsd = kl(p_t, p_s)
elif beta == 1:
    jsd = kl(p_s, p_t)
else:
    m = beta * p_t + (1 - beta) * p_s
    jsd = beta * kl(p_t, m) + (1 - beta) * kl(p_s, m)
capped = torch.clamp(jsd, max=given["clip"]) if given["clip"] > 0 else jsd
rows = torch.tensor(given["rows"])
mask = torch.tensor(given["mask"], dtype=torch.float64)
samples = int(rows.max()) + 1
loss = 0
for s in range(samples):
    mine = (rows == s).double() * mask
    loss = loss + (capped * mine).sum() / mine.sum().clamp(min=1)
loss = given["coef"] * loss / samples
loss.backward()
print(json.dumps({"jsd": jsd.tolist(), "loss": loss.item(), "grad": student.grad.tolist()}))
)PY";

nlohmann::json reference(const at::Tensor& student, const at::Tensor& teacher, double beta,
                         double clip, const std::vector<int64_t>& rows,
                         const std::vector<double>& mask, double coef) {
  auto rows_of = [](const at::Tensor& t) {
    std::vector<std::vector<double>> out;
    const at::Tensor d = t.to(at::kDouble).contiguous();
    for (int64_t i = 0; i < d.size(0); ++i) {
      out.emplace_back(d[i].data_ptr<double>(), d[i].data_ptr<double>() + d.size(1));
    }
    return out;
  };
  const nlohmann::json input = {{"student", rows_of(student)},
                                {"teacher", rows_of(teacher)},
                                {"beta", beta},
                                {"clip", clip},
                                {"rows", rows},
                                {"mask", mask},
                                {"coef", coef}};
  const std::string dir = testing::make_temp_dir("jsd-reference");
  const std::string script = dir + "/jsd.py";
  std::ofstream(script) << kReference;
  return nlohmann::json::parse(testing::run_python_reference("'" + script + "'", input.dump()));
}

at::Tensor logits(int64_t rows, int64_t vocabulary, uint64_t seed, double scale) {
  return at::randn({rows, vocabulary}, at::detail::createCPUGenerator(seed), at::kDouble) * scale;
}

double max_difference(const at::Tensor& ours, const nlohmann::json& theirs) {
  const at::Tensor expected =
      at::tensor(theirs.get<std::vector<double>>(), at::kDouble).reshape(ours.sizes());
  return (ours.to(at::kDouble) - expected).abs().max().item<double>();
}

at::Tensor flat(const nlohmann::json& nested) {
  std::vector<double> values;
  for (const auto& row : nested) {
    for (double v : row) values.push_back(v);
  }
  return at::tensor(values, at::kDouble);
}

TEST(SelfDistillationTest, GeneralizedJsdAndItsGradientMatchTorchAtBeta0HalfAnd1) {
  // Peaked distributions that disagree, over a vocabulary of 50.
  const at::Tensor student_logits = logits(6, 50, 1, 3.0);
  const at::Tensor teacher_logits = logits(6, 50, 2, 3.0);
  const std::vector<int64_t> one_sample(6, 0);
  const std::vector<double> all(6, 1.0);
  for (double beta : {0.0, 0.5, 1.0, 0.2}) {
    SCOPED_TRACE("beta " + std::to_string(beta));
    at::Tensor student = student_logits.clone().requires_grad_(true);
    const at::Tensor jsd =
        generalized_jsd(at::log_softmax(student, -1), at::log_softmax(teacher_logits, -1), beta);
    jsd.mean().backward();
    const nlohmann::json expected =
        reference(student_logits, teacher_logits, beta, 0.0, one_sample, all, 1.0);
    EXPECT_LT(max_difference(jsd, expected["jsd"]), 1e-12);
    EXPECT_LT((student.grad() - flat(expected["grad"]).reshape({6, 50})).abs().max().item<double>(),
              1e-12);
    EXPECT_GT(jsd.min().item<double>(), 1e-3);  // the distributions do differ
  }
  // The same distribution on both sides: nothing to distil.
  const at::Tensor same = at::log_softmax(student_logits, -1);
  EXPECT_LT(generalized_jsd(same, same, 0.5).abs().max().item<double>(), 1e-12);
}

TEST(SelfDistillationTest, TheLossIsTheCoefficientTimesTheCappedJsdAggregatedOverTheStep) {
  // One micro-batch of two samples: 3 prompt + 4 response tokens, then 2 + 3. The second
  // sample's last response token does not count.
  const at::Tensor cu_seqlens = at::tensor({0, 7, 12}, at::kInt);
  const at::Tensor response_tokens = at::tensor({3, 4, 5, 6, 9, 10, 11}, at::kLong);
  at::Tensor loss_mask = at::zeros({12}, at::kFloat);
  loss_mask.index_put_({response_tokens}, 1.0);
  loss_mask[11] = 0.0;
  const std::vector<int64_t> rows = {0, 0, 0, 0, 1, 1, 1};
  const std::vector<double> mask = {1, 1, 1, 1, 1, 1, 0};

  const at::Tensor student_logits = logits(7, 40, 3, 2.0);
  const at::Tensor teacher_logits = logits(7, 40, 4, 2.0);
  OpdOptions opd;
  opd.use_opd = true;
  opd.type = OpdType::kSelf;
  opd.kl_coef = 0.3;
  opd.opsd_beta = 0.5;
  // A cap between the tokens' values, so that some are capped and some are not.
  opd.opsd_jsd_clip =
      generalized_jsd(at::log_softmax(student_logits, -1), at::log_softmax(teacher_logits, -1), 0.5)
          .median()
          .item<double>();
  LossScale scale;  // one rank, the step is this micro-batch
  scale.global_tokens = 6;
  scale.global_sequences = 2;

  at::Tensor student = student_logits.clone().requires_grad_(true);
  const LossOutput out = vocabulary_distillation_loss(
      {cu_seqlens, loss_mask, response_tokens, at::log_softmax(student, -1),
       at::log_softmax(teacher_logits, -1)},
      opd, scale);
  out.loss.backward();
  const nlohmann::json expected =
      reference(student_logits, teacher_logits, 0.5, opd.opsd_jsd_clip, rows, mask, 0.3);
  EXPECT_NEAR(out.loss.item<double>(), expected["loss"].get<double>(), 1e-12);
  EXPECT_NEAR(out.metrics.get("loss"), expected["loss"].get<double>(), 1e-12);
  EXPECT_LT((student.grad() - flat(expected["grad"]).reshape({7, 40})).abs().max().item<double>(),
            1e-12);
  // Capped tokens pull no further: their rows have no gradient.
  const at::Tensor jsd = generalized_jsd(at::log_softmax(student_logits, -1),
                                         at::log_softmax(teacher_logits, -1), 0.5);
  for (int64_t r = 0; r < 7; ++r) {
    const bool free = jsd[r].item<double>() <= opd.opsd_jsd_clip && mask[r] != 0;
    EXPECT_EQ(student.grad()[r].abs().sum().item<double>() > 0, free) << "row " << r;
  }
  // opd_jsd reports the JSD itself, uncapped and without the coefficient.
  const double uncapped =
      (jsd.narrow(0, 0, 4).mean() + jsd.narrow(0, 4, 2).mean()).item<double>() / 2;
  EXPECT_NEAR(out.metrics.get("opd_jsd"), uncapped, 1e-12);
}

TEST(SelfDistillationTest, FlagsSayWhatSelfDistillationNeeds) {
  ConfigSchema schema;
  add_algorithm_fields(schema);
  const auto read = [&](const std::vector<std::string>& flags) {
    return AlgorithmOptions::from_config(load_config(schema, "", flags)).opd;
  };
  const OpdOptions opd = read({"--use-opd", "--opd-type", "self", "--opsd-privileged-info-key",
                               "label", "--opsd-beta", "0.25", "--opsd-jsd-clip", "0.05"});
  EXPECT_TRUE(opd.self_distills());
  EXPECT_FALSE(opd.shapes_advantages());
  EXPECT_EQ(opd.opsd_beta, 0.25);
  EXPECT_EQ(opd.opsd_jsd_clip, 0.05);
  EXPECT_CONTAINS(error_message_of<ConfigError>([&] {
                    read({"--use-opd", "--opd-type", "self"});
                  }),
                  "--use-opd --opd-type self needs --opsd-privileged-info-key");
  EXPECT_CONTAINS(error_message_of<ConfigError>([&] {
                    read({"--opsd-privileged-info-key", "label"});
                  }),
                  "--opsd-privileged-info-key has no effect without --use-opd --opd-type self");
  EXPECT_CONTAINS(error_message_of<ConfigError>([&] {
                    read({"--use-opd", "--opd-type", "self", "--opsd-privileged-info-key", "label",
                          "--opd-teacher-url", "http://127.0.0.1:1"});
                  }),
                  "drop --opd-teacher-hf-checkpoint and --opd-teacher-url");
  EXPECT_CONTAINS(error_message_of<ConfigError>([&] {
                    read({"--use-opd", "--opd-type", "self", "--opsd-privileged-info-key", "label",
                          "--opsd-beta", "1.5"});
                  }),
                  "--opsd-beta: expected a number in [0, 1]");
}

TEST(SelfDistillationTest, FullVocabularyDistillationNeedsATeacherInTheTrainer) {
  ConfigSchema schema;
  add_algorithm_fields(schema);
  const auto read = [&](const std::vector<std::string>& flags) {
    return AlgorithmOptions::from_config(load_config(schema, "", flags)).opd;
  };
  const OpdOptions opd = read({"--use-opd", "--opd-type", "trainer", "--opd-teacher-hf-checkpoint",
                               "/teacher", "--opd-full-vocab"});
  EXPECT_TRUE(opd.distills_vocabulary());
  EXPECT_FALSE(opd.self_distills());
  EXPECT_FALSE(opd.shapes_advantages());
  EXPECT_TRUE(
      read({"--use-opd", "--opd-type", "trainer", "--opd-teacher-hf-checkpoint", "/teacher"})
          .shapes_advantages());
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{"--opd-full-vocab"},
        {"--use-opd", "--opd-type", "engine", "--opd-teacher-url", "http://127.0.0.1:1",
         "--opd-full-vocab"}}) {
    EXPECT_CONTAINS(error_message_of<ConfigError>([&] { read(flags); }),
                    "--opd-full-vocab needs --use-opd --opd-type trainer");
  }
}

}  // namespace vocabulary_distillation_test
}  // namespace ooze::algorithms
