// Loading users' Python functions by the paths hook flags take: each spelling finds the same
// function, and each way a path can be wrong is refused with the flag, the path and the cause,
// before anything is called. The functions are real files run by the embedded interpreter.
#include "python/python_hook.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "python/hook_args.h"
#include "python/hook_path.h"
#include "tests/support/expect_error.h"

namespace ooze::python {
namespace python_hook_test {

const std::string kHooks = OOZE_TEST_HOOKS_DIR;
const std::vector<std::string> kRewardParameters = {"args", "sample"};

std::string load_error(const std::string& path) {
  return ::ooze::testing::error_message_of<HookError>(
      [&] { PythonHook::load(path, "--custom-rm-path", kRewardParameters); });
}

nlohmann::json a_sample(const std::string& response, const std::string& label) {
  return {{"index", 0},
          {"group_index", 0},
          {"response", response},
          {"label", label},
          {"status", "completed"}};
}

TEST(HookPathTest, TheSpellingSaysWhatAPathNames) {
  EXPECT_EQ(hook_path_kind("nonzero_std"), HookPathKind::kBuiltin);
  EXPECT_EQ(hook_path_kind("math"), HookPathKind::kBuiltin);
  EXPECT_EQ(hook_path_kind("build/libmine.so:reward"), HookPathKind::kSharedLibrary);
  EXPECT_EQ(hook_path_kind("libmine.so.1:reward"), HookPathKind::kSharedLibrary);
  EXPECT_EQ(hook_path_kind("libmine.so"), HookPathKind::kSharedLibrary);
  EXPECT_EQ(hook_path_kind("my_rewards.reward_func"), HookPathKind::kPython);
  EXPECT_EQ(hook_path_kind("my.pkg.rewards:reward_func"), HookPathKind::kPython);
  EXPECT_EQ(hook_path_kind("hooks/rewards.py:reward_func"), HookPathKind::kPython);
  EXPECT_EQ(hook_path_kind("rewards.py:reward_func"), HookPathKind::kPython);
}

TEST(HookPathTest, RelativeFilesBecomeAbsolute) {
  const std::string here = std::filesystem::current_path().string();
  EXPECT_EQ(with_absolute_file("my_loss.py:loss"), here + "/my_loss.py:loss");
  EXPECT_EQ(with_absolute_file("losses/../my_loss.py:loss"), here + "/my_loss.py:loss");
  EXPECT_EQ(with_absolute_file("/abs/my_loss.py:loss"), "/abs/my_loss.py:loss");
  EXPECT_EQ(with_absolute_file("dir/module:loss"), here + "/dir/module:loss");
  EXPECT_EQ(with_absolute_file("pkg.losses.loss"), "pkg.losses.loss");
  EXPECT_EQ(with_absolute_file("pkg.losses:loss"), "pkg.losses:loss");
  EXPECT_EQ(with_absolute_file("libmine.so:reward"), "libmine.so:reward");
  EXPECT_EQ(with_absolute_file(""), "");
}

TEST(PythonHookTest, EverySpellingCallsTheSameFunction) {
  // The file spelling puts the file's directory on sys.path, so the module spellings find it.
  const nlohmann::json samples = {a_sample("ZÜRICH is big", "zürich")};
  for (const std::string& path : {kHooks + "/rewards.py:token_f1", std::string("rewards.token_f1"),
                                  std::string("rewards:token_f1")}) {
    const PythonHook hook = PythonHook::load(path, "--custom-rm-path", kRewardParameters);
    EXPECT_FALSE(hook.is_async()) << path;
    const nlohmann::json outcomes = hook.call("reward_each", samples).at("outcomes");
    ASSERT_EQ(outcomes.size(), 1u) << path;
    EXPECT_EQ(outcomes[0][0], true) << outcomes.dump();
    EXPECT_DOUBLE_EQ(outcomes[0][1].get<double>(), 0.5) << path;  // 1 of 3 words, 1 of 1
  }
  EXPECT_TRUE(PythonHook::load(kHooks + "/rewards.py:graded", "--custom-rm-path", kRewardParameters)
                  .is_async());
}

TEST(PythonHookTest, EachWayAPathCanBeWrongIsNamed) {
  std::string message = load_error(kHooks + "/missing.py:reward");
  EXPECT_CONTAINS(message, "--custom-rm-path " + kHooks + "/missing.py:reward: no file");

  message = load_error(kHooks + "/broken_import.py:reward");
  EXPECT_CONTAINS(message, "importing it raised");
  EXPECT_CONTAINS(message, "broken_import.py\", line 4");
  EXPECT_CONTAINS(message, "ValueError: math domain error");

  message = load_error(kHooks + "/rewards.py:no_such_function");
  EXPECT_CONTAINS(message, "has no attribute 'no_such_function'");

  message = load_error(kHooks + "/rewards.py:not_a_function");
  EXPECT_CONTAINS(message, "'not_a_function' is of type int, not a function");

  message = load_error(kHooks + "/rewards.py:one_argument");
  EXPECT_CONTAINS(message, "ooze calls it as " + kHooks + "/rewards.py:one_argument(args, sample)");
  EXPECT_CONTAINS(message, "declared (sample)");

  message = load_error("no_such_package.rewards.reward_func");
  EXPECT_CONTAINS(message, "no module named 'no_such_package'");

  message = load_error("reward_func");
  EXPECT_CONTAINS(message, "is not a function path");
}

TEST(PythonHookTest, ArgsAreTheRunsFlags) {
  set_hook_args({{"n_samples_per_prompt", 8}, {"rm_type", ""}});
  const PythonHook hook =
      PythonHook::load(kHooks + "/rewards.py:flags", "--custom-rm-path", kRewardParameters);
  EXPECT_EQ(hook.call("reward_each", nlohmann::json::array({a_sample("x", "y")}))["outcomes"][0][1],
            8.0);
  set_hook_args({{"n_samples_per_prompt", 16}});  // a later run's flags replace them
  EXPECT_EQ(hook.call("reward_each", nlohmann::json::array({a_sample("x", "y")}))["outcomes"][0][1],
            16.0);
}

}  // namespace python_hook_test
}  // namespace ooze::python
