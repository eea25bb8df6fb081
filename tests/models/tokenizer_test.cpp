// Unit tests of the byte-level BPE tokenizer on tiny hand-written tokenizer.json files whose
// merges can be followed by hand, plus the UTF-8 helpers and the toy byte-level tokenizer.
#include "models/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "models/byte_level_tokenizer.h"
#include "models/unicode_utils.h"
#include "tests/support/process.h"

namespace tokenizer_test {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ooze::models::Tokenizer;
using Ids = std::vector<int64_t>;

const char* kQwenPattern = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|)"
                           R"( ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// GPT-2's byte-to-unicode table, written out again here from its definition.
std::string byte_char(int byte) {
  int code_point = byte;
  const bool printable =
      (byte >= 33 && byte <= 126) || (byte >= 161 && byte <= 172) || (byte >= 174 && byte <= 255);
  if (!printable) {
    int n = 0;
    for (int b = 0; b < byte; ++b) {
      if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))) ++n;
    }
    code_point = 256 + n;
  }
  std::string out;
  if (code_point < 0x80) {
    out += static_cast<char>(code_point);
  } else {
    out += static_cast<char>(0xC0 | (code_point >> 6));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  }
  return out;
}

// Byte ids are deliberately not the byte values, so a mix-up shows.
int64_t byte_id(unsigned char byte) { return (byte + 7) % 256; }

// A tiny byte-level BPE: 256 byte tokens plus these merges, in rank order:
//   h e -> he (256), t he -> the (257), Ġ t -> Ġt (258), Ġt he -> Ġthe (259),
//   a a -> aa (260), aa aa -> aaaa (261), l l -> ll (262)
json tiny_tokenizer_json() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = byte_id(static_cast<unsigned char>(b));
  const std::string space = byte_char(' ');
  vocab["he"] = 256;
  vocab["the"] = 257;
  vocab[space + "t"] = 258;
  vocab[space + "the"] = 259;
  vocab["aa"] = 260;
  vocab["aaaa"] = 261;
  vocab["ll"] = 262;
  json merges =
      json::array({json::array({"h", "e"}), json::array({"t", "he"}), json::array({space, "t"}),
                   json::array({space + "t", "he"}), json::array({"a", "a"}),
                   json::array({"aa", "aa"}), json::array({"l", "l"})});
  return json{{"version", "1.0"},
              {"added_tokens", json::array()},
              {"normalizer", {{"type", "NFC"}}},
              {"pre_tokenizer",
               {{"type", "Sequence"},
                {"pretokenizers", json::array({{{"type", "Split"},
                                                {"pattern", {{"Regex", kQwenPattern}}},
                                                {"behavior", "Isolated"},
                                                {"invert", false}},
                                               {{"type", "ByteLevel"},
                                                {"add_prefix_space", false},
                                                {"trim_offsets", false},
                                                {"use_regex", false}}})}}},
              {"post_processor", nullptr},
              {"decoder", {{"type", "ByteLevel"}}},
              {"model",
               {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"ignore_merges", false},
                {"vocab", vocab},
                {"merges", merges}}}};
}

json added(int64_t id, const std::string& content, bool special, bool normalized = false) {
  return json{{"id", id},          {"content", content}, {"single_word", false},
              {"lstrip", false},   {"rstrip", false},    {"normalized", normalized},
              {"special", special}};
}

Tokenizer make(const json& tokenizer_json, const json& config = json::object()) {
  return Tokenizer(tokenizer_json, config, "/tiny");
}

Ids bytes_ids(const std::string& text) {
  Ids ids;
  for (unsigned char c : text) ids.push_back(byte_id(c));
  return ids;
}

Ids concat(std::initializer_list<Ids> parts) {
  Ids all;
  for (const Ids& part : parts) all.insert(all.end(), part.begin(), part.end());
  return all;
}

// Expects `body` to throw E whose message contains every one of `parts`.
template <typename E, typename F>
void expect_error(F body, std::initializer_list<std::string> parts) {
  try {
    body();
    ADD_FAILURE() << "no exception; expected one mentioning " << *parts.begin();
  } catch (const E& e) {
    for (const std::string& part : parts) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "message: " << e.what() << "\nmissing: " << part;
    }
  }
}

