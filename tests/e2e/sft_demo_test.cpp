// `ooze sft-demo` (what `make demo` runs) as a user runs it: a generated model and dataset,
// two FSDP ranks hosted by TrainActors in worker processes, the loss falling step by step.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "tests/support/process.h"

namespace ooze {
namespace {

struct DemoRun {
  std::string output;
  std::map<int, std::string> losses;  // step -> the loss as printed (6 decimals)
};

// Runs `ooze sft-demo` with `flags`, expecting success, and reads its step lines.
DemoRun run_demo(const std::vector<std::string>& flags, const std::string& log) {
  std::vector<std::string> argv = {testing::build_path("launcher/ooze"), "sft-demo"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  testing::Process demo(argv, {}, log);
  testing::ExitStatus status = demo.wait(std::chrono::seconds(120));
  DemoRun run;
  run.output = demo.output();
  EXPECT_TRUE(status.exited && status.code == 0) << status.describe() << run.output;
  std::regex step_line(R"(step +(\d+) +loss ([0-9.]+) .* ([0-9]+) tokens/s)");
  std::istringstream lines(run.output);
  for (std::string line; std::getline(lines, line);) {
    std::smatch match;
    if (std::regex_search(line, match, step_line)) {
      EXPECT_GT(std::stod(match[3]), 0.0);
      run.losses[std::stoi(match[1])] = match[2];
    }
  }
  return run;
}

TEST(SftDemo, TwoActorRanksTrainAndTheLossFalls) {
  std::string dir = testing::make_temp_dir("sft");
  DemoRun run =
      run_demo({"--out", dir + "/run", "--steps", "8", "--world-size", "2"}, dir + "/log.txt");
  const std::string& output = run.output;
  std::vector<double> losses;
  for (const auto& [step, loss] : run.losses) {
    EXPECT_EQ(step, static_cast<int>(losses.size()) + 1);
    losses.push_back(std::stod(loss));
  }
  ASSERT_EQ(losses.size(), 8u) << output;
  // Every step is also a line of OUT/metrics.jsonl, and OUT/config.json holds the settings.
  std::ifstream metrics(dir + "/run/metrics.jsonl");
  int line_count = 0;
  for (std::string line; std::getline(metrics, line); ++line_count) {
    nlohmann::json record = nlohmann::json::parse(line);
    EXPECT_EQ(record.at("step").get<int>(), line_count + 1);
    EXPECT_NEAR(record.at("loss").get<double>(), losses.at(line_count), 5e-7) << line;
    EXPECT_GT(record.at("tokens_per_second").get<double>(), 0.0);
  }
  EXPECT_EQ(line_count, 8);
  std::ifstream config_file(dir + "/run/config.json");
  nlohmann::json config = nlohmann::json::parse(config_file);
  EXPECT_EQ(config.at("steps").get<int>(), 8);
  EXPECT_EQ(config.at("lr_decay_style").get<std::string>(), "cosine");
  EXPECT_LT(losses.back(), losses.front() - 0.5) << output;  // it learns, not just drifts
  EXPECT_NE(output.find("2 FSDP ranks"), std::string::npos) << output;

  // The trained model went out in Hugging Face's sharded layout, every tensor of the initial
  // model present with its shape, and training changed the weights.
  SafetensorsFile initial = SafetensorsFile::open(dir + "/run/model/model.safetensors");
  ShardedSafetensors trained = ShardedSafetensors::open(dir + "/run/trained");
  ASSERT_EQ(trained.names().size(), initial.names().size());
  double changed = 0.0;
  for (const std::string& name : initial.names()) {
    ASSERT_TRUE(trained.contains(name)) << name;
    at::Tensor before = initial.tensor(name), after = trained.tensor(name);
    ASSERT_EQ(before.sizes(), after.sizes()) << name;
    changed += (after.to(at::kDouble) - before.to(at::kDouble)).abs().max().item<double>();
  }
  EXPECT_GT(changed, 0.0);
  // The final sharded checkpoint went to OUT/checkpoints, the tracker naming it.
  EXPECT_TRUE(std::filesystem::exists(dir + "/run/checkpoints/iter_0000008/metadata.json"));
}

// Saved by 2 ranks at step 3, resumed by 1 rank (with micro-batches, ZeRO-2 and recomputed
// activations, which change no number): steps 4-6 print the losses of the uninterrupted run.
TEST(SftDemo, ResumingAtAnotherWorldSizeContinuesTheSameRun) {
  std::string dir = testing::make_temp_dir("sft-resume");
  DemoRun whole = run_demo(
      {"--out", dir + "/whole", "--steps", "6", "--world-size", "2", "--save-interval", "3"},
      dir + "/whole.txt");
  ASSERT_EQ(whole.losses.size(), 6u) << whole.output;
  EXPECT_TRUE(std::filesystem::exists(dir + "/whole/checkpoints/iter_0000003/metadata.json"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/whole/checkpoints/iter_0000006/metadata.json"));

  DemoRun resumed =
      run_demo({"--out", dir + "/resumed", "--steps", "6", "--world-size", "1", "--load",
                dir + "/whole/checkpoints", "--ckpt-step", "3", "--no-use-dynamic-batch-size",
                "--micro-batch-size", "5",
                "--no-reshard-after-forward", "--gradient-checkpointing"},
               dir + "/resumed.txt");
  EXPECT_NE(resumed.output.find("resumed from " + dir + "/whole/checkpoints at step 3"),
            std::string::npos)
      << resumed.output;
  ASSERT_EQ(resumed.losses.size(), 3u) << resumed.output;
  for (int step = 4; step <= 6; ++step) {
    EXPECT_EQ(resumed.losses[step], whole.losses[step]) << "step " << step;
  }
}

TEST(SftDemo, LoadingFromADirectoryWithoutCheckpointsFailsNamingIt) {
  std::string dir = testing::make_temp_dir("sft-noload");
  testing::Process demo({testing::build_path("launcher/ooze"), "sft-demo", "--out", dir + "/run",
                         "--steps", "4", "--load", dir + "/empty"},
                        {}, dir + "/log.txt");
  testing::ExitStatus status = demo.wait(std::chrono::seconds(120));
  EXPECT_TRUE(status.exited && status.code != 0) << status.describe();
  EXPECT_NE(demo.output().find(dir + "/empty has no latest_checkpointed_iteration.txt"),
            std::string::npos)
      << demo.output();
}

}  // namespace
}  // namespace ooze
