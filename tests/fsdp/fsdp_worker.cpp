// One rank of a multi-process fsdp test. The test starts W of these on loopback; they form a
// Gloo group through a TcpStore hosted by rank 0 and train each configuration in turn on their
// slice of the shared global batches (tests/support/training_fixture.h). Rank 0 writes, per
// configuration, OUT_DIR/NAME.safetensors: the full trained parameters, with the losses, the
// gradient norms and every rank's allocated bytes as metadata. Exit 0: done; 1: a check failed
// (printed); 2: an exception.
//
//   fsdp_worker RANK WORLD PORT TIMEOUT_MS OUT_DIR CONFIG...
//   CONFIG: name=untied,model=untied|tied|toy,reshard=1,prefetch=1,micro=1,ckpt=0,bf16=0,
//           init=seed|broadcast|safetensors,clip=0,steps=5,lr=1e-3
//   init=safetensors reads OUT_DIR/init_checkpoint (written by the test).
//
// Other modes (mode=train is the above), each on the untied model unless model= says otherwise:
//   mode=ckpt_save,dir=D,steps=3,more=3   train `steps` steps (model=toy: the toy network, whose
//       shards have padding), save_checkpoint into D, draw from the RNG, train `more` steps. Writes
//       the final parameters, "saved/NAME" (the parameters at the save), "rng_draws" [W, 4] and the
//       losses of the `more` steps.
//   mode=ckpt_resume,dir=D,steps=3,optim=1   start from other weights, RNG seeds and non-zero
//       padding, load the latest checkpoint of D (optim=0: weights only), draw from the RNG,
//       train `steps` steps from the checkpoint's iteration. Writes what ckpt_save does, but no
//       "saved/".
//   mode=ckpt_crash,dir=D   train 3 steps, save (iteration 3), write the outcome, train 1 step;
//       then rank 1 exits with code 3 while rank 0 saves iteration 4, which must fail.
//   mode=ckpt_load_error,dir=D,expect=TEXT   loading D must throw FormatError containing TEXT.
//   mode=hf_export,hf=D,steps=3   train, export_hf_model into D (tokenizer files from
//       OUT_DIR/tokenizer_source), write "logits" of kLogitsStep's global batch (and params).
//   mode=reference,hf=D   ReferenceModel::copy_of(policy) before the policy trains 2 steps at
//       lr 1e-3, and ReferenceModel::from_hf_checkpoint(D): writes "copy_log_probs",
//       "hf_log_probs" and "policy_log_probs" (the trained policy) of kScoreStep's global batch,
//       every rank scoring its slice, gathered in rank order.
//   mode=backward_memory   one backward of a 12-layer model on 3 tokens (its layers' weights
//       dominate its memory): what it holds at its peak must stay a few layers' worth, since each
//       layer's gradient reduce-scatter is finished while the next layer's backward runs. A
//       backward that kept them in flight to its end would hold every layer's full gradients.
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/gloo_communicator.h"
#include "comm/tcp_store.h"
#include "core/cpu_memory_counter.h"
#include "core/error.h"
#include "core/load_time_settings.h"
#include "core/safetensors.h"
#include "fsdp/checkpoint.h"
#include "fsdp/fsdp_transformer.h"
#include "fsdp/hf_export.h"
#include "fsdp/lr_schedule.h"
#include "fsdp/optimizer_step.h"
#include "fsdp/sharded_adamw.h"
#include "fsdp/sharded_loading.h"
#include "fsdp/storage.h"
#include "tests/support/training_fixture.h"
#include "trainer/reference_model.h"

using namespace ooze;
using namespace ooze::fsdp_test;

namespace {

int g_failures = 0;

void fail(const std::string& what) {
  std::cerr << "CHECK FAILED: " << what << std::endl;
  ++g_failures;
}

std::map<std::string, std::string> parse_config(const std::string& text) {
  std::map<std::string, std::string> config = {
      {"model", "untied"}, {"reshard", "1"}, {"prefetch", "1"}, {"micro", "1"}, {"ckpt", "0"},
      {"bf16", "0"},       {"init", "seed"}, {"clip", "0"},     {"steps", "5"}, {"lr", "1e-3"},
      {"mode", "train"},   {"more", "3"},    {"optim", "1"}};
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos) throw Error("bad config item '" + item + "' in '" + text + "'");
    config[item.substr(0, eq)] = item.substr(eq + 1);
  }
  if (!config.count("name")) throw Error("config '" + text + "' has no name");
  return config;
}