TEST(BpeTokenizerTest, ByteLevelTableMatchesGpt2Definition) {
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(ooze::models::byte_level_token(std::string(1, static_cast<char>(b))), byte_char(b))
        << "byte " << b;
  }
}

TEST(BpeTokenizerTest, MergesApplyInRankOrder) {
  const Tokenizer tokenizer = make(tiny_tokenizer_json());
  // "the" -> t h e -> t he (rank 0) -> the (rank 1).
  EXPECT_EQ(tokenizer.encode("the"), Ids({257}));
  // " the" -> Ġ t h e -> Ġ t he (rank 0); then t+he (rank 1) beats Ġ+t (rank 2), and
  // Ġ+the has no merge, so "Ġthe" is never reached.
  EXPECT_EQ(tokenizer.encode(" the"), Ids({byte_id(' '), 257}));
  // "hello" -> he l l o -> he ll o.
  EXPECT_EQ(tokenizer.encode("hello"), Ids({256, 262, byte_id('o')}));
  // The pre-tokenizer splits "the then" into "the" and " then".
  EXPECT_EQ(tokenizer.encode("the then"), Ids({257, byte_id(' '), 257, byte_id('n')}));
}

TEST(BpeTokenizerTest, EqualRanksMergeLeftmostFirst) {
  const Tokenizer tokenizer = make(tiny_tokenizer_json());
  EXPECT_EQ(tokenizer.encode("aaa"), Ids({260, byte_id('a')}));
  EXPECT_EQ(tokenizer.encode("aaaa"), Ids({261}));
  // a a a a a -> aa a a a -> aa aa a -> aaaa a
  EXPECT_EQ(tokenizer.encode("aaaaa"), Ids({261, byte_id('a')}));
}

TEST(BpeTokenizerTest, LongPiecesMergeCorrectly) {
  const Tokenizer tokenizer = make(tiny_tokenizer_json());
  // 100,001 letters: pairs of pairs, one "a" left over.
  const Ids ids = tokenizer.encode(std::string(100001, 'a'));
  ASSERT_EQ(ids.size(), 25001u);
  for (size_t i = 0; i + 1 < ids.size(); ++i) ASSERT_EQ(ids[i], 261) << i;
  EXPECT_EQ(ids.back(), byte_id('a'));
  // Long runs of spaces and of punctuation are single pieces with no merges.
  EXPECT_EQ(tokenizer.encode(std::string(50000, ' ')), Ids(50000, byte_id(' ')));
  EXPECT_EQ(tokenizer.encode(std::string(50000, '!')), Ids(50000, byte_id('!')));
  EXPECT_EQ(tokenizer.encode(std::string(50000, '7')), Ids(50000, byte_id('7')));
}

TEST(BpeTokenizerTest, EmptyTextAndEmptyIds) {
  const Tokenizer tokenizer = make(tiny_tokenizer_json());
  EXPECT_TRUE(tokenizer.encode("").empty());
  EXPECT_EQ(tokenizer.decode({}), "");
}

TEST(BpeTokenizerTest, DecodeGivesBackTheExactBytes) {
  const Tokenizer tokenizer = make(tiny_tokenizer_json());
  for (const std::string text :
       {"the then hello", "  \t\r\n x\n\n", "日本語のテキスト", "😀👍🏽 👨‍👩‍👧",
        "a's 'LL x", "int main() { return 0; }", "123456789"}) {
    EXPECT_EQ(tokenizer.decode(tokenizer.encode(text)), text);
  }
  // Tokens split across a character: decode returns the raw bytes, here half of "é".
  EXPECT_EQ(tokenizer.decode({byte_id(0xC3)}), "\xC3");
}

TEST(BpeTokenizerTest, NfcNormalizesBeforeSplitting) {
  const Tokenizer tokenizer = make(tiny_tokenizer_json());
  // e + COMBINING ACUTE becomes U+00E9, whose UTF-8 is C3 A9.
  EXPECT_EQ(tokenizer.encode("e\xCC\x81"), Ids({byte_id(0xC3), byte_id(0xA9)}));
  EXPECT_EQ(tokenizer.decode(tokenizer.encode("e\xCC\x81")), "\xC3\xA9");
  // Hangul jamo compose into a syllable: U+1100 U+1161 -> U+AC00 (EA B0 80).
  EXPECT_EQ(tokenizer.encode("\xE1\x84\x80\xE1\x85\xA1"),
            Ids({byte_id(0xEA), byte_id(0xB0), byte_id(0x80)}));
}

