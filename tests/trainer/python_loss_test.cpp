// --loss-type custom_loss (trainer/python_loss.h) in the train step, on forked ranks over Gloo:
// the interpreter starts in the ranks only (forking a process that runs Python can deadlock).
//   - examples/algorithms/ppo_loss.py and cispo_loss.py, the built-in PPO clip and CISPO losses
//     in Python, give the built-in's gradients (every parameter) and metrics within 1e-6, on
//     the built-in plain model (W = 1) as the reference, at W = 1, W = 2 and W = 2 as one
//     context-parallel group (the loss sees whole samples): the three loss
//     aggregations, a token budget and one sample per micro-batch (so that a rank runs a padding
//     micro-batch), dual clip, clip-higher, KL (with and without gradient, unbiased) and entropy
//     terms, a temperature;
//   - the metrics of the dict are the step's (summed over micro-batches and ranks), "loss" is
//     the loss when the dict has none, ooze.mpu reports the data-parallel layout, and a loss
//     whose backward runs in Python trains as the built-in SFT loss does;
//   - the built-in policy loss with its pg_loss reduced by a Python function (Slime's
//     --custom-pg-loss-reducer-function-path) that reduces as the built-in aggregation does
//     gives the built-in's gradients too;
//   - each way a loss can be wrong, at load time and on a micro-batch, gives its message.
#include "trainer/python_loss.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/error.h"
#include "fsdp/fsdp_transformer.h"
#include "fsdp/packing.h"
#include "python/hook_args.h"
#include "python/python_hook.h"
#include "tests/support/expect_error.h"
#include "tests/support/rank_group.h"
#include "tests/support/training_fixture.h"
#include "trainer/train_step.h"

