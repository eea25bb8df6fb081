// FSDP across real processes (tests/fsdp/fsdp_worker.cpp) on loopback with Gloo: W = 2 and
// W = 4, each rank training on its slice of the same global batches, against the plain model
// trained on the whole batches here with torch::optim::AdamW (which W = 1 equals bit for bit,
// fully_shard_test.cpp). Also: every initialisation path, the memory each rank holds, and zero
// padding in shards that have some.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "fsdp/fsdp_transformer.h"
#include "fsdp/sharded_adamw.h"
#include "tests/fsdp/worker_launcher.h"
#include "tests/support/process.h"
#include "tests/support/training_fixture.h"

namespace multi_rank_test {

using namespace ooze::fsdp_test;
using std::chrono::milliseconds;

// Every config clips (0.5 is below the tiny model's early gradient norms, so it acts).
const double kClip = 0.5;
// The fp32 bar: after 5 steps, every parameter within this of W = 1; every loss within this
// relative to its value (a loss near 5.5 is only resolved to 4.8e-7 in fp32, and the per-token
// log-probs of a sequence may round differently by an ulp when the batch is split).
const double kTolerance = 3e-8;
// Slime's usual RL learning rate. AdamW moves an element whose gradient g is near eps in size
// by lr * g / (|g| + eps): a rounding-level change of g (W ranks sum the tokens in another
// order than one rank) changes that step by up to ~0.5% of lr, whatever the implementation.
// At 1e-6 that is ~5e-9 per step, inside the bar; at 1e-3 it would be ~5e-6.
const double kLr = 1e-6;

struct Outcome {
  std::map<std::string, torch::Tensor> params;
  std::map<std::string, std::string> metadata;
  std::vector<double> series(const std::string& prefix) const {
    std::vector<double> values;
    for (int i = 0; metadata.count(prefix + std::to_string(i)); ++i) {
      values.push_back(std::stod(metadata.at(prefix + std::to_string(i))));
    }
    return values;
  }
};

// Starts W workers over `configs`, waits for all, returns each config's outcome by name.
std::map<std::string, Outcome> run_workers(int world, const std::vector<std::string>& configs,
                                           const std::string& dir) {
  launch_workers_expecting_success(world, configs, dir, milliseconds(240000));
  std::map<std::string, Outcome> outcomes;
  for (const std::string& config : configs) {
    const std::string name = config.substr(5, config.find(',') - 5);  // "name=X,..."
    const std::string path = dir + "/" + name + ".safetensors";
    if (!std::ifstream(path).good()) continue;  // the failure is reported above
    const ooze::SafetensorsFile file = ooze::SafetensorsFile::open(path);
    Outcome& outcome = outcomes[name];
    for (const std::string& tensor : file.names())
      outcome.params[tensor] = file.tensor(tensor).clone();
    outcome.metadata = file.metadata();
  }
  return outcomes;
}

double max_difference(const std::map<std::string, torch::Tensor>& got,
                      const torch::nn::Module& want) {
  double worst = 0.0;
  EXPECT_EQ(got.size(), want.named_parameters().size());
  for (const auto& item : want.named_parameters()) {
    if (!got.count(item.key())) {
      ADD_FAILURE() << "missing parameter " << item.key();
      continue;
    }
    const torch::Tensor diff =
        got.at(item.key()).to(torch::kDouble) - item.value().detach().to(torch::kDouble);
    worst = std::max(worst, diff.abs().max().item<double>());
  }
  return worst;
}

struct Reference {
  ooze::models::TransformerModel model{nullptr};
  TrainRecord record;
};

// The plain model trained on the whole global batches.
const Reference& plain_reference(bool tied) {
  static std::map<bool, Reference> cache;
  auto it = cache.find(tied);
  if (it != cache.end()) return it->second;
  Reference reference;
  reference.model = make_model(tied);
  TrainSettings settings;
  settings.clip_grad = kClip;
  settings.lr = kLr;
  reference.record = train_plain(reference.model, settings);
  return cache.emplace(tied, std::move(reference)).first->second;
}

void expect_matches_plain(const std::map<std::string, Outcome>& outcomes, const std::string& name,
                          bool tied, int world) {
  SCOPED_TRACE("config " + name + ", W = " + std::to_string(world));
  ASSERT_TRUE(outcomes.count(name));
  const Outcome& outcome = outcomes.at(name);
  const Reference& reference = plain_reference(tied);
  const double diff = max_difference(outcome.params, *reference.model);
  std::printf("W=%d %-20s max |param - plain| = %.3g\n", world, name.c_str(), diff);
  EXPECT_LE(diff, kTolerance);
  const std::vector<double> losses = outcome.series("loss_"), norms = outcome.series("grad_norm_");
  ASSERT_EQ(losses.size(), reference.record.losses.size());
  ASSERT_EQ(norms.size(), reference.record.grad_norms.size());
  for (size_t i = 0; i < losses.size(); ++i) {
    EXPECT_NEAR(losses[i], reference.record.losses[i], kTolerance * reference.record.losses[i])
        << "loss of step " << i;
    // The clipping norm: from the shards with one all-reduce, vs the full gradients here.
    EXPECT_NEAR(norms[i], reference.record.grad_norms[i], 1e-6 * reference.record.grad_norms[i])
        << "gradient norm of step " << i;
  }
  EXPECT_GT(reference.record.grad_norms[0], kClip) << "clipping was not exercised";
  // The weights moved far more than the tolerance, so the comparison means something.
  EXPECT_GT(max_difference(outcome.params, *make_model(tied)), 100 * kTolerance);
}

void expect_toy_matches_plain(const std::map<std::string, Outcome>& outcomes, int world) {
  SCOPED_TRACE("toy, W = " + std::to_string(world));
  ASSERT_TRUE(outcomes.count("toy"));
  const Outcome& outcome = outcomes.at("toy");
  ToyNet net(kInitSeed);
  TrainSettings settings;
  settings.lr = kLr;
  const std::vector<double> want = train_toy_plain(net, settings);
  const double diff = max_difference(outcome.params, *net);
  std::printf("W=%d %-20s max |param - plain| = %.3g\n", world, "toy", diff);
  EXPECT_LE(diff, kTolerance);
  const std::vector<double> losses = outcome.series("loss_");
  ASSERT_EQ(losses.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(losses[i], want[i], kTolerance * want[i]) << i;
  EXPECT_GT(max_difference(outcome.params, *ToyNet(kInitSeed)), 100 * kTolerance);
  // The toy's units have padding at this W, so the workers' zero-padding checks had work to do.
  int64_t padding = 0;
  for (const auto& [key, value] : outcome.metadata) {
    if (key.rfind("padding_", 0) == 0) padding += std::stoll(value);
  }
  EXPECT_GT(padding, 0);
}

// Parameters + gradients + AdamW state held by each rank, from the tensors the worker found
// allocated, against the unsharded total of plain fp32 training (4 x 4 bytes per parameter).
void expect_memory_divided_by_w(const Outcome& outcome, int world) {
  const double unsharded = 16.0 * static_cast<double>(tiny_config(false).num_parameters());
  for (int r = 0; r < world; ++r) {
    const double held = std::stod(outcome.metadata.at("bytes_rank" + std::to_string(r)));
    const double ratio = unsharded / held;
    std::printf("W=%d rank %d holds %.0f of %.0f bytes: %.4fx less\n", world, r, held, unsharded,
                ratio);
    EXPECT_LE(ratio, world + 1e-9);
    EXPECT_GE(ratio, 0.995 * world);
  }
}

void write_init_checkpoint(const std::string& dir) {
  auto model = make_model(false);
  ooze::NamedTensors tensors;
  for (const auto& item : model->named_parameters())
    tensors.emplace_back(item.key(), item.value().detach());
  ooze::save_sharded_safetensors(dir + "/init_checkpoint", tensors, /*max_shard_bytes=*/200000);
}

std::vector<std::string> configs() {
  const std::string clip = ",clip=" + std::to_string(kClip) + ",lr=" + std::to_string(kLr);
  return {"name=untied" + clip,
          "name=untied_noreshard,reshard=0,prefetch=0" + clip,
          "name=untied_accum_ckpt,micro=2,ckpt=1" + clip,
          "name=tied,model=tied" + clip,
          "name=broadcast,init=broadcast" + clip,
          "name=safetensors,init=safetensors" + clip,
          "name=toy,model=toy,lr=" + std::to_string(kLr),
          "name=bf16,bf16=1,steps=3"};
}

void run_and_check(int world) {
  at::set_num_threads(1);
  const std::string dir = ooze::testing::make_temp_dir("fsdp-w" + std::to_string(world));
  write_init_checkpoint(dir);
  const auto outcomes = run_workers(world, configs(), dir);
  for (const char* name :
       {"untied", "untied_noreshard", "untied_accum_ckpt", "broadcast", "safetensors"}) {
    expect_matches_plain(outcomes, name, /*tied=*/false, world);
  }
  expect_matches_plain(outcomes, "tied", /*tied=*/true, world);
  expect_toy_matches_plain(outcomes, world);
  if (outcomes.count("untied")) expect_memory_divided_by_w(outcomes.at("untied"), world);

  // bf16 compute: the same training at W = 1 (in this process), to bf16 accuracy.
  ASSERT_TRUE(outcomes.count("bf16"));
  ooze::fsdp::FsdpTransformerOptions options;
  options.shard.mixed_precision.param_dtype = torch::kBFloat16;
  ooze::fsdp::FsdpTransformer single(make_model(false), nullptr, options);
  ooze::fsdp::ShardedAdamWOptions adam;
  adam.weight_decay = TrainSettings{}.weight_decay;
  ooze::fsdp::ShardedAdamW optimizer(single.sharded(), adam);
  TrainSettings settings;
  settings.steps = 3;
  const TrainRecord want = train_fsdp(single, optimizer, settings);
  const std::vector<double> losses = outcomes.at("bf16").series("loss_");
  const std::vector<double> norms = outcomes.at("bf16").series("grad_norm_");
  ASSERT_EQ(losses.size(), want.losses.size());
  ASSERT_EQ(norms.size(), want.grad_norms.size());
  for (size_t i = 0; i < losses.size(); ++i) {
    std::printf("W=%d bf16 step %zu: loss %.6f vs %.6f, grad norm %.6f vs %.6f\n", world, i,
                losses[i], want.losses[i], norms[i], want.grad_norms[i]);
    EXPECT_NEAR(losses[i], want.losses[i], 1e-2) << i;
    EXPECT_NEAR(norms[i], want.grad_norms[i], 2e-2 * want.grad_norms[i]) << i;
  }
  // The module's own bf16 parameters are released between steps: compare the fp32 masters.
  const auto masters = gather_full_parameters(single.sharded());
  double diff = 0.0;
  for (const auto& [name, tensor] : masters) {
    diff =
        std::max(diff, (outcomes.at("bf16").params.at(name) - tensor).abs().max().item<double>());
  }
  std::printf("W=%d %-20s max |param - W=1 bf16| = %.3g\n", world, "bf16", diff);
  // AdamW moves an element by at most ~lr per step, so this only bounds gross errors; the loss
  // and gradient-norm checks above are the accuracy checks.
  EXPECT_LT(diff, 2 * settings.lr * settings.steps);
}

TEST(FsdpMultiRank, TwoRanksTrainAsOne) { run_and_check(2); }

// The check is the workers' (fsdp_worker.cpp, mode=backward_memory).
TEST(FsdpMultiRank, BackwardHoldsAFewLayersGradientsNotTheWholeModels) {
  launch_workers_expecting_success(2, {"name=memory,mode=backward_memory"},
                                   ooze::testing::make_temp_dir("fsdp-backward-memory"));
}

TEST(FsdpMultiRank, FourRanksTrainAsOne) { run_and_check(4); }

}  // namespace multi_rank_test