TEST(BpeTokenizerTest, InvalidUtf8IsEncodedByteForByte) {
  const Tokenizer tokenizer = make(tiny_tokenizer_json());
  const std::string cases[] = {
      "he\xFFllo",  // a byte that is never UTF-8
      "\xE4\xB8"
      "a",                 // a truncated 3-byte character
      "\xC0\xAF",          // an overlong "/"
      "\xED\xA0\x80",      // a surrogate
      "\x80\x80\x80 the",  // stray continuation bytes
      "e\xCC\x81\xFF"
      "e\xCC\x81",  // valid text on both sides is still normalized
  };
  for (const std::string& text : cases) {
    const Ids ids = tokenizer.encode(text);
    EXPECT_FALSE(ids.empty());
    if (text.find("\xCC\x81") == std::string::npos) {
      EXPECT_EQ(tokenizer.decode(ids), text);
    }
  }
  // The invalid byte is a piece of its own: merges do not reach across it.
  EXPECT_EQ(tokenizer.encode("he\xFFllo"), Ids({256, byte_id(0xFF), 262, byte_id('o')}));
  EXPECT_EQ(tokenizer.decode(tokenizer.encode("e\xCC\x81\xFF"
                                              "e\xCC\x81")),
            "\xC3\xA9\xFF\xC3\xA9");
}

TEST(BpeTokenizerTest, SpecialTokensAreMatchedBeforeBpe) {
  json file = tiny_tokenizer_json();
  file["added_tokens"] = json::array(
      {added(300, "<|end|>", true), added(301, "<|end|>x", true), added(302, "<think>", false)});
  const Tokenizer tokenizer = make(file);
  // Adjacent to text on both sides; the longest token wins where two start at one place.
  EXPECT_EQ(tokenizer.encode("the<|end|>the"), Ids({257, 300, 257}));
  EXPECT_EQ(tokenizer.encode("the<|end|>xthe"), Ids({257, 301, 257}));
  EXPECT_EQ(tokenizer.encode("<|end|><|end|>"), Ids({300, 300}));
  EXPECT_EQ(tokenizer.encode(" <|end|> "), Ids({byte_id(' '), 300, byte_id(' ')}));
  // A partial token is plain text.
  EXPECT_EQ(tokenizer.encode("<|end|"), bytes_ids("<|end|"));
  EXPECT_EQ(tokenizer.encode("<think>the</think>"), concat({{302, 257}, bytes_ids("</think>")}));
  // Special tokens are skipped on request; non-special added tokens are kept.
  const Ids ids = tokenizer.encode("<think>a<|end|>");
  EXPECT_EQ(tokenizer.decode(ids), "<think>a<|end|>");
  EXPECT_EQ(tokenizer.decode(ids, /*skip_special_tokens=*/true), "<think>a");
  EXPECT_TRUE(tokenizer.is_special(300));
  EXPECT_FALSE(tokenizer.is_special(302));
  EXPECT_FALSE(tokenizer.is_special(257));
  // Invalid UTF-8 right next to a special token.
  EXPECT_EQ(tokenizer.encode("\xE4<|end|>\xB8"), Ids({byte_id(0xE4), 300, byte_id(0xB8)}));
}

TEST(BpeTokenizerTest, AddedTokenStripAndSingleWordFlags) {
  json file = tiny_tokenizer_json();
  json mask = added(300, "<mask>", true);
  mask["lstrip"] = true;
  json right = added(301, "<r>", true);
  right["rstrip"] = true;
  json word = added(302, "tok", false);
  word["single_word"] = true;
  file["added_tokens"] = json::array({mask, right, word});
  const Tokenizer tokenizer = make(file);
  // lstrip swallows the whitespace on the left (all of it, of any Unicode kind).
  EXPECT_EQ(tokenizer.encode("a <mask>"), Ids({byte_id('a'), 300}));
  EXPECT_EQ(tokenizer.encode("a \t\xE3\x80\x80<mask>b"), Ids({byte_id('a'), 300, byte_id('b')}));
  // rstrip swallows the whitespace on the right.
  EXPECT_EQ(tokenizer.encode("<r>  \n b"), Ids({301, byte_id('b')}));
  EXPECT_EQ(tokenizer.encode("a <r>"), Ids({byte_id('a'), byte_id(' '), 301}));
  // single_word: only where no word character touches it.
  EXPECT_EQ(tokenizer.encode("a tok b"),
            Ids({byte_id('a'), byte_id(' '), 302, byte_id(' '), byte_id('b')}));
  EXPECT_EQ(tokenizer.encode("tok,"), Ids({302, byte_id(',')}));
  EXPECT_EQ(tokenizer.encode("atok"), bytes_ids("atok"));
  EXPECT_EQ(tokenizer.encode("toké"), concat({bytes_ids("tok"), bytes_ids("é")}));
  EXPECT_EQ(tokenizer.encode("tok_"), bytes_ids("tok_"));
}

