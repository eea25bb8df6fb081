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
//   - so does the built-in policy loss with --use-tis done by a Python TIS function (Slime's
//     --custom-tis-function-path) that reproduces the built-in token-level clip TIS, with the
//     built-in's per-token-mean mismatch metrics; and a TIS function that rejects tokens takes
//     them out of pg_loss and its denominators, as a direct computation of pg_loss says;
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
#include <set>
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
  std::string tis;           // the TIS function that reproduces the built-in's --use-tis
  size_t num_samples = 8;    // the first ones of the global batch
};

// A TIS function's metrics are per-token means: the built-in's extremes have no Python twin.
const std::set<std::string> kTisExtremes = {"tis_max", "tis_min",
                                            "train_rollout_logprob_abs_diff_max"};

// Token-level clip TIS with bounds that clip some of global_batch()'s tokens.
algorithms::PolicyLossOptions with_tis(algorithms::PolicyLossOptions options) {
  options.mismatch.use_tis = true;
  options.mismatch.tis_clip = 1.1;
  options.mismatch.tis_clip_low = 0.9;
  return options;
}

std::vector<LossCase> loss_cases() {
  const std::string ppo = kExamples + "/algorithms/ppo_loss.py:ppo_loss";
  const std::string cispo = kExamples + "/algorithms/cispo_loss.py:cispo_loss";
  std::vector<LossCase> cases(11);
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
  // The built-in policy loss with its --use-tis done in Python, Slime's way.
  const std::string tis = kLosses + "/tis_functions.py:token_clip_tis";
  cases[8].name = "token clip tis";
  cases[8].tis = tis;
  cases[8].builtin.policy_loss = with_tis({});
  cases[9].name = "token clip tis with kl entropy token-mean";
  cases[9].tis = tis;
  cases[9].builtin.loss_aggregation = algorithms::LossAggregation::kTokenMean;
  cases[9].builtin.policy_loss = with_tis(rich);
  cases[10].name = "token clip tis one sample per micro-batch";
  cases[10].tis = tis;
  cases[10].builtin.policy_loss = with_tis({});
  cases[10].num_samples = 5;
  for (size_t c = 0; c < cases.size(); ++c) {
    cases[c].builtin.packing = token_budget();
    if (cases[c].num_samples == 5) {
      cases[c].builtin.packing.use_dynamic_batch_size = false;
      cases[c].builtin.packing.micro_batch_size = 1;
    }
  }
  return cases;
}

// `args` of the Python losses: the built-in's flags, as a run passes them (one flat namespace).
nlohmann::json flags_of(const TrainStepOptions& options) {
  nlohmann::json flags = algorithms::PolicyLossOptions::fields().to_json(options.policy_loss);
  flags.update(
      algorithms::MismatchCorrectionOptions::fields().to_json(options.policy_loss.mismatch));
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
  options.policy_loss.mismatch.custom_tis_function_path = loss.tis;
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
      if (!loss.tis.empty() && kTisExtremes.count(name) != 0) continue;
      const auto found = got.metrics.find(name);
      check(found != got.metrics.end(), loss.name + ": the Python loss reports no " + name);
      if (found == got.metrics.end()) continue;
      check(std::abs(found->second - value) <= kTolerance * std::max(1.0, std::abs(value)),
            loss.name + ": " + name + " " + std::to_string(found->second) + ", built-in " +
                std::to_string(value));
    }
    check(want.metrics.at("pg_clipfrac") > 0, loss.name + ": nothing was clipped");
    if (!loss.tis.empty()) {
      check(want.metrics.at("tis_clipfrac") > 0, loss.name + ": TIS clipped nothing");
    }
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

// tis_functions.py's REJECT_BEYOND: reject_far_tokens rejects a token whose old and rollout
// log-probs are further apart.
constexpr double kRejectBeyond = 0.2;

// `samples` with the tokens reject_far_tokens rejects taken out of their loss masks.
std::vector<fsdp::PackingSample> without_far_tokens(std::vector<fsdp::PackingSample> samples) {
  for (fsdp::PackingSample& sample : samples) {
    const torch::Tensor far = (sample.response_values.at("old_log_probs") -
                               sample.response_values.at("rollout_log_probs"))
                                  .abs() > kRejectBeyond;
    torch::Tensor mask = sample.response_mask.defined() ? sample.response_mask.clone()
                                                        : torch::ones({sample.response_length});
    sample.response_mask = mask.masked_fill(far, 0);
  }
  return samples;
}

