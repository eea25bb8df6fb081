// Fifty random kills of `ooze train` (tests/support/random_kills.h), spread over the four jobs
// the harness knows (GRPO disaggregated, colocated and --async, PPO with its critic): each kills
// the driver, a trainer rank, the engine or the critic at a random moment, finishes the run as
// a user would (the same command again, which resumes from its last checkpoint), and compares it
// with the uninterrupted run: metrics lines once each with equal values, equal prompts and
// tokens, the last checkpoint bit for bit. First, per job, a second uninterrupted run (the
// control). A line per trial on stderr; on stdout:
//
//   random_kills.matched   kills whose run ended equal / kills made (ratio 1.0: all)
//   random_kills.controls  uninterrupted reruns equal / jobs
//
//   bench_random_kill_bench [--kills 50] [--rollouts 8] [--seed S]
#include <cstdio>
#include <map>
#include <random>
#include <string>

#include "bench/bench_support.h"
#include "core/load_time_settings.h"
#include "tests/support/random_kills.h"

int main(int argc, char** argv) {
  ooze::start_with_load_time_settings(argv);  // first: it may start this program again
  int kills = 50, rollouts = 8;
  unsigned seed = std::random_device{}();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--kills") {
      kills = std::stoi(argv[i + 1]);
    } else if (flag == "--rollouts") {
      rollouts = std::stoi(argv[i + 1]);
    } else if (flag == "--seed") {
      seed = static_cast<unsigned>(std::stoul(argv[i + 1]));
    } else {
      std::fprintf(stderr, "bench_random_kill_bench: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  std::fprintf(stderr, "random kills: seed %u\n", seed);
  std::mt19937 rng(seed);
  ooze::testing::RandomKills harness(rollouts);
  const auto jobs = ooze::testing::standard_kill_jobs();

  int controls = 0;
  for (const auto& job : jobs) {
    const ooze::testing::KillTrial control = harness.uninterrupted(job);
    controls += control.matched;
    std::fprintf(stderr, "control %s: %s\n", job.name.c_str(),
                 control.matched ? "same end" : control.mismatch.c_str());
  }

  int made = 0, matched = 0;
  std::map<std::string, int> by_victim;
  for (int i = 0; made < kills && i < 4 * kills; ++i) {
    const auto& job = jobs[static_cast<size_t>(i) % jobs.size()];
    const ooze::testing::KillTrial trial = harness.trial(job, rng);
    if (trial.victim.empty()) continue;  // the run ended before the moment came
    ++made;
    matched += trial.matched;
    ++by_victim[trial.victim];
    std::fprintf(stderr, "%2d %-13s killed %-18s at %5.2f s, %d resumes, %5.1f s: %s   [%s]\n",
                 made, job.name.c_str(), trial.victim.c_str(), trial.at_seconds, trial.resumes,
                 trial.seconds, trial.matched ? "same end" : trial.mismatch.c_str(),
                 trial.phase.c_str());
  }
  for (const auto& [victim, count] : by_victim) {
    std::fprintf(stderr, "killed %s: %d\n", victim.c_str(), count);
  }
  ooze::bench::print_line("random_kills.matched", "kills", matched, "kills", made,
                          made > 0 ? matched / static_cast<double>(made) : 0.0);
  ooze::bench::print_line("random_kills.controls", "runs", controls, "runs",
                          static_cast<double>(jobs.size()),
                          controls / static_cast<double>(jobs.size()));
  return 0;
}
