// The multi-turn calculator example (examples/multi_turn/calculator_generate.cpp), built as a
// plugin library and loaded the way --custom-generate-function-path loads it:
//   - against a scripted policy (a GenerationContext whose turns are written here), which makes
//     the tool calls the tiny random model never would: answers, masks, metrics, errors,
//     budgets, aborts and continued samples;
//   - end to end in a rollout through the manager against real engines serving the tiny model,
//     with its Python twin (calculator_generate.py) too.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "python/interpreter.h"
#include "rollout/plugin_function.h"
#include "rollout/rollout_manager.h"
#include "tests/support/expect_error.h"
#include "tests/support/process.h"
#include "tests/support/served_engines.h"

#ifndef OOZE_CALCULATOR_GENERATE
#error "OOZE_CALCULATOR_GENERATE (the example's plugin library) must be defined by the build"
#endif

namespace ooze::rollout {
namespace multi_turn_example_test {

const std::string kSpec = std::string(OOZE_CALCULATOR_GENERATE) + ":calculator_generate";
const std::string kFlag = "--custom-generate-function-path";

PluginFunction calculator() { return PluginFunction::load(kSpec, plugin::Kind::kGenerate, kFlag); }

constexpr float kPolicyLogProb = -0.25f;
constexpr int64_t kPolicyVersion = 7;

// One turn of the scripted policy. Its tokens are its bytes, as with a byte-level tokenizer.
struct Turn {
  Turn(std::string written, std::string stop = "",  // NOLINT: implicit from the text
       Sample::Status ending = Sample::Status::kCompleted)
      : text(std::move(written)), stop_string(std::move(stop)), status(ending) {}
  std::string text;
  // A stop string the turn ends with: its tokens are appended, but, as the engine does, it is
  // left out of the returned text and the response.
  std::string stop_string;
  Sample::Status status;  // kAborted: the engine aborted the turn
};

// A GenerationContext whose policy writes the given turns in order, appending tokens, loss masks,
// log-probs and weight versions as ooze's SampleGenerator does.
class ScriptedContext final : public plugin::GenerationContext {
 public:
  ScriptedContext(std::vector<Turn> turns, int64_t max_response_len)
      : turns_(std::move(turns)), max_response_len_(max_response_len) {}

  std::string generate(Sample& sample, int64_t max_new_tokens) override {
    asked_max_new_tokens.push_back(max_new_tokens);
    const int64_t budget = remaining_budget(sample);
    if (budget == 0) return "";
    if (next_ == turns_.size()) {
      ADD_FAILURE() << "the plugin asked for a turn after the " << turns_.size() << " scripted";
      return "";
    }
    const Turn& turn = turns_[next_++];
    std::string written = turn.text + turn.stop_string;
    const int64_t limit = max_new_tokens > 0 ? std::min(max_new_tokens, budget) : budget;
    const bool cut = static_cast<int64_t>(written.size()) > limit;
    if (cut) written.resize(static_cast<size_t>(limit));
    for (int64_t id : tokenize(written)) {
      sample.tokens.push_back(id);
      sample.loss_mask.push_back(1);
      sample.rollout_log_probs.push_back(kPolicyLogProb);
      sample.weight_versions.push_back(kPolicyVersion);
    }
    sample.response_length += static_cast<int64_t>(written.size());
    const std::string returned = cut ? written : turn.text;
    sample.response += returned;
    // Only the whole response budget truncates a sample; a turn cut by max_new_tokens ends
    // as completed (SampleGenerator's rule).
    if (remaining_budget(sample) == 0) {
      sample.status = Sample::Status::kTruncated;
    } else {
      sample.status = cut ? Sample::Status::kCompleted : turn.status;
    }
    return returned;
  }

  int64_t append_observation(Sample& sample, const std::string& text) override {
    observations.push_back(text);
    std::vector<int64_t> ids = tokenize(text);
    const bool cut = static_cast<int64_t>(ids.size()) > remaining_budget(sample);
    if (cut) ids.resize(static_cast<size_t>(remaining_budget(sample)));
    append_non_policy_tokens(sample, ids, detokenize(ids));
    if (remaining_budget(sample) == 0) sample.status = Sample::Status::kTruncated;
    return static_cast<int64_t>(ids.size());
  }

  int64_t remaining_budget(const Sample& sample) const override {
    return std::max<int64_t>(0, max_response_len_ - sample.response_length);
  }

