// LoRA adapters (models/lora.h) and PEFT adapter directories (models/peft_adapter.h): a fresh
// adapter leaves the model exactly the base, gradients of A and B against the closed form, and
// a saved adapter read back by an independent reader (python3 parsing the safetensors header by
// hand, merging in torch) that agrees with ooze's merge.
#include "models/lora.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "models/hf_checkpoint.h"
#include "models/peft_adapter.h"
#include "tests/models/peft_reader.h"
#include "tests/models/python_reference.h"
#include "tests/support/expect_error.h"
#include "tests/support/process.h"
#include "tests/support/tiny_model.h"

namespace ooze::models {
namespace lora_test {

using testing::error_message_of;

// The tests' tiny Qwen3 (hidden 64, 2 layers, 4 heads of 16, 2 for keys and values).
ModelConfig tiny_config() { return load_model_config(testing::tiny_model_dir()); }

LoraOptions lora(int64_t rank, double alpha, std::vector<std::string> targets = {"all-linear"}) {
  LoraOptions options;
  options.rank = rank;
  options.alpha = alpha;
  options.target_modules = std::move(targets);
  return options;
}

torch::Tensor hidden_of(TransformerModel& model) {
  torch::NoGradGuard no_grad;
  const torch::Tensor ids = torch::tensor({3, 14, 15, 9, 26, 5, 35, 8}, torch::kLong);
  const torch::Tensor positions = torch::tensor({0, 1, 2, 3, 0, 1, 2, 3}, torch::kLong);
  const torch::Tensor cu_seqlens = torch::tensor({0, 4, 8}, torch::kInt);
  return model->logits(model->forward(ids, positions, cu_seqlens));
}

// Gives every adapter's B random values, so the adapters change the model.
void randomise_b(TransformerModel& model, uint64_t seed) {
  torch::NoGradGuard no_grad;
  for (const AdaptedLinear& adapted : adapted_linears(*model)) {
    adapted.linear->lora_B->weight.normal_(0.0, 0.05, at::detail::createCPUGenerator(seed++));
  }
}

TEST(LoraTest, AFreshAdapterLeavesTheBaseModelExactlyAndOnlyAdaptersTrain) {
  TransformerModel model(tiny_config());
  model->init_weights(1);
  const torch::Tensor base = hidden_of(model);
  add_lora_adapters(*model, lora(4, 8), /*seed=*/3);
  EXPECT_TRUE(torch::equal(hidden_of(model), base));

  const std::vector<AdaptedLinear> adapted = adapted_linears(*model);
  ASSERT_EQ(adapted.size(), 2u * 7u);  // every projection of both layers
  EXPECT_EQ(adapted.front().name, "model.layers.0.self_attn.q_proj");
  EXPECT_EQ(adapted.back().name, "model.layers.1.mlp.down_proj");
  for (const AdaptedLinear& a : adapted) {
    const torch::Tensor& weight_a = a.linear->lora_A->weight;
    EXPECT_EQ(weight_a.sizes(), (std::vector<int64_t>{4, a.linear->weight.size(1)})) << a.name;
    EXPECT_EQ(a.linear->lora_B->weight.sizes(),
              (std::vector<int64_t>{a.linear->weight.size(0), 4}));
    EXPECT_EQ(a.linear->lora_B->weight.count_nonzero().item<int64_t>(), 0) << a.name;
    // PEFT's kaiming-uniform bound 1 / sqrt(in), and not all at one value.
    const double bound = 1.0 / std::sqrt(static_cast<double>(a.linear->weight.size(1)));
    EXPECT_LE(weight_a.abs().max().item<double>(), bound) << a.name;
    EXPECT_GT(weight_a.std().item<double>(), bound / 4) << a.name;
    EXPECT_DOUBLE_EQ(a.linear->adapter_scaling(), 2.0);
  }
  for (const auto& item : model->named_parameters()) {
    EXPECT_EQ(item.value().requires_grad(), is_lora_parameter(item.key())) << item.key();
  }
  // The same seed draws the same A whatever else differs; another seed draws another.
  TransformerModel again(tiny_config());
  add_lora_adapters(*again, lora(4, 8), 3);
  TransformerModel other(tiny_config());
  add_lora_adapters(*other, lora(4, 8), 4);
  const auto a_of = [](TransformerModel& m) {
    return adapted_linears(*m).front().linear->lora_A->weight;
  };
  EXPECT_TRUE(torch::equal(a_of(again), a_of(model)));
  EXPECT_FALSE(torch::equal(a_of(other), a_of(model)));
}

TEST(LoraTest, TargetModulesChooseTheProjectionsAndUnknownOnesAreRefused) {
  TransformerModel model(tiny_config());
  model->init_weights(1);
  add_lora_adapters(*model, lora(2, 2, {"v_proj", "q_proj"}), 0);
  const std::vector<AdaptedLinear> adapted = adapted_linears(*model);
  ASSERT_EQ(adapted.size(), 4u);
  EXPECT_EQ(adapted[0].name, "model.layers.0.self_attn.q_proj");
  EXPECT_EQ(adapted[1].name, "model.layers.0.self_attn.v_proj");

  EXPECT_CONTAINS(
      error_message_of<ConfigError>([] { lora(2, 2, {"qkv_proj"}).target_projections(); }),
      "'qkv_proj' is not a linear layer of the decoder; give all-linear or some of "
      "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj");
  EXPECT_CONTAINS(error_message_of<ConfigError>([] { lora(2, 2, {}).target_projections(); }),
                  "--target-modules is empty");
  TransformerModel plain(tiny_config());
  EXPECT_CONTAINS(error_message_of<ConfigError>([&] { add_lora_adapters(*plain, lora(0, 2), 0); }),
                  "--lora-rank must be at least 1");
}

TEST(LoraTest, AdaptersOffComputeTheBaseAndOnComputeTheMergedWeights) {
  TransformerModel model(tiny_config());
  model->init_weights(1);
  const torch::Tensor base = hidden_of(model);
  add_lora_adapters(*model, lora(4, 8), 3);
  randomise_b(model, 100);
  const torch::Tensor adapted = hidden_of(model);
  EXPECT_GT((adapted - base).abs().max().item<double>(), 1e-3);
  {
    AdaptersDisabled off(*model);
    EXPECT_TRUE(torch::equal(hidden_of(model), base));
  }
  EXPECT_TRUE(torch::equal(hidden_of(model), adapted));

  // The same model with W + (alpha / r) B A written into plain weights, by hand here.
  TransformerModel merged(tiny_config());
  merged->init_weights(1);
  {
    torch::NoGradGuard no_grad;
    auto weights = merged->named_parameters();
    for (const AdaptedLinear& a : adapted_linears(*model)) {
      weights[a.name + ".weight"].add_(
          torch::mm(a.linear->lora_B->weight, a.linear->lora_A->weight) * 2.0);
    }
  }
  EXPECT_LT((hidden_of(merged) - adapted).abs().max().item<double>(), 1e-5);
}

// y = x W^T + s (x A^T) B^T with L = sum(y * g): dL/dB = s g^T (x A^T), dL/dA = s (g B)^T x, and
// nothing for the frozen W.
TEST(LoraTest, GradientsOfAAndBAreTheClosedForm) {
  LinearImpl linear(6, 5, /*with_bias=*/true, torch::kFloat);
  auto generator = at::detail::createCPUGenerator(9);
  {
    torch::NoGradGuard no_grad;
    linear.weight.normal_(0, 1, generator).requires_grad_(false);
    linear.bias.normal_(0, 1, generator).requires_grad_(false);
  }
  linear.add_adapter(/*rank=*/3, /*alpha=*/6, /*dropout=*/0, torch::kFloat);
  {
    torch::NoGradGuard no_grad;
    linear.lora_A->weight.normal_(0, 1, generator);
    linear.lora_B->weight.normal_(0, 1, generator);
  }
  const torch::Tensor x = torch::randn({7, 6}, generator);
  const torch::Tensor g = torch::randn({7, 5}, generator);
  (linear.forward(x) * g).sum().backward();

  const torch::Tensor xd = x.to(torch::kDouble), gd = g.to(torch::kDouble);
  const torch::Tensor a = linear.lora_A->weight.detach().to(torch::kDouble);
  const torch::Tensor b = linear.lora_B->weight.detach().to(torch::kDouble);
  const torch::Tensor grad_b = 2.0 * torch::mm(gd.t(), torch::mm(xd, a.t()));
  const torch::Tensor grad_a = 2.0 * torch::mm(torch::mm(gd, b).t(), xd);
  EXPECT_LT((linear.lora_B->weight.grad().to(torch::kDouble) - grad_b).abs().max().item<double>(),
            1e-4);
  EXPECT_LT((linear.lora_A->weight.grad().to(torch::kDouble) - grad_a).abs().max().item<double>(),
            1e-4);
  EXPECT_FALSE(linear.weight.grad().defined());
}

TEST(PeftAdapterTest, ASavedAdapterReadsBackHereAndInAnIndependentReader) {
  const std::string dir = testing::make_temp_dir("peft-adapter");
  TransformerModel model(tiny_config());
  model->init_weights(1);
  save_hf_model(dir + "/base", model->config(), *model, "");
  LoraOptions options = lora(4, 12, {"q_proj", "v_proj", "down_proj"});
  add_lora_adapters(*model, options, 5);
  randomise_b(model, 200);
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& item : model->named_parameters()) {
    if (is_lora_parameter(item.key())) tensors[item.key()] = item.value();
  }
  save_peft_adapter(dir + "/adapter", options, tensors, dir + "/base");

