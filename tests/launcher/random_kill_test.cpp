// `ooze train` killed at random moments ends where the uninterrupted run ends
// (tests/support/random_kills.h): one trial of each job the harness knows (GRPO disaggregated,
// colocated and --async, PPO with its critic), each killing a random process of the job at a
// random moment. bench/random_kill_bench.cpp runs fifty.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "tests/support/process.h"
#include "tests/support/random_kills.h"

namespace ooze::launcher {
namespace random_kill_test {

using ::ooze::testing::KillJob;
using ::ooze::testing::KillTrial;
using ::ooze::testing::RandomKills;

TEST(RandomKillTest, EachJobKilledAtRandomEndsWhereItsUninterruptedRunEnds) {
  if (!std::filesystem::exists(::ooze::testing::ooze_binary())) {
    GTEST_SKIP() << ::ooze::testing::ooze_binary() << " not built";
  }
  RandomKills harness(/*rollouts=*/8);
  // A seed of its own per run of the test: each run kills other processes at other moments,
  // and says which, so a failure can be told apart and rerun.
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  int kills = 0;
  for (const KillJob& job : ::ooze::testing::standard_kill_jobs()) {
    const auto& baseline = harness.baseline(job);
    ASSERT_FALSE(baseline.checkpoint.empty()) << job.name << ": " << baseline.log;
    const KillTrial trial = harness.trial(job, rng);
    std::printf("%s: killed %s at %.2f s (%s), %d resumes, %s\n", job.name.c_str(),
                trial.victim.empty() ? "nothing" : trial.victim.c_str(), trial.at_seconds,
                trial.phase.c_str(), trial.resumes, trial.matched ? "same end" : "differs");
    EXPECT_TRUE(trial.matched) << job.name << " (seed " << seed << "), " << trial.victim
                               << " killed at " << trial.at_seconds << " s: " << trial.mismatch;
    kills += !trial.victim.empty();
  }
  EXPECT_GE(kills, 2) << "most trials should kill something (seed " << seed << ")";
}

}  // namespace random_kill_test
}  // namespace ooze::launcher