TEST(BpeTokenizerTest, NormalizedAddedTokensMatchNormalizedText) {
  json file = tiny_tokenizer_json();
  // U+00E9 written precomposed; the input writes it decomposed.
  file["added_tokens"] = json::array({added(300, "\xC3\xA9", false, /*normalized=*/true),
                                      added(301, "o\xCC\x88", false, /*normalized=*/false)});
  const Tokenizer tokenizer = make(file);
  EXPECT_EQ(tokenizer.encode("xe\xCC\x81y"), Ids({byte_id('x'), 300, byte_id('y')}));
  EXPECT_EQ(tokenizer.encode("x\xC3\xA9y"), Ids({byte_id('x'), 300, byte_id('y')}));
  // A non-normalized token is matched in the raw text only: the raw decomposed form matches,
  // the precomposed U+00F6 does not.
  EXPECT_EQ(tokenizer.encode("o\xCC\x88"), Ids({301}));
  EXPECT_EQ(tokenizer.encode("\xC3\xB6"), Ids({byte_id(0xC3), byte_id(0xB6)}));
}

TEST(BpeTokenizerTest, IgnoreMergesTakesWholeWordsFromTheVocabulary) {
  json file = tiny_tokenizer_json();
  file["model"]["ignore_merges"] = true;
  const Tokenizer tokenizer = make(file);
  // " the" is in the vocabulary as one token, though the merges would not produce it.
  EXPECT_EQ(tokenizer.encode(" the"), Ids({259}));
  EXPECT_EQ(tokenizer.encode("hello"), Ids({256, 262, byte_id('o')}));
}

