// Python losses on tensors shared with C++ (python/loss_hook.h, python/tensor_bridge.h): what a
// loss writes into the batch is what C++ holds, the loss it returns backpropagates into C++'s
// leaf (with the GIL released), and its metrics come back by name.
#include "python/loss_hook.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "python/hook_args.h"

namespace ooze::python {
namespace loss_hook_test {

const std::string kHooks = OOZE_TEST_HOOKS_DIR;

TEST(LossHookTest, TensorsAreSharedBothWays) {
  set_hook_args({{"answer", 42}});
  const LossHook hook =
      LossHook::load(kHooks + "/losses.py:shares_tensors", "--custom-loss-function-path");

  const at::Tensor leaf = at::randn({5}, at::kFloat).requires_grad_(true);
  const at::Tensor entropy = at::rand({5}, at::kFloat);
  const at::Tensor advantages = at::randn({5}, at::kFloat);
  const at::Tensor advantages_before = advantages.clone();
  const at::Tensor weights = at::rand({5}, at::kFloat);
  LossHookInputs inputs;
  inputs.tensor_lists = {{"advantages", {advantages.narrow(0, 0, 2), advantages.narrow(0, 2, 3)}}};
  inputs.integer_lists = {{"response_lengths", {2, 3}}, {"total_lengths", {4, 6}}};
  inputs.log_probs = {leaf.narrow(0, 0, 2), leaf.narrow(0, 2, 3)};
  inputs.entropy = {entropy.narrow(0, 0, 2), entropy.narrow(0, 2, 3)};
  inputs.token_weights = weights;
  inputs.data_parallel_size = 4;

  LossHookOutput out = hook.call(inputs);
  // The hook added 1 to the first sample's advantages in place.
  at::Tensor expected_advantages = advantages_before.clone();
  expected_advantages.narrow(0, 0, 2).add_(1.0);
  EXPECT_TRUE(advantages.equal(expected_advantages));

  ASSERT_EQ(out.loss.dim(), 0);
  EXPECT_NEAR(out.loss.item<double>(), (leaf * advantages * weights).sum().item<double>(), 1e-6);
  out.loss.backward();  // the GIL is free: the autograd engine refuses to run under it
  EXPECT_TRUE(leaf.grad().allclose(advantages * weights));

  std::map<std::string, double> metrics;
  for (size_t i = 0; i < out.metric_names.size(); ++i) {
    metrics[out.metric_names[i]] = out.metric_values[static_cast<int64_t>(i)].item<double>();
  }
  EXPECT_EQ(metrics.at("samples"), 2);
  EXPECT_EQ(metrics.at("first_total_length"), 4);
  EXPECT_EQ(metrics.at("answer"), 42);
  EXPECT_NEAR(metrics.at("entropy_sum"), entropy.sum().item<double>(), 1e-5);
  EXPECT_EQ(metrics.at("data_parallel_size"), 4);
  EXPECT_NEAR(metrics.at("loss"), out.loss.item<double>(), 1e-12);  // added: the dict has none
}

}  // namespace loss_hook_test
}  // namespace ooze::python
