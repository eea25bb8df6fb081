// The rollout manager: draws prompts, generates n samples of each through the router, scores
// them, filters groups and hands the trainer exactly --rollout-batch-size groups, with Slime's
// flags and behaviour.
//
//   RolloutManager manager(RolloutOptions::fields().read(config), source, router, tokenizer,
//                          rewards);
//   RolloutResult rollout = manager.generate(rollout_id);   // rollout.groups, rollout.metrics
//   MetricMap eval = manager.evaluate(datasets, eval_options);
//
// One rollout:
//   1. With --partial-rollout, groups left unfinished by earlier rollouts come first (the
//      buffer, taken oldest first or by --buffer-filter-path); the rest are new prompts drawn
//      from the source: --over-sampling-batch-size of them when that is larger than the batch.
//   2. Every group is in flight at once, up to --rollout-concurrency requests: a fresh group is
//      one request of n samples (its prompt is prefilled once); a continued sample, or every
//      sample with --custom-generate-function-path, is a request (or a plugin call) of its own.
//   3. A group whose last sample finished is scored (rollout/reward_model.h) and, with
//      --dynamic-sampling-filter-path, kept or dropped. Dropped groups never reach the trainer.
//      With a distillation teacher (set_teacher), a kept group's samples are then scored by the
//      teacher (Sample::teacher_log_probs) while the other groups generate.
//   4. Once --rollout-batch-size groups are kept, the requests still running are aborted. With
//      --partial-rollout their groups (tokens, log-probs and weight versions so far) go to the
//      buffer and continue in the next rollout; otherwise they are discarded. When every group
//      has finished and too few were kept, another --over-sampling-batch-size prompts are drawn.
//
// With --rollout-function-path the user's Python function makes the whole rollout instead
// (rollout/python_rollout_function.h), drawing from the same prompts and buffer; with
// --data-source-path the prompts come from the user's Python class (rollout/python_data_source.h).
//
// The kept groups come back sorted by group index. Aborting uses the engines' abort_all, so the
// engines behind the router should serve this run alone (as they do in the RL loop). A failure
// (an engine that stays down, a reward that cannot be computed) aborts what is in flight and is
// thrown from generate(); the prompts that rollout drew stay consumed, so a run that wants them
// again restores a state() saved before it (the RL loop's checkpoint).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "rollout/hook_bindings.h"
#include "rollout/prompt_dataset.h"
#include "rollout/prompt_source.h"
#include "rollout/reward_model.h"
#include "rollout/rollout_functions.h"
#include "rollout/rollout_metrics.h"
#include "rollout/rollout_options.h"
#include "rollout/sample.h"
#include "rollout/sample_generation.h"
#include "rollout/teacher_server.h"
#include "rollout/uniform_reward_watch.h"
#include "serving/router.h"
#include "serving/session_server.h"

namespace ooze::models {
class Tokenizer;
class ChatTemplate;
}  // namespace ooze::models

namespace ooze::rollout {

struct RolloutCancelled : Error {
  using Error::Error;
};

struct RolloutResult {
  int64_t rollout_id = 0;
  std::vector<std::vector<Sample>> groups;  // rollout_batch_size groups of n samples
  MetricMap metrics;
};

struct Evaluation {
  MetricMap metrics;
  std::map<std::string, EvalData>
      data;  // by dataset: what --custom-eval-rollout-log-function-path sees
};

class RolloutManager {
 public:
  // Loads the functions named by the options (rollout_functions.h) and checks that the options
  // fit together, so a run fails here rather than at its first rollout.
  RolloutManager(RolloutOptions options, PromptSource& source, serving::Router& router,
                 const models::Tokenizer& tokenizer, RewardModel& rewards);
  ~RolloutManager();

  RolloutResult generate(int64_t rollout_id);

