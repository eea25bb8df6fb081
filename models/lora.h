// LoRA (Hu et al., 2021) on the decoder's linear layers, with PEFT's and verl's names: the base
// weights are frozen and each targeted projection learns a low-rank update (models/linear.h):
//
//   W' = W + (alpha / r) * B A,   A: [r, in] ~ U(-1/sqrt(in), 1/sqrt(in)) (PEFT's kaiming init),
//                                 B: [out, r] = 0, so the adapted model starts as the base exactly.
//
//   TransformerModel model(config);
//   load_hf_weights(*model, dir);                  // the base, loaded first
//   add_lora_adapters(*model, options, seed);      // every other parameter stops requiring grad
//   { AdaptersDisabled base(*model); ... }          // the base alone: the reference model
//
// The adapters' parameters are "model.layers.N.self_attn.q_proj.lora_A.weight" and so on; a
// PEFT adapter file names them with "base_model.model." in front (models/peft_adapter.h).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/option_fields.h"
#include "models/linear.h"
#include "models/transformer.h"

namespace ooze::models {

// The projections LoRA may adapt, in a decoder layer's forward order; "all-linear" means all.
const std::vector<std::string>& lora_projection_names();

// What a LoRA run's rollout engines receive after each step (--lora-sync): the adapted weights
// with the adapters merged in (the engines run the plain model), or the adapters alone (the
// engines hold adapters too, computed beside each adapted projection: fewer bytes, a little
// more compute per token).
enum class LoraSync { kMerged, kAdapter };
const char* lora_sync_name(LoraSync sync);

struct LoraOptions {
  int64_t rank = 0;  // --lora-rank: 0 trains the full model
  double alpha = 16;
  double dropout = 0;
  std::vector<std::string> target_modules = {"all-linear"};
  std::string load;  // --lora-load: a PEFT adapter directory to start from
  LoraSync sync = LoraSync::kMerged;

  bool enabled() const { return rank > 0; }
  // target_modules expanded ("all-linear") and checked, in lora_projection_names() order.
  // Throws ConfigError naming an unknown module.
  std::vector<std::string> target_projections() const;
  double scaling() const { return alpha / static_cast<double>(rank); }

  // --lora-rank, --lora-alpha, --lora-dropout, --target-modules, --lora-load, --lora-sync
  // ("lora" section).
  static const OptionFields<LoraOptions>& fields();
};

// A targeted projection: its module name ("model.layers.0.self_attn.q_proj") and the layer.
struct AdaptedLinear {
  std::string name;
  LinearImpl* linear = nullptr;
};

// Adds an adapter in `model`'s dtype to every targeted projection of every layer, A drawn from
// (seed, its name) as TransformerModel::init_weights draws, B zero; afterwards only the
// adapters' parameters require grad. Throws ConfigError for a bad rank or module name.
void add_lora_adapters(TransformerModelImpl& model, const LoraOptions& options, uint64_t seed);

// The projections that carry an adapter, in parameter order.
std::vector<AdaptedLinear> adapted_linears(TransformerModelImpl& model);

// True for an adapter's parameter name ("...q_proj.lora_A.weight").
bool is_lora_parameter(const std::string& name);

// (alpha / r) * B A in fp32: what the adapter adds to the weight. a: [r, in], b: [out, r].
torch::Tensor lora_delta(const torch::Tensor& a, const torch::Tensor& b, double scaling);

// Turns every adapter of `model` off for its lifetime: the model computes as the base.
class AdaptersDisabled {
 public:
  explicit AdaptersDisabled(TransformerModelImpl& model);
  ~AdaptersDisabled();
  AdaptersDisabled(const AdaptersDisabled&) = delete;
  AdaptersDisabled& operator=(const AdaptersDisabled&) = delete;

 private:
  std::vector<AdaptedLinear> adapted_;
};

}  // namespace ooze::models
