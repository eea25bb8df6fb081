// One rank of a multi-process fsdp test. The test starts W of these on loopback; they form a
// Gloo group through a TcpStore hosted by rank 0 and train each configuration in turn on their
// slice of the shared global batches (tests/fsdp/training_fixture.h). Rank 0 writes, per
// configuration, OUT_DIR/NAME.safetensors: the full trained parameters, with the losses, the
// gradient norms and every rank's allocated bytes as metadata. Exit 0: done; 1: a check failed
// (printed); 2: an exception.
//
//   fsdp_worker RANK WORLD PORT TIMEOUT_MS OUT_DIR CONFIG...
//   CONFIG: name=untied,model=untied|tied|toy,reshard=1,prefetch=1,micro=1,ckpt=0,bf16=0,
//           init=seed|broadcast|safetensors,clip=0,steps=5,lr=1e-3
//   init=safetensors reads OUT_DIR/init_checkpoint (written by the test).
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "comm/gloo_communicator.h"
#include "comm/tcp_store.h"
#include "core/safetensors.h"
#include "fsdp/fsdp_transformer.h"
#include "fsdp/optimizer_step.h"
#include "fsdp/sharded_adamw.h"
#include "fsdp/sharded_loading.h"
#include "fsdp/storage.h"
#include "tests/fsdp/training_fixture.h"

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
      {"bf16", "0"},       {"init", "seed"}, {"clip", "0"},     {"steps", "5"}, {"lr", "1e-3"}};
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

// Padding must be zero in the master and gradient shards and in a gathered buffer.
void check_padding(fsdp::FullyShardedModule& sharded, const std::string& when) {
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
  for (int step = 0; step < settings.steps; ++step) {
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
    fsdp::clip_and_step(sharded, optimizer, settings.lr, settings.clip_grad);
    check_padding(sharded, "after optimizer step " + std::to_string(step));
  }
  return losses;
}

void run_config(const std::map<std::string, std::string>& config,
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

}  // namespace

int main(int argc, char** argv) {
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
