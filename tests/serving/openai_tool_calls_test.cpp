// Tools in the OpenAI chat API: requests with tools, tool calls and tool messages become the
// chat template's prompt, and completions in the template's tool-call syntax become
// message.tool_calls, whole or streamed. Completions are written here as the model would
// write them, so each case is exact.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "engine/engine.h"
#include "models/chat_template.h"
#include "models/tokenizer.h"
#include "serving/openai_protocol.h"
#include "tests/support/tiny_model.h"

namespace ooze::serving {
namespace openai_tool_calls_test {

using nlohmann::json;

const json kCalculator = {
    {"type", "function"},
    {"function",
     {{"name", "calculator"},
      {"description", "Evaluates an expression."},
      {"parameters",
       {{"type", "object"}, {"properties", {{"expression", {{"type", "string"}}}}}}}}}};

class OpenAiToolCallsTest : public ::testing::Test {
 protected:
  OpenAiToolCallsTest()
      : tokenizer_(models::load_tokenizer(testing::tiny_model_dir())),
        chat_(models::ChatTemplate::from_name("qwen3")) {
    info_.vocab_size = tokenizer_.vocab_size();
    info_.context_length = 4096;
    info_.block_size = 16;
    info_.num_blocks = 256;
  }

  OpenAiCall parse(const json& body) {
    return parse_chat_call(body, tokenizer_, &chat_, "", info_);
  }

  // The InvalidRequest field a bad body is refused with.
  std::string refused_field(const json& body) {
    try {
      parse(body);
    } catch (const engine::InvalidRequest& e) {
      return e.field();
    }
    return "(accepted)";
  }

  engine::GenerateOutput finished(const std::string& text) const {
    engine::GenerateOutput output;
    output.text = text;
    output.output_ids = tokenizer_.encode(text);
    output.finished = true;
    output.finish_reason = engine::FinishReason::kStop;
    return output;
  }

  models::Tokenizer tokenizer_;
  models::ChatTemplate chat_;
  engine::EngineInfo info_;
};

TEST_F(OpenAiToolCallsTest, ToolsToolCallsAndToolMessagesRenderThroughTheTemplate) {
  const json body = {
      {"messages",
       {{{"role", "user"}, {"content", "2+3?"}},
        {{"role", "assistant"},
         {"content", nullptr},
         {"tool_calls",
          {{{"id", "call_1"},
            {"type", "function"},
            {"function", {{"name", "calculator"}, {"arguments", "{\"expression\": \"2+3\"}"}}}}}}},
        {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "5"}}}},
      {"tools", {kCalculator}}};
  const OpenAiCall call = parse(body);
  ASSERT_EQ(call.prompt_texts.size(), 1u);
  models::ChatMessage assistant{"assistant", "", std::nullopt};
  assistant.tool_calls = {{"calculator", "{\"expression\": \"2+3\"}"}};
  nlohmann::ordered_json function;
  function["name"] = "calculator";
  function["description"] = "Evaluates an expression.";
  function["parameters"] =
      nlohmann::ordered_json::parse(kCalculator["function"]["parameters"].dump());
  nlohmann::ordered_json tool;
  tool["type"] = "function";
  tool["function"] = function;
  const std::string expected =
      chat_.render({{"user", "2+3?", std::nullopt}, assistant, {"tool", "5", std::nullopt}},
                   /*add_generation_prompt=*/true, /*enable_thinking=*/true, {tool});
  EXPECT_EQ(call.prompt_texts[0], expected);
  EXPECT_EQ(call.requests[0].input_ids, tokenizer_.encode(expected));
  EXPECT_NE(expected.find("<tools>\n{\"type\": \"function\", \"function\": {\"name\": "
                          "\"calculator\""),
            std::string::npos);
  EXPECT_NE(expected.find("<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": "
                          "\"2+3\"}}\n</tool_call>"),
            std::string::npos);
  EXPECT_NE(expected.find("<tool_response>\n5\n</tool_response>"), std::string::npos);
  EXPECT_EQ(call.tool_syntax, &chat_);

