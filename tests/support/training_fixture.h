// What the fsdp tests and their worker processes share: a tiny Qwen3-shaped model, the global
// batches every rank slices from one seed, a plain (unsharded) reference trainer written with
// torch::optim::AdamW and its own loss, and the FSDP side driven through trainer::train_step, the
// step every TrainActor runs. Header-only so the worker and the tests build the same data
// without a library of their own.
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "fsdp/fsdp_transformer.h"
#include "fsdp/fully_shard.h"
#include "fsdp/optimizer_step.h"
#include "fsdp/packing.h"
#include "fsdp/sharded_adamw.h"
#include "models/log_probs.h"
#include "models/model_config.h"
#include "models/transformer.h"
#include "trainer/train_step.h"

namespace ooze::fsdp_test {

constexpr uint64_t kInitSeed = 1234;
constexpr uint64_t kDataSeed = 99;
constexpr int kGlobalSequences = 8;  // divisible by W * micro-batches for W in {1, 2, 4}
constexpr int kSequenceLength = 10;

// Qwen3-shaped: hidden 64, 2 layers, vocab 256.
inline models::ModelConfig tiny_config(bool tied) {
  const nlohmann::json json = {{"model_type", "qwen3"},
                               {"vocab_size", 256},
                               {"hidden_size", 64},
                               {"intermediate_size", 128},
                               {"num_hidden_layers", 2},
                               {"num_attention_heads", 4},
                               {"num_key_value_heads", 2},
                               {"head_dim", 16},
                               {"rms_norm_eps", 1e-6},
                               {"rope_theta", 10000.0},
                               {"max_position_embeddings", 128},
                               {"tie_word_embeddings", tied},
                               {"torch_dtype", "float32"}};
  return models::ModelConfig::from_json(json, "tiny-qwen3");
}

inline models::TransformerModel make_model(bool tied, uint64_t seed = kInitSeed) {
  models::TransformerModel model(tiny_config(tied));
  model->init_weights(seed);
  return model;
}

// The global batch of optimizer step `step`: kGlobalSequences token sequences of
// kSequenceLength, the same on every rank.
inline std::vector<std::vector<int64_t>> global_sequences(int step, int64_t vocab) {
  torch::Tensor tokens = torch::randint(
      vocab, {kGlobalSequences, kSequenceLength},
      at::detail::createCPUGenerator(kDataSeed * 1000 + static_cast<uint64_t>(step)), torch::kLong);
  std::vector<std::vector<int64_t>> sequences(kGlobalSequences);
  for (int s = 0; s < kGlobalSequences; ++s) {
    for (int t = 0; t < kSequenceLength; ++t) sequences[s].push_back(tokens[s][t].item<int64_t>());
  }
  return sequences;
}

// Sequences [first, first + count) as language-modelling samples (trained on every token after
// their first).
inline std::vector<fsdp::PackingSample> samples_of(
    const std::vector<std::vector<int64_t>>& sequences, int first, int count) {
  std::vector<fsdp::PackingSample> samples;
  for (int s = first; s < first + count; ++s) {
    samples.push_back(trainer::language_modeling_sample(sequences[static_cast<size_t>(s)]));
  }
  return samples;
}

// Those sequences packed by fsdp/packing.h, seen as the plain reference sees them: input ids,
// restarting positions, cu_seqlens, and at position t the next token as target with a mask
// saying whether the packer counts that token.
struct PackedBatch {
  torch::Tensor input_ids, position_ids, cu_seqlens, targets, mask;
};

inline PackedBatch pack(const std::vector<std::vector<int64_t>>& sequences, int first, int count) {
  std::vector<int64_t> all(static_cast<size_t>(count));
  std::iota(all.begin(), all.end(), int64_t{0});
  const fsdp::PackedMicroBatch packed =
      fsdp::pack_micro_batch(samples_of(sequences, first, count), all);
  return {packed.tokens, packed.position_ids, packed.cu_seqlens, torch::roll(packed.tokens, -1),
          torch::roll(packed.loss_mask, -1)};
}

// Mean negative log-likelihood over the batch's targets (the training loss), and the sum of
// the per-token losses in double (for logging across ranks).
struct BatchLoss {
  torch::Tensor mean;
  double sum = 0.0;
  double count = 0.0;
};

inline BatchLoss batch_loss(const torch::Tensor& hidden, const torch::Tensor& head_weight,
                            const PackedBatch& batch) {
  const models::TokenLogProbs out =
      models::compute_token_log_probs(hidden, head_weight, batch.targets);
  const torch::Tensor nll = -(out.log_probs.to(torch::kFloat) * batch.mask);
  BatchLoss loss;
  loss.count = batch.mask.sum().item<double>();
  loss.mean = nll.sum() / loss.count;
  loss.sum = nll.detach().to(torch::kDouble).sum().item<double>();
  return loss;
}

struct TrainSettings {
  int steps = 5;
  double lr = 1e-3;
  double weight_decay = 0.01;
  double clip_grad = 0.0;  // <= 0: no clipping
  int micro_batches = 1;   // per rank
  // train_fsdp only: the first step trains on global batch `first_step` and takes the learning
  // rate of that position (a run resumed from a checkpoint continues where it stopped).
  int first_step = 0;
  // train_fsdp only: when set, the learning rate of the step taken after `completed` earlier
  // steps (fsdp::LrSchedule::lr_at); otherwise `lr`.
  std::function<double(int64_t completed)> lr_at;
};

struct TrainRecord {
  std::vector<double> losses;      // mean over the global batch, per step
  std::vector<double> grad_norms;  // global norm before clipping, per step
};

// The plain model trained on the whole global batch (split into settings.micro_batches
// micro-batches whose gradients accumulate in .grad) with torch::optim::AdamW, clipping with a
// norm computed here over every full gradient in double precision.
inline TrainRecord train_plain(models::TransformerModel& model, const TrainSettings& settings) {
  torch::optim::AdamW optimizer(
      model->parameters(),
      torch::optim::AdamWOptions(settings.lr).weight_decay(settings.weight_decay));
  const int per_micro = kGlobalSequences / settings.micro_batches;
  TrainRecord record;
  for (int step = 0; step < settings.steps; ++step) {
    optimizer.zero_grad();
    const auto sequences = global_sequences(step, model->config().vocab_size);
    double loss_sum = 0.0, loss_count = 0.0;
    for (int k = 0; k < settings.micro_batches; ++k) {
      const PackedBatch batch = pack(sequences, k * per_micro, per_micro);
      torch::Tensor hidden = model->forward(batch.input_ids, batch.position_ids, batch.cu_seqlens);
      BatchLoss loss = batch_loss(hidden, model->lm_head_weight(), batch);
      if (settings.micro_batches > 1) loss.mean = loss.mean / settings.micro_batches;
      loss.mean.backward();
      loss_sum += loss.sum;
      loss_count += loss.count;
    }
    double squares = 0.0;
    for (const torch::Tensor& p : model->parameters()) {
      const torch::Tensor g = p.grad().to(torch::kDouble).contiguous();
      const double* data = g.data_ptr<double>();
      for (int64_t i = 0; i < g.numel(); ++i) squares += data[i] * data[i];
    }
    const double norm = std::sqrt(squares);
    if (settings.clip_grad > 0 && settings.clip_grad / (norm + 1e-6) < 1.0) {
      torch::NoGradGuard no_grad;
      for (const torch::Tensor& p : model->parameters()) {
        p.grad().mul_(settings.clip_grad / (norm + 1e-6));
      }
    }
    optimizer.step();
    record.losses.push_back(loss_sum / loss_count);
    record.grad_norms.push_back(norm);
  }
  return record;
}

// The same loop through trainer::train_step: rank r trains on its contiguous slice of every global
// batch, in settings.micro_batches micro-batches, on the mean over every rank's predicted tokens.
inline TrainRecord train_fsdp(fsdp::FsdpTransformer& model, fsdp::ShardedAdamW& optimizer,
                              const TrainSettings& settings) {
  fsdp::FullyShardedModule& sharded = model.sharded();
  const int rank = sharded.rank(), world = sharded.world_size();
  const int per_rank = kGlobalSequences / world;
  trainer::TrainStepOptions options;
  options.packing.micro_batch_size = per_rank / settings.micro_batches;
  options.loss_aggregation = algorithms::LossAggregation::kTokenMean;
  options.loss_type = trainer::LossType::kSftLoss;
  options.clip_grad = settings.clip_grad;
  TrainRecord record;
  for (int step = settings.first_step; step < settings.first_step + settings.steps; ++step) {
    const auto sequences = global_sequences(step, model.model()->config().vocab_size);
    const double lr = settings.lr_at ? settings.lr_at(step) : settings.lr;
    const trainer::TrainStepResult out = trainer::train_step(
        model, optimizer, lr, samples_of(sequences, rank * per_rank, per_rank), options);
    if (out.micro_batches != settings.micro_batches) {
      throw Error("train_fsdp: the step ran " + std::to_string(out.micro_batches) +
                  " micro-batches, the settings ask for " + std::to_string(settings.micro_batches));
    }
    record.losses.push_back(out.metrics.at("loss"));
    record.grad_norms.push_back(out.grad_norm);
  }
  return record;
}

// A small non-transformer module whose units do not divide by 2 or 4, so shards have padding:
// "first" (42 elements) and the root (second 24 + scale 3 = 27).
struct ToyNetImpl : torch::nn::Module {
  explicit ToyNetImpl(uint64_t seed) {
    torch::manual_seed(seed);
    first = register_module("first", torch::nn::Linear(5, 7));
    second = register_module("second", torch::nn::Linear(7, 3));
    scale = register_parameter("scale", torch::randn({3}));
  }
  torch::Tensor head(const torch::Tensor& hidden) {
    return second->forward(torch::relu(hidden)) * scale;
  }
  torch::nn::Linear first{nullptr}, second{nullptr};
  torch::Tensor scale;
};
TORCH_MODULE(ToyNet);

constexpr int kToyRows = 8;

// The toy's global batch of step `step`: kToyRows inputs of 5 features.
inline torch::Tensor toy_inputs(int step) {
  return torch::randn({kToyRows, 5},
                      at::detail::createCPUGenerator(500 + static_cast<uint64_t>(step)));
}

inline torch::Tensor toy_loss(const torch::Tensor& output) { return output.square().mean(); }
// The same loss in double precision, for logging and comparing across ranks.
inline double toy_loss_value(const torch::Tensor& output) {
  return output.detach().to(torch::kDouble).square().mean().item<double>();
}

// The toy trained whole with torch::optim::AdamW; returns the loss of each step.
inline std::vector<double> train_toy_plain(ToyNet& net, const TrainSettings& settings) {
  torch::optim::AdamW optimizer(
      net->parameters(),
      torch::optim::AdamWOptions(settings.lr).weight_decay(settings.weight_decay));
  std::vector<double> losses;
  for (int step = 0; step < settings.steps; ++step) {
    optimizer.zero_grad();
    torch::Tensor output = net->head(net->first->forward(toy_inputs(step)));
    toy_loss(output).backward();
    optimizer.step();
    losses.push_back(toy_loss_value(output));
  }
  return losses;
}

// Every parameter's full fp32 value, gathered from the master shards (a collective when W > 1).
inline std::map<std::string, torch::Tensor> gather_full_parameters(
    fsdp::FullyShardedModule& sharded) {
  std::map<std::string, torch::Tensor> out;
  for (size_t u = 0; u < sharded.num_units(); ++u) {
    fsdp::FlatParam& flat = sharded.unit(u);
    torch::Tensor full = flat.master_shard();
    if (sharded.world_size() > 1) {
      full = torch::empty({flat.padded_numel()}, torch::kFloat);
      sharded.communicator()->all_gather(full, flat.master_shard());
    }
    for (const fsdp::FlatParamEntry& entry : flat.entries()) {
      out[entry.name] = full.narrow(0, entry.offset, entry.numel).view(entry.shape).clone();
    }
  }
  return out;
}

}  // namespace ooze::fsdp_test
