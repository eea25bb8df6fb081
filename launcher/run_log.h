// Where an `ooze train` run reports, as each phase ends:
//   - OUT/metrics.jsonl: every line of metrics with "step" the rollout id;
//   - OUT/tensorboard: the same as TensorBoard scalars, a train step's line at its optimizer
//     step ("train/step"), every other line at the rollout id;
//   - the terminal (or the log file stdout goes to): one line per optimizer step when a rollout
//     has several, one per evaluation, and one summary line per rollout with its reward, loss,
//     time split and throughput: short enough to read as it scrolls, complete in the files.
//
//   RunLog log(output_dir, std::cout, num_rollout, steps_per_rollout);
//   log.train_step(rollout_id, step_line);   // keys train/*
//   log.eval(rollout_id, eval_line);         // keys eval/*
//   log.rollout(rollout_id, rollout_line);   // keys rollout/*, perf/*
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>

#include "core/metrics.h"
#include "core/tensorboard_writer.h"

namespace ooze::launcher {

using MetricLine = std::map<std::string, double>;

class RunLog {
 public:
  // Opens (appends to) OUT/metrics.jsonl and a new event file in OUT/tensorboard.
  RunLog(const std::string& output_dir, std::ostream& out, int64_t num_rollout,
         int64_t steps_per_rollout);

  void train_step(int64_t rollout_id, const MetricLine& line);
  void eval(int64_t rollout_id, const MetricLine& line);
  // Ends the rollout: its line, then the summary (which quotes its last train step).
  void rollout(int64_t rollout_id, const MetricLine& line);
  // A checkpoint is about to be written: the lines so far go to disk first, so that a
  // checkpoint never names a rollout whose line could still be lost.
  void before_checkpoint();
  // A run resumed at `first_rollout`, after `optimizer_steps` steps, does the rollouts from
  // there again: their lines from before are dropped from metrics.jsonl and the earlier event
  // files (train lines by optimizer step, the others by rollout), so each is recorded once.
  void resume_at(int64_t first_rollout, int64_t optimizer_steps);

 private:
  void record(int64_t rollout_id, int64_t tensorboard_step, const MetricLine& line);

  MetricsSink metrics_;
  TensorBoardWriter tensorboard_;
  std::ostream& out_;
  int64_t num_rollout_;
  int64_t steps_per_rollout_;
  MetricLine last_step_;
};

}  // namespace ooze::launcher
