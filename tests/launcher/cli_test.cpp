// The `ooze` command line as a user coming from Slime meets it, on the real binary: every
// command's flags listed by `--help` and `config-help` alike, a misspelt command answered with
// the nearest one, the config printed at the start of `ooze train`, and Slime's and SGLang's
// flags either taken with their meaning or refused with what to use instead.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "launcher/commands.h"
#include "launcher/train_plan.h"
#include "tests/launcher/tiny_train_command.h"
#include "tests/support/expect_error.h"
#include "tests/support/process.h"

namespace ooze::launcher {
namespace cli_test {

using namespace std::chrono_literals;

struct OozeRun {
  testing::ExitStatus status;
  std::string output;  // stdout and stderr together
};

OozeRun run_ooze(const std::vector<std::string>& args, const std::string& dir) {
  static int runs = 0;
  std::vector<std::string> argv = {testing::ooze_binary()};
  argv.insert(argv.end(), args.begin(), args.end());
  testing::Process process(argv, {{"OMP_NUM_THREADS", "1"}},
                           dir + "/run" + std::to_string(runs++) + ".txt");
  OozeRun run;
  run.status = process.wait(60s);
  run.output = process.output();
  return run;
}

class CliTest : public ::testing::Test {
 protected:
  std::string dir_ = testing::make_temp_dir("cli");
};

TEST_F(CliTest, EveryCommandListsItsFlagsInHelpAndConfigHelpAlike) {
  for (const Command& command : commands()) {
    SCOPED_TRACE(command.name);
    std::vector<std::string> help_args, config_help_args = {"config-help"};
    if (command.name.rfind("model ", 0) == 0) {  // model init, model gguf
      const std::string subcommand = command.name.substr(6);
      help_args = {"model", subcommand, "--help"};
      config_help_args.insert(config_help_args.end(), {"model", subcommand});
    } else {
      help_args = {command.name, "--help"};
      config_help_args.push_back(command.name);
    }
    const OozeRun help = run_ooze(help_args, dir_);
    const OozeRun config_help = run_ooze(config_help_args, dir_);
    ASSERT_TRUE(help.status.exited && help.status.code == 0) << help.output;
    ASSERT_TRUE(config_help.status.exited && config_help.status.code == 0) << config_help.output;
    EXPECT_EQ(help.output, config_help.output);
    const ConfigSchema& schema = command.schema();
    // "  --lr <float>", "  --[no-]colocate" at the start of a line.
    auto listed = [&](const FieldSpec& spec) {
      return spec.type == FieldType::kBool ? "\n  --[no-]" + spec.flag().substr(2)
                                           : "\n  " + spec.flag() + " ";
    };
    for (const FieldSpec& spec : schema.fields()) EXPECT_CONTAINS(help.output, listed(spec));
    for (const FieldAlias& alias : schema.aliases()) {
      EXPECT_CONTAINS(help.output, listed(alias.spec));
    }
    // The example of how flags and keys are spelled is one of the command's own flags.
    const size_t example = help.output.find("JSON key with underscores (--");
    if (!schema.fields().empty()) {
      ASSERT_NE(example, std::string::npos) << help.output;
      const size_t start = help.output.find("--", example);
      const std::string flag =
          help.output.substr(start + 2, help.output.find(' ', start) - start - 2);
      EXPECT_NE(schema.find(flag), nullptr) << flag << " is not a flag of " << command.name;
    }
  }
  // The whole reference lists every command.
  const OozeRun all = run_ooze({"config-help"}, dir_);
  ASSERT_TRUE(all.status.exited && all.status.code == 0) << all.output;
  for (const Command& command : commands()) EXPECT_CONTAINS(all.output, "ooze " + command.name);
}

TEST_F(CliTest, AMisspeltCommandGetsTheNearestOne) {
  const OozeRun train = run_ooze({"trian", "--num-rollout", "1"}, dir_);
  EXPECT_TRUE(train.status.exited && train.status.code == 2) << train.status.describe();
  EXPECT_CONTAINS(train.output, "unknown command 'trian'; did you mean 'train'?");
  EXPECT_CONTAINS(run_ooze({"config-help", "rolout"}, dir_).output,
                  "no command 'rolout'; did you mean 'rollout'?");
  EXPECT_CONTAINS(run_ooze({"serv"}, dir_).output, "did you mean 'serve'?");
}

TEST_F(CliTest, TrainPrintsWhatDiffersFromTheDefaultsAndTakesSlimesFlags) {
  // Slime's spellings resolve to ooze's fields; the run then stops at the missing model.
  const std::string missing = dir_ + "/no-such-model";
  const OozeRun run =
      run_ooze({"train", "--hf-checkpoint", missing, "--seed", "7", "--calculate-per-token-loss",
                "--optimizer", "adam", "--attention-dropout", "0.0", "--use-distributed-optimizer",
                "--sglang-max-running-requests", "16", "--num-steps-per-rollout", "2",
                "--output-dir", dir_ + "/out"},
               dir_);
  EXPECT_TRUE(run.status.exited && run.status.code == 1) << run.status.describe();
  EXPECT_CONTAINS(run.output, "ooze train: config (what differs from the defaults; all of it in " +
                                  dir_ + "/out/config.json):");
  // Grouped by the section that reads each field, one line each, with where it came from.
  EXPECT_CONTAINS(run.output, "model:\n  hf_checkpoint = \"" + missing + "\"  (--hf-checkpoint)");
  EXPECT_CONTAINS(run.output, "  sampling_seed = 7  (--seed; default -1)");
  EXPECT_CONTAINS(run.output,
                  "  loss_aggregation = \"token-mean\"  (--calculate-per-token-loss; default "
                  "\"seq-mean-token-mean\")");
  EXPECT_CONTAINS(run.output,
                  "  engine_max_running_requests = 16  (--sglang-max-running-requests; default");
  EXPECT_CONTAINS(run.output, "  num_steps_per_rollout = 2  (--num-steps-per-rollout; default 0)");
  EXPECT_EQ(run.output.find("  lr = "), std::string::npos) << "a default was printed";
  EXPECT_CONTAINS(run.output, missing);  // then the model check refused it
  EXPECT_EQ(run.output.find("unknown flag"), std::string::npos) << run.output;
}

TEST_F(CliTest, SlimesFlagsOozeDoesNotTakeSayWhatToUseInstead) {
  const OozeRun run =
      run_ooze({"train", "--hf-checkpoint", dir_, "--use-wandb", "--wandb-project", "p",
                "--tensor-model-parallel-size", "2", "--sglang-mem-fraction-static", "0.7",
                "--sglang-server-concurrency", "64", "--sglang-enable-ep-moe", "--optimizer", "sgd",
                "--hidden-dropout", "0.1", "--num-layers", "36"},
               dir_);
  EXPECT_TRUE(run.status.exited && run.status.code == 1) << run.status.describe();
  // Every one at once, each naming what ooze does instead.
  EXPECT_CONTAINS(run.output, "'--use-wandb': ooze does not log to Weights & Biases");
  EXPECT_CONTAINS(run.output, "'--wandb-project': ooze does not log to Weights & Biases");
  EXPECT_CONTAINS(run.output, "OUTPUT_DIR/tensorboard");
  EXPECT_CONTAINS(run.output, "'--tensor-model-parallel-size': ooze trains with FSDP");
  EXPECT_CONTAINS(run.output, "--actor-num-gpus-per-node");
  EXPECT_CONTAINS(run.output,
                  "'--sglang-mem-fraction-static': the engines of `ooze train` keep a KV cache of "
                  "--engine-kv-cache-memory-mb");
  EXPECT_CONTAINS(run.output, "--engine-kv-cache-memory-mb");
  EXPECT_CONTAINS(run.output,
                  "'--sglang-server-concurrency': ooze bounds the requests in flight "
                  "over all engines with --rollout-concurrency");
  EXPECT_CONTAINS(run.output, "'--sglang-enable-ep-moe': ooze's rollout engines are its own");
  EXPECT_CONTAINS(run.output, "--optimizer: ooze's optimizer is AdamW");
  EXPECT_CONTAINS(run.output, "one of adam, adamw");
  EXPECT_CONTAINS(run.output, "--hidden-dropout: ooze's models have no dropout");
  EXPECT_CONTAINS(run.output, "'--num-layers': ooze reads the model's architecture");
  EXPECT_CONTAINS(run.output, "invalid configuration (9 problems)");
}

TEST_F(CliTest, SlimesSpellingContradictingOozesIsRefused) {
  const OozeRun seeds =
      run_ooze({"train", "--hf-checkpoint", dir_, "--seed", "7", "--sampling-seed", "3"}, dir_);
  EXPECT_TRUE(seeds.status.exited && seeds.status.code == 1) << seeds.status.describe();
  EXPECT_CONTAINS(seeds.output,
                  "--seed means --sampling-seed 7, but --sampling-seed sets it to 3: keep one");

  // --num-steps-per-rollout 4 splits the tiny run's 8 samples into batches of 2, not 4.
  const std::vector<std::string> command =
      testing::tiny_train_command(dir_, {"--num-steps-per-rollout", "4"});
  const OozeRun batch =
      run_ooze(std::vector<std::string>(command.begin() + 1, command.end()), dir_);
  EXPECT_TRUE(batch.status.exited && batch.status.code == 1) << batch.status.describe();
  EXPECT_CONTAINS(batch.output,
                  "--num-steps-per-rollout 4 means --global-batch-size 2 (a rollout's 8 samples "
                  "(--rollout-batch-size * --n-samples-per-prompt) in 4 steps), but "
                  "--global-batch-size is 4: keep one");
}

TEST(TrainPlanSlimeTest, NumStepsPerRolloutSetsTheGlobalBatch) {
  const Config config = load_config(
      train_schema(), "",
      {"--hf-checkpoint", "m", "--rollout-batch-size", "4", "--n-samples-per-prompt", "8",
       "--num-steps-per-rollout", "4", "--num-rollout", "1", "--actor-num-gpus-per-node", "2"});
  const TrainPlan plan = TrainPlan::resolve(config, 16);
  EXPECT_EQ(plan.global_batch_size, 8);
  EXPECT_EQ(plan.steps_per_rollout, 4);
  const Config uneven =
      load_config(train_schema(), "",
                  {"--hf-checkpoint", "m", "--rollout-batch-size", "4", "--n-samples-per-prompt",
                   "8", "--num-steps-per-rollout", "3", "--num-rollout", "1"});
  EXPECT_CONTAINS(testing::error_message_of([&] { TrainPlan::resolve(uneven, 16); }),
                  "--num-steps-per-rollout 3 does not divide a rollout's 32 samples");
}

TEST_F(CliTest, ServeTakesSGLangsModelPath) {
  const std::string missing = dir_ + "/no-such-model";
  const OozeRun run = run_ooze({"serve", "--model-path", missing, "--port", "0"}, dir_);
  EXPECT_TRUE(run.status.exited && run.status.code == 1) << run.status.describe();
  EXPECT_EQ(run.output.find("unknown flag"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("missing required field 'model'"), std::string::npos) << run.output;
  EXPECT_CONTAINS(run.output, missing);  // the engine tried to load it
  // SGLang's --mem-fraction-static is ooze serve's own flag.
  const OozeRun fraction =
      run_ooze({"serve", "--model", missing, "--mem-fraction-static", "0.8"}, dir_);
  EXPECT_EQ(fraction.output.find("--mem-fraction-static"), std::string::npos) << fraction.output;
  EXPECT_CONTAINS(fraction.output, missing);
}

}  // namespace cli_test
}  // namespace ooze::launcher
