// `ooze model init`: write a randomly initialised model in Hugging Face layout, so tests and
// examples get models on machines that cannot download any.
//
//   ooze model init --arch qwen3|qwen2|llama --hidden-size 256 --layers 4 --heads 4 --kv-heads 2
//                   [--head-dim N] [--intermediate-size N] [--vocab-size N] [--tie-embeddings]
//                   [--dtype float32|bfloat16] [--rope-theta X] --tokenizer qwen3|byte
//                   [--tokenizer-dir DIR] --out DIR [--seed N]
//
// The same flags and seed always write byte-identical files. `ooze model init --help` lists
// every flag with its default.
#pragma once

#include <string>
#include <vector>

#include "core/config.h"

namespace ooze::launcher {

// The flags of `ooze model init` (the experiment schema is not involved).
const ConfigSchema& model_init_schema();

// `args` are the arguments after "model": a subcommand ("init", or "gguf":
// launcher/model_gguf_command.h) and its flags. Prints a line
// naming what was written; returns the exit code (0, or 2 for a missing/unknown subcommand,
// with usage on stderr). Throws ooze::ConfigError listing every bad flag at once, and the
// errors of tokenizer loading and saving.
int run_model_command(const std::vector<std::string>& args);

}  // namespace ooze::launcher
