// The built-in reward rules on text beyond ASCII, checked against Python itself: the rules'
// Python originals lower-case, split and read numbers with Python's str rules, so
// /usr/bin/python3 (python_str_rules.py, standard library only) computes what every case here
// must score, float() of number texts, and the per-character tables python_unicode.h must
// agree with. Each case also states its score, so a disagreement says which side moved.
#include <gtest/gtest.h>
#include <unicode/uchar.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "rollout/rewards/builtin_rewards.h"
#include "rollout/rewards/f1_reward.h"
#include "rollout/rewards/python_unicode.h"
#include "rollout/rewards/reward_text.h"
#include "rollout/sample.h"
#include "tests/support/process.h"

namespace ooze::rollout {
namespace reward_unicode_test {

namespace fs = std::filesystem;
using nlohmann::json;

const char* const kPython = "/usr/bin/python3";

struct Case {
  std::string response;
  std::string label;
  double expected;
};

const std::vector<Case> kF1Cases = {
    {"ZÜRICH", "Zürich", 1},
    {"ＡＢＣ", "ａｂｃ", 1},            // fullwidth letters have lower cases too
    {"İstanbul", "i\u0307stanbul", 1},  // İ lower-cases to i + combining dot
    {"İstanbul", "istanbul", 0},
    {"ΟΔΟΣ", "οδος", 1},  // a final capital sigma becomes ς
    {"ΟΔΟΣ", "οδοσ", 0},
    {"Straße", "STRASSE", 0},                // lower(), not casefold()
    {"New\u00a0York", "new york", 1},        // no-break space
    {"東京\u3000タワー", "東京 タワー", 1},  // ideographic space
    {"thin\u2009space", "thin space", 1},
    {"x\x1cy", "x y", 1},                  // \x1c-\x1f are whitespace to Python
    {"zero\u200bwidth", "zero width", 0},  // a zero-width space is not
    {"yes\u3000", "Yes", 1},
    {"the—answer", "—answer", 1},  // \b before a dash: the article goes
    {"l’a maison", "l’ maison", 1},
    {"a\u0301 b", "\u0301 b", 1},   // a combining accent is not a word character
    {"٤ apples", "4 apples", 0.5},  // F1 compares tokens, not numbers
};

const std::vector<Case> kMathCases = {
    {"\\boxed{４}", "4", 1},
    {"\\boxed{٤}", "4", 1},
    {"\\boxed{४}", "4", 1},
    {"\\boxed{１２}", "12", 1},
    {"\\boxed{12}", "１２", 1},
    {"\\boxed{𝟒𝟐}", "42", 1},  // mathematical bold digits, outside the BMP
    {"\\boxed{-４}", "-4", 1},
    {"\\boxed{３.０}", "3", 1},
    {"\\boxed{１,０００}", "1000", 1},
    {"\\boxed{1,٠٠٠}", "1000", 1},
    {"\\boxed{\u00a04\u3000}", "4", 1},
    {"\\boxed{３.５}", "3.5", 0},  // no integer: left to the symbolic check, which rejects ３
    {"\\boxed{٣٫٥}", "3.5", 0},    // the Arabic decimal separator is not a point
    {"\\boxed{x+３}", "３+x", 0},
    {"\\boxed{４}", "5", 0},
    {"\\boxed{²}", "2", 0},  // a superscript is a digit to str.isdigit, but not to int()
    {"\\boxed{Ⅳ}", "4", 0},  // a Roman numeral has a value, but is no decimal digit
};

const std::vector<Case> kDeepscalerCases = {
    {"<think>6 * 7</think> so \\boxed{٤٢}", "42", 1},
    {"<think>\\boxed{4}</think> \\boxed{５}", "4", 0},
    {"</think>\\boxed{４}", "\\boxed{4}", 1},
};

const std::vector<Case> kDapoCases = {
    {"Answer: 42", "４２", 1},
    {"Answer: ４２", "42", -1},  // predictions are compared as text
    {"Answer: 1000", "１,０００", 1},
    {"Answer: 4", "٤.٠", 1},
    {"Answer: 3", "３.５", 1},  // the label is int(float(...))
    {"Answer: 12", "\u00a012", 1},
};

const std::vector<std::string> kFloatTexts = {
    "４",
    "٤٢",
    "１２",
    "３.５",
    "-１e２",
    "+４.５e-１",
    "𝟒",
    "\u00a04\u3000",
    "\u20004",
    "\u00854",
    "\u00a0",
    "²",
    "Ⅳ",
    "٣٫٥",
    "4\u200b",
    "\x1c"
    "4",
    "1.5",
    "x",
};

std::string utf8(int code_point) {
  std::string out;
  const auto c = static_cast<uint32_t>(code_point);
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
  return out;
}

json pairs(const std::vector<Case>& cases) {
  json out = json::array();
  for (const Case& c : cases) out.push_back({c.response, c.label});
  return out;
}

double score(const std::string& type, const Case& c) {
  Sample sample;
  sample.response = c.response;
  sample.label = c.label;
  const json reward = score_builtin_reward(type, sample);
  return reward.is_object() ? reward.at("score").get<double>() : reward.get<double>();
}

class RewardUnicodeTest : public ::testing::Test {
 protected:
  // Python runs once for the suite: about a second to walk every code point.
  static void SetUpTestSuite() {
    if (!fs::exists(kPython)) return;
    const fs::path dir = ::ooze::testing::make_temp_dir("reward-unicode");
    const json cases = {{"float", kFloatTexts},
                        {"f1", pairs(kF1Cases)},
                        {"math", pairs(kMathCases)},
                        {"deepscaler", pairs(kDeepscalerCases)},
                        {"dapo", pairs(kDapoCases)}};
    std::ofstream(dir / "cases.json") << cases.dump();
    ::ooze::testing::Process python(
        {kPython, (fs::path(__FILE__).parent_path() / "python_str_rules.py").string(),
         (dir / "cases.json").string(), (dir / "out.json").string()},
        {}, (dir / "log.txt").string());
    const ::ooze::testing::ExitStatus status = python.wait(std::chrono::seconds(120));
    if (!status.exited || status.code != 0) {
      python_error_ = status.describe() + "\n" + python.output();
    } else {
      std::ifstream in(dir / "out.json");
      python_ = json::parse(in);
    }
    fs::remove_all(dir);
  }