std::string number(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.17g", value);
  return buffer;
}

// Padding must be zero in the master and gradient shards, in a gathered buffer, and (when given)
// in the AdamW moments.
void check_padding(fsdp::FullyShardedModule& sharded, const std::string& when,
                   fsdp::ShardedAdamW* optimizer = nullptr) {
  for (size_t u = 0; u < sharded.num_units(); ++u) {
    fsdp::FlatParam& flat = sharded.unit(u);
    const int64_t valid = flat.valid_shard_numel(), pad = flat.shard_numel() - valid;
    const auto nonzero = [](const torch::Tensor& t) {
      return t.numel() > 0 && t.abs().max().item<double>() != 0.0;
    };
    if (nonzero(flat.master_shard().narrow(0, valid, pad))) {
      fail("master padding of " + flat.name() + " is not zero " + when);
    }
    if (nonzero(flat.grad_shard().narrow(0, valid, pad))) {
      fail("gradient padding of " + flat.name() + " is not zero " + when);
    }
    if (flat.is_unsharded() && nonzero(flat.unsharded_buffer().narrow(
                                   0, flat.numel(), flat.padded_numel() - flat.numel()))) {
      fail("gathered padding of " + flat.name() + " is not zero " + when);
    }
    if (optimizer && (nonzero(optimizer->exp_avg(u).narrow(0, valid, pad)) ||
                      nonzero(optimizer->exp_avg_sq(u).narrow(0, valid, pad)))) {
      fail("AdamW moment padding of " + flat.name() + " is not zero " + when);
    }
  }
}

// Bytes of every distinct storage reachable from the module, the shards and the optimizer.
int64_t held_bytes(torch::nn::Module& module, fsdp::FullyShardedModule& sharded,
                   fsdp::ShardedAdamW& optimizer) {
  std::set<const c10::StorageImpl*> seen;
  int64_t bytes = 0;
  const auto count = [&](const torch::Tensor& t) {
    if (t.defined() && seen.insert(t.storage().unsafeGetStorageImpl()).second) {
      bytes += static_cast<int64_t>(fsdp::storage_bytes(t));
    }
  };
  for (const auto& p : module.parameters()) {
    count(p);
    count(p.grad());
  }
  for (size_t u = 0; u < sharded.num_units(); ++u) {
    count(sharded.unit(u).master_shard());
    count(sharded.unit(u).grad_shard());
    count(sharded.unit(u).unsharded_buffer());
    count(optimizer.exp_avg(u));
    count(optimizer.exp_avg_sq(u));
  }
  return bytes;
}

// The toy network (with padding) trained on this rank's rows of every global batch.
std::vector<double> train_toy(ToyNet& net, fsdp::FullyShardedModule& sharded,
                              fsdp::ShardedAdamW& optimizer, const TrainSettings& settings) {
  const int rank = sharded.rank(), world = sharded.world_size();
  const int rows = kToyRows / world;
  const size_t root = *sharded.root_unit(), first = sharded.unit_index("first");
  std::vector<double> losses;
  check_padding(sharded, "after creation");
  for (int step = settings.first_step; step < settings.first_step + settings.steps; ++step) {
    const torch::Tensor x = toy_inputs(step).narrow(0, rank * rows, rows);
    sharded.hold_unsharded(root);
    check_padding(sharded, "after gathering the root");
    torch::Tensor hidden = sharded.run_unit(
        first, [&net](const torch::Tensor& in) { return net->first->forward(in); }, x);
    torch::Tensor output = net->head(hidden);
    toy_loss(output).backward();
    sharded.finish_backward();
    check_padding(sharded, "after the reduce-scatter of step " + std::to_string(step));
    torch::Tensor total = torch::tensor({toy_loss_value(output)}, torch::kDouble);
    if (world > 1) sharded.communicator()->all_reduce(total, comm::ReduceOp::SUM);
    losses.push_back(total.item<double>() / world);
    const double lr = settings.lr_at ? settings.lr_at(step) : settings.lr;
    fsdp::clip_and_step(sharded, optimizer, lr, settings.clip_grad);
    check_padding(sharded, "after optimizer step " + std::to_string(step));
  }
  return losses;
}

