#include "trainer/train_actor.h"

#include <torch/torch.h>

#include <chrono>
#include <cstdlib>

#include "actors/actor_class.h"
#include "actors/kv_store.h"
#include "actors/runtime.h"
#include "comm/process_group.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/resident_memory.h"
#include "core/tensor_serialization.h"
#include "core/timer.h"
#include "fsdp/checkpoint.h"
#include "fsdp/fsdp_transformer.h"
#include "fsdp/hf_export.h"
#include "fsdp/lr_schedule.h"
#include "fsdp/sharded_adamw.h"
#include "fsdp/sharded_loading.h"
#include "models/hf_checkpoint.h"
#include "models/lora.h"
#include "models/model_config.h"
#include "models/peft_adapter.h"
#include "python/hook_args.h"
#include "trainer/lora_weights.h"
#include "trainer/python_loss.h"
#include "trainer/reference_model.h"

namespace ooze::trainer {
namespace {

int env_int(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) {
    throw Error(std::string("TrainActor needs ") + name + ": spawn it in an ActorGroup");
  }
  return std::atoi(value);
}

// The device this rank computes on: the GPU the node gave its worker, else the CPU.
at::Device compute_device() {
  if (!torch::cuda::is_available()) return at::kCPU;
  const char* index = std::getenv("OOZE_DEVICE_INDEX");
  return at::Device(at::kCUDA, static_cast<at::DeviceIndex>(index ? std::atoi(index) : 0));
}

// A LoRA policy: the base loaded whole into every rank in the compute dtype and frozen, the
// adapters (fresh, or from --lora-load) the only sharded and trained parameters.
std::unique_ptr<fsdp::FsdpTransformer> lora_model(const std::string& model_dir,
                                                  const models::LoraOptions& lora,
                                                  fsdp::FsdpTransformerOptions options,
                                                  std::shared_ptr<comm::Communicator> comm,
                                                  at::Device device) {
  models::TransformerModel model(models::load_model_config(model_dir),
                                 options.shard.mixed_precision.param_dtype);
  models::load_hf_weights(*model, model_dir);
  // Seed 0: every rank, and every run, starts from the same adapter (B = 0: the base).
  models::add_lora_adapters(*model, lora, /*seed=*/0);
  if (!lora.load.empty()) {
    models::load_adapter_weights(*model, models::load_peft_adapter(lora.load));
  }
  model->to(device);
  options.shard.replicate_frozen = true;
  return std::make_unique<fsdp::FsdpTransformer>(model, std::move(comm), options);
}

}  // namespace

struct TrainActor::State {
  int rank = 0;
  int world_size = 1;
  std::string model_dir;
  at::Device device = at::kCPU;
  std::shared_ptr<comm::Communicator> comm;
  std::unique_ptr<fsdp::FsdpTransformer> model;
  std::unique_ptr<ReferenceModel> reference;
  bool reference_is_base = false;  // LoRA: the reference is the model with its adapters off
  std::unique_ptr<ReferenceModel> teacher;  // on-policy distillation's, in the trainer
  std::unique_ptr<fsdp::ShardedAdamW> optimizer;
  std::unique_ptr<fsdp::LrSchedule> schedule;
  TrainerOptions options;
  fsdp::TrainingProgress progress;
  std::string group_name;
  std::unique_ptr<WeightSyncer> weight_syncer;
};

TrainActor::TrainActor() = default;
TrainActor::~TrainActor() = default;

