// `ooze tokenize`, driven through run_tokenize_command with std::cin/std::cout/std::cerr
// redirected. The toy byte-level tokenizer makes the expected ids plain byte values.
#include "launcher/tokenize_command.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/byte_level_tokenizer.h"
#include "tests/support/process.h"

namespace tokenize_command_test {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct RunResult {
  int code = -1;
  std::vector<std::string> lines;  // stdout, one entry per line
  std::string errors;              // stderr
};

RunResult run(const std::vector<std::string>& args, const std::string& input) {
  std::istringstream in(input);
  std::ostringstream out, err;
  std::streambuf* old_in = std::cin.rdbuf(in.rdbuf());
  std::streambuf* old_out = std::cout.rdbuf(out.rdbuf());
  std::streambuf* old_err = std::cerr.rdbuf(err.rdbuf());
  RunResult result;
  try {
    result.code = ooze::launcher::run_tokenize_command(args);
  } catch (...) {
    std::cin.rdbuf(old_in);
    std::cout.rdbuf(old_out);
    std::cerr.rdbuf(old_err);
    throw;
  }
  std::cin.rdbuf(old_in);
  std::cout.rdbuf(old_out);
  std::cerr.rdbuf(old_err);
  std::istringstream lines(out.str());
  for (std::string line; std::getline(lines, line);) result.lines.push_back(line);
  result.errors = err.str();
  return result;
}

std::vector<int64_t> byte_ids(const std::string& text) {
  return std::vector<int64_t>(reinterpret_cast<const unsigned char*>(text.data()),
                              reinterpret_cast<const unsigned char*>(text.data()) + text.size());
}

class TokenizeCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ooze::testing::make_temp_dir("tokenize-command");
    ooze::models::write_byte_level_tokenizer(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(TokenizeCommandTest, EncodesTextLines) {
  const RunResult result =
      run({"--tokenizer", dir_}, "{\"text\": \"hi\"}\n{\"text\": \"<|im_end|>\\u00e9\"}\n");
  EXPECT_EQ(result.code, 0) << result.errors;
  ASSERT_EQ(result.lines.size(), 2u);
  EXPECT_EQ(json::parse(result.lines[0]), json({{"ids", {104, 105}}}));
  EXPECT_EQ(json::parse(result.lines[1]), json({{"ids", {258, 0xC3, 0xA9}}}));
}

TEST_F(TokenizeCommandTest, RendersMessagesWithTheTokenizersChatTemplate) {
  const std::string line =
      R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}]})";
  const RunResult result =
      run({"--tokenizer", dir_, "--chat-template", "--add-generation-prompt"}, line + "\n");
  EXPECT_EQ(result.code, 0) << result.errors;
  ASSERT_EQ(result.lines.size(), 1u);
  std::vector<int64_t> expected;
  for (const auto& [role, content] :
       {std::pair<std::string, std::string>{"system", "S"}, {"user", "hi"}}) {
    expected.push_back(257);  // <|im_start|>
    for (int64_t id : byte_ids(role + "\n" + content)) expected.push_back(id);
    expected.push_back(258);  // <|im_end|>
    expected.push_back('\n');
  }
  expected.push_back(257);
  for (int64_t id : byte_ids("assistant\n")) expected.push_back(id);
  EXPECT_EQ(json::parse(result.lines[0]), json({{"ids", expected}}));

  // A template chosen by name.
  const RunResult llama = run({"--tokenizer", dir_, "--chat-template", "llama3"},
                              R"({"messages": [{"role": "user", "content": " x "}]})"
                              "\n");
  EXPECT_EQ(llama.code, 0) << llama.errors;
  ASSERT_EQ(llama.lines.size(), 1u);
  EXPECT_EQ(json::parse(llama.lines[0])["ids"],
            json(byte_ids("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nx"
                          "<|eot_id|>")));
}

