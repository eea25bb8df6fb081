// `ooze train` whose processes die mid-run. With --max-restarts a trainer rank killed with
// kill -9 restarts the job from its last checkpoint (from its start when there is none yet): it
// exits 0, and the rollouts and steps from there are the ones an uninterrupted run takes; a dead
// engine still stops it. A driver killed with kill -9 leaves no process of the job behind, and
// its last checkpoint resumes. (Without --max-restarts a dead rank stops the job:
// train_shutdown_test.)
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/launcher/tiny_train_command.h"
#include "tests/support/process.h"
#include "tests/support/random_kills.h"

namespace ooze::launcher {
namespace train_restart_test {

using ::ooze::testing::checkpointing_train_command;
using ::ooze::testing::ExitStatus;
using ::ooze::testing::ooze_binary;
using ::ooze::testing::Process;
using ::ooze::testing::processes_of_session;
using ::ooze::testing::read_file;
using ::ooze::testing::session_of;
using ::ooze::testing::wait_until;
using ::ooze::testing::Worker;
using ::ooze::testing::worker_labelled;
using Clock = std::chrono::steady_clock;
using nlohmann::json;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

const std::map<std::string, std::string> kOneThread = {{"OMP_NUM_THREADS", "1"}};
constexpr int kRollouts = 5;

// The two-rank job of kRollouts rollouts, each checkpointed, with the prompts shuffled and the
// responses sampled from a seed: a run resumed from a checkpoint takes the same steps.
std::vector<std::string> seeded_job(const std::string& dir,
                                    const std::vector<std::string>& flags = {},
                                    int rollouts = kRollouts) {
  std::vector<std::string> job = {"--num-rollout", std::to_string(rollouts), "--rollout-shuffle",
                                  "--sampling-seed", "7"};
  job.insert(job.end(), flags.begin(), flags.end());
  return checkpointing_train_command(dir, job);
}

// metrics.jsonl's line of each rollout and of each optimizer step, and how many lines each had
// (tests/support/random_kills.h): a resumed run drops the lines of the rollouts it does again, so
// each is recorded once.
using Metrics = ::ooze::testing::RunRecord;
Metrics read_metrics(const std::string& dir) { return ::ooze::testing::read_run(dir); }

// Every rollout 0..rollouts-1 and every step of `steps` has exactly one line.
void expect_each_recorded_once(const Metrics& metrics, int64_t rollouts, size_t steps) {
  EXPECT_EQ(metrics.rollout_lines.size(), static_cast<size_t>(rollouts));
  for (int64_t rollout = 0; rollout < rollouts; ++rollout) {
    EXPECT_EQ(metrics.rollout_lines.count(rollout) ? metrics.rollout_lines.at(rollout) : 0, 1)
        << "rollout " << rollout;
  }
  EXPECT_EQ(metrics.step_lines.size(), steps);
  for (const auto& [step, count] : metrics.step_lines) EXPECT_EQ(count, 1) << "step " << step;
}

// Every rollout/* and train/* metric of `line` equals `expected`'s to 1e-5 (the others are
// timings).
void expect_same_metrics(const json& line, const json& expected, const std::string& what) {
  for (const auto& [key, value] : expected.items()) {
    if (key.rfind("rollout/", 0) != 0 && key.rfind("train/", 0) != 0) continue;
    ASSERT_TRUE(line.contains(key)) << what << " has no " << key << ": " << line.dump();
    EXPECT_NEAR(line[key].get<double>(), value.get<double>(), 1e-5) << key << " of " << what;
  }
}

// The number after `prefix` in `text`, or -1.
int64_t number_after(const std::string& text, const std::string& prefix) {
  const size_t at = text.find(prefix);
  if (at == std::string::npos) return -1;
  return std::stoll(text.substr(at + prefix.size()));
}

class TrainRestartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(ooze_binary())) GTEST_SKIP() << ooze_binary() << " not built";
  }
};