  std::vector<int64_t> tokenize(const std::string& text) const override {
    std::vector<int64_t> ids;
    for (char c : text) ids.push_back(static_cast<unsigned char>(c));
    return ids;
  }

  std::string detokenize(const std::vector<int64_t>& ids) const override {
    std::string text;
    for (int64_t id : ids) text.push_back(static_cast<char>(id));
    return text;
  }

  size_t turns_taken() const { return next_; }

  std::vector<int64_t> asked_max_new_tokens;
  std::vector<std::string> observations;  // as the plugin asked for them, before any cut

 private:
  std::vector<Turn> turns_;
  size_t next_ = 0;
  int64_t max_response_len_;
};

Sample fresh_sample(const std::string& prompt = "Q: ") {
  Sample sample;
  sample.prompt = prompt;
  for (char c : prompt) sample.tokens.push_back(static_cast<unsigned char>(c));
  return sample;
}

// Runs the plugin on `sample` with a policy that writes `turns`.
ScriptedContext run(Sample& sample, std::vector<Turn> turns, int64_t max_response_len = 4096) {
  ScriptedContext context(std::move(turns), max_response_len);
  calculator().generate(context, sample);
  return context;
}

// What the tool answers to one expression: the observation after a single call.
std::string answer_to(const std::string& expression) {
  Sample sample = fresh_sample();
  ScriptedContext context = run(sample, {{"<calc>" + expression + "</calc>"}, {"done"}});
  EXPECT_EQ(context.observations.size(), 1u) << expression;
  return context.observations.empty() ? "" : context.observations.front();
}

std::vector<int64_t> bytes_of(const std::string& text) {
  std::vector<int64_t> ids;
  for (char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

TEST(CalculatorGenerate, AnswersTheCallWithAnObservationThePolicyIsNotTrainedOn) {
  const std::string first = "let me compute <calc>2*(3+4)</calc>";
  const std::string observation = "<result>14</result>";
  const std::string second = " the answer is 14";
  Sample sample = fresh_sample();
  ScriptedContext context = run(sample, {{first}, {second}});

  EXPECT_EQ(context.observations, std::vector<std::string>{observation});
  EXPECT_EQ(sample.response, first + observation + second);
  EXPECT_EQ(sample.tokens, bytes_of("Q: " + first + observation + second));
  EXPECT_EQ(sample.response_length, static_cast<int64_t>(sample.response.size()));
  std::vector<int32_t> mask(first.size(), 1);
  mask.insert(mask.end(), observation.size(), 0);
  mask.insert(mask.end(), second.size(), 1);
  EXPECT_EQ(sample.loss_mask, mask);
  for (size_t i = 0; i < mask.size(); ++i) {
    EXPECT_EQ(sample.rollout_log_probs[i], mask[i] == 1 ? kPolicyLogProb : 0.0f) << i;
    EXPECT_EQ(sample.weight_versions[i], mask[i] == 1 ? kPolicyVersion : -1) << i;
  }
  EXPECT_EQ(sample.status, Sample::Status::kCompleted);
  EXPECT_EQ(sample.metrics["tool_calls"], 1);
  EXPECT_EQ(sample.metrics["turns"], 2);
  // Every turn is capped, so one rambling turn cannot take the whole budget.
  ASSERT_EQ(context.asked_max_new_tokens.size(), 2u);
  for (int64_t cap : context.asked_max_new_tokens) EXPECT_EQ(cap, 512);
}

TEST(CalculatorGenerate, KeepsCallingTheToolUntilATurnMakesNoCall) {
  Sample sample = fresh_sample();
  ScriptedContext context = run(sample, {{"first <calc>1+1</calc>"},
                                         {"then <calc> 10 - 4 - 3 </calc> and"},
                                         {"so <calc>7/2</calc>"},
                                         {"an unfinished <calc>9*9"},
                                         {"never written"}});
  EXPECT_EQ(context.observations,
            (std::vector<std::string>{"<result>2</result>", "<result>3</result>",
                                      "<result>7/2</result>"}));
  EXPECT_EQ(context.turns_taken(), 4u);  // the unfinished call ends the sample
  EXPECT_EQ(sample.metrics["tool_calls"], 3);
  EXPECT_EQ(sample.metrics["turns"], 4);
  EXPECT_EQ(sample.response,
            "first <calc>1+1</calc><result>2</result>then <calc> 10 - 4 - 3 </calc> and"
            "<result>3</result>so <calc>7/2</calc><result>7/2</result>an unfinished <calc>9*9");
}

TEST(CalculatorGenerate, FollowsPrecedenceAndAssociativityExactly) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"2+3*4", "14"},
      {"(2+3)*4", "20"},
      {"10-4-3", "3"},
      {"100/10/5", "2"},
      {"2*3/4", "3/2"},
      {"7/2", "7/2"},
      {"6/-4", "-3/2"},
      {"-7/2", "-7/2"},
      {"2*-3", "-6"},
      {"-(-3)", "3"},
      {"+5", "5"},
      {"1/3+1/6", "1/2"},
      {" 1 +\t2\n", "3"},
      {"((((((42))))))", "42"},
      {"0*123456789", "0"},
      {"9223372036854775807", "9223372036854775807"},
      {"3037000499*3037000499", "9223372030926249001"},
  };
  for (const auto& [expression, value] : cases) {
    EXPECT_EQ(answer_to(expression), "<result>" + value + "</result>") << expression;
  }
}

// ---- random expressions against an independent evaluation ----

struct Exact {
  int64_t numerator;
  int64_t denominator;  // > 0, lowest terms
};

Exact exact(int64_t numerator, int64_t denominator) {
  if (denominator < 0) numerator = -numerator, denominator = -denominator;
  const int64_t divisor = std::gcd(numerator, denominator);
  return {numerator / divisor, denominator / divisor};
}

struct Expression {
  std::string text;
  Exact value;
  int precedence;  // 3: a number or a parenthesised expression, 2: * /, 1: + -
};

// A random expression over small integers, with the value it has by construction: the tree is
// evaluated here, and printed with parentheses only where precedence or associativity needs
// them (and now and then where it does not).
Expression random_expression(std::mt19937& rng, int depth) {
  std::uniform_int_distribution<int> small(0, 12);
  if (depth == 0 || rng() % 4 == 0) {
    const int64_t value = small(rng) - (rng() % 5 == 0 ? 12 : 0);
    return {std::to_string(value), {value, 1}, value < 0 ? 2 : 3};
  }
  const char op = "+-*/"[rng() % 4];
  Expression left = random_expression(rng, depth - 1);
  Expression right = random_expression(rng, depth - 1);
  if (op == '/' && right.value.numerator == 0) return left;
  const int precedence = op == '+' || op == '-' ? 1 : 2;
  auto operand = [&](const Expression& e, bool is_right) {
    const bool needed = e.precedence < precedence ||
                        (is_right && e.precedence == precedence && (op == '-' || op == '/'));
    return needed || rng() % 8 == 0 ? "(" + e.text + ")" : e.text;
  };
  const Exact a = left.value, b = right.value;
  Exact value{};
  switch (op) {
    case '+':
      value = exact(a.numerator * b.denominator + b.numerator * a.denominator,
                    a.denominator * b.denominator);
      break;
    case '-':
      value = exact(a.numerator * b.denominator - b.numerator * a.denominator,
                    a.denominator * b.denominator);
      break;
    case '*':
      value = exact(a.numerator * b.numerator, a.denominator * b.denominator);
      break;
    default:
      value = exact(a.numerator * b.denominator, a.denominator * b.numerator);
  }
  const std::string spacing = rng() % 3 == 0 ? " " : "";
  return {operand(left, false) + spacing + op + spacing + operand(right, true), value, precedence};
}

TEST(CalculatorGenerate, RandomExpressionsGetTheValueTheyHaveByConstruction) {
  std::mt19937 rng(2024);
  std::vector<Turn> turns;
  std::vector<std::string> expected;
  for (int i = 0; i < 300; ++i) {
    const Expression e = random_expression(rng, 3);
    turns.push_back({"<calc>" + e.text + "</calc>"});
    const std::string value = e.value.denominator == 1 ? std::to_string(e.value.numerator)
                                                       : std::to_string(e.value.numerator) + "/" +
                                                             std::to_string(e.value.denominator);
    expected.push_back("<result>" + value + "</result>");
  }
  turns.push_back({"done"});
  Sample sample = fresh_sample();
  ScriptedContext context = run(sample, turns, /*max_response_len=*/1 << 20);
  ASSERT_EQ(context.observations.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(context.observations[i], expected[i]) << turns[i].text;
  }
  EXPECT_EQ(sample.metrics["tool_calls"], 300);
  EXPECT_EQ(sample.metrics["turns"], 301);
}

// The Python twin's tool (calculator.py, run by plain python3) gives the same values on
// the same random expressions, and refuses what the C++ one refuses.
TEST(CalculatorGenerate, ThePythonTwinAnswersAsThePluginDoes) {
  std::mt19937 rng(7);
  std::vector<std::string> expressions = {"7/2", "1/0", "2*(3", "", "-(-4)", "1+x", "((((5))))"};
  for (int i = 0; i < 100; ++i) expressions.push_back(random_expression(rng, 3).text);
  const std::string dir = ::ooze::testing::make_temp_dir("calculator-twin");
  std::ofstream(dir + "/expressions.json") << nlohmann::json(expressions).dump();
  ::ooze::testing::Process python(
      {::ooze::python::executable(), "-c",
       "import json, sys; sys.path.insert(0, sys.argv[1]); import calculator as c; "
       "print(json.dumps([c.tool_answer(e) for e in json.load(open(sys.argv[2]))]))",
       std::string(OOZE_SOURCE_DIR) + "/examples/multi_turn", dir + "/expressions.json"},
      {{"PYTHONPATH", ::ooze::python::package_dir()}}, dir + "/answers.json");
  const ::ooze::testing::ExitStatus status = python.wait(std::chrono::seconds(60));
  ASSERT_TRUE(status.exited && status.code == 0) << status.describe() << python.output();
  const auto answers = nlohmann::json::parse(python.output()).get<std::vector<std::string>>();
  ASSERT_EQ(answers.size(), expressions.size());
  for (size_t i = 0; i < expressions.size(); ++i) {
    const std::string cpp = answer_to(expressions[i]);
    const std::string error = "<result>error: ";
    if (cpp.rfind(error, 0) == 0) {
      EXPECT_EQ(answers[i].rfind(error, 0), 0u) << expressions[i] << ": " << answers[i];
    } else {
      EXPECT_EQ(answers[i], cpp) << expressions[i];
    }
  }
}

TEST(CalculatorGenerate, BadExpressionsAreAnsweredWithAnErrorAndTheDialogueGoesOn) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"1/0", "division by zero"},
      {"5/(2-2)", "division by zero"},
      {"2+*3", "unexpected '*' at character 3"},
      {"abc", "unexpected 'a' at character 1"},
      {"2 3", "unexpected '3' at character 3"},
      {"1+2)", "unexpected ')' at character 4"},
      {"(1+2", "missing ')'"},
      {"1+", "ends where a number was expected"},
      {"", "empty expression"},
      {"   ", "empty expression"},
      {"2^3", "unexpected '^' at character 2"},
      {"1.5", "unexpected '.' at character 2"},
      {"\xc3\xa9", "unexpected byte 0xc3 at character 1"},
      {"99999999999999999999", "number too large"},
      {"9223372036854775807+1", "overflow"},
      {"3037000500*3037000500", "overflow"},
      {std::string(40, '(') + "1" + std::string(40, ')'), "nested too deeply"},
      {std::string(300, '1'), "expression too long"},
  };
  std::vector<Turn> turns;
  for (const auto& [expression, error] : cases)
    turns.push_back({"<calc>" + expression + "</calc>"});
  turns.push_back({"giving up"});
  Sample sample = fresh_sample();
  ScriptedContext context = run(sample, turns);
  ASSERT_EQ(context.observations.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string& observation = context.observations[i];
    EXPECT_EQ(observation.rfind("<result>error: ", 0), 0u) << observation;
    EXPECT_CONTAINS(observation, cases[i].second);
    EXPECT_EQ(observation.substr(observation.size() - 9), "</result>");
  }
  EXPECT_EQ(sample.metrics["tool_calls"], static_cast<int64_t>(cases.size()));
  EXPECT_EQ(sample.metrics["turns"], static_cast<int64_t>(cases.size()) + 1);
  EXPECT_EQ(sample.status, Sample::Status::kCompleted);
}

