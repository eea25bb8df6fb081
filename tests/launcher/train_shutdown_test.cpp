// `ooze train` stopped from outside while it runs, as users and crashes stop it: Ctrl-C (SIGINT)
// to the driver, and kill -9 of an engine's or a trainer rank's worker. Each time the driver
// exits within a bound with what a shell expects (130 after SIGINT; 1 with the dead actor named
// by class, id and pid and the signal that killed it), no process of the job is left, and the
// checkpoint the tracker names is whole: every file its metadata lists has the recorded size and
// CRC-32, and the interrupted run resumes from it.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/launcher/tiny_train_command.h"
#include "tests/support/process.h"

namespace ooze::launcher {
namespace train_shutdown_test {

using ::ooze::testing::checkpointing_train_command;
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

constexpr auto kExitBound = 30s;  // from the signal or the kill to the driver's exit

// A run of the job, started and let run until its first checkpoint is on disk.
struct RunningJob {
  std::string dir;
  std::unique_ptr<Process> driver;
  std::string session;

  explicit RunningJob(const std::string& name) {
    dir = ::ooze::testing::make_temp_dir("train-shutdown-" + name);
    driver = std::make_unique<Process>(checkpointing_train_command(dir),
                                       std::map<std::string, std::string>{{"OMP_NUM_THREADS", "1"}},
                                       dir + "/log.txt");
    const bool saved = wait_until(
        [&] { return fs::exists(dir + "/save/latest_checkpointed_iteration.txt"); }, 60s);
    if (!saved) {
      ADD_FAILURE() << "no checkpoint within 60 s:\n" << driver->output();
      return;
    }
    session = session_of(driver->pid());
    EXPECT_FALSE(session.empty()) << "no worker of driver " << driver->pid() << " found";
    // The check below could fail: the job's three workers are found while it runs.
    EXPECT_EQ(processes_of_session(session).size(), 3u) << session;
  }

  // Waits for the driver's exit, which must come within kExitBound.
  ::ooze::testing::ExitStatus wait_for_exit() {
    const auto start = Clock::now();
    const ::ooze::testing::ExitStatus status = driver->wait(kExitBound);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::printf("driver exited %.2f s after the stop (%s)\n", seconds, status.describe().c_str());
    EXPECT_FALSE(status.timed_out)
        << "the driver was still running " << kExitBound.count() << " s later:\n"
        << driver->output();
    // Checked at once: the driver reaps its workers before it exits.
    if (!session.empty()) {
      const std::vector<int> left = processes_of_session(session);
      EXPECT_TRUE(left.empty()) << left.size() << " process(es) of the job outlived the driver, "
                                << "the first " << (left.empty() ? 0 : left[0]);
    }
    return status;
  }

  // What the driver wrote as its own from its first "ooze train: " line on (its error, whose
  // later lines are indented), without its workers' lines "(Label pid=N) ..." and log lines.
  std::string driver_error() const {
    std::string error;
    std::istringstream in(driver->output());
    for (std::string line; std::getline(in, line);) {
      if (error.empty() && line.rfind("ooze train: ", 0) != 0) continue;
      if (line.rfind("(", 0) == 0 || line.rfind("[", 0) == 0) continue;
      error += line + "\n";
    }
    return error;
  }

  // The iteration the tracker names, after checking that checkpoint is whole.
  int64_t expect_last_checkpoint_whole() const {
    return ::ooze::testing::expect_last_checkpoint_whole(dir + "/save");
  }
};

class TrainShutdownTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(ooze_binary())) GTEST_SKIP() << ooze_binary() << " not built";
    // A test started as a shell's background job inherits an ignored SIGINT, which the driver
    // would keep ignoring (as it should); Ctrl-C is what this test stands for.
    ::signal(SIGINT, SIG_DFL);
  }
};

