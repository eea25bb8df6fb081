// The built-in reward rules (--rm-type): one table of tricky cases per rule, the pieces the math
// rules are made of (box extraction, normal forms, symbolic equality), the dispatcher, and
// inputs that must neither crash nor hang.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "rollout/rewards/boxed_answer.h"
#include "rollout/rewards/builtin_rewards.h"
#include "rollout/rewards/dapo_reward.h"
#include "rollout/rewards/f1_reward.h"
#include "rollout/rewards/gpqa_reward.h"
#include "rollout/rewards/math_equivalence.h"
#include "rollout/rewards/math_normalization.h"
#include "rollout/rewards/math_reward.h"
#include "rollout/rewards/reward_label.h"
#include "rollout/sample.h"
#include "tests/support/expect_error.h"

namespace ooze::rollout {
namespace reward_rules_test {

Sample make_sample(const std::string& response, const std::string& label,
                   nlohmann::json metadata = nlohmann::json::object(), int64_t index = 0) {
  Sample sample;
  sample.index = index;
  sample.response = response;
  sample.label = label;
  sample.metadata = std::move(metadata);
  return sample;
}

double score(const std::string& type, const std::string& response, const std::string& label,
             nlohmann::json metadata = nlohmann::json::object()) {
  return score_builtin_reward(type, make_sample(response, label, std::move(metadata)))
      .get<double>();
}

struct RewardCase {
  std::string response;
  std::string label;
  double expected;
};

void expect_rewards(const std::string& type, const std::vector<RewardCase>& cases) {
  for (const RewardCase& c : cases) {
    EXPECT_EQ(score(type, c.response, c.label), c.expected)
        << type << ": response '" << c.response << "', label '" << c.label << "'";
  }
}

TEST(BoxedAnswer, TakesTheLastBoxWithNestedBraces) {
  const std::vector<std::pair<std::string, std::optional<std::string>>> cases = {
      {"so \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}"},
      {"\\boxed{1} first, then \\boxed{2}", "2"},
      {"\\boxed{\\{1,2\\}}", "\\{1,2\\}"},
      {"\\boxed {7}", "7"},
      {"\\fbox{3}", "3"},
      {"\\fbox{3} but \\boxed{4}", "4"},  // \fbox only when there is no \boxed
      {"$\\boxed 5$ done", "5"},
      {"\\boxed{}", ""},
      {"\\boxed{\\frac{1}{2}", std::nullopt},  // truncated: never closes
      {"\\boxedx", std::nullopt},
      {"the answer is 5", std::nullopt},
  };
  for (const auto& [text, expected] : cases) {
    EXPECT_EQ(last_boxed_content(text), expected) << text;
  }
}

TEST(MathNormalization, HendrycksNormalForm) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"\\dfrac12", "\\frac{1}{2}"},
      {"\\tfrac{3}{4}", "\\frac{3}{4}"},
      {"\\frac1{72}", "\\frac{1}{72}"},
      {" x = \\sqrt3 ", "\\sqrt{3}"},
      {"\\left( 1, 2 \\right)", "(1,2)"},
      {"3/4", "\\frac{3}{4}"},
      {"03/4", "03/4"},  // not a plain integer: left alone
      {".5", "\\frac{1}{2}"},
      {"10\\%", "10"},
      {"90^{\\circ}", "90"},
      {"5\\text{ cm}", "5"},
      {"\\text{ 12 }", "12"},
      {"\\$4.50", "4.50"},
      {"\\frac", "\\frac"},  // malformed: returned as it came
  };
  for (const auto& [answer, expected] : cases) {
    EXPECT_EQ(strip_math_answer(answer), expected) << answer;
  }
}

TEST(MathNormalization, LooserPlainTextForm) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"1,000", "1000"},
      {"1,000,000", "1000000"},
      {"5.0", "5"},
      {"\\$5", "5"},
      {"10\\%", "10"},
      {"4 degrees", "4"},
      {"7 miles", "7"},
      {"30^\\circ", "30"},
      {"\\frac{1}{2}", "1/2"},
      {"\\frac{a}{bc}", "a/(bc)"},
      {"-\\frac{1}{2}", "-1/2"},
      {"3\\frac{1}{2}", "3+1/2"},  // a mixed number
      {"\\sqrt{8}", "sqrt(8)"},
      {"x^{n+1}", "x^(n+1)"},
      {"2 \\cdot 3", "2*3"},
      {"\\text{Hello}", "hello"},
      {"1 or 2", "1,2"},
      {"3 million", "3*10^6"},
      {"(-\\infty, 3]", "(-inf,3]"},
  };
  for (const auto& [answer, expected] : cases) {
    EXPECT_EQ(normalize_math_answer(answer), expected) << answer;
  }
}

