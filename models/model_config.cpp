#include "models/model_config.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/atomic_file.h"
#include "core/error.h"

namespace ooze::models {
namespace {

const std::vector<std::string> kSupportedModelTypes = {"qwen3", "qwen2", "llama"};

std::string architecture_for(const std::string& model_type) {
  if (model_type == "qwen3") return "Qwen3ForCausalLM";
  if (model_type == "qwen2") return "Qwen2ForCausalLM";
  return "LlamaForCausalLM";
}

// Reads typed keys out of one JSON object and remembers which keys it consumed, so the rest
// can be kept verbatim in ModelConfig::extra_keys.
class KeyReader {
 public:
  KeyReader(const nlohmann::json& json, std::string origin)
      : json_(json), origin_(std::move(origin)) {}

  bool has(const std::string& key) const { return json_.contains(key) && !json_.at(key).is_null(); }

  int64_t required_int(const std::string& key) {
    if (!has(key)) {
      throw FormatError(origin_ + ": missing required key '" + key +
                        "' (an integer); add it to config.json");
    }
    return optional_int(key, 0);
  }

  int64_t optional_int(const std::string& key, int64_t fallback) {
    consumed_.insert(key);
    if (!has(key)) return fallback;
    const nlohmann::json& value = json_.at(key);
    if (!value.is_number_integer()) {
      throw FormatError(origin_ + ": key '" + key + "' must be an integer, got " + value.dump());
    }
    return value.get<int64_t>();
  }

  double optional_double(const std::string& key, double fallback) {
    consumed_.insert(key);
    if (!has(key)) return fallback;
    const nlohmann::json& value = json_.at(key);
    if (!value.is_number()) {
      throw FormatError(origin_ + ": key '" + key + "' must be a number, got " + value.dump());
    }
    return value.get<double>();
  }

  bool optional_bool(const std::string& key, bool fallback) {
    consumed_.insert(key);
    if (!has(key)) return fallback;
    const nlohmann::json& value = json_.at(key);
    if (!value.is_boolean()) {
      throw FormatError(origin_ + ": key '" + key + "' must be true or false, got " + value.dump());
    }
    return value.get<bool>();
  }

  std::string optional_string(const std::string& key, const std::string& fallback) {
    consumed_.insert(key);
    if (!has(key)) return fallback;
    const nlohmann::json& value = json_.at(key);
    if (!value.is_string()) {
      throw FormatError(origin_ + ": key '" + key + "' must be a string, got " + value.dump());
    }
    return value.get<std::string>();
  }

  // `key` is not interpreted but must not be copied into extra_keys either (to_json rewrites it).
  void consume(const std::string& key) { consumed_.insert(key); }

  nlohmann::json unconsumed() const {
    nlohmann::json rest = nlohmann::json::object();
    for (auto it = json_.begin(); it != json_.end(); ++it) {
      if (consumed_.count(it.key()) == 0) rest[it.key()] = it.value();
    }
    return rest;
  }