TEST_F(TrainRestartTest, AKilledTrainerRankRestartsTheJobFromItsLastCheckpointToTheSameSteps) {
  // The uninterrupted run.
  const std::string base = ::ooze::testing::make_temp_dir("train-restart-baseline");
  Process baseline(seeded_job(base), kOneThread, base + "/log.txt");
  const ExitStatus baseline_status = baseline.wait(60s);
  ASSERT_TRUE(baseline_status.exited && baseline_status.code == 0)
      << baseline_status.describe() << "\n"
      << baseline.output();
  const Metrics expected = read_metrics(base);
  ASSERT_EQ(expected.rollouts.size(), static_cast<size_t>(kRollouts));

  // The same run, its trainer rank 1 killed once its first checkpoint is on disk, mid-run.
  const std::string dir = ::ooze::testing::make_temp_dir("train-restart-killed");
  const auto start = Clock::now();
  Process driver(seeded_job(dir, {"--max-restarts", "1"}), kOneThread, dir + "/log.txt");
  ASSERT_TRUE(
      wait_until([&] { return fs::exists(dir + "/save/latest_checkpointed_iteration.txt"); }, 60s))
      << "no checkpoint within 60 s:\n"
      << driver.output();
  const std::string session = session_of(driver.pid());
  ASSERT_FALSE(session.empty()) << "no worker of driver " << driver.pid() << " found";
  const Worker victim = worker_labelled(session, "TrainActor_rank_1");
  ASSERT_GT(victim.pid, 0);
  ASSERT_EQ(::kill(victim.pid, SIGKILL), 0);

  // The job names the dead rank, stops every process of its first runtime, and starts again.
  ASSERT_TRUE(
      wait_until([&] { return driver.output().find("resumed from") != std::string::npos; }, 60s))
      << driver.output();
  EXPECT_TRUE(processes_of_session(session).empty())
      << "a process of the job's first runtime outlived its restart";
  const ExitStatus status = driver.wait(60s);
  std::printf("the restarted job took %.1f s in all\n",
              std::chrono::duration<double>(Clock::now() - start).count());
  const std::string output = driver.output();
  ASSERT_TRUE(status.exited && status.code == 0) << status.describe() << "\n" << output;
  const std::string named = "TrainActor rank=1 (actor " + victim.actor_id + ", pid " +
                            std::to_string(victim.pid) + ") died: killed by signal 9";
  EXPECT_NE(output.find(named), std::string::npos) << "no \"" << named << "\" in:\n" << output;
  const int64_t iteration =
      number_after(output,
                   "ooze train: restart 1 of 1: the run starts again from the checkpoint "
                   "of iteration ");
  ASSERT_GE(iteration, 1) << output;
  const std::string resumed =
      "resumed from " + dir + "/save at iteration " + std::to_string(iteration) + ", rollout ";
  const int64_t first_rollout = number_after(output, resumed);
  ASSERT_GE(first_rollout, 1) << "no \"" << resumed << "\" in:\n" << output;
  ASSERT_LT(first_rollout, kRollouts) << "the rank died after the last rollout";

  // Each rollout and step has one line, and from the restart on they are the uninterrupted
  // run's.
  const Metrics restarted = read_metrics(dir);
  expect_each_recorded_once(restarted, kRollouts, expected.steps.size());
  ASSERT_EQ(restarted.steps.size(), expected.steps.size());
  for (int64_t rollout = first_rollout; rollout < kRollouts; ++rollout) {
    ASSERT_TRUE(restarted.rollouts.count(rollout)) << "no line of rollout " << rollout;
    expect_same_metrics(restarted.rollouts.at(rollout), expected.rollouts.at(rollout),
                        "rollout " + std::to_string(rollout));
  }
  int64_t compared_steps = 0;
  for (const auto& [step, line] : expected.steps) {
    if (line["step"].get<int64_t>() < first_rollout) continue;
    expect_same_metrics(restarted.steps.at(step), line, "step " + std::to_string(step));
    ++compared_steps;
  }
  EXPECT_GT(compared_steps, 0);
}

// Killed before the first checkpoint (--save-interval 0: only after the last rollout), the rank
// restarts the run from its start, which draws the same prompts and takes the same steps again.
// The run is long enough that the kill, made once rollout 0 is recorded, comes well before its
// end: a rollout of this job takes about 0.1 s.
TEST_F(TrainRestartTest, ARankKilledBeforeAnyCheckpointRestartsTheRunFromItsStart) {
  constexpr int kLongRun = 20;
  const std::string dir = ::ooze::testing::make_temp_dir("train-restart-early");
  Process driver(seeded_job(dir, {"--save-interval", "0", "--max-restarts", "1"}, kLongRun),
                 kOneThread, dir + "/log.txt");
  ASSERT_TRUE(wait_until([&] { return read_metrics(dir).rollouts.count(0) == 1; }, 60s))
      << "no rollout 0 within 60 s:\n"
      << driver.output();
  const json first_attempt = read_metrics(dir).rollouts.at(0);
  const std::string session = session_of(driver.pid());
  ASSERT_FALSE(session.empty()) << "no worker of driver " << driver.pid() << " found";
  const Worker victim = worker_labelled(session, "TrainActor_rank_1");
  ASSERT_GT(victim.pid, 0);
  ASSERT_EQ(::kill(victim.pid, SIGKILL), 0);
  const ExitStatus status = driver.wait(60s);
  const std::string output = driver.output();
  ASSERT_TRUE(status.exited && status.code == 0) << status.describe() << "\n" << output;
  EXPECT_NE(output.find("ooze train: restart 1 of 1: no checkpoint in " + dir +
                        "/save yet, the run starts over"),
            std::string::npos)
      << output;
  EXPECT_EQ(output.find("resumed from"), std::string::npos) << output;
  // The failed attempt's lines are gone, each rollout has one line, and the second time rollout
  // 0 is the same as the first.
  const Metrics metrics = read_metrics(dir);
  expect_each_recorded_once(metrics, kLongRun, metrics.steps.size());
  expect_same_metrics(metrics.rollouts.at(0), first_attempt, "rollout 0 after the restart");
}

