#include "launcher/rl_loop.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <utility>

#include "actors/runtime.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/timer.h"
#include "fsdp/checkpoint.h"
#include "launcher/async_rollouts.h"
#include "launcher/debug_rollout_data.h"
#include "launcher/engine_supervisor.h"
#include "python/hook_args.h"
#include "rollout/rollout_metrics.h"
#include "rollout/sft_rollout.h"
#include "trainer/trainer_group.h"
#include "trainer/weight_syncer.h"

namespace ooze::launcher {
namespace {

using Clock = std::chrono::steady_clock;

// Mean |old - rollout| log-prob over the counted response tokens: how far the trainer's
// recomputation is from the engines' (Slime's train/train_rollout_logprob_abs_diff).
double logprob_abs_diff(const RolloutBatch& batch) {
  const std::vector<at::Tensor> old = batch.get("old_log_probs");
  const std::vector<at::Tensor> rollout = batch.get("rollout_log_probs");
  double sum = 0, count = 0;
  for (size_t i = 0; i < old.size(); ++i) {
    const at::Tensor& mask = batch.samples[i].response_mask;
    sum += ((old[i] - rollout[i]).abs() * mask).sum().item<double>();
    count += mask.sum().item<double>();
  }
  return count > 0 ? sum / count : 0.0;
}

// The oldest weight version that sampled a token of the rollout: rollout_id when every engine
// had the last sync's weights.
double oldest_weight_version(const rollout::RolloutResult& result) {
  int64_t oldest = -1;
  for (const auto& group : result.groups) {
    for (const rollout::Sample& sample : group) {
      for (int64_t version : sample.weight_versions) {
        if (version >= 0 && (oldest < 0 || version < oldest)) oldest = version;
      }
    }
  }
  return static_cast<double>(oldest);
}

int64_t token_count(const RolloutBatch& batch) {
  int64_t tokens = 0;
  for (const fsdp::PackingSample& sample : batch.samples) tokens += sample.tokens.numel();
  return tokens;
}

// What a checkpoint holds beyond the trainer's own files: where the run stands. It is written
// as SAVE/rollout_state_<iteration>.json before the trainer's checkpoint, whose tracker names
// the iteration only once everything is on disk: a crash in between leaves the previous
// checkpoint the one that loads.
std::string rollout_state_path(const std::string& dir, int64_t iteration) {
  return dir + "/rollout_state_" + std::to_string(iteration) + ".json";
}

// ppo's critic saves its own checkpoints beside the policy's.
std::string critic_dir(const std::string& dir) { return dir + "/critic"; }

nlohmann::json read_rollout_state(const std::string& dir, int64_t iteration) {
  const std::string path = rollout_state_path(dir, iteration);
  std::ifstream in(path);
  const nlohmann::json state = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!in.is_open() || state.is_discarded() || !state.contains("next_rollout_id")) {
    throw FormatError(path + " is missing or not a rollout state: the checkpoint of iteration " +
                      std::to_string(iteration) + " in " + dir + " was not written by ooze train");
  }
  return state;
}

}  // namespace

RlLoop::RlLoop(const Config& config, const TrainPlan& plan, const ExperimentData& data,
               std::optional<rollout::RewardModel>& rewards, const rollout::RolloutHooks& hooks,
               const TrainDataHooks& train_data, RlProcesses& job,
               const trainer::TrainerOptions& trainer, std::ostream& out)
    : config_(config),
      plan_(plan),
      data_(data),
      rewards_(rewards),
      hooks_(hooks),
      train_data_(train_data),
      job_(job),
      trainer_(trainer),
      algorithm_(algorithms::AlgorithmOptions::from_config(config)),
      out_(out),
      log_(config.get<std::string>("output_dir"), out, plan.num_rollout, plan.steps_per_rollout) {
  if (plan.source != RolloutSource::kDebugData) {
    source_ = std::make_unique<rollout::PromptSource>(
        data.prompts, rollout::PromptSourceOptions::fields().read(config));
  }
  if (algorithm_.opd.use_opd && algorithm_.opd.type == algorithms::OpdType::kEngine) {
    const std::vector<std::string> urls =
        algorithm_.opd.launches_teacher_engines()
            ? job.teacher_urls
            : std::vector<std::string>{algorithm_.opd.teacher_url};
    teacher_ = std::make_unique<rollout::TeacherServer>(urls, std::chrono::minutes(30));
  }
  if (plan.with_engines() && plan.fault_tolerance) {
    supervisor_ = std::make_unique<EngineSupervisor>(config, job);
  }
  if (plan.with_engines()) {
    http_router_ = std::make_unique<serving::RouterServer>(serving::ServerOptions{}, job.router);
    nlohmann::json args = config.to_json();
    args["sglang_router_ip"] = "127.0.0.1";
    args["sglang_router_port"] = http_router_->port();
    python::set_hook_args(args);
    manager_ =
        std::make_unique<rollout::RolloutManager>(rollout::RolloutOptions::fields().read(config),
                                                  *source_, *job.router, data.tokenizer, *rewards_);
    manager_->set_teacher(teacher_.get());
  }
}

