// What a Python loss costs in the train step: examples/algorithms/ppo_loss.py, the built-in PPO
// clip loss written as a custom loss (--loss-type custom_loss), against the built-in loss itself
// on the same model and batches, both through trainer::train_step (plan, pack, forward, loss,
// backward, clipping, AdamW) on one rank with one thread. The loss has KL and entropy terms
// (use_kl_loss, low_var_kl, entropy_coef), so the Python function does all the built-in does.
// Train tokens/s = the batch's tokens / step time, best of kSteps steps after a warm-up, the
// two variants alternating step by step on two copies of one model; ratio = Python / built-in
// (goal >= 0.95). Two models:
//
//   python_loss.train_tokens_per_s.ppo_20m   a ~20M-parameter Qwen3 shape (bench/fsdp_training's):
//                                            8 samples of 256 tokens, 2 micro-batches
//   python_loss.train_tokens_per_s.ppo_demo  the CPU demo's model (hidden 128, 2 layers, byte
//                                            vocabulary) on a step of the demo's: 128 samples of
//                                            8 + <= 4 tokens in 2 micro-batches of 64, where the
//                                            loss is a large share of the step
//
// Step times on a shared CPU vary by several percent from step to step, more than the loss costs;
// the loss alone is measured too, without the model:
//
//   python_loss.loss_ms_per_micro_batch.ppo  forward and backward of the loss on one micro-batch
//                                            of the 20M model's (4 samples, 1 k tokens) from
//                                            given log-probs and entropy, best of 50: the Python
//                                            loss (trainer::custom_loss) against
//                                            algorithms::policy_loss; ratio = Python / built-in
//
// As a guard, the two variants' step losses must agree to 1e-5.
//
//   bench_python_loss_bench
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_support.h"
#include "core/load_time_settings.h"
#include "fsdp/fsdp_transformer.h"
#include "fsdp/packing.h"
#include "fsdp/sharded_adamw.h"
#include "models/model_config.h"
#include "models/transformer.h"
#include "python/hook_args.h"
#include "trainer/python_loss.h"
#include "trainer/train_step.h"

using namespace ooze;