TEST_F(TokenizeCommandTest, DecodesIds) {
  const RunResult result =
      run({"--tokenizer", dir_, "--decode"},
          "{\"ids\": [104, 105, 258]}\n{\"ids\": [228, 104]}\n{\"ids\": []}\n");
  EXPECT_EQ(result.code, 0) << result.errors;
  ASSERT_EQ(result.lines.size(), 3u);
  EXPECT_EQ(json::parse(result.lines[0]), json({{"text", "hi<|im_end|>"}}));
  // Half a character is written as U+FFFD.
  EXPECT_EQ(json::parse(result.lines[1]), json({{"text", "\xEF\xBF\xBDh"}}));
  EXPECT_EQ(json::parse(result.lines[2]), json({{"text", ""}}));
  const RunResult skipped = run({"--tokenizer", dir_, "--decode", "--skip-special-tokens"},
                                "{\"ids\": [257, 104, 258]}\n");
  EXPECT_EQ(json::parse(skipped.lines.at(0)), json({{"text", "h"}}));
}

TEST_F(TokenizeCommandTest, BadLinesAreReportedAndTheRestIsProcessed) {
  const RunResult result = run({"--tokenizer", dir_},
                               "{\"text\": \"a\"}\n"
                               "{\"text\": \n"
                               "\n"
                               "{\"messages\": []}\n"
                               "[1, 2]\n"
                               "{\"text\": \"b\"}\n");
  EXPECT_EQ(result.code, 1);
  ASSERT_EQ(result.lines.size(), 6u);
  EXPECT_EQ(json::parse(result.lines[0]), json({{"ids", {'a'}}}));
  EXPECT_NE(json::parse(result.lines[1])["error"].get<std::string>().find("line 2"),
            std::string::npos);
  EXPECT_EQ(result.lines[2], "");  // a blank line stays blank
  EXPECT_NE(json::parse(result.lines[3])["error"].get<std::string>().find("--chat-template"),
            std::string::npos);
  EXPECT_NE(json::parse(result.lines[4])["error"].get<std::string>().find("line 5"),
            std::string::npos);
  EXPECT_EQ(json::parse(result.lines[5]), json({{"ids", {'b'}}}));
  EXPECT_NE(result.errors.find("line 2"), std::string::npos);
  EXPECT_NE(result.errors.find("line 4"), std::string::npos);
  EXPECT_NE(result.errors.find("line 5"), std::string::npos);

  const RunResult decode = run({"--tokenizer", dir_, "--decode"},
                               "{\"ids\": [1, 259]}\n{\"ids\": [\"a\"]}\n{\"text\": \"x\"}\n");
  EXPECT_EQ(decode.code, 1);
  ASSERT_EQ(decode.lines.size(), 3u);
  EXPECT_NE(decode.lines[0].find("outside the vocabulary"), std::string::npos);
  EXPECT_NE(decode.lines[1].find("integers"), std::string::npos);
  EXPECT_NE(decode.lines[2].find("ids"), std::string::npos);

  const RunResult roles = run({"--tokenizer", dir_, "--chat-template", "chatml"},
                              R"({"messages": [{"role": "function", "content": "42"}]})"
                              "\n"
                              R"({"messages": [{"role": "user"}]})"
                              "\n");
  EXPECT_EQ(roles.code, 1);
  ASSERT_EQ(roles.lines.size(), 2u);
  EXPECT_NE(roles.lines[0].find("role 'function'"), std::string::npos);
  EXPECT_NE(roles.lines[1].find("messages[0].content"), std::string::npos);
}

TEST_F(TokenizeCommandTest, BadArgumentsThrow) {
  EXPECT_THROW(run({}, ""), ooze::ConfigError);
  EXPECT_THROW(run({"--tokenizer"}, ""), ooze::ConfigError);
  EXPECT_THROW(run({"--tokenizer", dir_, "--frobnicate"}, ""), ooze::ConfigError);
  EXPECT_THROW(run({"--tokenizer", dir_, "--decode", "--chat-template"}, ""), ooze::ConfigError);
  EXPECT_THROW(run({"--tokenizer", dir_, "--chat-template", "nope"}, ""), ooze::ConfigError);
  EXPECT_THROW(run({"--tokenizer", dir_ + "/missing"}, ""), ooze::IoError);
}

}  // namespace tokenize_command_test