void run_training_config(const std::map<std::string, std::string>& config,
                         std::shared_ptr<comm::Communicator> comm, const std::string& out_dir) {
  const std::string name = config.at("name"), model_kind = config.at("model");
  TrainSettings settings;
  settings.steps = std::stoi(config.at("steps"));
  settings.micro_batches = std::stoi(config.at("micro"));
  settings.clip_grad = std::stod(config.at("clip"));
  settings.lr = std::stod(config.at("lr"));
  fsdp::FsdpTransformerOptions options;
  options.shard.reshard_after_forward = config.at("reshard") == "1";
  options.shard.prefetch = config.at("prefetch") == "1";
  options.shard.mixed_precision.param_dtype =
      config.at("bf16") == "1" ? torch::kBFloat16 : torch::kFloat;
  options.activation_checkpointing = config.at("ckpt") == "1";
  const std::string init = config.at("init");
  options.shard.sync_module_states = init == "broadcast";
  fsdp::ShardedAdamWOptions adam;
  adam.weight_decay = settings.weight_decay;

  TrainRecord record;
  std::map<std::string, torch::Tensor> full;
  int64_t bytes = 0;
  std::map<std::string, std::string> metadata;
  if (model_kind == "toy") {
    ToyNet net(kInitSeed);
    fsdp::FullyShardedModule sharded(*net, {"first"}, comm, options.shard);
    fsdp::ShardedAdamW optimizer(sharded, adam);
    record.losses = train_toy(net, sharded, optimizer, settings);
    for (size_t u = 0; u < sharded.num_units(); ++u) {
      metadata["padding_" + sharded.unit(u).name()] =
          std::to_string(sharded.unit(u).padded_numel() - sharded.unit(u).numel());
    }
    bytes = held_bytes(*net, sharded, optimizer);
    full = gather_full_parameters(sharded);
  } else {
    const bool tied = model_kind == "tied";
    // broadcast: only rank 0 has the intended weights; the others start from other values.
    const uint64_t seed =
        init == "broadcast" && comm->rank() != 0 ? kInitSeed + 1 + comm->rank() : kInitSeed;
    fsdp::FsdpTransformer model(make_model(tied, seed), comm, options);
    if (init == "safetensors") {
      fsdp::load_sharded_safetensors(model.sharded(), out_dir + "/init_checkpoint");
    }
    fsdp::ShardedAdamW optimizer(model.sharded(), adam);
    record = train_fsdp(model, optimizer, settings);
    check_padding(model.sharded(), "after training");
    bytes = held_bytes(*model.model(), model.sharded(), optimizer);
    full = gather_full_parameters(model.sharded());
  }

  torch::Tensor all_bytes = torch::zeros({comm->size()}, torch::kLong);
  comm->all_gather(all_bytes, torch::tensor({bytes}, torch::kLong));
  if (comm->rank() != 0) return;
  for (size_t i = 0; i < record.losses.size(); ++i) {
    metadata["loss_" + std::to_string(i)] = number(record.losses[i]);
  }
  for (size_t i = 0; i < record.grad_norms.size(); ++i) {
    metadata["grad_norm_" + std::to_string(i)] = number(record.grad_norms[i]);
  }
  for (int r = 0; r < comm->size(); ++r) {
    metadata["bytes_rank" + std::to_string(r)] = std::to_string(all_bytes[r].item<int64_t>());
  }
  NamedTensors tensors(full.begin(), full.end());
  save_safetensors(out_dir + "/" + name + ".safetensors", tensors, metadata);
}

// ---------------------------------------------------------------------------------------------
// Checkpoint, export and reference modes

// The schedule the checkpoint modes train with: warmup then cosine decay, so that every step
// has its own learning rate and a resumed run must continue it at the right position. The peak
// is small so that runs at different W stay within fp32 rounding of each other (see
// tests/fsdp/multi_rank_test.cpp).
fsdp::LrSchedule checkpoint_schedule(double peak) {
  fsdp::LrScheduleOptions options;
  options.lr = peak;
  options.min_lr = peak / 10;
  options.warmup_iters = 2;
  options.decay_style = fsdp::LrDecayStyle::kCosine;
  return fsdp::LrSchedule(options, /*total_iters=*/8);
}

// Rank 0 writes OUT_DIR/NAME.safetensors.
void write_outcome(const std::shared_ptr<comm::Communicator>& comm, const std::string& out_dir,
                   const std::string& name, const NamedTensors& tensors,
                   const std::map<std::string, std::string>& metadata) {
  if (comm->rank() == 0) save_safetensors(out_dir + "/" + name + ".safetensors", tensors, metadata);
}