namespace {

constexpr int kSteps = 9;
constexpr int kLossRepetitions = 50;
constexpr double kLr = 1e-5;

struct Shape {
  std::string name;
  int64_t vocab_size, hidden_size, intermediate_size, layers, heads, kv_heads, head_dim;
  int64_t samples, prompt_length, response_length, micro_batch_size;
};

models::ModelConfig config_of(const Shape& shape) {
  models::ModelConfig config;
  config.model_type = "qwen3";
  config.vocab_size = shape.vocab_size;
  config.hidden_size = shape.hidden_size;
  config.intermediate_size = shape.intermediate_size;
  config.num_hidden_layers = shape.layers;
  config.num_attention_heads = shape.heads;
  config.num_key_value_heads = shape.kv_heads;
  config.head_dim = shape.head_dim;
  config.max_position_embeddings = 4096;
  config.tie_word_embeddings = false;
  config.torch_dtype = "float32";
  config.validate();
  return config;
}

// An RL batch: random tokens, and the values the PPO loss reads near the model's own log-probs
// (log 1/V), so that some ratios clip.
std::vector<fsdp::PackingSample> rl_batch(const Shape& shape, int step) {
  std::mt19937_64 rng(7919ull * static_cast<uint64_t>(step + 1));
  std::uniform_int_distribution<int64_t> token(0, shape.vocab_size - 1);
  std::normal_distribution<float> normal;
  const float uniform_log_prob = -std::log(static_cast<float>(shape.vocab_size));
  std::vector<fsdp::PackingSample> samples;
  for (int64_t s = 0; s < shape.samples; ++s) {
    const int64_t response = std::max<int64_t>(1, shape.response_length - s % 3);
    std::vector<int64_t> tokens(static_cast<size_t>(shape.prompt_length + response));
    for (int64_t& id : tokens) id = token(rng);
    fsdp::PackingSample sample;
    sample.tokens = at::tensor(tokens, at::kLong);
    sample.response_length = response;
    auto values = [&](float mean, float spread) {
      std::vector<float> out(static_cast<size_t>(response));
      for (float& v : out) v = mean + spread * normal(rng);
      return at::tensor(out, at::kFloat);
    };
    sample.response_values["advantages"] = values(0, 1);
    sample.response_values["old_log_probs"] = values(uniform_log_prob, 0.2f);
    sample.response_values["ref_log_probs"] = values(uniform_log_prob, 0.2f);
    samples.push_back(std::move(sample));
  }
  return samples;
}

trainer::TrainStepOptions builtin_options(int64_t micro_batch_size) {
  trainer::TrainStepOptions options;
  options.packing.micro_batch_size = micro_batch_size;
  options.policy_loss.use_kl_loss = true;
  options.policy_loss.kl_loss_coef = 0.01;
  options.policy_loss.kl_loss_type = algorithms::KlEstimator::kLowVarKl;
  options.policy_loss.entropy_coef = 0.001;
  return options;
}

trainer::TrainStepOptions python_options(const trainer::TrainStepOptions& builtin,
                                         const std::string& python_loss) {
  trainer::TrainStepOptions options = builtin;
  options.loss_type = trainer::LossType::kCustomLoss;
  options.custom_loss_function_path = python_loss;
  ooze::python::set_hook_args(algorithms::PolicyLossOptions::fields().to_json(builtin.policy_loss));
  trainer::load_python_losses(options);
  return options;
}

// Best seconds of the built-in loss and of the Python loss, forward and backward, on the first
// micro-batch of `shape`'s batch.
std::pair<double, double> loss_seconds(const Shape& shape, const std::string& python_loss) {
  const trainer::TrainStepOptions builtin = builtin_options(shape.micro_batch_size);
  const trainer::TrainStepOptions python = python_options(builtin, python_loss);
  std::vector<int64_t> indices(static_cast<size_t>(shape.micro_batch_size));
  for (size_t i = 0; i < indices.size(); ++i) indices[i] = static_cast<int64_t>(i);
  const fsdp::PackedMicroBatch batch = fsdp::pack_micro_batch(rl_batch(shape, 0), indices);
  const int64_t tokens = batch.num_tokens();
  at::manual_seed(0);
  const at::Tensor log_probs =
      (-std::log(static_cast<double>(shape.vocab_size)) + 0.1 * at::randn({tokens}))
          .requires_grad_(true);
  const at::Tensor entropy = (at::rand({tokens}) * 5.0).requires_grad_(true);
  algorithms::LossScale scale;
  scale.global_tokens = batch.loss_mask.sum().item<double>();
  scale.global_sequences = static_cast<double>(batch.num_samples());

  auto run_builtin = [&] {
    algorithms::PolicyLossInputs inputs;
    inputs.cu_seqlens = batch.cu_seqlens;
    inputs.loss_mask = batch.loss_mask;
    inputs.log_probs = log_probs;
    inputs.entropy = entropy;
    inputs.old_log_probs = batch.value("old_log_probs");
    inputs.advantages = batch.value("advantages");
    inputs.ref_log_probs = batch.value("ref_log_probs");
    algorithms::policy_loss(inputs, builtin.policy_loss, scale).loss.backward();
  };
  auto run_python = [&] {
    models::TokenLogProbs predicted;
    predicted.log_probs = log_probs;
    predicted.entropy = entropy;
    trainer::custom_loss(python.custom_loss_function_path, batch, predicted, true, scale, 0)
        .loss.backward();
  };
  double best_builtin = 1e300, best_python = 1e300;
  for (int i = 0; i <= kLossRepetitions; ++i) {
    for (int k = 0; k < 2; ++k) {
      const bool run_python_first = (k == 0) == (i % 2 == 0);
      const auto start = std::chrono::steady_clock::now();
      run_python_first ? run_python() : run_builtin();
      const double seconds = bench::seconds_since(start);
      if (i == 0) continue;  // warm-up
      double& best = run_python_first ? best_python : best_builtin;
      best = std::min(best, seconds);
    }
  }
  return {best_builtin, best_python};
}

struct Comparison {
  double builtin_tokens_per_s = 0, python_tokens_per_s = 0;
  double max_loss_diff = 0;
};

Comparison compare(const Shape& shape, const std::string& python_loss) {
  trainer::TrainStepOptions builtin;
  builtin.packing.micro_batch_size = shape.micro_batch_size;
  builtin.policy_loss.use_kl_loss = true;
  builtin.policy_loss.kl_loss_coef = 0.01;
  builtin.policy_loss.kl_loss_type = algorithms::KlEstimator::kLowVarKl;
  builtin.policy_loss.entropy_coef = 0.001;
  trainer::TrainStepOptions python = builtin;
  python.loss_type = trainer::LossType::kCustomLoss;
  python.custom_loss_function_path = python_loss;
  ooze::python::set_hook_args(algorithms::PolicyLossOptions::fields().to_json(builtin.policy_loss));
  trainer::load_python_losses(python);

  const models::ModelConfig config = config_of(shape);
  auto make = [&] {
    models::TransformerModel model(config);
    model->init_weights(1234);
    return std::make_unique<fsdp::FsdpTransformer>(model, nullptr);
  };
  auto builtin_model = make(), python_model = make();
  fsdp::ShardedAdamW builtin_optimizer(builtin_model->sharded(), {});
  fsdp::ShardedAdamW python_optimizer(python_model->sharded(), {});

  Comparison out;
  double best_builtin = 1e300, best_python = 1e300;
  int64_t tokens = 0;
  for (int step = 0; step <= kSteps; ++step) {
    const std::vector<fsdp::PackingSample> samples = rl_batch(shape, step);
    tokens = 0;
    for (const auto& sample : samples) tokens += sample.length();
    // Alternate which goes first, so that neither always runs on a warmer cache.
    trainer::TrainStepResult results[2];
    double seconds[2];
    for (int k = 0; k < 2; ++k) {
      const bool run_python = (k == 0) == (step % 2 == 0);
      const auto start = std::chrono::steady_clock::now();
      results[run_python] =
          run_python
              ? trainer::train_step(*python_model, python_optimizer, kLr, samples, python)
              : trainer::train_step(*builtin_model, builtin_optimizer, kLr, samples, builtin);
      seconds[run_python] = bench::seconds_since(start);
    }
    out.max_loss_diff = std::max(
        out.max_loss_diff, std::abs(results[1].metrics.at("loss") - results[0].metrics.at("loss")));
    if (step == 0) continue;  // warm-up
    best_builtin = std::min(best_builtin, seconds[0]);
    best_python = std::min(best_python, seconds[1]);
  }
  out.builtin_tokens_per_s = static_cast<double>(tokens) / best_builtin;
  out.python_tokens_per_s = static_cast<double>(tokens) / best_python;
  if (out.max_loss_diff > 1e-5) {
    throw bench::BenchFailure("the Python loss and the built-in differ by " +
                              std::to_string(out.max_loss_diff) + " in a step's loss");
  }
  return out;
}

}  // namespace

