// What models::export_gguf refuses, before it writes anything. (What it writes is judged by
// llama.cpp itself: tests/engine/llama_cpp_reference_test.cpp.)
#include "models/gguf_export.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "core/safetensors.h"
#include "models/model_init.h"
#include "tests/support/expect_error.h"
#include "tests/support/process.h"

namespace ooze::models {
namespace gguf_export_test {

namespace fs = std::filesystem;

std::string small_model(const std::string& dir, const std::string& arch) {
  ModelInitOptions options;
  options.arch = arch;
  options.hidden_size = 32;
  options.num_layers = 1;
  options.num_heads = 2;
  options.num_kv_heads = 1;
  options.tokenizer = "byte";
  options.out_dir = dir;
  init_hf_model(options);
  return dir;
}

TEST(GgufExport, RefusesWhatItCannotWriteAndLeavesNoFile) {
  const std::string dir = ::ooze::testing::make_temp_dir("gguf-export");
  const std::string out = dir + "/out.gguf";

  const std::string llama = small_model(dir + "/llama", "llama");
  std::string message = ::ooze::testing::error_message_of<ConfigError>(
      [&] { export_gguf(llama, out, GgufType::kF32); });
  EXPECT_CONTAINS(message, "qwen3 and qwen2");
  EXPECT_CONTAINS(message, "is llama");

  // A weight llama.cpp's qwen3 has no tensor for is named, not dropped.
  const std::string extra = small_model(dir + "/extra", "qwen3");
  NamedTensors tensors;
  {
    const SafetensorsFile file = SafetensorsFile::open(extra + "/model.safetensors");
    for (const std::string& name : file.names())
      tensors.emplace_back(name, file.tensor(name).clone());
  }
  tensors.emplace_back("model.layers.0.mlp.shared_expert.weight", at::ones({8}));
  save_safetensors(extra + "/model.safetensors", tensors, {{"format", "pt"}});
  message = ::ooze::testing::error_message_of<FormatError>(
      [&] { export_gguf(extra, out, GgufType::kF16); });
  EXPECT_CONTAINS(message, "model.layers.0.mlp.shared_expert.weight");
  EXPECT_CONTAINS(message, "no tensor for");

  EXPECT_FALSE(fs::exists(out));
  fs::remove_all(dir);
}

}  // namespace gguf_export_test
}  // namespace ooze::models
