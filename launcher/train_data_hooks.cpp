#include "launcher/train_data_hooks.h"

#include "core/error.h"
#include "launcher/python_train_data.h"
#include "python/hook_path.h"
#include "rollout/sample_json.h"

namespace ooze::launcher {
namespace {

constexpr const char* kConvertFlag = "--custom-convert-samples-to-train-data-path";
constexpr const char* kPostprocessFlag = "--rollout-data-postprocess-path";

void require_python(const std::string& flag, const std::string& path) {
  if (!path.empty() && python::hook_path_kind(path) != python::HookPathKind::kPython) {
    throw ConfigError(flag + " " + path +
                      " must name a Python function (package.module.function or "
                      "file.py:function)");
  }
}

// Slime's keys for the per-token values ooze keeps under its own names.
const std::vector<std::pair<std::string, std::string>> kTokenValueKeys = {
    {"rollout_log_probs", "rollout_log_probs"},
    {"teacher_log_probs", "teacher_log_probs"},
    {"log_probs", "old_log_probs"},
    {"ref_log_probs", "ref_log_probs"},
    {"values", "values"},
    {"advantages", "advantages"},
    {"returns", "returns"}};

}  // namespace

const OptionFields<TrainDataHookOptions>& TrainDataHookOptions::fields() {
  using O = TrainDataHookOptions;
  static const OptionFields<O> fields = [] {
    OptionFields<O> f;
    f.section("rollout");
    f.add("custom_convert_samples_to_train_data_path",
          &O::custom_convert_samples_to_train_data_path,
          "Your function (args, samples) -> dict of Slime's train data (tokens, "
          "response_lengths, rewards, loss_masks, ...) that ooze trains on; its rewards are "
          "final.");
    f.add("rollout_data_postprocess_path", &O::rollout_data_postprocess_path,
          "Your function (args) or (args, rollout_id, rollout_data) after the advantages: "
          "rollout_data's tensors are the batch's, changed in place.");
    f.add_rule([](const O& options) {
      require_python(kConvertFlag, options.custom_convert_samples_to_train_data_path);
      require_python(kPostprocessFlag, options.rollout_data_postprocess_path);
    });
    return f;
  }();
  return fields;
}

TrainDataHooks::TrainDataHooks(const TrainDataHookOptions& options) {
  const std::string& convert = options.custom_convert_samples_to_train_data_path;
  if (!convert.empty()) {
    require_python(kConvertFlag, convert);
    converter_ = python::PythonHook::load(convert, kConvertFlag, {"args", "samples"});
  }
  const std::string& postprocess = options.rollout_data_postprocess_path;
  if (!postprocess.empty()) {
    require_python(kPostprocessFlag, postprocess);
    postprocessor_ = python::RolloutDataHook::load(postprocess, kPostprocessFlag);
  }
}

RolloutBatch TrainDataHooks::convert_samples(
    const std::vector<std::vector<rollout::Sample>>& groups, bool needs_rollout_log_probs) const {
  const nlohmann::json data =
      converter_->call("convert_samples_to_train_data", rollout::groups_to_json(groups));
  try {
    return rollout_batch_from_train_data(data, groups, needs_rollout_log_probs);
  } catch (const Error& error) {
    throw python::HookError(converter_->flag() + " " + converter_->path() +
                            " returned train data " + "ooze cannot train on: " + error.what());
  }
}

void TrainDataHooks::postprocess(int64_t rollout_id, RolloutBatch& batch) const {
  if (!postprocessor_) return;
  python::RolloutData data;
  std::vector<at::Tensor> tokens, loss_masks;
  for (const fsdp::PackingSample& sample : batch.samples) {
    tokens.push_back(sample.tokens);
    loss_masks.push_back(sample.response_mask);
  }
  data.tensor_lists.emplace_back("tokens", std::move(tokens));
  data.tensor_lists.emplace_back("loss_masks", std::move(loss_masks));
  for (const auto& [key, name] : kTokenValueKeys) {
    if (batch.has(name)) data.tensor_lists.emplace_back(key, batch.get(name));
  }
  data.number_lists.emplace_back("rewards", batch.rewards);
  postprocessor_->call(rollout_id, data);
}

}  // namespace ooze::launcher
