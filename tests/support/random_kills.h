// Random kills of a running `ooze train`, and whether the run still ends where the uninterrupted
// one does. Free of GoogleTest: tests/launcher/random_kill_test.cpp runs a handful of trials,
// bench/random_kill_bench.cpp fifty.
//
// A trial starts the tiny two-rank job (tests/support/train_job.h) with a checkpoint after every
// rollout and --max-restarts, kills one of its processes with SIGKILL at a random moment (the
// driver, a trainer rank, the engine or the critic), and then does what a user does: a job that
// stopped is started again with the same command plus --load of its save directory, until it
// has done every rollout. The finished run must equal the uninterrupted one:
//   * metrics.jsonl has one line for every rollout and every optimizer step, with the same
//     rollout/*, train/* and critic/* values; so do the TensorBoard event files, read by the
//     independent reader of tests/core/tensorboard_event_reader.py: every (tag, step) once;
//   * every rollout drew the same prompts and sampled the same tokens (--save-debug-rollout-data);
//   * the last checkpoint's weights and Adam moments are bit for bit the same.
// (--async: see KillJob.)
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace ooze::testing {

// A job to kill: a name, flags on top of the checkpointing job, and the workers (by log label,
// tests/support/train_job.h's Worker) a trial may kill besides the driver.
//
// An --async job is not exact: the rollout generated while the checkpointed step trained used the
// weights before that step, but after a resume the engines hold the checkpoint's, one version
// newer. From there its samples, steps and weights part from the uninterrupted run's. It must
// still record every rollout and step once, draw the same prompts, and keep every rollout within
// the staleness bound (--max-staleness, 1).
struct KillJob {
  std::string name;
  std::vector<std::string> flags;
  std::vector<std::string> victims;
  bool exact = true;
  int64_t max_staleness = 1;  // !exact
};

// The four jobs of the issue: GRPO disaggregated, colocated and --async, and PPO with a critic.
std::vector<KillJob> standard_kill_jobs();

// What a finished run left.
struct RunRecord {
  std::map<int64_t, nlohmann::json> rollouts;  // metrics line of each rollout id
  std::map<int64_t, nlohmann::json> steps;     // of each optimizer step
  std::map<int64_t, int> rollout_lines, step_lines;
  // TensorBoard: the scalar values written under each (tag, step), over all event files.
  std::map<std::pair<std::string, int64_t>, std::vector<double>> scalars;
  std::map<int64_t, std::string> samples;  // each rollout's prompts and tokens, as one string
  std::map<int64_t, std::string> prompts;  // each rollout's prompts alone
  std::string checkpoint;                  // the last checkpoint's directory
  std::string critic_checkpoint;           // and the critic's (PPO)
  double seconds = 0;
  std::string log;
};

// What a run left in `dir` (the layout of tests/support/train_job.h's checkpointing job).
RunRecord read_run(const std::string& dir);

struct KillTrial {
  std::string job;
  std::string victim;     // "driver" or a worker label; "" when the job ended first
  double at_seconds = 0;  // after the start
  std::string phase;      // the job's last log line when it was killed
  int resumes = 0;        // runs started again by hand (the job's own restarts aside)
  bool matched = false;
  std::string mismatch;  // what differed, when not matched
  double seconds = 0;    // the whole trial
};

class RandomKills {
 public:
  // `rollouts` per run; runs live under fresh temporary directories.
  explicit RandomKills(int rollouts);

  // The uninterrupted run of `job` (run once, then kept).
  const RunRecord& baseline(const KillJob& job);
  // One run killed at a random moment, finished by hand, compared with the baseline.
  KillTrial trial(const KillJob& job, std::mt19937& rng);
  // The control: a second run that nothing kills, compared with the baseline (a run that does
  // not repeat itself could not match after a kill either).
  KillTrial uninterrupted(const KillJob& job);
  // "" when `run` ends as `expected` did (as KillJob says), else the first difference found.
  static std::string compare(const KillJob& job, const RunRecord& run, const RunRecord& expected,
                             int rollouts);

 private:
  std::vector<std::string> command(const KillJob& job, const std::string& dir) const;
  RunRecord finish(const KillJob& job, const std::string& dir, KillTrial* trial) const;

  int rollouts_;
  std::map<std::string, RunRecord> baselines_;
};

}  // namespace ooze::testing
