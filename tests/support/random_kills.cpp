#include "tests/support/random_kills.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <sstream>
#include <thread>

#include "core/safetensors.h"
#include "tests/support/process.h"
#include "tests/support/train_job.h"

namespace ooze::testing {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
namespace fs = std::filesystem;

const std::map<std::string, std::string> kOneThread = {{"OMP_NUM_THREADS", "1"}};
// A run, a restart included, takes seconds; a minute means it hangs.
constexpr auto kRunTimeout = std::chrono::seconds(120);
constexpr int kMaxResumes = 4;

bool running(pid_t pid) {
  const std::vector<std::string> fields = stat_fields(pid);
  return !fields.empty() && fields[0] != "Z";
}

std::string last_line(const std::string& text) {
  const size_t end = text.find_last_not_of('\n');
  if (end == std::string::npos) return "";
  const size_t start = text.rfind('\n', end);
  std::string line = text.substr(start == std::string::npos ? 0 : start + 1,
                                 end - (start == std::string::npos ? 0 : start + 1) + 1);
  return line.size() > 100 ? line.substr(0, 100) : line;
}

// The newest checkpoint's directory in `save`, "" when there is none.
std::string last_checkpoint(const std::string& save) {
  const std::string tracker = save + "/latest_checkpointed_iteration.txt";
  if (!fs::exists(tracker)) return "";
  char name[32];
  std::snprintf(name, sizeof(name), "/iter_%07lld", std::stoll(read_file(tracker)));
  return save + name;
}

bool measured(const std::string& key) {
  return key.rfind("rollout/", 0) == 0 || key.rfind("train/", 0) == 0 ||
         key.rfind("critic/", 0) == 0;
}

// "" when every metric of `expected` that is not a timing equals `line`'s.
std::string compare_metrics(const json& line, const json& expected, const std::string& what) {
  for (const auto& [key, value] : expected.items()) {
    if (!measured(key) || !value.is_number()) continue;
    if (!line.contains(key)) return what + " has no " + key;
    const double a = line[key].get<double>(), b = value.get<double>();
    if (std::abs(a - b) > 1e-6 * std::max(1.0, std::abs(b))) {
      std::ostringstream text;
      text << key << " of " << what << " is " << a << ", uninterrupted " << b;
      return text.str();
    }
  }
  return "";
}

// "" when every tensor of the checkpoint's files equals the other's bit for bit (the RNG state
// aside: where the generators stood says nothing of what was learned).
std::string compare_checkpoints(const std::string& dir, const std::string& expected) {
  if (dir.empty()) return "no checkpoint";
  if (fs::path(dir).filename() != fs::path(expected).filename()) {
    return "the last checkpoint is " + fs::path(dir).filename().string() + ", uninterrupted " +
           fs::path(expected).filename().string();
  }
  for (const auto& entry : fs::directory_iterator(expected)) {
    if (entry.path().extension() != ".safetensors") continue;
    const std::string name = entry.path().filename().string();
    const SafetensorsFile want = SafetensorsFile::open(entry.path().string());
    const SafetensorsFile got = SafetensorsFile::open(dir + "/" + name);
    for (const std::string& tensor : want.names()) {
      if (tensor.rfind("rng_state/", 0) == 0) continue;
      if (!got.contains(tensor)) return name + " has no " + tensor;
      if (!got.tensor(tensor).equal(want.tensor(tensor))) {
        return "tensor " + tensor + " of " + name + " differs";
      }
    }
  }
  return "";
}

// Every scalar of the event files in `dir`, through the independent reader; a file it cannot
// read is reported as the scalar ("unreadable: ...", -1).
std::map<std::pair<std::string, int64_t>, std::vector<double>> read_tensorboard(
    const std::string& dir) {
  std::map<std::pair<std::string, int64_t>, std::vector<double>> scalars;
  if (!fs::is_directory(dir)) return scalars;
  std::vector<std::string> argv = {
      "/usr/bin/python3",
      (fs::path(__FILE__).parent_path().parent_path() / "core/tensorboard_event_reader.py")
          .string()};
  for (const auto& entry : fs::directory_iterator(dir)) argv.push_back(entry.path().string());
  const std::string log = dir + "/../tensorboard_read.txt";
  Process reader(argv, {}, log);
  const ExitStatus status = reader.wait(std::chrono::seconds(60));
  std::istringstream lines(reader.output());
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] != '{') continue;
    const json event = json::parse(line);
    for (const json& value : event.value("values", json::array())) {
      if (!value.contains("simple_value") || !value["simple_value"].is_number()) continue;
      scalars[{value["tag"].get<std::string>(), event["step"].get<int64_t>()}].push_back(
          value["simple_value"].get<double>());
    }
  }
  if (!status.exited || status.code != 0) scalars[{"unreadable: " + reader.output(), -1}] = {};
  return scalars;
}