TEST_F(TrainShutdownTest, CtrlCStopsTheJobWith130AndTheRunResumesFromItsLastCheckpoint) {
  RunningJob job("sigint");
  ASSERT_FALSE(job.session.empty());
  std::this_thread::sleep_for(500ms);  // mid-run: a few more rollouts and checkpoints
  job.driver->kill(SIGINT);
  const ::ooze::testing::ExitStatus status = job.wait_for_exit();
  EXPECT_TRUE(status.exited && status.code == 130) << status.describe() << "\n"
                                                   << job.driver->output();
  const std::string output = job.driver->output();
  EXPECT_NE(output.find("ooze train: interrupted: stopping"), std::string::npos) << output;
  // Once stopping, the engines go away because the job takes them away: the driver's router and
  // rollout say nothing of it (workers' own lines, "(Label pid=N) ...", are theirs).
  std::istringstream after(output.substr(output.find("interrupted: stopping")));
  for (std::string line; std::getline(after, line);) {
    if (line.rfind("(", 0) == 0) continue;
    EXPECT_TRUE(line.rfind("[W ", 0) != 0 &&
                line.find("retrying on another engine") == std::string::npos &&
                line.find("abort_request") == std::string::npos)
        << "the stopping driver said: " << line;
  }
  const int64_t iteration = job.expect_last_checkpoint_whole();

  // The run resumes from that checkpoint and takes one more rollout.
  const json state = json::parse(
      read_file(job.dir + "/save/rollout_state_" + std::to_string(iteration) + ".json"));
  const int64_t next_rollout = state["next_rollout_id"].get<int64_t>();
  std::vector<std::string> resume = checkpointing_train_command(
      job.dir, {"--load", job.dir + "/save", "--save", job.dir + "/save-resumed", "--num-rollout",
                std::to_string(next_rollout + 1)});
  Process resumed(resume, {{"OMP_NUM_THREADS", "1"}}, job.dir + "/resume-log.txt");
  const ::ooze::testing::ExitStatus resumed_status = resumed.wait(60s);
  EXPECT_TRUE(resumed_status.exited && resumed_status.code == 0)
      << resumed_status.describe() << "\n"
      << resumed.output();
  EXPECT_NE(resumed.output().find("resumed from " + job.dir + "/save at iteration " +
                                  std::to_string(iteration)),
            std::string::npos)
      << resumed.output();
}

// kill -9 of the worker labelled `label`: the driver fails, naming that worker and the signal.
void expect_killed_worker_stops_the_job(const std::string& name, const std::string& label,
                                        const std::string& shown_label) {
  RunningJob job(name);
  ASSERT_FALSE(job.session.empty());
  std::this_thread::sleep_for(500ms);
  const Worker victim = worker_labelled(job.session, label);
  ASSERT_GT(victim.pid, 0);
  ASSERT_EQ(::kill(victim.pid, SIGKILL), 0);
  const ::ooze::testing::ExitStatus status = job.wait_for_exit();
  EXPECT_TRUE(status.exited && status.code == 1) << status.describe() << "\n"
                                                 << job.driver->output();
  // The driver's own error names the actor (class, id, pid) and why it died.
  const std::string named = shown_label + " (actor " + victim.actor_id + ", pid " +
                            std::to_string(victim.pid) + ") died: killed by signal 9";
  EXPECT_NE(job.driver_error().find(named), std::string::npos)
      << "the driver's error does not say \"" << named << "\":\n"
      << job.driver->output();
  job.expect_last_checkpoint_whole();
}

TEST_F(TrainShutdownTest, KilledEngineStopsTheJobNamingRolloutEngineAndTheSignal) {
  expect_killed_worker_stops_the_job("engine", "RolloutEngine", "RolloutEngine");
}

TEST_F(TrainShutdownTest, KilledTrainerRankStopsTheJobNamingTrainActorAndTheSignal) {
  expect_killed_worker_stops_the_job("trainer", "TrainActor_rank_1", "TrainActor rank=1");
}

}  // namespace train_shutdown_test
}  // namespace ooze::launcher
