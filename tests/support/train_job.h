// The small `ooze train` that tests and benchmarks start, the JSON lines it writes, and how to
// find the processes of a running job (through /proc). Free of GoogleTest, so that benchmarks
// (bench/random_kill_bench.cpp) start the same job as the tests.
//
//   std::vector<std::string> command = tiny_train_command(dir, {"--colocate"});
//   Process run(command, {{"OMP_NUM_THREADS", "1"}}, dir + "/log.txt");
//   for (const nlohmann::json& line : read_json_lines(dir + "/out/metrics.jsonl")) ...
//   const std::string session = session_of(run.pid());      // once its workers run
//   for (const Worker& worker : workers_of(session)) ...
//   EXPECT_TRUE(processes_of_session(session).empty());
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/process.h"
#include "tests/support/tiny_model.h"

namespace ooze::testing {

inline std::vector<nlohmann::json> read_json_lines(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

// `ooze train` on the tiny model: 8 prompts "i+i=" labelled 2i (written to DIR/train.jsonl),
// rollouts of 2 groups of 4 samples of at most 8 tokens, random rewards, 3 rollouts of 2
// optimizer steps of 4 samples, output in DIR/out. `flags` come last, so they override these.
inline std::vector<std::string> tiny_train_command(const std::string& dir,
                                                   const std::vector<std::string>& flags = {}) {
  const std::string prompts = dir + "/train.jsonl";
  std::ofstream out(prompts);
  for (int i = 0; i < 8; ++i) {
    out << nlohmann::json{{"input", std::to_string(i) + "+" + std::to_string(i) + "="},
                          {"label", std::to_string(2 * i)}}
               .dump()
        << "\n";
  }
  std::vector<std::string> command = {ooze_binary(),
                                      "train",
                                      "--hf-checkpoint",
                                      ::ooze::testing::tiny_model_dir(),
                                      "--prompt-data",
                                      prompts,
                                      "--label-key",
                                      "label",
                                      "--rm-type",
                                      "random",
                                      "--rollout-batch-size",
                                      "2",
                                      "--n-samples-per-prompt",
                                      "4",
                                      "--rollout-max-response-len",
                                      "8",
                                      "--num-rollout",
                                      "3",
                                      "--global-batch-size",
                                      "4",
                                      "--lr",
                                      "1e-3",
                                      "--output-dir",
                                      dir + "/out"};
  command.insert(command.end(), flags.begin(), flags.end());
  return command;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

inline bool wait_until(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return condition();
}

// /proc/PID/stat's fields after the command name: state first, then the parent's pid.
inline std::vector<std::string> stat_fields(int pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  std::vector<std::string> fields;
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return fields;
  std::istringstream in(stat.substr(close + 1));
  for (std::string field; in >> field;) fields.push_back(field);
  return fields;
}

// The value of `name` in process `pid`'s environment ("" when unset or unreadable).
inline std::string environment_value(int pid, const std::string& name) {
  const std::string environ = read_file("/proc/" + std::to_string(pid) + "/environ");
  const std::string prefix = name + "=";
  for (size_t start = 0; start < environ.size();) {
    size_t end = environ.find('\0', start);
    if (end == std::string::npos) end = environ.size();
    if (environ.compare(start, prefix.size(), prefix) == 0) {
      return environ.substr(start + prefix.size(), end - start - prefix.size());
    }
    start = end + 1;
  }
  return "";
}

inline std::vector<int> all_pids() {
  std::vector<int> pids;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (!name.empty() && name.find_first_not_of("0123456789") == std::string::npos) {
      pids.push_back(std::stoi(name));
    }
  }
  return pids;
}

// Every running process (a zombie has ended) that the node started for the session: whatever
// the job leaves behind, wherever it was reparented, is found here.
inline std::vector<int> processes_of_session(const std::string& session) {
  std::vector<int> found;
  for (int pid : all_pids()) {
    const std::vector<std::string> fields = stat_fields(pid);
    if (fields.empty() || fields[0] == "Z") continue;
    if (environment_value(pid, "OOZE_SESSION_DIR") == session) found.push_back(pid);
  }
  return found;
}

// The session directory of the driver `driver`, from the environment of its workers.
inline std::string session_of(int driver) {
  for (int pid : all_pids()) {
    const std::vector<std::string> fields = stat_fields(pid);
    if (fields.size() < 2 || fields[1] != std::to_string(driver)) continue;
    const std::string session = environment_value(pid, "OOZE_SESSION_DIR");
    if (!session.empty()) return session;
  }
  return "";
}

// A worker as its log's name SESSION/logs/<label>-<actor id>-<pid>.err tells it.
struct Worker {
  std::string label;  // with '_' for spaces and '=': "TrainActor_rank_1"
  std::string actor_id;
  int pid = 0;
};

inline std::vector<Worker> workers_of(const std::string& session) {
  std::vector<Worker> workers;
  for (const auto& entry : std::filesystem::directory_iterator(session + "/logs")) {
    if (entry.path().extension() != ".err") continue;
    const std::string name = entry.path().stem().string();
    const size_t pid_dash = name.rfind('-');
    const size_t id_dash = name.rfind('-', pid_dash - 1);
    if (pid_dash == std::string::npos || id_dash == std::string::npos) continue;
    workers.push_back(Worker{name.substr(0, id_dash),
                             name.substr(id_dash + 1, pid_dash - id_dash - 1),
                             std::stoi(name.substr(pid_dash + 1))});
  }
  return workers;
}

// The tiny `ooze train` with two trainer ranks and one engine, a checkpoint in DIR/save after
// every rollout, and far more rollouts than a test lets it run (unless `flags` say otherwise).
inline std::vector<std::string> checkpointing_train_command(
    const std::string& dir, const std::vector<std::string>& flags = {}) {
  std::vector<std::string> job = {"--n-samples-per-prompt",
                                  "2",
                                  "--rollout-max-response-len",
                                  "4",
                                  "--num-rollout",
                                  "100000",
                                  "--actor-num-gpus-per-node",
                                  "2",
                                  "--rollout-num-gpus",
                                  "1",
                                  "--save",
                                  dir + "/save",
                                  "--save-interval",
                                  "1"};
  job.insert(job.end(), flags.begin(), flags.end());
  return tiny_train_command(dir, job);
}

}  // namespace ooze::testing
