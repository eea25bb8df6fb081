#include "engine/output_text.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/byte_level_tokenizer.h"
#include "models/model_init.h"
#include "models/tokenizer.h"
#include "models/unicode_utils.h"
#include "tests/support/process.h"

namespace ooze::engine {
namespace output_text_test {

constexpr int64_t kImStart = 257;  // <|im_start|>, special
constexpr int64_t kImEnd = 258;    // <|im_end|>, the byte-level tokenizer's EOS

class OutputTextTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = ooze::testing::make_temp_dir("output-text");
    models::write_byte_level_tokenizer(dir);
    tokenizer_ = new models::Tokenizer(models::load_tokenizer(dir));
    std::filesystem::remove_all(dir);
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    tokenizer_ = nullptr;
  }

  static OutputText make(const SamplingParams& params) {
    return OutputText(*tokenizer_, params, {kImEnd});
  }

  // Appends each byte of `text` as its own token; expects none of them to stop the output.
  static void feed(OutputText& out, const std::string& text) {
    for (unsigned char byte : text) {
      ASSERT_FALSE(out.append(byte).has_value()) << "at byte " << static_cast<int>(byte);
    }
  }

  static models::Tokenizer* tokenizer_;
};

models::Tokenizer* OutputTextTest::tokenizer_ = nullptr;

TEST_F(OutputTextTest, TheByteTokenizerIsWhatTheseTestsAssume) {
  EXPECT_EQ(tokenizer_->eos_token_id(), kImEnd);
  EXPECT_EQ(tokenizer_->decode({'a'}), "a");
  EXPECT_EQ(tokenizer_->decode({kImStart}, false), "<|im_start|>");
  EXPECT_EQ(tokenizer_->decode({kImStart}, true), "");
}

TEST_F(OutputTextTest, PlainTextHasNoStop) {
  SamplingParams params;
  OutputText out = make(params);
  feed(out, "hello");
  EXPECT_EQ(out.num_tokens(), 5);
  EXPECT_EQ(out.text(false), "hello");
  EXPECT_EQ(out.text(true), "hello");
}

TEST_F(OutputTextTest, StopStringAcrossThreeTokensIsFoundWhenComplete) {
  SamplingParams params;
  params.stop = {"END"};
  OutputText out = make(params);
  feed(out, "abcEN");
  EXPECT_EQ(out.text(false), "abcEN");  // a partial stop string is not held back
  std::optional<StopMatch> stop = out.append('D');
  ASSERT_TRUE(stop.has_value());
  EXPECT_EQ(stop->reason, FinishReason::kStop);
  EXPECT_EQ(stop->matched_stop, "END");
  EXPECT_FALSE(stop->matched_token.has_value());
  EXPECT_EQ(out.num_tokens(), 6);
  EXPECT_EQ(out.text(true), "abc");
  EXPECT_EQ(out.text(false), "abc");
  EXPECT_THROW(out.append('x'), Error);
}

TEST_F(OutputTextTest, TextAfterTheStopStringWithinItsTokenIsDropped) {
  SamplingParams params;
  params.skip_special_tokens = false;
  params.stop = {"ab<|im"};  // ends inside the text of the <|im_start|> token
  OutputText out = make(params);
  feed(out, "xyab");
  std::optional<StopMatch> stop = out.append(kImStart);
  ASSERT_TRUE(stop.has_value());
  EXPECT_EQ(stop->matched_stop, "ab<|im");
  EXPECT_EQ(out.text(true), "xy");
}

TEST_F(OutputTextTest, EarliestStopStringWins) {
  for (const std::vector<std::string>& stops :
       {std::vector<std::string>{"de", "bcde"}, std::vector<std::string>{"bcde", "de"}}) {
    SamplingParams params;
    params.stop = stops;
    OutputText out = make(params);
    feed(out, "abcd");
    std::optional<StopMatch> stop = out.append('e');  // both complete with this byte
    ASSERT_TRUE(stop.has_value());
    EXPECT_EQ(stop->matched_stop, "bcde");
    EXPECT_EQ(out.text(true), "a");
  }
  // The one completed first stops the output, even if a longer one would start earlier.
  SamplingParams params;
  params.stop = {"bcdx", "cd"};
  OutputText out = make(params);
  feed(out, "abc");
  std::optional<StopMatch> stop = out.append('d');
  ASSERT_TRUE(stop.has_value());
  EXPECT_EQ(stop->matched_stop, "cd");
  EXPECT_EQ(out.text(true), "ab");
}