TEST(BpeTokenizerTest, Gpt2StyleByteLevelPreTokenizer) {
  json file = tiny_tokenizer_json();
  file["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  const Tokenizer tokenizer = make(file);
  // add_prefix_space: "the" is encoded as " the"; GPT-2's regex keeps the space with the word.
  EXPECT_EQ(tokenizer.encode("the"), Ids({byte_id(' '), 257}));
  EXPECT_EQ(tokenizer.encode("the  the"),
            Ids({byte_id(' '), 257, byte_id(' '), byte_id(' '), 257}));
}

TEST(BpeTokenizerTest, SplitWithRemovedBehaviourDropsTheMatches) {
  json file = tiny_tokenizer_json();
  file["pre_tokenizer"]["pretokenizers"][0] = {
      {"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Removed"}};
  const Tokenizer tokenizer = make(file);
  EXPECT_EQ(tokenizer.encode("the the"), Ids({257, 257}));
}

TEST(BpeTokenizerTest, RegexWhitespaceFollowsOniguruma) {
  // HF compiles the split regex with Oniguruma, whose Unicode \s is \t \n \v \f \r, U+0085
  // (NEL) and the Z categories; U+FEFF is not whitespace. A Split that removes \s+ shows it.
  json file = tiny_tokenizer_json();
  file["pre_tokenizer"]["pretokenizers"][0] = {
      {"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Removed"}};
  const Tokenizer tokenizer = make(file);
  EXPECT_EQ(tokenizer.encode("a\xC2\x85"
                             "b"),
            Ids({byte_id('a'), byte_id('b')}));
  EXPECT_EQ(tokenizer.encode("a\xE3\x80\x80\xE2\x80\xA8\x0B"
                             "b"),
            Ids({byte_id('a'), byte_id('b')}));
  EXPECT_EQ(tokenizer.encode("a\xEF\xBB\xBF"
                             "b"),
            Ids({byte_id('a'), byte_id(0xEF), byte_id(0xBB), byte_id(0xBF), byte_id('b')}));
  EXPECT_EQ(tokenizer.encode("a\x1C"
                             "b"),
            Ids({byte_id('a'), byte_id(0x1C), byte_id('b')}));
}

TEST(BpeTokenizerTest, MergesAsStringsAreAccepted) {
  json file = tiny_tokenizer_json();
  json merges = json::array();
  for (const json& pair : file["model"]["merges"]) {
    merges.push_back(pair[0].get<std::string>() + " " + pair[1].get<std::string>());
  }
  file["model"]["merges"] = merges;
  EXPECT_EQ(make(file).encode(" the hello"),
            Ids({byte_id(' '), 257, byte_id(' '), 256, 262, byte_id('o')}));
}

TEST(BpeTokenizerTest, VocabularyLookups) {
  json file = tiny_tokenizer_json();
  file["added_tokens"] = json::array({added(300, "<|end|>", true)});
  const Tokenizer tokenizer = make(file);
  EXPECT_EQ(tokenizer.vocab_size(), 301);
  EXPECT_EQ(tokenizer.token_to_id("he"), 256);
  EXPECT_EQ(tokenizer.token_to_id(byte_char(' ') + "the"), 259);
  EXPECT_EQ(tokenizer.token_to_id("<|end|>"), 300);
  EXPECT_FALSE(tokenizer.token_to_id("nope").has_value());
  EXPECT_EQ(tokenizer.id_to_token(258), byte_char(' ') + "t");
  EXPECT_EQ(tokenizer.id_to_token(300), "<|end|>");
  EXPECT_FALSE(tokenizer.id_to_token(299).has_value());
  EXPECT_FALSE(tokenizer.id_to_token(-1).has_value());
  // Ids that name no token decode to nothing, as in HF.
  EXPECT_EQ(tokenizer.decode({257, 299, 100000, -5, 257}), "thethe");
}

TEST(BpeTokenizerTest, SpecialIdsComeFromTheConfig) {
  json file = tiny_tokenizer_json();
  file["added_tokens"] = json::array(
      {added(300, "<|end|>", true), added(301, "<|pad|>", true), added(302, "<|bos|>", true)});
  const json config = {{"eos_token", "<|end|>"},
                       {"pad_token", {{"content", "<|pad|>"}, {"__type", "AddedToken"}}},
                       {"bos_token", "<|bos|>"},
                       {"chat_template", "{{ x }}"}};
  const Tokenizer tokenizer = make(file, config);
  EXPECT_EQ(tokenizer.eos_token_id(), 300);
  EXPECT_EQ(tokenizer.pad_token_id(), 301);
  EXPECT_EQ(tokenizer.bos_token_id(), 302);
  EXPECT_EQ(tokenizer.bos_token(), "<|bos|>");
  EXPECT_EQ(tokenizer.chat_template(), "{{ x }}");
  const Tokenizer bare = make(file, {{"bos_token", nullptr}});
  EXPECT_FALSE(bare.eos_token_id().has_value());
  EXPECT_FALSE(bare.bos_token_id().has_value());
  EXPECT_TRUE(bare.chat_template().empty());
  const json listed = {{"chat_template", json::array({{{"name", "tool_use"}, {"template", "A"}},
                                                      {{"name", "default"}, {"template", "B"}}})}};
  EXPECT_EQ(make(file, listed).chat_template(), "B");
}

TEST(BpeTokenizerTest, ConcurrentEncodingGivesTheSameIds) {
  const Tokenizer tokenizer = make(tiny_tokenizer_json());
  std::string text;
  for (int i = 0; i < 300; ++i) text += "the hello aaaaa then " + std::to_string(i) + "\n";
  const Ids expected = tokenizer.encode(text);
  std::vector<Ids> results(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) results[t] = tokenizer.encode(text);
    });
  }
  for (auto& thread : threads) thread.join();
  for (const Ids& ids : results) EXPECT_EQ(ids, expected);
}