// Every rank's equally sized `mine`, in rank order: [W * n].
torch::Tensor gather_from_ranks(const std::shared_ptr<comm::Communicator>& comm,
                                const torch::Tensor& mine) {
  torch::Tensor all = torch::empty({comm->size() * mine.numel()}, mine.options());
  comm->all_gather(all, mine.contiguous());
  return all;
}

void add_losses(const TrainRecord& record, std::map<std::string, std::string>& metadata) {
  for (size_t i = 0; i < record.losses.size(); ++i) {
    metadata["loss_" + std::to_string(i)] = number(record.losses[i]);
  }
}

void add_parameters(const std::map<std::string, torch::Tensor>& params, const std::string& prefix,
                    NamedTensors& tensors) {
  for (const auto& [name, tensor] : params) tensors.emplace_back(prefix + name, tensor);
}

torch::Tensor rng_draws(const std::shared_ptr<comm::Communicator>& comm) {
  return gather_from_ranks(comm, torch::rand({4})).view({comm->size(), 4});
}

fsdp::ShardedAdamWOptions adam_options() {
  fsdp::ShardedAdamWOptions adam;
  adam.weight_decay = TrainSettings{}.weight_decay;
  return adam;
}

// The model a checkpoint mode trains: the tiny transformer (its units divide by 2 and 4) or
// the toy (its units do not, so shards have padding at W = 2 and 4).
class CheckpointSubject {
 public:
  CheckpointSubject(const std::string& kind, uint64_t seed,
                    const std::shared_ptr<comm::Communicator>& comm) {
    if (kind == "toy") {
      toy_ = ToyNet(seed);
      toy_sharded_ = std::make_unique<fsdp::FullyShardedModule>(
          *toy_, std::vector<std::string>{"first"}, comm, fsdp::FullyShardOptions{});
    } else {
      transformer_ =
          std::make_unique<fsdp::FsdpTransformer>(make_model(kind == "tied", seed), comm);
    }
  }
  fsdp::FullyShardedModule& sharded() {
    return transformer_ ? transformer_->sharded() : *toy_sharded_;
  }
  TrainRecord train(fsdp::ShardedAdamW& optimizer, const TrainSettings& settings) {
    if (transformer_) return train_fsdp(*transformer_, optimizer, settings);
    TrainRecord record;
    record.losses = train_toy(toy_, *toy_sharded_, optimizer, settings);
    return record;
  }

 private:
  std::unique_ptr<fsdp::FsdpTransformer> transformer_;
  ToyNet toy_{nullptr};
  std::unique_ptr<fsdp::FullyShardedModule> toy_sharded_;
};

void run_checkpoint_save(const std::map<std::string, std::string>& config,
                         std::shared_ptr<comm::Communicator> comm, const std::string& out_dir) {
  const fsdp::LrSchedule schedule = checkpoint_schedule(std::stod(config.at("lr")));
  CheckpointSubject subject(config.at("model"), kInitSeed, comm);
  fsdp::ShardedAdamW optimizer(subject.sharded(), adam_options());
  torch::manual_seed(1000 + static_cast<uint64_t>(comm->rank()));  // every rank its own stream
  TrainSettings settings;
  settings.steps = std::stoi(config.at("steps"));
  settings.lr_at = [&schedule](int64_t completed) { return schedule.lr_at(completed); };
  subject.train(optimizer, settings);

  fsdp::TrainingProgress progress;
  progress.iteration = settings.steps;
  progress.lr_completed_steps = settings.steps;
  progress.consumed_samples = int64_t{settings.steps} * kGlobalSequences;
  fsdp::save_checkpoint(config.at("dir"), progress, subject.sharded(), optimizer);
  NamedTensors tensors = {{"rng_draws", rng_draws(comm)}};
  add_parameters(gather_full_parameters(subject.sharded()), "saved/", tensors);

  settings.first_step = settings.steps;
  settings.steps = std::stoi(config.at("more"));
  const TrainRecord record = subject.train(optimizer, settings);
  check_padding(subject.sharded(), "after training on", &optimizer);
  add_parameters(gather_full_parameters(subject.sharded()), "", tensors);
  std::map<std::string, std::string> metadata;
  add_losses(record, metadata);
  write_outcome(comm, out_dir, config.at("name"), tensors, metadata);
}