  // tool_choice "none": the model is not told of the tools, and answers are not parsed.
  json none = body;
  none["tool_choice"] = "none";
  const OpenAiCall without = parse(none);
  EXPECT_EQ(without.prompt_texts[0].find("<tools>"), std::string::npos);
  EXPECT_EQ(without.tool_syntax, nullptr);
}

TEST_F(OpenAiToolCallsTest, MalformedToolRequestsNameTheField) {
  const json user = {{"role", "user"}, {"content", "hi"}};
  EXPECT_EQ(refused_field({{"messages", {user}}, {"tools", {{{"type", "function"}}}}}),
            "tools[0].function");
  EXPECT_EQ(
      refused_field({{"messages", {user}},
                     {"tools", {{{"type", "function"}, {"function", {{"description", "x"}}}}}}}),
      "tools[0].function.name");
  EXPECT_EQ(
      refused_field({{"messages", {user}}, {"tools", {kCalculator}}, {"tool_choice", "required"}}),
      "tool_choice");
  EXPECT_EQ(
      refused_field(
          {{"messages",
            {user,
             {{"role", "assistant"},
              {"tool_calls", {{{"type", "function"}, {"function", {{"arguments", "{}"}}}}}}}}}}),
      "messages[1].tool_calls[0].function.name");
  EXPECT_EQ(
      refused_field(
          {{"messages", {{{"role", "user"}, {"content", "x"}, {"tool_calls", json::array()}}}}}),
      "messages[0].tool_calls");
  EXPECT_EQ(refused_field({{"messages", {{{"role", "robot"}, {"content", "x"}}}}}),
            "messages[0].role");
  // Llama 3 has no tool syntax.
  const models::ChatTemplate llama = models::ChatTemplate::from_name("llama3");
  try {
    parse_chat_call({{"messages", {user}}, {"tools", {kCalculator}}}, tokenizer_, &llama, "",
                    info_);
    ADD_FAILURE() << "tools were accepted with llama3";
  } catch (const engine::InvalidRequest& e) {
    EXPECT_EQ(e.field(), "tools");
  }
}

TEST_F(OpenAiToolCallsTest, ACompletionInToolCallSyntaxAnswersWithToolCalls) {
  const OpenAiCall call =
      parse({{"messages", {{{"role", "user"}, {"content", "2+3?"}}}}, {"tools", {kCalculator}}});
  const std::string text =
      "Let me compute.\n<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": "
      "\"2+3\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"calculator\", \"arguments\": "
      "{\"expression\": \"5*5\"}}\n</tool_call>";
  const json response = openai_response(call, {finished(text)}, "chatcmpl-abc", 0, "m", tokenizer_);
  const json& choice = response["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(choice["message"]["content"], "Let me compute.");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 2u);
  const json& first = choice["message"]["tool_calls"][0];
  EXPECT_EQ(first["type"], "function");
  EXPECT_EQ(first["function"]["name"], "calculator");
  EXPECT_EQ(first["function"]["arguments"], "{\"expression\": \"2+3\"}");
  EXPECT_NE(first["id"], choice["message"]["tool_calls"][1]["id"]);
  EXPECT_EQ(choice["message"]["tool_calls"][1]["function"]["arguments"],
            "{\"expression\": \"5*5\"}");

  // Malformed JSON in the block: plain content, finish_reason stop.
  const std::string broken =
      "<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\n</tool_call>";
  const json plain = openai_response(call, {finished(broken)}, "chatcmpl-abc", 0, "m", tokenizer_);
  EXPECT_EQ(plain["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(plain["choices"][0]["message"]["content"], broken);
  EXPECT_FALSE(plain["choices"][0]["message"].contains("tool_calls"));

  // Without tools in the request the same text is content.
  const OpenAiCall no_tools = parse({{"messages", {{{"role", "user"}, {"content", "2+3?"}}}}});
  const json untouched =
      openai_response(no_tools, {finished(text)}, "chatcmpl-abc", 0, "m", tokenizer_);
  EXPECT_EQ(untouched["choices"][0]["message"]["content"], text);
}

// Streams `text` a byte at a time (as cumulative outputs) and assembles the chunks.
json stream_assembled(const OpenAiCall& call, const std::string& text,
                      const models::Tokenizer& tokenizer) {
  OpenAiStream stream(call, "chatcmpl-xyz", 0, "m", tokenizer);
  json assembled = {{"content", ""}, {"tool_calls", json::array()}, {"finish_reason", nullptr}};
  for (size_t length = 1; length <= text.size(); ++length) {
    engine::GenerateOutput output;
    output.text = text.substr(0, length);
    output.finished = length == text.size();
    output.finish_reason =
        output.finished ? engine::FinishReason::kStop : engine::FinishReason::kNone;
    for (const json& chunk : stream.update(0, output)) {
      const json& choice = chunk["choices"][0];
      if (choice["delta"].contains("content")) {
        assembled["content"] =
            assembled["content"].get<std::string>() + choice["delta"]["content"].get<std::string>();
      }
      if (choice["delta"].contains("tool_calls")) {
        for (const json& entry : choice["delta"]["tool_calls"])
          assembled["tool_calls"].push_back(entry);
      }
      if (!choice["finish_reason"].is_null()) assembled["finish_reason"] = choice["finish_reason"];
    }
  }
  return assembled;
}

TEST_F(OpenAiToolCallsTest, StreamsHoldToolCallsBackUntilTheyAreWhole) {
  const OpenAiCall call = parse({{"messages", {{{"role", "user"}, {"content", "2+3?"}}}},
                                 {"tools", {kCalculator}},
                                 {"stream", true}});
  const json calls = stream_assembled(
      call,
      "Sure.\n<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": "
      "\"2+3\"}}\n</tool_call>",
      tokenizer_);
  EXPECT_EQ(calls["content"], "Sure.\n");  // nothing of the call leaked into the content
  ASSERT_EQ(calls["tool_calls"].size(), 1u);
  EXPECT_EQ(calls["tool_calls"][0]["index"], 0);
  EXPECT_EQ(calls["tool_calls"][0]["function"]["arguments"], "{\"expression\": \"2+3\"}");
  EXPECT_EQ(calls["finish_reason"], "tool_calls");

  const std::string broken = "Hmm <tool_call>\n{\"name\": oops}\n</tool_call> and more";
  const json plain = stream_assembled(call, broken, tokenizer_);
  EXPECT_EQ(plain["content"], broken);
  EXPECT_TRUE(plain["tool_calls"].empty());
  EXPECT_EQ(plain["finish_reason"], "stop");

  // "<tool" that never becomes a call is sent once it cannot.
  const json near_miss = stream_assembled(call, "a <tool is not a <tool_call", tokenizer_);
  EXPECT_EQ(near_miss["content"], "a <tool is not a <tool_call");
}

TEST_F(OpenAiToolCallsTest, Llama31CallsWholeAndStreamed) {
  const models::ChatTemplate llama = models::ChatTemplate::from_name("llama3.1");
  const json body = {{"messages", {{{"role", "user"}, {"content", "2+3?"}}}},
                     {"tools", {kCalculator}}};
  const OpenAiCall call = parse_chat_call(body, tokenizer_, &llama, "", info_);
  EXPECT_EQ(call.tool_syntax, &llama);
  const std::string text = "{\"name\": \"calculator\", \"parameters\": {\"expression\": \"2+3\"}}";
  const json response = openai_response(call, {finished(text)}, "chatcmpl-abc", 0, "m", tokenizer_);
  const json& choice = response["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_TRUE(choice["message"]["content"].is_null());
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "calculator");
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["arguments"],
            "{\"expression\": \"2+3\"}");

  json streamed_body = body;
  streamed_body["stream"] = true;
  const OpenAiCall streaming = parse_chat_call(streamed_body, tokenizer_, &llama, "", info_);
  const json calls = stream_assembled(streaming, "\n" + text, tokenizer_);
  EXPECT_EQ(calls["content"], "");  // the call's opening brace was never sent as content
  ASSERT_EQ(calls["tool_calls"].size(), 1u);
  EXPECT_EQ(calls["tool_calls"][0]["function"]["arguments"], "{\"expression\": \"2+3\"}");
  EXPECT_EQ(calls["finish_reason"], "tool_calls");
  // An answer, or JSON that is not a call, is content, whole.
  for (const std::string& plain :
       {std::string("The answer is 5."), std::string("{\"answer\": 5}"), text + " Done."}) {
    const json content = stream_assembled(streaming, plain, tokenizer_);
    EXPECT_EQ(content["content"], plain);
    EXPECT_TRUE(content["tool_calls"].empty());
    EXPECT_EQ(content["finish_reason"], "stop");
  }
}

}  // namespace openai_tool_calls_test
}  // namespace ooze::serving
