// FSDP on one rank, in this process: W = 1 must be the plain model (bit for bit), the unit
// bookkeeping must refuse bad unit lists, gathered memory must come and go, and the memory held
// must be exactly that of plain training. Multi-rank behaviour: multi_rank_test.cpp.
#include "fsdp/fully_shard.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/safetensors.h"
#include "fsdp/fsdp_transformer.h"
#include "fsdp/sharded_adamw.h"
#include "fsdp/sharded_loading.h"
#include "fsdp/storage.h"
#include "tests/support/process.h"
#include "tests/support/training_fixture.h"

namespace fully_shard_test {

using ooze::fsdp::FlatParam;
using ooze::fsdp::FsdpTransformer;
using ooze::fsdp::FsdpTransformerOptions;
using ooze::fsdp::FullyShardedModule;
using ooze::fsdp::FullyShardOptions;
using ooze::fsdp::ShardedAdamW;
using ooze::fsdp::ShardedAdamWOptions;
using namespace ooze::fsdp_test;

class FsdpSingleRank : public ::testing::Test {
 protected:
  void SetUp() override { at::set_num_threads(1); }
};

double max_abs_difference(ooze::models::TransformerModel& a, ooze::models::TransformerModel& b) {
  const auto pa = a->named_parameters(), pb = b->named_parameters();
  EXPECT_EQ(pa.size(), pb.size());
  double worst = 0.0;
  for (const auto& item : pa) {
    const torch::Tensor x = item.value().detach().to(torch::kDouble);
    const torch::Tensor y = pb[item.key()].detach().to(torch::kDouble);
    worst = std::max(worst, (x - y).abs().max().item<double>());
  }
  return worst;
}

ShardedAdamWOptions adam_options(const TrainSettings& settings) {
  ShardedAdamWOptions options;
  options.weight_decay = settings.weight_decay;  // betas and eps: torch's defaults
  return options;
}

void expect_w1_equals_plain(bool tied, const TrainSettings& settings,
                            const FsdpTransformerOptions& options) {
  auto plain = make_model(tied);
  plain->set_activation_checkpointing(options.activation_checkpointing);
  const TrainRecord want = train_plain(plain, settings);

  FsdpTransformer fsdp(make_model(tied), nullptr, options);
  ShardedAdamW optimizer(fsdp.sharded(), adam_options(settings));
  const TrainRecord got = train_fsdp(fsdp, optimizer, settings);

  ASSERT_EQ(got.losses.size(), want.losses.size());
  // The reported losses agree to double rounding: the reference sums its tokens' losses and
  // divides once, the step sums each token's loss already divided by the count
  // (algorithms/loss_aggregation.h), so the last bits of the two sums may differ.
  for (size_t i = 0; i < want.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], want.losses[i], 1e-12) << "loss of step " << i;
  }
  // W = 1, fp32: the module's parameters are the master shards themselves.
  EXPECT_EQ(max_abs_difference(fsdp.model(), plain), 0.0);
  // Training moved the weights (the comparison is not vacuous).
  auto initial = make_model(tied);
  EXPECT_GT(max_abs_difference(initial, plain), 1e-4);
}

TEST_F(FsdpSingleRank, W1EqualsPlainTrainingBitForBitUntied) {
  expect_w1_equals_plain(/*tied=*/false, TrainSettings{}, FsdpTransformerOptions{});
}

TEST_F(FsdpSingleRank, W1EqualsPlainTrainingBitForBitTied) {
  expect_w1_equals_plain(/*tied=*/true, TrainSettings{}, FsdpTransformerOptions{});
}

TEST_F(FsdpSingleRank, W1EqualsPlainWithGradientAccumulation) {
  TrainSettings settings;
  settings.micro_batches = 4;
  expect_w1_equals_plain(/*tied=*/false, settings, FsdpTransformerOptions{});
}

TEST_F(FsdpSingleRank, W1EqualsPlainWithActivationCheckpointingAndNoReshard) {
  FsdpTransformerOptions options;
  options.activation_checkpointing = true;
  options.shard.reshard_after_forward = false;
  options.shard.prefetch = false;
  TrainSettings settings;
  settings.steps = 3;
  expect_w1_equals_plain(/*tied=*/false, settings, options);
}

