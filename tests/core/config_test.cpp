#include "core/config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "tests/support/expect_error.h"
#include "tests/support/process.h"

namespace ooze {
namespace config_test {

ConfigSchema test_schema() {
  ConfigSchema schema;
  schema.section("rollout");
  schema.add_int("rollout_batch_size", 32, "Prompts per rollout step.").min(1);
  schema.add_int("n_samples_per_prompt", 8, "Samples drawn per prompt.").min(1);
  schema.add_double("temperature", 1.0, "Sampling temperature.").min(0);
  schema.add_double("top_p", 1.0, "Nucleus sampling mass.").greater_than(0).max(1);
  schema.section("train");
  schema.add_bool("colocate", false, "Share GPUs between trainer and engines.");
  schema.add_enum("advantage_estimator", {"grpo", "ppo", "reinforce_plus_plus"}, "grpo",
                  "How advantages are computed.");
  schema.add_string("output_dir", "runs/default", "Where outputs go.");
  schema.add_int("global_batch_size", 256, "Samples per optimizer step.").min(1);
  schema.add_int_list("eval_steps", {}, "Steps to evaluate at.").min(0);
  schema.add_string_list("tags", {"baseline"}, "Free-form run tags.");
  schema.add_check("batch_covers_rollout", [](const Config& c) -> std::string {
    int64_t samples = c.get<int64_t>("rollout_batch_size") * c.get<int64_t>("n_samples_per_prompt");
    int64_t batch = c.get<int64_t>("global_batch_size");
    if (samples % batch == 0) return "";
    return "rollout_batch_size * n_samples_per_prompt = " + std::to_string(samples) +
           " is not divisible by global_batch_size = " + std::to_string(batch);
  });
  return schema;
}

class ConfigTest : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }

  // Runs `load`, expects a ConfigError, and returns its message.
  template <typename Fn>
  std::string error_of(Fn load) {
    return testing::error_message_of(load);
  }

  std::string flags_error(const std::vector<std::string>& args) {
    return error_of([&] { load_config(schema_, "", args); });
  }

  std::string file_error(const std::string& json, std::string* path = nullptr) {
    std::string file = write("exp.json", json);
    if (path) *path = file;
    return error_of([&] { load_config(schema_, file, {}); });
  }

  ConfigSchema schema_ = test_schema();
  std::string dir_ = testing::make_temp_dir("config_test");
};

TEST_F(ConfigTest, DefaultsWhenNothingIsGiven) {
  Config config = load_config(schema_, "", {});
  EXPECT_EQ(config.get<int64_t>("rollout_batch_size"), 32);
  EXPECT_DOUBLE_EQ(config.get<double>("top_p"), 1.0);
  EXPECT_FALSE(config.get<bool>("colocate"));
  EXPECT_EQ(config.get<std::string>("advantage_estimator"), "grpo");
  EXPECT_EQ(config.get<std::string>("output_dir"), "runs/default");
  EXPECT_TRUE(config.get<std::vector<int64_t>>("eval_steps").empty());
  EXPECT_EQ(config.get<std::vector<std::string>>("tags"), std::vector<std::string>{"baseline"});
  EXPECT_EQ(config.source("rollout_batch_size"), ConfigSource::kDefault);
  EXPECT_EQ(config.origin("rollout_batch_size"), "default");
  EXPECT_TRUE(config.is_default_value("top_p"));
}

TEST_F(ConfigTest, PrecedenceIsDefaultThenFileThenFlag) {
  std::string file = write("exp.json", R"({"rollout_batch_size": 64, "temperature": 0.7})");
  Config config = load_config(schema_, file, {"--temperature", "0.5"});
  EXPECT_EQ(config.get<int64_t>("rollout_batch_size"), 64);
  EXPECT_EQ(config.source("rollout_batch_size"), ConfigSource::kFile);
  EXPECT_EQ(config.origin("rollout_batch_size"), file);
  EXPECT_DOUBLE_EQ(config.get<double>("temperature"), 0.5);
  EXPECT_EQ(config.source("temperature"), ConfigSource::kFlag);
  EXPECT_EQ(config.origin("temperature"), "--temperature");
  EXPECT_EQ(config.get<int64_t>("n_samples_per_prompt"), 8);
  EXPECT_EQ(config.source("n_samples_per_prompt"), ConfigSource::kDefault);
}