 private:
  const nlohmann::json& json_;
  std::string origin_;
  std::set<std::string> consumed_;
};

// `rope_scaling` (transformers 4.x) or `rope_parameters` (transformers 5). Both may carry the
// scaling kind under "rope_type" or the legacy "type".
RopeScaling parse_rope_scaling(const nlohmann::json& json, const std::string& where) {
  if (!json.is_object()) {
    throw FormatError(where + " must be an object or null, got " + json.dump());
  }
  KeyReader reader(json, where);
  RopeScaling scaling;
  scaling.rope_type = reader.optional_string("rope_type", "");
  if (scaling.rope_type.empty()) scaling.rope_type = reader.optional_string("type", "default");
  scaling.factor = reader.optional_double("factor", 1.0);
  scaling.low_freq_factor = reader.optional_double("low_freq_factor", 1.0);
  scaling.high_freq_factor = reader.optional_double("high_freq_factor", 4.0);
  scaling.original_max_position_embeddings =
      reader.optional_int("original_max_position_embeddings", 8192);
  return scaling;
}

std::string read_config_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw IoError("cannot read model config '" + path + "': " + std::strerror(errno));
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::string supported_model_types() {
  std::string text;
  for (const std::string& type : kSupportedModelTypes) {
    text += (text.empty() ? "" : ", ") + type;
  }
  return text;
}

ModelConfig ModelConfig::from_json(const nlohmann::json& json, const std::string& origin) {
  if (!json.is_object()) {
    throw FormatError(origin + ": a model config must be a JSON object, got " +
                      std::string(json.type_name()));
  }
  KeyReader reader(json, origin);
  ModelConfig config;
  config.origin = origin;

  if (!reader.has("model_type")) {
    throw FormatError(origin + ": missing key 'model_type' (one of " + supported_model_types() +
                      ")");
  }
  config.model_type = reader.optional_string("model_type", "");
  if (std::find(kSupportedModelTypes.begin(), kSupportedModelTypes.end(), config.model_type) ==
      kSupportedModelTypes.end()) {
    throw ConfigError(origin + ": model_type '" + config.model_type +
                      "' is not supported; supported model types: " + supported_model_types());
  }
  const bool is_qwen = config.model_type != "llama";

  config.vocab_size = reader.required_int("vocab_size");
  config.hidden_size = reader.required_int("hidden_size");
  config.intermediate_size = reader.required_int("intermediate_size");
  config.num_hidden_layers = reader.required_int("num_hidden_layers");
  config.num_attention_heads = reader.required_int("num_attention_heads");
  config.num_key_value_heads =
      reader.optional_int("num_key_value_heads", config.num_attention_heads);

  // transformers' Qwen3Config defaults head_dim to 128; the others derive it.
  if (!reader.has("head_dim") && config.model_type != "qwen3" && config.num_attention_heads > 0 &&
      config.hidden_size % config.num_attention_heads != 0) {
    throw ConfigError(
        origin + ": hidden_size = " + std::to_string(config.hidden_size) +
        " is not divisible by num_attention_heads = " + std::to_string(config.num_attention_heads) +
        " and no 'head_dim' is given; fix the sizes or set head_dim");
  }
  int64_t derived_head_dim = config.model_type == "qwen3" ? 128
                             : config.num_attention_heads > 0
                                 ? config.hidden_size / config.num_attention_heads
                                 : 0;
  config.head_dim = reader.optional_int("head_dim", derived_head_dim);

  config.rms_norm_eps = reader.optional_double("rms_norm_eps", 1e-6);
  config.max_position_embeddings =
      reader.optional_int("max_position_embeddings", is_qwen ? 32768 : 2048);
  config.tie_word_embeddings = reader.optional_bool("tie_word_embeddings", false);
  if (config.model_type == "qwen2") {
    // Qwen2's q/k/v bias is fixed by the architecture; a stray key stays in extra_keys.
  } else {
    config.attention_bias = reader.optional_bool("attention_bias", false);
  }
  config.initializer_range = reader.optional_double("initializer_range", 0.02);

  // transformers 5 writes "dtype", 4.x "torch_dtype".
  config.torch_dtype = reader.optional_string("torch_dtype", "");
  if (config.torch_dtype.empty()) config.torch_dtype = reader.optional_string("dtype", "float32");
  reader.consume("dtype");

  config.rope_theta = reader.optional_double("rope_theta", 10000.0);
  reader.consume("rope_scaling");
  reader.consume("rope_parameters");
  if (reader.has("rope_scaling")) {
    config.rope_scaling = parse_rope_scaling(json.at("rope_scaling"), origin + ": 'rope_scaling'");
  } else if (reader.has("rope_parameters")) {
    const nlohmann::json& parameters = json.at("rope_parameters");
    config.rope_scaling = parse_rope_scaling(parameters, origin + ": 'rope_parameters'");
    if (!json.contains("rope_theta") && parameters.contains("rope_theta")) {
      KeyReader parameter_reader(parameters, origin + ": 'rope_parameters'");
      config.rope_theta = parameter_reader.optional_double("rope_theta", 10000.0);
    }
  }

  std::string hidden_act = reader.optional_string("hidden_act", "silu");
  if (hidden_act != "silu") {
    throw ConfigError(origin + ": hidden_act '" + hidden_act +
                      "' is not supported; ooze's MLP is SwiGLU ('silu')");
  }
  if (json.contains("mlp_bias") && json.at("mlp_bias").is_boolean() &&
      json.at("mlp_bias").get<bool>()) {
    throw ConfigError(origin + ": mlp_bias = true is not supported; ooze's MLP has no bias");
  }
  if (json.contains("use_sliding_window") && json.at("use_sliding_window").is_boolean() &&
      json.at("use_sliding_window").get<bool>()) {
    throw ConfigError(origin +
                      ": use_sliding_window = true is not supported; ooze attends over the "
                      "full sequence (set it to false)");
  }

  if (reader.has("bos_token_id")) config.bos_token_id = reader.optional_int("bos_token_id", 0);
  reader.consume("bos_token_id");
  reader.consume("eos_token_id");
  if (reader.has("eos_token_id")) {
    const nlohmann::json& eos = json.at("eos_token_id");
    if (eos.is_number_integer()) {
      config.eos_token_ids.push_back(eos.get<int64_t>());
    } else if (eos.is_array()) {
      for (const nlohmann::json& id : eos) {
        if (!id.is_number_integer()) {
          throw FormatError(origin +
                            ": key 'eos_token_id' must be an integer or a list of "
                            "integers, got " +
                            eos.dump());
        }
        config.eos_token_ids.push_back(id.get<int64_t>());
      }
    } else {
      throw FormatError(origin +
                        ": key 'eos_token_id' must be an integer or a list of integers, "
                        "got " +
                        eos.dump());
    }
  }
  reader.consume("hidden_act");
  config.extra_keys = reader.unconsumed();
  config.validate();
  return config;
}

void ModelConfig::validate() const {
  const std::string where = origin.empty() ? std::string("model config") : origin;
  auto require_positive = [&](const char* key, double value) {
    if (!(value > 0)) {
      std::ostringstream message;
      message << where << ": " << key << " = " << value << " must be > 0";
      throw ConfigError(message.str());
    }
  };
  if (std::find(kSupportedModelTypes.begin(), kSupportedModelTypes.end(), model_type) ==
      kSupportedModelTypes.end()) {
    throw ConfigError(where + ": model_type '" + model_type +
                      "' is not supported; supported model types: " + supported_model_types());
  }
  require_positive("vocab_size", static_cast<double>(vocab_size));
  require_positive("hidden_size", static_cast<double>(hidden_size));
  require_positive("intermediate_size", static_cast<double>(intermediate_size));
  require_positive("num_hidden_layers", static_cast<double>(num_hidden_layers));
  require_positive("num_attention_heads", static_cast<double>(num_attention_heads));
  require_positive("num_key_value_heads", static_cast<double>(num_key_value_heads));
  require_positive("head_dim", static_cast<double>(head_dim));
  require_positive("rms_norm_eps", rms_norm_eps);
  require_positive("rope_theta", rope_theta);
  require_positive("max_position_embeddings", static_cast<double>(max_position_embeddings));
  require_positive("initializer_range", initializer_range);
  if (num_attention_heads % num_key_value_heads != 0) {
    throw ConfigError(
        where + ": num_key_value_heads = " + std::to_string(num_key_value_heads) +
        " does not divide num_attention_heads = " + std::to_string(num_attention_heads) +
        " (grouped-query attention shares each key/value head among an equal "
        "number of query heads)");
  }
  if (head_dim % 2 != 0) {
    throw ConfigError(where + ": head_dim = " + std::to_string(head_dim) +
                      " must be even (rotary embeddings rotate pairs of dimensions)");
  }
  if (torch_dtype != "float32" && torch_dtype != "bfloat16" && torch_dtype != "float16") {
    throw ConfigError(where + ": torch_dtype '" + torch_dtype +
                      "' is not supported; use float32, bfloat16 or float16");
  }
  const RopeScaling& rs = rope_scaling;
  if (rs.rope_type == "linear") {
    require_positive("rope_scaling.factor", rs.factor);
  } else if (rs.rope_type == "llama3") {
    require_positive("rope_scaling.factor", rs.factor);
    require_positive("rope_scaling.low_freq_factor", rs.low_freq_factor);
    require_positive("rope_scaling.original_max_position_embeddings",
                     static_cast<double>(rs.original_max_position_embeddings));
    if (!(rs.high_freq_factor > rs.low_freq_factor)) {
      std::ostringstream message;
      message << where << ": rope_scaling.high_freq_factor = " << rs.high_freq_factor
              << " must be greater than rope_scaling.low_freq_factor = " << rs.low_freq_factor;
      throw ConfigError(message.str());
    }
  } else if (rs.rope_type != "default") {
    throw ConfigError(where + ": rope_scaling.rope_type '" + rs.rope_type +
                      "' is not supported; supported: default, linear, llama3");
  }
}

nlohmann::json ModelConfig::to_json() const {
  nlohmann::json json = extra_keys.is_object() ? extra_keys : nlohmann::json::object();
  if (!json.contains("architectures")) {
    json["architectures"] = nlohmann::json::array({architecture_for(model_type)});
  }
  json["model_type"] = model_type;
  json["vocab_size"] = vocab_size;
  json["hidden_size"] = hidden_size;
  json["intermediate_size"] = intermediate_size;
  json["num_hidden_layers"] = num_hidden_layers;
  json["num_attention_heads"] = num_attention_heads;
  json["num_key_value_heads"] = num_key_value_heads;
  json["head_dim"] = head_dim;
  json["hidden_act"] = "silu";
  json["rms_norm_eps"] = rms_norm_eps;
  json["rope_theta"] = rope_theta;
  if (rope_scaling.rope_type == "default") {
    json["rope_scaling"] = nullptr;
  } else {
    nlohmann::json scaling = {{"rope_type", rope_scaling.rope_type},
                              {"factor", rope_scaling.factor}};
    if (rope_scaling.rope_type == "llama3") {
      scaling["low_freq_factor"] = rope_scaling.low_freq_factor;
      scaling["high_freq_factor"] = rope_scaling.high_freq_factor;
      scaling["original_max_position_embeddings"] = rope_scaling.original_max_position_embeddings;
    }
    json["rope_scaling"] = scaling;
  }
  json["max_position_embeddings"] = max_position_embeddings;
  json["tie_word_embeddings"] = tie_word_embeddings;
  if (model_type != "qwen2") json["attention_bias"] = attention_bias;
  json["torch_dtype"] = torch_dtype;
  json["initializer_range"] = initializer_range;
  json["bos_token_id"] = bos_token_id ? nlohmann::json(*bos_token_id) : nlohmann::json(nullptr);
  if (eos_token_ids.empty()) {
    json["eos_token_id"] = nullptr;
  } else if (eos_token_ids.size() == 1) {
    json["eos_token_id"] = eos_token_ids[0];
  } else {
    json["eos_token_id"] = eos_token_ids;
  }
  return json;
}

c10::ScalarType dtype_from_name(const std::string& name, const std::string& what) {
  if (name == "bfloat16") return c10::ScalarType::BFloat16;
  if (name == "float16") return c10::ScalarType::Half;
  if (name == "float32") return c10::ScalarType::Float;
  throw ConfigError(what + " '" + name + "' is not supported; use float32, bfloat16 or float16");
}

c10::ScalarType ModelConfig::parameter_dtype() const {
  return dtype_from_name(torch_dtype,
                         (origin.empty() ? std::string("model config") : origin) + ": torch_dtype");
}

int64_t ModelConfig::num_parameters() const {
  const int64_t q_width = num_attention_heads * head_dim;
  const int64_t kv_width = num_key_value_heads * head_dim;
  int64_t per_layer = hidden_size * (q_width + 2 * kv_width) + q_width * hidden_size;
  if (has_qkv_bias()) per_layer += q_width + 2 * kv_width;
  if (has_o_proj_bias()) per_layer += hidden_size;
  if (has_qk_norm()) per_layer += 2 * head_dim;
  per_layer += 3 * hidden_size * intermediate_size + 2 * hidden_size;
  int64_t total = vocab_size * hidden_size + num_hidden_layers * per_layer + hidden_size;
  if (!tie_word_embeddings) total += vocab_size * hidden_size;
  return total;
}

ModelConfig load_model_config(const std::string& path_or_dir) {
  std::string path = path_or_dir;
  if (std::filesystem::is_directory(path_or_dir)) {
    path = (std::filesystem::path(path_or_dir) / "config.json").string();
  }
  std::string text = read_config_text(path);
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    std::string what = e.what();
    size_t start = what.find("] ");
    throw FormatError("invalid JSON in model config '" + path +
                      "': " + (start == std::string::npos ? what : what.substr(start + 2)));
  }
  return ModelConfig::from_json(json, path);
}

void save_model_config(const ModelConfig& config, const std::string& path_or_dir) {
  std::string path = path_or_dir;
  if (std::filesystem::is_directory(path_or_dir)) {
    path = (std::filesystem::path(path_or_dir) / "config.json").string();
  }
  write_file_atomically(path, config.to_json().dump(2) + "\n");
}

}  // namespace ooze::models