int main(int, char** argv) {
  ooze::start_with_load_time_settings(argv);  // first: it may start this program again
  try {
    at::set_num_threads(1);
    const std::string loss =
        std::string(OOZE_SOURCE_DIR) + "/examples/algorithms/ppo_loss.py:ppo_loss";
    const Shape twenty_million{"ppo_20m", 2048, 512, 1408, 6, 8, 4, 64, 8, 64, 192, 4};
    const Shape demo{"ppo_demo", 259, 128, 384, 2, 4, 2, 32, 128, 8, 4, 64};
    for (const Shape& shape : {twenty_million, demo}) {
      const Comparison c = compare(shape, loss);
      bench::print_line("python_loss", "train_tokens_per_s." + shape.name, c.python_tokens_per_s,
                        "tokens/s", c.builtin_tokens_per_s,
                        c.python_tokens_per_s / c.builtin_tokens_per_s);
    }
    const auto [builtin_seconds, python_seconds] = loss_seconds(twenty_million, loss);
    bench::print_line("python_loss", "loss_ms_per_micro_batch.ppo", 1e3 * python_seconds, "ms",
                      1e3 * builtin_seconds, python_seconds / builtin_seconds);
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s: %s\n", bench::program_name().c_str(), error.what());
    return 1;
  }
}