TEST_F(OutputTextTest, StopStringsMatchTheTextWithoutSkippedSpecialTokens) {
  for (bool skip : {true, false}) {
    SamplingParams params;
    params.stop = {"ab"};
    params.skip_special_tokens = skip;
    OutputText out = make(params);
    ASSERT_FALSE(out.append('a').has_value());
    ASSERT_FALSE(out.append(kImStart).has_value());
    std::optional<StopMatch> stop = out.append('b');
    EXPECT_EQ(stop.has_value(), skip);
    EXPECT_EQ(out.text(true), skip ? "" : "a<|im_start|>b");
  }
}

TEST_F(OutputTextTest, StopTokenIdsAndEos) {
  SamplingParams params;
  params.stop_token_ids = {'!'};
  {
    OutputText out = make(params);
    feed(out, "hi");
    std::optional<StopMatch> stop = out.append('!');
    ASSERT_TRUE(stop.has_value());
    EXPECT_EQ(stop->reason, FinishReason::kStop);
    EXPECT_EQ(stop->matched_token, '!');
    EXPECT_FALSE(stop->matched_stop.has_value());
    EXPECT_EQ(out.text(true), "hi");  // the stop token's own text is left out
  }
  for (bool skip : {true, false}) {
    params.skip_special_tokens = skip;
    OutputText out = make(params);
    feed(out, "hi");
    std::optional<StopMatch> stop = out.append(kImEnd);
    ASSERT_TRUE(stop.has_value());
    EXPECT_EQ(stop->matched_token, kImEnd);
    EXPECT_EQ(out.text(true), "hi");
    EXPECT_EQ(out.num_tokens(), 3);
  }
}

TEST_F(OutputTextTest, IgnoreEosKeepsStopTokenIds) {
  SamplingParams params;
  params.ignore_eos = true;
  params.skip_special_tokens = false;
  params.stop_token_ids = {kImStart};
  OutputText out = make(params);
  feed(out, "hi");
  EXPECT_FALSE(out.append(kImEnd).has_value());
  EXPECT_EQ(out.text(false), "hi<|im_end|>");
  std::optional<StopMatch> stop = out.append(kImStart);
  ASSERT_TRUE(stop.has_value());
  EXPECT_EQ(stop->matched_token, kImStart);
  EXPECT_EQ(out.text(true), "hi<|im_end|>");
}

TEST_F(OutputTextTest, MaxNewTokens) {
  SamplingParams params;
  params.max_new_tokens = 3;
  OutputText out = make(params);
  feed(out, "ab");
  std::optional<StopMatch> stop = out.append('c');
  ASSERT_TRUE(stop.has_value());
  EXPECT_EQ(stop->reason, FinishReason::kLength);
  EXPECT_FALSE(stop->matched_stop.has_value());
  EXPECT_FALSE(stop->matched_token.has_value());
  EXPECT_EQ(out.text(true), "abc");
  EXPECT_THROW(out.append('d'), Error);

  // A stop on the last allowed token is a stop, not a length finish.
  params.stop = {"bc"};
  OutputText stopped = make(params);
  feed(stopped, "ab");
  stop = stopped.append('c');
  ASSERT_TRUE(stop.has_value());
  EXPECT_EQ(stop->reason, FinishReason::kStop);
  EXPECT_EQ(stopped.text(true), "a");
}

TEST_F(OutputTextTest, SplitCharactersAreHeldBackUntilComplete) {
  SamplingParams params;
  OutputText out = make(params);
  // "a" "é" (2 bytes) "€" (3 bytes) "😀" (4 bytes), one byte per token.
  const std::string text = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80";
  const std::vector<std::string> expected = {"a",
                                             "a",
                                             "a\xC3\xA9",
                                             "a\xC3\xA9",
                                             "a\xC3\xA9",
                                             "a\xC3\xA9\xE2\x82\xAC",
                                             "a\xC3\xA9\xE2\x82\xAC",
                                             "a\xC3\xA9\xE2\x82\xAC",
                                             "a\xC3\xA9\xE2\x82\xAC",
                                             text};
  for (size_t i = 0; i < text.size(); ++i) {
    ASSERT_FALSE(out.append(static_cast<unsigned char>(text[i])).has_value());
    EXPECT_EQ(out.text(false), expected[i]) << "after byte " << i;
  }
  EXPECT_EQ(out.text(true), text);
}

