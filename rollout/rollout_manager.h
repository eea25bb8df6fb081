// The rollout manager: draws prompts, generates n samples of each through the router, scores
// them, filters groups and hands the trainer exactly --rollout-batch-size groups, with Slime's
// flags and behaviour.
//
//   RolloutManager manager(RolloutOptions::from_config(config), source, router, tokenizer,
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
//   4. Once --rollout-batch-size groups are kept, the requests still running are aborted. With
//      --partial-rollout their groups (tokens, log-probs and weight versions so far) go to the
//      buffer and continue in the next rollout; otherwise they are discarded. When every group
//      has finished and too few were kept, another --over-sampling-batch-size prompts are drawn.
//
// The kept groups come back sorted by group index. Aborting uses the engines' abort_all, so the
// engines behind the router should serve this run alone (as they do in the RL loop). A failure
// (an engine that stays down, a reward that cannot be computed) aborts what is in flight and is
// thrown from generate(); the prompts that rollout drew stay consumed, so a run that wants them
// again restores a state() saved before it (the RL loop's checkpoint).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "rollout/group_filter.h"
#include "rollout/plugin_function.h"
#include "rollout/prompt_dataset.h"
#include "rollout/prompt_source.h"
#include "rollout/reward_model.h"
#include "rollout/rollout_metrics.h"
#include "rollout/router.h"
#include "rollout/sample.h"
#include "rollout/sample_generation.h"

namespace ooze::models {
class Tokenizer;
}

namespace ooze::rollout {

struct RolloutOptions {
  int64_t rollout_batch_size = 32;           // groups handed to the trainer per rollout
  int64_t n_samples_per_prompt = 8;          // samples per group
  int64_t over_sampling_batch_size = 0;      // prompts started per round; 0: rollout_batch_size
  std::string dynamic_sampling_filter_path;  // "", "nonzero_std", or "lib.so:function"
  int64_t dynamic_sampling_max_rounds = 16;  // rounds of drawing before giving up
  bool partial_rollout = false;
  std::string buffer_filter_path;             // "": oldest first; or "lib.so:function"
  std::string custom_generate_function_path;  // "lib.so:function": multi-turn, tools
  int64_t concurrency = 512;                  // requests (or plugin calls) in flight at once
  double progress_interval_s = 30.0;          // progress lines during long rollouts; 0: none
  RolloutSampling sampling;

  static RolloutOptions from_config(const Config& config);
};

// Declares the "rollout" section: batch sizes, dynamic sampling, partial rollout, custom
// generation, concurrency, and the sampling flags (add_rollout_sampling_fields).
void add_rollout_fields(ConfigSchema& schema);

struct RolloutResult {
  int64_t rollout_id = 0;
  std::vector<std::vector<Sample>> groups;  // rollout_batch_size groups of n samples
  MetricMap metrics;
};

// One evaluation dataset: --eval-prompt-data NAME FILE ... gives the names and paths; the
// other dataset options are the rollout data's.
struct EvalDataset {
  std::string name;
  PromptDatasetOptions options;
};

struct EvalOptions {
  std::vector<EvalDataset> datasets;
  int64_t eval_interval = 0;  // evaluate every this many rollouts; 0: never
  int64_t n_samples_per_eval_prompt = 1;
  bool log_passrate = false;
  RolloutSampling sampling;

  // `data` is the rollout data's options, which eval datasets share but for their path.
  static EvalOptions from_config(const Config& config, const PromptDatasetOptions& data);
};

// Declares the "eval" section (eval_prompt_data, eval_interval, n_samples_per_eval_prompt,
// log_passrate; the eval sampling flags come with add_rollout_sampling_fields).
void add_eval_fields(ConfigSchema& schema);

class RolloutManager {
 public:
  // Loads the plugins named by the options and checks that the options fit together (dynamic
  // sampling needs per-group rewards), so a run fails here rather than at its first rollout.
  RolloutManager(RolloutOptions options, PromptSource& source, Router& router,
                 const models::Tokenizer& tokenizer, RewardModel& rewards);
  ~RolloutManager();

  RolloutResult generate(int64_t rollout_id);

  // Generates n_samples_per_eval_prompt samples of every prompt of every dataset, scores them
  // and returns eval_metrics() of each (rollout/rollout_metrics.h) plus perf/eval_time.
  MetricMap evaluate(const std::vector<std::pair<std::string, const PromptDataset*>>& datasets,
                     const EvalOptions& options);

  // Groups waiting in the partial-rollout buffer.
  size_t buffered_groups() const { return buffer_.size(); }

  // What a resumed run needs: the prompt source's position and the partial-rollout buffer.
  nlohmann::json state() const;
  void restore(const nlohmann::json& state);

  const RolloutOptions& options() const { return options_; }

 private:
  struct Round;

  std::vector<std::vector<Sample>> take_from_buffer(int64_t max_groups);
  std::vector<std::vector<Sample>> draw_groups(int64_t count);
  // Generates and scores the groups of `round` concurrently until it has what it wants.
  void run(Round& round, SampleGenerator& generator);

  RolloutOptions options_;
  PromptSource& source_;
  Router& router_;
  const models::Tokenizer& tokenizer_;
  RewardModel& rewards_;
  std::optional<GroupFilter> filter_;
  std::optional<PluginFunction> buffer_filter_;
  std::optional<PluginFunction> custom_generate_;
  std::vector<std::vector<Sample>> buffer_;
};

}  // namespace ooze::rollout