TEST(CalculatorGenerate, AStopStringCutFromTheTextIsPutBackInTheResponse) {
  // With --rollout-stop '</calc>' the engine's text ends before the tag; its tokens do not.
  Sample sample = fresh_sample();
  ScriptedContext context = run(sample, {{"<calc>6*7", "</calc>"}, {"it is 42"}});
  EXPECT_EQ(context.observations, std::vector<std::string>{"<result>42</result>"});
  EXPECT_EQ(sample.response, "<calc>6*7</calc><result>42</result>it is 42");
  EXPECT_EQ(sample.tokens, bytes_of("Q: " + sample.response));
}

TEST(CalculatorGenerate, AnObservationIsCutAtTheBudgetAndNothingFollowsIt) {
  const std::string first = "<calc>2*(3+4)</calc>";
  Sample sample = fresh_sample();
  ScriptedContext context =
      run(sample, {{first}, {"never written"}}, static_cast<int64_t>(first.size()) + 5);
  EXPECT_EQ(context.turns_taken(), 1u);
  EXPECT_EQ(sample.response, first + "<resu");
  EXPECT_EQ(sample.response_length, static_cast<int64_t>(first.size()) + 5);
  EXPECT_EQ(std::vector<int32_t>(sample.loss_mask.end() - 5, sample.loss_mask.end()),
            std::vector<int32_t>(5, 0));
  EXPECT_EQ(sample.status, Sample::Status::kTruncated);
  EXPECT_EQ(sample.metrics["tool_calls"], 1);
  EXPECT_EQ(sample.metrics["turns"], 1);
}

