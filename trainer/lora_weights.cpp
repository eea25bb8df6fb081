#include "trainer/lora_weights.h"

#include <map>

#include "core/error.h"
#include "models/lora.h"

namespace ooze::trainer {
namespace {

// The element range of `name` in its unit's flat vector.
struct FlatRange {
  size_t unit = 0;
  int64_t offset = 0;
  std::vector<int64_t> shape;

  at::Tensor in(const at::Tensor& gathered) const {
    int64_t numel = 1;
    for (int64_t size : shape) numel *= size;
    return gathered.narrow(0, offset, numel).view(shape);
  }
};

}  // namespace

std::vector<SyncedTensor> merged_lora_weights(fsdp::FsdpTransformer& model, bool adapted_only) {
  fsdp::FullyShardedModule& sharded = model.sharded();
  std::map<std::string, FlatRange> adapter_ranges;
  for (size_t u = 0; u < sharded.num_units(); ++u) {
    for (const fsdp::FlatParamEntry& entry : sharded.unit(u).entries()) {
      adapter_ranges[entry.name] = FlatRange{u, entry.offset, entry.shape};
    }
  }
  std::map<std::string, double> scaling_of;  // adapted weight name -> alpha / r
  for (const models::AdaptedLinear& adapted : models::adapted_linears(*model.model())) {
    scaling_of[adapted.name + ".weight"] = adapted.linear->adapter_scaling();
  }
  if (scaling_of.empty()) throw Error("merged_lora_weights: the model has no LoRA adapters");

  std::vector<SyncedTensor> tensors;
  for (const auto& item : model.model()->named_parameters(/*recurse=*/true)) {
    const std::string& name = item.key();
    if (models::is_lora_parameter(name)) continue;
    const at::Tensor base = item.value().detach();
    const auto adapted = scaling_of.find(name);
    if (adapted == scaling_of.end()) {
      if (!adapted_only) {
        tensors.push_back(SyncedTensor{name, base.sizes().vec(), std::nullopt,
                                       [base](const at::Tensor&) { return base; }});
      }
      continue;
    }
    const std::string module = name.substr(0, name.size() - std::string(".weight").size());
    const FlatRange a = adapter_ranges.at(module + ".lora_A.weight");
    const FlatRange b = adapter_ranges.at(module + ".lora_B.weight");
    tensors.push_back(
        SyncedTensor{name, base.sizes().vec(), a.unit,
                     [base, a, b, scaling = adapted->second](const at::Tensor& gathered) {
                       return models::lora_delta(a.in(gathered), b.in(gathered), scaling)
                           .add_(base.to(at::kFloat));
                     }});
  }
  return tensors;
}

std::vector<SyncedTensor> lora_adapter_weights(fsdp::FsdpTransformer& model, bool adapters_only) {
  // The adapters come from their units exactly as a full model's parameters do.
  std::map<std::string, SyncedTensor> sharded;
  for (SyncedTensor& tensor : sharded_parameters(model.sharded())) {
    sharded.emplace(tensor.name, std::move(tensor));
  }
  std::vector<SyncedTensor> tensors;
  for (const auto& item : model.model()->named_parameters(/*recurse=*/true)) {
    const auto adapter = sharded.find(item.key());
    if (adapter != sharded.end()) {
      tensors.push_back(adapter->second);
    } else if (!adapters_only) {
      const at::Tensor base = item.value().detach();
      tensors.push_back(SyncedTensor{item.key(), base.sizes().vec(), std::nullopt,
                                     [base](const at::Tensor&) { return base; }});
    }
  }
  return tensors;
}

}  // namespace ooze::trainer
