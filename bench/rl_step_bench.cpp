// A whole RL step of the CPU demo, measured on the real `ooze` binary as users run it (found
// beside this bench: <build>/launcher/ooze). In a temporary directory `ooze model init` writes a
// small random Qwen3 (hidden 128, 2 layers, byte tokenizer), the prompts are every single-digit
// sum ({"input": "3+4=", "label": "7"}), rewarded by --rm-type f1. `ooze train` then runs GRPO
// with the KL loss on 2 trainer ranks and 2 engines (rollouts of 16 prompts x 8 samples, 4
// response tokens, one optimizer step of 64 samples twice per rollout), once with --colocate and
// once without, OMP_NUM_THREADS=1 in every process. The first kWarmupRollouts rollouts of a run
// are left out; the rest are averaged from OUT/metrics.jsonl. Each mode runs kRuns times,
// alternating with the other, and the run with the shortest mean step counts, so a burst of
// other work on the machine does not decide the comparison.
//
// Per mode (prefix colocated_ or disaggregated_):
//   step_time          seconds of one rollout iteration (perf/step_time)
//   rollout, wake_up, log_probs (the old policy's), ref (the reference's), train, sync (weight
//   update), other     seconds of each phase, baseline the step time, ratio its share of the
//                      step. wake_up: where trainer and engines take turns on the same devices
//                      (colocated), the engines releasing their memory and the trainer waking
//                      (perf/wake_up_time; 0 where no such key is written). other = step - the
//                      phases: driver work between them (advantages, batching, metrics) and, when
//                      colocated, the trainer going back to sleep and the engines resuming;
//                      negative where phases overlap
//   samples_per_s      rollout_batch_size * n_samples_per_prompt / step time
//   trainer_idle       seconds the trainer waits for the rollout (perf/train_wait_time),
//                      baseline the step time, ratio the share of the step the trainer idles
// Then colocated_vs_disaggregated_samples_per_s: the colocated samples/s against the
// disaggregated ones as baseline; ratio > 1 means colocated steps are faster on this machine.
//
// Where an `ooze train` does not yet write perf/step_time, the step is the sum of the phases
// (other is then unknown: null); without perf/train_wait_time the trainer's wait is the rollout's
// time, as in a loop that trains only after each rollout. Both fallbacks are noted on stderr.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_support.h"
#include "core/error.h"

extern char** environ;

namespace {

using nlohmann::json;
using ooze::bench::print_line;
using ooze::bench::ScopedTempDir;

constexpr int kWarmupRollouts = 2;
constexpr int kMeasuredRollouts = 8;
constexpr int kRuns = 2;
constexpr int kRolloutBatchSize = 16;
constexpr int kSamplesPerPrompt = 8;

class BenchFailure : public ooze::Error {
 public:
  using Error::Error;
};

// <build>/launcher/ooze, this executable being <build>/bench/bench_rl_step_bench.
std::string ooze_binary() {
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe");
  const std::filesystem::path binary = self.parent_path().parent_path() / "launcher" / "ooze";
  if (!std::filesystem::exists(binary)) {
    throw BenchFailure("bench_rl_step_bench: no ooze binary at " + binary.string() +
                       "; build it first (ninja -C <build> ooze)");
  }
  return binary.string();
}

std::string tail_of(const std::string& path, size_t max_chars) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string all = text.str();
  return all.size() <= max_chars ? all : all.substr(all.size() - max_chars);
}

// Runs `argv` with OMP_NUM_THREADS=1, its stdout and stderr in `log_path`; throws with the log's
// end when it fails.
void run_ooze(const std::vector<std::string>& argv, const std::string& log_path) {
  std::vector<std::string> env_strings{"OMP_NUM_THREADS=1"};
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "OMP_NUM_THREADS=", 16) != 0) env_strings.emplace_back(*e);
  }
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> argp;
  for (std::string& s : args) argp.push_back(s.data());
  argp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = -1;
  const int spawned = ::posix_spawn(&pid, argp[0], &actions, nullptr, argp.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    throw BenchFailure("bench_rl_step_bench: cannot start " + argv[0] + ": " +
                       std::strerror(spawned));
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string command;
    for (const std::string& a : argv) command += a + " ";
    throw BenchFailure("bench_rl_step_bench: `" + command + "` failed; the end of its output (" +
                       log_path + "):\n" + tail_of(log_path, 4000));
  }
}

// Every single-digit sum, as the CPU demo's prompts.
std::string write_prompts(const std::string& path) {
  std::ofstream out(path);
  for (int a = 0; a < 10; ++a) {
    for (int b = 0; b < 10; ++b) {
      out << json{{"input", std::to_string(a) + "+" + std::to_string(b) + "="},
                  {"label", std::to_string(a + b)}}
                 .dump()
          << "\n";
    }
  }
  return path;
}

// Mean seconds per measured rollout.
struct StepSplit {
  double step = 0, rollout = 0, wake_up = 0, log_probs = 0, ref = 0, train = 0, sync = 0;
  double train_wait = 0;
  bool step_measured = true;        // perf/step_time was there
  bool train_wait_measured = true;  // perf/train_wait_time was there
  // Unknown (NaN, printed as null) when the step is only the phases' sum.
  double other() const {
    return step_measured ? step - (rollout + wake_up + log_probs + ref + train + sync)
                         : std::numeric_limits<double>::quiet_NaN();
  }
};

double number(const json& line, const char* key) {
  const auto found = line.find(key);
  if (found == line.end() || !found->is_number()) {
    throw BenchFailure(std::string("bench_rl_step_bench: a rollout's metrics line lacks ") + key +
                       ": " + line.dump());
  }
  return found->get<double>();
}

