// The CPU example scripts as users run them (examples/README.md), each cut to 2 rollouts and a
// short warm start: every one must exit 0 and write the metrics its algorithm or plugin is
// about.
//   - examples/algorithms/{grpo,dapo,gspo,reinforce_plus_plus,ppo,cispo}.sh: grpo.sh makes the
//     warm start, the others begin from it (WARM_START); each run's config.json names its
//     algorithm, and each logs what only that algorithm produces (the KL metric of GRPO, DAPO's
//     dropped groups, the reference log-probs of REINFORCE++'s KL penalty, the metric of
//     CISPO's Python loss).
//   - examples/reward_plugin/run.sh: the plugin installed, built and loaded; every saved
//     sample's reward is checked against the format rule written out here.
//   - examples/multi_turn/run.sh: the calculator plugin built and called during rollouts, and
//     its Python twin.
// Nothing here is timed, and learning is not asserted (2 rollouts); examples/README.md quotes
// what longer runs reach.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/process.h"

#ifndef OOZE_SOURCE_DIR
#error "OOZE_SOURCE_DIR (the repository, where examples/ is) must be defined by the build"
#endif

namespace examples_test {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using nlohmann::json;

constexpr int kRollouts = 2;

struct ScriptRun {
  std::string out;
  json config = json::object();   // OUT/config.json
  std::vector<json> rollouts;     // metrics.jsonl lines of whole rollouts (perf/step_time)
  std::vector<json> train_steps;  // lines of optimizer steps (train/step)
  std::vector<double> eval_add;   // eval/add, in order
};

// Runs examples/`script` with OUT in a fresh directory, `env` and `args` ("{OUT}" in an argument
// is replaced by OUT); fails the test unless it exits 0 within `timeout`, then reads what it
// wrote.
ScriptRun run_example(const std::string& script, std::map<std::string, std::string> env,
                      const std::vector<std::string>& args = {},
                      std::chrono::milliseconds timeout = 300s) {
  ScriptRun run;
  run.out = ::ooze::testing::make_temp_dir("example-" + fs::path(script).stem().string());
  env["OUT"] = run.out;
  env["BUILD_DIR"] = ::ooze::testing::build_path("");
  env["NUM_ROLLOUT"] = std::to_string(kRollouts);
  std::vector<std::string> argv = {"/bin/bash",
                                   std::string(OOZE_SOURCE_DIR) + "/examples/" + script};
  for (std::string arg : args) {
    const size_t at = arg.find("{OUT}");
    if (at != std::string::npos) arg.replace(at, 5, run.out);
    argv.push_back(arg);
  }
  ::ooze::testing::Process process(argv, env, run.out + ".log");
  const ::ooze::testing::ExitStatus status = process.wait(timeout);
  EXPECT_TRUE(status.exited && status.code == 0) << script << ": " << status.describe() << "\n"
                                                 << process.output();

  std::ifstream config(run.out + "/config.json");
  if (config) run.config = json::parse(config);
  std::ifstream metrics(run.out + "/metrics.jsonl");
  std::string line;
  while (std::getline(metrics, line)) {
    json parsed = json::parse(line);
    if (parsed.contains("eval/add")) run.eval_add.push_back(parsed["eval/add"].get<double>());
    if (parsed.contains("train/step")) run.train_steps.push_back(parsed);
    if (parsed.contains("perf/step_time")) run.rollouts.push_back(parsed);
  }
  return run;
}

// What every RL run of the examples writes: one line per rollout, evaluations before the first
// and after the last, and finite policy losses.
void expect_complete_rl_run(const ScriptRun& run, const std::string& name,
                            double samples_per_rollout = 16 * 16) {
  EXPECT_EQ(run.rollouts.size(), static_cast<size_t>(kRollouts)) << name;
  EXPECT_EQ(run.eval_add.size(), 2u) << name << ": eval/add before and after the run";
  for (double value : run.eval_add) EXPECT_TRUE(value >= 0 && value <= 1.1) << name;
  ASSERT_FALSE(run.train_steps.empty()) << name;
  for (const json& step : run.train_steps) {
    ASSERT_TRUE(step.contains("train/pg_loss")) << name << ": " << step.dump();
    EXPECT_TRUE(std::isfinite(step["train/pg_loss"].get<double>())) << name;
  }
  for (const json& rollout : run.rollouts) {
    EXPECT_EQ(rollout.value("rollout/samples", 0.0), samples_per_rollout) << name;
  }
  EXPECT_TRUE(fs::exists(run.out + "/train.log")) << name;
}

TEST(ExamplesTest, AlgorithmVariantsRunOnTheDemoTask) {
  // grpo.sh does the warm start itself (shortened); the other scripts begin from its model.
  const ScriptRun grpo = run_example("algorithms/grpo.sh", {{"SFT_STEPS", "40"}});
  const std::string warm_start = grpo.out + "/sft/model";
  ASSERT_TRUE(fs::exists(warm_start + "/config.json")) << "grpo.sh wrote no warm-start model";
  expect_complete_rl_run(grpo, "grpo");
  EXPECT_EQ(grpo.config.value("advantage_estimator", ""), "grpo");
  EXPECT_EQ(grpo.config.value("hf_checkpoint", ""), warm_start);
  // The KL to the warm start is measured (train/kl_loss) but has no weight in the loss.
  EXPECT_EQ(grpo.config.value("use_kl_loss", false), true);
  for (const json& step : grpo.train_steps) {
    ASSERT_TRUE(step.contains("train/kl_loss")) << step.dump();
    EXPECT_GE(step["train/kl_loss"].get<double>(), -1e-6);
    EXPECT_DOUBLE_EQ(step["train/loss"].get<double>(), step["train/pg_loss"].get<double>());
  }

  // DAPO with groups of 4, so that groups whose rewards all agree are common from the start.
  const ScriptRun dapo = run_example("algorithms/dapo.sh", {{"WARM_START", warm_start}},
                                     {"--n-samples-per-prompt", "4", "--global-batch-size", "32"});
  EXPECT_EQ(dapo.rollouts.size(), static_cast<size_t>(kRollouts));
  EXPECT_EQ(dapo.eval_add.size(), 2u);
  // The filter is examples/algorithms/dapo_filter.py, whose reasons name the shared reward.
  EXPECT_NE(dapo.config.value("dynamic_sampling_filter_path", "").find("dapo_filter.py:"),
            std::string::npos);
  EXPECT_DOUBLE_EQ(dapo.config.value("eps_clip_high", 0.0), 0.28);
  EXPECT_EQ(dapo.config.value("loss_aggregation", ""), "token-mean");
  double dropped = 0;
  for (const json& rollout : dapo.rollouts) {
    // 16 kept groups, none of them with rewards that all agree; the rest were dropped.
    EXPECT_EQ(rollout.value("rollout/dynamic_filter/kept_groups", 0.0), 16) << rollout.dump();
    EXPECT_EQ(rollout.value("rollout/zero_std_group_ratio", -1.0), 0.0) << rollout.dump();
    EXPECT_EQ(rollout.value("rollout/samples", 0.0), 16 * 4) << rollout.dump();
    EXPECT_EQ(rollout.value("rollout/dynamic_filter/drop_zero_std_0.0", 0.0) +
                  rollout.value("rollout/dynamic_filter/drop_zero_std_1.0", 0.0),
              rollout.value("rollout/dynamic_filter/dropped_groups", -1.0))
        << rollout.dump();
    dropped += rollout.value("rollout/dynamic_filter/dropped_groups", 0.0);
  }
  EXPECT_GT(dropped, 0) << "dynamic sampling dropped no group in " << kRollouts << " rollouts";
  for (const json& step : dapo.train_steps) EXPECT_TRUE(step.contains("train/pg_loss"));

  const ScriptRun gspo = run_example("algorithms/gspo.sh", {{"WARM_START", warm_start}});
  expect_complete_rl_run(gspo, "gspo");
  EXPECT_EQ(gspo.config.value("advantage_estimator", ""), "gspo");
  EXPECT_DOUBLE_EQ(gspo.config.value("eps_clip", 0.0), 3e-4);
  EXPECT_DOUBLE_EQ(gspo.config.value("eps_clip_high", 0.0), 4e-4);

  const ScriptRun reinforce =
      run_example("algorithms/reinforce_plus_plus.sh", {{"WARM_START", warm_start}});
  expect_complete_rl_run(reinforce, "reinforce_plus_plus");
  EXPECT_EQ(reinforce.config.value("advantage_estimator", ""), "reinforce_plus_plus");
  EXPECT_DOUBLE_EQ(reinforce.config.value("kl_coef", 0.0), 0.001);
  // The KL penalty in the rewards needs the reference model's log-probs every rollout.
  for (const json& rollout : reinforce.rollouts) {
    EXPECT_TRUE(rollout.contains("perf/ref_log_probs_time")) << rollout.dump();
  }

  // ppo: a critic rank scores every rollout and trains beside the policy (from the first
  // rollout here; RlDemoTest runs the critic-only start).
  const ScriptRun ppo = run_example("algorithms/ppo.sh", {{"WARM_START", warm_start}},
                                    {"--num-critic-only-steps", "0"});
  expect_complete_rl_run(ppo, "ppo");
  EXPECT_EQ(ppo.config.value("advantage_estimator", ""), "ppo");
  for (const json& rollout : ppo.rollouts) {
    EXPECT_TRUE(rollout.contains("perf/values_time")) << rollout.dump();
  }
  ASSERT_FALSE(ppo.train_steps.empty());
  for (const json& step : ppo.train_steps) {
    EXPECT_TRUE(step.contains("critic/value_loss")) << step.dump();
    EXPECT_TRUE(step.contains("critic/value_clipfrac")) << step.dump();
  }

  // CISPO as a Python loss (examples/algorithms/cispo_loss.py) in every trainer rank.
  const ScriptRun cispo = run_example("algorithms/cispo.sh", {{"WARM_START", warm_start}});
  expect_complete_rl_run(cispo, "cispo");
  EXPECT_EQ(cispo.config.value("loss_type", ""), "custom_loss");
  EXPECT_EQ(cispo.config.value("custom_loss_function_path", ""),
            std::string(OOZE_SOURCE_DIR) + "/examples/algorithms/cispo_loss.py:cispo_loss");
  for (const json& step : cispo.train_steps) {
    ASSERT_TRUE(step.contains("train/is_ratio_mean")) << step.dump();
    EXPECT_NEAR(step["train/is_ratio_mean"].get<double>(), 1.0, 0.5) << step.dump();
  }
}

// Independent of the plugin: reasoning closed by </think>, then exactly one \boxed{}.
bool well_formed(const std::string& response) {
  const size_t think_end = response.find("</think>");
  const size_t box = response.find("\\boxed{");
  return think_end != std::string::npos && box != std::string::npos && box > think_end &&
         response.find("\\boxed{", box + 1) == std::string::npos;
}

// The text inside the last \boxed{...} (without nested braces); "" when there is none.
std::string last_boxed(const std::string& response) {
  const size_t box = response.rfind("\\boxed{");
  if (box == std::string::npos) return "";
  const size_t start = box + 7;
  const size_t end = response.find('}', start);
  return end == std::string::npos ? "" : response.substr(start, end - start);
}

TEST(ExamplesTest, RewardPluginRunBuildsThePluginAndTrainsOnItsScore) {
  const ScriptRun run =
      run_example("reward_plugin/run.sh", {{"SFT_STEPS", "40"}},
                  {"--save-debug-rollout-data", "{OUT}/samples_{rollout_id}.jsonl"}, 600s);
  EXPECT_TRUE(fs::exists(run.out + "/plugin/libmath_format_reward.so"));
  EXPECT_EQ(run.config.value("custom_rm_path", ""),
            run.out + "/plugin/libmath_format_reward.so:math_with_format_bonus");
  EXPECT_EQ(run.config.value("reward_key", ""), "score");
  expect_complete_rl_run(run, "reward_plugin");

  int64_t samples = 0, formed = 0, spelled_right = 0;
  for (int rollout = 0; rollout < kRollouts; ++rollout) {
    std::ifstream saved(run.out + "/samples_" + std::to_string(rollout) + ".jsonl");
    ASSERT_TRUE(saved) << "rollout " << rollout << " saved no samples";
    std::string line;
    while (std::getline(saved, line)) {
      const json sample = json::parse(line);
      const std::string response = sample.at("response").get<std::string>();
      const json& reward = sample.at("reward");
      ASSERT_TRUE(reward.is_object()) << line;
      const double bonus = well_formed(response) ? 0.1 : 0.0;
      EXPECT_DOUBLE_EQ(reward.at("format_bonus").get<double>(), bonus) << response;
      const double correct = reward.at("correct").get<double>();
      EXPECT_TRUE(correct == 0.0 || correct == 1.0) << response;
      // A last boxed answer that spells the label is right whatever else the rule accepts.
      if (last_boxed(response) == sample.at("label").get<std::string>()) {
        EXPECT_EQ(correct, 1.0) << response;
        ++spelled_right;
      }
      EXPECT_DOUBLE_EQ(reward.at("score").get<double>(), correct + bonus) << response;
      ++samples;
      formed += bonus > 0;
    }
  }
  EXPECT_EQ(samples, kRollouts * 16 * 16);
  // The warm start writes both forms and is sometimes right, so every case occurs.
  EXPECT_GT(formed, 0);
  EXPECT_LT(formed, samples);
  EXPECT_GT(spelled_right, 0);
}

TEST(ExamplesTest, MultiTurnRunCallsTheCalculatorDuringRollouts) {
  const ScriptRun run =
      run_example("multi_turn/run.sh", {{"SFT_STEPS", "40"}},
                  {"--save-debug-rollout-data", "{OUT}/samples_{rollout_id}.jsonl"}, 600s);
  EXPECT_TRUE(fs::exists(run.out + "/plugin/libcalculator_generate.so"));
  EXPECT_EQ(run.config.value("custom_generate_function_path", ""),
            run.out + "/plugin/libcalculator_generate.so:calculator_generate");
  expect_complete_rl_run(run, "multi_turn");
  double calls = 0;
  for (const json& rollout : run.rollouts) {
    ASSERT_TRUE(rollout.contains("rollout/turns")) << rollout.dump();
    ASSERT_TRUE(rollout.contains("rollout/tool_calls")) << rollout.dump();
    EXPECT_GE(rollout["rollout/turns"].get<double>(), 1.0);
    calls += rollout["rollout/tool_calls"].get<double>();
  }
  EXPECT_GT(calls, 0) << "the warm start never called the calculator";

  // Every call the policy wrote was answered by the calculator with the exact sum.
  int64_t answered = 0;
  for (int rollout = 0; rollout < kRollouts; ++rollout) {
    std::ifstream saved(run.out + "/samples_" + std::to_string(rollout) + ".jsonl");
    ASSERT_TRUE(saved) << "rollout " << rollout << " saved no samples";
    std::string line;
    while (std::getline(saved, line)) {
      const json sample = json::parse(line);
      const std::string response = sample.at("response").get<std::string>();
      const size_t open = response.find("<calc>");
      const size_t close = response.find("</calc>");
      if (open == std::string::npos || close == std::string::npos || close < open) continue;
      const std::string expression = response.substr(open + 6, close - open - 6);
      const size_t plus = expression.find('+');
      if (expression.size() != 3 || plus != 1 || !std::isdigit(expression[0]) ||
          !std::isdigit(expression[2])) {
        continue;  // not a well-formed single-digit sum: the tool's answer is not checked here
      }
      const int sum = (expression[0] - '0') + (expression[2] - '0');
      const std::string observation = "<result>" + std::to_string(sum) + "</result>";
      EXPECT_EQ(response.compare(close + 7, observation.size(), observation), 0) << response;
      // The observation is not the policy's: its tokens carry loss mask 0.
      const std::vector<int> mask = sample.at("loss_mask").get<std::vector<int>>();
      EXPECT_NE(std::find(mask.begin(), mask.end(), 0), mask.end()) << response;
      ++answered;
    }
  }
  EXPECT_GT(answered, 0) << "no sample called the calculator with a single-digit sum";

  // The Python twin of the calculator (GENERATE=python), from the same warm start.
  const ScriptRun python = run_example(
      "multi_turn/run.sh", {{"GENERATE", "python"}, {"WARM_START", run.out + "/sft/model"}});
  EXPECT_NE(python.config.value("custom_generate_function_path", "")
                .find("multi_turn/calculator_generate.py:calculator_generate"),
            std::string::npos);
  expect_complete_rl_run(python, "multi_turn (Python)");
  double python_calls = 0;
  for (const json& rollout : python.rollouts) {
    python_calls += rollout.value("rollout/tool_calls", 0.0);
  }
  EXPECT_GT(python_calls, 0) << "the Python calculator answered no call";

  // The same dialogue as an agent program per sample (examples/agent, --agent-command) talking
  // to its session over HTTP, from the same warm start.
  // A quarter of the agents (each is a Python process of its own).
  const ScriptRun agent = run_example("agent/run.sh", {{"WARM_START", run.out + "/sft/model"}},
                                      {"--rollout-batch-size", "4", "--global-batch-size", "64",
                                       "--n-samples-per-eval-prompt", "1"});
  EXPECT_NE(agent.config.value("agent_command", "").find("agent/calculator_agent.py"),
            std::string::npos);
  expect_complete_rl_run(agent, "agent", 4 * 16);
  double agent_calls = 0;
  for (const json& rollout : agent.rollouts) {
    EXPECT_GE(rollout.value("rollout/agent/turns/mean", 0.0), 1.0) << rollout.dump();
    EXPECT_EQ(rollout.value("rollout/aborted_ratio", 1.0), 0.0) << rollout.dump();
    agent_calls += rollout.value("rollout/calculator_calls", 0.0);  // the agent's own metric
  }
  EXPECT_GT(agent_calls, 0) << "the agents answered no calculator call";
}

// The distillation example in miniature: a teacher from the demo's GRPO, written with --save-hf,
// then two students from the same warm start, here LoRA students (STUDENT_ARGS), distilled from
// the sampled tokens and from whole distributions: LoRA and on-policy distillation through
// `ooze train` as users run them.
TEST(ExamplesTest, DistillationRunTrainsATeacherAndDistillsItIntoLoraStudents) {
  const std::string out = ::ooze::testing::make_temp_dir("example-distillation");
  ::ooze::testing::Process process(
      {"/bin/bash", std::string(OOZE_SOURCE_DIR) + "/examples/distillation/run.sh", out},
      {{"BUILD_DIR", ::ooze::testing::build_path("")},
       {"SFT_STEPS", "40"},
       {"TEACHER_ROLLOUTS", std::to_string(kRollouts)},
       {"NUM_ROLLOUT", std::to_string(kRollouts)},
       {"EVAL_INTERVAL", std::to_string(kRollouts)},
       {"STUDENT_ARGS", "--lora-rank 8 --lora-alpha 16"}},
      out + ".log");
  const ::ooze::testing::ExitStatus status = process.wait(600s);
  ASSERT_TRUE(status.exited && status.code == 0) << status.describe() << "\n" << process.output();
  EXPECT_TRUE(fs::exists(out + "/teacher/config.json")) << "no teacher written by --save-hf";
  for (const char* curve : {"GRPO alone (the teacher):", "OPD, sampled tokens:",
                            "OPD, whole distributions:", "reaches "}) {
    EXPECT_NE(process.output().find(curve), std::string::npos) << process.output();
  }

  for (const std::string student : {"opd-sampled", "opd-full-vocab"}) {
    std::ifstream metrics(out + "/" + student + "/grpo/metrics.jsonl");
    std::string line;
    std::vector<double> opd_kl, opd_jsd, sync_bytes;
    while (std::getline(metrics, line)) {
      const json parsed = json::parse(line);
      if (parsed.contains("train/opd_kl")) opd_kl.push_back(parsed["train/opd_kl"]);
      if (parsed.contains("train/opd_jsd")) opd_jsd.push_back(parsed["train/opd_jsd"]);
      if (parsed.contains("perf/update_weights_bytes")) {
        sync_bytes.push_back(parsed["perf/update_weights_bytes"]);
      }
    }
    // LoRA: the first sync sends the base, the next only the adapted weights.
    ASSERT_EQ(sync_bytes.size(), static_cast<size_t>(kRollouts)) << student;
    EXPECT_LT(sync_bytes[1], sync_bytes[0]) << student;
    // Sampled tokens shape the advantages (train/opd_kl per rollout); whole distributions add
    // the JSD to the loss (train/opd_jsd per step) instead.
    const bool sampled = student == "opd-sampled";
    EXPECT_EQ(opd_kl.size(), sampled ? static_cast<size_t>(kRollouts) : 0u) << student;
    EXPECT_EQ(opd_jsd.empty(), sampled) << student;
    for (double value : sampled ? opd_kl : opd_jsd) EXPECT_TRUE(std::isfinite(value)) << student;
  }
}

}  // namespace examples_test
