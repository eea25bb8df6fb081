#include "launcher/train_actor.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "actors/actor_class.h"
#include "actors/runtime.h"
#include "comm/gloo_communicator.h"
#include "comm/tcp_store.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/tensor_serialization.h"
#include "fsdp/checkpoint.h"
#include "fsdp/fsdp_transformer.h"
#include "fsdp/hf_export.h"
#include "fsdp/lr_schedule.h"
#include "fsdp/optimizer_step.h"
#include "fsdp/sharded_adamw.h"
#include "fsdp/sharded_loading.h"
#include "models/log_probs.h"
#include "models/model_config.h"

namespace ooze::launcher {
namespace {

int env_int(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) {
    throw Error(std::string("TrainActor needs ") + name + ": spawn it in an ActorGroup");
  }
  return std::atoi(value);
}

// Sequences packed back to back, with next-token targets (a sequence's last token predicts
// nothing: mask 0).
struct Packed {
  torch::Tensor input_ids, position_ids, cu_seqlens, targets, mask;
  int64_t predicted = 0;
};

Packed pack(const std::vector<std::vector<int64_t>>& sequences) {
  std::vector<int64_t> ids, positions, targets;
  std::vector<float> mask;
  std::vector<int32_t> cu{0};
  for (const auto& sequence : sequences) {
    for (size_t t = 0; t < sequence.size(); ++t) {
      ids.push_back(sequence[t]);
      positions.push_back(static_cast<int64_t>(t));
      bool predicts = t + 1 < sequence.size();
      targets.push_back(predicts ? sequence[t + 1] : 0);
      mask.push_back(predicts ? 1.0f : 0.0f);
    }
    cu.push_back(static_cast<int32_t>(ids.size()));
  }
  Packed packed{torch::tensor(ids, torch::kLong),   torch::tensor(positions, torch::kLong),
                torch::tensor(cu, torch::kInt),     torch::tensor(targets, torch::kLong),
                torch::tensor(mask, torch::kFloat), 0};
  packed.predicted = static_cast<int64_t>(packed.mask.sum().item<double>());
  return packed;
}

}  // namespace

struct TrainActor::State {
  int rank = 0;
  int world_size = 1;
  std::string model_dir;
  std::unique_ptr<comm::TcpStoreServer> store_server;  // rank 0
  std::shared_ptr<comm::Communicator> comm;
  std::unique_ptr<fsdp::FsdpTransformer> model;
  std::unique_ptr<fsdp::ShardedAdamW> optimizer;
  std::unique_ptr<fsdp::LrSchedule> schedule;
  TrainerOptions options;
  fsdp::TrainingProgress progress;
};

TrainActor::TrainActor() = default;
TrainActor::~TrainActor() = default;

