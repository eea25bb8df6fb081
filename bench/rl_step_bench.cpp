// A whole RL step of the CPU demo, measured on the real `ooze` binary as users run it (found
// beside this bench: <build>/launcher/ooze). In a temporary directory `ooze model init` writes a
// small random Qwen3 (hidden 128, 2 layers, byte tokenizer), the prompts are every single-digit
// sum ({"input": "3+4=", "label": "7"}), rewarded by --rm-type f1. `ooze train` then runs GRPO
// with the KL loss on 2 trainer ranks and 2 engines (rollouts of 16 prompts x 8 samples, 4
// response tokens, one optimizer step of 64 samples twice per rollout) in three modes:
// colocated (--colocate: on CPU slots trainer and engines share host memory without turns),
// colocated_offload (--colocate --offload on: they take turns as on a GPU) and disaggregated,
// OMP_NUM_THREADS=1 in every process. The first kWarmupRollouts rollouts of a run are left out;
// the rest are averaged from OUT/metrics.jsonl. Each mode runs kRuns times, alternating with the
// others, and the run with the shortest mean step counts, so a burst of other work on the
// machine does not decide the comparison.
//
// Per mode (prefix colocated_, colocated_offload_ or disaggregated_):
//   step_time          seconds of one rollout iteration (perf/step_time)
//   rollout, wake_up, log_probs (the old policy's), ref (the reference's), train, sync (weight
//   update), sleep, other
//                      seconds of each phase, baseline the step time, ratio its share of the
//                      step. wake_up and sleep: the turns of colocated_offload
//                      (perf/wake_up_time: the engines release their memory and the trainer
//                      wakes; perf/sleep_time: the engines resume and the trainer sleeps; 0
//                      otherwise). other = step - the phases: driver work between them
//                      (advantages, batching, metrics)
//   samples_per_s      rollout_batch_size * n_samples_per_prompt / step time
//   trainer_idle       seconds the trainer waits for the rollout (perf/train_wait_time),
//                      baseline the step time, ratio the share of the step the trainer idles
// Then colocated_vs_disaggregated_samples_per_s: the colocated samples/s against the
// disaggregated ones as baseline (ratio > 1: colocated steps are faster on this machine), and
// colocated_offload_vs_colocated_samples_per_s: what taking turns costs on CPU slots.
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
constexpr int kMeasuredRollouts = 8;
constexpr int kRuns = 2;
constexpr int kRolloutBatchSize = 16;
constexpr int kSamplesPerPrompt = 8;

// The phases of a step and their keys in a rollout's metrics line; wake_up and sleep are
// written only where trainer and engines take turns (colocated).
const std::vector<std::pair<std::string, std::string>> kPhases = {
    {"rollout", "perf/rollout_time"},     {"wake_up", "perf/wake_up_time"},
    {"log_probs", "perf/log_probs_time"}, {"ref", "perf/ref_log_probs_time"},
    {"train", "perf/train_time"},         {"sync", "perf/update_weights_time"},
    {"sleep", "perf/sleep_time"}};

// Mean seconds per measured rollout: the step, each phase, and the trainer's wait.
struct StepSplit {
  double step = 0, train_wait = 0;
  std::map<std::string, double> phases;
  double other() const {
    double rest = step;
    for (const auto& [name, seconds] : phases) rest -= seconds;
    return rest;
  }
};

// The per-rollout lines of OUT/metrics.jsonl past the warm-up, averaged.
StepSplit read_split(const std::string& metrics_path) {
  const std::vector<json> rollouts =
      ooze::bench::rollout_lines(metrics_path, kWarmupRollouts, kMeasuredRollouts);
  StepSplit split;
  for (const json& line : rollouts) {
    split.step += metric(line, "perf/step_time") / kMeasuredRollouts;
    split.train_wait += metric(line, "perf/train_wait_time") / kMeasuredRollouts;
    for (const auto& [name, key] : kPhases) {
      const bool optional = name == "wake_up" || name == "sleep";
      if (optional && !line.contains(key)) continue;
      split.phases[name] += metric(line, key) / kMeasuredRollouts;
    }
  }
  return split;
}

StepSplit train_once(const ScopedTempDir& files, const std::string& ooze, const std::string& mode,
                     int run) {
  const std::string out_dir = files.path(mode + "-" + std::to_string(run));
  std::vector<std::string> command = ooze::bench::demo_train_command(
      ooze, files.path("model"), files.path("prompts.jsonl"), kRolloutBatchSize, kSamplesPerPrompt,
      kWarmupRollouts + kMeasuredRollouts, out_dir);
  command.insert(command.end(), {"--actor-num-gpus-per-node", "2", "--rollout-num-gpus", "2",
                                 "--rollout-max-response-len", "4"});
  if (mode != "disaggregated") command.push_back("--colocate");
  if (mode == "colocated_offload") command.insert(command.end(), {"--offload", "on"});
  ooze::bench::run_logged(command, out_dir + ".log");
  return read_split(out_dir + "/metrics.jsonl");
}

double samples_per_second(const StepSplit& split) {
  return kRolloutBatchSize * kSamplesPerPrompt / split.step;
}

void print_mode(const std::string& bench, const std::string& mode, const StepSplit& split) {
  print_line(bench, mode + "_step_time", split.step, "s", std::nullopt, std::nullopt);
  for (const auto& [name, key] : kPhases) {
    auto found = split.phases.find(name);
    const double seconds = found == split.phases.end() ? 0.0 : found->second;
    print_line(bench, mode + "_" + name, seconds, "s", split.step, seconds / split.step);
  }
  print_line(bench, mode + "_other", split.other(), "s", split.step, split.other() / split.step);
  print_line(bench, mode + "_samples_per_s", samples_per_second(split), "samples/s", std::nullopt,
             std::nullopt);
  print_line(bench, mode + "_trainer_idle", split.train_wait, "s", split.step,
             split.train_wait / split.step);
}

void run_bench() {
  const std::string bench = "rl_step";
  const std::string ooze = ooze::bench::ooze_binary();
  ScopedTempDir files("ooze-rl-step-bench");
  ooze::bench::init_demo_model(ooze, files.path("model"), files.path("model-init.log"));
  ooze::bench::write_sum_prompts(files.path("prompts.jsonl"));

  const std::vector<std::string> modes = {"colocated", "colocated_offload", "disaggregated"};
  std::map<std::string, StepSplit> best;
  for (int run = 0; run < kRuns; ++run) {
    for (const std::string& mode : modes) {
      const StepSplit split = train_once(files, ooze, mode, run);
      std::cerr << mode << " run " << run << ": " << split.step << " s per step" << std::endl;
      if (best.count(mode) == 0 || split.step < best[mode].step) best[mode] = split;
    }
  }
  for (const std::string& mode : modes) print_mode(bench, mode, best[mode]);
  const double colocated = samples_per_second(best["colocated"]);
  const double disaggregated = samples_per_second(best["disaggregated"]);
  print_line(bench, "colocated_vs_disaggregated_samples_per_s", colocated, "samples/s",
             disaggregated, colocated / disaggregated);
  const double offloading = samples_per_second(best["colocated_offload"]);
  print_line(bench, "colocated_offload_vs_colocated_samples_per_s", offloading, "samples/s",
             colocated, offloading / colocated);
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