int64_t TrainActor::init(const TrainInit& init) {
  at::set_num_threads(1);
  // A Python loss loads first, so that one that cannot load fails the run before anything starts.
  if (!init.hook_args.empty()) python::set_hook_args(nlohmann::json::parse(init.hook_args));
  load_python_losses(init.options.step);
  auto state = std::make_unique<State>();
  state->rank = env_int("RANK");
  state->world_size = env_int("WORLD_SIZE");
  state->options = init.options;
  state->model_dir = init.model_dir;
  state->group_name = init.group_name;
  state->device = compute_device();
  comm::ProcessGroupOptions group = init.options.distributed;
  group.host = actors::node_address();
  state->comm = comm::init_process_group(
      std::make_shared<comm::PrefixStore>(init.group_name, std::make_shared<actors::KvStore>()),
      state->rank, state->world_size, init.group_name, state->device, group);

  const TrainerOptions& options = init.options;
  const fsdp::FsdpTransformerOptions& fsdp_options = options.fsdp;
  const bool critic = init.role == TrainerRole::kCritic;
  if (options.lora.enabled()) {
    if (critic) throw ConfigError("a critic trains in full: its options must not enable LoRA");
    state->model =
        lora_model(init.model_dir, options.lora, fsdp_options, state->comm, state->device);
    // The reference is the base itself, the adapters off: no second copy.
    state->reference_is_base = init.reference_model && init.ref_load.empty();
  } else {
    models::TransformerModel model(
        models::load_model_config(init.model_dir), std::nullopt,
        critic ? models::ModelHead::kValue : models::ModelHead::kLanguageModel);
    if (critic) {
      // A policy's checkpoint has no value head: it starts at 0, every value 0.
      torch::NoGradGuard no_grad;
      model->value_head()->weight.zero_();
    }
    model->to(state->device);
    state->model = std::make_unique<fsdp::FsdpTransformer>(model, state->comm, fsdp_options);
    fsdp::load_sharded_safetensors(
        state->model->sharded(), init.model_dir,
        critic ? std::set<std::string>{"score.weight"} : std::set<std::string>{});
  }
  if (init.reference_model && !state->reference_is_base) {
    // Before any step (and before a checkpoint is loaded): the initial policy, exactly.
    state->reference = std::make_unique<ReferenceModel>(
        init.ref_load.empty()
            ? ReferenceModel::copy_of(*state->model, fsdp_options)
            : ReferenceModel::from_hf_checkpoint(init.ref_load, state->comm, fsdp_options));
  }
  if (!init.teacher_load.empty()) {
    state->teacher = std::make_unique<ReferenceModel>(
        ReferenceModel::from_hf_checkpoint(init.teacher_load, state->comm, fsdp_options));
    const int64_t student_vocab = state->model->model()->config().vocab_size;
    if (state->teacher->config().vocab_size != student_vocab) {
      throw ConfigError("the teacher '" + init.teacher_load + "' has a vocabulary of " +
                        std::to_string(state->teacher->config().vocab_size) +
                        " tokens, the student " + std::to_string(student_vocab) +
                        ": on-policy distillation scores the student's token ids, so the two "
                        "must share a tokenizer");
    }
  }
  state->optimizer = std::make_unique<fsdp::ShardedAdamW>(state->model->sharded(), options.adamw);
  state->schedule = std::make_unique<fsdp::LrSchedule>(options.lr_schedule, options.total_iters);
  int64_t parameters = 0;
  for (const auto& parameter : state->model->model()->parameters()) parameters += parameter.numel();
  state_ = std::move(state);
  return parameters;
}

TrainStepResult TrainActor::train_step(const TrainBatch& batch) {
  if (!state_) throw Error("TrainActor::train_step before init");
  const auto start = std::chrono::steady_clock::now();
  const TrainerOptions& options = state_->options;
  fsdp::TrainingProgress& progress = state_->progress;
  const double lr = state_->schedule->lr_at(progress.lr_completed_steps);
  reset_peak_resident_bytes();  // where it cannot, the peak covers the rank's whole life
  // The JSD term's teacher: with --opd-full-vocab the teacher model; self-distilling, the
  // initial policy (the reference model, or the base).
  DistillationTeacher teacher;
  if (state_->reference_is_base) teacher = {state_->model.get(), /*adapters_off=*/true};
  if (state_->reference) teacher = {&state_->reference->transformer(), /*adapters_off=*/false};
  if (state_->teacher) teacher = {&state_->teacher->transformer(), /*adapters_off=*/false};
  TrainStepResult result = trainer::train_step(*state_->model, *state_->optimizer, lr,
                                               batch.samples, options.step, teacher);
  // As in Megatron, a skipped step counts as an iteration but does not advance the schedule.
  progress.iteration += 1;
  progress.lr_completed_steps += result.skipped ? 0 : 1;
  progress.consumed_samples += result.samples;
  result.compute_seconds = seconds_since(start);
  result.state_bytes = state_bytes();
  result.peak_rss_bytes = peak_resident_bytes();
  return result;
}