void run_checkpoint_resume(const std::map<std::string, std::string>& config,
                           std::shared_ptr<comm::Communicator> comm, const std::string& out_dir) {
  const fsdp::LrSchedule schedule = checkpoint_schedule(std::stod(config.at("lr")));
  // Other weights, other RNG streams and dirty padding: the load must replace all of them.
  CheckpointSubject subject(config.at("model"), kInitSeed + 11, comm);
  fsdp::ShardedAdamW optimizer(subject.sharded(), adam_options());
  torch::manual_seed(5000 + static_cast<uint64_t>(comm->rank()));
  const bool with_optimizer = config.at("optim") == "1";
  {
    torch::NoGradGuard no_grad;
    for (size_t u = 0; u < subject.sharded().num_units(); ++u) {
      fsdp::FlatParam& flat = subject.sharded().unit(u);
      const int64_t valid = flat.valid_shard_numel(), pad = flat.shard_numel() - valid;
      flat.master_shard().narrow(0, valid, pad).fill_(7.0);
      if (!with_optimizer) continue;  // a weights-only load leaves the moments alone
      optimizer.exp_avg(u).narrow(0, valid, pad).fill_(7.0);
      optimizer.exp_avg_sq(u).narrow(0, valid, pad).fill_(7.0);
    }
  }
  const fsdp::TrainingProgress progress = fsdp::load_checkpoint(
      config.at("dir"), subject.sharded(), with_optimizer ? &optimizer : nullptr);
  check_padding(subject.sharded(), "after loading", with_optimizer ? &optimizer : nullptr);
  std::map<std::string, std::string> metadata = {
      {"iteration", std::to_string(progress.iteration)},
      {"lr_completed_steps", std::to_string(progress.lr_completed_steps)},
      {"consumed_samples", std::to_string(progress.consumed_samples)}};
  NamedTensors tensors = {{"rng_draws", rng_draws(comm)}};

  TrainSettings settings;
  settings.steps = std::stoi(config.at("steps"));
  settings.first_step = static_cast<int>(progress.iteration);  // the next global batch
  settings.lr_at = [&schedule, &progress](int64_t step) {
    return schedule.lr_at(progress.lr_completed_steps + (step - progress.iteration));
  };
  const TrainRecord record = subject.train(optimizer, settings);
  check_padding(subject.sharded(), "after training on", &optimizer);
  add_parameters(gather_full_parameters(subject.sharded()), "", tensors);
  add_losses(record, metadata);
  write_outcome(comm, out_dir, config.at("name"), tensors, metadata);
}

void run_checkpoint_crash(const std::map<std::string, std::string>& config,
                          std::shared_ptr<comm::Communicator> comm, const std::string& out_dir) {
  fsdp::FsdpTransformer model(make_model(false), comm);
  fsdp::ShardedAdamW optimizer(model.sharded(), adam_options());
  TrainSettings settings;
  settings.steps = 3;
  settings.lr = 1e-3;
  train_fsdp(model, optimizer, settings);
  fsdp::save_checkpoint(config.at("dir"), {3, 3, 3 * kGlobalSequences}, model.sharded(), optimizer);
  NamedTensors tensors;
  add_parameters(gather_full_parameters(model.sharded()), "saved/", tensors);
  write_outcome(comm, out_dir, config.at("name"), tensors, {});
  settings.first_step = 3;
  settings.steps = 1;
  train_fsdp(model, optimizer, settings);
  comm->barrier();
  if (comm->rank() != 0) {
    // Gives rank 0 time to write its files of iteration 4 first: the crash is mid-save.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::_Exit(3);
  }
  try {
    fsdp::save_checkpoint(config.at("dir"), {4, 4, 4 * kGlobalSequences}, model.sharded(),
                          optimizer);
    fail("save_checkpoint of iteration 4 succeeded although rank 1 died");
  } catch (const std::exception& e) {
    std::cerr << "save of iteration 4 failed as it should: " << e.what() << std::endl;
  }
  std::_Exit(g_failures == 0 ? 0 : 1);  // the group is broken: no final barrier
}

void run_checkpoint_load_error(const std::map<std::string, std::string>& config,
                               std::shared_ptr<comm::Communicator> comm) {
  fsdp::FsdpTransformer model(make_model(false), comm);
  fsdp::ShardedAdamW optimizer(model.sharded(), adam_options());
  const std::string expect = config.at("expect");
  try {
    fsdp::load_checkpoint(config.at("dir"), model.sharded(), &optimizer);
    fail("load_checkpoint of " + config.at("dir") + " succeeded; expected an error with '" +
         expect + "'");
  } catch (const FormatError& e) {
    std::cerr << "load failed as it should: " << e.what() << std::endl;
    if (std::string(e.what()).find(expect) == std::string::npos) {
      fail("the error does not contain '" + expect + "'");
    }
  }
}