// The per-rollout lines of OUT/metrics.jsonl (not the optimizer steps' or evaluations'), past
// the warm-up, averaged.
StepSplit read_split(const std::string& metrics_path) {
  std::ifstream in(metrics_path);
  std::string text;
  std::vector<json> rollouts;
  while (std::getline(in, text)) {
    json line = json::parse(text);
    if (line.contains("train/step") || !line.contains("perf/train_time")) continue;
    if (line["step"].get<int64_t>() < kWarmupRollouts) continue;
    rollouts.push_back(std::move(line));
  }
  if (rollouts.size() != kMeasuredRollouts) {
    throw BenchFailure("bench_rl_step_bench: " + metrics_path + " holds " +
                       std::to_string(rollouts.size()) + " measured rollouts, not " +
                       std::to_string(kMeasuredRollouts));
  }
  StepSplit split;
  for (const json& line : rollouts) {
    StepSplit one;
    one.rollout = number(line, "perf/rollout_time");
    if (line.contains("perf/wake_up_time")) one.wake_up = number(line, "perf/wake_up_time");
    one.log_probs = number(line, "perf/log_probs_time");
    one.ref = number(line, "perf/ref_log_probs_time");
    one.train = number(line, "perf/train_time");
    one.sync = number(line, "perf/update_weights_time");
    if (line.contains("perf/step_time")) {
      one.step = number(line, "perf/step_time");
    } else {
      split.step_measured = false;
      one.step = one.rollout + one.wake_up + one.log_probs + one.ref + one.train + one.sync;
    }
    if (line.contains("perf/train_wait_time")) {
      one.train_wait = number(line, "perf/train_wait_time");
    } else {
      split.train_wait_measured = false;
      one.train_wait = one.rollout;
    }
    split.step += one.step / kMeasuredRollouts;
    split.rollout += one.rollout / kMeasuredRollouts;
    split.wake_up += one.wake_up / kMeasuredRollouts;
    split.log_probs += one.log_probs / kMeasuredRollouts;
    split.ref += one.ref / kMeasuredRollouts;
    split.train += one.train / kMeasuredRollouts;
    split.sync += one.sync / kMeasuredRollouts;
    split.train_wait += one.train_wait / kMeasuredRollouts;
  }
  return split;
}

StepSplit train_once(const ScopedTempDir& files, const std::string& ooze, const std::string& mode,
                     int run) {
  const std::string out_dir = files.path(mode + "-" + std::to_string(run));
  std::vector<std::string> command = {ooze,
                                      "train",
                                      "--hf-checkpoint",
                                      files.path("model"),
                                      "--prompt-data",
                                      files.path("prompts.jsonl"),
                                      "--input-key",
                                      "input",
                                      "--label-key",
                                      "label",
                                      "--rm-type",
                                      "f1",
                                      "--actor-num-gpus-per-node",
                                      "2",
                                      "--rollout-num-gpus",
                                      "2",
                                      "--rollout-batch-size",
                                      std::to_string(kRolloutBatchSize),
                                      "--n-samples-per-prompt",
                                      std::to_string(kSamplesPerPrompt),
                                      "--global-batch-size",
                                      "64",
                                      "--rollout-max-response-len",
                                      "4",
                                      "--rollout-temperature",
                                      "1.0",
                                      "--use-kl-loss",
                                      "--kl-loss-coef",
                                      "0.01",
                                      "--num-rollout",
                                      std::to_string(kWarmupRollouts + kMeasuredRollouts),
                                      "--output-dir",
                                      out_dir};
  if (mode == "colocated") command.push_back("--colocate");
  run_ooze(command, out_dir + ".log");
  return read_split(out_dir + "/metrics.jsonl");
}

double samples_per_second(const StepSplit& split) {
  return kRolloutBatchSize * kSamplesPerPrompt / split.step;
}

void print_mode(const std::string& bench, const std::string& mode, const StepSplit& split) {
  if (!split.step_measured) {
    std::cerr << mode << ": no perf/step_time in metrics.jsonl; the step is the sum of the phases"
              << std::endl;
  }
  if (!split.train_wait_measured) {
    std::cerr << mode << ": no perf/train_wait_time in metrics.jsonl; the trainer's wait is the "
              << "rollout's time" << std::endl;
  }
  print_line(bench, mode + "_step_time", split.step, "s", std::nullopt, std::nullopt);
  const std::vector<std::pair<std::string, double>> phases = {
      {"rollout", split.rollout}, {"wake_up", split.wake_up}, {"log_probs", split.log_probs},
      {"ref", split.ref},         {"train", split.train},     {"sync", split.sync},
      {"other", split.other()}};
  for (const auto& [name, seconds] : phases) {
    print_line(bench, mode + "_" + name, seconds, "s", split.step, seconds / split.step);
  }
  print_line(bench, mode + "_samples_per_s", samples_per_second(split), "samples/s", std::nullopt,
             std::nullopt);
  print_line(bench, mode + "_trainer_idle", split.train_wait, "s", split.step,
             split.train_wait / split.step);
}

void run_bench() {
  const std::string bench = "rl_step";
  const std::string ooze = ooze_binary();
  ScopedTempDir files("ooze-rl-step-bench");
  run_ooze(
      {ooze, "model", "init", "--arch", "qwen3", "--hidden-size", "128", "--layers", "2", "--heads",
       "4", "--kv-heads", "2", "--tokenizer", "byte", "--seed", "1", "--out", files.path("model")},
      files.path("model-init.log"));
  write_prompts(files.path("prompts.jsonl"));

  const std::vector<std::string> modes = {"colocated", "disaggregated"};
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
}

}  // namespace

int main() {
  try {
    run_bench();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 1;
  }
  return 0;
}