// Only a trainer rank's death restarts the job: a dead engine stops it, restarts left or not.
TEST_F(TrainRestartTest, AKilledEngineStopsTheJobThoughRestartsAreLeft) {
  const std::string dir = ::ooze::testing::make_temp_dir("train-restart-engine");
  Process driver(checkpointing_train_command(dir, {"--max-restarts", "1"}), kOneThread,
                 dir + "/log.txt");
  ASSERT_TRUE(
      wait_until([&] { return fs::exists(dir + "/save/latest_checkpointed_iteration.txt"); }, 60s))
      << driver.output();
  const std::string session = session_of(driver.pid());
  ASSERT_FALSE(session.empty()) << "no worker of driver " << driver.pid() << " found";
  const Worker victim = worker_labelled(session, "RolloutEngine");
  ASSERT_GT(victim.pid, 0);
  ASSERT_EQ(::kill(victim.pid, SIGKILL), 0);
  const ExitStatus status = driver.wait(30s);
  const std::string output = driver.output();
  EXPECT_TRUE(status.exited && status.code == 1) << status.describe() << "\n" << output;
  EXPECT_NE(output.find("RolloutEngine (actor " + victim.actor_id + ", pid " +
                        std::to_string(victim.pid) + ") died: killed by signal 9"),
            std::string::npos)
      << output;
  EXPECT_EQ(output.find("ooze train: restart"), std::string::npos) << output;
  EXPECT_TRUE(processes_of_session(session).empty());
}

TEST_F(TrainRestartTest, AKilledDriverLeavesNoProcessOfTheJobAndItsLastCheckpointResumes) {
  const std::string dir = ::ooze::testing::make_temp_dir("train-restart-driver");
  Process driver(checkpointing_train_command(dir), kOneThread, dir + "/log.txt");
  ASSERT_TRUE(
      wait_until([&] { return fs::exists(dir + "/save/latest_checkpointed_iteration.txt"); }, 60s))
      << "no checkpoint within 60 s:\n"
      << driver.output();
  const std::string session = session_of(driver.pid());
  ASSERT_FALSE(session.empty()) << "no worker of driver " << driver.pid() << " found";
  // The check below could fail: the job's three workers are found while it runs.
  ASSERT_EQ(processes_of_session(session).size(), 3u) << session;
  std::this_thread::sleep_for(500ms);  // mid-run: a few more rollouts and checkpoints

  ASSERT_EQ(::kill(driver.pid(), SIGKILL), 0);
  const auto killed = Clock::now();
  const bool none_left = wait_until([&] { return processes_of_session(session).empty(); }, 5s);
  std::printf("the job's processes were gone %.2f s after the driver's kill -9\n",
              std::chrono::duration<double>(Clock::now() - killed).count());
  EXPECT_TRUE(none_left) << processes_of_session(session).size()
                         << " process(es) of the job outlived its driver by 5 s";
  driver.wait(10s);

  // The checkpoint the tracker names is whole and the run goes on from it.
  const int64_t iteration = ::ooze::testing::expect_last_checkpoint_whole(dir + "/save");
  const json state =
      json::parse(read_file(dir + "/save/rollout_state_" + std::to_string(iteration) + ".json"));
  const int64_t next_rollout = state["next_rollout_id"].get<int64_t>();
  Process resumed(checkpointing_train_command(dir, {"--load", dir + "/save", "--num-rollout",
                                                    std::to_string(next_rollout + 1)}),
                  kOneThread, dir + "/resume-log.txt");
  const ExitStatus status = resumed.wait(60s);
  EXPECT_TRUE(status.exited && status.code == 0) << status.describe() << "\n" << resumed.output();
  EXPECT_NE(resumed.output().find("resumed from " + dir + "/save at iteration " +
                                  std::to_string(iteration) + ", rollout " +
                                  std::to_string(next_rollout)),
            std::string::npos)
      << resumed.output();
  EXPECT_GT(std::stoll(read_file(dir + "/save/latest_checkpointed_iteration.txt")), iteration)
      << "the resumed run did not save its rollout";
  // Killed anywhere (between a rollout's line and its checkpoint too), each rollout of the two
  // runs has one line.
  const Metrics metrics = read_metrics(dir);
  EXPECT_EQ(metrics.rollout_lines.size(), static_cast<size_t>(next_rollout + 1));
  for (const auto& [rollout, count] : metrics.rollout_lines) {
    EXPECT_EQ(count, 1) << "rollout " << rollout;
  }
  for (const auto& [step, count] : metrics.step_lines) EXPECT_EQ(count, 1) << "step " << step;
}

}  // namespace train_restart_test
}  // namespace ooze::launcher
