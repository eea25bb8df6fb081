#include "launcher/model_init_command.h"

#include <iostream>

#include "core/error.h"
#include "launcher/commands.h"
#include "launcher/model_gguf_command.h"
#include "models/model_init.h"

namespace ooze::launcher {
namespace {

ConfigSchema build_model_init_schema() {
  ConfigSchema schema;
  models::ModelInitOptions::fields().declare(schema);
  // Separate checks, each reading only its own flags, so every one still runs when another
  // flag is refused and all the problems are reported together.
  schema.add_check("heads_per_kv_head", [](const Config& c) -> std::string {
    const int64_t heads = c.get<int64_t>("heads"), kv_heads = c.get<int64_t>("kv_heads");
    if (heads % kv_heads == 0) return "";
    return "--heads " + std::to_string(heads) + " is not a multiple of --kv-heads " +
           std::to_string(kv_heads);
  });
  schema.add_check("head_dim_derivable", [](const Config& c) -> std::string {
    const int64_t hidden = c.get<int64_t>("hidden_size"), heads = c.get<int64_t>("heads");
    if (c.get<int64_t>("head_dim") != 0 || hidden % heads == 0) return "";
    return "--hidden-size " + std::to_string(hidden) + " is not divisible by --heads " +
           std::to_string(heads) + "; change one of them or set --head-dim";
  });
  schema.add_check("tokenizer_dir_for_qwen3", [](const Config& c) -> std::string {
    if (c.get<std::string>("tokenizer_dir").empty() || c.get<std::string>("tokenizer") == "qwen3") {
      return "";
    }
    return "--tokenizer-dir applies to --tokenizer qwen3 only (the byte tokenizer is generated)";
  });
  return schema;
}

bool wants_help(const std::vector<std::string>& args) {
  for (const std::string& arg : args) {
    if (arg == "--help" || arg == "-h" || arg == "help") return true;
  }
  return false;
}

}  // namespace

const ConfigSchema& model_init_schema() {
  static const ConfigSchema schema = build_model_init_schema();
  return schema;
}

int run_model_command(const std::vector<std::string>& args) {
  if (!args.empty() && args[0] != "init" && args[0] != "gguf" && wants_help(args)) {
    std::cout << command_help("model init") << "\n" << command_help("model gguf");
    return 0;
  }
  if (args.empty() || (args[0] != "init" && args[0] != "gguf")) {
    std::cerr << (args.empty() ? "ooze model: missing subcommand\n"
                               : "ooze model: unknown subcommand '" + args[0] + "'\n")
              << find_command("model init")->usage << "\n"
              << find_command("model gguf")->usage << "\n";
    return 2;
  }
  if (wants_help(args)) {
    std::cout << command_help("model " + args[0]);
    return 0;
  }
  if (args[0] == "gguf") return run_model_gguf({args.begin() + 1, args.end()});
  const Config flags =
      load_config(model_init_schema(), "", std::vector<std::string>(args.begin() + 1, args.end()));
  const models::ModelInitOptions options = models::ModelInitOptions::fields().read(flags);

  const models::ModelConfig config = models::init_hf_model(options);
  std::cout << "wrote a random " << config.model_type << " model (" << config.num_parameters()
            << " parameters, " << config.num_hidden_layers << " layers, hidden "
            << config.hidden_size << ", vocab " << config.vocab_size << ", " << config.torch_dtype
            << ", seed " << options.seed << ") to " << options.out_dir << "\n";
  return 0;
}

}  // namespace ooze::launcher
