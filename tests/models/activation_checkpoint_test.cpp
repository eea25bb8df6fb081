// checkpointed() must give exactly the gradients of the plain run (same ops, fp32), for the
// input and for the parameters used inside the block.
#include "models/activation_checkpoint.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "core/error.h"
#include "models/model_config.h"
#include "models/transformer.h"

namespace ooze {
namespace models {
namespace activation_checkpoint_test {

// A residual MLP block: x + W2 silu(W1 x + b1) + b2, with an RMS-style norm that reads the
// position ids captured by the lambda (a non-differentiable extra, as decoder layers have).
struct ResidualMlpImpl : torch::nn::Module {
  ResidualMlpImpl() {
    up = register_module("up", torch::nn::Linear(8, 16));
    down = register_module("down", torch::nn::Linear(16, 8));
    scale = register_parameter("scale", torch::ones({8}));
  }
  at::Tensor forward(const at::Tensor& x, const at::Tensor& position_ids) {
    at::Tensor normed = x * torch::rsqrt(x.pow(2).mean(-1, true) + 1e-6) * scale;
    at::Tensor shifted = normed + position_ids.to(x.scalar_type()).unsqueeze(1) * 0.01;
    return x + down(torch::silu(up(shifted)));
  }
  torch::nn::Linear up{nullptr}, down{nullptr};
  at::Tensor scale;
};
TORCH_MODULE(ResidualMlp);

struct Stack {
  std::vector<ResidualMlp> blocks;
  Stack() {
    torch::manual_seed(7);
    for (int i = 0; i < 3; ++i) blocks.emplace_back();
  }
  at::Tensor forward(at::Tensor x, const at::Tensor& position_ids, bool checkpoint) {
    for (auto& block : blocks) {
      if (checkpoint) {
        x = checkpointed([&](const at::Tensor& in) { return block->forward(in, position_ids); }, x,
                         block->parameters());
      } else {
        x = block->forward(x, position_ids);
      }
    }
    return x;
  }
  std::vector<at::Tensor> grads() {
    std::vector<at::Tensor> out;
    for (auto& block : blocks) {
      for (auto& p : block->parameters())
        out.push_back(p.grad().defined() ? p.grad().clone() : p.grad());
    }
    return out;
  }
};

class ActivationCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override { at::set_num_threads(1); }
};

void expect_identical(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(a[i].defined()) << "tensor " << i;
    ASSERT_TRUE(b[i].defined()) << "tensor " << i;
    EXPECT_TRUE(torch::equal(a[i], b[i]))
        << "tensor " << i << " differs by " << (a[i] - b[i]).abs().max().item<double>();
  }
}

TEST_F(ActivationCheckpointTest, GradientsEqualThePlainRunExactly) {
  torch::manual_seed(1);
  const at::Tensor input = torch::randn({10, 8});
  const at::Tensor position_ids = torch::arange(10);
  const at::Tensor upstream = torch::randn({10, 8});

  Stack plain, ckpt;  // same seed: identical parameters
  at::Tensor x_plain = input.clone().requires_grad_(true);
  at::Tensor x_ckpt = input.clone().requires_grad_(true);
  at::Tensor y_plain = plain.forward(x_plain, position_ids, false);
  at::Tensor y_ckpt = ckpt.forward(x_ckpt, position_ids, true);
  EXPECT_TRUE(torch::equal(y_plain, y_ckpt));
  (y_plain * upstream).sum().backward();
  (y_ckpt * upstream).sum().backward();

  expect_identical(plain.grads(), ckpt.grads());
  expect_identical({x_plain.grad()}, {x_ckpt.grad()});
}

TEST_F(ActivationCheckpointTest, GradientsAccumulateOverBackwardCalls) {
  const at::Tensor position_ids = torch::arange(4);
  Stack plain, ckpt;
  for (int step = 0; step < 2; ++step) {
    torch::manual_seed(100 + step);
    const at::Tensor input = torch::randn({4, 8}, torch::requires_grad());
    plain.forward(input, position_ids, false).pow(2).sum().backward();
    ckpt.forward(input, position_ids, true).pow(2).sum().backward();
  }
  expect_identical(plain.grads(), ckpt.grads());
}

TEST_F(ActivationCheckpointTest, ParametersGetGradientsWhenTheInputNeedsNone) {
  torch::manual_seed(2);
  const at::Tensor input = torch::randn({5, 8});  // e.g. frozen embeddings
  const at::Tensor position_ids = torch::arange(5);
  Stack plain, ckpt;
  plain.forward(input, position_ids, false).sum().backward();
  at::Tensor y = ckpt.forward(input, position_ids, true);
  EXPECT_TRUE(y.requires_grad());
  y.sum().backward();
  expect_identical(plain.grads(), ckpt.grads());
}

TEST_F(ActivationCheckpointTest, FrozenParametersStayWithoutGradient) {
  torch::manual_seed(3);
  Stack plain, ckpt;
  for (Stack* s : {&plain, &ckpt}) s->blocks[1]->up->weight.requires_grad_(false);
  const at::Tensor input = torch::randn({6, 8});
  const at::Tensor position_ids = torch::arange(6);
  plain.forward(input.requires_grad_(true), position_ids, false).sum().backward();
  ckpt.forward(input, position_ids, true).sum().backward();
  EXPECT_FALSE(ckpt.blocks[1]->up->weight.grad().defined());
  std::vector<at::Tensor> a = plain.grads(), b = ckpt.grads();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].defined(), b[i].defined()) << i;
    if (a[i].defined()) {
      EXPECT_TRUE(torch::equal(a[i], b[i])) << i;
    }
  }
}

