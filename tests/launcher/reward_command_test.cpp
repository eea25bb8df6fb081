// `ooze reward` over streams: answers in input order, one per non-blank line, errors named by
// line without losing the other lines, and start-up failures before any line is read.
#include "launcher/reward_command.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "rollout/plugin_function.h"
#include "tests/support/expect_error.h"

namespace ooze::launcher {
namespace reward_command_test {

using nlohmann::json;

std::vector<json> answers(const std::string& text) {
  std::vector<json> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) out.push_back(json::parse(line));
  return out;
}

TEST(RewardCommandTest, ScoresEveryLineInOrder) {
  std::string input;
  // 300 lines: more than one chunk of concurrent scoring.
  for (int i = 0; i < 300; ++i) {
    const bool right = i % 3 != 0;
    input += json{{"response", "so the answer is \\boxed{\\dfrac{" + std::to_string(i) + "}{2}}"},
                  {"label", right ? std::to_string(i) + "/2" : "-1"}}
                 .dump() +
             "\n";
    if (i == 5) input += "\n";  // blank lines are skipped, not answered
  }
  std::istringstream in(input);
  std::ostringstream out;
  EXPECT_EQ(run_reward_command({"--rm-type", "math"}, in, out), 0);
  const std::vector<json> got = answers(out.str());
  ASSERT_EQ(got.size(), 300u);
  for (int i = 0; i < 300; ++i) {
    EXPECT_EQ(got[i]["reward"].get<double>(), i % 3 != 0 ? 1.0 : 0.0) << "line " << i;
  }
}

TEST(RewardCommandTest, BadLinesAnswerAnErrorAndTheRestAreScored) {
  std::istringstream in(
      "{\"response\": \"\\\\boxed{4}\", \"label\": \"4\"}\n"
      "not json\n"
      "{\"label\": \"4\"}\n"
      "{\"response\": \"The answer is 3.\", \"label\": \"3\"}\n");
  std::ostringstream out;
  EXPECT_EQ(run_reward_command({"--rm-type", "math"}, in, out), 1);
  const std::vector<json> got = answers(out.str());
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0]["reward"], 1.0);
  EXPECT_NE(got[1]["error"].get<std::string>().find("line 2: not JSON"), std::string::npos);
  EXPECT_NE(got[2]["error"].get<std::string>().find("line 3: 'response'"), std::string::npos);
  EXPECT_EQ(got[3]["reward"], 0.0);  // math grades the last \boxed{} only
}

TEST(RewardCommandTest, DapoGivesItsObjectAndBoxedPrefixReducesTheResponse) {
  std::istringstream in("{\"response\": \"work... Answer: 42\", \"label\": \"42\"}\n");
  std::ostringstream out;
  EXPECT_EQ(run_reward_command({"--rm-type", "dapo"}, in, out), 0);
  const json dapo = answers(out.str()).at(0)["reward"];
  EXPECT_EQ(dapo["score"], 1.0);

  // f1 of the whole response is below 1; boxed_f1 grades only what is boxed.
  std::istringstream boxed("{\"response\": \"city \\\\boxed{Paris}\", \"label\": \"Paris\"}\n");
  std::ostringstream boxed_out;
  EXPECT_EQ(run_reward_command({"--rm-type", "boxed_f1"}, boxed, boxed_out), 0);
  EXPECT_EQ(answers(boxed_out.str()).at(0)["reward"], 1.0);
}

TEST(RewardCommandTest, UnknownTypesAndMissingPluginsFailBeforeReading) {
  std::istringstream in("{\"response\": \"1\"}\n");
  std::ostringstream out;
  EXPECT_CONTAINS(ooze::testing::error_message_of<ConfigError>([&] {
                    run_reward_command({"--rm-type", "maths"}, in, out);
                  }),
                  "maths");
  EXPECT_CONTAINS(ooze::testing::error_message_of<rollout::PluginError>([&] {
                    run_reward_command({"--custom-rm-path", "/nonexistent/lib.so:fn"}, in, out);
                  }),
                  "/nonexistent/lib.so");
  EXPECT_CONTAINS(ooze::testing::error_message_of<ConfigError>([&] {
                    run_reward_command({"--rm-type", "remote_rm"}, in, out);
                  }),
                  "--rm-url");
  EXPECT_TRUE(out.str().empty());
}

}  // namespace reward_command_test
}  // namespace ooze::launcher