TEST(CalculatorGenerate, ATurnThatSpendsTheBudgetGetsNoAnswer) {
  const std::string first = "<calc>1+1</calc>";
  Sample sample = fresh_sample();
  ScriptedContext context = run(sample, {{first}}, static_cast<int64_t>(first.size()));
  EXPECT_TRUE(context.observations.empty());
  EXPECT_EQ(sample.response, first);
  EXPECT_EQ(sample.status, Sample::Status::kTruncated);
  EXPECT_EQ(sample.metrics["tool_calls"], 0);
  EXPECT_EQ(sample.metrics["turns"], 1);

  // Cut inside the call: there is no call to answer.
  Sample cut = fresh_sample();
  context = run(cut, {{"<calc>1+1</calc>"}}, 12);
  EXPECT_TRUE(context.observations.empty());
  EXPECT_EQ(cut.response, "<calc>1+1</c");
  EXPECT_EQ(cut.metrics["tool_calls"], 0);
}

TEST(CalculatorGenerate, ARamblingTurnIsCutAtTheTurnCapAndEndsTheSample) {
  Sample sample = fresh_sample();
  ScriptedContext context = run(sample, {{std::string(600, 'x') + "<calc>1+1</calc>"}});
  EXPECT_EQ(sample.response_length, 512);
  EXPECT_TRUE(context.observations.empty());
  EXPECT_EQ(sample.status, Sample::Status::kCompleted);  // the budget was not spent
  EXPECT_EQ(sample.metrics["turns"], 1);
}

