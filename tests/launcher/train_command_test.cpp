// `ooze train` as a user runs it: the real binary, trainer ranks and engines in worker processes,
// weights synced after every rollout, and the metrics it writes. Slime's invariants are checked
// on them: the first step after every sync sees old log-probs equal to the policy's (ppo_kl
// exactly 0), the trainer's recomputation matches the engines' log-probs, every sample of rollout
// k was sampled by the weights of sync k, and before any update the reference is the policy.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "tests/launcher/tiny_train_command.h"
#include "tests/models/peft_reader.h"
#include "tests/models/python_reference.h"
#include "tests/support/process.h"
#include "tests/support/tiny_model.h"

namespace ooze::launcher {
namespace train_command_test {

using ::ooze::testing::ooze_binary;

using namespace std::chrono_literals;
using nlohmann::json;

struct TrainRun {
  std::vector<json> rollouts;  // one line per rollout
  std::vector<json> steps;     // one line per optimizer step
  json config;
  bool tensorboard_written = false;
  std::string dir;
  std::string output;
};

TrainRun train(const std::string& name, const std::vector<std::string>& flags) {
  const std::string dir = ::ooze::testing::make_temp_dir("train-command-" + name);
  const std::vector<std::string> command = ::ooze::testing::tiny_train_command(dir, flags);
  ::ooze::testing::Process run(command, {{"OMP_NUM_THREADS", "1"}}, dir + "/log.txt");
  const ::ooze::testing::ExitStatus status = run.wait(180s);
  EXPECT_TRUE(status.exited && status.code == 0) << status.describe() << "\n" << run.output();
  TrainRun result;
  result.dir = dir;
  result.output = run.output();
  for (const json& line : ::ooze::testing::read_json_lines(dir + "/out/metrics.jsonl")) {
    (line.contains("train/step") ? result.steps : result.rollouts).push_back(line);
  }
  const std::filesystem::path events = dir + "/out/tensorboard";
  if (std::filesystem::exists(events)) {
    for (const auto& entry : std::filesystem::directory_iterator(events)) {
      result.tensorboard_written |=
          entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0 &&
          entry.file_size() > 100;
    }
  }
  std::ifstream config(dir + "/out/config.json");
  if (config) result.config = json::parse(config);
  return result;
}

void expect_slime_invariants(const TrainRun& run) {
  ASSERT_EQ(run.rollouts.size(), 3u);
  ASSERT_EQ(run.steps.size(), 6u);  // 8 samples a rollout, 4 a step
  for (size_t k = 0; k < run.rollouts.size(); ++k) {
    const json& line = run.rollouts[k];
    EXPECT_EQ(line["step"], k);
    EXPECT_EQ(line["rollout/oldest_weight_version"], k) << "rollout " << k << " ran stale weights";
    EXPECT_LT(line["train/train_rollout_logprob_abs_diff"].get<double>(), 1e-5) << k;
    EXPECT_GT(line["perf/update_weights_bytes"].get<double>(), 0) << k;
    EXPECT_TRUE(line.contains("rollout/raw_reward")) << line.dump();
    const json& first_step = run.steps[2 * k];
    EXPECT_EQ(first_step["train/ppo_kl"].get<double>(), 0.0) << first_step.dump();
    EXPECT_EQ(first_step["train/pg_clipfrac"].get<double>(), 0.0) << first_step.dump();
    EXPECT_EQ(run.steps[2 * k + 1]["train/step"], 2 * k + 2);
  }
}

TEST(TrainCommandTest, TwoRanksAndTwoColocatedEnginesKeepSlimesInvariants) {
  if (!std::filesystem::exists(ooze_binary())) GTEST_SKIP() << ooze_binary() << " not built";
  const std::string exported = ::ooze::testing::make_temp_dir("train-command-export") + "/model";
  const TrainRun run =
      train("colocated", {"--actor-num-gpus-per-node", "2", "--rollout-num-gpus", "2", "--colocate",
                          "--offload", "on", "--save-hf", exported});
  expect_slime_invariants(run);
  for (const json& rollout : run.rollouts) {  // the trainer and the engines took turns
    EXPECT_TRUE(rollout.contains("perf/wake_up_time") && rollout.contains("perf/sleep_time"))
        << rollout.dump();
  }
  // A rank's shards: 16 bytes per parameter (fp32 weights, gradients and two AdamW moments, no
  // reference without a KL) over the 2 ranks, give or take each unit's padding element; the
  // process holds them and more.
  int64_t parameters = 0;
  const SafetensorsFile model =
      SafetensorsFile::open(::ooze::testing::tiny_model_dir() + "/model.safetensors");
  for (const std::string& name : model.names()) parameters += model.tensor(name).numel();
  for (const json& rollout : run.rollouts) {
    const double state = rollout["perf/trainer_state_gb"].get<double>() * 1e9;
    EXPECT_NEAR(state, 16.0 * static_cast<double>(parameters) / 2, 16.0 * 8) << rollout.dump();
    EXPECT_GT(rollout["perf/trainer_peak_rss_gb"].get<double>() * 1e9, state);
  }
  EXPECT_EQ(run.config["colocate"], true) << "the effective config was not saved";
  EXPECT_EQ(run.config["global_batch_size"], 4);
  EXPECT_TRUE(run.tensorboard_written) << "no TensorBoard event file in OUT/tensorboard";
  // The final policy as an HF directory another run starts from.
  ASSERT_TRUE(std::filesystem::exists(exported + "/config.json"));
  const TrainRun next = train("from-export", {"--hf-checkpoint", exported, "--num-rollout", "1"});
  EXPECT_EQ(next.rollouts.size(), 1u);
}

TEST(TrainCommandTest, DisaggregatedEnginesWithAKlLossStartFromTheReference) {
  if (!std::filesystem::exists(ooze_binary())) GTEST_SKIP() << ooze_binary() << " not built";
  const TrainRun run =
      train("disaggregated", {"--rollout-num-gpus", "2", "--use-kl-loss", "--kl-loss-coef", "0.1"});
  expect_slime_invariants(run);
  // Before the first update the reference is the policy: the KL term is exactly 0.
  ASSERT_FALSE(run.steps.empty());
  EXPECT_EQ(run.steps[0]["train/kl_loss"].get<double>(), 0.0) << run.steps[0].dump();
  EXPECT_NE(run.steps.back()["train/kl_loss"].get<double>(), 0.0) << "the policy never moved";
}

// OPSD with LoRA: the teacher is the base (the adapters off) reading the label after the prompt.
// The final adapter and the merged model made from it are judged by an independent reader.
TEST(TrainCommandTest, SelfDistillationWithLoraPullsTheStudentTowardsTheBaseShownTheLabel) {
  if (!std::filesystem::exists(ooze_binary())) GTEST_SKIP() << ooze_binary() << " not built";
  const std::string out = ::ooze::testing::make_temp_dir("train-command-lora-export");
  const TrainRun run =
      train("self-distillation",
            {"--use-opd", "--opd-type", "self", "--opsd-privileged-info-key", "label",
             "--opd-kl-coef", "0.5", "--lora-rank", "4", "--lora-alpha", "8", "--rollout-num-gpus",
             "1", "--save-hf", out + "/adapter", "--save-hf-merged", out + "/merged"});
  ASSERT_EQ(run.steps.size(), 6u) << run.output;
  for (const json& step : run.steps) {
    // The label changes the teacher's distributions: there is something to distil.
    EXPECT_GT(step["train/opd_jsd"].get<double>(), 1e-6) << step.dump();
    EXPECT_TRUE(std::isfinite(step["train/loss"].get<double>())) << step.dump();
  }
  for (const json& rollout : run.rollouts) {
    EXPECT_FALSE(rollout.contains("train/opd_kl")) << "self-distillation shaped the advantages";
  }
  // Every projection of the tiny model's layers, scaled by alpha / r = 2.
  const std::string script = out + "/peft_reader.py";
  std::ofstream(script) << ::ooze::testing::kPeftReader;
  const std::string printed = ::ooze::testing::run_python_reference(
      "'" + script + "' '" + out + "/adapter' '" + ::ooze::testing::tiny_model_dir() + "' '" + out +
          "/merged'",
      "");
  EXPECT_NE(printed.find(" modules 2.0\n"), std::string::npos) << printed;
  EXPECT_NE(printed.rfind("0 ", 0), 0u) << printed;
}

// Slime's debug modes: a run saves its rollouts; another trains on them without engines and takes
// the same steps; a third only generates.
TEST(TrainCommandTest, SavedRolloutsTrainAgainWithoutEnginesToTheSameSteps) {
  if (!std::filesystem::exists(ooze_binary())) GTEST_SKIP() << ooze_binary() << " not built";
  const std::string data = ::ooze::testing::make_temp_dir("train-command-data");
  const std::string pattern = data + "/rollout_{rollout_id}.jsonl";
  const TrainRun saved = train("saving", {"--save-debug-rollout-data", pattern});
  ASSERT_TRUE(std::filesystem::exists(data + "/rollout_2.jsonl"));

  const TrainRun replayed = train("replaying", {"--load-debug-rollout-data", pattern});
  ASSERT_EQ(replayed.steps.size(), saved.steps.size());
  for (size_t i = 0; i < saved.steps.size(); ++i) {
    for (const char* key : {"train/loss", "train/pg_loss", "train/ppo_kl", "train/grad_norm"}) {
      EXPECT_NEAR(replayed.steps[i][key].get<double>(), saved.steps[i][key].get<double>(), 1e-6)
          << key << " of step " << i;
    }
  }
  ASSERT_EQ(replayed.rollouts.size(), saved.rollouts.size());
  for (size_t k = 0; k < saved.rollouts.size(); ++k) {
    EXPECT_EQ(replayed.rollouts[k]["rollout/raw_reward"], saved.rollouts[k]["rollout/raw_reward"]);
    EXPECT_FALSE(replayed.rollouts[k].contains("perf/update_weights_time")) << "an engine ran";
  }

  const TrainRun generated = train("generating", {"--debug-rollout-only"});
  EXPECT_EQ(generated.rollouts.size(), 3u);
  EXPECT_TRUE(generated.steps.empty()) << "--debug-rollout-only trained";
}

// One field of every sample of a rollout, in order, from what --save-debug-rollout-data wrote.
std::vector<json> field_of(const std::string& path, const char* field) {
  std::vector<json> values;
  for (const json& sample : ::ooze::testing::read_json_lines(path)) values.push_back(sample[field]);
  return values;
}

// A run resumed from the checkpoint after its first rollout: the trainer continues (steps and
// learning-rate schedule), the engines first get the loaded weights, the prompts drawn are the
// ones the uninterrupted run drew, and with --sampling-seed so are the responses, so the
// resumed steps are the uninterrupted run's to fp32 rounding.
TEST(TrainCommandTest, AResumedRunContinuesWhereTheCheckpointLeftOff) {
  if (!std::filesystem::exists(ooze_binary())) GTEST_SKIP() << ooze_binary() << " not built";
  const std::string dir = ::ooze::testing::make_temp_dir("train-command-resume");
  const TrainRun full =
      train("full", {"--save", dir + "/ckpt", "--save-interval", "1", "--rollout-shuffle",
                     "--sampling-seed", "7", "--save-debug-rollout-data",
                     dir + "/full/rollout_{rollout_id}.jsonl"});
  ASSERT_TRUE(std::filesystem::exists(dir + "/ckpt/rollout_state_2.json"));
  const TrainRun resumed =
      train("resumed",
            {"--load", dir + "/ckpt", "--ckpt-step", "2", "--rollout-shuffle", "--sampling-seed",
             "7", "--save-debug-rollout-data", dir + "/resumed/rollout_{rollout_id}.jsonl"});
  EXPECT_NE(resumed.output.find("resumed from " + dir + "/ckpt at iteration 2, rollout 1"),
            std::string::npos)
      << resumed.output;
  ASSERT_EQ(resumed.rollouts.size(), 2u);
  ASSERT_EQ(resumed.steps.size(), 4u);
  EXPECT_EQ(resumed.steps.front()["train/step"], 3);
  EXPECT_EQ(resumed.steps.front()["train/ppo_kl"].get<double>(), 0.0);
  // The first line of each run says what its start took, and the resumed one its checkpoint load.
  EXPECT_GT(full.rollouts.front().value("perf/startup_time", 0.0), 0.0);
  EXPECT_FALSE(full.rollouts.front().contains("perf/load_time"));
  EXPECT_GT(resumed.rollouts.front().value("perf/load_time", 0.0), 0.0);
  EXPECT_GT(resumed.rollouts.front()["perf/startup_time"].get<double>(),
            resumed.rollouts.front()["perf/load_time"].get<double>());
  for (size_t k = 0; k < resumed.rollouts.size(); ++k) {
    EXPECT_EQ(resumed.rollouts[k].contains("perf/startup_time"), k == 0);
    EXPECT_EQ(resumed.rollouts[k]["step"], k + 1);
    EXPECT_EQ(resumed.rollouts[k]["rollout/oldest_weight_version"], k + 1)
        << "the engines did not get the loaded weights";
  }
  for (int rollout_id : {1, 2}) {
    const std::string name = "/rollout_" + std::to_string(rollout_id) + ".jsonl";
    EXPECT_EQ(field_of(dir + "/resumed" + name, "prompt"), field_of(dir + "/full" + name, "prompt"))
        << "rollout " << rollout_id << " drew other prompts";
    EXPECT_EQ(field_of(dir + "/resumed" + name, "tokens"), field_of(dir + "/full" + name, "tokens"))
        << "rollout " << rollout_id << " sampled other responses";
  }
  EXPECT_NE(field_of(dir + "/full/rollout_1.jsonl", "prompt"),
            field_of(dir + "/full/rollout_0.jsonl", "prompt"));
  ASSERT_EQ(full.steps.size(), 6u);
  for (size_t i = 0; i < resumed.steps.size(); ++i) {
    for (const char* key : {"train/loss", "train/grad_norm"}) {
      EXPECT_NEAR(resumed.steps[i][key].get<double>(), full.steps[i + 2][key].get<double>(), 1e-5)
          << key << " of step " << i + 3;
    }
  }
}

// ppo: a critic of its own scores every rollout and trains on each step beside the policy, the
// first rollout (--num-critic-only-steps 1) alone; the critic is saved beside the policy and a
// resumed run continues both to the uninterrupted run's steps.
TEST(TrainCommandTest, PpoTrainsACriticThatResumesWithThePolicy) {
  if (!std::filesystem::exists(ooze_binary())) GTEST_SKIP() << ooze_binary() << " not built";
  const std::string dir = ::ooze::testing::make_temp_dir("train-command-ppo");
  const std::vector<std::string> ppo = {"--advantage-estimator",
                                        "ppo",
                                        "--num-critic-only-steps",
                                        "1",
                                        "--critic-lr",
                                        "1e-3",
                                        "--lambd",
                                        "0.9",
                                        "--rollout-shuffle",
                                        "--sampling-seed",
                                        "7"};
  auto with = [&](std::vector<std::string> flags) {
    flags.insert(flags.begin(), ppo.begin(), ppo.end());
    return flags;
  };
  const TrainRun full = train("ppo-full", with({"--save", dir + "/ckpt", "--save-interval", "1"}));
  ASSERT_EQ(full.steps.size(), 6u);
  for (size_t i = 0; i < full.steps.size(); ++i) {
    const json& step = full.steps[i];
    EXPECT_TRUE(step.contains("critic/value_loss")) << step.dump();
    EXPECT_GT(step["critic/grad_norm"].get<double>(), 0) << step.dump();
    // Rollout 0 trains the critic alone: the policy takes its first step in rollout 1.
    EXPECT_EQ(step.contains("train/pg_loss"), i >= 2) << step.dump();
  }
  for (const json& rollout : full.rollouts) EXPECT_TRUE(rollout.contains("perf/values_time"));
  // Rollout 0 left the policy at iteration 0; rollouts 1 and 2 took it to 2 and 4.
  for (const char* state :
       {"rollout_state_0.json", "rollout_state_2.json", "rollout_state_4.json"}) {
    EXPECT_TRUE(std::filesystem::exists(dir + "/ckpt/" + state)) << state;
  }
  EXPECT_EQ(
      std::stoi(::ooze::testing::read_file(dir + "/ckpt/critic/latest_checkpointed_iteration.txt")),
      6);

  const TrainRun resumed =
      train("ppo-resumed", with({"--load", dir + "/ckpt", "--ckpt-step", "2"}));
  EXPECT_NE(resumed.output.find("at iteration 2, rollout 2"), std::string::npos) << resumed.output;
  ASSERT_EQ(resumed.steps.size(), 2u);
  for (size_t i = 0; i < resumed.steps.size(); ++i) {
    for (const char* key :
         {"train/pg_loss", "train/grad_norm", "critic/value_loss", "critic/grad_norm"}) {
      EXPECT_NEAR(resumed.steps[i][key].get<double>(), full.steps[i + 4][key].get<double>(), 1e-5)
          << key << " of step " << i + 5;
    }
  }
}

// --async: rollout k+1 generates while rollout k trains. Every token of a trained sample comes
// from weights at most --max-staleness versions behind the policy that trains on it (version k
// for rollout k), read from the samples the run saved; with the bound 1 the overlap shows as
// samples exactly one version behind.
TEST(TrainCommandTest, AsyncTrainingKeepsEverySampleWithinTheStalenessBound) {
  if (!std::filesystem::exists(ooze_binary())) GTEST_SKIP() << ooze_binary() << " not built";
  for (const int bound : {1, 2}) {
    const std::string samples = ::ooze::testing::make_temp_dir("train-command-async-samples");
    const TrainRun run =
        train("async", {"--async", "--max-staleness", std::to_string(bound), "--num-rollout", "6",
                        "--actor-num-gpus-per-node", "1", "--rollout-num-gpus", "2",
                        "--save-debug-rollout-data", samples + "/rollout_{rollout_id}.jsonl"});
    ASSERT_EQ(run.rollouts.size(), 6u) << run.output;
    int64_t most_behind = 0;
    for (int64_t k = 0; k < 6; ++k) {
      for (const json& sample :
           ::ooze::testing::read_json_lines(samples + "/rollout_" + std::to_string(k) + ".jsonl")) {
        for (int64_t version : sample["weight_versions"].get<std::vector<int64_t>>()) {
          if (version < 0) continue;  // not sampled (tool output)
          EXPECT_LE(k - version, bound) << "rollout " << k << " trained a token of version "
                                        << version << " (bound " << bound << ")";
          EXPECT_LE(version, k) << "a token from weights newer than the policy";
          most_behind = std::max(most_behind, k - version);
        }
      }
      EXPECT_LE(run.rollouts[k]["rollout/max_staleness"].get<double>(), bound);
    }
    std::printf("--max-staleness %d: the oldest token trained was %lld versions behind\n", bound,
                static_cast<long long>(most_behind));
    if (bound == 1) {
      EXPECT_EQ(most_behind, 1) << "no rollout generated while another trained";
    }
  }
}

// Supervised fine-tuning through the same loop: the sft rollout makes each label the response
// (no engine starts), the SFT loss trains on it, and a resumed run continues at the prompt
// position and loss of the uninterrupted one.
TEST(TrainCommandTest, TheSftRolloutTrainsOnLabelsAndResumesAtItsPromptPositionOnOtherRanks) {
  if (!std::filesystem::exists(ooze_binary())) GTEST_SKIP() << ooze_binary() << " not built";
  const std::string dir = ::ooze::testing::make_temp_dir("train-command-sft");
  const std::vector<std::string> sft = {
      "--rollout-function-path", "sft", "--loss-type",         "sft_loss", "--debug-train-only",
      "--n-samples-per-prompt",  "1",   "--global-batch-size", "2",        "--rollout-shuffle"};
  auto with = [&](std::vector<std::string> flags) {
    flags.insert(flags.begin(), sft.begin(), sft.end());
    return flags;
  };
  const TrainRun full = train(
      "sft-full", with({"--save", dir + "/ckpt", "--save-interval", "1",
                        "--save-debug-rollout-data", dir + "/full/rollout_{rollout_id}.jsonl"}));
  EXPECT_EQ(full.output.find("RolloutEngine"), std::string::npos) << "an engine started";
  ASSERT_EQ(full.steps.size(), 3u);
  for (int rollout_id : {0, 1, 2}) {
    const std::string path = dir + "/full/rollout_" + std::to_string(rollout_id) + ".jsonl";
    EXPECT_EQ(field_of(path, "response"), field_of(path, "label"));
  }
  // Saved by 1 rank, resumed by 2 (with micro-batches and recomputed activations, which change
  // no number): sharded checkpoints load at any world size.
  const TrainRun resumed = train(
      "sft-resumed", with({"--load", dir + "/ckpt", "--ckpt-step", "1", "--save-debug-rollout-data",
                           dir + "/resumed/rollout_{rollout_id}.jsonl", "--actor-num-gpus-per-node",
                           "2", "--micro-batch-size", "1", "--gradient-checkpointing"}));
  ASSERT_EQ(resumed.steps.size(), 2u);
  for (int rollout_id : {1, 2}) {
    const std::string name = "/rollout_" + std::to_string(rollout_id) + ".jsonl";
    EXPECT_EQ(field_of(dir + "/resumed" + name, "prompt"), field_of(dir + "/full" + name, "prompt"))
        << "rollout " << rollout_id << " drew other prompts";
  }
  for (size_t i = 0; i < resumed.steps.size(); ++i) {
    EXPECT_NEAR(resumed.steps[i]["train/loss"].get<double>(),
                full.steps[i + 1]["train/loss"].get<double>(), 1e-5)
        << "step " << i + 2;
  }
}

// A checkpoint that does not fit (here a file-size limit, `ulimit -f`, which fails a write as a
// full disk does) stops the run with the file and the bytes it needed, and leaves no partial
// checkpoint behind. The tiny model's rank files are over 500 KB; its logs and metrics stay
// under the 64 KiB limit.
TEST(TrainCommandTest, ACheckpointThatDoesNotFitStopsTheRunNamingTheFileAndItsBytes) {
  if (!std::filesystem::exists(ooze_binary())) GTEST_SKIP() << ooze_binary() << " not built";
  const std::string dir = ::ooze::testing::make_temp_dir("train-command-full-disk");
  std::vector<std::string> command = {"/bin/bash", "-c", "ulimit -f 64 && exec \"$0\" \"$@\""};
  for (const std::string& arg : ::ooze::testing::tiny_train_command(
           dir, {"--save", dir + "/ckpt", "--save-interval", "1"})) {
    command.push_back(arg);
  }
  ::ooze::testing::Process run(command, {{"OMP_NUM_THREADS", "1"}}, dir + "/log.txt");
  const ::ooze::testing::ExitStatus status = run.wait(180s);
  EXPECT_TRUE(status.exited && status.code == 1) << status.describe() << "\n" << run.output();
  const std::string output = run.output();
  for (const char* piece : {"iter_0000002.tmp/model_rank00000.safetensors",
                            "File too large (the file needs ", "bytes free on its filesystem"}) {
    EXPECT_NE(output.find(piece), std::string::npos) << "'" << piece << "' is not in:\n" << output;
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/ckpt/latest_checkpointed_iteration.txt"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/ckpt/iter_0000002.tmp"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/ckpt/iter_0000002"));
}

TEST(TrainCommandTest, ContradictionsAreRefusedBeforeAnythingStarts) {
  if (!std::filesystem::exists(ooze_binary())) GTEST_SKIP() << ooze_binary() << " not built";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--global-batch-size", "3"}, "--global-batch-size 3 does not divide a rollout's 8 samples"},
      {{"--global-batch-size", "1", "--actor-num-gpus-per-node", "2"},
       "--global-batch-size 1 is smaller than the 2 data-parallel groups"},
      {{"--actor-num-gpus-per-node", "2", "--context-parallel-size", "4"},
       "--context-parallel-size 4 does not divide the 2 trainer ranks"},
      {{"--debug-train-only"}, "--debug-train-only starts no engine"},
      {{"--debug-rollout-only", "--load-debug-rollout-data", "x.jsonl"},
       "--debug-rollout-only trains nothing"},
      {{"--colocate", "--actor-num-gpus-per-node", "2", "--rollout-num-gpus", "3"},
       "--colocate puts the engines on the trainer's 2 GPUs"},
      {{"--rollout-function-path", "sft", "--n-samples-per-prompt", "1", "--global-batch-size",
        "2"},
       "add --loss-type sft_loss"},
      {{"--rollout-function-path", "lib.so:generate"},
       "--rollout-function-path lib.so:generate is not a Python function"},
      {{"--hf-checkpoint", "DIR"}, "has no config.json"},
      {{"--hf-checkpoint", "DIR/config_only"}, "has no *.safetensors weights"},
      {{"--hf-checkpoint", "DIR/truncated"}, "model.safetensors': tensor '"},
      {{"--hf-checkpoint", "DIR/truncated"}, "the file is truncated"},
      {{"--hf-checkpoint", "DIR/lying"}, "does not fit the model"},
      {{"--hf-checkpoint", "DIR/lying"}, "model.embed_tokens.weight"},
      // What users type: flags, config files, datasets.
      {{"--lr", "abc"}, "--lr: expected a number > 0, got 'abc'"},
      {{"--no-such-flag"}, "unknown flag '--no-such-flag'"},
      {{"--config", "DIR/broken.json"}, "invalid JSON in config file"},
      {{"--config", "DIR/typed.json"}, "typed.json: expected a number > 0, got \"abc\""},
      {{"--prompt-data", "DIR/empty.jsonl"}, "has no prompts (the file is empty)"},
      {{"--prompt-data", "DIR/latin1.jsonl"}, "latin1.jsonl:2: not JSON"},
      {{"--prompt-data", "DIR/latin1.jsonl"}, "ill-formed UTF-8"},
      {{"--prompt-data", "DIR/typed.jsonl"}, "typed.jsonl:1: 'input' must be a string"},
      {{"--prompt-data", "DIR/huge.jsonl"},
       "huge.jsonl:2: the line is 20 MiB; a prompt line may hold at most 16 MiB"},
      {{"--async", "--colocate"}, "drop --colocate (or --async)"},
      {{"--async", "--rollout-function-path", "sft", "--loss-type", "sft_loss",
        "--n-samples-per-prompt", "1", "--global-batch-size", "2"},
       "--async overlaps the engines' generation with training"},
      {{"--advantage-estimator", "ppo", "--critic-load", "DIR"}, "--critic-load"},
      {{"--max-restarts", "2"}, "give --save DIR"},
      {{"--save-hf-merged", "merged"}, "--save-hf-merged merges LoRA adapters into the base"},
      {{"--use-opd", "--opd-type", "self", "--opsd-privileged-info-key", "label",
        "--actor-num-gpus-per-node", "2", "--context-parallel-size", "2"},
       "--opd-type self does not run with --context-parallel-size 2 yet"},
      {{"--use-opd", "--opd-teacher-hf-checkpoint", ::ooze::testing::tiny_model_dir(),
        "--opd-full-vocab", "--loss-type", "custom_loss", "--custom-loss-function-path",
        "HOOKS/losses.py:shares_tensors"},
       "--opd-type trainer --opd-full-vocab adds its JSD to the policy loss"},
      // Users' functions are loaded and checked before any process starts.
      {{"--custom-rm-path", "HOOKS/rewards.py:one_argument"},
       "rewards.py:one_argument(args, sample), but it is declared (sample)"},
      {{"--dynamic-sampling-filter-path", "no_such_module.check"},
       "no module named 'no_such_module'"},
      {{"--custom-generate-function-path", "HOOKS/generate.py:missing"},
       "has no attribute 'missing'"},
      {{"--rollout-sample-filter-path", "lib.so:filter"}, "must name a Python function"},
      {{"--custom-tis-function-path", "tis.py:fn"}, "it is used with --use-tis only"},
      {{"--use-tis", "--custom-tis-function-path", "HOOKS/losses.py:missing_tis"},
       "has no attribute 'missing_tis'"},
      {{"--custom-convert-samples-to-train-data-path", "HOOKS/train_data.py:count_calls"},
       "train_data.py:count_calls(args, samples), but it is declared (args)"},
      {{"--rollout-data-postprocess-path", "HOOKS/train_data.py:two_arguments"},
       "train_data.py:two_arguments(args), but it is declared (args, rollout_id)"},
  };
  // DIR: a directory that is not a model, holding what the cases give:
  const std::string inputs = ::ooze::testing::make_temp_dir("train-command-refused-inputs");
  // DIR/config_only: a model's config.json alone;
  std::filesystem::create_directories(inputs + "/config_only");
  std::filesystem::copy_file(::ooze::testing::tiny_model_dir() + "/config.json",
                             inputs + "/config_only/config.json");
  // DIR/truncated: a model whose weights file was cut short;
  std::filesystem::copy(::ooze::testing::tiny_model_dir(), inputs + "/truncated");
  std::filesystem::resize_file(inputs + "/truncated/model.safetensors", 10000);
  // DIR/lying: a model whose config.json says hidden_size 128 of weights of 64;
  std::filesystem::copy(::ooze::testing::tiny_model_dir(), inputs + "/lying");
  json lying = json::parse(::ooze::testing::read_file(inputs + "/lying/config.json"));
  lying["hidden_size"] = 128;
  std::ofstream(inputs + "/lying/config.json") << lying.dump();
  // config files and prompt data that are not what they claim.
  std::ofstream(inputs + "/broken.json") << "{\"lr\": 0.1";
  std::ofstream(inputs + "/typed.json") << "{\"lr\": \"abc\"}";
  std::ofstream(inputs + "/empty.jsonl");
  std::ofstream(inputs + "/latin1.jsonl") << "{\"input\": \"1+1=\", \"label\": \"2\"}\n"
                                          << "{\"input\": \"caf\xe9\", \"label\": \"2\"}\n";
  std::ofstream(inputs + "/typed.jsonl") << "{\"input\": 5, \"label\": \"2\"}\n";
  std::ofstream(inputs + "/huge.jsonl")
      << "{\"input\": \"1+1=\", \"label\": \"2\"}\n"
      << "{\"input\": \"" << std::string(20 << 20, 'a') << "\", \"label\": \"2\"}\n";
  for (auto [flags, expected] : cases) {
    const std::string dir = ::ooze::testing::make_temp_dir("train-command-refused");
    for (std::string& flag : flags) {
      if (flag.rfind("DIR", 0) == 0) flag = inputs + flag.substr(3);
      if (flag.rfind("HOOKS", 0) == 0) flag = OOZE_TEST_HOOKS_DIR + flag.substr(5);
    }
    std::vector<std::string> command = ::ooze::testing::tiny_train_command(dir, flags);
    ::ooze::testing::Process run(command, {{"OMP_NUM_THREADS", "1"}}, dir + "/log.txt");
    const ::ooze::testing::ExitStatus status = run.wait(60s);
    EXPECT_TRUE(status.exited && status.code != 0) << status.describe();
    EXPECT_NE(run.output().find(expected), std::string::npos) << run.output();
    EXPECT_FALSE(std::filesystem::exists(dir + "/out/metrics.jsonl"));
    // No worker was started (the driver logs each one it starts).
    EXPECT_EQ(run.output().find("pid="), std::string::npos) << run.output();
  }
}

}  // namespace train_command_test
}  // namespace ooze::launcher