// "" when every (tag, step) of `run`'s event files was written once, and the measured ones (not
// timings) are those of `expected`'s, with the same values (as compare_metrics) when `exact`.
std::string compare_tensorboard(const RunRecord& run, const RunRecord& expected, bool exact) {
  for (const auto& [key, values] : run.scalars) {
    const std::string what = "TensorBoard " + key.first + " at step " + std::to_string(key.second);
    if (values.size() != 1)
      return what + " was written " + std::to_string(values.size()) + " times";
    if (!measured(key.first)) continue;
    const auto want = expected.scalars.find(key);
    if (want == expected.scalars.end()) return what + " is not in the uninterrupted run's";
    const double a = values[0], b = want->second.at(0);
    if (exact && std::abs(a - b) > 1e-6 * std::max(1.0, std::abs(b))) {
      std::ostringstream text;
      text << what << " is " << a << ", uninterrupted " << b;
      return text.str();
    }
  }
  for (const auto& [key, values] : expected.scalars) {
    if (measured(key.first) && run.scalars.count(key) == 0) {
      return "TensorBoard has no " + key.first + " at step " + std::to_string(key.second);
    }
  }
  return "";
}

}  // namespace

RunRecord read_run(const std::string& dir) {
  RunRecord record;
  if (fs::exists(dir + "/out/metrics.jsonl")) {
    for (const json& line : read_json_lines(dir + "/out/metrics.jsonl")) {
      if (line.contains("train/step")) {
        const auto step = static_cast<int64_t>(line["train/step"].get<double>());
        record.steps[step] = line;
        ++record.step_lines[step];
      } else if (line.contains("perf/step_time")) {
        record.rollouts[line["step"].get<int64_t>()] = line;
        ++record.rollout_lines[line["step"].get<int64_t>()];
      }
    }
  }
  if (fs::is_directory(dir + "/rollouts")) {
    for (const auto& entry : fs::directory_iterator(dir + "/rollouts")) {
      const std::string name = entry.path().stem().string();  // rollout_<id>
      std::string samples, prompts;
      for (const json& sample : read_json_lines(entry.path().string())) {
        samples += sample["prompt"].dump() + sample["tokens"].dump() + sample["reward"].dump();
        prompts += sample["prompt"].dump();
      }
      const int64_t rollout = std::stoll(name.substr(name.find('_') + 1));
      record.samples[rollout] = samples;
      record.prompts[rollout] = prompts;
    }
  }
  record.scalars = read_tensorboard(dir + "/out/tensorboard");
  record.checkpoint = last_checkpoint(dir + "/save");
  record.critic_checkpoint = last_checkpoint(dir + "/save/critic");
  return record;
}

std::vector<KillJob> standard_kill_jobs() {
  const std::vector<std::string> workers = {"TrainActor_rank_0", "TrainActor_rank_1",
                                            "RolloutEngine"};
  std::vector<std::string> with_critic = workers;
  with_critic.push_back("CriticActor_rank_0");
  return {
      {"grpo", {}, workers},
      {"grpo-colocate", {"--colocate"}, workers},
      {"grpo-async", {"--async"}, workers, /*exact=*/false},
      {"ppo",
       {"--advantage-estimator", "ppo", "--num-critic-only-steps", "1", "--critic-lr", "1e-3"},
       with_critic},
  };
}

RandomKills::RandomKills(int rollouts) : rollouts_(rollouts) {}