TEST_F(ConfigTest, CommandLineNamesTheFileWithConfigAndTheRestAreFlags) {
  std::string file = write("exp.json", R"({"rollout_batch_size": 64, "temperature": 0.7})");
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--temperature", "0.5", "--config", file},
        std::vector<std::string>{"--config=" + file, "--temperature", "0.5"}}) {
    std::optional<Config> config = load_config_from_command_line(schema_, args);
    ASSERT_TRUE(config.has_value());
    EXPECT_EQ(config->get<int64_t>("rollout_batch_size"), 64);
    EXPECT_EQ(config->origin("rollout_batch_size"), file);
    EXPECT_DOUBLE_EQ(config->get<double>("temperature"), 0.5);  // a flag beats the file
  }
  EXPECT_FALSE(load_config_from_command_line(schema_, {"--temperature", "0.5", "--help"}));
  EXPECT_FALSE(load_config_from_command_line(schema_, {"-h"}));
  EXPECT_CONTAINS(error_of([&] { load_config_from_command_line(schema_, {"--config"}); }),
                  "--config needs a file path");
  EXPECT_CONTAINS(error_of([&] {
                    load_config_from_command_line(schema_, {"--config", dir_ + "/none.json"});
                  }),
                  "cannot read config file '" + dir_ + "/none.json'");
}

TEST_F(ConfigTest, LaterFlagWins) {
  Config config = load_config(schema_, "", {"--temperature", "0.5", "--temperature=0.25"});
  EXPECT_DOUBLE_EQ(config.get<double>("temperature"), 0.25);
}

TEST_F(ConfigTest, FlagSpellings) {
  Config config = load_config(schema_, "",
                              {"--rollout-batch-size", "64", "--n_samples_per_prompt=4",
                               "--output-dir=runs/a=b", "--advantage-estimator", "ppo"});
  EXPECT_EQ(config.get<int64_t>("rollout_batch_size"), 64);
  EXPECT_EQ(config.get<int64_t>("n_samples_per_prompt"), 4);
  EXPECT_EQ(config.get<std::string>("output_dir"), "runs/a=b");
  EXPECT_EQ(config.get<std::string>("advantage_estimator"), "ppo");
}

TEST_F(ConfigTest, BoolFlagForms) {
  EXPECT_TRUE(load_config(schema_, "", {"--colocate"}).get<bool>("colocate"));
  EXPECT_TRUE(load_config(schema_, "", {"--colocate", "true"}).get<bool>("colocate"));
  EXPECT_FALSE(load_config(schema_, "", {"--colocate", "false"}).get<bool>("colocate"));
  EXPECT_FALSE(load_config(schema_, "", {"--colocate=false"}).get<bool>("colocate"));
  EXPECT_FALSE(load_config(schema_, "", {"--colocate", "--no-colocate"}).get<bool>("colocate"));
  // A bare bool flag followed by another flag does not swallow it.
  Config config = load_config(schema_, "", {"--colocate", "--temperature", "0.3"});
  EXPECT_TRUE(config.get<bool>("colocate"));
  EXPECT_DOUBLE_EQ(config.get<double>("temperature"), 0.3);
}

