#include "launcher/model_init_command.h"

#include <iostream>

#include "core/error.h"
#include "models/model_init.h"

namespace ooze::launcher {
namespace {

const char* kModelInitUsage =
    "usage: ooze model init --arch qwen3|qwen2|llama --hidden-size N --layers N --heads N\n"
    "                       --kv-heads N [--head-dim N] [--intermediate-size N] [--vocab-size N]\n"
    "                       [--tie-embeddings] [--dtype float32|bfloat16] [--rope-theta X]\n"
    "                       --tokenizer qwen3|byte [--tokenizer-dir DIR] --out DIR [--seed N]\n"
    "writes a randomly initialised model in Hugging Face layout (config.json, safetensors,\n"
    "generation_config.json, tokenizer files) to DIR\n";

ConfigSchema build_model_init_schema() {
  ConfigSchema schema;
  schema.section("model init");
  schema.add_enum("arch", {"qwen3", "qwen2", "llama"}, "qwen3", "Architecture (model_type).");
  schema.add_int("hidden_size", 256, "Hidden size.").min(1);
  schema.add_int("layers", 4, "Number of decoder layers.").min(1);
  schema.add_int("heads", 4, "Attention (query) heads.").min(1);
  schema.add_int("kv_heads", 2, "Key/value heads (grouped-query attention).").min(1);
  schema.add_int("head_dim", 0, "Per-head dimension; 0: hidden_size / heads.").min(0);
  schema.add_int("intermediate_size", 0, "MLP width; 0: 3 * hidden_size.").min(0);
  schema
      .add_int("vocab_size", 0,
               "Embedding rows; 0: the tokenizer's (151936 for qwen3, as Qwen pads; 259 for "
               "byte).")
      .min(0);
  schema.add_bool("tie_embeddings", false, "Share the embedding matrix with the LM head.");
  schema.add_enum("dtype", {"float32", "bfloat16"}, "float32", "torch_dtype of the weights.");
  schema.add_double("rope_theta", 0.0, "RoPE base; 0: 1000000 for qwen, 500000 for llama.").min(0);
  schema.add_enum("tokenizer", {"qwen3", "byte"}, "qwen3",
                  "qwen3: the real Qwen3 tokenizer; byte: 256 byte tokens + 3 ChatML specials.");
  schema.add_string("tokenizer_dir", "",
                    "With --tokenizer qwen3: a directory holding its tokenizer.json; empty: the "
                    "copy installed by scripts/install-deps.sh.");
  schema.add_string("out", "", "Output model directory (replaced if it is a model directory).")
      .required();
  schema.add_int("seed", 0, "Seed of the random weights.").min(0);

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
  if (args.empty() || (args[0] != "init" && !wants_help(args))) {
    std::cerr << (args.empty() ? "ooze model: missing subcommand\n"
                               : "ooze model: unknown subcommand '" + args[0] + "'\n")
              << kModelInitUsage;
    return 2;
  }
  if (wants_help(args)) {
    std::cout << kModelInitUsage << "\n" << model_init_schema().help();
    return 0;
  }
  const Config flags =
      load_config(model_init_schema(), "", std::vector<std::string>(args.begin() + 1, args.end()));
  models::ModelInitOptions options;
  options.arch = flags.get<std::string>("arch");
  options.hidden_size = flags.get<int64_t>("hidden_size");
  options.num_layers = flags.get<int64_t>("layers");
  options.num_heads = flags.get<int64_t>("heads");
  options.num_kv_heads = flags.get<int64_t>("kv_heads");
  options.head_dim = flags.get<int64_t>("head_dim");
  options.intermediate_size = flags.get<int64_t>("intermediate_size");
  options.vocab_size = flags.get<int64_t>("vocab_size");
  options.tie_embeddings = flags.get<bool>("tie_embeddings");
  options.dtype = flags.get<std::string>("dtype");
  options.rope_theta = flags.get<double>("rope_theta");
  options.tokenizer = flags.get<std::string>("tokenizer");
  options.tokenizer_dir = flags.get<std::string>("tokenizer_dir");
  options.out_dir = flags.get<std::string>("out");
  options.seed = static_cast<uint64_t>(flags.get<int64_t>("seed"));

  const models::ModelConfig config = models::init_hf_model(options);
  std::cout << "wrote a random " << config.model_type << " model (" << config.num_parameters()
            << " parameters, " << config.num_hidden_layers << " layers, hidden "
            << config.hidden_size << ", vocab " << config.vocab_size << ", " << config.torch_dtype
            << ", seed " << options.seed << ") to " << options.out_dir << "\n";
  return 0;
}

}  // namespace ooze::launcher