RlLoop::~RlLoop() = default;

bool RlLoop::takes_turns() const {
  const bool offload = plan_.offload == "on" || (plan_.offload == "auto" && job_.on_gpus);
  return offload && plan_.colocate && plan_.with_trainers && plan_.with_engines();
}

bool RlLoop::evaluating() const {
  return manager_ && data_.eval_options.eval_interval > 0 &&
         (!data_.eval_datasets.empty() || manager_->has_eval_function());
}

void RlLoop::on_every_engine(void (serving::RolloutEngine::*method)()) {
  std::vector<actors::Future<void>> calls;
  for (const auto& engine : job_.engines) calls.push_back(engine.call(method));
  actors::get_all(std::move(calls));
}

void RlLoop::run() {
  const int64_t first_rollout = resume();
  startup_seconds_ = seconds_since(job_.started);
  if (takes_turns()) actors::get_all(job_.trainers.call_all(&trainer::TrainActor::sleep));
  // With --async, generation runs on a thread of its own, ahead of training by at most
  // --max-staleness rollouts.
  std::optional<AsyncRollouts> rollouts;
  if (plan_.async_training) {
    rollouts.emplace(
        first_rollout, plan_.num_rollout, plan_.max_staleness,
        [this](int64_t rollout_id) { return generate_rollout(rollout_id); },
        [this] { return generation_state(); });
    async_ = &*rollouts;
  }
  try {
    for (int64_t rollout_id = first_rollout; rollout_id < plan_.num_rollout; ++rollout_id) {
      const Clock::time_point start = Clock::now();
      if (supervisor_) engines_restarted_ += supervisor_->recover(rollout_id);
      GeneratedRollout generated = async_ ? async_->next() : generate_rollout(rollout_id);
      learn(rollout_id, std::move(generated), seconds_since(start), start);
    }
  } catch (...) {
    // Else the generation thread would finish the rollout it is in before the error leaves.
    if (async_) manager_->cancel();
    throw;
  }
  async_ = nullptr;
  rollouts.reset();
  if (evaluating()) {
    log_.eval(plan_.num_rollout, evaluate(plan_.num_rollout));  // the final policy
  }
  const std::string save_hf = config_.get<std::string>("save_hf");
  if (!save_hf.empty() && plan_.with_trainers) {
    if (takes_turns()) actors::get_all(job_.trainers.call_all(&trainer::TrainActor::wake_up));
    actors::get_all(job_.trainers.call_all(&trainer::TrainActor::save_hf, save_hf));
    out_ << "final policy written to " << save_hf << std::endl;
  }
  const std::string merged = config_.get<std::string>("save_hf_merged");
  if (!merged.empty() && plan_.with_trainers) {
    if (takes_turns()) actors::get_all(job_.trainers.call_all(&trainer::TrainActor::wake_up));
    actors::get_all(job_.trainers.call_all(&trainer::TrainActor::save_merged_hf, merged));
    out_ << "final policy with its adapters merged written to " << merged << std::endl;
  }
}

