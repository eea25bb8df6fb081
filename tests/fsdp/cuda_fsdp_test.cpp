// FSDP training on a CUDA device, judged by plain training on the CPU (torch::optim::AdamW, the
// reference fully_shard_test.cpp holds W = 1 to bit for bit): the same losses and weights to fp32
// rounding, bf16 compute within bf16's reach, and sleep handing the sharded state back to the
// driver (read with cudaMemGetInfo). Label cuda (scripts/gpu/check.sh); every test skips where
// LibTorch sees no CUDA device.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include "fsdp/fsdp_transformer.h"
#include "fsdp/sharded_adamw.h"
#include "tests/support/device_memory.h"
#include "tests/support/training_fixture.h"

namespace cuda_fsdp_test {

using ooze::fsdp::FsdpTransformer;
using ooze::fsdp::FsdpTransformerOptions;
using ooze::fsdp::ShardedAdamW;
using ooze::fsdp::ShardedAdamWOptions;
using namespace ooze::fsdp_test;

#define REQUIRE_CUDA() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "LibTorch sees no CUDA device"

// The largest difference between the FSDP model's full weights (gathered to the CPU) and the
// plain model's.
double max_weight_difference(FsdpTransformer& fsdp, ooze::models::TransformerModel& plain) {
  const auto full = gather_full_parameters(fsdp.sharded());
  double worst = 0;
  for (const auto& item : plain->named_parameters()) {
    const torch::Tensor mine = full.at(item.key()).to(torch::kCPU, torch::kDouble);
    worst = std::max(worst,
                     (mine - item.value().detach().to(torch::kDouble)).abs().max().item<double>());
  }
  return worst;
}

TrainRecord train_on_cuda(FsdpTransformer& fsdp, const TrainSettings& settings) {
  ShardedAdamWOptions adam;
  adam.weight_decay = settings.weight_decay;
  ShardedAdamW optimizer(fsdp.sharded(), adam);
  return train_fsdp(fsdp, optimizer, settings);
}

ooze::models::TransformerModel model_on_cuda() {
  auto model = make_model(/*tied=*/false);
  model->to(torch::Device(torch::kCUDA, 0));
  return model;
}

TEST(CudaFsdp, OneRankFloat32TracksPlainCpuTraining) {
  REQUIRE_CUDA();
  TrainSettings settings;
  settings.steps = 4;
  auto plain = make_model(/*tied=*/false);
  const TrainRecord want = train_plain(plain, settings);

  FsdpTransformer fsdp(model_on_cuda(), nullptr, FsdpTransformerOptions{});
  EXPECT_TRUE(fsdp.sharded().unit(0).master_shard().is_cuda());
  const TrainRecord got = train_on_cuda(fsdp, settings);
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t i = 0; i < want.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], want.losses[i], 1e-5) << "loss of step " << i;
  }
  // Adam moves each weight by about lr (1e-3) a step: fp32 rounding of the GPU's other
  // reduction order stays far below that.
  EXPECT_LT(max_weight_difference(fsdp, plain), 1e-5);
}

TEST(CudaFsdp, Bfloat16ComputeKeepsFloat32MastersOnTheDevice) {
  REQUIRE_CUDA();
  TrainSettings settings;
  settings.steps = 3;
  auto plain = make_model(/*tied=*/false);
  const TrainRecord want = train_plain(plain, settings);

  FsdpTransformerOptions options;
  options.shard.mixed_precision.param_dtype = torch::kBFloat16;
  FsdpTransformer fsdp(model_on_cuda(), nullptr, options);
  const TrainRecord got = train_on_cuda(fsdp, settings);
  for (size_t i = 0; i < want.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], want.losses[i], 2e-2) << "step " << i;
  }
  EXPECT_EQ(fsdp.sharded().unit(0).master_shard().scalar_type(), torch::kFloat);
  // As on the CPU (fully_shard_test.cpp): at most 2 lr a step apart where bf16 flips a
  // near-zero gradient's sign.
  EXPECT_LE(max_weight_difference(fsdp, plain), 2 * settings.steps * settings.lr * 1.01);
}

#if defined(OOZE_TEST_CUDA_RUNTIME)
TEST(CudaFsdp, SleepHandsTheStateBackAndWakeTrainsOnAsWithoutIt) {
  REQUIRE_CUDA();
  // A model whose state (masters, gradients, Adam moments: 16 bytes a parameter) is about a GiB,
  // far above the allocator's granularity.
  auto config = tiny_config(false);
  config.vocab_size = 32768;
  config.hidden_size = 1024;
  config.intermediate_size = 1024;
  config.num_attention_heads = 16;
  config.head_dim = 64;
  auto make = [&] {
    ooze::models::TransformerModel model(config);
    model->init_weights(kInitSeed);
    model->to(torch::Device(torch::kCUDA, 0));
    return FsdpTransformer(std::move(model), nullptr, FsdpTransformerOptions{});
  };
  FsdpTransformer slept = make(), awake = make();
  ShardedAdamW slept_adam(slept.sharded(), ShardedAdamWOptions{});
  ShardedAdamW awake_adam(awake.sharded(), ShardedAdamWOptions{});
  TrainSettings settings;
  settings.steps = 2;
  train_fsdp(slept, slept_adam, settings);
  train_fsdp(awake, awake_adam, settings);
  double state_bytes = 0;
  for (size_t u = 0; u < slept.sharded().num_units(); ++u) {
    state_bytes += 16.0 * slept.sharded().unit(u).master_shard().numel();
  }

  const int64_t before = ::ooze::testing::free_device_bytes();
  slept.sleep();
  slept_adam.sleep();
  const int64_t asleep = ::ooze::testing::free_device_bytes();
  EXPECT_GT(asleep - before, 0.9 * state_bytes)
      << "freed " << ((asleep - before) >> 20) << " MiB of a state of "
      << static_cast<int64_t>(state_bytes) / (1 << 20) << " MiB";
  slept.wake_up();
  slept_adam.wake_up();
  EXPECT_LT(::ooze::testing::free_device_bytes(), asleep - static_cast<int64_t>(0.9 * state_bytes));

  settings.first_step = 2;
  const TrainRecord after_sleep = train_fsdp(slept, slept_adam, settings);
  const TrainRecord straight = train_fsdp(awake, awake_adam, settings);
  for (size_t i = 0; i < straight.losses.size(); ++i) {
    EXPECT_NEAR(after_sleep.losses[i], straight.losses[i], 1e-6) << "step " << i;
  }
}
#endif

}  // namespace cuda_fsdp_test
