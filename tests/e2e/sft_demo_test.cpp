// `ooze sft-demo` (what `make demo` runs) as a user runs it: a generated model and dataset,
// two FSDP ranks hosted by TrainActors in worker processes, the loss falling step by step.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "tests/support/process.h"

namespace ooze {
namespace {

TEST(SftDemo, TwoActorRanksTrainAndTheLossFalls) {
  std::string dir = testing::make_temp_dir("sft");
  testing::Process demo({testing::build_path("launcher/ooze"), "sft-demo", "--out", dir + "/run",
                         "--steps", "8", "--world-size", "2"},
                        {}, dir + "/log.txt");
  testing::ExitStatus status = demo.wait(std::chrono::seconds(120));
  std::string output = demo.output();
  ASSERT_TRUE(status.exited && status.code == 0) << status.describe() << output;

  std::regex step_line(R"(step +(\d+) +loss ([0-9.]+) .* ([0-9]+) tokens/s)");
  std::vector<double> losses;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    std::smatch match;
    if (std::regex_search(line, match, step_line)) {
      EXPECT_EQ(std::stoi(match[1]), static_cast<int>(losses.size()) + 1);
      EXPECT_GT(std::stod(match[3]), 0.0);
      losses.push_back(std::stod(match[2]));
    }
  }
  ASSERT_EQ(losses.size(), 8u) << output;
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
}

}  // namespace
}  // namespace ooze
