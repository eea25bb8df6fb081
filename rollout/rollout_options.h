// What a rollout and an evaluation are asked for: Slime's rollout and eval flags, declared
// here beside the options they fill, for the rollout manager (rollout/rollout_manager.h).
//
//   add_rollout_fields(schema);   // section "rollout", with the sampling flags
//   add_eval_fields(schema);      // section "eval"
//   RolloutOptions rollout = RolloutOptions::from_config(config);
//   EvalOptions eval = EvalOptions::from_config(config, PromptDatasetOptions::from_config(config));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "rollout/prompt_dataset.h"
#include "rollout/sample_generation.h"

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

}  // namespace ooze::rollout
