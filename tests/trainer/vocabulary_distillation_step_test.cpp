// Distillation over the vocabulary in the training step. Self-distillation (--opd-type self): the
// step's JSD against the plain model run on each sample twice (as the student reads it, and after
// the privileged tokens as the teacher does), a student that moves to its privileged teacher on
// the JSD alone, the cap that stops the pull, and the errors of a step that cannot distil. A
// teacher of its own (--opd-type trainer --opd-full-vocab): the JSD against two plain models on
// the same tokens, and a student that moves to it.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "fsdp/fsdp_transformer.h"
#include "fsdp/sharded_adamw.h"
#include "tests/support/expect_error.h"
#include "tests/support/training_fixture.h"
#include "trainer/reference_model.h"
#include "trainer/train_step.h"

namespace ooze::trainer {
namespace vocabulary_distillation_step_test {

using fsdp_test::kInitSeed;
using fsdp_test::make_model;
using ooze::testing::error_message_of;

// Four samples of 3 prompt tokens and 4 or 5 response tokens; the teacher reads two privileged
// tokens after each prompt.
std::vector<fsdp::PackingSample> privileged_samples() {
  const at::Tensor tokens = at::randint(256, {4, 8}, at::detail::createCPUGenerator(5), at::kLong);
  std::vector<fsdp::PackingSample> samples;
  for (int64_t s = 0; s < 4; ++s) {
    fsdp::PackingSample sample;
    sample.response_length = 4 + s % 2;
    sample.tokens = tokens[s].narrow(0, 0, 3 + sample.response_length).clone();
    sample.teacher_prompt = at::cat(
        {sample.tokens.narrow(0, 0, 3), at::tensor(std::vector<int64_t>{17, 42 + s}, at::kLong)});
    sample.response_values["advantages"] = at::zeros({sample.response_length});
    samples.push_back(sample);
  }
  return samples;
}

TrainStepOptions self_distillation(double beta, double clip) {
  TrainStepOptions options;
  options.packing.micro_batch_size = 2;
  options.opd.use_opd = true;
  options.opd.type = algorithms::OpdType::kSelf;
  options.opd.opsd_privileged_info_key = "label";
  options.opd.opsd_beta = beta;
  options.opd.opsd_jsd_clip = clip;
  return options;
}

// The policy's own log-probs as the old ones: the ratio starts at 1.
void set_old_log_probs(fsdp::FsdpTransformer& policy, std::vector<fsdp::PackingSample>& samples,
                       const TrainStepOptions& options) {
  const ResponseLogProbs old = compute_log_probs(policy, samples, options.packing);
  for (size_t i = 0; i < samples.size(); ++i) {
    samples[i].response_values["old_log_probs"] = old.log_probs[i];
  }
}

// Probabilities over the vocabulary at each response token of `tokens` (the last `response`),
// fp64, from the plain model.
at::Tensor response_distributions(models::TransformerModel& model, const at::Tensor& tokens,
                                  int64_t response) {
  const int64_t length = tokens.numel();
  const at::Tensor hidden = model->forward(tokens, at::arange(length, at::kLong),
                                           at::tensor({0, static_cast<int>(length)}, at::kInt));
  const at::Tensor logits = at::matmul(hidden, model->lm_head_weight().t()).to(at::kDouble);
  return at::softmax(logits.narrow(0, length - response - 1, response), -1);
}

TEST(SelfDistillationStep, TheStepsJsdIsThatOfThePlainModelReadingBothContexts) {
  at::set_num_threads(1);
  fsdp::FsdpTransformer policy(make_model(true), nullptr, {});
  ReferenceModel teacher = ReferenceModel::copy_of(policy);
  std::vector<fsdp::PackingSample> samples = privileged_samples();
  const TrainStepOptions options = self_distillation(0.5, 0.0);
  set_old_log_probs(policy, samples, options);
  const TrainStepResult out =
      accumulate_gradients(policy, samples, options, {&teacher.transformer(), false});

  models::TransformerModel plain = make_model(true);
  torch::NoGradGuard no_grad;
  double expected = 0;
  for (const fsdp::PackingSample& sample : samples) {
    const int64_t response = sample.response_length;
    const at::Tensor p_s = response_distributions(plain, sample.tokens, response);
    const at::Tensor read_by_teacher =
        at::cat({sample.teacher_prompt, sample.tokens.narrow(0, 3, response)});
    const at::Tensor p_t = response_distributions(plain, read_by_teacher, response);
    const at::Tensor m = 0.5 * (p_s + p_t);
    const at::Tensor jsd =
        0.5 * (p_t * (p_t / m).log()).sum(-1) + 0.5 * (p_s * (p_s / m).log()).sum(-1);
    expected += jsd.mean().item<double>() / static_cast<double>(samples.size());
  }
  EXPECT_GT(expected, 1e-4);  // the privileged tokens do change the teacher's mind
  // float32 forwards against the fp64 reference: a few parts per million (the CPU's BLAS
  // kernels decide how many).
  EXPECT_NEAR(out.metrics.at("opd_jsd"), expected, 1e-5 * expected);
  // Zero advantages: the step's loss is the JSD term alone (--opd-kl-coef 1).
  EXPECT_NEAR(out.metrics.at("loss"), expected, 1e-5 * expected);
}

// `opd_jsd` over 15 steps of `policy` on the JSD alone (zero advantages) against `teacher`.
std::vector<double> jsd_over_steps(fsdp::FsdpTransformer& policy, ReferenceModel& teacher,
                                   const TrainStepOptions& options, double lr,
                                   const std::vector<fsdp::PackingSample>& batch) {
  fsdp::ShardedAdamWOptions adam;
  adam.weight_decay = 0.0;
  fsdp::ShardedAdamW optimizer(policy.sharded(), adam);
  std::vector<double> jsd;
  for (int step = 0; step < 15; ++step) {
    std::vector<fsdp::PackingSample> samples = batch;
    set_old_log_probs(policy, samples, options);
    jsd.push_back(
        train_step(policy, optimizer, lr, samples, options, {&teacher.transformer(), false})
            .metrics.at("opd_jsd"));
  }
  return jsd;
}

TEST(SelfDistillationStep, OnTheJsdAloneTheStudentMovesToItsPrivilegedTeacher) {
  at::set_num_threads(1);
  fsdp::FsdpTransformer policy(make_model(true), nullptr, {});
  ReferenceModel teacher = ReferenceModel::copy_of(policy);
  const std::vector<double> jsd =
      jsd_over_steps(policy, teacher, self_distillation(0.5, 0.0), 3e-4, privileged_samples());
  EXPECT_LT(jsd.back(), 0.1 * jsd.front()) << "first " << jsd.front() << ", last " << jsd.back();
}

TEST(SelfDistillationStep, TokensAboveTheCapPullNoFurther) {
  at::set_num_threads(1);
  for (double clip : {0.0, 1e-12}) {
    fsdp::FsdpTransformer policy(make_model(true), nullptr, {});
    ReferenceModel teacher = ReferenceModel::copy_of(policy);
    fsdp::ShardedAdamW optimizer(policy.sharded(), {});
    std::vector<fsdp::PackingSample> samples = privileged_samples();
    const TrainStepOptions options = self_distillation(0.5, clip);
    set_old_log_probs(policy, samples, options);
    const TrainStepResult out =
        train_step(policy, optimizer, 1e-2, samples, options, {&teacher.transformer(), false});
    // Zero advantages and no entropy term: the JSD is the only gradient there is.
    if (clip == 0.0) {
      EXPECT_GT(out.grad_norm, 1e-6);
    } else {
      EXPECT_EQ(out.grad_norm, 0.0);
    }
    EXPECT_GT(out.metrics.at("opd_jsd"), 1e-4);  // reported uncapped either way
  }
}

// --opd-type trainer --opd-full-vocab: the teacher is another model, reading the same tokens.
TrainStepOptions full_vocabulary_distillation() {
  TrainStepOptions options;
  options.packing.micro_batch_size = 2;
  options.opd.use_opd = true;
  options.opd.type = algorithms::OpdType::kTrainer;
  options.opd.full_vocab = true;
  options.opd.opsd_beta = 0.5;
  return options;
}

std::vector<fsdp::PackingSample> plain_samples() {
  std::vector<fsdp::PackingSample> samples = privileged_samples();
  for (fsdp::PackingSample& sample : samples) sample.teacher_prompt = at::Tensor();
  return samples;
}

TEST(FullVocabularyDistillationStep, TheStepsJsdIsThatOfTheTwoPlainModelsOnTheSameTokens) {
  at::set_num_threads(1);
  fsdp::FsdpTransformer policy(make_model(true), nullptr, {});
  ReferenceModel teacher(make_model(true, kInitSeed + 1), nullptr, {});
  std::vector<fsdp::PackingSample> samples = plain_samples();
  const TrainStepOptions options = full_vocabulary_distillation();
  set_old_log_probs(policy, samples, options);
  const TrainStepResult out =
      accumulate_gradients(policy, samples, options, {&teacher.transformer(), false});

  models::TransformerModel student_plain = make_model(true);
  models::TransformerModel teacher_plain = make_model(true, kInitSeed + 1);
  torch::NoGradGuard no_grad;
  double expected = 0;
  for (const fsdp::PackingSample& sample : samples) {
    const int64_t response = sample.response_length;
    const at::Tensor p_s = response_distributions(student_plain, sample.tokens, response);
    const at::Tensor p_t = response_distributions(teacher_plain, sample.tokens, response);
    const at::Tensor m = 0.5 * (p_s + p_t);
    const at::Tensor jsd =
        0.5 * (p_t * (p_t / m).log()).sum(-1) + 0.5 * (p_s * (p_s / m).log()).sum(-1);
    expected += jsd.mean().item<double>() / static_cast<double>(samples.size());
  }
  EXPECT_GT(expected, 1e-4);
  // float32 forwards against the fp64 reference: a few parts per million (the CPU's BLAS
  // kernels decide how many).
  EXPECT_NEAR(out.metrics.at("opd_jsd"), expected, 1e-5 * expected);
  EXPECT_NEAR(out.metrics.at("loss"), expected, 1e-5 * expected);
}

TEST(FullVocabularyDistillationStep, OnTheJsdAloneTheStudentMovesToItsTeacher) {
  at::set_num_threads(1);
  fsdp::FsdpTransformer policy(make_model(true), nullptr, {});
  ReferenceModel teacher(make_model(true, kInitSeed + 1), nullptr, {});
  const std::vector<double> jsd =
      jsd_over_steps(policy, teacher, full_vocabulary_distillation(), 3e-3, plain_samples());
  EXPECT_LT(jsd.back(), 0.2 * jsd.front()) << "first " << jsd.front() << ", last " << jsd.back();
}

TEST(SelfDistillationStep, AStepThatCannotDistilSaysWhy) {
  at::set_num_threads(1);
  fsdp::FsdpTransformer policy(make_model(true), nullptr, {});
  std::vector<fsdp::PackingSample> samples = privileged_samples();
  const TrainStepOptions options = self_distillation(0.5, 0.0);
  set_old_log_probs(policy, samples, options);
  EXPECT_CONTAINS(error_message_of<Error>([&] { accumulate_gradients(policy, samples, options); }),
                  "--opd-type self: the training step was given no teacher");
  ReferenceModel teacher = ReferenceModel::copy_of(policy);
  samples[2].teacher_prompt = at::Tensor();
  EXPECT_CONTAINS(error_message_of<Error>([&] {
                    accumulate_gradients(policy, samples, options, {&teacher.transformer(), false});
                  }),
                  "self-distillation: sample 2 has no teacher_prompt");
}

}  // namespace vocabulary_distillation_step_test
}  // namespace ooze::trainer
