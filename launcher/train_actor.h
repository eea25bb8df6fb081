// The trainer as an actor: one FSDP rank per TrainActor, W of them in an ActorGroup. The
// runtime gives each its RANK and WORLD_SIZE; rank 0 hosts the collective rendezvous store and
// publishes its address in the head's key-value store, where the other ranks find it.
//
//   auto trainers = ActorGroup<TrainActor>::spawn(2, options);
//   get_all(trainers.call_all(&TrainActor::init, TrainInit{...}));
//   auto results = get_all(trainers.call_each(&TrainActor::train_step,
//                                             [&](int r) { return std::make_tuple(batch_of(r));
//                                             }));
//   get_all(trainers.call_all(&TrainActor::save_hf, std::string("/out/model")));
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ooze::launcher {

struct TrainInit {
  std::string model_dir;   // HF layout: config.json + safetensors
  std::string group_name;  // rendezvous key prefix, unique per trainer group
  double lr = 1e-4;
  double min_lr = 0.0;
  int64_t warmup_iters = 0;
  std::string lr_decay_style = "constant";
  int64_t total_iters = 1;
  double weight_decay = 0.0;
  double clip_grad = 1.0;
  template <class A>
  void serialize(A& ar) {
    ar(model_dir, group_name, lr, min_lr, warmup_iters, lr_decay_style, total_iters, weight_decay,
       clip_grad);
  }
};

// This rank's share of one global batch: token sequences, trained on every next token.
struct TrainBatch {
  std::vector<std::vector<int64_t>> sequences;
  int64_t global_tokens = 0;  // predicted tokens over all ranks: the loss is their mean
  template <class A>
  void serialize(A& ar) {
    ar(sequences, global_tokens);
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

class TrainActor {
 public:
  TrainActor();
  ~TrainActor();
  // Joins the group's collectives and loads the model sharded. Returns the parameter count.
  int64_t init(const TrainInit& init);
  TrainStepResult train_step(const TrainBatch& batch);
  // Per-token log-probabilities of each sequence's next tokens (for RL and evaluation).
  std::vector<std::vector<float>> compute_log_probs(const TrainBatch& batch);
  // Writes the full weights as an HF model directory (rank 0 writes; every rank takes part).
  std::string save_hf(const std::string& dir);
  // Bytes of parameters, gradients and optimizer state this rank holds.
  int64_t state_bytes() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace ooze::launcher
