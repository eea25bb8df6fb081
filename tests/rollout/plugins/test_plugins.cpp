// Plugin functions of every kind for plugin_function_test, built as a shared library the way a
// user builds one: it includes rollout/reward_plugin.h and links nothing of ooze.
#include <algorithm>
#include <atomic>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "rollout/reward_plugin.h"

using ooze::rollout::Sample;
namespace plugin = ooze::rollout::plugin;

// ---- rewards ----

nlohmann::json response_length(const Sample& sample) {
  return static_cast<double>(sample.response.size());
}
OOZE_EXPORT_REWARD(response_length)

nlohmann::json graded_answer(const Sample& sample) {
  const bool correct =
      !sample.label.empty() && sample.response.find(sample.label) != std::string::npos;
  return {{"score", correct ? 1.0 : 0.0}, {"label", sample.label}};
}
OOZE_EXPORT_REWARD(graded_answer)

nlohmann::json needs_label(const Sample& sample) {
  if (sample.label.empty()) throw std::invalid_argument("the sample has no label to compare with");
  return 1.0;
}
OOZE_EXPORT_REWARD(needs_label)

nlohmann::json throws_an_int(const Sample&) { throw 42; }
OOZE_EXPORT_REWARD(throws_an_int)

// One counter for the library: every load of the same path shares it.
std::atomic<int64_t> calls_so_far{0};

nlohmann::json count_calls(const Sample& sample) {
  const int64_t call = ++calls_so_far;
  return {{"call", call}, {"index", sample.index}, {"response", sample.response}};
}
OOZE_EXPORT_REWARD(count_calls)

// ---- batched rewards ----

// Each sample's rank by response length within the batch (0 = shortest; ties by position).
std::vector<nlohmann::json> rank_by_length(const std::vector<Sample>& samples) {
  std::vector<size_t> order(samples.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return samples[a].response.size() < samples[b].response.size();
  });
  std::vector<nlohmann::json> rewards(samples.size());
  for (size_t rank = 0; rank < order.size(); ++rank) rewards[order[rank]] = rank;
  return rewards;
}
OOZE_EXPORT_BATCHED_REWARD(rank_by_length)

std::vector<nlohmann::json> one_reward_short(const std::vector<Sample>& samples) {
  return std::vector<nlohmann::json>(samples.empty() ? 0 : samples.size() - 1, 1.0);
}
OOZE_EXPORT_BATCHED_REWARD(one_reward_short)

// ---- group filters ----

// Dynamic sampling as DAPO does it: a group whose rewards are all equal teaches nothing.
plugin::FilterDecision keep_mixed_rewards(const std::vector<Sample>& group) {
  for (const Sample& sample : group) {
    if (sample.reward_value() != group.front().reward_value()) return true;
  }
  return {false, "all rewards equal"};
}
OOZE_EXPORT_GROUP_FILTER(keep_mixed_rewards)

plugin::FilterDecision needs_four_samples(const std::vector<Sample>& group) {
  if (group.size() != 4) {
    throw std::length_error("expected 4 samples per group, got " + std::to_string(group.size()));
  }
  return true;
}
OOZE_EXPORT_GROUP_FILTER(needs_four_samples)

// ---- buffer filters ----

// The newest groups first (the back of the buffer), at most num_groups of them.
std::vector<std::vector<Sample>> take_newest_groups(std::vector<std::vector<Sample>>& buffer,
                                                    int64_t num_groups) {
  std::vector<std::vector<Sample>> taken;
  while (!buffer.empty() && static_cast<int64_t>(taken.size()) < num_groups) {
    taken.push_back(std::move(buffer.back()));
    buffer.pop_back();
  }
  return taken;
}
OOZE_EXPORT_BUFFER_FILTER(take_newest_groups)

std::vector<std::vector<Sample>> take_everything(std::vector<std::vector<Sample>>& buffer,
                                                 int64_t) {
  std::vector<std::vector<Sample>> taken = std::move(buffer);
  buffer.clear();
  return taken;
}
OOZE_EXPORT_BUFFER_FILTER(take_everything)

// ---- generate functions ----

// Two policy turns around one tool answer, as a multi-turn generate function does.
void answer_with_tool(plugin::GenerationContext& context, Sample& sample) {
  const std::string first = context.generate(sample, 3);
  const int64_t observed = context.append_observation(sample, "<tool>" + first + "</tool>");
  context.generate(sample);
  sample.metrics["turns"] = 2;
  sample.metrics["observation_tokens"] = observed;
}
OOZE_EXPORT_GENERATE(answer_with_tool)

void tool_unreachable(plugin::GenerationContext& context, Sample& sample) {
  context.generate(sample, 1);
  throw std::runtime_error("the search tool at 127.0.0.1:9 is unreachable");
}
OOZE_EXPORT_GENERATE(tool_unreachable)

// ---- not a plugin function ----

// Exported, but not with an OOZE_EXPORT_* macro: ooze cannot know its signature.
extern "C" OOZE_PLUGIN_VISIBLE double plain_function(const char* response) {
  return response != nullptr ? 1.0 : 0.0;
}