// pg_loss by its definition, in doubles, from the current policy's `log_probs` of each sample:
// the PPO-clip surrogate (eps_clip 0.2) summed over each sample's counted tokens, divided by
// their number and the samples' (0 for a sample with none left), or with token-mean by
// `step_tokens`.
double pg_loss_of(const std::vector<fsdp::PackingSample>& samples,
                  const std::vector<torch::Tensor>& log_probs,
                  algorithms::LossAggregation aggregation, double step_tokens) {
  double pg_loss = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    const auto value = [&](const char* name) {
      return samples[i].response_values.at(name).to(torch::kDouble);
    };
    const torch::Tensor ratio =
        torch::exp(log_probs[i].to(torch::kDouble) - value("old_log_probs"));
    const torch::Tensor advantages = value("advantages");
    const torch::Tensor surrogate =
        torch::max(-ratio * advantages, -ratio.clamp(0.8, 1.2) * advantages);
    const torch::Tensor mask = samples[i].response_mask.to(torch::kDouble);
    const double sum = (surrogate * mask).sum().item<double>();
    pg_loss +=
        aggregation == algorithms::LossAggregation::kTokenMean
            ? sum / step_tokens
            : sum / std::max(mask.sum().item<double>(), 1.0) / static_cast<double>(samples.size());
  }
  return pg_loss;
}