TEST(MathNormalization, ThousandsSeparatorsAndNumberShapes) {
  EXPECT_EQ(strip_thousands_separators("1,234,567 and (1,2)"), "1234567 and (1,2)");
  EXPECT_EQ(strip_thousands_separators("1,2345"), "1,2345");
  EXPECT_EQ(strip_thousands_separators("１,０００ and ٤,٢"), "１０００ and ٤,٢");  // any script
  EXPECT_TRUE(is_integer_text("1,000"));
  EXPECT_TRUE(is_integer_text("3.0"));
  EXPECT_FALSE(is_integer_text("3.5"));
  EXPECT_FALSE(is_integer_text("4/2"));
  EXPECT_FALSE(is_integer_text("inf"));
  EXPECT_TRUE(is_integer_text("٣"));
  EXPECT_FALSE(is_integer_text("²"));
  EXPECT_EQ(integer_digits("１,２３４"), "1234");
  EXPECT_EQ(integer_digits("2.99999999"), "3");
  EXPECT_TRUE(is_fraction_text("1/2"));
  EXPECT_TRUE(is_fraction_text("-12/05"));
  EXPECT_FALSE(is_fraction_text("1/0"));
  EXPECT_FALSE(is_fraction_text("x/2"));
  EXPECT_FALSE(is_fraction_text("sqrt(2)/2"));
}

TEST(MathEquivalence, SymbolicEquality) {
  struct Case {
    std::string a;
    std::string b;
    bool equal;
  };
  const std::vector<Case> cases = {
      {"\\frac{1}{2}", "0.5", true},
      {"0.1+0.2", "0.3", true},  // decimals are exact
      {"\\frac{1}{3}", "0.333333", false},
      {"\\sqrt{8}", "2\\sqrt{2}", true},
      {"\\frac{1}{\\sqrt{2}}", "\\frac{\\sqrt{2}}{2}", true},
      {"\\sqrt[3]{8}", "2", true},
      {"x^2+2x+1", "(x+1)^2", true},
      {"x^2+1", "(x+1)^2", false},
      {"\\frac{x^2-1}{x-1}", "x+1", true},
      {"2x", "x \\cdot 2", true},
      {"\\frac{a}{bc}", "a/(b c)", true},
      {"\\frac{a}{bc}", "ac/b", false},
      {"\\sin^2 x + \\cos^2 x", "1", true},  // normal() cannot; the probe points can
      {"2\\sin x \\cos x", "\\sin(2x)", true},
      {"\\sqrt{x^2}", "x", false},  // differs for negative x
      {"\\ln(e^2)", "2", true},
      {"2^{10}", "1024", true},
      {"\\pi", "3.14159265358979", false},
      {"2\\pi r", "r \\pi 2", true},
      {"1/0", "1/0", false},  // not a number
      {"", "", false},
      {"(1, 2)", "(1, 2)", false},  // tuples are split before, not parsed
      {"9^{9^{9^{9}}}", "1", false},
      {"(a+b+c+d+f)^{2}", "0", false},  // too many variables to expand
      {"(x+1)^{1000}", "0", false},     // too high a degree to expand
  };
  for (const Case& c : cases) {
    EXPECT_EQ(symbolically_equal(c.a, c.b), c.equal) << c.a << " vs " << c.b;
  }
}