TEST_F(FsdpSingleRank, Bf16ComputeKeepsFp32MastersAndTracksFp32Training) {
  TrainSettings settings;
  settings.steps = 3;
  auto plain = make_model(false);
  const TrainRecord want = train_plain(plain, settings);

  FsdpTransformerOptions options;
  options.shard.mixed_precision.param_dtype = torch::kBFloat16;
  FsdpTransformer fsdp(make_model(false), nullptr, options);
  ShardedAdamW optimizer(fsdp.sharded(), adam_options(settings));
  const TrainRecord got = train_fsdp(fsdp, optimizer, settings);
  for (size_t i = 0; i < want.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], want.losses[i], 2e-2) << "step " << i;
  }
  for (size_t u = 0; u < fsdp.sharded().num_units(); ++u) {
    FlatParam& flat = fsdp.sharded().unit(u);
    EXPECT_EQ(flat.master_shard().scalar_type(), torch::kFloat);
    EXPECT_EQ(flat.grad_shard().scalar_type(), torch::kFloat);
    EXPECT_EQ(flat.unsharded_buffer().scalar_type(), torch::kBFloat16);
    EXPECT_FALSE(ooze::fsdp::storage_is_allocated(flat.unsharded_buffer())) << flat.name();
  }
  EXPECT_EQ(fsdp.model()->dtype(), torch::kBFloat16);
  // The masters moved like fp32 training's weights, to bf16-compute accuracy. Adam moves a
  // weight by about lr a step whatever its gradient's size, so where bf16 flips the sign of a
  // near-zero gradient two runs may part by up to 2 lr a step: bound the worst weight by that
  // and require the typical one to track closely.
  const auto full = gather_full_parameters(fsdp.sharded());
  for (const auto& item : plain->named_parameters()) {
    const torch::Tensor diff = (full.at(item.key()) - item.value().detach()).abs();
    EXPECT_LE(diff.max().item<double>(), 2 * settings.steps * settings.lr * 1.01) << item.key();
    EXPECT_LT(diff.mean().item<double>(), 2e-4) << item.key();
  }
}

// Micro-batches may all run forward before their backwards (the root must stay gathered until
// the last backward), and sleep()/wake_up() are no-ops on the CPU.
TEST_F(FsdpSingleRank, ForwardsOfSeveralMicroBatchesBeforeTheirBackwards) {
  const auto sequences = global_sequences(0, 256);
  const PackedBatch first = pack(sequences, 0, 4), second = pack(sequences, 4, 4);
  auto plain = make_model(false);
  torch::optim::AdamW plain_adamw(plain->parameters(), torch::optim::AdamWOptions(1e-3));
  {
    BatchLoss a = batch_loss(plain->forward(first.input_ids, first.position_ids, first.cu_seqlens),
                             plain->lm_head_weight(), first);
    BatchLoss b =
        batch_loss(plain->forward(second.input_ids, second.position_ids, second.cu_seqlens),
                   plain->lm_head_weight(), second);
    (a.mean / 2).backward();
    (b.mean / 2).backward();
    plain_adamw.step();
  }

  FsdpTransformerOptions options;
  options.shard.mixed_precision.param_dtype = torch::kBFloat16;  // W = 1 then really gathers
  FsdpTransformer fsdp(make_model(false), nullptr, options);
  FsdpTransformer fsdp32(make_model(false), nullptr, {});
  ShardedAdamWOptions adam;
  adam.weight_decay = 0.01;  // torch::optim::AdamW's default
  ShardedAdamW optimizer(fsdp32.sharded(), adam);
  for (FsdpTransformer* model : {&fsdp, &fsdp32}) {
    model->sleep();
    model->wake_up();
    // forward() before lm_head_weight(): the head is gathered by the forward.
    torch::Tensor hidden_a = model->forward(first.input_ids, first.position_ids, first.cu_seqlens);
    BatchLoss a = batch_loss(hidden_a, model->lm_head_weight(), first);
    torch::Tensor hidden_b =
        model->forward(second.input_ids, second.position_ids, second.cu_seqlens);
    BatchLoss b = batch_loss(hidden_b, model->lm_head_weight(), second);
    model->backward(a.mean / 2);
    EXPECT_TRUE(model->sharded().unit(*model->sharded().root_unit()).is_unsharded());
    model->backward(b.mean / 2);
    for (size_t u = 0; u < model->sharded().num_units(); ++u) {
      EXPECT_TRUE(model->sharded().unit(u).has_grad());
      if (model == &fsdp) {
        EXPECT_FALSE(ooze::fsdp::storage_is_allocated(model->sharded().unit(u).unsharded_buffer()));
      }
    }
  }
  optimizer.sleep();
  optimizer.wake_up();
  optimizer.step(1e-3);
  EXPECT_EQ(max_abs_difference(fsdp32.model(), plain), 0.0);
}

