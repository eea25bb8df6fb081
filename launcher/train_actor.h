// The trainer as an actor: one FSDP rank per TrainActor, W of them in an ActorGroup. The
// runtime gives each its RANK and WORLD_SIZE; rank 0 hosts the collective rendezvous store and
// publishes its address in the head's key-value store, where the other ranks find it.
//
//   auto trainers = ActorGroup<TrainActor>::spawn(2, options);
//   get_all(trainers.call_all(&TrainActor::init, TrainInit{model_dir, group, trainer_options}));
//   get_all(trainers.call_all(&TrainActor::load, std::string("/ckpt")));   // to resume
//   auto results = get_all(trainers.call_each(&TrainActor::train_step,
//                                             [&](int r) { return std::make_tuple(batch_of(r));
//                                             }));
//   get_all(trainers.call_all(&TrainActor::save, std::string("/ckpt")));
//   get_all(trainers.call_all(&TrainActor::save_hf, std::string("/out/model")));
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "launcher/trainer_options.h"

namespace ooze::launcher {

struct TrainInit {
  std::string model_dir;   // HF layout: config.json + safetensors
  std::string group_name;  // rendezvous key prefix, unique per trainer group
  TrainerOptions options;
  template <class A>
  void serialize(A& ar) {
    ar(model_dir, group_name, options);
  }
};

// This rank's share of one global batch: token sequences, trained on every next token.
struct TrainBatch {
  std::vector<std::vector<int64_t>> sequences;
  int64_t global_tokens = 0;   // predicted tokens over all ranks: the loss is their mean
  int64_t global_samples = 0;  // sequences over all ranks: counted into consumed_samples
  template <class A>
  void serialize(A& ar) {
    ar(sequences, global_tokens, global_samples);
  }
};

struct TrainStepResult {
  double loss_sum = 0.0;   // summed over this rank's predicted tokens
  int64_t tokens = 0;      // this rank's predicted tokens
  double grad_norm = 0.0;  // global (same on every rank)
  double lr = 0.0;
  bool skipped = false;
  double compute_seconds = 0.0;  // forward + backward + optimizer on this rank
  template <class A>
  void serialize(A& ar) {
    ar(loss_sum, tokens, grad_norm, lr, skipped, compute_seconds);
  }
};

// Where training stands: saved in checkpoints, returned by save and load.
struct TrainProgress {
  int64_t iteration = 0;         // optimizer steps taken (skipped ones included)
  int64_t consumed_samples = 0;  // sequences trained on, over all ranks
  template <class A>
  void serialize(A& ar) {
    ar(iteration, consumed_samples);
  }
};

class TrainActor {
 public:
  TrainActor();
  ~TrainActor();
  // Joins the group's collectives and loads the model sharded. Returns the parameter count.
  int64_t init(const TrainInit& init);
  TrainStepResult train_step(const TrainBatch& batch);
  // Per-token log-probabilities of each sequence's next tokens (for RL and evaluation).
  std::vector<std::vector<float>> compute_log_probs(const TrainBatch& batch);
  // Writes a sharded checkpoint of weights, AdamW state, schedule position and RNG into
  // DIR/iter_<iteration> (fsdp/checkpoint.h); every rank takes part.
  TrainProgress save(const std::string& dir);
  // Loads DIR's newest checkpoint (or options.ckpt_step), saved at any world size; the
  // optimizer and RNG unless options.load_optim / load_rng are off. Training continues
  // exactly where the saved run was.
  TrainProgress load(const std::string& dir);
  // Writes the full weights as an HF model directory (rank 0 writes; every rank takes part).
  std::string save_hf(const std::string& dir);
  // Move every piece of trainer state (master weights, gradients, AdamW moments) to host
  // memory and back, so colocated rollout engines can use the GPU in between; no-ops on the CPU.
  void sleep();
  void wake_up();
  // Bytes of parameters, gradients and optimizer state this rank holds.
  int64_t state_bytes() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace ooze::launcher