TEST(BpeTokenizerTest, MalformedFilesNameTheFileAndField) {
  using ooze::FormatError;
  auto with = [](auto edit) {
    json file = tiny_tokenizer_json();
    edit(file);
    return file;
  };
  expect_error<FormatError>([&] { make(with([](json& f) { f["model"].erase("vocab"); })); },
                            {"/tiny/tokenizer.json", "model.vocab"});
  expect_error<FormatError>(
      [&] {
        make(with([](json& f) { f["model"]["merges"].push_back({"q", "z"}); }));
      },
      {"/tiny/tokenizer.json", "model.merges[7]", "\"qz\"", "not in model.vocab"});
  expect_error<FormatError>([&] { make(with([](json& f) { f["model"]["merges"][0] = "h e x"; })); },
                            {"model.merges[0]"});
  expect_error<FormatError>([&] { make(with([](json& f) { f["model"]["type"] = "WordPiece"; })); },
                            {"model.type", "WordPiece"});
  expect_error<FormatError>([&] { make(with([](json& f) { f["model"]["dropout"] = 0.1; })); },
                            {"model.dropout"});
  expect_error<FormatError>([&] { make(with([](json& f) { f["normalizer"]["type"] = "NFKC"; })); },
                            {"normalizer", "NFKC"});
  expect_error<FormatError>(
      [&] {
        make(with([](json& f) { f["pre_tokenizer"] = {{"type", "Whitespace"}}; }));
      },
      {"pre_tokenizer", "Whitespace"});
  expect_error<FormatError>([&] { make(with([](json& f) { f["pre_tokenizer"] = nullptr; })); },
                            {"pre_tokenizer", "ByteLevel"});
  expect_error<FormatError>(
      [&] {
        make(with([](json& f) {
          f["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
        }));
      },
      {"pre_tokenizer.pretokenizers[0].pattern.Regex", "(unclosed"});
  expect_error<FormatError>(
      [&] {
        make(with([](json& f) {
          f["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "MergedWithPrevious";
        }));
      },
      {"pretokenizers[0].behavior", "MergedWithPrevious"});
  expect_error<FormatError>(
      [&] {
        make(with([](json& f) { f["decoder"] = {{"type", "WordPiece"}}; }));
      },
      {"decoder", "WordPiece"});
  expect_error<FormatError>(
      [&] {
        make(with([](json& f) { f["added_tokens"] = json::array({{{"id", 5}}}); }));
      },
      {"added_tokens[0].content"});
  expect_error<FormatError>(
      [&] {
        make(tiny_tokenizer_json(), {{"eos_token", "<|nope|>"}});
      },
      {"/tiny/tokenizer_config.json", "eos_token", "<|nope|>"});
  expect_error<FormatError>(
      [&] {
        make(tiny_tokenizer_json(), {{"pad_token", 5}});
      },
      {"tokenizer_config.json", "pad_token"});
}

TEST(BpeTokenizerTest, LoadTokenizerReportsMissingAndBrokenFiles) {
  const std::string dir = ooze::testing::make_temp_dir("tokenizer-test");
  expect_error<ooze::IoError>([&] { ooze::models::load_tokenizer(dir); }, {"tokenizer.json", dir});
  std::ofstream(dir + "/tokenizer.json") << "{\"model\": ";
  expect_error<ooze::FormatError>([&] { ooze::models::load_tokenizer(dir); },
                                  {dir + "/tokenizer.json", "not valid JSON"});
  std::ofstream(dir + "/tokenizer.json") << tiny_tokenizer_json().dump();
  std::ofstream(dir + "/tokenizer_config.json") << "[1, 2";
  expect_error<ooze::FormatError>([&] { ooze::models::load_tokenizer(dir); },
                                  {dir + "/tokenizer_config.json"});
  // Without tokenizer_config.json: no special ids; chat_template.jinja is picked up.
  fs::remove(dir + "/tokenizer_config.json");
  std::ofstream(dir + "/chat_template.jinja") << "{{ messages }}";
  const Tokenizer tokenizer = ooze::models::load_tokenizer(dir);
  EXPECT_FALSE(tokenizer.eos_token_id().has_value());
  EXPECT_EQ(tokenizer.chat_template(), "{{ messages }}");
  EXPECT_EQ(tokenizer.encode("the"), Ids({257}));
  fs::remove_all(dir);
}

// UTF-8 helpers, checked against the Unicode standard's maximal-subpart examples.
TEST(UnicodeUtilsTest, LossyConversionReplacesMaximalSubparts) {
  using ooze::models::utf8_lossy;
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8_lossy("abc"), "abc");
  EXPECT_EQ(utf8_lossy("\xE4\xB8"
                       "a"),
            fffd + "a");                                      // one truncated character
  EXPECT_EQ(utf8_lossy("\xF0\x80\x80"), fffd + fffd + fffd);  // F0 80 is not a prefix
  EXPECT_EQ(utf8_lossy("\xF1\x80\x80"), fffd);                // a truncated 4-byte character
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), fffd + fffd + fffd);  // a surrogate
  EXPECT_EQ(utf8_lossy("\xC0\xAF"), fffd + fffd);             // an overlong form
  EXPECT_EQ(utf8_lossy("\xF4\x90\x80\x80"), fffd + fffd + fffd + fffd);  // above U+10FFFF
  EXPECT_EQ(utf8_lossy("\xFF"
                       "\xC3\xA9"),
            fffd + "\xC3\xA9");
  EXPECT_TRUE(ooze::models::is_valid_utf8("\xF0\x9F\x98\x80"));
  EXPECT_FALSE(ooze::models::is_valid_utf8("\xF0\x9F\x98"));
}

