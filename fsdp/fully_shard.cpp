#include "fsdp/fully_shard.h"

#include <map>
#include <set>
#include <utility>

#include "core/bfloat16_conversion.h"
#include "core/error.h"
#include "core/shared_memory_segment.h"
#include "fsdp/storage.h"

namespace ooze::fsdp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What one recorded run of a unit needs in backward. Held by the Function node (as a capsule in
// saved_data) until its backward ran.
struct UnitCall : torch::CustomClassHolder {
  FullyShardedModule* owner = nullptr;
  size_t unit = 0;
  size_t forward_position = 0;
  FullyShardedModule::UnitBlock block;
  bool has_input = false;
  torch::Tensor inner_input;   // detached input; requires grad when the outer input did
  torch::Tensor inner_output;  // the block's output, root of the recorded graph
};

// One node in the outer graph per unit run. Arguments: the call (not a variable, no edge),
// the unit's input (edge 0; may not require grad, or be an empty stand-in), and the anchor (edge
// 1), which always requires grad so that the node exists and its backward runs even when only the
// parameters need gradients.
class UnitFunction : public torch::autograd::Function<UnitFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const c10::intrusive_ptr<UnitCall>& call,
                               const torch::Tensor& input, const torch::Tensor& /*anchor*/) {
    // apply() runs this with grad disabled: record the block's own graph instead.
    torch::AutoGradMode enable_grad(true);
    if (call->has_input) {
      call->inner_input = input.detach();
      call->inner_input.requires_grad_(input.requires_grad());
    }
    call->inner_output = call->block(call->inner_input);
    call->block = nullptr;  // what it captured is no longer needed
    ctx->saved_data["call"] = at::IValue::make_capsule(call);
    // A detached alias: returning inner_output itself would make apply() overwrite its grad_fn.
    return call->inner_output.detach();
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto call =
        c10::static_intrusive_pointer_cast<UnitCall>(ctx->saved_data["call"].toCapsule());
    ctx->saved_data.erase("call");
    FullyShardedModule& owner = *call->owner;
    owner.before_unit_backward(call->unit, call->forward_position);

    const std::vector<FlatParamEntry>& entries = owner.unit(call->unit).entries();
    std::vector<torch::Tensor> wrt;
    const bool want_input_grad =
        call->has_input && call->inner_input.requires_grad() && ctx->needs_input_grad(0);
    if (want_input_grad) wrt.push_back(call->inner_input);
    std::vector<size_t> param_slot;  // entry index of each parameter in wrt
    for (size_t i = 0; i < entries.size(); ++i) {
      if (entries[i].parameter.requires_grad()) {
        wrt.push_back(entries[i].parameter);
        param_slot.push_back(i);
      }
    }
    std::vector<torch::Tensor> computed;
    if (!wrt.empty() && call->inner_output.requires_grad()) {
      computed = torch::autograd::grad({call->inner_output}, wrt, {grad_outputs[0]},
                                       /*retain_graph=*/false, /*create_graph=*/false,
                                       /*allow_unused=*/true);
    }
    call->inner_output = torch::Tensor();
    call->inner_input = torch::Tensor();

    std::vector<torch::Tensor> param_grads(entries.size());
    torch::Tensor input_grad;
    if (!computed.empty()) {
      const size_t first_param = want_input_grad ? 1 : 0;
      if (want_input_grad) input_grad = computed[0];
      for (size_t k = 0; k < param_slot.size(); ++k) {
        param_grads[param_slot[k]] = computed[first_param + k];
      }
    }
    // Always reduce (zeros when nothing flowed): every rank must issue the same collectives.
    owner.after_unit_backward(call->unit, param_grads);
    return {torch::Tensor(), input_grad, torch::Tensor()};
  }
};

bool has_prefix(const std::string& name, const std::string& prefix) {
  return name == prefix ||
         (name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0 &&
          name[prefix.size()] == '.');
}

}  // namespace

