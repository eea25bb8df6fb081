// parse_tool_calls on completions in the Hermes/Qwen and Llama 3.1 syntaxes the chat templates
// teach, including the round trip that makes multi-turn tool use byte-exact: a parsed completion,
// rendered back as an assistant message through its template, reproduces the model's own text.
// tool_call_hold_from: what a stream holds back while a call may be coming.
#include "models/tool_call_parser.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "models/chat_template.h"

namespace tool_call_parser_test {

using ooze::models::ChatMessage;
using ooze::models::ChatTemplate;
using ooze::models::parse_tool_calls;
using ooze::models::ParsedToolCalls;
using ooze::models::tool_call_hold_from;
using ooze::models::ToolCall;

constexpr size_t npos = std::string::npos;

const ChatTemplate& qwen3() {
  static const ChatTemplate chat = ChatTemplate::from_name("qwen3");
  return chat;
}

std::optional<ParsedToolCalls> parse(const std::string& completion) {
  return parse_tool_calls(completion, qwen3());
}

void expect_call(const ToolCall& call, const std::string& name, const std::string& arguments) {
  EXPECT_EQ(call.name, name);
  EXPECT_EQ(call.arguments, arguments);
}

TEST(ToolCallParserTest, OneCall) {
  const auto parsed = parse(
      "<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expression\": \"2+3\"}}\n</tool_call>");
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->content, "");
  ASSERT_EQ(parsed->calls.size(), 1u);
  expect_call(parsed->calls[0], "calc", "{\"expression\": \"2+3\"}");
}

TEST(ToolCallParserTest, ContentThenSeveralCalls) {
  const auto parsed = parse(
      "  I will look both up.\n\n"
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Zürich\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"calc\", \"arguments\": {}}\n</tool_call>");
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->content, "I will look both up.");
  ASSERT_EQ(parsed->calls.size(), 2u);
  expect_call(parsed->calls[0], "get_weather", "{\"city\": \"Zürich\"}");
  expect_call(parsed->calls[1], "calc", "{}");
}

TEST(ToolCallParserTest, WhitespaceAroundAndInsideBlocks) {
  // No newlines inside the block, extra ones, tabs, and JSON spacing of any kind: the arguments
  // keep the model's spacing.
  const auto parsed = parse(
      "<tool_call>{\"name\":\"a\",\"arguments\":{\"x\":1}}</tool_call>"
      "<tool_call>\n\n\t {\n  \"name\" : \"b\" ,\n  \"arguments\" :\n {\"y\": [1, 2]} "
      "\n}\t\n</tool_call>"
      "\n\n");
  ASSERT_TRUE(parsed);
  ASSERT_EQ(parsed->calls.size(), 2u);
  expect_call(parsed->calls[0], "a", "{\"x\":1}");
  expect_call(parsed->calls[1], "b", "{\"y\": [1, 2]}");
  // Content trimmed as Python's strip() trims it (an ideographic space is whitespace there).
  const auto spaced =
      parse("\xE3\x80\x80 ok \n<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>");
  ASSERT_TRUE(spaced);
  EXPECT_EQ(spaced->content, "ok");
}

TEST(ToolCallParserTest, ArgumentsNotLastAreWrittenAsTojson) {
  // "arguments" before "name": its text cannot be cut out as the last member, so it is written
  // the way the template's tojson would (Python's separators, key order kept).
  const auto parsed =
      parse("<tool_call>{\"arguments\": {\"b\":1.50,\"a\":\"é\"}, \"name\": \"f\"}</tool_call>");
  ASSERT_TRUE(parsed);
  ASSERT_EQ(parsed->calls.size(), 1u);
  expect_call(parsed->calls[0], "f", "{\"b\": 1.5, \"a\": \"é\"}");
  // Last, with an escaped key and strings holding braces and quotes: cut out byte for byte.
  const auto escaped = parse(
      "<tool_call>{\"name\": \"f\", \"argument\\u0073\": {\"s\": \"}{\\\"]\", \"n\": {\"m\": []}}}"
      "</tool_call>");
  ASSERT_TRUE(escaped);
  expect_call(escaped->calls[0], "f", "{\"s\": \"}{\\\"]\", \"n\": {\"m\": []}}");
}