namespace ooze::trainer {
namespace python_loss_test {

using Check = std::function<void(bool, const std::string&)>;

const std::string kLosses = OOZE_TEST_LOSSES_DIR;
const std::string kExamples = OOZE_EXAMPLES_DIR;
constexpr double kTolerance = 1e-6;

// Samples of mixed lengths, a prompt of about a third of each, a masked-out response token, and
// the values a policy loss reads.
std::vector<fsdp::PackingSample> global_batch() {
  const std::vector<int64_t> lengths = {3, 7, 23, 12, 5, 19, 9, 4};
  auto generator = at::detail::createCPUGenerator(4242);
  std::vector<fsdp::PackingSample> samples;
  for (int64_t length : lengths) {
    fsdp::PackingSample sample;
    sample.tokens = torch::randint(256, {length}, generator, torch::kLong);
    sample.response_length = length - std::max<int64_t>(1, length / 3);
    const int64_t r = sample.response_length;
    sample.response_values["advantages"] = torch::randn({r}, generator);
    sample.response_values["old_log_probs"] = -5.5 + 0.2 * torch::randn({r}, generator);
    sample.response_values["ref_log_probs"] = -5.5 + 0.2 * torch::randn({r}, generator);
    sample.response_values["rollout_log_probs"] = -5.5 + 0.2 * torch::randn({r}, generator);
    samples.push_back(std::move(sample));
  }
  samples[5].response_mask = torch::ones({samples[5].response_length});
  samples[5].response_mask[2] = 0;
  return samples;
}

std::vector<fsdp::PackingSample> subset(const std::vector<fsdp::PackingSample>& samples,
                                        const std::vector<int64_t>& indices) {
  std::vector<fsdp::PackingSample> out;
  for (int64_t index : indices) out.push_back(samples[static_cast<size_t>(index)]);
  return out;
}

std::vector<fsdp::PackingSample> first(const std::vector<fsdp::PackingSample>& samples,
                                       size_t count) {
  return {samples.begin(), samples.begin() + static_cast<std::ptrdiff_t>(count)};
}

// Every parameter's full gradient by name: a collective over the model's group when it has one.
std::map<std::string, torch::Tensor> full_gradients(fsdp::FullyShardedModule& sharded) {
  std::map<std::string, torch::Tensor> out;
  for (size_t u = 0; u < sharded.num_units(); ++u) {
    fsdp::FlatParam& flat = sharded.unit(u);
    torch::Tensor full = flat.grad_shard();
    if (sharded.world_size() > 1) {
      full = torch::empty({flat.padded_numel()}, torch::kFloat);
      sharded.communicator()->all_gather(full, flat.grad_shard());
    }
    for (const fsdp::FlatParamEntry& entry : flat.entries()) {
      out[entry.name] = full.narrow(0, entry.offset, entry.numel).clone();
    }
  }
  return out;
}

// The largest difference between two models' gradients, and the largest gradient entry.
std::pair<double, double> gradient_difference(fsdp::FullyShardedModule& got,
                                              fsdp::FullyShardedModule& want) {
  const auto got_grads = full_gradients(got), want_grads = full_gradients(want);
  double diff = 0, magnitude = 0;
  for (const auto& [name, grad] : want_grads) {
    diff = std::max(diff, (got_grads.at(name) - grad).abs().max().item<double>());
    magnitude = std::max(magnitude, grad.abs().max().item<double>());
  }
  return {diff, magnitude};
}

fsdp::PackingOptions token_budget() {
  fsdp::PackingOptions packing;
  packing.use_dynamic_batch_size = true;
  packing.max_tokens_per_gpu = 24;
  return packing;
}

struct LossCase {
  std::string name;
  TrainStepOptions builtin;  // the built-in loss
  std::string python;        // the Python loss that reproduces it, or else
  std::string reducer;       // the pg_loss reducer that reproduces the built-in's aggregation
  size_t num_samples = 8;    // the first ones of the global batch
};

std::vector<LossCase> loss_cases() {
  const std::string ppo = kExamples + "/algorithms/ppo_loss.py:ppo_loss";
  const std::string cispo = kExamples + "/algorithms/cispo_loss.py:cispo_loss";
  std::vector<LossCase> cases(8);
  cases[0].name = "ppo";
  cases[0].python = ppo;
  cases[1].name = "ppo dual-clip clip-higher kl entropy token-mean T=0.8";
  cases[1].python = ppo;
  cases[1].builtin.loss_aggregation = algorithms::LossAggregation::kTokenMean;
  cases[1].builtin.temperature = 0.8;
  algorithms::PolicyLossOptions& rich = cases[1].builtin.policy_loss;
  rich.eps_clip_high = 0.28;
  rich.eps_clip_c = 1.5;
  rich.entropy_coef = 0.01;
  rich.use_kl_loss = true;
  rich.kl_loss_coef = 0.1;
  rich.kl_loss_type = algorithms::KlEstimator::kLowVarKl;
  rich.use_unbiased_kl = true;
  // One sample per micro-batch and 5 samples: at W = 2 one rank runs a padding micro-batch.
  cases[2].name = "ppo kl metric only seq-mean-token-sum one sample per micro-batch";
  cases[2].python = ppo;
  cases[2].builtin.loss_aggregation = algorithms::LossAggregation::kSequenceMeanTokenSum;
  cases[2].builtin.policy_loss.use_kl_loss = true;
  cases[2].builtin.policy_loss.kl_loss_type = algorithms::KlEstimator::kK2;
  cases[2].num_samples = 5;
  cases[3].name = "cispo kl entropy";
  cases[3].python = cispo;
  algorithms::PolicyLossOptions& cispo_options = cases[3].builtin.policy_loss;
  cispo_options.kind = algorithms::PolicyLossKind::kCispo;
  cispo_options.eps_clip_high = 0.1;
  cispo_options.entropy_coef = 0.02;
  cispo_options.use_kl_loss = true;
  cispo_options.kl_loss_coef = 0.05;
  cispo_options.kl_loss_type = algorithms::KlEstimator::kK3;
  cases[4].name = "cispo one sample per micro-batch";
  cases[4].python = cispo;
  cases[4].builtin.policy_loss.kind = algorithms::PolicyLossKind::kCispo;
  cases[4].num_samples = 5;
  // The built-in policy loss with its pg_loss reduced in Python, Slime's way.
  const std::string reducers = kLosses + "/reducers.py:";
  cases[5].name = "pg_loss reducer of sample means";
  cases[5].reducer = reducers + "sample_means";
  cases[6].name = "pg_loss reducer per token with kl entropy";
  cases[6].reducer = reducers + "sample_means";
  cases[6].builtin.loss_aggregation = algorithms::LossAggregation::kTokenMean;
  cases[6].builtin.policy_loss = rich;
  cases[7].name = "pg_loss reducer of sample sums (Dr.GRPO)";
  cases[7].reducer = reducers + "sample_sums";
  cases[7].builtin.loss_aggregation = algorithms::LossAggregation::kSequenceMeanTokenSum;
  for (size_t c = 0; c < cases.size(); ++c) {
    cases[c].builtin.packing = token_budget();
    if (cases[c].num_samples == 5) {
      cases[c].builtin.packing.use_dynamic_batch_size = false;
      cases[c].builtin.packing.micro_batch_size = 1;
    }
  }
  return cases;
}

// `args` of the Python losses: the built-in's flags, as a run passes them.
nlohmann::json flags_of(const TrainStepOptions& options) {
  nlohmann::json flags = algorithms::PolicyLossOptions::fields().to_json(options.policy_loss);
  flags["use_rollout_logprobs"] = false;
  return flags;
}

TrainStepOptions custom(const TrainStepOptions& builtin, const std::string& path) {
  TrainStepOptions options = builtin;
  options.loss_type = LossType::kCustomLoss;
  options.custom_loss_function_path = path;
  return options;
}

TrainStepOptions in_python(const LossCase& loss) {
  if (!loss.python.empty()) return custom(loss.builtin, loss.python);
  TrainStepOptions options = loss.builtin;
  options.custom_pg_loss_reducer_function_path = loss.reducer;
  return options;
}

// One rank: each case's Python loss on this rank's share against the built-in loss on the plain
// model with the whole batch. With `cp_size` 2 the ranks form one context-parallel group.
void reproduce_builtin_losses(const std::shared_ptr<comm::Communicator>& world, const Check& check,
                              int64_t cp_size = 1) {
  const int rank = world->rank();
  fsdp::FsdpTransformer plain(fsdp_test::make_model(false), nullptr);
  fsdp::FsdpTransformerOptions sharded;
  sharded.context_parallel_size = cp_size;
  fsdp::FsdpTransformer model(fsdp_test::make_model(false), world, sharded);
  for (const LossCase& loss : loss_cases()) {
    python::set_hook_args(flags_of(loss.builtin));
    const std::vector<fsdp::PackingSample> samples = first(global_batch(), loss.num_samples);
    TrainStepOptions python = in_python(loss);
    python.packing.context_parallel_size = cp_size;
    const std::vector<int64_t> share = fsdp::split_across_ranks(
        fsdp::sample_lengths(samples), world->size(), python.packing)[rank];
    const TrainStepResult want = accumulate_gradients(plain, samples, loss.builtin);
    TrainStepResult got;
    try {
      got = accumulate_gradients(model, subset(samples, share), python);
    } catch (const std::exception& error) {
      check(false, loss.name + ": " + error.what());
      return;
    }
    const auto [diff, magnitude] = gradient_difference(model.sharded(), plain.sharded());
    check(diff <= kTolerance, loss.name + ": gradients differ by " + std::to_string(diff));
    check(magnitude > 1e-3, loss.name + ": the gradient is too small to compare");
    for (const auto& [name, value] : want.metrics) {
      const auto found = got.metrics.find(name);
      check(found != got.metrics.end(), loss.name + ": the Python loss reports no " + name);
      if (found == got.metrics.end()) continue;
      check(std::abs(found->second - value) <= kTolerance * std::max(1.0, std::abs(value)),
            loss.name + ": " + name + " " + std::to_string(found->second) + ", built-in " +
                std::to_string(value));
    }
    check(want.metrics.at("pg_clipfrac") > 0, loss.name + ": nothing was clipped");
    check(got.samples == want.samples && got.loss_tokens == want.loss_tokens,
          loss.name + ": the step counted other samples or tokens");
    if (rank == 0) {
      std::printf(
          "W=%d CP=%d %s: max |grad - built-in| %.3g (max |grad| %.3g), loss %.9g vs %.9g\n",
          world->size(), static_cast<int>(cp_size), loss.name.c_str(), diff, magnitude,
          got.metrics.at("loss"), want.metrics.at("loss"));
    }
    plain.zero_grad();
    model.zero_grad();
  }
}

void expect_all_passed(const ::ooze::testing::RankGroupResult& run) {
  EXPECT_TRUE(run.all_passed()) << run.failures();
  for (size_t r = 0; r < run.ranks.size(); ++r) {
    if (r == 0) std::printf("%s", run.ranks[r].log.c_str());
  }
}

TEST(PythonLossTest, ReproducesTheBuiltInLossesAtWorldSizeOne) {
  expect_all_passed(
      ::ooze::testing::run_forked_ranks(1, [](const ::ooze::testing::RankContext& rank) {
        reproduce_builtin_losses(rank.group, rank.check);
      }));
}

TEST(PythonLossTest, ReproducesTheBuiltInLossesAtWorldSizeTwo) {
  expect_all_passed(
      ::ooze::testing::run_forked_ranks(2, [](const ::ooze::testing::RankContext& rank) {
        reproduce_builtin_losses(rank.group, rank.check);
      }));
}

TEST(PythonLossTest, ReproducesTheBuiltInLossesUnderContextParallelism) {
  expect_all_passed(
      ::ooze::testing::run_forked_ranks(2, [](const ::ooze::testing::RankContext& rank) {
        reproduce_builtin_losses(rank.group, rank.check, /*cp_size=*/2);
      }));
}

TEST(PythonLossTest, MetricsOfTheDictAreTheSteps) {
  expect_all_passed(
      ::ooze::testing::run_forked_ranks(2, [](const ::ooze::testing::RankContext& rank) {
        const Check& check = rank.check;
        python::set_hook_args(nlohmann::json::object());
        fsdp::FsdpTransformer plain(fsdp_test::make_model(false), nullptr);
        fsdp::FsdpTransformer model(fsdp_test::make_model(false), rank.group);
        TrainStepOptions sft;
        sft.loss_type = LossType::kSftLoss;
        sft.packing = token_budget();
        const std::vector<fsdp::PackingSample> samples = global_batch();
        const std::vector<int64_t> share =
            fsdp::split_across_ranks(fsdp::sample_lengths(samples), 2, sft.packing)[rank.rank];
        const TrainStepResult want = accumulate_gradients(plain, samples, sft);

        const TrainStepResult got = accumulate_gradients(
            model, subset(samples, share), custom(sft, kLosses + "/checks.py:with_metrics"));
        const auto [diff, magnitude] = gradient_difference(model.sharded(), plain.sharded());
        check(diff <= kTolerance && magnitude > 1e-3,
              "with_metrics: gradients differ from the SFT loss's by " + std::to_string(diff));
        const std::map<std::string, double>& m = got.metrics;
        auto near = [](double a, double b) {
          return std::abs(a - b) <= kTolerance * std::max(1.0, b);
        };
        check(m.count("loss") && near(m.at("loss"), want.metrics.at("loss")),
              "\"loss\" is not the loss the function returned");
        check(near(m.at("share_of_ones"), 1.0),
              "share_of_ones = " + std::to_string(m.at("share_of_ones")) + ", want 1");
        check(m.at("micro_batches") == 2.0 * static_cast<double>(got.micro_batches),
              "micro_batches = " + std::to_string(m.at("micro_batches")));
        check(m.at("counted_tokens") == static_cast<double>(got.loss_tokens),
              "counted_tokens = " + std::to_string(m.at("counted_tokens")) + ", want " +
                  std::to_string(got.loss_tokens));
        // Ranks 0 and 1, each micro-batch: the sum is the micro-batches of one rank.
        check(m.at("data_parallel_rank") == static_cast<double>(got.micro_batches),
              "data_parallel_rank sums to " + std::to_string(m.at("data_parallel_rank")));
        check(m.at("data_parallel_size") == 4.0 * static_cast<double>(got.micro_batches),
              "data_parallel_size sums to " + std::to_string(m.at("data_parallel_size")));
        check(m.at("last_stage") == 2.0 * static_cast<double>(got.micro_batches),
              "ooze.mpu is not the last stage without context parallelism");
        plain.zero_grad();
        model.zero_grad();

        // A backward that runs in Python: the step's backward must not hold the GIL.
        accumulate_gradients(plain, samples, sft);
        accumulate_gradients(model, subset(samples, share),
                             custom(sft, kLosses + "/checks.py:through_python_function"));
        const auto [python_diff, python_magnitude] =
            gradient_difference(model.sharded(), plain.sharded());
        check(python_diff <= kTolerance && python_magnitude > 1e-3,
              "through_python_function: gradients differ by " + std::to_string(python_diff));
      }));
}

// The message of what `path` does wrong on the first micro-batch, on a fresh model.
std::string call_error(const std::string& path) {
  fsdp::FsdpTransformer model(fsdp_test::make_model(false), nullptr);
  TrainStepOptions options;
  options.packing = token_budget();
  try {
    accumulate_gradients(model, first(global_batch(), 2), custom(options, path));
  } catch (const python::HookError& error) {
    return error.what();
  } catch (const std::exception& error) {
    return std::string("not a HookError: ") + error.what();
  }
  return "no error";
}

std::string load_error(const std::string& path) {
  try {
    load_python_losses(custom(TrainStepOptions{}, path));
  } catch (const python::HookError& error) {
    return error.what();
  } catch (const std::exception& error) {
    return std::string("not a HookError: ") + error.what();
  }
  return "no error";
}

TEST(PythonLossTest, EachWayALossCanBeWrongIsNamed) {
  expect_all_passed(
      ::ooze::testing::run_forked_ranks(1, [](const ::ooze::testing::RankContext& rank) {
        python::set_hook_args(nlohmann::json::object());
        const std::string bad = kLosses + "/bad_losses.py:";
        auto expect = [&](const std::string& message, const std::vector<std::string>& parts) {
          for (const std::string& part : parts) {
            rank.check(message.find(part) != std::string::npos,
                       "\"" + part + "\" is not in: " + message);
          }
        };
        const std::string flag = "--custom-loss-function-path ";
        expect(load_error(kLosses + "/missing.py:loss"),
               {flag + kLosses + "/missing.py:loss: no file"});
        expect(load_error(kLosses + "/broken_import.py:loss"),
               {"importing it raised", "broken_import.py\", line 5",
                "RuntimeError: The size of tensor a (2) must match"});
        expect(load_error(bad + "no_such_loss"), {"has no attribute 'no_such_loss'"});
        expect(load_error(bad + "not_a_function"), {"is of type int, not a function"});
        expect(load_error(bad + "two_arguments"),
               {"ooze calls it as " + bad +
                "two_arguments(args, batch, logits, "
                "sum_of_sample_mean), but it is declared (args, batch)"});

        expect(call_error(bad + "raises"),
               {flag + bad + "raises raised on a micro-batch of", "bad_losses.py\", line 19",
                "ValueError: no loss today"});
        expect(call_error(bad + "wrong_reducer_input"),
               {"sum_of_sample_mean takes one value per response token", "got shape (3,)"});
        expect(call_error(bad + "not_a_tensor"),
               {flag + bad + "not_a_tensor returned a loss of type float",
                "must be a scalar torch.Tensor"});
        expect(call_error(bad + "not_scalar"),
               {"returned a loss of shape (", "must be a scalar floating-point tensor"});
        expect(call_error(bad + "detached"), {"returned a loss without a gradient"});
        expect(call_error(bad + "loss_only"),
               {"returned a Tensor: a loss function returns (loss, metrics)"});
        expect(call_error(bad + "metrics_not_a_dict"), {"returned metrics of type list"});
        expect(call_error(bad + "metric_not_scalar"),
               {"returned metric 'per_token' of shape (", "a metric is a scalar"});
        TrainStepOptions reduced;
        reduced.custom_pg_loss_reducer_function_path = kLosses + "/reducers.py:not_a_reducer";
        expect(::ooze::testing::error_message_of<python::HookError>([&] {
                 fsdp::FsdpTransformer model(fsdp_test::make_model(false), nullptr);
                 accumulate_gradients(model, first(global_batch(), 2), reduced);
               }),
               {"--custom-pg-loss-reducer-function-path " + kLosses +
                "/reducers.py:not_a_reducer returned a float: it makes the reducer"});
        expect(call_error(bad + "logits_as_a_tensor"),
               {"ooze never materialises the logits, so they have no 'log_softmax'",
                "ooze.get_log_probs_and_entropy(logits, ...)"});
      }));
}

TEST(PythonLossTest, TheFlagsGoTogether) {
  ConfigSchema schema;
  TrainStepOptions::fields().declare(schema);
  auto error_of = [&](const std::vector<std::string>& flags) {
    try {
      load_config(schema, "", flags);
    } catch (const ConfigError& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  EXPECT_CONTAINS(error_of({"--loss-type", "custom_loss"}),
                  "--loss-type custom_loss needs --custom-loss-function-path");
  EXPECT_CONTAINS(error_of({"--custom-loss-function-path", "my_loss.py:loss"}),
                  "is used with --loss-type custom_loss only");
  const TrainStepOptions options = TrainStepOptions::fields().read(load_config(
      schema, "", {"--loss-type", "custom_loss", "--custom-loss-function-path", "my_loss.py:fn"}));
  EXPECT_EQ(options.loss_type, LossType::kCustomLoss);
  EXPECT_EQ(options.custom_loss_function_path, "my_loss.py:fn");
  // The options travel to the ranks as JSON.
  const TrainStepOptions back =
      TrainStepOptions::fields().from_json(TrainStepOptions::fields().to_json(options));
  EXPECT_EQ(back.loss_type, LossType::kCustomLoss);
  EXPECT_EQ(back.custom_loss_function_path, "my_loss.py:fn");
}

}  // namespace python_loss_test
}  // namespace ooze::trainer