ResponseLogProbs TrainActor::compute_log_probs(const TrainBatch& batch, double temperature,
                                               bool with_entropy) {
  if (!state_) throw Error("TrainActor::compute_log_probs before init");
  return trainer::compute_log_probs(*state_->model, batch.samples, state_->options.step.packing,
                                    temperature, with_entropy);
}

ResponseLogProbs TrainActor::compute_ref_log_probs(const TrainBatch& batch, double temperature) {
  if (!state_) throw Error("TrainActor::compute_ref_log_probs before init");
  if (state_->reference_is_base) {
    models::AdaptersDisabled base(*state_->model->model());
    return trainer::compute_log_probs(*state_->model, batch.samples, state_->options.step.packing,
                                      temperature, /*with_entropy=*/false);
  }
  if (!state_->reference) {
    throw Error(
        "TrainActor::compute_ref_log_probs: this trainer holds no reference model (init it "
        "with reference_model, as --use-kl-loss and --kl-coef do)");
  }
  return state_->reference->compute_log_probs(batch.samples, state_->options.step.packing,
                                              temperature);
}

ResponseLogProbs TrainActor::compute_teacher_log_probs(const TrainBatch& batch,
                                                       double temperature) {
  if (!state_) throw Error("TrainActor::compute_teacher_log_probs before init");
  if (!state_->teacher) {
    throw Error(
        "TrainActor::compute_teacher_log_probs: this trainer holds no teacher (init it with "
        "teacher_load, as --use-opd --opd-type trainer does)");
  }
  return state_->teacher->compute_log_probs(batch.samples, state_->options.step.packing,
                                            temperature);
}

std::vector<at::Tensor> TrainActor::compute_values(const TrainBatch& batch) {
  if (!state_) throw Error("TrainActor::compute_values before init");
  return trainer::compute_values(*state_->model, batch.samples, state_->options.step.packing);
}

fsdp::TrainingProgress TrainActor::save(const std::string& dir) {
  if (!state_) throw Error("TrainActor::save before init");
  fsdp::save_checkpoint(dir, state_->progress, state_->model->sharded(), *state_->optimizer);
  return state_->progress;
}

fsdp::TrainingProgress TrainActor::load(const std::string& dir) {
  if (!state_) throw Error("TrainActor::load before init");
  return load_iteration(dir, state_->options.checkpoint.iteration.value_or(-1));
}

fsdp::TrainingProgress TrainActor::load_iteration(const std::string& dir, int64_t iteration) {
  if (!state_) throw Error("TrainActor::load_iteration before init");
  fsdp::CheckpointLoadOptions options = state_->options.checkpoint;
  options.iteration = iteration >= 0 ? std::optional<int64_t>(iteration) : std::nullopt;
  fsdp::ShardedAdamW* optimizer = state_->options.load_optim ? state_->optimizer.get() : nullptr;
  state_->progress = fsdp::load_checkpoint(dir, state_->model->sharded(), optimizer, options);
  return state_->progress;
}

std::string TrainActor::save_hf(const std::string& dir) {
  if (!state_) throw Error("TrainActor::save_hf before init");
  if (state_->options.lora.enabled()) {
    fsdp::export_peft_adapter(dir, *state_->model, state_->options.lora, state_->model_dir);
  } else {
    fsdp::export_hf_model(dir, *state_->model, state_->model_dir);
  }
  return dir;
}

std::string TrainActor::save_merged_hf(const std::string& dir) {
  if (!state_) throw Error("TrainActor::save_merged_hf before init");
  if (!state_->options.lora.enabled()) {
    throw ConfigError("--save-hf-merged merges LoRA adapters: this trainer has none");
  }
  fsdp::export_merged_lora_model(dir, *state_->model, state_->options.lora, state_->model_dir);
  return dir;
}

