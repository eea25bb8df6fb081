// `ooze tokenize`: encode or decode JSON lines with a model directory's tokenizer, so users can
// inspect their data and tests can drive the tokenizer from outside.
//
//   ooze tokenize --tokenizer DIR [--chat-template [NAME]] [--add-generation-prompt]
//                 [--no-thinking] [--decode] [--skip-special-tokens]
//
// `--chat-template` alone (or `--chat-template auto`) uses DIR's own template.
//
// Reads stdin line by line and writes one line to stdout per input line, flushed at once:
//   {"text": "..."}                 -> {"ids": [...]}
//   {"messages": [{"role", "content"}, ...]} (needs --chat-template; NAME is chatml, qwen3,
//       llama3 or llama3.1, or left out to use the template of DIR/tokenizer_config.json)
//                                   -> {"ids": [...]} of the rendered conversation
//   with --decode: {"ids": [...]}   -> {"text": "..."} (bytes that are not valid UTF-8, such as
//       half a character, are written as U+FFFD)
// A blank input line gives a blank output line. A line that cannot be processed gives
// {"error": "line N: ..."} on stdout (keeping the lines aligned) and the same message on
// stderr; processing continues with the next line, and the exit code is 1 if any line failed.
#pragma once

#include <string>
#include <vector>

#include "core/config.h"

namespace ooze {
namespace launcher {

// Its flags.
const ConfigSchema& tokenize_schema();

// `args` are the arguments after "tokenize". Returns the exit code. Throws ConfigError for bad
// arguments and the tokenizer's errors when DIR cannot be loaded.
int run_tokenize_command(const std::vector<std::string>& args);

}  // namespace launcher
}  // namespace ooze