  // Read back here: the same options and tensors, and into a fresh adapter of the same shape.
  const PeftAdapter adapter = load_peft_adapter(dir + "/adapter");
  EXPECT_EQ(adapter.options.rank, 4);
  EXPECT_EQ(adapter.options.alpha, 12);
  EXPECT_EQ(adapter.options.target_projections(),
            (std::vector<std::string>{"q_proj", "v_proj", "down_proj"}));
  ASSERT_EQ(adapter.tensors.size(), tensors.size());
  TransformerModel fresh(tiny_config());
  fresh->init_weights(1);
  add_lora_adapters(*fresh, options, 6);
  load_adapter_weights(*fresh, adapter);
  EXPECT_TRUE(torch::equal(hidden_of(fresh), hidden_of(model)));

  // Merged into a plain model (what `ooze serve --lora` does) and judged by python3.
  TransformerModel merged(tiny_config());
  merged->init_weights(1);
  merge_adapter_weights(*merged, adapter);
  EXPECT_LT((hidden_of(merged) - hidden_of(model)).abs().max().item<double>(), 1e-5);
  save_hf_model(dir + "/merged", merged->config(), *merged, "");
  const std::string script = dir + "/peft_reader.py";
  std::ofstream(script) << testing::kPeftReader;
  const std::string printed = testing::run_python_reference(
      "'" + script + "' '" + dir + "/adapter' '" + dir + "/base' '" + dir + "/merged'", "");
  EXPECT_EQ(printed, "6 modules 3.0\n");
}

TEST(PeftAdapterTest, AdaptersThatDoNotFitAreRefusedNamingWhatDiffers) {
  const std::string dir = testing::make_temp_dir("peft-errors");
  EXPECT_CONTAINS(error_message_of<IoError>([&] { load_peft_adapter(dir); }),
                  "is not a PEFT adapter directory: adapter_config.json is missing");

  TransformerModel model(tiny_config());
  model->init_weights(1);
  const LoraOptions options = lora(4, 8, {"q_proj"});
  add_lora_adapters(*model, options, 5);
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& item : model->named_parameters()) {
    if (is_lora_parameter(item.key())) tensors[item.key()] = item.value();
  }
  save_peft_adapter(dir + "/adapter", options, tensors, "base");

