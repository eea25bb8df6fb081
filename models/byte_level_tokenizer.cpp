#include "models/byte_level_tokenizer.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"
#include "models/bpe_tokenizer.h"

namespace ooze {
namespace models {

using nlohmann::json;

namespace {

// The plain ChatML template (no default system message), in the Jinja HF tools render.
const char* kChatMLTemplate =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

const char* kSpecialTokens[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};

json added_token(int64_t id, const std::string& content) {
  return json{{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
              {"rstrip", false}, {"normalized", false}, {"special", true}};
}

}  // namespace

void write_byte_level_tokenizer(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) throw IoError("cannot create directory " + dir + ": " + error.message());

  json vocab = json::object();
  for (int byte = 0; byte < 256; ++byte) {
    vocab[byte_level_token(std::string(1, static_cast<char>(byte)))] = byte;
  }
  json added = json::array();
  for (int64_t i = 0; i < 3; ++i) added.push_back(added_token(256 + i, kSpecialTokens[i]));

  const json byte_level = {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", false},
                           {"use_regex", false}};
  json tokenizer = {{"version", "1.0"},
                    {"truncation", nullptr},
                    {"padding", nullptr},
                    {"added_tokens", added},
                    {"normalizer", nullptr},
                    {"pre_tokenizer", byte_level},
                    {"post_processor", byte_level},
                    {"decoder", byte_level},
                    {"model",
                     {{"type", "BPE"},
                      {"dropout", nullptr},
                      {"unk_token", nullptr},
                      {"continuing_subword_prefix", ""},
                      {"end_of_word_suffix", ""},
                      {"fuse_unk", false},
                      {"byte_fallback", false},
                      {"ignore_merges", false},
                      {"vocab", vocab},
                      {"merges", json::array()}}}};

  json added_tokens_decoder = json::object();
  for (const json& token : added) {
    json entry = token;
    entry.erase("id");
    added_tokens_decoder[std::to_string(token["id"].get<int64_t>())] = entry;
  }
  const json config = {{"add_bos_token", false},
                       {"add_prefix_space", false},
                       {"added_tokens_decoder", added_tokens_decoder},
                       {"additional_special_tokens", {"<|im_start|>", "<|im_end|>"}},
                       {"bos_token", nullptr},
                       {"chat_template", kChatMLTemplate},
                       {"clean_up_tokenization_spaces", false},
                       {"eos_token", "<|im_end|>"},
                       {"errors", "replace"},
                       {"model_max_length", 131072},
                       {"pad_token", "<|endoftext|>"},
                       {"split_special_tokens", false},
                       {"tokenizer_class", "PreTrainedTokenizerFast"},
                       {"unk_token", nullptr}};

  // Atomic, so a reader never sees half a file and a crash leaves no stray temporaries.
  write_file_atomically(dir + "/tokenizer.json", tokenizer.dump(2) + "\n");
  write_file_atomically(dir + "/tokenizer_config.json", config.dump(2) + "\n");
}

}  // namespace models
}  // namespace ooze