TEST_F(ConfigTest, ListsFromFileAndFlags) {
  std::string file = write("exp.json", R"({"eval_steps": [10, 20], "tags": ["x", "y"]})");
  Config from_file = load_config(schema_, file, {});
  EXPECT_EQ(from_file.get<std::vector<int64_t>>("eval_steps"), (std::vector<int64_t>{10, 20}));
  EXPECT_EQ(from_file.get<std::vector<std::string>>("tags"), (std::vector<std::string>{"x", "y"}));
  Config from_flags = load_config(schema_, file, {"--eval-steps", "1,2,3", "--tags="});
  EXPECT_EQ(from_flags.get<std::vector<int64_t>>("eval_steps"), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_TRUE(from_flags.get<std::vector<std::string>>("tags").empty());
  EXPECT_CONTAINS(flags_error({"--eval-steps", "1,-2"}),
                  "--eval-steps: expected a list of integers, each >= 0, got '1,-2'");
  EXPECT_CONTAINS(flags_error({"--eval-steps", "1,x"}), "element 'x' is not an integer");
}

TEST_F(ConfigTest, IntegralFloatInFileIsAnInteger) {
  std::string file = write("exp.json", R"({"rollout_batch_size": 64.0})");
  EXPECT_EQ(load_config(schema_, file, {}).get<int64_t>("rollout_batch_size"), 64);
}

TEST_F(ConfigTest, CommentsAreAllowedInFiles) {
  std::string file = write("exp.json", "{\n  // bigger batches\n  \"rollout_batch_size\": 64\n}");
  EXPECT_EQ(load_config(schema_, file, {}).get<int64_t>("rollout_batch_size"), 64);
}

TEST_F(ConfigTest, UnknownFileKeySuggestsNearest) {
  std::string path;
  std::string message = file_error(R"({"rollout_batch_sise": 64})", &path);
  EXPECT_CONTAINS(message, "unknown key 'rollout_batch_sise' in " + path +
                               "; did you mean 'rollout_batch_size'?");
}

TEST_F(ConfigTest, DashedFileKeySuggestsSnakeCase) {
  EXPECT_CONTAINS(file_error(R"({"rollout-batch-size": 64})"), "unknown key 'rollout-batch-size'");
  EXPECT_CONTAINS(file_error(R"({"rollout-batch-size": 64})"),
                  "did you mean 'rollout_batch_size'?");
}

TEST_F(ConfigTest, UnknownKeyWithoutCloseMatchHasNoSuggestion) {
  std::string message = file_error(R"({"zzzzzz": 1})");
  EXPECT_CONTAINS(message, "unknown key 'zzzzzz'");
  EXPECT_EQ(message.find("did you mean"), std::string::npos) << message;
}

TEST_F(ConfigTest, UnknownFlagSuggestsNearest) {
  std::string message = flags_error({"--rollout-batch-sise", "64"});
  EXPECT_CONTAINS(message,
                  "unknown flag '--rollout-batch-sise'; did you mean '--rollout-batch-size'?");
  // Its value is not reported as a stray argument.
  EXPECT_EQ(message.find("unexpected argument"), std::string::npos) << message;
}

TEST_F(ConfigTest, WrongTypeInFile) {
  std::string path;
  EXPECT_CONTAINS(file_error(R"({"rollout_batch_size": "64"})", &path),
                  "'rollout_batch_size' in " + path + ": expected an integer >= 1, got \"64\"");
  EXPECT_CONTAINS(file_error(R"({"colocate": "yes"})"),
                  "'colocate' in " + path + ": expected true or false, got \"yes\"");
  EXPECT_CONTAINS(file_error(R"({"output_dir": 3})"),
                  "'output_dir' in " + path + ": expected a string, got 3");
  EXPECT_CONTAINS(file_error(R"({"tags": [1]})"), "expected a list of strings, got [1]");
}

TEST_F(ConfigTest, FractionForInteger) {
  EXPECT_CONTAINS(file_error(R"({"rollout_batch_size": 1.5})"), "'rollout_batch_size' in ");
  EXPECT_CONTAINS(file_error(R"({"rollout_batch_size": 1.5})"),
                  "expected an integer >= 1, got 1.5 (not an integer)");
  EXPECT_CONTAINS(flags_error({"--rollout-batch-size", "1.5"}),
                  "--rollout-batch-size: expected an integer >= 1, got '1.5' (not an integer)");
}

TEST_F(ConfigTest, StringForNumberOnFlag) {
  EXPECT_CONTAINS(flags_error({"--temperature", "hot"}),
                  "--temperature: expected a number >= 0, got 'hot'");
  EXPECT_CONTAINS(flags_error({"--colocate=maybe"}),
                  "--colocate: expected true or false, got 'maybe'");
}

TEST_F(ConfigTest, IntegerOverflow) {
  EXPECT_CONTAINS(flags_error({"--rollout-batch-size", "99999999999999999999"}),
                  "got '99999999999999999999' (overflows a 64-bit integer)");
  EXPECT_CONTAINS(file_error(R"({"rollout_batch_size": 99999999999999999999})"),
                  "'rollout_batch_size' in ");
  EXPECT_CONTAINS(file_error(R"({"rollout_batch_size": 9223372036854775808})"),
                  "got 9223372036854775808 (overflows a 64-bit integer)");
}

TEST_F(ConfigTest, OutOfRange) {
  EXPECT_CONTAINS(flags_error({"--top-p", "1.5"}),
                  "--top-p: expected a number in (0, 1], got '1.5'");
  EXPECT_CONTAINS(flags_error({"--top-p", "0"}), "--top-p: expected a number in (0, 1], got '0'");
  // A negative value is a value, not a flag.
  EXPECT_CONTAINS(flags_error({"--rollout-batch-size", "-1"}),
                  "--rollout-batch-size: expected an integer >= 1, got '-1'");
  EXPECT_CONTAINS(file_error(R"({"rollout_batch_size": 0})"), "expected an integer >= 1, got 0");
}

TEST_F(ConfigTest, InvalidEnumListsChoices) {
  EXPECT_CONTAINS(flags_error({"--advantage-estimator", "gae"}),
                  "--advantage-estimator: expected one of {grpo, ppo, reinforce_plus_plus}, "
                  "got 'gae'");
  EXPECT_CONTAINS(file_error(R"({"advantage_estimator": "GRPO"})"),
                  "expected one of {grpo, ppo, reinforce_plus_plus}, got \"GRPO\"");
}

TEST_F(ConfigTest, MissingValueAfterFlag) {
  EXPECT_CONTAINS(flags_error({"--temperature"}),
                  "--temperature: missing value (expected a number >= 0)");
  EXPECT_CONTAINS(flags_error({"--output-dir", "--colocate"}),
                  "--output-dir: missing value (expected a string)");
}

TEST_F(ConfigTest, StrayArgumentsAndNegatedNonBool) {
  EXPECT_CONTAINS(flags_error({"exp.json"}), "unexpected argument 'exp.json'");
  EXPECT_CONTAINS(flags_error({"--no-colocate=true"}), "--no-colocate takes no value");
  EXPECT_CONTAINS(flags_error({"--no-temperature"}), "unknown flag '--no-temperature'");
}

TEST_F(ConfigTest, MissingRequiredField) {
  ConfigSchema schema;
  schema.add_string("model_path", "", "Hugging Face checkpoint directory.").required();
  std::string message = error_of([&] { load_config(schema, "", {}); });
  EXPECT_CONTAINS(message, "missing required field 'model_path'");
  EXPECT_CONTAINS(message, "--model-path");
  Config config = load_config(schema, "", {"--model-path", "/models/qwen3"});
  EXPECT_EQ(config.get<std::string>("model_path"), "/models/qwen3");
}

TEST_F(ConfigTest, CrossFieldCheckNamesKeysAndValues) {
  std::string message = flags_error({"--rollout-batch-size", "3", "--global-batch-size", "16"});
  EXPECT_CONTAINS(message,
                  "rollout_batch_size * n_samples_per_prompt = 24 is not divisible by "
                  "global_batch_size = 16");
  EXPECT_CONTAINS(message, "batch_covers_rollout");
}

TEST_F(ConfigTest, CheckReadingABrokenFieldIsSkipped) {
  std::string message = flags_error({"--global-batch-size", "x"});
  EXPECT_CONTAINS(message, "(1 problem)");
  EXPECT_EQ(message.find("batch_covers_rollout"), std::string::npos) << message;
}

TEST_F(ConfigTest, AllProblemsAreReportedTogether) {
  std::string file = write("exp.json", R"({"rollout_batch_sise": 64, "top_p": 2})");
  std::string message = error_of([&] {
    load_config(schema_, file,
                {"--temprature", "0.5", "--colocate=maybe", "--advantage-estimator", "gae",
                 "--rollout-batch-size"});
  });
  EXPECT_CONTAINS(message, "invalid configuration (6 problems):");
  EXPECT_CONTAINS(message, "did you mean 'rollout_batch_size'?");
  EXPECT_CONTAINS(message, "'top_p' in " + file);
  EXPECT_CONTAINS(message, "did you mean '--temperature'?");
  EXPECT_CONTAINS(message, "--colocate: expected true or false");
  EXPECT_CONTAINS(message, "got 'gae'");
  EXPECT_CONTAINS(message, "--rollout-batch-size: missing value");
  EXPECT_EQ(std::count(message.begin(), message.end(), '\n'), 6) << message;
}

TEST_F(ConfigTest, JsonSyntaxErrorNamesFileAndPosition) {
  std::string path;
  std::string message = file_error("{\n  \"rollout_batch_size\": 64,\n}", &path);
  EXPECT_CONTAINS(message, "invalid JSON in config file '" + path + "'");
  EXPECT_CONTAINS(message, "line 3, column 1");
}

TEST_F(ConfigTest, TopLevelMustBeAnObject) {
  std::string path;
  EXPECT_CONTAINS(file_error("[1, 2]", &path),
                  path + ": expected a JSON object at the top level, got array");
}

TEST_F(ConfigTest, MissingFileIsNamed) {
  std::string message = error_of([&] { load_config(schema_, dir_ + "/nope.json", {}); });
  EXPECT_CONTAINS(message, "cannot read config file '" + dir_ + "/nope.json'");
}

TEST_F(ConfigTest, GetterMisuseIsAClearError) {
  Config config = load_config(schema_, "", {});
  std::string wrong_type = error_of([&] { config.get<double>("rollout_batch_size"); });
  EXPECT_CONTAINS(wrong_type, "Config::get<double>('rollout_batch_size')");
  EXPECT_CONTAINS(wrong_type, "declared as int");
  std::string undeclared = error_of([&] { config.get<int64_t>("rollout_batch"); });
  EXPECT_CONTAINS(undeclared, "'rollout_batch' is not a declared config field");
  EXPECT_CONTAINS(undeclared, "did you mean 'rollout_batch_size'?");
  // Enum fields read as strings.
  EXPECT_EQ(config.get<std::string>("advantage_estimator"), "grpo");
}

TEST_F(ConfigTest, SchemaMistakesAreCaughtAtDeclaration) {
  ConfigSchema schema;
  schema.add_int("world_size", 2, "Ranks.");
  EXPECT_THROW(schema.add_int("world_size", 2, "Again."), ConfigError);
  EXPECT_THROW(schema.add_int("WorldSize", 2, "Camel."), ConfigError);
  EXPECT_THROW(schema.add_int("zero_default", 0, "Bad default.").min(1), ConfigError);
  EXPECT_THROW(schema.add_enum("backend", {"gloo", "nccl"}, "mpi", "Bad default."), ConfigError);
}

TEST_F(ConfigTest, ToJsonHasEveryFieldAndSavedConfigLoadsBack) {
  std::string file = write("exp.json", R"({"temperature": 0.7, "eval_steps": [5]})");
  Config config = load_config(schema_, file, {"--colocate", "--tags", "a,b"});
  nlohmann::json json = config.to_json();
  EXPECT_EQ(json.size(), schema_.fields().size());
  EXPECT_EQ(json["rollout_batch_size"], 32);
  EXPECT_EQ(json["temperature"], 0.7);
  EXPECT_EQ(json["colocate"], true);

  std::string out = dir_ + "/run/nested";
  config.save_effective_config(out);
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(out)) {
    names.push_back(entry.path().filename().string());
  }
  EXPECT_EQ(names, std::vector<std::string>{"config.json"});  // no temporary left behind
  Config reloaded = load_config(schema_, out + "/config.json", {});
  EXPECT_EQ(reloaded.to_json(), json);
}