  // Another rank and other modules: every difference listed.
  TransformerModel other(tiny_config());
  add_lora_adapters(*other, lora(2, 4, {"q_proj", "k_proj"}), 5);
  const std::string message = error_message_of<FormatError>(
      [&] { load_adapter_weights(*other, load_peft_adapter(dir + "/adapter")); });
  EXPECT_CONTAINS(message,
                  "model.layers.0.self_attn.q_proj.lora_A.weight has shape [4, 64], "
                  "the model's is [2, 64]");
  EXPECT_CONTAINS(message, "model.layers.1.self_attn.k_proj.lora_B.weight is missing");

  // A DoRA adapter is not plain LoRA.
  nlohmann::json config =
      nlohmann::json::parse(std::ifstream(dir + "/adapter/adapter_config.json"));
  config["use_dora"] = true;
  std::ofstream(dir + "/adapter/adapter_config.json") << config.dump();
  EXPECT_CONTAINS(error_message_of<FormatError>([&] { load_peft_adapter(dir + "/adapter"); }),
                  "adapter_config.json: \"use_dora\" is true; ooze applies plain LoRA");
  // And an unrelated directory is never replaced by a save.
  std::ofstream(dir + "/notes.txt") << "mine";
  EXPECT_CONTAINS(error_message_of<IoError>([&] { save_peft_adapter(dir, options, tensors, ""); }),
                  "not a model or adapter directory this may replace");
}

}  // namespace lora_test
}  // namespace ooze::models