std::vector<std::string> RandomKills::command(const KillJob& job, const std::string& dir) const {
  // One command starts the run and resumes it: --load names the save directory, which holds no
  // checkpoint on the first start.
  std::vector<std::string> flags = {"--num-rollout",
                                    std::to_string(rollouts_),
                                    "--rollout-shuffle",
                                    "--sampling-seed",
                                    "7",
                                    "--max-restarts",
                                    "3",
                                    "--load",
                                    dir + "/save",
                                    "--save-debug-rollout-data",
                                    dir + "/rollouts/rollout_{rollout_id}.jsonl"};
  flags.insert(flags.end(), job.flags.begin(), job.flags.end());
  return checkpointing_train_command(dir, flags);
}

const RunRecord& RandomKills::baseline(const KillJob& job) {
  auto found = baselines_.find(job.name);
  if (found != baselines_.end()) return found->second;
  const std::string dir = make_temp_dir("random-kill-baseline-" + job.name);
  const auto start = Clock::now();
  Process run(command(job, dir), kOneThread, dir + "/log.txt");
  const ExitStatus status = run.wait(kRunTimeout);
  RunRecord record = read_run(dir);
  record.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  record.log = run.output();
  if (!status.exited || status.code != 0) {
    record.checkpoint.clear();  // compare() then reports it
    record.log = "the uninterrupted run failed (" + status.describe() + "):\n" + record.log;
  }
  return baselines_.emplace(job.name, std::move(record)).first->second;
}

// Runs the job's command until it exits 0 (at most kMaxResumes times), as a user would after
// a crash; counts the runs in trial->resumes.
RunRecord RandomKills::finish(const KillJob& job, const std::string& dir, KillTrial* trial) const {
  for (;;) {
    ++trial->resumes;
    Process run(command(job, dir), kOneThread, dir + "/log.txt");
    const ExitStatus status = run.wait(kRunTimeout);
    if ((status.exited && status.code == 0) || trial->resumes == kMaxResumes) {
      RunRecord record = read_run(dir);
      record.log = run.output();
      return record;
    }
  }
}

