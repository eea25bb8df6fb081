// The demo that learns, as `make demo` runs it (examples/demo/run.sh), cut to 100 GRPO rollouts
// and run in three placements (between them: colocated and apart, 1 and 2 trainer ranks, 1 and
// 2 engines): eval/add, the share of sampled answers that are exactly the sum, must rise by a
// stated margin from the warm start's level. The first run does the supervised warm start; the
// others begin GRPO from its model (WARM_START), and so do PPO with a learned critic
// (examples/algorithms/ppo.sh) and asynchronous GRPO (grpo.sh --async). Seeds are fixed; nothing
// here is timed. The demo's reward is a Python file; one placement uses its C++ plugin twin.
#include <gtest/gtest.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/process.h"

namespace rl_demo_test {

using namespace std::chrono_literals;
using nlohmann::json;

struct DemoRun {
  std::vector<double> eval;  // eval/add at rollouts 0 and 100
  std::string out;
};

// `reward`: python (the demo's exact-match reward as a Python file) or cpp (as a C++ plugin).
DemoRun run_demo(const std::string& name, const std::string& placement,
                 const std::string& warm_start, const std::string& reward = "python") {
  const std::string out = ::ooze::testing::make_temp_dir("rl-demo-" + name);
  ::ooze::testing::Process run(
      {"/bin/bash", std::string(OOZE_SOURCE_DIR) + "/examples/demo/run.sh", out},
      {{"BUILD_DIR", ::ooze::testing::build_path("")},
       {"NUM_ROLLOUT", "100"},
       {"PLACEMENT_ARGS", placement},
       {"WARM_START", warm_start},
       {"REWARD", reward}},
      out + ".log");
  const ::ooze::testing::ExitStatus status = run.wait(600s);
  EXPECT_TRUE(status.exited && status.code == 0) << status.describe() << "\n" << run.output();
  DemoRun result;
  result.out = out;
  std::ifstream metrics(out + "/grpo/metrics.jsonl");
  std::string line;
  while (std::getline(metrics, line)) {
    const json parsed = json::parse(line);
    if (parsed.contains("eval/add")) result.eval.push_back(parsed["eval/add"].get<double>());
  }
  return result;
}

// examples/algorithms/`name`.sh from the warm start, 100 rollouts, evaluated before and after.
struct AlgorithmRun {
  std::vector<double> eval;
  std::vector<json> rollouts;
  std::vector<json> train_steps;
};

AlgorithmRun run_algorithm(const std::string& name, const std::string& warm_start,
                           const std::vector<std::string>& flags = {}) {
  const std::string out = ::ooze::testing::make_temp_dir("rl-demo-" + name);
  std::vector<std::string> command = {
      "/bin/bash", std::string(OOZE_SOURCE_DIR) + "/examples/algorithms/" + name + ".sh"};
  command.insert(command.end(), flags.begin(), flags.end());
  ::ooze::testing::Process run(command,
                               {{"BUILD_DIR", ::ooze::testing::build_path("")},
                                {"OUT", out},
                                {"NUM_ROLLOUT", "100"},
                                {"EVAL_INTERVAL", "100"},
                                {"WARM_START", warm_start}},
                               out + ".log");
  const ::ooze::testing::ExitStatus status = run.wait(600s);
  EXPECT_TRUE(status.exited && status.code == 0) << status.describe() << "\n" << run.output();
  AlgorithmRun result;
  std::ifstream metrics(out + "/metrics.jsonl");
  std::string line;
  while (std::getline(metrics, line)) {
    const json parsed = json::parse(line);
    if (parsed.contains("eval/add")) result.eval.push_back(parsed["eval/add"].get<double>());
    if (parsed.contains("train/step")) result.train_steps.push_back(parsed);
    if (parsed.contains("perf/step_time")) result.rollouts.push_back(parsed);
  }
  if (result.eval.size() != 2) {
    ADD_FAILURE() << name << ": eval/add before and after expected";
    result.eval.resize(2, 0.0);
  }
  return result;
}

TEST(RlDemoTest, GrpoInEveryPlacementPpoAndAsyncGrpoRaiseTheEvalReward) {
  // 2 trainer ranks and 2 engines apart (the demo's own placement), after the warm start.
  const DemoRun first =
      run_demo("disaggregated", "--actor-num-gpus-per-node 2 --rollout-num-gpus 2", "");
  ASSERT_EQ(first.eval.size(), 2u);
  EXPECT_LE(first.eval[0], 0.5) << "the warm start alone should rarely be right";
  EXPECT_GE(first.eval[1], first.eval[0] + 0.2) << "GRPO did not raise eval/add";
  EXPECT_TRUE(std::filesystem::exists(first.out + "/grpo/plots/eval_add.png"));
  EXPECT_TRUE(std::filesystem::exists(first.out + "/grpo/plots/dashboard.png"));
  EXPECT_FALSE(std::filesystem::is_empty(first.out + "/grpo/tensorboard"));

  // The first run scored samples with the Python reward; one of these with the C++ plugin.
  const std::string warm_start = first.out + "/sft/model";
  for (const auto& [name, placement, reward] : std::vector<std::array<std::string, 3>>{
           {"one-rank-one-engine-colocated",
            "--actor-num-gpus-per-node 1 --rollout-num-gpus 1 --colocate", "python"},
           {"one-rank-two-engines", "--actor-num-gpus-per-node 1 --rollout-num-gpus 2", "cpp"}}) {
    const DemoRun run = run_demo(name, placement, warm_start, reward);
    ASSERT_EQ(run.eval.size(), 2u) << name;
    // The same warm start, the same prompts and sampling seeds: the same starting level.
    EXPECT_NEAR(run.eval[0], first.eval[0], 0.1) << name;
    EXPECT_GE(run.eval[1], run.eval[0] + 0.2) << name << ": GRPO did not raise eval/add";
  }

  // PPO with a learned critic (examples/algorithms/ppo.sh): 5 rollouts train the critic alone,
  // then both learn.
  const AlgorithmRun ppo = run_algorithm("ppo", warm_start);
  EXPECT_NEAR(ppo.eval[0], first.eval[0], 0.1);
  EXPECT_GE(ppo.eval[1], ppo.eval[0] + 0.2) << "PPO did not raise eval/add";
  for (const json& step : ppo.train_steps) {
    EXPECT_TRUE(step.contains("critic/value_loss")) << step.dump();
    EXPECT_EQ(step.contains("train/pg_loss"), step["step"].get<int>() >= 5) << step.dump();
  }

  // GRPO with --async (examples/algorithms/grpo.sh): each rollout generated while the one before
  // it trains, one weight version behind.
  const AlgorithmRun async = run_algorithm("grpo", warm_start, {"--async"});
  EXPECT_NEAR(async.eval[0], first.eval[0], 0.1);
  EXPECT_GE(async.eval[1], async.eval[0] + 0.2) << "asynchronous GRPO did not raise eval/add";
  for (const json& rollout : async.rollouts) {
    EXPECT_LE(rollout["rollout/max_staleness"].get<double>(), 1) << rollout.dump();
  }
}

}  // namespace rl_demo_test
