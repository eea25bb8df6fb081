// The sharded optimizer and clipping on one rank: AdamW against torch::optim::AdamW (bit for
// bit) and against the AdamW formulas written here in double precision; global-norm clipping
// against a norm computed here; a non-finite norm skips the step.
#include "fsdp/sharded_adamw.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "fsdp/fully_shard.h"
#include "fsdp/grad_clip.h"
#include "fsdp/optimizer_step.h"

namespace sharded_adamw_test {

using ooze::fsdp::FlatParam;
using ooze::fsdp::FullyShardedModule;
using ooze::fsdp::ShardedAdamW;
using ooze::fsdp::ShardedAdamWOptions;

// Parameters of awkward sizes in two units: "first" and the root (second, scale).
struct ToyImpl : torch::nn::Module {
  ToyImpl() {
    first = register_module("first", torch::nn::Linear(5, 7));
    second = register_module("second", torch::nn::Linear(7, 3));
    scale = register_parameter("scale", torch::randn({3}));
  }
  torch::nn::Linear first{nullptr}, second{nullptr};
  torch::Tensor scale;
};
TORCH_MODULE(Toy);

Toy make_toy(uint64_t seed) {
  torch::manual_seed(seed);
  return Toy();
}

// Deterministic gradients for step `step`, by parameter name.
std::map<std::string, torch::Tensor> make_grads(Toy& toy, int step) {
  std::map<std::string, torch::Tensor> grads;
  int index = 0;
  for (const auto& item : toy->named_parameters()) {
    auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(1000 * step + index++));
    grads[item.key()] = torch::randn(item.value().sizes(), gen) * 0.1;
  }
  return grads;
}

// Hands `grads` to every unit as its (W = 1) gradient.
void give_grads(FullyShardedModule& sharded, const std::map<std::string, torch::Tensor>& grads) {
  for (size_t u = 0; u < sharded.num_units(); ++u) {
    FlatParam& flat = sharded.unit(u);
    std::vector<torch::Tensor> unit_grads;
    for (const auto& entry : flat.entries()) unit_grads.push_back(grads.at(entry.name));
    flat.reduce_grad_async(unit_grads);
    flat.wait_reduce_grad();
  }
}

class ShardedOptimizer : public ::testing::Test {
 protected:
  void SetUp() override { at::set_num_threads(1); }
};

void expect_adamw_parity(const ShardedAdamWOptions& options) {
  Toy reference = make_toy(7);
  Toy sharded_toy = make_toy(7);
  // The formulas in double precision, independently of either implementation.
  std::map<std::string, std::vector<double>> p64, m64, v64;
  for (const auto& item : reference->named_parameters()) {
    const torch::Tensor values = item.value().detach().to(torch::kDouble).contiguous().view({-1});
    p64[item.key()] =
        std::vector<double>(values.data_ptr<double>(), values.data_ptr<double>() + values.numel());
    m64[item.key()].assign(values.numel(), 0.0);
    v64[item.key()].assign(values.numel(), 0.0);
  }

  torch::optim::AdamW torch_adamw(reference->parameters(),
                                  torch::optim::AdamWOptions(1e-2)
                                      .betas({options.beta1, options.beta2})
                                      .eps(options.eps)
                                      .weight_decay(options.weight_decay));
  FullyShardedModule sharded(*sharded_toy, {"first"}, nullptr, {});
  ShardedAdamW adamw(sharded, options);

  for (int step = 1; step <= 6; ++step) {
    const double lr = 1e-2 * step / 3.0;  // a schedule: the lr changes every step
    static_cast<torch::optim::AdamWOptions&>(torch_adamw.param_groups()[0].options()).lr(lr);
    const auto grads = make_grads(reference, step);
    for (const auto& item : reference->named_parameters()) {
      item.value().mutable_grad() = grads.at(item.key()).clone();
    }
    torch_adamw.step();
    give_grads(sharded, grads);
    adamw.step(lr);
    sharded.zero_grad();

    const double bc1 = 1 - std::pow(options.beta1, step), bc2 = 1 - std::pow(options.beta2, step);
    for (auto& [name, p] : p64) {
      const torch::Tensor g = grads.at(name).to(torch::kDouble).contiguous().view({-1});
      for (size_t i = 0; i < p.size(); ++i) {
        const double gi = g[static_cast<int64_t>(i)].item<double>();
        p[i] *= 1 - lr * options.weight_decay;
        m64[name][i] = options.beta1 * m64[name][i] + (1 - options.beta1) * gi;
        v64[name][i] = options.beta2 * v64[name][i] + (1 - options.beta2) * gi * gi;
        p[i] -= lr / bc1 * m64[name][i] / (std::sqrt(v64[name][i] / bc2) + options.eps);
      }
    }
  }
  for (const auto& item : reference->named_parameters()) {
    const torch::Tensor got = sharded_toy->named_parameters()[item.key()].detach();
    EXPECT_TRUE(torch::equal(got, item.value().detach()))
        << item.key() << ": max difference to torch::optim::AdamW "
        << (got - item.value()).abs().max().item<double>();
    const torch::Tensor flat = got.to(torch::kDouble).contiguous().view({-1});
    for (size_t i = 0; i < p64[item.key()].size(); ++i) {
      EXPECT_NEAR(flat[static_cast<int64_t>(i)].item<double>(), p64[item.key()][i], 2e-6)
          << item.key() << "[" << i << "]";
    }
  }
  for (size_t u = 0; u < sharded.num_units(); ++u) EXPECT_EQ(adamw.steps(u), 6);
}