int64_t TrainActor::init(const TrainInit& init) {
  at::set_num_threads(1);
  auto state = std::make_unique<State>();
  state->rank = env_int("RANK");
  state->world_size = env_int("WORLD_SIZE");
  state->options = init.options;
  state->model_dir = init.model_dir;
  // Rendezvous: rank 0 hosts the store, the head's key-value store tells the others where.
  const std::string key = init.group_name + "/store";
  std::string address;
  if (state->rank == 0) {
    state->store_server = std::make_unique<comm::TcpStoreServer>("127.0.0.1", 0);
    address = "127.0.0.1:" + std::to_string(state->store_server->port());
    actors::kv_put(key, address);
  } else {
    address = actors::kv_get(key, std::chrono::seconds(60));
  }
  auto [host, port] = comm::parse_host_port(address);
  auto store =
      std::make_shared<comm::TcpStore>(host, port, state->rank, false, std::chrono::seconds(60));
  state->comm = comm::make_gloo_communicator(store, state->rank, state->world_size, init.group_name,
                                             std::chrono::seconds(120));

  const TrainerOptions& options = init.options;
  fsdp::FsdpTransformerOptions fsdp_options;
  fsdp_options.shard.mixed_precision.param_dtype = options.bf16 ? torch::kBFloat16 : torch::kFloat;
  fsdp_options.shard.reshard_after_forward = options.reshard_after_forward;
  fsdp_options.shard.prefetch = options.prefetch;
  fsdp_options.activation_checkpointing = options.gradient_checkpointing;
  models::ModelConfig config = models::load_model_config(init.model_dir);
  state->model = std::make_unique<fsdp::FsdpTransformer>(models::TransformerModel(config),
                                                         state->comm, fsdp_options);
  fsdp::load_sharded_safetensors(state->model->sharded(), init.model_dir);
  fsdp::ShardedAdamWOptions adam;
  adam.beta1 = options.adam_beta1;
  adam.beta2 = options.adam_beta2;
  adam.eps = options.adam_eps;
  adam.weight_decay = options.weight_decay;
  state->optimizer = std::make_unique<fsdp::ShardedAdamW>(state->model->sharded(), adam);
  state->schedule =
      std::make_unique<fsdp::LrSchedule>(lr_schedule_options(options), options.total_iters);
  int64_t parameters = 0;
  for (const auto& parameter : state->model->model()->parameters()) parameters += parameter.numel();
  state_ = std::move(state);
  return parameters;
}