TEST(MathEquivalence, TuplesAndIntervals) {
  EXPECT_EQ(split_tuple("(1, 2)"), (std::vector<std::string>{"1", "2"}));
  EXPECT_EQ(split_tuple("[1,3)"), (std::vector<std::string>{"1", "3"}));
  EXPECT_EQ(split_tuple("(1,000, 2)"), (std::vector<std::string>{"1000", "2"}));
  EXPECT_EQ(split_tuple("((1,2),3)"), (std::vector<std::string>{"(1,2)", "3"}));
  EXPECT_EQ(split_tuple("(x+1)^2"), (std::vector<std::string>{"(x+1)^2"}));
  EXPECT_EQ(split_tuple("(1)+(2)"), (std::vector<std::string>{"(1)+(2)"}));
  EXPECT_TRUE(normalized_answers_equivalent("(0.5,2)", "(1/2,2)"));
  EXPECT_FALSE(normalized_answers_equivalent("[1,3]", "[1,3)"));
  EXPECT_FALSE(normalized_answers_equivalent("(1,2,3)", "(1,2)"));
  EXPECT_FALSE(normalized_answers_equivalent("(2,1)", "(1,2)"));
}

TEST(MathReward, Table) {
  expect_rewards(
      "math",
      {
          {"so \\boxed{\\dfrac{1}{2}}", "\\frac12", 1},
          {"\\boxed{0.5}", "\\frac{1}{2}", 1},
          {"\\boxed{.5}", "0.5", 1},
          {"\\boxed{1,000}", "1000", 1},
          {"\\boxed{1,000,000}", "1000000", 1},
          {"\\boxed{10\\%}", "10", 1},
          {"\\boxed{90^\\circ}", "90", 1},
          {"\\boxed{90^{\\circ}}", "90", 1},
          {"\\boxed{5\\text{ cm}}", "5", 1},
          {"\\boxed{12 \\text{ inches}}", "12", 1},
          {"\\boxed{\\$5}", "5", 1},
          {"\\boxed{(1,2)}", "(1, 2)", 1},
          {"\\boxed{\\left( 1, 2 \\right)}", "(1,2)", 1},
          {"\\boxed{\\{1, 2\\}}", "\\{1,2\\}", 1},
          {"\\boxed{[1,3)}", "[1,3]", 0},
          {"\\boxed{(1,3)}", "[1,3)", 0},
          {"\\boxed{(2,1)}", "(1,2)", 0},
          {"\\boxed{\\sqrt{8}}", "2\\sqrt{2}", 1},
          {"\\boxed{x^2+2x+1}", "(x+1)^2", 1},
          {"\\boxed{x^2+1}", "(x+1)^2", 0},
          {"\\boxed{\\frac{x^2-1}{x-1}}", "x+1", 1},
          {"\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{1}{2}\\sqrt{3}", 1},
          {"\\boxed{2\\sin x\\cos x}", "\\sin(2x)", 1},
          {"\\boxed{2.50}", "2.5", 1},
          {"\\boxed{3\\frac{1}{2}}", "3.5", 1},
          {"\\boxed{x = 5}", "5", 1},
          {"\\boxed{2x}", "x \\cdot 2", 1},
          {"\\fbox{7}", "7", 1},
          {"\\boxed{7}", "\\boxed{7}", 1},               // a boxed label is graded by its box
          {"\\boxed{\\frac{2}{4}}", "\\frac{1}{2}", 0},  // unreduced fractions are not accepted
          {"\\boxed{\\frac{4}{2}}", "2", 0},             // an integer answer must be given as one
          {"\\boxed{\\sqrt{x^2}}", "x", 0},
          {"\\boxed{\\pi}", "3.14", 0},
          {"\\boxed{\\frac{1}{3}}", "0.33", 0},
          {"\\boxed{3}", "4", 0},
          {"\\boxed{-5}", "5", 0},
          {"\\boxed{1.000.000}", "1000000", 0},
          {"first \\boxed{3}, finally \\boxed{\\frac{1}{2}}", "\\frac{1}{2}", 1},
          {"first \\boxed{\\frac{1}{2}}, finally \\boxed{3}", "\\frac{1}{2}", 0},
          {"The answer is 5.", "5", 0},                 // no box
          {"\\boxed{\\frac{1}{2}", "\\frac{1}{2}", 0},  // the box never closes
          {"\\boxed{7}", "", 0},                        // no label
          {"\\boxed{４２}", "42", 1},                   // decimal digits of any script
          {"\\boxed{²}", "2", 0},                       // a superscript is no decimal digit
      });
}