  void SetUp() override {
    if (!fs::exists(kPython)) GTEST_SKIP() << "no " << kPython << " to compute the expected values";
    ASSERT_TRUE(python_error_.empty()) << python_error_;
  }

  // Python's scores for one rule, next to the stated ones and ooze's.
  static void expect_rule(const std::string& type, const std::vector<Case>& cases) {
    const json& expected = python_.at(type);
    ASSERT_EQ(expected.size(), cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      const std::string context = type + ": response '" + c.response + "', label '" + c.label + "'";
      EXPECT_NEAR(expected[i].get<double>(), c.expected, 1e-12) << "Python gives " << context;
      EXPECT_NEAR(score(type, c), c.expected, 1e-12) << "ooze gives " << context;
    }
  }

  static json python_;
  static std::string python_error_;
};

json RewardUnicodeTest::python_;
std::string RewardUnicodeTest::python_error_;

TEST_F(RewardUnicodeTest, CharacterRulesMatchPython) {
  // Code points both Python's Unicode database and ICU's know: the versions may differ.
  const std::string version = python_.at("unicode_version").get<std::string>();
  UVersionInfo python_version;
  u_versionFromString(python_version, version.c_str());
  std::vector<bool> assigned(0x110000, false);
  for (const json& range : python_.at("assigned")) {
    for (int cp = range[0].get<int>(); cp <= range[1].get<int>(); ++cp) assigned[cp] = true;
  }
  std::vector<bool> space(0x110000, false), digit(0x110000, false), word(0x110000, false);
  std::vector<int> decimal(0x110000, -1);
  for (const json& cp : python_.at("space")) space[cp.get<int>()] = true;
  for (const json& cp : python_.at("digit")) digit[cp.get<int>()] = true;
  for (const json& entry : python_.at("decimal"))
    decimal[entry[0].get<int>()] = entry[1].get<int>();
  for (const json& range : python_.at("word")) {
    for (int cp = range[0].get<int>(); cp <= range[1].get<int>(); ++cp) word[cp] = true;
  }
  std::unordered_map<int, std::string> lower;
  for (const json& entry : python_.at("lower")) lower[entry[0].get<int>()] = entry[1];

  int compared = 0;
  std::vector<std::string> mismatches;
  const auto mismatch = [&](int cp, const std::string& what) {
    std::ostringstream line;
    line << "U+" << std::hex << std::uppercase << cp << " (" << utf8(cp) << "): " << what;
    mismatches.push_back(line.str());
  };
  for (int cp = 0; cp < 0x110000; ++cp) {
    if (!assigned[cp] || u_charType(cp) == U_UNASSIGNED) continue;
    UVersionInfo age;
    u_charAge(cp, age);
    if (std::memcmp(age, python_version, sizeof(age)) > 0) continue;
    ++compared;
    const std::string text = utf8(cp);
    if (is_python_space(cp) != space[cp]) mismatch(cp, "isspace");
    if (python_decimal_value(cp) != decimal[cp]) mismatch(cp, "decimal value");
    if (is_python_digit(cp) != digit[cp]) mismatch(cp, "isdigit");
    if (is_python_word(cp) != word[cp]) mismatch(cp, "re \\w");
    const auto found = lower.find(cp);
    if (python_lower(text) != (found == lower.end() ? text : found->second)) {
      mismatch(cp, "lower() gives '" + python_lower(text) + "'");
    }
  }
  EXPECT_GT(compared, 100000) << "Unicode " << version;
  std::string first;
  for (size_t i = 0; i < mismatches.size() && i < 20; ++i) first += mismatches[i] + "\n";
  EXPECT_TRUE(mismatches.empty()) << mismatches.size() << " code points differ from Python "
                                  << version << ", the first:\n"
                                  << first;
}

TEST_F(RewardUnicodeTest, FloatReadsDigitsOfAnyScript) {
  const json& expected = python_.at("float");
  ASSERT_EQ(expected.size(), kFloatTexts.size());
  for (size_t i = 0; i < kFloatTexts.size(); ++i) {
    const std::optional<double> value = parse_python_float(kFloatTexts[i]);
    if (expected[i].is_null()) {
      EXPECT_FALSE(value.has_value()) << "'" << kFloatTexts[i] << "' reads as " << *value;
    } else {
      ASSERT_TRUE(value.has_value()) << "'" << kFloatTexts[i] << "' is " << expected[i];
      EXPECT_EQ(*value, expected[i].get<double>()) << "'" << kFloatTexts[i] << "'";
    }
  }
}

TEST_F(RewardUnicodeTest, F1LowerCasesAndSplitsAsPython) { expect_rule("f1", kF1Cases); }

TEST_F(RewardUnicodeTest, MathReadsDecimalDigitsOfAnyScript) {
  expect_rule("math", kMathCases);
  expect_rule("deepscaler", kDeepscalerCases);
}

TEST_F(RewardUnicodeTest, DapoReadsLabelsOfAnyScript) { expect_rule("dapo", kDapoCases); }

}  // namespace reward_unicode_test
}  // namespace ooze::rollout