const OptionFields<FullyShardOptions>& FullyShardOptions::fields() {
  using O = FullyShardOptions;
  static const OptionFields<O> fields = [] {
    OptionFields<O> f;
    f.section("fsdp");
    // bf16 is the only other dtype the policy takes (MixedPrecisionPolicy::validate).
    f.add_custom(
        "bf16", FieldType::kBool,
        [](const O& o) {
          return nlohmann::json(o.mixed_precision.param_dtype == torch::kBFloat16);
        },
        [](const nlohmann::json& value, O& o) {
          o.mixed_precision.param_dtype = value.get<bool>() ? torch::kBFloat16 : torch::kFloat;
        },
        "All-gather and compute in bf16; master weights, gradients and AdamW state stay fp32.");
    f.add("reshard_after_forward", &O::reshard_after_forward,
          "Free each layer's gathered parameters after its forward and gather them again for "
          "backward (ZeRO-3); --no-reshard-after-forward keeps them (ZeRO-2).");
    f.add("prefetch", &O::prefetch,
          "Gather the next layer's parameters while the current one computes.");
    f.add_internal("sync_module_states", &O::sync_module_states);
    f.add_internal("replicate_frozen", &O::replicate_frozen);
    return f;
  }();
  return fields;
}

FullyShardedModule::FullyShardedModule(torch::nn::Module& module,
                                       const std::vector<std::string>& unit_prefixes,
                                       std::shared_ptr<comm::Communicator> comm,
                                       FullyShardOptions options)
    : comm_(std::move(comm)), options_(options) {
  options_.mixed_precision.validate();
  const auto named = module.named_parameters(/*recurse=*/true);
  if (named.size() == 0) {
    throw Error("fully_shard: the module '" + module.name() + "' has no parameters to shard");
  }

  // Assign every parameter to exactly one unit: the prefix that claims it, or the root.
  const size_t root_slot = unit_prefixes.size();
  std::vector<std::vector<std::pair<std::string, torch::Tensor>>> members(root_slot + 1);
  std::map<const c10::TensorImpl*, std::pair<std::string, size_t>> owner_of;  // tied tensors
  std::vector<bool> matched(root_slot + 1, false);
  for (const auto& item : named) {
    const std::string& name = item.key();
    size_t slot = root_slot;
    for (size_t u = 0; u < unit_prefixes.size(); ++u) {
      if (!has_prefix(name, unit_prefixes[u])) continue;
      if (slot != root_slot) {
        throw Error("fully_shard: parameter '" + name + "' belongs to two units, '" +
                    unit_prefixes[slot] + "' and '" + unit_prefixes[u] +
                    "'; every parameter must belong to exactly one unit (units must not nest "
                    "or repeat)");
      }
      slot = u;
    }
    const auto [it, inserted] =
        owner_of.emplace(item.value().unsafeGetTensorImpl(), std::make_pair(name, slot));
    if (!inserted) {
      if (it->second.second != slot) {
        const auto unit_name = [&](size_t s) {
          return s == root_slot ? std::string(kRootUnitName) : unit_prefixes[s];
        };
        throw Error("fully_shard: '" + name + "' and '" + it->second.first +
                    "' are the same tensor but fall into units '" + unit_name(slot) + "' and '" +
                    unit_name(it->second.second) + "'; put tied parameters into one unit");
      }
      continue;  // a tied alias in the same unit is sharded once
    }
    matched[slot] = true;
    if (options_.replicate_frozen && !item.value().requires_grad()) continue;
    members[slot].emplace_back(name, item.value());
  }
  for (size_t u = 0; u < unit_prefixes.size(); ++u) {
    if (!matched[u]) {
      throw Error("fully_shard: unit '" + unit_prefixes[u] + "' matches no parameter of '" +
                  module.name() + "' (the first parameter is named '" + named.begin()->key() +
                  "'); give module name prefixes such as 'model.layers.0'");
    }
  }

  for (size_t slot = 0; slot <= root_slot; ++slot) {
    if (members[slot].empty()) continue;  // the root, or a unit of frozen parameters
    if (options_.sync_module_states && world_size() > 1) broadcast_from_rank0(members[slot]);
    const std::string name = slot == root_slot ? kRootUnitName : unit_prefixes[slot];
    if (slot == root_slot) root_ = units_.size();
    units_.push_back(std::make_unique<FlatParam>(name, std::move(members[slot]), comm_,
                                                 options_.mixed_precision));
  }
  if (units_.empty()) {
    throw Error("fully_shard: every parameter of '" + module.name() +
                "' is frozen and stays replicated (replicate_frozen): nothing to shard or train");
  }
  held_.assign(units_.size(), false);
  const auto device = torch::TensorOptions().device(units_.front()->master_shard().device());
  anchor_ = torch::zeros({}, device).requires_grad_(true);
  no_input_ = torch::empty({0}, device);
}

FullyShardedModule::~FullyShardedModule() = default;

