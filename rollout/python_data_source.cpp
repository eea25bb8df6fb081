#include "rollout/python_data_source.h"

#include "models/tokenizer.h"
#include "rollout/sample_json.h"

namespace ooze::rollout {

PythonDataSource::PythonDataSource(const std::string& path)
    : hook_(python::PythonHook::load(path, "--data-source-path", {"args"})) {}

void PythonDataSource::build(const HookServices& services) const {
  const HookBindings bindings("data-source", services);
  hook_.call("new_data_source", {{"generation", bindings.name()}});
}

std::vector<std::vector<Sample>> PythonDataSource::get_samples(
    int64_t num_groups, const HookServices& services,
    const std::function<int64_t(int64_t)>& next_index) const {
  const HookBindings bindings("data-source", services);
  const nlohmann::json answer =
      hook_.call("data_source_get", {{"generation", bindings.name()}, {"num_samples", num_groups}});
  std::vector<std::vector<Sample>> groups;
  for (const nlohmann::json& group_json : answer) {
    std::vector<Sample> group;
    for (nlohmann::json record : group_json) {
      // A fresh sample may come with no index and only its prompt's text.
      if (record["prompt"].is_array()) {
        throw python::HookError(hook_.flag() + " " + hook_.path() +
                                ": get_samples returned a sample whose prompt is a list of "
                                "messages; render it first with "
                                "ooze.tokenizer.apply_chat_template(messages, "
                                "add_generation_prompt=True)");
      }
      const bool numbered = record["index"].is_number_integer();
      const bool grouped = record["group_index"].is_number_integer();
      if (!numbered) record["index"] = 0;
      if (!grouped) record["group_index"] = 0;
      Sample sample;
      try {
        sample = sample_from_json(record);
      } catch (const FormatError& error) {
        throw python::HookError(
            hook_.flag() + " " + hook_.path() +
            ": get_samples returned a sample ooze cannot take: " + error.what());
      }
      if (!numbered) sample.index = next_index(1);
      if (!grouped) sample.group_index = group.empty() ? sample.index : group.front().group_index;
      if (sample.tokens.empty()) {
        if (sample.prompt.empty()) {
          throw python::HookError(hook_.flag() + " " + hook_.path() +
                                  ": get_samples returned "
                                  "sample " +
                                  std::to_string(sample.index) +
                                  " with neither prompt text nor tokens");
        }
        sample.tokens = services.tokenizer->encode(sample.prompt);
      }
      group.push_back(std::move(sample));
    }
    if (group.empty()) {
      throw python::HookError(hook_.flag() + " " + hook_.path() +
                              ": get_samples returned an empty group");
    }
    groups.push_back(std::move(group));
  }
  return groups;
}

void PythonDataSource::add_samples(const std::vector<std::vector<Sample>>& groups,
                                   const HookServices& services) const {
  const HookBindings bindings("data-source", services);
  hook_.call("data_source_add",
             {{"generation", bindings.name()}, {"groups", groups_to_json(groups)}});
}

void PythonDataSource::save(int64_t rollout_id) const {
  hook_.call("data_source_save", {{"rollout_id", rollout_id}});
}

void PythonDataSource::load(int64_t rollout_id) const {
  hook_.call("data_source_load", {{"rollout_id", rollout_id}});
}

}  // namespace ooze::rollout
