// The Python hooks on a rollout's train data, between the rollout and the trainer, with Slime's
// flags and signatures:
//
//   --custom-convert-samples-to-train-data-path   (args, samples) -> dict: the train data
//        (launcher/python_train_data.h) of the rollout's groups of Samples, in place of
//        rollout_batch(); its rewards are final, so --custom-reward-post-process-path is not
//        called (as in Slime, where the conversion is what calls it)
//   --rollout-data-postprocess-path   (args) -> None, Slime's, or (args, rollout_id,
//        rollout_data) -> None: after the advantages, before training. rollout_data holds one
//        tensor per sample under each of "tokens", "loss_masks" (float32), "rollout_log_probs",
//        "log_probs" (the old policy's), "ref_log_probs", "values", "advantages", "returns" (those
//        the run has), sharing memory with the batch, so what the function changes in place is
//        trained; and "rewards", a list of floats (a copy)
//
//   TrainDataHooks hooks(TrainDataHookOptions::fields().read(config));  // loads and checks them
//   if (hooks.converts_samples()) batch = hooks.convert_samples(groups, needs_rollout_log_probs);
//   hooks.postprocess(rollout_id, batch);
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/option_fields.h"
#include "launcher/rollout_batch.h"
#include "python/python_hook.h"
#include "python/rollout_data_hook.h"
#include "rollout/sample.h"

namespace ooze::launcher {

struct TrainDataHookOptions {
  std::string custom_convert_samples_to_train_data_path;
  std::string rollout_data_postprocess_path;

  // Section "rollout"; read() checks that each path names a Python function.
  static const OptionFields<TrainDataHookOptions>& fields();
};

class TrainDataHooks {
 public:
  // Loads the hooks that are set; throws python::HookError.
  explicit TrainDataHooks(const TrainDataHookOptions& options);

  bool converts_samples() const { return converter_.has_value(); }
  // --custom-convert-samples-to-train-data-path on the rollout's groups. Throws python::HookError
  // naming the flag, the path and what was wrong with the train data (python_train_data.h).
  RolloutBatch convert_samples(const std::vector<std::vector<rollout::Sample>>& groups,
                               bool needs_rollout_log_probs) const;
  // --rollout-data-postprocess-path on `batch` (nothing without the hook).
  void postprocess(int64_t rollout_id, RolloutBatch& batch) const;

 private:
  std::optional<python::PythonHook> converter_;
  std::optional<python::RolloutDataHook> postprocessor_;
};

}  // namespace ooze::launcher
