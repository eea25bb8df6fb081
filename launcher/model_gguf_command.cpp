#include "launcher/model_gguf_command.h"

#include <iostream>

#include "models/gguf_export.h"

namespace ooze::launcher {
namespace {

ConfigSchema build_model_gguf_schema() {
  ConfigSchema schema;
  schema.section("model gguf");
  schema.add_string("model", "", "Hugging Face model directory (qwen3 or qwen2).").required();
  schema.add_string("out", "", "GGUF file to write (replaced atomically).").required();
  schema.add_enum("outtype", {"f32", "f16"}, "f16",
                  "Type of the matrices (llama.cpp's --outtype); norms and biases stay f32.");
  return schema;
}

}  // namespace

const ConfigSchema& model_gguf_schema() {
  static const ConfigSchema schema = build_model_gguf_schema();
  return schema;
}

int run_model_gguf(const std::vector<std::string>& flags) {
  const Config config = load_config(model_gguf_schema(), "", flags);
  const std::string model = config.get<std::string>("model"), out = config.get<std::string>("out");
  const std::string outtype = config.get<std::string>("outtype");
  const models::GgufExport written = models::export_gguf(
      model, out, outtype == "f16" ? models::GgufType::kF16 : models::GgufType::kF32);
  std::cout << "wrote " << out << " (" << written.tensors << " tensors, " << outtype << ", "
            << written.bytes << " bytes) from " << model << "\n";
  return 0;
}

}  // namespace ooze::launcher