TEST(ToolCallParserTest, TextBetweenAndAfterTheCallsIsDropped) {
  // As SGLang's Hermes parser does: only the text before the first call is content.
  const auto parsed = parse(
      "Sure.<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call> and then "
      "<tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>\nDone, waiting.");
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->content, "Sure.");
  ASSERT_EQ(parsed->calls.size(), 2u);
  EXPECT_EQ(parsed->calls[1].name, "b");
}

TEST(ToolCallParserTest, NoCallsOrMalformedBlocksMeanPlainContent) {
  EXPECT_FALSE(parse("Just an answer: 5."));
  EXPECT_FALSE(parse(""));
  // One malformed block makes the whole completion plain content.
  const std::string good = "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>";
  for (const std::string bad : {
           "<tool_call>{\"name\": \"a\", \"arguments\": {}</tool_call>",       // not JSON
           "<tool_call>{\"arguments\": {}}</tool_call>",                       // no name
           "<tool_call>{\"name\": 7, \"arguments\": {}}</tool_call>",          // name not a string
           "<tool_call>{\"name\": \"a\"}</tool_call>",                         // no arguments
           "<tool_call>{\"name\": \"a\", \"arguments\": \"{}\"}</tool_call>",  // arguments a string
           "<tool_call>{\"name\": \"a\", \"arguments\": [1]}</tool_call>",     // arguments an array
           "<tool_call>[\"a\", {}]</tool_call>",                               // not an object
           "<tool_call>{\"name\": \"a\", \"arguments\": {}} extra</tool_call>",  // text after it
           "<tool_call></tool_call>",                                            // empty
           "<tool_call>{\"name\": \"a\", \"arguments\": {}}",                    // unclosed
       }) {
    EXPECT_FALSE(parse(bad)) << bad;
    EXPECT_FALSE(parse(good + "\n" + bad)) << bad;
  }
  EXPECT_TRUE(parse(good));
}

TEST(ToolCallParserTest, Llama3HasNoToolSyntax) {
  EXPECT_FALSE(parse_tool_calls("<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>",
                                ChatTemplate::from_name("llama3")));
  EXPECT_TRUE(parse_tool_calls("<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>",
                               ChatTemplate::from_name("chatml")));
}

TEST(ToolCallParserTest, RenderingTheParsedCallsReproducesTheModelText) {
  // The model's turn after the think block, exactly as sampled.
  const std::string model_text =
      "<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expression\": \"2+3\"}}\n</tool_call>";
  const auto parsed = parse(model_text);
  ASSERT_TRUE(parsed);
  ChatMessage assistant{"assistant", parsed->content, std::nullopt, parsed->calls};
  const std::vector<ChatMessage> messages = {{"user", "What is 2+3?", std::nullopt, {}}, assistant};
  EXPECT_EQ(qwen3().render(messages, false),
            "<|im_start|>user\nWhat is 2+3?<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\n" +
                model_text + "<|im_end|>\n");
  // With content and two calls, the template's newlines reproduce the model's too.
  const std::string two =
      "Checking.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\":[1, {\"y\": \"東\"}]}}\n"
      "</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>";
  const auto parsed_two = parse(two);
  ASSERT_TRUE(parsed_two);
  ChatMessage second{"assistant", parsed_two->content, std::nullopt, parsed_two->calls};
  EXPECT_EQ(qwen3().render({messages[0], second}, false),
            "<|im_start|>user\nWhat is 2+3?<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\n" +
                two + "<|im_end|>\n");
}

// ---- Llama 3.1 -----------------------------------------------------------------------------

const ChatTemplate& llama31() {
  static const ChatTemplate chat = ChatTemplate::from_name("llama3.1");
  return chat;
}

