// On-policy distillation's advantage and KL against plain loops, and its flags' rules.
#include "algorithms/on_policy_distillation.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <vector>

#include "algorithms/algorithm_options.h"
#include "core/error.h"
#include "tests/algorithms/double_vectors.h"
#include "tests/support/expect_error.h"

namespace ooze::algorithms {
namespace on_policy_distillation_test {

using testing::error_message_of;

// Two samples: the second's last token is masked out (a tool result the policy did not write).
struct Batch {
  std::vector<Vec> advantages = {{0.5, 0.5, 0.5}, {-1.0, -1.0, -1.0, -1.0}};
  std::vector<Vec> student = {{-0.1, -2.0, -0.7}, {-3.0, -0.2, -1.5, -0.9}};
  std::vector<Vec> teacher = {{-0.3, -0.5, -0.7}, {-1.0, -2.2, -1.4, -4.0}};
  std::vector<Vec> masks = {{1, 1, 1}, {1, 1, 1, 0}};

  static std::vector<at::Tensor> tensors(const std::vector<Vec>& values) {
    std::vector<at::Tensor> out;
    for (const Vec& v : values) out.push_back(tensor_of(v).to(at::kFloat));
    return out;
  }
};

TEST(OnPolicyDistillationTest, AdvantagesDropByTheCoefficientTimesTheLogProbGap) {
  const Batch b;
  const double coef = 0.7;
  const std::vector<at::Tensor> distilled =
      distilled_advantages(Batch::tensors(b.advantages), Batch::tensors(b.student),
                           Batch::tensors(b.teacher), Batch::tensors(b.masks), coef);
  ASSERT_EQ(distilled.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const Vec got = vec_of(distilled[i]);
    for (size_t t = 0; t < got.size(); ++t) {
      const double expected =
          b.advantages[i][t] - coef * b.masks[i][t] * (b.student[i][t] - b.teacher[i][t]);
      EXPECT_NEAR(got[t], expected, 1e-6) << "sample " << i << " token " << t;
    }
  }
  // A token the teacher finds likelier than the student is pushed up, one it finds less
  // likely down; an unmasked token keeps its advantage.
  EXPECT_GT(vec_of(distilled[0])[1], 0.5);
  EXPECT_LT(vec_of(distilled[1])[1], -1.0);
  EXPECT_EQ(vec_of(distilled[1])[3], -1.0);

  // train/opd_kl: the mean gap over the 6 response tokens.
  double sum = 0;
  int tokens = 0;
  for (size_t i = 0; i < 2; ++i) {
    for (size_t t = 0; t < b.masks[i].size(); ++t) {
      if (b.masks[i][t] == 0) continue;
      sum += b.student[i][t] - b.teacher[i][t];
      ++tokens;
    }
  }
  EXPECT_NEAR(
      mean_opd_kl(Batch::tensors(b.student), Batch::tensors(b.teacher), Batch::tensors(b.masks)),
      sum / tokens, 1e-6);
}

TEST(OnPolicyDistillationTest, MismatchedLengthsNameTheSample) {
  Batch b;
  b.teacher[1].pop_back();
  EXPECT_CONTAINS(error_message_of<Error>([&] {
                    mean_opd_kl(Batch::tensors(b.student), Batch::tensors(b.teacher),
                                Batch::tensors(b.masks));
                  }),
                  "sample 1 has 4 response tokens but 4 student and 3 teacher log-probs");
}

TEST(OnPolicyDistillationTest, FlagsNeedATeacherAndNameIt) {
  ConfigSchema schema;
  add_algorithm_fields(schema);
  const auto options = [&](const std::vector<std::string>& flags) {
    return AlgorithmOptions::from_config(load_config(schema, "", flags)).opd;
  };
  EXPECT_FALSE(options({}).use_opd);
  const OpdOptions opd = options({"--use-opd", "--opd-teacher-url", "http://127.0.0.1:30001",
                                  "--opd-kl-coef", "0.5", "--opd-type", "engine"});
  EXPECT_TRUE(opd.use_opd);
  EXPECT_EQ(opd.type, OpdType::kEngine);
  EXPECT_EQ(opd.kl_coef, 0.5);
  EXPECT_EQ(options({"--use-opd", "--opd-teacher-hf-checkpoint", "/t"}).type, OpdType::kTrainer);
  EXPECT_CONTAINS(error_message_of<ConfigError>([&] { options({"--use-opd"}); }),
                  "--use-opd --opd-type trainer needs --opd-teacher-hf-checkpoint");
  // The engine type takes its teacher from exactly one place.
  const OpdOptions launched =
      options({"--use-opd", "--opd-type", "engine", "--opd-teacher-hf-checkpoint", "/t",
               "--opd-teacher-num-engines", "2"});
  EXPECT_TRUE(launched.launches_teacher_engines());
  EXPECT_EQ(launched.teacher_num_engines, 2);
  EXPECT_FALSE(opd.launches_teacher_engines());
  EXPECT_CONTAINS(error_message_of<ConfigError>([&] {
                    options({"--use-opd", "--opd-type", "engine"});
                  }),
                  "--use-opd --opd-type engine needs exactly one of --opd-teacher-hf-checkpoint "
                  "(ooze train launches the teacher's engines) and --opd-teacher-url (a teacher "
                  "served elsewhere), got neither");
  EXPECT_CONTAINS(error_message_of<ConfigError>([&] {
                    options({"--use-opd", "--opd-type", "engine", "--opd-teacher-hf-checkpoint",
                             "/t", "--opd-teacher-url", "http://h:1"});
                  }),
                  "got both");
  EXPECT_CONTAINS(error_message_of<ConfigError>([&] {
                    options({"--opd-teacher-hf-checkpoint", "/t"});
                  }),
                  "--opd-teacher-hf-checkpoint has no effect without --use-opd");
  EXPECT_CONTAINS(error_message_of<ConfigError>([&] {
                    options({"--use-opd", "--opd-teacher-hf-checkpoint", "/t", "--opd-teacher-url",
                             "http://h:1"});
                  }),
                  "--opd-teacher-url has no effect without --use-opd --opd-type engine");
  EXPECT_CONTAINS(error_message_of<ConfigError>([&] {
                    options({"--use-opd", "--opd-type", "engine", "--opd-teacher-url", "http://h:1",
                             "--opd-teacher-num-engines", "2"});
                  }),
                  "--opd-teacher-num-engines has no effect without --use-opd --opd-type engine "
                  "--opd-teacher-hf-checkpoint");
}

}  // namespace on_policy_distillation_test
}  // namespace ooze::algorithms