TEST(CalculatorGenerate, AnAbortedTurnEndsTheCallAndAContinuedSampleResumesIt) {
  Sample sample = fresh_sample();
  const Turn aborted("working: <calc>12*", "", Sample::Status::kAborted);
  ScriptedContext first = run(sample, {aborted, {"never written"}});
  EXPECT_EQ(first.turns_taken(), 1u);
  EXPECT_TRUE(first.observations.empty());
  EXPECT_EQ(sample.status, Sample::Status::kAborted);
  EXPECT_EQ(sample.metrics["turns"], 1);
  EXPECT_EQ(sample.metrics["tool_calls"], 0);

  // A partial rollout continues the sample: the turn goes on where it stopped, and the call it
  // began before the abort is answered.
  sample.status = Sample::Status::kPending;
  ScriptedContext second = run(sample, {{"12</calc>"}, {" so 144"}});
  EXPECT_EQ(second.observations, std::vector<std::string>{"<result>144</result>"});
  EXPECT_EQ(sample.response, "working: <calc>12*12</calc><result>144</result> so 144");
  EXPECT_EQ(sample.metrics["turns"], 2);  // the resumed turn is the first one, not a new one
  EXPECT_EQ(sample.metrics["tool_calls"], 1);
  EXPECT_EQ(sample.status, Sample::Status::kCompleted);
}

TEST(CalculatorGenerate, LoadsOnlyAsAGenerateFunction) {
  EXPECT_EQ(calculator().kind(), plugin::Kind::kGenerate);
  EXPECT_CONTAINS(ooze::testing::error_message_of<PluginError>([] {
                    PluginFunction::load(kSpec, plugin::Kind::kReward, "--custom-rm-path");
                  }),
                  "--custom-rm-path");
}

// ---- end to end: a rollout through the manager against real engines ----

// The C++ plugin and its Python twin (examples/multi_turn/calculator_generate.py) alike.
class CalculatorGenerateRollout : public ::testing::TestWithParam<std::string> {};

INSTANTIATE_TEST_SUITE_P(CppAndPython, CalculatorGenerateRollout,
                         ::testing::Values(kSpec,
                                           std::string(OOZE_SOURCE_DIR) +
                                               "/examples/multi_turn/"
                                               "calculator_generate.py:calculator_generate"));

