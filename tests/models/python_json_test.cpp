// python_json_dumps against Python's own json.dumps(ensure_ascii=False), run as a subprocess on
// the same values, and against outputs written by hand from Python's rules.
#include "models/python_json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/models/python_reference.h"

namespace python_json_test {

using nlohmann::ordered_json;
using ooze::models::python_json_dumps;

TEST(PythonJsonTest, WritesAsPythonDoes) {
  EXPECT_EQ(
      python_json_dumps(ordered_json::parse(R"({"b": 1, "a": [true, false, null], "c": {}})")),
      R"({"b": 1, "a": [true, false, null], "c": {}})");
  EXPECT_EQ(python_json_dumps(ordered_json::parse("[]")), "[]");
  EXPECT_EQ(python_json_dumps(ordered_json::parse("-7")), "-7");
  EXPECT_EQ(python_json_dumps(ordered_json::parse("18446744073709551615")), "18446744073709551615");
  // Floats as repr(): a decimal for integral values, exponents past 1e16 and below 1e-4.
  EXPECT_EQ(python_json_dumps(1.0), "1.0");
  EXPECT_EQ(python_json_dumps(0.5), "0.5");
  EXPECT_EQ(python_json_dumps(1e-5), "1e-05");
  EXPECT_EQ(python_json_dumps(0.0001), "0.0001");
  EXPECT_EQ(python_json_dumps(1e16), "1e+16");
  EXPECT_EQ(python_json_dumps(1234567890123456.0), "1234567890123456.0");
  EXPECT_EQ(python_json_dumps(-0.0), "-0.0");
  EXPECT_EQ(python_json_dumps(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(python_json_dumps(1.5e300), "1.5e+300");
  EXPECT_EQ(python_json_dumps(std::numeric_limits<double>::quiet_NaN()), "NaN");
  EXPECT_EQ(python_json_dumps(-std::numeric_limits<double>::infinity()), "-Infinity");
  // Strings: the quote, the backslash and control characters escaped; non-ASCII kept.
  EXPECT_EQ(python_json_dumps("a\"b\\c\n\r\t\b\f\x01\x1f\x7f/ Zürich 東京"),
            "\"a\\\"b\\\\c\\n\\r\\t\\b\\f\\u0001\\u001f\x7f/ Zürich 東京\"");
}

TEST(PythonJsonTest, MatchesPythonJsonDumps) {
  // Values of every kind, and doubles across the whole range: each goes to Python as exact
  // JSON (nlohmann writes round-trip digits) and comes back as json.dumps writes it.
  ordered_json values = ordered_json::array();
  values.push_back(ordered_json::parse(
      R"({"name": "get_weather", "description": "Wetter für eine Stadt — 天気",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"},
          "days": {"type": "integer", "minimum": 1, "maximum": 14}}, "required": ["city"]},
          "strict": true, "extra": null, "weights": [0.25, 1e-07, 3.0, -2.5e+20]})"));
  values.push_back("tab\there \"quoted\" back\\slash \x02 \x1b[0m ✓");
  std::mt19937_64 random(7);
  std::uniform_real_distribution<double> mantissa(-10.0, 10.0);
  std::uniform_int_distribution<int> exponent(-30, 30);
  for (int i = 0; i < 300; ++i)
    values.push_back(mantissa(random) * std::pow(10.0, exponent(random)));
  for (double x : {0.0, 1.0, 100.0, 1e15, 1e16, 1e17, 1e-4, 1e-5, 123456789.125, 5e-324,
                   std::numeric_limits<double>::max(), std::numeric_limits<double>::min()}) {
    values.push_back(x);
    values.push_back(-x);
  }
  std::uniform_int_distribution<uint64_t> bits;
  for (int i = 0; i < 200; ++i) {
    const uint64_t word = bits(random);
    double x;
    std::memcpy(&x, &word, sizeof(x));
    if (std::isfinite(x)) values.push_back(x);
  }

  std::string input;
  std::string expected;
  for (const ordered_json& value : values) {
    input += value.dump() + "\n";
    expected += python_json_dumps(value) + "\n";
  }
  const std::string python = ooze::testing::run_python_reference(
      "-c 'import json, sys\n"
      "for line in sys.stdin.buffer.read().decode(\"utf-8\").split(\"\\n\")[:-1]:\n"
      "    sys.stdout.buffer.write((json.dumps(json.loads(line), ensure_ascii=False) + \"\\n\")"
      ".encode(\"utf-8\"))'",
      input);
  ASSERT_FALSE(python.empty());
  // Line by line, so that a mismatch names its value.
  std::istringstream ours(expected);
  std::istringstream theirs(python);
  std::string our_line;
  std::string their_line;
  int line = 0;
  while (std::getline(ours, our_line)) {
    ASSERT_TRUE(std::getline(theirs, their_line)) << "Python wrote fewer lines";
    EXPECT_EQ(our_line, their_line) << "value " << line << ": " << values[line].dump();
    ++line;
  }
  EXPECT_EQ(line, static_cast<int>(values.size()));
}

TEST(PythonJsonTest, IndentedAsPythonJsonDumpsIndented) {
  // Llama 3.1 templates write tool definitions with tojson(indent=4).
  const ordered_json value = ordered_json::parse(
      R"({"type": "function", "function": {"name": "calc", "description": "Zürich\n",
          "parameters": {"type": "object", "properties": {"e": {"type": "string"}},
          "required": ["e"], "empty_list": [], "empty_object": {}, "nested": [[1, 2.5], {}]}}})");
  for (int indent : {0, 2, 4}) {
    const std::string python = ooze::testing::run_python_reference(
        "-c 'import json, sys\n"
        "value = json.loads(sys.stdin.buffer.read().decode(\"utf-8\"))\n"
        "sys.stdout.buffer.write(json.dumps(value, ensure_ascii=False, indent=" +
            std::to_string(indent) + ").encode(\"utf-8\"))'",
        value.dump());
    ASSERT_FALSE(python.empty());
    EXPECT_EQ(python_json_dumps(value, indent), python) << "indent " << indent;
  }
  EXPECT_EQ(python_json_dumps(ordered_json::parse("[1, {}]"), 2), "[\n  1,\n  {}\n]");
}

}  // namespace python_json_test
