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
// Then end to end, on the real `ooze` binary: the demo's GRPO (bench_support.h's demo model and
// prompts, 2 trainer ranks and 2 engines apart, rollouts of 16 prompts x 16 samples) with each
// reward, runs alternating, the faster of kRuns each:
//   demo_rollout_time_python_reward  mean perf/rollout_time past the warm-up, baseline the C++
//                                    plugin's (ratio: C++ / Python; goal >= 0.95)
//
//   bench_python_reward_bench
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/bench_support.h"
#include "core/load_time_settings.h"
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

constexpr int kWarmupRollouts = 2;
constexpr int kMeasuredRollouts = 6;
constexpr int kRuns = 2;

// Mean rollout seconds of a demo GRPO run rewarded by `custom_rm_path`.
double demo_rollout_seconds(const ooze::bench::ScopedTempDir& files,
                            const std::string& custom_rm_path, const std::string& name) {
  const std::string out = files.path(name);
  std::vector<std::string> command = ooze::bench::demo_train_command(
      ooze::bench::ooze_binary(), files.path("model"), files.path("prompts.jsonl"), kPrompts,
      kSamplesPerPrompt, kWarmupRollouts + kMeasuredRollouts, out);
  command.insert(command.end(), {"--custom-rm-path", custom_rm_path, "--actor-num-gpus-per-node",
                                 "2", "--rollout-num-gpus", "2", "--rollout-max-response-len", "4",
                                 "--global-batch-size", "128"});
  ooze::bench::run_logged(command, out + ".log");
  double seconds = 0;
  for (const nlohmann::json& line :
       ooze::bench::rollout_lines(out + "/metrics.jsonl", kWarmupRollouts, kMeasuredRollouts)) {
    seconds += ooze::bench::metric(line, "perf/rollout_time") / kMeasuredRollouts;
  }
  return seconds;
}

}  // namespace

int main(int, char** argv) {
  ooze::start_with_load_time_settings(argv);  // first: it may start this program again
  const std::string bench = "python_reward";
  const std::string cpp_path = std::string(OOZE_EXACT_MATCH_PLUGIN) + ":exact_match";
  const std::string python = std::string(OOZE_SOURCE_DIR) + "/examples/demo/exact_match_reward.py";
  const double cpp = samples_per_second(cpp_path);
  for (const std::string form : {"sync", "async"}) {
    const double value =
        samples_per_second(python + (form == "sync" ? ":exact_match" : ":exact_match_async"));
    ooze::bench::print_line(bench, "python_reward_" + form, value, "samples/s", cpp, value / cpp);
  }
  try {
    ooze::bench::ScopedTempDir files("ooze-python-reward-bench");
    ooze::bench::init_demo_model(ooze::bench::ooze_binary(), files.path("model"),
                                 files.path("model-init.log"));
    ooze::bench::write_sum_prompts(files.path("prompts.jsonl"));
    double best_cpp = 1e300, best_python = 1e300;
    for (int run = 0; run < kRuns; ++run) {
      const std::string suffix = std::to_string(run);
      best_cpp = std::min(best_cpp, demo_rollout_seconds(files, cpp_path, "cpp-" + suffix));
      best_python = std::min(
          best_python, demo_rollout_seconds(files, python + ":exact_match", "python-" + suffix));
    }
    ooze::bench::print_line(bench, "demo_rollout_time_python_reward", best_python, "s", best_cpp,
                            best_cpp / best_python);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 1;
  }
  return 0;
}