TEST_P(CalculatorGenerateRollout, EverySampleOfARolloutIsConsistent) {
  testing::ServedEngines engines(2);
  std::vector<std::string> lines;
  for (int i = 0; i < 6; ++i) {
    lines.push_back(
        nlohmann::json{{"input", "Use <calc>EXPR</calc>. What is " + std::to_string(i) + "*7? "},
                       {"label", std::to_string(i * 7)}}
            .dump());
  }
  PromptDatasetOptions data_options;
  data_options.path = testing::write_lines("calculator.jsonl", lines);
  data_options.label_key = "label";
  auto data = std::make_shared<const PromptDataset>(data_options, engines.tokenizer());
  PromptSource source(data);
  RewardOptions reward_options;
  reward_options.rm_type = "math";
  RewardModel rewards(reward_options);

  RolloutOptions options;
  options.rollout_batch_size = 3;
  options.n_samples_per_prompt = 2;
  options.progress_interval_s = 0;
  options.custom_generate_function_path = GetParam();
  options.sampling.max_response_len = 24;
  options.sampling.stop = {"</calc>"};
  RolloutManager manager(options, source, engines.router(), engines.tokenizer(), rewards);
  const RolloutResult result = manager.generate(0);

  ASSERT_EQ(result.groups.size(), 3u);
  for (size_t g = 0; g < result.groups.size(); ++g) {
    ASSERT_EQ(result.groups[g].size(), 2u);
    for (const Sample& sample : result.groups[g]) {
      const Prompt& prompt = data->at(static_cast<int64_t>(g));
      const auto response = static_cast<size_t>(sample.response_length);
      ASSERT_GT(sample.response_length, 0);
      EXPECT_LE(sample.response_length, 24);
      ASSERT_EQ(sample.tokens.size(), prompt.tokens.size() + response);
      EXPECT_EQ(std::vector<int64_t>(sample.tokens.begin(),
                                     sample.tokens.begin() + sample.prompt_length()),
                prompt.tokens);
      ASSERT_EQ(sample.loss_mask.size(), response);
      ASSERT_EQ(sample.rollout_log_probs.size(), response);
      ASSERT_EQ(sample.weight_versions.size(), response);
      // Policy tokens carry the engine's log-prob and version; observations neither, and every
      // run of them spells (the start of) a tool answer.
      int64_t observations = 0;
      for (size_t i = 0; i < response; ++i) {
        if (sample.loss_mask[i] == 1) {
          EXPECT_LE(sample.rollout_log_probs[i], 0.0f);
          EXPECT_EQ(sample.weight_versions[i], 0);
          continue;
        }
        EXPECT_EQ(sample.loss_mask[i], 0);
        EXPECT_EQ(sample.rollout_log_probs[i], 0.0f);
        EXPECT_EQ(sample.weight_versions[i], -1);
        if (i == 0 || sample.loss_mask[i - 1] == 1) {
          ++observations;
          size_t end = i;
          while (end < response && sample.loss_mask[end] == 0) ++end;
          const auto first = sample.tokens.begin() + sample.prompt_length();
          const std::string text = engines.tokenizer().decode(std::vector<int64_t>(
              first + static_cast<std::ptrdiff_t>(i), first + static_cast<std::ptrdiff_t>(end)));
          // Whole, or cut by the budget at the end of the response.
          const std::string open = "<result>";
          EXPECT_TRUE(text.rfind(open, 0) == 0 || (end == response && open.rfind(text, 0) == 0))
              << text;
        }
      }
      EXPECT_TRUE(sample.status == Sample::Status::kCompleted ||
                  sample.status == Sample::Status::kTruncated)
          << to_string(sample.status);
      const int64_t turns = sample.metrics.at("turns").get<int64_t>();
      const int64_t tool_calls = sample.metrics.at("tool_calls").get<int64_t>();
      EXPECT_EQ(tool_calls, observations);
      EXPECT_GE(turns, 1);
      EXPECT_GE(turns, tool_calls);
      EXPECT_LE(turns, tool_calls + 1);
      EXPECT_TRUE(sample.reward.is_number());
    }
  }
  EXPECT_GE(result.metrics.at("rollout/turns"), 1.0);
  EXPECT_EQ(result.metrics.count("rollout/tool_calls"), 1u);
}

}  // namespace multi_turn_example_test
}  // namespace ooze::rollout
