// The RL loop of `ooze train`, one rollout id at a time, each phase a method read top to bottom
// in generate_rollout() and learn():
//   1. generate   the rollout manager over the engines (or the sft rollout, or saved samples);
//   2. score      old log-probs recomputed by the trainer (the engines' with
//                 --use-rollout-logprobs), reference log-probs when a KL needs them, the
//                 teacher's with --use-opd --opd-type trainer (--opd-type engine: the samples
//                 carry them, scored by the teacher's engines during the rollout);
//   3. advantages over the whole rollout (launcher/rollout_batch.h), of the user's train data
//                 when a Python hook makes it or changes it (launcher/train_data_hooks.h);
//   4. train      --global-batch-size samples per optimizer step, dealt over the trainer ranks;
//   5. sync       the new weights to every engine as version rollout_id + 1;
//   6. report     a line of Slime's metrics (launcher/run_log.h);
// with an evaluation every --eval-interval rollouts and a checkpoint every --save-interval. With
// ppo a critic scores the samples (values) and trains beside the policy.
//
// With --async, generation runs on a thread of its own (launcher/async_rollouts.h): rollout k+1
// is generated while rollout k trains, and weight syncs reach the engines mid-generation.
//
// With --use-fault-tolerance an EngineSupervisor (launcher/engine_supervisor.h) probes the
// engines; before each rollout, and after a sync an engine failed, every engine is brought back
// alive, serving and at the current version. A dead engine's requests are re-issued on the others
// by the router meanwhile.
//
// Colocated on GPUs (or with --offload on), a rank and an engine take turns: the trainer sleeps
// (its state in host memory) while the engines generate, the engines release their memory while
// the trainer scores and trains, and both are resident only for the weight sync.
//
//   RlProcesses job = start_rl_processes(config, plan, init);
//   RlLoop(config, plan, data, job, trainer, out).run();
#pragma once

#include <chrono>
#include <iosfwd>
#include <memory>
#include <optional>

#include "algorithms/algorithm_options.h"
#include "core/config.h"
#include "launcher/async_rollouts.h"
#include "launcher/experiment_data.h"
#include "launcher/rl_placement.h"
#include "launcher/rollout_batch.h"
#include "launcher/run_log.h"
#include "launcher/train_data_hooks.h"
#include "launcher/train_plan.h"
#include "rollout/prompt_source.h"
#include "rollout/reward_model.h"
#include "rollout/rollout_hooks.h"
#include "rollout/rollout_manager.h"
#include "rollout/teacher_server.h"
#include "serving/router_server.h"
#include "trainer/trainer_options.h"

namespace ooze::launcher {

class EngineSupervisor;

class RlLoop {
 public:
  RlLoop(const Config& config, const TrainPlan& plan, const ExperimentData& data,
         std::optional<rollout::RewardModel>& rewards, const rollout::RolloutHooks& hooks,
         const TrainDataHooks& train_data, RlProcesses& job, const trainer::TrainerOptions& trainer,
         std::ostream& out);
  ~RlLoop();

  // --load, the rollouts from there to --num-rollout, the last evaluation, --save-hf.
  void run();

 private:
  int64_t resume();                           // returns the first rollout id
  int64_t load(const std::string& load_dir);  // a checkpoint: its first rollout id
  GeneratedRollout generate_rollout(int64_t rollout_id);
  void learn(int64_t rollout_id, GeneratedRollout generated, double train_wait,
             std::chrono::steady_clock::time_point step_start);
  rollout::RolloutResult generate(int64_t rollout_id);
  RolloutBatch batch_of(const std::vector<std::vector<rollout::Sample>>& groups) const;
  void score(RolloutBatch& batch, MetricLine& line);
  std::vector<at::Tensor> teacher_log_probs_of_samples(const RolloutBatch& batch) const;
  void train(int64_t rollout_id, const RolloutBatch& batch, MetricLine& line);
  void sync(int64_t version, MetricLine& line);
  MetricLine evaluate(int64_t rollout_id);
  nlohmann::json generation_state() const;
  void save(int64_t next_rollout_id);
  bool evaluating() const;   // eval datasets and an --eval-interval were given
  bool takes_turns() const;  // colocated engines and trainer offload in turns (--offload)
  void on_every_engine(void (serving::RolloutEngine::*method)());

  const Config& config_;
  const TrainPlan& plan_;
  const ExperimentData& data_;
  std::optional<rollout::RewardModel>& rewards_;
  const rollout::RolloutHooks& hooks_;
  const TrainDataHooks& train_data_;
  RlProcesses& job_;
  const trainer::TrainerOptions& trainer_;
  const algorithms::AlgorithmOptions algorithm_;
  std::ostream& out_;
  RunLog log_;
  // The last checkpoint's time, reported in the line of the rollout after it (the line of the
  // rollout before it is on disk before the checkpoint is written).
  std::optional<double> last_save_seconds_;
  // For the run's first line: its start-up (processes started, weights loaded, a checkpoint with
  // --load) and the checkpoint's load.
  std::optional<double> startup_seconds_, load_seconds_;
  std::unique_ptr<rollout::PromptSource> source_;
  // --opd-type engine: the teacher's engines (launched, or --opd-teacher-url), scoring the
  // samples during the rollout; before the manager, which holds it.
  std::unique_ptr<rollout::TeacherServer> teacher_;
  std::unique_ptr<rollout::RolloutManager> manager_;
  int64_t optimizer_steps_ = 0;
  AsyncRollouts* async_ = nullptr;  // while --async rollouts run
  // --use-fault-tolerance: dead or hung engines restarted, re-synced and routed again.
  std::unique_ptr<EngineSupervisor> supervisor_;
  int64_t engines_restarted_ = 0;  // since the last rollout line
  // The job's router over HTTP, for users' functions that post to it (args.sglang_router_ip,
  // args.sglang_router_port), as Slime's generate functions do.
  std::unique_ptr<serving::RouterServer> http_router_;
};

}  // namespace ooze::launcher
