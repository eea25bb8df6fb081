// `ooze model gguf`: a Hugging Face Qwen3/Qwen2 directory as a GGUF file llama.cpp loads
// (models/gguf_export.h).
//
//   ooze model gguf --model DIR --out FILE.gguf [--outtype f32|f16]
#pragma once

#include <string>
#include <vector>

#include "core/config.h"

namespace ooze::launcher {

const ConfigSchema& model_gguf_schema();

// `flags` are the arguments after "model gguf". Prints what was written; returns 0. Throws
// ConfigError for bad flags and the export's errors.
int run_model_gguf(const std::vector<std::string>& flags);

}  // namespace ooze::launcher
