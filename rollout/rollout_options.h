// What a rollout and an evaluation are asked for: Slime's rollout and eval flags, declared
// here beside the options they fill, for the rollout manager (rollout/rollout_manager.h).
//
//   RolloutOptions::fields().declare(schema);   // section "rollout", with the sampling flags
//   add_eval_fields(schema);                     // section "eval"
//   RolloutOptions rollout = RolloutOptions::fields().read(config);
//   PromptDatasetOptions data = PromptDatasetOptions::fields().read(config);
//   EvalOptions eval = EvalOptions::from_config(config, data);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/option_fields.h"
#include "rollout/prompt_dataset.h"
#include "rollout/sample_generation.h"

namespace ooze::rollout {

struct RolloutOptions {
  int64_t rollout_batch_size = 32;           // groups handed to the trainer per rollout
  int64_t n_samples_per_prompt = 8;          // samples per group
  int64_t over_sampling_batch_size = 0;      // prompts started per round; 0: rollout_batch_size
  std::string dynamic_sampling_filter_path;  // "", "nonzero_std", or a Python or C++ function
  int64_t dynamic_sampling_max_rounds = 16;  // rounds of drawing before giving up
  bool partial_rollout = false;
  std::string buffer_filter_path;             // "": oldest first; or a Python or C++ function
  std::string custom_generate_function_path;  // a Python or C++ function: multi-turn, tools
  std::string
      rollout_function_path;       // a Python function making whole rollouts ("sft": ooze train's)
  std::string eval_function_path;  // the same for evaluations; "": rollout_function_path
  std::string data_source_path;    // a Python class handing out prompts; "": --prompt-data
  std::string rollout_all_samples_process_path;  // a Python function seeing every finished group
  std::string agent_command;               // a program run per sample against an agent session
  double agent_timeout_s = 600;            // an agent running longer is killed, its sample aborted
  std::string session_host = "127.0.0.1";  // where the session server listens
  std::string env_url;                // an OpenEnv-style environment server the built-in loop plays
  int64_t env_max_turns = 16;         // steps per episode at most
  double env_timeout_s = 60;          // each reset or step answer
  int64_t concurrency = 512;          // requests (or plugin calls) in flight at once
  double progress_interval_s = 30.0;  // progress lines during long rollouts; 0: none
  RolloutSampling sampling;

  // The "rollout" section: batch sizes, dynamic sampling, partial rollout, custom generation,
  // concurrency, and the sampling flags. read() checks the over-sampling batch.
  static const OptionFields<RolloutOptions>& fields();
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

  // --eval-prompt-data (NAME,FILE pairs: each dataset's name and path), --eval-interval,
  // --n-samples-per-eval-prompt, --log-passrate ("eval" section).
  static const OptionFields<EvalOptions>& fields();
  // Those fields, the eval sampling (RolloutSampling::eval_from_config), and each dataset's
  // other options: `data`, the rollout data's.
  static EvalOptions from_config(const Config& config, const PromptDatasetOptions& data);
};

// Declares EvalOptions' fields and the eval sampling flags (add_eval_sampling_fields).
void add_eval_fields(ConfigSchema& schema);

}  // namespace ooze::rollout