// The global batch the export and reference modes score (never trained on).
constexpr int kScoreStep = 100;

void run_hf_export(const std::map<std::string, std::string>& config,
                   std::shared_ptr<comm::Communicator> comm, const std::string& out_dir) {
  fsdp::FsdpTransformer model(make_model(config.at("model") == "tied"), comm);
  fsdp::ShardedAdamW optimizer(model.sharded(), adam_options());
  TrainSettings settings;
  settings.steps = std::stoi(config.at("steps"));
  settings.lr = 1e-3;
  train_fsdp(model, optimizer, settings);
  fsdp::export_hf_model(config.at("hf"), model, out_dir + "/tokenizer_source");

  // The trained sharded model's logits of the whole batch, on every rank (same input).
  const auto sequences = global_sequences(kScoreStep, model.model()->config().vocab_size);
  const PackedBatch batch = pack(sequences, 0, kGlobalSequences);
  torch::Tensor logits;
  {
    torch::NoGradGuard no_grad;
    const torch::Tensor hidden =
        model.forward(batch.input_ids, batch.position_ids, batch.cu_seqlens);
    logits = model.model()->logits(hidden).clone();
    model.reshard();
  }
  NamedTensors tensors = {{"logits", logits}};
  add_parameters(gather_full_parameters(model.sharded()), "", tensors);
  write_outcome(comm, out_dir, config.at("name"), tensors, {});
}

// This rank's slice of the scored batch, through `score` (the log-probs of each sample's
// response tokens), concatenated and gathered from every rank.
torch::Tensor score_slices(
    const std::shared_ptr<comm::Communicator>& comm, int64_t vocab,
    const std::function<trainer::ResponseLogProbs(const std::vector<fsdp::PackingSample>&)>&
        score) {
  const int per_rank = kGlobalSequences / comm->size();
  const trainer::ResponseLogProbs scored =
      score(samples_of(global_sequences(kScoreStep, vocab), comm->rank() * per_rank, per_rank));
  return gather_from_ranks(comm, torch::cat(scored.log_probs));
}

void check_frozen(const trainer::ReferenceModel& reference, const std::string& which) {
  for (const auto& parameter : reference.model()->parameters()) {
    if (parameter.requires_grad() || parameter.grad().defined()) {
      fail(which + " reference model has a parameter that requires or holds a gradient");
    }
  }
  const fsdp::FullyShardedModule& sharded = reference.sharded();
  size_t master_bytes = 0;
  for (size_t u = 0; u < sharded.num_units(); ++u) {
    master_bytes += const_cast<fsdp::FlatParam&>(sharded.unit(u)).master_shard().nbytes();
  }
  if (sharded.allocated_bytes() != master_bytes) {
    fail(which + " reference model holds " + std::to_string(sharded.allocated_bytes()) +
         " bytes, more than its master shards (" + std::to_string(master_bytes) + ")");
  }
}

void run_reference(const std::map<std::string, std::string>& config,
                   std::shared_ptr<comm::Communicator> comm, const std::string& out_dir) {
  fsdp::FsdpTransformer policy(make_model(false), comm);
  trainer::ReferenceModel copy = trainer::ReferenceModel::copy_of(policy);
  fsdp::ShardedAdamW optimizer(policy.sharded(), adam_options());
  TrainSettings settings;
  settings.steps = 2;
  settings.lr = 1e-3;
  train_fsdp(policy, optimizer, settings);  // must not move the reference
  trainer::ReferenceModel from_hf =
      trainer::ReferenceModel::from_hf_checkpoint(config.at("hf"), comm);
  check_frozen(copy, "the copied");
  check_frozen(from_hf, "the loaded");

  const int64_t vocab = policy.model()->config().vocab_size;
  const auto reference_score = [](trainer::ReferenceModel& reference) {
    return [&reference](const std::vector<fsdp::PackingSample>& samples) {
      return reference.compute_log_probs(samples, fsdp::PackingOptions{});
    };
  };
  NamedTensors tensors = {
      {"copy_log_probs", score_slices(comm, vocab, reference_score(copy))},
      {"hf_log_probs", score_slices(comm, vocab, reference_score(from_hf))},
      {"policy_log_probs",
       score_slices(comm, vocab, [&policy](const std::vector<fsdp::PackingSample>& samples) {
         return trainer::compute_log_probs(policy, samples, fsdp::PackingOptions{});
       })}};
  check_frozen(copy, "the copied");
  write_outcome(comm, out_dir, config.at("name"), tensors, {});
}