  // Generates n_samples_per_eval_prompt samples of every prompt of every dataset, scores them
  // and returns eval_metrics() of each (rollout/rollout_metrics.h) plus perf/eval_time. With an
  // eval function (--eval-function-path, or a --rollout-function-path of the user's) that
  // function evaluates instead, before rollout `rollout_id`.
  Evaluation evaluate(const std::vector<std::pair<std::string, const PromptDataset*>>& datasets,
                      const EvalOptions& options, int64_t rollout_id = 0);
  // Whether an eval function of the user's evaluates (it needs no --eval-prompt-data).
  bool has_eval_function() const { return functions_.eval_function.has_value(); }

  // --data-source-path: the class's save(rollout_id) / load(rollout_id), with the run's
  // checkpoint. Nothing without one (ooze's own prompt position is in state()).
  void save_data_source(int64_t rollout_id) const;
  void load_data_source(int64_t rollout_id) const;

  // Groups waiting in the partial-rollout buffer.
  size_t buffered_groups() const { return buffer_.size(); }
  // Discards the buffered groups with a token sampled by weights older than `version` (too stale
  // to continue under a staleness bound); returns how many. Their prompts are not drawn again.
  int64_t drop_buffered_older_than(int64_t version);

  // What a resumed run needs: the prompt source's position and the partial-rollout buffer.
  nlohmann::json state() const;
  void restore(const nlohmann::json& state);

  const RolloutOptions& options() const { return options_; }

  // On-policy distillation with --opd-type engine: from now on every sample generate() keeps
  // gets its teacher_log_probs from `teacher` (a rollout function's samples once the function
  // returns), and the rollout's metrics report perf/teacher_log_probs_time (TeacherServer::
  // busy_seconds over the rollout). Evaluations are not scored. `teacher` must outlive the
  // manager.
  void set_teacher(const TeacherServer* teacher) { teacher_ = teacher; }

  // From another thread: the generate() or evaluate() running now, and every later one, aborts
  // its requests and throws RolloutCancelled. For a job that fails while another thread
  // generates (ooze train --async): the error need not wait for that rollout to end.
  void cancel();

 private:
  struct Round;

  std::vector<std::vector<Sample>> take_from_buffer(int64_t max_groups);
  std::vector<std::vector<Sample>> draw_groups(int64_t count);
  // What the user's Python functions reach through the ooze package (rollout/hook_bindings.h):
  // the generator's engines, the tokenizer, the rewards and, for a rollout function, the run's
  // prompts behind the partial-rollout buffer.
  HookServices hook_services(SampleGenerator* generator);
  RolloutResult generate_with_function(int64_t rollout_id);
  // The uniform-reward warning (uniform_reward_watch.h) for a finished rollout.
  void watch_rewards(const RolloutResult& result, const GenerationStats& stats);
  // --rollout-all-samples-process-path on the groups that finished.
  void process_all_samples(const std::vector<std::vector<Sample>>& groups);
  // Generates and scores the groups of `round` concurrently until it has what it wants.
  void run(Round& round, SampleGenerator& generator);
  // One sample through the user's generate function, agent or environment; the samples it
  // became.
  std::vector<Sample> generate_sample(const Sample& sample, SampleGenerator& generator,
                                      const std::atomic<bool>& stop);
  // The agents' session server, started (on the engines' tokenizer and chat template) by the
  // first sample that needs one.
  serving::SessionServer& sessions();

  RolloutOptions options_;
  PromptSource& source_;
  serving::Router& router_;
  const models::Tokenizer& tokenizer_;
  RewardModel& rewards_;
  RolloutFunctions functions_;
  // Warns when the rewards of several rollouts in a row are all the same.
  UniformRewardWatch reward_watch_;
  std::vector<std::vector<Sample>> buffer_;
  const TeacherServer* teacher_ = nullptr;
  std::atomic<bool> cancelled_{false};
  std::mutex sessions_mutex_;
  std::unique_ptr<models::ChatTemplate> session_template_;
  std::unique_ptr<serving::SessionServer> sessions_;
};

}  // namespace ooze::rollout