TEST(DeepscalerReward, Table) {
  expect_rewards("deepscaler",
                 {
                     {"<think>maybe \\boxed{3}</think> so \\boxed{\\frac{1}{2}}", "0.5", 1},
                     {"<think>\\boxed{4}</think> then \\boxed{5}", "4", 0},  // after </think>
                     {"<think>a</think>b</think>\\boxed{6}", "6", 1},        // the last </think>
                     {"\\boxed{\\frac{1}{2}}", "\\frac{1}{2}", 0},           // no </think>
                     {"<think>...</think> the answer is 1/2", "\\frac{1}{2}", 0},
                     {"q ###Response \\boxed{4} ###Response \\boxed{5}", "4", 1},
                     {"</think>\\boxed{4}", "\\boxed{4}", 1},
                     {"</think>\\boxed{4}", "", 0},
                     {"</think>\\boxed{1,000}", "1000", 1},
                 });
}

TEST(DapoReward, Table) {
  struct Case {
    std::string response;
    std::string label;
    double score;
    std::string pred;
  };
  const std::vector<Case> cases = {
      {"so 6 * 7.\nAnswer: 42", "42", 1, "42"},
      {"ANSWER: 7", "7", 1, "7"},
      {"Answer : $1,000$", "1000", 1, "1000"},
      {"Answer: 3\nthen\nAnswer: 5", "5", 1, "5"},
      {"Answer: 5 dollars", "5", 1, "5"},
      {"Answer: x = 7", "7", 1, "7"},
      {"Answer: \\boxed{16}", "16", 1, "16"},
      {"Answer: 12", "12.0", 1, "12"},     // labels are integers
      {"Answer: 12.0", "12", -1, "12.0"},  // predictions are not converted
      {"Answer: 6", "7", -1, "6"},
      {"it is \\boxed{42}", "42", -1, "[INVALID]"},
      {"Answer: 9\n" + std::string(400, 'x'), "9", -1, "[INVALID]"},  // beyond the last 300
      {"Answer: \\frac{1}{2}", "\\frac{1}{2}", 1, "\\frac{1}{2}"},    // a non-numeric label
      {"Answer: 42", "٤٢", 1, "42"},                                  // float() reads any digits
  };
  for (const Case& c : cases) {
    const nlohmann::json reward = score_builtin_reward("dapo", make_sample(c.response, c.label));
    ASSERT_TRUE(reward.is_object()) << reward.dump();
    EXPECT_EQ(reward["score"], c.score) << c.response;
    EXPECT_EQ(reward["acc"], c.score > 0 ? 1.0 : 0.0) << c.response;
    EXPECT_EQ(reward["pred"], c.pred) << c.response;
  }
  Sample scored = make_sample("Answer: 42", "42");
  scored.reward = score_builtin_reward("dapo", scored);
  EXPECT_EQ(scored.reward_value("score"), 1.0);
  EXPECT_EQ(normalize_dapo_answer("\\text{5} \\fracab"), "5\\frac{a}{b}");
}

TEST(F1Reward, Table) {
  struct Case {
    std::string prediction;
    std::string truth;
    double f1;
    double precision;
    double recall;
  };
  const std::vector<Case> cases = {
      {"The Eiffel Tower", "eiffel tower", 1, 1, 1},
      {"Hello, world!", "hello world", 1, 1, 1},
      {"hello world foo", "hello world bar", 2.0 / 3, 2.0 / 3, 2.0 / 3},
      {"hello", "hello world", 2.0 / 3, 1, 0.5},
      {"cat cat dog", "cat dog dog", 2.0 / 3, 2.0 / 3, 2.0 / 3},  // counted with multiplicity
      {"a an the b", "b", 1, 1, 1},                               // articles dropped
      {"yes", "Yes.", 1, 1, 1},
      {"yes", "no", 0, 0, 0},
      {"noanswer", "yes", 0, 0, 0},
      {"yes it is", "yes", 0, 0, 0},  // the bare "yes" label matches only "yes"
      {"", "anything", 0, 0, 0},
      {"ZÜRICH", "Zürich", 1, 1, 1},           // lower case in any script
      {"New\u00a0York", "new york", 1, 1, 1},  // Unicode whitespace splits
  };
  for (const Case& c : cases) {
    const TokenF1 f1 = token_f1(c.prediction, c.truth);
    EXPECT_NEAR(f1.f1, c.f1, 1e-12) << c.prediction << " vs " << c.truth;
    EXPECT_NEAR(f1.precision, c.precision, 1e-12) << c.prediction;
    EXPECT_NEAR(f1.recall, c.recall, 1e-12) << c.prediction;
    EXPECT_NEAR(score("f1", c.prediction, c.truth), c.f1, 1e-12) << c.prediction;
  }
  EXPECT_EQ(normalize_squad_answer("  The  QUICK, brown fox! "), "quick brown fox");
  EXPECT_EQ(normalize_squad_answer("ΟΔΟΣ\u3000the—end"), "οδος —end");
}

