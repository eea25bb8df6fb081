// A function from a user's plugin library, named on the command line as `path/to/lib.so:function`
// (--custom-rm-path, --dynamic-sampling-filter-path, --buffer-filter-path,
// --custom-generate-function-path), loaded and checked at start-up and called like an ordinary
// typed function.
//
//   PluginFunction reward =
//       PluginFunction::load(spec, plugin::Kind::kReward, "--custom-rm-path");
//   sample.reward = reward.reward(sample);
//
// Loading refuses, with an error naming the flag and what to do, a spec without ':', a library
// that is missing or cannot be opened, a function not exported with the OOZE_EXPORT_* macro of
// rollout/reward_plugin.h, a plugin built against another ABI version, and a function of
// another kind than the flag needs. A library is opened once per path and stays open for the
// life of the process (plugin code may hold static state, and samples may still be scored while
// a run winds down).
//
// Calls are thread-safe on ooze's side (a PluginFunction is immutable once loaded); the plugin's
// own function must be thread-safe too. What the function throws comes back as a PluginError
// naming the plugin, the flag and the sample or group it was called on.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "rollout/reward_plugin.h"
#include "rollout/sample.h"

namespace ooze::rollout {

// A plugin that cannot be loaded, or a plugin function that failed or broke its contract.
class PluginError : public Error {
 public:
  using Error::Error;
};

// "reward function", "batched reward function", "group filter", "buffer filter",
// "generate function".
const char* to_string(plugin::Kind kind);
// The export macro of a kind: "OOZE_EXPORT_REWARD", ...
const char* export_macro_of(plugin::Kind kind);

class PluginFunction {
 public:
  // Loads `spec` ("path/to/lib.so:function"; a relative path is relative to the working
  // directory) and checks that the function is exported with this header's ABI version as a
  // function of kind `expected`. `flag` names the option in errors ("--custom-rm-path").
  // Throws PluginError.
  static PluginFunction load(const std::string& spec, plugin::Kind expected,
                             const std::string& flag);
  // The same for a flag that takes a function of any of several kinds (--custom-rm-path: a
  // reward or a batched reward function); kind() then says which it is.
  static PluginFunction load_any(const std::string& spec, const std::vector<plugin::Kind>& accepted,
                                 const std::string& flag);

  // Kind kReward: the sample's reward (a number, or an object).
  nlohmann::json reward(const Sample& sample) const;
  // Kind kBatchedReward: one reward per sample, in order (checked).
  std::vector<nlohmann::json> batched_reward(const std::vector<Sample>& samples) const;
  // Kind kGroupFilter: keep or drop a finished group.
  plugin::FilterDecision filter_group(const std::vector<Sample>& group) const;
  // Kind kBufferFilter: takes at most `num_groups` groups out of `buffer` (checked).
  std::vector<std::vector<Sample>> filter_buffer(std::vector<std::vector<Sample>>& buffer,
                                                 int64_t num_groups) const;
  // Kind kGenerate: generates `sample` through `context`.
  void generate(plugin::GenerationContext& context, Sample& sample) const;

  const std::string& spec() const { return spec_; }  // as given: "path/to/lib.so:function"
  const std::string& flag() const { return flag_; }
  plugin::Kind kind() const { return kind_; }

 private:
  using Entry = void (*)(plugin::Call*);

  PluginFunction() = default;
  // Throws PluginError unless this function is of `wanted` kind (a caller's mistake: the
  // function was loaded for another flag).
  void require_kind(plugin::Kind wanted, const char* method) const;
  // Calls the entry point; a non-empty call.error becomes a PluginError saying `on_what`.
  void invoke(plugin::Call& call, const std::string& on_what) const;
  // "--custom-rm-path lib.so:fn"
  std::string who() const;

  std::string spec_;
  std::string flag_;
  plugin::Kind kind_ = plugin::Kind::kReward;
  Entry entry_ = nullptr;
};

}  // namespace ooze::rollout
