// What ooze's Python helpers reach during one call of a user's rollout-side function: the
// C++ functions behind ooze.generate, ooze.append_observation, ooze.remaining_budget,
// ooze.tokenizer, ooze.score and the run's own data source (python/ooze/generation.py,
// python/ooze/_hook_runtime.py), registered under a name of the call's own for as long as the
// bindings live. The call's request carries name(); Python finds the functions through it, so
// calls running at once on different samples never reach each other's.
//
//   HookBindings bindings("generation", {&generator, &tokenizer});
//   hook.call("generate_sample", {{"generation", bindings.name()}, ...});
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "python/native_functions.h"
#include "rollout/sample.h"
#include "rollout/sample_generation.h"

namespace ooze::models {
class Tokenizer;
}

namespace ooze::rollout {

class RewardModel;

struct HookServices {
  SampleGenerator* generator = nullptr;  // ooze.generate, append_observation, remaining_budget
  const models::Tokenizer* tokenizer = nullptr;  // ooze.tokenizer
  RewardModel* rewards = nullptr;                // ooze.score
  // The data source a rollout function gets without --data-source-path.
  std::function<std::vector<std::vector<Sample>>(int64_t num_groups)> get_samples = {};
  std::function<void(std::vector<std::vector<Sample>> groups)> add_samples = {};
  // ooze.agent_session(): {"base_url", "api_key"} of the call's agent session.
  std::function<nlohmann::json()> agent_session = {};
};

class HookBindings {
 public:
  // `kind` starts the name ("generation-17"). The services left unset are not registered: the
  // Python helper that needs one raises RuntimeError naming it.
  HookBindings(const std::string& kind, HookServices services);
  const std::string& name() const { return name_; }

 private:
  void bind(const std::string& function, python::NativeFunction body);

  std::string name_;
  std::vector<std::unique_ptr<python::NativeFunctionRegistration>> registrations_;
};

}  // namespace ooze::rollout