TEST(GpqaReward, Table) {
  const nlohmann::json cities = {{"choices", {"Paris", "London", "Rome", "Berlin"}}};
  struct Case {
    std::string response;
    std::string label;
    nlohmann::json metadata;
    double expected;
  };
  const std::vector<Case> cases = {
      {"The answer is B", "B", {}, 1},
      {"The answer is (B)", "B", {}, 1},  // not the I of "is"
      {"answer: b", "B", {}, 1},
      {"Answer: C", "B", {}, 0},
      {"I think B is the correct one... B is correct", "B", {}, 1},
      {"<think>the answer is C</think> Final answer: B", "B", {}, 1},
      {"Answer: C", "2", {}, 1},  // a numeric label indexes the letters
      {"Answer: D", "whatever", {{"correct_letter", "d"}}, 1},
      {"Answer: C", "Rome", cities, 1},  // the label names a choice
      {"Answer: A", "Rome", cities, 0},
      {"It must be Rome.", "Rome", cities, 1},  // no letter: the choice's text
      {"It must be Romeo.", "Rome", cities, 0},
      {"Answer: E", "D", cities, 0},  // four choices: E is not an option
      {"(A) or (B)? I pick B.", "B", {}, 1},
      {"", "A", {}, 0},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(score("gpqa", c.response, c.label, c.metadata), c.expected)
        << "'" << c.response << "' label " << c.label << " " << c.metadata.dump();
  }
  EXPECT_EQ(gpqa_valid_letters(cities), (std::vector<std::string>{"A", "B", "C", "D"}));
  EXPECT_EQ(gpqa_valid_letters({{"valid_letters", {"a", "b"}}}),
            (std::vector<std::string>{"A", "B"}));
  EXPECT_EQ(gpqa_valid_letters(nlohmann::json::object()).size(), 10u);
}

TEST(BuiltinRewards, TypesAndBoxedPrefix) {
  EXPECT_EQ(builtin_reward_types(),
            (std::vector<std::string>{"deepscaler", "dapo", "math", "f1", "gpqa", "random"}));
  for (const std::string& type : builtin_reward_types()) {
    EXPECT_TRUE(is_builtin_reward_type(type));
    EXPECT_TRUE(is_builtin_reward_type("boxed_" + type));
  }
  for (const char* type : {"", "remote_rm", "boxed_", "boxed_boxed_math", "Math", " math"}) {
    EXPECT_FALSE(is_builtin_reward_type(type)) << type;
  }
  // boxed_f1 grades only the box; f1 grades the whole response.
  EXPECT_EQ(score("boxed_f1", "I believe it is \\boxed{Paris}", "Paris"), 1.0);
  EXPECT_LT(score("f1", "I believe it is \\boxed{Paris}", "Paris"), 1.0);
  EXPECT_EQ(score("boxed_f1", "no box: Paris", "Paris"), 0.0);
  EXPECT_EQ(score("boxed_gpqa", "The answer is B. On reflection, \\boxed{C}", "C"), 1.0);
  EXPECT_EQ(score("gpqa", "The answer is B. On reflection, \\boxed{C}", "C"), 0.0);
}

TEST(BuiltinRewards, UnknownTypeNamesTheValidOnes) {
  const std::string message = ooze::testing::error_message_of<ConfigError>(
      [] { score_builtin_reward("maths", make_sample("\\boxed{1}", "1")); });
  EXPECT_CONTAINS(message, "'maths'");
  for (const std::string& type : builtin_reward_types()) EXPECT_CONTAINS(message, type);
  EXPECT_CONTAINS(message, "boxed_");
  EXPECT_THROW(score_builtin_reward("remote_rm", make_sample("", "")), ConfigError);
}

