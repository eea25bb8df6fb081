// Every default `ooze train --help` prints is the value a run uses when the flag is not given:
// the help text comes from the real binary, the values from the option structs the run builds
// out of a config with no flags (the trainer's, the algorithm's, the rollout's, ...), or from the
// config itself for the flags the launcher reads by name.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>

#include "algorithms/algorithm_options.h"
#include "engine/engine.h"
#include "launcher/engine_supervisor.h"
#include "launcher/train_plan.h"
#include "rollout/prompt_source.h"
#include "rollout/reward_model.h"
#include "rollout/rollout_options.h"
#include "tests/support/process.h"
#include "trainer/trainer_options.h"
#include "trainer/weight_sync_options.h"

namespace ooze::launcher {
namespace help_defaults_test {

using nlohmann::json;

// flag name (snake_case) -> the text after "default: " on its help line: the flag's line, or
// the next one when the flag's usage is too long to share a line.
std::map<std::string, std::string> help_defaults(const std::string& help) {
  // "  --lr <float>     default: 1e-06; range: > 0", "  --[no-]bf16    default: false".
  static const std::regex flag_line(R"(^  --(?:\[no-\])?([a-z0-9-]+)(.*)$)");
  static const std::regex facts(R"(^.*\s+default: (.*?)(?:; range: .*)?$)");
  std::map<std::string, std::string> defaults;
  std::istringstream lines(help);
  std::string text, flag;
  while (std::getline(lines, text)) {
    std::smatch match;
    if (std::regex_match(text, match, flag_line)) {
      flag = match[1];
      for (char& c : flag) c = c == '-' ? '_' : c;
      text = match[2];
    } else if (flag.empty() || text.find_first_not_of(' ') < 6) {
      flag.clear();
      continue;
    }
    if (std::regex_match(text, match, facts)) {
      defaults[flag] = match[1];
      flag.clear();
    }
  }
  return defaults;
}

// The flags of `fields` with the values `used` holds.
template <class Options>
void add_used(const OptionFields<Options>& fields, const Options& used,
              std::map<std::string, json>& out) {
  for (const auto& entry : fields.entries()) {
    if (entry.is_flag) out[entry.spec.name] = entry.get(used);
  }
}

TEST(HelpDefaultsTest, EveryDefaultTrainHelpShowsIsTheValueARunUses) {
  const std::string dir = testing::make_temp_dir("help_defaults");
  testing::Process help({testing::ooze_binary(), "train", "--help"}, {}, dir + "/help.txt");
  ASSERT_TRUE(help.wait(std::chrono::seconds(60)).exited);
  const std::map<std::string, std::string> shown = help_defaults(help.output());
  ASSERT_GT(shown.size(), 100u) << help.output();

  // What a run builds when no flag but the required one is given.
  const Config config = load_config(train_schema(), "", {"--hf-checkpoint", "model"});
  std::map<std::string, json> used;
  add_used(trainer::TrainerOptions::fields(), trainer::trainer_options_from_config(config, 1),
           used);
  const algorithms::AlgorithmOptions algorithm = algorithms::AlgorithmOptions::from_config(config);
  add_used(algorithms::AdvantageOptions::fields(), algorithm.advantage, used);
  add_used(algorithms::PolicyLossOptions::fields(), algorithm.policy_loss, used);
  add_used(algorithms::ValueLossOptions::fields(), algorithm.value_loss, used);
  const rollout::RolloutOptions rollout = rollout::RolloutOptions::fields().read(config);
  add_used(rollout::RolloutOptions::fields(), rollout, used);
  add_used(rollout::RewardOptions::fields(), rollout::RewardOptions::fields().read(config), used);
  const rollout::PromptDatasetOptions data = rollout::PromptDatasetOptions::fields().read(config);
  add_used(rollout::PromptDatasetOptions::fields(), data, used);
  add_used(rollout::PromptSourceOptions::fields(),
           rollout::PromptSourceOptions::fields().read(config), used);
  const rollout::EvalOptions eval = rollout::EvalOptions::from_config(config, data);
  add_used(rollout::EvalOptions::fields(), eval, used);
  add_used(trainer::WeightSyncOptions::fields(), trainer::WeightSyncOptions::fields().read(config),
           used);
  add_used(EngineSupervisorOptions::fields(), EngineSupervisorOptions::fields().read(config), used);
  ASSERT_GT(used.size(), 80u);

  // The eval sampling flags show the rollout flag they follow instead of a number.
  const std::map<std::string, json> eval_used = {
      {"eval_temperature", eval.sampling.temperature},
      {"eval_top_p", eval.sampling.top_p},
      {"eval_top_k", eval.sampling.top_k},
      {"eval_max_response_len", eval.sampling.max_response_len}};

  for (const auto& [name, text] : shown) {
    SCOPED_TRACE("--" + name + " (help: default: " + text + ")");
    if (text.rfind("--", 0) == 0) {
      std::string followed = text.substr(2);
      for (char& c : followed) c = c == '-' ? '_' : c;
      ASSERT_TRUE(eval_used.count(name) != 0 && used.count(followed) != 0);
      EXPECT_EQ(eval_used.at(name), used.at(followed));
    } else if (used.count(name) != 0) {
      EXPECT_EQ(json::parse(text), used.at(name));
    } else {
      EXPECT_EQ(json::parse(text), config.value(name));  // read by name from the config
    }
  }
  // Every flag but the required ones was found with its default.
  for (const FieldSpec& spec : train_schema().fields()) {
    EXPECT_TRUE(spec.is_required || shown.count(spec.name) != 0) << spec.flag();
  }
}

}  // namespace help_defaults_test
}  // namespace ooze::launcher