TEST(ByteLevelTokenizerTest, RoundTripsArbitraryBytes) {
  const std::string dir = ooze::testing::make_temp_dir("byte-tokenizer");
  ooze::models::write_byte_level_tokenizer(dir);
  const Tokenizer tokenizer = ooze::models::load_tokenizer(dir);
  EXPECT_EQ(tokenizer.vocab_size(), ooze::models::kByteLevelVocabSize);
  EXPECT_EQ(tokenizer.token_to_id("<|endoftext|>"), 256);
  EXPECT_EQ(tokenizer.token_to_id("<|im_start|>"), 257);
  EXPECT_EQ(tokenizer.token_to_id("<|im_end|>"), 258);
  EXPECT_EQ(tokenizer.eos_token_id(), 258);
  EXPECT_EQ(tokenizer.pad_token_id(), 256);
  EXPECT_FALSE(tokenizer.bos_token_id().has_value());

  std::mt19937_64 rng(1234);
  for (int round = 0; round < 200; ++round) {
    std::string bytes(rng() % 300, '\0');
    for (char& c : bytes) c = static_cast<char>(rng() & 0xFF);
    Ids expected;
    for (unsigned char c : bytes) expected.push_back(c);
    ASSERT_EQ(tokenizer.encode(bytes), expected) << "round " << round;
    ASSERT_EQ(tokenizer.decode(expected), bytes);
  }
  // Not normalized: decomposed text stays decomposed.
  EXPECT_EQ(tokenizer.encode("e\xCC\x81"), Ids({'e', 0xCC, 0x81}));
  EXPECT_EQ(tokenizer.encode("<|im_start|>hi<|im_end|>"), Ids({257, 'h', 'i', 258}));
  EXPECT_EQ(tokenizer.decode({257, 'h', 'i', 258}, /*skip_special_tokens=*/true), "hi");
  fs::remove_all(dir);
}

TEST(ByteLevelTokenizerTest, WritingAgainReplacesTheFilesAndLeavesNothingElse) {
  const std::string dir = ooze::testing::make_temp_dir("byte-tokenizer-again");
  ooze::models::write_byte_level_tokenizer(dir);
  std::ifstream first_file(dir + "/tokenizer.json");
  const json first = json::parse(first_file);
  ooze::models::write_byte_level_tokenizer(dir);
  std::ifstream second_file(dir + "/tokenizer.json");
  EXPECT_EQ(json::parse(second_file), first);
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"tokenizer.json", "tokenizer_config.json"}));
  fs::remove_all(dir);
}

TEST(ByteLevelTokenizerTest, FailedWriteNamesTheFileAndLeavesNoTemporary) {
  const std::string dir = ooze::testing::make_temp_dir("byte-tokenizer-blocked");
  fs::create_directory(dir + "/tokenizer.json");  // the rename over it must fail
  try {
    ooze::models::write_byte_level_tokenizer(dir);
    FAIL() << "expected IoError";
  } catch (const ooze::IoError& e) {
    EXPECT_NE(std::string(e.what()).find(dir + "/tokenizer.json"), std::string::npos) << e.what();
  }
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  EXPECT_EQ(names, std::vector<std::string>{"tokenizer.json"});
  fs::remove_all(dir);
}

}  // namespace tokenizer_test
