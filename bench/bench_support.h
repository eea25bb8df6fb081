// What the benchmarks share: the JSON result line docs/architecture.md fixes,
//   {"bench": ..., "metric": ..., "value": ..., "unit": ..., "baseline": ..., "ratio": ...}
// (missing or non-finite numbers written as null: JSON has no NaN), a stopwatch, and a
// temporary directory removed at exit, and the environment of the processes a benchmark starts,
// its multi-rank runs among them.
// For the benchmarks of the `ooze` binary itself: where it is, running it, the CPU demo's model
// and prompts, and the per-rollout lines of a run's OUT/metrics.jsonl.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "core/error.h"
#include "core/timer.h"
#include "tests/support/rank_group.h"

namespace ooze::bench {

// A benchmark that cannot measure: a missing binary, a failed run, metrics it cannot read.
class BenchFailure : public Error {
 public:
  using Error::Error;
};

// The running benchmark's executable name (bench_<name>), to say who failed.
inline std::string program_name() {
  return std::filesystem::read_symlink("/proc/self/exe").filename().string();
}

inline std::string json_number(std::optional<double> value) {
  if (!value || !std::isfinite(*value)) return "null";
  char text[32];
  std::snprintf(text, sizeof(text), "%.6g", *value);
  return text;
}

inline void print_line(const std::string& bench, const std::string& metric, double value,
                       const std::string& unit, std::optional<double> baseline,
                       std::optional<double> ratio) {
  std::printf(
      "{\"bench\": \"%s\", \"metric\": \"%s\", \"value\": %s, \"unit\": \"%s\", "
      "\"baseline\": %s, \"ratio\": %s}\n",
      bench.c_str(), metric.c_str(), json_number(value).c_str(), unit.c_str(),
      json_number(baseline).c_str(), json_number(ratio).c_str());
  std::fflush(stdout);
}

using ooze::seconds_since;

// A fresh directory under the system temp directory ("<tag>-XXXXXX"), removed with what it holds
// when the object goes.
class ScopedTempDir {
 public:
  explicit ScopedTempDir(const std::string& tag) {
    const std::filesystem::path base = std::filesystem::temp_directory_path();
    std::string pattern = (base / (tag + "-XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw IoError("cannot create a temporary directory under " + base.string());
    }
    dir_ = pattern;
  }
  ~ScopedTempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;

  // `name` inside the directory.
  std::string path(const std::string& name) const {
    return (std::filesystem::path(dir_) / name).string();
  }

 private:
  std::string dir_;
};

// This process's environment ("NAME=value" each) with OMP_NUM_THREADS=1, for the processes a
// benchmark starts: they share the machine's cores, one intra-op thread each.
inline std::vector<std::string> one_thread_environment() {
  std::vector<std::string> environment{"OMP_NUM_THREADS=1"};
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string(*e).rfind("OMP_NUM_THREADS=", 0) != 0) environment.emplace_back(*e);
  }
  return environment;
}

// How a benchmark runs its ranks (tests/support/rank_group.h): they meet at a store this process
// serves and write to its stdout and stderr (rank 0 may print result lines); a hung run ends
// within the hour.
inline testing::RankProcessOptions rank_process_options() {
  testing::RankProcessOptions options;
  options.serve_store = true;
  options.share_output = true;
  options.deadline = std::chrono::hours(1);
  return options;
}

// Runs `world` rank processes, the command line command_of(rank, port), with
// rank_process_options(); throws BenchFailure naming `what` when one fails.
inline void run_bench_ranks(int world, const testing::RankCommand& command_of,
                            const std::string& what) {
  const testing::RankGroupResult run =
      testing::run_rank_processes(world, command_of, rank_process_options());
  if (!run.all_passed()) {
    throw BenchFailure(program_name() + ": " + what + " failed (its output is above):\n" +
                       run.failures());
  }
}