TrainStepResult TrainActor::train_step(const TrainBatch& batch) {
  if (!state_) throw Error("TrainActor::train_step before init");
  if (batch.global_tokens <= 0) throw Error("train_step: global_tokens must be positive");
  auto start = std::chrono::steady_clock::now();
  fsdp::FsdpTransformer& model = *state_->model;
  TrainStepResult result;
  // Gradients are averaged over ranks: scale by W so the update is that of the mean over every
  // rank's tokens. Micro-batches accumulate into the same gradient shards.
  const double scale = static_cast<double>(state_->world_size) / batch.global_tokens;
  const size_t count = batch.sequences.size();
  const size_t micro = state_->options.micro_batch_size > 0
                           ? static_cast<size_t>(state_->options.micro_batch_size)
                           : std::max<size_t>(count, 1);
  // Each forward/backward is a sequence of collectives: every rank must run as many.
  const int64_t passes = static_cast<int64_t>((count + micro - 1) / micro);
  torch::Tensor extremes = torch::tensor({passes, -passes}, torch::kLong);
  state_->comm->all_reduce(extremes, comm::ReduceOp::MAX);
  if (extremes[0].item<int64_t>() != -extremes[1].item<int64_t>()) {
    throw Error("train_step: rank " + std::to_string(state_->rank) + " got " +
                std::to_string(count) + " sequences (" + std::to_string(passes) +
                " micro-batches) but the ranks' micro-batch counts range from " +
                std::to_string(-extremes[1].item<int64_t>()) + " to " +
                std::to_string(extremes[0].item<int64_t>()) +
                ": give every rank the same number of micro-batches");
  }
  for (size_t first = 0; first < count; first += micro) {
    std::vector<std::vector<int64_t>> sequences(
        batch.sequences.begin() + static_cast<std::ptrdiff_t>(first),
        batch.sequences.begin() + static_cast<std::ptrdiff_t>(std::min(first + micro, count)));
    Packed packed = pack(sequences);
    torch::Tensor hidden = model.forward(packed.input_ids, packed.position_ids, packed.cu_seqlens);
    models::TokenLogProbs out =
        models::compute_token_log_probs(hidden, model.lm_head_weight(), packed.targets);
    torch::Tensor nll = -(out.log_probs.to(torch::kFloat) * packed.mask);
    model.backward(nll.sum() * scale);
    result.loss_sum += nll.detach().to(torch::kDouble).sum().item<double>();
    result.tokens += packed.predicted;
  }
  fsdp::TrainingProgress& progress = state_->progress;
  result.lr = state_->schedule->lr_at(progress.lr_completed_steps);
  fsdp::StepResult step = fsdp::clip_and_step(model.sharded(), *state_->optimizer, result.lr,
                                              state_->options.clip_grad);
  // As in Megatron, a skipped step counts as an iteration but does not advance the schedule.
  progress.iteration += 1;
  progress.lr_completed_steps += step.skipped ? 0 : 1;
  progress.consumed_samples += batch.global_samples;
  result.grad_norm = step.grad_norm;
  result.skipped = step.skipped;
  result.compute_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

std::vector<std::vector<float>> TrainActor::compute_log_probs(const TrainBatch& batch) {
  if (!state_) throw Error("TrainActor::compute_log_probs before init");
  torch::NoGradGuard no_grad;
  Packed packed = pack(batch.sequences);
  fsdp::FsdpTransformer& model = *state_->model;
  torch::Tensor hidden = model.forward(packed.input_ids, packed.position_ids, packed.cu_seqlens);
  torch::Tensor log_probs =
      models::compute_token_log_probs(hidden, model.lm_head_weight(), packed.targets)
          .log_probs.to(torch::kFloat);
  model.reshard();
  std::vector<std::vector<float>> per_sequence;
  int64_t offset = 0;
  for (const auto& sequence : batch.sequences) {
    int64_t predicted = static_cast<int64_t>(sequence.size()) - 1;
    std::vector<float> values;
    for (int64_t t = 0; t < predicted; ++t) values.push_back(log_probs[offset + t].item<float>());
    per_sequence.push_back(std::move(values));
    offset += static_cast<int64_t>(sequence.size());
  }
  return per_sequence;
}

TrainProgress TrainActor::save(const std::string& dir) {
  if (!state_) throw Error("TrainActor::save before init");
  fsdp::save_checkpoint(dir, state_->progress, state_->model->sharded(), *state_->optimizer);
  return {state_->progress.iteration, state_->progress.consumed_samples};
}

TrainProgress TrainActor::load(const std::string& dir) {
  if (!state_) throw Error("TrainActor::load before init");
  fsdp::CheckpointLoadOptions options;
  if (state_->options.ckpt_step >= 0) options.iteration = state_->options.ckpt_step;
  options.load_rng = state_->options.load_rng;
  fsdp::ShardedAdamW* optimizer = state_->options.load_optim ? state_->optimizer.get() : nullptr;
  state_->progress = fsdp::load_checkpoint(dir, state_->model->sharded(), optimizer, options);
  return {state_->progress.iteration, state_->progress.consumed_samples};
}

std::string TrainActor::save_hf(const std::string& dir) {
  if (!state_) throw Error("TrainActor::save_hf before init");
  fsdp::export_hf_model(dir, *state_->model, state_->model_dir);
  return dir;
}

void TrainActor::sleep() {
  if (!state_) throw Error("TrainActor::sleep before init");
  state_->model->sleep();
  state_->optimizer->sleep();
}

void TrainActor::wake_up() {
  if (!state_) throw Error("TrainActor::wake_up before init");
  state_->model->wake_up();
  state_->optimizer->wake_up();
}

int64_t TrainActor::state_bytes() const {
  if (!state_) return 0;
  return static_cast<int64_t>(state_->model->sharded().allocated_bytes() +
                              state_->optimizer->state_bytes());
}

namespace {
const auto train_actor_class = actors::ActorClass<TrainActor>("TrainActor")
                                   .method("init", &TrainActor::init)
                                   .method("train_step", &TrainActor::train_step)
                                   .method("compute_log_probs", &TrainActor::compute_log_probs)
                                   .method("save", &TrainActor::save)
                                   .method("load", &TrainActor::load)
                                   .method("save_hf", &TrainActor::save_hf)
                                   .method("sleep", &TrainActor::sleep)
                                   .method("wake_up", &TrainActor::wake_up)
                                   .method("state_bytes", &TrainActor::state_bytes);
}  // namespace

}  // namespace ooze::launcher
