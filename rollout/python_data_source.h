// --data-source-path: where a run's prompts come from, as a user's Python class (Slime's
// DataSource): built once as Class(args), asked for groups of fresh samples, given back the
// groups a rollout left unfinished, and told when the run checkpoints and resumes.
//
//   PythonDataSource source(path);              // at start-up: loads and checks the class
//   source.build(services);                     // once, by the rollout manager
//   groups = source.get_samples(32, services);  // each rollout
//   source.save(rollout_id);                    // with the run's checkpoint
//
// The class keeps its own state (Slime's contract): save(rollout_id) writes it under args.save
// and load(rollout_id) reads it from args.load, each called by ooze with the checkpoint's last
// finished rollout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "python/python_hook.h"
#include "rollout/hook_bindings.h"
#include "rollout/sample.h"

namespace ooze::rollout {

class PythonDataSource {
 public:
  // Throws python::HookError when the class cannot load or be called with (args).
  explicit PythonDataSource(const std::string& path);

  // Builds the instance (Class(args)), with ooze.tokenizer at hand. Throws python::HookError
  // when it raises or lacks get_samples / add_samples.
  void build(const HookServices& services) const;

  // `num_groups` groups from get_samples, each sample with its prompt tokens (the prompt text
  // tokenized where the class gave text only), an index (fresh ones from `next_index` where it
  // gave none) and a group index (the group's first sample's index where it gave none).
  std::vector<std::vector<Sample>> get_samples(
      int64_t num_groups, const HookServices& services,
      const std::function<int64_t(int64_t)>& next_index) const;
  void add_samples(const std::vector<std::vector<Sample>>& groups,
                   const HookServices& services) const;
  void save(int64_t rollout_id) const;
  void load(int64_t rollout_id) const;

 private:
  python::PythonHook hook_;
};

}  // namespace ooze::rollout