// --load: the trainer's state, then where the rollouts stood; the engines, started from the
// initial model, get the loaded weights before they generate. A --load directory with no
// checkpoint yet starts the run from --hf-checkpoint (as Megatron and Slime do), so that one
// command both starts a run and resumes it (--load and --save the same directory); unless
// --ckpt-step names an iteration, which must then be there.
//
// Either way, lines an earlier attempt left in metrics.jsonl and TensorBoard for the rollouts this
// run does (again) go: every rollout is recorded once.
int64_t RlLoop::resume() {
  const std::string load_dir = config_.get<std::string>("load");
  if (!load_dir.empty() && plan_.with_trainers) {
    const bool iteration_named = config_.get<int64_t>("ckpt_step") >= 0;
    if (iteration_named || fsdp::latest_checkpoint_iteration(load_dir)) {
      const int64_t first_rollout = load(load_dir);
      log_.resume_at(first_rollout, optimizer_steps_);
      return first_rollout;
    }
    out_ << "--load " << load_dir << " holds no checkpoint yet: the run starts from --hf-checkpoint"
         << std::endl;
  }
  // Starting over where the policy has no checkpoint yet: a critic checkpoint there is of a
  // rollout this run does again.
  const std::string save_dir = config_.get<std::string>("save");
  if (plan_.with_critic && !save_dir.empty() && !fsdp::latest_checkpoint_iteration(save_dir)) {
    fsdp::rewind_checkpoints(critic_dir(save_dir), std::nullopt);
  }
  log_.resume_at(0, 0);
  return 0;
}

int64_t RlLoop::load(const std::string& load_dir) {
  const Clock::time_point start = Clock::now();
  const fsdp::TrainingProgress progress =
      actors::get_all(job_.trainers.call_all(&trainer::TrainActor::load, load_dir)).front();
  load_seconds_ = seconds_since(start);
  const nlohmann::json state = read_rollout_state(load_dir, progress.iteration);
  const int64_t first_rollout = state["next_rollout_id"].get<int64_t>();
  optimizer_steps_ = state["optimizer_steps"].get<int64_t>();
  if (plan_.with_critic) {
    const int64_t critic_iteration = state["critic_iteration"].get<int64_t>();
    actors::get_all(job_.critics.call_all(&trainer::TrainActor::load_iteration,
                                          critic_dir(load_dir), critic_iteration));
    // Resuming in place: a critic checkpoint after that one is of a rollout this run does again.
    const std::string save_dir = config_.get<std::string>("save");
    if (!save_dir.empty() && std::filesystem::weakly_canonical(save_dir) ==
                                 std::filesystem::weakly_canonical(load_dir)) {
      fsdp::rewind_checkpoints(critic_dir(load_dir), critic_iteration);
    }
  }
  if (manager_ && !state["rollout_manager"].is_null()) manager_->restore(state["rollout_manager"]);
  if (manager_) manager_->load_data_source(first_rollout - 1);
  if (!manager_ && source_ && state.contains("prompt_source")) {
    source_->restore(state["prompt_source"], rollout_state_path(load_dir, progress.iteration));
  }
  if (plan_.with_engines()) {
    actors::get_all(job_.trainers.call_all(&trainer::TrainActor::update_weights, first_rollout,
                                           /*abort_in_flight=*/true));
  }
  out_ << "resumed from " << load_dir << " at iteration " << progress.iteration << ", rollout "
       << first_rollout << std::endl;
  return first_rollout;
}

// An evaluation of the policy that will train on the rollout, when one is due, then the rollout.
// With --async this runs on the generation thread: the evaluation waits until the engines hold
// that policy, and buffered partial groups with tokens older than the staleness bound allows are
// dropped.
GeneratedRollout RlLoop::generate_rollout(int64_t rollout_id) {
  GeneratedRollout generated;
  if (evaluating() && rollout_id % data_.eval_options.eval_interval == 0) {
    if (async_) async_->wait_for_version(rollout_id);
    generated.eval = evaluate(rollout_id);
  }
  const Clock::time_point start = Clock::now();
  int64_t stale_groups = 0;
  if (async_ && manager_) {
    stale_groups = manager_->drop_buffered_older_than(rollout_id - plan_.max_staleness);
  }
  generated.result = generate(rollout_id);
  generated.seconds = seconds_since(start);
  if (async_) generated.result.metrics["rollout/stale_groups_dropped"] = stale_groups;
  return generated;
}

