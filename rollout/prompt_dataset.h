// The prompts of a run: a JSONL file (one JSON object per line) read whole, every line checked,
// every prompt rendered and tokenized before anything starts. The data keys and flags are
// Slime's, so a Slime dataset and command line work unchanged:
//
//   {"input": "What is 2+2?", "label": "4", "metadata": {"source": "gsm8k"}}
//   {"input": [{"role": "user", "content": "What is 2+2?"}], "label": 4}   (--apply-chat-template)
//
//   input (--input-key)        a string, used as the prompt text as it is; with
//                              --apply-chat-template a list of chat messages {role, content}
//                              (or a string, taken as one user message) rendered with the chat
//                              template and its generation prompt.
//   label (--label-key)        a string, or any other JSON kept as its JSON text ("4", "[1,2]");
//                              null is "". Not read unless --label-key is given. The built-in
//                              rewards read a list of strings as its acceptable answers and
//                              refuse data without labels (rollout/reward_label_check.h).
//   metadata (--metadata-key)  any JSON, usually an object; a string holding a JSON object or
//                              array is parsed. Absent or null: {}.
//   tools (--tool-key)         a list of tool definitions (or a string holding one), kept on the
//                              prompt and, as Slime does, in metadata["tools"]. Absent: none.
//
// Every prompt is tokenized (models::Tokenizer::encode, no special tokens added: the chat
// template writes its own). --rollout-max-prompt-len drops longer prompts and reports how many.
// Blank lines are skipped. Every problem names the file, the line and what to change; all lines
// are checked and the first few bad ones are reported together in one FormatError.
//
// A path may end in "@[start:end]" (Slime's row slice, Python slice semantics, negative indices
// from the end) to keep only those records of the file: "data.jsonl@[0:1000]".
//
// The rollout data and the eval datasets load through the same class with their own options
// (eval data names its own path and flags in `flags`).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/option_fields.h"

namespace ooze {
namespace models {
class Tokenizer;
}  // namespace models
}  // namespace ooze

namespace ooze::rollout {

struct PromptDatasetOptions {
  std::string path;  // a JSONL file, optionally with a "@[start:end]" row slice
  std::string input_key = "input";
  std::string label_key;  // "": no labels
  std::string metadata_key = "metadata";
  std::string tool_key = "tools";  // read only where a line has it; "": never
  bool apply_chat_template = false;
  std::string chat_template;    // "chatml", "qwen3", "llama3", "llama3.1"; "": the tokenizer's
  bool enable_thinking = true;  // Qwen3: false adds the empty think block to the prompt
  int64_t max_prompt_len = 0;   // prompts with more tokens are dropped; 0: no limit

  // The flags that set the fields above, as errors and logs name them. Eval datasets set
  // their own (e.g. "--eval-input-key").
  struct Flags {
    std::string path = "--prompt-data";
    std::string input_key = "--input-key";
    std::string label_key = "--label-key";
    std::string metadata_key = "--metadata-key";
    std::string tool_key = "--tool-key";
    std::string apply_chat_template = "--apply-chat-template";
    std::string max_prompt_len = "--rollout-max-prompt-len";
  };
  Flags flags;

  // --prompt-data, --input-key, --label-key, --metadata-key, --tool-key, --apply-chat-template,
  // --apply-chat-template-kwargs, --chat-template, --rollout-max-prompt-len ("data" section).
  // read() throws ConfigError for an unknown chat template name or unusable kwargs.
  static const OptionFields<PromptDatasetOptions>& fields();
};

struct Prompt {
  int64_t line = 0;             // 1-based line of the file
  std::string text;             // what the engine is given (chat template applied)
  std::vector<int64_t> tokens;  // text tokenized
  std::string label;
  nlohmann::json metadata = nlohmann::json::object();
  nlohmann::json tools = nullptr;  // null: none
};

class PromptDataset {
 public:
  // The file's prompts, in file order. Throws IoError when the file cannot be read and
  // FormatError when it has no prompts or a line is unusable (all lines are checked; the
  // message lists the first few as FILE:LINE: problem). ConfigError for an unknown chat
  // template name; FormatError when the tokenizer has no chat template ooze recognises.
  PromptDataset(PromptDatasetOptions options, const models::Tokenizer& tokenizer);

  int64_t size() const { return static_cast<int64_t>(prompts_.size()); }
  const Prompt& at(int64_t index) const;  // throws std::out_of_range
  const std::vector<Prompt>& prompts() const { return prompts_; }

  // Records (non-blank lines inside the row slice) that were read, and how many of them were
  // dropped for being longer than max_prompt_len.
  int64_t records_read() const { return records_read_; }
  int64_t dropped_too_long() const { return dropped_too_long_; }
  // The keys of the first record (sorted): what a message about a missing key lists.
  const std::vector<std::string>& first_record_keys() const { return first_record_keys_; }

  // Identifies what this dataset yields, for resume checks: the file's CRC-32 and size, the
  // options that change prompts (keys, chat template, length limit, row slice) and the prompt
  // count. The file's location is not part of it: a moved file resumes.
  const std::string& fingerprint() const { return fingerprint_; }
  const PromptDatasetOptions& options() const { return options_; }

 private:
  PromptDatasetOptions options_;
  std::vector<Prompt> prompts_;
  int64_t records_read_ = 0;
  int64_t dropped_too_long_ = 0;
  std::vector<std::string> first_record_keys_;
  std::string fingerprint_;
};

}  // namespace ooze::rollout