TEST(BuiltinRewards, MetadataTypeOverridesTheFlag) {
  EXPECT_EQ(effective_reward_type(" math ", make_sample("", "")), "math");
  EXPECT_EQ(effective_reward_type("math", make_sample("", "", {{"rm_type", "f1"}})), "f1");
  EXPECT_EQ(effective_reward_type("math", make_sample("", "", {{"rm_type", "  "}})), "math");
  EXPECT_EQ(effective_reward_type("math", make_sample("", "", {{"rm_type", 3}})), "math");
}

TEST(BuiltinRewards, AListLabelScoresTheBestOfItsAnswers) {
  const std::string cities = R"(["Paris", "City of Light"])";
  // f1: the best F1 over the answers (SQuAD / TriviaQA), not F1 against the list's JSON text.
  EXPECT_EQ(score("f1", "Paris", R"(["Paris", "x"])"), 1.0);
  EXPECT_EQ(score("f1", "the city of light", cities), 1.0);
  EXPECT_DOUBLE_EQ(score("f1", "light", cities), 0.5);  // F1 of "light" and "city of light"
  EXPECT_EQ(score("boxed_f1", "\\boxed{Paris}", cities), 1.0);
  // The others: 1 when any answer matches.
  EXPECT_EQ(score("math", "so \\boxed{\\frac{1}{2}}", R"(["0.4", "0.5"])"), 1.0);
  EXPECT_EQ(score("math", "so \\boxed{3}", R"(["0.4", "0.5"])"), 0.0);
  EXPECT_EQ(score("deepscaler", "</think> \\boxed{7}", R"(["seven", "7"])"), 1.0);
  EXPECT_EQ(score("gpqa", "The answer is C.", R"(["B", "C"])"), 1.0);
  EXPECT_EQ(score("gpqa", "The answer is A.", R"(["B", "C"])"), 0.0);
  const nlohmann::json dapo =
      score_builtin_reward("dapo", make_sample("Answer: 12", R"(["11", "12"])"));
  EXPECT_EQ(dapo["score"], 1.0);
  EXPECT_EQ(dapo["acc"], 1.0);
  // An interval or a list of numbers is one answer, as it was.
  EXPECT_EQ(score("math", "\\boxed{[0, 1]}", "[0, 1]"), 1.0);
  EXPECT_EQ(score("math", "\\boxed{0}", "[0, 1]"), 0.0);
  EXPECT_EQ(label_answers("[0, 1]"), (std::vector<std::string>{"[0, 1]"}));
  EXPECT_EQ(label_answers(R"([" a ", "", "b"])"), (std::vector<std::string>{" a ", "b"}));
  EXPECT_EQ(label_answers("[\"a\""), (std::vector<std::string>{"[\"a\""}));  // not JSON
  EXPECT_TRUE(label_answers(" ").empty());
  EXPECT_TRUE(label_answers(R"(["", " "])").empty());
}

TEST(BuiltinRewards, WhichTypesNeedALabel) {
  for (const std::string& type : builtin_reward_types()) {
    EXPECT_EQ(reward_type_needs_label(type), type != "random") << type;
    EXPECT_EQ(reward_type_needs_label("boxed_" + type), type != "random") << type;
    EXPECT_EQ(has_reference_answer(type, "", nlohmann::json::object()), type == "random") << type;
    EXPECT_TRUE(has_reference_answer(type, "4", nlohmann::json::object())) << type;
  }
  EXPECT_FALSE(reward_type_needs_label("remote_rm"));
  EXPECT_FALSE(has_reference_answer("math", " \n", nlohmann::json::object()));
  EXPECT_FALSE(has_reference_answer("f1", "[]", nlohmann::json::object()));
  EXPECT_FALSE(has_reference_answer("f1", R"([""])", nlohmann::json::object()));
  // gpqa also finds its answer in the metadata.
  EXPECT_TRUE(has_reference_answer("gpqa", "", {{"correct_letter", "B"}}));
  EXPECT_TRUE(has_reference_answer("boxed_gpqa", "", {{"correct_answer", "Paris"}}));
  EXPECT_FALSE(has_reference_answer("gpqa", "", {{"correct_letter", " "}}));
  EXPECT_FALSE(has_reference_answer("math", "", {{"correct_letter", "B"}}));
}