// Everything after generation, on the loop's thread: score, advantages, train, sync, save, and
// the rollout's line. `train_wait` is how long the trainer waited for the rollout.
void RlLoop::learn(int64_t rollout_id, GeneratedRollout generated, double train_wait,
                   Clock::time_point step_start) {
  if (!generated.eval.empty()) log_.eval(rollout_id, generated.eval);
  rollout::RolloutResult& result = generated.result;
  MetricLine line = result.metrics;
  if (hooks_.log_rollout(rollout_id, result.groups, result.metrics, generated.seconds)) {
    // The user's log function took the rollout's own metrics over.
    for (auto it = line.begin(); it != line.end();) {
      it = it->first.rfind("rollout/", 0) == 0 ? line.erase(it) : std::next(it);
    }
  }
  if (const int64_t removed = hooks_.filter_samples(result.groups); removed > 0) {
    line["rollout/removed_samples"] = static_cast<double>(removed);
  }
  line["perf/rollout_time"] = generated.seconds;
  if (plan_.with_engines()) {
    const double oldest = oldest_weight_version(result);
    line["rollout/oldest_weight_version"] = oldest;
    // How many versions the oldest token is behind the policy that trains on it (version
    // rollout_id).
    if (oldest >= 0) line["rollout/max_staleness"] = static_cast<double>(rollout_id) - oldest;
  }
  const std::string save_debug_data = config_.get<std::string>("save_debug_rollout_data");
  if (!save_debug_data.empty()) {
    save_debug_rollout_data(debug_rollout_path(save_debug_data, rollout_id), result.groups);
  }

  Clock::time_point start;
  if (plan_.with_trainers) {
    line["perf/train_wait_time"] = train_wait;
    if (takes_turns()) {
      start = Clock::now();
      on_every_engine(&serving::RolloutEngine::release_memory);
      actors::get_all(job_.trainers.call_all(&trainer::TrainActor::wake_up));
      line["perf/wake_up_time"] = seconds_since(start);
    }
    RolloutBatch batch = batch_of(result.groups);
    score(batch, line);
    train_data_.postprocess(rollout_id, batch);
    train(rollout_id, batch, line);
    if (plan_.with_engines()) {
      // Both resident for the sync; then the trainer leaves the GPU to the engines.
      start = Clock::now();
      if (takes_turns()) on_every_engine(&serving::RolloutEngine::resume_memory);
      double sleep_time = seconds_since(start);
      sync(rollout_id + 1, line);
      if (async_) async_->weights_synced(rollout_id + 1);
      if (takes_turns()) {
        start = Clock::now();
        actors::get_all(job_.trainers.call_all(&trainer::TrainActor::sleep));
        line["perf/sleep_time"] = sleep_time + seconds_since(start);
      }
    }
  }
  if (supervisor_) {
    line["rollout/engines_restarted"] = static_cast<double>(engines_restarted_);
    engines_restarted_ = 0;
  }
  line["perf/step_time"] = seconds_since(step_start);
  // The checkpoint written after the previous rollout.
  if (last_save_seconds_) line["perf/save_time"] = *std::exchange(last_save_seconds_, {});
  if (startup_seconds_) line["perf/startup_time"] = *std::exchange(startup_seconds_, {});
  if (load_seconds_) line["perf/load_time"] = *std::exchange(load_seconds_, {});
  // The rollout's line before its checkpoint: killed in between, the resumed run does the
  // rollout again and drops the line (RunLog::resume_at); the other way round it would be lost.
  log_.rollout(rollout_id, line);
  const std::string save_dir = config_.get<std::string>("save");
  const int64_t save_interval = config_.get<int64_t>("save_interval");
  const bool last = rollout_id + 1 == plan_.num_rollout;
  if (!save_dir.empty() && plan_.with_trainers &&
      (last || (save_interval > 0 && (rollout_id + 1) % save_interval == 0))) {
    log_.before_checkpoint();
    start = Clock::now();
    save(rollout_id + 1);
    last_save_seconds_ = seconds_since(start);
  }
}

