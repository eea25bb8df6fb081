// Sharded training checkpoints of a FullyShardedModule and its ShardedAdamW, in the layout of
// Megatron / Slime, that load at any world size.
//
//   DIR/latest_checkpointed_iteration.txt     "42": the newest complete checkpoint
//   DIR/iter_0000042/metadata.json            world size, units, parameter layout, optimizer
//                                             hyper-parameters, training progress, and the size
//                                             and CRC-32 of every file below
//   DIR/iter_0000042/model_rank00000.safetensors   rank 0's fp32 master shard of every unit
//   DIR/iter_0000042/optim_rank00000.safetensors   rank 0's AdamW exp_avg / exp_avg_sq shards
//                                                  and its torch RNG state
//   ... one model_ and one optim_ file per rank
//
// Crash safety. Every rank writes its files into DIR/iter_0000042.tmp (each file itself through
// a temporary name, fsync and rename); the ranks then exchange their files' checksums, which is
// the barrier: rank 0 writes metadata.json only once every rank has finished, renames the
// directory to iter_0000042, and only then replaces the tracker (temporary file, fsync,
// rename). A crash at any point leaves the tracker naming the previous checkpoint, which is
// untouched; loads follow the tracker, so a half-written iteration is never picked up (a later
// save of that iteration replaces it). A directory the tracker names is never overwritten.
//
// Resharding. A unit's flat vector (its parameters concatenated, fsdp/flat_param.h) does not
// depend on W; only the padding and the split do. Loading at W' re-splits it: each new rank
// reads, from the memory-mapped files of the old ranks, only the element ranges that overlap
// its new shard (master weights and both AdamW moments), and zeroes its padding.
//
// Both calls are collectives over the model's communicator: every rank calls them, and when
// anything fails on any rank (a write, a missing or corrupted file) every rank throws.
//
//   save_checkpoint("ckpt", {iteration, lr_steps, samples}, fsdp.sharded(), optimizer);
//   TrainingProgress progress = load_checkpoint("ckpt", fsdp.sharded(), &optimizer);
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "fsdp/fully_shard.h"
#include "fsdp/sharded_adamw.h"

namespace ooze::fsdp {

// Megatron's names.
constexpr const char* kLatestIterationFile = "latest_checkpointed_iteration.txt";
constexpr const char* kCheckpointMetadataFile = "metadata.json";

// DIR/iter_0000042 (7 digits, zero-padded).
std::string checkpoint_iteration_dir(const std::string& dir, int64_t iteration);

// Where training stands; saved with the weights and returned by load_checkpoint.
struct TrainingProgress {
  int64_t iteration = 0;           // training iterations done; names the checkpoint directory
  int64_t lr_completed_steps = 0;  // steps the LR schedule has advanced: LrSchedule::lr_at(this)
  int64_t consumed_samples = 0;    // samples (or rollouts) trained on so far
  template <class A>
  void serialize(A& ar) {  // TrainActor::save and load return it through the actor runtime
    ar(iteration, lr_completed_steps, consumed_samples);
  }
};

// Writes checkpoint `progress.iteration` of `model` and `optimizer` under `dir` (created if
// missing) and points the tracker at it. The RNG state saved is each rank's torch default
// generator (and the CUDA one of the shards' device when they live on a GPU). Throws
// ooze::Error before writing anything when the tracker already names this iteration,
// ooze::IoError when writing fails on any rank.
void save_checkpoint(const std::string& dir, const TrainingProgress& progress,
                     FullyShardedModule& model, ShardedAdamW& optimizer);

// The iteration the tracker in `dir` names; nullopt when there is no tracker (no checkpoint yet).
// Throws ooze::FormatError when the tracker does not hold an iteration number.
std::optional<int64_t> latest_checkpoint_iteration(const std::string& dir);

// Points the tracker in `dir` back at `iteration` (whose checkpoint must be there), or, with
// nullopt, at none. The later ones become leftovers of saves that did not count, which a save of
// their iteration replaces. A PPO run does this for its critic when it resumes in place or starts
// over: the critic's checkpoint of a rollout can be on disk while the policy's of the same
// rollout was cut short, and the run does that rollout again.
void rewind_checkpoints(const std::string& dir, std::optional<int64_t> iteration);

struct CheckpointLoadOptions {
  std::optional<int64_t> iteration;  // default: the tracker's (Megatron's --ckpt-step)
  // Restore each rank's RNG state (Megatron's --no-load-rng turns this off). At a world size
  // other than the saved one, rank r takes old rank r mod W's state: exact when every rank was
  // seeded alike, as Slime does with --seed.
  bool load_rng = true;

  // --ckpt-step, --load-rng ("checkpoint" section).
  static const OptionFields<CheckpointLoadOptions>& fields();
};

// Loads a checkpoint saved by save_checkpoint at any world size into `model` (the same
// architecture: unit names, parameter names and shapes must match) and, unless `optimizer` is
// null (weights only, as Megatron's --no-load-optim), its AdamW state and step counts.
// Gathered units are resharded first. Before copying anything it checks that every file the
// load reads exists with the recorded size and CRC-32 (each rank checksums a share of them)
// and that metadata.json describes this model; otherwise it throws ooze::FormatError naming
// the file and what is wrong, on every rank. Throws ooze::IoError when there is no checkpoint.
TrainingProgress load_checkpoint(const std::string& dir, FullyShardedModule& model,
                                 ShardedAdamW* optimizer,
                                 const CheckpointLoadOptions& options = {});

}  // namespace ooze::fsdp