TEST_F(OutputTextTest, AnUnfinishedCharacterBecomesAReplacementWhenFinished) {
  SamplingParams params;
  OutputText out = make(params);
  feed(out, "ok\xE2\x82");
  EXPECT_EQ(out.text(false), "ok");
  EXPECT_EQ(out.text(true), "ok\xEF\xBF\xBD");
}

TEST_F(OutputTextTest, BytesThatCanNeverBeACharacterAreReplacedAtOnce) {
  SamplingParams params;
  OutputText out = make(params);
  feed(out, "a\xE0\x80");  // E0 must be followed by A0..BF: no byte can complete this
  EXPECT_EQ(out.text(false), "a\xEF\xBF\xBD\xEF\xBF\xBD");
  feed(out, "\xFF");
  EXPECT_EQ(out.text(false), "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  feed(out, "\xC3");
  EXPECT_EQ(out.text(false), "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  feed(out, "\xA9");
  EXPECT_EQ(out.text(false), "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xC3\xA9");
  EXPECT_EQ(out.text(true), out.text(false));
}

TEST_F(OutputTextTest, SkipSpecialTokensInText) {
  for (bool skip : {true, false}) {
    SamplingParams params;
    params.skip_special_tokens = skip;
    OutputText out = make(params);
    ASSERT_FALSE(out.append('a').has_value());
    ASSERT_FALSE(out.append(kImStart).has_value());
    ASSERT_FALSE(out.append('b').has_value());
    EXPECT_EQ(out.text(false), skip ? "ab" : "a<|im_start|>b");
    EXPECT_EQ(out.text(true), skip ? "ab" : "a<|im_start|>b");
  }
}

TEST_F(OutputTextTest, StreamedTextIsValidAndGrowsTowardsTheDecodedOutput) {
  // Every byte value, in an order that splits and breaks characters.
  std::vector<int64_t> ids;
  for (int i = 0; i < 256; ++i) ids.push_back((i * 37 + 11) % 256);
  SamplingParams params;
  params.max_new_tokens = 1000;
  OutputText out = make(params);
  std::string previous;
  for (int64_t id : ids) {
    ASSERT_FALSE(out.append(id).has_value());
    const std::string text = out.text(false);
    ASSERT_TRUE(models::is_valid_utf8(text));
    ASSERT_EQ(text.compare(0, previous.size(), previous), 0) << "streamed text changed";
    previous = text;
  }
  EXPECT_EQ(out.text(true), models::utf8_lossy(tokenizer_->decode(ids)));
}

TEST(OutputTextQwen3Test, IncrementalTextEqualsDecodingAllIds) {
  std::string dir;
  try {
    dir = models::find_qwen3_tokenizer_dir();
  } catch (const Error& e) {
    GTEST_SKIP() << e.what();
  }
  const models::Tokenizer tokenizer = models::load_tokenizer(dir);
  const std::string sentence =
      "Grüße aus Zürich: 東京の天気は晴れ、気温は25°C です 😀👍🏽 — "
      "naïve "
      "café, "
      "Ελληνικά και русский текст.";
  const std::vector<int64_t> ids = tokenizer.encode(sentence);
  ASSERT_EQ(tokenizer.decode(ids), sentence);
  std::vector<int64_t> eos;
  if (tokenizer.eos_token_id()) eos.push_back(*tokenizer.eos_token_id());
  SamplingParams params;
  params.max_new_tokens = static_cast<int64_t>(ids.size()) + 1;
  OutputText out(tokenizer, params, eos);
  bool held_back = false;
  for (int64_t id : ids) {
    ASSERT_FALSE(out.append(id).has_value());
    const std::string text = out.text(false);
    ASSERT_TRUE(models::is_valid_utf8(text));
    ASSERT_EQ(sentence.compare(0, text.size(), text), 0) << "not a prefix: " << text;
    held_back =
        held_back ||
        text.size() <
            tokenizer.decode(std::vector<int64_t>(ids.begin(), ids.begin() + out.num_tokens()))
                .size();
  }
  EXPECT_EQ(out.text(true), tokenizer.decode(ids));
  EXPECT_EQ(out.text(false), sentence);
  // Some token of the sentence ends inside a character (the point of holding back).
  EXPECT_TRUE(held_back);
}

}  // namespace output_text_test
}  // namespace ooze::engine
