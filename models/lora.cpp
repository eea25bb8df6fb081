#include "models/lora.h"

#include <algorithm>
#include <cmath>

#include "core/config_spelling.h"
#include "core/error.h"

namespace ooze::models {
namespace {

constexpr const char* kAllLinear = "all-linear";

// The projection called `name` ("q_proj", ..., "down_proj") of `layer`.
LinearImpl* projection(DecoderLayerImpl& layer, const std::string& name) {
  if (name == "q_proj") return layer.self_attn->q_proj.get();
  if (name == "k_proj") return layer.self_attn->k_proj.get();
  if (name == "v_proj") return layer.self_attn->v_proj.get();
  if (name == "o_proj") return layer.self_attn->o_proj.get();
  if (name == "gate_proj") return layer.mlp->gate_proj.get();
  if (name == "up_proj") return layer.mlp->up_proj.get();
  return layer.mlp->down_proj.get();
}

std::string module_path(size_t layer, const std::string& projection_name) {
  const bool attention = projection_name == "q_proj" || projection_name == "k_proj" ||
                         projection_name == "v_proj" || projection_name == "o_proj";
  return "model.layers." + std::to_string(layer) + (attention ? ".self_attn." : ".mlp.") +
         projection_name;
}

}  // namespace

const char* lora_sync_name(LoraSync sync) {
  return sync == LoraSync::kAdapter ? "adapter" : "merged";
}

const std::vector<std::string>& lora_projection_names() {
  static const std::vector<std::string> names = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                 "gate_proj", "up_proj", "down_proj"};
  return names;
}

std::vector<std::string> LoraOptions::target_projections() const {
  const std::vector<std::string>& known = lora_projection_names();
  if (target_modules.empty()) {
    throw ConfigError("--target-modules is empty: give all-linear or some of " +
                      config_spelling::join(known, ","));
  }
  std::vector<bool> wanted(known.size(), false);
  for (const std::string& module : target_modules) {
    if (module == kAllLinear) {
      std::fill(wanted.begin(), wanted.end(), true);
      continue;
    }
    const auto found = std::find(known.begin(), known.end(), module);
    if (found == known.end()) {
      throw ConfigError("--target-modules: '" + module +
                        "' is not a linear layer of the decoder; give all-linear or some of " +
                        config_spelling::join(known, ","));
    }
    wanted[found - known.begin()] = true;
  }
  std::vector<std::string> projections;
  for (size_t i = 0; i < known.size(); ++i) {
    if (wanted[i]) projections.push_back(known[i]);
  }
  return projections;
}

const OptionFields<LoraOptions>& LoraOptions::fields() {
  using O = LoraOptions;
  static const OptionFields<O> fields = [] {
    OptionFields<O> f;
    f.section("lora");
    f.add("lora_rank", &O::rank,
          "LoRA rank r: the base weights stay frozen and each targeted projection trains a "
          "rank-r update; 0 trains the full model.")
        .min(0);
    f.add("lora_alpha", &O::alpha, "LoRA alpha: the update is scaled by alpha / r.");
    f.add("lora_dropout", &O::dropout,
          "Dropout on the adapters' input in training forwards (not when scoring).")
        .min(0)
        .max(0.99);
    f.add("target_modules", &O::target_modules,
          "The projections that get adapters: all-linear, or a list of q_proj,k_proj,v_proj,"
          "o_proj,gate_proj,up_proj,down_proj.");
    f.add("lora_load", &O::load,
          "Start from this PEFT adapter directory (adapter_config.json and "
          "adapter_model.safetensors) instead of a fresh adapter.");
    f.add_enum("lora_sync", &O::sync, {LoraSync::kMerged, LoraSync::kAdapter}, lora_sync_name,
               "What the rollout engines receive after each step: merged (W + alpha/r B A for "
               "the adapted weights, the engines run the plain model) or adapter (A and B "
               "only, the engines apply them).");
    f.add_rule([](const O& o) {
      if (o.enabled()) o.target_projections();
    });
    return f;
  }();
  return fields;
}

void add_lora_adapters(TransformerModelImpl& model, const LoraOptions& options, uint64_t seed) {
  if (!options.enabled()) {
    throw ConfigError("add_lora_adapters: --lora-rank must be at least 1, got " +
                      std::to_string(options.rank));
  }
  const std::vector<std::string> targets = options.target_projections();
  torch::NoGradGuard no_grad;
  for (torch::Tensor& parameter : model.parameters()) parameter.requires_grad_(false);
  for (size_t l = 0; l < model.layers().size(); ++l) {
    for (const std::string& target : targets) {
      LinearImpl* linear = projection(*model.layers()[l], target);
      linear->add_adapter(options.rank, options.alpha, options.dropout, model.dtype());
      linear->lora_A->to(linear->weight.device());
      linear->lora_B->to(linear->weight.device());
      // PEFT's kaiming_uniform_(a=sqrt(5)) on [r, in]: bound sqrt(6 / ((1 + 5) * in)).
      const std::string a_name = module_path(l, target) + ".lora_A.weight";
      const double bound = 1.0 / std::sqrt(static_cast<double>(linear->weight.size(1)));
      torch::Tensor values = torch::empty(linear->lora_A->weight.sizes(), torch::kFloat);
      values.uniform_(-bound, bound, at::detail::createCPUGenerator(parameter_seed(seed, a_name)));
      linear->lora_A->weight.copy_(values);
      linear->lora_B->weight.zero_();
    }
  }
}

std::vector<AdaptedLinear> adapted_linears(TransformerModelImpl& model) {
  std::vector<AdaptedLinear> adapted;
  for (size_t l = 0; l < model.layers().size(); ++l) {
    for (const std::string& name : lora_projection_names()) {
      LinearImpl* linear = projection(*model.layers()[l], name);
      if (linear->has_adapter()) adapted.push_back({module_path(l, name), linear});
    }
  }
  return adapted;
}

bool is_lora_parameter(const std::string& name) {
  return name.find(".lora_A.") != std::string::npos || name.find(".lora_B.") != std::string::npos;
}

torch::Tensor lora_delta(const torch::Tensor& a, const torch::Tensor& b, double scaling) {
  return torch::mm(b.to(torch::kFloat), a.to(torch::kFloat)).mul_(scaling);
}

AdaptersDisabled::AdaptersDisabled(TransformerModelImpl& model) : adapted_(adapted_linears(model)) {
  for (const AdaptedLinear& adapted : adapted_) adapted.linear->set_adapter_enabled(false);
}

AdaptersDisabled::~AdaptersDisabled() {
  for (const AdaptedLinear& adapted : adapted_) adapted.linear->set_adapter_enabled(true);
}

}  // namespace ooze::models
