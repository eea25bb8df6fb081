// A Hugging Face Qwen3 or Qwen2 directory (config.json, safetensors, tokenizer.json) as one GGUF
// file for llama.cpp: the metadata of llama.cpp's qwen3/qwen2 architectures, the byte-level BPE
// tokenizer (tokens, token types, merges, special ids) and every weight under llama.cpp's name.
// `ooze model gguf` runs it; tests load its output in llama.cpp (node-llama-cpp) and compare
// that engine's greedy tokens and log-probs with ooze's.
//
//   export_gguf("/models/Qwen3-0.6B", "/models/qwen3-0.6b-f16.gguf", GgufType::kF16);
//
// With kF16, matrices are written in float16 and vectors (norms, biases) in float32, as
// llama.cpp's own converter does. Q and K are written as they are: both use the same rotary
// layout (NEOX, rotate-half) for these architectures.
#pragma once

#include <cstdint>
#include <string>

#include "models/gguf_writer.h"

namespace ooze::models {

struct GgufExport {
  int64_t tensors = 0;
  uint64_t bytes = 0;
};

// Throws ConfigError for an architecture or setting GGUF cannot carry here (llama, rope
// scaling, a tokenizer that is not byte-level BPE), FormatError naming the tensor or file that
// does not fit, IoError for the files.
GgufExport export_gguf(const std::string& model_dir, const std::string& out_path, GgufType type);

}  // namespace ooze::models
