#include "models/peft_adapter.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "core/error.h"
#include "core/safetensors.h"
#include "core/strings.h"
#include "models/hf_directory.h"

namespace ooze::models {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kConfigFile = "adapter_config.json";
constexpr const char* kWeightsFile = "adapter_model.safetensors";
// PEFT's name of the wrapped model: PeftModel.base_model (a LoraModel) .model (the HF model).
constexpr const char* kPeftPrefix = "base_model.model.";

json adapter_config_json(const LoraOptions& options, const std::string& base_model) {
  return json{{"peft_type", "LORA"},
              {"task_type", "CAUSAL_LM"},
              {"base_model_name_or_path", base_model},
              {"r", options.rank},
              {"lora_alpha", options.alpha},
              {"lora_dropout", options.dropout},
              {"target_modules", options.target_projections()},
              {"bias", "none"},
              {"fan_in_fan_out", false},
              {"inference_mode", true},
              {"init_lora_weights", true},
              {"use_rslora", false},
              {"use_dora", false},
              {"modules_to_save", nullptr},
              {"layers_to_transform", nullptr},
              {"layers_pattern", nullptr},
              {"rank_pattern", json::object()},
              {"alpha_pattern", json::object()},
              {"revision", nullptr}};
}

// The LoRA options of an adapter_config.json; a FormatError names the key ooze cannot apply.
LoraOptions options_from_config(const json& config, const std::string& path) {
  auto fail = [&](const std::string& key, const std::string& why) {
    throw FormatError(path + ": \"" + key + "\" " + why);
  };
  auto truthy = [&](const char* key) {
    return config.contains(key) && !config[key].is_null() && config[key] != false &&
           config[key] != json::object() && config[key] != json::array();
  };
  if (!config.is_object()) throw FormatError(path + ": not a JSON object");
  if (config.value("peft_type", "") != "LORA") {
    fail("peft_type", "is " + config.value("peft_type", json("missing")).dump() +
                          "; only LORA adapters are supported");
  }
  for (const char* unsupported : {"use_dora", "use_rslora", "modules_to_save", "rank_pattern",
                                  "alpha_pattern", "layers_to_transform", "fan_in_fan_out"}) {
    if (truthy(unsupported)) {
      fail(unsupported, "is " + config[unsupported].dump() +
                            "; ooze applies plain LoRA (alpha / r scaling, the same rank and "
                            "alpha everywhere, adapters on the decoder's projections only)");
    }
  }
  if (config.contains("bias") && config["bias"] != "none") {
    fail("bias", "is " + config["bias"].dump() + "; only \"none\" is supported");
  }
  LoraOptions options;
  if (!config.contains("r") || !config["r"].is_number_integer() || config["r"].get<int64_t>() < 1) {
    fail("r", "must be a positive integer");
  }
  options.rank = config["r"].get<int64_t>();
  if (!config.contains("lora_alpha") || !config["lora_alpha"].is_number()) {
    fail("lora_alpha", "must be a number");
  }
  options.alpha = config["lora_alpha"].get<double>();
  if (config.contains("lora_dropout") && config["lora_dropout"].is_number()) {
    options.dropout = config["lora_dropout"].get<double>();
  }
  const json& targets = config.value("target_modules", json());
  if (targets.is_string()) {
    options.target_modules = {targets.get<std::string>()};
  } else if (targets.is_array()) {
    options.target_modules.clear();
    for (const json& target : targets) {
      if (!target.is_string()) fail("target_modules", "holds " + target.dump() + ", not a name");
      options.target_modules.push_back(target.get<std::string>());
    }
  } else {
    fail("target_modules", "must be a list of module names or \"all-linear\"");
  }
  try {
    options.target_projections();
  } catch (const ConfigError& e) {
    fail("target_modules", std::string("names a module ooze cannot adapt: ") + e.what());
  }
  return options;
}

// Every (parameter name, tensor) the adapter must have for `model`'s adapted projections.
std::map<std::string, torch::Tensor> adapter_parameters(TransformerModelImpl& model) {
  std::map<std::string, torch::Tensor> parameters;
  for (const AdaptedLinear& adapted : adapted_linears(model)) {
    parameters[adapted.name + ".lora_A.weight"] = adapted.linear->lora_A->weight;
    parameters[adapted.name + ".lora_B.weight"] = adapted.linear->lora_B->weight;
  }
  return parameters;
}

std::string problems_text(const std::vector<std::string>& problems) {
  std::string text;
  for (const std::string& problem : problems) text += "\n  " + problem;
  return text;
}

}  // namespace

void save_peft_adapter(const std::string& dir, const LoraOptions& options,
                       const std::map<std::string, torch::Tensor>& tensors,
                       const std::string& base_model_name_or_path) {
  fs::path target = fs::path(dir).lexically_normal();
  if (target.filename().empty()) target = target.parent_path();
  if (target.empty()) throw IoError("save_peft_adapter: the output directory is empty");
  check_replaceable_model_dir(target, "save_peft_adapter");
  NamedTensors named;
  for (const auto& [name, tensor] : tensors) {
    if (!is_lora_parameter(name)) {
      throw Error("save_peft_adapter: '" + name + "' is not a LoRA adapter's parameter");
    }
    named.emplace_back(kPeftPrefix + name, tensor.detach().to(torch::kCPU).contiguous());
  }
  const fs::path staging = target.string() + ".tmp." + std::to_string(::getpid());
  std::error_code ec;
  fs::remove_all(staging, ec);
  fs::create_directories(staging, ec);
  if (ec) throw IoError("cannot create directory '" + staging.string() + "': " + ec.message());
  try {
    save_safetensors((staging / kWeightsFile).string(), named, {{"format", "pt"}});
    write_json_file(staging / kConfigFile, adapter_config_json(options, base_model_name_or_path));
    fsync_path(staging);
    move_into_place(staging, target);
  } catch (...) {
    fs::remove_all(staging, ec);
    throw;
  }
}

