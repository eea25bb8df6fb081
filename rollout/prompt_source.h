// Where the rollout draws its prompts from: a PromptDataset walked epoch by epoch, as Slime's
// rollout data source does it.
//
//   PromptSource source(dataset, PromptSourceOptions::fields().read(config));
//   std::vector<DrawnPrompt> batch = source.next_batch(rollout_batch_size);
//   ...
//   source.save(checkpoint_dir);            // beside the model, at every checkpoint
//   source.load(checkpoint_dir);            // on resume: draws continue where they stopped
//
// Epoch e visits every prompt once, in file order, or with --rollout-shuffle in the order
// Python's random.shuffle gives after random.seed(rollout_seed + e): the very order Slime uses
// for the same file and seed. A draw that reaches the end of an epoch continues into the next,
// so every batch is full. Each drawn prompt gets the next global group index (0, 1, 2, ...).
//
// state() is everything needed to continue: a source restored from it draws exactly what the
// uninterrupted one would have. The state names the dataset's fingerprint; restoring it into a
// source over other data, or another shuffle seed, is refused.
//
// Not thread-safe: one caller (the rollout manager) draws.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "rollout/prompt_dataset.h"
#include "rollout/sample.h"

namespace ooze::rollout {

struct PromptSourceOptions {
  bool shuffle = false;  // --rollout-shuffle
  int64_t seed = 42;     // --rollout-seed

  static const OptionFields<PromptSourceOptions>& fields();
};

struct DrawnPrompt {
  int64_t group_index = 0;    // the run's count of prompts drawn before this one
  int64_t epoch = 0;          // the epoch it was drawn in
  int64_t dataset_index = 0;  // its index in the dataset (PromptDataset::at)
  Prompt prompt;
};

// A sample of `drawn`'s group, with Slime's fields filled from the prompt: group_index, index,
// prompt, tokens (the prompt's), label, metadata, tools. Status pending, no response yet.
Sample make_sample(const DrawnPrompt& drawn, int64_t sample_index);

class PromptSource {
 public:
  // Throws ConfigError for a null or empty dataset.
  PromptSource(std::shared_ptr<const PromptDataset> dataset, PromptSourceOptions options = {});

  // The next `batch_size` prompts (>= 1; std::invalid_argument otherwise), continuing into the
  // following epochs when the current one ends.
  std::vector<DrawnPrompt> next_batch(int64_t batch_size);

  // Reserves `count` consecutive sample indices and returns the first, so sample indices stay
  // unique across the run and its resumptions (Sample::index).
  int64_t take_sample_indices(int64_t count);

  // The dataset indices in the order epoch `epoch` visits them.
  std::vector<int64_t> epoch_order(int64_t epoch) const;

  int64_t epoch() const { return epoch_; }
  int64_t offset() const { return offset_; }  // prompts of the current epoch already drawn
  int64_t groups_drawn() const { return groups_drawn_; }
  int64_t samples_numbered() const { return samples_numbered_; }
  const PromptDataset& dataset() const { return *dataset_; }
  const PromptSourceOptions& options() const { return options_; }

  // {"format", "epoch", "offset", "seed", "shuffle", "groups_drawn", "samples_numbered",
  //  "dataset": {"path", "fingerprint", "prompts"}}.
  nlohmann::json state() const;
  // Continues from `state`. Throws ConfigError when it was made for other data (fingerprint),
  // another --rollout-shuffle or, with shuffling, another --rollout-seed; FormatError when it
  // is malformed. `origin` (a file, say) is named in errors. The source is unchanged on error.
  void restore(const nlohmann::json& state, const std::string& origin = "prompt source state");

  // DIR/prompt_source.json, written atomically (creating DIR): a crash leaves the old file or
  // the new one, never a torn one. Throws IoError.
  void save(const std::string& dir) const;
  // restore() from DIR/prompt_source.json. Throws IoError when it is missing or unreadable,
  // FormatError when it is not JSON, and what restore() throws.
  void load(const std::string& dir);
  static std::string state_path(const std::string& dir);

 private:
  void set_epoch(int64_t epoch);

  std::shared_ptr<const PromptDataset> dataset_;
  PromptSourceOptions options_;
  int64_t epoch_ = 0;
  int64_t offset_ = 0;
  int64_t groups_drawn_ = 0;
  int64_t samples_numbered_ = 0;
  std::vector<int64_t> order_;  // epoch_order(epoch_)
};

// Slime's run length: `num_rollout` when it is set (> 0), else num_epoch times the full
// rollout batches one epoch holds (dataset_size / rollout_batch_size, rounded down). Throws
// ConfigError when neither is set or an epoch holds no full batch.
int64_t num_rollouts(int64_t num_rollout, int64_t num_epoch, int64_t dataset_size,
                     int64_t rollout_batch_size);
// The same with num_rollout and num_epoch read from `config`.
int64_t num_rollouts(const Config& config, int64_t dataset_size, int64_t rollout_batch_size);

// When one rollout draws more prompts than `dataset` has (allowed: the draw wraps into the next
// epoch, so a prompt repeats within a rollout), the start-up line that says so: the dataset's
// prompt count and the epochs a rollout spans. nullopt when a rollout fits in one epoch.
std::optional<std::string> rollout_epochs_note(const PromptDataset& dataset,
                                               int64_t rollout_batch_size);

// Declares the "data" section, Slime's names and defaults: PromptDatasetOptions' and
// PromptSourceOptions' flags, num_epoch and num_rollout. A bad chat template name or kwargs is
// refused as the config loads, before anything runs.
void add_prompt_data_fields(ConfigSchema& schema);

}  // namespace ooze::rollout
