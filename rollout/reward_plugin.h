// The one header a user's plugin includes: reward functions, group filters, buffer filters and
// generate functions written in C++, built as a shared library, and named on the command line
// as `path/to/lib.so:function` (Slime's --custom-rm-path, --dynamic-sampling-filter-path,
// --buffer-filter-path, --custom-generate-function-path).
//
// A plugin writes ordinary typed functions and exports each with the macro of its kind:
//
//   #include "rollout/reward_plugin.h"
//
//   nlohmann::json exact_match(const ooze::rollout::Sample& sample) {
//     return sample.response == sample.label ? 1.0 : 0.0;
//   }
//   OOZE_EXPORT_REWARD(exact_match)          // --custom-rm-path libmine.so:exact_match
//
// The macro checks the signature at compile time and exports two C symbols: the entry point,
// which catches what the function throws and hands the message back (ooze then reports it with
// the sample and the plugin's name), and a descriptor with the header's ABI version and the
// function's kind, which ooze checks when it loads the library, so a wrong path, a missing
// function, a function of another kind or a plugin built against an older header is refused
// at start-up, not at the first rollout.
//
// Functions run concurrently on ooze's threads (rewards on a pool of them): they must be
// thread-safe.
#pragma once

#include <cstdint>
#include <exception>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "rollout/sample.h"

namespace ooze::rollout::plugin {

// Bumped whenever this header or rollout/sample.h changes a type a plugin function sees.
constexpr int kAbiVersion = 1;

enum class Kind : int {
  kReward = 1,         // one sample -> its reward
  kBatchedReward = 2,  // a group's samples (--group-rm) or a whole rollout's -> their rewards
  kGroupFilter = 3,    // a finished group -> keep it or drop it (dynamic sampling)
  kBufferFilter = 4,   // the partial-rollout buffer -> the groups the next rollout takes
  kGenerate = 5,       // one sample and an engine -> the generated sample (multi-turn, tools)
};

// A dynamic-sampling verdict; a bare bool converts to it. `reason` names why a group was
// dropped and is counted in the rollout's metrics.
struct FilterDecision {
  FilterDecision(bool keep_group = true, std::string why = "")  // NOLINT: implicit from bool
      : keep(keep_group), reason(std::move(why)) {}
  bool keep;
  std::string reason;
};

// What a generate function reaches the engines through. ooze implements it; one context serves
// one sample at a time.
class GenerationContext {
 public:
  virtual ~GenerationContext() = default;

  // Sends sample.tokens (prompt and response so far) to an engine and appends what it generates
  // to the sample: tokens, text, loss mask 1, log-probs, weight versions; sets its status.
  // `max_new_tokens` <= 0 means what is left of the response budget. Returns the text of this
  // turn. Generates nothing (and returns "") once the budget is spent.
  virtual std::string generate(Sample& sample, int64_t max_new_tokens = 0) = 0;

  // Appends `text` the policy did not produce (a tool's answer): its tokens get loss mask 0,
  // log-prob 0 and weight version -1. Returns how many tokens were appended (cut to the
  // response budget; the status becomes truncated when it is spent).
  virtual int64_t append_observation(Sample& sample, const std::string& text) = 0;

  // Response tokens the sample may still grow by (--rollout-max-response-len minus its length).
  virtual int64_t remaining_budget(const Sample& sample) const = 0;

