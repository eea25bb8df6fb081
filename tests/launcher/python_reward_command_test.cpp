// `ooze reward` with a Python reward function, judged by plain python3: the real binary scores
// Unicode JSON lines with tests/python/hooks/rewards.py, python3 runs the same function on the
// same lines on its own (run_reference.py, which imports the file itself), and every reward must
// be the one Python computed. Also: what a hook prints stays off the answers on stdout, and a
// function ooze cannot call stops the command before any line is read.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "python/interpreter.h"
#include "tests/support/expect_error.h"
#include "tests/support/process.h"

namespace ooze::launcher {
namespace python_reward_command_test {

using namespace std::chrono_literals;
using nlohmann::json;

const std::string kHooks = OOZE_TEST_HOOKS_DIR;

struct CommandRun {
  ::ooze::testing::ExitStatus status;
  std::vector<std::string> stdout_lines;
  std::string stderr_text;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string quoted(const std::string& text) { return "'" + text + "'"; }

// `command` in bash from the hooks' directory (so `rewards.fn` is importable as Python would
// find it), stdin from `input`.
CommandRun run_in_hooks_dir(const std::string& command, const std::string& input) {
  const std::string dir = ::ooze::testing::make_temp_dir("python-reward-command");
  ::ooze::testing::Process process(
      {"/bin/bash", "-c",
       "cd " + quoted(kHooks) + " && " + command + " < " + quoted(input) + " > " +
           quoted(dir + "/out") + " 2> " + quoted(dir + "/err")},
      {{"PYTHONPATH", ::ooze::python::package_dir()}}, "");
  CommandRun run;
  run.status = process.wait(120s);
  std::istringstream out(read_file(dir + "/out"));
  for (std::string line; std::getline(out, line);) run.stdout_lines.push_back(line);
  run.stderr_text = read_file(dir + "/err");
  return run;
}

std::string unicode_lines() {
  const std::string path = ::ooze::testing::make_temp_dir("python-reward-lines") + "/lines.jsonl";
  std::ofstream out(path);
  for (const auto& [response, label] :
       std::vector<std::pair<std::string, std::string>>{{"ZÜRICH ist schön", "zürich ist schön"},
                                                        {"ΟΔΟΣ ΟΔΟΣ", "οδος"},
                                                        {"İstanbul\u3000büyük", "i̇stanbul büyük"},
                                                        {"४ and ٤ and ４ and 1", "abcdefghijklm"},
                                                        {"straße STRASSE", "strasse"},
                                                        {"", "empty"},
                                                        {"plain ascii answer 42", "plain answer"},
                                                        {"Ǆ ǅ ǆ", "ǆ"}}) {
    out << json{{"response", response}, {"label", label}}.dump() << "\n";
  }
  return path;
}

// ooze's answers and python3's, for `path` (a --custom-rm-path) and `function` in rewards.py.
void expect_same_rewards_as_python(const std::string& path, const std::string& function,
                                   const std::vector<std::string>& flags = {}) {
  const std::string lines = unicode_lines();
  std::string ooze_command =
      quoted(::ooze::testing::ooze_binary()) + " reward --custom-rm-path " + quoted(path);
  std::string python_command = quoted(::ooze::python::executable()) + " run_reference.py " +
                               "rewards.py " + function + " " + quoted(lines);
  for (const std::string& flag : flags) {
    ooze_command += " " + flag;
    python_command += " " + flag;
  }
  const CommandRun ooze = run_in_hooks_dir(ooze_command, lines);
  const CommandRun python = run_in_hooks_dir(python_command, "/dev/null");
  ASSERT_TRUE(ooze.status.exited && ooze.status.code == 0) << ooze.status.describe() << "\n"
                                                           << ooze.stderr_text;
  ASSERT_TRUE(python.status.exited && python.status.code == 0) << python.status.describe() << "\n"
                                                               << python.stderr_text;
  ASSERT_EQ(ooze.stdout_lines.size(), python.stdout_lines.size());
  for (size_t i = 0; i < ooze.stdout_lines.size(); ++i) {
    // Numbers compare by value (1 and 1.0 alike), objects field by field.
    EXPECT_EQ(json::parse(ooze.stdout_lines[i]).at("reward"), json::parse(python.stdout_lines[i]))
        << path << ", line " << i + 1 << ": ooze " << ooze.stdout_lines[i] << ", python3 "
        << python.stdout_lines[i];
  }
}

TEST(PythonRewardCommandTest, SyncRewardsAreWhatPythonComputes) {
  expect_same_rewards_as_python("rewards.token_f1", "token_f1");
  expect_same_rewards_as_python("rewards.is_completed", "is_completed");
}

TEST(PythonRewardCommandTest, AsyncObjectRewardsAreWhatPythonComputes) {
  expect_same_rewards_as_python(kHooks + "/rewards.py:graded", "graded", {"--reward-key score"});
}

TEST(PythonRewardCommandTest, GroupRewardsAreWhatPythonComputes) {
  expect_same_rewards_as_python("rewards:rank_by_length", "rank_by_length", {"--group-rm"});
}

TEST(PythonRewardCommandTest, WhatAHookPrintsStaysOffTheAnswers) {
  const CommandRun run = run_in_hooks_dir(
      quoted(::ooze::testing::ooze_binary()) + " reward --custom-rm-path rewards.chatty",
      unicode_lines());
  ASSERT_TRUE(run.status.exited && run.status.code == 0) << run.stderr_text;
  ASSERT_EQ(run.stdout_lines.size(), 8u);
  for (const std::string& line : run.stdout_lines)
    EXPECT_EQ(json::parse(line), json({{"reward", 0.5}}));
  EXPECT_CONTAINS(run.stderr_text, "scoring sample 0");
  EXPECT_CONTAINS(run.stderr_text, "scoring sample 7");
}

TEST(PythonRewardCommandTest, AFunctionOozeCannotCallStopsItBeforeAnyLine) {
  const CommandRun run = run_in_hooks_dir(
      quoted(::ooze::testing::ooze_binary()) + " reward --custom-rm-path rewards.one_argument",
      unicode_lines());
  EXPECT_TRUE(run.status.exited && run.status.code != 0) << run.status.describe();
  EXPECT_TRUE(run.stdout_lines.empty());
  EXPECT_CONTAINS(run.stderr_text,
                  "--custom-rm-path rewards.one_argument: ooze calls it as "
                  "rewards.one_argument(args, sample), but it is declared (sample)");
}

TEST(PythonRewardCommandTest, AnAsyncRewardThatHangsEndsAtRmTimeout) {
  const CommandRun run = run_in_hooks_dir(quoted(::ooze::testing::ooze_binary()) +
                                              " reward --custom-rm-path rewards.hangs_async "
                                              "--rm-timeout 0.5",
                                          unicode_lines());
  EXPECT_TRUE(run.status.exited && run.status.code != 0) << run.status.describe();
  ASSERT_FALSE(run.stdout_lines.empty()) << run.stderr_text;
  // Each line answers with the error (ooze reward keeps going after a line it cannot score).
  EXPECT_CONTAINS(run.stdout_lines[0],
                  "--custom-rm-path rewards.hangs_async did not finish within --rm-timeout 0.5 s");
}

TEST(PythonRewardCommandTest, CtrlCDuringAPythonRewardEndsTheCommandAtOnce) {
  // A test run as a script's background job inherits an ignored SIGINT; Ctrl-C is what this
  // test stands for.
  ::signal(SIGINT, SIG_DFL);
  const std::string dir = ::ooze::testing::make_temp_dir("python-reward-ctrl-c");
  ::ooze::testing::Process process(
      {"/bin/bash", "-c",
       "exec " + quoted(::ooze::testing::ooze_binary()) + " reward --custom-rm-path " +
           quoted(kHooks + "/rewards.py:sleeps_a_minute") + " < " + quoted(unicode_lines())},
      {}, dir + "/log.txt");
  // Python's signal module, imported with the hook, must not have taken SIGINT over.
  std::this_thread::sleep_for(1500ms);
  process.kill(SIGINT);
  const ::ooze::testing::ExitStatus status = process.wait(10s);
  EXPECT_FALSE(status.timed_out) << process.output();
  EXPECT_EQ(status.signal, SIGINT) << status.describe() << "\n" << process.output();
}

}  // namespace python_reward_command_test
}  // namespace ooze::launcher