rollout::RolloutResult RlLoop::generate(int64_t rollout_id) {
  if (plan_.source == RolloutSource::kEngines) return manager_->generate(rollout_id);
  rollout::RolloutResult result;
  result.rollout_id = rollout_id;
  if (plan_.source == RolloutSource::kSft) {
    result.groups =
        rollout::sft_rollout(*source_, data_.tokenizer, config_.get<int64_t>("rollout_batch_size"));
    result.metrics["rollout/response_len/mean"] = 0;
    for (const auto& group : result.groups) {
      result.metrics["rollout/response_len/mean"] +=
          static_cast<double>(group.front().response_length) / result.groups.size();
    }
    return result;
  }
  const std::string pattern = config_.get<std::string>("load_debug_rollout_data");
  result.groups = load_debug_rollout_data(debug_rollout_path(pattern, rollout_id));
  result.metrics = rollout::rollout_metrics(result.groups, config_.get<std::string>("reward_key"));
  if (teacher_) {  // saved samples a teacher did not score yet
    const double start = teacher_->busy_seconds();
    for (std::vector<rollout::Sample>& group : result.groups) teacher_->score(group);
    result.metrics["perf/teacher_log_probs_time"] = teacher_->busy_seconds() - start;
  }
  return result;
}

// The rollout as the trainer takes it: the user's train data
// (--custom-convert-samples-to-train-data-path), or the samples themselves with the rewards of
// --custom-reward-post-process-path when it is given.
RolloutBatch RlLoop::batch_of(const std::vector<std::vector<rollout::Sample>>& groups) const {
  if (train_data_.converts_samples()) {
    const bool needs_rollout_log_probs =
        plan_.use_rollout_logprobs || algorithm_.policy_loss.mismatch.needs_rollout_log_probs();
    return train_data_.convert_samples(groups, needs_rollout_log_probs);
  }
  RolloutBatch batch = rollout_batch(groups, config_.get<std::string>("reward_key"));
  if (std::optional<std::vector<double>> rewards = hooks_.post_process_rewards(groups)) {
    batch.rewards = std::move(*rewards);
    batch.rewards_are_final = true;
  }
  if (algorithm_.opd.self_distills()) {
    add_privileged_prompts(batch, groups, algorithm_.opd.opsd_privileged_info_key, data_.tokenizer);
  }
  return batch;
}

// --opd-type engine: what the teacher's engines gave each sample during the rollout.
std::vector<at::Tensor> RlLoop::teacher_log_probs_of_samples(const RolloutBatch& batch) const {
  std::vector<at::Tensor> log_probs;
  for (size_t i = 0; i < batch.samples.size(); ++i) {
    const fsdp::PackingSample& sample = batch.samples[i];
    auto found = sample.response_values.find("teacher_log_probs");
    if (found != sample.response_values.end()) {
      log_probs.push_back(found->second);
    } else if (sample.response_length == 0) {
      log_probs.push_back(at::zeros({0}, at::kFloat));  // nothing to score
    } else {
      throw Error("--use-opd --opd-type engine: sample " + std::to_string(i) +
                  " of the rollout's batch has no teacher_log_probs. The teacher scores every "
                  "kept sample during the rollout; a --custom-convert-samples-to-train-data-path "
                  "function must keep the samples' tokens (or pass \"teacher_log_probs\")");
    }
  }
  return log_probs;
}