  virtual std::vector<int64_t> tokenize(const std::string& text) const = 0;
  virtual std::string detokenize(const std::vector<int64_t>& ids) const = 0;
};

using RewardFunction = nlohmann::json(const Sample& sample);
using BatchedRewardFunction = std::vector<nlohmann::json>(const std::vector<Sample>& samples);
using GroupFilterFunction = FilterDecision(const std::vector<Sample>& group);
// Takes the groups the next rollout continues out of `buffer` (what it leaves stays there) and
// returns at most `num_groups` of them.
using BufferFilterFunction =
    std::vector<std::vector<Sample>>(std::vector<std::vector<Sample>>& buffer, int64_t num_groups);
using GenerateFunction = void(GenerationContext& context, Sample& sample);

// What the exported descriptor holds.
struct EntryInfo {
  int abi_version;
  Kind kind;
};

// The arguments of one call through an exported entry point; `error` comes back non-empty when
// the function threw.
struct Call {
  const void* input = nullptr;  // the Sample or std::vector<Sample> the function reads
  void* output = nullptr;       // what it returns: nlohmann::json, std::vector<nlohmann::json>,
                                // FilterDecision, std::vector<std::vector<Sample>>; or, for a
                                // generate function, the Sample it fills in
  std::vector<std::vector<Sample>>* buffer = nullptr;  // a buffer filter's buffer
  GenerationContext* context = nullptr;                // a generate function's engines
  int64_t count = 0;                                   // a buffer filter's num_groups
  std::string error;
};

// Runs `body`, turning what it throws into call->error (exceptions never cross the boundary).
template <typename Body>
void guarded(Call* call, Body&& body) {
  try {
    body();
  } catch (const std::exception& error) {
    call->error = error.what();
    if (call->error.empty()) call->error = "exception with an empty message";
  } catch (...) {
    call->error = "an exception that is not a std::exception";
  }
}

}  // namespace ooze::rollout::plugin

#define OOZE_PLUGIN_VISIBLE __attribute__((visibility("default")))

// The descriptor `ooze_plugin_info_NAME` and the entry point `ooze_plugin_NAME` of function NAME.
#define OOZE_PLUGIN_ENTRY_(name, kind_value, call_statement)                                    \
  extern "C" OOZE_PLUGIN_VISIBLE const ::ooze::rollout::plugin::EntryInfo                       \
      ooze_plugin_info_##name = {::ooze::rollout::plugin::kAbiVersion, kind_value};             \
  extern "C" OOZE_PLUGIN_VISIBLE void ooze_plugin_##name(::ooze::rollout::plugin::Call* call) { \
    ::ooze::rollout::plugin::guarded(call, [&] { call_statement; });                            \
  }

#define OOZE_EXPORT_REWARD(name)                                          \
  OOZE_PLUGIN_ENTRY_(name, ::ooze::rollout::plugin::Kind::kReward, {      \
    ::ooze::rollout::plugin::RewardFunction* typed = &name;               \
    *static_cast<::nlohmann::json*>(call->output) =                       \
        typed(*static_cast<const ::ooze::rollout::Sample*>(call->input)); \
  })

#define OOZE_EXPORT_BATCHED_REWARD(name)                                               \
  OOZE_PLUGIN_ENTRY_(name, ::ooze::rollout::plugin::Kind::kBatchedReward, {            \
    ::ooze::rollout::plugin::BatchedRewardFunction* typed = &name;                     \
    *static_cast<std::vector<::nlohmann::json>*>(call->output) =                       \
        typed(*static_cast<const std::vector<::ooze::rollout::Sample>*>(call->input)); \
  })

#define OOZE_EXPORT_GROUP_FILTER(name)                                                 \
  OOZE_PLUGIN_ENTRY_(name, ::ooze::rollout::plugin::Kind::kGroupFilter, {              \
    ::ooze::rollout::plugin::GroupFilterFunction* typed = &name;                       \
    *static_cast<::ooze::rollout::plugin::FilterDecision*>(call->output) =             \
        typed(*static_cast<const std::vector<::ooze::rollout::Sample>*>(call->input)); \
  })

#define OOZE_EXPORT_BUFFER_FILTER(name)                                              \
  OOZE_PLUGIN_ENTRY_(name, ::ooze::rollout::plugin::Kind::kBufferFilter, {           \
    ::ooze::rollout::plugin::BufferFilterFunction* typed = &name;                    \
    *static_cast<std::vector<std::vector<::ooze::rollout::Sample>>*>(call->output) = \
        typed(*call->buffer, call->count);                                           \
  })

#define OOZE_EXPORT_GENERATE(name)                                               \
  OOZE_PLUGIN_ENTRY_(name, ::ooze::rollout::plugin::Kind::kGenerate, {           \
    ::ooze::rollout::plugin::GenerateFunction* typed = &name;                    \
    typed(*call->context, *static_cast<::ooze::rollout::Sample*>(call->output)); \
  })
