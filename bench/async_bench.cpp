// What `ooze train --async` gains over the synchronous loop, measured on the real `ooze` binary
// (found beside this bench: <build>/launcher/ooze) with the same resources in both modes: the
// disaggregated placement with 1 trainer rank and 1 engine, OMP_NUM_THREADS=1 in every process.
// The synchronous loop generates, then trains, so in each phase one of the two processes idles;
// with --async the engine generates rollout k+1 while the trainer trains on rollout k.
//
// The CPU demo's model and prompts (bench_support.h), rewarded by --rm-type f1, trained by GRPO
// with the KL loss: rollouts of 16 prompts x 8 samples with up to 128 response tokens (the random
// model rarely emits its end token), two optimizer steps of 64 samples in micro-batches of 8 per
// rollout. That shape makes the generation and the trainer's work (the old policy's and the
// reference's log-probs, training, the weight sync) take about the same time, where overlapping
// them gains the most. The first kWarmupRollouts rollouts of a run are left out; the rest are
// averaged from OUT/metrics.jsonl. Each mode runs kRuns times, alternating with the other, and the
// run with the shortest mean step counts.
//
// Per mode (prefix sync_ or async_):
//   step_time          seconds of one rollout iteration on the trainer's side (perf/step_time):
//                      the wait for the rollout and everything after it
//   rollout            seconds of generation (perf/rollout_time), baseline the step time; with
//                      --async it overlaps the trainer's work, so its share may pass 1
//   trainer_work       seconds of the old policy's and the reference's log-probs, training and
//                      the weight sync, baseline the step time
//   trainer_idle       seconds the trainer waits for the rollout (perf/train_wait_time), baseline
//                      the step time, ratio the share of the step the trainer idles
// Then sync_samples_per_s (rollout_batch_size * n_samples_per_prompt / step time),
// async_samples_per_s against it as baseline (ratio > 1: the overlap pays), and
// async_max_staleness: the most weight versions any trained token was behind the policy that
// trained on it (rollout/max_staleness) over every rollout of every async run, warm-up included,
// baseline --max-staleness; the bench fails when the bound is broken.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_support.h"
#include "core/load_time_settings.h"

namespace {

using nlohmann::json;
using ooze::bench::metric;
using ooze::bench::print_line;
using ooze::bench::ScopedTempDir;

constexpr int kWarmupRollouts = 2;
constexpr int kMeasuredRollouts = 6;
constexpr int kRuns = 3;
constexpr int kRolloutBatchSize = 16;
constexpr int kSamplesPerPrompt = 8;
constexpr int kMaxStaleness = 1;

// The trainer's phases after the wait; the reference's log-probs come with --use-kl-loss.
const std::vector<std::string> kTrainerWork = {"perf/log_probs_time", "perf/ref_log_probs_time",
                                               "perf/train_time", "perf/update_weights_time"};

// Mean seconds per measured rollout, and the largest staleness over the whole run.
struct RunResult {
  double step = 0, rollout = 0, trainer_work = 0, train_wait = 0;
  double max_staleness = 0;
};

RunResult train_once(const ScopedTempDir& files, const std::string& ooze, bool async, int run) {
  const std::string out_dir = files.path((async ? "async-" : "sync-") + std::to_string(run));
  std::vector<std::string> command = ooze::bench::demo_train_command(
      ooze, files.path("model"), files.path("prompts.jsonl"), kRolloutBatchSize, kSamplesPerPrompt,
      kWarmupRollouts + kMeasuredRollouts, out_dir);
  command.insert(command.end(), {"--actor-num-gpus-per-node", "1", "--rollout-num-gpus", "1",
                                 "--micro-batch-size", "8", "--rollout-max-response-len", "128"});
  if (async) {
    command.insert(command.end(), {"--async", "--max-staleness", std::to_string(kMaxStaleness)});
  }
  ooze::bench::run_logged(command, out_dir + ".log");

  const std::string metrics_path = out_dir + "/metrics.jsonl";
  RunResult result;
  const int total = kWarmupRollouts + kMeasuredRollouts;
  for (const json& line : ooze::bench::rollout_lines(metrics_path, 0, total)) {
    result.max_staleness = std::max(result.max_staleness, metric(line, "rollout/max_staleness"));
    if (line["step"].get<int>() < kWarmupRollouts) continue;
    result.step += metric(line, "perf/step_time") / kMeasuredRollouts;
    result.rollout += metric(line, "perf/rollout_time") / kMeasuredRollouts;
    result.train_wait += metric(line, "perf/train_wait_time") / kMeasuredRollouts;
    for (const std::string& key : kTrainerWork) {
      result.trainer_work += metric(line, key) / kMeasuredRollouts;
    }
  }
  return result;
}

double samples_per_second(const RunResult& result) {
  return kRolloutBatchSize * kSamplesPerPrompt / result.step;
}

void print_mode(const std::string& bench, const std::string& mode, const RunResult& result) {
  print_line(bench, mode + "_step_time", result.step, "s", std::nullopt, std::nullopt);
  print_line(bench, mode + "_rollout", result.rollout, "s", result.step,
             result.rollout / result.step);
  print_line(bench, mode + "_trainer_work", result.trainer_work, "s", result.step,
             result.trainer_work / result.step);
  print_line(bench, mode + "_trainer_idle", result.train_wait, "s", result.step,
             result.train_wait / result.step);
}

void run_bench() {
  const std::string bench = "async";
  const std::string ooze = ooze::bench::ooze_binary();
  ScopedTempDir files("ooze-async-bench");
  ooze::bench::init_demo_model(ooze, files.path("model"), files.path("model-init.log"));
  ooze::bench::write_sum_prompts(files.path("prompts.jsonl"));

  std::map<bool, RunResult> best;
  double async_max_staleness = 0;
  for (int run = 0; run < kRuns; ++run) {
    for (const bool async : {false, true}) {
      const RunResult result = train_once(files, ooze, async, run);
      std::cerr << (async ? "async" : "sync") << " run " << run << ": " << result.step
                << " s per step" << std::endl;
      if (best.count(async) == 0 || result.step < best[async].step) best[async] = result;
      if (async) async_max_staleness = std::max(async_max_staleness, result.max_staleness);
    }
  }
  print_mode(bench, "sync", best[false]);
  print_mode(bench, "async", best[true]);
  const double sync_rate = samples_per_second(best[false]);
  const double async_rate = samples_per_second(best[true]);
  print_line(bench, "sync_samples_per_s", sync_rate, "samples/s", std::nullopt, std::nullopt);
  print_line(bench, "async_samples_per_s", async_rate, "samples/s", sync_rate,
             async_rate / sync_rate);
  print_line(bench, "async_max_staleness", async_max_staleness, "versions", kMaxStaleness,
             async_max_staleness / kMaxStaleness);
  if (async_max_staleness > kMaxStaleness) {
    throw ooze::bench::BenchFailure("bench_async_bench: a trained token was " +
                                    std::to_string(async_max_staleness) +
                                    " weight versions behind its policy, past --max-staleness " +
                                    std::to_string(kMaxStaleness));
  }
}

}  // namespace

int main(int, char** argv) {
  ooze::start_with_load_time_settings(argv);  // first: it may start this program again
  try {
    run_bench();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 1;
  }
  return 0;
}
