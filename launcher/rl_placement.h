// Where an `ooze train` job's processes run, placed as Slime places them: one placement group
// of TrainPlan::gpus_needed() bundles, one GPU each (a CPU process slot on a machine without
// GPUs), packed onto as few nodes as possible.
//   - Trainer rank r takes bundle r (bundles come ordered by node and GPU, so a node's ranks
//     are contiguous).
//   - Colocated, engine e shares bundle e with rank e: each takes half of it, and weights reach
//     the engine through shared memory (CUDA IPC on a GPU).
//   - Disaggregated, engine e takes bundle world_size + e of its own; weights go by broadcast.
//   - On-policy distillation's teacher engines (--opd-type engine --opd-teacher-hf-checkpoint)
//     take the last --opd-teacher-num-engines bundles, one each, colocated or not; they load
//     the teacher and never receive weights.
// Without --address (or $OOZE_ADDRESS) the actor runtime is embedded in this process and this
// machine is the cluster; with it, the job joins a cluster started with `ooze start`, with the
// token found as `ooze start` finds it (find_cluster_token). The engines' HTTP servers listen at
// their node's address, where the router in this process reaches them from any machine. Where
// each rank and engine landed is logged, node by node.
//
//   RlProcesses job = start_rl_processes(config, plan, init);   // trainers, engines, router
//   job.trainers ... job.router ...
//   actors::shutdown();                                         // kills them all
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include "actors/placement_group.h"
#include "core/config.h"
#include "launcher/train_plan.h"
#include "serving/rollout_engine_actor.h"
#include "serving/router.h"
#include "trainer/trainer_group.h"

namespace ooze::launcher {

struct RlProcesses {
  // When start_rl_processes began (before the runtime): the run's start-up counts from here.
  std::chrono::steady_clock::time_point started;
  std::optional<actors::PlacementGroup> placement;
  bool on_gpus = false;            // the bundles are GPUs (else CPU process slots)
  trainer::TrainerGroup trainers;  // empty with --debug-rollout-only
  // ppo's critic: ranks of their own, in a placement group of their own.
  std::optional<actors::PlacementGroup> critic_placement;
  trainer::TrainerGroup critics;
  std::vector<actors::ActorHandle<serving::RolloutEngine>> engines;  // empty without engines
  std::shared_ptr<serving::Router> router;  // over the engines' HTTP servers
  // The distillation teacher's engines, and their HTTP servers' URLs (empty without them).
  std::vector<actors::ActorHandle<serving::RolloutEngine>> teacher_engines;
  std::vector<std::string> teacher_urls;
};

// Starts the actor runtime, reserves the bundles (ConfigError naming the placement flags, before
// any worker starts, when the cluster's nodes cannot hold them, or after a minute when other jobs
// keep them busy), then starts the trainer ranks (init'ed with `init`), the critic's ranks with
// ppo (critic_init), the engines with their HTTP servers, the router, and connects the trainers
// to the engines; then the distillation teacher's engines with their HTTP servers.
RlProcesses start_rl_processes(const Config& config, const TrainPlan& plan,
                               const trainer::TrainInit& init);

// The policy's ranks as `ooze train` inits them: the trainer options of the flags (the schedule
// over the run's optimizer steps), the policy loss, log-probs at the rollouts' temperature, the
// model of --hf-checkpoint, and the reference model when a KL needs it.
trainer::TrainInit policy_init(const Config& config, const TrainPlan& plan);

// The critic of `actor` (the policy's init): the same trainer options, with a value head from
// --critic-load (else the policy's model and a value head at 0), the value loss and --critic-lr.
trainer::TrainInit critic_init(const Config& config, const trainer::TrainInit& actor);

// Engine e of the job as start_rl_processes starts it (and a restart after a fault starts it
// again): a RolloutEngine actor in its bundle, loading the initial model (--hf-checkpoint) ...
actors::ActorHandle<serving::RolloutEngine> spawn_engine(const Config& config,
                                                         const TrainPlan& plan,
                                                         const RlProcesses& job, int e);
// ... and its HTTP server, once the model is loaded: returns its "http://NODE_ADDRESS:PORT".
std::string serve_engine(const actors::ActorHandle<serving::RolloutEngine>& engine);

}  // namespace ooze::launcher
