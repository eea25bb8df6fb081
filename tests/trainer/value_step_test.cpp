// A critic's step: the values fsdp::compute_values reads off the value head, against the plain
// model run one sample at a time; a value head that learns a known return through the value loss
// of trainer::train_step; and a critic loaded from a policy's checkpoint, whose value head starts
// at 0.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/safetensors.h"
#include "fsdp/fsdp_transformer.h"
#include "fsdp/sharded_adamw.h"
#include "fsdp/sharded_loading.h"
#include "tests/support/expect_error.h"
#include "tests/support/training_fixture.h"
#include "trainer/train_step.h"

namespace ooze::trainer {
namespace value_step_test {

using fsdp_test::kInitSeed;
using fsdp_test::make_model;
using fsdp_test::tiny_config;
using ooze::testing::error_message_of;

models::TransformerModel value_model(uint64_t seed) {
  models::TransformerModel model(tiny_config(/*tied=*/true), std::nullopt,
                                 models::ModelHead::kValue);
  model->init_weights(seed);
  return model;
}

// Samples of `prompt` random tokens and `response` more, from `seed`.
std::vector<fsdp::PackingSample> random_samples(int count, int64_t prompt, int64_t response,
                                                uint64_t seed) {
  const torch::Tensor tokens = torch::randint(256, {count, prompt + response},
                                              at::detail::createCPUGenerator(seed), torch::kLong);
  std::vector<fsdp::PackingSample> samples;
  for (int s = 0; s < count; ++s) {
    fsdp::PackingSample sample;
    sample.tokens = tokens[s].clone();
    sample.response_length = response - s % 3;  // lengths differ: prompts end at different tokens
    samples.push_back(sample);
  }
  return samples;
}

TEST(ValueStep, ValuesAreTheValueHeadOnTheStateBeforeEachResponseToken) {
  at::set_num_threads(1);
  models::TransformerModel plain = value_model(kInitSeed);
  {
    torch::NoGradGuard no_grad;  // a head that is not 0, so the values say something
    plain->value_head()->weight.normal_(0.0, 0.5, at::detail::createCPUGenerator(7));
  }
  models::TransformerModel copy = value_model(kInitSeed);
  {
    torch::NoGradGuard no_grad;
    copy->value_head()->weight.copy_(plain->value_head()->weight);
  }
  fsdp::FsdpTransformer sharded(copy, nullptr, {});
  const std::vector<fsdp::PackingSample> samples = random_samples(5, 4, 6, 11);
  fsdp::PackingOptions packing;
  packing.micro_batch_size = 2;
  const std::vector<at::Tensor> values = compute_values(sharded, samples, packing);
  ASSERT_EQ(values.size(), samples.size());

  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < samples.size(); ++i) {
    const int64_t length = samples[i].tokens.numel();
    const torch::Tensor hidden =
        plain->forward(samples[i].tokens, torch::arange(length, torch::kLong),
                       torch::tensor({0, static_cast<int>(length)}, torch::kInt));
    const torch::Tensor all = torch::matmul(hidden, plain->value_head()->weight.t()).squeeze(-1);
    // Response token t sits at length - R + t; the state it was sampled from is the one before.
    const int64_t response = samples[i].response_length;
    const torch::Tensor expected = all.narrow(0, length - response - 1, response);
    ASSERT_EQ(values[i].sizes(), expected.sizes()) << "sample " << i;
    EXPECT_LT((values[i] - expected).abs().max().item<double>(), 1e-5) << "sample " << i;
  }
}

// The return of every response token is +1 when the sample's first token is one of 0..3 and -1
// when it is one of 4..7: the critic has to read the prompt. The old values are refreshed before
// every step, as the RL loop computes them before training, so clipping bounds each step's move
// only.
TEST(ValueStep, AValueHeadLearnsAKnownReturn) {
  at::set_num_threads(1);
  fsdp::FsdpTransformer critic(value_model(kInitSeed), nullptr, {});
  fsdp::ShardedAdamWOptions adam;
  adam.weight_decay = 0.0;
  fsdp::ShardedAdamW optimizer(critic.sharded(), adam);
  TrainStepOptions options;
  options.loss_type = LossType::kValueLoss;
  options.packing.micro_batch_size = 8;
  options.value_loss.value_clip = 0.2;

  std::vector<double> losses;
  for (int step = 0; step < 60; ++step) {
    std::vector<fsdp::PackingSample> samples = random_samples(16, 3, 4, 1000 + step);
    for (size_t i = 0; i < samples.size(); ++i) samples[i].tokens[0] = static_cast<int64_t>(i % 8);
    const std::vector<at::Tensor> old_values = compute_values(critic, samples, options.packing);
    for (size_t i = 0; i < samples.size(); ++i) {
      samples[i].response_values["values"] = old_values[i];
      samples[i].response_values["returns"] =
          torch::full({samples[i].response_length}, i % 8 < 4 ? 1.0 : -1.0, torch::kFloat);
    }
    const TrainStepResult out = train_step(critic, optimizer, 3e-3, samples, options);
    losses.push_back(out.metrics.at("value_loss"));
  }
  // A head at 0 starts at the returns' mean square, 1.
  EXPECT_NEAR(losses.front(), 1.0, 1e-6);
  double last = 0;
  for (size_t s = losses.size() - 5; s < losses.size(); ++s) last += losses[s] / 5;
  std::cout << "value loss: step 1 " << losses.front() << ", mean of steps 56-60 " << last << "\n";
  EXPECT_LT(last, 0.05) << "mean value loss of the last 5 of 60 steps";
}

TEST(ValueStep, ACriticFromAPolicyCheckpointStartsAtZeroAndKeepsItsBackbone) {
  at::set_num_threads(1);
  const std::string dir =
      std::filesystem::temp_directory_path() / ("ooze_value_step_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  models::TransformerModel policy = make_model(/*tied=*/true);
  NamedTensors tensors;
  for (const auto& item : policy->named_parameters())
    tensors.emplace_back(item.key(), item.value());
  save_safetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}});

  models::TransformerModel model = value_model(/*seed=*/5);  // weights the load replaces
  {
    torch::NoGradGuard no_grad;
    model->value_head()->weight.zero_();
  }
  fsdp::FsdpTransformer critic(model, nullptr, {});
  EXPECT_CONTAINS(
      error_message_of<FormatError>([&] { fsdp::load_sharded_safetensors(critic.sharded(), dir); }),
      "missing 'score.weight'");
  fsdp::load_sharded_safetensors(critic.sharded(), dir, {"score.weight"});
  const std::vector<fsdp::PackingSample> samples = random_samples(3, 4, 5, 3);
  for (const at::Tensor& values : compute_values(critic, samples, {})) {
    EXPECT_EQ(values.abs().max().item<double>(), 0.0);
  }
  // The backbone is the policy's: its hidden states match.
  torch::NoGradGuard no_grad;
  const torch::Tensor tokens = samples[0].tokens;
  const int64_t length = tokens.numel();
  const torch::Tensor positions = torch::arange(length, torch::kLong);
  const torch::Tensor cu = torch::tensor({0, static_cast<int>(length)}, torch::kInt);
  const torch::Tensor expected = policy->forward(tokens, positions, cu);
  const torch::Tensor got = critic.forward(tokens, positions, cu);
  critic.reshard();
  EXPECT_LT((got - expected).abs().max().item<double>(), 1e-6);
  std::filesystem::remove_all(dir);
}

}  // namespace value_step_test
}  // namespace ooze::trainer