TEST_F(ActivationCheckpointTest, WithoutGradModeItIsThePlainForward) {
  torch::manual_seed(4);
  Stack plain, ckpt;
  const at::Tensor input = torch::randn({3, 8});
  const at::Tensor position_ids = torch::arange(3);
  torch::NoGradGuard no_grad;
  at::Tensor y = ckpt.forward(input, position_ids, true);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(torch::equal(y, plain.forward(input, position_ids, false)));
}

TEST_F(ActivationCheckpointTest, ParameterChangedBeforeBackwardIsReported) {
  torch::manual_seed(5);
  Stack ckpt;
  const at::Tensor input = torch::randn({3, 8}, torch::requires_grad());
  at::Tensor y = ckpt.forward(input, torch::arange(3), true);
  {
    torch::NoGradGuard no_grad;
    ckpt.blocks[0]->down->weight.add_(1.0);  // an optimizer step in the wrong place
  }
  EXPECT_THROW(y.sum().backward(), std::exception);
}

ModelConfig tiny_qwen3() {
  ModelConfig config;
  config.model_type = "qwen3";
  config.vocab_size = 40;
  config.hidden_size = 16;
  config.intermediate_size = 24;
  config.num_hidden_layers = 2;
  config.num_attention_heads = 4;
  config.num_key_value_heads = 2;
  config.head_dim = 4;
  config.max_position_embeddings = 64;
  config.validate();
  return config;
}

// One decoder layer of the real model, checkpointed by hand, over two packed sequences.
TEST_F(ActivationCheckpointTest, DecoderLayerGradientsEqualThePlainRun) {
  TransformerModel plain(tiny_qwen3()), ckpt(tiny_qwen3());
  plain->init_weights(11);
  ckpt->init_weights(11);
  torch::manual_seed(12);
  const at::Tensor input = torch::randn({9, 16});
  const at::Tensor upstream = torch::randn({9, 16});
  const at::Tensor position_ids = torch::tensor(std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 3, 4});
  const std::vector<int64_t> offsets{0, 4, 9};

  at::Tensor x_plain = input.clone().requires_grad_(true);
  DecoderLayer& layer_plain = plain->layers()[0];
  at::Tensor y_plain = layer_plain->forward(x_plain, plain->rotary_tables(position_ids), offsets);
  (y_plain * upstream).sum().backward();

  at::Tensor x_ckpt = input.clone().requires_grad_(true);
  DecoderLayer& layer_ckpt = ckpt->layers()[0];
  const RotaryTables rope = ckpt->rotary_tables(position_ids);
  at::Tensor y_ckpt =
      checkpointed([&](const at::Tensor& x) { return layer_ckpt->forward(x, rope, offsets); },
                   x_ckpt, layer_ckpt->parameters());
  EXPECT_TRUE(torch::equal(y_plain, y_ckpt));
  (y_ckpt * upstream).sum().backward();

  std::vector<at::Tensor> grads_plain, grads_ckpt;
  for (auto& p : layer_plain->parameters()) grads_plain.push_back(p.grad());
  for (auto& p : layer_ckpt->parameters()) grads_ckpt.push_back(p.grad());
  expect_identical(grads_plain, grads_ckpt);
  expect_identical({x_plain.grad()}, {x_ckpt.grad()});
}

// The whole model with its activation-checkpointing switch: every parameter's gradient.
TEST_F(ActivationCheckpointTest, TransformerModelGradientsEqualThePlainRun) {
  TransformerModel plain(tiny_qwen3()), ckpt(tiny_qwen3());
  plain->init_weights(13);
  ckpt->init_weights(13);
  ckpt->set_activation_checkpointing(true);
  const at::Tensor ids = torch::tensor(std::vector<int64_t>{5, 3, 9, 1, 7, 7, 2});
  const at::Tensor positions = torch::tensor(std::vector<int64_t>{0, 1, 2, 0, 1, 2, 3});
  const at::Tensor cu_seqlens = torch::tensor(std::vector<int32_t>{0, 3, 7});
  for (TransformerModel* model : {&plain, &ckpt}) {
    at::Tensor logits = (*model)->logits((*model)->forward(ids, positions, cu_seqlens));
    torch::log_softmax(logits.to(torch::kFloat), -1).select(1, 4).sum().backward();
  }
  std::vector<at::Tensor> grads_plain, grads_ckpt;
  for (auto& p : plain->parameters()) grads_plain.push_back(p.grad());
  for (auto& p : ckpt->parameters()) grads_ckpt.push_back(p.grad());
  expect_identical(grads_plain, grads_ckpt);
}

TEST_F(ActivationCheckpointTest, RejectsAnEmptyBlock) {
  EXPECT_THROW(checkpointed(CheckpointedBlock(), torch::ones({2}), {}), Error);
}

}  // namespace activation_checkpoint_test
}  // namespace models
}  // namespace ooze
