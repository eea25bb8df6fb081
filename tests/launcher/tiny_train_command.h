// The small `ooze train` the launcher tests start, and the JSON lines it writes.
//
//   std::vector<std::string> command = tiny_train_command(dir, {"--colocate"});
//   Process run(command, {{"OMP_NUM_THREADS", "1"}}, dir + "/log.txt");
//   for (const nlohmann::json& line : read_json_lines(dir + "/out/metrics.jsonl")) ...
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/rollout/tiny_model.h"
#include "tests/support/process.h"

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
                                      rollout::testing::tiny_model_dir(),
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

}  // namespace ooze::testing