TEST_F(ShardedOptimizer, AdamWMatchesTorchAdamWWithWeightDecay) {
  ShardedAdamWOptions options;
  options.beta1 = 0.8;
  options.beta2 = 0.95;
  options.eps = 1e-6;
  options.weight_decay = 0.1;
  expect_adamw_parity(options);
}

TEST_F(ShardedOptimizer, AdamWMatchesTorchAdamWWithoutWeightDecay) {
  ShardedAdamWOptions options;
  options.weight_decay = 0.0;
  expect_adamw_parity(options);
}

TEST_F(ShardedOptimizer, ClipsByTheGlobalNormOfAllGradients) {
  Toy toy = make_toy(3);
  const auto grads = make_grads(toy, 1);
  double squares = 0.0;
  for (const auto& [name, g] : grads) {
    const torch::Tensor g64 = g.to(torch::kDouble).contiguous();
    for (int64_t i = 0; i < g64.numel(); ++i) {
      squares += g64.data_ptr<double>()[i] * g64.data_ptr<double>()[i];
    }
  }
  const double norm = std::sqrt(squares);
  FullyShardedModule sharded(*toy, {"first"}, nullptr, {});

  give_grads(sharded, grads);  // a max_norm above the norm leaves the gradients alone
  auto result = ooze::fsdp::clip_grad_norm(sharded, 2 * norm);
  EXPECT_NEAR(result.norm, norm, 1e-12 * norm);
  EXPECT_EQ(result.clip_coef, 1.0);
  EXPECT_TRUE(result.finite);

  sharded.zero_grad();
  give_grads(sharded, grads);
  result = ooze::fsdp::clip_grad_norm(sharded, norm / 4);
  EXPECT_NEAR(result.norm, norm, 1e-12 * norm);
  const double coef = (norm / 4) / (norm + 1e-6);
  EXPECT_NEAR(result.clip_coef, coef, 1e-15);
  for (size_t u = 0; u < sharded.num_units(); ++u) {
    FlatParam& flat = sharded.unit(u);
    for (const auto& entry : flat.entries()) {
      const torch::Tensor got = flat.grad_shard().narrow(0, entry.offset, entry.numel);
      const torch::Tensor want = grads.at(entry.name).to(torch::kDouble).view({-1}) * coef;
      EXPECT_LT((got.to(torch::kDouble) - want).abs().max().item<double>(), 1e-8) << entry.name;
    }
  }
  // The clipped gradients have norm max_norm (up to the 1e-6 guard).
  EXPECT_NEAR(ooze::fsdp::clip_grad_norm(sharded, 0.0).norm, norm / 4, 1e-6);
}

TEST_F(ShardedOptimizer, NonFiniteNormSkipsTheStep) {
  Toy toy = make_toy(5);
  FullyShardedModule sharded(*toy, {"first"}, nullptr, {});
  ShardedAdamW adamw(sharded, {});
  std::vector<torch::Tensor> before;
  for (size_t u = 0; u < sharded.num_units(); ++u)
    before.push_back(sharded.unit(u).master_shard().clone());

  auto grads = make_grads(toy, 1);
  grads.at("second.weight")[1][2] = std::numeric_limits<float>::quiet_NaN();
  give_grads(sharded, grads);
  const auto result = ooze::fsdp::clip_and_step(sharded, adamw, 1e-2, 1.0);
  EXPECT_TRUE(result.skipped);
  EXPECT_TRUE(std::isnan(result.grad_norm));
  for (size_t u = 0; u < sharded.num_units(); ++u) {
    EXPECT_TRUE(torch::equal(sharded.unit(u).master_shard(), before[u]));
    EXPECT_EQ(adamw.steps(u), 0);
    EXPECT_EQ(adamw.exp_avg(u).abs().sum().item<double>(), 0.0);
    EXPECT_FALSE(sharded.unit(u).has_grad());  // zeroed for the next step
  }

  // An infinite gradient is skipped too; then a finite one steps.
  grads = make_grads(toy, 2);
  grads.at("scale")[0] = std::numeric_limits<float>::infinity();
  give_grads(sharded, grads);
  EXPECT_TRUE(ooze::fsdp::clip_and_step(sharded, adamw, 1e-2, 0.0).skipped);
  give_grads(sharded, make_grads(toy, 3));
  const auto ok = ooze::fsdp::clip_and_step(sharded, adamw, 1e-2, 0.0);
  EXPECT_FALSE(ok.skipped);
  EXPECT_FALSE(torch::equal(sharded.unit(0).master_shard(), before[0]));
  EXPECT_EQ(adamw.steps(0), 1);
}

TEST_F(ShardedOptimizer, RefusesBadOptions) {
  ShardedAdamWOptions options;
  options.beta1 = 1.0;
  EXPECT_THROW(options.validate(), ooze::ConfigError);
  options = {};
  options.weight_decay = -1;
  EXPECT_THROW(options.validate(), ooze::ConfigError);
  Toy toy = make_toy(1);
  FullyShardedModule sharded(*toy, {}, nullptr, {});
  ShardedAdamW adamw(sharded, {});
  EXPECT_THROW(adamw.step(std::numeric_limits<double>::quiet_NaN()), ooze::Error);
}

}  // namespace sharded_adamw_test
