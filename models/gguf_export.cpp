#include "models/gguf_export.h"

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>

#include "core/error.h"
#include "core/safetensors.h"
#include "models/model_config.h"
#include "models/tokenizer.h"

namespace ooze::models {
namespace {

namespace fs = std::filesystem;

// llama_token_type: how llama.cpp treats a vocabulary entry.
constexpr int32_t kNormal = 1;
constexpr int32_t kControl = 3;      // special tokens: never produced from plain text
constexpr int32_t kUserDefined = 4;  // added tokens that are not special (<think>, ...)
constexpr int32_t kUnused = 5;       // the padding rows past the tokenizer's ids

// The GGUF name of a Hugging Face weight of these architectures; nullopt for one they lack.
std::optional<std::string> gguf_name(const std::string& hf) {
  static const std::map<std::string, std::string> global = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"},
  };
  static const std::map<std::string, std::string> per_layer = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
  };
  if (auto found = global.find(hf); found != global.end()) return found->second;
  static const std::regex layer(R"(model\.layers\.(\d+)\.(.+))");
  std::smatch match;
  if (!std::regex_match(hf, match, layer)) return std::nullopt;
  auto found = per_layer.find(match[2].str());
  if (found == per_layer.end()) return std::nullopt;
  return "blk." + match[1].str() + "." + found->second;
}

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw IoError("cannot read '" + path.string() + "'");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& error) {
    throw FormatError("'" + path.string() + "' is not valid JSON: " + error.what());
  }
}

// BPE merges as GGUF stores them, "left right"; tokenizer.json has either form.
std::vector<std::string> read_merges(const fs::path& tokenizer_file) {
  const nlohmann::json tokenizer = read_json(tokenizer_file);
  const nlohmann::json& model = tokenizer.value("model", nlohmann::json::object());
  if (model.value("type", "") != "BPE" || !model.contains("merges")) {
    throw ConfigError("'" + tokenizer_file.string() +
                      "' is not a BPE tokenizer with merges; GGUF export writes byte-level BPE "
                      "(gpt2) tokenizers only");
  }
  std::vector<std::string> merges;
  for (const nlohmann::json& merge : model["merges"]) {
    if (merge.is_string()) {
      merges.push_back(merge.get<std::string>());
    } else if (merge.is_array() && merge.size() == 2) {
      merges.push_back(merge[0].get<std::string>() + " " + merge[1].get<std::string>());
    } else {
      throw FormatError("'" + tokenizer_file.string() + "': model.merges entry " + merge.dump() +
                        " is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
  return merges;
}

void add_tokenizer(GgufWriter& gguf, const std::string& model_dir, const ModelConfig& config) {
  const Tokenizer tokenizer = load_tokenizer(model_dir);
  if (tokenizer.vocab_size() > config.vocab_size) {
    throw FormatError("the tokenizer of '" + model_dir + "' has ids up to " +
                      std::to_string(tokenizer.vocab_size() - 1) + ", past config.json's " +
                      "vocab_size " + std::to_string(config.vocab_size));
  }
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  tokens.reserve(static_cast<size_t>(config.vocab_size));
  types.reserve(static_cast<size_t>(config.vocab_size));
  for (int64_t id = 0; id < config.vocab_size; ++id) {
    const std::optional<std::string> token = tokenizer.id_to_token(id);
    tokens.push_back(token ? *token : "[PAD" + std::to_string(id) + "]");
    types.push_back(kNormal);
    if (!token) types.back() = kUnused;
  }
  for (const AddedToken& added : tokenizer.added_tokens()) {
    types[static_cast<size_t>(added.id)] = added.special ? kControl : kUserDefined;
  }
  gguf.add_string("tokenizer.ggml.model", "gpt2");
  // The pre-tokenizer (split regex) llama.cpp applies to text: Qwen's.
  gguf.add_string("tokenizer.ggml.pre", "qwen2");
  gguf.add_strings("tokenizer.ggml.tokens", std::move(tokens));
  gguf.add_int32s("tokenizer.ggml.token_type", std::move(types));
  gguf.add_strings("tokenizer.ggml.merges", read_merges(fs::path(model_dir) / "tokenizer.json"));
  if (auto eos = tokenizer.eos_token_id()) {
    gguf.add_uint32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(*eos));
  }
  if (auto pad = tokenizer.pad_token_id()) {
    gguf.add_uint32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(*pad));
  }
  const std::optional<int64_t> bos =
      tokenizer.bos_token_id() ? tokenizer.bos_token_id() : config.bos_token_id;
  if (bos) gguf.add_uint32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(*bos));
  const fs::path tokenizer_config = fs::path(model_dir) / "tokenizer_config.json";
  const bool add_bos = fs::exists(tokenizer_config) &&
                       read_json(tokenizer_config).value("add_bos_token", false) == true;
  gguf.add_bool("tokenizer.ggml.add_bos_token", add_bos);
}

}  // namespace