TEST_F(FsdpSingleRank, GatheredMemoryComesAndGoes) {
  FsdpTransformerOptions options;
  options.shard.mixed_precision.param_dtype = torch::kBFloat16;  // W = 1 then gathers (casts)
  FsdpTransformer fsdp(make_model(false), nullptr, options);
  FullyShardedModule& sharded = fsdp.sharded();
  const size_t root = *sharded.root_unit();
  for (size_t u = 0; u < sharded.num_units(); ++u) {
    EXPECT_FALSE(ooze::fsdp::storage_is_allocated(sharded.unit(u).unsharded_buffer()));
  }
  const auto sequences = global_sequences(0, 256);
  const PackedBatch batch = pack(sequences, 0, 2);
  torch::Tensor hidden = fsdp.forward(batch.input_ids, batch.position_ids, batch.cu_seqlens);
  // After forward only the root (used by the loss) is gathered; layers and embeddings were
  // freed, and the module's parameters kept their shapes.
  for (size_t u = 0; u < sharded.num_units(); ++u) {
    EXPECT_EQ(ooze::fsdp::storage_is_allocated(sharded.unit(u).unsharded_buffer()), u == root)
        << sharded.unit(u).name();
  }
  EXPECT_EQ(fsdp.model()->layers()[0]->mlp->parameters()[0].sizes(), torch::IntArrayRef({128, 64}));
  BatchLoss loss = batch_loss(hidden, fsdp.lm_head_weight(), batch);
  fsdp.backward(loss.mean);
  for (size_t u = 0; u < sharded.num_units(); ++u) {
    FlatParam& flat = sharded.unit(u);
    EXPECT_FALSE(ooze::fsdp::storage_is_allocated(flat.unsharded_buffer())) << flat.name();
    EXPECT_TRUE(flat.has_grad()) << flat.name();
    EXPECT_GT(flat.grad_shard().abs().sum().item<double>(), 0.0) << flat.name();
    for (const auto& entry : flat.entries()) EXPECT_FALSE(entry.parameter.grad().defined());
  }
}

TEST_F(FsdpSingleRank, ScoringWithoutGradMatchesThePlainForward) {
  auto plain = make_model(true);
  FsdpTransformer fsdp(make_model(true), nullptr, {});
  const auto sequences = global_sequences(3, 256);
  const PackedBatch batch = pack(sequences, 0, 3);
  torch::NoGradGuard no_grad;
  const torch::Tensor want =
      plain->logits(plain->forward(batch.input_ids, batch.position_ids, batch.cu_seqlens));
  const torch::Tensor got =
      torch::matmul(fsdp.forward(batch.input_ids, batch.position_ids, batch.cu_seqlens),
                    fsdp.lm_head_weight().t());
  EXPECT_TRUE(torch::equal(got, want));
  fsdp.reshard();
}