TEST_F(ConfigTest, DescribeMarksNonDefaultsWithTheirOrigin) {
  std::string file = write("exp.json", R"({"temperature": 0.7, "top_p": 1.0})");
  std::string text = load_config(schema_, file, {"--colocate"}).describe();
  EXPECT_CONTAINS(text, "rollout:\n");
  EXPECT_CONTAINS(text, "train:\n");
  EXPECT_CONTAINS(text, "* temperature");
  EXPECT_CONTAINS(text, "(file " + file + "; default 1.0)");
  EXPECT_CONTAINS(text, "* colocate");
  EXPECT_CONTAINS(text, "(flag --colocate; default false)");
  // Set in the file but equal to the default: origin shown, not marked.
  EXPECT_CONTAINS(text, "    top_p");
  EXPECT_CONTAINS(text, "    rollout_batch_size");
}

TEST_F(ConfigTest, HelpDocumentsEveryField) {
  std::string help = schema_.help();
  EXPECT_CONTAINS(help, "rollout:\n");
  EXPECT_CONTAINS(help, "--rollout-batch-size <int>");
  EXPECT_CONTAINS(help, "default: 32; range: >= 1");
  EXPECT_CONTAINS(help, "Prompts per rollout step.");
  EXPECT_CONTAINS(help, "--top-p <float>");
  EXPECT_CONTAINS(help, "range: in (0, 1]");
  EXPECT_CONTAINS(help, "--[no-]colocate");
  EXPECT_CONTAINS(help, "--advantage-estimator {grpo,ppo,reinforce_plus_plus}");
  EXPECT_CONTAINS(help, "default: \"runs/default\"");
  EXPECT_LT(help.find("rollout:"), help.find("train:"));
}

}  // namespace config_test
}  // namespace ooze
