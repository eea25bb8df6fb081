// The trainer as an actor: one FSDP rank per TrainActor, W of them in an ActorGroup. The
// runtime gives each its RANK and WORLD_SIZE; the ranks form their collective group through the
// actor runtime's key-value store (so they may sit on any nodes), over NCCL when they compute on
// a GPU and Gloo on the CPU. Each step is trainer/train_step.h: the caller deals the global batch
// out (fsdp::split_across_ranks), every rank plans, packs and trains on its share.
//
//   auto trainers = ActorGroup<TrainActor>::spawn(2, options);
//   TrainInit init;  // model_dir, group_name, options; reference_model for KL-regularised RL
//   get_all(trainers.call_all(&TrainActor::init, init));
//   get_all(trainers.call_all(&TrainActor::load, std::string("/ckpt")));   // to resume
//   auto results = get_all(trainers.call_each(&TrainActor::train_step,
//                                             [&](int r) { return std::make_tuple(batch_of(r));
//                                             }));
//   results[0].metrics.at("loss");   // the step's, the same on every rank
//   get_all(trainers.call_all(&TrainActor::save, std::string("/ckpt")));
//   get_all(trainers.call_all(&TrainActor::save_hf, std::string("/out/model")));
//
// After each step the new weights go to the rollout engines (trainer/weight_syncer.h):
//   get_all(trainers.call_all(&TrainActor::connect_rollout_engines,
//                             RolloutEngineConnection{engines, /*colocate=*/true, sync_options}));
//   get_all(trainers.call_all(&TrainActor::update_weights, version, /*abort_in_flight=*/true));
#pragma once

#include <cereal/types/map.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/runtime.h"
#include "fsdp/checkpoint.h"
#include "fsdp/packing.h"
#include "serving/rollout_engine_actor.h"
#include "trainer/train_step.h"
#include "trainer/trainer_options.h"
#include "trainer/weight_syncer.h"

namespace ooze::trainer {

// What a group of ranks trains: the policy, or the critic of ppo (the same transformer with a
// value head, score.weight, trained on the value loss; options.loss_type kValueLoss).
enum class TrainerRole { kActor, kCritic };

struct TrainInit {
  std::string model_dir;   // HF layout: config.json + safetensors
  std::string group_name;  // rendezvous key prefix, unique per trainer group
  TrainerOptions options;
  // A critic loads model_dir's score.weight when it has one, else starts its value head at 0.
  TrainerRole role = TrainerRole::kActor;
  // The frozen reference model of KL-regularised RL (--use-kl-loss, --kl-coef) and the teacher of
  // self-distillation (--opd-type self), sharded like the policy: the HF model in `ref_load`
  // (--ref-load), or else the initial policy (with LoRA: the base, adapters off).
  bool reference_model = false;
  std::string ref_load;
  // On-policy distillation with --opd-type trainer: the teacher's HF directory, loaded frozen
  // and sharded like the reference model (compute_teacher_log_probs). Empty: none.
  std::string teacher_load;
  // The run's flags as JSON (Config::to_json): the `args` of a Python loss in this rank
  // (python/hook_args.h). Empty: none.
  std::string hook_args;
  template <class A>
  void serialize(A& ar) {
    ar(model_dir, group_name, options, role, reference_model, ref_load, teacher_load, hook_args);
  }
};

// This rank's share of one global batch (fsdp/packing.h: tokens, response length, per-token
// values); fsdp::language_modeling_sample makes a plain language-modelling one.
struct TrainBatch {
  std::vector<fsdp::PackingSample> samples;
  template <class A>
  void serialize(A& ar) {
    ar(samples);
  }
};

// The rollout engines a trainer group keeps up to date, as every rank must see them.
struct RolloutEngineConnection {
  std::vector<actors::ActorHandle<serving::RolloutEngine>> engines;  // the same order everywhere
  // --colocate: rank r serves the engines i with i mod W == r, through shared memory on its
  // node; otherwise rank 0 broadcasts to every engine.
  bool colocate = false;
  WeightSyncOptions options;
  template <class A>
  void serialize(A& ar) {
    ar(engines, colocate, options);
  }
};

class TrainActor {
 public:
  TrainActor();
  ~TrainActor();
  // Joins the group's collectives and loads the model sharded. Returns the parameter count.
  int64_t init(const TrainInit& init);
  TrainStepResult train_step(const TrainBatch& batch);
  // log p of every response token of each sample (and its entropy with `with_entropy`), in the
  // batch's order, at `temperature` (trainer::compute_log_probs); a collective like train_step.
  ResponseLogProbs compute_log_probs(const TrainBatch& batch, double temperature,
                                     bool with_entropy);
  // The same under the frozen reference model (init with reference_model); a collective.
  ResponseLogProbs compute_ref_log_probs(const TrainBatch& batch, double temperature);
  // The same under the teacher of on-policy distillation (init with teacher_load); a collective.
  ResponseLogProbs compute_teacher_log_probs(const TrainBatch& batch, double temperature);
  // A critic's value of every response token of each sample ([R_i] fp32, fsdp::compute_values);
  // a collective.
  std::vector<at::Tensor> compute_values(const TrainBatch& batch);
  // Writes a sharded checkpoint of weights, AdamW state, schedule position and RNG into
  // DIR/iter_<iteration> (fsdp/checkpoint.h); every rank takes part.
  fsdp::TrainingProgress save(const std::string& dir);
  // Loads DIR's newest checkpoint (or options.checkpoint.iteration), saved at any world size; the
  // optimizer and RNG unless options.load_optim / load_rng are off. Training continues
  // exactly where the saved run was.
  fsdp::TrainingProgress load(const std::string& dir);
  // The same at `iteration` (whatever the tracker names; -1: what load() takes).
  fsdp::TrainingProgress load_iteration(const std::string& dir, int64_t iteration);
  // Writes the full weights as an HF model directory (rank 0 writes; every rank takes part); with
  // LoRA the PEFT adapter directory.
  std::string save_hf(const std::string& dir);
  // With LoRA: the model with its adapters merged in, as a plain HF model directory
  // (--save-hf-merged); a collective like save_hf.
  std::string save_merged_hf(const std::string& dir);
  // Keeps `connection`'s engines up to date from now on (they must all have one dtype; the
  // trainer casts to it). Replaces an earlier connection.
  void connect_rollout_engines(const RolloutEngineConnection& connection);
  // Sends the current weights to every engine as `version` (newer than theirs), pausing their
  // generation meanwhile (in-flight requests aborted with `abort_in_flight`, else kept). A
  // collective: every rank calls it. Throws weight_sync::WeightSyncError naming the engines that
  // did not get it (the others did).
  WeightSyncReport update_weights(int64_t version, bool abort_in_flight);
  // Brings engine `index` alone up to `version` (one restarted after a failure); every rank calls
  // it.
  WeightSyncReport update_engine_weights(int64_t index, int64_t version);
  // Move every piece of trainer state (master weights, gradients, AdamW moments) to host
  // memory and back, so colocated rollout engines can use the GPU in between; no-ops on the CPU.
  void sleep();
  void wake_up();
  // Bytes of parameters, gradients, optimizer state and reference weights this rank holds.
  int64_t state_bytes() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace ooze::trainer
