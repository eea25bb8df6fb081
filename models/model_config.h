// The architecture of a transformer, read from (and written back to) a Hugging Face
// `config.json`. Supported model types:
//   "qwen3": per-head RMSNorm on q and k, explicit head_dim, optional attention bias;
//   "qwen2": bias on the q/k/v projections (never on o_proj);
//   "llama": optional attention bias, RoPE scaling "llama3" / "linear".
//
//   ModelConfig config = load_model_config("/models/Qwen3-0.6B");  // dir or config.json
//   nlohmann::json out = config.to_json();  // keeps the keys ooze does not interpret
//
// Defaults for missing optional keys follow transformers' config classes, so ooze and
// transformers build the same model from the same file.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace ooze::models {

// `rope_scaling` of config.json. rope_type "default" means no scaling.
struct RopeScaling {
  std::string rope_type = "default";                // "default", "linear" or "llama3"
  double factor = 1.0;                              // linear, llama3
  double low_freq_factor = 1.0;                     // llama3
  double high_freq_factor = 4.0;                    // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3
};

struct ModelConfig {
  std::string model_type;  // "qwen3", "qwen2" or "llama"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // defaults to num_attention_heads
  int64_t head_dim = 0;  // defaults to hidden_size / num_attention_heads (qwen3: 128, as HF)
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  int64_t max_position_embeddings = 0;  // defaults: llama 2048, qwen 32768
  bool tie_word_embeddings = false;
  // The config key: bias on q/k/v/o projections for llama and qwen3. Qwen2 ignores it (its
  // q/k/v always have bias, o_proj never): use has_qkv_bias() / has_o_proj_bias().
  bool attention_bias = false;
  std::string torch_dtype = "float32";  // "float32", "bfloat16" or "float16"
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;  // config.json allows one id or a list
  double initializer_range = 0.02;

  // Keys of the original config.json that the fields above do not represent
  // ("transformers_version", "use_cache", ...); to_json() writes them back unchanged.
  nlohmann::json extra_keys = nlohmann::json::object();
  // Where this config came from ("/models/x/config.json"); names the file in errors.
  std::string origin;

  // Parses and validates. Throws ooze::FormatError (missing key, wrong JSON type) or
  // ooze::ConfigError (unsupported or inconsistent values); messages name `origin` and the key.
  static ModelConfig from_json(const nlohmann::json& json, const std::string& origin);

  // A config.json that transformers reads as the same architecture: "architectures",
  // "model_type", every field above, and extra_keys.
  nlohmann::json to_json() const;

  // Throws ooze::ConfigError naming origin and the offending key. from_json() calls it; call it
  // again after editing fields by hand.
  void validate() const;

  bool has_qk_norm() const { return model_type == "qwen3"; }
  bool has_qkv_bias() const { return model_type == "qwen2" || attention_bias; }
  bool has_o_proj_bias() const { return model_type != "qwen2" && attention_bias; }

  // torch_dtype as a ScalarType (kFloat, kBFloat16, kHalf).
  c10::ScalarType parameter_dtype() const;

  // Total number of parameters of the model this config describes (lm_head counted once when
  // tied).
  int64_t num_parameters() const;
};

// Reads `path_or_dir` (a config.json, or a directory containing one).
// Throws ooze::IoError when it cannot be read, FormatError/ConfigError as from_json().
ModelConfig load_model_config(const std::string& path_or_dir);

// Writes config.to_json() to `path_or_dir` (a file path, or a directory that gets config.json)
// through a temporary file and a rename, so a crash never leaves half a file.
void save_model_config(const ModelConfig& config, const std::string& path_or_dir);

// "qwen3, qwen2, llama": for error messages.
std::string supported_model_types();

// A torch_dtype name ("float32", "bfloat16", "float16") as a ScalarType. Throws ConfigError
// saying "`what` 'NAME' is not supported" otherwise.
c10::ScalarType dtype_from_name(const std::string& name, const std::string& what);

}  // namespace ooze::models
