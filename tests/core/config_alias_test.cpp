// Other spellings of fields (aliases), flags refused with a hint, repeatable lists and flags whose
// value may be left out: how they resolve against the file and the other flags.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "core/config.h"
#include "tests/support/expect_error.h"
#include "tests/support/process.h"

namespace ooze {
namespace config_alias_test {

using testing::error_message_of;

ConfigSchema aliased_schema() {
  ConfigSchema schema;
  schema.section("rollout");
  schema.add_int("sampling_seed", -1, "Seed of sampling.").min(-1);
  schema.add_enum("loss_aggregation", {"token-mean", "seq-mean"}, "seq-mean", "Normalisation.");
  schema.add_string_list("engine", {}, "Engines.").repeatable();
  schema.add_string("chat_template", "", "Template.").bare_value("auto");
  FieldSpec seed;
  seed.name = "seed";
  seed.type = FieldType::kInt;
  seed.doc = "The run's seed.";
  seed.section = "other spellings";
  seed.lower = 0;
  schema.add_alias(seed, [](const nlohmann::json& value) {
    return std::vector<std::pair<std::string, nlohmann::json>>{{"sampling_seed", value}};
  });
  FieldSpec per_token;
  per_token.name = "calculate_per_token_loss";
  per_token.type = FieldType::kBool;
  per_token.doc = "Per-token loss.";
  schema.add_alias(per_token, [](const nlohmann::json& value) {
    return std::vector<std::pair<std::string, nlohmann::json>>{
        {"loss_aggregation", value == true ? "token-mean" : "seq-mean"}};
  });
  schema.add_hint("use_wandb", "metrics go to metrics.jsonl");
  schema.add_hint("wandb_*", "no W&B");
  return schema;
}

TEST(ConfigAliasTest, AnAliasSetsItsFieldsAndNamesItselfAsTheOrigin) {
  const Config config =
      load_config(aliased_schema(), "", {"--seed", "7", "--no-calculate-per-token-loss"});
  EXPECT_EQ(config.get<int64_t>("sampling_seed"), 7);
  EXPECT_EQ(config.origin("sampling_seed"), "--seed");
  EXPECT_EQ(config.get<std::string>("loss_aggregation"), "seq-mean");
  EXPECT_FALSE(config.to_json().contains("seed"));  // config.json holds what it set
  EXPECT_CONTAINS(config.describe_changes(), "sampling_seed = 7  (--seed; default -1)");
  // Same value twice is no contradiction; another value at the same level is.
  EXPECT_NO_THROW(load_config(aliased_schema(), "", {"--seed", "7", "--sampling-seed", "7"}));
  EXPECT_CONTAINS(error_message_of([] {
                    load_config(aliased_schema(), "", {"--sampling-seed", "3", "--seed", "7"});
                  }),
                  "--seed means --sampling-seed 7, but --sampling-seed sets it to 3: keep one");
  // Its range is checked as a field's.
  EXPECT_CONTAINS(error_message_of([] {
                    load_config(aliased_schema(), "", {"--seed", "-5"});
                  }),
                  "--seed: expected an integer >= 0");
}

TEST(ConfigAliasTest, AFlagWinsOverTheFileWhicheverSpellingEachUses) {
  const std::string dir = testing::make_temp_dir("config_alias");
  const std::string file = dir + "/exp.json";
  { std::ofstream(file) << R"({"seed": 5, "loss_aggregation": "token-mean"})"; }
  Config config = load_config(aliased_schema(), file, {"--sampling-seed", "9"});
  EXPECT_EQ(config.get<int64_t>("sampling_seed"), 9);
  config = load_config(aliased_schema(), file, {"--no-calculate-per-token-loss"});
  EXPECT_EQ(config.get<std::string>("loss_aggregation"), "seq-mean");
  EXPECT_EQ(config.get<int64_t>("sampling_seed"), 5);
}

TEST(ConfigAliasTest, HintsRepeatsAndBareValues) {
  const std::string message = error_message_of([] {
    load_config(aliased_schema(), "", {"--use-wandb", "--wandb-project", "p", "--sede", "1"});
  });
  EXPECT_CONTAINS(message, "'--use-wandb': metrics go to metrics.jsonl");
  EXPECT_CONTAINS(message, "'--wandb-project': no W&B");
  EXPECT_CONTAINS(message, "invalid configuration (3 problems)");  // "p" was the hint's value
  const Config config =
      load_config(aliased_schema(), "", {"--engine", "a", "--engine", "b,c", "--chat-template"});
  EXPECT_EQ(config.get<std::vector<std::string>>("engine"),
            (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(config.get<std::string>("chat_template"), "auto");
  EXPECT_TRUE(aliased_schema().takes_flag("no-calculate-per-token-loss"));
  EXPECT_FALSE(aliased_schema().takes_flag("use-wandb"));
  const std::string help = aliased_schema().help();
  EXPECT_CONTAINS(help, "(--sampling-seed -> sampling_seed)");
  EXPECT_CONTAINS(help, "other spellings:\n  --seed <int>");
  EXPECT_CONTAINS(help, "--chat-template [<string>]");
  EXPECT_CONTAINS(help, "--engine <string list>...");
  EXPECT_CONTAINS(help, "--use-wandb, --wandb-*");
}

}  // namespace config_alias_test
}  // namespace ooze
