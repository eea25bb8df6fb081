// On-policy distillation with the teacher in engines of its own (--use-opd --opd-type engine), as
// a user runs it: the real `ooze train`, the teacher engines it launches from
// --opd-teacher-hf-checkpoint in bundles of their own, each sample scored by them as it finishes
// generating (with --async: on the generation thread), and the teacher_log_probs the samples
// carry to --save-debug-rollout-data compared with the teacher model's own forward in fp64.
// Colocated, the teacher engines still take bundles of their own.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/model_init.h"
#include "tests/launcher/tiny_train_command.h"
#include "tests/support/process.h"
#include "tests/support/reference_log_probs.h"
#include "tests/support/tiny_model.h"

namespace ooze::launcher {
namespace train_opd_engine_test {

using ::ooze::testing::ooze_binary;
using namespace std::chrono_literals;
using nlohmann::json;

// A teacher smaller than the student (the tests' tiny model) and with other weights, on the same
// byte tokenizer; `vocab_size` 0 keeps the student's vocabulary.
std::string make_teacher(const std::string& dir, int64_t vocab_size = 0) {
  models::ModelInitOptions options;
  options.arch = "qwen3";
  options.hidden_size = 32;
  options.num_layers = 1;
  options.num_heads = 2;
  options.num_kv_heads = 1;
  options.tokenizer = "byte";
  options.vocab_size = vocab_size;
  options.seed = 11;
  options.out_dir = dir;
  models::init_hf_model(options);
  return dir;
}

TEST(TrainOpdEngineTest, LaunchedTeacherEnginesScoreEverySampleDuringTheRollout) {
  if (!std::filesystem::exists(ooze_binary())) GTEST_SKIP() << ooze_binary() << " not built";
  const std::string dir = ::ooze::testing::make_temp_dir("train-opd-engine");
  const std::string teacher = make_teacher(dir + "/teacher");
  const std::string samples = dir + "/samples/rollout_{rollout_id}.jsonl";
  const std::vector<std::string> command = ::ooze::testing::tiny_train_command(
      dir, {"--use-opd", "--opd-type", "engine", "--opd-teacher-hf-checkpoint", teacher,
            "--opd-teacher-num-engines", "2", "--async", "--num-rollout", "2",
            "--save-debug-rollout-data", samples});
  ::ooze::testing::Process run(command, {{"OMP_NUM_THREADS", "1"}}, dir + "/log.txt");
  const ::ooze::testing::ExitStatus status = run.wait(180s);
  ASSERT_TRUE(status.exited && status.code == 0) << status.describe() << "\n" << run.output();
  // Placed and logged as the rollout engines are: a bundle each after the rollout engine's.
  EXPECT_NE(run.output().find("teacher engine 0, teacher engine 1"), std::string::npos)
      << run.output();
  EXPECT_NE(run.output().find("teacher engines (" + teacher + ") serving at http://"),
            std::string::npos)
      << run.output();

  std::vector<json> rollouts;
  for (const json& line : ::ooze::testing::read_json_lines(dir + "/out/metrics.jsonl")) {
    if (!line.contains("train/step")) rollouts.push_back(line);
  }
  ASSERT_EQ(rollouts.size(), 2u);
  for (int k = 0; k < 2; ++k) {
    const json& line = rollouts[k];
    ASSERT_TRUE(line.contains("perf/teacher_log_probs_time")) << line.dump();
    EXPECT_GT(line["perf/teacher_log_probs_time"].get<double>(), 0.0) << line.dump();
    EXPECT_LE(line["perf/teacher_log_probs_time"].get<double>(),
              line["perf/rollout_time"].get<double>())
        << "the teacher is waited on within the rollout";
    const std::vector<json> saved =
        ::ooze::testing::read_json_lines(dir + "/samples/rollout_" + std::to_string(k) + ".jsonl");
    ASSERT_EQ(saved.size(), 8u) << "rollout " << k;
    double gap = 0, tokens = 0;  // of log p_student - log p_teacher over the trained tokens
    for (const json& sample : saved) {
      const int64_t response = sample["response_length"].get<int64_t>();
      const std::vector<float> scored = sample["teacher_log_probs"].get<std::vector<float>>();
      const std::vector<float> student = sample["rollout_log_probs"].get<std::vector<float>>();
      const std::vector<int32_t> mask = sample["loss_mask"].get<std::vector<int32_t>>();
      ASSERT_EQ(static_cast<int64_t>(scored.size()), response) << sample.dump();
      const std::vector<double> expected = ::ooze::testing::reference_log_probs(
          teacher, sample["tokens"].get<std::vector<int64_t>>(), response);
      bool differs_from_student = false;
      for (int64_t t = 0; t < response; ++t) {
        EXPECT_NEAR(scored[t], expected[t], 1e-4)
            << "rollout " << k << ", sample " << sample["index"] << ", token " << t;
        differs_from_student |= std::abs(scored[t] - student[t]) > 1e-3;
        gap += (student[t] - scored[t]) * mask[t];
        tokens += mask[t];
      }
      EXPECT_TRUE(differs_from_student) << "the student's log-probs, not the teacher's";
    }
    // Rollout 0 trains the policy that sampled it: its old log-probs are the samples', so the
    // distillation term the trainer reports is the one of the samples' teacher log-probs.
    if (k == 0) {
      ASSERT_TRUE(line.contains("train/opd_kl")) << line.dump();
      EXPECT_NEAR(line["train/opd_kl"].get<double>(), gap / tokens, 1e-4);
    }
  }
}

// Colocated, the rollout engines share the trainer's bundles; the teacher's still has its own.
TEST(TrainOpdEngineTest, ColocatedTeacherEnginesTakeBundlesOfTheirOwn) {
  if (!std::filesystem::exists(ooze_binary())) GTEST_SKIP() << ooze_binary() << " not built";
  const std::string dir = ::ooze::testing::make_temp_dir("train-opd-engine-colocated");
  const std::string teacher = make_teacher(dir + "/teacher");
  ::ooze::testing::Process run(
      ::ooze::testing::tiny_train_command(
          dir, {"--use-opd", "--opd-type", "engine", "--opd-teacher-hf-checkpoint", teacher,
                "--colocate", "--actor-num-gpus-per-node", "2", "--rollout-num-gpus", "2",
                "--num-rollout", "1"}),
      {{"OMP_NUM_THREADS", "1"}}, dir + "/log.txt");
  const ::ooze::testing::ExitStatus status = run.wait(180s);
  ASSERT_TRUE(status.exited && status.code == 0) << status.describe() << "\n" << run.output();
  EXPECT_NE(run.output().find("rank 0 + engine 0, rank 1 + engine 1, teacher engine 0;"),
            std::string::npos)
      << run.output();
  const std::vector<json> lines = ::ooze::testing::read_json_lines(dir + "/out/metrics.jsonl");
  ASSERT_FALSE(lines.empty());
  EXPECT_TRUE(lines.back().contains("train/opd_kl")) << lines.back().dump();
}

// Where the teacher comes from is checked before any process starts; a teacher that cannot be
// reached stops the run naming its URL and the sample it was to score.
TEST(TrainOpdEngineTest, TeacherFlagsAreCheckedAndAnUnreachableTeacherIsNamed) {
  if (!std::filesystem::exists(ooze_binary())) GTEST_SKIP() << ooze_binary() << " not built";
  const std::string models = ::ooze::testing::make_temp_dir("train-opd-engine-models");
  const std::string teacher = make_teacher(models + "/teacher");
  const std::string other_vocabulary = make_teacher(models + "/other-vocabulary", 384);
  const std::vector<std::string> engine = {"--use-opd", "--opd-type", "engine"};
  auto with = [&](std::vector<std::string> flags) {
    flags.insert(flags.begin(), engine.begin(), engine.end());
    return flags;
  };
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {with({}),
       "--use-opd --opd-type engine needs exactly one of --opd-teacher-hf-checkpoint (ooze train "
       "launches the teacher's engines) and --opd-teacher-url (a teacher served elsewhere), got "
       "neither"},
      {with({"--opd-teacher-hf-checkpoint", teacher, "--opd-teacher-url", "http://127.0.0.1:1"}),
       "got both"},
      {with({"--opd-teacher-hf-checkpoint", other_vocabulary}),
       "--opd-teacher-hf-checkpoint " + other_vocabulary +
           " has a vocabulary of 384 tokens (config.json vocab_size), the student "
           "(--hf-checkpoint"},
      {with({"--opd-teacher-hf-checkpoint", models}), "has no config.json"},
      {with({"--opd-teacher-url", "http://127.0.0.1:1", "--opd-teacher-num-engines", "2"}),
       "--opd-teacher-num-engines has no effect without --use-opd --opd-type engine "
       "--opd-teacher-hf-checkpoint"},
  };
  for (const auto& [flags, expected] : refused) {
    const std::string dir = ::ooze::testing::make_temp_dir("train-opd-engine-refused");
    ::ooze::testing::Process run(::ooze::testing::tiny_train_command(dir, flags),
                                 {{"OMP_NUM_THREADS", "1"}}, dir + "/log.txt");
    const ::ooze::testing::ExitStatus status = run.wait(60s);
    EXPECT_TRUE(status.exited && status.code != 0) << status.describe();
    EXPECT_NE(run.output().find(expected), std::string::npos) << run.output();
    EXPECT_EQ(run.output().find("pid="), std::string::npos) << "a worker started";
  }

  const std::string dir = ::ooze::testing::make_temp_dir("train-opd-engine-unreachable");
  ::ooze::testing::Process run(
      ::ooze::testing::tiny_train_command(
          dir, with({"--opd-teacher-url", "http://127.0.0.1:1", "--num-rollout", "1"})),
      {{"OMP_NUM_THREADS", "1"}}, dir + "/log.txt");
  const ::ooze::testing::ExitStatus status = run.wait(120s);
  EXPECT_TRUE(status.exited && status.code != 0) << status.describe();
  EXPECT_NE(run.output().find("the distillation teacher at http://127.0.0.1:1 could not score "
                              "sample "),
            std::string::npos)
      << run.output();
  EXPECT_TRUE(::ooze::testing::read_json_lines(dir + "/out/metrics.jsonl").empty())
      << "a rollout trained without its teacher";
}

}  // namespace train_opd_engine_test
}  // namespace ooze::launcher