void TrainActor::connect_rollout_engines(const RolloutEngineConnection& connection) {
  if (!state_) throw Error("TrainActor::connect_rollout_engines before init");
  if (connection.engines.empty()) throw ConfigError("connect_rollout_engines: no engine given");
  // The engines compute in one dtype, which the trainer casts its weights to.
  const auto timeout = connection.options.timeout();
  std::string dtype;
  for (size_t i = 0; i < connection.engines.size(); ++i) {
    const auto& engine = connection.engines[i];
    const engine::EngineInfo info = engine.call(&serving::RolloutEngine::info).get(timeout);
    if (i > 0 && info.dtype != dtype) {
      throw ConfigError("the rollout engines of one trainer must share a dtype: engine " +
                        std::to_string(i) + " (" + engine.label() + ") computes in " + info.dtype +
                        ", engine 0 in " + dtype);
    }
    dtype = info.dtype;
  }
  state_->weight_syncer.reset();  // its buffers and group go before the new ones form
  SyncedWeights weights;
  const models::LoraOptions& lora = state_->options.lora;
  if (lora.enabled() && lora.sync == models::LoraSync::kAdapter) {
    weights.all = lora_adapter_weights(*state_->model, /*adapters_only=*/false);
    weights.changed = lora_adapter_weights(*state_->model, /*adapters_only=*/true);
  } else if (lora.enabled()) {
    weights.all = merged_lora_weights(*state_->model, /*adapted_only=*/false);
    weights.changed = merged_lora_weights(*state_->model, /*adapted_only=*/true);
  } else {
    weights.all = sharded_parameters(state_->model->sharded());
  }
  state_->weight_syncer = std::make_unique<WeightSyncer>(
      state_->model->sharded(), std::move(weights),
      models::dtype_from_name(dtype, "the rollout engines' dtype"), connection.engines,
      connection.colocate ? EnginePlacement::kColocated : EnginePlacement::kDisaggregated,
      connection.options, state_->group_name);
}

WeightSyncReport TrainActor::update_weights(int64_t version, bool abort_in_flight) {
  if (!state_ || !state_->weight_syncer) {
    throw Error("TrainActor::update_weights before connect_rollout_engines");
  }
  return state_->weight_syncer->sync(version, abort_in_flight);
}

WeightSyncReport TrainActor::update_engine_weights(int64_t index, int64_t version) {
  if (!state_ || !state_->weight_syncer) {
    throw Error("TrainActor::update_engine_weights before connect_rollout_engines");
  }
  if (index < 0) throw ConfigError("update_engine_weights: engine index " + std::to_string(index));
  return state_->weight_syncer->sync_engine(static_cast<size_t>(index), version);
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
  size_t reference = state_->reference ? state_->reference->sharded().allocated_bytes() : 0;
  if (state_->teacher) reference += state_->teacher->sharded().allocated_bytes();
  size_t frozen = 0;  // a LoRA base, outside the shards
  if (state_->options.lora.enabled()) {
    for (const auto& parameter : state_->model->model()->parameters()) {
      if (!parameter.requires_grad()) frozen += parameter.nbytes();
    }
  }
  return static_cast<int64_t>(state_->model->sharded().allocated_bytes() +
                              state_->optimizer->state_bytes() + reference + frozen);
}

namespace {
const auto train_actor_class =
    actors::ActorClass<TrainActor>("TrainActor")
        .method("init", &TrainActor::init)
        .method("train_step", &TrainActor::train_step)
        .method("compute_log_probs", &TrainActor::compute_log_probs)
        .method("compute_ref_log_probs", &TrainActor::compute_ref_log_probs)
        .method("compute_teacher_log_probs", &TrainActor::compute_teacher_log_probs)
        .method("compute_values", &TrainActor::compute_values)
        .method("save", &TrainActor::save)
        .method("load", &TrainActor::load)
        .method("load_iteration", &TrainActor::load_iteration)
        .method("save_hf", &TrainActor::save_hf)
        .method("save_merged_hf", &TrainActor::save_merged_hf)
        .method("connect_rollout_engines", &TrainActor::connect_rollout_engines)
        .method("update_weights", &TrainActor::update_weights)
        .method("update_engine_weights", &TrainActor::update_engine_weights)
        .method("sleep", &TrainActor::sleep)
        .method("wake_up", &TrainActor::wake_up)
        .method("state_bytes", &TrainActor::state_bytes);
}  // namespace

}  // namespace ooze::trainer
