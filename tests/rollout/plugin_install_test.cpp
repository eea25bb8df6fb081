// The plugin SDK as a user gets it: `cmake --install` of this build into a fresh prefix, then
// examples/reward_plugin configured (find_package(ooze)) and built against that prefix alone,
// loaded with PluginFunction, and its rewards compared with score_builtin_reward("math") plus
// the example's format bonus.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "rollout/plugin_function.h"
#include "rollout/rewards/builtin_rewards.h"
#include "tests/support/process.h"

#if !defined(OOZE_INSTALL_BUILD_DIR) || !defined(OOZE_INSTALL_SOURCE_DIR) || \
    !defined(OOZE_CMAKE_COMMAND) || !defined(OOZE_MAKE_PROGRAM) || !defined(OOZE_CXX_COMPILER)
#error "the build must define the build and source directories, cmake, ninja and the compiler"
#endif

namespace ooze::rollout {
namespace plugin_install_test {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Runs a command to completion (at most `timeout`); a test failure with its output otherwise.
bool run_step(const std::vector<std::string>& argv, const std::string& log_path,
              std::chrono::milliseconds timeout) {
  testing::Process process(argv, {}, log_path);
  const testing::ExitStatus status = process.wait(timeout);
  if (status.exited && status.code == 0) return true;
  std::string command;
  for (const std::string& arg : argv) command += arg + " ";
  ADD_FAILURE() << command << "\n" << status.describe() << "\n" << process.output();
  return false;
}

struct Case {
  std::string response;
  std::string label;
  double correct;  // what the math rule must give
  bool well_formed;
};

TEST(PluginInstall, ExamplePluginBuildsAgainstTheInstalledPackageAndScores) {
  const auto start = std::chrono::steady_clock::now();
  const fs::path work = testing::make_temp_dir("plugin_install");
  const fs::path prefix = work / "prefix";
  const fs::path build = work / "build";

  ASSERT_TRUE(run_step(
      {OOZE_CMAKE_COMMAND, "--install", OOZE_INSTALL_BUILD_DIR, "--prefix", prefix.string()},
      (work / "install.log").string(), 60s));
  for (const char* installed :
       {"include/rollout/reward_plugin.h", "include/rollout/sample.h", "include/core/error.h",
        "include/rollout/rewards/builtin_rewards.h", "include/rollout/rewards/math_reward.h",
        "lib/libooze_rewards.a", "lib/cmake/ooze/oozeConfig.cmake",
        "lib/cmake/ooze/oozeTargets.cmake"}) {
    EXPECT_TRUE(fs::exists(prefix / installed)) << installed << " was not installed";
  }

  // Only the prefix: the example must not find anything in ooze's source or build tree.
  ASSERT_TRUE(run_step(
      {OOZE_CMAKE_COMMAND, "-S", std::string(OOZE_INSTALL_SOURCE_DIR) + "/examples/reward_plugin",
       "-B", build.string(), "-G", "Ninja",
       std::string("-DCMAKE_MAKE_PROGRAM=") + OOZE_MAKE_PROGRAM,
       std::string("-DCMAKE_CXX_COMPILER=") + OOZE_CXX_COMPILER,
       "-DCMAKE_PREFIX_PATH=" + prefix.string()},
      (work / "configure.log").string(), 60s));
  ASSERT_TRUE(run_step({OOZE_CMAKE_COMMAND, "--build", build.string()},
                       (work / "build.log").string(), 120s));
  const fs::path library = build / "libmath_format_reward.so";
  ASSERT_TRUE(fs::exists(library));

  const PluginFunction reward = PluginFunction::load(library.string() + ":math_with_format_bonus",
                                                     plugin::Kind::kReward, "--custom-rm-path");
  const std::vector<Case> cases = {
      {"<think>6 * 7 = 42</think> The answer is \\boxed{42}.", "42", 1.0, true},
      {"<think>6 * 7 = 41?</think> \\boxed{41}", "42", 0.0, true},
      {"The answer is \\boxed{42}.", "42", 1.0, false},                  // no reasoning section
      {"<think>\\boxed{40}?</think> so \\boxed{42}", "42", 1.0, false},  // two boxes
      {"<think>half</think> \\boxed{\\frac{1}{2}}", "\\frac12", 1.0, true},
      {"no answer at all", "42", 0.0, false},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    Sample sample;
    sample.index = static_cast<int64_t>(i);
    sample.response = cases[i].response;
    sample.label = cases[i].label;
    const double builtin = score_builtin_reward("math", sample).get<double>();
    EXPECT_EQ(builtin, cases[i].correct) << cases[i].response;
    const double bonus = cases[i].well_formed ? 0.1 : 0.0;

    sample.reward = reward.reward(sample);
    EXPECT_EQ(sample.reward.at("correct").get<double>(), builtin) << cases[i].response;
    EXPECT_EQ(sample.reward.at("format_bonus").get<double>(), bonus) << cases[i].response;
    EXPECT_DOUBLE_EQ(sample.reward_value("score"), builtin + bonus) << cases[i].response;
  }

  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("install, configure, build and score: %.1f s\n", seconds);
  fs::remove_all(work);
}

}  // namespace plugin_install_test
}  // namespace ooze::rollout