// The text of the file at `path`.
inline std::string text_of(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// <build>/launcher/ooze, the running benchmark being <build>/bench/bench_<name>.
inline std::string ooze_binary() {
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe");
  const std::filesystem::path binary = self.parent_path().parent_path() / "launcher" / "ooze";
  if (!std::filesystem::exists(binary)) {
    throw BenchFailure(program_name() + ": no ooze binary at " + binary.string() +
                       "; build it first (ninja -C <build> ooze)");
  }
  return binary.string();
}

// The last `max_chars` characters of the file at `path`.
inline std::string tail_of(const std::string& path, size_t max_chars) {
  const std::string all = text_of(path);
  return all.size() <= max_chars ? all : all.substr(all.size() - max_chars);
}

// Runs `argv` (argv[0] a path) in one_thread_environment(), its stdout and stderr in `log_path`;
// throws with the log's end when it fails.
inline void run_logged(const std::vector<std::string>& argv, const std::string& log_path) {
  std::vector<std::string> env_strings = one_thread_environment();
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
    throw BenchFailure(program_name() + ": cannot start " + argv[0] + ": " +
                       std::strerror(spawned));
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string command;
    for (const std::string& a : argv) command += a + " ";
    throw BenchFailure(program_name() + ": `" + command + "` failed; the end of its output (" +
                       log_path + "):\n" + tail_of(log_path, 4000));
  }
}

// The CPU demo's model in `dir`: a small random Qwen3 (hidden 128, 2 layers, byte tokenizer).
inline void init_demo_model(const std::string& ooze, const std::string& dir,
                            const std::string& log_path) {
  run_logged(
      {ooze, "model", "init", "--arch", "qwen3", "--hidden-size", "128", "--layers", "2", "--heads",
       "4", "--kv-heads", "2", "--tokenizer", "byte", "--seed", "1", "--out", dir},
      log_path);
}

// The CPU demo's prompts: every single-digit sum ({"input": "3+4=", "label": "7"}).
inline void write_sum_prompts(const std::string& path) {
  std::ofstream out(path);
  for (int a = 0; a < 10; ++a) {
    for (int b = 0; b < 10; ++b) {
      out << nlohmann::json{{"input", std::to_string(a) + "+" + std::to_string(b) + "="},
                            {"label", std::to_string(a + b)}}
                 .dump()
          << "\n";
    }
  }
}

// `ooze train` on the demo's model and prompts (init_demo_model, write_sum_prompts): GRPO with
// the KL loss at 0.01, rewards by --rm-type f1, `rollout_batch_size` prompts x
// `samples_per_prompt` samples at temperature 1, optimizer steps of 64 samples, `num_rollout`
// rollouts into `out_dir`. The bench appends its placement and shape.
inline std::vector<std::string> demo_train_command(const std::string& ooze,
                                                   const std::string& model_dir,
                                                   const std::string& prompts,
                                                   int rollout_batch_size, int samples_per_prompt,
                                                   int num_rollout, const std::string& out_dir) {
  return {ooze,
          "train",
          "--hf-checkpoint",
          model_dir,
          "--prompt-data",
          prompts,
          "--input-key",
          "input",
          "--label-key",
          "label",
          "--rm-type",
          "f1",
          "--rollout-batch-size",
          std::to_string(rollout_batch_size),
          "--n-samples-per-prompt",
          std::to_string(samples_per_prompt),
          "--global-batch-size",
          "64",
          "--rollout-temperature",
          "1.0",
          "--use-kl-loss",
          "--kl-loss-coef",
          "0.01",
          "--num-rollout",
          std::to_string(num_rollout),
          "--output-dir",
          out_dir};
}

// `key` of a rollout's metrics line; throws when it is missing.
inline double metric(const nlohmann::json& line, const std::string& key) {
  const auto found = line.find(key);
  if (found == line.end() || !found->is_number()) {
    throw BenchFailure(program_name() + ": a rollout's metrics line lacks " + key + ": " +
                       line.dump());
  }
  return found->get<double>();
}

// The per-rollout lines of a run's OUT/metrics.jsonl (not the optimizer steps' or evaluations')
// from rollout `first_rollout` on; throws unless there are `expected` of them.
inline std::vector<nlohmann::json> rollout_lines(const std::string& metrics_path,
                                                 int64_t first_rollout, size_t expected) {
  std::ifstream in(metrics_path);
  std::string text;
  std::vector<nlohmann::json> rollouts;
  while (std::getline(in, text)) {
    nlohmann::json line = nlohmann::json::parse(text);
    if (line.contains("train/step") || !line.contains("perf/train_time")) continue;
    if (line["step"].get<int64_t>() < first_rollout) continue;
    rollouts.push_back(std::move(line));
  }
  if (rollouts.size() != expected) {
    throw BenchFailure(program_name() + ": " + metrics_path + " holds " +
                       std::to_string(rollouts.size()) + " rollouts from rollout " +
                       std::to_string(first_rollout) + " on, not " + std::to_string(expected));
  }
  return rollouts;
}

}  // namespace ooze::bench