void RlLoop::score(RolloutBatch& batch, MetricLine& line) {
  if (trainer_.step.loss_type == trainer::LossType::kSftLoss) return;  // nothing to compare against
  const trainer::TrainBatch everything{batch.samples};
  Clock::time_point start = Clock::now();
  batch.set("old_log_probs",
            plan_.use_rollout_logprobs
                ? batch.get("rollout_log_probs")
                : trainer::log_probs(job_.trainers, everything, trainer_.step.packing,
                                     trainer_.step.temperature));
  line["perf/log_probs_time"] = seconds_since(start);
  if (batch.has("rollout_log_probs")) {  // a converted batch may have none
    line["train/train_rollout_logprob_abs_diff"] = logprob_abs_diff(batch);
  }
  if (plan_.needs_reference) {
    start = Clock::now();
    batch.set("ref_log_probs",
              trainer::log_probs(job_.trainers, everything, trainer_.step.packing,
                                 trainer_.step.temperature, trainer::Scorer::kReference));
    line["perf/ref_log_probs_time"] = seconds_since(start);
  }
  if (plan_.with_critic) {
    start = Clock::now();
    batch.set("values", trainer::values(job_.critics, everything, trainer_.step.packing));
    line["perf/values_time"] = seconds_since(start);
  }
  const algorithms::OpdOptions& opd = algorithm_.opd;
  if (opd.shapes_advantages()) {
    if (opd.type == algorithms::OpdType::kTrainer) {
      start = Clock::now();
      batch.set("teacher_log_probs",
                trainer::log_probs(job_.trainers, everything, trainer_.step.packing,
                                   trainer_.step.temperature, trainer::Scorer::kTeacher));
      line["perf/teacher_log_probs_time"] = seconds_since(start);
    } else {
      // Scored during the rollout; perf/teacher_log_probs_time came with its metrics.
      batch.set("teacher_log_probs", teacher_log_probs_of_samples(batch));
    }
    std::vector<at::Tensor> masks;
    for (const fsdp::PackingSample& sample : batch.samples) masks.push_back(sample.response_mask);
    line["train/opd_kl"] =
        algorithms::mean_opd_kl(batch.get("old_log_probs"), batch.get("teacher_log_probs"), masks);
  }
  algorithms::AdvantageOptions advantage = algorithm_.advantage;
  if (batch.rewards_are_final) {
    // --custom-reward-post-process-path normalised them already.
    advantage.disable_rewards_normalization = true;
    advantage.disable_grpo_std_normalization = true;
  }
  compute_advantages(batch, advantage, algorithm_.policy_loss.kl_loss_type, opd);
}

// Each optimizer step logs a line of its own, "train/step" counting the policy's steps over the
// run. With ppo the critic takes the same step at the same time (its keys critic/*); the first
// --num-critic-only-steps rollouts train the critic alone.
void RlLoop::train(int64_t rollout_id, const RolloutBatch& batch, MetricLine& line) {
  const Clock::time_point start = Clock::now();
  const bool policy_trains = rollout_id >= config_.get<int64_t>("num_critic_only_steps");
  int64_t state_bytes = 0, peak_rss_bytes = 0;  // the largest trainer rank's, over the steps
  for (const trainer::TrainBatch& step : batch.global_batches(plan_.global_batch_size)) {
    std::optional<trainer::PendingTrainStep> critic_step;
    if (plan_.with_critic)
      critic_step = trainer::start_train_step(job_.critics, step, trainer_.step.packing);
    MetricLine step_line;
    if (policy_trains) {
      const trainer::TrainStepResult trained =
          trainer::train_step(job_.trainers, step, trainer_.step.packing);
      for (const auto& [key, value] : trained.metrics) step_line["train/" + key] = value;
      step_line["train/grad_norm"] = trained.grad_norm;
      step_line["train/lr"] = trained.lr;
      state_bytes = std::max(state_bytes, trained.state_bytes);
      peak_rss_bytes = std::max(peak_rss_bytes, trained.peak_rss_bytes);
      ++optimizer_steps_;
    }
    step_line["train/step"] = static_cast<double>(optimizer_steps_);
    if (critic_step) {
      const trainer::TrainStepResult critic = critic_step->wait();
      for (const auto& [key, value] : critic.metrics) step_line["critic/" + key] = value;
      step_line["critic/grad_norm"] = critic.grad_norm;
      step_line["critic/lr"] = critic.lr;
    }
    log_.train_step(rollout_id, step_line);
  }
  line["perf/train_time"] = seconds_since(start);
  line["perf/train_tokens_per_sec"] =
      static_cast<double>(token_count(batch)) / std::max(line["perf/train_time"], 1e-9);
  if (peak_rss_bytes > 0) {
    // A trainer rank's memory: its shards (falling as 1/W) and what the steps held on top
    // (gathered layers, gradients in flight, activations, logits).
    line["perf/trainer_state_gb"] = static_cast<double>(state_bytes) / 1e9;
    line["perf/trainer_peak_rss_gb"] = static_cast<double>(peak_rss_bytes) / 1e9;
  }
}

