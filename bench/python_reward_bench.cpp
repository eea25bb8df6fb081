// What a Python reward function costs over the same reward as a C++ plugin: the demo's
// exact-match reward (examples/demo/exact_match_reward.py and its twin
// exact_match_reward.cpp, built as libexact_match_reward.so) scores the samples of a demo-sized
// rollout (16 prompts x 16 samples) through RewardModel, as `ooze train` does, on 16 reward
// threads. The reward itself is trivial, so the figure is the overhead of handing samples to
// Python and back. Best of 7 rollouts after a warm-up:
//
//   python_reward_sync   samples/s of the Python function vs the C++ plugin (goal >= 0.5)
//   python_reward_async  the same function as `async def` (its calls awaited together)
//
//   bench_python_reward_bench
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "rollout/reward_model.h"

namespace rollout = ooze::rollout;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kRepetitions = 7;
constexpr int kPrompts = 16;
constexpr int kSamplesPerPrompt = 16;

std::vector<std::vector<rollout::Sample>> demo_rollout() {
  std::vector<std::vector<rollout::Sample>> groups(kPrompts);
  for (int prompt = 0; prompt < kPrompts; ++prompt) {
    for (int i = 0; i < kSamplesPerPrompt; ++i) {
      rollout::Sample sample;
      sample.group_index = prompt;
      sample.index = prompt * kSamplesPerPrompt + i;
      sample.prompt = std::to_string(prompt % 10) + "+" + std::to_string(i % 10) + "=";
      sample.tokens = {1, 2, 3, 4, 5, 6, 7};
      sample.response = std::to_string((prompt + i) % 19);
      sample.response_length = 2;
      sample.label = std::to_string(prompt % 10 + i % 10);
      sample.loss_mask = {1, 1};
      sample.rollout_log_probs = {-0.5f, -0.25f};
      sample.weight_versions = {3, 3};
      sample.status = rollout::Sample::Status::kCompleted;
      groups[prompt].push_back(sample);
    }
  }
  return groups;
}

// Best samples/s of scoring a whole rollout, group by group as a run does.
double samples_per_second(const std::string& custom_rm_path) {
  rollout::RewardOptions options;
  options.custom_rm_path = custom_rm_path;
  rollout::RewardModel rewards(options);
  const std::vector<std::vector<rollout::Sample>> fresh = demo_rollout();
  double best = 1e300;
  for (int repetition = 0; repetition <= kRepetitions; ++repetition) {
    std::vector<std::vector<rollout::Sample>> groups = fresh;
    const auto start = Clock::now();
    for (std::vector<rollout::Sample>& group : groups) rewards.score_group(group);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (repetition > 0) best = std::min(best, seconds);  // the first pass warms up
  }
  return kPrompts * kSamplesPerPrompt / best;
}

void print_line(const std::string& metric, double value, double baseline) {
  std::printf(
      "{\"bench\": \"python_reward\", \"metric\": \"%s\", \"value\": %.4g, \"unit\": "
      "\"samples/s\", \"baseline\": %.4g, \"ratio\": %.4g}\n",
      metric.c_str(), value, baseline, value / baseline);
  std::fflush(stdout);
}

}  // namespace

int main() {
  const double cpp = samples_per_second(std::string(OOZE_EXACT_MATCH_PLUGIN) + ":exact_match");
  const std::string python = std::string(OOZE_SOURCE_DIR) + "/examples/demo/exact_match_reward.py";
  print_line("python_reward_sync", samples_per_second(python + ":exact_match"), cpp);
  print_line("python_reward_async", samples_per_second(python + ":exact_match_async"), cpp);
  return 0;
}