TEST(PythonLossTest, ATisFunctionThatRejectsTokensTakesThemOutOfPgLoss) {
  expect_all_passed(
      ::ooze::testing::run_forked_ranks(1, [](const ::ooze::testing::RankContext& rank) {
        const Check& check = rank.check;
        fsdp::FsdpTransformer plain(fsdp_test::make_model(false), nullptr);
        fsdp::FsdpTransformer model(fsdp_test::make_model(false), nullptr);
        const std::vector<fsdp::PackingSample> samples = global_batch();
        const std::vector<fsdp::PackingSample> kept = without_far_tokens(samples);
        const std::vector<torch::Tensor> log_probs =
            compute_log_probs(model, samples, token_budget()).log_probs;
        auto near = [](double a, double b) {
          return std::abs(a - b) <= kTolerance * std::max(1.0, std::abs(b));
        };
        for (const algorithms::LossAggregation aggregation :
             {algorithms::LossAggregation::kSequenceMeanTokenMean,
              algorithms::LossAggregation::kTokenMean}) {
          TrainStepOptions builtin;
          builtin.packing = token_budget();
          builtin.loss_aggregation = aggregation;
          TrainStepOptions rejecting = builtin;
          rejecting.policy_loss.mismatch.use_tis = true;
          rejecting.policy_loss.mismatch.custom_tis_function_path =
              kLosses + "/tis_functions.py:reject_far_tokens";
          python::set_hook_args(flags_of(rejecting));
          const TrainStepResult got = accumulate_gradients(model, samples, rejecting);
          const std::string name = algorithms::loss_aggregation_name(aggregation);

          // The step still counts every token of the loss masks; the rejected ones are a share
          // of them.
          const double rejected = got.metrics.at("rejected");
          check(rejected > 0.1 && rejected < 0.9, name + ": rejected " + std::to_string(rejected));
          const double want =
              pg_loss_of(kept, log_probs, aggregation, static_cast<double>(got.loss_tokens));
          check(near(got.metrics.at("pg_loss"), want),
                name + ": pg_loss " + std::to_string(got.metrics.at("pg_loss")) +
                    ", by its definition " + std::to_string(want));
          std::printf("%s: %.3f of the tokens rejected, pg_loss %.9g, by its definition %.9g\n",
                      name.c_str(), rejected, got.metrics.at("pg_loss"), want);
          if (aggregation == algorithms::LossAggregation::kSequenceMeanTokenMean) {
            // Each sample's mean is over its tokens left: the built-in loss on samples without
            // the rejected tokens, whose step has as many samples.
            const TrainStepResult masked = accumulate_gradients(plain, kept, builtin);
            const auto [diff, magnitude] = gradient_difference(model.sharded(), plain.sharded());
            check(diff <= kTolerance && magnitude > 1e-3,
                  name + ": gradients differ from the built-in's without the rejected tokens by " +
                      std::to_string(diff));
            check(near(got.metrics.at("loss"), masked.metrics.at("loss")),
                  name + ": loss " + std::to_string(got.metrics.at("loss")) + ", built-in " +
                      std::to_string(masked.metrics.at("loss")));
          }
          plain.zero_grad();
          model.zero_grad();
        }
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

// The built-in policy loss with --use-tis done by the TIS function `path`.
TrainStepOptions tis_by(const std::string& path) {
  TrainStepOptions options;
  options.packing = token_budget();
  options.policy_loss.mismatch.use_tis = true;
  options.policy_loss.mismatch.custom_tis_function_path = path;
  return options;
}

// The message of what the TIS function `path` does wrong, loading or on the first micro-batch.
std::string tis_error(const std::string& path) {
  return ::ooze::testing::error_message_of<python::HookError>([&] {
    load_python_losses(tis_by(path));
    fsdp::FsdpTransformer model(fsdp_test::make_model(false), nullptr);
    accumulate_gradients(model, first(global_batch(), 2), tis_by(path));
  });
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

        const std::string tis = kLosses + "/tis_functions.py:";
        const std::string tis_flag = "--custom-tis-function-path " + tis;
        const std::string expected =
            "a TIS function returns (pg_loss, loss_masks, metrics): the per-token pg_loss it was "
            "given, reweighted (a floating tensor of shape (7,)), one loss mask per sample";
        expect(tis_error(tis + "missing"), {tis_flag + "missing: ", "has no attribute 'missing'"});
        expect(tis_error(tis + "positional"),
               {"ooze calls it as " + tis +
                    "positional(args=..., pg_loss=..., train_log_probs=..., "
                    "rollout_log_probs=..., loss_masks=..., total_lengths=..., "
                    "response_lengths=...), but it is declared (args, pg_loss)",
                "unexpected keyword argument 'train_log_probs'"});
        expect(tis_error(tis + "raises"),
               {tis_flag + "raises raised on a micro-batch of 2 samples",
                "tis_functions.py\", line", "ValueError: no correction today"});
        expect(tis_error(tis + "two_values"),
               {tis_flag + "two_values returned 2 values: " + expected});
        expect(tis_error(tis + "not_a_tensor"),
               {tis_flag + "not_a_tensor returned a pg_loss that is a float: " + expected});
        expect(tis_error(tis + "wrong_shape"),
               {"returned a pg_loss that is a tensor of shape (6,) and dtype torch.float32: " +
                expected});
        expect(tis_error(tis + "detached"), {"returned a pg_loss without a gradient"});
        expect(tis_error(tis + "short_mask"),
               {"returned loss_masks[0] that is a tensor of shape (1,) and dtype torch.float32; "
                "sample 0 has 2 response tokens"});
        expect(tis_error(tis + "scalar_metric"),
               {"returned metric 'mean_weight' that is a tensor of shape ()",
                "a TIS metric holds one value per response token of the micro-batch (shape (7,))"});
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

  // A TIS function replaces the built-in --use-tis, and needs it.
  ConfigSchema policy;
  algorithms::PolicyLossOptions::fields().declare(policy);
  EXPECT_CONTAINS(::ooze::testing::error_message_of<ConfigError>([&] {
                    load_config(policy, "", {"--custom-tis-function-path", "tis.py:fn"});
                  }),
                  "--custom-tis-function-path tis.py:fn replaces the built-in TIS: it is used "
                  "with --use-tis only");
  const algorithms::PolicyLossOptions with_tis = algorithms::PolicyLossOptions::fields().read(
      load_config(policy, "", {"--use-tis", "--custom-tis-function-path", "tis.py:fn"}));
  EXPECT_EQ(with_tis.mismatch.custom_tis_function_path, "tis.py:fn");
}

}  // namespace python_loss_test
}  // namespace ooze::trainer
