// A small random Qwen3 model in Hugging Face layout (byte-level tokenizer: ids 0..255 are
// bytes, 258 = <|im_end|> is EOS), written once per test process with ooze's own
// models::init_hf_model, for engine, server and router tests.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include "models/model_init.h"

namespace ooze::testing {

struct TinyModelShape {
  int64_t hidden_size = 64;
  int64_t num_layers = 2;
  int64_t num_heads = 4;
  int64_t num_kv_heads = 2;
  std::string dtype = "float32";
};

// The directory of a tiny model with this shape (seed 7), created on first use under the
// system temp directory, one per process and shape.
inline std::string tiny_model_dir(const TinyModelShape& shape = {}) {
  namespace fs = std::filesystem;
  const std::string name = "ooze-tiny-" + std::to_string(::getpid()) + "-" +
                           std::to_string(shape.hidden_size) + "-" +
                           std::to_string(shape.num_layers) + "-" + shape.dtype;
  const fs::path dir = fs::temp_directory_path() / name;
  if (!fs::exists(dir / "config.json")) {
    models::ModelInitOptions options;
    options.arch = "qwen3";
    options.hidden_size = shape.hidden_size;
    options.num_layers = shape.num_layers;
    options.num_heads = shape.num_heads;
    options.num_kv_heads = shape.num_kv_heads;
    options.dtype = shape.dtype;
    options.tokenizer = "byte";
    options.out_dir = dir.string();
    options.seed = 7;
    models::init_hf_model(options);
  }
  return dir.string();
}

}  // namespace ooze::testing