TEST_F(FsdpSingleRank, MemoryAtW1IsThatOfPlainTraining) {
  FsdpTransformer fsdp(make_model(false), nullptr, {});
  ShardedAdamW optimizer(fsdp.sharded(), {});
  TrainSettings settings;
  settings.steps = 1;
  train_fsdp(fsdp, optimizer, settings);

  // Every distinct storage reachable from the model, the shards and the optimizer.
  std::set<const c10::StorageImpl*> seen;
  size_t bytes = 0;
  const auto count = [&](const torch::Tensor& t) {
    if (t.defined() && seen.insert(t.storage().unsafeGetStorageImpl()).second) {
      bytes += ooze::fsdp::storage_bytes(t);
    }
  };
  for (const auto& p : fsdp.model()->parameters()) {
    count(p);
    if (p.grad().defined()) count(p.grad());
  }
  FullyShardedModule& sharded = fsdp.sharded();
  for (size_t u = 0; u < sharded.num_units(); ++u) {
    count(sharded.unit(u).master_shard());
    count(sharded.unit(u).grad_shard());
    count(sharded.unit(u).unsharded_buffer());
    count(optimizer.exp_avg(u));
    count(optimizer.exp_avg_sq(u));
  }
  const int64_t numel = tiny_config(false).num_parameters();
  // Parameters (the masters themselves), gradients, two AdamW moments: 4 x fp32.
  EXPECT_EQ(bytes, static_cast<size_t>(numel) * 4 * 4);
  EXPECT_EQ(sharded.allocated_bytes() + optimizer.state_bytes(), bytes);
}

TEST_F(FsdpSingleRank, UnitListsThatDoNotPartitionTheModelAreRefused) {
  auto model = make_model(false);
  try {
    FullyShardedModule bad(*model, {"model.layer.0"}, nullptr, {});
    FAIL() << "a prefix that matches nothing was accepted";
  } catch (const ooze::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'model.layer.0' matches no parameter"), std::string::npos)
        << e.what();
  }
  auto model2 = make_model(false);
  try {
    FullyShardedModule bad(*model2, {"model.layers", "model.layers.1"}, nullptr, {});
    FAIL() << "nested units were accepted";
  } catch (const ooze::Error& e) {
    EXPECT_NE(std::string(e.what()).find("belongs to two units"), std::string::npos) << e.what();
  }
  torch::nn::Module empty;
  EXPECT_THROW(FullyShardedModule(empty, {}, nullptr, {}), ooze::Error);
  // Prefixes match whole name components: "model.layers.1" does not claim "model.layers.10".
  auto model3 = make_model(false);
  FullyShardedModule ok(*model3, {"model.layers.1"}, nullptr, {});
  EXPECT_EQ(ok.num_units(), 2u);
  EXPECT_EQ(ok.unit(ok.unit_index("model.layers.1")).entries().size(), 11u);
  // Every parameter is in exactly one unit.
  std::set<std::string> names;
  for (size_t u = 0; u < ok.num_units(); ++u) {
    for (const auto& entry : ok.unit(u).entries()) EXPECT_TRUE(names.insert(entry.name).second);
  }
  EXPECT_EQ(names.size(), model3->named_parameters().size());
}

TEST_F(FsdpSingleRank, LoadsItsRangesFromSafetensors) {
  const std::string dir = ooze::testing::make_temp_dir("fsdp_load");
  auto source = make_model(false, /*seed=*/777);
  ooze::NamedTensors tensors;
  for (const auto& item : source->named_parameters()) {
    tensors.emplace_back(item.key(), item.value().detach().to(torch::kBFloat16).to(torch::kFloat));
  }
  ooze::save_sharded_safetensors(dir, tensors, /*max_shard_bytes=*/100000);

  FsdpTransformer fsdp(make_model(false, /*seed=*/1), nullptr, {});
  ooze::fsdp::load_sharded_safetensors(fsdp.sharded(), dir);
  for (const auto& [name, tensor] : tensors) {
    EXPECT_TRUE(torch::equal(fsdp.model()->named_parameters()[name].detach(), tensor)) << name;
  }

  // A checkpoint lacking a parameter is refused with its name, before anything is copied.
  ooze::NamedTensors partial(tensors.begin() + 1, tensors.end());
  const std::string partial_dir = ooze::testing::make_temp_dir("fsdp_load_partial");
  ooze::save_sharded_safetensors(partial_dir, partial, 1u << 30);
  try {
    ooze::fsdp::load_sharded_safetensors(fsdp.sharded(), partial_dir);
    FAIL() << "a checkpoint without '" << tensors.front().first << "' was accepted";
  } catch (const ooze::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("missing '" + tensors.front().first + "'"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace fully_shard_test