PeftAdapter load_peft_adapter(const std::string& dir) {
  const fs::path config_path = fs::path(dir) / kConfigFile;
  const fs::path weights_path = fs::path(dir) / kWeightsFile;
  for (const fs::path& path : {config_path, weights_path}) {
    if (!fs::exists(path)) {
      throw IoError("'" + dir + "' is not a PEFT adapter directory: " + path.filename().string() +
                    " is missing");
    }
  }
  std::ifstream in(config_path);
  json config;
  try {
    config = json::parse(in);
  } catch (const json::exception& e) {
    throw FormatError(config_path.string() + ": not valid JSON (" + e.what() + ")");
  }
  PeftAdapter adapter;
  adapter.options = options_from_config(config, config_path.string());
  const SafetensorsFile file = SafetensorsFile::open(weights_path.string());
  std::vector<std::string> problems;
  for (const std::string& name : file.names()) {
    if (!starts_with(name, kPeftPrefix) || !is_lora_parameter(name) ||
        !ends_with(name, ".weight")) {
      problems.push_back("'" + name + "' is not a LoRA adapter tensor (" + kPeftPrefix +
                         "model.layers.N.<module>.lora_A.weight or lora_B.weight)");
      continue;
    }
    adapter.tensors[name.substr(std::string(kPeftPrefix).size())] = file.tensor(name).clone();
  }
  if (!problems.empty()) {
    throw FormatError(weights_path.string() +
                      " holds tensors ooze cannot apply:" + problems_text(problems));
  }
  return adapter;
}

void load_adapter_weights(TransformerModelImpl& model, const PeftAdapter& adapter) {
  const std::map<std::string, torch::Tensor> parameters = adapter_parameters(model);
  std::vector<std::string> problems;
  for (const AdaptedLinear& adapted : adapted_linears(model)) {
    if (std::abs(adapted.linear->adapter_scaling() - adapter.options.scaling()) > 1e-12) {
      problems.push_back(adapted.name + ": the adapter's scaling lora_alpha / r = " +
                         std::to_string(adapter.options.scaling()) + ", the model's " +
                         std::to_string(adapted.linear->adapter_scaling()) +
                         " (--lora-rank, --lora-alpha)");
      break;
    }
  }
  for (const auto& [name, parameter] : parameters) {
    const auto found = adapter.tensors.find(name);
    if (found == adapter.tensors.end()) {
      problems.push_back(name +
                         " is missing (the adapter targets other modules than "
                         "--target-modules)");
    } else if (found->second.sizes() != parameter.sizes()) {
      problems.push_back(name + " has shape " + c10::str(found->second.sizes()) +
                         ", the model's is " + c10::str(parameter.sizes()) +
                         " (another rank, or another base model)");
    }
  }
  for (const auto& [name, tensor] : adapter.tensors) {
    if (!parameters.count(name)) problems.push_back(name + " adapts no projection of the model");
  }
  if (!problems.empty()) {
    throw FormatError("the LoRA adapter does not fit the model (" +
                      std::to_string(problems.size()) + " problem" +
                      (problems.size() == 1 ? "" : "s") + "):" + problems_text(problems));
  }
  torch::NoGradGuard no_grad;
  for (const auto& [name, parameter] : parameters) {
    parameter.copy_(adapter.tensors.at(name));
  }
}

void merge_adapter_weights(TransformerModelImpl& model, const PeftAdapter& adapter) {
  std::map<std::string, torch::Tensor> weights;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    weights[item.key()] = item.value();
  }
  std::vector<std::string> problems;
  std::vector<std::pair<std::string, std::string>> merges;  // (weight, module)
  for (const auto& [name, tensor] : adapter.tensors) {
    if (!ends_with(name, ".lora_A.weight")) continue;
    const std::string module = name.substr(0, name.size() - std::string(".lora_A.weight").size());
    const auto weight = weights.find(module + ".weight");
    const auto b = adapter.tensors.find(module + ".lora_B.weight");
    if (weight == weights.end()) {
      problems.push_back(name + " adapts '" + module + "', which the model does not have");
    } else if (b == adapter.tensors.end()) {
      problems.push_back(name + " has no " + module + ".lora_B.weight beside it");
    } else if (b->second.dim() != 2 || tensor.dim() != 2 ||
               b->second.size(0) != weight->second.size(0) ||
               tensor.size(1) != weight->second.size(1) || b->second.size(1) != tensor.size(0)) {
      problems.push_back(module + ": lora_B " + c10::str(b->second.sizes()) + " x lora_A " +
                         c10::str(tensor.sizes()) + " does not make the weight's shape " +
                         c10::str(weight->second.sizes()));
    } else {
      merges.emplace_back(weight->first, module);
    }
  }
  if (!problems.empty()) {
    throw FormatError("the LoRA adapter does not fit the model (" +
                      std::to_string(problems.size()) + " problem" +
                      (problems.size() == 1 ? "" : "s") + "):" + problems_text(problems));
  }
  torch::NoGradGuard no_grad;
  for (const auto& [weight_name, module] : merges) {
    torch::Tensor& weight = weights.at(weight_name);
    const torch::Tensor merged =
        lora_delta(adapter.tensors.at(module + ".lora_A.weight").to(weight.device()),
                   adapter.tensors.at(module + ".lora_B.weight").to(weight.device()),
                   adapter.options.scaling())
            .add_(weight.to(torch::kFloat));
    weight.copy_(merged);
  }
}

}  // namespace ooze::models