KillTrial RandomKills::trial(const KillJob& job, std::mt19937& rng) {
  const RunRecord& expected = baseline(job);
  KillTrial trial;
  trial.job = job.name;
  const auto start = Clock::now();
  const std::string dir = make_temp_dir("random-kill-" + job.name);

  std::vector<std::string> victims = {"driver"};
  victims.insert(victims.end(), job.victims.begin(), job.victims.end());
  const std::string victim =
      victims[std::uniform_int_distribution<size_t>(0, victims.size() - 1)(rng)];
  // Starting the job's processes takes most of a tiny job's time. So one kill in five comes at
  // a moment drawn over the whole run, and the others within a rollout: once rollout r's line
  // is out, a random part of a rollout's time later (generating, training, syncing or saving).
  const bool anywhere = std::uniform_int_distribution<int>(0, 4)(rng) == 0;
  const double at = std::uniform_real_distribution<double>(0.05, 0.95)(rng) * expected.seconds;
  const int after_rollout = std::uniform_int_distribution<int>(1, rollouts_ - 1)(rng);
  double step_seconds = 0;
  for (const auto& [id, line] : expected.rollouts) {
    step_seconds += line.value("perf/step_time", 0.0) / expected.rollouts.size();
  }
  const double within = std::uniform_real_distribution<double>(0, step_seconds)(rng);
  const std::string mark = "[rollout " + std::to_string(after_rollout) + "/";

  bool finished_cleanly = false;
  {
    Process driver(command(job, dir), kOneThread, dir + "/log.txt");
    auto seconds = [](double value) {
      return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(value));
    };
    std::optional<Clock::time_point> kill_time;
    if (anywhere) kill_time = start + seconds(at);
    while (running(driver.pid()) && (!kill_time || Clock::now() < *kill_time)) {
      if (!kill_time && driver.output().find(mark) != std::string::npos) {
        kill_time = Clock::now() + seconds(within);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    std::string session;
    pid_t target = -1;
    // A worker may be between two lives (a restart): look for a second.
    for (const auto deadline = Clock::now() + std::chrono::seconds(1);
         target < 0 && running(driver.pid()) && Clock::now() < deadline;) {
      session = session_of(driver.pid());
      if (victim == "driver") {
        target = driver.pid();
      } else if (!session.empty()) {
        for (const Worker& worker : workers_of(session)) {
          if (worker.label == victim && running(worker.pid)) target = worker.pid;
        }
      }
      if (target < 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (target > 0 && ::kill(target, SIGKILL) == 0) {
      trial.victim = victim;
      trial.at_seconds = std::chrono::duration<double>(Clock::now() - start).count();
      trial.phase = last_line(driver.output());
    }
    const ExitStatus status = driver.wait(kRunTimeout);
    finished_cleanly = status.exited && status.code == 0;
    // A killed driver's workers go by themselves; they must be gone before the run resumes,
    // or one of them could still write into its directory.
    if (!session.empty()) {
      wait_until([&] { return processes_of_session(session).empty(); }, std::chrono::seconds(30));
    }
  }
  RunRecord record = finished_cleanly ? read_run(dir) : finish(job, dir, &trial);
  trial.mismatch = compare(job, record, expected, rollouts_);
  if (!trial.mismatch.empty()) trial.mismatch += " (runs in " + dir + ")";
  trial.matched = trial.mismatch.empty();
  trial.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (trial.matched) fs::remove_all(dir);
  return trial;
}

KillTrial RandomKills::uninterrupted(const KillJob& job) {
  const RunRecord& expected = baseline(job);
  KillTrial trial;
  trial.job = job.name;
  const auto start = Clock::now();
  const std::string dir = make_temp_dir("random-kill-control-" + job.name);
  // Without a kill every job repeats itself exactly, --async ones included.
  KillJob exact = job;
  exact.exact = true;
  trial.mismatch = compare(exact, finish(job, dir, &trial), expected, rollouts_);
  trial.resumes = 0;  // the one run was the start, not a resume
  trial.matched = trial.mismatch.empty();
  trial.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (trial.matched) fs::remove_all(dir);
  return trial;
}

std::string RandomKills::compare(const KillJob& job, const RunRecord& run,
                                 const RunRecord& expected, int rollouts) {
  if (expected.checkpoint.empty()) return expected.log;
  for (int64_t rollout = 0; rollout < rollouts; ++rollout) {
    const auto lines = run.rollout_lines.find(rollout);
    const int count = lines == run.rollout_lines.end() ? 0 : lines->second;
    const std::string what = "rollout " + std::to_string(rollout);
    if (count != 1) return what + " has " + std::to_string(count) + " lines in metrics.jsonl";
    const json& line = run.rollouts.at(rollout);
    if (!job.exact) {
      const auto prompts = run.prompts.find(rollout);
      if (prompts == run.prompts.end() || prompts->second != expected.prompts.at(rollout)) {
        return what + " drew other prompts";
      }
      if (line.value("rollout/max_staleness", 0.0) > static_cast<double>(job.max_staleness)) {
        return what + " has staleness " + line["rollout/max_staleness"].dump() +
               ", over the bound " + std::to_string(job.max_staleness);
      }
      continue;
    }
    if (auto problem = compare_metrics(line, expected.rollouts.at(rollout), what);
        !problem.empty()) {
      return problem;
    }
    const auto samples = run.samples.find(rollout);
    if (samples == run.samples.end() || samples->second != expected.samples.at(rollout)) {
      return what + " drew other prompts or sampled other tokens";
    }
  }
  if (run.step_lines.size() != expected.step_lines.size()) {
    return std::to_string(run.step_lines.size()) +
           " optimizer steps in metrics.jsonl, uninterrupted " +
           std::to_string(expected.step_lines.size());
  }
  for (const auto& [step, line] : expected.steps) {
    if (run.step_lines.count(step) == 0 || run.step_lines.at(step) != 1) {
      return "step " + std::to_string(step) + " is not recorded once";
    }
    if (!job.exact) continue;
    if (auto problem = compare_metrics(run.steps.at(step), line, "step " + std::to_string(step));
        !problem.empty()) {
      return problem;
    }
  }
  if (auto problem = compare_tensorboard(run, expected, job.exact); !problem.empty()) {
    return problem;
  }
  if (!job.exact) return run.checkpoint.empty() ? "no checkpoint" : "";
  if (auto problem = compare_checkpoints(run.checkpoint, expected.checkpoint); !problem.empty()) {
    return problem;
  }
  if (expected.critic_checkpoint.empty()) return "";
  return compare_checkpoints(run.critic_checkpoint, expected.critic_checkpoint);
}

}  // namespace ooze::testing