void FullyShardedModule::broadcast_from_rank0(
    const std::vector<std::pair<std::string, torch::Tensor>>& params) {
  torch::NoGradGuard no_grad;
  c10::ScalarType dtype = params.front().second.scalar_type();
  for (const auto& item : params) {
    if (item.second.scalar_type() != dtype) dtype = torch::kFloat;
  }
  std::vector<torch::Tensor> pieces;
  for (const auto& item : params) pieces.push_back(item.second.detach().reshape({-1}).to(dtype));
  torch::Tensor flat = torch::cat(pieces);
  comm_->broadcast(flat, 0);
  int64_t offset = 0;
  for (const auto& item : params) {
    const int64_t n = item.second.numel();
    item.second.detach().copy_(flat.narrow(0, offset, n).view(item.second.sizes()));
    offset += n;
  }
}

std::optional<size_t> FullyShardedModule::find_unit(const std::string& name) const {
  for (size_t i = 0; i < units_.size(); ++i) {
    if (units_[i]->name() == name) return i;
  }
  return std::nullopt;
}

size_t FullyShardedModule::unit_index(const std::string& name) const {
  if (const std::optional<size_t> found = find_unit(name)) return *found;
  std::string known;
  for (const auto& unit : units_) known += (known.empty() ? "" : ", ") + unit->name();
  throw Error("fsdp: no unit named '" + name + "'; the units are: " + known);
}

void FullyShardedModule::check_unit_index(size_t unit, const char* what) const {
  if (unit >= units_.size()) {
    throw Error(std::string("fsdp ") + what + ": unit index " + std::to_string(unit) +
                " is out of range (there are " + std::to_string(units_.size()) + " units)");
  }
}

torch::Tensor FullyShardedModule::run_unit(size_t unit, const UnitBlock& block,
                                           const torch::Tensor& input,
                                           std::optional<size_t> prefetch_next) {
  check_unit_index(unit, "run_unit");
  if (prefetch_next) check_unit_index(*prefetch_next, "run_unit prefetch");
  if (!block)
    throw Error("fsdp run_unit: the block of unit '" + units_[unit]->name() + "' is empty");
  FlatParam& flat = *units_[unit];
  flat.unshard_async();
  if (options_.prefetch && prefetch_next && *prefetch_next != unit) {
    units_[*prefetch_next]->unshard_async();
  }
  flat.wait_unshard();

  bool params_require_grad = false;
  for (const FlatParamEntry& entry : flat.entries()) {
    params_require_grad = params_require_grad || entry.parameter.requires_grad();
  }
  const bool record = torch::GradMode::is_enabled() &&
                      (params_require_grad || (input.defined() && input.requires_grad()));
  if (!record) {  // no backward will come: this is just the forward
    torch::Tensor output = block(input);
    if (!held_[unit]) flat.reshard();
    return output;
  }
  auto call = c10::make_intrusive<UnitCall>();
  call->owner = this;
  call->unit = unit;
  call->forward_position = forward_order_.size();
  call->block = block;
  call->has_input = input.defined();
  forward_order_.push_back(unit);
  // apply() cannot take an undefined tensor: an empty one stands in (the block gets undefined).
  torch::Tensor output = UnitFunction::apply(call, input.defined() ? input : no_input_, anchor_);
  if (options_.reshard_after_forward && !held_[unit]) flat.reshard();
  return output;
}

void FullyShardedModule::hold_unsharded(size_t unit) {
  check_unit_index(unit, "hold_unsharded");
  held_[unit] = true;
  units_[unit]->unshard();
}

void FullyShardedModule::unshard_async(size_t unit) {
  check_unit_index(unit, "unshard_async");
  units_[unit]->unshard_async();
}

void FullyShardedModule::before_unit_backward(size_t unit, size_t forward_position) {
  FlatParam& flat = *units_[unit];
  flat.unshard_async();
  if (options_.prefetch && forward_position > 0 && forward_position <= forward_order_.size()) {
    const size_t previous = forward_order_[forward_position - 1];
    if (previous != unit && !held_[previous]) units_[previous]->unshard_async();
  }
  flat.wait_unshard();
}