TEST(ToolCallParserTest, Llama31OneCallIsTheWholeCompletion) {
  auto parsed = parse_tool_calls(
      " {\"name\": \"calc\", \"parameters\": {\"expression\":\"2+3\"}}\n", llama31());
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->content, "");
  ASSERT_EQ(parsed->calls.size(), 1u);
  expect_call(parsed->calls[0], "calc", "{\"expression\":\"2+3\"}");  // the model's spacing
  // "arguments" is taken for "parameters"; text before <|python_tag|> is content.
  parsed = parse_tool_calls(
      "Let me check.<|python_tag|>{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Zürich\"}}",
      llama31());
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->content, "Let me check.");
  ASSERT_EQ(parsed->calls.size(), 1u);
  expect_call(parsed->calls[0], "get_weather", "{\"city\": \"Zürich\"}");
  // Hermes blocks are not Llama 3.1's syntax.
  EXPECT_FALSE(parse_tool_calls(
      "<tool_call>\n{\"name\": \"calc\", \"arguments\": {}}\n</tool_call>", llama31()));
}

TEST(ToolCallParserTest, Llama31AnythingElseIsContent) {
  for (const char* text : {
           "The answer is 5.",
           "The answer is {\"name\": \"calc\", \"parameters\": {}}",
           "{\"name\": \"calc\"}",
           "{\"name\": \"calc\", \"parameters\": \"2+3\"}",
           "{\"name\": 7, \"parameters\": {}}",
           "{\"name\": \"calc\", \"parameters\": {\"expression\": ",
           "{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {}}",
           "{\"name\": \"a\", \"parameters\": {}} and then some",
           "<|python_tag|>brave_search.call(query=\"weather\")",
       }) {
    EXPECT_FALSE(parse_tool_calls(text, llama31())) << text;
  }
}

TEST(ToolCallParserTest, Llama31RenderingTheParsedCallReproducesTheModelText) {
  const std::string model_text =
      "{\"name\": \"calc\", \"parameters\": {\"expression\": \"2+3\", \"precision\": 0.5}}";
  const auto parsed = parse_tool_calls(model_text, llama31());
  ASSERT_TRUE(parsed);
  const std::vector<ChatMessage> messages = {
      {"user", "What is 2+3?", std::nullopt, {}},
      {"assistant", parsed->content, std::nullopt, parsed->calls}};
  const std::string rendered = llama31().render(messages, false);
  const std::string turn =
      "<|start_header_id|>assistant<|end_header_id|>\n\n" + model_text + "<|eot_id|>";
  EXPECT_EQ(rendered.substr(rendered.size() - turn.size()), turn);
}

TEST(ToolCallParserTest, StreamsHoldBackWhatMayBecomeACall) {
  EXPECT_EQ(tool_call_hold_from("Sure.", qwen3()), npos);
  EXPECT_EQ(tool_call_hold_from("Sure.<tool_c", qwen3()), 5u);
  EXPECT_EQ(tool_call_hold_from("Sure.<tool_call>\n{\"na", qwen3()), 5u);
  EXPECT_EQ(tool_call_hold_from("{\"name\"", qwen3()), npos);
  EXPECT_EQ(tool_call_hold_from("{\"name\"", ChatTemplate::from_name("llama3")), npos);
  // Llama 3.1: a call is the whole completion, so whitespace and an opening '{' are held.
  EXPECT_EQ(tool_call_hold_from("", llama31()), 0u);
  EXPECT_EQ(tool_call_hold_from(" \n", llama31()), 0u);
  EXPECT_EQ(tool_call_hold_from("\n{\"name\": \"ca", llama31()), 0u);
  EXPECT_EQ(tool_call_hold_from("The {", llama31()), npos);
  EXPECT_EQ(tool_call_hold_from("Sure <|python", llama31()), 5u);
  EXPECT_EQ(tool_call_hold_from("Sure <|python_tag|>{", llama31()), 5u);
}

}  // namespace tool_call_parser_test