void run_backward_memory(std::shared_ptr<comm::Communicator> comm) {
  install_cpu_memory_counter();
  models::ModelConfig config = tiny_config(false);
  config.num_hidden_layers = 12;
  config.intermediate_size = 512;  // weights heavy against the activations of 3 tokens
  models::TransformerModel model(config);
  model->init_weights(kInitSeed);
  fsdp::FsdpTransformer fsdp(model, comm, {});
  fsdp::FullyShardedModule& sharded = fsdp.sharded();
  int64_t layer_bytes = 0;  // the largest unit but the root (whose gradients wait to the end)
  for (size_t u = 0; u < sharded.num_units(); ++u) {
    if (u == sharded.root_unit()) continue;
    layer_bytes = std::max<int64_t>(layer_bytes, sharded.unit(u).padded_numel() * 4);
  }
  const PackedBatch batch = pack({{1, 2, 3}}, 0, 1);
  const int64_t before = cpu_bytes_in_use();
  reset_peak_cpu_bytes();
  const torch::Tensor hidden = fsdp.forward(batch.input_ids, batch.position_ids, batch.cu_seqlens);
  fsdp.backward(batch_loss(hidden, fsdp.lm_head_weight(), batch).mean);
  const int64_t step_bytes = peak_cpu_bytes() - before;
  std::cout << "rank " << comm->rank() << ": the step held " << step_bytes << " bytes at its peak, "
            << static_cast<double>(step_bytes) / layer_bytes << " layers' worth" << std::endl;
  // One in flight: a layer and the next one gathered, its gradients and their reduce-scatter
  // input, the previous layer's in flight: about 5; all in flight: over 12.
  if (step_bytes >= 9 * layer_bytes) {
    fail("a backward of 12 layers held " + std::to_string(step_bytes) + " bytes, " +
         std::to_string(step_bytes / layer_bytes) + " layers' worth of gradients and weights");
  }
}

void run_config(const std::map<std::string, std::string>& config,
                std::shared_ptr<comm::Communicator> comm, const std::string& out_dir) {
  const std::string mode = config.at("mode");
  if (mode == "ckpt_save") return run_checkpoint_save(config, comm, out_dir);
  if (mode == "ckpt_resume") return run_checkpoint_resume(config, comm, out_dir);
  if (mode == "ckpt_crash") return run_checkpoint_crash(config, comm, out_dir);
  if (mode == "ckpt_load_error") return run_checkpoint_load_error(config, comm);
  if (mode == "hf_export") return run_hf_export(config, comm, out_dir);
  if (mode == "reference") return run_reference(config, comm, out_dir);
  if (mode == "backward_memory") return run_backward_memory(comm);
  if (mode != "train") throw Error("unknown mode '" + mode + "'");
  run_training_config(config, comm, out_dir);
}

}  // namespace

int main(int argc, char** argv) {
  ooze::start_with_load_time_settings(argv);  // first: it may start this program again
  if (argc < 7) {
    std::cerr << "usage: fsdp_worker RANK WORLD PORT TIMEOUT_MS OUT_DIR CONFIG..." << std::endl;
    return 2;
  }
  const int rank = std::atoi(argv[1]), world = std::atoi(argv[2]), port = std::atoi(argv[3]);
  const std::chrono::milliseconds timeout(std::atoi(argv[4]));
  const std::string out_dir = argv[5];
  at::set_num_threads(1);
  try {
    auto store = std::make_shared<comm::TcpStore>("127.0.0.1", port, rank, rank == 0, timeout);
    auto comm = comm::make_gloo_communicator(store, rank, world, "fsdp", timeout);
    for (int i = 6; i < argc; ++i) run_config(parse_config(argv[i]), comm, out_dir);
    comm->barrier();  // rank 0 hosts the store: nobody leaves before everyone is done
  } catch (const std::exception& e) {
    std::cerr << "rank " << rank << ": " << e.what() << std::endl;
    return 2;
  }
  return g_failures == 0 ? 0 : 1;
}
