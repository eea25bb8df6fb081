// `ooze train --context-parallel-size 2` as a user runs it: two trainer ranks forming one
// context-parallel group (each holds half of every micro-batch's tokens) take the same steps as
// two data-parallel ranks, from the same rollouts: the same rewards, the gradient norm and the
// policy's entropy of every step within 1e-6 relative, the reference model's KL term alike, and
// Slime's invariants (ppo_kl 0 on the first step after a sync, exactly when the log-prob pass and
// the step pack the same micro-batches; the trainer's log-probs within 1e-5 of the engines'),
// with ring attention and with the all-gather form under a per-rank token budget. (A CP size
// that does not divide the trainer's ranks is among train_command_test's start-up checks.)
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/launcher/tiny_train_command.h"
#include "tests/support/process.h"

namespace ooze::launcher {
namespace train_context_parallel_test {

using namespace std::chrono_literals;
using nlohmann::json;
using ::ooze::testing::ooze_binary;

struct TrainRun {
  std::vector<json> rollouts;  // one line per rollout
  std::vector<json> steps;     // one line per optimizer step
  json config;
  bool ok = false;
  std::string output;
};

// The tiny `ooze train` with a KL loss (so the reference model scores too) at Slime's learning
// rate, where rounding differences of the two layouts stay at rounding level.
TrainRun train(const std::string& name, const std::vector<std::string>& flags) {
  const std::string dir = ::ooze::testing::make_temp_dir("train-cp-" + name);
  std::vector<std::string> all = {"--lr",
                                  "1e-6",
                                  "--use-kl-loss",
                                  "--kl-loss-coef",
                                  "0.1",
                                  "--rollout-seed",
                                  "3",
                                  "--sampling-seed",
                                  "3",
                                  "--actor-num-gpus-per-node",
                                  "2"};
  all.insert(all.end(), flags.begin(), flags.end());
  ::ooze::testing::Process process(::ooze::testing::tiny_train_command(dir, all),
                                   {{"OMP_NUM_THREADS", "1"}}, dir + "/log.txt");
  const ::ooze::testing::ExitStatus status = process.wait(240s);
  TrainRun run;
  run.ok = status.exited && status.code == 0;
  run.output = status.describe() + "\n" + process.output();
  for (const json& line : ::ooze::testing::read_json_lines(dir + "/out/metrics.jsonl")) {
    (line.contains("train/step") ? run.steps : run.rollouts).push_back(line);
  }
  std::ifstream config(dir + "/out/config.json");
  if (config) run.config = json::parse(config);
  return run;
}

void expect_relative(const json& got, const json& want, const std::string& key, double tolerance,
                     size_t step) {
  ASSERT_TRUE(got.contains(key) && want.contains(key)) << key << " missing at step " << step;
  const double a = got[key].get<double>(), b = want[key].get<double>();
  EXPECT_LE(std::abs(a - b), tolerance * std::abs(b))
      << key << " of step " << step << ": " << a << " vs " << b;
}

TEST(TrainContextParallelTest, TwoRanksOfOneCpGroupTrainAsTwoDataParallelRanks) {
  if (!std::filesystem::exists(ooze_binary())) GTEST_SKIP() << ooze_binary() << " not built";
  const TrainRun plain = train("dp", {});
  ASSERT_TRUE(plain.ok) << plain.output;
  // ring with the default micro-batches (one sample each); allgather with micro-batches filled to
  // 12 tokens per CP rank.
  for (const bool dynamic : {false, true}) {
    const std::string impl = dynamic ? "allgather" : "ring";
    SCOPED_TRACE(impl);
    std::vector<std::string> flags = {"--context-parallel-size", "2", "--cp-impl", impl};
    if (dynamic) {
      flags.insert(flags.end(), {"--use-dynamic-batch-size", "--max-tokens-per-gpu", "12"});
    }
    const TrainRun cp = train("cp-" + impl, flags);
    ASSERT_TRUE(cp.ok) << cp.output;
    EXPECT_EQ(cp.config["context_parallel_size"], 2) << cp.config.dump();
    EXPECT_EQ(cp.config["cp_impl"], impl);
    ASSERT_EQ(cp.rollouts.size(), 3u);
    ASSERT_EQ(cp.steps.size(), plain.steps.size());
    ASSERT_EQ(cp.steps.size(), 6u);
    for (size_t k = 0; k < cp.rollouts.size(); ++k) {
      EXPECT_EQ(cp.rollouts[k]["rollout/raw_reward"], plain.rollouts[k]["rollout/raw_reward"]) << k;
      EXPECT_LT(cp.rollouts[k]["train/train_rollout_logprob_abs_diff"].get<double>(), 1e-5) << k;
      // The old log-probs come from the same weights: exactly the policy's when both passes
      // pack the same micro-batches (one sample each), to rounding when the log-prob pass packs
      // the whole rollout's samples together and a step only its own.
      const double ppo_kl = cp.steps[2 * k]["train/ppo_kl"].get<double>();
      if (dynamic) {
        EXPECT_LE(std::abs(ppo_kl), 1e-6) << cp.steps[2 * k].dump();
      } else {
        EXPECT_EQ(ppo_kl, 0.0) << cp.steps[2 * k].dump();
      }
    }
    for (size_t s = 0; s < cp.steps.size(); ++s) {
      expect_relative(cp.steps[s], plain.steps[s], "train/grad_norm", 1e-6, s);
      expect_relative(cp.steps[s], plain.steps[s], "train/entropy_loss", 1e-6, s);
      // The KL term is of order 1e-5 at this learning rate: within 1e-6 of the policy's scale.
      EXPECT_NEAR(cp.steps[s]["train/kl_loss"].get<double>(),
                  plain.steps[s]["train/kl_loss"].get<double>(), 1e-6)
          << s;
    }
  }
}

}  // namespace train_context_parallel_test
}  // namespace ooze::launcher