TEST(BuiltinRewards, RandomIsReproducibleAndBalanced) {
  int ones = 0;
  int changed_by_response = 0;
  for (int64_t index = 0; index < 400; ++index) {
    const Sample sample = make_sample("response", "", nlohmann::json::object(), index);
    const double reward = score_builtin_reward("random", sample).get<double>();
    ASSERT_TRUE(reward == 0.0 || reward == 1.0);
    EXPECT_EQ(score_builtin_reward("random", sample).get<double>(), reward);
    ones += static_cast<int>(reward);
    const Sample other = make_sample("another", "", nlohmann::json::object(), index);
    if (score_builtin_reward("random", other).get<double>() != reward) ++changed_by_response;
  }
  EXPECT_GT(ones, 140);  // 400 fair coins: 200 +- 60 is over 6 standard deviations
  EXPECT_LT(ones, 260);
  EXPECT_GT(changed_by_response, 140);
}

TEST(BuiltinRewards, GarbageAndHugeInputsNeitherThrowNorHang) {
  std::string nested_fracs;
  for (int i = 0; i < 3000; ++i) nested_fracs += "\\frac{";
  nested_fracs += "1";
  for (int i = 0; i < 3000; ++i) nested_fracs += "}{2}";
  std::string separators = "1";
  for (int i = 0; i < 50000; ++i) separators += ",000";
  const std::vector<std::string> responses = {
      std::string(1 << 20, 'x'),
      "</think>\\boxed{" + std::string(100000, '{') + "1" + std::string(100000, '}') + "}",
      "</think>\\boxed{" + nested_fracs + "}",
      "</think>\\boxed{" + separators + "}",
      "</think>\\boxed{" + std::string(400, '(') + "x" + std::string(400, ')') + "}",
      "</think>\\boxed{9^{9^{9^{9^{9}}}}}",
      "</think>\\boxed{(x+y+z+w)^{64}}",
      "</think>\\boxed{10^{100000}}",
      "</think>\\boxed{1e999999}",
      "</think>\\boxed{\\frac{1}{0}}",
      "</think>\\boxed{\\tan(\\pi/2)}",
      "</think>\\boxed{\\sqrt[0]{2}}",
      "</think>\\boxed{))((}}{{\\\\\\^^__}",
      std::string(200000, ' ') + "Answer:" + std::string(200000, '\n'),
      std::string(300000, 'A') + " answer is " + std::string(100000, 'b'),
      std::string("\xff\xfe\x80 \\boxed{\xe2\x88") + "} Answer: \xce",
  };
  const std::vector<std::string> labels = {"1", "(x+y+z+w)^{63}", "\\frac{1}{2}", nested_fracs};
  const auto start = std::chrono::steady_clock::now();
  for (const std::string& type : builtin_reward_types()) {
    for (const std::string& response : responses) {
      for (const std::string& label : labels) {
        EXPECT_NO_THROW(score_builtin_reward(type, make_sample(response, label)))
            << type << " on a " << response.size() << "-byte response";
      }
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 3.0) << "garbage must be rejected fast";
  // A label equal to a huge answer is still a match (compared as a string).
  EXPECT_EQ(score("math", "\\boxed{" + nested_fracs + "}", nested_fracs), 1.0);
}

TEST(BuiltinRewards, SymbolicChecksAreSafeAcrossThreads) {
  // GiNaC is not thread-safe; the rules serialise their symbolic checks.
  std::vector<std::thread> threads;
  std::vector<int> correct(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &correct] {
      for (int i = 0; i < 50; ++i) {
        const bool right = (i + t) % 2 == 0;
        const std::string response = right ? "\\boxed{x^2+2x+1}" : "\\boxed{x^2+2x+2}";
        if (score("math", response, "(x+1)^2") == (right ? 1.0 : 0.0)) ++correct[t];
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(correct[t], 50) << "thread " << t;
}

}  // namespace reward_rules_test
}  // namespace ooze::rollout