void FullyShardedModule::after_unit_backward(size_t unit,
                                             const std::vector<torch::Tensor>& parameter_grads) {
  FlatParam& flat = *units_[unit];
  // One reduce-scatter in flight, as FSDP2 keeps: it overlaps this unit's with the next unit's
  // backward, and each holds its unit's full gradients until waited, so letting them pile up to
  // finish_backward() kept the whole model's gradients unsharded at the end of every backward
  // (2.4 GB per rank for a 0.6B model, whatever W).
  wait_pending_reduces();
  flat.wait_reduce_grad();  // a previous micro-batch's reduce, if it was never finished
  flat.reduce_grad_async(parameter_grads);
  pending_reduces_.push_back(unit);
  if (!held_[unit]) flat.reshard();
}

void FullyShardedModule::wait_pending_reduces() {
  for (size_t u : pending_reduces_) units_[u]->wait_reduce_grad();
  pending_reduces_.clear();
}

void FullyShardedModule::finish_backward(bool release_held) {
  for (size_t u = 0; u < units_.size(); ++u) {
    if (!held_[u]) continue;
    FlatParam& flat = *units_[u];
    bool trainable = false;
    std::vector<torch::Tensor> grads;
    for (const FlatParamEntry& entry : flat.entries()) {
      trainable = trainable || entry.parameter.requires_grad();
      grads.push_back(entry.parameter.grad());
      entry.parameter.mutable_grad() = torch::Tensor();
    }
    if (!trainable) continue;
    flat.wait_reduce_grad();
    flat.reduce_grad_async(grads);
    pending_reduces_.push_back(u);
  }
  wait_pending_reduces();
  if (release_held) {
    reshard_all();
    return;
  }
  for (size_t u = 0; u < units_.size(); ++u) {
    if (!held_[u]) units_[u]->reshard();
  }
}

torch::Tensor FullyShardedModule::gather_full_master(size_t unit, at::ScalarType dtype,
                                                     torch::Tensor* buffer) {
  check_unit_index(unit, "gather_full_master");
  FlatParam& flat = *units_[unit];
  const torch::Tensor& shard = flat.master_shard();
  if (world_size() == 1 && dtype == shard.scalar_type()) return shard;
  const int64_t bytes = flat.padded_numel() * static_cast<int64_t>(c10::elementSize(dtype));
  torch::Tensor fresh;
  torch::Tensor& storage = buffer != nullptr ? *buffer : fresh;
  if (!storage.defined() || storage.numel() < bytes) {
    storage = torch::Tensor();  // the old one goes before the larger one is allocated
    // Peers on this host read a kept buffer at memory speed when it lies in a segment, which
    // they map once (comm/same_host_collectives.h).
    storage = buffer != nullptr && world_size() > 1
                  ? empty_for_same_host_peers(bytes, shard.device())
                  : torch::empty({bytes}, shard.options().dtype(torch::kUInt8));
  }
  torch::Tensor full = storage.narrow(0, 0, bytes).view(dtype);
  // The shard goes to its own place in the result, converted as it is copied; the gather then
  // fills the other ranks' places around it. Converting before gathering moves fewer bytes
  // when `dtype` is narrower, and each rank converts only its own share.
  torch::Tensor mine = full.narrow(0, rank() * flat.shard_numel(), flat.shard_numel());
  copy_converted(mine, shard);
  if (world_size() > 1) comm_->all_gather(full, mine);
  return full;
}

void FullyShardedModule::reshard_all() {
  for (size_t u = 0; u < units_.size(); ++u) {
    units_[u]->reshard();
    held_[u] = false;
  }
  forward_order_.clear();
}

void FullyShardedModule::zero_grad() {
  for (auto& unit : units_) {
    unit->zero_grad();
    for (const FlatParamEntry& entry : unit->entries())
      entry.parameter.mutable_grad() = torch::Tensor();
  }
}

size_t FullyShardedModule::allocated_bytes() const {
  std::set<const c10::StorageImpl*> seen;
  size_t total = 0;
  const auto count = [&](const torch::Tensor& tensor) {
    if (!tensor.defined()) return;
    if (seen.insert(tensor.storage().unsafeGetStorageImpl()).second) total += storage_bytes(tensor);
  };
  for (const auto& unit : units_) {
    count(unit->master_shard());
    count(const_cast<FlatParam&>(*unit).grad_shard());
    count(unit->unsharded_buffer());
  }
  return total;
}

void FullyShardedModule::sleep() {
  for (auto& unit : units_) unit->sleep();
}

void FullyShardedModule::wake_up() {
  for (auto& unit : units_) unit->wake_up();
}

}  // namespace ooze::fsdp