GgufExport export_gguf(const std::string& model_dir, const std::string& out_path, GgufType type) {
  const ModelConfig config = load_model_config(model_dir);
  const std::string& arch = config.model_type;
  if (arch != "qwen3" && arch != "qwen2") {
    throw ConfigError("GGUF export writes qwen3 and qwen2 models; '" + model_dir + "' is " + arch);
  }
  if (config.rope_scaling.rope_type != "default") {
    throw ConfigError("'" + model_dir + "' scales RoPE (" + config.rope_scaling.rope_type +
                      "); GGUF export writes unscaled RoPE only");
  }
  if (config.has_o_proj_bias()) {
    throw ConfigError("'" + model_dir + "' has attention_bias on o_proj, which llama.cpp's " +
                      arch + " has no tensor for");
  }
  GgufWriter gguf;
  gguf.add_string("general.architecture", arch);
  fs::path name = fs::path(model_dir).lexically_normal();
  if (name.filename().empty()) name = name.parent_path();  // "DIR/"
  gguf.add_string("general.name", name.filename().string());
  gguf.add_uint32("general.file_type", type == GgufType::kF16 ? 1 : 0);  // ALL_F32, MOSTLY_F16
  auto u32 = [](int64_t value) { return static_cast<uint32_t>(value); };
  gguf.add_uint32(arch + ".block_count", u32(config.num_hidden_layers));
  gguf.add_uint32(arch + ".context_length", u32(config.max_position_embeddings));
  gguf.add_uint32(arch + ".embedding_length", u32(config.hidden_size));
  gguf.add_uint32(arch + ".feed_forward_length", u32(config.intermediate_size));
  gguf.add_uint32(arch + ".attention.head_count", u32(config.num_attention_heads));
  gguf.add_uint32(arch + ".attention.head_count_kv", u32(config.num_key_value_heads));
  // Qwen3's head_dim is not hidden / heads (0.6B: 128, not 64): always say it.
  gguf.add_uint32(arch + ".attention.key_length", u32(config.head_dim));
  gguf.add_uint32(arch + ".attention.value_length", u32(config.head_dim));
  gguf.add_float32(arch + ".rope.freq_base", static_cast<float>(config.rope_theta));
  gguf.add_float32(arch + ".attention.layer_norm_rms_epsilon",
                   static_cast<float>(config.rms_norm_eps));
  add_tokenizer(gguf, model_dir, config);

  const ShardedSafetensors weights = ShardedSafetensors::open(model_dir);
  GgufExport result;
  for (const std::string& hf : weights.names()) {
    if (hf == "lm_head.weight" && config.tie_word_embeddings) continue;  // llama.cpp reuses
    const std::optional<std::string> name = gguf_name(hf);
    if (!name) {
      throw FormatError("'" + model_dir + "' holds weight '" + hf + "', which llama.cpp's " + arch +
                        " has no tensor for");
    }
    at::Tensor tensor = weights.tensor(hf);
    gguf.add_tensor(*name, tensor, tensor.dim() >= 2 ? type : GgufType::kF32);
    ++result.tensors;
  }
  result.bytes = gguf.write(out_path);
  return result;
}

}  // namespace ooze::models