void RlLoop::sync(int64_t version, MetricLine& line) {
  const Clock::time_point start = Clock::now();
  // With --async the next rollout is generating: its requests continue with the new weights.
  std::vector<trainer::WeightSyncReport> synced;
  try {
    synced = actors::get_all(job_.trainers.call_all(&trainer::TrainActor::update_weights, version,
                                                    /*abort_in_flight=*/!async_));
  } catch (const actors::RemoteError& error) {
    // An engine died or hung mid-sync: with --use-fault-tolerance it is restarted and every
    // engine the sync missed is brought to the version.
    if (!supervisor_ || !trainer::is_weight_sync_error(error)) throw;
    OOZE_LOG(WARN) << "weight sync to version " << version << " failed (" << error.what()
                   << "); recovering the engines";
    engines_restarted_ += supervisor_->recover(version);
  }
  line["perf/update_weights_time"] = seconds_since(start);
  if (!synced.empty()) {
    line["perf/update_weights_bytes"] = static_cast<double>(synced.front().bytes);
    line["perf/update_weights_mb_per_sec"] =
        synced.front().bytes / 1e6 / std::max(line["perf/update_weights_time"], 1e-9);
    // Where the slowest rank spent it (WeightSyncReport's split); the rest is the calls' trip.
    for (const trainer::WeightSyncReport& report : synced) {
      for (const auto& [key, seconds] :
           {std::pair{"perf/update_weights_pack_time", report.pack_seconds},
            std::pair{"perf/update_weights_transfer_time", report.transfer_seconds},
            std::pair{"perf/update_weights_control_time", report.control_seconds}}) {
        double& slowest = line[key];
        slowest = std::max(slowest, seconds);
      }
    }
  }
}

MetricLine RlLoop::evaluate(int64_t rollout_id) {
  const Clock::time_point start = Clock::now();
  rollout::Evaluation evaluation =
      manager_->evaluate(data_.eval_datasets, data_.eval_options, rollout_id);
  MetricLine line = evaluation.metrics;
  if (hooks_.log_eval(rollout_id, evaluation.data, evaluation.metrics)) {
    // The user's log function took the evaluation's own metrics over.
    for (auto it = line.begin(); it != line.end();) {
      it = it->first.rfind("eval/", 0) == 0 ? line.erase(it) : std::next(it);
    }
  }
  line["perf/eval_time"] = seconds_since(start);
  return line;
}

// Where generation stands: the prompt position and the partial-rollout buffer.
nlohmann::json RlLoop::generation_state() const {
  nlohmann::json state = {{"rollout_manager", manager_ ? manager_->state() : nlohmann::json()}};
  if (!manager_ && source_) state["prompt_source"] = source_->state();
  return state;
}

// The critic's checkpoint comes first, then the rollout state naming it, then the policy's,
// whose tracker makes the whole checkpoint the one that loads. While the critic trains alone the
// policy's iteration stands still: its checkpoint is already on disk, and the rewritten rollout
// state is what moves the checkpoint on.
void RlLoop::save(int64_t next_rollout_id) {
  const std::string save_dir = config_.get<std::string>("save");
  // With --async the generation is ahead: a resumed run generates from where the next rollout
  // started.
  nlohmann::json state = async_ ? async_->state_before(next_rollout_id) : generation_state();
  state["next_rollout_id"] = next_rollout_id;
  state["optimizer_steps"] = optimizer_steps_;
  std::filesystem::create_directories(save_dir);
  if (plan_.with_critic) {
    state["critic_iteration"] =
        actors::get_all(job_.critics.call_all(&trainer::TrainActor::save, critic_dir(save_dir)))
            .front()
            .iteration;
  }
  // A --data-source-path class writes its own state, named by the last rollout it covers.
  if (manager_) manager_->save_data_source(next_rollout_id - 1);
  write_file_atomically(rollout_state_path(save_dir, optimizer_steps_), state.dump(2) + "\n");
  if (fsdp::latest_checkpoint_iteration(save_dir) == optimizer_steps_) return;
  if (takes_turns()) actors::get_all(job_.trainers.call_all(&trainer::TrainActor::wake_up));
  actors::get_all(job_.trainers.call_all(&trainer::TrainActor::save, save_dir));
  if (takes_turns()) actors::get_all(job_.trainers.call_all(&trainer::TrainActor::sleep));
}

}  // namespace ooze::launcher
